/*
 * Hand-off latency: from the holder's unlock returning to the next holder's
 * acquire returning, with every contender in its own process (own client).
 *
 *   handoff_bench -k reentrant|fair|rw|floor [-p procs] [-m handoffs] URL
 *
 *   reentrant  procs processes loop acquire(wait) / release on one lock. After
 *              releasing, a process waits until someone else has taken the
 *              lock before it contends again, so every sample is a hand-off
 *              to a process that was blocked (not the releaser barging back).
 *   fair       the same on a fair lock; the releaser re-queues at once (the
 *              fair lock never lets it barge), so procs-1 waiters are queued.
 *   rw         read-write lock: procs-1 reader processes and one writer. Each
 *              round the readers take the read side; the writer then blocks
 *              on the write side; the readers leave one after another and the
 *              sample is the last reader's unlock -> the writer's grant (the
 *              read unlock that frees the lock publishes "0" on
 *              redisson_rwlock:{N}). The writer's unlock ("1") lets the
 *              readers in for the next round.
 *   floor      the physical limit of a hand-off measured the same way with raw
 *              hiredis and no library: process A PUBLISHes "0" (its reply
 *              returning = "unlock returned"); process B, subscribed, gets the
 *              message and sends one EVALSHA of the lock script (its reply =
 *              "acquire returned"). Publish + one round trip.
 *
 * CLOCK_MONOTONIC is system-wide: each process writes its timestamps into a
 * MAP_SHARED array indexed by grant number; sample k = acquire[k+1] -
 * release[k] (release = the moment the releaser's unlock call returned).
 * Prints "name=value" lines: samples, p50_us, p90_us, p99_us, max_us,
 * mean_us, negative (samples where the next acquire returned before the
 * releaser saw its own unlock reply: the releaser was descheduled), and the
 * conservative call_p50_us/call_p99_us measured from the unlock CALL.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "hilock.h"
#include "proto.h"
#include "bench_util.h"

#define MAX_PROCS 64
#define MAX_GRANTS 200000

typedef struct shared {
    int ready;
    int start;
    int stop;
    int errors;
    int64_t grants; /* touched only by the current holder */
    /* rw mode, per round: readers in, writer waiting, readers out */
    int64_t rw_round;
    int rw_in, rw_out;
    int writer_waiting;
    int64_t acq_ns[MAX_GRANTS];
    int64_t rel_ns[MAX_GRANTS];      /* release returned */
    int64_t rel_call_ns[MAX_GRANTS]; /* release called */
    int32_t who[MAX_GRANTS];
} shared;

static shared *sh;

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static int load(const void *p)
{
    return __atomic_load_n((const int *)p, __ATOMIC_ACQUIRE);
}

static void wait_start(void)
{
    __atomic_add_fetch(&sh->ready, 1, __ATOMIC_ACQ_REL);
    while (!load(&sh->start))
        sleep_us(200);
}

/* ---- library contenders ---- */

static void contender(int idx, const char *url, int fair, int64_t handoffs)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    hilock_client *c = NULL;
    char err[256] = "";
    if (hilock_client_open(&c, url, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "child %d: open: %s\n", idx, err);
        _exit(1);
    }
    hilock_lock *l = NULL;
    if ((fair ? hilock_fair_lock_new(&l, c, "bench:handoff")
              : hilock_lock_new(&l, c, "bench:handoff")) != 0)
        _exit(1);
    wait_start();
    while (!load(&sh->stop)) {
        int rc = hilock_lock_acquire(l, 10000, 30000);
        int64_t t = now_ns();
        if (rc != 0) {
            if (!load(&sh->stop)) {
                __atomic_add_fetch(&sh->errors, 1, __ATOMIC_RELAXED);
                fprintf(stderr, "child %d: acquire: %s\n", idx, hilock_lock_errmsg(l));
            }
            continue;
        }
        int64_t k = __atomic_load_n(&sh->grants, __ATOMIC_ACQUIRE);
        if (k < MAX_GRANTS) {
            sh->acq_ns[k] = t;
            sh->who[k] = idx;
        }
        if (k + 1 >= handoffs + 1)
            __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&sh->grants, k + 1, __ATOMIC_RELEASE);
        if (k < MAX_GRANTS)
            sh->rel_call_ns[k] = now_ns();
        rc = hilock_lock_release(l);
        t = now_ns();
        if (k < MAX_GRANTS)
            sh->rel_ns[k] = t;
        if (rc != 0) {
            __atomic_add_fetch(&sh->errors, 1, __ATOMIC_RELAXED);
            fprintf(stderr, "child %d: release: %s\n", idx, hilock_lock_errmsg(l));
        }
        if (!fair) /* let a blocked waiter have it before contending again */
            while (!load(&sh->stop) && __atomic_load_n(&sh->grants, __ATOMIC_ACQUIRE) == k + 1)
                sleep_us(50);
    }
    hilock_lock_free(l);
    hilock_client_close(c);
    _exit(0);
}

