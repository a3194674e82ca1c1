/*
 * Redis Cluster: 3 masters + 3 replicas created by the harness with
 * redis-cli --cluster create, on loopback ports.
 */
#include <CUnit/Basic.h>
#include <stdarg.h>
#include <unistd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hilock.h"
#include "internal.h" /* the node table */

#include "async_helpers.h"

#define NNODES 6
static th_redis node[NNODES];
static char url[512];

static redisReply *node_cmd(int i, const char *fmt, ...)
{
    redisContext *c = th_redis_connect(&node[i]);
    if (!c)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

/* Every master has its replica attached and in sync (WAIT can succeed). */
static int replicas_online(void *arg)
{
    (void)arg;
    int masters = 0;
    for (int i = 0; i < NNODES; i++) {
        redisReply *r = node_cmd(i, "INFO replication");
        int ok = 1;
        if (r && r->type == REDIS_REPLY_STRING && strstr(r->str, "role:master")) {
            masters++;
            ok = strstr(r->str, "connected_slaves:1") && strstr(r->str, "state=online");
        }
        if (r)
            freeReplyObject(r);
        if (!ok)
            return 0;
    }
    return masters == 3;
}

/* Index of the master node serving slot s, as node 0 sees it, or -1. */
static int master_of_slot(unsigned s)
{
    redisReply *r = node_cmd(0, "CLUSTER SLOTS");
    int found = -1;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements && found < 0; i++) {
        redisReply *e = r->element[i];
        if ((unsigned)e->element[0]->integer <= s && s <= (unsigned)e->element[1]->integer) {
            int port = (int)e->element[2]->element[1]->integer;
            for (int j = 0; j < NNODES; j++)
                if (node[j].port == port)
                    found = j;
        }
    }
    if (r)
        freeReplyObject(r);
    return found;
}

static unsigned slot_of(const char *key)
{
    redisReply *r = node_cmd(0, "CLUSTER KEYSLOT %s", key);
    unsigned s = r && r->type == REDIS_REPLY_INTEGER ? (unsigned)r->integer : 0;
    if (r)
        freeReplyObject(r);
    return s;
}

static int master_of_key(const char *key)
{
    return master_of_slot(slot_of(key));
}

static int init_suite(void)
{
    for (int i = 0; i < NNODES; i++)
        if (th_redis_start(&node[i], "--cluster-enabled yes --cluster-config-file nodes.conf "
                                     "--cluster-node-timeout 3000 --bind 127.0.0.1 "
                                     "127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5 127.0.0.6 "
                                     "127.0.0.7 127.0.0.8"))
            return -1;
    if (th_cluster_create(node, NNODES, 1) != 0 || !th_wait_for(replicas_online, NULL, 20000))
        return -1;
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d", node[0].port,
             node[1].port);
    return 0;
}

static int clean_suite(void)
{
    th_cluster_stop(node, NNODES);
    return 0;
}

static hilock_client *open_client(int64_t watchdog_ms)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    if (watchdog_ms)
        o.watchdog_lease_ms = watchdog_ms;
    /* a loaded 2-core machine can take over a second to ack a write */
    o.replica_ack_timeout_ms = 5000;
    hilock_client *c = NULL;
    char err[256];
    if (hilock_client_open(&c, url, &o, err, sizeof err) != 0)
        fprintf(stderr, "open %s: %s\n", url, err);
    return c;
}

static void t_url_errors(void)
{
    hilock_client *c = NULL;
    char err[256];
    CU_ASSERT_EQUAL(hilock_client_open(&c, "redis+cluster://127.0.0.1:1/0", NULL, err, sizeof err),
                    HILOCK_EINVAL);
    char u[128];
    snprintf(u, sizeof u, "redis+cluster://127.0.0.1:%d", th_free_port());
    CU_ASSERT_EQUAL(hilock_client_open(&c, u, NULL, err, sizeof err), HILOCK_ECONN);
    CU_ASSERT_PTR_NULL(c);
}

/* The n locks named prefix-0 .. prefix-<n-1>, held: each is on the master
 * of its slot, and they use all three masters. */
static void spread_check(const char *prefix, int n)
{
    int used[NNODES] = {0};
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s-%d", prefix, i);
        int m = master_of_key(name);
        CU_ASSERT_FATAL(m >= 0);
        CU_ASSERT_EQUAL(th_redis_int(&node[m], "EXISTS %s", name), 1);
        used[m] = 1;
    }
    int masters = 0;
    for (int i = 0; i < NNODES; i++)
        masters += used[i];
    CU_ASSERT_EQUAL(masters, 3);
}

/* Locks land on the master owning their slot, spread over all three. */
static void t_spread(void)
{
    hilock_client *c = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    enum { N = 48 };
    hilock_lock *l[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "spread-%d", i);
        CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l[i], c, name), 0);
        int rc = hilock_lock_acquire(l[i], 0, 20000);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc)
            fprintf(stderr, "%s: %s\n", name, hilock_lock_errmsg(l[i]));
        int locked = 0;
        CU_ASSERT_EQUAL(hilock_lock_is_locked(&locked, l[i]), 0);
        CU_ASSERT_EQUAL(locked, 1);
    }
    spread_check("spread", N);
    for (int i = 0; i < N; i++) {
        CU_ASSERT_EQUAL(hilock_lock_release(l[i]), 0);
        hilock_lock_free(l[i]);
    }
    hilock_client_close(c);
}

