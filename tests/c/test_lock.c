/*
 * Reentrant lock: exact Redis data (Redisson layout), the unlock message,
 * re-entry, NOT_OWNER cases, force unlock, queries, lease expiry, two
 * clients contending, blocking acquire woken by the unlock message, wait
 * deadlines (also while the server hangs), 8 threads x 1000 critical
 * sections on a non-atomic Redis counter, a holder killed with SIGKILL,
 * WRONGTYPE keys, invalid arguments.
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"

static th_redis srv;
static hilock_client *c1, *c2; /* two independent clients (two owners) */
static const char *argv0;

static hilock_client *open_client(const th_redis *r, const hilock_options *o)
{
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, r->url, o, err, sizeof err);
    if (rc != 0)
        printf("\n  open %s: %s (%s)\n", r->url, hilock_strerror(rc), err);
    return c;
}

static hilock_lock *new_lock(hilock_client *c, const char *name)
{
    hilock_lock *l = NULL;
    int rc = hilock_lock_new(&l, c, name);
    CU_ASSERT_EQUAL(rc, 0);
    return l;
}

static void del_key(const char *k)
{
    redisContext *ctx = th_redis_connect(&srv);
    if (ctx) {
        freeReplyObject(redisCommand(ctx, "DEL %s", k));
        redisFree(ctx);
    }
}

static void owner_of(hilock_client *c, uint64_t tid, char *buf)
{
    CU_ASSERT_EQUAL(hilock_client_owner(c, tid, buf, 64), 0);
}

/* A raw subscriber on the lock's channel. */
static redisContext *subscribe(const char *channel)
{
    redisContext *s = th_redis_connect(&srv);
    if (!s)
        return NULL;
    redisReply *r = redisCommand(s, "SUBSCRIBE %s", channel);
    int ok = r && r->type == REDIS_REPLY_ARRAY;
    freeReplyObject(r);
    if (!ok) {
        redisFree(s);
        return NULL;
    }
    return s;
}

/* Next message payload on a subscriber into buf (channel must match);
 * returns 0, or -1 on timeout (2 s) / bad frame. */
static int next_message(redisContext *s, const char *channel, char *buf, size_t len)
{
    void *v = NULL;
    if (redisGetReply(s, &v) != REDIS_OK || !v)
        return -1;
    redisReply *r = v;
    int rc = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        strcmp(r->element[0]->str, "message") == 0 && strcmp(r->element[1]->str, channel) == 0) {
        snprintf(buf, len, "%s", r->element[2]->str);
        rc = 0;
    }
    freeReplyObject(r);
    return rc;
}

static void publish(const char *channel, const char *msg)
{
    redisContext *ctx = th_redis_connect(&srv);
    freeReplyObject(redisCommand(ctx, "PUBLISH %s %s", channel, msg));
    redisFree(ctx);
}

/* ---------------------------------------------------------------- data layout */

static void check_layout(const char *name, const char *channel)
{
    hilock_lock *l = new_lock(c1, name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);

    char owner[64], type[32] = "";
    owner_of(c1, hilock_thread_id(), owner);
    CU_ASSERT_EQUAL(th_redis_str(&srv, type, sizeof type, "TYPE %s", name), 0);
    CU_ASSERT_STRING_EQUAL(type, "hash");
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HLEN %s", name), 1);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET %s %s", name, owner), 1);
    /* the fixed lease (not the watchdog's 30 s, not none); a loose lower
     * bound: under valgrind the holder's new listening threads (it listens
     * on its channel) took the main thread more than 1 s here */
    long long pttl = th_redis_int(&srv, "PTTL %s", name);
    CU_ASSERT(pttl > 5000 && pttl <= 10000);

    int x = -1;
    int64_t v = -5;
    CU_ASSERT_EQUAL(hilock_lock_is_locked(&x, l), 0);
    CU_ASSERT_EQUAL(x, 1);
    CU_ASSERT_EQUAL(hilock_lock_is_held(&x, l), 0);
    CU_ASSERT_EQUAL(x, 1);
    CU_ASSERT_EQUAL(hilock_lock_hold_count(&v, l), 0);
    CU_ASSERT_EQUAL(v, 1);
    CU_ASSERT_EQUAL(hilock_lock_remaining_ms(&v, l), 0);
    CU_ASSERT(v > 5000 && v <= 10000);

    redisContext *sub = subscribe(channel);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sub);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    char msg[64] = "";
    CU_ASSERT_EQUAL(next_message(sub, channel, msg, sizeof msg), 0);
    CU_ASSERT_STRING_EQUAL(msg, "0");
    redisFree(sub);

    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS %s", name), 0);
    CU_ASSERT_EQUAL(hilock_lock_is_locked(&x, l), 0);
    CU_ASSERT_EQUAL(x, 0);
    CU_ASSERT_EQUAL(hilock_lock_is_held(&x, l), 0);
    CU_ASSERT_EQUAL(x, 0);
    CU_ASSERT_EQUAL(hilock_lock_hold_count(&v, l), 0);
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(hilock_lock_remaining_ms(&v, l), 0);
    CU_ASSERT_EQUAL(v, -2);
    hilock_lock_free(l);
}

static void t_layout(void)
{
    check_layout("layout", "redisson_lock__channel:{layout}");
    check_layout("acct{7}", "redisson_lock__channel:acct{7}");
}

static void t_accessors(void)
{
    hilock_lock *l = new_lock(c1, "accessors");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT_STRING_EQUAL(hilock_lock_name(l), "accessors");
    CU_ASSERT_EQUAL(hilock_lock_kind(l), HILOCK_KIND_REENTRANT);
    CU_ASSERT_PTR_EQUAL(hilock_lock_client(l), c1);
    CU_ASSERT_EQUAL(hilock_lock_is_lost(l), 0);
    CU_ASSERT_PTR_NOT_NULL(hilock_lock_errmsg(l));
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS accessors"), 0); /* a handle sends nothing */
    hilock_lock_free(l);
}

