/* Protocol layer: the release machine and the settling of an acquire
 * attempt whose reply never came. No I/O, no threads, time passed in. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

enum { RL_SEND = 1, RL_DONE };

int64_t hl_latch_ttl(int64_t command_timeout_ms)
{
    /* long enough for the resend after a lost reply to find it */
    return 2 * (command_timeout_ms > 0 ? command_timeout_ms : 0) + 1000;
}

int64_t hl_acquire_latch_ttl(int64_t command_timeout_ms, int64_t connect_timeout_ms)
{
    /* a retry after a lost reply: reconnect and command, twice */
    return 2 * ((command_timeout_ms > 0 ? command_timeout_ms : 0) +
                (connect_timeout_ms > 0 ? connect_timeout_ms : 0)) +
           1000;
}

/* The unlock latch of one release. A request id ending in ":e<epoch>:<seq>"
 * (hl_release_request_id) gives the reentrant, fenced and fair releases one
 * latch per owner that the owner's calls overwrite,
 * "<prefix>:<owner>:owner|<seq>" (hl_cmd_release sends the key and the seq
 * apart; the script keeps "<seq>:<answer>"), so a pair leaves no key for the
 * server to expire. (The ":owner" suffix: a request id such as the drain's
 * "<client>:<seq>" has an owner's shape, "<client>:<thread>", and its latch
 * per request must never be this one.)
 *
 * The late-copy rule: seq orders the owner's calls (a driver numbers its
 * acquires and releases from one counter, hl_release_request_id and
 * hl_acquire_latch_arg), and the latch keeps the highest number that changed
 * the lock: a release answers from it when the number is its own, changes
 * nothing when the number is higher (a late copy of an older release: the
 * owner has released or been granted the lock again since), and runs when it
 * is lower. A grant writes its acquire call's number there, and every grant,
 * renewal, extension and partial release keeps the latch alive as long as the
 * hold (scripts/unlock_latch.lua). So a copy of a release that arrives after
 * any delay either finds the owner holding nothing (and changes nothing) or
 * finds a number above its own: it never releases a later hold. The epoch
 * in the id is not part of the key (one latch per owner whatever it is).
 * Other request ids, and the read-write sides, get a key per request,
 * "<prefix>:<request id>". */
static int digits(const char *p, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return 0;
    return 1;
}

static char *latch_key(const hl_names *n, hilock_kind kind, const char *owner,
                       const char *request_id)
{
    const char *seq = strrchr(request_id, ':'), *ep = NULL;
    if (seq && digits(seq + 1, strlen(seq + 1)))
        for (ep = seq; ep > request_id && ep[-1] != ':'; ep--)
            ;
    int per_owner = owner && ep && ep > request_id && ep[0] == 'e' &&
                    digits(ep + 1, (size_t)(seq - ep - 1)) &&
                    (kind == HILOCK_KIND_REENTRANT || kind == HILOCK_KIND_FENCED ||
                     kind == HILOCK_KIND_FAIR);
    size_t len = strlen(n->latch_prefix) + strlen(request_id) + (owner ? strlen(owner) : 0) + 9;
    char *k = malloc(len);
    if (!k)
        return NULL;
    hl_sb b;
    hl_sb_init(&b, k, len);
    hl_sb_str(&b, n->latch_prefix);
    hl_sb_mem(&b, ":", 1);
    if (per_owner) {
        hl_sb_str(&b, owner);
        hl_sb_mem(&b, ":owner|", 7);
        hl_sb_str(&b, seq + 1);
    } else {
        hl_sb_str(&b, request_id);
    }
    return k;
}

int hl_release_request_id(char *buf, size_t len, const char *client_id, uint64_t epoch,
                          uint64_t seq)
{
    hl_sb b;
    if (!len)
        return HILOCK_EINVAL;
    hl_sb_init(&b, buf, len);
    hl_sb_str(&b, client_id);
    hl_sb_mem(&b, ":e", 2);
    hl_sb_u64(&b, epoch);
    hl_sb_mem(&b, ":", 1);
    hl_sb_u64(&b, seq);
    return hl_sb_end(&b);
}

