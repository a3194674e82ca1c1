/* Transport: the connection pool of one node (hiredis contexts are not
 * thread-safe: each command checks one out). */
#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "transport.h"
#include "transport_impl.h"

/* An idle connection the server (or the network) has closed: CLIENT KILL,
 * a server restart, an idle timeout. Its peer's end-of-file (POLLRDHUP,
 * also with bytes still unread before it, such as a TLS close_notify) or an
 * error shows without blocking; else a read of it would end at once (a
 * peek). Bytes waiting before no end, or nothing, count as open: the
 * request path then finds out as before. */
static int idle_conn_closed(const redisContext *ctx)
{
    if (ctx->err || ctx->fd == REDIS_INVALID_FD)
        return 1;
#ifdef POLLRDHUP
    struct pollfd pf = {.fd = ctx->fd, .events = POLLIN | POLLRDHUP};
    int ready;
    do
        ready = poll(&pf, 1, 0);
    while (ready < 0 && errno == EINTR);
    if (ready > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
        return 1;
#endif
    char b;
    ssize_t got;
    do
        got = recv(ctx->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    while (got < 0 && errno == EINTR);
    return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

redisContext *hl_pool_get(hl_node *n, int64_t timeout_ms, int *reused, int64_t *gen,
                          int *code, char *err)
{
    hl_transport *c = n->client;
    hl_pool *p = &n->pool;
    int64_t connect_ms = c->opts.connect_timeout_ms;
    if (timeout_ms > 0 && timeout_ms < connect_ms)
        connect_ms = timeout_ms;
    pthread_mutex_lock(&p->mu);
    int64_t end = hl_now_mono_ms() + c->opts.command_timeout_ms + connect_ms;
    while (p->nidle == 0 && p->inuse >= p->size) {
        struct timespec ts;
        hl_abs_timespec(&ts, end - hl_now_mono_ms());
        if (pthread_cond_timedwait(&p->cv, &p->mu, &ts) == ETIMEDOUT &&
            p->nidle == 0 && p->inuse >= p->size) {
            pthread_mutex_unlock(&p->mu);
            *code = HILOCK_ECONN;
            hl_set_err(err, "no free connection in the pool (size %d)", p->size);
            return NULL;
        }
    }
    p->inuse++;
    *gen = __atomic_load_n(&c->master_gen, __ATOMIC_ACQUIRE);
    while (p->nidle > 0) {
        redisContext *ctx = p->idle[--p->nidle];
        if (!idle_conn_closed(ctx)) {
            pthread_mutex_unlock(&p->mu);
            *reused = 1;
            return ctx;
        }
        /* closed while idle: nothing of this call was written on it, so
         * dropping it is always safe; however many there are */
        pthread_mutex_unlock(&p->mu);
        redisFree(ctx);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    *reused = 0;
    redisContext *ctx = hl_node_connect(n, connect_ms, code, err);
    if (!ctx) {
        pthread_mutex_lock(&p->mu);
        p->inuse--;
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    return ctx;
}

void hl_pool_put(hl_node *n, redisContext *ctx, int broken, int64_t gen)
{
    hl_transport *c = n->client;
    hl_pool *p = &n->pool;
    pthread_mutex_lock(&p->mu);
    p->inuse--;
    if (broken || ctx->err || p->nidle >= p->size ||
        gen != __atomic_load_n(&c->master_gen, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&c->closed, __ATOMIC_ACQUIRE)) {
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
        redisFree(ctx);
        return;
    }
    p->idle[p->nidle++] = ctx;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* A checked-out connection leaves the pool for good (handed elsewhere). */
void hl_pool_forget(hl_node *n)
{
    hl_pool *p = &n->pool;
    pthread_mutex_lock(&p->mu);
    p->inuse--;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void hl_pool_add_idle(hl_node *n, redisContext *ctx)
{
    hl_pool *p = &n->pool;
    pthread_mutex_lock(&p->mu);
    if (p->nidle < p->size)
        p->idle[p->nidle++] = ctx;
    else
        redisFree(ctx);
    pthread_mutex_unlock(&p->mu);
}

int hl_pool_has_free(hl_node *n)
{
    hl_pool *p = &n->pool;
    pthread_mutex_lock(&p->mu);
    int yes = p->nidle > 0 || p->inuse < p->size;
    pthread_mutex_unlock(&p->mu);
    return yes;
}