typedef struct {
    hilock_client *c;
    int master;
    int iterations;
    int errors;
} counter_arg;

static void *counter_main(void *p)
{
    counter_arg *a = p;
    hilock_lock *l = NULL;
    hilock_lock_new(&l, a->c, "ccount");
    redisContext *r = th_redis_connect(&node[a->master]);
    for (int i = 0; i < a->iterations; i++) {
        if (hilock_lock_acquire(l, 20000, 10000) != 0) {
            a->errors++;
            continue;
        }
        redisReply *g = redisCommand(r, "GET {ccount}:n");
        long v = g && g->type == REDIS_REPLY_STRING ? atol(g->str) : 0;
        if (g)
            freeReplyObject(g);
        redisReply *s = redisCommand(r, "SET {ccount}:n %ld", v + 1);
        if (s)
            freeReplyObject(s);
        if (hilock_lock_release(l) != 0)
            a->errors++;
    }
    redisFree(r);
    hilock_lock_free(l);
    return NULL;
}

static void t_contention(void)
{
    hilock_client *c1 = open_client(0), *c2 = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    int m = master_of_key("ccount");
    int iters = getenv("HILOCK_VALGRIND") ? 25 : 150;
    counter_arg a[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (counter_arg){i % 2 ? c1 : c2, m, iters, 0};
        pthread_create(&t[i], NULL, counter_main, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(a[i].errors, 0);
    }
    CU_ASSERT_EQUAL(th_redis_int(&node[m], "GET {ccount}:n"), 4 * iters);
    hilock_client_close(c1);
    hilock_client_close(c2);
}

typedef struct {
    hilock_lock *lock;
    int rc;
    int64_t at;
    uint64_t tid;
    pthread_t thread;
} waiter_arg;

static void *waiter_main(void *p)
{
    waiter_arg *w = p;
    w->tid = hilock_thread_id();
    w->rc = hilock_lock_acquire(w->lock, 20000, 10000);
    w->at = th_now_ms();
    return NULL;
}

/* A thread that waits up to 20 s for lock (w->rc -100 until it is answered). */
static void waiter_start(waiter_arg *w, hilock_lock *lock)
{
    *w = (waiter_arg){.lock = lock, .rc = -100};
    CU_ASSERT_FATAL(pthread_create(&w->thread, NULL, waiter_main, w) == 0);
}

/* The holder releases: the waiter is granted within 2 s (by the message, not
 * a lease). */
static void waiter_handed(waiter_arg *w, hilock_lock *holder)
{
    int64_t released = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_release(holder), 0);
    pthread_join(w->thread, NULL);
    CU_ASSERT_EQUAL(w->rc, 0);
    CU_ASSERT(w->at - released < 2000);
}

typedef struct {
    int node;
    const char *channel;
    int clients; /* subscribed there (client connections): 0 means 1 */
} sub_arg;

static int shard_subscribers(int node_i, const char *channel)
{
    redisReply *r = node_cmd(node_i, "PUBSUB SHARDNUMSUB %s", channel);
    int n = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? (int)r->element[1]->integer : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

static int shard_subscribed(void *p)
{
    sub_arg *s = p;
    return shard_subscribers(s->node, s->channel) == (s->clients ? s->clients : 1);
}

static long long stat_calls(int i, const char *cmd)
{
    redisReply *r = node_cmd(i, "INFO commandstats");
    char key[64];
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    const char *p = r && r->str ? strstr(r->str, key) : NULL;
    long long v = p ? atoll(p + strlen(key)) : 0;
    if (r)
        freeReplyObject(r);
    return v;
}

/* A waiter listens with SSUBSCRIBE on the lock's master and is woken by the
 * SPUBLISH of the unlock, long before the 30 s lease. The holder's client
 * listens on that channel too (every hold, fixed lease included, observes
 * its lock's channel for a force unlock; its SSUBSCRIBE is sent after the
 * grant, unawaited): one subscriber before the waiter starts, two once the
 * waiter listens. */
static void t_sharded_wake(void)
{
    hilock_client *a = open_client(0), *b = open_client(0);
    hilock_lock *la = NULL, *lb = NULL;
    hilock_lock_new(&la, a, "swake");
    hilock_lock_new(&lb, b, "swake");
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(la, 0, 30000), 0);
    int m = master_of_key("swake");
    long long spub = stat_calls(m, "spublish");
    sub_arg holder = {m, "redisson_lock__channel:{swake}", 1};
    CU_ASSERT(th_wait_for(shard_subscribed, &holder, 5000));
    waiter_arg w;
    waiter_start(&w, lb);
    sub_arg both = {m, "redisson_lock__channel:{swake}", 2};
    CU_ASSERT(th_wait_for(shard_subscribed, &both, 5000));
    waiter_handed(&w, la);
    CU_ASSERT(stat_calls(m, "spublish") > spub);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(lb, w.tid), 0);
    hilock_lock_free(la);
    hilock_lock_free(lb);
    hilock_client_close(a);
    hilock_client_close(b);
}

