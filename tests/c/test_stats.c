/*
 * hilock_client_stats and hilock_client_set_trace against a real
 * redis-server: after a scripted sequence (2 grants, 1 timeout, 1 cancel,
 * 1 hold removed by another client's force unlock, 1 hold reported in
 * doubt while the server is stopped) every counter has its exact value,
 * and the trace callback saw the loss and the in-doubt report of the
 * right lock, kind and thread. Every wait is for a state seen on the
 * server or in the counters (th_wait_for), never a sleep.
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"

#define LEASE 1500 /* short: the in-doubt report comes 1.2 s into a silence */
#define WAITER_TID 7

typedef struct trace_rec {
    pthread_mutex_t mu;
    int lost, doubt, other;
    char lost_name[64], doubt_name[64];
    hilock_kind lost_kind;
    uint64_t lost_tid, doubt_tid;
    int64_t doubt_ms;
    char msg[320];
    hilock_client *c; /* read from the callback, as c-api.md allows */
    /* the counters the callback read at each event: the loss and the end
     * of its hold counted before the event goes out */
    uint64_t holds_at_lost, gone_at_lost, holds_at_doubt, doubt_at_doubt;
} trace_rec;

static uint64_t sum(const uint64_t *b);

static void on_trace(const hilock_trace_info *info, void *data)
{
    trace_rec *t = data;
    hilock_stats now = {0};
    hilock_client_stats(t->c, &now);
    const hilock_kind_stats *k = &now.kind[HILOCK_KIND_REENTRANT];
    pthread_mutex_lock(&t->mu);
    if (info->event == HILOCK_TRACE_LOST) {
        t->lost++;
        snprintf(t->lost_name, sizeof t->lost_name, "%s", info->name);
        t->lost_kind = info->kind;
        t->lost_tid = info->thread_id;
        snprintf(t->msg, sizeof t->msg, "%s", info->message);
        t->holds_at_lost = sum(k->hold_ms);
        t->gone_at_lost = k->lost_gone;
    } else if (info->event == HILOCK_TRACE_IN_DOUBT) {
        t->doubt++;
        snprintf(t->doubt_name, sizeof t->doubt_name, "%s", info->name);
        t->doubt_tid = info->thread_id;
        t->doubt_ms = info->ms;
        t->holds_at_doubt = sum(k->hold_ms);
        t->doubt_at_doubt = k->lost_in_doubt;
    } else {
        t->other++;
    }
    pthread_mutex_unlock(&t->mu);
}

static hilock_client *open_client(const th_redis *r, int64_t lease, int64_t cmd_timeout)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = lease;
    o.command_timeout_ms = cmd_timeout;
    hilock_client *c = NULL;
    char err[256] = "";
    if (hilock_client_open(&c, r->url, &o, err, sizeof err) != 0)
        printf("\n  open %s: %s\n", r->url, err);
    return c;
}

static uint64_t sum(const uint64_t *b)
{
    uint64_t n = 0;
    for (int i = 0; i < HILOCK_STATS_BUCKETS; i++)
        n += b[i];
    return n;
}

typedef struct waiter {
    hilock_lock *l;
    int rc;
} waiter;

static void *wait_forever(void *arg)
{
    waiter *w = arg;
    w->rc = hilock_lock_acquire_tid(w->l, WAITER_TID, -1, 0);
    return NULL;
}

typedef struct cond_arg {
    const th_redis *r;
    hilock_client *c;
    trace_rec *t;
} cond_arg;

static int waiter_subscribed(void *arg)
{
    cond_arg *a = arg;
    return th_redis_numsub(a->r, "redisson_lock__channel:{stats:b}") >= 1;
}

static int lost_traced(void *arg)
{
    cond_arg *a = arg;
    pthread_mutex_lock(&a->t->mu);
    int n = a->t->lost;
    pthread_mutex_unlock(&a->t->mu);
    return n > 0;
}

static int doubt_traced(void *arg)
{
    cond_arg *a = arg;
    pthread_mutex_lock(&a->t->mu);
    int n = a->t->doubt;
    pthread_mutex_unlock(&a->t->mu);
    return n > 0;
}

/* Lost callbacks run after the hold's end is counted (hold_ms) and after
 * the trace event (whose callback checks that both the loss and the hold's
 * end were counted before it); the test waits for both callbacks too. */
