/*
 * TLS against real servers: redis-server with --tls-port and a throwaway CA
 * made by make_certs.sh (openssl). One server (verified, mutual TLS, bad
 * certificates, wrong ports), a TLS cluster (tls-cluster yes: every node
 * reached over TLS) and a TLS sentinel with its own password.
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
#include "internal.h"
#include "hilock/adapters/epoll.h"

static char certs[64];     /* directory of the throwaway certificates */
static th_redis srv;       /* plain port + TLS port (client certs optional) */
static int srv_tls;        /* its TLS port */
static th_redis mtls;      /* TLS port that requires a client certificate */
static int mtls_tls;
static th_redis expired;   /* TLS port with an expired certificate */
static int expired_tls;

static const char *cert(const char *name)
{
    static char buf[8][160];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", certs, name);
    return b;
}

/* Start a server with a TLS port (its number in *tls_port). */
static int start_tls(th_redis *r, int *tls_port, const char *crt, const char *key,
                     const char *auth_clients, const char *more)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        *tls_port = th_free_port();
        char extra[512];
        snprintf(extra, sizeof extra,
                 "--tls-port %d --tls-cert-file %s --tls-key-file %s --tls-ca-cert-file %s "
                 "--tls-auth-clients %s %s",
                 *tls_port, cert(crt), cert(key), cert("ca.crt"), auth_clients, more ? more : "");
        if (th_redis_start(r, extra) == 0)
            return 0;
    }
    return -1;
}

static void clean_certs(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", certs);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", certs);
}

static int init_single(void)
{
    snprintf(certs, sizeof certs, "/tmp/hilock-certs-XXXXXX");
    if (!mkdtemp(certs))
        return -1;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "bash %s/make_certs.sh %s", HILOCK_TEST_DIR, certs);
    if (system(cmd) != 0)
        return -1;
    atexit(clean_certs);
    if (start_tls(&srv, &srv_tls, "server.crt", "server.key", "optional", NULL) ||
        start_tls(&mtls, &mtls_tls, "server.crt", "server.key", "yes", NULL) ||
        start_tls(&expired, &expired_tls, "expired.crt", "expired.key", "no", NULL))
        return -1;
    return 0;
}

static int clean_single(void)
{
    th_redis_stop(&srv);
    th_redis_stop(&mtls);
    th_redis_stop(&expired);
    return 0;
}

static hilock_options opts_ca(const char *ca)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.connect_timeout_ms = 1000;
    o.tls_ca_file = ca ? cert(ca) : NULL;
    return o;
}

/* Open url with o; returns the code, *elapsed_ms the time it took. */
static int try_open(const char *url, const hilock_options *o, char *msg, size_t len,
                    int64_t *elapsed_ms)
{
    hilock_client *c = NULL;
    int64_t t0 = th_now_ms();
    int rc = hilock_client_open(&c, url, o, msg, len);
    if (elapsed_ms)
        *elapsed_ms = th_now_ms() - t0;
    int leaked = rc != HILOCK_OK && c != NULL;
    hilock_client_close(c);
    return leaked ? -1000 : rc; /* a failed open leaves *out NULL */
}

/* A client of srv's TLS port opened with o (NULL: the test CA) and its lock
 * name in *l; 0, or the code with the detail printed and nothing left open. */
static int tls_lock(hilock_client **c, hilock_lock **l, const hilock_options *o, const char *name)
{
    char url[128], msg[256] = "";
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", srv_tls);
    hilock_options ca = opts_ca("ca.crt");
    *c = NULL;
    *l = NULL;
    int rc = hilock_client_open(c, url, o ? o : &ca, msg, sizeof msg);
    if (rc == HILOCK_OK)
        rc = hilock_lock_new(l, *c, name);
    if (rc != HILOCK_OK) {
        printf("\n  %s: %s %s\n", url, hilock_strerror(rc), msg);
        hilock_client_close(*c);
        *c = NULL;
    }
    return rc;
}

