/*
 * Settling what the server did after the client stopped waiting, under the
 * faults of DESIGN.md §6, through a fault proxy (proxy.h) in front of a real
 * redis-server: the blocking API's settle thread (drain.c) and the
 * non-blocking API's settles (hilock_async); a late copy of a release.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"
#include "proxy.h"

#include "async_helpers.h"

static hilock_client *open_url(const char *url, int64_t cmd_timeout)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = cmd_timeout;
    o.connect_timeout_ms = 1000;
    return th_client_open_opts(url, &o);
}

typedef struct key_gone {
    const char *name;
} key_gone;

static int is_gone(void *p)
{
    return th_redis_int(&th_srv, "EXISTS %s", ((key_gone *)p)->name) == 0;
}

/* An acquire whose grant comes back after the command timeout, on a
 * connection the server resets right after that reply: the settle thread
 * sends the release on a new connection (it used to free the connection
 * inside its reply loop and crash), and nothing stays held. */
static void t_blocking_late_grant_then_reset(void)
{
    th_proxy *p = th_proxy_start(th_srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_client *c = open_url(th_proxy_url(p), 300);
    CU_ASSERT_FATAL(c != NULL);
    hilock_lock *warm = NULL, *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&warm, c, "settle-warm") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "srst1") == 0);
    /* the scripts are loaded and the pooled connection is open */
    CU_ASSERT_EQUAL(hilock_lock_acquire(warm, 0, 30000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(warm), 0);

    th_proxy_late_reply_then_reset(p, "srst1", 450);
    int64_t t0 = th_now_ms();
    int rc = hilock_lock_acquire(l, 0, 30000);
    int64_t told = th_now_ms() - t0;
    CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
    key_gone k = {"srst1"};
    /* the grant arrives at ~450 ms (within the settle's wait of one more
     * command timeout for it), the connection is reset, the settle
     * releases it on a new connection */
    int gone = th_wait_for(is_gone, &k, 5000);
    int64_t settled = th_now_ms() - t0;
    printf("\n  acquire told %d after %lld ms; late grant delivered then reset: %d; "
           "grant given back after %lld ms (gone=%d)\n",
           rc, (long long)told, th_proxy_fired(p), (long long)settled, gone);
    CU_ASSERT_EQUAL(th_proxy_fired(p), 1);
    CU_ASSERT(gone);
    /* the client goes on: a new attempt is accepted and granted */
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 2000, 30000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    hilock_lock_free(warm);
    hilock_client_close(c);
    th_proxy_stop(p);
}

/* The same through hilock_async: the settle gives the late grant back on a
 * new connection, and the handle goes on. */
static void t_async_late_grant_then_reset(void)
{
    th_proxy *p = th_proxy_start(th_srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_client *c = open_url(th_proxy_url(p), 300);
    CU_ASSERT_FATAL(c != NULL);
    hilock_async *a = new_async();
    hilock_lock *warm = NULL, *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&warm, c, "settle-awarm") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "asrst1") == 0);
    res w = {0};
    CU_ASSERT(hilock_async_acquire(a, warm, 1, 0, 30000, on_done, &w) == 0);
    CU_ASSERT_FATAL(run_until(a, &w, 1, 5000) && w.rc == 0);
    CU_ASSERT(hilock_async_release(a, warm, 1, on_done, &w) == 0);
    CU_ASSERT_FATAL(run_until(a, &w, 2, 5000) && w.rc == 0);

    th_proxy_late_reply_then_reset(p, "asrst1", 450);
    int64_t t0 = th_now_ms();
    res r = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 30000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_ECONN);
    int gone = 0;
    int64_t end = th_now_ms() + 5000;
    while (!(gone = th_redis_int(&th_srv, "EXISTS asrst1") == 0) && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 20);
    printf("\n  acquire told %d after %lld ms; late grant delivered then reset: %d; "
           "grant given back after %lld ms (gone=%d)\n",
           r.rc, (long long)(r.at - t0), th_proxy_fired(p), (long long)(th_now_ms() - t0), gone);
    CU_ASSERT_EQUAL(th_proxy_fired(p), 1);
    CU_ASSERT(gone);
    res x = {0};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 2000, 30000, on_done, &x) == 0);
    CU_ASSERT(run_until(a, &x, 1, 5000) && x.rc == 0);
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &x) == 0);
    CU_ASSERT(run_until(a, &x, 2, 5000) && x.rc == 0);
    hilock_lock_free(l);
    hilock_lock_free(warm);
    free_async(a);
    hilock_client_close(c);
    th_proxy_stop(p);
}