/* ---------------------------------------------------------------- re-entry */

static void t_reentry(void)
{
    const char *ch = "redisson_lock__channel:{reentry}";
    hilock_lock *l = new_lock(c1, "reentry");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    char owner[64];
    owner_of(c1, hilock_thread_id(), owner);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 5000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 5000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, -1, 20000), 0); /* re-applies the new lease */
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET reentry %s", owner), 3);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HLEN reentry"), 1);
    CU_ASSERT(th_redis_int(&srv, "PTTL reentry") > 15000);
    int64_t v = 0;
    CU_ASSERT_EQUAL(hilock_lock_hold_count(&v, l), 0);
    CU_ASSERT_EQUAL(v, 3);

    redisContext *sub = subscribe(ch);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sub);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET reentry %s", owner), 2);
    CU_ASSERT(th_redis_int(&srv, "PTTL reentry") > 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET reentry %s", owner), 1);
    /* No "0" was published by the partial releases: the first message the
     * subscriber sees is this marker. */
    publish(ch, "marker");
    char msg[64] = "";
    CU_ASSERT_EQUAL(next_message(sub, ch, msg, sizeof msg), 0);
    CU_ASSERT_STRING_EQUAL(msg, "marker");
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(next_message(sub, ch, msg, sizeof msg), 0);
    CU_ASSERT_STRING_EQUAL(msg, "0");
    redisFree(sub);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS reentry"), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ENOTOWNER);
    hilock_lock_free(l);
}

/* ---------------------------------------------------------------- not owner */

static void t_not_owner(void)
{
    hilock_lock *never = new_lock(c1, "never-locked");
    CU_ASSERT_PTR_NOT_NULL_FATAL(never);
    CU_ASSERT_EQUAL(hilock_lock_release(never), HILOCK_ENOTOWNER);
    CU_ASSERT(strlen(hilock_lock_errmsg(never)) > 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS never-locked"), 0);
    hilock_lock_free(never);

    hilock_lock *a = new_lock(c1, "owned");
    hilock_lock *b = new_lock(c2, "owned");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    char owner[64];
    owner_of(c1, hilock_thread_id(), owner);
    CU_ASSERT_EQUAL(hilock_lock_acquire(a, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(b), HILOCK_ENOTOWNER);          /* other client */
    CU_ASSERT_EQUAL(hilock_lock_release_tid(a, hilock_thread_id() + 1), /* other thread */
                    HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET owned %s", owner), 1);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HLEN owned"), 1);
    CU_ASSERT(th_redis_int(&srv, "PTTL owned") > 5000); /* untouched (loose: valgrind) */
    int x = -1;
    CU_ASSERT_EQUAL(hilock_lock_is_held(&x, b), 0);
    CU_ASSERT_EQUAL(x, 0);
    CU_ASSERT_EQUAL(hilock_lock_is_locked(&x, b), 0);
    CU_ASSERT_EQUAL(x, 1);
    int64_t v = -1;
    CU_ASSERT_EQUAL(hilock_lock_hold_count(&v, b), 0);
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(hilock_lock_release(a), 0);
    hilock_lock_free(a);
    hilock_lock_free(b);
}

static void t_explicit_tid(void)
{
    hilock_lock *l = new_lock(c1, "tid");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    char owner[64];
    owner_of(c1, 77, owner);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 77, 0, 10000), 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET tid %s", owner), 1);
    int x = -1;
    int64_t v = -1;
    CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&x, l, 77), 0);
    CU_ASSERT_EQUAL(x, 1);
    CU_ASSERT_EQUAL(hilock_lock_is_held(&x, l), 0);
    CU_ASSERT_EQUAL(x, 0);
    CU_ASSERT_EQUAL(hilock_lock_hold_count_tid(&v, l, 77), 0);
    CU_ASSERT_EQUAL(v, 1);
    /* same client, another thread id: excluded */
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 78, 0, 10000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ENOTOWNER);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 77, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_hold_count_tid(&v, l, 77), 0);
    CU_ASSERT_EQUAL(v, 2);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 77), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 77), 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS tid"), 0);
    hilock_lock_free(l);
}

/* ---------------------------------------------------------------- force */

static void t_force(void)
{
    const char *ch = "redisson_lock__channel:{forced}";
    hilock_lock *a = new_lock(c1, "forced");
    hilock_lock *b = new_lock(c2, "forced");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(hilock_lock_acquire(a, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(a, 0, 10000), 0);
    redisContext *sub = subscribe(ch);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sub);
    int deleted = -1;
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, b), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    char msg[64] = "";
    CU_ASSERT_EQUAL(next_message(sub, ch, msg, sizeof msg), 0);
    CU_ASSERT_STRING_EQUAL(msg, "0");
    redisFree(sub);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS forced"), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(a), HILOCK_ENOTOWNER);
    deleted = -1;
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, b), 0);
    CU_ASSERT_EQUAL(deleted, 0);
    hilock_lock_free(a);
    hilock_lock_free(b);
}

/* ---------------------------------------------------------------- lease */

static int key_gone(void *name) { return th_redis_int(&srv, "EXISTS %s", (char *)name) == 0; }

static void t_lease_expiry(void)
{
    hilock_lock *l = new_lock(c1, "short-lease");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 150), 0);
    CU_ASSERT(th_redis_int(&srv, "PTTL short-lease") <= 150);
    CU_ASSERT(th_wait_for(key_gone, "short-lease", 2000));
    CU_ASSERT(th_now_ms() - t0 >= 100);
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ENOTOWNER);
    int x = -1;
    CU_ASSERT_EQUAL(hilock_lock_is_held(&x, l), 0);
    CU_ASSERT_EQUAL(x, 0);
    /* a fixed lease is never renewed */
    CU_ASSERT_EQUAL(hilock_lock_is_lost(l), 0);
    hilock_lock_free(l);
}

