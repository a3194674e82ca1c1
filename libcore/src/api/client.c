/* Client handle: options, identity, lifecycle. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "api.h"

int hilock_version(void)
{
    return HILOCK_VERSION_NUMBER;
}

const char *hilock_version_string(void)
{
#ifdef HILOCK_SAFETY_BREAK /* the safety harness's self-tests only: says so */
    return HILOCK_VERSION_STRING "+BROKEN-" HILOCK_SAFETY_BREAK;
#else
    return HILOCK_VERSION_STRING;
#endif
}

const char *hilock_strerror(int code)
{
    switch (code) {
    case HILOCK_OK: return "ok";
    case HILOCK_EINVAL: return "invalid argument";
    case HILOCK_ETIMEDOUT: return "timed out waiting for the lock";
    case HILOCK_ENOTOWNER: return "not owner: the lock is not held by this owner";
    case HILOCK_ELOST: return "lock lost while held";
    case HILOCK_ECONN: return "connection error";
    case HILOCK_EPROTO: return "protocol error or unexpected server reply";
    case HILOCK_EAUTH: return "authentication or database selection refused";
    case HILOCK_EWRONGTYPE: return "the key holds a value that is not a lock";
    case HILOCK_ENOMEM: return "out of memory";
    case HILOCK_ECLOSED: return "client closed or used after fork";
    case HILOCK_ETLS: return "TLS handshake failed (certificate not verified or refused)";
    case HILOCK_ECANCELED: return "acquire cancelled";
    case HILOCK_EUNACKED: return "released again: no replica acknowledged the grant";
    default: return "unknown error";
    }
}

int hilock_options_init(hilock_options *opts, unsigned int version)
{
    if (!opts || version > HILOCK_OPTIONS_VERSION)
        return HILOCK_EINVAL;
    memset(opts, 0, sizeof *opts);
    opts->version = version ? version : HILOCK_OPTIONS_VERSION;
    opts->connect_timeout_ms = 1000;
    opts->command_timeout_ms = 1000;
    opts->watchdog_lease_ms = 30000;
    opts->fair_wait_window_ms = 300000;
    opts->pool_size = 8;
    opts->replica_ack = 0;
    opts->replica_ack_timeout_ms = 1000;
    return 0;
}

/* The calling thread's id, asked of the kernel on every call. It is not
 * kept: a kept copy would be wrong in a child after fork() (a copy of the
 * forking thread with a new id but the same thread storage) unless a
 * process-wide fork handler forgot it, and the system call costs ~0.1 us
 * against a lock call's round trip of tens of microseconds (one or two per
 * lock call; docs/architecture.md "State outside the client handle"). */
uint64_t hilock_thread_id(void)
{
    return (uint64_t)syscall(SYS_gettid);
}

