/*
 * The C side of the Python bench: uncontended acquire+release pairs per
 * second from one thread through libhilock (the figure the Python binding
 * is compared with), and the raw limit on the same server: two EVALSHA
 * round trips of the lock/unlock-sized scripts on one plain hiredis
 * connection, nothing else.
 *
 *   c_pairs <host> <port> <lock-name> <pairs>
 * prints:  hilock_pairs_per_s=<x> raw_pairs_per_s=<y>
 * Built by bench/python/bench.py against libhilock.a (static).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "hilock.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Same shape as a lock and an unlock script: a hash field, a pexpire, a del. */
static const char *RAW_LOCK =
    "redis.call('hincrby', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) "
    "return 1";
static const char *RAW_UNLOCK =
    "redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], '0') return 1";

static int load(redisContext *rc, const char *script, char sha[41])
{
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", script);
    if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 40) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    memcpy(sha, r->str, 41);
    freeReplyObject(r);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: c_pairs host port name pairs\n");
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]);
    const char *name = argv[3];
    long pairs = atol(argv[4]);
    char url[256], err[256];
    snprintf(url, sizeof url, "redis://%s:%d/0", host, port);

    hilock_client *c = NULL;
    hilock_lock *l = NULL;
    if (hilock_client_open(&c, url, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    if (hilock_lock_new(&l, c, name) != 0) {
        fprintf(stderr, "lock_new failed\n");
        return 1;
    }
    /* warm up (connection, script cache) */
    for (int i = 0; i < 200; i++) {
        if (hilock_lock_acquire(l, 0, 0) != 0 || hilock_lock_release(l) != 0) {
            fprintf(stderr, "warm-up: %s\n", hilock_lock_errmsg(l));
            return 1;
        }
    }
    double t0 = now_s();
    for (long i = 0; i < pairs; i++) {
        if (hilock_lock_acquire(l, 0, 0) != 0 || hilock_lock_release(l) != 0) {
            fprintf(stderr, "pair: %s\n", hilock_lock_errmsg(l));
            return 1;
        }
    }
    double hl = (double)pairs / (now_s() - t0);
    hilock_lock_free(l);
    hilock_client_close(c);

    redisContext *rc = redisConnect(host, port);
    if (rc == NULL || rc->err) {
        fprintf(stderr, "raw connect failed\n");
        return 1;
    }
    char sl[41], su[41];
    if (load(rc, RAW_LOCK, sl) || load(rc, RAW_UNLOCK, su)) {
        fprintf(stderr, "script load failed\n");
        return 1;
    }
    char key[300], chan[340];
    snprintf(key, sizeof key, "%s:raw", name);
    snprintf(chan, sizeof chan, "redisson_lock__channel:{%s:raw}", name);
    double t1 = 0;
    for (long i = -200; i < pairs; i++) {
        if (i == 0)
            t1 = now_s();
        redisReply *a = redisCommand(rc, "EVALSHA %s 1 %s %s %s", sl, key, "30000",
                                     "00000000-0000-0000-0000-000000000000:1");
        redisReply *b = redisCommand(rc, "EVALSHA %s 2 %s %s", su, key, chan);
        if (a == NULL || b == NULL || a->type == REDIS_REPLY_ERROR ||
            b->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "raw pair failed\n");
            return 1;
        }
        freeReplyObject(a);
        freeReplyObject(b);
    }
    double raw = (double)pairs / (now_s() - t1);
    redisFree(rc);
    printf("hilock_pairs_per_s=%.1f raw_pairs_per_s=%.1f\n", hl, raw);
    return 0;
}
