/*
 * Hostile replies: numbers from the server are validated before use and a
 * reply header cannot make the client allocate what the server never sent.
 *
 * A real server never sends these, so each test runs a tiny fake server: a
 * TCP listener on 127.0.0.1 (a real socket, in a thread of this process)
 * that parses each RESP command and answers with the bytes a test chose —
 * the library under test is the real one, unchanged.
 */
#include <CUnit/Basic.h>
#include <ctype.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"
#include "internal.h"
#include "proto.h"

/* ---------------------------------------------------------------- fake server */

#define FS_MAXCONN 16
typedef struct fake_srv fake_srv;
/* Raw reply bytes for a command (argv[0] upper-cased), or NULL: no answer. */
typedef const char *(*fs_answer)(fake_srv *fs, int argc, char **argv);
struct fake_srv {
    int lfd, port, wake[2];
    pthread_t th;
    fs_answer answer;
    char buf[512];       /* for answers built at run time */
    size_t stream_bytes; /* after a script's answer, this many more bytes of 'a' */
    int stream_next;     /* set by the answer function: stream after this one */
};

/* One complete RESP array of bulk strings at the start of in[0..len):
 * returns bytes used (0 incomplete, -1 bad); argv strings are malloc'd. */
static int fs_parse(const char *in, size_t len, int *argc, char **argv, int max)
{
    const char *p = in, *end = in + len;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl)
        return 0;
    if (*p != '*')
        return -1;
    int n = atoi(p + 1);
    if (n < 1 || n > max)
        return -1;
    p = nl + 1;
    for (int i = 0; i < n; i++) {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            goto incomplete;
        if (*p != '$')
            return -1;
        long l = atol(p + 1);
        p = nl + 1;
        if (l < 0 || end - p < l + 2)
            goto incomplete;
        argv[i] = strndup(p, (size_t)l);
        p += l + 2;
        *argc = i + 1;
    }
    return (int)(p - in);
incomplete:
    for (int i = 0; i < *argc; i++)
        free(argv[i]);
    *argc = 0;
    return 0;
}

static void *fs_main(void *arg)
{
    fake_srv *fs = arg;
    struct pollfd pf[FS_MAXCONN + 2];
    char *in[FS_MAXCONN] = {0};
    size_t inlen[FS_MAXCONN] = {0};
    int fds[FS_MAXCONN], nfd = 0;
    for (;;) {
        pf[0] = (struct pollfd){fs->wake[0], POLLIN, 0};
        pf[1] = (struct pollfd){fs->lfd, POLLIN, 0};
        for (int i = 0; i < nfd; i++)
            pf[i + 2] = (struct pollfd){fds[i], POLLIN, 0};
        if (poll(pf, (nfds_t)nfd + 2, -1) < 0)
            continue;
        if (pf[0].revents)
            break;
        int polled = nfd; /* a connection accepted now is read next round */
        if ((pf[1].revents & POLLIN) && nfd < FS_MAXCONN) {
            int fd = accept(fs->lfd, NULL, NULL);
            if (fd >= 0) {
                fds[nfd] = fd;
                in[nfd] = NULL;
                inlen[nfd++] = 0;
            }
        }
        for (int i = 0; i < polled; i++) {
            if (!pf[i + 2].revents)
                continue;
            char chunk[4096];
            ssize_t got = read(fds[i], chunk, sizeof chunk);
            if (got <= 0) { /* closed: drop it */
                close(fds[i]);
                free(in[i]);
                /* the last polled one takes this place; then the newest */
                fds[i] = fds[polled - 1];
                in[i] = in[polled - 1];
                inlen[i] = inlen[polled - 1];
                pf[i + 2] = pf[polled + 1];
                fds[polled - 1] = fds[nfd - 1];
                in[polled - 1] = in[nfd - 1];
                inlen[polled - 1] = inlen[nfd - 1];
                polled--;
                nfd--;
                i--;
                continue;
            }
            in[i] = realloc(in[i], inlen[i] + (size_t)got);
            memcpy(in[i] + inlen[i], chunk, (size_t)got);
            inlen[i] += (size_t)got;
            for (;;) {
                int argc = 0;
                char *argv[16];
                int used = fs_parse(in[i], inlen[i], &argc, argv, 16);
                if (used <= 0)
                    break;
                memmove(in[i], in[i] + used, inlen[i] - (size_t)used);
                inlen[i] -= (size_t)used;
                for (char *c = argv[0]; *c; c++)
                    *c = (char)toupper((unsigned char)*c);
                const char *out = fs->answer(fs, argc, argv);
                int failed = out && send(fds[i], out, strlen(out), MSG_NOSIGNAL) < 0;
                if (out && !failed && fs->stream_next) {
                    fs->stream_next = 0;
                    static char junk[65536];
                    memset(junk, 'a', sizeof junk);
                    for (size_t sent = 0; sent < fs->stream_bytes && !failed;
                         sent += sizeof junk)
                        failed = send(fds[i], junk, sizeof junk, MSG_NOSIGNAL) < 0;
                }
                for (int k = 0; k < argc; k++)
                    free(argv[k]);
                if (failed)
                    break;
            }
        }
    }
    for (int i = 0; i < nfd; i++) {
        close(fds[i]);
        free(in[i]);
    }
    return NULL;
}

