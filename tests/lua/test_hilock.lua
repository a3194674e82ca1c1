-- Plain-Lua tests of the hilock module; runs unchanged on Lua 5.1, LuaJIT
-- and Lua 5.4. Env: REDIS_URL (a throwaway server), HL_TMP (a temp dir),
-- HL_WORKER (path of worker.lua). Exit status 0 = all passed.
local hilock = require "hilock"
local proto = hilock.proto
local now_ms = proto.now_ms

local URL = assert(os.getenv("REDIS_URL"), "REDIS_URL not set")
local TMP = assert(os.getenv("HL_TMP"), "HL_TMP not set")
local WORKER = assert(os.getenv("HL_WORKER"), "HL_WORKER not set")
local INTERP = arg[-1]
local VERSION = (type(jit) == "table" and jit.version) or _VERSION

local passed, failed = 0, 0
local uniq = 0

local function name(prefix)
  uniq = uniq + 1
  return string.format("t:%s:%s:%d:%d", VERSION:gsub("%s", ""), prefix, uniq, now_ms())
end

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

local function eq(a, b, what)
  if a ~= b then
    error(string.format("%s: expected %s, got %s", what or "value", tostring(b), tostring(a)), 2)
  end
end

local function prefix(err, p)
  assert(type(err) == "string" and err:sub(1, #p) == p,
         "expected error prefix '" .. p .. "', got " .. tostring(err))
end

local tests = {}
local function test(tname, f) tests[#tests + 1] = { tname, f } end

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
  eq(last, 6, "six grants")
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
  local cmd = string.format("%s %s hold %s %s 30 300", INTERP, WORKER, URL, n)
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

test("contention between processes: exact non-atomic counter", function()
  local n = name("counter")
  local path = TMP .. "/counter-" .. VERSION:gsub("%W", "") .. "-" .. uniq
  local f = assert(io.open(path, "w"))
  f:write("0")
  f:close()
  local procs, iters = 4, 50
  local ps = {}
  for i = 1, procs do
    ps[i] = assert(io.popen(string.format("%s %s count %s %s %s %d 2>&1", INTERP, WORKER,
                                          URL, n, path, iters), "r"))
  end
  for i = 1, procs do
    local out = ps[i]:read("*a")
    ps[i]:close()
    assert(out:find("done"), "worker " .. i .. " failed: " .. out)
  end
  f = assert(io.open(path, "r"))
  local v = tonumber(f:read("*a"))
  f:close()
  eq(v, procs * iters, "counter")
  eq(c:lock(n):locked(), false, "left unlocked")
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
    x:lock("gc:" .. uniq)
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
  r = rd:get()
  eq(r:is_noscript(), true, "noscript")
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

for _, t in ipairs(tests) do
  local t0 = now_ms()
  local ok, err = pcall(t[2])
  if ok then
    passed = passed + 1
    print(string.format("  ok    %-60s %5d ms", t[1], now_ms() - t0))
  else
    failed = failed + 1
    print(string.format("  FAIL  %s: %s", t[1], tostring(err)))
  end
end
c:close()
print(string.format("%s: %d passed, %d failed", VERSION, passed, failed))
os.exit(failed == 0 and 0 or 1)
