# nginx + lua module helpers (source after tests/lua/lib.sh).

# Start nginx (worker_processes 1) with tests/openresty/nginx.conf.in:
# -> NGINX_PORT, NGINX_PID, NGINX_TMP. Needs HL_BUILD and REDIS_URL.
hl_start_nginx() {
  local try
  hl_tmpdir; NGINX_TMP="$HL_TMP"
  for try in 1 2 3 4 5; do
    hl_free_port || return 1
    sed -e "s|@TMP@|$NGINX_TMP|g" -e "s|@PORT@|$HL_PORT|g" -e "s|@ROOT@|$HL_ROOT|g" \
        -e "s|@CPATH@|$HL_BUILD/lua/luajit|g" \
        "$HL_ROOT/tests/openresty/nginx.conf.in" >"$NGINX_TMP/nginx.conf"
    : >"$NGINX_TMP/error.log"
    REDIS_URL="$REDIS_URL" REDIS_AUTH_URL="${REDIS_AUTH_URL:-}" nginx -p "$NGINX_TMP" -c "$NGINX_TMP/nginx.conf" \
      -e "$NGINX_TMP/error.log" >"$NGINX_TMP/stdout.log" 2>&1 &
    NGINX_PID=$!
    HL_PIDS+=("$NGINX_PID")
    local deadline=$(( $(date +%s) + 10 ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
      kill -0 "$NGINX_PID" 2>/dev/null || break
      if [ "$(curl -s --max-time 1 "http://127.0.0.1:$HL_PORT/ping" 2>/dev/null)" = pong ]; then
        NGINX_PORT="$HL_PORT"; return 0
      fi
      sleep 0.05
    done
    kill -TERM "$NGINX_PID" 2>/dev/null; wait "$NGINX_PID" 2>/dev/null
    cat "$NGINX_TMP/error.log" >&2
  done
  return 1
}
