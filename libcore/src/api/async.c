/*
 * The non-blocking driver (hilock_async, hilock.h): the engine's machines
 * (hl_acquire, hl_release, hl_renew_classify, the decoders) driven over
 * hiredis async contexts whose descriptors and timers the application's
 * event loop watches (libcurl multi_socket shape: watch + one timer).
 *
 * Flow: hiredis callbacks only feed replies to the machines and queue the
 * operation; the queue is worked (next actions, sends) at the top of each
 * entry point, outside hiredis; user callbacks run last, only from
 * hilock_async_on_io / on_timer / free. No lock decision is made here.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/time.h>

#include <stddef.h>

#include <hiredis/async.h>
#include <hiredis/sds.h>

#include "api.h"

#include "async_impl.h"

static int64_t now_ms(void)
{
    return hl_now_mono_ms();
}

int64_t hl_as_now(void)
{
    return hl_now_mono_ms();
}

static int64_t min_at(int64_t x, int64_t y)
{
    return x < 0 ? y : y < 0 ? x : x < y ? x : y;
}

/* ---- the deadline heap (async_impl.h, as_tmr) ---- */

static void heap_put(hilock_async *a, size_t i, as_tmr *t)
{
    a->heap[i] = t;
    t->pos = i + 1;
}

static void heap_up(hilock_async *a, size_t i)
{
    as_tmr *t = a->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (a->heap[p]->at <= t->at)
            break;
        heap_put(a, i, a->heap[p]);
        i = p;
    }
    heap_put(a, i, t);
}

static void heap_down(hilock_async *a, size_t i)
{
    as_tmr *t = a->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= a->nheap)
            break;
        if (c + 1 < a->nheap && a->heap[c + 1]->at < a->heap[c]->at)
            c++;
        if (a->heap[c]->at >= t->at)
            break;
        heap_put(a, i, a->heap[c]);
        i = c;
    }
    heap_put(a, i, t);
}

/* Room in the heap for one more object that has a timer (each has at most
 * one entry), so that setting a timer never allocates: 0, or -1 (no
 * memory: the object is not made). heap_leave when the object goes. */
static int heap_join(hilock_async *a)
{
    if (a->heap_owners >= a->heap_cap) {
        size_t cap = a->heap_cap ? a->heap_cap * 2 : 64;
        as_tmr **h = realloc(a->heap, cap * sizeof *h);
        if (!h)
            return -1;
        a->heap = h;
        a->heap_cap = cap;
    }
    a->heap_owners++;
    return 0;
}

static void tmr_clear(hilock_async *a, as_tmr *t)
{
    if (!t->pos)
        return;
    size_t i = t->pos - 1;
    t->pos = 0;
    if (i == --a->nheap)
        return;
    as_tmr *last = a->heap[a->nheap];
    heap_put(a, i, last);
    if (i > 0 && last->at < a->heap[(i - 1) / 2]->at)
        heap_up(a, i);
    else
        heap_down(a, i);
}

static void heap_leave(hilock_async *a, as_tmr *t)
{
    tmr_clear(a, t);
    a->heap_owners--;
}

/* t is due at at (< 0: not at all). O(log n). */
static void tmr_set(hilock_async *a, as_tmr *t, int64_t at)
{
    if (at < 0) {
        tmr_clear(a, t);
        return;
    }
    if (t->pos) {
        int64_t old = t->at;
        t->at = at;
        if (at < old)
            heap_up(a, t->pos - 1);
        else if (at > old)
            heap_down(a, t->pos - 1);
        return;
    }
    t->at = at;
    heap_put(a, a->nheap++, t);
    heap_up(a, a->nheap - 1);
}

#define TMR_OWNER(t, type) ((type *)(void *)((char *)(t) - offsetof(type, tmr)))

/* ---- the loop ---- */

static void conn_watch(as_conn *k)
{
    int ev = k->ac ? k->want : 0;
    if (ev == k->watched || k->fd < 0)
        return;
    k->watched = ev;
    if (k->a->loop.watch && k->a->loop.watch(k->a->loop.data, k->fd, ev) != 0 && ev) {
        /* nothing would ever wake its commands: close it (finish_call) */
        k->unwatched = 1;
        snprintf(k->a->errmsg, sizeof k->a->errmsg,
                 "the event loop refused to watch descriptor %d", k->fd);
    }
}

static void ev_add_read(void *p) { as_conn *k = p; k->want |= HILOCK_IO_READ; conn_watch(k); }
static void ev_del_read(void *p) { as_conn *k = p; k->want &= ~HILOCK_IO_READ; conn_watch(k); }
static void ev_add_write(void *p) { as_conn *k = p; k->want |= HILOCK_IO_WRITE; conn_watch(k); }
static void ev_del_write(void *p) { as_conn *k = p; k->want &= ~HILOCK_IO_WRITE; conn_watch(k); }

static void ev_cleanup(void *p)
{
    as_conn *k = p;
    k->want = 0;
    if (k->watched && k->fd >= 0 && k->a->loop.watch)
        k->a->loop.watch(k->a->loop.data, k->fd, 0);
    k->watched = 0;
    k->timer_at = -1;
}

static void ev_timer(void *p, struct timeval tv)
{
    as_conn *k = p;
    k->timer_at = now_ms() + (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* hiredis is about to free the context: nothing of it may be used after. */
static void conn_gone(void *p)
{
    as_conn *k = p;
    if (!k)
        return;
    k->ac = NULL;
    k->timer_at = -1;
    if (k->node) {
        if (k->node->cmd == k)
            k->node->cmd = NULL;
        if (k->node->sub == k)
            k->node->sub = NULL;
    }
}

/* ---- operations: queue and completion ---- */

static void op_queue(as_op *op)
{
    if (op->parked)
        return; /* queued when the topology is known */
    hilock_async *a = op->a;
    if (op->queued || op->done)
        return;
    op->queued = 1;
    op->qnext = NULL;
    *a->ready_tail = op;
    a->ready_tail = &op->qnext;
}

void hl_as_op_finish(as_op *op, int rc, int64_t value)
{
    if (op->done)
        return;
    op->done = 1;
    op->rc = rc;
    op->value = value;
    hilock_async *a = op->a;
    op->dnext = NULL;
    *a->done_tail = op;
    a->done_tail = &op->dnext;
    if (rc && !op->err[0])
        snprintf(op->err, sizeof op->err, "%s", hilock_strerror(rc));
}

/* ---- channels (pub/sub wake-ups) ---- */

static as_chan *chan_find(as_node *nd, const char *name, size_t len)
{
    for (as_chan *ch = nd->chans; ch; ch = ch->next)
        if (strlen(ch->name) == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

static void chan_remove(as_node *nd, as_chan *ch)
{
    for (as_chan **pp = &nd->chans; *pp; pp = &(*pp)->next)
        if (*pp == ch) {
            *pp = ch->next;
            break;
        }
    free(ch->name);
    free(ch);
}

/* Wake op: its WAIT ends now (or its next WAIT does, when it is busy). */

void hl_as_op_signal(as_op *op)
{
    if (op->type == OP_LISTEN) {
        hl_as_ml_listener_signal(op);
        return;
    }
    op->signaled = 1;
    if (op->waiting) {
        op->waiting = 0;
        op_queue(op);
    }
}

/* op's subscription is confirmed (ok) or failed. */
static void sub_result(as_op *op, int ok)
{
    op->sub_pending = 0;
    if (op->type == OP_LISTEN) {
        hl_as_ml_listener_subscribed(op, ok);
        return;
    }
    if (op->type == OP_EXT)
        op->kind->on_subscribed(op->self, ok, now_ms());
    else
        hl_acquire_on_subscribed(&op->acq, ok, now_ms());
    op_queue(op);
}

static as_conn *conn_get(hilock_async *a, as_node *nd, int pubsub);
static void sub_cb(redisAsyncContext *ac, void *reply, void *priv);

static void chan_drop_waiters_sub(as_node *nd);

/* SUBSCRIBE or UNSUBSCRIBE ch on its node's pub/sub connection (only when
 * it is healthy: a new connection is made by hl_as_chan_join alone); 0 or -1.
 * Sharded (SSUBSCRIBE) on Redis Cluster, where the scripts SPUBLISH. */
static int chan_cmd(hilock_async *a, as_node *nd, as_chan *ch, int unsubscribe)
{
    (void)a;
    as_conn *k = nd->sub;
    if (!k || !k->ac || (k->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)) || k->hs_code)
        return -1;
    hl_cmd cmd;
    int sharded = nd->link->mode == HL_MODE_CLUSTER;
    hl_cmd_subscribe(&cmd, ch->name, sharded, unsubscribe);
    if (sharded) {
        /* answered by pushes (sub_push_cb): no callback waits for them */
        if (redisAppendCommandArgv(&k->ac->c, cmd.argc, cmd.argv, cmd.argvlen) != REDIS_OK)
            return -1;
        k->want |= HILOCK_IO_WRITE; /* what hiredis's own commands ask for */
        conn_watch(k);
    } else if (redisAsyncCommandArgv(k->ac, sub_cb, nd, cmd.argc, cmd.argv, cmd.argvlen) !=
               REDIS_OK) {
        return -1;
    }
    ch->deadline = now_ms() + nd->link->client->t.opts.command_timeout_ms;
    return 0;
}

/* The channel name of nd on its live subscriber connection, made (its
 * messages waking by rule) and its SUBSCRIBE sent when there was none yet;
 * NULL when it could not be. The caller takes a reference. */
static as_chan *chan_open(hilock_async *a, as_node *nd, const char *name, hl_wake_rule rule)
{
    if (!conn_get(a, nd, 1)) /* first: replacing a broken one drops its channels */
        return NULL;
    as_chan *ch = chan_find(nd, name, strlen(name));
    if (ch)
        return ch;
    ch = calloc(1, sizeof *ch);
    if (!ch || !(ch->name = hl_strdup(name))) {
        free(ch);
        return NULL;
    }
    ch->state = CH_PENDING;
    ch->rule = rule;
    ch->node = nd;
    ch->next = nd->chans;
    nd->chans = ch;
    if (chan_cmd(a, nd, ch, 0) != 0) {
        chan_remove(nd, ch);
        return NULL;
    }
    return ch;
}

/* op joins the channel (its messages wake by rule); 1 subscribed already,
 * 0 pending, -1 failed, 2 parked until the topology is known (then op is
 * queued again). */
int hl_as_chan_join(as_op *op, const char *name, hl_wake_rule rule)
{
    hilock_async *a = op->a;
    as_node *nd = NULL;
    int r = hl_as_route_channel(op, name, &nd);
    if (r == 1)
        return 2;
    if (r)
        return -1;
    as_chan *ch = chan_open(a, nd, name, rule);
    if (!ch)
        return -1;
    ch->refs++;
    op->chan = ch;
    op->chan_next = NULL;
    op->chan_prev = ch->waiters_tail;
    if (ch->waiters_tail)
        ch->waiters_tail->chan_next = op;
    else
        ch->waiters = op;
    ch->waiters_tail = op;
    if (ch->state == CH_SUBSCRIBED)
        return 1;
    op->sub_pending = 1;
    return 0;
}

/* One waiter or observer of ch less: with none left, it is unsubscribed. */
static void chan_unref(hilock_async *a, as_chan *ch)
{
    if (--ch->refs > 0)
        return;
    if (ch->state == CH_SUBSCRIBED) {
        ch->state = CH_UNSUBSCRIBING;
        if (chan_cmd(a, ch->node, ch, 1) != 0)
            chan_remove(ch->node, ch);
    }
    /* PENDING: removed when its confirmation comes (then unsubscribed);
     * UNSUBSCRIBING: removed when that is confirmed */
}

static void chan_leave(as_op *op)
{
    as_chan *ch = op->chan;
    if (!ch)
        return;
    op->chan = NULL;
    op->sub_pending = 0;
    if (op->chan_prev)
        op->chan_prev->chan_next = op->chan_next;
    else
        ch->waiters = op->chan_next;
    if (op->chan_next)
        op->chan_next->chan_prev = op->chan_prev;
    else
        ch->waiters_tail = op->chan_prev;
    op->chan_next = op->chan_prev = NULL;
    /* a wake-one message this waiter took without using is passed on */
    if (op->signaled) {
        for (as_op *o = ch->waiters; o; o = o->chan_next)
            if (!o->signaled) {
                hl_as_op_signal(o);
                break;
            }
    }
    op->signaled = 0;
    chan_unref(op->a, ch);
}

/* Every subscription of nd is gone (its connection died, or the slot map
 * changed under them). */
static void chan_drop_one(as_node *nd, as_chan *ch);
static void observers_drop(as_chan *ch);
static void observers_heard(as_chan *ch, const hl_ps_event *ev);

static void holds_sync(as_link *lk);

static void chan_drop_waiters_sub(as_node *nd)
{
    while (nd->chans)
        chan_drop_one(nd, nd->chans);
    /* a message may have gone with them: the holds that listened through
     * nd are checked at once, and every interval until nd is heard again
     * (the session's liveness rule) */
    hl_sublive_closed(&nd->live, now_ms());
    if (!nd->sentinel && !nd->link->a->closing)
        holds_sync(nd->link);
}

/* ch is gone from the server: its waiters are told, its observers listen
 * again later (hold_observe_later), it is removed. */
static void chan_drop_one(as_node *nd, as_chan *ch)
{
    observers_drop(ch);
    {
        for (as_op *o = ch->waiters, *nx; o; o = nx) {
            nx = o->chan_next;
            o->chan = NULL;
            o->chan_next = o->chan_prev = NULL;
            if (o->sub_pending) {
                sub_result(o, 0);
            } else if (o->type == OP_LISTEN) {
                hl_as_ml_listener_subscribed(o, 0); /* no longer wakes its parent */
            } else {
                /* subscribe again, then retry: an unlock may have been missed */
                o->resub_req = 1;
                if (o->waiting) {
                    o->waiting = 0;
                    op_queue(o);
                }
            }
        }
        chan_remove(nd, ch);
    }
}

void hl_as_chans_drop(as_node *nd)
{
    chan_drop_waiters_sub(nd);
}

/* One pub/sub frame r from k, a connection of lk (not freed here). */
static void sub_frame(as_conn *k, as_node *lk, redisReply *r)
{
    hl_ps_event ev;
    hl_decode_pubsub(r, &ev);
    as_chan *ch = ev.type == HL_PS_OTHER ? NULL : chan_find(lk, ev.channel, ev.channel_len);
    if (ch) {
        switch (ev.type) {
        case HL_PS_SUBSCRIBE:
            ch->state = CH_SUBSCRIBED;
            ch->deadline = -1;
            if (ch->refs == 0) {
                ch->state = CH_UNSUBSCRIBING;
                if (chan_cmd(k->a, lk, ch, 1) != 0)
                    chan_remove(lk, ch);
                break;
            }
            for (as_op *o = ch->waiters, *nx; o; o = nx) {
                nx = o->chan_next;
                if (o->sub_pending)
                    sub_result(o, 1);
            }
            /* a holder listening from now: a force unlock published
             * before went unheard (the session has its hold checked) */
            observers_heard(ch, &ev);
            break;
        case HL_PS_UNSUBSCRIBE:
            if (ch->state == CH_SUBSCRIBED && lk->link->mode == HL_MODE_CLUSTER) {
                /* not asked for: the slot left this node; its waiters
                 * subscribe again where the slot lives now, its holders
                 * too, and have their holds checked meanwhile */
                observers_heard(ch, &ev);
                chan_drop_one(lk, ch);
                hl_as_route_chan_moved(lk);
                break;
            }
            if (ch->state != CH_UNSUBSCRIBING)
                break;
            ch->deadline = -1;
            if (ch->refs == 0) {
                chan_remove(lk, ch);
            } else { /* a waiter came back meanwhile: subscribe again */
                ch->state = CH_PENDING;
                if (chan_cmd(k->a, lk, ch, 0) != 0) {
                    for (as_op *o = ch->waiters, *nx; o; o = nx) {
                        nx = o->chan_next;
                        if (o->sub_pending)
                            sub_result(o, 0);
                    }
                    observers_drop(ch); /* they listen again later */
                    if (ch->refs == 0)
                        chan_remove(lk, ch);
                }
            }
            break;
        case HL_PS_MESSAGE: {
            observers_heard(ch, &ev); /* the session says which holds to check */
            /* the engine's rule: all (-1), none, or the n longest waiting */
            int64_t n = hl_ps_wakes(ch->rule, &ev);
            for (as_op *o = ch->waiters; o && n != 0; o = o->chan_next) {
                if (n < 0 || !o->signaled) {
                    hl_as_op_signal(o);
                    if (n > 0)
                        n--;
                }
            }
            break;
        }
        default:
            break;
        }
    }
}

static void sub_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    as_conn *k = ac->data;
    redisReply *r = reply;
    if (k && !k->a->closing && r && k->node == priv) {
        hl_sublive_heard(&k->node->live, now_ms()); /* any frame: it delivers */
        sub_frame(k, priv, r);
    }
    if (r)
        freeReplyObject(r);
}

/* Sharded pub/sub (Redis Cluster) frames: hiredis's async API knows only
 * SUBSCRIBE's, so a cluster pub/sub connection speaks RESP3, where the
 * server pushes ssubscribe, smessage and sunsubscribe frames, which hiredis
 * hands here (and frees). */
static void sub_push_cb(redisAsyncContext *ac, void *reply)
{
    as_conn *k = ac->data;
    if (k && !k->a->closing && reply && k->node) {
        hl_sublive_heard(&k->node->live, now_ms());
        sub_frame(k, k->node, reply);
    }
}

/* The answer to a liveness PING (["pong", ""] in subscribed mode, +PONG
 * otherwise): the connection delivers. */
static void ping_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    as_conn *k = ac->data;
    if (k && !k->a->closing && reply && k->node == priv)
        hl_sublive_heard(&k->node->live, now_ms());
    if (reply)
        freeReplyObject(reply);
}

/* The HELLO 3 of such a connection: a refusal is a refused handshake. */
static void hello_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)priv;
    as_conn *k = ac->data;
    redisReply *r = reply;
    if (k && !k->a->closing && r && r->type == REDIS_REPLY_ERROR && !k->hs_code) {
        k->hs_code = HILOCK_EPROTO;
        snprintf(k->a->errmsg, sizeof k->a->errmsg, "HELLO 3 refused: %s",
                 r->str ? r->str : "error");
        redisAsyncDisconnect(ac);
    }
    if (r)
        freeReplyObject(r);
}

