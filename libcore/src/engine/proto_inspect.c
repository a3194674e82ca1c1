/* Protocol layer: inspection of a lock (inspect.lua) and the decoding of its
 * reply into a hilock_lock_info. No I/O. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/* The public struct and the storage behind its pointers, freed together. */
typedef struct info_box {
    hilock_lock_info pub; /* first: a hilock_lock_info * is an info_box * */
    char *name;
    hilock_holder_info *holders;
    hilock_waiter_info *queue;
    hilock_permit_info *permits;
    char key_type[32];
    char mode[16];
    char note[160];
} info_box;

/* Positions in the script's reply. */
enum { I_TYPE, I_PTTL, I_FIELDS, I_QTYPE, I_QUEUE, I_DEADLINES, I_ZTYPE, I_ZCARD, I_TIME,
       I_TTYPE, I_TOKEN, I_VALUE, I_LTYPE, I_NLEASES, I_LEASES, I_COUNT,
       I_SUBS = I_COUNT /* optional (hl_cmd_inspect_waiting): subscriber counts */ };
enum { S_LOCK, S_RW, S_SEM, S_LATCH, S_FAIR, S_COUNT };

static int is_str(const redisReply *r);

#define HL_NO_LEASE_MS 922337203685477LL /* Redisson's score of a permit without lease */
#define HL_ID_SHOWN_MAX 64                 /* bytes of a foreign lease member shown */

void hl_cmd_inspect(hl_cmd *cmd, const hl_names *n, const char *leases)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_INSPECT, 5);
    hl_cmd_add_str(cmd, n->name);
    hl_cmd_add_str(cmd, n->queue);
    hl_cmd_add_str(cmd, n->timeout);
    hl_cmd_add_str(cmd, n->token);
    hl_cmd_add_str(cmd, leases);
    /* without ARGV the script counts no subscribers: a plain inspect */
}

void hl_cmd_inspect_waiting(hl_cmd *cmd, const hl_names *n, const char *leases, int sharded,
                            const char *sem_channel, const char *latch_channel)
{
    hl_cmd_inspect(cmd, n, leases);
    hl_cmd_add_str(cmd, sharded ? "shardnumsub" : "numsub");
    hl_cmd_add_str(cmd, n->channel);
    hl_cmd_add_str(cmd, n->rw_channel);
    hl_cmd_add_str(cmd, sem_channel);
    hl_cmd_add_str(cmd, latch_channel);
}

void hl_cmd_scan(hl_cmd *cmd, const char *route_key, const char *cursor, const char *pattern)
{
    hl_cmd_begin_script(cmd, HL_SCRIPT_SCAN, 1);
    hl_cmd_add_str(cmd, route_key);
    hl_cmd_add_str(cmd, cursor);
    hl_cmd_add_str(cmd, pattern);
    hl_cmd_add_str(cmd, "1000");
}

/* A key the lock kinds keep next to a name, never a name of its own. */
static int companion_key(const char *k, size_t len)
{
    static const char *const prefixes[] = {
        "redisson_lock_queue:", "redisson_lock_timeout:", "redisson_lock_token:",
        "redisson_unlock_latch:", "hilock_acquire_latch:", "hilock_sem_latch:",
        "hilock_pes_gone:"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t pl = strlen(prefixes[i]);
        if (len >= pl && !memcmp(k, prefixes[i], pl))
            return 1;
    }
    /* a permit-expirable semaphore's leases "{N}:timeout", a read hold's
     * "{N}:<owner>:rwlock_timeout:<k>" */
    if (len > 2 && k[0] == '{') {
        const char *close = memchr(k, '}', len);
        if (close && (size_t)(close - k) + 1 < len && close[1] == ':')
            return 1;
    }
    return 0;
}

