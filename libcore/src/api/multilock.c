/*
 * Multi-lock and Redlock: several ordinary locks (reentrant or fair, on one
 * or several clients) taken as one.
 *
 *   multi-lock  all members or none;
 *   Redlock     a majority (n/2+1) of n locks on independent servers, within
 *               the validity window  lease - elapsed - (lease/100 + 2 ms).
 *
 * Those rules (quorum, drift, validity, success, what a failed attempt gives
 * back, when a hold is lost) are the engine's: proto_multilock.c. This file
 * runs the members' requests, times them and keeps the holds.
 *
 * Each attempt has every member's request in flight at once, from the
 * calling thread: the members' scripts are written on their nodes'
 * connections, then the replies are collected as they come (hl_exec_fan:
 * poll() over those sockets), each bounded by the member timeout. An
 * attempt that fails releases what it may have taken (Redlock: on every
 * node), the same way, and the next one starts after a short random pause.
 *
 * Member loss (watchdog): every member handle carries a loss hook
 * (hl_lock_add_lost_hook) with this multi-lock as payload. Removing the hook
 * in hilock_multilock_free waits for a call of it in progress, so a
 * multi-lock can be freed at any time, from any thread; from a lost
 * callback (running on a watchdog thread) the free is deferred until that
 * watchdog pass's reports are over.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"

#define ML_WATCHDOG_LEASE_DEFAULT 30000
/* hilock_redlock_new's persistence check: connect + reply, per member, all
 * members at once */
#define ML_DURABLE_CHECK_MS 1000

enum { ML_OP_ACQUIRE = 1, ML_OP_RELEASE, ML_OP_HELD, ML_OP_LEAVE, ML_OP_DURABLE };

typedef struct ml_job {
    int op;
    size_t index; /* member index */
    hilock_lock *lock;
    uint64_t tid;
    int64_t lease_ms;
    int64_t window_ms; /* acquire, leave: a fair member's line window, -1 none */
    int64_t timeout_ms;
    int rc;
    int64_t value; /* acquire: holder's ttl; held: 1/0 */
    char err[HL_ERRMSG_MAX];
    int active;    /* still has requests to make */
    union {
        hl_try t;  /* acquire */
        hl_rel r;  /* release */
        struct {   /* held, leave */
            hl_cmd cmd;
            char owner[HL_OWNER_MAX];
        } h;
    } u;
} ml_job;

/* The hold of one thread id. */
typedef struct ml_hold {
    struct ml_hold *next;
    uint64_t tid;
    int64_t count;          /* acquisitions not yet released */
    int lost;               /* reported lost */
    int valid_watchdog;     /* last acquire under the watchdog: no end */
    int64_t valid_until;    /* last acquire's validity end, monotonic ms */
    size_t nacquired;       /* members taken (union over the holds) */
    size_t nlost;           /* of those, found lost by the watchdog */
    unsigned char *acquired;
    unsigned char *lostm;
} ml_hold;

typedef struct ml_pending {
    struct ml_pending *next;
    uint64_t tid;
    int cancelled;     /* guarded by the multi-lock's mu */
    hl_notify *notify; /* while waiting on the members' messages (mu) */
} ml_pending;

struct hilock_multilock {
    hilock_lock **locks;
    size_t n;
    int redlock;
    size_t quorum;

    pthread_mutex_t mu; /* guards the fields below up to errmsg (included) */
    int64_t member_timeout_ms; /* 0 = default */
    ml_hold *holds;
    int lost; /* atomic reads */
    hilock_multilock_lost_cb lost_cb;
    void *lost_payload;
    struct ml_pending *pending; /* acquires waiting, for hilock_multilock_cancel */
    pthread_cond_t ccv;         /* with mu: a pending acquire was cancelled */

    char errmsg[HL_ERRMSG_MAX];
    char *warning; /* Redlock: what hl_ml_durability found at construction,
                      NULL when nothing; not changed after ml_new */
    int freeing; /* atomic: freed from a lost callback, free deferred */
    hl_deferred free_later;
};


/* ------------------------------------------------------------------ */
/* small helpers                                                        */
/* ------------------------------------------------------------------ */