static void node_id(int i, char *out, size_t len)
{
    redisReply *r = node_cmd(i, "CLUSTER MYID");
    snprintf(out, len, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
    if (r)
        freeReplyObject(r);
}

typedef struct {
    int node;
    int64_t floor;
} pttl_arg;

static int pttl_rose(void *p)
{
    pttl_arg *a = p;
    long long v = th_redis_int(&node[a->node], "PTTL mig");
    /* up since the last look: only a renewal raises it (compared with the
     * first look only, a renewal made just before that look, as the
     * holder's check on hearing its slot move, would pass unseen) */
    int rose = v > a->floor;
    a->floor = v;
    return rose;
}

static int is_master_port(int i)
{
    redisReply *r = node_cmd(i, "ROLE");
    int yes = r && r->type == REDIS_REPLY_ARRAY && !strcmp(r->element[0]->str, "master");
    if (r)
        freeReplyObject(r);
    return yes;
}

/* A migration of key's slot: its master (*from) and another (*to). */
static unsigned migration_for(const char *key, int *from, int *to)
{
    unsigned slot = slot_of(key);
    *from = master_of_slot(slot);
    *to = -1;
    for (int i = 0; i < NNODES && *to < 0; i++)
        if (i != *from && is_master_port(i))
            *to = i;
    return slot;
}

/* Start moving slot: IMPORTING on to, MIGRATING on from. */
static void migrate_begin(unsigned slot, int from, int to)
{
    char id_from[64], id_to[64];
    node_id(from, id_from, sizeof id_from);
    node_id(to, id_to, sizeof id_to);
    redisReply *r = node_cmd(to, "CLUSTER SETSLOT %u IMPORTING %s", slot, id_from);
    CU_ASSERT(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = node_cmd(from, "CLUSTER SETSLOT %u MIGRATING %s", slot, id_to);
    CU_ASSERT(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* Move one key of the slot to its new master (the old one answers ASK). */
static void migrate_key(int from, int to, const char *key)
{
    redisReply *r = node_cmd(from, "MIGRATE 127.0.0.1 %d %s 0 5000", node[to].port, key);
    CU_ASSERT(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* End: every master learns that to serves slot (the others answer MOVED). */
static void migrate_end(unsigned slot, int to)
{
    char id_to[64];
    node_id(to, id_to, sizeof id_to);
    for (int i = 0; i < NNODES; i++) {
        if (!is_master_port(i))
            continue;
        redisReply *r = node_cmd(i, "CLUSTER SETSLOT %u NODE %s", slot, id_to);
        if (r)
            freeReplyObject(r);
    }
}

/* The slot of a held and waited-on lock is migrated to another master:
 * exclusion holds, the holder's watchdog renews it on the new master, the
 * waiter moves its subscription there and is woken by the unlock. */
/* Names whose companion keys would land in another slot (empty or unclosed
 * hash tag) are refused on a cluster: such a lock could be taken but never
 * released (every release CROSSSLOT). Good tags still work. */
static void t_bad_hash_tags(void)
{
    hilock_client *c = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const char *bad[] = {"x{y", "{}", "{}x{y}", "a{"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hilock_lock *l = NULL;
        CU_ASSERT_EQUAL(hilock_lock_new(&l, c, bad[i]), HILOCK_EINVAL);
        CU_ASSERT_PTR_NULL(l);
        CU_ASSERT_EQUAL(hilock_fair_lock_new(&l, c, bad[i]), HILOCK_EINVAL);
        CU_ASSERT_PTR_NULL(l);
    }
    CU_ASSERT(strstr(hilock_client_errmsg(c), "hash tag") != NULL);
    const char *good[] = {"{tag}x", "a{b}c"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        hilock_lock *l = NULL;
        CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&l, c, good[i]), 0);
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 5000), 0);
        CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
        int locked = 1;
        CU_ASSERT_EQUAL(hilock_lock_is_locked(&locked, l), 0);
        CU_ASSERT_EQUAL(locked, 0);
        hilock_lock_free(l);
    }
    hilock_client_close(c);
}

static void t_migration(void)
{
    hilock_client *h = open_client(3000), *w = open_client(0), *other = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    hilock_lock *lh = NULL, *lw = NULL, *lo = NULL;
    hilock_lock_new(&lh, h, "mig");
    hilock_lock_new(&lw, w, "mig");
    hilock_lock_new(&lo, other, "mig");
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(lh, 0, 0), 0); /* watchdog */
    int from, to;
    unsigned slot = migration_for("mig", &from, &to);
    CU_ASSERT_FATAL(from >= 0 && to >= 0);
    waiter_arg wa;
    waiter_start(&wa, lw);
    /* two clients listen there: the waiter, and the holder (a watchdog
     * hold listens on its lock's channel for a force unlock) */
    sub_arg s_from = {from, "redisson_lock__channel:{mig}", 2};
    CU_ASSERT(th_wait_for(shard_subscribed, &s_from, 5000));

    migrate_begin(slot, from, to);
    /* halfway: the key is still on the old master; a newcomer still fails */
    CU_ASSERT_EQUAL(hilock_lock_acquire(lo, 0, 5000), HILOCK_ETIMEDOUT);
    migrate_key(from, to, "mig");
    /* key moved, slot not yet: the old master answers ASK */
    CU_ASSERT_EQUAL(hilock_lock_acquire(lo, 0, 5000), HILOCK_ETIMEDOUT);
    migrate_end(slot, to);
    /* done: exclusion still holds (MOVED is followed) */
    CU_ASSERT_EQUAL(hilock_lock_acquire(lo, 0, 5000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(th_redis_int(&node[to], "EXISTS mig"), 1);
    /* the holder's watchdog renews it on the new master */
    pttl_arg pa = {to, th_redis_int(&node[to], "PTTL mig")};
    CU_ASSERT(th_wait_for(pttl_rose, &pa, 3000 / 3 + 2000));
    /* the waiter and the holder followed the slot: both subscribed on the
     * new master, none left on the old one */
    sub_arg s_to = {to, "redisson_lock__channel:{mig}", 2};
    CU_ASSERT(th_wait_for(shard_subscribed, &s_to, 5000));
    CU_ASSERT_EQUAL(shard_subscribers(from, "redisson_lock__channel:{mig}"), 0);
    CU_ASSERT_EQUAL(wa.rc, -100);
    waiter_handed(&wa, lh);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(lw, wa.tid), 0);
    CU_ASSERT_EQUAL(th_redis_int(&node[to], "EXISTS mig"), 0);
    hilock_lock_free(lh);
    hilock_lock_free(lw);
    hilock_lock_free(lo);
    hilock_client_close(h);
    hilock_client_close(w);
    hilock_client_close(other);
}

/* A release while the lock's slot migrates is served at once: on the old
 * master before the key moves, on the new one (ASK) after. unlock.lua
 * declares the lock as its one KEY; with the channel and the latch declared
 * too (keys the node does not have) the server answered TRYAGAIN until the
 * migration ended, and the release failed after the router's 16 tries. */
/* How many TRYAGAIN errors node i has answered (INFO errorstats), -1 unknown. */
static long long tryagains(int i)
{
    char buf[8192];
    if (th_redis_str(&node[i], buf, sizeof buf, "INFO errorstats") != 0)
        return -1;
    const char *key = "errorstat_TRYAGAIN:count=";
    const char *p = strstr(buf, key);
    return p ? atoll(p + strlen(key)) : 0;
}

static void t_release_during_migration(void)
{
    hilock_client *c = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "relmig"), 0);
    int from, to;
    unsigned slot = migration_for("relmig", &from, &to);
    CU_ASSERT_FATAL(from >= 0 && to >= 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(l, 0, 30000), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(l, 0, 30000), 0); /* hold count 2 */
    migrate_begin(slot, from, to);
    long long ta_from = tryagains(from), ta_to = tryagains(to);
    CU_ASSERT(ta_from >= 0 && ta_to >= 0);
    /* migrating, the key still on the old master: one hold released there */
    int64_t t0 = th_now_ms();
    int rc = hilock_lock_release(l);
    int64_t took = th_now_ms() - t0;
    CU_ASSERT_EQUAL(rc, 0);
    if (rc)
        fprintf(stderr, "\n  release while migrating: %d %s (%lld ms)\n", rc,
                hilock_lock_errmsg(l), (long long)took);
    /* answered at once, not bounced (before: TRYAGAIN until the router gave
     * up, -5 after 1.6 s): no node answered TRYAGAIN */
    CU_ASSERT_EQUAL(tryagains(from), ta_from);
    CU_ASSERT_EQUAL(tryagains(to), ta_to);
    CU_ASSERT_EQUAL(th_redis_int(&node[from], "HLEN relmig"), 1);
    migrate_key(from, to, "relmig");
    /* the key moved, the slot not yet: the last hold released on the new
     * master (ASK) */
    t0 = th_now_ms();
    rc = hilock_lock_release(l);
    took = th_now_ms() - t0;
    CU_ASSERT_EQUAL(rc, 0);
    if (rc)
        fprintf(stderr, "\n  release after the key moved: %d %s (%lld ms)\n", rc,
                hilock_lock_errmsg(l), (long long)took);
    CU_ASSERT_EQUAL(tryagains(from), ta_from);
    CU_ASSERT_EQUAL(tryagains(to), ta_to);
    migrate_end(slot, to);
    CU_ASSERT_EQUAL(th_redis_int(&node[to], "EXISTS relmig"), 0); /* released there */
    /* and the lock works on its new master */
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 30000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* A fair release while the slot migrates and the lock's three keys are split
 * between the nodes (MIGRATE moves keys in batches): served at once on
 * either node, and a waiter in line is neither dropped nor doubled.
 * fair_unlock.lua declares only the lock; on the old master the moved queue
 * reads as an error, on the new one the deadlines not yet moved read as
 * absent, and a queue without its deadlines is not trimmed as "no
 * deadline". */
static void t_fair_release_split_migration(void)
{
    hilock_client *c = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&l, c, "fmig"), 0);
    unsigned slot = slot_of("fmig");
    int from = master_of_slot(slot), to = -1;
    for (int i = 0; i < NNODES && to < 0; i++)
        if (i != from && is_master_port(i))
            to = i;
    CU_ASSERT_FATAL(from >= 0 && to >= 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(l, 0, 30000), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(l, 0, 30000), 0); /* hold count 2 */
    /* a waiter in line, its deadline a minute away */
    redisReply *r = node_cmd(from, "RPUSH redisson_lock_queue:{fmig} w1");
    freeReplyObject(r);
    r = node_cmd(from, "TIME");
    CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    long long due = atoll(r->element[0]->str) * 1000 + 60000;
    freeReplyObject(r);
    r = node_cmd(from, "ZADD redisson_lock_timeout:{fmig} %lld w1", due);
    freeReplyObject(r);
    char id_from[64], id_to[64];
    node_id(from, id_from, sizeof id_from);
    node_id(to, id_to, sizeof id_to);
    r = node_cmd(to, "CLUSTER SETSLOT %u IMPORTING %s", slot, id_from);
    freeReplyObject(r);
    r = node_cmd(from, "CLUSTER SETSLOT %u MIGRATING %s", slot, id_to);
    freeReplyObject(r);
    /* the queue moved first: the lock and the deadlines are on the old master */
    r = node_cmd(from, "MIGRATE 127.0.0.1 %d redisson_lock_queue:{fmig} 0 5000", node[to].port);
    CU_ASSERT(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    long long ta_from = tryagains(from), ta_to = tryagains(to);
    CU_ASSERT(ta_from >= 0 && ta_to >= 0);
    int64_t t0 = th_now_ms();
    int rc = hilock_lock_release(l);
    int64_t took = th_now_ms() - t0;
    CU_ASSERT_EQUAL(rc, 0);
    if (rc)
        fprintf(stderr, "\n  fair release, queue moved: %d %s (%lld ms)\n", rc,
                hilock_lock_errmsg(l), (long long)took);
    /* answered at once, not bounced: no node answered TRYAGAIN */
    CU_ASSERT_EQUAL(tryagains(from), ta_from);
    CU_ASSERT_EQUAL(tryagains(to), ta_to);
    CU_ASSERT_EQUAL(th_redis_int(&node[from], "HLEN fmig"), 1);
    /* the lock moves too, the deadlines stay behind: last hold released on
     * the new master (ASK) */
    r = node_cmd(from, "MIGRATE 127.0.0.1 %d fmig 0 5000", node[to].port);
    CU_ASSERT(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    t0 = th_now_ms();
    rc = hilock_lock_release(l);
    took = th_now_ms() - t0;
    CU_ASSERT_EQUAL(rc, 0);
    if (rc)
        fprintf(stderr, "\n  fair release, deadlines behind: %d %s (%lld ms)\n", rc,
                hilock_lock_errmsg(l), (long long)took);
    /* answered at once, not bounced: no node answered TRYAGAIN */
    CU_ASSERT_EQUAL(tryagains(from), ta_from);
    CU_ASSERT_EQUAL(tryagains(to), ta_to);
    CU_ASSERT_EQUAL(th_redis_int(&node[from], "ZCARD redisson_lock_timeout:{fmig}"), 1);
    r = node_cmd(from, "MIGRATE 127.0.0.1 %d redisson_lock_timeout:{fmig} 0 5000", node[to].port);
    freeReplyObject(r);
    for (int i = 0; i < NNODES; i++) {
        if (!is_master_port(i))
            continue;
        r = node_cmd(i, "CLUSTER SETSLOT %u NODE %s", slot, id_to);
        if (r)
            freeReplyObject(r);
    }
    CU_ASSERT_EQUAL(th_redis_int(&node[to], "EXISTS fmig"), 0); /* released */
    /* the waiter is still in line, once, with its deadline */
    CU_ASSERT_EQUAL(th_redis_int(&node[to], "LLEN redisson_lock_queue:{fmig}"), 1);
    CU_ASSERT_EQUAL(th_redis_int(&node[to], "ZCARD redisson_lock_timeout:{fmig}"), 1);
    r = node_cmd(to, "DEL redisson_lock_queue:{fmig} redisson_lock_timeout:{fmig}");
    freeReplyObject(r);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* Fair locks work on a cluster too: queue keys share the lock's slot. */
static void t_fair(void)
{
    hilock_client *a = open_client(0), *b = open_client(0);
    hilock_lock *la = NULL, *lb = NULL;
    hilock_fair_lock_new(&la, a, "cfair");
    hilock_fair_lock_new(&lb, b, "cfair");
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(la, 0, 30000), 0);
    waiter_arg w;
    waiter_start(&w, lb);
    int m = master_of_key("cfair");
    CU_ASSERT_FATAL(m >= 0);
    for (int i = 0; i < 500 && th_redis_int(&node[m], "LLEN redisson_lock_queue:{cfair}") != 1; i++)
        th_sleep_ms(10);
    CU_ASSERT_EQUAL(th_redis_int(&node[m], "LLEN redisson_lock_queue:{cfair}"), 1);
    waiter_handed(&w, la);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(lb, w.tid), 0);
    CU_ASSERT_EQUAL(th_redis_int(&node[m], "EXISTS redisson_lock_queue:{cfair}"), 0);
    CU_ASSERT_EQUAL(th_redis_int(&node[m], "EXISTS redisson_lock_timeout:{cfair}"), 0);
    hilock_lock_free(la);
    hilock_lock_free(lb);
    hilock_client_close(a);
    hilock_client_close(b);
}

