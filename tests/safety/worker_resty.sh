#!/usr/bin/env bash
# One OpenResty safety client: a single nginx process (master_process off,
# daemon off) whose init_worker timer runs worker_resty.lua; exec'd, so the
# harness's process is nginx itself (SIGSTOP pauses the holder and its
# watchdog). Same arguments as worker-c:
#   worker_resty.sh URL LOCK FENCE_PORT PROC_ID SEED SECONDS LOG KEY=VALUE...
# Env: HILOCK_ROOT (repo), HILOCK_LUA_CPATH (folder of the LuaJIT hilock.so).
set -euo pipefail
root="${HILOCK_ROOT:?}"
cpath="${HILOCK_LUA_CPATH:?}"
dir="$7.nginx"
mkdir -p "$dir"
cat >"$dir/nginx.conf" <<CONF
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
env HL_SAFETY_ARGS;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    lua_package_path "$root/lua/?.lua;$root/tests/safety/?.lua;;";
    lua_package_cpath "$cpath/?.so;;";
    lua_socket_log_errors off;
    init_worker_by_lua_block { require("worker_resty").start() }
}
CONF
export HL_SAFETY_ARGS="$*"
exec nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
