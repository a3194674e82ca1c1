-- Helper process for tests/lua/test_hilock.lua and tests/openresty (run by
-- the same interpreter). Modes:
--   count <url> <name> <counter-file> <iterations>
--       lock, read the number in the file, write it + 1, unlock; repeat.
--   hold <url> <name> <lease-seconds> <hold-ms> [fair]
--       acquire with that lease, print "held", keep it hold-ms, release,
--       print "released". With "fair", a fair lock.
--   wait <url> <name> <wait-seconds> <unused> [fair]
--       print "waiting", then acquire with that wait (Ctrl-C / SIGINT
--       interrupts it: the interpreter's "interrupted!" ends the process),
--       then print "acquired" or the error, and release.
local hilock = require "hilock"
local now_ms = hilock.proto.now_ms
local mode, url, name = arg[1], arg[2], arg[3]

local function sleep_ms(ms)
  local t0 = now_ms()
  os.execute(string.format("sleep %.3f", ms / 1000))
  while now_ms() - t0 < ms do end
end

local c = assert(hilock.connect(url))
local lk = assert(arg[6] == "fair" and c:fair_lock(name) or c:lock(name))

if mode == "count" then
  local path, n = arg[4], tonumber(arg[5])
  for _ = 1, n do
    assert(lk:acquire(30, 10))
    local f = assert(io.open(path, "r"))
    local v = tonumber(f:read("*a")) or 0
    f:close()
    for _ = 1, 2000 do end -- widen the read-modify-write window a little
    f = assert(io.open(path, "w"))
    f:write(tostring(v + 1))
    f:close()
    assert(lk:release())
  end
  print("done")
elseif mode == "hold" then
  assert(lk:acquire(10, tonumber(arg[4])))
  io.write("held\n")
  io.stdout:flush()
  sleep_ms(tonumber(arg[5]))
  assert(lk:release())
  io.write("released\n")
  io.stdout:flush()
elseif mode == "wait" then
  io.write("waiting\n")
  io.stdout:flush()
  local ok, err = lk:acquire(tonumber(arg[4]), 10)
  io.write(ok and "acquired\n" or (tostring(err) .. "\n"))
  io.stdout:flush()
  if ok then lk:release() end
else
  error("unknown mode " .. tostring(mode))
end
c:close()
