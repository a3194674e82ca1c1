/*
 * The non-blocking API (hilock_async) against a real redis-server, through
 * the epoll adapter (and the libuv adapter when built with libuv): every
 * lock kind's acquire / release / force / queries, a waiter woken by the
 * unlock message (not by a timer: the holder's lease is a minute), fair
 * order, cancellation that leaves nothing behind, watchdog renewals and
 * loss from the loop's timer, a hung server, and freeing with operations
 * pending. No sleeps stand in for conditions: the loop runs until the
 * awaited completion arrives, with a bound.
 */
#include <CUnit/Basic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"
#include "hilock/adapters/epoll.h"
#ifdef HILOCK_TEST_LIBUV
#include "hilock/adapters/libuv.h"
#endif


#include "async_helpers.h"

static void t_basic(void)
{
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, th_cl, "async-basic") == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 7, 0, 10000, on_done, &r) == 0);
    CU_ASSERT_EQUAL(r.n, 0); /* never completes inside the call */
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT_EQUAL(r.value, 1);
    /* re-entry */
    CU_ASSERT(hilock_async_acquire(a, l, 7, 0, 10000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 2, 5000));
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT_EQUAL(r.value, 2);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HLEN async-basic"), 1);
    /* queries */
    res q[5] = {{0}};
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_IS_LOCKED, 0, on_done, &q[0]) == 0);
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_IS_HELD, 7, on_done, &q[1]) == 0);
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_IS_HELD, 8, on_done, &q[2]) == 0);
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_HOLD_COUNT, 7, on_done, &q[3]) == 0);
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_REMAINING_MS, 0, on_done, &q[4]) == 0);
    for (int i = 0; i < 5; i++)
        CU_ASSERT(run_until(a, &q[i], 1, 5000) && q[i].rc == 0);
    CU_ASSERT_EQUAL(q[0].value, 1);
    CU_ASSERT_EQUAL(q[1].value, 1);
    CU_ASSERT_EQUAL(q[2].value, 0);
    CU_ASSERT_EQUAL(q[3].value, 2);
    CU_ASSERT(q[4].value > 5000 && q[4].value <= 10000);
    /* another thread id is refused; the holder releases twice */
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 8, on_done, &rel) == 0);
    CU_ASSERT_FATAL(run_until(a, &rel, 1, 5000));
    CU_ASSERT_EQUAL(rel.rc, HILOCK_ENOTOWNER);
    CU_ASSERT(strstr(rel.err, "not held") != NULL);
    CU_ASSERT(hilock_async_release(a, l, 7, on_done, &rel) == 0);
    CU_ASSERT_FATAL(run_until(a, &rel, 2, 5000));
    CU_ASSERT(rel.rc == 0 && rel.value == 1);
    CU_ASSERT(hilock_async_release(a, l, 7, on_done, &rel) == 0);
    CU_ASSERT_FATAL(run_until(a, &rel, 3, 5000));
    CU_ASSERT(rel.rc == 0 && rel.value == 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-basic"), 0);
    /* force unlock of a lock held by someone else (the blocking API) */
    CU_ASSERT(hilock_lock_acquire_tid(l, 9, 0, 60000) == 0);
    res f = {0};
    CU_ASSERT(hilock_async_force_unlock(a, l, on_done, &f) == 0);
    CU_ASSERT_FATAL(run_until(a, &f, 1, 5000));
    CU_ASSERT(f.rc == 0 && f.value == 1);
    CU_ASSERT(hilock_async_force_unlock(a, l, on_done, &f) == 0);
    CU_ASSERT_FATAL(run_until(a, &f, 2, 5000));
    CU_ASSERT(f.rc == 0 && f.value == 0);
    /* a key of another type: EWRONGTYPE at once, untouched */
    th_redis_int(&th_srv, "SET async-basic x");
    CU_ASSERT(hilock_async_acquire(a, l, 7, 1000, 0, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 3, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_EWRONGTYPE);
    char buf[16] = "";
    CU_ASSERT(th_redis_str(&th_srv, buf, sizeof buf, "GET async-basic") == 0 && !strcmp(buf, "x"));
    th_redis_int(&th_srv, "DEL async-basic");
    hilock_lock_free(l);
    free_async(a);
}

static void t_bad_args(void)
{
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, th_cl, "async-args") == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, -5, 0, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, -2, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 0, NULL, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_acquire(NULL, l, 1, 0, 0, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_acquire(a, NULL, 1, 0, 0, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_query(a, l, (hilock_query)99, 1, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_on_io(NULL, 3, HILOCK_IO_READ) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_on_timer(NULL) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_on_io(a, 12345, HILOCK_IO_READ) == 0); /* not ours: ignored */
    hilock_async *b = (hilock_async *)1;
    hilock_async_loop bad = {0};
    CU_ASSERT(hilock_async_new(&b, &bad) == HILOCK_EINVAL && b == NULL);
    CU_ASSERT(hilock_async_new(&b, NULL) == HILOCK_EINVAL);
    CU_ASSERT_STRING_NOT_EQUAL(hilock_async_errmsg(NULL), "");
    hilock_async_free(NULL);
    CU_ASSERT_EQUAL(r.n, 0);
    hilock_lock_free(l);
    free_async(a);
}

/* A waiter is woken by the unlock message: the holder's lease is a minute,
 * so nothing but the message can end its wait in time. */
static void t_handoff_by_message(void)
{
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, th_cl, "async-handoff") == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, 1, 0, 60000) == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 2, 30000, 10000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until_numsub(a, "redisson_lock__channel:{async-handoff}", 1));
    run_for(a, 100); /* past its retry after subscribing: asleep now */
    CU_ASSERT_EQUAL(r.n, 0);
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_lock_release_tid(l, 1) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT(r.at - t0 < 2000);
    /* the waiter's subscription is the holder's now (it hears a force
     * unlock there), until the release */
    run_for(a, 50);
    CU_ASSERT_EQUAL(numsub("redisson_lock__channel:{async-handoff}"), 1);
    int held = 0;
    CU_ASSERT(hilock_lock_is_held_tid(&held, l, 2) == 0 && held == 1);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 2, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 5000) && rel.rc == 0);
    CU_ASSERT(run_until_numsub(a, "redisson_lock__channel:{async-handoff}", 0));
    hilock_lock_free(l);
    free_async(a);
}

