/*
 * Semaphores, permit-expirable semaphores and count-down latches on the
 * non-blocking API (hilock_async) against a real redis-server, through the
 * epoll adapter: permits counted exactly across owners (async waiters and a
 * blocking holder), a waiter woken by the release message (nothing else can
 * end its wait in time), cancellation that takes nothing and leaves no
 * subscription, a permit lease ending, the latch opening for every waiter,
 * bad input refused at once with no callback, a key of another type left
 * untouched. The loop runs until the awaited completion, with a bound.
 */
#include <CUnit/Basic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"
#include "hilock/adapters/epoll.h"


#include "async_helpers.h"

/* One count operation run to its end: its rc; *value its value. */
static int sem_op(hilock_async *a, hilock_semaphore *s, hilock_count_op op, int64_t arg,
                  int64_t *value)
{
    res r = {0};
    int rc = hilock_async_semaphore_count_op(a, s, op, arg, on_done, &r);
    if (rc)
        return rc;
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    if (value)
        *value = r.value;
    return r.rc;
}

static void t_semaphore(void)
{
    hilock_async *a = new_async();
    hilock_semaphore *s = NULL;
    CU_ASSERT_FATAL(hilock_semaphore_new(&s, th_cl, "asem") == 0);
    int64_t v = -1;
    CU_ASSERT(sem_op(a, s, HILOCK_COUNT_TRY_SET, 2, &v) == 0 && v == 1);
    CU_ASSERT(sem_op(a, s, HILOCK_COUNT_TRY_SET, 5, &v) == 0 && v == 0); /* kept */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "GET asem"), 2);
    res r1 = {0}, r2 = {0};
    CU_ASSERT(hilock_async_semaphore_acquire(a, s, 1, 2, 0, on_done, &r1) == 0);
    CU_ASSERT_EQUAL(r1.n, 0); /* never inside the call */
    CU_ASSERT_FATAL(run_until(a, &r1, 1, 5000));
    CU_ASSERT(r1.rc == 0 && r1.value == 2);
    CU_ASSERT(hilock_async_semaphore_acquire(a, s, 2, 1, 0, on_done, &r2) == 0);
    CU_ASSERT_FATAL(run_until(a, &r2, 1, 5000));
    CU_ASSERT_EQUAL(r2.rc, HILOCK_ETIMEDOUT);
    CU_ASSERT(strstr(r2.err, "asem") != NULL);
    CU_ASSERT(sem_op(a, s, HILOCK_COUNT_GET, 0, &v) == 0 && v == 0);
    res rel = {0};
    CU_ASSERT(hilock_async_semaphore_release(a, s, 2, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 5000) && rel.rc == 0);
    CU_ASSERT(sem_op(a, s, HILOCK_COUNT_ADD, 3, NULL) == 0);
    CU_ASSERT(sem_op(a, s, HILOCK_COUNT_GET, 0, &v) == 0 && v == 5);
    CU_ASSERT(sem_op(a, s, HILOCK_COUNT_DRAIN, 0, &v) == 0 && v == 5);
    CU_ASSERT(sem_op(a, s, HILOCK_COUNT_SET, 4, NULL) == 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "GET asem"), 4);
    CU_ASSERT(sem_op(a, s, HILOCK_COUNT_DELETE, 0, &v) == 0 && v == 1);
    CU_ASSERT(sem_op(a, s, HILOCK_COUNT_DELETE, 0, &v) == 0 && v == 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS asem"), 0);
    hilock_semaphore_free(s);
    free_async(a);
}

/* Bad input: refused at once with a clear code, no callback, key untouched;
 * a key of another type: HILOCK_EWRONGTYPE through the callback, untouched. */
