/*
 * Fair (FIFO) lock against a real redis-server: grant order equals arrival
 * order across processes, a SIGKILLed waiter is skipped after its deadline,
 * tryLock(0) never queues, deadlines do not drift as waiters come and go,
 * no key is left behind, a Redis stall during a wait leaves no stale entry,
 * expired unlock answers "released", unlock wakes only the head waiter,
 * reentrancy, NOT_OWNER, force unlock and the watchdog on a fair lock.
 *
 * Waiters that must be "separate processes" are forked before the parent
 * opens any client (so no client thread exists at fork time); each child
 * opens its own client, reports its owner string through shared memory and
 * then obeys one-byte commands on a pipe. Children always leave with
 * _exit() so that the harness's atexit hook (which stops redis) never runs
 * in them. Ordering is never left to sleeps: the parent starts the next
 * waiter only after the queue LIST has grown.
 */
#include <CUnit/Basic.h>
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hilock.h"


#define OWNER_LEN 64
#define MAX_CHILDREN 32

/* ------------------------------------------------------------ helpers */

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static hilock_client *open_client(const th_redis *r, int64_t window_ms, int64_t cmd_timeout_ms)
{
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    if (window_ms > 0)
        o.fair_wait_window_ms = window_ms;
    if (cmd_timeout_ms > 0)
        o.command_timeout_ms = cmd_timeout_ms;
    hilock_client *c = NULL;
    char err[256] = "";
    int rc = hilock_client_open(&c, r->url, &o, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  open %s: %d %s (%s)\n", r->url, rc, hilock_strerror(rc), err);
    return c;
}

/* What most tests here start with: a client of their own on th_srv (default
 * options), a plain connection to look at the keys, and the fair lock name.
 * 0, or -1 with nothing left open. fair_close frees the three. */
static void fair_close(hilock_client *c, redisContext *ctx, hilock_lock *l)
{
    hilock_lock_free(l);
    hilock_client_close(c);
    if (ctx)
        redisFree(ctx);
}

static int fair_open(const char *name, hilock_client **c, redisContext **ctx, hilock_lock **l)
{
    *c = open_client(&th_srv, 0, 0);
    *ctx = th_redis_connect(&th_srv);
    *l = NULL;
    if (!*c || !*ctx || hilock_fair_lock_new(l, *c, name) != 0) {
        fair_close(*c, *ctx, *l);
        return -1;
    }
    return 0;
}

static void queue_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "redisson_lock_queue:{%s}", name);
}

static void timeout_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "redisson_lock_timeout:{%s}", name);
}

static long long cmd_int(redisContext *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    long long v = -1000;
    if (r) {
        if (r->type == REDIS_REPLY_INTEGER)
            v = r->integer;
        else if (r->type == REDIS_REPLY_STRING)
            v = strtoll(r->str, NULL, 10);
        else if (r->type == REDIS_REPLY_NIL)
            v = -1001;
        freeReplyObject(r);
    }
    return v;
}

/* Server clock in epoch ms (the clock the fair scripts use). */
static int64_t server_ms(redisContext *ctx)
{
    redisReply *r = redisCommand(ctx, "TIME");
    int64_t v = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        v = strtoll(r->element[0]->str, NULL, 10) * 1000 +
            strtoll(r->element[1]->str, NULL, 10) / 1000;
    if (r)
        freeReplyObject(r);
    return v;
}

/* Poll (fast) until the integer result of the command reaches want.
 * Returns the last value seen. */
static long long wait_int_ge(redisContext *ctx, long long want, int64_t timeout_ms,
                             const char *cmd, const char *key)
{
    int64_t end = th_now_ms() + timeout_ms;
    long long v;
    for (;;) {
        v = cmd_int(ctx, "%s %s", cmd, key);
        if (v >= want || th_now_ms() >= end)
            return v;
        sleep_us(300);
    }
}

static long long wait_int_eq(redisContext *ctx, long long want, int64_t timeout_ms,
                             const char *cmd, const char *key)
{
    int64_t end = th_now_ms() + timeout_ms;
    long long v;
    for (;;) {
        v = cmd_int(ctx, "%s %s", cmd, key);
        if (v == want || th_now_ms() >= end)
            return v;
        sleep_us(500);
    }
}

/* LRANGE key 0 -1 into out[] (strings copied, at most max). Returns count or -1. */
static int lrange(redisContext *ctx, const char *key, char out[][OWNER_LEN], int max)
{
    redisReply *r = redisCommand(ctx, "LRANGE %s 0 -1", key);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    int n = 0;
    for (size_t i = 0; i < r->elements && n < max; i++)
        snprintf(out[n++], OWNER_LEN, "%s", r->element[i]->str);
    freeReplyObject(r);
    return n;
}

/* 1 when no queue/timeout key of the lock exists. */
static int no_fair_keys(redisContext *ctx, const char *name)
{
    char q[256], t[256];
    queue_key(q, sizeof q, name);
    timeout_key(t, sizeof t, name);
    return cmd_int(ctx, "EXISTS %s", q) == 0 && cmd_int(ctx, "EXISTS %s", t) == 0;
}

/* ------------------------------------------------------- child waiters */

typedef struct shm_area {
    char owner[MAX_CHILDREN][OWNER_LEN];
    int ready[MAX_CHILDREN];
    int64_t acq_ms[MAX_CHILDREN]; /* server epoch ms right after acquiring */
    int rc[MAX_CHILDREN];         /* last acquire result */
} shm_area;

