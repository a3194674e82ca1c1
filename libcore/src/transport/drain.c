/*
 * Settling acquire attempts whose reply timed out.
 *
 * A command whose reply did not come in time may still sit in the server's
 * socket buffer (a stalled server runs it when it resumes). For an acquire
 * that would hand out a lock whose caller was told "connection error", or
 * put a waiter in the fair line after it left. A cancel sent on another
 * connection can overtake it. So the connection is kept: one thread per
 * client (started on first use) waits for the late reply on that same
 * socket and then sends the undo on it, which the server necessarily runs
 * after the attempt: release for a grant, leave-the-line for a fair waiter.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport.h"
#include "transport_impl.h"

struct hl_drain_item {
    hl_drain_item *next;
    hl_node *node;     /* counted in node->settling while listed */
    redisContext *ctx;
    hl_settle settle; /* the engine's settle machine decides; we move bytes */
    int ctx_gone;      /* ctx was closed (or replaced) since the read began */
    int keep;          /* what the last advance() said */
};

static void item_free(hl_drain_item *it)
{
    if (it->ctx)
        redisFree(it->ctx);
    hl_settle_free(&it->settle);
    free(it);
}

/* Close the item's connection; a read in progress on it stops (ctx_gone). */
static void close_ctx(hl_drain_item *it)
{
    if (!it->ctx)
        return;
    redisFree(it->ctx);
    it->ctx = NULL;
    it->ctx_gone = 1;
}

/* Write it->settle.cmd on it->ctx (on a new connection to the same server
 * when the machine says so) without blocking for the reply; 0 or -1. */
static int send_undo(hl_drain_item *it)
{
    hl_cmd *u = &it->settle.cmd;
    if (it->settle.reconnect || !it->ctx) {
        close_ctx(it);
        int code = 0;
        char err[HL_ERRMSG_MAX];
        it->ctx = hl_node_connect(it->node, it->node->client->opts.connect_timeout_ms, &code,
                                  err);
        if (!it->ctx)
            return -1;
    }
    if (redisAppendCommandArgv(it->ctx, u->argc, u->argv, u->argvlen) != REDIS_OK)
        return -1;
    int done = 0;
    while (!done)
        if (redisBufferWrite(it->ctx, &done) != REDIS_OK)
            return -1;
    return 0;
}

/* The machine gave up on the item's connection (it says so with reconnect):
 * close it now, so it is not polled while the machine pauses. */
static void on_conn_error(hl_drain_item *it)
{
    hl_settle_on_error(&it->settle, hl_now_mono_ms());
    if (it->settle.reconnect)
        close_ctx(it);
}

/* Run the machine until it waits for a reply (1: keep the item) or ends (0). */
static int advance(hl_drain_item *it)
{
    for (;;) {
        switch (hl_settle_next(&it->settle, hl_now_mono_ms())) {
        case HL_ACT_WAIT:
            return 1;
        case HL_ACT_SEND:
            if (send_undo(it) != 0) /* the machine may try a new connection */
                on_conn_error(it);
            continue;
        default:
            return 0;
        }
    }
}

/* A late reply on the item's connection: the settle machine takes it.
 * Running the machine writes the undo, and a write that fails makes it
 * close the connection (and maybe open a new one): hl_read_replies must then
 * stop at once, before it reads the next reply from the freed context. */
static int take_reply(void *item, redisReply *r)
{
    hl_drain_item *it = item;
    hl_settle_on_reply(&it->settle, r, hl_now_mono_ms());
    freeReplyObject(r);
    it->keep = advance(it);
    return it->keep && !it->ctx_gone;
}

