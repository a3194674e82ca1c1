/*
 * Watchdog: keeps a lock alive well past its lease, reports a lock found
 * gone (server restarted) through the callback and hilock_lock_is_lost, never
 * renews after the final unlock (stale renewal race), treats transport
 * errors as retryable (not loss), stops renewing on handle free and client
 * close, renews many locks at once, keeps re-entered holds alive.
 * The client watchdog lease is short (600 ms: renewal every 200 ms; 2000 ms
 * under valgrind, where the renewal thread can go unscheduled for longer than
 * a third of 600 ms: every check is stated relative to this lease).
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"

/* set in init: 600, or 2000 under valgrind */
static int64_t wd_lease = 600;
#define WD_LEASE wd_lease

static th_redis srv;
static hilock_client *cw; /* watchdog lease WD_LEASE */

static hilock_client *open_client(const th_redis *r, int64_t wd_lease, int64_t cmd_timeout)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = wd_lease;
    o.command_timeout_ms = cmd_timeout;
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, r->url, &o, err, sizeof err);
    if (rc != 0)
        printf("\n  open %s: %s (%s)\n", r->url, hilock_strerror(rc), err);
    return c;
}

static hilock_lock *new_lock(hilock_client *c, const char *name)
{
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL(hilock_lock_new(&l, c, name), 0);
    return l;
}

typedef struct lost_rec {
    pthread_mutex_t mu;
    int calls;
    hilock_lock *lock;
    uint64_t tid;
    void *payload_seen;
} lost_rec;

static void on_lost(hilock_lock *l, uint64_t tid, void *payload)
{
    lost_rec *r = payload;
    pthread_mutex_lock(&r->mu);
    r->calls++;
    r->lock = l;
    r->tid = tid;
    r->payload_seen = payload;
    pthread_mutex_unlock(&r->mu);
}

static int lost_called(void *p)
{
    lost_rec *r = p;
    pthread_mutex_lock(&r->mu);
    int n = r->calls;
    pthread_mutex_unlock(&r->mu);
    return n > 0;
}

/* Poll a key for duration_ms: returns how many polls found it missing. */
static int missing_during(const th_redis *r, const char *key, int64_t duration_ms)
{
    int missing = 0;
    int64_t end = th_now_ms() + duration_ms;
    while (th_now_ms() < end) {
        if (th_redis_int(r, "EXISTS %s", key) != 1)
            missing++;
        th_sleep_ms(20);
    }
    return missing;
}

static int key_gone(void *name) { return th_redis_int(&srv, "EXISTS %s", (char *)name) == 0; }

/* ---------------------------------------------------------------- keep alive */

static void t_keeps_alive(void)
{
    hilock_lock *l = new_lock(cw, "kept");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, HILOCK_LEASE_WATCHDOG), 0);
    long long pttl = th_redis_int(&srv, "PTTL kept");
    CU_ASSERT(pttl > 0 && pttl <= WD_LEASE);
    CU_ASSERT_EQUAL(missing_during(&srv, "kept", 3 * WD_LEASE), 0);
    int64_t rem = 0;
    CU_ASSERT_EQUAL(hilock_lock_remaining_ms(&rem, l), 0);
    CU_ASSERT(rem > 0 && rem <= WD_LEASE);
    CU_ASSERT_EQUAL(hilock_lock_is_lost(l), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS kept"), 0);
    hilock_lock_free(l);
}

static void t_reentered_watchdog(void)
{
    hilock_lock *l = new_lock(cw, "kept2");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0); /* one hold left: still renewed */
    CU_ASSERT_EQUAL(missing_during(&srv, "kept2", 2 * WD_LEASE), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS kept2"), 0);
    hilock_lock_free(l);
}

static void t_many_locks(void)
{
    enum { NL = 40 };
    hilock_lock *ls[NL];
    char name[32];
    for (int i = 0; i < NL; i++) {
        snprintf(name, sizeof name, "many-%d", i);
        ls[i] = new_lock(cw, name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ls[i]);
        CU_ASSERT_EQUAL(hilock_lock_acquire(ls[i], 0, 0), 0);
    }
    th_sleep_ms(2 * WD_LEASE);
    int alive = 0;
    for (int i = 0; i < NL; i++) {
        snprintf(name, sizeof name, "many-%d", i);
        alive += th_redis_int(&srv, "EXISTS %s", name) == 1;
        CU_ASSERT_EQUAL(hilock_lock_is_lost(ls[i]), 0);
    }
    CU_ASSERT_EQUAL(alive, NL);
    for (int i = 0; i < NL; i++) {
        CU_ASSERT_EQUAL(hilock_lock_release(ls[i]), 0);
        hilock_lock_free(ls[i]);
    }
}

