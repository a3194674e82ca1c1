/*
 * Protocol layer: server URLs. One parser for every driver (the C
 * transport, the CLI, the Lua module and, through hilock.proto.parse_url,
 * the OpenResty driver). No I/O: it only turns the text into hl_endpoint.
 *
 *   redis[s]://[[user][:password]@]host[:port][/db][?query]
 *   unix://[[user][:password]@]/path/to/socket[?query]
 *   redis[s]+sentinel://[[user][:password]@]s1[:p1][,s2[:p2]...]/mastername[/db][?query]
 *   redis[s]+cluster://[[user][:password]@]h1[:p1][,h2[:p2]...][/][?query]
 *
 * user and password are percent-decoded. "user@" alone is a user with an
 * empty password (as redis-py reads it: AUTH user ""); ":password@" is the
 * default user. Query parameters (values percent-decoded):
 *   db, user, password, connect_timeout_ms, command_timeout_ms,
 *   socket_connect_timeout, socket_timeout (seconds, redis-py's names),
 *   sentinel_user, sentinel_password,
 *   tls_ca_file, tls_ca_dir, tls_cert_file, tls_key_file, tls_server_name,
 *   tls_insecure (1/0/true/false), delayed_restart (1/0: hl_ml_durability);
 *   redis-py's ssl_ca_certs, ssl_ca_path,
 *   ssl_certfile, ssl_keyfile and ssl_cert_reqs=none|required are accepted
 *   as the same things.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

static void url_err(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void url_err(char *err, const char *fmt, ...)
{
    if (!err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, HL_URL_ERR_MAX, fmt, ap);
    va_end(ap);
}

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

/* Copy [s, s+len) percent-decoded into a new string. A '%' not followed by
 * two hex digits is kept as it is. */
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

/* "1.5" seconds -> 1500 ms (digits, at most one '.', up to 3 decimals). */
static int parse_seconds(const char *s, size_t len, int64_t *ms)
{
    const char *dot = memchr(s, '.', len);
    size_t ilen = dot ? (size_t)(dot - s) : len;
    long whole = 0;
    if (ilen && parse_int(s, ilen, 0, 1000000000L, &whole))
        return -1;
    int64_t frac = 0;
    if (dot) {
        size_t flen = len - ilen - 1;
        if (flen == 0 && ilen == 0)
            return -1;
        int64_t scale = 100;
        for (size_t i = 0; i < flen; i++) {
            char ch = dot[1 + i];
            if (ch < '0' || ch > '9')
                return -1;
            frac += (ch - '0') * scale;
            scale /= 10;
        }
    } else if (ilen == 0) {
        return -1;
    }
    *ms = (int64_t)whole * 1000 + frac;
    return 0;
}

static int parse_bool(const char *s, size_t len, int *out)
{
    if ((len == 1 && *s == '1') || (len == 4 && !strncmp(s, "true", 4)) ||
        (len == 3 && !strncmp(s, "yes", 3)))
        *out = 1;
    else if ((len == 1 && *s == '0') || (len == 5 && !strncmp(s, "false", 5)) ||
             (len == 2 && !strncmp(s, "no", 2)))
        *out = 0;
    else
        return -1;
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
    for (int i = 0; i < ep->nseeds; i++)
        free(ep->seed_hosts[i]);
    free(ep->seed_hosts);
    free(ep->seed_ports);
    free(ep->master_name);
    free(ep->sentinel_user);
    free(ep->sentinel_password);
    free(ep->tls_ca_file);
    free(ep->tls_ca_dir);
    free(ep->tls_cert_file);
    free(ep->tls_key_file);
    free(ep->tls_server_name);
    memset(ep, 0, sizeof *ep);
}

/* Replace *dst by the decoded value. */
static int set_str(char **dst, const char *v, size_t vlen)
{
    char *s = pct_decode(v, vlen);
    if (!s)
        return HILOCK_ENOMEM;
    free(*dst);
    *dst = s;
    return 0;
}

static int key_is(const char *k, size_t klen, const char *name)
{
    return strlen(name) == klen && !memcmp(k, name, klen);
}

