-- Plain-Lua tests of the hilock module; runs unchanged on Lua 5.1, LuaJIT
-- and Lua 5.4. Env: REDIS_URL (a throwaway server), HL_TMP (a temp dir),
-- HL_WORKER (path of worker.lua). Exit status 0 = all passed.
local hilock = require "hilock"
local proto = hilock.proto
local now_ms = proto.now_ms

local URL = assert(os.getenv("REDIS_URL"), "REDIS_URL not set")
local TMP = assert(os.getenv("HL_TMP"), "HL_TMP not set")
local WORKER = assert(os.getenv("HL_WORKER"), "HL_WORKER not set")
local T = dofile((arg[0]:match("^(.*)/") or ".") .. "/testlib.lua")
local VERSION, eq, test = T.VERSION, T.eq, T.test
local name = T.namer("t")

local function sleep_ms(ms)
  os.execute(string.format("sleep %.3f", ms / 1000))
end

-- Poll cond every 20 ms until it holds or timeout_ms pass.
local function wait_until(cond, timeout_ms)
  local deadline = now_ms() + timeout_ms
  while now_ms() < deadline do
    if cond() then return true end
    sleep_ms(20)
  end
  return cond()
end

local function raises(f, pattern)
  local ok, err = pcall(f)
  assert(not ok, "expected an error")
  if pattern then
    assert(tostring(err):find(pattern), "error '" .. tostring(err) .. "' lacks " .. pattern)
  end
end

