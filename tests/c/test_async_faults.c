/*
 * The non-blocking API (hilock_async) when holds are lost: a watchdog hold
 * cut off from its server (SIGSTOP) is reported lost "in doubt" within
 * lease - lease/5 of its last confirmed renewal, before the lease can end
 * there; a multi-lock or Redlock hold whose member is lost is reported
 * through the multi-lock lost callback. Against real redis-servers, through
 * the epoll adapter; the loop runs until the awaited event, with a bound.
 */
#include <CUnit/Basic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"
#include "hilock/adapters/epoll.h"
#include "proxy.h"

static th_redis srv, srv2, srv3;
#include "async_helpers.h"

/* command and connect timeouts of 300 ms */
static hilock_client *open_client(th_redis *r, int64_t lease_ms)
{
    hilock_client *c = open_lease_client(r->url, lease_ms, 300);
    CU_ASSERT_FATAL(c != NULL);
    return c;
}

/* Renewals that keep failing on a dead link: the holder is told "in doubt"
 * before the lease (1500 ms) can end on the server; once the link is back
 * the hold is renewed again and released normally. */
static void t_in_doubt(void)
{
    enum { LEASE = 1500 };
    hilock_client *c = open_client(&srv, LEASE);
    hilock_async *a = new_async();
    seen s = {0};
    hilock_async_set_lost_callback(a, on_lost, &s);
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "adoubt") == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 3, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until_n(a, &r.n, 1, 5000) && r.rc == 0);
    run_for(a, 600); /* one renewal confirmed (every 500 ms) */
    CU_ASSERT_EQUAL(s.n, 0);
    int64_t t0 = th_now_ms(); /* the last confirmed renewal was sent before this */
    th_redis_pause(&srv);
    int told = run_until_n(a, &s.n, 1, 4000);
    th_redis_resume(&srv);
    CU_ASSERT_FATAL(told);
    CU_ASSERT(s.lock == l && s.tid == 3);
    CU_ASSERT(s.at - t0 < LEASE); /* lease - lease/5 after the last confirmed renewal */
    CU_ASSERT(strstr(s.msg, "in doubt") != NULL);
    CU_ASSERT_EQUAL(hilock_async_is_lost(a, l, 3), 1);
    /* the link is back: still renewed, still ours, released normally */
    run_for(a, 1500);
    CU_ASSERT(th_redis_int(&srv, "PTTL adoubt") > 0);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 3, on_done, &rel) == 0);
    CU_ASSERT(run_until_n(a, &rel.n, 1, 5000) && rel.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS adoubt"), 0);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
}

/* The application's loop held up past lease - lease/5 (a slow callback, a
 * loaded machine): the renewal that fell due meanwhile goes out first and its
 * answer is awaited; the live hold is not reported lost "in doubt". Before,
 * the first tick after the hold-up reported it before renewing. */
static void t_held_up_loop_renews_before_doubt(void)
{
    enum { LEASE = 3000 }; /* doubt after 2400 ms of silence; renewals every 1000 */
    hilock_client *c = open_client(&srv, LEASE);
    hilock_async *a = new_async();
    seen s = {0};
    hilock_async_set_lost_callback(a, on_lost, &s);
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "aheldup") == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 4, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until_n(a, &r.n, 1, 5000) && r.rc == 0);
    run_for(a, 1100); /* the first renewal (at 1000 ms) confirmed */
    CU_ASSERT_EQUAL(s.n, 0);
    CU_ASSERT(th_redis_int(&srv, "PTTL aheldup") > LEASE - 200);
    th_sleep_ms(2550); /* the loop is not run: past the doubt point, not the lease */
    CU_ASSERT(th_redis_int(&srv, "PTTL aheldup") > 0);
    run_for(a, 500);
    CU_ASSERT_EQUAL(s.n, 0);
    CU_ASSERT_EQUAL(hilock_async_is_lost(a, l, 4), 0);
    CU_ASSERT(th_redis_int(&srv, "PTTL aheldup") > LEASE - 700); /* renewed */
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 4, on_done, &rel) == 0);
    CU_ASSERT(run_until_n(a, &rel.n, 1, 5000) && rel.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS aheldup"), 0);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
}

/* A renewal sent in time and not answered earns no grace, nor does the
 * retry after it (the engine's hl_renew_doubt_at: the grace of a late
 * renewal counts from the FIRST renewal since the last confirmation). The
 * server is stopped right after the grant; the first renewal (due 2000 ms
 * in) times out after the command timeout (1000 ms); then the loop is held
 * up past the doubt point (4800 ms) and the retry that fell due goes out
 * late, when it resumes. The holder is told "in doubt" at once (the rule's
 * time has passed), not a command timeout after the late retry. */
static void t_late_retry_earns_no_grace(void)
{
    enum { LEASE = 6000, TIMEOUT = 1000 }; /* renewals every 2000, doubt at 4800 */
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = LEASE;
    o.command_timeout_ms = TIMEOUT;
    o.connect_timeout_ms = 300;
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, srv.url, &o, NULL, 0) == 0);
    hilock_async *a = new_async();
    seen s = {0};
    hilock_async_set_lost_callback(a, on_lost, &s);
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "alateretry") == 0);
    res r = {0};
    int64_t t0 = th_now_ms(); /* the grant was written after this */
    CU_ASSERT(hilock_async_acquire(a, l, 7, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until_n(a, &r.n, 1, 5000) && r.rc == 0);
    th_redis_pause(&srv);
    int64_t tp = th_now_ms(); /* the grant was written before this */
    /* the first renewal goes out at 2000 ms and times out at 3000 ms; the
     * loop stops before the retry is due (4000 ms) */
    run_for(a, 3600 - (tp - t0));
    CU_ASSERT_EQUAL(s.n, 0);
    th_sleep_ms(tp + 4850 - th_now_ms()); /* held up past the doubt point (4800) */
    int64_t resumed = th_now_ms();
    /* asked before the loop runs again: in doubt by the rule already */
    int lost_now = hilock_async_is_lost(a, l, 7);
    int told = run_until_n(a, &s.n, 1, 3000);
    th_redis_resume(&srv);
    printf("\n  grant written within [0, %lld] ms; first renewal unanswered; loop held up "
           "until %lld ms; is_lost then %d; told in doubt %lld ms after the loop resumed "
           "(a retry's grace would end %d ms after)\n",
           (long long)(tp - t0), (long long)(resumed - t0), lost_now,
           told ? (long long)(s.at - resumed) : -1LL, TIMEOUT);
    CU_ASSERT_EQUAL(lost_now, 1);
    CU_ASSERT_FATAL(told);
    CU_ASSERT(strstr(s.msg, "in doubt") != NULL);
    CU_ASSERT(s.at - resumed < TIMEOUT / 2); /* the first loop turn, not the retry's grace */
    /* the server is back: still renewed, still ours, released normally */
    run_for(a, 1500);
    CU_ASSERT(th_redis_int(&srv, "PTTL alateretry") > 0);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 7, on_done, &rel) == 0);
    CU_ASSERT(run_until_n(a, &rel.n, 1, 5000) && rel.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS alateretry"), 0);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
}

