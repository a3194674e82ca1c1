/*
 * The non-blocking API (hilock_async) and acquire attempts that may have
 * been granted and are not settled (the session's rule, hl_unsettled_*):
 * the owner's next acquire of that lock settles such an attempt first, so
 * that it neither re-enters a grant nobody accounts for (the watchdog would
 * renew it for good) nor is overtaken by a late copy of the attempt (which
 * would apply its own shorter lease to the new hold). Against a real
 * redis-server through the fault proxy (tests/c/proxy.c), with the epoll
 * adapter; every wait is bounded.
 */
#include <CUnit/Basic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"
#include "hilock/adapters/epoll.h"
#include "proxy.h"

#include "async_helpers.h"

/* the command timeout: 300 ms, 1 s under valgrind (its connects and
 * replies are slower); the faults are scaled from it */
static int cmd_timeout(void)
{
    return th_valgrind() ? 1000 : 300;
}

static int seen_lost;

static void count_lost(hilock_async *a, hilock_lock *lock, uint64_t tid, void *payload)
{
    (void)a;
    (void)lock;
    (void)tid;
    (void)payload;
    seen_lost++;
}

static hilock_client *open_client(const char *url)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = 30000;
    o.command_timeout_ms = cmd_timeout();
    o.connect_timeout_ms = cmd_timeout();
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, url, &o, NULL, 0) == 0);
    return c;
}

/* An acquire whose reply never comes (the proxy drops every reply while
 * it is out): HILOCK_ECONN after the command timeout (300 ms); the server granted
 * it. The same thread's next acquire, with replies flowing again, must
 * hold once: count 1, and its release must leave nothing. Before the fix
 * it re-entered the orphan grant (count 2) and its release left count 1,
 * renewed by the watchdog from then on (the simulator's renewed-orphan). */
