-- The hilock Lua side of the interoperability suite (Lua 5.1/5.4/LuaJIT).
--
-- Same line protocol as Agent.java, driver.c and driver.py, but Lua has no
-- threads: the harness starts one of these processes per actor, so each
-- actor is its own client and owner "<client-id>:<os-thread-id>".
-- Plain Lua has no sub-second clock, so timestamps are left to the harness:
-- "@" = when it received this answer (after an acquire: later than the real
-- moment, so hand-off times are over-, never under-estimated), "^" = when it
-- sent the request (before an unlock: earlier than the real moment).
--
-- KIND: r reentrant, f fair, R / W the read / write side of a read-write lock,
-- F fenced; flock NAME WAIT LEASE -> ok TOKEN|0 @, token NAME -> ok TOKEN.
--
-- Usage: lua driver.lua REDIS_URL WATCHDOG_LEASE_MS   (hilock.so on LUA_CPATH)
local hilock = require("hilock")

local url, watchdog_ms = arg[1], tonumber(arg[2])
local client = assert(hilock.connect(url, { watchdog_lease = watchdog_ms / 1000 }))
local locks = {}

local function say(who, text)
  io.stdout:write(who, " ", text, "\n")
  io.stdout:flush()
end

local function lock_of(kind, name)
  local key = kind .. " " .. name
  local lk = locks[key]
  if not lk then
    if kind == "r" then
      lk = assert(client:lock(name))
    elseif kind == "f" then
      lk = assert(client:fair_lock(name))
    elseif kind == "R" then
      lk = assert(client:read_lock(name))
    elseif kind == "W" then
      lk = assert(client:write_lock(name))
    elseif kind == "F" then
      lk = assert(client:fenced_lock(name))
    else
      error("kind must be r, f, R, W or F")
    end
    locks[key] = lk
  end
  return lk
end

local function b(v) return v and "1" or "0" end

-- (value) or (nil, err): the value, or raise err (false is a value).
local function must(v, err)
  if v == nil then error(err or "failed", 0) end
  return v
end

local sems = {}
local function sem_of(kind, name)
  local key = kind .. " " .. name
  if not sems[key] then
    sems[key] = assert(kind == "s" and client:semaphore(name)
                       or kind == "p" and client:permit_semaphore(name) or client:latch(name))
  end
  return sems[key]
end

local function secs(ms) return ms >= 0 and ms / 1000 or nil end

-- The semaphore / latch commands of Agent.java and driver.c; nil: not one.
local function run_sem(w)
  local cmd, name, a, b = w[2], w[3], tonumber(w[4]), tonumber(w[5])
  local v, err
  if cmd == "semset" then
    v, err = sem_of("s", name):try_set_permits(a)
    if v == nil then return "err " .. tostring(err) end
    return "ok " .. (v and "1" or "0")
  elseif cmd == "semacq" then
    v, err = sem_of("s", name):acquire(a, secs(b))
    if v then return "ok 1 @" end
    if err and err:find("^timeout") then return "ok 0 @" end
    return "err " .. tostring(err)
  elseif cmd == "semrel" then
    v, err = sem_of("s", name):release(a)
    if v then return "ok ^" end
    return "err " .. tostring(err)
  elseif cmd == "semavail" then
    return "ok " .. string.format("%d", must(sem_of("s", name):available()))
  elseif cmd == "pesacq" then
    v, err = sem_of("p", name):acquire(secs(a), b > 0 and b / 1000 or nil)
    if v then return "ok " .. v .. " @" end
    if err and err:find("^timeout") then return "ok - @" end
    return "err " .. tostring(err)
  elseif cmd == "pesrel" then
    v, err = sem_of("p", name):release(w[4])
    if v then return "ok 1" end
    if err and err:find("^not owner") then return "err notowner" end
    return "err " .. tostring(err)
  elseif cmd == "latchset" then
    v, err = sem_of("l", name):try_set_count(a)
    if v == nil then return "err " .. tostring(err) end
    return "ok " .. (v and "1" or "0")
  elseif cmd == "latchdown" then
    v, err = sem_of("l", name):count_down()
    if v == nil then return "err " .. tostring(err) end
    return "ok ^"
  elseif cmd == "latchawait" then
    v, err = sem_of("l", name):await(secs(a))
    if v then return "ok 1 @" end
    if err and err:find("^timeout") then return "ok 0 @" end
    return "err " .. tostring(err)
  elseif cmd == "latchcount" then
    return "ok " .. string.format("%d", must(sem_of("l", name):count()))
  end
  return nil
end

local function run(w)
  local cmd = w[2]
  if cmd:find("^sem") or cmd:find("^pes") or cmd:find("^latch") then
    local answer = run_sem(w)
    if answer then return answer end
  end
  if cmd == "id" then return "ok " .. client:id() end
  if cmd == "tid" then return "ok " .. tostring(hilock.thread_id()) end
  if cmd == "owner" then return "ok " .. client:id() .. ":" .. tostring(hilock.thread_id()) end
  if cmd == "flock" then
    local wait_ms, lease_ms = tonumber(w[4]), tonumber(w[5])
    local token, err = lock_of("F", w[3]):acquire_token(wait_ms >= 0 and wait_ms / 1000 or nil,
                                                        lease_ms > 0 and lease_ms / 1000 or nil)
    if token then return string.format("ok %d @", token) end
    if err and err:find("^timeout") then return "ok 0 @" end
    return "err " .. tostring(err)
  elseif cmd == "token" then
    return string.format("ok %d", must(lock_of("F", w[3]):token()))
  end
  local lk = lock_of(w[3], w[4])
  if cmd == "lock" then
    local wait_ms, lease_ms = tonumber(w[5]), tonumber(w[6])
    local wait = wait_ms >= 0 and wait_ms / 1000 or nil
    local lease = lease_ms > 0 and lease_ms / 1000 or nil
    local ok, err = lk:acquire(wait, lease)
    if ok then return "ok 1 @" end
    if err and err:find("^timeout") then return "ok 0 @" end
    return "err " .. tostring(err)
  elseif cmd == "unlock" then
    local ok, err = lk:release()
    if ok then return "ok ^" end
    if err and err:find("^not owner") then return "err notowner" end
    return "err " .. tostring(err)
  elseif cmd == "force" then
    local deleted, err = lk:force_unlock()
    if deleted == nil then return "err " .. tostring(err) end
    return "ok " .. b(deleted) .. " ^"
  elseif cmd == "islocked" then
    return "ok " .. b(must(lk:locked()))
  elseif cmd == "held" then
    return "ok " .. b(must(lk:held()))
  elseif cmd == "holds" then
    return "ok " .. string.format("%d", must(lk:hold_count()))
  elseif cmd == "lost" then
    return "ok " .. b(lk:lost())
  elseif cmd == "ttl" then
    local t = must(lk:ttl())
    if t < 0 then return "ok " .. string.format("%d", t) end
    return "ok " .. string.format("%d", math.floor(t * 1000 + 0.5))
  end
  return "err unknown command " .. tostring(cmd)
end

say("agent", "ok ready " .. client:id())
for line in io.lines() do
  local w = {}
  for word in line:gmatch("%S+") do w[#w + 1] = word end
  if w[1] == "quit" then break end
  if #w >= 2 then
    local ok, reply = pcall(run, w)
    if not ok then reply = "err " .. tostring(reply):gsub("\n", " ") end
    say(w[1], reply)
  end
end
os.exit(0)
