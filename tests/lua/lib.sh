# Shared by tests/lua, tests/openresty and bench/lua (source it; bash).
# Builds the Lua modules when needed and starts throwaway redis-server /
# nginx processes on free loopback ports; hl_cleanup (run from an EXIT trap)
# stops every process started here, also on failure.

HL_ROOT="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
HL_PIDS=()
HL_TMPDIRS=()

hl_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

hl_cleanup() {
  local p
  for p in "${HL_PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null
  done
  for p in "${HL_PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  HL_PIDS=()
  for p in "${HL_TMPDIRS[@]}"; do rm -rf "$p"; done
  HL_TMPDIRS=()
}

hl_tmpdir() { # -> path in HL_TMP
  HL_TMP="$(mktemp -d /tmp/hilock-lua.XXXXXX)"
  HL_TMPDIRS+=("$HL_TMP")
}

# A build dir with lua/{5.1,5.4,luajit}/hilock.so and lua/../libcore: use
# $HILOCK_BUILD when it has them, else build our own into build/lua-test.
hl_build() { # -> HL_BUILD
  local b="${HILOCK_BUILD:-}"
  if [ -n "$b" ] && [ -f "$b/lua/5.1/hilock.so" ] && [ -f "$b/lua/5.4/hilock.so" ] &&
     [ -f "$b/lua/luajit/hilock.so" ] && [ -f "$b/libcore/libhilock.a" ]; then
    HL_BUILD="$b"; return 0
  fi
  HL_BUILD="$HL_ROOT/build/lua-test"
  hl_log "building into $HL_BUILD"
  { cmake -S "$HL_ROOT" -B "$HL_BUILD" -DHILOCK_WERROR=ON -DHILOCK_BUILD_TESTS=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    cmake --build "$HL_BUILD" -j2 --target hilock_lua hilock_static; } >"$HL_BUILD.log" 2>&1 ||
    { cat "$HL_BUILD.log" >&2; return 1; }
}

hl_port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

hl_free_port() { # -> HL_PORT
  local i
  for i in $(seq 1 100); do
    HL_PORT=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    hl_port_free "$HL_PORT" && return 0
  done
  return 1
}

# Start redis-server on a free port: -> REDIS_PORT, REDIS_URL, REDIS_PID.
hl_start_redis() {
  local try dir
  hl_tmpdir; dir="$HL_TMP"
  for try in 1 2 3 4 5; do
    hl_free_port || return 1
    redis-server --bind 127.0.0.1 --port "$HL_PORT" --save '' --appendonly no \
      --repl-diskless-sync no --dir "$dir" --logfile "$dir/redis.log" --daemonize no "$@" >/dev/null 2>&1 &
    REDIS_PID=$!
    HL_PIDS+=("$REDIS_PID")
    local deadline=$(( $(date +%s) + 10 ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
      if ! kill -0 "$REDIS_PID" 2>/dev/null; then break; fi
      case "$(redis-cli -p "$HL_PORT" ping 2>/dev/null)" in PONG|NOAUTH*) # answering
        REDIS_PORT="$HL_PORT"; REDIS_URL="redis://127.0.0.1:$HL_PORT"
        return 0 ;;
      esac
      sleep 0.05
    done
    kill -KILL "$REDIS_PID" 2>/dev/null; wait "$REDIS_PID" 2>/dev/null
  done
  hl_log "could not start redis-server"; return 1
}

# The interpreters the plain-Lua suite runs on: name, binary, module dir.
HL_INTERPS=("5.1:lua5.1:5.1" "5.4:lua5.4:5.4" "luajit:luajit:luajit")