typedef struct lost_count {
    pthread_mutex_t mu;
    int n;
} lost_count;

static void on_lost(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)l;
    (void)tid;
    lost_count *lc = payload;
    pthread_mutex_lock(&lc->mu);
    lc->n++;
    pthread_mutex_unlock(&lc->mu);
}

static int lost_called_twice(void *arg)
{
    lost_count *lc = arg;
    pthread_mutex_lock(&lc->mu);
    int n = lc->n;
    pthread_mutex_unlock(&lc->mu);
    return n >= 2;
}

static void t_scripted_sequence(void)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    hilock_client *c = open_client(&h, LEASE, LEASE / 3);
    hilock_client *other = open_client(&h, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(other);
    trace_rec t = {.mu = PTHREAD_MUTEX_INITIALIZER, .c = c};
    hilock_client_set_trace(c, on_trace, &t);
    cond_arg ca = {&h, c, &t};

    hilock_stats s = {0};
    CU_ASSERT_EQUAL(hilock_client_stats(c, &s), 0);
    CU_ASSERT_EQUAL(s.version, HILOCK_STATS_VERSION);
    CU_ASSERT_EQUAL(s.kind[HILOCK_KIND_REENTRANT].granted, 0);

    hilock_lock *b = NULL, *b2 = NULL, *d = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&b, c, "stats:b"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&b2, other, "stats:b"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&d, c, "stats:d"), 0);
    lost_count lost_calls = {.mu = PTHREAD_MUTEX_INITIALIZER};
    hilock_lock_set_lost_callback(b, on_lost, &lost_calls);
    hilock_lock_set_lost_callback(d, on_lost, &lost_calls);

    /* 1 timeout, 1 try (busy) and 1 cancel while the other client holds stats:b */
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(b2, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(b, 100, 0), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hilock_lock_acquire(b, 0, 0), HILOCK_ETIMEDOUT); /* a try: busy */
    waiter w = {b, -1};
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, wait_forever, &w), 0);
    CU_ASSERT(th_wait_for(waiter_subscribed, &ca, 5000));
    int found = 0;
    for (int64_t end = th_now_ms() + 5000; !found && th_now_ms() < end;)
        CU_ASSERT_EQUAL(hilock_lock_cancel(&found, b, WAITER_TID), 0);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(w.rc, HILOCK_ECANCELED);
    CU_ASSERT_EQUAL(hilock_lock_release(b2), 0);

    /* grant 1 (watchdog), then removed by the other client's force unlock */
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(b, 0, 0), 0);
    uint64_t holder = hilock_thread_id();
    int deleted = 0;
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, b2), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    CU_ASSERT_FATAL(th_wait_for(lost_traced, &ca, 4 * LEASE));

    /* grant 2 (watchdog), then the server stops: reported in doubt */
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(d, 0, 0), 0);
    th_redis_pause(&h);
    CU_ASSERT(th_wait_for(doubt_traced, &ca, 4 * LEASE));
    CU_ASSERT(th_wait_for(lost_called_twice, &lost_calls, 4 * LEASE));
    /* read while the server is still stopped: no renewal can have found
     * the in-doubt hold gone yet */
    memset(&s, 0, sizeof s);
    CU_ASSERT_EQUAL(hilock_client_stats(c, &s), 0);
    th_redis_resume(&h);

    const hilock_kind_stats *k = &s.kind[HILOCK_KIND_REENTRANT];
    printf("\n  granted %llu timed_out %llu cancelled %llu first %llu woken %llu retried %llu"
           " lost gone %llu expired %llu doubt %llu renewals %llu in %llu commands\n",
           (unsigned long long)k->granted, (unsigned long long)k->timed_out,
           (unsigned long long)k->cancelled, (unsigned long long)k->granted_first_try,
           (unsigned long long)k->granted_woken, (unsigned long long)k->granted_retried,
           (unsigned long long)k->lost_gone, (unsigned long long)k->lost_expired,
           (unsigned long long)k->lost_in_doubt, (unsigned long long)s.renewals,
           (unsigned long long)s.renewal_commands);
    CU_ASSERT_EQUAL(k->granted, 2);
    CU_ASSERT_EQUAL(k->granted_first_try, 2);
    CU_ASSERT_EQUAL(k->granted_woken + k->granted_retried, 0);
    CU_ASSERT_EQUAL(k->timed_out, 1);
    CU_ASSERT_EQUAL(k->cancelled, 1);
    CU_ASSERT_EQUAL(k->busy, 1);
    CU_ASSERT_EQUAL(sum(k->wait_ms), 4);
    /* the timed-out call waited 100 ms: bucket [64, 128) or later */
    uint64_t long_waits = 0;
    for (int i = 7; i < HILOCK_STATS_BUCKETS; i++)
        long_waits += k->wait_ms[i];
    CU_ASSERT(long_waits >= 1);
    CU_ASSERT_EQUAL(k->lost_gone, 1);
    CU_ASSERT_EQUAL(k->lost_expired, 0);
    CU_ASSERT_EQUAL(k->lost_in_doubt, 1);
    CU_ASSERT_EQUAL(sum(k->hold_ms), 2); /* both holds ended by their reports */
    CU_ASSERT(s.renewal_commands >= 1);
    CU_ASSERT_EQUAL(s.settles, 0);
    CU_ASSERT_EQUAL(s.redirects, 0);
    CU_ASSERT_EQUAL(s.replica_ack_failures, 0);
    for (int i = 0; i < HILOCK_STATS_KINDS; i++)
        if (i != HILOCK_KIND_REENTRANT)
            CU_ASSERT_EQUAL(s.kind[i].granted + s.kind[i].timed_out + s.kind[i].cancelled, 0);

    pthread_mutex_lock(&t.mu);
    CU_ASSERT_EQUAL(t.lost, 1);
    CU_ASSERT_STRING_EQUAL(t.lost_name, "stats:b");
    CU_ASSERT_EQUAL(t.lost_kind, HILOCK_KIND_REENTRANT);
    CU_ASSERT_EQUAL(t.lost_tid, holder);
    CU_ASSERT(strstr(t.msg, "force unlock") != NULL);
    CU_ASSERT_EQUAL(t.doubt, 1);
    CU_ASSERT_STRING_EQUAL(t.doubt_name, "stats:d");
    CU_ASSERT_EQUAL(t.doubt_tid, holder);
    CU_ASSERT(t.doubt_ms >= LEASE / 2);
    /* each event came once its loss and its hold's end were counted */
    CU_ASSERT_EQUAL(t.gone_at_lost, 1);
    CU_ASSERT_EQUAL(t.holds_at_lost, 1);
    CU_ASSERT_EQUAL(t.doubt_at_doubt, 1);
    CU_ASSERT_EQUAL(t.holds_at_doubt, 2);
    pthread_mutex_unlock(&t.mu);

    hilock_client_set_trace(c, NULL, NULL);
    hilock_lock_release(d); /* held or not: nothing to assert */
    hilock_lock_free(b);
    hilock_lock_free(b2);
    hilock_lock_free(d);
    hilock_client_close(c);
    hilock_client_close(other);
    th_redis_stop(&h);
}

