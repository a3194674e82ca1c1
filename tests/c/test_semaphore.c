/*
 * Semaphore, permit-expirable semaphore and count-down latch against a real
 * redis-server: Redisson's layouts (count string, "{N}:timeout" ZSET of raw
 * 16-byte ids, channels), waiters woken by the channel's messages (the
 * waits are long, so only a message wakes them in time), a release of k
 * wakes k waiters, holders never exceed the permits across processes, a
 * permit whose lease ended goes back, cancellation, bad input and wrong key
 * types (clear error, key untouched). Engine parts without a server too:
 * what a message wakes, the wait machine's steps.
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"
#include "proto.h"


static hilock_client *open_client(void)
{
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, th_srv.url, NULL, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  open %s: %d %s (%s)\n", th_srv.url, rc, hilock_strerror(rc), err);
    return c;
}

static long long get_int(const char *key)
{
    char buf[64];
    if (th_redis_str(&th_srv, buf, sizeof buf, "GET %s", key) != 0)
        return -1000;
    return atoll(buf);
}

/* ---- engine, no server ---- */

static redisReply *resp(const char *bytes, size_t len)
{
    redisReader *rd = redisReaderCreate();
    void *out = NULL;
    if (redisReaderFeed(rd, bytes, len) != REDIS_OK || redisReaderGetReply(rd, &out) != REDIS_OK)
        out = NULL;
    redisReaderFree(rd);
    return out;
}
#define RESP(s) resp(s, sizeof(s) - 1)

static int64_t wakes_of(hl_wake_rule rule, const char *frame, size_t len)
{
    redisReply *r = resp(frame, len);
    hl_ps_event ev;
    hl_decode_pubsub(r, &ev);
    int64_t n = hl_ps_wakes(rule, &ev);
    freeReplyObject(r);
    return n;
}
#define MSG(payload) "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n" payload
#define WAKES(rule, f) wakes_of(rule, f, sizeof(f) - 1)

static void t_engine_wakes(void)
{
    /* locks: unchanged */
    CU_ASSERT_EQUAL(WAKES(HL_WAKE_LOCK, MSG("$1\r\n0\r\n")), 1);
    CU_ASSERT_EQUAL(WAKES(HL_WAKE_LOCK, MSG("$1\r\n1\r\n")), -1);
    CU_ASSERT_EQUAL(WAKES(HL_WAKE_LOCK, MSG("$1\r\n7\r\n")), 0);
    /* semaphores: the count published */
    CU_ASSERT_EQUAL(WAKES(HL_WAKE_PERMITS, MSG("$1\r\n3\r\n")), 3);
    CU_ASSERT_EQUAL(WAKES(HL_WAKE_PERMITS, MSG("$5\r\n12345\r\n")), 12345);
    CU_ASSERT_EQUAL(WAKES(HL_WAKE_PERMITS, MSG("$1\r\n0\r\n")), 0);
    /* latch: any count wakes all */
    CU_ASSERT_EQUAL(WAKES(HL_WAKE_LATCH, MSG("$1\r\n0\r\n")), -1);
    CU_ASSERT_EQUAL(WAKES(HL_WAKE_LATCH, MSG("$1\r\n1\r\n")), -1);
    /* anything that is no plain count wakes nobody, never crashes */
    const hl_wake_rule rules[] = {HL_WAKE_LOCK, HL_WAKE_PERMITS, HL_WAKE_LATCH};
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(WAKES(rules[i], MSG("$2\r\n-1\r\n")), 0);
        CU_ASSERT_EQUAL(WAKES(rules[i], MSG("$2\r\n01\r\n")), 0);
        CU_ASSERT_EQUAL(WAKES(rules[i], MSG("$3\r\nabc\r\n")), 0);
        CU_ASSERT_EQUAL(WAKES(rules[i], MSG("$0\r\n\r\n")), 0);
        CU_ASSERT_EQUAL(WAKES(rules[i], MSG("$20\r\n99999999999999999999\r\n")), 0);
        CU_ASSERT_EQUAL(WAKES(rules[i], MSG(":5\r\n")), 0);
        CU_ASSERT_EQUAL(WAKES(rules[i], "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"), 0);
    }
}