int hl_release_init(hl_release *m, hilock_kind kind, const hl_names *n, const char *owner,
                    int64_t acquired_lease_ms, int64_t watchdog_lease_ms,
                    const char *request_id, int64_t command_timeout_ms, int64_t timeout_ms,
                    int64_t now_ms)
{
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->names = n;
    m->owner = owner;
    /* a partial unlock re-applies the lease the hold was taken with */
    m->lease_ms = acquired_lease_ms > 0 ? acquired_lease_ms : watchdog_lease_ms;
    m->latch_ttl_ms = hl_latch_ttl(command_timeout_ms);
    m->deadline = timeout_ms > 0 ? now_ms + timeout_ms : -1;
    m->state = RL_SEND;
    m->result = HILOCK_EPROTO;
    m->still_held = 1;
    m->renew = 1;
    if (!n || !owner || !request_id || m->lease_ms <= 0) {
        m->result = HILOCK_EINVAL;
        m->state = RL_DONE;
        return HILOCK_EINVAL;
    }
    if (!(m->latch = latch_key(n, kind, owner, request_id))) { /* both kinds have the unlock latch */
        m->result = HILOCK_ENOMEM;
        m->state = RL_DONE;
        return HILOCK_ENOMEM;
    }
    return 0;
}

void hl_release_free(hl_release *m)
{
    if (!m)
        return;
    free(m->latch);
    m->latch = NULL;
}

hl_action hl_release_next(hl_release *m, int64_t now_ms)
{
    if (m->state != RL_SEND)
        return HL_ACT_DONE;
    if (m->deadline >= 0 && m->tries > 0 && now_ms >= m->deadline) {
        m->state = RL_DONE; /* result: the error of the last try */
        return HL_ACT_DONE;
    }
    hl_cmd_release(&m->cmd, m->kind, m->names, m->owner, m->lease_ms,
                   m->latch ? m->latch : "", m->latch_ttl_ms);
    if (m->eval)
        hl_cmd_to_eval(&m->cmd);
    m->timeout_ms = m->deadline >= 0 ? (m->deadline > now_ms ? m->deadline - now_ms : 1) : 0;
    return HL_ACT_SEND;
}

void hl_release_on_reply(hl_release *m, const redisReply *r, int64_t now_ms)
{
    (void)now_ms;
    if (m->state != RL_SEND)
        return;
    if (hl_reply_is_noscript(r) && !m->eval) {
        m->eval = 1; /* the server forgot the script: send its body */
        return;
    }
    m->state = RL_DONE;
    if (r->type == REDIS_REPLY_ERROR)
        snprintf(m->refused, sizeof m->refused,
                 "server refused the release, nothing was released: %s", r->str ? r->str : "");
    hl_release_result res;
    int rc = hl_decode_release(r, &res);
    m->unconfirmed = 0;
    if (rc) {
        m->result = rc; /* nothing known changed: we may still hold it */
        m->still_held = 1;
        m->renew = 1;
        return;
    }
    if (res.not_owner) {
        m->result = HILOCK_ENOTOWNER;
        m->still_held = 0;
        m->renew = 0;
        return;
    }
    if (m->known_lost && m->kind == HILOCK_KIND_FAIR && res.remaining == 0) {
        /* "released", or the key was already gone: after a known loss the
         * client cannot tell, and the loss is what it knows */
        m->result = HILOCK_ENOTOWNER;
        m->still_held = 0;
        m->renew = 0;
        return;
    }
    m->result = 0;
    m->remaining = res.remaining;
    m->still_held = res.remaining > 0;
    m->renew = m->still_held;
}

void hl_release_known_lost(hl_release *m)
{
    m->known_lost = 1;
}

void hl_release_on_error(hl_release *m, int code, int64_t now_ms)
{
    if (m->state != RL_SEND)
        return;
    m->tries++;
    m->result = code ? code : HILOCK_ECONN;
    m->still_held = 1;
    m->renew = 0;       /* see hl_release.renew */
    m->unconfirmed = 1;
    /* The reply may have been lost after the server ran the unlock: the
     * latch makes one resend answer like the first (not "not owner"). Or
     * the request itself is held up on its way and reaches the server
     * after the resend (a late copy): with the per-owner latch it changes
     * nothing however late it comes (the late-copy rule, latch_key above);
     * the resend's answer is also kept at least the lease, so a copy that
     * comes while it lives answers it (and with a latch per request, the
     * only protection there is). */
    if (code == HILOCK_ECONN && m->tries < HL_RELEASE_TRIES &&
        (m->deadline < 0 || now_ms < m->deadline)) {
        if (m->latch_ttl_ms < m->lease_ms)
            m->latch_ttl_ms = m->lease_ms;
        return;
    }
    m->state = RL_DONE;
}

/* ---- settle ---- */

enum { SE_AWAIT_ATTEMPT = 1, SE_SEND_UNDO, SE_AWAIT_UNDO, SE_SEND_SETTLE, SE_AWAIT_SETTLE,
       SE_PAUSE, SE_DONE };

