/*
 * Sentinel and replica acknowledgement, against real servers: one master,
 * one replica and three sentinels on loopback ports.
 */
#include <CUnit/Basic.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"

#define NSENT 3
static th_redis master, replica;
static struct {
    pid_t pid;
    int port;
    char dir[64];
} sent[NSENT];
static char url[512];
#include "async_helpers.h"

static void stop_sentinels(void)
{
    for (int i = 0; i < NSENT; i++) {
        if (sent[i].pid > 0) {
            kill(sent[i].pid, SIGKILL);
            waitpid(sent[i].pid, NULL, 0);
            sent[i].pid = 0;
            char path[128];
            snprintf(path, sizeof path, "%s/sentinel.conf", sent[i].dir);
            unlink(path);
            rmdir(sent[i].dir);
        }
    }
}

static int start_sentinel(int i)
{
    snprintf(sent[i].dir, sizeof sent[i].dir, "/tmp/hilock-sentinel-XXXXXX");
    if (!mkdtemp(sent[i].dir))
        return -1;
    sent[i].port = th_free_port();
    char conf[128];
    snprintf(conf, sizeof conf, "%s/sentinel.conf", sent[i].dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -1;
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndir %s\n"
            "sentinel monitor hm 127.0.0.1 %d 2\n"
            "sentinel down-after-milliseconds hm 1000\n"
            "sentinel failover-timeout hm 5000\n",
            sent[i].port, sent[i].dir, master.port);
    fclose(f);
    sent[i].pid = th_sentinel_spawn(conf);
    return sent[i].pid > 0 ? 0 : -1;
}

static redisContext *connect_port(int port)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c)
        redisSetTimeout(c, tv);
    return c;
}

/* Port of the master as sentinel i sees it, or -1. */
static int sentinel_master_port(int i)
{
    redisContext *c = connect_port(sent[i].port);
    if (!c)
        return -1;
    redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name hm");
    int port = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        port = atoi(r->element[1]->str);
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return port;
}

static int sentinels_see_replica(void *arg)
{
    (void)arg;
    for (int i = 0; i < NSENT; i++) {
        redisContext *c = connect_port(sent[i].port);
        if (!c)
            return 0;
        redisReply *r = redisCommand(c, "SENTINEL replicas hm");
        /* listed is not enough: SENTINEL FAILOVER answers NOGOODSLAVE until
         * the sentinel has read the replica's own INFO (flags "slave", link
         * to the master "ok") */
        int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
                 r->element[0]->type == REDIS_REPLY_ARRAY;
        int flags_ok = 0, link_ok = 0;
        for (size_t k = 0; ok && k + 1 < r->element[0]->elements; k += 2) {
            const char *f = r->element[0]->element[k]->str, *v = r->element[0]->element[k + 1]->str;
            if (!strcmp(f, "flags"))
                flags_ok = !strcmp(v, "slave");
            else if (!strcmp(f, "master-link-status"))
                link_ok = !strcmp(v, "ok");
        }
        ok = ok && flags_ok && link_ok;
        if (r)
            freeReplyObject(r);
        redisFree(c);
        if (!ok)
            return 0;
    }
    return 1;
}

/* th_wait_for predicate: sentinel 0 took SENTINEL FAILOVER. It answers
 * NOGOODSLAVE until it has read the replica's INFO since the replica
 * (re)synchronised (it reads a replica's INFO every 10 s): ask again then. */
static int failover_taken(void *arg)
{
    (void)arg;
    redisContext *s = connect_port(sent[0].port);
    if (!s)
        return 0;
    redisReply *r = redisCommand(s, "SENTINEL FAILOVER hm");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    redisFree(s);
    if (!ok)
        th_sleep_ms(50);
    return ok;
}

static int init_suite(void)
{
    char extra[128];
    if (th_redis_start(&master, NULL))
        return -1;
    snprintf(extra, sizeof extra, "--replicaof 127.0.0.1 %d", master.port);
    if (th_redis_start(&replica, extra))
        return -1;
    if (!th_wait_for(th_replica_linked, &replica, 10000))
        return -1;
    atexit(stop_sentinels);
    for (int i = 0; i < NSENT; i++)
        if (start_sentinel(i))
            return -1;
    if (!th_wait_for(sentinels_see_replica, NULL, 15000))
        return -1;
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/hm",
             sent[0].port, sent[1].port, sent[2].port);
    return 0;
}

static int clean_suite(void)
{
    stop_sentinels();
    th_redis_stop(&replica);
    th_redis_stop(&master);
    return 0;
}

