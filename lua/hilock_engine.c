/*
 * hilock Lua module: hilock.proto, the engine binding, for drivers that do
 * their own I/O (resty/hilock.lua over OpenResty cosockets): lock names and
 * the RESP bytes of each command, a reply reader and the reply decoders,
 * and the engine's sans-I/O machines (acquire, release, settle, force,
 * router, replica acknowledgement), pub/sub and topology commands.
 *
 * Every machine follows the same shape: m:next() says what to do ("send"
 * bytes, "wait" for a reply, "done" with the result); the driver performs
 * it and feeds back what happened (m:on_reply(reply), m:on_error(err)).
 * The machines name every command, key, channel and Redis error string, so
 * a driver never has to.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_fns.h" /* the engine's free functions, listed once */
#include "hilock_lua.h"

#define PLOCK_MT "hilock.proto.lock"
#define PREADER_MT "hilock.proto.reader"
#define PREPLY_MT "hilock.proto.reply"
#define PACQ_MT "hilock.proto.acquire"

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
    const struct plock *p; /* whose names the machine uses (kept by its ref) */
    int ok;
    int resent; /* the current command was switched to EVAL already */
    char owner[HL_OWNER_MAX];
    /* a machine made by u:before to settle an earlier attempt: its record
     * (marked settling) and a registry ref to the record set keeping it */
    hl_unsettled_acq *urec;
    int uref;
} pacq;

/* the end of the settle of a recorded attempt (a resettle machine's, or a
 * settle machine's), and an attempt recorded settling (below) */
static void unsettled_end_rec(lua_State *L, hl_unsettled_acq **urec, int *uref, int settled);
#define unsettled_end(L, m, settled) unsettled_end_rec(L, &(m)->urec, &(m)->uref, settled)
static hl_unsettled_acq *unsettled_put_settling(lua_State *L, int idx, pacq *m);

/* A command's RESP bytes (the engine's hl_resp_*) as one Lua string for the
 * driver to send: built on the stack when they fit, else in a userdata. */
