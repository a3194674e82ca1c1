/*
 * The engine's URL parser (url.c): every form docs/urls.md lists, percent
 * decoding, query parameters, and the mistakes it must refuse. No server.
 * (The OpenResty and Lua drivers reach the same parser through
 * hilock.proto.parse_url; tests/lua checks that binding.)
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "internal.h"

static hl_endpoint ep;
static char err[HL_ERRMSG_MAX];

static int parse(const char *url)
{
    hl_endpoint_free(&ep);
    err[0] = 0;
    int rc = hl_endpoint_parse(&ep, url, err);
    if (rc)
        printf("\n  %s: %s\n", url, err);
    return rc;
}

static void t_tcp_forms(void)
{
    CU_ASSERT_EQUAL_FATAL(parse("rediss://u%40x:p%40ss%25word@h.example:7000/3"), 0);
    CU_ASSERT_EQUAL(ep.tls, 1);
    CU_ASSERT_STRING_EQUAL(ep.user, "u@x");
    CU_ASSERT_STRING_EQUAL(ep.password, "p@ss%word");
    CU_ASSERT_STRING_EQUAL(ep.host, "h.example");
    CU_ASSERT_EQUAL(ep.port, 7000);
    CU_ASSERT_EQUAL(ep.db, 3);
    CU_ASSERT_EQUAL(ep.connect_timeout_ms, -1);

    /* user only, as redis-py reads it: that user, empty password */
    CU_ASSERT_EQUAL_FATAL(parse("redis://alice@h"), 0);
    CU_ASSERT_EQUAL(ep.tls, 0);
    CU_ASSERT_STRING_EQUAL(ep.user, "alice");
    CU_ASSERT_STRING_EQUAL(ep.password, "");
    /* password only: the default user */
    CU_ASSERT_EQUAL_FATAL(parse("redis://:p%3Aw@h"), 0);
    CU_ASSERT_PTR_NULL(ep.user);
    CU_ASSERT_STRING_EQUAL(ep.password, "p:w");
    /* an '@' inside the password, unencoded: the last '@' ends the user info */
    CU_ASSERT_EQUAL_FATAL(parse("redis://bob:a@b@h:1"), 0);
    CU_ASSERT_STRING_EQUAL(ep.password, "a@b");
    CU_ASSERT_STRING_EQUAL(ep.host, "h");
    /* IPv6 */
    CU_ASSERT_EQUAL_FATAL(parse("redis://[::1]:6380"), 0);
    CU_ASSERT_STRING_EQUAL(ep.host, "::1");
    CU_ASSERT_EQUAL(ep.port, 6380);
}

static void t_query(void)
{
    CU_ASSERT_EQUAL_FATAL(parse("rediss://h?db=4&connect_timeout_ms=250&command_timeout_ms=900"
                                "&tls_ca_file=/a%20b/ca.pem&tls_ca_dir=/etc/ssl/certs"
                                "&tls_cert_file=c.pem&tls_key_file=k.pem"
                                "&tls_server_name=redis.internal&tls_insecure=1"),
                          0);
    CU_ASSERT_EQUAL(ep.db, 4);
    CU_ASSERT_EQUAL(ep.connect_timeout_ms, 250);
    CU_ASSERT_EQUAL(ep.command_timeout_ms, 900);
    CU_ASSERT_STRING_EQUAL(ep.tls_ca_file, "/a b/ca.pem");
    CU_ASSERT_STRING_EQUAL(ep.tls_ca_dir, "/etc/ssl/certs");
    CU_ASSERT_STRING_EQUAL(ep.tls_cert_file, "c.pem");
    CU_ASSERT_STRING_EQUAL(ep.tls_key_file, "k.pem");
    CU_ASSERT_STRING_EQUAL(ep.tls_server_name, "redis.internal");
    CU_ASSERT_EQUAL(ep.tls_insecure, 1);
    /* redis-py's names */
    CU_ASSERT_EQUAL_FATAL(parse("rediss://h/1?socket_timeout=0.5&socket_connect_timeout=2"
                                "&ssl_ca_certs=ca.pem&ssl_certfile=c&ssl_keyfile=k"
                                "&ssl_cert_reqs=none"),
                          0);
    CU_ASSERT_EQUAL(ep.db, 1);
    CU_ASSERT_EQUAL(ep.command_timeout_ms, 500);
    CU_ASSERT_EQUAL(ep.connect_timeout_ms, 2000);
    CU_ASSERT_STRING_EQUAL(ep.tls_ca_file, "ca.pem");
    CU_ASSERT_EQUAL(ep.tls_insecure, 1);
    /* user and password as query parameters */
    CU_ASSERT_EQUAL_FATAL(parse("redis://h?user=carol&password=x%26y"), 0);
    CU_ASSERT_STRING_EQUAL(ep.user, "carol");
    CU_ASSERT_STRING_EQUAL(ep.password, "x&y");
}

