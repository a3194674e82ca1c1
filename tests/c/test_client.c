/*
 * Client: URL parsing, opening against real servers (password, ACL user,
 * database, unix socket), unreachable and hung servers, command timeouts,
 * reconnect after a restart, version/strerror, NULL-safety, use after close
 * and after fork(), threads ending with the client.
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"
#include "internal.h"

static th_redis asrv; /* --requirepass secret */
static th_redis usrv; /* unix socket */
static char usock[128];

static hilock_client *open_ok(const char *url, const hilock_options *o)
{
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, url, o, err, sizeof err);
    if (rc != 0)
        printf("\n  open %s: %d %s (%s)\n", url, rc, hilock_strerror(rc), err);
    CU_ASSERT_EQUAL(rc, 0);
    return c;
}

/* ---------------------------------------------------------------- URL */

static void t_url_ok(void)
{
    hl_endpoint ep;
    char err[HL_ERRMSG_MAX];

    memset(&ep, 0, sizeof ep);
    CU_ASSERT_EQUAL_FATAL(hl_endpoint_parse(&ep, "redis://127.0.0.1:6380", err), 0);
    CU_ASSERT_STRING_EQUAL(ep.host, "127.0.0.1");
    CU_ASSERT_EQUAL(ep.port, 6380);
    CU_ASSERT_EQUAL(ep.db, 0);
    CU_ASSERT_PTR_NULL(ep.path);
    CU_ASSERT_PTR_NULL(ep.password);
    CU_ASSERT(ep.user == NULL || ep.user[0] == 0);
    hl_endpoint_free(&ep);

    memset(&ep, 0, sizeof ep);
    CU_ASSERT_EQUAL_FATAL(hl_endpoint_parse(&ep, "redis://localhost", err), 0);
    CU_ASSERT_STRING_EQUAL(ep.host, "localhost");
    CU_ASSERT_EQUAL(ep.port, 6379);
    hl_endpoint_free(&ep);

    memset(&ep, 0, sizeof ep);
    CU_ASSERT_EQUAL_FATAL(hl_endpoint_parse(&ep, "redis://alice:s3cret@db.example:1234/5", err), 0);
    CU_ASSERT_STRING_EQUAL(ep.host, "db.example");
    CU_ASSERT_EQUAL(ep.port, 1234);
    CU_ASSERT_STRING_EQUAL(ep.user, "alice");
    CU_ASSERT_STRING_EQUAL(ep.password, "s3cret");
    CU_ASSERT_EQUAL(ep.db, 5);
    hl_endpoint_free(&ep);

    memset(&ep, 0, sizeof ep);
    CU_ASSERT_EQUAL_FATAL(hl_endpoint_parse(&ep, "redis://:pw@h", err), 0);
    CU_ASSERT(ep.user == NULL || ep.user[0] == 0);
    CU_ASSERT_STRING_EQUAL(ep.password, "pw");
    CU_ASSERT_EQUAL(ep.port, 6379);
    hl_endpoint_free(&ep);

    memset(&ep, 0, sizeof ep);
    CU_ASSERT_EQUAL_FATAL(hl_endpoint_parse(&ep, "redis://h:7000/15", err), 0);
    CU_ASSERT_EQUAL(ep.db, 15);
    hl_endpoint_free(&ep);

    memset(&ep, 0, sizeof ep);
    CU_ASSERT_EQUAL_FATAL(hl_endpoint_parse(&ep, "unix:///tmp/r.sock", err), 0);
    CU_ASSERT_STRING_EQUAL(ep.path, "/tmp/r.sock");
    CU_ASSERT_PTR_NULL(ep.host);
    CU_ASSERT_EQUAL(ep.db, 0);
    hl_endpoint_free(&ep);

    memset(&ep, 0, sizeof ep);
    CU_ASSERT_EQUAL_FATAL(hl_endpoint_parse(&ep, "unix:///var/run/r.sock?db=3", err), 0);
    CU_ASSERT_STRING_EQUAL(ep.path, "/var/run/r.sock");
    CU_ASSERT_EQUAL(ep.db, 3);
    hl_endpoint_free(&ep);

    memset(&ep, 0, sizeof ep);
    CU_ASSERT_EQUAL_FATAL(
        hl_endpoint_parse(&ep, "unix:///tmp/r.sock?db=2&password=p%w&user=bob", err), 0);
    CU_ASSERT_STRING_EQUAL(ep.path, "/tmp/r.sock");
    CU_ASSERT_EQUAL(ep.db, 2);
    CU_ASSERT_STRING_EQUAL(ep.user, "bob");
    CU_ASSERT_PTR_NOT_NULL(ep.password);
    hl_endpoint_free(&ep);
}

