/*
 * tests/sim: deterministic simulation of hilock_async sessions (issue 31
 * item 6; FoundationDB's simulator and TigerBeetle's VOPR are the models).
 *
 * Per seed: three sim clients, each its own hilock_async over its own
 * hilock_client, run a sequence of calls (acquire with the watchdog or a
 * fixed lease, re-entry, release, cancel, force unlock) on a reentrant lock,
 * a fair lock and a semaphore, through an in-process fault proxy in front
 * of a real redis-server. Everything runs in ONE single-threaded epoll loop
 * owned by this program: the clients' descriptors and timers
 * (hilock_async_loop), the proxies and the schedules. Many seeds run at
 * once, each in its own lane (its own server, proxy and clients; a lane runs
 * its seeds one after another and keeps its names apart by the seed).
 *
 * A seed's schedule is drawn up front from a xoshiro256** generator seeded
 * by splitmix64(seed): every client's calls (with gaps, waits, leases,
 * holding times, cancel times) and the faults (times, kinds, targets,
 * lengths). The same seed gives the same schedule (printed with -v); the
 * interleaving is real time on a real machine and is not replayed.
 *
 * Faults, per connection (the k-th connection accepted in the seed), per
 * client (each client has its own proxy listener: all its connections, also
 * new ones, so one client can be cut off) or on all, and per direction (up = requests, down = replies): delay every chunk,
 * drop every byte, reset before the request reaches the server, reset after
 * the request with the reply lost, reset right after the reply is delivered;
 * for new connections: refuse (reset at once), stall (accepted, never
 * answered); the server: paused (SIGSTOP/SIGCONT), restarted empty
 * (SIGKILL and started again on its port).
 *
 * Checks (a violation prints the seed, its log and the replay command):
 * - when a client is granted a lock, no other client believes it holds that
 *   lock: a holder believes it holds until it releases it, until its fixed
 *   lease (counted from the acquire call) has run out, or until it was told
 *   lost (lost callback) or would be told if it asked
 *   (hilock_async_is_lost); a force unlock or a server restart ends every
 *   belief of the locks it touched (nobody can be told first there);
 * - a semaphore's permits believed taken never exceed its permits (until a
 *   restart empties it);
 * - every call's callback runs exactly once, within a bound;
 * - at the end (faults healed, every call done, every hold released):
 *   nothing held, queued or subscribed on the server (the lock keys, the
 *   fair queue and its timeouts, the semaphore's count back to its permits
 *   less one per semaphore call answered HILOCK_ECONN, PUBSUB CHANNELS of
 *   the seed's names), within END_CHECK_MS.
 * Findings not fixed yet are classified (known_names) and fail the run only
 * with --strict; docs/testing.md ("The simulator") lists them.
 *
 * Usage: sim [--seeds N] [--first S] [--seed S] [--also S,S] [--lanes L] [--faults a,b]
 *            [--kinds lock,fair,sem] [--all] [--strict] [-v]
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "harness.h"
#include "hilock.h"

/* ---------------------------------------------------------------- */
/* Parameters                                                        */

#define NCL 3           /* sim clients per seed */
#define NRES 3          /* 0: reentrant lock, 1: fair lock, 2: semaphore */
#define SEM_PERMITS 2
#define WATCHDOG_LEASE 450
#define CMD_TIMEOUT 120
#define CONNECT_TIMEOUT 150
#define FAIR_WINDOW 1000
#define FAULT_SPAN 2000   /* faults start within this many ms of the seed's start */
#define CALL_SLACK 6000   /* a call completes within wait + this */
#define SEED_LIMIT 20000  /* a seed ends within this (else: calls stuck) */
#define END_CHECK_MS 4000 /* the server is clean within this after the last call */
#define MAXOPS 8
#define LATE_COPY_MS 3000 /* a request may reach the server this long after its
                             call failed (a delay, a paused server) */
#define MAXFAULTS 6
#define MAXFD 65536
#define MAXLANES 64
/* What the default run draws (--faults, --kinds, --all widen it): every
 * fault kind and lock kind whose known findings are fixed (docs/testing.md,
 * tests/sim: known findings). */
#define DEFAULT_FAULTS (~0u)
#define DEFAULT_KINDS 7u

/* ---------------------------------------------------------------- */
/* PRNG: xoshiro256** seeded by splitmix64 (no rand())                */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* uniform in [lo, hi] */
static int64_t rnd(rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

static int chance(rng *r, int pct)
{
    return (int)(rng_next(r) % 100) < pct;
}

/* ---------------------------------------------------------------- */
/* Time and log                                                      */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->len;
        va_start(ap, fmt);
        int n = room ? vsnprintf(b->p + b->len, room, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (n >= 0 && cap - b->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            abort();
        b->p = p;
        b->cap = cap;
    }
}

/* ---------------------------------------------------------------- */
/* Schedule                                                          */

enum { OP_LOCK = 1, OP_SEM, OP_FORCE };

typedef struct op {
    int type;
    int res;           /* 0 reentrant, 1 fair (OP_LOCK, OP_FORCE) */
    int64_t gap;       /* ms after the previous op ended (the first: after the start) */
    int64_t wait;      /* acquire wait */
    int64_t lease;     /* 0: watchdog, else fixed */
    int reenter;       /* acquire once more once granted */
    int64_t hold;      /* ms held before releasing */
    int64_t cancel;    /* cancel the acquire this long after the call; -1 never */
} op;

enum {
    F_DELAY = 1, F_DROP, F_RST_REQ, F_RST_NOREPLY, F_RST_REPLY, F_REFUSE, F_STALL,
    F_PAUSE, F_RESTART, F_NKINDS
};
static const char *fault_names[] = {"", "delay", "drop", "reset-before-request",
                                    "reset-before-reply", "reset-after-reply", "refuse-new",
                                    "stall-new", "pause-server", "restart-server"};

enum { D_UP = 1, D_DOWN = 2 };

typedef struct fault {
    int64_t at;
    int kind;
    int target;  /* -1: every connection; -2 - c: every connection of client c
                    (also new ones: c partitioned); k >= 0: the k-th live
                    connection (mod count) */
    int dir;     /* D_UP | D_DOWN */
    int64_t ms;  /* delay */
    int64_t dur; /* how long (delay, drop, refuse, stall, pause) */
    int fired;
} fault;

typedef struct schedule {
    op ops[NCL][MAXOPS];
    int nops[NCL];
    fault faults[MAXFAULTS];
    int nfaults;
} schedule;

static void schedule_draw(schedule *s, uint64_t seed)
{
    rng r;
    rng_seed(&r, seed);
    memset(s, 0, sizeof *s);
    for (int c = 0; c < NCL; c++) {
        s->nops[c] = (int)rnd(&r, 3, MAXOPS);
        for (int i = 0; i < s->nops[c]; i++) {
            op *o = &s->ops[c][i];
            int k = (int)rnd(&r, 0, 99);
            o->type = k < 8 ? OP_FORCE : k < 30 ? OP_SEM : OP_LOCK;
            o->res = chance(&r, 50) ? 1 : 0;
            o->gap = chance(&r, 50) ? rnd(&r, 0, 30) : rnd(&r, 0, 200);
            o->wait = chance(&r, 25) ? 0 : rnd(&r, 50, 900);
            o->lease = chance(&r, 50) ? 0 : rnd(&r, 100, 400);
            o->reenter = o->type == OP_LOCK && o->res == 0 && chance(&r, 25);
            int h = (int)rnd(&r, 0, 99); /* short, medium, or past a few renewals */
            o->hold = h < 40 ? rnd(&r, 0, 60) : h < 80 ? rnd(&r, 0, 500) : rnd(&r, 500, 1500);
            o->cancel = chance(&r, 20) ? rnd(&r, 10, 400) : -1;
        }
    }
    s->nfaults = (int)rnd(&r, 0, MAXFAULTS);
    for (int i = 0; i < s->nfaults; i++) {
        fault *f = &s->faults[i];
        f->at = rnd(&r, 0, FAULT_SPAN);
        int k = (int)rnd(&r, 0, 99);
        f->kind = k < 18 ? F_DELAY : k < 34 ? F_DROP : k < 44 ? F_RST_REQ : k < 54 ? F_RST_NOREPLY
                : k < 64 ? F_RST_REPLY : k < 71 ? F_REFUSE : k < 78 ? F_STALL : k < 92 ? F_PAUSE
                : F_RESTART;
        int t = (int)rnd(&r, 0, 99);
        f->target = t < 30 ? -1 : t < 65 ? -2 - (int)rnd(&r, 0, NCL - 1) : (int)rnd(&r, 0, 7);
        f->dir = (int)rnd(&r, 1, 3);
        /* a delay past the command timeout makes late copies */
        f->ms = chance(&r, 50) ? rnd(&r, 30, 300) : rnd(&r, 300, 1500);
        f->dur = rnd(&r, 50, 1200);
    }
    /* in time order (insertion sort: few) */
    for (int i = 1; i < s->nfaults; i++)
        for (int j = i; j > 0 && s->faults[j].at < s->faults[j - 1].at; j--) {
            fault t = s->faults[j];
            s->faults[j] = s->faults[j - 1];
            s->faults[j - 1] = t;
        }
}

static void schedule_print(sbuf *b, const schedule *s)
{
    static const char *res_names[] = {"lock", "fair", "sem"};
    for (int c = 0; c < NCL; c++)
        for (int i = 0; i < s->nops[c]; i++) {
            const op *o = &s->ops[c][i];
            if (o->type == OP_FORCE)
                sb_printf(b, "  plan c%d#%d: +%" PRId64 " force_unlock %s\n", c, i, o->gap,
                          res_names[o->res]);
            else
                sb_printf(b,
                          "  plan c%d#%d: +%" PRId64 " acquire %s wait=%" PRId64
                          " lease=%" PRId64 "%s hold=%" PRId64 " cancel=%" PRId64 "\n",
                          c, i, o->gap, o->type == OP_SEM ? "sem" : res_names[o->res], o->wait,
                          o->type == OP_SEM ? -1 : o->lease, o->reenter ? " reenter" : "",
                          o->hold, o->cancel);
        }
    for (int i = 0; i < s->nfaults; i++) {
        const fault *f = &s->faults[i];
        char tg[16];
        if (f->target == -1)
            snprintf(tg, sizeof tg, "all");
        else if (f->target <= -2)
            snprintf(tg, sizeof tg, "c%d", -2 - f->target);
        else
            snprintf(tg, sizeof tg, "conn#%d", f->target);
        sb_printf(b,
                  "  plan fault @%" PRId64 ": %s target=%s dir=%s ms=%" PRId64 " dur=%" PRId64
                  "\n",
                  f->at, fault_names[f->kind], tg,
                  f->dir == 3 ? "both" : f->dir == D_UP ? "up" : "down", f->ms, f->dur);
    }
}

/* ---------------------------------------------------------------- */
/* The loop's descriptor table                                       */

enum { FD_NONE = 0, FD_ASYNC, FD_LISTEN, FD_PCLIENT, FD_PSERVER };
typedef struct fdrec {
    int type;
    void *p;
    int events; /* epoll events registered */
} fdrec;
static fdrec *fdtab;
static int epfd = -1;

static int fd_set_events(int fd, int type, void *p, int ev)
{
    if (fd < 0 || fd >= MAXFD)
        return -1;
    fdrec *r = &fdtab[fd];
    if (ev == 0) {
        if (r->type != FD_NONE)
            epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
        r->type = FD_NONE;
        r->p = NULL;
        r->events = 0;
        return 0;
    }
    struct epoll_event e;
    memset(&e, 0, sizeof e);
    e.events = (uint32_t)ev;
    e.data.fd = fd;
    int rc;
    if (r->type == FD_NONE)
        rc = epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e);
    else if (r->events != ev || r->p != p)
        rc = epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &e);
    else
        rc = 0;
    if (rc != 0 && errno == EEXIST)
        rc = epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &e);
    if (rc != 0 && errno == ENOENT)
        rc = epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e);
    if (rc != 0)
        return -1;
    r->type = type;
    r->p = p;
    r->events = ev;
    return 0;
}