static void t_verified(void)
{
    char url[128], msg[256];
    hilock_client *c;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(tls_lock(&c, &l, NULL, "tls:basic"), HILOCK_OK);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), HILOCK_OK);
    /* the data is on the server, seen through its plain port */
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS tls:basic"), 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_OK);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS tls:basic"), 0);
    hilock_lock_free(l);
    hilock_client_close(c);

    /* the host name form (DNS SAN "localhost"), settings in the query */
    snprintf(url, sizeof url, "rediss://localhost:%d/2?tls_ca_file=%s", srv_tls, cert("ca.crt"));
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, url, NULL, msg, sizeof msg), HILOCK_OK);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "tls:db2"), HILOCK_OK);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), HILOCK_OK);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS tls:db2"), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_OK);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* A TLS connection whose socket can no longer write (its write side shut:
 * EPIPE at once) under a caller with SIGPIPE at its default disposition
 * and unblocked: the library writes TLS records with send(MSG_NOSIGNAL)
 * through its own socket BIO and calls without a signal mask, so the
 * record's write fails quietly and the command goes out on a new
 * connection. With OpenSSL's socket BIO (write(2)) and no mask the process
 * dies of SIGPIPE here. */
static void t_sigpipe_caller(void)
{
    struct sigaction old, dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    CU_ASSERT_EQUAL_FATAL(sigaction(SIGPIPE, &dfl, &old), 0);
    sigset_t pipe_only, was;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    CU_ASSERT_EQUAL_FATAL(pthread_sigmask(SIG_UNBLOCK, &pipe_only, &was), 0);
    hilock_client *c;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(tls_lock(&c, &l, NULL, "tls:sigpipe"), HILOCK_OK);
    for (int round = 0; round < 3; round++) {
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), HILOCK_OK);
        CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_OK);
        CU_ASSERT_EQUAL_FATAL(th_pool_shut_writes(c), 1);
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), HILOCK_OK);
        CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_OK);
    }
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS tls:sigpipe"), 0);
    sigset_t pend;
    sigpending(&pend);
    CU_ASSERT_FALSE(sigismember(&pend, SIGPIPE));
    hilock_lock_free(l);
    hilock_client_close(c);
    pthread_sigmask(SIG_SETMASK, &was, NULL);
    sigaction(SIGPIPE, &old, NULL);
}

/* Every pooled TLS connection killed while idle (CLIENT KILL from a side
 * connection): the next calls go on (the idle ones found closed are dropped
 * before anything is written on them). */
static void t_dead_idle_pool(void)
{
    enum { POOL = 4 };
    hilock_options o = opts_ca("ca.crt");
    o.pool_size = POOL;
    hilock_client *c;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(tls_lock(&c, &l, &o, "tls:dead-idle"), HILOCK_OK);
    hilock_lock *ls[POOL];
    for (int i = 0; i < POOL; i++) {
        char name[32];
        snprintf(name, sizeof name, "tls:dead-idle-%d", i);
        CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&ls[i], c, name), HILOCK_OK);
    }
    hilock_multilock *m = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_multilock_new(&m, ls, POOL), HILOCK_OK);
    for (int round = 0; round < 2; round++) {
        for (int tries = 0; tries < 100 && th_pool_idle(c) < POOL; tries++) {
            CU_ASSERT_EQUAL(hilock_multilock_acquire(m, 0, 10000), HILOCK_OK);
            CU_ASSERT_EQUAL(hilock_multilock_release(m), HILOCK_OK);
        }
        CU_ASSERT_EQUAL_FATAL(th_pool_idle(c), POOL);
        CU_ASSERT(th_redis_int(&srv, "CLIENT KILL TYPE normal") >= POOL);
        int rc = round == 0 ? hilock_lock_acquire(l, 0, 10000) : hilock_lock_release(l);
        if (rc != HILOCK_OK)
            printf("\n  %s: %s\n", round == 0 ? "acquire" : "release", hilock_lock_errmsg(l));
        CU_ASSERT_EQUAL(rc, HILOCK_OK);
    }
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS tls:dead-idle"), 0);
    hilock_multilock_free(m);
    for (int i = 0; i < POOL; i++)
        hilock_lock_free(ls[i]);
    hilock_lock_free(l);
    hilock_client_close(c);
}

typedef struct {
    hilock_lock *l;
    int rc;
    int64_t waited;
} waiter_arg;

