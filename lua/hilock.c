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
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "hilock_lua.h"
#include "proto.h"

#define LHL_EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------ */
/* Errors and arguments                                                */
/* ------------------------------------------------------------------ */

/* The stable prefix of every runtime error message. */
const char *lhl_err_prefix(int code)
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
    case HILOCK_ECANCELED: return "canceled";
    case HILOCK_EUNACKED: return "not acknowledged";
    default: return "error";
    }
}

/* The code of a prefix (for drivers reporting their own failures). */
int lhl_err_code(const char *msg)
{
    static const int codes[] = {HILOCK_EINVAL, HILOCK_ETIMEDOUT, HILOCK_ENOTOWNER,
                                HILOCK_ELOST, HILOCK_ECONN, HILOCK_EPROTO,
                                HILOCK_EAUTH, HILOCK_EWRONGTYPE, HILOCK_ENOMEM,
                                HILOCK_ECLOSED, HILOCK_ETLS, HILOCK_ECANCELED,
                                HILOCK_EUNACKED};
    if (!msg)
        return HILOCK_ECONN;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *p = lhl_err_prefix(codes[i]);
        size_t n = strlen(p);
        if (strncmp(msg, p, n) == 0 && (msg[n] == 0 || msg[n] == ':'))
            return codes[i];
    }
    return HILOCK_ECONN;
}

/* Push nil and "prefix[: detail]"; returns 2. */
int lhl_push_fail(lua_State *L, int code, const char *detail)
{
    const char *prefix = lhl_err_prefix(code);
    lua_pushnil(L);
    if (detail && *detail && strcmp(detail, prefix) != 0)
        lua_pushfstring(L, "%s: %s", prefix, detail);
    else
        lua_pushstring(L, prefix);
    return 2;
}

int lhl_is_none_or_nil(lua_State *L, int idx)
{
    return lua_type(L, idx) <= 0; /* LUA_TNONE (-1) or LUA_TNIL (0) */
}

/*
 * Seconds (float) to ms. nil/none -> if_nil. Negative, NaN or too large
 * raise; 0 raises unless allow_zero. A positive value never rounds to 0.
 */
int64_t lhl_check_seconds(lua_State *L, int idx, int64_t if_nil, int allow_zero)
{
    if (lhl_is_none_or_nil(L, idx))
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
int64_t lhl_check_int(lua_State *L, int idx, int64_t min, int64_t max)
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

void lhl_push_u64(lua_State *L, uint64_t v)
{
#if HLC_HAS_INTEGERS
    lua_pushinteger(L, (lua_Integer)v);
#else
    lua_pushnumber(L, (lua_Number)v);
#endif
}

void lhl_push_i64(lua_State *L, int64_t v)
{
#if HLC_HAS_INTEGERS
    lua_pushinteger(L, (lua_Integer)v);
#else
    lua_pushnumber(L, (lua_Number)v);
#endif
}

/* A lock name: non-empty, no NUL byte, at most LHL_NAME_MAX bytes. */
const char *lhl_check_name(lua_State *L, int idx)
{
    size_t len;
    const char *s = luaL_checklstring(L, idx, &len);
    char why[128];
    if (hl_name_check(s, len, why, sizeof why)) /* the engine's words, as every binding's */
        luaL_argerror(L, idx, why);
    return s;
}

int64_t lhl_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void lhl_new_metatable(lua_State *L, const char *name, const luaL_Reg *methods,
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
/* Module                                                              */
/* ------------------------------------------------------------------ */

static int l_thread_id(lua_State *L)
{
    lhl_push_u64(L, hilock_thread_id());
    return 1;
}

static int l_strerror(lua_State *L)
{
    int code = (int)luaL_checkinteger(L, 1);
    lua_pushstring(L, lhl_err_prefix(code));
    return 1;
}

/* hilock.redact_url(url) -> url with every password shown as *** (the C
 * hilock_url_redact): what to print or log instead of a URL. */
static int l_redact_url(lua_State *L)
{
    const char *url = luaL_checkstring(L, 1);
    char stack[512];
    size_t n = hilock_url_redact(stack, sizeof stack, url);
    if (n < sizeof stack) {
        lua_pushlstring(L, stack, n);
        return 1;
    }
    char *buf = lua_newuserdata(L, n + 1); /* freed by the collector */
    hilock_url_redact(buf, n + 1, url);
    lua_pushlstring(L, buf, n);
    return 1;
}

static const luaL_Reg module_funcs[] = {
    {"thread_id", l_thread_id},
    {"redact_url", l_redact_url},
    {"strerror", l_strerror},
    {NULL, NULL}};

LHL_EXPORT int luaopen_hilock(lua_State *L)
{
    lua_newtable(L);
    hlc_setfuncs(L, module_funcs);
    lhl_client_open(L);
    lua_pushstring(L, hilock_version_string());
    lua_setfield(L, -2, "version");
    lua_pushinteger(L, hilock_version());
    lua_setfield(L, -2, "version_number");
    lua_pushliteral(L, "hilock " HILOCK_VERSION_STRING);
    lua_setfield(L, -2, "_VERSION");

    lua_newtable(L);
    lhl_engine_open(L);
    lua_setfield(L, -2, "proto");
    return 1;
}