/* One "key=value" of the query. */
static int query_param(hl_endpoint *ep, const char *k, size_t klen, const char *v, size_t vlen,
                       char *err)
{
    long n;
    int64_t ms;
    int b;
    if (key_is(k, klen, "db")) {
        if (parse_int(v, vlen, 0, INT_MAX, &n)) {
            url_err(err, "bad db number in URL");
            return HILOCK_EINVAL;
        }
        ep->db = (int)n;
        return 0;
    }
    if (key_is(k, klen, "user") || key_is(k, klen, "username"))
        return set_str(&ep->user, v, vlen);
    if (key_is(k, klen, "password"))
        return set_str(&ep->password, v, vlen);
    if (key_is(k, klen, "sentinel_user") || key_is(k, klen, "sentinel_username"))
        return set_str(&ep->sentinel_user, v, vlen);
    if (key_is(k, klen, "sentinel_password"))
        return set_str(&ep->sentinel_password, v, vlen);
    if (key_is(k, klen, "connect_timeout_ms") || key_is(k, klen, "command_timeout_ms")) {
        if (parse_int(v, vlen, 1, 2000000000L, &n)) {
            url_err(err, "bad %.*s in URL (milliseconds, 1 or more)", (int)klen, k);
            return HILOCK_EINVAL;
        }
        *(k[1] == 'o' && k[2] == 'n' ? &ep->connect_timeout_ms : &ep->command_timeout_ms) = n;
        return 0;
    }
    if (key_is(k, klen, "socket_connect_timeout") || key_is(k, klen, "socket_timeout")) {
        if (parse_seconds(v, vlen, &ms) || ms < 1) {
            url_err(err, "bad %.*s in URL (seconds)", (int)klen, k);
            return HILOCK_EINVAL;
        }
        *(klen == 22 ? &ep->connect_timeout_ms : &ep->command_timeout_ms) = ms;
        return 0;
    }
    if (key_is(k, klen, "tls_ca_file") || key_is(k, klen, "ssl_ca_certs"))
        return set_str(&ep->tls_ca_file, v, vlen);
    if (key_is(k, klen, "tls_ca_dir") || key_is(k, klen, "ssl_ca_path"))
        return set_str(&ep->tls_ca_dir, v, vlen);
    if (key_is(k, klen, "tls_cert_file") || key_is(k, klen, "ssl_certfile"))
        return set_str(&ep->tls_cert_file, v, vlen);
    if (key_is(k, klen, "tls_key_file") || key_is(k, klen, "ssl_keyfile"))
        return set_str(&ep->tls_key_file, v, vlen);
    if (key_is(k, klen, "tls_server_name"))
        return set_str(&ep->tls_server_name, v, vlen);
    if (key_is(k, klen, "tls_insecure")) {
        if (parse_bool(v, vlen, &b)) {
            url_err(err, "bad tls_insecure in URL (1 or 0)");
            return HILOCK_EINVAL;
        }
        ep->tls_insecure = b;
        return 0;
    }
    if (key_is(k, klen, "delayed_restart")) {
        if (parse_bool(v, vlen, &b)) {
            url_err(err, "bad delayed_restart in URL (1 or 0)");
            return HILOCK_EINVAL;
        }
        ep->delayed_restart = b;
        return 0;
    }
    if (key_is(k, klen, "ssl_cert_reqs")) {
        if (key_is(v, vlen, "none"))
            ep->tls_insecure = 1;
        else if (key_is(v, vlen, "required"))
            ep->tls_insecure = 0;
        else {
            url_err(err, "ssl_cert_reqs in URL must be none or required");
            return HILOCK_EINVAL;
        }
        return 0;
    }
    url_err(err, "unknown URL parameter '%.*s'", (int)(klen > 64 ? 64 : klen), k);
    return HILOCK_EINVAL;
}