typedef struct child_cfg {
    const char *name;
    int64_t window_ms; /* client fair window; 0 = default */
    int64_t wait_ms;
    int64_t lease_ms;
    const char *order_key; /* RPUSH the child's index here when it acquires */
} child_cfg;

typedef struct child {
    pid_t pid;
    int cmd_w; /* parent writes commands here */
} child;

static shm_area *shm;

/* In the child: open a client, announce the owner, then for each 'a' byte
 * acquire, record, release; 'q' or EOF ends. Exit code 0 = all fine. */
static void child_main(int idx, int cmd_r, const child_cfg *cfg)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fail = 0;
    hilock_client *c = open_client(&th_srv, cfg->window_ms, 0);
    hilock_lock *l = NULL;
    redisContext *ctx = th_redis_connect(&th_srv);
    if (!c || !ctx || hilock_fair_lock_new(&l, c, cfg->name) != 0)
        _exit(2);
    hilock_client_owner(c, hilock_thread_id(), shm->owner[idx], OWNER_LEN);
    __atomic_store_n(&shm->ready[idx], 1, __ATOMIC_RELEASE);
    char cmd;
    while (read(cmd_r, &cmd, 1) == 1 && cmd == 'a') {
        int rc = hilock_lock_acquire(l, cfg->wait_ms, cfg->lease_ms);
        shm->rc[idx] = rc;
        if (rc == 0) {
            shm->acq_ms[idx] = server_ms(ctx);
            redisReply *r = redisCommand(ctx, "RPUSH %s %d", cfg->order_key, idx);
            if (r)
                freeReplyObject(r);
            if (hilock_lock_release(l) != 0)
                fail = 3;
        } else {
            redisReply *r = redisCommand(ctx, "RPUSH %s E%d", cfg->order_key, idx);
            if (r)
                freeReplyObject(r);
            fail = 4;
        }
    }
    hilock_lock_free(l);
    hilock_client_close(c);
    redisFree(ctx);
    _exit(fail);
}

/* Fork n children (the caller must not have an open client: no threads). */
static int spawn_children(child *ch, int n, const child_cfg *cfg)
{
    memset(shm, 0, sizeof *shm);
    for (int i = 0; i < n; i++) {
        int p[2];
        if (pipe(p) != 0)
            return -1;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            close(p[1]);
            for (int j = 0; j < i; j++)
                close(ch[j].cmd_w);
            child_main(i, p[0], cfg);
        }
        close(p[0]);
        ch[i].pid = pid;
        ch[i].cmd_w = p[1];
    }
    /* every child has its client and owner string */
    int64_t end = th_now_ms() + (th_valgrind() ? 60000 : 10000);
    for (int i = 0; i < n; i++)
        while (!__atomic_load_n(&shm->ready[i], __ATOMIC_ACQUIRE)) {
            if (th_now_ms() > end)
                return -1;
            sleep_us(1000);
        }
    return 0;
}

static void child_go(child *c)
{
    char a = 'a';
    if (write(c->cmd_w, &a, 1) != 1)
        perror("write");
}

/* Close every pipe (children leave), reap them; SIGKILL any that lingers.
 * Returns the number of children that exited with a failure code. */
static int reap_children(child *ch, int n, int64_t timeout_ms)
{
    for (int i = 0; i < n; i++)
        if (ch[i].cmd_w >= 0) {
            close(ch[i].cmd_w);
            ch[i].cmd_w = -1;
        }
    int bad = 0;
    int64_t end = th_now_ms() + timeout_ms;
    for (int i = 0; i < n; i++) {
        if (ch[i].pid <= 0)
            continue;
        int st = 0;
        pid_t got;
        while ((got = waitpid(ch[i].pid, &st, WNOHANG)) == 0 && th_now_ms() < end)
            sleep_us(1000);
        if (got == 0) {
            kill(ch[i].pid, SIGKILL);
            waitpid(ch[i].pid, &st, 0);
            bad++;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            bad++;
        }
        ch[i].pid = 0;
    }
    return bad;
}

/* ------------------------------------------------------------- tests */

/* 16 waiters in 16 processes queue up one after the other while the lock is
 * held; the grant order must equal the queue (arrival) order, every run. */
