/*
 * Uncontended lock+unlock pairs per second through the non-blocking API
 * (hilock_async on the epoll adapter, one thread) next to the blocking API,
 * same client, same server, interleaved round by round:
 *
 *   async_bench [-n pairs] [-r rounds] [-c concurrency] redis://127.0.0.1:PORT
 *
 *   blocking   hilock_lock_acquire_tid(l, 1, 0, 30000) + release, one thread
 *   async1     hilock_async_acquire + hilock_async_release of one owner, the
 *              next pair started from the release's completion (one in flight)
 *   asyncC     C owners (thread ids) of C lock names at once on one loop,
 *              each restarting from its own completion: their commands share
 *              the pipelined connection
 *
 * Prints "name=value" lines: the median over rounds of each series' pairs/s
 * and the medians of the per-round ratios async1/blocking and
 * asyncC/blocking.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hilock.h"
#include "hilock/adapters/epoll.h"
#include "bench_util.h"

typedef struct owner {
    hilock_async *a;
    hilock_lock *l;
    uint64_t tid;
    int left;     /* pairs still to do */
    int *active;  /* owners not finished */
    int failed;
} owner;

static void released(hilock_async *a, int rc, int64_t v, void *p);
static void granted(hilock_async *a, int rc, int64_t v, void *p);

static void start(owner *o)
{
    if (o->left-- <= 0) {
        (*o->active)--;
        return;
    }
    if (hilock_async_acquire(o->a, o->l, o->tid, 0, 30000, granted, o) != 0) {
        o->failed = 1;
        (*o->active)--;
    }
}

static void granted(hilock_async *a, int rc, int64_t v, void *p)
{
    (void)v;
    owner *o = p;
    if (rc != 0 || hilock_async_release(a, o->l, o->tid, released, o) != 0) {
        o->failed = 1;
        (*o->active)--;
    }
}

static void released(hilock_async *a, int rc, int64_t v, void *p)
{
    (void)a, (void)v;
    owner *o = p;
    if (rc != 0) {
        o->failed = 1;
        (*o->active)--;
        return;
    }
    start(o);
}

/* pairs/s of c owners doing n pairs in all on one loop; -1 on failure */
static double run_async(hilock_epoll *ep, hilock_async *a, hilock_lock **locks, int c, int n)
{
    owner *os = calloc((size_t)c, sizeof *os);
    int active = c;
    int64_t t0 = now_ns();
    for (int i = 0; i < c; i++) {
        os[i] = (owner){a, locks[i], 1000 + (uint64_t)i, n / c, &active, 0};
        start(&os[i]);
    }
    while (active > 0)
        hilock_epoll_run_once(ep, a, 1000);
    int64_t dt = now_ns() - t0;
    int failed = 0;
    for (int i = 0; i < c; i++)
        failed |= os[i].failed;
    free(os);
    return failed ? -1 : (double)(n / c * c) * 1e9 / (double)dt;
}

static double run_blocking(hilock_lock *l, int n)
{
    int64_t t0 = now_ns();
    for (int i = 0; i < n; i++)
        if (hilock_lock_acquire_tid(l, 1, 0, 30000) != 0 || hilock_lock_release_tid(l, 1) != 0)
            return -1;
    return (double)n * 1e9 / (double)(now_ns() - t0);
}

int main(int argc, char **argv)
{
    int n = 2000, rounds = 5, c = 16, opt;
    while ((opt = getopt(argc, argv, "n:r:c:")) != -1) {
        if (opt == 'n')
            n = atoi(optarg);
        else if (opt == 'r')
            rounds = atoi(optarg);
        else if (opt == 'c')
            c = atoi(optarg);
        else
            return 2;
    }
    if (optind >= argc || n <= 0 || rounds <= 0 || c <= 0 || c > 1024) {
        fprintf(stderr, "usage: %s [-n pairs] [-r rounds] [-c concurrency] URL\n", argv[0]);
        return 2;
    }
    hilock_client *cl = bench_open(argv[optind]);
    hilock_lock **locks = calloc((size_t)c, sizeof *locks);
    for (int i = 0; i < c; i++) {
        char name[64];
        snprintf(name, sizeof name, "bench:async:%d", i);
        hilock_lock_new(&locks[i], cl, name);
    }
    hilock_epoll ep;
    hilock_epoll_init(&ep);
    hilock_async_loop loop = hilock_epoll_loop(&ep);
    hilock_async *a;
    hilock_async_new(&a, &loop);
    run_async(&ep, a, locks, 1, 100); /* connect, load the scripts */
    run_blocking(locks[0], 100);
    double *b = calloc((size_t)rounds, sizeof *b), *a1 = calloc((size_t)rounds, sizeof *a1),
           *ac = calloc((size_t)rounds, sizeof *ac), *r1 = calloc((size_t)rounds, sizeof *r1),
           *rc = calloc((size_t)rounds, sizeof *rc);
    for (int r = 0; r < rounds; r++) {
        b[r] = run_blocking(locks[0], n);
        a1[r] = run_async(&ep, a, locks, 1, n);
        ac[r] = run_async(&ep, a, locks, c, n);
        if (b[r] <= 0 || a1[r] <= 0 || ac[r] <= 0) {
            fprintf(stderr, "round %d failed\n", r);
            return 1;
        }
        r1[r] = a1[r] / b[r];
        rc[r] = ac[r] / b[r];
    }
    printf("blocking_pairs_per_s=%.0f\n", median(b, rounds));
    printf("async1_pairs_per_s=%.0f\n", median(a1, rounds));
    printf("async%d_pairs_per_s=%.0f\n", c, median(ac, rounds));
    printf("async1_over_blocking=%.2f\n", median(r1, rounds));
    printf("async%d_over_blocking=%.2f\n", c, median(rc, rounds));
    hilock_async_free(a);
    hilock_epoll_close(&ep);
    for (int i = 0; i < c; i++)
        hilock_lock_free(locks[i]);
    hilock_client_close(cl);
    free(locks), free(b), free(a1), free(ac), free(r1), free(rc);
    return 0;
}
