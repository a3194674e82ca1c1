/*
 * hilock — Lua C module (Lua 5.1, LuaJIT 2.1, Lua 5.4).
 *
 *   local hilock = require "hilock"
 *   local c  = assert(hilock.connect("redis://127.0.0.1:6379"))
 *   local lk = c:lock("orders:42")
 *   assert(lk:acquire(5))          -- wait up to 5 s, watchdog lease
 *   ...
 *   lk:release()
 *
 * Conventions: bad arguments raise; runtime failures return nil plus a
 * message whose prefix is stable ("timeout", "not owner", "lost",
 * "connection", "protocol", "auth", "wrong type", "closed", ...).
 * Times are float seconds.
 *
 * hilock.proto exposes the protocol layer of libcore (names, the RESP bytes
 * of each command, a reply parser, reply decoders and the sans-I/O acquire
 * state machine) for drivers that do their own I/O, such as the OpenResty
 * driver resty/hilock.lua.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "hilock.h"
#include "proto.h"
#include "uuid.h"
#include "hilock_compat.h"

#define LHL_EXPORT __attribute__((visibility("default")))

#define CLIENT_MT "hilock.client"
#define LOCK_MT "hilock.lock"
#define PLOCK_MT "hilock.proto.lock"
#define PREADER_MT "hilock.proto.reader"
#define PREPLY_MT "hilock.proto.reply"
#define PACQ_MT "hilock.proto.acquire"

#define NAME_MAX_LEN 4096

/* ------------------------------------------------------------------ */
/* Errors and arguments                                                */
/* ------------------------------------------------------------------ */

/* The stable prefix of every runtime error message. */
static const char *err_prefix(int code)
{
    switch (code) {
    case HILOCK_EINVAL: return "invalid argument";
    case HILOCK_ETIMEDOUT: return "timeout";
    case HILOCK_ENOTOWNER: return "not owner";
    case HILOCK_ELOST: return "lost";
    case HILOCK_ECONN: return "connection";
    case HILOCK_EPROTO: return "protocol";
    case HILOCK_EAUTH: return "auth";
    case HILOCK_EWRONGTYPE: return "wrong type";
    case HILOCK_ENOMEM: return "out of memory";
    case HILOCK_ECLOSED: return "closed";
    case HILOCK_ETLS: return "tls";
    default: return "error";
    }
}

/* The code of a prefix (for drivers reporting their own failures). */
static int err_code(const char *msg)
{
    static const int codes[] = {HILOCK_EINVAL, HILOCK_ETIMEDOUT, HILOCK_ENOTOWNER,
                                HILOCK_ELOST, HILOCK_ECONN, HILOCK_EPROTO,
                                HILOCK_EAUTH, HILOCK_EWRONGTYPE, HILOCK_ENOMEM,
                                HILOCK_ECLOSED, HILOCK_ETLS};
    if (!msg)
        return HILOCK_ECONN;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *p = err_prefix(codes[i]);
        size_t n = strlen(p);
        if (strncmp(msg, p, n) == 0 && (msg[n] == 0 || msg[n] == ':'))
            return codes[i];
    }
    return HILOCK_ECONN;
}

/* Push nil and "prefix[: detail]"; returns 2. */
static int push_fail(lua_State *L, int code, const char *detail)
{
    const char *prefix = err_prefix(code);
    lua_pushnil(L);
    if (detail && *detail && strcmp(detail, prefix) != 0)
        lua_pushfstring(L, "%s: %s", prefix, detail);
    else
        lua_pushstring(L, prefix);
    return 2;
}

static int is_none_or_nil(lua_State *L, int idx)
{
    return lua_type(L, idx) <= 0; /* LUA_TNONE (-1) or LUA_TNIL (0) */
}

/*
 * Seconds (float) to ms. nil/none -> if_nil. Negative, NaN or too large
 * raise; 0 raises unless allow_zero. A positive value never rounds to 0.
 */
static int64_t check_seconds(lua_State *L, int idx, int64_t if_nil, int allow_zero)
{
    if (is_none_or_nil(L, idx))
        return if_nil;
    lua_Number s = luaL_checknumber(L, idx);
    if (!(s >= 0) || s > (lua_Number)(HILOCK_MAX_TIME_MS / 1000))
        luaL_argerror(L, idx, "expected a non-negative number of seconds");
    if (s == 0) {
        if (!allow_zero)
            luaL_argerror(L, idx, "expected a positive number of seconds");
        return 0;
    }
    double ms = ceil((double)s * 1000.0 - 1e-6);
    return ms < 1 ? 1 : (int64_t)ms;
}

/* An integer argument (ms, thread id...) within [min, max]. */
static int64_t check_int(lua_State *L, int idx, int64_t min, int64_t max)
{
#if HLC_HAS_INTEGERS
    if (lua_isinteger(L, idx)) {
        lua_Integer v = lua_tointeger(L, idx);
        if (v < min || v > max)
            luaL_argerror(L, idx, "integer out of range");
        return (int64_t)v;
    }
#endif
    lua_Number n = luaL_checknumber(L, idx);
    if (!(n >= (lua_Number)min && n <= (lua_Number)max) || floor(n) != n)
        luaL_argerror(L, idx, "expected an integer in range");
    return (int64_t)n;
}

static void push_u64(lua_State *L, uint64_t v)
{
#if HLC_HAS_INTEGERS
    lua_pushinteger(L, (lua_Integer)v);
#else
    lua_pushnumber(L, (lua_Number)v);
#endif
}

static void push_i64(lua_State *L, int64_t v)
{
#if HLC_HAS_INTEGERS
    lua_pushinteger(L, (lua_Integer)v);
#else
    lua_pushnumber(L, (lua_Number)v);
#endif
}

