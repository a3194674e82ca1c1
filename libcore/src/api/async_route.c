/*
 * The non-blocking driver's servers and topology (hilock_async on Redis
 * Cluster and Sentinel) and replica acknowledgement. The decisions are the
 * engine's: hl_router_on_reply / hl_router_on_conn_error (MOVED, ASK,
 * TRYAGAIN, CLUSTERDOWN, LOADING, READONLY, a connect that failed),
 * hl_decode_slot_range (CLUSTER SLOTS), hl_decode_master_addr and
 * hl_decode_switch_master (sentinels), hl_ack_* (ROLE, WAIT). This file
 * keeps what they learn (one command and one pub/sub connection per
 * server, the slot map, the master's address) and asks its questions on
 * the loop's descriptors, never blocking:
 *   - cluster: the slot map is learned with CLUSTER SLOTS from a known node
 *     or a seed, before the first command and again after a MOVED, a slot
 *     that left a node's pub/sub or a lost connection; a command for a slot
 *     not known yet waits (parked) for the answer;
 *   - sentinel: the master's address is asked of the sentinels before the
 *     first command and again after READONLY or a lost connection, and one
 *     sentinel's pub/sub connection follows +switch-master (a demoted master
 *     may stay writable for seconds before the sentinels reconfigure it);
 *     commands wait (parked) while the question is out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async_impl.h"

#define WATCH_RETRY_MS 1000

/* ---- servers ---- */

static as_node *node_add(as_link *lk, as_node **list, const char *host, int port, int sentinel)
{
    as_node *nd = calloc(1, sizeof *nd);
    if (!nd)
        return NULL;
    if (host && !(nd->host = hl_strdup(host))) {
        free(nd);
        return NULL;
    }
    nd->link = lk;
    nd->port = port;
    nd->sentinel = sentinel;
    nd->replicas_at = -1;
    hl_sublive_init(&nd->live, lk->client->t.opts.command_timeout_ms);
    while (*list)
        list = &(*list)->next;
    *list = nd;
    if (!sentinel)
        lk->nnodes++;
    return nd;
}

/* The cluster node at host:port, added when new (NULL: out of memory, or
 * more than HL_MAX_NODES). */
static as_node *node_get(as_link *lk, const char *host, int port)
{
    for (as_node *nd = lk->nodes; nd; nd = nd->next)
        if (nd->host && nd->port == port && strcmp(nd->host, host) == 0)
            return nd;
    if (lk->nnodes >= HL_MAX_NODES)
        return NULL;
    return node_add(lk, &lk->nodes, host, port, 0);
}

static as_node *node_nth(as_node *nd, int i)
{
    while (nd && i-- > 0)
        nd = nd->next;
    return nd;
}

as_link *hl_as_link_new(hilock_async *a, hilock_client *c, int *rc)
{
    const hl_endpoint *ep = &c->t.ep;
    as_link *lk = calloc(1, sizeof *lk);
    if (!lk) {
        *rc = HILOCK_ENOMEM;
        return NULL;
    }
    lk->a = a;
    lk->client = c;
    lk->watch_at = -1;
    lk->observe_at = -1;
    lk->expire_at = -1;
    lk->mode = ep->cluster ? HL_MODE_CLUSTER : ep->master_name ? HL_MODE_SENTINEL : HL_MODE_SINGLE;
    int ok = 1;
    if (lk->mode == HL_MODE_SINGLE) {
        ok = node_add(lk, &lk->nodes, NULL, 0, 0) != NULL;
        lk->known = 1;
    } else if (lk->mode == HL_MODE_SENTINEL) {
        /* the master: its address once a sentinel named it */
        ok = node_add(lk, &lk->nodes, NULL, 0, 0) != NULL;
        for (int i = 0; ok && i < ep->nseeds; i++)
            ok = node_add(lk, &lk->sentinels, ep->seed_hosts[i], ep->seed_ports[i], 1) != NULL;
        lk->watch_at = 0;
    } else {
        ok = (lk->slots = calloc(HL_SLOTS, sizeof *lk->slots)) != NULL;
    }
    if (!ok) {
        hl_as_link_free(lk);
        *rc = HILOCK_ENOMEM;
        return NULL;
    }
    return lk;
}