static int fill_options(hilock_options *out, const hilock_options *in, char *err)
{
    hilock_options_init(out, HILOCK_OPTIONS_VERSION);
    if (!in)
        return 0;
    if (in->version > HILOCK_OPTIONS_VERSION) {
        hl_set_err(err, "options version %u is newer than this library (%u)", in->version,
                   HILOCK_OPTIONS_VERSION);
        return HILOCK_EINVAL;
    }
    struct {
        const char *name;
        int64_t value;
        int64_t *dst;
    } times[] = {
        {"connect_timeout_ms", in->connect_timeout_ms, &out->connect_timeout_ms},
        {"command_timeout_ms", in->command_timeout_ms, &out->command_timeout_ms},
        {"watchdog_lease_ms", in->watchdog_lease_ms, &out->watchdog_lease_ms},
        {"fair_wait_window_ms", in->fair_wait_window_ms, &out->fair_wait_window_ms},
    };
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
        if (times[i].value < 0 || times[i].value > HILOCK_MAX_TIME_MS) {
            hl_set_err(err, "option %s out of range: %lld", times[i].name,
                       (long long)times[i].value);
            return HILOCK_EINVAL;
        }
        if (times[i].value)
            *times[i].dst = times[i].value;
    }
    if (in->pool_size < 0 || in->pool_size > 1024) {
        hl_set_err(err, "option pool_size out of range: %d", in->pool_size);
        return HILOCK_EINVAL;
    }
    if (in->pool_size)
        out->pool_size = in->pool_size;
    if (in->version >= 2) {
        if (in->replica_ack < -1 || in->replica_ack > 1) {
            hl_set_err(err, "option replica_ack must be -1, 0 or 1");
            return HILOCK_EINVAL;
        }
        if (in->replica_ack_timeout_ms < 0 || in->replica_ack_timeout_ms > HILOCK_MAX_TIME_MS) {
            hl_set_err(err, "option replica_ack_timeout_ms out of range");
            return HILOCK_EINVAL;
        }
        out->replica_ack = in->replica_ack;
        if (in->replica_ack_timeout_ms)
            out->replica_ack_timeout_ms = in->replica_ack_timeout_ms;
    }
    if (in->version >= 4) {
        if (in->stats_names < 0 || in->stats_names > HILOCK_STATS_NAMES_MAX) {
            hl_set_err(err, "option stats_names out of range: %d (0 to %d)", in->stats_names,
                       HILOCK_STATS_NAMES_MAX);
            return HILOCK_EINVAL;
        }
        out->stats_names = in->stats_names;
    }
    return 0;
}

/* The URL's query settings win over the options; the options fill in what
 * the URL leaves out (TLS files, sentinel credentials). */
static int merge_url_options(hilock_client *c, const hilock_options *in, char *err)
{
    hl_endpoint *ep = &c->t.ep;
    if (ep->connect_timeout_ms > 0)
        c->t.opts.connect_timeout_ms = ep->connect_timeout_ms;
    if (ep->command_timeout_ms > 0)
        c->t.opts.command_timeout_ms = ep->command_timeout_ms;
    if (in && in->version >= 3) {
        struct {
            const char *value;
            char **dst;
        } strs[] = {
            {in->tls_ca_file, &ep->tls_ca_file},
            {in->tls_ca_dir, &ep->tls_ca_dir},
            {in->tls_cert_file, &ep->tls_cert_file},
            {in->tls_key_file, &ep->tls_key_file},
            {in->tls_server_name, &ep->tls_server_name},
            {in->sentinel_user, &ep->sentinel_user},
            {in->sentinel_password, &ep->sentinel_password},
        };
        for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
            if (!strs[i].value || *strs[i].dst)
                continue;
            if (!(*strs[i].dst = hl_strdup(strs[i].value))) {
                hl_set_err(err, "out of memory");
                return HILOCK_ENOMEM;
            }
        }
        if (in->tls < 0 || in->tls > 1 || in->tls_insecure < 0 || in->tls_insecure > 1) {
            hl_set_err(err, "options tls and tls_insecure must be 0 or 1");
            return HILOCK_EINVAL;
        }
        ep->tls |= in->tls;
        ep->tls_insecure |= in->tls_insecure;
    }
    if (!ep->tls && (ep->tls_ca_file || ep->tls_ca_dir || ep->tls_cert_file || ep->tls_key_file ||
                     ep->tls_server_name || ep->tls_insecure)) {
        hl_set_err(err, "TLS settings given for a connection without TLS (use rediss://, "
                        "rediss+sentinel://, rediss+cluster:// or the tls option)");
        return HILOCK_EINVAL;
    }
    if ((ep->sentinel_user || ep->sentinel_password) && (!ep->nseeds || ep->cluster)) {
        hl_set_err(err, "sentinel credentials given for a URL that is not redis[s]+sentinel://");
        return HILOCK_EINVAL;
    }
    return hl_tls_new(&ep->tls_ctx, ep, err);
}