static void ml_set_err(hilock_multilock *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void ml_set_err(hilock_multilock *m, const char *fmt, ...)
{
    char buf[HL_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&m->mu);
    memcpy(m->errmsg, buf, sizeof buf);
    pthread_mutex_unlock(&m->mu);
    hl_err_note(m, buf);
}

/* A message for a constructor failure goes to the offending member handle
 * (the multi-lock does not exist). */
static void ml_lock_err(hilock_lock *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void ml_lock_err(hilock_lock *l, const char *fmt, ...)
{
    char buf[HL_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&l->mu);
    memcpy(l->errmsg, buf, sizeof buf);
    pthread_mutex_unlock(&l->mu);
    hl_err_note(l, buf);
}

static void ml_copy_lock_err(ml_job *j)
{
    /* this thread's own failure on the member (not another thread's) */
    snprintf(j->err, sizeof j->err, "%s", hilock_lock_errmsg(j->lock));
    if (!j->err[0])
        snprintf(j->err, sizeof j->err, "%s", hilock_strerror(j->rc));
}

/* Sleep ms unless p is cancelled first; 1 when p is cancelled. */
static int ml_pause(hilock_multilock *m, ml_pending *p, int64_t ms)
{
    struct timespec ts;
    hl_abs_timespec(&ts, ms > 0 ? ms : 0);
    pthread_mutex_lock(&m->mu);
    while (!p->cancelled && ms > 0)
        if (pthread_cond_timedwait(&m->ccv, &m->mu, &ts) == ETIMEDOUT)
            break;
    int cancelled = p->cancelled;
    pthread_mutex_unlock(&m->mu);
    return cancelled;
}

static int ml_pending_check(hilock_multilock *m, ml_pending *p)
{
    pthread_mutex_lock(&m->mu);
    int cancelled = p->cancelled;
    pthread_mutex_unlock(&m->mu);
    return cancelled;
}

HILOCK_API int hilock_multilock_cancel(int *cancelled, hilock_multilock *m, uint64_t tid)
{
    if (cancelled)
        *cancelled = 0;
    if (!m)
        return HILOCK_EINVAL;
    int n = 0;
    pthread_mutex_lock(&m->mu);
    for (ml_pending *p = m->pending; p; p = p->next)
        if (p->tid == tid && !p->cancelled) {
            p->cancelled = 1;
            if (p->notify)
                hl_notify_fire(p->notify);
            n++;
        }
    if (n)
        pthread_cond_broadcast(&m->ccv);
    pthread_mutex_unlock(&m->mu);
    if (cancelled)
        *cancelled = n > 0;
    return 0;
}

static uint64_t ml_rand(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static int ml_same_server(const hilock_client *a, const hilock_client *b)
{
    if (a == b)
        return 1;
    if (a->t.ep.db != b->t.ep.db)
        return 0;
    if (a->t.ep.host && b->t.ep.host)
        return a->t.ep.port == b->t.ep.port && strcmp(a->t.ep.host, b->t.ep.host) == 0;
    if (a->t.ep.path && b->t.ep.path)
        return strcmp(a->t.ep.path, b->t.ep.path) == 0;
    return 0;
}

static const char *ml_kind(const hilock_multilock *m)
{
    return m->redlock ? "redlock" : "multi-lock";
}

/* ------------------------------------------------------------------ */
/* parallel requests                                                    */
/* ------------------------------------------------------------------ */

/* Start job j: 1 when it has a request to make, 0 when it is over. */
static int ml_job_begin(ml_job *j)
{
    hilock_lock *l = j->lock;
    j->err[0] = 0;
    j->value = 0;
    switch (j->op) {
    case ML_OP_ACQUIRE:
        j->rc = hl_lock_try_begin(l, j->tid, j->lease_ms, j->window_ms, &j->u.t);
        if (j->rc)
            ml_copy_lock_err(j);
        return j->rc == 0;
    case ML_OP_RELEASE:
        memset(&j->u.r, 0, sizeof j->u.r);
        if (hl_lock_release_begin(l, j->tid, j->timeout_ms, &j->u.r) == 0)
            return 1;
        j->rc = hl_lock_release_end(l, &j->u.r);
        if (j->rc)
            ml_copy_lock_err(j);
        return 0;
    case ML_OP_HELD:
        j->rc = hl_client_check(l->client, j->err);
        if (j->rc)
            return 0;
        hl_hold_owner(j->u.h.owner, l->kind, l->client->t.id, j->tid);
        hl_cmd_hexists(&j->u.h.cmd, &l->names, j->u.h.owner);
        return 1;
    case ML_OP_LEAVE: /* give up a place in a fair member's line */
        j->rc = hl_client_check(l->client, j->err);
        if (j->rc)
            return 0;
        hl_hold_owner(j->u.h.owner, l->kind, l->client->t.id, j->tid);
        hl_cmd_fair_cancel(&j->u.h.cmd, &l->names, j->u.h.owner, j->window_ms);
        return 1;
    case ML_OP_DURABLE: /* a Redlock member's AOF settings (hl_ml_durability) */
        if (l->client->t.ep.delayed_restart)
            return 0;
        j->rc = hl_client_check(l->client, j->err);
        if (j->rc) {
            char why[HL_ERRMSG_MAX];
            j->value = hl_ml_durability(NULL, j->err, 0, why, sizeof why);
            snprintf(j->err, sizeof j->err, "%s", why);
            return 0;
        }
        hl_cmd_config_append(&j->u.h.cmd);
        return 1;
    default:
        j->rc = HILOCK_EINVAL;
        return 0;
    }
}

/* j's next request into f; 0 when j is over. */
static int ml_job_next(ml_job *j, int round, hl_fan *f)
{
    memset(f, 0, sizeof *f);
    f->client = &j->lock->client->t;
    f->timeout_ms = j->timeout_ms;
    switch (j->op) {
    case ML_OP_ACQUIRE:
        f->cmd = &j->u.t.cmd;
        j->u.t.sent_at = hl_now_mono_ms();
        return round == 0;
    case ML_OP_HELD:
    case ML_OP_LEAVE:
    case ML_OP_DURABLE:
        f->cmd = &j->u.h.cmd;
        return round == 0;
    case ML_OP_RELEASE:
        if (!hl_lock_release_next(j->lock, &j->u.r)) {
            j->rc = hl_lock_release_end(j->lock, &j->u.r);
            if (j->rc)
                ml_copy_lock_err(j);
            return 0;
        }
        f->cmd = &j->u.r.m.cmd;
        f->timeout_ms = j->u.r.m.timeout_ms;
        f->want_ack = 1; /* as a single release: WAIT when the client asks */
        return 1;
    }
    return 0;
}

/* The outcome of j's request f. */
static void ml_job_feed(ml_job *j, hl_fan *f)
{
    switch (j->op) {
    case ML_OP_ACQUIRE: {
        int64_t ttl = -1;
        j->rc = hl_lock_try_end(j->lock, j->tid, j->lease_ms, j->timeout_ms, &j->u.t, f->rc,
                                f->reply, f->err, &ttl);
        j->value = ttl;
        if (j->rc != 0 && j->rc != HILOCK_ETIMEDOUT)
            ml_copy_lock_err(j);
        j->active = 0;
        break;
    }
    case ML_OP_RELEASE:
        hl_lock_release_feed(j->lock, &j->u.r, f->rc, f->reply, f->err);
        break; /* the machine says whether another request follows */
    case ML_OP_HELD: {
        j->rc = f->rc;
        if (f->rc == 0) {
            int64_t v = 0;
            j->rc = hl_decode_flag(f->reply, &v);
            if (j->rc == 0)
                j->value = v == 1;
            else
                snprintf(j->err, sizeof j->err, "unexpected reply to HEXISTS");
            freeReplyObject(f->reply);
        } else {
            snprintf(j->err, sizeof j->err, "%s", f->err[0] ? f->err : hilock_strerror(f->rc));
        }
        j->active = 0;
        break;
    }
    case ML_OP_LEAVE:
        /* 1 left, 0 was not in line; an error leaves the entry to the
         * line's own eviction of silent waiters (its deadline) */
        j->rc = f->rc;
        if (f->rc == 0 && f->reply->type == REDIS_REPLY_ERROR) {
            j->rc = HILOCK_EPROTO;
            snprintf(j->err, sizeof j->err, "server error: %s", f->reply->str);
        }
        if (f->reply)
            freeReplyObject(f->reply);
        j->active = 0;
        break;
    case ML_OP_DURABLE:
        j->rc = f->rc;
        j->value = hl_ml_durability(f->rc == 0 ? f->reply : NULL, f->err,
                                    j->lock->client->t.ep.delayed_restart, j->err,
                                    sizeof j->err);
        if (f->reply)
            freeReplyObject(f->reply);
        j->active = 0;
        break;
    }
    f->reply = NULL;
}

/* Run the jobs with every member's request in flight at once (rounds:
 * a release may need a second request) and return when all are done. */
static void ml_run_batch(ml_job *jobs, size_t n)
{
    if (n == 0)
        return;
    hl_fan *fan = calloc(n, sizeof *fan);
    size_t *who = calloc(n, sizeof *who);
    if (!fan || !who) {
        free(fan);
        free(who);
        for (size_t i = 0; i < n; i++) {
            jobs[i].rc = HILOCK_ENOMEM;
            snprintf(jobs[i].err, sizeof jobs[i].err, "out of memory");
        }
        return;
    }
    for (size_t i = 0; i < n; i++)
        jobs[i].active = ml_job_begin(&jobs[i]);
    for (int round = 0;; round++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (!jobs[i].active)
                continue;
            if (ml_job_next(&jobs[i], round, &fan[k]))
                who[k++] = i;
            else
                jobs[i].active = 0;
        }
        if (k == 0)
            break;
        hl_exec_fan(fan, k);
        for (size_t q = 0; q < k; q++)
            ml_job_feed(&jobs[who[q]], &fan[q]);
    }
    free(fan);
    free(who);
}

/* ------------------------------------------------------------------ */
/* holds and member loss                                                */
/* ------------------------------------------------------------------ */

static ml_hold *ml_hold_find(hilock_multilock *m, uint64_t tid)
{
    for (ml_hold *h = m->holds; h; h = h->next)
        if (h->tid == tid)
            return h;
    return NULL;
}

static ml_hold *ml_hold_alloc(size_t n, uint64_t tid)
{
    ml_hold *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->acquired = calloc(n, 1);
    h->lostm = calloc(n, 1);
    if (!h->acquired || !h->lostm) {
        free(h->acquired);
        free(h->lostm);
        free(h);
        return NULL;
    }
    h->tid = tid;
    return h;
}

static void ml_hold_free(ml_hold *h)
{
    if (!h)
        return;
    free(h->acquired);
    free(h->lostm);
    free(h);
}

static int ml_hold_lost(const hilock_multilock *m, const ml_hold *h)
{
    return hl_ml_hold_lost(m->redlock, m->n, h->nacquired, h->nlost);
}

static void ml_member_lost(struct hilock_lock *l, uint64_t tid, void *payload)
{
    /* Runs on l's watchdog thread with l's hook list locked; the multi-lock
     * cannot be freed meanwhile (removing the hook waits for us). */
    hilock_multilock *m = payload;
    if (__atomic_load_n(&m->freeing, __ATOMIC_ACQUIRE))
        return; /* freed by a callback of this pass: no more reports */
    size_t i;
    for (i = 0; i < m->n; i++)
        if (m->locks[i] == l)
            break;
    if (i == m->n)
        return;
    hilock_multilock_lost_cb cb = NULL;
    void *cb_payload = NULL;
    pthread_mutex_lock(&m->mu);
    ml_hold *h = ml_hold_find(m, tid);
    if (h && h->acquired[i] && !h->lostm[i]) {
        h->lostm[i] = 1;
        h->nlost++;
        if (!h->lost && ml_hold_lost(m, h)) {
            h->lost = 1;
            __atomic_store_n(&m->lost, 1, __ATOMIC_RELEASE);
            hl_set_err(m->errmsg, "%s lost: member '%s' gone (%zu of %zu members still held)",
                       ml_kind(m), l->names.name, h->nacquired - h->nlost, m->n);
            cb = m->lost_cb;
            cb_payload = m->lost_payload;
        }
    }
    pthread_mutex_unlock(&m->mu);
    if (cb)
        cb(m, tid, cb_payload);
}

/* ------------------------------------------------------------------ */
/* construction                                                         */
/* ------------------------------------------------------------------ */

/* Where a member's server is, for a message: host:port, the socket path,
 * the Sentinel master's name or "a cluster". */
static void ml_where(const hilock_client *c, char *buf, size_t len)
{
    const hl_endpoint *ep = &c->t.ep;
    if (ep->master_name)
        snprintf(buf, len, "Sentinel master %s", ep->master_name);
    else if (ep->cluster)
        snprintf(buf, len, "a cluster");
    else if (ep->path)
        snprintf(buf, len, "%s", ep->path);
    else
        snprintf(buf, len, "%s:%d", ep->host ? ep->host : "?", ep->port);
}

/* A Redlock's check of its members' durability at construction (issue 29,
 * docs/safety.md): every member server not declared delayed_restart=1 is
 * asked for its AOF settings, all at once; one whose restart can lose the
 * holds it granted (hl_ml_durability) gets a HILOCK_TRACE_WARNING on its
 * client's trace callback, and the messages are kept for
 * hilock_multilock_warning. A member on the same server as an earlier one
 * is asked once. Best effort: out of memory, nothing is checked. */
static void ml_check_durability(hilock_multilock *m)
{
    ml_job *jobs = calloc(m->n, sizeof *jobs);
    size_t *idx = calloc(m->n, sizeof *idx);
    if (!jobs || !idx) {
        free(jobs);
        free(idx);
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++) {
        int dup = 0;
        for (size_t q = 0; q < i && !dup; q++)
            dup = ml_same_server(m->locks[q]->client, m->locks[i]->client);
        if (dup)
            continue;
        jobs[k].op = ML_OP_DURABLE;
        jobs[k].index = i;
        jobs[k].lock = m->locks[i];
        jobs[k].timeout_ms = ML_DURABLE_CHECK_MS;
        idx[k++] = i;
    }
    ml_run_batch(jobs, k);
    size_t cap = 0, used = 0;
    for (size_t q = 0; q < k; q++) {
        if (!jobs[q].value)
            continue;
        hilock_lock *l = jobs[q].lock;
        char where[300], msg[sizeof where + HL_ERRMSG_MAX + 512];
        ml_where(l->client, where, sizeof where);
        snprintf(msg, sizeof msg,
                 "redlock: member %zu ('%s' on %s): %s; another client can then win a "
                 "majority while a hold lasts. Run the members with appendonly yes and "
                 "appendfsync always, or keep a crashed member down for longer than the "
                 "longest lease and say so with delayed_restart=1 in its URL (docs/safety.md)",
                 idx[q], l->names.name, where, jobs[q].err);
        hl_stats_event(&l->client->t.stats, HILOCK_TRACE_WARNING, msg);
        size_t len = strlen(msg);
        if (used + len + 2 > cap) {
            size_t ncap = (used + len + 2) * 2;
            char *w = realloc(m->warning, ncap);
            if (!w)
                continue;
            m->warning = w;
            cap = ncap;
        }
        if (used)
            m->warning[used++] = '\n';
        memcpy(m->warning + used, msg, len + 1);
        used += len;
    }
    free(jobs);
    free(idx);
}

static int ml_new(hilock_multilock **out, hilock_lock *const *locks, size_t n, int redlock)
{
    if (!out)
        return HILOCK_EINVAL;
    *out = NULL;
    if (!locks || n == 0)
        return HILOCK_EINVAL; /* empty list: no handle to carry a message */
    for (size_t i = 0; i < n; i++)
        if (!locks[i]) {
            /* report on any non-NULL member */
            for (size_t k = 0; k < n; k++)
                if (locks[k]) {
                    ml_lock_err(locks[k], "%s: member %zu of %zu is NULL",
                                redlock ? "redlock" : "multi-lock", i, n);
                    break;
                }
            return HILOCK_EINVAL;
        }
    if (redlock && (n < 3 || n % 2 == 0)) {
        ml_lock_err(locks[0],
                    "redlock needs an odd number of locks >= 3 (got %zu): with an even "
                    "count a majority is no safer than with one lock fewer",
                    n);
        return HILOCK_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        char err[HL_ERRMSG_MAX] = "";
        int rc = hl_client_check(locks[i]->client, err);
        if (rc != 0) {
            ml_lock_err(locks[i], "%s: member %zu ('%s'): %s",
                        redlock ? "redlock" : "multi-lock", i, locks[i]->names.name,
                        err[0] ? err : hilock_strerror(rc));
            return rc;
        }
        for (size_t k = 0; k < i; k++) {
            if (locks[k] == locks[i]) {
                ml_lock_err(locks[i], "%s: member %zu is the same handle as member %zu",
                            redlock ? "redlock" : "multi-lock", i, k);
                return HILOCK_EINVAL;
            }
            if (strcmp(locks[k]->names.name, locks[i]->names.name) == 0 &&
                ml_same_server(locks[k]->client, locks[i]->client)) {
                ml_lock_err(locks[i],
                            "%s: members %zu and %zu are the same lock '%s' on the same "
                            "server",
                            redlock ? "redlock" : "multi-lock", k, i, locks[i]->names.name);
                return HILOCK_EINVAL;
            }
        }
    }

    hilock_multilock *m = calloc(1, sizeof *m);
    if (!m)
        return HILOCK_ENOMEM;
    m->locks = malloc(n * sizeof *m->locks);
    if (!m->locks) {
        free(m);
        return HILOCK_ENOMEM;
    }
    memcpy(m->locks, locks, n * sizeof *m->locks);
    m->n = n;
    m->redlock = redlock;
    m->quorum = hl_ml_quorum(redlock, n);
    m->member_timeout_ms = 0;
    pthread_mutex_init(&m->mu, NULL);
    hl_cond_init_mono(&m->ccv);
    m->errmsg[0] = 0;
    hl_err_forget(m);

    for (size_t i = 0; i < n; i++) {
        if (hl_lock_add_lost_hook(locks[i], ml_member_lost, m) != 0) {
            m->n = i; /* only the hooks added so far are removed */
            hilock_multilock_free(m);
            return HILOCK_ENOMEM;
        }
    }
    if (redlock)
        ml_check_durability(m);
    *out = m;
    return 0;
}

HILOCK_API int hilock_multilock_new(hilock_multilock **out, hilock_lock *const *locks,
                                    size_t n)
{
    return ml_new(out, locks, n, 0);
}

HILOCK_API int hilock_redlock_new(hilock_multilock **out, hilock_lock *const *locks,
                                  size_t n)
{
    return ml_new(out, locks, n, 1);
}

static void ml_free_now(void *arg)
{
    hilock_multilock *m = arg;
    hl_err_forget(m);
    /* after this no loss notification runs or starts for m */
    for (size_t i = 0; i < m->n; i++)
        hl_lock_remove_lost_hook(m->locks[i], ml_member_lost, m);
    while (m->holds) {
        ml_hold *h = m->holds;
        m->holds = h->next;
        ml_hold_free(h);
    }
    pthread_cond_destroy(&m->ccv);
    pthread_mutex_destroy(&m->mu);
    free(m->warning);
    free(m->locks);
    free(m);
}

HILOCK_API void hilock_multilock_free(hilock_multilock *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        hilock_client *c = m->locks[i]->client;
        if (!hl_transport_forked(&c->t) && hl_wd_on_thread(&c->t)) {
            /* from a lost callback (ours or a member's): a member's report
             * in progress holds that member's hook list; freed when the
             * pass's reports are over, and no further report reaches m */
            __atomic_store_n(&m->freeing, 1, __ATOMIC_RELEASE);
            m->free_later.fn = ml_free_now;
            m->free_later.arg = m;
            hl_wd_defer(&c->t, &m->free_later);
            return;
        }
    }
    ml_free_now(m);
}

HILOCK_API int hilock_multilock_set_member_timeout(hilock_multilock *m, int64_t ms)
{
    if (!m)
        return HILOCK_EINVAL;
    if (ms < 0 || ms > HILOCK_MAX_TIME_MS) {
        ml_set_err(m, "member timeout must be 0 (default) or a positive number of ms");
        return HILOCK_EINVAL;
    }
    pthread_mutex_lock(&m->mu);
    m->member_timeout_ms = ms;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

static int64_t ml_member_timeout(hilock_multilock *m)
{
    pthread_mutex_lock(&m->mu);
    int64_t t = m->member_timeout_ms;
    pthread_mutex_unlock(&m->mu);
    return hl_ml_member_timeout(m->redlock, t); /* 0: each client's own timeouts */
}

/* The lease the watchdog gives the members: the shortest of their clients'. */
static int64_t ml_watchdog_lease(const hilock_multilock *m)
{
    int64_t best = -1;
    for (size_t i = 0; i < m->n; i++) {
        int64_t w = m->locks[i]->client->t.opts.watchdog_lease_ms;
        if (w <= 0)
            w = ML_WATCHDOG_LEASE_DEFAULT;
        if (best < 0 || w < best)
            best = w;
    }
    return best;
}

/* ------------------------------------------------------------------ */
/* waiting on the members' unlock messages                              */
/* ------------------------------------------------------------------ */

/* The subscriptions of one waiting acquire: a waiter per member (a fair
 * member: on the call's own waiter channel, which the member's unlock uses
 * once the call heads its line), all attached to one notify. */
typedef struct ml_subs {
    hl_waiter *w;
    unsigned char *on;    /* w[i] registered */
    hl_ml_member *mb;     /* the last attempt's outcome per member */
    hl_notify nt;
    int started;
} ml_subs;

static int ml_subs_alloc(ml_subs *s, size_t n)
{
    memset(s, 0, sizeof *s);
    s->w = calloc(n, sizeof *s->w);
    s->on = calloc(n, 1);
    s->mb = calloc(n, sizeof *s->mb);
    if (!s->w || !s->on || !s->mb) {
        free(s->w);
        free(s->on);
        free(s->mb);
        memset(s, 0, sizeof *s);
        return HILOCK_ENOMEM;
    }
    return 0;
}

static void ml_sub_one(hilock_multilock *m, ml_subs *s, size_t i, uint64_t tid)
{
    hilock_lock *l = m->locks[i];
    char owner[HL_OWNER_MAX];
    hl_hold_owner(owner, l->kind, l->client->t.id, tid);
    char *ch = hl_wait_channel(l->kind, &l->names, owner);
    if (!ch)
        return;
    /* no wait for the server's confirmation here: ml_subs_start waits for
     * all of them at once */
    hl_sub_register(&l->client->t, &s->w[i], ch, 0);
    free(ch);
    if (s->w[i].chan) {
        s->on[i] = 1;
        hl_sub_notify(&s->w[i], &s->nt);
    } else {
        hl_sub_unregister(&l->client->t, &s->w[i]); /* not registered: its cv */
    }
}

/* Subscribe to every member's channel and wait (up to ms) for the servers
 * to confirm; pend's cancel fires the notify from now on. */
static void ml_subs_start(hilock_multilock *m, ml_subs *s, ml_pending *pend, uint64_t tid,
                          int64_t ms)
{
    hl_notify_init(&s->nt);
    s->started = 1;
    pthread_mutex_lock(&m->mu);
    pend->notify = &s->nt;
    if (pend->cancelled)
        hl_notify_fire(&s->nt);
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < m->n; i++)
        ml_sub_one(m, s, i, tid);
    int64_t end = hl_now_mono_ms() + ms;
    for (size_t i = 0; i < m->n; i++)
        if (s->on[i]) {
            int64_t left = end - hl_now_mono_ms();
            hl_sub_confirmed(&s->w[i], left > 0 ? left : 0);
        }
}

static void ml_subs_stop(hilock_multilock *m, ml_subs *s, ml_pending *pend)
{
    if (s->started) {
        pthread_mutex_lock(&m->mu);
        pend->notify = NULL;
        pthread_mutex_unlock(&m->mu);
        for (size_t i = 0; i < m->n; i++)
            if (s->on[i])
                hl_sub_unregister(&m->locks[i]->client->t, &s->w[i]);
        hl_notify_destroy(&s->nt);
    }
    free(s->w);
    free(s->on);
    free(s->mb);
    memset(s, 0, sizeof *s);
}

/* Sleep up to ms (-1: no limit) until a member found held is unlocked (its
 * message), or pend is cancelled. Messages on the other members' channels
 * are passed on to their other waiters. */
static void ml_subs_wait(hilock_multilock *m, ml_subs *s, ml_pending *pend, uint64_t tid,
                         int64_t ms)
{
    int64_t end = ms < 0 ? -1 : hl_now_mono_ms() + ms;
    for (;;) {
        int64_t left = end < 0 ? -1 : end - hl_now_mono_ms();
        if (end >= 0 && left <= 0)
            return;
        if (!hl_notify_wait(&s->nt, left))
            return; /* time's up */
        if (ml_pending_check(m, pend))
            return;
        int retry = 0;
        for (size_t i = 0; i < m->n; i++) {
            if (!s->on[i])
                continue;
            int moved = 0;
            retry |= hl_sub_take(&s->w[i], !hl_ml_wakes_on(&s->mb[i]), &moved);
            if (moved) { /* the slot moved: listen where it lives now */
                hl_sub_unregister(&m->locks[i]->client->t, &s->w[i]);
                s->on[i] = 0;
                ml_sub_one(m, s, i, tid);
                retry = 1;
            }
        }
        if (retry)
            return;
    }
}

/* ------------------------------------------------------------------ */
/* acquire                                                              */
/* ------------------------------------------------------------------ */

/* "member 2 ('x'): message; member 4 ('y'): message" of the failed jobs. */
static void ml_describe_failures(const hilock_multilock *m, const ml_job *jobs, char *buf,
                                 size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < m->n && used + 1 < len; i++) {
        const ml_job *j = &jobs[i];
        if (j->rc == 0)
            continue;
        const char *why = j->rc == HILOCK_ETIMEDOUT
                              ? (j->op == ML_OP_ACQUIRE ? "held by another owner" : "")
                              : (j->err[0] ? j->err : hilock_strerror(j->rc));
        if (j->op == ML_OP_RELEASE && j->rc == HILOCK_ENOTOWNER)
            why = "not held";
        int w = snprintf(buf + used, len - used, "%s#%zu '%s': %s", used ? "; " : "", i,
                         m->locks[i]->names.name, why);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (used >= len && len > 4)
        memcpy(buf + len - 4, "...", 4);
}

/* One multi-lock acquire call: its inputs, the rules' figures derived from
 * them, and the buffers its attempts reuse. */
typedef struct ml_acq {
    hilock_multilock *m;
    uint64_t tid;
    int64_t wait_ms, lease_ms;
    int64_t deadline;  /* monotonic ms, -1: none */
    int64_t vlease;    /* the lease validity is counted against */
    int64_t drift;
    int64_t timeout;   /* per member */
    int reentry;       /* tid already holds it */
    ml_pending pend;   /* for hilock_multilock_cancel */
    ml_subs subs;      /* the members' unlock messages, after a first failure */
    ml_job *jobs, *undo;
    unsigned char *ready;
    int64_t *window;   /* per member: hl_ml_line_window */
    unsigned char *in_line; /* per member: the call may have an entry in its line */
    ml_hold *fresh;    /* the hold record a first grant files */
    uint64_t rng;
    /* the last attempt */
    int64_t t0, t1;
    size_t ok, busy;
    int first_err, fatal;
} ml_acq;

/* Job j: op on member i for this call. */
static void ml_acq_job(const ml_acq *q, ml_job *j, int op, size_t i)
{
    memset(j, 0, sizeof *j);
    j->op = op;
    j->index = i;
    j->lock = q->m->locks[i];
    j->tid = q->tid;
    j->lease_ms = q->lease_ms > 0 ? q->lease_ms : 0;
    j->window_ms = q->window[i];
    j->timeout_ms = q->timeout;
}

/* Lists the call for cancel and allocates its buffers; the result code. */
static int ml_acq_begin(ml_acq *q)
{
    hilock_multilock *m = q->m;
    pthread_mutex_lock(&m->mu);
    q->reentry = ml_hold_find(m, q->tid) != NULL;
    if (q->wait_ms != 0) { /* only a wait can be cancelled */
        q->pend.next = m->pending;
        m->pending = &q->pend;
    }
    pthread_mutex_unlock(&m->mu);
    q->jobs = calloc(m->n, sizeof *q->jobs);
    q->undo = calloc(m->n, sizeof *q->undo);
    q->ready = calloc(m->n, 1);
    q->window = calloc(m->n, sizeof *q->window);
    q->in_line = calloc(m->n, 1);
    q->fresh = q->reentry ? NULL : ml_hold_alloc(m->n, q->tid);
    if (!q->jobs || !q->undo || !q->ready || !q->window || !q->in_line ||
        (!q->reentry && !q->fresh)) {
        ml_set_err(m, "out of memory");
        return HILOCK_ENOMEM;
    }
    q->rng = (uint64_t)hl_now_mono_ms() * 0x9E3779B97F4A7C15ULL ^ q->tid ^
             (uint64_t)(uintptr_t)&q->rng ^ (uint64_t)(uintptr_t)m;
    if (!q->rng)
        q->rng = 0x1234567;
    for (size_t i = 0; i < m->n; i++)
        q->window[i] = hl_ml_line_window(m->locks[i]->kind, q->wait_ms,
                                         m->locks[i]->client->t.opts.fair_wait_window_ms);
    return 0;
}

/* The call is over: leave the lines of the fair members it may still be
 * waiting in (all in flight at once), so that nobody behind waits for it. */
static void ml_acq_leave_lines(ml_acq *q)
{
    hilock_multilock *m = q->m;
    if (!q->in_line || !q->undo)
        return;
    size_t nu = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (!q->in_line[i])
            continue;
        ml_acq_job(q, &q->undo[nu++], ML_OP_LEAVE, i);
        q->in_line[i] = 0;
    }
    ml_run_batch(q->undo, nu);
}

