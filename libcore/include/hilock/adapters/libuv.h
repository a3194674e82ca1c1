/*
 * hilock_async on libuv: a header-only adapter (public hilock API and
 * libuv only; compile with libuv's headers, link -luv).
 *
 *   hilock_uv u;
 *   hilock_uv_init(&u, uv_default_loop());
 *   hilock_async_loop loop = hilock_uv_loop(&u);
 *   hilock_async_new(&u.async, &loop);
 *   ... start operations; uv_run(...) ...
 *   hilock_async_free(u.async);
 *   hilock_uv_close(&u);   // closes the timer; run the loop once more to finish
 *
 * One uv_poll_t per descriptor hilock uses and one uv_timer_t; all run on
 * the loop's thread, which is the thread that must use the hilock_async.
 */
#ifndef HILOCK_ADAPTERS_LIBUV_H
#define HILOCK_ADAPTERS_LIBUV_H

#include <stdint.h>
#include <stdlib.h>
#include <uv.h>

#include <hilock.h>

typedef struct hilock_uv_fd {
    uv_poll_t poll; /* first: the handle is the record */
    struct hilock_uv_fd *next;
    struct hilock_uv *owner;
    int fd;
} hilock_uv_fd;

typedef struct hilock_uv {
    uv_loop_t *loop;
    uv_timer_t timer;
    hilock_async *async; /* set after hilock_async_new */
    hilock_uv_fd *fds;
} hilock_uv;

static inline void hilock_uv_timer_cb_(uv_timer_t *t)
{
    hilock_uv *u = (hilock_uv *)t->data;
    hilock_async_on_timer(u->async);
}

static inline int hilock_uv_init(hilock_uv *u, uv_loop_t *loop)
{
    u->loop = loop;
    u->async = NULL;
    u->fds = NULL;
    u->timer.data = u;
    return uv_timer_init(loop, &u->timer);
}

static inline void hilock_uv_poll_cb_(uv_poll_t *p, int status, int events)
{
    hilock_uv_fd *f = (hilock_uv_fd *)p;
    int e = 0;
    if (status < 0)
        e = HILOCK_IO_READ | HILOCK_IO_WRITE;
    if (events & UV_READABLE)
        e |= HILOCK_IO_READ;
    if (events & UV_WRITABLE)
        e |= HILOCK_IO_WRITE;
    hilock_async_on_io(f->owner->async, f->fd, e);
}

static inline void hilock_uv_free_cb_(uv_handle_t *h)
{
    free(h);
}

static inline int hilock_uv_watch_(void *data, int fd, int events)
{
    hilock_uv *u = (hilock_uv *)data;
    hilock_uv_fd **pp = &u->fds, *f;
    while (*pp && (*pp)->fd != fd)
        pp = &(*pp)->next;
    f = *pp;
    if (events == 0) {
        if (f) {
            *pp = f->next;
            uv_poll_stop(&f->poll);
            uv_close((uv_handle_t *)&f->poll, hilock_uv_free_cb_);
        }
        return 0;
    }
    if (!f) {
        f = (hilock_uv_fd *)calloc(1, sizeof *f);
        if (!f)
            return -1;
        if (uv_poll_init(u->loop, &f->poll, fd) != 0) {
            free(f);
            return -1;
        }
        f->owner = u;
        f->fd = fd;
        f->next = u->fds;
        u->fds = f;
    }
    int uvev = ((events & HILOCK_IO_READ) ? UV_READABLE : 0) |
               ((events & HILOCK_IO_WRITE) ? UV_WRITABLE : 0);
    return uv_poll_start(&f->poll, uvev, hilock_uv_poll_cb_) == 0 ? 0 : -1;
}

static inline int hilock_uv_timer_(void *data, int64_t ms)
{
    hilock_uv *u = (hilock_uv *)data;
    if (ms < 0)
        return uv_timer_stop(&u->timer) == 0 ? 0 : -1;
    return uv_timer_start(&u->timer, hilock_uv_timer_cb_, (uint64_t)ms, 0) == 0 ? 0 : -1;
}

static inline hilock_async_loop hilock_uv_loop(hilock_uv *u)
{
    hilock_async_loop l;
    l.version = HILOCK_ASYNC_LOOP_VERSION;
    l.data = u;
    l.watch = hilock_uv_watch_;
    l.timer = hilock_uv_timer_;
    return l;
}

/* After hilock_async_free: close the timer (and any poll handle left). The
 * handles finish closing on the loop's next run. */
static inline void hilock_uv_close(hilock_uv *u)
{
    while (u->fds) {
        hilock_uv_fd *f = u->fds;
        u->fds = f->next;
        uv_poll_stop(&f->poll);
        uv_close((uv_handle_t *)&f->poll, hilock_uv_free_cb_);
    }
    uv_close((uv_handle_t *)&u->timer, NULL);
}

#endif
