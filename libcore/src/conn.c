/* Transport: endpoints, connections, the pool, command execution. */
#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "transport.h"

/* ---- connecting ---- */

static struct timeval tv_ms(int64_t ms)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
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
    redisContext *ctx = ep->path ? redisConnectUnixWithTimeout(ep->path, tv_ms(connect_timeout_ms))
                                 : redisConnectWithTimeout(host, port, tv_ms(connect_timeout_ms));
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
    if (!ep->path)
        redisEnableKeepAlive(ctx);
    if (ep->tls_ctx && hl_tls_handshake(ep->tls_ctx, ctx, host, ep->tls_server_name,
                                        connect_timeout_ms, where, code, err)) {
        redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv_ms(command_timeout_ms));
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

int hl_reader_over(redisContext *c)
{
    const redisReader *r = c->reader;
    if (!r || r->len - r->pos <= HL_REPLY_MAX_BYTES)
        return 0;
    c->err = REDIS_ERR_PROTOCOL;
    snprintf(c->errstr, sizeof c->errstr, "a reply over the %zu MB hilock accepts",
             HL_REPLY_MAX_BYTES >> 20);
    return 1;
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

redisContext *hl_sentinel_connect(const hl_endpoint *ep, int i, int64_t timeout_ms, int *code,
                                  char *err)
{
    char where[300];
    snprintf(where, sizeof where, "sentinel %s:%d", ep->seed_hosts[i], ep->seed_ports[i]);
    redisContext *s = redisConnectWithTimeout(ep->seed_hosts[i], ep->seed_ports[i],
                                              tv_ms(timeout_ms));
    if (!s || s->err) {
        *code = s ? HILOCK_ECONN : HILOCK_ENOMEM;
        hl_set_err(err, "%s unreachable: %s", where, s ? s->errstr : "out of memory");
        if (s)
            redisFree(s);
        return NULL;
    }
    if (ep->tls_ctx && hl_tls_handshake(ep->tls_ctx, s, ep->seed_hosts[i], ep->tls_server_name,
                                        timeout_ms, where, code, err)) {
        redisFree(s);
        return NULL;
    }
    hl_reader_bound(s->reader);
    redisSetTimeout(s, tv_ms(timeout_ms));
    if (ep->sentinel_password || ep->sentinel_user) {
        hl_cmd auth[HL_HANDSHAKE_MAX];
        hl_cmd_handshake(auth, ep->sentinel_user,
                         ep->sentinel_password ? ep->sentinel_password : "", 0);
        redisReply *r = hl_command_argv(s, auth[0].argc, auth[0].argv, auth[0].argvlen);
        int rc = r ? hl_decode_handshake(r) : HILOCK_ECONN;
        if (rc) {
            *code = rc;
            hl_set_err(err, "authentication to %s failed: %s", where,
                       !r ? s->errstr : r->type == REDIS_REPLY_ERROR ? r->str
                                                                   : "unexpected reply");
            if (r)
                freeReplyObject(r);
            redisFree(s);
            return NULL;
        }
        freeReplyObject(r);
    }
    return s;
}

/* Ask one sentinel for the master's address. 0, or a HILOCK_E* code (err
 * set): EAUTH/ETLS when the sentinel refused us, else ECONN. */
int hl_sentinel_master(const hl_endpoint *ep, int i, int64_t timeout_ms, char *host,
                       size_t hostlen, int *port, char *err)
{
    int code = 0;
    redisContext *s = hl_sentinel_connect(ep, i, timeout_ms, &code, err);
    if (!s)
        return code ? code : HILOCK_ECONN;
    redisReply *r = hl_command(s, "SENTINEL get-master-addr-by-name %s", ep->master_name);
    int rc = hl_decode_master_addr(r, host, hostlen, port) ? HILOCK_ECONN : 0;
    if (rc && r && r->type == REDIS_REPLY_ERROR &&
        (!strncmp(r->str, "NOAUTH", 6) || !strncmp(r->str, "NOPERM", 6)))
        rc = HILOCK_EAUTH; /* a sentinel that wants a password (sentinel_password) */
    if (rc == HILOCK_EAUTH)
        hl_set_err(err, "sentinel %s:%d refused: %s (its own password: sentinel_password)",
                   ep->seed_hosts[i], ep->seed_ports[i], r->str);
    else if (rc)
        hl_set_err(err, "sentinel %s:%d knows no master named '%s'%s%s", ep->seed_hosts[i],
                   ep->seed_ports[i], ep->master_name,
                   r && r->type == REDIS_REPLY_ERROR ? ": " : "",
                   r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    if (r)
        freeReplyObject(r);
    redisFree(s);
    return rc;
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

/* ---- nodes ---- */

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
    n->ps.wake_fd[0] = n->ps.wake_fd[1] = -1;
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
        free(n->pool.idle);
        free(n->host);
        free(n);
        return;
    }
    for (int i = 0; i < n->pool.nidle; i++)
        redisFree(n->pool.idle[i]);
    if (n->ps.wake_fd[0] >= 0) {
        close(n->ps.wake_fd[0]);
        close(n->ps.wake_fd[1]);
    }
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

/* Give a retired entry nobody uses (no connection checked out, no pub/sub
 * listener, no attempt being settled) the address host:port; its idle
 * connections are closed. A thread that still holds the entry from an
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
        int idle = n->pool.inuse == 0 && !n->ps.running && !n->ps.channels && n->settling == 0;
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
static int node_addr(hl_node *n, char *host, size_t len, int *port)
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

static int node_index(hl_transport *c, const hl_node *n)
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
    if (node_addr(n, host, sizeof host, &port))
        return connect_node(&c->ep, host, port, connect_timeout_ms,
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
        int idx = n ? node_index(c, n) : -1;
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
    hl_nosigpipe_enter(&sp);
    pthread_mutex_lock(&c->refresh_mu);
    __atomic_store_n(&c->map_stale, 0, __ATOMIC_RELEASE);
    int ok = 0, last = HILOCK_ECONN;
    /* known nodes first, then the seeds */
    int count = __atomic_load_n(&c->nnodes, __ATOMIC_ACQUIRE);
    for (int i = 0; i < count + c->ep.nseeds && !ok; i++) {
        char host[256];
        int port = 0;
        if (i < count)
            node_addr(c->nodes[i], host, sizeof host, &port);
        else {
            snprintf(host, sizeof host, "%s", c->ep.seed_hosts[i - count]);
            port = c->ep.seed_ports[i - count];
        }
        int code = 0;
        redisContext *ctx = connect_node(&c->ep, host, port, c->opts.connect_timeout_ms,
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

/* ---- the pool (one per node) ---- */

static redisContext *pool_get(hl_node *n, int64_t timeout_ms, int *reused, int64_t *gen,
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
    if (p->nidle > 0) {
        redisContext *ctx = p->idle[--p->nidle];
        pthread_mutex_unlock(&p->mu);
        *reused = 1;
        return ctx;
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

static void pool_put(hl_node *n, redisContext *ctx, int broken, int64_t gen)
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
static void pool_forget(hl_node *n)
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

/* A connection that failed like this never had our command executed by the
 * server we talk to now (it went away while the connection sat idle). */
static int stale_connection_error(const redisContext *ctx)
{
    if (ctx->err == REDIS_ERR_EOF)
        return 1;
    return ctx->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE);
}

/* The server is no longer (or not yet) the master (READONLY / MASTERDOWN,
 * also from inside a script): the engine's hl_reply_not_master. */
static int not_master_reply(const redisReply *r)
{
    return hl_reply_not_master(r);
}

/* Cluster redirection (hl_parse_redirect): 1 (MOVED), 2 (ASK) or 0, with
 * host/port/slot filled. A redirection with a bad slot, host or port is not
 * followed: it stays an error reply, which the decoders report as
 * HILOCK_EPROTO. */
static int redirection(const redisReply *r, char *host, size_t hostlen, int *port,
                       unsigned *slot)
{
    return hl_parse_redirect(r, slot, host, hostlen, port);
}

static void set_timeout(redisContext *ctx, int64_t ms);

/* Replica acknowledgement of the write just made on ctx: the engine's ack
 * machine decides (ROLE when the cached replica count is stale, WAIT 1
 * <timeout> when there are replicas, ROLE again when none acknowledged);
 * this only runs its commands on ctx and keeps the count on the node.
 * Returns 0, or -1 on an I/O error. */
static int wait_replica(hl_transport *c, hl_node *n, redisContext *ctx, int *acked)
{
    int64_t now = hl_now_mono_ms();
    int64_t seen = __atomic_load_n(&n->replicas_seen_at, __ATOMIC_ACQUIRE);
    int replicas = __atomic_load_n(&n->replicas, __ATOMIC_ACQUIRE);
    hl_ack k;
    hl_ack_init(&k, seen == 0 ? -1 : replicas, seen == 0 ? -1 : now - seen,
                c->opts.replica_ack_timeout_ms);
    while (hl_ack_next(&k) == HL_ACT_SEND) {
        if (k.timeout_ms > 0) /* WAIT blocks up to its own timeout */
            set_timeout(ctx, c->opts.command_timeout_ms + k.timeout_ms);
        redisReply *r = hl_command_argv(ctx, k.cmd.argc, k.cmd.argv, k.cmd.argvlen);
        if (k.timeout_ms > 0)
            set_timeout(ctx, c->opts.command_timeout_ms);
        if (!r) {
            hl_ack_on_error(&k);
            break;
        }
        hl_ack_on_reply(&k, r);
        freeReplyObject(r);
    }
    if (k.refreshed) {
        __atomic_store_n(&n->replicas, k.replicas, __ATOMIC_RELEASE);
        __atomic_store_n(&n->replicas_seen_at, hl_now_mono_ms(), __ATOMIC_RELEASE);
    }
    *acked = k.acked;
    return k.failed ? -1 : 0;
}

static void set_timeout(redisContext *ctx, int64_t ms)
{
    redisSetTimeout(ctx, tv_ms(ms));
}

/* Send cmd on ctx (after ASKING when asking) and return its reply, with the
 * EVALSHA -> EVAL fallback; NULL on I/O error. */
static redisReply *run_on(redisContext *ctx, hl_cmd *cmd, int asking)
{
    for (int pass = 0; pass < 2; pass++) {
        if (asking)
            redisAppendCommand(ctx, "ASKING");
        redisAppendCommandArgv(ctx, cmd->argc, cmd->argv, cmd->argvlen);
        void *r = NULL;
        if (asking) {
            if (hl_get_reply(ctx, &r) != REDIS_OK)
                return NULL;
            freeReplyObject(r);
            r = NULL;
        }
        if (hl_get_reply(ctx, &r) != REDIS_OK)
            return NULL;
        if (pass == 0 && hl_reply_is_noscript(r)) {
            freeReplyObject(r);
            hl_cmd_to_eval(cmd);
            continue;
        }
        return r;
    }
    return NULL;
}

/* A pause the router asked for (redirect storms, TRYAGAIN, failover). */
static void pause_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The reader gave up on a reply: malformed, or refused by hl_reader_bound
 * (which hiredis reports as "Out of memory"). */
static void hl_reply_refused(const redisContext *ctx, char *err)
{
    if (ctx->err == REDIS_ERR_OOM)
        hl_set_err(err, "reply from Redis refused: an array over %zu elements or nested over "
                        "%d deep (or out of memory)",
                   HL_REPLY_MAX_ELEMENTS, HL_REPLY_MAX_DEPTH);
    else
        hl_set_err(err, "bad reply from Redis: %s", ctx->errstr);
}

int hl_exec(hl_transport *c, hl_cmd *cmd, redisReply **reply, int64_t timeout_ms, char *err)
{
    return hl_exec_acked(c, cmd, reply, timeout_ms, err, NULL);
}

static int exec_acked(hl_transport *c, hl_cmd *cmd, redisReply **reply, int64_t timeout_ms,
                      char *err, int *acked);

/* An acquire attempt: settled on its own connection when its reply times out. */
static int is_attempt(const hl_cmd *cmd)
{
    return hl_cmd_is_attempt(cmd);
}

/* Callers' threads write here: no SIGPIPE may escape (see util.c). */
int hl_exec_acked(hl_transport *c, hl_cmd *cmd, redisReply **reply, int64_t timeout_ms,
                  char *err, int *acked)
{
    hl_nosigpipe s;
    hl_nosigpipe_enter(&s);
    int rc = exec_acked(c, cmd, reply, timeout_ms, err, acked);
    hl_nosigpipe_leave(&s);
    return rc;
}

static int exec_acked(hl_transport *c, hl_cmd *cmd, redisReply **reply, int64_t timeout_ms,
                      char *err, int *acked)
{
    if (acked)
        *acked = 1;
    *reply = NULL;
    int rc = hl_transport_check(c, err);
    if (rc)
        return rc;
    size_t klen;
    const char *key = hl_cmd_key(cmd, &klen);
    hl_node *node = hl_route(c, key, klen);
    hl_node *ask = NULL;
    int stale_retry = 1;
    hl_router rt;
    hl_router_init(&rt, c->ep.cluster ? HL_MODE_CLUSTER
                        : c->ep.master_name ? HL_MODE_SENTINEL : HL_MODE_SINGLE);
    /* timeout_ms > 0 bounds the whole call: connecting and the command. */
    int64_t deadline = timeout_ms > 0 ? hl_now_mono_ms() + timeout_ms : 0;
    for (;;) {
        hl_node *target = ask ? ask : node;
        int reused = 0, code = 0;
        int64_t gen = 0;
        int64_t left = timeout_ms > 0 ? deadline - hl_now_mono_ms() : 0;
        if (timeout_ms > 0 && left <= 0) {
            hl_set_err(err, "no reply within %lld ms", (long long)timeout_ms);
            return HILOCK_ECONN;
        }
        /* An earlier attempt on this server timed out and is still not
         * settled: the server (or the way to it) is stalled. Another attempt
         * would only park another connection there. A caller with its own
         * time limit (a multi-lock member) fails at once; others wait for
         * the settling up to the command timeout. */
        if (is_attempt(cmd) &&
            !hl_drain_node_ready(c, target, timeout_ms > 0 ? 0 : c->opts.command_timeout_ms)) {
            char host[256];
            int port = 0;
            if (!node_addr(target, host, sizeof host, &port))
                snprintf(host, sizeof host, "%s",
                         c->ep.path ? c->ep.path : c->ep.host ? c->ep.host : "?");
            hl_set_err(err, "server %s has not answered an earlier attempt yet (still being "
                            "settled); no new attempt sent to it", host);
            return HILOCK_ECONN;
        }
        redisContext *ctx = pool_get(target, left, &reused, &gen, &code, err);
        if (!ctx)
            return code;
        if (timeout_ms > 0) {
            left = deadline - hl_now_mono_ms();
            set_timeout(ctx, left > 0 ? left : 1);
        }
        redisReply *r = run_on(ctx, cmd, ask != NULL);
        ask = NULL;
        if (!r) {
            int saved = errno;
            int retry = stale_retry && reused && stale_connection_error(ctx);
            hl_set_err(err, "I/O error talking to Redis: %s", ctx->errstr);
            int timed_out = ctx->err == REDIS_ERR_IO && (saved == EAGAIN || saved == EWOULDBLOCK);
            if (timed_out && is_attempt(cmd)) {
                /* The server may still run the attempt later: keep the
                 * connection so its outcome is settled in order. */
                pool_forget(target);
                if (hl_drain_add(c, target, ctx, cmd) == 0)
                    cmd->drained = 1;
                else
                    redisFree(ctx);
                return HILOCK_ECONN;
            }
            if (ctx->err == REDIS_ERR_PROTOCOL || ctx->err == REDIS_ERR_OOM) {
                hl_reply_refused(ctx, err);
                pool_put(target, ctx, 1, gen);
                return HILOCK_EPROTO;
            }
            pool_put(target, ctx, 1, gen);
            /* sent, no answer: whatever happens next (a resend, or an error
             * before one), the server may have run it */
            cmd->reply_lost = 1;
            if (retry) {
                stale_retry = 0;
                continue;
            }
            if (c->ep.cluster)
                __atomic_store_n(&c->map_stale, 1, __ATOMIC_RELEASE);
            return HILOCK_ECONN;
        }
        /* the engine's router says what an error reply means */
        hl_route_action act = hl_router_on_reply(&rt, r);
        if (act == HL_ROUTE_MOVED || act == HL_ROUTE_ASK) {
            freeReplyObject(r);
            pool_put(target, ctx, 0, gen);
            hl_node *to = hl_node_get(c, rt.host, rt.port);
            if (!to) {
                hl_set_err(err, "too many cluster nodes");
                return HILOCK_ECONN;
            }
            if (act == HL_ROUTE_MOVED) { /* the slot lives there now */
                __atomic_store_n(&c->slot_node[rt.slot], (int16_t)node_index(c, to),
                                 __ATOMIC_RELEASE);
                __atomic_store_n(&c->map_stale, 1, __ATOMIC_RELEASE);
                node = to;
            } else {
                ask = to; /* this one command, during a migration */
            }
            pause_ms(rt.sleep_ms);
            continue;
        }
        if (act == HL_ROUTE_RETRY) { /* TRYAGAIN, CLUSTERDOWN, LOADING */
            freeReplyObject(r);
            pool_put(target, ctx, 0, gen);
            pause_ms(rt.sleep_ms);
            continue;
        }
        if (act == HL_ROUTE_REFRESH) {
            /* a failover demoted this server: reconnect (sentinel mode asks
             * for the new master, cluster mode reloads the map), once more */
            hl_set_err(err, "server is not the master: %s", r->str);
            freeReplyObject(r);
            pool_put(target, ctx, 1, gen);
            if (c->ep.cluster)
                hl_cluster_refresh(c, err);
            node = hl_route(c, key, klen);
            pause_ms(rt.sleep_ms);
            continue;
        }
        if (act == HL_ROUTE_FAIL) {
            if (hl_reply_not_master(r))
                hl_set_err(err, "server is not the master: %s", r->str);
            else
                hl_set_err(err, "too many cluster redirections");
            freeReplyObject(r);
            pool_put(target, ctx, 1, gen);
            return HILOCK_ECONN;
        }
        if (acked && c->replica_ack && r->type != REDIS_REPLY_ERROR &&
            wait_replica(c, target, ctx, acked) != 0) {
            *acked = 0;
            pool_put(target, ctx, 1, gen);
            *reply = r;
            return 0;
        }
        if (timeout_ms > 0)
            set_timeout(ctx, c->opts.command_timeout_ms);
        pool_put(target, ctx, 0, gen);
        *reply = r;
        return 0;
    }
}

/* Pipeline the commands idx[0..k) on one node. */
static int pipeline_on(hl_node *n, hl_cmd *cmds, const int *idx, int k, redisReply **replies,
                       char *err)
{
    hl_transport *c = n->client;
    for (int attempt = 0; attempt < 2; attempt++) {
        int reused = 0, code = 0;
        int64_t gen = 0;
        redisContext *ctx = pool_get(n, 0, &reused, &gen, &code, err);
        if (!ctx)
            return code;
        for (int j = 0; j < k; j++)
            redisAppendCommandArgv(ctx, cmds[idx[j]].argc, cmds[idx[j]].argv,
                                   cmds[idx[j]].argvlen);
        int failed = 0, got = 0, demoted = 0;
        for (int j = 0; j < k; j++) {
            void *r = NULL;
            if (hl_get_reply(ctx, &r) != REDIS_OK || !r) {
                failed = 1;
                break;
            }
            replies[idx[j]] = r;
            demoted |= not_master_reply(replies[idx[j]]);
            got++;
        }
        if (demoted) { /* answers from a demoted master count as no answer */
            for (int j = 0; j < k; j++) {
                if (replies[idx[j]])
                    freeReplyObject(replies[idx[j]]);
                replies[idx[j]] = NULL;
            }
            hl_set_err(err, "server is not the master (failover)");
            pool_put(n, ctx, 1, gen);
            if (attempt == 0 && !c->ep.cluster)
                continue;
            return HILOCK_ECONN;
        }
        /* Scripts the server forgot (restart, SCRIPT FLUSH): run those again. */
        for (int j = 0; !failed && j < k; j++) {
            if (hl_reply_is_noscript(replies[idx[j]])) {
                freeReplyObject(replies[idx[j]]);
                replies[idx[j]] = NULL;
                hl_cmd_to_eval(&cmds[idx[j]]);
                replies[idx[j]] = hl_command_argv(ctx, cmds[idx[j]].argc, cmds[idx[j]].argv,
                                                   cmds[idx[j]].argvlen);
                if (!replies[idx[j]])
                    failed = 1;
            }
        }
        if (failed) {
            int retry = attempt == 0 && reused && got == 0 && stale_connection_error(ctx);
            hl_set_err(err, "I/O error talking to Redis: %s", ctx->errstr);
            pool_put(n, ctx, 1, gen);
            for (int j = 0; j < k; j++) {
                if (replies[idx[j]])
                    freeReplyObject(replies[idx[j]]);
                replies[idx[j]] = NULL;
            }
            if (retry)
                continue;
            return HILOCK_ECONN;
        }
        pool_put(n, ctx, 0, gen);
        return 0;
    }
    return HILOCK_ECONN;
}

int hl_exec_pipeline(hl_transport *c, hl_cmd *cmds, int n, redisReply **replies, char *err)
{
    for (int i = 0; i < n; i++)
        replies[i] = NULL;
    int rc = hl_transport_check(c, err);
    if (rc)
        return rc;
    int *idx = malloc(sizeof *idx * (size_t)(n > 0 ? n : 1));
    hl_node **at = malloc(sizeof *at * (size_t)(n > 0 ? n : 1));
    if (!idx || !at) {
        free(idx);
        free(at);
        hl_set_err(err, "out of memory");
        return HILOCK_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        size_t klen;
        const char *key = hl_cmd_key(&cmds[i], &klen);
        at[i] = hl_route(c, key, klen);
    }
    /* one pipeline (one round trip) per node */
    hl_nosigpipe sp;
    hl_nosigpipe_enter(&sp);
    int failures = 0;
    for (int i = 0; i < n; i++) {
        if (!at[i])
            continue;
        hl_node *node = at[i];
        int k = 0;
        for (int j = i; j < n; j++)
            if (at[j] == node) {
                idx[k++] = j;
                at[j] = NULL;
            }
        if (pipeline_on(node, cmds, idx, k, replies, err) != 0)
            failures++;
    }
    /* redirected commands (resharding): once more, one by one */
    for (int i = 0; i < n && c->ep.cluster; i++) {
        char host[256];
        int port;
        unsigned slot;
        if (replies[i] && redirection(replies[i], host, sizeof host, &port, &slot)) {
            freeReplyObject(replies[i]);
            replies[i] = NULL;
            hl_exec(c, &cmds[i], &replies[i], 0, err);
        }
    }
    hl_nosigpipe_leave(&sp);
    free(idx);
    free(at);
    /* any node that failed is reported (err tells the last one); replies[]
     * still hold what the other nodes answered */
    return failures ? HILOCK_ECONN : 0;
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