static int parse_query(hl_endpoint *ep, const char *q, char *err)
{
    int index = 0;
    while (*q) {
        index++;
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        if (n) {
            const char *eq = memchr(q, '=', n);
            if (!eq) {
                /* not echoed: the text may be (part of) a password */
                url_err(err, "URL parameter %d has no '=' (name=value, separated by '&')",
                        index);
                return HILOCK_EINVAL;
            }
            int rc = query_param(ep, q, (size_t)(eq - q), eq + 1, n - (size_t)(eq - q) - 1, err);
            if (rc)
                return rc;
        }
        if (!amp)
            break;
        q = amp + 1;
    }
    return 0;
}

/* "[user][:password]" (without the '@'). */
static int parse_userinfo(hl_endpoint *ep, const char *s, size_t len)
{
    const char *colon = memchr(s, ':', len);
    size_t ulen = colon ? (size_t)(colon - s) : len;
    if (ulen > 0 && set_str(&ep->user, s, ulen))
        return HILOCK_ENOMEM;
    if (colon)
        return set_str(&ep->password, colon + 1, len - ulen - 1);
    /* "user@": a user with an empty password (redis-py: AUTH user "") */
    if (ulen > 0)
        return set_str(&ep->password, "", 0);
    return 0;
}

/* "host[:port]" or "[v6][:port]" in [s, s+len). */
static int parse_hostport(const char *s, size_t len, int default_port, char **host, int *port,
                          char *err)
{
    const char *hend = s + len, *hstart = s, *hstop, *portp = NULL;
    if (len && *s == '[') {
        const char *rb = memchr(s, ']', len);
        if (!rb) {
            url_err(err, "unterminated [ in URL host");
            return HILOCK_EINVAL;
        }
        hstart = s + 1;
        hstop = rb;
        if (rb + 1 < hend) {
            if (rb[1] != ':') {
                url_err(err, "bad host in URL");
                return HILOCK_EINVAL;
            }
            portp = rb + 2;
        }
    } else {
        const char *colon = memchr(s, ':', len);
        hstop = colon ? colon : hend;
        if (colon)
            portp = colon + 1;
    }
    if (hstop == hstart) {
        url_err(err, "URL has no host");
        return HILOCK_EINVAL;
    }
    long v = default_port;
    if (portp && parse_int(portp, (size_t)(hend - portp), 1, 65535, &v)) {
        url_err(err, "bad port in URL");
        return HILOCK_EINVAL;
    }
    if (!(*host = pct_decode(hstart, (size_t)(hstop - hstart))))
        return HILOCK_ENOMEM;
    *port = (int)v;
    return 0;
}

static int parse_db(hl_endpoint *ep, const char *s, size_t len, char *err)
{
    long v;
    if (!len)
        return 0;
    if (parse_int(s, len, 0, INT_MAX, &v)) {
        url_err(err, "bad db number in URL");
        return HILOCK_EINVAL;
    }
    ep->db = (int)v;
    return 0;
}

/* Authority and path of [s, s+len): "[userinfo@]<hosts>[/path]". */
static int split_auth(const char *s, size_t len, const char **hosts)
{
    const char *slash = memchr(s, '/', len);
    size_t lim = slash ? (size_t)(slash - s) : len;
    const char *at = NULL;
    for (size_t i = 0; i < lim; i++)
        if (s[i] == '@')
            at = s + i; /* the last '@' before the path */
    *hosts = at ? at + 1 : s;
    return at ? (int)(at - s) : -1;
}

static int parse_tcp(hl_endpoint *ep, const char *s, size_t len, char *err)
{
    const char *hp;
    int ulen = split_auth(s, len, &hp);
    int rc;
    if (ulen >= 0 && (rc = parse_userinfo(ep, s, (size_t)ulen)))
        return rc;
    const char *end = s + len;
    const char *path = memchr(hp, '/', (size_t)(end - hp));
    if ((rc = parse_hostport(hp, (size_t)((path ? path : end) - hp), 6379, &ep->host, &ep->port,
                             err)))
        return rc;
    if (path && (rc = parse_db(ep, path + 1, (size_t)(end - path - 1), err)))
        return rc;
    return 0;
}

