/* Transport: the node table (one entry per server: its pool and pub/sub
 * listener), the cluster slot map (CLUSTER SLOTS) and routing a key to its
 * node, and dropping the connections to a master the sentinels replaced. */
#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "transport.h"
#include "transport_impl.h"

static hl_node *node_new(hl_transport *c, const char *host, int port)
{
    hl_node *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->pool.idle = calloc((size_t)c->opts.pool_size, sizeof *n->pool.idle);
    if (!n->pool.idle || (host && !(n->host = hl_strdup(host)))) {
        free(n->pool.idle);
        free(n);
        return NULL;
    }
    n->client = c;
    n->port = port;
    n->pool.size = c->opts.pool_size;
    pthread_mutex_init(&n->pool.mu, NULL);
    hl_cond_init_mono(&n->pool.cv);
    pthread_mutex_init(&n->ps.mu, NULL);
    hl_cond_init_mono(&n->ps.cv);
    hl_worker_init(&n->ps.wk);
    return n;
}

void hl_node_free(hl_node *n, int forked)
{
    if (!n)
        return;
    if (forked) { /* see client_destroy */
        for (int i = 0; i < n->pool.nidle; i++)
            redisFree(n->pool.idle[i]);
        if (n->ps.ctx)
            redisFree(n->ps.ctx);
        hl_pubsub_free_forked(&n->ps);
        free(n->pool.idle);
        free(n->host);
        free(n);
        return;
    }
    for (int i = 0; i < n->pool.nidle; i++)
        redisFree(n->pool.idle[i]);
    hl_worker_close(&n->ps.wk);
    pthread_mutex_destroy(&n->pool.mu);
    pthread_cond_destroy(&n->pool.cv);
    pthread_mutex_destroy(&n->ps.mu);
    pthread_cond_destroy(&n->ps.cv);
    free(n->pool.idle);
    free(n->host);
    free(n);
}

int hl_nodes_init(hl_transport *c, char *err)
{
    for (int i = 0; i < HL_SLOTS; i++)
        c->slot_node[i] = -1;
    if (c->ep.cluster)
        return 0; /* nodes come from the slot map */
    hl_node *n = node_new(c, NULL, 0);
    if (!n) {
        hl_set_err(err, "out of memory");
        return HILOCK_ENOMEM;
    }
    c->nodes[0] = n;
    __atomic_store_n(&c->nnodes, 1, __ATOMIC_RELEASE);
    return 0;
}

static hl_node *node_find(hl_transport *c, const char *host, int port) /* nodes_mu */
{
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i]->host && c->nodes[i]->port == port && !strcmp(c->nodes[i]->host, host))
            return c->nodes[i];
    return NULL;
}

/* Give a retired entry nobody uses (no connection checked out, no channel
 * of its pub/sub listener, no attempt being settled) the address host:port;
 * its idle connections are closed (its listener's too: hl_pubsub_unused).
 * A listener that ran keeps its thread, asleep until a channel is
 * registered (holds listen on their locks' channels, so most used nodes
 * had one). A thread that still holds the entry from an
 * earlier route only reaches the new address, which answers MOVED for a key
 * it does not serve. NULL when every retired entry is in use. nodes_mu. */
