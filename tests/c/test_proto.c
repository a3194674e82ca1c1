/*
 * Protocol layer (proto.h): names, owner strings, command builders, reply
 * decoders fed with replies parsed from raw RESP bytes, pub/sub decoding of
 * garbage, time validation, and the sans-I/O acquire state machine driven by
 * a simulated clock. One real redis-server checks the embedded scripts' SHA1.
 */
#include <CUnit/Basic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "harness.h"
#include "hilock.h"
#include "proto.h"

static th_redis srv;


static int arg_is(const hl_cmd *c, int i, const char *s)
{
    if (i >= c->argc)
        return 0;
    return c->argvlen[i] == strlen(s) && memcmp(c->argv[i], s, c->argvlen[i]) == 0;
}
static int arg_is_ci(const hl_cmd *c, int i, const char *s)
{
    if (i >= c->argc)
        return 0;
    return c->argvlen[i] == strlen(s) && strncasecmp(c->argv[i], s, c->argvlen[i]) == 0;
}

/* ---------------------------------------------------------------- names */

static void t_companion(void)
{
    char *s = hl_companion("redisson_lock__channel", "orders");
    CU_ASSERT_STRING_EQUAL(s, "redisson_lock__channel:{orders}");
    free(s);
    s = hl_companion("redisson_lock__channel", "orders{eu}");
    CU_ASSERT_STRING_EQUAL(s, "redisson_lock__channel:orders{eu}");
    free(s);
    s = hl_companion("p", "{x}y");
    CU_ASSERT_STRING_EQUAL(s, "p:{x}y");
    free(s);
    s = hl_companion("p", "a}b");
    CU_ASSERT_STRING_EQUAL(s, "p:{a}b}");
    free(s);
}

static void t_names(void)
{
    hl_names n;
    memset(&n, 0, sizeof n);
    CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, "res:1"), 0);
    CU_ASSERT_STRING_EQUAL(n.name, "res:1");
    CU_ASSERT_STRING_EQUAL(n.channel, "redisson_lock__channel:{res:1}");
    CU_ASSERT_STRING_EQUAL(n.queue, "redisson_lock_queue:{res:1}");
    CU_ASSERT_STRING_EQUAL(n.timeout, "redisson_lock_timeout:{res:1}");
    CU_ASSERT_STRING_EQUAL(n.latch_prefix, "redisson_unlock_latch:{res:1}");
    hl_names_free(&n);

    memset(&n, 0, sizeof n);
    CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, "{tag}res"), 0);
    CU_ASSERT_STRING_EQUAL(n.channel, "redisson_lock__channel:{tag}res");
    CU_ASSERT_STRING_EQUAL(n.queue, "redisson_lock_queue:{tag}res");
    CU_ASSERT_STRING_EQUAL(n.timeout, "redisson_lock_timeout:{tag}res");
    hl_names_free(&n);

    memset(&n, 0, sizeof n);
    CU_ASSERT_EQUAL(hl_names_init(&n, ""), HILOCK_EINVAL);
    hl_names_free(&n); /* must be harmless after a failed init */
    memset(&n, 0, sizeof n);
    CU_ASSERT_EQUAL(hl_names_init(&n, NULL), HILOCK_EINVAL);
    hl_names_free(&n);
}

static void t_owner(void)
{
    char buf[HL_OWNER_MAX];
    const char *id = "0d3c7d6e-5f3a-4c1e-9b1e-1234567890ab";
    hl_owner(buf, id, 1);
    CU_ASSERT_STRING_EQUAL(buf, "0d3c7d6e-5f3a-4c1e-9b1e-1234567890ab:1");
    hl_owner(buf, id, UINT64_MAX);
    CU_ASSERT_STRING_EQUAL(buf, "0d3c7d6e-5f3a-4c1e-9b1e-1234567890ab:18446744073709551615");
    hl_owner(buf, id, 0);
    CU_ASSERT_STRING_EQUAL(buf, "0d3c7d6e-5f3a-4c1e-9b1e-1234567890ab:0");
}

static void t_wait_channel(void)
{
    hl_names n;
    memset(&n, 0, sizeof n);
    CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, "L"), 0);
    char *ch = hl_wait_channel(HILOCK_KIND_REENTRANT, &n, "u:7");
    CU_ASSERT_STRING_EQUAL(ch, "redisson_lock__channel:{L}");
    free(ch);
    ch = hl_wait_channel(HILOCK_KIND_FAIR, &n, "u:7");
    CU_ASSERT_STRING_EQUAL(ch, "redisson_lock__channel:{L}:u:7");
    free(ch);
    hl_names_free(&n);
}

/* ---------------------------------------------------------------- scripts */

static void t_scripts_sha(void)
{
    redisContext *ctx = th_redis_connect(&srv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    for (int s = 0; s < HL_SCRIPT_COUNT; s++) {
        const char *src = hl_script_source((hl_script)s);
        const char *sha = hl_script_sha1((hl_script)s);
        CU_ASSERT_PTR_NOT_NULL_FATAL(src);
        CU_ASSERT_PTR_NOT_NULL_FATAL(sha);
        CU_ASSERT_PTR_NOT_NULL(hl_script_name((hl_script)s));
        CU_ASSERT_EQUAL(strlen(sha), 40);
        for (const char *p = sha; *p; p++)
            CU_ASSERT(strchr("0123456789abcdef", *p) != NULL);
        /* The server computes the SHA1 of the body it is given. */
        redisReply *r = redisCommand(ctx, "SCRIPT LOAD %s", src);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_EQUAL(r->type, REDIS_REPLY_STRING);
        if (r->type == REDIS_REPLY_STRING)
            CU_ASSERT_STRING_EQUAL(r->str, sha);
        freeReplyObject(r);
    }
    redisFree(ctx);
}

/* ---------------------------------------------------------------- builders */

static hl_names N;
static const char *OWNER = "0d3c7d6e-5f3a-4c1e-9b1e-1234567890ab:42";

static void t_cmd_acquire(void)
{
    hl_cmd c;
    memset(&c, 0, sizeof c);
    hl_cmd_acquire(&c, HILOCK_KIND_REENTRANT, &N, OWNER, 30000, 300000);
    CU_ASSERT_EQUAL(c.script, HL_SCRIPT_LOCK);
    CU_ASSERT_EQUAL(c.argc, 6);
    CU_ASSERT(arg_is_ci(&c, 0, "EVALSHA"));
    CU_ASSERT(arg_is(&c, 1, hl_script_sha1(HL_SCRIPT_LOCK)));
    CU_ASSERT(arg_is(&c, 2, "1")); /* no latch: one key */
    CU_ASSERT(arg_is(&c, 3, "res:1"));
    CU_ASSERT(arg_is(&c, 4, "30000"));
    CU_ASSERT(arg_is(&c, 5, OWNER));

    /* idempotent per request: the latch "<key>:<seq>" and its lifetime as
     * the last arguments (not a KEY: acquire_latch.lua) */
    memset(&c, 0, sizeof c);
    hl_cmd_acquire_latched(&c, HILOCK_KIND_REENTRANT, &N, OWNER, 30000, 300000,
                           "hilock_acquire_latch:{res:1}:id:1", 4000);
    CU_ASSERT_EQUAL(c.argc, 8);
    CU_ASSERT(arg_is(&c, 2, "1"));
    CU_ASSERT(arg_is(&c, 3, "res:1"));
    CU_ASSERT(arg_is(&c, 4, "30000"));
    CU_ASSERT(arg_is(&c, 5, OWNER));
    CU_ASSERT(arg_is(&c, 6, "4000"));
    CU_ASSERT(arg_is(&c, 7, "hilock_acquire_latch:{res:1}:id:1"));
    CU_ASSERT_EQUAL(hl_key_slot("hilock_acquire_latch:{res:1}:id", 30), hl_key_slot("res:1", 5));
    CU_ASSERT_STRING_EQUAL(N.acquire_latch_prefix, "hilock_acquire_latch:{res:1}");
    memset(&c, 0, sizeof c);
    hl_cmd_acquire_settle(&c, "hilock_acquire_latch:{res:1}:id:1", 4000);
    CU_ASSERT_EQUAL(c.argc, 6);
    CU_ASSERT_EQUAL(c.script, HL_SCRIPT_ACQUIRE_SETTLE);
    CU_ASSERT(arg_is(&c, 2, "1"));
    CU_ASSERT(arg_is(&c, 3, "hilock_acquire_latch:{res:1}:id"));
    CU_ASSERT(arg_is(&c, 4, "60000"));
    CU_ASSERT(arg_is(&c, 5, "1"));
    memset(&c, 0, sizeof c);
    hl_cmd_acquire_latched(&c, HILOCK_KIND_FAIR, &N, OWNER, 1500, 5000, "L:7", 4000);
    CU_ASSERT_EQUAL(c.argc, 12);
    CU_ASSERT(arg_is(&c, 2, "3"));
    CU_ASSERT(arg_is(&c, 10, "4000"));
    CU_ASSERT(arg_is(&c, 11, "L:7"));
    /* not "<key>:<seq>": no latch */
    memset(&c, 0, sizeof c);
    hl_cmd_acquire_latched(&c, HILOCK_KIND_FAIR, &N, OWNER, 1500, 5000, "L", 4000);
    CU_ASSERT_EQUAL(c.argc, 10);
    /* the read-write sides have it too */
    memset(&c, 0, sizeof c);
    hl_cmd_acquire_latched(&c, HILOCK_KIND_READ, &N, OWNER, 1500, -1, "L:8", 4000);
    CU_ASSERT_EQUAL(c.script, HL_SCRIPT_RW_READ_LOCK);
    CU_ASSERT_EQUAL(c.argc, 9);
    CU_ASSERT(arg_is(&c, 2, "2") && arg_is(&c, 4, "{res:1}"));
    CU_ASSERT(arg_is(&c, 7, "4000") && arg_is(&c, 8, "L:8"));
    memset(&c, 0, sizeof c);
    hl_cmd_acquire_latched(&c, HILOCK_KIND_WRITE, &N, OWNER, 1500, -1, "L:9", 4000);
    CU_ASSERT_EQUAL(c.script, HL_SCRIPT_RW_WRITE_LOCK);
    CU_ASSERT_EQUAL(c.argc, 8);
    CU_ASSERT(arg_is(&c, 2, "1") && arg_is(&c, 7, "L:9"));

    memset(&c, 0, sizeof c);
    hl_cmd_acquire(&c, HILOCK_KIND_FAIR, &N, OWNER, 1500, 5000);
    CU_ASSERT_EQUAL(c.script, HL_SCRIPT_FAIR_LOCK);
    CU_ASSERT(arg_is(&c, 1, hl_script_sha1(HL_SCRIPT_FAIR_LOCK)));
    CU_ASSERT(arg_is(&c, 2, "3"));
    CU_ASSERT(arg_is(&c, 3, "res:1"));
    CU_ASSERT(arg_is(&c, 4, "redisson_lock_queue:{res:1}"));
    CU_ASSERT(arg_is(&c, 5, "redisson_lock_timeout:{res:1}"));
    CU_ASSERT(arg_is(&c, 6, "1500"));
    CU_ASSERT(arg_is(&c, 7, OWNER));
    CU_ASSERT(arg_is(&c, 8, "5000"));
}

static void t_cmd_release(void)
{
    hl_cmd c;
    memset(&c, 0, sizeof c);
    const char *latch = "redisson_unlock_latch:{res:1}:req-1";
    hl_cmd_release(&c, HILOCK_KIND_REENTRANT, &N, OWNER, 30000, latch, 5000);
    CU_ASSERT_EQUAL(c.script, HL_SCRIPT_UNLOCK);
    CU_ASSERT_EQUAL(c.argc, 11);
    CU_ASSERT(arg_is_ci(&c, 0, "EVALSHA"));
    CU_ASSERT(arg_is(&c, 1, hl_script_sha1(HL_SCRIPT_UNLOCK)));
    CU_ASSERT(arg_is(&c, 2, "1")); /* one KEY: channel and latch are arguments */
    CU_ASSERT(arg_is(&c, 3, "res:1"));
    CU_ASSERT(arg_is(&c, 4, "redisson_lock__channel:{res:1}"));
    CU_ASSERT(arg_is(&c, 5, latch));
    CU_ASSERT(arg_is(&c, 6, "0"));
    CU_ASSERT(arg_is(&c, 7, "30000"));
    CU_ASSERT(arg_is(&c, 8, OWNER));
    CU_ASSERT(arg_is(&c, 9, "5000"));
    CU_ASSERT(arg_is_ci(&c, 10, "publish"));

    /* the fair release has its latch too (a retried release) */
    memset(&c, 0, sizeof c);
    hl_cmd_release(&c, HILOCK_KIND_FAIR, &N, OWNER, 30000, latch, 5000);
    CU_ASSERT_EQUAL(c.script, HL_SCRIPT_FAIR_UNLOCK);
    CU_ASSERT_EQUAL(c.argc, 13);
    CU_ASSERT(arg_is(&c, 2, "1"));
    CU_ASSERT(arg_is(&c, 7, latch));
    CU_ASSERT(arg_is(&c, 10, OWNER));
    CU_ASSERT(arg_is_ci(&c, 11, "publish"));
    CU_ASSERT(arg_is(&c, 12, "5000"));
}

static void t_names_one_slot(void)
{
    const char *good[] = {"plain", "{tag}x", "a{b}c", "{a}{}"};
    const char *bad[] = {"x{y", "{}", "{}x{y}", "a{"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        hl_names n;
        CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, good[i]), 0);
        CU_ASSERT(hl_names_one_slot(&n));
        hl_names_free(&n);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hl_names n;
        CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, bad[i]), 0);
        CU_ASSERT(!hl_names_one_slot(&n));
        hl_names_free(&n);
    }
}

