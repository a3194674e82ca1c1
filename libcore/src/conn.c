/* Transport: endpoints, connections, the pool, command execution. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "internal.h"

/* ---- URL parsing ---- */

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Copy [s, s+len) percent-decoded into a new string. */
static char *pct_decode(const char *s, size_t len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%' && i + 2 < len && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            out[j++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else {
            out[j++] = s[i];
        }
    }
    out[j] = 0;
    return out;
}

static int parse_int(const char *s, size_t len, long min, long max, long *out)
{
    if (len == 0 || len > 10)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

void hl_endpoint_free(hl_endpoint *ep)
{
    if (!ep)
        return;
    free(ep->host);
    free(ep->path);
    free(ep->user);
    free(ep->password);
    memset(ep, 0, sizeof *ep);
}

static int parse_unix(hl_endpoint *ep, const char *rest, char *err)
{
    /* rest: "/path[?db=N&password=P&user=U]" */
    const char *q = strchr(rest, '?');
    size_t plen = q ? (size_t)(q - rest) : strlen(rest);
    if (plen == 0 || rest[0] != '/') {
        hl_set_err(err, "unix URL needs an absolute socket path");
        return HILOCK_EINVAL;
    }
    ep->path = pct_decode(rest, plen);
    if (!ep->path)
        return HILOCK_ENOMEM;
    while (q && *q) {
        q++; /* skip ? or & */
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', n);
        if (!eq) {
            hl_set_err(err, "bad query parameter in unix URL");
            return HILOCK_EINVAL;
        }
        size_t klen = (size_t)(eq - q), vlen = n - klen - 1;
        long v;
        if (klen == 2 && !memcmp(q, "db", 2)) {
            if (parse_int(eq + 1, vlen, 0, INT_MAX, &v)) {
                hl_set_err(err, "bad db number in URL");
                return HILOCK_EINVAL;
            }
            ep->db = (int)v;
        } else if (klen == 8 && !memcmp(q, "password", 8)) {
            free(ep->password);
            if (!(ep->password = pct_decode(eq + 1, vlen)))
                return HILOCK_ENOMEM;
        } else if (klen == 4 && !memcmp(q, "user", 4)) {
            free(ep->user);
            if (!(ep->user = pct_decode(eq + 1, vlen)))
                return HILOCK_ENOMEM;
        } else {
            hl_set_err(err, "unknown query parameter in unix URL");
            return HILOCK_EINVAL;
        }
        q = amp;
    }
    return 0;
}

static int parse_tcp(hl_endpoint *ep, const char *rest, char *err)
{
    /* rest: "[user[:password]@]host[:port][/db]" */
    const char *slash = strchr(rest, '/');
    size_t auth_end_limit = slash ? (size_t)(slash - rest) : strlen(rest);
    const char *at = NULL;
    for (size_t i = 0; i < auth_end_limit; i++)
        if (rest[i] == '@')
            at = rest + i; /* last '@' before the path */
    const char *hp = rest;
    if (at) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        size_t ulen = colon ? (size_t)(colon - rest) : (size_t)(at - rest);
        if (colon) {
            if (ulen > 0 && !(ep->user = pct_decode(rest, ulen)))
                return HILOCK_ENOMEM;
            if (!(ep->password = pct_decode(colon + 1, (size_t)(at - colon - 1))))
                return HILOCK_ENOMEM;
        } else if (ulen > 0) {
            /* redis://secret@host: a lone word is taken as the password */
            if (!(ep->password = pct_decode(rest, ulen)))
                return HILOCK_ENOMEM;
        }
        hp = at + 1;
    }
    const char *end = hp + strlen(hp);
    const char *path = strchr(hp, '/');
    const char *hend = path ? path : end;
    const char *portp = NULL;
    const char *hstart = hp, *hstop;
    if (*hp == '[') { /* [ipv6] */
        const char *rb = memchr(hp, ']', (size_t)(hend - hp));
        if (!rb) {
            hl_set_err(err, "unterminated [ in URL host");
            return HILOCK_EINVAL;
        }
        hstart = hp + 1;
        hstop = rb;
        if (rb + 1 < hend) {
            if (rb[1] != ':') {
                hl_set_err(err, "bad host in URL");
                return HILOCK_EINVAL;
            }
            portp = rb + 2;
        }
    } else {
        const char *colon = memchr(hp, ':', (size_t)(hend - hp));
        hstop = colon ? colon : hend;
        if (colon)
            portp = colon + 1;
    }
    if (hstop == hstart) {
        hl_set_err(err, "URL has no host");
        return HILOCK_EINVAL;
    }
    if (!(ep->host = pct_decode(hstart, (size_t)(hstop - hstart))))
        return HILOCK_ENOMEM;
    ep->port = 6379;
    long v;
    if (portp) {
        if (parse_int(portp, (size_t)(hend - portp), 1, 65535, &v)) {
            hl_set_err(err, "bad port in URL");
            return HILOCK_EINVAL;
        }
        ep->port = (int)v;
    }
    if (path && path[1]) {
        if (parse_int(path + 1, strlen(path + 1), 0, INT_MAX, &v)) {
            hl_set_err(err, "bad db number in URL");
            return HILOCK_EINVAL;
        }
        ep->db = (int)v;
    }
    return 0;
}