static void *waiter_main(void *p)
{
    waiter_arg *a = p;
    int64_t t0 = th_now_ms();
    a->rc = hilock_lock_acquire_tid(a->l, 2, 10000, 10000);
    a->waited = th_now_ms() - t0;
    if (a->rc == HILOCK_OK)
        hilock_lock_release_tid(a->l, 2);
    return NULL;
}

/* A waiter is woken by the unlock message over TLS (pub/sub listener), and
 * the watchdog renews over TLS. */
static void t_handoff_and_watchdog(void)
{
    hilock_options o = opts_ca("ca.crt");
    o.watchdog_lease_ms = 600;
    hilock_client *c;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(tls_lock(&c, &l, &o, "tls:handoff"), HILOCK_OK);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire_tid(l, 1, 0, HILOCK_LEASE_WATCHDOG), HILOCK_OK);
    waiter_arg a = {l, -100, 0};
    pthread_t th;
    pthread_create(&th, NULL, waiter_main, &a);
    /* 3 leases long: only renewals keep the lock */
    th_sleep_ms(1800);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS tls:handoff"), 1);
    CU_ASSERT(th_redis_int(&srv, "PTTL tls:handoff") > 0);
    CU_ASSERT_EQUAL(hilock_lock_is_lost_tid(l, 1), 0);
    int64_t t_release = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), HILOCK_OK);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(a.rc, HILOCK_OK);
    /* woken by the message, long before the 10 s lease of nothing */
    CU_ASSERT(th_now_ms() - t_release < 3000);
    hilock_lock_free(l);
    hilock_client_close(c);
}

static void async_done(hilock_async *a, int rc, int64_t value, void *payload)
{
    (void)a, (void)value;
    int *r = payload;
    r[0]++;
    r[1] = rc;
}

static int async_run_until(hilock_epoll *ep, hilock_async *a, const int *r, int n)
{
    int64_t end = th_now_ms() + 5000;
    while (r[0] < n && th_now_ms() < end)
        hilock_epoll_run_once(ep, a, 50);
    return r[0] >= n;
}

/* The non-blocking API over TLS: its own connections make the handshake on
 * the loop; a waiter is woken by the unlock message over TLS. */
static void t_async(void)
{
    hilock_client *c;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(tls_lock(&c, &l, NULL, "tls:async"), HILOCK_OK);
    hilock_epoll ep;
    CU_ASSERT_FATAL(hilock_epoll_init(&ep) == 0);
    hilock_async_loop loop = hilock_epoll_loop(&ep);
    hilock_async *a = NULL;
    CU_ASSERT_FATAL(hilock_async_new(&a, &loop) == 0);
    int r1[2] = {0, -100}, r2[2] = {0, -100}, r3[2] = {0, -100};
    CU_ASSERT(hilock_async_acquire(a, l, 1, 0, 30000, async_done, r1) == 0);
    CU_ASSERT_FATAL(async_run_until(&ep, a, r1, 1));
    CU_ASSERT_EQUAL(r1[1], HILOCK_OK);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS tls:async"), 1);
    CU_ASSERT(hilock_async_acquire(a, l, 2, 5000, 30000, async_done, r2) == 0);
    int64_t end = th_now_ms() + 5000; /* asleep on its subscription */
    long long subs = 0;
    while (subs != 1 && th_now_ms() < end) {
        hilock_epoll_run_once(&ep, a, 5);
        redisContext *ctx = th_redis_connect(&srv);
        redisReply *rr = ctx ? redisCommand(ctx, "PUBSUB NUMSUB redisson_lock__channel:{tls:async}")
                             : NULL;
        if (rr && rr->type == REDIS_REPLY_ARRAY && rr->elements == 2)
            subs = rr->element[1]->integer;
        if (rr)
            freeReplyObject(rr);
        if (ctx)
            redisFree(ctx);
    }
    CU_ASSERT_EQUAL(subs, 1);
    CU_ASSERT_EQUAL(r2[0], 0);
    int64_t t0 = th_now_ms();
    CU_ASSERT(hilock_async_release(a, l, 1, async_done, r3) == 0);
    CU_ASSERT(async_run_until(&ep, a, r2, 1));
    CU_ASSERT_EQUAL(r2[1], HILOCK_OK);
    CU_ASSERT(th_now_ms() - t0 < 3000);
    CU_ASSERT(r3[0] == 1 && r3[1] == HILOCK_OK);
    CU_ASSERT(hilock_async_release(a, l, 2, async_done, r3) == 0);
    CU_ASSERT(async_run_until(&ep, a, r3, 2) && r3[1] == HILOCK_OK);
    CU_ASSERT_EQUAL(th_redis_int(&srv, "EXISTS tls:async"), 0);
    hilock_async_free(a);
    hilock_epoll_close(&ep);
    hilock_lock_free(l);
    hilock_client_close(c);
}