/* replica_ack: hilock_options.replica_ack (0: the default, on) */
static hilock_client *open_client_ack(const char *u, int64_t watchdog_ms, int replica_ack)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.replica_ack = replica_ack;
    if (watchdog_ms)
        o.watchdog_lease_ms = watchdog_ms;
    /* a loaded 2-core machine can take over a second to ack a write */
    o.replica_ack_timeout_ms = 5000;
    o.connect_timeout_ms = 500;
    hilock_client *c = NULL;
    char err[256];
    int rc = hilock_client_open(&c, u, &o, err, sizeof err);
    if (rc)
        fprintf(stderr, "open %s: %s\n", u, err);
    return c;
}

static hilock_client *open_client(const char *u, int64_t watchdog_ms)
{
    return open_client_ack(u, watchdog_ms, 0);
}

static long long stat_calls(const th_redis *r, const char *cmd)
{
    redisContext *c = th_redis_connect(r);
    redisReply *rep = redisCommand(c, "INFO commandstats");
    long long calls = 0;
    char key[64];
    snprintf(key, sizeof key, "cmdstat_%s:calls=", cmd);
    const char *p = rep && rep->str ? strstr(rep->str, key) : NULL;
    if (p)
        calls = atoll(p + strlen(key));
    freeReplyObject(rep);
    redisFree(c);
    return calls;
}

static void t_urls(void)
{
    hilock_client *c = NULL;
    char u[512];
    /* unknown master name: a clear connection error, no hang */
    snprintf(u, sizeof u, "redis+sentinel://127.0.0.1:%d/nosuchmaster", sent[0].port);
    char err[256];
    CU_ASSERT_EQUAL(hilock_client_open(&c, u, NULL, err, sizeof err), HILOCK_ECONN);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "nosuchmaster"));
    /* malformed */
    CU_ASSERT_EQUAL(hilock_client_open(&c, "redis+sentinel://127.0.0.1:1", NULL, NULL, 0),
                    HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_open(&c, "redis+sentinel://127.0.0.1:1/", NULL, NULL, 0),
                    HILOCK_EINVAL);
    /* a dead sentinel first in the list is skipped */
    snprintf(u, sizeof u, "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/hm", th_free_port(),
             sent[1].port);
    c = open_client(u, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL(hilock_lock_new(&l, c, "sentinel-url"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 5000), 0);
    CU_ASSERT_EQUAL(th_redis_int(&master, "EXISTS sentinel-url"), 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* Replica acknowledgement is on by default with sentinels: once acquire
 * returns, the replica already has the lock. */
static void t_replica_ack(void)
{
    hilock_client *c = open_client(url, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    hilock_lock_new(&l, c, "acked");
    long long waits = stat_calls(&master, "wait");
    for (int i = 0; i < 20; i++) {
        CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(l, 0, 10000), 0);
        char owner[64];
        hilock_client_owner(c, hilock_thread_id(), owner, sizeof owner);
        /* read at once from the replica, no polling */
        CU_ASSERT_EQUAL(th_redis_int(&replica, "HGET acked %s", owner), 1);
        CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
        CU_ASSERT_EQUAL(th_redis_int(&replica, "EXISTS acked"), 0);
    }
    CU_ASSERT(stat_calls(&master, "wait") >= waits + 40);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* With the replica frozen, nobody acknowledges: acquire reports failure and
 * does not leave the lock behind. */
static void t_replica_ack_failure(void)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.replica_ack = 1;
    o.replica_ack_timeout_ms = 200;
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, master.url, &o, NULL, 0), 0);
    hilock_lock *l = NULL;
    hilock_lock_new(&l, c, "unacked");
    th_redis_pause(&replica);
    int64_t t0 = th_now_ms();
    int rc = hilock_lock_acquire(l, 0, 10000);
    int64_t took = th_now_ms() - t0;
    th_redis_resume(&replica);
    CU_ASSERT_EQUAL(rc, HILOCK_EUNACKED); /* its own code, not a connection error */
    CU_ASSERT_PTR_NOT_NULL(strstr(hilock_lock_errmsg(l), "replica"));
    CU_ASSERT(took >= 200 && took < 3000);
    CU_ASSERT_EQUAL(th_redis_int(&master, "EXISTS unacked"), 0);
    /* the replica is back: acquire works */
    CU_ASSERT(th_wait_for(th_replica_linked, &replica, 10000));
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    /* explicitly off: no WAIT even with replicas */
    hilock_client_close(c);
    o.replica_ack = -1;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, master.url, &o, NULL, 0), 0);
    hilock_lock_free(l);
    hilock_lock_new(&l, c, "unacked");
    long long waits = stat_calls(&master, "wait");
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(stat_calls(&master, "wait"), waits);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* Acknowledgement on, but the server has no replica: no WAIT is sent (it
 * would block for the whole timeout on every acquire and release). */