/* A lock name: non-empty, no NUL byte, at most NAME_MAX_LEN bytes. */
static const char *check_name(lua_State *L, int idx)
{
    size_t len;
    const char *s = luaL_checklstring(L, idx, &len);
    if (len == 0 || len > NAME_MAX_LEN || strlen(s) != len)
        luaL_argerror(L, idx, "expected a non-empty name without NUL bytes (<= 4096 bytes)");
    return s;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void new_metatable(lua_State *L, const char *name, const luaL_Reg *methods,
                          const luaL_Reg *meta)
{
    luaL_newmetatable(L, name);
    hlc_setfuncs(L, meta);
    lua_newtable(L);
    hlc_setfuncs(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "hilock");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
}

/* ------------------------------------------------------------------ */
/* Client                                                              */
/* ------------------------------------------------------------------ */

typedef struct lclient {
    hilock_client *c; /* NULL once closed */
} lclient;

typedef struct llock {
    hilock_lock *l;   /* NULL once closed */
    lclient *cl;      /* kept alive by the userdata's reference */
    uint64_t tid;
    int fixed_tid;    /* 0: the calling OS thread's id at each call */
    int64_t holds;    /* holds taken through this handle and not released */
    hilock_rwlock *rw; /* read/write side: the read-write lock owning l */
} llock;

static lclient *check_client(lua_State *L, int idx)
{
    return (lclient *)luaL_checkudata(L, idx, CLIENT_MT);
}

static const char *const option_names[] = {
    "connect_timeout", "command_timeout", "watchdog_lease", "fair_wait_window",
    "pool_size", "replica_ack", "replica_ack_timeout", "tls", "tls_ca_file", "tls_ca_dir",
    "tls_cert_file", "tls_key_file", "tls_server_name", "tls_insecure", "sentinel_user",
    "sentinel_password", NULL};

static void read_options(lua_State *L, int idx, hilock_options *o)
{
    if (is_none_or_nil(L, idx))
        return;
    luaL_checktype(L, idx, LUA_TTABLE);
    /* unknown keys are an argument error: a typo must not go unnoticed */
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int known = 0;
        if (lua_type(L, -2) == LUA_TSTRING) {
            const char *k = lua_tostring(L, -2);
            for (int i = 0; option_names[i]; i++)
                known |= strcmp(k, option_names[i]) == 0;
        }
        if (!known) {
            const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
            luaL_argerror(L, idx, lua_pushfstring(L, "unknown option '%s'", k));
        }
        lua_pop(L, 1);
    }
    int top = lua_gettop(L);
    lua_getfield(L, idx, "connect_timeout");
    o->connect_timeout_ms = check_seconds(L, top + 1, 0, 0);
    lua_getfield(L, idx, "command_timeout");
    o->command_timeout_ms = check_seconds(L, top + 2, 0, 0);
    lua_getfield(L, idx, "watchdog_lease");
    o->watchdog_lease_ms = check_seconds(L, top + 3, 0, 0);
    lua_getfield(L, idx, "fair_wait_window");
    o->fair_wait_window_ms = check_seconds(L, top + 4, 0, 0);
    lua_getfield(L, idx, "pool_size");
    if (!is_none_or_nil(L, top + 5))
        o->pool_size = (int)check_int(L, top + 5, 1, 1024);
    /* replica_ack: nil = the client's default (on for sentinel and
     * cluster), true/false = on/off */
    lua_getfield(L, idx, "replica_ack");
    if (!is_none_or_nil(L, top + 6)) {
        if (lua_type(L, top + 6) != LUA_TBOOLEAN)
            luaL_argerror(L, idx, "replica_ack must be a boolean");
        o->replica_ack = lua_toboolean(L, top + 6) ? 1 : -1;
    }
    lua_getfield(L, idx, "replica_ack_timeout");
    o->replica_ack_timeout_ms = check_seconds(L, top + 7, 0, 0);
    /* TLS and sentinel settings: the strings stay anchored in the options
     * table (argument idx) while hilock_client_open copies them */
    static const char *const flags[] = {"tls", "tls_insecure"};
    int *flag_dst[] = {&o->tls, &o->tls_insecure};
    for (int i = 0; i < 2; i++) {
        lua_getfield(L, idx, flags[i]);
        if (!is_none_or_nil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN)
            luaL_argerror(L, idx, lua_pushfstring(L, "%s must be a boolean", flags[i]));
        *flag_dst[i] = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    static const char *const strs[] = {"tls_ca_file",     "tls_ca_dir",    "tls_cert_file",
                                       "tls_key_file",    "tls_server_name", "sentinel_user",
                                       "sentinel_password"};
    const char **str_dst[] = {&o->tls_ca_file,  &o->tls_ca_dir,      &o->tls_cert_file,
                              &o->tls_key_file, &o->tls_server_name, &o->sentinel_user,
                              &o->sentinel_password};
    for (int i = 0; i < 7; i++) {
        lua_getfield(L, idx, strs[i]);
        if (!is_none_or_nil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
            luaL_argerror(L, idx, lua_pushfstring(L, "%s must be a string", strs[i]));
        *str_dst[i] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    lua_settop(L, top);
}

/* hilock.connect(url [, opts]) -> client | nil, err */
static int l_connect(lua_State *L)
{
    const char *url = luaL_checkstring(L, 1);
    hilock_options o;
    hilock_options_init(&o, HILOCK_OPTIONS_VERSION);
    read_options(L, 2, &o);
    lclient *u = (lclient *)hlc_newuserdata(L, sizeof *u);
    u->c = NULL;
    luaL_getmetatable(L, CLIENT_MT);
    lua_setmetatable(L, -2);
    char err[256] = "";
    int rc = hilock_client_open(&u->c, url, &o, err, sizeof err);
    if (rc == HILOCK_EINVAL)
        return luaL_argerror(L, 1, err[0] ? err : "invalid URL");
    if (rc)
        return push_fail(L, rc, err);
    return 1;
}

static int client_close(lua_State *L)
{
    lclient *u = check_client(L, 1);
    if (u->c) {
        hilock_client_close(u->c);
        u->c = NULL;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int client_closed(lua_State *L)
{
    lua_pushboolean(L, check_client(L, 1)->c == NULL);
    return 1;
}

static int client_id(lua_State *L)
{
    lclient *u = check_client(L, 1);
    if (!u->c)
        return push_fail(L, HILOCK_ECLOSED, "client is closed");
    lua_pushstring(L, hilock_client_id(u->c));
    return 1;
}

static int client_errmsg(lua_State *L)
{
    lclient *u = check_client(L, 1);
    lua_pushstring(L, u->c ? hilock_client_errmsg(u->c) : "client is closed");
    return 1;
}

static int client_tostring(lua_State *L)
{
    lclient *u = check_client(L, 1);
    if (u->c)
        lua_pushfstring(L, "hilock.client (%s)", hilock_client_id(u->c));
    else
        lua_pushliteral(L, "hilock.client (closed)");
    return 1;
}

/* c:lock(name [, thread_id]) / c:fair_lock(...) -> lock | nil, err */
static int new_lock(lua_State *L, hilock_kind kind)
{
    lclient *u = check_client(L, 1);
    const char *name = check_name(L, 2);
    int fixed = !is_none_or_nil(L, 3);
    uint64_t tid = fixed ? (uint64_t)check_int(L, 3, 0, INT64_MAX) : 0;
    if (!u->c)
        return push_fail(L, HILOCK_ECLOSED, "client is closed");
    llock *k = (llock *)hlc_newuserdata(L, sizeof *k);
    memset(k, 0, sizeof *k);
    k->cl = u;
    k->tid = tid;
    k->fixed_tid = fixed;
    luaL_getmetatable(L, LOCK_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1); /* the lock keeps its client alive */
    hlc_setref(L, -2);
    int rc;
    if (kind == HILOCK_KIND_READ || kind == HILOCK_KIND_WRITE) {
        /* one read-write lock per Lua object; l is its side */
        rc = hilock_rwlock_new(&k->rw, u->c, name);
        if (rc == 0)
            k->l = kind == HILOCK_KIND_READ ? hilock_rwlock_read_lock(k->rw)
                                            : hilock_rwlock_write_lock(k->rw);
    } else {
        rc = kind == HILOCK_KIND_FAIR     ? hilock_fair_lock_new(&k->l, u->c, name)
             : kind == HILOCK_KIND_FENCED ? hilock_fenced_lock_new(&k->l, u->c, name)
                                          : hilock_lock_new(&k->l, u->c, name);
    }
    if (rc == HILOCK_EINVAL)
        return luaL_argerror(L, 2, "invalid lock name");
    if (rc)
        return push_fail(L, rc, NULL);
    return 1;
}

static int client_lock(lua_State *L) { return new_lock(L, HILOCK_KIND_REENTRANT); }
static int client_fair_lock(lua_State *L) { return new_lock(L, HILOCK_KIND_FAIR); }
static int client_fenced_lock(lua_State *L) { return new_lock(L, HILOCK_KIND_FENCED); }
static int client_read_lock(lua_State *L) { return new_lock(L, HILOCK_KIND_READ); }
static int client_write_lock(lua_State *L) { return new_lock(L, HILOCK_KIND_WRITE); }

/* ------------------------------------------------------------------ */
/* Lock                                                                */
/* ------------------------------------------------------------------ */

static llock *check_lock(lua_State *L, int idx)
{
    return (llock *)luaL_checkudata(L, idx, LOCK_MT);
}

/* 0 when the handle and its client are open; else pushes nil, err (2). */
static int lock_unusable(lua_State *L, llock *k)
{
    if (!k->l)
        return push_fail(L, HILOCK_ECLOSED, "lock handle is closed");
    if (!k->cl->c)
        return push_fail(L, HILOCK_ECLOSED, "client is closed");
    return 0;
}

static uint64_t lock_tid(const llock *k)
{
    return k->fixed_tid ? k->tid : hilock_thread_id();
}

static int lock_fail(lua_State *L, llock *k, int rc)
{
    return push_fail(L, rc, hilock_lock_errmsg(k->l));
}

/* lk:acquire([wait [, lease]]) -> true | nil, err */
static int lock_acquire(lua_State *L)
{
    llock *k = check_lock(L, 1);
    int64_t wait = check_seconds(L, 2, HILOCK_WAIT_FOREVER, 1);
    int64_t lease = check_seconds(L, 3, HILOCK_LEASE_WATCHDOG, 0);
    int n = lock_unusable(L, k);
    if (n)
        return n;
    int rc = hilock_lock_acquire_tid(k->l, lock_tid(k), wait, lease);
    if (rc)
        return lock_fail(L, k, rc);
    k->holds++;
    lua_pushboolean(L, 1);
    return 1;
}

/* lk:acquire_token([wait [, lease]]) -> token | nil, err (fenced lock:
 * the grant's fencing token; other kinds answer 0) */
static int lock_acquire_token(lua_State *L)
{
    llock *k = check_lock(L, 1);
    int64_t wait = check_seconds(L, 2, HILOCK_WAIT_FOREVER, 1);
    int64_t lease = check_seconds(L, 3, HILOCK_LEASE_WATCHDOG, 0);
    int n = lock_unusable(L, k);
    if (n)
        return n;
    int64_t token = 0;
    int rc = hilock_lock_acquire_token_tid(&token, k->l, lock_tid(k), wait, lease);
    if (rc)
        return lock_fail(L, k, rc);
    k->holds++;
    lua_pushinteger(L, (lua_Integer)token);
    return 1;
}

/* lk:token() -> the latest fencing token issued for the name (0 none) | nil, err */
static int lock_token(lua_State *L)
{
    llock *k = check_lock(L, 1);
    int n = lock_unusable(L, k);
    if (n)
        return n;
    int64_t token = 0;
    int rc = hilock_lock_token(&token, k->l);
    if (rc)
        return lock_fail(L, k, rc);
    lua_pushinteger(L, (lua_Integer)token);
    return 1;
}

/* lk:release() -> true | nil, err */
static int lock_release(lua_State *L)
{
    llock *k = check_lock(L, 1);
    int n = lock_unusable(L, k);
    if (n)
        return n;
    int rc = hilock_lock_release_tid(k->l, lock_tid(k));
    if (rc == HILOCK_ENOTOWNER)
        k->holds = 0;
    if (rc)
        return lock_fail(L, k, rc);
    if (k->holds > 0)
        k->holds--;
    lua_pushboolean(L, 1);
    return 1;
}

/* lk:force_unlock() -> deleted (boolean) | nil, err */
static int lock_force_unlock(lua_State *L)
{
    llock *k = check_lock(L, 1);
    int n = lock_unusable(L, k);
    if (n)
        return n;
    int deleted = 0;
    int rc = hilock_lock_force_unlock(&deleted, k->l);
    if (rc)
        return lock_fail(L, k, rc);
    k->holds = 0;
    lua_pushboolean(L, deleted);
    return 1;
}

static int lock_locked(lua_State *L)
{
    llock *k = check_lock(L, 1);
    int n = lock_unusable(L, k);
    if (n)
        return n;
    int out = 0;
    int rc = hilock_lock_is_locked(&out, k->l);
    if (rc)
        return lock_fail(L, k, rc);
    lua_pushboolean(L, out);
    return 1;
}

static int lock_held(lua_State *L)
{
    llock *k = check_lock(L, 1);
    int n = lock_unusable(L, k);
    if (n)
        return n;
    int out = 0;
    int rc = hilock_lock_is_held_tid(&out, k->l, lock_tid(k));
    if (rc)
        return lock_fail(L, k, rc);
    lua_pushboolean(L, out);
    return 1;
}

static int lock_hold_count(lua_State *L)
{
    llock *k = check_lock(L, 1);
    int n = lock_unusable(L, k);
    if (n)
        return n;
    int64_t out = 0;
    int rc = hilock_lock_hold_count_tid(&out, k->l, lock_tid(k));
    if (rc)
        return lock_fail(L, k, rc);
    push_i64(L, out);
    return 1;
}

/* lk:ttl() -> remaining lease in seconds; -2 no lock, -1 no expiry */
static int lock_ttl(lua_State *L)
{
    llock *k = check_lock(L, 1);
    int n = lock_unusable(L, k);
    if (n)
        return n;
    int64_t ms = 0;
    int rc = hilock_lock_remaining_ms(&ms, k->l);
    if (rc)
        return lock_fail(L, k, rc);
    if (ms < 0)
        push_i64(L, ms);
    else
        lua_pushnumber(L, (lua_Number)ms / 1000.0);
    return 1;
}

static int lock_lost(lua_State *L)
{
    llock *k = check_lock(L, 1);
    lua_pushboolean(L, k->l ? hilock_lock_is_lost_tid(k->l, lock_tid(k)) : 0);
    return 1;
}

static int lock_name(lua_State *L)
{
    llock *k = check_lock(L, 1);
    if (!k->l)
        return push_fail(L, HILOCK_ECLOSED, "lock handle is closed");
    lua_pushstring(L, hilock_lock_name(k->l));
    return 1;
}

static int lock_kind(lua_State *L)
{
    llock *k = check_lock(L, 1);
    if (!k->l)
        return push_fail(L, HILOCK_ECLOSED, "lock handle is closed");
    switch (hilock_lock_kind(k->l)) {
    case HILOCK_KIND_FAIR: lua_pushliteral(L, "fair"); break;
    case HILOCK_KIND_FENCED: lua_pushliteral(L, "fenced"); break;
    case HILOCK_KIND_READ: lua_pushliteral(L, "read"); break;
    case HILOCK_KIND_WRITE: lua_pushliteral(L, "write"); break;
    default: lua_pushliteral(L, "reentrant"); break;
    }
    return 1;
}

static int lock_thread_id(lua_State *L)
{
    push_u64(L, lock_tid(check_lock(L, 1)));
    return 1;
}

static void lock_free_handle(llock *k)
{
    if (k->rw) {
        hilock_rwlock_free(k->rw); /* frees its sides, k->l among them */
        k->rw = NULL;
    } else if (k->l) {
        hilock_lock_free(k->l);
    }
    k->l = NULL;
}

/* __gc: frees the handle; holds are not released (they expire after their
 * lease, as with hilock_lock_free). */
static int lock_gc(lua_State *L)
{
    lock_free_handle(check_lock(L, 1));
    return 0;
}

/* lk:close() (and __close on 5.4): releases every hold taken through this
 * handle, then frees it. Idempotent; never raises. */
static int lock_close(lua_State *L)
{
    llock *k = check_lock(L, 1);
    if (k->l && k->cl->c) {
        uint64_t tid = lock_tid(k);
        while (k->holds > 0) {
            k->holds--;
            if (hilock_lock_release_tid(k->l, tid) != 0)
                break;
        }
    }
    k->holds = 0;
    lock_free_handle(k);
    lua_pushboolean(L, 1);
    return 1;
}

static int lock_tostring(lua_State *L)
{
    llock *k = check_lock(L, 1);
    if (k->l)
        lua_pushfstring(L, "hilock.lock (%s)", hilock_lock_name(k->l));
    else
        lua_pushliteral(L, "hilock.lock (closed)");
    return 1;
}

/* ------------------------------------------------------------------ */
/* Protocol layer (hilock.proto)                                       */
/* ------------------------------------------------------------------ */

typedef struct plock {
    hl_names n;
    hilock_kind kind;
    int ok;
} plock;

typedef struct preader {
    redisReader *r;
    int broken;
} preader;

typedef struct preply {
    redisReply *r;
} preply;

typedef struct pacq {
    hl_acquire a;
    int ok;
    int resent; /* the current command was switched to EVAL already */
    char owner[HL_OWNER_MAX];
} pacq;

/* RESP array of bulk strings. */
static void push_resp(lua_State *L, int argc, const char *const *argv, const size_t *lens)
{
    luaL_Buffer b;
    char hdr[32];
    luaL_buffinit(L, &b);
    int n = snprintf(hdr, sizeof hdr, "*%d\r\n", argc);
    luaL_addlstring(&b, hdr, (size_t)n);
    for (int i = 0; i < argc; i++) {
        n = snprintf(hdr, sizeof hdr, "$%zu\r\n", lens[i]);
        luaL_addlstring(&b, hdr, (size_t)n);
        luaL_addlstring(&b, argv[i], lens[i]);
        luaL_addlstring(&b, "\r\n", 2);
    }
    luaL_pushresult(&b);
}

static void push_cmd(lua_State *L, hl_cmd *cmd, int eval)
{
    if (eval)
        hl_cmd_to_eval(cmd);
    push_resp(L, cmd->argc, cmd->argv, cmd->argvlen);
}

/* proto.command(arg, ...) -> RESP bytes of any command */
static int p_command(lua_State *L)
{
    int argc = lua_gettop(L);
    if (argc < 1)
        return luaL_argerror(L, 1, "expected a command name");
    if (argc > 1024)
        return luaL_argerror(L, 1025, "too many arguments");
    const char *argv[1024];
    size_t lens[1024];
    for (int i = 0; i < argc; i++) {
        int t = lua_type(L, i + 1);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            luaL_argerror(L, i + 1, "expected a string or a number");
        argv[i] = lua_tolstring(L, i + 1, &lens[i]);
    }
    push_resp(L, argc, argv, lens);
    return 1;
}

static int p_uuid(lua_State *L)
{
    char s[HL_UUID_LEN + 1];
    if (hl_uuid4(s) != 0)
        return luaL_error(L, "hilock: no random bytes for a uuid");
    lua_pushstring(L, s);
    return 1;
}

static int p_now_ms(lua_State *L)
{
    push_i64(L, mono_ms());
    return 1;
}

static void set_str_field(lua_State *L, const char *k, const char *v)
{
    if (v) {
        lua_pushstring(L, v);
        lua_setfield(L, -2, k);
    }
}

/* proto.parse_url(url) -> table | nil, err: the engine's URL parser
 * (docs/urls.md). Fields: mode ("single", "unix", "sentinel", "cluster"),
 * tls, host, port, path, user, password, db, seeds ({host=, port=}...),
 * master_name, sentinel_user, sentinel_password, connect_timeout_ms,
 * command_timeout_ms, tls_ca_file, tls_ca_dir, tls_cert_file,
 * tls_key_file, tls_server_name, tls_insecure. Absent settings are nil. */
static int p_parse_url(lua_State *L)
{
    size_t len;
    const char *url = luaL_checklstring(L, 1, &len);
    if (strlen(url) != len)
        return push_fail(L, HILOCK_EINVAL, "URL contains a NUL byte");
    hl_endpoint ep;
    char err[HL_URL_ERR_MAX] = "";
    int rc = hl_endpoint_parse(&ep, url, err);
    if (rc)
        return push_fail(L, rc, err);
    lua_newtable(L);
    lua_pushstring(L, ep.cluster ? "cluster" : ep.nseeds ? "sentinel" : ep.path ? "unix" : "single");
    lua_setfield(L, -2, "mode");
    lua_pushboolean(L, ep.tls);
    lua_setfield(L, -2, "tls");
    set_str_field(L, "host", ep.host);
    if (ep.host) {
        lua_pushinteger(L, ep.port);
        lua_setfield(L, -2, "port");
    }
    set_str_field(L, "path", ep.path);
    set_str_field(L, "user", ep.user);
    set_str_field(L, "password", ep.password);
    lua_pushinteger(L, ep.db);
    lua_setfield(L, -2, "db");
    if (ep.nseeds) {
        lua_createtable(L, ep.nseeds, 0);
        for (int i = 0; i < ep.nseeds; i++) {
            lua_createtable(L, 0, 2);
            lua_pushstring(L, ep.seed_hosts[i]);
            lua_setfield(L, -2, "host");
            lua_pushinteger(L, ep.seed_ports[i]);
            lua_setfield(L, -2, "port");
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -2, "seeds");
    }
    set_str_field(L, "master_name", ep.master_name);
    set_str_field(L, "sentinel_user", ep.sentinel_user);
    set_str_field(L, "sentinel_password", ep.sentinel_password);
    if (ep.connect_timeout_ms > 0) {
        push_i64(L, ep.connect_timeout_ms);
        lua_setfield(L, -2, "connect_timeout_ms");
    }
    if (ep.command_timeout_ms > 0) {
        push_i64(L, ep.command_timeout_ms);
        lua_setfield(L, -2, "command_timeout_ms");
    }
    set_str_field(L, "tls_ca_file", ep.tls_ca_file);
    set_str_field(L, "tls_ca_dir", ep.tls_ca_dir);
    set_str_field(L, "tls_cert_file", ep.tls_cert_file);
    set_str_field(L, "tls_key_file", ep.tls_key_file);
    set_str_field(L, "tls_server_name", ep.tls_server_name);
    lua_pushboolean(L, ep.tls_insecure);
    lua_setfield(L, -2, "tls_insecure");
    hl_endpoint_free(&ep);
    return 1;
}

/* proto.owner(client_id, thread_id) -> "<client_id>:<thread_id>" */
static int p_owner(lua_State *L)
{
    size_t len;
    const char *id = luaL_checklstring(L, 1, &len);
    if (len == 0 || len > 40 || strlen(id) != len)
        luaL_argerror(L, 1, "expected a client id (at most 40 bytes)");
    uint64_t tid = (uint64_t)check_int(L, 2, 0, INT64_MAX);
    char buf[HL_OWNER_MAX];
    hl_owner(buf, id, tid);
    lua_pushstring(L, buf);
    return 1;
}

static const char *check_owner(lua_State *L, int idx)
{
    size_t len;
    const char *s = luaL_checklstring(L, idx, &len);
    if (len == 0 || len >= HL_OWNER_MAX || strlen(s) != len)
        luaL_argerror(L, idx, "expected an owner string");
    return s;
}

static int eval_flag(lua_State *L, int idx)
{
    return lua_toboolean(L, idx);
}

/* The kinds of hilock.proto.lock, by name. */
static const char *const plock_kinds[] = {"reentrant", "fair", "fenced", "read", "write", NULL};
static const hilock_kind plock_kind_ids[] = {HILOCK_KIND_REENTRANT, HILOCK_KIND_FAIR,
                                             HILOCK_KIND_FENCED, HILOCK_KIND_READ,
                                             HILOCK_KIND_WRITE};

static const char *plock_kind_name(hilock_kind k)
{
    for (size_t i = 0; i < sizeof plock_kind_ids / sizeof plock_kind_ids[0]; i++)
        if (plock_kind_ids[i] == k)
            return plock_kinds[i];
    return "reentrant";
}

/* proto.lock(name [, kind [, sharded]]); kind: "reentrant" (default),
 * "fair", "fenced", "read" or "write" (the two sides of a read-write lock);
 * sharded: the scripts publish with SPUBLISH (Redis Cluster) instead of
 * PUBLISH. */
static int p_lock(lua_State *L)
{
    const char *name = check_name(L, 1);
    int sharded = lua_toboolean(L, 3);
    hilock_kind k = plock_kind_ids[luaL_checkoption(L, 2, "reentrant", plock_kinds)];
    plock *p = (plock *)hlc_newuserdata(L, sizeof *p);
    memset(p, 0, sizeof *p);
    p->kind = k;
    luaL_getmetatable(L, PLOCK_MT);
    lua_setmetatable(L, -2);
    if (hl_names_init(&p->n, name) != 0)
        return luaL_error(L, "out of memory");
    if (sharded)
        p->n.publish = "spublish";
    p->ok = 1;
    if (sharded && !hl_names_one_slot(&p->n))
        return luaL_argerror(L, 1, "empty or unclosed hash tag: on a cluster the lock's "
                                   "companion keys would land in another slot");
    return 1;
}

static plock *check_plock(lua_State *L, int idx)
{
    plock *p = (plock *)luaL_checkudata(L, idx, PLOCK_MT);
    if (!p->ok)
        luaL_argerror(L, idx, "freed lock names");
    return p;
}

static int plock_gc(lua_State *L)
{
    plock *p = (plock *)luaL_checkudata(L, 1, PLOCK_MT);
    if (p->ok) {
        hl_names_free(&p->n);
        p->ok = 0;
    }
    return 0;
}

static int plock_name(lua_State *L)
{
    lua_pushstring(L, check_plock(L, 1)->n.name);
    return 1;
}

static int plock_channel(lua_State *L)
{
    lua_pushstring(L, check_plock(L, 1)->n.channel);
    return 1;
}

/* p:slot() -> the Redis Cluster hash slot of the lock (and of all its
 * companion keys and channels) */
static int plock_slot(lua_State *L)
{
    plock *p = check_plock(L, 1);
    lua_pushinteger(L, (lua_Integer)hl_key_slot(p->n.name, strlen(p->n.name)));
    return 1;
}

/* proto.key_slot(key) -> Redis Cluster hash slot (0..16383) */
static int p_key_slot(lua_State *L)
{
    size_t len;
    const char *k = luaL_checklstring(L, 1, &len);
    lua_pushinteger(L, (lua_Integer)hl_key_slot(k, len));
    return 1;
}

static int plock_kind(lua_State *L)
{
    lua_pushstring(L, plock_kind_name(check_plock(L, 1)->kind));
    return 1;
}

/* p:hold_owner(client_id, thread_id) -> the hash field of that owner's hold:
 * "<client_id>:<thread_id>", with ":write" after it on a write side. */
static int plock_hold_owner(lua_State *L)
{
    plock *p = check_plock(L, 1);
    size_t len;
    const char *id = luaL_checklstring(L, 2, &len);
    if (len == 0 || len > 40 || strlen(id) != len)
        luaL_argerror(L, 2, "expected a client id (at most 40 bytes)");
    uint64_t tid = (uint64_t)check_int(L, 3, 0, INT64_MAX);
    char buf[HL_OWNER_MAX];
    hl_hold_owner(buf, p->kind, id, tid);
    lua_pushstring(L, buf);
    return 1;
}

static int plock_wait_channel(lua_State *L)
{
    plock *p = check_plock(L, 1);
    char *ch = hl_wait_channel(p->kind, &p->n, check_owner(L, 2));
    if (!ch)
        return luaL_error(L, "out of memory");
    lua_pushstring(L, ch);
    free(ch);
    return 1;
}

/* p:latch_key(request_id) -> "redisson_unlock_latch:{N}:<request_id>" */
static int plock_latch_key(lua_State *L)
{
    plock *p = check_plock(L, 1);
    const char *id = luaL_checkstring(L, 2);
    lua_pushfstring(L, "%s:%s", p->n.latch_prefix, id);
    return 1;
}

/* p:acquire_cmd(owner, lease_ms, window_ms [, eval]); window_ms -1 = one try */
static int plock_acquire_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    const char *owner = check_owner(L, 2);
    int64_t lease = check_int(L, 3, 1, HILOCK_MAX_TIME_MS);
    int64_t window = check_int(L, 4, -1, HILOCK_MAX_TIME_MS);
    hl_cmd cmd;
    hl_cmd_acquire(&cmd, p->kind, &p->n, owner, lease, window);
    push_cmd(L, &cmd, eval_flag(L, 5));
    return 1;
}

/* p:release_cmd(owner, lease_ms, latch_key, latch_ttl_ms [, eval]) */
static int plock_release_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    const char *owner = check_owner(L, 2);
    int64_t lease = check_int(L, 3, 1, HILOCK_MAX_TIME_MS);
    const char *latch = luaL_checkstring(L, 4);
    int64_t latch_ttl = check_int(L, 5, 1, HILOCK_MAX_TIME_MS);
    hl_cmd cmd;
    hl_cmd_release(&cmd, p->kind, &p->n, owner, lease, latch, latch_ttl);
    push_cmd(L, &cmd, eval_flag(L, 6));
    return 1;
}

static int plock_force_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    hl_cmd cmd;
    hl_cmd_force(&cmd, p->kind, &p->n);
    push_cmd(L, &cmd, eval_flag(L, 2));
    return 1;
}

static int plock_renew_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    const char *owner = check_owner(L, 2);
    int64_t lease = check_int(L, 3, 1, HILOCK_MAX_TIME_MS);
    hl_cmd cmd;
    hl_cmd_renew_kind(&cmd, p->kind, &p->n, owner, lease);
    push_cmd(L, &cmd, eval_flag(L, 4));
    return 1;
}

static int plock_cancel_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    const char *owner = check_owner(L, 2);
    int64_t window = check_int(L, 3, 0, HILOCK_MAX_TIME_MS);
    hl_cmd cmd;
    hl_cmd_fair_cancel(&cmd, &p->n, owner, window);
    push_cmd(L, &cmd, eval_flag(L, 4));
    return 1;
}