static void push_resp(lua_State *L, int argc, const char *const *argv, const size_t *lens)
{
    size_t n = hl_resp_len(argc, lens);
    char stack[2048];
    char *buf = n <= sizeof stack ? stack : lua_newuserdata(L, n);
    hl_resp_write(buf, argc, argv, lens);
    lua_pushlstring(L, buf, n);
    if (buf != stack)
        lua_remove(L, -2);
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

/* proto.lock(name [, kind [, sharded]]); kind: "reentrant" (default),
 * "fair", "fenced", "read" or "write" (the two sides of a read-write lock);
 * sharded: the scripts publish with SPUBLISH (Redis Cluster) instead of
 * PUBLISH. */
static int p_lock(lua_State *L)
{
    const char *name = lhl_check_name(L, 1);
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

/* The userdata at idx with metatable mt whose int flag at ok_at (offsetof
 * its `ok`) says it was not freed yet; else an argument error (freed). */
static void *check_live(lua_State *L, int idx, const char *mt, size_t ok_at, const char *freed)
{
    void *u = luaL_checkudata(L, idx, mt);
    if (!*(const int *)((const char *)u + ok_at))
        luaL_argerror(L, idx, freed);
    return u;
}

static plock *check_plock(lua_State *L, int idx)
{
    return check_live(L, idx, PLOCK_MT, offsetof(plock, ok), "freed lock names");
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

/* proto.key_slot(key) -> Redis Cluster hash slot (0..16383) */
static int p_key_slot(lua_State *L)
{
    size_t len;
    const char *k = luaL_checklstring(L, 1, &len);
    lua_pushinteger(L, (lua_Integer)hl_key_slot(k, len));
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

/* Feed the bytes at index 2 to r: 0, or what a failure pushed (nil, err). */
static int feed_bytes(lua_State *L, preader *r)
{
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len);
    if (r->broken || redisReaderFeed(r->r, s, len) != REDIS_OK) {
        r->broken = 1;
        return lhl_push_fail(L, HILOCK_EPROTO, r->r->errstr);
    }
    return 0;
}

/* rd:feed(bytes) -> true | nil, err */
static int reader_feed(lua_State *L)
{
    int n = feed_bytes(L, check_reader(L, 1));
    if (n)
        return n;
    lua_pushboolean(L, 1);
    return 1;
}

/* rd:get() -> reply, nil, is_error | nil (needs more bytes) | nil, err (bad
 * stream); is_error: the reply is an error reply (r:type() == "error").
 * The reply's userdata is made first: no reply is held while Lua allocates. */
static int reader_get(lua_State *L)
{
    preader *r = check_reader(L, 1);
    void *rep = NULL;
    if (r->broken)
        return lhl_push_fail(L, HILOCK_EPROTO, r->r->errstr[0] ? r->r->errstr : "broken stream");
    preply *p = (preply *)hlc_newuserdata(L, sizeof *p);
    p->r = NULL;
    luaL_getmetatable(L, PREPLY_MT);
    lua_setmetatable(L, -2);
    luaL_checkstack(L, 3, "hilock: results");
    if (redisReaderGetReply(r->r, &rep) != REDIS_OK) {
        r->broken = 1;
        return lhl_push_fail(L, HILOCK_EPROTO, r->r->errstr);
    }
    if (!rep) {
        lua_pushnil(L);
        return 1;
    }
    p->r = (redisReply *)rep;
    lua_pushnil(L);
    lua_pushboolean(L, p->r->type == REDIS_REPLY_ERROR);
    return 3;
}

/* rd:feed_get(bytes) -> reply | nil (needs more bytes) | nil, err: feed
 * then get in one call (a driver's read loop). */
static int reader_feed_get(lua_State *L)
{
    int n = feed_bytes(L, check_reader(L, 1));
    if (n)
        return n;
    lua_settop(L, 1);
    return reader_get(L);
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
        lhl_push_i64(L, (int64_t)r->integer);
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

/* ---- the acquire state machine ---- */

/* (Re)start machine m of lock p from the arguments at idx.. (owner,
 * wait_ms, lease_ms, window_ms); a machine that ran before is freed first. */
static void acq_start(lua_State *L, pacq *m, const plock *p, int idx)
{
    const char *owner = check_owner(L, idx);
    size_t olen = strlen(owner);
    int64_t wait = lhl_check_int(L, idx + 1, -1, HILOCK_MAX_TIME_MS);
    int64_t lease = lhl_check_int(L, idx + 2, 1, HILOCK_MAX_TIME_MS);
    int64_t window = lhl_check_int(L, idx + 3, 1, HILOCK_MAX_TIME_MS);
    if (m->ok) {
        hl_acquire_free(&m->a);
        m->ok = 0;
    }
    m->resent = 0;
    memcpy(m->owner, owner, olen + 1);
    if (hl_acquire_init(&m->a, p->kind, &p->n, m->owner, wait, lease, window, lhl_mono_ms()) != 0) {
        hl_acquire_free(&m->a);
        luaL_error(L, "out of memory");
        return;
    }
    m->ok = 1;
}

/* p:acquire(owner, wait_ms, lease_ms, window_ms) -> machine
 * wait_ms: -1 forever, 0 one try; lease_ms > 0 (the driver applies its
 * watchdog lease itself); window_ms: the fair wait window. */
static int plock_acquire(lua_State *L)
{
    plock *p = check_plock(L, 1);
    pacq *m = (pacq *)hlc_newuserdata(L, sizeof *m);
    memset(m, 0, sizeof *m);
    luaL_getmetatable(L, PACQ_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1); /* the machine borrows the names */
    hlc_setref(L, -2);
    m->p = p;
    m->uref = LUA_NOREF;
    acq_start(L, m, p, 2);
    return 1;
}

static pacq *check_acq(lua_State *L, int idx)
{
    return check_live(L, idx, PACQ_MT, offsetof(pacq, ok), "freed acquire machine");
}

static int acq_free(lua_State *L)
{
    pacq *m = (pacq *)luaL_checkudata(L, 1, PACQ_MT);
    unsettled_end(L, m, 0); /* freed before its end: the record stays, not settling */
    if (m->ok) {
        hl_acquire_free(&m->a);
        m->ok = 0;
    }
    return 0;
}

/* m:restart(owner, wait_ms, lease_ms, window_ms) -> m: the same machine
 * (same lock) starts a new acquire with p:acquire's arguments; whatever it
 * did before is forgotten (a driver keeps one per lock instead of making a
 * machine per call). */
static int acq_restart(lua_State *L)
{
    pacq *m = (pacq *)luaL_checkudata(L, 1, PACQ_MT);
    unsettled_end(L, m, 0);
    acq_start(L, m, m->p, 2);
    lua_settop(L, 1);
    return 1;
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
    hl_action act = hl_acquire_next(&m->a, lhl_mono_ms());
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
        lhl_push_i64(L, m->a.sleep_ms);
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
            lhl_push_i64(L, m->a.hold_count);
            lhl_push_i64(L, m->a.token); /* a fenced grant's token, else 0 */
            return 4;
        }
        return 1 + lhl_push_fail(L, m->a.result, NULL);
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
    hl_acquire_on_reply(&m->a, r, lhl_mono_ms());
    return 0;
}

/* m:on_error([err]) -- the command could not be sent or answered; err is
 * a message with a stable prefix ("connection: ..."), default connection. */
static int acq_on_error(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_acquire_on_error(&m->a, lhl_err_code(luaL_optstring(L, 2, NULL)), lhl_mono_ms());
    return 0;
}

/* m:on_reply_lost([err]) -- the attempt was sent and its connection died
 * before the reply (the server may have run it): with an acquire latch
 * (m:latch) the machine settles it before it ends with err (next() says
 * what to send, on a new connection); without one, as on_error. */
static int acq_on_reply_lost(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_acquire_on_reply_lost(&m->a, lhl_err_code(luaL_optstring(L, 2, NULL)), lhl_mono_ms());
    return 0;
}

/* m:latch(epoch, seq, ttl_ms) -- make every attempt of this call
 * idempotent (before its first next()): the engine's acquire latch of the
 * machine's owner, "<latch prefix>:<owner>:<epoch>:<seq>" (seq unique per
 * call of the client; epoch: moved on by the driver after a command whose
 * reply was lost), kept ttl_ms. A reentrant, fair or fenced lock keeps it;
 * other kinds ignore it. */
static int acq_latch(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    uint64_t epoch = (uint64_t)lhl_check_int(L, 2, 0, INT64_MAX);
    uint64_t seq = (uint64_t)lhl_check_int(L, 3, 0, INT64_MAX);
    int64_t ttl = lhl_check_int(L, 4, 1, HILOCK_MAX_TIME_MS);
    const hl_names *n = m->a.names;
    size_t len = strlen(n->acquire_latch_prefix) + strlen(m->owner) + 48;
    char *buf = malloc(len);
    if (!buf)
        return luaL_error(L, "out of memory");
    int rc = hl_acquire_latch_arg(buf, len, n, m->owner, epoch, seq);
    if (rc == 0)
        rc = hl_acquire_set_latch(&m->a, buf, ttl);
    free(buf);
    if (rc)
        return luaL_error(L, "out of memory");
    return 0;
}

static int acq_on_subscribed(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_acquire_on_subscribed(&m->a, lua_toboolean(L, 2), lhl_mono_ms());
    return 0;
}

static int acq_on_wake(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_acquire_on_wake(&m->a, lhl_mono_ms());
    return 0;
}

/* m:cancel() -- the caller gave up (a cancel from another light thread):
 * call it between actions, never with a command in flight. Unless the
 * machine already has its outcome (a grant stands), next() then leaves the
 * fair line and the subscription and ends with "canceled". */
static int acq_cancel(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_acquire_cancel(&m->a, lhl_mono_ms());
    return 0;
}

/* m:on_resubscribe() -- the subscription was ended by the server (the
 * slot moved): the machine unsubscribes, subscribes again, retries. */
static int acq_on_resubscribe(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    hl_acquire_on_resubscribe(&m->a, lhl_mono_ms());
    return 0;
}

static int acq_channel(lua_State *L)
{
    lua_pushstring(L, check_acq(L, 1)->a.channel);
    return 1;
}

static int acq_attempts(lua_State *L)
{
    lhl_push_i64(L, check_acq(L, 1)->a.attempts);
    return 1;
}


#define PREL_MT "hilock.proto.release"
#define PSET_MT "hilock.proto.settle"

/* ---- release ---- */

typedef struct prel {
    hl_release m;
    const plock *p; /* whose names the machine uses (kept by its ref) */
    int ok;
    char owner[HL_OWNER_MAX];
} prel;

/* (Re)start release machine m of lock p from the arguments at idx.. */
static void rel_start(lua_State *L, prel *m, const plock *p, int idx)
{
    const char *owner = check_owner(L, idx);
    int64_t lease = lhl_check_int(L, idx + 1, 0, HILOCK_MAX_TIME_MS);
    int64_t wd_lease = lhl_check_int(L, idx + 2, 1, HILOCK_MAX_TIME_MS);
    size_t rlen;
    const char *rid = luaL_checklstring(L, idx + 3, &rlen);
    if (rlen == 0 || rlen > 128 || strlen(rid) != rlen)
        luaL_argerror(L, idx + 3, "expected a request id (1..128 bytes)");
    int64_t cmd_timeout = lhl_check_int(L, idx + 4, 1, HILOCK_MAX_TIME_MS);
    int64_t timeout = lhl_is_none_or_nil(L, idx + 5) ? 0
                                                     : lhl_check_int(L, idx + 5, 0, HILOCK_MAX_TIME_MS);
    if (m->ok) {
        hl_release_free(&m->m);
        m->ok = 0;
    }
    memcpy(m->owner, owner, strlen(owner) + 1);
    int rc = hl_release_init(&m->m, p->kind, &p->n, m->owner, lease, wd_lease, rid,
                             cmd_timeout, timeout, lhl_mono_ms());
    m->ok = 1;
    if (rc == HILOCK_ENOMEM)
        luaL_error(L, "out of memory");
}

/* p:release(owner, acquired_lease_ms, watchdog_lease_ms, request_id,
 *           command_timeout_ms [, timeout_ms]) -> machine
 * acquired_lease_ms: the lease the hold was taken with (0: unknown, the
 * watchdog lease is re-applied on a partial unlock). */
static int plock_release(lua_State *L)
{
    plock *p = check_plock(L, 1);
    lua_settop(L, 7); /* the machine goes after the arguments */
    prel *m = (prel *)hlc_newuserdata(L, sizeof *m);
    memset(m, 0, sizeof *m);
    luaL_getmetatable(L, PREL_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1); /* the machine borrows the names */
    hlc_setref(L, -2);
    m->p = p;
    rel_start(L, m, p, 2);
    return 1;
}

/* rel:restart(owner, ...) -> rel: the same machine (same lock) starts a
 * new release with p:release's arguments (see acquire's m:restart). */
static int rel_restart(lua_State *L)
{
    prel *m = (prel *)luaL_checkudata(L, 1, PREL_MT);
    lua_settop(L, 7);
    rel_start(L, m, m->p, 2);
    lua_settop(L, 1);
    return 1;
}

static prel *check_rel(lua_State *L, int idx)
{
    return check_live(L, idx, PREL_MT, offsetof(prel, ok), "freed release machine");
}

static int rel_free(lua_State *L)
{
    prel *m = (prel *)luaL_checkudata(L, 1, PREL_MT);
    if (m->ok) {
        hl_release_free(&m->m);
        m->ok = 0;
    }
    return 0;
}

/* rel:next() -> "send", bytes, timeout_ms (0 = the driver's own)
 *             | "done", true, remaining, still_held, renew, unconfirmed
 *             | "done", nil, err, still_held, renew, unconfirmed
 * renew: keep renewing the hold (hl_release.renew: not after a release no
 * try got an answer to); unconfirmed: no try got an answer */
static int rel_next(lua_State *L)
{
    prel *m = check_rel(L, 1);
    if (hl_release_next(&m->m, lhl_mono_ms()) == HL_ACT_SEND) {
        lua_pushliteral(L, "send");
        push_cmd(L, &m->m.cmd, 0);
        lhl_push_i64(L, m->m.timeout_ms);
        return 3;
    }
    lua_pushliteral(L, "done");
    if (m->m.result == 0) {
        lua_pushboolean(L, 1);
        lhl_push_i64(L, m->m.remaining);
    } else {
        lhl_push_fail(L, m->m.result, m->m.result == HILOCK_EPROTO ? m->m.refused : NULL);
    }
    lua_pushboolean(L, m->m.still_held);
    lua_pushboolean(L, m->m.renew);
    lua_pushboolean(L, m->m.unconfirmed);
    return 6;
}

static int rel_on_reply(lua_State *L)
{
    prel *m = check_rel(L, 1);
    hl_release_on_reply(&m->m, check_reply(L, 2), lhl_mono_ms());
    return 0;
}

/* rel:on_error([err]) -- err: "connection: ..." (default) etc. */
static int rel_on_error(lua_State *L)
{
    hl_release_on_error(&check_rel(L, 1)->m, lhl_err_code(luaL_optstring(L, 2, NULL)), lhl_mono_ms());
    return 0;
}

/* rel:known_lost(): the client knows this hold was lost (found gone or in
 * doubt) before this release: a fair unlock's "released" is then reported
 * as not owner (hl_release_known_lost). Call it after p:release or
 * rel:restart, before the first rel:next. */
static int rel_known_lost(lua_State *L)
{
    hl_release_known_lost(&check_rel(L, 1)->m);
    return 0;
}

/* ---- settle ---- */

typedef struct pset {
    hl_settle s;
    int ok;
    int sent; /* a send since the last reply or error: a wait reads it */
    /* the session's record of its attempt (proto.unsettled), ended with it */
    hl_unsettled_acq *urec;
    int uref;
} pset;

static pset *check_set(lua_State *L, int idx)
{
    return check_live(L, idx, PSET_MT, offsetof(pset, ok), "freed settle machine");
}

static int set_free(lua_State *L)
{
    pset *s = (pset *)luaL_checkudata(L, 1, PSET_MT);
    unsettled_end_rec(L, &s->urec, &s->uref, 0); /* freed before its end */
    if (s->ok) {
        hl_settle_free(&s->s);
        s->ok = 0;
    }
    return 0;
}

/* m:on_unknown(err, request_id, command_timeout_ms[, u]) -> settle machine | nil
 * The reply of the command just sent never came (read timeout) but the
 * server may still run it. The acquire machine ends with err. When that
 * command was an attempt, the returned settle machine must be driven on
 * the SAME connection (keep it out of the pool): it waits for the late
 * reply and undoes its effect. nil: nothing to settle (close it).
 * u: the client's proto.unsettled(), where the attempt is recorded as being
 * settled until the settle machine's "done" (outcome known, or given up:
 * then settled again before the owner's next acquire) or its free. */
static int acq_on_unknown(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    int code = lhl_err_code(luaL_optstring(L, 2, NULL));
    size_t rlen;
    const char *rid = luaL_checklstring(L, 3, &rlen);
    if (rlen == 0 || rlen > 128 || strlen(rid) != rlen)
        luaL_argerror(L, 3, "expected a request id (1..128 bytes)");
    int64_t cmd_timeout = lhl_check_int(L, 4, 1, HILOCK_MAX_TIME_MS);
    int top = lua_gettop(L);
    pset *s = (pset *)hlc_newuserdata(L, sizeof *s);
    memset(s, 0, sizeof *s);
    s->uref = LUA_NOREF;
    luaL_getmetatable(L, PSET_MT);
    lua_setmetatable(L, -2);
    int rc = hl_settle_init(&s->s, &m->a.cmd, m->a.names->publish, rid, cmd_timeout, lhl_mono_ms());
    hl_acquire_on_unknown(&m->a, code, lhl_mono_ms());
    if (rc == HILOCK_ENOMEM)
        return luaL_error(L, "out of memory");
    if (rc) {
        lua_pushnil(L);
        return 1;
    }
    s->ok = 1;
    if (top >= 5 && (s->urec = unsettled_put_settling(L, 5, m)) != NULL) {
        lua_pushvalue(L, 5);
        s->uref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    return 1;
}

static const char *const settle_outcomes[] = {"nothing", "released", "left line"};

/* set:next() -> "wait", ms, paused
 *                            read the next reply on the attempt's connection
 *                            (up to ms), then set:on_reply(r) / set:on_error();
 *                            paused: that connection is dead (close it) and
 *                            there is nothing to read: sleep ms, then next()
 *            | "send", bytes, reconnect
 *                            write them on that connection (no read yet);
 *                            reconnect: on a new connection to the same
 *                            server instead (the old one is dead; a failed
 *                            connect is set:on_error(), the machine tries
 *                            again later, 8 tries over ~3.5 s)
 *            | "done", outcome ("nothing" | "released" | "left line") */
static int set_next(lua_State *L)
{
    pset *s = check_set(L, 1);
    switch (hl_settle_next(&s->s, lhl_mono_ms())) {
    case HL_ACT_WAIT:
        lua_pushliteral(L, "wait");
        lhl_push_i64(L, s->s.sleep_ms);
        lua_pushboolean(L, s->s.reconnect && !s->sent); /* a pause */
        return 3;
    case HL_ACT_SEND:
        s->sent = 1;
        lua_pushliteral(L, "send");
        push_cmd(L, &s->s.cmd, 0);
        lua_pushboolean(L, s->s.reconnect);
        return 3;
    default:
        unsettled_end_rec(L, &s->urec, &s->uref, s->s.settled);
        lua_pushliteral(L, "done");
        lua_pushstring(L, settle_outcomes[s->s.outcome]);
        return 2;
    }
}

static int set_on_reply(lua_State *L)
{
    pset *s = check_set(L, 1);
    s->sent = 0;
    hl_settle_on_reply(&s->s, check_reply(L, 2), lhl_mono_ms());
    return 0;
}

static int set_on_error(lua_State *L)
{
    pset *s = check_set(L, 1);
    s->sent = 0;
    hl_settle_on_error(&s->s, lhl_mono_ms());
    return 0;
}

/* ---- watchdog ---- */

/* proto.renew_outcome(r) -> "renewed" | "lost" | "send_body" (send the command
 *   again with its script body, now)
 *   | "redirect" (send again through the routed path) | "trouble" (next tick) */

/* proto.renew_many_cmd(locks, owners, lease_ms [, eval]) -> bytes: one
 * script call renewing the holds owners[i] of locks[i] (proto.lock objects;
 * 1..100 of them, no read side; on a cluster all in one slot). */
static int p_renew_many_cmd(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    size_t n = hlc_rawlen(L, 1);
    if (n < 1 || n > HL_RENEW_MANY_MAX)
        return luaL_argerror(L, 1, "expected 1..100 locks");
    if (hlc_rawlen(L, 2) != n)
        return luaL_argerror(L, 2, "expected one owner per lock");
    int64_t lease = lhl_check_int(L, 3, 1, HILOCK_MAX_TIME_MS);
    int eval = eval_flag(L, 4);
    lua_settop(L, 4);
    const hl_names *names[HL_RENEW_MANY_MAX];
    const char *owners[HL_RENEW_MANY_MAX];
    for (size_t i = 0; i < n; i++) {
        /* the tables keep the objects and strings alive during the call */
        lua_rawgeti(L, 1, (int)i + 1);
        plock *p = (plock *)hlc_testudata(L, -1, PLOCK_MT);
        if (!p || !p->ok || p->kind == HILOCK_KIND_READ)
            return luaL_argerror(L, 1, "expected proto.lock objects (no read side)");
        names[i] = &p->n;
        lua_rawgeti(L, 2, (int)i + 1);
        size_t len;
        const char *o = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
        if (!o || len == 0 || len >= HL_OWNER_MAX || strlen(o) != len)
            return luaL_argerror(L, 2, "expected owner strings");
        owners[i] = o;
        lua_pop(L, 2);
    }
    hl_cmd cmd;
    hl_cmd_wide wide;
    hl_cmd_renew_many(&cmd, &wide, names, owners, (int)n, lease);
    push_cmd(L, &cmd, eval);
    return 1;
}

static const luaL_Reg plock_methods[] = {
    {"acquire", plock_acquire},
    {"release", plock_release},
    {NULL, NULL}};

static const luaL_Reg plock_meta[] = {{"__gc", plock_gc}, {NULL, NULL}};

static const luaL_Reg reader_methods[] = {
    {"feed", reader_feed},
    {"get", reader_get},
    {"feed_get", reader_feed_get},
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
    {"cancel", acq_cancel},
    {"on_unknown", acq_on_unknown},
    {"channel", acq_channel},
    {"attempts", acq_attempts},
    {"free", acq_free},
    {"restart", acq_restart},
    {"on_reply_lost", acq_on_reply_lost},
    {"latch", acq_latch},
    {NULL, NULL}};

static const luaL_Reg acq_meta[] = {{"__gc", acq_free}, {NULL, NULL}};


/* ---- the session's hold table (proto_session.c) ----
 *
 * proto.holds(watchdog_lease_ms, command_timeout_ms) -> one client's table
 * of holds, each named by a string key of the driver's:
 *   t:grant(key, watchdog, lease_ms, sent_at)  a grant written at sent_at
 *   t:remove(key)          released, dropped: never handed out again
 *   t:heard(key, r, now) -> boolean  a pub/sub frame r heard on the hold's
 *                          lock channel: true when the session made that
 *                          hold due for a check (hl_holds_heard)
 *   t:unheard(key, now) -> boolean  the pub/sub connection the hold
 *                          listens on is not known alive (sublive:due's
 *                          check): true when that hold became due for a
 *                          check (hl_holds_heard with HL_PS_UNHEARD)
 *   t:check(key, now) -> boolean  check it now, for the driver's reason
 *   t:check_next(now) -> key | nil  the next hold to check (send its
 *                          lock's hold_check_cmd), marked as checking
 *   t:check_outcome(key, gone)  gone: true (lost), false, nil (no usable
 *                          answer: proto.hold_gone's values)
 *   t:lost_next() -> key | nil  a hold a check found gone, once
 * Keys not in the table are ignored. Times: monotonic ms (proto.now_ms). */

#define PHOLDS_MT "hilock.proto.holds"

typedef struct pholdrec {
    hl_hold h;
    size_t len;
    char key[];
} pholdrec;

typedef struct pholds {
    hl_holds t;
    int recs; /* registry ref: key -> its pholdrec (a userdata the table keeps) */
    int live;
} pholds;

static int p_holds(lua_State *L)
{
    int64_t lease = lhl_check_int(L, 1, 1, HILOCK_MAX_TIME_MS);
    int64_t cto = lhl_check_int(L, 2, 1, HILOCK_MAX_TIME_MS);
    pholds *t = (pholds *)hlc_newuserdata(L, sizeof *t);
    memset(t, 0, sizeof *t);
    t->recs = LUA_NOREF;
    luaL_getmetatable(L, PHOLDS_MT);
    lua_setmetatable(L, -2);
    hl_holds_init(&t->t, lease, cto);
    lua_newtable(L);
    t->recs = luaL_ref(L, LUA_REGISTRYINDEX);
    t->live = 1;
    return 1;
}

static pholds *check_holds_ud(lua_State *L)
{
    pholds *t = (pholds *)luaL_checkudata(L, 1, PHOLDS_MT);
    if (!t->live)
        luaL_argerror(L, 1, "freed holds");
    return t;
}

/* key's record (arg 2), or NULL */
static pholdrec *holds_rec(lua_State *L, pholds *t)
{
    luaL_checktype(L, 2, LUA_TSTRING);
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->recs);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    pholdrec *rec = (pholdrec *)lua_touserdata(L, -1);
    lua_pop(L, 2);
    return rec;
}

static int holds_gc(lua_State *L)
{
    pholds *t = (pholds *)luaL_checkudata(L, 1, PHOLDS_MT);
    if (!t->live)
        return 0;
    t->live = 0;
    hl_holds_free(&t->t);
    luaL_unref(L, LUA_REGISTRYINDEX, t->recs); /* the records go with it */
    return 0;
}

static int holds_grant(lua_State *L)
{
    pholds *t = check_holds_ud(L);
    pholdrec *rec = holds_rec(L, t);
    int watchdog = lua_toboolean(L, 3);
    int64_t lease = lhl_check_int(L, 4, 0, HILOCK_MAX_TIME_MS);
    int64_t sent_at = lhl_check_int(L, 5, INT64_MIN / 4, INT64_MAX / 4);
    if (!rec) {
        size_t len;
        const char *key = lua_tolstring(L, 2, &len);
        /* Lua's memory: an allocation failure below leaves nothing behind */
        lua_rawgeti(L, LUA_REGISTRYINDEX, t->recs);
        lua_pushvalue(L, 2);
        rec = (pholdrec *)hlc_newuserdata(L, sizeof *rec + len + 1);
        hl_hold_init(&rec->h, rec, 0);
        rec->len = len;
        memcpy(rec->key, key, len + 1);
        lua_rawset(L, -3);
        lua_pop(L, 1);
    }
    if (hl_holds_grant(&t->t, &rec->h, watchdog, lease, sent_at) != 0)
        return luaL_error(L, "out of memory");
    return 0;
}

static int holds_remove(lua_State *L)
{
    pholds *t = check_holds_ud(L);
    pholdrec *rec = holds_rec(L, t);
    if (!rec)
        return 0;
    hl_holds_remove(&t->t, &rec->h);
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->recs);
    lua_pushvalue(L, 2);
    lua_pushnil(L);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    return 0;
}

static hl_holds *hb_lua_holds(lua_State *L) { return &check_holds_ud(L)->t; }

static hl_hold *hb_lua_hold(lua_State *L)
{
    pholdrec *rec = holds_rec(L, check_holds_ud(L));
    return rec ? &rec->h : NULL;
}

static void hb_lua_push_hold(lua_State *L, hl_hold *h)
{
    pholdrec *rec = (pholdrec *)h->ref;
    lua_pushlstring(L, rec->key, rec->len);
}

/* grant, remove and free here; the rest are hb_holds_fns' */
static const luaL_Reg holds_methods[] = {
    {"grant", holds_grant}, {"remove", holds_remove}, {"free", holds_gc}, {NULL, NULL}};
static const luaL_Reg holds_meta[] = {{"__gc", holds_gc}, {NULL, NULL}};

/* ---- subscription liveness (proto_session.c, hl_sublive_*) ----
 *
 * proto.sublive(command_timeout_ms) -> the session's liveness rule of one
 * pub/sub connection (0: no command timeout), idle until opened:
 *   s:opened(now)    a connection opened (its SUBSCRIBE written)
 *   s:heard(now)     a frame (any) read on it
 *   s:closed(now)    it closed (reset, error)
 *   s:idle()         nothing listens any more
 *   s:due(now) -> ping, reset, check  what to do now: write proto.ping_cmd()
 *                    on it; give it up (close it, open another: no
 *                    s:closed needed); hand each hold listening on it to
 *                    holds:unheard
 *   s:next() -> ms   when s:due has something next; -1: nothing
 *   s:alive() -> boolean  open and heard from within its deadline
 * Times: monotonic ms (proto.now_ms). A plain struct: nothing to free. */

#define PSUBLIVE_MT "hilock.proto.sublive"

static int p_sublive(lua_State *L)
{
    int64_t cto = lhl_check_int(L, 1, 0, HILOCK_MAX_TIME_MS);
    hl_sublive *s = (hl_sublive *)hlc_newuserdata(L, sizeof *s);
    hl_sublive_init(s, cto);
    luaL_getmetatable(L, PSUBLIVE_MT);
    lua_setmetatable(L, -2);
    return 1;
}

static hl_sublive *check_sublive(lua_State *L)
{
    return (hl_sublive *)luaL_checkudata(L, 1, PSUBLIVE_MT);
}

/* its methods are hb_sublive_fns' */
static const luaL_Reg sublive_methods[] = {{NULL, NULL}};

/* ---- the session's unsettled acquires (proto_session.c, hl_unsettled_*) ----
 *
 * proto.unsettled() -> u, one client's record of acquire attempts that may
 * have been granted and are not settled:
 *   u:after(m) -> recorded   m, an acquire machine that ended: recorded when
 *                            its settle failed every try (hl_acquire.unsettled)
 *   u:count() -> n           records kept (0: nothing to ask before an acquire)
 *   u:before(p, owner, window_ms) -> nil | true | machine   before owner's
 *                            acquire of p's lock: nil, go on; true, a settle
 *                            of theirs runs (fail the acquire); a machine:
 *                            drive it to "done" (it only settles the earlier
 *                            attempt: hl_acquire_resettle), then u:settled(it)
 *                            and ask again
 *   u:settled(m) -> bool     the machine's end: true settled (forgotten),
 *                            false kept until its lease ran out (a machine
 *                            freed before counts as false)
 * Times: the binding's clock (the machines' own). */

#define PUNS_MT "hilock.proto.unsettled"

typedef struct puns {
    hl_unsettled t;
    int live;
} puns;

static int p_unsettled(lua_State *L)
{
    puns *u = (puns *)hlc_newuserdata(L, sizeof *u);
    memset(u, 0, sizeof *u);
    luaL_getmetatable(L, PUNS_MT);
    lua_setmetatable(L, -2);
    hl_unsettled_init(&u->t, 0);
    u->live = 1;
    return 1;
}

static puns *check_uns(lua_State *L)
{
    puns *u = (puns *)luaL_checkudata(L, 1, PUNS_MT);
    if (!u->live)
        luaL_argerror(L, 1, "freed unsettled");
    return u;
}

static int uns_gc(lua_State *L)
{
    puns *u = (puns *)luaL_checkudata(L, 1, PUNS_MT);
    if (u->live) { /* no machine refers to it: each keeps a ref */
        u->live = 0;
        hl_unsettled_free(&u->t);
    }
    return 0;
}

static void unsettled_end_rec(lua_State *L, hl_unsettled_acq **urec, int *uref, int settled)
{
    if (!*urec)
        return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, *uref);
    puns *u = (puns *)lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (u && u->live)
        hl_unsettled_settle_end(&u->t, *urec, settled, lhl_mono_ms());
    *urec = NULL;
    luaL_unref(L, LUA_REGISTRYINDEX, *uref);
    *uref = LUA_NOREF;
}

/* m's attempt recorded settling in the proto.unsettled() at idx (anything
 * else: NULL), or NULL (no latch: only its own reply settles it; no room or
 * no memory: it ends with its lease) */
static hl_unsettled_acq *unsettled_put_settling(lua_State *L, int idx, pacq *m)
{
    puns *u = (puns *)hlc_testudata(L, idx, PUNS_MT);
    if (!u || !u->live || !m->a.latch)
        return NULL;
    return hl_unsettled_put(&u->t, m->a.names->name, m->owner, m->a.latch, m->a.latch_ttl_ms,
                            m->a.lease_ms, 1, lhl_mono_ms());
}

static int uns_after(lua_State *L)
{
    puns *u = check_uns(L);
    pacq *m = check_acq(L, 2);
    int put = 0;
    if (m->a.unsettled && m->a.latch && !m->urec) {
        m->a.unsettled = 0; /* recorded once */
        /* no room or no memory: the grant ends with its lease, as before */
        put = hl_unsettled_put(&u->t, m->a.names->name, m->owner, m->a.latch,
                               m->a.latch_ttl_ms, m->a.lease_ms, 0, lhl_mono_ms()) != NULL;
    }
    lua_pushboolean(L, put);
    return 1;
}

static int uns_count(lua_State *L)
{
    lhl_push_i64(L, (int64_t)check_uns(L)->t.count);
    return 1;
}

static int uns_before(lua_State *L)
{
    puns *u = check_uns(L);
    plock *p = check_plock(L, 2);
    const char *owner = check_owner(L, 3);
    int64_t window = lhl_check_int(L, 4, 1, HILOCK_MAX_TIME_MS);
    hl_unsettled_acq *r = NULL;
    hl_unsettled_step st = hl_unsettled_next(&u->t, p->n.name, owner, lhl_mono_ms(), &r);
    if (st == HL_UNSETTLED_NONE) {
        lua_pushnil(L);
        return 1;
    }
    if (st == HL_UNSETTLED_WAIT) {
        lua_pushboolean(L, 1);
        return 1;
    }
    /* SETTLE: r is marked settling until the machine's end (settled, free) */
    pacq *m = (pacq *)hlc_newuserdata(L, sizeof *m);
    memset(m, 0, sizeof *m);
    m->uref = LUA_NOREF;
    luaL_getmetatable(L, PACQ_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 2); /* the machine borrows the names */
    hlc_setref(L, -2);
    m->p = p;
    memcpy(m->owner, owner, strlen(owner) + 1);
    int rc = hl_acquire_init(&m->a, p->kind, &p->n, m->owner, 0,
                             r->lease_ms > 0 ? r->lease_ms : 1, window, lhl_mono_ms());
    m->ok = 1;
    if (rc == 0)
        rc = hl_acquire_set_latch(&m->a, r->latch, r->latch_ttl_ms);
    if (rc) {
        hl_unsettled_settle_end(&u->t, r, 0, lhl_mono_ms());
        return luaL_error(L, "out of memory");
    }
    hl_acquire_resettle(&m->a);
    m->urec = r;
    lua_pushvalue(L, 1);
    m->uref = luaL_ref(L, LUA_REGISTRYINDEX);
    return 1;
}

static int uns_settled(lua_State *L)
{
    check_uns(L);
    pacq *m = check_acq(L, 2);
    int settled = m->urec && !m->a.unsettled && m->a.result == 0;
    unsettled_end(L, m, settled);
    lua_pushboolean(L, settled);
    return 1;
}

static const luaL_Reg uns_methods[] = {
    {"after", uns_after}, {"count", uns_count}, {"before", uns_before},
    {"settled", uns_settled}, {NULL, NULL}};
static const luaL_Reg uns_meta[] = {{"__gc", uns_gc}, {NULL, NULL}};

/* ---- the engine's free functions: hb_fns (bindings/engine_fns.h) ---- */

/* the hold table (below): its table at 1, the hold of the key at 2 (NULL:
 * none), a hold's key pushed */
static hl_holds *hb_lua_holds(lua_State *L);
static hl_hold *hb_lua_hold(lua_State *L);
static void hb_lua_push_hold(lua_State *L, hl_hold *h);
static hl_sublive *check_sublive(lua_State *L);
static const hl_sem_names *hb_lua_sem(lua_State *L, int idx, int *kind);

static void hb_push_value(lua_State *L, hb_out *o, int *pos, const char *const *words)
{
    const hb_val *x = hb_next(o, pos, HB_LUA);
    luaL_checkstack(L, 3, "hilock: results");
    switch (x->t) {
    case HB_INT:
        lhl_push_i64(L, x->i);
        break;
    case HB_WORD:
        lua_pushstring(L, words[x->i]);
        break;
    case HB_BOOL:
        lua_pushboolean(L, (int)x->i);
        break;
    case HB_STR:
        lua_pushlstring(L, hb_sval(o, x), x->len);
        break;
    case HB_CMD:
        push_cmd(L, x->c ? x->c : &o->cmd[x->i], (int)x->len);
        break;
    case HB_ERR:
        lua_pushstring(L, lhl_err_prefix((int)x->i));
        break;
    case HB_HOLD:
        hb_lua_push_hold(L, x->h);
        break;
    case HB_LIST:
    case HB_TUPLE:
        lua_createtable(L, x->i < 64 ? (int)x->i : 64, 0);
        for (int k = 1; k <= (int)x->i; k++) {
            hb_push_value(L, o, pos, words);
            lua_rawseti(L, -2, k);
        }
        break;
    case HB_DICT:
        lua_createtable(L, 0, x->i < 64 ? (int)x->i : 64);
        for (int k = 0; k < (int)x->i; k++) {
            hb_push_value(L, o, pos, words);
            hb_push_value(L, o, pos, words);
            lua_settable(L, -3);
        }
        break;
    default:
        lua_pushnil(L);
    }
}

/* an engine object (hb_classes): its class, whether its HB_NEW row filled
 * it (then __gc runs the class's fini), its state */
typedef struct hb_lua_obj {
    int cls, live;
    _Alignas(max_align_t) unsigned char state[];
} hb_lua_obj;

static int hbobj_gc(lua_State *L)
{
    hb_lua_obj *u = (hb_lua_obj *)lua_touserdata(L, 1);
    if (u && u->live && hb_classes[u->cls].fini)
        hb_classes[u->cls].fini(u->state);
    if (u)
        u->live = 0;
    return 0;
}

typedef struct hb_push_ctx {
    hb_out *o;
    const char *const *words;
} hb_push_ctx;

static int hb_push_all(lua_State *L, hb_push_ctx *c)
{
    int n = 0;
    for (int pos = 0; pos < c->o->n; n++) {
        if (c->o->v[pos].only == HB_PY) {
            pos++, n--;
            continue;
        }
        luaL_checkstack(L, 4, "hilock: results");
        hb_push_value(L, c->o, &pos, c->words);
    }
    return n;
}

/* hb_push_all run by lua_pcall: its context the one argument */
static int hb_push_protected(lua_State *L)
{
    hb_push_ctx *c = (hb_push_ctx *)lua_touserdata(L, 1);
    lua_pop(L, 1);
    return hb_push_all(L, c);
}

/* the row in upvalue 1 (hb_push_protected in 2), called with the Lua arguments */
static int hb_call(lua_State *L)
{
    const hb_fn *f = (const hb_fn *)lua_touserdata(L, lua_upvalueindex(1));
    hb_arg a[HB_MAXARGS];
    memset(a, 0, sizeof a);
    int k = 0, opt = 0;
    for (const char *c = f->args; *c; c++) {
        if (*c == '|') {
            opt = 1;
            continue;
        }
        int idx = ++k;
        hb_arg *x = &a[idx - 1];
        if (opt && lhl_is_none_or_nil(L, idx) && *c != 'b')
            continue;
        x->set = 1;
        switch (*c) {
        case 'i':
            x->i = lhl_check_int(L, idx, INT64_MIN, INT64_MAX);
            break;
        case 'u':
            x->i = lhl_check_int(L, idx, 0, INT64_MAX);
            break;
        case 'b':
            x->i = lua_toboolean(L, idx);
            break;
        case 't':
            x->i = lhl_is_none_or_nil(L, idx) ? -1 : lua_toboolean(L, idx);
            break;
        case 'H':
            x->t = hb_lua_holds(L);
            break;
        case 'K':
            x->h = hb_lua_hold(L);
            break;
        case 'L':
            x->sl = check_sublive(L);
            break;
        case 'U':
            x->un = &check_uns(L)->t;
            break;
        case 'X':
            x->st = &check_set(L, idx)->s;
            break;
        case 'M':
            x->m = hb_lua_sem(L, idx, &x->skind);
            break;
        case 'r':
            x->r = check_reply(L, idx);
            break;
        case 'O':
            x->p = ((hb_lua_obj *)luaL_checkudata(L, idx, hb_classes[HB_CLS(f)].mt))->state;
            break;
        case 'c':
            x->i = lhl_err_code(luaL_checkstring(L, idx));
            break;
        case 'N': {
            plock *p = check_plock(L, idx);
            x->n = &p->n;
            x->kind = p->kind;
            break;
        }
        case 'e':
            x->i = luaL_checkoption(L, idx, NULL, f->words);
            break;
        case 'z':
            if (lhl_is_none_or_nil(L, idx)) {
                x->set = 0;
                break;
            }
            /* fall through */
        default: /* 's', 'S' */
            x->s = luaL_checklstring(L, idx, &x->len);
            if (*c != 'S' && strlen(x->s) != x->len)
                luaL_argerror(L, idx, "expected a string without NUL bytes");
        }
    }
    /* room for the protected push's function and its argument, taken
     * before the call's result holds any C memory */
    luaL_checkstack(L, 4, "hilock: results");
    hb_out o;
    hb_init(&o);
    hb_lua_obj *obj = NULL;
    if (f->flags & HB_NEW) { /* the object the row fills; it keeps a lock's names */
        const hb_class *c = &hb_classes[HB_CLS(f)];
        obj = (hb_lua_obj *)hlc_newuserdata(L, sizeof *obj + c->size);
        memset(obj, 0, sizeof *obj + c->size);
        obj->cls = HB_CLS(f);
        luaL_getmetatable(L, c->mt);
        lua_setmetatable(L, -2);
        if (f->args[0] == 'N') {
            lua_pushvalue(L, 1);
            hlc_setref(L, -2);
        }
        o.self = obj->state;
    }
    int rc = f->fn(a, &o);
    if (rc || o.oom) {
        char why[sizeof o.why];
        int bad = o.bad, code = o.oom ? HILOCK_ENOMEM : o.err;
        memcpy(why, o.why, sizeof why);
        const char *msg = o.msg == o.why ? why : o.msg;
        hb_free(&o);
        if (bad > 0)
            return luaL_argerror(L, bad, why);
        if (f->flags & HB_LUA_RAW) {
            lua_pushnil(L);
            lua_pushstring(L, msg ? msg : lhl_err_prefix(code));
            return 2;
        }
        return lhl_push_fail(L, code, msg);
    }
    if (obj) { /* the object (its row gives no values) */
        obj->live = 1;
        hb_free(&o);
        return 1;
    }
    hb_push_ctx ctx = {&o, f->words};
    if (o.v == o.inl && !o.arena) /* nothing of the result's in C memory */
        return hb_push_all(L, &ctx);
    /* pushing may raise (out of memory): pushed protected, so the result's
     * values and strings are freed before the error goes on */
    int base = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(2));
    lua_pushlightuserdata(L, &ctx);
    int prc = lua_pcall(L, 1, LUA_MULTRET, 0);
    hb_free(&o);
    if (prc)
        return lua_error(L);
    return lua_gettop(L) - base;
}

