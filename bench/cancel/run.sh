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
. "$ROOT/bench/lib.sh"
bench_build cancel_bench
bench_workdir cancelbench
bench_start_redis
echo "hilock cancel bench: redis-server $(redis_version)," \
  "port $PORT, $N rounds per kind, $(nproc) cores (shared with other work)"
"$BUILD/bench/cancel/cancel_bench" -n "$N" "$URL"
