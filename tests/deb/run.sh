#!/usr/bin/env bash
# Debian packages (not in the default run: scripts/test.sh deb). Installs
# debhelper, dh-python and lintian if missing, builds the five packages from
# a copy of the tree with dpkg-buildpackage, checks them with lintian (no
# errors), INSTALLS them on this machine, then checks what a user gets:
# the README example built with `pkg-config --cflags --libs hilock` against
# the installed package and run against a throwaway redis-server, the CLI,
# `import hilock` in /usr/bin/python3, require "hilock" in Lua 5.1, 5.4 and
# LuaJIT from their default paths, the man pages. The packages are purged at
# the end (also on failure).
set -uo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
. "$root/tests/lua/lib.sh"
PKGS=(libhilock0 libhilock-dev hilock python3-hilock lua-hilock)
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
apt_retry() { # apt/dpkg may be locked by another install for a while
  local i
  for i in $(seq 1 60); do
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get "$@" && return 0
    sleep 5
  done
  return 1
}
installed=0
cleanup() {
  [ "$installed" = 1 ] && apt_retry purge -y -qq "${PKGS[@]}" >/dev/null 2>&1
  hl_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM
passed=0; failed=0
check() { # description, command...
  local what="$1"; shift
  if "$@" >"$HL_TMP/check.log" 2>&1; then echo "  ok    $what"; passed=$((passed+1))
  else echo "  FAIL  $what"; tail -30 "$HL_TMP/check.log"; failed=$((failed+1)); fi
}
hl_tmpdir; tmp="$HL_TMP"

# 1. tools (only this suite needs them)
need=()
for p in debhelper dh-python lintian fakeroot dpkg-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "deb: installing ${need[*]}"
  apt_retry install -y -qq --no-install-recommends "${need[@]}" >"$tmp/apt.log" 2>&1 ||
    { tail -20 "$tmp/apt.log"; echo "0 passed, 1 failed"; exit 1; }
fi

# 2. build from a copy of the tree (what git tracks or would track)
src="$tmp/hilock"
mkdir -p "$src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - 2>/dev/null) |
  tar -xf - -C "$src"
# the pinned hiredis archive deps.sh fetched (git ignores it): the package builds offline
mkdir -p "$src/third_party" && cp "$(bash "$root/scripts/fetch-hiredis.sh")" "$src/third_party/"
t0=$(date +%s)
if (cd "$src" && dpkg-buildpackage -us -uc -b -j2) >"$tmp/build.log" 2>&1; then
  echo "  ok    dpkg-buildpackage -b ($(( $(date +%s) - t0 ))s)"; passed=$((passed+1))
else
  tail -40 "$tmp/build.log"; echo "  FAIL  dpkg-buildpackage"; echo "deb: $passed passed, 1 failed"; exit 1
fi
debs=()
for p in "${PKGS[@]}"; do
  f="$(ls "$tmp"/${p}_*.deb 2>/dev/null | head -1)"
  if [ -n "$f" ]; then debs+=("$f"); echo "        $(basename "$f") $(du -k "$f" | cut -f1) KiB"
  else echo "  FAIL  no $p package"; failed=$((failed+1)); fi
done
lint() {
  lintian --fail-on error "$tmp"/hilock_*.changes >"$tmp/lintian.log" 2>&1
}
check "lintian: no errors" lint
echo "        lintian: $(grep -c '^E: ' "$tmp/lintian.log") errors, $(grep -c '^W: ' "$tmp/lintian.log") warnings"
grep -E "^[EW]: " "$tmp/lintian.log" | sed 's/^/        /' | head -20

# 3. install them here, and use them as a user would
if apt_retry install -y -qq --no-install-recommends "${debs[@]}" >"$tmp/install.log" 2>&1; then
  installed=1; echo "  ok    apt-get install ${PKGS[*]}"; passed=$((passed+1))
else
  tail -20 "$tmp/install.log"; echo "  FAIL  install"; echo "deb: $passed passed, $((failed+1)) failed"; exit 1
fi
hl_start_redis || { echo "deb: redis failed"; exit 1; }

readme_example() {
  # the README's program, compiled against the installed package only
  cc -std=c11 -Wall -Wextra -Werror "$root/examples/basic.c" $(pkg-config --cflags --libs hilock) \
     -o "$tmp/basic" &&
  ldd "$tmp/basic" | grep -qE "libhilock.so.0 => /(usr/)?lib/" &&
  HILOCK_URL="$REDIS_URL" "$tmp/basic" | grep -q "holding orders:42"
}
check "README example: cc basic.c \$(pkg-config --cflags --libs hilock), run" readme_example
cmake_consumer() {
  cmake -S "$root/tests/install" -B "$tmp/cm" >/dev/null && cmake --build "$tmp/cm" >/dev/null &&
  "$tmp/cm/consumer"
}
check "CMake find_package(hilock) against /usr" cmake_consumer
check "hilock CLI: hilock run / status" bash -c \
  "HILOCK_URL='$REDIS_URL' /usr/bin/hilock run deb-test -- true && HILOCK_URL='$REDIS_URL' /usr/bin/hilock status deb-test"
check "man hilock, man 3 hilock_lock_acquire" bash -c "man -w hilock >/dev/null && man -w 3 hilock_lock_acquire >/dev/null"
check "python3-hilock: import hilock, take a lock" bash -c "cd / && /usr/bin/python3 -c '
import hilock, sys
assert hilock.__file__.startswith(\"/usr/lib/python3/dist-packages/\"), hilock.__file__
with hilock.Client(sys.argv[1]) as c:
    with c.lock(\"deb-py\", wait=1.0):
        pass
' '$REDIS_URL'"
for lua in lua5.1 lua5.4 luajit; do
  check "lua-hilock: $lua finds hilock in its default path" env -u LUA_CPATH -u LUA_PATH -u LUA_CPATH_5_4 -u LUA_PATH_5_4 \
    "$lua" -e "local h = require 'hilock'; local c = assert(h.connect('$REDIS_URL')); local l = c:lock('deb-lua'); assert(l:acquire(1, 5)); assert(l:release()); c:close()"
done
check "lua-hilock: resty.hilock in LuaJIT's default path" test -f /usr/share/lua/5.1/resty/hilock.lua

echo "deb: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
