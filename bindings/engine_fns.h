/*
 * The engine's free functions for the language bindings, listed once.
 *
 * hilock._engine (python/_engine.c) and hilock.proto (lua/hilock_engine.c)
 * both include this file and register every row of hb_fns[] with one
 * generic dispatcher each: the binding reads the arguments the row's letters
 * name, calls the row's function with them, and turns what it produced into
 * its own values. A new engine call is a function here and one row; it then
 * exists in Python and in Lua without glue in either binding.
 *
 * Arguments (hb_fn.args, one letter each; after '|' they may be left out:
 * 0, false, NULL, not set):
 *   i  an integer (int64; the function checks its range: hb_range)
 *   u  an unsigned 64-bit integer (Python masks to 64 bits; Lua 0..2^63-1)
 *   b  a truth value (Python: any object's truth; Lua: anything but nil/false)
 *   s  a string without NUL bytes (Python str; Lua string)
 *   S  a string that may hold NUL bytes (the function checks it)
 *   z  such a string, or None/nil
 *   r  a reply (hilock._engine.Reply; hilock.proto reply)
 *   e  a word of the row's words[] (Python: its index, an int; Lua: the word)
 *   N  the lock's names the method is called on (hb_lock_fns: Python
 *      hilock._engine.Names, Lua hilock.proto.lock), always first
 *   H  the session's hold table the method is called on (hb_holds_fns:
 *      Python hilock._engine.Holds, Lua hilock.proto.holds), always first
 *   K  a hold's key in that table (Python: any hashable; Lua: a string)
 *   L  the pub/sub liveness rule the method is called on (hb_sublive_fns:
 *      Python hilock._engine.Sublive, Lua hilock.proto.sublive), always first
 *   U  the session's unsettled record set the method is called on
 *      (hb_unsettled_fns: Python hilock._engine.Unsettled, Lua
 *      hilock.proto.unsettled), always first
 *   X  the settle machine the method is called on (hb_settle_fns: Python
 *      hilock._engine.Settle, Lua hilock.proto's settle machine), always first
 *   t  true, false or None/nil (1, 0, -1)
 *   M  the semaphore's or latch's names the method is called on (Python
 *      hilock._engine.SemNames, Lua hilock.proto.sem), always first
 *   O  the engine object the method is called on (its class: the row's
 *      cls; its state: hb_arg.p), always first
 *   c  a failure (Python: a HILOCK_E* code, -100..-1; Lua: an error message
 *      with its stable prefix, or nil: "connection")
 * Results (hb_out, in order): ints, bools, strings, RESP commands (Python
 * bytes, Lua string), nil/None, words (Python: the index; Lua: the word),
 * lists (Python list or tuple, Lua array table) of the values that follow,
 * dicts (Python dict, Lua table) of the key, value pairs that follow,
 * holds of a hold table (the key the binding registered them under), and
 * failures (HB_ERR: Python the code; Lua the message's prefix).
 * hb_only marks the value just given for one language (e.g. Python's
 * tuples, hb_pytuple); a list or dict counts only the values its language
 * gets (the other's are skipped, also inside it).
 * Python returns None for no value, the value for one, a tuple for more;
 * Lua returns them all.
 * Failures: hb_fail (an engine code and detail: Python raises
 * hilock._errors.from_code's exception, Lua returns nil, "<prefix>: detail";
 * with HB_LUA_RAW Lua returns nil, detail) and hb_bad (a bad argument:
 * Python ValueError, Lua raises an argument error).
 *
 * Only the binding's translation unit includes this file (static functions).
 */
#ifndef HILOCK_ENGINE_FNS_H
#define HILOCK_ENGINE_FNS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "hilock.h"
#include "proto.h"

#define HB_MAXARGS 8

typedef struct hb_arg {
    int64_t i;
    const char *s; /* 's', 'z' (NULL: None/nil or not given) */
    size_t len;
    const redisReply *r;
    const hl_names *n; /* 'N' */
    hilock_kind kind;  /* 'N' */
    hl_holds *t;       /* 'H' */
    hl_sublive *sl;    /* 'L' */
    hl_unsettled *un;  /* 'U' */
    const hl_settle *st; /* 'X' */
    const hl_sem_names *m; /* 'M' */
    int skind;             /* 'M': its hl_sem_kind */
    hl_hold *h;        /* 'K': the key's hold, NULL when the table has none */
    void *p;           /* 'O': the object's state */
    int set; /* given (optional arguments) */
} hb_arg;

enum { HB_NIL, HB_INT, HB_BOOL, HB_STR, HB_CMD, HB_WORD, HB_LIST, HB_TUPLE, HB_HOLD, HB_ERR,
       HB_DICT };

typedef struct hb_val {
    unsigned char t;
    int64_t i;     /* INT, BOOL, WORD; CMD: index in cmd[]; LIST/TUPLE: items */
    const char *s; /* STR: stable for the call; NULL: at i in the arena */
    size_t len;    /* STR; CMD: send it as EVAL (the script's body) */
    hl_hold *h;    /* HOLD: the binding gives its key */
    hl_cmd *c;     /* CMD: a machine's command (NULL: cmd[i]) */
    unsigned char only; /* 0, or the one language that gets it: HB_PY, HB_LUA */
} hb_val;

enum { HB_PY = 1, HB_LUA = 2 };

typedef struct hb_out {
    int n, cap;
    hb_val *v; /* inl, or malloc'd when more values came */
    hb_val inl[8];
    int ncmd;
    hl_cmd cmd[HL_HANDSHAKE_MAX];
    int err;         /* hb_fail: a HILOCK_E* code */
    const char *msg; /* its detail (stable), or NULL */
    int bad;         /* hb_bad: the 1-based argument, or -1 for a message only */
    char why[HL_URL_ERR_MAX];
    char *arena; /* copied strings (hb_strcpy) */
    size_t alen, acap;
    int oom;
    void *self; /* an HB_NEW row: the new object's state, zeroed, to fill */
} hb_out;

static void hb_init(hb_out *o)
{
    memset(o, 0, offsetof(hb_out, cmd));
    o->v = o->inl;
    o->cap = 8;
    o->err = 0;
    o->msg = NULL;
    o->bad = 0;
    o->arena = NULL;
    o->alen = o->acap = 0;
    o->oom = 0;
    o->self = NULL;
}

static void hb_free(hb_out *o)
{
    if (o->v != o->inl)
        free(o->v);
    free(o->arena);
}

static hb_val *hb_push(hb_out *o, int t)
{
    if (o->n == o->cap) {
        int cap = o->cap * 4;
        hb_val *v = o->v == o->inl ? malloc(sizeof *v * (size_t)cap)
                                   : realloc(o->v, sizeof *v * (size_t)cap);
        if (!v) {
            o->oom = 1;
            return NULL;
        }
        if (o->v == o->inl)
            memcpy(v, o->inl, sizeof o->inl);
        o->v = v;
        o->cap = cap;
    }
    hb_val *x = &o->v[o->n++];
    memset(x, 0, sizeof *x);
    x->t = (unsigned char)t;
    return x;
}

static int hb_int(hb_out *o, int64_t i)
{
    hb_val *x = hb_push(o, HB_INT);
    if (x)
        x->i = i;
    return 0;
}

static int hb_bool(hb_out *o, int b)
{
    hb_val *x = hb_push(o, HB_BOOL);
    if (x)
        x->i = b != 0;
    return 0;
}

static int hb_nil(hb_out *o)
{
    hb_push(o, HB_NIL);
    return 0;
}

static int hb_word(hb_out *o, int w)
{
    hb_val *x = hb_push(o, HB_WORD);
    if (x)
        x->i = w;
    return 0;
}

/* a string that outlives the call's conversion (static, the arguments', a reply's) */
static int hb_strn(hb_out *o, const char *s, size_t len)
{
    hb_val *x = hb_push(o, HB_STR);
    if (x) {
        x->s = s;
        x->len = len;
    }
    return 0;
}

static int hb_str(hb_out *o, const char *s) { return hb_strn(o, s, strlen(s)); }

/* a string copied into the result (a local buffer's) */
static int hb_strcpy(hb_out *o, const char *s, size_t len)
{
    if (o->alen + len > o->acap) {
        size_t cap = (o->acap ? o->acap * 2 : 1024) + len;
        char *a = realloc(o->arena, cap);
        if (!a) {
            o->oom = 1;
            return 0;
        }
        o->arena = a;
        o->acap = cap;
    }
    hb_val *x = hb_push(o, HB_STR);
    if (x) {
        memcpy(o->arena + o->alen, s, len);
        x->i = (int64_t)o->alen;
        x->len = len;
        o->alen += len;
    }
    return 0;
}

/* the next value language lang gets, from *pos (the other's skipped) */
static const hb_val *hb_next(const hb_out *o, int *pos, int lang)
{
    while (*pos < o->n - 1 && o->v[*pos].only && o->v[*pos].only != lang)
        (*pos)++;
    return &o->v[(*pos)++];
}

/* the string of value x (a binding converts right after the call) */
static const char *hb_sval(const hb_out *o, const hb_val *x)
{
    return x->s ? x->s : o->arena + x->i;
}

/* a command to build in place: its bytes are the value (eval: with the
 * script's body, for a server that forgot the script) */
static hl_cmd *hb_cmd(hb_out *o, int64_t eval)
{
    hb_val *x = hb_push(o, HB_CMD);
    if (x) {
        x->i = o->ncmd;
        x->len = eval != 0;
    }
    return &o->cmd[o->ncmd++];
}

/* machine-owned command c as the value (eval: switched to EVAL first) */
static int hb_cmdof(hb_out *o, hl_cmd *c, int eval)
{
    hb_val *x = hb_push(o, HB_CMD);
    if (x) {
        x->c = c;
        x->len = eval != 0;
    }
    return 0;
}

/* a failure code as a value (Python: the code; Lua: its message prefix) */
static int hb_err(hb_out *o, int code)
{
    hb_val *x = hb_push(o, HB_ERR);
    if (x)
        x->i = code;
    return 0;
}

/* the value just given goes to one language only (HB_PY, HB_LUA) */
static int hb_only(hb_out *o, int lang)
{
    if (o->n && !o->oom)
        o->v[o->n - 1].only = (unsigned char)lang;
    return 0;
}

/* a list of the next n values (Python list / tuple; Lua array table) */
static int hb_list(hb_out *o, int t, int64_t n)
{
    hb_val *x = hb_push(o, t);
    if (x)
        x->i = n;
    return 0;
}

/* Python: a tuple of the next n values whatever their number */
static int hb_pytuple(hb_out *o, int64_t n)
{
    hb_list(o, HB_TUPLE, n);
    return hb_only(o, HB_PY);
}

static int hb_fail(hb_out *o, int code, const char *detail)
{
    o->err = code;
    o->msg = detail;
    return -1;
}

