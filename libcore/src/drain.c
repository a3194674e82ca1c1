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

#include "internal.h"

struct hl_drain_item {
    hl_drain_item *next;
    redisContext *ctx;
    int fair;
    int enqueued;      /* fair attempt that may have joined the line */
    int undo_sent;
    int64_t lease_ms, window_ms;
    int64_t give_up_at;
    hl_names names;
    char owner[HL_OWNER_MAX];
    hl_cmd undo;
    char latch[HL_OWNER_MAX + 4200];
};

static void item_free(hl_drain_item *it)
{
    if (it->ctx)
        redisFree(it->ctx);
    hl_names_free(&it->names);
    free(it);
}

static int64_t arg_i64(const hl_cmd *cmd, int i)
{
    char buf[24];
    size_t n = cmd->argvlen[i] < sizeof buf - 1 ? cmd->argvlen[i] : sizeof buf - 1;
    memcpy(buf, cmd->argv[i], n);
    buf[n] = 0;
    return strtoll(buf, NULL, 10);
}

static void arg_str(const hl_cmd *cmd, int i, char *out, size_t len)
{
    size_t n = cmd->argvlen[i] < len - 1 ? cmd->argvlen[i] : len - 1;
    memcpy(out, cmd->argv[i], n);
    out[n] = 0;
}

/* Send it->undo on it->ctx without blocking for the reply; 0 or -1. */
static int send_undo(hl_drain_item *it)
{
    hl_cmd_to_eval(&it->undo); /* this server may not have the script cached */
    if (redisAppendCommandArgv(it->ctx, it->undo.argc, it->undo.argv, it->undo.argvlen) !=
        REDIS_OK)
        return -1;
    int done = 0;
    while (!done)
        if (redisBufferWrite(it->ctx, &done) != REDIS_OK)
            return -1;
    it->undo_sent = 1;
    return 0;
}

/* The late reply of the attempt: decide the undo. 1 = keep the item (undo
 * sent, its reply awaited), 0 = finished. */
static int settle(hilock_client *c, hl_drain_item *it, const redisReply *r)
{
    if (it->undo_sent)
        return 0; /* the undo's own reply: done */
    hl_acquire_result res;
    if (hl_decode_acquire(r, &res) != 0)
        return 0; /* error or NOSCRIPT: the attempt changed nothing */
    if (res.acquired) {
        uint64_t seq = __atomic_add_fetch(&c->request_seq, 1, __ATOMIC_RELAXED);
        snprintf(it->latch, sizeof it->latch, "%s:%s:%" PRIu64, it->names.latch_prefix, c->id,
                 seq);
        hl_cmd_release(&it->undo, it->fair ? HILOCK_KIND_FAIR : HILOCK_KIND_REENTRANT,
                       &it->names, it->owner, it->lease_ms, it->latch,
                       2 * c->opts.command_timeout_ms + 1000);
    } else if (it->enqueued) {
        hl_cmd_fair_cancel(&it->undo, &it->names, it->owner, it->window_ms);
    } else {
        return 0;
    }
    return send_undo(it) == 0;
}