static void nodes_free(as_node *nd)
{
    while (nd) {
        as_node *nx = nd->next;
        while (nd->chans) {
            as_chan *ch = nd->chans;
            nd->chans = ch->next;
            free(ch->name);
            free(ch);
        }
        free(nd->host);
        free(nd);
        nd = nx;
    }
}

void hl_as_link_free(as_link *lk)
{
    if (!lk)
        return;
    hl_holds_free(&lk->holds);
    free(lk->due);
    free(lk->groups);
    nodes_free(lk->nodes);
    nodes_free(lk->sentinels);
    free(lk->slots);
    if (lk->probe_reply)
        freeReplyObject(lk->probe_reply);
    free(lk);
}

/* ---- topology questions ---- */

static void resolve_done(as_link *lk, int ok)
{
    lk->resolving = 0;
    if (ok)
        lk->known = 1;
    /* asking again failed: go on with what was known (the next READONLY,
     * MOVED or lost connection asks again) rather than ask in a loop */
    if (ok || lk->known)
        lk->stale = 0;
    /* what waited for the answer goes on (or fails: no server answered) */
    for (as_op *op = lk->a->ops; op; op = op->next) {
        if (!op->parked || op->link != lk)
            continue;
        op->parked = 0;
        if (op->sent) {
            if (lk->known) {
                op->resend = 1;
            } else { /* nothing was sent: an error the machine decides on */
                op->sent = NULL;
                snprintf(op->err, sizeof op->err, "%s", lk->errmsg);
                hl_as_feed_error(op, HILOCK_ECONN);
            }
        } else if (!lk->known) { /* no subscription: the machine retries on a timer */
            if (op->type == OP_ACQUIRE)
                hl_acquire_on_subscribed(&op->acq, 0, hl_as_now());
            else if (op->type == OP_EXT)
                op->kind->on_subscribed(op->self, 0, hl_as_now());
        }
        hl_as_op_queue(op);
    }
}

/* Ask the next candidate (cluster: the known nodes, then the seeds;
 * sentinel: the sentinels in turn); none left: the question failed. */