static void t_cmd_force_renew_queries(void)
{
    hl_cmd c;
    memset(&c, 0, sizeof c);
    hl_cmd_force(&c, HILOCK_KIND_REENTRANT, &N);
    CU_ASSERT_EQUAL(c.script, HL_SCRIPT_FORCE);
    CU_ASSERT(arg_is(&c, 1, hl_script_sha1(HL_SCRIPT_FORCE)));
    CU_ASSERT(arg_is(&c, 2, "2"));
    CU_ASSERT(arg_is(&c, 3, "res:1"));
    CU_ASSERT(arg_is(&c, 4, "redisson_lock__channel:{res:1}"));
    CU_ASSERT(arg_is(&c, 5, "0"));
    CU_ASSERT(arg_is_ci(&c, 6, "publish"));

    memset(&c, 0, sizeof c);
    hl_cmd_renew(&c, &N, OWNER, 30000);
    CU_ASSERT_EQUAL(c.script, HL_SCRIPT_RENEW);
    CU_ASSERT_EQUAL(c.argc, 6);
    CU_ASSERT(arg_is(&c, 1, hl_script_sha1(HL_SCRIPT_RENEW)));
    CU_ASSERT(arg_is(&c, 2, "1"));
    CU_ASSERT(arg_is(&c, 3, "res:1"));
    CU_ASSERT(arg_is(&c, 4, "30000"));
    CU_ASSERT(arg_is(&c, 5, OWNER));

    memset(&c, 0, sizeof c);
    hl_cmd_exists(&c, &N);
    CU_ASSERT_EQUAL(c.script, -1);
    CU_ASSERT_EQUAL(c.argc, 2);
    CU_ASSERT(arg_is_ci(&c, 0, "EXISTS"));
    CU_ASSERT(arg_is(&c, 1, "res:1"));

    memset(&c, 0, sizeof c);
    hl_cmd_hexists(&c, &N, OWNER);
    CU_ASSERT_EQUAL(c.argc, 3);
    CU_ASSERT(arg_is_ci(&c, 0, "HEXISTS"));
    CU_ASSERT(arg_is(&c, 1, "res:1"));
    CU_ASSERT(arg_is(&c, 2, OWNER));

    memset(&c, 0, sizeof c);
    hl_cmd_hget(&c, &N, OWNER);
    CU_ASSERT_EQUAL(c.argc, 3);
    CU_ASSERT(arg_is_ci(&c, 0, "HGET"));
    CU_ASSERT(arg_is(&c, 2, OWNER));

    memset(&c, 0, sizeof c);
    hl_cmd_pttl(&c, &N);
    CU_ASSERT_EQUAL(c.argc, 2);
    CU_ASSERT(arg_is_ci(&c, 0, "PTTL"));
    CU_ASSERT(arg_is(&c, 1, "res:1"));
}

static void t_cmd_to_eval(void)
{
    hl_cmd c;
    memset(&c, 0, sizeof c);
    hl_cmd_acquire(&c, HILOCK_KIND_REENTRANT, &N, OWNER, 1234, 300000);
    hl_cmd_to_eval(&c);
    CU_ASSERT(arg_is_ci(&c, 0, "EVAL"));
    CU_ASSERT(arg_is(&c, 1, hl_script_source(HL_SCRIPT_LOCK)));
    CU_ASSERT(arg_is(&c, 2, "1"));
    CU_ASSERT(arg_is(&c, 3, "res:1"));
    CU_ASSERT(arg_is(&c, 4, "1234"));
    CU_ASSERT(arg_is(&c, 5, OWNER));
}

/* A command's RESP bytes: the exact length, the bytes hiredis's reader
 * parses back to the same arguments (empty, binary, 10- and 1000-byte). */
static void t_resp(void)
{
    char big[1000];
    memset(big, 'x', sizeof big);
    const char *argv[] = {"SET", "", "a\r\n\0b", "0123456789", big};
    const size_t lens[] = {3, 0, 5, 10, sizeof big};
    size_t n = hl_resp_len(5, lens);
    char *buf = malloc(n + 1);
    CU_ASSERT_FATAL(buf != NULL);
    buf[n] = '#';
    char *end = hl_resp_write(buf, 5, argv, lens);
    CU_ASSERT_EQUAL((size_t)(end - buf), n);
    CU_ASSERT_EQUAL(buf[n], '#');
    CU_ASSERT(memcmp(buf, "*5\r\n$3\r\nSET\r\n$0\r\n\r\n$5\r\na\r\n\0b\r\n$10\r\n", 35) == 0);
    redisReply *r = th_resp(buf, n);
    CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_ARRAY && r->elements == 5);
    for (size_t i = 0; i < 5; i++)
        CU_ASSERT(r->element[i]->len == lens[i] && !memcmp(r->element[i]->str, argv[i], lens[i]));
    freeReplyObject(r);
    free(buf);
    char one[16];
    const char *ping[] = {"PING"};
    const size_t plen[] = {4};
    CU_ASSERT_EQUAL(hl_resp_write(one, 1, ping, plen) - one, (long)hl_resp_len(1, plen));
    CU_ASSERT(memcmp(one, "*1\r\n$4\r\nPING\r\n", 14) == 0);
}

/* Built commands really work against Redis (EVAL path) and give the data. */
static redisReply *run_cmd(redisContext *ctx, hl_cmd *c)
{
    redisReply *r = redisCommandArgv(ctx, c->argc, c->argv, c->argvlen);
    if (r && hl_reply_is_noscript(r)) {
        freeReplyObject(r);
        hl_cmd_to_eval(c);
        r = redisCommandArgv(ctx, c->argc, c->argv, c->argvlen);
    }
    return r;
}

/* One latched acquire by OWNER (lease 20000 ms, wait 5000 ms, latch TTL
 * 4000 ms) with latch argument arg, run on ctx: *ar gets the decoded
 * answer, argc (when not NULL) the command's argument count; returns the
 * decoder's code. */
static int run_latched(redisContext *ctx, hilock_kind kind, const hl_names *n, const char *arg,
                       hl_acquire_result *ar, int *argc)
{
    hl_cmd c;
    memset(&c, 0, sizeof c);
    hl_cmd_acquire_latched(&c, kind, n, OWNER, 20000, 5000, arg, 4000);
    if (argc)
        *argc = c.argc;
    redisReply *r = run_cmd(ctx, &c);
    int rc = hl_decode_acquire_kind(kind, r, ar);
    freeReplyObject(r);
    return rc;
}

/* Settles the latched call arg on ctx: its grant (0 or 1), -1 when the
 * answer does not decode. */
static int run_settle(redisContext *ctx, const char *arg)
{
    hl_cmd c;
    memset(&c, 0, sizeof c);
    hl_cmd_acquire_settle(&c, arg, 4000);
    redisReply *r = run_cmd(ctx, &c);
    int granted = -1;
    if (hl_decode_acquire_settle(r, &granted) != 0)
        granted = -1;
    freeReplyObject(r);
    return granted;
}

/* A settle's undo (a release under its request's own latch, no seq) that
 * found nothing to release, then a copy of it that comes after the owner
 * was granted the lock again: the copy answers from the latch and the new
 * hold stays (simulator seed 441493875: the copy released it, and another
 * client was granted the lock with the owner not told). */
static void t_undo_late_copy(void)
{
    redisContext *ctx = th_redis_connect(&srv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    const hilock_kind kinds[] = {HILOCK_KIND_REENTRANT, HILOCK_KIND_FAIR};
    const char *names[] = {"undo-copy:r", "undo-copy:f"};
    for (int k = 0; k < 2; k++) {
        hl_names n;
        CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, names[k]), 0);
        char latch[128];
        snprintf(latch, sizeof latch, "redisson_unlock_latch:{%s}:cid-undo:5", names[k]);
        hl_cmd u, a;
        memset(&u, 0, sizeof u);
        hl_cmd_release(&u, kinds[k], &n, OWNER, 20000, latch, 60000);
        redisReply *r = run_cmd(ctx, &u); /* the grant it undoes had expired */
        CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER);
        long long first = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -9;
        freeReplyObject(r);
        memset(&a, 0, sizeof a);
        hl_cmd_acquire(&a, kinds[k], &n, OWNER, 20000, -1); /* the owner's next grant */
        hl_acquire_result ar;
        r = run_cmd(ctx, &a);
        CU_ASSERT(hl_decode_acquire_kind(kinds[k], r, &ar) == 0 && ar.acquired == 1);
        freeReplyObject(r);
        memset(&u, 0, sizeof u);
        hl_cmd_release(&u, kinds[k], &n, OWNER, 20000, latch, 60000);
        r = run_cmd(ctx, &u); /* the undo's late copy */
        CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == first);
        freeReplyObject(r);
        CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET %s %s", names[k], OWNER), 1);
        CU_ASSERT(th_redis_int(&srv, "PTTL %s", latch) > 50000);
        th_redis_int(&srv, "DEL %s %s", names[k], latch);
        hl_names_free(&n);
    }
    redisFree(ctx);
}