static size_t fs_stream_bytes; /* the next fs_start's stream_bytes */

static int fs_start(fake_srv *fs, fs_answer answer)
{
    memset(fs, 0, sizeof *fs);
    fs->answer = answer;
    fs->stream_bytes = fs_stream_bytes;
    fs_stream_bytes = 0;
    fs->lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fs->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(fs->lfd, (struct sockaddr *)&a, sizeof a) || listen(fs->lfd, 16) ||
        getsockname(fs->lfd, (struct sockaddr *)&a, &alen) || pipe(fs->wake))
        return -1;
    fs->port = ntohs(a.sin_port);
    return pthread_create(&fs->th, NULL, fs_main, fs);
}

static void fs_stop(fake_srv *fs)
{
    if (write(fs->wake[1], "x", 1) < 0)
        return;
    pthread_join(fs->th, NULL);
    close(fs->lfd);
    close(fs->wake[0]);
    close(fs->wake[1]);
}

static const char *common(fake_srv *fs, int argc, char **argv)
{
    (void)fs;
    (void)argc;
    if (!strcmp(argv[0], "PING"))
        return "+PONG\r\n";
    if (!strcmp(argv[0], "ROLE"))
        return "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n";
    return NULL;
}

/* A one-node cluster map pointing at the fake server itself. */
static const char *slots_self(fake_srv *fs)
{
    snprintf(fs->buf, sizeof fs->buf,
             "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", fs->port);
    return fs->buf;
}

/* --------------------------------------------------------------- helpers */

static hilock_client *open_url(const char *url, int command_timeout_ms, int *rc, char *err,
                               size_t errlen)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.command_timeout_ms = command_timeout_ms;
    o.connect_timeout_ms = 1000;
    hilock_client *c = NULL;
    *rc = hilock_client_open(&c, url, &o, err, errlen);
    return c;
}

/* Open a client on the fake server, take one lock with one try, return the
 * acquire's code (the open's code when it failed); msg gets the detail. */
static int try_acquire(const char *url, int command_timeout_ms, char *msg, size_t msglen)
{
    int rc;
    hilock_client *c = open_url(url, command_timeout_ms, &rc, msg, msglen);
    if (!c)
        return rc;
    hilock_lock *l = NULL;
    rc = hilock_lock_new(&l, c, "hostile");
    if (rc == 0) {
        rc = hilock_lock_acquire(l, 0, 10000);
        snprintf(msg, msglen, "%s", hilock_lock_errmsg(l));
    }
    hilock_lock_free(l);
    hilock_client_close(c);
    return rc;
}

/* ------------------------------------------------- MOVED with a bad slot */

static const char *moved_reply;
static const char *ans_moved(fake_srv *fs, int argc, char **argv)
{
    if (!strcmp(argv[0], "CLUSTER"))
        return slots_self(fs);
    if (!strcmp(argv[0], "EVALSHA") || !strcmp(argv[0], "EVAL")) {
        snprintf(fs->buf, sizeof fs->buf, moved_reply, fs->port);
        return fs->buf;
    }
    return common(fs, argc, argv);
}

