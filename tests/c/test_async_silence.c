/*
 * The non-blocking API (hilock_async) under the faults of DESIGN.md §6 that
 * leave a holder unsure (issue 31 item 4 (a), (b), (e), (f)): a watchdog hold
 * whose link to a real redis-server goes through the C tests' fault proxy
 * (proxy.h), while another client talks to the server directly.
 *
 * - half-dead: the live connections drop every byte both ways and new
 *   connections are accepted, then never answered (connect succeeds, the
 *   handshake hangs); a reentrant, a fair and a fenced lock;
 * - requests lost / replies lost: one direction dropped (replies lost: the
 *   renewals may still reach the server and keep the lock alive there);
 * - an outage longer than the lease: the server SIGSTOPped; the proxy
 *   resetting every connection and refusing new ones;
 * - the application's loop blocked past the lease (a renewal due meanwhile).
 *
 * - replica_ack on, the master's replica SIGSTOPped: renewals the master
 *   answers but no replica takes.
 *
 * In each, the holder is told (lost callback, "in doubt" or lost) before the
 * other client's acquire succeeds. The loop and the other client's tries run
 * in this one thread, one after the other, so the order seen is the order
 * things happened. Generous bounds; the times are printed.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"
#include "hilock/adapters/epoll.h"
#include "proxy.h"

#include "async_helpers.h"

/* Renewals every 666 ms, "in doubt" 1600 ms after the last confirmed one;
 * command and connect timeouts of lease/3, as tests/faults/test_silence.py:
 * a renewal's I/O may be stuck for a whole period. */
enum { LEASE = 2000, IO_TIMEOUT = 700 };

static hilock_client *open_url(const char *url, int64_t timeout_ms)
{
    return open_lease_client(url, LEASE, timeout_ms);
}

/* Run the loop until the watchdog renewed the key once after its grant (its
 * PTTL went back up), so that the fault starts right after a renewal. */
static int run_until_renewed(hilock_async *a, const char *name)
{
    int64_t end = th_now_ms() + 3 * LEASE;
    int ran_down = 0;
    while (th_now_ms() < end) {
        hilock_epoll_run_once(&ep, a, 10);
        long long pttl = th_redis_int(&th_srv, "PTTL %s", name);
        if (pttl < LEASE - 300)
            ran_down = 1;
        else if (ran_down && pttl > LEASE - 150)
            return 1;
    }
    return 0;
}

typedef enum fault {
    HALF_DEAD,
    REQUESTS_LOST,
    REPLIES_LOST,
    SERVER_STOPPED, /* SIGSTOP for LEASE + 1000 ms */
    PROXY_REFUSING, /* live connections reset, new ones refused */
} fault;

static const char *fault_name(fault f)
{
    static const char *names[] = {"half-dead", "requests lost", "replies lost",
                                  "server stopped past the lease", "proxy refusing"};
    return names[f];
}

typedef int (*lock_new_fn)(hilock_lock **out, hilock_client *c, const char *name);

/* f on the link of a watchdog hold of name, made by make (the other client
 * makes the same kind). */