/* ---------------------------------------------------------------- */
/* Fault proxy (in the loop, non-blocking)                           */

typedef struct chunk {
    struct chunk *next;
    int64_t at; /* deliver at */
    size_t len, off;
    char data[];
} chunk;

typedef struct pconn {
    struct pconn *next;
    struct lane *lane;
    int ordinal;          /* k-th connection accepted in this seed */
    int client;           /* whose listener accepted it */
    int fd[2];            /* 0: client side, 1: server side */
    int connecting;       /* server side connect in progress */
    int stalled;          /* accepted, never answered */
    chunk *q[2], *qt[2];  /* 0: up (to the server), 1: down (to the client) */
    int blocked[2];       /* the write to fd[dest] would block */
    int eof[2];           /* side closed (0 client, 1 server): close once what it sent is out */
    /* per-connection faults */
    int64_t delay_until[2], delay_ms[2], drop_until[2];
    int rst_req, rst_noreply, rst_reply; /* armed one-shot resets */
    int noreply_pending, reset_after_flush;
    int dropped; /* bytes were dropped: reset once the silence ends (as TCP
                    gives up on a link that lost them; a shorter outage that
                    TCP rides out is a delay) */
} pconn;

typedef struct lane {
    int idx;
    th_redis srv;
    int paused;
    int64_t pause_end;
    int restarting;
    /* one proxy listener per client, so that a fault can cut one client off */
    struct listener {
        struct lane *lane;
        int client, fd, port;
        char url[64];
    } lsn[NCL];
    pconn *conns;
    int nconn_seed;
    /* client-wide faults (target -1 or -2 - c): on its live and new connections */
    struct cfault {
        int64_t delay_until[2], delay_ms[2], drop_until[2];
        int64_t refuse_until, stall_until;
    } cf[NCL];
    hilock_client *cl[NCL];
    redisContext *ctl; /* direct to the server: setup and end checks */
    struct seedrun *run; /* the seed running now, or NULL */
} lane;

static void chunk_free_all(chunk **h, chunk **t)
{
    while (*h) {
        chunk *n = (*h)->next;
        free(*h);
        *h = n;
    }
    *t = NULL;
}

static void set_linger0(int fd)
{
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
}

static void pconn_close(pconn *c, int rst)
{
    for (int i = 0; i < 2; i++) {
        if (c->fd[i] >= 0) {
            fd_set_events(c->fd[i], 0, NULL, 0);
            if (rst)
                set_linger0(c->fd[i]);
            close(c->fd[i]);
            c->fd[i] = -1;
        }
        chunk_free_all(&c->q[i], &c->qt[i]);
    }
    lane *l = c->lane;
    for (pconn **pp = &l->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    free(c);
}

static void pconn_update(pconn *c);

static void pconn_push(pconn *c, int d, const char *buf, size_t n, int64_t at)
{
    chunk *k = malloc(sizeof *k + n);
    if (!k)
        abort();
    k->next = NULL;
    k->at = at;
    k->len = n;
    k->off = 0;
    memcpy(k->data, buf, n);
    if (c->qt[d])
        c->qt[d]->next = k;
    else
        c->q[d] = k;
    c->qt[d] = k;
}

/* the effective delay / drop of direction d (0 up, 1 down) now */
static int64_t eff_delay(const pconn *c, int d, int64_t now)
{
    int64_t ms = 0;
    if (now < c->delay_until[d])
        ms = c->delay_ms[d];
    const struct cfault *w = &c->lane->cf[c->client];
    if (now < w->delay_until[d] && w->delay_ms[d] > ms)
        ms = w->delay_ms[d];
    return ms;
}

static int dropping(const pconn *c, int d, int64_t now)
{
    return now < c->drop_until[d] || now < c->lane->cf[c->client].drop_until[d];
}

/* Write what is due in direction d. Returns -1 when the connection was closed. */
static int pconn_pump(pconn *c, int d, int64_t now)
{
    int dst = d == 0 ? 1 : 0;
    if (c->fd[dst] < 0 || (dst == 1 && c->connecting))
        return 0;
    while (c->q[d] && c->q[d]->at <= now && !c->blocked[d]) {
        chunk *k = c->q[d];
        ssize_t w = send(c->fd[dst], k->data + k->off, k->len - k->off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                c->blocked[d] = 1;
                break;
            }
            if (d == 1 && c->eof[0]) { /* the client left: its replies go nowhere */
                chunk_free_all(&c->q[1], &c->qt[1]);
                break;
            }
            pconn_close(c, 1);
            return -1;
        }
        k->off += (size_t)w;
        if (k->off < k->len)
            continue;
        c->q[d] = k->next;
        if (!c->q[d])
            c->qt[d] = NULL;
        free(k);
        if (d == 1 && c->reset_after_flush && !c->q[1]) {
            pconn_close(c, 1);
            return -1;
        }
    }
    if ((c->eof[0] && !c->q[0]) || (c->eof[1] && !c->q[1])) {
        pconn_close(c, 0);
        return -1;
    }
    return 0;
}

static void pconn_update(pconn *c)
{
    if (c->stalled)
        return;
    if (c->fd[0] >= 0)
        fd_set_events(c->fd[0], FD_PCLIENT, c,
                      (c->eof[0] ? 0 : EPOLLIN) | (c->blocked[1] ? EPOLLOUT : 0));
    if (c->fd[1] >= 0)
        fd_set_events(c->fd[1], FD_PSERVER, c,
                      (c->eof[1] ? 0 : EPOLLIN) | (c->connecting || c->blocked[0] ? EPOLLOUT : 0));
}

