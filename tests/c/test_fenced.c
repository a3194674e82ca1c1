/*
 * Fenced lock against a real redis-server: every grant takes the next value
 * of redisson_lock_token:{N} (re-entry included, as Redisson), tokens of
 * two clients interleave strictly increasing, the token is readable while
 * held, the lock itself is an ordinary reentrant lock, a bad counter
 * leaves the lock untaken, and timed-out attempts of the fenced lock and of
 * both read-write sides are settled (engine level).
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"
#include "proto.h"


static void t_tokens(void)
{
    hilock_client *c1 = th_client_open(th_srv.url), *c2 = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    hilock_lock *f1 = NULL, *f2 = NULL, *plain = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_fenced_lock_new(&f1, c1, "fence:a"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_fenced_lock_new(&f2, c2, "fence:a"), 0);
    CU_ASSERT_EQUAL(hilock_lock_kind(f1), HILOCK_KIND_FENCED);
    int64_t t = -1, cur = -1, last = 0;
    CU_ASSERT_EQUAL(hilock_lock_token(&cur, f1), 0);
    CU_ASSERT_EQUAL(cur, 0); /* none issued yet */
    for (int i = 0; i < 10; i++) {
        hilock_lock *f = i % 2 ? f2 : f1;
        CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t, f, 2000, 60000), 0);
        CU_ASSERT(t > last);
        last = t;
        CU_ASSERT_EQUAL(hilock_lock_token(&cur, i % 2 ? f1 : f2), 0);
        CU_ASSERT_EQUAL(cur, t); /* readable while held, from either side */
        /* the other client is excluded: an ordinary reentrant lock */
        int64_t none = -1;
        CU_ASSERT_EQUAL(hilock_lock_acquire_token(&none, i % 2 ? f1 : f2, 0, 60000),
                        HILOCK_ETIMEDOUT);
        CU_ASSERT_EQUAL(none, 0);
        CU_ASSERT_EQUAL(hilock_lock_release(f), 0);
    }
    /* the counter holds the last token (what Redisson's getToken reads) */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "GET redisson_lock_token:{fence:a}"), last);
    /* re-entry takes a new token too (as Redisson's RFencedLock) */
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t, f1, 0, 60000), 0);
    CU_ASSERT(t > last);
    last = t;
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t, f1, 0, 0), 0);
    CU_ASSERT(t > last);
    last = t;
    int64_t holds = 0;
    CU_ASSERT_EQUAL(hilock_lock_hold_count(&holds, f1), 0);
    CU_ASSERT_EQUAL(holds, 2);
    CU_ASSERT_EQUAL(hilock_lock_release(f1), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(f1), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS fence:a"), 0);
    /* plain acquire on a fenced lock still counts; other kinds: token 0 */
    CU_ASSERT_EQUAL(hilock_lock_acquire(f2, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_lock_token(&cur, f2), 0);
    CU_ASSERT(cur > last);
    CU_ASSERT_EQUAL(hilock_lock_release(f2), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&plain, c1, "fence:plain"), 0);
    t = -1;
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t, plain, 0, 60000), 0);
    CU_ASSERT_EQUAL(t, 0);
    CU_ASSERT_EQUAL(hilock_lock_release(plain), 0);
    CU_ASSERT_EQUAL(hilock_lock_token(NULL, f1), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t, NULL, 0, 0), HILOCK_EINVAL);
    hilock_lock_free(plain);
    hilock_lock_free(f1);
    hilock_lock_free(f2);
    hilock_client_close(c1);
    hilock_client_close(c2);
}

/* A counter that is not a number (or not a string): clear error, no lock. */
static void t_bad_counter(void)
{
    hilock_client *c = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *f = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_fenced_lock_new(&f, c, "fence:bad"), 0);
    th_redis_int(&th_srv, "SET redisson_lock_token:{fence:bad} abc");
    int64_t t = -1;
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t, f, 0, 60000), HILOCK_EPROTO);
    CU_ASSERT_EQUAL(t, 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS fence:bad"), 0);
    CU_ASSERT_EQUAL(hilock_lock_token(&t, f), HILOCK_EPROTO);
    th_redis_int(&th_srv, "DEL redisson_lock_token:{fence:bad}");
    th_redis_int(&th_srv, "HSET redisson_lock_token:{fence:bad} x 1");
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t, f, 0, 60000), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS fence:bad"), 0);
    CU_ASSERT_EQUAL(hilock_lock_token(&t, f), HILOCK_EWRONGTYPE);
    th_redis_int(&th_srv, "SET redisson_lock_token:{fence:bad} -5");
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t, f, 0, 60000), HILOCK_EPROTO); /* token -4 */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS fence:bad"), 0); /* no hold left behind */
    CU_ASSERT_EQUAL(hilock_lock_token(&t, f), HILOCK_EPROTO);
    hilock_lock_free(f);
    hilock_client_close(c);
}