/* ---------------------------------------------------------------- contention */

static void t_two_clients(void)
{
    hilock_lock *a = new_lock(c1, "contended");
    hilock_lock *b = new_lock(c2, "contended");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    char owner[64];
    owner_of(c1, hilock_thread_id(), owner);
    CU_ASSERT_EQUAL(hilock_lock_acquire(a, 0, 30000), 0);
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_acquire(b, 0, 30000), HILOCK_ETIMEDOUT);
    CU_ASSERT(th_now_ms() - t0 < 200);
    t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_acquire(b, 300, 30000), HILOCK_ETIMEDOUT);
    int64_t dt = th_now_ms() - t0;
    CU_ASSERT(dt >= 290 && dt < 300 + 600);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET contended %s", owner), 1);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HLEN contended"), 1);
    CU_ASSERT_EQUAL(hilock_lock_release(a), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(b, 0, 30000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(a, 0, 30000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hilock_lock_release(b), 0);
    hilock_lock_free(a);
    hilock_lock_free(b);
}

typedef struct delayed {
    hilock_lock *l;
    int64_t delay_ms;
    int rc;
} delayed;

static void *release_later(void *p)
{
    delayed *d = p;
    th_sleep_ms(d->delay_ms);
    d->rc = hilock_lock_release_tid(d->l, 1);
    return NULL;
}

static void t_woken_by_unlock(void)
{
    hilock_lock *a = new_lock(c1, "wakeup");
    hilock_lock *b = new_lock(c2, "wakeup");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(a, 1, 0, 30000), 0);
    delayed d = {a, 200, 99};
    pthread_t th;
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, release_later, &d), 0);
    int rc = hilock_lock_acquire(b, 10000, 5000);
    int64_t dt = th_now_ms() - t0;
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(d.rc, 0);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(dt >= 150);
    if (dt >= 1000)
        printf("\n  waiter woke after %lld ms (holder released at 200 ms)\n", (long long)dt);
    CU_ASSERT(dt < 1000);
    char owner[64];
    owner_of(c2, hilock_thread_id(), owner);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HGET wakeup %s", owner), 1);
    CU_ASSERT_EQUAL(hilock_lock_release(b), 0);
    hilock_lock_free(a);
    hilock_lock_free(b);
}

/* Several waiters, one per thread, on one shared handle of one client:
 * each unlock hands the lock on; nobody waits for a lease to end. */
typedef struct chain {
    hilock_lock *l;
    atomic_int inside;
    atomic_int overlap;
    atomic_int ok;
} chain;

static void *chain_waiter(void *p)
{
    chain *c = p;
    if (hilock_lock_acquire(c->l, 8000, 30000) != 0)
        return NULL;
    if (atomic_fetch_add(&c->inside, 1) != 0)
        atomic_fetch_add(&c->overlap, 1);
    th_sleep_ms(20);
    atomic_fetch_sub(&c->inside, 1);
    if (hilock_lock_release(c->l) == 0)
        atomic_fetch_add(&c->ok, 1);
    return NULL;
}

static void t_waiters_chain(void)
{
    hilock_lock *h = new_lock(c1, "chain");
    hilock_lock *w = new_lock(c2, "chain");
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL(hilock_lock_acquire(h, 0, 30000), 0);
    chain ch = {w, 0, 0, 0};
    enum { NW = 4 };
    pthread_t th[NW];
    for (int i = 0; i < NW; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, chain_waiter, &ch), 0);
    th_sleep_ms(100); /* let them queue up; the result does not depend on it */
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_release(h), 0);
    for (int i = 0; i < NW; i++)
        pthread_join(th[i], NULL);
    int64_t dt = th_now_ms() - t0;
    CU_ASSERT_EQUAL(atomic_load(&ch.ok), NW);
    CU_ASSERT_EQUAL(atomic_load(&ch.overlap), 0);
    if (dt >= 3000)
        printf("\n  %d hand-offs took %lld ms\n", NW, (long long)dt);
    CU_ASSERT(dt < 3000);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS chain"), 0);
    hilock_lock_free(h);
    hilock_lock_free(w);
}

/* Connections with a (s)subscription, and subscribers of one channel. */
static int subscribed_connections(void)
{
    redisContext *ctx = th_redis_connect(&srv);
    redisReply *r = redisCommand(ctx, "CLIENT LIST");
    int n = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        for (char *line = r->str; line && *line;) {
            char *end = strchr(line, '\n');
            const char *sub = strstr(line, " sub="), *ssub = strstr(line, " ssub=");
            if ((sub && (!end || sub < end) && atoi(sub + 5) > 0) ||
                (ssub && (!end || ssub < end) && atoi(ssub + 6) > 0))
                n++;
            line = end ? end + 1 : NULL;
        }
    }
    freeReplyObject(r);
    redisFree(ctx);
    return n;
}

typedef struct sub_arg {
    hilock_lock *l;
    atomic_int *waiting;
    int rc;
} sub_arg;

static void *sub_waiter(void *p)
{
    sub_arg *a = p;
    atomic_fetch_add(a->waiting, 1);
    a->rc = hilock_lock_acquire(a->l, 8000, 30000);
    if (a->rc == 0)
        a->rc = hilock_lock_release(a->l);
    return NULL;
}

/* the holders' client and the waiters' client each subscribed once */
static int both_subscribed(void *p)
{
    (void)p;
    return th_redis_numsub(&srv, "redisson_lock__channel:{subA}") == 2 &&
           th_redis_numsub(&srv, "redisson_lock__channel:{subB}") == 2;
}

