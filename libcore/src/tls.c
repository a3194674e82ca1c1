/*
 * Transport: TLS for every connection of a client (servers, sentinels,
 * cluster nodes), on hiredis 1.x's OpenSSL layer. One SSL_CTX per client,
 * built once from the endpoint's settings; each connection gets its own SSL
 * object with SNI and the name its certificate must carry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "transport.h"
#include "transport_impl.h"

#ifdef HILOCK_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <hiredis/hiredis_ssl.h>

struct hl_tls {
    SSL_CTX *ctx;
    int insecure;
};

/* The reason of OpenSSL's last error, or fallback. */
static const char *ssl_reason(const char *fallback)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : fallback;
}

int hl_tls_new(hl_tls **out, const hl_endpoint *ep, char *err)
{
    *out = NULL;
    if (!ep->tls)
        return 0;
    if (ep->path) {
        hl_set_err(err, "TLS over a unix socket is not supported");
        return HILOCK_EINVAL;
    }
    if (!ep->tls_cert_file != !ep->tls_key_file) {
        hl_set_err(err, "TLS client certificate and key go together (tls_cert_file and "
                        "tls_key_file)");
        return HILOCK_EINVAL;
    }
    hl_tls *t = calloc(1, sizeof *t);
    if (!t) {
        hl_set_err(err, "out of memory");
        return HILOCK_ENOMEM;
    }
    int rc = HILOCK_EINVAL;
    ERR_clear_error();
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx) {
        hl_set_err(err, "TLS: cannot create a context: %s", ssl_reason("unknown error"));
        rc = HILOCK_ENOMEM;
        goto fail;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(t->ctx, SSL_OP_NO_COMPRESSION);
    if (ep->tls_ca_file || ep->tls_ca_dir) {
        if (SSL_CTX_load_verify_locations(t->ctx, ep->tls_ca_file, ep->tls_ca_dir) != 1) {
            hl_set_err(err, "TLS: cannot load the CA %s %s: %s",
                       ep->tls_ca_file ? "file" : "directory",
                       ep->tls_ca_file ? ep->tls_ca_file : ep->tls_ca_dir,
                       ssl_reason("unreadable"));
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        hl_set_err(err, "TLS: cannot load the system's CA certificates: %s",
                   ssl_reason("unknown error"));
        goto fail;
    }
    if (ep->tls_cert_file) {
        if (SSL_CTX_use_certificate_chain_file(t->ctx, ep->tls_cert_file) != 1) {
            hl_set_err(err, "TLS: cannot load the client certificate %s: %s", ep->tls_cert_file,
                       ssl_reason("unreadable"));
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(t->ctx, ep->tls_key_file, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(t->ctx) != 1) {
            hl_set_err(err, "TLS: cannot use the private key %s: %s", ep->tls_key_file,
                       ssl_reason("unreadable"));
            goto fail;
        }
    }
    t->insecure = ep->tls_insecure;
    SSL_CTX_set_verify(t->ctx, t->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    ERR_clear_error();
    *out = t;
    return 0;
fail:
    ERR_clear_error();
    hl_tls_free(t);
    return rc;
}

void hl_tls_free(hl_tls *t)
{
    if (!t)
        return;
    if (t->ctx)
        SSL_CTX_free(t->ctx);
    free(t);
}

static int is_ip_literal(const char *s)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* A new SSL for a connection to name: SNI (host names only, RFC 6066) and
 * the name checked against the certificate unless insecure. NULL with *code
 * and err set. */
static SSL *tls_ssl(hl_tls *t, const char *name, const char *where, int *code, char *err)
{
    ERR_clear_error();
    SSL *ssl = SSL_new(t->ctx);
    if (!ssl) {
        *code = HILOCK_ENOMEM;
        hl_set_err(err, "TLS to %s: out of memory", where);
        return NULL;
    }
    int ip = is_ip_literal(name);
    if ((!ip && SSL_set_tlsext_host_name(ssl, name) != 1) ||
        (!t->insecure && !ip && SSL_set1_host(ssl, name) != 1) ||
        (!t->insecure && ip &&
         X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) != 1)) {
        *code = HILOCK_EINVAL;
        hl_set_err(err, "TLS to %s: bad server name '%s'", where, name);
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

int hl_tls_start(hl_tls *t, redisContext *ctx, const char *host, const char *server_name,
                 int *code, char *err)
{
    const char *name = server_name && *server_name ? server_name : host;
    SSL *ssl = tls_ssl(t, name, host, code, err);
    if (!ssl)
        return -1;
    if (redisInitiateSSL(ctx, ssl) == REDIS_OK)
        return 0; /* ctx owns ssl; the handshake goes on with its reads and writes */
    *code = HILOCK_ETLS;
    hl_set_err(err, "TLS to %s: %s", host, ctx->errstr[0] ? ctx->errstr : "cannot start");
    ERR_clear_error();
    SSL_free(ssl);
    return -1;
}

int hl_tls_handshake(hl_tls *t, redisContext *ctx, const char *host, const char *server_name,
                     int64_t timeout_ms, const char *where, int *code, char *err)
{
    const char *name = server_name && *server_name ? server_name : host;
    SSL *ssl = tls_ssl(t, name, where, code, err);
    if (!ssl)
        return -1;
    /* the handshake is bounded by the socket's timeouts */
    struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)((timeout_ms % 1000) * 1000)};
    redisSetTimeout(ctx, tv);
    if (redisInitiateSSL(ctx, ssl) == REDIS_OK)
        return 0; /* ctx owns ssl now */
    long vr = SSL_get_verify_result(ssl);
    unsigned long e = ERR_peek_last_error();
    if (vr != X509_V_OK) {
        *code = HILOCK_ETLS;
        hl_set_err(err, "TLS: the certificate of %s was not accepted: %s (name checked: %s)",
                   where, X509_verify_cert_error_string(vr), name);
    } else if (e) {
        *code = HILOCK_ETLS;
        hl_set_err(err, "TLS handshake with %s failed: %s", where,
                   ERR_reason_error_string(e) ? ERR_reason_error_string(e) : ctx->errstr);
    } else {
        /* no TLS-level error: the peer closed or went silent (a plain port
         * waiting for a newline, a stalled server) */
        *code = HILOCK_ECONN;
        hl_set_err(err, "TLS handshake with %s failed: %s (not a TLS port?)", where,
                   ctx->errstr[0] ? ctx->errstr : "no answer");
    }
    ERR_clear_error();
    SSL_free(ssl);
    return -1;
}

int hl_tls_available(void)
{
    return 1;
}

int hl_tls_refused(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    ERR_clear_error();
    if (!r)
        return 0;
    snprintf(buf, len, "%s", r);
    return 1;
}

#else /* built against a hiredis without TLS */

int hl_tls_new(hl_tls **out, const hl_endpoint *ep, char *err)
{
    *out = NULL;
    if (!ep->tls)
        return 0;
    hl_set_err(err, "this hilock was built without TLS (system hiredis); rediss:// needs "
                    "the default build");
    return HILOCK_EINVAL;
}

void hl_tls_free(hl_tls *t)
{
    (void)t;
}

int hl_tls_start(hl_tls *t, redisContext *ctx, const char *host, const char *server_name,
                 int *code, char *err)
{
    (void)t, (void)ctx, (void)server_name;
    *code = HILOCK_EINVAL;
    hl_set_err(err, "TLS to %s: not built in", host);
    return -1;
}

int hl_tls_handshake(hl_tls *t, redisContext *ctx, const char *host, const char *server_name,
                     int64_t timeout_ms, const char *where, int *code, char *err)
{
    (void)t, (void)ctx, (void)host, (void)server_name, (void)timeout_ms;
    *code = HILOCK_EINVAL;
    hl_set_err(err, "TLS to %s: not built in", where);
    return -1;
}

int hl_tls_available(void)
{
    return 0;
}

int hl_tls_refused(char *buf, size_t len)
{
    (void)buf, (void)len;
    return 0;
}
#endif