int hl_endpoint_parse(hl_endpoint *ep, const char *url, char *err)
{
    memset(ep, 0, sizeof *ep);
    if (!url || !*url) {
        hl_set_err(err, "empty URL");
        return HILOCK_EINVAL;
    }
    int rc;
    if (!strncmp(url, "redis://", 8))
        rc = parse_tcp(ep, url + 8, err);
    else if (!strncmp(url, "unix://", 7))
        rc = parse_unix(ep, url + 7, err);
    else {
        hl_set_err(err, "URL must start with redis:// or unix://");
        rc = HILOCK_EINVAL;
    }
    if (rc) {
        if (rc == HILOCK_ENOMEM)
            hl_set_err(err, "out of memory");
        hl_endpoint_free(ep);
    }
    return rc;
}

/* ---- connecting ---- */

static struct timeval tv_ms(int64_t ms)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

static const char *ep_where(const hl_endpoint *ep, char *buf, size_t len)
{
    if (ep->path)
        snprintf(buf, len, "unix:%s", ep->path);
    else
        snprintf(buf, len, "%s:%d", ep->host, ep->port);
    return buf;
}

redisContext *hl_connect(const hl_endpoint *ep, int64_t connect_timeout_ms,
                         int64_t command_timeout_ms, int *code, char *err)
{
    char where[300];
    redisContext *ctx = ep->path ? redisConnectUnixWithTimeout(ep->path, tv_ms(connect_timeout_ms))
                                 : redisConnectWithTimeout(ep->host, ep->port,
                                                           tv_ms(connect_timeout_ms));
    if (!ctx) {
        *code = HILOCK_ENOMEM;
        hl_set_err(err, "out of memory connecting to %s", ep_where(ep, where, sizeof where));
        return NULL;
    }
    if (ctx->err) {
        *code = HILOCK_ECONN;
        hl_set_err(err, "cannot connect to %s: %s", ep_where(ep, where, sizeof where),
                   ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv_ms(command_timeout_ms));
    if (!ep->path)
        redisEnableKeepAlive(ctx);
    redisReply *r = NULL;
    if (ep->password) {
        if (ep->user)
            r = redisCommand(ctx, "AUTH %s %s", ep->user, ep->password);
        else
            r = redisCommand(ctx, "AUTH %s", ep->password);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            *code = r ? HILOCK_EAUTH : HILOCK_ECONN;
            hl_set_err(err, "authentication to %s failed: %s",
                       ep_where(ep, where, sizeof where), r ? r->str : ctx->errstr);
            goto fail;
        }
        freeReplyObject(r);
    }
    if (ep->db) {
        r = redisCommand(ctx, "SELECT %d", ep->db);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            *code = r ? HILOCK_EAUTH : HILOCK_ECONN;
            hl_set_err(err, "SELECT %d on %s failed: %s", ep->db,
                       ep_where(ep, where, sizeof where), r ? r->str : ctx->errstr);
            goto fail;
        }
        freeReplyObject(r);
    }
    return ctx;
fail:
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return NULL;
}

/* ---- the pool ---- */

