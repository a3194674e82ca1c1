/*
 * Semaphore, permit-expirable semaphore and count-down latch for the plain
 * Lua module. Every call is one C API call; the conventions are the locks':
 * bad arguments raise (permits or counts out of range too), runtime
 * failures return nil plus "prefix: detail", times are float seconds.
 *
 *   local s = c:semaphore("jobs");   s:try_set_permits(4)
 *   assert(s:acquire(1, 60));        ...;  s:release(1)
 *   local p = c:permit_semaphore("slots")
 *   local id = assert(p:acquire(5, 30)); ...; p:release(id)
 *   local l = c:latch("batch");      l:try_set_count(3); l:count_down(); l:await(10)
 */
#include <stdint.h>
#include <string.h>

#include "hilock_lua.h"

/* the three kinds (a binding of the C API only: no engine header here) */
enum { HL_SEM_SEMAPHORE = 1, HL_SEM_PERMIT, HL_SEM_LATCH };

#define SEM_MT "hilock.semaphore"
#define PERMITS_MAX ((int64_t)2147483647)    /* the C API's bounds (hilock.h) */
#define COUNT_MAX ((int64_t)999999999999999)
#define PSEM_MT "hilock.permit_semaphore"
#define LATCH_MT "hilock.latch"

typedef struct lsem {
    int kind;      /* HL_SEM_SEMAPHORE, HL_SEM_PERMIT, HL_SEM_LATCH */
    void *h;       /* the C handle; NULL once closed */
    hilock_client **cl; /* the client userdata's handle (kept alive by the reference) */
} lsem;

static const char *sem_mt(int kind)
{
    return kind == HL_SEM_SEMAPHORE ? SEM_MT : kind == HL_SEM_PERMIT ? PSEM_MT : LATCH_MT;
}

static void sem_close_handle(lsem *s)
{
    if (!s->h)
        return;
    if (s->kind == HL_SEM_SEMAPHORE)
        hilock_semaphore_free(s->h);
    else if (s->kind == HL_SEM_PERMIT)
        hilock_permit_semaphore_free(s->h);
    else
        hilock_latch_free(s->h);
    s->h = NULL;
}

/* c:semaphore(name) / c:permit_semaphore(name) / c:latch(name) */
static int new_sem(lua_State *L, int kind)
{
    hilock_client **u = lhl_check_client(L, 1);
    const char *name = lhl_check_name(L, 2);
    if (!*u)
        return lhl_push_fail(L, HILOCK_ECLOSED, "client is closed");
    lsem *s = (lsem *)hlc_newuserdata(L, sizeof *s);
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->cl = u;
    luaL_getmetatable(L, sem_mt(kind));
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1);
    hlc_setref(L, -2);
    int rc = kind == HL_SEM_SEMAPHORE ? hilock_semaphore_new((hilock_semaphore **)&s->h, *u, name)
             : kind == HL_SEM_PERMIT
                 ? hilock_permit_semaphore_new((hilock_permit_semaphore **)&s->h, *u, name)
                 : hilock_latch_new((hilock_latch **)&s->h, *u, name);
    if (rc == HILOCK_EINVAL)
        return luaL_argerror(L, 2, "invalid name");
    if (rc)
        return lhl_push_fail(L, rc, NULL);
    return 1;
}

int lhl_client_semaphore(lua_State *L) { return new_sem(L, HL_SEM_SEMAPHORE); }
int lhl_client_permit_semaphore(lua_State *L) { return new_sem(L, HL_SEM_PERMIT); }
int lhl_client_latch(lua_State *L) { return new_sem(L, HL_SEM_LATCH); }

static lsem *check_sem(lua_State *L, int kind)
{
    return (lsem *)luaL_checkudata(L, 1, sem_mt(kind));
}

/* 0 when usable; else pushes nil, err (2). */
static int sem_unusable(lua_State *L, lsem *s)
{
    if (!s->h)
        return lhl_push_fail(L, HILOCK_ECLOSED, "handle is closed");
    if (!*s->cl)
        return lhl_push_fail(L, HILOCK_ECLOSED, "client is closed");
    return 0;
}

static int sem_fail(lua_State *L, lsem *s, int rc)
{
    const char *msg = s->kind == HL_SEM_SEMAPHORE ? hilock_semaphore_errmsg(s->h)
                      : s->kind == HL_SEM_PERMIT  ? hilock_permit_semaphore_errmsg(s->h)
                                                  : hilock_latch_errmsg(s->h);
    return lhl_push_fail(L, rc, msg);
}

