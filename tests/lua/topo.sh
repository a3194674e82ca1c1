# Redis Cluster and Sentinel set-ups for the Lua suites (source after lib.sh;
# bash). Every process goes into HL_PIDS, so hl_cleanup stops it.

# Wait until "$@" succeeds, polling every 50 ms, for at most $1 seconds.
hl_wait() { # secs cmd...
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@"; do
    [ "$(date +%s)" -ge "$deadline" ] && return 1
    sleep 0.05
  done
}

# A cluster node needs its bus port (port + 10000) free too; both are taken
# below the ephemeral range (32768-) so no outgoing connection holds them.
hl_cluster_port() { # -> HL_PORT
  local i
  for i in $(seq 1 100); do
    HL_PORT=$(( 10000 + (RANDOM * 32768 + RANDOM) % 12000 ))
    hl_port_free "$HL_PORT" && hl_port_free $(( HL_PORT + 10000 )) && return 0
  done
  return 1
}

# Start one cluster node (a few tries: a port can be taken meanwhile) -> HL_PORT.
hl_cluster_node() {
  local try dir pid
  hl_tmpdir; dir="$HL_TMP"
  for try in 1 2 3 4 5; do
    hl_cluster_port || return 1
    redis-server --bind 127.0.0.1 --port "$HL_PORT" --save '' --appendonly no \
      --repl-diskless-sync no --dir "$dir" --logfile "$dir/redis.log" --daemonize no --cluster-enabled yes \
      --cluster-config-file nodes.conf --cluster-node-timeout 3000 >/dev/null 2>&1 &
    pid=$!; HL_PIDS+=("$pid")
    hl_wait 10 eval "! kill -0 $pid 2>/dev/null || redis-cli -p $HL_PORT ping 2>/dev/null | grep -q PONG"
    kill -0 "$pid" 2>/dev/null && return 0
    wait "$pid" 2>/dev/null
  done
  hl_log "could not start a cluster node"; return 1
}

_hl_cluster_ok() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do
    redis-cli -p "$p" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
}

_hl_replicas_online() {
  local p info n=0
  for p in "${CLUSTER_PORTS[@]}"; do
    info="$(redis-cli -p "$p" INFO replication 2>/dev/null)"
    case "$info" in *role:master*)
      case "$info" in *connected_slaves:1*state=online*) n=$((n+1)) ;; *) return 1 ;; esac ;;
    esac
  done
  [ "$n" -eq 3 ]
}

# 3 masters + 3 replicas: -> CLUSTER_PORTS (array), CLUSTER_URL.
hl_start_cluster() {
  local i dir
  CLUSTER_PORTS=()
  for i in 1 2 3 4 5 6; do
    hl_cluster_node || return 1
    dir="$HL_TMP"
    CLUSTER_PORTS+=("$HL_PORT")
  done
  local nodes=()
  for i in "${CLUSTER_PORTS[@]}"; do nodes+=("127.0.0.1:$i"); done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 ||
    { cat "$dir/create.log" >&2; return 1; }
  hl_wait 20 _hl_cluster_ok || { hl_log "cluster_state never ok"; return 1; }
  hl_wait 20 _hl_replicas_online || { hl_log "cluster replicas not online"; return 1; }
  CLUSTER_URL="redis+cluster://127.0.0.1:${CLUSTER_PORTS[0]},127.0.0.1:${CLUSTER_PORTS[1]}"
}

# 1 master, 1 replica, 3 sentinels monitoring "hm":
# -> SENT_MASTER_PORT, SENT_REPLICA_PORT, SENTINEL_URL.
hl_start_sentinel() {
  local i pid conf seeds=""
  hl_start_redis || return 1
  SENT_MASTER_PORT="$REDIS_PORT"
  hl_start_redis --replicaof 127.0.0.1 "$SENT_MASTER_PORT" || return 1
  SENT_REPLICA_PORT="$REDIS_PORT"
  hl_wait 10 eval "redis-cli -p $SENT_MASTER_PORT INFO replication | grep -q 'state=online'" ||
    { hl_log "replica never online"; return 1; }
  for i in 1 2 3; do
    # a port that was free when picked can be taken before the sentinel
    # binds it (the machine is shared): then it exits at once, try another
    local try up=0
    for try in 1 2 3 4 5; do
      hl_free_port || return 1
      hl_tmpdir; conf="$HL_TMP/sentinel.conf"
      printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor hm 127.0.0.1 %s 2\n' \
        "$HL_PORT" "$HL_TMP" "$SENT_MASTER_PORT" >"$conf"
      printf 'sentinel down-after-milliseconds hm 1000\nsentinel failover-timeout hm 5000\n' >>"$conf"
      redis-server "$conf" --sentinel --logfile "$HL_TMP/sentinel.log" >/dev/null 2>&1 &
      pid=$!; HL_PIDS+=("$pid")
      if hl_wait 10 eval "! kill -0 $pid 2>/dev/null ||
                          redis-cli -p $HL_PORT SENTINEL get-master-addr-by-name hm 2>/dev/null |
                          grep -qx $SENT_MASTER_PORT" && kill -0 "$pid" 2>/dev/null; then
        up=1; break
      fi
      grep -q "Address already in use" "$HL_TMP/sentinel.log" 2>/dev/null || break
      hl_log "sentinel port $HL_PORT was taken; another port"
    done
    [ "$up" = 1 ] || { hl_log "sentinel on $HL_PORT did not start"; return 1; }
    seeds="$seeds${seeds:+,}127.0.0.1:$HL_PORT"
  done
  SENTINEL_URL="redis+sentinel://$seeds/hm"
}