static void check_moved(const char *reply)
{
    fake_srv fs;
    moved_reply = reply;
    CU_ASSERT_FATAL(fs_start(&fs, ans_moved) == 0);
    char url[64], msg[256] = "";
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", fs.port);
    int rc = try_acquire(url, 2000, msg, sizeof msg);
    if (rc != HILOCK_EPROTO)
        fprintf(stderr, "reply %s: rc %d (%s)\n", reply, rc, msg);
    CU_ASSERT_EQUAL(rc, HILOCK_EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, reply[1] == 'M' ? "MOVED" : "ASK"));
    fs_stop(&fs);
}

/* Before: slot_node[65535] was written (SIGSEGV / ASan overflow); 16400 wrote
 * past the table into the client struct. */
static void t_moved_slot_65535(void) { check_moved("-MOVED 65535 127.0.0.1:%d\r\n"); }
static void t_moved_slot_16400(void) { check_moved("-MOVED 16400 127.0.0.1:%d\r\n"); }
static void t_moved_slot_16384(void) { check_moved("-MOVED 16384 127.0.0.1:%d\r\n"); }
static void t_moved_slot_negative(void) { check_moved("-MOVED -1 127.0.0.1:%d\r\n"); }
static void t_moved_slot_huge(void)
{
    check_moved("-MOVED 18446744073709551617 127.0.0.1:%d\r\n");
}
static void t_ask_slot_bad(void) { check_moved("-ASK 99999 127.0.0.1:%d\r\n"); }
/* the port is the fake's own number with junk after it, or out of range */
static void t_moved_port_junk(void) { check_moved("-MOVED 1 127.0.0.1:%dx\r\n"); }
static void t_moved_port_range(void) { check_moved("-MOVED 1 127.0.0.1:7%d\r\n"); }

/* ------------------------------------------------ CLUSTER SLOTS ranges */

static const char *slots_reply;
static const char *ans_slots(fake_srv *fs, int argc, char **argv)
{
    if (!strcmp(argv[0], "CLUSTER")) {
        snprintf(fs->buf, sizeof fs->buf, slots_reply, fs->port);
        return fs->buf;
    }
    return common(fs, argc, argv);
}

/* Before: a range starting at -9e18 looped for ever (the loop skipped
 * negative slots one by one); after: the entry is skipped and a map with no
 * usable entry fails the open. */
static void t_slots_bad_ranges(void)
{
    static const char *const bad[] = {
        "*1\r\n*3\r\n:-9223372036854775807\r\n:5\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
        "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
        "*1\r\n*3\r\n:10\r\n:5\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
        "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:65536%d\r\n",
        "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n:1\r\n:%d\r\n",
        "*1\r\n*3\r\n:0\r\n:16383\r\n*1\r\n$9\r\n127.0.0.1\r\n",
        "*1\r\n*3\r\n$1\r\n0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
        "*1\r\n:%d\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fake_srv fs;
        slots_reply = bad[i];
        CU_ASSERT_FATAL(fs_start(&fs, ans_slots) == 0);
        char url[64], msg[256] = "";
        snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", fs.port);
        int64_t t0 = th_now_ms();
        int rc;
        hilock_client *c = open_url(url, 1000, &rc, msg, sizeof msg);
        CU_ASSERT_PTR_NULL(c);
        CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "CLUSTER SLOTS"));
        CU_ASSERT(th_now_ms() - t0 < 5000);
        hilock_client_close(c);
        fs_stop(&fs);
    }
}

/* ------------------------------------------ sentinel names a bad port */

static const char *ans_sentinel(fake_srv *fs, int argc, char **argv)
{
    if (!strcmp(argv[0], "SENTINEL")) {
        /* the fake's own port with junk after it: atoi() used to accept it */
        char port[32];
        int n = snprintf(port, sizeof port, "%dxyz", fs->port);
        snprintf(fs->buf, sizeof fs->buf, "*2\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n", n, port);
        return fs->buf;
    }
    if (!strcmp(argv[0], "SUBSCRIBE"))
        return "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n";
    return common(fs, argc, argv);
}

