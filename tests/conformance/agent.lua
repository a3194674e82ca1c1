-- Conformance agent for the plain Lua module (Lua 5.1, 5.4, LuaJIT).
--
-- Lua has no threads and every acquire blocks, so the orchestrator starts one
-- of these processes per actor: each actor is its own client and owner
-- "<client-id>:<os-thread-id>". Line protocol: see tests/conformance/README.md.
--
-- Usage: lua agent.lua URL [key=value ...]   (hilock.so on LUA_CPATH,
--        agent_lib.lua on LUA_PATH; the same keys as agent.c, in ms)
local hilock = require("hilock")
local lib = require("agent_lib")

local function say(who, text)
  io.stdout:write(who, " ", text, "\n")
  io.stdout:flush()
end

local words = {}
for i = 2, #arg do words[#words + 1] = arg[i] end
local client, cerr = hilock.connect(arg[1], lib.options(words))
if not client then
  say("agent", lib.failure(cerr))
  os.exit(1)
end

local locks = {}
local function lock_of(kind, name)
  local key = kind .. " " .. name
  if not locks[key] then
    locks[key] = assert(lib.make(client, kind, name))
  end
  return locks[key]
end

say("agent", "ok ready")
for line in io.lines() do
  local who = line:match("^%S+")
  if who == "quit" then break end
  if who then say(who, lib.handle(lock_of, line)) end
end
os.exit(0)
