/* Transport: connecting to one server (TCP or unix, TLS, AUTH, SELECT),
 * reading replies within bounds, and hl_connect: to the server, the master
 * the sentinels name, or the first cluster seed that answers. */
#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "transport.h"
#include "transport_impl.h"

/* ---- writing without SIGPIPE ----
 * hiredis 1.x writes a plain connection with send(fd, obuf, len, 0): a
 * server gone away raises SIGPIPE in the writing thread. Its context holds
 * a table of I/O functions; ours is hiredis's own for a plain socket except
 * for write, which passes MSG_NOSIGNAL (EPIPE comes back as an error
 * instead). A caller's call on such connections then needs no signal-mask
 * system calls (util.c). hiredis 0.14 has no such table: masks there. */
#if defined(HIREDIS_MAJOR) && HIREDIS_MAJOR >= 1
#include <hiredis/async.h>
#include <hiredis/net.h>
#include <hiredis/sds.h>

static ssize_t hl_net_write(redisContext *c)
{
    ssize_t n = send(c->fd, c->obuf, sdslen(c->obuf), MSG_NOSIGNAL);
    if (n >= 0)
        return n;
    int e = errno;
    if ((e == EWOULDBLOCK && !(c->flags & REDIS_BLOCK)) || e == EINTR)
        return 0; /* try again, as hiredis's own write */
    c->err = REDIS_ERR_IO;
    snprintf(c->errstr, sizeof c->errstr, "%s", strerror(e));
    errno = e; /* callers tell a reset or EPIPE from a timeout by errno */
    return -1;
}

static const redisContextFuncs hl_net_funcs = {
    .close = redisNetClose,
    .free_privctx = NULL,
    .async_read = redisAsyncRead,
    .async_write = redisAsyncWrite,
    .read = redisNetRead,
    .write = hl_net_write,
};

void hl_conn_nosignal(redisContext *ctx)
{
    /* only over hiredis's plain-socket table: anything else is not ours */
    if (ctx && ctx->funcs && ctx->funcs->write == redisNetWrite && !ctx->privctx)
        ctx->funcs = &hl_net_funcs;
}

/* every connection (plain, and TLS after hl_tls_handshake) writes with
 * MSG_NOSIGNAL: nothing to mask */
void hl_transport_nosigpipe_enter(hl_nosigpipe *s)
{
    hl_nosigpipe_skip(s);
}
#else
void hl_conn_nosignal(redisContext *ctx)
{
    (void)ctx;
}

/* hiredis 0.14 writes with write(2): mask */
void hl_transport_nosigpipe_enter(hl_nosigpipe *s)
{
    hl_nosigpipe_enter(s);
}
#endif

/* ---- connecting ---- */

int hl_conn_tls_handshake(hl_tls *t, redisContext *ctx, const char *host,
                          const char *server_name, int64_t timeout_ms, const char *where,
                          int *code, char *err)
{
    hl_nosigpipe sp;
    hl_nosigpipe_enter(&sp);
    int rc = hl_tls_handshake(t, ctx, host, server_name, timeout_ms, where, code, err);
    hl_nosigpipe_leave(&sp);
    return rc;
}

struct timeval hl_tv_ms(int64_t ms)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

int hl_conn_no_reply(const redisContext *ctx, int64_t ms, char *err)
{
    if (!ctx)
        return 0;
    int timed_out = ctx->err == REDIS_ERR_IO && (!strcmp(ctx->errstr, strerror(EAGAIN)) ||
                                                 !strcmp(ctx->errstr, strerror(EWOULDBLOCK)));
#ifdef REDIS_ERR_TIMEOUT
    timed_out = timed_out || ctx->err == REDIS_ERR_TIMEOUT;
#endif
    if (!timed_out)
        return 0;
#if defined(HIREDIS_MAJOR) && HIREDIS_MAJOR >= 1
    if (ctx->command_timeout) /* the timeout the read waited: it may exceed ms (WAIT) */
        ms = (int64_t)ctx->command_timeout->tv_sec * 1000 + ctx->command_timeout->tv_usec / 1000;
#endif
    char where[300];
    if (ctx->connection_type == REDIS_CONN_UNIX)
        snprintf(where, sizeof where, "%s", ctx->unix_sock.path ? ctx->unix_sock.path : "?");
    else
        snprintf(where, sizeof where, "%s:%d", ctx->tcp.host ? ctx->tcp.host : "?", ctx->tcp.port);
    hl_msg_no_reply(err, HL_ERRMSG_MAX, ms, where);
    return 1;
}