static void scenario_of(fault f, const char *name, lock_new_fn make, const char *kind)
{
    th_proxy *p = th_proxy_start(th_srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_client *c = open_url(th_proxy_url(p), IO_TIMEOUT);
    hilock_client *o = open_url(th_srv.url, 1000);
    CU_ASSERT_FATAL(c != NULL && o != NULL);
    hilock_async *a = new_async();
    seen s = {0};
    hilock_async_set_lost_callback(a, on_lost, &s);
    hilock_lock *l = NULL, *ol = NULL;
    CU_ASSERT_FATAL(make(&l, c, name) == 0);
    CU_ASSERT_FATAL(make(&ol, o, name) == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000) && r.rc == 0);
    CU_ASSERT_FATAL(run_until_renewed(a, name));
    CU_ASSERT_EQUAL(s.n, 0);

    int64_t t0 = th_now_ms(), resume_at = -1;
    switch (f) {
    case HALF_DEAD:
        th_proxy_stall_new(p, 1);
        th_proxy_silence(p, 1, 1);
        break;
    case REQUESTS_LOST:
        th_proxy_silence(p, 1, 0);
        break;
    case REPLIES_LOST:
        th_proxy_silence(p, 0, 1);
        break;
    case SERVER_STOPPED:
        th_redis_pause(&th_srv);
        resume_at = t0 + LEASE + 1000;
        break;
    case PROXY_REFUSING:
        th_proxy_refuse(p, 1);
        th_proxy_reset(p);
        break;
    }
    /* the loop, and between its turns the other client's try (direct to the
     * server; not while the server is stopped, where it would block the
     * loop for its command timeout) */
    int64_t got_at = -1;
    while (th_now_ms() - t0 < 3 * LEASE && (got_at < 0 || !s.n)) {
        hilock_epoll_run_once(&ep, a, 10);
        if (resume_at >= 0 && th_now_ms() >= resume_at) {
            th_redis_resume(&th_srv);
            resume_at = -1;
        }
        if (got_at < 0 && resume_at < 0 && hilock_lock_acquire(ol, 0, 30000) == 0)
            got_at = th_now_ms();
    }
    if (resume_at >= 0)
        th_redis_resume(&th_srv);
    th_proxy_stall_new(p, 0);
    th_proxy_silence(p, 0, 0);
    th_proxy_refuse(p, 0);
    printf("\n  %s (%s): holder told after %lld ms (%s); other client acquired after %lld ms",
           fault_name(f), kind, s.n ? (long long)(s.at - t0) : -1LL, s.n ? s.msg : "never told",
           got_at >= 0 ? (long long)(got_at - t0) : -1LL);
    CU_ASSERT(s.n >= 1);
    CU_ASSERT_EQUAL(hilock_async_is_lost(a, l, 1), s.n >= 1);
    if (f == REPLIES_LOST && got_at < 0) {
        /* the renewals reached the server: it is still the holder's there,
         * and the holder was told it is in doubt */
        CU_ASSERT(th_redis_int(&th_srv, "PTTL %s", name) > 0);
    } else {
        CU_ASSERT(got_at >= 0);
        CU_ASSERT(s.n >= 1 && s.at <= got_at); /* never two owners believing */
    }
    if (s.n)
        CU_ASSERT(strstr(s.msg, "in doubt") != NULL || strstr(s.msg, "lost") != NULL);
    if (got_at >= 0)
        CU_ASSERT_EQUAL(hilock_lock_release(ol), 0);
    res rel = {0}; /* the holder's release ends, whatever it finds */
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 3 * LEASE));
    th_redis_int(&th_srv, "DEL %s", name);
    hilock_lock_free(l);
    hilock_lock_free(ol);
    free_async(a);
    hilock_client_close(c);
    hilock_client_close(o);
    th_proxy_stop(p);
}

static void scenario(fault f, const char *name)
{
    scenario_of(f, name, hilock_lock_new, "reentrant");
}

static void t_half_dead(void) { scenario(HALF_DEAD, "as-half-dead"); }
static void t_half_dead_fair(void)
{
    scenario_of(HALF_DEAD, "as-half-dead-fair", hilock_fair_lock_new, "fair");
}
static void t_half_dead_fenced(void)
{
    scenario_of(HALF_DEAD, "as-half-dead-fenced", hilock_fenced_lock_new, "fenced");
}
static void t_requests_lost(void) { scenario(REQUESTS_LOST, "as-req-lost"); }
static void t_replies_lost(void) { scenario(REPLIES_LOST, "as-rep-lost"); }
static void t_server_stopped(void) { scenario(SERVER_STOPPED, "as-stopped"); }
static void t_proxy_refusing(void) { scenario(PROXY_REFUSING, "as-refusing"); }

/* The application does not call into the loop for longer than the lease (a
 * renewal falls due, then the lease runs out on the server, and another
 * client takes the lock meanwhile). When it comes back, it must not be told
 * it holds the lock: hilock_async_is_lost says so at once, before the loop
 * has run, and the lost callback comes in the first call into the loop. */
