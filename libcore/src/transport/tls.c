/*
 * Transport: TLS for every connection of a client (servers, sentinels,
 * cluster nodes), on hiredis 1.x's OpenSSL layer. One SSL_CTX per client,
 * built once from the endpoint's settings; each connection gets its own SSL
 * object with SNI and the name its certificate must carry.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include "transport.h"
#include "transport_impl.h"

#ifdef HILOCK_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <hiredis/hiredis_ssl.h>

struct hl_tls {
    SSL_CTX *ctx;
    BIO_METHOD *nosig; /* the socket BIO of our blocking connections */
    int insecure;
};

/* ---- a socket BIO that writes with MSG_NOSIGNAL ----
 * OpenSSL's socket BIO (SSL_set_fd, as hiredis sets up a connection) writes
 * with write(2): a server gone away raises SIGPIPE in the writing thread.
 * After the handshake, a blocking connection's SSL gets this BIO instead:
 * the same reads and writes on the same descriptor, as OpenSSL's own
 * socket BIO does them, except that it writes with send(MSG_NOSIGNAL).
 * Then no write on such a connection can raise SIGPIPE, and a caller's call
 * needs no signal mask (util.c); the handshake itself (a few writes at
 * connect time) still runs masked. The descriptor stays hiredis's: the BIO
 * never closes it. One method per client (hl_tls), freed after every
 * connection (hl_transport_free frees the nodes first). */
#define HL_BIO_TYPE (0x70 | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR)

static int nosig_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int nosig_write(BIO *b, const char *buf, int len)
{
    errno = 0; /* BIO_sock_should_retry reads errno, also after a 0 */
    ssize_t n = send(nosig_fd(b), buf, len > 0 ? (size_t)len : 0, MSG_NOSIGNAL);
    BIO_clear_retry_flags(b);
    if (n <= 0 && BIO_sock_should_retry((int)n))
        BIO_set_retry_write(b);
    return (int)n;
}

static int nosig_read(BIO *b, char *buf, int len)
{
    if (!buf)
        return 0;
    errno = 0;
    ssize_t n = recv(nosig_fd(b), buf, len > 0 ? (size_t)len : 0, 0);
    BIO_clear_retry_flags(b);
    if (n <= 0) {
        if (BIO_sock_should_retry((int)n))
            BIO_set_retry_read(b);
        else if (n == 0)
            BIO_set_flags(b, BIO_FLAGS_IN_EOF);
    }
    return (int)n;
}

static long nosig_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    switch (cmd) {
    case BIO_C_GET_FD:
        if (!BIO_get_init(b))
            return -1;
        if (ptr)
            *(int *)ptr = nosig_fd(b);
        return nosig_fd(b);
    case BIO_CTRL_GET_CLOSE:
        return BIO_NOCLOSE;
    case BIO_CTRL_DUP:
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_EOF:
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    default:
        return 0;
    }
}

static BIO_METHOD *nosig_method(void)
{
    BIO_METHOD *m = BIO_meth_new(HL_BIO_TYPE, "hilock socket (MSG_NOSIGNAL)");
    if (m && (BIO_meth_set_write(m, nosig_write) != 1 || BIO_meth_set_read(m, nosig_read) != 1 ||
              BIO_meth_set_ctrl(m, nosig_ctrl) != 1)) {
        BIO_meth_free(m);
        m = NULL;
    }
    return m;
}

/* After the handshake: ssl reads and writes fd through the method above.
 * 0, or -1 (out of memory; ssl unchanged). */
static int nosig_attach(hl_tls *t, SSL *ssl, int fd)
{
    BIO *b = BIO_new(t->nosig);
    if (!b)
        return -1;
    BIO_set_data(b, (void *)(intptr_t)fd);
    BIO_set_init(b, 1);
    SSL_set_bio(ssl, b, b); /* frees the socket BIO SSL_set_fd made (it does not close fd) */
    return 0;
}

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
    t->nosig = t->ctx ? nosig_method() : NULL;
    if (!t->ctx || !t->nosig) {
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
    if (t->nosig)
        BIO_meth_free(t->nosig);
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
    if (redisInitiateSSL(ctx, ssl) == REDIS_OK) { /* ctx owns ssl now */
        if (nosig_attach(t, ssl, ctx->fd) == 0)
            return 0;
        *code = HILOCK_ENOMEM;
        hl_set_err(err, "TLS to %s: out of memory", where);
        return -1; /* ctx (and ssl with it) for redisFree only */
    }
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