static int holders_listen(void *p)
{
    (void)p;
    return th_redis_numsub(&srv, "redisson_lock__channel:{subA}") == 1 &&
           th_redis_numsub(&srv, "redisson_lock__channel:{subB}") == 1;
}
static int none_subscribed(void *p)
{
    (void)p;
    return th_redis_numsub(&srv, "redisson_lock__channel:{subA}") == 0 &&
           th_redis_numsub(&srv, "redisson_lock__channel:{subB}") == 0;
}

static void t_shared_subscription(void)
{
    /* 5 waiters of one client on two locks: one pub/sub connection, one
     * subscription per channel, dropped after the last waiter leaves. */
    hilock_client *w = open_client(&srv, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    hilock_lock *ha = new_lock(c1, "subA"), *hb = new_lock(c1, "subB");
    hilock_lock *wa = new_lock(w, "subA"), *wb = new_lock(w, "subB");
    CU_ASSERT_EQUAL(hilock_lock_acquire(ha, 0, 30000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(hb, 0, 30000), 0);
    /* the holders (fixed leases) listen on their channels from c1 */
    CU_ASSERT(th_wait_for(holders_listen, NULL, 2000));
    int base = subscribed_connections();
    atomic_int waiting = 0;
    sub_arg args[5];
    pthread_t th[5];
    for (int i = 0; i < 5; i++) {
        args[i] = (sub_arg){i < 3 ? wa : wb, &waiting, 99};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, sub_waiter, &args[i]), 0);
    }
    CU_ASSERT(th_wait_for(both_subscribed, NULL, 2000));
    th_sleep_ms(50); /* all five are waiting by now; counts must not grow */
    CU_ASSERT_EQUAL(th_redis_numsub(&srv, "redisson_lock__channel:{subA}"), 2);
    CU_ASSERT_EQUAL(th_redis_numsub(&srv, "redisson_lock__channel:{subB}"), 2);
    CU_ASSERT_EQUAL(subscribed_connections(), base + 1);
    CU_ASSERT_EQUAL(hilock_lock_release(ha), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(hb), 0);
    for (int i = 0; i < 5; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(args[i].rc, 0);
    }
    CU_ASSERT(th_wait_for(none_subscribed, NULL, 2000));
    hilock_lock_free(ha);
    hilock_lock_free(hb);
    hilock_lock_free(wa);
    hilock_lock_free(wb);
    hilock_client_close(w);
}

static int all_waiting(void *p)
{
    (void)p;
    /* the holder's client, the waiters' */
    return th_redis_numsub(&srv, "redisson_lock__channel:{herd}") == 2;
}

static void t_one_unlock_wakes_one(void)
{
    /* NW waiters on one client, each takes the lock once. With one waiter
     * woken per unlock, each makes about 3 attempts (first try, retry after
     * subscribing, after its wake-up); waking all of them at every unlock
     * would add about NW*NW/2 attempts. */
    int nw = th_valgrind() ? 4 : 8;
    hilock_client *w = open_client(&srv, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    hilock_lock *h = new_lock(c1, "herd"), *wl = new_lock(w, "herd");
    CU_ASSERT_EQUAL(hilock_lock_acquire(h, 0, 30000), 0);
    atomic_int waiting = 0;
    sub_arg args[8];
    pthread_t th[8];
    long long before = th_script_calls(&srv);
    for (int i = 0; i < nw; i++) {
        args[i] = (sub_arg){wl, &waiting, 99};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, sub_waiter, &args[i]), 0);
    }
    CU_ASSERT(th_wait_for(all_waiting, NULL, 2000));
    th_sleep_ms(100); /* let every thread reach its wait */
    CU_ASSERT_EQUAL(hilock_lock_release(h), 0);
    for (int i = 0; i < nw; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(args[i].rc, 0);
    }
    long long calls = th_script_calls(&srv) - before;
    long long acquires = calls - (nw + 1); /* minus the unlocks */
    printf("\n  %d waiters: %lld acquire attempts\n", nw, acquires);
    CU_ASSERT(acquires >= nw);
    CU_ASSERT(acquires <= 3 * nw + nw / 2);
    hilock_lock_free(h);
    hilock_lock_free(wl);
    hilock_client_close(w);
}

static long long cmdstat(const char *cmd)
{
    redisContext *ctx = th_redis_connect(&srv);
    redisReply *r = redisCommand(ctx, "INFO commandstats");
    long long calls = 0;
    char key[64];
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, key);
        if (p)
            calls = atoll(p + strlen(key));
    }
    freeReplyObject(r);
    redisFree(ctx);
    return calls;
}

static void t_evalsha_fallback(void)
{
    hilock_lock *l = new_lock(c1, "noscript");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    redisContext *ctx = th_redis_connect(&srv);
    freeReplyObject(redisCommand(ctx, "SCRIPT FLUSH"));
    redisFree(ctx);
    long long eval0 = cmdstat("eval"), sha0 = cmdstat("evalsha");
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0); /* NOSCRIPT -> EVAL */
    long long eval1 = cmdstat("eval"), sha1 = cmdstat("evalsha");
    CU_ASSERT_EQUAL(eval1 - eval0, 1);
    CU_ASSERT_EQUAL(sha1 - sha0, 1);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0); /* cached now: EVALSHA only */
    CU_ASSERT_EQUAL(cmdstat("eval"), eval1);
    CU_ASSERT_EQUAL(cmdstat("evalsha"), sha1 + 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS noscript"), 0);
    hilock_lock_free(l);
}

typedef struct pool_arg {
    hilock_lock *l;
    int iters;
    int errors;
} pool_arg;

static void *pool_thread(void *p)
{
    pool_arg *a = p;
    for (int i = 0; i < a->iters; i++) {
        int x = -1;
        if (hilock_lock_acquire(a->l, 0, 10000) != 0 || hilock_lock_is_held(&x, a->l) != 0 ||
            x != 1 || hilock_lock_release(a->l) != 0)
            a->errors++;
    }
    return NULL;
}

