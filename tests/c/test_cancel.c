/*
 * Cancellation of blocking acquires against a real redis-server:
 * hilock_lock_cancel / hilock_multilock_cancel from another thread end a
 * waiting acquire with HILOCK_ECANCELED, and over many cancelled waits on a
 * reentrant and a fair lock nothing is left behind (no hold by the waiter,
 * no fair-queue or timeout entry, no subscription), while the holder's hold
 * is untouched. The cancel is sent only once the waiter is seen really
 * waiting on the server (fair: its queue entry; reentrant: its
 * subscription), never after a sleep.
 */
#include <CUnit/Basic.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "hilock.h"


#define HOLDER_TID 1
#define WAITER_TID 2

static int rounds(void)
{
    return th_valgrind() ? 40 : 1000;
}

static void nap(void)
{
    struct timespec ts = {0, 200000L};
    nanosleep(&ts, NULL);
}

static long long q_int(redisContext *ctx, const char *fmt, const char *arg)
{
    redisReply *r = redisCommand(ctx, fmt, arg);
    long long v = -1000;
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    freeReplyObject(r);
    return v;
}

/* PUBSUB NUMSUB channel: the number of subscribers */
static long long numsub(redisContext *ctx, const char *channel)
{
    redisReply *r = redisCommand(ctx, "PUBSUB NUMSUB %s", channel);
    long long v = -1000;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
        v = r->element[1]->integer;
    freeReplyObject(r);
    return v;
}

