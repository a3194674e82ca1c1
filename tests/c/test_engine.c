/*
 * The engine's machines beyond acquire (proto.h): release, settling an
 * attempt whose reply never came, watchdog renewal outcomes, redirects and
 * topology, replica acknowledgement. The machines are tested pure (replies
 * parsed from RESP bytes, the clock a number); the last tests check the
 * blocking transport driving the settle machine against a real, stalled
 * redis-server.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"
#include "proto.h"

static hl_names N;
#define OWNER_LIT "0d3c7d6e-5f3a-4c1e-9b1e-1234567890ab:42"
static const char *OWNER = OWNER_LIT;


static int arg_is(const hl_cmd *c, int i, const char *s)
{
    return i < c->argc && c->argvlen[i] == strlen(s) && memcmp(c->argv[i], s, c->argvlen[i]) == 0;
}

#define FEED_REL(m, s, now) TH_FEED(hl_release_on_reply, m, s, now)

/* ---------------------------------------------------------------- release */

static void t_release_partial_keeps_lease(void)
{
    hl_release m;
    /* acquired with a 7 s lease; the watchdog lease is 30 s */
    CU_ASSERT_EQUAL_FATAL(hl_release_init(&m, HILOCK_KIND_REENTRANT, &N, OWNER, 7000, 30000,
                                          "cid:e0:1", 1000, 0, 100), 0);
    CU_ASSERT_EQUAL_FATAL(hl_release_next(&m, 100), HL_ACT_SEND);
    CU_ASSERT_EQUAL(m.cmd.script, HL_SCRIPT_UNLOCK);
    /* the owner's latch (request id "<client>:e<epoch>:<seq>"), the seq sent apart */
    CU_ASSERT(arg_is(&m.cmd, 5, "redisson_unlock_latch:{res:1}:" OWNER_LIT ":owner"));
    CU_ASSERT_EQUAL(m.cmd.argc, 12);
    CU_ASSERT(arg_is(&m.cmd, 11, "1"));
    CU_ASSERT(arg_is(&m.cmd, 7, "7000")); /* the acquire's lease, not 30000 */
    CU_ASSERT(arg_is(&m.cmd, 8, OWNER));
    CU_ASSERT(arg_is(&m.cmd, 9, "3000")); /* latch ttl: 2 x command timeout + 1 s */
    CU_ASSERT_EQUAL(m.timeout_ms, 0);
    FEED_REL(&m, ":1\r\n", 101);
    CU_ASSERT_EQUAL(hl_release_next(&m, 101), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, 0);
    CU_ASSERT_EQUAL(m.remaining, 1);
    CU_ASSERT_EQUAL(m.still_held, 1);
    hl_release_free(&m);

    /* no lease known: the watchdog lease */
    CU_ASSERT_EQUAL_FATAL(hl_release_init(&m, HILOCK_KIND_FAIR, &N, OWNER, 0, 30000, "cid:e0:2",
                                          1000, 0, 100), 0);
    CU_ASSERT_EQUAL_FATAL(hl_release_next(&m, 100), HL_ACT_SEND);
    CU_ASSERT_EQUAL(m.cmd.script, HL_SCRIPT_FAIR_UNLOCK);
    CU_ASSERT(arg_is(&m.cmd, 7, "redisson_unlock_latch:{res:1}:" OWNER_LIT ":owner")); /* fair too */
    CU_ASSERT_EQUAL(m.cmd.argc, 14);
    CU_ASSERT(arg_is(&m.cmd, 13, "2"));
    CU_ASSERT(arg_is(&m.cmd, 9, "30000"));
    FEED_REL(&m, ":0\r\n", 101);
    CU_ASSERT_EQUAL(hl_release_next(&m, 101), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, 0);
    CU_ASSERT_EQUAL(m.still_held, 0);
    hl_release_free(&m);
}

/* A fair unlock answers 0 also when the key is already gone: after a loss
 * the driver knows of, that is "not owner"; holds left stand, and the other
 * kinds keep their answer. */
