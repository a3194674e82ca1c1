#!/usr/bin/env bash
# Fuzz suite: build the libFuzzer targets with clang (libcore and hiredis
# instrumented, ASan+UBSan), replay every file in corpus/<target>/ (the
# seeds and every crash ever found), then fuzz each target for
# HILOCK_FUZZ_SECONDS (default 30) from those seeds.
#   tests/fuzz/run.sh                          # what CI runs (~2 min)
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
  echo "fuzz: clang is missing (scripts/deps.sh installs it)"; exit 1
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
rc=0
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/$t"
  seeds="$fz/corpus/$t"
  work="$here/build/fuzz-corpus/$t"
  art="$here/build/fuzz-artifacts/$t/"
  mkdir -p "$work" "$art"
  # 1) every seed and past crash, once each
  if ! "$bin" -runs=0 "$seeds" >"$build.$t.replay.log" 2>&1; then
    tail -40 "$build.$t.replay.log"; echo "fuzz: $t fails on its corpus"; rc=1; continue
  fi
  # 2) a short run: a reply may not make us allocate over 256 MB at once
  dict=(); [ -f "$fz/$t.dict" ] && dict=(-dict="$fz/$t.dict")
  if ! "$bin" "${dict[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=1536 \
       -malloc_limit_mb=256 -max_len=4096 -print_final_stats=1 -artifact_prefix="$art" \
       "$work" "$seeds" >"$build.$t.log" 2>&1; then
    tail -60 "$build.$t.log"; echo "fuzz: $t found a crash: $(ls "$art")"; rc=1; continue
  fi
  echo "fuzz: $t ok: $(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$build.$t.log" | \
    awk '{print $2}') runs in ${secs}s, corpus $(ls "$work" | wc -l) inputs"
done
exit $rc
