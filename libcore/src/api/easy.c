/*
 * The blocking API's driver over hilock_async (libcurl's easy-over-multi):
 * a blocking call takes one of its client's private hilock_async instances
 * (an "easy"), starts the non-blocking operation on it and drives it from
 * its own poll() loop on the calling thread until the completion callback
 * has run. Request deadlines, redirects, NOSCRIPT and settles are the ones
 * hilock_async runs for the application's event loop: one copy. (No wait
 * runs here yet: docs/architecture.md, "One C transport".)
 *
 * An easy is used by one thread at a time (it is taken from the client's
 * idle list and put back), so no hilock_async is shared between threads.
 * At most pool_size exist per client; a call waits for one as hl_pool_get
 * waits for a connection. Its connections (one for commands per server
 * used; the operations run here do not subscribe) stay open while it is
 * idle, for the next call, and close with the client.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"

struct hl_easy {
    struct hl_easy *next; /* the client's idle list */
    hilock_async *a;
    struct pollfd *fds; /* the descriptors the hilock_async asked to watch */
    size_t nfds, cap;
    struct {
        int fd, events;
    } *ready; /* one pass's ready descriptors (cap entries) */
    int64_t timer_at; /* monotonic ms the hilock_async wants on_timer; -1 none */
    /* the call in progress */
    int done, rc;
    int64_t value;
    char err[HL_ERRMSG_MAX];
};

static int easy_grow(hl_easy *e)
{
    size_t cap = e->cap ? e->cap * 2 : 8;
    struct pollfd *f = realloc(e->fds, cap * sizeof *f);
    if (!f)
        return -1;
    e->fds = f;
    void *r = realloc(e->ready, cap * sizeof *e->ready);
    if (!r)
        return -1;
    e->ready = r;
    e->cap = cap;
    return 0;
}

/* hilock_async_loop.watch */
static int easy_watch(void *data, int fd, int events)
{
    hl_easy *e = data;
    size_t i = 0;
    while (i < e->nfds && e->fds[i].fd != fd)
        i++;
    if (!events) {
        if (i < e->nfds)
            e->fds[i] = e->fds[--e->nfds];
        return 0;
    }
    if (i == e->nfds) {
        if (e->nfds == e->cap && easy_grow(e) != 0)
            return -1;
        e->fds[i].fd = fd;
        e->nfds++;
    }
    e->fds[i].events = (short)(((events & HILOCK_IO_READ) ? POLLIN : 0) |
                               ((events & HILOCK_IO_WRITE) ? POLLOUT : 0));
    e->fds[i].revents = 0;
    return 0;
}

/* hilock_async_loop.timer */
static int easy_timer(void *data, int64_t ms)
{
    hl_easy *e = data;
    e->timer_at = ms < 0 ? -1 : hl_now_mono_ms() + ms;
    return 0;
}

static void easy_free(hl_easy *e)
{
    if (!e)
        return;
    hilock_async_free(e->a); /* closes its connections; nothing is pending */
    free(e->fds);
    free(e->ready);
    free(e);
}

static hl_easy *easy_new(int *rc)
{
    hl_easy *e = calloc(1, sizeof *e);
    if (!e || easy_grow(e) != 0) {
        if (e) {
            free(e->fds);
            free(e);
        }
        *rc = HILOCK_ENOMEM;
        return NULL;
    }
    e->timer_at = -1;
    hilock_async_loop loop = {HILOCK_ASYNC_LOOP_VERSION, e, easy_watch, easy_timer};
    if ((*rc = hilock_async_new(&e->a, &loop)) != 0) {
        easy_free(e);
        return NULL;
    }
    return e;
}

/* One turn of the loop: poll up to timeout ms (-1: no limit), then hand the
 * ready descriptors and a due timer to the hilock_async. */
static void easy_turn(hl_easy *e, int64_t timeout)
{
    int to = timeout < 0 ? -1 : timeout > 1000000 ? 1000000 : (int)timeout;
    int n = poll(e->fds, (nfds_t)e->nfds, to);
    if (n < 0 && errno != EINTR)
        n = 0; /* ENOMEM: the timer below still runs */
    size_t k = 0;
    if (n > 0) {
        /* collected first: on_io changes fds through easy_watch */
        for (size_t i = 0; i < e->nfds; i++) {
            short r = e->fds[i].revents;
            if (!r)
                continue;
            if (r & POLLNVAL) { /* closed without a watch(0): never ask again */
                e->fds[i--] = e->fds[--e->nfds];
                continue;
            }
            int ev = 0;
            if (r & (POLLIN | POLLERR | POLLHUP))
                ev |= HILOCK_IO_READ;
            if (r & (POLLOUT | POLLERR | POLLHUP))
                ev |= HILOCK_IO_WRITE;
            e->ready[k].fd = e->fds[i].fd;
            e->ready[k++].events = ev;
        }
    }
    for (size_t i = 0; i < k; i++)
        hilock_async_on_io(e->a, e->ready[i].fd, e->ready[i].events);
    if (e->timer_at >= 0 && hl_now_mono_ms() >= e->timer_at) {
        e->timer_at = -1;
        hilock_async_on_timer(e->a);
    }
}