static int arg_i64(const hl_cmd *c, int i, int64_t *out)
{
    char buf[24];
    if (i >= c->argc || c->argvlen[i] == 0 || c->argvlen[i] >= sizeof buf)
        return -1;
    memcpy(buf, c->argv[i], c->argvlen[i]);
    buf[c->argvlen[i]] = 0;
    char *end;
    long long v = strtoll(buf, &end, 10);
    if (*end)
        return -1;
    *out = v;
    return 0;
}

static int arg_copy(const hl_cmd *c, int i, char *out, size_t len)
{
    if (i >= c->argc || c->argvlen[i] >= len)
        return -1;
    memcpy(out, c->argv[i], c->argvlen[i]);
    out[c->argvlen[i]] = 0;
    return 0;
}

int hl_cmd_is_attempt(const hl_cmd *cmd)
{
    switch (cmd->script) {
    case HL_SCRIPT_LOCK:
    case HL_SCRIPT_FAIR_LOCK:
    case HL_SCRIPT_FENCED_LOCK:
    case HL_SCRIPT_RW_READ_LOCK:
    case HL_SCRIPT_RW_WRITE_LOCK:
        return 1;
    default:
        return 0;
    }
}

int hl_settle_init(hl_settle *s, const hl_cmd *attempt, const char *publish,
                   const char *request_id, int64_t command_timeout_ms, int64_t now_ms)
{
    memset(s, 0, sizeof *s);
    s->state = SE_DONE;
    s->outcome = HL_SETTLE_NOTHING;
    if (!attempt || !request_id)
        return HILOCK_EINVAL;
    /* argv: EVALSHA sha nkeys KEYS... ARGV... (hl_cmd_acquire_latched): the
     * kind's keys; lease, owner (fair: + window, enqueue flag), then, with an
     * acquire latch, its lifetime and "<latch key>:<seq>" */
    int base_keys = 1, base_args = 2;
    hilock_kind kind = HILOCK_KIND_REENTRANT;
    switch (attempt->script) {
    case HL_SCRIPT_LOCK: break;
    case HL_SCRIPT_FAIR_LOCK: kind = HILOCK_KIND_FAIR; base_keys = 3; base_args = 4; break;
    case HL_SCRIPT_FENCED_LOCK: kind = HILOCK_KIND_FENCED; base_keys = 2; break;
    case HL_SCRIPT_RW_READ_LOCK: kind = HILOCK_KIND_READ; base_keys = 2; break;
    case HL_SCRIPT_RW_WRITE_LOCK: kind = HILOCK_KIND_WRITE; break;
    default: return HILOCK_EINVAL;
    }
    int64_t nkeys;
    int lease_at = 3 + base_keys, plain = lease_at + base_args;
    if (attempt->argc < 4 || arg_i64(attempt, 2, &nkeys) || nkeys != base_keys ||
        (attempt->argc != plain && attempt->argc != plain + 2) || attempt->argvlen[3] == 0)
        return HILOCK_EINVAL;
    int latched = attempt->argc == plain + 2;
    char *name = malloc(attempt->argvlen[3] + 1);
    if (!name)
        return HILOCK_ENOMEM;
    arg_copy(attempt, 3, name, attempt->argvlen[3] + 1);
    int rc = hl_names_init(&s->names, name);
    free(name);
    if (rc)
        return rc;
    if (publish)
        s->names.publish = strcmp(publish, "spublish") == 0 ? "spublish" : "publish";
    s->kind = kind;
    int bad = arg_i64(attempt, lease_at, &s->lease_ms) ||
              arg_copy(attempt, lease_at + 1, s->owner, sizeof s->owner);
    if (kind == HILOCK_KIND_FAIR) {
        bad = bad || arg_i64(attempt, lease_at + 2, &s->window_ms);
        s->enqueued = attempt->argvlen[lease_at + 3] == 1 && attempt->argv[lease_at + 3][0] == '1';
    }
    /* the undo's unlock latch is the request's own, never the owner's: the
     * undo gives back the one grant its attempt made (it follows the
     * attempt on its connection), and the owner may have been granted the
     * lock again by a later call meanwhile; under the owner's latch that
     * grant's higher number would make the undo "a late copy" that changes
     * nothing, and the attempt's grant would stay */
    if (!bad && !(s->latch = latch_key(&s->names, kind, NULL, request_id)))
        rc = HILOCK_ENOMEM;
    /* the attempt's acquire latch: with it, an attempt whose connection dies
     * unanswered can be settled on another connection (acquire_settle.lua) */
    if (!bad && !rc && latched) {
        int li = attempt->argc - 1;
        size_t ll = attempt->argvlen[li];
        if (arg_i64(attempt, li - 1, &s->acq_latch_ttl_ms) || s->acq_latch_ttl_ms <= 0 ||
            ll == 0) {
            bad = 1;
        } else if (!(s->acq_latch = malloc(ll + 1))) {
            rc = HILOCK_ENOMEM;
        } else {
            memcpy(s->acq_latch, attempt->argv[li], ll);
            s->acq_latch[ll] = 0;
        }
    }
    if (bad || rc) {
        hl_settle_free(s);
        return bad ? HILOCK_EINVAL : rc;
    }
    /* the undo's latch outlives any copy of the undo still on its way (it
     * is sent again on a new connection when its reply is late): a copy
     * that came after the owner's next grant would release that hold */
    s->latch_ttl_ms = hl_latch_ttl(command_timeout_ms);
    if (s->latch_ttl_ms < HL_SETTLE_MAX_MS)
        s->latch_ttl_ms = HL_SETTLE_MAX_MS;
    s->give_up_at = s->wake_at = now_ms + HL_SETTLE_MAX_MS;
    /* the attempt's reply is already a command timeout late: it gets one
     * more, then its connection counts as dead (a link that accepts and
     * never answers would otherwise hold the settle, and a fair waiter's
     * place in line, for HL_SETTLE_MAX_MS) */
    s->step_ms = command_timeout_ms;
    s->step_until = command_timeout_ms > 0 ? now_ms + command_timeout_ms : s->give_up_at;
    s->state = SE_AWAIT_ATTEMPT;
    return 0;
}