static void t_replica_ack_no_replicas(void)
{
    th_redis lone;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&lone, NULL), 0);
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.replica_ack = 1;
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, lone.url, &o, NULL, 0), 0);
    hilock_lock *l = NULL;
    hilock_lock_new(&l, c, "lonely");
    for (int i = 0; i < 20; i++) {
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
        CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    }
    CU_ASSERT_EQUAL(stat_calls(&lone, "wait"), 0);
    CU_ASSERT(stat_calls(&lone, "role") >= 1);
    hilock_lock_free(l);
    hilock_client_close(c);
    th_redis_stop(&lone);
}

typedef struct {
    hilock_lock *lock;
    int rc;
    int64_t acquired_at;
    uint64_t tid;
} waiter_arg;

static void *waiter_main(void *p)
{
    waiter_arg *w = p;
    w->tid = hilock_thread_id();
    w->rc = hilock_lock_acquire(w->lock, 30000, 5000);
    w->acquired_at = th_now_ms();
    return NULL;
}

static int master_is_replica_port(void *arg)
{
    (void)arg;
    return sentinel_master_port(0) == replica.port;
}

static int64_t new_master_pttl(void)
{
    return th_redis_int(&replica, "PTTL failover");
}

typedef struct {
    int64_t floor;
} pttl_arg;

static int pttl_rose(void *p)
{
    return new_master_pttl() > ((pttl_arg *)p)->floor;
}

/* SENTINEL FAILOVER while a watchdog lock is held and waited on: the client
 * follows the new master, exclusion holds, renewals continue there, and
 * the waiter gets the lock once it is released. The watchdog lease must
 * outlast the failover (sentinels name the new master a second or two after
 * its promotion; writes in between reach the old one): 6 s here. */
static void t_failover(void)
{
    hilock_client *a = open_client(url, 6000);
    hilock_client *b = open_client(url, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    hilock_lock *la = NULL, *lb = NULL;
    hilock_lock_new(&la, a, "failover");
    hilock_lock_new(&lb, b, "failover");
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(la, 0, 0), 0); /* watchdog */
    waiter_arg w = {lb, -100, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);

    CU_ASSERT_FATAL(th_wait_for(failover_taken, NULL, 20000));
    CU_ASSERT_FATAL(th_wait_for(master_is_replica_port, NULL, 20000));

    /* the lock survived on the new master, still A's, and A's watchdog
     * renews it there: its PTTL goes up again within one renewal period */
    char owner[64];
    hilock_client_owner(a, hilock_thread_id(), owner, sizeof owner);
    CU_ASSERT_EQUAL(th_redis_int(&replica, "HGET failover %s", owner), 1);
    pttl_arg pa = {new_master_pttl()};
    CU_ASSERT(pa.floor > 0);
    CU_ASSERT(th_wait_for(pttl_rose, &pa, 6000 / 3 + 1500));
    CU_ASSERT_EQUAL(w.rc, -100); /* B still waits */
    int held = 0;
    CU_ASSERT_EQUAL(hilock_lock_is_held(&held, la), 0);
    CU_ASSERT_EQUAL(held, 1);
    CU_ASSERT_EQUAL(hilock_lock_is_lost(la), 0);

    int64_t released_at = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_release(la), 0);
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(w.rc, 0);
    if (w.rc)
        fprintf(stderr, "waiter: %s (%s); holder: %s; holder client: %s\n", hilock_strerror(w.rc),
                hilock_lock_errmsg(lb), hilock_lock_errmsg(la), hilock_client_errmsg(a));
    /* exclusion across the failover: B only after A let go (B may need a
     * few seconds more: until the demoted master has resynchronised, no
     * replica can acknowledge B's lock, and B keeps trying) */
    CU_ASSERT(w.acquired_at >= released_at);
    char owner_b[64];
    hilock_client_owner(b, w.tid, owner_b, sizeof owner_b);
    /* B's hold is on the new master */
    redisContext *nm = th_redis_connect(&replica);
    redisReply *h = redisCommand(nm, "HGETALL failover");
    CU_ASSERT(h && h->type == REDIS_REPLY_ARRAY && h->elements == 2);
    if (h && h->elements == 2)
        CU_ASSERT_STRING_EQUAL(h->element[0]->str, owner_b);
    if (h)
        freeReplyObject(h);
    redisFree(nm);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(lb, w.tid), 0);
    hilock_lock_free(la);
    hilock_lock_free(lb);
    hilock_client_close(a);
    hilock_client_close(b);
}

