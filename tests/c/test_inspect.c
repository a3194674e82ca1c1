/*
 * hilock_inspect against a real redis-server: every lock kind as the
 * library (and Redisson) stores it — none, reentrant with a re-entry, fair
 * with live waiters queued in order with their deadlines, read-write (read
 * and write modes), fenced with its token — keys that are not locks, and
 * the decoder fed replies of the wrong shape or with bad numbers.
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "hilock.h"
#include "proto.h"


static int owner_is(const char *owner, size_t len, hilock_client *c, uint64_t tid)
{
    char want[80];
    hilock_client_owner(c, tid, want, sizeof want);
    return len == strlen(want) && !memcmp(owner, want, len) && owner[len] == 0;
}

static void t_none_and_args(void)
{
    hilock_client *c = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock_info *v = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:none"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_NONE);
    CU_ASSERT_STRING_EQUAL(v->name, "insp:none");
    CU_ASSERT_EQUAL(v->locked, 0);
    CU_ASSERT_STRING_EQUAL(v->key_type, "none");
    CU_ASSERT_EQUAL(v->lease_ms, -2);
    CU_ASSERT_STRING_EQUAL(v->mode, "");
    CU_ASSERT_EQUAL(v->nholders, 0);
    CU_ASSERT_EQUAL(v->nqueue, 0);
    CU_ASSERT_EQUAL(v->token, 0);
    CU_ASSERT_STRING_EQUAL(v->note, "");
    /* the server's clock, same machine: within a minute of ours */
    int64_t now = (int64_t)time(NULL) * 1000;
    CU_ASSERT(v->server_time_ms > now - 60000 && v->server_time_ms < now + 60000);
    hilock_lock_info_free(v);

    v = (hilock_lock_info *)&v; /* set to NULL on failure */
    CU_ASSERT_EQUAL(hilock_inspect(&v, c, ""), HILOCK_EINVAL);
    CU_ASSERT_PTR_NULL(v);
    CU_ASSERT(strstr(hilock_client_errmsg(c), "name") != NULL);
    CU_ASSERT_EQUAL(hilock_inspect(&v, c, NULL), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_inspect(&v, NULL, "x"), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_inspect(NULL, c, "x"), HILOCK_EINVAL);
    hilock_lock_info_free(NULL);
    CU_ASSERT_STRING_EQUAL(hilock_info_kind_name(HILOCK_INFO_FENCED), "fenced");
    CU_ASSERT_STRING_EQUAL(hilock_info_kind_name(HILOCK_INFO_READWRITE), "read-write");
    CU_ASSERT_STRING_EQUAL(hilock_info_kind_name((hilock_info_kind)42), "unknown");
    hilock_client_close(c);
}

static void t_reentrant(void)
{
    hilock_client *c = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "insp:re"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 7, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 7, 0, 60000), 0);
    hilock_lock_info *v = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:re"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_REENTRANT);
    CU_ASSERT_EQUAL(v->locked, 1);
    CU_ASSERT_STRING_EQUAL(v->key_type, "hash");
    CU_ASSERT(v->lease_ms > 0 && v->lease_ms <= 60000);
    CU_ASSERT_EQUAL_FATAL(v->nholders, 1);
    CU_ASSERT(owner_is(v->holders[0].owner, v->holders[0].owner_len, c, 7));
    CU_ASSERT_EQUAL(v->holders[0].holds, 2);
    CU_ASSERT_EQUAL(v->holders[0].role, HILOCK_ROLE_EXCLUSIVE);
    hilock_lock_info_free(v);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 7), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 7), 0);
    hilock_lock_free(l);

    /* as Redisson writes it, no expiry */
    th_redis_int(&th_srv, "HSET insp:redisson 01234567-89ab-cdef-0123-456789abcdef:9 3");
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:redisson"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_REENTRANT);
    CU_ASSERT_EQUAL(v->lease_ms, -1);
    CU_ASSERT_EQUAL_FATAL(v->nholders, 1);
    CU_ASSERT_STRING_EQUAL(v->holders[0].owner, "01234567-89ab-cdef-0123-456789abcdef:9");
    CU_ASSERT_EQUAL(v->holders[0].holds, 3);
    hilock_lock_info_free(v);
    hilock_client_close(c);
}

