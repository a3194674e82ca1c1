/*
 * hilock.proto: the engine's machines beyond acquire, for drivers that do
 * their own I/O (resty/hilock.lua). Included by hilock.c (one translation
 * unit, so the module keeps a single exported symbol and shares its static
 * helpers); not compiled on its own.
 *
 * Every machine follows the same shape: m:next() says what to do ("send"
 * bytes, "wait" for a reply, "done" with the result); the driver performs
 * it and feeds back what happened (m:on_reply(reply), m:on_error(err)).
 * The machines name every command, key, channel and Redis error string, so
 * a driver never has to.
 */

#define PREL_MT "hilock.proto.release"
#define PSET_MT "hilock.proto.settle"
#define PRT_MT "hilock.proto.router"
#define PACK_MT "hilock.proto.ack"

/* ---- release ---- */

typedef struct prel {
    hl_release m;
    int ok;
    char owner[HL_OWNER_MAX];
} prel;

/* p:release(owner, acquired_lease_ms, watchdog_lease_ms, request_id,
 *           command_timeout_ms [, timeout_ms]) -> machine
 * acquired_lease_ms: the lease the hold was taken with (0: unknown, the
 * watchdog lease is re-applied on a partial unlock). */
static int plock_release(lua_State *L)
{
    plock *p = check_plock(L, 1);
    const char *owner = check_owner(L, 2);
    int64_t lease = check_int(L, 3, 0, HILOCK_MAX_TIME_MS);
    int64_t wd_lease = check_int(L, 4, 1, HILOCK_MAX_TIME_MS);
    size_t rlen;
    const char *rid = luaL_checklstring(L, 5, &rlen);
    if (rlen == 0 || rlen > 128 || strlen(rid) != rlen)
        luaL_argerror(L, 5, "expected a request id (1..128 bytes)");
    int64_t cmd_timeout = check_int(L, 6, 1, HILOCK_MAX_TIME_MS);
    int64_t timeout = is_none_or_nil(L, 7) ? 0 : check_int(L, 7, 0, HILOCK_MAX_TIME_MS);
    prel *m = (prel *)hlc_newuserdata(L, sizeof *m);
    memset(m, 0, sizeof *m);
    luaL_getmetatable(L, PREL_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1); /* the machine borrows the names */
    hlc_setref(L, -2);
    memcpy(m->owner, owner, strlen(owner) + 1);
    int rc = hl_release_init(&m->m, p->kind, &p->n, m->owner, lease, wd_lease, rid,
                             cmd_timeout, timeout, mono_ms());
    m->ok = 1;
    if (rc == HILOCK_ENOMEM)
        return luaL_error(L, "out of memory");
    return 1;
}