static void t_cmd_roundtrip(void)
{
    redisContext *ctx = th_redis_connect(&srv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    redisReply *r = redisCommand(ctx, "SCRIPT FLUSH");
    freeReplyObject(r);
    hl_cmd c;
    hl_acquire_result ar;
    hl_release_result rr;

    memset(&c, 0, sizeof c);
    hl_cmd_acquire(&c, HILOCK_KIND_REENTRANT, &N, OWNER, 20000, 300000);
    r = run_cmd(ctx, &c);
    CU_ASSERT_EQUAL(hl_decode_acquire(r, &ar), 0);
    CU_ASSERT_EQUAL(ar.acquired, 1);
    CU_ASSERT_EQUAL(ar.hold_count, 1);
    freeReplyObject(r);
    CU_ASSERT(th_redis_int(&srv, "PTTL res:1") > 19000);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET res:1 %s", OWNER), 1);

    memset(&c, 0, sizeof c);
    hl_cmd_acquire(&c, HILOCK_KIND_REENTRANT, &N, "someone-else:1", 20000, 300000);
    r = run_cmd(ctx, &c);
    CU_ASSERT_EQUAL(hl_decode_acquire(r, &ar), 0);
    CU_ASSERT_EQUAL(ar.acquired, 0);
    CU_ASSERT(ar.ttl_ms > 19000 && ar.ttl_ms <= 20000);
    freeReplyObject(r);

    memset(&c, 0, sizeof c);
    hl_cmd_release(&c, HILOCK_KIND_REENTRANT, &N, "someone-else:1", 20000,
                   "redisson_unlock_latch:{res:1}:a", 1000);
    r = run_cmd(ctx, &c);
    CU_ASSERT_EQUAL(hl_decode_release(r, &rr), 0);
    CU_ASSERT_EQUAL(rr.not_owner, 1);
    freeReplyObject(r);

    memset(&c, 0, sizeof c);
    hl_cmd_release(&c, HILOCK_KIND_REENTRANT, &N, OWNER, 20000,
                   "redisson_unlock_latch:{res:1}:b", 1000);
    r = run_cmd(ctx, &c);
    CU_ASSERT_EQUAL(hl_decode_release(r, &rr), 0);
    CU_ASSERT_EQUAL(rr.not_owner, 0);
    CU_ASSERT_EQUAL(rr.remaining, 0);
    freeReplyObject(r);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS res:1"), 0);
    redisFree(ctx);
}

/* The acquire latch: one key per owner (and epoch) that the owner's calls
 * overwrite, "<seq>:<holds>"; the same call sent again replays its answer, a
 * settled call ("x<seq>:") takes nothing, another call enters normally. */
static void latch_case(hilock_kind kind)
{
    redisContext *ctx = th_redis_connect(&srv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    hl_names n;
    CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, "res:latch"), 0);
    char key[256], arg[300];
    snprintf(key, sizeof key, "%s:%s:0", n.acquire_latch_prefix, OWNER);
    redisReply *r = redisCommand(ctx, "DEL res:latch %s", key);
    freeReplyObject(r);
    hl_acquire_result ar;
    /* call 5 granted; the same call again replays it */
    snprintf(arg, sizeof arg, "%s:5", key);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(run_latched(ctx, kind, &n, arg, &ar, NULL), 0);
        CU_ASSERT_EQUAL(ar.acquired, 1);
        CU_ASSERT_EQUAL(ar.hold_count, 1);
    }
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET res:latch %s", OWNER), 1);
    /* call 6 enters again and overwrites the one latch: no key per call */
    snprintf(arg, sizeof arg, "%s:6", key);
    CU_ASSERT_EQUAL(run_latched(ctx, kind, &n, arg, &ar, NULL), 0);
    CU_ASSERT_EQUAL(ar.hold_count, 2);
    char v[64] = "";
    CU_ASSERT_EQUAL(th_redis_str(&srv, v, sizeof v, "GET %s", key), 0);
    CU_ASSERT_STRING_EQUAL(v, "6:2");
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS %s:5", key), 0);
    CU_ASSERT(th_redis_int(&srv, "PTTL %s", key) > 3000);
    /* settling call 6 answers its grant; sent again, the same */
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL(run_settle(ctx, arg), 1);
    /* call 7 given up before it ran: a late copy of it takes nothing */
    snprintf(arg, sizeof arg, "%s:7", key);
    CU_ASSERT_EQUAL(run_settle(ctx, arg), 0);
    CU_ASSERT_EQUAL(run_latched(ctx, kind, &n, arg, &ar, NULL), 0);
    CU_ASSERT_EQUAL(ar.acquired, 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET res:latch %s", OWNER), 2);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS %s", n.queue), 0); /* queued nowhere */
    /* a call under the next epoch's key enters */
    snprintf(arg, sizeof arg, "%s:%s:1:8", n.acquire_latch_prefix, OWNER);
    CU_ASSERT_EQUAL(run_latched(ctx, kind, &n, arg, &ar, NULL), 0);
    CU_ASSERT_EQUAL(ar.hold_count, 3);
    r = redisCommand(ctx, "DEL res:latch %s %s:%s:1", key, n.acquire_latch_prefix, OWNER);
    freeReplyObject(r);
    hl_names_free(&n);
    redisFree(ctx);
}

/* The per-owner unlock latch ("<key>|<seq>"): the same release sent again
 * replays its answer, the owner's next release overwrites the one key. */
static void t_unlock_latch_per_owner(void)
{
    hilock_kind kinds[] = {HILOCK_KIND_REENTRANT, HILOCK_KIND_FAIR};
    for (int k = 0; k < 2; k++) {
        redisContext *ctx = th_redis_connect(&srv);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
        hl_names n;
        CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, "res:ulatch"), 0);
        char key[256], arg[300];
        snprintf(key, sizeof key, "%s:%s:e0", n.latch_prefix, OWNER);
        redisReply *r = redisCommand(ctx, "DEL res:ulatch %s", key);
        freeReplyObject(r);
        hl_cmd c;
        hl_release_result rr;
        for (int i = 0; i < 2; i++) { /* two holds */
            memset(&c, 0, sizeof c);
            hl_cmd_acquire(&c, kinds[k], &n, OWNER, 20000, 5000);
            freeReplyObject(run_cmd(ctx, &c));
        }
        int64_t want[] = {1, 1, 0}; /* seq 1, seq 1 again (replayed), seq 2 */
        const char *seqs[] = {"1", "1", "2"};
        for (int i = 0; i < 3; i++) {
            snprintf(arg, sizeof arg, "%s|%s", key, seqs[i]);
            memset(&c, 0, sizeof c);
            hl_cmd_release(&c, kinds[k], &n, OWNER, 20000, arg, 4000);
            r = run_cmd(ctx, &c);
            CU_ASSERT_EQUAL(hl_decode_release(r, &rr), 0);
            CU_ASSERT_EQUAL(rr.not_owner, 0);
            CU_ASSERT_EQUAL(rr.remaining, want[i]);
            freeReplyObject(r);
        }
        CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS res:ulatch"), 0);
        char v[64] = "";
        CU_ASSERT_EQUAL(th_redis_str(&srv, v, sizeof v, "GET %s", key), 0);
        CU_ASSERT_STRING_EQUAL(v, "2:0");
        CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS %s|2", key), 0); /* no key per release */
        r = redisCommand(ctx, "DEL %s", key);
        freeReplyObject(r);
        hl_names_free(&n);
        redisFree(ctx);
    }
}

/* One release by OWNER built by the engine's release machine (request id
 * rid, "<client>:e<epoch>:<seq>"), run on ctx; returns the holds left, or
 * -1 for "not owner". */
static int64_t run_release(redisContext *ctx, hilock_kind kind, const hl_names *n,
                           const char *rid)
{
    hl_release m;
    CU_ASSERT_EQUAL_FATAL(hl_release_init(&m, kind, n, OWNER, 20000, 30000, rid, 1000, 0, 0), 0);
    CU_ASSERT_EQUAL_FATAL(hl_release_next(&m, 0), HL_ACT_SEND);
    redisReply *r = run_cmd(ctx, &m.cmd);
    hl_release_result rr;
    int64_t out = -2;
    if (hl_decode_release(r, &rr) == 0)
        out = rr.not_owner ? -1 : rr.remaining;
    freeReplyObject(r);
    hl_release_free(&m);
    return out;
}

/* DEL every key matching pattern (KEYS: a test server of a few keys). */
static void del_matching(redisContext *ctx, const char *pattern)
{
    redisReply *k = redisCommand(ctx, "KEYS %s", pattern);
    for (size_t i = 0; k && k->type == REDIS_REPLY_ARRAY && i < k->elements; i++)
        freeReplyObject(redisCommand(ctx, "DEL %s", k->element[i]->str));
    if (k)
        freeReplyObject(k);
}

/* The settle machine's undo gives back the one grant its attempt made,
 * also when the owner was granted the lock again by a later call meanwhile
 * (a re-entry with a higher seq): a request id of the per-owner form
 * ("<client>:e<epoch>:<seq>", the OpenResty driver's) must not make the undo
 * "a late copy of an older release" (answered -1, nothing released: the
 * grant stayed, re-entered and renewed for good; test_resty's late grant
 * after a partition). */
static void t_settle_undo_after_later_grant(void)
{
    hilock_kind kinds[] = {HILOCK_KIND_REENTRANT, HILOCK_KIND_FENCED, HILOCK_KIND_FAIR};
    for (int k = 0; k < 3; k++) {
        redisContext *ctx = th_redis_connect(&srv);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
        hl_names n;
        CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, "res:sundo"), 0);
        del_matching(ctx, "*res:sundo*");
        char key[256], arg[300];
        snprintf(key, sizeof key, "%s:%s:0", n.acquire_latch_prefix, OWNER);
        /* call 5's attempt runs (granted); its reply never reaches the client */
        snprintf(arg, sizeof arg, "%s:5", key);
        hl_cmd a;
        memset(&a, 0, sizeof a);
        hl_cmd_acquire_latched(&a, kinds[k], &n, OWNER, 20000, 5000, arg, 4000);
        redisReply *late = run_cmd(ctx, &a);
        hl_settle s;
        CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:e0:6", 1000, 0), 0);
        /* call 7 of the owner (the next epoch's latch) is granted: a re-entry */
        hl_acquire_result ar;
        snprintf(arg, sizeof arg, "%s:%s:1:7", n.acquire_latch_prefix, OWNER);
        CU_ASSERT_EQUAL(run_latched(ctx, kinds[k], &n, arg, &ar, NULL), 0);
        CU_ASSERT_EQUAL(ar.hold_count, 2);
        /* the late reply comes: the undo gives call 5's grant back */
        CU_ASSERT_EQUAL(hl_settle_next(&s, 1), HL_ACT_WAIT);
        hl_settle_on_reply(&s, late, 2);
        freeReplyObject(late);
        CU_ASSERT_EQUAL_FATAL(hl_settle_next(&s, 2), HL_ACT_SEND);
        redisReply *r = run_cmd(ctx, &s.cmd);
        hl_release_result rr;
        CU_ASSERT_EQUAL(hl_decode_release(r, &rr), 0);
        CU_ASSERT_EQUAL(rr.not_owner, 0);
        CU_ASSERT_EQUAL(rr.remaining, 1);
        CU_ASSERT_EQUAL(hl_settle_next(&s, 3), HL_ACT_WAIT);
        hl_settle_on_reply(&s, r, 3);
        freeReplyObject(r);
        CU_ASSERT_EQUAL(hl_settle_next(&s, 3), HL_ACT_DONE);
        CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_RELEASED);
        hl_settle_free(&s);
        CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET res:sundo %s", OWNER), 1); /* call 7's */
        del_matching(ctx, "*res:sundo*");
        hl_names_free(&n);
        redisFree(ctx);
    }
}

