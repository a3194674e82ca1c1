#!/usr/bin/env bash
# hilock <-> Redisson interoperability suite.
# Builds the Redisson agent (Maven, offline when ~/.m2 has everything) and the
# hilock C driver (against $HILOCK_BUILD's hilock_static), then runs
# interop.py, which starts and always stops its own redis-server.
# Env: HILOCK_ROOT (repo root), HILOCK_BUILD (cmake build dir with libhilock),
#      HILOCK_VENV (venv for the Python side, default $HILOCK_ROOT/build/venv,
#      made by tests/python/deps.sh; run.sh pip-installs the package there),
#      INTEROP_K (run only the scenarios whose title contains it),
#      INTEROP_REDISSON (Redisson versions to run against, default "3.52.0 4.7.0").
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${HILOCK_ROOT:-$(cd "$here/../.." && pwd)}"
build="${HILOCK_BUILD:-$root/build/release}"
out="$build/interop"
mkdir -p "$out"
die() { echo "interop: $*" >&2; echo "0 passed, 1 failed"; exit 1; }

# 1. The JVM agent, once per Redisson version (the suite runs against each).
versions="${INTEROP_REDISSON:-3.52.0 4.7.0}"
agent_cmd_of() { # version -> command line of the agent built against it
  local v="$1" jvm="$out/jvm-$1"
  local mvn_args=(-B -q -f "$here/pom.xml" package dependency:build-classpath
                  -Dredisson.version="$v" -Dinterop.build="$jvm"
                  -Dmdep.outputFile="$jvm/classpath.txt")
  if ! mvn -o "${mvn_args[@]}" >"$out/mvn-$v.log" 2>&1; then
    bash "$here/deps.sh" >&2 && mvn "${mvn_args[@]}" >"$out/mvn-$v.log" 2>&1 ||
      { cat "$out/mvn-$v.log" >&2; return 1; }
  fi
  check_jars "$jvm/classpath.txt" || return 1
  echo "java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dorg.slf4j.simpleLogger.defaultLogLevel=warn" \
       "-cp $jvm/classes:$(cat "$jvm/classpath.txt") hilock.interop.Agent"
}
# Every jar on the agent's classpath (Redisson and what it pulls in) must have
# the SHA-256 pinned in jars.sha256 (path relative to the Maven repository).
# INTEROP_PIN=1 writes the file from what Maven resolved instead.
pins="$here/jars.sha256"
check_jars() { # classpath.txt
  local jar rel sum want bad=0
  for jar in $(tr ':' ' ' <"$1"); do
    rel="${jar#*/repository/}"
    sum="$(sha256sum "$jar" | cut -d' ' -f1)"
    if [ "${INTEROP_PIN:-}" = 1 ]; then
      { grep -v "  $rel\$" "$pins" 2>/dev/null; echo "$sum  $rel"; } | sort -k2 >"$pins.tmp" && mv "$pins.tmp" "$pins"
      continue
    fi
    want="$(awk -v r="$rel" '$2 == r {print $1}' "$pins" 2>/dev/null)"
    if [ -z "$want" ]; then
      echo "interop: $rel is not pinned in tests/interop/jars.sha256 (INTEROP_PIN=1 adds it)" >&2; bad=1
    elif [ "$want" != "$sum" ]; then
      echo "interop: $rel has SHA-256 $sum, pinned $want" >&2; bad=1
    fi
  done
  return $bad
}
agent_cmds=()
for v in $versions; do
  cmd="$(agent_cmd_of "$v")" || die "maven build of the agent (Redisson $v) failed, or a jar is not as pinned"
  agent_cmds+=("$cmd")
done

# 2. The hilock C driver, linked statically against libhilock.
if [ ! -f "$build/libcore/libhilock.a" ]; then
  cmake --build "$build" --target hilock_static -j2 >"$out/cmake.log" 2>&1 ||
    { cat "$out/cmake.log"; die "cannot build hilock_static in $build"; }
fi
# libhilock.a holds hiredis; the build records its headers and what it needs
hiredis_inc="$(sed -n 's/^HILOCK_HIREDIS_INCLUDE:INTERNAL=//p' "$build/CMakeCache.txt")"
static_libs="$(sed -n 's/^HILOCK_STATIC_LIBS:INTERNAL=//p' "$build/CMakeCache.txt")"
[ -n "$hiredis_inc" ] || die "no HILOCK_HIREDIS_INCLUDE in $build/CMakeCache.txt"
#: hilock.h:8 has "/*" inside a comment (reported to the lead).
cc -std=c11 -O2 -Wall -Wextra -Werror -I"$root/libcore/include" -I"$hiredis_inc" \
  -I"$root/tests/common" "$here/driver.c" "$root/tests/common/line_agent.c" \
  -o "$out/hilock-interop-driver" \
  "$build/libcore/libhilock.a" $static_libs ||
  die "cannot build the C driver"

# The hilock CLI of the same build (the top scenarios run it).
cli="$build/cli/hilock"
if [ ! -x "$cli" ]; then
  cmake --build "$build" --target hilock_cli -j2 >"$out/cli-build.log" 2>&1 ||
    { cat "$out/cli-build.log"; die "cannot build the hilock CLI in $build"; }
fi

# 3. The Python side: the hilock package installed into the shared venv
#    (re-installed only when its sources changed since our last install).
venv="${HILOCK_VENV:-$root/build/venv}"
py_args=()
if [ ! -f "$root/setup.py" ] && [ ! -f "$root/pyproject.toml" ]; then
  py_args=(--py-missing "no Python package in the tree")
elif ! bash "$root/tests/python/deps.sh" >"$out/py-deps.log" 2>&1; then
  py_args=(--py-missing "tests/python/deps.sh failed (see $out/py-deps.log)")
else
  bash "$root/tests/python/install.sh" >"$out/py-install.log" 2>&1
  if "$venv/bin/python" -c "import hilock" >/dev/null 2>&1; then
    py_args=(--py-driver-cmd "$venv/bin/python $here/driver.py")
  else
    py_args=(--py-missing "hilock does not install/import in $venv (see $out/py-install.log)")
  fi
fi

# 4. The Lua side: the Lua 5.4 C module from the same build tree.
lua_args=()
lua_so="$build/lua/5.4/hilock.so"
if [ ! -f "$root/lua/CMakeLists.txt" ]; then
  lua_args=(--lua-missing "no Lua module in the tree")
elif ! command -v lua5.4 >/dev/null; then
  lua_args=(--lua-missing "lua5.4 is not installed")
elif ! cmake --build "$build" --target hilock_lua_54 -j2 >"$out/lua-build.log" 2>&1 || [ ! -f "$lua_so" ]; then
  lua_args=(--lua-missing "cannot build the Lua 5.4 module (see $out/lua-build.log)")
else
  export LUA_CPATH="$(dirname "$lua_so")/?.so;;"
  lua_args=(--lua-driver-cmd "lua5.4 $here/driver.lua")
fi

rc=0
i=0
for v in $versions; do
  echo "=== interop against Redisson $v"
  python3 "$here/interop.py" --agent-cmd "${agent_cmds[$i]}" --redisson-version "$v" \
    --driver-cmd "$out/hilock-interop-driver" --cli "$cli" "${py_args[@]}" "${lua_args[@]}" \
    -k "${INTEROP_K:-}" || rc=1
  i=$((i+1))
done
exit $rc
