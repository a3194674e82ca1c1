#!/usr/bin/env bash
# Cancellation latency (issue 13): from hilock_lock_cancel to the cancelled
# acquire returning, reentrant and fair, against a throwaway redis-server,
# with the PING round trip of the same run as the floor.
#
#   bench/cancel/run.sh [-n rounds]
set -euo pipefail
N=1000
while getopts "n:" o; do
  case $o in
    n) N=$OPTARG ;;
    *) echo "usage: $0 [-n rounds]" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${HILOCK_BENCH_BUILD:-$ROOT/build/bench}
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DHILOCK_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j2 --target cancel_bench >/dev/null

WORK=$(mktemp -d /tmp/hilock-cancelbench-XXXXXX)
RPID=
cleanup() {
  if [ -n "$RPID" ]; then kill "$RPID" 2>/dev/null || true; wait "$RPID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for attempt in 1 2 3 4 5 6 7 8 9 10; do
  PORT=$((20000 + RANDOM % 40000))
  port_free "$PORT" || continue
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$WORK" --logfile "$WORK/redis.log" &
  RPID=$!
  for _ in $(seq 100); do
    redis-cli -p "$PORT" PING 2>/dev/null | grep -q PONG && break
    sleep 0.05
  done
  if redis-cli -p "$PORT" PING 2>/dev/null | grep -q PONG; then break; fi
  kill "$RPID" 2>/dev/null || true; wait "$RPID" 2>/dev/null || true; RPID=
done
[ -n "$RPID" ] || { echo "cannot start redis-server" >&2; exit 1; }
echo "hilock cancel bench: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')," \
  "port $PORT, $N rounds per kind, $(nproc) cores (shared with other work)"
"$BUILD/bench/cancel/cancel_bench" -n "$N" "redis://127.0.0.1:$PORT"
