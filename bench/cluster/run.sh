#!/usr/bin/env bash
# Aggregate lock+unlock throughput: a 3-master Redis Cluster vs one server,
# same machine, same run. Reference: redis-benchmark SET against both
# (the same client and server CPU budget, no lock logic).
# Usage: bench/cluster/run.sh [THREADS] [SECONDS] [ROUNDS]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${HILOCK_BUILD:-$root/build/bench}"
threads="${1:-6}"; secs="${2:-3}"; rounds="${3:-3}"
cmake -S "$root" -B "$build" -DHILOCK_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j2 --target cluster_bench >/dev/null
bin="$build/bench/cluster/cluster_bench"
tmp="$(mktemp -d)"; pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
# a free port whose cluster bus port (port + 10000) is free too
port() { python3 -c '
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
while True:
    p = random.randint(10000, 21999)
    if free(p) and free(p + 10000):
        print(p); break'; }
start() { # dir port extra...
  local d="$tmp/$1"; shift; local p="$1"; shift; mkdir -p "$d"
  redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$d" --logfile redis.log "$@" &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis on $p did not start" >&2; return 1
}
single=$(port); start single "$single"
cports=(); for i in 1 2 3; do p=$(port); cports+=("$p"); start "c$i" "$p" --cluster-enabled yes --cluster-config-file nodes.conf; done
redis-cli --cluster create $(printf '127.0.0.1:%s ' "${cports[@]}") --cluster-yes >/dev/null
for _ in $(seq 200); do
  ok=1; for p in "${cports[@]}"; do redis-cli -p "$p" cluster info | grep -q cluster_state:ok || ok=0; done
  [ $ok = 1 ] && break; sleep 0.1
done
cluster_url="redis+cluster://127.0.0.1:${cports[0]},127.0.0.1:${cports[1]}"
rb() { redis-benchmark "$@" -q -t set -n 200000 -c "$threads" 2>/dev/null | grep -oE '[0-9.]+ requests per second' | cut -d' ' -f1; }
printf "%-6s %14s %14s %8s %16s %16s %8s\n" round single_pairs cluster_pairs ratio single_SET cluster_SET ratio
for r in $(seq "$rounds"); do
  s=$("$bin" "redis://127.0.0.1:$single" "$threads" "$secs")
  c=$("$bin" "$cluster_url" "$threads" "$secs")
  rs=$(rb -p "$single"); rc=$(rb -p "${cports[0]}" --cluster)
  printf "%-6s %14s %14s %8.2f %16s %16s %8.2f\n" "$r" "$s" "$c" "$(python3 -c "print($c/$s)")" "$rs" "$rc" "$(python3 -c "print($rc/$rs)")"
done
echo "threads=$threads seconds=$secs cores=$(nproc): every server and the client share these cores, so a cluster cannot add CPU here."
