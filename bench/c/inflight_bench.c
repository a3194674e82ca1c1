/*
 * hilock_async with many operations in flight on one handle and one client:
 * what it costs to start one more, and whether they all complete.
 *
 *   inflight_bench [-t command_timeout_ms] [-n N[,N...]] redis://127.0.0.1:PORT
 *
 * For each N (default 1000,16000,100000): N acquires (wait 0, lease 30 s)
 * of N lock names by one owner are started back to back without running
 * the loop in between, each start timed; then the loop runs until every
 * one completed; then N releases the same way. Printed per N:
 *   start_us       mean cost of one hilock_async_acquire call over the N
 *   start_us_last  mean over the last 1,000 calls (N - 1,000 .. N in flight)
 *   start_cpu_us   the calling thread's CPU time (user + system) per call
 *                  over the N: what the calls cost, without the time the
 *                  thread waited for a core (steadier on a loaded machine)
 *   ok / failed    completions, and the first error message
 *   done_s         from the first start to the last completion
 *   release_us     mean cost of one hilock_async_release call
 *   rss_kb_per_op  growth of the process's peak RSS (VmHWM) over the run,
 *                  per operation in flight (the first N measured alone)
 * A failure for queueing reasons shows as "no reply within <timeout> ms".
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

typedef struct tally {
    int done, ok, failed;
    char err[256];
} tally;

static void on_done(hilock_async *a, int rc, int64_t v, void *p)
{
    (void)v;
    tally *t = p;
    t->done++;
    if (rc == 0) {
        t->ok++;
    } else {
        if (!t->failed)
            snprintf(t->err, sizeof t->err, "%s", hilock_async_errmsg(a));
        t->failed++;
    }
}

/* Run the loop until t has n completions (or 120 s pass). */
static void run_until(hilock_epoll *ep, hilock_async *a, tally *t, int n)
{
    double end = now_s() + 120;
    while (t->done < n && now_s() < end)
        hilock_epoll_run_once(ep, a, 50);
}

/* CPU time of the calling thread, ns. */
static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The process's peak resident set (VmHWM), kB; -1 unknown. */
static long peak_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

static int one(hilock_client *cl, int n, int64_t timeout_ms)
{
    long rss0 = peak_rss_kb();
    hilock_lock **locks = calloc((size_t)n, sizeof *locks);
    if (!locks)
        return 1;
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "bench:inflight:%d:%d", n, i);
        if (hilock_lock_new(&locks[i], cl, name) != 0)
            return 1;
    }
    hilock_epoll ep;
    hilock_epoll_init(&ep);
    hilock_async_loop loop = hilock_epoll_loop(&ep);
    hilock_async *a;
    hilock_async_new(&a, &loop);
    tally warm = {0};
    hilock_async_acquire(a, locks[0], 1, 0, 30000, on_done, &warm); /* connect, scripts */
    run_until(&ep, a, &warm, 1);
    hilock_async_release(a, locks[0], 1, on_done, &warm);
    run_until(&ep, a, &warm, 2);

    tally acq = {0}, rel = {0};
    int last = n > 1000 ? 1000 : n;
    int64_t c0 = thread_cpu_ns();
    int64_t t0 = now_ns(), tlast = t0;
    for (int i = 0; i < n; i++) {
        if (i == n - last)
            tlast = now_ns();
        if (hilock_async_acquire(a, locks[i], 1, 0, 30000, on_done, &acq) != 0)
            acq.failed++, acq.done++;
    }
    int64_t t1 = now_ns();
    int64_t c1 = thread_cpu_ns();
    run_until(&ep, a, &acq, n);
    int64_t t2 = now_ns();
    for (int i = 0; i < n; i++)
        if (hilock_async_release(a, locks[i], 1, on_done, &rel) != 0)
            rel.failed++, rel.done++;
    int64_t t3 = now_ns();
    run_until(&ep, a, &rel, n);
    long rss1 = peak_rss_kb();
    printf("inflight=%d timeout_ms=%" PRId64 " start_us=%.2f start_us_last=%.2f start_cpu_us=%.2f "
           "ok=%d failed=%d "
           "done_s=%.2f release_us=%.2f released=%d rss_kb_per_op=%.1f err=\"%s\" release_err=\"%s\"\n",
           n, timeout_ms, (double)(t1 - t0) / n / 1e3, (double)(t1 - tlast) / last / 1e3,
           (double)(c1 - c0) / n / 1e3, acq.ok,
           acq.failed, (double)(t2 - t0) / 1e9, (double)(t3 - t2) / n / 1e3, rel.ok,
           rss0 >= 0 && rss1 >= rss0 ? (double)(rss1 - rss0) / n : -1.0, acq.err, rel.err);
    fflush(stdout);
    hilock_async_free(a);
    hilock_epoll_close(&ep);
    for (int i = 0; i < n; i++)
        hilock_lock_free(locks[i]);
    free(locks);
    return acq.failed || rel.failed;
}

int main(int argc, char **argv)
{
    const char *list = "1000,16000,100000";
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
