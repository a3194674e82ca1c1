/*
 * Small compatibility shims between the Lua 5.1 / LuaJIT 2.1 C API and the
 * Lua 5.4 one, used by the module's files (hilock_lua.h). Every shim is named hlc_* so it cannot clash
 * with anything the Lua headers (or another compat layer) define.
 */
#ifndef HILOCK_LUA_COMPAT_H
#define HILOCK_LUA_COMPAT_H

#include <lua.h>
#include <lauxlib.h>

#if LUA_VERSION_NUM >= 502
#define HLC_HAS_INTEGERS (LUA_VERSION_NUM >= 503)
#else
#define HLC_HAS_INTEGERS 0
#endif

/* A full userdata with room for one Lua value kept alive by it. */
static inline void *hlc_newuserdata(lua_State *L, size_t size)
{
#if LUA_VERSION_NUM >= 504
    return lua_newuserdatauv(L, size, 1);
#else
    return lua_newuserdata(L, size);
#endif
}

/* Pops the value on top of the stack and stores it in the userdata at idx. */
static inline void hlc_setref(lua_State *L, int idx)
{
    idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
#if LUA_VERSION_NUM >= 504
    lua_setiuservalue(L, idx, 1);
#elif LUA_VERSION_NUM >= 502
    lua_setuservalue(L, idx);
#else
    /* 5.1/LuaJIT: a userdata's environment must be a table. */
    lua_createtable(L, 1, 0);
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
    lua_setfenv(L, idx);
#endif
}

/* Pushes the value stored by hlc_setref (nil when none). */
static inline void hlc_getref(lua_State *L, int idx)
{
#if LUA_VERSION_NUM >= 504
    lua_getiuservalue(L, idx, 1);
#elif LUA_VERSION_NUM >= 502
    lua_getuservalue(L, idx);
#else
    lua_getfenv(L, idx);
    if (lua_istable(L, -1)) {
        lua_rawgeti(L, -1, 1);
        lua_remove(L, -2);
    } else {
        lua_pop(L, 1);
        lua_pushnil(L);
    }
#endif
}

/* luaL_setfuncs without upvalues. */
static inline void hlc_setfuncs(lua_State *L, const luaL_Reg *l)
{
#if LUA_VERSION_NUM >= 502
    luaL_setfuncs(L, l, 0);
#else
    luaL_register(L, NULL, l);
#endif
}

/* luaL_testudata (5.2+), written out for 5.1. */
static inline void *hlc_testudata(lua_State *L, int idx, const char *tname)
{
#if LUA_VERSION_NUM >= 502
    return luaL_testudata(L, idx, tname);
#else
    void *p = lua_touserdata(L, idx);
    if (!p || !lua_getmetatable(L, idx))
        return NULL;
    luaL_getmetatable(L, tname);
    int same = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    return same ? p : NULL;
#endif
}

/* Length of a string or table without metamethods. */
static inline size_t hlc_rawlen(lua_State *L, int idx)
{
#if LUA_VERSION_NUM >= 502
    return lua_rawlen(L, idx);
#else
    return lua_objlen(L, idx);
#endif
}

#endif
