/*
 * Read-write lock against a real redis-server: Redisson's layout (mode
 * field, read counters, per-hold timeout keys, "<owner>:write"), readers
 * share and a writer excludes, reentrancy and a writer taking the read
 * side, wake-up by the unlock message on redisson_rwlock:{N} (the lease is
 * a minute, so only the message can wake the waiter in time), watchdog
 * renewal of both sides, loss after a forced unlock, wrong key types.
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"


static hilock_client *open_client(int64_t watchdog_lease_ms)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    if (watchdog_lease_ms > 0)
        o.watchdog_lease_ms = watchdog_lease_ms;
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, th_srv.url, &o, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  open %s: %d %s (%s)\n", th_srv.url, rc, hilock_strerror(rc), err);
    return c;
}

static void t_layout_and_sharing(void)
{
    hilock_client *c = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_rwlock *rw = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_rwlock_new(&rw, c, "rw:layout"), 0);
    hilock_lock *r = hilock_rwlock_read_lock(rw), *w = hilock_rwlock_write_lock(rw);
    CU_ASSERT_EQUAL(hilock_lock_kind(r), HILOCK_KIND_READ);
    CU_ASSERT_EQUAL(hilock_lock_kind(w), HILOCK_KIND_WRITE);
    CU_ASSERT_STRING_EQUAL(hilock_lock_name(r), "rw:layout");

    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, 1, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, 1, 0, 60000), 0); /* reentrant */
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, 2, 0, 60000), 0); /* readers share */
    char buf[128];
    CU_ASSERT_EQUAL(th_redis_str(&th_srv, buf, sizeof buf, "HGET rw:layout mode"), 0);
    CU_ASSERT_STRING_EQUAL(buf, "read");
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HGET rw:layout %s:1", hilock_client_id(c)), 2);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HGET rw:layout %s:2", hilock_client_id(c)), 1);
    long long t = th_redis_int(&th_srv, "PTTL {rw:layout}:%s:1:rwlock_timeout:2", hilock_client_id(c));
    CU_ASSERT(t > 50000 && t <= 60000);
    int64_t n = 0;
    CU_ASSERT_EQUAL(hilock_lock_hold_count_tid(&n, r, 1), 0);
    CU_ASSERT_EQUAL(n, 2);
    int v = -1;
    CU_ASSERT_EQUAL(hilock_lock_is_locked(&v, r), 0);
    CU_ASSERT_EQUAL(v, 1);
    CU_ASSERT_EQUAL(hilock_lock_is_locked(&v, w), 0);
    CU_ASSERT_EQUAL(v, 0);

    /* readers exclude a writer, the reader itself included (as Redisson) */
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(w, 3, 0, 60000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(w, 1, 0, 60000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(r, 3), HILOCK_ENOTOWNER);

    CU_ASSERT_EQUAL(hilock_lock_release_tid(r, 1), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS {rw:layout}:%s:1:rwlock_timeout:2", hilock_client_id(c)), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(r, 1), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS rw:layout"), 1);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(r, 2), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS rw:layout"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS {rw:layout}:%s:2:rwlock_timeout:1", hilock_client_id(c)), 0);
    hilock_rwlock_free(rw);
    hilock_client_close(c);
}

static void t_writer_excludes(void)
{
    hilock_client *c = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_rwlock *rw = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_rwlock_new(&rw, c, "rw:{tag}w"), 0);
    hilock_lock *r = hilock_rwlock_read_lock(rw), *w = hilock_rwlock_write_lock(rw);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(w, 7, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(w, 7, 0, 60000), 0); /* reentrant */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HGET rw:{tag}w %s:7:write", hilock_client_id(c)), 2);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(w, 8, 0, 60000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, 8, 0, 60000), HILOCK_ETIMEDOUT);
    int held = 0;
    CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&held, w, 7), 0);
    CU_ASSERT_EQUAL(held, 1);
    CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&held, r, 7), 0);
    CU_ASSERT_EQUAL(held, 0);
    /* the writer may read too; the name has a hash tag: prefix is the name */
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, 7, 0, 60000), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS rw:{tag}w:%s:7:rwlock_timeout:1", hilock_client_id(c)), 1);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(w, 8), HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(w, 7), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(w, 7), 0);
    /* write side gone, read hold left: a read lock now, readers may join */
    char buf[64];
    CU_ASSERT_EQUAL(th_redis_str(&th_srv, buf, sizeof buf, "HGET rw:{tag}w mode"), 0);
    CU_ASSERT_STRING_EQUAL(buf, "read");
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, 8, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(r, 8), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(r, 7), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS rw:{tag}w"), 0);
    hilock_rwlock_free(rw);
    hilock_client_close(c);
}

