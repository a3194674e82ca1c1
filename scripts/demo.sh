#!/usr/bin/env bash
# hilock demo: several processes share one non-atomic counter in Redis
# (GET, then SET value+1). Without a lock, increments get lost; with a hilock
# lock, the total is exact. Prints progress, the exact total, the hand-off
# latency (one holder's unlock returning -> the next, already waiting, holder's
# acquire returning) against the server round trip, and a `hilock status` view.
#
# Usage: scripts/demo.sh [WORKERS [INCREMENTS_PER_WORKER]]     (default 4 1000)
# Each increment holds the lock for HOLD_US (default 300) microseconds of
# "work"; workers pause 0..THINK_US (default 300) microseconds between rounds.
# Env:   HILOCK_DEMO_BUILD  build directory (default build/release)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORKERS="${1:-4}"
PER="${2:-1000}"
HOLD_US="${HOLD_US:-300}"
THINK_US="${THINK_US:-300}"
BUILD="${HILOCK_DEMO_BUILD:-$here/build/release}"
LOCK="demo:counter-lock"
COUNTER="demo:counter"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# only what building and the demo need (a C compiler, CMake, OpenSSL,
# redis-server): the test suites' dependencies are scripts/deps.sh --test
say "checking dependencies (scripts/deps.sh)"
bash "$here/scripts/deps.sh" >/dev/null

say "building hilock into ${BUILD#$here/}"
mkdir -p "$BUILD"
log="$BUILD/demo-build.log"
if ! { cmake -S "$here" -B "$BUILD" >"$log" 2>&1 &&
       cmake --build "$BUILD" -j "$(nproc)" --target hilock_cli hilock_demo_worker >>"$log" 2>&1; }; then
  tail -30 "$log"; echo "build failed (full log: $log)"; exit 1
fi
HL="$BUILD/cli/hilock"
WORKER="$BUILD/cli/hilock-demo-worker"