/* ---- rw: readers leave, the blocked writer takes over ---- */

#define RW_WRITER_BLOCKED_US 3000 /* the writer's first attempt failed and it
                                     listens: far more than two round trips */

static int64_t load64(const int64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void rw_open(int idx, const char *url, hilock_client **c, hilock_rwlock **rw)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char err[256] = "";
    if (hilock_client_open(c, url, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "child %d: open: %s\n", idx, err);
        _exit(1);
    }
    if (hilock_rwlock_new(rw, *c, "bench:handoff") != 0)
        _exit(1);
    wait_start();
}

static void rw_fail(int idx, const char *what, hilock_lock *l)
{
    __atomic_add_fetch(&sh->errors, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "child %d: %s: %s\n", idx, what, hilock_lock_errmsg(l));
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
}

/* Reader idx of nreaders: in round k it reads, then leaves in its turn
 * (reader i after reader i-1), the last one timing its unlock. */
static void rw_reader(int idx, int nreaders, const char *url, int64_t rounds)
{
    hilock_client *c = NULL;
    hilock_rwlock *rw = NULL;
    rw_open(idx, url, &c, &rw);
    hilock_lock *l = hilock_rwlock_read_lock(rw);
    for (int64_t k = 0; k < rounds && !load(&sh->stop); k++) {
        while (load64(&sh->rw_round) != k && !load(&sh->stop))
            sleep_us(20);
        if (hilock_lock_acquire(l, 10000, 30000) != 0) {
            rw_fail(idx, "read acquire", l);
            break;
        }
        __atomic_add_fetch(&sh->rw_in, 1, __ATOMIC_ACQ_REL);
        while (load(&sh->rw_out) != idx && !load(&sh->stop))
            sleep_us(20); /* my turn to leave (the writer waits by then) */
        int last = idx == nreaders - 1;
        if (last)
            sh->rel_call_ns[k] = now_ns();
        int rc = hilock_lock_release(l);
        if (last)
            sh->rel_ns[k] = now_ns();
        if (rc != 0) {
            rw_fail(idx, "read release", l);
            break;
        }
        __atomic_add_fetch(&sh->rw_out, 1, __ATOMIC_ACQ_REL);
    }
    hilock_rwlock_free(rw);
    hilock_client_close(c);
    _exit(0);
}

static void rw_writer(int idx, int nreaders, const char *url, int64_t rounds)
{
    hilock_client *c = NULL;
    hilock_rwlock *rw = NULL;
    rw_open(idx, url, &c, &rw);
    hilock_lock *l = hilock_rwlock_write_lock(rw);
    for (int64_t k = 0; k < rounds && !load(&sh->stop); k++) {
        while (load(&sh->rw_in) < nreaders && !load(&sh->stop))
            sleep_us(20);
        /* the readers start leaving once this acquire is surely blocked */
        __atomic_store_n(&sh->writer_waiting, 1, __ATOMIC_RELEASE);
        int rc = hilock_lock_acquire(l, 10000, 30000);
        int64_t t = now_ns();
        if (rc != 0) {
            rw_fail(idx, "write acquire", l);
            break;
        }
        sh->acq_ns[k] = t;
        __atomic_store_n(&sh->grants, k + 1, __ATOMIC_RELEASE);
        __atomic_store_n(&sh->writer_waiting, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&sh->rw_in, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&sh->rw_out, nreaders, __ATOMIC_RELEASE); /* nobody's turn */
        __atomic_store_n(&sh->rw_round, k + 1, __ATOMIC_RELEASE);
        if (hilock_lock_release(l) != 0) {
            rw_fail(idx, "write release", l);
            break;
        }
    }
    hilock_rwlock_free(rw);
    hilock_client_close(c);
    _exit(0);
}

