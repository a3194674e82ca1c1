/* Protocol layer: semaphore, permit-expirable semaphore and count-down
 * latch in Redisson's layouts (names, commands, replies, the wait machine,
 * what a message on their channels means). No I/O, no threads, no clock. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define HL_NO_LEASE_SCORE "922337203685477" /* Redisson's "no lease" score */
#define HL_MSG_NEW_COUNT "1"                /* latch: a count was set */

/* ---- names ---- */

int hl_sem_names_init(hl_sem_names *n, hl_sem_kind kind, const char *name)
{
    memset(n, 0, sizeof *n);
    if (!name || !*name || kind < HL_SEM_SEMAPHORE || kind > HL_SEM_LATCH)
        return HILOCK_EINVAL;
    n->publish = "publish";
    n->name = strdup(name);
    size_t len = strlen(name);
    if (kind == HL_SEM_LATCH) {
        /* Redisson braces the latch's name whatever it holds */
        n->channel = malloc(len + 40);
        if (n->channel)
            snprintf(n->channel, len + 40, "redisson_countdownlatch__channel__{%s}", name);
    } else {
        n->channel = hl_companion("redisson_sc", name);
    }
    if (kind == HL_SEM_PERMIT) {
        /* Redisson's suffixName: "{N}:timeout", or "N:timeout" when N has a '{' */
        n->timeout = malloc(len + 12);
        if (n->timeout)
            snprintf(n->timeout, len + 12, strchr(name, '{') ? "%s:timeout" : "{%s}:timeout",
                     name);
    } else {
        n->timeout = strdup(name);
    }
    if (kind == HL_SEM_SEMAPHORE) /* hilock's request latches, in the name's slot */
        n->latch_prefix = hl_companion("hilock_sem_latch", name);
    if (kind == HL_SEM_PERMIT) /* hilock's given-back ids, in the name's slot */
        n->gone = hl_companion("hilock_pes_gone", name);
    if (!n->name || !n->channel || !n->timeout ||
        (kind == HL_SEM_SEMAPHORE && !n->latch_prefix) || (kind == HL_SEM_PERMIT && !n->gone)) {
        hl_sem_names_free(n);
        return HILOCK_ENOMEM;
    }
    return 0;
}

void hl_sem_names_free(hl_sem_names *n)
{
    if (!n)
        return;
    free(n->name);
    free(n->channel);
    free(n->timeout);
    free(n->latch_prefix);
    free(n->gone);
    memset(n, 0, sizeof *n);
}

int hl_sem_names_one_slot(const hl_sem_names *n)
{
    unsigned slot = hl_key_slot(n->name, strlen(n->name));
    return hl_key_slot(n->channel, strlen(n->channel)) == slot &&
           hl_key_slot(n->timeout, strlen(n->timeout)) == slot &&
           (!n->latch_prefix || hl_key_slot(n->latch_prefix, strlen(n->latch_prefix)) == slot) &&
           (!n->gone || hl_key_slot(n->gone, strlen(n->gone)) == slot);
}

int hl_sem_check_permits(int64_t permits)
{
    return permits >= 1 && permits <= HL_SEM_PERMITS_MAX ? 0 : HILOCK_EINVAL;
}

int hl_sem_check_count(int64_t count)
{
    return count >= 1 && count <= HL_SEM_COUNT_MAX ? 0 : HILOCK_EINVAL;
}

/* ---- commands ---- */

void hl_sem_cmd_try_set(hl_cmd *cmd, hl_sem_kind kind, const hl_sem_names *n, int64_t count)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_SEM_TRY_SET, 2);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->channel);
    hl_cmd_add_num(cmd, count);
    hl_cmd_add_str(cmd, n->publish);
    if (kind == HL_SEM_LATCH)
        hl_cmd_add_str(cmd, HL_MSG_NEW_COUNT);
    else
        hl_cmd_add_num(cmd, count); /* semaphores publish the count */
}

void hl_sem_cmd_acquire(hl_cmd *cmd, const hl_sem_names *n, int64_t permits)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_SEM_ACQUIRE, 1);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_num(cmd, permits);
}

