#!/usr/bin/env bash
# Issue 31's scale figures for one client on one event loop (hilock_async):
# (a) the cost of starting one acquire with 100,000 in flight against 1,000
#     in flight (target: at most 2x), bench/c/inflight_bench: each round runs
#     each size in a fresh process, in alternating order (1k first in odd
#     rounds, 100k first in even ones), and prints the ratios of the mean
#     wall time per call, of the last 1,000 calls' mean at 100k, and of the
#     calling thread's CPU time per call (steady under load);
# (b) 100,000 waiters on one lock, all granted in turn, and the memory per
#     waiter, bench/c/waiters_bench, once.
# Against a throwaway redis-server; prints the load average before and after.
#
#   bench/scale/run.sh [-r rounds] [-n waiters]     (defaults: 5, 100000)
set -euo pipefail
R=5
W=100000
while getopts "r:n:" o; do
  case $o in
    r) R=$OPTARG ;;
    n) W=$OPTARG ;;
    *) echo "usage: $0 [-r rounds] [-n waiters]" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/bench/lib.sh"
bench_build inflight_bench waiters_bench
bench_workdir scale
bench_start_redis
echo "hilock scale bench: hilock $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')," \
  "redis-server $(redis_version), $(nproc) cores (shared with other work)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"

field() { sed -n "s/.* $1=\([0-9.]*\) .*/\1/p" "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
wall= ; last= ; cpu=
for r in $(seq "$R"); do
  if [ $((r % 2)) = 1 ]; then sizes="1000 100000"; else sizes="100000 1000"; fi
  for n in $sizes; do
    "$BUILD/bench/c/inflight_bench" -n "$n" "$URL" >"$WORK/inflight.$r.$n" || true
    sed "s/^/round $r: /" "$WORK/inflight.$r.$n"
  done
  a="$WORK/inflight.$r.1000" b="$WORK/inflight.$r.100000"
  if [ -n "$(field start_us "$a")" ] && [ -n "$(field start_us "$b")" ]; then
    w=$(ratio "$(field start_us "$b")" "$(field start_us "$a")")
    l=$(ratio "$(field start_us_last "$b")" "$(field start_us "$a")")
    c=$(ratio "$(field start_cpu_us "$b")" "$(field start_cpu_us "$a")")
    echo "round $r: 100k / 1k: start_us $w, start_us_last $l, start_cpu_us $c"
    wall="$wall $w"; last="$last $l"; cpu="$cpu $c"
  fi
done
if [ -n "$wall" ]; then
  echo "start cost 100k / 1k (target <= 2), median of $R rounds:" \
    "wall $(median "$wall") ($wall ), last 1,000 calls $(median "$last") ($last )," \
    "CPU $(median "$cpu") ($cpu )"
fi
echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
rc=0
"$BUILD/bench/c/waiters_bench" -n "$W" "$URL" || rc=$?
echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