/* Many waiters of one name on one loop: each granted in turn, every grant
 * handed on by its release (the loop thread alone; no thread per waiter). */
static void t_many_waiters(void)
{
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, th_cl, "async-many") == 0);
    enum { N = 50 };
    static res r[N];
    memset(r, 0, sizeof r);
    int threads = th_thread_count();
    for (int i = 0; i < N; i++)
        CU_ASSERT(hilock_async_acquire(a, l, 100 + (uint64_t)i, 30000, 30000, on_done, &r[i]) ==
                  0);
    int granted = 0, released = 0;
    res rel = {0};
    int64_t end = th_now_ms() + 20000;
    while (granted < N && th_now_ms() < end) {
        hilock_epoll_run_once(&ep, a, 50);
        for (int i = 0; i < N; i++)
            if (r[i].n == 1 && r[i].rc == 0 && r[i].value == 1) {
                r[i].value = -1; /* counted */
                granted++;
                CU_ASSERT_EQUAL(granted - released, 1); /* one holder at a time */
                CU_ASSERT(hilock_async_release(a, l, 100 + (uint64_t)i, on_done, &rel) == 0);
                released++;
            }
    }
    CU_ASSERT_EQUAL(granted, N);
    CU_ASSERT(run_until(a, &rel, N, 5000));
    CU_ASSERT_EQUAL(th_thread_count(), threads);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-many"), 0);
    hilock_lock_free(l);
    free_async(a);
}

static void t_fair_order_and_cancel(void)
{
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_fair_lock_new(&l, th_cl, "async-fair") == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, 1, 0, 60000) == 0);
    res r2 = {0}, r3 = {0}, r4 = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 2, 30000, 30000, on_done, &r2) == 0);
    int64_t end = th_now_ms() + 5000;
    while (th_redis_int(&th_srv, "LLEN redisson_lock_queue:{async-fair}") < 1 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 5);
    CU_ASSERT(hilock_async_acquire(a, l, 3, 30000, 30000, on_done, &r3) == 0);
    CU_ASSERT(hilock_async_acquire(a, l, 4, 30000, 30000, on_done, &r4) == 0);
    while (th_redis_int(&th_srv, "LLEN redisson_lock_queue:{async-fair}") < 3 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 5);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "LLEN redisson_lock_queue:{async-fair}"), 3);
    /* the middle one gives up: it leaves the line, the others keep their turn */
    int found = 0;
    CU_ASSERT(hilock_async_cancel(&found, a, l, 3) == 0);
    CU_ASSERT_EQUAL(found, 1);
    CU_ASSERT_EQUAL(r3.n, 0); /* completes from the loop, not inside cancel */
    CU_ASSERT_FATAL(run_until(a, &r3, 1, 5000));
    CU_ASSERT_EQUAL(r3.rc, HILOCK_ECANCELED);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "LLEN redisson_lock_queue:{async-fair}"), 2);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "ZCARD redisson_lock_timeout:{async-fair}"), 2);
    CU_ASSERT(hilock_async_cancel(&found, a, l, 3) == 0 && found == 0);
    CU_ASSERT(hilock_lock_release_tid(l, 1) == 0);
    CU_ASSERT_FATAL(run_until(a, &r2, 1, 5000));
    CU_ASSERT_EQUAL(r2.rc, 0);
    CU_ASSERT_EQUAL(r4.n, 0);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 2, on_done, &rel) == 0);
    CU_ASSERT_FATAL(run_until(a, &r4, 1, 5000));
    CU_ASSERT_EQUAL(r4.rc, 0);
    CU_ASSERT(hilock_async_release(a, l, 4, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 2, 5000) && rel.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-fair"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS redisson_lock_queue:{async-fair}"), 0);
    hilock_lock_free(l);
    free_async(a);
}