/* ---- connections ---- */

static void hs_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)priv;
    as_conn *k = ac->data;
    redisReply *r = reply;
    if (k && !k->a->closing && r) {
        int rc = hl_decode_handshake(r);
        if (rc && !k->hs_code) {
            k->hs_code = rc;
            snprintf(k->a->errmsg, sizeof k->a->errmsg, "connection refused: %s",
                     r->type == REDIS_REPLY_ERROR && r->str ? r->str : "bad handshake reply");
            redisAsyncDisconnect(ac);
        }
    }
    if (r)
        freeReplyObject(r);
}

static void conn_failed(as_conn *k);

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    as_conn *k = ac->data;
    if (!k || !k->node || k->a->closing)
        return;
    if (status != REDIS_OK) /* not asked for: the server went, or failed over */
        hl_as_route_conn_lost(k);
    if (k->pubsub && k->node && k->node->sub == k)
        chan_drop_waiters_sub(k->node);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    as_conn *k = (as_conn *)ac->data;
    if (status == REDIS_OK && k)
        k->connected = 1;
    if (status != REDIS_OK && k)
        conn_failed(k);
    if (status != REDIS_OK && k && !k->a->closing) {
        snprintf(k->a->errmsg, sizeof k->a->errmsg, "cannot connect: %s",
                 ac->errstr[0] ? ac->errstr : "connection failed");
        if (k->node)
            hl_as_route_conn_lost(k);
        if (k->pubsub && k->node && k->node->sub == k)
            chan_drop_waiters_sub(k->node);
    }
}

static struct timeval ms_tv(int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* nd's command (pubsub 0) or pub/sub connection, opened when missing. */
static as_conn *conn_get(hilock_async *a, as_node *nd, int pubsub)
{
    as_conn *k = pubsub ? nd->sub : nd->cmd;
    if (k && k->ac && !(k->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)) &&
        !k->hs_code && !k->draining)
        return k;
    if (k) { /* broken: detach it; hiredis frees it */
        if (pubsub) {
            nd->sub = NULL;
            chan_drop_waiters_sub(nd); /* its subscriptions go with it */
        } else {
            nd->cmd = NULL;
        }
        k->node = NULL;
    }
    hilock_client *c = nd->link->client;
    k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->a = a;
    k->node = nd;
    k->fd = -1;
    k->timer_at = -1;
    k->write_stall_at = -1;
    k->cmd_timeout_ms = c->t.opts.command_timeout_ms;
    k->pubsub = pubsub;
    k->reqs_tail = &k->reqs;
    redisOptions o = {0};
    if (nd->host)
        REDIS_OPTIONS_SET_TCP(&o, nd->host, nd->port);
    else if (c->t.ep.path)
        REDIS_OPTIONS_SET_UNIX(&o, c->t.ep.path);
    else
        REDIS_OPTIONS_SET_TCP(&o, c->t.ep.host, c->t.ep.port);
    /* Command timeouts are ours (as_req deadlines): hiredis's would drop the
     * connection, and an attempt that timed out is settled on it. */
    struct timeval ct = ms_tv(c->t.opts.connect_timeout_ms);
    o.connect_timeout = &ct;
    o.options |= REDIS_OPT_NOAUTOFREEREPLIES;
    redisAsyncContext *ac = redisAsyncConnectWithOptions(&o);
    if (!ac || ac->err) {
        snprintf(a->errmsg, sizeof a->errmsg, "cannot connect: %s",
                 ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        free(k);
        return NULL;
    }
    if (c->t.ep.tls) {
        int code = 0;
        char err[HL_ERRMSG_MAX];
        const char *host = nd->host ? nd->host : c->t.ep.host ? c->t.ep.host : "localhost";
        if (hl_tls_start(c->t.ep.tls_ctx, &ac->c, host, c->t.ep.tls_server_name, &code, err)) {
            snprintf(a->errmsg, sizeof a->errmsg, "%s", err);
            redisAsyncFree(ac);
            free(k);
            return NULL;
        }
        k->tls = 1;
    }
    hl_reader_bound(ac->c.reader);
    hl_fd_cloexec(ac->c.fd); /* a child the process execs does not keep it open */
    k->ac = ac;
    k->fd = ac->c.fd;
    ac->data = k;
    ac->dataCleanup = conn_gone;
    ac->ev.data = k;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    ac->ev.scheduleTimer = ev_timer;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    k->next = a->conns;
    a->conns = k;
    if (pubsub) {
        nd->sub = k;
        hl_sublive_opened(&nd->live, now_ms()); /* not alive until heard */
        if (!nd->sentinel && !a->closing)
            holds_sync(nd->link);
    } else {
        nd->cmd = k;
    }
    hl_cmd hs[HL_HANDSHAKE_MAX];
    int n = nd->sentinel ? (c->t.ep.sentinel_password || c->t.ep.sentinel_user
                                ? hl_cmd_handshake(hs, c->t.ep.sentinel_user,
                                                   c->t.ep.sentinel_password
                                                       ? c->t.ep.sentinel_password
                                                       : "",
                                                   0)
                                : 0)
                         : hl_cmd_handshake(hs, c->t.ep.user, c->t.ep.password, c->t.ep.db);
    for (int i = 0; i < n; i++)
        redisAsyncCommandArgv(ac, hs_cb, NULL, hs[i].argc, hs[i].argv, hs[i].argvlen);
    if (pubsub && nd->link->mode == HL_MODE_CLUSTER) {
        redisAsyncSetPushCallback(ac, sub_push_cb);
        redisAsyncCommand(ac, hello_cb, NULL, "HELLO 3");
    }
    /* the first command asks for write readiness: the connect completes */
    ev_add_write(k);
    return k;
}

/* Free the records of connections hiredis has freed. A settle still on
 * one (the server reset it right after answering the attempt, say) lets go
 * of it first: its requests went with the connection, and its machine is
 * stepped to say what now (a new connection). */
static void conns_reap(hilock_async *a)
{
    for (as_conn **pp = &a->conns; *pp;) {
        as_conn *k = *pp;
        if (!k->ac) {
            for (as_settle *st = a->settles; st && k->nsettles > 0; st = st->next)
                if (st->conn == k) {
                    st->conn = NULL;
                    st->pending = 0;
                    st->ready = 1;
                    k->nsettles--;
                }
            *pp = k->next;
            free(k);
        } else {
            pp = &k->next;
        }
    }
}

/* ---- sending ---- */

static void op_reply_cb(redisAsyncContext *ac, void *reply, void *priv);

/* A connection failed: on TLS, was it OpenSSL refusing (certificate not
 * verified, refused by the server)? Read once, when the failure is fresh. */
static void conn_failed(as_conn *k)
{
    if (k && k->tls && !k->tls_refused && hl_tls_refused(k->tls_err, sizeof k->tls_err))
        k->tls_refused = 1;
}

/* A request record at the end of k's FIFO (timeout_ms > 0: its deadline). */
/* A request record at the end of k's FIFO, for the command about to be
 * appended to k's output. Its deadline (timeout_ms > 0) starts when its
 * first byte is written (conn_wrote), not now: a command queued behind
 * thousands of others is not given up before it ever left. */
static as_req *req_new(as_conn *k, int64_t timeout_ms)
{
    as_req *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    if (heap_join(k->a) != 0) {
        free(q);
        return NULL;
    }
    q->conn = k;
    q->tmr.kind = AS_TMR_REQ;
    q->timeout_ms = timeout_ms;
    q->deadline = -1;
    /* its place in the output: after what was written and what hiredis holds */
    q->start_off = k->out_written + (k->ac && k->ac->c.obuf ? sdslen(k->ac->c.obuf) : 0);
    if (!k->unstamped)
        k->unstamped = q;
    *k->reqs_tail = q;
    k->reqs_tail = &q->next;
    return q;
}

/* Take q out of its connection's FIFO (then it is freed). Replies come in
 * order, so it is nearly always the first. */
static void req_arm(as_req *q, int64_t now);

static void req_unlink(as_req *q)
{
    as_conn *k = q->conn;
    int head = k->reqs == q;
    if (k->unstamped == q)
        k->unstamped = q->next;
    heap_leave(k->a, &q->tmr);
    for (as_req **pp = &k->reqs; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            if (!q->next)
                k->reqs_tail = pp;
            break;
        }
    /* the next one's turn: its deadline runs from now (or from when it
     * was written, if later) */
    if (head && k->reqs && k->reqs != k->unstamped && k->reqs->start_off < k->out_written)
        req_arm(k->reqs, now_ms());
}

/* q is written and every request before it on its connection answered:
 * its deadline starts. */
static void req_arm(as_req *q, int64_t now)
{
    if (q->timeout_ms > 0 && !q->tmr.pos) {
        q->deadline = now + q->timeout_ms;
        tmr_set(q->conn->a, &q->tmr, q->deadline);
    }
}

/* k wrote some of its output (progressed: at least one byte): the requests
 * whose bytes began to go are written; the first unanswered one's deadline
 * runs (the next one's when it is answered: a request waits for the
 * replies before its own, on the server, without being timed out for the
 * queue ahead of it as long as the server keeps answering); output still waiting with
 * no byte written for the command timeout times the connection out (a
 * peer that stopped reading). */
static void conn_stamp(as_conn *k, int64_t now, int progressed)
{
    while (k->unstamped && k->unstamped->start_off < k->out_written) {
        as_req *q = k->unstamped;
        k->unstamped = q->next;
        if (k->reqs == q)
            req_arm(q, now);
    }
    if (!k->ac || !k->ac->c.obuf || sdslen(k->ac->c.obuf) == 0 || !k->connected ||
        k->cmd_timeout_ms <= 0)
        k->write_stall_at = -1; /* nothing the socket refused */
    else if (progressed || k->write_stall_at < 0)
        k->write_stall_at = now + k->cmd_timeout_ms;
}

/* Read every reply k's socket holds now (replies the loop has not
 * delivered yet, the application having been busy). */
static void conn_read_all(as_conn *k)
{
    for (int i = 0; i < 4096 && k->ac && k->fd >= 0; i++) {
        int avail = 0;
        if (ioctl(k->fd, FIONREAD, &avail) != 0 || avail <= 0)
            return;
        redisAsyncHandleRead(k->ac);
    }
}

/* hiredis writes what k's output holds (as much as the socket takes);
 * the requests whose bytes began to go get their deadlines. */
static void conn_write(as_conn *k)
{
    size_t before = k->ac->c.obuf ? sdslen(k->ac->c.obuf) : 0;
    redisAsyncHandleWrite(k->ac);
    if (!k->ac) /* it failed and hiredis freed it */
        return;
    size_t after = k->ac->c.obuf ? sdslen(k->ac->c.obuf) : 0;
    if (after < before)
        k->out_written += before - after;
    conn_stamp(k, now_ms(), after < before);
}

/* Earlier attempts of a's on nd whose reply timed out and which are still
 * being settled (at nd's present address). */
static int settling_on(const hilock_async *a, const as_node *nd)
{
    int n = 0;
    for (const as_settle *st = a->settles; st; st = st->next)
        n += st->node == nd && st->addr_gen == nd->addr_gen;
    return n;
}

/* The engine's rule before an acquire attempt goes to nd (hl_settle_gate,
 * as drain.c's and hilock.aio's): while earlier attempts there are still
 * being settled, the server (or the way to it) is stalled, and one more
 * attempt would only park one more connection there. A call with a limit
 * of its own (a multi-lock member's try: op->timeout_ms) fails at once;
 * others wait for the settle to end (settle_free wakes them) up to the
 * command timeout, then fail. 0 send, 1 wait (until op->route_at), -1
 * fail (op->err set). */
static int op_gate(as_op *op, as_node *nd)
{
    hilock_client *c = op->link->client;
    int64_t wait = hl_settle_gate(settling_on(op->a, nd), op->timeout_ms > 0 || op->gated != NULL,
                                  c->t.opts.command_timeout_ms);
    if (wait < 0) {
        op->gated = NULL;
        return 0;
    }
    if (wait > 0) {
        op->gated = nd;
        op->route_at = now_ms() + wait;
        return 1;
    }
    op->gated = NULL;
    const char *host = nd->host ? nd->host : c->t.ep.host;
    if (host)
        snprintf(op->err, sizeof op->err,
                 "server %s:%d has not answered an earlier attempt yet (still being settled); "
                 "no new attempt sent to it",
                 host, nd->host ? nd->port : c->t.ep.port);
    else
        snprintf(op->err, sizeof op->err,
                 "server unix:%s has not answered an earlier attempt yet (still being settled); "
                 "no new attempt sent to it",
                 c->t.ep.path ? c->t.ep.path : "?");
    return -1;
}

/* Send *cmd for op on the command connection of the server it routes to
 * (again: a resend of the same command, which keeps the router's count);
 * 0 (sent, or parked until the topology is known) or an error code. */
static int op_send_to(as_op *op, hl_cmd *cmd, int again)
{
    if (!again)
        hl_router_init(&op->rt, op->link->mode);
    as_node *nd = NULL;
    int r = hl_as_route(op, cmd, &nd);
    if (r == 1) { /* parked: sent again (resend) once the topology is known */
        op->sent = cmd;
        op->req = NULL;
        return 0;
    }
    if (r)
        return r;
    if (op->type == OP_ACQUIRE && hl_cmd_is_attempt(cmd)) {
        int g = op_gate(op, nd);
        if (g > 0) { /* held back until a settle there ends, or route_at */
            op->sent = cmd;
            op->req = NULL;
            return 0;
        }
        if (g < 0)
            return HILOCK_ECONN;
    }
    int asking = op->ask != NULL;
    op->ask = NULL;
    op->last_node = nd;
    as_conn *k = conn_get(op->a, nd, 0);
    if (!k) {
        snprintf(op->err, sizeof op->err, "%s", op->a->errmsg);
        return HILOCK_ECONN;
    }
    if (asking) { /* one command during a slot migration: its reply is dropped */
        hl_cmd ask;
        hl_cmd_asking(&ask);
        as_req *aq = req_new(k, k->cmd_timeout_ms);
        if (!aq)
            return HILOCK_ENOMEM;
        aq->asking = 1;
        if (redisAsyncCommandArgv(k->ac, op_reply_cb, aq, ask.argc, ask.argv, ask.argvlen) !=
            REDIS_OK) {
            req_unlink(aq);
            free(aq);
            return HILOCK_ECONN;
        }
    }
    as_req *q = req_new(k, op->timeout_ms > 0 ? op->timeout_ms
                                              : op->link->client->t.opts.command_timeout_ms);
    if (!q)
        return HILOCK_ENOMEM;
    q->op = op;
    op->sent = cmd;
    op->req = q;
    op->sent_at = now_ms();
    op->attempt = hl_cmd_is_attempt(cmd);
    if (redisAsyncCommandArgv(k->ac, op_reply_cb, q, cmd->argc, cmd->argv, cmd->argvlen) !=
        REDIS_OK) {
        req_unlink(q);
        free(q);
        op->sent = NULL;
        op->req = NULL;
        return HILOCK_ECONN;
    }
    return 0;
}

static int op_send(as_op *op, hl_cmd *cmd)
{
    return op_send_to(op, cmd, 0);
}

static void feed_error(as_op *op, int code, int lost);
static void feed_reply(as_op *op, redisReply *r);

static void settle_feed(as_settle *st, redisReply *r);

/* An acknowledgement reply for op (NULL: none came); once the machine is
 * done, the attempt's kept reply goes to op's acquire machine. */
static void ack_feed(as_op *op, redisReply *r)
{
    op->req = NULL;
    if (hl_as_ack_feed(op, r)) {
        redisReply *kept = op->ack_reply;
        op->ack_reply = NULL;
        op->acking = 0;
        feed_reply(op, kept);
        freeReplyObject(kept);
    }
    op_queue(op);
}

static void op_reply_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    as_conn *k = ac->data;
    as_req *q = priv;
    redisReply *r = reply;
    as_op *op = q->op;
    as_settle *st = q->settle;
    as_link *probe = q->probe;
    int ack = q->ack;
    req_unlink(q);
    free(q);
    if (k && k->a->closing)
        op = NULL, st = NULL, probe = NULL;
    if (st) {
        settle_feed(st, r); /* takes r */
        return;
    }
    if (probe) {
        hl_as_probe_reply(probe, r, 0); /* takes r */
        return;
    }
    if (!op) { /* abandoned: its operation went on without it */
        if (r)
            freeReplyObject(r);
        return;
    }
    if (ack) { /* the replica acknowledgement of op's attempt */
        ack_feed(op, r);
        return;
    }
    hl_cmd *cmd = op->sent;
    int rc_route = 0;
    op->sent = NULL;
    op->req = NULL;
    if (!r && cmd && hl_as_route_conn_error(op, k)) {
        op->sent = cmd; /* nothing reached a server: sent again */
    } else if (!r) {
        conn_failed(k);
        int code = k && k->hs_code ? k->hs_code : k && k->tls_refused ? HILOCK_ETLS : HILOCK_ECONN;
        if (code == HILOCK_ETLS)
            snprintf(op->err, sizeof op->err, "TLS: %s", k->tls_err);
        else if (k && k->unwatched)
            snprintf(op->err, sizeof op->err, "the event loop refused to watch descriptor %d",
                     k->fd);
        else
            snprintf(op->err, sizeof op->err, "%s",
                     k && k->hs_code ? op->a->errmsg
                     : ac->errstr[0] ? ac->errstr : "connection lost");
        feed_error(op, code, 1);
    } else if (k && k->hs_code) {
        freeReplyObject(r);
        feed_error(op, k->hs_code, 0);
    } else if (cmd && r->type == REDIS_REPLY_ERROR && (rc_route = hl_as_route_reply(op, k, r))) {
        /* redirected, retried or failed over (r freed) */
        if (rc_route > 0)
            op->sent = cmd;
        else
            feed_error(op, HILOCK_ECONN, 0);
    } else if (cmd && hl_cmd_eval_fallback(cmd, r)) {
        /* the server lost its scripts: send the body (as hl_exec does),
         * for each command of the operation that meets NOSCRIPT */
        freeReplyObject(r);
        op->sent = cmd;
        op->resend = 1;
    } else if (((op->attempt && op->type == OP_ACQUIRE) || op->type == OP_RENEW) &&
               hl_as_ack_start(op, k, r)) {
        /* r is fed once a replica acknowledged (or not): an attempt's grant
         * or a renewal no replica took is not a confirmation */
        op->acking = 1;
    } else {
        if (r->type == REDIS_REPLY_ERROR && r->str)
            snprintf(op->err, sizeof op->err, "server error: %s", r->str);
        feed_reply(op, r);
        freeReplyObject(r);
    }
    op_queue(op);
}