/* A multi-lock over locks living on different masters of one cluster
 * client: all or nothing, with the watchdog renewing each on its node. */
static void t_multilock(void)
{
    hilock_client *a = open_client(1500), *b = open_client(0);
    const char *names[3] = {NULL, NULL, NULL};
    static char buf[3][32];
    int seen[NNODES] = {0}, k = 0;
    for (int i = 0; k < 3 && i < 200; i++) { /* one name per master */
        snprintf(buf[k], sizeof buf[k], "ml-%d", i);
        int m = master_of_key(buf[k]);
        if (m >= 0 && !seen[m]) {
            seen[m] = 1;
            names[k] = buf[k];
            k++;
        }
    }
    CU_ASSERT_EQUAL_FATAL(k, 3);
    hilock_lock *la[3], *lb = NULL;
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&la[i], a, names[i]), 0);
    hilock_multilock *m = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_multilock_new(&m, la, 3), 0);
    /* someone else holds the third: nothing is taken */
    hilock_lock_new(&lb, b, names[2]);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(lb, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_multilock_acquire(m, 0, 10000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(th_redis_int(&node[master_of_key(names[0])], "EXISTS %s", names[0]), 0);
    CU_ASSERT_EQUAL(th_redis_int(&node[master_of_key(names[1])], "EXISTS %s", names[1]), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(lb), 0);
    /* free: all three, kept past the 1500 ms watchdog lease (with 900 ms,
     * at load 15 no renewal was confirmed in time once in 15 runs) */
    CU_ASSERT_EQUAL(hilock_multilock_acquire(m, 0, 0), 0);
    th_sleep_ms(1700);
    int held = 0;
    CU_ASSERT_EQUAL(hilock_multilock_is_held(&held, m), 0);
    CU_ASSERT_EQUAL(held, 1);
    CU_ASSERT_EQUAL(hilock_multilock_is_lost(m), 0);
    CU_ASSERT_EQUAL(hilock_multilock_release(m), 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(th_redis_int(&node[master_of_key(names[i])], "EXISTS %s", names[i]), 0);
    hilock_multilock_free(m);
    for (int i = 0; i < 3; i++)
        hilock_lock_free(la[i]);
    hilock_lock_free(lb);
    hilock_client_close(a);
    hilock_client_close(b);
}

#ifdef HILOCK_CLI_PATH
/* `hilock status` finds a lock on whichever master serves its slot. */
static void t_cli_status(void)
{
    hilock_client *a = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    char names[3][32];
    hilock_lock *l[3];
    for (int i = 0; i < 3; i++) {
        snprintf(names[i], sizeof names[i], "cli-%d", i * 7);
        hilock_lock_new(&l[i], a, names[i]);
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l[i], 4242, 0, 60000), 0);
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s status --json --url %s %s %s %s", HILOCK_CLI_PATH, url,
             names[0], names[1], names[2]);
    FILE *p = popen(cmd, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    char out[8192] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    CU_ASSERT_EQUAL(pclose(p), 0);
    char owner[80];
    hilock_client_owner(a, 4242, owner, sizeof owner);
    /* each of the three shows this owner as holder */
    int found = 0;
    for (const char *q = out; (q = strstr(q, owner)) != NULL; q++)
        found++;
    CU_ASSERT_EQUAL(found, 3);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(hilock_lock_release_tid(l[i], 4242), 0);
        hilock_lock_free(l[i]);
    }
    hilock_client_close(a);
}
#endif