static void t_unix(void)
{
    CU_ASSERT_EQUAL_FATAL(parse("unix:///tmp/r.sock"), 0);
    CU_ASSERT_STRING_EQUAL(ep.path, "/tmp/r.sock");
    CU_ASSERT_PTR_NULL(ep.host);
    CU_ASSERT_EQUAL_FATAL(parse("unix://bob:p%40w@/var/run/redis%20x.sock?db=2"), 0);
    CU_ASSERT_STRING_EQUAL(ep.path, "/var/run/redis x.sock");
    CU_ASSERT_STRING_EQUAL(ep.user, "bob");
    CU_ASSERT_STRING_EQUAL(ep.password, "p@w");
    CU_ASSERT_EQUAL(ep.db, 2);
    CU_ASSERT_EQUAL_FATAL(parse("unix:///tmp/r.sock?db=2&password=p%25w&user=bob"), 0);
    CU_ASSERT_STRING_EQUAL(ep.password, "p%w");
}

static void t_sentinel_cluster(void)
{
    CU_ASSERT_EQUAL_FATAL(parse("rediss+sentinel://u:p@s1,s2:5000,[::1]:5001/my%20master/2"
                                "?sentinel_user=sen&sentinel_password=s%40p"),
                          0);
    CU_ASSERT_EQUAL(ep.tls, 1);
    CU_ASSERT_EQUAL(ep.cluster, 0);
    CU_ASSERT_EQUAL_FATAL(ep.nseeds, 3);
    CU_ASSERT_STRING_EQUAL(ep.seed_hosts[0], "s1");
    CU_ASSERT_EQUAL(ep.seed_ports[0], 26379);
    CU_ASSERT_EQUAL(ep.seed_ports[1], 5000);
    CU_ASSERT_STRING_EQUAL(ep.seed_hosts[2], "::1");
    CU_ASSERT_STRING_EQUAL(ep.master_name, "my master");
    CU_ASSERT_EQUAL(ep.db, 2);
    CU_ASSERT_STRING_EQUAL(ep.user, "u");
    CU_ASSERT_STRING_EQUAL(ep.password, "p");
    CU_ASSERT_STRING_EQUAL(ep.sentinel_user, "sen");
    CU_ASSERT_STRING_EQUAL(ep.sentinel_password, "s@p");

    CU_ASSERT_EQUAL_FATAL(parse("rediss+cluster://n1,n2:7001/?tls_ca_file=ca.pem"), 0);
    CU_ASSERT_EQUAL(ep.tls, 1);
    CU_ASSERT_EQUAL(ep.cluster, 1);
    CU_ASSERT_EQUAL_FATAL(ep.nseeds, 2);
    CU_ASSERT_EQUAL(ep.seed_ports[0], 6379);
    CU_ASSERT_EQUAL(ep.seed_ports[1], 7001);
    CU_ASSERT_STRING_EQUAL(ep.tls_ca_file, "ca.pem");
}

static void t_bad(void)
{
    const char *bad[] = {
        "redis://h?nope=1",          "redis://h?db",
        "redis://h?db=x",            "redis://h?connect_timeout_ms=0",
        "redis://h?tls_insecure=maybe", "redis://h?ssl_cert_reqs=optional",
        "redis://h?socket_timeout=.", "redis+cluster://a?db=2",
        "redis+cluster://a/3",       "redis+sentinel://a,,b/m",
        "redis+sentinel://a/",       "rediss://",
        "redis://[::1",              "unix://relative/path",
        "redis://h:0",               "valkey://h",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hl_endpoint_free(&ep);
        err[0] = 0;
        int rc = hl_endpoint_parse(&ep, bad[i], err);
        if (rc != HILOCK_EINVAL)
            printf("\n  URL \"%s\" accepted (rc=%d)\n", bad[i], rc);
        CU_ASSERT_EQUAL(rc, HILOCK_EINVAL);
        CU_ASSERT(err[0] != 0);
        CU_ASSERT_PTR_NULL(ep.host); /* nothing left behind */
        CU_ASSERT_EQUAL(ep.nseeds, 0);
    }
}