/* ---- settling attempts whose reply timed out ---- */

/* Close k now (not from inside a hiredis callback): hiredis answers its
 * remaining requests with NULL (abandoned ones are dropped); a pub/sub
 * connection takes its subscriptions along. */
static void conn_unhook(as_conn *k)
{
    if (k->node) {
        if (k->node->cmd == k)
            k->node->cmd = NULL;
        if (k->node->sub == k) {
            k->node->sub = NULL;
            chan_drop_waiters_sub(k->node);
        }
    }
    k->node = NULL;
}

static void conn_close(as_conn *k)
{
    conn_unhook(k);
    if (k->ac)
        redisAsyncFree(k->ac);
}

void hl_as_conn_close(as_conn *k)
{
    conn_close(k);
}

void hl_as_conn_detach(as_conn *k)
{
    conn_unhook(k);
    if (k->ac && !(k->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)))
        redisAsyncDisconnect(k->ac);
}

static void settle_free(as_settle *st)
{
    hilock_async *a = st->a;
    for (as_settle **pp = &a->settles; *pp; pp = &(*pp)->next)
        if (*pp == st) {
            *pp = st->next;
            break;
        }
    /* attempts held back for it (op_gate) ask the gate again now */
    for (as_op *op = a->closing ? NULL : a->ops; op; op = op->next)
        if (op->gated && op->gated == st->node && op->route_at >= 0) {
            op->route_at = now_ms();
            hl_as_op_sync(op);
        }
    if (st->conn) {
        for (as_req *q = st->conn->reqs; q; q = q->next)
            if (q->settle == st)
                q->settle = NULL;
        st->conn->nsettles--;
    }
    hl_settle_free(&st->s);
    free(st);
}

/* Take over request q (an acquire attempt of op that got no reply in time)
 * for settling on its connection. 0, or -1 (then it is not settled here). */
static int settle_start(as_req *q, as_op *op)
{
    hilock_async *a = op->a;
    hilock_client *c = op->link->client;
    as_settle *st = calloc(1, sizeof *st);
    if (!st)
        return -1;
    uint64_t seq = __atomic_add_fetch(&c->t.request_seq, 1, __ATOMIC_RELAXED);
    snprintf(st->rid, sizeof st->rid, "%s:%" PRIu64, c->t.id, seq);
    if (hl_settle_init(&st->s, &op->acq.cmd, op->lock->names.publish, st->rid,
                       c->t.opts.command_timeout_ms, now_ms()) != 0) {
        free(st);
        return -1;
    }
    st->a = a;
    st->node = q->conn->node;
    st->addr_gen = st->node ? st->node->addr_gen : 0;
    st->conn = q->conn;
    st->pending = 1; /* the attempt's own late reply */
    /* the session keeps it unsettled while this runs: the owner's next
     * acquire of the lock waits for it, or takes it over */
    st->rec = hl_unsettled_put(&a->unsettled, op->lock->names.name, op->owner,
                               op->latch[0] ? op->latch : NULL, op->acq.latch_ttl_ms,
                               op->lease_ms, 1, now_ms());
    q->conn->nsettles++;
    q->op = NULL;
    q->settle = st;
    st->next = a->settles;
    a->settles = st;
    st->ready = 1;
    return 0;
}

/* u's settle gave up (u not settling): the session may have it settled
 * once more now, on its own (hl_unsettled_background), on a new connection
 * to nd, the server of the lock (kind, names) the attempt was sent to. */
static void settle_background(hilock_async *a, hl_unsettled_acq *u, hilock_client *c,
                              hilock_kind kind, const hl_names *names, as_node *nd)
{
    if (!u || !nd || a->closing || !hl_unsettled_background(&a->unsettled, u))
        return;
    int64_t now = now_ms();
    as_settle *st = calloc(1, sizeof *st);
    if (st) {
        uint64_t seq = __atomic_add_fetch(&c->t.request_seq, 1, __ATOMIC_RELAXED);
        snprintf(st->rid, sizeof st->rid, "%s:%" PRIu64, c->t.id, seq);
        if (hl_settle_init_unsettled(&st->s, kind, names, u, names->publish, st->rid,
                                     c->t.opts.command_timeout_ms, now) != 0) {
            free(st);
            st = NULL;
        }
    }
    if (!st) {
        hl_unsettled_settle_end(&a->unsettled, u, 0, now);
        return;
    }
    st->a = a;
    st->node = nd;
    st->addr_gen = nd->addr_gen;
    st->rec = u;
    st->background = 1;
    st->next = a->settles;
    a->settles = st;
    st->ready = 1;
}

/* st leaves its connection (the machine said it is dead: s.reconnect):
 * its requests there are dropped, and the connection is closed when no
 * other settle uses it and it was taken out of use. Not from inside a
 * hiredis callback. */
static void settle_detach(as_settle *st)
{
    as_conn *k = st->conn;
    if (!k)
        return;
    st->conn = NULL;
    st->pending = 0;
    for (as_req *q = k->reqs; q; q = q->next)
        if (q->settle == st)
            q->settle = NULL;
    if (--k->nsettles == 0 && k->draining)
        conn_close(k);
}

static void settle_reply_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    op_reply_cb(ac, reply, priv); /* the same records: it finds q->settle */
}

/* A reply (NULL: none) for st; run from a hiredis callback: only feed. */
static void settle_feed(as_settle *st, redisReply *r)
{
    int64_t now = now_ms();
    st->pending--;
    if (st->waiting) {
        st->waiting = 0;
        if (r)
            hl_settle_on_reply(&st->s, r, now);
        else
            hl_settle_on_error(&st->s, now);
    }
    /* a reply nobody waits for (the machine already moved on) is dropped */
    if (r)
        freeReplyObject(r);
    st->ready = 1;
}

/* The settle of u (an as_settle's or an operation's resettle) ended: the
 * session is told, and the acquires that waited for it go on. */
static void settle_ended(hilock_async *a, hl_unsettled_acq *u, int settled, int64_t now)
{
    if (u)
        hl_unsettled_settle_end(&a->unsettled, u, settled, now);
    for (as_op *op = a->ops; op; op = op->next)
        if (op->pre_wait && op->waiting && !op->done) {
            op->waiting = 0;
            op_queue(op);
        }
}

/* The settle running for u, or NULL (an operation's resettle, or none). */
static as_settle *settle_of(hilock_async *a, const hl_unsettled_acq *u)
{
    for (as_settle *st = a->settles; st; st = st->next)
        if (st->rec == u)
            return st;
    return NULL;
}

/* Work st's machine: send on its connection, wait, or finish. */
static void settle_step(as_settle *st)
{
    st->ready = 0;
    for (;;) {
        int64_t now = now_ms();
        switch (hl_settle_next(&st->s, now)) {
        case HL_ACT_SEND: {
            as_conn *k = st->conn;
            if (st->s.reconnect || !k || !k->ac) {
                /* on a new connection to the same server (drain.c's rule) */
                settle_detach(st);
                k = st->node ? conn_get(st->a, st->node, 0) : NULL;
                if (k) {
                    st->conn = k;
                    k->nsettles++;
                }
            }
            /* timed like any request: on a new connection it may be the
             * first, and a command behind it is timed only from its answer */
            as_req *q = k && k->ac ? req_new(k, k->cmd_timeout_ms) : NULL;
            if (!q || redisAsyncCommandArgv(k->ac, settle_reply_cb, q, st->s.cmd.argc,
                                            st->s.cmd.argv, st->s.cmd.argvlen) != REDIS_OK) {
                if (q) {
                    req_unlink(q);
                    free(q);
                }
                hl_settle_on_error(&st->s, now);
                continue;
            }
            q->settle = st;
            st->pending++;
            continue;
        }
        case HL_ACT_WAIT:
            if (st->s.reconnect) {
                settle_detach(st); /* a pause before a new connection: the timer */
            } else if (st->pending <= 0 || !st->conn || !st->conn->ac) {
                hl_settle_on_error(&st->s, now); /* nothing can come */
                continue;
            }
            st->waiting = 1;
            st->wait_until = now + (st->s.sleep_ms > 0 ? st->s.sleep_ms : 0);
            return;
        default: { /* done: a connection taken out of use goes when its last
                      settle is done */
            as_conn *k = st->conn;
            hl_unsettled_acq *u = st->s.settled ? NULL : st->rec;
            settle_ended(st->a, st->rec, st->s.settled, now);
            /* gave up: once more on its own, perhaps (the session says) */
            if (u && st->node)
                settle_background(st->a, u, st->node->link->client, st->s.kind, &st->s.names,
                                  st->node);
            settle_free(st);
            if (k && k->nsettles == 0 && k->draining)
                conn_close(k);
            return;
        }
        }
    }
}