int hl_decode_scan(const redisReply *r, char **next,
                   int (*fn)(void *arg, const char *key, size_t len), void *arg, char *err)
{
    *next = NULL;
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, HL_URL_ERR_MAX, "server error: %.*s", (int)r->len, r->str);
        return HILOCK_EPROTO;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !is_str(r->element[0]) ||
        r->element[0]->len > 20 || r->element[1]->type != REDIS_REPLY_ARRAY) {
        snprintf(err, HL_URL_ERR_MAX, "scan: unexpected reply shape");
        return HILOCK_EPROTO;
    }
    const redisReply *keys = r->element[1];
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        if (k->type != REDIS_REPLY_STRING) {
            snprintf(err, HL_URL_ERR_MAX, "scan: a key that is not a string");
            return HILOCK_EPROTO;
        }
        if (companion_key(k->str, k->len) || memchr(k->str, 0, k->len))
            continue;
        if (fn(arg, k->str, k->len)) {
            snprintf(err, HL_URL_ERR_MAX, "out of memory");
            return HILOCK_ENOMEM;
        }
    }
    if (!(*next = strndup(r->element[0]->str, r->element[0]->len))) {
        snprintf(err, HL_URL_ERR_MAX, "out of memory");
        return HILOCK_ENOMEM;
    }
    return 0;
}

void hl_info_free(hilock_lock_info *info)
{
    if (!info)
        return;
    info_box *b = (info_box *)info;
    for (size_t i = 0; i < b->pub.nholders; i++)
        free((char *)b->holders[i].owner);
    for (size_t i = 0; i < b->pub.nqueue; i++)
        free((char *)b->queue[i].owner);
    for (size_t i = 0; i < b->pub.npermits; i++)
        free((char *)b->permits[i].id);
    free(b->permits);
    free(b->holders);
    free(b->queue);
    free(b->name);
    free(b);
}

const char *hl_info_kind_name(hilock_info_kind k)
{
    switch (k) {
    case HILOCK_INFO_NONE: return "none";
    case HILOCK_INFO_REENTRANT: return "reentrant";
    case HILOCK_INFO_FAIR: return "fair";
    case HILOCK_INFO_READWRITE: return "read-write";
    case HILOCK_INFO_FENCED: return "fenced";
    case HILOCK_INFO_COUNT: return "count";
    case HILOCK_INFO_PERMIT_SEMAPHORE: return "permit-semaphore";
    default: return "unknown";
    }
}

static char *dupn(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* Strict decimal int64 (no sign but '-', no spaces, no overflow). */
static int parse_i64(const char *s, size_t n, int64_t *out)
{
    if (!s || n == 0 || n > 20)
        return -1;
    char buf[24];
    memcpy(buf, s, n);
    buf[n] = 0;
    if (buf[0] != '-' && (buf[0] < '0' || buf[0] > '9'))
        return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end)
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* A ZSET score as epoch ms: a finite number in [0, 2^62]; -1 otherwise. */
static int64_t parse_deadline(const redisReply *s)
{
    if (s->type != REDIS_REPLY_STRING || s->len == 0 || s->len > 40)
        return -1;
    char buf[48];
    memcpy(buf, s->str, s->len);
    buf[s->len] = 0;
    char *end = NULL;
    errno = 0;
    double d = strtod(buf, &end);
    if (errno || *end || !isfinite(d) || d < 0 || d > 4611686018427387904.0)
        return -1;
    return (int64_t)d;
}

static int is_str(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
}

/* The reply has the script's shape: every element the type we read. */
static int shape_ok(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || (r->elements != I_COUNT && r->elements != I_COUNT + 1))
        return 0;
    redisReply **e = r->element;
    if (r->elements == I_COUNT + 1) {
        const redisReply *subs = e[I_SUBS];
        if (subs->type != REDIS_REPLY_ARRAY || subs->elements != S_COUNT)
            return 0;
        for (size_t i = 0; i < S_COUNT; i++)
            if (subs->element[i]->type != REDIS_REPLY_INTEGER || subs->element[i]->integer < 0)
                return 0;
    }
    if (!is_str(e[I_TYPE]) || e[I_PTTL]->type != REDIS_REPLY_INTEGER ||
        e[I_FIELDS]->type != REDIS_REPLY_ARRAY || e[I_FIELDS]->elements % 2 ||
        !is_str(e[I_QTYPE]) || e[I_QUEUE]->type != REDIS_REPLY_ARRAY ||
        e[I_DEADLINES]->type != REDIS_REPLY_ARRAY ||
        e[I_DEADLINES]->elements != e[I_QUEUE]->elements ||
        !is_str(e[I_ZTYPE]) || e[I_ZCARD]->type != REDIS_REPLY_INTEGER || e[I_TIME]->type != REDIS_REPLY_ARRAY ||
        e[I_TIME]->elements != 2 || !is_str(e[I_TTYPE]) ||
        (e[I_TOKEN]->type != REDIS_REPLY_NIL && e[I_TOKEN]->type != REDIS_REPLY_STRING) ||
        (e[I_VALUE]->type != REDIS_REPLY_NIL && e[I_VALUE]->type != REDIS_REPLY_STRING) ||
        !is_str(e[I_LTYPE]) || e[I_NLEASES]->type != REDIS_REPLY_INTEGER ||
        e[I_NLEASES]->integer < 0 || e[I_LEASES]->type != REDIS_REPLY_ARRAY ||
        e[I_LEASES]->elements % 2 || e[I_LEASES]->elements / 2 > (size_t)e[I_NLEASES]->integer)
        return 0;
    for (size_t i = 0; i < e[I_LEASES]->elements; i++)
        if (e[I_LEASES]->element[i]->type != REDIS_REPLY_STRING)
            return 0;
    for (size_t i = 0; i < e[I_FIELDS]->elements; i++)
        if (e[I_FIELDS]->element[i]->type != REDIS_REPLY_STRING)
            return 0;
    for (size_t i = 0; i < e[I_QUEUE]->elements; i++)
        if (e[I_QUEUE]->element[i]->type != REDIS_REPLY_STRING)
            return 0;
    return 1;
}