/* a failed decode: the code, and the server's error text when it sent one */
static int hb_decode_fail(hb_out *o, const redisReply *r, int rc)
{
    return hb_fail(o, rc, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int hb_bad(hb_out *o, int arg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->why, sizeof o->why, fmt, ap);
    va_end(ap);
    o->bad = arg;
    return -1;
}

/* argument k (0-based) within [lo, hi] */
#define HB_RANGE(o, a, k, lo, hi, what)                                                      \
    do {                                                                                     \
        if ((a)[k].i < (int64_t)(lo) || (a)[k].i > (int64_t)(hi))                            \
            return hb_bad(o, (k) + 1, "%s out of range: %lld", what, (long long)(a)[k].i);    \
    } while (0)

/* a string argument k of 1..max bytes */
#define HB_STRLEN(o, a, k, max, what)                                                        \
    do {                                                                                     \
        if ((a)[k].len == 0 || (a)[k].len > (size_t)(max))                                   \
            return hb_bad(o, (k) + 1, "%s must be 1..%zu bytes", what, (size_t)(max));        \
    } while (0)

static int64_t hb_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ */
/* the functions                                                       */
/* ------------------------------------------------------------------ */

static const char *const hb_renew_words[] = {"renewed", "lost", "send_body", "redirect",
                                             "trouble", NULL};
static const char *const hb_ps_words[] = {"other", "message", "subscribe", "unsubscribe",
                                          "unheard", NULL};

static int f_now_ms(const hb_arg *a, hb_out *o)
{
    (void)a;
    return hb_int(o, hb_mono_ms());
}

/* hold_owner(kind, client_id, thread_id) -> the owner (hash field) */
static int f_hold_owner(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 0, HILOCK_KIND_REENTRANT, HILOCK_KIND_FENCED, "lock kind");
    HB_STRLEN(o, a, 1, 40, "client id");
    char buf[HL_OWNER_MAX];
    hl_hold_owner(buf, (hilock_kind)a[0].i, a[1].s, (uint64_t)a[2].i);
    return hb_strcpy(o, buf, strlen(buf));
}

/* owner(client_id, thread_id) -> "<client_id>:<thread_id>" */
static int f_owner(const hb_arg *a, hb_out *o)
{
    HB_STRLEN(o, a, 0, 40, "client id");
    char buf[HL_OWNER_MAX];
    hl_owner(buf, a[0].s, (uint64_t)a[1].i);
    return hb_strcpy(o, buf, strlen(buf));
}

/* parse_url(url) -> the engine's URL parser (docs/urls.md): mode
 * ("single", "unix", "sentinel", "cluster"), tls, host, port, path, user,
 * password, db, seeds (Python [(host, port)], Lua {{host=, port=}}),
 * master_name, sentinel_user, sentinel_password, connect_timeout_ms,
 * command_timeout_ms, tls_ca_file, tls_ca_dir, tls_cert_file, tls_key_file,
 * tls_server_name, tls_insecure; absent settings are missing */
static int f_parse_url(const hb_arg *a, hb_out *o)
{
    if (strlen(a[0].s) != a[0].len)
        return hb_fail(o, HILOCK_EINVAL, "URL contains a NUL byte");
    hl_endpoint ep;
    int rc = hl_endpoint_parse(&ep, a[0].s, o->why); /* why: HL_URL_ERR_MAX or more */
    if (rc)
        return hb_fail(o, rc, o->why);
    const char *mode = ep.cluster ? "cluster" : ep.nseeds ? "sentinel" : ep.path ? "unix"
                                                                               : "single";
    const struct { const char *k, *v; } strs[] = {
        {"mode", mode}, {"host", ep.host}, {"path", ep.path}, {"user", ep.user},
        {"password", ep.password}, {"master_name", ep.master_name},
        {"sentinel_user", ep.sentinel_user}, {"sentinel_password", ep.sentinel_password},
        {"tls_ca_file", ep.tls_ca_file}, {"tls_ca_dir", ep.tls_ca_dir},
        {"tls_cert_file", ep.tls_cert_file}, {"tls_key_file", ep.tls_key_file},
        {"tls_server_name", ep.tls_server_name}};
    const struct { const char *k; int64_t v; int on; } ints[] = {
        {"port", ep.port, ep.host != NULL}, {"db", ep.db, 1},
        {"connect_timeout_ms", ep.connect_timeout_ms, ep.connect_timeout_ms > 0},
        {"command_timeout_ms", ep.command_timeout_ms, ep.command_timeout_ms > 0}};
    int n = 2 + (ep.nseeds > 0);
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        n += strs[i].v != NULL;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        n += ints[i].on;
    hb_list(o, HB_DICT, n);
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (strs[i].v)
            hb_str(o, strs[i].k), hb_strcpy(o, strs[i].v, strlen(strs[i].v));
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].on)
            hb_str(o, ints[i].k), hb_int(o, ints[i].v);
    hb_str(o, "tls"), hb_bool(o, ep.tls);
    hb_str(o, "tls_insecure"), hb_bool(o, ep.tls_insecure);
    if (ep.nseeds) {
        hb_str(o, "seeds"), hb_list(o, HB_LIST, ep.nseeds);
        for (int i = 0; i < ep.nseeds; i++) {
            hb_pytuple(o, 2), hb_list(o, HB_DICT, 2), hb_only(o, HB_LUA);
            hb_str(o, "host"), hb_only(o, HB_LUA);
            hb_strcpy(o, ep.seed_hosts[i], strlen(ep.seed_hosts[i]));
            hb_str(o, "port"), hb_only(o, HB_LUA);
            hb_int(o, ep.seed_ports[i]);
        }
    }
    hl_endpoint_free(&ep);
    return 0;
}

static int f_check_name(const hb_arg *a, hb_out *o)
{
    if (hl_name_check(a[0].s, a[0].len, o->why, sizeof o->why))
        return hb_fail(o, HILOCK_EINVAL, o->why);
    return hb_bool(o, 1);
}

static int f_no_reply_msg(const hb_arg *a, hb_out *o)
{
    char buf[512];
    hl_msg_no_reply(buf, sizeof buf, a[0].i, a[1].s);
    return hb_strcpy(o, buf, strlen(buf));
}

/* master_addr_msg(where, master_name, reply) -> why that reply to SENTINEL
 * get-master-addr-by-name named no master (hl_msg_master_addr) */
static int f_master_addr_msg(const hb_arg *a, hb_out *o)
{
    char buf[512];
    hl_msg_master_addr(buf, sizeof buf, a[0].s, a[1].s, a[2].r);
    return hb_strcpy(o, buf, strlen(buf));
}

static int f_redact_url(const hb_arg *a, hb_out *o)
{
    char stack[512];
    size_t n = hilock_url_redact(stack, sizeof stack, a[0].s);
    if (n < sizeof stack)
        return hb_strcpy(o, stack, n);
    char *buf = malloc(n + 1);
    if (!buf)
        return hb_fail(o, HILOCK_ENOMEM, NULL);
    hilock_url_redact(buf, n + 1, a[0].s);
    hb_strcpy(o, buf, n);
    free(buf);
    return 0;
}

/* ---- commands ---- */

static int f_subscribe_cmd(const hb_arg *a, hb_out *o)
{
    HB_STRLEN(o, a, 0, 8192, "channel");
    hl_cmd_subscribe(hb_cmd(o, 0), a[0].s, (int)a[1].i, (int)a[2].i);
    return 0;
}

static int f_unsubscribe_cmd(const hb_arg *a, hb_out *o)
{
    HB_STRLEN(o, a, 0, 8192, "channel");
    hl_cmd_subscribe(hb_cmd(o, 0), a[0].s, (int)a[1].i, 1);
    return 0;
}

static int f_ping_cmd(const hb_arg *a, hb_out *o)
{
    (void)a;
    hl_cmd_ping(hb_cmd(o, 0));
    return 0;
}

static int f_role_cmd(const hb_arg *a, hb_out *o)
{
    (void)a;
    hl_cmd_role(hb_cmd(o, 0));
    return 0;
}

static int f_cluster_slots_cmd(const hb_arg *a, hb_out *o)
{
    (void)a;
    hl_cmd_cluster_slots(hb_cmd(o, 0));
    return 0;
}

static int f_asking_cmd(const hb_arg *a, hb_out *o)
{
    (void)a;
    hl_cmd_asking(hb_cmd(o, 0));
    return 0;
}

static int f_sentinel_master_cmd(const hb_arg *a, hb_out *o)
{
    HB_STRLEN(o, a, 0, 1024, "master name");
    hl_cmd_sentinel_master(hb_cmd(o, 0), a[0].s);
    return 0;
}

static int f_sentinel_watch_cmd(const hb_arg *a, hb_out *o)
{
    (void)a;
    hl_cmd_sentinel_watch(hb_cmd(o, 0));
    return 0;
}

/* handshake_cmds(user, password, db) -> [bytes, ...] (maybe none) */
static int f_handshake_cmds(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 2, 0, INT32_MAX, "database number");
    int n = hl_cmd_handshake(o->cmd, a[0].s, a[1].s, (int)a[2].i);
    hb_list(o, HB_LIST, n);
    for (int i = 0; i < n; i++) {
        hb_val *x = hb_push(o, HB_CMD);
        if (x)
            x->i = i;
    }
    o->ncmd = n;
    return 0;
}

/* ---- replies ---- */

/* handshake_reply(reply) -> 0 | HILOCK_EAUTH | HILOCK_EPROTO */
static int f_handshake_code(const hb_arg *a, hb_out *o)
{
    return hb_int(o, hl_decode_handshake(a[0].r));
}

/* handshake_reply(r) -> true | nil, why (the error text, or "unexpected reply") */
static int f_handshake_ok(const hb_arg *a, hb_out *o)
{
    const redisReply *r = a[0].r;
    if (!hl_decode_handshake(r))
        return hb_bool(o, 1);
    hb_nil(o);
    if (r->type == REDIS_REPLY_ERROR)
        return hb_strn(o, r->str, r->len);
    return hb_str(o, "unexpected reply");
}

/* decode_ping(reply) -> 0 | HILOCK_EAUTH (an error reply: NOAUTH, NOPERM)
 * | HILOCK_EPROTO (not a PONG) */
static int f_decode_ping(const hb_arg *a, hb_out *o)
{
    const redisReply *r = a[0].r;
    if (r->type == REDIS_REPLY_ERROR)
        return hb_int(o, HILOCK_EAUTH);
    if (r->type == REDIS_REPLY_STATUS && r->len == 4 && memcmp(r->str, "PONG", 4) == 0)
        return hb_int(o, 0);
    return hb_int(o, HILOCK_EPROTO);
}

static int f_decode_master_addr(const hb_arg *a, hb_out *o)
{
    char host[256];
    int port;
    if (hl_decode_master_addr(a[0].r, host, sizeof host, &port) != 0)
        return hb_fail(o, HILOCK_EPROTO, "the sentinel names no such master");
    hb_strcpy(o, host, strlen(host));
    return hb_int(o, port);
}

/* decode_switch_master(r, master_name) -> host, port | nil */
static int f_decode_switch_master(const hb_arg *a, hb_out *o)
{
    char host[256];
    int port;
    if (!hl_decode_switch_master(a[0].r, a[1].s, host, sizeof host, &port))
        return hb_nil(o);
    hb_strcpy(o, host, strlen(host));
    return hb_int(o, port);
}