static void t_release_fair_known_lost(void)
{
    hl_release m;
    CU_ASSERT_EQUAL_FATAL(hl_release_init(&m, HILOCK_KIND_FAIR, &N, OWNER, 0, 30000, "cid:e0:7",
                                          1000, 0, 100), 0);
    hl_release_known_lost(&m);
    CU_ASSERT_EQUAL_FATAL(hl_release_next(&m, 100), HL_ACT_SEND);
    FEED_REL(&m, ":0\r\n", 101);
    CU_ASSERT_EQUAL(hl_release_next(&m, 101), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(m.still_held, 0);
    hl_release_free(&m);

    CU_ASSERT_EQUAL_FATAL(hl_release_init(&m, HILOCK_KIND_FAIR, &N, OWNER, 0, 30000, "cid:e0:8",
                                          1000, 0, 100), 0);
    hl_release_known_lost(&m);
    CU_ASSERT_EQUAL_FATAL(hl_release_next(&m, 100), HL_ACT_SEND);
    FEED_REL(&m, ":1\r\n", 101); /* still ours, one hold left */
    CU_ASSERT_EQUAL(hl_release_next(&m, 101), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, 0);
    CU_ASSERT_EQUAL(m.still_held, 1);
    hl_release_free(&m);

    CU_ASSERT_EQUAL_FATAL(hl_release_init(&m, HILOCK_KIND_REENTRANT, &N, OWNER, 0, 30000,
                                          "cid:e0:9", 1000, 0, 100), 0);
    hl_release_known_lost(&m);
    CU_ASSERT_EQUAL_FATAL(hl_release_next(&m, 100), HL_ACT_SEND);
    FEED_REL(&m, ":0\r\n", 101); /* unlock.lua: released (the key was there) */
    CU_ASSERT_EQUAL(hl_release_next(&m, 101), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, 0);
    hl_release_free(&m);
}

static void t_release_not_owner_and_errors(void)
{
    hl_release m;
    hl_release_init(&m, HILOCK_KIND_REENTRANT, &N, OWNER, 5000, 30000, "cid:3", 1000, 0, 0);
    CU_ASSERT_EQUAL(hl_release_next(&m, 0), HL_ACT_SEND);
    /* a request id without an epoch: a latch key of its own, no seq */
    CU_ASSERT(arg_is(&m.cmd, 5, "redisson_unlock_latch:{res:1}:cid:3"));
    CU_ASSERT_EQUAL(m.cmd.argc, 11);
    FEED_REL(&m, ":-1\r\n", 1);
    CU_ASSERT_EQUAL(hl_release_next(&m, 1), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(m.still_held, 0);
    hl_release_free(&m);

    hl_release_init(&m, HILOCK_KIND_REENTRANT, &N, OWNER, 5000, 30000, "cid:4", 1000, 0, 0);
    CU_ASSERT_EQUAL(hl_release_next(&m, 0), HL_ACT_SEND);
    FEED_REL(&m, "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", 1);
    CU_ASSERT_EQUAL(hl_release_next(&m, 1), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(m.still_held, 1);
    /* an error answer: the engine says what it means (every driver's message) */
    CU_ASSERT_STRING_EQUAL(m.refused, "server refused the release, nothing was released: "
                                      "WRONGTYPE Operation against a key holding the wrong kind "
                                      "of value");
    hl_release_free(&m);

    hl_release_init(&m, HILOCK_KIND_REENTRANT, &N, OWNER, 5000, 30000, "cid:5", 1000, 0, 0);
    CU_ASSERT_EQUAL(hl_release_next(&m, 0), HL_ACT_SEND);
    FEED_REL(&m, "$2\r\nhi\r\n", 1); /* a shape no unlock answers */
    CU_ASSERT_EQUAL(hl_release_next(&m, 1), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_EPROTO);
    CU_ASSERT_STRING_EQUAL(m.refused, ""); /* not a refusal */
    hl_release_free(&m);

    CU_ASSERT_EQUAL(hl_release_init(&m, HILOCK_KIND_REENTRANT, &N, OWNER, 0, 0, "x", 1000, 0, 0),
                    HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_release_next(&m, 0), HL_ACT_DONE);
    hl_release_free(&m);
}

static void t_release_noscript_then_retry(void)
{
    hl_release m;
    hl_release_init(&m, HILOCK_KIND_REENTRANT, &N, OWNER, 5000, 30000, "cid:e0:6", 1000, 0, 0);
    CU_ASSERT_EQUAL(hl_release_next(&m, 0), HL_ACT_SEND);
    CU_ASSERT(arg_is(&m.cmd, 0, "EVALSHA"));
    FEED_REL(&m, "-NOSCRIPT No matching script.\r\n", 1);
    CU_ASSERT_EQUAL(hl_release_next(&m, 1), HL_ACT_SEND);
    CU_ASSERT(arg_is(&m.cmd, 0, "EVAL"));
    CU_ASSERT_STRING_EQUAL(m.refused, ""); /* NOSCRIPT refuses nothing */
    /* the reply is lost: one resend, same latch key, still the body */
    hl_release_on_error(&m, HILOCK_ECONN, 2);
    CU_ASSERT_EQUAL(hl_release_next(&m, 2), HL_ACT_SEND);
    CU_ASSERT(arg_is(&m.cmd, 0, "EVAL"));
    CU_ASSERT(arg_is(&m.cmd, 5, "redisson_unlock_latch:{res:1}:" OWNER_LIT ":owner"));
    CU_ASSERT(arg_is(&m.cmd, 11, "6")); /* the same latch and seq when sent again */
    /* ... whose answer lives at least the lease (5 s, not 3 s): a late copy of
     * the first send, arriving after the resend ran, answers from it */
    CU_ASSERT(arg_is(&m.cmd, 9, "5000"));
    hl_release_on_error(&m, HILOCK_ECONN, 3);
    CU_ASSERT_EQUAL(hl_release_next(&m, 3), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ECONN);
    CU_ASSERT_EQUAL(m.still_held, 1); /* unknown: it may still be held ... */
    CU_ASSERT_EQUAL(m.unconfirmed, 1);
    CU_ASSERT_EQUAL(m.renew, 0);      /* ... but is not renewed: it ends at its lease */
    hl_release_free(&m);

    /* a lost reply, then the resend answered: confirmed, renewed while
     * holds remain */
    hl_release_init(&m, HILOCK_KIND_REENTRANT, &N, OWNER, 5000, 30000, "cid:e0:9", 1000, 0, 0);
    CU_ASSERT_EQUAL(hl_release_next(&m, 0), HL_ACT_SEND);
    hl_release_on_error(&m, HILOCK_ECONN, 1);
    CU_ASSERT_EQUAL(hl_release_next(&m, 1), HL_ACT_SEND);
    FEED_REL(&m, ":1\r\n", 2); /* one hold left */
    CU_ASSERT_EQUAL(hl_release_next(&m, 2), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, 0);
    CU_ASSERT_EQUAL(m.unconfirmed, 0);
    CU_ASSERT_EQUAL(m.renew, 1);
    hl_release_free(&m);

    /* a bounded release resends only within its time */
    hl_release_init(&m, HILOCK_KIND_REENTRANT, &N, OWNER, 5000, 30000, "cid:7", 1000, 500, 0);
    CU_ASSERT_EQUAL(hl_release_next(&m, 0), HL_ACT_SEND);
    CU_ASSERT_EQUAL(m.timeout_ms, 500);
    hl_release_on_error(&m, HILOCK_ECONN, 600);
    CU_ASSERT_EQUAL(hl_release_next(&m, 600), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ECONN);
    hl_release_free(&m);

    /* a non-connection error is not resent */
    hl_release_init(&m, HILOCK_KIND_REENTRANT, &N, OWNER, 5000, 30000, "cid:8", 1000, 0, 0);
    CU_ASSERT_EQUAL(hl_release_next(&m, 0), HL_ACT_SEND);
    hl_release_on_error(&m, HILOCK_ECLOSED, 1);
    CU_ASSERT_EQUAL(hl_release_next(&m, 1), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ECLOSED);
    hl_release_free(&m);
}

/* NOSCRIPT to an EVALSHA: the body once for that command; any command
 * of the same call that meets NOSCRIPT gets its body too. */
static void t_eval_fallback_per_command(void)
{
    redisReply *noscript = TH_RESP("-NOSCRIPT No matching script. Please use EVAL.\r\n");
    redisReply *other = TH_RESP("-ERR something else\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(noscript);
    CU_ASSERT_PTR_NOT_NULL_FATAL(other);
    hl_cmd a;
    hl_cmd_acquire(&a, HILOCK_KIND_FAIR, &N, OWNER, 9000, 120000);
    CU_ASSERT_EQUAL(hl_cmd_eval_fallback(&a, other), 0);
    CU_ASSERT(arg_is(&a, 0, "EVALSHA"));
    CU_ASSERT_EQUAL(hl_cmd_eval_fallback(&a, noscript), 1);
    CU_ASSERT(arg_is(&a, 0, "EVAL"));
    CU_ASSERT_EQUAL(hl_cmd_eval_fallback(&a, noscript), 0); /* sent as EVAL already */
    hl_cmd_fair_cancel(&a, &N, OWNER, 120000); /* the same call's next command */
    CU_ASSERT_EQUAL(hl_cmd_eval_fallback(&a, noscript), 1);
    CU_ASSERT(arg_is(&a, 0, "EVAL"));
    CU_ASSERT_EQUAL(hl_cmd_eval_fallback(NULL, noscript), 0);
    freeReplyObject(noscript);
    freeReplyObject(other);
}

/* ---------------------------------------------------------------- settle */

#define FEED_SET(s, b, now) TH_FEED(hl_settle_on_reply, s, b, now)

static void t_settle_late_grant_released(void)
{
    hl_cmd a;
    hl_cmd_acquire(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 9000, -1);
    hl_settle s;
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "spublish", "cid:e0:9", 1000, 0), 0);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 0), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(s.sleep_ms, HL_SETTLE_MAX_MS);
    FEED_SET(&s, "*2\r\n:1\r\n:1\r\n", 10); /* the late grant */
    CU_ASSERT_EQUAL(hl_settle_next(&s, 10), HL_ACT_SEND);
    CU_ASSERT(arg_is(&s.cmd, 0, "EVAL")); /* the body: no NOSCRIPT round */
    CU_ASSERT(arg_is(&s.cmd, 3, "res:1"));
    /* the request's own latch, also for a per-owner request id: the owner's
     * later grants must not make the undo a late copy (test_proto) */
    CU_ASSERT(arg_is(&s.cmd, 5, "redisson_unlock_latch:{res:1}:cid:e0:9"));
    CU_ASSERT_EQUAL(s.cmd.argc, 11); /* no seq argument */
    CU_ASSERT(arg_is(&s.cmd, 7, "9000"));
    CU_ASSERT(arg_is(&s.cmd, 8, OWNER));
    CU_ASSERT(arg_is(&s.cmd, 10, "spublish"));
    CU_ASSERT_EQUAL(hl_settle_next(&s, 11), HL_ACT_WAIT); /* the undo's reply */
    FEED_SET(&s, ":0\r\n", 12);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 12), HL_ACT_DONE);
    CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_RELEASED);
    hl_settle_free(&s);
}

static void t_settle_fair_waiter_leaves(void)
{
    hl_cmd a;
    hl_cmd_acquire(&a, HILOCK_KIND_FAIR, &N, OWNER, 9000, 120000);
    hl_settle s;
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:10", 1000, 0), 0);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 0), HL_ACT_WAIT);
    FEED_SET(&s, "*2\r\n:0\r\n:4000\r\n", 10); /* queued behind a holder */
    CU_ASSERT_EQUAL(hl_settle_next(&s, 10), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_FAIR_CANCEL);
    CU_ASSERT(arg_is(&s.cmd, 7, OWNER));
    CU_ASSERT(arg_is(&s.cmd, 8, "120000"));
    CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_LEFT_LINE);
    hl_settle_free(&s);

    /* a fair one-try attempt never queues: nothing to undo when refused */
    hl_cmd_acquire(&a, HILOCK_KIND_FAIR, &N, OWNER, 9000, -1);
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:11", 1000, 0), 0);
    FEED_SET(&s, "*2\r\n:0\r\n:4000\r\n", 10);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 10), HL_ACT_DONE);
    CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_NOTHING);
    hl_settle_free(&s);
}

static void t_settle_errors_and_give_up(void)
{
    hl_cmd a;
    hl_cmd_acquire(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 9000, -1);
    hl_settle s;
    /* NOSCRIPT (or any error): the attempt changed nothing */
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, NULL, "cid:12", 1000, 0), 0);
    FEED_SET(&s, "-NOSCRIPT No matching script.\r\n", 1);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 1), HL_ACT_DONE);
    CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_NOTHING);
    hl_settle_free(&s);
    /* the server never answers: give up after HL_SETTLE_MAX_MS */
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, NULL, "cid:13", 1000, 0), 0);
    CU_ASSERT_EQUAL(hl_settle_next(&s, HL_SETTLE_MAX_MS - 1), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(s.sleep_ms, 1);
    CU_ASSERT_EQUAL(hl_settle_next(&s, HL_SETTLE_MAX_MS), HL_ACT_DONE);
    hl_settle_free(&s);
    /* connection broke */
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, NULL, "cid:14", 1000, 0), 0);
    hl_settle_on_error(&s, 5);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 5), HL_ACT_DONE);
    hl_settle_free(&s);
    /* only acquire attempts can be settled */
    hl_cmd r;
    hl_cmd_release(&r, HILOCK_KIND_REENTRANT, &N, OWNER, 5000, "latch", 3000);
    CU_ASSERT_EQUAL(hl_settle_init(&s, &r, NULL, "cid:15", 1000, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 0), HL_ACT_DONE);
    hl_settle_free(&s);
    CU_ASSERT_EQUAL(hl_settle_init(&s, NULL, NULL, "cid:16", 1000, 0), HILOCK_EINVAL);
}