/* A multi-lock hold whose member is taken away is reported once through the
 * multi-lock lost callback (after the member's own report); a Redlock of
 * three keeps its majority when one member goes and is lost at the second. */
static void t_multilock_lost(void)
{
    hilock_client *c1 = open_client(&srv, 1500), *c2 = open_client(&srv2, 1500),
                  *c3 = open_client(&srv3, 1500);
    hilock_async *a = new_async();
    seen s = {0}, ms = {0};
    hilock_async_set_lost_callback(a, on_lost, &s);
    hilock_async_set_multilock_lost_callback(a, on_ml_lost, &ms);
    hilock_lock *l[3] = {NULL, NULL, NULL};
    CU_ASSERT_FATAL(hilock_lock_new(&l[0], c1, "aml-lost") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l[1], c2, "aml-lost") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l[2], c3, "aml-lost") == 0);
    hilock_multilock *m = NULL, *rl = NULL;
    CU_ASSERT_FATAL(hilock_multilock_new(&m, l, 2) == 0);
    CU_ASSERT_FATAL(hilock_redlock_new(&rl, l, 3) == 0);
    res r = {0};
    CU_ASSERT(hilock_async_multilock_acquire(a, m, 4, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) ==
              0);
    CU_ASSERT_FATAL(run_until_n(a, &r.n, 1, 5000) && r.rc == 0);
    CU_ASSERT_EQUAL(hilock_async_multilock_is_lost(a, m, 4), 0);
    th_redis_int(&srv2, "DEL aml-lost"); /* one member gone */
    CU_ASSERT_FATAL(run_until_n(a, &ms.n, 1, 4000));
    CU_ASSERT(ms.m == m && ms.tid == 4);
    CU_ASSERT(s.n >= 1 && s.lock == l[1]); /* the member's own report came first */
    CU_ASSERT(strstr(ms.msg, "aml-lost") != NULL);
    CU_ASSERT_EQUAL(hilock_async_multilock_is_lost(a, m, 4), 1);
    run_for(a, 700);
    CU_ASSERT_EQUAL(ms.n, 1); /* once */
    res rel = {0};
    CU_ASSERT(hilock_async_multilock_release(a, m, 4, on_done, &rel) == 0);
    CU_ASSERT(run_until_n(a, &rel.n, 1, 5000));
    CU_ASSERT_EQUAL(hilock_async_multilock_is_lost(a, m, 4), 0); /* no hold any more */
    /* Redlock of three: one member gone keeps the majority, two lose it */
    CU_ASSERT(hilock_async_multilock_acquire(a, rl, 5, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) ==
              0);
    CU_ASSERT_FATAL(run_until_n(a, &r.n, 2, 5000) && r.rc == 0);
    int before = s.n;
    th_redis_int(&srv3, "DEL aml-lost");
    CU_ASSERT(run_until_n(a, &s.n, before + 1, 4000));
    run_for(a, 100);
    CU_ASSERT_EQUAL(ms.n, 1);
    CU_ASSERT_EQUAL(hilock_async_multilock_is_lost(a, rl, 5), 0);
    th_redis_int(&srv, "DEL aml-lost");
    CU_ASSERT_FATAL(run_until_n(a, &ms.n, 2, 4000));
    CU_ASSERT(ms.m == rl && ms.tid == 5);
    CU_ASSERT_EQUAL(hilock_async_multilock_is_lost(a, rl, 5), 1);
    CU_ASSERT(hilock_async_multilock_release(a, rl, 5, on_done, &rel) == 0);
    CU_ASSERT(run_until_n(a, &rel.n, 2, 5000));
    free_async(a);
    hilock_multilock_free(m);
    hilock_multilock_free(rl);
    for (int i = 0; i < 3; i++)
        hilock_lock_free(l[i]);
    hilock_client_close(c1);
    hilock_client_close(c2);
    hilock_client_close(c3);
}


/* An attempt whose reply timed out is settled on its connection; that
 * connection dies (the stopped server is killed) before the reply: the
 * settle goes on a new connection to the restarted server (drain.c's rule:
 * acquire_settle.lua marks the attempt's acquire latch, so a late copy
 * takes nothing), and the client works again. Before: nothing was sent. */
static void t_settle_on_new_connection(void)
{
    th_redis r;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&r, NULL), 0);
    hilock_client *c = open_client(&r, 30000);
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "asettle") == 0);
    res q = {0};
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_IS_LOCKED, 0, on_done, &q) == 0);
    CU_ASSERT_FATAL(run_until_n(a, &q.n, 1, 5000) && q.rc == 0); /* connected */
    th_redis_pause(&r);
    int64_t end = th_now_ms() + 5000;
    while (!th_redis_stopped(&r) && th_now_ms() < end)
        th_sleep_ms(2);
    res acq = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 10000, on_done, &acq) == 0);
    CU_ASSERT_FATAL(run_until_n(a, &acq.n, 1, 5000));
    CU_ASSERT_EQUAL(acq.rc, HILOCK_ECONN); /* timed out: settled on its connection */
    /* killed while stopped (the attempt never runs), started on the same port */
    kill(r.pid, SIGKILL);
    waitpid(r.pid, NULL, 0);
    r.pid = 0;
    CU_ASSERT_EQUAL_FATAL(th_redis_restart(&r), 0);
    int marked = 0;
    end = th_now_ms() + 6000;
    while (!marked && th_now_ms() < end) {
        hilock_epoll_run_once(&ep, a, 20);
        char buf[64] = "";
        th_redis_str(&r, buf, sizeof buf, "RANDOMKEY");
        marked = strncmp(buf, "hilock_acquire_latch:", 21) == 0;
    }
    CU_ASSERT(marked);
    /* the client works again: a fresh acquire and release */
    int rc = -1;
    end = th_now_ms() + 5000;
    while (rc != 0 && th_now_ms() < end) {
        res x = {0};
        CU_ASSERT_FATAL(hilock_async_acquire(a, l, 1, 0, 10000, on_done, &x) == 0);
        CU_ASSERT_FATAL(run_until_n(a, &x.n, 1, 5000));
        rc = x.rc;
    }
    CU_ASSERT_EQUAL(rc, 0);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &rel) == 0);
    CU_ASSERT(run_until_n(a, &rel.n, 1, 5000) && rel.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&r, "EXISTS asettle"), 0);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
    th_redis_stop(&r);
}