/* The late-copy rule (proto_release.c, scripts/unlock_latch.lua): a copy of
 * a release that reaches the server after the owner released and took the
 * lock again changes nothing, however late: also after the release's own
 * latch has gone (deleted here: its lifetime is over), because the new
 * grant marked the owner's unlock latch with its own call number and the
 * latch lives as long as the hold (renewals keep it). Issue 29: the copy
 * released the later hold. Every kind with the per-owner latch. */
static void t_late_release_copy_rule(void)
{
    hilock_kind kinds[] = {HILOCK_KIND_REENTRANT, HILOCK_KIND_FENCED, HILOCK_KIND_FAIR};
    for (int k = 0; k < 3; k++) {
        redisContext *ctx = th_redis_connect(&srv);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
        hl_names n;
        CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, "res:lrcopy"), 0);
        char ulatch[256], alatch[300];
        snprintf(ulatch, sizeof ulatch, "%s:%s:owner", n.latch_prefix, OWNER);
        freeReplyObject(redisCommand(ctx, "DEL res:lrcopy %s", n.token));
        del_matching(ctx, "redisson_unlock_latch:{res:lrcopy}:*");
        del_matching(ctx, "hilock_acquire_latch:{res:lrcopy}:*");
        hl_acquire_result ar;
        /* call 1: taken; call 2: released */
        CU_ASSERT_EQUAL_FATAL(hl_acquire_latch_arg(alatch, sizeof alatch, &n, OWNER, 0, 1), 0);
        CU_ASSERT_EQUAL(run_latched(ctx, kinds[k], &n, alatch, &ar, NULL), 0);
        CU_ASSERT_EQUAL(ar.acquired, 1);
        CU_ASSERT_EQUAL(run_release(ctx, kinds[k], &n, "cid:e0:2"), 0);
        CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS res:lrcopy"), 0);
        /* the release's latch is gone, as after its lifetime */
        del_matching(ctx, "redisson_unlock_latch:{res:lrcopy}:*");
        /* call 3 (another latch epoch): taken again */
        CU_ASSERT_EQUAL_FATAL(hl_acquire_latch_arg(alatch, sizeof alatch, &n, OWNER, 1, 3), 0);
        CU_ASSERT_EQUAL(run_latched(ctx, kinds[k], &n, alatch, &ar, NULL), 0);
        CU_ASSERT_EQUAL(ar.acquired, 1);
        CU_ASSERT_EQUAL(ar.hold_count, 1);
        long long pttl = th_redis_int(&srv, "PTTL %s", ulatch);
        CU_ASSERT(pttl > 15000 && pttl <= 20000); /* as long as the 20 s lease */
        /* the late copy of call 2 */
        CU_ASSERT_EQUAL(run_release(ctx, kinds[k], &n, "cid:e0:2"), -1);
        CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET res:lrcopy %s", OWNER), 1);
        /* a renewal keeps the latch as long as the hold */
        hl_cmd c;
        memset(&c, 0, sizeof c);
        hl_cmd_renew(&c, &n, OWNER, 60000);
        freeReplyObject(run_cmd(ctx, &c));
        pttl = th_redis_int(&srv, "PTTL %s", ulatch);
        CU_ASSERT(pttl > 55000 && pttl <= 60000);
        /* re-entered (call 4), released once (call 5): one hold left, the
         * latch still lives as long as it */
        CU_ASSERT_EQUAL_FATAL(hl_acquire_latch_arg(alatch, sizeof alatch, &n, OWNER, 1, 4), 0);
        CU_ASSERT_EQUAL(run_latched(ctx, kinds[k], &n, alatch, &ar, NULL), 0);
        CU_ASSERT_EQUAL(ar.hold_count, 2);
        CU_ASSERT_EQUAL(run_release(ctx, kinds[k], &n, "cid:e1:5"), 1);
        pttl = th_redis_int(&srv, "PTTL %s", ulatch);
        CU_ASSERT(pttl > 15000 && pttl <= 20000);
        /* copies of calls 2 and 5 change nothing; call 5 sent again answers
         * as the first time */
        CU_ASSERT_EQUAL(run_release(ctx, kinds[k], &n, "cid:e0:2"), -1);
        CU_ASSERT_EQUAL(run_release(ctx, kinds[k], &n, "cid:e1:5"), 1);
        CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET res:lrcopy %s", OWNER), 1);
        /* call 6 releases the last hold; a copy of 2 or 5 then finds nothing */
        CU_ASSERT_EQUAL(run_release(ctx, kinds[k], &n, "cid:e1:6"), 0);
        CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS res:lrcopy"), 0);
        int64_t copy = run_release(ctx, kinds[k], &n, "cid:e0:2");
        /* a fair unlock of a lock already gone answers "released" (as
         * Redisson's) and changes nothing either */
        CU_ASSERT(copy == -1 || (kinds[k] == HILOCK_KIND_FAIR && copy == 0));
        CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS res:lrcopy"), 0);
        hl_names_free(&n);
        redisFree(ctx);
    }
}

/* The fenced lock's acquire latch keeps the token: the same call sent again
 * answers the same hold count and token and takes no new token. */
static void t_fenced_latch(void)
{
    redisContext *ctx = th_redis_connect(&srv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    hl_names n;
    CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, "res:flatch"), 0);
    char key[256], arg[300];
    snprintf(key, sizeof key, "%s:%s:e0", n.acquire_latch_prefix, OWNER);
    redisReply *r = redisCommand(ctx, "DEL res:flatch %s %s", key, n.token);
    freeReplyObject(r);
    hl_acquire_result ar;
    const char *seqs[] = {"5", "5", "6"};
    int64_t holds[] = {1, 1, 2}, tokens[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        snprintf(arg, sizeof arg, "%s:%s", key, seqs[i]);
        int argc = 0;
        CU_ASSERT_EQUAL(run_latched(ctx, HILOCK_KIND_FENCED, &n, arg, &ar, &argc), 0);
        CU_ASSERT_EQUAL(argc, 9);
        CU_ASSERT_EQUAL(ar.acquired, 1);
        CU_ASSERT_EQUAL(ar.hold_count, holds[i]);
        tokens[i] = ar.token;
    }
    /* a missing counter starts at the server's clock in milliseconds (a
     * 13-digit number: the latch keeps it exactly) */
    CU_ASSERT(tokens[0] > 1000000000000LL);
    CU_ASSERT_EQUAL(tokens[1], tokens[0]); /* the resend answers the same token */
    CU_ASSERT(tokens[2] > tokens[0]);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "GET %s", n.token), tokens[2]); /* the resend took none */
    /* settling call 6 finds its grant (its value carries the token too) */
    CU_ASSERT_EQUAL(run_settle(ctx, arg), 1);
    /* a late copy of call 6 takes nothing now */
    CU_ASSERT_EQUAL(run_latched(ctx, HILOCK_KIND_FENCED, &n, arg, &ar, NULL), 0);
    CU_ASSERT_EQUAL(ar.acquired, 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET res:flatch %s", OWNER), 2);
    r = redisCommand(ctx, "DEL res:flatch %s %s", key, n.token);
    freeReplyObject(r);
    hl_names_free(&n);
    redisFree(ctx);
}

static void t_acquire_latch(void)
{
    latch_case(HILOCK_KIND_REENTRANT);
    latch_case(HILOCK_KIND_FAIR);
}

/* ---------------------------------------------------------------- decoders */

/* One reply and what a decoder makes of it: the code and, when that is 0,
 * the numbers it fills (DC_ANY: not checked). */
#define DC_ANY INT64_MIN
typedef struct dcase {
    const char *reply;
    int rc;
    int64_t a, b;
} dcase;
typedef int (*dc_decode)(const redisReply *r, int64_t *a, int64_t *b);

static void run_dcases(const char *what, dc_decode fn, const dcase *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        redisReply *r = th_resp(c[i].reply, strlen(c[i].reply));
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        int64_t a = -99, b = -99;
        int rc = fn(r, &a, &b);
        int ok = rc == c[i].rc && (rc != 0 || ((c[i].a == DC_ANY || a == c[i].a) &&
                                               (c[i].b == DC_ANY || b == c[i].b)));
        if (!ok)
            printf("\n  %s decoder, case #%zu: rc=%d %lld %lld\n", what, i, rc, (long long)a,
                   (long long)b);
        CU_ASSERT(ok);
        freeReplyObject(r);
    }
}
#define RUN_DCASES(what, fn, cases) run_dcases(what, fn, cases, sizeof cases / sizeof cases[0])

/* acquired, then the hold count (acquired) or the holder's PTTL (not) */
static int dc_acquire(const redisReply *r, int64_t *a, int64_t *b)
{
    hl_acquire_result x = {0};
    int rc = hl_decode_acquire(r, &x);
    *a = x.acquired;
    *b = x.acquired ? x.hold_count : x.ttl_ms;
    return rc;
}

static int dc_release(const redisReply *r, int64_t *a, int64_t *b)
{
    hl_release_result x = {0};
    int rc = hl_decode_release(r, &x);
    *a = x.not_owner;
    *b = x.remaining;
    return rc;
}

static int dc_int(const redisReply *r, int64_t *a, int64_t *b)
{
    (void)b;
    return hl_decode_int(r, a);
}

static int dc_hold_count(const redisReply *r, int64_t *a, int64_t *b)
{
    (void)b;
    return hl_decode_hold_count(r, a);
}

#define WRONGTYPE_REPLY "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"