void hl_sem_cmd_acquire_latched(hl_cmd *cmd, const hl_sem_names *n, int64_t permits,
                                const char *latch, const char *seq, int64_t latch_ttl_ms)
{
    if (!latch || !seq || latch_ttl_ms <= 0) {
        hl_sem_cmd_acquire(cmd, n, permits);
        return;
    }
    hl_cmd_begin_script(cmd, HL_SCRIPT_SEM_ACQUIRE, 2);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, latch); /* a KEY: the cluster routes and redirects by it */
    hl_cmd_add_num(cmd, permits);
    hl_cmd_add_num(cmd, latch_ttl_ms);
    hl_cmd_add_str(cmd, seq);
}

void hl_sem_cmd_settle(hl_cmd *cmd, const hl_sem_names *n, const char *latch, const char *seq,
                       int64_t latch_ttl_ms)
{
    /* the mark outlives the request's latch (hl_cmd_acquire_settle) */
    if (latch_ttl_ms < HL_SETTLE_MAX_MS)
        latch_ttl_ms = HL_SETTLE_MAX_MS;
    hl_cmd_begin_script(cmd, HL_SCRIPT_SEM_SETTLE, 3);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->channel);
    hl_cmd_add_str(cmd, latch);
    hl_cmd_add_str(cmd, seq);
    hl_cmd_add_num(cmd, latch_ttl_ms > 0 ? latch_ttl_ms : 1);
    hl_cmd_add_str(cmd, n->publish);
}

int hl_sem_latch_arg(char *buf, size_t len, const hl_sem_names *n, const char *owner,
                     uint64_t epoch, uint64_t seq)
{
    if (!n->latch_prefix || !owner)
        return HILOCK_EINVAL;
    return hl_latch_arg(buf, len, n->latch_prefix, owner, epoch, seq);
}

void hl_sem_cmd_release(hl_cmd *cmd, const hl_sem_names *n, int64_t permits)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_SEM_RELEASE, 2);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->channel);
    hl_cmd_add_num(cmd, permits);
    hl_cmd_add_str(cmd, n->publish);
}

void hl_sem_cmd_add(hl_cmd *cmd, const hl_sem_names *n, int64_t permits, int set)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_SEM_ADD, 2);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->channel);
    hl_cmd_add_num(cmd, permits);
    hl_cmd_add_str(cmd, n->publish);
    hl_cmd_add_str(cmd, set ? "set" : "add");
}

void hl_sem_cmd_drain(hl_cmd *cmd, const hl_sem_names *n)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_SEM_DRAIN, 1);
    hl_cmd_add_str(cmd, n->name);
}

void hl_sem_cmd_count(hl_cmd *cmd, hl_sem_kind kind, const hl_sem_names *n)
{
    if (kind == HL_SEM_PERMIT) {
        hl_cmd_begin_script(cmd, HL_SCRIPT_PES_AVAILABLE, 3);
        hl_cmd_add_str(cmd, n->name);
        hl_cmd_add_str(cmd, n->timeout);
        hl_cmd_add_str(cmd, n->channel);
        hl_cmd_add_str(cmd, n->publish);
        return;
    }
    hl_cmd_begin_plain(cmd);
    hl_cmd_add_str(cmd, "GET");
    hl_cmd_add_str(cmd, n->name);
}

void hl_pes_cmd_acquire(hl_cmd *cmd, const hl_sem_names *n, int64_t permits, int64_t lease_ms,
                        const unsigned char *ids)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_PES_ACQUIRE, 3);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->timeout);
    hl_cmd_add_str(cmd, n->channel);
    hl_cmd_add_num(cmd, permits);
    hl_cmd_add_num(cmd, lease_ms > 0 ? lease_ms : 0);
    hl_cmd_add_str(cmd, n->publish);
    cmd->argv[cmd->argc] = (const char *)ids; /* binary: its own length */
    cmd->argvlen[cmd->argc] = (size_t)permits * HL_PES_ID_BYTES;
    cmd->argc++;
    hl_cmd_add_str(cmd, n->gone ? n->gone : ""); /* an argument, not a KEY: pes_gone.lua */
    hl_cmd_add_num(cmd, HL_PES_GONE_MS);
}

void hl_pes_cmd_release(hl_cmd *cmd, const hl_sem_names *n,
                        const unsigned char id[HL_PES_ID_BYTES])
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_PES_RELEASE, 3);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->channel);
    hl_cmd_add_str(cmd, n->timeout);
    cmd->argv[cmd->argc] = (const char *)id;
    cmd->argvlen[cmd->argc] = HL_PES_ID_BYTES;
    cmd->argc++;
    hl_cmd_add_str(cmd, n->publish);
    hl_cmd_add_str(cmd, n->gone ? n->gone : "");
    hl_cmd_add_num(cmd, HL_PES_GONE_MS);
}