/* A connection that accepts and never answers: a reply awaited by the
 * settle counts for one command timeout, then that connection counts as
 * dead (as if it had closed). Simulator seed 527884744: a fair waiter's
 * place in line stayed while the settle waited HL_SETTLE_MAX_MS for its
 * attempt's reply on a stalled connection. */
static void t_settle_silent_connection(void)
{
    const char *latch = "hilock_acquire_latch:{res:1}:" OWNER_LIT ":0:8";
    hl_cmd a;
    hl_cmd_acquire_latched(&a, HILOCK_KIND_FAIR, &N, OWNER, 9000, 120000, latch, 5000);
    hl_settle s;
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:e0:21", 1000, 0), 0);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 0), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(s.sleep_ms, 1000); /* one more command timeout, not 60 s */
    CU_ASSERT_EQUAL(hl_settle_next(&s, 999), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(s.sleep_ms, 1);
    CU_ASSERT_EQUAL(s.reconnect, 0);
    /* no reply: asked on a new connection at once */
    CU_ASSERT_EQUAL(hl_settle_next(&s, 1000), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.reconnect, 1);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_ACQUIRE_SETTLE);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 1000), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(s.sleep_ms, 1000);
    /* the new connection is silent too: another one, after a pause */
    CU_ASSERT_EQUAL(hl_settle_next(&s, 2000), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(s.reconnect, 1);
    CU_ASSERT_EQUAL(s.sleep_ms, 50);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 2050), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.reconnect, 1);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_ACQUIRE_SETTLE);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 2050), HL_ACT_WAIT);
    FEED_SET(&s, "$0\r\n\r\n", 2060); /* not granted: it may be in line */
    CU_ASSERT_EQUAL(hl_settle_next(&s, 2060), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_FAIR_CANCEL);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 2060), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(s.sleep_ms, 1000);
    /* the undo unanswered: sent again at once on a new connection (it is
     * idempotent) */
    CU_ASSERT_EQUAL(hl_settle_next(&s, 3060), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_FAIR_CANCEL);
    CU_ASSERT_EQUAL(s.reconnect, 1);
    hl_settle_free(&s);

    /* without an acquire latch only the attempt's own reply can tell: it
     * is awaited up to HL_SETTLE_MAX_MS on its connection */
    hl_cmd_acquire(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 9000, -1);
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, NULL, "cid:22", 1000, 0), 0);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 5000), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(s.sleep_ms, HL_SETTLE_MAX_MS - 5000);
    CU_ASSERT_EQUAL(s.reconnect, 0);
    hl_settle_free(&s);
}

/* The kept connection dies before the attempt's reply: with an acquire
 * latch the machine asks on a new connection whether it was granted. */
#define LATCH_KEY "hilock_acquire_latch:{res:1}:" OWNER_LIT ":0"
static void t_settle_connection_lost(void)
{
    const char *latch = LATCH_KEY ":7";
    hl_cmd a;
    hl_cmd_acquire_latched(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 9000, -1, latch, 5000);
    hl_settle s;
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:e0:20", 1000, 0), 0);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 0), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(s.reconnect, 0);
    hl_settle_on_error(&s, 5);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 5), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.reconnect, 1);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_ACQUIRE_SETTLE);
    CU_ASSERT(arg_is(&s.cmd, 0, "EVAL")); /* a new connection: the body */
    CU_ASSERT(arg_is(&s.cmd, 3, LATCH_KEY)); /* the latch a KEY, the seq apart */
    CU_ASSERT(arg_is(&s.cmd, 4, "60000"));
    CU_ASSERT(arg_is(&s.cmd, 5, "7"));
    CU_ASSERT_EQUAL(hl_settle_next(&s, 6), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(s.reconnect, 0); /* its answer comes on the new connection */
    FEED_SET(&s, "$1\r\n1\r\n", 7); /* it had been granted: give it back */
    CU_ASSERT_EQUAL(s.reconnect, 0);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 7), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_UNLOCK);
    CU_ASSERT(arg_is(&s.cmd, 8, OWNER));
    /* that connection dies too: the latched release is sent again */
    hl_settle_on_error(&s, 8);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 8), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.reconnect, 1);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_UNLOCK);
    FEED_SET(&s, ":1\r\n", 9);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 9), HL_ACT_DONE);
    CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_RELEASED);
    hl_settle_free(&s);

    /* not granted: nothing to undo; every new connection failing: give up
     * after HL_SETTLE_RECONNECTS */
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:e0:21", 1000, 0), 0);
    hl_settle_on_error(&s, 1);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 1), HL_ACT_SEND);
    FEED_SET(&s, "$0\r\n\r\n", 2);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 2), HL_ACT_DONE);
    CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_NOTHING);
    hl_settle_free(&s);
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:e0:22", 1000, 0), 0);
    int sends = 0;
    int64_t now = 1;
    hl_settle_on_error(&s, now);
    for (;;) {
        hl_action act = hl_settle_next(&s, now);
        if (act == HL_ACT_WAIT) { /* a pause between new connections */
            CU_ASSERT(s.reconnect);
            CU_ASSERT(s.sleep_ms > 0 && s.sleep_ms <= 1000);
            CU_ASSERT_EQUAL(s.wake_at, now + s.sleep_ms);
            now += s.sleep_ms;
            continue;
        }
        if (act != HL_ACT_SEND)
            break;
        sends++;
        hl_settle_on_error(&s, now);
    }
    CU_ASSERT_EQUAL(sends, HL_SETTLE_RECONNECTS);
    CU_ASSERT(now > 1 + 500); /* spread over time, not back to back */
    CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_NOTHING);
    hl_settle_free(&s);

    /* a fair waiter that may have joined the line leaves it */
    hl_cmd_acquire_latched(&a, HILOCK_KIND_FAIR, &N, OWNER, 9000, 120000, latch, 5000);
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:e0:23", 1000, 0), 0);
    hl_settle_on_error(&s, 1);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 1), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_ACQUIRE_SETTLE);
    FEED_SET(&s, "$0\r\n\r\n", 2);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 2), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_FAIR_CANCEL);
    CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_LEFT_LINE);
    hl_settle_free(&s);

    /* a fenced attempt keeps an acquire latch too; a grant is released */
    hl_cmd_acquire_latched(&a, HILOCK_KIND_FENCED, &N, OWNER, 9000, -1, latch, 5000);
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:e0:25", 1000, 0), 0);
    hl_settle_on_error(&s, 1);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 1), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_ACQUIRE_SETTLE);
    CU_ASSERT(arg_is(&s.cmd, 3, LATCH_KEY) && arg_is(&s.cmd, 5, "7"));
    FEED_SET(&s, "$1\r\n1\r\n", 2);
    CU_ASSERT_EQUAL(hl_settle_next(&s, 2), HL_ACT_SEND);
    CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_RELEASED);
    hl_settle_free(&s);

    /* the read-write sides keep one as well: a read grant is given back
     * with the read unlock, a write grant with the write unlock */
    hilock_kind rw[] = {HILOCK_KIND_READ, HILOCK_KIND_WRITE};
    hl_script undo[] = {HL_SCRIPT_RW_READ_UNLOCK, HL_SCRIPT_RW_WRITE_UNLOCK};
    for (int i = 0; i < 2; i++) {
        hl_cmd_acquire_latched(&a, rw[i], &N, OWNER, 9000, -1, latch, 5000);
        CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:e0:26", 1000, 0), 0);
        hl_settle_on_error(&s, 1);
        CU_ASSERT_EQUAL(hl_settle_next(&s, 1), HL_ACT_SEND);
        CU_ASSERT_EQUAL(s.cmd.script, HL_SCRIPT_ACQUIRE_SETTLE);
        CU_ASSERT(arg_is(&s.cmd, 3, LATCH_KEY) && arg_is(&s.cmd, 5, "7"));
        FEED_SET(&s, "$1\r\n1\r\n", 2);
        CU_ASSERT_EQUAL(hl_settle_next(&s, 2), HL_ACT_SEND);
        CU_ASSERT_EQUAL(s.cmd.script, undo[i]);
        CU_ASSERT_EQUAL(s.outcome, HL_SETTLE_RELEASED);
        hl_settle_free(&s);
    }

    /* past the give-up time nothing more is tried */
    hl_cmd_acquire_latched(&a, HILOCK_KIND_REENTRANT, &N, OWNER, 9000, -1, latch, 5000);
    CU_ASSERT_EQUAL_FATAL(hl_settle_init(&s, &a, "publish", "cid:e0:24", 1000, 0), 0);
    hl_settle_on_error(&s, HL_SETTLE_MAX_MS);
    CU_ASSERT_EQUAL(hl_settle_next(&s, HL_SETTLE_MAX_MS), HL_ACT_DONE);
    hl_settle_free(&s);
}