static void t_decode_acquire(void)
{
    static const dcase cases[] = {
        {"*2\r\n:1\r\n:1\r\n", 0, 1, 1},
        {"*2\r\n:1\r\n:7\r\n", 0, 1, 7},
        {"*2\r\n:0\r\n:2500\r\n", 0, 0, 2500},
        {"*2\r\n:0\r\n:-1\r\n", 0, 0, -1},
        {WRONGTYPE_REPLY, HILOCK_EWRONGTYPE, DC_ANY, DC_ANY},
        {"-WRONGTYPE key is not a lock\r\n", HILOCK_EWRONGTYPE, DC_ANY, DC_ANY},
        /* shapes no acquire answers */
        {"-ERR unknown command\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"$3\r\nfoo\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"$-1\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {":1\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"+OK\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"*0\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"*1\r\n:1\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"*2\r\n$3\r\nabc\r\n:1\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"*-1\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"*2\r\n*1\r\n:1\r\n:1\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
    };
    RUN_DCASES("acquire", dc_acquire, cases);
}

static void t_decode_release(void)
{
    static const dcase cases[] = {
        {":-1\r\n", 0, 1, DC_ANY}, /* not owner */
        {":0\r\n", 0, 0, 0},
        {":3\r\n", 0, 0, 3},
        {WRONGTYPE_REPLY, HILOCK_EWRONGTYPE, DC_ANY, DC_ANY},
        {"-ERR boom\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"*1\r\n:1\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"$-1\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
    };
    RUN_DCASES("release", dc_release, cases);
}

static void t_decode_int_holdcount_noscript(void)
{
    static const dcase ints[] = {
        {":1\r\n", 0, 1, DC_ANY},
        {":-2\r\n", 0, -2, DC_ANY},
        {"-ERR x\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {"-WRONGTYPE x\r\n", HILOCK_EWRONGTYPE, DC_ANY, DC_ANY},
        {"*0\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
    };
    RUN_DCASES("int", dc_int, ints);
    static const dcase holds[] = {
        {"$-1\r\n", 0, 0, DC_ANY}, /* no field: 0 holds */
        {"$1\r\n3\r\n", 0, 3, DC_ANY},
        {"$2\r\n12\r\n", 0, 12, DC_ANY},
        {"$3\r\nabc\r\n", HILOCK_EPROTO, DC_ANY, DC_ANY},
        {WRONGTYPE_REPLY, HILOCK_EWRONGTYPE, DC_ANY, DC_ANY},
    };
    RUN_DCASES("hold count", dc_hold_count, holds);

    redisReply *r = TH_RESP("-NOSCRIPT No matching script. Please use EVAL.\r\n");
    CU_ASSERT_TRUE(hl_reply_is_noscript(r));
    freeReplyObject(r);
    r = TH_RESP("-ERR NOSCRIPT-ish but not\r\n");
    CU_ASSERT_FALSE(hl_reply_is_noscript(r));
    freeReplyObject(r);
    r = TH_RESP("$8\r\nNOSCRIPT\r\n"); /* a string, not an error */
    CU_ASSERT_FALSE(hl_reply_is_noscript(r));
    freeReplyObject(r);
}

static void ps_check(const char *bytes, size_t len, hl_ps_type type, int payload,
                     const char *channel)
{
    redisReply *r = th_resp(bytes, len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    hl_ps_event ev;
    memset(&ev, 0x5a, sizeof ev);
    hl_decode_pubsub(r, &ev);
    CU_ASSERT_EQUAL(ev.type, type);
    if (type == HL_PS_MESSAGE)
        CU_ASSERT_EQUAL(ev.payload, payload);
    if (channel) {
        CU_ASSERT_EQUAL(ev.channel_len, strlen(channel));
        if (ev.channel && ev.channel_len == strlen(channel))
            CU_ASSERT_EQUAL(memcmp(ev.channel, channel, ev.channel_len), 0);
    }
    freeReplyObject(r);
}
#define PS(s, t, p, ch) ps_check(s, sizeof(s) - 1, t, p, ch)

static void t_decode_pubsub(void)
{
    PS("*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$1\r\n0\r\n", HL_PS_MESSAGE, 0, "chan");
    PS("*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$1\r\n1\r\n", HL_PS_MESSAGE, 1, "chan");
    PS("*3\r\n$8\r\nsmessage\r\n$4\r\nchan\r\n$1\r\n0\r\n", HL_PS_MESSAGE, 0, "chan");
    PS("*3\r\n$9\r\nsubscribe\r\n$4\r\nchan\r\n:1\r\n", HL_PS_SUBSCRIBE, 0, "chan");
    PS("*3\r\n$10\r\nssubscribe\r\n$4\r\nchan\r\n:1\r\n", HL_PS_SUBSCRIBE, 0, "chan");
    PS("*3\r\n$11\r\nunsubscribe\r\n$4\r\nchan\r\n:0\r\n", HL_PS_UNSUBSCRIBE, 0, "chan");
    PS("*3\r\n$12\r\nsunsubscribe\r\n$4\r\nchan\r\n:0\r\n", HL_PS_UNSUBSCRIBE, 0, "chan");

    /* Garbage payloads on a real message: ignored (payload -1). */
    const char *garbage[] = {"", "abc", "2", "-1", "10", "0x", "1.5", "hello world",
                             "99999999999999999999999"};
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        char buf[256];
        int n = snprintf(buf, sizeof buf, "*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$%zu\r\n%s\r\n",
                         strlen(garbage[i]), garbage[i]);
        redisReply *r = th_resp(buf, (size_t)n);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        hl_ps_event ev;
        memset(&ev, 0, sizeof ev);
        hl_decode_pubsub(r, &ev);
        if (ev.type == HL_PS_MESSAGE && ev.payload != -1)
            printf("\n  payload \"%s\" decoded as %d\n", garbage[i], ev.payload);
        CU_ASSERT(ev.type != HL_PS_MESSAGE || ev.payload == -1);
        freeReplyObject(r);
    }
    /* Binary payload with a NUL after a valid-looking digit. */
    PS("*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$2\r\n0\0\r\n", HL_PS_MESSAGE, -1, NULL);
    PS("*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$2\r\n\0000\r\n", HL_PS_MESSAGE, -1, NULL);

    /* Malformed frames: never a wake-up, never a crash. */
    const char *frames[] = {
        "*0\r\n", "*1\r\n$7\r\nmessage\r\n", "*2\r\n$7\r\nmessage\r\n$4\r\nchan\r\n",
        "*3\r\n:1\r\n:2\r\n:3\r\n", "*3\r\n$7\r\nmessage\r\n:5\r\n$1\r\n0\r\n",
        "*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n:0\r\n", "*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$-1\r\n",
        "*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n*1\r\n$1\r\n0\r\n", "$7\r\nmessage\r\n", ":0\r\n",
        "-ERR x\r\n", "+OK\r\n", "$-1\r\n", "*-1\r\n", "*3\r\n$4\r\npong\r\n$0\r\n\r\n$1\r\n0\r\n",
        "*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$4\r\nchan\r\n$3\r\nxyz\r\n",
    };
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
        redisReply *r = th_resp(frames[i], strlen(frames[i]));
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        hl_ps_event ev;
        memset(&ev, 0, sizeof ev);
        hl_decode_pubsub(r, &ev);
        int wakes = ev.type == HL_PS_MESSAGE && (ev.payload == 0 || ev.payload == 1);
        if (wakes)
            printf("\n  malformed frame #%zu decoded as a wake-up\n", i);
        CU_ASSERT_FALSE(wakes);
        freeReplyObject(r);
    }
}

/* ---------------------------------------------------------------- times */

static void t_check_times(void)
{
    CU_ASSERT_EQUAL(hl_check_wait(0), 0);
    CU_ASSERT_EQUAL(hl_check_wait(-1), 0);
    CU_ASSERT_EQUAL(hl_check_wait(1), 0);
    CU_ASSERT_EQUAL(hl_check_wait(HILOCK_MAX_TIME_MS), 0);
    CU_ASSERT_EQUAL(hl_check_wait(HILOCK_MAX_TIME_MS + 1), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_check_wait(INT64_MAX), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_check_wait(-2), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_check_wait(INT64_MIN), HILOCK_EINVAL);

    CU_ASSERT_EQUAL(hl_check_lease(0), 0);
    CU_ASSERT_EQUAL(hl_check_lease(-1), 0);
    CU_ASSERT_EQUAL(hl_check_lease(1), 0);
    CU_ASSERT_EQUAL(hl_check_lease(HILOCK_MAX_TIME_MS), 0);
    CU_ASSERT_EQUAL(hl_check_lease(HILOCK_MAX_TIME_MS + 1), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_check_lease(INT64_MAX), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_check_lease(-2), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_check_lease(INT64_MIN), HILOCK_EINVAL);
}

/* ---------------------------------------------------------------- state machine */

/* A simulated driver: replies come from a script of RESP strings (the last
 * one repeats); WAIT advances the clock by sleep_ms (a timeout, no message).
 * Records what the machine asked for. */
typedef struct sim {
    const char **replies;
    int nreplies;
    int sub_ok;
    int64_t now, start;
    int sends, subs, unsubs, waits, steps;
    int first_after_sub; /* action right after the first SUBSCRIBE */
    int waited_too_long; /* a WAIT beyond the deadline or the holder's ttl */
    int64_t holder_ttl;
    int64_t wait_ms;
    int unmatched_unsub;
    int open_subs;
} sim;

static int sim_run(sim *s, hl_acquire *a)
{
    int last_sub_step = -1;
    for (s->steps = 0; s->steps < 200; s->steps++) {
        hl_action act = hl_acquire_next(a, s->now);
        if (last_sub_step >= 0 && s->first_after_sub == 0)
            s->first_after_sub = (int)act;
        last_sub_step = -1;
        switch (act) {
        case HL_ACT_SEND: {
            const char *b = s->replies[s->sends < s->nreplies ? s->sends : s->nreplies - 1];
            s->sends++;
            redisReply *r = th_resp(b, strlen(b));
            s->now += 1;
            hl_acquire_on_reply(a, r, s->now);
            freeReplyObject(r);
            break;
        }
        case HL_ACT_SUBSCRIBE:
            CU_ASSERT_PTR_NOT_NULL(a->channel);
            s->subs++;
            s->open_subs++;
            if (s->subs == 1)
                last_sub_step = s->steps;
            hl_acquire_on_subscribed(a, s->sub_ok, s->now);
            break;
        case HL_ACT_WAIT:
            s->waits++;
            if (a->sleep_ms < 0 || (s->wait_ms > 0 && s->now + a->sleep_ms > s->start + s->wait_ms + 5) ||
                (s->holder_ttl > 0 && a->sleep_ms > s->holder_ttl + 5))
                s->waited_too_long++;
            s->now += a->sleep_ms < 0 ? 100000 : a->sleep_ms;
            hl_acquire_on_wake(a, s->now);
            break;
        case HL_ACT_UNSUBSCRIBE:
            s->unsubs++;
            if (s->open_subs == 0)
                s->unmatched_unsub++;
            else
                s->open_subs--;
            break;
        case HL_ACT_DONE:
            return a->result;
        default:
            CU_FAIL("unknown action");
            return 12345;
        }
    }
    CU_FAIL("state machine did not finish within 200 steps");
    return 12345;
}

#define FEED(a, b, now) TH_FEED(hl_acquire_on_reply, a, b, now)

static void t_sm_free_lock(void)
{
    const char *rep[] = {"*2\r\n:1\r\n:1\r\n"};
    sim s = {.replies = rep, .nreplies = 1, .sub_ok = 1, .now = 1000000, .start = 1000000, .holder_ttl = 0, .wait_ms = 0};
    hl_acquire a;
    CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 0, 5000,
                                          300000, s.now), 0);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, s.now), HL_ACT_SEND);
    CU_ASSERT_EQUAL(a.cmd.script, HL_SCRIPT_LOCK);
    CU_ASSERT(arg_is(&a.cmd, 4, "5000"));
    CU_ASSERT(arg_is(&a.cmd, 5, OWNER));
    FEED(&a, "*2\r\n:1\r\n:1\r\n", s.now);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, s.now), HL_ACT_DONE);
    CU_ASSERT_EQUAL(a.result, 0);
    CU_ASSERT_EQUAL(a.hold_count, 1);
    hl_acquire_free(&a);
}