static int f_decode_role(const hb_arg *a, hb_out *o)
{
    int master = 0;
    int n = hl_decode_role_replicas(a[0].r, &master);
    hb_bool(o, master);
    return hb_int(o, n);
}

static int f_not_master(const hb_arg *a, hb_out *o)
{
    return hb_bool(o, hl_reply_not_master(a[0].r));
}

/* decode_slots(reply) -> [(first, last, host, port), ...]: the slot map's
 * masters (malformed entries skipped; an empty host is the node asked,
 * 127.0.0.1, as the C transport says) */
static int f_decode_slots(const hb_arg *a, hb_out *o)
{
    const redisReply *r = a[0].r;
    if (r->type != REDIS_REPLY_ARRAY)
        return hb_fail(o, HILOCK_EPROTO, r->type == REDIS_REPLY_ERROR && r->str
                                             ? r->str : "slot map: not an array");
    int head = o->n, n = 0;
    hb_list(o, HB_LIST, 0);
    for (size_t i = 0; i < r->elements && !o->oom; i++) {
        hl_slot_range g;
        if (hl_decode_slot_range(r->element[i], &g) != 0)
            continue;
        hb_list(o, HB_TUPLE, 4);
        hb_int(o, g.lo);
        hb_int(o, g.hi);
        hb_strcpy(o, g.host, strlen(g.host));
        hb_int(o, g.port);
        n++;
    }
    if (!o->oom)
        o->v[head].i = n;
    return 0;
}

static int f_decode_pubsub(const hb_arg *a, hb_out *o)
{
    hl_ps_event ev;
    hl_decode_pubsub(a[0].r, &ev);
    hb_word(o, (int)ev.type);
    if (ev.channel)
        hb_strn(o, ev.channel, ev.channel_len);
    else
        hb_nil(o);
    return hb_int(o, ev.payload);
}

/* lock_wakes(reply) -> -1 all, 0 none, 1: how many waiters a frame on a
 * lock's channel wakes (hl_ps_wakes, HL_WAKE_LOCK) */
static int f_lock_wakes(const hb_arg *a, hb_out *o)
{
    hl_ps_event ev;
    hl_decode_pubsub(a[0].r, &ev);
    return hb_int(o, hl_ps_wakes(HL_WAKE_LOCK, &ev));
}

static int f_hold_check_on(const hb_arg *a, hb_out *o)
{
    hl_ps_event ev;
    hl_decode_pubsub(a[0].r, &ev);
    return hb_bool(o, hl_hold_check_on(&ev));
}

/* hold_gone(reply) -> true (lost), false (still there), nil (unknown) */
static int f_hold_gone(const hb_arg *a, hb_out *o)
{
    int gone;
    if (hl_hold_check_gone(a[0].r, &gone) != 0)
        return hb_nil(o);
    return hb_bool(o, gone);
}

/* the decoders of query replies: the validated number */
#define HB_DECODER(fname, dec)                                                              \
    static int fname(const hb_arg *a, hb_out *o)                                             \
    {                                                                                        \
        int64_t v;                                                                           \
        int rc = dec(a[0].r, &v);                                                            \
        return rc ? hb_decode_fail(o, a[0].r, rc) : hb_int(o, v);                            \
    }
HB_DECODER(f_decode_flag, hl_decode_flag)
HB_DECODER(f_decode_int, hl_decode_int)
HB_DECODER(f_decode_holds, hl_decode_hold_count)
HB_DECODER(f_decode_pttl, hl_decode_pttl)
HB_DECODER(f_decode_token, hl_decode_token)
HB_DECODER(f_decode_extend, hl_decode_extend)

/* decode_extend for a driver that resends: "send_body" when the server
 * forgot the script (send extend_cmd(..., true)), else decode_extend's */
static int f_decode_extend_resend(const hb_arg *a, hb_out *o)
{
    if (hl_reply_is_noscript(a[0].r))
        return hb_str(o, "send_body");
    return f_decode_extend(a, o);
}

/* decode_acquire(r) -> acquired, hold_count_or_ttl_ms */
static int f_decode_acquire(const hb_arg *a, hb_out *o)
{
    hl_acquire_result res;
    int rc = hl_decode_acquire(a[0].r, &res);
    if (rc)
        return hb_decode_fail(o, a[0].r, rc);
    hb_bool(o, res.acquired);
    return hb_int(o, res.acquired ? res.hold_count : res.ttl_ms);
}

/* decode_release(r) -> remaining holds | not owner */
static int f_decode_release(const hb_arg *a, hb_out *o)
{
    hl_release_result res;
    int rc = hl_decode_release(a[0].r, &res);
    if (rc)
        return hb_decode_fail(o, a[0].r, rc);
    if (res.not_owner)
        return hb_fail(o, HILOCK_ENOTOWNER, NULL);
    return hb_int(o, res.remaining);
}

/* ---- watchdog and timing rules ---- */

static int f_renew_outcome(const hb_arg *a, hb_out *o)
{
    return hb_word(o, (int)hl_renew_classify(a[0].r));
}

static int f_renew_unacked(const hb_arg *a, hb_out *o)
{
    return hb_word(o, (int)hl_renew_unacked((hl_renew_outcome)a[0].i, (int)a[1].i));
}

/* renew_outcomes(r, n) -> [outcome, ...], per_hold */
static int f_renew_outcomes(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 1, 1, HL_RENEW_MANY_MAX, "n");
    hl_renew_outcome out[HL_RENEW_MANY_MAX];
    int per_hold = hl_renew_classify_many(a[0].r, (int)a[1].i, out);
    hb_list(o, HB_LIST, a[1].i);
    for (int i = 0; i < (int)a[1].i; i++)
        hb_word(o, (int)out[i]);
    return hb_bool(o, per_hold);
}

static int f_renew_period(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 0, 1, HILOCK_MAX_TIME_MS, "watchdog_lease_ms");
    return hb_int(o, hl_renew_period(a[0].i));
}

static int f_renew_doubt_after(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 0, 1, HILOCK_MAX_TIME_MS, "watchdog_lease_ms");
    return hb_int(o, hl_renew_doubt_after(a[0].i));
}

static int doubt_args(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 0, 0, INT64_MAX / 4, "confirmed_at");
    HB_RANGE(o, a, 1, 1, HILOCK_MAX_TIME_MS, "watchdog_lease_ms");
    HB_RANGE(o, a, 2, -1, INT64_MAX / 4, "renew_sent_at");
    HB_RANGE(o, a, 3, 1, HILOCK_MAX_TIME_MS, "command_timeout_ms");
    return 0;
}

static int f_renew_doubt_at(const hb_arg *a, hb_out *o)
{
    if (doubt_args(a, o))
        return -1;
    return hb_int(o, hl_renew_doubt_at(a[0].i, a[1].i, a[2].i, a[3].i));
}

static int f_renew_in_doubt(const hb_arg *a, hb_out *o)
{
    if (doubt_args(a, o))
        return -1;
    HB_RANGE(o, a, 4, 0, INT64_MAX / 4, "now");
    return hb_bool(o, hl_renew_in_doubt(a[0].i, a[1].i, a[2].i, a[3].i, a[4].i));
}

static int f_latch_ttl(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 0, 1, HILOCK_MAX_TIME_MS, "command_timeout_ms");
    return hb_int(o, hl_latch_ttl(a[0].i));
}

static int f_acquire_latch_ttl(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 0, 1, HILOCK_MAX_TIME_MS, "command_timeout_ms");
    HB_RANGE(o, a, 1, 1, HILOCK_MAX_TIME_MS, "connect_timeout_ms");
    return hb_int(o, hl_acquire_latch_ttl(a[0].i, a[1].i));
}

/* ack_retry(wait_ms, deadline_ms (-1 none)) -> pause_ms | nil (give up) */
static int f_ack_retry(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 0, -1, HILOCK_MAX_TIME_MS, "wait_ms");
    HB_RANGE(o, a, 1, -1, INT64_MAX / 2, "deadline_ms");
    int64_t pause;
    if (!hl_ack_retry(a[0].i, a[1].i, hb_mono_ms(), &pause))
        return hb_nil(o);
    return hb_int(o, pause);
}

/* release_request_id(client_id, pid, latch_epoch, seq) -> str: a release's
 * request id opting in to the owner's unlock latch of one epoch: the
 * process id times 2^20 plus the client's count of lost replies (mod 2^20),
 * so a forked child never shares a latch with its parent's releases */
static int hb_release_rid(char *buf, size_t len, const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 1, 0, INT32_MAX, "pid");
    HB_RANGE(o, a, 2, 0, INT64_MAX, "latch_epoch");
    HB_RANGE(o, a, 3, 0, INT64_MAX, "seq");
    uint64_t epoch = (uint64_t)a[1].i * 1048576u + (uint64_t)a[2].i % 1048576u;
    if (hl_release_request_id(buf, len, a[0].s, epoch, (uint64_t)a[3].i) != 0)
        return hb_bad(o, 1, "client id too long for a request id");
    return 0;
}

static int f_release_request_id(const hb_arg *a, hb_out *o)
{
    char buf[128];
    if (hb_release_rid(buf, sizeof buf, a, o))
        return -1;
    return hb_strcpy(o, buf, strlen(buf));
}

static int f_settle_gate(const hb_arg *a, hb_out *o)
{
    return hb_int(o, hl_settle_gate((int)a[0].i, (int)a[1].i, a[2].i));
}

/* ---- multi-lock and Redlock rules (proto_multilock.c) ---- */

#define HB_COUNT(o, a, k) HB_RANGE(o, a, k, 0, INT64_MAX, "count")

static int f_ml_quorum(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 1, 1, INT64_MAX, "n");
    return hb_int(o, (int64_t)hl_ml_quorum((int)a[0].i, (size_t)a[1].i));
}

static int f_ml_validity(const hb_arg *a, hb_out *o)
{
    return hb_int(o, hl_ml_validity(a[0].i, a[1].i, a[2].i));
}

static int f_ml_success(const hb_arg *a, hb_out *o)
{
    HB_COUNT(o, a, 1);
    HB_COUNT(o, a, 2);
    return hb_bool(o, hl_ml_success((int)a[0].i, (size_t)a[1].i, (size_t)a[2].i, (int)a[3].i,
                                    a[4].i));
}

static int f_ml_take_back(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 2, INT32_MIN, INT32_MAX, "rc");
    return hb_bool(o, hl_ml_take_back((int)a[0].i, (int)a[1].i, (int)a[2].i));
}

static int f_ml_line_window(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 0, HILOCK_KIND_REENTRANT, HILOCK_KIND_FENCED, "lock kind");
    return hb_int(o, hl_ml_line_window((hilock_kind)a[0].i, a[1].i, a[2].i));
}

static int f_ml_in_line(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 1, INT32_MIN, INT32_MAX, "rc");
    return hb_bool(o, hl_ml_in_line(a[0].i, (int)a[1].i));
}

static int f_ml_backoff(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 0, 0, UINT32_MAX, "attempt");
    return hb_int(o, hl_ml_backoff((unsigned)a[0].i, (uint64_t)a[1].i));
}