/* Address churn (rescheduled pods): a master keeps announcing new addresses
 * (loopback aliases it listens on), so the client learns more addresses than
 * its node table holds (lowered to 4 here, HL_MAX_NODES otherwise). Entries
 * of addresses the slot map no longer names are reused: the table stays
 * bounded and the slot reaches the new address. */
typedef struct churn {
    hilock_client *c;
    unsigned slot;
    char want[32];
} churn;

static int slot_at(void *p)
{
    churn *ch = p;
    char err[HL_ERRMSG_MAX];
    hl_cluster_refresh(&ch->c->t, err);
    int idx = __atomic_load_n(&ch->c->t.slot_node[ch->slot], __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&ch->c->t.nodes_mu);
    int ok = idx >= 0 && ch->c->t.nodes[idx]->host && !strcmp(ch->c->t.nodes[idx]->host, ch->want);
    pthread_mutex_unlock(&ch->c->t.nodes_mu);
    return ok;
}

static void t_node_churn(void)
{
    hilock_client *c = open_client(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    c->t.max_nodes = 4;
    const char *key = "churn";
    int m = master_of_key(key);
    CU_ASSERT_FATAL(m >= 0);
    churn ch = {c, slot_of(key), ""};
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, key), 0);
    for (int k = 2; k <= 8; k++) { /* 3 + 7 addresses learned in all */
        snprintf(ch.want, sizeof ch.want, "127.0.0.%d", k);
        redisReply *r = node_cmd(m, "CONFIG SET cluster-announce-ip %s", ch.want);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        freeReplyObject(r);
        CU_ASSERT_FATAL(th_wait_for(slot_at, &ch, 20000));
        CU_ASSERT(__atomic_load_n(&c->t.nnodes, __ATOMIC_ACQUIRE) <= 4);
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 7, 0, 30000), 0);
        CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 7), 0);
    }
    redisReply *r = node_cmd(m, "CONFIG SET cluster-announce-ip 127.0.0.1");
    if (r)
        freeReplyObject(r);
    snprintf(ch.want, sizeof ch.want, "127.0.0.1");
    CU_ASSERT(th_wait_for(slot_at, &ch, 20000));
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* ---- the non-blocking API (hilock_async) on the cluster ---- */