#define SEM_PROLOGUE(KIND)                                                                   \
    lsem *s = check_sem(L, KIND);

static int push_ok_or_fail(lua_State *L, lsem *s, int rc)
{
    if (rc)
        return sem_fail(L, s, rc);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- semaphore ---- */

static int sem_try_set_permits(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_SEMAPHORE)
    int64_t n = lhl_check_int(L, 2, 1, PERMITS_MAX);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    int set = 0, rc = hilock_semaphore_try_set_permits(&set, s->h, n);
    if (rc)
        return sem_fail(L, s, rc);
    lua_pushboolean(L, set);
    return 1;
}

/* s:acquire([permits [, wait]]) -> true | nil, err ("timeout: ...") */
static int sem_acquire(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_SEMAPHORE)
    int64_t k = lhl_is_none_or_nil(L, 2) ? 1 : lhl_check_int(L, 2, 1, PERMITS_MAX);
    int64_t wait = lhl_check_seconds(L, 3, HILOCK_WAIT_FOREVER, 1);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    return push_ok_or_fail(L, s, hilock_semaphore_acquire(s->h, k, wait));
}

static int sem_release(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_SEMAPHORE)
    int64_t k = lhl_is_none_or_nil(L, 2) ? 1 : lhl_check_int(L, 2, 1, PERMITS_MAX);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    return push_ok_or_fail(L, s, hilock_semaphore_release(s->h, k));
}

static int sem_available(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_SEMAPHORE)
    int u = sem_unusable(L, s);
    if (u)
        return u;
    int64_t v = 0;
    int rc = hilock_semaphore_available(&v, s->h);
    if (rc)
        return sem_fail(L, s, rc);
    lhl_push_i64(L, v);
    return 1;
}

static int sem_drain(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_SEMAPHORE)
    int u = sem_unusable(L, s);
    if (u)
        return u;
    int64_t v = 0;
    int rc = hilock_semaphore_drain(&v, s->h);
    if (rc)
        return sem_fail(L, s, rc);
    lhl_push_i64(L, v);
    return 1;
}

static int sem_add_permits(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_SEMAPHORE)
    int64_t d = lhl_check_int(L, 2, -COUNT_MAX, COUNT_MAX);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    return push_ok_or_fail(L, s, hilock_semaphore_add_permits(s->h, d));
}

static int sem_set_permits(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_SEMAPHORE)
    int64_t n = lhl_check_int(L, 2, 0, COUNT_MAX);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    return push_ok_or_fail(L, s, hilock_semaphore_set_permits(s->h, n));
}

static int sem_delete_any(lua_State *L, int kind)
{
    lsem *s = check_sem(L, kind);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    int deleted = 0;
    int rc = kind == HL_SEM_SEMAPHORE ? hilock_semaphore_delete(&deleted, s->h)
             : kind == HL_SEM_PERMIT  ? hilock_permit_semaphore_delete(&deleted, s->h)
                                      : hilock_latch_delete(&deleted, s->h);
    if (rc)
        return sem_fail(L, s, rc);
    lua_pushboolean(L, deleted);
    return 1;
}

static int sem_delete(lua_State *L) { return sem_delete_any(L, HL_SEM_SEMAPHORE); }
static int psem_delete(lua_State *L) { return sem_delete_any(L, HL_SEM_PERMIT); }
static int latch_delete(lua_State *L) { return sem_delete_any(L, HL_SEM_LATCH); }

/* ---- permit-expirable semaphore ---- */

static int psem_try_set_permits(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_PERMIT)
    int64_t n = lhl_check_int(L, 2, 1, PERMITS_MAX);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    int set = 0, rc = hilock_permit_semaphore_try_set_permits(&set, s->h, n);
    if (rc)
        return sem_fail(L, s, rc);
    lua_pushboolean(L, set);
    return 1;
}

/* p:acquire([wait [, lease]]) -> permit id | nil, err */
static int psem_acquire(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_PERMIT)
    int64_t wait = lhl_check_seconds(L, 2, HILOCK_WAIT_FOREVER, 1);
    int64_t lease = lhl_check_seconds(L, 3, 0, 0);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    char id[HILOCK_PERMIT_ID_SIZE];
    int rc = hilock_permit_semaphore_acquire(id, s->h, wait, lease);
    if (rc)
        return sem_fail(L, s, rc);
    lua_pushstring(L, id);
    return 1;
}

static int psem_release(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_PERMIT)
    const char *id = luaL_checkstring(L, 2);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    return push_ok_or_fail(L, s, hilock_permit_semaphore_release(s->h, id));
}