static void seed_note(struct seedrun *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Bytes readable on side `side` of c. */
static void pconn_read(pconn *c, int side, int64_t now)
{
    int d = side == 0 ? 0 : 1; /* from the client: up; from the server: down */
    char buf[16384];
    for (;;) {
        ssize_t n = recv(c->fd[side], buf, sizeof buf, 0);
        if (n == 0) {
            c->eof[side] = 1;
            break;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            pconn_close(c, 1);
            return;
        }
        if (dropping(c, d, now)) {
            c->dropped = 1;
            continue;
        }
        if (d == 0 && c->rst_req) {
            c->rst_req = 0;
            seed_note(c->lane->run, "proxy: conn %d reset before its request", c->ordinal);
            pconn_close(c, 1);
            return;
        }
        if (d == 1 && c->noreply_pending) {
            seed_note(c->lane->run, "proxy: conn %d reset, reply lost", c->ordinal);
            pconn_close(c, 1);
            return;
        }
        pconn_push(c, d, buf, (size_t)n, now + eff_delay(c, d, now));
        if (d == 0 && c->rst_noreply) {
            c->rst_noreply = 0;
            c->noreply_pending = 1;
        }
        if (d == 1 && c->rst_reply) {
            c->rst_reply = 0;
            c->reset_after_flush = 1;
            seed_note(c->lane->run, "proxy: conn %d reset after this reply", c->ordinal);
        }
    }
    if (pconn_pump(c, d, now) < 0)
        return;
    pconn_update(c);
}

static void pconn_on_event(pconn *c, int fd, uint32_t ev, int64_t now)
{
    int side = fd == c->fd[0] ? 0 : 1;
    if (side == 1 && c->connecting && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) { /* the server is down (restarting): the client sees a reset */
            pconn_close(c, 1);
            return;
        }
        c->connecting = 0;
    }
    if (ev & EPOLLOUT) {
        c->blocked[side == 1 ? 0 : 1] = 0;
        if (pconn_pump(c, side == 1 ? 0 : 1, now) < 0)
            return;
    }
    if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        pconn_read(c, side, now);
        return;
    }
    pconn_update(c);
}

static void lane_accept(struct listener *ls, int64_t now)
{
    lane *l = ls->lane;
    for (;;) {
        int fd = accept4(ls->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (now < l->cf[ls->client].refuse_until) {
            seed_note(l->run, "proxy: new connection refused");
            set_linger0(fd);
            close(fd);
            continue;
        }
        pconn *c = calloc(1, sizeof *c);
        if (!c)
            abort();
        c->lane = l;
        c->client = ls->client;
        c->ordinal = l->nconn_seed++;
        c->fd[0] = fd;
        c->fd[1] = -1;
        c->next = l->conns;
        l->conns = c;
        if (now < l->cf[ls->client].stall_until) {
            seed_note(l->run, "proxy: conn %d accepted and stalled", c->ordinal);
            c->stalled = 1;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s < 0) {
            pconn_close(c, 1);
            continue;
        }
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)l->srv.port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        c->fd[1] = s;
        if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
            if (errno != EINPROGRESS) {
                pconn_close(c, 1);
                continue;
            }
            c->connecting = 1;
        }
        pconn_update(c);
    }
}

static int lane_listen(struct listener *ls)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    ls->fd = fd;
    ls->port = ntohs(a.sin_port);
    snprintf(ls->url, sizeof ls->url, "redis://127.0.0.1:%d", ls->port);
    return fd_set_events(fd, FD_LISTEN, ls, EPOLLIN);
}

/* ---------------------------------------------------------------- */
/* Server pause and restart (non-blocking)                           */

static void srv_spawn(lane *l)
{
    char port[16];
    snprintf(port, sizeof port, "%d", l->srv.port);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        execlp(th_server_bin(), th_server_bin(), "--port", port, "--bind", "127.0.0.1", "--save",
               "", "--appendonly", "no", "--dir", l->srv.dir, "--logfile", "redis.log",
               (char *)NULL);
        _exit(127);
    }
    l->srv.pid = pid;
}

static void srv_restart(lane *l)
{
    if (l->srv.pid > 0) {
        kill(l->srv.pid, SIGKILL);
        waitpid(l->srv.pid, NULL, 0);
    }
    l->paused = 0;
    srv_spawn(l);
}

static void srv_pause(lane *l, int on)
{
    if (l->srv.pid <= 0 || l->paused == on)
        return;
    kill(l->srv.pid, on ? SIGSTOP : SIGCONT);
    l->paused = on;
}

/* A blocking command on a direct connection to the lane's server (setup
 * and the end checks only; never through the proxy). NULL on failure. */
static redisReply *srv_cmd(lane *l, const char *fmt, ...)
{
    struct timeval tv = {0, 500000};
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!l->ctl) { /* one connection per lane, kept (a restart ends it) */
            l->ctl = redisConnectWithTimeout("127.0.0.1", l->srv.port, tv);
            if (!l->ctl || l->ctl->err) {
                redisFree(l->ctl);
                l->ctl = NULL;
                return NULL;
            }
            redisSetTimeout(l->ctl, tv);
        }
        va_list ap;
        va_start(ap, fmt);
        redisReply *r = redisvCommand(l->ctl, fmt, ap);
        va_end(ap);
        if (r)
            return r;
        redisFree(l->ctl);
        l->ctl = NULL;
    }
    return NULL;
}

/* ---------------------------------------------------------------- */
/* Seeds                                                             */

typedef struct force_win {
    int res;
    int64_t call_at, end_at; /* when it may delete holds */
} force_win;

typedef struct call {
    struct seedrun *run;
    force_win *force; /* a force unlock's window */
    int client, res, kind; /* kind: 'a' acquire, 'r' release, 'f' force, 's' sem acquire, 'S' sem release */
    int64_t start, bound;
    int64_t lag0; /* lag_ms at the call */
    int done;
    int overdue; /* reported as not completed within its bound */
    int rc;
    int64_t value;
} call;

enum { ST_GAP, ST_ACQ, ST_REENTER, ST_REENTERING, ST_HOLD, ST_REL, ST_FORCE, ST_DONE };

typedef struct simclient {
    struct seedrun *run;
    int idx;
    hilock_async *a;
    int64_t timer_at;
    hilock_lock *lk[2];
    hilock_semaphore *sem;
    uint64_t tid;
    /* the script */
    int opi;
    int state;
    int64_t next_at;      /* ST_GAP: start the op; ST_HOLD: release */
    int64_t cancel_at;    /* ST_ACQ: cancel then (-1: no) */
    int to_release;       /* releases left to make */
    call *pending;
    /* beliefs */
    int held[NRES];       /* holds (locks) / permits (sem) believed */
    int lost[NRES];       /* told lost since the last grant */
    int excused[NRES];    /* a force unlock or restart ended this belief */
    int64_t belief_end[NRES]; /* fixed lease: acquire call + lease; -1: watchdog */
    int64_t unknown_acq_at[NRES]; /* an acquire answered HILOCK_ECONN then (-1: never) */
    int64_t unknown_rel_at[NRES]; /* a release answered HILOCK_ECONN then (-1: never) */
    int64_t granted_call[NRES]; /* the call of the last grant (it ran on the server after) */
    int64_t grant_call[NRES]; /* the call of the first grant of this belief */
} simclient;

typedef struct seedrun {
    lane *lane;
    uint64_t seed;
    schedule sch;
    int64_t t0;
    int nextfault;
    int healed;
    int64_t heal_at; /* every fault ends then (ms after t0) */
    int restarted;
    int sem_unknown; /* semaphore acquires and releases answered HILOCK_ECONN */
    int64_t restart_at; /* the last restart (-1: none) */
    force_win forces[NCL * MAXOPS];
    int nforces;
    simclient cl[NCL];
    call *calls[NCL * MAXOPS * 4 + 8];
    int ncalls;
    sbuf log;
    int violations;
    unsigned known;       /* known finding classes seen (bits) */
    int phase; /* 0 running, 1 end checks, 2 done */
    int64_t check_until, next_check;
    int64_t lag0, check_lag0; /* lag_ms at the seed's start and its end checks */
    char names[NRES][96];
} seedrun;

static int verbose;
/* Time the loop lost to the machine (epoll_wait returning late, the
 * simulator's own steps taking long: a loaded machine, not the library). The bounds
 * on calls, seeds and the end checks are counted without it, so that they
 * say "the library did not complete" and not "this machine was busy". */
static int64_t lag_ms;
static int self_test; /* --self-test: lost reports are ignored, so the checks must fire */
static unsigned fault_mask = ~0u; /* bit per fault kind */
static unsigned res_mask = 7;     /* bit per resource */
static char flags_text[256];      /* the options to replay with */
static int total_violations;
static const char *self_path = "tests/sim/run.sh";

