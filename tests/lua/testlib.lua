-- What tests/lua/test_hilock.lua and test_topologies.lua share: names,
-- checks, the test list and its runner, and the exact-counter test between
-- processes. Loaded with dofile from the same folder; runs on Lua 5.1,
-- LuaJIT and Lua 5.4.
local hilock = require "hilock"
local now_ms = hilock.proto.now_ms

local T = {}
T.now_ms = now_ms
T.INTERP = arg[-1]
T.VERSION = (type(jit) == "table" and jit.version) or _VERSION

local uniq, tests = 0, {}

-- A lock name no other test (nor run) uses: "<tag>:<version>:<prefix>:<n>:<ms>".
function T.namer(tag)
  return function(prefix)
    uniq = uniq + 1
    return string.format("%s:%s:%s:%d:%d", tag, T.VERSION:gsub("%s", ""), prefix, uniq, now_ms())
  end
end

function T.eq(a, b, what)
  if a ~= b then
    error(string.format("%s: expected %s, got %s", what or "value", tostring(b), tostring(a)), 2)
  end
end

function T.test(tname, f) tests[#tests + 1] = { tname, f } end

-- Run every test; print one line each and the summary; exit 0 when all passed.
function T.run(label, before_exit)
  local passed, failed = 0, 0
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
  if before_exit then before_exit() end
  print(string.format("%s: %d passed, %d failed", label, passed, failed))
  os.exit(failed == 0 and 0 or 1)
end

-- procs worker processes (worker.lua "count") each add 1 to a counter file
-- iters times under the lock n on url: the total must be exact.
function T.exact_counter(c, url, n, env, procs, iters)
  uniq = uniq + 1
  local path = string.format("%s/counter-%s-%d-%d", env.tmp, T.VERSION:gsub("%W", ""), uniq, now_ms())
  local f = assert(io.open(path, "w"))
  f:write("0")
  f:close()
  local ps = {}
  for i = 1, procs do
    ps[i] = assert(io.popen(string.format("%s %s count %s %s %s %d 2>&1", T.INTERP, env.worker,
                                          url, n, path, iters), "r"))
  end
  for i = 1, procs do
    local out = ps[i]:read("*a")
    ps[i]:close()
    assert(out:find("done"), "worker " .. i .. " failed: " .. out)
  end
  f = assert(io.open(path, "r"))
  local v = tonumber(f:read("*a"))
  f:close()
  T.eq(v, procs * iters, "counter")
  T.eq(c:lock(n):locked(), false, "left unlocked")
end

return T