static int parse_unix(hl_endpoint *ep, const char *s, size_t len, char *err)
{
    const char *p;
    int ulen = split_auth(s, len, &p);
    /* the socket path starts at the first '/', so "user:pw@/path" works */
    if (ulen < 0) {
        p = s;
    } else {
        int rc = parse_userinfo(ep, s, (size_t)ulen);
        if (rc)
            return rc;
    }
    size_t plen = len - (size_t)(p - s);
    if (plen == 0 || p[0] != '/') {
        url_err(err, "unix URL needs an absolute socket path");
        return HILOCK_EINVAL;
    }
    if (!(ep->path = pct_decode(p, plen)))
        return HILOCK_ENOMEM;
    return 0;
}

static int parse_seeds(hl_endpoint *ep, const char *s, size_t len, int cluster, char *err)
{
    const char *hosts;
    int ulen = split_auth(s, len, &hosts);
    int rc;
    if (ulen >= 0 && (rc = parse_userinfo(ep, s, (size_t)ulen)))
        return rc;
    const char *end = s + len;
    const char *slash = memchr(hosts, '/', (size_t)(end - hosts));
    if (!slash)
        slash = end;
    if (!cluster && (slash == end || slash + 1 == end)) {
        url_err(err, "sentinel URL needs /mastername after the sentinel list");
        return HILOCK_EINVAL;
    }
    ep->cluster = cluster;
    int count = 1;
    for (const char *p = hosts; p < slash; p++)
        count += *p == ',';
    ep->seed_hosts = calloc((size_t)count, sizeof *ep->seed_hosts);
    ep->seed_ports = calloc((size_t)count, sizeof *ep->seed_ports);
    if (!ep->seed_hosts || !ep->seed_ports)
        return HILOCK_ENOMEM;
    const char *p = hosts;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(slash - p));
        const char *e = comma ? comma : slash;
        if (e == p) {
            url_err(err, "empty host in the %s list of the URL", cluster ? "node" : "sentinel");
            return HILOCK_EINVAL;
        }
        if ((rc = parse_hostport(p, (size_t)(e - p), cluster ? 6379 : 26379,
                                 &ep->seed_hosts[ep->nseeds], &ep->seed_ports[ep->nseeds], err)))
            return rc;
        ep->nseeds++;
        if (!comma)
            break;
        p = comma + 1;
    }
    if (cluster) {
        if (slash < end && slash + 1 < end) {
            url_err(err, "a cluster URL has no database or master name");
            return HILOCK_EINVAL;
        }
        return 0;
    }
    const char *name = slash + 1;
    const char *dbp = memchr(name, '/', (size_t)(end - name));
    size_t nlen = (size_t)((dbp ? dbp : end) - name);
    if (nlen == 0) {
        url_err(err, "sentinel URL has an empty master name");
        return HILOCK_EINVAL;
    }
    if (!(ep->master_name = pct_decode(name, nlen)))
        return HILOCK_ENOMEM;
    if (dbp && (rc = parse_db(ep, dbp + 1, (size_t)(end - dbp - 1), err)))
        return rc;
    return 0;
}