/* A released hold is timed once, however often it was re-entered; bad
 * arguments are refused. */
static void t_hold_time_and_args(void)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    hilock_client *c = open_client(&h, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&l, c, "stats:fair"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_stats s = {0};
    CU_ASSERT_EQUAL(hilock_client_stats(c, &s), 0);
    CU_ASSERT_EQUAL(sum(s.kind[HILOCK_KIND_FAIR].hold_ms), 0); /* still held once */
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(hilock_client_stats(c, &s), 0);
    CU_ASSERT_EQUAL(s.kind[HILOCK_KIND_FAIR].granted, 2);
    CU_ASSERT_EQUAL(sum(s.kind[HILOCK_KIND_FAIR].hold_ms), 1);
    CU_ASSERT_EQUAL(s.kind[HILOCK_KIND_REENTRANT].granted, 0);

    s.version = HILOCK_STATS_VERSION + 1;
    CU_ASSERT_EQUAL(hilock_client_stats(c, &s), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_stats(NULL, &s), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_stats(c, NULL), HILOCK_EINVAL);
    hilock_client_set_trace(NULL, on_trace, NULL); /* ignored */
    hilock_lock_free(l);
    hilock_client_close(c);
    th_redis_stop(&h);
}

/* Per-name counters (hilock_options.stats_names). */
static hilock_client *open_named(const th_redis *r, int names)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.stats_names = names;
    hilock_client *c = NULL;
    char err[256] = "";
    if (hilock_client_open(&c, r->url, &o, err, sizeof err) != 0)
        printf("\n  open %s: %s\n", r->url, err);
    return c;
}