static int master_is_master_port(void *arg)
{
    (void)arg;
    for (int i = 0; i < NSENT; i++)
        if (sentinel_master_port(i) != master.port)
            return 0;
    return 1;
}

static int no_replica_listed(void *arg)
{
    char info[4096] = "";
    return th_redis_str(arg, info, sizeof info, "INFO replication") == 0 &&
           strstr(info, "connected_slaves:0") != NULL;
}

/* A failover makes the client's node stand for a master it never asked;
 * when that master lists no replica (they were killed, or it is cut off
 * from them with this client while the sentinels promote one), "never
 * seen with a replica" must not count a grant as acknowledged: the client
 * saw the name's masters with replicas before. Before the rule, both APIs
 * were granted at once on the lone new master (the split-brain grants of
 * tests/safety sentinel-split-brain). Runs after t_failover: the master is
 * `replica` now, and `master` its replica. */
static void t_new_master_without_replicas(void)
{
    hilock_client *c = open_client(url, 0), *c2 = open_client(url, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    hilock_async *a = new_async();
    hilock_lock *l = NULL, *l2 = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "lone-master") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l2, c2, "lone-master-async") == 0);
    /* both clients see the master with its replica (acknowledged grants) */
    CU_ASSERT_FATAL(th_wait_for(th_replica_linked, &master, 20000));
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(l, 10000, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    res r = {0};
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l2, 1, 10000, 10000, on_done, &r), 0);
    CU_ASSERT_FATAL(run_until(a, &r, 1, 12000));
    CU_ASSERT_EQUAL_FATAL(r.rc, 0);
    memset(&r, 0, sizeof r);
    CU_ASSERT_EQUAL(hilock_async_release(a, l2, 1, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0);

    /* fail back to `master`, then its only replica goes */
    CU_ASSERT_FATAL(th_wait_for(failover_taken, NULL, 20000));
    CU_ASSERT_FATAL(th_wait_for(master_is_master_port, NULL, 20000));
    /* the demoted one follows it: by then every sentinel has announced the
     * switch, and the clients have dropped their old master's node */
    CU_ASSERT_FATAL(th_wait_for(th_replica_linked, &replica, 20000));
    /* the loop reads the +switch-master that waits on its sentinel watch */
    run_for(a, 300);
    kill(replica.pid, SIGKILL); /* reaped by th_redis_restart below */
    CU_ASSERT_FATAL(th_wait_for(no_replica_listed, &master, 10000));

    int rc = hilock_lock_acquire(l, 0, 10000);
    CU_ASSERT_EQUAL(rc, HILOCK_EUNACKED);
    if (rc != HILOCK_EUNACKED)
        fprintf(stderr, "lone new master, blocking acquire: %d %s\n", rc, hilock_lock_errmsg(l));
    CU_ASSERT_EQUAL(th_redis_int(&master, "EXISTS lone-master"), 0); /* given back */
    memset(&r, 0, sizeof r);
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l2, 1, 0, 10000, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_EUNACKED);
    if (r.rc != HILOCK_EUNACKED)
        fprintf(stderr, "lone new master, async acquire: %d %s\n", r.rc, r.err);
    CU_ASSERT_EQUAL(th_redis_int(&master, "EXISTS lone-master-async"), 0);

    /* a replica back: the grant is acknowledged again */
    CU_ASSERT_EQUAL_FATAL(th_redis_restart(&replica), 0);
    CU_ASSERT_FATAL(th_wait_for(th_replica_linked, &replica, 20000));
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 10000, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    memset(&r, 0, sizeof r);
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l2, 1, 10000, 10000, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 12000) && r.rc == 0);
    memset(&r, 0, sizeof r);
    CU_ASSERT_EQUAL(hilock_async_release(a, l2, 1, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0);
    free_async(a);
    hilock_lock_free(l);
    hilock_lock_free(l2);
    hilock_client_close(c);
    hilock_client_close(c2);
}

/* ---- the non-blocking API (hilock_async) ---- */

/* hilock_async on a sentinel URL: the master is found through the
 * sentinels on the loop, and every grant is acknowledged by the replica
 * (WAIT) before the acquire completes. With the replica stopped, a one-try
 * acquire gives the grant back and fails; a waiting one keeps trying and
 * takes the lock once the replica is back. */