/* ------------------------------------------------- semaphore request latch */

#define FEED_SEM(m, b, now) TH_FEED(hl_semwait_on_reply, m, b, now)

/* A plain semaphore's acquire under the owner's request latch: the latch a
 * KEY of sem_acquire.lua, the seq an argument; a try whose reply was lost is
 * settled (sem_settle.lua, sent again while it fails) before the error. */
/* One settling attempt per server: the gate every driver asks before an
 * attempt (exec.c/fanout.c through the drain, hilock.aio). */
static void t_settle_gate(void)
{
    CU_ASSERT_EQUAL(hl_settle_gate(0, 0, 1000), -1); /* nothing settling: send */
    CU_ASSERT_EQUAL(hl_settle_gate(0, 1, 1000), -1);
    CU_ASSERT_EQUAL(hl_settle_gate(HL_SETTLE_PER_NODE, 0, 1000), 1000); /* wait, then again */
    CU_ASSERT_EQUAL(hl_settle_gate(HL_SETTLE_PER_NODE, 1, 1000), 0);    /* own limit: give up */
    CU_ASSERT_EQUAL(hl_settle_gate(HL_SETTLE_PER_NODE + 3, 0, 250), 250);
    CU_ASSERT_EQUAL(hl_settle_gate(HL_SETTLE_PER_NODE, 0, -1), 0);
}

static void t_semwait_latch(void)
{
    hl_sem_names sn;
    CU_ASSERT_EQUAL_FATAL(hl_sem_names_init(&sn, HL_SEM_SEMAPHORE, "res:1"), 0);
    CU_ASSERT_STRING_EQUAL(sn.latch_prefix, "hilock_sem_latch:{res:1}");
    char arg[256];
    CU_ASSERT_EQUAL(hl_sem_latch_arg(arg, sizeof arg, &sn, OWNER, 3, 5), 0);
    CU_ASSERT_STRING_EQUAL(arg, "hilock_sem_latch:{res:1}:" OWNER_LIT ":3:5");
    CU_ASSERT_EQUAL(hl_sem_latch_arg(arg, 10, &sn, OWNER, 3, 5), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_sem_latch_arg(arg, sizeof arg, &sn, OWNER, 3, 5), 0);

    hl_semwait m;
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_SEMAPHORE, &sn, 2, 0, NULL, 1000, 0), 0);
    CU_ASSERT_EQUAL(hl_semwait_set_latch(&m, "no-seq", 4000), HILOCK_EINVAL);
    CU_ASSERT_EQUAL_FATAL(hl_semwait_set_latch(&m, arg, 4000), 0);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_SEND);
    CU_ASSERT_EQUAL(m.cmd.script, HL_SCRIPT_SEM_ACQUIRE);
    CU_ASSERT(arg_is(&m.cmd, 2, "2") && arg_is(&m.cmd, 3, "res:1"));
    CU_ASSERT(arg_is(&m.cmd, 4, "hilock_sem_latch:{res:1}:" OWNER_LIT ":3"));
    CU_ASSERT(arg_is(&m.cmd, 5, "2") && arg_is(&m.cmd, 6, "4000") && arg_is(&m.cmd, 7, "5"));
    /* sent, the connection died: settle, sent again while it fails */
    m.cmd.reply_lost = 1;
    hl_semwait_on_error(&m, HILOCK_ECONN, 1);
    for (int i = 0; i < HL_SETTLE_TRIES; i++) {
        CU_ASSERT_EQUAL_FATAL(hl_semwait_next(&m, 2), HL_ACT_SEND);
        CU_ASSERT_EQUAL(m.cmd.script, HL_SCRIPT_SEM_SETTLE);
        CU_ASSERT(arg_is(&m.cmd, 2, "3") && arg_is(&m.cmd, 4, "redisson_sc:{res:1}"));
        CU_ASSERT(arg_is(&m.cmd, 5, "hilock_sem_latch:{res:1}:" OWNER_LIT ":3"));
        CU_ASSERT(arg_is(&m.cmd, 6, "5") && arg_is(&m.cmd, 7, "60000"));
        CU_ASSERT(arg_is(&m.cmd, 8, "publish"));
        if (i < 1) {
            hl_semwait_cancel(&m, 2); /* a settling acquire ignores a cancel */
            hl_semwait_on_error(&m, HILOCK_ECONN, 2);
        } else {
            FEED_SEM(&m, ":2\r\n", 3); /* it had taken 2: given back */
            break;
        }
    }
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 3), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ECONN);
    hl_semwait_free(&m);

    /* settling that keeps failing ends with the acquire's error */
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_SEMAPHORE, &sn, 1, 0, NULL, 0, 0), 0);
    CU_ASSERT_EQUAL_FATAL(hl_semwait_set_latch(&m, arg, 4000), 0);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_SEND);
    m.cmd.reply_lost = 1;
    hl_semwait_on_error(&m, HILOCK_ECONN, 1);
    for (int i = 0; i < HL_SETTLE_TRIES; i++) {
        CU_ASSERT_EQUAL_FATAL(hl_semwait_next(&m, 2), HL_ACT_SEND);
        hl_semwait_on_error(&m, HILOCK_ECONN, 2);
    }
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 3), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ECONN);
    hl_semwait_free(&m);

    /* without a latch: the old shape, a lost reply ends at once */
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_SEMAPHORE, &sn, 1, 0, NULL, 0, 0), 0);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_SEND);
    CU_ASSERT(arg_is(&m.cmd, 2, "1") && m.cmd.argc == 5);
    m.cmd.reply_lost = 1;
    hl_semwait_on_error(&m, HILOCK_ECONN, 1);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 1), HL_ACT_DONE);
    hl_semwait_free(&m);
    hl_sem_names_free(&sn);
}

/* ---------------------------------------------------------------- watchdog */

static hl_renew_outcome classify(const char *bytes, size_t len)
{
    redisReply *r = th_resp(bytes, len);
    hl_renew_outcome o = hl_renew_classify(r);
    if (r)
        freeReplyObject(r);
    return o;
}
#define CLASSIFY(s) classify(s, sizeof(s) - 1)

static void t_renew_classify(void)
{
    CU_ASSERT_EQUAL(CLASSIFY(":1\r\n"), HL_RENEW_RENEWED);
    CU_ASSERT_EQUAL(CLASSIFY(":0\r\n"), HL_RENEW_LOST);
    CU_ASSERT_EQUAL(CLASSIFY(":7\r\n"), HL_RENEW_TROUBLE);
    CU_ASSERT_EQUAL(CLASSIFY("$1\r\n0\r\n"), HL_RENEW_TROUBLE);
    CU_ASSERT_EQUAL(CLASSIFY("-NOSCRIPT No matching script.\r\n"), HL_RENEW_EVAL);
    CU_ASSERT_EQUAL(CLASSIFY("-MOVED 3999 127.0.0.1:7001\r\n"), HL_RENEW_REDIRECT);
    CU_ASSERT_EQUAL(CLASSIFY("-ASK 3999 127.0.0.1:7001\r\n"), HL_RENEW_REDIRECT);
    CU_ASSERT_EQUAL(CLASSIFY("-READONLY You can't write against a read only replica.\r\n"),
                    HL_RENEW_REDIRECT);
    CU_ASSERT_EQUAL(CLASSIFY("-ERR something\r\n"), HL_RENEW_TROUBLE);
    CU_ASSERT_EQUAL(hl_renew_classify(NULL), HL_RENEW_TROUBLE);
    CU_ASSERT_EQUAL(hl_renew_period(30000), 10000);
    CU_ASSERT_EQUAL(hl_renew_period(2), 1);
}

/* ---------------------------------------------------------------- routing */

static hl_route_action route(hl_router *rt, const char *bytes, size_t len)
{
    redisReply *r = th_resp(bytes, len);
    hl_route_action a = hl_router_on_reply(rt, r);
    if (r)
        freeReplyObject(r);
    return a;
}
#define ROUTE(rt, s) route(rt, s, sizeof(s) - 1)