static int psem_available(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_PERMIT)
    int u = sem_unusable(L, s);
    if (u)
        return u;
    int64_t v = 0;
    int rc = hilock_permit_semaphore_available(&v, s->h);
    if (rc)
        return sem_fail(L, s, rc);
    lhl_push_i64(L, v);
    return 1;
}

static int psem_add_permits(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_PERMIT)
    int64_t d = lhl_check_int(L, 2, -COUNT_MAX, COUNT_MAX);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    return push_ok_or_fail(L, s, hilock_permit_semaphore_add_permits(s->h, d));
}

/* ---- latch ---- */

static int latch_try_set_count(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_LATCH)
    int64_t n = lhl_check_int(L, 2, 1, COUNT_MAX);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    int set = 0, rc = hilock_latch_try_set_count(&set, s->h, n);
    if (rc)
        return sem_fail(L, s, rc);
    lua_pushboolean(L, set);
    return 1;
}

static int latch_count_down(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_LATCH)
    int u = sem_unusable(L, s);
    if (u)
        return u;
    int64_t left = 0;
    int rc = hilock_latch_count_down(&left, s->h);
    if (rc)
        return sem_fail(L, s, rc);
    lhl_push_i64(L, left);
    return 1;
}

static int latch_count(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_LATCH)
    int u = sem_unusable(L, s);
    if (u)
        return u;
    int64_t v = 0;
    int rc = hilock_latch_count(&v, s->h);
    if (rc)
        return sem_fail(L, s, rc);
    lhl_push_i64(L, v);
    return 1;
}

/* l:await([wait]) -> true | nil, "timeout: ..." */
static int latch_await(lua_State *L)
{
    SEM_PROLOGUE(HL_SEM_LATCH)
    int64_t wait = lhl_check_seconds(L, 2, HILOCK_WAIT_FOREVER, 1);
    int u = sem_unusable(L, s);
    if (u)
        return u;
    return push_ok_or_fail(L, s, hilock_latch_await(s->h, wait));
}

/* ---- shared ---- */

static lsem *check_any_sem(lua_State *L)
{
    lsem *s = (lsem *)hlc_testudata(L, 1, SEM_MT);
    if (!s)
        s = (lsem *)hlc_testudata(L, 1, PSEM_MT);
    if (!s)
        s = (lsem *)luaL_checkudata(L, 1, LATCH_MT);
    return s;
}

static int sem_name(lua_State *L)
{
    lsem *s = check_any_sem(L);
    if (!s->h)
        return lhl_push_fail(L, HILOCK_ECLOSED, "handle is closed");
    lua_pushstring(L, s->kind == HL_SEM_SEMAPHORE ? hilock_semaphore_name(s->h)
                      : s->kind == HL_SEM_PERMIT  ? hilock_permit_semaphore_name(s->h)
                                                  : hilock_latch_name(s->h));
    return 1;
}

static int sem_close(lua_State *L)
{
    sem_close_handle(check_any_sem(L));
    lua_pushboolean(L, 1);
    return 1;
}

static const luaL_Reg sem_methods[] = {
    {"try_set_permits", sem_try_set_permits},
    {"acquire", sem_acquire},
    {"release", sem_release},
    {"available", sem_available},
    {"drain", sem_drain},
    {"add_permits", sem_add_permits},
    {"set_permits", sem_set_permits},
    {"delete", sem_delete},
    {"name", sem_name},
    {"close", sem_close},
    {NULL, NULL}};

static const luaL_Reg psem_methods[] = {
    {"try_set_permits", psem_try_set_permits},
    {"acquire", psem_acquire},
    {"release", psem_release},
    {"available", psem_available},
    {"add_permits", psem_add_permits},
    {"delete", psem_delete},
    {"name", sem_name},
    {"close", sem_close},
    {NULL, NULL}};

static const luaL_Reg latch_methods[] = {
    {"try_set_count", latch_try_set_count},
    {"count_down", latch_count_down},
    {"count", latch_count},
    {"await", latch_await},
    {"delete", latch_delete},
    {"name", sem_name},
    {"close", sem_close},
    {NULL, NULL}};

static const luaL_Reg sem_meta[] = {
    {"__gc", sem_close},
#if LUA_VERSION_NUM >= 504
    {"__close", sem_close},
#endif
    {NULL, NULL}};

void lhl_sem_open(lua_State *L)
{
    lhl_new_metatable(L, SEM_MT, sem_methods, sem_meta);
    lhl_new_metatable(L, PSEM_MT, psem_methods, sem_meta);
    lhl_new_metatable(L, LATCH_MT, latch_methods, sem_meta);
}
