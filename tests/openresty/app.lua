-- Request handlers for the OpenResty tests (tests/openresty/run.sh) and the
-- bench (bench/lua). Each worker has one client per configuration.
local hilock = require "resty.hilock"

local _M = {}
local clients = {}

-- which: nil (REDIS_URL), "cluster" (CLUSTER_URL), "sentinel" (SENTINEL_URL)
local function client(watchdog_lease, which)
    which = which or ngx.var.arg_url
    local key = tostring(watchdog_lease or "default") .. ":" .. tostring(which)
    local c = clients[key]
    if not c then
        local env = which == "cluster" and "CLUSTER_URL" or which == "sentinel" and "SENTINEL_URL"
                    or "REDIS_URL"
        c = hilock.new { url = os.getenv(env), pool_size = 256,
                         watchdog_lease = watchdog_lease }
        clients[key] = c
    end
    return c
end

local hilock_proto = require("hilock").proto
local mono_ms = hilock_proto.now_ms

local function now_ms()
    ngx.update_time()
    return ngx.now() * 1000
end

local function fail(status, ...)
    ngx.status = status
    ngx.say(...)
    return ngx.exit(status)
end

-- /count[?fair=1]: lock, non-atomic GET + SET of a Redis counter, unlock.
function _M.count()
    local c = client()
    local fair = ngx.var.arg_fair == "1"
    local lk = fair and c:fair_lock("or:counter:fair") or c:lock("or:counter")
    local key = fair and "or:count:fair" or "or:count"
    local ok, err = lk:acquire(60, 10)
    if not ok then
        return fail(500, "acquire: ", err)
    end
    local v, gerr = c:command("GET", key)
    if v == nil then
        lk:release()
        return fail(500, "get: ", gerr)
    end
    ngx.sleep(0.001) -- let every other request run between the read and the write
    local s, serr = c:command("SET", key, (tonumber(v) or 0) + 1)
    local r, rerr = lk:release()
    if not s then
        return fail(500, "set: ", serr)
    end
    if not r then
        return fail(500, "release: ", rerr)
    end
    ngx.say("ok")
end

-- The lock named by the request: ?fair=1, or ?kind=fenced|read|write.
local function lock_of(c, name)
    local kind = ngx.var.arg_kind
    if kind == "fenced" or kind == "read" or kind == "write" then
        return c[kind .. "_lock"](c, name)
    end
    return ngx.var.arg_fair == "1" and c:fair_lock(name) or c:lock(name)
end

