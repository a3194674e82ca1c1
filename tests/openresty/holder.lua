-- Holds a lock through the blocking C core (plain Lua, hilock C module) for
-- tests/openresty/run.sh:
--   lua5.4 holder.lua <url> <name> <lease-seconds> <hold-ms> [fair]
-- prints "held" once it has the lock, keeps it hold-ms, releases, prints
-- "released". Replica acknowledgement is off: the cluster under test has no
-- replicas, and WAIT would only add its timeout.
local hilock = require "hilock"
local now_ms = hilock.proto.now_ms
local url, name, lease, hold_ms, kind = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4]), arg[5]

local c = assert(hilock.connect(url, { replica_ack = false }))
local lk = kind == "fair" and c:fair_lock(name) or c:lock(name)
assert(lk:acquire(10, lease))
io.write("held\n")
io.stdout:flush()
local t0 = now_ms()
os.execute(string.format("sleep %.3f", hold_ms / 1000))
while now_ms() - t0 < hold_ms do end
assert(lk:release())
io.write("released\n")
io.stdout:flush()
c:close()
