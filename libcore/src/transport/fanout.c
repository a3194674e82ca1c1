/* Transport: several commands in flight at once from the calling thread
 * (multi-lock and Redlock members). See hl_exec_fan in transport.h.
 *
 * Every request gets a connection of its own node from that node's pool;
 * all commands are written first, then poll() waits on all the sockets at
 * once and each reply is read as it comes (the sockets stay blocking: a
 * read only follows a readable poll). A request's outcome is the one
 * hl_exec would give it alone; whatever needs more than one plain round
 * trip (redirections, failover, a stale pooled connection, replica
 * acknowledgement) is left to hl_exec_acked once the others are in. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport_impl.h"

enum { FAN_DONE = 0, FAN_SENT, FAN_SLOW };


static void fan_finish(hl_fan *f, int rc)
{
    f->rc = rc;
    f->state = FAN_DONE;
}

/* Hand the connection back; broken ones are closed. */
static void fan_put(hl_fan *f, int broken)
{
    if (f->ctx)
        hl_pool_put(f->node, f->ctx, broken, f->gen);
    f->ctx = NULL;
}

/* The write, read or reply failed at the I/O level (saved_errno from it). */
static void fan_io_error(hl_fan *f, int saved_errno)
{
    redisContext *ctx = f->ctx;
    hl_transport *c = f->client;
    errno = saved_errno;
    if (f->pass == 0 && f->reused && hl_conn_stale(ctx)) {
        /* the server closed it while it sat idle: nothing ran, send again
         * the ordinary way (on another connection) */
        fan_put(f, 1);
        f->state = FAN_SLOW;
        return;
    }
    if (ctx->err == REDIS_ERR_PROTOCOL || ctx->err == REDIS_ERR_OOM) {
        hl_set_err(f->err, "bad reply from Redis: %s", ctx->errstr);
        fan_put(f, 1);
        fan_finish(f, HILOCK_EPROTO);
        return;
    }
    if (!hl_conn_no_reply(ctx, c->opts.command_timeout_ms, f->err))
        hl_set_err(f->err, "I/O error talking to Redis: %s", ctx->errstr);
    fan_put(f, 1);
    f->cmd->reply_lost = 1; /* sent: the server may have run it */
    if (c->ep.cluster)
        __atomic_store_n(&c->map_stale, 1, __ATOMIC_RELEASE);
    fan_finish(f, HILOCK_ECONN);
}

/* Append the command and write it out; 0, or -1 after fan_io_error. */
static int fan_write(hl_fan *f)
{
    hl_cmd *cmd = f->cmd;
    if (redisAppendCommandArgv(f->ctx, cmd->argc, cmd->argv, cmd->argvlen) != REDIS_OK) {
        fan_io_error(f, errno);
        return -1;
    }
    int done = 0;
    while (!done)
        if (redisBufferWrite(f->ctx, &done) != REDIS_OK) {
            fan_io_error(f, errno);
            return -1;
        }
    return 0;
}

static void fan_send(hl_fan *f, const hl_fan *all, size_t before, int64_t now)
{
    hl_transport *c = f->client;
    int rc = hl_transport_check(c, f->err);
    if (rc) {
        fan_finish(f, rc);
        return;
    }
    if (f->want_ack && c->replica_ack) {
        f->state = FAN_SLOW; /* WAIT after the reply: the ordinary path */
        return;
    }
    size_t klen;
    const char *key = hl_cmd_key(f->cmd, &klen);
    f->node = hl_route(c, key, klen);
    /* a node still settling an earlier attempt, or no connection left that
     * another request of ours does not hold: the ordinary path decides */
    if (hl_cmd_is_attempt(f->cmd) && !hl_drain_node_ready(c, f->node, 1)) {
        f->state = FAN_SLOW;
        return;
    }
    for (size_t k = 0; k < before; k++)
        if (all[k].state == FAN_SENT && all[k].node == f->node && !hl_pool_has_free(f->node)) {
            f->state = FAN_SLOW;
            return;
        }
    int code = 0;
    f->ctx = hl_pool_get(f->node, f->timeout_ms, &f->reused, &f->gen, &code, f->err);
    if (!f->ctx) {
        fan_finish(f, code);
        return;
    }
    int64_t after = hl_now_mono_ms();
    f->deadline = f->timeout_ms > 0 ? now + f->timeout_ms : after + c->opts.command_timeout_ms;
    /* the socket keeps the client's command timeout: it bounds the write
     * of these few bytes; reads only follow a readable poll() */
    if (fan_write(f) == 0)
        f->state = FAN_SENT;
}