/* the rows of fns named for Lua, into the table on the top of the stack;
 * with a class, its rows of one kind: 'O' its methods, 'N' a lock's methods
 * making one, 'P' the functions making one (proto.router) */
static void hb_register_if(lua_State *L, const hb_fn *fns, int cls, char kind)
{
    for (int i = 0; fns[i].fn; i++) {
        char first = fns[i].args[0];
        if (!fns[i].lua ||
            (kind && (HB_CLS(&fns[i]) != cls ||
                      (kind == 'P' ? !(fns[i].flags & HB_NEW) || first == 'N' : first != kind))))
            continue;
        lua_pushlightuserdata(L, (void *)&fns[i]);
        lua_pushcfunction(L, hb_push_protected);
        lua_pushcclosure(L, hb_call, 2);
        lua_setfield(L, -2, fns[i].lua);
    }
}

static void hb_register(lua_State *L, const hb_fn *fns) { hb_register_if(L, fns, 0, 0); }

static const luaL_Reg hbobj_meta[] = {{"__gc", hbobj_gc}, {NULL, NULL}};

static const luaL_Reg proto_funcs[] = {
    {"lock", p_lock},
    {"reader", p_reader},
    {"command", p_command},
    {"uuid", p_uuid},
    {"key_slot", p_key_slot},
    {"holds", p_holds},
    {"sublive", p_sublive},
    {"unsettled", p_unsettled},
    {NULL, NULL}};