static void *drain_main(void *arg)
{
    hl_transport *c = arg;
    hl_drainer *d = &c->drain;
    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        int n = 0;
        for (hl_drain_item *it = d->items; it; it = it->next)
            n++;
        struct pollfd *pf = calloc((size_t)n + 1, sizeof *pf);
        hl_drain_item **its = calloc((size_t)n + 1, sizeof *its);
        if (!pf || !its) {
            free(pf);
            free(its);
            pthread_mutex_unlock(&d->mu);
            struct pollfd w = {d->wk.wake_fd[0], POLLIN, 0};
            poll(&w, 1, 100);
            pthread_mutex_lock(&d->mu);
            continue;
        }
        pf[0].fd = d->wk.wake_fd[0];
        pf[0].events = POLLIN;
        int64_t now = hl_now_mono_ms(), next = now + HL_SETTLE_MAX_MS;
        int k = 1;
        for (hl_drain_item *it = d->items; it; it = it->next, k++) {
            pf[k].fd = it->ctx ? it->ctx->fd : -1; /* none while pausing */
            pf[k].events = POLLIN;
            its[k] = it;
            if (it->settle.wake_at < next)
                next = it->settle.wake_at;
        }
        pthread_mutex_unlock(&d->mu);
        poll(pf, (nfds_t)n + 1, (int)(next > now ? next - now : 0));
        if (pf[0].revents) {
            hl_wake_drain(d->wk.wake_fd[0]);
        }
        /* only this thread removes items, so its[] stays valid */
        for (k = 1; k <= n; k++) {
            hl_drain_item *it = its[k];
            int keep = 1;
            if (pf[k].revents && it->ctx) {
                it->ctx_gone = 0;
                int rr = hl_read_replies(it->ctx, take_reply, it);
                if (rr < 0) /* the connection died: the machine says what now */
                    on_conn_error(it);
                if (rr > 0) /* a reply ended the item, or closed its connection */
                    keep = it->keep;
            }
            if (keep)
                keep = advance(it); /* gives up after HL_SETTLE_MAX_MS */
            if (!keep) {
                pthread_mutex_lock(&d->mu);
                for (hl_drain_item **pp = &d->items; *pp; pp = &(*pp)->next)
                    if (*pp == it) {
                        *pp = it->next;
                        break;
                    }
                it->node->settling--;
                pthread_cond_broadcast(&d->settled);
                pthread_mutex_unlock(&d->mu);
                item_free(it);
            }
        }
        free(pf);
        free(its);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

int hl_drain_node_ready(hl_transport *c, hl_node *node, int bounded)
{
    hl_drainer *d = &c->drain;
    pthread_mutex_lock(&d->mu);
    int64_t wait_ms = hl_settle_gate(node->settling, bounded, c->opts.command_timeout_ms);
    if (wait_ms > 0 && !d->stop) {
        struct timespec until;
        hl_abs_timespec(&until, wait_ms);
        while (hl_settle_gate(node->settling, 1, 0) >= 0 && !d->stop)
            if (pthread_cond_timedwait(&d->settled, &d->mu, &until) == ETIMEDOUT)
                break;
    }
    int ready = hl_settle_gate(node->settling, 1, 0) < 0;
    pthread_mutex_unlock(&d->mu);
    return ready;
}

int hl_drain_add(hl_transport *c, hl_node *node, redisContext *ctx, const hl_cmd *cmd)
{
    hl_drain_item *it = calloc(1, sizeof *it);
    if (!it)
        return -1;
    it->node = node;
    char rid[HL_OWNER_MAX];
    uint64_t seq = __atomic_add_fetch(&c->request_seq, 1, __ATOMIC_RELAXED);
    snprintf(rid, sizeof rid, "%s:%" PRIu64, c->id, seq);
    if (hl_settle_init(&it->settle, cmd, c->ep.cluster ? "spublish" : "publish", rid,
                       c->opts.command_timeout_ms, hl_now_mono_ms()) != 0) {
        free(it);
        return -1;
    }
    /* hiredis marks the context failed after the timeout; the bytes and the
     * reader state are intact, so clear the mark and keep reading. */
    ctx->err = 0;
    ctx->errstr[0] = 0;
    it->ctx = ctx;

    hl_drainer *d = &c->drain;
    pthread_mutex_lock(&d->mu);
    if (d->stop) {
        pthread_mutex_unlock(&d->mu);
        it->ctx = NULL;
        item_free(it);
        return -1;
    }
    if (!d->wk.running && hl_worker_start(&d->wk, 1, drain_main, c) != 0) {
        pthread_mutex_unlock(&d->mu);
        it->ctx = NULL;
        item_free(it);
        return -1;
    }
    it->next = d->items;
    d->items = it;
    node->settling++;
    hl_worker_wake(&d->wk);
    pthread_mutex_unlock(&d->mu);
    hl_stats_event(&c->stats, HILOCK_TRACE_SETTLE, "an acquire attempt's reply timed out; the settler gives back a late grant");
    return 0;
}

void hl_drain_shutdown(hl_transport *c)
{
    hl_drainer *d = &c->drain;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    int running = d->wk.running;
    if (running)
        hl_worker_wake(&d->wk);
    pthread_mutex_unlock(&d->mu);
    if (running)
        hl_worker_join(&d->wk);
    pthread_mutex_lock(&d->mu);
    while (d->items) {
        hl_drain_item *it = d->items;
        d->items = it->next;
        it->node->settling--;
        item_free(it);
    }
    pthread_cond_broadcast(&d->settled);
    pthread_mutex_unlock(&d->mu);
    hl_worker_close(&d->wk);
}