TMP="$(mktemp -d /tmp/hilock-demo.XXXXXX)"
REDIS_PID=""
RTT_PID=""
PIDS=()
cleanup() {
  for p in "${PIDS[@]+"${PIDS[@]}"}" $RTT_PID; do kill -KILL "$p" 2>/dev/null || true; done
  if [ -n "$REDIS_PID" ]; then
    kill -TERM "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    echo "(redis-server on port $PORT stopped)"
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
PORT=""
for _ in 1 2 3 4 5; do
  # a random port in 20000-59999; a taken one makes redis-server exit: next
  PORT=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$TMP" --logfile "$TMP/redis.log" &
  REDIS_PID=$!
  end=$(( $(now_ms) + 5000 ))
  until [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ] || [ "$(now_ms)" -gt "$end" ] ||
        ! kill -0 "$REDIS_PID" 2>/dev/null; do sleep 0.02; done
  [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = PONG ] && break
  kill -KILL "$REDIS_PID" 2>/dev/null || true; wait "$REDIS_PID" 2>/dev/null || true; REDIS_PID=""
done
[ -n "$REDIS_PID" ] || { echo "could not start redis-server"; exit 1; }
export HILOCK_URL="redis://127.0.0.1:$PORT"
say "throwaway redis-server on 127.0.0.1:$PORT"
EXPECTED=$(( WORKERS * PER ))

# run_workers MODE: starts the workers, shows progress, waits for them.
run_workers() {
  local mode="$1" snap="$2"
  redis-cli -p "$PORT" set "$COUNTER" 0 >/dev/null
  PIDS=()
  for i in $(seq 1 "$WORKERS"); do
    if [ "$mode" = nolock ]; then
      "$WORKER" "$HILOCK_URL" "$LOCK" "$COUNTER" "$PER" "w$i" "$TMP/nolock.$i" "$HOLD_US" "$THINK_US" nolock &
    else
      "$WORKER" "$HILOCK_URL" "$LOCK" "$COUNTER" "$PER" "w$i" "$TMP/lock.$i" "$HOLD_US" "$THINK_US" &
    fi
    PIDS+=($!)
  done
  local t0; t0=$(now_ms)
  local done_snap=0
  while :; do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    local v; v=$(redis-cli -p "$PORT" get "$COUNTER")
    local width=40 fill=$(( v * 40 / EXPECTED ))
    [ "$fill" -gt "$width" ] && fill=$width
    printf '\r    [%-40s] %6s / %s increments  %5.1fs ' "$(printf '%*s' "$fill" '' | tr ' ' '#')" \
      "$v" "$EXPECTED" "$(awk -v ms=$(( $(now_ms) - t0 )) 'BEGIN { print ms / 1000 }')"
    if [ -n "$snap" ] && [ "$done_snap" = 0 ] && [ "$v" -ge $(( EXPECTED / 3 )) ]; then
      "$HL" status "$LOCK" >"$snap" 2>&1 || true
      done_snap=1
    fi
    [ "$alive" = 0 ] && break
    sleep 0.2
  done
  echo
  local rc=0
  for p in "${PIDS[@]}"; do wait "$p" || rc=1; done
  PIDS=()
  [ "$rc" = 0 ] || { echo "a worker failed"; exit 1; }
}

say "$WORKERS workers x $PER increments WITHOUT a lock (GET, then SET value+1)"
run_workers nolock ""
NOLOCK_TOTAL=$(redis-cli -p "$PORT" get "$COUNTER")
echo "    total: $NOLOCK_TOTAL of $EXPECTED  ($(( EXPECTED - NOLOCK_TOTAL )) increments lost)"

say "$WORKERS workers x $PER increments, each inside the hilock lock \"$LOCK\""
# the server round trip, measured while the workers run (same load)
"$WORKER" "$HILOCK_URL" --rtt 1500 >"$TMP/rtt" &
RTT_PID=$!
run_workers lock "$TMP/status.txt"
wait "$RTT_PID"
TOTAL=$(redis-cli -p "$PORT" get "$COUNTER")
if [ "$TOTAL" = "$EXPECTED" ]; then verdict="exact"; else verdict="WRONG"; fi
echo "    total: $TOTAL of $EXPECTED  ($verdict)"

# Hand-offs: consecutive critical sections of different workers where the
# next one was already waiting (its acquire call began before the previous
# release returned). Latency = next acquire return - previous release return.
RTT_NS=$(cat "$TMP/rtt")
sort -k3,3n "$TMP"/lock.* >"$TMP/all"
awk 'NR > 1 && $1 != pid && $2 < prel { print $3 - prel } { pid = $1; prel = $4 }' "$TMP/all" |
  sort -n >"$TMP/handoffs"
N_HO=$(wc -l <"$TMP/handoffs")
if [ "$N_HO" -gt 0 ]; then
  P50=$(awk -v n="$N_HO" 'NR == int((n - 1) * 0.50) + 1' "$TMP/handoffs")
  P99=$(awk -v n="$N_HO" 'NR == int((n - 1) * 0.99) + 1' "$TMP/handoffs")
  say "hand-off latency (unlock return -> next waiting holder's acquire return), $N_HO hand-offs"
  awk -v p50="$P50" -v p99="$P99" -v rtt="$RTT_NS" 'BEGIN {
    printf "    p50 %7.1f us   p99 %7.1f us\n", p50 / 1000, p99 / 1000
    printf "    server round trip during the run (PING p50) %.1f us: hand-off p50 = %.1f round trips\n    (a hand-off needs at least a publish plus one round trip)\n",
      rtt / 1000, p50 / rtt }'
else
  echo "    (no hand-offs between waiting workers observed)"
fi

say "hilock status \"$LOCK\" while the workers were running"
sed 's/^/    /' "$TMP/status.txt"

say "flock-style: hilock run NAME -- COMMAND"
"$HL" run demo:nightly -- sh -c 'sleep 1.5' &
PIDS=($!)
end=$(( $(now_ms) + 5000 ))
until [ "$(redis-cli -p "$PORT" exists demo:nightly)" = 1 ] || [ "$(now_ms)" -gt "$end" ]; do sleep 0.02; done
echo "    \$ hilock run demo:nightly -- sh -c 'sleep 1.5' &"
echo "    \$ hilock run --wait 0 demo:nightly -- echo never"
set +e
"$HL" run --wait 0 demo:nightly -- echo never 2>&1 | sed 's/^/    /'
echo "    (exit status ${PIPESTATUS[0]})"
echo "    \$ hilock status demo:nightly"
"$HL" status demo:nightly | sed 's/^/    /'
echo "    \$ hilock run demo:nightly -- echo 'waited for the first run, then ran'"
"$HL" run demo:nightly -- echo "waited for the first run, then ran" | sed 's/^/    /'
set -e
wait "${PIDS[0]}"; PIDS=()
[ "$verdict" = exact ]