typedef struct waiter {
    hilock_lock *l;
    uint64_t tid;
    int rc;
} waiter;

static void *wait_thread(void *arg)
{
    waiter *w = arg;
    w->rc = hilock_lock_acquire_tid(w->l, w->tid, 20000, 60000);
    return NULL;
}

static int queued(void *arg)
{
    return th_redis_int(&th_srv, "LLEN redisson_lock_queue:{insp:fair}") == *(long long *)arg;
}

static void t_fair_queue(void)
{
    hilock_client *c = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&l, c, "insp:fair"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire_tid(l, 1, 0, 60000), 0);
    waiter w[2] = {{l, 2, 1}, {l, 3, 1}};
    pthread_t th[2];
    for (long long i = 0; i < 2; i++) {
        long long n = i + 1;
        pthread_create(&th[i], NULL, wait_thread, &w[i]);
        CU_ASSERT_FATAL(th_wait_for(queued, &n, 10000)); /* in this order */
    }
    hilock_lock_info *v = NULL;
    CU_ASSERT_EQUAL(hilock_inspect(&v, c, "insp:fair"), 0);
    if (v) {
        CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_FAIR);
        CU_ASSERT_EQUAL(v->locked, 1);
        CU_ASSERT(v->nholders == 1 &&
                  owner_is(v->holders[0].owner, v->holders[0].owner_len, c, 1));
        CU_ASSERT_EQUAL(v->nqueue, 2);
        if (v->nqueue == 2) {
            CU_ASSERT(owner_is(v->queue[0].owner, v->queue[0].owner_len, c, 2));
            CU_ASSERT(owner_is(v->queue[1].owner, v->queue[1].owner_len, c, 3));
            /* deadlines: after now, the second one a wait window later */
            CU_ASSERT(v->queue[0].deadline_ms > v->server_time_ms);
            CU_ASSERT(v->queue[1].deadline_ms > v->queue[0].deadline_ms);
        }
        hilock_lock_info_free(v);
    }
    for (int i = 0; i < 2; i++) {
        int cancelled = 0;
        CU_ASSERT_EQUAL(hilock_lock_cancel(&cancelled, l, w[i].tid), 0);
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(w[i].rc, HILOCK_ECANCELED);
    }
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), 0);
    /* a deadline set with no list (a waiter in the middle of leaving) is
     * still fair-lock data */
    th_redis_int(&th_srv, "ZADD redisson_lock_timeout:{insp:fair} 1 gone:1");
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:fair"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_FAIR);
    CU_ASSERT_EQUAL(v->locked, 0);
    CU_ASSERT_EQUAL(v->nqueue, 0);
    hilock_lock_info_free(v);
    hilock_lock_free(l);
    hilock_client_close(c);
}

static void t_readwrite(void)
{
    hilock_client *c = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_rwlock *rw = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_rwlock_new(&rw, c, "insp:rw"), 0);
    hilock_lock *rd = hilock_rwlock_read_lock(rw), *wr = hilock_rwlock_write_lock(rw);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(rd, 1, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(rd, 2, 0, 60000), 0);
    hilock_lock_info *v = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:rw"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_READWRITE);
    CU_ASSERT_STRING_EQUAL(v->mode, "read");
    CU_ASSERT_EQUAL(v->nholders, 2);
    for (size_t i = 0; i < v->nholders; i++) {
        CU_ASSERT_EQUAL(v->holders[i].role, HILOCK_ROLE_READ);
        CU_ASSERT_EQUAL(v->holders[i].holds, 1);
    }
    hilock_lock_info_free(v);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(rd, 1), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(rd, 2), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(wr, 3, 0, 60000), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:rw"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_READWRITE);
    CU_ASSERT_STRING_EQUAL(v->mode, "write");
    CU_ASSERT_EQUAL_FATAL(v->nholders, 1);
    CU_ASSERT_EQUAL(v->holders[0].role, HILOCK_ROLE_WRITE);
    char want[80];
    hilock_client_owner(c, 3, want, sizeof want);
    strcat(want, ":write");
    CU_ASSERT_STRING_EQUAL(v->holders[0].owner, want);
    hilock_lock_info_free(v);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(wr, 3), 0);
    hilock_rwlock_free(rw);
    hilock_client_close(c);
}

