-- Holds a lock through the blocking C core (plain Lua, hilock C module) for
-- tests/openresty/run.sh:
--   lua5.4 holder.lua <url> <name> <lease-seconds> <hold-ms> [fair|fenced|read|write]
-- prints "held <token>" once it has the lock (token: the fencing token of a
-- fenced lock, else 0), keeps it hold-ms, releases, prints "released <t_call>
-- <t_done>" (CLOCK_MONOTONIC ms around the release call). Replica acknowledgement is off: the cluster under test has no
-- replicas, and WAIT would only add its timeout.
local hilock = require "hilock"
local now_ms = hilock.proto.now_ms
local url, name, lease, hold_ms, kind = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4]), arg[5]

local c = assert(hilock.connect(url, { replica_ack = false }))
local lk
if kind == "fair" or kind == "fenced" or kind == "read" or kind == "write" then
  lk = assert(c[kind .. "_lock"](c, name))
else
  lk = assert(c:lock(name))
end
local token = assert(lk:acquire_token(10, lease))
io.write("held ", tostring(token), "\n")
io.stdout:flush()
local t0 = now_ms()
os.execute(string.format("sleep %.3f", hold_ms / 1000))
while now_ms() - t0 < hold_ms do end
local t_call = now_ms()
assert(lk:release())
io.write(string.format("released %d %d\n", t_call, now_ms())) -- monotonic ms (system-wide)
io.stdout:flush()
c:close()