/* Parent side of a round: once the writer waits, let the readers leave. */
static void rw_conduct(int nreaders, int64_t rounds)
{
    for (int64_t k = 0; k < rounds && !load(&sh->stop); k++) {
        while ((load64(&sh->rw_round) != k || !load(&sh->writer_waiting)) && !load(&sh->stop))
            sleep_us(20);
        sleep_us(RW_WRITER_BLOCKED_US);
        __atomic_store_n(&sh->rw_out, 0, __ATOMIC_RELEASE); /* reader 0 first */
        while (load64(&sh->rw_round) == k && !load(&sh->stop))
            sleep_us(50);
    }
    (void)nreaders;
}

/* ---- floor: raw publish + one EVALSHA ---- */

static redisContext *raw_connect(int port)
{
    redisContext *ctx = redisConnect("127.0.0.1", port);
    if (!ctx || ctx->err)
        _exit(1);
    return ctx;
}

/* B: subscribed; on each message one EVALSHA lock script on its own key. */
static void floor_receiver(int port, int64_t n)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    redisContext *sub = raw_connect(port), *ctx = raw_connect(port);
    redisReply *r = redisCommand(sub, "SUBSCRIBE bench:floor");
    if (!r)
        _exit(1);
    freeReplyObject(r);
    hl_names names;
    hl_names_init(&names, "bench:floor:lock");
    const char *owner = "00000000-0000-0000-0000-000000000000:2";
    wait_start();
    for (int64_t k = 0; k < n; k++) {
        void *m = NULL;
        if (redisGetReply(sub, &m) != REDIS_OK)
            _exit(1);
        freeReplyObject(m);
        hl_cmd cmd;
        hl_cmd_acquire(&cmd, HILOCK_KIND_REENTRANT, &names, owner, 30000, -1);
        r = redisCommandArgv(ctx, cmd.argc, cmd.argv, cmd.argvlen);
        int64_t t = now_ns();
        if (!r || r->type != REDIS_REPLY_ARRAY)
            _exit(1);
        freeReplyObject(r);
        sh->acq_ns[k + 1] = t;
        __atomic_store_n(&sh->grants, k + 1, __ATOMIC_RELEASE);
    }
    hl_names_free(&names);
    redisFree(ctx);
    redisFree(sub);
    _exit(0);
}

static void floor_sender(int port, int64_t n)
{
    redisContext *ctx = raw_connect(port);
    for (int64_t k = 0; k < n; k++) {
        sh->rel_call_ns[k] = now_ns();
        redisReply *r = redisCommand(ctx, "PUBLISH bench:floor 0");
        int64_t t = now_ns();
        if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            fprintf(stderr, "floor: publish reached %lld subscribers\n",
                    r ? (long long)r->integer : -1LL);
            exit(1);
        }
        freeReplyObject(r);
        sh->rel_ns[k] = t;
        while (__atomic_load_n(&sh->grants, __ATOMIC_ACQUIRE) < k + 1)
            sleep_us(20); /* does not touch the measured interval */
    }
    redisFree(ctx);
}