typedef struct waiter {
    hilock_lock *l;
    uint64_t tid;
    int rc;
    int64_t got_at;
} waiter;

static void *wait_main(void *arg)
{
    waiter *wt = arg;
    wt->rc = hilock_lock_acquire_tid(wt->l, wt->tid, 10000, 60000);
    wt->got_at = th_now_ms();
    return NULL;
}


/* A waiter is woken by the unlock message: the holder's lease is a minute. */
static void t_wake_by_message(void)
{
    hilock_client *c = open_client(0), *c2 = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    hilock_rwlock *rw = NULL, *rw2 = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_rwlock_new(&rw, c, "rw:wake"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_rwlock_new(&rw2, c2, "rw:wake"), 0);
    hilock_lock *w = hilock_rwlock_write_lock(rw);

    /* two readers of another client wait for a writer: both wake at once */
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire_tid(w, 1, 0, 60000), 0);
    waiter a = {hilock_rwlock_read_lock(rw2), 11, 99, 0};
    waiter b = {hilock_rwlock_read_lock(rw2), 12, 99, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, wait_main, &a);
    pthread_create(&tb, NULL, wait_main, &b);
    /* the waiters subscribed (the listener's connection) before we release */
    for (int i = 0; i < 400; i++) {
        redisContext *x = th_redis_connect(&th_srv);
        redisReply *rep = redisCommand(x, "PUBSUB NUMSUB redisson_rwlock:{rw:wake}");
        long long subs = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2
                             ? rep->element[1]->integer : 0;
        freeReplyObject(rep);
        redisFree(x);
        if (subs >= 1)
            break;
        th_sleep_ms(5);
    }
    th_sleep_ms(100); /* both threads past their first attempt */
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_release_tid(w, 1), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CU_ASSERT_EQUAL(a.rc, 0);
    CU_ASSERT_EQUAL(b.rc, 0);
    fprintf(stderr, "\n  readers woke %lld / %lld ms after the write unlock\n",
            (long long)(a.got_at - t0), (long long)(b.got_at - t0));
    CU_ASSERT(a.got_at - t0 < 2000 && b.got_at - t0 < 2000);

    /* a writer waits for both readers; the last read unlock wakes it */
    waiter wr = {hilock_rwlock_write_lock(rw), 2, 99, 0};
    pthread_t tw;
    pthread_create(&tw, NULL, wait_main, &wr);
    th_sleep_ms(200);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(a.l, 11), 0);
    th_sleep_ms(100);
    CU_ASSERT_EQUAL(wr.rc, 99); /* still waiting: one reader left */
    t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_release_tid(b.l, 12), 0);
    pthread_join(tw, NULL);
    CU_ASSERT_EQUAL(wr.rc, 0);
    fprintf(stderr, "  writer woke %lld ms after the last read unlock\n",
            (long long)(wr.got_at - t0));
    CU_ASSERT(wr.got_at - t0 < 2000);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(wr.l, 2), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS rw:wake"), 0);
    hilock_rwlock_free(rw);
    hilock_rwlock_free(rw2);
    hilock_client_close(c);
    hilock_client_close(c2);
}

static int lost_calls;
static void on_lost(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)l;
    (void)tid;
    (void)payload;
    __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}
static int lost_twice(void *arg)
{
    (void)arg;
    return __atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) >= 2;
}

/* Watchdog renews both sides (lease 2.4 s, held 3 s: without renewals both
 * keys would be gone), and a forced unlock is reported as lost on both.
 * The lease is the test's margin against load: a hold with no renewal
 * confirmed for lease - lease/5 is rightly reported lost "in doubt", and
 * with a 1.2 s lease that was one renewal tick (every 400 ms) the watchdog
 * thread could not run for ~0.56 s, which a machine at load 20 did. */