/* Renewals are batched: 70 holds on one server cost one script call per
 * tick (groups of up to 100), not one per hold; every hold stays alive, and a
 * hold forced away inside a batch is reported lost on its own. */
static void t_batched_renewal(void)
{
    enum { NL = 70 };
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    hilock_client *c = open_client(&h, WD_LEASE, 0);
    hilock_client *other = open_client(&h, WD_LEASE, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(other);
    hilock_lock *ls[NL];
    lost_rec rec[NL];
    char name[32];
    for (int i = 0; i < NL; i++) {
        snprintf(name, sizeof name, "batch-%d", i);
        ls[i] = new_lock(c, name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ls[i]);
        pthread_mutex_init(&rec[i].mu, NULL);
        rec[i].calls = 0;
        hilock_lock_set_lost_callback(ls[i], on_lost, &rec[i]);
        CU_ASSERT_EQUAL(hilock_lock_acquire(ls[i], 0, 0), 0);
    }
    long long before = th_script_calls(&h);
    int64_t t0 = th_now_ms();
    th_sleep_ms(2 * WD_LEASE); /* about 6 ticks */
    long long calls = th_script_calls(&h) - before;
    int64_t ticks = (th_now_ms() - t0) / (WD_LEASE / 3) + 1;
    printf("\n  %lld script calls in %lld ticks for %d holds\n", calls, (long long)ticks, NL);
    CU_ASSERT(before >= 0 && calls > 0);
    CU_ASSERT(calls <= ticks * 2); /* one call per tick (up to 100 holds); one per hold would be 70 */
    int alive = 0;
    for (int i = 0; i < NL; i++) {
        snprintf(name, sizeof name, "batch-%d", i);
        alive += th_redis_int(&h, "EXISTS %s", name) == 1;
    }
    CU_ASSERT_EQUAL(alive, NL);

    /* one hold in the middle of a batch forced away */
    hilock_lock *o = new_lock(other, "batch-33");
    int deleted = 0;
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, o), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    CU_ASSERT(th_wait_for(lost_called, &rec[33], 2000));
    th_sleep_ms(WD_LEASE); /* more ticks: the others are still renewed */
    for (int i = 0; i < NL; i++) {
        snprintf(name, sizeof name, "batch-%d", i);
        CU_ASSERT_EQUAL(hilock_lock_is_lost(ls[i]), i == 33);
        CU_ASSERT_EQUAL(rec[i].calls, i == 33);
        if (i != 33)
            CU_ASSERT_EQUAL(th_redis_int(&h, "EXISTS %s", name), 1);
    }
    for (int i = 0; i < NL; i++) {
        CU_ASSERT_EQUAL(hilock_lock_release(ls[i]), i == 33 ? HILOCK_ENOTOWNER : 0);
        hilock_lock_free(ls[i]);
        pthread_mutex_destroy(&rec[i].mu);
    }
    hilock_lock_free(o);
    hilock_client_close(other);
    hilock_client_close(c);
    th_redis_stop(&h);
}

/* ---------------------------------------------------------------- loss */

static void t_lost_on_restart(void)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    /* A longer lease than WD_LEASE: a restart slower than lease - lease/5
     * (480 ms of 600, seen under ASan on a loaded machine) is first
     * reported "in doubt", then lost: two reports, both right. 1500 ms
     * leaves 1200 ms for the restart. */
    enum { LEASE = 1500 };
    hilock_client *c = open_client(&h, LEASE, 300);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = new_lock(c, "doomed");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    lost_rec rec = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, NULL};
    hilock_lock_set_lost_callback(l, on_lost, &rec);
    uint64_t tid = hilock_thread_id();
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    CU_ASSERT_EQUAL(hilock_lock_is_lost(l), 0);

    CU_ASSERT_EQUAL_FATAL(th_redis_restart(&h), 0); /* empty again */
    int64_t t0 = th_now_ms();
    CU_ASSERT_FATAL(th_wait_for(lost_called, &rec, 3000));
    printf("\n  loss reported %lld ms after the restart\n", (long long)(th_now_ms() - t0));
    pthread_mutex_lock(&rec.mu);
    CU_ASSERT_EQUAL(rec.calls, 1);
    CU_ASSERT_PTR_EQUAL(rec.lock, l);
    CU_ASSERT_EQUAL(rec.tid, tid);
    CU_ASSERT_PTR_EQUAL(rec.payload_seen, &rec);
    pthread_mutex_unlock(&rec.mu);
    CU_ASSERT_EQUAL(hilock_lock_is_lost(l), 1);
    CU_ASSERT_EQUAL(hilock_lock_is_lost_tid(l, tid), 1);
    CU_ASSERT_EQUAL(hilock_lock_is_lost_tid(l, tid + 1), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ENOTOWNER);

    /* Reported once, not at every tick. */
    th_sleep_ms(LEASE);
    pthread_mutex_lock(&rec.mu);
    CU_ASSERT_EQUAL(rec.calls, 1);
    pthread_mutex_unlock(&rec.mu);
    CU_ASSERT_EQUAL(th_redis_int(&h, "EXISTS doomed"), 0);

    /* The next successful acquire resets the state. */
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    CU_ASSERT_EQUAL(hilock_lock_is_lost(l), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    hilock_client_close(c);
    th_redis_stop(&h);
}

