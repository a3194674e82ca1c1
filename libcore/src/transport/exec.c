/* Transport: running commands. hl_exec_acked drives the engine's router
 * (redirects, retries, failover) over pooled connections, with the
 * EVALSHA -> EVAL fallback, settling of timed-out attempts (drain.c) and
 * replica acknowledgement; hl_exec_pipeline sends watchdog batches, one
 * pipeline per node. */
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
    int64_t gen = __atomic_load_n(&c->master_gen, __ATOMIC_ACQUIRE);
    int64_t seen = __atomic_load_n(&n->replicas_seen_at, __ATOMIC_ACQUIRE);
    int replicas = __atomic_load_n(&n->replicas, __ATOMIC_ACQUIRE);
    /* Sentinel: the memory is per master name, not per node (a failover
     * makes the node stand for a master never asked yet) */
    int sentinel = c->ep.master_name && !c->ep.cluster;
    hl_ack k;
    hl_ack_init_replicated(&k, seen == 0 ? -1 : replicas, seen == 0 ? -1 : now - seen,
                           c->opts.replica_ack_timeout_ms,
                           sentinel && __atomic_load_n(&c->replicated, __ATOMIC_ACQUIRE));
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
    /* a count learnt from a master that was switched away meanwhile (the
     * node now stands for the new one) is not kept: it could say "had
     * replicas" of a new master that has none yet */
    if (k.refreshed && gen == __atomic_load_n(&c->master_gen, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&n->replicas, k.replicas, __ATOMIC_RELEASE);
        __atomic_store_n(&n->replicas_seen_at, hl_now_mono_ms(), __ATOMIC_RELEASE);
    }
    if (sentinel && k.replicated)
        __atomic_store_n(&c->replicated, 1, __ATOMIC_RELEASE);
    *acked = k.acked;
    return k.failed ? -1 : 0;
}

static void set_timeout(redisContext *ctx, int64_t ms)
{
    redisSetTimeout(ctx, hl_tv_ms(ms));
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
    hl_transport_nosigpipe_enter(&s);
    int rc = exec_acked(c, cmd, reply, timeout_ms, err, acked);
    hl_nosigpipe_leave(&s);
    return rc;
}

/* One hl_exec_acked call on its way through the router: where the command
 * goes, what the router has seen, and what the caller gets. */
typedef struct exec_call {
    hl_transport *c;
    hl_cmd *cmd;
    const char *key;
    size_t klen;
    hl_node *node;       /* the key's node */
    hl_node *ask;        /* ASK: this node, for the next send only */
    int stale_retry;     /* one resend allowed on a reused connection that died as
                            the command was written (hl_pool_get drops those
                            found closed before: a close racing the write) */
    hl_router rt;
    int64_t timeout_ms;  /* > 0: bounds the whole call */
    int64_t deadline;
    char *err;
    int *acked;
    redisReply **reply;
    int rc;              /* the result once a step says EXEC_DONE */
} exec_call;

/* What a step says: the call is over (x->rc), send again, or (exec_route)
 * the reply is the caller's. */
enum { EXEC_DONE, EXEC_AGAIN, EXEC_DELIVER };

static int exec_done(exec_call *x, int rc)
{
    x->rc = rc;
    return EXEC_DONE;
}

/* An earlier attempt on target timed out and is still not settled: the
 * server (or the way to it) is stalled, and another attempt would only park
 * another connection there. A caller with its own time limit (a multi-lock
 * member) fails at once; others wait for the settling up to the command
 * timeout. 1 (err set) when the command must not be sent. */
static int exec_attempt_blocked(exec_call *x, hl_node *target)
{
    hl_transport *c = x->c;
    if (!is_attempt(x->cmd) ||
        hl_drain_node_ready(c, target, x->timeout_ms > 0))
        return 0;
    char where[300];
    hl_node_where(target, where, sizeof where);
    hl_set_err(x->err, "server %s has not answered an earlier attempt yet (still being "
                       "settled); no new attempt sent to it", where);
    return 1;
}

/* The server ctx talks to, for messages: "host:port" or "unix:path". */
static void hl_ctx_where(const redisContext *ctx, char *buf, size_t len)
{
    if (ctx->connection_type == REDIS_CONN_UNIX && ctx->unix_sock.path)
        snprintf(buf, len, "unix:%s", ctx->unix_sock.path);
    else if (ctx->connection_type == REDIS_CONN_TCP && ctx->tcp.host)
        snprintf(buf, len, "%s:%d", ctx->tcp.host, ctx->tcp.port);
    else
        snprintf(buf, len, "?");
}

/* No reply on ctx: a timed-out attempt goes to the drain; a reused
 * connection closed as the command went out gets one resend; anything else
 * is an error. */