static void t_async(void)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.replica_ack_timeout_ms = 200;
    o.connect_timeout_ms = 500;
    hilock_client *c = open_client(url, 0), *c2 = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c2, url, &o, NULL, 0), 0);
    hilock_async *a = new_async();
    hilock_lock *l = NULL, *l2 = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "async-acked") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l2, c2, "async-unacked") == 0);
    char owner[64];
    hilock_client_owner(c, 1, owner, sizeof owner);
    long long waits = stat_calls(&master, "wait");
    for (int i = 0; i < 5; i++) {
        res r = {0}, u = {0};
        CU_ASSERT_EQUAL(hilock_async_acquire(a, l, 1, 0, 10000, on_done, &r), 0);
        CU_ASSERT_FATAL(run_until(a, &r, 1, 8000));
        CU_ASSERT_EQUAL(r.rc, 0);
        if (r.rc)
            fprintf(stderr, "async acquire: %s\n", r.err);
        /* read at once from the replica: acknowledged before completion */
        CU_ASSERT_EQUAL(th_redis_int(&replica, "HGET async-acked %s", owner), 1);
        CU_ASSERT_EQUAL(hilock_async_release(a, l, 1, on_done, &u), 0);
        CU_ASSERT(run_until(a, &u, 1, 8000) && u.rc == 0);
    }
    CU_ASSERT(stat_calls(&master, "wait") >= waits + 5);

    th_redis_pause(&replica);
    res r = {0}, w = {0};
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l2, 1, 0, 10000, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 5000));
    CU_ASSERT_EQUAL(r.rc, HILOCK_EUNACKED);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "replica"));
    CU_ASSERT(r.at - t0 >= 200 && r.at - t0 < 3000);
    CU_ASSERT_EQUAL(th_redis_int(&master, "EXISTS async-unacked"), 0); /* given back */
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l2, 2, 10000, 10000, on_done, &w), 0);
    run_until(a, &w, 1, 600);
    CU_ASSERT_EQUAL(w.n, 0); /* still trying while nobody acknowledges */
    th_redis_resume(&replica);
    CU_ASSERT(run_until(a, &w, 1, 10000));
    CU_ASSERT_EQUAL(w.rc, 0);
    hilock_client_owner(c2, 2, owner, sizeof owner);
    CU_ASSERT_EQUAL(th_redis_int(&replica, "HGET async-unacked %s", owner), 1);
    memset(&r, 0, sizeof r);
    CU_ASSERT_EQUAL(hilock_async_release(a, l2, 2, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&master, "EXISTS async-unacked"), 0);
    free_async(a);
    hilock_lock_free(l);
    hilock_lock_free(l2);
    hilock_client_close(c);
    hilock_client_close(c2);
    CU_ASSERT(th_wait_for(th_replica_linked, &replica, 10000));
}

static int lone_port;

static int lone_sentinel_up(void *arg)
{
    (void)arg;
    redisContext *c = connect_port(lone_port);
    if (!c)
        return 0;
    redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name hm2");
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* A sentinel of its own (lone_port) watching the master as hm2, in a new
 * directory dir (64 bytes) with its config conf (128 bytes); answering. */
static pid_t lone_sentinel_start(char *dir, char *conf)
{
    snprintf(dir, 64, "/tmp/hilock-sentinel-XXXXXX");
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    lone_port = th_free_port();
    snprintf(conf, 128, "%s/sentinel.conf", dir);
    FILE *f = fopen(conf, "w");
    CU_ASSERT_FATAL(f != NULL);
    fprintf(f, "port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor hm2 127.0.0.1 %d 1\n", lone_port,
            dir, master.port);
    fclose(f);
    pid_t pid = th_sentinel_spawn(conf);
    CU_ASSERT_FATAL(pid > 0);
    CU_ASSERT_FATAL(th_wait_for(lone_sentinel_up, NULL, 5000));
    return pid;
}

static void lone_sentinel_stop(pid_t pid, const char *dir, const char *conf)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    unlink(conf);
    rmdir(dir);
}

/* The only sentinel of the URL stops answering, then the master drops the
 * client's connections: asking for the master again times out, and the
 * client goes on with the master it knew instead of asking again and again
 * (an acquire completes soon after one question's time limit). */