static void t_url_bad(void)
{
    const char *bad[] = {"",
                         "http://h:6379",
                         "redis://",
                         "redis://h:abc",
                         "redis://h:65536",
                         "redis://h:-1",
                         "redis://h/x",
                         "redis://h/-1",
                         "unix://",
                         "unix:///tmp/s?db=x",
                         "127.0.0.1:6379"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hl_endpoint ep;
        char err[HL_ERRMSG_MAX] = "";
        memset(&ep, 0, sizeof ep);
        int rc = hl_endpoint_parse(&ep, bad[i], err);
        if (rc != HILOCK_EINVAL)
            printf("\n  URL \"%s\" accepted (rc=%d)\n", bad[i], rc);
        CU_ASSERT_EQUAL(rc, HILOCK_EINVAL);
        CU_ASSERT(err[0] != 0);
        hl_endpoint_free(&ep);

        hilock_client *c = (hilock_client *)&ep; /* must be overwritten with NULL */
        char msg[128] = "";
        CU_ASSERT_EQUAL(hilock_client_open(&c, bad[i], NULL, msg, sizeof msg), HILOCK_EINVAL);
        CU_ASSERT_PTR_NULL(c);
        CU_ASSERT(msg[0] != 0);
    }
    /* errbuf may be NULL; a tiny errbuf is truncated, still terminated. */
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL(hilock_client_open(&c, "nope://", NULL, NULL, 0), HILOCK_EINVAL);
    char tiny[4] = {'x', 'x', 'x', 'x'};
    CU_ASSERT_EQUAL(hilock_client_open(&c, "nope://", NULL, tiny, sizeof tiny), HILOCK_EINVAL);
    CU_ASSERT(memchr(tiny, 0, sizeof tiny) != NULL);
}

/* ---------------------------------------------------------------- basics */

static void t_version_strerror(void)
{
    CU_ASSERT_EQUAL(hilock_version(), HILOCK_VERSION_NUMBER);
    CU_ASSERT_STRING_EQUAL(hilock_version_string(), HILOCK_VERSION_STRING);
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", HILOCK_VERSION_MAJOR, HILOCK_VERSION_MINOR,
             HILOCK_VERSION_PATCH);
    CU_ASSERT_STRING_EQUAL(HILOCK_VERSION_STRING, expect);

    const char *seen[14];
    for (int code = 0; code >= HILOCK_EUNACKED; code--) {
        const char *s = hilock_strerror(code);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        CU_ASSERT(s[0] != 0);
        for (int j = 0; j < -code; j++)
            CU_ASSERT(strcmp(seen[j], s) != 0);
        seen[-code] = s;
    }
    CU_ASSERT_PTR_NOT_NULL(hilock_strerror(-999));
    CU_ASSERT_PTR_NOT_NULL(hilock_strerror(7));
    CU_ASSERT_PTR_NOT_NULL(hilock_strerror(INT32_MIN));
}

