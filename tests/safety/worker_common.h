/* What the C safety workers share (worker.c on the blocking API,
 * worker_async.c on hilock_async): the JSON-lines history (README.md here),
 * the fencing store's script over a plain socket, the seeded plan, the
 * options and what main() does first and last (worker_open, worker_close).
 * Header-only (static functions): include it once per program.
 * Times are CLOCK_MONOTONIC in ns, the clock of time.monotonic_ns(). */
#ifndef HILOCK_SAFETY_WORKER_COMMON_H
#define HILOCK_SAFETY_WORKER_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hilock.h"

static const char FENCE_LUA[] =
    "local function ge(a, b)\n"
    "  if #a ~= #b then return #a > #b end\n"
    "  return a >= b\n"
    "end\n"
    "local hi = redis.call('GET', KEYS[1])\n"
    "local ok = 0\n"
    "if (not hi) or ge(ARGV[1], hi) then\n"
    "  redis.call('SET', KEYS[1], ARGV[1]); ok = 1\n"
    "end\n"
    "redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ok)\n"
    "return ok\n";

typedef struct {
    FILE *f;
    int proc;
    int next_id;
    pthread_mutex_t mu;
} wlog;

typedef struct {
    int64_t lease_ms, watchdog_lease_ms, command_timeout_ms, connect_timeout_ms;
    int64_t replica_ack, wait_ms, writes, hold_ms;
    int ignore_lease;
    int reuse_token; /* self-test: every grant claims the first grant's token */
} wopts;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void log_line(wlog *lg, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&lg->mu);
    fprintf(lg->f, "%s,\"p\":%d}\n", buf, lg->proc);
    fflush(lg->f);
    pthread_mutex_unlock(&lg->mu);
}

static int log_inv(wlog *lg, const char *op, const char *extra) {
    int id = ++lg->next_id;
    log_line(lg, "{\"ev\":\"inv\",\"op\":\"%s\",\"id\":%d,\"t\":%" PRId64 "%s", op, id, now_ns(),
             extra);
    return id;
}

static void log_ret(wlog *lg, const char *op, int id, const char *res, const char *extra) {
    log_line(lg, "{\"ev\":\"ret\",\"op\":\"%s\",\"id\":%d,\"t\":%" PRId64 ",\"res\":\"%s\"%s", op,
             id, now_ns(), res, extra);
}

/* ---- the fencing store: EVAL over a plain socket ---- */
typedef struct {
    int fd;
    char keys[2][512];
} fence;

static int fence_open(fence *fc, int port, const char *lock) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fc->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fc->fd < 0 || connect(fc->fd, (struct sockaddr *)&a, sizeof a) != 0) return -1;
    int one = 1;
    setsockopt(fc->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    snprintf(fc->keys[0], sizeof fc->keys[0], "fence:hi:%s", lock);
    snprintf(fc->keys[1], sizeof fc->keys[1], "fence:log:%s", lock);
    return 0;
}

static void put_bulk(char **p, const char *s) {
    *p += sprintf(*p, "$%zu\r\n%s\r\n", strlen(s), s);
}

/* 1 accepted, 0 refused, -1 error */
static int fence_write(fence *fc, int64_t token, const char *grant) {
    char tok[32], cmd[4096], *p = cmd;
    snprintf(tok, sizeof tok, "%" PRId64, token);
    p += sprintf(p, "*7\r\n");
    put_bulk(&p, "EVAL");
    put_bulk(&p, FENCE_LUA);
    put_bulk(&p, "2");
    put_bulk(&p, fc->keys[0]);
    put_bulk(&p, fc->keys[1]);
    put_bulk(&p, tok);
    put_bulk(&p, grant);
    size_t len = (size_t)(p - cmd), off = 0;
    while (off < len) {
        ssize_t n = write(fc->fd, cmd + off, len - off);
        if (n <= 0) return -1;
        off += (size_t)n;
    }
    char rep[64];
    size_t got = 0;
    while (got < 4 || memcmp(rep + got - 2, "\r\n", 2) != 0) {
        if (got >= sizeof rep - 1) return -1;
        ssize_t n = read(fc->fd, rep + got, 1);
        if (n <= 0) return -1;
        got += (size_t)n;
    }
    if (memcmp(rep, ":1\r\n", 4) == 0) return 1;
    if (memcmp(rep, ":0\r\n", 4) == 0) return 0;
    return -1;
}

/* ---- the seeded plan (xorshift; same seed, same plan) ---- */
static uint64_t rng_state;
static double rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static const char *errname(int rc) {
    switch (rc) {
    case HILOCK_ETIMEDOUT: return "timeout";
    case HILOCK_ENOTOWNER: return "notowner";
    case HILOCK_ELOST: return "lost";
    case HILOCK_ECONN: return "ConnectionError";
    case HILOCK_EUNACKED: return "NotAcknowledgedError";
    default: return "error";
    }
}

/* ", \"msg\": \"...\"" with the handle's message, quotes and controls dropped */
static void errmsg_json(char *buf, size_t len, const char *name, const char *msg) {
    size_t n = (size_t)snprintf(buf, len, ",\"err\":\"%s\",\"msg\":\"", name);
    for (const char *p = msg; *p && n + 3 < len; p++)
        if (*p != '"' && *p != '\\' && (unsigned char)*p >= 32) buf[n++] = *p;
    if (n + 3 > len) n = len - 3;
    buf[n++] = '"';
    buf[n] = 0;
}

/* KEY=VALUE words of the command line into o (defaults first); 0, or -1 on
 * an unknown key or a word without '=' */