static void t_lost_on_force(void)
{
    hilock_client *other = open_client(&srv, WD_LEASE, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(other);
    hilock_lock *l = new_lock(cw, "forced-away");
    hilock_lock *o = new_lock(other, "forced-away");
    lost_rec rec = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, NULL};
    hilock_lock_set_lost_callback(l, on_lost, &rec);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    int deleted = 0;
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, o), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    CU_ASSERT(th_wait_for(lost_called, &rec, 2000));
    CU_ASSERT_EQUAL(hilock_lock_is_lost(l), 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ENOTOWNER);
    hilock_lock_free(l);
    hilock_lock_free(o);
    hilock_client_close(other);
}

/* ---------------------------------------------------------------- stale renewal */

static void t_no_renewal_after_unlock(void)
{
    /* Release a watchdog lock at varied offsets from the renewal tick, then
     * re-acquire it at once as the same owner with a fixed 150 ms lease. A
     * renewal left over from the first hold would push the PTTL back up to
     * WD_LEASE and keep the key beyond 150 ms. */
    hilock_lock *l = new_lock(cw, "stale");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    int rounds = th_valgrind() ? 6 : 15;
    int too_long = 0, raised = 0;
    for (int i = 0; i < rounds; i++) {
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
        th_sleep_ms((i * 37) % (WD_LEASE / 3) + 1);
        CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
        int64_t t0 = th_now_ms();
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 150), 0);
        for (;;) {
            int64_t asked = th_now_ms();
            long long pttl = th_redis_int(&srv, "PTTL stale");
            if (pttl == -2)
                break;
            if (pttl > 150)
                raised++;
            if (asked - t0 > 150 + 250) { /* still there when asked this late */
                too_long++;
                break;
            }
            th_sleep_ms(10);
        }
        redisContext *ctx = th_redis_connect(&srv);
        freeReplyObject(redisCommand(ctx, "DEL stale"));
        redisFree(ctx);
    }
    CU_ASSERT_EQUAL(raised, 0);
    CU_ASSERT_EQUAL(too_long, 0);
    CU_ASSERT_EQUAL(hilock_lock_is_lost(l), 0);
    hilock_lock_free(l);
}

/* The same race with a fast watchdog (renewal every lease/3 = 100 ms): a
 * renewal that slipped past the final unlock would cut the next hold's
 * fixed 1000 ms lease down to the watchdog lease. */