/* Stops listening, frees the buffers, takes the call off the cancel list. */
static void ml_acq_end(ml_acq *q)
{
    hilock_multilock *m = q->m;
    ml_acq_leave_lines(q);
    ml_subs_stop(m, &q->subs, &q->pend); /* also when it never listened */
    free(q->jobs);
    free(q->undo);
    free(q->ready);
    free(q->window);
    free(q->in_line);
    ml_hold_free(q->fresh);
    pthread_mutex_lock(&m->mu);
    for (ml_pending **pp = &m->pending; *pp; pp = &(*pp)->next)
        if (*pp == &q->pend) {
            *pp = q->pend.next;
            break;
        }
    pthread_mutex_unlock(&m->mu);
}

/* Before an attempt: cancelled, or a member's client unusable? 0 or the
 * result code (the message set). */
static int ml_acq_precheck(ml_acq *q)
{
    hilock_multilock *m = q->m;
    if (ml_pending_check(m, &q->pend)) {
        ml_set_err(m, "%s: acquire by thread %llu cancelled", ml_kind(m),
                   (unsigned long long)q->tid);
        return HILOCK_ECANCELED;
    }
    char err[HL_ERRMSG_MAX] = "";
    for (size_t i = 0; i < m->n; i++) {
        int rc = hl_client_check(m->locks[i]->client, err);
        if (rc != 0) {
            ml_set_err(m, "%s: member #%zu '%s': %s", ml_kind(m), i, m->locks[i]->names.name,
                       err[0] ? err : hilock_strerror(rc));
            return rc;
        }
    }
    return 0;
}

