-- LuaRocks package of hilock: the C module `hilock` (blocking client and the
-- protocol layer) and the OpenResty driver `resty.hilock`.
--   luarocks --lua-version 5.4 make     (from the repository root: Lua 5.4)
--   luarocks --lua-version 5.1 make     (Lua 5.1; LuaJIT loads the same module)
-- Plain `luarocks make` builds for LuaRocks' default Lua (5.1 on Debian).
-- The module is built by the project's own CMake (target hilock_lua): it
-- folds in libhilock and hiredis (fetched by scripts/fetch-hiredis.sh, or the
-- system's with HILOCK_CMAKE_ARGS=-DHILOCK_SYSTEM_HIREDIS=ON) and exports only
-- luaopen_hilock. Needs cmake (>= 3.21), a C compiler and OpenSSL's headers.
rockspec_format = "3.0"
package = "hilock"
version = "0.1.0-1"
source = {
   url = "git+file://.",  -- `luarocks make` builds the checked-out tree
}
description = {
   summary = "Redis distributed locks (reentrant, fair, multi-lock, Redlock, watchdog) in Redisson's data layout",
   detailed = [[
hilock is one C implementation of Redis distributed locks -- reentrant lock,
fair (FIFO) lock, multi-lock, Redlock, and a watchdog that keeps a lock alive
while its holder lives -- sharing Redisson's data layout, so Lua, C, Python and
Java (Redisson) processes exclude each other on the same lock names. The C
module works in Lua 5.1, 5.4 and LuaJIT; resty.hilock drives the same engine
over OpenResty cosockets. Tested with Redis 7.0.
]],
   license = "MIT",
   labels = { "redis", "lock", "distributed", "redlock", "redisson", "openresty" },
}
dependencies = {
   "lua >= 5.1, < 5.5",
}
build = {
   type = "command",
   build_command = [[
set -e
v="$("$(LUA)" -e 'io.write((_VERSION:gsub("^Lua ", "")))')"
b="build/luarocks-$v"
cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DHILOCK_BUILD_TESTS=OFF \
  "-DHILOCK_LUA_VARIANTS=$v" "-DHILOCK_LUA_INCLUDE_$v=$(LUA_INCDIR)" \
  "-DCMAKE_C_COMPILER=$(CC)" $HILOCK_CMAKE_ARGS
cmake --build "$b" --target hilock_lua -j 2
mkdir -p build/luarocks-out && cp "$b/lua/$v/hilock.so" build/luarocks-out/hilock.so
]],
   install_command = "true",
   install = {
      lib = { hilock = "build/luarocks-out/hilock.so" },
      lua = { ["resty.hilock"] = "lua/resty/hilock.lua" },
   },
   copy_directories = { "docs" },
}