static int wopts_parse(wopts *o, int argc, char **argv, int first) {
    wopts d = {0, 3000, 500, 500, 0, 2000, 3, 60, 0, 0};
    *o = d;
    for (int i = first; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) return -1;
        *eq = 0;
        const char *k = argv[i], *v = eq + 1;
        int64_t n = strtoll(v, NULL, 10);
        if (!strcmp(k, "lease_ms")) o->lease_ms = n;
        else if (!strcmp(k, "watchdog_lease_ms")) o->watchdog_lease_ms = n;
        else if (!strcmp(k, "command_timeout_ms")) o->command_timeout_ms = n;
        else if (!strcmp(k, "connect_timeout_ms")) o->connect_timeout_ms = n;
        else if (!strcmp(k, "replica_ack")) o->replica_ack = n;
        else if (!strcmp(k, "wait_ms")) o->wait_ms = n;
        else if (!strcmp(k, "writes")) o->writes = n;
        else if (!strcmp(k, "hold_ms")) o->hold_ms = n;
        else if (!strcmp(k, "broken")) {
            o->ignore_lease = !strcmp(v, "ignore-lease");
            o->reuse_token = !strcmp(v, "reuse-token");
        }
        else return -1;
    }
    return 0;
}

/* ---- what main() does first and last in both workers ---- */
enum { WORKER_MAXN = 9 };

typedef struct {
    wlog lg;
    wopts o;
    fence fc;
    const char *lock_name;
    uint64_t seed;
    double secs;
    /* URL "u1|u2|...": a Redlock over one lock per server (no fencing token) */
    hilock_client *cs[WORKER_MAXN];
    hilock_lock *ls[WORKER_MAXN];
    hilock_multilock *ml; /* NULL for one server */
    size_t n;
} worker;

/* The command line (prog names the worker in the usage line), the log and
 * the fence, the options, the clients, one fenced lock (or a Redlock over
 * plain locks), the "start" line with driver. 0, or the exit status. */
static int worker_open(worker *w, int argc, char **argv, const char *prog, const char *driver) {
    memset(w, 0, sizeof *w);
    if (argc < 8) {
        fprintf(stderr, "usage: %s URL LOCK FENCE_PORT PROC_ID SEED SECONDS LOG [K=V...]\n", prog);
        return 2;
    }
    const char *url = argv[1];
    w->lock_name = argv[2];
    int fence_port = atoi(argv[3]);
    w->lg = (wlog){NULL, atoi(argv[4]), 0, PTHREAD_MUTEX_INITIALIZER};
    w->seed = strtoull(argv[5], NULL, 10);
    w->secs = atof(argv[6]);
    if (wopts_parse(&w->o, argc, argv, 8) != 0) return 2;
    rng_state = w->seed * 0x9E3779B97F4A7C15ULL + (uint64_t)w->lg.proc * 0xBF58476D1CE4E5B9ULL + 1;
    w->lg.f = fopen(argv[7], "a");
    if (!w->lg.f) return 1;
    if (fence_open(&w->fc, fence_port, w->lock_name) != 0) return 1;

    hilock_options opts;
    hilock_options_init(&opts, HILOCK_OPTIONS_VERSION);
    opts.watchdog_lease_ms = w->o.watchdog_lease_ms;
    opts.command_timeout_ms = w->o.command_timeout_ms;
    opts.connect_timeout_ms = w->o.connect_timeout_ms;
    opts.replica_ack = (int)w->o.replica_ack;
    /* the library's version: a self-test build says "+BROKEN-<mode>" (safety.py checks it) */
    log_line(&w->lg,
             "{\"ev\":\"start\",\"t\":%" PRId64 ",\"pid\":%d,\"driver\":\"%s\",\"version\":\"%s\"",
             now_ns(), (int)getpid(), driver, hilock_version_string());
    char urls[2048];
    snprintf(urls, sizeof urls, "%s", url);
    char err[256];
    int rc = 0;
    for (char *save = NULL, *u = strtok_r(urls, "|", &save); u && w->n < WORKER_MAXN;
         u = strtok_r(NULL, "|", &save), w->n++) {
        /* the open is not what is tested: a fault that hits it (servers and
         * clients start together) is waited out, 30 s at most */
        int64_t open_until = now_ns() + (int64_t)30 * 1000000000;
        while ((rc = hilock_client_open(&w->cs[w->n], u, &opts, err, sizeof err)) == HILOCK_ECONN &&
               now_ns() < open_until)
            sleep_ns(100000000);
        if (rc != 0) break;
    }
    if (rc != 0) {
        log_line(&w->lg, "{\"ev\":\"fatal\",\"t\":%" PRId64 ",\"err\":\"open %s\"", now_ns(),
                 hilock_strerror(rc));
        fclose(w->lg.f);
        return 1;
    }
    for (size_t i = 0; i < w->n; i++) {
        if ((w->n > 1 ? hilock_lock_new(&w->ls[i], w->cs[i], w->lock_name)
                      : hilock_fenced_lock_new(&w->ls[i], w->cs[i], w->lock_name)) != 0)
            return 1;
    }
    if (w->n > 1 && hilock_redlock_new(&w->ml, w->ls, w->n) != 0) return 1;
    return 0;
}

/* The "end" line; everything worker_open made, freed. */
static void worker_close(worker *w) {
    log_line(&w->lg, "{\"ev\":\"end\",\"t\":%" PRId64, now_ns());
    hilock_multilock_free(w->ml);
    for (size_t i = 0; i < w->n; i++) {
        hilock_lock_free(w->ls[i]);
        hilock_client_close(w->cs[i]);
    }
    close(w->fc.fd);
    fclose(w->lg.f);
}

#endif
