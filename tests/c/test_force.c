/*
 * The blocking API: a hold taken with a fixed lease (no watchdog) listens on
 * its lock's own channel for its lease, so a force unlock from another
 * client is reported through the lost callback and hilock_lock_is_lost
 * within a round trip; without listening it is never reported (a fixed
 * lease has no renewal). Every lock kind; the force unlock 300 ms after the
 * grant (the subscription confirmed) and right after it (before the
 * subscription can have taken effect: its confirmation has the hold
 * checked). A release afterwards answers HILOCK_ENOTOWNER, a fair lock's
 * too, and nothing stays subscribed. A fixed hold stops listening when its
 * lease ends or its last count is released. tests/c/test_async_force.c is
 * the same for hilock_async; test_watchdog.c's "force unlock heard" cases
 * cover watchdog holds. Against a real redis-server.
 */
#include <CUnit/Basic.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"
#include "lock_kinds.h"

enum { LEASE = 30000 };

typedef struct seen {
    pthread_mutex_t mu;
    int n;
    hilock_lock *lock;
    uint64_t tid;
    int64_t at;
} seen;

static void on_lost(hilock_lock *l, uint64_t tid, void *payload)
{
    seen *s = payload;
    pthread_mutex_lock(&s->mu);
    s->n++;
    s->lock = l;
    s->tid = tid;
    s->at = th_now_ms();
    pthread_mutex_unlock(&s->mu);
}

static int seen_n(const seen *s)
{
    seen *m = (seen *)s;
    pthread_mutex_lock(&m->mu);
    int n = m->n;
    pthread_mutex_unlock(&m->mu);
    return n;
}

static int told(void *arg)
{
    return seen_n(arg) > 0;
}

static hilock_client *open_client(void)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = LEASE;
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, th_srv.url, &o, NULL, 0) == 0);
    return c;
}

/* Hold a lock of kind with a fixed 30 s lease; after held_ms another client
 * force-unlocks it and acquires it at once (the write side for a read-write
 * lock: a second reader would share). The holder is told through the
 * callback and is_lost. */
static void force_case(const char *label, int kind, int held_ms)
{
    char name[96], chan[160];
    snprintf(name, sizeof name, "bforce-%s-%d", label, held_ms);
    kind_channel(chan, sizeof chan, kind, name);
    hilock_client *c = open_client(), *c2 = open_client();
    hilock_rwlock *rw = NULL, *rw2 = NULL;
    hilock_lock *l = kind_lock_new(c, kind, name, &rw);
    hilock_lock *l2 = kind_lock_new(c2, kind_exclusive(kind), name, &rw2);
    seen s = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, 0};
    hilock_lock_set_lost_callback(l, on_lost, &s);

    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, 1, 0, LEASE) == 0);
    if (held_ms > 0) {
        th_sleep_ms(held_ms);
        CU_ASSERT_EQUAL(th_redis_numsub(&th_srv, chan), 1); /* the holder listens */
    }
    CU_ASSERT_EQUAL(seen_n(&s), 0); /* nothing happened yet */
    CU_ASSERT_EQUAL(hilock_lock_is_lost_tid(l, 1), 0);

    int deleted = 0;
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_lock_force_unlock(&deleted, l2) == 0);
    CU_ASSERT_EQUAL(deleted, 1);
    int other = hilock_lock_acquire_tid(l2, 2, 0, HILOCK_LEASE_WATCHDOG);
    int64_t t_other = th_now_ms();
    CU_ASSERT_EQUAL(other, 0);
    int ok = th_wait_for(told, &s, 3000);
    int64_t at = s.at;
    printf("\n  %s, fixed lease, force unlock %d ms after the grant: holder told %lld ms after "
           "it (-1: not within 3000 ms), the other client acquired %lld ms after it",
           label, held_ms, ok ? (long long)(at - t0) : -1LL, (long long)(t_other - t0));
    CU_ASSERT_FATAL(ok);
    CU_ASSERT(s.lock == l && s.tid == 1);
    /* a round trip, not never; bounded loosely for loaded and instrumented
     * runs (the figures above are what to read) */
    CU_ASSERT(at - t0 < 1000);
    CU_ASSERT_EQUAL(hilock_lock_is_lost_tid(l, 1), 1);
    CU_ASSERT(strstr(hilock_lock_errmsg(l), "lost") != NULL);
    th_sleep_ms(50);
    CU_ASSERT_EQUAL(seen_n(&s), 1); /* once */

    /* the release says the hold is gone (a fair unlock would say "released"
     * on the missing key: the client knows better) */
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), HILOCK_ENOTOWNER);
    int held = 0;
    CU_ASSERT(hilock_lock_is_held_tid(&held, l2, 2) == 0 && held == 1);
    CU_ASSERT(hilock_lock_release_tid(l2, 2) == 0);
    /* nothing held: nobody listens (c2's watchdog hold listened until its
     * release) */
    CU_ASSERT(th_wait_numsub(&th_srv, chan, 0, 5000));
    kind_lock_free(l, rw);
    kind_lock_free(l2, rw2);
    hilock_client_close(c);
    hilock_client_close(c2);
}