static void t_fifo_order(void)
{
    const int n = 16;
    const int runs = th_valgrind() ? 3 : 100;
    const char *name = "fifo";
    char q[256];
    queue_key(q, sizeof q, name);
    child ch[MAX_CHILDREN];
    child_cfg cfg = {name, 0, 20000, 10000, "fifo:order"};
    CU_ASSERT_EQUAL_FATAL(spawn_children(ch, n, &cfg), 0);

    hilock_client *c;
    redisContext *ctx;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(fair_open(name, &c, &ctx, &l), 0);

    int grants = 0, good_runs = 0;
    int64_t t0 = th_now_ms();
    for (int run = 0; run < runs; run++) {
        /* the first runs space arrivals 20 ms apart as the issue says; the
         * rest as close as the queue allows (a stricter test of ordering) */
        int spacing_ms = run < 5 ? 20 : 0;
        cmd_int(ctx, "DEL fifo:order");
        if (hilock_lock_acquire(l, 0, 30000) != 0) {
            CU_FAIL("parent could not take the free fair lock");
            break;
        }
        int ok = 1;
        for (int i = 0; i < n && ok; i++) {
            child_go(&ch[i]);
            long long len = wait_int_ge(ctx, i + 1, 5000, "LLEN", q);
            if (len != i + 1) {
                printf("\n  run %d: waiter %d not queued (LLEN %lld)\n", run, i, len);
                ok = 0;
            }
            if (spacing_ms)
                th_sleep_ms(spacing_ms);
        }
        char line[MAX_CHILDREN][OWNER_LEN];
        int qn = ok ? lrange(ctx, q, line, MAX_CHILDREN) : -1;
        CU_ASSERT_EQUAL(qn, n);
        for (int i = 0; ok && i < n && i < qn; i++)
            if (strcmp(line[i], shm->owner[i]) != 0) {
                printf("\n  run %d: queue position %d holds %s, expected child %d\n", run, i,
                       line[i], i);
                ok = 0;
            }
        CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
        long long got = wait_int_ge(ctx, n, 10000, "LLEN", "fifo:order");
        char order[MAX_CHILDREN][OWNER_LEN];
        int on = lrange(ctx, "fifo:order", order, MAX_CHILDREN);
        if (got != n || on != n)
            ok = 0;
        for (int i = 0; i < on; i++) {
            char want[16];
            snprintf(want, sizeof want, "%d", i);
            if (strcmp(order[i], want) != 0) {
                printf("\n  run %d: grant %d went to %s, expected %d\n", run, i, order[i], i);
                ok = 0;
                break;
            }
            grants++;
        }
        /* the last one unlocks after recording: wait for the hash to go */
        CU_ASSERT_EQUAL(wait_int_eq(ctx, 0, 5000, "EXISTS", name), 0);
        CU_ASSERT(no_fair_keys(ctx, name));
        CU_ASSERT(ok);
        if (!ok)
            break;
        good_runs++;
    }
    printf("\n  FIFO: %d/%d runs in order, %d grants in order, %" PRId64 " ms ", good_runs,
           runs, grants, th_now_ms() - t0);
    CU_ASSERT_EQUAL(good_runs, runs);
    CU_ASSERT_EQUAL(reap_children(ch, n, 10000), 0);
    cmd_int(ctx, "DEL fifo:order");
    fair_close(c, ctx, l);
}

/* A waiter in the middle of the queue is SIGKILLed: the ones behind it (four
 * live waiters) get the lock only once its deadline passed, in arrival
 * order, promptly, and nothing hangs. */
static void t_killed_waiter_skipped(void)
{
    const int n = 7, victim = 2;
    /* the window is how long a woken head has to take the lock before it is
     * evicted as silent: under valgrind a woken child process can take
     * longer than 500 ms to run, so the window (and the parent's lease that
     * must outlast queueing seven children) is longer there */
    const int64_t window = th_valgrind() ? 2000 : 500;
    const int64_t hold = th_valgrind() ? 3000 : 1500;
    const char *name = "fairkill";
    char q[256], t[256];
    queue_key(q, sizeof q, name);
    timeout_key(t, sizeof t, name);
    child ch[MAX_CHILDREN];
    child_cfg cfg = {name, window, -1, 5000, "fairkill:order"};
    CU_ASSERT_EQUAL_FATAL(spawn_children(ch, n, &cfg), 0);

    hilock_client *c = open_client(&th_srv, window, 0);
    redisContext *ctx = th_redis_connect(&th_srv);
    hilock_lock *l = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&l, c, name), 0);
    cmd_int(ctx, "DEL fairkill:order");

    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire(l, 0, hold), 0);
    for (int i = 0; i < n; i++) {
        child_go(&ch[i]);
        CU_ASSERT_EQUAL(wait_int_ge(ctx, i + 1, 5000, "LLEN", q), i + 1);
    }
    /* deadline of the victim now; two grants ahead of it each pull it in
     * by one window */
    redisReply *r = redisCommand(ctx, "ZSCORE %s %s", t, shm->owner[victim]);
    CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_STRING);
    int64_t due = strtoll(r->str, NULL, 10) - 2 * window;
    freeReplyObject(r);
    kill(ch[victim].pid, SIGKILL);
    waitpid(ch[victim].pid, NULL, 0);
    ch[victim].pid = 0;

    int64_t start = server_ms(ctx);
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    /* four grants; bounded: the last waiter's deadline is a few windows away */
    long long got = wait_int_ge(ctx, n - 1, hold + (n + 2) * window, "LLEN", "fairkill:order");
    CU_ASSERT_EQUAL(got, n - 1);
    char order[MAX_CHILDREN][OWNER_LEN];
    int on = lrange(ctx, "fairkill:order", order, MAX_CHILDREN);
    const char *want[] = {"0", "1", "3", "4", "5", "6"};
    CU_ASSERT_EQUAL(on, n - 1);
    int in_order = on == n - 1;
    for (int i = 0; i < on && i < n - 1; i++)
        in_order &= strcmp(order[i], want[i]) == 0;
    if (!in_order) {
        printf("\n  grant order:");
        for (int i = 0; i < on; i++)
            printf(" %s(+%" PRId64 ")", order[i], shm->acq_ms[atoi(order[i])] - start);
    }
    CU_ASSERT(in_order);
    /* those ahead were not delayed; those behind waited for the deadline */
    CU_ASSERT(shm->acq_ms[1] < due);
    CU_ASSERT(shm->acq_ms[3] >= due);
    CU_ASSERT(shm->acq_ms[4] >= shm->acq_ms[3]);
    /* no hang, and no live waiter treated as dead: the one behind has its
     * own deadline one window after the victim's; it must take the lock
     * before that (had it come later, it would have been evicted from the
     * head as silent and re-queued at the tail, losing its place) */
    CU_ASSERT(shm->acq_ms[3] < due + window);
    printf("\n  kill: release at %+" PRId64 ", victim due %+" PRId64 ", next granted at %+" PRId64
           " ms ",
           (int64_t)0, due - start, shm->acq_ms[3] - start);
    CU_ASSERT_EQUAL(wait_int_eq(ctx, 0, 5000, "EXISTS", name), 0);
    CU_ASSERT(no_fair_keys(ctx, name));
    CU_ASSERT_EQUAL(reap_children(ch, n, 10000), 0);
    cmd_int(ctx, "DEL fairkill:order");
    fair_close(c, ctx, l);
}