typedef struct seen_rec {
    int n;
    hilock_kind kind[8];
    char name[8][32]; /* "" for an "other" entry */
    hilock_kind_stats st[8];
    int stop_at; /* return 5 at this call (1-based), 0: never */
} seen_rec;

static int on_name(hilock_kind kind, const char *name, const hilock_name_stats *st, void *data)
{
    seen_rec *r = data;
    if (r->n < 8) {
        r->kind[r->n] = kind;
        snprintf(r->name[r->n], sizeof r->name[r->n], "%s", name ? name : "");
        r->st[r->n] = st->figures;
    }
    r->n++;
    return r->n == r->stop_at ? 5 : 0;
}

static int lost_once(void *arg)
{
    lost_count *lc = arg;
    pthread_mutex_lock(&lc->mu);
    int n = lc->n;
    pthread_mutex_unlock(&lc->mu);
    return n >= 1;
}

/* Two names tracked (stats_names = 2) and a third counted in the kind's
 * "other" entry, after: on n:a a grant, a try that found it held (busy), a
 * timed-out wait and the hold's end; on n:b a grant lost to another
 * client's force unlock; on n:c (the third pair) a grant, its release and
 * a timed-out wait. Each pair's figures are exact, and the kind's are
 * their sum. */
static void t_per_name(void)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    hilock_client *c = open_named(&h, 2);
    hilock_client *other = open_named(&h, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(other);
    hilock_lock *a = NULL, *b = NULL, *cc = NULL, *b2 = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&a, c, "n:a"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&b, c, "n:b"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&cc, c, "n:c"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&b2, other, "n:b"), 0);
    lost_count lost_calls = {.mu = PTHREAD_MUTEX_INITIALIZER};
    hilock_lock_set_lost_callback(b, on_lost, &lost_calls);

    hilock_name_stats ns = {0};
    /* nothing counted yet: not tracked */
    CU_ASSERT_EQUAL(hilock_client_name_stats(c, HILOCK_KIND_REENTRANT, "n:a", &ns), 0);

    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(a, 1, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(a, 2, 0, 10000), HILOCK_ETIMEDOUT); /* busy */
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(a, 2, 50, 10000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(a, 1), 0);

    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(b, 0, 0), 0); /* watchdog */
    int deleted = 0;
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, b2), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    CU_ASSERT_FATAL(th_wait_for(lost_once, &lost_calls, 4 * LEASE));

    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(cc, 1, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(cc, 2, 50, 10000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(cc, 1), 0);

    CU_ASSERT_EQUAL(hilock_client_name_stats(c, HILOCK_KIND_REENTRANT, "n:a", &ns), 1);
    CU_ASSERT_EQUAL(ns.version, HILOCK_NAME_STATS_VERSION);
    hilock_kind_stats na = ns.figures;
    CU_ASSERT_EQUAL(na.granted, 1);
    CU_ASSERT_EQUAL(na.granted_first_try, 1);
    CU_ASSERT_EQUAL(na.busy, 1);
    CU_ASSERT_EQUAL(na.timed_out, 1);
    CU_ASSERT_EQUAL(na.cancelled, 0);
    CU_ASSERT_EQUAL(sum(na.wait_ms), 2);
    CU_ASSERT_EQUAL(sum(na.hold_ms), 1);
    CU_ASSERT_EQUAL(na.lost_gone + na.lost_expired + na.lost_in_doubt, 0);

    CU_ASSERT_EQUAL(hilock_client_name_stats(c, HILOCK_KIND_REENTRANT, "n:b", &ns), 1);
    hilock_kind_stats nb = ns.figures;
    CU_ASSERT_EQUAL(nb.granted, 1);
    CU_ASSERT_EQUAL(nb.busy + nb.timed_out + nb.cancelled, 0);
    CU_ASSERT_EQUAL(sum(nb.wait_ms), 1);
    CU_ASSERT_EQUAL(sum(nb.hold_ms), 1); /* ended by the loss */
    CU_ASSERT_EQUAL(nb.lost_gone, 1);
    CU_ASSERT_EQUAL(nb.lost_expired + nb.lost_in_doubt, 0);

    /* the third pair is not tracked: its counts are in the "other" entry */
    CU_ASSERT_EQUAL(hilock_client_name_stats(c, HILOCK_KIND_REENTRANT, "n:c", &ns), 0);
    CU_ASSERT_EQUAL(ns.figures.granted, 0);
    CU_ASSERT_EQUAL(hilock_client_name_stats(c, HILOCK_KIND_REENTRANT, NULL, &ns), 1);
    hilock_kind_stats no = ns.figures;
    CU_ASSERT_EQUAL(no.granted, 1);
    CU_ASSERT_EQUAL(no.timed_out, 1);
    CU_ASSERT_EQUAL(no.busy, 0);
    CU_ASSERT_EQUAL(sum(no.wait_ms), 2);
    CU_ASSERT_EQUAL(sum(no.hold_ms), 1);
    /* another kind's pair is another pair: fair "n:a" is not tracked */
    CU_ASSERT_EQUAL(hilock_client_name_stats(c, HILOCK_KIND_FAIR, "n:a", &ns), 0);

    /* the kind's counters are the sum of its pairs' and its other entry's */
    hilock_stats s = {0};
    CU_ASSERT_EQUAL(hilock_client_stats(c, &s), 0);
    const hilock_kind_stats *k = &s.kind[HILOCK_KIND_REENTRANT];
    CU_ASSERT_EQUAL(k->granted, na.granted + nb.granted + no.granted);
    CU_ASSERT_EQUAL(k->timed_out, na.timed_out + nb.timed_out + no.timed_out);
    CU_ASSERT_EQUAL(k->busy, na.busy + nb.busy + no.busy);
    CU_ASSERT_EQUAL(k->lost_gone, na.lost_gone + nb.lost_gone + no.lost_gone);
    CU_ASSERT_EQUAL(sum(k->wait_ms), sum(na.wait_ms) + sum(nb.wait_ms) + sum(no.wait_ms));
    CU_ASSERT_EQUAL(sum(k->hold_ms), sum(na.hold_ms) + sum(nb.hold_ms) + sum(no.hold_ms));

    /* the walk: tracked pairs in the order first counted, then the other entry */
    seen_rec seen = {0};
    hilock_name_stats buf = {0};
    CU_ASSERT_EQUAL(hilock_client_each_name_stats(c, &buf, on_name, &seen), 0);
    CU_ASSERT_EQUAL_FATAL(seen.n, 3);
    CU_ASSERT_STRING_EQUAL(seen.name[0], "n:a");
    CU_ASSERT_STRING_EQUAL(seen.name[1], "n:b");
    CU_ASSERT_STRING_EQUAL(seen.name[2], "");
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(seen.kind[i], HILOCK_KIND_REENTRANT);
    CU_ASSERT_EQUAL(seen.st[0].busy, 1);
    CU_ASSERT_EQUAL(seen.st[1].lost_gone, 1);
    CU_ASSERT_EQUAL(seen.st[2].granted, 1);
    seen_rec stop = {.stop_at = 2};
    CU_ASSERT_EQUAL(hilock_client_each_name_stats(c, &buf, on_name, &stop), 5);
    CU_ASSERT_EQUAL(stop.n, 2);

    /* bad arguments; a client that did not opt in has none */
    CU_ASSERT_EQUAL(hilock_client_name_stats(other, HILOCK_KIND_REENTRANT, "n:b", &ns),
                    HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_each_name_stats(other, &buf, on_name, &seen), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_name_stats(c, (hilock_kind)0, "n:a", &ns), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_name_stats(c, (hilock_kind)HILOCK_STATS_KINDS, "n:a", &ns),
                    HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_name_stats(NULL, HILOCK_KIND_REENTRANT, "n:a", &ns),
                    HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_name_stats(c, HILOCK_KIND_REENTRANT, "n:a", NULL),
                    HILOCK_EINVAL);
    ns.version = HILOCK_NAME_STATS_VERSION + 1;
    CU_ASSERT_EQUAL(hilock_client_name_stats(c, HILOCK_KIND_REENTRANT, "n:a", &ns),
                    HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_each_name_stats(c, &buf, NULL, NULL), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_each_name_stats(c, NULL, on_name, &seen), HILOCK_EINVAL);

    hilock_lock_free(a);
    hilock_lock_free(b);
    hilock_lock_free(cc);
    hilock_lock_free(b2);
    hilock_client_close(c);
    hilock_client_close(other);
    th_redis_stop(&h);
}