static const luaL_Reg rel_methods[] = {
    {"next", rel_next}, {"on_reply", rel_on_reply}, {"on_error", rel_on_error},
    {"free", rel_free}, {"restart", rel_restart}, {"known_lost", rel_known_lost}, {NULL, NULL}};
static const luaL_Reg rel_meta[] = {{"__gc", rel_free}, {NULL, NULL}};
static const luaL_Reg set_methods[] = {
    {"next", set_next}, {"on_reply", set_on_reply}, {"on_error", set_on_error},
    {"free", set_free}, {NULL, NULL}};
static const luaL_Reg set_meta[] = {{"__gc", set_free}, {NULL, NULL}};
static const luaL_Reg no_meta[] = {{NULL, NULL}};

static const luaL_Reg engine_funcs[] = {
    {"renew_many_cmd", p_renew_many_cmd},
    {NULL, NULL}};

/* The engine's metatables; its functions into the proto table on the top. */

/* ---- semaphores and the count-down latch (proto_sem.c) ---- */

#define PSEM_MT "hilock.proto.sem"
#define PSW_MT "hilock.proto.semwait"

typedef struct psem {
    hl_sem_names n;
    hl_sem_kind kind;
    int ok;
} psem;

static const char *const psem_kinds[] = {"semaphore", "permit", "latch", NULL};