/* Connect to one server (host:port, or the unix path), AUTH, SELECT. */
static redisContext *connect_node(const hl_endpoint *ep, const char *host, int port,
                                  int64_t connect_timeout_ms, int64_t command_timeout_ms,
                                  int *code, char *err)
{
    char where[300];
    if (ep->path)
        snprintf(where, sizeof where, "unix:%s", ep->path);
    else
        snprintf(where, sizeof where, "%s:%d", host, port);
    redisContext *ctx = ep->path ? redisConnectUnixWithTimeout(ep->path, hl_tv_ms(connect_timeout_ms))
                                 : redisConnectWithTimeout(host, port, hl_tv_ms(connect_timeout_ms));
    if (!ctx) {
        *code = HILOCK_ENOMEM;
        hl_set_err(err, "out of memory connecting to %s", where);
        return NULL;
    }
    if (ctx->err) {
        *code = HILOCK_ECONN;
        hl_set_err(err, "cannot connect to %s: %s", where, ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    hl_reader_bound(ctx->reader);
    hl_conn_nosignal(ctx);
    hl_fd_cloexec(ctx->fd); /* a child the process execs does not keep it open */
    if (!ep->path)
        redisEnableKeepAlive(ctx);
    if (ep->tls_ctx && hl_conn_tls_handshake(ep->tls_ctx, ctx, host, ep->tls_server_name,
                                        connect_timeout_ms, where, code, err)) {
        redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, hl_tv_ms(command_timeout_ms));
    redisReply *r = NULL;
    hl_cmd hs[HL_HANDSHAKE_MAX];
    int nhs = hl_cmd_handshake(hs, ep->user, ep->password, ep->db);
    for (int i = 0; i < nhs; i++) {
        r = hl_command_argv(ctx, hs[i].argc, hs[i].argv, hs[i].argvlen);
        char why[128];
        if (!r && i == 0 && ep->tls) { /* as in hilock_client_open's first command */
            if (!hl_tls_refused(why, sizeof why))
                snprintf(why, sizeof why, "%s", ctx->errstr);
            *code = HILOCK_ETLS;
            hl_set_err(err, "%s ended the TLS session after the handshake: %s (client "
                            "certificate refused?)", where, why);
            goto fail;
        }
        int rc = r ? hl_decode_handshake(r) : HILOCK_ECONN;
        if (!r && hl_conn_no_reply(ctx, command_timeout_ms, err)) {
            *code = rc;
            goto fail;
        }
        if (rc) {
            *code = rc;
            hl_set_err(err, "%s on %s failed: %s%s", hs[i].argv[0], where,
                       !r ? ctx->errstr : r->type == REDIS_REPLY_ERROR ? r->str
                                                                     : "unexpected reply",
                       !r && i == 0 && !ep->tls && !ep->path ? " (a TLS port? use rediss://)"
                                                             : "");
            goto fail;
        }
        freeReplyObject(r);
        r = NULL;
    }
    return ctx;
fail:
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return NULL;
}

/* ---- reading replies, bounded ---- */

/* After a redisBufferRead: 1 (and the context marked failed) when what
 * waits in the reader is over HL_REPLY_MAX_BYTES. */
static int hl_reader_over(redisContext *c)
{
    const redisReader *r = c->reader;
    if (!r || r->len - r->pos <= HL_REPLY_MAX_BYTES)
        return 0;
    c->err = REDIS_ERR_PROTOCOL;
    snprintf(c->errstr, sizeof c->errstr, "a reply over the %zu MB hilock accepts",
             HL_REPLY_MAX_BYTES >> 20);
    return 1;
}

int hl_read_replies(redisContext *ctx, int (*fn)(void *arg, redisReply *r), void *arg)
{
    if (redisBufferRead(ctx) != REDIS_OK)
        return -1;
    if (hl_reader_over(ctx))
        return -2;
    for (;;) {
        void *r = NULL;
        if (redisGetReplyFromReader(ctx, &r) != REDIS_OK)
            return -2;
        if (!r)
            return 0;
        if (!fn(arg, r))
            return 1;
    }
}

/* hiredis's redisGetReply for our blocking contexts, except that one reply
 * may not bring more than HL_REPLY_MAX_BYTES: a "$999999999" bulk or an
 * endless stream of elements is refused (REDIS_ERR_PROTOCOL) once that much
 * has arrived, instead of being buffered for as long as the server sends. */
int hl_get_reply(redisContext *c, void **reply)
{
    void *aux = NULL;
    *reply = NULL;
    if (redisGetReplyFromReader(c, &aux) != REDIS_OK)
        return REDIS_ERR;
    if (!aux) {
        int done = 0;
        do {
            if (redisBufferWrite(c, &done) != REDIS_OK)
                return REDIS_ERR;
        } while (!done);
        size_t fed = 0;
        do {
            size_t before = c->reader->len;
            if (redisBufferRead(c) != REDIS_OK)
                return REDIS_ERR;
            if (c->reader->len > before)
                fed += c->reader->len - before;
            if (fed > HL_REPLY_MAX_BYTES) {
                c->err = REDIS_ERR_PROTOCOL;
                snprintf(c->errstr, sizeof c->errstr, "a reply over the %zu MB hilock accepts",
                         HL_REPLY_MAX_BYTES >> 20);
                return REDIS_ERR;
            }
            if (redisGetReplyFromReader(c, &aux) != REDIS_OK)
                return REDIS_ERR;
        } while (!aux);
    }
    *reply = aux;
    return REDIS_OK;
}

redisReply *hl_command_argv(redisContext *c, int argc, const char **argv, const size_t *argvlen)
{
    void *r = NULL;
    if (redisAppendCommandArgv(c, argc, argv, argvlen) != REDIS_OK ||
        hl_get_reply(c, &r) != REDIS_OK)
        return NULL;
    return r;
}

redisReply *hl_command(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = redisvAppendCommand(c, fmt, ap);
    va_end(ap);
    void *r = NULL;
    if (rc != REDIS_OK || hl_get_reply(c, &r) != REDIS_OK)
        return NULL;
    return r;
}
/* 1 when the server says it is a master. */
static int is_master(redisContext *ctx)
{
    redisReply *r = hl_command(ctx, "ROLE");
    int yes = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
              r->element[0]->type == REDIS_REPLY_STRING && !strcmp(r->element[0]->str, "master");
    if (r)
        freeReplyObject(r);
    return yes;
}

redisContext *hl_connect_addr(const hl_endpoint *ep, const char *host, int port,
                              int64_t connect_timeout_ms, int64_t command_timeout_ms, int *code,
                              char *err)
{
    return connect_node(ep, host, port, connect_timeout_ms, command_timeout_ms, code, err);
}

redisContext *hl_connect(const hl_endpoint *ep, int64_t connect_timeout_ms,
                         int64_t command_timeout_ms, int *code, char *err)
{
    if (!ep->nseeds)
        return connect_node(ep, ep->host, ep->port, connect_timeout_ms, command_timeout_ms, code,
                            err);
    if (ep->cluster) {
        for (int i = 0; i < ep->nseeds; i++) {
            redisContext *ctx = connect_node(ep, ep->seed_hosts[i], ep->seed_ports[i],
                                             connect_timeout_ms, command_timeout_ms, code, err);
            if (ctx || *code == HILOCK_EAUTH)
                return ctx;
        }
        return NULL;
    }
    /* Sentinel: every connect asks for the current master, so reconnecting
     * after a failover lands on the new one. */
    *code = HILOCK_ECONN;
    for (int i = 0; i < ep->nseeds; i++) {
        char host[256];
        int port;
        int src = hl_sentinel_master(ep, i, connect_timeout_ms, host, sizeof host, &port, err);
        if (src) {
            if (src == HILOCK_EAUTH || src == HILOCK_ETLS || src == HILOCK_ENOMEM)
                *code = src; /* reported unless another sentinel answers */
            continue;
        }
        redisContext *ctx = connect_node(ep, host, port, connect_timeout_ms,
                                         command_timeout_ms, code, err);
        if (!ctx) {
            if (*code == HILOCK_EAUTH || *code == HILOCK_ENOMEM)
                return NULL;
            continue;
        }
        if (is_master(ctx))
            return ctx;
        hl_set_err(err, "%s:%d named by sentinel is not a master (failover in progress?)", host,
                   port);
        redisFree(ctx);
        *code = HILOCK_ECONN;
    }
    return NULL;
}