static void t_async_sentinel_stalled(void)
{
    char dir[64], conf[128];
    pid_t pid = lone_sentinel_start(dir, conf);
    char u[128];
    snprintf(u, sizeof u, "redis+sentinel://127.0.0.1:%d/hm2", lone_port);
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    /* 1 s, not less: a sentinel just started rewrites (and fsyncs) its
     * config when it finds the master's replica, and behind a busy disk
     * (the CI builds the sanitizer trees beside suite c) its answer to the
     * open took longer than 500 ms once */
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1000;
    o.replica_ack = -1;
    hilock_client *c = NULL;
    char err[256] = "";
    int orc = hilock_client_open(&c, u, &o, err, sizeof err);
    if (orc)
        printf("\n  open: %d %s\n", orc, err);
    CU_ASSERT_EQUAL_FATAL(orc, 0);
    hilock_async *a = new_async();
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "async-stalled-sentinel") == 0);
    res r = {0};
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l, 1, 0, 10000, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0);
    memset(&r, 0, sizeof r);
    CU_ASSERT_EQUAL(hilock_async_release(a, l, 1, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0);
    kill(pid, SIGSTOP);
    CU_ASSERT(th_redis_int(&master, "CLIENT KILL TYPE normal") >= 1);
    run_for(a, 100); /* the loss is seen */
    memset(&r, 0, sizeof r);
    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l, 1, 0, 10000, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 8000));
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT(r.at - t0 < 5000);
    memset(&r, 0, sizeof r);
    CU_ASSERT_EQUAL(hilock_async_release(a, l, 1, on_done, &r), 0);
    CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0);
    CU_ASSERT_EQUAL(th_redis_int(&master, "EXISTS async-stalled-sentinel"), 0);
    free_async(a);
    hilock_lock_free(l);
    hilock_client_close(c);
    lone_sentinel_stop(pid, dir, conf);
}

/* A master that stops answering under an attempt: the attempt is being
 * settled, the next one is refused at once, and the message names the
 * master by its address (on 7b6fa8d: "server ? has not answered ..."). */
static void t_settling_names_master(void)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.connect_timeout_ms = 300;
    o.command_timeout_ms = 300;
    o.replica_ack = -1;
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, url, &o, NULL, 0), 0);
    hilock_lock *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "settle-names") == 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    th_redis_pause(&master);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), HILOCK_ECONN); /* no reply */
    int rc = hilock_lock_acquire(l, 0, 10000);
    char msg[512], want[64];
    snprintf(msg, sizeof msg, "%s", hilock_lock_errmsg(l));
    snprintf(want, sizeof want, "127.0.0.1:%d", master.port);
    printf("\n  second attempt: %d %s\n", rc, msg);
    CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
    CU_ASSERT_PTR_NULL(strstr(msg, "server ?"));
    th_redis_resume(&master);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* A listener of the test's own on a free loopback port that never accepts:
 * the kernel completes each connect, nothing is ever read or answered (a
 * sentinel that takes the connection and stays silent). -1 on failure. */