static void t_watchdog_and_force(void)
{
    __atomic_store_n(&lost_calls, 0, __ATOMIC_SEQ_CST);
    hilock_client *c = open_client(2400);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_rwlock *rw = NULL, *rw2 = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_rwlock_new(&rw, c, "rw:wd"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_rwlock_new(&rw2, c, "rw:wd2"), 0);
    hilock_lock *r = hilock_rwlock_read_lock(rw), *w = hilock_rwlock_write_lock(rw2);
    hilock_lock_set_lost_callback(r, on_lost, NULL);
    hilock_lock_set_lost_callback(w, on_lost, NULL);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, 1, 0, HILOCK_LEASE_WATCHDOG), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(w, 1, 0, HILOCK_LEASE_WATCHDOG), 0);
    th_sleep_ms(3000);
    int held = 0;
    CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&held, r, 1), 0);
    CU_ASSERT_EQUAL(held, 1);
    CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&held, w, 1), 0);
    CU_ASSERT_EQUAL(held, 1);
    long long t = th_redis_int(&th_srv, "PTTL {rw:wd}:%s:1:rwlock_timeout:1", hilock_client_id(c));
    CU_ASSERT(t > 0 && t <= 2400);
    /* no loss and no "in doubt" report while renewals are answered */
    CU_ASSERT_FALSE(hilock_lock_is_lost(r));
    CU_ASSERT_FALSE(hilock_lock_is_lost(w));
    CU_ASSERT_EQUAL(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 0);
    int deleted = 0;
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, r), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, w), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, w), 0);
    CU_ASSERT_EQUAL(deleted, 0);
    CU_ASSERT(th_wait_for(lost_twice, NULL, 3000));
    CU_ASSERT(hilock_lock_is_lost_tid(r, 1));
    CU_ASSERT(hilock_lock_is_lost_tid(w, 1));
    CU_ASSERT_EQUAL(hilock_lock_release_tid(r, 1), HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(w, 1), HILOCK_ENOTOWNER);
    hilock_rwlock_free(rw);
    hilock_rwlock_free(rw2);
    hilock_client_close(c);
}

/* A plain lock or a string at the name: a clear error, the key untouched. */
static void t_wrong_type(void)
{
    hilock_client *c = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_rwlock *rw = NULL;
    CU_ASSERT_EQUAL(hilock_rwlock_new(&rw, c, ""), HILOCK_EINVAL);
    CU_ASSERT_PTR_NULL(rw);
    CU_ASSERT_EQUAL(hilock_rwlock_new(&rw, NULL, "x"), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_rwlock_new(NULL, c, "x"), HILOCK_EINVAL);
    CU_ASSERT_PTR_NULL(hilock_rwlock_read_lock(NULL));
    hilock_rwlock_free(NULL);

    CU_ASSERT_EQUAL_FATAL(hilock_rwlock_new(&rw, c, "rw:plain"), 0);
    hilock_lock *r = hilock_rwlock_read_lock(rw), *w = hilock_rwlock_write_lock(rw);
    hilock_lock_free(r); /* a side is freed with its read-write lock only */
    hilock_lock *plain = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&plain, c, "rw:plain"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(plain, 1, 0, 60000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, 2, 0, 60000), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(w, 2, 0, 60000), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(r, 2, 1000, 60000), HILOCK_EWRONGTYPE);
    int deleted = 1;
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, w), 0);
    CU_ASSERT_EQUAL(deleted, 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "HLEN rw:plain"), 1);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(plain, 1), 0);

    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "SET rw:str hello") , -1000); /* status reply */
    hilock_rwlock *rs = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_rwlock_new(&rs, c, "rw:str"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(hilock_rwlock_read_lock(rs), 1, 0, 60000),
                    HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(hilock_rwlock_write_lock(rs), 1, 0, 60000),
                    HILOCK_EWRONGTYPE);
    int v = 0;
    CU_ASSERT_EQUAL(hilock_lock_is_locked(&v, hilock_rwlock_write_lock(rs)), HILOCK_EWRONGTYPE);
    char buf[32];
    CU_ASSERT_EQUAL(th_redis_str(&th_srv, buf, sizeof buf, "GET rw:str"), 0);
    CU_ASSERT_STRING_EQUAL(buf, "hello");
    hilock_rwlock_free(rs);
    hilock_lock_free(plain);
    hilock_rwlock_free(rw);
    hilock_client_close(c);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("read-write lock", th_srv_init, th_srv_clean);
    CU_add_test(s, "Redisson layout, readers share, reentrant", t_layout_and_sharing);
    CU_add_test(s, "writer excludes; writer may read; downgrade", t_writer_excludes);
    CU_add_test(s, "waiters woken by the unlock message", t_wake_by_message);
    CU_add_test(s, "watchdog renews both sides; force -> lost", t_watchdog_and_force);
    CU_add_test(s, "wrong key types: clear error, key untouched", t_wrong_type);
    return th_cu_run();
}