static hl_node *node_reuse(hl_transport *c, const char *host, int port)
{
    for (int i = 0; i < c->nnodes; i++) {
        hl_node *n = c->nodes[i];
        if (!n->retired)
            continue;
        char *h = hl_strdup(host);
        if (!h)
            return NULL;
        pthread_mutex_lock(&c->drain.mu);
        pthread_mutex_lock(&n->ps.mu);
        pthread_mutex_lock(&n->pool.mu);
        int idle = n->pool.inuse == 0 && n->settling == 0 && hl_pubsub_unused(n);
        if (idle) {
            for (int j = 0; j < n->pool.nidle; j++)
                redisFree(n->pool.idle[j]);
            n->pool.nidle = 0;
            free(n->host);
            n->host = h;
            n->port = port;
            n->retired = 0;
            __atomic_store_n(&n->replicas_seen_at, 0, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&n->pool.mu);
        pthread_mutex_unlock(&n->ps.mu);
        pthread_mutex_unlock(&c->drain.mu);
        if (idle)
            return n;
        free(h);
    }
    return NULL;
}

hl_node *hl_node_get(hl_transport *c, const char *host, int port)
{
    pthread_mutex_lock(&c->nodes_mu);
    int count = c->nnodes;
    hl_node *found = node_find(c, host, port);
    if (found)
        found->retired = 0;
    else if (count < c->max_nodes && count < HL_MAX_NODES &&
             (found = node_new(c, host, port)) != NULL) {
        c->nodes[count] = found;
        __atomic_store_n(&c->nnodes, count + 1, __ATOMIC_RELEASE);
    } else if (count > 0) {
        found = node_reuse(c, host, port);
    }
    pthread_mutex_unlock(&c->nodes_mu);
    return found;
}

/* Copy n's address (cluster nodes; 0 = the client's endpoint). */
int hl_node_addr(hl_node *n, char *host, size_t len, int *port)
{
    hl_transport *c = n->client;
    if (!c->ep.cluster)
        return 0;
    pthread_mutex_lock(&c->nodes_mu);
    snprintf(host, len, "%s", n->host ? n->host : "");
    *port = n->port;
    pthread_mutex_unlock(&c->nodes_mu);
    return 1;
}

void hl_node_where(hl_node *n, char *buf, size_t len)
{
    hl_transport *c = n->client;
    char host[256] = "";
    int port = 0;
    if (hl_node_addr(n, host, sizeof host, &port)) {
        snprintf(buf, len, "%s:%d", host, port);
        return;
    }
    if (c->ep.path) {
        snprintf(buf, len, "unix:%s", c->ep.path);
        return;
    }
    if (!c->ep.master_name) {
        snprintf(buf, len, "%s:%d", c->ep.host ? c->ep.host : "?", c->ep.port);
        return;
    }
    char addr[sizeof c->sw.master];
    pthread_mutex_lock(&c->nodes_mu);
    memcpy(addr, c->sw.master, sizeof addr);
    pthread_mutex_unlock(&c->nodes_mu);
    addr[sizeof addr - 1] = 0;
    char *sp = strchr(addr, ' ');
    if (sp)
        *sp = ':'; /* "ip port" as the sentinels give it */
    if (addr[0])
        snprintf(buf, len, "%s", addr);
    else
        snprintf(buf, len, "master '%s'", c->ep.master_name);
}

int hl_node_index(hl_transport *c, const hl_node *n)
{
    int count = __atomic_load_n(&c->nnodes, __ATOMIC_ACQUIRE);
    for (int i = 0; i < count; i++)
        if (c->nodes[i] == n)
            return i;
    return -1;
}

redisContext *hl_node_connect(hl_node *n, int64_t connect_timeout_ms, int *code, char *err)
{
    hl_transport *c = n->client;
    char host[256];
    int port = 0;
    if (hl_node_addr(n, host, sizeof host, &port))
        return hl_connect_addr(&c->ep, host, port, connect_timeout_ms,
                            c->opts.command_timeout_ms, code, err);
    return hl_connect(&c->ep, connect_timeout_ms, c->opts.command_timeout_ms, code, err);
}

/* Load the slot map (CLUSTER SLOTS) through ctx; 0 or -1. */
static int load_slots(hl_transport *c, redisContext *ctx, char *err)
{
    redisReply *r = hl_command(ctx, "CLUSTER SLOTS");
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        hl_set_err(err, "CLUSTER SLOTS failed: %s",
                   r && r->type == REDIS_REPLY_ERROR ? r->str : ctx->errstr);
        if (r)
            freeReplyObject(r);
        return -1;
    }
    /* Nodes this map names stay; the others are retired (their entries may
     * be reused for new addresses). Known ones first, so that a new address
     * never takes the entry of one named further down. */
    char named[HL_MAX_NODES] = {0};
    pthread_mutex_lock(&c->nodes_mu);
    for (size_t i = 0; i < r->elements; i++) {
        hl_slot_range sr;
        hl_node *n;
        if (!hl_decode_slot_range(r->element[i], &sr) && (n = node_find(c, sr.host, sr.port)))
            n->retired = 0;
    }
    pthread_mutex_unlock(&c->nodes_mu);
    size_t used = 0;
    for (size_t i = 0; i < r->elements; i++) {
        hl_slot_range sr; /* entries with bad slots, hosts or ports are skipped */
        if (hl_decode_slot_range(r->element[i], &sr))
            continue;
        hl_node *n = hl_node_get(c, sr.host, sr.port);
        int idx = n ? hl_node_index(c, n) : -1;
        for (unsigned s = sr.lo; s <= sr.hi; s++)
            __atomic_store_n(&c->slot_node[s], (int16_t)idx, __ATOMIC_RELEASE);
        if (idx >= 0)
            named[idx] = 1;
        used += idx >= 0;
    }
    freeReplyObject(r);
    pthread_mutex_lock(&c->nodes_mu);
    for (int i = 0; i < c->nnodes; i++)
        if (!named[i])
            c->nodes[i]->retired = 1;
    pthread_mutex_unlock(&c->nodes_mu);
    if (!used) {
        hl_set_err(err, "CLUSTER SLOTS named no usable node (bad slots, hosts or ports)");
        return -1;
    }
    return 0;
}