static int silent_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    socklen_t n = sizeof a;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)&a, &n)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A sentinel that never answers is reported as such, by its address and
 * the time waited: not as "knows no master named" (on 09ff88a: "sentinel
 * 127.0.0.1:P knows no master named 'hm'" for the silent sentinel, and
 * "authentication to sentinel 127.0.0.1:P failed: Resource temporarily
 * unavailable" with a sentinel password). Only a nil reply means the
 * sentinel does not know the name; the password never shows. */
static void t_sentinel_silent(void)
{
    int port = 0;
    int fd = silent_listener(&port);
    CU_ASSERT_FATAL(fd >= 0);
    const char *pass = "s3cret-sentinel-pw";
    for (int auth = 0; auth < 2; auth++) {
        char u[256], err[256] = "", want[64];
        snprintf(u, sizeof u, "redis+sentinel://127.0.0.1:%d/hm%s%s", port,
                 auth ? "?sentinel_password=" : "", auth ? pass : "");
        hilock_options o;
        hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
        o.connect_timeout_ms = 300;
        hilock_client *c = NULL;
        int rc = hilock_client_open(&c, u, &o, err, sizeof err);
        printf("\n  silent sentinel%s: %d %s", auth ? " (password)" : "", rc, err);
        CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
        CU_ASSERT_PTR_NULL(c);
        snprintf(want, sizeof want, "no reply within 300 ms from sentinel 127.0.0.1:%d", port);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
        CU_ASSERT_PTR_NULL(strstr(err, "knows no master"));
        CU_ASSERT_PTR_NULL(strstr(err, pass));
        hilock_client_close(c);
    }
    close(fd);
    /* a nil reply, and only that, is "knows no master named" */
    char u[256], err[256] = "", want[96];
    hilock_client *c = NULL;
    snprintf(u, sizeof u, "redis+sentinel://127.0.0.1:%d/nosuchmaster", sent[0].port);
    CU_ASSERT_EQUAL(hilock_client_open(&c, u, NULL, err, sizeof err), HILOCK_ECONN);
    snprintf(want, sizeof want, "sentinel 127.0.0.1:%d knows no master named 'nosuchmaster'",
             sent[0].port);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
}

/* hilock_async: no sentinel naming the master is told by the last one's
 * address and what happened, in the blocking client's words (the engine's
 * hl_msg_no_reply / hl_msg_master_addr): a stopped sentinel is "no reply
 * within 600 ms from sentinel H:P" (connect + command timeout), a server
 * answering get-master-addr-by-name with an error (the plain master here) is
 * "sentinel H:P: error reply: ...". The blocking open names the master
 * through the lone sentinel before it is stopped. Before: "no sentinel
 * named the master" for both. */
static void t_async_sentinel_failure_named(void)
{
    char dir[64], conf[128];
    pid_t pid = lone_sentinel_start(dir, conf);
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.connect_timeout_ms = 300;
    o.command_timeout_ms = 300;
    o.replica_ack = -1;
    /* [the lone sentinel] and [the lone sentinel, the plain master] */
    hilock_client *c[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        char u[160];
        if (i)
            snprintf(u, sizeof u, "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/hm2", lone_port,
                     master.port);
        else
            snprintf(u, sizeof u, "redis+sentinel://127.0.0.1:%d/hm2", lone_port);
        CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c[i], u, &o, NULL, 0), 0);
    }
    kill(pid, SIGSTOP);
    hilock_async *a = new_async();
    for (int i = 0; i < 2; i++) {
        hilock_lock *l = NULL;
        CU_ASSERT_FATAL(hilock_lock_new(&l, c[i], "async-sentinel-named") == 0);
        res r = {0};
        CU_ASSERT_EQUAL(hilock_async_acquire(a, l, 1, 0, 10000, on_done, &r), 0);
        CU_ASSERT(run_until(a, &r, 1, 8000));
        printf("\n  async, %s: %d %s", i ? "stopped sentinel, then an error reply"
                                        : "stopped sentinel", r.rc, r.err);
        CU_ASSERT_EQUAL(r.rc, HILOCK_ECONN);
        char want[128];
        if (i)
            snprintf(want, sizeof want, "sentinel 127.0.0.1:%d: error reply: ERR unknown",
                     master.port);
        else
            snprintf(want, sizeof want, "no reply within 600 ms from sentinel 127.0.0.1:%d",
                     lone_port);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.err, want));
        CU_ASSERT_PTR_NULL(strstr(r.err, "knows no master"));
        hilock_lock_free(l);
    }
    free_async(a);
    for (int i = 0; i < 2; i++)
        hilock_client_close(c[i]);
    lone_sentinel_stop(pid, dir, conf);
}

/* ---- the watch connection accepted and never answered again ---- */

/* Clients subscribed to something on sentinel i (CLIENT LIST's sub=1). */
static int sentinel_subscribers(int i)
{
    redisContext *c = connect_port(sent[i].port);
    if (!c)
        return -1;
    redisReply *r = redisCommand(c, "CLIENT LIST");
    int n = 0;
    if (r && r->type == REDIS_REPLY_STRING)
        for (const char *p = r->str; (p = strstr(p, " sub=1 ")); p++)
            n++;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return n;
}

static int failover_taken_by(void *arg)
{
    redisContext *s = connect_port(sent[*(int *)arg].port);
    if (!s)
        return 0;
    redisReply *r = redisCommand(s, "SENTINEL FAILOVER hm");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    redisFree(s);
    if (!ok)
        th_sleep_ms(50);
    return ok;
}

/* The sentinel hilock_async watches for +switch-master keeps the
 * connection open and stops answering (paused: SIGSTOP, after the watch
 * subscribed there); then a failover by the other sentinels, and the
 * unlock of a lock the async client waits for, on the new master. The
 * watch must find its connection silent with the session's liveness rule
 * (a PING unanswered in time: the next sentinel watched, the master asked
 * again) and follow: the waiter listens again on the new master and is
 * granted at once. A deaf watch left the waiter on the old master until
 * the sentinels demoted it. Runs after t_new_master_without_replicas:
 * `master` is the master, `replica` its replica. */
