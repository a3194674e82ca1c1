/*
 * Runs one of examples/{fair,watchdog,multilock}.c (argv[2], kind in argv[1])
 * against throwaway redis-servers and checks what it printed and left in
 * Redis. examples/basic.c has its own runner (example_runner.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static int failed;

#define CHECK(cond, ...) TH_CHECK(failed, cond, __VA_ARGS__)

/* Run prog with HILOCK_URL=url (and HILOCK_REDLOCK_URLS=urls, unset when
 * NULL); stdout+stderr into out. Returns the exit status. */
static int run(const char *prog, const char *url, const char *urls, char *out, size_t len)
{
    const char *env[] = {"HILOCK_URL", url, "HILOCK_REDLOCK_URLS", urls, NULL};
    int rc = th_run_capture(prog, env, out, len);
    printf("--- %s ---\n%s----\n", prog, out);
    return rc;
}

/* The lines appear in out in this order. */
static int in_order(const char *out, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    const char *p = out;
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        const char *s = va_arg(ap, const char *);
        const char *at = strstr(p, s);
        if (!at)
            ok = 0;
        else
            p = at + strlen(s);
    }
    va_end(ap);
    return ok;
}

static void fair(const char *prog, th_redis *r)
{
    char out[8192];
    int rc = run(prog, r->url, NULL, out, sizeof out);
    CHECK(rc == 0, "exit %d", rc);
    CHECK(in_order(out, 5, "main has the lock", "main releases", "worker 1 has the lock",
                   "worker 2 has the lock", "worker 3 has the lock"),
          "not first come, first served");
    CHECK(th_redis_int(r, "EXISTS jobs:nightly") == 0, "lock left behind");
    CHECK(th_redis_int(r, "LLEN redisson_lock_queue:{jobs:nightly}") == 0, "queue left behind");
}

static void watchdog(const char *prog, th_redis *r)
{
    char out[8192];
    int rc = run(prog, r->url, NULL, out, sizeof out);
    CHECK(rc == 0, "exit %d", rc);
    const char *held = strstr(out, "still held, ");
    CHECK(held && atoll(held + strlen("still held, ")) > 0, "not renewed past its lease");
    CHECK(in_order(out, 3, "forced away", "lost-lock callback: the lock is gone",
                   "release after the loss: not owner"),
          "loss not reported");
    CHECK(th_redis_int(r, "EXISTS reports:daily") == 0, "lock left behind");
}

static void multilock(const char *prog, th_redis *r, th_redis red[3])
{
    char out[8192], urls[512];
    snprintf(urls, sizeof urls, "%s %s %s", red[0].url, red[1].url, red[2].url);
    int rc = run(prog, r->url, urls, out, sizeof out);
    CHECK(rc == 0, "exit %d", rc);
    CHECK(in_order(out, 2, "multi-lock: holding account:1 and account:2",
                   "redlock: held on a majority of 3 servers, valid for "),
          "missing lines");
    CHECK(th_redis_int(r, "EXISTS account:1 account:2") == 0, "multi-lock left behind");
    for (int i = 0; i < 3; i++)
        CHECK(th_redis_int(&red[i], "EXISTS cron:invoices") == 0, "redlock left on server %d", i);

    /* account:2 held elsewhere: all or nothing, so account:1 is not kept. */
    redisContext *ctx = th_redis_connect(r);
    freeReplyObject(redisCommand(ctx, "HSET account:2 someone-else:1 1"));
    freeReplyObject(redisCommand(ctx, "PEXPIRE account:2 60000"));
    redisFree(ctx);
    rc = run(prog, r->url, NULL, out, sizeof out);
    CHECK(rc == 1, "account:2 held: exit %d", rc);
    CHECK(strstr(out, "multi-lock: ") && !strstr(out, "holding"), "account:2 held: %s", out);
    CHECK(th_redis_int(r, "EXISTS account:1") == 0, "account:1 kept although account:2 was busy");
    CHECK(th_redis_int(r, "HGET account:2 someone-else:1") == 1, "other holder disturbed");
}

/* examples/async_epoll.c and async_libuv.c: three requests on one loop,
 * granted in turn, each released; nothing left in Redis. */
static void async_example(const char *prog, th_redis *r)
{
    char out[8192];
    int rc = run(prog, r->url, NULL, out, sizeof out);
    CHECK(rc == 0, "exit %d", rc);
    for (int id = 1; id <= 3; id++) {
        char has[64], rel[64];
        snprintf(has, sizeof has, "request %d has the lock (holds: 1)", id);
        snprintf(rel, sizeof rel, "request %d released: ok", id);
        CHECK(in_order(out, 3, has, rel, "done"), "request %d not granted and released", id);
    }
    /* one holder at a time: every grant is followed by its own release */
    const char *p = out;
    for (int i = 0; i < 3 && p; i++) {
        const char *g = strstr(p, "has the lock");
        CHECK(g != NULL, "grant %d missing", i + 1);
        if (!g)
            break;
        int id = atoi(g - 2);
        char rel[64];
        snprintf(rel, sizeof rel, "request %d released", id);
        const char *r2 = strstr(g, rel), *g2 = strstr(g + 1, "has the lock");
        CHECK(r2 && (!g2 || r2 < g2), "request %d: next grant before its release", id);
        p = g2 ? g2 - 10 : NULL;
    }
    CHECK(th_redis_int(r, "EXISTS orders:export") == 0, "lock left behind");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s fair|watchdog|multilock|async path/to/example\n", argv[0]);
        return 2;
    }
    th_redis r, red[3];
    if (th_redis_start(&r, NULL) != 0) {
        fprintf(stderr, "cannot start redis-server\n");
        return 1;
    }
    if (strcmp(argv[1], "fair") == 0) {
        fair(argv[2], &r);
    } else if (strcmp(argv[1], "async") == 0) {
        async_example(argv[2], &r);
    } else if (strcmp(argv[1], "watchdog") == 0) {
        watchdog(argv[2], &r);
    } else if (strcmp(argv[1], "multilock") == 0) {
        for (int i = 0; i < 3; i++)
            if (th_redis_start(&red[i], NULL) != 0) {
                fprintf(stderr, "cannot start redis-server\n");
                return 1;
            }
        multilock(argv[2], &r, red);
        for (int i = 0; i < 3; i++)
            th_redis_stop(&red[i]);
    } else {
        fprintf(stderr, "unknown example %s\n", argv[1]);
        return 2;
    }
    th_redis_stop(&r);
    printf("%s\n", failed ? "FAILED" : "example OK");
    return failed ? 1 : 0;
}
