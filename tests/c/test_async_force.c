/*
 * The non-blocking API (hilock_async): a hold listens on its lock's own
 * channel, so a force unlock from another client is reported through the
 * lost callback and hilock_async_is_lost within a round trip, not at the
 * next renewal (the watchdog lease is 30 s here: a renewal every 10 s) nor
 * never (a fixed 30 s lease has no renewal). Every lock kind, watchdog and
 * fixed lease; the force unlock 300 ms after the grant (the subscription
 * confirmed) and right after it (before the confirmation can have been
 * read: the confirmation has the hold checked). A release afterwards
 * answers HILOCK_ENOTOWNER, a fair lock's too. Against a real
 * redis-server, through the epoll adapter.
 */
#include <CUnit/Basic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"
#include "lock_kinds.h"
#include "hilock/adapters/epoll.h"
#include "proxy.h"

#include "async_helpers.h"

enum { LEASE = 30000 };

static hilock_client *open_client(void)
{
    hilock_client *c = open_lease_client(th_srv.url, LEASE, 0);
    CU_ASSERT_FATAL(c != NULL);
    return c;
}

/* Hold a lock of kind (watchdog or a fixed lease) with hilock_async; after
 * held_ms another client force-unlocks it and acquires it at once (the
 * write side for a read-write lock: a second reader would share). The
 * holder is told through the callback and is_lost, long before any renewal. */
static void force_case(const char *label, int kind, int watchdog, int held_ms)
{
    char name[96];
    snprintf(name, sizeof name, "aforce-%s-%s-%d", label, watchdog ? "wd" : "fixed", held_ms);
    hilock_client *c = open_client(), *c2 = open_client();
    hilock_async *a = new_async();
    seen s = {0};
    hilock_async_set_lost_callback(a, on_lost, &s);
    hilock_rwlock *rw = NULL, *rw2 = NULL;
    hilock_lock *l = kind_lock_new(c, kind, name, &rw);
    /* the other client: force unlock, then acquire (exclusively) */
    hilock_lock *l2 = kind_lock_new(c2, kind_exclusive(kind), name, &rw2);

    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, watchdog ? HILOCK_LEASE_WATCHDOG : LEASE, on_done,
                                   &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT_FATAL(r.rc == 0);
    if (held_ms > 0)
        run_for(a, held_ms);
    CU_ASSERT_EQUAL(s.n, 0); /* nothing happened yet */
    CU_ASSERT_EQUAL(hilock_async_is_lost(a, l, 1), 0);

    int deleted = 0;
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_lock_force_unlock(&deleted, l2) == 0);
    CU_ASSERT_EQUAL(deleted, 1);
    int other = hilock_lock_acquire_tid(l2, 2, 0, HILOCK_LEASE_WATCHDOG);
    int64_t t_other = th_now_ms();
    CU_ASSERT_EQUAL(other, 0);
    int told = run_until_n(a, &s.n, 1, 3000);
    printf("\n  %s, %s lease, force unlock %d ms after the grant: holder told %lld ms after "
           "it (-1: not within 3000 ms), the other client acquired %lld ms after it",
           label, watchdog ? "watchdog" : "fixed", held_ms,
           told ? (long long)(s.at - t0) : -1LL, (long long)(t_other - t0));
    CU_ASSERT_FATAL(told);
    CU_ASSERT(s.lock == l && s.tid == 1);
    /* a round trip, not the next renewal (10 s) or never (fixed lease);
     * bounded loosely for loaded and instrumented runs */
    CU_ASSERT(s.at - t0 < 1000);
    CU_ASSERT(strstr(s.msg, "lost") != NULL);
    CU_ASSERT_EQUAL(hilock_async_is_lost(a, l, 1), 1);
    run_for(a, 50);
    CU_ASSERT_EQUAL(s.n, 1); /* once */

    /* the release says the hold is gone (a fair unlock would say
     * "released" on the missing key: the client knows better) */
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &rel) == 0);
    CU_ASSERT_FATAL(run_until(a, &rel, 1, 5000));
    CU_ASSERT_EQUAL(rel.rc, HILOCK_ENOTOWNER);
    /* the other client's hold was left alone */
    int held = 0;
    CU_ASSERT(hilock_lock_is_held_tid(&held, l2, 2) == 0 && held == 1);
    CU_ASSERT(hilock_lock_release_tid(l2, 2) == 0);
    /* nothing held: the holder no longer listens */
    char chan[160];
    kind_channel(chan, sizeof chan, kind, name);
    CU_ASSERT(run_until_numsub(a, chan, 0));
    kind_lock_free(l, rw);
    kind_lock_free(l2, rw2);
    free_async(a);
    hilock_client_close(c);
    hilock_client_close(c2);
}

