/*
 * What the test programs of the non-blocking API (hilock_async) share: a
 * completion record, one epoll adapter per program, running the loop until
 * an awaited event with a bound, and counting a channel's subscribers.
 * What the lost callbacks saw (seen, on_lost, on_ml_lost) and a client with
 * a watchdog lease and I/O timeouts of the test's (open_lease_client).
 * Header-only (static functions): include it once per program. numsub
 * asks the harness's server, th_srv (th_srv_init / th_srv_client_init).
 */
#ifndef HILOCK_TEST_ASYNC_HELPERS_H
#define HILOCK_TEST_ASYNC_HELPERS_H

#include <CUnit/Basic.h>
#include <stdio.h>

#include "harness.h"
#include "hilock.h"
#include "hilock/adapters/epoll.h"

typedef struct res {
    int n;        /* completions seen */
    int rc;
    int64_t value;
    int64_t at;   /* th_now_ms() of the completion */
    char err[256];
} res;

static inline void on_done(hilock_async *a, int rc, int64_t value, void *payload)
{
    res *r = payload;
    r->n++;
    r->rc = rc;
    r->value = value;
    r->at = th_now_ms();
    snprintf(r->err, sizeof r->err, "%s", hilock_async_errmsg(a));
}

static hilock_epoll ep;

static inline hilock_async *new_async(void)
{
    CU_ASSERT_FATAL(hilock_epoll_init(&ep) == 0);
    hilock_async_loop loop = hilock_epoll_loop(&ep);
    hilock_async *a = NULL;
    CU_ASSERT_FATAL(hilock_async_new(&a, &loop) == 0);
    return a;
}

static inline void free_async(hilock_async *a)
{
    hilock_async_free(a);
    hilock_epoll_close(&ep);
}

/* Run the loop until *n reaches want or ms pass; 1 when it has. */
static inline int run_until_n(hilock_async *a, const int *n, int want, int64_t ms)
{
    int64_t end = th_now_ms() + ms;
    while (*n < want) {
        int64_t left = end - th_now_ms();
        if (left <= 0)
            return 0;
        hilock_epoll_run_once(&ep, a, (int)(left > 50 ? 50 : left));
    }
    return 1;
}

/* Run the loop until r has n completions or ms pass; 1 when it has. */
static inline int run_until(hilock_async *a, res *r, int n, int64_t ms)
{
    return run_until_n(a, &r->n, n, ms);
}

/* Run the loop for ms (completions may arrive meanwhile). */
static inline void run_for(hilock_async *a, int64_t ms)
{
    int64_t end = th_now_ms() + ms;
    while (th_now_ms() < end)
        hilock_epoll_run_once(&ep, a, (int)(end - th_now_ms()));
}

/* What the lost callbacks (on_lost, on_ml_lost, the payload) saw: how many
 * reports, the last one's lock or multi-lock and owner, the first one's
 * time and message. */
typedef struct seen {
    int n;
    hilock_lock *lock;
    hilock_multilock *m;
    uint64_t tid;
    int64_t at; /* th_now_ms() of the first report */
    char msg[512];
} seen;

static inline void seen_report(hilock_async *a, seen *s, uint64_t tid)
{
    s->tid = tid;
    if (s->n++ == 0) {
        s->at = th_now_ms();
        snprintf(s->msg, sizeof s->msg, "%s", hilock_async_errmsg(a));
    }
}

static inline void on_lost(hilock_async *a, hilock_lock *lock, uint64_t tid, void *payload)
{
    seen *s = payload;
    s->lock = lock;
    seen_report(a, s, tid);
}

static inline void on_ml_lost(hilock_async *a, hilock_multilock *m, uint64_t tid, void *payload)
{
    seen *s = payload;
    s->m = m;
    seen_report(a, s, tid);
}

/* A client of url with a watchdog lease of lease_ms and command and connect
 * timeouts of io_timeout_ms (0: the defaults); NULL, said why, when it
 * cannot be opened. */
static inline hilock_client *open_lease_client(const char *url, int64_t lease_ms,
                                               int64_t io_timeout_ms)
{
    hilock_options o = HILOCK_OPTIONS_INIT;
    o.watchdog_lease_ms = lease_ms;
    o.command_timeout_ms = io_timeout_ms;
    o.connect_timeout_ms = io_timeout_ms;
    return th_client_open_opts(url, &o);
}

static inline long long numsub(const char *channel)
{
    return th_redis_numsub(&th_srv, channel);
}

/* Run the loop until the channel has want subscribers (bounded). */
static inline int run_until_numsub(hilock_async *a, const char *channel, long long want)
{
    int64_t end = th_now_ms() + 5000;
    while (th_now_ms() < end) {
        if (numsub(channel) == want)
            return 1;
        hilock_epoll_run_once(&ep, a, 5);
    }
    return 0;
}

#endif
