/*
 * hilock's C contender in the peer benchmark (bench/peers/run.sh, peers.py).
 * Public API only. Every contender of the benchmark (this one, contender.py,
 * java/, node/, go/) takes the same command line and prints the same JSON:
 *
 *   contender SCENARIO key=value...
 *
 *   pairs    url key n warm lease        uncontended acquire+release pairs, one
 *                                     thread: {"pairs_per_s", "p50_us", "p99_us"}
 *   threads  url key threads ms       `threads` threads, each on its own key
 *                                     (key:<i>), pairs for ms after a common
 *                                     start: {"pairs_per_s"} (aggregate)
 *   handoff  url key threads ms fair counter gap hold_us
 *                                     print "ready", wait for a line on stdin,
 *                                     then loop acquire / hold hold_us /
 *                                     release on one lock for ms in
 *                                     `threads` threads. Every
 *                                     holder bumps the grant counter in the
 *                                     file `counter`; after releasing a
 *                                     reentrant lock a thread waits until
 *                                     `gap` other grants went by. Who may
 *                                     contend then changes only when the lock
 *                                     is granted, so with a hold longer than
 *                                     that wait's poll every grant goes to a
 *                                     waiter that was blocked at the unlock,
 *                                     never to one arriving while the lock
 *                                     is free (the releaser barging back, or
 *                                     a newcomer beating sleeping pollers).
 *                                     A fair lock re-queues at once. {"events": [[t_request,
 *                                     t_acquired, t_unlock_call], ...]} in
 *                                     CLOCK_MONOTONIC ns (system-wide).
 *   watchdog url key n lease          take n locks (key:<i>) with the
 *                                     watchdog (lease ms), print "ready", wait
 *                                     for a line on stdin, then count locks
 *                                     lost and release all: {"lost", "held"}
 *   redlock  urls key n warm lease       Redlock over the comma-separated urls:
 *                                     {"pairs_per_s", "p50_us", "p99_us"}
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include "hilock.h"

#define LEASE_WAIT_MS 60000

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int g_argc;
static char **g_argv;

static const char *arg(const char *name, const char *def)
{
    size_t n = strlen(name);
    for (int i = 2; i < g_argc; i++)
        if (strncmp(g_argv[i], name, n) == 0 && g_argv[i][n] == '=')
            return g_argv[i] + n + 1;
    if (!def) {
        fprintf(stderr, "contender: missing %s=\n", name);
        exit(2);
    }
    return def;
}

static long iarg(const char *name, const char *def)
{
    return strtol(arg(name, def), NULL, 10);
}

static void die(const char *what, int rc, const char *detail)
{
    fprintf(stderr, "contender: %s: %s (%s)\n", what, hilock_strerror(rc), detail ? detail : "");
    exit(1);
}

static hilock_client *open_client(const char *url, int64_t watchdog_lease_ms)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    hilock_client *c = NULL;
    char err[256] = "";
    int rc;

    o.watchdog_lease_ms = watchdog_lease_ms;
    o.command_timeout_ms = 5000;
    rc = hilock_client_open(&c, url, &o, err, sizeof err);
    if (rc != HILOCK_OK)
        die("open", rc, err);
    return c;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* n timed pairs after warm untimed ones; pair() dies on failure. Prints
 * {"pairs_per_s", "p50_us", "p99_us"}. */
static int timed_pairs(void (*pair)(void *), void *ctx)
{
    long n = iarg("n", NULL), warm = iarg("warm", "200");
    int64_t *lat = n > 0 ? calloc((size_t)n, sizeof *lat) : NULL, t0 = 0, elapsed;

    if (!lat)
        return 2;
    for (long i = -warm; i < n; i++) {
        int64_t s = now_ns();
        if (i == 0)
            t0 = s;
        pair(ctx);
        if (i >= 0)
            lat[i] = now_ns() - s;
    }
    elapsed = now_ns() - t0;
    qsort(lat, (size_t)n, sizeof *lat, cmp64);
    printf("{\"pairs_per_s\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f}\n",
           (double)n * 1e9 / (double)elapsed, (double)lat[n / 2] / 1e3,
           (double)lat[(n * 99) / 100] / 1e3);
    free(lat);
    return 0;
}

static void wait_go(void)
{
    char line[64];
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        exit(1);
}

struct one_lock {
    hilock_lock *l;
    int64_t lease;
};

static void lock_pair(void *p)
{
    struct one_lock *o = p;
    int rc;
    if ((rc = hilock_lock_acquire(o->l, LEASE_WAIT_MS, o->lease)) != HILOCK_OK)
        die("acquire", rc, hilock_lock_errmsg(o->l));
    if ((rc = hilock_lock_release(o->l)) != HILOCK_OK)
        die("release", rc, hilock_lock_errmsg(o->l));
}

