-- resty.hilock: hilock locks for OpenResty, without blocking the worker.
--
--   local hilock = require "resty.hilock"
--   local client = hilock.new { url = "redis://127.0.0.1:6379" }  -- once per worker
--   local lk = client:lock("orders:42")
--   local ok, err = lk:acquire(5)         -- wait up to 5 s; watchdog lease
--   ...
--   lk:release()
--
-- Every byte goes through ngx.socket.tcp cosockets (commands, the pub/sub wait,
-- the watchdog's renewals from an ngx.timer). The lock logic is libcore's: the
-- hilock C module's proto layer builds each command, parses and decodes each
-- reply and runs the acquire state machine; this file only moves bytes and
-- sleeps. The blocking C client (hilock.connect) is never used here.
--
-- Owner identity: "<client-uuid>:<thread-id>" with thread-id = worker pid *
-- 2^20 + a per-worker request counter, assigned on first use in a request
-- (kept in ngx.ctx), so two requests of one worker never share a hold.
local hilock = require "hilock"

local proto = hilock.proto
local ngx = ngx
local tcp = ngx.socket.tcp
local ngx_sleep = ngx.sleep
local timer_at = ngx.timer.at
local worker_pid = ngx.worker.pid
local now_ms = proto.now_ms
local decode_pubsub = proto.decode_pubsub
local ceil = math.ceil
local co_running = coroutine.running
local semaphore = require "ngx.semaphore"
local type, tostring, tonumber, setmetatable, error, pairs, next =
    type, tostring, tonumber, setmetatable, error, pairs, next
local str_format = string.format

local _M = { _VERSION = hilock.version }

local MAX_SECONDS = 3153600000 -- HILOCK_MAX_TIME_MS / 1000
local TID_SPAN = 1048576       -- 2^20 request ids per worker pid
local LONG_WAIT_MS = 60000     -- "until a message": re-check at least this often
local LISTEN_POLL_MS = 1000    -- a shared listener checks this often if anyone waits
local WEAK_KEYS = { __mode = "k" }

-- ---------------------------------------------------------------- helpers

local tid_counter = 0

-- The thread id of the current request (or timer): pid * 2^20 + counter.
local function request_tid()
    local ctx = ngx.ctx
    local tid = ctx.hilock_tid
    if not tid then
        tid_counter = tid_counter + 1
        if tid_counter >= TID_SPAN then
            tid_counter = 1
        end
        tid = worker_pid() * TID_SPAN + tid_counter
        ctx.hilock_tid = tid
    end
    return tid
end
_M.thread_id = request_tid

local function argerr(what, msg)
    error("bad argument '" .. what .. "' (" .. msg .. ")", 3)
end

-- Float seconds -> ms. nil -> if_nil; 0 only when allow_zero.
local function seconds(v, if_nil, allow_zero, what)
    if v == nil then
        return if_nil
    end
    if type(v) ~= "number" or v ~= v or v < 0 or v > MAX_SECONDS then
        argerr(what, "expected a non-negative number of seconds")
    end
    if v == 0 then
        if not allow_zero then
            argerr(what, "expected a positive number of seconds")
        end
        return 0
    end
    local ms = ceil(v * 1000 - 1e-6)
    return ms < 1 and 1 or ms
end

-- A small free list of reply readers (one per connection in use).
local readers, nreaders = {}, 0

local function get_reader()
    if nreaders > 0 then
        local rd = readers[nreaders]
        readers[nreaders] = nil
        nreaders = nreaders - 1
        return rd
    end
    return proto.reader()
end

local function put_reader(rd)
    if rd and nreaders < 64 and rd:pending() == 0 then
        nreaders = nreaders + 1
        readers[nreaders] = rd
    end
end

-- One complete reply from sock (feeding rd as bytes arrive).
local function read_reply(sock, rd)
    while true do
        local r, err = rd:get()
        if r then
            return r
        end
        if err then
            return nil, err
        end
        local data, rerr = sock:receiveany(65536)
        if not data then
            return nil, "connection: " .. tostring(rerr)
        end
        rd:feed(data)
    end
end

local function send_read(sock, rd, bytes)
    local ok, err = sock:send(bytes)
    if not ok then
        return nil, "connection: " .. tostring(err)
    end
    return read_reply(sock, rd)
end

-- ---------------------------------------------------------------- client

local Client = {}
Client.__index = Client

local Lock = {}
Lock.__index = Lock

-- redis://[user[:password]@]host[:port][/db]
local function parse_url(url)
    local rest = url:match("^redis://(.*)$")
    if not rest then
        return nil
    end
    local o = {}
    local auth, hostpart = rest:match("^(.*)@([^@]*)$")
    if auth then
        local u, p = auth:match("^([^:]*):(.*)$")
        if u then
            o.user = u ~= "" and u or nil
            o.password = p
        else
            o.password = auth
        end
    else
        hostpart = rest
    end
    local hp, db = hostpart:match("^([^/]*)/(%d*)$")
    if hp then
        hostpart = hp
        o.db = tonumber(db) or 0
    end
    local host, port = hostpart:match("^%[?([^%]]*)%]?:(%d+)$")
    if host then
        o.host, o.port = host, tonumber(port)
    else
        o.host = hostpart
    end
    if o.host == "" then
        o.host = nil
    end
    return o
end

local known_options = {
    url = true, host = true, port = true, user = true, password = true, db = true,
    connect_timeout = true, command_timeout = true, watchdog_lease = true,
    fair_wait_window = true, pool_size = true, keepalive_timeout = true,
}

-- hilock.new(opts) -> client. Create it once per worker (module level or
-- init_worker); it keeps the client id and the watchdog's table.
function _M.new(opts)
    opts = opts or {}
    if type(opts) ~= "table" then
        argerr("opts", "expected a table")
    end
    for k in pairs(opts) do
        if not known_options[k] then
            argerr("opts", "unknown option '" .. tostring(k) .. "'")
        end
    end
    local o = opts
    if opts.url then
        if type(opts.url) ~= "string" then
            argerr("url", "expected a string")
        end
        o = parse_url(opts.url)
        if not o then
            argerr("url", "expected redis://[user[:password]@]host[:port][/db]")
        end
        for k, v in pairs(opts) do
            if k ~= "url" and o[k] == nil then
                o[k] = v
            end
        end
    end
    local self = setmetatable({
        host = o.host or "127.0.0.1",
        port = o.port or 6379,
        user = o.user,
        password = o.password,
        db = o.db or 0,
        connect_timeout_ms = seconds(o.connect_timeout, 1000, false, "connect_timeout"),
        command_timeout_ms = seconds(o.command_timeout, 1000, false, "command_timeout"),
        watchdog_lease_ms = seconds(o.watchdog_lease, 30000, false, "watchdog_lease"),
        fair_wait_window_ms = seconds(o.fair_wait_window, 300000, false, "fair_wait_window"),
        keepalive_ms = seconds(o.keepalive_timeout, 60000, false, "keepalive_timeout"),
        pool_size = o.pool_size or 64,
        uuid = proto.uuid(),
        seq = 0,
        wd = {},          -- key -> {p = proto lock, owner = ...}
        wd_running = false,
        lost = {},        -- key -> true once the watchdog found it gone
    }, Client)
    if type(self.host) ~= "string" or type(self.port) ~= "number" or type(self.db) ~= "number"
        or type(self.pool_size) ~= "number" or self.pool_size < 1 then
        argerr("opts", "bad host, port, db or pool_size")
    end
    -- pooled connections are authenticated: never share them across
    -- credentials (the password enters the pool name as a digest)
    self.pool = str_format("hilock:%s:%d:%d:%s:%s", self.host, self.port, self.db,
                           self.user or "", self.password and ngx.md5(self.password) or "")
    self.pool_opts = { pool = self.pool, pool_size = self.pool_size }
    local hs = {}
    if self.password then
        if self.user then
            hs[#hs + 1] = proto.command("AUTH", self.user, self.password)
        else
            hs[#hs + 1] = proto.command("AUTH", self.password)
        end
    end
    if self.db ~= 0 then
        hs[#hs + 1] = proto.command("SELECT", self.db)
    end
    self.handshake = #hs > 0 and hs or nil
    return self
end

-- A connected cosocket (from the pool when possible), authenticated.
local function connect(self)
    local sock = tcp()
    sock:settimeouts(self.connect_timeout_ms, self.command_timeout_ms,
                     self.command_timeout_ms)
    local ok, err = sock:connect(self.host, self.port, self.pool_opts)
    if not ok then
        return nil, "connection: " .. tostring(err)
    end
    if self.handshake and sock:getreusedtimes() == 0 then
        local rd = get_reader()
        for i = 1, #self.handshake do
            local r, rerr = send_read(sock, rd, self.handshake[i])
            if not r then
                sock:close()
                return nil, rerr
            end
            local msg = r:error()
            if msg then
                sock:close()
                return nil, "auth: " .. msg
            end
        end
        put_reader(rd)
    end
    return sock
end

local function keepalive(self, sock)
    local ok = sock:setkeepalive(self.keepalive_ms, self.pool_size)
    if not ok then
        sock:close()
    end
end

-- One command round trip on a pooled connection.
local function call(self, bytes)
    local sock, err = connect(self)
    if not sock then
        return nil, err
    end
    local rd = get_reader()
    local r
    r, err = send_read(sock, rd, bytes)
    if not r then
        sock:close()
        return nil, err
    end
    put_reader(rd)
    keepalive(self, sock)
    return r
end

-- client:command(name, ...) -> the reply as a Lua value | nil, err.
-- A convenience for plain commands (GET, SET, ...) over the same pool.
function Client:command(...)
    local r, err = call(self, proto.command(...))
    if not r then
        return nil, err
    end
    local v, msg = r:value()
    if v == nil then
        return nil, "protocol: " .. msg
    end
    return v
end

function Client:id()
    return self.uuid
end

local function new_lock(self, name, kind, tid)
    if type(name) ~= "string" or name == "" then
        argerr("name", "expected a non-empty string")
    end
    if tid ~= nil and (type(tid) ~= "number" or tid < 0 or tid % 1 ~= 0) then
        argerr("thread_id", "expected a non-negative integer")
    end
    return setmetatable({ client = self, name = name, p = proto.lock(name, kind), tid = tid,
                          kind_name = kind }, Lock)
end

-- client:lock(name [, thread_id]) / client:fair_lock(...). thread_id
-- defaults to the current request's id.
function Client:lock(name, tid)
    return new_lock(self, name, "reentrant", tid)
end

function Client:fair_lock(name, tid)
    return new_lock(self, name, "fair", tid)
end

-- ---------------------------------------------------------------- watchdog

local renew_tick

local function start_watchdog(self)
    if not self.wd_running and next(self.wd) then
        local ok = timer_at(self.watchdog_lease_ms / 3000, renew_tick, self)
        self.wd_running = ok and true or false
    end
end

-- One tick: renew every watched (lock, owner) in one pipelined round trip.
-- A "0" answer means the owner field is gone: the hold is lost. Transport
-- errors are retried at the next tick.
renew_tick = function(premature, self)
    self.wd_running = false
    if premature or not next(self.wd) then
        return
    end
    local keys, entries, cmds, n = {}, {}, {}, 0
    for k, e in pairs(self.wd) do
        n = n + 1
        keys[n], entries[n] = k, e
        cmds[n] = e.p:renew_cmd(e.owner, self.watchdog_lease_ms)
    end
    local sock = connect(self)
    if sock then
        local rd = get_reader()
        local ok = sock:send(cmds)
        local good = ok and true or false
        for i = 1, n do
            if not good then
                break
            end
            local r = read_reply(sock, rd)
            if not r then
                good = false
                break
            end
            if r:is_noscript() then
                r = send_read(sock, rd, entries[i].p:renew_cmd(entries[i].owner,
                                                               self.watchdog_lease_ms, true))
                if not r then
                    good = false
                    break
                end
            end
            local alive = proto.decode_int(r)
            -- only if the entry is still the one we renewed (not released
            -- and taken again meanwhile)
            if alive == 0 and self.wd[keys[i]] == entries[i] then
                self.wd[keys[i]] = nil
                self.lost[keys[i]] = true
            end
        end
        if good then
            put_reader(rd)
            keepalive(self, sock)
        else
            sock:close()
        end
    end
    start_watchdog(self)
end

local function wd_key(lock, owner)
    return lock.name .. "\0" .. owner
end

-- ---------------------------------------------------------------- lock

local function owner_of(lock)
    return proto.owner(lock.client.uuid, lock.tid or request_tid())
end

-- A subscription on its own connection: {sock, rd, channel}.
local function subscribe(self, channel)
    local sock = connect(self)
    if not sock then
        return nil
    end
    local rd = get_reader()
    local ok = sock:send(proto.command("SUBSCRIBE", channel))
    while ok do
        local r = read_reply(sock, rd)
        if not r then
            break
        end
        local typ, ch = decode_pubsub(r)
        if typ == "subscribe" and ch == channel then
            return { sock = sock, rd = rd, channel = channel }
        end
    end
    sock:close()
    return nil
end

-- Drop the subscription; the connection goes back to the pool when the
-- server confirms, else it is closed.
local function unsubscribe(self, ps)
    local sock, rd = ps.sock, ps.rd
    local ok = sock:send(proto.command("UNSUBSCRIBE", ps.channel))
    while ok do
        local r = read_reply(sock, rd)
        if not r then
            break
        end
        local typ, ch = decode_pubsub(r)
        if typ == "unsubscribe" and ch == ps.channel then
            if rd:pending() == 0 then
                put_reader(rd)
                sock:settimeouts(self.connect_timeout_ms, self.command_timeout_ms,
                                 self.command_timeout_ms)
                keepalive(self, sock)
                return
            end
            break
        end
    end
    sock:close()
end

-- Wait up to ms (-1: no limit) for a wake-up message on ps. Returns the
-- subscription, or false when its connection broke. Without a subscription
-- (nil: subscribing failed, the machine polls) it just sleeps.
local function wait_message(ps, ms)
    if ms < 0 then
        ms = LONG_WAIT_MS
    end
    if not ps then
        ngx_sleep(ms / 1000)
        return nil
    end
    local deadline = now_ms() + ms
    while true do
        local left = deadline - now_ms()
        if left <= 0 then
            return ps
        end
        ps.sock:settimeout(left)
        local r, err = read_reply(ps.sock, ps.rd)
        if not r then
            if err == "connection: timeout" then
                return ps
            end
            ps.sock:close()
            return false
        end
        local typ, ch, payload = decode_pubsub(r)
        if typ == "message" and ch == ps.channel and payload >= 0 then
            return ps
        end
    end
end

-- Shared listeners (reentrant locks). Every unlock publishes "0" on the
-- lock's one channel; if each waiting request had its own subscription, every
-- unlock would wake them all. Instead each worker keeps one subscription per
-- channel, read by an ngx.timer; waiting requests park on a semaphore and a
-- "0" wakes one of them ("1" wakes all), as libcore's listener thread does.
-- Fair-lock waiters have a channel of their own and subscribe directly.
local listeners = {} -- pool .. "\0" .. channel -> listener

local function listener_count(L)
    local n = 0
    for _ in pairs(L.waiting) do
        n = n + 1
    end
    return n
end

local function listener_loop(premature, c, key, L)
    local resubscribing = false
    while not premature and not ngx.worker.exiting() do
        local ps = subscribe(c, L.channel)
        if not ps then
            break
        end
        if resubscribing then -- messages may have been missed: all retry
            L.sem:post(listener_count(L))
        end
        L.state = "ready"
        if L.ready_waiting > 0 then
            L.ready:post(L.ready_waiting)
        end
        while true do
            if not next(L.waiting) or ngx.worker.exiting() then
                -- nobody waits any more (waiters of killed requests vanish
                -- with their coroutine: the set has weak keys)
                if listeners[key] == L then
                    listeners[key] = nil
                end
                L.state = "closed"
                unsubscribe(c, ps)
                return
            end
            ps.sock:settimeout(LISTEN_POLL_MS)
            local r, err = read_reply(ps.sock, ps.rd)
            if r then
                local typ, ch, payload = decode_pubsub(r)
                if typ == "message" and ch == L.channel then
                    if payload == 0 then
                        L.sem:post(1)
                    elseif payload == 1 then
                        L.sem:post(listener_count(L))
                    end
                end
            elseif err ~= "connection: timeout" then
                ps.sock:close()
                break
            end
        end
        L.state = "reconnecting"
        resubscribing = true
    end
    -- could not subscribe: waiters fall back to timed retries
    if listeners[key] == L then
        listeners[key] = nil
    end
    L.state = "failed"
    if L.ready_waiting > 0 then
        L.ready:post(L.ready_waiting)
    end
    L.sem:post(listener_count(L))
end

-- Register the calling request on the worker's listener for channel; returns
-- the listener once it is subscribed, or nil (then the machine polls).
local function join_listener(c, channel)
    local key = c.pool .. "\0" .. channel
    local L = listeners[key]
    if not L then
        L = { channel = channel, state = "starting", ready_waiting = 0,
              sem = semaphore.new(0), ready = semaphore.new(0),
              waiting = setmetatable({}, WEAK_KEYS) }
        if not timer_at(0, listener_loop, c, key, L) then
            return nil
        end
        listeners[key] = L
    end
    local co = co_running()
    L.waiting[co] = true
    if L.state == "starting" then
        L.ready_waiting = L.ready_waiting + 1
        L.ready:wait((c.connect_timeout_ms + 2 * c.command_timeout_ms) / 1000)
        L.ready_waiting = L.ready_waiting - 1
    end
    if L.state == "starting" or L.state == "failed" then
        L.waiting[co] = nil
        return nil
    end
    return L
end

local function leave_listener(L)
    L.waiting[co_running()] = nil
end

-- lk:acquire([wait [, lease]]) -> true | nil, err
-- wait: seconds, nil = forever, 0 = one try. lease: seconds, nil = watchdog.
function Lock:acquire(wait, lease)
    local wait_ms = seconds(wait, -1, true, "wait")
    local lease_ms = seconds(lease, nil, false, "lease")
    local c = self.client
    local watchdog = lease_ms == nil
    if watchdog then
        lease_ms = c.watchdog_lease_ms
    end
    local owner = owner_of(self)
    local m = self.p:acquire(owner, wait_ms, lease_ms, c.fair_wait_window_ms)
    local shared = self.kind_name == "reentrant"
    local sock, rd, ps, L, joined
    while true do
        local act, a1, a2 = m:next()
        if act == "send" then
            local r, err
            if not sock then
                sock, err = connect(c)
                rd = sock and get_reader()
            end
            if sock then
                r, err = send_read(sock, rd, a1)
                if r then
                    local again = m:on_reply(r)
                    if again then
                        r, err = send_read(sock, rd, again)
                        if r then
                            m:on_reply(r)
                        end
                    end
                end
                if not r then
                    sock:close()
                    sock, rd = nil, nil
                end
            end
            if not r then
                m:on_error(err)
            end
        elseif act == "subscribe" then
            if sock then -- do not sit on a pooled connection while waiting
                put_reader(rd)
                keepalive(c, sock)
                sock, rd = nil, nil
            end
            if shared then
                L = join_listener(c, a1)
                joined = L ~= nil
                m:on_subscribed(joined)
            else
                ps = subscribe(c, a1)
                m:on_subscribed(ps ~= nil)
            end
        elseif act == "wait" then
            if joined and (not L or L.state == "failed" or L.state == "closed") then
                -- our listener gave up (its connection broke and could not
                -- come back): join or start another, then retry at once
                if L then
                    leave_listener(L)
                end
                L = join_listener(c, a1)
                if not L then
                    ngx_sleep(0.05)
                end
            elseif L then
                L.sem:wait((a2 < 0 and LONG_WAIT_MS or a2) / 1000)
            elseif ps == false then
                -- the subscription broke: listen again, then retry at once
                -- (an unlock may have been missed meanwhile)
                ps = subscribe(c, a1) or false
                if not ps then
                    ngx_sleep(0.05)
                end
            else
                ps = wait_message(ps, a2)
            end
            m:on_wake()
        elseif act == "unsubscribe" then
            if L then
                leave_listener(L)
                L = nil
            end
            if ps then
                unsubscribe(c, ps)
                ps = nil
            end
        else -- "done"
            if sock then
                put_reader(rd)
                keepalive(c, sock)
            end
            if ps then -- not reached normally: the machine unsubscribes first
                ps.sock:close()
            end
            if L then
                leave_listener(L)
            end
            m:free()
            if a1 then
                local key = wd_key(self, owner)
                c.lost[key] = nil
                if watchdog and not c.wd[key] then
                    c.wd[key] = { p = self.p, owner = owner }
                    start_watchdog(c)
                end
                return true
            end
            return nil, a2
        end
    end
end

-- Run a script command built by build(eval); resend as EVAL on NOSCRIPT.
local function call_script(c, build)
    local r, err = call(c, build(false))
    if r and r:is_noscript() then
        r, err = call(c, build(true))
    end
    return r, err
end

-- lk:release() -> true | nil, err ("not owner" when not held)
function Lock:release()
    local c = self.client
    local owner = owner_of(self)
    c.seq = c.seq + 1
    local latch = self.p:latch_key(str_format("%s:%d:%d", c.uuid, worker_pid(), c.seq))
    local latch_ttl = 2 * c.command_timeout_ms + 1000
    local p = self.p
    local build = function(eval)
        return p:release_cmd(owner, c.watchdog_lease_ms, latch, latch_ttl, eval)
    end
    local r, err = call_script(c, build)
    if not r and err and err:find("^connection") then
        -- the reply may have been lost: the latch makes a retry answer the same
        r, err = call_script(c, build)
    end
    if not r then
        return nil, err
    end
    local left
    left, err = proto.decode_release(r)
    if left == 0 or err == "not owner" then
        c.wd[wd_key(self, owner)] = nil
    end
    if not left then
        return nil, err
    end
    return true
end

-- lk:force_unlock() -> deleted (boolean) | nil, err
function Lock:force_unlock()
    local c = self.client
    local p = self.p
    local r, err = call_script(c, function(eval) return p:force_cmd(eval) end)
    if not r then
        return nil, err
    end
    local n
    n, err = proto.decode_int(r)
    if not n then
        return nil, err
    end
    local prefix = self.name .. "\0"
    for k in pairs(c.wd) do
        if k:sub(1, #prefix) == prefix then
            c.wd[k] = nil
        end
    end
    return n == 1
end

local function query_int(self, bytes, decode)
    local r, err = call(self.client, bytes)
    if not r then
        return nil, err
    end
    return (decode or proto.decode_int)(r)
end

function Lock:locked()
    local n, err = query_int(self, self.p:exists_cmd())
    if not n then
        return nil, err
    end
    return n > 0
end

function Lock:held()
    local n, err = query_int(self, self.p:hexists_cmd(owner_of(self)))
    if not n then
        return nil, err
    end
    return n == 1
end

function Lock:hold_count()
    return query_int(self, self.p:hget_cmd(owner_of(self)), proto.decode_hold_count)
end

-- Remaining lease in seconds; -2 no lock, -1 no expiry.
function Lock:ttl()
    local ms, err = query_int(self, self.p:pttl_cmd())
    if not ms then
        return nil, err
    end
    return ms < 0 and ms or ms / 1000
end

-- true once the watchdog found this owner's hold gone (reset by acquire).
function Lock:lost()
    return self.client.lost[wd_key(self, owner_of(self))] == true
end

function Lock:thread_id()
    return self.tid or request_tid()
end

function Lock:kind()
    return self.p:kind()
end

return _M
