#!/usr/bin/env bash
# Install hilock into a temporary prefix, then build and run a consumer with
# find_package(hilock) and with pkg-config against that installation.
set -euo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
build="${HILOCK_BUILD:-$root/build/release}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir="$prefix/lib"; [ -d "$libdir" ] || libdir="$(dirname "$(find "$prefix" -name 'libhilock.so' | head -1)")"
failed=0; passed=0
check() { if "$@"; then passed=$((passed+1)); else echo "FAILED: $*"; failed=$((failed+1)); fi; }

# SOVERSION = major: libhilock.so.0 -> libhilock.so.0.1.0
check test -L "$libdir/libhilock.so.0"
check test -e "$libdir/libhilock.a"
check test -e "$prefix/include/hilock.h"
# man3 pages generated from hilock.h
check test -s "$prefix/share/man/man3/hilock.3"
check test -s "$prefix/share/man/man3/hilock_lock_acquire.3"

cmake_consumer() {
  cmake -S "$root/tests/install" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null &&
  cmake --build "$tmp/cm" >/dev/null &&
  LD_LIBRARY_PATH="$libdir" "$tmp/cm/consumer"
}
check cmake_consumer

# the config-version file refuses an incompatible major version
wrong_major() {
  mkdir -p "$tmp/wm" && printf 'cmake_minimum_required(VERSION 3.21)\nproject(x C)\nfind_package(hilock 9 REQUIRED)\n' > "$tmp/wm/CMakeLists.txt" &&
  ! cmake -S "$tmp/wm" -B "$tmp/wm/b" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null 2>&1
}
check wrong_major

pkgconfig_consumer() {
  local flags
  flags="$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs hilock)" &&
  cc -std=c11 -Wall -Wextra -Werror "$root/tests/install/consumer.c" $flags -o "$tmp/pc" &&
  LD_LIBRARY_PATH="$libdir" "$tmp/pc"
}
check pkgconfig_consumer

# the engine header (advanced API, static linking only): a driver-side program
# built against the installed <hilock/engine.h> and libhilock.a
engine_consumer() {
  local hiredis_inc static_libs
  hiredis_inc=$(sed -n 's/^HILOCK_HIREDIS_INCLUDE:INTERNAL=//p' "$build/CMakeCache.txt")
  static_libs=$(sed -n 's/^HILOCK_STATIC_LIBS:INTERNAL=//p' "$build/CMakeCache.txt")
  cc -std=c11 -Wall -Wextra -Werror -I"$prefix/include" -I"$hiredis_inc" \
    "$root/tests/install/engine_consumer.c" "$libdir/libhilock.a" $static_libs -o "$tmp/engine" &&
  "$tmp/engine"
}
check test -e "$prefix/include/hilock/engine.h"
check engine_consumer
# ... and refuses to be used by accident (without the static-linking define)
engine_guard() {
  local hiredis_inc
  hiredis_inc=$(sed -n 's/^HILOCK_HIREDIS_INCLUDE:INTERNAL=//p' "$build/CMakeCache.txt")
  printf '#include <hilock/engine.h>\n' >"$tmp/guard.c" &&
  { cc -fsyntax-only -I"$prefix/include" -I"$hiredis_inc" "$tmp/guard.c" 2>&1 || true; } |
    grep -q "advanced engine API"
}
check engine_guard

# the shared library brings no hiredis symbols and needs no libhiredis at run time
no_hiredis() { ! readelf -d "$libdir/libhilock.so" | grep -q hiredis; }
check no_hiredis

# The C build needs only a C compiler, CMake and OpenSSL: with CUnit and
# pkg-config out of sight (CMake's standard switches) it configures, builds no
# C tests, and builds the library, the CLI and the demo's worker.
bare_build() {
  cmake -S "$root" -B "$tmp/bare" -DCMAKE_DISABLE_FIND_PACKAGE_CUnit=ON \
    -DPKG_CONFIG_EXECUTABLE=/nonexistent/pkg-config >"$tmp/bare.log" 2>&1 &&
  ! cmake --build "$tmp/bare" --target help | grep -q test_lock &&
  cmake --build "$tmp/bare" -j 2 --target hilock hilock_cli hilock_demo_worker >>"$tmp/bare.log" 2>&1 &&
  "$tmp/bare/cli/hilock" --version >/dev/null ||
  { tail -5 "$tmp/bare.log"; return 1; }
}
check bare_build

# The demo's installs are the build tier only (the README's first command
# takes seconds, not minutes): deps.sh without --test names no test-only
# package and runs no tests/*/deps.sh, and demo.sh asks for that tier.
# (On 7b6fa8d deps.sh had one tier, and the demo installed a JDK, Maven
# artifacts, npm packages, a Go build, clang and valkey first.)
demo_tier() {
  local allowed=" gcc libc6-dev make cmake libssl-dev curl ca-certificates redis-server redis-tools " l
  local build test
  build="$(bash "$root/scripts/deps.sh" --list)" || return 1
  test="$(bash "$root/scripts/deps.sh" --list --test)" || return 1
  while read -r kind name; do
    case "$kind" in
      apt) [[ "$allowed" == *" $name "* ]] || { echo "  build tier installs $name"; return 1; } ;;
      hiredis) ;;
      *) echo "  build tier: $kind $name"; return 1 ;;
    esac
  done <<<"$build"
  # the test tier has the rest, every suite's own deps.sh included
  for f in "$root"/tests/*/deps.sh; do
    grep -qx "script ${f#$root/}" <<<"$test" || { echo "  test tier misses ${f#$root/}"; return 1; }
  done
  grep -qx "apt libcunit1-dev" <<<"$test" || return 1
  # demo.sh runs the build tier: no --test, and no suite's deps.sh
  grep -E '^[^#]*scripts/deps\.sh' "$root/scripts/demo.sh" | grep -vq -- '--test' &&
    ! grep -E '^[^#]*(--test|tests/[a-z-]+/deps\.sh)' "$root/scripts/demo.sh"
}
check demo_tier

echo "install: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