static void t_engine_machine(void)
{
    hl_sem_names n;
    CU_ASSERT_EQUAL_FATAL(hl_sem_names_init(&n, HL_SEM_SEMAPHORE, "s"), 0);
    CU_ASSERT_STRING_EQUAL(n.channel, "redisson_sc:{s}");
    hl_semwait m;
    CU_ASSERT_EQUAL(hl_semwait_init(&m, HL_SEM_SEMAPHORE, &n, 0, 0, NULL, -1, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_semwait_init(&m, HL_SEM_SEMAPHORE, &n, 2, 0, NULL, -5, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_SEMAPHORE, &n, 2, 0, NULL, 1000, 0), 0);
    /* try, fail -> subscribe -> try again -> wait until the deadline */
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_SEND);
    redisReply *zero = RESP(":0\r\n"), *one = RESP(":1\r\n"), *bad = RESP(":7\r\n");
    hl_semwait_on_reply(&m, zero, 1);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 1), HL_ACT_SUBSCRIBE);
    hl_semwait_on_subscribed(&m, 1, 2);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 2), HL_ACT_SEND);
    hl_semwait_on_reply(&m, zero, 3);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 3), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(m.sleep_ms, 997);
    hl_semwait_on_wake(&m, 500);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 500), HL_ACT_SEND);
    hl_semwait_on_reply(&m, one, 501);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 501), HL_ACT_UNSUBSCRIBE);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 501), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, 0);
    /* a reply out of shape ends it (unsubscribing first) */
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_SEMAPHORE, &n, 1, 0, NULL, -1, 0), 0);
    hl_semwait_next(&m, 0);
    hl_semwait_on_reply(&m, zero, 0);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_SUBSCRIBE);
    hl_semwait_on_subscribed(&m, 1, 0);
    hl_semwait_next(&m, 0);
    hl_semwait_on_reply(&m, bad, 0);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_UNSUBSCRIBE);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_EPROTO);
    /* one try (wait 0) never subscribes */
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_SEMAPHORE, &n, 1, 0, NULL, 0, 0), 0);
    hl_semwait_next(&m, 0);
    hl_semwait_on_reply(&m, zero, 0);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ETIMEDOUT);
    /* no subscription: polls */
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_SEMAPHORE, &n, 1, 0, NULL, -1, 0), 0);
    hl_semwait_next(&m, 0);
    hl_semwait_on_reply(&m, zero, 0);
    hl_semwait_next(&m, 0);
    hl_semwait_on_subscribed(&m, 0, 0);
    hl_semwait_next(&m, 0);
    hl_semwait_on_reply(&m, zero, 0);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(m.sleep_ms, HL_SEMWAIT_POLL_MS);
    hl_semwait_cancel(&m, 1);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 1), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ECANCELED);
    freeReplyObject(zero);
    freeReplyObject(one);
    freeReplyObject(bad);
    hl_sem_names_free(&n);

    /* permit-expirable: the nearest lease end cuts the wait */
    CU_ASSERT_EQUAL_FATAL(hl_sem_names_init(&n, HL_SEM_PERMIT, "p"), 0);
    CU_ASSERT_STRING_EQUAL(n.timeout, "{p}:timeout");
    unsigned char ids[16] = {0};
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_PERMIT, &n, 1, 5000, ids, 10000, 0), 0);
    hl_semwait_next(&m, 0);
    /* ... ids (16 bytes each), the given-back set and its lifetime */
    CU_ASSERT_EQUAL(m.cmd.argvlen[m.cmd.argc - 3], 16);
    CU_ASSERT(!strcmp(m.cmd.argv[m.cmd.argc - 2], "hilock_pes_gone:{p}"));
    redisReply *later = RESP("*2\r\n:0\r\n:250\r\n"), *got = RESP("*1\r\n:1\r\n");
    hl_semwait_on_reply(&m, later, 0);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_SUBSCRIBE);
    hl_semwait_on_subscribed(&m, 1, 0);
    hl_semwait_next(&m, 0);
    hl_semwait_on_reply(&m, later, 0);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_WAIT);
    CU_ASSERT_EQUAL(m.sleep_ms, 251);
    hl_semwait_on_wake(&m, 251);
    hl_semwait_next(&m, 251);
    hl_semwait_on_reply(&m, got, 252);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 252), HL_ACT_UNSUBSCRIBE);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 252), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, 0);
    /* an acquire of 2 whose reply was lost with its connection gives both
     * ids back (one release each), then ends with the error; a cancel
     * meanwhile does not stop that; a failing release ends it */
    unsigned char two[32];
    for (int i = 0; i < 32; i++)
        two[i] = (unsigned char)i;
    redisReply *rel1 = RESP(":1\r\n"), *rel0 = RESP(":0\r\n");
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_PERMIT, &n, 2, 5000, two, 10000, 0), 0);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 0), HL_ACT_SEND);
    m.cmd.reply_lost = 1; /* as the transport sets it */
    hl_semwait_on_error(&m, HILOCK_ECONN, 1);
    hl_semwait_cancel(&m, 1);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 1), HL_ACT_SEND);
    CU_ASSERT_EQUAL(m.cmd.script, HL_SCRIPT_PES_RELEASE);
    CU_ASSERT(m.cmd.argvlen[6] == 16 && !memcmp(m.cmd.argv[6], two, 16));
    CU_ASSERT(!strcmp(m.cmd.argv[8], "hilock_pes_gone:{p}")); /* filed as given back */
    hl_semwait_on_reply(&m, rel1, 2);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 2), HL_ACT_SEND);
    CU_ASSERT(m.cmd.argvlen[6] == 16 && !memcmp(m.cmd.argv[6], two + 16, 16));
    hl_semwait_on_reply(&m, rel0, 3);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 3), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ECONN);
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_PERMIT, &n, 2, 5000, two, 10000, 0), 0);
    hl_semwait_next(&m, 0);
    m.cmd.reply_lost = 1;
    hl_semwait_on_error(&m, HILOCK_ECONN, 1);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 1), HL_ACT_SEND);
    hl_semwait_on_error(&m, HILOCK_ECONN, 2);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 2), HL_ACT_DONE);
    CU_ASSERT_EQUAL(m.result, HILOCK_ECONN);
    /* an error without a lost reply (refused before sending) ends at once */
    CU_ASSERT_EQUAL_FATAL(hl_semwait_init(&m, HL_SEM_PERMIT, &n, 1, 5000, two, 10000, 0), 0);
    hl_semwait_next(&m, 0);
    hl_semwait_on_error(&m, HILOCK_ECONN, 1);
    CU_ASSERT_EQUAL(hl_semwait_next(&m, 1), HL_ACT_DONE);
    freeReplyObject(rel1);
    freeReplyObject(rel0);
    freeReplyObject(later);
    freeReplyObject(got);
    hl_sem_names_free(&n);

    CU_ASSERT_EQUAL_FATAL(hl_sem_names_init(&n, HL_SEM_LATCH, "a{b}"), 0);
    CU_ASSERT_STRING_EQUAL(n.channel, "redisson_countdownlatch__channel__{a{b}}");
    hl_sem_names_free(&n);
    unsigned char id[16];
    CU_ASSERT_EQUAL(hl_pes_id_parse(id, "00112233445566778899aabbccddeeff"), 0);
    char hex[33];
    hl_pes_id_hex(hex, id);
    CU_ASSERT_STRING_EQUAL(hex, "00112233445566778899aabbccddeeff");
    CU_ASSERT_EQUAL(hl_pes_id_parse(id, "00112233445566778899aabbccddeeg0"), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hl_pes_id_parse(id, "0011"), HILOCK_EINVAL);
}

/* ---- semaphore ---- */

