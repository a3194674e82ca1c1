#!/usr/bin/env bash
# Fuzz suite: build the libFuzzer targets with clang (libcore and hiredis
# instrumented, ASan+UBSan), replay every file in corpus/<target>/ (the
# seeds and every crash ever found), then fuzz each target for
# HILOCK_FUZZ_SECONDS (default 30) from those seeds.
#   tests/fuzz/run.sh                          # what CI runs (~1 min after the build)
#   HILOCK_FUZZ_SECONDS=3600 tests/fuzz/run.sh fuzz_reply   # a long run
# New inputs go to build/fuzz-corpus/<target>/ (not the tree); a crash is
# written to build/fuzz-artifacts/ and the suite fails: copy that file into
# corpus/<target>/ once fixed, so it is replayed from then on.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
fz="$here/tests/fuzz"
build="$here/build/fuzz"
secs="${HILOCK_FUZZ_SECONDS:-30}"
targets=("$@")
[ "${#targets[@]}" -eq 0 ] && targets=(fuzz_url fuzz_reply fuzz_pubsub)

if ! command -v clang >/dev/null; then
  echo "fuzz: clang is missing (scripts/deps.sh --test installs it)"; exit 1
fi
mkdir -p "$here/build"
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"
if ! { CC=clang cmake -S "$here" -B "$build" -DHILOCK_FUZZ=ON -DHILOCK_WERROR=ON \
         -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="$flags" &&
       cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"; } >"$build.log" 2>&1; then
  cat "$build.log"; echo "fuzz: build failed"; exit 1
fi

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Each target in its own background job (libFuzzer is single-threaded, so the
# targets share the cores instead of running one after another); the report
# of each is printed in order once all are done.
fuzz_one() { # target -> exit status; output in $build.$t.result
  local t="$1" bin="$build/tests/fuzz/$1" seeds="$fz/corpus/$1"
  local work="$here/build/fuzz-corpus/$1" art="$here/build/fuzz-artifacts/$1/"
  mkdir -p "$work" "$art"
  # 1) every seed and past crash, once each
  if ! "$bin" -runs=0 "$seeds" >"$build.$t.replay.log" 2>&1; then
    tail -40 "$build.$t.replay.log"; echo "fuzz: $t fails on its corpus"; return 1
  fi
  # 2) a short run: a reply may not make us allocate over 256 MB at once
  local dict=(); [ -f "$fz/$t.dict" ] && dict=(-dict="$fz/$t.dict")
  if ! "$bin" "${dict[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=1536 \
       -malloc_limit_mb=256 -max_len=4096 -print_final_stats=1 -artifact_prefix="$art" \
       "$work" "$seeds" >"$build.$t.log" 2>&1; then
    tail -60 "$build.$t.log"; echo "fuzz: $t found a crash: $(ls "$art")"; return 1
  fi
  echo "fuzz: $t ok: $(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$build.$t.log" | \
    awk '{print $2}') runs in ${secs}s, corpus $(ls "$work" | wc -l) inputs"
}
pids=()
for t in "${targets[@]}"; do
  fuzz_one "$t" >"$build.$t.result" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!targets[@]}"; do
  wait "${pids[$i]}" || rc=1
  cat "$build.${targets[$i]}.result"
done
exit $rc