static void t_fenced(void)
{
    hilock_client *c = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_fenced_lock_new(&l, c, "insp:fen"), 0);
    int64_t tok = 0;
    CU_ASSERT_EQUAL(hilock_lock_acquire_token_tid(&tok, l, 5, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_token_tid(&tok, l, 5, 0, 60000), 0);
    hilock_lock_info *v = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:fen"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_FENCED);
    CU_ASSERT_EQUAL(v->token, tok);
    CU_ASSERT(tok > 1000000000000LL); /* started at the server's clock (ms) */
    CU_ASSERT(v->nholders == 1 && v->holders[0].holds == 2);
    hilock_lock_info_free(v);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 5), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 5), 0);
    /* released: nothing locked, the counter stays */
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:fen"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_NONE);
    CU_ASSERT_EQUAL(v->token, tok);
    hilock_lock_info_free(v);
    hilock_lock_free(l);
    hilock_client_close(c);
}

static void t_not_locks(void)
{
    hilock_client *c = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock_info *v = NULL;
    th_redis_int(&th_srv, "SET insp:str hello");
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:str"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_UNKNOWN);
    CU_ASSERT_STRING_EQUAL(v->key_type, "string");
    CU_ASSERT_STRING_EQUAL(v->note, "the key holds a string, not a lock");
    hilock_lock_info_free(v);
    /* hold counts that are not counts */
    th_redis_int(&th_srv, "HSET insp:odd a:1 notanumber b:2 99999999999999999999 c:3 -1 d:4 7");
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:odd"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_UNKNOWN);
    CU_ASSERT(strstr(v->note, "not hold counts") != NULL);
    CU_ASSERT_EQUAL_FATAL(v->nholders, 4);
    int bad = 0;
    for (size_t i = 0; i < v->nholders; i++)
        bad += v->holders[i].holds == -1;
    CU_ASSERT_EQUAL(bad, 3);
    hilock_lock_info_free(v);
    /* a binary owner: length exact, NUL inside */
    redisContext *ctx = th_redis_connect(&th_srv);
    redisReply *r = redisCommand(ctx, "HSET insp:bin %b 1", "a\0b", (size_t)3);
    freeReplyObject(r);
    /* companion keys of the wrong type: the lock is still read */
    r = redisCommand(ctx, "SET redisson_lock_queue:{insp:bin} x");
    freeReplyObject(r);
    redisFree(ctx);
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:bin"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_REENTRANT);
    CU_ASSERT(v->nholders == 1 && v->holders[0].owner_len == 3 &&
              !memcmp(v->holders[0].owner, "a\0b", 3));
    CU_ASSERT_STRING_EQUAL(v->note, "fair queue keys hold unexpected types");
    hilock_lock_info_free(v);
    th_redis_int(&th_srv, "HSET insp:tok o:1 1");
    th_redis_int(&th_srv, "SET redisson_lock_token:{insp:tok} abc");
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:tok"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_REENTRANT);
    CU_ASSERT_EQUAL(v->token, 0);
    CU_ASSERT_STRING_EQUAL(v->note, "the fencing token counter is not a counter");
    hilock_lock_info_free(v);
    hilock_client_close(c);
}