static long long connected_clients(redisContext *ctx)
{
    redisReply *r = redisCommand(ctx, "INFO clients");
    long long n = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "connected_clients:");
        if (p)
            n = atoll(p + strlen("connected_clients:"));
    }
    freeReplyObject(r);
    return n;
}

static void t_pool_bounded(void)
{
    /* 6 threads share a client with a pool of 2: all calls succeed and the
     * client never opens more than 2 connections for them (and one pub/sub
     * connection, where its holds listen on their locks' channels). */
    redisContext *mon = th_redis_connect(&srv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mon);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.pool_size = 2;
    long long base = connected_clients(mon);
    hilock_client *c = open_client(&srv, &o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    enum { NT = 6 };
    hilock_lock *ls[NT];
    pool_arg args[NT];
    pthread_t th[NT];
    for (int i = 0; i < NT; i++) {
        char name[32];
        snprintf(name, sizeof name, "pool-%d", i);
        ls[i] = new_lock(c, name);
        args[i] = (pool_arg){ls[i], th_valgrind() ? 30 : 200, 0};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, pool_thread, &args[i]), 0);
    }
    long long peak = 0;
    for (int i = 0; i < 50; i++) {
        long long n = connected_clients(mon) - base;
        if (n > peak)
            peak = n;
        th_sleep_ms(2);
    }
    int errors = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        errors += args[i].errors;
        hilock_lock_free(ls[i]);
    }
    CU_ASSERT_EQUAL(errors, 0);
    CU_ASSERT(peak >= 1);
    CU_ASSERT(peak <= 3); /* 2 pooled, and the pub/sub connection its holds listen on */
    hilock_client_close(c);
    redisFree(mon);
}

static int one_waiting_on_garbage(void *p)
{
    (void)p;
    return th_redis_numsub(&srv, "redisson_lock__channel:{garbage}") == 1;
}

static long long garbage_extra_attempts = -1;

static void *garbage_publisher(void *arg)
{
    const char *ch = arg;
    /* wait until the waiter is subscribed, let it settle, then measure */
    th_wait_for(one_waiting_on_garbage, NULL, 2000);
    th_sleep_ms(50);
    long long before = th_script_calls(&srv);
    const char *junk[] = {"hello", "", "2", "-1", "0x", "1.5", "10", "unlocked"};
    redisContext *ctx = th_redis_connect(&srv);
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
        freeReplyObject(redisCommand(ctx, "PUBLISH %s %b", ch, junk[i], strlen(junk[i])));
    redisFree(ctx);
    th_sleep_ms(100);
    garbage_extra_attempts = th_script_calls(&srv) - before;
    return NULL;
}

static void t_garbage_messages_ignored(void)
{
    /* Anything but "0"/"1" on the channel neither wakes the waiter (no extra
     * attempt) nor breaks the listener: the real unlock still wakes it. */
    const char *ch = "redisson_lock__channel:{garbage}";
    hilock_lock *h = new_lock(c1, "garbage"), *w = new_lock(c2, "garbage");
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(h, 1, 0, 30000), 0);
    delayed d = {h, 400, 99};
    pthread_t th;
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, release_later, &d), 0);
    pthread_t pub;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&pub, NULL, garbage_publisher, (void *)ch), 0);
    int rc = hilock_lock_acquire(w, 5000, 5000);
    int64_t dt = th_now_ms() - t0;
    pthread_join(pub, NULL);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(d.rc, 0);
    CU_ASSERT(dt >= 350 && dt < 1500);
    CU_ASSERT_EQUAL(garbage_extra_attempts, 0);
    CU_ASSERT_EQUAL(hilock_lock_release(w), 0);
    hilock_lock_free(h);
    hilock_lock_free(w);
}

/* ---------------------------------------------------------------- counter */

typedef struct counter_arg {
    hilock_lock *l;
    int iters;
    int64_t lease;
    int errors;
    atomic_int *inside;
    atomic_int *overlap;
} counter_arg;

static void *counter_thread(void *p)
{
    counter_arg *a = p;
    redisContext *ctx = th_redis_connect(&srv);
    if (!ctx) {
        a->errors = a->iters;
        return NULL;
    }
    for (int i = 0; i < a->iters; i++) {
        int rc = hilock_lock_acquire(a->l, HILOCK_WAIT_FOREVER, a->lease);
        if (rc != 0) {
            a->errors++;
            continue;
        }
        if (atomic_fetch_add(a->inside, 1) != 0)
            atomic_fetch_add(a->overlap, 1);
        redisReply *r = redisCommand(ctx, "GET counter");
        long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        freeReplyObject(r);
        r = redisCommand(ctx, "SET counter %lld", v + 1);
        freeReplyObject(r);
        atomic_fetch_sub(a->inside, 1);
        if (hilock_lock_release(a->l) != 0)
            a->errors++;
    }
    redisFree(ctx);
    return NULL;
}

static void t_counter(void)
{
    int nthreads = th_valgrind() ? 4 : 8;
    int iters = th_valgrind() ? 100 : 1000;
    del_key("counter");
    hilock_lock *la = new_lock(c1, "counter-lock");
    hilock_lock *lb = new_lock(c2, "counter-lock");
    CU_ASSERT_PTR_NOT_NULL_FATAL(la);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lb);
    atomic_int inside = 0, overlap = 0;
    counter_arg args[8];
    pthread_t th[8];
    int64_t t0 = th_now_ms();
    for (int i = 0; i < nthreads; i++) {
        /* threads share a handle per client; half use the watchdog */
        args[i] = (counter_arg){i % 2 ? la : lb, iters, (i / 2) % 2 ? 10000 : 0, 0,
                                &inside, &overlap};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, counter_thread, &args[i]), 0);
    }
    int errors = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        errors += args[i].errors;
    }
    int64_t dt = th_now_ms() - t0;
    printf("\n  %d threads x %d critical sections in %lld ms\n", nthreads, iters, (long long)dt);
    CU_ASSERT_EQUAL(errors, 0);
    CU_ASSERT_EQUAL(atomic_load(&overlap), 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "GET counter"), (long long)nthreads * iters);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS counter-lock"), 0);
    hilock_lock_free(la);
    hilock_lock_free(lb);
}

