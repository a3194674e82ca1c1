/* One safety client process on the blocking C API (libhilock): the same loop
 * and the same JSON-lines history as worker.py (see README.md here).
 *
 *   worker-c URL LOCK FENCE_PORT PROC_ID SEED SECONDS LOG KEY=VALUE...
 *
 * Times are CLOCK_MONOTONIC in ns, the clock of time.monotonic_ns(). */
#define _POSIX_C_SOURCE 200809L
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

static void on_lost(hilock_lock *l, uint64_t tid, void *payload) {
    wlog *lg = payload;
    int doubt = strstr(hilock_lock_errmsg(l), "doubt") != NULL;
    log_line(lg, "{\"ev\":\"report\",\"op\":\"lost\",\"t\":%" PRId64 ",\"doubt\":%s,\"tid\":%" PRIu64,
             now_ns(), doubt ? "true" : "false", tid);
}

static void on_lost_ml(hilock_multilock *m, uint64_t tid, void *payload) {
    wlog *lg = payload;
    int doubt = strstr(hilock_multilock_errmsg(m), "doubt") != NULL;
    log_line(lg, "{\"ev\":\"report\",\"op\":\"lost\",\"t\":%" PRId64 ",\"doubt\":%s,\"tid\":%" PRIu64,
             now_ns(), doubt ? "true" : "false", tid);
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

static int may_write(const wopts *o, hilock_lock *l, hilock_multilock *m, uint64_t tid,
                     int64_t acq_inv) {
    if (m ? hilock_multilock_is_lost(m) : hilock_lock_is_lost_tid(l, tid)) return 0;
    if (o->lease_ms && !o->ignore_lease)
        return now_ns() < acq_inv + (o->lease_ms - o->lease_ms / 5) * 1000000;
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: worker-c URL LOCK FENCE_PORT PROC_ID SEED SECONDS LOG [K=V...]\n");
        return 2;
    }
    const char *url = argv[1], *lock_name = argv[2];
    int fence_port = atoi(argv[3]);
    wlog lg = {NULL, atoi(argv[4]), 0, PTHREAD_MUTEX_INITIALIZER};
    uint64_t seed = strtoull(argv[5], NULL, 10);
    double secs = atof(argv[6]);
    wopts o = {0, 3000, 500, 500, 0, 2000, 3, 60, 0, 0};
    for (int i = 8; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) return 2;
        *eq = 0;
        const char *k = argv[i], *v = eq + 1;
        int64_t n = strtoll(v, NULL, 10);
        if (!strcmp(k, "lease_ms")) o.lease_ms = n;
        else if (!strcmp(k, "watchdog_lease_ms")) o.watchdog_lease_ms = n;
        else if (!strcmp(k, "command_timeout_ms")) o.command_timeout_ms = n;
        else if (!strcmp(k, "connect_timeout_ms")) o.connect_timeout_ms = n;
        else if (!strcmp(k, "replica_ack")) o.replica_ack = n;
        else if (!strcmp(k, "wait_ms")) o.wait_ms = n;
        else if (!strcmp(k, "writes")) o.writes = n;
        else if (!strcmp(k, "hold_ms")) o.hold_ms = n;
        else if (!strcmp(k, "broken")) {
            o.ignore_lease = !strcmp(v, "ignore-lease");
            o.reuse_token = !strcmp(v, "reuse-token");
        }
        else return 2;
    }
    rng_state = seed * 0x9E3779B97F4A7C15ULL + (uint64_t)lg.proc * 0xBF58476D1CE4E5B9ULL + 1;
    lg.f = fopen(argv[7], "a");
    if (!lg.f) return 1;
    fence fc;
    if (fence_open(&fc, fence_port, lock_name) != 0) return 1;

    hilock_options opts;
    hilock_options_init(&opts, HILOCK_OPTIONS_VERSION);
    opts.watchdog_lease_ms = o.watchdog_lease_ms;
    opts.command_timeout_ms = o.command_timeout_ms;
    opts.connect_timeout_ms = o.connect_timeout_ms;
    opts.replica_ack = (int)o.replica_ack;
    log_line(&lg, "{\"ev\":\"start\",\"t\":%" PRId64 ",\"pid\":%d,\"driver\":\"c\"", now_ns(),
             (int)getpid());
    /* URL "u1|u2|...": a Redlock over one lock per server (no fencing token) */
    enum { MAXN = 9 };
    hilock_client *cs[MAXN] = {0};
    hilock_lock *ls[MAXN] = {0};
    hilock_multilock *ml = NULL;
    size_t n = 0;
    char urls[2048];
    snprintf(urls, sizeof urls, "%s", url);
    char err[256];
    int rc = 0;
    for (char *save = NULL, *u = strtok_r(urls, "|", &save); u && n < MAXN;
         u = strtok_r(NULL, "|", &save), n++) {
        /* the open is not what is tested: a fault that hits it (servers and
         * clients start together) is waited out, 30 s at most */
        int64_t open_until = now_ns() + (int64_t)30 * 1000000000;
        while ((rc = hilock_client_open(&cs[n], u, &opts, err, sizeof err)) == HILOCK_ECONN &&
               now_ns() < open_until)
            sleep_ns(100000000);
        if (rc != 0) break;
    }
    if (rc != 0) {
        log_line(&lg, "{\"ev\":\"fatal\",\"t\":%" PRId64 ",\"err\":\"open %s\"", now_ns(),
                 hilock_strerror(rc));
        fclose(lg.f);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if ((n > 1 ? hilock_lock_new(&ls[i], cs[i], lock_name)
                   : hilock_fenced_lock_new(&ls[i], cs[i], lock_name)) != 0)
            return 1;
    }
    hilock_lock *l = ls[0];
    if (n > 1) {
        if (hilock_redlock_new(&ml, ls, n) != 0) return 1;
        hilock_multilock_set_lost_callback(ml, on_lost_ml, &lg);
    } else {
        hilock_lock_set_lost_callback(l, on_lost, &lg);
    }
    uint64_t tid = hilock_thread_id();
    log_line(&lg, "{\"ev\":\"ready\",\"t\":%" PRId64, now_ns());
    int64_t deadline = now_ns() + (int64_t)(secs * 1e9);
    int grants = 0;
    char extra[400];
    while (now_ns() < deadline) {
        snprintf(extra, sizeof extra, ",\"lease_ms\":%" PRId64, o.lease_ms);
        int oid = log_inv(&lg, "acq", extra);
        int64_t acq_inv = now_ns();
        int64_t token = 0;
        rc = ml ? hilock_multilock_acquire(ml, o.wait_ms, o.lease_ms)
                : hilock_lock_acquire_token(&token, l, o.wait_ms, o.lease_ms);
        if (rc == HILOCK_ETIMEDOUT) {
            log_ret(&lg, "acq", oid, "timeout", "");
            continue;
        }
        if (rc != 0) {
            errmsg_json(extra, sizeof extra, errname(rc),
                        ml ? hilock_multilock_errmsg(ml) : hilock_lock_errmsg(l));
            log_ret(&lg, "acq", oid, "error", extra);
            sleep_ns((int64_t)((0.05 + rnd() * 0.05) * 1e9));
            continue;
        }
        grants++;
        static int64_t first_token;
        if (o.reuse_token && first_token) token = first_token;
        else if (!first_token) first_token = token;
        char grant[32];
        snprintf(grant, sizeof grant, "%d.%d", lg.proc, grants);
        if (ml) snprintf(extra, sizeof extra, ",\"token\":null,\"grant\":\"%s\"", grant);
        else snprintf(extra, sizeof extra, ",\"token\":%" PRId64 ",\"grant\":\"%s\"", token, grant);
        log_ret(&lg, "acq", oid, "ok", extra);
        for (int64_t w = 0; w < o.writes; w++) {
            sleep_ns((int64_t)((0.2 + 0.8 * rnd()) * (double)o.hold_ms * 1e6));
            if (!may_write(&o, l, ml, tid, acq_inv)) break;
            snprintf(extra, sizeof extra, ",\"token\":%" PRId64 ",\"grant\":\"%s\"", token, grant);
            int wid = log_inv(&lg, "write", extra);
            /* a Redlock grant has no token: the write is only a claim (for
             * Porcupine), the store is not asked */
            int ok = ml ? 1 : fence_write(&fc, token, grant);
            log_ret(&lg, "write", wid, ok == 1 ? "ok" : ok == 0 ? "refused" : "error", "");
        }
        snprintf(extra, sizeof extra, ",\"grant\":\"%s\"", grant);
        int rid = log_inv(&lg, "rel", extra);
        rc = ml ? hilock_multilock_release(ml) : hilock_lock_release(l);
        if (rc == 0) log_ret(&lg, "rel", rid, "ok", "");
        else if (rc == HILOCK_ENOTOWNER) log_ret(&lg, "rel", rid, "notowner", "");
        else {
            errmsg_json(extra, sizeof extra, errname(rc),
                        ml ? hilock_multilock_errmsg(ml) : hilock_lock_errmsg(l));
            log_ret(&lg, "rel", rid, "error", extra);
        }
        sleep_ns((int64_t)(rnd() * 0.05 * 1e9));
    }
    log_line(&lg, "{\"ev\":\"end\",\"t\":%" PRId64, now_ns());
    hilock_multilock_free(ml);
    for (size_t i = 0; i < n; i++) {
        hilock_lock_free(ls[i]);
        hilock_client_close(cs[i]);
    }
    close(fc.fd);
    fclose(lg.f);
    return 0;
}