static void t_route_cluster(void)
{
    hl_router rt;
    hl_router_init(&rt, HL_MODE_CLUSTER);
    CU_ASSERT_EQUAL(ROUTE(&rt, "*2\r\n:1\r\n:1\r\n"), HL_ROUTE_DONE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-NOSCRIPT x\r\n"), HL_ROUTE_DONE); /* the machine's business */
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MOVED 3999 10.0.0.2:7001\r\n"), HL_ROUTE_MOVED);
    CU_ASSERT_EQUAL(rt.slot, 3999);
    CU_ASSERT_STRING_EQUAL(rt.host, "10.0.0.2");
    CU_ASSERT_EQUAL(rt.port, 7001);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-ASK 12 ::1:7002\r\n"), HL_ROUTE_ASK);
    CU_ASSERT_STRING_EQUAL(rt.host, "::1");
    CU_ASSERT_EQUAL(rt.port, 7002);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-TRYAGAIN Multiple keys request during rehashing\r\n"),
                    HL_ROUTE_RETRY);
    CU_ASSERT(rt.sleep_ms > 0);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-LOADING Redis is loading the dataset in memory\r\n"),
                    HL_ROUTE_RETRY);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-READONLY You can't write against a read only replica.\r\n"),
                    HL_ROUTE_REFRESH);
    /* demoted twice: give up with the error */
    CU_ASSERT_EQUAL(ROUTE(&rt, "-READONLY again\r\n"), HL_ROUTE_FAIL);
    CU_ASSERT_EQUAL(rt.result, HILOCK_ECONN);
    /* malformed redirects are plain errors, never a jump to garbage */
    hl_router_init(&rt, HL_MODE_CLUSTER);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MOVED 99999 10.0.0.2:7001\r\n"), HL_ROUTE_DONE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MOVED 1 10.0.0.2:0\r\n"), HL_ROUTE_DONE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MOVED 1 10.0.0.2:70000\r\n"), HL_ROUTE_DONE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MOVED 1 nocolon\r\n"), HL_ROUTE_DONE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MOVED x 10.0.0.2:7001\r\n"), HL_ROUTE_DONE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MOVEDX 1 10.0.0.2:7001\r\n"), HL_ROUTE_DONE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MOVED 1 :7001\r\n"), HL_ROUTE_MOVED);
    CU_ASSERT_STRING_EQUAL(rt.host, "127.0.0.1");
    /* a slot bouncing between nodes ends */
    hl_router_init(&rt, HL_MODE_CLUSTER);
    hl_route_action a = HL_ROUTE_MOVED;
    int hops = 0;
    while (a == HL_ROUTE_MOVED && hops < 100) {
        a = ROUTE(&rt, "-MOVED 5 10.0.0.3:7003\r\n");
        hops++;
    }
    CU_ASSERT_EQUAL(a, HL_ROUTE_FAIL);
    CU_ASSERT_EQUAL(hops, HL_ROUTE_MAX_HOPS + 1);
}

static void t_route_single_sentinel(void)
{
    hl_router rt;
    hl_router_init(&rt, HL_MODE_SINGLE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MOVED 1 10.0.0.2:7001\r\n"), HL_ROUTE_DONE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-ERR x\r\n"), HL_ROUTE_DONE);
    /* one server that is no master: reconnect once, then give up */
    CU_ASSERT_EQUAL(ROUTE(&rt, "-READONLY x\r\n"), HL_ROUTE_REFRESH);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-READONLY x\r\n"), HL_ROUTE_FAIL);
    hl_router_init(&rt, HL_MODE_SINGLE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-LOADING Redis is loading\r\n"), HL_ROUTE_RETRY);
    CU_ASSERT_EQUAL(hl_router_on_conn_error(&rt, 0), HL_ROUTE_FAIL);
    hl_router_init(&rt, HL_MODE_SENTINEL);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MOVED 1 10.0.0.2:7001\r\n"), HL_ROUTE_DONE);
    CU_ASSERT_EQUAL(ROUTE(&rt, "-MASTERDOWN Link with MASTER is down\r\n"), HL_ROUTE_REFRESH);
    CU_ASSERT_EQUAL(rt.sleep_ms, 0);
    /* a connect failure (nothing sent): look again once; a failure after
     * sending is never resent here */
    CU_ASSERT_EQUAL(hl_router_on_conn_error(&rt, 1), HL_ROUTE_FAIL);
    hl_router_init(&rt, HL_MODE_SENTINEL);
    CU_ASSERT_EQUAL(hl_router_on_conn_error(&rt, 0), HL_ROUTE_REFRESH);
    CU_ASSERT_EQUAL(hl_router_on_conn_error(&rt, 0), HL_ROUTE_FAIL);
    CU_ASSERT_EQUAL(hl_router_on_reply(&rt, NULL), HL_ROUTE_FAIL);
}

/* ---------------------------------------------------------------- ack */

static void ack_feed(hl_ack *k, const char *bytes, size_t len)
{
    redisReply *r = th_resp(bytes, len);
    hl_ack_on_reply(k, r);
    if (r)
        freeReplyObject(r);
}
#define FEED_ACK(k, s) ack_feed(k, s, sizeof(s) - 1)
#define ROLE_1 "*3\r\n$6\r\nmaster\r\n:100\r\n*1\r\n*3\r\n$9\r\n127.0.0.1\r\n$4\r\n7001\r\n$3\r\n100\r\n"
#define ROLE_0 "*3\r\n$6\r\nmaster\r\n:100\r\n*0\r\n"