/* An ACL user must be allowed EVAL (every lock operation is a script) and
 * PUBLISH/SUBSCRIBE (SPUBLISH/SSUBSCRIBE on a cluster) on the unlock
 * channels; say so at open rather than at the first release. Another error
 * reply (a proxy without scripting, say) does not fail the open: the first
 * lock call reports it. */
static int check_permissions(hilock_client *c, redisContext *ctx, char *err)
{
    const char *pub = c->t.ep.cluster ? "spublish" : "publish";
    const char *sub = c->t.ep.cluster ? "ssubscribe" : "subscribe";
    redisReply *r = hl_command(ctx, "EVAL %s 0 %s %s %s", hl_script_source(HL_SCRIPT_ACL_CHECK),
                                 "redisson_lock__channel:{hilock-open-check}", pub, sub);
    int rc = 0;
    if (!r) {
        int bad = ctx->err == REDIS_ERR_PROTOCOL || ctx->err == REDIS_ERR_OOM;
        rc = bad ? HILOCK_EPROTO : HILOCK_ECONN;
        hl_set_err(err, "permission check failed: %s%s", bad ? "bad reply from Redis: " : "",
                   ctx->errstr);
    } else if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOPERM", 6)) {
        rc = HILOCK_EAUTH;
        hl_set_err(err, "this user may not run EVAL (hilock runs every lock operation as a "
                        "script; docs/acl.md): %s", r->str);
    } else if ((r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
               strcmp(r->str, "ok") != 0) {
        rc = HILOCK_EAUTH;
        hl_set_err(err, "this user may not %s on redisson_lock__channel:* (waiters are woken "
                        "through it; docs/acl.md)", r->str);
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

static void client_destroy(hilock_client *c)
{
    int forked = hl_transport_forked(&c->t); /* a child after fork(): memory only */
    hl_easy_close_all(c, forked);
    hl_transport_free(&c->t, forked);
    if (!forked) {
        pthread_mutex_destroy(&c->err_mu);
        pthread_mutex_destroy(&c->unsettled_mu);
        pthread_mutex_destroy(&c->easy_mu);
        pthread_cond_destroy(&c->easy_cv);
    }
    hl_unsettled_free(&c->unsettled);
    free(c);
}

void hl_client_ref(hilock_client *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
}

void hl_client_unref(hilock_client *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
        client_destroy(c);
}

/* Learn the slot map (cluster), then verify server, credentials and
 * database once, keeping the connection. 0 or an error code. */
static int open_check(hilock_client *c, char *err)
{
    int rc;
    if (c->t.ep.cluster) {
        /* learn the slot map from the seeds; every master becomes a node */
        if ((rc = hl_cluster_refresh(&c->t, err)) != 0)
            return rc;
    }
    /* Verify server, credentials and database once; keep the connection. */
    int code = 0;
    redisContext *ctx = hl_transport_connect_first(&c->t, &code, err);
    if (!ctx)
        return code;
    redisReply *r = hl_command(ctx, "PING");
    if (!r || r->type != REDIS_REPLY_STATUS || strcmp(r->str, "PONG") != 0) {
        int noauth = r && r->str && (!strncmp(r->str, "NOAUTH", 6) || !strncmp(r->str, "WRONGPASS", 9));
        /* a reply that is not RESP at all: something else listens there */
        rc = !r ? (ctx->err == REDIS_ERR_PROTOCOL ? HILOCK_EPROTO : HILOCK_ECONN)
                : noauth ? HILOCK_EAUTH : HILOCK_EPROTO;
        char why[128];
        if (!r && c->t.ep.tls) {
            /* the first command after the handshake found the session gone:
             * TLS 1.3 servers refuse a client certificate only now (by an
             * alert, or a reset that may overtake it) */
            if (!hl_tls_refused(why, sizeof why))
                snprintf(why, sizeof why, "%s", ctx->errstr);
            rc = HILOCK_ETLS;
            hl_set_err(err, "the server ended the TLS session after the handshake: %s (does it "
                            "want a client certificate? tls_cert_file, tls_key_file)", why);
            redisFree(ctx);
            return rc;
        }
        if (!r && hl_conn_no_reply(ctx, c->t.opts.command_timeout_ms, err)) {
            redisFree(ctx);
            return rc;
        }
        /* a TLS port drops a plain client's first command */
        int tls_port = !r && !c->t.ep.tls && !c->t.ep.path;
        hl_set_err(err, "server check failed: %s%s",
                   !r ? ctx->errstr : r->type == REDIS_REPLY_ERROR ? r->str
                                                                    : "PING not answered with PONG",
                   tls_port ? " (a TLS port? use rediss://)" : "");
        if (r)
            freeReplyObject(r);
        redisFree(ctx);
        return rc;
    }
    freeReplyObject(r);
    if ((rc = check_permissions(c, ctx, err)) != 0) {
        redisFree(ctx);
        return rc;
    }
    hl_transport_keep_first(&c->t, ctx);
    return 0;
}

/* The transport's sinks (hl_sinks): its background failures become the
 * client's message; a close asked from a lost callback runs on the watchdog
 * thread once its pass is over. */
static void error_sink(void *ctx, const char *msg)
{
    hl_client_set_err(ctx, msg);
}

/* A loss the watchdog found: a lock's hold, or a kept semaphore permit. */
static void lost_sink(void *holder, int kind, uint64_t tid, int cause, int64_t silent_ms)
{
    if (kind == (int)HL_KIND_PERMIT)
        hl_permit_lost_sink(holder);
    else
        hl_lock_lost_sink(holder, tid, cause, silent_ms);
}

static void close_sink(void *ctx)
{
    hl_client_close_now(ctx, 1);
}

int hilock_client_open(hilock_client **out, const char *url, const hilock_options *opts,
                       char *errbuf, size_t errlen)
{
    char err[HL_ERRMSG_MAX] = "";
    int rc = 0;
    hilock_client *c = NULL;
    if (!out) {
        hl_set_err(err, "out is NULL");
        rc = HILOCK_EINVAL;
        goto done;
    }
    *out = NULL;
    c = calloc(1, sizeof *c);
    if (!c) {
        hl_set_err(err, "out of memory");
        rc = HILOCK_ENOMEM;
        goto done;
    }
    c->refs = 1;
    hl_transport_init(&c->t);
    pthread_mutex_init(&c->err_mu, NULL);
    pthread_mutex_init(&c->unsettled_mu, NULL);
    pthread_mutex_init(&c->easy_mu, NULL);
    hl_cond_init_mono(&c->easy_cv);
    hl_unsettled_init(&c->unsettled, 0);
    c->t.sinks = (hl_sinks){.ctx = c, .error = error_sink, .lost = lost_sink,
                            .close = close_sink};
    if (hl_uuid4(c->t.id) != 0) {
        hl_set_err(err, "no random bytes for the client id (getrandom and /dev/urandom failed)");
        rc = HILOCK_EPROTO;
        goto done;
    }

    if ((rc = fill_options(&c->t.opts, opts, err)) != 0)
        goto done;
    hl_stats_names_init(&c->t.stats, c->t.opts.stats_names);
    if ((rc = hl_endpoint_parse(&c->t.ep, url, err)) != 0)
        goto done;
    if ((rc = merge_url_options(c, opts, err)) != 0)
        goto done;
    /* replica acknowledgement: default on where a failover can happen */
    c->t.replica_ack = c->t.opts.replica_ack == 1 ||
                     (c->t.opts.replica_ack == 0 && (c->t.ep.nseeds > 0));
    if ((rc = hl_nodes_init(&c->t, err)) != 0)
        goto done;
    hl_nosigpipe sp;
    hl_transport_nosigpipe_enter(&sp);
    rc = open_check(c, err);
    hl_nosigpipe_leave(&sp);
    if (rc)
        goto done;
    rc = hl_sentinel_start(&c->t, err);
done:
    if (rc) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "%s", err[0] ? err : hilock_strerror(rc));
        if (c) {
            hl_sentinel_stop(&c->t);
            hl_client_unref(c);
        }
        return rc;
    }
    if (errbuf && errlen)
        errbuf[0] = 0;
    *out = c;
    return 0;
}