int main(int argc, char **argv)
{
    const char *kind = "reentrant";
    int procs = 8;
    int64_t handoffs = 2000;
    int opt;
    while ((opt = getopt(argc, argv, "k:p:m:")) != -1) {
        if (opt == 'k')
            kind = optarg;
        else if (opt == 'p')
            procs = atoi(optarg);
        else if (opt == 'm')
            handoffs = atoll(optarg);
        else
            return 2;
    }
    int floor_mode = strcmp(kind, "floor") == 0, fair = strcmp(kind, "fair") == 0;
    int rw_mode = strcmp(kind, "rw") == 0;
    if (optind >= argc || procs < 2 || procs > MAX_PROCS || handoffs < 10 ||
        handoffs >= MAX_GRANTS - 1 ||
        (!floor_mode && !fair && !rw_mode && strcmp(kind, "reentrant"))) {
        fprintf(stderr, "usage: handoff_bench -k reentrant|fair|rw|floor [-p procs] [-m n] URL\n");
        return 2;
    }
    const char *url = argv[optind];
    int port = bench_url_port(url);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    signal(SIGPIPE, SIG_IGN);

    /* fresh state: no lock, no queue */
    redisContext *ctx = redisConnect("127.0.0.1", port);
    if (!ctx || ctx->err)
        return 1;
    redisReply *r = redisCommand(ctx, "DEL bench:handoff redisson_lock_queue:{bench:handoff} "
                                      "redisson_lock_timeout:{bench:handoff}");
    if (r)
        freeReplyObject(r);
    for (int s = 0; s < HL_SCRIPT_COUNT; s++) {
        r = redisCommand(ctx, "SCRIPT LOAD %s", hl_script_source((hl_script)s));
        if (r)
            freeReplyObject(r);
    }
    redisFree(ctx);

    int nchild = floor_mode ? 1 : procs;
    sh->rw_out = procs - 1; /* rw: no reader's turn to leave yet */
    pid_t pids[MAX_PROCS];
    for (int i = 0; i < nchild; i++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            if (floor_mode)
                floor_receiver(port, handoffs);
            if (rw_mode && i < procs - 1)
                rw_reader(i, procs - 1, url, handoffs);
            if (rw_mode)
                rw_writer(i, procs - 1, url, handoffs);
            contender(i, url, fair, handoffs);
        }
        pids[i] = pid;
    }
    while (load(&sh->ready) < nchild)
        sleep_us(1000);
    int64_t t0 = now_ns();
    __atomic_store_n(&sh->start, 1, __ATOMIC_RELEASE);
    if (floor_mode) {
        floor_sender(port, handoffs);
        sh->grants = handoffs + 1;
    }
    if (rw_mode)
        rw_conduct(procs - 1, handoffs);
    int bad = 0;
    for (int i = 0; i < nchild; i++) {
        int st = 0;
        waitpid(pids[i], &st, 0);
        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    double secs = (now_ns() - t0) / 1e9;

    int64_t grants = sh->grants < MAX_GRANTS ? sh->grants : MAX_GRANTS;
    int64_t *lat = malloc(sizeof *lat * (size_t)(grants + 1));
    int64_t *lat2 = malloc(sizeof *lat2 * (size_t)(grants + 1));
    int64_t n = 0, same = 0, negative = 0, overlaps = 0;
    double sum = 0, sum2 = 0;
    for (int64_t k = 0; k + 1 < grants; k++) {
        if (!floor_mode && !rw_mode && sh->who[k + 1] == sh->who[k]) {
            same++; /* not a hand-off (cannot happen with the rules above) */
            continue;
        }
        /* rw: round k's grant follows round k's last read unlock */
        int64_t g = rw_mode ? k : k + 1;
        lat[n] = sh->acq_ns[g] - sh->rel_ns[k];
        lat2[n] = sh->acq_ns[g] - sh->rel_call_ns[k];
        negative += lat[n] < 0;
        /* acquired before the previous holder even called unlock: two
         * holders at once (mutual exclusion broken) */
        overlaps += lat2[n] < 0;
        sum += (double)lat[n];
        sum2 += (double)lat2[n];
        n++;
    }
    if (n == 0) {
        fprintf(stderr, "no samples\n");
        return 1;
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp_i64);
    qsort(lat2, (size_t)n, sizeof *lat2, cmp_i64);
#define PCT(p) (lat[(int64_t)((double)(n - 1) * (p))] / 1000.0)
#define PCT2(p) (lat2[(int64_t)((double)(n - 1) * (p))] / 1000.0)
    printf("kind=%s\nprocs=%d\nsamples=%" PRId64 "\nsame_holder=%" PRId64 "\n", kind,
           floor_mode ? 2 : procs, n, same);
    printf("p50_us=%.1f\np90_us=%.1f\np99_us=%.1f\nmax_us=%.1f\nmean_us=%.1f\n", PCT(0.50),
           PCT(0.90), PCT(0.99), PCT(1.0), sum / (double)n / 1000.0);
    /* the next holder's acquire returned before the releaser's unlock call
     * did: possible when the releaser is descheduled (2 shared cores) */
    printf("negative=%" PRId64 "\n", negative);
    /* conservative variant: from the unlock CALL (includes its round trip) */
    printf("call_p50_us=%.1f\ncall_p99_us=%.1f\ncall_mean_us=%.1f\n", PCT2(0.50), PCT2(0.99),
           sum2 / (double)n / 1000.0);
    printf("handoffs_per_s=%.0f\nerrors=%d\nbad_children=%d\noverlaps=%" PRId64 "\n",
           (double)n / secs, sh->errors, bad, overlaps);
    free(lat);
    free(lat2);
    return sh->errors || bad || overlaps ? 1 : 0;
}