/* tryLock(0): succeeds on a free lock; on a held one fails at once and
 * leaves no trace; with someone else at the head of the line a free lock is
 * not taken either (only the head may acquire). */
static void t_trylock_zero(void)
{
    const char *name = "fairtry";
    char q[256], t[256];
    queue_key(q, sizeof q, name);
    timeout_key(t, sizeof t, name);
    hilock_client *c;
    redisContext *ctx;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(fair_open(name, &c, &ctx, &l), 0);

    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 1, 0, 5000), 0);
    int held = 0;
    CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&held, l, 1), 0);
    CU_ASSERT_EQUAL(held, 1);
    CU_ASSERT(no_fair_keys(ctx, name));

    int64_t t0 = th_now_ms();
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 2, 0, 5000), HILOCK_ETIMEDOUT);
    CU_ASSERT(th_now_ms() - t0 < 200);
    CU_ASSERT(no_fair_keys(ctx, name));
    CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&held, l, 2), 0);
    CU_ASSERT_EQUAL(held, 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), 0);
    CU_ASSERT_EQUAL(cmd_int(ctx, "EXISTS %s", name), 0);

    /* someone else (a Redisson-layout entry of another client) heads the line */
    int64_t now = server_ms(ctx);
    cmd_int(ctx, "RPUSH %s other-client:7", q);
    cmd_int(ctx, "ZADD %s %lld other-client:7", t, (long long)(now + 60000));
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 2, 0, 5000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(cmd_int(ctx, "LLEN %s", q), 1);
    CU_ASSERT_EQUAL(cmd_int(ctx, "ZCARD %s", t), 1);
    CU_ASSERT_EQUAL(cmd_int(ctx, "EXISTS %s", name), 0);
    /* once the head's deadline has passed, it is evicted and we may take it */
    cmd_int(ctx, "ZADD %s %lld other-client:7", t, (long long)(now - 1));
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 2, 0, 5000), 0);
    CU_ASSERT(no_fair_keys(ctx, name));
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 2), 0);
    CU_ASSERT_EQUAL(cmd_int(ctx, "EXISTS %s", name), 0);

    fair_close(c, ctx, l);
}

/* ---- waiter threads (one client, explicit thread ids) ---- */

typedef struct waiter_arg {
    hilock_lock *l;
    uint64_t tid;
    int64_t wait_ms, lease_ms;
    int hold_until_flag; /* when acquired: wait for *release_flag before releasing */
    volatile int *release_flag;
    int rc, release_rc;
    int64_t elapsed_ms;
    volatile int done;
} waiter_arg;