static void probe_next(as_link *lk)
{
    hilock_client *c = lk->client;
    const hl_endpoint *ep = &c->t.ep;
    int total = lk->probe_known + ep->nseeds;
    while (lk->probe_next < total) {
        int i = lk->probe_next++;
        as_node *nd;
        if (lk->mode == HL_MODE_SENTINEL)
            nd = node_nth(lk->sentinels, i);
        else if (i < lk->probe_known)
            nd = node_nth(lk->nodes, i);
        else
            nd = node_get(lk, ep->seed_hosts[i - lk->probe_known],
                          ep->seed_ports[i - lk->probe_known]);
        as_conn *k = nd ? hl_as_conn_get(lk->a, nd, 0) : NULL;
        as_req *q = k ? hl_as_req_new(k, c->t.opts.connect_timeout_ms +
                                             c->t.opts.command_timeout_ms)
                      : NULL;
        lk->probe_node = nd;
        if (!q) {
            if (nd && lk->mode == HL_MODE_SENTINEL)
                snprintf(lk->errmsg, sizeof lk->errmsg,
                         "asking for the master: connection to sentinel %s:%d failed", nd->host,
                         nd->port);
            continue;
        }
        q->probe = lk;
        hl_cmd cmd;
        if (lk->mode == HL_MODE_SENTINEL)
            hl_cmd_sentinel_master(&cmd, ep->master_name);
        else
            hl_cmd_cluster_slots(&cmd);
        if (redisAsyncCommandArgv(k->ac, hl_as_reply_cb, q, cmd.argc, cmd.argv, cmd.argvlen) ==
            REDIS_OK)
            return;
        hl_as_req_unlink(q);
        free(q);
    }
    if (lk->mode == HL_MODE_SENTINEL) {
        /* the last sentinel's failure (probe_answered: what happened) */
        char why[HL_ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", lk->errmsg);
        snprintf(lk->errmsg, sizeof lk->errmsg, "no sentinel named master '%.40s'%s%.160s",
                 ep->master_name, why[0] ? ": " : "", why);
    } else if (!lk->errmsg[0]) {
        snprintf(lk->errmsg, sizeof lk->errmsg, "no cluster node answered CLUSTER SLOTS");
    }
    resolve_done(lk, 0);
}

/* Ask the topology, sentinel: from sentinel first on. */
static void resolve_start_at(as_link *lk, int first)
{
    if (lk->resolving)
        return;
    lk->resolving = 1;
    lk->probe_next = first;
    lk->probe_known = lk->mode == HL_MODE_CLUSTER ? lk->nnodes : 0;
    lk->errmsg[0] = 0;
    probe_next(lk);
}

static void resolve_start(as_link *lk)
{
    resolve_start_at(lk, 0);
}

void hl_as_probe_reply(as_link *lk, redisReply *r, int timed_out)
{
    if (lk->probe_reply)
        freeReplyObject(lk->probe_reply);
    lk->probe_reply = r;
    lk->probe_timed_out = !r && timed_out;
    lk->probe_ready = 1;
}

/* The sentinel master is at host:port: connections elsewhere are dropped
 * (commands still in flight there are answered; subscriptions move). */
static int master_at(as_link *lk, const char *host, int port)
{
    as_node *nd = lk->nodes;
    if (nd->host && nd->port == port && strcmp(nd->host, host) == 0)
        return 0;
    char *h = hl_strdup(host);
    if (!h)
        return -1;
    if (nd->cmd)
        hl_as_conn_detach(nd->cmd);
    if (nd->sub)
        hl_as_conn_detach(nd->sub);
    free(nd->host);
    nd->host = h;
    nd->port = port;
    nd->addr_gen++; /* settles on the old master no longer hold attempts back */
    nd->replicas_at = -1;
    return 0;
}

/* A CLUSTER SLOTS answer: the new map (entries with bad slots, hosts or
 * ports skipped); 0, or -1 when it names no usable node. */
static int load_slots(as_link *lk, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return -1;
    size_t used = 0;
    for (size_t i = 0; i < r->elements; i++) {
        hl_slot_range sr;
        if (hl_decode_slot_range(r->element[i], &sr) == 0 && node_get(lk, sr.host, sr.port))
            used++;
    }
    if (!used)
        return -1;
    for (unsigned s = 0; s < HL_SLOTS; s++)
        lk->slots[s] = NULL;
    for (size_t i = 0; i < r->elements; i++) {
        hl_slot_range sr;
        as_node *nd;
        if (hl_decode_slot_range(r->element[i], &sr) == 0 &&
            (nd = node_get(lk, sr.host, sr.port)) != NULL)
            for (unsigned s = sr.lo; s <= sr.hi; s++)
                lk->slots[s] = nd;
    }
    return 0;
}

static void probe_answered(as_link *lk, redisReply *r)
{
    int ok = 0, named = 0;
    if (r && lk->mode == HL_MODE_SENTINEL) {
        char host[256];
        int port = 0;
        named = hl_decode_master_addr(r, host, sizeof host, &port) == 0;
        ok = named && master_at(lk, host, port) == 0;
    } else if (r) {
        ok = load_slots(lk, r) == 0;
    }
    if (!ok && lk->mode == HL_MODE_SENTINEL && lk->probe_node) {
        /* what happened, worded as the blocking client does
         * (hl_sentinel_master): no reply in time, the connection failed,
         * or the engine's reading of the reply (hl_msg_master_addr) */
        const as_node *nd = lk->probe_node;
        const hilock_options *o = &lk->client->t.opts;
        char where[300];
        snprintf(where, sizeof where, "sentinel %s:%d", nd->host, nd->port);
        if (!r && lk->probe_timed_out) {
            char why[HL_ERRMSG_MAX];
            hl_msg_no_reply(why, sizeof why, o->connect_timeout_ms + o->command_timeout_ms,
                            where);
            snprintf(lk->errmsg, sizeof lk->errmsg, "asking for the master: %.200s", why);
        } else if (!r) {
            snprintf(lk->errmsg, sizeof lk->errmsg, "asking for the master: connection to %.180s failed",
                     where);
        } else if (named) {
            snprintf(lk->errmsg, sizeof lk->errmsg, "out of memory");
        } else {
            hl_msg_master_addr(lk->errmsg, sizeof lk->errmsg, where,
                               lk->client->t.ep.master_name, r);
        }
    } else if (!ok) {
        snprintf(lk->errmsg, sizeof lk->errmsg, "%s: %s",
                 lk->mode == HL_MODE_SENTINEL ? "asking a sentinel for the master failed"
                                              : "CLUSTER SLOTS failed",
                 r && r->type == REDIS_REPLY_ERROR && r->str ? r->str
                 : r ? "unexpected reply" : "no answer");
    }
    if (r)
        freeReplyObject(r);
    if (ok)
        resolve_done(lk, 1);
    else
        probe_next(lk);
}

/* ---- following +switch-master (sentinel) ---- */

static void watch_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    as_conn *k = ac->data;
    as_link *lk = priv;
    redisReply *r = reply;
    if (!r || !k || k->a->closing || !k->node || k->node != lk->watch) {
        if (r)
            freeReplyObject(r);
        return;
    }
    hl_sublive_heard(&lk->watch->live, hl_as_now()); /* any frame: it delivers */
    hl_ps_event ev;
    hl_decode_pubsub(r, &ev);
    char host[256];
    int port = 0;
    if (ev.type == HL_PS_SUBSCRIBE) {
        lk->stale = 1; /* a switch may have come while nobody listened */
        lk->watch_ask = 1; /* asked now (hl_as_route_work), not at the next call */
    } else if (hl_decode_switch_master(r, lk->client->t.ep.master_name, host, sizeof host,
                                       &port)) {
        snprintf(lk->switch_host, sizeof lk->switch_host, "%s", host);
        lk->switch_port = port;
    }
    freeReplyObject(r);
}