#define CASES(kind, label)                                                                         \
    static void t_##label(void) { force_case(#label, kind, 300); }                                 \
    static void t_##label##_early(void) { force_case(#label, kind, 0); }
LOCK_KINDS(CASES)

/* A fixed-lease hold never released stops listening when its lease ends (it
 * ended as asked: nothing to check, no loss reported). */
static void t_lease_end_stops_listening(void)
{
    const char *chan = "redisson_lock__channel:{bforce-expire}";
    hilock_client *c = open_client();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "bforce-expire") == 0);
    seen s = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, 0};
    hilock_lock_set_lost_callback(l, on_lost, &s);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, 1, 0, 400) == 0);
    CU_ASSERT(th_wait_numsub(&th_srv, chan, 1, 3000));
    int64_t t0 = th_now_ms();
    CU_ASSERT(th_wait_numsub(&th_srv, chan, 0, 5000));
    printf("\n  fixed 400 ms lease run out: subscription gone %lld ms after it was seen",
           (long long)(th_now_ms() - t0));
    /* another client's hold and release there tell this one nothing */
    hilock_client *c2 = open_client();
    hilock_lock *l2 = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l2, c2, "bforce-expire") == 0);
    CU_ASSERT(hilock_lock_acquire_tid(l2, 2, 2000, HILOCK_LEASE_WATCHDOG) == 0);
    CU_ASSERT(hilock_lock_release_tid(l2, 2) == 0);
    th_sleep_ms(200);
    CU_ASSERT_EQUAL(seen_n(&s), 0);
    CU_ASSERT_EQUAL(hilock_lock_is_lost_tid(l, 1), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), HILOCK_ENOTOWNER);
    hilock_lock_free(l2);
    hilock_client_close(c2);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* A reentrant fixed hold counted twice: a partial release keeps it
 * listening (the lock is still held, its lease applied again), so a force
 * unlock after it is told; the last release ends the listening. */
static void t_partial_release(void)
{
    const char *chan = "redisson_lock__channel:{bforce-partial}";
    hilock_client *c = open_client(), *c2 = open_client();
    hilock_lock *l = NULL, *l2 = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "bforce-partial") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l2, c2, "bforce-partial") == 0);
    seen s = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, 0};
    hilock_lock_set_lost_callback(l, on_lost, &s);

    /* twice, released twice: listening until the last release, no loss */
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, 1, 0, LEASE) == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, 1, 0, LEASE) == 0);
    CU_ASSERT(th_wait_numsub(&th_srv, chan, 1, 3000));
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), 0);
    th_sleep_ms(100);
    CU_ASSERT_EQUAL(th_redis_numsub(&th_srv, chan), 1);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), 0);
    CU_ASSERT(th_wait_numsub(&th_srv, chan, 0, 3000));
    CU_ASSERT_EQUAL(seen_n(&s), 0);

    /* twice, released once, then forced away: told */
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, 1, 0, LEASE) == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, 1, 0, LEASE) == 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), 0);
    CU_ASSERT(th_wait_numsub(&th_srv, chan, 1, 3000));
    int deleted = 0;
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_lock_force_unlock(&deleted, l2) == 0 && deleted == 1);
    int ok = th_wait_for(told, &s, 3000);
    printf("\n  count 2, one released, then forced away: told %lld ms after (-1: not within "
           "3000 ms)",
           ok ? (long long)(s.at - t0) : -1LL);
    CU_ASSERT(ok);
    CU_ASSERT_EQUAL(hilock_lock_is_lost_tid(l, 1), 1);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), HILOCK_ENOTOWNER);
    CU_ASSERT(th_wait_numsub(&th_srv, chan, 0, 3000));
    hilock_lock_free(l);
    hilock_lock_free(l2);
    hilock_client_close(c);
    hilock_client_close(c2);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("blocking API: a fixed-lease hold is told of a force unlock",
                               th_srv_init, th_srv_clean);
#define ADD(kind, label)                                                                           \
    CU_add_test(s, #label ", 300 ms after the grant", t_##label);                                  \
    CU_add_test(s, #label ", right after the grant", t_##label##_early);
    LOCK_KINDS(ADD)
    CU_add_test(s, "a fixed lease that ran out stops listening", t_lease_end_stops_listening);
    CU_add_test(s, "a partial release keeps listening, the last one ends it", t_partial_release);
    return th_cu_run();
}