static void t_no_renewal_after_unlock_fast(void)
{
    /* 300 ms watchdog lease (renewal every 100 ms): a 150 ms one could
     * expire on a loaded machine between two renewals, and the release then
     * failed for a reason this test is not about. The next hold's fixed
     * 1000 ms lease keeps the check as sharp: a stale renewal would set the
     * PTTL to at most 300, far under the 950 expected. */
    int64_t wd = 300;
    hilock_client *c = open_client(&srv, wd, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = new_lock(c, "stale-fast");
    int rounds = th_valgrind() ? 10 : 40;
    int cut = 0, errors = 0;
    for (int i = 0; i < rounds; i++) {
        if (hilock_lock_acquire(l, 0, 0) != 0)
            errors++;
        th_sleep_ms((i * 7) % (wd / 3 + 1));
        if (hilock_lock_release(l) != 0)
            errors++;
        int64_t t0 = th_now_ms();
        if (hilock_lock_acquire(l, 0, 1000) != 0)
            errors++;
        /* watch it for two renewal periods */
        while (th_now_ms() - t0 < 2 * wd / 3 + 10) {
            long long pttl = th_redis_int(&srv, "PTTL stale-fast");
            int64_t expect = 1000 - (th_now_ms() - t0) - 50;
            if (pttl < expect) {
                cut++;
                break;
            }
            th_sleep_ms(3);
        }
        if (hilock_lock_release(l) != 0)
            errors++;
    }
    CU_ASSERT_EQUAL(errors, 0);
    CU_ASSERT_EQUAL(cut, 0);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* The lost callback runs on the watchdog thread and may call the library,
 * even release/query the very lock it reports. */
static atomic_int cb_done;
static atomic_int cb_rc = 99;
static void on_lost_release(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)payload;
    int x = -1;
    int rc = hilock_lock_release_tid(l, tid);
    if (hilock_lock_is_held_tid(&x, l, tid) != 0 || x != 0)
        rc = 1000;
    atomic_store(&cb_rc, rc);
    atomic_store(&cb_done, 1);
}
static int cb_finished(void *p)
{
    (void)p;
    return atomic_load(&cb_done);
}

static void t_callback_may_call_library(void)
{
    hilock_lock *l = new_lock(cw, "cb-reentrant");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    hilock_lock_set_lost_callback(l, on_lost_release, NULL);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    redisContext *ctx = th_redis_connect(&srv);
    freeReplyObject(redisCommand(ctx, "DEL cb-reentrant"));
    redisFree(ctx);
    if (!th_wait_for(cb_finished, NULL, 3000)) {
        /* a deadlock inside the watchdog: cleanup would hang too */
        fprintf(stderr, "\n  lost callback calling release did not return: deadlock\n");
        th_redis_stop(&srv);
        _exit(1);
    }
    CU_ASSERT_EQUAL(atomic_load(&cb_rc), HILOCK_ENOTOWNER);
    hilock_lock_free(l);
}

/* Many threads acquiring and releasing watchdog holds on one lock name with
 * explicit tids while the watchdog ticks: afterwards nothing is left. */
typedef struct churn {
    hilock_lock *l;
    uint64_t tid;
    int iters;
    int errors;
    int last_rc; /* the last failing call's code, printed on failure */
} churn;

static void *churn_thread(void *p)
{
    churn *c = p;
    for (int i = 0; i < c->iters; i++) {
        int rc = hilock_lock_acquire_tid(c->l, c->tid, -1, 0);
        if (rc != 0) {
            c->errors++;
            c->last_rc = rc;
            continue;
        }
        rc = hilock_lock_release_tid(c->l, c->tid);
        if (rc != 0) {
            c->errors++;
            c->last_rc = rc;
        }
    }
    return NULL;
}

static void t_churn_leaves_nothing(void)
{
    /* renew every 100 ms (every 500 ms under valgrind, where a holder thread
     * can go unscheduled for 300 ms between its acquire and its release) */
    const int64_t lease = th_valgrind() ? 1500 : 300;
    hilock_client *c = open_client(&srv, lease, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = new_lock(c, "churn");
    enum { NT = 4 };
    churn a[NT];
    pthread_t th[NT];
    for (int i = 0; i < NT; i++) {
        a[i] = (churn){l, 100 + (uint64_t)i, th_valgrind() ? 30 : 150, 0, 0};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, churn_thread, &a[i]), 0);
    }
    int errors = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        errors += a[i].errors;
        if (a[i].errors)
            printf("\n  churn thread %d: %d errors, last %s ", i, a[i].errors,
                   hilock_strerror(a[i].last_rc));
    }
    CU_ASSERT_EQUAL(errors, 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS churn"), 0);
    /* and nothing shows up later from a late renewal */
    int appeared = 0;
    for (int64_t end = th_now_ms() + lease + 100; th_now_ms() < end; th_sleep_ms(20))
        appeared += th_redis_int(&srv, "EXISTS churn") != 0;
    CU_ASSERT_EQUAL(appeared, 0);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* ---------------------------------------------------------------- transport errors */

/* Returns once the watchdog renewed key (its PTTL went up), or 0 on timeout. */
static int wait_renewal(const th_redis *r, const char *key, int64_t timeout_ms)
{
    redisContext *ctx = th_redis_connect(r);
    if (!ctx)
        return 0;
    int64_t end = th_now_ms() + timeout_ms;
    long long prev = -3;
    int renewed = 0;
    while (!renewed && th_now_ms() < end) {
        redisReply *rep = redisCommand(ctx, "PTTL %s", key);
        long long now = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -3;
        freeReplyObject(rep);
        renewed = prev > 0 && now > prev;
        prev = now;
        th_sleep_ms(2);
    }
    redisFree(ctx);
    return renewed;
}

static void t_pause_is_not_loss(void)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    /* lease 3000, renewal every 1000 ms; commands time out after 100 ms */
    hilock_client *c = open_client(&h, 3000, 100);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = new_lock(c, "paused");
    lost_rec rec = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, NULL};
    hilock_lock_set_lost_callback(l, on_lost, &rec);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    /* Hang the server across exactly one renewal tick: from half a period
     * after a renewal to one period later. That renewal times out (a
     * transport error); the next one, after the resume, must succeed. */
    CU_ASSERT_FATAL(wait_renewal(&h, "paused", 3000));
    th_sleep_ms(400);
    th_redis_pause(&h);
    th_sleep_ms(1000);
    th_redis_resume(&h);
    CU_ASSERT_EQUAL(missing_during(&h, "paused", 1500), 0);
    CU_ASSERT_FALSE(lost_called(&rec));
    CU_ASSERT_EQUAL(hilock_lock_is_lost(l), 0);
    /* the failed renewal was noticed (and only reported as client trouble) */
    CU_ASSERT(strlen(hilock_client_errmsg(c)) > 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    hilock_client_close(c);
    th_redis_stop(&h);
}