static void t_wrong_ca(void)
{
    char url[128], msg[256] = "";
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", srv_tls);
    hilock_options o = opts_ca("other-ca.crt");
    int64_t ms;
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, &ms), HILOCK_ETLS);
    CU_ASSERT(strstr(msg, "certificate") != NULL);
    CU_ASSERT(ms < 1500);
    /* no CA given: the system's store does not know the test CA either */
    o = opts_ca(NULL);
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, &ms), HILOCK_ETLS);
    /* skip-verify (tests only) accepts it */
    o = opts_ca("other-ca.crt");
    o.tls_insecure = 1;
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, &ms), HILOCK_OK);
}

static void t_expired(void)
{
    char url[128], msg[256] = "";
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", expired_tls);
    hilock_options o = opts_ca("ca.crt");
    int64_t ms;
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, &ms), HILOCK_ETLS);
    CU_ASSERT(strstr(msg, "expired") != NULL);
    CU_ASSERT(ms < 1500);
}

static void t_wrong_name(void)
{
    char url[128], msg[256] = "";
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", srv_tls);
    hilock_options o = opts_ca("ca.crt");
    o.tls_server_name = "redis.example.org";
    int64_t ms;
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, &ms), HILOCK_ETLS);
    CU_ASSERT(strstr(msg, "redis.example.org") != NULL);
    /* the right name through the query parameter */
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_server_name=localhost", srv_tls);
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, &ms), HILOCK_OK);
}

static void t_wrong_ports(void)
{
    char url[128], msg[256] = "";
    int64_t ms;
    /* plain client to the TLS port */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv_tls);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1000;
    int rc = try_open(url, &o, msg, sizeof msg, &ms);
    CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
    if (!strstr(msg, "rediss://"))
        printf("\n  plain to TLS port: %s\n", msg);
    CU_ASSERT(strstr(msg, "rediss://") != NULL);
    CU_ASSERT(ms < 2500);
    /* TLS client to the plain port: refused or silent, within the connect timeout */
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", srv.port);
    o = opts_ca("ca.crt");
    rc = try_open(url, &o, msg, sizeof msg, &ms);
    CU_ASSERT(rc == HILOCK_ETLS || rc == HILOCK_ECONN);
    CU_ASSERT(strstr(msg, "TLS") != NULL);
    CU_ASSERT(ms < 2500);
}

static void t_mutual(void)
{
    char url[128], msg[256] = "";
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", mtls_tls);
    hilock_options o = opts_ca("ca.crt");
    int64_t ms;
    /* no client certificate: refused, as a TLS error */
    int rc = try_open(url, &o, msg, sizeof msg, &ms);
    if (rc != HILOCK_ETLS)
        printf("\n  no client certificate: %d %s\n", rc, msg);
    CU_ASSERT_EQUAL(rc, HILOCK_ETLS);
    CU_ASSERT(ms < 2500);
    /* a certificate from another CA: refused */
    o.tls_cert_file = cert("other.crt");
    o.tls_key_file = cert("other.key");
    rc = try_open(url, &o, msg, sizeof msg, &ms);
    if (rc != HILOCK_ETLS)
        printf("\n  other CA's client certificate: %d %s\n", rc, msg);
    CU_ASSERT_EQUAL(rc, HILOCK_ETLS);
    /* ours: accepted */
    o.tls_cert_file = cert("client.crt");
    o.tls_key_file = cert("client.key");
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, url, &o, msg, sizeof msg), HILOCK_OK);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "tls:mutual"), HILOCK_OK);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 5000), HILOCK_OK);
    CU_ASSERT_EQUAL(th_redis_int(&mtls, "EXISTS tls:mutual"), 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_OK);
    hilock_lock_free(l);
    hilock_client_close(c);
    /* and in the URL's query */
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_cert_file=%s&tls_key_file=%s", mtls_tls,
             cert("client.crt"), cert("client.key"));
    o = opts_ca("ca.crt");
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, &ms), HILOCK_OK);
}