static int plock_exists_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    hl_cmd cmd;
    hl_cmd_exists(&cmd, &p->n);
    push_cmd(L, &cmd, 0);
    return 1;
}

/* p:locked_cmd() -> "is it locked" (EXISTS; on a read-write side, whether
 * the lock's mode is that side's), answered through p:decode_locked(r). */
static int plock_locked_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    hl_cmd cmd;
    hl_cmd_is_locked(&cmd, p->kind, &p->n);
    push_cmd(L, &cmd, 0);
    return 1;
}

/* p:token_cmd() -> GET of the fencing token counter (proto.decode_token) */
static int plock_token_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    hl_cmd cmd;
    hl_cmd_token(&cmd, &p->n);
    push_cmd(L, &cmd, 0);
    return 1;
}

static int plock_hexists_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    hl_cmd cmd;
    hl_cmd_hexists(&cmd, &p->n, check_owner(L, 2));
    push_cmd(L, &cmd, 0);
    return 1;
}

static int plock_hget_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    hl_cmd cmd;
    hl_cmd_hget(&cmd, &p->n, check_owner(L, 2));
    push_cmd(L, &cmd, 0);
    return 1;
}

static int plock_pttl_cmd(lua_State *L)
{
    plock *p = check_plock(L, 1);
    hl_cmd cmd;
    hl_cmd_pttl(&cmd, &p->n);
    push_cmd(L, &cmd, 0);
    return 1;
}

