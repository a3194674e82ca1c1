/*
 * The Lua module under an allocator that runs out: a call whose results
 * fail to be pushed (or a hold table whose record fails to be registered)
 * must leave no C memory behind. Lua 5.4 host with a lua_Alloc that fails
 * every allocation after a budget; each call runs at budgets 0..59 in a
 * fresh state, the sweep twice (warm-up, then measured), and the bytes in
 * use by malloc (mallinfo2) after the measured sweep must equal those
 * before it: every Lua state is closed, so what stays is what leaked
 * (glibc's per-thread cache is turned off for an exact figure).
 * Usage: oom path/to/5.4/hilock.so   (exit 0: no leak)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long budget = -1; /* allocations left; -1: no limit */

static void *limited(void *ud, void *ptr, size_t osize, size_t nsize)
{
    (void)ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (nsize > osize || !ptr) {
        if (budget == 0)
            return NULL;
        if (budget > 0)
            budget--;
    }
    return realloc(ptr, nsize);
}

static lua_CFunction open_hilock;

/* the calls, each on hilock.proto at the stack top (index 1), run protected */
static const char *const calls[] = {
    /* an owner string (the result's copied strings) */
    "local p = ... return p.owner('0123456789abcdef0123456789abcdef', 7)",
    /* a lock's hold owner and a list of commands */
    "local p = ... return p.lock('oom{x}', 'reentrant'):hold_owner('c', 1),"
    " p.handshake_cmds('user', 'secret', 3)",
    /* more than eight results: a slot map of twelve ranges */
    "local p = ... local r = p.reader() local t = {}"
    " for i = 0, 11 do t[#t + 1] = '*3\\r\\n:' .. i .. '\\r\\n:' .. i .. '\\r\\n'"
    "  .. '*2\\r\\n$9\\r\\n127.0.0.1\\r\\n:' .. (7000 + i) .. '\\r\\n' end"
    " local rep = r:feed_get('*12\\r\\n' .. table.concat(t))"
    " return p.decode_slots(rep)",
    /* a dict with a list of dicts: a sentinel URL's settings */
    "local p = ... return p.parse_url('rediss+sentinel://u:pw@a:1,b:2,c:3/mm/2?sentinel_password=s')",
    /* hold records of a hold table */
    "local p = ... local t = p.holds(30000, 1000)"
    " for i = 1, 40 do t:grant('hold' .. i, true, 30000, 0) end return t",
};

static int run_one(const char *code, long b)
{
    lua_State *L = lua_newstate(limited, NULL);
    if (!L)
        return -1;
    luaL_openlibs(L);
    lua_pushcfunction(L, open_hilock);
    lua_call(L, 0, 1);
    lua_getfield(L, -1, "proto");
    if (luaL_loadstring(L, code) != LUA_OK) {
        fprintf(stderr, "oom: %s\n", lua_tostring(L, -1));
        exit(2);
    }
    lua_insert(L, -2);
    budget = b;
    int rc = lua_pcall(L, 1, LUA_MULTRET, 0);
    budget = -1;
    if (rc != LUA_OK && rc != LUA_ERRMEM) {
        const char *e = lua_tostring(L, -1);
        /* an allocation failure inside the module's own check may be
         * reported as its "out of memory" error: still a clean failure */
        if (!e || !strstr(e, "memory")) {
            fprintf(stderr, "oom: budget %ld: %s\n", b, e ? e : "?");
            exit(2);
        }
    }
    lua_close(L);
    return rc == LUA_OK;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: oom hilock.so\n");
        return 2;
    }
    /* mallinfo2 counts the chunks glibc keeps in its per-thread cache as in
     * use: run again without that cache, so the figure is exact */
    if (!getenv("HL_OOM_EXEC")) {
        setenv("HL_OOM_EXEC", "1", 1);
        setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
        execv("/proc/self/exe", argv);
        perror("oom: exec");
        return 2;
    }
    void *so = dlopen(argv[1], RTLD_NOW);
    if (!so || !(open_hilock = (lua_CFunction)dlsym(so, "luaopen_hilock"))) {
        fprintf(stderr, "oom: %s\n", dlerror());
        return 2;
    }
    int fails = 0;
    for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
        /* the budget a whole call needs: the sweep ends past it */
        long need = 0;
        while (!run_one(calls[c], need))
            need++;
        for (long b = 0; b <= need; b++)
            run_one(calls[c], b); /* warm-up: libc's own first allocations */
        size_t before = mallinfo2().uordblks;
        int failed = 0;
        for (int rep = 0; rep < 20; rep++)
            for (long b = 0; b <= need; b++)
                failed += !run_one(calls[c], b);
        size_t after = mallinfo2().uordblks;
        printf("  %s  call %zu: %d runs out of memory (budgets 0..%ld), %zd bytes left\n",
               after == before ? "ok  " : "FAIL", c + 1, failed, need, (ssize_t)(after - before));
        fails += after != before;
    }
    return fails ? 1 : 0;
}