static void t_semaphore_layout(void)
{
    hilock_client *c = open_client();
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_semaphore *s = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_semaphore_new(&s, c, "sem:layout"), 0);
    CU_ASSERT_STRING_EQUAL(hilock_semaphore_name(s), "sem:layout");
    int set = -1;
    CU_ASSERT_EQUAL(hilock_semaphore_try_set_permits(&set, s, 3), 0);
    CU_ASSERT_EQUAL(set, 1);
    CU_ASSERT_EQUAL(get_int("sem:layout"), 3);
    CU_ASSERT_EQUAL(hilock_semaphore_try_set_permits(&set, s, 9), 0);
    CU_ASSERT_EQUAL(set, 0);
    CU_ASSERT_EQUAL(get_int("sem:layout"), 3);
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, 2, 0), 0);
    CU_ASSERT_EQUAL(get_int("sem:layout"), 1);
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, 2, 0), HILOCK_ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hilock_semaphore_errmsg(s), "sem:layout"));
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, 2, 150), HILOCK_ETIMEDOUT);
    CU_ASSERT(th_now_ms() - t0 >= 140);
    CU_ASSERT_EQUAL(get_int("sem:layout"), 1);
    int64_t v = -1;
    CU_ASSERT_EQUAL(hilock_semaphore_available(&v, s), 0);
    CU_ASSERT_EQUAL(v, 1);
    CU_ASSERT_EQUAL(hilock_semaphore_release(s, 2), 0);
    CU_ASSERT_EQUAL(get_int("sem:layout"), 3);
    CU_ASSERT_EQUAL(hilock_semaphore_drain(&v, s), 0);
    CU_ASSERT_EQUAL(v, 3);
    CU_ASSERT_EQUAL(get_int("sem:layout"), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_add_permits(s, 5), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_add_permits(s, -2), 0);
    CU_ASSERT_EQUAL(get_int("sem:layout"), 3);
    CU_ASSERT_EQUAL(hilock_semaphore_set_permits(s, 7), 0);
    CU_ASSERT_EQUAL(get_int("sem:layout"), 7);
    int deleted = -1;
    CU_ASSERT_EQUAL(hilock_semaphore_delete(&deleted, s), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS sem:layout"), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_available(&v, s), 0);
    CU_ASSERT_EQUAL(v, 0);
    /* no semaphore: no permits */
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, 1, 0), HILOCK_ETIMEDOUT);
    /* release creates the count, as Redisson's */
    CU_ASSERT_EQUAL(hilock_semaphore_release(s, 1), 0);
    CU_ASSERT_EQUAL(get_int("sem:layout"), 1);
    hilock_semaphore_free(s);
    hilock_semaphore_free(NULL);
    hilock_client_close(c);
}

typedef struct waiter {
    hilock_semaphore *s;
    int64_t permits, wait_ms;
    int rc;
    int64_t done_at;
} waiter;

static void *sem_wait_main(void *arg)
{
    waiter *w = arg;
    w->rc = hilock_semaphore_acquire_tid(w->s, 77, w->permits, w->wait_ms);
    __atomic_store_n(&w->done_at, th_now_ms(), __ATOMIC_RELEASE);
    return NULL;
}

static int two_done(void *arg)
{
    waiter *w = arg;
    int n = 0;
    for (int i = 0; i < 3; i++)
        n += __atomic_load_n(&w[i].done_at, __ATOMIC_ACQUIRE) != 0;
    return n >= 2;
}

static void t_semaphore_wake(void)
{
    hilock_client *a = open_client(), *b = open_client();
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    hilock_semaphore *sa = NULL, *sb = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_semaphore_new(&sa, a, "sem:wake"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_semaphore_new(&sb, b, "sem:wake"), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_set_permits(sb, 0), 0);
    /* three waiters of one permit each; a release of 2 lets exactly two go,
     * by the message (they would wait 20 s otherwise) */
    waiter w[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (waiter){sa, 1, 20000, -100, 0};
        pthread_create(&t[i], NULL, sem_wait_main, &w[i]);
    }
    th_sleep_ms(300);
    int64_t released_at = th_now_ms();
    CU_ASSERT_EQUAL(hilock_semaphore_release(sb, 2), 0);
    CU_ASSERT(th_wait_for(two_done, w, 1000));
    th_sleep_ms(200);
    int ndone = 0;
    for (int i = 0; i < 3; i++)
        if (__atomic_load_n(&w[i].done_at, __ATOMIC_ACQUIRE)) {
            ndone++;
            CU_ASSERT_EQUAL(w[i].rc, 0);
            CU_ASSERT(w[i].done_at - released_at < 1000);
        }
    CU_ASSERT_EQUAL(ndone, 2); /* the third still waits: no permit left */
    released_at = th_now_ms();
    CU_ASSERT_EQUAL(hilock_semaphore_release(sb, 1), 0);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(w[i].rc, 0);
        CU_ASSERT(w[i].done_at - released_at < 1000 + 500);
    }
    CU_ASSERT_EQUAL(get_int("sem:wake"), 0);
    /* a waiter for 2 while 1 is free: a release of 1 makes 2 */
    CU_ASSERT_EQUAL(hilock_semaphore_release(sb, 1), 0);
    waiter two = {sa, 2, 20000, -100, 0};
    pthread_t tt;
    pthread_create(&tt, NULL, sem_wait_main, &two);
    th_sleep_ms(200);
    released_at = th_now_ms();
    CU_ASSERT_EQUAL(hilock_semaphore_release(sb, 1), 0);
    pthread_join(tt, NULL);
    CU_ASSERT_EQUAL(two.rc, 0);
    CU_ASSERT(two.done_at - released_at < 1000);
    /* cancel a waiter */
    waiter cw = {sa, 1, -1, -100, 0};
    pthread_create(&tt, NULL, sem_wait_main, &cw);
    int cancelled = 0;
    for (int i = 0; i < 200 && !cancelled; i++) {
        th_sleep_ms(10);
        hilock_semaphore_cancel(&cancelled, sa, 77);
    }
    pthread_join(tt, NULL);
    CU_ASSERT_EQUAL(cancelled, 1);
    CU_ASSERT_EQUAL(cw.rc, HILOCK_ECANCELED);
    CU_ASSERT_EQUAL(get_int("sem:wake"), 0);
    hilock_semaphore_free(sa);
    hilock_semaphore_free(sb);
    hilock_client_close(a);
    hilock_client_close(b);
}

/* Processes share 3 permits; each holder INCRs an "inside" counter on the
 * server and records any value above 3. */