static void t_sentinel_bad_port(void)
{
    fake_srv fs;
    CU_ASSERT_FATAL(fs_start(&fs, ans_sentinel) == 0);
    char url[96], msg[256] = "";
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/mymaster", fs.port);
    int rc;
    hilock_client *c = open_url(url, 1000, &rc, msg, sizeof msg);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "named no valid address for 'mymaster'"));
    hilock_client_close(c);
    fs_stop(&fs);
}

/* ------------------------------------------------ huge reply headers */

static const char *huge_reply;
static const char *ans_huge(fake_srv *fs, int argc, char **argv)
{
    /* the open-time permission check (an EVAL asking acl_check_cmd) passes */
    if (!strcmp(argv[0], "EVAL") && argc > 1 && strstr(argv[1], "acl_check_cmd"))
        return "+ok\r\n";
    if (!strcmp(argv[0], "EVALSHA") || !strcmp(argv[0], "EVAL")) {
        fs->stream_next = fs->stream_bytes > 0;
        return huge_reply;
    }
    return common(fs, argc, argv);
}

static long maxrss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Refused at once with HILOCK_EPROTO, long before the command timeout
 * (before: hiredis calloc'd 7 GB for "*888888880", or failed with
 * "Out of memory" as a connection error). */
static void check_refused(const char *reply)
{
    fake_srv fs;
    huge_reply = reply;
    CU_ASSERT_FATAL(fs_start(&fs, ans_huge) == 0);
    char url[64], msg[256] = "";
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", fs.port);
    long rss0 = maxrss_kb();
    int64_t t0 = th_now_ms();
    int rc = try_acquire(url, 4000, msg, sizeof msg);
    int64_t took = th_now_ms() - t0;
    if (rc != HILOCK_EPROTO)
        fprintf(stderr, "reply %.20s: rc %d (%s)\n", reply, rc, msg);
    CU_ASSERT_EQUAL(rc, HILOCK_EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "reply from Redis"));
    CU_ASSERT(took < 3000);
    CU_ASSERT(maxrss_kb() - rss0 < 64 * 1024);
    fs_stop(&fs);
}

static void t_huge_array(void) { check_refused("*888888880\r\n"); }
static void t_array_over_limit(void) { check_refused("*1048577\r\n"); }
static void t_huge_nested(void) { check_refused("*2\r\n:1\r\n*2147483647\r\n"); }
static void t_too_deep(void)
{
    check_refused("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n");
}

/* "$999999999": hiredis waits for the bytes, it does not allocate them up
 * front; the command times out as a connection error with memory flat. */
static void t_huge_bulk(void)
{
    fake_srv fs;
    huge_reply = "$999999999\r\nabc";
    CU_ASSERT_FATAL(fs_start(&fs, ans_huge) == 0);
    char url[64], msg[256] = "";
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", fs.port);
    long rss0 = maxrss_kb();
    int rc = try_acquire(url, 300, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, HILOCK_ECONN);
    CU_ASSERT(maxrss_kb() - rss0 < 64 * 1024);
    fs_stop(&fs);
}

/* ... but a server that goes on sending: refused once 32 MB came
 * (HL_REPLY_MAX_BYTES), not buffered for as long as it sends. Before: the
 * 48 MB were buffered and the call waited for the command timeout. */
static void t_huge_bulk_streamed(void)
{
    fake_srv fs;
    huge_reply = "$999999999\r\n";
    fs_stream_bytes = (size_t)48 << 20;
    CU_ASSERT_FATAL(fs_start(&fs, ans_huge) == 0);
    char url[64], msg[256] = "";
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", fs.port);
    int rc = try_acquire(url, th_valgrind() ? 20000 : 5000, msg, sizeof msg);
    if (rc != HILOCK_EPROTO)
        fprintf(stderr, "streamed bulk: rc %d (%s)\n", rc, msg);
    CU_ASSERT_EQUAL(rc, HILOCK_EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "MB hilock accepts"));
    fs_stop(&fs);
}