static void *waiter_thread(void *p)
{
    waiter_arg *a = p;
    int64_t t0 = th_now_ms();
    a->rc = hilock_lock_acquire_tid(a->l, a->tid, a->wait_ms, a->lease_ms);
    a->elapsed_ms = th_now_ms() - t0;
    if (a->rc == 0) {
        if (a->hold_until_flag)
            while (!__atomic_load_n(a->release_flag, __ATOMIC_ACQUIRE))
                sleep_us(1000);
        a->release_rc = hilock_lock_release_tid(a->l, a->tid);
    }
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int is_done(void *p)
{
    return __atomic_load_n(&((waiter_arg *)p)->done, __ATOMIC_ACQUIRE);
}

/* Deadline drift: short waiters come and go (each gives up) between long
 * waiters; afterwards only the long ones are in line and no deadline lies
 * further ahead than now + lease + window * (position + 1). */
static void t_deadline_drift(void)
{
    const char *name = "fairdrift";
    /* 50 short waiters (10 under valgrind) */
    const int batches = th_valgrind() ? 2 : 5, per_batch = th_valgrind() ? 5 : 10;
    /* the short waiters of a batch must all be in line at once before they
     * give up: under valgrind (one thread runs at a time) joining the line is
     * slow, so there are fewer of them and they wait longer */
    const int64_t lease = 10000, short_wait = th_valgrind() ? 4000 : 400;
    const int64_t long_wait = th_valgrind() ? 24000 : 8000;
    char q[256], t[256];
    queue_key(q, sizeof q, name);
    timeout_key(t, sizeof t, name);
    hilock_client *c;
    redisContext *ctx;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(fair_open(name, &c, &ctx, &l), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire_tid(l, 1, 0, lease), 0);

    waiter_arg shorts[5 * 10], longs[5];
    pthread_t sth[5 * 10], lth[5];
    memset(shorts, 0, sizeof shorts);
    memset(longs, 0, sizeof longs);
    char long_owner[5][OWNER_LEN];
    int queued_long = 0, short_timeouts = 0;
    for (int b = 0; b < batches; b++) {
        for (int i = 0; i < per_batch; i++) {
            waiter_arg *a = &shorts[b * per_batch + i];
            *a = (waiter_arg){l, 100 + (uint64_t)(b * per_batch + i), short_wait, lease, 0,
                              NULL, -99, -99, 0, 0};
            pthread_create(&sth[b * per_batch + i], NULL, waiter_thread, a);
        }
        CU_ASSERT_EQUAL(wait_int_ge(ctx, queued_long + per_batch, 5000, "LLEN", q),
                        queued_long + per_batch);
        /* a long waiter joins behind the short ones while they are in line */
        longs[b] = (waiter_arg){l, 10 + (uint64_t)b, long_wait, 5000, 0, NULL, -99, -99, 0, 0};
        hilock_client_owner(c, longs[b].tid, long_owner[b], OWNER_LEN);
        pthread_create(&lth[b], NULL, waiter_thread, &longs[b]);
        CU_ASSERT_EQUAL(wait_int_ge(ctx, queued_long + per_batch + 1, 5000, "LLEN", q),
                        queued_long + per_batch + 1);
        queued_long++;
        for (int i = 0; i < per_batch; i++) {
            pthread_join(sth[b * per_batch + i], NULL);
            waiter_arg *a = &shorts[b * per_batch + i];
            short_timeouts += a->rc == HILOCK_ETIMEDOUT;
            /* a wait in ms is a wait in ms */
            CU_ASSERT(a->elapsed_ms >= short_wait - 5 && a->elapsed_ms < short_wait + 1500);
        }
    }
    CU_ASSERT_EQUAL(short_timeouts, batches * per_batch);

    /* only the long waiters remain, in arrival order */
    char line[MAX_CHILDREN][OWNER_LEN];
    int qn = lrange(ctx, q, line, MAX_CHILDREN);
    CU_ASSERT_EQUAL(qn, queued_long);
    CU_ASSERT_EQUAL(cmd_int(ctx, "ZCARD %s", t), queued_long);
    int64_t now = server_ms(ctx);
    for (int p = 0; p < qn && p < queued_long; p++) {
        CU_ASSERT_STRING_EQUAL(line[p], long_owner[p]);
        redisReply *r = redisCommand(ctx, "ZSCORE %s %s", t, line[p]);
        CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_STRING);
        int64_t score = strtoll(r->str, NULL, 10);
        freeReplyObject(r);
        int64_t bound = now + lease + long_wait * (p + 1);
        if (score > bound)
            printf("\n  position %d: deadline %" PRId64 " ms past the bound ", p, score - bound);
        CU_ASSERT(score <= bound);
    }

    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), 0);
    for (int b = 0; b < batches; b++) {
        pthread_join(lth[b], NULL);
        CU_ASSERT_EQUAL(longs[b].rc, 0);
        CU_ASSERT_EQUAL(longs[b].release_rc, 0);
    }
    CU_ASSERT_EQUAL(cmd_int(ctx, "EXISTS %s", name), 0);
    CU_ASSERT(no_fair_keys(ctx, name));
    fair_close(c, ctx, l);
}

/* A Redis stall while a waiter waits (its retry times out): once the server
 * is back and the waiter has returned its error, no entry of that waiter may
 * remain in the line (with the default 300 s window a left-over entry would
 * block everyone for five minutes: Redisson #5019), it must not own the
 * lock, and a newcomer gets the (expired) lock promptly. */
static th_redis psrv; /* own server: this test pauses it */