static void t_async_silent_watch(void)
{
    char url_b[256];
    snprintf(url_b, sizeof url_b, "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/hm", sent[1].port,
             sent[2].port); /* the holder watches elsewhere */
    CU_ASSERT_FATAL(th_wait_for(sentinels_see_replica, NULL, 20000));
    int subs0 = sentinel_subscribers(0);
    /* no replica acknowledgement: the new master has none until the old
     * one is demoted, which is what a deaf watch waited for */
    hilock_client *b = open_client_ack(url_b, 0, -1), *c = open_client_ack(url, 0, -1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *lb = NULL, *l = NULL;
    CU_ASSERT_FATAL(hilock_lock_new(&lb, b, "silent-watch") == 0);
    CU_ASSERT_FATAL(hilock_lock_new(&l, c, "silent-watch") == 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(lb, 0, 0), 0); /* watchdog: 30 s */
    hilock_async *a = new_async();
    res r = {0};
    CU_ASSERT_EQUAL(hilock_async_acquire(a, l, 1, 25000, 10000, on_done, &r), 0);
    /* the waiter listens on the master; sentinel 0 is watched by c's
     * blocking watcher and by the async client (the first sentinel) */
    int64_t end = th_now_ms() + 10000;
    while (th_now_ms() < end &&
           (th_redis_numsub(&master, "redisson_lock__channel:{silent-watch}") < 1 ||
            sentinel_subscribers(0) < subs0 + 2))
        run_for(a, 20);
    CU_ASSERT_FATAL(th_redis_numsub(&master, "redisson_lock__channel:{silent-watch}") >= 1);
    CU_ASSERT_FATAL(sentinel_subscribers(0) >= subs0 + 2);
    kill(sent[0].pid, SIGSTOP);
    int one = 1;
    int ok = th_wait_for(failover_taken_by, &one, 20000);
    end = th_now_ms() + 20000;
    while (ok && (sentinel_master_port(1) != replica.port || sentinel_master_port(2) != replica.port))
        if (th_now_ms() > end)
            ok = 0;
        else
            run_for(a, 50);
    /* the unlock on the new master, by a client that asks the sentinels now */
    hilock_client *d = ok ? open_client_ack(url_b, 0, -1) : NULL;
    hilock_lock *ld = NULL;
    int deleted = 0;
    int64_t released_at = th_now_ms();
    ok = ok && d && hilock_lock_new(&ld, d, "silent-watch") == 0 &&
         hilock_lock_force_unlock(&deleted, ld) == 0 && deleted == 1;
    if (ok)
        run_until(a, &r, 1, 25000);
    kill(sent[0].pid, SIGCONT);
    CU_ASSERT_FATAL(ok);
    CU_ASSERT_EQUAL(r.n, 1);
    CU_ASSERT_EQUAL(r.rc, 0);
    fprintf(stderr, "async waiter granted %lld ms after the unlock on the new master (%s)\n",
            (long long)(r.at - released_at), r.rc ? r.err : "ok");
    /* with a deaf watch: once the sentinels had demoted the old master */
    CU_ASSERT(r.n == 1 && r.at - released_at < 5000);
    if (r.n == 1 && r.rc == 0) {
        memset(&r, 0, sizeof r);
        CU_ASSERT_EQUAL(hilock_async_release(a, l, 1, on_done, &r), 0);
        CU_ASSERT(run_until(a, &r, 1, 5000) && r.rc == 0);
    }
    free_async(a);
    hilock_lock_free(l);
    hilock_lock_free(lb);
    hilock_lock_free(ld);
    hilock_client_close(c);
    hilock_client_close(b);
    hilock_client_close(d);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("sentinel", init_suite, clean_suite);
    CU_add_test(s, "sentinel URLs and master discovery", t_urls);
    CU_add_test(s, "a silent sentinel is named, with the time waited", t_sentinel_silent);
    CU_add_test(s, "non-blocking API: the failing sentinel is named, with what happened",
                t_async_sentinel_failure_named);
    CU_add_test(s, "replica acknowledgement (WAIT) on acquire", t_replica_ack);
    CU_add_test(s, "no acknowledgement: acquire fails, nothing left", t_replica_ack_failure);
    CU_add_test(s, "acknowledgement on, no replicas: no WAIT", t_replica_ack_no_replicas);
    CU_add_test(s, "non-blocking API: discovery, replica acknowledgement", t_async);
    CU_add_test(s, "non-blocking API: the sentinel stalls, the known master is used",
                t_async_sentinel_stalled);
    CU_add_test(s, "a stalled master's settling names it", t_settling_names_master);
    CU_add_test(s, "failover while held and waited on", t_failover);
    CU_add_test(s, "a new master without replicas: grants not acknowledged",
                t_new_master_without_replicas);
    CU_add_test(s, "non-blocking API: the watched sentinel goes silent, the failover is followed",
                t_async_silent_watch);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