/* Holders from the hash's fields; *odd = 1 when a count is not a count. */
static int decode_holders(info_box *b, const redisReply *f, int *odd)
{
    size_t pairs = f->elements / 2;
    b->holders = calloc(pairs ? pairs : 1, sizeof *b->holders);
    if (!b->holders)
        return HILOCK_ENOMEM;
    b->pub.holders = b->holders;
    for (size_t i = 0; i < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k->len == 4 && !memcmp(k->str, "mode", 4)) {
            snprintf(b->mode, sizeof b->mode, "%.*s", (int)v->len, v->str);
            continue;
        }
        hilock_holder_info *h = &b->holders[b->pub.nholders];
        h->owner = dupn(k->str, k->len);
        if (!h->owner)
            return HILOCK_ENOMEM;
        h->owner_len = k->len;
        b->pub.nholders++;
        if (parse_i64(v->str, v->len, &h->holds) != 0 || h->holds < 0) {
            h->holds = -1;
            *odd = 1;
        }
    }
    return 0;
}

/* The queue in list order with each waiter's deadline (the script read
 * them aligned: one ZSCORE per queued owner). */
static int decode_queue(info_box *b, const redisReply *q, const redisReply *d)
{
    if (q->elements == 0)
        return 0;
    b->queue = calloc(q->elements, sizeof *b->queue);
    if (!b->queue)
        return HILOCK_ENOMEM;
    b->pub.queue = b->queue;
    for (size_t i = 0; i < q->elements; i++) {
        hilock_waiter_info *w = &b->queue[i];
        w->owner = dupn(q->element[i]->str, q->element[i]->len);
        if (!w->owner)
            return HILOCK_ENOMEM;
        w->owner_len = q->element[i]->len;
        w->deadline_ms = parse_deadline(d->element[i]);
        b->pub.nqueue++;
    }
    return 0;
}

/* A permit-expirable semaphore's leases (member, score pairs) as permits;
 * *odd = 1 when a member is not a 16-byte permit id. */
static int decode_permits(info_box *b, const redisReply *l, int *odd)
{
    size_t n = l->elements / 2;
    if (n == 0)
        return 0;
    b->permits = calloc(n, sizeof *b->permits);
    if (!b->permits)
        return HILOCK_ENOMEM;
    b->pub.permits = b->permits;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        const redisReply *m = l->element[2 * i];
        size_t len = m->len < HL_ID_SHOWN_MAX ? m->len : HL_ID_SHOWN_MAX;
        char *id = malloc(2 * len + 1);
        if (!id)
            return HILOCK_ENOMEM;
        for (size_t k = 0; k < len; k++) {
            id[2 * k] = hex[(unsigned char)m->str[k] >> 4];
            id[2 * k + 1] = hex[(unsigned char)m->str[k] & 15];
        }
        id[2 * len] = 0;
        if (m->len != HL_PES_ID_BYTES)
            *odd = 1;
        hilock_permit_info *p = &b->permits[i];
        p->id = id;
        b->pub.npermits++;
        int64_t end = parse_deadline(l->element[2 * i + 1]);
        p->lease_end_ms = end == HL_NO_LEASE_MS ? -1 : end;
    }
    return 0;
}