static void seed_note(seedrun *s, const char *fmt, ...)
{
    if (!s)
        return;
    sb_printf(&s->log, "  %6" PRId64 " ms ", now_ms() - s->t0);
    va_list ap;
    va_start(ap, fmt);
    char tmp[1024];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_printf(&s->log, "%s\n", tmp);
}

/* Findings the simulator made that are not fixed yet (docs/testing.md,
 * "Known findings"): a violation of one of these classes is printed and
 * counted but fails the run only with --strict. Everything else fails it. */
enum { K_LATE_RELEASE, K_N };
static const char *known_names[K_N] = {"late-release-copy"};
static const char *known_why[K_N] = {
    "another client was granted a lock whose holder was not told lost, the holder's earlier "
    "release of it having been answered HILOCK_ECONN: a late copy of that release (seen on the "
    "fair lock) may have unlocked the later hold"};
static int strict;
static int known_seeds[K_N];
static uint64_t known_first[K_N];

static void violation_v(seedrun *s, int known, const char *fmt, va_list ap)
{
    char tmp[1024];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    if (known >= 0) {
        seed_note(s, "KNOWN FINDING (%s): %s", known_names[known], tmp);
        if (!(s->known & (1u << known)) && !s->violations)
            fprintf(stdout, "known finding %s, seed %" PRIu64 ": %s\n", known_names[known],
                    s->seed, tmp);
        s->known |= 1u << known;
        return;
    }
    seed_note(s, "VIOLATION: %s", tmp);
    if (!s->violations)
        fprintf(stdout, "VIOLATION seed %" PRIu64 ": %s\n", s->seed, tmp);
    s->violations++;
}

