/*
 * Sentinel watcher: in sentinel mode a client keeps one connection to a
 * sentinel subscribed to +switch-master. When the sentinels switch our
 * master, every pooled and pub/sub connection to the old one is dropped, so
 * the next command connects to the new master (hl_connect asks the
 * sentinels). Without this, connections to a demoted master that is still
 * writable for a while (a manual SENTINEL FAILOVER reconfigures it seconds
 * later) would keep writing where nobody reads.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "transport.h"
#include "transport_impl.h"

static int stopping(hl_transport *c)
{
    return __atomic_load_n(&c->sw.stop, __ATOMIC_ACQUIRE);
}

/* Sleep up to ms, waking early on stop. */
static void pause_ms(hl_transport *c, int ms)
{
    struct pollfd pf = {c->sw.wk.wake_fd[0], POLLIN, 0};
    poll(&pf, 1, ms);
}

static void note_master(hl_transport *c, const char *addr)
{
    if (c->sw.master[0] && strcmp(c->sw.master, addr) != 0)
        hl_master_switched(c);
    pthread_mutex_lock(&c->nodes_mu); /* read for messages: hl_node_where */
    snprintf(c->sw.master, sizeof c->sw.master, "%s", addr);
    pthread_mutex_unlock(&c->nodes_mu);
}

/* A +switch-master message: the engine decodes it (hl_decode_switch_master). */
static void on_message(hl_transport *c, const redisReply *r)
{
    char host[256], addr[300];
    int port = 0;
    if (!hl_decode_switch_master(r, c->ep.master_name, host, sizeof host, &port))
        return;
    snprintf(addr, sizeof addr, "%s %d", host, port);
    note_master(c, addr);
}

static int take_message(void *c, redisReply *r)
{
    on_message(c, r);
    freeReplyObject(r);
    return 1;
}

static void *watch_main(void *arg)
{
    hl_transport *c = arg;
    int next = 0;
    int backoff = 50;
    while (!stopping(c)) {
        int i = next++ % c->ep.nseeds;
        int code = 0;
        char cerr[HL_ERRMSG_MAX];
        redisContext *ctx = hl_sentinel_connect(&c->ep, i, c->opts.connect_timeout_ms, &code, cerr);
        if (!ctx) {
            pause_ms(c, backoff);
            backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
            continue;
        }
        char addr[300];
        hl_cmd watch;
        hl_cmd_sentinel_watch(&watch);
        redisReply *sub = hl_command_argv(ctx, watch.argc, watch.argv, watch.argvlen);
        int ok = sub && sub->type == REDIS_REPLY_ARRAY;
        if (sub)
            freeReplyObject(sub);
        /* a switch may have happened while we were not listening */
        char host[256], err[HL_ERRMSG_MAX];
        int port = 0;
        if (ok && hl_sentinel_master(&c->ep, i, c->opts.connect_timeout_ms, host, sizeof host,
                                     &port, err) == 0) {
            snprintf(addr, sizeof addr, "%s %d", host, port);
            note_master(c, addr);
        }
        if (!ok) {
            redisFree(ctx);
            pause_ms(c, backoff);
            continue;
        }
        backoff = 50;
        /* the session's liveness rule (hl_sublive): a sentinel, or a proxy
         * in front of it, that keeps the connection open and stops
         * answering would leave the client deaf to failovers; a PING when
         * nothing was heard for an interval, and the connection given up
         * (the next sentinel watched, the master asked again) when that
         * goes unanswered as long again */
        hl_sublive live;
        hl_sublive_init(&live, c->opts.command_timeout_ms);
        hl_sublive_opened(&live, hl_now_mono_ms());
        hl_sublive_heard(&live, hl_now_mono_ms()); /* the SUBSCRIBE's answer */
        while (!stopping(c)) {
            int64_t now = hl_now_mono_ms();
            int due = hl_sublive_due(&live, now);
            if (due & HL_SUBLIVE_RESET)
                break;
            if (due & HL_SUBLIVE_PING) {
                hl_cmd ping;
                hl_cmd_ping(&ping);
                redisAppendCommandArgv(ctx, ping.argc, ping.argv, ping.argvlen);
                int done = 0, wok = 1;
                while (!done && wok)
                    wok = redisBufferWrite(ctx, &done) == REDIS_OK;
                if (!wok)
                    break;
            }
            int64_t next = hl_sublive_next(&live);
            now = hl_now_mono_ms();
            int wait = next < 0 ? -1 : next <= now ? 0 : (int)(next - now);
            struct pollfd pf[2] = {{c->sw.wk.wake_fd[0], POLLIN, 0}, {ctx->fd, POLLIN, 0}};
            if (poll(pf, 2, wait) < 0 && errno != EINTR)
                break;
            if (!pf[1].revents)
                continue;
            hl_sublive_heard(&live, hl_now_mono_ms()); /* a message, a PING's answer */
            if (hl_read_replies(ctx, take_message, c) < 0)
                break;
        }
        redisFree(ctx);
    }
    return NULL;
}

