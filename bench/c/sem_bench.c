/*
 * Uncontended semaphore acquire+release pairs per second from one thread,
 * against the reentrant lock's acquire+release pairs in the same run.
 *
 *   sem_bench [-n pairs] [-r rounds] redis://127.0.0.1:PORT
 *
 * Series, interleaved round by round so that machine noise hits all alike:
 *   lock      hilock_lock_acquire(l, 0, 30000) + hilock_lock_release(l)
 *   sem       hilock_semaphore_acquire(s, 1, 0) + hilock_semaphore_release(s, 1)
 *   pes       hilock_permit_semaphore_acquire(id, p, 0, 30000) + release(p, id)
 *   sem_raw   EVALSHA sem_acquire + EVALSHA sem_release on one raw hiredis
 *             connection (the same two scripts, two round trips, no library)
 *   sem_async hilock_async_semaphore_acquire(a, s, 1, 1, 0) + _release(a, s, 1)
 *             on the epoll adapter, one owner, each awaited before the next
 * Prints "name=value" lines: the median pairs/s of each series and the
 * medians of the per-round ratios sem/lock, pes/lock, sem/sem_raw and
 * sem_async/sem.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "hilock.h"
#include "hilock/adapters/epoll.h"
#include "proto.h"
#include "bench_util.h"

static void die(const char *what, int rc)
{
    fprintf(stderr, "%s failed: %s\n", what, hilock_strerror(rc));
    exit(1);
}

static double run_lock(hilock_lock *l, int n)
{
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        int rc = hilock_lock_acquire(l, 0, 30000);
        if (rc || (rc = hilock_lock_release(l)))
            die("lock pair", rc);
    }
    return n / (now_s() - t0);
}

static double run_sem(hilock_semaphore *s, int n)
{
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        int rc = hilock_semaphore_acquire(s, 1, 0);
        if (rc || (rc = hilock_semaphore_release(s, 1)))
            die("semaphore pair", rc);
    }
    return n / (now_s() - t0);
}

static double run_pes(hilock_permit_semaphore *p, int n)
{
    char id[HILOCK_PERMIT_ID_SIZE];
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        int rc = hilock_permit_semaphore_acquire(id, p, 0, 30000);
        if (rc || (rc = hilock_permit_semaphore_release(p, id)))
            die("permit pair", rc);
    }
    return n / (now_s() - t0);
}

static double run_raw(redisContext *ctx, const hl_sem_names *names, int n)
{
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        hl_cmd cmd;
        hl_sem_cmd_acquire(&cmd, names, 1);
        redisReply *r = redisCommandArgv(ctx, cmd.argc, cmd.argv, cmd.argvlen);
        if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1)
            die("raw acquire", HILOCK_EPROTO);
        freeReplyObject(r);
        hl_sem_cmd_release(&cmd, names, 1);
        r = redisCommandArgv(ctx, cmd.argc, cmd.argv, cmd.argvlen);
        if (!r || r->type != REDIS_REPLY_INTEGER)
            die("raw release", HILOCK_EPROTO);
        freeReplyObject(r);
    }
    return n / (now_s() - t0);
}

typedef struct done_flag {
    int n, rc;
} done_flag;

static void on_done(hilock_async *a, int rc, int64_t value, void *payload)
{
    (void)a, (void)value;
    done_flag *d = payload;
    d->n++;
    d->rc = rc;
}

static double run_async(hilock_epoll *ep, hilock_async *a, hilock_semaphore *s, int n)
{
    done_flag d = {0, 0};
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        int rc = hilock_async_semaphore_acquire(a, s, 1, 1, 0, on_done, &d);
        while (rc == 0 && d.n < 2 * i + 1)
            hilock_epoll_run_once(ep, a, 1000);
        if (rc || d.rc || (rc = hilock_async_semaphore_release(a, s, 1, on_done, &d)))
            die("async semaphore acquire", rc ? rc : d.rc);
        while (d.n < 2 * i + 2)
            hilock_epoll_run_once(ep, a, 1000);
        if (d.rc)
            die("async semaphore release", d.rc);
    }
    return n / (now_s() - t0);
}

int main(int argc, char **argv)
{
    int n = 20000, rounds = 3;
    if (bench_args(argc, argv, &n, &rounds, 1, "sem_bench [-n pairs] [-r rounds] URL"))
        return 2;
    const char *url = argv[optind];
    hilock_client *c = bench_open(url);
    hilock_lock *l = NULL;
    hilock_semaphore *s = NULL;
    hilock_permit_semaphore *p = NULL;
    if (hilock_lock_new(&l, c, "bench:semlock") || hilock_semaphore_new(&s, c, "bench:sem") ||
        hilock_permit_semaphore_new(&p, c, "bench:pes"))
        return 1;
    if (hilock_semaphore_set_permits(s, 1) || hilock_permit_semaphore_delete(NULL, p) ||
        hilock_permit_semaphore_try_set_permits(NULL, p, 1))
        return 1;
    hl_sem_names raw_names;
    if (hl_sem_names_init(&raw_names, HL_SEM_SEMAPHORE, "bench:semraw") != 0)
        return 1;
    int port = bench_url_port(url);
    redisContext *ctx = redisConnect("127.0.0.1", port);
    if (!ctx || ctx->err)
        return 1;
    for (int sc = 0; sc < HL_SCRIPT_COUNT; sc++) {
        redisReply *r = redisCommand(ctx, "SCRIPT LOAD %s", hl_script_source((hl_script)sc));
        if (!r)
            return 1;
        freeReplyObject(r);
    }
    redisReply *r = redisCommand(ctx, "SET bench:semraw 1");
    if (!r)
        return 1;
    freeReplyObject(r);

    hilock_semaphore *sa = NULL;
    hilock_epoll ep;
    hilock_async *a = NULL;
    if (hilock_semaphore_new(&sa, c, "bench:semasync") || hilock_semaphore_set_permits(sa, 1) ||
        hilock_epoll_init(&ep))
        return 1;
    hilock_async_loop loop = hilock_epoll_loop(&ep);
    if (hilock_async_new(&a, &loop))
        return 1;

    /* warm-up */
    run_lock(l, n / 10 + 1);
    run_sem(s, n / 10 + 1);
    run_pes(p, n / 10 + 1);
    run_raw(ctx, &raw_names, n / 10 + 1);
    run_async(&ep, a, sa, n / 10 + 1);
    static double lk[1000], sm[1000], pe[1000], rw[1000], sl[1000], pl[1000], sr[1000];
    static double as[1000], ab[1000], ar[1000];
    for (int i = 0; i < rounds; i++) {
        lk[i] = run_lock(l, n);
        sm[i] = run_sem(s, n);
        pe[i] = run_pes(p, n);
        rw[i] = run_raw(ctx, &raw_names, n);
        sl[i] = sm[i] / lk[i];
        pl[i] = pe[i] / lk[i];
        sr[i] = sm[i] / rw[i];
        as[i] = run_async(&ep, a, sa, n);
        ab[i] = as[i] / sm[i];
        ar[i] = as[i] / rw[i];
    }
    printf("pairs=%d\nrounds=%d\n", n, rounds);
    printf("lock_pairs_per_s=%.0f\n", median(lk, rounds));
    printf("sem_pairs_per_s=%.0f\n", median(sm, rounds));
    printf("pes_pairs_per_s=%.0f\n", median(pe, rounds));
    printf("sem_raw_pairs_per_s=%.0f\n", median(rw, rounds));
    printf("sem_over_lock=%.3f\n", median(sl, rounds));
    printf("pes_over_lock=%.3f\n", median(pl, rounds));
    printf("sem_over_raw=%.3f\n", median(sr, rounds));
    printf("sem_async_pairs_per_s=%.0f\n", median(as, rounds));
    double mab = median(ab, rounds), mar = median(ar, rounds); /* sorts: [0] min, [-1] max */
    printf("sem_async_over_sem=%.3f (rounds %.3f..%.3f)\n", mab, ab[0], ab[rounds - 1]);
    printf("sem_async_over_raw=%.3f (rounds %.3f..%.3f)\n", mar, ar[0], ar[rounds - 1]);
    hilock_async_free(a);
    hilock_epoll_close(&ep);
    hilock_semaphore_free(sa);
    redisFree(ctx);
    hl_sem_names_free(&raw_names);
    hilock_semaphore_free(s);
    hilock_permit_semaphore_free(p);
    hilock_lock_free(l);
    hilock_client_close(c);
    return 0;
}