static void t_semaphores(void)
{
    hilock_client *c = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock_info *v = NULL;
    /* a semaphore with 3 permits, 1 taken: count 2 */
    hilock_semaphore *s = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_semaphore_new(&s, c, "insp:sem"), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_try_set_permits(NULL, s, 3), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_acquire(s, 1, 0), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:sem"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_COUNT);
    CU_ASSERT_STRING_EQUAL(hilock_info_kind_name(v->kind), "count");
    CU_ASSERT_STRING_EQUAL(v->key_type, "string");
    CU_ASSERT_EQUAL(v->count, 2);
    CU_ASSERT_EQUAL(v->npermits, 0);
    CU_ASSERT_EQUAL(v->permits_taken, 0);
    CU_ASSERT_EQUAL(v->nholders, 0);
    CU_ASSERT_STRING_EQUAL(v->note, "");
    hilock_lock_info_free(v);
    /* every permit drained, and below zero (add_permits may do that) */
    int64_t drained = 0;
    CU_ASSERT_EQUAL(hilock_semaphore_drain(&drained, s), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_add_permits(s, -4), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:sem"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_COUNT);
    CU_ASSERT_EQUAL(v->count, -4);
    hilock_lock_info_free(v);
    hilock_semaphore_free(s);

    /* a count-down latch: its count */
    hilock_latch *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_latch_new(&l, c, "insp:latch"), 0);
    CU_ASSERT_EQUAL(hilock_latch_try_set_count(NULL, l, 5), 0);
    CU_ASSERT_EQUAL(hilock_latch_count_down(NULL, l), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:latch"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_COUNT);
    CU_ASSERT_EQUAL(v->count, 4);
    hilock_lock_info_free(v);
    hilock_latch_free(l);

    /* a permit-expirable semaphore: ids and lease ends of the permits taken */
    hilock_permit_semaphore *p = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_permit_semaphore_new(&p, c, "insp:pes"), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_try_set_permits(NULL, p, 4), 0);
    /* nothing taken: stored as a plain count */
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:pes"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_COUNT);
    CU_ASSERT_EQUAL(v->count, 4);
    hilock_lock_info_free(v);
    char id1[HILOCK_PERMIT_ID_SIZE], id2[HILOCK_PERMIT_ID_SIZE];
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(id1, p, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_acquire(id2, p, 0, 0), 0); /* no lease */
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:pes"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_PERMIT_SEMAPHORE);
    CU_ASSERT_STRING_EQUAL(hilock_info_kind_name(v->kind), "permit-semaphore");
    CU_ASSERT_EQUAL(v->count, 2);
    CU_ASSERT_EQUAL(v->permits_taken, 2);
    CU_ASSERT_EQUAL_FATAL(v->npermits, 2);
    /* soonest lease end first: the leased one, then the one without */
    CU_ASSERT_STRING_EQUAL(v->permits[0].id, id1);
    CU_ASSERT(v->permits[0].lease_end_ms > v->server_time_ms &&
              v->permits[0].lease_end_ms <= v->server_time_ms + 60000);
    CU_ASSERT_STRING_EQUAL(v->permits[1].id, id2);
    CU_ASSERT_EQUAL(v->permits[1].lease_end_ms, -1);
    CU_ASSERT_STRING_EQUAL(v->note, "");
    hilock_lock_info_free(v);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(p, id1), 0);
    CU_ASSERT_EQUAL(hilock_permit_semaphore_release(p, id2), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:pes"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_COUNT);
    CU_ASSERT_EQUAL(v->count, 4);
    CU_ASSERT_EQUAL(v->npermits, 0);
    hilock_lock_info_free(v);
    hilock_permit_semaphore_free(p);

    /* a hash-tagged name: the leases are "N:timeout" */
    th_redis_int(&th_srv, "SET {insp}pes 1");
    th_redis_int(&th_srv, "ZADD {insp}pes:timeout 5 0123456789abcdef");
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "{insp}pes"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_PERMIT_SEMAPHORE);
    CU_ASSERT_EQUAL_FATAL(v->npermits, 1);
    CU_ASSERT_STRING_EQUAL(v->permits[0].id, "30313233343536373839616263646566");
    CU_ASSERT_EQUAL(v->permits[0].lease_end_ms, 5); /* ended long ago */
    hilock_lock_info_free(v);

    /* foreign data: a lease member that is no permit id, leases of the
     * wrong type, a string that is no count, a count next to nothing */
    th_redis_int(&th_srv, "SET insp:fpes 0");
    th_redis_int(&th_srv, "ZADD {insp:fpes}:timeout 922337203685477 short");
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:fpes"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_PERMIT_SEMAPHORE);
    CU_ASSERT(v->npermits == 1 && !strcmp(v->permits[0].id, "73686f7274") &&
              v->permits[0].lease_end_ms == -1);
    CU_ASSERT_STRING_EQUAL(v->note, "a permit lease is not a 16-byte permit id");
    hilock_lock_info_free(v);
    th_redis_int(&th_srv, "SET insp:wpes 3");
    th_redis_int(&th_srv, "SET {insp:wpes}:timeout x");
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:wpes"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_COUNT);
    CU_ASSERT_EQUAL(v->count, 3);
    CU_ASSERT_STRING_EQUAL(v->note, "the permit leases key holds a string");
    hilock_lock_info_free(v);
    const char *not_counts[] = {"SET insp:nc 12345678901234567", "SET insp:nc 1.5",
                                "SET insp:nc -", "SET insp:nc +3", "SET insp:nc 3x"};
    for (size_t i = 0; i < sizeof not_counts / sizeof *not_counts; i++) {
        th_redis_int(&th_srv, not_counts[i]);
        CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:nc"), 0);
        CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_UNKNOWN);
        CU_ASSERT_EQUAL(v->count, 0);
        CU_ASSERT_STRING_EQUAL(v->note, "the key holds a string, not a lock");
        hilock_lock_info_free(v);
    }
    /* leases next to a lock: the lock is read, the leases noted */
    th_redis_int(&th_srv, "HSET insp:lk o:1 1");
    th_redis_int(&th_srv, "ZADD {insp:lk}:timeout 5 0123456789abcdef");
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "insp:lk"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_REENTRANT);
    CU_ASSERT_EQUAL(v->count, 0);
    CU_ASSERT_STRING_EQUAL(v->note, "permit leases exist next to a reentrant");
    hilock_lock_info_free(v);
    hilock_client_close(c);
}