/* Run the loop until cond(arg) holds (bounded); 1 when it does. */
static int as_until(hilock_async *a, int (*cond)(void *), void *arg, int64_t ms)
{
    int64_t end = th_now_ms() + ms;
    while (th_now_ms() < end) {
        if (cond(arg))
            return 1;
        hilock_epoll_run_once(&ep, a, 20);
    }
    return cond(arg);
}

typedef struct {
    int node;
    int64_t floor;
    const char *key;
} as_pttl_arg;

static int as_pttl_rose(void *p)
{
    as_pttl_arg *a = p;
    return th_redis_int(&node[a->node], "PTTL %s", a->key) > a->floor;
}

/* hilock_async on a cluster: locks land on their slot's master (the map
 * learned with CLUSTER SLOTS on the loop), a waiter sleeps on the sharded
 * message of its slot's master; the slot of a held (watchdog) and waited-on
 * lock migrates: a newcomer is refused by ASK and then MOVED, the holder's
 * renewals follow to the new master, the waiter subscribes there again and
 * is woken by the unlock. */
static void t_async(void)
{
    hilock_client *c = open_client(3000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_async *a = new_async();

    enum { N = 12 };
    hilock_lock *sp[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "aspread-%d", i);
        CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&sp[i], c, name), 0);
        res r = {0};
        CU_ASSERT_EQUAL(hilock_async_acquire(a, sp[i], 1, 0, 20000, on_done, &r), 0);
        CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0);
    }
    spread_check("aspread", N);
    for (int i = 0; i < N; i++) {
        res r = {0};
        CU_ASSERT_EQUAL(hilock_async_release(a, sp[i], 1, on_done, &r), 0);
        CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0);
        hilock_lock_free(sp[i]);
    }

    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "amig"), 0);
    res held = {0}, waiter = {0};
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l, 1, 0, 0, on_done, &held), 0); /* watchdog */
    CU_ASSERT_FATAL(run_until(a, &held, 1, 5000) && held.rc == 0);
    int from, to;
    unsigned slot = migration_for("amig", &from, &to);
    CU_ASSERT_FATAL(from >= 0 && to >= 0);
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l, 2, 20000, 10000, on_done, &waiter), 0);
    sub_arg s_from = {from, "redisson_lock__channel:{amig}", 0};
    CU_ASSERT(as_until(a, shard_subscribed, &s_from, 5000));

    migrate_begin(slot, from, to);
    migrate_key(from, to, "amig");
    long long asks = stat_calls(to, "asking");
    res other = {0};
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l, 3, 0, 5000, on_done, &other), 0);
    CU_ASSERT(run_until(a, &other, 1, 5000));
    CU_ASSERT_EQUAL(other.rc, HILOCK_ETIMEDOUT); /* refused on the importing node */
    CU_ASSERT(stat_calls(to, "asking") > asks);
    migrate_end(slot, to);
    memset(&other, 0, sizeof other);
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l, 3, 0, 5000, on_done, &other), 0);
    CU_ASSERT(run_until(a, &other, 1, 5000));
    CU_ASSERT_EQUAL(other.rc, HILOCK_ETIMEDOUT); /* MOVED followed: still held */
    CU_ASSERT_EQUAL(th_redis_int(&node[to], "EXISTS amig"), 1);
    as_pttl_arg pa = {to, th_redis_int(&node[to], "PTTL amig"), "amig"};
    CU_ASSERT(as_until(a, as_pttl_rose, &pa, 3000 / 3 + 2000)); /* renewed there */
    sub_arg s_to = {to, "redisson_lock__channel:{amig}", 0};
    CU_ASSERT(as_until(a, shard_subscribed, &s_to, 5000)); /* the waiter followed */
    CU_ASSERT_EQUAL(waiter.n, 0);
    CU_ASSERT_EQUAL(hilock_async_is_lost(a, l, 1), 0);
    res rel = {0};
    CU_ASSERT_EQUAL(hilock_async_release(a, l, 1, on_done, &rel), 0);
    CU_ASSERT(run_until(a, &rel, 1, 5000) && rel.rc == 0);
    CU_ASSERT(run_until(a, &waiter, 1, 5000));
    CU_ASSERT_EQUAL(waiter.rc, 0);
    CU_ASSERT(waiter.at - rel.at < 2000); /* by the message, not the 3 s lease */
    memset(&rel, 0, sizeof rel);
    CU_ASSERT_EQUAL(hilock_async_release(a, l, 2, on_done, &rel), 0);
    CU_ASSERT(run_until(a, &rel, 1, 5000) && rel.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&node[to], "EXISTS amig"), 0);
    free_async(a);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* Semaphore and latch of hilock_async on a cluster: the count and the
 * request latch on the name's master, a waiter woken by the sharded
 * message there (SPUBLISH), the latch's waiters too. */