static void t_loop_blocked_past_lease(void)
{
    const char *name = "as-blocked";
    hilock_client *c = open_url(th_srv.url, IO_TIMEOUT);
    hilock_client *o = open_url(th_srv.url, 1000);
    CU_ASSERT_FATAL(c != NULL && o != NULL);
    hilock_async *a = new_async();
    seen s = {0};
    hilock_async_set_lost_callback(a, on_lost, &s);
    hilock_lock *l = NULL, *ol = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&ol, o, name) == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000) && r.rc == 0);
    CU_ASSERT_FATAL(run_until_renewed(a, name));
    int64_t t0 = th_now_ms();
    /* blocked: no call into the loop; the other client waits for the lock */
    int orc = hilock_lock_acquire(ol, 3 * LEASE, 30000);
    int64_t got_at = th_now_ms();
    int lost_before_loop = hilock_async_is_lost(a, l, 1);
    hilock_epoll_run_once(&ep, a, 0); /* the first call into the loop */
    int64_t back_at = th_now_ms();
    int told_first_call = s.n;
    run_until_n(a, &s.n, 1, 2 * LEASE);
    printf("\n  loop blocked: other client acquired after %lld ms (rc %d); back in the loop "
           "after %lld ms: is_lost before the loop %d, told in the first call %d (%s)",
           (long long)(got_at - t0), orc, (long long)(back_at - t0), lost_before_loop,
           told_first_call, s.n ? s.msg : "never told");
    CU_ASSERT_EQUAL(orc, 0);
    CU_ASSERT_EQUAL(lost_before_loop, 1);
    CU_ASSERT(told_first_call >= 1);
    CU_ASSERT_EQUAL(hilock_async_is_lost(a, l, 1), 1);
    if (orc == 0)
        CU_ASSERT_EQUAL(hilock_lock_release(ol), 0);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 3 * LEASE));
    hilock_lock_free(l);
    hilock_lock_free(ol);
    free_async(a);
    hilock_client_close(c);
    hilock_client_close(o);
}

/* The same with a multi-lock hold of two members: another client takes one
 * member while the loop is blocked past the lease; when the application
 * comes back, hilock_async_multilock_is_lost says 1 before the loop has
 * run, and the multi-lock lost callback comes in the first call. */
static void t_multilock_loop_blocked_past_lease(void)
{
    hilock_client *c = open_url(th_srv.url, IO_TIMEOUT);
    hilock_client *o = open_url(th_srv.url, 1000);
    CU_ASSERT_FATAL(c != NULL && o != NULL);
    hilock_async *a = new_async();
    seen s = {0};
    hilock_async_set_multilock_lost_callback(a, on_ml_lost, &s);
    hilock_lock *l[2] = {NULL, NULL}, *ol = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l[0], c, "as-ml-a") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l[1], c, "as-ml-b") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&ol, o, "as-ml-b") == 0);
    hilock_multilock *m = NULL;
    CU_ASSERT_FATAL(hilock_multilock_new(&m, l, 2) == 0);
    res r = {0};
    CU_ASSERT(hilock_async_multilock_acquire(a, m, 2, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) ==
              0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000) && r.rc == 0);
    CU_ASSERT_FATAL(run_until_renewed(a, "as-ml-b"));
    int64_t t0 = th_now_ms();
    int orc = hilock_lock_acquire(ol, 3 * LEASE, 30000); /* the loop is blocked */
    int64_t got_at = th_now_ms();
    int lost_before_loop = hilock_async_multilock_is_lost(a, m, 2);
    hilock_epoll_run_once(&ep, a, 0);
    int told_first_call = s.n;
    run_until_n(a, &s.n, 1, 2 * LEASE);
    printf("\n  multi-lock, loop blocked: other client took a member after %lld ms (rc %d); "
           "is_lost before the loop %d, told in the first call %d (%s)",
           (long long)(got_at - t0), orc, lost_before_loop, told_first_call,
           s.n ? s.msg : "never told");
    CU_ASSERT_EQUAL(orc, 0);
    CU_ASSERT_EQUAL(lost_before_loop, 1);
    CU_ASSERT(told_first_call >= 1);
    if (orc == 0)
        CU_ASSERT_EQUAL(hilock_lock_release(ol), 0);
    res rel = {0};
    CU_ASSERT(hilock_async_multilock_release(a, m, 2, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 3 * LEASE));
    th_redis_int(&th_srv, "DEL as-ml-a");
    free_async(a);
    hilock_multilock_free(m);
    hilock_lock_free(l[0]);
    hilock_lock_free(l[1]);
    hilock_lock_free(ol);
    hilock_client_close(c);
    hilock_client_close(o);
}

/* ---- a master cut off from its replica (replica_ack) ---- */

static th_redis rmaster, rreplica;

