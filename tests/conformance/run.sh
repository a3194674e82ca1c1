#!/usr/bin/env bash
# Conformance suite: tests/conformance/scenarios/*.json, run by every driver
# (C blocking, C non-blocking on epoll, Python, plain Lua 5.1 / 5.4 / LuaJIT, OpenResty) through
# conformance.py, which starts and always stops its own servers and nginx.
# A driver that cannot be built or started is still listed: it fails every
# scenario, with the reason.
# Env: HILOCK_ROOT, HILOCK_BUILD (cmake build dir with libhilock and the Lua
#      modules), CONFORMANCE_K (run only scenarios whose id contains it).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${HILOCK_ROOT:-$(cd "$here/../.." && pwd)}"
build="${HILOCK_BUILD:-$root/build/release}"
out="$build/conformance"
mkdir -p "$out"
drivers=()

# C: the agent linked against the shared libhilock of the build tree.
lib="$build/libcore"
if [ ! -f "$lib/libhilock.so" ] && ! cmake --build "$build" --target hilock -j2 >"$out/c-build.log" 2>&1; then
  drivers+=(--driver "c=missing:cannot build libhilock (see $out/c-build.log)")
elif cc -std=c11 -O2 -Wall -Wextra -Werror -I"$root/libcore/include" -I"$root/tests/common" \
     "$here/agent.c" "$root/tests/common/line_agent.c" -o "$out/agent-c" -L"$lib" -lhilock -Wl,-rpath,"$lib" -lpthread >"$out/c-build.log" 2>&1; then
  drivers+=(--driver "c=threads:$out/agent-c")
else
  drivers+=(--driver "c=missing:cannot build agent.c (see $out/c-build.log)")
fi

# C, non-blocking: hilock_async on an epoll loop (one thread), same library.
if [ ! -f "$lib/libhilock.so" ]; then
  drivers+=(--driver "c-async=missing:cannot build libhilock (see $out/c-build.log)")
elif cc -std=c11 -O2 -Wall -Wextra -Werror -I"$root/libcore/include" -I"$root/tests/common" \
     "$here/agent_async.c" "$root/tests/common/line_agent.c" -o "$out/agent-c-async" -L"$lib" -lhilock \
     -Wl,-rpath,"$lib" -lpthread >"$out/c-async-build.log" 2>&1; then
  drivers+=(--driver "c-async=threads:$out/agent-c-async")
else
  drivers+=(--driver "c-async=missing:cannot build agent_async.c (see $out/c-async-build.log)")
fi

# Python: the package installed into the shared venv (tests/python/deps.sh).
venv="$root/build/venv"
if ! bash "$root/tests/python/deps.sh" >"$out/py-deps.log" 2>&1; then
  cat "$out/py-deps.log"; echo "conformance: the venv (tests/python/deps.sh) failed"
  echo "0 passed, 1 failed"; exit 1
fi
if bash "$root/tests/python/install.sh" >"$out/py-install.log" 2>&1; then
  drivers+=(--driver "python=threads:$venv/bin/python $here/agent.py")
  # the asyncio driver of the same package: actors are tasks of one loop
  drivers+=(--driver "asyncio=threads:$venv/bin/python $here/agent_aio.py")
else
  drivers+=(--driver "python=missing:the hilock package does not install/import (see $out/py-install.log)")
  drivers+=(--driver "asyncio=missing:the hilock package does not install/import (see $out/py-install.log)")
fi

# Plain Lua: one agent process per actor, under each interpreter.
for spec in 5.1:lua5.1:5.1 5.4:lua5.4:5.4 luajit:luajit:luajit; do
  IFS=: read -r label bin dir <<<"$spec"
  name="lua$label"; [ "$label" = luajit ] && name=luajit
  so="$build/lua/$dir/hilock.so"
  if ! command -v "$bin" >/dev/null; then
    drivers+=(--driver "$name=missing:$bin is not installed")
  elif [ ! -f "$so" ] && ! cmake --build "$build" --target hilock_lua -j2 >"$out/lua-build.log" 2>&1; then
    drivers+=(--driver "$name=missing:cannot build the Lua modules (see $out/lua-build.log)")
  else
    drivers+=(--driver "$name=process:env LUA_CPATH=$build/lua/$dir/?.so LUA_PATH=$here/?.lua $bin $here/agent.lua")
  fi
done

# OpenResty: Debian's nginx with the lua module, resty.hilock over the LuaJIT module.
if ! command -v nginx >/dev/null || [ ! -f /usr/lib/nginx/modules/ngx_http_lua_module.so ]; then
  drivers+=(--driver "openresty=missing:nginx with the lua module is not installed")
elif [ ! -f "$build/lua/luajit/hilock.so" ]; then
  drivers+=(--driver "openresty=missing:no LuaJIT hilock module in $build/lua/luajit")
else
  drivers+=(--driver "openresty=http:$here/nginx.conf.in:$build/lua/luajit")
fi

exec timeout 600 "$venv/bin/python" "$here/conformance.py" "${drivers[@]}" -k "${CONFORMANCE_K:-}"