/* Multi-lock and Redlock rules. */
static void t_multilock_rules(void)
{
    /* quorum: every member, or a majority */
    CU_ASSERT_EQUAL(hl_ml_quorum(0, 3), 3);
    CU_ASSERT_EQUAL(hl_ml_quorum(1, 1), 1);
    CU_ASSERT_EQUAL(hl_ml_quorum(1, 2), 2);
    CU_ASSERT_EQUAL(hl_ml_quorum(1, 3), 2);
    CU_ASSERT_EQUAL(hl_ml_quorum(1, 4), 3);
    CU_ASSERT_EQUAL(hl_ml_quorum(1, 5), 3);
    /* drift = lease/100 + 2; validity = lease - elapsed - drift */
    CU_ASSERT_EQUAL(hl_ml_drift(30000), 302);
    CU_ASSERT_EQUAL(hl_ml_drift(50), 2);
    CU_ASSERT_EQUAL(hl_ml_validity(10000, 1000, 1250), 10000 - 250 - 102);
    CU_ASSERT_EQUAL(hl_ml_validity(100, 0, 97), 0);
    CU_ASSERT_EQUAL(hl_ml_validity(100, 0, 96), 1);
    /* success */
    CU_ASSERT(hl_ml_success(0, 3, 3, 0, -5));      /* multi-lock: all, validity unused */
    CU_ASSERT(!hl_ml_success(0, 3, 2, 0, 1000));
    CU_ASSERT(!hl_ml_success(0, 3, 3, HILOCK_EAUTH, 1000));
    CU_ASSERT(hl_ml_success(1, 5, 3, 0, 1));        /* a majority within validity */
    CU_ASSERT(!hl_ml_success(1, 5, 3, 0, 0));       /* validity used up */
    CU_ASSERT(!hl_ml_success(1, 5, 2, 0, 1000));    /* no majority */
    CU_ASSERT(!hl_ml_success(1, 5, 5, HILOCK_EAUTH, 1000));
    /* undo after a failed attempt */
    static const int codes[] = {HILOCK_ETIMEDOUT, HILOCK_ECLOSED, HILOCK_EINVAL, HILOCK_ENOMEM,
                                HILOCK_ECONN, HILOCK_EPROTO, HILOCK_EAUTH};
    for (int redlock = 0; redlock < 2; redlock++)
        for (int reentry = 0; reentry < 2; reentry++)
            CU_ASSERT(hl_ml_take_back(redlock, reentry, 0)); /* taken: always given back */
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        int rc = codes[i];
        CU_ASSERT(!hl_ml_take_back(0, 1, rc)); /* re-entry: only what this attempt took */
        CU_ASSERT(!hl_ml_take_back(1, 1, rc));
        /* Redlock: every node but a closed client's */
        CU_ASSERT_EQUAL(hl_ml_take_back(1, 0, rc), rc != HILOCK_ECLOSED);
        /* multi-lock: the members in doubt (the request may have run) */
        CU_ASSERT_EQUAL(hl_ml_take_back(0, 0, rc),
                        rc == HILOCK_ECONN || rc == HILOCK_EPROTO || rc == HILOCK_EAUTH);
    }
    /* loss: a multi-lock at the first member, a Redlock below the quorum */
    CU_ASSERT(!hl_ml_hold_lost(0, 3, 3, 0));
    CU_ASSERT(hl_ml_hold_lost(0, 3, 3, 1));
    CU_ASSERT(!hl_ml_hold_lost(1, 5, 5, 2));
    CU_ASSERT(hl_ml_hold_lost(1, 5, 5, 3));
    /* member timeouts: configured, else 50 ms for a Redlock, else the clients' */
    CU_ASSERT_EQUAL(hl_ml_member_timeout(1, 0), 50);
    CU_ASSERT_EQUAL(hl_ml_member_timeout(0, 0), 0);
    CU_ASSERT_EQUAL(hl_ml_member_timeout(1, 300), 300);
    CU_ASSERT_EQUAL(hl_ml_member_timeout(0, 300), 300);
    /* the wait after a failed attempt: messages, bounded by the holders' PTTL */
    hl_ml_member mb[3] = {{0, -1, 1, -1}, {HILOCK_ETIMEDOUT, 8000, 1, -1}, {HILOCK_ETIMEDOUT, 3000, 1, -1}};
    CU_ASSERT_EQUAL(hl_ml_wait_ms(0, mb, 3, 0, 20, -1), 3000);    /* shortest lease */
    CU_ASSERT_EQUAL(hl_ml_wait_ms(0, mb, 3, 0, 20, 1200), 1200);  /* the wait ends first */
    CU_ASSERT(!hl_ml_wakes_on(&mb[0]) && hl_ml_wakes_on(&mb[1]));
    mb[2].ttl_ms = -1; /* held without expiry: only its message */
    CU_ASSERT_EQUAL(hl_ml_wait_ms(0, mb, 3, 0, 20, -1), 8000);
    mb[1].ttl_ms = -1;
    CU_ASSERT_EQUAL(hl_ml_wait_ms(0, mb, 3, 0, 20, -1), -1);
    mb[1].wakeable = 0; /* not subscribed (unconfirmed): polled */
    CU_ASSERT_EQUAL(hl_ml_wait_ms(0, mb, 3, 0, 20, -1), 20);
    CU_ASSERT(!hl_ml_wakes_on(&mb[1]));
    mb[1] = (hl_ml_member){HILOCK_ECONN, -1, 1, -1}; /* a multi-lock needs the failed one */
    CU_ASSERT_EQUAL(hl_ml_wait_ms(0, mb, 3, 0, 20, -1), 20);
    mb[1].ttl_ms = 0;
    mb[2] = (hl_ml_member){HILOCK_ETIMEDOUT, 0, 1, -1}; /* its lease just ended */
    mb[1].rc = 0;
    CU_ASSERT_EQUAL(hl_ml_wait_ms(0, mb, 3, 0, 20, -1), 20);
    /* a fair member found held: the call is in its line and listens on its
     * own channel (the unlock wakes the head only); sleeps at most half the
     * window, as a single fair waiter, so as not to be dropped as silent */
    CU_ASSERT_EQUAL(hl_ml_line_window(HILOCK_KIND_FAIR, 4000, 300000), 4000);
    CU_ASSERT_EQUAL(hl_ml_line_window(HILOCK_KIND_FAIR, -1, 300000), 300000);
    CU_ASSERT_EQUAL(hl_ml_line_window(HILOCK_KIND_FAIR, 0, 300000), -1); /* one try */
    CU_ASSERT_EQUAL(hl_ml_line_window(HILOCK_KIND_REENTRANT, 4000, 300000), -1);
    CU_ASSERT(!hl_ml_in_line(-1, HILOCK_ETIMEDOUT));
    CU_ASSERT(!hl_ml_in_line(4000, 0));                  /* the grant left the line */
    CU_ASSERT(hl_ml_in_line(4000, HILOCK_ETIMEDOUT));
    CU_ASSERT(hl_ml_in_line(4000, HILOCK_ECONN));        /* it may have joined */
    hl_ml_member fm[2] = {{0, -1, 1, -1}, {HILOCK_ETIMEDOUT, -1, 1, 300000}};
    CU_ASSERT_EQUAL(hl_ml_wait_ms(0, fm, 2, 0, 20, -1), 150000);
    CU_ASSERT(hl_ml_wakes_on(&fm[1]));
    fm[1].ttl_ms = 9000; /* its hint comes first */
    CU_ASSERT_EQUAL(hl_ml_wait_ms(0, fm, 2, 0, 20, -1), 9000);
    /* Redlock of 5: 2 down, 3 held with messages: wait for those */
    hl_ml_member rl[5] = {{HILOCK_ECONN, -1, 1, -1}, {HILOCK_ECONN, -1, 1, -1},
                          {HILOCK_ETIMEDOUT, 5000, 1, -1}, {HILOCK_ETIMEDOUT, 5000, 1, -1},
                          {HILOCK_ETIMEDOUT, 6000, 1, -1}};
    CU_ASSERT_EQUAL(hl_ml_wait_ms(1, rl, 5, 0, 20, -1), 5000);
    rl[4].rc = HILOCK_ECONN; /* 3 down: the quorum needs a failed node */
    CU_ASSERT_EQUAL(hl_ml_wait_ms(1, rl, 5, 0, 20, -1), 20);
    /* fatal errors, the outcome of a failed acquire and of a release, the
     * back-off (shared by the blocking and the non-blocking driver) */
    CU_ASSERT(!hl_ml_fatal(0, 0) && !hl_ml_fatal(0, HILOCK_ETIMEDOUT) && !hl_ml_fatal(0, HILOCK_ECONN));
    CU_ASSERT(hl_ml_fatal(0, HILOCK_EAUTH) && hl_ml_fatal(0, HILOCK_EWRONGTYPE));
    CU_ASSERT(!hl_ml_fatal(1, HILOCK_EAUTH) && !hl_ml_fatal(1, HILOCK_EWRONGTYPE));
    CU_ASSERT(hl_ml_fatal(1, HILOCK_ECLOSED) && hl_ml_fatal(1, HILOCK_EINVAL) &&
              hl_ml_fatal(1, HILOCK_ENOMEM));
    CU_ASSERT_EQUAL(hl_ml_fail_code(0, 3, 1, 1, HILOCK_ECONN), HILOCK_ETIMEDOUT); /* one held */
    CU_ASSERT_EQUAL(hl_ml_fail_code(0, 3, 1, 0, HILOCK_ECONN), HILOCK_ECONN);     /* errors only */
    CU_ASSERT_EQUAL(hl_ml_fail_code(0, 3, 3, 0, 0), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hl_ml_fail_code(1, 3, 2, 0, HILOCK_ECONN), HILOCK_ETIMEDOUT); /* validity */
    CU_ASSERT_EQUAL(hl_ml_fail_code(1, 3, 1, 0, HILOCK_ECONN), HILOCK_ECONN);
    CU_ASSERT_EQUAL(hl_ml_release_code(0, 3, 3, 0, 0), 0);
    CU_ASSERT_EQUAL(hl_ml_release_code(0, 3, 2, 1, HILOCK_ECONN), HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(hl_ml_release_code(0, 3, 2, 0, HILOCK_ECONN), HILOCK_ECONN);
    CU_ASSERT_EQUAL(hl_ml_release_code(0, 3, 0, 0, 0), HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(hl_ml_release_code(1, 3, 2, 1, 0), 0); /* a majority */
    CU_ASSERT_EQUAL(hl_ml_release_code(1, 3, 1, 0, HILOCK_ECONN), HILOCK_ECONN);
    for (unsigned att = 0; att < 20; att++)
        for (uint64_t r = 0; r < 100; r++) {
            int64_t b = hl_ml_backoff(att, r);
            CU_ASSERT(b >= 1 && b <= 50 && b <= 6 + 5 * (int64_t)att);
        }
    rl[0].rc = rl[1].rc = rl[4].rc = 0; /* a majority without validity */
    CU_ASSERT_EQUAL(hl_ml_wait_ms(1, rl, 5, 1, 20, -1), 20);
    CU_ASSERT(!hl_ml_hold_lost(1, 5, 3, 0));
    CU_ASSERT(hl_ml_hold_lost(1, 5, 3, 1));
}

/* The connection handshake: which commands, and what each reply means. */
static void t_handshake(void)
{
    hl_cmd hs[HL_HANDSHAKE_MAX];
    CU_ASSERT_EQUAL(hl_cmd_handshake(hs, NULL, NULL, 0), 0);
    CU_ASSERT_EQUAL(hl_cmd_handshake(hs, "alice", NULL, 0), 0); /* a user alone: nothing */
    CU_ASSERT_EQUAL_FATAL(hl_cmd_handshake(hs, NULL, "s3cret", 0), 1);
    CU_ASSERT(hs[0].argc == 2 && hs[0].script == -1 && arg_is(&hs[0], 0, "AUTH") &&
              arg_is(&hs[0], 1, "s3cret"));
    CU_ASSERT_EQUAL_FATAL(hl_cmd_handshake(hs, "alice", "", 3), 2);
    CU_ASSERT(hs[0].argc == 3 && arg_is(&hs[0], 1, "alice") && arg_is(&hs[0], 2, ""));
    CU_ASSERT(hs[1].argc == 2 && arg_is(&hs[1], 0, "SELECT") && arg_is(&hs[1], 1, "3"));
    CU_ASSERT_EQUAL_FATAL(hl_cmd_handshake(hs, NULL, NULL, 15), 1);
    CU_ASSERT(arg_is(&hs[0], 0, "SELECT") && arg_is(&hs[0], 1, "15"));

    static const struct { const char *bytes; int rc; } cases[] = {
        {"+OK\r\n", 0},
        {"-WRONGPASS invalid username-password pair\r\n", HILOCK_EAUTH},
        {"-ERR DB index is out of range\r\n", HILOCK_EAUTH},
        {"+QUEUED\r\n", HILOCK_EPROTO},
        {":1\r\n", HILOCK_EPROTO},
        {"$2\r\nOK\r\n", HILOCK_EPROTO},
        {"*0\r\n", HILOCK_EPROTO},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        redisReply *r = th_resp(cases[i].bytes, strlen(cases[i].bytes));
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_EQUAL(hl_decode_handshake(r), cases[i].rc);
        freeReplyObject(r);
    }
    CU_ASSERT_EQUAL(hl_decode_handshake(NULL), HILOCK_EPROTO);
}

static void t_ack(void)
{
    hl_ack k;
    /* nothing cached: ROLE, one replica: WAIT 1 <timeout>, acknowledged */
    hl_ack_init(&k, -1, 0, 800);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_SEND);
    CU_ASSERT(arg_is(&k.cmd, 0, "ROLE"));
    FEED_ACK(&k, ROLE_1);
    CU_ASSERT_EQUAL(k.replicas, 1);
    CU_ASSERT_EQUAL(k.refreshed, 1);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_SEND);
    CU_ASSERT(arg_is(&k.cmd, 0, "WAIT") && arg_is(&k.cmd, 1, "1") && arg_is(&k.cmd, 2, "800"));
    CU_ASSERT_EQUAL(k.timeout_ms, 800);
    FEED_ACK(&k, ":1\r\n");
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 1);

    /* cached "no replicas": nothing to send, acknowledged */
    hl_ack_init(&k, 0, 500, 800);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 1);

    /* cached one replica, WAIT answers 0: ROLE again; replicas still there */
    hl_ack_init(&k, 1, 500, 800);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_SEND);
    CU_ASSERT(arg_is(&k.cmd, 0, "WAIT"));
    FEED_ACK(&k, ":0\r\n");
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_SEND);
    CU_ASSERT(arg_is(&k.cmd, 0, "ROLE"));
    FEED_ACK(&k, ROLE_1);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 0);

    /* ... or the replica went away meanwhile (killed, or the master cut off
     * from it: a replica may be the master now): a WAIT that timed out is
     * no acknowledgement, and the count is kept, so the next write asks */
    hl_ack_init(&k, 1, 500, 800);
    hl_ack_next(&k);
    FEED_ACK(&k, ":0\r\n");
    hl_ack_next(&k);
    FEED_ACK(&k, ROLE_0);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 0);
    CU_ASSERT_EQUAL(k.refreshed, 1);
    CU_ASSERT_EQUAL(k.replicas, 1);

    /* a master once seen with a replica that lists none now (the cache
     * stale, ROLE asked): not acknowledged, no WAIT sent, count kept */
    hl_ack_init(&k, 1, HL_REPLICAS_CACHE_MS + 1, 800);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_SEND);
    CU_ASSERT(arg_is(&k.cmd, 0, "ROLE"));
    FEED_ACK(&k, ROLE_0);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 0);
    CU_ASSERT_EQUAL(k.replicas, 1);
    /* ... and once a replica is listed again, its WAIT decides */
    hl_ack_init(&k, k.replicas, HL_REPLICAS_CACHE_MS + 1, 800);
    hl_ack_next(&k);
    FEED_ACK(&k, ROLE_1);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_SEND);
    CU_ASSERT(arg_is(&k.cmd, 0, "WAIT"));
    FEED_ACK(&k, ":1\r\n");
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 1);

    /* never seen with a replica (nothing cached): none listed, nothing a
     * failover could forget: acknowledged without a WAIT */
    hl_ack_init(&k, -1, -1, 800);
    hl_ack_next(&k);
    FEED_ACK(&k, ROLE_0);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 1);
    CU_ASSERT_EQUAL(k.replicas, 0);

    /* a deployment known to keep replicas (Sentinel: a master of the name
     * was seen with one): a master that lists none acknowledges nothing,
     * though this node was never seen with one (a new master after a
     * failover, or one cut off with a client whose replicas had not
     * attached when it was first asked) */
    hl_ack_init_replicated(&k, -1, -1, 800, 1);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_SEND);
    CU_ASSERT(arg_is(&k.cmd, 0, "ROLE"));
    FEED_ACK(&k, ROLE_0);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 0);
    CU_ASSERT_EQUAL(k.replicas, 0);
    CU_ASSERT_EQUAL(k.replicated, 1);
    /* ... also with a fresh cached "none": ROLE is asked again, not trusted */
    hl_ack_init_replicated(&k, 0, 500, 800, 1);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_SEND);
    CU_ASSERT(arg_is(&k.cmd, 0, "ROLE"));
    FEED_ACK(&k, ROLE_0);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 0);
    /* ... and once a replica is listed, its WAIT decides */
    hl_ack_init_replicated(&k, 0, 500, 800, 1);
    hl_ack_next(&k);
    FEED_ACK(&k, ROLE_1);
    CU_ASSERT_EQUAL(k.replicas, 1);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_SEND);
    CU_ASSERT(arg_is(&k.cmd, 0, "WAIT"));
    FEED_ACK(&k, ":1\r\n");
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 1);
    /* the memory is learnt: ROLE listing a replica says the deployment has
     * them; a master never seen with one, of a deployment not known to
     * keep any, stays acknowledged without them */
    hl_ack_init_replicated(&k, -1, -1, 800, 0);
    hl_ack_next(&k);
    FEED_ACK(&k, ROLE_1);
    CU_ASSERT_EQUAL(k.replicated, 1);
    hl_ack_init_replicated(&k, -1, -1, 800, 0);
    hl_ack_next(&k);
    FEED_ACK(&k, ROLE_0);
    CU_ASSERT_EQUAL(k.replicated, 0);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 1);

    /* an odd ROLE reply counts no replicas */
    hl_ack_init(&k, -1, -1, 800);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_SEND);
    CU_ASSERT(arg_is(&k.cmd, 0, "ROLE"));
    FEED_ACK(&k, "-ERR unknown command\r\n");
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.replicas, 0);

    /* a grant given back for want of an acknowledgement: retry while the
     * caller may still wait a pause */
    int64_t pause = 0;
    CU_ASSERT_EQUAL(hl_ack_retry(0, 1000, 1000, &pause), 0);  /* one try */
    CU_ASSERT_EQUAL(hl_ack_retry(-1, -1, 1000, &pause), 1);   /* forever */
    CU_ASSERT_EQUAL(pause, HL_ACK_RETRY_MS);
    CU_ASSERT_EQUAL(hl_ack_retry(5000, 1000 + HL_ACK_RETRY_MS, 1000, &pause), 1);
    CU_ASSERT_EQUAL(hl_ack_retry(5000, 1000 + HL_ACK_RETRY_MS - 1, 1000, &pause), 0);

    /* a connection failure loses certainty */
    hl_ack_init(&k, 1, 0, 800);
    hl_ack_next(&k);
    hl_ack_on_error(&k);
    CU_ASSERT_EQUAL(hl_ack_next(&k), HL_ACT_DONE);
    CU_ASSERT_EQUAL(k.acked, 0);
    CU_ASSERT_EQUAL(k.failed, 1);
}