static redisContext *pool_get(hilock_client *c, int64_t timeout_ms, int *reused, int *code,
                              char *err)
{
    hl_pool *p = &c->pool;
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
    if (p->nidle > 0) {
        redisContext *ctx = p->idle[--p->nidle];
        pthread_mutex_unlock(&p->mu);
        *reused = 1;
        return ctx;
    }
    pthread_mutex_unlock(&p->mu);
    *reused = 0;
    redisContext *ctx = hl_connect(&c->ep, connect_ms, c->opts.command_timeout_ms, code, err);
    if (!ctx) {
        pthread_mutex_lock(&p->mu);
        p->inuse--;
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    return ctx;
}

static void pool_put(hilock_client *c, redisContext *ctx, int broken)
{
    hl_pool *p = &c->pool;
    pthread_mutex_lock(&p->mu);
    p->inuse--;
    if (broken || ctx->err || p->nidle >= p->size ||
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

/* A connection that failed like this never had our command executed by the
 * server we talk to now (it went away while the connection sat idle). */
static int stale_connection_error(const redisContext *ctx)
{
    if (ctx->err == REDIS_ERR_EOF)
        return 1;
    return ctx->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE);
}

static void set_timeout(redisContext *ctx, int64_t ms)
{
    redisSetTimeout(ctx, tv_ms(ms));
}

int hl_exec(hilock_client *c, hl_cmd *cmd, redisReply **reply, int64_t timeout_ms, char *err)
{
    *reply = NULL;
    int rc = hl_client_check(c, err);
    if (rc)
        return rc;
    /* timeout_ms > 0 bounds the whole call: connecting and the command. */
    int64_t deadline = timeout_ms > 0 ? hl_now_mono_ms() + timeout_ms : 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        int reused = 0, code = 0;
        int64_t left = timeout_ms > 0 ? deadline - hl_now_mono_ms() : 0;
        if (timeout_ms > 0 && left <= 0) {
            hl_set_err(err, "no reply within %lld ms", (long long)timeout_ms);
            return HILOCK_ECONN;
        }
        redisContext *ctx = pool_get(c, left, &reused, &code, err);
        if (!ctx)
            return code;
        if (timeout_ms > 0) {
            left = deadline - hl_now_mono_ms();
            set_timeout(ctx, left > 0 ? left : 1);
        }
        redisReply *r = redisCommandArgv(ctx, cmd->argc, cmd->argv, cmd->argvlen);
        if (r && hl_reply_is_noscript(r)) {
            freeReplyObject(r);
            hl_cmd_to_eval(cmd);
            r = redisCommandArgv(ctx, cmd->argc, cmd->argv, cmd->argvlen);
        }
        if (!r) {
            int retry = attempt == 0 && reused && stale_connection_error(ctx);
            hl_set_err(err, "I/O error talking to Redis: %s", ctx->errstr);
            pool_put(c, ctx, 1);
            if (retry)
                continue;
            return HILOCK_ECONN;
        }
        if (timeout_ms > 0)
            set_timeout(ctx, c->opts.command_timeout_ms);
        pool_put(c, ctx, 0);
        *reply = r;
        return 0;
    }
    return HILOCK_ECONN;
}

int hl_exec_pipeline(hilock_client *c, hl_cmd *cmds, int n, redisReply **replies, char *err)
{
    for (int i = 0; i < n; i++)
        replies[i] = NULL;
    int rc = hl_client_check(c, err);
    if (rc)
        return rc;
    for (int attempt = 0; attempt < 2; attempt++) {
        int reused = 0, code = 0;
        redisContext *ctx = pool_get(c, 0, &reused, &code, err);
        if (!ctx)
            return code;
        for (int i = 0; i < n; i++)
            redisAppendCommandArgv(ctx, cmds[i].argc, cmds[i].argv, cmds[i].argvlen);
        int failed = 0, got = 0;
        for (int i = 0; i < n; i++) {
            void *r = NULL;
            if (redisGetReply(ctx, &r) != REDIS_OK || !r) {
                failed = 1;
                break;
            }
            replies[i] = r;
            got++;
        }
        /* Scripts the server forgot (restart, SCRIPT FLUSH): run those again. */
        for (int i = 0; !failed && i < n; i++) {
            if (hl_reply_is_noscript(replies[i])) {
                freeReplyObject(replies[i]);
                replies[i] = NULL;
                hl_cmd_to_eval(&cmds[i]);
                replies[i] = redisCommandArgv(ctx, cmds[i].argc, cmds[i].argv, cmds[i].argvlen);
                if (!replies[i])
                    failed = 1;
            }
        }
        if (failed) {
            int retry = attempt == 0 && reused && got == 0 && stale_connection_error(ctx);
            hl_set_err(err, "I/O error talking to Redis: %s", ctx->errstr);
            pool_put(c, ctx, 1);
            if (retry)
                continue;
            return HILOCK_ECONN;
        }
        pool_put(c, ctx, 0);
        return 0;
    }
    return HILOCK_ECONN;
}