/* A command on k got no reply in time: no new command goes there; every
 * operation waiting on it is told (an acquire attempt ends with
 * HILOCK_ECONN and is settled on k, after which k is closed). */
static void conn_timed_out(as_conn *k, int64_t now)
{
    k->draining = 1;
    if (k->node && k->node->cmd == k)
        k->node->cmd = NULL;
    for (as_req *q = k->reqs; q; q = q->next) {
        if (q->probe) { /* a topology question: the next candidate */
            as_link *lk = q->probe;
            q->probe = NULL;
            hl_as_probe_reply(lk, NULL, 1);
            continue;
        }
        if (q->settle) {
            /* a settle's own request (its undo or acquire_settle.lua, on a
             * connection it moved to: the one it started on is draining and
             * never times out again): that connection is stalled, as if it
             * died (the machine goes on to a new one, or gives up), so the
             * settle does not hold new attempts back until HL_SETTLE_MAX_MS */
            as_settle *st = q->settle;
            q->settle = NULL;
            settle_feed(st, NULL);
            continue;
        }
        as_op *op = q->op;
        if (!op)
            continue;
        q->op = NULL;
        op->req = NULL;
        if (q->ack) { /* no acknowledgement in time: not acknowledged */
            q->ack = 0;
            ack_feed(op, NULL);
            continue;
        }
        op->sent = NULL;
        {
            hilock_client *oc = op->link->client;
            as_node *nd = k->node;
            char where[300];
            if (nd && nd->host)
                snprintf(where, sizeof where, "%s:%d", nd->host, nd->port);
            else if (oc->t.ep.host)
                snprintf(where, sizeof where, "%s:%d", oc->t.ep.host, oc->t.ep.port);
            else
                snprintf(where, sizeof where, "unix:%s", oc->t.ep.path ? oc->t.ep.path : "?");
            hl_msg_no_reply(op->err, sizeof op->err, oc->t.opts.command_timeout_ms, where);
        }
        if (op->type == OP_ACQUIRE && op->attempt) /* its late copy must find its latch */
            __atomic_add_fetch(&op->lock->client->t.latch_epoch, 1, __ATOMIC_RELAXED);
        if (op->type == OP_ACQUIRE && op->attempt && settle_start(q, op) == 0)
            hl_acquire_on_unknown(&op->acq, HILOCK_ECONN, now);
        else /* sent, no answer: the server may still run it (a late copy) */
            feed_error(op, HILOCK_ECONN,
                       (op->type == OP_ACQUIRE && (op->attempt || op->ack_phase)) ||
                           op->type == OP_EXT || op->type == OP_RELEASE);
        op_queue(op);
    }
    if (k->nsettles == 0)
        conn_close(k);
}

/* Deadlines of requests, settles' waits and subscriptions. */
static void check_deadlines(hilock_async *a, int64_t now)
{
    /* requests: the heap (run_timers); here output that stopped going */
    for (as_conn *k = a->conns; k; k = k->next)
        if (k->ac && !k->draining && !k->pubsub && k->write_stall_at >= 0 &&
            k->write_stall_at <= now) {
            k->write_stall_at = -1;
            conn_timed_out(k, now);
        }
    for (as_settle *st = a->settles; st; st = st->next)
        if (st->waiting && st->wait_until <= now) {
            st->waiting = 0; /* the machine decides: give up, or end a pause */
            st->ready = 1;
        }
    for (as_link *lk = a->links; lk; lk = lk->next)
        for (as_node *nd = lk->nodes; nd; nd = nd->next)
            for (as_chan *ch = nd->chans; ch; ch = ch->next)
                if (ch->deadline >= 0 && ch->deadline <= now && nd->sub) {
                    /* a (un)subscription the server does not confirm: drop the
                     * connection; the waiters fall back to timed retries */
                    conn_close(nd->sub);
                    break;
                }
}

/* ---- holds and the watchdog ---- */

static size_t hold_hash(const hilock_lock *l, uint64_t tid)
{
    uint64_t x = (uint64_t)(uintptr_t)l ^ (tid * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (size_t)x;
}

as_hold *hl_as_hold_find(hilock_async *a, const hilock_lock *l, uint64_t tid)
{
    if (!a->hcap)
        return NULL;
    for (as_hold *h = a->hbuckets[hold_hash(l, tid) & (a->hcap - 1)]; h; h = h->hnext)
        if (h->lock == l && h->tid == tid)
            return h;
    return NULL;
}

/* h into the (lock, tid) table, grown to keep about one hold per bucket
 * (when it cannot grow, the buckets get longer); 0 or -1 (no table). */
static int hold_index(hilock_async *a, as_hold *h)
{
    if (a->nholds >= a->hcap) {
        size_t cap = a->hcap ? a->hcap * 2 : 64;
        as_hold **b = calloc(cap, sizeof *b);
        if (b) {
            for (as_hold *o = a->holds; o; o = o->next) {
                size_t i = hold_hash(o->lock, o->tid) & (cap - 1);
                o->hnext = b[i];
                b[i] = o;
            }
            free(a->hbuckets);
            a->hbuckets = b;
            a->hcap = cap;
        } else if (!a->hcap) {
            return -1;
        }
    }
    size_t i = hold_hash(h->lock, h->tid) & (a->hcap - 1);
    h->hnext = a->hbuckets[i];
    a->hbuckets[i] = h;
    a->nholds++;
    h->next = a->holds;
    h->prev = NULL;
    if (a->holds)
        a->holds->prev = h;
    a->holds = h;
    return 0;
}

/* lk's timer: its hold table's next deadline (a renewal, a doubt, a check
 * due), or when holds listen on their channels again. */
static void holds_sync(as_link *lk)
{
    int64_t at = min_at(min_at(hl_holds_next(&lk->holds), lk->observe_at), lk->expire_at);
    for (as_node *nd = lk->nodes; nd; nd = nd->next)
        at = min_at(at, hl_sublive_next(&nd->live));
    tmr_set(lk->a, &lk->tmr, at);
}

/* When h's fixed lease ends (-1: a watchdog hold, or not in the table). */
static int64_t fixed_end(const as_hold *h)
{
    if (!h->s.in_table || h->s.watchdog || h->s.lease_ms <= 0)
        return -1;
    return h->s.confirmed_at + h->s.lease_ms;
}

static void hold_unobserve(hilock_async *a, as_hold *h);

/* The holds of lk whose fixed lease ended stop listening (nothing of theirs
 * is left to check); lk->expire_at follows the ones still listening. */
static void holds_expire(hilock_async *a, as_link *lk, int64_t now)
{
    if (lk->expire_at < 0 || lk->expire_at > now)
        return;
    lk->expire_at = -1;
    for (as_hold *h = a->holds; h; h = h->next) {
        int64_t end = h->link == lk && (h->chan || h->observe) ? fixed_end(h) : -1;
        if (end < 0)
            continue;
        if (end <= now)
            hold_unobserve(a, h);
        else
            lk->expire_at = min_at(lk->expire_at, end);
    }
}

/* h listens on its lock's channel (hl_hold_channel), shared with the
 * waiters and other holds of the name on this client: what is heard there
 * goes to the session (hl_holds_heard), which has h checked after a force
 * unlock. 0, or -1: not now (h listens again at its link's observe_at). */
static int hold_observe(hilock_async *a, as_hold *h)
{
    if (h->chan || !h->s.in_table)
        return 0;
    int64_t end = fixed_end(h);
    if (end >= 0 && end <= now_ms())
        return 0; /* its fixed lease ended: nothing to listen for */
    const char *name = hl_hold_channel(h->lock->kind, &h->lock->names);
    as_node *nd = hl_as_route_hold_channel(h->link, name);
    if (!nd)
        return -1;
    /* (a channel it makes wakes the lock kinds' waiters) */
    as_chan *ch = chan_open(a, nd, name, HL_WAKE_LOCK);
    if (!ch)
        return -1;
    ch->refs++;
    h->chan = ch;
    h->oprev = NULL;
    h->onext = ch->observers;
    if (ch->observers)
        ch->observers->oprev = h;
    ch->observers = h;
    if (ch->state == CH_SUBSCRIBED) {
        /* subscribed already (waiters of the name): a message processed
         * before h listened went unheard by h, as if it just subscribed */
        hl_holds_check(&h->link->holds, &h->s, now_ms());
    }
    return 0;
}

static void observer_unlink(as_hold *h)
{
    as_chan *ch = h->chan;
    if (h->oprev)
        h->oprev->onext = h->onext;
    else
        ch->observers = h->onext;
    if (h->onext)
        h->onext->oprev = h->oprev;
    h->onext = h->oprev = NULL;
    h->chan = NULL;
}

/* h no longer listens (released, lost, forgotten). */
static void hold_unobserve(hilock_async *a, as_hold *h)
{
    h->observe = 0;
    as_chan *ch = h->chan;
    if (!ch)
        return;
    observer_unlink(h);
    chan_unref(a, ch);
}

/* ch's subscription went: its holds listen again after a pause. */
static void observers_drop(as_chan *ch)
{
    while (ch->observers) {
        as_hold *h = ch->observers;
        observer_unlink(h);
        ch->refs--;
        h->observe = 1;
        as_link *lk = h->link;
        int64_t at = hl_holds_observe_again_at(now_ms()); /* the session's pause */
        if (lk->observe_at < 0 || lk->observe_at > at)
            lk->observe_at = at;
        holds_sync(lk);
    }
}

/* What ch's holds heard (a message, the subscription confirmed, the slot
 * moved): the session decides which to check; the checks go out at the
 * link's timer, now. */
static void observers_heard(as_chan *ch, const hl_ps_event *ev)
{
    int64_t now = now_ms();
    for (as_hold *h = ch->observers; h; h = h->onext)
        if (hl_holds_heard(&h->link->holds, &h->s, ev, now))
            holds_sync(h->link);
}

/* lk's holds whose subscription went listen again (at lk->observe_at). */
static void holds_observe_again(hilock_async *a, as_link *lk, int64_t now)
{
    if (lk->observe_at < 0 || lk->observe_at > now)
        return;
    lk->observe_at = -1;
    for (as_hold *h = a->holds; h; h = h->next) {
        if (h->link != lk || !h->observe)
            continue;
        if (!h->s.in_table) {
            h->observe = 0;
            continue;
        }
        if (hold_observe(a, h) == 0) {
            h->observe = 0;
        } else if (lk->observe_at < 0) {
            lk->observe_at = hl_holds_observe_again_at(now);
        }
    }
}

static void hold_remove(hilock_async *a, as_hold *h)
{
    for (as_hold **pp = &a->hbuckets[hold_hash(h->lock, h->tid) & (a->hcap - 1)]; *pp;
         pp = &(*pp)->hnext)
        if (*pp == h) {
            *pp = h->hnext;
            break;
        }
    a->nholds--;
    if (h->prev)
        h->prev->next = h->next;
    else
        a->holds = h->next;
    if (h->next)
        h->next->prev = h->prev;
    hold_unobserve(a, h);
    hl_holds_remove(&h->link->holds, &h->s);
    holds_sync(h->link);
    if (h->checking) /* its check's answer too */
        h->checking->check = NULL;
    if (h->renewing) /* its renewal's outcome is nobody's now */
        for (size_t i = 0; i < h->renewing->renew->n; i++)
            if (h->renewing->renew->holds[i] == h)
                h->renewing->renew->holds[i] = NULL;
    free(h);
}

static int hold_granted(as_op *op, int64_t sent_at)
{
    hilock_async *a = op->a;
    as_hold *h = hl_as_hold_find(a, op->lock, op->tid);
    int made = !h;
    if (made) {
        if (!(h = calloc(1, sizeof *h)))
            return HILOCK_ENOMEM;
        hl_hold_init(&h->s, h, 0);
        /* its renewal command: a read side's alone, others with the holds
         * on the same node (one slot on Redis Cluster) */
        h->s.alone = hl_renew_alone(op->lock->kind);
        h->s.batch = op->link->mode == HL_MODE_CLUSTER
                         ? hl_key_slot(op->lock->names.name, strlen(op->lock->names.name))
                         : 0;
        h->lock = op->lock;
        h->tid = op->tid;
        h->link = op->link;
        memcpy(h->owner, op->owner, sizeof h->owner);
        if (hold_index(a, h) != 0) {
            free(h);
            return HILOCK_ENOMEM;
        }
    }
    /* the engine's session decides its renewals and its doubt */
    if (hl_holds_grant(&h->link->holds, &h->s, op->watchdog, op->lease_ms, sent_at) != 0) {
        if (made)
            hold_remove(a, h);
        return HILOCK_ENOMEM;
    }
    /* in the table first, so that the confirmation of its subscription
     * applies to it; not listening (no connection now) only means later */
    if (!h->chan && hold_observe(a, h) != 0) {
        h->observe = 1;
        int64_t at = hl_holds_observe_again_at(now_ms()); /* the session's pause */
        if (h->link->observe_at < 0 || h->link->observe_at > at)
            h->link->observe_at = at;
    }
    /* a fixed lease: it stops listening when the lease ends */
    h->link->expire_at = min_at(h->link->expire_at, fixed_end(h));
    holds_sync(h->link);
    return 0;
}

struct as_lost *hl_as_queue_report(hilock_async *a, hilock_lock *l, hilock_multilock *m,
                                     uint64_t tid, int64_t silent_ms)
{
    struct as_lost *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->lock = l;
    e->m = m;
    e->tid = tid;
    e->silent_ms = silent_ms;
    struct as_lost **pp = &a->lost_q;
    while (*pp)
        pp = &(*pp)->next;
    *pp = e;
    return e;
}

/* The hold of (l, tid) is lost (silent_ms < 0) or in doubt: report it, and
 * the multi-lock holds it belongs to when they are lost by that. */
static void queue_lost(hilock_async *a, hilock_lock *l, uint64_t tid, int64_t silent_ms)
{
    hl_as_queue_report(a, l, NULL, tid, silent_ms);
    hl_as_ml_member_lost(a, l, tid, silent_ms);
}

/* The holds of lk the session found lost (a renewal's or a check's
 * answer) are reported, and listen no more. */
static void report_lost(hilock_async *a, as_link *lk)
{
    hl_hold *s;
    while ((s = hl_holds_lost_next(&lk->holds))) {
        as_hold *g = s->ref;
        hold_unobserve(a, g);
        queue_lost(a, g->lock, g->tid, -1);
    }
    holds_sync(lk);
}

/* A check of hold h (the session handed it out: a message on its lock's
 * channel, its subscription confirmed): "is its field still there?"
 * (hl_cmd_hold_check; no renewal). */
static void check_send(hilock_async *a, as_link *lk, as_hold *h)
{
    as_op *op = hl_as_op_new(a, OP_CHECK, h->lock, h->tid, NULL, NULL);
    if (!op) { /* nothing known: the renewals and the doubt timer go on */
        hl_holds_check_outcome(&lk->holds, &h->s, -1);
        return;
    }
    op->link = lk;
    op->check = h;
    h->checking = op;
    memcpy(op->owner, h->owner, sizeof op->owner);
    hl_cmd_hold_check(&op->cmd, &h->lock->names, op->owner);
    op_queue(op);
}

/* The end of check op: the session takes the answer (gone 1, 0, or -1:
 * none); a hold found gone is reported lost. */
static void check_outcome(as_op *op, int gone)
{
    as_hold *h = op->check;
    if (!h)
        return;
    op->check = NULL;
    if (h->checking == op)
        h->checking = NULL;
    hl_holds_check_outcome(&op->link->holds, &h->s, gone);
    report_lost(op->a, op->link);
}

/* The renewal of the n holds hs (one, or a group the session made: one
 * renew_many), handed out by the session (in flight from now): the
 * operation that sends it. */
static void renew_send(hilock_async *a, as_link *lk, hl_hold *const *hs, size_t n, int64_t now)
{
    hilock_client *c = lk->client;
    as_hold *h0 = hs[0]->ref;
    as_renew *rn = calloc(1, sizeof *rn + n * sizeof rn->holds[0]);
    if (rn && !(rn->owners = malloc(n * sizeof *rn->owners)))
        rn = (free(rn), NULL);
    if (rn && n > 1 && !(rn->wide = malloc(sizeof *rn->wide)))
        rn = (free(rn->owners), free(rn), NULL);
    as_op *op = rn ? hl_as_op_new(a, OP_RENEW, h0->lock, h0->tid, NULL, NULL) : NULL;
    if (!op) { /* tried again at the next period */
        if (rn) {
            free(rn->wide);
            free(rn->owners);
            free(rn);
        }
        for (size_t i = 0; i < n; i++)
            hl_holds_outcome(&lk->holds, hs[i], HL_RENEW_TROUBLE, 1, now);
        return;
    }
    const hl_names *names[HL_RENEW_MANY_MAX];
    const char *owners[HL_RENEW_MANY_MAX];
    rn->n = n;
    for (size_t i = 0; i < n; i++) {
        as_hold *h = hs[i]->ref;
        rn->holds[i] = h;
        h->renewing = op;
        memcpy(rn->owners[i], h->owner, sizeof rn->owners[i]);
        names[i] = &h->lock->names;
        owners[i] = rn->owners[i];
    }
    op->link = lk;
    op->renew = rn;
    if (n == 1)
        hl_cmd_renew_kind(&op->cmd, h0->lock->kind, &h0->lock->names, rn->owners[0],
                          c->t.opts.watchdog_lease_ms);
    else
        hl_cmd_renew_many(&op->cmd, rn->wide, names, owners, (int)n,
                          c->t.opts.watchdog_lease_ms);
    op_queue(op);
}

/* lk's hold deadline is due: the renewals due go out first, grouped by the
 * session into renewal commands (renew_many), so that a renewal that fell
 * due when the loop was held up is sent (and its answer awaited) before its
 * hold can be reported; then the holds with no renewal confirmed in time
 * (the engine's rule) are reported lost "in doubt", once per silence, and
 * still renewed (as the blocking watchdog.c). */
/* What the session's liveness rule has due on nd's pub/sub connection
 * (hl_sublive_due): a PING written; the connection given up (closed: its
 * holds listen again on a new one, AS_OBSERVE_RETRY_MS later); the holds
 * that listen through it, or wait to listen again, checked on the command
 * connection (HL_PS_UNHEARD to hl_holds_heard). Nothing while no hold or
 * waiter listens there. */
static void sub_live_tick(hilock_async *a, as_link *lk, as_node *nd, int64_t now)
{
    as_conn *k = nd->sub;
    int usable = k && k->ac && !(k->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING));
    if (!nd->chans && lk->observe_at < 0) {
        hl_sublive_idle(&nd->live); /* nothing listens there */
        return;
    }
    if (usable && !nd->live.open)
        hl_sublive_opened(&nd->live, now); /* listening again on a kept connection */
    int due = hl_sublive_due(&nd->live, now);
    if (due & HL_SUBLIVE_CHECK) {
        hl_ps_event unheard = {HL_PS_UNHEARD, NULL, 0, -1, -1};
        for (as_hold *h = a->holds; h; h = h->next)
            if (h->link == lk && ((h->chan && h->chan->node == nd) || h->observe))
                hl_holds_heard(&lk->holds, &h->s, &unheard, now);
    }
    if ((due & HL_SUBLIVE_RESET) && k) {
        conn_close(k); /* its channels go; its holds listen again later */
    } else if ((due & HL_SUBLIVE_PING) && usable) {
        hl_cmd ping;
        hl_cmd_ping(&ping);
        if (redisAsyncCommandArgv(k->ac, ping_cb, nd, ping.argc, ping.argv, ping.argvlen) !=
            REDIS_OK)
            conn_close(k);
    }
}