/* proto.sem(name, kind [, sharded]) -> the names of a semaphore
 * ("semaphore", Redisson's RSemaphore), a permit-expirable semaphore
 * ("permit") or a count-down latch ("latch"); sharded: SPUBLISH (cluster). */
static int p_sem(lua_State *L)
{
    const char *name = lhl_check_name(L, 1);
    hl_sem_kind kind = (hl_sem_kind)(luaL_checkoption(L, 2, NULL, psem_kinds) + 1);
    int sharded = lua_toboolean(L, 3);
    psem *p = (psem *)hlc_newuserdata(L, sizeof *p);
    memset(p, 0, sizeof *p);
    luaL_getmetatable(L, PSEM_MT);
    lua_setmetatable(L, -2);
    if (hl_sem_names_init(&p->n, kind, name) != 0)
        return luaL_error(L, "out of memory");
    p->kind = kind;
    p->ok = 1;
    if (sharded)
        p->n.publish = "spublish";
    if (sharded && !hl_sem_names_one_slot(&p->n))
        return luaL_argerror(L, 1, "empty or unclosed hash tag: on a cluster the companion "
                                   "keys would land in another slot");
    return 1;
}

static psem *check_psem(lua_State *L, int idx)
{
    return check_live(L, idx, PSEM_MT, offsetof(psem, ok), "freed semaphore names");
}