/* One attempt: every member's acquire in flight at once, then the tally. */
static void ml_acq_attempt(ml_acq *q)
{
    hilock_multilock *m = q->m;
    const size_t n = m->n;
    /* the members whose unlock message would reach us from now on */
    for (size_t i = 0; i < n; i++)
        q->ready[i] = q->subs.started && q->subs.on[i] && hl_sub_confirmed(&q->subs.w[i], 0);
    for (size_t i = 0; i < n; i++)
        ml_acq_job(q, &q->jobs[i], ML_OP_ACQUIRE, i);
    q->t0 = hl_now_mono_ms();
    ml_run_batch(q->jobs, n);
    q->t1 = hl_now_mono_ms();
    q->ok = q->busy = 0;
    q->first_err = q->fatal = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = q->jobs[i].rc;
        q->in_line[i] = (unsigned char)hl_ml_in_line(q->window[i], rc);
        if (rc == 0)
            q->ok++;
        else if (rc == HILOCK_ETIMEDOUT)
            q->busy++;
        else {
            if (!q->first_err)
                q->first_err = rc;
            if (hl_ml_fatal(m->redlock, rc) && !q->fatal)
                q->fatal = rc;
        }
    }
}

/* The attempt succeeded: file the members taken under tid's hold. */
static void ml_acq_record(ml_acq *q)
{
    hilock_multilock *m = q->m;
    pthread_mutex_lock(&m->mu);
    ml_hold *h = ml_hold_find(m, q->tid);
    if (!h) {
        h = q->fresh;
        q->fresh = NULL;
        h->next = m->holds;
        m->holds = h;
    }
    h->count++;
    for (size_t i = 0; i < m->n; i++)
        if (q->jobs[i].rc == 0) {
            h->acquired[i] = 1;
            h->lostm[i] = 0;
        }
    h->nacquired = h->nlost = 0;
    for (size_t i = 0; i < m->n; i++) {
        h->nacquired += h->acquired[i];
        h->nlost += h->lostm[i];
    }
    h->lost = 0;
    __atomic_store_n(&m->lost, 0, __ATOMIC_RELEASE);
    h->valid_watchdog = q->lease_ms <= 0;
    h->valid_until = q->t0 + q->vlease - q->drift;
    m->errmsg[0] = 0;
    pthread_mutex_unlock(&m->mu);
    hl_err_forget(m);
}