void hilock_client_close(hilock_client *c)
{
    if (!c)
        return;
    if (hl_transport_forked(&c->t)) {
        /* Child after fork(): the threads are not ours and mutexes may be held
         * by threads that do not exist here. Only let go of the memory and the
         * descriptors (closing a descriptor does not disturb the parent). */
        c->t.closed = 1;
        hl_client_unref(c); /* frees the nodes' idle connections */
        return;
    }
    __atomic_store_n(&c->t.closed, 1, __ATOMIC_RELEASE);
    if (hl_wd_on_thread(&c->t)) {
        /* from a lost callback: the watchdog thread finishes its pass (the
         * report in progress still uses the client), then closes it */
        hl_wd_defer_close(&c->t);
        return;
    }
    hl_client_close_now(c, 0);
}

void hl_client_close_now(hilock_client *c, int from_watchdog)
{
    hl_easy_close_all(c, 0);
    hl_transport_shutdown(&c->t, from_watchdog);
    hl_client_unref(c);
}

const char *hilock_client_id(const hilock_client *c)
{
    return c ? c->t.id : "";
}

const char *hilock_client_errmsg(const hilock_client *c)
{
    if (!c)
        return "client is NULL";
    hilock_client *m = (hilock_client *)c; /* err_mu guards the message */
    return hl_err_view(c, &m->err_mu, m->errmsg);
}

