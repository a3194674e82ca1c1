/*
 * ACL: the minimal rule set of docs/acl.md, read from that file, runs every
 * operation, on one server and on a 3-master cluster whose nodes all know
 * the user; a user without EVAL, PUBLISH, SUBSCRIBE (SPUBLISH on a cluster)
 * is refused at open with HILOCK_EAUTH; a lock outside the user's key patterns
 * fails with a clear NOPERM. Against a real redis-server ($HILOCK_REDIS_SERVER:
 * valkey-server).
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"

static th_redis srv;
static char rules[2048]; /* the ACL SETUSER line of docs/acl.md */

/* Run "ACL SETUSER <name> ..." built from the documented line on r. */
static int setuser_on(const th_redis *server, const char *name, const char *extra)
{
    char line[2600];
    const char *rest = rules + strlen("ACL SETUSER hilock");
    snprintf(line, sizeof line, "ACL SETUSER %s%s%s%s", name, rest, extra ? " " : "",
             extra ? extra : "");
    redisContext *ctx = th_redis_connect(server);
    if (!ctx)
        return -1;
    /* split on spaces into argv */
    char *argv[128];
    size_t lens[128];
    int argc = 0;
    for (char *t = strtok(line, " "); t && argc < 128; t = strtok(NULL, " ")) {
        argv[argc] = t;
        lens[argc++] = strlen(t);
    }
    redisReply *r = redisCommandArgv(ctx, argc, (const char **)argv, lens);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok)
        printf("\n  %s: %s\n", line, r && r->str ? r->str : "no reply");
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return ok ? 0 : -1;
}

static int setuser(const char *name, const char *extra)
{
    return setuser_on(&srv, name, extra);
}

static int init_suite(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/../../docs/acl.md", HILOCK_TEST_DIR);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[2048];
    while (fgets(buf, sizeof buf, f))
        if (!strncmp(buf, "ACL SETUSER hilock ", 19)) {
            buf[strcspn(buf, "\r\n")] = 0;
            snprintf(rules, sizeof rules, "%s", buf);
        }
    fclose(f);
    if (!rules[0] || th_redis_start(&srv, NULL))
        return -1;
    return setuser("hilock", NULL);
}

static int clean_suite(void)
{
    th_redis_stop(&srv);
    return 0;
}

static hilock_client *open_as(const char *user, int replica_ack, int *rc, char *msg, size_t len)
{
    char url[160];
    snprintf(url, sizeof url, "redis://%s:secret@127.0.0.1:%d", user, srv.port);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = 1200; /* 600 could expire between renewals on a loaded machine */
    o.replica_ack = replica_ack;
    hilock_client *c = NULL;
    *rc = hilock_client_open(&c, url, &o, msg, len);
    return c;
}

typedef struct {
    hilock_lock *l;
    uint64_t tid;
    int rc;
} waiter;

static void *wait_main(void *p)
{
    waiter *w = p;
    w->rc = hilock_lock_acquire_tid(w->l, w->tid, 10000, 5000);
    if (w->rc == HILOCK_OK)
        w->rc = hilock_lock_release_tid(w->l, w->tid);
    return NULL;
}

static void t_rule_set_runs_everything(void)
{
    char msg[256] = "";
    int rc;
    hilock_client *c = open_as("hilock", 1, &rc, msg, sizeof msg);
    if (rc)
        printf("\n  open: %s\n", msg);
    CU_ASSERT_EQUAL_FATAL(rc, HILOCK_OK);
    for (int fair = 0; fair < 2; fair++) {
        hilock_lock *l = NULL;
        const char *name = fair ? "locks:fair" : "locks:plain";
        CU_ASSERT_EQUAL_FATAL(fair ? hilock_fair_lock_new(&l, c, name) : hilock_lock_new(&l, c, name),
                              HILOCK_OK);
        /* watchdog hold, re-entered, renewed past its lease */
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 1, 0, HILOCK_LEASE_WATCHDOG), HILOCK_OK);
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 1, 0, HILOCK_LEASE_WATCHDOG), HILOCK_OK);
        int64_t n = 0;
        CU_ASSERT_EQUAL(hilock_lock_hold_count_tid(&n, l, 1), HILOCK_OK);
        CU_ASSERT_EQUAL(n, 2);
        int yes = 0;
        CU_ASSERT_EQUAL(hilock_lock_is_locked(&yes, l), HILOCK_OK);
        CU_ASSERT_EQUAL(yes, 1);
        CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&yes, l, 1), HILOCK_OK);
        CU_ASSERT_EQUAL(yes, 1);
        /* two waiters (fair: each on its own channel) */
        waiter w[2] = {{l, 2, -100}, {l, 3, -100}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&th[i], NULL, wait_main, &w[i]);
        th_sleep_ms(2600); /* > 2 leases: only renewals keep it */
        int64_t left = 0;
        CU_ASSERT_EQUAL(hilock_lock_remaining_ms(&left, l), HILOCK_OK);
        CU_ASSERT(left > 0);
        CU_ASSERT_EQUAL(hilock_lock_is_lost_tid(l, 1), 0);
        CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), HILOCK_OK);
        CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), HILOCK_OK);
        for (int i = 0; i < 2; i++) {
            pthread_join(th[i], NULL);
            CU_ASSERT_EQUAL(w[i].rc, HILOCK_OK); /* woken by the unlock message */
        }
        /* force unlock */
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 4, 0, 10000), HILOCK_OK);
        int deleted = 0;
        CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, l), HILOCK_OK);
        CU_ASSERT_EQUAL(deleted, 1);
        /* the holder hears it (a fixed lease listens on the lock's channel
         * too, under this rule set), and its release says so, fair included;
         * not owner is reported, not refused */
        int64_t end = th_now_ms() + 3000;
        while (!hilock_lock_is_lost_tid(l, 4) && th_now_ms() < end)
            th_sleep_ms(5);
        CU_ASSERT_EQUAL(hilock_lock_is_lost_tid(l, 4), 1);
        CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 4), HILOCK_ENOTOWNER);
        hilock_lock_free(l);
    }
    /* a lock outside the user's key patterns: a clear NOPERM at first use */
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "elsewhere:1"), HILOCK_OK);
    rc = hilock_lock_acquire(l, 0, 1000);
    CU_ASSERT(rc == HILOCK_EPROTO || rc == HILOCK_EAUTH);
    CU_ASSERT(strstr(hilock_lock_errmsg(l), "NOPERM") != NULL);
    hilock_lock_free(l);
    hilock_client_close(c);
}