static void t_orphan_grant_not_reentered(void)
{
    const char *name = "aunsettled-orphan";
    th_proxy *p = th_proxy_start(th_srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_client *c = open_client(th_proxy_url(p));
    char owner[128];
    CU_ASSERT_FATAL(hilock_client_owner(c, 7, owner, sizeof owner) == 0);
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    res r = {0};
    int n = 0;
    /* scripts loaded, connection open */
    CU_ASSERT(hilock_async_acquire(a, l, 7, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
    CU_ASSERT(hilock_async_release(a, l, 7, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);

    th_proxy_silence(p, 0, 1); /* replies lost: the attempt runs, nobody hears */
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_async_acquire(a, l, 7, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    int first_rc = (int)r.rc;
    int64_t first_at = th_now_ms() - t0;
    long long on_server = th_redis_int(&th_srv, "HGET %s %s", name, owner);
    th_proxy_silence(p, 0, 0);
    CU_ASSERT_EQUAL(first_rc, HILOCK_ECONN);
    CU_ASSERT_EQUAL(on_server, 1); /* granted there */

    CU_ASSERT(hilock_async_acquire(a, l, 7, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    int next_rc = r.rc;
    int64_t next_value = r.value;
    long long count = th_redis_int(&th_srv, "HGET %s %s", name, owner);
    CU_ASSERT(hilock_async_release(a, l, 7, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    int rel_rc = r.rc;
    int64_t remaining = r.value;
    run_for(a, 200);
    long long left = th_redis_int(&th_srv, "EXISTS %s", name);
    printf("\n  acquire with replies lost: rc %d after %lld ms (count on the server %lld); "
           "next acquire: rc %d, value %lld, count %lld; its release: rc %d, remaining %lld, "
           "key left %lld\n",
           first_rc, (long long)first_at, on_server, next_rc, (long long)next_value, count,
           rel_rc, (long long)remaining, left);
    CU_ASSERT_EQUAL(next_rc, 0);
    CU_ASSERT_EQUAL(next_value, 1);
    CU_ASSERT_EQUAL(count, 1);
    CU_ASSERT_EQUAL(rel_rc, 0);
    CU_ASSERT_EQUAL(remaining, 0);
    CU_ASSERT_EQUAL(left, 0);
    th_redis_int(&th_srv, "DEL %s", name);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
    th_proxy_stop(p);
}

/* An acquire with a short fixed lease (400 ms) held back on its way to the
 * server (5 command timeouts: 1.5 s): HILOCK_ECONN after the command
 * timeout. The same thread
 * then takes the lock with the watchdog (30 s lease) and the held copy
 * reaches the server later. That copy must change nothing: after its lease
 * would have run out, the owner still holds the lock and another client
 * cannot take it. Before the fix the copy re-entered the new hold and set
 * its 400 ms lease; the other client was granted while the owner was told
 * nothing (the simulator's late-acquire-copy). */
static void t_late_copy_leaves_later_hold_alone(void)
{
    enum { SHORT_LEASE = 400 };
    const int HELD = 5 * cmd_timeout();
    const char *name = "aunsettled-late";
    th_proxy *p = th_proxy_start(th_srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_client *c = open_client(th_proxy_url(p));
    hilock_client *c2 = open_client(th_srv.url);
    char owner[128];
    CU_ASSERT_FATAL(hilock_client_owner(c, 8, owner, sizeof owner) == 0);
    hilock_async *a = new_async();
    hilock_lock *l = NULL, *other = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&other, c2, name) == 0);
    seen_lost = 0;
    hilock_async_set_lost_callback(a, count_lost, NULL);
    res r = {0};
    int n = 0;
    CU_ASSERT(hilock_async_acquire(a, l, 8, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
    CU_ASSERT(hilock_async_release(a, l, 8, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);

    th_proxy_hold_request(p, "hilock_acquire_latch", HELD);
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_async_acquire(a, l, 8, 0, SHORT_LEASE, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ECONN);
    int64_t first_at = th_now_ms() - t0;
    CU_ASSERT(hilock_async_acquire(a, l, 8, 3000, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 10000));
    int held_rc = r.rc;
    int64_t held_at = th_now_ms() - t0;
    CU_ASSERT_EQUAL_FATAL(held_rc, 0);
    /* the held copy reaches the server; then its lease would run out */
    int64_t end = th_now_ms() + HELD + 5000;
    while (th_proxy_fired(p) < 1 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 20);
    int64_t late_at = th_now_ms() - t0;
    CU_ASSERT_FATAL(th_proxy_fired(p) == 1);
    run_for(a, SHORT_LEASE + 300);
    long long count = th_redis_int(&th_srv, "HGET %s %s", name, owner);
    long long pttl = th_redis_int(&th_srv, "PTTL %s", name);
    int64_t other_at = th_now_ms() - t0;
    int other_rc = hilock_lock_acquire(other, 0, 30000);
    int told = seen_lost;
    printf("\n  acquire (lease %d ms) held back: rc ECONN after %lld ms; the owner held it again "
           "at %lld ms; the held copy delivered at %lld ms; at %lld ms: count %lld, pttl %lld, "
           "another client's acquire %d (%s), owner told lost %d times\n",
           SHORT_LEASE, (long long)first_at, (long long)held_at, (long long)late_at,
           (long long)other_at, count, pttl, other_rc,
           other_rc == 0 ? "GRANTED while the owner holds it" : "refused", told);
    CU_ASSERT_NOT_EQUAL(other_rc, 0);
    CU_ASSERT_EQUAL(count, 1);
    CU_ASSERT(pttl > SHORT_LEASE);
    if (other_rc == 0)
        hilock_lock_release(other);
    CU_ASSERT(hilock_async_release(a, l, 8, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, ++n, 5000));
    CU_ASSERT_EQUAL(r.rc, other_rc == 0 ? HILOCK_ENOTOWNER : 0);
    run_for(a, 200);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS %s", name), 0);
    th_redis_int(&th_srv, "DEL %s", name);
    hilock_lock_free(l);
    hilock_lock_free(other);
    free_async(a);
    hilock_client_close(c);
    hilock_client_close(c2);
    th_proxy_stop(p);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("non-blocking API: unsettled acquires", th_srv_init, th_srv_clean);
    CU_add_test(s, "a grant whose reply was lost is not re-entered", t_orphan_grant_not_reentered);
    CU_add_test(s, "a late copy of a timed-out acquire leaves the owner's later hold alone",
                t_late_copy_leaves_later_hold_alone);
    return th_cu_run();
}
