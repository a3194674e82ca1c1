/*
 * Cancellation latency: from the hilock_lock_cancel call to the cancelled
 * acquire returning HILOCK_ECANCELED, on a reentrant and a fair lock.
 *
 *   cancel_bench [-n rounds] URL
 *
 * Per round: a holder keeps the lock; a waiter thread calls
 * hilock_lock_acquire_tid(wait forever / 60 s); the main thread sees it
 * really waiting on the server (reentrant: subscribed, PUBSUB NUMSUB; fair:
 * queued, LLEN), reads CLOCK_MONOTONIC, calls hilock_lock_cancel; the waiter
 * reads the clock when its acquire returns. A fair waiter leaves the queue
 * (one round trip) before returning, so the same run measures the PING round
 * trip on one connection as its floor. Prints "name=value" lines.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "hilock.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void nap(void)
{
    struct timespec ts = {0, 100000L};
    nanosleep(&ts, NULL);
}

typedef struct {
    hilock_lock *l;
    int fair;
    int go, done; /* atomic */
    int rc;
    int64_t t_ret;
    sem_t returned; /* posted after each acquire returned (no spinning: 2 shared cores) */
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    for (int i = 0;; i++) {
        int go;
        while ((go = __atomic_load_n(&w->go, __ATOMIC_ACQUIRE)) == i)
            nap();
        if (go < 0)
            return NULL;
        w->rc = hilock_lock_acquire_tid(w->l, 2, w->fair ? 60000 : -1, 60000);
        w->t_ret = now_ns();
        sem_post(&w->returned);
        if (w->rc == 0)
            hilock_lock_release_tid(w->l, 2);
        __atomic_store_n(&w->done, i + 1, __ATOMIC_RELEASE);
    }
}

static long long waiting(redisContext *ctx, int fair, const char *key)
{
    redisReply *r = fair ? redisCommand(ctx, "LLEN %s", key)
                         : redisCommand(ctx, "PUBSUB NUMSUB %s", key);
    long long v = -1;
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[1]->type == REDIS_REPLY_INTEGER)
        v = r->element[1]->integer;
    freeReplyObject(r);
    return v;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void report(const char *name, int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp64);
    printf("%s_samples=%d\n%s_p50_us=%.1f\n%s_p90_us=%.1f\n%s_p99_us=%.1f\n%s_max_us=%.1f\n", name,
           n, name, v[n / 2] / 1e3, name, v[n * 9 / 10] / 1e3, name, v[n * 99 / 100] / 1e3, name,
           v[n - 1] / 1e3);
}

static int run(hilock_client *c, redisContext *ctx, int fair, int n, int64_t *lat)
{
    const char *name = fair ? "bench-cancel-fair" : "bench-cancel";
    hilock_lock *l = NULL;
    if ((fair ? hilock_fair_lock_new(&l, c, name) : hilock_lock_new(&l, c, name)) != 0 ||
        hilock_lock_acquire_tid(l, 1, 0, 600000) != 0)
        return -1;
    char key[512];
    if (fair)
        snprintf(key, sizeof key, "redisson_lock_queue:{%s}", name);
    else
        snprintf(key, sizeof key, "redisson_lock__channel:{%s}", name);
    waiter w = {l, fair, 0, 0, 0, 0, {{0}}};
    sem_init(&w.returned, 0, 0);
    pthread_t th;
    pthread_create(&th, NULL, waiter_main, &w);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        __atomic_store_n(&w.go, i + 1, __ATOMIC_RELEASE);
        while (waiting(ctx, fair, key) != 1)
            nap();
        int found = 0;
        int64_t t0 = now_ns();
        hilock_lock_cancel(&found, l, 2);
        while (sem_wait(&w.returned) != 0) {
        }
        while (__atomic_load_n(&w.done, __ATOMIC_ACQUIRE) <= i)
            nap();
        bad += !found || w.rc != HILOCK_ECANCELED;
        lat[i] = w.t_ret - t0;
        while (!fair && waiting(ctx, 0, key) != 0) /* unsubscribed before the next round */
            nap();
    }
    __atomic_store_n(&w.go, -1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    sem_destroy(&w.returned);
    hilock_lock_release_tid(l, 1);
    hilock_lock_free(l);
    return bad;
}

int main(int argc, char **argv)
{
    int n = 1000, o;
    while ((o = getopt(argc, argv, "n:")) != -1)
        if (o == 'n')
            n = atoi(optarg);
    if (optind >= argc || n < 10) {
        fprintf(stderr, "usage: cancel_bench [-n rounds>=10] URL\n");
        return 2;
    }
    hilock_client *c = NULL;
    char err[256] = "";
    if (hilock_client_open(&c, argv[optind], NULL, err, sizeof err) != 0) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    const char *hp = strstr(argv[optind], "://");
    char host[128] = "127.0.0.1";
    int port = 6379;
    if (hp)
        sscanf(hp + 3, "%127[^:]:%d", host, &port);
    redisContext *ctx = redisConnect(host, port);
    if (!ctx || ctx->err)
        return 1;
    int64_t *lat = calloc((size_t)n, sizeof *lat);
    int bad = run(c, ctx, 0, n, lat);
    report("reentrant_cancel", lat, n);
    bad += run(c, ctx, 1, n, lat);
    report("fair_cancel", lat, n);
    for (int i = 0; i < n; i++) { /* the floor: one round trip */
        int64_t t0 = now_ns();
        freeReplyObject(redisCommand(ctx, "PING"));
        lat[i] = now_ns() - t0;
    }
    report("ping_rtt", lat, n);
    printf("not_cancelled=%d\n", bad);
    free(lat);
    redisFree(ctx);
    hilock_client_close(c);
    return bad ? 1 : 0;
}