static int watching(const as_link *lk)
{
    const as_conn *k = lk->watch ? lk->watch->sub : NULL;
    return k && k->ac && !(k->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING));
}

/* The answer to the watch's liveness PING (["pong", ""] while subscribed). */
static void watch_ping_cb(redisAsyncContext *ac, void *reply, void *priv)
{
    as_conn *k = ac->data;
    as_link *lk = priv;
    if (reply && k && !k->a->closing && k->node && k->node == lk->watch)
        hl_sublive_heard(&lk->watch->live, hl_as_now());
    if (reply)
        freeReplyObject(reply);
}

/* The session's liveness rule on the watch connection (hl_sublive, as on
 * the lock subscriptions): a sentinel, or a proxy in front of it, that
 * keeps the connection open and stops answering would leave the client
 * deaf to failovers. A PING when nothing was heard for an interval (the
 * SUBSCRIBE's answer included); unanswered as long again, the connection is
 * closed and the next sentinel watched at once (whose SUBSCRIBE's answer
 * has the master asked again: a switch may have been missed). */
static void watch_live_tick(as_link *lk, int64_t now)
{
    as_node *nd = lk->watch;
    as_conn *k = nd->sub;
    int due = hl_sublive_due(&nd->live, now);
    if (due & HL_SUBLIVE_RESET) {
        hl_as_conn_close(k);
        lk->watch_at = now;
    } else if (due & HL_SUBLIVE_PING) {
        hl_cmd ping;
        hl_cmd_ping(&ping);
        if (redisAsyncCommandArgv(k->ac, watch_ping_cb, lk, ping.argc, ping.argv, ping.argvlen) !=
            REDIS_OK) {
            hl_as_conn_close(k);
            lk->watch_at = now;
        }
    }
}