/* ---------------------------------------------------------------- killed holder */

/* Child mode: take the lock with a short lease, then die by SIGKILL. */
static int child_hold(const char *url, const char *name, long long lease)
{
    hilock_client *c = NULL;
    hilock_lock *l = NULL;
    if (hilock_client_open(&c, url, NULL, NULL, 0) != 0 || hilock_lock_new(&l, c, name) != 0 ||
        hilock_lock_acquire(l, 0, lease) != 0)
        return 3;
    raise(SIGKILL);
    return 4;
}

static void t_killed_holder(void)
{
    const int64_t lease = 700;
    char leasebuf[32];
    snprintf(leasebuf, sizeof leasebuf, "%lld", (long long)lease);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        execl(argv0, argv0, "--child-hold", srv.url, "killed", leasebuf, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT_FATAL(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    /* The dead process's lock is still there, owned by someone else. */
    CU_ASSERT_EQUAL(th_redis_int(&srv, "HLEN killed"), 1);
    hilock_lock *l = new_lock(c1, "killed");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 5000), HILOCK_ETIMEDOUT);
    long long left = th_redis_int(&srv, "PTTL killed");
    CU_ASSERT(left > 0 && left <= lease);
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 5000, 5000), 0);
    int64_t dt = th_now_ms() - t0;
    CU_ASSERT(dt >= left - 50);
    if (dt > left + 500)
        printf("\n  acquired %lld ms after start, lease had %lld ms left\n", (long long)dt, left);
    CU_ASSERT(dt <= left + 500);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
}

/* ---------------------------------------------------------------- errors */

static void t_wrongtype(void)
{
    redisContext *ctx = th_redis_connect(&srv);
    freeReplyObject(redisCommand(ctx, "SET stringkey precious"));
    redisFree(ctx);
    hilock_lock *l = new_lock(c1, "stringkey");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), HILOCK_EWRONGTYPE);
    CU_ASSERT(strlen(hilock_lock_errmsg(l)) > 0);
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 2000, 10000), HILOCK_EWRONGTYPE); /* no waiting */
    CU_ASSERT(th_now_ms() - t0 < 500);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 0), HILOCK_EWRONGTYPE);
    int deleted = -1;
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, l), HILOCK_EWRONGTYPE);
    CU_ASSERT(hilock_lock_release(l) < 0);
    int x;
    int64_t v;
    CU_ASSERT_EQUAL(hilock_lock_is_held(&x, l), HILOCK_EWRONGTYPE);
    CU_ASSERT_EQUAL(hilock_lock_hold_count(&v, l), HILOCK_EWRONGTYPE);
    char val[64] = "";
    CU_ASSERT_EQUAL(th_redis_str(&srv, val, sizeof val, "GET stringkey"), 0);
    CU_ASSERT_STRING_EQUAL(val, "precious");
    CU_ASSERT_EQUAL(th_redis_int(&srv, "PTTL stringkey"), -1);
    hilock_lock_free(l);
    del_key("stringkey");
}

static void t_bad_names(void)
{
    hilock_lock *l = (hilock_lock *)&srv;
    CU_ASSERT_EQUAL(hilock_lock_new(&l, c1, NULL), HILOCK_EINVAL);
    CU_ASSERT_PTR_NULL(l);
    l = (hilock_lock *)&srv;
    CU_ASSERT_EQUAL(hilock_lock_new(&l, c1, ""), HILOCK_EINVAL);
    CU_ASSERT_PTR_NULL(l);
    CU_ASSERT_EQUAL(hilock_fair_lock_new(&l, c1, ""), HILOCK_EINVAL);
    char *big = malloc(4098);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    memset(big, 'n', 4097);
    big[4097] = 0;
    CU_ASSERT_EQUAL(hilock_lock_new(&l, c1, big), HILOCK_EINVAL);
    big[4096] = 0;
    CU_ASSERT_EQUAL(hilock_lock_new(&l, c1, big), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 5000), 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS %s", big), 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    free(big);
}

static void t_bad_times(void)
{
    hilock_lock *l = new_lock(c1, "times");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    const int64_t bad_wait[] = {-2, -1000, INT64_MIN, HILOCK_MAX_TIME_MS + 1, INT64_MAX};
    const int64_t bad_lease[] = {-2, -1000, INT64_MIN, HILOCK_MAX_TIME_MS + 1, INT64_MAX};
    for (size_t i = 0; i < sizeof bad_wait / sizeof bad_wait[0]; i++) {
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, bad_wait[i], 1000), HILOCK_EINVAL);
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 5, bad_wait[i], 1000), HILOCK_EINVAL);
    }
    for (size_t i = 0; i < sizeof bad_lease / sizeof bad_lease[0]; i++) {
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, bad_lease[i]), HILOCK_EINVAL);
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 5, 0, bad_lease[i]), HILOCK_EINVAL);
    }
    CU_ASSERT(strlen(hilock_lock_errmsg(l)) > 0);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS times"), 0); /* nothing was sent */

    /* The limits themselves are valid. */
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, HILOCK_MAX_TIME_MS, HILOCK_MAX_TIME_MS), 0);
    CU_ASSERT(th_redis_int(&srv, "PTTL times") > HILOCK_MAX_TIME_MS - 60000);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, HILOCK_WAIT_FOREVER, 1), 0); /* 1 ms lease */
    CU_ASSERT(th_wait_for(key_gone, "times", 1000));
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, -1, -1), 0); /* lease -1: watchdog */
    long long pttl = th_redis_int(&srv, "PTTL times");
    CU_ASSERT(pttl > 0 && pttl <= 30000);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    del_key("times");
}

