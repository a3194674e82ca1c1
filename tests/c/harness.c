#define _GNU_SOURCE
#include "harness.h"

#include "hilock.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TH_MAX_SERVERS 64
static th_redis *th_started[TH_MAX_SERVERS];
static int th_atexit_set;

int64_t th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

int th_wait_for(int (*cond)(void *), void *arg, int64_t timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        if (cond(arg))
            return 1;
        if (th_now_ms() >= end)
            return 0;
        th_sleep_ms(5);
    }
}

int th_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

int th_port_is_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static void th_stop_all(void)
{
    for (int i = 0; i < TH_MAX_SERVERS; i++)
        if (th_started[i])
            th_redis_stop(th_started[i]);
}

static void th_track(th_redis *r, int add)
{
    for (int i = 0; i < TH_MAX_SERVERS; i++) {
        if (add && !th_started[i]) {
            th_started[i] = r;
            return;
        }
        if (!add && th_started[i] == r) {
            th_started[i] = NULL;
            return;
        }
    }
}

static const char *th_password(const th_redis *r, char *buf, size_t len)
{
    const char *p = strstr(r->extra, "--requirepass ");
    if (!p)
        return NULL;
    p += strlen("--requirepass ");
    size_t n = strcspn(p, " ");
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
    return buf;
}

redisContext *th_redis_connect(const th_redis *r)
{
    struct timeval tv = {2, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    if (!ctx || ctx->err) {
        if (ctx)
            redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    char pw[128];
    if (th_password(r, pw, sizeof pw)) {
        redisReply *rep = redisCommand(ctx, "AUTH %s", pw);
        if (rep)
            freeReplyObject(rep);
    }
    return ctx;
}

long long th_redis_int(const th_redis *r, const char *fmt, ...)
{
    redisContext *ctx = th_redis_connect(r);
    if (!ctx)
        return -1000;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    long long v = -1000;
    if (rep) {
        if (rep->type == REDIS_REPLY_INTEGER)
            v = rep->integer;
        else if (rep->type == REDIS_REPLY_STRING)
            v = strtoll(rep->str, NULL, 10);
        else if (rep->type == REDIS_REPLY_NIL)
            v = -1001;
        freeReplyObject(rep);
    }
    redisFree(ctx);
    return v;
}

long long th_redis_numsub(const th_redis *r, const char *channel)
{
    redisContext *ctx = th_redis_connect(r);
    long long v = -1000;
    redisReply *rep = ctx ? redisCommand(ctx, "PUBSUB NUMSUB %s", channel) : NULL;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
        rep->element[1]->type == REDIS_REPLY_INTEGER)
        v = rep->element[1]->integer;
    if (rep)
        freeReplyObject(rep);
    if (ctx)
        redisFree(ctx);
    return v;
}

long long th_redis_clients(const th_redis *r)
{
    redisContext *ctx = th_redis_connect(r);
    long long n = -1;
    redisReply *rep = ctx ? redisCommand(ctx, "INFO clients") : NULL;
    const char *f =
        rep && (rep->type == REDIS_REPLY_VERB || rep->type == REDIS_REPLY_STRING) ? rep->str : NULL;
    const char *at = f ? strstr(f, "connected_clients:") : NULL;
    if (at)
        n = atoll(at + strlen("connected_clients:")) - 1; /* not this one */
    if (rep)
        freeReplyObject(rep);
    if (ctx)
        redisFree(ctx);
    return n;
}

typedef struct th_numsub_want {
    const th_redis *r;
    const char *channel;
    long long want;
} th_numsub_want;

static int th_numsub_is(void *arg)
{
    const th_numsub_want *w = arg;
    return th_redis_numsub(w->r, w->channel) == w->want;
}

int th_wait_numsub(const th_redis *r, const char *channel, long long want, int64_t timeout_ms)
{
    th_numsub_want w = {r, channel, want};
    return th_wait_for(th_numsub_is, &w, timeout_ms);
}

static int th_spawn(th_redis *r)
{
    char portbuf[16];
    snprintf(portbuf, sizeof portbuf, "%d", r->port);
    char extra[512];
    snprintf(extra, sizeof extra, "%s", r->extra);
    char *argv[64];
    int argc = 0;
    argv[argc++] = "redis-server";
    argv[argc++] = "--port";
    argv[argc++] = portbuf;
    argv[argc++] = "--bind";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = "--save";
    argv[argc++] = "";
    argv[argc++] = "--appendonly";
    argv[argc++] = "no";
    /* a replica's full sync starts at once, through an RDB file: the
     * default diskless sync waits 5 s for more replicas to join one
     * transfer, and with no wait (repl-diskless-sync-delay 0) Redis 7.0.15
     * left a just-synchronised replica acknowledging offset 0 now and then
     * (2 of 8 runs of test_async_silence under ASan) */
    argv[argc++] = "--repl-diskless-sync";
    argv[argc++] = "no";
    argv[argc++] = "--dir";
    argv[argc++] = r->dir;
    argv[argc++] = "--logfile";
    argv[argc++] = "redis.log";
    for (char *tok = strtok(extra, " "); tok && argc < 62; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int devnull = open("/dev/null", 0);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        argv[0] = (char *)th_server_bin();
        execvp(argv[0], argv);
        _exit(127);
    }
    r->pid = pid;
    /* wait for PING */
    int64_t end = th_now_ms() + 5000;
    while (th_now_ms() < end) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            r->pid = 0;
            return -1; /* died: port taken or bad args */
        }
        redisContext *ctx = th_redis_connect(r);
        if (ctx) {
            redisReply *rep = redisCommand(ctx, "PING");
            int ok = rep && rep->type == REDIS_REPLY_STATUS;
            if (rep)
                freeReplyObject(rep);
            redisFree(ctx);
            if (ok)
                return 0;
        }
        th_sleep_ms(10);
    }
    return -1;
}