/* A reentrant acquire by OWNER (wait 0, lease 5000) with the acquire latch
 * L, its attempt sent at 1000. */
static int start_latched(hl_acquire *a, const char *L)
{
    if (hl_acquire_init(a, HILOCK_KIND_REENTRANT, &N, OWNER, 0, 5000, 300000, 1000) != 0)
        return -1;
    if (hl_acquire_set_latch(a, L, 4000) != 0) {
        hl_acquire_free(a);
        return -1;
    }
    CU_ASSERT_EQUAL(hl_acquire_next(a, 1000), HL_ACT_SEND);
    return 0;
}

/* A reply lost with its connection: the machine settles the attempt before
 * it ends (SET latch x GET; a grant found there is released); a plain error
 * (nothing sent) ends at once. */
static void t_sm_reply_lost_settled(void)
{
    const char *L = "hilock_acquire_latch:{res:1}:id:7";
    hl_acquire a;
    CU_ASSERT_EQUAL_FATAL(start_latched(&a, L), 0);
    CU_ASSERT(arg_is(&a.cmd, 7, L));
    hl_acquire_on_reply_lost(&a, HILOCK_ECONN, 1001);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1001), HL_ACT_SEND);
    CU_ASSERT_EQUAL(a.cmd.script, HL_SCRIPT_ACQUIRE_SETTLE);
    CU_ASSERT(arg_is(&a.cmd, 3, "hilock_acquire_latch:{res:1}:id") && arg_is(&a.cmd, 5, "7"));
    /* the settle's own reply lost: sent again (it is idempotent) */
    hl_acquire_on_error(&a, HILOCK_ECONN, 1001);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1001), HL_ACT_SEND);
    CU_ASSERT_EQUAL(a.cmd.script, HL_SCRIPT_ACQUIRE_SETTLE);
    FEED(&a, "$1\r\n1\r\n", 1002); /* the lost attempt had taken one hold */
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1002), HL_ACT_SEND);
    CU_ASSERT_EQUAL(a.cmd.script, HL_SCRIPT_UNLOCK);
    CU_ASSERT(arg_is(&a.cmd, 5, "hilock_acquire_latch:{res:1}:id:7:u"));
    FEED(&a, ":0\r\n", 1003);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1003), HL_ACT_DONE);
    CU_ASSERT_EQUAL(a.result, HILOCK_ECONN);
    hl_acquire_free(&a);

    /* nothing there (the attempt never ran): no release */
    CU_ASSERT_EQUAL_FATAL(start_latched(&a, L), 0);
    hl_acquire_on_reply_lost(&a, HILOCK_ECONN, 1001);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1001), HL_ACT_SEND);
    FEED(&a, "$0\r\n\r\n", 1002);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1002), HL_ACT_DONE);
    CU_ASSERT_EQUAL(a.result, HILOCK_ECONN);
    hl_acquire_free(&a);

    /* an error with nothing sent: done at once */
    CU_ASSERT_EQUAL_FATAL(start_latched(&a, L), 0);
    hl_acquire_on_error(&a, HILOCK_ECONN, 1001);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1001), HL_ACT_DONE);
    CU_ASSERT_EQUAL(a.result, HILOCK_ECONN);
    hl_acquire_free(&a);
}

/* Every settle try fails: the machine ends marked unsettled; a machine
 * given the same latch later (hl_acquire_resettle) settles it and gives a
 * grant back under the same undo latch, or ends unsettled again. */
static void t_sm_settle_fails_resettle(void)
{
    const char *L = "hilock_acquire_latch:{res:1}:id:7";
    hl_acquire a;
    CU_ASSERT_EQUAL_FATAL(start_latched(&a, L), 0);
    hl_acquire_on_reply_lost(&a, HILOCK_ECONN, 1001);
    for (int i = 0; i < HL_SETTLE_TRIES; i++) {
        CU_ASSERT_EQUAL(hl_acquire_next(&a, 1001), HL_ACT_SEND);
        CU_ASSERT_EQUAL(a.cmd.script, HL_SCRIPT_ACQUIRE_SETTLE);
        hl_acquire_on_reply_lost(&a, HILOCK_ECONN, 1001);
    }
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1001), HL_ACT_DONE);
    CU_ASSERT_EQUAL(a.result, HILOCK_ECONN);
    CU_ASSERT_EQUAL(a.unsettled, 1);
    hl_acquire_free(&a);

    /* later: the settle finds the grant, the undo gives it back */
    CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 0, 5000, 300000,
                                          5000), 0);
    CU_ASSERT_EQUAL_FATAL(hl_acquire_set_latch(&a, L, 4000), 0);
    hl_acquire_resettle(&a);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 5000), HL_ACT_SEND);
    CU_ASSERT_EQUAL(a.cmd.script, HL_SCRIPT_ACQUIRE_SETTLE);
    CU_ASSERT(arg_is(&a.cmd, 3, "hilock_acquire_latch:{res:1}:id") && arg_is(&a.cmd, 5, "7"));
    FEED(&a, "$1\r\n1\r\n", 5001);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 5001), HL_ACT_SEND);
    CU_ASSERT_EQUAL(a.cmd.script, HL_SCRIPT_UNLOCK);
    CU_ASSERT(arg_is(&a.cmd, 5, "hilock_acquire_latch:{res:1}:id:7:u"));
    FEED(&a, ":0\r\n", 5002);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 5002), HL_ACT_DONE);
    CU_ASSERT_EQUAL(a.result, 0);
    CU_ASSERT_EQUAL(a.unsettled, 0);
    hl_acquire_free(&a);

    /* later, and the server still out of reach: unsettled again */
    CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 0, 5000, 300000,
                                          5000), 0);
    CU_ASSERT_EQUAL_FATAL(hl_acquire_set_latch(&a, L, 4000), 0);
    hl_acquire_resettle(&a);
    for (int i = 0; i < HL_SETTLE_TRIES; i++) {
        CU_ASSERT_EQUAL(hl_acquire_next(&a, 5000), HL_ACT_SEND);
        hl_acquire_on_error(&a, HILOCK_ECONN, 5000);
    }
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 5000), HL_ACT_DONE);
    CU_ASSERT_EQUAL(a.unsettled, 1);
    hl_acquire_free(&a);
}

static void t_sm_one_try_busy(void)
{
    const char *rep[] = {"*2\r\n:0\r\n:5000\r\n"};
    sim s = {.replies = rep, .nreplies = 1, .sub_ok = 1, .now = 1000000, .start = 1000000, .holder_ttl = 5000, .wait_ms = 0};
    hl_acquire a;
    CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 0, 5000,
                                          300000, s.now), 0);
    CU_ASSERT_EQUAL(sim_run(&s, &a), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(s.sends, 1);
    CU_ASSERT_EQUAL(s.subs, 0);
    CU_ASSERT_EQUAL(s.waits, 0);
    hl_acquire_free(&a);
}

static void t_sm_wait_times_out(void)
{
    /* Holder's PTTL 300 ms, wait 1000 ms: sleeps never exceed either. */
    const char *rep[] = {"*2\r\n:0\r\n:300\r\n"};
    sim s = {.replies = rep, .nreplies = 1, .sub_ok = 1, .now = 1000000, .start = 1000000, .holder_ttl = 300, .wait_ms = 1000};
    hl_acquire a;
    CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 1000, 5000,
                                          300000, s.now), 0);
    CU_ASSERT_EQUAL(sim_run(&s, &a), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(s.subs, 1);
    CU_ASSERT_EQUAL(s.first_after_sub, HL_ACT_SEND); /* retry right after subscribing */
    CU_ASSERT_EQUAL(s.unsubs, 1);
    CU_ASSERT_EQUAL(s.unmatched_unsub, 0);
    CU_ASSERT(s.waits >= 3); /* woke at least at each holder ttl */
    CU_ASSERT_EQUAL(s.waited_too_long, 0);
    CU_ASSERT(s.now >= s.start + 1000);
    CU_ASSERT(s.now <= s.start + 1000 + 50);
    hl_acquire_free(&a);
}

static void t_sm_acquire_after_wait(void)
{
    const char *rep[] = {"*2\r\n:0\r\n:800\r\n", "*2\r\n:0\r\n:700\r\n", "*2\r\n:1\r\n:1\r\n"};
    sim s = {.replies = rep, .nreplies = 3, .sub_ok = 1, .now = 1000000, .start = 1000000, .holder_ttl = 800, .wait_ms = 10000};
    hl_acquire a;
    CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 10000, 5000,
                                          300000, s.now), 0);
    CU_ASSERT_EQUAL(sim_run(&s, &a), 0);
    CU_ASSERT_EQUAL(a.hold_count, 1);
    CU_ASSERT_EQUAL(s.sends, 3);
    CU_ASSERT_EQUAL(s.subs, s.unsubs);
    CU_ASSERT_EQUAL(s.waited_too_long, 0);
    CU_ASSERT(s.now - s.start <= 800 + 50); /* one wait of at most the holder's ttl */
    hl_acquire_free(&a);
}

static void t_sm_wrongtype_stops(void)
{
    const char *rep[] = {"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"};
    sim s = {.replies = rep, .nreplies = 1, .sub_ok = 1, .now = 1000000, .start = 1000000, .holder_ttl = 0, .wait_ms = 5000};
    hl_acquire a;
    CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 5000, 5000,
                                          300000, s.now), 0);
    CU_ASSERT_EQUAL(sim_run(&s, &a), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(s.sends, 1);
    CU_ASSERT_EQUAL(s.subs, s.unsubs);
    hl_acquire_free(&a);
}

/* hl_acquire_cancel: a waiting fair waiter leaves the line, unsubscribes and
 * ends with ECANCELED; a reentrant one just unsubscribes; a grant already
 * decoded stands. */