/* ---------------------------------------------------------------- drivers */

static int64_t key_int(th_redis *h, const char *cmd, const char *key)
{
    redisContext *ctx = redisConnect("127.0.0.1", h->port);
    if (!ctx || ctx->err)
        return -100;
    redisReply *r = redisCommand(ctx, "%s %s", cmd, key);
    int64_t v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -100;
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return v;
}

/* Poll (bounded) until cmd key answers want; returns the last answer. */
static int64_t await_int(th_redis *h, const char *cmd, const char *key, int64_t want)
{
    int64_t v = -100;
    for (int i = 0; i < 200 && (v = key_int(h, cmd, key)) != want; i++)
        usleep(10000);
    return v;
}

/* The server stalls while an acquire attempt is in flight: the caller gets
 * ECONN; once the server resumes and runs the attempt, the late grant
 * (reentrant) or the line entry (fair) is undone by the settle machine. */
static void stalled_attempt(hilock_kind kind)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = 300;
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, h.url, &o, NULL, 0), 0);
    hilock_lock *l = NULL, *other = NULL;
    const char *name = kind == HILOCK_KIND_FAIR ? "stall:fair" : "stall:re";
    CU_ASSERT_EQUAL_FATAL((kind == HILOCK_KIND_FAIR ? hilock_fair_lock_new : hilock_lock_new)(
                              &l, c, name), 0);
    CU_ASSERT_EQUAL_FATAL((kind == HILOCK_KIND_FAIR ? hilock_fair_lock_new : hilock_lock_new)(
                              &other, c, name), 0);
    if (kind == HILOCK_KIND_FAIR) /* held elsewhere: the attempt queues */
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(other, 7, 0, 60000), 0);
    th_redis_pause(&h);
    int rc = hilock_lock_acquire_tid(l, 1, 5000, 60000);
    th_redis_resume(&h);
    CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
    if (kind == HILOCK_KIND_FAIR) {
        char q[64];
        snprintf(q, sizeof q, "redisson_lock_queue:{%s}", name);
        CU_ASSERT_EQUAL(await_int(&h, "LLEN", q, 0), 0);
        snprintf(q, sizeof q, "redisson_lock_timeout:{%s}", name);
        CU_ASSERT_EQUAL(await_int(&h, "ZCARD", q, 0), 0);
        CU_ASSERT_EQUAL(hilock_lock_release_tid(other, 7), 0);
    } else {
        CU_ASSERT_EQUAL(await_int(&h, "EXISTS", name, 0), 0);
    }
    hilock_lock_free(l);
    hilock_lock_free(other);
    hilock_client_close(c);
    th_redis_stop(&h);
}

