#!/usr/bin/env bash
# Uncontended acquire+release pairs/s: C API vs LuaJIT module vs the
# OpenResty driver (one request looping), against the same throwaway
# redis-server, plus the physical limit (redis-benchmark EVALSHA of the lock
# script, 1 connection: a pair needs two such round trips).
# Usage: bench/lua/run.sh [pairs] [rounds]    (default 3000 pairs, 15 rounds)
# The machine is shared and noisy: many short rounds run the four loops back
# to back; the summary gives the per-round ratios' median and quartiles.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../../tests/lua/lib.sh"
. "$here/../../tests/openresty/lib.sh"
trap hl_cleanup EXIT
trap 'exit 130' INT TERM
N="${1:-3000}"; ROUNDS="${2:-15}"

hl_build || { echo "bench: build failed"; exit 1; }
hl_tmpdir; B="$HL_TMP"
hiredis_inc=$(sed -n 's/^HILOCK_HIREDIS_INCLUDE:INTERNAL=//p' "$HL_BUILD/CMakeCache.txt")
static_libs=$(sed -n 's/^HILOCK_STATIC_LIBS:INTERNAL=//p' "$HL_BUILD/CMakeCache.txt")
gcc -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -I"$HL_ROOT/libcore/include" -I"$hiredis_inc" "$here/c_pairs.c" \
  "$HL_BUILD/libcore/libhilock.a" $static_libs -o "$B/c_pairs" || { echo "bench: cannot build c_pairs"; exit 1; }
hl_start_redis || exit 1
hl_start_nginx || exit 1

sha=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(cat "$HL_ROOT/libcore/scripts/lock.lua")")
rate() { awk -v n="$1" -v ms="$2" 'BEGIN { printf "%.0f", n * 1000 / ms }'; }
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
quart() { tr ' ' '\n' | sed '/^$/d' | sort -n |
  awk '{a[NR]=$1} END {printf "%s [%s..%s]", a[int((NR+1)/2)], a[int((NR+3)/4)], a[int((3*NR+3)/4)]}'; }
c_r=""; j_r=""; o_r=""; l_r=""; jc_r=""; oc_r=""; cl_r=""
for r in $(seq 1 "$ROUNDS"); do
  read -r n ms < <("$B/c_pairs" "$REDIS_URL" "$N") || exit 1
  c=$(rate "$n" "$ms")
  read -r n ms < <(LUA_CPATH="$HL_BUILD/lua/luajit/?.so" luajit "$here/lua_pairs.lua" "$REDIS_URL" "$N") || exit 1
  j=$(rate "$n" "$ms")
  read -r n ms < <(curl -sS --max-time 120 "http://127.0.0.1:$NGINX_PORT/bench?n=$N") || exit 1
  o=$(rate "$n" "$ms")
  rps=$(redis-benchmark -p "$REDIS_PORT" -c 1 -n $((2 * N)) -q --csv \
        EVALSHA "$sha" 1 bench:limit 10000 owner | tail -1 | cut -d, -f2 | tr -d '"')
  l=$(awk -v r="$rps" 'BEGIN { printf "%.0f", r / 2 }')
  echo "round $r: C $c pairs/s, LuaJIT $j, OpenResty $o, limit (EVALSHA rps/2) $l"
  c_r+=" $c"; j_r+=" $j"; o_r+=" $o"; l_r+=" $l"
  jc_r+=" $(awk -v a="$j" -v b="$c" 'BEGIN { printf "%.3f", a / b }')"
  oc_r+=" $(awk -v a="$o" -v b="$c" 'BEGIN { printf "%.3f", a / b }')"
  cl_r+=" $(awk -v a="$c" -v b="$l" 'BEGIN { printf "%.3f", a / b }')"
done
c=$(echo "$c_r" | median); j=$(echo "$j_r" | median); o=$(echo "$o_r" | median); l=$(echo "$l_r" | median)
echo "median of $ROUNDS rounds, $N pairs each, 1 connection:"
awk -v c="$c" -v j="$j" -v o="$o" -v l="$l" 'BEGIN {
  printf "  C API            %8d pairs/s\n", c
  printf "  LuaJIT module    %8d pairs/s\n", j
  printf "  OpenResty driver %8d pairs/s\n", o
  printf "  limit            %8d pairs/s   (redis-benchmark -c 1 EVALSHA lock script, rps/2)\n", l }'
echo "per-round ratios, median [quartiles]:"
echo "  LuaJIT/C      $(echo "$jc_r" | quart)"
echo "  OpenResty/C   $(echo "$oc_r" | quart)"
echo "  C/limit       $(echo "$cl_r" | quart)"
