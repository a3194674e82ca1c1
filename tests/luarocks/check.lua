-- Run by tests/luarocks/run.sh with the package paths `luarocks path` gives
-- for a fresh tree: the installed module is the one found, and it works.
-- arg[1] = the tree, arg[2] = a redis URL.
local tree, url = arg[1], arg[2]
local passed, failed = 0, 0
local function check(what, ok, detail)
  if ok then passed = passed + 1; print("  ok    " .. what)
  else failed = failed + 1; print("  FAIL  " .. what .. (detail and (": " .. tostring(detail)) or "")) end
end
local function search(name, path) -- package.searchpath for Lua 5.1 too
  name = name:gsub("%.", "/")
  for tpl in path:gmatch("[^;]+") do
    local f = tpl:gsub("%?", name)
    local h = io.open(f, "r")
    if h then h:close(); return f end
  end
end
local so = search("hilock", package.cpath)
check("require 'hilock' resolves into the tree (" .. tostring(so) .. ")",
      so ~= nil and so:sub(1, #tree) == tree)
local lua_file = search("resty.hilock", package.path)
check("resty.hilock resolves into the tree (" .. tostring(lua_file) .. ")",
      lua_file ~= nil and lua_file:sub(1, #tree) == tree)

local ok, hilock = pcall(require, "hilock")
check("require 'hilock' (" .. (jit and jit.version or _VERSION) .. ")", ok, hilock)
if ok then
  local c, err = hilock.connect(url)
  check("connect", c ~= nil, err)
  if c then
    local name = "luarocks:" .. tostring(os.time()) .. ":" .. tostring(math.random(1e6))
    local a, b = c:lock(name, 1), c:lock(name, 2)
    check("acquire", a:acquire(0, 10) == true)
    local got, e = b:acquire(0, 10)
    check("a second owner gets \"timeout\"", got == nil and tostring(e):match("^timeout") ~= nil, e)
    check("release", a:release() == true)
    check("the second owner acquires then", b:acquire(0, 10) == true)
    b:release()
    c:close()
  end
end
print(string.format("luarocks check: %d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