int hl_settle_init_unsettled(hl_settle *s, hilock_kind kind, const hl_names *n,
                             const hl_unsettled_acq *u, const char *publish,
                             const char *request_id, int64_t command_timeout_ms, int64_t now_ms)
{
    memset(s, 0, sizeof *s);
    s->state = SE_DONE;
    if (!n || !u || !u->latch || u->latch_ttl_ms <= 0)
        return HILOCK_EINVAL;
    /* the attempt as it was sent, but for a fair lock's window (not
     * recorded: 0, see hl_acquire_resettle); its line flag says "may have
     * joined the line" */
    hl_cmd attempt;
    hl_cmd_acquire_latched(&attempt, kind, n, u->owner, u->lease_ms, 0, u->latch,
                           u->latch_ttl_ms);
    int rc = hl_settle_init(s, &attempt, publish, request_id, command_timeout_ms, now_ms);
    if (rc)
        return rc;
    /* its connection is gone: the settle goes on a new one at once */
    hl_settle_on_error(s, now_ms);
    return s->state == SE_DONE ? HILOCK_EINVAL : 0;
}

int64_t hl_settle_gate(int settling, int bounded, int64_t command_timeout_ms)
{
    if (settling < HL_SETTLE_PER_NODE)
        return -1;
    return bounded || command_timeout_ms < 0 ? 0 : command_timeout_ms;
}

int hl_settle_can_hand_over(const hl_settle *s)
{
    if (!s->acq_latch)
        return 0;
    switch (s->state) {
    case SE_AWAIT_ATTEMPT:
    case SE_SEND_SETTLE:
    case SE_AWAIT_SETTLE:
        return 1;
    case SE_PAUSE:
        return s->after_pause == SE_SEND_SETTLE;
    default:
        return 0;
    }
}

void hl_settle_free(hl_settle *s)
{
    if (!s)
        return;
    hl_names_free(&s->names);
    free(s->latch);
    free(s->acq_latch);
    s->latch = s->acq_latch = NULL;
    s->state = SE_DONE;
}

hl_action hl_settle_next(hl_settle *s, int64_t now_ms)
{
    if (s->state == SE_PAUSE) {
        if (now_ms >= s->give_up_at) {
            s->state = SE_DONE;
            return HL_ACT_DONE;
        }
        if (now_ms < s->resume_at) {
            s->sleep_ms = s->resume_at - now_ms;
            s->wake_at = s->resume_at;
            return HL_ACT_WAIT;
        }
        s->state = s->after_pause;
    }
    switch (s->state) {
    case SE_AWAIT_ATTEMPT:
    case SE_AWAIT_UNDO:
    case SE_AWAIT_SETTLE: {
        /* the reply is awaited on the connection the last send went on
         * (a new one when reconnect was set for it): that one is alive */
        s->reconnect = 0;
        if (now_ms >= s->give_up_at) {
            s->state = SE_DONE; /* the server never answered: nothing known */
            return HL_ACT_DONE;
        }
        /* one reply is awaited a command timeout at most: then that
         * connection counts as dead, as if it had closed (the machine goes
         * on on a new one, or gives up). Not for an attempt without an
         * acquire latch: nothing but its own reply can tell what it did */
        int bounded = s->state != SE_AWAIT_ATTEMPT || s->acq_latch;
        int64_t until = bounded && s->step_until < s->give_up_at ? s->step_until : s->give_up_at;
        if (now_ms >= until) {
            hl_settle_on_error(s, now_ms);
            return hl_settle_next(s, now_ms);
        }
        s->sleep_ms = until - now_ms;
        s->wake_at = until;
        return HL_ACT_WAIT;
    }
    case SE_SEND_UNDO:
        s->state = SE_AWAIT_UNDO;
        s->step_until = s->step_ms > 0 ? now_ms + s->step_ms : s->give_up_at;
        return HL_ACT_SEND;
    case SE_SEND_SETTLE:
        s->state = SE_AWAIT_SETTLE;
        s->step_until = s->step_ms > 0 ? now_ms + s->step_ms : s->give_up_at;
        return HL_ACT_SEND;
    default:
        return HL_ACT_DONE;
    }
}