/* The option's range and version: a version-3 struct's stats_names is not
 * read (off); -1 and HILOCK_STATS_NAMES_MAX + 1 are refused. */
static void t_per_name_options(void)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    hilock_options o = HILOCK_OPTIONS_INIT;
    hilock_client *c = NULL;
    char err[256] = "";
    o.stats_names = -1;
    CU_ASSERT_EQUAL(hilock_client_open(&c, h.url, &o, err, sizeof err), HILOCK_EINVAL);
    CU_ASSERT(strstr(err, "stats_names") != NULL);
    o.stats_names = HILOCK_STATS_NAMES_MAX + 1;
    CU_ASSERT_EQUAL(hilock_client_open(&c, h.url, &o, err, sizeof err), HILOCK_EINVAL);
    o.version = 3;
    o.stats_names = 5;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, h.url, &o, err, sizeof err), 0);
    hilock_name_stats ns = {0};
    CU_ASSERT_EQUAL(hilock_client_name_stats(c, HILOCK_KIND_REENTRANT, NULL, &ns), HILOCK_EINVAL);
    hilock_client_close(c);
    th_redis_stop(&h);
}

/* Threads counting on more names than are tracked: every count lands in
 * exactly one entry (the kind's total is the sum of its entries). */
typedef struct mt_arg {
    hilock_client *c;
    int id;
    int rc;
} mt_arg;