static void t_bad_input(void)
{
    hilock_async *a = new_async();
    hilock_semaphore *s = NULL;
    hilock_permit_semaphore *p = NULL;
    hilock_latch *l = NULL;
    CU_ASSERT_FATAL(hilock_semaphore_new(&s, th_cl, "asem-bad") == 0);
    CU_ASSERT_FATAL(hilock_permit_semaphore_new(&p, th_cl, "apes-bad") == 0);
    CU_ASSERT_FATAL(hilock_latch_new(&l, th_cl, "alatch-bad") == 0);
    res r = {0};
    char id[HILOCK_PERMIT_ID_SIZE] = "x";
    CU_ASSERT(hilock_async_semaphore_acquire(a, s, 1, 0, 0, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_semaphore_acquire(a, s, 1, 2147483648LL, 0, on_done, &r) ==
              HILOCK_EINVAL);
    CU_ASSERT(hilock_async_semaphore_acquire(a, s, 1, 1, -2, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_semaphore_acquire(a, s, 1, 1, 0, NULL, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_semaphore_acquire(NULL, s, 1, 1, 0, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_semaphore_acquire(a, NULL, 1, 1, 0, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_semaphore_release(a, s, 0, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_semaphore_count_op(a, s, HILOCK_COUNT_TRY_SET, 0, on_done, &r) ==
              HILOCK_EINVAL);
    CU_ASSERT(hilock_async_semaphore_count_op(a, s, (hilock_count_op)99, 0, on_done, &r) ==
              HILOCK_EINVAL);
    CU_ASSERT(hilock_async_semaphore_count_op(a, s, HILOCK_COUNT_SET, -1, on_done, &r) ==
              HILOCK_EINVAL);
    CU_ASSERT(hilock_async_latch_count_op(a, l, HILOCK_COUNT_ADD, 1, on_done, &r) ==
              HILOCK_EINVAL);
    CU_ASSERT(hilock_async_latch_count_op(a, l, HILOCK_COUNT_TRY_SET, 1000000000000000LL,
                                          on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_permit_semaphore_count_op(a, p, HILOCK_COUNT_DRAIN, 0, on_done,
                                                     &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_permit_semaphore_acquire(NULL, a, p, 1, 0, 0, on_done, &r) ==
              HILOCK_EINVAL);
    CU_ASSERT(hilock_async_permit_semaphore_acquire(id, a, p, 1, -3, 0, on_done, &r) ==
              HILOCK_EINVAL);
    CU_ASSERT_STRING_EQUAL(id, "");
    CU_ASSERT(hilock_async_permit_semaphore_release(a, p, "nothex", on_done, &r) ==
              HILOCK_EINVAL);
    CU_ASSERT(hilock_async_permit_semaphore_release(a, p, NULL, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_permit_semaphore_update_lease(
                  a, p, "0123456789abcdef0123456789abcdef", 0, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_latch_await(a, l, 1, -7, on_done, &r) == HILOCK_EINVAL);
    CU_ASSERT(hilock_async_latch_await(a, NULL, 1, 0, on_done, &r) == HILOCK_EINVAL);
    int found = 7;
    CU_ASSERT(hilock_async_semaphore_cancel(&found, a, NULL, 1) == HILOCK_EINVAL && found == 0);
    CU_ASSERT(hilock_async_latch_cancel(&found, a, l, 1) == 0 && found == 0);
    CU_ASSERT_STRING_NOT_EQUAL(hilock_async_errmsg(a), "");
    run_for(a, 20);
    CU_ASSERT_EQUAL(r.n, 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS asem-bad apes-bad alatch-bad"), 0);
    /* a key that is no count */
    th_redis_int(&th_srv, "SET asem-bad abc");
    CU_ASSERT(hilock_async_semaphore_release(a, s, 1, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_EWRONGTYPE);
    CU_ASSERT(strstr(r.err, "not a semaphore") != NULL);
    CU_ASSERT(hilock_async_semaphore_acquire(a, s, 1, 1, 1000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 2, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_EWRONGTYPE);
    char buf[16] = "";
    CU_ASSERT(th_redis_str(&th_srv, buf, sizeof buf, "GET asem-bad") == 0 && !strcmp(buf, "abc"));
    th_redis_int(&th_srv, "HSET alatch-bad f 1");
    CU_ASSERT(hilock_async_latch_await(a, l, 1, 1000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 3, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HGET alatch-bad f"), 1);
    th_redis_int(&th_srv, "DEL asem-bad alatch-bad");
    hilock_semaphore_free(s);
    hilock_permit_semaphore_free(p);
    hilock_latch_free(l);
    free_async(a);
}

/* A waiter sleeps until the release message: no lease, no poll can end its
 * 30 s wait in time. */
static void t_wake_by_message(void)
{
    hilock_async *a = new_async();
    hilock_semaphore *s = NULL;
    CU_ASSERT_FATAL(hilock_semaphore_new(&s, th_cl, "asem-wake") == 0);
    CU_ASSERT_FATAL(hilock_semaphore_try_set_permits(NULL, s, 1) == 0);
    CU_ASSERT_FATAL(hilock_semaphore_acquire_tid(s, 1, 1, 0) == 0); /* a blocking holder */
    res r = {0};
    CU_ASSERT(hilock_async_semaphore_acquire(a, s, 2, 1, 30000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until_numsub(a, "redisson_sc:{asem-wake}", 1));
    run_for(a, 150); /* past its retry after subscribing: asleep now */
    CU_ASSERT_EQUAL(r.n, 0);
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_semaphore_release(s, 1) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT(r.rc == 0 && r.value == 1);
    CU_ASSERT(r.at - t0 < 1000);
    CU_ASSERT(run_until_numsub(a, "redisson_sc:{asem-wake}", 0)); /* it left */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "GET asem-wake"), 0);
    th_redis_int(&th_srv, "DEL asem-wake");
    hilock_semaphore_free(s);
    free_async(a);
}

/* 3 permits, a blocking holder of one and 12 async owners of one each on
 * one loop, each keeping its permit for a turn of the loop: never more
 * holders (granted, release not yet answered) than permits, every owner
 * served, all permits back at the end. */
static void t_exclusion(void)
{
    hilock_async *a = new_async();
    hilock_semaphore *s = NULL;
    CU_ASSERT_FATAL(hilock_semaphore_new(&s, th_cl, "asem-excl") == 0);
    CU_ASSERT_FATAL(hilock_semaphore_try_set_permits(NULL, s, 3) == 0);
    CU_ASSERT_FATAL(hilock_semaphore_acquire_tid(s, 99, 1, 0) == 0);
    enum { N = 12 };
    res r[N], rel[N];
    int state[N]; /* 0 waiting, 1 holding, 2 releasing */
    memset(r, 0, sizeof r);
    memset(rel, 0, sizeof rel);
    memset(state, 0, sizeof state);
    for (int i = 0; i < N; i++)
        CU_ASSERT(hilock_async_semaphore_acquire(a, s, 100 + (uint64_t)i, 1, 20000, on_done,
                                                 &r[i]) == 0);
    int done = 0, blocking_held = 1, max_holders = 0;
    int64_t end = th_now_ms() + 20000;
    while (done < N && th_now_ms() < end) {
        /* give back what was held through the last turn */
        for (int i = 0; i < N; i++)
            if (state[i] == 1) {
                CU_ASSERT(hilock_async_semaphore_release(a, s, 1, on_done, &rel[i]) == 0);
                state[i] = 2;
            }
        hilock_epoll_run_once(&ep, a, 50);
        int holders = blocking_held;
        done = 0;
        for (int i = 0; i < N; i++) {
            if (state[i] == 0 && r[i].n == 1) {
                CU_ASSERT(r[i].rc == 0 && r[i].value == 1);
                state[i] = 1;
            }
            holders += state[i] == 1 || (state[i] == 2 && rel[i].n == 0);
            done += state[i] == 2 && rel[i].n == 1 && rel[i].rc == 0;
        }
        if (holders > max_holders)
            max_holders = holders;
        if (done >= N / 2 && blocking_held) {
            CU_ASSERT(hilock_semaphore_release(s, 1) == 0);
            blocking_held = 0;
        }
    }
    CU_ASSERT_EQUAL(done, N);
    CU_ASSERT(max_holders >= 2 && max_holders <= 3);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "GET asem-excl"), 3);
    th_redis_int(&th_srv, "DEL asem-excl");
    hilock_semaphore_free(s);
    free_async(a);
}

/* Cancelled waits (at any point of their progress) take nothing and leave
 * no subscription, for the three kinds. */
static void t_cancel(void)
{
    hilock_async *a = new_async();
    hilock_semaphore *s = NULL;
    hilock_permit_semaphore *p = NULL;
    hilock_latch *l = NULL;
    CU_ASSERT_FATAL(hilock_semaphore_new(&s, th_cl, "asem-cancel") == 0);
    CU_ASSERT_FATAL(hilock_permit_semaphore_new(&p, th_cl, "apes-cancel") == 0);
    CU_ASSERT_FATAL(hilock_latch_new(&l, th_cl, "alatch-cancel") == 0);
    th_redis_int(&th_srv, "SET asem-cancel 1");
    CU_ASSERT_FATAL(hilock_latch_try_set_count(NULL, l, 1) == 0);
    int rounds = th_valgrind() ? 6 : 30, ok = 0;
    for (int i = 0; i < rounds; i++) {
        res r = {0};
        int found = 0;
        char id[HILOCK_PERMIT_ID_SIZE];
        switch (i % 3) {
        case 0: /* 2 of 1 permit: it waits */
            CU_ASSERT(hilock_async_semaphore_acquire(a, s, 2, 2, -1, on_done, &r) == 0);
            break;
        case 1: /* no permit at all */
            CU_ASSERT(hilock_async_permit_semaphore_acquire(id, a, p, 2, -1, 0, on_done, &r) ==
                      0);
            break;
        default:
            CU_ASSERT(hilock_async_latch_await(a, l, 2, -1, on_done, &r) == 0);
            break;
        }
        for (int k = 0; k < i % 5; k++)
            hilock_epoll_run_once(&ep, a, 1);
        int crc = i % 3 == 0   ? hilock_async_semaphore_cancel(&found, a, s, 2)
                  : i % 3 == 1 ? hilock_async_permit_semaphore_cancel(&found, a, p, 2)
                               : hilock_async_latch_cancel(&found, a, l, 2);
        CU_ASSERT(crc == 0 && found == 1);
        CU_ASSERT_EQUAL(r.n, 0); /* from the loop, not inside cancel */
        CU_ASSERT(run_until(a, &r, 1, 5000));
        ok += r.rc == HILOCK_ECANCELED;
    }
    CU_ASSERT_EQUAL(ok, rounds);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "GET asem-cancel"), 1);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS apes-cancel {apes-cancel}:timeout"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "GET alatch-cancel"), 1);
    CU_ASSERT(run_until_numsub(a, "redisson_sc:{asem-cancel}", 0));
    CU_ASSERT(run_until_numsub(a, "redisson_sc:{apes-cancel}", 0));
    CU_ASSERT(run_until_numsub(a, "redisson_countdownlatch__channel__{alatch-cancel}", 0));
    th_redis_int(&th_srv, "DEL asem-cancel alatch-cancel");
    hilock_semaphore_free(s);
    hilock_permit_semaphore_free(p);
    hilock_latch_free(l);
    free_async(a);
}

/* Permit ids, release and lease update; a waiter gets the permit whose
 * lease ended (no message comes for that: the engine's lease hint). */
static void t_permit_semaphore(void)
{
    hilock_async *a = new_async();
    hilock_permit_semaphore *p = NULL;
    CU_ASSERT_FATAL(hilock_permit_semaphore_new(&p, th_cl, "apes") == 0);
    res r = {0}, w = {0};
    CU_ASSERT(hilock_async_permit_semaphore_count_op(a, p, HILOCK_COUNT_TRY_SET, 1, on_done,
                                                     &r) == 0);
    CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0 && r.value == 1);
    char id1[HILOCK_PERMIT_ID_SIZE], id2[HILOCK_PERMIT_ID_SIZE];
    CU_ASSERT(hilock_async_permit_semaphore_acquire(id1, a, p, 1, 0, 400, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 2, 5000));
    CU_ASSERT(r.rc == 0 && r.value == 1);
    CU_ASSERT_EQUAL(strlen(id1), 32);
    CU_ASSERT(hilock_async_permit_semaphore_update_lease(a, p, id1, 400, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, 3, 5000) && r.rc == 0);
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_async_permit_semaphore_acquire(id2, a, p, 2, 5000, 0, on_done, &w) == 0);
    CU_ASSERT_FATAL(run_until(a, &w, 1, 5000));
    CU_ASSERT_EQUAL(w.rc, 0);
    CU_ASSERT(w.at - t0 >= 250 && w.at - t0 < 3000); /* when id1's lease ended */
    CU_ASSERT(strlen(id2) == 32 && strcmp(id1, id2) != 0);
    CU_ASSERT(hilock_async_permit_semaphore_release(a, p, id1, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, 4, 5000) && r.rc == HILOCK_ENOTOWNER);
    CU_ASSERT(hilock_async_permit_semaphore_release(a, p, id2, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, 5, 5000) && r.rc == 0);
    CU_ASSERT(hilock_async_permit_semaphore_update_lease(a, p, id2, 1000, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, 6, 5000) && r.rc == HILOCK_ENOTOWNER);
    CU_ASSERT(hilock_async_permit_semaphore_count_op(a, p, HILOCK_COUNT_GET, 0, on_done, &r) ==
              0);
    CU_ASSERT(run_until(a, &r, 7, 5000) && r.rc == 0 && r.value == 1);
    CU_ASSERT(hilock_async_permit_semaphore_count_op(a, p, HILOCK_COUNT_DELETE, 0, on_done,
                                                     &r) == 0);
    CU_ASSERT(run_until(a, &r, 8, 5000) && r.rc == 0 && r.value == 1);
    hilock_permit_semaphore_free(p);
    free_async(a);
}

/* The last count-down opens the latch for every waiter, by message. */
static void t_latch(void)
{
    hilock_async *a = new_async();
    hilock_latch *l = NULL;
    CU_ASSERT_FATAL(hilock_latch_new(&l, th_cl, "alatch") == 0);
    res r = {0}, w1 = {0}, w2 = {0};
    CU_ASSERT(hilock_async_latch_count_op(a, l, HILOCK_COUNT_TRY_SET, 2, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0 && r.value == 1);
    CU_ASSERT(hilock_async_latch_await(a, l, 1, 30000, on_done, &w1) == 0);
    CU_ASSERT(hilock_async_latch_await(a, l, 2, 30000, on_done, &w2) == 0);
    CU_ASSERT_FATAL(
        run_until_numsub(a, "redisson_countdownlatch__channel__{alatch}", 1));
    run_for(a, 150);
    CU_ASSERT(w1.n == 0 && w2.n == 0);
    CU_ASSERT(hilock_async_latch_count_down(a, l, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, 2, 5000) && r.rc == 0 && r.value == 1);
    run_for(a, 100);
    CU_ASSERT(w1.n == 0 && w2.n == 0); /* still at 1 */
    int64_t t0 = th_now_ms();
    int64_t left = -1;
    CU_ASSERT(hilock_latch_count_down(&left, l) == 0 && left == 0); /* another client */
    CU_ASSERT_FATAL(run_until(a, &w1, 1, 5000) && run_until(a, &w2, 1, 5000));
    CU_ASSERT(w1.rc == 0 && w2.rc == 0);
    CU_ASSERT(w1.at - t0 < 1000 && w2.at - t0 < 1000);
    CU_ASSERT(hilock_async_latch_await(a, l, 3, 0, on_done, &w1) == 0); /* open: at once */
    CU_ASSERT(run_until(a, &w1, 2, 5000) && w1.rc == 0);
    CU_ASSERT(hilock_async_latch_count_op(a, l, HILOCK_COUNT_GET, 0, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, 3, 5000) && r.rc == 0 && r.value == 0);
    hilock_latch_free(l);
    free_async(a);
}

/* Freeing the hilock_async completes a pending wait with HILOCK_ECLOSED. */
static void t_free_pending(void)
{
    hilock_async *a = new_async();
    hilock_latch *l = NULL;
    CU_ASSERT_FATAL(hilock_latch_new(&l, th_cl, "alatch-free") == 0);
    CU_ASSERT_FATAL(hilock_latch_try_set_count(NULL, l, 1) == 0);
    res w = {0};
    CU_ASSERT(hilock_async_latch_await(a, l, 1, -1, on_done, &w) == 0);
    run_for(a, 50);
    free_async(a);
    CU_ASSERT(w.n == 1 && w.rc == HILOCK_ECLOSED);
    th_redis_int(&th_srv, "DEL alatch-free");
    hilock_latch_free(l);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("non-blocking semaphores and latch", th_srv_client_init, th_srv_client_clean);
    CU_add_test(s, "semaphore: try-set, acquire, release, count operations", t_semaphore);
    CU_add_test(s, "bad input: clear codes, no callback; wrong type untouched", t_bad_input);
    CU_add_test(s, "waiter woken by the release message", t_wake_by_message);
    CU_add_test(s, "permits counted exactly across owners", t_exclusion);
    CU_add_test(s, "cancelled waits take nothing, leave no subscription", t_cancel);
    CU_add_test(s, "permit-expirable: ids, lease update, a lease that ends", t_permit_semaphore);
    CU_add_test(s, "latch: the last count-down wakes every waiter", t_latch);
    CU_add_test(s, "free with a wait pending: ECLOSED", t_free_pending);
    return th_cu_run();
}
