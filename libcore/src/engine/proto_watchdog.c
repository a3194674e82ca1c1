/* Protocol layer: what a watchdog renewal's answer means. No I/O. */
#include "proto.h"

hl_renew_outcome hl_renew_classify(const redisReply *r)
{
    if (!r)
        return HL_RENEW_TROUBLE;
    if (r->type == REDIS_REPLY_ERROR) {
        if (hl_reply_is_noscript(r))
            return HL_RENEW_EVAL;
        unsigned slot;
        char host[256];
        int port;
        if (hl_parse_redirect(r, &slot, host, sizeof host, &port) || hl_reply_not_master(r))
            return HL_RENEW_REDIRECT;
        return HL_RENEW_TROUBLE;
    }
    /* renew.lua answers 1 (renewed) or 0 (the owner's field is gone);
     * anything else is no answer we can act on: try again next tick */
    if (r->type != REDIS_REPLY_INTEGER)
        return HL_RENEW_TROUBLE;
    if (r->integer == 1)
        return HL_RENEW_RENEWED;
    if (r->integer == 0)
        return HL_RENEW_LOST;
    return HL_RENEW_TROUBLE;
}

int64_t hl_renew_period(int64_t watchdog_lease_ms)
{
    int64_t p = watchdog_lease_ms / 3;
    return p < 1 ? 1 : p;
}

void hl_cmd_renew_many(hl_cmd *cmd, hl_cmd_wide *wide, const hl_names *const *names,
                       const char *const *owners, int n, int64_t lease_ms)
{
    if (n < 1)
        n = 1; /* a caller error: renew the first hold only */
    if (n > HL_RENEW_MANY_MAX)
        n = HL_RENEW_MANY_MAX;
    hl_cmd_begin_script(cmd, HL_SCRIPT_RENEW_MANY, n);
    hl_cmd_use_wide(cmd, wide);
    for (int i = 0; i < n; i++)
        hl_cmd_add_str(cmd, names[i]->name);
    hl_cmd_add_num(cmd, lease_ms);
    for (int i = 0; i < n; i++)
        hl_cmd_add_str(cmd, owners[i]);
}

int hl_renew_classify_many(const redisReply *r, int n, hl_renew_outcome *out)
{
    hl_renew_outcome all = HL_RENEW_TROUBLE;
    if (r && r->type == REDIS_REPLY_ERROR)
        all = hl_renew_classify(r);
    else if (r && r->type == REDIS_REPLY_ARRAY && n >= 1 && r->elements == (size_t)n) {
        int ok = 1;
        for (int i = 0; i < n && ok; i++) {
            const redisReply *e = r->element[i];
            ok = e && e->type == REDIS_REPLY_INTEGER && (e->integer == 0 || e->integer == 1);
        }
        if (ok) {
            for (int i = 0; i < n; i++)
                out[i] = r->element[i]->integer == 1 ? HL_RENEW_RENEWED : HL_RENEW_LOST;
            return 1;
        }
    }
    for (int i = 0; i < n; i++)
        out[i] = all;
    return 0;
}

hl_renew_outcome hl_renew_unacked(hl_renew_outcome o, int acked)
{
    return o == HL_RENEW_RENEWED && !acked ? HL_RENEW_TROUBLE : o;
}

int64_t hl_renew_doubt_after(int64_t watchdog_lease_ms)
{
    int64_t after = watchdog_lease_ms - watchdog_lease_ms / 5;
    return after < 1 ? 1 : after;
}

int64_t hl_renew_doubt_at(int64_t confirmed_at, int64_t watchdog_lease_ms,
                          int64_t renew_sent_at, int64_t command_timeout_ms)
{
    int64_t at = confirmed_at + hl_renew_doubt_after(watchdog_lease_ms);
    if (renew_sent_at >= 0 && renew_sent_at >= at) {
        int64_t grace = renew_sent_at + (command_timeout_ms > 0 ? command_timeout_ms : 0);
        int64_t end = confirmed_at + watchdog_lease_ms;
        at = grace < end ? grace : end;
        if (at < renew_sent_at)
            at = renew_sent_at; /* the lease already ran out: report now */
    }
    return at;
}

int hl_renew_in_doubt(int64_t confirmed_at, int64_t watchdog_lease_ms, int64_t renew_sent_at,
                      int64_t command_timeout_ms, int64_t now)
{
#ifdef HILOCK_SAFETY_BREAK_NO_DOUBT
    /* the safety harness's self-test build only (CMake HILOCK_SAFETY_BREAK):
     * renewals without the doubt rule (and hl_holds_doubt_at) */
    (void)confirmed_at, (void)watchdog_lease_ms, (void)renew_sent_at, (void)command_timeout_ms;
    (void)now;
    return 0;
#endif
    return now >= hl_renew_doubt_at(confirmed_at, watchdog_lease_ms,
                                    renew_sent_at >= 0 ? renew_sent_at : now, command_timeout_ms);
}
