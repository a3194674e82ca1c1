/*
 * hilock Lua module: the blocking binding. hilock.connect(url [, opts])
 * gives a client; its lock objects call the C API (hilock.h), which does
 * the I/O, the waiting and the watchdog on its own threads. Conventions:
 * hilock.c.
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "hilock_lua.h"

#define CLIENT_MT "hilock.client"
#define LOCK_MT "hilock.lock"

/* ------------------------------------------------------------------ */
/* Client                                                              */
/* ------------------------------------------------------------------ */

typedef struct lclient {
    hilock_client *c; /* NULL once closed */
    /* first tries of waiting acquires that missed, by kind: counted as
     * busy by the library, not one of the caller's tries (c:stats()) */
    uint64_t probes[HILOCK_STATS_KINDS];
    int stats_names; /* the per-name limit (0: off); the probes of each pair
                        are then in the client userdata's table (its
                        uservalue): "kind\tname" -> n, a tracked pair's;
                        kind -> n, the other entry's */
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

hilock_client **lhl_check_client(lua_State *L, int idx)
{
    return &check_client(L, idx)->c;
}

static const char *const option_names[] = {
    "connect_timeout", "command_timeout", "watchdog_lease", "fair_wait_window",
    "pool_size", "replica_ack", "replica_ack_timeout", "tls", "tls_ca_file", "tls_ca_dir",
    "tls_cert_file", "tls_key_file", "tls_server_name", "tls_insecure", "sentinel_user",
    "sentinel_password", "stats_names", NULL};

static void read_options(lua_State *L, int idx, hilock_options *o)
{
    if (lhl_is_none_or_nil(L, idx))
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
    o->connect_timeout_ms = lhl_check_seconds(L, top + 1, 0, 0);
    lua_getfield(L, idx, "command_timeout");
    o->command_timeout_ms = lhl_check_seconds(L, top + 2, 0, 0);
    lua_getfield(L, idx, "watchdog_lease");
    o->watchdog_lease_ms = lhl_check_seconds(L, top + 3, 0, 0);
    lua_getfield(L, idx, "fair_wait_window");
    o->fair_wait_window_ms = lhl_check_seconds(L, top + 4, 0, 0);
    lua_getfield(L, idx, "pool_size");
    if (!lhl_is_none_or_nil(L, top + 5))
        o->pool_size = (int)lhl_check_int(L, top + 5, 1, 1024);
    /* replica_ack: nil = the client's default (on for sentinel and
     * cluster), true/false = on/off */
    lua_getfield(L, idx, "replica_ack");
    if (!lhl_is_none_or_nil(L, top + 6)) {
        if (lua_type(L, top + 6) != LUA_TBOOLEAN)
            luaL_argerror(L, idx, "replica_ack must be a boolean");
        o->replica_ack = lua_toboolean(L, top + 6) ? 1 : -1;
    }
    lua_getfield(L, idx, "replica_ack_timeout");
    o->replica_ack_timeout_ms = lhl_check_seconds(L, top + 7, 0, 0);
    /* TLS and sentinel settings: the strings stay anchored in the options
     * table (argument idx) while hilock_client_open copies them */
    static const char *const flags[] = {"tls", "tls_insecure"};
    int *flag_dst[] = {&o->tls, &o->tls_insecure};
    for (int i = 0; i < 2; i++) {
        lua_getfield(L, idx, flags[i]);
        if (!lhl_is_none_or_nil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN)
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
        if (!lhl_is_none_or_nil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
            luaL_argerror(L, idx, lua_pushfstring(L, "%s must be a string", strs[i]));
        *str_dst[i] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    lua_getfield(L, idx, "stats_names");
    if (!lhl_is_none_or_nil(L, -1))
        o->stats_names = (int)lhl_check_int(L, lua_gettop(L), 0, HILOCK_STATS_NAMES_MAX);
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
    memset(u, 0, sizeof *u);
    luaL_getmetatable(L, CLIENT_MT);
    lua_setmetatable(L, -2);
    u->stats_names = o.stats_names;
    if (o.stats_names) { /* the per-name probes (lclient) */
        lua_newtable(L);
        hlc_setref(L, -2);
    }
    char err[256] = "";
    int rc = hilock_client_open(&u->c, url, &o, err, sizeof err);
    if (rc == HILOCK_EINVAL)
        return luaL_argerror(L, 1, err[0] ? err : "invalid URL");
    if (rc)
        return lhl_push_fail(L, rc, err);
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
        return lhl_push_fail(L, HILOCK_ECLOSED, "client is closed");
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
    const char *name = lhl_check_name(L, 2);
    int fixed = !lhl_is_none_or_nil(L, 3);
    uint64_t tid = fixed ? (uint64_t)lhl_check_int(L, 3, 0, INT64_MAX) : 0;
    if (!u->c)
        return lhl_push_fail(L, HILOCK_ECLOSED, "client is closed");
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
        return lhl_push_fail(L, rc, NULL);
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
        return lhl_push_fail(L, HILOCK_ECLOSED, "lock handle is closed");
    if (!k->cl->c)
        return lhl_push_fail(L, HILOCK_ECLOSED, "client is closed");
    return 0;
}

static uint64_t lock_tid(const llock *k)
{
    return k->fixed_tid ? k->tid : hilock_thread_id();
}

static int lock_fail(lua_State *L, llock *k, int rc)
{
    return lhl_push_fail(L, rc, hilock_lock_errmsg(k->l));
}

/*
 * Lock methods that call the C API: one table row each. The prologue (the
 * handle and its client open), the failure (nil, "prefix: detail") and the
 * hold bookkeeping are run_op's; a row says how to call and what to push.
 */
typedef enum { PUSH_TRUE, PUSH_BOOL, PUSH_INT, PUSH_TTL } push_kind;

typedef struct lock_op {
    int (*call)(llock *k, const int64_t *time, int64_t *out); /* *out: its value */
    push_kind push;
    int holds; /* +1 a hold taken, -1 one given back, 0 none, -2 all gone */
    int timed; /* 1: takes ([wait [, lease]]): wait defaults to forever, lease
                  to the watchdog; 2: takes (seconds), positive; checked
                  (raising) before the handle is */
} lock_op;

/*
 * A waiting acquire that a signal can interrupt. Plain Lua has one thread:
 * nothing else can call a cancel while the acquire blocks, but a signal
 * handler can run, and the interpreter's Ctrl-C handler (lua.c, luajit.c)
 * does what a signal handler may: it sets a Lua hook, which raises
 * "interrupted!" at the next Lua instruction - after the blocking call
 * returned, i.e. after the whole wait. So the wait runs on a helper thread
 * (signals blocked there) while this thread sleeps in poll() on a pipe the
 * helper writes when done, looking every INTR_CHECK_MS (or at once, when
 * the signal lands on this thread) whether a hook was set. If so the
 * acquire is cancelled through the C API (hilock_lock_cancel: it leaves the
 * fair queue and its subscription), a grant that won the race is released,
 * and the call returns nil, "canceled: ..."; the hook then stops the script.
 * A first try on this thread comes before: an acquire that needs no wait
 * starts no thread.
 */
#define INTR_CHECK_MS 50

typedef struct acq_job {
    hilock_lock *l;
    uint64_t tid;
    int64_t wait, lease;
    int rc;
    int64_t token;
    int fd[2]; /* written when the acquire returned */
} acq_job;

static void *acq_main(void *arg)
{
    acq_job *j = arg;
    j->rc = hilock_lock_acquire_token_tid(&j->token, j->l, j->tid, j->wait, j->lease);
    char b = 1;
    while (write(j->fd[1], &b, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

static int hook_changed(lua_State *L, lua_Hook hook0, int mask0)
{
    return lua_gethook(L) != hook0 || lua_gethookmask(L) != mask0;
}

/* A waiting acquire's first try missed: the library counted it busy, for
 * the kind and (per-name counters on) for its pair's entry or its kind's
 * other entry; c:stats() takes it off there. The lock is at index 1 (its
 * uservalue: the client userdata, whose uservalue is the probes table). */
static void note_probe(lua_State *L, llock *k)
{
    unsigned kind = (unsigned)hilock_lock_kind(k->l);
    if (kind >= HILOCK_STATS_KINDS)
        return;
    k->cl->probes[kind]++;
    if (!k->cl->stats_names || !k->cl->c)
        return;
    const char *name = hilock_lock_name(k->l);
    hilock_name_stats ns;
    memset(&ns, 0, sizeof ns);
    int tracked = hilock_client_name_stats(k->cl->c, (hilock_kind)kind, name, &ns) == 1;
    int top = lua_gettop(L);
    hlc_getref(L, 1);  /* the client */
    hlc_getref(L, -1); /* its probes table */
    if (lua_istable(L, -1)) {
        if (tracked)
            lua_pushfstring(L, "%d\t%s", (int)kind, name);
        else
            lua_pushinteger(L, (lua_Integer)kind);
        lua_pushvalue(L, -1);
        lua_rawget(L, -3);
        lua_Integer n = lua_tointeger(L, -1) + 1;
        lua_pop(L, 1);
        lua_pushinteger(L, n);
        lua_rawset(L, -3);
    }
    lua_settop(L, top);
}

/* *interrupted: 1 when a signal's hook ended the wait (HILOCK_ECANCELED). */
static int acquire_interruptible(lua_State *L, llock *k, const int64_t *time, int64_t *token,
                                 int *interrupted)
{
    uint64_t tid = lock_tid(k);
    int64_t t0 = lhl_mono_ms();
    /* a first try: most acquires need no wait (and then no thread). Not on
     * a fair lock: there the wait is also the waiter's window in the line
     * (its deadline steps), which a second call with the wait left would
     * shorten by the try's time (tests/interop fair-order saw 19999 ms) */
    int fair = hilock_lock_kind(k->l) == HILOCK_KIND_FAIR;
    int rc = HILOCK_ETIMEDOUT;
    if (!fair || time[0] == 0) {
        rc = hilock_lock_acquire_token_tid(token, k->l, tid, 0, time[1]);
        /* a grant no replica acknowledged was given back (HILOCK_EUNACKED):
         * one call with the wait would try again while the wait lasts, so
         * the waiting call below does; no wait left: the error */
        if ((rc != HILOCK_ETIMEDOUT && rc != HILOCK_EUNACKED) || time[0] == 0)
            return rc;
        if (rc == HILOCK_ETIMEDOUT)
            note_probe(L, k);
    }
    acq_job j = {k->l, tid, time[0], time[1], 0, 0, {-1, -1}};
    if (time[0] > 0 && !fair) {
        j.wait = time[0] - (lhl_mono_ms() - t0);
        if (j.wait <= 0)
            return rc;
    }
    if (pipe2(j.fd, O_CLOEXEC) != 0) /* no pipe: an uninterruptible wait */
        return hilock_lock_acquire_token_tid(token, k->l, tid, j.wait, time[1]);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* the helper takes no signal */
    pthread_t th;
    int prc = pthread_create(&th, NULL, acq_main, &j);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc != 0) {
        close(j.fd[0]);
        close(j.fd[1]);
        return hilock_lock_acquire_token_tid(token, k->l, tid, j.wait, time[1]);
    }
    lua_Hook hook0 = lua_gethook(L);
    int mask0 = lua_gethookmask(L);
    *interrupted = 0;
    for (;;) {
        struct pollfd pf = {j.fd[0], POLLIN, 0};
        if (poll(&pf, 1, *interrupted ? 5 : INTR_CHECK_MS) > 0)
            break; /* the acquire returned */
        if (!*interrupted && hook_changed(L, hook0, mask0))
            *interrupted = 1;
        if (*interrupted) /* until it returns: it may not be waiting yet */
            hilock_lock_cancel(NULL, k->l, tid);
    }
    pthread_join(th, NULL);
    close(j.fd[0]);
    close(j.fd[1]);
    if (!*interrupted && hook_changed(L, hook0, mask0) && j.rc == HILOCK_ECANCELED)
        *interrupted = 1;
    if (*interrupted) {
        if (j.rc == 0) /* the grant came first: give it back */
            hilock_lock_release_tid(k->l, tid);
        return HILOCK_ECANCELED;
    }
    *token = j.token;
    return j.rc;
}

static int call_acquire(llock *k, const int64_t *time, int64_t *token);

static int run_op(lua_State *L, const lock_op *op)
{
    llock *k = check_lock(L, 1);
    int64_t time[2] = {0, 0};
    if (op->timed == 2) { /* extend: one positive number of seconds */
        luaL_checknumber(L, 2);
        time[0] = lhl_check_seconds(L, 2, 0, 0);
    } else if (op->timed) {
        time[0] = lhl_check_seconds(L, 2, HILOCK_WAIT_FOREVER, 1);
        time[1] = lhl_check_seconds(L, 3, HILOCK_LEASE_WATCHDOG, 0);
    }
    int n = lock_unusable(L, k);
    if (n)
        return n;
    int64_t v = 0, interrupted = 0;
    int rc;
    if (op->call == call_acquire) {
        int intr = 0;
        rc = acquire_interruptible(L, k, time, &v, &intr);
        interrupted = intr;
    } else {
        rc = op->call(k, time, &v);
    }
    if (interrupted)
        return lhl_push_fail(L, rc, "acquire interrupted by a signal (nothing held or queued)");
    if (rc == HILOCK_ENOTOWNER && op->holds == -1)
        k->holds = 0; /* not held any more, whatever we counted */
    if (rc)
        return lock_fail(L, k, rc);
    if (op->holds == 1)
        k->holds++;
    else if (op->holds == -1 && k->holds > 0)
        k->holds--;
    else if (op->holds == -2)
        k->holds = 0;
    switch (op->push) {
    case PUSH_TRUE: lua_pushboolean(L, 1); break;
    case PUSH_BOOL: lua_pushboolean(L, v != 0); break;
    case PUSH_INT: lhl_push_i64(L, v); break;
    case PUSH_TTL: /* seconds; -2 no lock, -1 no expiry */
        if (v < 0)
            lhl_push_i64(L, v);
        else
            lua_pushnumber(L, (lua_Number)v / 1000.0);
        break;
    }
    return 1;
}

static int call_acquire(llock *k, const int64_t *time, int64_t *token)
{
    return hilock_lock_acquire_token_tid(token, k->l, lock_tid(k), time[0], time[1]);
}

static int call_token(llock *k, const int64_t *time, int64_t *out)
{
    (void)time;
    return hilock_lock_token(out, k->l);
}

static int call_release(llock *k, const int64_t *time, int64_t *out)
{
    (void)time, (void)out;
    return hilock_lock_release_tid(k->l, lock_tid(k));
}

static int call_force_unlock(llock *k, const int64_t *time, int64_t *out)
{
    (void)time;
    int deleted = 0;
    int rc = hilock_lock_force_unlock(&deleted, k->l);
    *out = deleted;
    return rc;
}

static int call_locked(llock *k, const int64_t *time, int64_t *out)
{
    (void)time;
    int v = 0;
    int rc = hilock_lock_is_locked(&v, k->l);
    *out = v;
    return rc;
}

static int call_held(llock *k, const int64_t *time, int64_t *out)
{
    (void)time;
    int v = 0;
    int rc = hilock_lock_is_held_tid(&v, k->l, lock_tid(k));
    *out = v;
    return rc;
}

static int call_hold_count(llock *k, const int64_t *time, int64_t *out)
{
    (void)time;
    return hilock_lock_hold_count_tid(out, k->l, lock_tid(k));
}

static int call_ttl(llock *k, const int64_t *time, int64_t *out)
{
    (void)time;
    return hilock_lock_remaining_ms(out, k->l);
}

static int call_extend(llock *k, const int64_t *time, int64_t *out)
{
    (void)out;
    return hilock_lock_extend_tid(k->l, lock_tid(k), time[0]);
}

static const lock_op OP_ACQUIRE = {call_acquire, PUSH_TRUE, 1, 1};
static const lock_op OP_ACQUIRE_TOKEN = {call_acquire, PUSH_INT, 1, 1};
static const lock_op OP_TOKEN = {call_token, PUSH_INT, 0, 0};
static const lock_op OP_RELEASE = {call_release, PUSH_TRUE, -1, 0};
static const lock_op OP_FORCE_UNLOCK = {call_force_unlock, PUSH_BOOL, -2, 0};
static const lock_op OP_LOCKED = {call_locked, PUSH_BOOL, 0, 0};
static const lock_op OP_HELD = {call_held, PUSH_BOOL, 0, 0};
static const lock_op OP_HOLD_COUNT = {call_hold_count, PUSH_INT, 0, 0};
static const lock_op OP_TTL = {call_ttl, PUSH_TTL, 0, 0};
static const lock_op OP_EXTEND = {call_extend, PUSH_TRUE, 0, 2};

/* lk:acquire([wait [, lease]]) -> true | nil, err */
static int lock_acquire(lua_State *L) { return run_op(L, &OP_ACQUIRE); }
/* lk:acquire_token([wait [, lease]]) -> token | nil, err (fenced lock: the
 * grant's fencing token; other kinds answer 0) */
static int lock_acquire_token(lua_State *L) { return run_op(L, &OP_ACQUIRE_TOKEN); }
/* lk:token() -> the latest fencing token issued for the name (0 none) */
static int lock_token(lua_State *L) { return run_op(L, &OP_TOKEN); }
/* lk:release() -> true | nil, err */
static int lock_release(lua_State *L) { return run_op(L, &OP_RELEASE); }
/* lk:force_unlock() -> deleted (boolean) | nil, err */
static int lock_force_unlock(lua_State *L) { return run_op(L, &OP_FORCE_UNLOCK); }
static int lock_locked(lua_State *L) { return run_op(L, &OP_LOCKED); }
static int lock_held(lua_State *L) { return run_op(L, &OP_HELD); }
static int lock_hold_count(lua_State *L) { return run_op(L, &OP_HOLD_COUNT); }
/* lk:ttl() -> remaining lease in seconds; -2 no lock, -1 no expiry */
static int lock_ttl(lua_State *L) { return run_op(L, &OP_TTL); }
/* lk:extend(seconds) -> true | nil, err: add seconds to the remaining lease
 * of this owner's hold (hilock_lock_extend_tid: "not owner" when it holds
 * none, "invalid argument" for a key without expiry or a read-write side) */
static int lock_extend(lua_State *L) { return run_op(L, &OP_EXTEND); }

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
        return lhl_push_fail(L, HILOCK_ECLOSED, "lock handle is closed");
    lua_pushstring(L, hilock_lock_name(k->l));
    return 1;
}

static int lock_kind(lua_State *L)
{
    llock *k = check_lock(L, 1);
    if (!k->l)
        return lhl_push_fail(L, HILOCK_ECLOSED, "lock handle is closed");
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
    lhl_push_u64(L, lock_tid(check_lock(L, 1)));
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

/* c:inspect(name) -> what is stored under the name (hilock_inspect):
 * {name, kind, locked, key_type, lease (seconds; -2 no key, -1 no expiry),
 *  mode (read-write: "read"/"write", else nil), holders = {{owner, holds,
 *  role}}, queue = {{owner, deadline_in (seconds, nil when none),
 *  deadline_ms}}, token, server_time_ms, note (nil when none), count
 *  (kinds "count" and "permit-semaphore": free permits or a latch's count,
 *  else nil), permits_taken, permits = {{id, lease_end_ms, lease_in
 *  (seconds); both nil without lease}}} | nil, err */
static void set_lstr(lua_State *L, const char *k, const char *v, size_t len)
{
    lua_pushlstring(L, v, len);
    lua_setfield(L, -2, k);
}

static void set_int(lua_State *L, const char *k, int64_t v)
{
    lhl_push_i64(L, v);
    lua_setfield(L, -2, k);
}

static void push_seconds(lua_State *L, int64_t ms)
{
    if (ms < 0)
        lhl_push_i64(L, ms);
    else
        lua_pushnumber(L, (lua_Number)ms / 1000.0);
}

static void push_info(lua_State *L, const hilock_lock_info *v)
{
    static const char *const roles[] = {"exclusive", "read", "write"};
    lua_newtable(L);
    set_lstr(L, "name", v->name, strlen(v->name));
    lua_pushstring(L, hilock_info_kind_name(v->kind));
    lua_setfield(L, -2, "kind");
    lua_pushboolean(L, v->locked);
    lua_setfield(L, -2, "locked");
    set_lstr(L, "key_type", v->key_type, strlen(v->key_type));
    push_seconds(L, v->lease_ms);
    lua_setfield(L, -2, "lease");
    if (v->mode[0])
        set_lstr(L, "mode", v->mode, strlen(v->mode));
    if (v->note[0])
        set_lstr(L, "note", v->note, strlen(v->note));
    set_int(L, "token", v->token);
    set_int(L, "server_time_ms", v->server_time_ms);
    lua_createtable(L, (int)v->nholders, 0);
    for (size_t i = 0; i < v->nholders; i++) {
        const hilock_holder_info *h = &v->holders[i];
        lua_createtable(L, 0, 3);
        set_lstr(L, "owner", h->owner, h->owner_len);
        if (h->holds >= 0)
            set_int(L, "holds", h->holds);
        lua_pushstring(L, (unsigned)h->role < 3 ? roles[h->role] : "exclusive");
        lua_setfield(L, -2, "role");
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -2, "holders");
    lua_createtable(L, (int)v->nqueue, 0);
    for (size_t i = 0; i < v->nqueue; i++) {
        const hilock_waiter_info *w = &v->queue[i];
        lua_createtable(L, 0, 3);
        set_lstr(L, "owner", w->owner, w->owner_len);
        if (w->deadline_ms >= 0) {
            set_int(L, "deadline_ms", w->deadline_ms);
            lua_pushnumber(L, (lua_Number)(w->deadline_ms - v->server_time_ms) / 1000.0);
            lua_setfield(L, -2, "deadline_in");
        }
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -2, "queue");
    if (v->kind == HILOCK_INFO_COUNT || v->kind == HILOCK_INFO_PERMIT_SEMAPHORE)
        set_int(L, "count", v->count);
    set_int(L, "permits_taken", (int64_t)v->permits_taken);
    lua_createtable(L, (int)v->npermits, 0);
    for (size_t i = 0; i < v->npermits; i++) {
        const hilock_permit_info *pm = &v->permits[i];
        lua_createtable(L, 0, 3);
        set_lstr(L, "id", pm->id, strlen(pm->id));
        if (pm->lease_end_ms >= 0) {
            set_int(L, "lease_end_ms", pm->lease_end_ms);
            lua_pushnumber(L, (lua_Number)(pm->lease_end_ms - v->server_time_ms) / 1000.0);
            lua_setfield(L, -2, "lease_in");
        }
        lua_rawseti(L, -2, (int)i + 1);
    }
    lua_setfield(L, -2, "permits");
}

static int push_info_protected(lua_State *L)
{
    push_info(L, (const hilock_lock_info *)lua_touserdata(L, 1));
    return 1;
}

static int client_inspect(lua_State *L)
{
    lclient *u = check_client(L, 1);
    const char *name = lhl_check_name(L, 2);
    if (!u->c)
        return lhl_push_fail(L, HILOCK_ECLOSED, "client is closed");
    hilock_lock_info *v = NULL;
    int rc = hilock_inspect(&v, u->c, name);
    if (rc)
        return lhl_push_fail(L, rc, hilock_client_errmsg(u->c));
    /* building the table may raise (out of memory): in a protected call,
     * so that v is freed whatever happens */
    lua_pushcfunction(L, push_info_protected);
    lua_pushlightuserdata(L, v);
    int st = lua_pcall(L, 1, 1, 0);
    hilock_lock_info_free(v);
    if (st != 0)
        return lua_error(L);
    return 1;
}

/* c:stats([{by_name = true}]): the client's counters (hilock_client_stats)
 * as a table of the shape of Python's client.stats(): {version, kinds =
 * {reentrant = {granted, ..., wait_ms = {24 buckets}, hold_ms = {...},
 * lost_gone, ...}, fair, read, write, fenced}, renewals, ...}; by_name (a
 * client connected with stats_names) adds names = {{kind, name, figures...},
 * ..., {kind, other = true, figures...}} (hilock_client_each_name_stats);
 * docs/lua.md, docs/observability.md. */
static void set_u64(lua_State *L, const char *k, uint64_t v)
{
    lhl_push_u64(L, v);
    lua_setfield(L, -2, k);
}

static void set_buckets(lua_State *L, const char *k, const uint64_t *b)
{
    lua_createtable(L, HILOCK_STATS_BUCKETS, 0);
    for (int i = 0; i < HILOCK_STATS_BUCKETS; i++) {
        lhl_push_u64(L, b[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, k);
}

static const char *const kind_names[HILOCK_STATS_KINDS] = {NULL,   "reentrant", "fair",
                                                            "read", "write",     "fenced"};

/* Sets the figures of one hilock_kind_stats in the table on top (busy
 * less probes). */
static void set_kind_figures(lua_State *L, const hilock_kind_stats *k, uint64_t probes)
{
    set_u64(L, "granted", k->granted);
    set_u64(L, "timed_out", k->timed_out);
    set_u64(L, "cancelled", k->cancelled);
    set_u64(L, "busy", k->busy >= probes ? k->busy - probes : 0);
    set_u64(L, "granted_first_try", k->granted_first_try);
    set_u64(L, "granted_woken", k->granted_woken);
    set_u64(L, "granted_retried", k->granted_retried);
    set_buckets(L, "wait_ms", k->wait_ms);
    set_buckets(L, "hold_ms", k->hold_ms);
    set_u64(L, "lost_expired", k->lost_expired);
    set_u64(L, "lost_gone", k->lost_gone);
    set_u64(L, "lost_in_doubt", k->lost_in_doubt);
}

/* c:stats{by_name = true}'s names: one entry table per pair, built by
 * add_name under lua_pcall, so that a Lua error (out of memory) never
 * unwinds through the library's walk (which then stops and frees its copy). */
typedef struct name_entry_arg {
    lua_State *L;
    int names, probes; /* stack indexes: the names array, the probes table (0: none) */
    int failed;        /* add_name raised: its error is on the stack */
    hilock_kind kind;
    const char *name;  /* NULL: the kind's other entry */
    const hilock_kind_stats *st;
} name_entry_arg;

/* add_name(names, probes or nil, arg) */
static int add_name(lua_State *L)
{
    name_entry_arg *a = (name_entry_arg *)lua_touserdata(L, 3);
    uint64_t probes = 0;
    if (lua_istable(L, 2)) {
        if (a->name)
            lua_pushfstring(L, "%d\t%s", (int)a->kind, a->name);
        else
            lua_pushinteger(L, (lua_Integer)a->kind);
        lua_rawget(L, 2);
        probes = (uint64_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_createtable(L, 0, 14);
    lua_pushstring(L, kind_names[a->kind]);
    lua_setfield(L, -2, "kind");
    if (a->name) {
        lua_pushstring(L, a->name);
        lua_setfield(L, -2, "name");
    } else {
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "other");
    }
    set_kind_figures(L, a->st, probes);
    lua_rawseti(L, 1, (int)hlc_rawlen(L, 1) + 1);
    return 0;
}

static int name_entry_cb(hilock_kind kind, const char *name, const hilock_name_stats *st,
                         void *userdata)
{
    name_entry_arg *a = userdata;
    if ((unsigned)kind == 0 || (unsigned)kind >= HILOCK_STATS_KINDS)
        return 0;
    a->kind = kind;
    a->name = name;
    a->st = &st->figures;
    lua_State *L = a->L;
    lua_pushcfunction(L, add_name);
    lua_pushvalue(L, a->names);
    if (a->probes)
        lua_pushvalue(L, a->probes);
    else
        lua_pushnil(L);
    lua_pushlightuserdata(L, a);
    if (lua_pcall(L, 3, 0, 0) != 0) {
        a->failed = 1;
        return 1;
    }
    return 0;
}

static int client_stats(lua_State *L)
{
    lclient *u = check_client(L, 1);
    int by_name = 0;
    if (!lhl_is_none_or_nil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_getfield(L, 2, "by_name");
        by_name = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (by_name && !u->stats_names)
            return luaL_argerror(L, 2, "by_name needs a client connected with stats_names > 0");
    }
    if (!u->c)
        return lhl_push_fail(L, HILOCK_ECLOSED, "client is closed");
    hilock_stats s;
    memset(&s, 0, sizeof s);
    s.version = HILOCK_STATS_VERSION;
    int rc = hilock_client_stats(u->c, &s);
    if (rc)
        return lhl_push_fail(L, rc, "client stats");
    lua_createtable(L, 0, 9);
    lua_pushinteger(L, (lua_Integer)s.version);
    lua_setfield(L, -2, "version");
    lua_createtable(L, 0, HILOCK_STATS_KINDS - 1);
    for (int i = 1; i < HILOCK_STATS_KINDS; i++) {
        lua_createtable(L, 0, 12);
        set_kind_figures(L, &s.kind[i], u->probes[i]);
        lua_setfield(L, -2, kind_names[i]);
    }
    lua_setfield(L, -2, "kinds");
    set_u64(L, "renewals", s.renewals);
    set_u64(L, "renewal_commands", s.renewal_commands);
    set_u64(L, "renewal_failures", s.renewal_failures);
    set_u64(L, "settles", s.settles);
    set_u64(L, "reconnects", s.reconnects);
    set_u64(L, "redirects", s.redirects);
    set_u64(L, "replica_ack_failures", s.replica_ack_failures);
    if (by_name) {
        int out = lua_gettop(L);
        lua_newtable(L);
        name_entry_arg a = {L, lua_gettop(L), 0, 0, (hilock_kind)0, NULL, NULL};
        hlc_getref(L, 1); /* the probes table */
        if (lua_istable(L, -1))
            a.probes = lua_gettop(L);
        hilock_name_stats buf;
        memset(&buf, 0, sizeof buf);
        rc = hilock_client_each_name_stats(u->c, &buf, name_entry_cb, &a);
        if (a.failed)
            return lua_error(L); /* add_name's error, on top */
        if (rc)
            return lhl_push_fail(L, rc, "client per-name stats");
        lua_settop(L, a.names);
        lua_setfield(L, out, "names");
    }
    return 1;
}

static const luaL_Reg client_methods[] = {
    {"lock", client_lock},
    {"fair_lock", client_fair_lock},
    {"fenced_lock", client_fenced_lock},
    {"read_lock", client_read_lock},
    {"write_lock", client_write_lock},
    {"semaphore", lhl_client_semaphore},
    {"permit_semaphore", lhl_client_permit_semaphore},
    {"latch", lhl_client_latch},
    {"inspect", client_inspect},
    {"stats", client_stats},
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
    {"extend", lock_extend},
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

void lhl_client_open(lua_State *L)
{
    lhl_new_metatable(L, CLIENT_MT, client_methods, client_meta);
    lhl_new_metatable(L, LOCK_MT, lock_methods, lock_meta);
    lhl_sem_open(L);
    lua_pushcfunction(L, l_connect);
    lua_setfield(L, -2, "connect");
}