static void t_async_semaphore(void)
{
    hilock_client *c = open_client(3000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_async *a = new_async();
    hilock_semaphore *s = NULL;
    hilock_latch *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_semaphore_new(&s, c, "asemc"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_latch_new(&l, c, "alatchc"), 0);
    res r = {0}, w = {0};
    CU_ASSERT_EQUAL(hilock_async_semaphore_count_op(a, s, HILOCK_COUNT_TRY_SET, 1, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0 && r.value == 1);
    int m = master_of_key("asemc");
    CU_ASSERT_FATAL(m >= 0);
    CU_ASSERT_EQUAL(th_redis_int(&node[m], "GET asemc"), 1);
    CU_ASSERT_EQUAL(hilock_async_semaphore_acquire(a, s, 1, 1, 0, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 2, 5000) && r.rc == 0);
    CU_ASSERT_EQUAL(hilock_async_semaphore_acquire(a, s, 2, 1, 10000, on_done, &w), 0);
    sub_arg sa = {m, "redisson_sc:{asemc}", 0};
    CU_ASSERT(as_until(a, shard_subscribed, &sa, 5000));
    CU_ASSERT_EQUAL(w.n, 0);
    CU_ASSERT_EQUAL(hilock_async_semaphore_release(a, s, 1, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 3, 5000) && r.rc == 0);
    CU_ASSERT(run_until(a, &w, 1, 5000) && w.rc == 0);
    CU_ASSERT(w.at - r.at < 2000); /* the sharded message */
    CU_ASSERT_EQUAL(th_redis_int(&node[m], "GET asemc"), 0);
    res lw = {0};
    CU_ASSERT_EQUAL(hilock_async_latch_count_op(a, l, HILOCK_COUNT_TRY_SET, 1, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 4, 5000) && r.rc == 0);
    CU_ASSERT_EQUAL(hilock_async_latch_await(a, l, 3, 10000, on_done, &lw), 0);
    int ml = master_of_key("alatchc");
    sub_arg sl = {ml, "redisson_countdownlatch__channel__{alatchc}", 0};
    CU_ASSERT(as_until(a, shard_subscribed, &sl, 5000));
    CU_ASSERT_EQUAL(hilock_async_latch_count_down(a, l, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 5, 5000) && r.rc == 0 && r.value == 0);
    CU_ASSERT(run_until(a, &lw, 1, 5000) && lw.rc == 0);
    CU_ASSERT(lw.at - r.at < 2000);
    th_redis_int(&node[m], "DEL asemc");
    free_async(a);
    hilock_semaphore_free(s);
    hilock_latch_free(l);
    hilock_client_close(c);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("cluster", init_suite, clean_suite);
    CU_add_test(s, "cluster URL errors", t_url_errors);
    CU_add_test(s, "locks spread over all masters", t_spread);
    CU_add_test(s, "contention: exact non-atomic counter", t_contention);
    CU_add_test(s, "waiter woken by sharded pub/sub", t_sharded_wake);
    CU_add_test(s, "fair lock on a cluster", t_fair);
    CU_add_test(s, "names with empty or unclosed hash tags refused", t_bad_hash_tags);
    CU_add_test(s, "multi-lock across masters, watchdog", t_multilock);
#ifdef HILOCK_CLI_PATH
    CU_add_test(s, "hilock status on a cluster", t_cli_status);
#endif
    CU_add_test(s, "slot migrated while held and waited on", t_migration);
    CU_add_test(s, "release while the slot migrates: no TRYAGAIN", t_release_during_migration);
    CU_add_test(s, "fair release while the slot migrates, keys split: no TRYAGAIN, waiter kept",
                t_fair_release_split_migration);
    CU_add_test(s, "node table bounded under address churn", t_node_churn);
    CU_add_test(s, "non-blocking API: slot map, sharded wake, slot migrated", t_async);
    CU_add_test(s, "non-blocking API: semaphore and latch, sharded wake", t_async_semaphore);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