static void watch_start(as_link *lk, int64_t now)
{
    const hl_endpoint *ep = &lk->client->t.ep;
    lk->watch_at = now + WATCH_RETRY_MS; /* again then if this one fails */
    if (ep->nseeds <= 0)
        return;
    as_node *nd = node_nth(lk->sentinels, lk->watch_next++ % ep->nseeds);
    as_conn *k = nd ? hl_as_conn_get(lk->a, nd, 1) : NULL;
    if (!k)
        return;
    hl_cmd cmd;
    hl_cmd_sentinel_watch(&cmd);
    if (redisAsyncCommandArgv(k->ac, watch_cb, lk, cmd.argc, cmd.argv, cmd.argvlen) == REDIS_OK) {
        lk->watch = nd;
        hl_sublive_opened(&nd->live, now); /* not known alive until answered */
    }
}

/* ---- the driver's calls ---- */

void hl_as_route_work(hilock_async *a)
{
    int64_t now = -1;
    for (as_link *lk = a->links; lk; lk = lk->next) {
        if (lk->mode == HL_MODE_SENTINEL) {
            if (lk->switch_port > 0) {
                int port = lk->switch_port;
                lk->switch_port = 0;
                if (master_at(lk, lk->switch_host, port) == 0 && !lk->resolving) {
                    lk->known = 1;
                    lk->stale = 0;
                }
            }
            if (lk->watch_ask) {
                /* the master known before: asked again at once, so that a
                 * waiter or a hold on a master that was switched meanwhile
                 * moves now (unknown: the first call asks) */
                lk->watch_ask = 0;
                if (lk->known && !lk->resolving && lk->client->t.ep.nseeds > 0)
                    resolve_start_at(lk, (lk->watch_next - 1) % lk->client->t.ep.nseeds);
            }
            if (watching(lk)) {
                if (now < 0)
                    now = hl_as_now();
                watch_live_tick(lk, now);
            }
            if (!watching(lk)) {
                if (now < 0)
                    now = hl_as_now();
                if (lk->watch_at >= 0 && lk->watch_at <= now)
                    watch_start(lk, now);
            }
        }
        if (lk->probe_ready) {
            redisReply *r = lk->probe_reply;
            lk->probe_reply = NULL;
            lk->probe_ready = 0;
            probe_answered(lk, r);
        }
    }
}

int64_t hl_as_route_next_at(hilock_async *a)
{
    int64_t at = -1;
    for (as_link *lk = a->links; lk; lk = lk->next) {
        if (lk->probe_ready || lk->switch_port > 0 || lk->watch_ask)
            return hl_as_now();
        if (lk->mode == HL_MODE_SENTINEL && !watching(lk) && lk->watch_at >= 0 &&
            (at < 0 || lk->watch_at < at))
            at = lk->watch_at;
        if (lk->mode == HL_MODE_SENTINEL && watching(lk)) {
            int64_t live = hl_sublive_next(&lk->watch->live);
            if (live >= 0 && (at < 0 || live < at))
                at = live;
        }
    }
    return at;
}

/* The topology must be asked (again) before op can go on: parked. */
static int park(as_op *op)
{
    as_link *lk = op->link;
    resolve_start(lk);
    if (!lk->resolving)
        return 0; /* failed at once: no candidate could be asked */
    op->parked = 1;
    return 1;
}