static prel *check_rel(lua_State *L, int idx)
{
    prel *m = (prel *)luaL_checkudata(L, idx, PREL_MT);
    if (!m->ok)
        luaL_argerror(L, idx, "freed release machine");
    return m;
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
 *             | "done", true, remaining, still_held
 *             | "done", nil, err, still_held */
static int rel_next(lua_State *L)
{
    prel *m = check_rel(L, 1);
    if (hl_release_next(&m->m, mono_ms()) == HL_ACT_SEND) {
        lua_pushliteral(L, "send");
        push_cmd(L, &m->m.cmd, 0);
        push_i64(L, m->m.timeout_ms);
        return 3;
    }
    lua_pushliteral(L, "done");
    if (m->m.result == 0) {
        lua_pushboolean(L, 1);
        push_i64(L, m->m.remaining);
    } else {
        push_fail(L, m->m.result, NULL);
    }
    lua_pushboolean(L, m->m.still_held);
    return 4;
}

static int rel_on_reply(lua_State *L)
{
    hl_release_on_reply(&check_rel(L, 1)->m, check_reply(L, 2), mono_ms());
    return 0;
}

/* rel:on_error([err]) -- err: "connection: ..." (default) etc. */
static int rel_on_error(lua_State *L)
{
    hl_release_on_error(&check_rel(L, 1)->m, err_code(luaL_optstring(L, 2, NULL)), mono_ms());
    return 0;
}

/* ---- settle ---- */

typedef struct pset {
    hl_settle s;
    int ok;
} pset;

static pset *check_set(lua_State *L, int idx)
{
    pset *s = (pset *)luaL_checkudata(L, idx, PSET_MT);
    if (!s->ok)
        luaL_argerror(L, idx, "freed settle machine");
    return s;
}

static int set_free(lua_State *L)
{
    pset *s = (pset *)luaL_checkudata(L, 1, PSET_MT);
    if (s->ok) {
        hl_settle_free(&s->s);
        s->ok = 0;
    }
    return 0;
}

/* m:on_unknown(err, request_id, command_timeout_ms) -> settle machine | nil
 * The reply of the command just sent never came (read timeout) but the
 * server may still run it. The acquire machine ends with err. When that
 * command was an attempt, the returned settle machine must be driven on
 * the SAME connection (keep it out of the pool): it waits for the late
 * reply and undoes its effect. nil: nothing to settle (close it). */
static int acq_on_unknown(lua_State *L)
{
    pacq *m = check_acq(L, 1);
    int code = err_code(luaL_optstring(L, 2, NULL));
    size_t rlen;
    const char *rid = luaL_checklstring(L, 3, &rlen);
    if (rlen == 0 || rlen > 128 || strlen(rid) != rlen)
        luaL_argerror(L, 3, "expected a request id (1..128 bytes)");
    int64_t cmd_timeout = check_int(L, 4, 1, HILOCK_MAX_TIME_MS);
    pset *s = (pset *)hlc_newuserdata(L, sizeof *s);
    memset(s, 0, sizeof *s);
    luaL_getmetatable(L, PSET_MT);
    lua_setmetatable(L, -2);
    int rc = hl_settle_init(&s->s, &m->a.cmd, m->a.names->publish, rid, cmd_timeout, mono_ms());
    hl_acquire_on_unknown(&m->a, code, mono_ms());
    if (rc == HILOCK_ENOMEM)
        return luaL_error(L, "out of memory");
    if (rc) {
        lua_pushnil(L);
        return 1;
    }
    s->ok = 1;
    return 1;
}

static const char *const settle_outcomes[] = {"nothing", "released", "left line"};

/* set:next() -> "wait", ms   read the next reply on the attempt's connection
 *                            (up to ms), then set:on_reply(r) / set:on_error()
 *            | "send", bytes write them on that connection (no read yet)
 *            | "done", outcome ("nothing" | "released" | "left line") */
static int set_next(lua_State *L)
{
    pset *s = check_set(L, 1);
    switch (hl_settle_next(&s->s, mono_ms())) {
    case HL_ACT_WAIT:
        lua_pushliteral(L, "wait");
        push_i64(L, s->s.sleep_ms);
        return 2;
    case HL_ACT_SEND:
        lua_pushliteral(L, "send");
        push_cmd(L, &s->s.cmd, 0);
        return 2;
    default:
        lua_pushliteral(L, "done");
        lua_pushstring(L, settle_outcomes[s->s.outcome]);
        return 2;
    }
}

static int set_on_reply(lua_State *L)
{
    hl_settle_on_reply(&check_set(L, 1)->s, check_reply(L, 2), mono_ms());
    return 0;
}

static int set_on_error(lua_State *L)
{
    hl_settle_on_error(&check_set(L, 1)->s, mono_ms());
    return 0;
}

/* ---- force unlock: one script command ---- */

#define PFORCE_MT "hilock.proto.force"

typedef struct pforce {
    hl_cmd cmd;
    int eval, done, result;
    int64_t deleted;
} pforce;

/* p:force() -> machine: next() -> "send", bytes | "done", deleted (boolean)
 * | "done", nil, err; on_reply(r); on_error(err) */
static int plock_force(lua_State *L)
{
    plock *p = check_plock(L, 1);
    pforce *f = (pforce *)hlc_newuserdata(L, sizeof *f);
    memset(f, 0, sizeof *f);
    luaL_getmetatable(L, PFORCE_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1); /* the command borrows the names */
    hlc_setref(L, -2);
    hl_cmd_force(&f->cmd, p->kind, &p->n);
    return 1;
}

static int force_next(lua_State *L)
{
    pforce *f = (pforce *)luaL_checkudata(L, 1, PFORCE_MT);
    if (!f->done) {
        lua_pushliteral(L, "send");
        push_cmd(L, &f->cmd, 0);
        return 2;
    }
    lua_pushliteral(L, "done");
    if (f->result)
        return 1 + push_fail(L, f->result, NULL);
    lua_pushboolean(L, f->deleted != 0);
    return 2;
}

static int force_on_reply(lua_State *L)
{
    pforce *f = (pforce *)luaL_checkudata(L, 1, PFORCE_MT);
    redisReply *r = check_reply(L, 2);
    if (f->done)
        return 0;
    if (hl_reply_is_noscript(r) && !f->eval) {
        f->eval = 1; /* the server forgot the script: send its body */
        hl_cmd_to_eval(&f->cmd);
        return 0;
    }
    f->done = 1;
    f->result = hl_decode_int(r, &f->deleted);
    return 0;
}

static int force_on_error(lua_State *L)
{
    pforce *f = (pforce *)luaL_checkudata(L, 1, PFORCE_MT);
    f->done = 1;
    f->result = err_code(luaL_optstring(L, 2, NULL));
    return 0;
}

/* ---- router ---- */

typedef struct prt {
    hl_router rt;
} prt;

static hl_mode check_mode(lua_State *L, int idx)
{
    const char *m = luaL_checkstring(L, idx);
    if (strcmp(m, "single") == 0)
        return HL_MODE_SINGLE;
    if (strcmp(m, "cluster") == 0)
        return HL_MODE_CLUSTER;
    if (strcmp(m, "sentinel") == 0)
        return HL_MODE_SENTINEL;
    luaL_argerror(L, idx, "expected \"single\", \"cluster\" or \"sentinel\"");
    return HL_MODE_SINGLE;
}

/* proto.router(mode) -> router for one command (its hops and retries) */
static int p_router(lua_State *L)
{
    hl_mode mode = check_mode(L, 1);
    prt *r = (prt *)hlc_newuserdata(L, sizeof *r);
    hl_router_init(&r->rt, mode);
    luaL_getmetatable(L, PRT_MT);
    lua_setmetatable(L, -2);
    return 1;
}

static int push_route(lua_State *L, prt *r, hl_route_action a)
{
    switch (a) {
    case HL_ROUTE_DONE:
        lua_pushliteral(L, "done");
        return 1;
    case HL_ROUTE_MOVED:
        lua_pushliteral(L, "moved");
        lua_pushinteger(L, (lua_Integer)r->rt.slot);
        lua_pushstring(L, r->rt.host);
        lua_pushinteger(L, r->rt.port);
        push_i64(L, r->rt.sleep_ms);
        return 5;
    case HL_ROUTE_ASK:
        lua_pushliteral(L, "ask");
        lua_pushstring(L, r->rt.host);
        lua_pushinteger(L, r->rt.port);
        return 3;
    case HL_ROUTE_RETRY:
        lua_pushliteral(L, "retry");
        push_i64(L, r->rt.sleep_ms);
        return 2;
    case HL_ROUTE_REFRESH:
        lua_pushliteral(L, "refresh");
        push_i64(L, r->rt.sleep_ms);
        return 2;
    default:
        lua_pushliteral(L, "fail");
        lua_pushstring(L, err_prefix(r->rt.result));
        return 2;
    }
}

/* rt:on_reply(r) -> "done" (the reply is the answer)
 *   | "moved", slot, host, port, sleep_ms | "ask", host, port
 *   | "retry", sleep_ms | "refresh", sleep_ms | "fail", err */
static int rt_on_reply(lua_State *L)
{
    prt *r = (prt *)luaL_checkudata(L, 1, PRT_MT);
    return push_route(L, r, hl_router_on_reply(&r->rt, check_reply(L, 2)));
}

/* rt:on_conn_error(sent) -> "refresh", sleep_ms | "fail", err */
static int rt_on_conn_error(lua_State *L)
{
    prt *r = (prt *)luaL_checkudata(L, 1, PRT_MT);
    return push_route(L, r, hl_router_on_conn_error(&r->rt, lua_toboolean(L, 2)));
}

/* ---- replica acknowledgement ---- */

typedef struct pack {
    hl_ack k;
} pack;

/* proto.ack(cached_replicas (-1 unknown), cache_age_ms, ack_timeout_ms) */
static int p_ack(lua_State *L)
{
    int64_t n = check_int(L, 1, -1, INT32_MAX);
    int64_t age = check_int(L, 2, -1, INT64_MAX / 2);
    int64_t t = check_int(L, 3, 1, HILOCK_MAX_TIME_MS);
    pack *k = (pack *)hlc_newuserdata(L, sizeof *k);
    hl_ack_init(&k->k, (int)n, age, t);
    luaL_getmetatable(L, PACK_MT);
    lua_setmetatable(L, -2);
    return 1;
}

/* k:next() -> "send", bytes, extra_timeout_ms
 *           | "done", acked, failed, replicas (nil unless refreshed) */
static int ack_next(lua_State *L)
{
    pack *k = (pack *)luaL_checkudata(L, 1, PACK_MT);
    if (hl_ack_next(&k->k) == HL_ACT_SEND) {
        lua_pushliteral(L, "send");
        push_cmd(L, &k->k.cmd, 0);
        push_i64(L, k->k.timeout_ms);
        return 3;
    }
    lua_pushliteral(L, "done");
    lua_pushboolean(L, k->k.acked);
    lua_pushboolean(L, k->k.failed);
    if (k->k.refreshed)
        lua_pushinteger(L, k->k.replicas);
    else
        lua_pushnil(L);
    return 4;
}

static int ack_on_reply(lua_State *L)
{
    pack *k = (pack *)luaL_checkudata(L, 1, PACK_MT);
    hl_ack_on_reply(&k->k, check_reply(L, 2));
    return 0;
}

static int ack_on_error(lua_State *L)
{
    pack *k = (pack *)luaL_checkudata(L, 1, PACK_MT);
    hl_ack_on_error(&k->k);
    return 0;
}

/* proto.ack_retry(wait_ms, deadline_ms (-1 none)) -> pause_ms | nil
 * A grant no replica acknowledged was given back: sleep pause_ms and try
 * again, or (nil) give up with a connection error. */
static int p_ack_retry(lua_State *L)
{
    int64_t wait = check_int(L, 1, -1, HILOCK_MAX_TIME_MS);
    int64_t deadline = check_int(L, 2, -1, INT64_MAX / 2);
    int64_t pause;
    if (!hl_ack_retry(wait, deadline, mono_ms(), &pause)) {
        lua_pushnil(L);
        return 1;
    }
    push_i64(L, pause);
    return 1;
}

/* ---- watchdog ---- */

/* proto.renew_outcome(r) -> "renewed" | "lost" | "eval" (send the body now)
 *   | "redirect" (send again through the routed path) | "trouble" (next tick) */
static int p_renew_outcome(lua_State *L)
{
    static const char *const names[] = {"renewed", "lost", "eval", "redirect", "trouble"};
    lua_pushstring(L, names[hl_renew_classify(check_reply(L, 1))]);
    return 1;
}

/* proto.renew_period(watchdog_lease_ms) -> ms between renewals */
static int p_renew_period(lua_State *L)
{
    push_i64(L, hl_renew_period(check_int(L, 1, 1, HILOCK_MAX_TIME_MS)));
    return 1;
}

/* ---- pub/sub and topology ---- */

static int push_plain(lua_State *L, hl_cmd *c)
{
    push_cmd(L, c, 0);
    return 1;
}

/* proto.subscribe_cmd(channel, sharded) / proto.unsubscribe_cmd(...) */
static int p_subscribe_cmd(lua_State *L)
{
    hl_cmd c;
    hl_cmd_subscribe(&c, luaL_checkstring(L, 1), lua_toboolean(L, 2), 0);
    return push_plain(L, &c);
}

static int p_unsubscribe_cmd(lua_State *L)
{
    hl_cmd c;
    hl_cmd_subscribe(&c, luaL_checkstring(L, 1), lua_toboolean(L, 2), 1);
    return push_plain(L, &c);
}

static int p_cluster_slots_cmd(lua_State *L)
{
    hl_cmd c;
    hl_cmd_cluster_slots(&c);
    return push_plain(L, &c);
}

static int p_role_cmd(lua_State *L)
{
    hl_cmd c;
    hl_cmd_role(&c);
    return push_plain(L, &c);
}

static int p_asking_cmd(lua_State *L)
{
    hl_cmd c;
    hl_cmd_asking(&c);
    return push_plain(L, &c);
}

static int p_sentinel_master_cmd(lua_State *L)
{
    hl_cmd c;
    hl_cmd_sentinel_master(&c, luaL_checkstring(L, 1));
    return push_plain(L, &c);
}

static int p_sentinel_watch_cmd(lua_State *L)
{
    hl_cmd c;
    hl_cmd_sentinel_watch(&c);
    return push_plain(L, &c);
}

/* proto.handshake_cmds(user, password, db) -> { bytes, ... } (possibly
 * empty): what a fresh connection sends before anything else. */
static int p_handshake_cmds(lua_State *L)
{
    const char *user = luaL_optstring(L, 1, NULL);
    const char *password = luaL_optstring(L, 2, NULL);
    lua_Integer db = luaL_optinteger(L, 3, 0);
    if (db < 0 || db > INT_MAX)
        return luaL_argerror(L, 3, "database number out of range");
    hl_cmd cmds[HL_HANDSHAKE_MAX];
    int n = hl_cmd_handshake(cmds, user, password, (int)db);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        push_cmd(L, &cmds[i], 0);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* proto.handshake_reply(r) -> true | nil, why: whether the server accepted
 * one handshake command (why: its error text, or "unexpected reply"). */
static int p_handshake_reply(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    if (!hl_decode_handshake(r)) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    if (r->type == REDIS_REPLY_ERROR)
        lua_pushlstring(L, r->str, r->len);
    else
        lua_pushliteral(L, "unexpected reply");
    return 2;
}

/* proto.decode_slots(r) -> { {first, last, host, port}, ... } | nil, err
 * (malformed ranges are skipped) */
static int p_decode_slots(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    if (r->type != REDIS_REPLY_ARRAY)
        return decode_fail(L, r, HILOCK_EPROTO);
    lua_createtable(L, (int)(r->elements < 64 ? r->elements : 64), 0);
    int n = 0;
    hl_slot_range g;
    for (size_t i = 0; i < r->elements; i++) {
        if (hl_decode_slot_range(r->element[i], &g) != 0)
            continue;
        lua_createtable(L, 4, 0);
        lua_pushinteger(L, (lua_Integer)g.lo);
        lua_rawseti(L, -2, 1);
        lua_pushinteger(L, (lua_Integer)g.hi);
        lua_rawseti(L, -2, 2);
        lua_pushstring(L, g.host);
        lua_rawseti(L, -2, 3);
        lua_pushinteger(L, g.port);
        lua_rawseti(L, -2, 4);
        lua_rawseti(L, -2, ++n);
    }
    return 1;
}

/* proto.decode_sentinel_master(r) -> host, port | nil, err */
static int p_decode_sentinel_master(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    char host[256];
    int port;
    if (hl_decode_master_addr(r, host, sizeof host, &port) != 0)
        return push_fail(L, HILOCK_EPROTO, "no such master");
    lua_pushstring(L, host);
    lua_pushinteger(L, port);
    return 2;
}

/* proto.decode_role(r) -> is_master, replicas */
static int p_decode_role(lua_State *L)
{
    int master = 0;
    int n = hl_decode_role_replicas(check_reply(L, 1), &master);
    lua_pushboolean(L, master);
    lua_pushinteger(L, n);
    return 2;
}

/* proto.decode_switch_master(r, master_name) -> host, port | nil */
static int p_decode_switch_master(lua_State *L)
{
    redisReply *r = check_reply(L, 1);
    char host[256];
    int port;
    if (!hl_decode_switch_master(r, luaL_checkstring(L, 2), host, sizeof host, &port)) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushstring(L, host);
    lua_pushinteger(L, port);
    return 2;
}

static const luaL_Reg rel_methods[] = {
    {"next", rel_next}, {"on_reply", rel_on_reply}, {"on_error", rel_on_error},
    {"free", rel_free}, {NULL, NULL}};
static const luaL_Reg rel_meta[] = {{"__gc", rel_free}, {NULL, NULL}};
static const luaL_Reg set_methods[] = {
    {"next", set_next}, {"on_reply", set_on_reply}, {"on_error", set_on_error},
    {"free", set_free}, {NULL, NULL}};
static const luaL_Reg set_meta[] = {{"__gc", set_free}, {NULL, NULL}};
static const luaL_Reg rt_methods[] = {
    {"on_reply", rt_on_reply}, {"on_conn_error", rt_on_conn_error}, {NULL, NULL}};
static const luaL_Reg ack_methods[] = {
    {"next", ack_next}, {"on_reply", ack_on_reply}, {"on_error", ack_on_error}, {NULL, NULL}};
static const luaL_Reg force_methods[] = {
    {"next", force_next}, {"on_reply", force_on_reply}, {"on_error", force_on_error},
    {NULL, NULL}};
static const luaL_Reg no_meta[] = {{NULL, NULL}};

static const luaL_Reg engine_funcs[] = {
    {"router", p_router},
    {"ack", p_ack},
    {"ack_retry", p_ack_retry},
    {"renew_outcome", p_renew_outcome},
    {"renew_period", p_renew_period},
    {"subscribe_cmd", p_subscribe_cmd},
    {"unsubscribe_cmd", p_unsubscribe_cmd},
    {"cluster_slots_cmd", p_cluster_slots_cmd},
    {"role_cmd", p_role_cmd},
    {"handshake_cmds", p_handshake_cmds},
    {"handshake_reply", p_handshake_reply},
    {"asking_cmd", p_asking_cmd},
    {"sentinel_master_cmd", p_sentinel_master_cmd},
    {"sentinel_watch_cmd", p_sentinel_watch_cmd},
    {"decode_slots", p_decode_slots},
    {"decode_sentinel_master", p_decode_sentinel_master},
    {"decode_role", p_decode_role},
    {"decode_switch_master", p_decode_switch_master},
    {NULL, NULL}};

/* Metatables of the engine's machines; the proto table is on the top. */
static void engine_register(lua_State *L)
{
    new_metatable(L, PREL_MT, rel_methods, rel_meta);
    new_metatable(L, PSET_MT, set_methods, set_meta);
    new_metatable(L, PRT_MT, rt_methods, no_meta);
    new_metatable(L, PACK_MT, ack_methods, no_meta);
    new_metatable(L, PFORCE_MT, force_methods, no_meta);
    hlc_setfuncs(L, engine_funcs);
}