static int f_ml_hold_lost(const hb_arg *a, hb_out *o)
{
    HB_COUNT(o, a, 1);
    HB_COUNT(o, a, 2);
    HB_COUNT(o, a, 3);
    return hb_bool(o, hl_ml_hold_lost((int)a[0].i, (size_t)a[1].i, (size_t)a[2].i,
                                      (size_t)a[3].i));
}


/* ------------------------------------------------------------------ */
/* methods of one lock's names (Python Names, Lua proto.lock)          */
/* ------------------------------------------------------------------ */

#define HB_OWNER(o, a, k) HB_STRLEN(o, a, k, HL_OWNER_MAX - 1, "owner")
#define HB_MS(o, a, k, lo, what) HB_RANGE(o, a, k, lo, HILOCK_MAX_TIME_MS, what)

static const char *const hb_kind_words[] = {
    [0] = "", [HILOCK_KIND_REENTRANT] = "reentrant", [HILOCK_KIND_FAIR] = "fair",
    [HILOCK_KIND_READ] = "read", [HILOCK_KIND_WRITE] = "write",
    [HILOCK_KIND_FENCED] = "fenced", NULL};

enum { Q_LOCKED = 0, Q_HELD, Q_HOLDS, Q_TTL, Q_TOKEN };

static int f_l_name(const hb_arg *a, hb_out *o) { return hb_str(o, a[0].n->name); }
static int f_l_channel(const hb_arg *a, hb_out *o) { return hb_str(o, a[0].n->channel); }
static int f_l_kind(const hb_arg *a, hb_out *o) { return hb_word(o, (int)a[0].kind); }

static int f_l_hold_channel(const hb_arg *a, hb_out *o)
{
    return hb_str(o, hl_hold_channel(a[0].kind, a[0].n));
}

static int f_l_slot(const hb_arg *a, hb_out *o)
{
    return hb_int(o, hl_key_slot(a[0].n->name, strlen(a[0].n->name)));
}

/* hold_owner(client_id, thread_id): "<client_id>:<thread_id>", ":write" after it on a write side */
static int f_l_hold_owner(const hb_arg *a, hb_out *o)
{
    HB_STRLEN(o, a, 1, 40, "client id");
    char buf[HL_OWNER_MAX];
    hl_hold_owner(buf, a[0].kind, a[1].s, (uint64_t)a[2].i);
    return hb_strcpy(o, buf, strlen(buf));
}

static int f_l_wait_channel(const hb_arg *a, hb_out *o)
{
    HB_OWNER(o, a, 1);
    char *ch = hl_wait_channel(a[0].kind, a[0].n, a[1].s);
    if (!ch)
        return hb_fail(o, HILOCK_ENOMEM, NULL);
    hb_strcpy(o, ch, strlen(ch));
    free(ch);
    return 0;
}

/* latch_key(request_id) -> the key of that request's unlock latch */
static int f_l_latch_key(const hb_arg *a, hb_out *o)
{
    size_t n = strlen(a[0].n->latch_prefix);
    char *k = malloc(n + 1 + a[1].len + 1);
    if (!k)
        return hb_fail(o, HILOCK_ENOMEM, NULL);
    sprintf(k, "%s:%s", a[0].n->latch_prefix, a[1].s);
    hb_strcpy(o, k, n + 1 + a[1].len);
    free(k);
    return 0;
}

static int f_l_acquire_cmd(const hb_arg *a, hb_out *o)
{
    HB_OWNER(o, a, 1);
    HB_MS(o, a, 2, 1, "lease_ms");
    HB_MS(o, a, 3, -1, "window_ms");
    hl_cmd_acquire(hb_cmd(o, a[4].i), a[0].kind, a[0].n, a[1].s, a[2].i, a[3].i);
    return 0;
}

static int f_l_release_cmd(const hb_arg *a, hb_out *o)
{
    HB_OWNER(o, a, 1);
    HB_MS(o, a, 2, 1, "lease_ms");
    HB_MS(o, a, 4, 1, "latch_ttl_ms");
    hl_cmd_release(hb_cmd(o, a[5].i), a[0].kind, a[0].n, a[1].s, a[2].i, a[3].s, a[4].i);
    return 0;
}

static int f_l_renew_cmd(const hb_arg *a, hb_out *o)
{
    HB_OWNER(o, a, 1);
    HB_MS(o, a, 2, 1, "lease_ms");
    hl_cmd_renew_kind(hb_cmd(o, a[3].i), a[0].kind, a[0].n, a[1].s, a[2].i);
    return 0;
}

static int f_l_extend_cmd(const hb_arg *a, hb_out *o)
{
    HB_OWNER(o, a, 1);
    HB_MS(o, a, 2, 1, "add_ms");
    hl_cmd_extend(hb_cmd(o, a[3].i), a[0].n, a[1].s, a[2].i);
    return 0;
}

static int f_l_cancel_cmd(const hb_arg *a, hb_out *o)
{
    HB_OWNER(o, a, 1);
    HB_MS(o, a, 2, 0, "window_ms");
    hl_cmd_fair_cancel(hb_cmd(o, a[3].i), a[0].n, a[1].s, a[2].i);
    return 0;
}

static int f_l_force_cmd(const hb_arg *a, hb_out *o)
{
    hl_cmd_force(hb_cmd(o, a[1].i), a[0].kind, a[0].n);
    return 0;
}

/* query_cmd(what, owner=None): Q_LOCKED (decode_locked), Q_HELD
 * (decode_flag), Q_HOLDS (decode_holds), Q_TTL (decode_pttl), Q_TOKEN (decode_token) */
static int f_l_query_cmd(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 1, Q_LOCKED, Q_TOKEN, "query");
    if (a[1].i == Q_HELD || a[1].i == Q_HOLDS) {
        if (!a[2].s)
            return hb_bad(o, 3, "this query needs an owner");
        HB_OWNER(o, a, 2);
    }
    hl_cmd *c = hb_cmd(o, 0);
    switch (a[1].i) {
    case Q_LOCKED: hl_cmd_is_locked(c, a[0].kind, a[0].n); break;
    case Q_HELD: hl_cmd_hexists(c, a[0].n, a[2].s); break;
    case Q_HOLDS: hl_cmd_hget(c, a[0].n, a[2].s); break;
    case Q_TTL: hl_cmd_pttl(c, a[0].n); break;
    default: hl_cmd_token(c, a[0].n); break;
    }
    return 0;
}

static int f_l_locked_cmd(const hb_arg *a, hb_out *o)
{
    hl_cmd_is_locked(hb_cmd(o, 0), a[0].kind, a[0].n);
    return 0;
}

#define HB_NAMES_CMD(fname, build)                                                          \
    static int fname(const hb_arg *a, hb_out *o)                                             \
    {                                                                                        \
        build(hb_cmd(o, 0), a[0].n);                                                         \
        return 0;                                                                            \
    }
HB_NAMES_CMD(f_l_exists_cmd, hl_cmd_exists)
HB_NAMES_CMD(f_l_token_cmd, hl_cmd_token)
HB_NAMES_CMD(f_l_pttl_cmd, hl_cmd_pttl)

#define HB_OWNER_CMD(fname, build)                                                          \
    static int fname(const hb_arg *a, hb_out *o)                                             \
    {                                                                                        \
        HB_OWNER(o, a, 1);                                                                   \
        build(hb_cmd(o, 0), a[0].n, a[1].s);                                                 \
        return 0;                                                                            \
    }
HB_OWNER_CMD(f_l_hexists_cmd, hl_cmd_hexists)
HB_OWNER_CMD(f_l_hget_cmd, hl_cmd_hget)
HB_OWNER_CMD(f_l_hold_check_cmd, hl_cmd_hold_check)

static int f_l_decode_locked(const hb_arg *a, hb_out *o)
{
    int64_t v;
    int rc = hl_decode_is_locked(a[0].kind, a[1].r, &v);
    return rc ? hb_decode_fail(o, a[1].r, rc) : hb_bool(o, v != 0);
}

/* X(function, Python name, Lua name, arguments, words, doc) */
#define HB_LOCK_FNS(X)                                                                      \
    X(f_l_name, NULL, "name", "N", NULL, "")                                                 \
    X(f_l_channel, NULL, "channel", "N", NULL, "")                                           \
    X(f_l_kind, NULL, "kind", "N", hb_kind_words, "")                                        \
    X(f_l_hold_channel, NULL, "hold_channel", "N", NULL, "")                                 \
    X(f_l_slot, NULL, "slot", "N", NULL, "")                                                 \
    X(f_l_hold_owner, NULL, "hold_owner", "Nsu", NULL, "")                                   \
    X(f_l_wait_channel, "wait_channel", "wait_channel", "Ns", NULL,                          \
      "wait_channel(owner) -> str")                                                          \
    X(f_l_latch_key, NULL, "latch_key", "Ns", NULL, "")                                      \
    X(f_l_acquire_cmd, NULL, "acquire_cmd", "Nsii|b", NULL, "")                              \
    X(f_l_release_cmd, NULL, "release_cmd", "Nsisi|b", NULL, "")                             \
    X(f_l_renew_cmd, "renew_cmd", "renew_cmd", "Nsi|b", NULL,                                \
      "renew_cmd(owner, lease_ms, eval=False)")                                              \
    X(f_l_extend_cmd, NULL, "extend_cmd", "Nsi|b", NULL, "")                                 \
    X(f_l_cancel_cmd, NULL, "cancel_cmd", "Nsi|b", NULL, "")                                 \
    X(f_l_force_cmd, NULL, "force_cmd", "N|b", NULL, "")                                     \
    X(f_l_query_cmd, "query_cmd", NULL, "Ni|z", NULL, "query_cmd(what, owner=None) -> bytes") \
    X(f_l_locked_cmd, NULL, "locked_cmd", "N", NULL, "")                                     \
    X(f_l_exists_cmd, NULL, "exists_cmd", "N", NULL, "")                                     \
    X(f_l_token_cmd, NULL, "token_cmd", "N", NULL, "")                                       \
    X(f_l_pttl_cmd, NULL, "pttl_cmd", "N", NULL, "")                                         \
    X(f_l_hexists_cmd, NULL, "hexists_cmd", "Ns", NULL, "")                                  \
    X(f_l_hget_cmd, NULL, "hget_cmd", "Ns", NULL, "")                                        \
    X(f_l_hold_check_cmd, "hold_check_cmd", "hold_check_cmd", "Ns", NULL,                    \
      "hold_check_cmd(owner) -> bytes (decode with hold_gone)")                              \
    X(f_l_decode_locked, "decode_locked", "decode_locked", "Nr", NULL,                       \
      "decode_locked(reply) -> bool")


/* ------------------------------------------------------------------ */
/* methods of the session's hold table (Python Holds, Lua proto.holds) */
/* ------------------------------------------------------------------ */

/* a hold, given as its key; none: nil/None */
static int hb_hold(hb_out *o, hl_hold *h)
{
    if (!h)
        return hb_nil(o);
    hb_val *x = hb_push(o, HB_HOLD);
    if (x)
        x->h = h;
    return 0;
}