static int scenario_pairs(void)
{
    hilock_client *c = open_client(arg("url", NULL), 0);
    /* idiomatic hilock: no lease (lease=0), the watchdog keeps it */
    struct one_lock o = {NULL, iarg("lease", "0")};
    int rc;

    if ((rc = hilock_lock_new(&o.l, c, arg("key", NULL))) != HILOCK_OK)
        die("lock_new", rc, NULL);
    rc = timed_pairs(lock_pair, &o);
    hilock_lock_free(o.l);
    hilock_client_close(c);
    return rc;
}

typedef struct worker {
    pthread_t th;
    hilock_client *c;
    char key[256];
    int64_t start, end;
    long pairs;
    /* handoff */
    int fair, fd;
    int64_t gap;
    long hold_us;
    int64_t *ev; /* 3 per grant */
    long nev, cap;
} worker;

static void *threads_main(void *p)
{
    worker *w = p;
    hilock_lock *l = NULL;
    int rc;

    if ((rc = hilock_lock_new(&l, w->c, w->key)) != HILOCK_OK)
        die("lock_new", rc, NULL);
    while (now_ns() < w->start) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    while (now_ns() < w->end) {
        if ((rc = hilock_lock_acquire(l, LEASE_WAIT_MS, HILOCK_LEASE_WATCHDOG)) != HILOCK_OK)
            die("acquire", rc, hilock_lock_errmsg(l));
        if ((rc = hilock_lock_release(l)) != HILOCK_OK)
            die("release", rc, hilock_lock_errmsg(l));
        w->pairs++;
    }
    hilock_lock_free(l);
    return NULL;
}

static int scenario_threads(void)
{
    int n = (int)iarg("threads", "16");
    hilock_options o = HILOCK_OPTIONS_INIT;
    hilock_client *c = NULL;
    char err[256] = "";
    worker *w = calloc((size_t)n, sizeof *w);
    int64_t start, end;
    long total = 0;
    int rc;

    if (!w || n < 1)
        return 2;
    /* one pooled connection per thread: the pool must not be the bottleneck */
    o.pool_size = n;
    if ((rc = hilock_client_open(&c, arg("url", NULL), &o, err, sizeof err)) != HILOCK_OK)
        die("open", rc, err);
    start = now_ns() + 300 * 1000000LL;
    end = start + iarg("ms", NULL) * 1000000LL;
    for (int i = 0; i < n; i++) {
        w[i].c = c;
        w[i].start = start;
        w[i].end = end;
        snprintf(w[i].key, sizeof w[i].key, "%s:%d", arg("key", NULL), i);
        pthread_create(&w[i].th, NULL, threads_main, &w[i]);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(w[i].th, NULL);
        total += w[i].pairs;
    }
    printf("{\"pairs_per_s\": %.1f}\n", (double)total * 1e9 / (double)(now_ns() - start));
    free(w);
    hilock_client_close(c);
    return 0;
}

static int64_t read_counter(int fd)
{
    int64_t v = 0;
    if (pread(fd, &v, sizeof v, 0) != (ssize_t)sizeof v)
        return 0;
    return v;
}