/* The attempt failed: release what it may have taken. A Redlock asks every
 * node; a multi-lock the members taken or in doubt. On a re-entry only
 * members that answered "taken": an unanswered one may still carry the
 * outer hold, which must survive. */
static void ml_acq_take_back(ml_acq *q)
{
    hilock_multilock *m = q->m;
    size_t nu = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (hl_ml_take_back(m->redlock, q->reentry, q->jobs[i].rc))
            ml_acq_job(q, &q->undo[nu++], ML_OP_RELEASE, i);
    }
    ml_run_batch(q->undo, nu);
}

/* After a failed attempt with time left: listen to the members' unlock
 * messages (the first time: then try again at once, since an unlock before
 * the subscription took effect would not reach us), else sleep until a held
 * member's message, its lease or the back-off, as the engine's rules say. */
static void ml_acq_wait(ml_acq *q, unsigned attempt, int64_t now)
{
    hilock_multilock *m = q->m;
    const size_t n = m->n;
    const int validity_failed = m->redlock && q->ok >= m->quorum;
    if (!q->subs.mb && ml_subs_alloc(&q->subs, n) != 0)
        q->subs.mb = NULL; /* no memory to listen: poll as below */
    if (q->subs.mb && !q->subs.started) {
        int64_t limit = q->timeout > 0 ? q->timeout
                                       : m->locks[0]->client->t.opts.command_timeout_ms;
        if (q->deadline >= 0 && q->deadline - now < limit)
            limit = q->deadline - now;
        ml_subs_start(m, &q->subs, &q->pend, q->tid, limit);
        return;
    }
    int64_t pause = hl_ml_backoff(attempt, ml_rand(&q->rng));
    int64_t left = q->deadline < 0 ? -1 : q->deadline - now;
    if (!q->subs.mb) {
        if (left >= 0 && pause > left)
            pause = left;
        ml_pause(m, &q->pend, pause); /* a cancel is seen before the next attempt */
        return;
    }
    for (size_t i = 0; i < n; i++) {
        q->subs.mb[i].rc = q->jobs[i].rc;
        q->subs.mb[i].ttl_ms = q->jobs[i].value;
        q->subs.mb[i].wakeable = q->ready[i];
        q->subs.mb[i].line_window_ms = q->in_line[i] ? q->window[i] : -1;
    }
    ml_subs_wait(m, &q->subs, &q->pend, q->tid,
                 hl_ml_wait_ms(m->redlock, q->subs.mb, n, validity_failed, pause, left));
}