int th_redis_start(th_redis *r, const char *extra)
{
    memset(r, 0, sizeof *r);
    snprintf(r->extra, sizeof r->extra, "%s", extra ? extra : "");
    snprintf(r->dir, sizeof r->dir, "/tmp/hilock-test-XXXXXX");
    if (!mkdtemp(r->dir))
        return -1;
    if (!th_atexit_set) {
        atexit(th_stop_all);
        th_atexit_set = 1;
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = th_free_port();
        /* a cluster node also listens on its bus port, port + 10000 */
        if (strstr(r->extra, "--cluster-enabled yes"))
            while (r->port > 55535 || !th_port_is_free(r->port + 10000))
                r->port = th_free_port();
        snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
        if (th_spawn(r) == 0) {
            th_track(r, 1);
            return 0;
        }
        if (r->pid > 0) {
            kill(r->pid, SIGKILL);
            waitpid(r->pid, NULL, 0);
            r->pid = 0;
        }
    }
    return -1;
}

/* Send sig and reap the server (SIGKILL after 3 s). SIGKILL ends a stopped
 * (th_redis_pause) process as it is: no SIGCONT first, which would let it
 * run, for a moment, the commands queued while it was stopped. Any other
 * signal stays pending in a stopped process: SIGCONT after it, so that the
 * server handles it as soon as it runs again. */
static void th_kill(th_redis *r, int sig)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, sig);
    if (sig != SIGKILL)
        kill(r->pid, SIGCONT);
    int64_t end = th_now_ms() + 3000;
    while (th_now_ms() < end) {
        if (waitpid(r->pid, NULL, WNOHANG) == r->pid) {
            r->pid = 0;
            return;
        }
        th_sleep_ms(2);
    }
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
}

