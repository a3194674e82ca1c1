/*
 * N waiters on one lock, all granted in turn: hilock_async on one loop, one
 * client, one lock handle, N owners (thread ids), no thread per waiter.
 *
 *   waiters_bench [-t command_timeout_ms] [-n N[,N...]] redis://127.0.0.1:PORT
 *
 * For each N (default 1000,100000): owner 0 takes the reentrant lock
 * "bench:waiters:N"; N acquires of it (owners 1..N, wait 900 s, lease
 * 900 s, so a waiter wakes only on an unlock message) are started back to
 * back; the loop runs until it is idle (no event for 500 ms: every first
 * attempt answered, every waiter asleep); then owner 0 releases, and each
 * holder releases after the loop turn of its grant, which wakes the next
 * waiter. Printed
 * per N:
 *   start_us         mean cost of one hilock_async_acquire call
 *   settle_s         from the first start until the loop was idle
 *   rss_kb_per_waiter  growth of the resident set (VmRSS) from before the
 *                    starts to the idle loop, per waiter
 *   hwm_kb_per_waiter  growth of the peak resident set (VmHWM) over the
 *                    whole run, per waiter (the first N measured alone)
 *   granted / failed every waiter's completion (a failure: the first error)
 *   overlap, twice   grants that came while another owner held the lock
 *                    (it gives it back after its callback's loop turn),
 *                    and second grants of one waiter: both must be 0
 *   out_of_order     grants to an owner that started after the previous
 *                    grant's owner (a reentrant lock promises no order;
 *                    the client wakes its longest waiting waiter first)
 *   grants_s, per_grant_us  from owner 0's release to the last grant, and
 *                    per grant (a grant: an unlock message, one attempt)
 * Exit status 0 when every waiter was granted once, with no overlap, and
 * every release succeeded.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hilock.h"
#include "hilock/adapters/epoll.h"
#include "bench_util.h"

#define LONG_MS 900000

typedef struct run {
    hilock_async *a;
    hilock_lock *lock;
    int n;
    uint64_t holder; /* 0: nobody holds it (as far as this run knows) */
    int granted, failed, overlap, twice, out_of_order, released, release_failed;
    uint64_t last_tid;
    int64_t last_grant_ns;
    char err[256];
} run;

typedef struct waiter {
    run *r;
    uint64_t tid;
    int granted;
} waiter;

static void on_release(hilock_async *a, int rc, int64_t v, void *p)
{
    (void)v;
    run *r = p;
    r->released++;
    if (rc != 0) {
        if (!r->release_failed)
            snprintf(r->err, sizeof r->err, "release: %s", hilock_async_errmsg(a));
        r->release_failed++;
    }
}

static void on_grant(hilock_async *a, int rc, int64_t v, void *p)
{
    (void)v;
    waiter *w = p;
    run *r = w->r;
    if (rc != 0) {
        if (!r->failed)
            snprintf(r->err, sizeof r->err, "acquire: %s", hilock_async_errmsg(a));
        r->failed++;
        return;
    }
    if (r->holder != 0)
        r->overlap++;
    if (w->granted++)
        r->twice++;
    if (w->tid < r->last_tid)
        r->out_of_order++;
    r->last_tid = w->tid;
    r->granted++;
    r->last_grant_ns = now_ns();
    r->holder = w->tid; /* released by the loop after this turn (give_back) */
}

/* The holder gives the lock back after its loop turn: its release's unlock
 * message wakes the next waiter. A grant that comes meanwhile overlaps. */
static void give_back(run *r)
{
    if (r->holder == 0 || r->holder == (uint64_t)-1)
        return;
    uint64_t tid = r->holder;
    r->holder = 0;
    if (hilock_async_release(r->a, r->lock, tid, on_release, r) != 0)
        r->release_failed++, r->released++;
}

static void on_first(hilock_async *a, int rc, int64_t v, void *p)
{
    (void)a;
    (void)v;
    *(int *)p = rc == 0 ? 1 : -1;
}

static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    size_t len = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, len) == 0)
            kb = atol(line + len);
    if (f)
        fclose(f);
    return kb;
}

