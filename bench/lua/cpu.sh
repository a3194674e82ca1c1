#!/usr/bin/env bash
# CPU cost of the OpenResty driver per uncontended acquire+release pair:
# user+sys time of the nginx worker (from /proc) over N pairs of /bench,
# for the driver in the tree and, when given, another driver file (A/B on
# the same server, alternating). Wall-clock rates drift on a loaded shared
# machine; the worker's own CPU time per pair does much less.
# Usage: bench/lua/cpu.sh [pairs] [rounds] [other-driver.lua]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../../tests/lua/lib.sh"
. "$here/../../tests/openresty/lib.sh"
trap hl_cleanup EXIT
trap 'exit 130' INT TERM
N="${1:-20000}"; ROUNDS="${2:-5}"; OTHER="${3:-}"
hl_build >/dev/null || { echo "cpu: build failed"; exit 1; }
hl_start_redis >/dev/null || exit 1
ticks=$(getconf CLK_TCK)
# one nginx per driver, each with lua/resty/hilock.lua taken from its own root
roots=("$HL_ROOT"); names=(tree)
if [ -n "$OTHER" ]; then
  hl_tmpdir; chmod 755 "$HL_TMP"; alt="$HL_TMP/root"; mkdir -p "$alt/lua/resty" "$alt/tests"
  cp "$OTHER" "$alt/lua/resty/hilock.lua"; cp -r "$here/../../tests/openresty" "$alt/tests/"
  roots+=("$alt"); names+=(other)
fi
ports=(); workers=(); logs=()
for r in "${roots[@]}"; do
  HL_ROOT_SAVE="$HL_ROOT"; HL_ROOT="$r"; hl_start_nginx >/dev/null || exit 1; HL_ROOT="$HL_ROOT_SAVE"
  ports+=("$NGINX_PORT"); logs+=("$NGINX_TMP/error.log")
  w=""; for _ in $(seq 1 50); do w=$(pgrep -P "$NGINX_PID" | head -1); [ -n "$w" ] && break; sleep 0.1; done
  workers+=("$w")
done
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
declare -A per
for round in $(seq 1 "$ROUNDS"); do
  for i in "${!ports[@]}"; do
    curl -sS "http://127.0.0.1:${ports[$i]}/bench?n=200" >/dev/null # warm
    c0=$(cpu "${workers[$i]}")
    out=$(curl -sS --max-time 300 "http://127.0.0.1:${ports[$i]}/bench?n=$N")
    c1=$(cpu "${workers[$i]}")
    us=$(awk -v t=$((c1 - c0)) -v hz="$ticks" -v n="$N" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
    per[${names[$i]}]+=" $us"
    case "$out" in "$N "*) ;; *) echo "bench request failed: $out"; grep -m3 "not found\|no file .*app\|no file .*resty" "${logs[$i]}"; exit 1 ;; esac
    echo "round $round ${names[$i]}: $out -> worker CPU $us us/pair"
  done
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for n in "${names[@]}"; do echo "median worker CPU per pair, $n: $(echo "${per[$n]}" | median) us"; done