/* The attempts: until one succeeds, a fatal error, the end of the wait or a
 * cancel. The result code (the message set on failure). */
static int ml_acq_run(ml_acq *q)
{
    hilock_multilock *m = q->m;
    const size_t n = m->n;
    for (unsigned attempt = 0;; attempt++) {
        int rc = ml_acq_precheck(q);
        if (rc)
            return rc;
        ml_acq_attempt(q);
        const int64_t validity = hl_ml_validity(q->vlease, q->t0, q->t1);
        if (hl_ml_success(m->redlock, n, q->ok, q->fatal, validity)) {
            ml_acq_record(q);
            return 0;
        }
        char why[HL_ERRMSG_MAX];
        ml_describe_failures(m, q->jobs, why, sizeof why);
        ml_acq_take_back(q);
        if (q->fatal) {
            ml_set_err(m, "%s: %zu of %zu taken: %s", ml_kind(m), q->ok, n, why);
            return q->fatal;
        }
        int64_t now = hl_now_mono_ms();
        if (q->wait_ms == 0 || (q->deadline >= 0 && now >= q->deadline)) {
            if (m->redlock && q->ok >= m->quorum)
                ml_set_err(m, "redlock: %zu of %zu taken but validity %lld ms <= 0 "
                              "(lease %lld, took %lld ms)",
                           q->ok, n, (long long)validity, (long long)q->vlease,
                           (long long)(q->t1 - q->t0));
            else
                ml_set_err(m, "%s: %zu of %zu taken (need %zu): %s", ml_kind(m), q->ok, n,
                           m->quorum, why);
            return hl_ml_fail_code(m->redlock, n, q->ok, q->busy, q->first_err);
        }
        ml_acq_wait(q, attempt, now);
    }
}

