#!/usr/bin/env bash
# Plain-Lua suite: the hilock module under Lua 5.1, Lua 5.4 and LuaJIT
# against a throwaway redis-server, then on a Redis Cluster and a Sentinel
# set-up (topo.sh, test_topologies.lua). Exit 0 = every check passed.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
trap hl_cleanup EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
hl_build || { echo "lua: build failed"; exit 1; }
fails=0; passes=0

# Only luaopen_hilock may leave each module.
for spec in "${HL_INTERPS[@]}"; do
  IFS=: read -r label bin dir <<<"$spec"
  so="$HL_BUILD/lua/$dir/hilock.so"
  exported="$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort | tr '\n' ' ')"
  if [ "$exported" = "luaopen_hilock " ]; then
    echo "  ok    $label: exports only luaopen_hilock"; passes=$((passes+1))
  else
    echo "  FAIL  $label: exports: $exported"; fails=$((fails+1))
  fi
done

# An allocator that runs out while the module pushes results or registers a
# hold: no C memory may stay behind (tests/lua/oom.c; Lua 5.4 host, ~3 s).
hl_tmpdir
if cc -std=c11 -Wall -Wextra -Werror -O1 -o "$HL_TMP/oom" "$here/oom.c" -I/usr/include/lua5.4 \
     -llua5.4 -ldl && "$HL_TMP/oom" "$HL_BUILD/lua/5.4/hilock.so"; then
  echo "  ok    5.4: out of memory leaves no C memory"; passes=$((passes+1))
else
  echo "  FAIL  5.4: out of memory (tests/lua/oom.c)"; fails=$((fails+1))
fi

# A TLS server (throwaway CA from tests/c/make_certs.sh) for the TLS test.
hl_tmpdir; certs="$HL_TMP/certs"; TLS_CA=""; TLS_URL=""
if bash "$HL_ROOT/tests/c/make_certs.sh" "$certs"; then
  for try in 1 2 3; do # a new TLS port each try: the last one may have been taken
    hl_free_port || break
    tls_port="$HL_PORT"
    if hl_start_redis --tls-port "$tls_port" --tls-cert-file "$certs/server.crt" \
         --tls-key-file "$certs/server.key" --tls-ca-cert-file "$certs/ca.crt" \
         --tls-auth-clients no; then
      TLS_CA="$certs/ca.crt"; TLS_URL="rediss://127.0.0.1:$tls_port"
      break
    fi
  done
fi
[ -n "$TLS_URL" ] || { echo "lua: TLS redis failed"; exit 1; }
export TLS_URL TLS_CA
hl_start_redis || { echo "lua: redis failed"; exit 1; }
hl_tmpdir
for spec in "${HL_INTERPS[@]}"; do
  IFS=: read -r label bin dir <<<"$spec"
  echo "== $label ($bin)"
  if LUA_CPATH="$HL_BUILD/lua/$dir/?.so" LUA_PATH="$HL_ROOT/lua/?.lua;;" \
     REDIS_URL="$REDIS_URL" HL_TMP="$HL_TMP" HL_WORKER="$here/worker.lua" \
     timeout 60 "$bin" "$here/test_hilock.lua"; then
    passes=$((passes+1))
  else
    echo "  FAIL  $label suite"; fails=$((fails+1))
  fi
done
# Memory errors and definite leaks in the module: the 5.4 run again under
# valgrind memcheck (skipped when valgrind is missing or HILOCK_LUA_VALGRIND=0).
if [ "${HILOCK_LUA_VALGRIND:-1}" = 1 ] && command -v valgrind >/dev/null; then
  echo "== 5.4 under valgrind"
  if LUA_CPATH="$HL_BUILD/lua/5.4/?.so" LUA_PATH="$HL_ROOT/lua/?.lua;;" \
     REDIS_URL="$REDIS_URL" HL_TMP="$HL_TMP" HL_WORKER="$here/worker.lua" \
     timeout 240 valgrind --quiet --error-exitcode=99 --leak-check=full \
       --show-leak-kinds=definite --errors-for-leak-kinds=definite \
       lua5.4 "$here/test_hilock.lua" >"$HL_TMP/valgrind.out" 2>&1; then
    tail -1 "$HL_TMP/valgrind.out"; passes=$((passes+1))
  else
    cat "$HL_TMP/valgrind.out"; echo "  FAIL  5.4 under valgrind"; fails=$((fails+1))
  fi
fi
# The same module on Redis Cluster and Sentinel URLs (tests/lua/topo.sh
# starts the servers; HILOCK_LUA_TOPOLOGIES=0 skips this part).
if [ "${HILOCK_LUA_TOPOLOGIES:-1}" = 1 ]; then
  . "$here/topo.sh"
  echo "== cluster (3 masters + 3 replicas) and sentinel (master, replica, 3 sentinels)"
  if hl_start_cluster && hl_start_sentinel; then
    hl_tmpdir
    for spec in "${HL_INTERPS[@]}"; do
      IFS=: read -r label bin dir <<<"$spec"
      echo "== $label on cluster and sentinel URLs"
      if LUA_CPATH="$HL_BUILD/lua/$dir/?.so" LUA_PATH="$HL_ROOT/lua/?.lua;;" \
         CLUSTER_URL="$CLUSTER_URL" CLUSTER_PORTS="${CLUSTER_PORTS[*]}" \
         SENTINEL_URL="$SENTINEL_URL" SENT_MASTER_PORT="$SENT_MASTER_PORT" \
         SENT_REPLICA_PORT="$SENT_REPLICA_PORT" HL_TMP="$HL_TMP" HL_WORKER="$here/worker.lua" \
         timeout 60 "$bin" "$here/test_topologies.lua"; then
        passes=$((passes+1))
      else
        echo "  FAIL  $label topologies"; fails=$((fails+1))
      fi
    done
  else
    echo "  FAIL  cluster/sentinel set-up"; fails=$((fails+1))
  fi
fi
echo "lua suite: $passes passed, $fails failed ($(( $(date +%s) - start ))s)"
[ "$fails" -eq 0 ]