/* The decoder alone: replies no server sends. */
static int decode(const char *bytes, size_t len, hilock_lock_info **v)
{
    char err[HL_URL_ERR_MAX] = "";
    redisReply *r = th_resp(bytes, len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    int rc = hl_decode_inspect(r, "n", v, err);
    CU_ASSERT(rc == 0 || (err[0] && *v == NULL));
    freeReplyObject(r);
    return rc;
}
#define DECODE(s, v) decode(s, sizeof(s) - 1, v)
/* A well-formed reply around one queue entry's score and the TIME pair. */
#define REPLY(pttl, holds, score, sec)                                                  \
    "*15\r\n+hash\r\n:" pttl "\r\n*2\r\n$3\r\no:1\r\n$" holds "\r\n+list\r\n*1\r\n$3\r\nw:2\r\n" \
    "*1\r\n" score "+zset\r\n:1\r\n*2\r\n$" sec "\r\n$1\r\n5\r\n+none\r\n$-1\r\n" \
    "$-1\r\n+none\r\n:0\r\n*0\r\n"

static void t_decode_hostile(void)
{
    hilock_lock_info *v = NULL;
    CU_ASSERT_EQUAL(DECODE(REPLY("100", "1\r\n2", "$4\r\n1000\r\n", "4\r\n1700"), &v), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_FAIR);
    CU_ASSERT_EQUAL(v->holders[0].holds, 2);
    CU_ASSERT_EQUAL(v->queue[0].deadline_ms, 1000);
    CU_ASSERT_EQUAL(v->server_time_ms, 1700000);
    hilock_lock_info_free(v);
    /* scores that are not epoch ms read "no deadline" */
    const char *bad_scores[] = {"$3\r\nnan\r\n", "$3\r\ninf\r\n", "$2\r\n-1\r\n", "$3\r\nabc\r\n",
                                "$5\r\n1e300\r\n", "$-1\r\n", ":5\r\n"};
    for (size_t i = 0; i < sizeof bad_scores / sizeof *bad_scores; i++) {
        char buf[512];
        int n = snprintf(buf, sizeof buf, REPLY("100", "1\r\n2", "%s", "4\r\n1700"), bad_scores[i]);
        CU_ASSERT_EQUAL(decode(buf, (size_t)n, &v), 0);
        if (v) {
            CU_ASSERT_EQUAL(v->queue[0].deadline_ms, -1);
            hilock_lock_info_free(v);
        }
    }
    /* a count that is not a count: kind unknown, holds -1 */
    CU_ASSERT_EQUAL(DECODE(REPLY("100", "2\r\n1x", "$4\r\n1000\r\n", "4\r\n1700"), &v), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_UNKNOWN);
    CU_ASSERT_EQUAL(v->holders[0].holds, -1);
    hilock_lock_info_free(v);
    /* errors: an error reply, the wrong shape, a PTTL or TIME out of range */
    CU_ASSERT_EQUAL(DECODE("-ERR boom\r\n", &v), HILOCK_EPROTO);
    CU_ASSERT_EQUAL(DECODE(":1\r\n", &v), HILOCK_EPROTO);
    CU_ASSERT_EQUAL(DECODE("*2\r\n+hash\r\n:1\r\n", &v), HILOCK_EPROTO);
    CU_ASSERT_EQUAL(DECODE(REPLY("-3", "1\r\n2", "$4\r\n1000\r\n", "4\r\n1700"), &v),
                    HILOCK_EPROTO);
    CU_ASSERT_EQUAL(DECODE(REPLY("100", "1\r\n2", "$4\r\n1000\r\n", "2\r\n-1"), &v),
                    HILOCK_EPROTO);
    CU_ASSERT_EQUAL(DECODE(REPLY("100", "1\r\n2", "$4\r\n1000\r\n", "3\r\nabc"), &v),
                    HILOCK_EPROTO);
    /* a deadline list that does not match the queue */
    CU_ASSERT_EQUAL(DECODE("*15\r\n+hash\r\n:1\r\n*0\r\n+list\r\n*1\r\n$1\r\nw\r\n*0\r\n"
                           "+zset\r\n:1\r\n*2\r\n$1\r\n1\r\n$1\r\n5\r\n+none\r\n$-1\r\n"
                           "$-1\r\n+none\r\n:0\r\n*0\r\n",
                           &v),
                    HILOCK_EPROTO);
    /* an odd number of hash elements */
    CU_ASSERT_EQUAL(DECODE("*15\r\n+hash\r\n:1\r\n*1\r\n$1\r\nx\r\n+none\r\n*0\r\n*0\r\n"
                           "+none\r\n:0\r\n*2\r\n$1\r\n1\r\n$1\r\n5\r\n+none\r\n$-1\r\n"
                           "$-1\r\n+none\r\n:0\r\n*0\r\n",
                           &v),
                    HILOCK_EPROTO);
    /* the leases: more pairs than ZCARD says, an odd count, a negative ZCARD,
     * a number where a member goes, a count that is not a string */
#define TAIL(x) "*15\r\n+string\r\n:-1\r\n*0\r\n+none\r\n*0\r\n*0\r\n+none\r\n:0\r\n" \
                "*2\r\n$1\r\n1\r\n$1\r\n5\r\n+none\r\n$-1\r\n" x
    CU_ASSERT_EQUAL(DECODE(TAIL("$1\r\n2\r\n+zset\r\n:1\r\n*2\r\n$1\r\na\r\n$1\r\n9\r\n"), &v), 0);
    CU_ASSERT(v && v->kind == HILOCK_INFO_PERMIT_SEMAPHORE && v->count == 2 && v->npermits == 1 &&
              v->permits[0].lease_end_ms == 9);
    hilock_lock_info_free(v);
    CU_ASSERT_EQUAL(DECODE(TAIL("$1\r\n2\r\n+zset\r\n:0\r\n*2\r\n$1\r\na\r\n$1\r\n9\r\n"), &v),
                    HILOCK_EPROTO);
    CU_ASSERT_EQUAL(DECODE(TAIL("$1\r\n2\r\n+zset\r\n:1\r\n*1\r\n$1\r\na\r\n"), &v),
                    HILOCK_EPROTO);
    CU_ASSERT_EQUAL(DECODE(TAIL("$1\r\n2\r\n+zset\r\n:-1\r\n*0\r\n"), &v), HILOCK_EPROTO);
    CU_ASSERT_EQUAL(DECODE(TAIL("$1\r\n2\r\n+zset\r\n:1\r\n*2\r\n:1\r\n$1\r\n9\r\n"), &v),
                    HILOCK_EPROTO);
    CU_ASSERT_EQUAL(DECODE(TAIL(":2\r\n+none\r\n:0\r\n*0\r\n"), &v), HILOCK_EPROTO);
    /* a lease end that is not epoch ms reads -1 */
    CU_ASSERT_EQUAL(DECODE(TAIL("$1\r\n2\r\n+zset\r\n:1\r\n*2\r\n$1\r\na\r\n$3\r\nnan\r\n"), &v), 0);
    CU_ASSERT(v && v->npermits == 1 && v->permits[0].lease_end_ms == -1);
    hilock_lock_info_free(v);
#undef TAIL
}

/* hilock_scan_names: the names matching a pattern, sorted, each once,
 * without companion keys; waiting counts the wake-up channel's subscribers. */
static void t_scan_and_waiting(void)
{
    hilock_client *c = th_client_open(th_srv.url);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    th_redis_int(&th_srv, "HSET scan:b o:1 1");
    th_redis_int(&th_srv, "HSET scan:a o:1 1");
    th_redis_int(&th_srv, "SET scan:c 3");
    th_redis_int(&th_srv, "RPUSH redisson_lock_queue:{scan:a} o:2");
    th_redis_int(&th_srv, "ZADD redisson_lock_timeout:{scan:a} 1 o:2");
    th_redis_int(&th_srv, "SET redisson_lock_token:{scan:a} 4");
    th_redis_int(&th_srv, "ZADD {scan:z}:timeout 1 p");
    th_redis_int(&th_srv, "SET other:a 1");
    char **names = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(hilock_scan_names(&names, &n, c, "*scan:*", 0), 0);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT_STRING_EQUAL(names[0], "scan:a");
    CU_ASSERT_STRING_EQUAL(names[1], "scan:b");
    CU_ASSERT_STRING_EQUAL(names[2], "scan:c");
    hilock_names_free(names, n);
    CU_ASSERT_EQUAL(hilock_scan_names(&names, &n, c, "scan:*", 2), 0);
    CU_ASSERT_EQUAL(n, 2);
    hilock_names_free(names, n);
    CU_ASSERT_EQUAL(hilock_scan_names(&names, &n, c, "nothing:*", 0), 0);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_PTR_NULL(names);
    CU_ASSERT_EQUAL(hilock_scan_names(&names, &n, c, "", 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_scan_names(&names, &n, NULL, "x", 0), HILOCK_EINVAL);
    hilock_names_free(NULL, 3);

    /* a subscriber of the lock's channel is a waiting client */
    hilock_lock_info *v = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "scan:b"), 0);
    CU_ASSERT_EQUAL(v->waiting, 0);
    hilock_lock_info_free(v);
    redisContext *sub = th_redis_connect(&th_srv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sub);
    redisReply *r = redisCommand(sub, "SUBSCRIBE redisson_lock__channel:{scan:b}");
    freeReplyObject(r);
    CU_ASSERT_EQUAL_FATAL(hilock_inspect(&v, c, "scan:b"), 0);
    CU_ASSERT_EQUAL(v->kind, HILOCK_INFO_REENTRANT);
    CU_ASSERT_EQUAL(v->waiting, 1);
    hilock_lock_info_free(v);
    redisFree(sub);
    th_redis_int(&th_srv, "DEL scan:a scan:b scan:c other:a redisson_lock_queue:{scan:a} "
                          "redisson_lock_timeout:{scan:a} redisson_lock_token:{scan:a} "
                          "{scan:z}:timeout");
    hilock_client_close(c);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("inspection", th_srv_init, th_srv_clean);
    CU_add_test(s, "no lock; bad arguments", t_none_and_args);
    CU_add_test(s, "reentrant (library and Redisson data)", t_reentrant);
    CU_add_test(s, "fair: holder, queue in order, deadlines", t_fair_queue);
    CU_add_test(s, "read-write: read and write modes", t_readwrite);
    CU_add_test(s, "fenced: kind and token", t_fenced);
    CU_add_test(s, "keys that are not locks", t_not_locks);
    CU_add_test(s, "semaphore, latch, permit-expirable semaphore", t_semaphores);
    CU_add_test(s, "decoder: bad shapes and numbers", t_decode_hostile);
    CU_add_test(s, "scan names by pattern; waiting clients", t_scan_and_waiting);
    return th_cu_run();
}
