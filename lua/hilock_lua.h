/*
 * hilock Lua C module: what its translation units share.
 *
 *   hilock.c         the module (luaopen_hilock), argument and error helpers
 *   hilock_client.c  the blocking binding: hilock.connect, client and lock
 *                    objects over the C API (hilock.h)
 *   hilock_sem.c     semaphores and the count-down latch (client methods)
 *   hilock_engine.c  hilock.proto, the engine binding for drivers that do
 *                    their own I/O (resty/hilock.lua): names, commands,
 *                    the reply reader and decoders, the sans-I/O machines
 *
 * Only luaopen_hilock leaves the module (version script); the lhl_*
 * functions are hidden.
 */
#ifndef HILOCK_LUA_H
#define HILOCK_LUA_H

#include <stdint.h>

#include "hilock.h"
#include "hilock_compat.h"

#define LHL_NAME_MAX 4096 /* longest lock name, bytes */

/* ---- errors (hilock.c) ---- */
/* The stable prefix of every runtime error message ("timeout", ...). */
const char *lhl_err_prefix(int code);
/* The code of a message with such a prefix (drivers reporting their own
 * failures); HILOCK_ECONN when none matches. */
int lhl_err_code(const char *msg);
/* Push nil and "prefix[: detail]"; returns 2. */
int lhl_push_fail(lua_State *L, int code, const char *detail);

/* ---- arguments and values (hilock.c); bad arguments raise ---- */
int lhl_is_none_or_nil(lua_State *L, int idx);
/* Seconds (float) to ms: nil/none -> if_nil; 0 only when allow_zero; a
 * positive value never rounds to 0. */
int64_t lhl_check_seconds(lua_State *L, int idx, int64_t if_nil, int allow_zero);
/* An integer argument within [min, max]. */
int64_t lhl_check_int(lua_State *L, int idx, int64_t min, int64_t max);
/* A lock name: non-empty, no NUL byte, at most LHL_NAME_MAX bytes. */
const char *lhl_check_name(lua_State *L, int idx);
void lhl_push_u64(lua_State *L, uint64_t v);
void lhl_push_i64(lua_State *L, int64_t v);
int64_t lhl_mono_ms(void);
/* Register a metatable `name` with methods as __index and meta as its
 * metamethods; the stack is left as it was. */
void lhl_new_metatable(lua_State *L, const char *name, const luaL_Reg *methods,
                       const luaL_Reg *meta);

/* ---- the two bindings: each registers its metatables and sets its
 * functions into the table on the top of the stack ---- */
void lhl_client_open(lua_State *L); /* the module table: connect */

/* ---- semaphores and latch (hilock_sem.c), methods of the client ---- */
/* The client userdata at idx (raises when it is not one): the address of
 * its C handle, which is NULL once the client is closed. */
hilock_client **lhl_check_client(lua_State *L, int idx);
int lhl_client_semaphore(lua_State *L);        /* c:semaphore(name) */
int lhl_client_permit_semaphore(lua_State *L); /* c:permit_semaphore(name) */
int lhl_client_latch(lua_State *L);            /* c:latch(name) */
void lhl_sem_open(lua_State *L);               /* registers their metatables */
void lhl_engine_open(lua_State *L); /* the hilock.proto table */

#endif
