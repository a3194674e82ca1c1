-- The part of the conformance agent shared by the plain Lua agent
-- (agent.lua) and the OpenResty agent (agent_resty.lua): both modules have
-- the same lock methods and error strings. Line protocol: see
-- tests/conformance/README.md.
local _M = {}

-- "key=value" option words (milliseconds, as agent.c takes them) -> the
-- options table of hilock.connect / resty.hilock.new (seconds).
function _M.options(words)
  local opts = {}
  for _, kv in ipairs(words) do
    local k, v = kv:match("^([%w_]+)=(%-?%d+)$")
    v = tonumber(v)
    if k == "replica_ack" then
      opts.replica_ack = v ~= 0
    elseif k and k:find("_ms$") then
      opts[k:sub(1, -4)] = v / 1000 -- both modules reject an unknown name
    else
      error("bad option " .. tostring(kv))
    end
  end
  return opts
end

-- The conformance error kinds, from the modules' stable error prefixes.
local KINDS = {
  { "^timeout", "timeout" }, { "^not owner", "notowner" }, { "^lost", "lost" },
  { "^connection", "connection" }, { "^auth", "auth" }, { "^wrong type", "wrongtype" },
  { "^protocol", "protocol" }, { "^closed", "closed" }, { "^out of memory", "nomem" },
  { "^invalid argument", "invalid" }, { "^not acknowledged", "unacked" },
}

function _M.failure(err)
  err = tostring(err):gsub("[\r\n]", " ")
  for _, k in ipairs(KINDS) do
    if err:find(k[1]) then return "err " .. k[2] .. " " .. err end
  end
  return "err other " .. err
end
local failure = _M.failure

local function b(v) return v and "ok 1" or "ok 0" end
local b2 = b

-- w = { ACTOR, CMD, KIND, NAME, ARGS... }; lock_of(kind, name) -> lock handle.
-- Returns the answer without the actor name.
local KINDS_OK = { r = true, f = true, fenced = true, read = true, write = true }
local SEM_MAKE = { sem = "semaphore", pes = "permit_semaphore", latch = "latch" }

-- The handle of a request's KIND from a client (both modules' methods).
function _M.make(client, kind, name, tid)
  if SEM_MAKE[kind] then return client[SEM_MAKE[kind]](client, name) end
  if kind == "f" then return client:fair_lock(name, tid) end
  if kind == "fenced" then return client:fenced_lock(name, tid) end
  if kind == "read" then return client:read_lock(name, tid) end
  if kind == "write" then return client:write_lock(name, tid) end
  return client:lock(name, tid)
end

-- KIND sem | pes | latch (both modules have the same methods); the actor's
-- last permit id is kept in permits["<name> <actor>"].
local permits = {}

local function run_sem(lock_of, w)
  local cmd, kind = w[2], w[3]
  local s = lock_of(kind, w[4])
  local a, b, c = tonumber(w[5]), tonumber(w[6]), tonumber(w[7])
  local v, err
  if cmd == "setp" and a then
    if kind == "latch" then v, err = s:try_set_count(a) else v, err = s:try_set_permits(a) end
    if v == nil then return failure(err) end
    return b2(v)
  elseif cmd == "acquire" and c and kind ~= "latch" then
    local wait = b >= 0 and b / 1000 or nil
    if kind == "sem" then
      v, err = s:acquire(a, wait)
    else
      v, err = s:acquire(wait, c > 0 and c / 1000 or nil)
      if v then permits[w[4] .. " " .. w[1]] = v end
    end
    if v then return "ok 1" end
    if tostring(err):find("^timeout") then return "ok 0" end
    return failure(err)
  elseif cmd == "release" and kind ~= "latch" then
    if kind == "sem" then
      v, err = s:release(a)
    else
      v, err = s:release(permits[w[4] .. " " .. w[1]] or "")
    end
    if v then return "ok" end
    return failure(err)
  elseif cmd == "avail" then
    if kind == "latch" then v, err = s:count() else v, err = s:available() end
  elseif cmd == "countdown" and kind == "latch" then
    v, err = s:count_down()
  elseif cmd == "await" and kind == "latch" and a then
    v, err = s:await(a >= 0 and a / 1000 or nil)
    if v then return "ok 1" end
    if tostring(err):find("^timeout") then return "ok 0" end
    return failure(err)
  else
    return "err usage unknown command " .. tostring(cmd) .. " for " .. kind
  end
  if v == nil then return failure(err) end
  return string.format("ok %d", v)
end

local function run(lock_of, w)
  local cmd, kind = w[2], w[3]
  if SEM_MAKE[kind] then return run_sem(lock_of, w) end
  if not KINDS_OK[kind] then return "err usage kind must be r, f, fenced, read or write" end
  local lk = lock_of(kind, w[4])
  if cmd == "lock" and #w == 6 then
    local wait_ms, lease_ms = tonumber(w[5]), tonumber(w[6])
    local ok, err = lk:acquire_token(wait_ms >= 0 and wait_ms / 1000 or nil,
                                     lease_ms > 0 and lease_ms / 1000 or nil)
    if ok and kind == "fenced" then return string.format("ok 1 %d", ok) end
    if ok then return "ok 1" end
    if tostring(err):find("^timeout") then return "ok 0" end
    return failure(err)
  elseif cmd == "unlock" then
    local ok, err = lk:release()
    if ok then return "ok" end
    return failure(err)
  elseif cmd == "lost" then
    return b(lk:lost())
  end
  local v, err
  if cmd == "force" then v, err = lk:force_unlock()
  elseif cmd == "locked" then v, err = lk:locked()
  elseif cmd == "held" then v, err = lk:held()
  elseif cmd == "holds" then v, err = lk:hold_count()
  elseif cmd == "token" then v, err = lk:token()
  elseif cmd == "ttl" then v, err = lk:ttl()
  else return "err usage unknown command " .. tostring(cmd) end
  if v == nil then return failure(err) end
  if type(v) == "boolean" then return b(v) end
  if cmd == "ttl" and v >= 0 then v = math.floor(v * 1000 + 0.5) end
  return string.format("ok %d", v)
end

-- One request line -> its answer (without the actor name); never raises.
function _M.handle(lock_of, line)
  local w = {}
  for word in line:gmatch("%S+") do w[#w + 1] = word end
  if #w < 4 then return "err usage ACTOR CMD r|f|fenced|read|write NAME ..." end
  local ok, reply = pcall(run, lock_of, w)
  if not ok then
    -- the modules raise on a bad argument (docs/lua.md): the "invalid" kind
    if tostring(reply):find("bad argument", 1, true) then
      return "err invalid " .. (tostring(reply):gsub("[\r\n]", " "))
    end
    return (failure(reply):gsub("^err %S+", "err other"))
  end
  return reply
end

return _M