/* Blocking API: a release held back on its way (a late copy) past the
 * unlock latch's lifetime of an answered release (3 s with a 1 s command
 * timeout; the copy comes at 4.5 s): the client resent it after 1 s, which
 * released;
 * then took, released and took the lock again. The late copy must leave
 * that hold alone (issue 29: it deleted it). first_lease_ms: the lease of
 * the hold released (30 s: the resend's latch lived that long, and the copy
 * found it before the fix too; 2 s: the latch lived 3 s, and the copy
 * released the later hold before the fix: issue 31's case (d)). */
static void blocking_late_release_copy(const char *name, int64_t first_lease_ms)
{
    th_proxy *p = th_proxy_start(th_srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_client *c = open_url(th_proxy_url(p), 1000);
    hilock_client *c2 = open_url(th_srv.url, 1000);
    CU_ASSERT_FATAL(c != NULL && c2 != NULL);
    hilock_lock *l = NULL, *other = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&other, c2, name) == 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 30000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, first_lease_ms), 0);
    th_proxy_hold_request(p, "redisson_lock__channel", 4500);
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0); /* the resend released it */
    int64_t released = th_now_ms() - t0;
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 30000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 30000), 0);
    int64_t end = th_now_ms() + 10000;
    while (th_proxy_fired(p) < 1 && th_now_ms() < end)
        th_sleep_ms(10);
    int64_t late_at = th_now_ms() - t0;
    CU_ASSERT_FATAL(th_proxy_fired(p) == 1);
    th_sleep_ms(100); /* the server has run the late copy */
    long long exists = th_redis_int(&th_srv, "EXISTS %s", name);
    int other_rc = hilock_lock_acquire(other, 0, 30000);
    printf("\n  (released hold's lease %lld ms) release resent and answered after %lld ms; "
           "late copy delivered at %lld ms: lock key exists %lld, another client's acquire %d "
           "(%s)\n",
           (long long)first_lease_ms, (long long)released, (long long)late_at, exists, other_rc,
           other_rc == 0 ? "GRANTED while the first holds it" : "refused");
    CU_ASSERT_EQUAL(exists, 1);
    CU_ASSERT_NOT_EQUAL(other_rc, 0);
    if (other_rc == 0)
        hilock_lock_release(other);
    CU_ASSERT_EQUAL(hilock_lock_release(l), other_rc == 0 ? HILOCK_ENOTOWNER : 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS %s", name), 0);
    hilock_lock_free(l);
    hilock_lock_free(other);
    hilock_client_close(c);
    hilock_client_close(c2);
    th_proxy_stop(p);
}

static void t_blocking_late_release_copy(void)
{
    blocking_late_release_copy("blate1", 30000);
}

/* The released hold had a 2 s lease: the resend's latch lived 3 s, the copy
 * comes at 4.5 s. */
static void t_blocking_late_release_copy_short_lease(void)
{
    blocking_late_release_copy("blate2", 2000);
}

/* hilock_async, issue 31 item 4 (d): a release whose reply comes back after
 * the command timeout, on its connection, which stays open. The release is
 * answered within its bounds; the same owner's next hold is whole when the
 * late reply arrives (hold count 1 asked three times: no later request reads
 * that reply as its own; another client refused; one release frees it). */
static void t_async_release_reply_late(void)
{
    const char *name = "alate-reply";
    th_proxy *p = th_proxy_start(th_srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_client *c = open_url(th_proxy_url(p), 300);
    hilock_client *o = open_url(th_srv.url, 1000);
    CU_ASSERT_FATAL(c != NULL && o != NULL);
    hilock_async *a = new_async();
    hilock_lock *l = NULL, *ol = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, name) == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&ol, o, name) == 0);
    res r = {0};
    int n = 0;
    /* twice: the scripts loaded, the pooled connection open */
    for (int i = 0; i < 2; i++) {
        CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 30000, on_done, &r) == 0);
        CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
        if (i == 0) {
            CU_ASSERT(hilock_async_release(a, l, 1, on_done, &r) == 0);
            CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
        }
    }
    th_proxy_late_reply(p, "redisson_unlock_latch", 1500);
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
    int release_rc = r.rc;
    int64_t answered = r.at - t0;
    CU_ASSERT(answered < 300 + 2000);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS %s", name), 0);
    /* the same owner takes it again before the late reply comes */
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 30000, on_done, &r) == 0);
    CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000) && r.rc == 0);
    int64_t end = th_now_ms() + 5000;
    while (th_proxy_fired(p) < 1 && th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, 20);
    int64_t late_at = th_now_ms() - t0;
    CU_ASSERT_EQUAL(th_proxy_fired(p), 1);
    int counts_ok = 1;
    for (int i = 0; i < 3; i++) {
        CU_ASSERT(hilock_async_query(a, l, HILOCK_QUERY_HOLD_COUNT, 1, on_done, &r) == 0);
        CU_ASSERT_FATAL(run_until(a, &r, ++n, 5000));
        counts_ok &= r.rc == 0 && r.value == 1;
    }
    int orc = hilock_lock_acquire(ol, 0, 30000);
    printf("\n  release answered %d after %lld ms; late reply delivered (or its connection "
           "closed) at %lld ms; the later "
           "hold's count 1 three times: %d; another client's acquire: %d\n",
           release_rc, (long long)answered, (long long)late_at, counts_ok, orc);
    CU_ASSERT(counts_ok);
    CU_ASSERT_EQUAL(orc, HILOCK_ETIMEDOUT);
    if (orc == 0)
        hilock_lock_release(ol);
    CU_ASSERT(hilock_async_release(a, l, 1, on_done, &r) == 0);
    CU_ASSERT(run_until(a, &r, ++n, 5000) && r.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS %s", name), 0);
    hilock_lock_free(l);
    hilock_lock_free(ol);
    free_async(a);
    hilock_client_close(c);
    hilock_client_close(o);
    th_proxy_stop(p);
}