/* A settle that moved to a new connection (its own died unanswered) sends
 * acquire_settle.lua there; that connection is accepted and never answered
 * (a load balancer in front of a dead host). A later call on the client
 * goes on the same connection, behind the settle's request: it fails with
 * HILOCK_ECONN after the command timeout instead of waiting for ever
 * (simulator finding stalled-call). Then new connections are answered
 * again and the client works. */
static void t_call_behind_a_stalled_settle(void)
{
    th_proxy *p = th_proxy_start(srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_client *c = NULL;
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = 300;
    o.connect_timeout_ms = 300;
    CU_ASSERT_FATAL(hilock_client_open(&c, th_proxy_url(p), &o, NULL, 0) == 0);
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "astall-settle") == 0);
    res q = {0};
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_IS_LOCKED, 0, on_done, &q) == 0);
    CU_ASSERT_FATAL(run_until(a, &q, 1, 5000) && q.rc == 0); /* connected */
    th_proxy_silence(p, 1, 1);
    res acq = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 10000, on_done, &acq) == 0);
    CU_ASSERT_FATAL(run_until(a, &acq, 1, 5000));
    CU_ASSERT_EQUAL(acq.rc, HILOCK_ECONN); /* settled on its connection */
    /* that connection dies: the settle goes on a new one, which stalls */
    th_proxy_silence(p, 0, 0);
    th_proxy_stall_new(p, 1);
    th_proxy_reset(p);
    int64_t end = th_now_ms() + 5000;
    while (th_proxy_stalled(p) < 1 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 20);
    CU_ASSERT_FATAL(th_proxy_stalled(p) == 1);
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_IS_LOCKED, 0, on_done, &q) == 0);
    int done = run_until(a, &q, 2, 5000);
    printf("\n  a query behind the stalled settle: %s after %lld ms (rc %d: %s)\n",
           done ? "completed" : "NOT completed", (long long)(th_now_ms() - t0), q.rc, q.err);
    CU_ASSERT_FATAL(done);
    CU_ASSERT_EQUAL(q.rc, HILOCK_ECONN);
    /* answered again: the client works (once the settle, which goes on to a
     * new connection, ends: until then no new attempt goes to that server,
     * the engine's hl_settle_gate) */
    th_proxy_stall_new(p, 0);
    res x = {0};
    end = th_now_ms() + 5000;
    do {
        x = (res){0};
        CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 10000, on_done, &x) == 0);
        CU_ASSERT_FATAL(run_until(a, &x, 1, 5000));
    } while (x.rc == HILOCK_ECONN && th_now_ms() < end);
    CU_ASSERT_EQUAL(x.rc, 0);
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &x) == 0);
    CU_ASSERT(run_until(a, &x, 2, 5000) && x.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS astall-settle"), 0);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
    th_proxy_stop(p);
}

/* The set-up of the fair settle cases: a holder (its own client, straight
 * to the server) holds the fair lock name for 30 s; l, on a client that
 * talks through the proxy p with the given command and connect timeout, is
 * connected on a, and then every reply to it is lost. */
typedef struct fair_pair {
    const char *name;
    th_proxy *p;
    hilock_client *c, *c2;
    hilock_lock *l, *holder;
    hilock_async *a;
} fair_pair;

static void fair_pair_open(fair_pair *f, const char *name, int64_t timeout_ms)
{
    *f = (fair_pair){.name = name};
    f->p = th_proxy_start(srv.port);
    CU_ASSERT_FATAL(f->p != NULL);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = timeout_ms;
    o.connect_timeout_ms = timeout_ms;
    CU_ASSERT_FATAL(hilock_client_open(&f->c, th_proxy_url(f->p), &o, NULL, 0) == 0);
    CU_ASSERT_FATAL(hilock_client_open(&f->c2, srv.url, &o, NULL, 0) == 0);
    CU_ASSERT_FATAL(hilock_fair_lock_new(&f->l, f->c, name) == 0);
    CU_ASSERT_FATAL(hilock_fair_lock_new(&f->holder, f->c2, name) == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire(f->holder, 0, 30000) == 0);
    f->a = new_async();
    res q = {0};
    CU_ASSERT(hilock_async_query(f->a, f->l, HILOCK_QUERY_IS_LOCKED, 0, on_done, &q) == 0);
    CU_ASSERT_FATAL(run_until(f->a, &q, 1, 5000) && q.rc == 0); /* connected */
    th_proxy_silence(f->p, 0, 1); /* replies lost */
}

/* The holder releases; the lock's keys go; everything of f is freed. */
static void fair_pair_close(fair_pair *f)
{
    CU_ASSERT_EQUAL(hilock_lock_release(f->holder), 0);
    th_redis_int(&srv, "DEL %s redisson_lock_queue:{%s} redisson_lock_timeout:{%s}", f->name,
                 f->name, f->name);
    hilock_lock_free(f->l);
    hilock_lock_free(f->holder);
    free_async(f->a);
    hilock_client_close(f->c);
    hilock_client_close(f->c2);
    th_proxy_stop(f->p);
}

/* A fair waiter's attempt runs on the server (it joins the line behind a
 * holder) and its reply is lost; the connection then dies, so the settle
 * asks on a new connection (acquire_settle.lua: not granted) and must then
 * take the waiter out of the line. Before, the settle dropped that answer
 * (the engine still said "reconnect" while it waited for it) and the entry
 * stayed until its deadline, 5 minutes by default, holding up every later
 * waiter (simulator finding fair-queue). */
static void t_fair_settle_on_new_connection_leaves_the_line(void)
{
    const char *queue = "redisson_lock_queue:{afair-settle}";
    fair_pair f;
    fair_pair_open(&f, "afair-settle", 300);
    th_proxy *p = f.p;
    hilock_lock *l = f.l;
    hilock_async *a = f.a;
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 10000, 30000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ECONN);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "LLEN %s", queue), 1); /* in line, unanswered */
    th_proxy_silence(p, 0, 0);
    th_proxy_reset(p); /* the settle's connection dies: a new one */
    int64_t t0 = th_now_ms(), end = t0 + 3000;
    long long len = 1;
    while ((len = th_redis_int(&srv, "LLEN %s", queue)) != 0 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 20);
    printf("\n  the unanswered fair waiter's entry: %s %lld ms after its connection died\n",
           len == 0 ? "gone" : "STILL IN LINE", (long long)(th_now_ms() - t0));
    CU_ASSERT_EQUAL(len, 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "ZCARD redisson_lock_timeout:{afair-settle}"), 0);
    fair_pair_close(&f);
}

