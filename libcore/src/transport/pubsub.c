/*
 * Pub/sub listener: one connection and one thread per client, started on the
 * first wait. Waiters register on a channel (reference-counted); the first
 * registration subscribes, the last one leaving unsubscribes. A message "0"
 * wakes the longest-waiting waiter of that channel that is not already woken,
 * "1" wakes them all, anything else is ignored. After a reconnect every
 * channel is subscribed again and every waiter is woken to retry (a message
 * may have been missed while disconnected), and woken once more when the
 * server confirms the new subscription: a waiter that retried before the
 * SUBSCRIBE took effect and went back to sleep would otherwise miss an unlock
 * published in between and sleep for the holder's whole lease.
 *
 * There is one listener per node: outside cluster mode one in all. In a
 * cluster, waiters listen with SSUBSCRIBE on the node that owns the
 * channel's slot (the lock's: all its names share the hash tag), as the
 * scripts publish with SPUBLISH there. When the slot moves, the node drops
 * the subscription (an unrequested sunsubscribe); its waiters are woken with
 * `moved` set and subscribe again where the slot now lives.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport.h"
#include "transport_impl.h"

enum { HL_CH_PENDING = 0, HL_CH_SUBSCRIBED = 1, HL_CH_UNSUBSCRIBING = 2, HL_CH_MOVED = 3 };

typedef struct hl_channel {
    struct hl_channel *next;
    char *name;
    int refs;           /* waiters registered */
    int state;          /* HL_CH_PENDING / HL_CH_SUBSCRIBED / HL_CH_UNSUBSCRIBING */
    int sent;           /* SUBSCRIBE written on the current connection */
    int resub;          /* subscribed again after a reconnect: wake the
                           waiters once the server confirms it */
    hl_waiter *waiters; /* FIFO */
    hl_waiter *observers; /* hl_sub_observe: told of every message, take no wake */
} hl_channel;

#define RECONNECT_MIN_MS 50
#define RECONNECT_MAX_MS 1000