#define HB_NOW(o, a, k) HB_RANGE(o, a, k, INT64_MIN / 4, INT64_MAX / 4, "now")

/* heard(key, reply, now) -> a check of the hold became due (a frame on its channel) */
static int f_h_heard(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 3);
    hl_ps_event ev;
    hl_decode_pubsub(a[2].r, &ev);
    return hb_bool(o, a[1].h && hl_holds_heard(a[0].t, a[1].h, &ev, a[3].i));
}

/* unheard(key, now) -> a check became due: its pub/sub connection is not known alive */
static int f_h_unheard(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 2);
    hl_ps_event ev = {HL_PS_UNHEARD, NULL, 0, -1, -1};
    return hb_bool(o, a[1].h && hl_holds_heard(a[0].t, a[1].h, &ev, a[2].i));
}

static int f_h_check(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 2);
    return hb_bool(o, a[1].h && hl_holds_check(a[0].t, a[1].h, a[2].i));
}

static int f_h_check_next(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 1);
    return hb_hold(o, hl_holds_check_next(a[0].t, a[1].i));
}

/* check_outcome(key, gone): true lost, false held, nil no usable answer */
static int f_h_check_outcome(const hb_arg *a, hb_out *o)
{
    (void)o;
    if (a[1].h)
        hl_holds_check_outcome(a[0].t, a[1].h, (int)a[2].i);
    return 0;
}

static int f_h_lost_next(const hb_arg *a, hb_out *o)
{
    return hb_hold(o, hl_holds_lost_next(a[0].t));
}

/* renew_due(now, horizon) -> [key, ...]: every watchdog hold whose renewal
 * is due by now + horizon, each marked as sent at now (hl_holds_renew_next);
 * when the list cannot be made, none is handed out: their renewals "failed" */
static int f_h_renew_due(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 1);
    HB_MS(o, a, 2, 0, "horizon");
    int head = o->n;
    int64_t n = 0;
    hb_list(o, HB_LIST, 0);
    hl_hold *h;
    while ((h = hl_holds_renew_next(a[0].t, a[1].i, a[2].i))) {
        hb_hold(o, h);
        n++;
        if (o->oom) {
            hl_holds_outcome(a[0].t, h, HL_RENEW_TROUBLE, 1, a[1].i);
            for (int i = head + 1; i < o->n; i++)
                hl_holds_outcome(a[0].t, o->v[i].h, HL_RENEW_TROUBLE, 1, a[1].i);
            return hb_fail(o, HILOCK_ENOMEM, NULL);
        }
    }
    o->v[head].i = n;
    return 0;
}

/* outcome(key, outcome, acked, sent_at) -> the outcome as applied */
static int f_h_outcome(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 4);
    hl_renew_outcome out = (hl_renew_outcome)a[2].i;
    if (!a[1].h)
        return hb_word(o, (int)hl_renew_unacked(out, (int)a[3].i));
    return hb_word(o, (int)hl_holds_outcome(a[0].t, a[1].h, out, (int)a[3].i, a[4].i));
}

static int f_h_doubt_next(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 1);
    return hb_hold(o, hl_holds_doubt_next(a[0].t, a[1].i));
}

static int f_h_end_next(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 1);
    return hb_hold(o, hl_holds_end_next(a[0].t, a[1].i));
}

/* next() -> ms: the earliest deadline, a fixed lease's end included (-1: none) */
static int f_h_next(const hb_arg *a, hb_out *o)
{
    int64_t x = hl_holds_next(a[0].t), y = hl_holds_next_end(a[0].t);
    return hb_int(o, x < 0 ? y : y < 0 || x < y ? x : y);
}

static int f_h_is_lost(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 2);
    return hb_bool(o, a[1].h && hl_holds_is_lost(a[0].t, a[1].h, a[2].i));
}

static int f_h_count(const hb_arg *a, hb_out *o) { return hb_int(o, (int64_t)a[0].t->count); }
static int f_h_next_renewal(const hb_arg *a, hb_out *o) { return hb_int(o, hl_holds_next_renewal(a[0].t)); }
static int f_h_next_doubt(const hb_arg *a, hb_out *o) { return hb_int(o, hl_holds_next_doubt(a[0].t)); }

/* state(key) -> confirmed_at, doubted | nothing: the hold's last confirmed
 * grant or renewal (when it was sent), reported in doubt since its grant */
static int f_h_state(const hb_arg *a, hb_out *o)
{
    if (!a[1].h)
        return 0;
    hb_int(o, a[1].h->confirmed_at);
    return hb_bool(o, a[1].h->doubted);
}

/* batch(key, batch, alone): which of the hold's renewals may share one
 * command (hl_hold.batch: e.g. its lock's cluster slot, else 0) and whether
 * it goes alone (a read side); set after its first grant */
static int f_h_batch(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 2, 0, UINT32_MAX, "batch");
    if (a[1].h) {
        a[1].h->batch = (unsigned)a[2].i;
        a[1].h->alone = a[3].i != 0;
    }
    return 0;
}

/* renew_groups(now, horizon) -> {{key, ...}, ...}: every watchdog hold whose
 * renewal is due by now + horizon, marked as sent at now, in the groups that
 * share one renewal command (hl_holds_renew_due: one batch key each, at most
 * HL_RENEW_MANY_MAX, a hold marked alone by itself); when the lists cannot
 * be made, none is handed out: their renewals "failed" */
static int f_h_renew_groups(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 1);
    HB_MS(o, a, 2, 0, "horizon");
    size_t cap = a[0].t->count, ng = 0, n = 0;
    hl_hold **out = cap ? malloc(sizeof *out * cap) : NULL;
    hl_renew_group *g = cap ? malloc(sizeof *g * cap) : NULL;
    if (cap && (!out || !g)) {
        free(out);
        free(g);
        return hb_fail(o, HILOCK_ENOMEM, NULL);
    }
    if (cap)
        n = hl_holds_renew_due(a[0].t, a[1].i, a[2].i, HL_RENEW_MANY_MAX, out, cap, g, &ng);
    hb_list(o, HB_LIST, (int64_t)ng);
    for (size_t i = 0; i < ng; i++) {
        hb_list(o, HB_LIST, (int64_t)g[i].size);
        for (size_t j = 0; j < g[i].size; j++)
            hb_hold(o, out[g[i].first + j]);
    }
    if (o->oom)
        for (size_t i = 0; i < n; i++)
            hl_holds_outcome(a[0].t, out[i], HL_RENEW_TROUBLE, 1, a[1].i);
    free(out);
    free(g);
    return o->oom ? hb_fail(o, HILOCK_ENOMEM, NULL) : 0;
}

/* X(function, Python name, Lua name, arguments, words, doc) */
#define HB_HOLDS_FNS(X)                                                                     \
    X(f_h_heard, "heard", "heard", "HKri", NULL, "heard(key, reply, now) -> a check became due") \
    X(f_h_unheard, "unheard", "unheard", "HKi", NULL,                                        \
      "unheard(key, now) -> a check became due")                                             \
    X(f_h_check, "check", "check", "HKi", NULL, "check(key, now) -> a check became due")     \
    X(f_h_check_next, "check_next", "check_next", "Hi", NULL, "check_next(now) -> key | None") \
    X(f_h_check_outcome, "check_outcome", "check_outcome", "HKt", NULL,                      \
      "check_outcome(key, gone)")                                                            \
    X(f_h_lost_next, "lost_next", "lost_next", "H", NULL, "lost_next() -> key | None")       \
    X(f_h_renew_due, "renew_due", "renew_due", "Hii", NULL,                                  \
      "renew_due(now, horizon) -> [key, ...]")                                               \
    X(f_h_outcome, "outcome", "outcome", "HKebi", hb_renew_words,                            \
      "outcome(key, outcome, acked, sent_at) -> RENEW_* as applied")                         \
    X(f_h_doubt_next, "doubt_next", "doubt_next", "Hi", NULL, "doubt_next(now) -> key | None") \
    X(f_h_end_next, "end_next", "end_next", "Hi", NULL, "end_next(now) -> key | None")       \
    X(f_h_next, "next", "next", "H", NULL, "next() -> ms of the earliest deadline (-1: none)") \
    X(f_h_is_lost, "is_lost", "is_lost", "HKi", NULL, "is_lost(key, now) -> bool")           \
    X(f_h_count, "count", "count", "H", NULL, "count() -> holds in the table")              \
    X(f_h_next_renewal, "next_renewal", "next_renewal", "H", NULL,                           \
      "next_renewal() -> ms of the next renewal due (-1: none)")                             \
    X(f_h_next_doubt, "next_doubt", "next_doubt", "H", NULL,                                 \
      "next_doubt() -> ms of the next doubt due (-1: none)")                                 \
    X(f_h_state, NULL, "state", "HK", NULL, "state(key) -> confirmed_at, doubted | nothing") \
    X(f_h_batch, NULL, "batch", "HKib", NULL, "batch(key, batch, alone)")                    \
    X(f_h_renew_groups, NULL, "renew_groups", "Hii", NULL,                                   \
      "renew_groups(now, horizon) -> {{key, ...}, ...}")


/* ------------------------------------------------------------------ */
/* methods of one pub/sub connection's liveness rule (hl_sublive)      */
/* ------------------------------------------------------------------ */

static int f_s_opened(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 1);
    hl_sublive_opened(a[0].sl, a[1].i);
    return 0;
}

static int f_s_heard(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 1);
    hl_sublive_heard(a[0].sl, a[1].i);
    return 0;
}

static int f_s_closed(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 1);
    hl_sublive_closed(a[0].sl, a[1].i);
    return 0;
}

static int f_s_idle(const hb_arg *a, hb_out *o)
{
    (void)o;
    hl_sublive_idle(a[0].sl);
    return 0;
}

/* due(now) -> Python: SUBLIVE_* flags; Lua: ping, reset, check (booleans) */
static int f_s_due(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 1);
    int due = hl_sublive_due(a[0].sl, a[1].i);
    hb_int(o, due);
    hb_bool(o, (due & HL_SUBLIVE_PING) != 0);
    hb_bool(o, (due & HL_SUBLIVE_RESET) != 0);
    hb_bool(o, (due & HL_SUBLIVE_CHECK) != 0);
    if (!o->oom) {
        o->v[o->n - 4].only = HB_PY;
        o->v[o->n - 3].only = o->v[o->n - 2].only = o->v[o->n - 1].only = HB_LUA;
    }
    return 0;
}

static int f_s_next(const hb_arg *a, hb_out *o) { return hb_int(o, hl_sublive_next(a[0].sl)); }
static int f_s_alive(const hb_arg *a, hb_out *o) { return hb_bool(o, hl_sublive_alive(a[0].sl)); }