#define MT_THREADS 4
#define MT_ROUNDS 25

static void *mt_run(void *p)
{
    mt_arg *m = p;
    for (int i = 0; i < MT_ROUNDS && !m->rc; i++) {
        char name[32];
        snprintf(name, sizeof name, "mt:%d", (m->id * 3 + i) % 8);
        hilock_lock *l = NULL;
        if ((m->rc = hilock_lock_new(&l, m->c, name)) != 0)
            break;
        uint64_t tid = (uint64_t)m->id + 100;
        m->rc = hilock_lock_acquire_tid(l, tid, -1, 10000);
        if (!m->rc)
            m->rc = hilock_lock_release_tid(l, tid);
        hilock_lock_free(l);
    }
    return NULL;
}

static int sum_granted(hilock_kind kind, const char *name, const hilock_name_stats *st,
                       void *data)
{
    (void)kind;
    (void)name;
    uint64_t *n = data;
    n[0] += st->figures.granted;
    n[1] += sum(st->figures.hold_ms);
    n[2]++;
    return 0;
}

static void t_per_name_threads(void)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    hilock_client *c = open_named(&h, 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    pthread_t th[MT_THREADS];
    mt_arg m[MT_THREADS];
    for (int i = 0; i < MT_THREADS; i++) {
        m[i] = (mt_arg){c, i, 0};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, mt_run, &m[i]), 0);
    }
    for (int i = 0; i < MT_THREADS; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(m[i].rc, 0);
    }
    uint64_t got[3] = {0};
    hilock_name_stats buf = {0};
    CU_ASSERT_EQUAL(hilock_client_each_name_stats(c, &buf, sum_granted, got), 0);
    CU_ASSERT_EQUAL(got[0], MT_THREADS * MT_ROUNDS);
    CU_ASSERT_EQUAL(got[1], MT_THREADS * MT_ROUNDS);
    CU_ASSERT_EQUAL(got[2], 4); /* 3 tracked pairs and the other entry */
    hilock_client_close(c);
    th_redis_stop(&h);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("stats", NULL, NULL);
    CU_add_test(s, "scripted sequence: exact counters and trace events", t_scripted_sequence);
    CU_add_test(s, "hold time once per hold; bad arguments", t_hold_time_and_args);
    CU_add_test(s, "per name: two names and the other entry, exact", t_per_name);
    CU_add_test(s, "per name: option version and range", t_per_name_options);
    CU_add_test(s, "per name: threads, every count in one entry", t_per_name_threads);
    return th_cu_run();
}