static void t_options(void)
{
    hilock_options o;
    memset(&o, 0xff, sizeof o);
    CU_ASSERT_EQUAL(hilock_options_init(&o, HILOCK_OPTIONS_VERSION), 0);
    CU_ASSERT_EQUAL(o.version, HILOCK_OPTIONS_VERSION);
    CU_ASSERT_EQUAL(o.connect_timeout_ms, 1000);
    CU_ASSERT_EQUAL(o.command_timeout_ms, 1000);
    CU_ASSERT_EQUAL(o.watchdog_lease_ms, 30000);
    CU_ASSERT_EQUAL(o.fair_wait_window_ms, 300000);
    CU_ASSERT_EQUAL(o.pool_size, 8);
    CU_ASSERT_EQUAL(hilock_options_init(NULL, HILOCK_OPTIONS_VERSION), HILOCK_EINVAL);

    /* Negative option values are refused at open. */
    hilock_options bad = HILOCK_OPTIONS_INIT;
    bad.command_timeout_ms = -5;
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL(hilock_client_open(&c, th_srv.url, &bad, NULL, 0), HILOCK_EINVAL);
    CU_ASSERT_PTR_NULL(c);
    hilock_options bad2 = HILOCK_OPTIONS_INIT;
    bad2.pool_size = -1;
    CU_ASSERT_EQUAL(hilock_client_open(&c, th_srv.url, &bad2, NULL, 0), HILOCK_EINVAL);
    hilock_client_close(c);
}

static void t_null_safety(void)
{
    hilock_client_close(NULL);
    hilock_lock_free(NULL);
    hilock_multilock_free(NULL);

    hilock_client *c = NULL;
    CU_ASSERT_EQUAL(hilock_client_open(NULL, th_srv.url, NULL, NULL, 0), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_open(&c, NULL, NULL, NULL, 0), HILOCK_EINVAL);
    CU_ASSERT_PTR_NULL(c);

    c = open_ok(th_srv.url, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL(hilock_lock_new(NULL, c, "x"), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_lock_new(&l, NULL, "x"), HILOCK_EINVAL);
    CU_ASSERT_PTR_NULL(l);
    CU_ASSERT_EQUAL(hilock_lock_acquire(NULL, 0, 1000), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_lock_release(NULL), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(NULL, NULL), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_client_owner(NULL, 1, (char[64]){0}, 64), HILOCK_EINVAL);

    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "null-safety"), 0);
    int x = 0;
    int64_t v = 0;
    CU_ASSERT_EQUAL(hilock_lock_is_locked(NULL, l), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_lock_is_locked(&x, NULL), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_lock_is_held(NULL, l), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_lock_hold_count(NULL, l), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_lock_hold_count(&v, NULL), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_lock_remaining_ms(NULL, l), HILOCK_EINVAL);
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(NULL, l), 0); /* deleted may be NULL */
    CU_ASSERT_PTR_NOT_NULL(hilock_lock_errmsg(l));
    CU_ASSERT_PTR_NOT_NULL(hilock_client_errmsg(c));
    hilock_lock_free(l);
    hilock_client_close(c);
}

static int is_uuid(const char *s)
{
    if (!s || strlen(s) != 36)
        return 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return 0;
        } else if (!strchr("0123456789abcdef", s[i])) {
            return 0;
        }
    }
    /* version 4 (random), variant 10xx (RFC 9562) */
    return s[14] == '4' && strchr("89ab", s[19]) != NULL;
}

static void t_open_identity(void)
{
    hilock_client *a = open_ok(th_srv.url, NULL);
    hilock_client *b = open_ok(th_srv.url, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT(is_uuid(hilock_client_id(a)));
    CU_ASSERT(is_uuid(hilock_client_id(b)));
    CU_ASSERT(strcmp(hilock_client_id(a), hilock_client_id(b)) != 0);

    char buf[64], expect[64];
    CU_ASSERT_EQUAL(hilock_client_owner(a, 42, buf, sizeof buf), 0);
    snprintf(expect, sizeof expect, "%s:42", hilock_client_id(a));
    CU_ASSERT_STRING_EQUAL(buf, expect);
    CU_ASSERT_EQUAL(hilock_client_owner(a, UINT64_MAX, buf, 58), 0);
    snprintf(expect, sizeof expect, "%s:18446744073709551615", hilock_client_id(a));
    CU_ASSERT_STRING_EQUAL(buf, expect);
    CU_ASSERT(hilock_client_owner(a, 42, buf, 10) < 0);

    CU_ASSERT(hilock_thread_id() != 0);
    CU_ASSERT_EQUAL(hilock_thread_id(), hilock_thread_id());
    hilock_client_close(a);
    hilock_client_close(b);
}

static void *tid_thread(void *arg)
{
    *(uint64_t *)arg = hilock_thread_id();
    return NULL;
}

static void t_thread_ids_differ(void)
{
    uint64_t other = 0;
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, tid_thread, &other), 0);
    pthread_join(th, NULL);
    CU_ASSERT(other != 0);
    CU_ASSERT(other != hilock_thread_id());
}