/* Cancelled waits leave no hold, no queue entry, no subscription. */
static void t_cancel_many(void)
{
    hilock_async *a = new_async();
    hilock_lock *re = NULL, *fa = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&re, th_cl, "async-cancel-re") == 0);
    CU_ASSERT_FATAL(hilock_fair_lock_new(&fa, th_cl, "async-cancel-fair") == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(re, 1, 0, 600000) == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(fa, 1, 0, 600000) == 0);
    int rounds = th_valgrind() ? 10 : 100, ok = 0;
    for (int i = 0; i < rounds; i++) {
        hilock_lock *l = i % 2 ? fa : re;
        res r = {0};
        CU_ASSERT(hilock_async_acquire(a, l, 2, -1, 0, on_done, &r) == 0);
        /* let it reach the server (or not: a cancel at any point must hold) */
        for (int k = 0; k < i % 5; k++)
            hilock_epoll_run_once(&ep, a, 1);
        int found = 0;
        CU_ASSERT(hilock_async_cancel(&found, a, l, 2) == 0 && found == 1);
        CU_ASSERT(run_until(a, &r, 1, 5000));
        ok += r.rc == HILOCK_ECANCELED;
    }
    CU_ASSERT_EQUAL(ok, rounds);
    run_for(a, 20); /* the last unsubscribe goes out */
    /* only the blocking holder (th_cl, a fixed lease) listens there */
    CU_ASSERT(run_until_numsub(a, "redisson_lock__channel:{async-cancel-re}", 1));
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HLEN async-cancel-re"), 1);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HLEN async-cancel-fair"), 1);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS redisson_lock_queue:{async-cancel-fair}"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS redisson_lock_timeout:{async-cancel-fair}"), 0);
    hilock_lock_force_unlock(NULL, re);
    hilock_lock_force_unlock(NULL, fa);
    hilock_lock_free(re);
    hilock_lock_free(fa);
    free_async(a);
}

/* Watchdog holds are renewed from the loop's timer; a hold found gone is
 * reported once. */
static void t_watchdog(void)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    /* renewed every 800 ms; a hold with no renewal confirmed for 1920 ms is
     * reported in doubt: slack for a loaded machine */
    o.watchdog_lease_ms = 2400;
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, th_srv.url, &o, NULL, 0) == 0);
    hilock_async *a = new_async();
    seen lost = {0};
    hilock_async_set_lost_callback(a, on_lost, &lost);
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "async-wd") == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 5, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000) && r.rc == 0);
    run_for(a, 2500); /* three renewals */
    long long pttl = th_redis_int(&th_srv, "PTTL async-wd");
    CU_ASSERT(pttl > 0 && pttl <= 2400);
    CU_ASSERT_EQUAL(lost.n, 0);
    /* gone behind its back: reported at the next renewal */
    th_redis_int(&th_srv, "DEL async-wd");
    int64_t end = th_now_ms() + 3000;
    while (lost.n == 0 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 50);
    CU_ASSERT_EQUAL(lost.n, 1);
    CU_ASSERT(lost.lock == l && lost.tid == 5);
    CU_ASSERT_EQUAL(hilock_async_is_lost(a, l, 5), 1);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 5, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 5000) && rel.rc == HILOCK_ENOTOWNER);
    /* a new hold renews again; its release stops the renewals */
    CU_ASSERT(hilock_async_acquire(a, l, 5, 0, 0, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, 2, 5000) && r.rc == 0);
    CU_ASSERT_EQUAL(hilock_async_is_lost(a, l, 5), 0);
    run_for(a, 1500);
    CU_ASSERT(th_redis_int(&th_srv, "PTTL async-wd") > 0);
    CU_ASSERT(hilock_async_release(a, l, 5, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 2, 5000) && rel.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-wd"), 0);
    run_for(a, 400);
    CU_ASSERT_EQUAL(lost.n, 1);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
}
/* Script calls the server ran to the end (EVALSHA and EVAL, less those
 * that failed: a NOSCRIPT answer before the body is sent) since the last
 * CONFIG RESETSTAT; -1 when INFO cannot be read. */
static long long script_calls(void)
{
    char info[8192];
    if (th_redis_str(&th_srv, info, sizeof info, "INFO commandstats") != 0)
        return -1;
    long long n = 0;
    const char *names[] = {"cmdstat_evalsha:", "cmdstat_eval:"};
    for (int i = 0; i < 2; i++) {
        const char *p = strstr(info, names[i]), *f;
        if (!p)
            continue;
        const char *end = strchr(p, '\n');
        n += atoll(strstr(p, "calls=") + strlen("calls="));
        if ((f = strstr(p, "failed_calls=")) && (!end || f < end))
            n -= atoll(f + strlen("failed_calls="));
    }
    return n;
}

/* Holds due at one tick are renewed together, in the groups the session
 * makes: the loop held up past the renewal point of five watchdog holds,
 * then run: one renew_many call renews all five (one by one before: five
 * calls). */