HILOCK_API int hilock_multilock_acquire_tid(hilock_multilock *m, uint64_t tid,
                                            int64_t wait_ms, int64_t lease_ms)
{
    if (!m)
        return HILOCK_EINVAL;
    int rc = hl_check_wait(wait_ms);
    if (rc == 0)
        rc = hl_check_lease(lease_ms);
    if (rc != 0) {
        ml_set_err(m, "invalid wait (%lld) or lease (%lld)", (long long)wait_ms,
                   (long long)lease_ms);
        return rc;
    }
    ml_acq q;
    memset(&q, 0, sizeof q);
    q.m = m;
    q.tid = tid;
    q.wait_ms = wait_ms;
    q.lease_ms = lease_ms;
    q.deadline = wait_ms < 0 ? -1 : hl_now_mono_ms() + wait_ms;
    q.vlease = lease_ms > 0 ? lease_ms : ml_watchdog_lease(m);
    q.drift = hl_ml_drift(q.vlease);
    q.timeout = ml_member_timeout(m);
    q.pend = (ml_pending){NULL, tid, 0, NULL};
    rc = ml_acq_begin(&q);
    if (rc == 0)
        rc = ml_acq_run(&q);
    ml_acq_end(&q);
    return rc;
}

void hl_multilock_view(hilock_multilock *m, hl_ml_view *v)
{
    v->locks = m->locks;
    v->n = m->n;
    v->redlock = m->redlock;
    v->member_timeout_ms = ml_member_timeout(m);
    v->watchdog_lease_ms = ml_watchdog_lease(m);
}

