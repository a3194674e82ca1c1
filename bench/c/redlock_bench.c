/*
 * Redlock latency bench: acquire+release of a Redlock over 5 independent
 * redis-servers against acquire+release of one lock on one of them, in the
 * same run, interleaved in rounds so that machine noise hits both alike.
 *
 * Physical limit measured in the same run: one lock script + one unlock
 * script by EVALSHA on a raw hiredis connection (two round trips, nothing
 * else), and, when redis-benchmark is in PATH, its p50 for EVALSHA of the
 * same lock script over one connection (x2 for the pair).
 *
 * The Redlock's own limit ("raw 5-node parallel, library scripts"): one
 * thread sends the library's own acquire script (with an acquire latch
 * argument, as the library sends it) to the five servers on raw sockets,
 * reading only what poll() says is there, then does the same with the
 * library's unlock script (fresh unlock latch). No lock library: what a
 * Redlock of 5 costs at the least on this machine. It and the Redlock run
 * pair by pair, alternating which goes first. "client CPU/op" is the
 * calling thread's CPU time per pair (syscalls included: on loopback the
 * sender's kernel time includes delivering to the server).
 *
 * Multi-lock hand-off: two threads, each with its own five clients, take
 * turns on a multi-lock over the five servers; the waiter blocks in
 * hilock_multilock_acquire (wait forever) while the other holds, and a
 * sample is from the holder's release returning to the waiter's acquire
 * returning. Its limit is a publish plus one parallel round trip.
 *
 *   redlock_bench [-n pairs-per-round] [-r rounds] [-d delay-us] [url1 ... url5]
 *
 * Without URLs it starts five throwaway redis-servers on free loopback
 * ports and stops them at exit. -d puts a forwarding proxy in front of each
 * server that holds every request for delay-us microseconds (a network
 * round trip longer than loopback's); every series, the raw limits
 * included, then goes through the proxies.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <netinet/tcp.h>
#include <pthread.h>
#include <hiredis/hiredis.h>

#include <poll.h>

#include "hilock.h"
#include "proto.h" /* the library's own scripts, for the parallel limit */
#include "bench_util.h"

#define NODES 5

static pid_t servers[NODES];
static int ports[NODES];
static char dirs[NODES][64];

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void stop_servers(void)
{
    for (int i = 0; i < NODES; i++) {
        if (servers[i] > 0) {
            kill(servers[i], SIGKILL);
            waitpid(servers[i], NULL, 0);
            servers[i] = 0;
            char p[400];
            snprintf(p, sizeof p, "%s/redis.log", dirs[i]);
            unlink(p);
            rmdir(dirs[i]);
        }
    }
}

static void on_signal(int sig)
{
    (void)sig;
    stop_servers();
    _exit(130);
}

static int ping(int port)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    int ok = 0;
    if (c && !c->err) {
        redisReply *r = redisCommand(c, "PING");
        ok = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return ok;
}

static int start_server(int i)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        ports[i] = free_port();
        snprintf(dirs[i], sizeof dirs[i], "/tmp/hilock-bench-XXXXXX");
        if (!mkdtemp(dirs[i]))
            return -1;
        char port[16];
        snprintf(port, sizeof port, "%d", ports[i]);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(127);
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", dirs[i], "--logfile",
                   "redis.log", (char *)NULL);
            _exit(127);
        }
        servers[i] = pid;
        for (int k = 0; k < 500; k++) {
            if (waitpid(pid, NULL, WNOHANG) == pid) {
                servers[i] = 0;
                break;
            }
            if (ping(ports[i]))
                return 0;
            sleep_ms(10);
        }
        if (servers[i] > 0) {
            kill(servers[i], SIGKILL);
            waitpid(servers[i], NULL, 0);
            servers[i] = 0;
        }
        rmdir(dirs[i]);
    }
    return -1;
}

/* ---- delaying proxy ---- */

typedef struct px_conn {
    int fd[2]; /* client, server */
    int refs;
    int64_t delay_us;
} px_conn;

typedef struct px_dir {
    px_conn *c;
    int from, to;
    int64_t delay_us;
} px_dir;