static void t_watchdog_batch(void)
{
    enum { N = 5, LEASE = 3000 }; /* renewed every 1000 ms */
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = LEASE;
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, th_srv.url, &o, NULL, 0) == 0);
    hilock_async *a = new_async();
    seen lost = {0};
    hilock_async_set_lost_callback(a, on_lost, &lost);
    hilock_lock *l[N] = {0};
    res r = {0};
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "async-batch-%d", i);
        CU_ASSERT_FATAL(hilock_lock_new(&l[i], c, name) == 0);
        CU_ASSERT(hilock_async_acquire(a, l[i], 8, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    }
    CU_ASSERT_FATAL(run_until(a, &r, N, 5000));
    th_sleep_ms(1300); /* the loop is not run: every hold's renewal falls due */
    th_redis_int(&th_srv, "CONFIG RESETSTAT");
    run_for(a, 400);
    long long calls = script_calls();
    printf("\n  %d holds due at one tick: %lld script call(s) renewed them\n", N, calls);
    CU_ASSERT_EQUAL(calls, 1);
    for (int i = 0; i < N; i++)
        CU_ASSERT(th_redis_int(&th_srv, "PTTL async-batch-%d", i) > LEASE - 800); /* renewed */
    CU_ASSERT_EQUAL(lost.n, 0);
    res rel = {0};
    for (int i = 0; i < N; i++)
        CU_ASSERT(hilock_async_release(a, l[i], 8, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, N, 5000) && rel.rc == 0);
    for (int i = 0; i < N; i++) {
        CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-batch-%d", i), 0);
        hilock_lock_free(l[i]);
    }
    free_async(a);
    hilock_client_close(c);
}


static void t_rw_and_fenced(void)
{
    hilock_async *a = new_async();
    hilock_rwlock *rw = NULL;
    CU_ASSERT_FATAL(hilock_rwlock_new(&rw, th_cl, "async-rw") == 0);
    hilock_lock *rd = hilock_rwlock_read_lock(rw), *wr = hilock_rwlock_write_lock(rw);
    res r1 = {0}, r2 = {0}, w = {0}, q = {0};
    CU_ASSERT(hilock_async_acquire(a, rd, 1, 0, 30000, on_done, &r1) == 0);
    CU_ASSERT(hilock_async_acquire(a, rd, 2, 0, 30000, on_done, &r2) == 0);
    CU_ASSERT(run_until(a, &r1, 1, 5000) && r1.rc == 0);
    CU_ASSERT(run_until(a, &r2, 1, 5000) && r2.rc == 0);
    CU_ASSERT(hilock_async_query(a, rd, HILOCK_QUERY_IS_LOCKED, 0, on_done, &q) == 0);
    CU_ASSERT(run_until(a, &q, 1, 5000) && q.rc == 0 && q.value == 1);
    CU_ASSERT(hilock_async_acquire(a, wr, 3, 10000, 30000, on_done, &w) == 0);
    run_for(a, 100);
    CU_ASSERT_EQUAL(w.n, 0); /* readers hold it */
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, rd, 1, on_done, &rel) == 0);
    CU_ASSERT(hilock_async_release(a, rd, 2, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 2, 5000) && rel.rc == 0);
    CU_ASSERT_FATAL(run_until(a, &w, 1, 5000));
    CU_ASSERT_EQUAL(w.rc, 0);
    CU_ASSERT(hilock_async_query(a, wr, HILOCK_QUERY_IS_LOCKED, 0, on_done, &q) == 0);
    CU_ASSERT(run_until(a, &q, 2, 5000) && q.rc == 0 && q.value == 1);
    CU_ASSERT(hilock_async_release(a, wr, 3, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 3, 5000) && rel.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-rw"), 0);
    hilock_rwlock_free(rw);

    hilock_lock *f = NULL;
    CU_ASSERT_FATAL(hilock_fenced_lock_new(&f, th_cl, "async-fenced") == 0);
    res t1 = {0}, t2 = {0}, tq = {0};
    CU_ASSERT(hilock_async_acquire(a, f, 1, 0, 30000, on_done, &t1) == 0);
    CU_ASSERT(run_until(a, &t1, 1, 5000) && t1.rc == 0 && t1.value >= 1);
    CU_ASSERT(hilock_async_release(a, f, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 4, 5000) && rel.rc == 0);
    CU_ASSERT(hilock_async_acquire(a, f, 2, 0, 30000, on_done, &t2) == 0);
    CU_ASSERT(run_until(a, &t2, 1, 5000) && t2.rc == 0);
    CU_ASSERT(t2.value > t1.value);
    CU_ASSERT(hilock_async_query(a, f, HILOCK_QUERY_TOKEN, 0, on_done, &tq) == 0);
    CU_ASSERT(run_until(a, &tq, 1, 5000) && tq.rc == 0 && tq.value == t2.value);
    CU_ASSERT(hilock_async_release(a, f, 2, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 5, 5000) && rel.rc == 0);
    hilock_lock_free(f);
    free_async(a);
}

/* A hung server: the attempt fails with HILOCK_ECONN within about the
 * command timeout, and once the server is back the lock is free (the
 * attempt was settled). */