/* ---- reader and replies ---- */

static int p_reader(lua_State *L)
{
    preader *r = (preader *)hlc_newuserdata(L, sizeof *r);
    r->r = NULL;
    r->broken = 0;
    luaL_getmetatable(L, PREADER_MT);
    lua_setmetatable(L, -2);
    r->r = redisReaderCreate();
    if (!r->r)
        return luaL_error(L, "out of memory");
    hl_reader_bound(r->r); /* no allocation from a reply header alone */
    return 1;
}

static preader *check_reader(lua_State *L, int idx)
{
    preader *r = (preader *)luaL_checkudata(L, idx, PREADER_MT);
    if (!r->r)
        luaL_argerror(L, idx, "freed reader");
    return r;
}

static int reader_gc(lua_State *L)
{
    preader *r = (preader *)luaL_checkudata(L, 1, PREADER_MT);
    if (r->r) {
        redisReaderFree(r->r);
        r->r = NULL;
    }
    return 0;
}

/* rd:feed(bytes) -> true | nil, err */
static int reader_feed(lua_State *L)
{
    preader *r = check_reader(L, 1);
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len);
    if (r->broken || redisReaderFeed(r->r, s, len) != REDIS_OK) {
        r->broken = 1;
        return push_fail(L, HILOCK_EPROTO, r->r->errstr);
    }
    lua_pushboolean(L, 1);
    return 1;
}