int hl_sentinel_start(hl_transport *c, char *err)
{
    hl_worker_init(&c->sw.wk);
    if (!c->ep.nseeds || c->ep.cluster)
        return 0;
    int rc = hl_worker_start(&c->sw.wk, 1, watch_main, c);
    if (rc == HILOCK_ECONN)
        hl_set_err(err, "pipe: %s", strerror(errno));
    else if (rc)
        hl_set_err(err, "cannot start the sentinel watcher thread");
    return rc;
}

void hl_sentinel_stop(hl_transport *c)
{
    if (c->sw.wk.running) {
        __atomic_store_n(&c->sw.stop, 1, __ATOMIC_RELEASE);
        hl_worker_wake(&c->sw.wk);
        hl_worker_join(&c->sw.wk);
    }
    hl_worker_close(&c->sw.wk);
}

/* ---- discovery: asking a sentinel where the master is ---- */

/* A request to a sentinel got no reply: it timed out ("no reply within N ms
 * from sentinel host:port", as every driver says it), or the connection
 * failed (closed, reset: hiredis's words). doing: what was asked. */
static void io_failed(const redisContext *s, const char *where, int64_t timeout_ms,
                      const char *doing, char *err)
{
    char tmp[HL_ERRMSG_MAX];
    if (hl_conn_no_reply(s, timeout_ms, tmp)) {
        hl_msg_no_reply(tmp, sizeof tmp, timeout_ms, where);
        hl_set_err(err, "%s: %s", doing, tmp);
    } else {
        hl_set_err(err, "%s: connection to %s failed: %s", doing, where, s->errstr);
    }
}

redisContext *hl_sentinel_connect(const hl_endpoint *ep, int i, int64_t timeout_ms, int *code,
                                  char *err)
{
    char where[300];
    snprintf(where, sizeof where, "sentinel %s:%d", ep->seed_hosts[i], ep->seed_ports[i]);
    redisContext *s = redisConnectWithTimeout(ep->seed_hosts[i], ep->seed_ports[i],
                                              hl_tv_ms(timeout_ms));
    if (!s || s->err) {
        *code = s ? HILOCK_ECONN : HILOCK_ENOMEM;
        hl_set_err(err, "%s unreachable: %s", where, s ? s->errstr : "out of memory");
        if (s)
            redisFree(s);
        return NULL;
    }
    hl_conn_nosignal(s);
    hl_fd_cloexec(s->fd); /* a child the process execs does not keep it open */
    if (ep->tls_ctx && hl_conn_tls_handshake(ep->tls_ctx, s, ep->seed_hosts[i], ep->tls_server_name,
                                        timeout_ms, where, code, err)) {
        redisFree(s);
        return NULL;
    }
    hl_reader_bound(s->reader);
    redisSetTimeout(s, hl_tv_ms(timeout_ms));
    if (ep->sentinel_password || ep->sentinel_user) {
        hl_cmd auth[HL_HANDSHAKE_MAX];
        hl_cmd_handshake(auth, ep->sentinel_user,
                         ep->sentinel_password ? ep->sentinel_password : "", 0);
        redisReply *r = hl_command_argv(s, auth[0].argc, auth[0].argv, auth[0].argvlen);
        int rc = r ? hl_decode_handshake(r) : HILOCK_ECONN;
        if (rc) {
            *code = rc;
            if (!r)
                io_failed(s, where, timeout_ms, "authentication", err);
            else
                hl_set_err(err, "authentication to %s failed: %s", where,
                           r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
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
 * set, naming the sentinel and what happened: no reply in time, the
 * connection failed, an error reply, or a nil reply: it knows no master of
 * that name): EAUTH/ETLS when the sentinel refused us, else ECONN. */
int hl_sentinel_master(const hl_endpoint *ep, int i, int64_t timeout_ms, char *host,
                       size_t hostlen, int *port, char *err)
{
    int code = 0;
    redisContext *s = hl_sentinel_connect(ep, i, timeout_ms, &code, err);
    if (!s)
        return code ? code : HILOCK_ECONN;
    char where[300];
    snprintf(where, sizeof where, "sentinel %s:%d", ep->seed_hosts[i], ep->seed_ports[i]);
    redisReply *r = hl_command(s, "SENTINEL get-master-addr-by-name %s", ep->master_name);
    int rc = hl_decode_master_addr(r, host, hostlen, port) ? HILOCK_ECONN : 0;
    if (rc && r && r->type == REDIS_REPLY_ERROR &&
        (!strncmp(r->str, "NOAUTH", 6) || !strncmp(r->str, "NOPERM", 6)))
        rc = HILOCK_EAUTH; /* a sentinel that wants a password (sentinel_password) */
    if (rc == HILOCK_EAUTH) {
        hl_set_err(err, "%s refused: %s (its own password: sentinel_password)", where, r->str);
    } else if (rc && !r) {
        io_failed(s, where, timeout_ms, "asking for the master", err);
    } else if (rc) {
        char why[HL_ERRMSG_MAX];
        hl_msg_master_addr(why, sizeof why, where, ep->master_name, r);
        hl_set_err(err, "%s", why);
    }
    if (r)
        freeReplyObject(r);
    redisFree(s);
    return rc;
}