/* ---------------------------------------------------------------- deadlines */

typedef struct timed {
    hilock_lock *l;
    int64_t wait;
    int rc;
    int64_t took;
} timed;

static void *timed_acquire(void *p)
{
    timed *t = p;
    int64_t t0 = th_now_ms();
    t->rc = hilock_lock_acquire(t->l, t->wait, 5000);
    t->took = th_now_ms() - t0;
    return NULL;
}

static void t_deadline_while_server_hangs(void)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = 200;
    o.connect_timeout_ms = 200;
    hilock_client *a = open_client(&h, &o), *b = open_client(&h, &o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    hilock_lock *la = new_lock(a, "hang"), *lb = new_lock(b, "hang");
    CU_ASSERT_EQUAL(hilock_lock_acquire(la, 0, 30000), 0);
    timed t = {lb, 800, 99, 0};
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, timed_acquire, &t), 0);
    th_sleep_ms(150); /* the waiter is subscribed and sleeping by now */
    th_redis_pause(&h);
    pthread_join(th, NULL);
    th_redis_resume(&h);
    CU_ASSERT(t.rc == HILOCK_ETIMEDOUT || t.rc == HILOCK_ECONN);
    if (t.took >= 800 + 200 + 400)
        printf("\n  wait of 800 ms returned after %lld ms while the server hung\n",
               (long long)t.took);
    CU_ASSERT(t.took < 800 + 200 + 400);
    /* also a wait that starts while the server hangs */
    th_redis_pause(&h);
    t.wait = 500;
    t.rc = 99;
    timed_acquire(&t);
    th_redis_resume(&h);
    CU_ASSERT(t.rc == HILOCK_ETIMEDOUT || t.rc == HILOCK_ECONN);
    CU_ASSERT(t.took < 500 + 200 + 400);
    CU_ASSERT_EQUAL(hilock_lock_release(la), 0);
    hilock_lock_free(la);
    hilock_lock_free(lb);
    hilock_client_close(a);
    hilock_client_close(b);
    th_redis_stop(&h);
}

/* One handle, several threads: each thread has its own hold. */
static void *other_thread_try(void *p)
{
    hilock_lock *l = p;
    int x = -1;
    int rc1 = hilock_lock_acquire(l, 0, 5000);
    int rc2 = hilock_lock_is_held(&x, l);
    int rc3 = hilock_lock_release(l);
    return (void *)(intptr_t)(rc1 == HILOCK_ETIMEDOUT && rc2 == 0 && x == 0 &&
                              rc3 == HILOCK_ENOTOWNER);
}

static void t_handle_shared_by_threads(void)
{
    hilock_lock *l = new_lock(c1, "shared-handle");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    pthread_t th;
    void *ok = NULL;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, other_thread_try, l), 0);
    pthread_join(th, &ok);
    CU_ASSERT_EQUAL((intptr_t)ok, 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
}

/* ---------------------------------------------------------------- main */

static int init(void)
{
    if (th_redis_start(&srv, NULL) != 0)
        return -1;
    c1 = open_client(&srv, NULL);
    c2 = open_client(&srv, NULL);
    return c1 && c2 ? 0 : -1;
}

static int cleanup(void)
{
    hilock_client_close(c1);
    hilock_client_close(c2);
    th_redis_stop(&srv);
    return 0;
}

/* extend: PTTL + add, atomically; owner-guarded; refuses bad input */
static void t_extend(void)
{
    hilock_lock *l = NULL, *other = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c1, "extend") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&other, c2, "extend") == 0);
    CU_ASSERT(hilock_lock_extend_tid(l, 1, 1000) == HILOCK_ENOTOWNER); /* not held */
    CU_ASSERT_FATAL(hilock_lock_acquire_tid(l, 1, 0, 2000) == 0);
    CU_ASSERT(hilock_lock_extend_tid(l, 1, 60000) == 0);
    long long pttl = th_redis_int(&srv, "PTTL %s", "extend");
    CU_ASSERT(pttl > 60000 && pttl <= 62000);
    CU_ASSERT(hilock_lock_extend_tid(l, 2, 1000) == HILOCK_ENOTOWNER);     /* another thread */
    CU_ASSERT(hilock_lock_extend_tid(other, 1, 1000) == HILOCK_ENOTOWNER); /* another client */
    CU_ASSERT(hilock_lock_extend_tid(l, 1, 0) == HILOCK_EINVAL);
    CU_ASSERT(hilock_lock_extend_tid(l, 1, -5) == HILOCK_EINVAL);
    CU_ASSERT(hilock_lock_extend_tid(l, 1, HILOCK_MAX_TIME_MS + 1) == HILOCK_EINVAL);
    CU_ASSERT(hilock_lock_extend(NULL, 1000) == HILOCK_EINVAL);
    CU_ASSERT(th_redis_int(&srv, "PTTL %s", "extend") <= pttl); /* failures changed nothing */
    CU_ASSERT(th_redis_int(&srv, "PERSIST %s", "extend") == 1);  /* a key without expiry */
    CU_ASSERT(hilock_lock_extend_tid(l, 1, 1000) == HILOCK_EINVAL);
    CU_ASSERT(hilock_lock_release_tid(l, 1) == 0);
    CU_ASSERT(th_redis_int(&srv, "EXISTS %s", "extend") == 0);
    hilock_lock_free(l);
    hilock_lock_free(other);
}