static void t_hung_server(void)
{
    th_redis s2;
    CU_ASSERT_FATAL(th_redis_start(&s2, NULL) == 0);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = 300;
    o.connect_timeout_ms = 300;
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, s2.url, &o, NULL, 0) == 0);
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "async-hung") == 0);
    res q = {0};
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_IS_LOCKED, 0, on_done, &q) == 0);
    CU_ASSERT(run_until(a, &q, 1, 5000) && q.rc == 0); /* connected */
    th_redis_pause(&s2);
    res r = {0};
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 30000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ECONN);
    CU_ASSERT(th_now_ms() - t0 < 3000);
    /* a fair waiter behind a holder: its enqueue runs late, and must leave
     * the line then (settled on the attempt's own connection, after it) */
    th_redis_resume(&s2);
    hilock_lock *f = NULL;
    CU_ASSERT_FATAL(hilock_fair_lock_new(&f, c, "async-hung-fair") == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(f, 9, 0, 30000) == 0);
    th_redis_pause(&s2);
    res w = {0};
    CU_ASSERT(hilock_async_acquire(a, f, 2, 2000, 30000, on_done, &w) == 0);
    CU_ASSERT_FATAL(run_until(a, &w, 1, 5000));
    CU_ASSERT_EQUAL(w.rc, HILOCK_ECONN);
    th_redis_resume(&s2);
    int64_t end = th_now_ms() + 3000;
    while (th_now_ms() < end && (th_redis_int(&s2, "EXISTS async-hung") != 0 ||
                                 th_redis_int(&s2, "LLEN redisson_lock_queue:{async-hung-fair}") != 0))
        hilock_epoll_run_once(&ep, a, 20);
    CU_ASSERT_EQUAL(th_redis_int(&s2, "EXISTS async-hung"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&s2, "LLEN redisson_lock_queue:{async-hung-fair}"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&s2, "ZCARD redisson_lock_timeout:{async-hung-fair}"), 0);
    CU_ASSERT(hilock_lock_release_tid(f, 9) == 0);
    hilock_lock_free(f);
    /* and it works again */
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 30000, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, 2, 5000) && r.rc == 0);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
    th_redis_stop(&s2);
}


/* Multi-lock: all or nothing; a waiting one is woken by a member's unlock
 * message (the holder's lease is a minute); cancel leaves nothing. */
static void t_multilock(void)
{
    hilock_async *a = new_async();
    hilock_lock *m1 = NULL, *m2 = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&m1, th_cl, "async-ml-1") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&m2, th_cl, "async-ml-2") == 0);
    hilock_lock *members[2] = {m1, m2};
    hilock_multilock *ml = NULL;
    CU_ASSERT_FATAL(hilock_multilock_new(&ml, members, 2) == 0);
    res r = {0}, rel = {0};
    CU_ASSERT(hilock_async_multilock_acquire(a, ml, 1, 0, 30000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT(r.value > 25000 && r.value <= 30000); /* validity of the lease */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-ml-1 async-ml-2"), 2);
    CU_ASSERT(hilock_async_multilock_release(a, ml, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 5000) && rel.rc == 0 && rel.value == 2);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-ml-1 async-ml-2"), 0);

    /* a member held elsewhere: nothing taken (wait 0) */
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(m2, 9, 0, 60000) == 0);
    CU_ASSERT(hilock_async_multilock_acquire(a, ml, 1, 0, 30000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 2, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-ml-1"), 0);

    /* waiting: woken by the member's unlock message */
    CU_ASSERT(hilock_async_multilock_acquire(a, ml, 1, 20000, 30000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until_numsub(a, "redisson_lock__channel:{async-ml-2}", 1));
    run_for(a, 200); /* past its retry after subscribing: asleep now */
    CU_ASSERT_EQUAL(r.n, 2);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-ml-1"), 0); /* given back */
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_lock_release_tid(m2, 9) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 3, 5000));
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT(r.at - t0 < 2000);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-ml-1 async-ml-2"), 2);
    /* the members' holds listen on their channels until the release */
    run_for(a, 50);
    CU_ASSERT_EQUAL(numsub("redisson_lock__channel:{async-ml-2}"), 1);
    CU_ASSERT(hilock_async_multilock_release(a, ml, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 2, 5000) && rel.rc == 0);
    CU_ASSERT(run_until_numsub(a, "redisson_lock__channel:{async-ml-2}", 0));

    /* cancel a waiting one: nothing held, no subscription left */
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(m1, 9, 0, 60000) == 0);
    CU_ASSERT(hilock_async_multilock_acquire(a, ml, 1, -1, 0, on_done, &r) == 0);
    /* the blocking holder of m1 (a fixed lease) listens there too */
    CU_ASSERT(run_until_numsub(a, "redisson_lock__channel:{async-ml-1}", 2));
    int found = 0;
    CU_ASSERT(hilock_async_multilock_cancel(&found, a, ml, 1) == 0 && found == 1);
    CU_ASSERT_FATAL(run_until(a, &r, 4, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ECANCELED);
    CU_ASSERT(run_until_numsub(a, "redisson_lock__channel:{async-ml-1}", 1));
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-ml-2"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HLEN async-ml-1"), 1);
    /* a release of what is not held: not owner */
    CU_ASSERT(hilock_async_multilock_release(a, ml, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 3, 5000) && rel.rc == HILOCK_ENOTOWNER);
    CU_ASSERT(hilock_lock_release_tid(m1, 9) == 0);
    hilock_multilock_free(ml);
    hilock_lock_free(m1);
    hilock_lock_free(m2);
    free_async(a);
}