/* A fair waiter's attempt runs on the server (it joins the line behind a
 * holder); its reply is lost with its connection, and new connections are
 * refused for a while, so every settle the acquire tries itself fails
 * (HILOCK_ECONN) and so does leaving the line. The owner calls nothing
 * more. Once connections are accepted again the entry must go without
 * another call: the session has the attempt settled once more on its own
 * (hl_unsettled_background) and the settle leaves the line. Before, the
 * attempt was settled only before the owner's next acquire of the lock, and
 * that one did not leave the line either: the entry stayed until its
 * deadline (the simulator's fair-queue). */
/* retries: the same owner's acquires of the lock while connections are
 * still refused (each takes the background settle over, hl_settle_can_hand_over,
 * and gives up at once); the entry must still go once they are let in. */
static void fair_unsettled_waiter_leaves_the_line(int retries)
{
    const char *queue = "redisson_lock_queue:{afair-unsettled}";
    fair_pair f;
    fair_pair_open(&f, "afair-unsettled", th_valgrind() ? 3000 : 1000);
    th_proxy *p = f.p;
    hilock_lock *l = f.l;
    hilock_async *a = f.a;
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 10000, 30000, on_done, &r) == 0);
    int64_t end = th_now_ms() + 5000;
    while (th_redis_int(&srv, "LLEN %s", queue) != 1 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 5);
    CU_ASSERT_FATAL(th_redis_int(&srv, "LLEN %s", queue) == 1); /* in line, unanswered */
    th_proxy_refuse(p, 1);
    th_proxy_reset(p); /* the attempt's connection dies; no new one is let in */
    CU_ASSERT_FATAL(run_until(a, &r, 1, 10000));
    int rc = r.rc;
    th_proxy_silence(p, 0, 0);
    run_for(a, 300); /* still refused */
    for (int i = 0; i < retries; i++) {
        res again = {0};
        CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 30000, on_done, &again) == 0);
        CU_ASSERT(run_until(a, &again, 1, 10000));
        CU_ASSERT_NOT_EQUAL(again.rc, 0); /* refused, or still being settled */
        run_for(a, 100);
    }
    long long during = th_redis_int(&srv, "LLEN %s", queue);
    th_proxy_refuse(p, 0);
    int64_t t0 = th_now_ms();
    end = t0 + 5000;
    long long len = 1;
    while ((len = th_redis_int(&srv, "LLEN %s", queue)) != 0 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 20);
    printf("\n  the fair waiter whose settles were refused (%d retries): rc %d (%s); entry %s "
           "%lld ms after connections were let in again\n",
           retries, rc, r.err, len == 0 ? "gone" : "STILL IN LINE",
           (long long)(th_now_ms() - t0));
    CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
    CU_ASSERT_EQUAL(during, 1);
    CU_ASSERT_EQUAL(len, 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "ZCARD redisson_lock_timeout:{afair-unsettled}"), 0);
    fair_pair_close(&f);
}

static void t_fair_unsettled_waiter_leaves_the_line_on_its_own(void)
{
    fair_unsettled_waiter_leaves_the_line(0);
}

/* Simulator seed 2004974: the owner's acquires during the outage each took
 * the background settle over and gave up at once, and each used up one of
 * the session's background settles; after the second nothing settled the
 * attempt and its entry held the line up until the fair window ended. */
static void t_fair_unsettled_retried_leaves_the_line(void)
{
    fair_unsettled_waiter_leaves_the_line(3);
}

/* The server forgets its scripts (SCRIPT FLUSH) while a fair waiter waits:
 * its first attempt is answered NOSCRIPT and sent again as EVAL; cancelled,
 * it leaves the line with a script the server does not know either. That
 * NOSCRIPT must be answered with EVAL too: before, an operation sent the
 * body once in its life, so the cancel's NOSCRIPT was taken as its answer
 * and the entry stayed in line until its deadline (simulator finding
 * fair-queue: an attempt settled with acquire_settle.lua's body, then the
 * leave-the-line script refused). */
static void t_fair_cancel_after_noscript_leaves_the_line(void)
{
    const char *queue = "redisson_lock_queue:{afair-noscript}";
    hilock_client *c = open_client(&srv, 30000), *c2 = open_client(&srv, 30000);
    hilock_lock *l = NULL, *holder = NULL;
    CU_ASSERT_FATAL(hilock_fair_lock_new(&l, c, "afair-noscript") == 0);
    CU_ASSERT_FATAL(hilock_fair_lock_new(&holder, c2, "afair-noscript") == 0);
    CU_ASSERT_FATAL(hilock_lock_acquire(holder, 0, 30000) == 0);
    th_redis_int(&srv, "SCRIPT FLUSH");
    hilock_async *a = new_async();
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 10000, 30000, on_done, &r) == 0);
    int64_t end = th_now_ms() + 5000;
    while (th_redis_int(&srv, "LLEN %s", queue) != 1 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 20);
    CU_ASSERT_FATAL(th_redis_int(&srv, "LLEN %s", queue) == 1); /* waiting in line */
    int cancelled = 0;
    CU_ASSERT(hilock_async_cancel(&cancelled, a, l, 1) == 0);
    CU_ASSERT_EQUAL(cancelled, 1);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    long long len = th_redis_int(&srv, "LLEN %s", queue);
    printf("\n  cancelled after a NOSCRIPT: rc %d (%s); entries left in line: %lld\n", r.rc,
           r.err, len);
    CU_ASSERT_EQUAL(r.rc, HILOCK_ECANCELED);
    CU_ASSERT_EQUAL(len, 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "ZCARD redisson_lock_timeout:{afair-noscript}"), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(holder), 0);
    th_redis_int(&srv, "DEL afair-noscript %s redisson_lock_timeout:{afair-noscript}", queue);
    hilock_lock_free(l);
    hilock_lock_free(holder);
    free_async(a);
    hilock_client_close(c);
    hilock_client_close(c2);
}

/* A child the process starts (fork + exec: hilock run's command, a server
 * the application runs) must not keep the library's sockets open. Before,
 * hiredis's sockets were inherited: after the library closed a pub/sub
 * connection the child still held it, so the server kept its subscription
 * (simulator finding subscribed: the simulator starts redis-servers; ss
 * showed closed client sockets held by those children). */