static void holds_due(hilock_async *a, as_link *lk, int64_t now)
{
    hl_hold *s;
    size_t want = lk->holds.count;
    if (want > lk->due_cap) { /* room for every hold the table has */
        hl_hold **d = realloc(lk->due, want * sizeof *d);
        if (d)
            lk->due = d;
        hl_renew_group *g = d ? realloc(lk->groups, want * sizeof *g) : NULL;
        if (g) {
            lk->groups = g;
            lk->due_cap = want;
        }
    }
    if (lk->due_cap >= want) {
        size_t ng = 0;
        hl_holds_renew_due(&lk->holds, now, 0, HL_RENEW_MANY_MAX, lk->due, lk->due_cap,
                           lk->groups, &ng);
        for (size_t g = 0; g < ng; g++)
            renew_send(a, lk, lk->due + lk->groups[g].first, lk->groups[g].size, now);
    } else { /* no memory for the groups: one by one */
        while ((s = hl_holds_renew_next(&lk->holds, now, 0)))
            renew_send(a, lk, &s, 1, now);
    }
    for (as_node *nd = lk->nodes; nd; nd = nd->next)
        sub_live_tick(a, lk, nd, now);
    /* then the checks the session has due (a renewal just sent answers
     * its hold's: the session hands out no check for it) */
    while ((s = hl_holds_check_next(&lk->holds, now)))
        check_send(a, lk, s->ref);
    while ((s = hl_holds_doubt_next(&lk->holds, now))) {
        as_hold *h = s->ref;
        queue_lost(a, h->lock, h->tid, now - s->confirmed_at);
    }
    holds_observe_again(a, lk, now);
    holds_expire(a, lk, now);
    holds_sync(lk);
}

/* Hold i of op's renewal, taken out of flight; NULL when it left the
 * renewal meanwhile (released, or in another renewal now). */
static as_hold *renew_take(as_op *op, size_t i)
{
    as_hold *h = op->renew->holds[i];
    if (!h || h->renewing != op)
        return NULL;
    h->renewing = NULL;
    op->renew->holds[i] = NULL;
    return h;
}

/* The end of op's renewal (answered, failed or dropped): the session learns
 * each hold's outcome (out[i]; NULL: trouble for all); a loss is reported.
 * A hold released meanwhile is left out. */
static void renew_outcome(as_op *op, const hl_renew_outcome *out)
{
    as_renew *rn = op->renew;
    if (!rn)
        return;
    as_link *lk = op->link;
    int fed = 0;
    for (size_t i = 0; i < rn->n; i++) {
        as_hold *h = renew_take(op, i);
        if (!h)
            continue;
        /* a renewal no replica acknowledged: retried (hl_renew_unacked) */
        hl_holds_outcome(&lk->holds, &h->s, out ? out[i] : HL_RENEW_TROUBLE, !op->unacked,
                         op->sent_at);
        fed = 1;
    }
    if (!fed)
        return;
    report_lost(op->a, lk);
}

/* A group renewal whose answer was an error for the whole call (a slot
 * moving under a multi-key call, say): each hold still in it is renewed
 * again on its own, now (as the blocking watchdog does). The holds stay in
 * flight for the session. */
static void renew_split(as_op *op)
{
    as_renew *rn = op->renew;
    int64_t now = now_ms();
    for (size_t i = 0; i < rn->n; i++) {
        as_hold *h = renew_take(op, i);
        if (!h)
            continue;
        hl_hold *s = &h->s;
        renew_send(op->a, op->link, &s, 1, now);
    }
    holds_sync(op->link);
}

/* op's timer: its wake-up (when waiting) or the end of the router's pause. */
void hl_as_op_sync(as_op *op)
{
    int64_t at = -1;
    if (!op->done) {
        if (op->waiting && op->wake_at >= 0)
            at = op->wake_at;
        if (op->route_at >= 0)
            at = min_at(at, op->route_at);
    }
    tmr_set(op->a, &op->tmr, at);
}

/* What op's timer says, now that it is due. */
static void op_due(as_op *op, int64_t now)
{
    if (op->waiting && op->wake_at >= 0 && op->wake_at <= now) {
        op->waiting = 0;
        if (op->type == OP_ACQUIRE)
            hl_acquire_on_wake(&op->acq, now);
        else if (op->type == OP_EXT)
            op->kind->on_wake(op->self, now);
        op_queue(op);
    }
    if (op->route_at >= 0 && op->route_at <= now) { /* the router's pause is over */
        op->route_at = -1;
        op->resend = 1;
        op_queue(op);
    }
}

/* Every timer of the heap due by now, earliest first: a request with no
 * reply times its connection out; an operation wakes (or resends); a hold
 * is renewed (first, so that a renewal due when the loop was held up goes
 * out before its hold can be reported) or reported in doubt. */
static void run_timers(hilock_async *a, int64_t now)
{
    uint64_t gen = ++a->timer_gen;
    while (a->nheap && a->heap[0]->at <= now) {
        as_tmr *t = a->heap[0];
        if (t->kind == AS_TMR_REQ) {
            as_req *q = TMR_OWNER(t, as_req);
            as_conn *k = q->conn;
            /* whoever waits for q's reply (an operation, a settle, a
             * topology question, or no one any more): the requests behind it
             * on k cannot be answered before it, and are timed from its
             * answer, so k times out */
            if (!k->ac || k->draining || k->pubsub) {
                tmr_clear(a, t);
                continue;
            }
            if (k->read_gen != gen) {
                /* first take in what already came (the application was
                 * busy, not the server): q may be answered, and gone */
                k->read_gen = gen;
                conn_read_all(k);
                continue;
            }
            tmr_clear(a, t);
            conn_timed_out(k, now);
        } else if (t->kind == AS_TMR_OP) {
            tmr_clear(a, t);
            as_op *op = TMR_OWNER(t, as_op);
            op_due(op, now);
            hl_as_op_sync(op);
        } else {
            as_link *lk = TMR_OWNER(t, as_link);
            if (lk->read_gen != gen) {
                /* first take in what already came on its pub/sub
                 * connections (a busy application, not a silent server):
                 * a PING's answer may be there */
                lk->read_gen = gen;
                for (as_node *nd = lk->nodes; nd; nd = nd->next)
                    if (nd->sub && nd->sub->ac && nd->live.ping_at >= 0)
                        conn_read_all(nd->sub);
                continue;
            }
            tmr_clear(a, t);
            holds_due(a, lk, now);
        }
    }
}

/* ---- machines: feeding ---- */

static void feed_error(as_op *op, int code, int lost)
{
    int64_t now = now_ms();
    if (op->type == OP_ACQUIRE && op->uns_phase) { /* settle and undo are idempotent */
        hl_acquire_on_error(&op->rs, code, now);
        return;
    }
    if (op->type == OP_ACQUIRE && op->ack_phase) { /* a release before or after the grant */
        if (lost) /* later releases use another unlock latch key */
            __atomic_add_fetch(&op->lock->client->t.latch_epoch, 1, __ATOMIC_RELAXED);
        hl_release_on_error(&op->rel, code, now);
        return;
    }
    switch (op->type) {
    case OP_ACQUIRE:
        if (lost && op->attempt) {
            /* later calls use another acquire latch key (hl_acquire_latch_arg) */
            __atomic_add_fetch(&op->lock->client->t.latch_epoch, 1, __ATOMIC_RELAXED);
            hl_acquire_on_reply_lost(&op->acq, code, now);
        } else {
            hl_acquire_on_error(&op->acq, code, now);
        }
        break;
    case OP_RELEASE:
        if (lost) /* later releases use another unlock latch key */
            __atomic_add_fetch(&op->lock->client->t.latch_epoch, 1, __ATOMIC_RELAXED);
        hl_release_on_error(&op->rel, code, now);
        break;
    case OP_RENEW: /* trouble: retried at the next tick */
        hl_as_op_finish(op, code, 0);
        break;
    case OP_EXT:
        op->kind->on_error(op->self, code, lost, now);
        break;
    default:
        hl_as_op_finish(op, code, 0);
        break;
    }
}

static void feed_reply(as_op *op, redisReply *r)
{
    int64_t now = now_ms();
    if (op->type == OP_ACQUIRE && op->uns_phase) {
        hl_acquire_on_reply(&op->rs, r, now);
        return;
    }
    if (op->type == OP_ACQUIRE && op->ack_phase) {
        hl_release_on_reply(&op->rel, r, now);
        return;
    }
    switch (op->type) {
    case OP_ACQUIRE:
        hl_acquire_on_reply(&op->acq, r, now);
        break;
    case OP_RELEASE:
        hl_release_on_reply(&op->rel, r, now);
        break;
    case OP_EXT:
        op->kind->on_reply(op->self, r, now);
        break;
    case OP_RENEW: {
        hl_renew_outcome out[HL_RENEW_MANY_MAX];
        size_t n = op->renew ? op->renew->n : 1;
        int per_hold = 1;
        if (n == 1)
            out[0] = hl_renew_classify(r);
        else
            per_hold = hl_renew_classify_many(r, (int)n, out);
        hl_renew_outcome o = out[0];
        if (o == HL_RENEW_EVAL && !op->eval_tried) { /* send the body, same renewal */
            hl_cmd_to_eval(&op->cmd);
            op->eval_tried = 1;
            op->sent = &op->cmd;
            op->resend = 1;
            break;
        }
        if (!per_hold && r->type == REDIS_REPLY_ERROR) { /* one by one */
            renew_split(op);
            hl_as_op_finish(op, HILOCK_EPROTO, 0);
            break;
        }
        /* the session decides (a renewal no replica took confirms nothing) */
        renew_outcome(op, out);
        o = hl_renew_unacked(o, !op->unacked);
        hl_as_op_finish(op, o == HL_RENEW_LOST ? HILOCK_ELOST : o == HL_RENEW_RENEWED ? 0
                                                                 : HILOCK_EPROTO,
                        o == HL_RENEW_RENEWED);
        break;
    }
    case OP_CHECK: {
        int gone = -1, g;
        if (hl_hold_check_gone(r, &g) == 0)
            gone = g;
        check_outcome(op, gone);
        hl_as_op_finish(op, gone < 0 ? HILOCK_EPROTO : 0, gone);
        break;
    }
    default: {
        int64_t v = 0;
        int rc = op->is_locked ? hl_decode_is_locked(op->decode_kind, r, &v) : op->decode(r, &v);
        if (rc == HILOCK_EWRONGTYPE)
            snprintf(op->err, sizeof op->err, "key '%s' holds a value that is not a lock",
                     op->lock->names.name);
        hl_as_op_finish(op, rc, rc ? 0 : v);
        break;
    }
    }
}

/* ---- machines: stepping ---- */

static int ack_release_start(as_op *op);