int hl_cluster_refresh(hl_transport *c, char *err)
{
    hl_nosigpipe sp;
    hl_transport_nosigpipe_enter(&sp);
    pthread_mutex_lock(&c->refresh_mu);
    __atomic_store_n(&c->map_stale, 0, __ATOMIC_RELEASE);
    int ok = 0, last = HILOCK_ECONN;
    /* known nodes first, then the seeds */
    int count = __atomic_load_n(&c->nnodes, __ATOMIC_ACQUIRE);
    for (int i = 0; i < count + c->ep.nseeds && !ok; i++) {
        char host[256];
        int port = 0;
        if (i < count)
            hl_node_addr(c->nodes[i], host, sizeof host, &port);
        else {
            snprintf(host, sizeof host, "%s", c->ep.seed_hosts[i - count]);
            port = c->ep.seed_ports[i - count];
        }
        int code = 0;
        redisContext *ctx = hl_connect_addr(&c->ep, host, port, c->opts.connect_timeout_ms,
                                         c->opts.command_timeout_ms, &code, err);
        if (!ctx) {
            if (code == HILOCK_EAUTH || code == HILOCK_ETLS)
                last = code; /* refused, not just unreachable */
            continue;
        }
        ok = load_slots(c, ctx, err) == 0;
        redisFree(ctx);
    }
    pthread_mutex_unlock(&c->refresh_mu);
    hl_nosigpipe_leave(&sp);
    return ok ? 0 : last;
}

hl_node *hl_route(hl_transport *c, const char *key, size_t len)
{
    if (!c->ep.cluster)
        return c->nodes[0];
    char err[HL_ERRMSG_MAX];
    if (__atomic_load_n(&c->map_stale, __ATOMIC_ACQUIRE))
        hl_cluster_refresh(c, err);
    unsigned slot = hl_key_slot(key, len);
    int idx = __atomic_load_n(&c->slot_node[slot], __ATOMIC_ACQUIRE);
    if (idx < 0) {
        hl_cluster_refresh(c, err);
        idx = __atomic_load_n(&c->slot_node[slot], __ATOMIC_ACQUIRE);
    }
    /* unknown slot: any node answers with a redirection */
    return c->nodes[idx >= 0 ? idx : 0];
}
void hl_master_switched(hl_transport *c)
{
    __atomic_add_fetch(&c->master_gen, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&c->nodes[0]->replicas_seen_at, 0, __ATOMIC_RELEASE);
    hl_pool *p = &c->nodes[0]->pool;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nidle; i++)
        redisFree(p->idle[i]);
    p->nidle = 0;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    hl_pubsub_poke(c); /* connections in use are dropped when returned */
}