static int exec_on_no_reply(exec_call *x, hl_node *target, redisContext *ctx, int reused,
                            int64_t gen)
{
    hl_transport *c = x->c;
    int saved = errno;
    int retry = x->stale_retry && reused && stale_connection_error(ctx);
    if (!hl_conn_no_reply(ctx, c->opts.command_timeout_ms, x->err)) {
        char where[300];
        hl_ctx_where(ctx, where, sizeof where);
        hl_set_err(x->err, "I/O error talking to Redis at %s: %s", where, ctx->errstr);
    }
    int timed_out = ctx->err == REDIS_ERR_IO && (saved == EAGAIN || saved == EWOULDBLOCK);
    if (timed_out && is_attempt(x->cmd)) {
        /* The server may still run the attempt later: keep the
         * connection so its outcome is settled in order. */
        hl_pool_forget(target);
        if (hl_drain_add(c, target, ctx, x->cmd) == 0)
            x->cmd->drained = 1;
        else
            redisFree(ctx);
        return exec_done(x, HILOCK_ECONN);
    }
    if (ctx->err == REDIS_ERR_PROTOCOL || ctx->err == REDIS_ERR_OOM) {
        hl_reply_refused(ctx, x->err);
        hl_pool_put(target, ctx, 1, gen);
        return exec_done(x, HILOCK_EPROTO);
    }
    hl_pool_put(target, ctx, 1, gen);
    /* sent, no answer: whatever happens next (a resend, or an error
     * before one), the server may have run it */
    x->cmd->reply_lost = 1;
    if (retry) {
        x->stale_retry = 0;
        return EXEC_AGAIN;
    }
    if (c->ep.cluster)
        __atomic_store_n(&c->map_stale, 1, __ATOMIC_RELEASE);
    return exec_done(x, HILOCK_ECONN);
}

/* An error reply the engine's router acts on (redirect, retry, failover,
 * give up); EXEC_DELIVER when r is the caller's reply. */
static int exec_route(exec_call *x, hl_node *target, redisContext *ctx, redisReply *r,
                      int64_t gen)
{
    hl_transport *c = x->c;
    hl_route_action act = hl_router_on_reply(&x->rt, r);
    if (act == HL_ROUTE_MOVED || act == HL_ROUTE_ASK) {
        hl_stats_add(&c->stats.redirects, 1);
        freeReplyObject(r);
        hl_pool_put(target, ctx, 0, gen);
        hl_node *to = hl_node_get(c, x->rt.host, x->rt.port);
        if (!to) {
            hl_set_err(x->err, "too many cluster nodes");
            return exec_done(x, HILOCK_ECONN);
        }
        if (act == HL_ROUTE_MOVED) { /* the slot lives there now */
            __atomic_store_n(&c->slot_node[x->rt.slot], (int16_t)hl_node_index(c, to),
                             __ATOMIC_RELEASE);
            __atomic_store_n(&c->map_stale, 1, __ATOMIC_RELEASE);
            x->node = to;
        } else {
            x->ask = to; /* this one command, during a migration */
        }
        pause_ms(x->rt.sleep_ms);
        return EXEC_AGAIN;
    }
    if (act == HL_ROUTE_RETRY) { /* TRYAGAIN, CLUSTERDOWN, LOADING */
        freeReplyObject(r);
        hl_pool_put(target, ctx, 0, gen);
        pause_ms(x->rt.sleep_ms);
        return EXEC_AGAIN;
    }
    if (act == HL_ROUTE_REFRESH) {
        /* a failover demoted this server: reconnect (sentinel mode asks
         * for the new master, cluster mode reloads the map), once more */
        hl_set_err(x->err, "server is not the master: %s", r->str);
        freeReplyObject(r);
        hl_pool_put(target, ctx, 1, gen);
        if (c->ep.cluster)
            hl_cluster_refresh(c, x->err);
        x->node = hl_route(c, x->key, x->klen);
        pause_ms(x->rt.sleep_ms);
        return EXEC_AGAIN;
    }
    if (act == HL_ROUTE_FAIL) {
        if (hl_reply_not_master(r))
            hl_set_err(x->err, "server is not the master: %s", r->str);
        else
            hl_set_err(x->err, "too many cluster redirections");
        freeReplyObject(r);
        hl_pool_put(target, ctx, 1, gen);
        return exec_done(x, HILOCK_ECONN);
    }
    return EXEC_DELIVER;
}

/* The caller's reply: replica acknowledgement when asked, then the
 * connection goes back to the pool. */
static int exec_deliver(exec_call *x, hl_node *target, redisContext *ctx, redisReply *r,
                        int64_t gen)
{
    hl_transport *c = x->c;
    *x->reply = r;
    if (x->acked && c->replica_ack && r->type != REDIS_REPLY_ERROR &&
        wait_replica(c, target, ctx, x->acked) != 0) {
        *x->acked = 0;
        hl_pool_put(target, ctx, 1, gen);
        return exec_done(x, 0);
    }
    if (x->timeout_ms > 0)
        set_timeout(ctx, c->opts.command_timeout_ms);
    hl_pool_put(target, ctx, 0, gen);
    return exec_done(x, 0);
}