static void t_stalled_grant_undone(void)
{
    stalled_attempt(HILOCK_KIND_REENTRANT);
}

static void t_stalled_waiter_leaves(void)
{
    stalled_attempt(HILOCK_KIND_FAIR);
}

/* A holder listens on the channel its kind's force unlock publishes on, and
 * checks its hold on any lock message there ("0" unlocked, "1" read or
 * write unlock), never on anything else. */
static void t_hold_channel(void)
{
    CU_ASSERT_STRING_EQUAL(hl_hold_channel(HILOCK_KIND_REENTRANT, &N), "redisson_lock__channel:{res:1}");
    CU_ASSERT_STRING_EQUAL(hl_hold_channel(HILOCK_KIND_FAIR, &N), "redisson_lock__channel:{res:1}");
    CU_ASSERT_STRING_EQUAL(hl_hold_channel(HILOCK_KIND_FENCED, &N), "redisson_lock__channel:{res:1}");
    CU_ASSERT_STRING_EQUAL(hl_hold_channel(HILOCK_KIND_READ, &N), "redisson_rwlock:{res:1}");
    CU_ASSERT_STRING_EQUAL(hl_hold_channel(HILOCK_KIND_WRITE, &N), "redisson_rwlock:{res:1}");
    hl_ps_event ev = {HL_PS_MESSAGE, "redisson_lock__channel:{res:1}", 30, 0, 0};
    CU_ASSERT_EQUAL(hl_hold_check_on(&ev), 1); /* "0": unlocked, force unlock */
    ev.payload = 1, ev.value = 1;
    CU_ASSERT_EQUAL(hl_hold_check_on(&ev), 1); /* "1": read or write unlock */
    ev.payload = -1, ev.value = 7;
    CU_ASSERT_EQUAL(hl_hold_check_on(&ev), 0); /* not a lock's message */
    ev.value = -1;
    CU_ASSERT_EQUAL(hl_hold_check_on(&ev), 0); /* garbage */
    ev.type = HL_PS_SUBSCRIBE, ev.payload = 0, ev.value = 0;
    CU_ASSERT_EQUAL(hl_hold_check_on(&ev), 0);
    ev.type = HL_PS_UNSUBSCRIBE;
    CU_ASSERT_EQUAL(hl_hold_check_on(&ev), 0);
}

static int hold_gone(const char *bytes, size_t len, int *gone)
{
    redisReply *r = th_resp(bytes, len);
    *gone = -1;
    int rc = hl_hold_check_gone(r, gone);
    if (r)
        freeReplyObject(r);
    return rc;
}
#define HOLD_GONE(s, g) hold_gone(s, sizeof(s) - 1, g)

/* The holder's check, made on a message of its channel without renewing:
 * is its field still in the lock hash? 0 = gone, 1 = there, anything else
 * says nothing (the hold is neither reported lost nor known kept). */
static void t_hold_check(void)
{
    hl_cmd c;
    hl_cmd_hold_check(&c, &N, "id:1:write");
    CU_ASSERT_EQUAL(c.argc, 3);
    CU_ASSERT_EQUAL(c.argvlen[1], strlen("res:1"));
    CU_ASSERT_EQUAL(memcmp(c.argv[1], "res:1", 5), 0);
    CU_ASSERT_EQUAL(memcmp(c.argv[2], "id:1:write", 10), 0);
    int gone;
    CU_ASSERT_EQUAL(HOLD_GONE(":0\r\n", &gone), 0);
    CU_ASSERT_EQUAL(gone, 1);
    CU_ASSERT_EQUAL(HOLD_GONE(":1\r\n", &gone), 0);
    CU_ASSERT_EQUAL(gone, 0);
    CU_ASSERT_NOT_EQUAL(HOLD_GONE(":2\r\n", &gone), 0);
    CU_ASSERT_EQUAL(gone, -1);
    CU_ASSERT_NOT_EQUAL(HOLD_GONE("-ERR busy\r\n", &gone), 0);
    CU_ASSERT_EQUAL(gone, -1);
    CU_ASSERT_NOT_EQUAL(HOLD_GONE("$-1\r\n", &gone), 0);
    CU_ASSERT_EQUAL(gone, -1);
    CU_ASSERT_NOT_EQUAL(hl_hold_check_gone(NULL, &gone), 0);
}

static int init_names(void)
{
    return hl_names_init(&N, "res:1");
}
static int clean_names(void)
{
    hl_names_free(&N);
    return 0;
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("engine", init_names, clean_names);
    CU_add_test(s, "release: partial unlock keeps the acquire's lease", t_release_partial_keeps_lease);
    CU_add_test(s, "release: not owner, errors", t_release_not_owner_and_errors);
    CU_add_test(s, "release: a fair lock known lost", t_release_fair_known_lost);
    CU_add_test(s, "release: NOSCRIPT, resend after a lost reply", t_release_noscript_then_retry);
    CU_add_test(s, "NOSCRIPT: the body once per command", t_eval_fallback_per_command);
    CU_add_test(s, "settle: late grant released", t_settle_late_grant_released);
    CU_add_test(s, "settle: fair waiter leaves the line", t_settle_fair_waiter_leaves);
    CU_add_test(s, "settle: errors and giving up", t_settle_errors_and_give_up);
    CU_add_test(s, "settle: kept connection lost", t_settle_connection_lost);
    CU_add_test(s, "settle: a silent connection counts as dead", t_settle_silent_connection);
    CU_add_test(s, "settle: one settling attempt per server (gate)", t_settle_gate);
    CU_add_test(s, "semaphore: request latch, settling a lost acquire", t_semwait_latch);
    CU_add_test(s, "watchdog: renewal outcomes", t_renew_classify);
    CU_add_test(s, "watchdog: a holder's channel and the messages it checks on", t_hold_channel);
    CU_add_test(s, "watchdog: a holder's check of its hold (no renewal)", t_hold_check);
    CU_add_test(s, "route: cluster redirects", t_route_cluster);
    CU_add_test(s, "route: single server and sentinel", t_route_single_sentinel);
    CU_add_test(s, "replica acknowledgement", t_ack);
    CU_add_test(s, "connection handshake", t_handshake);
    CU_add_test(s, "multi-lock and Redlock rules", t_multilock_rules);
    CU_add_test(s, "C driver: a stalled attempt's late grant is undone", t_stalled_grant_undone);
    CU_add_test(s, "C driver: a stalled fair waiter leaves the line", t_stalled_waiter_leaves);
    return th_cu_run();
}