static void t_semaphore_processes(void)
{
    const int procs = 4, rounds = th_valgrind() ? 10 : 60;
    hilock_client *c = open_client();
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_semaphore *s = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_semaphore_new(&s, c, "sem:procs"), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_set_permits(s, 3), 0);
    th_redis_int(&th_srv, "DEL sem:inside sem:over sem:max sem:done");
    pid_t kids[4];
    for (int k = 0; k < procs; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            hilock_client *cc = open_client();
            hilock_semaphore *ss = NULL;
            if (!cc || hilock_semaphore_new(&ss, cc, "sem:procs"))
                _exit(3);
            redisContext *r = th_redis_connect(&th_srv);
            for (int i = 0; i < rounds; i++) {
                if (hilock_semaphore_acquire(ss, 1, 20000) != 0)
                    _exit(4);
                redisReply *x = redisCommand(r, "INCR sem:inside");
                long long in = x ? x->integer : -1;
                freeReplyObject(x);
                if (in > 3)
                    freeReplyObject(redisCommand(r, "INCR sem:over"));
                freeReplyObject(redisCommand(r, "EVAL %s 1 sem:max %lld",
                    "if tonumber(redis.call('get', KEYS[1]) or 0) < tonumber(ARGV[1]) then "
                    "redis.call('set', KEYS[1], ARGV[1]) end", in));
                usleep(1000);
                freeReplyObject(redisCommand(r, "DECR sem:inside"));
                if (hilock_semaphore_release(ss, 1) != 0)
                    _exit(5);
            }
            freeReplyObject(redisCommand(r, "INCR sem:done"));
            redisFree(r);
            hilock_semaphore_free(ss);
            hilock_client_close(cc);
            hilock_semaphore_free(s); /* the parent's: after fork() only memory */
            hilock_client_close(c);
            _exit(0);
        }
    }
    for (int k = 0; k < procs; k++) {
        int st = -1;
        waitpid(kids[k], &st, 0);
        CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    CU_ASSERT_EQUAL(get_int("sem:done"), procs);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS sem:over"), 0);
    CU_ASSERT_EQUAL(get_int("sem:max"), 3); /* the permits were used, never exceeded */
    CU_ASSERT_EQUAL(get_int("sem:procs"), 3);
    hilock_semaphore_free(s);
    hilock_client_close(c);
}

static void t_semaphore_bad_input(void)
{
    hilock_client *c = open_client();
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_semaphore *s = NULL;
    CU_ASSERT_EQUAL(hilock_semaphore_new(&s, c, ""), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_semaphore_new(NULL, c, "x"), HILOCK_EINVAL);
    CU_ASSERT_EQUAL_FATAL(hilock_semaphore_new(&s, c, "sem:bad"), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_try_set_permits(NULL, s, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_semaphore_try_set_permits(NULL, s, -3), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS sem:bad"), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_try_set_permits(NULL, s, 2), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, 0, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, -1, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, (int64_t)1 << 31, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, 1, -7), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_semaphore_release(s, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_semaphore_release(s, -2), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_semaphore_set_permits(s, -1), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(get_int("sem:bad"), 2);
    /* count overflow: refused, key untouched */
    th_redis_int(&th_srv, "SET sem:bad 999999999999998");
    CU_ASSERT_EQUAL(hilock_semaphore_release(s, 1), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_release(s, 1), HILOCK_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hilock_semaphore_errmsg(s), "overflow"));
    CU_ASSERT_EQUAL(hilock_semaphore_add_permits(s, 5), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(get_int("sem:bad"), 999999999999999LL);
    /* wrong key types */
    th_redis_int(&th_srv, "DEL sem:bad");
    th_redis_int(&th_srv, "HSET sem:bad someone 1");
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, 1, 0), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_semaphore_release(s, 1), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_semaphore_try_set_permits(NULL, s, 1), HILOCK_EWRONGTYPE);
    int64_t v;
    CU_ASSERT_EQUAL(hilock_semaphore_available(&v, s), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_semaphore_drain(&v, s), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_semaphore_delete(NULL, s), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HGET sem:bad someone"), 1);
    th_redis_int(&th_srv, "DEL sem:bad");
    th_redis_int(&th_srv, "SET sem:bad hello");
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, 1, 0), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_semaphore_release(s, 1), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_semaphore_add_permits(s, 1), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_semaphore_available(&v, s), HILOCK_EWRONGTYPE);
    char buf[32];
    CU_ASSERT_EQUAL(th_redis_str(&th_srv, buf, sizeof buf, "GET sem:bad"), 0);
    CU_ASSERT_STRING_EQUAL(buf, "hello");
    hilock_semaphore_free(s);
    hilock_client_close(c);
}

/* ---- permit-expirable semaphore ---- */

typedef struct pes_releaser {
    hilock_permit_semaphore *s;
    const char *id;
    int rc;
} pes_releaser;

static int pes_waiter_subscribed(void *arg)
{
    (void)arg;
    return th_redis_numsub(&th_srv, "redisson_sc:{pes}") >= 1;
}

/* Gives the permit back once a waiter listens on the semaphore's channel. */
static void *pes_release_main(void *arg)
{
    pes_releaser *r = arg;
    if (!th_wait_for(pes_waiter_subscribed, NULL, 10000))
        return NULL; /* rc stays -100: fails the test */
    r->rc = hilock_permit_semaphore_release(r->s, r->id);
    return NULL;
}

/* The server's clock in ms, as the scripts read it (lease ends are in it). */
static int64_t server_ms(void)
{
    redisContext *r = th_redis_connect(&th_srv);
    redisReply *x = r ? redisCommand(r, "TIME") : NULL;
    int64_t v = -1;
    if (x && x->type == REDIS_REPLY_ARRAY && x->elements == 2)
        v = strtoll(x->element[0]->str, NULL, 10) * 1000 + strtoll(x->element[1]->str, NULL, 10) / 1000;
    if (x)
        freeReplyObject(x);
    if (r)
        redisFree(r);
    return v;
}

/* When permit `id` of {pes} ends its lease on the server (its score), or -1. */
static int64_t pes_lease_end(const char *id)
{
    unsigned char raw[16];
    if (hl_pes_id_parse(raw, id) != 0)
        return -1;
    redisContext *r = th_redis_connect(&th_srv);
    redisReply *x = r ? redisCommand(r, "ZSCORE {pes}:timeout %b", raw, (size_t)16) : NULL;
    int64_t v = x && x->type == REDIS_REPLY_STRING ? strtoll(x->str, NULL, 10) : -1;
    if (x)
        freeReplyObject(x);
    if (r)
        redisFree(r);
    return v;
}