int hl_endpoint_parse(hl_endpoint *ep, const char *url, char *err)
{
    static const struct {
        const char *prefix;
        int kind; /* 0 tcp, 1 unix, 2 sentinel, 3 cluster */
        int tls;
    } schemes[] = {
        {"redis://", 0, 0},          {"rediss://", 0, 1},
        {"unix://", 1, 0},           {"redis+sentinel://", 2, 0},
        {"rediss+sentinel://", 2, 1}, {"redis+cluster://", 3, 0},
        {"rediss+cluster://", 3, 1},
    };
    memset(ep, 0, sizeof *ep);
    ep->connect_timeout_ms = ep->command_timeout_ms = -1;
    if (!url || !*url) {
        url_err(err, "empty URL");
        return HILOCK_EINVAL;
    }
    size_t i, n = sizeof schemes / sizeof schemes[0];
    for (i = 0; i < n; i++)
        if (!strncmp(url, schemes[i].prefix, strlen(schemes[i].prefix)))
            break;
    if (i == n) {
        url_err(err, "URL must start with redis://, rediss://, unix://, redis[s]+sentinel:// "
                     "or redis[s]+cluster://");
        return HILOCK_EINVAL;
    }
    ep->tls = schemes[i].tls;
    const char *rest = url + strlen(schemes[i].prefix);
    const char *q = strchr(rest, '?');
    size_t len = q ? (size_t)(q - rest) : strlen(rest);
    int rc;
    switch (schemes[i].kind) {
    case 0: rc = parse_tcp(ep, rest, len, err); break;
    case 1: rc = parse_unix(ep, rest, len, err); break;
    default: rc = parse_seeds(ep, rest, len, schemes[i].kind == 3, err); break;
    }
    if (!rc && q)
        rc = parse_query(ep, q + 1, err);
    if (!rc && ep->cluster && ep->db) {
        url_err(err, "a cluster has only database 0");
        rc = HILOCK_EINVAL;
    }
    if (rc) {
        if (rc == HILOCK_ENOMEM)
            url_err(err, "out of memory");
        hl_endpoint_free(ep);
        ep->connect_timeout_ms = ep->command_timeout_ms = -1;
    }
    return rc;
}

/* ---- redaction: URLs as they may be shown ---- */

typedef struct {
    char *buf;
    size_t cap, n; /* n: the whole length, also past cap */
} redact_out;

static void put(redact_out *o, const char *s, size_t len)
{
    if (o->n < o->cap) {
        size_t room = o->cap - o->n;
        memcpy(o->buf + o->n, s, len < room ? len : room);
    }
    o->n += len;
}

/* The name of a query parameter holds "pass" (any case). */
static int secret_name(const char *k, size_t klen)
{
    for (size_t i = 0; i + 4 <= klen; i++)
        if ((k[i] | 0x20) == 'p' && (k[i + 1] | 0x20) == 'a' && (k[i + 2] | 0x20) == 's' &&
            (k[i + 3] | 0x20) == 's')
            return 1;
    return 0;
}

/* Write the query [p, end of string) with every secret value as ***. */
static void put_query(redact_out *o, const char *p)
{
    for (;;) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (eq && secret_name(p, (size_t)(eq - p)) && eq + 1 < p + n) {
            put(o, p, (size_t)(eq + 1 - p));
            put(o, "***", 3);
        } else {
            put(o, p, n);
        }
        if (!amp)
            break;
        put(o, "&", 1);
        p = amp + 1;
    }
}

size_t hilock_url_redact(char *buf, size_t len, const char *url)
{
    redact_out o = {buf, len ? len - 1 : 0, 0};
    if (!url)
        url = "";
    const char *end = url + strlen(url);
    const char *sep = strstr(url, "://");
    const char *start = sep ? sep + 3 : url;
    /* The user part ends at the '@' the parser takes (the last one before
     * the query). A URL that does not parse may hold a password with an
     * unencoded '?', '/' or '@': then the last '@' of all ends it, which
     * hides too much rather than too little. */
    hl_endpoint ep;
    int parses = hl_endpoint_parse(&ep, url, NULL) == 0;
    hl_endpoint_free(&ep);
    const char *first_q = strchr(start, '?');
    const char *lim = parses && first_q ? first_q : end;
    const char *at = NULL;
    for (const char *p = start; p < lim; p++)
        if (*p == '@')
            at = p;
    const char *colon = at ? memchr(start, ':', (size_t)(at - start)) : NULL;
    const char *rest = url; /* what is left to write */
    if (colon && colon + 1 < at) {
        put(&o, url, (size_t)(colon + 1 - url));
        put(&o, "***", 3);
        rest = at;
    }
    const char *q = strchr(rest > start ? rest : start, '?');
    if (q) {
        put(&o, rest, (size_t)(q + 1 - rest));
        put_query(&o, q + 1);
    } else {
        put(&o, rest, (size_t)(end - rest));
    }
    if (len)
        buf[o.n < o.cap ? o.n : o.cap] = 0;
    return o.n;
}