static void t_bad_settings(void)
{
    char url[128], msg[256] = "";
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", srv_tls);
    hilock_options o = opts_ca(NULL);
    o.tls_ca_file = "/nonexistent/ca.pem";
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, NULL), HILOCK_EINVAL);
    CU_ASSERT(strstr(msg, "/nonexistent/ca.pem") != NULL);
    o = opts_ca("ca.crt");
    o.tls_cert_file = cert("client.crt"); /* no key */
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, NULL), HILOCK_EINVAL);
    /* TLS settings on a plain URL are a mistake, not silently ignored */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.port);
    o = opts_ca("ca.crt");
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, NULL), HILOCK_EINVAL);
    /* ... but the tls option turns TLS on for a redis:// URL */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv_tls);
    o.tls = 1;
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, NULL), HILOCK_OK);
    CU_ASSERT_STRING_EQUAL(hilock_strerror(HILOCK_ETLS),
                           "TLS handshake failed (certificate not verified or refused)");
}

/* ---- TLS cluster: tls-cluster yes, every node reached over TLS ---- */
#define NNODES 3
static th_redis node[NNODES];
static int node_tls[NNODES];

static int init_cluster(void)
{
    for (int i = 0; i < NNODES; i++) {
        char more[128];
        int bus = th_free_port();
        snprintf(more, sizeof more,
                 "--cluster-enabled yes --cluster-config-file nodes.conf --cluster-port %d "
                 "--tls-cluster yes",
                 bus);
        if (start_tls(&node[i], &node_tls[i], "server.crt", "server.key", "no", more))
            return -1;
    }
    return th_cluster_create(node, NNODES, 0);
}

static int clean_cluster(void)
{
    th_cluster_stop(node, NNODES);
    return 0;
}

static void t_cluster(void)
{
    char url[512], msg[256] = "";
    snprintf(url, sizeof url, "rediss+cluster://127.0.0.1:%d?tls_ca_file=%s", node_tls[0],
             cert("ca.crt"));
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, url, NULL, msg, sizeof msg), HILOCK_OK);
    /* locks spread over every master: each one reached over TLS */
    int seen[NNODES] = {0};
    for (int k = 0; k < 24; k++) {
        char name[32];
        snprintf(name, sizeof name, "tls:cl:%d", k);
        hilock_lock *l = NULL;
        CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, name), HILOCK_OK);
        CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), HILOCK_OK);
        for (int i = 0; i < NNODES; i++) {
            redisContext *ctx = th_redis_connect(&node[i]);
            redisReply *r = ctx ? redisCommand(ctx, "EXISTS %s", name) : NULL;
            if (r && r->type == REDIS_REPLY_INTEGER && r->integer == 1)
                seen[i]++;
            if (r)
                freeReplyObject(r);
            if (ctx)
                redisFree(ctx);
        }
        CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_OK);
        hilock_lock_free(l);
    }
    for (int i = 0; i < NNODES; i++)
        CU_ASSERT(seen[i] > 0);
    hilock_client_close(c);
    /* a wrong CA is refused by the seed already */
    snprintf(url, sizeof url, "rediss+cluster://127.0.0.1:%d?tls_ca_file=%s", node_tls[0],
             cert("other-ca.crt"));
    int rc = try_open(url, NULL, msg, sizeof msg, NULL);
    if (rc != HILOCK_ETLS)
        printf("\n  cluster, wrong CA: %d %s\n", rc, msg);
    CU_ASSERT_EQUAL(rc, HILOCK_ETLS);
}

/* ---- TLS sentinel with its own password ---- */
static th_redis smaster;
static int smaster_tls;
static pid_t sent_pid;
static int sent_tls;
static char sent_dir[64];