#define CASES(kind, label)                                                                         \
    static void t_##label##_wd(void) { force_case(#label, kind, 1, 300); }                         \
    static void t_##label##_fixed(void) { force_case(#label, kind, 0, 300); }                      \
    static void t_##label##_wd_early(void) { force_case(#label, kind, 1, 0); }                     \
    static void t_##label##_fixed_early(void) { force_case(#label, kind, 0, 0); }
LOCK_KINDS(CASES)

/* The holder listens while it holds and no longer: a channel's one
 * subscription serves the holder and the waiters of the name; after the
 * release nothing is subscribed. */
static void t_listens_while_held(void)
{
    hilock_client *c = open_client();
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "aforce-listen") == 0);
    res r = {0}, w = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000) && r.rc == 0);
    CU_ASSERT(run_until_numsub(a, "redisson_lock__channel:{aforce-listen}", 1));
    /* a waiter of the same name on this client shares the subscription */
    CU_ASSERT(hilock_async_acquire(a, l, 2, 5000, HILOCK_LEASE_WATCHDOG, on_done, &w) == 0);
    run_for(a, 200);
    CU_ASSERT_EQUAL(numsub("redisson_lock__channel:{aforce-listen}"), 1);
    CU_ASSERT_EQUAL(w.n, 0);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &w, 1, 5000) && w.rc == 0); /* woken, holds */
    CU_ASSERT(rel.n == 1 && rel.rc == 0);
    CU_ASSERT_EQUAL(numsub("redisson_lock__channel:{aforce-listen}"), 1);
    CU_ASSERT(hilock_async_release(a, l, 2, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 2, 5000) && rel.rc == 0);
    CU_ASSERT(run_until_numsub(a, "redisson_lock__channel:{aforce-listen}", 0));
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
}

/* A fixed-lease hold never released stops listening when its lease ends
 * (it ended as asked: nothing to check, no loss reported), so a client
 * that lets its fixed leases run out keeps no subscription. */
static void t_fixed_lease_end_stops_listening(void)
{
    hilock_client *c = open_client();
    hilock_async *a = new_async();
    seen s = {0};
    hilock_async_set_lost_callback(a, on_lost, &s);
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "aforce-expire") == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 400, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000) && r.rc == 0);
    CU_ASSERT(run_until_numsub(a, "redisson_lock__channel:{aforce-expire}", 1));
    int64_t t0 = th_now_ms();
    CU_ASSERT(run_until_numsub(a, "redisson_lock__channel:{aforce-expire}", 0));
    printf("\n  fixed 400 ms lease run out: subscription gone %lld ms after it was seen",
           (long long)(th_now_ms() - t0));
    /* another client's hold and release there tell this one nothing */
    hilock_client *c2 = open_client();
    hilock_lock *l2 = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l2, c2, "aforce-expire") == 0);
    /* (the key may outlive the client's count of the lease by a few ms) */
    CU_ASSERT(hilock_lock_acquire_tid(l2, 2, 2000, HILOCK_LEASE_WATCHDOG) == 0);
    CU_ASSERT(hilock_lock_release_tid(l2, 2) == 0);
    run_for(a, 200);
    CU_ASSERT_EQUAL(s.n, 0);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 5000) && rel.rc == HILOCK_ENOTOWNER);
    hilock_lock_free(l2);
    hilock_client_close(c2);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
}

/* Faults of the subscription connection alone (DESIGN.md §6, issue 31 item
 * 4 per connection and direction): the holder's client goes through the
 * fault proxy and the fault hits only the connection that sent SUBSCRIBE,
 * while its command connection stays healthy (a query through it is
 * answered during the fault). Then another client force-unlocks the lock
 * and acquires it. The holder must be told (lost, or in doubt) within a
 * round trip of the force unlock (1000 ms, as above), not at the next
 * renewal (10 s away: 30 s watchdog lease) nor never (fixed lease).
 *
 * known: a case whose told_in_time is 0 today (docs/faults.md); its
 * assertion is turned round (a strict expected failure), so that the day
 * it is told in time the test fails and the case is made strict. */
typedef enum sub_fault {
    SUB_REQUESTS_LOST, /* the client's bytes on it dropped */
    SUB_REPLIES_LOST,  /* the server's bytes on it dropped (messages too) */
    SUB_ACCEPT_SILENT, /* reset; new connections accepted, never answered */
} sub_fault;

