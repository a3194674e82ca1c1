/*
 * hilock-demo-worker: one process of scripts/demo.sh.
 *
 *   hilock-demo-worker URL LOCK COUNTER N ID OUTFILE HOLD_US THINK_US [nolock]
 *       N times: acquire LOCK, GET COUNTER, work HOLD_US microseconds,
 *       SET COUNTER value+1, release, then pause 0..THINK_US microseconds
 *       (random) before the next round.
 *       Writes one line per critical section to OUTFILE:
 *         ID t_call t_acquired t_released      (CLOCK_MONOTONIC ns)
 *       t_call is when acquire was called, t_acquired when it returned,
 *       t_released when release returned. CLOCK_MONOTONIC is system-wide, so
 *       lines from several workers can be merged to measure hand-offs.
 *       "nolock" skips the lock (to show lost updates).
 *   hilock-demo-worker URL --rtt N
 *       Prints the median round trip of N PINGs in ns, one PING per ms, so
 *       that it can run alongside the workers and see the same load (the
 *       physical limit a hand-off is compared with).
 */
#include <inttypes.h>
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

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* A plain hiredis connection for the counter and the PINGs: the demo runs
 * against a local redis://host:port (scripts/demo.sh); the lock itself goes
 * through the library, which takes every URL form. */
static redisContext *raw(const char *url)
{
    char host[256] = "127.0.0.1";
    int port = 6379;
    const char *p = strncmp(url, "redis://", 8) == 0 ? url + 8 : NULL;
    if (p) {
        size_t h = strcspn(p, ":/");
        if (h >= sizeof host)
            p = NULL;
        else if (h > 0)
            snprintf(host, sizeof host, "%.*s", (int)h, p);
        if (p && p[h] == ':') {
            char *end = NULL;
            long v = strtol(p + h + 1, &end, 10);
            if (v < 1 || v > 65535 || (*end && *end != '/'))
                p = NULL;
            else
                port = (int)v;
        }
    }
    if (!p) {
        fprintf(stderr, "demo-worker: the URL must be redis://host[:port]: %s\n", url);
        return NULL;
    }
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout(host, port, (struct timeval){2, 0});
    if (!c || c->err) {
        fprintf(stderr, "demo-worker: cannot connect: %s\n", c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int rtt(const char *url, long n)
{
    redisContext *c = raw(url);
    if (!c || n <= 0)
        return 1;
    int64_t *t = malloc(sizeof *t * (size_t)n);
    if (!t)
        return 1;
    for (long i = 0; i < n; i++) {
        int64_t t0 = now_ns();
        redisReply *r = redisCommand(c, "PING");
        t[i] = now_ns() - t0;
        if (!r)
            return 1;
        freeReplyObject(r);
        sleep_us(1000);
    }
    qsort(t, (size_t)n, sizeof *t, cmp64);
    printf("%" PRId64 "\n", t[n / 2]);
    free(t);
    redisFree(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[2], "--rtt"))
        return rtt(argv[1], strtol(argv[3], NULL, 10));
    if (argc != 9 && argc != 10) {
        fprintf(stderr, "usage: hilock-demo-worker URL LOCK COUNTER N ID OUTFILE HOLD_US "
                        "THINK_US [nolock]\n"
                        "       hilock-demo-worker URL --rtt N\n");
        return 2;
    }
    const char *url = argv[1], *lockname = argv[2], *counter = argv[3];
    long n = strtol(argv[4], NULL, 10);
    const char *id = argv[5], *outfile = argv[6];
    long hold_us = strtol(argv[7], NULL, 10), think_us = strtol(argv[8], NULL, 10);
    int nolock = argc == 10 && !strcmp(argv[9], "nolock");
    unsigned seed = (unsigned)now_ns() ^ (unsigned)getpid();

    char err[256] = "";
    hilock_client *cl = NULL;
    hilock_lock *l = NULL;
    int rc = hilock_client_open(&cl, url, NULL, err, sizeof err);
    if (rc == 0)
        rc = hilock_lock_new(&l, cl, lockname);
    if (rc != 0) {
        fprintf(stderr, "demo-worker: %s %s\n", hilock_strerror(rc), err);
        return 1;
    }
    redisContext *c = raw(url);
    int64_t(*rec)[3] = calloc((size_t)(n > 0 ? n : 1), sizeof *rec);
    if (!c || !rec)
        return 1;
    for (long i = 0; i < n; i++) {
        rec[i][0] = now_ns();
        if (!nolock && (rc = hilock_lock_acquire(l, -1, 0)) != 0) {
            fprintf(stderr, "demo-worker: acquire: %s\n", hilock_strerror(rc));
            return 1;
        }
        rec[i][1] = now_ns();
        redisReply *r = redisCommand(c, "GET %s", counter);
        long long v = (r && r->type == REDIS_REPLY_STRING) ? strtoll(r->str, NULL, 10) : 0;
        if (!r) {
            fprintf(stderr, "demo-worker: GET failed\n");
            return 1;
        }
        freeReplyObject(r);
        if (hold_us > 0)
            sleep_us(hold_us);
        r = redisCommand(c, "SET %s %lld", counter, v + 1);
        if (!r) {
            fprintf(stderr, "demo-worker: SET failed\n");
            return 1;
        }
        freeReplyObject(r);
        if (!nolock && (rc = hilock_lock_release(l)) != 0) {
            fprintf(stderr, "demo-worker: release: %s\n", hilock_strerror(rc));
            return 1;
        }
        rec[i][2] = now_ns();
        if (think_us > 0)
            sleep_us(rand_r(&seed) % (think_us + 1));
    }
    FILE *f = fopen(outfile, "w");
    if (!f)
        return 1;
    for (long i = 0; i < n; i++)
        fprintf(f, "%s %" PRId64 " %" PRId64 " %" PRId64 "\n", id, rec[i][0], rec[i][1],
                rec[i][2]);
    fclose(f);
    free(rec);
    redisFree(c);
    hilock_lock_free(l);
    hilock_client_close(cl);
    return 0;
}