static void violation(seedrun *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(seedrun *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    violation_v(s, -1, fmt, ap);
    va_end(ap);
}

static void violation_known(seedrun *s, int known, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void violation_known(seedrun *s, int known, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    violation_v(s, known, fmt, ap);
    va_end(ap);
}

static const char *res_name(int r)
{
    return r == 0 ? "lock" : r == 1 ? "fair" : "sem";
}

/* --- hilock_async loop glue --- */

static int loop_watch(void *data, int fd, int events)
{
    simclient *c = data;
    int ev = ((events & HILOCK_IO_READ) ? EPOLLIN : 0) | ((events & HILOCK_IO_WRITE) ? EPOLLOUT : 0);
    return fd_set_events(fd, FD_ASYNC, c, ev);
}

static int loop_timer(void *data, int64_t ms)
{
    simclient *c = data;
    c->timer_at = ms < 0 ? -1 : now_ms() + ms;
    return 0;
}

/* --- the checks --- */

static int believes(simclient *c, int r, int64_t now)
{
    if (c->held[r] <= 0 || c->lost[r] || c->excused[r])
        return 0;
    if (c->belief_end[r] >= 0 && now >= c->belief_end[r])
        return 0;
    return 1;
}

/* A force unlock that may have run after c's grant of r, or a restart after
 * its first acquire call, may have deleted c's hold: no one can tell c first. */
static int excused(seedrun *s, simclient *c, int r)
{
    if (s->restart_at >= 0 && c->grant_call[r] <= s->restart_at)
        return 1;
    for (int i = 0; i < s->nforces; i++)
        if (s->forces[i].res == r && s->forces[i].end_at >= c->granted_call[r])
            return 1;
    return 0;
}

/* c was just granted lock r: nobody else may believe they hold it. */
static void check_grant(seedrun *s, simclient *c, int r)
{
    int64_t now = now_ms();
    if (!believes(c, r, now)) {
        /* a fixed lease counted from the call ran out before the grant was
         * heard: its hold was over on the server before anyone else's
         * could begin, so it conflicts with no one (seen under load) */
        seed_note(s, "c%d: granted %s after its fixed lease ran out", c->idx, res_name(r));
        return;
    }
    if (excused(s, c, r)) {
        /* its own grant may have run before a restart or a force unlock
         * deleted it, the answer heard late: it conflicts with no one */
        seed_note(s, "c%d: granted %s, maybe deleted since by a force unlock or a restart",
                  c->idx, res_name(r));
        c->excused[r] = 1;
        return;
    }
    for (int i = 0; i < NCL; i++) {
        simclient *o = &s->cl[i];
        if (o == c || !believes(o, r, now))
            continue;
        if (excused(s, o, r)) {
            seed_note(s, "c%d: its hold of %s may have been deleted by a force unlock or a "
                         "restart", o->idx, res_name(r));
            o->excused[r] = 1;
            continue;
        }
        if (!self_test && hilock_async_is_lost(o->a, o->lk[r], o->tid)) {
            seed_note(s, "c%d: is_lost(%s) says 1 (asked at c%d's grant)", o->idx, res_name(r),
                      c->idx);
            o->lost[r] = 1;
            continue;
        }
        int late = o->unknown_acq_at[r] >= 0 && now - o->unknown_acq_at[r] <= LATE_COPY_MS;
        int late_rel = o->unknown_rel_at[r] >= 0 && now - o->unknown_rel_at[r] <= LATE_COPY_MS;
        /* a late copy of the holder's own timed-out acquire is no known
         * finding any more (the session's unsettled-acquire rule): it fails */
        violation_known(s, late_rel ? K_LATE_RELEASE : -1,
                        "c%d granted %s while c%d believes it holds it (%d holds, %s, not told "
                        "lost)%s",
                        c->idx, res_name(r), o->idx, o->held[r],
                        o->belief_end[r] < 0 ? "watchdog" : "fixed lease not over",
                        late       ? "; the holder's earlier acquire of it was answered HILOCK_ECONN"
                        : late_rel ? "; the holder's earlier release of it was answered HILOCK_ECONN"
                                   : "");
    }
}

static void check_sem(seedrun *s)
{
    if (s->restarted)
        return;
    int sum = 0;
    for (int i = 0; i < NCL; i++)
        sum += s->cl[i].held[2];
    if (sum > SEM_PERMITS)
        violation(s, "%d semaphore permits believed taken, the semaphore has %d", sum,
                  SEM_PERMITS);
}

/* --- calls --- */

static void client_step(simclient *c, int64_t now);

static void on_done(hilock_async *a, int rc, int64_t value, void *payload)
{
    (void)a;
    call *k = payload;
    seedrun *s = k->run;
    simclient *c = &s->cl[k->client];
    k->done++;
    if (k->done > 1) {
        violation(s, "c%d: a %c call's callback ran %d times", c->idx, k->kind, k->done);
        return;
    }
    k->rc = rc;
    k->value = value;
    if (k->overdue) { /* already reported; the client has moved on */
        seed_note(s, "c%d: the overdue %c call completed: rc=%d", c->idx, k->kind, rc);
        return;
    }
    int64_t now = now_ms();
    seed_note(s, "c%d: %c %s done rc=%d (%s) value=%" PRId64 " after %" PRId64 " ms%s%s", c->idx,
              k->kind, res_name(k->res), rc, hilock_strerror(rc), value, now - k->start,
              rc ? ": " : "", rc ? hilock_async_errmsg(a) : "");
    if (now - (lag_ms - k->lag0) > k->start + k->bound)
        violation(s, "c%d: %c call completed after %" PRId64 " ms (bound %" PRId64 ")", c->idx,
                  k->kind, now - k->start, k->bound);
    if (c->pending == k)
        c->pending = NULL;
    int r = k->res;
    switch (k->kind) {
    case 'a':
        if (rc == HILOCK_ECONN)
            c->unknown_acq_at[r] = now;
        if (rc == 0) {
            op *o = &s->sch.ops[c->idx][c->opi];
            int before = believes(c, r, now) ? c->held[r] : 0;
            c->held[r] = before + 1;
            if (!before)
                c->grant_call[r] = k->start;
            c->granted_call[r] = k->start;
            if (value != c->held[r])
                seed_note(s, "c%d: the server counts %" PRId64 " holds, the caller %d", c->idx,
                          value, c->held[r]);
            c->lost[r] = 0;
            c->excused[r] = 0;
            c->belief_end[r] = o->lease > 0 ? k->start + o->lease : -1;
            check_grant(s, c, r);
            c->to_release++;
        }
        c->state = rc == 0 && c->state == ST_ACQ && s->sch.ops[c->idx][c->opi].reenter
                       ? ST_REENTER
                       : (c->to_release ? ST_HOLD : ST_GAP);
        if (c->state == ST_HOLD)
            c->next_at = now + s->sch.ops[c->idx][c->opi].hold;
        if (c->state == ST_GAP) {
            c->opi++;
            c->next_at = now;
        }
        break;
    case 's':
        /* an acquire answered HILOCK_ECONN may have taken its permit (hilock.h:
         * the settle gives up when it cannot reach the server in time) */
        if (rc == HILOCK_ECONN)
            s->sem_unknown++;
        if (rc == 0) {
            c->held[2] += 1;
            check_sem(s);
            c->to_release++;
            c->state = ST_HOLD;
            c->next_at = now + s->sch.ops[c->idx][c->opi].hold;
        } else {
            c->state = ST_GAP;
            c->opi++;
            c->next_at = now;
        }
        break;
    case 'S':
        /* a semaphore release is not idempotent: one whose outcome is unknown
         * may have given its permit back or not (the caller was told) */
        if (rc == HILOCK_ECONN)
            s->sem_unknown++;
        /* fall through */
    case 'r':
        if (k->kind == 'r' && rc == HILOCK_ECONN)
            c->unknown_rel_at[r] = now;
        if (c->to_release == 0) {
            c->state = ST_GAP;
            c->opi++;
            c->next_at = now;
        }
        break;
    case 'f':
        if (k->force) /* done, or unknown: a late copy may still run */
            k->force->end_at = rc == 0 ? now : now + LATE_COPY_MS;
        c->state = ST_GAP;
        c->opi++;
        c->next_at = now;
        break;
    }
}

static call *new_call(seedrun *s, simclient *c, int kind, int res, int64_t bound)
{
    call *k = calloc(1, sizeof *k);
    if (!k)
        abort();
    k->run = s;
    k->client = c->idx;
    k->kind = kind;
    k->res = res;
    k->start = now_ms();
    k->bound = bound;
    k->lag0 = lag_ms;
    if (s->ncalls >= (int)(sizeof s->calls / sizeof s->calls[0]))
        abort();
    s->calls[s->ncalls++] = k;
    return k;
}

static void start_failed(seedrun *s, simclient *c, call *k, int rc)
{
    violation(s, "c%d: %c call refused at once: %d %s", c->idx, k->kind, rc, hilock_strerror(rc));
    k->done = 1;
    c->state = ST_DONE;
}

static void client_step(simclient *c, int64_t now)
{
    seedrun *s = c->run;
    for (int guard = 0; guard < 4; guard++) {
        if (c->state == ST_GAP) {
            if (c->opi >= s->sch.nops[c->idx]) {
                c->state = ST_DONE;
                return;
            }
            op *o = &s->sch.ops[c->idx][c->opi];
            /* gap counted from the previous op's end (next_at holds that) */
            if (now < c->next_at + o->gap)
                return;
            c->to_release = 0;
            if (!(res_mask & (1u << (o->type == OP_SEM ? 2 : o->res)))) {
                c->opi++; /* that kind is not in this run (--kinds) */
                continue;
            }
            if (o->type == OP_FORCE) {
                call *k = new_call(s, c, 'f', o->res, CALL_SLACK);
                /* a hold it deletes ends its holder's belief: nobody can be
                 * told first (the window lasts until its outcome is known) */
                if (s->nforces < (int)(sizeof s->forces / sizeof s->forces[0])) {
                    k->force = &s->forces[s->nforces++];
                    k->force->res = o->res;
                    k->force->call_at = k->start;
                    k->force->end_at = INT64_MAX;
                }
                seed_note(s, "c%d: force_unlock %s", c->idx, res_name(o->res));
                c->state = ST_FORCE;
                c->pending = k;
                int rc = hilock_async_force_unlock(c->a, c->lk[o->res], on_done, k);
                if (rc)
                    start_failed(s, c, k, rc);
                return;
            }
            int res = o->type == OP_SEM ? 2 : o->res;
            call *k = new_call(s, c, o->type == OP_SEM ? 's' : 'a', res, o->wait + CALL_SLACK);
            c->state = ST_ACQ;
            c->pending = k;
            c->cancel_at = o->cancel >= 0 ? now + o->cancel : -1;
            seed_note(s, "c%d: acquire %s wait=%" PRId64 " lease=%" PRId64, c->idx, res_name(res),
                      o->wait, o->lease);
            int rc = o->type == OP_SEM ? hilock_async_semaphore_acquire(c->a, c->sem, c->tid, 1,
                                                                        o->wait, on_done, k)
                                       : hilock_async_acquire(c->a, c->lk[res], c->tid, o->wait,
                                                              o->lease, on_done, k);
            if (rc)
                start_failed(s, c, k, rc);
            return;
        }
        if (c->state == ST_ACQ) {
            if (c->cancel_at >= 0 && now >= c->cancel_at) {
                op *o = &s->sch.ops[c->idx][c->opi];
                int cancelled = 0;
                int rc = o->type == OP_SEM
                             ? hilock_async_semaphore_cancel(&cancelled, c->a, c->sem, c->tid)
                             : hilock_async_cancel(&cancelled, c->a, c->lk[o->res], c->tid);
                seed_note(s, "c%d: cancel -> rc=%d cancelled=%d", c->idx, rc, cancelled);
                c->cancel_at = -1;
            }
            return;
        }
        if (c->state == ST_REENTER) {
            op *o = &s->sch.ops[c->idx][c->opi];
            call *k = new_call(s, c, 'a', o->res, CALL_SLACK);
            c->state = ST_REENTERING;
            c->pending = k;
            seed_note(s, "c%d: re-enter %s", c->idx, res_name(o->res));
            int rc = hilock_async_acquire(c->a, c->lk[o->res], c->tid, 0, o->lease, on_done, k);
            if (rc)
                start_failed(s, c, k, rc);
            return;
        }
        if (c->state == ST_HOLD || c->state == ST_REL) {
            if (c->pending)
                return;
            if (c->state == ST_HOLD && now < c->next_at)
                return;
            op *o = &s->sch.ops[c->idx][c->opi];
            if (c->to_release == 0) {
                c->state = ST_GAP;
                c->opi++;
                c->next_at = now;
                continue;
            }
            c->state = ST_REL;
            c->to_release--;
            int sem = o->type == OP_SEM;
            int res = sem ? 2 : o->res;
            call *k = new_call(s, c, sem ? 'S' : 'r', res, CALL_SLACK);
            c->pending = k;
            /* the caller stops relying on this hold when it asks to release it */
            if (c->held[res] > 0)
                c->held[res]--;
            seed_note(s, "c%d: release %s", c->idx, res_name(res));
            int rc = sem ? hilock_async_semaphore_release(c->a, c->sem, 1, on_done, k)
                         : hilock_async_release(c->a, c->lk[res], c->tid, on_done, k);
            if (rc)
                start_failed(s, c, k, rc);
            return;
        }
        return;
    }
}

static void on_lost(hilock_async *a, hilock_lock *lock, uint64_t tid, void *payload)
{
    simclient *c = payload;
    (void)tid;
    for (int r = 0; r < 2; r++)
        if (c->lk[r] == lock) {
            seed_note(c->run, "c%d: LOST %s (%s)%s", c->idx, res_name(r), hilock_async_errmsg(a),
                      self_test ? " (ignored: --self-test)" : "");
            if (!self_test)
                c->lost[r] = 1;
            return;
        }
    violation(c->run, "c%d: lost callback for a lock it does not know", c->idx);
}

/* --- faults --- */

static pconn *target_conn(lane *l, int target)
{
    int n = 0;
    for (pconn *c = l->conns; c; c = c->next)
        if (!c->stalled)
            n++;
    if (n == 0)
        return NULL;
    int want = target % n, i = 0;
    for (pconn *c = l->conns; c; c = c->next)
        if (!c->stalled && i++ == want)
            return c;
    return NULL;
}

static void apply_fault(seedrun *s, fault *f, int64_t now)
{
    lane *l = s->lane;
    if (!(fault_mask & (1u << f->kind))) {
        seed_note(s, "fault %s: not in this run (--faults)", fault_names[f->kind]);
        return;
    }
    pconn *c = f->target >= 0 ? target_conn(l, f->target) : NULL;
    if (f->target >= 0 && !c && f->kind <= F_RST_REPLY) {
        seed_note(s, "fault %s: no connection to apply it to", fault_names[f->kind]);
        return;
    }
    const char *dn = f->dir == 3 ? "both" : f->dir == D_UP ? "up" : "down";
    int who = f->target <= -2 ? -2 - f->target : -1; /* one client, or all (-1) */
    char where[32];
    if (c)
        snprintf(where, sizeof where, "conn %d", c->ordinal);
    else if (who >= 0)
        snprintf(where, sizeof where, "client c%d", who);
    else
        snprintf(where, sizeof where, "every client");
    switch (f->kind) {
    case F_DELAY:
    case F_DROP:
        for (int d = 0; d < 2; d++) {
            if (!(f->dir & (d == 0 ? D_UP : D_DOWN)))
                continue;
            for (int k = 0; k < NCL; k++) {
                if (c ? k > 0 : (who >= 0 && k != who))
                    continue;
                int64_t *until = f->kind == F_DELAY ? (c ? c->delay_until : l->cf[k].delay_until)
                                                    : (c ? c->drop_until : l->cf[k].drop_until);
                until[d] = now + f->dur;
                if (f->kind == F_DELAY)
                    (c ? c->delay_ms : l->cf[k].delay_ms)[d] = f->ms;
            }
        }
        seed_note(s, "fault %s %s on %s for %" PRId64 " ms (%" PRId64 " ms)",
                  fault_names[f->kind], dn, where, f->dur, f->ms);
        break;
    case F_RST_REQ:
    case F_RST_NOREPLY:
    case F_RST_REPLY:
        for (pconn *x = l->conns; x; x = x->next) {
            if (x->stalled || (c && x != c) || (who >= 0 && x->client != who))
                continue;
            if (f->kind == F_RST_REQ)
                x->rst_req = 1;
            else if (f->kind == F_RST_NOREPLY)
                x->rst_noreply = 1;
            else
                x->rst_reply = 1;
        }
        seed_note(s, "fault %s armed on %s", fault_names[f->kind], where);
        break;
    case F_REFUSE:
    case F_STALL:
        for (int k = 0; k < NCL; k++) {
            if (who >= 0 && k != who)
                continue;
            if (c && k != c->client)
                continue;
            if (f->kind == F_REFUSE)
                l->cf[k].refuse_until = now + f->dur;
            else
                l->cf[k].stall_until = now + f->dur;
        }
        seed_note(s, "fault %s for %" PRId64 " ms on %s", fault_names[f->kind], f->dur,
                  c ? "its client" : where);
        break;
    case F_PAUSE:
        srv_pause(l, 1);
        l->pause_end = now + f->dur;
        seed_note(s, "fault server paused for %" PRId64 " ms", f->dur);
        break;
    case F_RESTART:
        /* the data is gone: the holds of calls made before are (excused()) */
        s->restart_at = now;
        s->restarted = 1;
        srv_restart(l);
        seed_note(s, "fault server restarted empty");
        break;
    }
}

static void heal(seedrun *s)
{
    lane *l = s->lane;
    memset(l->cf, 0, sizeof l->cf);
    srv_pause(l, 0);
    for (pconn *c = l->conns; c; c = c->next) {
        memset(c->delay_until, 0, sizeof c->delay_until);
        memset(c->drop_until, 0, sizeof c->drop_until);
        c->rst_req = c->rst_noreply = c->rst_reply = 0;
    }
    s->healed = 1;
    seed_note(s, "heal: every fault off");
}

/* --- seed start / end --- */

static void seed_start(lane *l, uint64_t seed)
{
    seedrun *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->lane = l;
    s->seed = seed;
    s->restart_at = -1;
    l->run = s;
    l->nconn_seed = 0;
    schedule_draw(&s->sch, seed);
    for (int i = 0; i < s->sch.nfaults; i++) {
        const fault *f = &s->sch.faults[i];
        int64_t end = f->at + (f->kind == F_RESTART ? 0 : f->dur);
        if (end > s->heal_at)
            s->heal_at = end;
    }
    sb_printf(&s->log, "seed %" PRIu64 " (lane %d, server port %d):\n", seed, l->idx, l->srv.port);
    schedule_print(&s->log, &s->sch);
    snprintf(s->names[0], sizeof s->names[0], "sim%" PRIu64 ":lock", seed);
    snprintf(s->names[1], sizeof s->names[1], "sim%" PRIu64 ":fair", seed);
    snprintf(s->names[2], sizeof s->names[2], "sim%" PRIu64 ":sem", seed);
    redisReply *rep = srv_cmd(l, "SET %s %d", s->names[2], SEM_PERMITS);
    if (!rep)
        fprintf(stderr, "lane %d: cannot set the semaphore's permits\n", l->idx);
    freeReplyObject(rep);
    s->t0 = now_ms();
    s->lag0 = lag_ms;
    for (int i = 0; i < NCL; i++) {
        simclient *c = &s->cl[i];
        c->run = s;
        c->idx = i;
        c->tid = 1000 + (uint64_t)i;
        c->timer_at = -1;
        c->state = ST_GAP;
        c->next_at = s->t0;
        for (int r = 0; r < NRES; r++)
            c->belief_end[r] = c->unknown_acq_at[r] = c->unknown_rel_at[r] = -1;
        hilock_async_loop loop = {HILOCK_ASYNC_LOOP_VERSION, c, loop_watch, loop_timer};
        if (hilock_async_new(&c->a, &loop) != 0 ||
            hilock_lock_new(&c->lk[0], l->cl[i], s->names[0]) != 0 ||
            hilock_fair_lock_new(&c->lk[1], l->cl[i], s->names[1]) != 0 ||
            hilock_semaphore_new(&c->sem, l->cl[i], s->names[2]) != 0) {
            fprintf(stderr, "seed %" PRIu64 ": cannot make the handles\n", seed);
            abort();
        }
        hilock_async_set_lost_callback(c->a, on_lost, c);
    }
}

/* The end checks: 1 when clean, 0 not yet. detail gets what is left. */
static int server_clean(seedrun *s, char *detail, size_t len, int *known)
{
    *known = -1;
    lane *l = s->lane;
    detail[0] = 0;
    redisReply *r = srv_cmd(l, "EXISTS %s %s redisson_lock_queue:{%s} redisson_lock_timeout:{%s}",
                            s->names[0], s->names[1], s->names[1], s->names[1]);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        snprintf(detail, len, "server did not answer");
        freeReplyObject(r);
        return 0;
    }
    long long n = r->integer;
    freeReplyObject(r);
    if (n) {
        r = srv_cmd(l, "PTTL %s", s->names[0]);
        long long p0 = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -9;
        freeReplyObject(r);
        r = srv_cmd(l, "PTTL %s", s->names[1]);
        long long p1 = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -9;
        freeReplyObject(r);
        r = srv_cmd(l, "LLEN redisson_lock_queue:{%s}", s->names[1]);
        long long q = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -9;
        freeReplyObject(r);
        snprintf(detail, len,
                 "%lld lock keys left (lock pttl %lld, fair pttl %lld, fair queue %lld)", n, p0,
                 p1, q);
        /* neither a key renewed after the last call (an orphan grant: the
         * session's unsettled-acquire rule) nor a fair queue entry left (its
         * settle leaves the line, and one that gave up runs once more on its
         * own: hl_unsettled_background) is a known finding any more */
        return 0;
    }
    if (!s->restarted) {
        r = srv_cmd(l, "GET %s", s->names[2]);
        long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
        freeReplyObject(r);
        if (v > SEM_PERMITS || v < SEM_PERMITS - s->sem_unknown) {
            snprintf(detail, len, "semaphore has %lld free permits, not %d (%d calls unknown)",
                     v, SEM_PERMITS, s->sem_unknown);
            return 0;
        }
    }
    r = srv_cmd(l, "PUBSUB CHANNELS *sim%" PRIu64 ":*", s->seed);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        snprintf(detail, len, "PUBSUB CHANNELS did not answer");
        freeReplyObject(r);
        return 0;
    }
    if (r->elements) {
        snprintf(detail, len, "%zu channels still subscribed, e.g. %s", r->elements,
                 r->element[0]->type == REDIS_REPLY_STRING ? r->element[0]->str : "?");
        freeReplyObject(r); /* no known finding since hilock_async's sockets are close-on-exec */
        return 0;
    }
    freeReplyObject(r);
    return 1;
}

