/* Protocol layer: the read-write lock (Redisson's RReadWriteLock layout).
 * Commands for both sides; the replies have the reentrant lock's shapes,
 * so the acquire, release and watchdog machines run them unchanged. No I/O. */
#include <string.h>

#include "proto.h"

#define HL_MSG_WRITER_MAY_GO "0" /* read unlock: wake one (a writer) */
#define HL_MSG_ALL_MAY_GO "1"    /* write unlock / force: wake every waiter */

void hl_rw_cmd_release(hl_cmd *cmd, hilock_kind kind, const hl_names *n, const char *owner,
                       int64_t lease_ms, const char *latch_key, int64_t latch_ttl_ms)
{
    if (kind == HILOCK_KIND_WRITE) {
        hl_cmd_begin_script(cmd, HL_SCRIPT_RW_WRITE_UNLOCK, 3);
        hl_cmd_add_str(cmd, n->name);
        hl_cmd_add_str(cmd, n->rw_channel);
        hl_cmd_add_str(cmd, latch_key);
        hl_cmd_add_str(cmd, HL_MSG_ALL_MAY_GO);
        hl_cmd_add_num(cmd, lease_ms);
        hl_cmd_add_str(cmd, owner);
        hl_cmd_add_num(cmd, latch_ttl_ms);
        hl_cmd_add_str(cmd, n->publish);
        return;
    }
    /* the read side's lease lives in its per-hold keys: nothing to re-apply */
    (void)lease_ms;
    hl_cmd_begin_script(cmd, HL_SCRIPT_RW_READ_UNLOCK, 4);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->rw_channel);
    hl_cmd_add_str(cmd, latch_key);
    hl_cmd_add_str(cmd, n->rw_prefix);
    hl_cmd_add_str(cmd, HL_MSG_WRITER_MAY_GO);
    hl_cmd_add_str(cmd, owner);
    hl_cmd_add_num(cmd, latch_ttl_ms);
    hl_cmd_add_str(cmd, n->publish);
}

void hl_rw_cmd_force(hl_cmd *cmd, const hl_names *n)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_RW_FORCE, 2);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->rw_channel);
    hl_cmd_add_str(cmd, HL_MSG_ALL_MAY_GO);
    hl_cmd_add_str(cmd, n->publish);
}

const char *hl_hold_channel(hilock_kind kind, const hl_names *n)
{
    return kind == HILOCK_KIND_READ || kind == HILOCK_KIND_WRITE ? n->rw_channel : n->channel;
}

int hl_hold_check_on(const hl_ps_event *ev)
{
    return ev->type == HL_PS_MESSAGE && hl_ps_wakes(HL_WAKE_LOCK, ev) != 0;
}

int hl_hold_check_on_kind(hilock_kind kind, const hl_ps_event *ev)
{
    if (kind == HL_KIND_PERMIT)
        return ev->type == HL_PS_MESSAGE;
    return hl_hold_check_on(ev);
}

void hl_cmd_hold_check_kind(hl_cmd *cmd, hilock_kind kind, const hl_names *n, const char *owner)
{
    if (kind == HL_KIND_PERMIT)
        hl_permit_cmd_check(cmd, n, owner);
    else
        hl_cmd_hold_check(cmd, n, owner);
}

int hl_hold_check_gone_kind(hilock_kind kind, const redisReply *r, int *gone)
{
    return kind == HL_KIND_PERMIT ? hl_permit_check_gone(r, gone) : hl_hold_check_gone(r, gone);
}

void hl_cmd_hold_check(hl_cmd *cmd, const hl_names *n, const char *owner)
{
    hl_cmd_hexists(cmd, n, owner);
}

int hl_hold_check_gone(const redisReply *r, int *gone)
{
    int64_t v;
    int rc = hl_decode_flag(r, &v);
    if (rc)
        return rc;
    *gone = v == 0;
    return 0;
}

void hl_cmd_renew_kind(hl_cmd *cmd, hilock_kind kind, const hl_names *n, const char *owner,
                       int64_t lease_ms)
{
    if (kind == HL_KIND_PERMIT) { /* a new lease for the permit */
        hl_permit_cmd_renew(cmd, n, owner, lease_ms);
        return;
    }
    if (kind != HILOCK_KIND_READ) { /* write side: its field guards it, as a lock's */
        hl_cmd_renew(cmd, n, owner, lease_ms);
        return;
    }
    hl_cmd_begin_script(cmd, HL_SCRIPT_RW_READ_RENEW, 2);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->rw_prefix);
    hl_cmd_add_num(cmd, lease_ms);
    hl_cmd_add_str(cmd, owner);
}

int hl_renew_alone(hilock_kind kind)
{
    return kind == HILOCK_KIND_READ || kind == HL_KIND_PERMIT;
}

void hl_cmd_is_locked(hl_cmd *cmd, hilock_kind kind, const hl_names *n)
{
    if (kind != HILOCK_KIND_READ && kind != HILOCK_KIND_WRITE) {
        hl_cmd_exists(cmd, n);
        return;
    }
    hl_cmd_begin_plain(cmd);
    hl_cmd_add_str(cmd, "HGET");
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, "mode");
}

int hl_decode_is_locked(hilock_kind kind, const redisReply *r, int64_t *out)
{
    if (kind != HILOCK_KIND_READ && kind != HILOCK_KIND_WRITE)
        return hl_decode_flag(r, out);
    if (!r)
        return HILOCK_EPROTO;
    if (r->type == REDIS_REPLY_ERROR)
        return r->str && strstr(r->str, "WRONGTYPE") ? HILOCK_EWRONGTYPE : HILOCK_EPROTO;
    if (r->type == REDIS_REPLY_NIL) {
        *out = 0;
        return 0;
    }
    if (r->type != REDIS_REPLY_STRING || !r->str)
        return HILOCK_EPROTO;
    const char *want = kind == HILOCK_KIND_WRITE ? "write" : "read";
    *out = r->len == strlen(want) && memcmp(r->str, want, r->len) == 0;
    return 0;
}