static void push_reply(lua_State *L, redisReply *rep)
{
    preply *p = (preply *)hlc_newuserdata(L, sizeof *p);
    p->r = rep;
    luaL_getmetatable(L, PREPLY_MT);
    lua_setmetatable(L, -2);
}

/* rd:get() -> reply | nil (needs more bytes) | nil, err (bad stream) */
static int reader_get(lua_State *L)
{
    preader *r = check_reader(L, 1);
    void *rep = NULL;
    if (r->broken)
        return push_fail(L, HILOCK_EPROTO, r->r->errstr[0] ? r->r->errstr : "broken stream");
    if (redisReaderGetReply(r->r, &rep) != REDIS_OK) {
        r->broken = 1;
        return push_fail(L, HILOCK_EPROTO, r->r->errstr);
    }
    if (!rep) {
        lua_pushnil(L);
        return 1;
    }
    push_reply(L, (redisReply *)rep);
    return 1;
}

/* Bytes fed but not yet consumed as replies. */
static int reader_pending(lua_State *L)
{
    preader *r = check_reader(L, 1);
    lua_pushinteger(L, (lua_Integer)(r->r->len - r->r->pos));
    return 1;
}

static redisReply *check_reply(lua_State *L, int idx)
{
    preply *p = (preply *)luaL_checkudata(L, idx, PREPLY_MT);
    if (!p->r)
        luaL_argerror(L, idx, "freed reply");
    return p->r;
}