static int sentinel_knows_master(void *arg)
{
    (void)arg;
    char url[256], msg[256];
    snprintf(url, sizeof url,
             "rediss+sentinel://127.0.0.1:%d/tm?sentinel_password=sp%%40ss&tls_ca_file=%s",
             sent_tls, cert("ca.crt"));
    return try_open(url, NULL, msg, sizeof msg, NULL) == HILOCK_OK;
}

static int init_sentinel(void)
{
    if (start_tls(&smaster, &smaster_tls, "server.crt", "server.key", "no", NULL))
        return -1;
    snprintf(sent_dir, sizeof sent_dir, "/tmp/hilock-tls-sentinel-XXXXXX");
    if (!mkdtemp(sent_dir))
        return -1;
    sent_tls = th_free_port();
    char conf[128];
    snprintf(conf, sizeof conf, "%s/sentinel.conf", sent_dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -1;
    fprintf(f,
            "port 0\ntls-port %d\nbind 127.0.0.1\ndir %s\n"
            "tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
            "tls-auth-clients no\ntls-replication yes\n"
            "requirepass sp@ss\n"
            "sentinel monitor tm 127.0.0.1 %d 1\n",
            sent_tls, sent_dir, cert("server.crt"), cert("server.key"), cert("ca.crt"),
            smaster_tls);
    fclose(f);
    sent_pid = th_sentinel_spawn(conf);
    if (sent_pid <= 0)
        return -1;
    return th_wait_for(sentinel_knows_master, NULL, 15000) ? 0 : -1;
}

static int clean_sentinel(void)
{
    if (sent_pid > 0) {
        kill(sent_pid, SIGKILL);
        waitpid(sent_pid, NULL, 0);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", sent_dir);
    th_redis_stop(&smaster);
    return system(cmd) == 0 ? 0 : -1;
}

static void t_sentinel(void)
{
    char url[256], msg[256] = "";
    snprintf(url, sizeof url, "rediss+sentinel://127.0.0.1:%d/tm", sent_tls);
    hilock_options o = opts_ca("ca.crt");
    o.sentinel_password = "sp@ss";
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, url, &o, msg, sizeof msg), HILOCK_OK);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "tls:sentinel"), HILOCK_OK);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), HILOCK_OK);
    CU_ASSERT_EQUAL(th_redis_int(&smaster, "EXISTS tls:sentinel"), 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_OK);
    hilock_lock_free(l);
    hilock_client_close(c);
    /* without the sentinel's password: refused, and the message says why */
    o.sentinel_password = NULL;
    CU_ASSERT_NOT_EQUAL(try_open(url, &o, msg, sizeof msg, NULL), HILOCK_OK);
    CU_ASSERT(strstr(msg, "NOAUTH") != NULL || strstr(msg, "auth") != NULL);
    /* a wrong one: HILOCK_EAUTH */
    o.sentinel_password = "nope";
    CU_ASSERT_EQUAL(try_open(url, &o, msg, sizeof msg, NULL), HILOCK_EAUTH);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("tls: one server", init_single, clean_single);
    CU_add_test(s, "verified connection, db, host name", t_verified);
    CU_add_test(s, "hand-off and watchdog over TLS", t_handoff_and_watchdog);
    CU_add_test(s, "SIGPIPE: caller thread, TLS connection that cannot write", t_sigpipe_caller);
    CU_add_test(s, "every idle pooled TLS connection killed", t_dead_idle_pool);
    CU_add_test(s, "non-blocking API over TLS", t_async);
    CU_add_test(s, "wrong CA: ETLS; skip-verify", t_wrong_ca);
    CU_add_test(s, "expired certificate: ETLS", t_expired);
    CU_add_test(s, "wrong server name: ETLS", t_wrong_name);
    CU_add_test(s, "plain to TLS port, TLS to plain port", t_wrong_ports);
    CU_add_test(s, "mutual TLS", t_mutual);
    CU_add_test(s, "bad TLS settings: EINVAL", t_bad_settings);
    CU_pSuite cl = CU_add_suite("tls: cluster", init_cluster, clean_cluster);
    CU_add_test(cl, "every node over TLS", t_cluster);
    CU_pSuite se = CU_add_suite("tls: sentinel", init_sentinel, clean_sentinel);
    CU_add_test(se, "sentinel over TLS with its own password", t_sentinel);
    return th_cu_run();
}