/* ---------------------------------------------------------------- failures */

static void t_unreachable_port(void)
{
    int port = th_free_port();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.connect_timeout_ms = 500;
    hilock_client *c = NULL;
    char err[256] = "";
    int64_t t0 = th_now_ms();
    int rc = hilock_client_open(&c, url, &o, err, sizeof err);
    int64_t dt = th_now_ms() - t0;
    CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT(err[0] != 0);
    CU_ASSERT(dt < 500 + 300);
    hilock_client_close(c);
}

static void t_hung_server(void)
{
    /* A stopped server: TCP connects (the kernel accepts) but nothing answers.
     * Opening must fail with ECONN within the timeouts, never hang. */
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    th_redis_pause(&h);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.connect_timeout_ms = 300;
    o.command_timeout_ms = 300;
    hilock_client *c = NULL;
    int64_t t0 = th_now_ms();
    int rc = hilock_client_open(&c, h.url, &o, NULL, 0);
    int64_t dt = th_now_ms() - t0;
    th_redis_resume(&h);
    CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
    CU_ASSERT_PTR_NULL(c);
    if (dt >= 300 + 300 + 500)
        printf("\n  open against a hung server took %lld ms\n", (long long)dt);
    CU_ASSERT(dt < 300 + 300 + 500);
    hilock_client_close(c);
    th_redis_stop(&h);
}

static void t_command_timeout_and_resync(void)
{
    /* A command on a hung server fails with ECONN after the command timeout;
     * once the server is back, replies are not mixed up with the one that
     * arrived late on the timed-out connection. */
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.command_timeout_ms = 300;
    o.pool_size = 1;
    hilock_client *c = open_ok(h.url, &o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *held = NULL, *free_ = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&held, c, "held"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&free_, c, "free"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(held, 0, 60000), 0);

    th_redis_pause(&h);
    int x = -1;
    int64_t t0 = th_now_ms();
    int rc = hilock_lock_is_locked(&x, free_);
    int64_t dt = th_now_ms() - t0;
    th_redis_resume(&h);
    CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
    CU_ASSERT(dt >= 250 && dt < 300 + 500);
    CU_ASSERT(strlen(hilock_lock_errmsg(free_)) > 0);

    int mismatches = 0, failures = 0;
    for (int i = 0; i < 20; i++) {
        int a = -1, b = -1;
        if (hilock_lock_is_locked(&a, held) != 0)
            failures++;
        else if (a != 1)
            mismatches++;
        if (hilock_lock_is_locked(&b, free_) != 0)
            failures++;
        else if (b != 0)
            mismatches++;
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    CU_ASSERT(failures <= 1);
    CU_ASSERT_EQUAL(hilock_lock_release(held), 0);
    hilock_lock_free(held);
    hilock_lock_free(free_);
    hilock_client_close(c);
    th_redis_stop(&h);
}

static void t_reconnect_after_restart(void)
{
    th_redis h;
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&h, NULL), 0);
    hilock_client *c = open_ok(h.url, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "restart"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);

    CU_ASSERT_EQUAL_FATAL(th_redis_restart(&h), 0);
    int failures = 0, rc = -1;
    int64_t end = th_now_ms() + 3000;
    while (th_now_ms() < end) {
        rc = hilock_lock_acquire(l, 0, 10000);
        if (rc == 0)
            break;
        failures++;
        th_sleep_ms(20);
    }
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(failures <= 1); /* at most the call that found the old connection dead */
    CU_ASSERT_EQUAL(th_redis_int(&h, "EXISTS restart"), 1);
    /* scripts were flushed by the restart: EVALSHA must fall back to EVAL */
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(th_redis_int(&h, "EXISTS restart"), 0);
    hilock_lock_free(l);
    hilock_client_close(c);
    th_redis_stop(&h);
}

/* ---------------------------------------------------------------- database */