static void t_sm_cancel(void)
{
    for (int fair = 0; fair < 2; fair++) {
        hl_acquire a;
        CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, fair ? HILOCK_KIND_FAIR : HILOCK_KIND_REENTRANT,
                                              &N, OWNER, -1, 5000, 300000, 1000), 0);
        CU_ASSERT_EQUAL(hl_acquire_next(&a, 1000), HL_ACT_SEND);
        redisReply *r = TH_RESP("*2\r\n:0\r\n:4000\r\n");
        hl_acquire_on_reply(&a, r, 1001);
        CU_ASSERT_EQUAL(hl_acquire_next(&a, 1001), HL_ACT_SUBSCRIBE);
        hl_acquire_on_subscribed(&a, 1, 1001);
        CU_ASSERT_EQUAL(hl_acquire_next(&a, 1001), HL_ACT_SEND);
        hl_acquire_on_reply(&a, r, 1002);
        CU_ASSERT_EQUAL(hl_acquire_next(&a, 1002), HL_ACT_WAIT);
        hl_acquire_cancel(&a, 1003);
        hl_acquire_cancel(&a, 1003); /* twice is once */
        if (fair) {
            CU_ASSERT_EQUAL(hl_acquire_next(&a, 1003), HL_ACT_SEND);
            CU_ASSERT_EQUAL(a.cmd.script, HL_SCRIPT_FAIR_CANCEL);
            redisReply *one = TH_RESP(":1\r\n");
            hl_acquire_on_reply(&a, one, 1004);
            freeReplyObject(one);
        }
        CU_ASSERT_EQUAL(hl_acquire_next(&a, 1004), HL_ACT_UNSUBSCRIBE);
        CU_ASSERT_EQUAL(hl_acquire_next(&a, 1004), HL_ACT_DONE);
        CU_ASSERT_EQUAL(a.result, HILOCK_ECANCELED);
        freeReplyObject(r);
        hl_acquire_free(&a);
    }
    /* the grant came first: cancel changes nothing */
    hl_acquire a;
    CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_FAIR, &N, OWNER, -1, 5000, 300000,
                                          1000), 0);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1000), HL_ACT_SEND);
    redisReply *g = TH_RESP("*2\r\n:1\r\n:1\r\n");
    hl_acquire_on_reply(&a, g, 1001);
    freeReplyObject(g);
    hl_acquire_cancel(&a, 1002);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1002), HL_ACT_DONE);
    CU_ASSERT_EQUAL(a.result, 0);
    hl_acquire_free(&a);
}

/* hl_acquire_set_line: a multi-lock member's one try joins the fair line
 * with the window given and leaves it in place when it finishes (the
 * multi-lock leaves it at the end of its call); without it, or on a machine
 * that waits, nothing changes. */
static void t_sm_one_try_line(void)
{
    for (int line = 0; line < 2; line++) {
        hl_acquire a;
        CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_FAIR, &N, OWNER, 0, 5000, 300000,
                                              1000), 0);
        if (line)
            hl_acquire_set_line(&a, 4000);
        CU_ASSERT_EQUAL(hl_acquire_next(&a, 1000), HL_ACT_SEND);
        CU_ASSERT_EQUAL(a.cmd.script, HL_SCRIPT_FAIR_LOCK);
        CU_ASSERT(arg_is(&a.cmd, 8, line ? "4000" : "0"));
        CU_ASSERT(arg_is(&a.cmd, 9, line ? "1" : "0"));
        redisReply *r = TH_RESP("*2\r\n:0\r\n:4000\r\n");
        hl_acquire_on_reply(&a, r, 1001);
        freeReplyObject(r);
        CU_ASSERT_EQUAL(hl_acquire_next(&a, 1001), HL_ACT_DONE); /* no fair_cancel */
        CU_ASSERT_EQUAL(a.result, HILOCK_ETIMEDOUT);
        hl_acquire_free(&a);
    }
    hl_acquire a; /* a waiting machine keeps its own window */
    CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_FAIR, &N, OWNER, 7000, 5000, 300000,
                                          1000), 0);
    hl_acquire_set_line(&a, 4000);
    CU_ASSERT_EQUAL(hl_acquire_next(&a, 1000), HL_ACT_SEND);
    CU_ASSERT(arg_is(&a.cmd, 8, "7000"));
    hl_acquire_free(&a);
}

static void t_sm_subscribe_fails(void)
{
    /* Without a subscription the machine still retries on its own timer
     * and honours the deadline. */
    const char *rep[] = {"*2\r\n:0\r\n:200\r\n"};
    sim s = {.replies = rep, .nreplies = 1, .sub_ok = 0, .now = 1000000, .start = 1000000, .holder_ttl = 200, .wait_ms = 700};
    hl_acquire a;
    CU_ASSERT_EQUAL_FATAL(hl_acquire_init(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 700, 5000,
                                          300000, s.now), 0);
    CU_ASSERT_EQUAL(sim_run(&s, &a), HILOCK_ETIMEDOUT);
    CU_ASSERT(s.sends >= 3);
    CU_ASSERT_EQUAL(s.waited_too_long, 0);
    CU_ASSERT(s.now >= s.start + 700 && s.now <= s.start + 700 + 50);
    hl_acquire_free(&a);
}

/* +switch-master payloads: only "<name> <ip> <port> <ip> <port>" with ports in
 * 1..65535 are taken; a port that overflows int must not wrap to a valid one
 * (4294973675 = 2^32 + 6379 was read as 6379 by sscanf %d). */
static void t_decode_switch_master(void)
{
    static const struct {
        const char *payload;
        int ok, port;
    } cases[] = {
        {"mymaster 10.0.0.1 6379 10.0.0.2 6380", 1, 6380},
        {"mymaster 10.0.0.1 6379 10.0.0.2 65535", 1, 65535},
        {"mymaster 10.0.0.1 6379 10.0.0.2 4294973675", 0, 0},
        {"mymaster 10.0.0.1 6379 10.0.0.2 65536", 0, 0},
        {"mymaster 10.0.0.1 6379 10.0.0.2 0", 0, 0},
        {"mymaster 10.0.0.1 6379 10.0.0.2 -6379", 0, 0},
        {"mymaster 10.0.0.1 6379 10.0.0.2 +6379", 0, 0},
        {"mymaster 10.0.0.1 99999999999 10.0.0.2 6380", 0, 0},
        {"mymaster 10.0.0.1 6379 10.0.0.2", 0, 0},
        {"mymaster 10.0.0.1 6379 10.0.0.2 6380 extra", 0, 0},
        {"mymaster 10.0.0.1 6379 10.0.0.2 63x0", 0, 0},
        {"othermaster 10.0.0.1 6379 10.0.0.2 6380", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char bytes[256];
        int n = snprintf(bytes, sizeof bytes, "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$%zu\r\n%s\r\n",
                         strlen(cases[i].payload), cases[i].payload);
        redisReply *r = th_resp(bytes, (size_t)n);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        char host[64] = "";
        int port = -1;
        int ok = hl_decode_switch_master(r, "mymaster", host, sizeof host, &port);
        CU_ASSERT_EQUAL(ok, cases[i].ok);
        if (ok != cases[i].ok)
            fprintf(stderr, "switch-master case %zu (%s): got %d\n", i, cases[i].payload, ok);
        if (cases[i].ok && ok) {
            CU_ASSERT_EQUAL(port, cases[i].port);
            CU_ASSERT_STRING_EQUAL(host, "10.0.0.2");
        }
        freeReplyObject(r);
    }
}

/* Batched renewal: the command renews n holds, the answer is read per hold
 * only when it is exactly n integers 0/1; anything else is "try again". */
/* The doubt rule: lease - lease/5 after the last confirmed renewal went
 * out; a renewal in flight that went out at or after that point (the
 * renewer was held up) is answered first, for at most the command timeout
 * and never past the lease. */
/* hl_fmt_i64 writes what printf's %lld writes. */
static void t_fmt_i64(void)
{
    const int64_t vals[] = {0, 1, -1, 9, 10, -10, 99, 100, 12345, -98765, 30000, 300000,
                            INT32_MAX, INT32_MIN, (int64_t)INT32_MAX + 1, 999999999999LL,
                            INT64_MAX, INT64_MIN, INT64_MIN + 1, INT64_MAX - 1};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        char a[24], b[24];
        memset(a, 'x', sizeof a);
        size_t n = hl_fmt_i64(a, vals[i]);
        int m = snprintf(b, sizeof b, "%" PRId64, vals[i]);
        CU_ASSERT_EQUAL(n, (size_t)m);
        CU_ASSERT_STRING_EQUAL(a, b);
        CU_ASSERT(n <= 20 && a[n] == 0);
    }
}

/* hl_sb writes what snprintf writes, exact fits included, and says when
 * something did not fit. */
static void t_sb(void)
{
    const uint64_t vals[] = {0, 1, 9, 10, 99, 100, 18446744073709551615ULL, 9223372036854775808ULL,
                             (uint64_t)INT64_MAX, 4294967295ULL, 4294967296ULL};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        for (size_t cap = 1; cap <= 40; cap++) {
            char a[40], b[40];
            memset(a, 'x', sizeof a);
            hl_sb sb;
            hl_sb_init(&sb, a, cap);
            hl_sb_str(&sb, "pre");
            hl_sb_mem(&sb, ":eZZ", 2);
            hl_sb_u64(&sb, vals[i]);
            hl_sb_mem(&sb, ":", 1);
            hl_sb_u64(&sb, vals[i] / 3);
            int w = snprintf(b, cap, "pre:e%" PRIu64 ":%" PRIu64, vals[i], vals[i] / 3);
            CU_ASSERT_STRING_EQUAL(a, b);
            CU_ASSERT_EQUAL(a[cap - 1 < (size_t)w ? cap - 1 : (size_t)w], 0);
            if (cap < sizeof a)
                CU_ASSERT_EQUAL(a[cap], 'x'); /* nothing written past cap */
            CU_ASSERT_EQUAL(hl_sb_end(&sb), (size_t)w >= cap ? HILOCK_EINVAL : 0);
        }
    }
    char one[1] = {'x'};
    hl_sb sb;
    hl_sb_init(&sb, one, 0); /* no room at all: nothing written, over */
    hl_sb_str(&sb, "a");
    CU_ASSERT_EQUAL(one[0], 'x');
    CU_ASSERT_EQUAL(hl_sb_end(&sb), HILOCK_EINVAL);
    hl_sb_init(&sb, one, 1); /* room for the NUL only */
    CU_ASSERT_EQUAL(hl_sb_end(&sb), 0);
    hl_sb_str(&sb, "");
    CU_ASSERT_EQUAL(hl_sb_end(&sb), 0);
    hl_sb_u64(&sb, 0);
    CU_ASSERT_EQUAL(one[0], 0);
    CU_ASSERT_EQUAL(hl_sb_end(&sb), HILOCK_EINVAL);
    /* the engine's names through it: exact fit and one byte short */
    char buf[64], want[64];
    int w = snprintf(want, sizeof want, "id:e%" PRIu64 ":%" PRIu64, UINT64_MAX, (uint64_t)0);
    CU_ASSERT_EQUAL(hl_release_request_id(buf, (size_t)w + 1, "id", UINT64_MAX, 0), 0);
    CU_ASSERT_STRING_EQUAL(buf, want);
    CU_ASSERT_EQUAL(hl_release_request_id(buf, (size_t)w, "id", UINT64_MAX, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_release_request_id(buf, 0, "id", 1, 2), HILOCK_EINVAL);
    w = snprintf(want, sizeof want, "lp:own:%" PRIu64 ":%" PRIu64, UINT64_MAX, (uint64_t)7);
    CU_ASSERT_EQUAL(hl_latch_arg(buf, (size_t)w + 1, "lp", "own", UINT64_MAX, 7), 0);
    CU_ASSERT_STRING_EQUAL(buf, want);
    CU_ASSERT_EQUAL(hl_latch_arg(buf, (size_t)w, "lp", "own", UINT64_MAX, 7), HILOCK_EINVAL);
    char owner[HL_OWNER_MAX];
    hl_hold_owner(owner, HILOCK_KIND_WRITE, "c1d", UINT64_MAX);
    CU_ASSERT_STRING_EQUAL(owner, "c1d:18446744073709551615:write");
    hl_owner(owner, "c1d", 0);
    CU_ASSERT_STRING_EQUAL(owner, "c1d:0");
}