int hl_as_route(as_op *op, const hl_cmd *cmd, as_node **out)
{
    as_link *lk = op->link;
    if (op->ask) {
        *out = op->ask;
        return 0;
    }
    if (lk->mode == HL_MODE_SINGLE) {
        *out = lk->nodes;
        return 0;
    }
    if (lk->mode == HL_MODE_SENTINEL) {
        if ((!lk->known || lk->stale || lk->resolving) && park(op))
            return 1;
        if (!lk->known) {
            snprintf(op->err, sizeof op->err, "%s", lk->errmsg);
            return HILOCK_ECONN;
        }
        *out = lk->nodes;
        return 0;
    }
    size_t klen = 0;
    const char *key = hl_cmd_key(cmd, &klen);
    as_node *nd = lk->known && key ? lk->slots[hl_key_slot(key, klen)] : NULL;
    if (nd) {
        if (lk->stale)
            resolve_start(lk); /* a slot moved: reload the map meanwhile */
        *out = nd;
        return 0;
    }
    /* a slot the map does not name: wait for a fresh one, once */
    if ((!lk->known || lk->stale || lk->resolving) && park(op))
        return 1;
    if (lk->nodes) { /* any node answers with a redirection */
        *out = lk->nodes;
        return 0;
    }
    snprintf(op->err, sizeof op->err, "%s", lk->errmsg);
    return HILOCK_ECONN;
}

int hl_as_route_channel(as_op *op, const char *channel, as_node **out)
{
    as_link *lk = op->link;
    if (lk->mode == HL_MODE_SINGLE) {
        *out = lk->nodes;
        return 0;
    }
    /* a listener of a multi-lock does not wait: it just does not wake */
    if ((!lk->known || lk->stale || lk->resolving) && op->type != OP_LISTEN && park(op))
        return 1;
    as_node *nd = !lk->known                    ? NULL
                  : lk->mode == HL_MODE_CLUSTER ? lk->slots[hl_key_slot(channel, strlen(channel))]
                                                : lk->nodes;
    if (!nd)
        return HILOCK_ECONN;
    *out = nd;
    return 0;
}

as_node *hl_as_route_hold_channel(as_link *lk, const char *channel)
{
    if (lk->mode == HL_MODE_SINGLE)
        return lk->nodes;
    if (!lk->known)
        return NULL;
    return lk->mode == HL_MODE_CLUSTER ? lk->slots[hl_key_slot(channel, strlen(channel))]
                                       : lk->nodes;
}

static void resend_after(as_op *op, int64_t pause_ms)
{
    if (pause_ms > 0)
        op->route_at = hl_as_now() + pause_ms;
    else
        op->resend = 1;
}

int hl_as_route_reply(as_op *op, as_conn *k, redisReply *r)
{
    as_link *lk = op->link;
    hl_route_action act = hl_router_on_reply(&op->rt, r);
    if (act == HL_ROUTE_DONE)
        return 0;
    if (act == HL_ROUTE_MOVED || act == HL_ROUTE_ASK) {
        as_node *to = lk->mode == HL_MODE_CLUSTER ? node_get(lk, op->rt.host, op->rt.port) : NULL;
        if (!to) {
            snprintf(op->err, sizeof op->err, "cannot follow the redirection: %s", r->str);
            freeReplyObject(r);
            return -1;
        }
        if (act == HL_ROUTE_MOVED) { /* the slot lives there now; reload the map */
            lk->slots[op->rt.slot] = to;
            lk->stale = 1;
        } else {
            op->ask = to; /* this one command, during a migration */
        }
    } else if (act == HL_ROUTE_REFRESH) {
        /* a failover demoted that server: a new connection, to the master
         * the sentinels (or the slot map) name now */
        snprintf(op->err, sizeof op->err, "server is not the master: %s", r->str);
        if (k && k->node && !k->node->sentinel)
            hl_as_conn_detach(k);
        if (lk->mode != HL_MODE_SINGLE)
            lk->stale = 1;
    } else if (act == HL_ROUTE_FAIL) {
        if (hl_reply_not_master(r))
            snprintf(op->err, sizeof op->err, "server is not the master: %s", r->str);
        else
            snprintf(op->err, sizeof op->err, "too many cluster redirections");
        freeReplyObject(r);
        return -1;
    } /* HL_ROUTE_RETRY: TRYAGAIN, CLUSTERDOWN, LOADING */
    freeReplyObject(r);
    resend_after(op, op->rt.sleep_ms);
    return 1;
}