static void easy_done(hilock_async *a, int rc, int64_t value, void *payload)
{
    hl_easy *e = payload;
    e->done = 1;
    e->rc = rc;
    e->value = rc ? 0 : value;
    snprintf(e->err, sizeof e->err, "%s", rc ? hilock_async_errmsg(a) : "");
}

static int easy_max(const hilock_client *c)
{
    return c->t.opts.pool_size > 0 ? c->t.opts.pool_size : 8;
}

/* An idle easy, or a new one while fewer than pool_size exist, or one put
 * back within the pool's wait (command + connect timeout); NULL: *rc set. */
static hl_easy *easy_get(hilock_client *c, int *rc, char *err)
{
    pthread_mutex_lock(&c->easy_mu);
    int64_t end = hl_now_mono_ms() + c->t.opts.command_timeout_ms + c->t.opts.connect_timeout_ms;
    while (!c->easy_idle && c->easy_count >= easy_max(c)) {
        struct timespec ts;
        hl_abs_timespec(&ts, end - hl_now_mono_ms());
        if (pthread_cond_timedwait(&c->easy_cv, &c->easy_mu, &ts) == ETIMEDOUT &&
            !c->easy_idle && c->easy_count >= easy_max(c)) {
            pthread_mutex_unlock(&c->easy_mu);
            *rc = HILOCK_ECONN;
            hl_set_err(err, "no free connection for the call (%d in use)", easy_max(c));
            return NULL;
        }
    }
    hl_easy *e = c->easy_idle;
    if (e)
        c->easy_idle = e->next;
    else
        c->easy_count++; /* made below */
    pthread_mutex_unlock(&c->easy_mu);
    if (!e) {
        e = easy_new(rc);
        if (!e) {
            pthread_mutex_lock(&c->easy_mu);
            c->easy_count--;
            pthread_cond_signal(&c->easy_cv);
            pthread_mutex_unlock(&c->easy_mu);
            hl_set_err(err, "%s", "out of memory");
        }
        return e;
    }
    e->next = NULL;
    /* what happened while it was idle (a connection the server closed, a
     * late reply) is read before the new request goes out */
    easy_turn(e, 0);
    return e;
}

static void easy_put(hilock_client *c, hl_easy *e)
{
    int keep = 0;
    pthread_mutex_lock(&c->easy_mu);
    if (!__atomic_load_n(&c->t.closed, __ATOMIC_ACQUIRE)) {
        e->next = c->easy_idle;
        c->easy_idle = e;
        keep = 1;
    } else {
        c->easy_count--;
    }
    pthread_cond_signal(&c->easy_cv);
    pthread_mutex_unlock(&c->easy_mu);
    if (!keep)
        easy_free(e);
}

void hl_easy_close_all(hilock_client *c, int forked)
{
    if (!forked)
        pthread_mutex_lock(&c->easy_mu);
    hl_easy *e = c->easy_idle;
    c->easy_idle = NULL;
    for (hl_easy *x = e; x; x = x->next)
        c->easy_count--;
    if (!forked)
        pthread_mutex_unlock(&c->easy_mu);
    while (e) {
        hl_easy *next = e->next;
        easy_free(e); /* in a child after fork(): closes its descriptors only */
        e = next;
    }
}

int hl_easy_run(hilock_client *c, hl_easy_start start, void *arg, int64_t *value, char *err)
{
    int rc = 0;
    hl_easy *e = easy_get(c, &rc, err);
    if (!e)
        return rc;
    e->done = 0;
    e->rc = 0;
    e->value = 0;
    e->err[0] = 0;
    rc = start(e->a, arg, easy_done, e);
    if (rc) { /* refused at once: no callback */
        hl_set_err(err, "%s", hilock_async_errmsg(e->a));
    } else {
        while (!e->done) {
            int64_t left = -1;
            if (e->timer_at >= 0) {
                left = e->timer_at - hl_now_mono_ms();
                if (left < 0)
                    left = 0;
            }
            easy_turn(e, left);
        }
        rc = e->rc;
        hl_set_err(err, "%s", e->err);
        if (value)
            *value = e->value;
    }
    easy_put(c, e);
    return rc;
}
