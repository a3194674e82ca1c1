/*
 * Thread stress for ThreadSanitizer (suite c-tsan; also run by the plain and
 * ASan suites): shared lock, fair lock and multi-lock handles used by several
 * threads at once while a chaos thread kills pub/sub and pooled connections
 * (CLIENT KILL), flushes the script cache (SCRIPT FLUSH), pauses the server
 * (CLIENT PAUSE) and deletes held locks so the watchdog reports losses to
 * callbacks that call back into the library; at the end a client is closed
 * while threads wait on it.
 *
 * Checks: every call returns an expected code, loss callbacks run, waiters
 * return once their client is closed, nothing hangs. Data races are for
 * TSan to find (a report makes the process exit non-zero).
 * Duration: HILOCK_STRESS_SECONDS (default 6).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"

static th_redis srv;
static atomic_int stop_flag;
static atomic_int failures;
static atomic_int ops;
static atomic_int lost_calls, multi_lost_calls;

#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, "stress: " __VA_ARGS__);                                           \
        fputc('\n', stderr);                                                               \
        atomic_fetch_add(&failures, 1);                                                    \
    } while (0)

/* Codes a call may return while the chaos thread disturbs the server. */
static int expected(int rc)
{
    return rc == 0 || rc == HILOCK_ETIMEDOUT || rc == HILOCK_ECONN || rc == HILOCK_ENOTOWNER;
}

static void check(const char *what, int rc, const char *msg)
{
    atomic_fetch_add(&ops, 1);
    if (!expected(rc))
        FAIL("%s: unexpected %d (%s): %s", what, rc, hilock_strerror(rc), msg);
}

static hilock_client *open_client(int64_t wd_lease)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = wd_lease;
    o.command_timeout_ms = 1000;
    o.pool_size = 4;
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, srv.url, &o, err, sizeof err);
    if (rc)
        FAIL("open: %s (%s)", hilock_strerror(rc), err);
    return c;
}

/* ---- loss callbacks: they call the library back ---- */

static void on_lost(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)payload;
    atomic_fetch_add(&lost_calls, 1);
    if (!hilock_lock_is_lost_tid(l, tid))
        FAIL("lost callback: is_lost_tid is 0");
    (void)strlen(hilock_lock_errmsg(l));
    int held = -1;
    int rc = hilock_lock_is_held_tid(&held, l, tid);
    check("is_held in callback", rc, hilock_lock_errmsg(l));
}

static void on_multi_lost(hilock_multilock *m, uint64_t tid, void *payload)
{
    (void)tid;
    (void)payload;
    atomic_fetch_add(&multi_lost_calls, 1);
    (void)hilock_multilock_is_lost(m);
    (void)strlen(hilock_multilock_errmsg(m));
}

/* ---- workers ---- */

typedef struct worker {
    int kind;
    hilock_lock *lock;
    hilock_multilock *multi;
    hilock_client *client;
    unsigned seed;
} worker;

static void *lock_worker(void *arg)
{
    worker *w = arg;
    while (!atomic_load(&stop_flag)) {
        int64_t lease = rand_r(&w->seed) % 2 ? 0 : 1500; /* watchdog or fixed */
        int rc = hilock_lock_acquire(w->lock, 200, lease);
        check("acquire", rc, hilock_lock_errmsg(w->lock));
        if (rc == 0) {
            int64_t n = 0;
            check("hold_count", hilock_lock_hold_count(&n, w->lock), hilock_lock_errmsg(w->lock));
            if (rand_r(&w->seed) % 4 == 0) { /* re-enter once */
                rc = hilock_lock_acquire(w->lock, 0, lease);
                check("re-acquire", rc, hilock_lock_errmsg(w->lock));
                if (rc == 0)
                    check("inner release", hilock_lock_release(w->lock),
                          hilock_lock_errmsg(w->lock));
            }
            check("release", hilock_lock_release(w->lock), hilock_lock_errmsg(w->lock));
        }
    }
    return NULL;
}