static int one(hilock_client *cl, int n, int64_t timeout_ms)
{
    long hwm0 = status_kb("VmHWM:");
    char name[64];
    snprintf(name, sizeof name, "bench:waiters:%d", n);
    run r = {0};
    r.n = n;
    waiter *ws = calloc((size_t)n, sizeof *ws);
    if (!ws || hilock_lock_new(&r.lock, cl, name) != 0) {
        free(ws);
        return 1;
    }
    hilock_epoll ep;
    hilock_epoll_init(&ep);
    hilock_async_loop loop = hilock_epoll_loop(&ep);
    hilock_async_new(&r.a, &loop);

    int first = 0; /* owner 0 takes the lock (this also connects) */
    hilock_async_acquire(r.a, r.lock, 0, 0, LONG_MS, on_first, &first);
    for (double end = now_s() + 30; first == 0 && now_s() < end;)
        hilock_epoll_run_once(&ep, r.a, 50);
    if (first != 1) {
        fprintf(stderr, "waiters_bench: owner 0 could not take %s\n", name);
        return 1;
    }
    r.holder = (uint64_t)-1;

    long rss0 = status_kb("VmRSS:");
    int64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        ws[i].r = &r;
        ws[i].tid = (uint64_t)i + 1;
        if (hilock_async_acquire(r.a, r.lock, ws[i].tid, LONG_MS, LONG_MS, on_grant, &ws[i]) != 0)
            r.failed++;
    }
    int64_t t1 = now_ns();
    /* idle: no event for 500 ms (at most 300 s) */
    int64_t idle_from = now_ns(), t_idle = t1;
    for (double end = now_s() + 300; now_s() < end;) {
        int ev = hilock_epoll_run_once(&ep, r.a, 50);
        int64_t t = now_ns();
        if (ev > 0) {
            idle_from = t;
            t_idle = t;
        } else if (t - idle_from >= 500000000) {
            break;
        }
    }
    long rss1 = status_kb("VmRSS:");

    int64_t t2 = now_ns();
    r.holder = 0;
    hilock_async_release(r.a, r.lock, 0, on_release, &r);
    for (double end = now_s() + 1200;
         (r.granted + r.failed < n || r.released < n + 1) && now_s() < end;) {
        hilock_epoll_run_once(&ep, r.a, 50);
        give_back(&r);
    }
    long hwm1 = status_kb("VmHWM:");
    printf("waiters=%d timeout_ms=%" PRId64 " start_us=%.2f settle_s=%.2f rss_kb_per_waiter=%.2f "
           "hwm_kb_per_waiter=%.2f granted=%d failed=%d overlap=%d twice=%d out_of_order=%d grants_s=%.2f "
           "per_grant_us=%.1f released=%d release_failed=%d err=\"%s\"\n",
           n, timeout_ms, (double)(t1 - t0) / n / 1e3, (double)(t_idle - t0) / 1e9,
           rss0 >= 0 && rss1 >= 0 ? (double)(rss1 - rss0) / n : -1.0,
           hwm0 >= 0 && hwm1 >= hwm0 ? (double)(hwm1 - hwm0) / n : -1.0, r.granted, r.failed,
           r.overlap, r.twice, r.out_of_order, (double)(r.last_grant_ns - t2) / 1e9,
           r.granted ? (double)(r.last_grant_ns - t2) / r.granted / 1e3 : -1.0, r.released,
           r.release_failed, r.err);
    fflush(stdout);
    int bad = r.granted != n || r.failed || r.overlap || r.twice || r.release_failed || r.released != n + 1;
    hilock_async_free(r.a);
    hilock_epoll_close(&ep);
    hilock_lock_free(r.lock);
    free(ws);
    return bad;
}

int main(int argc, char **argv)
{
    const char *list = "1000,100000";
    int64_t timeout_ms = 1000;
    int opt;
    while ((opt = getopt(argc, argv, "n:t:")) != -1) {
        if (opt == 'n')
            list = optarg;
        else if (opt == 't')
            timeout_ms = atoll(optarg);
        else
            return 2;
    }
    if (optind != argc - 1 || timeout_ms <= 0) {
        fprintf(stderr, "usage: %s [-t command_timeout_ms] [-n N[,N...]] URL\n", argv[0]);
        return 2;
    }
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = timeout_ms;
    hilock_client *cl = NULL;
    char err[256] = "";
    if (hilock_client_open(&cl, argv[optind], &o, err, sizeof err) != 0) {
        fprintf(stderr, "open %s: %s\n", argv[optind], err);
        return 1;
    }
    int bad = 0;
    char *copy = strdup(list);
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ","))
        if (atoi(tok) > 0)
            bad |= one(cl, atoi(tok), timeout_ms);
    free(copy);
    hilock_client_close(cl);
    return bad;
}