local function prefix(err, p)
  assert(type(err) == "string" and err:sub(1, #p) == p,
         "expected error prefix '" .. p .. "', got " .. tostring(err))
end

local c = assert(hilock.connect(URL))

test("module shape and exports", function()
  assert(type(hilock.version) == "string" and hilock.version:match("^%d+%.%d+%.%d+$"))
  assert(type(hilock.thread_id()) == "number")
  assert(#c:id() == 36)
  assert(tostring(c):find("hilock.client"))
end)

test("bad arguments raise", function()
  raises(function() hilock.connect() end)
  raises(function() hilock.connect(URL, { bogus = 1 }) end, "unknown option")
  raises(function() hilock.connect(URL, { command_timeout = -1 }) end)
  raises(function() hilock.connect(URL, 5) end)
  raises(function() hilock.connect("nonsense://x") end)
  raises(function() c:lock() end)
  raises(function() c:lock("") end)
  raises(function() c:lock({}) end)
  raises(function() c:lock("a\0b") end)
  raises(function() c:lock(string.rep("x", 5000)) end)
  raises(function() c:lock("x", -1) end)
  raises(function() c:lock("x", 1.5) end)
  local lk = c:lock(name("args"))
  raises(function() lk:acquire(-1) end)
  raises(function() lk:acquire(0 / 0) end)
  raises(function() lk:acquire("soon") end)
  raises(function() lk:acquire(0, 0) end)
  raises(function() lk:acquire(0, -2) end)
  raises(function() lk:acquire(1e300) end)
  raises(function() hilock.lock(lk) end)
  raises(function() lk.acquire(c) end) -- wrong self type
  raises(function() proto.lock("x", "weird") end)
  eq(lk:locked(), false, "nothing was taken")
end)

test("connection failure returns nil, err", function()
  -- a port nobody listens on: the redis port + 1 is unlikely to be taken; if
  -- something answers there the test is inconclusive, not wrong
  local port = tonumber(URL:match(":(%d+)$"))
  local ok, err = hilock.connect("redis://127.0.0.1:" .. (port + 1), { connect_timeout = 0.5 })
  if ok == nil then
    prefix(err, "connection")
  end
end)

test("acquire, queries, release", function()
  local lk = c:lock(name("basic"))
  eq(lk:locked(), false, "locked before")
  eq(lk:ttl(), -2, "ttl of no lock")
  assert(lk:acquire(0, 10))
  eq(lk:locked(), true, "locked")
  eq(lk:held(), true, "held")
  eq(lk:hold_count(), 1, "hold count")
  local ttl = lk:ttl()
  assert(ttl > 9 and ttl <= 10, "ttl " .. ttl)
  eq(lk:lost(), false, "lost")
  eq(lk:kind(), "reentrant", "kind")
  assert(lk:release())
  eq(lk:locked(), false, "locked after")
  local ok, err = lk:release()
  eq(ok, nil, "second release")
  prefix(err, "not owner")
end)

test("reentrancy", function()
  local lk = c:lock(name("reentrant"))
  assert(lk:acquire(0, 10))
  assert(lk:acquire(0, 10))
  assert(lk:acquire())
  eq(lk:hold_count(), 3, "three holds")
  assert(lk:release())
  assert(lk:release())
  eq(lk:hold_count(), 1, "one hold left")
  eq(lk:locked(), true, "still locked")
  assert(lk:release())
  eq(lk:locked(), false, "released")
end)

test("not owner: other thread id and other client", function()
  local n = name("owner")
  local mine = c:lock(n, 1001)
  local other = c:lock(n, 1002)
  local c2 = assert(hilock.connect(URL))
  local foreign = c2:lock(n, 1001) -- same tid, other client id
  assert(mine:acquire(0, 10))
  local ok, err = other:release()
  eq(ok, nil, "release by other")
  prefix(err, "not owner")
  ok, err = foreign:release()
  eq(ok, nil, "release by other client")
  prefix(err, "not owner")
  ok, err = other:acquire(0)
  eq(ok, nil, "acquire by other")
  prefix(err, "timeout")
  local t0 = now_ms()
  ok, err = foreign:acquire(0.2)
  prefix(err, "timeout")
  assert(now_ms() - t0 >= 190, "waited the whole 0.2 s")
  eq(other:held(), false, "other does not hold")
  eq(mine:held(), true, "mine holds")
  eq(mine:hold_count(), 1, "hold count unchanged")
  assert(mine:release())
  assert(other:acquire(0, 10))
  assert(other:release())
  c2:close()
end)

test("lease expiry", function()
  local n = name("lease")
  local lk = c:lock(n, 1)
  local other = c:lock(n, 2)
  assert(lk:acquire(0, 0.3))
  local ttl = lk:ttl()
  assert(ttl > 0 and ttl <= 0.3, "ttl " .. ttl)
  assert(wait_until(function() return not lk:locked() end, 3000), "lease did not expire")
  assert(other:acquire(0, 10))
  local ok, err = lk:release()
  eq(ok, nil, "release after expiry")
  prefix(err, "not owner")
  assert(other:release())
end)

test("extend: adds to the lease, as the C API and Python", function()
  local n = name("extend")
  local lk = c:lock(n, 1)
  -- a 10 s lease: under valgrind a 1 s lease ran out before the extend
  assert(lk:acquire(0, 10))
  assert(lk:extend(5))
  local ttl = lk:ttl()
  -- added to what was left (set, it would be at most 5)
  assert(ttl > 10 and ttl <= 15, "ttl after extend " .. ttl)
  local ok, err = c:lock(n, 2):extend(5) -- another owner
  eq(ok, nil); prefix(err, "not owner")
  raises(function() lk:extend(0) end, "positive")
  raises(function() lk:extend() end)
  raises(function() lk:extend(-1) end)
  assert(lk:release())
  ok, err = lk:extend(1) -- not held any more
  eq(ok, nil); prefix(err, "not owner")
  local w = c:write_lock(n .. ":rw", 1)
  assert(w:acquire(0, 5))
  ok, err = w:extend(1)
  eq(ok, nil); prefix(err, "invalid argument")
  assert(w:release())
end)

-- The session's hold table (proto.holds): a frame on a hold's channel
-- makes that hold, and no other, due for a check; a "gone" answer is a
-- loss, handed out once; a released hold is never handed out.
test("hold table: a frame checks only its hold", function()
  local function reply(bytes) local r = proto.reader(); return r:feed_get(bytes) end
  local t = proto.holds(30000, 1000)
  t:grant("a", false, 30000, 0)
  t:grant("b", false, 30000, 0)
  local sub = reply("*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n")
  local msg = reply("*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\n0\r\n")
  local odd = reply("*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n")
  assert(t:heard("a", odd, 10) == false)
  assert(t:heard("b", sub, 10) == true)
  assert(t:heard("b", msg, 11) == false) -- already due
  assert(t:heard("nobody", msg, 11) == false)
  assert(t:check_next(11) == "b")
  assert(t:check_next(11) == nil)
  assert(t:heard("b", msg, 12) == false) -- in flight: once more after its answer
  t:check_outcome("b", false)
  assert(t:check_next(12) == "b")
  t:check_outcome("b", true)
  assert(t:lost_next() == "b")
  assert(t:lost_next() == nil)
  assert(t:heard("a", msg, 20) == true)
  t:remove("a")
  assert(t:check_next(20) == nil)
  t:free()
  assert(not pcall(t.check_next, t, 0))
end)

-- The watchdog's half of the hold table, as resty's watchdog drives it: a
-- watchdog hold is due lease/3 after its grant was sent, handed out once
-- until its outcome; unconfirmed, it is in doubt at lease - lease/5 after
-- its last confirmation; a "lost" outcome queues it for lost_next.
test("hold table: renewals, doubt, loss", function()
  local t = proto.holds(3000, 1000)
  t:grant("w", true, 0, 0)
  t:grant("f", false, 3000, 0) -- a fixed lease: never renewed
  eq(t:next_renewal(), 1000)
  eq(#t:renew_due(999, 0), 0)
  local due = t:renew_due(999, 1000) -- due within a period
  eq(#due, 1); eq(due[1], "w")
  eq(#t:renew_due(1000, 1000), 0) -- in flight
  eq(t:outcome("w", "renewed", true, 999), "renewed")
  eq(select(1, t:state("w")), 999)
  eq(t:outcome("w", "renewed", false, 999), "trouble") -- not acknowledged
  eq(t:doubt_next(999 + 2399), nil)
  eq(t:is_lost("w", 999 + 2399), false)
  eq(t:doubt_next(999 + 2400), "w")
  eq(select(2, t:state("w")), true)
  eq(t:is_lost("w", 3400), true)
  eq(t:outcome("w", "lost", true, 3500), "lost")
  eq(t:lost_next(), "w")
  eq(t:is_lost("nobody", 0), false)
  eq(t:state("nobody"), nil)
  eq(t:end_next(2999), nil) -- the fixed lease of "f" ends at 3000
  eq(t:end_next(3000), "f")
  eq(t:end_next(3000), nil)
  raises(function() t:outcome("w", "bogus", true, 0) end)
  t:free()
end)

-- The renewals due, in the groups the session makes (holds:renew_groups,
-- hl_holds_renew_due), as resty's watchdog sends them: one group per batch
-- key (holds:batch, the cluster slot), a hold marked alone by itself.
test("hold table: renewal groups", function()
  local t = proto.holds(3000, 1000)
  for _, k in ipairs({ "a1", "b1", "a2", "r", "a3" }) do
    t:grant(k, true, 0, 0)
    t:batch(k, k:sub(1, 1) == "b" and 7 or 3, k == "r")
  end
  t:grant("f", false, 3000, 0) -- a fixed lease: never renewed
  eq(#t:renew_groups(999, 0), 0)
  local gs, sizes, seen = t:renew_groups(999, 1000), {}, {}
  for _, g in ipairs(gs) do
    sizes[#sizes + 1] = #g
    for _, k in ipairs(g) do
      eq(seen[k], nil); seen[k] = g
    end
  end
  table.sort(sizes)
  eq(table.concat(sizes, ","), "1,1,3")
  assert(seen.a1 == seen.a2 and seen.a2 == seen.a3 and #seen.r == 1 and #seen.b1 == 1)
  eq(seen.f, nil)
  eq(#t:renew_groups(1000, 1000), 0) -- in flight
  eq(t:outcome("a1", "renewed", true, 999), "renewed")
  raises(function() t:batch("a1", -1, false) end)
  t:batch("nobody", 1, false) -- not in the table: ignored
  t:free()
end)

-- The session's liveness rule of a pub/sub connection (proto.sublive), as
-- resty's listener drives it: a PING after an interval without a frame
-- (half the command timeout, 100..500 ms), the connection given up when it
-- is unanswered as long again, and meanwhile its holds checked
-- (holds:unheard) at once and every interval until a frame is heard.
test("subscription liveness: ping, give up, check the holds", function()
  local s = proto.sublive(1000)
  eq(s:next(), -1) -- idle
  s:opened(0)
  eq(s:alive(), false)
  eq(s:next(), 500)
  local ping, reset, check = s:due(499)
  assert(not ping and not reset and not check)
  ping, reset, check = s:due(500) -- not heard since it opened: PING, check its holds
  assert(ping and not reset and check)
  s:heard(510)
  eq(s:alive(), true)
  eq(s:next(), 1010)
  ping, reset, check = s:due(1010)
  assert(ping and not reset and not check)
  ping, reset, check = s:due(1510) -- unanswered: given up, its holds checked
  assert(not ping and reset and check)
  eq(s:alive(), false)
  s:closed(1510) -- nothing more after a reset
  eq(s:next(), 2010)
  s:opened(1600)
  s:heard(1610)
  s:closed(1700) -- lost: checked at once
  ping, reset, check = s:due(1700)
  assert(not ping and not reset and check)
  s:idle()
  eq(s:next(), -1)
  eq(proto.sublive(0):next(), -1)
  raises(function() proto.sublive(-1) end)
  raises(function() proto.sublive("x") end)
  raises(function() s.due(proto.holds(1000, 1000), 0) end)
  assert(#proto.ping_cmd() > 0)
  local t = proto.holds(30000, 1000)
  t:grant("a", false, 30000, 0)
  assert(t:unheard("a", 10) == true)
  assert(t:unheard("a", 10) == false) -- already due
  assert(t:unheard("nobody", 10) == false)
  assert(t:check_next(10) == "a")
  t:check_outcome("a", false)
  assert(t:check_next(10) == nil)
  t:free()
end)

-- The engine module (hilock.proto) from Lua as a careless caller would use
-- it: every function, and every method of every object it makes, called
-- with junk (nothing, nil, numbers at the edges, strings, tables, other
-- objects as self). Anything may raise; nothing may crash (a crash ends the
-- whole run, valgrind's included).
test("engine objects and functions survive junk arguments", function()
  local objs = {}
  local function keep(v) if type(v) == "userdata" then objs[#objs + 1] = v end end
  local function reply(bytes) local r = proto.reader(); return r:feed_get(bytes) end
  local rd = proto.reader()
  keep(rd)
  for _, b in ipairs({ ":1\r\n", "-ERR x\r\n", "$3\r\nabc\r\n", "*2\r\n:1\r\n$-1\r\n",
                       "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", "+OK\r\n" }) do
    keep(reply(b))
  end
  local lk = proto.lock("n", "reentrant")
  keep(lk)
  for _, kind in ipairs({ "fair", "read", "write", "fenced" }) do keep(proto.lock("n", kind)) end
  keep(proto.router("single"))
  local hs = proto.holds(30000, 1000)
  hs:grant("k", true, 0, 0)
  keep(hs)
  keep(proto.sublive(1000))
  for _, k in ipairs({ "semaphore", "permit", "latch" }) do keep(proto.sem("s", k)) end
  local owner = proto.owner(proto.uuid(), 1)
  -- machines, made as the drivers make them (docs/lua.md)
  for _, mk in ipairs({ function() return lk:acquire(owner, 0, 1000, 30000, "rid", 100, 1000) end,
                        function() return lk:release(owner, 0, 30000, "rid", 100) end,
                        function() return lk:force() end,
                        function() return lk:extend_cmd(owner, 1000) end }) do
    local ok, m = pcall(mk)
    if ok then keep(m) end
  end
  local junk = { 0, 1, -1, 2 ^ 31, 2 ^ 53, -2 ^ 63, 0.5, 1 / 0, 0 / 0, "", ("x"):rep(300), "n",
                 "single", owner, {}, { 1, 2 }, true, false, print }
  for _, o in ipairs(objs) do junk[#junk + 1] = o end
  local function arg_lists()
    local lists = { {} , { nil }, { nil, nil, nil } }
    for n = 1, 4 do
      for _, v in ipairs(junk) do
        local a = {}
        for i = 1, n do a[i] = v end
        lists[#lists + 1] = a
      end
    end
    return lists
  end
  local lists = arg_lists()
  local unpack = table.unpack or unpack
  local calls = 0
  local function poke(f, self_)
    for _, a in ipairs(lists) do
      if self_ ~= nil then
        pcall(f, self_, unpack(a, 1, 4))
      else
        pcall(f, unpack(a, 1, 4))
      end
      calls = calls + 1
    end
  end
  local skip = { now_ms = true, uuid = true }
  for fname, f in pairs(proto) do
    if type(f) == "function" and not skip[fname] then poke(f) end
  end
  for _, o in ipairs(objs) do
    local mt = debug.getmetatable(o)
    local index = mt and mt.__index
    if type(index) == "table" then
      for _, f in pairs(index) do
        if type(f) == "function" then
          poke(f, o)
          for _, other in ipairs(objs) do pcall(f, other) end -- the wrong object as self
        end
      end
    end
  end
  assert(calls > 1000, "calls " .. calls)
  collectgarbage()
  collectgarbage()
end)

test("a waiter gets the lock when the lease runs out", function()
  local n = name("leasewait")
  local a, b = c:lock(n, 1), c:lock(n, 2)
  assert(a:acquire(0, 0.4))
  local t0 = now_ms()
  assert(b:acquire(5, 10))
  local dt = now_ms() - t0
  assert(dt >= 250 and dt < 3000, "waited " .. dt .. " ms")
  assert(b:release())
end)

test("watchdog keeps the lock past its lease; loss is reported", function()
  -- 1.2 s lease, renewed every 0.4 s: a 0.6 s one could expire under
  -- valgrind on a loaded machine between two renewals
  local cw = assert(hilock.connect(URL, { watchdog_lease = 1.2 }))
  local n = name("watchdog")
  local lk = cw:lock(n)
  assert(lk:acquire(0)) -- no lease: watchdog
  local t0 = now_ms()
  while now_ms() - t0 < 3000 do -- two and a half leases
    eq(lk:held(), true, "held at " .. (now_ms() - t0) .. " ms")
    local ttl = lk:ttl()
    assert(ttl > 0 and ttl <= 1.2, "ttl " .. ttl)
    sleep_ms(100)
  end
  -- somebody else deletes it: the watchdog notices within a period
  assert(c:lock(n):force_unlock())
  assert(wait_until(function() return lk:lost() end, 3000), "loss not noticed")
  eq(lk:locked(), false, "stays unlocked (no renewal)")
  local ok, err = lk:release()
  eq(ok, nil, "release of a lost lock")
  prefix(err, "not owner")
  assert(lk:acquire(0, 5))
  eq(lk:lost(), false, "lost reset by acquire")
  assert(lk:release())
  cw:close()
end)

test("force unlock", function()
  local n = name("force")
  local lk = c:lock(n, 7)
  assert(lk:acquire(0, 10))
  eq(c:lock(n, 8):force_unlock(), true, "deleted")
  eq(lk:locked(), false, "gone")
  eq(c:lock(n, 8):force_unlock(), false, "nothing to delete")
end)

test("fair lock", function()
  local n = name("fair")
  local a, b = c:fair_lock(n, 1), c:fair_lock(n, 2)
  eq(a:kind(), "fair", "kind")
  assert(a:acquire(0, 10))
  assert(a:acquire(0, 10))
  eq(a:hold_count(), 2, "fair reentrant")
  local ok, err = b:acquire(0.2)
  prefix(err, "timeout")
  ok, err = b:release()
  prefix(err, "not owner")
  assert(a:release())
  assert(a:release())
  assert(b:acquire(0, 10))
  assert(b:release())
end)

test("read-write lock: readers share, a writer excludes, downgrade", function()
  local n = name("rw")
  local r1, r2, w3 = c:read_lock(n, 1), c:read_lock(n, 2), c:write_lock(n, 3)
  eq(r1:kind(), "read", "kind")
  eq(w3:kind(), "write", "kind")
  assert(r1:acquire(0, 10))
  assert(r2:acquire(0, 10))
  eq(r1:locked(), true, "read side locked")
  eq(w3:locked(), false, "write side not locked")
  local ok, err = w3:acquire(0, 10)
  prefix(err, "timeout")
  assert(r1:release())
  assert(r2:release())
  eq(r1:locked(), false, "gone")
  assert(w3:acquire(0, 10))
  ok, err = r1:acquire(0, 10)
  prefix(err, "timeout")
  local r3 = c:read_lock(n, 3) -- the writer may read too
  assert(r3:acquire(0, 10))
  assert(w3:release())
  eq(r3:locked(), true, "a read lock now")
  assert(r1:acquire(0, 10))
  assert(r1:release())
  assert(r3:release())
  eq(r3:locked(), false, "released")
  assert(r3:close() and w3:close())
end)

test("fenced lock: tokens strictly increasing", function()
  local n = name("fenced")
  local a, b = c:fenced_lock(n, 1), c:fenced_lock(n, 2)
  eq(a:kind(), "fenced", "kind")
  eq(a:token(), 0, "no token yet")
  local last = 0
  for i = 1, 6 do
    local me, them = a, b
    if i % 2 == 0 then me, them = b, a end
    local t = assert(me:acquire_token(1, 10))
    assert(t > last, "token " .. t .. " after " .. last)
    last = t
    eq(them:token(), t, "token read by the other")
    local ok, err = them:acquire_token(0, 10)
    prefix(err, "timeout")
    assert(me:release())
  end
  -- a missing counter starts at the server's clock in milliseconds (13
  -- digits: exact as a Lua number and as text, "%.14g" included)
  assert(last > 1e12, "token " .. last .. " below the server's clock")
  eq(tostring(last), string.format("%d", last), "token as text")
end)

test("c:inspect: kinds, holders, fair queue, token", function()
  local n = name("insp")
  local v = assert(c:inspect(n))
  eq(v.kind, "none", "nothing yet"); eq(v.locked, false); eq(v.lease, -2); eq(#v.holders, 0)
  local lk = c:fair_lock(n, 7)
  assert(lk:acquire(0, 30))
  assert(lk:acquire(0, 30))
  v = assert(c:inspect(n))
  eq(v.kind, "reentrant", "a fair lock nobody waits for reads as reentrant")
  eq(#v.holders, 1); eq(v.holders[1].owner, c:id() .. ":7"); eq(v.holders[1].holds, 2)
  eq(v.holders[1].role, "exclusive")
  assert(v.lease > 0 and v.lease <= 30, "lease " .. tostring(v.lease))
  -- a waiter as Redisson queues it: the lock reads fair, with its deadline
  local q, z = "redisson_lock_queue:{" .. n .. "}", "redisson_lock_timeout:{" .. n .. "}"
  local p = assert(io.popen(string.format("redis-cli -u %s RPUSH '%s' w:2 >/dev/null && " ..
    "redis-cli -u %s ZADD '%s' %d w:2", URL, q, URL, z, v.server_time_ms + 60000)))
  local out = p:read("*a")
  p:close()
  assert(out:find("1"), out)
  v = assert(c:inspect(n))
  eq(v.kind, "fair"); eq(#v.queue, 1); eq(v.queue[1].owner, "w:2")
  assert(v.queue[1].deadline_in > 59 and v.queue[1].deadline_in <= 60, tostring(v.queue[1].deadline_in))
  assert(lk:release()); assert(lk:release())
  local f = c:fenced_lock(n .. ":f")
  local t = assert(f:acquire_token(0, 30))
  v = assert(c:inspect(n .. ":f"))
  eq(v.kind, "fenced"); eq(v.token, t)
  assert(f:release())
  raises(function() c:inspect("") end)
end)

test("semaphore, permit-expirable semaphore, latch", function()
  local n = name("sem")
  local s = c:semaphore(n)
  eq(s:name(), n, "name")
  eq(s:try_set_permits(2), true, "set")
  eq(s:try_set_permits(5), false, "kept")
  assert(s:acquire(2, 0))
  local ok, err = s:acquire(1, 0)
  eq(ok, nil); prefix(err, "timeout")
  eq(s:available(), 0, "none free")
  -- a release by another process (Redisson's way: INCRBY, then PUBLISH the
  -- count) wakes the waiter long before its 10 s wait
  os.execute(string.format("(sleep 0.3; redis-cli -u %s INCRBY '%s' 1 >/dev/null; " ..
    "redis-cli -u %s PUBLISH 'redisson_sc:{%s}' 1 >/dev/null) &", URL, n, URL, n))
  local t0 = now_ms()
  assert(s:acquire(1, 10))
  assert(now_ms() - t0 < 3000, "woken by the message")
  assert(s:release(3))
  eq(s:drain(), 3, "drained")
  assert(s:add_permits(2) and s:set_permits(4))
  eq(s:available(), 4, "set")
  raises(function() s:acquire(0, 0) end)
  raises(function() s:acquire(-1, 0) end)
  raises(function() s:acquire(2 ^ 31, 0) end)
  raises(function() s:acquire(1, -1) end)
  raises(function() s:release(0) end)
  raises(function() s:try_set_permits(0) end)
  eq(s:delete(), true, "deleted")
  assert(s:close())
  ok, err = s:available()
  prefix(err, "closed")

  local p = c:permit_semaphore(n .. ":p")
  assert(p:try_set_permits(1))
  local id = assert(p:acquire(0, 0.2))
  eq(#id, 32, "permit id")
  local v = assert(c:inspect(n .. ":p"))
  eq(v.kind, "permit-semaphore"); eq(v.count, 0); eq(v.permits_taken, 1); eq(#v.permits, 1)
  eq(v.permits[1].id, id, "inspect: the permit's id")
  -- a 0.2 s lease (it may have ended on a loaded machine: given back at the next use)
  assert(v.permits[1].lease_in <= 0.2 and v.permits[1].lease_end_ms > v.server_time_ms - 60000,
         tostring(v.permits[1].lease_in))
  ok, err = p:acquire(0)
  prefix(err, "timeout")
  local id2 = assert(p:acquire(3, 10), "the lease ends, the waiter gets it")
  ok, err = p:release(id)
  prefix(err, "not owner")
  assert(p:release(id2))
  ok, err = p:release("zz")
  prefix(err, "invalid argument")
  eq(p:available(), 1, "one free")
  assert(p:delete())

  local l = c:latch(n .. ":l")
  assert(l:await(0), "no latch: open")
  eq(l:try_set_count(2), true)
  eq(l:count(), 2)
  local lv = assert(c:inspect(n .. ":l"))
  eq(lv.kind, "count", "inspect: a latch"); eq(lv.count, 2); eq(#lv.permits, 0)
  ok, err = l:await(0.05)
  prefix(err, "timeout")
  eq(l:count_down(), 1)
  os.execute(string.format("(sleep 0.3; redis-cli -u %s DEL '%s' >/dev/null; " ..
    "redis-cli -u %s PUBLISH 'redisson_countdownlatch__channel__{%s}' 0 >/dev/null) &",
    URL, n .. ":l", URL, n .. ":l"))
  t0 = now_ms()
  assert(l:await(10))
  assert(now_ms() - t0 < 3000, "woken by the zero message")
  eq(l:count_down(), 0, "no latch")
  raises(function() l:try_set_count(0) end)
  assert(l:close())
end)

test("wrong type", function()
  local n = name("wrongtype")
  assert(os.execute(string.format("redis-cli -u %s SET '%s' plain >/dev/null", URL, n)))
  local lk = c:lock(n)
  local ok, err = lk:acquire(0, 5)
  eq(ok, nil, "acquire over a string key")
  prefix(err, "wrong type")
  eq(lk:locked(), true, "the string is still there")
end)

test("wait wakes on the unlock message from another process", function()
  local n = name("wake")
  local cmd = string.format("%s %s hold %s %s 30 300", T.INTERP, WORKER, URL, n)
  local p = assert(io.popen(cmd, "r"))
  eq(p:read("*l"), "held", "worker took the lock")
  local lk = c:lock(n)
  local t0 = now_ms()
  assert(lk:acquire(20, 10))
  local dt = now_ms() - t0
  eq(p:read("*l"), "released", "worker released")
  p:close()
  -- lease 30 s: only the unlock message explains a wake-up this early
  assert(dt >= 150 and dt < 5000, "woke after " .. dt .. " ms")
  eq(lk:held(), true, "held")
  assert(lk:release())
end)

test("Ctrl-C (SIGINT) interrupts a waiting acquire; nothing held or queued", function()
  -- the interpreter's SIGINT handler sets a hook; the waiting acquire sees it,
  -- cancels through the C API and returns, and the hook stops the script
  local n = name("sigint")
  local lk = c:fair_lock(n)
  assert(lk:acquire(0, 30))
  local cmd = string.format("sh -c 'echo $$; exec %s %s wait %s %s 20 0 fair' 2>&1",
                            T.INTERP, WORKER, URL, n)
  local p = assert(io.popen(cmd, "r"))
  local pid = assert(tonumber(p:read("*l")), "worker pid")
  eq(p:read("*l"), "waiting", "worker waits")
  local function queued()
    local q = assert(io.popen(string.format("redis-cli -u %s LLEN 'redisson_lock_queue:{%s}'",
                                            URL, n)))
    local v = tonumber(q:read("*l"))
    q:close()
    return v
  end
  assert(wait_until(function() return queued() == 1 end, 5000), "worker in the fair queue")
  local t0 = now_ms()
  assert(os.execute("kill -INT " .. pid))
  local out = p:read("*a")
  local dt = now_ms() - t0
  p:close()
  assert(out:find("interrupted"), "worker output: " .. out)
  assert(not out:find("acquired"), "worker output: " .. out)
  assert(dt < 2000, "the wait ended " .. dt .. " ms after SIGINT (20 s wait)")
  eq(queued(), 0, "left the fair queue")
  eq(lk:held(), true, "still held here")
  eq(lk:hold_count(), 1, "one hold")
  assert(lk:release())
  eq(lk:locked(), false, "free")
end)

test("contention between processes: exact non-atomic counter", function()
  T.exact_counter(c, URL, name("counter"), { tmp = TMP, worker = WORKER }, 4, 50)
end)

test("c:stats(): exact counters after a scripted sequence", function()
  -- 2 grants, 1 timeout, 1 try (busy), 1 cancel (SIGINT), 1 hold removed by
  -- a force unlock, 1 hold reported in doubt while the server is stopped
  -- (SIGSTOP)
  local cs = assert(hilock.connect(URL, { watchdog_lease = 1.5, command_timeout = 0.5 }))
  local s0 = assert(cs:stats())
  eq(s0.version, 1, "version")
  eq(s0.kinds.reentrant.granted, 0, "nothing yet")
  eq(#s0.kinds.fair.wait_ms, 24, "24 wait buckets")
  local nb, nd = name("stats-b"), name("stats-d")
  local b, other = cs:lock(nb), c:lock(nb, 99)
  assert(other:acquire(0, 60))
  local r, e = b:acquire(0.1)
  eq(r, nil, "timed out")
  prefix(e, "timeout")
  r, e = b:acquire(0)
  eq(r, nil, "busy")
  prefix(e, "timeout")
  -- 1 cancel: Ctrl-C (SIGINT to this interpreter, sent by a background
  -- shell once the waiter listens on the lock's channel) ends the wait; the
  -- interpreter's hook then raises "interrupted!", caught here
  os.execute(string.format("(i=0; until [ \"$(redis-cli -u %s PUBSUB NUMSUB "
    .. "'redisson_lock__channel:{%s}' | tail -1)\" -ge 1 ] || [ $i -ge 1000 ]; do sleep 0.01; "
    .. "i=$((i+1)); done; kill -INT $PPID) >/dev/null 2>&1 &", URL, nb))
  local function nop() end
  local okc, rc = pcall(function()
    local got = b:acquire(20)
    for _ = 1, 1000 do nop() end -- the hook's error comes here (LuaJIT: at a call)
    return got
  end)
  assert(not (okc and rc), "the interrupted wait acquired")
  assert(other:release())
  assert(b:acquire(0)) -- grant 1 (watchdog), then removed by someone else
  assert(c:lock(nb, 98):force_unlock())
  assert(wait_until(function() return cs:stats().kinds.reentrant.lost_gone == 1 end, 6000),
         "loss counted")
  local d = cs:lock(nd)
  assert(d:acquire(0)) -- grant 2 (watchdog), then the server stops
  local info = assert(io.popen(string.format("redis-cli -u %s INFO server", URL)))
  local pid = assert(info:read("*a"):match("process_id:(%d+)"), "server pid")
  info:close()
  assert(os.execute("kill -STOP " .. pid))
  local ok, s = pcall(function()
    assert(wait_until(function() return cs:stats().kinds.reentrant.lost_in_doubt == 1 end, 6000),
           "in-doubt report counted")
    return cs:stats()
  end)
  os.execute("kill -CONT " .. pid)
  assert(ok, s)
  local k = s.kinds.reentrant
  eq(k.granted, 2, "granted"); eq(k.timed_out, 1, "timed_out"); eq(k.busy, 1, "busy")
  eq(k.cancelled, 1, "cancelled")
  eq(k.granted_first_try, 2, "first try"); eq(k.granted_woken + k.granted_retried, 0, "waited")
  eq(k.lost_gone, 1, "lost_gone"); eq(k.lost_expired, 0, "lost_expired")
  eq(k.lost_in_doubt, 1, "lost_in_doubt")
  local waits, holds, late = 0, 0, 0
  for i = 1, 24 do
    waits, holds = waits + k.wait_ms[i], holds + k.hold_ms[i]
    if i >= 8 then late = late + k.wait_ms[i] end
  end
  eq(waits, 4, "acquire calls timed (busy is not)"); eq(holds, 2, "holds ended")
  assert(late >= 1, "the 100 ms timeout: from 64 ms")
  eq(s.settles + s.redirects + s.replica_ack_failures, 0, "settles, redirects, acks")
  assert(s.renewal_commands >= 1, "renewals sent")
  for _, kind in ipairs({ "fair", "read", "write", "fenced" }) do
    eq(s.kinds[kind].granted + s.kinds[kind].timed_out, 0, kind)
  end
  cs:close()
  local none, err = cs:stats()
  eq(none, nil, "closed client")
  prefix(err, "closed")
end)

test("c:stats{by_name = true}: two names tracked, the third in the other entry", function()
  -- stats_names = 2: on a a busy try, a timeout, a grant and its release;
  -- on b a grant lost to a force unlock; on the third name a timeout, a
  -- grant and its release, counted in the reentrant kind's other entry
  local cs = assert(hilock.connect(URL, { stats_names = 2, watchdog_lease = 1.5 }))
  raises(function() c:stats({ by_name = true }) end, "stats_names")
  raises(function() hilock.connect(URL, { stats_names = -1 }) end)
  raises(function() hilock.connect(URL, { stats_names = 65537 }) end)
  eq(#assert(cs:stats({ by_name = true })).names, 0, "nothing counted yet")
  local na, nb, nc = name("pn-a"), name("pn-b"), name("pn-c")
  local a, b, x = cs:lock(na), cs:lock(nb), cs:lock(nc)
  local holder = c:lock(na, 99)
  assert(holder:acquire(0, 60))
  eq(a:acquire(0), nil, "busy")
  eq(a:acquire(0.05), nil, "timed out") -- its first try is not one of ours
  assert(holder:release())
  assert(a:acquire(0, 60)); assert(a:release())
  assert(b:acquire(0)) -- watchdog; removed by a force unlock
  assert(c:lock(nb, 98):force_unlock())
  assert(wait_until(function() return cs:stats().kinds.reentrant.lost_gone == 1 end, 6000),
         "loss counted")
  holder = c:lock(nc, 99)
  assert(holder:acquire(0, 60))
  eq(x:acquire(0.05), nil, "timed out")
  assert(holder:release())
  assert(x:acquire(0, 60)); assert(x:release())
  local s = assert(cs:stats({ by_name = true }))
  local names = s.names
  eq(#names, 3, "two pairs and the other entry")
  eq(names[1].name, na, "first counted"); eq(names[2].name, nb, "second")
  eq(names[3].name, nil, "other: no name"); eq(names[3].other, true, "other")
  local function sum(t) local n = 0 for i = 1, 24 do n = n + t[i] end return n end
  local function figures(e)
    return table.concat({ e.kind, e.granted, e.granted_first_try, e.busy, e.timed_out,
      e.cancelled, sum(e.wait_ms), sum(e.hold_ms), e.lost_gone, e.lost_expired,
      e.lost_in_doubt }, " ")
  end
  eq(figures(names[1]), "reentrant 1 1 1 1 0 2 1 0 0 0", "a")
  eq(figures(names[2]), "reentrant 1 1 0 0 0 1 1 1 0 0", "b")
  eq(figures(names[3]), "reentrant 1 1 0 1 0 2 1 0 0 0", "other")
  local k = s.kinds.reentrant
  for _, f in ipairs({ "granted", "busy", "timed_out", "lost_gone" }) do
    eq(k[f], names[1][f] + names[2][f] + names[3][f], "kind total " .. f)
  end
  eq(sum(k.hold_ms), 3, "holds")
  eq(s.names and cs:stats().names, nil, "names only with by_name")
  cs:close()
end)

test("closed client and handles", function()
  local cc = assert(hilock.connect(URL))
  local lk = cc:lock(name("closed"))
  assert(cc:close())
  assert(cc:close()) -- idempotent
  eq(cc:closed(), true, "closed")
  local ok, err = lk:acquire(0)
  eq(ok, nil, "acquire on closed client")
  prefix(err, "closed")
  ok, err = cc:lock("x")
  prefix(err, "closed")
  lk:close()
  lk:close()
  ok, err = lk:held()
  prefix(err, "closed")
end)

test("lock keeps its client alive; gc is safe", function()
  local lk = assert(hilock.connect(URL)):lock(name("gc"))
  collectgarbage()
  collectgarbage()
  assert(lk:acquire(0, 5)) -- client still usable through the lock
  assert(lk:release())
  lk = nil
  for _ = 1, 50 do
    local x = assert(hilock.connect(URL))
    x:lock(name("gc"))
  end
  collectgarbage()
  collectgarbage()
end)

test("close releases the holds taken through the handle", function()
  local n = name("closeh")
  local lk = c:lock(n)
  assert(lk:acquire(0, 10))
  assert(lk:acquire(0, 10))
  lk:close()
  eq(c:lock(n):locked(), false, "released by close")
end)

if _VERSION == "Lua 5.4" and type(jit) ~= "table" then
  test("<close> releases at scope exit (5.4)", function()
    local n = name("tbc")
    local chunk = assert(load([[
      local c, n = ...
      do
        local lk <close> = c:lock(n)
        assert(lk:acquire(0, 10))
        assert(c:lock(n):locked())
      end
      assert(not c:lock(n):locked(), "released at scope exit")
      -- also when the scope is left by an error
      local ok = pcall(function()
        local lk <close> = c:lock(n)
        assert(lk:acquire(0, 10))
        error("boom")
      end)
      assert(not ok)
      assert(not c:lock(n):locked(), "released on error")
      -- a client as a to-be-closed variable
      do
        local cc <close> = assert(require("hilock").connect(os.getenv("REDIS_URL")))
      end
    ]]))
    chunk(c, n)
  end)
end

test("proto: commands, reader, decoders", function()
  eq(proto.command("SET", "k", 12), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n12\r\n", "RESP")
  local p = proto.lock("a{b}")
  eq(p:channel(), "redisson_lock__channel:a{b}", "braced channel")
  eq(proto.lock("ab"):channel(), "redisson_lock__channel:{ab}", "channel")
  local rd = proto.reader()
  rd:feed("*2\r\n:1\r\n:")
  eq(rd:get(), nil, "incomplete")
  rd:feed("3\r\n")
  local r = assert(rd:get())
  local ok, holds = proto.decode_acquire(r)
  eq(ok, true, "acquired")
  eq(holds, 3, "hold count")
  rd:feed("-NOSCRIPT No matching script\r\n")
  local gerr, is_error
  r, gerr, is_error = rd:get()
  eq(r:is_noscript(), true, "noscript")
  eq(gerr, nil, "no stream error"); eq(is_error, true, "get says: an error reply")
  r, gerr, is_error = rd:feed_get(":5\r\n")
  eq(r:value(), 5, "feed_get"); eq(is_error, false, "not an error reply")
  eq(rd:feed_get(":"), nil, "feed_get: incomplete")
  eq(rd:feed_get("6\r\n"):value(), 6, "feed_get: completed")
  rd:feed("*3\r\n$7\r\nmessage\r\n$5\r\nchan1\r\n$1\r\n0\r\n")
  local typ, ch, payload = proto.decode_pubsub(rd:get())
  eq(typ, "message", "message")
  eq(ch, "chan1", "channel")
  eq(payload, 0, "payload")
  rd:feed("*3\r\n$7\r\nmessage\r\n$5\r\nchan1\r\n$3\r\nxyz\r\n")
  typ, ch, payload = proto.decode_pubsub(rd:get())
  eq(payload, -1, "junk payload ignored")
  rd:feed("!bogus\r\n")
  local r2, err = rd:get()
  eq(r2, nil, "bad stream")
  prefix(err, "protocol")
  local m = p:acquire(proto.owner(proto.uuid(), 1), 0, 1000, 300000)
  local act, bytes = m:next()
  eq(act, "send", "first action")
  assert(bytes:find("EVALSHA"), "evalsha")
  m:free()
  -- a long command leaves the stack buffer for a Lua buffer: same RESP
  local long = string.rep("x", 5000)
  eq(proto.command("SET", long, 7), "*3\r\n$3\r\nSET\r\n$5000\r\n" .. long .. "\r\n$1\r\n7\r\n",
     "long RESP")
end)

test("proto: acquire and release machines start again (m:restart)", function()
  local p = proto.lock("rs{x}")
  local o1, o2 = proto.owner(proto.uuid(), 1), proto.owner(proto.uuid(), 2)
  local m = p:acquire(o1, 0, 1000, 300000)
  local _, b1 = m:next()
  local rd = proto.reader()
  rd:feed("*2\r\n:1\r\n:1\r\n")
  m:on_reply(rd:get())
  local act, ok = m:next()
  eq(act, "done", "granted"); eq(ok, true, "granted")
  eq(m:restart(o2, 0, 2000, 300000), m, "restart answers the machine")
  local act2, b2 = m:next()
  eq(act2, "send", "sends again")
  assert(b2:find(o2, 1, true) and not b2:find(o1, 1, true), "the new owner")
  assert(b2:find("2000", 1, true) and b1:find("1000", 1, true), "the new lease")
  eq(m:restart(o1, 0, 1000, 300000):next(), "send", "after a send, again")
  raises(function() m:restart("", 0, 1000, 300000) end)
  eq(m:restart(o1, 0, 1000, 300000):next(), "send", "usable after a refused restart")
  m:free()
  eq(m:restart(o1, 0, 1000, 300000):next(), "send", "a freed machine starts again")
  -- the acquire latch: "<prefix>:<owner>:<epoch>:<seq>" and its lifetime
  m:restart(o1, 0, 1000, 300000)
  m:latch(3, 7, 5000)
  local _, bl = m:next()
  assert(bl:find(":" .. o1 .. ":3:7", 1, true) and bl:find("5000", 1, true), "latched attempt")
  assert(not b1:find(":" .. o1 .. ":3:7", 1, true), "no latch before")
  raises(function() m:latch(-1, 7, 5000) end)
  eq(proto.acquire_latch_ttl(1000, 1000), 5000, "the engine's latch lifetime")
  -- a plain semaphore's request latch: the key "<prefix>:<owner>:<epoch>",
  -- its seq and lifetime; a lost try is settled through it
  local sp = proto.sem("sl", "semaphore")
  local _, pb = sp:wait(2, 0):next()
  assert(not pb:find("hilock_sem_latch", 1, true), "no latch unless asked")
  local sw = sp:wait(2, 0, nil, "u:9", 3, 7, 5000)
  local _, sb = sw:next()
  assert(sb:find("hilock_sem_latch:{sl}:u:9:3", 1, true) and sb:find("5000", 1, true),
         "latched try")
  sw:on_reply_lost("connection: reset")
  local sact, ssb = sw:next()
  eq(sact, "send", "a lost try is settled")
  assert(ssb ~= sb and ssb:find("hilock_sem_latch:{sl}:u:9:3", 1, true), "the settle, latched")
  sw:free()
  raises(function() sp:wait(2, 0, nil, "u:9", -1, 7, 5000) end)
  raises(function() sp:wait(2, 0, nil, "u:9", 3, 7, 0) end)
  -- renewals of many holds in one script call, one outcome per hold
  local q = proto.lock("rs{y}")
  local many = proto.renew_many_cmd({ p, q }, { o1, o2 }, 30000)
  assert(many:find("EVALSHA", 1, true) and many:find(o1, 1, true) and many:find(o2, 1, true),
         "both holds in one call")
  assert(proto.renew_many_cmd({ p, q }, { o1, o2 }, 30000, true):find("EVAL\r\n", 1, true), "eval")
  raises(function() proto.renew_many_cmd({ p }, { o1, o2 }, 30000) end)
  raises(function() proto.renew_many_cmd({}, {}, 30000) end)
  raises(function() proto.renew_many_cmd({ proto.lock("rw", "read") }, { o1 }, 30000) end)
  rd:feed("*2\r\n:1\r\n:0\r\n")
  local outs, per_hold = proto.renew_outcomes(rd:get(), 2)
  eq(outs[1], "renewed"); eq(outs[2], "lost"); eq(per_hold, true, "per hold")
  rd:feed("-NOSCRIPT x\r\n")
  outs, per_hold = proto.renew_outcomes(rd:get(), 2)
  eq(outs[1], "send_body"); eq(outs[2], "send_body"); eq(per_hold, false, "one answer for all")
  rd:feed("*1\r\n:1\r\n")
  outs = proto.renew_outcomes(rd:get(), 2)
  eq(outs[1], "trouble", "a short answer is trouble for all"); eq(outs[2], "trouble")
  m:restart(o1, 0, 1000, 300000)
  local _, bn = m:next()
  assert(not bn:find(":3:7", 1, true), "a restart forgets the latch")
  local r = p:release(o1, 0, 30000, "id:e0:1", 1000)
  local a1, c1 = r:next()
  eq(a1, "send", "release sends")
  rd:feed(":1\r\n")
  r:on_reply(rd:get())
  eq(r:next(), "done", "released")
  eq(r:restart(o2, 0, 30000, "id:e0:2", 1000), r, "restart answers the machine")
  local a2, c2 = r:next()
  eq(a2, "send", "sends again")
  assert(c2:find(o2, 1, true) and c1:find(o1, 1, true), "the new owner")
  rd:feed("-ERR no\r\n")
  r:on_reply(rd:get())
  local a3, ok3, err3 = r:next()
  eq(a3, "done"); eq(ok3, nil); prefix(err3, "protocol")
  r:restart(o1, 0, 30000, "id:e0:3", 1000)
  rd:feed(":1\r\n")
  eq(r:next(), "send", "the refusal is forgotten")
  r:on_reply(rd:get())
  local a4, ok4 = r:next()
  eq(a4, "done"); eq(ok4, true, "released after a restart")
  raises(function() r:restart(o1, 0, 30000, "", 1000) end)
end)

test("TLS: rediss:// with a CA, wrong CA, skip-verify, bad options", function()
  local turl, ca = assert(os.getenv("TLS_URL")), assert(os.getenv("TLS_CA"))
  local tc = assert(hilock.connect(turl, { tls_ca_file = ca, connect_timeout = 1 }))
  local lk = tc:lock(name("tls"))
  assert(lk:acquire(0, 10))
  eq(lk:held(), true, "held over TLS")
  assert(lk:release())
  tc:close()
  local other = ca:gsub("ca%.crt$", "other-ca.crt")
  local bad, err = hilock.connect(turl, { tls_ca_file = other, connect_timeout = 1 })
  eq(bad, nil); prefix(err, "tls")
  assert(err:find("certificate"), err)
  bad, err = hilock.connect(turl .. "?tls_ca_file=" .. ca, { tls_server_name = "redis.example.org" })
  eq(bad, nil); prefix(err, "tls")
  local ok = assert(hilock.connect(turl, { tls_ca_file = other, tls_insecure = true }))
  ok:close()
  raises(function() hilock.connect(turl, { tls_ca_file = 42 }) end, "tls_ca_file")
  raises(function() hilock.connect(turl, { tls = "yes" }) end, "tls")
  -- TLS settings with a plain URL are refused
  raises(function() hilock.connect(URL, { tls_ca_file = ca }) end)
end)

test("proto.parse_url: the engine's URL parser", function()
  local u = assert(proto.parse_url("rediss://u%40x:p%40ss%25word@h.example:7000/3"
                                   .. "?tls_ca_file=%2Fa%20b%2Fca.pem&connect_timeout_ms=250"))
  eq(u.mode, "single"); eq(u.tls, true); eq(u.host, "h.example"); eq(u.port, 7000)
  eq(u.user, "u@x"); eq(u.password, "p@ss%word"); eq(u.db, 3)
  eq(u.tls_ca_file, "/a b/ca.pem"); eq(u.connect_timeout_ms, 250); eq(u.tls_insecure, false)
  u = assert(proto.parse_url("redis://alice@h"))
  eq(u.user, "alice"); eq(u.password, ""); eq(u.port, 6379); eq(u.tls, false)
  u = assert(proto.parse_url("unix://bob:pw@/tmp/r%20s.sock?db=2"))
  eq(u.mode, "unix"); eq(u.path, "/tmp/r s.sock"); eq(u.user, "bob"); eq(u.db, 2)
  eq(u.host, nil)
  u = assert(proto.parse_url("rediss+sentinel://s1,s2:5000/mm/1?sentinel_password=sp"))
  eq(u.mode, "sentinel"); eq(#u.seeds, 2); eq(u.seeds[1].port, 26379); eq(u.seeds[2].host, "s2")
  eq(u.master_name, "mm"); eq(u.db, 1); eq(u.sentinel_password, "sp")
  u = assert(proto.parse_url("redis+cluster://a:1,b"))
  eq(u.mode, "cluster"); eq(u.seeds[2].port, 6379)
  local bad, err = proto.parse_url("redis://h?bogus=1")
  eq(bad, nil); prefix(err, "invalid argument")
  bad, err = proto.parse_url("http://h")
  eq(bad, nil); prefix(err, "invalid argument")
  raises(function() proto.parse_url() end)
end)

test("proto.handshake_cmds / handshake_reply: the connection handshake", function()
  eq(#proto.handshake_cmds(), 0, "nothing to say")
  eq(#proto.handshake_cmds("alice"), 0, "a user alone")
  local hs = proto.handshake_cmds("alice", "pw", 2)
  eq(#hs, 2, "AUTH and SELECT")
  eq(hs[1], proto.command("AUTH", "alice", "pw"), "AUTH user password")
  eq(hs[2], proto.command("SELECT", 2), "SELECT db")
  eq(proto.handshake_cmds(nil, "pw")[1], proto.command("AUTH", "pw"), "AUTH password")
  raises(function() proto.handshake_cmds(nil, nil, -1) end)
  local rd = proto.reader()
  rd:feed("+OK\r\n-WRONGPASS invalid username-password pair\r\n:1\r\n")
  eq(proto.handshake_reply(rd:get()), true, "accepted")
  local ok, why = proto.handshake_reply(rd:get())
  eq(ok, nil); prefix(why, "WRONGPASS")
  ok, why = proto.handshake_reply(rd:get())
  eq(ok, nil); eq(why, "unexpected reply")
end)

T.run(VERSION, function() c:close() end)