void th_redis_stop(th_redis *r)
{
    if (!r || r->pid <= 0)
        return;
    th_kill(r, SIGTERM);
    th_track(r, 0);
    char path[256];
    snprintf(path, sizeof path, "%s/redis.log", r->dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/dump.rdb", r->dir);
    unlink(path);
    rmdir(r->dir);
}

int th_redis_restart(th_redis *r)
{
    th_kill(r, SIGKILL);
    for (int attempt = 0; attempt < 50; attempt++) {
        if (th_spawn(r) == 0)
            return 0;
        th_sleep_ms(20); /* port may linger briefly */
    }
    return -1;
}

void th_redis_pause(th_redis *r)
{
    if (r->pid > 0)
        kill(r->pid, SIGSTOP);
}

void th_redis_resume(th_redis *r)
{
    if (r->pid > 0)
        kill(r->pid, SIGCONT);
}

int th_redis_stopped(const th_redis *r)
{
    char path[64], buf[256] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)r->pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
    return p && p[1] == ' ' && p[2] == 'T';
}

/* ---- additions ---- */
#include <dirent.h>
#include <CUnit/Basic.h>

int th_valgrind(void)
{
    const char *v = getenv("HILOCK_VALGRIND");
    return v && strcmp(v, "1") == 0;
}

int th_thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static int th_threads_are(void *n)
{
    return th_thread_count() == *(int *)n;
}

int th_wait_thread_count(int n, int64_t timeout_ms)
{
    return th_wait_for(th_threads_are, &n, timeout_ms);
}

int th_redis_str(const th_redis *r, char *buf, size_t len, const char *fmt, ...)
{
    redisContext *ctx = th_redis_connect(r);
    if (!ctx)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    int rc = -1;
    if (rep) {
        if (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS) {
            snprintf(buf, len, "%.*s", (int)rep->len, rep->str);
            rc = 0;
        } else if (rep->type == REDIS_REPLY_NIL) {
            rc = 1;
        }
        freeReplyObject(rep);
    }
    redisFree(ctx);
    return rc;
}

typedef struct th_nodes {
    th_redis *nodes;
    int n;
} th_nodes;

static int th_cluster_ok(void *arg)
{
    const th_nodes *c = arg;
    for (int i = 0; i < c->n; i++) {
        char buf[4096] = "";
        if (th_redis_str(&c->nodes[i], buf, sizeof buf, "CLUSTER INFO") != 0 ||
            !strstr(buf, "cluster_state:ok"))
            return 0;
    }
    return 1;
}

int th_cluster_create(th_redis *nodes, int n, int replicas)
{
    char cmd[2048];
    size_t len = (size_t)snprintf(cmd, sizeof cmd, "redis-cli --cluster create");
    for (int i = 0; i < n && len < sizeof cmd; i++)
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, " 127.0.0.1:%d", nodes[i].port);
    if (replicas > 0 && len < sizeof cmd)
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, " --cluster-replicas %d", replicas);
    if (len < sizeof cmd)
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, " --cluster-yes >/dev/null 2>&1");
    if (len >= sizeof cmd || system(cmd) != 0)
        return -1;
    th_nodes c = {nodes, n};
    return th_wait_for(th_cluster_ok, &c, 20000) ? 0 : -1;
}

void th_cluster_stop(th_redis *nodes, int n)
{
    for (int i = 0; i < n; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/nodes.conf", nodes[i].dir);
        th_redis_stop(&nodes[i]); /* a node may write nodes.conf as it stops */
        unlink(path);
        rmdir(nodes[i].dir);
    }
}

int th_cu_run(void)
{
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned int failed = CU_get_number_of_failures();
    unsigned int suites_failed = CU_get_number_of_suites_failed();
    unsigned int errors = CU_get_error();
    CU_cleanup_registry();
    printf("\n%s\n", failed || suites_failed || errors ? "FAILED" : "ALL PASSED");
    return failed || suites_failed || errors ? 1 : 0;
}

const char *th_server_bin(void)
{
    const char *b = getenv("HILOCK_REDIS_SERVER");
    return b && *b ? b : "redis-server";
}

