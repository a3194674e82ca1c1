#!/usr/bin/env bash
# Read-write lock figures (issue 17), all in one run against one throwaway
# redis-server, each as a ratio to what the same run measures:
#   - read-lock and write-lock lock+unlock pairs/s / the reentrant lock's
#     (lock_bench -k read|write: both kinds in alternating rounds, median of
#     the per-round ratios; one thread, fixed lease);
#   - writer hand-off after the last reader leaves (handoff_bench -k rw: 3
#     reader processes and a blocked writer; from the last reader's unlock
#     call to the writer's grant), next to the reentrant lock's hand-off
#     (handoff_bench -k reentrant, 4 processes) and the floor (raw PUBLISH ->
#     subscriber -> one EVALSHA, handoff_bench -k floor), all measured from
#     the unlock (PUBLISH) call.
#
#   bench/rwlock/run.sh [-r runs] [-n pairs] [-m handoffs]
set -euo pipefail
RUNS=3; PAIRS=5000; HANDOFFS=500
while getopts "r:n:m:" o; do
  case $o in
    r) RUNS=$OPTARG ;; n) PAIRS=$OPTARG ;; m) HANDOFFS=$OPTARG ;;
    *) echo "usage: $0 [-r runs] [-n pairs] [-m handoffs]" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/bench/lib.sh"
bench_build lock_bench handoff_bench
BIN=$BUILD/bench/c
bench_workdir rwbench
bench_start_redis
echo "hilock read-write lock bench: redis-server $(redis_version) on 127.0.0.1:$PORT," \
  "$(nproc) cores (shared with other work: ratios are what count)"
rr=""; wr=""; rw50=""; re50=""; fl50=""; rwf=""; ref=""
for run in $(seq "$RUNS"); do
  "$BIN/lock_bench" -n "$PAIRS" -r 4 -k read "$URL" >"$WORK/read"
  "$BIN/lock_bench" -n "$PAIRS" -r 4 -k write "$URL" >"$WORK/write"
  "$BIN/handoff_bench" -k floor -m "$HANDOFFS" "$URL" >"$WORK/floor"
  "$BIN/handoff_bench" -k reentrant -p 4 -m "$HANDOFFS" "$URL" >"$WORK/re"
  "$BIN/handoff_bench" -k rw -p 4 -m "$HANDOFFS" "$URL" >"$WORK/rw"
  r=$(val kind_over_reentrant "$WORK/read"); w=$(val kind_over_reentrant "$WORK/write")
  f=$(val call_p50_us "$WORK/floor"); e=$(val call_p50_us "$WORK/re"); x=$(val call_p50_us "$WORK/rw")
  xf=$(awk -v a="$x" -v b="$f" 'BEGIN {printf "%.2f", a/b}')
  ef=$(awk -v a="$e" -v b="$f" 'BEGIN {printf "%.2f", a/b}')
  printf 'run %d: read/reentrant %s, write/reentrant %s; hand-off p50 us from the unlock call: floor %s, reentrant %s (%sx floor), writer after the last reader %s (%sx floor, p99 %s)\n' \
    "$run" "$r" "$w" "$f" "$e" "$ef" "$x" "$xf" "$(val call_p99_us "$WORK/rw")"
  rr="$rr $r"; wr="$wr $w"; fl50="$fl50 $f"; re50="$re50 $e"; rw50="$rw50 $x"; rwf="$rwf $xf"; ref="$ref $ef"
done
echo
echo "medians over $RUNS run(s)"
printf '  %-52s %s\n' "read-lock pairs/s / reentrant pairs/s" "$(median "$rr")"
printf '  %-52s %s\n' "write-lock pairs/s / reentrant pairs/s" "$(median "$wr")"
printf '  %-52s %s\n' "hand-off floor p50 us (from the PUBLISH call)" "$(median "$fl50")"
printf '  %-52s %s  (%s x floor)\n' "reentrant hand-off p50 us, 4 procs" "$(median "$re50")" "$(median "$ref")"
printf '  %-52s %s  (%s x floor)\n' "writer hand-off after the last reader p50 us" "$(median "$rw50")" "$(median "$rwf")"