static int key_in_db(const th_redis *r, int db, const char *key)
{
    redisContext *ctx = th_redis_connect(r);
    if (!ctx)
        return -1;
    redisReply *rep = redisCommand(ctx, "SELECT %d", db);
    freeReplyObject(rep);
    rep = redisCommand(ctx, "EXISTS %s", key);
    int v = rep && rep->type == REDIS_REPLY_INTEGER ? (int)rep->integer : -1;
    freeReplyObject(rep);
    redisFree(ctx);
    return v;
}

static void t_select_db(void)
{
    char url[160];
    snprintf(url, sizeof url, "%s/5", th_srv.url);
    hilock_client *c = open_ok(url, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "dbkey"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    CU_ASSERT_EQUAL(key_in_db(&th_srv, 5, "dbkey"), 1);
    CU_ASSERT_EQUAL(key_in_db(&th_srv, 0, "dbkey"), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(key_in_db(&th_srv, 5, "dbkey"), 0);
    hilock_lock_free(l);
    hilock_client_close(c);

    snprintf(url, sizeof url, "%s/999", th_srv.url);
    c = NULL;
    char err[256] = "";
    CU_ASSERT_EQUAL(hilock_client_open(&c, url, NULL, err, sizeof err), HILOCK_EAUTH);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT(err[0] != 0);
}

/* ---------------------------------------------------------------- auth */

static void t_password(void)
{
    char url[160];
    hilock_client *c = NULL;
    char err[256] = "";
    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", asrv.port);
    CU_ASSERT_EQUAL(hilock_client_open(&c, url, NULL, err, sizeof err), HILOCK_EAUTH);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT(err[0] != 0);

    CU_ASSERT_EQUAL(hilock_client_open(&c, asrv.url, NULL, NULL, 0), HILOCK_EAUTH); /* none */
    CU_ASSERT_PTR_NULL(c);

    snprintf(url, sizeof url, "redis://:secret@127.0.0.1:%d/2", asrv.port);
    c = open_ok(url, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "authed"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    CU_ASSERT_EQUAL(key_in_db(&asrv, 2, "authed"), 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    hilock_client_close(c);
}

static void t_acl_user(void)
{
    redisContext *ctx = th_redis_connect(&asrv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    redisReply *r = redisCommand(ctx, "ACL SETUSER alice on >apw ~* &* +@all");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    /* a user that may not run scripts: the open works, a lock call fails */
    r = redisCommand(ctx, "ACL SETUSER bob on >bpw ~* &* +@all -@scripting");
    freeReplyObject(r);
    redisFree(ctx);

    char url[160];
    snprintf(url, sizeof url, "redis://alice:apw@127.0.0.1:%d", asrv.port);
    hilock_client *c = open_ok(url, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "acl"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    hilock_client_close(c);

    c = NULL;
    snprintf(url, sizeof url, "redis://alice:bad@127.0.0.1:%d", asrv.port);
    CU_ASSERT_EQUAL(hilock_client_open(&c, url, NULL, NULL, 0), HILOCK_EAUTH);
    snprintf(url, sizeof url, "redis://nobody:apw@127.0.0.1:%d", asrv.port);
    CU_ASSERT_EQUAL(hilock_client_open(&c, url, NULL, NULL, 0), HILOCK_EAUTH);
    CU_ASSERT_PTR_NULL(c);

    /* bob may not run scripts: either the open or the first lock call is
     * refused with a clear code, never a crash or a false success. */
    snprintf(url, sizeof url, "redis://bob:bpw@127.0.0.1:%d", asrv.port);
    int rc = hilock_client_open(&c, url, NULL, NULL, 0);
    CU_ASSERT(rc == 0 || rc == HILOCK_EAUTH);
    if (rc == 0) {
        CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "acl-noscript"), 0);
        rc = hilock_lock_acquire(l, 0, 10000);
        CU_ASSERT(rc == HILOCK_EPROTO || rc == HILOCK_EAUTH);
        CU_ASSERT(strlen(hilock_lock_errmsg(l)) > 0);
        hilock_lock_free(l);
        hilock_client_close(c);
    }
}

/* ---------------------------------------------------------------- unix socket */

static void t_unix_socket(void)
{
    char url[200];
    snprintf(url, sizeof url, "unix://%s?db=3", usock);
    hilock_client *c = open_ok(url, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "via-unix"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 10000), 0);
    CU_ASSERT_EQUAL(key_in_db(&usrv, 3, "via-unix"), 1);
    CU_ASSERT_EQUAL(key_in_db(&usrv, 0, "via-unix"), 0);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    hilock_lock_free(l);
    hilock_client_close(c);

    c = NULL;
    snprintf(url, sizeof url, "unix://%s.missing", usock);
    CU_ASSERT_EQUAL(hilock_client_open(&c, url, NULL, NULL, 0), HILOCK_ECONN);
    CU_ASSERT_PTR_NULL(c);
}

/* ---------------------------------------------------------------- lifecycle */

static void t_use_after_close(void)
{
    hilock_client *c = open_ok(th_srv.url, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "after-close"), 0);
    hilock_client_close(c);
    int x;
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 1000), HILOCK_ECLOSED);
    CU_ASSERT_EQUAL(hilock_lock_is_locked(&x, l), HILOCK_ECLOSED);
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ECLOSED);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS after-close"), 0);
    hilock_lock_free(l);
}

