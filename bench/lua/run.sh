#!/usr/bin/env bash
# Uncontended acquire+release pairs/s: C API vs LuaJIT module vs the
# OpenResty driver (one request looping), against the same throwaway
# redis-server, plus the physical limit (redis-benchmark EVALSHA of the lock
# script, 1 connection: a pair needs two such round trips).
# Usage: bench/lua/run.sh [pairs per slice] [groups]   (default 1000, 21)
# The machine is shared and noisy: the loops run in short slices, one
# group after another; in each group the OpenResty slice sits between the C
# slice and the LuaJIT slice (C first in odd groups, last in even ones), so
# each ratio compares slices run within ~0.1 s of each other. The C client
# stays open across its slices (c_pairs reads one slice count per line), the
# nginx worker too; the summary gives the per-group ratios' median and
# quartiles.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../../tests/lua/lib.sh"
. "$here/../../tests/openresty/lib.sh"
trap hl_cleanup EXIT
trap 'exit 130' INT TERM
N="${1:-1000}"; ROUNDS="${2:-21}"

hl_build || { echo "bench: build failed"; exit 1; }
hl_tmpdir; B="$HL_TMP"
hiredis_inc=$(sed -n 's/^HILOCK_HIREDIS_INCLUDE:INTERNAL=//p' "$HL_BUILD/CMakeCache.txt")
static_libs=$(sed -n 's/^HILOCK_STATIC_LIBS:INTERNAL=//p' "$HL_BUILD/CMakeCache.txt")
gcc -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -I"$HL_ROOT/libcore/include" -I"$hiredis_inc" "$here/c_pairs.c" \
  "$HL_BUILD/libcore/libhilock.a" $static_libs -o "$B/c_pairs" || { echo "bench: cannot build c_pairs"; exit 1; }
hl_start_redis || exit 1
hl_start_nginx || exit 1

# the lock script as the library embeds it ("-- #include f" lines replaced by f)
script() { awk -v dir="$HL_ROOT/libcore/scripts" '/^-- #include / { while ((getline l < (dir "/" $3)) > 0) print l; next } { print }' "$HL_ROOT/libcore/scripts/$1"; }
sha=$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(script lock.lua)")
rate() { awk -v n="$1" -v ms="$2" 'BEGIN { printf "%.0f", n * 1000 / ms }'; }
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
quart() { tr ' ' '\n' | sed '/^$/d' | sort -n |
  awk '{a[NR]=$1} END {printf "%s [%s..%s]", a[int((NR+1)/2)], a[int((NR+3)/4)], a[int((3*NR+3)/4)]}'; }
# the C client, open across slices: one count in, "<pairs> <ms>" out
coproc CPAIRS { exec "$B/c_pairs" "$REDIS_URL" -; }
HL_PIDS+=("$CPAIRS_PID")
c_slice() { echo "$N" >&"${CPAIRS[1]}" && read -r n ms <&"${CPAIRS[0]}" && rate "$n" "$ms"; }
o_slice() { read -r n ms < <(curl -sS --max-time 120 "http://127.0.0.1:$NGINX_PORT/bench?n=$N${1:-}") && rate "$n" "$ms"; }
j_slice() { read -r n ms < <(LUA_CPATH="$HL_BUILD/lua/luajit/?.so" luajit "$here/lua_pairs.lua" "$REDIS_URL" "$N") &&
            rate "$n" "$ms"; }
# warm-up (JIT traces, pooled connections, the C client's first connection)
c_slice >/dev/null && o_slice >/dev/null && o_slice "&raw=1" >/dev/null && j_slice >/dev/null ||
  { echo "bench: warm-up failed"; exit 1; }
c_r=""; j_r=""; o_r=""; l_r=""; jc_r=""; oc_r=""; cl_r=""; f_r=""; of_r=""
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then
    c=$(c_slice) && o=$(o_slice) && f=$(o_slice "&raw=1") && j=$(j_slice) || { echo "bench: slice failed"; exit 1; }
  else
    j=$(j_slice) && f=$(o_slice "&raw=1") && o=$(o_slice) && c=$(c_slice) || { echo "bench: slice failed"; exit 1; }
  fi
  rps=$(redis-benchmark -p "$REDIS_PORT" -c 1 -n $((2 * N)) -q --csv \
        -r 1000000000 EVALSHA "$sha" 1 bench:limit 10000 owner 3000 \
        'hilock_acquire_latch:{bench:limit}:owner:0:__rand_int__' | tail -1 | cut -d, -f2 | tr -d '"')
  l=$(awk -v r="$rps" 'BEGIN { printf "%.0f", r / 2 }')
  echo "group $r: C $c pairs/s, OpenResty $o, its floor $f, LuaJIT $j, limit (EVALSHA rps/2) $l"
  c_r+=" $c"; j_r+=" $j"; o_r+=" $o"; l_r+=" $l"; f_r+=" $f"
  of_r+=" $(awk -v a="$o" -v b="$f" 'BEGIN { printf "%.3f", a / b }')"
  jc_r+=" $(awk -v a="$j" -v b="$c" 'BEGIN { printf "%.3f", a / b }')"
  oc_r+=" $(awk -v a="$o" -v b="$c" 'BEGIN { printf "%.3f", a / b }')"
  cl_r+=" $(awk -v a="$c" -v b="$l" 'BEGIN { printf "%.3f", a / b }')"
done
c=$(echo "$c_r" | median); j=$(echo "$j_r" | median); o=$(echo "$o_r" | median); l=$(echo "$l_r" | median)
f=$(echo "$f_r" | median)
echo "median of $ROUNDS groups, slices of $N pairs, 1 connection each; load: $(cut -d" " -f1-3 /proc/loadavg)"
awk -v c="$c" -v j="$j" -v o="$o" -v l="$l" -v f="$f" 'BEGIN {
  printf "  C API            %8d pairs/s\n", c
  printf "  LuaJIT module    %8d pairs/s\n", j
  printf "  OpenResty driver %8d pairs/s\n", o
  printf "  OpenResty floor  %8d pairs/s   (the same commands, built beforehand, on one cosocket)\n", f
  printf "  limit            %8d pairs/s   (redis-benchmark -c 1 EVALSHA lock script with its latch, rps/2)\n", l }'
echo "per-group ratios, median [quartiles]:"
echo "  LuaJIT/C      $(echo "$jc_r" | quart)"
echo "  OpenResty/C   $(echo "$oc_r" | quart)"
echo "  OpenResty/its floor  $(echo "$of_r" | quart)"
echo "  C/limit       $(echo "$cl_r" | quart)"