static void *multi_worker(void *arg)
{
    worker *w = arg;
    while (!atomic_load(&stop_flag)) {
        int watchdog = rand_r(&w->seed) % 2;
        int rc = hilock_multilock_acquire(w->multi, 200, watchdog ? 0 : 1500);
        check("multi acquire", rc, hilock_multilock_errmsg(w->multi));
        if (rc == 0) {
            if (watchdog) /* long enough for a renewal: the chaos may take m2 away */
                th_sleep_ms(200 + rand_r(&w->seed) % 300);
            int64_t v = 0;
            check("validity", hilock_multilock_validity_ms(&v, w->multi), "");
            check("multi release", hilock_multilock_release(w->multi),
                  hilock_multilock_errmsg(w->multi));
        }
    }
    return NULL;
}

static void *query_worker(void *arg)
{
    worker *w = arg;
    while (!atomic_load(&stop_flag)) {
        int x = 0;
        int64_t v = 0;
        check("is_locked", hilock_lock_is_locked(&x, w->lock), hilock_lock_errmsg(w->lock));
        check("remaining", hilock_lock_remaining_ms(&v, w->lock), hilock_lock_errmsg(w->lock));
        (void)hilock_lock_is_lost(w->lock);
        (void)strlen(hilock_client_errmsg(w->client));
        (void)strlen(hilock_lock_errmsg(w->lock));
        /* a failure without a round trip, racing the others' messages */
        if (hilock_lock_is_held(NULL, w->lock) != HILOCK_EINVAL)
            FAIL("is_held(NULL) not EINVAL");
    }
    return NULL;
}

/* Holds a watchdog lock the chaos thread deletes: the watchdog reports it. */
static void *victim_worker(void *arg)
{
    worker *w = arg;
    while (!atomic_load(&stop_flag)) {
        int rc = hilock_lock_acquire(w->lock, 200, 0);
        check("victim acquire", rc, hilock_lock_errmsg(w->lock));
        if (rc == 0) {
            th_sleep_ms(400 + rand_r(&w->seed) % 400);
            rc = hilock_lock_release(w->lock); /* ENOTOWNER once lost */
            check("victim release", rc, hilock_lock_errmsg(w->lock));
        }
    }
    return NULL;
}

static void chaos_cmd(redisContext *ctx, const char *cmd)
{
    redisReply *r = redisCommand(ctx, cmd);
    if (r)
        freeReplyObject(r);
}

static void *chaos(void *arg)
{
    (void)arg;
    unsigned seed = 12345;
    redisContext *ctx = th_redis_connect(&srv);
    if (!ctx) {
        FAIL("chaos: cannot connect");
        return NULL;
    }
    while (!atomic_load(&stop_flag)) {
        th_sleep_ms(150 + rand_r(&seed) % 150);
        switch (rand_r(&seed) % 6) {
        case 0: chaos_cmd(ctx, "CLIENT KILL TYPE pubsub"); break;
        case 1: chaos_cmd(ctx, "CLIENT KILL TYPE normal"); break; /* skips this one */
        case 2: chaos_cmd(ctx, "SCRIPT FLUSH"); break;
        case 3: chaos_cmd(ctx, "CLIENT PAUSE 150"); break;
        default: chaos_cmd(ctx, "DEL stress:victim stress:m2"); break;
        }
    }
    chaos_cmd(ctx, "CLIENT UNPAUSE");
    redisFree(ctx);
    return NULL;
}

/* ---- close while waiting ---- */

typedef struct waiter {
    hilock_lock *lock;
    int rc;
    atomic_int done;
} waiter;

static void *wait_forever(void *arg)
{
    waiter *w = arg;
    w->rc = hilock_lock_acquire_tid(w->lock, 777, -1, 10000);
    atomic_store(&w->done, 1);
    return NULL;
}

static int all_done(void *arg)
{
    waiter *ws = arg;
    for (int i = 0; i < 3; i++)
        if (!atomic_load(&ws[i].done))
            return 0;
    return 1;
}