static void t_fork_child(void)
{
    hilock_client *c = open_ok(th_srv.url, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&l, c, "forked"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, 20000), 0);

    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int x;
        int bad = 0;
        if (hilock_lock_is_locked(&x, l) != HILOCK_ECLOSED)
            bad |= 1;
        if (hilock_lock_release(l) != HILOCK_ECLOSED)
            bad |= 2;
        if (hilock_lock_acquire(l, 0, 1000) != HILOCK_ECLOSED)
            bad |= 4;
        hilock_lock_free(l);
        hilock_client_close(c);
        /* Report through exec (as test_fork does): memory the parent's
         * threads owned at fork (the hold's listener, which a fixed lease
         * starts too since c127189: a reply it was reading) is unreachable
         * in the child by nature, and valgrind would count it as the
         * child's leak at exit. exec, not exit: the harness's atexit must
         * not stop the servers. */
        char code[32];
        snprintf(code, sizeof code, "exit %d", bad);
        execl("/bin/sh", "sh", "-c", code, (char *)NULL);
        _exit(100);
    }
    int status = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT(WIFEXITED(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        printf("\n  child after fork: failure mask %d\n", WEXITSTATUS(status));
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* The parent's client and its connections are intact. */
    int held = 0;
    CU_ASSERT_EQUAL(hilock_lock_is_held(&held, l), 0);
    CU_ASSERT_EQUAL(held, 1);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS forked"), 0);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* hilock_thread_id: each thread gets its own id, the same on every call,
 * and a child after fork() (a copy of the forking thread, which asked for
 * its id before the fork) gets its own new id, not the parent thread's
 * (two threads of the child could share an owner string otherwise once the
 * parent thread's id is reused). Fails if an id is kept in thread storage
 * without being forgotten in the child. */
static void *thread_id_of(void *arg)
{
    uint64_t *out = arg;
    out[0] = hilock_thread_id();
    out[1] = hilock_thread_id();
    out[2] = (uint64_t)syscall(SYS_gettid);
    return NULL;
}

static void t_thread_id_kept_per_thread_and_fork(void)
{
    uint64_t mine = hilock_thread_id();
    CU_ASSERT_EQUAL(mine, (uint64_t)syscall(SYS_gettid));
    CU_ASSERT_EQUAL(hilock_thread_id(), mine);
    uint64_t other[3] = {0, 0, 0};
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, thread_id_of, other), 0);
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(other[0], other[2]);
    CU_ASSERT_EQUAL(other[1], other[2]);
    CU_ASSERT_NOT_EQUAL(other[0], mine);

    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        uint64_t now = hilock_thread_id();
        int bad = (now != (uint64_t)syscall(SYS_gettid)) | (now == mine) << 1 |
                  (hilock_thread_id() != now) << 2;
        _exit(bad); /* _exit: the harness's atexit must not stop the servers */
    }
    int status = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        printf("\n  thread id in the child after fork: failure mask %d\n", WEXITSTATUS(status));
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CU_ASSERT_EQUAL(hilock_thread_id(), mine);
}

