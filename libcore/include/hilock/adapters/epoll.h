/*
 * hilock_async on Linux epoll: a header-only adapter (public hilock API
 * only). It keeps hilock's descriptors in an epoll instance of its own and
 * the one timer hilock asks for:
 *
 *   hilock_epoll ep;
 *   hilock_epoll_init(&ep);                       // -1 with errno on failure
 *   hilock_async_loop loop = hilock_epoll_loop(&ep);
 *   hilock_async_new(&a, &loop);
 *   ... start operations ...
 *   while (busy) hilock_epoll_run_once(&ep, a, 1000); // waits at most 1000 ms
 *   hilock_async_free(a);
 *   hilock_epoll_close(&ep);
 *
 * Needs POSIX declarations (in strict C modes: -D_POSIX_C_SOURCE=200809L).
 * A program with an epoll loop of its own adds ep.epfd to it (an epoll
 * descriptor is itself pollable: readable when one of hilock's is ready),
 * waits at most hilock_epoll_timeout(&ep) ms, and calls
 * hilock_epoll_run_once(&ep, a, 0) when ep.epfd is readable or the timeout
 * passed. Same for poll(2)/select(2) loops.
 */
#ifndef HILOCK_ADAPTERS_EPOLL_H
#define HILOCK_ADAPTERS_EPOLL_H

#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <hilock.h>

typedef struct hilock_epoll {
    int epfd;
    int64_t timer_at; /* CLOCK_MONOTONIC ms when hilock wants its timer; -1 none */
} hilock_epoll;

static inline int64_t hilock_epoll_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int hilock_epoll_init(hilock_epoll *ep)
{
    ep->timer_at = -1;
    ep->epfd = epoll_create1(EPOLL_CLOEXEC);
    return ep->epfd < 0 ? -1 : 0;
}

static inline void hilock_epoll_close(hilock_epoll *ep)
{
    if (ep->epfd >= 0)
        close(ep->epfd);
    ep->epfd = -1;
}

static inline int hilock_epoll_watch_(void *data, int fd, int events)
{
    hilock_epoll *ep = (hilock_epoll *)data;
    if (events == 0)
        return epoll_ctl(ep->epfd, EPOLL_CTL_DEL, fd, NULL) == 0 || errno == ENOENT ? 0 : -1;
    struct epoll_event ev;
    ev.events = ((events & HILOCK_IO_READ) ? EPOLLIN : 0) | ((events & HILOCK_IO_WRITE) ? EPOLLOUT : 0);
    ev.data.fd = fd;
    if (epoll_ctl(ep->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
        return 0;
    return errno == ENOENT && epoll_ctl(ep->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -1;
}

static inline int hilock_epoll_timer_(void *data, int64_t ms)
{
    hilock_epoll *ep = (hilock_epoll *)data;
    ep->timer_at = ms < 0 ? -1 : hilock_epoll_now_ms() + ms;
    return 0;
}

static inline hilock_async_loop hilock_epoll_loop(hilock_epoll *ep)
{
    hilock_async_loop l;
    l.version = HILOCK_ASYNC_LOOP_VERSION;
    l.data = ep;
    l.watch = hilock_epoll_watch_;
    l.timer = hilock_epoll_timer_;
    return l;
}

/* How long the loop may sleep before hilock needs its timer: ms, or -1. */
static inline int hilock_epoll_timeout(const hilock_epoll *ep)
{
    if (ep->timer_at < 0)
        return -1;
    int64_t left = ep->timer_at - hilock_epoll_now_ms();
    return left <= 0 ? 0 : left > 1000000 ? 1000000 : (int)left;
}

/* Wait up to max_ms (-1: no limit) for hilock's descriptors or timer, and
 * run what is ready. Returns the number of events handled, or -1 (errno). */
static inline int hilock_epoll_run_once(hilock_epoll *ep, hilock_async *a, int max_ms)
{
    struct epoll_event evs[16];
    int t = hilock_epoll_timeout(ep);
    if (t < 0 || (max_ms >= 0 && max_ms < t))
        t = max_ms;
    int n = epoll_wait(ep->epfd, evs, 16, t);
    if (n < 0)
        return errno == EINTR ? 0 : -1;
    for (int i = 0; i < n; i++) {
        int e = 0;
        if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
            e |= HILOCK_IO_READ;
        if (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            e |= HILOCK_IO_WRITE;
        hilock_async_on_io(a, evs[i].data.fd, e);
    }
    if (ep->timer_at >= 0 && ep->timer_at <= hilock_epoll_now_ms()) {
        ep->timer_at = -1;
        hilock_async_on_timer(a);
        n++;
    }
    return n;
}

#endif