static void *drain_main(void *arg)
{
    hilock_client *c = arg;
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
            struct pollfd w = {d->wake_fd[0], POLLIN, 0};
            poll(&w, 1, 100);
            pthread_mutex_lock(&d->mu);
            continue;
        }
        pf[0].fd = d->wake_fd[0];
        pf[0].events = POLLIN;
        int64_t now = hl_now_mono_ms(), next = now + HL_DRAIN_MAX_MS;
        int k = 1;
        for (hl_drain_item *it = d->items; it; it = it->next, k++) {
            pf[k].fd = it->ctx->fd;
            pf[k].events = POLLIN;
            its[k] = it;
            if (it->give_up_at < next)
                next = it->give_up_at;
        }
        pthread_mutex_unlock(&d->mu);
        poll(pf, (nfds_t)n + 1, (int)(next > now ? next - now : 0));
        if (pf[0].revents) {
            hl_wake_drain(d->wake_fd[0]);
        }
        /* only this thread removes items, so its[] stays valid */
        for (k = 1; k <= n; k++) {
            hl_drain_item *it = its[k];
            int keep = 1;
            if (pf[k].revents) {
                if (redisBufferRead(it->ctx) != REDIS_OK)
                    keep = 0;
                while (keep) {
                    void *r = NULL;
                    if (redisGetReplyFromReader(it->ctx, &r) != REDIS_OK) {
                        keep = 0;
                        break;
                    }
                    if (!r)
                        break;
                    keep = settle(c, it, r);
                    freeReplyObject(r);
                }
            }
            if (keep && hl_now_mono_ms() >= it->give_up_at)
                keep = 0;
            if (!keep) {
                pthread_mutex_lock(&d->mu);
                for (hl_drain_item **pp = &d->items; *pp; pp = &(*pp)->next)
                    if (*pp == it) {
                        *pp = it->next;
                        break;
                    }
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

int hl_drain_add(hilock_client *c, redisContext *ctx, const hl_cmd *cmd)
{
    hl_drain_item *it = calloc(1, sizeof *it);
    if (!it)
        return -1;
    /* argv: EVALSHA sha nkeys KEYS... ARGV... (see hl_cmd_acquire) */
    char name[4200];
    arg_str(cmd, 3, name, sizeof name);
    if (hl_names_init(&it->names, name) != 0) {
        free(it);
        return -1;
    }
    if (c->ep.cluster)
        it->names.publish = "spublish";
    it->fair = cmd->script == HL_SCRIPT_FAIR_LOCK;
    if (it->fair) {
        it->lease_ms = arg_i64(cmd, 6);
        arg_str(cmd, 7, it->owner, sizeof it->owner);
        it->window_ms = arg_i64(cmd, 8);
        it->enqueued = cmd->argvlen[9] == 1 && cmd->argv[9][0] == '1';
    } else {
        it->lease_ms = arg_i64(cmd, 4);
        arg_str(cmd, 5, it->owner, sizeof it->owner);
    }
    /* hiredis marks the context failed after the timeout; the bytes and the
     * reader state are intact, so clear the mark and keep reading. */
    ctx->err = 0;
    ctx->errstr[0] = 0;
    it->ctx = ctx;
    it->give_up_at = hl_now_mono_ms() + HL_DRAIN_MAX_MS;

    hl_drainer *d = &c->drain;
    pthread_mutex_lock(&d->mu);
    if (d->stop) {
        pthread_mutex_unlock(&d->mu);
        it->ctx = NULL;
        item_free(it);
        return -1;
    }
    if (!d->running) {
        if (d->wake_fd[0] < 0) {
            if (hl_wake_pipe(d->wake_fd) != 0) {
                pthread_mutex_unlock(&d->mu);
                it->ctx = NULL;
                item_free(it);
                return -1;
            }
        }
        if (pthread_create(&d->thread, NULL, drain_main, c) != 0) {
            pthread_mutex_unlock(&d->mu);
            it->ctx = NULL;
            item_free(it);
            return -1;
        }
        d->running = 1;
    }
    it->next = d->items;
    d->items = it;
    hl_wake(d->wake_fd[1]);
    pthread_mutex_unlock(&d->mu);
    return 0;
}

void hl_drain_shutdown(hilock_client *c)
{
    hl_drainer *d = &c->drain;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    int running = d->running;
    if (running) {
        hl_wake(d->wake_fd[1]);
    }
    pthread_mutex_unlock(&d->mu);
    if (running)
        pthread_join(d->thread, NULL);
    d->running = 0;
    while (d->items) {
        hl_drain_item *it = d->items;
        d->items = it->next;
        item_free(it);
    }
    if (d->wake_fd[0] >= 0) {
        close(d->wake_fd[0]);
        close(d->wake_fd[1]);
        d->wake_fd[0] = d->wake_fd[1] = -1;
    }
}