static const hl_sem_names *hb_lua_sem(lua_State *L, int idx, int *kind)
{
    psem *p = check_psem(L, idx);
    *kind = (int)p->kind;
    return &p->n;
}

static int psem_gc(lua_State *L)
{
    psem *p = (psem *)luaL_checkudata(L, 1, PSEM_MT);
    if (p->ok) {
        hl_sem_names_free(&p->n);
        p->ok = 0;
    }
    return 0;
}

/* A number argument as int64 (nil, err when it is not an integer in range). */
static int sem_arg(lua_State *L, int idx, int64_t min, int64_t max, int64_t *out)
{
    lua_Number v = luaL_checknumber(L, idx);
    if (v != v || v < (lua_Number)min || v > (lua_Number)max || v != (lua_Number)(int64_t)v)
        return -1;
    *out = (int64_t)v;
    return 0;
}

static int sem_invalid(lua_State *L, const char *what)
{
    return lhl_push_fail(L, HILOCK_EINVAL, what);
}

/* ---- one-command operations: s:op(verb, ...) -> machine | nil, err ----
 *
 *   "try_set", n        set the permits / the latch's count if none: 1 set, 0 kept
 *   "release", k        semaphore: give back k permits
 *   "add", k / "set", n semaphore: add k permits (may be < 0) / make them n
 *   "drain"             semaphore: take every free permit: how many
 *   "count"             free permits / the latch's count
 *   "count_down"        latch: count down by one: the count left
 *   "delete"            delete it and wake its waiters: 1 deleted, 0 none
 *   "permit_release", id  permit-expirable: give back the permit id (32 hex):
 *                       1 released, 0 not taken, -1 its lease had ended
 * Machine: next() -> "send", bytes | "done", n | "done", nil, err;
 * on_reply(r) (NOSCRIPT: the next send is the script body); on_error(err).
 * Bad input is nil, "invalid argument: ..." before anything is sent. */