static int decode_time(const redisReply *t, int64_t *ms)
{
    int64_t sec = 0, usec = 0;
    if (t->element[0]->type != REDIS_REPLY_STRING || t->element[1]->type != REDIS_REPLY_STRING ||
        parse_i64(t->element[0]->str, t->element[0]->len, &sec) != 0 ||
        parse_i64(t->element[1]->str, t->element[1]->len, &usec) != 0 || sec < 0 ||
        sec > 4000000000000LL || usec < 0 || usec > 999999)
        return -1;
    *ms = sec * 1000 + usec / 1000;
    return 0;
}

static void classify(info_box *b, int odd, int fair_data, int has_counter, int has_count,
                     int has_leases)
{
    hilock_lock_info *v = &b->pub;
    if (!strcmp(b->key_type, "none")) {
        v->kind = fair_data    ? HILOCK_INFO_FAIR
                  : has_leases ? HILOCK_INFO_PERMIT_SEMAPHORE
                               : HILOCK_INFO_NONE;
    } else if (has_count) {
        v->kind = has_leases ? HILOCK_INFO_PERMIT_SEMAPHORE : HILOCK_INFO_COUNT;
    } else if (strcmp(b->key_type, "hash") != 0) {
        v->kind = HILOCK_INFO_UNKNOWN;
        snprintf(b->note, sizeof b->note, "the key holds a %s, not a lock", b->key_type);
    } else if (b->mode[0]) {
        v->kind = HILOCK_INFO_READWRITE;
    } else if (odd) {
        v->kind = HILOCK_INFO_UNKNOWN;
        snprintf(b->note, sizeof b->note, "the hash has fields that are not hold counts");
    } else if (fair_data) {
        v->kind = HILOCK_INFO_FAIR;
    } else {
        v->kind = has_counter ? HILOCK_INFO_FENCED : HILOCK_INFO_REENTRANT;
    }
    for (size_t i = 0; i < v->nholders; i++) {
        hilock_holder_info *h = &b->holders[i];
        if (v->kind != HILOCK_INFO_READWRITE)
            h->role = HILOCK_ROLE_EXCLUSIVE;
        else
            h->role = h->owner_len > 6 && !memcmp(h->owner + h->owner_len - 6, ":write", 6)
                          ? HILOCK_ROLE_WRITE
                          : HILOCK_ROLE_READ;
    }
}