/* Replies that look like ours but carry impossible numbers. */
static const char *ans_numbers(fake_srv *fs, int argc, char **argv)
{
    if (!strcmp(argv[0], "EVALSHA") || !strcmp(argv[0], "EVAL"))
        return huge_reply;
    return common(fs, argc, argv);
}

static void t_bad_acquire_numbers(void)
{
    static const char *const bad[] = {
        "*2\r\n:1\r\n:0\r\n",          /* acquired with 0 holds */
        "*2\r\n:1\r\n:-5\r\n",         /* negative holds */
        "*2\r\n:2\r\n:1\r\n",          /* flag not 0/1 */
        "*2\r\n:0\r\n:-3\r\n",         /* PTTL below -2 */
        "*2\r\n$1\r\n1\r\n:1\r\n",     /* wrong types */
        "*3\r\n:1\r\n:1\r\n:1\r\n",    /* wrong length */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fake_srv fs;
        huge_reply = bad[i];
        CU_ASSERT_FATAL(fs_start(&fs, ans_numbers) == 0);
        char url[64], msg[256] = "";
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", fs.port);
        int rc = try_acquire(url, 1000, msg, sizeof msg);
        if (rc != HILOCK_EPROTO)
            fprintf(stderr, "acquire reply #%zu: rc %d (%s)\n", i, rc, msg);
        CU_ASSERT_EQUAL(rc, HILOCK_EPROTO);
        fs_stop(&fs);
    }
}

/* The bounded reader still builds ordinary replies (the fake's own parse of
 * what the decoders get is checked in test_proto; here: real arrays over a
 * socket, of every size class around the growth steps). */
static void t_bounded_reader_builds(void)
{
    for (size_t n = 0; n <= 70; n++) {
        char *buf = malloc(32 + n * 40);
        size_t len = (size_t)sprintf(buf, "*%zu\r\n", n);
        for (size_t i = 0; i < n; i++)
            len += (size_t)sprintf(buf + len, i % 3 ? ":%zu\r\n" : "*2\r\n$1\r\nx\r\n:%zu\r\n", i);
        redisReader *rd = redisReaderCreate();
        CU_ASSERT_EQUAL_FATAL(hl_reader_bound(rd), 0);
        CU_ASSERT_EQUAL(hl_reader_bound(rd), 0); /* twice is harmless */
        void *out = NULL;
        /* byte by byte: every partial state must be consistent */
        for (size_t i = 0; i < len && !out; i++) {
            CU_ASSERT_EQUAL_FATAL(redisReaderFeed(rd, buf + i, 1), REDIS_OK);
            CU_ASSERT_EQUAL_FATAL(redisReaderGetReply(rd, &out), REDIS_OK);
        }
        redisReply *r = out;
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_EQUAL(r->type, REDIS_REPLY_ARRAY);
        CU_ASSERT_EQUAL(r->elements, n);
        for (size_t i = 0; i < n && i < r->elements; i++) {
            redisReply *e = r->element[i];
            if (i % 3) {
                CU_ASSERT(e->type == REDIS_REPLY_INTEGER && e->integer == (long long)i);
            } else {
                CU_ASSERT(e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
                          e->element[1]->integer == (long long)i);
            }
        }
        freeReplyObject(r);
        /* and a reader abandoned half way frees what it built */
        redisReaderFeed(rd, buf, len / 2);
        redisReaderGetReply(rd, &out);
        if (out)
            freeReplyObject(out);
        redisReaderFree(rd);
        free(buf);
    }
}


/* ------------------------------------------ the parsers, reply by reply */

static redisReply *resp(const char *bytes)
{
    redisReader *rd = redisReaderCreate();
    hl_reader_bound(rd);
    void *out = NULL;
    if (redisReaderFeed(rd, bytes, strlen(bytes)) != REDIS_OK ||
        redisReaderGetReply(rd, &out) != REDIS_OK)
        out = NULL;
    redisReaderFree(rd);
    return out;
}

