-- The plain hilock module, unchanged, on Redis Cluster and Sentinel URLs;
-- runs on Lua 5.1, LuaJIT and Lua 5.4. Started by run.sh, which creates the
-- servers. Env: CLUSTER_URL, CLUSTER_PORTS (every node, space separated),
-- SENTINEL_URL, SENT_MASTER_PORT, SENT_REPLICA_PORT, HL_TMP, HL_WORKER.
-- Lock data is read back with redis-cli (-c follows the cluster's MOVED).
local hilock = require "hilock"
local now_ms = hilock.proto.now_ms

local function env(k) return assert(os.getenv(k), k .. " not set") end
local CLUSTER_URL, SENTINEL_URL = env("CLUSTER_URL"), env("SENTINEL_URL")
local MASTER, REPLICA = env("SENT_MASTER_PORT"), env("SENT_REPLICA_PORT")
local TMP, WORKER = env("HL_TMP"), env("HL_WORKER")
local T = dofile((arg[0]:match("^(.*)/") or ".") .. "/testlib.lua")
local eq, test = T.eq, T.test
local name = T.namer("tt")
local PORTS = {}
for p in env("CLUSTER_PORTS"):gmatch("%d+") do PORTS[#PORTS + 1] = p end

-- One redis-cli command; its output without the trailing newline.
local function cli(args)
  local p = assert(io.popen("redis-cli " .. args .. " 2>&1", "r"))
  local out = p:read("*a")
  p:close()
  return (out:gsub("\n$", ""))
end

local function owner(c) return c:id() .. ":" .. hilock.thread_id() end

local cc = assert(hilock.connect(CLUSTER_URL))

local function masters()
  local ms = {}
  for _, p in ipairs(PORTS) do
    if cli("-p " .. p .. " ROLE"):match("^master") then ms[#ms + 1] = p end
  end
  eq(#ms, 3, "cluster masters")
  return ms
end

for _, kind in ipairs({ "lock", "fair_lock" }) do
  test("cluster: " .. kind .. " on names spread over every master", function()
    local ms, locks, names = masters(), {}, {}
    local base = name("spread")
    for i = 1, 30 do
      names[i] = base .. ":" .. i
      locks[i] = cc[kind](cc, names[i])
      assert(locks[i]:acquire(0, 20))
      eq(cli("-c -p " .. PORTS[1] .. " HGET " .. names[i] .. " " .. owner(cc)), "1", names[i])
    end
    local total = 0
    for _, p in ipairs(ms) do
      local here = 0
      for _ in cli("-p " .. p .. " --scan --pattern '" .. base .. ":*'"):gmatch("[^\n]+") do
        here = here + 1
      end
      assert(here > 0, "no lock on master " .. p)
      total = total + here
    end
    eq(total, 30, "locks found on the masters")
    for i = 1, 30 do
      assert(locks[i]:release())
      eq(locks[i]:locked(), false, "released")
      eq(cli("-c -p " .. PORTS[1] .. " EXISTS " .. names[i]), "0", "key gone")
    end
  end)

  test("cluster: " .. kind .. " waiter woken by another process's unlock", function()
    local n = name("wake")
    local fair = kind == "fair_lock" and " fair" or ""
    local p = assert(io.popen(string.format("%s %s hold %s %s 30 300%s", T.INTERP, WORKER,
                                            CLUSTER_URL, n, fair), "r"))
    eq(p:read("*l"), "held", "worker took the lock")
    local lk = cc[kind](cc, n)
    local t0 = now_ms()
    assert(lk:acquire(10, 10))
    local dt = now_ms() - t0
    eq(p:read("*l"), "released", "worker released")
    p:close()
    -- lease 30 s: only the unlock (SPUBLISH) explains a wake-up this early
    assert(dt >= 150 and dt < 2000, "woke after " .. dt .. " ms")
    eq(cli("-c -p " .. PORTS[1] .. " HGET " .. n .. " " .. owner(cc)), "1", "held on the cluster")
    assert(lk:release())
  end)
end

test("cluster: exact non-atomic counter between processes", function()
  T.exact_counter(cc, CLUSTER_URL, name("counter"), { tmp = TMP, worker = WORKER }, 3, 30)
end)

for _, kind in ipairs({ "lock", "fair_lock" }) do
  test("sentinel: " .. kind .. " through the sentinel URL, acknowledged by the replica", function()
    local c = assert(hilock.connect(SENTINEL_URL, { connect_timeout = 0.5 }))
    local n = name("sent")
    local lk = c[kind](c, n)
    assert(lk:acquire(0, 10))
    eq(cli("-p " .. MASTER .. " HGET " .. n .. " " .. owner(c)), "1", "on the master")
    -- replica acknowledgement is on for sentinel URLs: no polling needed
    eq(cli("-p " .. REPLICA .. " HGET " .. n .. " " .. owner(c)), "1", "on the replica")
    assert(lk:acquire(0, 10))
    eq(lk:hold_count(), 2, "re-entered")
    local other = c[kind](c, n, 4242)
    local ok, err = other:acquire(0)
    eq(ok, nil, "another owner")
    assert(err:find("^timeout"), err)
    assert(lk:release())
    assert(lk:release())
    eq(lk:locked(), false, "released")
    eq(cli("-p " .. REPLICA .. " EXISTS " .. n), "0", "gone on the replica")
    assert(c:close())
  end)
end

T.run(T.VERSION .. " topologies", function() cc:close() end)