#define PSOP_MT "hilock.proto.semop"

typedef struct psop {
    hl_cmd cmd;
    int (*decode)(const redisReply *, int64_t *);
    int eval, done, result;
    int64_t value;
    unsigned char id[HL_PES_ID_BYTES];
    char err[256];
} psop;

static const char *const psop_verbs[] = {"try_set", "release", "add", "set", "drain", "count",
                                         "count_down", "delete", "permit_release", NULL};

static int psem_op(lua_State *L)
{
    psem *p = check_psem(L, 1);
    int verb = luaL_checkoption(L, 2, NULL, psop_verbs);
    int latch = p->kind == HL_SEM_LATCH, sem = p->kind == HL_SEM_SEMAPHORE;
    psop *o = (psop *)hlc_newuserdata(L, sizeof *o);
    memset(o, 0, sizeof *o);
    luaL_getmetatable(L, PSOP_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1); /* the command borrows the names */
    hlc_setref(L, -2);
    o->decode = hl_sem_decode_int;
    int64_t n = 0;
    switch (verb) {
    case 0: /* try_set */
        if (sem_arg(L, 3, 1, latch ? HL_SEM_COUNT_MAX : HL_SEM_PERMITS_MAX, &n) ||
            (latch ? hl_sem_check_count(n) : hl_sem_check_permits(n)))
            return sem_invalid(L, latch ? "a latch count is 1..999999999999999"
                                        : "permits are 1..2147483647");
        hl_sem_cmd_try_set(&o->cmd, p->kind, &p->n, n);
        break;
    case 1: /* release */
        if (!sem)
            return luaL_argerror(L, 1, "not a semaphore");
        if (sem_arg(L, 3, 1, HL_SEM_PERMITS_MAX, &n) || hl_sem_check_permits(n))
            return sem_invalid(L, "permits are 1..2147483647");
        hl_sem_cmd_release(&o->cmd, &p->n, n);
        break;
    case 2: /* add */
    case 3: /* set */
        if (latch || (verb == 3 && !sem))
            return luaL_argerror(L, 1, "not for this kind");
        /* the engine's bounds, as the C API and hilock._engine: counts
         * within +-HL_SEM_COUNT_MAX */
        if (sem_arg(L, 3, verb == 3 ? 0 : -HL_SEM_COUNT_MAX, HL_SEM_COUNT_MAX, &n))
            return sem_invalid(L, verb == 3 ? "permits are 0..999999999999999"
                                            : "the change is -999999999999999..999999999999999");
        hl_sem_cmd_add(&o->cmd, &p->n, n, verb == 3);
        break;
    case 4: /* drain */
        if (!sem)
            return luaL_argerror(L, 1, "not a semaphore");
        hl_sem_cmd_drain(&o->cmd, &p->n);
        break;
    case 5: /* count */
        hl_sem_cmd_count(&o->cmd, p->kind, &p->n);
        o->decode = hl_sem_decode_count;
        break;
    case 6: /* count_down */
        if (!latch)
            return luaL_argerror(L, 1, "not a latch");
        hl_latch_cmd_count_down(&o->cmd, &p->n);
        break;
    case 7: /* delete */
        hl_sem_cmd_delete(&o->cmd, p->kind, &p->n);
        break;
    default: /* permit_release */
        if (p->kind != HL_SEM_PERMIT)
            return luaL_argerror(L, 1, "not a permit-expirable semaphore");
        if (hl_pes_id_parse(o->id, luaL_checkstring(L, 3)) != 0)
            return sem_invalid(L, "a permit id is 32 hex characters");
        hl_pes_cmd_release(&o->cmd, &p->n, o->id);
        break;
    }
    return 1;
}

static psop *check_psop(lua_State *L, int idx)
{
    return (psop *)luaL_checkudata(L, idx, PSOP_MT);
}

static int psop_next(lua_State *L)
{
    psop *o = check_psop(L, 1);
    if (!o->done) {
        lua_pushliteral(L, "send");
        push_cmd(L, &o->cmd, 0);
        return 2;
    }
    lua_pushliteral(L, "done");
    if (o->result)
        return 1 + lhl_push_fail(L, o->result, o->err[0] ? o->err : NULL);
    lhl_push_i64(L, o->value);
    return 2;
}

static int psop_on_reply(lua_State *L)
{
    psop *o = check_psop(L, 1);
    redisReply *r = check_reply(L, 2);
    if (o->done)
        return 0;
    if (hl_reply_is_noscript(r) && o->cmd.script >= 0 && !o->eval) {
        o->eval = 1; /* the server forgot the script: send its body */
        hl_cmd_to_eval(&o->cmd);
        return 0;
    }
    o->done = 1;
    o->result = o->decode(r, &o->value);
    if (o->result && r->type == REDIS_REPLY_ERROR && r->str)
        snprintf(o->err, sizeof o->err, "%s", r->str);
    return 0;
}

static int psop_on_error(lua_State *L)
{
    psop *o = check_psop(L, 1);
    o->done = 1;
    o->result = lhl_err_code(luaL_optstring(L, 2, NULL));
    return 0;
}

/* ---- the wait machine of the three ---- */

typedef struct psw {
    hl_semwait m;
    int ok;
    int resent;
    unsigned char ids[HL_PES_ID_BYTES]; /* permit-expirable: the permit's id */
} psw;

/* s:wait(permits, wait_ms [, lease_ms [, owner, latch_epoch, latch_seq,
 * latch_ttl_ms]]) -> machine | nil, err: acquire permits (semaphore), one
 * permit with its own lease (permit-expirable; lease_ms nil or 0: until
 * released), or await the latch (permits ignored). wait_ms: -1 forever, 0
 * one try. Semaphore with an owner: every try of this call is idempotent
 * under the owner's request latch (hl_sem_latch_arg: epoch = the client's
 * count of attempts whose reply was lost, seq unique per call, ttl the
 * latch's life, hl_acquire_latch_ttl), and a try whose reply was lost
 * (w:on_reply_lost) is settled before the machine ends. */
static int psem_wait(lua_State *L)
{
    psem *p = check_psem(L, 1);
    int64_t permits = 1, wait, lease = 0;
    if (p->kind == HL_SEM_SEMAPHORE &&
        (sem_arg(L, 2, 1, HL_SEM_PERMITS_MAX, &permits) || hl_sem_check_permits(permits)))
        return sem_invalid(L, "permits are 1..2147483647");
    if (sem_arg(L, 3, -1, HILOCK_MAX_TIME_MS, &wait))
        return sem_invalid(L, "bad wait");
    if (p->kind == HL_SEM_PERMIT && !lhl_is_none_or_nil(L, 4) &&
        sem_arg(L, 4, 0, HILOCK_MAX_TIME_MS, &lease))
        return sem_invalid(L, "a permit's lease is a time (0: until released)");
    psw *m = (psw *)hlc_newuserdata(L, sizeof *m);
    memset(m, 0, sizeof *m);
    luaL_getmetatable(L, PSW_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1); /* the machine borrows the names */
    hlc_setref(L, -2);
    if (p->kind == HL_SEM_PERMIT) {
        /* 16 random bytes, as Redisson's generateId: a uuid4's 32 hex digits */
        char u[HL_UUID_LEN + 1], hex[2 * HL_PES_ID_BYTES + 1];
        size_t k = 0;
        if (hl_uuid4(u) != 0)
            return luaL_error(L, "hilock: no random bytes for a permit id");
        for (const char *c = u; *c && k < sizeof hex - 1; c++)
            if (*c != '-')
                hex[k++] = *c;
        hex[k] = 0;
        if (hl_pes_id_parse(m->ids, hex) != 0)
            return luaL_error(L, "hilock: bad permit id");
    }
    if (hl_semwait_init(&m->m, p->kind, &p->n, permits, lease, m->ids, wait, lhl_mono_ms()))
        return sem_invalid(L, "bad permits, wait or lease");
    m->ok = 1; /* from here on __gc frees the machine (its latch) */
    if (p->kind == HL_SEM_SEMAPHORE && !lhl_is_none_or_nil(L, 5)) {
        const char *owner = luaL_checkstring(L, 5);
        uint64_t epoch = (uint64_t)lhl_check_int(L, 6, 0, INT64_MAX);
        uint64_t seq = (uint64_t)lhl_check_int(L, 7, 0, INT64_MAX);
        int64_t ttl = lhl_check_int(L, 8, 1, HILOCK_MAX_TIME_MS);
        size_t len = strlen(p->n.latch_prefix) + strlen(owner) + 48;
        char *buf = malloc(len);
        if (!buf)
            return luaL_error(L, "out of memory");
        int rc = hl_sem_latch_arg(buf, len, &p->n, owner, epoch, seq);
        if (rc == 0)
            rc = hl_semwait_set_latch(&m->m, buf, ttl);
        free(buf);
        if (rc == HILOCK_ENOMEM)
            return luaL_error(L, "out of memory");
        if (rc)
            return sem_invalid(L, "a request latch needs an owner (no ':' at its end)");
    }
    return 1;
}

