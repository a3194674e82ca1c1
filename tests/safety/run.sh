#!/usr/bin/env bash
# Safety suite (docs/safety.md): clients of the C (blocking and hilock_async),
# Python, hilock.aio and OpenResty drivers on one fenced lock each, a fencing store, a seeded nemesis, and the
# checkers (Porcupine's mutex model, fencing, liveness).
#   tests/safety/run.sh                       the short schedule (about 2.5 minutes)
#   tests/safety/run.sh --long                every scenario, long (HILOCK_SAFETY=long too)
#   tests/safety/run.sh --seed N --scenario NAME   replay one
#   tests/safety/run.sh --list                scenarios, expected failures
set -uo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
here="$root/tests/safety"
lib="${HILOCK_BUILD:-$root/build/release}/libcore"
out="$root/build/safety"
venv="$root/build/venv"
mkdir -p "$out"
bash "$root/tests/python/deps.sh" || { echo "python deps failed"; echo "0 passed, 1 failed"; exit 1; }
if ! bash "$root/tests/python/install.sh" >"$out/install.log" 2>&1; then
  tail -40 "$out/install.log"; echo "pip install failed"; echo "0 passed, 1 failed"; exit 1
fi
# worker-c on the blocking C API, worker-async on hilock_async (its own poll loop)
for w in c:worker async:worker_async; do
  if ! cc -std=c11 -O2 -Wall -Wextra -Werror -I"$root/libcore/include" "$here/${w#*:}.c" \
       -o "$out/worker-${w%%:*}" -L"$lib" -lhilock -Wl,-rpath,"$lib" -lpthread \
       >"$out/worker-${w%%:*}.log" 2>&1; then
    cat "$out/worker-${w%%:*}.log"; echo "worker-${w%%:*} build failed"; echo "0 passed, 1 failed"; exit 1
  fi
done
# the OpenResty workers (worker_resty.sh): nginx with its lua module (scripts/deps.sh
# --test), and the LuaJIT hilock.so of this build (not in its default target)
command -v nginx >/dev/null || { echo "safety: nginx is not installed"; echo "0 passed, 1 failed"; exit 1; }
if ! cmake --build "${HILOCK_BUILD:-$root/build/release}" --target hilock_lua -j2 >"$out/lua.log" 2>&1; then
  cat "$out/lua.log"; echo "hilock_lua build failed"; echo "0 passed, 1 failed"; exit 1
fi
export HILOCK_LUA_CPATH="${HILOCK_BUILD:-$root/build/release}/lua/luajit"
PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "safety: the Go toolchain (go) is not on the PATH"; echo "0 passed, 1 failed"; exit 1; }
# Porcupine, pinned in checker/go.mod and go.sum (from the Go module proxy)
if ! (cd "$here/checker" && GOFLAGS=-mod=mod go build -o "$out/safety-checker" .) >"$out/checker.log" 2>&1; then
  cat "$out/checker.log"; echo "safety-checker build failed"; echo "0 passed, 1 failed"; exit 1
fi
long=()
[ "${HILOCK_SAFETY:-}" = long ] && long=(--long)
export HILOCK_PYTHON="$venv/bin/python" HILOCK_ROOT="$root"
# the double-hold checker on made-up histories (test_checker.py), first
if ! "$venv/bin/python" "$here/test_checker.py" "$out/safety-checker"; then
  echo "safety: the checker's self-test failed"; echo "0 passed, 1 failed"; exit 1
fi
exec "$venv/bin/python" "$here/safety.py" --build "$out" "${long[@]}" "$@"