/* The server stopped (SIGSTOP): it still accepts connections (the kernel's
 * backlog) and never answers, like a half-dead host or a load balancer in
 * front of one. With a command timeout of lease/3 the renewals are stuck
 * back to back in reads and handshakes; the hold must still be reported in
 * doubt before its lease can end on the server (another client could take
 * it then): the last renewal was confirmed no earlier than it was seen. */
static void t_stopped_server_reported_in_time(void)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    const int64_t lease = th_valgrind() ? 6000 : 3000;
    hilock_client *c = open_client(&h, lease, lease / 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = new_lock(c, "stopped");
    lost_rec rec = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, NULL};
    hilock_lock_set_lost_callback(l, on_lost, &rec);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    CU_ASSERT_FATAL(wait_renewal(&h, "stopped", 2 * lease));
    int64_t renewed_by = th_now_ms(); /* the renewal was sent before this */
    th_redis_pause(&h);
    int told = th_wait_for(lost_called, &rec, 2 * lease);
    int64_t told_at = th_now_ms();
    th_redis_resume(&h);
    CU_ASSERT(told);
    if (told) {
        printf("\n  told %lld ms after the last renewal was seen (lease %lld)\n",
               (long long)(told_at - renewed_by), (long long)lease);
        CU_ASSERT(told_at < renewed_by + lease);
    }
    CU_ASSERT_EQUAL(hilock_lock_is_lost(l), 1);
    CU_ASSERT(strstr(hilock_lock_errmsg(l), "in doubt") != NULL);
    hilock_lock_release(l); /* held or not: nothing to assert */
    hilock_lock_free(l);
    hilock_client_close(c);
    th_redis_stop(&h);
}

/* A watchdog holder listens on its lock's channel: a force unlock is
 * reported within a round trip, not at the next renewal (lease/3 = 10 s with
 * the 30 s lease here). */
static int holder_listens(void *channel)
{
    return th_redis_numsub(&srv, channel) >= 1;
}

static void t_force_unlock_heard_at_once(void)
{
    static const struct {
        const char *name, *channel;
        int rw; /* 0 lock, 1 read side, 2 write side, 3 fair, 4 fenced */
    } cases[] = {{"fa-plain", "redisson_lock__channel:{fa-plain}", 0},
                 {"fa-read", "redisson_rwlock:{fa-read}", 1},
                 {"fa-write", "redisson_rwlock:{fa-write}", 2},
                 {"fa-fair", "redisson_lock__channel:{fa-fair}", 3},
                 {"fa-fenced", "redisson_lock__channel:{fa-fenced}", 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* a client each: its first renewal is 10 s after this grant */
        hilock_client *c = open_client(&srv, 30000, 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        hilock_lock *l = NULL;
        hilock_rwlock *rw = NULL;
        if (cases[i].rw == 1 || cases[i].rw == 2) {
            CU_ASSERT_EQUAL_FATAL(hilock_rwlock_new(&rw, c, cases[i].name), 0);
            l = cases[i].rw == 1 ? hilock_rwlock_read_lock(rw) : hilock_rwlock_write_lock(rw);
        } else if (cases[i].rw == 3) {
            CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&l, c, cases[i].name), 0);
        } else if (cases[i].rw == 4) {
            CU_ASSERT_EQUAL_FATAL(hilock_fenced_lock_new(&l, c, cases[i].name), 0);
        } else {
            l = new_lock(c, cases[i].name);
        }
        lost_rec rec = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, NULL};
        hilock_lock_set_lost_callback(l, on_lost, &rec);
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
        /* the subscription is made without waiting, right after the grant */
        th_wait_for(holder_listens, (void *)cases[i].channel, 3000);
        int64_t t0 = th_now_ms();
        int deleted = 0;
        CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, l), 0);
        CU_ASSERT_EQUAL(deleted, 1);
        /* well below the first renewal (10 s after the grant) */
        int told = th_wait_for(lost_called, &rec, 3000);
        CU_ASSERT(told);
        if (told)
            printf("\n  %s: told %lld ms after the force unlock", cases[i].name,
                   (long long)(th_now_ms() - t0));
        else
            printf("\n  %s: not told within 3000 ms of the force unlock", cases[i].name);
        CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ENOTOWNER);
        if (rw)
            hilock_rwlock_free(rw);
        else
            hilock_lock_free(l);
        hilock_client_close(c);
    }
}