static void close_while_waiting(void)
{
    hilock_client *holder = open_client(900), *c = open_client(900);
    if (!holder || !c)
        return;
    hilock_lock *hl = NULL, *l = NULL;
    hilock_lock_new(&hl, holder, "stress:closing");
    hilock_lock_new(&l, c, "stress:closing");
    if (hilock_lock_acquire(hl, 0, 30000) != 0)
        FAIL("close-while-waiting: holder could not acquire");
    waiter ws[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        ws[i].lock = l;
        ws[i].rc = 99;
        atomic_store(&ws[i].done, 0);
        pthread_create(&th[i], NULL, wait_forever, &ws[i]);
    }
    th_sleep_ms(300); /* they are subscribed and waiting */
    hilock_client_close(c);
    if (!th_wait_for(all_done, ws, 5000)) {
        fprintf(stderr, "stress: waiters did not return after close: hang\n");
        _exit(3);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        if (ws[i].rc != HILOCK_ECLOSED && ws[i].rc != HILOCK_ECONN)
            FAIL("waiter after close returned %d (%s)", ws[i].rc, hilock_strerror(ws[i].rc));
    }
    hilock_lock_free(l);
    hilock_lock_release(hl);
    hilock_lock_free(hl);
    hilock_client_close(holder);
}

int main(void)
{
    if (th_redis_start(&srv, NULL) != 0) {
        fprintf(stderr, "stress: cannot start redis-server\n");
        return 2;
    }
    const char *secs = getenv("HILOCK_STRESS_SECONDS");
    int seconds = secs ? atoi(secs) : 6;
    if (seconds <= 0)
        seconds = 6;

    hilock_client *a = open_client(900), *b = open_client(900);
    if (!a || !b)
        return 1;
    hilock_lock *shared = NULL, *fair = NULL, *victim = NULL, *m1 = NULL, *m2 = NULL,
                *shared_b = NULL;
    hilock_lock_new(&shared, a, "stress:shared");
    hilock_lock_new(&shared_b, b, "stress:shared"); /* contention from another client */
    hilock_fair_lock_new(&fair, a, "stress:fair");
    hilock_lock_new(&victim, a, "stress:victim");
    hilock_lock_new(&m1, a, "stress:m1");
    hilock_fair_lock_new(&m2, b, "stress:m2");
    hilock_lock_set_lost_callback(victim, on_lost, NULL);
    hilock_lock_set_lost_callback(m2, on_lost, NULL);
    hilock_lock *members[2] = {m1, m2};
    hilock_multilock *multi = NULL;
    if (hilock_multilock_new(&multi, members, 2) != 0)
        return 1;
    hilock_multilock_set_lost_callback(multi, on_multi_lost, NULL);

    worker ws[] = {
        {0, shared, NULL, a, 1}, {0, shared, NULL, a, 2}, {0, shared_b, NULL, b, 3},
        {0, fair, NULL, a, 4},   {0, fair, NULL, a, 5},   {1, NULL, multi, a, 6},
        {1, NULL, multi, a, 7},  {2, shared, NULL, a, 8}, {3, victim, NULL, a, 9},
    };
    enum { NW = sizeof ws / sizeof ws[0] };
    pthread_t th[NW], ch;
    for (int i = 0; i < NW; i++) {
        void *(*fn)(void *) = ws[i].kind == 0   ? lock_worker
                              : ws[i].kind == 1 ? multi_worker
                              : ws[i].kind == 2 ? query_worker
                                                : victim_worker;
        pthread_create(&th[i], NULL, fn, &ws[i]);
    }
    pthread_create(&ch, NULL, chaos, NULL);
    th_sleep_ms((int64_t)seconds * 1000);
    atomic_store(&stop_flag, 1);
    pthread_join(ch, NULL);
    for (int i = 0; i < NW; i++)
        pthread_join(th[i], NULL);

    close_while_waiting();

    hilock_multilock_free(multi);
    hilock_lock_free(shared);
    hilock_lock_free(shared_b);
    hilock_lock_free(fair);
    hilock_lock_free(victim);
    hilock_lock_free(m1);
    hilock_lock_free(m2);
    hilock_client_close(a);
    hilock_client_close(b);
    th_redis_stop(&srv);

    printf("stress: %d calls in %d s, %d loss callbacks (%d multi-lock), %d failures\n",
           atomic_load(&ops), seconds, atomic_load(&lost_calls),
           atomic_load(&multi_lost_calls), atomic_load(&failures));
    if (atomic_load(&lost_calls) == 0)
        FAIL("no loss was ever reported (the chaos thread deletes held locks)");
    return atomic_load(&failures) ? 1 : 0;
}