typedef struct waiter {
    hilock_lock *lock;
    hilock_multilock *multi;
    int n;
    int64_t wait_ms;
    int *results;
    int done; /* atomic: acquires finished */
    int go;   /* atomic: acquires the main thread allowed to start */
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    for (int i = 0; i < w->n; i++) {
        while (__atomic_load_n(&w->go, __ATOMIC_ACQUIRE) <= i)
            nap();
        w->results[i] = w->multi
                            ? hilock_multilock_acquire_tid(w->multi, WAITER_TID, w->wait_ms, 0)
                            : hilock_lock_acquire_tid(w->lock, WAITER_TID, w->wait_ms, 60000);
        if (w->results[i] == 0) { /* the grant won the race: give it back */
            if (w->multi)
                hilock_multilock_release_tid(w->multi, WAITER_TID);
            else
                hilock_lock_release_tid(w->lock, WAITER_TID);
        }
        __atomic_store_n(&w->done, i + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* Wait (bounded) until f(ctx, key) == want. */
static int until_eq(redisContext *ctx, long long (*f)(redisContext *, const char *),
                    const char *key, long long want)
{
    int64_t end = th_now_ms() + 5000;
    while (th_now_ms() < end) {
        if (f(ctx, key) == want)
            return 1;
        nap();
    }
    return 0;
}

static long long llen(redisContext *ctx, const char *key)
{
    return q_int(ctx, "LLEN %s", key);
}

static void cancel_many(int fair)
{
    const char *name = fair ? "cancel-fair" : "cancel-reentrant";
    hilock_lock *l = NULL, *hl = NULL;
    CU_ASSERT_FATAL((fair ? hilock_fair_lock_new(&l, th_cl, name) : hilock_lock_new(&l, th_cl, name)) ==
                    0);
    /* the holder on a client of its own: a hold listens on its lock's
     * channel, so the waiter's subscription is counted apart from it */
    hilock_client *hc = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(hc);
    CU_ASSERT_FATAL((fair ? hilock_fair_lock_new(&hl, hc, name) : hilock_lock_new(&hl, hc, name)) ==
                    0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(hl, HOLDER_TID, 0, 600000) == 0);
    redisContext *ctx = th_redis_connect(&th_srv);
    CU_ASSERT_FATAL(ctx != NULL);
    char queue[128], timeouts[128], channel[256], owner[128];
    snprintf(queue, sizeof queue, "redisson_lock_queue:{%s}", name);
    snprintf(timeouts, sizeof timeouts, "redisson_lock_timeout:{%s}", name);
    snprintf(owner, sizeof owner, "%s:%d", hilock_client_id(th_cl), WAITER_TID);
    /* the waiter's subscribers: the holder's client listens on the lock's
     * channel all along (not on a fair waiter's own) */
    long long holder_subs = fair ? 0 : 1;
    if (fair)
        snprintf(channel, sizeof channel, "redisson_lock__channel:{%s}:%s", name, owner);
    else
        snprintf(channel, sizeof channel, "redisson_lock__channel:{%s}", name);

    int n = rounds();
    waiter w = {l, NULL, n, fair ? 60000 : -1, calloc((size_t)n, sizeof(int)), 0, 0};
    pthread_t th;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, waiter_main, &w) == 0);
    int cancelled_ok = 0, seen_waiting = 0;
    for (int i = 0; i < n; i++) {
        __atomic_store_n(&w.go, i + 1, __ATOMIC_RELEASE);
        /* really waiting on the server: queued (fair) or subscribed */
        if (fair ? until_eq(ctx, llen, queue, 1) : until_eq(ctx, numsub, channel, holder_subs + 1))
            seen_waiting++;
        int found = 0;
        int64_t end = th_now_ms() + 5000;
        while (!found && th_now_ms() < end) {
            CU_ASSERT(hilock_lock_cancel(&found, l, WAITER_TID) == 0);
            if (!found)
                nap();
        }
        while (__atomic_load_n(&w.done, __ATOMIC_ACQUIRE) <= i)
            nap();
        cancelled_ok += w.results[i] == HILOCK_ECANCELED;
        /* gone from the server before the next round looks at it */
        CU_ASSERT(until_eq(ctx, numsub, channel, holder_subs));
    }
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(seen_waiting, n);
    CU_ASSERT_EQUAL(cancelled_ok, n);
    /* nothing left behind: the holder alone, no queue, no deadlines */
    CU_ASSERT_EQUAL(q_int(ctx, "HLEN %s", name), 1);
    CU_ASSERT_EQUAL(q_int(ctx, "EXISTS %s", queue), 0);
    CU_ASSERT_EQUAL(q_int(ctx, "EXISTS %s", timeouts), 0);
    int held = 1;
    CU_ASSERT(hilock_lock_is_held_tid(&held, l, WAITER_TID) == 0 && held == 0);
    CU_ASSERT(hilock_lock_is_held_tid(&held, hl, HOLDER_TID) == 0 && held == 1);
    CU_ASSERT_STRING_EQUAL(hilock_strerror(HILOCK_ECANCELED), "acquire cancelled");
    /* a later waiter is next in line at once */
    CU_ASSERT(hilock_lock_release_tid(hl, HOLDER_TID) == 0);
    CU_ASSERT(hilock_lock_acquire_tid(l, 3, 1000, 5000) == 0);
    CU_ASSERT(hilock_lock_release_tid(l, 3) == 0);
    CU_ASSERT_EQUAL(q_int(ctx, "EXISTS %s", name), 0);
    free(w.results);
    redisFree(ctx);
    hilock_lock_free(l);
    hilock_lock_free(hl);
    hilock_client_close(hc);
}

static void t_cancel_reentrant(void)
{
    cancel_many(0);
}

static void t_cancel_fair(void)
{
    cancel_many(1);
}

static void t_cancel_nothing_pending(void)
{
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, th_cl, "cancel-idle") == 0);
    int found = 7;
    CU_ASSERT(hilock_lock_cancel(&found, l, WAITER_TID) == 0);
    CU_ASSERT_EQUAL(found, 0);
    CU_ASSERT(hilock_lock_cancel(NULL, l, WAITER_TID) == 0);
    CU_ASSERT(hilock_lock_cancel(&found, NULL, WAITER_TID) == HILOCK_EINVAL);
    CU_ASSERT(hilock_multilock_cancel(&found, NULL, WAITER_TID) == HILOCK_EINVAL);
    /* nothing is remembered: a later acquire is not cancelled */
    CU_ASSERT(hilock_lock_acquire_tid(l, WAITER_TID, 1000, 5000) == 0);
    CU_ASSERT(hilock_lock_release_tid(l, WAITER_TID) == 0);
    hilock_lock_free(l);
}