static int seeds_passed, seeds_failed;

static void seed_finish(seedrun *s)
{
    lane *l = s->lane;
    for (int i = 0; i < NCL; i++) {
        simclient *c = &s->cl[i];
        hilock_async_free(c->a);
        c->a = NULL;
        hilock_lock_free(c->lk[0]);
        hilock_lock_free(c->lk[1]);
        hilock_semaphore_free(c->sem);
    }
    for (int i = 0; i < s->ncalls; i++) {
        if (s->calls[i]->done != 1 && !s->calls[i]->overdue)
            violation(s, "c%d: %c call completed %d times", s->calls[i]->client,
                      s->calls[i]->kind, s->calls[i]->done);
        free(s->calls[i]);
    }
    while (l->conns)
        pconn_close(l->conns, 0);
    for (int k = 0; k < K_N; k++)
        if (s->known & (1u << k)) {
            if (!known_seeds[k]++)
                known_first[k] = s->seed;
        }
    if (s->violations || (strict && s->known)) {
        seeds_failed++;
        total_violations += s->violations;
        fprintf(stdout, "%s", s->log.p);
        fprintf(stdout, "replay: %s --seed %" PRIu64 "%s -v\n", self_path, s->seed, flags_text);
    } else {
        seeds_passed++;
        if (s->known && !verbose)
            fprintf(stdout, "  replay: %s --seed %" PRIu64 "%s -v\n", self_path, s->seed,
                    flags_text);
        if (verbose)
            fprintf(stdout, "%sseed %" PRIu64 ": ok (%" PRId64 " ms)\n", s->log.p, s->seed,
                    now_ms() - s->t0);
    }
    fflush(stdout);
    free(s->log.p);
    free(s);
    l->run = NULL;
}

