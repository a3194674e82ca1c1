/*
 * Uncontended lock+unlock pairs per second from one thread, through the
 * library, against a raw hiredis client sending the same two scripts.
 *
 *   lock_bench [-n pairs] [-r rounds] [-k reentrant|fair|read|write|fenced] redis://127.0.0.1:PORT
 *
 * Series, interleaved round by round so that machine noise hits all alike:
 *   lib_fixed     hilock_lock_acquire(l, 0, 30000) + hilock_lock_release(l)
 *   lib_watchdog  the same with lease 0 (watchdog registration each time)
 *   raw           EVALSHA lock script + EVALSHA unlock script on one raw
 *                 hiredis connection (two round trips, no library)
 * Prints "name=value" lines (the median over rounds of pairs/s, and the
 * median of the per-round library/raw ratios; for lib_fixed also the
 * server's CPU per pair and the keys a pair leaves for the server to expire,
 * both from INFO/DBSIZE, so load on the machine hardly moves them); bench/run.sh
 * divides them by half of redis-benchmark's EVALSHA rate from the same run.
 * With a kind other than reentrant it also runs, in the same rounds,
 *   lib_reentrant hilock_lock_acquire(30000) + release on a reentrant lock
 * and prints the median per-round ratio kind/reentrant (kind_over_reentrant).
 * It also prints the SHA of the lock script (loaded on the server) so that
 * run.sh can point redis-benchmark at exactly the same script.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "hilock.h"
#include "proto.h"
#include "bench_util.h"

static double run_lib(hilock_lock *l, int n, int64_t lease)
{
    int64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        int rc = hilock_lock_acquire(l, 0, lease);
        if (rc == 0)
            rc = hilock_lock_release(l);
        if (rc != 0) {
            fprintf(stderr, "lib pair failed: %s (%s)\n", hilock_strerror(rc),
                    hilock_lock_errmsg(l));
            exit(1);
        }
    }
    return n / ((now_ns() - t0) / 1e9);
}

/* The server's CPU seconds (user + sys, INFO cpu) and its key count: per
 * pair they show what a pair costs the server whatever the machine's load
 * does to the rates, and how many keys a pair leaves behind for the server
 * to expire later (latches). */
static void server_cost(redisContext *ctx, double *cpu_s, long long *keys)
{
    *cpu_s = 0;
    *keys = 0;
    redisReply *r = redisCommand(ctx, "INFO cpu");
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *u = strstr(r->str, "used_cpu_user:"), *y = strstr(r->str, "used_cpu_sys:");
        if (u && y)
            *cpu_s = strtod(u + 14, NULL) + strtod(y + 13, NULL);
    }
    if (r)
        freeReplyObject(r);
    r = redisCommand(ctx, "DBSIZE");
    if (r && r->type == REDIS_REPLY_INTEGER)
        *keys = r->integer;
    if (r)
        freeReplyObject(r);
}

static int script_load(redisContext *ctx, hl_script s)
{
    redisReply *r = redisCommand(ctx, "SCRIPT LOAD %s", hl_script_source(s));
    int ok = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, hl_script_sha1(s)) == 0;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static double run_raw(redisContext *ctx, int n, hilock_kind kind, const char *name)
{
    hl_names names;
    if (hl_names_init(&names, name) != 0)
        exit(1);
    /* an owner of this process: its latches are keyed by owner and call
     * number, and the numbers start again in every process */
    char owner[64];
    snprintf(owner, sizeof owner, "00000000-0000-0000-0000-%012ld:1", (long)getpid());
    static uint64_t seq;
    char latch[512];
    int64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        hl_cmd cmd;
        /* the commands the library sends: the owner's acquire latch, and
         * its unlock latch with the seq apart (see proto.h) */
        char alatch[512];
        snprintf(alatch, sizeof alatch, "%s:%s:e0:%" PRIu64, names.acquire_latch_prefix, owner,
                 ++seq);
        hl_cmd_acquire_latched(&cmd, kind, &names, owner, 30000, 300000, alatch, 5000);
        redisReply *r = redisCommandArgv(ctx, cmd.argc, cmd.argv, cmd.argvlen);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->element[0]->integer != 1) {
            fprintf(stderr, "raw lock failed\n");
            exit(1);
        }
        freeReplyObject(r);
        snprintf(latch, sizeof latch, "%s:%s:e0|%" PRIu64, names.latch_prefix, owner, ++seq);
        hl_cmd_release(&cmd, kind, &names, owner, 30000, latch, 3000);
        r = redisCommandArgv(ctx, cmd.argc, cmd.argv, cmd.argvlen);
        if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 0) {
            fprintf(stderr, "raw unlock failed\n");
            exit(1);
        }
        freeReplyObject(r);
    }
    double rate = n / ((now_ns() - t0) / 1e9);
    hl_names_free(&names);
    return rate;
}