int hl_as_route_conn_error(as_op *op, as_conn *k)
{
    /* did the command leave? only when the connection was made */
    int sent = !k || k->connected;
    if (op->link->mode != HL_MODE_SINGLE)
        op->link->stale = 1;
    if (hl_router_on_conn_error(&op->rt, sent) != HL_ROUTE_REFRESH)
        return 0;
    resend_after(op, op->rt.sleep_ms);
    return 1;
}

void hl_as_route_conn_lost(as_conn *k)
{
    as_node *nd = k->node;
    if (!nd || nd->sentinel || nd->link->mode == HL_MODE_SINGLE)
        return;
    nd->link->stale = 1; /* the master failed over, or the node left */
}

void hl_as_route_chan_moved(as_node *nd)
{
    nd->link->stale = 1;
}

/* ---- replica acknowledgement ---- */

/* Send the ack machine's next command on the attempt's connection: 1 sent,
 * 0 the machine is done (op->unacked set, the node's count kept). */
static int ack_next(as_op *op)
{
    as_conn *k = op->ack_conn;
    hilock_client *c = op->link->client;
    while (hl_ack_next(&op->ack) == HL_ACT_SEND) {
        as_req *q = k && k->ac && !(k->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING))
                        ? hl_as_req_new(k, c->t.opts.command_timeout_ms + op->ack.timeout_ms)
                        : NULL;
        if (!q) {
            hl_ack_on_error(&op->ack);
            continue;
        }
        q->op = op;
        q->ack = 1;
        if (redisAsyncCommandArgv(k->ac, hl_as_reply_cb, q, op->ack.cmd.argc, op->ack.cmd.argv,
                                  op->ack.cmd.argvlen) == REDIS_OK) {
            op->req = q;
            return 1;
        }
        hl_as_req_unlink(q);
        free(q);
        hl_ack_on_error(&op->ack);
    }
    if (op->ack.refreshed && k && k->node) {
        k->node->replicas = op->ack.replicas;
        k->node->replicas_at = hl_as_now();
    }
    /* Sentinel: the client's memory of the name (shared with its blocking
     * calls), not the node's: a failover re-points the node */
    if (op->ack.replicated && op->link->mode == HL_MODE_SENTINEL)
        __atomic_store_n(&c->t.replicated, 1, __ATOMIC_RELEASE);
    op->unacked = !op->ack.acked;
    op->ack_conn = NULL;
    return 0;
}

int hl_as_ack_start(as_op *op, as_conn *k, redisReply *r)
{
    hilock_client *c = op->link->client;
    op->unacked = 0;
    if (!c->t.replica_ack || r->type == REDIS_REPLY_ERROR || !k || !k->node)
        return 0;
    as_node *nd = k->node;
    int64_t now = hl_as_now();
    hl_ack_init_replicated(&op->ack, nd->replicas_at < 0 ? -1 : nd->replicas,
                           nd->replicas_at < 0 ? -1 : now - nd->replicas_at,
                           c->t.opts.replica_ack_timeout_ms,
                           op->link->mode == HL_MODE_SENTINEL &&
                               __atomic_load_n(&c->t.replicated, __ATOMIC_ACQUIRE));
    op->ack_conn = k;
    if (!ack_next(op))
        return 0;
    op->ack_reply = r;
    return 1;
}

int hl_as_ack_feed(as_op *op, redisReply *r)
{
    if (r) {
        hl_ack_on_reply(&op->ack, r);
        freeReplyObject(r);
    } else {
        hl_ack_on_error(&op->ack);
    }
    return !ack_next(op);
}
