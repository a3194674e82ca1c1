# nginx + lua module helpers (source after tests/lua/lib.sh).

# Start nginx (worker_processes 1) with tests/openresty/nginx.conf.in (or
# the template $HL_NGINX_CONF names; it must serve /ping):
# -> NGINX_PORT, NGINX_PID, NGINX_TMP. Needs HL_BUILD and REDIS_URL.
hl_start_nginx() {
  local try
  hl_tmpdir; NGINX_TMP="$HL_TMP"
  for try in 1 2 3 4 5; do
    hl_free_port || return 1
    sed -e "s|@TMP@|$NGINX_TMP|g" -e "s|@PORT@|$HL_PORT|g" -e "s|@ROOT@|$HL_ROOT|g" \
        -e "s|@CPATH@|$HL_BUILD/lua/luajit|g" \
        -e "s|@TLS_CA_LINE@|${HL_TLS_CA:+lua_ssl_trusted_certificate $HL_TLS_CA; lua_ssl_verify_depth 3;}|g" \
        "${HL_NGINX_CONF:-$HL_ROOT/tests/openresty/nginx.conf.in}" >"$NGINX_TMP/nginx.conf"
    : >"$NGINX_TMP/error.log"
    REDIS_URL="$REDIS_URL" REDIS_AUTH_URL="${REDIS_AUTH_URL:-}" CLUSTER_URL="${CLUSTER_URL:-}" \
      SENTINEL_URL="${SENTINEL_URL:-}" nginx -p "$NGINX_TMP" -c "$NGINX_TMP/nginx.conf" \
      -e "$NGINX_TMP/error.log" >"$NGINX_TMP/stdout.log" 2>&1 &
    NGINX_PID=$!
    HL_PIDS+=("$NGINX_PID")
    local deadline=$(( $(date +%s) + 10 ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
      kill -0 "$NGINX_PID" 2>/dev/null || break
      if [ "$(curl -s --max-time 1 "http://127.0.0.1:$HL_PORT/ping" 2>/dev/null)" = pong ]; then
        # nginx retries a bind that failed and logs each failure: a port
        # another process held for a moment leaves [emerg] lines that
        # test (f) would count. Start again on another port instead.
        grep -q 'bind() to .* failed' "$NGINX_TMP/error.log" && break
        NGINX_PORT="$HL_PORT"; return 0
      fi
      sleep 0.05
    done
    kill -TERM "$NGINX_PID" 2>/dev/null; wait "$NGINX_PID" 2>/dev/null
    cat "$NGINX_TMP/error.log" >&2
  done
  return 1
}

# A free loopback port whose cluster bus port (+10000) is free too: -> HL_PORT
hl_free_port_pair() {
  local i
  for i in $(seq 1 100); do
    HL_PORT=$(( 20000 + (RANDOM * 32768 + RANDOM) % 25000 ))
    hl_port_free "$HL_PORT" && hl_port_free $((HL_PORT + 10000)) && return 0
  done
  return 1
}

hl_wait_until() { # deadline_ms command... : run command until it succeeds
  local deadline=$(( $(date +%s%3N) + $1 )) rc; shift
  while [ "$(date +%s%3N)" -lt "$deadline" ]; do
    "$@"; rc=$?
    [ "$rc" = 0 ] && return 0
    [ "$rc" = 2 ] && return 1 # hopeless
    sleep 0.05
  done
  return 1
}

_hl_pong() { # port pid: answering (stop waiting when the process died)
  kill -0 "$2" 2>/dev/null || return 2
  [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ]
}

_hl_cluster_ok() {
  local p
  local info slots # (no "cmd | grep -q": the callers run with pipefail)
  for p in "${CLUSTER_PORTS[@]}"; do
    info=$(redis-cli -p "$p" CLUSTER INFO 2>/dev/null)
    [[ "$info" == *cluster_state:ok* ]] || return 1
    slots=$(redis-cli -p "$p" CLUSTER SLOTS 2>/dev/null)
    [ -n "$slots" ] || return 1
  done
}

# A 3-master Redis Cluster (no replicas) on loopback:
# -> CLUSTER_PORTS (array), CLUSTER_URL.
hl_start_cluster() {
  local i p dir
  CLUSTER_PORTS=()
  local try pid up
  for i in 1 2 3; do
    hl_tmpdir; dir="$HL_TMP"; up=0
    for try in 1 2 3 4 5; do # another process may take the port meanwhile
      hl_free_port_pair || return 1
      p="$HL_PORT"
      redis-server --bind 127.0.0.1 --port "$p" --save '' --appendonly no --dir "$dir" \
        --repl-diskless-sync no --logfile "$dir/redis.log" --daemonize no --cluster-enabled yes \
        --cluster-config-file nodes.conf --cluster-node-timeout 3000 >/dev/null 2>&1 &
      pid=$!
      HL_PIDS+=("$pid")
      if hl_wait_until 10000 _hl_pong "$p" "$pid"; then up=1; break; fi
      kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
      rm -f "$dir/nodes.conf"
    done
    [ "$up" = 1 ] || return 1
    CLUSTER_PORTS+=("$p")
  done
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${CLUSTER_PORTS[@]}") --cluster-yes \
    >"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; return 1; }
  hl_wait_until 20000 _hl_cluster_ok || { hl_log "cluster not ok"; return 1; }
  CLUSTER_URL="redis+cluster://127.0.0.1:${CLUSTER_PORTS[0]},127.0.0.1:${CLUSTER_PORTS[1]}"
}

_hl_sentinels_ready() {
  local p out
  for p in "${SENTINEL_PORTS[@]}"; do
    out=$(redis-cli -p "$p" SENTINEL replicas hm 2>/dev/null)
    grep -qx "$SENT_REPLICA_PORT" <<<"$out" || return 1
  done
}

# 1 master + 1 replica + 3 sentinels (master name "hm"):
# -> SENT_MASTER_PORT, SENT_REPLICA_PORT, SENT_REPLICA_PID, SENTINEL_PORTS,
#    SENTINEL_URL.
hl_start_sentinels() {
  local i dir
  hl_start_redis || return 1
  SENT_MASTER_PORT="$REDIS_PORT"
  hl_start_redis --replicaof 127.0.0.1 "$SENT_MASTER_PORT" || return 1
  SENT_REPLICA_PORT="$REDIS_PORT"; SENT_REPLICA_PID="$REDIS_PID"
  hl_wait_until 10000 bash -c "redis-cli -p $SENT_REPLICA_PORT INFO replication | grep -q master_link_status:up" ||
    { hl_log "replica not in sync"; return 1; }
  SENTINEL_PORTS=()
  local try pid up
  for i in 1 2 3; do
    hl_tmpdir; dir="$HL_TMP"; up=0
    for try in 1 2 3 4 5; do # a "free" port may be taken meanwhile
      hl_free_port || return 1
      cat >"$dir/sentinel.conf" <<CONF
port $HL_PORT
bind 127.0.0.1
daemonize no
dir $dir
logfile $dir/sentinel.log
sentinel monitor hm 127.0.0.1 $SENT_MASTER_PORT 2
sentinel down-after-milliseconds hm 1000
sentinel failover-timeout hm 5000
CONF
      redis-server "$dir/sentinel.conf" --sentinel >/dev/null 2>&1 &
      pid=$!
      HL_PIDS+=("$pid")
      if hl_wait_until 10000 _hl_pong "$HL_PORT" "$pid"; then up=1; break; fi
      kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    done
    [ "$up" = 1 ] || return 1
    SENTINEL_PORTS+=("$HL_PORT")
  done
  hl_wait_until 15000 _hl_sentinels_ready || { hl_log "sentinels do not see the replica"; return 1; }
  SENTINEL_URL="redis+sentinel://127.0.0.1:${SENTINEL_PORTS[0]},127.0.0.1:${SENTINEL_PORTS[1]},127.0.0.1:${SENTINEL_PORTS[2]}/hm"
}
