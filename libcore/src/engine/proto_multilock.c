/* Protocol layer: the rules of a multi-lock and of Redlock (what counts as
 * taken, how long a Redlock grant is valid, what a failed attempt gives
 * back). No I/O, no clock: the driver (multilock.c) passes the times in. */
#include <stdio.h>
#include <string.h>

#include "proto.h"

size_t hl_ml_quorum(int redlock, size_t n)
{
    return redlock ? n / 2 + 1 : n;
}

int64_t hl_ml_member_timeout(int redlock, int64_t configured_ms)
{
    if (configured_ms > 0)
        return configured_ms;
    return redlock ? HL_ML_REDLOCK_MEMBER_TIMEOUT_MS : 0;
}

int64_t hl_ml_drift(int64_t lease_ms)
{
    return lease_ms / 100 + 2;
}

int64_t hl_ml_validity(int64_t lease_ms, int64_t t0_ms, int64_t t1_ms)
{
    return lease_ms - (t1_ms - t0_ms) - hl_ml_drift(lease_ms);
}

int hl_ml_success(int redlock, size_t n, size_t ok, int fatal, int64_t validity_ms)
{
    if (fatal)
        return 0;
    return redlock ? ok >= hl_ml_quorum(1, n) && validity_ms > 0 : ok == n;
}

int hl_ml_take_back(int redlock, int reentry, int rc)
{
    if (rc == 0)
        return 1; /* taken by this attempt */
    if (reentry)
        return 0; /* an unanswered member may still carry the outer hold */
    if (redlock)
        return rc != HILOCK_ECLOSED; /* every node, even one that seemed to fail */
    /* a multi-lock: the members in doubt (the request may have run) */
    return rc != HILOCK_ETIMEDOUT && rc != HILOCK_ECLOSED && rc != HILOCK_EINVAL &&
           rc != HILOCK_ENOMEM;
}

int hl_ml_hold_lost(int redlock, size_t n, size_t nacquired, size_t nlost)
{
    if (!redlock)
        return nlost > 0;
    return nacquired - nlost < hl_ml_quorum(1, n);
}

int64_t hl_ml_line_window(hilock_kind kind, int64_t wait_ms, int64_t client_window_ms)
{
    if (kind != HILOCK_KIND_FAIR || wait_ms == 0)
        return -1; /* no line, or a single try: leave no trace */
    return wait_ms > 0 ? wait_ms : client_window_ms; /* as a single fair waiter's */
}

int hl_ml_in_line(int64_t window_ms, int rc)
{
    if (window_ms < 0)
        return 0; /* it never joins a line */
    /* a grant takes the waiter out of the line; "held by another" joined it
     * (or kept its place), an error may have */
    return rc != 0;
}

int hl_ml_wakes_on(const hl_ml_member *mb)
{
    return mb->rc == HILOCK_ETIMEDOUT && mb->wakeable;
}

static int64_t shorter(int64_t a, int64_t b) /* -1 = no bound */
{
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    return a < b ? a : b;
}

int64_t hl_ml_wait_ms(int redlock, const hl_ml_member *mb, size_t n, int validity_failed,
                      int64_t backoff_ms, int64_t left_ms)
{
    int64_t s = -1;
    int poll = validity_failed;
    size_t may = 0; /* members that can be ours next time, a message telling when */
    for (size_t i = 0; i < n; i++) {
        if (mb[i].rc == 0) {
            may++; /* taken and given back */
        } else if (mb[i].rc == HILOCK_ETIMEDOUT) {
            if (mb[i].wakeable)
                may++;
            else
                poll = 1; /* nobody tells us when it ends */
            if (mb[i].ttl_ms > 0)
                s = shorter(s, mb[i].ttl_ms); /* its lease ends by then */
            else if (mb[i].ttl_ms != -1)
                poll = 1; /* ending right now, or unknown */
            if (mb[i].line_window_ms > 1) /* in line: not silent for a window */
                s = shorter(s, mb[i].line_window_ms / 2);
        }
    }
    if (may < hl_ml_quorum(redlock, n))
        poll = 1; /* the failed members must answer again */
    if (poll)
        s = shorter(s, backoff_ms > 0 ? backoff_ms : 1);
    if (left_ms >= 0)
        s = shorter(s, left_ms);
    return s;
}

int hl_ml_fatal(int redlock, int rc)
{
    if (rc == 0 || rc == HILOCK_ETIMEDOUT || rc == HILOCK_ECONN)
        return 0;
    if (redlock)
        return rc == HILOCK_ECLOSED || rc == HILOCK_EINVAL || rc == HILOCK_ENOMEM;
    return 1;
}

int hl_ml_fail_code(int redlock, size_t n, size_t ok, size_t busy, int first_err)
{
    /* only errors, nobody else holding: report the error */
    if (busy == 0 && first_err && !(redlock && ok >= hl_ml_quorum(1, n)))
        return first_err;
    return HILOCK_ETIMEDOUT;
}

int hl_ml_release_code(int redlock, size_t n, size_t ok, size_t notowner, int first_err)
{
    if (ok >= hl_ml_quorum(redlock, n))
        return 0;
    return notowner ? HILOCK_ENOTOWNER : first_err ? first_err : HILOCK_ENOTOWNER;
}

#define ML_BACKOFF_MIN_MS 1
#define ML_BACKOFF_MAX_MS 50

int64_t hl_ml_backoff(unsigned attempt, uint64_t r)
{
    int64_t cap = ML_BACKOFF_MIN_MS + 5 + 5 * (int64_t)(attempt < 9 ? attempt : 9);
    if (cap > ML_BACKOFF_MAX_MS)
        cap = ML_BACKOFF_MAX_MS;
    return ML_BACKOFF_MIN_MS + (int64_t)(r % (uint64_t)cap);
}

/* The value of name in a CONFIG GET reply (name, value pairs: an array in
 * RESP2, a map in RESP3), or NULL. */
static const char *config_value(const redisReply *r, const char *name)
{
    if (r->type != REDIS_REPLY_ARRAY && r->type != REDIS_REPLY_MAP)
        return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (!k || !v || (k->type != REDIS_REPLY_STRING && k->type != REDIS_REPLY_STATUS) ||
            (v->type != REDIS_REPLY_STRING && v->type != REDIS_REPLY_STATUS))
            continue;
        if (k->len == strlen(name) && strncmp(k->str, name, k->len) == 0)
            return v->str;
    }
    return NULL;
}

int hl_ml_durability(const redisReply *r, const char *err, int delayed_restart, char *why,
                     size_t len)
{
    if (why && len)
        why[0] = 0;
    if (delayed_restart)
        return 0;
    if (!r) {
        snprintf(why, len, "its persistence settings were not read (%s)",
                 err && err[0] ? err : "no reply");
        return 1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, len, "its persistence settings could not be read (CONFIG GET: %.200s)",
                 r->str ? r->str : "error");
        return 1;
    }
    const char *aof = config_value(r, "appendonly");
    const char *fsync = config_value(r, "appendfsync");
    if (!aof || !fsync) {
        snprintf(why, len, "its persistence settings could not be read (CONFIG GET append* "
                           "gave no appendonly/appendfsync)");
        return 1;
    }
    if (strcmp(aof, "yes") != 0) {
        snprintf(why, len, "appendonly %.20s: a restart loses the holds it granted", aof);
        return 1;
    }
    if (strcmp(fsync, "always") != 0) {
        snprintf(why, len,
                 "appendfsync %.20s: a crash of its machine can lose the last grants", fsync);
        return 1;
    }
    return 0;
}