static int server_past(void *arg)
{
    return server_ms() > *(const int64_t *)arg;
}

/* A new permit-expirable semaphore `name` of c with `permits` permits. */
static hilock_permit_semaphore *new_pes(hilock_client *c, const char *name, int64_t permits)
{
    hilock_permit_semaphore *s = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_permit_semaphore_new(&s, c, name), 0);
    int set = 0;
    CU_ASSERT_EQUAL(hilock_permit_semaphore_try_set_permits(&set, s, permits), 0);
    CU_ASSERT_EQUAL(set, 1);
    return s;
}

static void t_permit_semaphore(void)
{
    hilock_client *c = open_client();
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_permit_semaphore *s = new_pes(c, "pes", 2);
    char id1[HILOCK_PERMIT_ID_SIZE], id2[HILOCK_PERMIT_ID_SIZE], id3[HILOCK_PERMIT_ID_SIZE];
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(id1, s, 0, 60000), 0);
    CU_ASSERT_EQUAL(strlen(id1), 32);
    /* a long lease while id2 must be held; shortened below */
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(id2, s, 0, 60000), 0);
    CU_ASSERT_STRING_NOT_EQUAL(id1, id2);
    CU_ASSERT_EQUAL(get_int("pes"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "ZCARD {pes}:timeout"), 2);
    /* members are the ids' raw 16 bytes, scores the lease ends */
    CU_ASSERT(pes_lease_end(id1) > 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(id3, s, 0, 1000), HILOCK_ETIMEDOUT);
    CU_ASSERT_STRING_EQUAL(id3, "");
    /* id2's lease ends: a waiter gets it without any message (none is
     * sent; its 5 s wait would end with ETIMEDOUT first), and not before
     * that end on the server's clock */
    CU_ASSERT_EQUAL(hilock_permit_semaphore_update_lease(s, id2, 300), 0);
    int64_t end2 = pes_lease_end(id2);
    CU_ASSERT(end2 > 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(id3, s, 5000, 0), 0);
    CU_ASSERT(server_ms() >= end2);
    CU_ASSERT_EQUAL(pes_lease_end(id2), -1);
    /* release: once; again, or the expired one: not owner */
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, id1), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, id1), HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, id2), HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, "nothex"), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, NULL), HILOCK_EINVAL);
    int64_t v = -1;
    CU_ASSERT_EQUAL(hilock_permit_semaphore_available(&v, s), 0);
    CU_ASSERT_EQUAL(v, 1);
    /* a new lease keeps a permit past its first one: renewed within its
     * first lease (1 s, long against the one round trip between), still
     * held once the server's clock is past that first end, and renewed again */
    char kept[HILOCK_PERMIT_ID_SIZE];
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(kept, s, 0, 1000), 0);
    int64_t end1 = pes_lease_end(kept);
    CU_ASSERT(end1 > 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_update_lease(s, kept, 60000), 0);
    CU_ASSERT(pes_lease_end(kept) > end1);
    CU_ASSERT(th_wait_for(server_past, &end1, 10000));
    CU_ASSERT_EQUAL(hilock_permit_semaphore_available(&v, s), 0); /* evicts what ended */
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT(pes_lease_end(kept) > end1);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_update_lease(s, kept, 60000), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, kept), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_update_lease(s, kept, 200), HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_update_lease(s, kept, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_update_lease(s, "x", 100), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, id3), 0); /* no lease: held till now */
    CU_ASSERT_EQUAL(hilock_permit_semaphore_available(&v, s), 0);
    CU_ASSERT_EQUAL(v, 2);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "ZCARD {pes}:timeout"), 0);
    /* a waiter woken by another client's release, given once the waiter
     * listens: h1 and h2's leases (60 s) outlast its wait (20 s), so only
     * the release's message can end that wait with a permit */
    char h1[HILOCK_PERMIT_ID_SIZE], h2[HILOCK_PERMIT_ID_SIZE];
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(h1, s, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(h2, s, 0, 60000), 0);
    hilock_client *c2 = open_client();
    hilock_permit_semaphore *s2 = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_permit_semaphore_new(&s2, c2, "pes"), 0);
    pes_releaser rel = {s2, h1, -100};
    pthread_t tr;
    pthread_create(&tr, NULL, pes_release_main, &rel);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(id3, s, 20000, 60000), 0);
    pthread_join(tr, NULL);
    CU_ASSERT_EQUAL(rel.rc, 0);
    /* wrong types, bad input */
    CU_ASSERT_EQUAL(hilock_permit_semaphore_try_set_permits(NULL, s, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(NULL, s, 0, 0), HILOCK_EINVAL);
    int deleted = 0;
    CU_ASSERT_EQUAL(hilock_permit_semaphore_delete(&deleted, s), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS pes {pes}:timeout"), 0);
    th_redis_int(&th_srv, "SET pes 1");
    th_redis_int(&th_srv, "HSET {pes}:timeout a 1");
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(id3, s, 0, 0), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(get_int("pes"), 1);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HGET {pes}:timeout a"), 1);
    hilock_permit_semaphore_free(s2);
    hilock_client_close(c2);
    hilock_permit_semaphore_free(s);
    hilock_client_close(c);
}

/* hilock_permit_semaphore_keep: what the lost callback saw. */
typedef struct kept_seen {
    int calls; /* atomic */
    char id[HILOCK_PERMIT_ID_SIZE];
} kept_seen;

static void on_kept_lost(hilock_permit_semaphore *s, const char *id, void *payload)
{
    (void)s;
    kept_seen *k = payload;
    snprintf(k->id, sizeof k->id, "%s", id);
    __atomic_add_fetch(&k->calls, 1, __ATOMIC_SEQ_CST);
}

static int kept_called(void *arg)
{
    return __atomic_load_n(&((kept_seen *)arg)->calls, __ATOMIC_SEQ_CST) > 0;
}

/* A kept permit is renewed by the watchdog past its lease, and one given
 * back by another client (Redisson's release(permitId)) or deleted with the
 * semaphore is reported at once through the semaphore's channel, with a
 * watchdog or a fixed lease. Before keep existed, `hilock run --semaphore`
 * renewed by itself and heard of such a release only at its next renewal
 * (lease/3 later). */
static void t_permit_keep(void)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.watchdog_lease_ms = 2000;
    hilock_client *c = NULL;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, th_srv.url, &o, err, sizeof err), 0);
    hilock_client *c2 = open_client();
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    hilock_permit_semaphore *s = new_pes(c, "pes-keep", 3), *s2 = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_permit_semaphore_new(&s2, c2, "pes-keep"), 0);
    char id[HILOCK_PERMIT_ID_SIZE], fixed[HILOCK_PERMIT_ID_SIZE], other[HILOCK_PERMIT_ID_SIZE];
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(id, s, 0, 2000), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(fixed, s, 0, 30000), 0);
    /* bad input */
    kept_seen k1 = {0, ""}, k2 = {0, ""};
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(s, "nothex", 0, on_kept_lost, &k1), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(s, NULL, 0, on_kept_lost, &k1), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(s, id, -1, on_kept_lost, &k1), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(NULL, id, 0, on_kept_lost, &k1), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(s, "0123456789abcdef0123456789abcdef", 0,
                                                 on_kept_lost, &k1),
                    HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_forget(s, id), HILOCK_ENOTOWNER);
    /* the watchdog lease (2 s), renewed: still taken after twice its lease */
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(s, id, 0, on_kept_lost, &k1), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(s, id, 0, on_kept_lost, &k1), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(s, fixed, 30000, on_kept_lost, &k2), 0);
    th_sleep_ms(4000);
    int64_t v = -1;
    CU_ASSERT_EQUAL(hilock_permit_semaphore_available(&v, s2), 0); /* evicts what ended */
    CU_ASSERT_EQUAL(v, 1);
    CU_ASSERT_EQUAL(k1.calls, 0);
    /* given back by another client: reported at once (a renewal is 667 ms
     * away at most; 3 s allowed for a loaded machine, the time printed) */
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s2, id), 0);
    CU_ASSERT_EQUAL(th_wait_for(kept_called, &k1, 3000), 1);
    fprintf(stderr, "\n  kept permit released by another: told after %lld ms\n",
            (long long)(th_now_ms() - t0));
    CU_ASSERT_STRING_EQUAL(k1.id, id);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, id), HILOCK_ENOTOWNER);
    /* a fixed lease (30 s, no renewal to find it): the semaphore deleted */
    CU_ASSERT_EQUAL(k2.calls, 0);
    t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_permit_semaphore_delete(NULL, s2), 0);
    CU_ASSERT_EQUAL(th_wait_for(kept_called, &k2, 3000), 1);
    fprintf(stderr, "  kept permit (fixed lease) of a deleted semaphore: told after %lld ms\n",
            (long long)(th_now_ms() - t0));
    CU_ASSERT_STRING_EQUAL(k2.id, fixed);
    CU_ASSERT_EQUAL(k1.calls, 1);
    /* forget: kept no more, the permit stays taken; a release by the
     * holder of a kept permit stops keeping it first */
    CU_ASSERT_EQUAL(hilock_permit_semaphore_try_set_permits(NULL, s, 2), 0);
    kept_seen k3 = {0, ""};
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(other, s, 0, 30000), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(s, other, 0, on_kept_lost, &k3), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_forget(s, other), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_forget(s, other), HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(s, other, 0, on_kept_lost, &k3), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, other), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_available(&v, s), 0);
    CU_ASSERT_EQUAL(v, 2);
    /* a kept permit left when the handle is freed: kept no more */
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(other, s, 0, 30000), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_keep(s, other, 0, on_kept_lost, &k3), 0);
    hilock_permit_semaphore_free(s2);
    hilock_client_close(c2);
    hilock_permit_semaphore_free(s);
    hilock_client_close(c);
    CU_ASSERT_EQUAL(k3.calls, 0);
}