/* A held FAIR member wakes a waiting multi-lock by message: the call joins
 * its line and listens on its own waiter channel (as libcore's blocking
 * multi-lock, test_multilock 'fair member'). While the member is held
 * (lease 20 s) the waiter runs few scripts (it polled before: every 1-50
 * ms), the unlock hands over at once, and no line entry is left after a
 * grant, a wait that runs out or a cancel. */
static void t_multilock_fair_member(void)
{
    hilock_async *a = new_async();
    hilock_lock *m1 = NULL, *m2 = NULL, *other = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&m1, th_cl, "async-mf-1") == 0);
    CU_ASSERT_FATAL(hilock_fair_lock_new(&m2, th_cl, "async-mf-2") == 0);
    CU_ASSERT_FATAL(hilock_fair_lock_new(&other, th_cl, "async-mf-2") == 0);
    hilock_lock *members[2] = {m1, m2};
    hilock_multilock *ml = NULL;
    CU_ASSERT_FATAL(hilock_multilock_new(&ml, members, 2) == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(other, 777, 0, 20000) == 0);
    res r = {0}, rel = {0};
    CU_ASSERT(hilock_async_multilock_acquire(a, ml, 1, 5000, 30000, on_done, &r) == 0);
    run_for(a, 300); /* tried, in line, asleep */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "LLEN redisson_lock_queue:{async-mf-2}"), 1);
    long long before = th_script_calls(&th_srv);
    run_for(a, 800);
    long long runs = th_script_calls(&th_srv) - before;
    CU_ASSERT_EQUAL(r.n, 0);
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_lock_release_tid(other, 777) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    printf("[%lld scripts in 800 ms, hand-off %lld ms] ", runs, (long long)(r.at - t0));
    CU_ASSERT(runs <= 3);
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT(r.at - t0 < (th_valgrind() ? 2000 : 500));
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS redisson_lock_queue:{async-mf-2}"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS redisson_lock_timeout:{async-mf-2}"), 0);
    CU_ASSERT(hilock_async_multilock_release(a, ml, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 5000) && rel.rc == 0);

    /* the wait runs out: it leaves the line, and took nothing */
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(other, 777, 0, 20000) == 0);
    CU_ASSERT(hilock_async_multilock_acquire(a, ml, 1, 300, 30000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 2, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS redisson_lock_queue:{async-mf-2}"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS redisson_lock_timeout:{async-mf-2}"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-mf-1"), 0);

    /* cancelled while asleep in line */
    CU_ASSERT(hilock_async_multilock_acquire(a, ml, 1, -1, 30000, on_done, &r) == 0);
    run_for(a, 300);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "LLEN redisson_lock_queue:{async-mf-2}"), 1);
    int found = 0;
    CU_ASSERT(hilock_async_multilock_cancel(&found, a, ml, 1) == 0 && found == 1);
    CU_ASSERT_FATAL(run_until(a, &r, 3, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ECANCELED);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS redisson_lock_queue:{async-mf-2}"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS redisson_lock_timeout:{async-mf-2}"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-mf-1"), 0);
    CU_ASSERT(hilock_lock_release_tid(other, 777) == 0);
    hilock_multilock_free(ml);
    hilock_lock_free(m1);
    hilock_lock_free(m2);
    hilock_lock_free(other);
    free_async(a);
}

/* Redlock over three servers: a majority suffices; one held elsewhere. */
static void t_redlock(void)
{
    th_redis s[2];
    CU_ASSERT_FATAL(th_redis_start(&s[0], NULL) == 0);
    CU_ASSERT_FATAL(th_redis_start(&s[1], NULL) == 0);
    hilock_client *c[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        CU_ASSERT_FATAL(hilock_client_open(&c[i], s[i].url, NULL, NULL, 0) == 0);
    hilock_lock *l[3] = {NULL, NULL, NULL};
    CU_ASSERT_FATAL(hilock_lock_new(&l[0], th_cl, "async-red") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l[1], c[0], "async-red") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l[2], c[1], "async-red") == 0);
    hilock_multilock *rl = NULL;
    CU_ASSERT_FATAL(hilock_redlock_new(&rl, l, 3) == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l[2], 9, 0, 60000) == 0);
    hilock_async *a = new_async();
    res r = {0}, rel = {0};
    CU_ASSERT(hilock_async_multilock_acquire(a, rl, 1, 0, 10000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT(r.value > 0 && r.value <= 10000);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-red"), 1);
    CU_ASSERT_EQUAL(th_redis_int(&s[0], "EXISTS async-red"), 1);
    CU_ASSERT_EQUAL(th_redis_int(&s[1], "HLEN async-red"), 1); /* the other holder's */
    CU_ASSERT(hilock_async_multilock_release(a, rl, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 5000) && rel.rc == 0 && rel.value == 2);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-red"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&s[0], "EXISTS async-red"), 0);
    /* two of three held elsewhere: no majority, nothing kept */
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l[1], 9, 0, 60000) == 0);
    CU_ASSERT(hilock_async_multilock_acquire(a, rl, 1, 0, 10000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 2, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-red"), 0);
    free_async(a);
    hilock_multilock_free(rl);
    for (int i = 0; i < 3; i++)
        hilock_lock_free(l[i]);
    for (int i = 0; i < 2; i++) {
        hilock_client_close(c[i]);
        th_redis_stop(&s[i]);
    }
}

static int refuse_watch(void *data, int fd, int events)
{
    (void)data, (void)fd;
    return events ? -1 : 0;
}

/* A loop that cannot watch hilock's descriptor: the operation fails with
 * HILOCK_ECONN and a message saying why, instead of never completing. */
static void t_loop_refuses(void)
{
    CU_ASSERT_FATAL(hilock_epoll_init(&ep) == 0);
    hilock_async_loop loop = hilock_epoll_loop(&ep);
    loop.watch = refuse_watch;
    hilock_async *a = NULL;
    CU_ASSERT_FATAL(hilock_async_new(&a, &loop) == 0);
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, th_cl, "async-refused") == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 10000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ECONN);
    CU_ASSERT(strstr(r.err, "refused to watch") != NULL);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-refused"), 0);
    hilock_lock_free(l);
    free_async(a);
}