typedef struct waiter_arg {
    hilock_lock *l;
    int rc;
} waiter_arg;

static void *waiter(void *p)
{
    waiter_arg *w = p;
    w->rc = hilock_lock_acquire(w->l, 300, 5000);
    return NULL;
}

static void t_threads_end_on_close(void)
{
    int base = th_thread_count();
    CU_ASSERT_FATAL(base > 0);
    hilock_client *holder = open_ok(th_srv.url, NULL);
    hilock_client *c = open_ok(th_srv.url, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(holder);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    hilock_lock *hl = NULL, *wl = NULL, *dog = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&hl, holder, "threads-busy"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&wl, c, "threads-busy"), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_new(&dog, c, "threads-dog"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(hl, 0, 10000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(dog, 0, HILOCK_LEASE_WATCHDOG), 0); /* watchdog thread */
    waiter_arg w = {wl, 1};
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, waiter, &w), 0); /* listener thread */
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(w.rc, HILOCK_ETIMEDOUT);
    int mid = th_thread_count();
    CU_ASSERT(mid > base);

    hilock_lock_free(wl);
    hilock_lock_free(dog);
    hilock_client_close(c);
    /* Closing does not release: the watchdog lock is still there. */
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS threads-dog"), 1);
    CU_ASSERT_EQUAL(hilock_lock_release(hl), 0);
    hilock_lock_free(hl);
    hilock_client_close(holder);
    CU_ASSERT(th_wait_thread_count(base, 1000));
    if (th_thread_count() != base)
        printf("\n  threads: %d before, %d after close\n", base, th_thread_count());
    redisContext *ctx = th_redis_connect(&th_srv);
    freeReplyObject(redisCommand(ctx, "DEL threads-dog"));
    redisFree(ctx);
}

/* ---------------------------------------------------------------- suites */

static int init_auth(void) { return th_redis_start(&asrv, "--requirepass secret"); }
static int clean_auth(void)
{
    th_redis_stop(&asrv);
    return 0;
}
static int init_unix(void)
{
    snprintf(usock, sizeof usock, "/tmp/hilock-ut-%d.sock", (int)getpid());
    char extra[256];
    snprintf(extra, sizeof extra, "--unixsocket %s --unixsocketperm 700", usock);
    return th_redis_start(&usrv, extra);
}
static int clean_unix(void)
{
    th_redis_stop(&usrv);
    unlink(usock);
    return 0;
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite u = CU_add_suite("url", NULL, NULL);
    CU_add_test(u, "valid URLs", t_url_ok);
    CU_add_test(u, "invalid URLs", t_url_bad);
    CU_add_test(u, "version and strerror", t_version_strerror);
    CU_add_test(u, "thread ids differ", t_thread_ids_differ);
    CU_pSuite s = CU_add_suite("client", th_srv_init, th_srv_clean);
    CU_add_test(s, "options", t_options);
    CU_add_test(s, "NULL safety", t_null_safety);
    CU_add_test(s, "client id and owner", t_open_identity);
    CU_add_test(s, "unreachable port: ECONN in time", t_unreachable_port);
    CU_add_test(s, "hung server: ECONN in time", t_hung_server);
    CU_add_test(s, "command timeout, no stale replies", t_command_timeout_and_resync);
    CU_add_test(s, "reconnect after restart", t_reconnect_after_restart);
    CU_add_test(s, "SELECT database", t_select_db);
    CU_add_test(s, "use after close: ECLOSED", t_use_after_close);
    CU_add_test(s, "fork: child gets ECLOSED, parent intact", t_fork_child);
    CU_add_test(s, "thread id: kept per thread, new in a child after fork",
                t_thread_id_kept_per_thread_and_fork);
    CU_add_test(s, "threads end when the client closes", t_threads_end_on_close);
    CU_pSuite a = CU_add_suite("auth", init_auth, clean_auth);
    CU_add_test(a, "password", t_password);
    CU_add_test(a, "ACL user", t_acl_user);
    CU_pSuite x = CU_add_suite("unix socket", init_unix, clean_unix);
    CU_add_test(x, "unix:// with db", t_unix_socket);
    return th_cu_run();
}