/* Send a command built by the engine on a raw connection, as the transport
 * would (EVALSHA, then EVAL after NOSCRIPT): the same bytes a connection
 * that died or timed out may still deliver to the server later. */
static redisReply *send_raw(redisContext *r, hl_cmd *cmd)
{
    redisReply *x = redisCommandArgv(r, cmd->argc, cmd->argv, cmd->argvlen);
    if (x && x->type == REDIS_REPLY_ERROR && strncmp(x->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(x);
        hl_cmd_to_eval(cmd);
        x = redisCommandArgv(r, cmd->argc, cmd->argv, cmd->argvlen);
    }
    return x;
}

/* 1 when the reply is pes_acquire.lua's {1} (taken), 0 for {0, ...}, -1 else */
static int pes_taken(redisReply *x)
{
    int v = x && x->type == REDIS_REPLY_ARRAY && x->elements >= 1 &&
                    x->element[0]->type == REDIS_REPLY_INTEGER
                ? (int)x->element[0]->integer
                : -1;
    freeReplyObject(x);
    return v;
}

/* A late copy of a permit-expirable acquire (its connection died or timed
 * out, and the server ran it after the caller gave the id back) takes
 * nothing: not after a release of the permit it took, not after the
 * settle's give-back of a request that had not run yet. The same request
 * sent twice before any give-back still takes its permit once. */
static void t_permit_late_copy(void)
{
    hilock_client *c = open_client();
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_permit_semaphore *s = new_pes(c, "pes-late", 1);
    hl_sem_names n;
    CU_ASSERT_EQUAL_FATAL(hl_sem_names_init(&n, HL_SEM_PERMIT, "pes-late"), 0);
    CU_ASSERT_STRING_EQUAL(n.gone, "hilock_pes_gone:{pes-late}");
    CU_ASSERT(hl_sem_names_one_slot(&n));
    redisContext *r1 = th_redis_connect(&th_srv), *r2 = th_redis_connect(&th_srv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r2);
    unsigned char ids[3][HL_PES_ID_BYTES];
    char hex[3][2 * HL_PES_ID_BYTES + 1];
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < HL_PES_ID_BYTES; j++)
            ids[i][j] = (unsigned char)(0xa0 + 16 * i + j);
        hl_pes_id_hex(hex[i], ids[i]);
    }
    hl_cmd cmd;

    /* taken, released by its holder, then the late copy */
    hl_pes_cmd_acquire(&cmd, &n, 1, 60000, ids[0]);
    CU_ASSERT_EQUAL(pes_taken(send_raw(r1, &cmd)), 1);
    CU_ASSERT_EQUAL(get_int("pes-late"), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, hex[0]), 0);
    CU_ASSERT_EQUAL(get_int("pes-late"), 1);
    hl_pes_cmd_acquire(&cmd, &n, 1, 60000, ids[0]);
    CU_ASSERT_EQUAL(pes_taken(send_raw(r2, &cmd)), 0); /* the late copy */
    CU_ASSERT_EQUAL(get_int("pes-late"), 1);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "ZCARD {pes-late}:timeout"), 0);

    /* given back before it ran (the settle of a lost acquire: nothing to
     * release yet), then the request arrives */
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, hex[1]), HILOCK_ENOTOWNER);
    hl_pes_cmd_acquire(&cmd, &n, 1, 60000, ids[1]);
    CU_ASSERT_EQUAL(pes_taken(send_raw(r1, &cmd)), 0);
    CU_ASSERT_EQUAL(get_int("pes-late"), 1);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "ZCARD {pes-late}:timeout"), 0);

    /* a resend before any give-back answers the first copy's grant */
    hl_pes_cmd_acquire(&cmd, &n, 1, 60000, ids[2]);
    CU_ASSERT_EQUAL(pes_taken(send_raw(r1, &cmd)), 1);
    hl_pes_cmd_acquire(&cmd, &n, 1, 60000, ids[2]);
    CU_ASSERT_EQUAL(pes_taken(send_raw(r2, &cmd)), 1);
    CU_ASSERT_EQUAL(get_int("pes-late"), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, hex[2]), 0);
    CU_ASSERT_EQUAL(get_int("pes-late"), 1);

    /* the given-back set is hilock's own key, in the name's slot, and
     * expires; new acquires are not affected */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "ZCARD hilock_pes_gone:{pes-late}"), 3);
    long long ttl = th_redis_int(&th_srv, "PTTL hilock_pes_gone:{pes-late}");
    CU_ASSERT(ttl > 0 && ttl <= HL_PES_GONE_MS);
    char id[HILOCK_PERMIT_ID_SIZE];
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(id, s, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(s, id), 0);
    CU_ASSERT_EQUAL(get_int("pes-late"), 1);

    redisFree(r1);
    redisFree(r2);
    hl_sem_names_free(&n);
    hilock_permit_semaphore_free(s);
    hilock_client_close(c);
}