#define HB_SUBLIVE_FNS(X)                                                                   \
    X(f_s_opened, "opened", "opened", "Li", NULL, "opened(now): a connection opened, not heard yet") \
    X(f_s_heard, "heard", "heard", "Li", NULL, "heard(now): a frame was read on it")        \
    X(f_s_closed, "closed", "closed", "Li", NULL, "closed(now): it closed (reset, error)")  \
    X(f_s_idle, "idle", "idle", "L", NULL, "idle(): nothing listens any more")              \
    X(f_s_due, "due", "due", "Li", NULL, "due(now) -> SUBLIVE_* flags")                     \
    X(f_s_next, "next", "next", "L", NULL, "next() -> ms of the next due (-1: none)")       \
    X(f_s_alive, "alive", "alive", "L", NULL, "alive() -> bool")

static int f_x_can_hand_over(const hb_arg *a, hb_out *o)
{
    return hb_bool(o, hl_settle_can_hand_over(a[0].st));
}

#define HB_SETTLE_FNS(X)                                                                    \
    X(f_x_can_hand_over, "can_hand_over", "can_hand_over", "X", NULL,                       \
      "can_hand_over() -> bool: it may be dropped (its connection closed) for a settle of "  \
      "the same attempt on another connection (hl_settle_can_hand_over: it has sent no "     \
      "undo yet)")

/* ------------------------------------------------------------------ */
/* methods of the session's unsettled record set (hl_unsettled_rel_*):  */
/* releases that got no answer, sent again before the owner's acquire   */
/* and release of the lock (docs/protocol.md, "unsettled releases")     */
/* ------------------------------------------------------------------ */

/* rel_put(name, owner, request_id, until, now) -> 0 kept, 1 not kept (the
 * owner's acquires of name refused until then), -1 not kept (every acquire
 * refused until then) */
static int f_u_rel_put(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 4);
    HB_NOW(o, a, 5);
    return hb_int(o, hl_unsettled_rel_put(a[0].un, a[1].s, a[2].s, a[3].s, a[4].i, a[5].i));
}

/* rel_next(name, owner, now) -> request_id | None, refused_until: the
 * release to send again before the acquire (then rel_end, and ask again),
 * or None: none; refused_until > 0: do not acquire (fail: releases that may
 * still be pending could not all be kept; they have ended by then) */
static int f_u_rel_next(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 3);
    const char *rid = NULL;
    int64_t until = 0;
    hl_unsettled_step st = hl_unsettled_rel_next(a[0].un, a[1].s, a[2].s, a[3].i, &rid, &until);
    if (st == HL_UNSETTLED_SETTLE)
        hb_strcpy(o, rid, strlen(rid));
    else
        hb_nil(o);
    return hb_int(o, st == HL_UNSETTLED_REFUSE ? until : 0);
}

/* rel_end(name, owner, request_id, ran, now): what the release sent again
 * answered: True released (now or before), False not owner, None no usable
 * answer (all kept: the acquire fails) */
static int f_u_rel_end(const hb_arg *a, hb_out *o)
{
    (void)o;
    HB_NOW(o, a, 5);
    hl_unsettled_rel_end(a[0].un, a[1].s, a[2].s, a[3].s, (int)a[4].i, a[5].i);
    return 0;
}

static int f_u_rel_count(const hb_arg *a, hb_out *o)
{
    HB_NOW(o, a, 3);
    return hb_int(o, (int64_t)hl_unsettled_rel_count(a[0].un, a[1].s, a[2].s, a[3].i));
}

/* rel_any() -> bool: any release kept, or acquires refused (a driver's
 * cheap test before asking rel_next) */
static int f_u_rel_any(const hb_arg *a, hb_out *o)
{
    return hb_bool(o, a[0].un->rel_count > 0 || a[0].un->rel_full_until > 0);
}

#define HB_UNSETTLED_FNS(X)                                                                 \
    X(f_u_rel_put, "rel_put", "rel_put", "Usssii", NULL,                                    \
      "rel_put(name, owner, request_id, until, now) -> 0 kept, 1/-1 not kept: acquires "    \
      "refused until then")                                                                 \
    X(f_u_rel_next, "rel_next", "rel_next", "Ussi", NULL,                                   \
      "rel_next(name, owner, now) -> (request_id | None, refused_until): send that release " \
      "again first; refused_until > 0: fail the acquire")                                   \
    X(f_u_rel_end, "rel_end", "rel_end", "Usssti", NULL,                                    \
      "rel_end(name, owner, request_id, ran, now): ran True released, False not owner, "    \
      "None no answer")                                                                     \
    X(f_u_rel_count, "rel_count", "rel_count", "Ussi", NULL,                                \
      "rel_count(name, owner, now) -> releases of owner on name kept to send again")      \
    X(f_u_rel_any, "rel_any", "rel_any", "U", NULL,                                         \
      "rel_any() -> bool: any release kept or acquires refused (ask rel_next then)")

/* ------------------------------------------------------------------ */
/* the lists                                                           */
/* ------------------------------------------------------------------ */

#define HB_LUA_RAW 1 /* Lua: a failure is nil, detail (no error prefix) */
#define HB_NEW 2     /* makes an object of class cls (its state: hb_out.self) */
#define HB_PY_ATTR 4 /* Python: an attribute of the object, not a method */

typedef struct hb_fn {
    const char *py;  /* name in hilock._engine, or NULL */
    const char *lua; /* name in hilock.proto, or NULL */
    const char *args;
    int (*fn)(const hb_arg *, hb_out *);
    const char *const *words; /* 'e' arguments and word results */
    int flags;
    const char *doc; /* Python's __doc__ */
} hb_fn;
/* HB_NEW and 'O' rows: their class (hb_classes[]), in flags' high bits */
#define HB_CLS(f) ((f)->flags >> 8)

static const hb_fn hb_fns[] = {
    {"now_ms", "now_ms", "", f_now_ms, NULL, 0, "the engine's monotonic clock, ms"},
    {"hold_owner", NULL, "isu", f_hold_owner, NULL, 0,
     "hold_owner(kind, client_id, thread_id) -> str"},
    {NULL, "owner", "su", f_owner, NULL, 0, "owner(client_id, thread_id) -> str"},
    {"parse_url", "parse_url", "S", f_parse_url, NULL, 0,
     "parse_url(url) -> dict (the engine's URL parser)"},
    {"check_name", "check_name", "S", f_check_name, NULL, HB_LUA_RAW,
     "check_name(name): InvalidArgument saying why not"},
    {"no_reply_msg", "no_reply_msg", "is", f_no_reply_msg, NULL, 0,
     "no_reply_msg(ms, where) -> str"},
    {"master_addr_msg", "master_addr_msg", "ssr", f_master_addr_msg, NULL, 0,
     "master_addr_msg(where, master_name, reply) -> str (why the reply names no master)"},
    {"redact_url", NULL, "s", f_redact_url, NULL, 0,
     "redact_url(url) -> str (passwords shown as ***)"},
    {"subscribe_cmd", "subscribe_cmd", "s|bb", f_subscribe_cmd, NULL, 0,
     "subscribe_cmd(channel, sharded=False, unsubscribe=False) -> bytes"},
    {NULL, "unsubscribe_cmd", "s|b", f_unsubscribe_cmd, NULL, 0,
     "unsubscribe_cmd(channel, sharded) -> bytes"},
    {"ping_cmd", "ping_cmd", "", f_ping_cmd, NULL, 0, "ping_cmd() -> bytes (the check at open)"},
    {"role_cmd", "role_cmd", "", f_role_cmd, NULL, 0, "role_cmd() -> bytes"},
    {"cluster_slots_cmd", "cluster_slots_cmd", "", f_cluster_slots_cmd, NULL, 0,
     "cluster_slots_cmd() -> bytes"},
    {"asking_cmd", "asking_cmd", "", f_asking_cmd, NULL, 0,
     "asking_cmd() -> bytes (before a command sent on an ASK)"},
    {"sentinel_master_cmd", "sentinel_master_cmd", "s", f_sentinel_master_cmd, NULL, 0,
     "sentinel_master_cmd(master_name) -> bytes"},
    {"sentinel_watch_cmd", "sentinel_watch_cmd", "", f_sentinel_watch_cmd, NULL, 0,
     "sentinel_watch_cmd() -> bytes"},
    {"handshake_cmds", "handshake_cmds", "|zzi", f_handshake_cmds, NULL, 0,
     "handshake_cmds(user, password, db) -> [bytes]"},
    {"handshake_reply", NULL, "r", f_handshake_code, NULL, 0,
     "handshake_reply(reply) -> 0 or a code"},
    {NULL, "handshake_reply", "r", f_handshake_ok, NULL, 0,
     "handshake_reply(r) -> true | nil, why"},
    {"decode_ping", NULL, "r", f_decode_ping, NULL, 0, "decode_ping(reply) -> 0 or a code"},
    {"decode_master_addr", "decode_sentinel_master", "r", f_decode_master_addr, NULL, 0,
     "decode_master_addr(reply) -> (host, port)"},
    {"decode_switch_master", "decode_switch_master", "rs", f_decode_switch_master, NULL, 0,
     "decode_switch_master(r, master_name) -> host, port | nil"},
    {"decode_role", "decode_role", "r", f_decode_role, NULL, 0,
     "decode_role(reply) -> (is_master, replicas)"},
    {"not_master", NULL, "r", f_not_master, NULL, 0, "not_master(reply) -> bool"},
    {"decode_slots", "decode_slots", "r", f_decode_slots, NULL, 0,
     "decode_slots(reply) -> [(first, last, host, port)] (the slot map's masters)"},
    {"decode_pubsub", "decode_pubsub", "r", f_decode_pubsub, hb_ps_words, 0,
     "decode_pubsub(reply) -> (PS_*, channel, payload: 0 wake one, 1 wake all, -1 ignore)"},
    {"lock_wakes", "lock_wakes", "r", f_lock_wakes, NULL, 0,
     "lock_wakes(reply) -> -1 all, 0 none, 1: the waiters a frame on a lock's channel wakes"},
    {"hold_check_on", "hold_check_on", "r", f_hold_check_on, NULL, 0,
     "hold_check_on(reply) -> bool: a message that makes a holder check its hold"},
    {"hold_gone", "hold_gone", "r", f_hold_gone, NULL, 0,
     "hold_gone(reply) -> True gone, False held, None unknown"},
    {"decode_flag", NULL, "r", f_decode_flag, NULL, 0, "0 or 1, else ProtocolError"},
    {"decode_int", "decode_int", "r", f_decode_int, NULL, 0, "an integer reply"},
    {"decode_holds", "decode_hold_count", "r", f_decode_holds, NULL, 0,
     "hold count (missing = 0)"},
    {"decode_pttl", NULL, "r", f_decode_pttl, NULL, 0, "-2 no key, -1 no expiry, else ms"},
    {"decode_token", "decode_token", "r", f_decode_token, NULL, 0,
     "fencing counter (missing = 0)"},
    {"decode_extend", NULL, "r", f_decode_extend, NULL, 0,
     "1 extended, 0 not held, -1 no expiry"},
    {NULL, "decode_extend", "r", f_decode_extend_resend, NULL, 0,
     "decode_extend(r) -> 1 | 0 | -1 | \"send_body\" | nil, err"},
    {NULL, "decode_acquire", "r", f_decode_acquire, NULL, 0,
     "decode_acquire(r) -> acquired, hold_count_or_ttl_ms | nil, err"},
    {NULL, "decode_release", "r", f_decode_release, NULL, 0,
     "decode_release(r) -> remaining holds | nil, err"},
    {"renew_outcome", "renew_outcome", "r", f_renew_outcome, hb_renew_words, 0,
     "renew_outcome(reply) -> RENEW_*"},
    {"renew_unacked", "renew_unacked", "eb", f_renew_unacked, hb_renew_words, 0,
     "renew_unacked(outcome, acked) -> RENEW_*: RENEW_RENEWED that no replica acknowledged "
     "is RENEW_TROUBLE (retried, not a confirmation)"},
    {NULL, "renew_outcomes", "ri", f_renew_outcomes, hb_renew_words, 0,
     "renew_outcomes(r, n) -> {outcome, ...}, per_hold"},
    {"renew_period", "renew_period", "i", f_renew_period, NULL, 0,
     "renew_period(watchdog_lease_ms) -> ms"},
    {NULL, "renew_doubt_after", "i", f_renew_doubt_after, NULL, 0,
     "renew_doubt_after(watchdog_lease_ms) -> ms"},
    {"renew_doubt_at", "renew_doubt_at", "iiii", f_renew_doubt_at, NULL, 0,
     "renew_doubt_at(confirmed_at, watchdog_lease_ms, renew_sent_at, command_timeout_ms) -> ms:"
     " when the hold is reported lost 'in doubt' (renew_sent_at -1: none in flight)"},
    {NULL, "renew_in_doubt", "iiiii", f_renew_in_doubt, NULL, 0,
     "renew_in_doubt(confirmed_at, watchdog_lease_ms, renew_sent_at, command_timeout_ms, now)"
     " -> bool"},
    {"latch_ttl", NULL, "i", f_latch_ttl, NULL, 0, "latch_ttl(command_timeout_ms) -> ms"},
    {NULL, "acquire_latch_ttl", "ii", f_acquire_latch_ttl, NULL, 0,
     "acquire_latch_ttl(command_timeout_ms, connect_timeout_ms) -> ms"},
    {"ack_retry", "ack_retry", "ii", f_ack_retry, NULL, 0,
     "ack_retry(wait_ms, deadline_ms) -> pause_ms or None"},
    {"release_request_id", "release_request_id", "siii", f_release_request_id, NULL, 0,
     "release_request_id(client_id, pid, latch_epoch, seq) -> a release's request id (the "
     "owner's unlock latch of that epoch)"},
    {"settle_gate", "settle_gate", "ibi", f_settle_gate, NULL, 0,
     "settle_gate(settling, bounded, command_timeout_ms) -> -1 send the attempt, else ms to"
     " wait for a settling on that server to end, then ask again bounded"},
    {"ml_quorum", NULL, "bi", f_ml_quorum, NULL, 0, "ml_quorum(redlock, n) -> members to take"},
    {"ml_validity", NULL, "iii", f_ml_validity, NULL, 0,
     "ml_validity(lease_ms, t0_ms, t1_ms) -> ms"},
    {"ml_success", NULL, "biibi", f_ml_success, NULL, 0,
     "ml_success(redlock, n, ok, fatal, validity_ms) -> bool"},
    {"ml_take_back", NULL, "bbi", f_ml_take_back, NULL, 0,
     "ml_take_back(redlock, reentry, rc) -> bool: release member after a failed attempt"},
    {"ml_line_window", NULL, "iii", f_ml_line_window, NULL, 0,
     "ml_line_window(kind, wait_ms, client_window_ms) -> ms: a fair member's line window,"
     " -1 none"},
    {"ml_in_line", NULL, "ii", f_ml_in_line, NULL, 0,
     "ml_in_line(window_ms, rc) -> bool: the call may have an entry in the member's line"},
    {"ml_backoff", NULL, "iu", f_ml_backoff, NULL, 0, "ml_backoff(attempt, r) -> ms"},
    {"ml_hold_lost", NULL, "biii", f_ml_hold_lost, NULL, 0,
     "ml_hold_lost(redlock, n, nacquired, nlost) -> bool"},
    {NULL, NULL, NULL, NULL, NULL, 0, NULL}};