static void t_stall_leaves_no_stale_entry(void)
{
    const char *name = "fairstall";
    char q[256], t[256];
    queue_key(q, sizeof q, name);
    timeout_key(t, sizeof t, name);
    CU_ASSERT_EQUAL_FATAL(th_redis_start(&psrv, NULL), 0);
    hilock_client *hc = open_client(&psrv, 0, 0);    /* the holder */
    hilock_client *wc = open_client(&psrv, 0, 200);  /* the waiter: 200 ms command timeout */
    redisContext *ctx = th_redis_connect(&psrv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(hc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    hilock_lock *hl = NULL, *wl = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&hl, hc, name), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&wl, wc, name), 0);

    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire_tid(hl, 1, 0, 700), 0);
    waiter_arg w = {wl, 2, -1, 5000, 0, NULL, -99, -99, 0, 0};
    char wowner[OWNER_LEN];
    hilock_client_owner(wc, 2, wowner, OWNER_LEN);
    pthread_t th;
    pthread_create(&th, NULL, waiter_thread, &w);
    CU_ASSERT_EQUAL(wait_int_ge(ctx, 1, 5000, "LLEN", q), 1);
    /* the waiter sleeps until the lease ends (~700 ms), then retries: stall
     * the server across that retry and the cleanup that follows it */
    th_sleep_ms(300);
    th_redis_pause(&psrv);
    th_sleep_ms(1500);
    th_redis_resume(&psrv);
    int returned = th_wait_for(is_done, &w, 5000);
    CU_ASSERT(returned);
    if (returned)
        pthread_join(th, NULL);
    printf("\n  stall: waiter returned %d (%s) ", w.rc, hilock_strerror(w.rc));
    /* whatever it returned, once it has returned the line must not hold it
     * for longer than a short grace period */
    int64_t end = th_now_ms() + 1000;
    int clean = 0;
    while (th_now_ms() < end && !clean) {
        redisReply *r = redisCommand(ctx, "ZSCORE %s %s", t, wowner);
        int in_zset = r && r->type != REDIS_REPLY_NIL;
        if (r)
            freeReplyObject(r);
        r = redisCommand(ctx, "LPOS %s %s", q, wowner);
        int in_list = r && r->type != REDIS_REPLY_NIL;
        if (r)
            freeReplyObject(r);
        clean = !in_zset && !in_list;
        if (!clean)
            th_sleep_ms(20);
    }
    if (!clean) {
        redisReply *r = redisCommand(ctx, "ZSCORE %s %s", t, wowner);
        if (r && r->type == REDIS_REPLY_STRING)
            printf("\n  stale entry of the failed waiter, deadline %+" PRId64 " ms from now ",
                   (int64_t)strtoll(r->str, NULL, 10) - server_ms(ctx));
        if (r)
            freeReplyObject(r);
    }
    CU_ASSERT(clean);
    int held = -1;
    if (w.rc != 0) {
        /* it reported failure: it must not own the lock (a clean-up running
         * in the background gets the same short grace period) */
        int64_t until = th_now_ms() + 1000;
        long long owns;
        while ((owns = cmd_int(ctx, "HEXISTS %s %s", name, wowner)) != 0 && th_now_ms() < until)
            th_sleep_ms(20);
        if (owns != 0)
            printf("\n  the waiter was told %s but owns the lock (a timed-out attempt ran late) ",
                   hilock_strerror(w.rc));
        CU_ASSERT_EQUAL(owns, 0);
    } else {
        CU_ASSERT_EQUAL(w.release_rc, 0);
    }
    /* a newcomer is not blocked by anything left over */
    int64_t t0 = th_now_ms();
    int rc = hilock_lock_acquire_tid(hl, 3, 2000, 5000);
    CU_ASSERT_EQUAL(rc, 0);
    printf("newcomer rc %d after %" PRId64 " ms ", rc, th_now_ms() - t0);
    if (rc == 0) {
        CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&held, hl, 3), 0);
        CU_ASSERT_EQUAL(held, 1);
        CU_ASSERT_EQUAL(hilock_lock_release_tid(hl, 3), 0);
    }
    hilock_lock_free(hl);
    hilock_lock_free(wl);
    hilock_client_close(hc);
    hilock_client_close(wc);
    redisFree(ctx);
    th_redis_stop(&psrv);
}

/* Unlock of a fair lock whose key already expired answers "released" and
 * still signals the head waiter. */
static void t_unlock_expired_is_released(void)
{
    const char *name = "fairexp";
    char q[256], t[256], chan[512];
    queue_key(q, sizeof q, name);
    timeout_key(t, sizeof t, name);
    hilock_client *c;
    redisContext *ctx;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(fair_open(name, &c, &ctx, &l), 0);
    redisContext *sub = th_redis_connect(&th_srv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sub);

    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 1, 0, 150), 0);
    /* a waiter of another client at the head (Redisson layout) */
    int64_t now = server_ms(ctx);
    cmd_int(ctx, "RPUSH %s other-client:9", q);
    cmd_int(ctx, "ZADD %s %lld other-client:9", t, (long long)(now + 60000));
    snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}:other-client:9", name);
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s", chan);
    CU_ASSERT(r && r->type == REDIS_REPLY_ARRAY);
    if (r)
        freeReplyObject(r);
    CU_ASSERT_EQUAL(wait_int_eq(ctx, 0, 3000, "EXISTS", name), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), 0);
    void *m = NULL;
    CU_ASSERT_EQUAL(redisGetReply(sub, &m), REDIS_OK);
    r = m;
    CU_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
              strcmp(r->element[0]->str, "message") == 0 &&
              strcmp(r->element[1]->str, chan) == 0 && strcmp(r->element[2]->str, "0") == 0);
    if (r)
        freeReplyObject(r);
    /* the head's entry is untouched */
    CU_ASSERT_EQUAL(cmd_int(ctx, "LLEN %s", q), 1);
    cmd_int(ctx, "DEL %s %s", q, t);
    /* the reentrant lock answers NOT_OWNER for the same situation */
    hilock_lock *rl = NULL;
    CU_ASSERT_EQUAL(hilock_lock_new(&rl, c, "rexp"), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(rl, 1, 0, 100), 0);
    CU_ASSERT_EQUAL(wait_int_eq(ctx, 0, 3000, "EXISTS", "rexp"), 0);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(rl, 1), HILOCK_ENOTOWNER);
    hilock_lock_free(rl);
    fair_close(c, ctx, l);
    redisFree(sub);
}