HILOCK_API int hilock_multilock_acquire(hilock_multilock *m, int64_t wait_ms,
                                        int64_t lease_ms)
{
    return hilock_multilock_acquire_tid(m, hilock_thread_id(), wait_ms, lease_ms);
}

/* ------------------------------------------------------------------ */
/* release and queries                                                  */
/* ------------------------------------------------------------------ */

/* Run op for tid on every member in parallel; the caller frees the jobs.
 * NULL (and the errmsg set) when out of memory. */
static ml_job *ml_run_on_all(hilock_multilock *m, int op, uint64_t tid)
{
    ml_job *jobs = calloc(m->n, sizeof *jobs);
    if (!jobs) {
        ml_set_err(m, "out of memory");
        return NULL;
    }
    const int64_t timeout = ml_member_timeout(m);
    for (size_t i = 0; i < m->n; i++) {
        jobs[i].op = op;
        jobs[i].index = i;
        jobs[i].lock = m->locks[i];
        jobs[i].tid = tid;
        jobs[i].timeout_ms = timeout;
    }
    ml_run_batch(jobs, m->n);
    return jobs;
}

HILOCK_API int hilock_multilock_release_tid(hilock_multilock *m, uint64_t tid)
{
    if (!m)
        return HILOCK_EINVAL;
    const size_t n = m->n;
    ml_job *jobs = ml_run_on_all(m, ML_OP_RELEASE, tid);
    if (!jobs)
        return HILOCK_ENOMEM;

    size_t ok = 0, notowner = 0;
    int first_err = 0;
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].rc == 0)
            ok++;
        else if (jobs[i].rc == HILOCK_ENOTOWNER)
            notowner++;
        else if (!first_err)
            first_err = jobs[i].rc;
    }
    char why[HL_ERRMSG_MAX];
    ml_describe_failures(m, jobs, why, sizeof why);
    free(jobs);

    pthread_mutex_lock(&m->mu);
    ml_hold *h = ml_hold_find(m, tid);
    if (h && --h->count <= 0) {
        for (ml_hold **p = &m->holds; *p; p = &(*p)->next)
            if (*p == h) {
                *p = h->next;
                break;
            }
        ml_hold_free(h);
    }
    pthread_mutex_unlock(&m->mu);

    int result = hl_ml_release_code(m->redlock, n, ok, notowner, first_err);
    if (result == 0)
        return 0;
    ml_set_err(m, "%s release: %zu of %zu released (need %zu): %s", ml_kind(m), ok, n,
               m->quorum, why);
    return result;
}

HILOCK_API int hilock_multilock_release(hilock_multilock *m)
{
    return hilock_multilock_release_tid(m, hilock_thread_id());
}

HILOCK_API int hilock_multilock_is_held_tid(int *out, hilock_multilock *m, uint64_t tid)
{
    if (!out || !m)
        return HILOCK_EINVAL;
    *out = 0;
    const size_t n = m->n;
    ml_job *jobs = ml_run_on_all(m, ML_OP_HELD, tid);
    if (!jobs)
        return HILOCK_ENOMEM;
    size_t held = 0, unknown = 0;
    int first_err = 0;
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].rc != 0) {
            unknown++;
            if (!first_err)
                first_err = jobs[i].rc;
        } else if (jobs[i].value) {
            held++;
        }
    }
    int rc = 0;
    if (held >= m->quorum)
        *out = 1;
    else if (held + unknown >= m->quorum) {
        /* the unanswered members decide: we cannot tell */
        char why[HL_ERRMSG_MAX];
        ml_describe_failures(m, jobs, why, sizeof why);
        ml_set_err(m, "%s: cannot tell whether held: %s", ml_kind(m), why);
        rc = first_err;
    }
    free(jobs);
    return rc;
}

HILOCK_API int hilock_multilock_is_held(int *out, hilock_multilock *m)
{
    return hilock_multilock_is_held_tid(out, m, hilock_thread_id());
}

HILOCK_API int hilock_multilock_validity_ms_tid(int64_t *out, hilock_multilock *m,
                                                uint64_t tid)
{
    if (!out || !m)
        return HILOCK_EINVAL;
    pthread_mutex_lock(&m->mu);
    ml_hold *h = ml_hold_find(m, tid);
    if (!h)
        *out = 0; /* tid holds nothing */
    else if (h->valid_watchdog)
        *out = -1;
    else {
        int64_t left = h->valid_until - hl_now_mono_ms();
        *out = left > 0 ? left : 0;
    }
    pthread_mutex_unlock(&m->mu);
    return 0;
}

HILOCK_API int hilock_multilock_validity_ms(int64_t *out, hilock_multilock *m)
{
    return hilock_multilock_validity_ms_tid(out, m, hilock_thread_id());
}

HILOCK_API int hilock_multilock_is_lost(const hilock_multilock *m)
{
    return m ? __atomic_load_n(&m->lost, __ATOMIC_ACQUIRE) : 0;
}

HILOCK_API void hilock_multilock_set_lost_callback(hilock_multilock *m,
                                                   hilock_multilock_lost_cb cb,
                                                   void *payload)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->lost_cb = cb;
    m->lost_payload = payload;
    pthread_mutex_unlock(&m->mu);
}

HILOCK_API const char *hilock_multilock_warning(const hilock_multilock *m)
{
    return m ? m->warning : NULL;
}

HILOCK_API const char *hilock_multilock_errmsg(const hilock_multilock *m)
{
    if (!m)
        return "NULL multi-lock";
    hilock_multilock *w = (hilock_multilock *)m; /* mu guards the message */
    return hl_err_view(m, &w->mu, w->errmsg);
}