void hl_client_set_err(hilock_client *c, const char *msg)
{
    pthread_mutex_lock(&c->err_mu);
    snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
    pthread_mutex_unlock(&c->err_mu);
}

int hilock_client_owner(const hilock_client *c, uint64_t tid, char *buf, size_t len)
{
    /* 36 (uuid) + 1 (':') + 20 (largest uint64) + 1 (NUL) = 58 */
    if (!c || !buf || len < 58)
        return HILOCK_EINVAL;
    snprintf(buf, len, "%s:%" PRIu64, c->t.id, tid);
    return 0;
}

int hl_client_check(hilock_client *c, char *err)
{
    return hl_transport_check(&c->t, err);
}

int hilock_client_stats(hilock_client *c, hilock_stats *out)
{
    if (!c || !out || out->version > HILOCK_STATS_VERSION)
        return HILOCK_EINVAL;
    /* version 1 is the whole struct; a later version copies the fields of
     * the version asked for only */
    memset(out, 0, sizeof *out);
    out->version = HILOCK_STATS_VERSION;
    hl_stats_copy(&c->t.stats, out);
    return 0;
}

int hilock_client_name_stats(hilock_client *c, hilock_kind kind, const char *name,
                             hilock_name_stats *out)
{
    return c ? hl_stats_name_copy(&c->t.stats, kind, name, out) : HILOCK_EINVAL;
}

int hilock_client_each_name_stats(hilock_client *c, hilock_name_stats *buf,
                                  hilock_name_stats_cb cb, void *userdata)
{
    return c ? hl_stats_name_each(&c->t.stats, buf, cb, userdata) : HILOCK_EINVAL;
}

void hl_client_stats_off(hilock_client *c, int off)
{
    __atomic_store_n(&c->t.stats.off, off ? 1 : 0, __ATOMIC_RELAXED);
}

void hilock_client_set_trace(hilock_client *c, hilock_trace_cb cb, void *userdata)
{
    if (c)
        hl_stats_set_trace(&c->t.stats, cb, userdata);
}
