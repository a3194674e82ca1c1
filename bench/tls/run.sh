#!/usr/bin/env bash
# TLS cost (issue 16), as ratios measured in one run on one throwaway
# redis-server that listens on a plain port and a TLS port (throwaway CA from
# tests/c/make_certs.sh):
#
#   bench/tls/run.sh [-s slices] [-n pairs] [-m handoffs]
#
# Per slice (short, alternating: rates drift within seconds on a shared
# machine; the medians over slices are reported):
#   1. redis-benchmark -c 1 EVALSHA <the lock script>, plain and --tls: the
#      limit of one connection each way
#   2. tls_pairs: uncontended acquire+release pairs/s through the library,
#      plain and TLS clients in interleaved rounds
# Then hand-off latency, 8 processes on one reentrant lock (handoff_bench),
# over plain and over TLS, and the raw floor (PUBLISH -> subscriber -> one
# EVALSHA, plain).
set -euo pipefail
SLICES=9 PAIRS=400 HANDOFFS=2000
while getopts "s:n:m:" o; do
  case $o in
    s) SLICES=$OPTARG ;; n) PAIRS=$OPTARG ;; m) HANDOFFS=$OPTARG ;;
    *) echo "usage: $0 [-s slices] [-n pairs] [-m handoffs]" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/bench/lib.sh"
bench_build tls_pairs handoff_bench lock_bench
BIN=$BUILD/bench

bench_workdir tlsbench
bash "$ROOT/tests/c/make_certs.sh" "$WORK/certs"
bench_start_redis "$WORK/certs"
CA=$WORK/certs/ca.crt

# redis-benchmark --csv, one test: field 2 = rps
rb() { redis-benchmark -c 1 -n 3000 --csv "$@" | tail -1 | tr -d '"' | cut -d, -f2; }

"$BIN/c/lock_bench" -n 100 -r 1 "$URL" >"$WORK/warm" # loads the scripts
SHA=$(val lock_sha "$WORK/warm")
OWNER=00000000-0000-0000-0000-000000000000:9
echo "hilock TLS bench: redis-server $(redis_version)," \
  "plain port $PORT and TLS port $TPORT, $(nproc) cores (shared: ratios are what count)"
P= T= Q= LP= LT= LQ=
for s in $(seq "$SLICES"); do
  lp=$(rb -p "$PORT" EVALSHA "$SHA" 1 bench:rb 30000 "$OWNER")
  lt=$(rb -p "$TPORT" --tls --cacert "$CA" EVALSHA "$SHA" 1 bench:rb 30000 "$OWNER")
  redis-cli -p "$PORT" DEL bench:rb >/dev/null
  "$BIN/tls/tls_pairs" -n "$PAIRS" -r 2 "$URL" "$TURL" >"$WORK/pairs"
  P="$P $(val plain_pairs_per_s "$WORK/pairs")"; T="$T $(val tls_pairs_per_s "$WORK/pairs")"
  Q="$Q $(val tls_over_plain "$WORK/pairs")"
  LP="$LP $lp"; LT="$LT $lt"; LQ="$LQ $(awk -v a="$lt" -v b="$lp" 'BEGIN {printf "%.3f", a/b}')"
done
"$BIN/c/handoff_bench" -k floor -m "$HANDOFFS" "$URL" >"$WORK/floor"
"$BIN/c/handoff_bench" -k reentrant -p 8 -m "$HANDOFFS" "$URL" >"$WORK/plain_ho"
"$BIN/c/handoff_bench" -k reentrant -p 8 -m "$HANDOFFS" "$TURL" >"$WORK/tls_ho"

printf '  %-58s %s\n' "redis-benchmark EVALSHA lock script, 1 conn, plain (rps)" "$(median "$LP")"
printf '  %-58s %s\n' "redis-benchmark EVALSHA lock script, 1 conn, TLS (rps)" "$(median "$LT")"
printf '  %-58s %s\n' "  limit TLS / plain (median of per-slice ratios)" "$(median "$LQ")"
printf '  %-58s %s\n' "library pairs/s, plain" "$(median "$P")"
printf '  %-58s %s\n' "library pairs/s, TLS" "$(median "$T")"
printf '  %-58s %s\n' "  pairs TLS / plain (median of per-round ratios)" "$(median "$Q")"
# hand-off figures from the unlock CALL (never negative; see docs/benchmarks.md)
c50() { val call_p50_us "$WORK/$1"; }
c99() { val call_p99_us "$WORK/$1"; }
printf '  %-58s %s / %s us\n' "hand-off p50 / p99 from the unlock call, 8 procs, plain" "$(c50 plain_ho)" "$(c99 plain_ho)"
printf '  %-58s %s / %s us\n' "hand-off p50 / p99 from the unlock call, 8 procs, TLS" "$(c50 tls_ho)" "$(c99 tls_ho)"
printf '  %-58s %s us\n' "hand-off floor p50 from the PUBLISH call (raw, plain)" "$(c50 floor)"
printf '  %-58s %s\n' "  TLS hand-off p50 / plain hand-off p50" \
  "$(awk -v a="$(c50 tls_ho)" -v f="$(c50 plain_ho)" 'BEGIN {printf "%.2f", a/f}')"
printf '  %-58s %s\n' "  TLS hand-off p50 / floor p50" \
  "$(awk -v a="$(c50 tls_ho)" -v f="$(c50 floor)" 'BEGIN {printf "%.2f", a/f}')"
for f in plain_ho tls_ho; do
  e=$(val errors "$WORK/$f"); o=$(val overlaps "$WORK/$f")
  [ "${e:-0}" = 0 ] && [ "${o:-0}" = 0 ] || echo "  WARNING: $f: errors=$e overlaps=$o"
done