static pid_t spawn_sleeper(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("sleep", "sleep", "30", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void t_children_do_not_keep_connections(void)
{
    const char *channel = "redisson_lock__channel:{acloexec}";
    hilock_client *c = open_client(&srv, 30000);
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "acloexec") == 0);
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000) && r.rc == 0);
    int64_t end = th_now_ms() + 5000; /* the hold listens on its channel */
    while (th_redis_numsub(&srv, channel) != 1 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 20);
    CU_ASSERT_FATAL(th_redis_numsub(&srv, channel) == 1);
    pid_t child = spawn_sleeper();
    CU_ASSERT_FATAL(child > 0);
    free_async(a); /* its connections closed, the subscription with them */
    long long n = 1;
    end = th_now_ms() + 2000;
    while ((n = th_redis_numsub(&srv, channel)) != 0 && th_now_ms() < end)
        th_sleep_ms(20);
    printf("\n  hilock_async freed, a child running: %lld subscriber(s) left\n", n);
    CU_ASSERT_EQUAL(n, 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    th_redis_int(&srv, "DEL acloexec");
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* A semaphore acquire whose reply never came (the server stopped): the
 * engine settles it through its request latch on another connection, so
 * whichever of the two the server runs first, no permit stays taken. */
static void t_semaphore_reply_lost(void)
{
    hilock_client *c = open_client(&srv, 30000);
    hilock_async *a = new_async();
    hilock_semaphore *s = NULL;
    CU_ASSERT_FATAL(hilock_semaphore_new(&s, c, "asem-lost") == 0);
    CU_ASSERT_FATAL(hilock_semaphore_try_set_permits(NULL, s, 2) == 0);
    /* the server knows the acquire script (no NOSCRIPT round for the copy) */
    CU_ASSERT_FATAL(hilock_semaphore_acquire(s, 1, 0) == 0);
    CU_ASSERT_FATAL(hilock_semaphore_release(s, 1) == 0);
    res q = {0};
    CU_ASSERT(hilock_async_semaphore_count_op(a, s, HILOCK_COUNT_GET, 0, on_done, &q) == 0);
    CU_ASSERT_FATAL(run_until(a, &q, 1, 5000) && q.rc == 0 && q.value == 2); /* connected */
    th_redis_pause(&srv);
    int64_t end = th_now_ms() + 5000;
    while (!th_redis_stopped(&srv) && th_now_ms() < end)
        th_sleep_ms(2);
    res r = {0};
    CU_ASSERT(hilock_async_semaphore_acquire(a, s, 1, 1, 0, on_done, &r) == 0);
    run_for(a, 500); /* its reply times out (300 ms); the settle is tried */
    th_redis_resume(&srv);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 10000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ECONN);
    run_for(a, 300);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "GET asem-lost"), 2); /* nothing kept */
    th_redis_int(&srv, "DEL asem-lost");
    hilock_semaphore_free(s);
    free_async(a);
    hilock_client_close(c);
}

/* A release held back on its way to the server (a late copy): the client
 * gives up on its reply after the command timeout and sends it again, which
 * releases. The owner then takes and releases the lock once more and takes
 * it again; the late copy arrives held_ms after it was sent. It must find
 * its answer in its latch and change nothing: the owner still holds the
 * lock and another client cannot take it. Returns what the late copy did
 * (1: the hold survived). held_ms beyond the unlock latch's 3 s lifetime
 * (2 * command timeout + 1000 ms) is issue 29's case. */
static int late_release_copy(const char *name, int held_ms, int64_t first_lease_ms)
{
    th_proxy *p = th_proxy_start(srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = 1000;
    o.connect_timeout_ms = 1000;
    hilock_client *c = NULL, *c2 = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, th_proxy_url(p), &o, NULL, 0) == 0);
    CU_ASSERT_FATAL(hilock_client_open(&c2, srv.url, &o, NULL, 0) == 0);
    hilock_async *a = new_async();
    hilock_lock *l = NULL, *other = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&other, c2, name) == 0);
    res r = {0};
    int n = 0;
    /* scripts loaded, connection open: only the held release is slow */
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 30000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, first_lease_ms, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);

    th_proxy_hold_request(p, "redisson_lock__channel", held_ms);
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    int64_t released = th_now_ms() - t0;
    CU_ASSERT_EQUAL(r.rc, 0); /* the resend released it */
    /* take, release, take again before the late copy arrives */
    for (int i = 0; i < 3; i++) {
        int rc = i == 1 ? hilock_async_release(a, l, 1, on_done, &r)
                        : hilock_async_acquire(a, l, 1, 0, 30000, on_done, &r);
        CU_ASSERT(rc == 0);
        CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
    }
    int64_t held_at = th_now_ms() - t0;
    int64_t end = th_now_ms() + held_ms + 5000;
    while (th_proxy_fired(p) < 1 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 20);
    int64_t late_at = th_now_ms() - t0;
    CU_ASSERT_FATAL(th_proxy_fired(p) == 1);
    th_sleep_ms(100); /* the server has run the late copy */
    long long exists = th_redis_int(&srv, "EXISTS %s", name);
    int other_rc = hilock_lock_acquire(other, 0, 30000);
    printf("\n  (released hold's lease %lld ms) release resent and answered after %lld ms; "
           "held again at %lld ms; late copy delivered at %lld ms: lock key exists %lld, "
           "another client's acquire %d (%s)\n",
           (long long)first_lease_ms, (long long)released, (long long)held_at, (long long)late_at, exists, other_rc,
           other_rc == 0 ? "GRANTED while the first holds it" : "refused");
    int ok = exists == 1 && other_rc != 0;
    CU_ASSERT_EQUAL(exists, 1);
    CU_ASSERT_NOT_EQUAL(other_rc, 0);
    if (other_rc == 0)
        hilock_lock_release(other);
    res x = {0};
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &x) == 0);
    CU_ASSERT(run_until(a, &x, 1, 5000));
    CU_ASSERT_EQUAL(x.rc, ok ? 0 : HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS %s", name), 0);
    hilock_lock_free(l);
    hilock_lock_free(other);
    free_async(a);
    hilock_client_close(c);
    hilock_client_close(c2);
    th_proxy_stop(p);
    return ok;
}

/* The late copy arrives while its unlock latch still lives (2 s; the
 * latch of an answered release lives 2 x 1 s command timeout + 1 s). */
static void t_late_release_copy(void)
{
    late_release_copy("alate1", 2000, 30000);
}

/* The late copy arrives after the 3 s latch lifetime of an answered
 * release (4.5 s). */
static void t_late_release_copy_after_latch_ttl(void)
{
    late_release_copy("alate2", 4500, 30000);
}

/* The same, the released hold taken with a 2 s lease: the resend's latch
 * lived 3 s (before the fix it lived the released hold's lease, so a copy
 * later than both released the later hold: issue 31's case (d)). */
static void t_late_release_copy_short_lease(void)
{
    late_release_copy("alate3", 4500, 2000);
}

static int init_srv(void)
{
    if (th_redis_start(&srv, NULL) != 0 || th_redis_start(&srv2, NULL) != 0 ||
        th_redis_start(&srv3, NULL) != 0)
        return -1;
    return 0;
}

/* A watchdog hold whose release gets no answer to any try (every request
 * on the holder's link dropped, the connection kept open): the release
 * fails saying renewal stopped, the watchdog renews the hold no more, so
 * the key ends at its lease; the same thread's next acquire sends the
 * release again first and holds once (no silent re-entry). Before: the
 * watchdog kept renewing the hold once the link was back (the key lived on
 * past 3 leases) and the next acquire re-entered it (hold count 2). */