static int reply_gc(lua_State *L)
{
    preply *p = (preply *)luaL_checkudata(L, 1, PREPLY_MT);
    if (p->r) {
        freeReplyObject(p->r);
        p->r = NULL;
    }
    return 0;
}

static const char *reply_type_name(int t)
{
    switch (t) {
    case REDIS_REPLY_STRING: return "string";
    case REDIS_REPLY_ARRAY: return "array";
    case REDIS_REPLY_INTEGER: return "integer";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "status";
    case REDIS_REPLY_ERROR: return "error";
    default: return "unknown";
    }
}

static int reply_type(lua_State *L)
{
    lua_pushstring(L, reply_type_name(check_reply(L, 1)->type));
    return 1;
}

/* Plain Lua value: strings/status as strings, integers as numbers, nil as
 * false (so it can sit in an array), arrays as tables, errors as
 * {err = "..."}. */
static void push_value(lua_State *L, const redisReply *r, int depth)
{
    luaL_checkstack(L, 4, "reply too deep");
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        lua_pushlstring(L, r->str, r->len);
        break;
    case REDIS_REPLY_INTEGER:
        push_i64(L, (int64_t)r->integer);
        break;
    case REDIS_REPLY_ARRAY:
        lua_createtable(L, (int)r->elements, 0);
        for (size_t i = 0; i < r->elements; i++) {
            if (depth > 32)
                lua_pushboolean(L, 0);
            else
                push_value(L, r->element[i], depth + 1);
            lua_rawseti(L, -2, (int)i + 1);
        }
        break;
    case REDIS_REPLY_ERROR:
        lua_createtable(L, 0, 1);
        lua_pushlstring(L, r->str, r->len);
        lua_setfield(L, -2, "err");
        break;
    default:
        lua_pushboolean(L, 0);
        break;
    }
}

/* r:value() -> the reply as a Lua value; for an error reply: nil, message */
static int reply_value(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    if (r->type == REDIS_REPLY_ERROR) {
        lua_pushnil(L);
        lua_pushlstring(L, r->str, r->len);
        return 2;
    }
    push_value(L, r, 0);
    return 1;
}