-- /wait?name=N&wait=S[&fair=1|&kind=K][&hold_ms=M]: acquire (lease 10 s)
-- waiting up to S seconds, keep it M ms (default 0), release; says
-- "acquired <ms> <token> <at>" (token: the fencing token, 0 unless fenced;
-- at: CLOCK_MONOTONIC ms when the acquire returned, as holder.lua's) or
-- "<err> <ms>".
function _M.wait()
    local c = client()
    local lk = lock_of(c, ngx.var.arg_name)
    local t0 = now_ms()
    local token, err = lk:acquire_token(tonumber(ngx.var.arg_wait), 10)
    local at = mono_ms()
    local dt = now_ms() - t0
    if token then
        ngx.sleep((tonumber(ngx.var.arg_hold_ms) or 0) / 1000)
        lk:release()
        return ngx.say("acquired ", string.format("%d %d %d", dt, token, at))
    end
    ngx.say(err, " ", string.format("%d", dt))
end

-- /hold?name=N&ms=M: take N (twice: reentrant), keep it until the key
-- "or:stop:{N}" appears (at most M ms), release both.
function _M.hold()
    local c = client()
    local name = ngx.var.arg_name
    local lk = c:lock(name)
    local ok, err = lk:acquire(0, 10)
    if not ok then
        return fail(500, "acquire: ", err)
    end
    assert(lk:acquire(0, 10))
    local n = lk:hold_count()
    if n ~= 2 then
        return fail(500, "hold count ", tostring(n))
    end
    local t0 = now_ms()
    while now_ms() - t0 < tonumber(ngx.var.arg_ms) do
        if c:command("GET", "or:stop:{" .. name .. "}") then -- nil reply: false
            break
        end
        ngx.sleep(0.01)
    end
    assert(lk:release())
    assert(lk:release())
    if lk:locked() then
        return fail(500, "still locked")
    end
    ngx.say("released")
end

-- /try?name=N: one try; says "acquired" (then releases) or the error.
function _M.try()
    local lk = client():lock(ngx.var.arg_name)
    local ok, err = lk:acquire(0, 10)
    if ok then
        local held = lk:held()
        lk:release()
        return ngx.say("acquired held=", tostring(held))
    end
    -- a foreign hold cannot be released by this request
    local r, rerr = lk:release()
    ngx.say(err, " release=", tostring(r), ":", tostring(rerr))
end

-- /watchdog?name=N[&kind=K]: watchdog lease 0.6 s; the lock must survive 1.5 s.
function _M.watchdog()
    local lk = lock_of(client(0.6), ngx.var.arg_name)
    local ok, err = lk:acquire(0)
    if not ok then
        return fail(500, "acquire: ", err)
    end
    local t0 = now_ms()
    while now_ms() - t0 < 1500 do
        local ttl = lk:ttl()
        if not lk:held() or not ttl or ttl <= 0 or ttl > 0.6 then
            return fail(500, "not held at ", now_ms() - t0, " ms, ttl ", tostring(ttl))
        end
        ngx.sleep(0.1)
    end
    local lost = lk:lost()
    assert(lk:release())
    ngx.say("kept lost=", tostring(lost))
end

-- /busy?name=N[&asleep=1]: a watchdog lock (lease 3 s), then the worker held
-- up by a busy loop (no yield: no timer runs) until 2.55 s after the grant,
-- past lease - lease/5 = 2.4 s: the renewal tick and the doubt deadline both
-- fall due meanwhile. asleep=1: the request sleeps 0.1 s first (the timers
-- armed and waiting). 0.6 s later the live hold must be renewed, not
-- reported lost. Says "lost=<lk:lost()> why=<why> ttl=<ms left>".
function _M.busy()
    local lk = client(3):lock(ngx.var.arg_name)
    local t0 = mono_ms()
    local ok, err = lk:acquire(0)
    if not ok then
        return fail(500, "acquire: ", err)
    end
    if ngx.var.arg_asleep == "1" then
        ngx.sleep(0.1)
    end
    while mono_ms() - t0 < 2550 do -- luacheck: ignore (busy on purpose)
    end
    -- nginx's clock stood still in the loop: without this the sleep's
    -- timer would count from before it, and nginx wait for it first
    ngx.update_time()
    ngx.sleep(0.6)
    local lost, why = lk:lost()
    local ttl = lk:ttl()
    lk:release()
    ngx.say("lost=", tostring(lost), " why=", tostring(why), " ttl=",
            ttl and math.floor(ttl * 1000) or "nil")
end

-- /parity?name=N: calls that take the same arguments, bounds and errors as
-- the blocking Python and plain-Lua bindings (docs/lua.md, "Each call in
-- each binding"): lk:extend, semaphore counts up to the engine's +-(10^15-1).
function _M.parity()
    local c, name = client(), ngx.var.arg_name
    local out = {}
    local function say(k, v) out[#out + 1] = k .. "=" .. tostring(v) end
    local function first(s) return s and (s:match("^([%a ]+):") or s) end
    local s = c:semaphore(name .. ":s")
    assert(s:try_set_permits(1))
    say("add", s:add_permits(10 ^ 12))
    say("avail", s:available())
    say("over", first(select(2, s:add_permits(10 ^ 15))))
    say("set", s:set_permits(999999999999999))
    say("setover", first(select(2, s:set_permits(10 ^ 15))))
    say("neg", s:add_permits(-999999999999999))
    local lk = c:lock(name, 1)
    assert(lk:acquire(0, 1))
    say("extend", lk:extend(5))
    local ttl = lk:ttl()
    say("ttl", ttl > 5 and ttl <= 6)
    say("other", first(select(2, c:lock(name, 2):extend(5))))
    say("zero", (pcall(lk.extend, lk, 0)))
    say("none", (pcall(lk.extend, lk)))
    assert(lk:release())
    say("released", first(select(2, lk:extend(1))))
    local w = c:write_lock(name .. ":rw", 1)
    assert(w:acquire(0, 5))
    say("rw", first(select(2, w:extend(1))))
    assert(w:release())
    ngx.say(table.concat(out, " "))
end

-- /wdmany?name=P&n=N: N watchdog locks P:1..P:N (lease 0.6 s) held 1.5 s;
-- says "kept=<all still held> calls=<script calls the server ran meanwhile>":
-- the renewals of one tick share one script call.
local function script_calls()
    local info = assert(client():command("INFO", "commandstats"))
    local n = 0
    for _, cmd in ipairs({ "evalsha", "eval" }) do
        n = n + tonumber(info:match("cmdstat_" .. cmd .. ":calls=(%d+)") or 0)
    end
    return n
end

function _M.wdmany()
    local n = tonumber(ngx.var.arg_n)
    local lks = {}
    for i = 1, n do
        lks[i] = client(0.6):lock(ngx.var.arg_name .. ":" .. i)
        local ok, err = lks[i]:acquire(0)
        if not ok then
            return fail(500, "acquire: ", err)
        end
    end
    local c0 = script_calls()
    ngx.sleep(1.5)
    local calls = script_calls() - c0
    local kept = true
    for i = 1, n do
        kept = kept and lks[i]:held() and not lks[i]:lost()
        assert(lks[i]:release())
    end
    ngx.say("kept=", tostring(kept), " calls=", calls)
end

-- /lost?name=N: a watchdog lock deleted behind our back is reported lost.
function _M.lost()
    local lk = client(0.6):lock(ngx.var.arg_name)
    assert(lk:acquire(0))
    assert(client():lock(ngx.var.arg_name):force_unlock()) -- another client
    local t0 = now_ms()
    while not lk:lost() and now_ms() - t0 < 3000 do
        ngx.sleep(0.02)
    end
    local r, err = lk:release()
    ngx.say("lost=", tostring(lk:lost()), " release=", tostring(r), ":", tostring(err))
end

-- /stats?name=N&step=1|2: a scripted sequence on a client of its own (1.5 s
-- watchdog lease), then client:stats(). Step 1: 1 timeout, 1 try (busy), 1
-- grant woken by the holder's unlock, 1 grant removed by a force unlock
-- (lost, gone), then a grant whose server run.sh stops (SIGSTOP) before
-- step 2, which waits for its in-doubt report and prints the figures as
-- "key=value" words.
local stats_clients = {}

local function until_true(cond, ms)
    local t0 = mono_ms()
    while not cond() do
        if mono_ms() - t0 > ms then
            return false
        end
        ngx.sleep(0.005)
    end
    return true
end

-- lk:acquire(10) in a light thread, cancelled by this one (lk:cancel())
-- once it waits on the shared listener (subscribed, two tries refused): it
-- must end "canceled". other: a client to look with.
local function cancelled_wait(lk, name, other)
    local calls = script_calls()
    local t = ngx.thread.spawn(function() return lk:acquire(10) end)
    assert(until_true(function()
        local v = other:command("PUBSUB", "NUMSUB", "redisson_lock__channel:{" .. name .. "}")
        return v and tonumber(v[2]) == 1 and script_calls() >= calls + 2
    end, 5000), "waiter to cancel subscribed and refused twice")
    assert(lk:cancel(), "an acquire was waiting")
    local okw, r, err = ngx.thread.wait(t)
    assert(okw and r == nil and tostring(err):find("^canceled"), "cancelled: " .. tostring(err))
end

function _M.stats()
    local n = ngx.var.arg_name
    if ngx.var.arg_step == "2" then
        local c = assert(stats_clients[n], "step 1 first")
        stats_clients[n] = nil
        assert(until_true(function() return c:stats().kinds.reentrant.lost_in_doubt == 1 end,
                          6000), "in-doubt counted")
        local s = c:stats()
        local k = s.kinds.reentrant
        local waits, holds, late = 0, 0, 0
        for i = 1, 24 do
            waits, holds = waits + k.wait_ms[i], holds + k.hold_ms[i]
            if i >= 8 then late = late + k.wait_ms[i] end
        end
        local others = 0
        for _, kind in ipairs({ "fair", "read", "write", "fenced" }) do
            others = others + s.kinds[kind].granted + s.kinds[kind].timed_out + s.kinds[kind].busy
        end
        ngx.say(string.format("granted=%d timed_out=%d cancelled=%d busy=%d first_try=%d "
                              .. "woken=%d retried=%d waits=%d late=%s holds=%d lost_gone=%d "
                              .. "lost_expired=%d lost_in_doubt=%d settles=%d redirects=%d "
                              .. "acks=%d renewal_commands=%s others=%d",
                              k.granted, k.timed_out, k.cancelled, k.busy, k.granted_first_try,
                              k.granted_woken, k.granted_retried, waits,
                              late >= 1 and "some" or "none", holds, k.lost_gone,
                              k.lost_expired, k.lost_in_doubt, s.settles, s.redirects,
                              s.replica_ack_failures, s.renewal_commands >= 1 and "some" or "none",
                              others))
        return
    end
    local c = hilock.new { url = os.getenv("REDIS_URL"), watchdog_lease = 1.5,
                           command_timeout = 0.5 }
    local other = client()
    local s0 = c:stats()
    assert(s0.version == 1 and s0.kinds.reentrant.granted == 0 and #s0.kinds.fair.hold_ms == 24)
    local b, held = c:lock(n .. ":b"), other:lock(n .. ":b", 99)
    assert(held:acquire(0, 60))
    local r, err = b:acquire(0.1)
    assert(r == nil and err:find("^timeout"), "timeout: " .. tostring(err))
    r, err = b:acquire(0)
    assert(r == nil and err:find("^timeout"), "busy: " .. tostring(err))
    cancelled_wait(b, n .. ":b", other)
    -- the waiter sleeps once it listens and its attempt after subscribing
    -- (its second) was refused: only then is the release's message its wake-up
    local calls = script_calls()
    local waiter = ngx.thread.spawn(function() return b:acquire(10) end)
    assert(until_true(function()
        local v = other:command("PUBSUB", "NUMSUB", "redisson_lock__channel:{" .. n .. ":b}")
        return v and tonumber(v[2]) == 1 and script_calls() >= calls + 2
    end, 5000), "waiter subscribed and refused twice")
    assert(held:release())
    local okw, got = ngx.thread.wait(waiter)
    assert(okw and got, "woken grant")
    assert(b:release())
    local g = c:lock(n .. ":g")
    assert(g:acquire(0)) -- removed by another client
    assert(other:lock(n .. ":g", 98):force_unlock())
    assert(until_true(function() return c:stats().kinds.reentrant.lost_gone == 1 end, 6000),
           "loss counted")
    assert(c:lock(n .. ":d"):acquire(0)) -- the server stops before step 2
    stats_clients[n] = c
    ngx.say("ready")
end

-- /name_stats?name=N: a client with stats_names = 2; on N:a a busy try, a
-- timeout, a grant and its release; on N:b a grant lost to a force unlock;
-- on N:c (the third pair) a timeout, a grant and its release, counted in
-- the other entry. Prints each entry's figures as "kind name granted
-- first_try busy timed_out cancelled waits holds gone expired doubt", then
-- the kind's totals and whether names appear without by_name.
function _M.name_stats()
    local n = ngx.var.arg_name
    local c = hilock.new { url = os.getenv("REDIS_URL"), stats_names = 2, watchdog_lease = 1.5 }
    local other = client()
    local okp, perr = pcall(other.stats, other, { by_name = true })
    assert(not okp and tostring(perr):find("stats_names"), "by_name refused: " .. tostring(perr))
    local okn = pcall(hilock.new, { url = os.getenv("REDIS_URL"), stats_names = -1 })
    assert(not okn, "stats_names -1 refused")
    local a, b, x = c:lock(n .. ":a"), c:lock(n .. ":b"), c:lock(n .. ":c")
    local held = other:lock(n .. ":a", 99)
    assert(held:acquire(0, 60))
    assert(a:acquire(0) == nil)
    assert(a:acquire(0.05) == nil)
    cancelled_wait(a, n .. ":a", other)
    assert(held:release())
    assert(a:acquire(0, 60)); assert(a:release())
    assert(b:acquire(0)) -- removed by another client
    assert(other:lock(n .. ":b", 98):force_unlock())
    assert(until_true(function() return c:stats().kinds.reentrant.lost_gone == 1 end, 6000),
           "loss counted")
    held = other:lock(n .. ":c", 99)
    assert(held:acquire(0, 60))
    assert(x:acquire(0.05) == nil)
    assert(held:release())
    assert(x:acquire(0, 60)); assert(x:release())
    local s = c:stats({ by_name = true })
    local function sum(t) local v = 0 for i = 1, 24 do v = v + t[i] end return v end
    local out = {}
    for _, e in ipairs(s.names) do
        out[#out + 1] = string.format("%s %s %d %d %d %d %d %d %d %d %d %d", e.kind,
            e.other and "(other)" or e.name:sub(#n + 2), e.granted, e.granted_first_try, e.busy,
            e.timed_out, e.cancelled, sum(e.wait_ms), sum(e.hold_ms), e.lost_gone,
            e.lost_expired, e.lost_in_doubt)
    end
    local k = s.kinds.reentrant
    out[#out + 1] = string.format("kind %d %d %d %d %d %d", k.granted, k.busy, k.timed_out,
                                  k.cancelled, sum(k.wait_ms), sum(k.hold_ms))
    out[#out + 1] = "plain=" .. tostring(c:stats().names == nil)
    ngx.say(table.concat(out, "; "))
end

-- /cancel?name=N&fair=0|1: another client holds N (lease 60 s); a client of
-- its own waits up to 10 s for it in a light thread and, once it waits
-- (reentrant: subscribed and refused twice, with a second waiter of another
-- owner on the same shared listener; fair: in the queue and subscribed to
-- its own channel), another light thread calls lk:cancel(). Prints the
-- acquire's answer, how long the cancel took to end it (ms), what is left
-- on the server (queue entries, the waiter's subscriptions), held, a second
-- cancel's answer, the stats' cancelled and timed_out, and (reentrant)
-- whether the other waiter still gets the lock at the holder's release.
function _M.cancel()
    local n = ngx.var.arg_name
    local fair = ngx.var.arg_fair == "1"
    local other = client()
    local c = hilock.new { url = os.getenv("REDIS_URL") }
    local held = fair and other:fair_lock(n, 99) or other:lock(n, 99)
    assert(held:acquire(0, 60))
    local lk = fair and c:fair_lock(n, 1) or c:lock(n, 1)
    local chan = fair and "redisson_lock__channel:{" .. n .. "}:*" or nil
    local function subs()
        if fair then
            local v = other:command("PUBSUB", "CHANNELS", chan)
            return v and #v or -1
        end
        local v = other:command("PUBSUB", "NUMSUB", "redisson_lock__channel:{" .. n .. "}")
        return v and tonumber(v[2]) or -1
    end
    local function queued()
        return tonumber(other:command("LLEN", "redisson_lock_queue:{" .. n .. "}")) +
               tonumber(other:command("ZCARD", "redisson_lock_timeout:{" .. n .. "}"))
    end
    local calls = script_calls()
    local waiter = ngx.thread.spawn(function() return lk:acquire(10) end)
    local second, second_lk
    if not fair then
        second_lk = c:lock(n, 2)
        second = ngx.thread.spawn(function() return second_lk:acquire(10) end)
    end
    assert(until_true(function()
        if fair then
            return queued() == 2 and subs() == 1
        end
        return subs() == 1 and script_calls() >= calls + 4
    end, 5000), "waiting")
    local t0 = mono_ms()
    local t_end
    local canceller = ngx.thread.spawn(function() return lk:cancel() end)
    local okc, cancelled = ngx.thread.wait(canceller)
    local okw, r, err = ngx.thread.wait(waiter)
    t_end = mono_ms()
    assert(okc and okw)
    -- the waiter's subscription: fair, its own channel (dropped by the
    -- machine); reentrant, the shared listener stays while the other waits
    local left_subs = fair and subs() or -2
    local out = { string.format("cancel=%s res=%s err=%s ms=%d queue=%d subs=%d held=%s again=%s",
        tostring(cancelled), tostring(r), tostring(err):match("^[^:]+"), t_end - t0,
        queued(), left_subs, tostring(lk:held()), tostring(lk:cancel())) }
    if second then
        assert(held:release())
        local ok2, got = ngx.thread.wait(second)
        out[#out + 1] = "other=" .. tostring(ok2 and got)
        second_lk:release()
    else
        assert(held:release())
    end
    local k = c:stats().kinds[fair and "fair" or "reentrant"]
    out[#out + 1] = string.format("cancelled=%d timed_out=%d granted=%d", k.cancelled,
                                  k.timed_out, k.granted)
    ngx.say(table.concat(out, " "))
end

-- /cancel_wait?name=N&fair=0|1 and /cancel_by?name=N: the cancel comes from
-- another request. /cancel_wait: another client holds N, a lock object
-- kept in the worker (parked[N]) waits up to 10 s for it; prints its
-- answer, whether it holds, the queue left and its stats' cancelled.
-- /cancel_by: once that acquire waits (fair: in the queue; reentrant: two
-- tries refused), lk:cancel(); prints its answer and ms until the waiting
-- request's acquire returned.
local parked = {}

function _M.cancel_wait()
    local n = ngx.var.arg_name
    local fair = ngx.var.arg_fair == "1"
    local other = client()
    local c = hilock.new { url = os.getenv("REDIS_URL") }
    local held = fair and other:fair_lock(n, 99) or other:lock(n, 99)
    assert(held:acquire(0, 60))
    local lk = fair and c:fair_lock(n, 1) or c:lock(n, 1)
    local p = { lk = lk, fair = fair, calls = script_calls() }
    parked[n] = p
    local r, err = lk:acquire(10)
    p.done_at = mono_ms()
    parked[n] = nil
    local q = tonumber(other:command("LLEN", "redisson_lock_queue:{" .. n .. "}")) +
              tonumber(other:command("ZCARD", "redisson_lock_timeout:{" .. n .. "}"))
    assert(held:release())
    ngx.say(string.format("res=%s err=%s held=%s queue=%d cancelled=%d", tostring(r),
        tostring(err):match("^[^:]+"), tostring(lk:held()), q,
        c:stats().kinds[fair and "fair" or "reentrant"].cancelled))
end

function _M.cancel_by()
    local n = ngx.var.arg_name
    local other = client()
    local p
    assert(until_true(function()
        p = parked[n]
        if not p then
            return false
        end
        if p.fair then
            return tonumber(other:command("LLEN", "redisson_lock_queue:{" .. n .. "}")) == 1
        end
        return script_calls() >= p.calls + 2
    end, 5000), "a request waiting")
    local t0 = mono_ms()
    local cancelled = p.lk:cancel()
    assert(until_true(function() return p.done_at ~= nil end, 5000), "acquire returned")
    ngx.say(string.format("cancel=%s ms=%d", tostring(cancelled), p.done_at - t0))
end

-- /lost_bounded: 30 request owners lose their watchdog holds; a client with
-- lost_memory = 8 remembers at most two generations of 8 of them.
function _M.lost_bounded()
    local c = hilock.new { url = os.getenv("REDIS_URL"), watchdog_lease = 0.3, lost_memory = 8 }
    local other = client()
    local base = "or:lostmem:" .. ngx.var.arg_name .. ":"
    local locks = {}
    for i = 1, 30 do
        locks[i] = c:lock(base .. i, 1000 + i) -- one owner per "request"
        assert(locks[i]:acquire(0))
    end
    for i = 1, 30 do
        assert(other:lock(base .. i):force_unlock())
    end
    local t0 = now_ms()
    while next(c.wd) and now_ms() - t0 < 3000 do -- every loss reported
        ngx.sleep(0.02)
    end
    local remembered, lost = 0, 0
    for _ in pairs(c.lost) do remembered = remembered + 1 end
    for _ in pairs(c.lost_old) do remembered = remembered + 1 end
    for i = 1, 30 do lost = lost + (locks[i]:lost() and 1 or 0) end
    ngx.say("watched=", next(c.wd) and "some" or "none", " remembered=", remembered,
            " lost=", lost)
end

-- /auth: password + database from the URL (REDIS_AUTH_URL); a wrong
-- password is an "auth" failure.
function _M.auth()
    local url = os.getenv("REDIS_AUTH_URL")
    local c = hilock.new { url = url }
    local lk = c:lock("or:auth")
    local ok, err = lk:acquire(0, 10)
    local db = c:command("CLIENT", "INFO")
    local held = lk:held()
    local r = lk:release()
    local bad = hilock.new { url = url:gsub("//:[^@]*@", "//:wrong@") }
    local ok2, err2 = bad:lock("or:auth"):acquire(0, 10)
    ngx.say(tostring(ok), ":", tostring(err), " db=", tostring(type(db) == "string" and
            db:match(" db=(%d+)")), " held=", tostring(held), " release=", tostring(r),
            " wrong=", tostring(ok2), ":", tostring(err2 and err2:match("^[%a ]+")))
end

-- /ccount?k=K[&fair=1]: like /count on the cluster, lock "or:cl:K", counter
-- "or:cc:{or:cl:K}" (the lock's slot, so the lock's master).
function _M.ccount()
    local c = client(nil, "cluster")
    local name = "or:cl:" .. ngx.var.arg_k
    local lk = ngx.var.arg_fair == "1" and c:fair_lock(name) or c:lock(name)
    local key = "or:cc:{" .. name .. "}"
    local ok, err = lk:acquire(60, 10)
    if not ok then
        return fail(500, "acquire: ", err)
    end
    local v, gerr = c:command("GET", key)
    if v == nil then
        lk:release()
        return fail(500, "get: ", gerr)
    end
    ngx.sleep(0.001)
    local s, serr = c:command("SET", key, (tonumber(v) or 0) + 1)
    local r, rerr = lk:release()
    if not s then
        return fail(500, "set: ", serr)
    end
    if not r then
        return fail(500, "release: ", rerr)
    end
    ngx.say("ok")
end

-- /cwatchdog: six watchdog locks spread over the cluster's masters (lease
-- 0.6 s) must all stay held for 1.5 s.
function _M.cwatchdog()
    local c = client(0.6, "cluster")
    local locks = {}
    for i = 1, 6 do
        locks[i] = c:lock("or:cw:" .. i .. ":" .. ngx.var.arg_tag)
        local ok, err = locks[i]:acquire(0)
        if not ok then
            return fail(500, "acquire ", i, ": ", err)
        end
    end
    local t0 = now_ms()
    while now_ms() - t0 < 1500 do
        for i = 1, 6 do
            local ttl = locks[i]:ttl()
            if not locks[i]:held() or not ttl or ttl <= 0 then
                return fail(500, "lock ", i, " not held at ", now_ms() - t0, " ms")
            end
        end
        ngx.sleep(0.1)
    end
    local lost = 0
    for i = 1, 6 do
        lost = lost + (locks[i]:lost() and 1 or 0)
        assert(locks[i]:release())
    end
    ngx.say("kept lost=", lost)
end

-- /mhold?name=N[&url=sentinel][&lease=S]: hold N (cluster by default)
-- with a watchdog lease of S s (3) until the key "or:stop:{N}" appears (at
-- most 40 s), then release.
function _M.mhold()
    local c = client(tonumber(ngx.var.arg_lease) or 3, ngx.var.arg_url or "cluster")
    local name = ngx.var.arg_name
    local lk = c:lock(name)
    local ok, err = lk:acquire(0)
    if not ok then
        return fail(500, "acquire: ", err)
    end
    local t0 = now_ms()
    while now_ms() - t0 < 40000 do
        if c:command("GET", "or:stop:{" .. name .. "}") then -- nil reply: false
            break
        end
        ngx.sleep(0.02)
    end
    local lost = lk:lost()
    local r, rerr = lk:release()
    ngx.say("released=", tostring(r or rerr), " lost=", tostring(lost))
end

-- /noack?name=N: one try through the sentinel URL with a 0.2 s replica
-- acknowledgement timeout, while the harness keeps the replica stopped: the
-- grant is given back and reported.
function _M.noack()
    local c = clients.noack
    if not c then
        c = hilock.new { url = os.getenv("SENTINEL_URL"), replica_ack_timeout = 0.2 }
        clients.noack = c
    end
    local lk = c:lock(ngx.var.arg_name)
    local ok, err = lk:acquire(0, 10)
    ngx.say(tostring(ok), " ", tostring(err and err:match("^[^:]+")),
            " again=", tostring(err ~= nil and err:find("released again", 1, true) ~= nil),
            " locked=", tostring(lk:locked()))
end

-- /ackwatch?name=N: a watchdog hold (3 s lease) through the sentinel URL
-- with replica acknowledgement (0.5 s); once the harness has stopped the
-- replica (it sets or:paused:{N} on the master), how long until the holder
-- is told "in doubt": renewals the master answers but no replica takes are
-- no confirmation.
function _M.ackwatch()
    local c = clients.ackwatch
    if not c then
        c = hilock.new { url = os.getenv("SENTINEL_URL"), replica_ack_timeout = 0.5,
                         watchdog_lease = 3 }
        clients.ackwatch = c
    end
    local name = ngx.var.arg_name
    local lk = c:lock(name)
    local ok, err = lk:acquire(5)
    if not ok then
        return fail(500, "acquire: ", err)
    end
    local t0 = now_ms()
    while now_ms() - t0 < 20000 do
        if c:command("GET", "or:paused:{" .. name .. "}") then -- nil reply: false
            break
        end
        ngx.sleep(0.02)
    end
    t0 = now_ms()
    while not lk:lost() and now_ms() - t0 < 6000 do
        ngx.sleep(0.02)
    end
    local lost = lk:lost()
    ngx.say("lost=", tostring(lost), " told_ms=", lost and (now_ms() - t0) or -1)
    lk:release()
end

-- /urls: URL forms hilock.new accepts and rejects (bad ones raise).
function _M.urls()
    local out = {}
    for _, u in ipairs { "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
                         "redis+cluster://:pw@h1,h2:7001/",
                         "redis+sentinel://s1:26379,s2/mymaster",
                         "redis+sentinel://u:pw@s1/mymaster/3",
                         "redis+cluster://h1:7000/3", "redis+sentinel://s1:26379",
                         "redis+sentinel://s1:26379/", "redis+foo://h1", "redis+cluster://,h2" } do
        local ok, c = pcall(hilock.new, { url = u })
        out[#out + 1] = ok and (c.mode .. ":" .. #c.seeds .. ":" .. tostring(c.master_name)
                                .. ":" .. c.db .. ":" .. tostring(c.replica_ack)) or "error"
    end
    ngx.say(table.concat(out, " "))
end

-- /hostile?url=U: one try through a fake server that sends impossible
-- numbers (tests/openresty/fake_server.py); says "ok" or the error, and must
-- neither raise nor hang the worker.
function _M.hostile()
    local ok, res = pcall(function()
        local c = hilock.new { url = ngx.unescape_uri(ngx.var.arg_url), connect_timeout = 1,
                               command_timeout = 1 }
        local got, err = c:lock("or:hostile"):acquire(0, 10)
        return got and "acquired" or ("error: " .. tostring(err))
    end)
    ngx.say(ok and res or ("raised: " .. tostring(res)))
end

-- /tls: over TLS (cosocket sslhandshake, CA from lua_ssl_trusted_certificate)
-- with a percent-encoded password; the wrong server name fails (a plain
-- client on the TLS port is left to the C and Python suites: nginx logs the
-- reset as an error); the same server through unix:// with the password.
-- Failures are reported by the first error's class, as c:command("PING")
-- meets it.
function _M.tls()
    local url = os.getenv("TLS_URL")
    local out = {}
    local function try(u, what)
        local ok, c = pcall(hilock.new, { url = u })
        if not ok then
            out[#out + 1] = what .. "=raise"
            return
        end
        local pong, err = c:command("PING")
        if pong ~= "PONG" then
            ngx.log(ngx.WARN, what, " -> ", tostring(err)) -- shown by run.sh on a failure
            out[#out + 1] = what .. "=" .. tostring(err and err:match("^[%a ]+"))
            return
        end
        local lk = c:lock("or:tls")
        local got, aerr = lk:acquire(0, 10)
        local held = got and lk:held()
        local rel = got and lk:release()
        out[#out + 1] = what .. "=" .. (got and ("held:" .. tostring(held) .. ":" .. tostring(rel))
                                        or tostring(aerr))
    end
    try(url, "tls")
    try(url:gsub("tls_server_name=localhost", "tls_server_name=redis.example.org"), "name")
    try(url:gsub("%%40", "%%41"), "password")
    try(os.getenv("UNIX_URL"), "unix")
    try(url .. "&tls_ca_file=/x.pem", "cafile")
    ngx.say(table.concat(out, " "))
end

-- /mtls: mutual TLS against a server that requires a client certificate:
-- the certificate and key as options and as URL query parameters hold a
-- lock; no certificate, or one from another CA, is refused by the server;
-- an unreadable file, a file that is not PEM, or a key without its
-- certificate raises at hilock.new.
function _M.mtls()
    local url, d = os.getenv("MTLS_URL"), os.getenv("MTLS_CERTS")
    local out = {}
    local function try(opts, what)
        local ok, c = pcall(hilock.new, opts)
        if not ok then
            ngx.log(ngx.WARN, what, " -> ", tostring(c))
            out[#out + 1] = what .. "=raise"
            return
        end
        local pong, err = c:command("PING")
        if pong ~= "PONG" then
            ngx.log(ngx.WARN, what, " -> ", tostring(err))
            out[#out + 1] = what .. "=" .. tostring(err and err:match("^[%a ]+"))
            return
        end
        local lk = c:lock("or:mtls")
        local got, aerr = lk:acquire(0, 10)
        local held = got and lk:held()
        local rel = got and lk:release()
        out[#out + 1] = what .. "=" .. (got and ("held:" .. tostring(held) .. ":" .. tostring(rel))
                                        or tostring(aerr))
    end
    try({ url = url, tls_cert_file = d .. "/client.crt", tls_key_file = d .. "/client.key" },
        "opts")
    try({ url = url .. "&tls_cert_file=" .. ngx.escape_uri(d .. "/client.crt")
                    .. "&tls_key_file=" .. ngx.escape_uri(d .. "/client.key") }, "url")
    try({ url = url }, "nocert")
    try({ url = url, tls_cert_file = d .. "/other.crt", tls_key_file = d .. "/other.key" },
        "othercert")
    try({ url = url, tls_cert_file = d .. "/missing.crt", tls_key_file = d .. "/client.key" },
        "nofile")
    try({ url = url, tls_cert_file = d .. "/ca.srl", tls_key_file = d .. "/client.key" },
        "notpem")
    try({ url = url, tls_key_file = d .. "/client.key" }, "keyonly")
    ngx.say(table.concat(out, " "))
end

-- /sentinel?name=N: lock through the sentinel URL, tell which server (port)
-- the lock went to, release.
function _M.sentinel()
    local c = client(nil, "sentinel")
    local lk = c:lock(ngx.var.arg_name)
    local ok, err = lk:acquire(5, 10)
    if not ok then
        return fail(500, "acquire: ", err)
    end
    local port = c:command("CONFIG", "GET", "port")
    local held = lk:held()
    local r, rerr = lk:release()
    ngx.say("acquired port=", type(port) == "table" and port[2] or tostring(port),
            " held=", tostring(held), " release=", tostring(r or rerr))
end

-- /stall?name=N[&fair=1]: one acquire (wait 5 s, lease 60 s) by a client
-- whose commands time out after 300 ms, sent while the test has the server
-- stopped; says the error at once (ngx.eof). The late outcome is settled
-- by the driver's light thread after the server resumes.
local stall_client
function _M.stall()
    stall_client = stall_client or hilock.new { url = os.getenv("REDIS_URL"),
                                                command_timeout = 0.3 }
    local c = stall_client
    local lk = ngx.var.arg_fair == "1" and c:fair_lock(ngx.var.arg_name)
               or c:lock(ngx.var.arg_name)
    local ok, err = lk:acquire(5, 60)
    ngx.say(ok and "acquired" or err)
    ngx.eof() -- the answer goes out now; the settling light thread carries on
end

-- /partial?name=N: take N twice with a 5 s lease (the watchdog lease is
-- 30 s), release once; says the remaining lease in ms, then releases.
function _M.partial()
    local lk = client():lock(ngx.var.arg_name)
    assert(lk:acquire(0, 5))
    assert(lk:acquire(0, 5))
    ngx.sleep(0.2)
    assert(lk:release())
    local ttl = lk:ttl()
    local n = lk:hold_count()
    assert(lk:release())
    ngx.say(string.format("ttl=%d holds=%d", ttl * 1000, n))
end

-- /bench?raw=1&n=N: the platform's floor for a pair: the engine's bytes of
-- N acquire + release pairs of one owner, all built before the clock
-- starts, sent on one cosocket (no pool, no machine, no driver); says
-- "<n> <ms>". The server does what it does for the driver's pairs.
local function bench_raw(n)
    local p = hilock_proto.lock("bench:raw:" .. ngx.worker.pid())
    local id = hilock_proto.uuid()
    local owner = id .. ":1"
    local _, lock_cmd = p:acquire(owner, 0, 10000, 300000):next()
    local cmds = {}
    for i = 1, n do
        local _, unlock_cmd = p:release(owner, 10000, 30000, id .. ":e0:" .. i, 1000):next()
        cmds[2 * i - 1], cmds[2 * i] = lock_cmd, unlock_cmd
    end
    local u = hilock_proto.parse_url(os.getenv("REDIS_URL"))
    local sock = ngx.socket.tcp()
    local ok, err = sock:connect(u.host, u.port, { pool = "bench:raw" })
    if not ok then
        return fail(500, "connect: ", err)
    end
    local rd = hilock_proto.reader()
    local t0 = now_ms()
    for i = 1, 2 * n do
        sock:send(cmds[i])
        local r = rd:get()
        while not r do
            local data
            data, err = sock:receiveany(65536)
            if not data then
                return fail(500, "receive: ", err)
            end
            r = rd:feed_get(data)
        end
        if r:type() == "error" then
            return fail(500, "reply: ", r:error())
        end
    end
    local ms = now_ms() - t0
    sock:setkeepalive()
    ngx.say(n, " ", string.format("%.3f", ms))
end

-- /bench?n=N: N uncontended acquire+release pairs; says "<n> <ms>".
function _M.bench()
    local n = tonumber(ngx.var.arg_n) or 1000
    if ngx.var.arg_raw then
        return bench_raw(n)
    end
    local lk = client():lock("bench:or:" .. ngx.worker.pid())
    local t0 = now_ms()
    for _ = 1, n do
        local ok, err = lk:acquire(0, 10)
        if not ok then
            return fail(500, "acquire: ", err)
        end
        ok, err = lk:release()
        if not ok then
            return fail(500, "release: ", err)
        end
    end
    ngx.say(n, " ", string.format("%.3f", now_ms() - t0))
end

-- /semcount?name=N: a 3-permit semaphore; each request takes a permit (wait
-- up to 30 s), counts itself in, sleeps 50 ms, counts out, releases. Says
-- "max=<most requests inside at once>".
local inside, most = {}, {}
function _M.semcount()
    local name = ngx.var.arg_name
    local s = client():semaphore(name)
    local set, serr = s:try_set_permits(3)
    if set == nil then
        return fail(500, "try_set: ", serr)
    end
    local ok, err = s:acquire(1, 30)
    if not ok then
        return fail(500, "acquire: ", err)
    end
    inside[name] = (inside[name] or 0) + 1
    most[name] = math.max(most[name] or 0, inside[name])
    ngx.sleep(0.05)
    inside[name] = inside[name] - 1
    local r, rerr = s:release(1)
    if not r then
        return fail(500, "release: ", rerr)
    end
    ngx.say("max=", most[name])
end

-- /sem?name=N: semaphore, permit-expirable semaphore and latch in one
-- request (light threads stand for other requests); says one word per check.
function _M.sem()
    local c, name = client(), ngx.var.arg_name
    local out = {}
    local function say(k, v) out[#out + 1] = k .. "=" .. tostring(v) end
    -- a waiter for the only permit is woken by the release (no lease, no poll)
    local s = c:semaphore(name .. ":s")
    assert(s:try_set_permits(1))
    say("again", s:try_set_permits(5)) -- false: kept
    assert(s:acquire(1, 0))
    local t_rel
    local waiter = ngx.thread.spawn(function()
        local ok, err = s:acquire(1, 5)
        return ok, err, mono_ms()
    end)
    ngx.sleep(0.3)
    t_rel = mono_ms()
    assert(s:release(1))
    local _, ok, err, t_acq = ngx.thread.wait(waiter)
    say("woken", ok and string.format("%s", t_acq - t_rel < 200) or err)
    say("avail", s:available())
    assert(s:release(1))
    say("drain", s:drain())
    say("zero", select(2, s:try_set_permits(0)))
    -- permit-expirable: a permit whose lease ends comes back by itself
    local pes = c:permit_semaphore(name .. ":p")
    assert(pes:try_set_permits(1))
    local id = assert(pes:acquire(0, 0.3))
    local t0 = mono_ms()
    local id2, perr = pes:acquire(3, 5)
    say("expired", id2 and (#id2 == 32 and id2 ~= id and mono_ms() - t0 >= 250) or perr)
    say("late", select(2, pes:release(id)))
    say("own", pes:release(id2))
    -- latch: two waiters, open at the third count-down
    local l = c:latch(name .. ":l")
    assert(l:try_set_count(3))
    local waiters = {}
    for i = 1, 2 do
        waiters[i] = ngx.thread.spawn(function()
            local ok2, err2 = l:await(5)
            return ok2, err2, mono_ms()
        end)
    end
    ngx.sleep(0.05)
    l:count_down(); l:count_down()
    ngx.sleep(0.1)
    local t_open = mono_ms()
    say("left", l:count_down())
    local woke = 0
    for i = 1, 2 do
        local _, ok2, _, t = ngx.thread.wait(waiters[i])
        if ok2 and t - t_open < 200 then woke = woke + 1 end
    end
    say("latch", woke)
    say("count", l:count())
    -- a key that is no count is refused and left alone
    assert(c:command("SET", name .. ":w", "abc"))
    say("wrong", select(2, c:semaphore(name .. ":w"):release(1)))
    say("kept", c:command("GET", name .. ":w"))
    ngx.say(table.concat(out, " "))
end

-- /rwcount?name=N&w=0|1: read (w=0) or write (w=1) side of N (wait 30 s,
-- lease 10 s), 5 ms inside; counts who is inside in this worker. Says
-- "bad=<entries that met a writer, or a writer that met anyone> maxr=<most
-- readers inside at once>".
local rw_in = {}
function _M.rwcount()
    local name, write = ngx.var.arg_name, ngx.var.arg_w == "1"
    local c = client()
    local lk = write and c:write_lock(name) or c:read_lock(name)
    local ok, err = lk:acquire(30, 10)
    if not ok then
        return fail(500, "acquire: ", err)
    end
    local st = rw_in[name] or { r = 0, w = 0, bad = 0, maxr = 0 }
    rw_in[name] = st
    if st.w > 0 or (write and st.r > 0) then
        st.bad = st.bad + 1
    end
    if write then st.w = st.w + 1 else st.r = st.r + 1 end
    st.maxr = math.max(st.maxr, st.r)
    ngx.sleep(0.005)
    if write then st.w = st.w - 1 else st.r = st.r - 1 end
    local r, rerr = lk:release()
    if not r then
        return fail(500, "release: ", rerr)
    end
    ngx.say("bad=", st.bad, " maxr=", st.maxr)
end

return _M