/* The server's clock in milliseconds (TIME). */
static int64_t server_ms(void)
{
    char buf[64] = "";
    redisContext *ctx = redisConnect("127.0.0.1", th_srv.port);
    int64_t v = -1;
    if (ctx && !ctx->err) {
        redisReply *r = redisCommand(ctx, "TIME");
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
            snprintf(buf, sizeof buf, "%s", r->element[0]->str);
            v = strtoll(buf, NULL, 10) * 1000 + strtoll(r->element[1]->str, NULL, 10) / 1000;
        }
        if (r)
            freeReplyObject(r);
    }
    if (ctx)
        redisFree(ctx);
    return v;
}

/* Until the server's clock is past the millisecond t (a few round trips). */
static void next_ms(int64_t t)
{
    for (int i = 0; i < 1000 && server_ms() <= t; i++)
        ;
}

/* Tokens never repeat or go down when the counter is lost or set back:
 * the server restarted without its data, FLUSHALL, a failover to a replica
 * that missed the last INCRs (the counter lower than the last token), and
 * a Redisson peer that INCRs a missing counter first (it takes 1). Every
 * token hilock hands out is at least the server's clock in milliseconds. */
static void t_counter_lost(void)
{
    hilock_client *c = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *f = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_fenced_lock_new(&f, c, "fence:lost"), 0);
    int64_t before = server_ms(), t1 = 0, t2 = 0, t3 = 0, t4 = 0, t5 = 0;
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t1, f, 0, 60000), 0);
    CU_ASSERT(t1 >= before);
    CU_ASSERT(t1 <= server_ms());
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "GET redisson_lock_token:{fence:lost}"), t1);
    CU_ASSERT_EQUAL(hilock_lock_release(f), 0);

    /* kill -9, started again empty on the same port */
    CU_ASSERT_EQUAL_FATAL(th_redis_restart(&th_srv), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS redisson_lock_token:{fence:lost}"), 0);
    int rc = hilock_lock_acquire_token(&t2, f, 0, 60000);
    if (rc != 0) /* the pool's connection died with the server: once more */
        rc = hilock_lock_acquire_token(&t2, f, 0, 60000);
    CU_ASSERT_EQUAL(rc, 0);
    printf("\n  token %lld before the restart, %lld after\n", (long long)t1, (long long)t2);
    CU_ASSERT(t2 > t1);
    CU_ASSERT_EQUAL(hilock_lock_release(f), 0);

    /* FLUSHALL, in a later millisecond than the last grant (the guarantee's
     * condition: a counter lost within the millisecond of its last grant
     * would start again at that token) */
    next_ms(t2);
    th_redis_int(&th_srv, "FLUSHALL");
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t3, f, 0, 60000), 0);
    CU_ASSERT(t3 > t2);
    CU_ASSERT_EQUAL(hilock_lock_release(f), 0);

    /* the counter set back, as on a replica that missed the last writes */
    next_ms(t3);
    th_redis_int(&th_srv, "SET redisson_lock_token:{fence:lost} 5");
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t4, f, 0, 60000), 0);
    CU_ASSERT(t4 > t3);
    CU_ASSERT_EQUAL(hilock_lock_release(f), 0);

    /* a Redisson grant on a missing counter INCRs it to 1; hilock's next
     * grant is back above every token before */
    next_ms(t4);
    th_redis_int(&th_srv, "DEL redisson_lock_token:{fence:lost}");
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "INCR redisson_lock_token:{fence:lost}"), 1);
    CU_ASSERT_EQUAL(hilock_lock_acquire_token(&t5, f, 0, 60000), 0);
    CU_ASSERT(t5 > t4);
    /* and Redisson's next INCR continues above it */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "INCR redisson_lock_token:{fence:lost}"), t5 + 1);
    CU_ASSERT_EQUAL(hilock_lock_release(f), 0);
    hilock_lock_free(f);
    hilock_client_close(c);
}

static redisReply *parse(const char *bytes)
{
    redisReader *rd = redisReaderCreate();
    void *r = NULL;
    redisReaderFeed(rd, bytes, strlen(bytes));
    if (redisReaderGetReply(rd, &r) != REDIS_OK)
        r = NULL;
    redisReaderFree(rd);
    return r;
}