/* ---- count-down latch ---- */

typedef struct lwaiter {
    hilock_latch *l;
    int64_t wait_ms;
    int rc;
    int64_t done_at;
} lwaiter;

static void *latch_wait_main(void *arg)
{
    lwaiter *w = arg;
    w->rc = hilock_latch_await_tid(w->l, 5, w->wait_ms);
    __atomic_store_n(&w->done_at, th_now_ms(), __ATOMIC_RELEASE);
    return NULL;
}

static void t_latch(void)
{
    hilock_client *a = open_client(), *b = open_client();
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    hilock_latch *la = NULL, *lb = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_latch_new(&la, a, "latch"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_latch_new(&lb, b, "latch"), 0);
    /* no latch: open */
    CU_ASSERT_EQUAL(hilock_latch_await(la, 0), 0);
    int set = 0;
    CU_ASSERT_EQUAL(hilock_latch_try_set_count(&set, la, 2), 0);
    CU_ASSERT_EQUAL(set, 1);
    CU_ASSERT_EQUAL(hilock_latch_try_set_count(&set, la, 5), 0);
    CU_ASSERT_EQUAL(set, 0);
    CU_ASSERT_EQUAL(get_int("latch"), 2);
    CU_ASSERT_EQUAL(hilock_latch_await(la, 100), HILOCK_ETIMEDOUT);
    lwaiter w[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (lwaiter){i == 2 ? lb : la, 20000, -100, 0};
        pthread_create(&t[i], NULL, latch_wait_main, &w[i]);
    }
    th_sleep_ms(300);
    int64_t left = -1;
    CU_ASSERT_EQUAL(hilock_latch_count_down(&left, lb), 0);
    CU_ASSERT_EQUAL(left, 1);
    th_sleep_ms(100);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(__atomic_load_n(&w[i].done_at, __ATOMIC_ACQUIRE), 0); /* waiting */
    int64_t opened = th_now_ms();
    CU_ASSERT_EQUAL(hilock_latch_count_down(&left, lb), 0);
    CU_ASSERT_EQUAL(left, 0);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(w[i].rc, 0);
        CU_ASSERT(w[i].done_at - opened < 1000);
    }
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS latch"), 0);
    int64_t n = -1;
    CU_ASSERT_EQUAL(hilock_latch_count(&n, la), 0);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(hilock_latch_count_down(&left, la), 0); /* no latch: nothing */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS latch"), 0);
    /* delete opens it; cancel */
    CU_ASSERT_EQUAL(hilock_latch_try_set_count(NULL, la, 3), 0);
    lwaiter cw = {la, -1, -100, 0};
    pthread_t tc;
    pthread_create(&tc, NULL, latch_wait_main, &cw);
    int cancelled = 0;
    for (int i = 0; i < 200 && !cancelled; i++) {
        th_sleep_ms(10);
        hilock_latch_cancel(&cancelled, la, 5);
    }
    pthread_join(tc, NULL);
    CU_ASSERT_EQUAL(cw.rc, HILOCK_ECANCELED);
    cw = (lwaiter){la, 20000, -100, 0};
    pthread_create(&tc, NULL, latch_wait_main, &cw);
    th_sleep_ms(200);
    int deleted = 0;
    opened = th_now_ms();
    CU_ASSERT_EQUAL(hilock_latch_delete(&deleted, lb), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    pthread_join(tc, NULL);
    CU_ASSERT_EQUAL(cw.rc, 0);
    CU_ASSERT(cw.done_at - opened < 1000);
    /* bad input, wrong types */
    CU_ASSERT_EQUAL(hilock_latch_try_set_count(NULL, la, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_latch_try_set_count(NULL, la, -1), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_latch_try_set_count(NULL, la, 1000000000000000LL), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_latch_await(la, -2), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS latch"), 0);
    th_redis_int(&th_srv, "HSET latch f 1");
    CU_ASSERT_EQUAL(hilock_latch_count_down(NULL, la), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_latch_await(la, 0), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_latch_count(&n, la), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_latch_try_set_count(NULL, la, 1), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HGET latch f"), 1);
    hilock_latch_free(la);
    hilock_latch_free(lb);
    hilock_latch_free(NULL);
    hilock_client_close(a);
    hilock_client_close(b);
}

/* ---- the blocking calls' private drivers (easy.c) ---- */

static long long clients_before;
static int clients_back(void *arg)
{
    (void)arg;
    return th_redis_clients(&th_srv) == clients_before;
}

typedef struct easy_worker {
    hilock_latch *l;
    int rounds, ok;
} easy_worker;

static void *easy_counter_main(void *arg)
{
    easy_worker *w = arg;
    for (int i = 0; i < w->rounds; i++) {
        int64_t left = -1;
        if (hilock_latch_count_down(&left, w->l) == 0 && left >= 0)
            w->ok++;
    }
    return NULL;
}

typedef struct easy_waiter {
    hilock_latch *l;
    int rc;
    int64_t at;
} easy_waiter;

static void *easy_waiter_main(void *arg)
{
    easy_waiter *w = arg;
    w->rc = hilock_latch_await(w->l, 20000);
    w->at = th_now_ms();
    return NULL;
}

typedef struct easy_peak {
    int *stop;
    long long peak;
} easy_peak;

static void *easy_peak_main(void *arg)
{
    easy_peak *p = arg;
    while (!__atomic_load_n(p->stop, __ATOMIC_SEQ_CST)) {
        long long n = th_redis_clients(&th_srv) - clients_before;
        if (n > p->peak)
            p->peak = n;
        th_sleep_ms(2);
    }
    return NULL;
}

/* Blocking calls run on private hilock_async drivers the client keeps
 * between calls (easy.c): four threads count down at once on at most
 * pool_size (2) of them while a fifth awaits the latch, the client's
 * connections stay bounded (2 pooled, 2 drivers', the pub/sub listener's),
 * a driver whose connections the server closed while it was idle serves
 * the next call (it reads the close before it sends), and closing the
 * client leaves no connection of it on the server. */
static void t_blocking_drivers(void)
{
    clients_before = th_redis_clients(&th_srv);
    CU_ASSERT(clients_before >= 0);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.pool_size = 2;
    hilock_client *c = NULL;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, th_srv.url, &o, err, sizeof err), 0);
    hilock_latch *l = NULL;
    hilock_semaphore *s = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_latch_new(&l, c, "latch:easy"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_semaphore_new(&s, c, "sem:easy"), 0);
    enum { N = 4 };
    int rounds = th_valgrind() ? 5 : 25;
    CU_ASSERT_EQUAL(hilock_latch_try_set_count(NULL, l, N * rounds), 0);

    int stop = 0;
    easy_peak pk = {&stop, 0};
    pthread_t pth;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&pth, NULL, easy_peak_main, &pk), 0);
    easy_waiter wt = {l, -1, 0};
    pthread_t wth;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&wth, NULL, easy_waiter_main, &wt), 0);
    easy_worker w[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        w[i] = (easy_worker){l, rounds, 0};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, easy_counter_main, &w[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(w[i].ok, w[i].rounds);
    }
    int64_t opened_at = th_now_ms();
    pthread_join(wth, NULL);
    CU_ASSERT_EQUAL(wt.rc, 0); /* woken by the last count-down's message */
    CU_ASSERT(wt.at - opened_at < 10000);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS latch:easy"), 0);
    __atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(pth, NULL);
    CU_ASSERT(pk.peak >= 1);
    CU_ASSERT(pk.peak <= 5);
    if (pk.peak > 5)
        fprintf(stderr, "\n  peak %lld connections\n", pk.peak);

    /* the server drops every idle connection of the client */
    CU_ASSERT(th_redis_int(&th_srv, "CLIENT KILL TYPE normal") >= 1);
    CU_ASSERT(th_redis_int(&th_srv, "CLIENT KILL TYPE pubsub") >= 0);
    int64_t n = -1;
    for (int i = 0; i < N + 1; i++) { /* each idle driver in turn */
        CU_ASSERT_EQUAL(hilock_semaphore_add_permits(s, 1), 0);
        CU_ASSERT_EQUAL(hilock_latch_count(&n, l), 0);
        CU_ASSERT_EQUAL(n, 0);
    }
    CU_ASSERT_EQUAL(hilock_semaphore_available(&n, s), 0);
    CU_ASSERT_EQUAL(n, N + 1);

    hilock_latch_free(l);
    hilock_semaphore_free(s);
    hilock_client_close(c);
    CU_ASSERT(th_wait_for(clients_back, NULL, 5000));
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite e = CU_add_suite("semaphore engine", NULL, NULL);
    CU_add_test(e, "what a message wakes", t_engine_wakes);
    CU_add_test(e, "wait machine steps", t_engine_machine);
    CU_pSuite s = CU_add_suite("semaphores and latch", th_srv_init, th_srv_clean);
    CU_add_test(s, "semaphore: Redisson layout and verbs", t_semaphore_layout);
    CU_add_test(s, "semaphore: release k wakes k waiters; cancel", t_semaphore_wake);
    CU_add_test(s, "semaphore: holders never exceed permits across processes",
                t_semaphore_processes);
    CU_add_test(s, "semaphore: bad input and wrong types, key untouched", t_semaphore_bad_input);
    CU_add_test(s, "permit-expirable semaphore: ids, leases, release", t_permit_semaphore);
    CU_add_test(s, "permit-expirable semaphore: a late copy of an acquire takes nothing",
                t_permit_late_copy);
    CU_add_test(s, "permit-expirable semaphore: a kept permit renewed, its loss told at once",
                t_permit_keep);
    CU_add_test(s, "count-down latch: await woken on zero, delete, cancel", t_latch);
    CU_add_test(s, "blocking calls on private drivers: threads, killed idle connections, close",
                t_blocking_drivers);
    return th_cu_run();
}