static void step_acquire(as_op *op)
{
    int leave = 0; /* the machine unsubscribed: left at its next action,
                      or after the grant's hold listens (HL_ACT_DONE) */
    for (;;) {
        int64_t now = now_ms();
        if (op->cancel_req)
            hl_acquire_cancel(&op->acq, now); /* idempotent; between actions */
        hl_action act = hl_acquire_next(&op->acq, now);
        if (leave && act != HL_ACT_DONE)
            chan_leave(op);
        leave = 0;
        switch (act) {
        case HL_ACT_SEND: {
            int rc = op_send(op, &op->acq.cmd);
            if (rc == 0)
                return;
            hl_acquire_on_error(&op->acq, rc, now);
            continue;
        }
        case HL_ACT_SUBSCRIBE: {
            int j = hl_as_chan_join(op, op->acq.channel, HL_WAKE_LOCK);
            if (j == 0 || j == 2)
                return; /* the confirmation (or the topology) queues us */
            hl_acquire_on_subscribed(&op->acq, j > 0, now);
            continue;
        }
        case HL_ACT_WAIT:
            if (op->resub_req) {
                op->resub_req = 0;
                op->signaled = 0;
                hl_acquire_on_resubscribe(&op->acq, now);
                continue;
            }
            if (op->signaled || op->acq.sleep_ms == 0) {
                op->signaled = 0;
                hl_acquire_on_wake(&op->acq, now);
                continue;
            }
            op->waiting = 1;
            op->wake_at = op->acq.sleep_ms < 0 ? -1 : now + op->acq.sleep_ms;
            return;
        case HL_ACT_UNSUBSCRIBE:
            leave = 1;
            continue;
        case HL_ACT_DONE: {
            int rc = op->acq.result;
            int64_t v = op->lock->kind == HILOCK_KIND_FENCED ? op->acq.token : op->acq.hold_count;
            if (op->acq.unsettled) { /* every settle try failed: settled before the
                                        next acquire, and on its own once more */
                hl_unsettled_acq *u =
                    hl_unsettled_put(&op->a->unsettled, op->lock->names.name, op->owner,
                                     op->latch[0] ? op->latch : NULL, op->acq.latch_ttl_ms,
                                     op->lease_ms, 0, now);
                settle_background(op->a, u, op->lock->client, op->lock->kind, &op->lock->names,
                                  op->last_node);
            }
            if (rc == 0 && op->unacked) {
                chan_leave(op);
                /* nobody replicated it, so a failover now would forget it:
                 * give it back (then perhaps try again: hl_ack_retry) */
                if (ack_release_start(op) == 0)
                    return;
                rc = HILOCK_ENOMEM;
            }
            /* the hold listens on the channel the waiter leaves (one
             * subscription kept, not dropped and made again) */
            if (rc == 0)
                rc = hold_granted(op, op->sent_at);
            chan_leave(op);
            if (rc == HILOCK_ETIMEDOUT)
                snprintf(op->err, sizeof op->err, "lock '%s' not acquired in time",
                         op->lock->names.name);
            else if (rc == HILOCK_EWRONGTYPE)
                snprintf(op->err, sizeof op->err, "key '%s' holds a value that is not a lock",
                         op->lock->names.name);
            else if (rc == HILOCK_ECANCELED)
                snprintf(op->err, sizeof op->err,
                         "acquire of lock '%s' by thread %" PRIu64 " cancelled",
                         op->lock->names.name, op->tid);
            hl_as_op_finish(op, rc, rc ? 0 : v);
            return;
        }
        }
    }
}

/* op's release machine, on the lease the attempt is sent with, for phase
 * (1: giving back a grant no replica acknowledged; 2: sending again a
 * release of the caller's that got no answer, before the acquire). 0 or
 * HILOCK_ENOMEM. */
static int op_release_setup(as_op *op, int phase)
{
    hilock_client *c = op->lock->client;
    if (phase != 2) { /* phase 2: op->rid is the release's (hl_lock_unsettled_next) */
        uint64_t seq = __atomic_add_fetch(&c->t.request_seq, 1, __ATOMIC_RELAXED);
        if (hl_release_request_id(op->rid, sizeof op->rid, c->t.id,
                                  __atomic_load_n(&c->t.latch_epoch, __ATOMIC_RELAXED),
                                  seq) != 0)
            snprintf(op->rid, sizeof op->rid, "%" PRIu64, seq);
    }
    if (hl_release_init(&op->rel, op->lock->kind, &op->lock->names, op->owner,
                        op->watchdog ? 0 : op->lease_ms, c->t.opts.watchdog_lease_ms, op->rid,
                        c->t.opts.command_timeout_ms, 0, now_ms()) != 0)
        return HILOCK_ENOMEM;
    op->ack_phase = phase;
    return 0;
}

/* Start giving back a grant no replica acknowledged. 0 or HILOCK_ENOMEM. */
static int ack_release_start(as_op *op)
{
    if (op_release_setup(op, 1) != 0)
        return HILOCK_ENOMEM;
    op->unacked = 0;
    op_queue(op);
    return 0;
}

static int acquire_setup(as_op *op, int64_t wait_ms);

/* Send the release machine's next command: 1 when something is under way
 * (sent, or the machine retries), 0 when the machine is done. */
static int release_send(as_op *op, int64_t now)
{
    if (hl_release_next(&op->rel, now) != HL_ACT_SEND)
        return 0;
    int rc = op_send(op, &op->rel.cmd);
    if (rc) {
        hl_release_on_error(&op->rel, rc, now);
        op_queue(op); /* the machine decides whether to retry */
    }
    return 1;
}

/* The release of an unacknowledged grant: drive it; when it is over, try
 * the acquire again (hl_ack_retry) after a pause, or fail. */
static void step_ack_release(as_op *op)
{
    int64_t now = now_ms();
    if (release_send(op, now))
        return;
    hl_release_free(&op->rel);
    op->ack_phase = 0;
    hilock_client *c = op->lock->client;
    int64_t pause = 0;
    if (op->cancel_req || !hl_ack_retry(op->wait_ms, op->deadline, now, &pause)) {
        int rc = op->cancel_req ? HILOCK_ECANCELED : HILOCK_EUNACKED;
        snprintf(op->err, sizeof op->err,
                 "lock '%s' released again: no replica acknowledged it within %lld ms",
                 op->lock->names.name, (long long)c->t.opts.replica_ack_timeout_ms);
        hl_as_op_finish(op, rc, 0);
        return;
    }
    hl_acquire_free(&op->acq);
    op->inited = 0;
    if (acquire_setup(op, op->wait_ms < 0 ? -1 : op->deadline - now > 0 ? op->deadline - now : 0)) {
        hl_as_op_finish(op, HILOCK_ENOMEM, 0);
        return;
    }
    op->waiting = 1;
    op->wake_at = now + pause;
}

/* The longest a hold of l can live unrenewed: its lease h (when known),
 * at least the watchdog's. */
static int64_t unrenewed_lease(const hilock_lock *l, const as_hold *h)
{
    int64_t lease = l->client->t.opts.watchdog_lease_ms;
    if (h && h->s.lease_ms > lease)
        lease = h->s.lease_ms;
    return lease;
}

/* A release that got no answer to any try (hl_release.unconfirmed): its
 * hold is renewed no more and ends at its lease at the latest; the thread's
 * next acquire sends the release again first (hl_lock_unsettled_next). */
static void release_unconfirmed(as_op *op, int64_t lease)
{
    hl_lock_unsettled_put(op->lock, op->tid, op->rid, now_ms() + lease);
    char why[128];
    snprintf(why, sizeof why, "%.120s", op->err[0] ? op->err : hilock_strerror(op->rel.result));
    snprintf(op->err, sizeof op->err,
             "release of '%.60s' not confirmed (%.100s); renewal stopped: it ends at its "
             "lease (%lld ms) at the latest",
             op->lock->names.name, why, (long long)lease);
}

static void step_pre_settle(as_op *op);

/* The resettle of op->rs_rec (an earlier attempt of this owner on this
 * lock): drive it; when it is over, ask the session again, or fail. */
static void step_resettle(as_op *op)
{
    hilock_async *a = op->a;
    for (;;) {
        int64_t now = now_ms();
        if (hl_acquire_next(&op->rs, now) == HL_ACT_SEND) {
            int rc = op_send(op, &op->rs.cmd);
            if (rc == 0)
                return;
            hl_acquire_on_error(&op->rs, rc, now);
            continue;
        }
        int settled = !op->rs.unsettled;
        hl_unsettled_acq *u = op->rs_rec;
        op->rs_rec = NULL;
        op->uns_phase = 0;
        hl_acquire_free(&op->rs);
        settle_ended(a, u, settled, now);
        if (!settled) {
            /* once more on its own, perhaps (the session says) */
            settle_background(a, u, op->lock->client, op->lock->kind, &op->lock->names,
                              op->last_node);
            snprintf(op->err, sizeof op->err,
                     "an earlier acquire attempt of thread %" PRIu64 " on lock '%s' could not "
                     "be settled (connection errors); not entered again",
                     op->tid, op->lock->names.name);
            hl_as_op_finish(op, HILOCK_ECONN, 0);
            return;
        }
        op->err[0] = 0;
        step_pre_settle(op);
        return;
    }
}

/* Before the first attempt: an earlier attempt of this owner on this lock
 * that may have been granted and is not settled (the session says:
 * hl_unsettled_next) is settled first. Entering first would stack the new
 * hold on a grant nobody accounts for (renewed for good), and a late copy
 * of that attempt arriving after the new grant would apply its own lease
 * to it. A settle running on the attempt's connection that has sent no
 * undo yet is taken over (hl_settle_can_hand_over: dropped, and the
 * attempt settled under its latch on a connection that answers); any other
 * is waited for, up to the call's deadline and a command timeout. */
static void step_pre_settle(as_op *op)
{
    hilock_async *a = op->a;
    if (op->refused) { /* by the session's release rule (pre_release_next) */
        hl_as_op_finish(op, op->refused, 0);
        return;
    }
    for (;;) {
        int64_t now = now_ms();
        hl_unsettled_acq *u = NULL;
        hl_unsettled_step next =
            hl_unsettled_next(&a->unsettled, op->lock->names.name, op->owner, now, &u);
        if (next == HL_UNSETTLED_NONE) {
            op->pre_done = 1;
            op->pre_wait = 0;
            step_acquire(op);
            return;
        }
        if (op->cancel_req) { /* nothing sent yet */
            snprintf(op->err, sizeof op->err, "acquire of lock '%s' by thread %" PRIu64 " cancelled",
                     op->lock->names.name, op->tid);
            hl_as_op_finish(op, HILOCK_ECANCELED, 0);
            return;
        }
        if (next == HL_UNSETTLED_WAIT) {
            as_settle *st = settle_of(a, u);
            if (st && hl_settle_can_hand_over(&st->s)) {
                as_conn *k = st->conn;
                int background = st->background;
                st->rec = NULL;
                settle_free(st);
                if (k && k->nsettles == 0 && k->draining)
                    conn_close(k);
                hl_unsettled_handed_over(&a->unsettled, u, background, now);
                continue; /* SETTLE next */
            }
            if (!op->pre_wait) {
                op->pre_wait = 1;
                op->pre_until =
                    op->deadline < 0
                        ? -1
                        : (op->deadline > now ? op->deadline : now) +
                              op->lock->client->t.opts.command_timeout_ms;
            }
            if (op->pre_until >= 0 && now >= op->pre_until) {
                snprintf(op->err, sizeof op->err,
                         "an earlier acquire attempt of thread %" PRIu64 " on lock '%s' is "
                         "still being settled; not entered",
                         op->tid, op->lock->names.name);
                hl_as_op_finish(op, HILOCK_ECONN, 0);
                return;
            }
            op->waiting = 1; /* settle_ended wakes it */
            op->wake_at = op->pre_until;
            return;
        }
        /* HL_UNSETTLED_SETTLE: u is marked settling, ours to end */
        hilock_client *c = op->lock->client;
        if (hl_acquire_init(&op->rs, op->lock->kind, &op->lock->names, op->owner, 0,
                            u->lease_ms, c->t.opts.fair_wait_window_ms, now) != 0) {
            settle_ended(a, u, 0, now);
            hl_as_op_finish(op, HILOCK_ENOMEM, 0);
            return;
        }
        op->uns_phase = 1;
        op->rs_rec = u;
        if (hl_acquire_set_latch(&op->rs, u->latch, u->latch_ttl_ms) != 0) {
            op->uns_phase = 0;
            op->rs_rec = NULL;
            hl_acquire_free(&op->rs);
            settle_ended(a, u, 0, now);
            hl_as_op_finish(op, HILOCK_ENOMEM, 0);
            return;
        }
        hl_acquire_resettle(&op->rs);
        step_resettle(op);
        return;
    }
}

static int op_release_setup(as_op *op, int phase);
/* The session's next release of op's thread that got no answer, to send
 * again before the acquire (hl_lock_unsettled_next): op->again 1 and its
 * machine set up in rel; 0 and op->again 0: none; HILOCK_ENOMEM; else the
 * code that refuses the acquire (op->err says why). */
static int pre_release_next(as_op *op)
{
    op->again = 0;
    int rc = hl_lock_unsettled_next(op->lock, op->tid, op->rid, sizeof op->rid, op->err,
                                    sizeof op->err);
    if (rc != 1)
        return rc;
    if (op_release_setup(op, 2) != 0)
        return HILOCK_ENOMEM;
    op->again = 1;
    return 0;
}

/* Before an acquire: the caller's last release of the lock got no answer
 * and its hold may still be there; send the release again first, so the
 * acquire never re-enters it. Not owner: it ran, or the hold expired. Any
 * other failure is the acquire's error, nothing acquired. */
static void step_pre_release(as_op *op)
{
    if (release_send(op, now_ms()))
        return;
    int rc = op->rel.result;
    int unconfirmed = op->rel.unconfirmed && rc != 0;
    op->ack_phase = 0;
    if (unconfirmed)
        release_unconfirmed(op, unrenewed_lease(op->lock, NULL)); /* keeps its place */
    hl_lock_unsettled_end(op->lock, op->tid, op->rid, rc);
    hl_release_free(&op->rel);
    if (rc != 0 && rc != HILOCK_ENOTOWNER) { /* the session keeps them all */
        hl_as_op_finish(op, rc, 0);
        return;
    }
    /* released: the next one that got no answer, if any */
    if ((rc = pre_release_next(op)) != 0) {
        hl_as_op_finish(op, rc, 0);
        return;
    }
    if (op->again) {
        op_queue(op);
        return;
    }
    op->err[0] = 0;
    step_pre_settle(op);
}

/* The release op's next machine in rel: an earlier release of the thread
 * on the lock that got no answer, sent again under its own id first (the
 * session's rule, hl_lock_unsettled_next: op->again 1), else its own
 * (op->own_rid). Releases of one owner then run in the order they were
 * asked for: a later one that ran first would make the owner's unlock
 * latch refuse the earlier one as a late copy (unlock.lua), and a hold
 * would be left. 0 or HILOCK_ENOMEM. */
