/*
 * Safety of the host process (issue 15): no SIGPIPE reaches it from any
 * thread that writes; a failed renewal pass is reported.
 *
 * This program deliberately keeps SIGPIPE at its default disposition
 * (terminate): a SIGPIPE escaping the library kills the test.
 */
#include <CUnit/Basic.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"
#include "internal.h"

static th_redis usrv; /* unix socket (and TCP) */
static char usock[128];
static char uurl[200];

static hilock_client *open_url(const char *url, int64_t wd_lease, int64_t cmd_timeout)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = wd_lease;
    o.command_timeout_ms = cmd_timeout;
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, url, &o, err, sizeof err);
    if (rc != 0)
        printf("\n  open %s: %s (%s)\n", url, hilock_strerror(rc), err);
    return c;
}

static hilock_lock *new_lock(hilock_client *c, const char *name)
{
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL(hilock_lock_new(&l, c, name), 0);
    return l;
}

/* SIGPIPE is still at its default disposition and not blocked here. */
static void assert_sigpipe_untouched(void)
{
    struct sigaction sa;
    CU_ASSERT_EQUAL(sigaction(SIGPIPE, NULL, &sa), 0);
    CU_ASSERT(sa.sa_handler == SIG_DFL);
    sigset_t cur;
    CU_ASSERT_EQUAL(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
    CU_ASSERT_FALSE(sigismember(&cur, SIGPIPE));
    sigset_t pend;
    sigpending(&pend);
    CU_ASSERT_FALSE(sigismember(&pend, SIGPIPE));
}

/* ---------------------------------------------------------------- item 1 */

/* The server restarts under an idle pooled unix-socket connection: the next
 * acquire writes into a socket whose peer is gone (EPIPE). Before the fix
 * the process died of SIGPIPE (exit 141). */
static void t_sigpipe_caller_thread(void)
{
    assert_sigpipe_untouched();
    hilock_client *c = open_url(uurl, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = new_lock(c, "sigpipe-caller");
    for (int round = 0; round < 3; round++) {
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
        CU_ASSERT_EQUAL(hilock_lock_release(l), 0); /* connection back to the pool */
        CU_ASSERT_EQUAL_FATAL(th_redis_restart(&usrv), 0);
        /* the stale connection fails on write; the library reconnects */
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
        CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
        CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ENOTOWNER);
        CU_ASSERT_EQUAL_FATAL(th_redis_restart(&usrv), 0);
    }
    assert_sigpipe_untouched();
    hilock_lock_free(l);
    hilock_client_close(c);
}

static int lost_flag(void *arg)
{
    return hilock_lock_is_lost(arg);
}

/* The watchdog thread's renewal writes on a connection whose server went
 * away: that thread must not take the process down either. */
static void t_sigpipe_watchdog_thread(void)
{
    hilock_client *c = open_url(uurl, 300, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = new_lock(c, "sigpipe-watchdog");
    hilock_lock *l2 = new_lock(c, "sigpipe-watchdog-2");
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l2, 0, 0), 0);
    th_sleep_ms(150); /* a renewal or two: the watchdog owns a pooled connection */
    CU_ASSERT_EQUAL_FATAL(th_redis_restart(&usrv), 0);
    /* the restarted server is empty: the next renewal finds the lock gone */
    CU_ASSERT(th_wait_for(lost_flag, l, 3000));
    CU_ASSERT(th_wait_for(lost_flag, l2, 3000));
    assert_sigpipe_untouched();
    hilock_lock_free(l);
    hilock_lock_free(l2);
    hilock_client_close(c);
}

/* ---------------------------------------------------------------- item 6 */

static int client_err_set(void *arg)
{
    return hilock_client_errmsg(arg)[0] != 0;
}

/* Two watched locks on one server; the server hangs: the failed renewal
 * pass is reported in hilock_client_errmsg (it used to be reported only
 * when every command failed on its own node, i.e. with one lock). */
static void t_failed_renewal_reported(void)
{
    th_redis tsrv;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&tsrv, NULL), 0);
    hilock_client *c = open_url(tsrv.url, 300, 150);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *a = new_lock(c, "renew-a"), *b = new_lock(c, "renew-b");
    CU_ASSERT_EQUAL(hilock_lock_acquire(a, 0, 0), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(b, 0, 0), 0);
    CU_ASSERT_STRING_EQUAL(hilock_client_errmsg(c), "");
    th_redis_pause(&tsrv);
    int reported = th_wait_for(client_err_set, c, 2000);
    th_redis_resume(&tsrv);
    CU_ASSERT(reported);
    if (reported)
        printf("\n  reported: %s\n", hilock_client_errmsg(c));
    /* a transport error is not loss */
    CU_ASSERT_FALSE(hilock_lock_is_lost(a));
    CU_ASSERT_FALSE(hilock_lock_is_lost(b));
    CU_ASSERT_EQUAL(hilock_lock_release(a), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(b), 0);
    hilock_lock_free(a);
    hilock_lock_free(b);
    hilock_client_close(c);
    th_redis_stop(&tsrv);
}


/* ---------------------------------------------------------------- main */

static int init(void)
{
    snprintf(usock, sizeof usock, "/tmp/hilock-safety-%d.sock", (int)getpid());
    char extra[300];
    snprintf(extra, sizeof extra, "--unixsocket %s --unixsocketperm 700", usock);
    if (th_redis_start(&usrv, extra) != 0)
        return -1;
    snprintf(uurl, sizeof uurl, "unix://%s", usock);
    return 0;
}

static int cleanup(void)
{
    th_redis_stop(&usrv);
    unlink(usock);
    return 0;
}

static const char *only; /* argv[1]: run only the tests whose name contains it */

static void add(CU_pSuite s, const char *name, CU_TestFunc fn)
{
    if (!only || strstr(name, only))
        CU_add_test(s, name, fn);
}

int main(int argc, char **argv)
{
    /* no signal(SIGPIPE, SIG_IGN) here: that is the point */
    only = argc > 1 ? argv[1] : NULL;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("safety", init, cleanup);
    add(s, "SIGPIPE: caller thread, server restarted under pool", t_sigpipe_caller_thread);
    add(s, "SIGPIPE: watchdog thread renewal", t_sigpipe_watchdog_thread);
    add(s, "failed renewal pass with 2 locks is reported", t_failed_renewal_reported);
    return th_cu_run();
}