void hl_pes_cmd_update(hl_cmd *cmd, const hl_sem_names *n,
                       const unsigned char id[HL_PES_ID_BYTES], int64_t lease_ms)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_PES_UPDATE, 3);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->timeout);
    hl_cmd_add_str(cmd, n->channel);
    cmd->argv[cmd->argc] = (const char *)id;
    cmd->argvlen[cmd->argc] = HL_PES_ID_BYTES;
    cmd->argc++;
    hl_cmd_add_num(cmd, lease_ms);
    hl_cmd_add_str(cmd, n->publish);
}

/* The raw id of a kept permit (hex in owner) as the command's next
 * argument: its 16 bytes live in one of the command's number slots, so
 * that the command needs nothing of the caller's but names. An id that is
 * not 32 hex digits (cannot happen: the API checked it) goes as an empty
 * argument, which no permit matches. */
static void cmd_permit_arg(hl_cmd *cmd, const char *hex)
{
    char *slot = cmd->num[cmd->nnum < HL_CMD_MAXNUM ? cmd->nnum++ : HL_CMD_MAXNUM - 1];
    unsigned char raw[HL_PES_ID_BYTES];
    size_t len = hl_pes_id_parse(raw, hex) == 0 ? HL_PES_ID_BYTES : 0;
    memcpy(slot, raw, len);
    cmd->argv[cmd->argc] = slot;
    cmd->argvlen[cmd->argc] = len;
    cmd->argc++;
}

void hl_permit_cmd_renew(hl_cmd *cmd, const hl_names *n, const char *id, int64_t lease_ms)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_PES_UPDATE, 3);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->timeout);
    hl_cmd_add_str(cmd, n->channel);
    cmd_permit_arg(cmd, id);
    hl_cmd_add_num(cmd, lease_ms);
    hl_cmd_add_str(cmd, n->publish);
}

void hl_permit_cmd_check(hl_cmd *cmd, const hl_names *n, const char *id)
{
    hl_cmd_begin_plain(cmd);
    hl_cmd_add_str(cmd, "ZSCORE");
    hl_cmd_add_str(cmd, n->timeout);
    cmd_permit_arg(cmd, id);
}

int hl_permit_check_gone(const redisReply *r, int *gone)
{
    if (!r || r->type == REDIS_REPLY_ERROR)
        return HILOCK_EPROTO;
    if (r->type == REDIS_REPLY_NIL) {
        *gone = 1;
        return 0;
    }
    /* RESP2 answers the score as a string, RESP3 as a double */
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_DOUBLE) {
        *gone = 0;
        return 0;
    }
    return HILOCK_EPROTO;
}

void hl_latch_cmd_count_down(hl_cmd *cmd, const hl_sem_names *n)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_LATCH_COUNT_DOWN, 2);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->channel);
    hl_cmd_add_str(cmd, n->publish);
}

void hl_sem_cmd_delete(hl_cmd *cmd, hl_sem_kind kind, const hl_sem_names *n)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_LATCH_DELETE, 3);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->channel);
    hl_cmd_add_str(cmd, n->timeout);
    /* a latch's waiters look at the count on any message; a semaphore's
     * wake for the count published: 0 free permits wakes nobody */
    hl_cmd_add_str(cmd, kind == HL_SEM_LATCH ? HL_MSG_NEW_COUNT : "0");
    hl_cmd_add_str(cmd, n->publish);
}

/* ---- replies ---- */

int hl_sem_decode_error(const redisReply *r)
{
    if (!r)
        return HILOCK_EPROTO;
    if (r->type != REDIS_REPLY_ERROR)
        return 0;
    if (r->str && strstr(r->str, "WRONGTYPE"))
        return HILOCK_EWRONGTYPE;
    if (r->str && strstr(r->str, "hilock: permit count would overflow"))
        return HILOCK_EINVAL;
    return HILOCK_EPROTO;
}