static hilock_async *freed_in_cb;
static void free_in_cb(hilock_async *a, int rc, int64_t value, void *payload)
{
    on_done(a, rc, value, payload);
    hilock_async_free(a);
    freed_in_cb = a;
}

/* Freeing with operations pending completes each once with HILOCK_ECLOSED;
 * freeing from a callback is allowed. */
static void t_free_pending(void)
{
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, th_cl, "async-free") == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, 1, 0, 60000) == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 2, -1, 0, on_done, &r) == 0);
    CU_ASSERT(run_until_numsub(a, "redisson_lock__channel:{async-free}", 1));
    free_async(a);
    CU_ASSERT_EQUAL(r.n, 1);
    CU_ASSERT_EQUAL(r.rc, HILOCK_ECLOSED);

    a = new_async();
    res r1 = {0}, r2 = {0};
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_IS_LOCKED, 0, free_in_cb, &r1) == 0);
    CU_ASSERT(hilock_async_acquire(a, l, 2, -1, 0, on_done, &r2) == 0);
    int64_t end = th_now_ms() + 5000;
    while (!freed_in_cb && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 50);
    CU_ASSERT(freed_in_cb == a);
    CU_ASSERT_EQUAL(r1.n, 1);
    CU_ASSERT_EQUAL(r2.n, 1);
    CU_ASSERT_EQUAL(r2.rc, HILOCK_ECLOSED);
    hilock_epoll_close(&ep);
    CU_ASSERT(hilock_lock_release_tid(l, 1) == 0);
    hilock_lock_free(l);
}

#ifdef HILOCK_TEST_LIBUV
typedef struct uv_case {
    hilock_uv *u;
    hilock_lock *l;
    res acq, rel;
    int64_t freed_at; /* when the holder released */
} uv_case;

static void uv_released(hilock_async *a, int rc, int64_t value, void *payload)
{
    uv_case *c = payload;
    on_done(a, rc, value, &c->rel);
    uv_stop(c->u->loop); /* hilock's idle connections keep the loop alive */
}

static void uv_granted(hilock_async *a, int rc, int64_t value, void *payload)
{
    uv_case *c = payload;
    on_done(a, rc, value, &c->acq);
    if (rc == 0)
        hilock_async_release(a, c->l, 2, uv_released, c);
    else
        uv_stop(c->u->loop);
}

static void uv_free_holder(uv_timer_t *t)
{
    uv_case *c = t->data;
    c->freed_at = th_now_ms();
    hilock_lock_release_tid(c->l, 1); /* the unlock message wakes the waiter */
}

static void uv_stop_guard(uv_timer_t *t)
{
    uv_stop(t->loop);
}