static int redirect_of(const char *bytes, unsigned *slot, char *host, size_t hostlen, int *port)
{
    redisReply *r = resp(bytes);
    int kind = hl_parse_redirect(r, slot, host, hostlen, port);
    freeReplyObject(r);
    return kind;
}

/* hl_parse_redirect (proto_route.c): a bad redirection is not one (0). */
static void t_parse_redirect(void)
{
    unsigned slot = 0;
    char host[256];
    int port = 0;
    CU_ASSERT_EQUAL(redirect_of("-MOVED 16383 10.0.0.1:7000\r\n", &slot, host, sizeof host, &port), 1);
    CU_ASSERT_EQUAL(slot, 16383);
    CU_ASSERT_STRING_EQUAL(host, "10.0.0.1");
    CU_ASSERT_EQUAL(port, 7000);
    CU_ASSERT_EQUAL(redirect_of("-ASK 0 :6379\r\n", &slot, host, sizeof host, &port), 2);
    CU_ASSERT_STRING_EQUAL(host, "127.0.0.1"); /* empty: where we reached it */
    CU_ASSERT_EQUAL(redirect_of("-MOVED 5 ::1:7001\r\n", &slot, host, sizeof host, &port), 1);
    CU_ASSERT_STRING_EQUAL(host, "::1");
    CU_ASSERT_EQUAL(port, 7001);
    static const char *const bad[] = {
        "-MOVED 16384 h:1\r\n", "-MOVED 65535 h:1\r\n", "-MOVED -1 h:1\r\n",
        "-MOVED +1 h:1\r\n",    "-MOVED 1x h:1\r\n",    "-MOVED  1 h:1\r\n",
        "-MOVED 1 h:0\r\n",     "-MOVED 1 h:65536\r\n", "-MOVED 1 h:-1\r\n",
        "-MOVED 1 h:\r\n",      "-MOVED 1 h\r\n",       "-MOVED 1\r\n",
        "-MOVED \r\n",          "-MOVED 1 h:1 x\r\n",   "-MOVED 99999999999999999999 h:1\r\n",
        "-ASK 16384 h:1\r\n",   "-ERR MOVED 1 h:1\r\n", "+MOVED 1 h:1\r\n",
        "-MOVEDX\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int k = redirect_of(bad[i], &slot, host, sizeof host, &port);
        if (k != 0)
            fprintf(stderr, "%s -> %d\n", bad[i], k);
        CU_ASSERT_EQUAL(k, 0);
    }
    /* a long host does not fit: refused, not truncated */
    char big[400];
    snprintf(big, sizeof big, "-MOVED 1 %0300d:1\r\n", 0);
    CU_ASSERT_EQUAL(redirect_of(big, &slot, host, sizeof host, &port), 0);
    CU_ASSERT_EQUAL(hl_parse_redirect(NULL, &slot, host, sizeof host, &port), 0);
}

static void t_parse_master_addr(void)
{
    char host[64];
    int port = 0;
    redisReply *r = resp("*2\r\n$8\r\n10.1.2.3\r\n$4\r\n6380\r\n");
    CU_ASSERT_EQUAL(hl_decode_master_addr(r, host, sizeof host, &port), 0);
    CU_ASSERT_STRING_EQUAL(host, "10.1.2.3");
    CU_ASSERT_EQUAL(port, 6380);
    freeReplyObject(r);
    static const char *const bad[] = {
        "*2\r\n$1\r\nh\r\n$5\r\n6379x\r\n", "*2\r\n$1\r\nh\r\n$5\r\n70000\r\n",
        "*2\r\n$1\r\nh\r\n$1\r\n0\r\n",     "*2\r\n$0\r\n\r\n$4\r\n6379\r\n",
        "*2\r\n$1\r\nh\r\n:6379\r\n",         "*1\r\n$1\r\nh\r\n",
        "$-1\r\n",                                 "*-1\r\n",
        "*2\r\n$3\r\na\0b\r\n$4\r\n6379\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = resp(bad[i]);
        CU_ASSERT_EQUAL(hl_decode_master_addr(r, host, sizeof host, &port), HILOCK_EPROTO);
        freeReplyObject(r);
    }
    /* a host longer than the buffer is refused, not cut */
    r = resp("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n");
    CU_ASSERT_EQUAL(hl_decode_master_addr(r, host, 9, &port), HILOCK_EPROTO);
    freeReplyObject(r);
}