static psw *check_psw(lua_State *L, int idx)
{
    return check_live(L, idx, PSW_MT, offsetof(psw, ok), "freed semaphore wait");
}

static int psw_free(lua_State *L)
{
    psw *m = (psw *)luaL_checkudata(L, 1, PSW_MT);
    if (m->ok)
        hl_semwait_free(&m->m);
    m->ok = 0;
    return 0;
}

/* w:next() -> "send", bytes | "subscribe", channel | "wait", channel,
 * sleep_ms (-1: until a message) | "unsubscribe", channel
 * | "done", true [, permit id (permit-expirable)] | "done", nil, err */
static int psw_next(lua_State *L)
{
    psw *m = check_psw(L, 1);
    switch (hl_semwait_next(&m->m, lhl_mono_ms())) {
    case HL_ACT_SEND:
        m->resent = 0;
        lua_pushliteral(L, "send");
        push_cmd(L, &m->m.cmd, 0);
        return 2;
    case HL_ACT_SUBSCRIBE:
        lua_pushliteral(L, "subscribe");
        lua_pushstring(L, m->m.channel);
        return 2;
    case HL_ACT_WAIT:
        lua_pushliteral(L, "wait");
        lua_pushstring(L, m->m.channel);
        lhl_push_i64(L, m->m.sleep_ms);
        return 3;
    case HL_ACT_UNSUBSCRIBE:
        lua_pushliteral(L, "unsubscribe");
        lua_pushstring(L, m->m.channel);
        return 2;
    default:
        lua_pushliteral(L, "done");
        if (m->m.result)
            return 1 + lhl_push_fail(L, m->m.result, NULL);
        lua_pushboolean(L, 1);
        if (m->m.kind != HL_SEM_PERMIT)
            return 2;
        char hex[2 * HL_PES_ID_BYTES + 1];
        hl_pes_id_hex(hex, m->ids);
        lua_pushstring(L, hex);
        return 3;
    }
}

/* w:on_reply(r) -> nil, or the bytes to send again (EVAL after NOSCRIPT) */
static int psw_on_reply(lua_State *L)
{
    psw *m = check_psw(L, 1);
    redisReply *r = check_reply(L, 2);
    if (hl_reply_is_noscript(r) && m->m.cmd.script >= 0 && !m->resent) {
        m->resent = 1;
        push_cmd(L, &m->m.cmd, 1);
        return 1;
    }
    hl_semwait_on_reply(&m->m, r, lhl_mono_ms());
    return 0;
}

static int psw_on_error(lua_State *L)
{
    hl_semwait_on_error(&check_psw(L, 1)->m, lhl_err_code(luaL_optstring(L, 2, NULL)),
                        lhl_mono_ms());
    return 0;
}

/* w:on_reply_lost([err]) -- the try was sent and no reply came (its
 * connection died or timed out): the server may have run it. A latched
 * semaphore try or a permit-expirable one is then settled by the machine
 * (its next sends say how) before it ends with the error. */
static int psw_on_reply_lost(lua_State *L)
{
    psw *m = check_psw(L, 1);
    m->m.cmd.reply_lost = 1;
    hl_semwait_on_error(&m->m, lhl_err_code(luaL_optstring(L, 2, NULL)), lhl_mono_ms());
    return 0;
}

static int psw_on_subscribed(lua_State *L)
{
    hl_semwait_on_subscribed(&check_psw(L, 1)->m, lua_toboolean(L, 2), lhl_mono_ms());
    return 0;
}

static int psw_on_wake(lua_State *L)
{
    hl_semwait_on_wake(&check_psw(L, 1)->m, lhl_mono_ms());
    return 0;
}

static int psw_on_resubscribe(lua_State *L)
{
    hl_semwait_on_resubscribe(&check_psw(L, 1)->m, lhl_mono_ms());
    return 0;
}

static const luaL_Reg psem_methods[] = {
    {"op", psem_op},
    {"wait", psem_wait},
    {NULL, NULL}};
static const luaL_Reg psem_meta[] = {{"__gc", psem_gc}, {NULL, NULL}};
static const luaL_Reg psw_methods[] = {
    {"next", psw_next},
    {"on_reply", psw_on_reply},
    {"on_error", psw_on_error},
    {"on_reply_lost", psw_on_reply_lost},
    {"on_subscribed", psw_on_subscribed},
    {"on_wake", psw_on_wake},
    {"on_resubscribe", psw_on_resubscribe},
    {"free", psw_free},
    {NULL, NULL}};
static const luaL_Reg psw_meta[] = {{"__gc", psw_free}, {NULL, NULL}};
static const luaL_Reg psop_methods[] = {
    {"next", psop_next}, {"on_reply", psop_on_reply}, {"on_error", psop_on_error}, {NULL, NULL}};
static const luaL_Reg sem_funcs[] = {{"sem", p_sem}, {NULL, NULL}};

void lhl_engine_open(lua_State *L)
{
    lhl_new_metatable(L, PLOCK_MT, plock_methods, plock_meta);
    lhl_new_metatable(L, PREADER_MT, reader_methods, reader_meta);
    lhl_new_metatable(L, PREPLY_MT, reply_methods, reply_meta);
    lhl_new_metatable(L, PACQ_MT, acq_methods, acq_meta);
    lhl_new_metatable(L, PHOLDS_MT, holds_methods, holds_meta);
    lhl_new_metatable(L, PSUBLIVE_MT, sublive_methods, no_meta);
    lhl_new_metatable(L, PUNS_MT, uns_methods, uns_meta);
    hlc_setfuncs(L, proto_funcs);
    lhl_new_metatable(L, PREL_MT, rel_methods, rel_meta);
    lhl_new_metatable(L, PSET_MT, set_methods, set_meta);
    hlc_setfuncs(L, engine_funcs);
    hb_register(L, hb_fns);
    for (int c = 1; c < HBC_COUNT; c++) { /* the engine objects: methods; constructors */
        lhl_new_metatable(L, hb_classes[c].mt, no_meta, hbobj_meta);
        luaL_getmetatable(L, hb_classes[c].mt);
        lua_getfield(L, -1, "__index");
        hb_register_if(L, hb_obj_fns, c, 'O');
        lua_pop(L, 2);
        hb_register_if(L, hb_obj_fns, c, 'P');
    }
    luaL_getmetatable(L, PLOCK_MT); /* the lock's methods: hb_lock_fns, hb_obj_fns' */
    lua_getfield(L, -1, "__index");
    hb_register(L, hb_lock_fns);
    for (int c = 1; c < HBC_COUNT; c++)
        hb_register_if(L, hb_obj_fns, c, 'N');
    lua_pop(L, 2);
    luaL_getmetatable(L, PHOLDS_MT); /* the hold table's methods: hb_holds_fns */
    lua_getfield(L, -1, "__index");
    hb_register(L, hb_holds_fns);
    lua_pop(L, 2);
    luaL_getmetatable(L, PSUBLIVE_MT); /* the liveness rule's: hb_sublive_fns */
    lua_getfield(L, -1, "__index");
    hb_register(L, hb_sublive_fns);
    lua_pop(L, 2);
    luaL_getmetatable(L, PUNS_MT); /* the unsettled set's: hb_unsettled_fns */
    lua_getfield(L, -1, "__index");
    hb_register(L, hb_unsettled_fns);
    lua_pop(L, 2);
    luaL_getmetatable(L, PSET_MT); /* the settle machine's: hb_settle_fns */
    lua_getfield(L, -1, "__index");
    hb_register(L, hb_settle_fns);
    lua_pop(L, 2);
    lhl_new_metatable(L, PSEM_MT, psem_methods, psem_meta);
    luaL_getmetatable(L, PSEM_MT); /* the names' methods: hb_sem_fns */
    lua_getfield(L, -1, "__index");
    hb_register(L, hb_sem_fns);
    lua_pop(L, 2);
    lhl_new_metatable(L, PSW_MT, psw_methods, psw_meta);
    lhl_new_metatable(L, PSOP_MT, psop_methods, no_meta);
    hlc_setfuncs(L, sem_funcs);
}