static int release_op_next(as_op *op)
{
    hilock_lock *l = op->lock;
    hilock_client *c = l->client;
    char why[HL_ERRMSG_MAX];
    op->again = hl_lock_unsettled_next(l, op->tid, op->rid, sizeof op->rid, why,
                                       sizeof why) == 1;
    if (!op->again) /* none, or the acquire rule's refusal: this one goes out */
        snprintf(op->rid, sizeof op->rid, "%s", op->own_rid);
    as_hold *h = hl_as_hold_find(op->a, l, op->tid);
    int64_t lease = h && !h->s.watchdog ? h->s.lease_ms : 0; /* 0: the watchdog lease */
    if (hl_release_init(&op->rel, l->kind, &l->names, op->owner, lease,
                        c->t.opts.watchdog_lease_ms, op->rid, c->t.opts.command_timeout_ms, 0,
                        now_ms()) != 0)
        return HILOCK_ENOMEM;
    if (h && hl_holds_is_lost(&h->link->holds, &h->s, now_ms()))
        hl_release_known_lost(&op->rel); /* a fair unlock's "released" cannot be trusted */
    op->inited = 1;
    return 0;
}

/* An earlier release sent again by a release op ended (step_release). 1:
 * the op goes on (its next machine queued), 0: it finished. */
static int release_op_again_end(as_op *op)
{
    int rc = op->rel.result;
    as_hold *h = hl_as_hold_find(op->a, op->lock, op->tid);
    int64_t lease = unrenewed_lease(op->lock, h);
    if (rc != 0 && op->rel.unconfirmed)
        release_unconfirmed(op, lease); /* it keeps its place */
    hl_lock_unsettled_end(op->lock, op->tid, op->rid, rc);
    hl_release_free(&op->rel);
    op->inited = 0;
    if (rc != 0 && rc != HILOCK_ENOTOWNER) {
        /* Not sent: it goes out after the earlier one, before the thread's
         * next acquire, as one that got no answer (renewal stopped). */
        hl_lock_unsettled_put(op->lock, op->tid, op->own_rid, now_ms() + lease);
        if (h)
            hold_remove(op->a, h);
        snprintf(op->err, sizeof op->err,
                 "release of '%.60s' not sent: an earlier release of this thread got no answer "
                 "again; sent after it, before the next acquire; renewal stopped: it ends at "
                 "its lease (%lld ms) at the latest",
                 op->lock->names.name, (long long)lease);
        hl_as_op_finish(op, rc, 0);
        return 0;
    }
    if (release_op_next(op) != 0) {
        hl_as_op_finish(op, HILOCK_ENOMEM, 0);
        return 0;
    }
    op->err[0] = 0;
    op_queue(op);
    return 1;
}

static void step_release(as_op *op)
{
    if (release_send(op, now_ms()))
        return;
    if (op->again) {
        release_op_again_end(op);
        return;
    }
    int rc = op->rel.result;
    as_hold *h = hl_as_hold_find(op->a, op->lock, op->tid);
    if (rc != 0 && op->rel.unconfirmed)
        release_unconfirmed(op, unrenewed_lease(op->lock, h));
    /* not renewed (hl_release.renew): over, or a release no try got an
     * answer to, which must not keep the lock for the client's life */
    if (h && (!op->rel.still_held || !op->rel.renew))
        hold_remove(op->a, h);
    if (rc == HILOCK_ENOTOWNER && op->rel.known_lost)
        snprintf(op->err, sizeof op->err,
                 "lock '%s' was lost before this release (found gone or in doubt); "
                 "not held by %s",
                 op->lock->names.name, op->owner);
    else if (rc == HILOCK_ENOTOWNER)
        snprintf(op->err, sizeof op->err, "lock '%s' is not held by %s", op->lock->names.name,
                 op->owner);
    hl_as_op_finish(op, rc, rc ? 0 : op->rel.remaining);
}


static void step_op(as_op *op);

/* Work op; its timer follows what it now waits for. */
static void step(as_op *op)
{
    step_op(op);
    hl_as_op_sync(op);
}

static void step_op(as_op *op)
{
    if (op->done)
        return;
    if (op->resend) {
        op->resend = 0;
        hl_cmd *cmd = op->sent;
        op->sent = NULL;
        int rc = op_send_to(op, cmd, 1);
        if (rc == 0)
            return;
        feed_error(op, rc, 0);
    }
    if (op->sent || op->sub_pending || op->waiting || op->acking || op->parked)
        return; /* something is under way */
    switch (op->type) {
    case OP_ACQUIRE:
        if (op->ack_phase == 1)
            step_ack_release(op);
        else if (op->ack_phase == 2)
            step_pre_release(op);
        else if (op->uns_phase)
            step_resettle(op);
        else if (!op->pre_done)
            step_pre_settle(op);
        else
            step_acquire(op);
        break;
    case OP_RELEASE:
        step_release(op);
        break;
    case OP_ML_ACQUIRE:
        hl_as_ml_step_acquire(op);
        break;
    case OP_ML_RELEASE:
        hl_as_ml_step_release(op);
        break;
    case OP_LISTEN:
        break;
    case OP_EXT:
        op->kind->step(op, op->self, now_ms());
        break;
    default:
        if (!op->inited) {
            op->inited = 1;
            int rc = op_send(op, &op->cmd);
            if (rc)
                hl_as_op_finish(op, rc, 0);
        }
        break;
    }
}

static void op_unlink(hilock_async *a, as_op *op)
{
    if (!op->prev && a->ops != op)
        return; /* not listed */
    if (op->prev)
        op->prev->next = op->next;
    else
        a->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        a->ops_last = op->prev;
    op->next = op->prev = NULL;
}

static void op_free(as_op *op)
{
    if (op->ml)
        hl_as_ml_free(op->ml);
    if (op->type == OP_ACQUIRE && op->inited)
        hl_acquire_free(&op->acq);
    if (op->type == OP_ACQUIRE && op->uns_phase) { /* freed mid-settle: it stays unsettled */
        hl_acquire_free(&op->rs);
        if (op->rs_rec)
            hl_unsettled_settle_end(&op->a->unsettled, op->rs_rec, 0, now_ms());
    }
    if ((op->type == OP_RELEASE && op->inited) || (op->type == OP_ACQUIRE && op->ack_phase))
        hl_release_free(&op->rel);
    if (op->ack_reply)
        freeReplyObject(op->ack_reply);
    renew_outcome(op, NULL); /* a renewal with no answer: the next one is due */
    if (op->type == OP_CHECK)
        check_outcome(op, -1); /* no answer: nothing known */
    if (op->renew) {
        free(op->renew->wide);
        free(op->renew->owners);
        free(op->renew);
    }
    heap_leave(op->a, &op->tmr);
    if (op->kind)
        op->kind->free(op->self);
    free(op);
}

void hl_as_op_drop(as_op *op)
{
    op_unlink(op->a, op);
    op_free(op);
}

/* Work the ready queue; with user callbacks: deliver completions. */
static void process(hilock_async *a, int callbacks)
{
    for (;;) {
        hl_as_route_work(a);
        for (as_settle *st = a->settles, *nx; st; st = nx) {
            nx = st->next;
            if (st->ready)
                settle_step(st);
        }
        while (a->ready) {
            as_op *op = a->ready;
            a->ready = op->qnext;
            if (!a->ready)
                a->ready_tail = &a->ready;
            op->queued = 0;
            step(op);
        }
        if (!callbacks || a->closing)
            return;
        as_op *d = a->done;
        if (d) {
            a->done = d->dnext;
            if (!a->done)
                a->done_tail = &a->done;
            op_unlink(a, d);
            if (d->parent) {
                hl_as_ml_child_done(d);
            } else if (d->cb) {
                snprintf(a->errmsg, sizeof a->errmsg, "%s", d->rc ? d->err : "");
                d->cb(a, d->rc, d->value, d->payload);
            }
            op_free(d);
            continue;
        }
        if (a->lost_q) {
            struct as_lost *e = a->lost_q;
            a->lost_q = e->next;
            char doubt[160] = "";
            if (e->silent_ms >= 0)
                snprintf(doubt, sizeof doubt,
                         " (in doubt): no renewal confirmed by the server for %" PRId64
                         " ms, so its lease may have run out there; stop using it",
                         e->silent_ms);
            if (e->m) {
                hl_set_err(a->errmsg, "multi-lock lost%s (thread %" PRIu64 "): member '%s'",
                           doubt, e->tid, e->member);
                if (a->ml_lost_cb)
                    a->ml_lost_cb(a, e->m, e->tid, a->ml_lost_payload);
            } else {
                snprintf(a->errmsg, sizeof a->errmsg, "lock '%s' was lost%s (thread %" PRIu64 ")",
                         e->lock->names.name, doubt, e->tid);
                if (a->lost_cb)
                    a->lost_cb(a, e->lock, e->tid, a->lost_payload);
            }
            free(e);
            continue;
        }
        return;
    }
}

/* Tell the loop when to call hilock_async_on_timer next. */
static void rearm(hilock_async *a)
{
    if (a->closing)
        return;
    int64_t now = now_ms();
    /* requests, operations and holds: the heap's top */
    int64_t at = a->nheap ? a->heap[0]->at : -1;
    at = min_at(at, hl_as_route_next_at(a));
    if (a->lost_q || a->ready || a->done)
        at = now;
    for (as_settle *st = a->settles; st; st = st->next)
        at = st->ready ? now : st->waiting ? min_at(at, st->wait_until) : at;
    for (as_conn *k = a->conns; k; k = k->next)
        if (k->ac && !k->draining && !k->pubsub)
            at = min_at(at, k->write_stall_at);
    for (as_link *lk = a->links; lk; lk = lk->next)
        for (as_node *nd = lk->nodes; nd; nd = nd->next)
            for (as_chan *ch = nd->chans; ch; ch = ch->next)
                if (ch->deadline >= 0)
                    at = min_at(at, ch->deadline);
    for (as_conn *k = a->conns; k; k = k->next)
        if (k->ac && k->timer_at >= 0)
            at = min_at(at, k->timer_at);
    if (at == a->timer_armed && at != now)
        return;
    a->timer_armed = at;
    if (a->loop.timer)
        a->loop.timer(a->loop.data, at < 0 ? -1 : at > now ? at - now : 0);
}

/* The end of every entry point: work what is ready, deliver (when allowed),
 * free what is gone, re-arm the timer. */
/* Write what the commands just queued on connected connections now, instead
 * of one more turn of the loop for write readiness (hiredis writes only on
 * a write event): 1 when that made something ready (a failed write). */
static void conn_close(as_conn *k);

static int flush_writes(hilock_async *a)
{
    for (as_conn *k = a->conns; k; k = k->next)
        if (k->ac && k->unwatched)
            conn_close(k); /* its operations fail with HILOCK_ECONN */
    for (as_conn *k = a->conns; k; k = k->next)
        if (k->ac && (k->want & HILOCK_IO_WRITE) && (k->ac->c.flags & REDIS_CONNECTED) &&
            !(k->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)))
            conn_write(k);
    return a->ready != NULL || a->done != NULL;
}

static void finish_call(hilock_async *a, int callbacks)
{
    do
        process(a, callbacks);
    while (!a->closing && flush_writes(a) && callbacks);
    conns_reap(a);
    rearm(a);
}

/* ---- public API ---- */

int hilock_async_new(hilock_async **out, const hilock_async_loop *loop)
{
    if (!out)
        return HILOCK_EINVAL;
    *out = NULL;
    if (!loop || loop->version < 1 || loop->version > HILOCK_ASYNC_LOOP_VERSION ||
        !loop->watch || !loop->timer)
        return HILOCK_EINVAL;
    hilock_async *a = calloc(1, sizeof *a);
    if (!a)
        return HILOCK_ENOMEM;
    a->loop = *loop;
    a->ready_tail = &a->ready;
    a->done_tail = &a->done;
    a->timer_armed = -1;
    hl_unsettled_init(&a->unsettled, 0);
    *out = a;
    return 0;
}

static void async_free_now(hilock_async *a)
{
    a->closing = 1;
    /* hiredis runs the pending callbacks (ignored now) and the cleanups */
    for (as_conn *k = a->conns; k; k = k->next)
        if (k->ac)
            redisAsyncFree(k->ac);
    while (a->settles) {
        a->settles->conn = NULL; /* its requests went with the connection */
        settle_free(a->settles);
    }
    conns_reap(a);
    a->closing = 0;
    a->free_later = 2; /* calls on a now answer HILOCK_ECLOSED */
    while (a->done) { /* finished ones first, in their order */
        as_op *op = a->done;
        a->done = op->dnext;
        op_unlink(a, op);
        if (op->cb) {
            snprintf(a->errmsg, sizeof a->errmsg, "%s", op->rc ? op->err : "");
            op->cb(a, op->rc, op->value, op->payload);
        }
        op_free(op);
    }
    a->done_tail = &a->done;
    while (a->ops) {
        as_op *op = a->ops;
        a->ops = op->next;
        if (op->cb) {
            snprintf(a->errmsg, sizeof a->errmsg, "%s",
                     op->done ? op->err : "the hilock_async was freed");
            op->cb(a, op->done ? op->rc : HILOCK_ECLOSED, op->done ? op->value : 0,
                   op->payload);
        }
        op_free(op);
    }
    while (a->holds) {
        as_hold *h = a->holds;
        a->holds = h->next;
        free(h);
    }
    free(a->hbuckets);
    hl_as_mlholds_free(a);
    while (a->lost_q) {
        struct as_lost *e = a->lost_q;
        a->lost_q = e->next;
        free(e);
    }
    while (a->links) {
        as_link *lk = a->links;
        a->links = lk->next;
        hl_as_link_free(lk);
    }
    if (a->timer_armed >= 0 && a->loop.timer)
        a->loop.timer(a->loop.data, -1);
    free(a->heap);
    hl_unsettled_free(&a->unsettled);
    free(a);
}

void hilock_async_free(hilock_async *a)
{
    if (!a || a->free_later)
        return;
    if (a->in_dispatch) {
        a->free_later = 1;
        return;
    }
    hl_nosigpipe ns;
    hl_nosigpipe_enter(&ns);
    async_free_now(a);
    hl_nosigpipe_leave(&ns);
}

static int gone(const hilock_async *a)
{
    return a->free_later != 0;
}

/* Enter/leave an entry point that runs user callbacks. */
static int dispatch_begin(hilock_async *a, hl_nosigpipe *ns)
{
    if (a->in_dispatch)
        return 0;
    a->in_dispatch = 1;
    hl_nosigpipe_enter(ns);
    return 1;
}

static void dispatch_end(hilock_async *a, hl_nosigpipe *ns, int outer)
{
    finish_call(a, outer);
    if (!outer)
        return;
    a->in_dispatch = 0;
    if (a->free_later == 1) {
        a->free_later = 0;
        async_free_now(a);
    }
    hl_nosigpipe_leave(ns);
}

int hilock_async_on_io(hilock_async *a, int fd, int events)
{
    if (!a)
        return HILOCK_EINVAL;
    if (gone(a))
        return HILOCK_ECLOSED;
    hl_nosigpipe ns;
    int outer = dispatch_begin(a, &ns);
    for (as_conn *k = a->conns; k; k = k->next) {
        if (k->fd != fd || !k->ac)
            continue;
        if (events & HILOCK_IO_READ)
            redisAsyncHandleRead(k->ac);
        if (k->ac && (events & HILOCK_IO_WRITE))
            conn_write(k);
        break;
    }
    dispatch_end(a, &ns, outer);
    return 0;
}