static void t_missing_eval_or_publish(void)
{
    char msg[256] = "";
    int rc;
    CU_ASSERT_EQUAL_FATAL(setuser("noeval", "-eval"), 0);
    hilock_client *c = open_as("noeval", 0, &rc, msg, sizeof msg);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_EQUAL(rc, HILOCK_EAUTH);
    CU_ASSERT(strstr(msg, "EVAL") != NULL);
    hilock_client_close(c);

    CU_ASSERT_EQUAL_FATAL(setuser("nopublish", "-publish"), 0);
    c = open_as("nopublish", 0, &rc, msg, sizeof msg);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_EQUAL(rc, HILOCK_EAUTH);
    CU_ASSERT(strstr(msg, "publish") != NULL);
    hilock_client_close(c);

    CU_ASSERT_EQUAL_FATAL(setuser("nosubscribe", "-subscribe"), 0);
    c = open_as("nosubscribe", 0, &rc, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, HILOCK_EAUTH);
    CU_ASSERT(strstr(msg, "subscribe") != NULL);
    hilock_client_close(c);

    /* channels outside redisson_lock__channel:* */
    CU_ASSERT_EQUAL_FATAL(setuser("nochannel", "resetchannels"), 0);
    c = open_as("nochannel", 0, &rc, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, HILOCK_EAUTH);
    hilock_client_close(c);
}

/* ---- a 3-master cluster whose nodes all know the ACL user ---- */
#define NNODES 3
static th_redis node[NNODES];

static int init_cluster(void)
{
    for (int i = 0; i < NNODES; i++)
        if (th_redis_start(&node[i], "--cluster-enabled yes --cluster-config-file nodes.conf"))
            return -1;
    if (th_cluster_create(node, NNODES, 0) != 0)
        return -1;
    for (int i = 0; i < NNODES; i++)
        if (setuser_on(&node[i], "hilock", NULL) || setuser_on(&node[i], "nospublish", "-spublish"))
            return -1;
    return 0;
}

static int clean_cluster(void)
{
    th_cluster_stop(node, NNODES);
    return 0;
}

static void t_cluster_acl(void)
{
    char url[256], msg[256] = "";
    snprintf(url, sizeof url, "redis+cluster://hilock:secret@127.0.0.1:%d,127.0.0.1:%d",
             node[0].port, node[1].port);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.replica_ack = 1;
    hilock_client *c = NULL;
    int rc = hilock_client_open(&c, url, &o, msg, sizeof msg);
    if (rc)
        printf("\n  open: %s\n", msg);
    CU_ASSERT_EQUAL_FATAL(rc, HILOCK_OK);
    /* names on every master; each with a waiter woken by the sharded unlock */
    int seen[NNODES] = {0};
    for (int k = 0; k < 9; k++) {
        char name[32];
        snprintf(name, sizeof name, "locks:cl:%d", k);
        hilock_lock *l = NULL;
        CU_ASSERT_EQUAL_FATAL(k % 2 ? hilock_fair_lock_new(&l, c, name) : hilock_lock_new(&l, c, name),
                              HILOCK_OK);
        CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 1, 0, 10000), HILOCK_OK);
        for (int i = 0; i < NNODES; i++)
            seen[i] += th_redis_int(&node[i], "EXISTS %s", name) == 1;
        waiter w = {l, 2, -100};
        pthread_t th;
        pthread_create(&th, NULL, wait_main, &w);
        th_sleep_ms(100);
        CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), HILOCK_OK);
        pthread_join(th, NULL);
        CU_ASSERT_EQUAL(w.rc, HILOCK_OK);
        hilock_lock_free(l);
    }
    for (int i = 0; i < NNODES; i++)
        CU_ASSERT(seen[i] > 0);
    hilock_client_close(c);
    /* a cluster user who may not SPUBLISH is refused at open */
    snprintf(url, sizeof url, "redis+cluster://nospublish:secret@127.0.0.1:%d", node[0].port);
    c = NULL;
    CU_ASSERT_EQUAL(hilock_client_open(&c, url, NULL, msg, sizeof msg), HILOCK_EAUTH);
    CU_ASSERT(strstr(msg, "spublish") != NULL);
    CU_ASSERT_PTR_NULL(c);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("acl", init_suite, clean_suite);
    CU_add_test(s, "the documented rule set runs every operation", t_rule_set_runs_everything);
    CU_add_test(s, "no EVAL / PUBLISH / SUBSCRIBE: EAUTH at open", t_missing_eval_or_publish);
    CU_pSuite cl = CU_add_suite("acl: cluster", init_cluster, clean_cluster);
    CU_add_test(cl, "the rule set on every node of a cluster", t_cluster_acl);
    return th_cu_run();
}