/* Undo a grant (release) or a place in the fair line (leave it), or end. */
static void undo(hl_settle *s, int acquired)
{
    if (acquired) {
        hl_cmd_release(&s->cmd, s->kind, &s->names, s->owner, s->lease_ms, s->latch,
                       s->latch_ttl_ms);
        s->outcome = HL_SETTLE_RELEASED;
    } else if (s->enqueued) {
        hl_cmd_fair_cancel(&s->cmd, &s->names, s->owner, s->window_ms);
        s->outcome = HL_SETTLE_LEFT_LINE;
    } else {
        s->state = SE_DONE;
        s->settled = 1; /* it took nothing and left no place in line */
        return;
    }
    /* the script body: this connection gets no NOSCRIPT round trip */
    hl_cmd_to_eval(&s->cmd);
    s->state = SE_SEND_UNDO;
    s->tries = 0;
}

void hl_settle_on_reply(hl_settle *s, const redisReply *r, int64_t now_ms)
{
    (void)now_ms;
    s->reconnect = 0;
    if (s->state == SE_AWAIT_UNDO) {
        s->state = SE_DONE;
        s->settled = 1;
        return;
    }
    if (s->state == SE_AWAIT_SETTLE) {
        int granted = 0;
        if (hl_decode_acquire_settle(r, &granted) != 0) {
            s->state = SE_DONE; /* refused: the latch is unknown, nothing to go on */
            return;
        }
        /* given up now: a late copy of the attempt takes nothing. A fair
         * attempt that ran without a grant may have left us in line. */
        undo(s, granted);
        return;
    }
    if (s->state != SE_AWAIT_ATTEMPT)
        return;
    hl_acquire_result res;
    if (hl_decode_acquire_kind(s->kind, r, &res) != 0) {
        s->state = SE_DONE; /* an error (NOSCRIPT included): it changed nothing */
        s->settled = 1;
        return;
    }
    undo(s, res.acquired);
}

void hl_settle_on_error(hl_settle *s, int64_t now_ms)
{
    s->reconnect = 0;
    int st = s->state;
    s->state = SE_DONE; /* also in a pause: a driver with nothing to wait on */
    if (now_ms >= s->give_up_at || s->tries >= HL_SETTLE_RECONNECTS)
        return;
    if (st == SE_AWAIT_ATTEMPT || st == SE_SEND_SETTLE || st == SE_AWAIT_SETTLE) {
        /* the connection died before the attempt's reply: whether it ran is
         * unknown. Without an acquire latch nothing can tell. With one,
         * acquire_settle.lua answers on a new connection (idempotent: a
         * resend answers the same), and the attempt's late copy is refused */
        if (!s->acq_latch)
            return;
        hl_cmd_acquire_settle(&s->cmd, s->acq_latch, s->acq_latch_ttl_ms);
        hl_cmd_to_eval(&s->cmd);
        s->after_pause = SE_SEND_SETTLE;
    } else if (st == SE_AWAIT_UNDO || st == SE_SEND_UNDO) {
        /* the attempt's outcome is known; the undo is idempotent (a release
         * answers by its unlock latch, leaving the line twice changes
         * nothing the second time): send it again */
        s->after_pause = SE_SEND_UNDO;
    } else {
        return;
    }
    /* at once the first time, then after 50, 100, 200, 400, 800 ms and 1 s:
     * a server restarting (or a failover) gets a few seconds to come back */
    s->state = SE_PAUSE;
    s->resume_at = now_ms + (s->tries == 0 ? 0 : s->tries > 5 ? 1000 : (int64_t)25 << s->tries);
    s->tries++;
    s->reconnect = 1;
}