/* A decimal integer within +-HL_SEM_COUNT_MAX: 0, or -1. */
static int parse_count(const char *s, size_t len, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (len > 0 && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (len == i || len - i > 15)
        return -1;
    int64_t v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

int hl_sem_decode_count(const redisReply *r, int64_t *out)
{
    int rc = hl_sem_decode_error(r);
    if (rc)
        return rc;
    switch (r->type) {
    case REDIS_REPLY_NIL:
        *out = 0;
        return 0;
    case REDIS_REPLY_INTEGER:
        return hl_sem_decode_int(r, out);
    case REDIS_REPLY_STRING:
        /* a string that is no count: the key is not ours */
        return parse_count(r->str, r->len, out) == 0 ? 0 : HILOCK_EWRONGTYPE;
    default:
        return HILOCK_EPROTO;
    }
}

int hl_sem_decode_int(const redisReply *r, int64_t *out)
{
    int rc = hl_sem_decode_error(r);
    if (rc)
        return rc;
    if (r->type != REDIS_REPLY_INTEGER || r->integer > HL_SEM_COUNT_MAX ||
        r->integer < -HL_SEM_COUNT_MAX)
        return HILOCK_EPROTO;
    *out = r->integer;
    return 0;
}

int hl_pes_release_code(int64_t answer)
{
    return answer > 0 ? 0 : HILOCK_ENOTOWNER;
}

int hl_pes_update_code(int64_t answer)
{
    return answer == 1 ? 0 : HILOCK_ENOTOWNER;
}

void hl_pes_id_hex(char out[2 * HL_PES_ID_BYTES + 1], const unsigned char id[HL_PES_ID_BYTES])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < HL_PES_ID_BYTES; i++) {
        out[2 * i] = hex[id[i] >> 4];
        out[2 * i + 1] = hex[id[i] & 15];
    }
    out[2 * HL_PES_ID_BYTES] = 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int hl_pes_id_parse(unsigned char id[HL_PES_ID_BYTES], const char *hex)
{
    if (!hex || strlen(hex) != 2 * HL_PES_ID_BYTES)
        return HILOCK_EINVAL;
    for (int i = 0; i < HL_PES_ID_BYTES; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return HILOCK_EINVAL;
        id[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

/* ---- what a message wakes ---- */

hl_wake_rule hl_sem_wake_rule(hl_sem_kind kind)
{
    return kind == HL_SEM_LATCH ? HL_WAKE_LATCH : HL_WAKE_PERMITS;
}

int64_t hl_ps_wakes(hl_wake_rule rule, const hl_ps_event *ev)
{
    if (!ev || ev->type != HL_PS_MESSAGE)
        return 0;
    switch (rule) {
    case HL_WAKE_LOCK:
        return ev->payload == 1 ? -1 : ev->payload == 0 ? 1 : 0;
    case HL_WAKE_PERMITS:
        return ev->value > 0 ? ev->value : 0;
    case HL_WAKE_LATCH:
        return ev->value >= 0 ? -1 : 0;
    }
    return 0;
}

/* ---- the wait machine ---- */

enum { SW_TRY = 1, SW_SUBSCRIBE, SW_WAIT, SW_UNSUB, SW_SETTLE, SW_DONE };

int hl_semwait_init(hl_semwait *m, hl_sem_kind kind, const hl_sem_names *n, int64_t permits,
                    int64_t lease_ms, const unsigned char *ids, int64_t wait_ms, int64_t now_ms)
{
    memset(m, 0, sizeof *m);
    if (!n || kind < HL_SEM_SEMAPHORE || kind > HL_SEM_LATCH || hl_check_wait(wait_ms))
        return HILOCK_EINVAL;
    if (kind != HL_SEM_LATCH && hl_sem_check_permits(permits))
        return HILOCK_EINVAL;
    if (kind == HL_SEM_PERMIT && (!ids || permits > HL_PES_IDS_MAX || hl_check_lease(lease_ms)))
        return HILOCK_EINVAL;
    m->kind = kind;
    m->names = n;
    m->permits = kind == HL_SEM_LATCH ? 1 : permits;
    m->lease_ms = lease_ms;
    m->ids = ids;
    m->wait_ms = wait_ms;
    m->deadline = wait_ms < 0 ? -1 : now_ms + wait_ms;
    m->channel = n->channel;
    m->hint_ms = -1;
    m->sleep_ms = -1;
    m->state = SW_TRY;
    return 0;
}

int hl_semwait_set_latch(hl_semwait *m, const char *latch_arg, int64_t latch_ttl_ms)
{
    free(m->latch);
    m->latch = NULL;
    m->latch_seq[0] = 0;
    if (m->kind != HL_SEM_SEMAPHORE || !latch_arg || latch_ttl_ms <= 0)
        return HILOCK_EINVAL;
    const char *colon = strrchr(latch_arg, ':');
    size_t sl = colon ? strlen(colon + 1) : 0;
    if (!colon || colon == latch_arg || sl == 0 || sl >= sizeof m->latch_seq ||
        strspn(colon + 1, "0123456789") != sl)
        return HILOCK_EINVAL;
    if (!(m->latch = strndup(latch_arg, (size_t)(colon - latch_arg))))
        return HILOCK_ENOMEM;
    memcpy(m->latch_seq, colon + 1, sl + 1);
    m->latch_ttl_ms = latch_ttl_ms;
    return 0;
}

void hl_semwait_free(hl_semwait *m)
{
    if (!m)
        return;
    free(m->latch);
    m->latch = NULL;
}

static void sw_finish(hl_semwait *m, int code)
{
    m->result = code;
    m->state = m->subscribed ? SW_UNSUB : SW_DONE;
}

hl_action hl_semwait_next(hl_semwait *m, int64_t now_ms)
{
    switch (m->state) {
    case SW_TRY:
        m->attempts++;
        if (m->kind == HL_SEM_SEMAPHORE)
            hl_sem_cmd_acquire_latched(&m->cmd, m->names, m->permits, m->latch, m->latch_seq,
                                       m->latch_ttl_ms);
        else if (m->kind == HL_SEM_PERMIT)
            hl_pes_cmd_acquire(&m->cmd, m->names, m->permits, m->lease_ms, m->ids);
        else
            hl_sem_cmd_count(&m->cmd, HL_SEM_LATCH, m->names);
        return HL_ACT_SEND;
    case SW_SETTLE:
        if (m->kind == HL_SEM_SEMAPHORE) /* give the request up, its permits back */
            hl_sem_cmd_settle(&m->cmd, m->names, m->latch, m->latch_seq, m->latch_ttl_ms);
        else /* give back one id of the lost acquire */
            hl_pes_cmd_release(&m->cmd, m->names, m->ids + HL_PES_ID_BYTES * m->settle_next);
        return HL_ACT_SEND;
    case SW_SUBSCRIBE:
        return HL_ACT_SUBSCRIBE;
    case SW_WAIT: {
        int64_t sleep = -1;
        if (m->deadline >= 0) {
            sleep = m->deadline - now_ms;
            if (sleep < 0)
                sleep = 0;
        }
        int64_t cap = m->sub_failed ? HL_SEMWAIT_POLL_MS : m->hint_ms;
        if (cap >= 0 && (sleep < 0 || cap < sleep))
            sleep = cap;
        m->sleep_ms = sleep;
        return HL_ACT_WAIT;
    }
    case SW_UNSUB:
        m->subscribed = 0;
        m->state = m->resub ? SW_SUBSCRIBE : SW_DONE;
        m->resub = 0;
        return HL_ACT_UNSUBSCRIBE;
    default:
        m->state = SW_DONE;
        return HL_ACT_DONE;
    }
}

/* One id of a lost acquire settled (given back, or never taken), or the
 * settling failed: the next id, or the end with the acquire's error. */
static void sw_settled(hl_semwait *m, int ok)
{
    if (ok && ++m->settle_next < m->permits)
        return;
    sw_finish(m, m->settle_code);
}

void hl_semwait_on_reply(hl_semwait *m, const redisReply *r, int64_t now_ms)
{
    if (m->state == SW_SETTLE && m->kind == HL_SEM_SEMAPHORE) {
        /* the permits given back, or 0: settled either way; an error reply
         * (NOSCRIPT is the driver's) changed nothing: nothing more to do */
        sw_finish(m, m->settle_code);
        return;
    }
    if (m->state == SW_SETTLE) {
        int64_t v = 0; /* 1 given back, 0 not taken, -1 given back (lease ended) */
        sw_settled(m, hl_sem_decode_error(r) == 0 && hl_sem_decode_int(r, &v) == 0);
        return;
    }
    if (m->state != SW_TRY)
        return;
    int taken = 0;
    int rc = hl_sem_decode_error(r);
    m->hint_ms = -1;
    if (rc == 0) {
        if (m->kind == HL_SEM_SEMAPHORE) {
            if (r->type != REDIS_REPLY_INTEGER || (r->integer != 0 && r->integer != 1))
                rc = HILOCK_EPROTO;
            else
                taken = r->integer == 1;
        } else if (m->kind == HL_SEM_PERMIT) {
            /* {1} taken, {0, ms to the nearest lease end or -1} */
            if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->elements > 2 ||
                r->element[0]->type != REDIS_REPLY_INTEGER)
                rc = HILOCK_EPROTO;
            else if (r->element[0]->integer == 1 && r->elements == 1)
                taken = 1;
            else if (r->element[0]->integer != 0 || r->elements != 2 ||
                     r->element[1]->type != REDIS_REPLY_INTEGER ||
                     r->element[1]->integer < -1 || r->element[1]->integer > HILOCK_MAX_TIME_MS)
                rc = HILOCK_EPROTO;
            else /* +1: the lease has ended by then on the server's clock */
                m->hint_ms = r->element[1]->integer < 0 ? -1 : r->element[1]->integer + 1;
        } else {
            rc = hl_sem_decode_count(r, &m->count);
            taken = rc == 0 && m->count <= 0;
        }
    }
    if (rc || taken) {
        sw_finish(m, rc);
        return;
    }
    if (m->wait_ms == 0 || (m->deadline >= 0 && now_ms >= m->deadline)) {
        sw_finish(m, HILOCK_ETIMEDOUT);
        return;
    }
    m->state = (!m->subscribed && !m->sub_failed) ? SW_SUBSCRIBE : SW_WAIT;
}

void hl_semwait_on_error(hl_semwait *m, int code, int64_t now_ms)
{
    (void)now_ms;
    if (m->state == SW_DONE || m->state == SW_UNSUB)
        return;
    if (m->state == SW_SETTLE && m->kind == HL_SEM_SEMAPHORE) {
        /* idempotent (the latch): sent again a few times; then the permits
         * a lost copy took stay taken */
        if (++m->settle_tries >= HL_SETTLE_TRIES)
            sw_finish(m, m->settle_code);
        return;
    }
    if (m->state == SW_SETTLE) { /* no way to settle now: the leases will */
        sw_settled(m, 0);
        return;
    }
    if (m->state == SW_TRY && m->kind == HL_SEM_SEMAPHORE && m->latch && m->cmd.reply_lost) {
        /* the server may have run it: settle through the latch */
        m->settle_code = code ? code : HILOCK_EPROTO;
        m->settle_tries = 0;
        m->state = SW_SETTLE;
        return;
    }
    if (m->state == SW_TRY && m->kind == HL_SEM_PERMIT && m->cmd.reply_lost) {
        m->settle_code = code ? code : HILOCK_EPROTO;
        m->settle_next = 0;
        m->state = SW_SETTLE;
        return;
    }
    sw_finish(m, code ? code : HILOCK_EPROTO);
}

void hl_semwait_on_subscribed(hl_semwait *m, int ok, int64_t now_ms)
{
    (void)now_ms;
    if (m->state != SW_SUBSCRIBE)
        return;
    m->subscribed = ok != 0;
    m->sub_failed = !ok;
    m->state = SW_TRY; /* a release before the SUBSCRIBE took effect */
}

void hl_semwait_on_wake(hl_semwait *m, int64_t now_ms)
{
    (void)now_ms;
    if (m->state == SW_WAIT)
        m->state = SW_TRY; /* a late wake-up still gets its last try */
}

void hl_semwait_on_resubscribe(hl_semwait *m, int64_t now_ms)
{
    (void)now_ms;
    if (m->state != SW_WAIT)
        return;
    if (m->subscribed) {
        m->resub = 1;
        m->state = SW_UNSUB;
    } else {
        m->state = SW_SUBSCRIBE;
    }
}

void hl_semwait_cancel(hl_semwait *m, int64_t now_ms)
{
    (void)now_ms;
    if (m->state == SW_DONE || m->state == SW_UNSUB || m->state == SW_SETTLE)
        return; /* a settling acquire gives its ids back first */
    m->resub = 0;
    sw_finish(m, HILOCK_ECANCELED);
}