/* hilock_url_redact: every password as ***, the rest as written; cut like
 * snprintf; URLs that do not parse hide more, never less. */
static void t_redact(void)
{
    static const char *const cases[][2] = {
        {"redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"},
        {"redis://alice:s3cret@h/2", "redis://alice:***@h/2"},
        {"redis://alice@h", "redis://alice@h"},
        {"redis://:@h", "redis://:@h"},
        {"redis://h:6379", "redis://h:6379"},
        {"rediss://u:p%40ss@h:1/0?tls_ca_file=/a@b/ca.pem",
         "rediss://u:***@h:1/0?tls_ca_file=/a@b/ca.pem"},
        {"redis://u:a@b@h", "redis://u:***@h"},
        {"redis://h/0?password=s3cret&db=1", "redis://h/0?password=***&db=1"},
        {"redis://h/0?db=1&Password=s3&user=u", "redis://h/0?db=1&Password=***&user=u"},
        {"redis+sentinel://:m@s1:26379,s2/mm?sentinel_password=s&sentinel_user=x",
         "redis+sentinel://:***@s1:26379,s2/mm?sentinel_password=***&sentinel_user=x"},
        {"unix://u:pw@/tmp/r.sock?db=1", "unix://u:***@/tmp/r.sock?db=1"},
        {"unix:///tmp/a@b.sock", "unix:///tmp/a@b.sock"},
        /* do not parse: a password with '?' or '/' unencoded */
        {"redis://:s3?x@h:1/0", "redis://:***@h:1/0"},
        {"redis://:s3/x@h:1/0", "redis://:***@h:1/0"},
        {"redis://u:s3?password=a@h", "redis://u:***@h"},
        {"", ""},
        {"not a url", "not a url"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[256];
        size_t n = hilock_url_redact(out, sizeof out, cases[i][0]);
        if (strcmp(out, cases[i][1]) != 0)
            printf("\n  %s -> %s (expected %s)\n", cases[i][0], out, cases[i][1]);
        CU_ASSERT_STRING_EQUAL(out, cases[i][1]);
        CU_ASSERT_EQUAL(n, strlen(cases[i][1]));
    }
    char small[10];
    CU_ASSERT_EQUAL(hilock_url_redact(small, sizeof small, "redis://:s3cret@h"), 14);
    CU_ASSERT_STRING_EQUAL(small, "redis://:");
    CU_ASSERT_EQUAL(hilock_url_redact(small, 1, "redis://:s3cret@h"), 14);
    CU_ASSERT_STRING_EQUAL(small, "");
    CU_ASSERT_EQUAL(hilock_url_redact(NULL, 0, "redis://:s3cret@h"), 14);
    CU_ASSERT_EQUAL(hilock_url_redact(small, sizeof small, NULL), 0);
    CU_ASSERT_STRING_EQUAL(small, "");
    /* the parser's messages do not echo what may be a password either */
    char err[HL_URL_ERR_MAX] = "";
    CU_ASSERT_EQUAL(hl_endpoint_parse(&ep, "redis://u:123?s3cret@h", err), HILOCK_EINVAL);
    CU_ASSERT_PTR_NULL(strstr(err, "s3cret"));
    CU_ASSERT(err[0] != 0);
}

static int clean(void)
{
    hl_endpoint_free(&ep);
    return 0;
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("url", NULL, clean);
    CU_add_test(s, "redis:// and rediss:// forms", t_tcp_forms);
    CU_add_test(s, "query parameters", t_query);
    CU_add_test(s, "unix://", t_unix);
    CU_add_test(s, "sentinel and cluster", t_sentinel_cluster);
    CU_add_test(s, "refused", t_bad);
    CU_add_test(s, "redacted for showing", t_redact);
    return th_cu_run();
}