/* The same with the force unlock sent right after the grant, before the
 * holder's subscription can have taken effect: the message is missed, so
 * the holder checks its hold once the subscription is confirmed. Before
 * that check, 3 of 5 such losses were reported only at the first renewal
 * (10 s after the grant), 2 at once. */
static void t_force_unlock_right_after_grant_heard(void)
{
    enum { ROUNDS = 8 };
    hilock_client *c = open_client(&srv, 30000, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    int told_all = 1;
    for (int i = 0; i < ROUNDS; i++) {
        char name[32];
        snprintf(name, sizeof name, "fa-soon-%d", i); /* a channel nobody listens on yet */
        hilock_lock *l = new_lock(c, name);
        lost_rec rec = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, NULL};
        hilock_lock_set_lost_callback(l, on_lost, &rec);
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
        int64_t t0 = th_now_ms();
        /* from another connection at once, as another process would */
        CU_ASSERT_EQUAL(th_redis_int(&srv, "DEL %s", name), 1);
        th_redis_int(&srv, "PUBLISH redisson_lock__channel:{%s} 0", name);
        int told = th_wait_for(lost_called, &rec, 3000);
        told_all &= told;
        printf("\n  round %d: %s %lld ms after the force unlock", i,
               told ? "told" : "not told within", (long long)(th_now_ms() - t0));
        CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ENOTOWNER);
        hilock_lock_free(l);
    }
    CU_ASSERT(told_all);
    hilock_client_close(c);
}

/* Calls of one command on srv so far (INFO commandstats), -1 unknown. */
static long long command_calls(const char *cmd)
{
    enum { INFO_MAX = 65536 };
    char *info = malloc(INFO_MAX), key[64];
    if (!info || th_redis_str(&srv, info, INFO_MAX, "INFO commandstats") != 0) {
        free(info);
        return -1;
    }
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    const char *p = strstr(info, key);
    long long n = p ? atoll(p + strlen(key)) : 0;
    free(info);
    return n;
}

typedef struct answered_arg {
    hilock_client *c;
    long long hexists_before;
    uint64_t renewal_commands_before;
} answered_arg;

/* The second hold's confirmed subscription was answered: its check went
 * out (one more HEXISTS on the server), or a renewal pass ran instead. */
static int confirmation_answered(void *arg)
{
    answered_arg *a = arg;
    hilock_stats st = {.version = HILOCK_STATS_VERSION};
    if (hilock_client_stats(a->c, &st) == 0 && st.renewal_commands > a->renewal_commands_before)
        return 1;
    long long h = command_calls("hexists");
    return h >= 0 && h > a->hexists_before;
}

/* A client that takes a second name checks only that hold when its
 * channel's subscription is confirmed: the first name is not renewed for
 * it (the check is the engine's per-hold HEXISTS, not a renewal pass over
 * every hold), so a hold shorter than a renewal period counts no renewal
 * (docs/observability.md, renewals). Before: the confirmation of each
 * name's subscription renewed all the client's holds. */
static void t_new_name_checks_only_its_hold(void)
{
    hilock_client *c = open_client(&srv, 30000, 0); /* first renewal 10 s after a grant */
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *a = new_lock(c, "nn-first"), *b = new_lock(c, "nn-second");
    /* counted before the grant: its check may go out before acquire returns */
    answered_arg arg = {c, command_calls("hexists"), 0};
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(a, 0, 0), 0);
    CU_ASSERT(th_wait_for(holder_listens, "redisson_lock__channel:{nn-first}", 3000));
    CU_ASSERT(th_wait_for(confirmation_answered, &arg, 3000));
    th_sleep_ms(300); /* the first hold's lease runs down from 30 000 */
    hilock_stats st0 = {.version = HILOCK_STATS_VERSION}, st1 = st0;
    CU_ASSERT_EQUAL(hilock_client_stats(c, &st0), 0);
    long long evals0 = th_script_calls(&srv);
    arg.hexists_before = command_calls("hexists");
    arg.renewal_commands_before = st0.renewal_commands;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(b, 0, 0), 0);
    CU_ASSERT(th_wait_for(holder_listens, "redisson_lock__channel:{nn-second}", 3000));
    int answered = th_wait_for(confirmation_answered, &arg, 3000);
    CU_ASSERT(answered);
    CU_ASSERT_EQUAL(hilock_client_stats(c, &st1), 0);
    long long evals = th_script_calls(&srv) - evals0;
    long long pttl = th_redis_int(&srv, "PTTL nn-first");
    printf("\n  renewals %llu -> %llu, renewal commands %llu -> %llu, scripts run for the "
           "second name %lld, first name's PTTL %lld ms",
           (unsigned long long)st0.renewals, (unsigned long long)st1.renewals,
           (unsigned long long)st0.renewal_commands, (unsigned long long)st1.renewal_commands,
           evals, pttl);
    CU_ASSERT_EQUAL(st1.renewals, 0);
    CU_ASSERT_EQUAL(st1.renewal_commands, 0);
    CU_ASSERT_EQUAL(evals, 1); /* the second name's acquire, nothing else */
    CU_ASSERT(pttl > 0 && pttl <= 29700); /* not set back to 30 000 */
    CU_ASSERT_EQUAL(hilock_lock_release(b), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(a), 0);
    hilock_lock_free(b);
    hilock_lock_free(a);
    hilock_client_close(c);
}

