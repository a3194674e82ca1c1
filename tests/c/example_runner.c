/*
 * Runs examples/basic (path in argv[1]) against a throwaway redis-server,
 * passing the URL in HILOCK_URL, and checks what it did: exit 0, the
 * "holding" line, the lock gone afterwards; then against a held lock
 * (exit 1, "somebody else") and an unreachable server (exit 1 quickly).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Run prog with HILOCK_URL=url; capture stdout+stderr into out. */
static int run(const char *prog, const char *url, char *out, size_t len)
{
    const char *env[] = {"HILOCK_URL", url, NULL};
    return th_run_capture(prog, env, out, len);
}

#define CHECK(cond, ...) TH_CHECK(failed, cond, __VA_ARGS__)

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s path/to/example\n", argv[0]);
        return 2;
    }
    int failed = 0;
    th_redis r;
    if (th_redis_start(&r, NULL) != 0) {
        fprintf(stderr, "cannot start redis-server\n");
        return 1;
    }
    char out[4096];

    int rc = run(argv[1], r.url, out, sizeof out);
    printf("--- example output ---\n%s----------------------\n", out);
    CHECK(rc == 0, "example exited %d", rc);
    CHECK(strstr(out, "holding orders:42") != NULL, "no 'holding' line");
    CHECK(th_redis_int(&r, "EXISTS orders:42") == 0, "lock left behind");

    /* Someone else holds the lock for longer than the example waits. */
    redisContext *ctx = th_redis_connect(&r);
    redisReply *rep = redisCommand(ctx, "HSET orders:42 someone-else:1 1");
    freeReplyObject(rep);
    rep = redisCommand(ctx, "PEXPIRE orders:42 60000");
    freeReplyObject(rep);
    redisFree(ctx);
    int64_t t0 = th_now_ms();
    rc = run(argv[1], r.url, out, sizeof out);
    int64_t dt = th_now_ms() - t0;
    CHECK(rc == 1, "held lock: example exited %d", rc);
    CHECK(strstr(out, "somebody else") != NULL, "held lock: output was: %s", out);
    CHECK(dt >= 4900 && dt < 8000, "held lock: took %lld ms (waits 5 s)", (long long)dt);
    CHECK(th_redis_int(&r, "HGET orders:42 someone-else:1") == 1, "other holder disturbed");

    /* Nothing listening. */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", th_free_port());
    t0 = th_now_ms();
    rc = run(argv[1], url, out, sizeof out);
    dt = th_now_ms() - t0;
    CHECK(rc == 1, "unreachable: example exited %d", rc);
    CHECK(strstr(out, "cannot open") != NULL, "unreachable: output was: %s", out);
    CHECK(dt < 3000, "unreachable: took %lld ms", (long long)dt);

    th_redis_stop(&r);
    printf("%s\n", failed ? "FAILED" : "example OK");
    return failed ? 1 : 0;
}
