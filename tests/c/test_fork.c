/*
 * fork() while the client's threads are busy: the watchdog thread parked
 * in a condition wait and the pub/sub listener running. The child must get
 * HILOCK_ECLOSED and be able to free everything without hanging (destroying
 * a condition variable the parent's threads waited on would block forever),
 * and the parent must carry on.
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"

static th_redis srv;

static int init_suite(void)
{
    return th_redis_start(&srv, NULL);
}

static int clean_suite(void)
{
    th_redis_stop(&srv);
    return 0;
}

typedef struct {
    hilock_lock *lock;
    int rc;
} waiter_arg;

static void *waiter_main(void *p)
{
    waiter_arg *w = p;
    w->rc = hilock_lock_acquire_tid(w->lock, 77, 20000, 5000);
    return NULL;
}

static void t_fork_busy_client(void)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.watchdog_lease_ms = 900;
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, srv.url, &o, NULL, 0), 0);
    hilock_lock *l = NULL;
    hilock_lock_new(&l, c, "busy");
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(l, 0, 0), 0); /* watchdog thread runs */
    waiter_arg w = {l, -100};
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w); /* listener thread runs */
    CU_ASSERT(th_wait_numsub(&srv, "redisson_lock__channel:{busy}", 1, 5000));

    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int bad = 0;
        int x;
        if (hilock_lock_is_locked(&x, l) != HILOCK_ECLOSED)
            bad |= 1;
        hilock_lock_free(l);
        hilock_client_close(c);
        /* Report through exec: memory the parent's threads owned at fork
         * (the waiter's connection in use) is unreachable in the child by
         * nature, and valgrind would count it as the child's leak at exit. */
        char code[32];
        snprintf(code, sizeof code, "exit %d", bad);
        execl("/bin/sh", "sh", "-c", code, (char *)NULL);
        _exit(100);
    }
    int status = 0;
    int64_t end = th_now_ms() + 10000;
    pid_t got = 0;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && th_now_ms() < end)
        th_sleep_ms(10);
    if (got == 0) { /* hung: fail, and do not leave it behind */
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        CU_FAIL("child hung freeing the inherited client");
    } else {
        CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    /* the parent is unaffected: the watchdog kept the lock past its lease,
     * and the waiter gets it after the release */
    int held = 0;
    CU_ASSERT_EQUAL(hilock_lock_is_held(&held, l), 0);
    CU_ASSERT_EQUAL(held, 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(w.rc, 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 77), 0);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* A child the process starts (fork + exec: hilock run's command, a server
 * the application runs) keeps none of the blocking client's sockets: after
 * hilock_client_close the server has no connection of it left, and no
 * subscription of its watchdog's listener. Before, hiredis's sockets were
 * inherited (no close-on-exec), so the exec'd child kept every connection
 * open, subscriptions included, for as long as it ran. */
static void t_exec_child_keeps_no_connection(void)
{
    const char *channel = "redisson_lock__channel:{fcloexec}";
    long long before = th_redis_clients(&srv);
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, srv.url, NULL, NULL, 0), 0);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "fcloexec"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(l, 0, HILOCK_LEASE_WATCHDOG), 0);
    /* the hold listens on its channel */
    CU_ASSERT_FATAL(th_wait_numsub(&srv, channel, 1, 5000));
    pid_t child = fork();
    if (child == 0) {
        execlp("sleep", "sleep", "30", (char *)NULL);
        _exit(127);
    }
    CU_ASSERT_FATAL(child > 0);
    hilock_lock_free(l);
    hilock_client_close(c); /* its connections closed; the hold ends at its lease */
    long long subs = 1, conns = 1;
    int64_t end = th_now_ms() + 3000;
    while (((subs = th_redis_numsub(&srv, channel)) != 0 ||
            (conns = th_redis_clients(&srv)) != before) &&
           th_now_ms() < end)
        th_sleep_ms(20);
    printf("\n  client closed, an exec'd child running: %lld subscriber(s), %lld connection(s) "
           "left (%lld before)\n",
           subs, conns, before);
    CU_ASSERT_EQUAL(subs, 0);
    CU_ASSERT_EQUAL(conns, before);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    th_redis_int(&srv, "DEL fcloexec");
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("fork", init_suite, clean_suite);
    CU_add_test(s, "fork while watchdog and listener run", t_fork_busy_client);
    CU_add_test(s, "an exec'd child keeps none of the client's connections",
                t_exec_child_keeps_no_connection);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