/* ---------------------------------------------------------------- stop renewing */

static void t_free_stops_renewal(void)
{
    hilock_client *c = open_client(&srv, WD_LEASE, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = new_lock(c, "freed");
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    th_sleep_ms(WD_LEASE / 2);
    hilock_lock_free(l); /* nothing unlocked, renewals stop */
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS freed"), 1);
    /* renewed every WD_LEASE/3, it would never go away */
    CU_ASSERT(th_redis_int(&srv, "PTTL freed") <= WD_LEASE);
    CU_ASSERT(th_wait_for(key_gone, "freed", 3 * WD_LEASE));
    hilock_client_close(c);
}

/* The watchdog's entries by (holder, tid): one handle held by many
 * threads at once (read side), beside reentrant locks of other handles,
 * some released, one re-entered; freeing the read handle forgets exactly
 * its holds (they expire), the others are still renewed, then released. */
static void t_many_holders_and_tids(void)
{
    enum { TIDS = 24, LOCKS = 8 };
    hilock_client *c = open_client(&srv, WD_LEASE, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_rwlock *rw = NULL;
    CU_ASSERT_FATAL(hilock_rwlock_new(&rw, c, "map-rw") == 0);
    hilock_lock *r = hilock_rwlock_read_lock(rw);
    hilock_lock *l[LOCKS];
    for (int i = 0; i < LOCKS; i++) {
        char name[32];
        snprintf(name, sizeof name, "map-%d", i);
        l[i] = new_lock(c, name);
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l[i], 100 + (uint64_t)i, 0,
                                                HILOCK_LEASE_WATCHDOG), 0);
    }
    for (uint64_t t = 1; t <= TIDS; t++)
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, t, 0, HILOCK_LEASE_WATCHDOG), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, 3, 0, HILOCK_LEASE_WATCHDOG), 0); /* re-entry */
    for (uint64_t t = 1; t <= TIDS; t += 2) /* the odd ones leave (3 keeps one hold) */
        CU_ASSERT_EQUAL(hilock_lock_release_tid(r, t), 0);
    for (int i = 0; i < LOCKS; i += 2)
        CU_ASSERT_EQUAL(hilock_lock_release_tid(l[i], 100 + (uint64_t)i), 0);
    th_sleep_ms(2 * WD_LEASE); /* past two leases: what is held was renewed */
    for (uint64_t t = 1; t <= TIDS; t++) {
        int held = -1;
        CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&held, r, t), 0);
        CU_ASSERT_EQUAL(held, t % 2 == 0 || t == 3);
    }
    for (int i = 0; i < LOCKS; i++)
        CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS map-%d", i), i % 2);
    hilock_rwlock_free(rw); /* 13 read holds forgotten, not released */
    CU_ASSERT(th_wait_for(key_gone, "map-rw", 3 * WD_LEASE));
    for (int i = 1; i < LOCKS; i += 2) { /* still renewed */
        CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS map-%d", i), 1);
        CU_ASSERT_EQUAL(hilock_lock_release_tid(l[i], 100 + (uint64_t)i), 0);
        CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS map-%d", i), 0);
    }
    for (int i = 0; i < LOCKS; i++)
        hilock_lock_free(l[i]);
    hilock_client_close(c);
}

static void t_close_stops_renewal(void)
{
    hilock_client *c = open_client(&srv, WD_LEASE, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = new_lock(c, "closed");
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    th_sleep_ms(WD_LEASE / 2);
    hilock_client_close(c); /* not released, not renewed any more */
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS closed"), 1);
    /* renewed every WD_LEASE/3, it would never go away */
    CU_ASSERT(th_redis_int(&srv, "PTTL closed") <= WD_LEASE);
    CU_ASSERT(th_wait_for(key_gone, "closed", 3 * WD_LEASE));
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ECLOSED);
    hilock_lock_free(l);
}

/* ---------------------------------------------------------------- held-up watchdog */

static int64_t stall_ms;
static atomic_int stall_calls, stall_over;

static void on_lost_stall(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)l;
    (void)tid;
    (void)payload;
    if (atomic_fetch_add(&stall_calls, 1) == 0) {
        th_sleep_ms(stall_ms); /* on the watchdog thread: it reports nothing meanwhile */
        atomic_store(&stall_over, 1);
    }
}