static void t_decode_numbers(void)
{
    int64_t v = 7;
    redisReply *r = resp(":2\r\n");
    CU_ASSERT_EQUAL(hl_decode_flag(r, &v), HILOCK_EPROTO);
    CU_ASSERT_EQUAL(hl_decode_pttl(r, &v), 0);
    CU_ASSERT_EQUAL(v, 2);
    freeReplyObject(r);
    r = resp(":-3\r\n");
    CU_ASSERT_EQUAL(hl_decode_pttl(r, &v), HILOCK_EPROTO);
    CU_ASSERT_EQUAL(hl_decode_hold_count(r, &v), HILOCK_EPROTO);
    hl_release_result rel;
    CU_ASSERT_EQUAL(hl_decode_release(r, &rel), HILOCK_EPROTO);
    freeReplyObject(r);
    r = resp("$2\r\n-1\r\n");
    CU_ASSERT_EQUAL(hl_decode_hold_count(r, &v), HILOCK_EPROTO);
    freeReplyObject(r);
    /* a holder's PTTL beyond any wait we accept is cut to the maximum */
    hl_acquire_result a;
    r = resp("*2\r\n:0\r\n:9223372036854775807\r\n");
    CU_ASSERT_EQUAL(hl_decode_acquire(r, &a), 0);
    CU_ASSERT_EQUAL(a.ttl_ms, HILOCK_MAX_TIME_MS);
    freeReplyObject(r);
}

/* Found by fuzz_url: user info and no host parsed as a sentinel/cluster
 * endpoint without a single seed (the client then connected to "(null):0"). */
static void t_url_without_seeds(void)
{
    static const char *const bad[] = {"redis+sentinel://x@/mymaster", "redis+cluster://x@",
                                      "redis+cluster://u:p@/", "redis+sentinel:///m"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hl_endpoint ep;
        char err[HL_ERRMSG_MAX] = "";
        CU_ASSERT_EQUAL(hl_endpoint_parse(&ep, bad[i], err), HILOCK_EINVAL);
        CU_ASSERT(err[0] != 0);
    }
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("hostile replies", NULL, NULL);
    CU_add_test(s, "MOVED 65535", t_moved_slot_65535);
    CU_add_test(s, "MOVED 16400", t_moved_slot_16400);
    CU_add_test(s, "MOVED 16384", t_moved_slot_16384);
    CU_add_test(s, "MOVED -1", t_moved_slot_negative);
    CU_add_test(s, "MOVED 2^64+1", t_moved_slot_huge);
    CU_add_test(s, "ASK 99999", t_ask_slot_bad);
    CU_add_test(s, "MOVED port with junk", t_moved_port_junk);
    CU_add_test(s, "MOVED port out of range", t_moved_port_range);
    CU_add_test(s, "CLUSTER SLOTS bad ranges/ports", t_slots_bad_ranges);
    CU_add_test(s, "sentinel names a bad port", t_sentinel_bad_port);
    CU_add_test(s, "*888888880 refused", t_huge_array);
    CU_add_test(s, "array over the limit refused", t_array_over_limit);
    CU_add_test(s, "huge nested array refused", t_huge_nested);
    CU_add_test(s, "nesting too deep refused", t_too_deep);
    CU_add_test(s, "$999999999 allocates nothing", t_huge_bulk);
    CU_add_test(s, "a streamed huge bulk is cut at 32 MB", t_huge_bulk_streamed);
    CU_add_test(s, "impossible acquire numbers", t_bad_acquire_numbers);
    CU_add_test(s, "bounded reader builds replies", t_bounded_reader_builds);
    CU_add_test(s, "redirect parser", t_parse_redirect);
    CU_add_test(s, "sentinel master address", t_parse_master_addr);
    CU_add_test(s, "decoders validate numbers", t_decode_numbers);
    CU_add_test(s, "URL without hosts (fuzz_url)", t_url_without_seeds);
    return th_cu_run();
}