/* the lock's methods: hb_lock_fns[HBL_<function>] */
#define HB_ROW(fn, py, lua, args, words, doc) {py, lua, args, fn, words, 0, doc},
#define HB_ENUM(fn, py, lua, args, words, doc) HBL_##fn,
static const hb_fn hb_lock_fns[] = {HB_LOCK_FNS(HB_ROW){NULL, NULL, NULL, NULL, NULL, 0, NULL}};
enum { HB_LOCK_FNS(HB_ENUM) HBL_COUNT };
/* the hold table's methods: hb_holds_fns[HBL_<function>] */
static const hb_fn hb_holds_fns[] = {HB_HOLDS_FNS(HB_ROW){NULL, NULL, NULL, NULL, NULL, 0, NULL}};
enum { HB_HOLDS_FNS(HB_ENUM) HBH_COUNT };
/* the liveness rule's methods: hb_sublive_fns[HBL_<function>] */
static const hb_fn hb_sublive_fns[] = {
    HB_SUBLIVE_FNS(HB_ROW){NULL, NULL, NULL, NULL, NULL, 0, NULL}};
enum { HB_SUBLIVE_FNS(HB_ENUM) HBS_COUNT };

/* ---- a semaphore's, a permit-expirable semaphore's or a latch's names ---- */

static const char *const hb_sem_words[] = {"", "semaphore", "permit", "latch", NULL};

static int f_m_name(const hb_arg *a, hb_out *o) { return hb_str(o, a[0].m->name); }
static int f_m_channel(const hb_arg *a, hb_out *o) { return hb_str(o, a[0].m->channel); }
static int f_m_kind(const hb_arg *a, hb_out *o) { return hb_word(o, a[0].skind); }

static int f_m_slot(const hb_arg *a, hb_out *o)
{
    return hb_int(o, hl_key_slot(a[0].m->name, strlen(a[0].m->name)));
}

/* wakes(reply) -> how many waiters a pub/sub frame on its channel wakes:
 * -1 all, 0 none, n (a semaphore's published permits; a latch's any message) */
static int f_m_wakes(const hb_arg *a, hb_out *o)
{
    hl_ps_event ev;
    hl_decode_pubsub(a[1].r, &ev);
    return hb_int(o, hl_ps_wakes(hl_sem_wake_rule((hl_sem_kind)a[0].skind), &ev));
}

/* Python: name, channel, kind (SEM_*) and slot are attributes */
#define HB_SEM_FNS(X)                                                                       \
    X(f_m_name, NULL, "name", "M", NULL, "the object's name (its count's key)")              \
    X(f_m_channel, NULL, "channel", "M", NULL, "the channel its waiters listen on")          \
    X(f_m_kind, NULL, "kind", "M", hb_sem_words, "SEM_SEMAPHORE, SEM_PERMIT or SEM_LATCH")   \
    X(f_m_slot, NULL, "slot", "M", NULL, "the Redis Cluster slot of its keys and channel")   \
    X(f_m_wakes, "wakes", "wakes", "Mr", NULL, "wakes(reply) -> -1 all, 0 none, n waiters")
static const hb_fn hb_sem_fns[] = {HB_SEM_FNS(HB_ROW){NULL, NULL, NULL, NULL, NULL, 0, NULL}};
enum { HB_SEM_FNS(HB_ENUM) HBM_COUNT };
/* the unsettled record set's methods: hb_unsettled_fns[HBL_<function>] */
static const hb_fn hb_unsettled_fns[] = {
    HB_UNSETTLED_FNS(HB_ROW){NULL, NULL, NULL, NULL, NULL, 0, NULL}};
enum { HB_UNSETTLED_FNS(HB_ENUM) HBU_COUNT };
/* the settle machine's methods: hb_settle_fns[HBL_<function>] */
static const hb_fn hb_settle_fns[] = {HB_SETTLE_FNS(HB_ROW){NULL, NULL, NULL, NULL, NULL, 0, NULL}};
enum { HB_SETTLE_FNS(HB_ENUM) HBX_COUNT };

/* ------------------------------------------------------------------ */
/* engine objects                                                      */
/* ------------------------------------------------------------------ */
/*
 * A machine or rule the binding keeps in one of its objects (Python: the
 * type hilock._engine.<py>; Lua: a userdata with metatable mt). Its state
 * (size bytes) is zeroed, then filled by a row with HB_NEW (found at
 * hb_out.self); fini empties it once that row succeeded. Its methods are
 * the rows of hb_obj_fns with its class and 'O' first. An object made by a
 * lock's method ('N' first) keeps that lock's names alive (the state
 * borrows them). Python: a class with a Python constructor (ctor, a row of
 * hb_obj_fns without 'N') is callable; the others cannot be made from
 * Python (TypeError), so no object exists that its row did not fill.
 */
typedef struct hb_class {
    const char *py, *mt; /* hilock._engine.<py>; Lua metatable */
    size_t size;
    void (*fini)(void *);
    const char *doc;
} hb_class;

enum { HBC_NONE, HBC_CALL, HBC_ROUTER, HBC_ACK, HBC_COUNT };

/* the action words (hl_action: index = value) */
static const char *const hb_act_words[] = {"", "send", "subscribe", "wait", "unsubscribe",
                                           "done", NULL};
/* the router's words (hl_route_action: index = value) */
static const char *const hb_route_words[] = {"done", "moved", "ask", "retry", "refresh", "fail",
                                             NULL};

/* ---- one script command and its decoded answer (force, extend, fair_cancel) ---- */

typedef struct hb_call_st {
    hl_cmd cmd;
    int (*decode)(const redisReply *, int64_t *);
    int eval, done, result;
    int64_t value;
    char owner[HL_OWNER_MAX];
} hb_call_st;

static hb_call_st *hb_call_new(hb_out *o, int (*decode)(const redisReply *, int64_t *),
                               const hb_arg *a)
{
    hb_call_st *m = (hb_call_st *)o->self;
    m->decode = decode;
    if (a)
        memcpy(m->owner, a->s, a->len + 1);
    return m;
}

/* n.force() / p:force() -> the call: value 1 when a lock was deleted, else 0 */
static int f_c_force(const hb_arg *a, hb_out *o)
{
    hl_cmd_force(&hb_call_new(o, hl_decode_int, NULL)->cmd, a[0].kind, a[0].n);
    return 0;
}

/* n.extend(owner, add_ms): value 1 extended, 0 not held by that owner,
 * -1 the key has no expiry */
static int f_c_extend(const hb_arg *a, hb_out *o)
{
    HB_OWNER(o, a, 1);
    HB_MS(o, a, 2, 1, "add_ms");
    hb_call_st *m = hb_call_new(o, hl_decode_extend, &a[1]);
    hl_cmd_extend(&m->cmd, a[0].n, m->owner, a[2].i);
    return 0;
}

/* n.fair_cancel(owner, window_ms): leave the fair lock's line (value 1
 * left, 0 was not in it); window_ms: the one the attempts joined it with
 * (a multi-lock's, ml_line_window) */