/* r:error() -> the error message of an error reply, else nil */
static int reply_error_msg(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    if (r->type == REDIS_REPLY_ERROR)
        lua_pushlstring(L, r->str, r->len);
    else
        lua_pushnil(L);
    return 1;
}

static int reply_is_noscript(lua_State *L)
{
    lua_pushboolean(L, hl_reply_is_noscript(check_reply(L, 1)));
    return 1;
}

/* A failed decode: nil, "<prefix>[: <server message>]". */
static int decode_fail(lua_State *L, const redisReply *r, int rc)
{
    return push_fail(L, rc, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
}

/* proto.decode_acquire(r) -> acquired, hold_count_or_ttl_ms | nil, err */
static int p_decode_acquire(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    hl_acquire_result res;
    int rc = hl_decode_acquire(r, &res);
    if (rc)
        return decode_fail(L, r, rc);
    lua_pushboolean(L, res.acquired);
    push_i64(L, res.acquired ? res.hold_count : res.ttl_ms);
    return 2;
}

/* proto.decode_release(r) -> remaining holds | nil, "not owner" | nil, err */
static int p_decode_release(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    hl_release_result res;
    int rc = hl_decode_release(r, &res);
    if (rc)
        return decode_fail(L, r, rc);
    if (res.not_owner)
        return push_fail(L, HILOCK_ENOTOWNER, NULL);
    push_i64(L, res.remaining);
    return 1;
}

static int p_decode_int(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    int64_t v;
    int rc = hl_decode_int(r, &v);
    if (rc)
        return decode_fail(L, r, rc);
    push_i64(L, v);
    return 1;
}

static int p_decode_hold_count(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    int64_t v;
    int rc = hl_decode_hold_count(r, &v);
    if (rc)
        return decode_fail(L, r, rc);
    push_i64(L, v);
    return 1;
}

/* p:decode_locked(r) -> true | false | nil, err */
static int plock_decode_locked(lua_State *L)
{
    plock *p = check_plock(L, 1);
    redisReply *r = check_reply(L, 2);
    int64_t v = 0;
    int rc = hl_decode_is_locked(p->kind, r, &v);
    if (rc)
        return decode_fail(L, r, rc);
    lua_pushboolean(L, v != 0);
    return 1;
}

/* proto.decode_token(r) -> the fencing token counter (0: none yet) | nil, err */
static int p_decode_token(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    int64_t v;
    int rc = hl_decode_token(r, &v);
    if (rc)
        return decode_fail(L, r, rc);
    push_i64(L, v);
    return 1;
}

/* proto.decode_pubsub(r) -> "message"|"subscribe"|"unsubscribe"|"other",
 * channel, payload (0 wake one, 1 wake all, -1 ignore) */
static int p_decode_pubsub(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    hl_ps_event ev;
    hl_decode_pubsub(r, &ev);
    static const char *const names[] = {"other", "message", "subscribe", "unsubscribe"};
    lua_pushstring(L, names[ev.type]);
    if (ev.channel)
        lua_pushlstring(L, ev.channel, ev.channel_len);
    else
        lua_pushnil(L);
    lua_pushinteger(L, ev.payload);
    return 3;
}

/* ---- the acquire state machine ---- */

/* p:acquire(owner, wait_ms, lease_ms, window_ms) -> machine
 * wait_ms: -1 forever, 0 one try; lease_ms > 0 (the driver applies its
 * watchdog lease itself); window_ms: the fair wait window. */
static int plock_acquire(lua_State *L)
{
    plock *p = check_plock(L, 1);
    size_t olen;
    const char *owner = check_owner(L, 2);
    olen = strlen(owner);
    int64_t wait = check_int(L, 3, -1, HILOCK_MAX_TIME_MS);
    int64_t lease = check_int(L, 4, 1, HILOCK_MAX_TIME_MS);
    int64_t window = check_int(L, 5, 1, HILOCK_MAX_TIME_MS);
    pacq *m = (pacq *)hlc_newuserdata(L, sizeof *m);
    memset(m, 0, sizeof *m);
    luaL_getmetatable(L, PACQ_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1); /* the machine borrows the names */
    hlc_setref(L, -2);
    memcpy(m->owner, owner, olen + 1);
    if (hl_acquire_init(&m->a, p->kind, &p->n, m->owner, wait, lease, window, mono_ms()) != 0) {
        hl_acquire_free(&m->a);
        return luaL_error(L, "out of memory");
    }
    m->ok = 1;
    return 1;
}

static pacq *check_acq(lua_State *L, int idx)
{
    pacq *m = (pacq *)luaL_checkudata(L, idx, PACQ_MT);
    if (!m->ok)
        luaL_argerror(L, idx, "freed acquire machine");
    return m;
}

static int acq_free(lua_State *L)
{
    pacq *m = (pacq *)luaL_checkudata(L, 1, PACQ_MT);
    if (m->ok) {
        hl_acquire_free(&m->a);
        m->ok = 0;
    }
    return 0;
}

/*
 * m:next() ->
 *   "send", bytes                 send, read one reply, m:on_reply(reply)
 *   "subscribe", channel          subscribe, m:on_subscribed(ok)
 *   "wait", channel, sleep_ms     wait for a message (or sleep_ms; -1 = no
 *                                 limit), then m:on_wake()
 *   "unsubscribe", channel        drop the subscription
 *   "done", true, hold_count, token  acquired (token: a fenced lock's
 *                                 fencing token of this grant, else 0)
 *   "done", nil, err              timeout or failure
 */
static int acq_next(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_action act = hl_acquire_next(&m->a, mono_ms());
    switch (act) {
    case HL_ACT_SEND:
        m->resent = 0;
        lua_pushliteral(L, "send");
        push_cmd(L, &m->a.cmd, 0);
        return 2;
    case HL_ACT_SUBSCRIBE:
        lua_pushliteral(L, "subscribe");
        lua_pushstring(L, m->a.channel);
        return 2;
    case HL_ACT_WAIT:
        lua_pushliteral(L, "wait");
        lua_pushstring(L, m->a.channel);
        push_i64(L, m->a.sleep_ms);
        return 3;
    case HL_ACT_UNSUBSCRIBE:
        lua_pushliteral(L, "unsubscribe");
        lua_pushstring(L, m->a.channel);
        return 2;
    case HL_ACT_DONE:
    default:
        lua_pushliteral(L, "done");
        if (m->a.result == 0) {
            lua_pushboolean(L, 1);
            push_i64(L, m->a.hold_count);
            push_i64(L, m->a.token); /* a fenced grant's token, else 0 */
            return 4;
        }
        return 1 + push_fail(L, m->a.result, NULL);
    }
}

/* m:on_reply(reply) -> nil, or the bytes to send again (EVAL after
 * NOSCRIPT; feed that reply to on_reply too). */
static int acq_on_reply(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    redisReply *r = check_reply(L, 2);
    if (hl_reply_is_noscript(r) && m->a.cmd.script >= 0 && !m->resent) {
        m->resent = 1;
        push_cmd(L, &m->a.cmd, 1);
        return 1;
    }
    hl_acquire_on_reply(&m->a, r, mono_ms());
    return 0;
}

/* m:on_error([err]) -- the command could not be sent or answered; err is
 * a message with a stable prefix ("connection: ..."), default connection. */
static int acq_on_error(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_acquire_on_error(&m->a, err_code(luaL_optstring(L, 2, NULL)), mono_ms());
    return 0;
}

static int acq_on_subscribed(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_acquire_on_subscribed(&m->a, lua_toboolean(L, 2), mono_ms());
    return 0;
}

static int acq_on_wake(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_acquire_on_wake(&m->a, mono_ms());
    return 0;
}

/* m:on_resubscribe() -- the subscription was ended by the server (the
 * slot moved): the machine unsubscribes, subscribes again, retries. */
static int acq_on_resubscribe(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_acquire_on_resubscribe(&m->a, mono_ms());
    return 0;
}

static int acq_channel(lua_State *L)
{
    lua_pushstring(L, check_acq(L, 1)->a.channel);
    return 1;
}

static int acq_attempts(lua_State *L)
{
    push_i64(L, check_acq(L, 1)->a.attempts);
    return 1;
}

/* The release, settle, router and replica-ack machines, pub/sub and
 * topology commands (same translation unit: see the file's header). */
#include "hilock_engine.c"

/* ------------------------------------------------------------------ */
/* Module                                                              */
/* ------------------------------------------------------------------ */

static int l_thread_id(lua_State *L)
{
    push_u64(L, hilock_thread_id());
    return 1;
}

static int l_strerror(lua_State *L)
{
    int code = (int)luaL_checkinteger(L, 1);
    lua_pushstring(L, err_prefix(code));
    return 1;
}

static const luaL_Reg client_methods[] = {
    {"lock", client_lock},
    {"fair_lock", client_fair_lock},
    {"fenced_lock", client_fenced_lock},
    {"read_lock", client_read_lock},
    {"write_lock", client_write_lock},
    {"close", client_close},
    {"closed", client_closed},
    {"id", client_id},
    {"errmsg", client_errmsg},
    {NULL, NULL}};

static const luaL_Reg client_meta[] = {
    {"__gc", client_close},
#if LUA_VERSION_NUM >= 504
    {"__close", client_close},
#endif
    {"__tostring", client_tostring},
    {NULL, NULL}};

static const luaL_Reg lock_methods[] = {
    {"acquire", lock_acquire},
    {"acquire_token", lock_acquire_token},
    {"token", lock_token},
    {"release", lock_release},
    {"force_unlock", lock_force_unlock},
    {"locked", lock_locked},
    {"held", lock_held},
    {"hold_count", lock_hold_count},
    {"ttl", lock_ttl},
    {"lost", lock_lost},
    {"name", lock_name},
    {"kind", lock_kind},
    {"thread_id", lock_thread_id},
    {"close", lock_close},
    {NULL, NULL}};

static const luaL_Reg lock_meta[] = {
    {"__gc", lock_gc},
#if LUA_VERSION_NUM >= 504
    {"__close", lock_close},
#endif
    {"__tostring", lock_tostring},
    {NULL, NULL}};

static const luaL_Reg plock_methods[] = {
    {"name", plock_name},
    {"channel", plock_channel},
    {"kind", plock_kind},
    {"hold_owner", plock_hold_owner},
    {"slot", plock_slot},
    {"wait_channel", plock_wait_channel},
    {"latch_key", plock_latch_key},
    {"acquire", plock_acquire},
    {"release", plock_release},
    {"force", plock_force},
    {"acquire_cmd", plock_acquire_cmd},
    {"release_cmd", plock_release_cmd},
    {"force_cmd", plock_force_cmd},
    {"renew_cmd", plock_renew_cmd},
    {"cancel_cmd", plock_cancel_cmd},
    {"exists_cmd", plock_exists_cmd},
    {"locked_cmd", plock_locked_cmd},
    {"decode_locked", plock_decode_locked},
    {"token_cmd", plock_token_cmd},
    {"hexists_cmd", plock_hexists_cmd},
    {"hget_cmd", plock_hget_cmd},
    {"pttl_cmd", plock_pttl_cmd},
    {NULL, NULL}};

static const luaL_Reg plock_meta[] = {{"__gc", plock_gc}, {NULL, NULL}};

static const luaL_Reg reader_methods[] = {
    {"feed", reader_feed},
    {"get", reader_get},
    {"pending", reader_pending},
    {NULL, NULL}};

static const luaL_Reg reader_meta[] = {{"__gc", reader_gc}, {NULL, NULL}};

static const luaL_Reg reply_methods[] = {
    {"type", reply_type},
    {"value", reply_value},
    {"error", reply_error_msg},
    {"is_noscript", reply_is_noscript},
    {"free", reply_gc},
    {NULL, NULL}};

static const luaL_Reg reply_meta[] = {{"__gc", reply_gc}, {NULL, NULL}};

static const luaL_Reg acq_methods[] = {
    {"next", acq_next},
    {"on_reply", acq_on_reply},
    {"on_error", acq_on_error},
    {"on_subscribed", acq_on_subscribed},
    {"on_wake", acq_on_wake},
    {"on_resubscribe", acq_on_resubscribe},
    {"on_unknown", acq_on_unknown},
    {"channel", acq_channel},
    {"attempts", acq_attempts},
    {"free", acq_free},
    {NULL, NULL}};

static const luaL_Reg acq_meta[] = {{"__gc", acq_free}, {NULL, NULL}};

static const luaL_Reg proto_funcs[] = {
    {"lock", p_lock},
    {"reader", p_reader},
    {"command", p_command},
    {"uuid", p_uuid},
    {"now_ms", p_now_ms},
    {"owner", p_owner},
    {"parse_url", p_parse_url},
    {"key_slot", p_key_slot},
    {"decode_acquire", p_decode_acquire},
    {"decode_release", p_decode_release},
    {"decode_int", p_decode_int},
    {"decode_hold_count", p_decode_hold_count},
    {"decode_token", p_decode_token},
    {"decode_pubsub", p_decode_pubsub},
    {NULL, NULL}};

static const luaL_Reg module_funcs[] = {
    {"connect", l_connect},
    {"thread_id", l_thread_id},
    {"strerror", l_strerror},
    {NULL, NULL}};

LHL_EXPORT int luaopen_hilock(lua_State *L)
{
    new_metatable(L, CLIENT_MT, client_methods, client_meta);
    new_metatable(L, LOCK_MT, lock_methods, lock_meta);
    new_metatable(L, PLOCK_MT, plock_methods, plock_meta);
    new_metatable(L, PREADER_MT, reader_methods, reader_meta);
    new_metatable(L, PREPLY_MT, reply_methods, reply_meta);
    new_metatable(L, PACQ_MT, acq_methods, acq_meta);

    lua_newtable(L);
    hlc_setfuncs(L, module_funcs);
    lua_pushstring(L, hilock_version_string());
    lua_setfield(L, -2, "version");
    lua_pushinteger(L, hilock_version());
    lua_setfield(L, -2, "version_number");
    lua_pushliteral(L, "hilock " HILOCK_VERSION_STRING);
    lua_setfield(L, -2, "_VERSION");

    lua_newtable(L);
    hlc_setfuncs(L, proto_funcs);
    engine_register(L);
    lua_setfield(L, -2, "proto");
    return 1;
}
