-- Uncontended acquire+release pairs through the Lua module (same loop as
-- c_pairs.c). Usage: luajit lua_pairs.lua <url> <pairs>. Prints "<pairs> <ms>".
local hilock = require "hilock"
local now_ms = hilock.proto.now_ms
local url, n = arg[1], tonumber(arg[2])
local c = assert(hilock.connect(url))
local lk = assert(c:lock("bench:lua"))
local t0 = now_ms()
for _ = 1, n do
  assert(lk:acquire(0, 10))
  assert(lk:release())
end
print(string.format("%d %.3f", n, now_ms() - t0))
c:close()