/* One send of the command to its current target, and what follows. */
static int exec_once(exec_call *x)
{
    hl_node *target = x->ask ? x->ask : x->node;
    int reused = 0, code = 0;
    int64_t gen = 0;
    int64_t left = x->timeout_ms > 0 ? x->deadline - hl_now_mono_ms() : 0;
    if (x->timeout_ms > 0 && left <= 0) {
        char where[300];
        hl_node_where(target, where, sizeof where);
        hl_msg_no_reply(x->err, HL_ERRMSG_MAX, x->timeout_ms, where);
        return exec_done(x, HILOCK_ECONN);
    }
    if (exec_attempt_blocked(x, target))
        return exec_done(x, HILOCK_ECONN);
    redisContext *ctx = hl_pool_get(target, left, &reused, &gen, &code, x->err);
    if (!ctx)
        return exec_done(x, code);
    if (x->timeout_ms > 0) {
        left = x->deadline - hl_now_mono_ms();
        set_timeout(ctx, left > 0 ? left : 1);
    }
    redisReply *r = run_on(ctx, x->cmd, x->ask != NULL);
    x->ask = NULL;
    if (!r)
        return exec_on_no_reply(x, target, ctx, reused, gen);
    int step = exec_route(x, target, ctx, r, gen);
    return step == EXEC_DELIVER ? exec_deliver(x, target, ctx, r, gen) : step;
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
    exec_call x = {.c = c, .cmd = cmd, .stale_retry = 1, .timeout_ms = timeout_ms, .err = err,
                   .acked = acked, .reply = reply};
    x.key = hl_cmd_key(cmd, &x.klen);
    x.node = hl_route(c, x.key, x.klen);
    hl_router_init(&x.rt, c->ep.cluster ? HL_MODE_CLUSTER
                          : c->ep.master_name ? HL_MODE_SENTINEL : HL_MODE_SINGLE);
    /* timeout_ms > 0 bounds the whole call: connecting and the command. */
    x.deadline = timeout_ms > 0 ? hl_now_mono_ms() + timeout_ms : 0;
    while (exec_once(&x) == EXEC_AGAIN)
        ;
    return x.rc;
}

/* Pipeline the commands idx[0..k) on one node. */
/* Run cmds[idx[0..k)] pipelined on one connection of node n. With acked
 * set (and the client asking for replica acknowledgement), the batch is
 * followed on the same connection by the engine's ack commands (WAIT),
 * and acked[idx[j]] says whether a replica took the writes: replies from
 * a master whose writes no replica acknowledged are answers, not
 * confirmations (a master cut off from its replicas may be replaced and
 * its writes lost). */
static int pipeline_on(hl_node *n, hl_cmd *cmds, const int *idx, int k, redisReply **replies,
                       int *acked, char *err)
{
    hl_transport *c = n->client;
    for (int attempt = 0; attempt < 2; attempt++) {
        int reused = 0, code = 0;
        int64_t gen = 0;
        redisContext *ctx = hl_pool_get(n, 0, &reused, &gen, &code, err);
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
            hl_pool_put(n, ctx, 1, gen);
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
            if (!hl_conn_no_reply(ctx, c->opts.command_timeout_ms, err))
                hl_set_err(err, "I/O error talking to Redis: %s", ctx->errstr);
            hl_pool_put(n, ctx, 1, gen);
            for (int j = 0; j < k; j++) {
                if (replies[idx[j]])
                    freeReplyObject(replies[idx[j]]);
                replies[idx[j]] = NULL;
            }
            if (retry)
                continue;
            return HILOCK_ECONN;
        }
        int broken = 0;
        if (acked && c->replica_ack) {
            int a = 0;
            if (wait_replica(c, n, ctx, &a) != 0) {
                a = 0;
                broken = 1; /* the connection's state is unknown: close it */
            }
            for (int j = 0; j < k; j++)
                acked[idx[j]] = a;
        }
        hl_pool_put(n, ctx, broken, gen);
        return 0;
    }
    return HILOCK_ECONN;
}

int hl_exec_pipeline(hl_transport *c, hl_cmd *cmds, int n, redisReply **replies, char *err)
{
    return hl_exec_pipeline_acked(c, cmds, n, replies, NULL, err);
}

int hl_exec_pipeline_acked(hl_transport *c, hl_cmd *cmds, int n, redisReply **replies,
                           int *acked, char *err)
{
    for (int i = 0; i < n; i++) {
        replies[i] = NULL;
        if (acked)
            acked[i] = 1;
    }
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
    hl_transport_nosigpipe_enter(&sp);
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
        if (pipeline_on(node, cmds, idx, k, replies, acked, err) != 0)
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
            if (acked)
                hl_exec_acked(c, &cmds[i], &replies[i], 0, err, &acked[i]);
            else
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

int hl_conn_stale(const redisContext *ctx)
{
    return stale_connection_error(ctx);
}