static void sleep_us(int64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static void *px_pump(void *arg)
{
    px_dir *d = arg;
    char buf[16384];
    for (;;) {
        ssize_t n = read(d->from, buf, sizeof buf);
        if (n <= 0)
            break;
        if (d->delay_us > 0)
            sleep_us(d->delay_us);
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(d->to, buf + off, (size_t)(n - off));
            if (w <= 0)
                goto done;
            off += w;
        }
    }
done:
    shutdown(d->from, SHUT_RDWR);
    shutdown(d->to, SHUT_RDWR);
    px_conn *c = d->c;
    free(d);
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        close(c->fd[0]);
        close(c->fd[1]);
        free(c);
    }
    return NULL;
}

typedef struct px_listener {
    int fd;
    int upstream;
    int64_t delay_us;
} px_listener;

static void *px_accept(void *arg)
{
    px_listener *px = arg;
    for (;;) {
        int cfd = accept(px->fd, NULL, NULL);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        int sfd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)px->upstream);
        if (sfd < 0 || connect(sfd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(cfd);
            if (sfd >= 0)
                close(sfd);
            continue;
        }
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        px_conn *c = calloc(1, sizeof *c);
        px_dir *up = calloc(1, sizeof *up), *down = calloc(1, sizeof *down);
        if (!c || !up || !down) {
            free(c);
            free(up);
            free(down);
            close(cfd);
            close(sfd);
            continue;
        }
        c->fd[0] = cfd;
        c->fd[1] = sfd;
        c->refs = 2;
        *up = (px_dir){c, cfd, sfd, px->delay_us};
        *down = (px_dir){c, sfd, cfd, 0};
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        if (pthread_create(&t, &at, px_pump, up) != 0)
            abort();
        if (pthread_create(&t, &at, px_pump, down) != 0)
            abort();
        pthread_attr_destroy(&at);
    }
}