int main(int argc, char **argv)
{
    int n = 20000, rounds = 3;
    hilock_kind kind = HILOCK_KIND_REENTRANT;
    int opt;
    while ((opt = getopt(argc, argv, "n:r:k:")) != -1) {
        if (opt == 'n')
            n = atoi(optarg);
        else if (opt == 'r')
            rounds = atoi(optarg);
        else if (opt == 'k')
            kind = !strcmp(optarg, "fair")     ? HILOCK_KIND_FAIR
                   : !strcmp(optarg, "read")   ? HILOCK_KIND_READ
                   : !strcmp(optarg, "write")  ? HILOCK_KIND_WRITE
                   : !strcmp(optarg, "fenced") ? HILOCK_KIND_FENCED
                                               : HILOCK_KIND_REENTRANT;
        else
            return 2;
    }
    if (optind >= argc || n <= 0 || rounds <= 0 || rounds > 1000) {
        fprintf(stderr, "usage: lock_bench [-n pairs] [-r rounds] [-k reentrant|fair|read|write|fenced] URL\n");
        return 2;
    }
    const char *url = argv[optind];
    hilock_client *c = bench_open(url);
    int rc;
    hilock_lock *l = NULL, *base = NULL;
    hilock_rwlock *rw = NULL;
    if (kind == HILOCK_KIND_READ || kind == HILOCK_KIND_WRITE) {
        rc = hilock_rwlock_new(&rw, c, "bench:pairs");
        if (rc == 0)
            l = kind == HILOCK_KIND_READ ? hilock_rwlock_read_lock(rw) : hilock_rwlock_write_lock(rw);
    } else {
        rc = kind == HILOCK_KIND_FAIR     ? hilock_fair_lock_new(&l, c, "bench:pairs")
             : kind == HILOCK_KIND_FENCED ? hilock_fenced_lock_new(&l, c, "bench:pairs")
                                          : hilock_lock_new(&l, c, "bench:pairs");
    }
    if (rc || hilock_lock_new(&base, c, "bench:base") != 0)
        return 1;
    int port = bench_url_port(url);
    redisContext *ctx = redisConnect("127.0.0.1", port);
    if (!ctx || ctx->err)
        return 1;
    for (int s = 0; s < HL_SCRIPT_COUNT; s++)
        if (script_load(ctx, (hl_script)s) != 0)
            return 1;
    redisReply *del = redisCommand(ctx, "DEL bench:pairs bench:raw");
    if (del)
        freeReplyObject(del);

    /* warm-up: connections, scripts, caches */
    run_lib(l, n / 10 + 1, 30000);
    run_raw(ctx, n / 10 + 1, kind, "bench:raw");
    static double fixed[1000], wd[1000], raw[1000], fr[1000], wr[1000], re[1000], kr[1000],
        srv_us[1000], keys_left[1000];
    int compare = kind != HILOCK_KIND_REENTRANT;
    if (compare)
        run_lib(base, n / 10 + 1, 30000);
    for (int r = 0; r < rounds; r++) {
        if (compare) {
            re[r] = run_lib(base, n, 30000);
            kr[r] = run_lib(l, n, 30000) / re[r];
        }
        double c0, c1;
        long long k0, k1;
        server_cost(ctx, &c0, &k0);
        fixed[r] = run_lib(l, n, 30000);
        server_cost(ctx, &c1, &k1);
        srv_us[r] = (c1 - c0) * 1e6 / n;
        keys_left[r] = (double)(k1 - k0) / n;
        wd[r] = run_lib(l, n, HILOCK_LEASE_WATCHDOG);
        raw[r] = run_raw(ctx, n, kind, "bench:raw");
        fr[r] = fixed[r] / raw[r];
        wr[r] = wd[r] / raw[r];
    }
    static const char *const kinds[] = {"", "reentrant", "fair", "read", "write", "fenced"};
    printf("kind=%s\n", kinds[kind]);
    if (compare) {
        printf("lib_reentrant_pairs_per_s=%.0f\n", median(re, rounds));
        printf("kind_over_reentrant=%.3f\n", median(kr, rounds));
    }
    printf("pairs=%d\nrounds=%d\n", n, rounds);
    {
        /* the SHAs of the scripts this kind sends (the builders say which) */
        hl_names nm;
        hl_cmd cmd;
        if (hl_names_init(&nm, "x") != 0)
            return 1;
        hl_cmd_acquire(&cmd, kind, &nm, "o:1", 30000, 300000);
        printf("lock_sha=%s\n", hl_script_sha1((hl_script)cmd.script));
        hl_cmd_release(&cmd, kind, &nm, "o:1", 30000, "l", 3000);
        printf("unlock_sha=%s\n", hl_script_sha1((hl_script)cmd.script));
        hl_names_free(&nm);
    }
    printf("lib_fixed_pairs_per_s=%.0f\n", median(fixed, rounds));
    /* the library with a fixed lease: server CPU per pair (INFO cpu, so
     * includes the server's own overhead in that time), keys left per pair */
    printf("lib_fixed_server_us_per_pair=%.2f\n", median(srv_us, rounds));
    printf("lib_fixed_keys_left_per_pair=%.3f\n", median(keys_left, rounds));
    printf("lib_watchdog_pairs_per_s=%.0f\n", median(wd, rounds));
    printf("raw_pairs_per_s=%.0f\n", median(raw, rounds));
    /* per-round ratios (neighbouring in time, so less exposed to drift) */
    printf("lib_fixed_over_raw=%.3f\n", median(fr, rounds));
    printf("lib_watchdog_over_raw=%.3f\n", median(wr, rounds));
    redisFree(ctx);
    if (rw)
        hilock_rwlock_free(rw);
    else
        hilock_lock_free(l);
    hilock_lock_free(base);
    hilock_client_close(c);
    return 0;
}
