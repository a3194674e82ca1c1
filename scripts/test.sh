#!/usr/bin/env bash
# Run every hilock test suite: install what is missing (scripts/deps.sh
# --test: the build tier and the test tier), build, then run
# tests/c (plain, ASan+UBSan, valgrind, ThreadSanitizer) and every other
# tests/<suite>/run.sh.
# Usage: scripts/test.sh [suite...]     (default: all suites)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/deps.sh --test || { echo "deps failed"; exit 1; }

export HILOCK_ROOT="$here"
export HILOCK_BUILD="$here/build/release"
jobs=$(nproc)

build() { # dir, extra cmake args...
  local dir="$1"; shift
  cmake -S "$here" -B "$dir" -DHILOCK_WERROR=ON -DHILOCK_BUILD_TESTS=ON "$@" >"$dir.log" 2>&1 &&
  cmake --build "$dir" -j "$jobs" >>"$dir.log" 2>&1 || { cat "$dir.log"; return 1; }
}

mkdir -p build
if ! build "$HILOCK_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
  echo "build failed"; echo "0 passed, 1 failed"; exit 1
fi

# Suites that run only when named (slow or machine-changing), listed in docs/testing.md.
optional=(python-matrix deb valkey safety safety-long peers-smoke)
suites=("$@")
if [ "${#suites[@]}" -eq 0 ]; then
  suites=(c c-asan c-valgrind c-tsan)
  for d in tests/*/; do
    d="${d%/}"; s="${d#tests/}"
    [[ " ${optional[*]} " == *" $s "* ]] && continue
    [ "$s" != c ] && [ -x "$d/run.sh" ] && suites+=("$s")
  done
fi

build_asan() { # no benchmarks or Lua modules: nothing runs them under ASan
  build "$here/build/asan" -DCMAKE_BUILD_TYPE=Debug -DHILOCK_SANITIZE=ON \
    -DHILOCK_BUILD_BENCH=OFF -DHILOCK_LUA_VARIANTS=
}
build_tsan() {
  build "$here/build/tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHILOCK_TSAN=ON \
    -DHILOCK_BUILD_BENCH=OFF -DHILOCK_LUA_VARIANTS=
}
# Suite c's programs mostly wait on their servers and timers (about half a
# core), so when it runs, the ASan and ThreadSanitizer trees are built
# beside it at a lower priority; c-asan and c-tsan then wait for their
# tree instead of building it (each build is 40-45 s of the CI's time).
has_suite() { [[ " ${suites[*]} " == *" $1 "* ]]; }
prebuilt() { # asan|tsan: wait for the background build, or build now
  local rc="$here/build/$1.prebuild-rc"
  if [ -n "${prebuild_pid:-}" ]; then
    while [ ! -e "$rc" ] && kill -0 "$prebuild_pid" 2>/dev/null; do sleep 0.5; done
    if [ -e "$rc" ]; then
      [ "$(cat "$rc")" = 0 ] && return 0
      cat "$here/build/$1.log"; return 1
    fi
  fi
  "build_$1"
}
rm -f build/asan.prebuild-rc build/tsan.prebuild-rc
prebuild_pid=
if has_suite c && { has_suite c-asan || has_suite c-tsan; }; then
  (
    renice -n 10 -p "$BASHPID" >/dev/null 2>&1 # the compilers it starts inherit it
    for t in asan tsan; do
      has_suite "c-$t" || continue
      "build_$t" >/dev/null 2>&1
      echo $? >"build/$t.prebuild-rc"
    done
  ) &
  prebuild_pid=$!
fi

passed=0; failed=0; failed_names=()
for s in "${suites[@]}"; do
  echo "=== suite: $s"
  start=$(date +%s)
  case "$s" in
    # three test programs at a time: they mostly wait on their own servers
    # and timers (the machine idles below one busy core at -j 2), so this
    # cuts the wall time without making them compete for the CPU
    # (2026-11-23, load 2.7: 123 s at -j 2, 80 s at -j 3, twice). Five at a
    # time (2026-11-29, load 6-38 from other work): -j 3 136 s wall for
    # 52 CPU-s (0.4 cores), -j 5 91 s for 43 CPU-s (0.5 cores).
    c) ctest --test-dir "$HILOCK_BUILD" --output-on-failure -j 5 ;;
    c-asan)
      # (no benchmarks or Lua modules in the tree: 43.4 CPU-s of build
      # instead of 57.6, 2026-11-29)
      prebuilt asan &&
      # the valkey_* repeats run in suite c; the library code they exercise
      # under ASan is the same as against redis-server
      # Three programs at a time (2026-11-23, load 11-14, no
      # cost data: 104 s of tests at -j 2, 68 and 72 s at -j 3). (At -j 5,
      # 2026-11-29, load 18-38 from other work: 69 and 89 s of tests, but
      # example_multilock failed once with its Redlock left on a server.)
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest --test-dir "$here/build/asan" --output-on-failure -LE valkey -j 3 ;;
    # valgrind runs a program's threads on one core, but the programs
    # mostly wait on their servers and timers: four at a time
    # (2026-11-29, quiet machine: 104 s wall for 83 CPU-s of user time;
    # 194-198 s at -j 2 in the CI runs before)
    c-valgrind) HILOCK_VALGRIND=1 ctest --test-dir "$HILOCK_BUILD" --output-on-failure -L unit -j 4 ;;
    c-tsan)
      # ThreadSanitizer over the unit tests and the thread stress program;
      # any report fails the test (exitcode 66). No suppressions. Three
      # programs at a time, as suite c did: they mostly wait on their own
      # servers and timers (measured 165 s -> 83 s of tests from -j 1 to
      # -j 2; 2026-11-23, load 14-16, no cost data: 100 s at -j 2, 69 and
      # 67 s at -j 3).
      prebuilt tsan &&
      TSAN_OPTIONS="exitcode=66 second_deadlock_stack=1" \
        ctest --test-dir "$here/build/tsan" --output-on-failure -L "unit|stress" -j 3 ;;
    # the safety harness's long schedule (at least 30 minutes) when named;
    # the default run has its short one as suite safety-short
    safety) HILOCK_SAFETY=long bash tests/safety/run.sh ;;
    *) bash "tests/$s/run.sh" ;;
  esac
  rc=$?
  echo "=== suite $s: $([ $rc -eq 0 ] && echo ok || echo FAILED) ($(( $(date +%s) - start ))s)"
  if [ $rc -eq 0 ]; then passed=$((passed+1)); else failed=$((failed+1)); failed_names+=("$s"); fi
done
echo
[ $failed -gt 0 ] && echo "failed suites: ${failed_names[*]}"
echo "suites: $passed passed, $failed failed"
[ $failed -eq 0 ]