static void t_release_lost_ends_at_the_lease(void)
{
    enum { LEASE = 1500 };
    const char *name = "arel-lost";
    th_proxy *p = th_proxy_start(srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = LEASE;
    o.command_timeout_ms = 300;
    o.connect_timeout_ms = 300;
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, th_proxy_url(p), &o, NULL, 0) == 0);
    char owner[128];
    CU_ASSERT_FATAL(hilock_client_owner(c, 6, owner, sizeof owner) == 0);
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    res r = {0};
    int n = 0;
    CU_ASSERT(hilock_async_acquire(a, l, 6, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);

    th_proxy_silence(p, 1, 0); /* requests lost: the release never arrives */
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_async_release(a, l, 6, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    th_proxy_silence(p, 0, 0);
    printf("\n  release with no answer: rc %d after %lld ms: %s\n", r.rc,
           (long long)(th_now_ms() - t0), r.err);
    CU_ASSERT_NOT_EQUAL(r.rc, 0);
    CU_ASSERT(strstr(r.err, "not confirmed") != NULL && strstr(r.err, "renewal stopped") != NULL);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HEXISTS %s %s", name, owner), 1); /* never released */
    /* the loop runs (the watchdog's renewals would reach the server now) */
    int64_t gone = -1, end = t0 + 3 * LEASE;
    while (th_now_ms() < end) {
        run_for(a, 50);
        if (th_redis_int(&srv, "EXISTS %s", name) == 0) {
            gone = th_now_ms() - t0;
            break;
        }
    }
    printf("  the hold's key gone after %lld ms (lease %d ms; -1: still there after %d ms)\n",
           (long long)gone, LEASE, 3 * LEASE);
    CU_ASSERT(gone >= 0 && gone <= LEASE + 1000);

    /* again, and the same thread acquires at once (the hold still there):
     * the release is sent again first, then one hold */
    CU_ASSERT(hilock_async_acquire(a, l, 6, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
    th_proxy_silence(p, 1, 0);
    CU_ASSERT(hilock_async_release(a, l, 6, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    th_proxy_silence(p, 0, 0);
    CU_ASSERT_NOT_EQUAL(r.rc, 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET %s %s", name, owner), 1);
    CU_ASSERT(hilock_async_acquire(a, l, 6, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    CU_ASSERT_EQUAL(r.rc, 0);
    long long count = th_redis_int(&srv, "HGET %s %s", name, owner);
    printf("  acquire right after a second unanswered release: rc %d, hold count %lld\n", r.rc,
           count);
    CU_ASSERT_EQUAL(count, 1);
    CU_ASSERT(hilock_async_release(a, l, 6, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, ++n, 5000) && r.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS %s", name), 0);
    th_redis_int(&srv, "DEL %s", name);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
    th_proxy_stop(p);
}

/* A hold taken twice (re-entered: count 2) whose two releases both get no
 * answer (requests lost): the same thread's next acquire must send both
 * again first and hold once (count 1), and its release must leave nothing.
 * Before, one release was sent again: the acquire re-entered the hold left
 * (count 2 while the caller counts 1), its release left count 1 and the
 * watchdog renewed that hold for good (simulator seed 1003816: "the server
 * counts 2 holds, the caller 1", a lock key renewed 4 s after the last
 * call). The second case: three holds, replies lost: the first release
 * runs unanswered, the second waits behind it (the first, sent again
 * first, is unanswered again: the second is not sent, count 2 on the
 * server); the next acquire sends both under their own ids (the first
 * changes nothing, the second runs), so the hold the caller still counts
 * stays (a release under a new id would take it). */
static void t_two_unanswered_releases_are_both_sent_again(void)
{
    const char *name = "arel-lost2";
    th_proxy *p = th_proxy_start(srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = 30000;
    o.command_timeout_ms = th_valgrind() ? 1000 : 300;
    o.connect_timeout_ms = o.command_timeout_ms;
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, th_proxy_url(p), &o, NULL, 0) == 0);
    char owner[128];
    CU_ASSERT_FATAL(hilock_client_owner(c, 6, owner, sizeof owner) == 0);
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    res r = {0};
    int n = 0;
    for (int i = 0; i < 2; i++) {
        CU_ASSERT(hilock_async_acquire(a, l, 6, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
        CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
    }
    th_proxy_silence(p, 1, 0); /* requests lost: neither release arrives */
    int rc1, rc2;
    CU_ASSERT(hilock_async_release(a, l, 6, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    rc1 = r.rc;
    CU_ASSERT(hilock_async_release(a, l, 6, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    rc2 = r.rc;
    th_proxy_silence(p, 0, 0);
    long long before = th_redis_int(&srv, "HGET %s %s", name, owner);
    CU_ASSERT(hilock_async_acquire(a, l, 6, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    int arc = r.rc;
    int64_t value = r.value;
    long long count = th_redis_int(&srv, "HGET %s %s", name, owner);
    CU_ASSERT(hilock_async_release(a, l, 6, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    int rrc = r.rc;
    int64_t remaining = r.value;
    long long left = th_redis_int(&srv, "EXISTS %s", name);
    printf("\n  count 2, both releases unanswered (rc %d, %d; count on the server %lld): next "
           "acquire rc %d value %lld, count %lld; its release rc %d remaining %lld; key left "
           "%lld\n",
           rc1, rc2, before, arc, (long long)value, count, rrc, (long long)remaining, left);
    CU_ASSERT_NOT_EQUAL(rc1, 0);
    CU_ASSERT_NOT_EQUAL(rc2, 0);
    CU_ASSERT_EQUAL(before, 2);
    CU_ASSERT_EQUAL(arc, 0);
    CU_ASSERT_EQUAL(value, 1);
    CU_ASSERT_EQUAL(count, 1);
    CU_ASSERT_EQUAL(rrc, 0);
    CU_ASSERT_EQUAL(remaining, 0);
    CU_ASSERT_EQUAL(left, 0);

    /* three holds; two releases run, their replies lost; the caller counts 1 */
    for (int i = 0; i < 3; i++) {
        CU_ASSERT(hilock_async_acquire(a, l, 6, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
        CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
    }
    th_proxy_silence(p, 0, 1); /* replies lost: both releases run */
    for (int i = 0; i < 2; i++) {
        CU_ASSERT(hilock_async_release(a, l, 6, on_done, &r) == 0);
        CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
        CU_ASSERT_NOT_EQUAL(r.rc, 0);
    }
    th_proxy_silence(p, 0, 0);
    before = th_redis_int(&srv, "HGET %s %s", name, owner);
    CU_ASSERT(hilock_async_acquire(a, l, 6, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    arc = r.rc;
    count = th_redis_int(&srv, "HGET %s %s", name, owner);
    printf("  count 3, two releases unanswered, replies lost (count on the server %lld): next "
           "acquire rc "
           "%d, count %lld (the caller counts 2)\n",
           before, arc, count);
    CU_ASSERT_EQUAL(before, 2); /* the second waits behind the first */
    CU_ASSERT_EQUAL(arc, 0);
    CU_ASSERT_EQUAL(count, 2);
    th_redis_int(&srv, "DEL %s", name);
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
    th_proxy_stop(p);
}

/* A hold taken twice; its first release gets no answer (requests lost),
 * then the same thread releases again once the link is back. The session
 * sends the unanswered release again first, then the new one: both holds
 * end. Before, the new release went alone (count 2 -> 1, answered "1
 * left"); the next acquire sent the earlier one again under its own id,
 * the owner's unlock latch (holding the newer release's higher seq)
 * refused it as a late copy ("not owner"), the acquire re-entered (count 2
 * while the caller counts 1) and its release left a hold that the
 * watchdog renewed (simulator seed 1009751). Both C drivers: hilock_async
 * (thread 6) and the blocking API (thread 7). */
static void t_release_after_unanswered_sends_that_one_first(void)
{
    const char *name = "arel-order";
    th_proxy *p = th_proxy_start(srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = 30000;
    o.command_timeout_ms = th_valgrind() ? 1000 : 300;
    o.connect_timeout_ms = o.command_timeout_ms;
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, th_proxy_url(p), &o, NULL, 0) == 0);
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    res r = {0};
    int n = 0;
    for (int blocking = 0; blocking < 2; blocking++) {
        uint64_t tid = blocking ? 7 : 6;
        char owner[128];
        CU_ASSERT_FATAL(hilock_client_owner(c, tid, owner, sizeof owner) == 0);
        for (int i = 0; i < 2; i++) {
            if (blocking) {
                CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, tid, 0, HILOCK_LEASE_WATCHDOG) == 0);
            } else {
                CU_ASSERT(hilock_async_acquire(a, l, tid, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) ==
                          0);
                CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
            }
        }
        th_proxy_silence(p, 1, 0); /* requests lost: the first release never arrives */
        int rc1;
        if (blocking) {
            rc1 = hilock_lock_release_tid(l, tid);
        } else {
            CU_ASSERT(hilock_async_release(a, l, tid, on_done, &r) == 0);
            CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
            rc1 = r.rc;
        }
        th_proxy_silence(p, 0, 0);
        long long mid = th_redis_int(&srv, "HGET %s %s", name, owner);
        int rc2;
        if (blocking) {
            rc2 = hilock_lock_release_tid(l, tid);
        } else {
            CU_ASSERT(hilock_async_release(a, l, tid, on_done, &r) == 0);
            CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
            rc2 = r.rc;
        }
        long long after2 = th_redis_int(&srv, "EXISTS %s", name);
        int arc;
        long long count;
        if (blocking) {
            arc = hilock_lock_acquire_tid(l, tid, 0, HILOCK_LEASE_WATCHDOG);
        } else {
            CU_ASSERT(hilock_async_acquire(a, l, tid, 0, HILOCK_LEASE_WATCHDOG, on_done, &r) == 0);
            CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
            arc = r.rc;
        }
        count = th_redis_int(&srv, "HGET %s %s", name, owner);
        int rrc;
        if (blocking) {
            rrc = hilock_lock_release_tid(l, tid);
        } else {
            CU_ASSERT(hilock_async_release(a, l, tid, on_done, &r) == 0);
            CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
            rrc = r.rc;
        }
        long long left = th_redis_int(&srv, "EXISTS %s", name);
        printf("\n  %s: count 2, first release unanswered (rc %d, count %lld), second release "
               "rc %d, key after it %lld; next acquire rc %d count %lld; its release rc %d, key "
               "left %lld",
               blocking ? "blocking" : "hilock_async", rc1, mid, rc2, after2, arc, count, rrc,
               left);
        CU_ASSERT_NOT_EQUAL(rc1, 0);
        CU_ASSERT_EQUAL(mid, 2);
        CU_ASSERT_EQUAL(rc2, 0);
        CU_ASSERT_EQUAL(after2, 0);
        CU_ASSERT_EQUAL(arc, 0);
        CU_ASSERT_EQUAL(count, 1);
        CU_ASSERT_EQUAL(rrc, 0);
        CU_ASSERT_EQUAL(left, 0);
        th_redis_int(&srv, "DEL %s", name);
    }
    printf("\n");
    hilock_lock_free(l);
    free_async(a);
    hilock_client_close(c);
    th_proxy_stop(p);
}

/* How many of this process's descriptors are TCP connections to port
 * (their peer, from /proc/net/tcp by socket inode). */
static int conns_to(int port)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], target[128];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        unsigned long ino = 0;
        if (len <= 0)
            continue;
        target[len] = 0;
        if (sscanf(target, "socket:[%lu]", &ino) != 1)
            continue;
        FILE *f = fopen("/proc/net/tcp", "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            unsigned rport = 0;
            unsigned long inode = 0;
            if (sscanf(line, " %*d: %*x:%*x %*x:%x %*x %*x:%*x %*x:%*x %*x %*u %*u %lu", &rport,
                       &inode) == 2 &&
                inode == ino) {
                n += (int)rport == port;
                break;
            }
        }
        if (f)
            fclose(f);
    }
    closedir(d);
    return n;
}

/* A server that stopped answering (SIGSTOP) takes one attempt at a time:
 * an attempt whose reply timed out there is settled on its connection, and
 * until that settle ends no new attempt goes to that server (the engine's
 * hl_settle_gate, as in the blocking driver and hilock.aio). A Redlock
 * member's try (its own 50 ms limit) is refused at once; a plain acquire
 * waits for the settle up to its command timeout, then fails naming the
 * server. Before, every attempt opened one more connection to the stalled
 * member and left a settle on it (one per acquire, for up to a minute)
 * until the application's loop refused to watch more descriptors and every
 * acquire failed (tests/safety redlock-safe/async: "0 of 5 taken"). */
static void t_stalled_server_takes_one_attempt(void)
{
    th_redis r;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&r, NULL), 0);
    hilock_client *cs[3] = {open_client(&r, 30000), open_client(&srv2, 30000),
                            open_client(&srv3, 30000)};
    hilock_async *a = new_async();
    hilock_lock *l[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++)
        CU_ASSERT_FATAL(hilock_lock_new(&l[i], cs[i], "astall") == 0);
    hilock_multilock *rl = NULL;
    CU_ASSERT_FATAL(hilock_redlock_new(&rl, l, 3) == 0);
    res x = {0};
    CU_ASSERT_FATAL(hilock_async_multilock_acquire(a, rl, 1, 0, 10000, on_done, &x) == 0);
    CU_ASSERT_FATAL(run_until(a, &x, 1, 5000) && x.rc == 0); /* every member connected */
    CU_ASSERT_FATAL(hilock_async_multilock_release(a, rl, 1, on_done, &x) == 0);
    CU_ASSERT_FATAL(run_until(a, &x, 2, 5000) && x.rc == 0);
    th_redis_pause(&r);
    int64_t end = th_now_ms() + 5000;
    while (!th_redis_stopped(&r) && th_now_ms() < end)
        th_sleep_ms(2);
    int before = conns_to(r.port);
    for (int i = 0; i < 8; i++) {
        res q = {0};
        CU_ASSERT_FATAL(hilock_async_multilock_acquire(a, rl, 1, 0, 10000, on_done, &q) == 0);
        CU_ASSERT_FATAL(run_until(a, &q, 1, 5000));
        CU_ASSERT_EQUAL(q.rc, 0); /* the two others are a majority */
        CU_ASSERT_FATAL(hilock_async_multilock_release(a, rl, 1, on_done, &q) == 0);
        CU_ASSERT_FATAL(run_until(a, &q, 2, 5000));
    }
    int after = conns_to(r.port);
    if (after - before > 2)
        printf("\n  %d connections to the stopped member after 8 acquires (%d before)\n", after,
               before);
    CU_ASSERT(after - before <= 2); /* the settle's (and a release's); before: 8 or more */
    /* a plain acquire there waits for the settle, then names the server */
    res p = {0};
    CU_ASSERT_FATAL(hilock_async_acquire(a, l[0], 2, 0, 10000, on_done, &p) == 0);
    CU_ASSERT_FATAL(run_until(a, &p, 1, 5000));
    /* while the settle runs, the gate refuses the attempt; a settle that
     * gave up before this acquire (its own tries time out: under load the
     * eight Redlock rounds can outlast it) lets one attempt through, which
     * times out. Either way the error names the server. */
    char srvname[64];
    snprintf(srvname, sizeof srvname, "127.0.0.1:%d", r.port);
    CU_ASSERT_EQUAL(p.rc, HILOCK_ECONN);
    CU_ASSERT(strstr(p.err, "has not answered an earlier attempt yet") != NULL ||
              strstr(p.err, "no reply within 300 ms") != NULL);
    CU_ASSERT(strstr(p.err, srvname) != NULL);
    if (!strstr(p.err, "earlier attempt"))
        printf("\n  plain acquire: %s\n", p.err);
    /* answering again: its late attempts are settled (given back), and the
     * Redlock and the plain lock work again */
    th_redis_resume(&r);
    int rc = -1;
    end = th_now_ms() + 5000;
    while (rc != 0 && th_now_ms() < end) {
        res y = {0};
        CU_ASSERT_FATAL(hilock_async_acquire(a, l[0], 2, 0, 10000, on_done, &y) == 0);
        CU_ASSERT_FATAL(run_until(a, &y, 1, 5000));
        rc = y.rc;
        if (rc != 0)
            run_for(a, 50);
    }
    CU_ASSERT_EQUAL(rc, 0);
    res rel = {0};
    CU_ASSERT(hilock_async_release(a, l[0], 2, on_done, &rel) == 0);
    CU_ASSERT(run_until(a, &rel, 1, 5000) && rel.rc == 0);
    res y = {0};
    CU_ASSERT_FATAL(hilock_async_multilock_acquire(a, rl, 1, 0, 10000, on_done, &y) == 0);
    CU_ASSERT_FATAL(run_until(a, &y, 1, 5000));
    CU_ASSERT_EQUAL(y.rc, 0);
    CU_ASSERT_FATAL(hilock_async_multilock_release(a, rl, 1, on_done, &y) == 0);
    CU_ASSERT(run_until(a, &y, 2, 5000) && y.rc == 0);
    free_async(a);
    hilock_multilock_free(rl);
    for (int i = 0; i < 3; i++) {
        hilock_lock_free(l[i]);
        hilock_client_close(cs[i]);
    }
    th_redis_stop(&r);
}

static int clean_srv(void)
{
    th_redis_stop(&srv);
    th_redis_stop(&srv2);
    th_redis_stop(&srv3);
    return 0;
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("non-blocking API: losses", init_srv, clean_srv);
    CU_add_test(s, "a hold cut off from its server is reported in doubt in time", t_in_doubt);
    CU_add_test(s, "a held-up loop renews before reporting doubt",
                t_held_up_loop_renews_before_doubt);
    CU_add_test(s, "a retry sent late after an unanswered renewal earns no grace",
                t_late_retry_earns_no_grace);
    CU_add_test(s, "multi-lock and Redlock lost callback", t_multilock_lost);
    CU_add_test(s, "a settle whose connection died goes on a new one", t_settle_on_new_connection);
    CU_add_test(s, "a call behind a settle on a stalled new connection fails in time",
                t_call_behind_a_stalled_settle);
    CU_add_test(s, "a fair waiter settled on a new connection leaves the line",
                t_fair_settle_on_new_connection_leaves_the_line);
    CU_add_test(s, "a fair waiter whose settles failed leaves the line on its own",
                t_fair_unsettled_waiter_leaves_the_line_on_its_own);
    CU_add_test(s, "... and after the owner's acquires during the outage",
                t_fair_unsettled_retried_leaves_the_line);
    CU_add_test(s, "a fair waiter cancelled after NOSCRIPT leaves the line",
                t_fair_cancel_after_noscript_leaves_the_line);
    CU_add_test(s, "a child process keeps none of the library's connections",
                t_children_do_not_keep_connections);
    CU_add_test(s, "a semaphore acquire whose reply was lost keeps nothing", t_semaphore_reply_lost);
    CU_add_test(s, "a late copy of a release leaves a later hold alone", t_late_release_copy);
    CU_add_test(s, "a late copy of a release past its latch lifetime leaves a later hold alone",
                t_late_release_copy_after_latch_ttl);
    CU_add_test(s, "a late copy of a release past every latch lifetime leaves a later hold alone",
                t_late_release_copy_short_lease);
    CU_add_test(s, "a release that gets no answer stops renewal; the next acquire releases first",
                t_release_lost_ends_at_the_lease);
    CU_add_test(s, "a release after an unanswered one sends that one first",
                t_release_after_unanswered_sends_that_one_first);
    CU_add_test(s, "two unanswered releases are both sent again before the next acquire",
                t_two_unanswered_releases_are_both_sent_again);
    CU_add_test(s, "a stopped server takes one attempt at a time (Redlock member and plain)",
                t_stalled_server_takes_one_attempt);
    return th_cu_run();
}