/* Listen on a free loopback port forwarding to upstream; returns the port. */
static int px_start(px_listener *px, int upstream, int64_t delay_us)
{
    px->fd = socket(AF_INET, SOCK_STREAM, 0);
    px->upstream = upstream;
    px->delay_us = delay_us;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (px->fd < 0 || bind(px->fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(px->fd, 64) != 0 || getsockname(px->fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    pthread_t t;
    if (pthread_create(&t, NULL, px_accept, px) != 0)
        return -1;
    pthread_detach(t);
    return ntohs(a.sin_port);
}

typedef struct series {
    const char *name;
    int64_t *v;
    size_t n, cap;
    long failures;
    int64_t cpu_ns; /* this thread's CPU time over the series' loops */
} series;

static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void add(series *s, int64_t ns)
{
    if (s->n < s->cap)
        s->v[s->n++] = ns;
}

static double pct(series *s, double p)
{
    if (s->n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(s->n - 1) + 0.5);
    return (double)s->v[i] / 1000.0; /* us */
}

/* A lock script and an unlock script of the same shape as the library's
 * (hash field + pexpire; hdel + del), for the raw round-trip baseline. */
static const char *RAW_LOCK =
    "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 "
    "then redis.call('hincrby', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) "
    "return nil end return redis.call('pttl', KEYS[1])";
static const char *RAW_UNLOCK =
    "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end "
    "local n = redis.call('hincrby', KEYS[1], ARGV[1], -1) if n > 0 then return 0 end "
    "redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], '0') return 1";

static char sha_lock[41], sha_unlock[41];

static int load(redisContext *c, const char *src, char *sha)
{
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", src);
    int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok)
        memcpy(sha, r->str, 41);
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* redis-benchmark p50 (ms) of EVALSHA of the lock script, one connection. */
static double redis_benchmark_p50(const char *host, int port, int requests)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "redis-benchmark -h %s -p %d -c 1 -n %d --csv EVALSHA %s 1 "
             "rb:__rand_int__ 30000 owner 2>/dev/null",
             host, port, requests, sha_lock);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    char line[512];
    double p50 = -1;
    int header = 1;
    while (fgets(line, sizeof line, f)) {
        if (header) { /* "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",... */
            header = 0;
            continue;
        }
        char *p = line;
        for (int field = 0; field < 4 && p; field++) {
            p = strchr(p, ',');
            if (p)
                p++;
        }
        if (p)
            p50 = strtod(p + (*p == '"'), NULL);
    }
    pclose(f);
    return p50;
}

/* One round of five lock requests written together, then five replies;
 * the same for unlock. */
static int par_pair(redisContext **cs)
{
    int ok = 1;
    for (int phase = 0; phase < 2; phase++) {
        for (int i = 0; i < NODES; i++) {
            if (phase == 0)
                redisAppendCommand(cs[i], "EVALSHA %s 2 bench:par ch 30000 me", sha_lock);
            else
                redisAppendCommand(cs[i], "EVALSHA %s 2 bench:par ch me", sha_unlock);
            int done = 0;
            while (!done)
                if (redisBufferWrite(cs[i], &done) != REDIS_OK)
                    return 0;
        }
        for (int i = 0; i < NODES; i++) {
            void *r = NULL;
            if (redisGetReply(cs[i], &r) != REDIS_OK || !r)
                return 0;
            ok &= ((redisReply *)r)->type != REDIS_REPLY_ERROR;
            freeReplyObject(r);
        }
    }
    return ok;
}

/* The library's acquire and unlock scripts, as it sends them, to all five
 * nodes at once on non-blocking sockets; replies collected with poll(). */
static hl_names lib_names;
static uint64_t lib_seq;

static int par_send_collect(redisContext **cs, hl_cmd *cmds)
{
    int ok = 1;
    for (int i = 0; i < NODES; i++) {
        if (redisAppendCommandArgv(cs[i], cmds[i].argc, cmds[i].argv, cmds[i].argvlen) !=
            REDIS_OK)
            return 0;
        int done = 0;
        while (!done)
            if (redisBufferWrite(cs[i], &done) != REDIS_OK)
                return 0;
    }
    int got[NODES] = {0}, left = NODES;
    while (left > 0) {
        struct pollfd pf[NODES];
        int who[NODES], np = 0;
        for (int i = 0; i < NODES; i++)
            if (!got[i]) {
                pf[np].fd = cs[i]->fd;
                pf[np].events = POLLIN;
                pf[np].revents = 0;
                who[np++] = i;
            }
        if (poll(pf, (nfds_t)np, 1000) <= 0)
            return 0;
        for (int k = 0; k < np; k++) {
            if (!pf[k].revents)
                continue;
            redisContext *c = cs[who[k]];
            if (redisBufferRead(c) != REDIS_OK)
                return 0;
            void *r = NULL;
            if (redisGetReplyFromReader(c, &r) != REDIS_OK)
                return 0;
            if (r) {
                ok &= ((redisReply *)r)->type != REDIS_REPLY_ERROR;
                freeReplyObject(r);
                got[who[k]] = 1;
                left--;
            }
        }
    }
    return ok;
}

static int par_lib_pair(redisContext **cs)
{
    hl_cmd cmds[NODES];
    char latch[NODES][256];
    const char *owner = "00000000-0000-0000-0000-000000000000:1";
    for (int i = 0; i < NODES; i++) {
        if (hl_acquire_latch_arg(latch[i], sizeof latch[i], &lib_names, owner, 0, ++lib_seq))
            return 0;
        hl_cmd_acquire_latched(&cmds[i], HILOCK_KIND_REENTRANT, &lib_names, owner, 30000, -1,
                               latch[i], 5000);
    }
    if (!par_send_collect(cs, cmds))
        return 0;
    for (int i = 0; i < NODES; i++) {
        snprintf(latch[i], sizeof latch[i], "%s:bench:%llu", lib_names.latch_prefix,
                 (unsigned long long)++lib_seq);
        hl_cmd_release(&cmds[i], HILOCK_KIND_REENTRANT, &lib_names, owner, 30000, latch[i],
                       5000);
    }
    return par_send_collect(cs, cmds);
}

/* ---- multi-lock hand-off ---- */

typedef struct handoff {
    hilock_multilock *m[2];
    int turns;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int holder;            /* who holds now (-1 none yet) */
    int64_t released_at;   /* when the last release returned (0: none pending) */
    int waiting[2];        /* about to block in acquire */
    int done[2];
    series *s;
    long failures;
} handoff;

typedef struct handoff_arg {
    handoff *h;
    int me;
} handoff_arg;

/* Two threads take turns: each blocks in acquire while the other holds;
 * the holder releases once the other is waiting (2 ms after it said so, to
 * let it go to sleep on its subscriptions) and then waits for the other to
 * take it before contending again, so every sample is a hand-off to a
 * blocked waiter, never the releaser barging back. */
static void *handoff_thread(void *arg)
{
    handoff_arg *a = arg;
    handoff *h = a->h;
    int me = a->me, other = 1 - me;
    for (int t = 0; t < h->turns; t++) {
        pthread_mutex_lock(&h->mu);
        while (!(me == 0 && t == 0) && h->holder != other && !h->done[other])
            pthread_cond_wait(&h->cv, &h->mu);
        h->waiting[me] = 1;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        int rc = hilock_multilock_acquire(h->m[me], -1, 30000);
        int64_t got = now_ns();
        pthread_mutex_lock(&h->mu);
        h->waiting[me] = 0;
        if (rc != 0) {
            h->failures++;
            pthread_mutex_unlock(&h->mu);
            break;
        }
        if (h->released_at > 0)
            add(h->s, got - h->released_at);
        h->released_at = 0;
        h->holder = me;
        pthread_cond_broadcast(&h->cv);
        while (!h->waiting[other] && !h->done[other])
            pthread_cond_wait(&h->cv, &h->mu);
        int last = h->done[other];
        pthread_mutex_unlock(&h->mu);
        if (!last)
            sleep_ms(2);
        rc = hilock_multilock_release(h->m[me]);
        int64_t rel = now_ns();
        pthread_mutex_lock(&h->mu);
        if (rc != 0)
            h->failures++;
        h->released_at = last ? 0 : rel;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
    pthread_mutex_lock(&h->mu);
    h->done[me] = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* turns hand-offs of a multi-lock of 5 between two threads with their own
 * clients, into s; members fair locks when fair (the waiter is then in each
 * member's line, woken on its own waiter channel). 0, or -1 on set-up
 * failure. */
static int run_handoff(const char *const *urls, int fair, int turns, series *s)
{
    handoff h;
    memset(&h, 0, sizeof h);
    h.turns = turns;
    h.holder = -1;
    h.s = s;
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    hilock_client *hc[2][NODES] = {{0}};
    hilock_lock *hl[2][NODES] = {{0}};
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        for (int i = 0; i < NODES && rc == 0; i++) {
            char err[256];
            const char *name = fair ? "bench:handoff:fair" : "bench:handoff";
            if (hilock_client_open(&hc[k][i], urls[i], NULL, err, sizeof err) != 0 ||
                (fair ? hilock_fair_lock_new(&hl[k][i], hc[k][i], name)
                      : hilock_lock_new(&hl[k][i], hc[k][i], name)) != 0)
                rc = -1;
        }
        if (rc == 0 && hilock_multilock_new(&h.m[k], hl[k], NODES) != 0)
            rc = -1;
    }
    if (rc == 0) {
        pthread_t ht[2];
        handoff_arg ha[2] = {{&h, 0}, {&h, 1}};
        for (int k = 0; k < 2; k++)
            pthread_create(&ht[k], NULL, handoff_thread, &ha[k]);
        for (int k = 0; k < 2; k++)
            pthread_join(ht[k], NULL);
        s->failures += h.failures;
    }
    for (int k = 0; k < 2; k++) {
        hilock_multilock_free(h.m[k]);
        for (int i = 0; i < NODES; i++) {
            hilock_lock_free(hl[k][i]);
            hilock_client_close(hc[k][i]);
        }
    }
    pthread_mutex_destroy(&h.mu);
    pthread_cond_destroy(&h.cv);
    return rc;
}

/* The same, one node after another (what a sequential Redlock costs). */
static int seq_pair(redisContext **cs)
{
    int ok = 1;
    for (int phase = 0; phase < 2; phase++)
        for (int i = 0; i < NODES; i++) {
            redisReply *r = phase == 0
                                ? redisCommand(cs[i], "EVALSHA %s 2 bench:seq ch 30000 me", sha_lock)
                                : redisCommand(cs[i], "EVALSHA %s 2 bench:seq ch me", sha_unlock);
            if (!r)
                return 0;
            ok &= r->type != REDIS_REPLY_ERROR;
            freeReplyObject(r);
        }
    return ok;
}

int main(int argc, char **argv)
{
    int per_round = 0, rounds = 0;
    int64_t delay_us = 0;
    static px_listener pxs[NODES];
    const char *urls[NODES];
    char own_urls[NODES][64];
    int nurls = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            per_round = atoi(argv[++i]);
        else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "-d") == 0 && i + 1 < argc)
            delay_us = atoll(argv[++i]);
        else if (nurls < NODES)
            urls[nurls++] = argv[i];
        else {
            fprintf(stderr, "usage: %s [-n pairs-per-round] [-r rounds] [5 urls]\n", argv[0]);
            return 2;
        }
    }
    if (nurls != 0 && nurls != NODES) {
        fprintf(stderr, "give all %d urls or none\n", NODES);
        return 2;
    }
    if (per_round == 0)
        per_round = delay_us > 0 ? 100 : 500;
    if (rounds == 0)
        rounds = delay_us > 0 ? 5 : 10;
    if (per_round < 1 || rounds < 1 || delay_us < 0)
        return 2;
    if (nurls == 0) {
        atexit(stop_servers);
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        for (int i = 0; i < NODES; i++) {
            if (start_server(i) != 0) {
                fprintf(stderr, "cannot start redis-server\n");
                return 1;
            }
            snprintf(own_urls[i], sizeof own_urls[i], "redis://127.0.0.1:%d", ports[i]);
            urls[i] = own_urls[i];
        }
    }
    if (delay_us > 0) {
        static char px_urls[NODES][64];
        for (int i = 0; i < NODES; i++) {
            int up = 0;
            if (sscanf(urls[i], "redis://%*[^:]:%d", &up) != 1) {
                fprintf(stderr, "-d needs redis://host:port urls\n");
                return 2;
            }
            int p = px_start(&pxs[i], up, delay_us);
            if (p < 0) {
                fprintf(stderr, "cannot start the delaying proxy\n");
                return 1;
            }
            snprintf(px_urls[i], sizeof px_urls[i], "redis://127.0.0.1:%d", p);
            urls[i] = px_urls[i];
        }
    }

    hilock_client *c[NODES] = {0};
    hilock_lock *rl[NODES] = {0}, *single = NULL;
    hilock_multilock *m = NULL;
    for (int i = 0; i < NODES; i++) {
        char err[256];
        if (hilock_client_open(&c[i], urls[i], NULL, err, sizeof err) != 0) {
            fprintf(stderr, "open %s: %s\n", urls[i], err);
            return 1;
        }
        if (hilock_lock_new(&rl[i], c[i], "bench:redlock") != 0)
            return 1;
    }
    if (hilock_lock_new(&single, c[0], "bench:single") != 0 ||
        hilock_redlock_new(&m, rl, NODES) != 0)
        return 1;

    /* raw connection to node 0 for the physical limit */
    const char *host = "127.0.0.1";
    int port0 = 6379;
    if (sscanf(urls[0], "redis://%*[^:]:%d", &port0) != 1)
        port0 = 6379;
    char hostbuf[128];
    if (sscanf(urls[0], "redis://%127[^:/]", hostbuf) == 1)
        host = hostbuf;
    redisContext *raw = redisConnect(host, port0);
    if (!raw || raw->err || load(raw, RAW_LOCK, sha_lock) || load(raw, RAW_UNLOCK, sha_unlock)) {
        fprintf(stderr, "raw connection to %s:%d failed\n", host, port0);
        return 1;
    }

    size_t cap = (size_t)per_round * (size_t)rounds;
    series s_raw = {"raw EVALSHA lock+unlock (2 RTT)", calloc(cap, 8), 0, cap, 0, 0};
    series s_one = {"single-node acquire+release", calloc(cap, 8), 0, cap, 0, 0};
    series s_red = {"redlock-of-5 acquire+release", calloc(cap, 8), 0, cap, 0, 0};
    series s_par = {"raw 5-node parallel lock+unlock", calloc(cap, 8), 0, cap, 0, 0};
    series s_seq = {"raw 5-node sequential lock+unlock", calloc(cap, 8), 0, cap, 0, 0};
    series s_lib = {"raw 5-node parallel, library scripts", calloc(cap, 8), 0, cap, 0, 0};
    if (!s_raw.v || !s_one.v || !s_red.v || !s_par.v || !s_seq.v || !s_lib.v)
        return 1;
    if (hl_names_init(&lib_names, "bench:parlib") != 0)
        return 1;
    /* raw connections to all five, for the parallel limit: one thread writes
     * the five requests, then collects the five replies (no lock library) */
    redisContext *raw5[NODES];
    for (int i = 0; i < NODES; i++) {
        char h[128];
        int p = 6379;
        if (sscanf(urls[i], "redis://%127[^:/]:%d", h, &p) < 1)
            return 1;
        raw5[i] = redisConnect(h, p);
        char sl[41], su[41];
        if (!raw5[i] || raw5[i]->err || load(raw5[i], RAW_LOCK, sl) ||
            load(raw5[i], RAW_UNLOCK, su))
            return 1;
    }

    /* warm-up: connections, script cache */
    for (int i = 0; i < (delay_us > 0 ? 20 : 200); i++) {
        if (hilock_lock_acquire(single, 0, 30000) == 0)
            hilock_lock_release(single);
        if (hilock_multilock_acquire(m, 0, 30000) == 0)
            hilock_multilock_release(m);
    }

    for (int r = 0; r < rounds; r++) {
        {
            int64_t c0 = cpu_ns();
            for (int i = 0; i < per_round; i++) {
                int64_t t0 = now_ns();
                redisReply *a = redisCommand(raw, "EVALSHA %s 2 bench:raw ch 30000 me", sha_lock);
                redisReply *b =
                    redisCommand(raw, "EVALSHA %s 2 bench:raw ch me", sha_unlock);
                int64_t t1 = now_ns();
                if (a && b && a->type != REDIS_REPLY_ERROR && b->type != REDIS_REPLY_ERROR)
                    add(&s_raw, t1 - t0);
                else
                    s_raw.failures++;
                if (a)
                    freeReplyObject(a);
                if (b)
                    freeReplyObject(b);
            }
            s_raw.cpu_ns += cpu_ns() - c0;
        }
        {
            int64_t c0 = cpu_ns();
            for (int i = 0; i < per_round; i++) {
                int64_t t0 = now_ns();
                int ok = hilock_lock_acquire(single, 0, 30000) == 0 &&
                         hilock_lock_release(single) == 0;
                int64_t t1 = now_ns();
                if (ok)
                    add(&s_one, t1 - t0);
                else
                    s_one.failures++;
            }
            s_one.cpu_ns += cpu_ns() - c0;
        }
        {
            int64_t c0 = cpu_ns();
            for (int i = 0; i < per_round; i++) {
                int64_t t0 = now_ns();
                int ok = par_pair(raw5);
                int64_t t1 = now_ns();
                if (ok)
                    add(&s_par, t1 - t0);
                else
                    s_par.failures++;
            }
            s_par.cpu_ns += cpu_ns() - c0;
        }
        {
            int64_t c0 = cpu_ns();
            for (int i = 0; i < per_round; i++) {
                int64_t t0 = now_ns();
                int ok = seq_pair(raw5);
                int64_t t1 = now_ns();
                if (ok)
                    add(&s_seq, t1 - t0);
                else
                    s_seq.failures++;
            }
            s_seq.cpu_ns += cpu_ns() - c0;
        }
        /* the Redlock and its own limit pair by pair, alternating which
         * goes first, so that load changes hit both alike */
        for (int i = 0; i < per_round; i++) {
            for (int k = 0; k < 2; k++) {
                int lib = (i + k) % 2 == 0;
                int64_t c0 = cpu_ns(), t0 = now_ns();
                int ok = lib ? par_lib_pair(raw5)
                             : hilock_multilock_acquire(m, 0, 30000) == 0 &&
                                   hilock_multilock_release(m) == 0;
                int64_t t1 = now_ns();
                series *se = lib ? &s_lib : &s_red;
                se->cpu_ns += cpu_ns() - c0;
                if (ok)
                    add(se, t1 - t0);
                else
                    se->failures++;
            }
        }
    }
    double rb_p50 = redis_benchmark_p50(host, port0, delay_us > 0 ? 1000 : 20000);

    /* multi-lock hand-off between two threads, each with its own clients:
     * reentrant members, then fair ones, alternating in 5 rounds */
    int turns = delay_us > 0 ? 100 : 500;
    series s_hand = {"multi-lock-of-5 hand-off to a waiter", calloc((size_t)turns * 2, 8), 0,
                     (size_t)turns * 2, 0, 0};
    series s_fhand = {"same, fair members", calloc((size_t)turns * 2, 8), 0,
                      (size_t)turns * 2, 0, 0};
    if (!s_hand.v || !s_fhand.v)
        return 1;
    for (int r = 0; r < 5; r++)
        if (run_handoff(urls, 0, turns / 5, &s_hand) != 0 ||
            run_handoff(urls, 1, turns / 5, &s_fhand) != 0)
            return 1;

    series *all[8] = {&s_raw, &s_one, &s_seq, &s_par, &s_lib, &s_red, &s_hand, &s_fhand};
    printf("%-38s %9s %9s %9s %8s %12s\n", "latency (us)", "p50", "p90", "p99", "failed",
           "client CPU/op");
    for (int i = 0; i < 8; i++) {
        qsort(all[i]->v, all[i]->n, 8, cmp_i64);
        printf("%-38s %9.1f %9.1f %9.1f %8ld %12.1f\n", all[i]->name, pct(all[i], 0.5),
               pct(all[i], 0.9), pct(all[i], 0.99), all[i]->failures,
               all[i]->n ? (double)all[i]->cpu_ns / 1000.0 / (double)all[i]->n : 0.0);
    }
    double red = pct(&s_red, 0.5), one = pct(&s_one, 0.5), rawp = pct(&s_raw, 0.5);
    printf("\n%d rounds x %d pairs each, interleaved; 5 servers on loopback", rounds,
           per_round);
    if (delay_us > 0)
        printf(", requests delayed %lld us by a proxy", (long long)delay_us);
    printf("\n");
    if (rb_p50 > 0)
        printf("redis-benchmark EVALSHA p50 (1 conn): %.1f us  -> 2 RTT limit %.1f us\n",
               rb_p50 * 1000, 2 * rb_p50 * 1000);
    printf("RATIO redlock5/single p50      = %.2f   (target <= 1.5)\n", red / one);
    printf("RATIO raw-sequential5/raw-2RTT p50 = %.2f   (one node after another)\n",
           pct(&s_seq, 0.5) / rawp);
    printf("RATIO single/raw-2RTT p50      = %.2f\n", one / rawp);
    printf("RATIO raw-parallel5/raw-2RTT p50 = %.2f   (the machine's own limit for the target)\n",
           pct(&s_par, 0.5) / rawp);
    printf("RATIO redlock5/raw-parallel5 p50 = %.2f\n", red / pct(&s_par, 0.5));
    printf("RATIO redlock5/raw-parallel5-library-scripts p50 = %.2f   (target <= 1.15)\n",
           red / pct(&s_lib, 0.5));
    printf("multi-lock-of-5 hand-off p50 = %.1f us (target <= 1000 us, no polling), %zu "
           "samples; RATIO hand-off/raw-parallel5-library-scripts p50 = %.2f\n",
           pct(&s_hand, 0.5), s_hand.n, pct(&s_hand, 0.5) / pct(&s_lib, 0.5));
    printf("multi-lock-of-5 hand-off, fair members, p50 = %.1f us, %zu samples; RATIO "
           "fair/reentrant hand-off p50 = %.2f\n",
           pct(&s_fhand, 0.5), s_fhand.n, pct(&s_fhand, 0.5) / pct(&s_hand, 0.5));
    printf("RATIO redlock5/raw-2RTT p50    = %.2f\n", red / rawp);
    if (rb_p50 > 0)
        printf("RATIO redlock5/redis-benchmark-2RTT p50 = %.2f\n", red / (2 * rb_p50 * 1000));

    redisFree(raw);
    for (int i = 0; i < NODES; i++)
        redisFree(raw5[i]);
    free(s_par.v);
    free(s_seq.v);
    free(s_lib.v);
    free(s_hand.v);
    free(s_fhand.v);
    hl_names_free(&lib_names);
    hilock_multilock_free(m);
    hilock_lock_free(single);
    for (int i = 0; i < NODES; i++) {
        hilock_lock_free(rl[i]);
        hilock_client_close(c[i]);
    }
    free(s_raw.v);
    free(s_one.v);
    free(s_red.v);
    return s_red.failures || s_one.failures || s_lib.failures || s_hand.failures ||
                   s_fhand.failures
               ? 1
               : 0;
}