pid_t th_sentinel_spawn(const char *conf)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        if (!freopen("/dev/null", "w", stdout))
            _exit(127);
        execlp(th_server_bin(), th_server_bin(), conf, "--sentinel", (char *)NULL);
        _exit(127);
    }
    return pid > 0 ? pid : -1;
}

int th_run_capture(const char *prog, const char *const *env, char *out, size_t len)
{
    int fd[2];
    if (len == 0 || pipe(fd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        for (size_t i = 0; env && env[i]; i += 2) {
            if (env[i + 1])
                setenv(env[i], env[i + 1], 1);
            else
                unsetenv(env[i]);
        }
        execl(prog, prog, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < len && (k = read(fd[0], out + n, len - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

redisReply *th_resp(const char *bytes, size_t len)
{
    redisReader *rd = redisReaderCreate();
    void *out = NULL;
    if (!rd || redisReaderFeed(rd, bytes, len) != REDIS_OK ||
        redisReaderGetReply(rd, &out) != REDIS_OK)
        out = NULL;
    if (rd)
        redisReaderFree(rd);
    return out;
}

th_redis th_srv;

int th_srv_init(void)
{
    return th_redis_start(&th_srv, NULL);
}

int th_srv_clean(void)
{
    th_redis_stop(&th_srv);
    return 0;
}

long long th_script_calls(const th_redis *r)
{
    enum { INFO_MAX = 65536 }; /* a server that ran many commands lists them all */
    char *info = malloc(INFO_MAX);
    if (!info || th_redis_str(r, info, INFO_MAX, "INFO commandstats") != 0) {
        free(info);
        return -1;
    }
    long long total = 0;
    const char *names[] = {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="};
    for (int i = 0; i < 2; i++) {
        const char *p = strstr(info, names[i]);
        if (p)
            total += atoll(p + strlen(names[i]));
    }
    free(info);
    return total;
}

hilock_client *th_client_open_opts(const char *url, const hilock_options *o)
{
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, url, o, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  open %s: %d %s (%s)\n", url, rc, hilock_strerror(rc), err);
    return c;
}

hilock_client *th_client_open(const char *url)
{
    return th_client_open_opts(url, NULL);
}

hilock_client *th_cl;

int th_srv_client_init(void)
{
    if (th_srv_init() != 0)
        return -1;
    th_cl = th_client_open(th_srv.url);
    return th_cl ? 0 : -1;
}

int th_srv_client_clean(void)
{
    hilock_client_close(th_cl);
    th_cl = NULL;
    return th_srv_clean();
}

/* The other ends of th_pool_shut_writes's socket pairs: open till exit,
 * so that the pool never sees its connections closed. */
static int th_shut_peers[64];
static int th_nshut_peers;

static void th_close_shut_peers(void)
{
    while (th_nshut_peers > 0)
        close(th_shut_peers[--th_nshut_peers]);
}

int th_pool_shut_writes(struct hilock_client *c)
{
    hl_pool *p = &c->t.nodes[0]->pool;
    pthread_mutex_lock(&p->mu);
    if (th_nshut_peers == 0)
        atexit(th_close_shut_peers); /* (again after a close: harmless) */
    int n = 0;
    for (int i = 0; i < p->nidle; i++) {
        int sv[2];
        if (th_nshut_peers >= (int)(sizeof th_shut_peers / sizeof th_shut_peers[0]) ||
            socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
            break;
        if (shutdown(sv[0], SHUT_WR) == 0 && dup2(sv[0], p->idle[i]->fd) >= 0)
            n++;
        close(sv[0]);
        th_shut_peers[th_nshut_peers++] = sv[1];
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}

int th_pool_idle(struct hilock_client *c)
{
    hl_pool *p = &c->t.nodes[0]->pool;
    pthread_mutex_lock(&p->mu);
    int n = p->nidle;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int th_replica_linked(void *arg)
{
    th_redis *r = arg;
    redisContext *c = th_redis_connect(r);
    if (!c)
        return 0;
    redisReply *rep = redisCommand(c, "INFO replication");
    int up = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "master_link_status:up");
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return up;
}