/* The same hand-off on libuv: the loop runs until there is nothing left. */
static void t_libuv(void)
{
    uv_loop_t loop;
    CU_ASSERT_FATAL(uv_loop_init(&loop) == 0);
    hilock_uv u;
    CU_ASSERT_FATAL(hilock_uv_init(&u, &loop) == 0);
    hilock_async_loop hl = hilock_uv_loop(&u);
    CU_ASSERT_FATAL(hilock_async_new(&u.async, &hl) == 0);
    uv_case c = {&u, NULL, {0}, {0}, 0};
    CU_ASSERT_FATAL(hilock_lock_new(&c.l, th_cl, "async-uv") == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(c.l, 1, 0, 60000) == 0);
    CU_ASSERT(hilock_async_acquire(u.async, c.l, 2, 10000, 30000, uv_granted, &c) == 0);
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    uv_update_time(&loop); /* the timer counts from now, not from uv_loop_init */
    t.data = &c;
    uv_timer_start(&t, uv_free_holder, 200, 0);
    int64_t t0 = th_now_ms();
    uv_timer_t guard; /* a bound, should the hand-off never come */
    uv_timer_init(&loop, &guard);
    uv_timer_start(&guard, uv_stop_guard, 5000, 0);
    uv_run(&loop, UV_RUN_DEFAULT); /* until uv_released stops it */
    CU_ASSERT(th_now_ms() - t0 < 5000);
    CU_ASSERT(c.acq.n == 1 && c.acq.rc == 0);
    CU_ASSERT(c.rel.n == 1 && c.rel.rc == 0 && c.rel.value == 0);
    /* granted after the holder's release (the timer's 200 ms count on
     * libuv's cached clock: not comparable to t0 to the millisecond) */
    CU_ASSERT(c.freed_at > 0 && c.acq.at >= c.freed_at);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS async-uv"), 0);
    hilock_async_free(u.async);
    hilock_uv_close(&u);
    uv_close((uv_handle_t *)&t, NULL);
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    CU_ASSERT(uv_loop_close(&loop) == 0);
    hilock_lock_free(c.l);
}
#endif

typedef struct count {
    int done, ok;
    char err[256];
} count;

static void on_count(hilock_async *a, int rc, int64_t v, void *p)
{
    (void)v;
    count *c = p;
    c->done++;
    if (rc == 0)
        c->ok++;
    else if (!c->err[0])
        snprintf(c->err, sizeof c->err, "%s", hilock_async_errmsg(a));
}

/* Thousands of acquires started at once on one handle (one pipelined
 * connection) with a 300 ms command timeout: a request's deadline runs from
 * when it was written and the ones before it were answered, so the queue
 * ahead of it does not count and all are granted (they all failed with "no
 * reply within 300 ms" when deadlines ran from queueing and each start
 * walked every operation). */
static void t_many_in_flight(void)
{
    int n = th_valgrind() ? 1000 : 6000;
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = 300;
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, th_srv.url, &o, NULL, 0) == 0);
    hilock_lock **l = calloc((size_t)n, sizeof *l);
    CU_ASSERT_FATAL(l != NULL);
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "inflight:%d", i);
        CU_ASSERT_FATAL(hilock_lock_new(&l[i], c, name) == 0);
    }
    hilock_async *a = new_async();
    count acq = {0}, rel = {0};
    int64_t t0 = th_now_ms();
    for (int i = 0; i < n; i++)
        CU_ASSERT(hilock_async_acquire(a, l[i], 1, 0, 30000, on_count, &acq) == 0);
    int64_t started = th_now_ms() - t0;
    run_until_n(a, &acq.done, n, 60000);
    int64_t done = th_now_ms() - t0;
    printf("\n  %d acquires started in %lld ms, %d granted of %d completed after %lld ms%s%s\n", n,
           (long long)started, acq.ok, acq.done, (long long)done, acq.err[0] ? ": " : "", acq.err);
    CU_ASSERT_EQUAL(acq.done, n);
    CU_ASSERT_EQUAL(acq.ok, n);
    for (int i = 0; i < n; i++)
        CU_ASSERT(hilock_async_release(a, l[i], 1, on_count, &rel) == 0);
    run_until_n(a, &rel.done, n, 60000);
    CU_ASSERT_EQUAL(rel.ok, acq.ok);
    free_async(a);
    for (int i = 0; i < n; i++)
        hilock_lock_free(l[i]);
    free(l);
    hilock_client_close(c);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("non-blocking API", th_srv_client_init, th_srv_client_clean);
    CU_add_test(s, "acquire, re-enter, queries, release, force, wrong type", t_basic);
    CU_add_test(s, "thousands of acquires in flight on one handle all granted", t_many_in_flight);
    CU_add_test(s, "bad arguments: clear codes, no callback", t_bad_args);
    CU_add_test(s, "waiter woken by the unlock message", t_handoff_by_message);
    CU_add_test(s, "many waiters of one name, one at a time", t_many_waiters);
    CU_add_test(s, "fair order; a cancelled fair waiter leaves the line", t_fair_order_and_cancel);
    CU_add_test(s, "cancelled waits leave nothing behind", t_cancel_many);
    CU_add_test(s, "watchdog from the loop's timer; loss reported", t_watchdog);
    CU_add_test(s, "holds due at one tick share renew_many calls", t_watchdog_batch);
    CU_add_test(s, "read-write sides and fenced tokens", t_rw_and_fenced);
    CU_add_test(s, "hung server: ECONN in time, attempt settled", t_hung_server);
    CU_add_test(s, "free with operations pending", t_free_pending);
    CU_add_test(s, "a loop that refuses to watch: ECONN, not a hang", t_loop_refuses);
    CU_add_test(s, "multi-lock: all or nothing, woken by a member's message, cancel", t_multilock);
    CU_add_test(s, "multi-lock: a held fair member wakes it by message", t_multilock_fair_member);
    CU_add_test(s, "redlock: a majority of three servers", t_redlock);
#ifdef HILOCK_TEST_LIBUV
    CU_add_test(s, "libuv adapter: hand-off", t_libuv);
#endif
    return th_cu_run();
}