int hilock_async_on_timer(hilock_async *a)
{
    if (!a)
        return HILOCK_EINVAL;
    if (gone(a))
        return HILOCK_ECLOSED;
    hl_nosigpipe ns;
    int outer = dispatch_begin(a, &ns);
    a->timer_armed = -1;
    int64_t now = now_ms();
    for (as_conn *k = a->conns; k; k = k->next)
        if (k->ac && k->timer_at >= 0 && k->timer_at <= now) {
            k->timer_at = -1;
            redisAsyncHandleTimeout(k->ac);
        }
    check_deadlines(a, now);
    run_timers(a, now);
    dispatch_end(a, &ns, outer);
    return 0;
}

const char *hilock_async_errmsg(const hilock_async *a)
{
    return a ? a->errmsg : "invalid argument";
}

void hilock_async_set_lost_callback(hilock_async *a, hilock_async_lost_cb cb, void *payload)
{
    if (!a)
        return;
    a->lost_cb = cb;
    a->lost_payload = payload;
}

int hilock_async_is_lost(const hilock_async *a, const hilock_lock *l, uint64_t tid)
{
    if (!a || !l)
        return 0;
    const as_hold *h = hl_as_hold_find((hilock_async *)a, l, tid);
    if (!h)
        return 0;
    /* asked before the loop has run again (it was blocked), the timer that
     * reports the hold in doubt may be overdue: the engine's rule says */
    return hl_holds_is_lost(&h->link->holds, &h->s, now_ms());
}

as_link *hl_as_link_get(hilock_async *a, hilock_client *c, int *rc)
{
    for (as_link *lk = a->links; lk; lk = lk->next)
        if (lk->client == c)
            return lk;
    as_link *lk = hl_as_link_new(a, c, rc);
    if (!lk)
        return NULL;
    if (heap_join(a) != 0) { /* its holds' timer */
        hl_as_link_free(lk);
        *rc = HILOCK_ENOMEM;
        return NULL;
    }
    hl_holds_init(&lk->holds, c->t.opts.watchdog_lease_ms, c->t.opts.command_timeout_ms);
    lk->tmr.kind = AS_TMR_HOLD;
    lk->next = a->links;
    a->links = lk;
    return lk;
}

as_op *hl_as_op_new(hilock_async *a, int type, hilock_lock *l, uint64_t tid,
                     hilock_async_cb cb, void *payload)
{
    as_op *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->a = a;
    op->type = type;
    op->lock = l;
    op->tid = tid;
    op->cb = cb;
    op->payload = payload;
    op->wake_at = -1;
    op->route_at = -1;
    op->tmr.kind = AS_TMR_OP;
    if (heap_join(a) != 0) {
        free(op);
        return NULL;
    }
    op->prev = a->ops_last;
    if (a->ops_last)
        a->ops_last->next = op;
    else
        a->ops = op;
    a->ops_last = op;
    return op;
}

/* Checks shared by the operations; on success *lk is l's link. */
static int op_check(hilock_async *a, hilock_lock *l, hilock_async_cb cb, as_link **lk)
{
    int rc = l ? hl_as_check(a, l->client, cb) : HILOCK_EINVAL;
    if (rc == 0)
        *lk = hl_as_link_get(a, l->client, &rc); /* made by the check */
    return rc;
}

/* Start op: queue it and work the queue (no user callback runs here). */
int hl_as_op_start(as_op *op)
{
    hilock_async *a = op->a;
    hl_nosigpipe ns;
    hl_nosigpipe_enter(&ns);
    op_queue(op);
    finish_call(a, 0);
    hl_nosigpipe_leave(&ns);
    return 0;
}

/* How long an acquire latch answers a request sent again (as lock.c). */
int64_t hl_as_latch_ttl(const hilock_client *c)
{
    return hl_acquire_latch_ttl(c->t.opts.command_timeout_ms, c->t.opts.connect_timeout_ms);
}

int hilock_async_acquire(hilock_async *a, hilock_lock *l, uint64_t tid, int64_t wait_ms,
                         int64_t lease_ms, hilock_async_cb cb, void *payload)
{
    as_link *lk;
    int rc = op_check(a, l, cb, &lk);
    if (rc)
        return rc;
    if (hl_check_wait(wait_ms) || hl_check_lease(lease_ms)) {
        snprintf(a->errmsg, sizeof a->errmsg, "bad wait or lease");
        return HILOCK_EINVAL;
    }
    hilock_client *c = l->client;
    as_op *op = hl_as_op_new(a, OP_ACQUIRE, l, tid, cb, payload);
    if (!op)
        return HILOCK_ENOMEM;
    op->link = lk;
    hl_hold_owner(op->owner, l->kind, c->t.id, tid);
    op->watchdog = lease_ms <= 0;
    op->lease_ms = lease_ms > 0 ? lease_ms : c->t.opts.watchdog_lease_ms;
    op->wait_ms = wait_ms;
    op->deadline = wait_ms < 0 ? -1 : now_ms() + wait_ms;
    if (acquire_setup(op, wait_ms) != 0 || (rc = pre_release_next(op)) == HILOCK_ENOMEM) {
        op_unlink(a, op);
        op_free(op);
        return HILOCK_ENOMEM;
    }
    op->refused = rc; /* releases that may be pending: its callback says so */
    return hl_as_op_start(op);
}

/* op's acquire machine for a wait of wait_ms, with a latch key of its own
 * (each run: a run after an unacknowledged grant must not find the first
 * run's answer). */
static int acquire_setup(as_op *op, int64_t wait_ms)
{
    hilock_lock *l = op->lock;
    hilock_client *c = l->client;
    uint64_t seq = __atomic_add_fetch(&c->t.request_seq, 1, __ATOMIC_RELAXED);
    if (hl_acquire_latch_arg(op->latch, sizeof op->latch, &l->names, op->owner,
                             __atomic_load_n(&c->t.latch_epoch, __ATOMIC_RELAXED), seq) != 0)
        op->latch[0] = 0; /* cannot happen: room for the longest name */
    if (hl_acquire_init(&op->acq, l->kind, &l->names, op->owner, wait_ms, op->lease_ms,
                        c->t.opts.fair_wait_window_ms, now_ms()) != 0)
        return HILOCK_ENOMEM;
    op->inited = 1;
    if (hl_acquire_set_latch(&op->acq, op->latch, hl_as_latch_ttl(c)) != 0)
        return HILOCK_ENOMEM;
    return 0;
}

/* Cancel the pending acquires of type on target (a lock, or a multi-lock)
 * for tid: each takes the cancel between its actions. */
int hl_as_cancel_ops(int *cancelled, hilock_async *a, int type, const void *target,
                      uint64_t tid)
{
    if (cancelled)
        *cancelled = 0;
    if (!a || !target)
        return HILOCK_EINVAL;
    if (gone(a))
        return HILOCK_ECLOSED;
    int n = 0;
    for (as_op *op = a->ops; op; op = op->next) {
        const void *t =
            type == OP_ML_ACQUIRE || type == OP_EXT ? op->target : (const void *)op->lock;
        if (op->type != type || op->parent || op->done || t != target || op->tid != tid ||
            op->cancel_req)
            continue;
        op->cancel_req = 1;
        n++;
        if (op->sub_pending) { /* the machine takes the cancel once "subscribed" */
            op->sub_pending = 0;
            if (op->type == OP_EXT)
                op->kind->on_subscribed(op->self, 1, now_ms());
            else
                hl_acquire_on_subscribed(&op->acq, 1, now_ms());
            op_queue(op);
        }
        if (op->waiting) {
            op->waiting = 0;
            op_queue(op);
        }
        if (op->parked && !op->sent) { /* waiting for the topology to subscribe */
            op->parked = 0;
            op_queue(op);
        }
    }
    if (cancelled)
        *cancelled = n > 0;
    if (n) {
        hl_nosigpipe ns;
        hl_nosigpipe_enter(&ns);
        finish_call(a, 0);
        hl_nosigpipe_leave(&ns);
    }
    return 0;
}

int hilock_async_cancel(int *cancelled, hilock_async *a, hilock_lock *l, uint64_t tid)
{
    return hl_as_cancel_ops(cancelled, a, OP_ACQUIRE, l, tid);
}

int hilock_async_release(hilock_async *a, hilock_lock *l, uint64_t tid, hilock_async_cb cb,
                         void *payload)
{
    as_link *lk;
    int rc = op_check(a, l, cb, &lk);
    if (rc)
        return rc;
    hilock_client *c = l->client;
    as_op *op = hl_as_op_new(a, OP_RELEASE, l, tid, cb, payload);
    if (!op)
        return HILOCK_ENOMEM;
    op->link = lk;
    hl_hold_owner(op->owner, l->kind, c->t.id, tid);
    uint64_t seq = __atomic_add_fetch(&c->t.request_seq, 1, __ATOMIC_RELAXED);
    /* "<client>:e<latch epoch>:<seq>", as lock.c */
    if (hl_release_request_id(op->own_rid, sizeof op->own_rid, c->t.id,
                              __atomic_load_n(&c->t.latch_epoch, __ATOMIC_RELAXED), seq) != 0)
        snprintf(op->own_rid, sizeof op->own_rid, "%" PRIu64, seq); /* cannot happen */
    if (release_op_next(op) != 0) {
        op_unlink(a, op);
        heap_leave(a, &op->tmr);
        free(op);
        return HILOCK_ENOMEM;
    }
    return hl_as_op_start(op);
}

int hilock_async_force_unlock(hilock_async *a, hilock_lock *l, hilock_async_cb cb,
                              void *payload)
{
    as_link *lk;
    int rc = op_check(a, l, cb, &lk);
    if (rc)
        return rc;
    as_op *op = hl_as_op_new(a, OP_SIMPLE, l, 0, cb, payload);
    if (!op)
        return HILOCK_ENOMEM;
    op->link = lk;
    hl_cmd_force(&op->cmd, l->kind, &l->names);
    op->decode = hl_decode_flag;
    return hl_as_op_start(op);
}

int hilock_async_query(hilock_async *a, hilock_lock *l, hilock_query q, uint64_t tid,
                       hilock_async_cb cb, void *payload)
{
    as_link *lk;
    int rc = op_check(a, l, cb, &lk);
    if (rc)
        return rc;
    if (q < HILOCK_QUERY_IS_LOCKED || q > HILOCK_QUERY_TOKEN)
        return HILOCK_EINVAL;
    as_op *op = hl_as_op_new(a, OP_SIMPLE, l, tid, cb, payload);
    if (!op)
        return HILOCK_ENOMEM;
    op->link = lk;
    hl_hold_owner(op->owner, l->kind, l->client->t.id, tid);
    switch (q) {
    case HILOCK_QUERY_IS_LOCKED:
        hl_cmd_is_locked(&op->cmd, l->kind, &l->names);
        if (l->kind == HILOCK_KIND_READ || l->kind == HILOCK_KIND_WRITE) {
            op->is_locked = 1;
            op->decode_kind = l->kind;
        } else {
            op->decode = hl_decode_flag;
        }
        break;
    case HILOCK_QUERY_IS_HELD:
        hl_cmd_hexists(&op->cmd, &l->names, op->owner);
        op->decode = hl_decode_flag;
        break;
    case HILOCK_QUERY_HOLD_COUNT:
        hl_cmd_hget(&op->cmd, &l->names, op->owner);
        op->decode = hl_decode_hold_count;
        break;
    case HILOCK_QUERY_REMAINING_MS:
        hl_cmd_pttl(&op->cmd, &l->names);
        op->decode = hl_decode_pttl;
        break;
    case HILOCK_QUERY_TOKEN:
        hl_cmd_token(&op->cmd, &l->names);
        op->decode = hl_decode_token;
        break;
    }
    return hl_as_op_start(op);
}

/* ---- operations of other files (async_sem.c): api.h, hl_as_kind ---- */

int hl_as_check(hilock_async *a, hilock_client *c, hilock_async_cb cb)
{
    if (!a || !c || !cb)
        return HILOCK_EINVAL;
    if (gone(a))
        return HILOCK_ECLOSED;
    char err[HL_ERRMSG_MAX];
    int rc = hl_client_check(c, err);
    if (rc) {
        snprintf(a->errmsg, sizeof a->errmsg, "%s", err);
        return rc;
    }
    return hl_as_link_get(a, c, &rc) ? 0 : rc;
}

int hl_as_start(hilock_async *a, hilock_client *c, const hl_as_kind *kind, void *self,
                const void *target, uint64_t tid, hilock_async_cb cb, void *payload)
{
    int rc = hl_as_check(a, c, cb);
    as_op *op = rc ? NULL : hl_as_op_new(a, OP_EXT, NULL, tid, cb, payload);
    if (!op) {
        kind->free(self);
        return rc ? rc : HILOCK_ENOMEM;
    }
    op->link = hl_as_link_get(a, c, &rc);
    op->kind = kind;
    op->self = self;
    op->target = target;
    return hl_as_op_start(op);
}

int hl_as_send(as_op *op, hl_cmd *cmd)
{
    return op_send(op, cmd);
}

int hl_as_join(as_op *op, const char *channel, hl_wake_rule rule)
{
    int j = hl_as_chan_join(op, channel, rule);
    return j == 2 ? 0 : j; /* parked: the machine is stepped again once the
                              topology is known (or told it failed) */
}

void hl_as_leave(as_op *op)
{
    chan_leave(op);
}

int hl_as_sleep(as_op *op, int64_t ms, int64_t now)
{
    if (op->resub_req) {
        op->resub_req = 0;
        op->signaled = 0;
        return HL_AS_RESUBSCRIBE;
    }
    if (op->signaled || ms == 0) {
        op->signaled = 0;
        return HL_AS_WOKEN;
    }
    op->waiting = 1;
    op->wake_at = ms < 0 ? -1 : now + ms;
    return HL_AS_SLEEPING;
}

int hl_as_cancelled(const as_op *op)
{
    return op->cancel_req;
}

void hl_as_finish(as_op *op, int rc, int64_t value, const char *err)
{
    chan_leave(op);
    if (err)
        snprintf(op->err, sizeof op->err, "%s", err);
    hl_as_op_finish(op, rc, rc ? 0 : value);
}

int hl_as_cancel(int *cancelled, hilock_async *a, const void *target, uint64_t tid)
{
    return hl_as_cancel_ops(cancelled, a, OP_EXT, target, tid);
}

void hl_as_set_err(hilock_async *a, const char *msg)
{
    if (a)
        snprintf(a->errmsg, sizeof a->errmsg, "%s", msg);
}

/* ---- for async_route.c ---- */

as_conn *hl_as_conn_get(hilock_async *a, as_node *n, int pubsub)
{
    return conn_get(a, n, pubsub);
}

as_req *hl_as_req_new(as_conn *k, int64_t timeout_ms)
{
    return req_new(k, timeout_ms);
}

void hl_as_req_unlink(as_req *q)
{
    req_unlink(q);
}

void hl_as_reply_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    op_reply_cb(ac, reply, priv);
}

void hl_as_op_queue(as_op *op)
{
    op_queue(op);
}

void hl_as_feed_error(as_op *op, int code)
{
    feed_error(op, code, 0);
}