static void count_lost_cb(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)l;
    (void)tid;
    __atomic_add_fetch((int *)payload, 1, __ATOMIC_SEQ_CST);
}

static int lost_cb_seen(void *p) { return __atomic_load_n((int *)p, __ATOMIC_SEQ_CST) > 0; }

/* A watchdog grant whose reply came after its whole lease: the watchdog
 * thread finds it lost at once, while the acquiring thread is still
 * registering the hold's channel listener (hl_wd_add). The report freed the
 * hold under the registration, which then wrote into it (valgrind: invalid
 * write in hl_wd_add, test_multilock under load in a clean-clone run).
 * Repeated so the two threads meet in that window; each grant is reported
 * lost once and the next acquire works. */
static void t_blocking_grant_lost_while_registering(void)
{
    th_proxy *p = th_proxy_start(th_srv.port);
    CU_ASSERT_FATAL(p != NULL);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = 3000;
    o.connect_timeout_ms = 1000;
    o.watchdog_lease_ms = 150;
    hilock_client *c = NULL;
    CU_ASSERT_FATAL(hilock_client_open(&c, th_proxy_url(p), &o, NULL, 0) == 0);
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "slost-reg") == 0);
    int lost = 0;
    hilock_lock_set_lost_callback(l, count_lost_cb, &lost);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 30000), 0); /* scripts, connections */
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    int granted = 0, told = 0;
    for (int i = 0; i < 12; i++) {
        __atomic_store_n(&lost, 0, __ATOMIC_SEQ_CST);
        int fired = th_proxy_fired(p);
        th_proxy_late_reply(p, "slost-reg", 250);
        int64_t t0 = th_now_ms();
        int rc = hilock_lock_acquire(l, 0, HILOCK_LEASE_WATCHDOG);
        /* the one-shot rule delays the first matching command: the grant
         * (its reply 250 ms late, past the 150 ms lease) or, when another
         * command of that name went first, that one */
        int late = rc == 0 && th_now_ms() - t0 >= 250 && th_proxy_fired(p) > fired;
        if (late) {
            granted++;
            told += th_wait_for(lost_cb_seen, &lost, 3000);
        }
        if (rc == 0)
            hilock_lock_release(l); /* not owner when it was lost */
        int64_t end = th_now_ms() + 3000; /* the rule used up before the next */
        while (th_proxy_fired(p) == fired && th_now_ms() < end)
            th_sleep_ms(5);
        th_redis_int(&th_srv, "DEL slost-reg");
    }
    printf("\n  grants answered after their lease: %d of 12, each told lost: %d\n", granted,
           told);
    CU_ASSERT(granted > 0);
    CU_ASSERT_EQUAL(told, granted);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 30000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    hilock_client_close(c);
    th_proxy_stop(p);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("settles under faults", th_srv_init, th_srv_clean);
    CU_add_test(s, "blocking: late grant then reset is given back, no crash",
                t_blocking_late_grant_then_reset);
    CU_add_test(s, "hilock_async: late grant then reset is given back",
                t_async_late_grant_then_reset);
    CU_add_test(s, "hilock_async: a release reply later than the timeout, then delivered",
                t_async_release_reply_late);
    CU_add_test(s, "blocking: a late release copy past its latch lifetime leaves a later hold",
                t_blocking_late_release_copy);
    CU_add_test(s, "blocking: a late release copy past every latch lifetime leaves a later hold",
                t_blocking_late_release_copy_short_lease);
    CU_add_test(s, "blocking: a grant found lost while its listener registers",
                t_blocking_grant_lost_while_registering);
    return th_cu_run();
}