/* The engine's decoder: a token only on a fenced grant, and >= 1. */
static void t_decode(void)
{
    static const struct {
        hilock_kind kind;
        const char *bytes;
        int rc;
        int64_t token;
    } cases[] = {
        {HILOCK_KIND_FENCED, "*3\r\n:1\r\n:2\r\n:7\r\n", 0, 7},
        {HILOCK_KIND_FENCED, "*2\r\n:0\r\n:500\r\n", 0, 0},
        {HILOCK_KIND_FENCED, "*2\r\n:1\r\n:1\r\n", HILOCK_EPROTO, 0},   /* grant, no token */
        {HILOCK_KIND_FENCED, "*3\r\n:1\r\n:1\r\n:0\r\n", HILOCK_EPROTO, 0},
        {HILOCK_KIND_FENCED, "*3\r\n:1\r\n:1\r\n:-9\r\n", HILOCK_EPROTO, 0},
        {HILOCK_KIND_FENCED, "*3\r\n:0\r\n:5\r\n:1\r\n", HILOCK_EPROTO, 0},
        {HILOCK_KIND_FENCED, "*3\r\n:1\r\n:1\r\n$1\r\n5\r\n", HILOCK_EPROTO, 0},
        {HILOCK_KIND_REENTRANT, "*3\r\n:1\r\n:1\r\n:5\r\n", HILOCK_EPROTO, 0},
        {HILOCK_KIND_READ, "*3\r\n:1\r\n:1\r\n:5\r\n", HILOCK_EPROTO, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        redisReply *r = parse(cases[i].bytes);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        hl_acquire_result res = {0, 0, 0, 0};
        int rc = hl_decode_acquire_kind(cases[i].kind, r, &res);
        if (rc != cases[i].rc)
            fprintf(stderr, "\n  case %zu: rc %d\n", i, rc);
        CU_ASSERT_EQUAL(rc, cases[i].rc);
        if (rc == 0)
            CU_ASSERT_EQUAL(res.token, cases[i].token);
        freeReplyObject(r);
    }
}

/* An attempt of the new kinds whose reply timed out is settled like a
 * reentrant one: a late grant is released with that kind's script, as the
 * same hold owner; a refusal leaves nothing to undo. */
static void t_settle_new_kinds(void)
{
    static const struct {
        hilock_kind kind;
        int release_script;
        const char *grant;
    } cases[] = {
        {HILOCK_KIND_FENCED, HL_SCRIPT_UNLOCK, "*3\r\n:1\r\n:1\r\n:4\r\n"},
        {HILOCK_KIND_READ, HL_SCRIPT_RW_READ_UNLOCK, "*2\r\n:1\r\n:1\r\n"},
        {HILOCK_KIND_WRITE, HL_SCRIPT_RW_WRITE_UNLOCK, "*2\r\n:1\r\n:1\r\n"},
    };
    hl_names n;
    CU_ASSERT_EQUAL_FATAL(hl_names_init(&n, "settle:x"), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char owner[HL_OWNER_MAX];
        hl_hold_owner(owner, cases[i].kind, "00000000-0000-0000-0000-000000000000", 77);
        hl_cmd a;
        hl_cmd_acquire(&a, cases[i].kind, &n, owner, 12000, -1);
        CU_ASSERT(hl_cmd_is_attempt(&a));
        hl_settle s;
        CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:1", 1000, 0), 0);
        CU_ASSERT_EQUAL(s.kind, cases[i].kind);
        CU_ASSERT_EQUAL(s.lease_ms, 12000);
        CU_ASSERT_STRING_EQUAL(s.owner, owner);
        CU_ASSERT_EQUAL(hl_settle_next(&s, 0), HL_ACT_WAIT);
        redisReply *r = parse(cases[i].grant);
        hl_settle_on_reply(&s, r, 1);
        freeReplyObject(r);
        CU_ASSERT_EQUAL(hl_settle_next(&s, 2), HL_ACT_SEND);
        CU_ASSERT_EQUAL(s.cmd.script, cases[i].release_script);
        CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_RELEASED);
        int has_owner = 0;
        for (int k = 0; k < s.cmd.argc; k++)
            has_owner |= s.cmd.argvlen[k] == strlen(owner) && !memcmp(s.cmd.argv[k], owner, strlen(owner));
        CU_ASSERT(has_owner);
        hl_settle_free(&s);
        /* refused: nothing to undo */
        CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:2", 1000, 0), 0);
        r = parse("*2\r\n:0\r\n:500\r\n");
        hl_settle_on_reply(&s, r, 1);
        freeReplyObject(r);
        CU_ASSERT_EQUAL(hl_settle_next(&s, 2), HL_ACT_DONE);
        CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_NOTHING);
        hl_settle_free(&s);
    }
    hl_cmd rel;
    hl_cmd_release(&rel, HILOCK_KIND_READ, &n, "o:1", 1000, "latch", 1000);
    CU_ASSERT_FALSE(hl_cmd_is_attempt(&rel));
    hl_settle s2;
    CU_ASSERT_EQUAL(hl_settle_init(&s2, &rel, "publish", "cid:3", 1000, 0), HILOCK_EINVAL);
    hl_names_free(&n);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("fenced lock", th_srv_init, th_srv_clean);
    CU_add_test(s, "tokens strictly increasing across clients", t_tokens);
    CU_add_test(s, "decoder: token only on a fenced grant", t_decode);
    CU_add_test(s, "settling timed-out fenced/read/write attempts", t_settle_new_kinds);
    CU_add_test(s, "bad counter: clear error, lock not taken", t_bad_counter);
    CU_add_test(s, "counter lost or set back: tokens still increase", t_counter_lost);
    return th_cu_run();
}