int hl_decode_inspect(const redisReply *r, const char *name, hilock_lock_info **out, char *err)
{
    *out = NULL;
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, HL_URL_ERR_MAX, "server error: %.*s", (int)r->len, r->str);
        return HILOCK_EPROTO;
    }
    if (!shape_ok(r)) {
        snprintf(err, HL_URL_ERR_MAX, "inspect: unexpected reply shape");
        return HILOCK_EPROTO;
    }
    redisReply **e = r->element;
    info_box *b = calloc(1, sizeof *b);
    if (!b || !(b->name = strdup(name))) {
        free(b);
        snprintf(err, HL_URL_ERR_MAX, "out of memory");
        return HILOCK_ENOMEM;
    }
    hilock_lock_info *v = &b->pub;
    v->name = b->name;
    v->key_type = b->key_type;
    v->mode = b->mode;
    v->note = b->note;
    snprintf(b->key_type, sizeof b->key_type, "%.*s", (int)e[I_TYPE]->len, e[I_TYPE]->str);
    v->locked = strcmp(b->key_type, "none") != 0;
    v->lease_ms = e[I_PTTL]->integer;
    int rc = 0, odd = 0;
    if (v->lease_ms < -2 || decode_time(e[I_TIME], &v->server_time_ms) != 0) {
        snprintf(err, HL_URL_ERR_MAX, "inspect: bad PTTL or TIME in the reply");
        rc = HILOCK_EPROTO;
    }
    if (!rc)
        rc = decode_holders(b, e[I_FIELDS], &odd);
    if (!rc)
        rc = decode_queue(b, e[I_QUEUE], e[I_DEADLINES]);
    int odd_id = 0;
    if (!rc)
        rc = decode_permits(b, e[I_LEASES], &odd_id);
    if (rc == HILOCK_ENOMEM)
        snprintf(err, HL_URL_ERR_MAX, "out of memory");
    if (rc) {
        hl_info_free(v);
        return rc;
    }
    int has_counter = e[I_TOKEN]->type == REDIS_REPLY_STRING;
    if (has_counter && (parse_i64(e[I_TOKEN]->str, e[I_TOKEN]->len, &v->token) != 0 || v->token < 0))
        v->token = 0, has_counter = 0;
    int fair_data = v->nqueue > 0 || e[I_ZCARD]->integer > 0;
    /* a count as the semaphore scripts keep it: an optional '-' and at
     * most 16 digits (sem_count.lua) */
    int has_count = 0;
    if (e[I_VALUE]->type == REDIS_REPLY_STRING && e[I_VALUE]->len <= 16 &&
        parse_i64(e[I_VALUE]->str, e[I_VALUE]->len, &v->count) == 0)
        has_count = 1;
    else
        v->count = 0;
    int has_leases = e[I_NLEASES]->integer > 0;
    v->permits_taken = (size_t)e[I_NLEASES]->integer;
    classify(b, odd, fair_data, has_counter, has_count, has_leases);
    if (v->kind != HILOCK_INFO_PERMIT_SEMAPHORE && v->kind != HILOCK_INFO_COUNT)
        v->count = 0;
    v->waiting = -1;
    if (r->elements == I_COUNT + 1) { /* who waits where, by the kind found */
        long long c[S_COUNT];
        for (int i = 0; i < S_COUNT; i++)
            c[i] = e[I_SUBS]->element[i]->integer;
        switch (v->kind) {
        case HILOCK_INFO_REENTRANT:
        case HILOCK_INFO_FENCED: v->waiting = c[S_LOCK]; break;
        case HILOCK_INFO_FAIR: v->waiting = c[S_FAIR]; break;
        case HILOCK_INFO_READWRITE: v->waiting = c[S_RW]; break;
        case HILOCK_INFO_COUNT: v->waiting = c[S_SEM] + c[S_LATCH]; break;
        case HILOCK_INFO_PERMIT_SEMAPHORE: v->waiting = c[S_SEM]; break;
        default: v->waiting = c[S_LOCK] + c[S_RW] + c[S_SEM] + c[S_LATCH] + c[S_FAIR]; break;
        }
    }
    int queue_bad = (strcmp(e[I_QTYPE]->str, "list") && strcmp(e[I_QTYPE]->str, "none")) ||
                    (strcmp(e[I_ZTYPE]->str, "zset") && strcmp(e[I_ZTYPE]->str, "none"));
    int counter_bad = strcmp(e[I_TTYPE]->str, "string") && strcmp(e[I_TTYPE]->str, "none");
    int leases_bad = strcmp(e[I_LTYPE]->str, "zset") && strcmp(e[I_LTYPE]->str, "none");
    if (!b->note[0] && queue_bad)
        snprintf(b->note, sizeof b->note, "fair queue keys hold unexpected types");
    else if (!b->note[0] && leases_bad)
        snprintf(b->note, sizeof b->note, "the permit leases key holds a %s", e[I_LTYPE]->str);
    else if (!b->note[0] && has_leases && v->kind != HILOCK_INFO_PERMIT_SEMAPHORE)
        snprintf(b->note, sizeof b->note, "permit leases exist next to a %s",
                 hl_info_kind_name(v->kind));
    else if (!b->note[0] && odd_id)
        snprintf(b->note, sizeof b->note, "a permit lease is not a 16-byte permit id");
    else if (!b->note[0] && (counter_bad || (e[I_TOKEN]->type == REDIS_REPLY_STRING && !has_counter)))
        snprintf(b->note, sizeof b->note, "the fencing token counter is not a counter");
    *out = v;
    return 0;
}