static hl_channel *find_channel(hl_pubsub *ps, const char *name, size_t len)
{
    for (hl_channel *ch = ps->channels; ch; ch = ch->next)
        if (strlen(ch->name) == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

static void remove_channel(hl_pubsub *ps, hl_channel *target)
{
    for (hl_channel **pp = &ps->channels; *pp; pp = &(*pp)->next) {
        if (*pp == target) {
            *pp = target->next;
            free(target->name);
            free(target);
            return;
        }
    }
}

/* ps->mu held. */
static void wake_waiter(hl_waiter *w)
{
    w->signaled = 1;
    pthread_cond_signal(&w->cv);
    if (w->notify)
        hl_notify_fire(w->notify);
}

/* Every observer of ch hears ev (NULL: the connection was lost); what it
 * means for a hold is the session's (hl_holds_heard). */
static void tell_observers(hl_channel *ch, const hl_ps_event *ev)
{
    for (hl_waiter *w = ch->observers; w; w = w->next)
        w->on_message(w->on_arg, ev);
}

static void wake_all_waiters(hl_pubsub *ps)
{
    for (hl_channel *ch = ps->channels; ch; ch = ch->next) {
        for (hl_waiter *w = ch->waiters; w; w = w->next)
            wake_waiter(w);
        tell_observers(ch, NULL); /* heard again once subscribed again */
    }
}

/* A wake-one message w took without using goes to the next waiter of its
 * channel not woken yet; ps->mu held. */
static void pass_wake(hl_channel *ch, hl_waiter *w)
{
    for (hl_waiter *o = ch->waiters; o; o = o->next)
        if (o != w && !o->signaled) {
            wake_waiter(o);
            break;
        }
}

static void poke(hl_pubsub *ps)
{
    hl_worker_wake(&ps->wk);
}

static void drop_connection(hl_node *n)
{
    hl_pubsub *ps = &n->ps;
    if (ps->ctx) {
        redisFree(ps->ctx);
        ps->ctx = NULL;
    }
    ps->connected = 0;
    hl_sublive_closed(&ps->live, hl_now_mono_ms()); /* its holds checked at once */
    hl_channel *ch = ps->channels, *next;
    for (; ch; ch = next) {
        next = ch->next;
        if (ch->refs == 0)
            remove_channel(ps, ch);
        else {
            ch->state = HL_CH_PENDING;
            ch->sent = 0;
            ch->resub = 1;
        }
    }
    wake_all_waiters(ps);
    pthread_cond_broadcast(&ps->cv);
}

static void handle_frame(hl_node *n, redisReply *r)
{
    hl_pubsub *ps = &n->ps;
    hl_ps_event ev;
    hl_decode_pubsub(r, &ev);
    if (ev.type == HL_PS_OTHER)
        return;
    hl_channel *ch = find_channel(ps, ev.channel, ev.channel_len);
    if (!ch)
        return;
    switch (ev.type) {
    case HL_PS_SUBSCRIBE:
        ch->state = HL_CH_SUBSCRIBED;
        if (ch->resub) { /* an unlock may have come before this took effect */
            ch->resub = 0;
            for (hl_waiter *w = ch->waiters; w; w = w->next)
                wake_waiter(w);
        }
        /* an observer (a holder) registered after its grant: a force
         * unlock published before this took effect went unheard (the
         * session has it checked) */
        tell_observers(ch, &ev);
        pthread_cond_broadcast(&ps->cv);
        break;
    case HL_PS_UNSUBSCRIBE:
        if (ch->refs == 0)
            remove_channel(ps, ch);
        else if (ch->state == HL_CH_SUBSCRIBED && n->client->ep.cluster) {
            /* not asked for: the slot left this node */
            ch->state = HL_CH_MOVED;
            __atomic_store_n(&n->client->map_stale, 1, __ATOMIC_RELEASE);
            for (hl_waiter *w = ch->waiters; w; w = w->next) {
                w->moved = 1;
                wake_waiter(w);
            }
            /* they hear nothing more here: each listens again where the
             * slot lives now (its owner asks hl_sub_moved), and the session
             * has its hold checked meanwhile */
            for (hl_waiter *w = ch->observers; w; w = w->next)
                __atomic_store_n(&w->moved, 1, __ATOMIC_RELEASE);
            tell_observers(ch, &ev);
        } else {
            ch->state = HL_CH_PENDING; /* a waiter came back meanwhile */
            ch->sent = 0;
        }
        break;
    case HL_PS_MESSAGE: {
        /* the engine says how many: -1 all, n the n longest waiting that
         * are not woken yet (the waiters of one channel share a rule) */
        tell_observers(ch, &ev); /* the session says which holds to check */
        int64_t n = ch->waiters ? hl_ps_wakes((hl_wake_rule)ch->waiters->wake_rule, &ev) : 0;
        for (hl_waiter *w = ch->waiters; w && n != 0; w = w->next) {
            if (n < 0 || !w->signaled) {
                wake_waiter(w);
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

static int take_frame(void *node, redisReply *r)
{
    /* any frame (a message, a confirmation, a PING's answer) says the
     * connection delivers */
    hl_sublive_heard(&((hl_node *)node)->ps.live, hl_now_mono_ms());
    handle_frame(node, r);
    freeReplyObject(r);
    return 1;
}

/* Queue SUBSCRIBE/UNSUBSCRIBE for channels that need it; mu held. */
static int send_changes(hl_node *n)
{
    hl_pubsub *ps = &n->ps;
    int sharded = n->client->ep.cluster;
    int queued = 0;
    for (hl_channel *ch = ps->channels; ch; ch = ch->next) {
        const char *argv[2];
        size_t lens[2];
        argv[1] = ch->name;
        lens[1] = strlen(ch->name);
        if (ch->refs > 0 && ch->state == HL_CH_PENDING && !ch->sent) {
            argv[0] = sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
            lens[0] = strlen(argv[0]);
            redisAppendCommandArgv(ps->ctx, 2, argv, lens);
            ch->sent = 1;
            queued = 1;
        } else if (ch->refs == 0 && ch->state == HL_CH_SUBSCRIBED) {
            argv[0] = sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE";
            lens[0] = strlen(argv[0]);
            redisAppendCommandArgv(ps->ctx, 2, argv, lens);
            ch->state = HL_CH_UNSUBSCRIBING;
            queued = 1;
        }
    }
    if (!queued)
        return 0;
    int done = 0;
    while (!done)
        if (redisBufferWrite(ps->ctx, &done) != REDIS_OK)
            return -1;
    return 0;
}

/* What the session's liveness rule has due on the listener's connection
 * (hl_sublive_due): a PING written; a connection given up (dropped: the
 * loop opens another and subscribes again); every hold listening through it
 * checked on the command connection (its observers told HL_PS_UNHEARD).
 * Returns how long the listener may sleep (-1: until woken). mu held. */
static int live_tick(hl_node *n)
{
    hl_pubsub *ps = &n->ps;
    int64_t now = hl_now_mono_ms();
    if (!ps->channels) {
        hl_sublive_idle(&ps->live); /* nothing listens: nothing to check */
        return -1;
    }
    if (ps->connected && !ps->live.open && ps->live.check_at < 0)
        hl_sublive_opened(&ps->live, now); /* listening again on a kept connection */
    int due = hl_sublive_due(&ps->live, now);
    if (due & HL_SUBLIVE_CHECK) {
        hl_ps_event unheard = {HL_PS_UNHEARD, NULL, 0, -1, -1};
        for (hl_channel *ch = ps->channels; ch; ch = ch->next)
            tell_observers(ch, &unheard);
    }
    if ((due & HL_SUBLIVE_RESET) && ps->connected) {
        drop_connection(n); /* woken waiters try again; the loop reconnects */
    } else if ((due & HL_SUBLIVE_PING) && ps->ctx) {
        hl_cmd ping;
        hl_cmd_ping(&ping);
        redisAppendCommandArgv(ps->ctx, ping.argc, ping.argv, ping.argvlen);
        int done = 0;
        while (!done)
            if (redisBufferWrite(ps->ctx, &done) != REDIS_OK) {
                drop_connection(n);
                break;
            }
    }
    int64_t next = hl_sublive_next(&ps->live);
    if (next < 0)
        return -1;
    now = hl_now_mono_ms();
    return next <= now ? 0 : next - now > 3600000 ? 3600000 : (int)(next - now);
}

static void *listener_main(void *arg)
{
    hl_node *node = arg;
    hl_transport *c = node->client;
    hl_pubsub *ps = &node->ps;
    int64_t backoff = RECONNECT_MIN_MS;
    pthread_mutex_lock(&ps->mu);
    hl_sublive_init(&ps->live, c->opts.command_timeout_ms);
    while (!ps->stop) {
        int sleep_ms = live_tick(node);
        if (!ps->connected) {
            if (!ps->channels) {
                /* nothing to listen to: sleep until someone registers */
                pthread_mutex_unlock(&ps->mu);
                struct pollfd pf = {ps->wk.wake_fd[0], POLLIN, 0};
                poll(&pf, 1, -1);
                hl_wake_drain(ps->wk.wake_fd[0]);
                pthread_mutex_lock(&ps->mu);
                continue;
            }
            ps->connecting = 1; /* node_reuse leaves the address alone */
            pthread_mutex_unlock(&ps->mu);
            int code = 0;
            char err[HL_ERRMSG_MAX];
            int64_t gen_before = __atomic_load_n(&c->master_gen, __ATOMIC_ACQUIRE);
            redisContext *ctx = hl_node_connect(node, c->opts.connect_timeout_ms, &code, err);
            pthread_mutex_lock(&ps->mu);
            ps->connecting = 0;
            if (!ctx) {
                ps->conn_failed = 1;
                memcpy(ps->errmsg, "pub/sub: ", 9);
                snprintf(ps->errmsg + 9, sizeof ps->errmsg - 9, "%.*s",
                         (int)(sizeof ps->errmsg - 10), err);
                hl_transport_report(c, ps->errmsg);
                pthread_cond_broadcast(&ps->cv);
                pthread_mutex_unlock(&ps->mu);
                struct pollfd pf = {ps->wk.wake_fd[0], POLLIN, 0};
                /* the holds' checks go on at their pace meanwhile */
                poll(&pf, 1, sleep_ms >= 0 && sleep_ms < backoff ? sleep_ms : (int)backoff);
                backoff = backoff * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : backoff * 2;
                pthread_mutex_lock(&ps->mu);
                continue;
            }
            backoff = RECONNECT_MIN_MS;
            hl_sublive_opened(&ps->live, hl_now_mono_ms()); /* not alive until heard */
            ps->ctx = ctx;
            ps->conn_gen = gen_before;
            ps->connected = 1;
            ps->conn_failed = 0;
            ps->generation++;
            if (ps->generation > 1)
                wake_all_waiters(ps); /* messages may have been missed */
            if (ps->generation > 1) { /* counted and traced with no lock held */
                pthread_mutex_unlock(&ps->mu);
                hl_stats_event(&c->stats, HILOCK_TRACE_RECONNECT, "pub/sub listener connected again; waits woken to try again");
                pthread_mutex_lock(&ps->mu);
            }
        }
        if (send_changes(node) != 0) {
            drop_connection(node);
            continue;
        }
        sleep_ms = live_tick(node); /* a PING due, or the connection given up */
        if (!ps->connected)
            continue;
        int fd = ps->ctx->fd;
        pthread_mutex_unlock(&ps->mu);
        struct pollfd pf[2] = {{ps->wk.wake_fd[0], POLLIN, 0}, {fd, POLLIN, 0}};
        /* woken by a frame, a change, or the liveness rule's next deadline */
        int n = poll(pf, 2, sleep_ms);
        pthread_mutex_lock(&ps->mu);
        if (n < 0)
            continue;
        if (pf[0].revents) {
            hl_wake_drain(ps->wk.wake_fd[0]);
        }
        if (ps->ctx && ps->conn_gen != __atomic_load_n(&c->master_gen, __ATOMIC_ACQUIRE)) {
            drop_connection(node); /* the master moved: listen on the new one */
            continue;
        }
        if (pf[1].revents && ps->ctx && hl_read_replies(ps->ctx, take_frame, node) < 0)
            drop_connection(node);
    }
    if (ps->ctx) {
        redisFree(ps->ctx);
        ps->ctx = NULL;
    }
    ps->connected = 0;
    pthread_mutex_unlock(&ps->mu);
    return NULL;
}

int hl_pubsub_unused(hl_node *n)
{
    hl_pubsub *ps = &n->ps;
    if (ps->channels || ps->connecting)
        return 0;
    if (ps->connected || ps->ctx) {
        /* the listener polls the old fd with mu released at most: it finds
         * ctx gone when it wakes, and sleeps until a registration */
        drop_connection(n);
        if (ps->wk.running)
            poke(ps);
    }
    return 1;
}

/* Start the listener thread if needed; mu held. */
static int ensure_listener(hl_node *n, char *err)
{
    hl_pubsub *ps = &n->ps;
    if (ps->wk.running)
        return 0;
    ps->stop = 0;
    int rc = hl_worker_start(&ps->wk, 1, listener_main, n);
    if (rc == HILOCK_ECONN)
        hl_set_err(err, "pipe: %s", strerror(errno));
    else if (rc)
        hl_set_err(err, "cannot start the pub/sub listener thread");
    return rc;
}

int hl_sub_register(hl_transport *c, hl_waiter *w, const char *channel, int64_t timeout_ms)
{
    return hl_sub_register_rule(c, w, channel, timeout_ms, HL_WAKE_LOCK);
}

/* fn set: w is an observer (hl_sub_observe). */
static int sub_register(hl_transport *c, hl_waiter *w, const char *channel, int64_t timeout_ms,
                        int wake_rule, void (*fn)(void *arg, const hl_ps_event *ev), void *arg)
{
    hl_node *node = hl_route(c, channel, strlen(channel));
    hl_pubsub *ps = &node->ps;
    int observer = fn != NULL;
    memset(w, 0, sizeof *w);
    w->node = node;
    w->wake_rule = wake_rule;
    w->observer = observer;
    w->on_message = fn;
    w->on_arg = arg;
    if (!observer) {
        hl_cond_init_mono(&w->cv);
        w->cv_live = 1; /* the caller waits on it and unregisters w, even on failure */
    }
    pthread_mutex_lock(&ps->mu);
    if (ps->stop) { /* client closing */
        pthread_mutex_unlock(&ps->mu);
        return HILOCK_ECLOSED;
    }
    size_t len = strlen(channel);
    hl_channel *ch = find_channel(ps, channel, len);
    if (!ch) {
        ch = calloc(1, sizeof *ch);
        if (!ch || !(ch->name = hl_strdup(channel))) {
            free(ch);
            pthread_mutex_unlock(&ps->mu);
            w->chan = NULL;
            return HILOCK_ENOMEM;
        }
        ch->state = HL_CH_PENDING;
        ch->next = ps->channels;
        ps->channels = ch;
    }
    ch->refs++;
    w->chan = ch;
    if (observer && ch->state == HL_CH_MOVED) /* routed by a slot map not reloaded yet */
        __atomic_store_n(&w->moved, 1, __ATOMIC_RELEASE);
    hl_waiter **tail = observer ? &ch->observers : &ch->waiters;
    while (*tail)
        tail = &(*tail)->next;
    *tail = w;
    char err[HL_ERRMSG_MAX];
    int rc = ensure_listener(node, err);
    if (rc == 0 && observer) {
        poke(ps); /* subscribes; nobody waits for it */
    } else if (rc == 0) {
        poke(ps);
        struct timespec ts;
        hl_abs_timespec(&ts, timeout_ms);
        int64_t gen = ps->generation;
        ps->conn_failed = 0;
        while (ch->state != HL_CH_SUBSCRIBED) {
            if (ps->conn_failed && ps->generation == gen) {
                rc = HILOCK_ECONN;
                break;
            }
            if (pthread_cond_timedwait(&ps->cv, &ps->mu, &ts) == ETIMEDOUT) {
                rc = ch->state == HL_CH_SUBSCRIBED ? 0 : HILOCK_ETIMEDOUT;
                break;
            }
        }
    }
    pthread_mutex_unlock(&ps->mu);
    return rc;
}

int hl_sub_register_rule(hl_transport *c, hl_waiter *w, const char *channel,
                         int64_t timeout_ms, int wake_rule)
{
    return sub_register(c, w, channel, timeout_ms, wake_rule, NULL, NULL);
}

int hl_sub_observe(hl_transport *c, hl_waiter *w, const char *channel,
                   void (*fn)(void *arg, const hl_ps_event *ev), void *arg)
{
    return sub_register(c, w, channel, 0, HL_WAKE_LOCK, fn, arg);
}

int hl_sub_moved(const hl_waiter *w)
{
    return __atomic_load_n(&w->moved, __ATOMIC_ACQUIRE);
}

void hl_pubsub_poke(hl_transport *c)
{
    hl_pubsub *ps = &c->nodes[0]->ps;
    pthread_mutex_lock(&ps->mu);
    if (ps->wk.running)
        poke(ps);
    pthread_mutex_unlock(&ps->mu);
}

int hl_sub_wait(hl_transport *c, hl_waiter *w, int64_t ms)
{
    (void)c;
    hl_pubsub *ps = &w->node->ps;
    pthread_mutex_lock(&ps->mu);
    struct timespec ts;
    if (ms >= 0)
        hl_abs_timespec(&ts, ms);
    while (!w->signaled && !ps->stop && !(w->cancel && __atomic_load_n(w->cancel, __ATOMIC_ACQUIRE))) {
        if (ms < 0)
            pthread_cond_wait(&w->cv, &ps->mu);
        else if (pthread_cond_timedwait(&w->cv, &ps->mu, &ts) == ETIMEDOUT)
            break;
    }
    w->signaled = 0;
    int moved = w->moved;
    pthread_mutex_unlock(&ps->mu);
    return moved;
}

void hl_sub_poke(hl_waiter *w)
{
    hl_pubsub *ps = &w->node->ps;
    pthread_mutex_lock(&ps->mu);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&ps->mu);
}

static void waiter_done(hl_waiter *w)
{
    if (w->cv_live)
        pthread_cond_destroy(&w->cv);
    w->cv_live = 0;
}

void hl_sub_unregister(hl_transport *c, hl_waiter *w)
{
    (void)c;
    hl_channel *ch = w->chan;
    if (!ch) { /* never registered (closing, no memory) or unregistered */
        waiter_done(w);
        return;
    }
    hl_pubsub *ps = &w->node->ps;
    pthread_mutex_lock(&ps->mu);
    for (hl_waiter **pp = w->observer ? &ch->observers : &ch->waiters; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    /* A wake-one message this waiter took without using is passed on. */
    if (w->signaled && !w->observer)
        pass_wake(ch, w);
    ch->refs--;
    if (ch->refs == 0) {
        if (ps->stop || ch->state == HL_CH_MOVED || (ch->state == HL_CH_PENDING && !ch->sent))
            remove_channel(ps, ch);
        else if (ps->wk.running)
            poke(ps);
    }
    w->chan = NULL;
    pthread_mutex_unlock(&ps->mu);
    waiter_done(w);
}

void hl_sub_notify(hl_waiter *w, hl_notify *nt)
{
    if (!w->chan)
        return;
    hl_pubsub *ps = &w->node->ps;
    pthread_mutex_lock(&ps->mu);
    w->notify = nt;
    if (w->signaled || ps->stop)
        hl_notify_fire(nt);
    pthread_mutex_unlock(&ps->mu);
}

int hl_sub_confirmed(hl_waiter *w, int64_t ms)
{
    if (!w->chan)
        return 0;
    hl_pubsub *ps = &w->node->ps;
    struct timespec ts;
    hl_abs_timespec(&ts, ms > 0 ? ms : 0);
    pthread_mutex_lock(&ps->mu);
    while (w->chan->state != HL_CH_SUBSCRIBED && !ps->stop && ms > 0)
        if (pthread_cond_timedwait(&ps->cv, &ps->mu, &ts) == ETIMEDOUT)
            break;
    int yes = w->chan->state == HL_CH_SUBSCRIBED;
    pthread_mutex_unlock(&ps->mu);
    return yes;
}

int hl_sub_take(hl_waiter *w, int pass, int *moved)
{
    *moved = 0;
    if (!w->chan)
        return 0;
    hl_pubsub *ps = &w->node->ps;
    pthread_mutex_lock(&ps->mu);
    int woken = w->signaled;
    w->signaled = 0;
    *moved = w->moved;
    if (woken && pass && !w->moved) {
        pass_wake(w->chan, w);
        woken = 0;
    }
    pthread_mutex_unlock(&ps->mu);
    return woken;
}

void hl_notify_init(hl_notify *nt)
{
    pthread_mutex_init(&nt->mu, NULL);
    hl_cond_init_mono(&nt->cv);
    nt->fired = 0;
}

void hl_notify_destroy(hl_notify *nt)
{
    pthread_cond_destroy(&nt->cv);
    pthread_mutex_destroy(&nt->mu);
}

void hl_notify_fire(hl_notify *nt)
{
    pthread_mutex_lock(&nt->mu);
    nt->fired = 1;
    pthread_cond_broadcast(&nt->cv);
    pthread_mutex_unlock(&nt->mu);
}

int hl_notify_wait(hl_notify *nt, int64_t ms)
{
    struct timespec ts;
    if (ms >= 0)
        hl_abs_timespec(&ts, ms);
    pthread_mutex_lock(&nt->mu);
    while (!nt->fired) {
        if (ms < 0)
            pthread_cond_wait(&nt->cv, &nt->mu);
        else if (pthread_cond_timedwait(&nt->cv, &nt->mu, &ts) == ETIMEDOUT)
            break;
    }
    int fired = nt->fired;
    nt->fired = 0;
    pthread_mutex_unlock(&nt->mu);
    return fired;
}

static void node_pubsub_shutdown(hl_node *n)
{
    hl_pubsub *ps = &n->ps;
    pthread_mutex_lock(&ps->mu);
    int running = ps->wk.running;
    ps->stop = 1;
    wake_all_waiters(ps);
    pthread_cond_broadcast(&ps->cv);
    if (running)
        poke(ps);
    pthread_mutex_unlock(&ps->mu);
    if (running)
        hl_worker_join(&ps->wk);
    /* Channels still used by a waiter of another thread (closing a client
     * in use) are freed by that waiter's hl_sub_unregister. */
    pthread_mutex_lock(&ps->mu);
    hl_channel *ch = ps->channels, *next;
    for (; ch; ch = next) {
        next = ch->next;
        if (ch->refs == 0)
            remove_channel(ps, ch);
    }
    pthread_mutex_unlock(&ps->mu);
}

void hl_pubsub_free_forked(hl_pubsub *ps)
{
    /* a child after fork(): nobody unregisters here (no listener thread,
     * the waiters are the parent's); the channel records are memory only */
    hl_channel *ch = ps->channels;
    ps->channels = NULL;
    while (ch) {
        hl_channel *next = ch->next;
        free(ch->name);
        free(ch);
        ch = next;
    }
}

void hl_pubsub_shutdown(hl_transport *c)
{
    int count = __atomic_load_n(&c->nnodes, __ATOMIC_ACQUIRE);
    for (int i = 0; i < count; i++)
        node_pubsub_shutdown(c->nodes[i]);
}
