#!/usr/bin/env bash
# The safety harness's self-test builds (docs/safety.md, "Self-tests"): libhilock
# configured with HILOCK_SAFETY_BREAK=MODE (CMakeLists.txt: a library that breaks one
# guarantee on purpose, which says so in hilock_version_string() and cannot be
# installed) in OUT/lib, and the two C workers linked to it: OUT/worker-c,
# OUT/worker-async. safety.py runs this for a scenario with "build": MODE.
#   tests/safety/broken.sh no-doubt|token-reset OUT
set -euo pipefail
mode="$1"
out="$2"
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
here="$root/tests/safety"
mkdir -p "$out"
cmake -S "$root" -B "$out/lib" -DHILOCK_SAFETY_BREAK="$mode" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHILOCK_WERROR=ON -DHILOCK_BUILD_TESTS=OFF -DHILOCK_BUILD_BENCH=OFF -DHILOCK_LUA_VARIANTS= \
  >"$out/cmake.log" 2>&1 || { cat "$out/cmake.log"; exit 1; }
cmake --build "$out/lib" --target hilock -j "$(nproc)" >>"$out/cmake.log" 2>&1 ||
  { cat "$out/cmake.log"; exit 1; }
lib="$out/lib/libcore"
for w in c:worker async:worker_async; do
  cc -std=c11 -O2 -Wall -Wextra -Werror -I"$root/libcore/include" "$here/${w#*:}.c" \
    -o "$out/worker-${w%%:*}" -L"$lib" -lhilock -Wl,-rpath,"$lib" -lpthread
done