static void t_cancel_multilock(void)
{
    hilock_lock *a = NULL, *b = NULL, *c = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&a, th_cl, "cancel-ml-a") == 0);
    CU_ASSERT_FATAL(hilock_fair_lock_new(&b, th_cl, "cancel-ml-b") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&c, th_cl, "cancel-ml-c") == 0);
    hilock_lock *all[3] = {a, b, c};
    hilock_multilock *m = NULL, *r = NULL;
    CU_ASSERT_FATAL(hilock_multilock_new(&m, all, 2) == 0);  /* a, b */
    CU_ASSERT_FATAL(hilock_redlock_new(&r, all, 3) == 0);    /* quorum 2 of 3 */
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(a, HOLDER_TID, 0, 600000) == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(c, HOLDER_TID, 0, 600000) == 0);
    redisContext *ctx = th_redis_connect(&th_srv);
    CU_ASSERT_FATAL(ctx != NULL);
    hilock_multilock *which[2] = {m, r};
    for (int k = 0; k < 2; k++) {
        int n = 20;
        waiter w = {NULL, which[k], n, -1, calloc((size_t)n, sizeof(int)), 0, 0};
        pthread_t th;
        CU_ASSERT_FATAL(pthread_create(&th, NULL, waiter_main, &w) == 0);
        int ok = 0;
        for (int i = 0; i < n; i++) {
            __atomic_store_n(&w.go, i + 1, __ATOMIC_RELEASE);
            int found = 0;
            int64_t end = th_now_ms() + 5000;
            while (!found && th_now_ms() < end) {
                CU_ASSERT(hilock_multilock_cancel(&found, which[k], WAITER_TID) == 0);
                if (!found)
                    nap();
            }
            while (__atomic_load_n(&w.done, __ATOMIC_ACQUIRE) <= i)
                nap();
            ok += w.results[i] == HILOCK_ECANCELED;
        }
        pthread_join(th, NULL);
        CU_ASSERT_EQUAL(ok, n);
        free(w.results);
        int held = 1;
        CU_ASSERT(hilock_multilock_is_held_tid(&held, which[k], WAITER_TID) == 0 && !held);
        /* member b was taken and given back each time */
        CU_ASSERT_EQUAL(q_int(ctx, "EXISTS %s", "cancel-ml-b"), 0);
        CU_ASSERT_EQUAL(q_int(ctx, "EXISTS %s", "redisson_lock_queue:{cancel-ml-b}"), 0);
        CU_ASSERT_EQUAL(q_int(ctx, "HLEN %s", "cancel-ml-a"), 1);
    }
    CU_ASSERT(hilock_lock_release_tid(a, HOLDER_TID) == 0);
    CU_ASSERT(hilock_lock_release_tid(c, HOLDER_TID) == 0);
    redisFree(ctx);
    hilock_multilock_free(m);
    hilock_multilock_free(r);
    hilock_lock_free(a);
    hilock_lock_free(b);
    hilock_lock_free(c);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("cancel", th_srv_client_init, th_srv_client_clean);
    CU_add_test(s, "cancel with nothing pending; NULL handles", t_cancel_nothing_pending);
    CU_add_test(s, "1000 cancelled waits on a reentrant lock leave nothing",
                t_cancel_reentrant);
    CU_add_test(s, "1000 cancelled waits on a fair lock leave nothing", t_cancel_fair);
    CU_add_test(s, "multi-lock and Redlock waits cancelled", t_cancel_multilock);
    return th_cu_run();
}