static void t_renew_doubt_at(void)
{
    CU_ASSERT_EQUAL(hl_renew_doubt_after(3000), 2400);
    /* a renewal no replica acknowledged is retried, not a confirmation */
    CU_ASSERT_EQUAL(hl_renew_unacked(HL_RENEW_RENEWED, 1), HL_RENEW_RENEWED);
    CU_ASSERT_EQUAL(hl_renew_unacked(HL_RENEW_RENEWED, 0), HL_RENEW_TROUBLE);
    CU_ASSERT_EQUAL(hl_renew_unacked(HL_RENEW_LOST, 0), HL_RENEW_LOST);
    CU_ASSERT_EQUAL(hl_renew_unacked(HL_RENEW_TROUBLE, 0), HL_RENEW_TROUBLE);
    CU_ASSERT_EQUAL(hl_renew_doubt_at(1000, 3000, -1, 300), 3400);   /* nothing in flight */
    CU_ASSERT_EQUAL(hl_renew_doubt_at(1000, 3000, 2000, 300), 3400); /* sent in time */
    CU_ASSERT_EQUAL(hl_renew_doubt_at(1000, 3000, 3400, 300), 3700); /* sent late: its answer */
    CU_ASSERT_EQUAL(hl_renew_doubt_at(1000, 3000, 3600, 300), 3900);
    CU_ASSERT_EQUAL(hl_renew_doubt_at(1000, 3000, 3800, 300), 4000); /* capped by the lease */
    CU_ASSERT_EQUAL(hl_renew_doubt_at(1000, 3000, 4500, 300), 4500); /* lease over: now */
    CU_ASSERT_EQUAL(hl_renew_doubt_at(0, 1, -1, 0), 1);
    /* asked between timer turns: a renewal not sent yet counts as sent now */
    CU_ASSERT_EQUAL(hl_renew_in_doubt(1000, 3000, -1, 300, 3399), 0);
    CU_ASSERT_EQUAL(hl_renew_in_doubt(1000, 3000, -1, 300, 3900), 0); /* renewal goes first */
    CU_ASSERT_EQUAL(hl_renew_in_doubt(1000, 3000, -1, 300, 4000), 1); /* the lease is over */
    CU_ASSERT_EQUAL(hl_renew_in_doubt(1000, 3000, 2000, 300, 3400), 1); /* sent in time */
    CU_ASSERT_EQUAL(hl_renew_in_doubt(1000, 3000, 3600, 300, 3899), 0); /* its answer awaited */
    CU_ASSERT_EQUAL(hl_renew_in_doubt(1000, 3000, 3600, 300, 3900), 1);
}

static void t_renew_many(void)
{
    hl_names a, b;
    CU_ASSERT_EQUAL_FATAL(hl_names_init(&a, "ra"), 0);
    CU_ASSERT_EQUAL_FATAL(hl_names_init(&b, "rb"), 0);
    const hl_names *names[2] = {&a, &b};
    const char *owners[2] = {"id:1", "id:2:write"};
    hl_cmd c;
    hl_cmd_wide wide;
    hl_cmd_renew_many(&c, &wide, names, owners, 2, 3000);
    CU_ASSERT_EQUAL(c.argc, 3 + 1 + 2 * 2);
    /* every machine embeds an hl_cmd (one per waiting acquire): it is not
     * sized for a batch of HL_RENEW_MANY_MAX holds (3.6 KB before) */
    CU_ASSERT(sizeof(hl_cmd) <= 1024);
    const hl_names *many[HL_RENEW_MANY_MAX];
    const char *mowners[HL_RENEW_MANY_MAX];
    for (int i = 0; i < HL_RENEW_MANY_MAX; i++) {
        many[i] = i % 2 ? &b : &a;
        mowners[i] = owners[i % 2];
    }
    hl_cmd big;
    hl_cmd_wide bigw;
    hl_cmd_renew_many(&big, &bigw, many, mowners, HL_RENEW_MANY_MAX, 3000);
    CU_ASSERT_EQUAL(big.argc, 3 + 1 + 2 * HL_RENEW_MANY_MAX);
    CU_ASSERT(arg_is(&big, 0, "EVALSHA") && arg_is(&big, 3, "ra") && arg_is(&big, 4, "rb") &&
              arg_is(&big, 3 + HL_RENEW_MANY_MAX, "3000") &&
              arg_is(&big, 3 + 2 * HL_RENEW_MANY_MAX, "id:2:write"));
    CU_ASSERT(arg_is(&c, 0, "EVALSHA") && arg_is(&c, 2, "2") && arg_is(&c, 3, "ra") &&
              arg_is(&c, 4, "rb") && arg_is(&c, 5, "3000") && arg_is(&c, 6, "id:1") &&
              arg_is(&c, 7, "id:2:write"));
    static const struct {
        const char *resp;
        int per_hold;
        hl_renew_outcome o0, o1;
    } cases[] = {
        {"*2\r\n:1\r\n:0\r\n", 1, HL_RENEW_RENEWED, HL_RENEW_LOST},
        {"*2\r\n:0\r\n:1\r\n", 1, HL_RENEW_LOST, HL_RENEW_RENEWED},
        {"*1\r\n:1\r\n", 0, HL_RENEW_TROUBLE, HL_RENEW_TROUBLE},
        {"*3\r\n:1\r\n:1\r\n:1\r\n", 0, HL_RENEW_TROUBLE, HL_RENEW_TROUBLE},
        {"*2\r\n:1\r\n:2\r\n", 0, HL_RENEW_TROUBLE, HL_RENEW_TROUBLE},
        {"*2\r\n:1\r\n:-1\r\n", 0, HL_RENEW_TROUBLE, HL_RENEW_TROUBLE},
        {"*2\r\n:1\r\n$1\r\n0\r\n", 0, HL_RENEW_TROUBLE, HL_RENEW_TROUBLE},
        {"*2\r\n:1\r\n*0\r\n", 0, HL_RENEW_TROUBLE, HL_RENEW_TROUBLE},
        {":1\r\n", 0, HL_RENEW_TROUBLE, HL_RENEW_TROUBLE},
        {"$-1\r\n", 0, HL_RENEW_TROUBLE, HL_RENEW_TROUBLE},
        {"-NOSCRIPT No matching script\r\n", 0, HL_RENEW_EVAL, HL_RENEW_EVAL},
        {"-MOVED 3999 127.0.0.1:6381\r\n", 0, HL_RENEW_REDIRECT, HL_RENEW_REDIRECT},
        {"-CROSSSLOT Keys in request don't hash to the same slot\r\n", 0, HL_RENEW_TROUBLE,
         HL_RENEW_TROUBLE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        redisReply *r = th_resp(cases[i].resp, strlen(cases[i].resp));
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        hl_renew_outcome out[2] = {99, 99};
        CU_ASSERT_EQUAL(hl_renew_classify_many(r, 2, out), cases[i].per_hold);
        CU_ASSERT_EQUAL(out[0], cases[i].o0);
        CU_ASSERT_EQUAL(out[1], cases[i].o1);
        freeReplyObject(r);
    }
    hl_renew_outcome out[2] = {99, 99};
    CU_ASSERT_EQUAL(hl_renew_classify_many(NULL, 2, out), 0);
    CU_ASSERT(out[0] == HL_RENEW_TROUBLE && out[1] == HL_RENEW_TROUBLE);
    hl_names_free(&a);
    hl_names_free(&b);
}

static int init_names(void)
{
    memset(&N, 0, sizeof N);
    if (hl_names_init(&N, "res:1") != 0)
        return -1;
    return th_redis_start(&srv, NULL);
}
static int clean_names(void)
{
    hl_names_free(&N);
    th_redis_stop(&srv);
    return 0;
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("proto", init_names, clean_names);
    CU_add_test(s, "companion names", t_companion);
    CU_add_test(s, "a settle's undo: a late copy leaves the next hold", t_undo_late_copy);
    CU_add_test(s, "lock names", t_names);
    CU_add_test(s, "owner string", t_owner);
    CU_add_test(s, "wait channel", t_wait_channel);
    CU_add_test(s, "embedded scripts and their sha1", t_scripts_sha);
    CU_add_test(s, "acquire command", t_cmd_acquire);
    CU_add_test(s, "release command", t_cmd_release);
    CU_add_test(s, "cluster: companions in the lock's slot", t_names_one_slot);
    CU_add_test(s, "force/renew/query commands", t_cmd_force_renew_queries);
    CU_add_test(s, "EVALSHA to EVAL", t_cmd_to_eval);
    CU_add_test(s, "RESP bytes of a command", t_resp);
    CU_add_test(s, "built commands against redis", t_cmd_roundtrip);
    CU_add_test(s, "acquire latch: one per owner, replay, given up", t_acquire_latch);
    CU_add_test(s, "unlock latch: one per owner, replay", t_unlock_latch_per_owner);
    CU_add_test(s, "settle: the undo gives its grant back after a later grant",
                t_settle_undo_after_later_grant);
    CU_add_test(s, "unlock latch: a late release copy leaves a later hold, any delay",
                t_late_release_copy_rule);
    CU_add_test(s, "fenced acquire latch: replay keeps the token", t_fenced_latch);
    CU_add_test(s, "decode acquire", t_decode_acquire);
    CU_add_test(s, "decode release", t_decode_release);
    CU_add_test(s, "decode int/hold count/noscript", t_decode_int_holdcount_noscript);
    CU_add_test(s, "decode pubsub incl. garbage", t_decode_pubsub);
    CU_add_test(s, "time validation", t_check_times);
    CU_pSuite m = CU_add_suite("acquire state machine", init_names, clean_names);
    CU_add_test(m, "free lock: one send", t_sm_free_lock);
    CU_add_test(m, "+switch-master: ports validated", t_decode_switch_master);
    CU_add_test(m, "renew many: command and per-hold answers", t_renew_many);
    CU_add_test(m, "renew: when a hold is reported in doubt", t_renew_doubt_at);
    CU_add_test(m, "numbers: hl_fmt_i64 writes what printf writes", t_fmt_i64);
    CU_add_test(m, "names: hl_sb writes what snprintf writes, says when cut", t_sb);
    CU_add_test(m, "reply lost: the attempt is settled", t_sm_reply_lost_settled);
    CU_add_test(m, "settle fails every try: unsettled, settled later", t_sm_settle_fails_resettle);
    CU_add_test(m, "one try on a held lock", t_sm_one_try_busy);
    CU_add_test(m, "wait times out, sleeps bounded", t_sm_wait_times_out);
    CU_add_test(m, "acquired after a wait", t_sm_acquire_after_wait);
    CU_add_test(m, "WRONGTYPE stops at once", t_sm_wrongtype_stops);
    CU_add_test(m, "cancel: leaves the line, unsubscribes, ECANCELED", t_sm_cancel);
    CU_add_test(m, "one try in a multi-lock's fair line", t_sm_one_try_line);
    CU_add_test(m, "subscribe failure: timed retries", t_sm_subscribe_fails);
    return th_cu_run();
}