static int stall_is_over(void *arg)
{
    (void)arg;
    return atomic_load(&stall_over);
}

static void t_held_up_watchdog_renews_before_doubt(void)
{
    /* The watchdog thread is held up (here by a slow lost callback of
     * another lock) for longer than lease - lease/5 but less than the lease.
     * The renewals go on meanwhile (they have a thread of their own), so the
     * other hold, alive on the server, is not reported in doubt once the
     * watchdog thread is free again. */
    const int64_t lease = th_valgrind() ? 6000 : 3000;
    /* past the doubt limit (lease - lease/5) by lease/20, lease/4 before the end */
    stall_ms = lease - lease / 5 + lease / 20;
    atomic_store(&stall_calls, 0);
    atomic_store(&stall_over, 0);
    hilock_client *c = open_client(&srv, lease, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *a = new_lock(c, "stall-a"), *b = new_lock(c, "stall-b");
    hilock_lock_set_lost_callback(a, on_lost_stall, NULL);
    CU_ASSERT_EQUAL(hilock_lock_acquire(a, 0, 0), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(b, 0, 0), 0);
    /* right after a tick, so that the next one finds stall-a gone */
    CU_ASSERT_FATAL(wait_renewal(&srv, "stall-b", 2 * lease));
    th_redis_int(&srv, "DEL stall-a");
    CU_ASSERT(th_wait_for(key_gone, "stall-a", 10)); /* (already gone) */
    for (int64_t end = th_now_ms() + lease / 3 + 2 * stall_ms + 1000;
         th_now_ms() < end && !hilock_lock_is_lost(a);)
        th_sleep_ms(10);
    CU_ASSERT_EQUAL(hilock_lock_is_lost(a), 1);
    /* stall-b is renewed while the callback still stalls the watchdog thread */
    CU_ASSERT(wait_renewal(&srv, "stall-b", lease / 2));
    CU_ASSERT_FALSE(stall_is_over(NULL));
    CU_ASSERT(th_wait_for(stall_is_over, NULL, 2 * stall_ms));
    CU_ASSERT(wait_renewal(&srv, "stall-b", 2 * lease));
    CU_ASSERT_EQUAL(hilock_lock_is_lost(b), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(b), 0);
    CU_ASSERT_EQUAL(atomic_load(&stall_calls), 1);
    hilock_lock_free(a);
    hilock_lock_free(b);
    hilock_client_close(c);
}

/* ---------------------------------------------------------------- main */

static int init(void)
{
    if (th_valgrind())
        wd_lease = 2000;
    if (th_redis_start(&srv, NULL) != 0)
        return -1;
    cw = open_client(&srv, WD_LEASE, 0);
    return cw ? 0 : -1;
}

static int cleanup(void)
{
    hilock_client_close(cw);
    th_redis_stop(&srv);
    return 0;
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("watchdog", init, cleanup);
    CU_add_test(s, "keeps a lock 3x past its lease", t_keeps_alive);
    CU_add_test(s, "re-entered watchdog hold", t_reentered_watchdog);
    CU_add_test(s, "renewals batched, losses per hold", t_batched_renewal);
    CU_add_test(s, "many locks renewed", t_many_locks);
    CU_add_test(s, "server restart -> lost, NOT_OWNER", t_lost_on_restart);
    CU_add_test(s, "forced away -> lost", t_lost_on_force);
    CU_add_test(s, "no renewal after the final unlock", t_no_renewal_after_unlock);
    CU_add_test(s, "no renewal after the final unlock (fast ticks)", t_no_renewal_after_unlock_fast);
    CU_add_test(s, "lost callback may call the library", t_callback_may_call_library);
    CU_add_test(s, "acquire/release churn leaves nothing", t_churn_leaves_nothing);
    CU_add_test(s, "server pause is not loss", t_pause_is_not_loss);
    CU_add_test(s, "stopped server: in doubt before the lease ends",
                t_stopped_server_reported_in_time);
    CU_add_test(s, "force unlock heard on the lock's channel", t_force_unlock_heard_at_once);
    CU_add_test(s, "force unlock right after the grant heard",
                t_force_unlock_right_after_grant_heard);
    CU_add_test(s, "a second name checks only its hold, renews nothing",
                t_new_name_checks_only_its_hold);
    CU_add_test(s, "free stops renewal", t_free_stops_renewal);
    CU_add_test(s, "many holders and threads: each hold found, a freed handle's forgotten",
                t_many_holders_and_tids);
    CU_add_test(s, "close stops renewal", t_close_stops_renewal);
    CU_add_test(s, "slow lost callback: renewals go on, no doubt",
                t_held_up_watchdog_renews_before_doubt);
    return th_cu_run();
}