/* Unlock publishes on the head waiter's own channel only. */
static void t_unlock_wakes_only_head(void)
{
    const char *name = "fairwake";
    char q[256], cha[512], chb[512];
    queue_key(q, sizeof q, name);
    hilock_client *c;
    redisContext *ctx;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(fair_open(name, &c, &ctx, &l), 0);
    redisContext *sub = th_redis_connect(&th_srv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sub);
    CU_ASSERT_EQUAL_FATAL(hilock_lock_acquire_tid(l, 1, 0, 10000), 0);

    volatile int release_a = 0;
    waiter_arg a = {l, 21, 10000, 10000, 1, &release_a, -99, -99, 0, 0};
    waiter_arg b = {l, 22, 10000, 10000, 0, NULL, -99, -99, 0, 0};
    char oa[OWNER_LEN], ob[OWNER_LEN];
    hilock_client_owner(c, 21, oa, OWNER_LEN);
    hilock_client_owner(c, 22, ob, OWNER_LEN);
    snprintf(cha, sizeof cha, "redisson_lock__channel:{%s}:%s", name, oa);
    snprintf(chb, sizeof chb, "redisson_lock__channel:{%s}:%s", name, ob);
    pthread_t ta, tb;
    pthread_create(&ta, NULL, waiter_thread, &a);
    CU_ASSERT_EQUAL(wait_int_ge(ctx, 1, 5000, "LLEN", q), 1);
    pthread_create(&tb, NULL, waiter_thread, &b);
    CU_ASSERT_EQUAL(wait_int_ge(ctx, 2, 5000, "LLEN", q), 2);

    redisReply *r = redisCommand(sub, "SUBSCRIBE %s %s", cha, chb);
    if (r)
        freeReplyObject(r);
    void *m = NULL;
    CU_ASSERT_EQUAL(redisGetReply(sub, &m), REDIS_OK); /* second confirmation */
    if (m)
        freeReplyObject(m);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), 0);
    m = NULL;
    CU_ASSERT_EQUAL(redisGetReply(sub, &m), REDIS_OK);
    r = m;
    CU_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
              strcmp(r->element[1]->str, cha) == 0 && strcmp(r->element[2]->str, "0") == 0);
    if (r)
        freeReplyObject(r);
    /* nothing for the second waiter while the first one holds */
    struct timeval tv = {0, 300000};
    redisSetTimeout(sub, tv);
    m = NULL;
    int got_more = redisGetReply(sub, &m) == REDIS_OK;
    if (got_more && m) {
        r = m;
        printf("\n  unexpected message on %s ", r->elements > 1 ? r->element[1]->str : "?");
        freeReplyObject(m);
    }
    CU_ASSERT_FALSE(got_more);
    int held = 0;
    CU_ASSERT_TRUE(th_wait_for(is_done, &b, 1) == 0); /* b still waiting */
    CU_ASSERT_EQUAL(hilock_lock_is_held_tid(&held, l, 21), 0);
    CU_ASSERT_EQUAL(held, 1);
    __atomic_store_n(&release_a, 1, __ATOMIC_RELEASE);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CU_ASSERT_EQUAL(a.rc, 0);
    CU_ASSERT_EQUAL(a.release_rc, 0);
    CU_ASSERT_EQUAL(b.rc, 0);
    CU_ASSERT_EQUAL(b.release_rc, 0);
    /* b acquired right after a's release (woken, not polling its lease hint) */
    CU_ASSERT(b.elapsed_ms < 5000);
    CU_ASSERT(no_fair_keys(ctx, name));
    fair_close(c, ctx, l);
    redisFree(sub);
}

/* Reentrancy, NOT_OWNER, queries and force unlock on a fair lock. */
static void t_reentrant_and_not_owner(void)
{
    const char *name = "fairre";
    hilock_client *c;
    redisContext *ctx;
    hilock_lock *l;
    CU_ASSERT_EQUAL_FATAL(fair_open(name, &c, &ctx, &l), 0);
    CU_ASSERT_EQUAL(hilock_lock_kind(l), HILOCK_KIND_FAIR);

    int64_t n = -1;
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 1, 0, 5000), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 1, 1000, 20000), 0);
    CU_ASSERT_EQUAL(hilock_lock_hold_count_tid(&n, l, 1), 0);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(hilock_lock_remaining_ms(&n, l), 0);
    CU_ASSERT(n > 5000 && n <= 20000); /* the re-entry re-applied its lease */
    CU_ASSERT_EQUAL(cmd_int(ctx, "HLEN %s", name), 1);
    /* another owner: cannot take it, cannot release it, changes nothing */
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 2, 0, 5000), HILOCK_ETIMEDOUT);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 2), HILOCK_ENOTOWNER);
    CU_ASSERT(strlen(hilock_lock_errmsg(l)) > 0);
    CU_ASSERT_EQUAL(hilock_lock_hold_count_tid(&n, l, 1), 0);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT(no_fair_keys(ctx, name));

    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), 0);
    int locked = 0;
    CU_ASSERT_EQUAL(hilock_lock_is_locked(&locked, l), 0);
    CU_ASSERT_EQUAL(locked, 1);
    CU_ASSERT_EQUAL(hilock_lock_release_tid(l, 1), 0);
    CU_ASSERT_EQUAL(hilock_lock_is_locked(&locked, l), 0);
    CU_ASSERT_EQUAL(locked, 0);
    CU_ASSERT_EQUAL(hilock_lock_hold_count_tid(&n, l, 1), 0);
    CU_ASSERT_EQUAL(n, 0);

    /* force unlock, whoever holds it */
    int deleted = -1;
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 3, 0, 5000), 0);
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, l), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, l), 0);
    CU_ASSERT_EQUAL(deleted, 0);
    CU_ASSERT_EQUAL(cmd_int(ctx, "EXISTS %s", name), 0);

    /* a string key under the name: clear error, key untouched */
    cmd_int(ctx, "SET %s notalock", name);
    CU_ASSERT_EQUAL(hilock_lock_acquire_tid(l, 1, 0, 5000), HILOCK_EWRONGTYPE);
    char buf[64] = "";
    CU_ASSERT_EQUAL(th_redis_str(&th_srv, buf, sizeof buf, "GET %s", name), 0);
    CU_ASSERT_STRING_EQUAL(buf, "notalock");
    cmd_int(ctx, "DEL %s", name);
    CU_ASSERT(no_fair_keys(ctx, name));

    fair_close(c, ctx, l);
}