/* Every pooled connection of c (POOL of them) opened and back idle: a
 * multi-lock over POOL locks of c sends one request per member at once,
 * each on its own connection (sent again when fewer came back idle: another
 * thread of the client had one checked out meanwhile). */
enum { POOL = 4 };
static void open_whole_pool(hilock_client *c)
{
    hilock_lock *ls[POOL];
    for (int i = 0; i < POOL; i++) {
        char name[32];
        snprintf(name, sizeof name, "pool-dead-m%d", i);
        ls[i] = new_lock(c, name);
    }
    hilock_multilock *m = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_multilock_new(&m, ls, POOL), 0);
    for (int tries = 0; tries < 100 && th_pool_idle(c) < POOL; tries++) {
        CU_ASSERT_EQUAL(hilock_multilock_acquire(m, 0, 10000), 0);
        CU_ASSERT_EQUAL(hilock_multilock_release(m), 0);
    }
    hilock_multilock_free(m);
    for (int i = 0; i < POOL; i++)
        hilock_lock_free(ls[i]);
    CU_ASSERT_EQUAL_FATAL(th_pool_idle(c), POOL);
}

/* The pool filled, then every idle connection of it dropped by the server
 * (CLIENT KILL from a side connection), or the server restarted: the next
 * call drops each dead one before writing on it and opens a new one. */
static void kill_pool(th_redis *r, hilock_client *c, int restart)
{
    open_whole_pool(c);
    if (restart) {
        CU_ASSERT_EQUAL_FATAL(th_redis_restart(r), 0);
    } else {
        CU_ASSERT(th_redis_int(r, "CLIENT KILL TYPE normal") >= POOL);
    }
}

static void t_pool_dead_idle(void)
{
    th_redis r;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&r, NULL), 0);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.pool_size = POOL;
    hilock_client *c = open_client(&r, &o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = new_lock(c, "pool-dead");
    hilock_semaphore *s = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_semaphore_new(&s, c, "pool-dead-sem"), 0);
    CU_ASSERT_EQUAL(hilock_semaphore_try_set_permits(NULL, s, 1), 0);
    for (int restart = 0; restart < 2; restart++) {
        const char *how = restart ? "server restarted" : "CLIENT KILL";
        int rc;
        kill_pool(&r, c, restart);
        if ((rc = hilock_lock_acquire(l, 0, 10000)) != 0)
            printf("\n  %s: lock acquire: %s\n", how, hilock_lock_errmsg(l));
        CU_ASSERT_EQUAL(rc, 0);
        if (!restart) { /* (a restart forgets the hold) */
            kill_pool(&r, c, restart);
            if ((rc = hilock_lock_release(l)) != 0)
                printf("\n  %s: lock release: %s\n", how, hilock_lock_errmsg(l));
            CU_ASSERT_EQUAL(rc, 0);
        }
        kill_pool(&r, c, restart);
        if (restart) { /* (and the permits) */
            CU_ASSERT_EQUAL(hilock_semaphore_try_set_permits(NULL, s, 1), 0);
        }
        if ((rc = hilock_semaphore_acquire(s, 1, 0)) != 0)
            printf("\n  %s: semaphore acquire: %s\n", how, hilock_semaphore_errmsg(s));
        CU_ASSERT_EQUAL(rc, 0);
        kill_pool(&r, c, restart);
        if ((rc = hilock_semaphore_release(s, 1)) != 0)
            printf("\n  %s: semaphore release: %s\n", how, hilock_semaphore_errmsg(s));
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_EQUAL(th_redis_int(&r, "GET pool-dead-sem"), 1);
        CU_ASSERT_EQUAL(th_redis_int(&r, "EXISTS pool-dead"), 0);
    }
    hilock_semaphore_free(s);
    hilock_lock_free(l);
    hilock_client_close(c);
    th_redis_stop(&r);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--child-hold") == 0)
        return child_hold(argv[2], argv[3], atoll(argv[4]));
    argv0 = argv[0];
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("reentrant lock", init, cleanup);
    CU_add_test(s, "Redisson data layout and unlock message", t_layout);
    CU_add_test(s, "accessors", t_accessors);
    CU_add_test(s, "extend adds to a fixed lease", t_extend);
    CU_add_test(s, "re-entry counts and messages", t_reentry);
    CU_add_test(s, "not owner", t_not_owner);
    CU_add_test(s, "explicit thread ids", t_explicit_tid);
    CU_add_test(s, "force unlock", t_force);
    CU_add_test(s, "lease expiry -> NOT_OWNER", t_lease_expiry);
    CU_add_test(s, "two clients contending", t_two_clients);
    CU_add_test(s, "blocking acquire woken by unlock", t_woken_by_unlock);
    CU_add_test(s, "chain of waiters", t_waiters_chain);
    CU_add_test(s, "one handle, several threads", t_handle_shared_by_threads);
    CU_add_test(s, "one shared, ref-counted subscription", t_shared_subscription);
    CU_add_test(s, "EVALSHA, EVAL after NOSCRIPT", t_evalsha_fallback);
    CU_add_test(s, "garbage pub/sub payloads ignored", t_garbage_messages_ignored);
    CU_add_test(s, "pool size bounds connections", t_pool_bounded);
    CU_add_test(s, "any number of dead idle pooled connections", t_pool_dead_idle);
    CU_add_test(s, "one unlock wakes one waiter", t_one_unlock_wakes_one);
    CU_add_test(s, "threads x critical sections: exact counter", t_counter);
    CU_add_test(s, "holder killed by SIGKILL", t_killed_holder);
    CU_add_test(s, "WRONGTYPE key untouched", t_wrongtype);
    CU_add_test(s, "NULL/empty/long names", t_bad_names);
    CU_add_test(s, "invalid and limit times", t_bad_times);
    CU_add_test(s, "wait deadline while the server hangs", t_deadline_while_server_hangs);
    return th_cu_run();
}