static void fan_on_reply(hl_fan *f, redisReply *r)
{
    hl_transport *c = f->client;
    if (f->pass == 0 && hl_reply_is_noscript(r)) {
        freeReplyObject(r); /* the server forgot the script: send its body */
        hl_cmd_to_eval(f->cmd);
        f->pass = 1;
        fan_write(f);
        return;
    }
    hl_router rt;
    hl_router_init(&rt, c->ep.cluster ? HL_MODE_CLUSTER
                        : c->ep.master_name ? HL_MODE_SENTINEL : HL_MODE_SINGLE);
    hl_route_action act = hl_router_on_reply(&rt, r);
    if (act != HL_ROUTE_DONE) {
        /* redirected, retry later, or no master: the command did not run */
        freeReplyObject(r);
        fan_put(f, act == HL_ROUTE_REFRESH || act == HL_ROUTE_FAIL);
        f->state = FAN_SLOW;
        return;
    }
    fan_put(f, 0);
    f->reply = r;
    fan_finish(f, 0);
}

static void fan_timed_out(hl_fan *f, int64_t now)
{
    hl_transport *c = f->client;
    hl_set_err(f->err, "no reply within %lld ms",
               (long long)(f->timeout_ms > 0 ? f->timeout_ms : c->opts.command_timeout_ms));
    (void)now;
    if (hl_cmd_is_attempt(f->cmd)) {
        /* the server may still run it: settle its outcome in order on
         * this very connection */
        hl_pool_forget(f->node);
        if (hl_drain_add(c, f->node, f->ctx, f->cmd) == 0)
            f->cmd->drained = 1;
        else
            redisFree(f->ctx);
        f->ctx = NULL;
    } else {
        fan_put(f, 1);
    }
    f->cmd->reply_lost = 1;
    fan_finish(f, HILOCK_ECONN);
}

/* A complete reply ends the request (or sends it again): take no more. */
static int fan_take(void *f, redisReply *r)
{
    fan_on_reply(f, r);
    return 0;
}

/* Read what f's socket has. */
static void fan_read(hl_fan *f)
{
    int rc = hl_read_replies(f->ctx, fan_take, f);
    if (rc < 0)
        fan_io_error(f, rc == -1 ? errno : 0);
}

void hl_exec_fan(hl_fan *reqs, size_t n)
{
    /* the caller's thread writes: no SIGPIPE escapes (masked only where
     * a connection can raise one: hl_transport_nosigpipe_enter) */
    hl_nosigpipe sp;
    hl_transport_nosigpipe_enter(&sp);
    int64_t now = hl_now_mono_ms();
    for (size_t i = 0; i < n; i++) {
        hl_fan *f = &reqs[i];
        f->rc = 0;
        f->reply = NULL;
        f->acked = 1;
        f->err[0] = 0;
        f->node = NULL;
        f->ctx = NULL;
        f->reused = 0;
        f->pass = 0;
        f->state = FAN_DONE;
        fan_send(f, reqs, i, now);
    }
    struct pollfd *pf = malloc(sizeof *pf * (n ? n : 1));
    size_t *who = malloc(sizeof *who * (n ? n : 1));
    for (;;) {
        size_t np = 0;
        int64_t next = -1;
        now = hl_now_mono_ms();
        for (size_t i = 0; i < n; i++) {
            hl_fan *f = &reqs[i];
            if (f->state != FAN_SENT)
                continue;
            if (now >= f->deadline) {
                fan_timed_out(f, now);
                continue;
            }
            if (!pf || !who) { /* no memory for the set: wait on this one alone */
                struct pollfd one = {f->ctx->fd, POLLIN, 0};
                if (poll(&one, 1, (int)(f->deadline - now)) > 0)
                    fan_read(f);
                continue;
            }
            pf[np].fd = f->ctx->fd;
            pf[np].events = POLLIN;
            pf[np].revents = 0;
            who[np++] = i;
            if (next < 0 || f->deadline < next)
                next = f->deadline;
        }
        if (np == 0) {
            int any = 0;
            for (size_t i = 0; i < n; i++)
                any |= reqs[i].state == FAN_SENT;
            if (!any)
                break;
            continue;
        }
        int wait = (int)(next - now);
        int got = poll(pf, (nfds_t)np, wait > 0 ? wait : 0);
        if (got < 0 && errno != EINTR)
            got = 0; /* cannot happen with valid fds; the deadlines still end it */
        for (size_t k = 0; got > 0 && k < np; k++)
            if (pf[k].revents) {
                hl_fan *f = &reqs[who[k]];
                if (f->state == FAN_SENT)
                    fan_read(f);
            }
    }
    free(pf);
    free(who);
    for (size_t i = 0; i < n; i++) {
        hl_fan *f = &reqs[i];
        if (f->state != FAN_SLOW)
            continue;
        f->rc = hl_exec_acked(f->client, f->cmd, &f->reply, f->timeout_ms, f->err,
                              f->want_ack ? &f->acked : NULL);
        f->state = FAN_DONE;
    }
    hl_nosigpipe_leave(&sp);
}