/* Advance lane l's seed; returns the time it next wants to run (or -1). */
static int64_t seed_step(seedrun *s, int64_t now)
{
    lane *l = s->lane;
    int64_t t = now - s->t0;
    int64_t next = -1;
#define WANT(x)                               \
    do {                                      \
        int64_t w_ = (x);                     \
        if (w_ >= 0 && (next < 0 || w_ < next)) \
            next = w_;                        \
    } while (0)
    while (!s->healed && s->nextfault < s->sch.nfaults && s->sch.faults[s->nextfault].at <= t)
        apply_fault(s, &s->sch.faults[s->nextfault++], now);
    if (!s->healed && s->nextfault < s->sch.nfaults)
        WANT(s->t0 + s->sch.faults[s->nextfault].at);
    for (pconn *c = l->conns, *nx; c; c = nx) {
        nx = c->next;
        if (c->dropped && !dropping(c, 0, now) && !dropping(c, 1, now)) {
            seed_note(s, "proxy: conn %d reset: the silence that lost its bytes is over",
                      c->ordinal);
            pconn_close(c, 1);
        }
    }
    if (l->paused && now >= l->pause_end) {
        srv_pause(l, 0);
        seed_note(s, "server resumed");
    }
    if (l->paused)
        WANT(l->pause_end);
    if (!s->healed && t >= s->heal_at)
        heal(s);
    if (!s->healed)
        WANT(s->t0 + s->heal_at);
    if (s->phase == 0) {
        int busy = 0;
        for (int i = 0; i < NCL; i++) {
            simclient *c = &s->cl[i];
            client_step(c, now);
            if (c->state != ST_DONE)
                busy = 1;
            if (c->pending && !c->pending->done &&
                now - (lag_ms - c->pending->lag0) > c->pending->start + c->pending->bound) {
                violation(s, "c%d: a %c call has not completed after %" PRId64 " ms", c->idx,
                          c->pending->kind, now - c->pending->start);
                c->pending->overdue = 1; /* reported once; its callback may still come */
                c->pending = NULL;
                c->state = ST_DONE;
            }
            if (c->state == ST_GAP && c->opi < s->sch.nops[c->idx])
                WANT(c->next_at + s->sch.ops[c->idx][c->opi].gap);
            else if (c->state == ST_HOLD)
                WANT(c->next_at);
            else if (c->state == ST_ACQ && c->cancel_at >= 0)
                WANT(c->cancel_at);
            if (c->pending)
                WANT(c->pending->start + c->pending->bound + 1);
        }
        if (t - (lag_ms - s->lag0) > SEED_LIMIT) {
            violation(s, "the seed did not end within %d ms", SEED_LIMIT);
            busy = 0;
        }
        if (!busy && s->healed) {
            s->phase = 1;
            s->check_until = now + END_CHECK_MS;
            s->check_lag0 = lag_ms;
            s->next_check = now;
            seed_note(s, "every call done; checking the server");
            for (int i = 0; i < NCL; i++)
                for (int r = 0; r < NRES; r++)
                    if (s->cl[i].held[r] > 0)
                        violation(s, "c%d still believes it holds %s after its last call", i,
                                  res_name(r));
        }
    }
    if (s->phase == 1) {
        if (now >= s->next_check) {
            char detail[256];
            int known = -1;
            if (server_clean(s, detail, sizeof detail, &known)) {
                seed_note(s, "server clean");
                s->phase = 2;
            } else if (now - (lag_ms - s->check_lag0) >= s->check_until) {
                violation_known(s, known, "%" PRId64 " ms after the last call: %s",
                                now - (s->check_until - END_CHECK_MS), detail);
                s->phase = 2;
            } else {
                s->next_check = now + 50;
            }
        }
        if (s->phase == 1)
            WANT(s->next_check);
    }
    if (s->phase == 2) {
        seed_finish(s);
        return 0;
    }
#undef WANT
    return next;
}

/* ---------------------------------------------------------------- */
/* Setup: servers, proxies and the clients (opened through the proxies,
 * which need the loop running: the opens run on a helper thread while
 * the main thread pumps the proxies).                                */

static lane *lanes;
static int nlanes;
static volatile int opens_done;

static void *open_clients(void *arg)
{
    (void)arg;
    for (int i = 0; i < nlanes; i++)
        for (int k = 0; k < NCL; k++) {
            hilock_options o = HILOCK_OPTIONS_INIT;
            o.watchdog_lease_ms = WATCHDOG_LEASE;
            o.command_timeout_ms = CMD_TIMEOUT;
            o.connect_timeout_ms = CONNECT_TIMEOUT;
            o.fair_wait_window_ms = FAIR_WINDOW;
            o.pool_size = 1;
            char err[256] = "";
            int rc = -1;
            for (int attempt = 0; attempt < 5 && rc != 0; attempt++)
                rc = hilock_client_open(&lanes[i].cl[k], lanes[i].lsn[k].url, &o, err,
                                        sizeof err);
            if (rc) {
                fprintf(stderr, "lane %d: open %s: %s (%s)\n", i, lanes[i].lsn[k].url,
                        hilock_strerror(rc), err);
                lanes[i].cl[k] = NULL;
            }
        }
    __atomic_store_n(&opens_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void dispatch(struct epoll_event *evs, int n, int64_t now)
{
    for (int i = 0; i < n; i++) {
        int fd = evs[i].data.fd;
        fdrec *r = &fdtab[fd];
        uint32_t ev = evs[i].events;
        switch (r->type) {
        case FD_ASYNC: {
            simclient *c = r->p;
            int e = ((ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) ? HILOCK_IO_READ : 0) |
                    ((ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) ? HILOCK_IO_WRITE : 0);
            if (c->a)
                hilock_async_on_io(c->a, fd, e);
            break;
        }
        case FD_LISTEN:
            lane_accept(r->p, now);
            break;
        case FD_PCLIENT:
        case FD_PSERVER:
            pconn_on_event(r->p, fd, ev, now);
            break;
        default:
            break;
        }
    }
}

/* The earliest time anything in the loop wants (proxy chunks, async timers). */
static int64_t loop_next(int64_t next)
{
    for (int i = 0; i < nlanes; i++) {
        lane *l = &lanes[i];
        for (pconn *c = l->conns; c; c = c->next)
            for (int d = 0; d < 2; d++)
                if (c->q[d] && !c->blocked[d] && (next < 0 || c->q[d]->at < next))
                    next = c->q[d]->at;
        if (l->run)
            for (int k = 0; k < NCL; k++) {
                int64_t t = l->run->cl[k].timer_at;
                if (t >= 0 && (next < 0 || t < next))
                    next = t;
            }
    }
    return next;
}

static void loop_once(int64_t want)
{
    int64_t now = now_ms();
    want = loop_next(want);
    int timeout = want < 0 ? 100 : want <= now ? 0 : (int)(want - now);
    if (timeout > 100)
        timeout = 100;
    struct epoll_event evs[256];
    int64_t t_wait = now;
    int n = epoll_wait(epfd, evs, 256, timeout);
    now = now_ms();
    if (now - t_wait > timeout + 20)
        lag_ms += now - t_wait - timeout;
    if (now - t_wait > timeout + (verbose ? 50 : 200))
        fprintf(stderr, "sim: epoll_wait(%d ms) returned after %" PRId64 " ms\n", timeout,
                now - t_wait);
    if (n > 0)
        dispatch(evs, n, now);
    /* not counted as lag: the time in the library's callbacks is its own */
    if (now_ms() - now > (verbose ? 50 : 200))
        fprintf(stderr, "sim: the loop stalled %" PRId64 " ms in dispatch\n", now_ms() - now);
    now = now_ms();
    /* timers and due proxy chunks */
    for (int i = 0; i < nlanes; i++) {
        lane *l = &lanes[i];
        for (pconn *c = l->conns, *nx; c; c = nx) {
            nx = c->next;
            int gone = 0;
            for (int d = 0; d < 2 && !gone; d++)
                if (c->q[d] && c->q[d]->at <= now && !c->blocked[d])
                    gone = pconn_pump(c, d, now) < 0;
            if (!gone)
                pconn_update(c);
        }
        if (l->run)
            for (int k = 0; k < NCL; k++) {
                simclient *c = &l->run->cl[k];
                if (c->timer_at >= 0 && c->timer_at <= now && c->a) {
                    c->timer_at = -1;
                    hilock_async_on_timer(c->a);
                }
            }
    }
}

/* "a,b,c" of names[1..n) (or "none") into a bit mask; -1 on an unknown name. */
static int parse_names(const char *arg, const char *const *names, int n, unsigned *mask)
{
    *mask = 0;
    if (!strcmp(arg, "none"))
        return 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int k = 0; k < n; k++)
            if (names[k][0] && !strcmp(tok, names[k]))
                found = k;
        if (found < 0) {
            fprintf(stderr, "sim: unknown name '%s'\n", tok);
            return -1;
        }
        *mask |= 1u << found;
    }
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: sim [--seeds N] [--first S] [--seed S] [--also S,S] [--lanes L]\n"
                    "           [--faults a,b|none]\n"
                    "           [--kinds lock,fair,sem] [--all] [--strict] [--self-test] [-v]\n");
}