static int replica_acked(void *arg)
{
    return th_redis_int(arg, "WAIT 1 200") == 1;
}

/* replica_ack on, a watchdog hold, then the replica SIGSTOPped: the master
 * still answers every renewal, but no replica takes them, so none is a
 * confirmation (the replica that may replace the master has the lease as
 * of the last renewal it took). The holder is told "in doubt" before that
 * lease ends (before: each renewal counted as confirmed, never told). */
static void t_replica_stopped_told_in_doubt(void)
{
    const char *name = "as-replica-stopped";
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = LEASE;
    o.command_timeout_ms = 1000;
    o.replica_ack = 1;
    o.replica_ack_timeout_ms = 500;
    hilock_client *c = NULL;
    char err[256] = "";
    CU_ASSERT_FATAL(hilock_client_open(&c, rmaster.url, &o, err, sizeof err) == 0);
    hilock_async *a = new_async();
    seen s = {0};
    hilock_async_set_lost_callback(a, on_lost, &s);
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 10000) && r.rc == 0);
    /* acknowledged: the replica has the hold */
    CU_ASSERT_EQUAL(th_redis_int(&rreplica, "EXISTS %s", name), 1);
    run_for(a, LEASE / 2); /* a renewal or so, acknowledged */
    CU_ASSERT_EQUAL(s.n, 0);
    th_redis_pause(&rreplica);
    int64_t t0 = th_now_ms();
    run_until_n(a, &s.n, 1, 2 * LEASE);
    int renewed = th_redis_int(&rmaster, "PTTL %s", name) > LEASE / 2;
    th_redis_resume(&rreplica);
    printf("\n  replica stopped under a watchdog hold (lease %d ms): holder told after %lld ms "
           "(%s); the master still renewed it: %d",
           LEASE, s.n ? (long long)(s.at - t0) : -1LL, s.n ? s.msg : "never told", renewed);
    CU_ASSERT_EQUAL(s.n, 1);
    CU_ASSERT(s.n && s.at - t0 < LEASE);
    CU_ASSERT(renewed);
    CU_ASSERT_EQUAL(hilock_async_is_lost(a, l, 1), 1);
    CU_ASSERT(th_wait_for(th_replica_linked, &rreplica, 10000));
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 3 * LEASE));
    th_redis_int(&rmaster, "DEL %s", name);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
}

static int init_replicated(void)
{
    char extra[128];
    if (th_redis_start(&rmaster, NULL))
        return -1;
    snprintf(extra, sizeof extra, "--replicaof 127.0.0.1 %d", rmaster.port);
    if (th_redis_start(&rreplica, extra))
        return -1;
    if (!th_wait_for(th_replica_linked, &rreplica, 10000))
        return -1;
    /* and the master counts it: a write acknowledged by WAIT (just after
     * the sync the master may not list it yet, and a client asking then
     * would see no replica to wait for) */
    th_redis_int(&rmaster, "SET replica-probe 1");
    return th_wait_for(replica_acked, &rmaster, 10000) ? 0 : -1;
}

static int clean_replicated(void)
{
    th_redis_stop(&rreplica);
    th_redis_stop(&rmaster);
    return 0;
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s =
        CU_add_suite("hilock_async: a holder unsure is told first", th_srv_init, th_srv_clean);
    CU_add_test(s, "(a) half-dead link and server", t_half_dead);
    CU_add_test(s, "(a) half-dead, fair lock", t_half_dead_fair);
    CU_add_test(s, "(a) half-dead, fenced lock", t_half_dead_fenced);
    CU_add_test(s, "(b) requests lost", t_requests_lost);
    CU_add_test(s, "(b) replies lost", t_replies_lost);
    CU_add_test(s, "(e) server stopped past the lease", t_server_stopped);
    CU_add_test(s, "(e) proxy resets and refuses past the lease", t_proxy_refusing);
    CU_add_test(s, "(f) loop blocked past the lease", t_loop_blocked_past_lease);
    CU_add_test(s, "(f) multi-lock, loop blocked past the lease",
                t_multilock_loop_blocked_past_lease);
    s = CU_add_suite("hilock_async: a master cut off from its replica (replica_ack)",
                     init_replicated, clean_replicated);
    CU_add_test(s, "replica stopped: the watchdog holder is told in doubt",
                t_replica_stopped_told_in_doubt);
    return th_cu_run();
}