static int f_c_fair_cancel(const hb_arg *a, hb_out *o)
{
    HB_OWNER(o, a, 1);
    HB_MS(o, a, 2, 1, "window_ms");
    if (a[0].kind != HILOCK_KIND_FAIR)
        return hb_bad(o, -1, "fair_cancel: not a fair lock");
    hb_call_st *m = hb_call_new(o, hl_decode_int, &a[1]);
    hl_cmd_fair_cancel(&m->cmd, a[0].n, m->owner, a[2].i);
    return 0;
}

/* m.next() -> (ACT_SEND, bytes) | (ACT_DONE, result, value)
 * Lua: "send", bytes | "done", value ~= 0 | "done", nil, err */
static int f_c_next(const hb_arg *a, hb_out *o)
{
    hb_call_st *m = (hb_call_st *)a[0].p;
    if (!m->done) {
        hb_pytuple(o, 2);
        hb_word(o, HL_ACT_SEND);
        return hb_cmdof(o, &m->cmd, 0);
    }
    hb_pytuple(o, 3);
    hb_word(o, HL_ACT_DONE);
    hb_int(o, m->result), hb_only(o, HB_PY);
    hb_int(o, m->value), hb_only(o, HB_PY);
    if (m->result)
        return hb_nil(o), hb_only(o, HB_LUA), hb_err(o, m->result), hb_only(o, HB_LUA);
    return hb_bool(o, m->value != 0), hb_only(o, HB_LUA);
}

static int f_c_on_reply(const hb_arg *a, hb_out *o)
{
    (void)o;
    hb_call_st *m = (hb_call_st *)a[0].p;
    if (m->done)
        return 0;
    if (hl_reply_is_noscript(a[1].r) && !m->eval) {
        m->eval = 1; /* the server forgot the script: send its body */
        hl_cmd_to_eval(&m->cmd);
        return 0;
    }
    m->done = 1;
    m->result = m->decode(a[1].r, &m->value);
    return 0;
}

static int f_c_on_error(const hb_arg *a, hb_out *o)
{
    (void)o;
    hb_call_st *m = (hb_call_st *)a[0].p;
    m->done = 1;
    m->result = a[1].set ? (int)a[1].i : HILOCK_ECONN;
    return 0;
}

/* ---- the router: what an error reply or a failed connection means ---- */

static hl_router *hb_rt(const hb_arg *a) { return (hl_router *)a[0].p; }

/* Router(mode) / proto.router(mode): "single", "cluster", "sentinel"
 * (parse_url's modes; Python also "unix", routed as "single") */
static int f_rt_new(const hb_arg *a, hb_out *o)
{
    static const char *const modes[] = {"single", "cluster", "sentinel", "unix"};
    static const hl_mode ids[] = {HL_MODE_SINGLE, HL_MODE_CLUSTER, HL_MODE_SENTINEL,
                                  HL_MODE_SINGLE};
    for (int i = 0; i < 4; i++)
        if (strcmp(a[0].s, modes[i]) == 0) {
            hl_router_init((hl_router *)o->self, ids[i]);
            return 0;
        }
    return hb_bad(o, 1, "unknown routing mode %s", a[0].s);
}

/* the route: (ROUTE_DONE,) | (ROUTE_MOVED, slot, host, port, sleep_ms)
 * | (ROUTE_ASK, host, port) | (ROUTE_RETRY, sleep_ms)
 * | (ROUTE_REFRESH, sleep_ms) | (ROUTE_FAIL, code); Lua: the same words
 * and values ("fail", err) */
static int hb_route(hb_out *o, const hl_router *rt, hl_route_action act)
{
    static const int nvals[] = {1, 5, 3, 2, 2, 2};
    int w = act <= HL_ROUTE_FAIL ? (int)act : HL_ROUTE_FAIL;
    hb_pytuple(o, nvals[w]);
    hb_word(o, w);
    switch (w) {
    case HL_ROUTE_DONE:
        return 0;
    case HL_ROUTE_MOVED:
        hb_int(o, rt->slot), hb_str(o, rt->host), hb_int(o, rt->port);
        return hb_int(o, rt->sleep_ms);
    case HL_ROUTE_ASK:
        return hb_str(o, rt->host), hb_int(o, rt->port);
    case HL_ROUTE_RETRY:
    case HL_ROUTE_REFRESH:
        return hb_int(o, rt->sleep_ms);
    default:
        return hb_err(o, rt->result ? rt->result : HILOCK_ECONN);
    }
}

static int f_rt_on_reply(const hb_arg *a, hb_out *o)
{
    return hb_route(o, hb_rt(a), hl_router_on_reply(hb_rt(a), a[1].r));
}

/* on_conn_error(sent): sent, the command may have reached the server
 * (never resent here) */
static int f_rt_on_conn_error(const hb_arg *a, hb_out *o)
{
    return hb_route(o, hb_rt(a), hl_router_on_conn_error(hb_rt(a), (int)a[1].i));
}

/* ---- replica acknowledgement ---- */

static hl_ack *hb_ack(const hb_arg *a) { return (hl_ack *)a[0].p; }

/* Ack(cached_replicas (-1 unknown), cache_age_ms (-1 unknown),
 *     ack_timeout_ms[, replicated]) / proto.ack(...): replicated, the
 * deployment keeps replicas (Sentinel: a master of the name had one) */
static int f_ack_new(const hb_arg *a, hb_out *o)
{
    HB_RANGE(o, a, 0, -1, INT32_MAX, "cached_replicas");
    HB_RANGE(o, a, 1, -1, INT64_MAX / 2, "cache_age_ms");
    HB_MS(o, a, 2, 1, "ack_timeout_ms");
    hl_ack_init_replicated((hl_ack *)o->self, (int)a[0].i, a[1].i, a[2].i, (int)a[3].i);
    return 0;
}

/* next() -> (ACT_SEND, bytes, extra_timeout_ms)
 *         | (ACT_DONE, acked, failed, replicas (-1: not refreshed))
 * Lua: "send", bytes, extra_timeout_ms | "done", acked, failed, replicas
 * (nil unless refreshed), replicated */
static int f_ack_next(const hb_arg *a, hb_out *o)
{
    hl_ack *k = hb_ack(a);
    if (hl_ack_next(k) == HL_ACT_SEND) {
        hb_pytuple(o, 3), hb_word(o, HL_ACT_SEND), hb_cmdof(o, &k->cmd, 0);
        return hb_int(o, k->timeout_ms);
    }
    hb_pytuple(o, 4), hb_word(o, HL_ACT_DONE), hb_bool(o, k->acked), hb_bool(o, k->failed);
    if (k->refreshed)
        hb_int(o, k->replicas);
    else
        hb_int(o, -1), hb_only(o, HB_PY), hb_nil(o), hb_only(o, HB_LUA);
    return hb_bool(o, k->replicated), hb_only(o, HB_LUA);
}

static int f_ack_on_reply(const hb_arg *a, hb_out *o)
{
    (void)o;
    hl_ack_on_reply(hb_ack(a), a[1].r);
    return 0;
}

static int f_ack_on_error(const hb_arg *a, hb_out *o)
{
    (void)o;
    hl_ack_on_error(hb_ack(a));
    return 0;
}

static int f_ack_replicated(const hb_arg *a, hb_out *o)
{
    return hb_bool(o, hb_ack(a)->replicated);
}

static const hb_class hb_classes[HBC_COUNT] = {
    {NULL, NULL, 0, NULL, NULL},
    {"Call", "hilock.proto.force", sizeof(hb_call_st), NULL,
     "One script command and its decoded answer (Names.force, extend, fair_cancel)."},
    {"Router", "hilock.proto.router", sizeof(hl_router), NULL,
     "Router(mode): what an error reply or a failed connection means for one routed "
     "command (MOVED/ASK/TRYAGAIN/CLUSTERDOWN/LOADING/not master)."},
    {"Ack", "hilock.proto.ack", sizeof(hl_ack), NULL,
     "Ack(cached_replicas, cache_age_ms, ack_timeout_ms[, replicated]): replica "
     "acknowledgement of the write just made, on the same connection."},
};

/* X(fn, py, lua, args, words, flags, cls, doc); rows with 'N' first are
 * the lock's methods, HB_NEW rows without it the module's constructors */
#define HB_OBJ_FNS(X)                                                                       \
    X(f_c_force, "force", "force", "N", NULL, HB_NEW, HBC_CALL,                              \
      "force() -> Call (value: 1 deleted, 0 nothing)")                                       \
    X(f_c_extend, "extend", NULL, "Nsi", NULL, HB_NEW, HBC_CALL,                             \
      "extend(owner, add_ms) -> Call (value 1, 0, -1)")                                      \
    X(f_c_fair_cancel, "fair_cancel", NULL, "Nsi", NULL, HB_NEW, HBC_CALL,                   \
      "fair_cancel(owner, window_ms) -> Call (value 1 left the line, 0 was not in it)")      \
    X(f_c_next, "next", "next", "O", hb_act_words, 0, HBC_CALL, "next() -> (ACT_*, ...)")    \
    X(f_c_on_reply, "on_reply", "on_reply", "Or", NULL, 0, HBC_CALL, "on_reply(reply)")      \
    X(f_c_on_error, "on_error", "on_error", "O|c", NULL, 0, HBC_CALL, "on_error(code)")      \
    X(f_rt_new, "Router", "router", "s", NULL, HB_NEW, HBC_ROUTER, "Router(mode)")           \
    X(f_rt_on_reply, "on_reply", "on_reply", "Or", hb_route_words, 0, HBC_ROUTER,            \
      "on_reply(reply) -> (ROUTE_*, ...)")                                                   \
    X(f_rt_on_conn_error, "on_conn_error", "on_conn_error", "Ob", hb_route_words, 0,         \
      HBC_ROUTER, "on_conn_error(sent) -> (ROUTE_*, ...)")                                   \
    X(f_ack_new, "Ack", "ack", "iii|b", NULL, HB_NEW, HBC_ACK, "Ack(...)")                   \
    X(f_ack_next, "next", "next", "O", hb_act_words, 0, HBC_ACK, "next() -> (ACT_*, ...)")   \
    X(f_ack_on_reply, "on_reply", "on_reply", "Or", NULL, 0, HBC_ACK, "on_reply(reply)")     \
    X(f_ack_on_error, "on_error", "on_error", "O", NULL, 0, HBC_ACK, "on_error()")           \
    X(f_ack_replicated, "replicated", NULL, "O", NULL, HB_PY_ATTR, HBC_ACK,                  \
      "the deployment keeps replicas (given, or ROLE listed one)")

#define HB_OROW(fn, py, lua, args, words, flags, cls, doc)                                  \
    {py, lua, args, fn, words, (flags) | ((cls) << 8), doc},
#define HB_OENUM(fn, py, lua, args, words, flags, cls, doc) HBO_##fn,
static const hb_fn hb_obj_fns[] = {HB_OBJ_FNS(HB_OROW){NULL, NULL, NULL, NULL, NULL, 0, NULL}};
enum { HB_OBJ_FNS(HB_OENUM) HBO_COUNT };

#endif