static void *handoff_main(void *p)
{
    worker *w = p;
    hilock_lock *l = NULL;
    int rc;

    rc = w->fair ? hilock_fair_lock_new(&l, w->c, w->key) : hilock_lock_new(&l, w->c, w->key);
    if (rc != HILOCK_OK)
        die("lock_new", rc, NULL);
    for (;;) {
        int64_t req = now_ns(), acq, unl, mine;
        if ((rc = hilock_lock_acquire(l, LEASE_WAIT_MS, HILOCK_LEASE_WATCHDOG)) != HILOCK_OK)
            die("acquire", rc, hilock_lock_errmsg(l));
        acq = now_ns();
        mine = read_counter(w->fd) + 1;
        if (pwrite(w->fd, &mine, sizeof mine, 0) != (ssize_t)sizeof mine)
            die("counter", HILOCK_EINVAL, strerror(errno));
        if (w->hold_us) {
            struct timespec ts = {w->hold_us / 1000000, (w->hold_us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
        unl = now_ns();
        if ((rc = hilock_lock_release(l)) != HILOCK_OK)
            die("release", rc, hilock_lock_errmsg(l));
        if (acq >= w->end)
            break;
        if (w->nev + 3 > w->cap) {
            w->cap = w->cap ? w->cap * 2 : 3 * 4096;
            w->ev = realloc(w->ev, (size_t)w->cap * sizeof *w->ev);
            if (!w->ev)
                exit(1);
        }
        w->ev[w->nev++] = req;
        w->ev[w->nev++] = acq;
        w->ev[w->nev++] = unl;
        if (!w->fair)
            while (read_counter(w->fd) < mine + w->gap && now_ns() < w->end) {
                struct timespec ts = {0, 50000};
                nanosleep(&ts, NULL);
            }
    }
    hilock_lock_free(l);
    return NULL;
}

static int scenario_handoff(void)
{
    int n = (int)iarg("threads", "1");
    hilock_options o = HILOCK_OPTIONS_INIT;
    hilock_client *c = NULL;
    char err[256] = "";
    worker *w = calloc((size_t)n, sizeof *w);
    int fd = open(arg("counter", NULL), O_RDWR);
    int fair = (int)iarg("fair", "0"), rc;
    int64_t end;
    const char *sep = "";

    if (!w || n < 1 || fd < 0)
        return 2;
    o.pool_size = n + 1;
    if ((rc = hilock_client_open(&c, arg("url", NULL), &o, err, sizeof err)) != HILOCK_OK)
        die("open", rc, err);
    wait_go();
    end = now_ns() + iarg("ms", NULL) * 1000000LL;
    for (int i = 0; i < n; i++) {
        w[i].c = c;
        w[i].end = end;
        w[i].fair = fair;
        w[i].fd = fd;
        w[i].gap = iarg("gap", "1");
        w[i].hold_us = iarg("hold_us", "0");
        snprintf(w[i].key, sizeof w[i].key, "%s", arg("key", NULL));
        pthread_create(&w[i].th, NULL, handoff_main, &w[i]);
    }
    printf("{\"events\": [");
    for (int i = 0; i < n; i++) {
        pthread_join(w[i].th, NULL);
        for (long k = 0; k < w[i].nev; k += 3) {
            printf("%s[%" PRId64 ",%" PRId64 ",%" PRId64 "]", sep, w[i].ev[k], w[i].ev[k + 1],
                   w[i].ev[k + 2]);
            sep = ",";
        }
        free(w[i].ev);
    }
    printf("]}\n");
    free(w);
    close(fd);
    hilock_client_close(c);
    return 0;
}

static int scenario_watchdog(void)
{
    long n = iarg("n", NULL), lost = 0, held = 0;
    hilock_client *c = open_client(arg("url", NULL), iarg("lease", "3000"));
    hilock_lock **l = calloc((size_t)n, sizeof *l);
    char name[256];
    int rc;

    if (!l)
        return 2;
    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s:%ld", arg("key", NULL), i);
        if ((rc = hilock_lock_new(&l[i], c, name)) != HILOCK_OK)
            die("lock_new", rc, NULL);
        if ((rc = hilock_lock_acquire(l[i], LEASE_WAIT_MS, HILOCK_LEASE_WATCHDOG)) != HILOCK_OK)
            die("acquire", rc, hilock_lock_errmsg(l[i]));
    }
    wait_go();
    for (long i = 0; i < n; i++) {
        int h = 0;
        if (hilock_lock_is_lost(l[i]) ||
            hilock_lock_is_held(&h, l[i]) != HILOCK_OK || !h)
            lost++;
        else
            held++;
        hilock_lock_release(l[i]);
        hilock_lock_free(l[i]);
    }
    printf("{\"lost\": %ld, \"held\": %ld}\n", lost, held);
    free(l);
    hilock_client_close(c);
    return 0;
}

struct red {
    hilock_multilock *m;
    int64_t lease;
};

static void redlock_pair(void *p)
{
    struct red *r = p;
    int rc;
    if ((rc = hilock_multilock_acquire(r->m, LEASE_WAIT_MS, r->lease)) != HILOCK_OK)
        die("redlock acquire", rc, hilock_multilock_errmsg(r->m));
    if ((rc = hilock_multilock_release(r->m)) != HILOCK_OK)
        die("redlock release", rc, hilock_multilock_errmsg(r->m));
}

static int scenario_redlock(void)
{
    char *urls = strdup(arg("urls", NULL)), *save = NULL;
    hilock_client *c[16];
    hilock_lock *l[16];
    struct red r = {NULL, iarg("lease", "10000")};
    size_t k = 0;
    int rc;

    if (!urls)
        return 2;
    for (char *u = strtok_r(urls, ",", &save); u && k < 16; u = strtok_r(NULL, ",", &save)) {
        c[k] = open_client(u, 0);
        if ((rc = hilock_lock_new(&l[k], c[k], arg("key", NULL))) != HILOCK_OK)
            die("lock_new", rc, NULL);
        k++;
    }
    if ((rc = hilock_redlock_new(&r.m, l, k)) != HILOCK_OK)
        die("redlock_new", rc, NULL);
    rc = timed_pairs(redlock_pair, &r);
    hilock_multilock_free(r.m);
    for (size_t i = 0; i < k; i++) {
        hilock_lock_free(l[i]);
        hilock_client_close(c[i]);
    }
    free(urls);
    return rc;
}

int main(int argc, char **argv)
{
    g_argc = argc;
    g_argv = argv;
    if (argc < 2) {
        fprintf(stderr, "usage: contender pairs|threads|handoff|watchdog|redlock key=value...\n");
        return 2;
    }
    if (strcmp(argv[1], "pairs") == 0)
        return scenario_pairs();
    if (strcmp(argv[1], "threads") == 0)
        return scenario_threads();
    if (strcmp(argv[1], "handoff") == 0)
        return scenario_handoff();
    if (strcmp(argv[1], "watchdog") == 0)
        return scenario_watchdog();
    if (strcmp(argv[1], "redlock") == 0)
        return scenario_redlock();
    fprintf(stderr, "contender: unknown scenario %s\n", argv[1]);
    return 2;
}