int main(int argc, char **argv)
{
    uint64_t nseeds = 1000, first = 0;
    int have_first = 0, explicit_masks = 0, all = 0;
    /* --also S,S,...: seeds run before the range (found once, fixed since:
     * tests/sim/regress.txt) */
    uint64_t also[64];
    size_t nalso = 0;
    nlanes = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc)
            nseeds = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--first") && i + 1 < argc) {
            first = strtoull(argv[++i], NULL, 10);
            have_first = 1;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            first = strtoull(argv[++i], NULL, 10);
            have_first = 1;
            nseeds = 1;
        } else if (!strcmp(argv[i], "--also") && i + 1 < argc) {
            for (char *p = argv[++i]; *p;) {
                char *end = NULL;
                unsigned long long v = strtoull(p, &end, 10);
                if (end == p || nalso >= sizeof also / sizeof also[0]) {
                    usage();
                    return 2;
                }
                also[nalso++] = v;
                p = *end == ',' ? end + 1 : end;
            }
        } else if (!strcmp(argv[i], "--lanes") && i + 1 < argc)
            nlanes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--faults") && i + 1 < argc) {
            if (parse_names(argv[++i], fault_names, F_NKINDS, &fault_mask) != 0)
                return 2;
            explicit_masks = 1;
        } else if (!strcmp(argv[i], "--kinds") && i + 1 < argc) {
            static const char *kinds[] = {"lock", "fair", "sem"};
            unsigned m = 0;
            if (parse_names(argv[++i], kinds, 3, &m) != 0)
                return 2;
            res_mask = m;
            explicit_masks = 1;
        } else if (!strcmp(argv[i], "--all")) {
            fault_mask = ~0u;
            res_mask = 7;
            explicit_masks = 1;
            all = 1;
        } else if (!strcmp(argv[i], "--strict"))
            strict = 1;
        else if (!strcmp(argv[i], "--self-test"))
            self_test = 1;
        else if (!strcmp(argv[i], "-v"))
            verbose = 1;
        else {
            usage();
            return 2;
        }
    }
    if (!explicit_masks) {
        fault_mask = DEFAULT_FAULTS;
        res_mask = DEFAULT_KINDS;
    }
    if (explicit_masks) { /* the replay command names what this run drew from */
        size_t o = 0;
        if (all) {
            o += (size_t)snprintf(flags_text + o, sizeof flags_text - o, " --all");
        } else {
            o += (size_t)snprintf(flags_text + o, sizeof flags_text - o, " --faults ");
            int first_name = 1;
            for (int k = 1; k < F_NKINDS; k++)
                if (fault_mask & (1u << k)) {
                    o += (size_t)snprintf(flags_text + o, sizeof flags_text - o, "%s%s",
                                          first_name ? "" : ",", fault_names[k]);
                    first_name = 0;
                }
            if (first_name)
                o += (size_t)snprintf(flags_text + o, sizeof flags_text - o, "none");
            o += (size_t)snprintf(flags_text + o, sizeof flags_text - o, " --kinds ");
            first_name = 1;
            for (int r = 0; r < NRES; r++)
                if (res_mask & (1u << r)) {
                    o += (size_t)snprintf(flags_text + o, sizeof flags_text - o, "%s%s",
                                          first_name ? "" : ",", res_name(r));
                    first_name = 0;
                }
        }
    }
    if (getenv("HILOCK_SIM_SELF"))
        self_path = getenv("HILOCK_SIM_SELF");
    if (!have_first) {
        /* a new range each run (printed): a failing seed replays by its number */
        uint64_t x = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
        first = splitmix64(&x) % 1000000000ULL;
    }
    if (nlanes < 1)
        nlanes = 1;
    if (nlanes > MAXLANES)
        nlanes = MAXLANES;
    if ((uint64_t)nlanes > nseeds + nalso)
        nlanes = (int)(nseeds + nalso);
    signal(SIGPIPE, SIG_IGN);
    fdtab = calloc(MAXFD, sizeof *fdtab);
    lanes = calloc((size_t)nlanes, sizeof *lanes);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!fdtab || !lanes || epfd < 0)
        return 1;
    int64_t t_start = now_ms();
    for (int i = 0; i < nlanes; i++) {
        lanes[i].idx = i;
        int bad = th_redis_start(&lanes[i].srv, NULL) != 0;
        for (int k = 0; k < NCL && !bad; k++) {
            lanes[i].lsn[k].lane = &lanes[i];
            lanes[i].lsn[k].client = k;
            bad = lane_listen(&lanes[i].lsn[k]) != 0;
        }
        if (bad) {
            fprintf(stderr, "lane %d: cannot start its server or proxy\n", i);
            return 1;
        }
    }
    pthread_t th;
    if (pthread_create(&th, NULL, open_clients, NULL) != 0)
        return 1;
    while (!__atomic_load_n(&opens_done, __ATOMIC_ACQUIRE))
        loop_once(now_ms() + 5);
    pthread_join(th, NULL);
    for (int i = 0; i < nlanes; i++)
        for (int k = 0; k < NCL; k++)
            if (!lanes[i].cl[k])
                return 1;
    if (nalso)
        printf("sim: also %zu seeds found before (tests/sim/regress.txt)\n", nalso);
    printf("sim: seeds %" PRIu64 "..%" PRIu64 " (%" PRIu64 "), %d at a time; setup %" PRId64
           " ms\n",
           first, first + nseeds - 1, nseeds, nlanes, now_ms() - t_start);
    fflush(stdout);

    uint64_t next_seed = first, end_seed = first + nseeds;
    size_t next_also = 0;
    int reported = 0;
    int64_t t_run = now_ms();
    for (;;) {
        int64_t now = now_ms();
        int64_t want = -1;
        int running = 0;
        for (int i = 0; i < nlanes; i++) {
            lane *l = &lanes[i];
            if (!l->run && (next_also < nalso || next_seed < end_seed)) {
                while (l->conns) /* the previous seed's leftovers (its clients' pools) */
                    pconn_close(l->conns, 0);
                seed_start(l, next_also < nalso ? also[next_also++] : next_seed++);
            }
            if (l->run) {
                int64_t t_step = now_ms();
                uint64_t sd = l->run->seed;
                int64_t w = seed_step(l->run, now);
                if (now_ms() - t_step > 20)
                    lag_ms += now_ms() - t_step;
                if (now_ms() - t_step > (verbose ? 50 : 200))
                    fprintf(stderr, "sim: the loop stalled %" PRId64 " ms in seed %" PRIu64
                                    "'s step\n", now_ms() - t_step, sd);
                if (w >= 0 && (want < 0 || w < want))
                    want = w;
                if (l->run)
                    running = 1;
                else if (next_also < nalso || next_seed < end_seed)
                    want = now;
            }
        }
        if (!running && next_seed >= end_seed && next_also >= nalso)
            break;
        int done = seeds_passed + seeds_failed;
        if (done >= reported + 10000) { /* progress of a long run */
            reported = done - done % 10000;
            printf("sim: %d seeds done, %d failed, %" PRId64 " s\n", done, seeds_failed,
                   (now_ms() - t_run) / 1000);
            fflush(stdout);
        }
        loop_once(want);
    }
    int64_t el = now_ms() - t_run;
    for (int k = 0; k < K_N; k++)
        if (known_seeds[k])
            printf("sim: known finding %s in %d seeds (first: %" PRIu64 ")%s: %s\n",
                   known_names[k], known_seeds[k], known_first[k],
                   strict ? "" : ", not failing the run (--strict)", known_why[k]);
    printf("sim: the loop lost %" PRId64 " ms to the machine (bounds are counted without it)\n",
           lag_ms);
    printf("sim: %d seeds passed, %d failed, %d violations, %" PRId64 " ms (%.1f seeds/s)\n",
           seeds_passed, seeds_failed, total_violations, el,
           el > 0 ? 1000.0 * (seeds_passed + seeds_failed) / (double)el : 0.0);
    for (int i = 0; i < nlanes; i++) {
        for (int k = 0; k < NCL; k++)
            hilock_client_close(lanes[i].cl[k]);
        while (lanes[i].conns)
            pconn_close(lanes[i].conns, 0);
        for (int k = 0; k < NCL; k++) {
            fd_set_events(lanes[i].lsn[k].fd, 0, NULL, 0);
            close(lanes[i].lsn[k].fd);
        }
        srv_pause(&lanes[i], 0);
        redisFree(lanes[i].ctl);
        th_redis_stop(&lanes[i].srv);
    }
    free(lanes);
    free(fdtab);
    close(epfd);
    return seeds_failed ? 1 : 0;
}