static void sub_fault_case(sub_fault f, int watchdog, int known)
{
    static const char *names[] = {"requests lost", "replies lost", "accepted then silent"};
    char name[96];
    snprintf(name, sizeof name, "aforce-sub-%d-%d", (int)f, watchdog);
    char chan[160];
    snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", name);
    th_proxy *p = th_proxy_start(th_srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_client *c = open_lease_client(th_proxy_url(p), LEASE, 0), *c2 = open_client();
    CU_ASSERT_FATAL(c != NULL);
    hilock_async *a = new_async();
    seen s = {0};
    hilock_async_set_lost_callback(a, on_lost, &s);
    hilock_lock *l = NULL, *l2 = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l2, c2, name) == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, watchdog ? HILOCK_LEASE_WATCHDOG : LEASE, on_done,
                                   &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000) && r.rc == 0);
    CU_ASSERT_FATAL(run_until_numsub(a, chan, 1)); /* listening */
    run_for(a, 200); /* and the subscription's confirmation read (not dropped below) */
    int hit = 0;
    if (f == SUB_ACCEPT_SILENT) {
        th_proxy_stall_new(p, 1);
        hit = th_proxy_reset_subscribers(p);
    } else {
        hit = th_proxy_silence_subscribers(p, f == SUB_REQUESTS_LOST, f == SUB_REPLIES_LOST);
    }
    CU_ASSERT_EQUAL(hit, 1); /* the one pub/sub connection, nothing else */
    run_for(a, 300);
    /* the command connection is healthy: a query through it is answered */
    res q = {0};
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_IS_HELD, 1, on_done, &q) == 0);
    CU_ASSERT(run_until(a, &q, 1, 1000) && q.rc == 0 && q.value == 1);
    CU_ASSERT_EQUAL(s.n, 0);

    int deleted = 0;
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_lock_force_unlock(&deleted, l2) == 0);
    CU_ASSERT_EQUAL(deleted, 1);
    int other = hilock_lock_acquire_tid(l2, 2, 0, HILOCK_LEASE_WATCHDOG);
    int64_t t_other = th_now_ms();
    CU_ASSERT_EQUAL(other, 0);
    run_until_n(a, &s.n, 1, 3000);
    int told_in_time = s.n && s.at - t0 < 1000;
    printf("\n  %s on the subscription connection alone, %s lease: holder told %lld ms after the "
           "force unlock (-1: not within 3000 ms; %s), the other client acquired %lld ms after "
           "it%s",
           names[f], watchdog ? "watchdog" : "fixed", s.n ? (long long)(s.at - t0) : -1LL,
           s.n ? s.msg : "never told", (long long)(t_other - t0),
           known ? "; known finding (docs/faults.md)" : "");
    if (known) {
        CU_ASSERT(!told_in_time); /* fails once fixed: make this case strict */
    } else {
        CU_ASSERT(told_in_time);
    }
    CU_ASSERT(hilock_lock_release_tid(l2, 2) == 0);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &rel) == 0);
    run_until(a, &rel, 1, 3000);
    hilock_lock_free(l);
    hilock_lock_free(l2);
    free_async(a);
    hilock_client_close(c);
    hilock_client_close(c2);
    th_proxy_stop(p);
}

static void t_sub_requests_lost(void) { sub_fault_case(SUB_REQUESTS_LOST, 1, 0); }
static void t_sub_replies_lost(void) { sub_fault_case(SUB_REPLIES_LOST, 1, 0); }
static void t_sub_replies_lost_fixed(void) { sub_fault_case(SUB_REPLIES_LOST, 0, 0); }
static void t_sub_accept_silent(void) { sub_fault_case(SUB_ACCEPT_SILENT, 1, 0); }

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("non-blocking API: force unlock told", th_srv_init, th_srv_clean);
#define ADD(kind, label)                                                                           \
    CU_add_test(s, #label ", watchdog lease, 300 ms after the grant", t_##label##_wd);             \
    CU_add_test(s, #label ", fixed lease, 300 ms after the grant", t_##label##_fixed);             \
    CU_add_test(s, #label ", watchdog lease, right after the grant", t_##label##_wd_early);        \
    CU_add_test(s, #label ", fixed lease, right after the grant", t_##label##_fixed_early);
    LOCK_KINDS(ADD)
    CU_add_test(s, "a holder listens while it holds, sharing the waiters' subscription",
                t_listens_while_held);
    CU_add_test(s, "a fixed lease that ran out stops listening", t_fixed_lease_end_stops_listening);
    CU_add_test(s, "subscription connection alone: requests lost", t_sub_requests_lost);
    CU_add_test(s, "subscription connection alone: replies lost", t_sub_replies_lost);
    CU_add_test(s, "subscription connection alone: replies lost, fixed lease",
                t_sub_replies_lost_fixed);
    CU_add_test(s, "subscription connection alone: accepted then silent",
                t_sub_accept_silent);
    return th_cu_run();
}