/* The watchdog keeps a fair lock alive past its lease while held. */
static void t_fair_watchdog(void)
{
    const char *name = "fairwd";
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.watchdog_lease_ms = 450;
    hilock_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, th_srv.url, &o, NULL, 0), 0);
    hilock_lock *l = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&l, c, name), 0);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, HILOCK_LEASE_WATCHDOG), 0);
    th_sleep_ms(3 * 450);
    int held = 0;
    CU_ASSERT_EQUAL(hilock_lock_is_held(&held, l), 0);
    CU_ASSERT_EQUAL(held, 1);
    CU_ASSERT_FALSE(hilock_lock_is_lost(l));
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS %s", name), 0);
    hilock_lock_free(l);
    hilock_client_close(c);
}

/* A fair lock force-unlocked under its holder is reported lost like any
 * other kind (callback, is_lost), and its release says so: the fair unlock
 * script answers "released" on a missing key, but the client knows better. */
static int lost_calls;
static void count_lost(hilock_lock *l, uint64_t tid, void *payload)
{
    (void)l;
    (void)tid;
    __atomic_add_fetch((int *)payload, 1, __ATOMIC_SEQ_CST);
}

/* the lost callback ran (is_lost may say so a moment before it runs) */
static int fair_lost_seen(void *n) { return __atomic_load_n((int *)n, __ATOMIC_SEQ_CST) > 0; }

static void t_fair_force_unlocked_is_lost(void)
{
    const char *name = "fairforced";
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    o.watchdog_lease_ms = 450;
    hilock_client *c = NULL, *other = open_client(&th_srv, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(other);
    CU_ASSERT_EQUAL_FATAL(hilock_client_open(&c, th_srv.url, &o, NULL, 0), 0);
    hilock_lock *l = NULL, *f = NULL;
    CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&l, c, name), 0);
    CU_ASSERT_EQUAL_FATAL(hilock_fair_lock_new(&f, other, name), 0);
    lost_calls = 0;
    hilock_lock_set_lost_callback(l, count_lost, &lost_calls);
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, HILOCK_LEASE_WATCHDOG), 0);
    int deleted = 0;
    CU_ASSERT_EQUAL(hilock_lock_force_unlock(&deleted, f), 0);
    CU_ASSERT_EQUAL(deleted, 1);
    CU_ASSERT(th_wait_for(fair_lost_seen, &lost_calls, 10 * 450));
    CU_ASSERT(hilock_lock_is_lost(l));
    CU_ASSERT_EQUAL(__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST), 1);
    /* the key is gone: fair_unlock.lua answers 0 ("released") */
    CU_ASSERT_EQUAL(hilock_lock_release(l), HILOCK_ENOTOWNER);
    CU_ASSERT(strstr(hilock_lock_errmsg(l), "lost") != NULL);
    /* a new grant clears the loss: its release is a release again */
    CU_ASSERT_EQUAL(hilock_lock_acquire(l, 0, HILOCK_LEASE_WATCHDOG), 0);
    CU_ASSERT_FALSE(hilock_lock_is_lost(l));
    CU_ASSERT_EQUAL(hilock_lock_release(l), 0);
    CU_ASSERT_EQUAL(th_redis_int(&th_srv, "EXISTS %s", name), 0);
    hilock_lock_free(f);
    hilock_lock_free(l);
    hilock_client_close(c);
    hilock_client_close(other);
}

int main(void)
{
    shm = mmap(NULL, sizeof *shm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shm == MAP_FAILED)
        return 2;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("fair lock", th_srv_init, th_srv_clean);
    CU_add_test(s, "16 processes: grant order = arrival order", t_fifo_order);
    CU_add_test(s, "SIGKILLed waiter skipped after its deadline", t_killed_waiter_skipped);
    CU_add_test(s, "tryLock(0) never queues", t_trylock_zero);
    CU_add_test(s, "no deadline drift after 50 waiters give up", t_deadline_drift);
    CU_add_test(s, "unlock of an expired fair lock: released", t_unlock_expired_is_released);
    CU_add_test(s, "unlock wakes only the head waiter", t_unlock_wakes_only_head);
    CU_add_test(s, "reentrancy, NOT_OWNER, force unlock", t_reentrant_and_not_owner);
    CU_add_test(s, "watchdog renews a fair lock", t_fair_watchdog);
    CU_add_test(s, "force-unlocked fair lock: lost, release says so",
                t_fair_force_unlocked_is_lost);
    CU_add_test(s, "Redis stall during a wait: no stale entry", t_stall_leaves_no_stale_entry);
    int rc = th_cu_run();
    munmap(shm, sizeof *shm);
    return rc;
}
