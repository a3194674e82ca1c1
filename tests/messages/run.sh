#!/usr/bin/env bash
# What every binding shows, in two parts.
# 1. Secrets never printed: every surface of every binding is made to show
# URLs that carry passwords (a good, wrong or unused one; the default user's
# and an ACL user's; in the user part and in the query; sentinel_password)
# against a real redis-server with requirepass and an ACL user: the C
# library (redacted URL, hilock_client_open's message, detail messages),
# Python's blocking and asyncio clients (repr, str, url, exceptions with
# tracebacks, log records), the Lua module, the OpenResty driver (response
# and nginx's error log) and the CLI (run, status, unlock; --url and
# HILOCK_URL). Every output is then searched for the three passwords: one
# hit fails. Each surface must also have shown something, and the redacted
# URLs must show ***.
# 2. The same words everywhere: a server that accepts and never answers is
# "no reply within N ms from host:port", an empty or 5000-byte name says
# why ("the name is empty; a name is 1 to 4096 bytes", "the name is 5000
# bytes long; ..."), in C, Python (both), Lua, OpenResty and the CLI.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../lua/lib.sh"
. "$here/../openresty/lib.sh"
trap hl_cleanup EXIT
trap 'exit 130' INT TERM
root="$HL_ROOT"
start=$(date +%s)

P="Pw-s3cret-9q7"      # the default user's password
A="Al1ce-s3cret-9q7"   # ACL user alice's password
W="Wr0ng-s3cret-9q7"   # a wrong password

# the full build (scripts/test.sh's): the C program lives with the C tests
B="${HILOCK_BUILD:-$root/build/release}"
cmake --build "$B" -j2 --target secret_surfaces hilock_cli hilock_lua >/dev/null 2>&1 ||
  { echo "messages: cannot build secret_surfaces, hilock, the Lua modules in $B"; exit 1; }
HILOCK_BUILD="$B" hl_build || { echo "messages: build failed"; exit 1; }
hl_start_redis --requirepass "$P" || { echo "messages: redis failed"; exit 1; }
redis-cli -p "$REDIS_PORT" -a "$P" --no-auth-warning ACL SETUSER alice on ">$A" '~*' '&*' '+@all' >/dev/null
hl_tmpdir; out="$HL_TMP"
# a port nothing listens on, and a server that accepts and never answers
hl_free_port; dead="$HL_PORT"
python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(64)
print(s.getsockname()[1], flush=True)
held = []
while True:
    c, _ = s.accept(); held.append(c)
' >"$out/silent.port" &
HL_PIDS+=("$!")
for _ in $(seq 100); do [ -s "$out/silent.port" ] && break; sleep 0.05; done
silent=$(cat "$out/silent.port")
port="$REDIS_PORT"
urls=(
  "redis://:$P@127.0.0.1:$port/0"
  "redis://alice:$A@127.0.0.1:$port/1"
  "redis://:$W@127.0.0.1:$port/0"
  "redis://alice:$W@127.0.0.1:$port/0"
  "redis://127.0.0.1:$port/0?password=$W"
  "redis://127.0.0.1:$port/0?user=alice&password=$A"
  "redis://:$P@127.0.0.1:$dead/0"
  "redis://:$P@127.0.0.1:notaport/0"
  "redis://127.0.0.1:$port/0?password=$P&db=zz"
  "redis://:$P?x@127.0.0.1:$port/0"
  "redis://u:123?$P@127.0.0.1:$port/0"
  "redis+sentinel://127.0.0.1:$dead/mymaster?sentinel_password=$P&password=$A"
  "rediss://:$P@127.0.0.1:$port/0?tls_insecure=1"
  "redis://:$P@127.0.0.1:$silent/0"
)

fails=0; passes=0
ok()  { echo "  ok    $*"; passes=$((passes+1)); }
bad() { echo "  FAIL  $*"; fails=$((fails+1)); }

# C
"$B/tests/c/secret_surfaces" "${urls[@]}" >"$out/c.txt" 2>&1

# CLI: every command, the URL by option and by environment
HL="$B/cli/hilock"
for u in "${urls[@]}"; do
  timeout 20 "$HL" status --url "$u" secrets:x
  HILOCK_URL="$u" timeout 20 "$HL" status --json secrets:x
  timeout 20 "$HL" run --url "$u" -w 0.2 secrets:x -- true
  HILOCK_URL="$u" timeout 20 "$HL" unlock --force --yes secrets:x
done >"$out/cli.txt" 2>&1
for n in "" "$(head -c 5000 /dev/zero | tr '\0' n)"; do
  timeout 20 "$HL" status --url "${urls[0]}" "$n"
  timeout 20 "$HL" run --url "${urls[0]}" "$n" -- true
  timeout 20 "$HL" unlock --force --url "${urls[0]}" "$n"
done >>"$out/cli.txt" 2>&1

# Python, blocking and asyncio (the installed package, as tests/python)
venv="$root/build/venv"
if bash "$root/tests/python/deps.sh" >"$out/pydeps.log" 2>&1 &&
   bash "$root/tests/python/install.sh" >"$out/pyinstall.log" 2>&1; then
  (cd "$out" && timeout 120 "$venv/bin/python" -W always "$here/surfaces.py" "${urls[@]}") \
    >"$out/python.txt" 2>&1
else
  tail -20 "$out/pyinstall.log"; bad "python: install failed"
fi

# Lua 5.4
LUA_CPATH="$HL_BUILD/lua/5.4/?.so" timeout 120 lua5.4 "$here/surfaces.lua" "${urls[@]}" \
  >"$out/lua.txt" 2>&1

# OpenResty: the same URLs through resty.hilock, then nginx's error log
if HL_NGINX_CONF="$here/nginx.conf.in" hl_start_nginx; then
  for u in "${urls[@]}"; do
    curl -sS --max-time 20 -H "X-Url: $u" "http://127.0.0.1:$NGINX_PORT/s"
  done >"$out/resty.txt" 2>&1
  cp "$NGINX_TMP/error.log" "$out/nginx-error.log"
else
  bad "openresty: nginx failed"
fi

# Each surface showed its part (a file that says nothing proves nothing).
check_has() { # file label pattern minimum
  local n; n=$(grep -c -- "$3" "$out/$1" 2>/dev/null); n=${n:-0}
  if [ "$n" -ge "$4" ]; then ok "$2: $n lines"; else bad "$2: $n lines with '$3' (< $4)"; fi
}
check_has c.txt "C redacted URLs with ***" 'C redact: .*\*\*\*' 12
check_has c.txt "C open failures" 'C open .*: -[0-9]' 11
check_has cli.txt "CLI messages" '^hilock: ' 40
check_has cli.txt "CLI URLs shown with ***" 'hilock: cannot connect to .*\*\*\*' 10
check_has python.txt "Python Client reprs with ***" "py Client repr: .*\*\*\*" 2
check_has python.txt "asyncio Client reprs with ***" "aio Client repr: .*\*\*\*" 2
check_has python.txt "Python exceptions" 'py Client raised ' 8
check_has python.txt "asyncio exceptions" 'aio connect raised ' 8
check_has python.txt "Python done" '^py done' 1
check_has lua.txt "Lua redacted URLs with ***" 'lua redact: .*\*\*\*' 12
check_has lua.txt "Lua connect failures" 'lua connect ' 10
check_has lua.txt "Lua done" '^lua done' 1
check_has resty.txt "OpenResty clients shown with ***" 'resty client: .*\*\*\*' 6
check_has resty.txt "OpenResty failures" 'resty .*\(raised\|nil\)' 8
check_has nginx-error.log "nginx error log lines" 'resty ' 10

# The same words in every binding (the engine's): the silent server, then
# the two names.
for f in c.txt python.txt lua.txt resty.txt cli.txt; do
  ms=500; [ "$f" = cli.txt ] && ms=2000 # the CLI's own timeouts
  check_has "$f" "$f: the silent server" "no reply within $ms ms from 127.0.0.1:$silent" 1
  check_has "$f" "$f: the empty name" "the name is empty; a name is 1 to 4096 bytes" 1
  check_has "$f" "$f: the long name" "the name is 5000 bytes long; a name is 1 to 4096 bytes" 1
done

# The search: no output holds a password.
for f in c.txt cli.txt python.txt lua.txt resty.txt nginx-error.log; do
  hits=$(grep -n -F -e "$P" -e "$A" -e "$W" "$out/$f" 2>/dev/null)
  if [ -z "$hits" ]; then ok "$f: no password in $(wc -l <"$out/$f" 2>/dev/null || echo 0) lines"
  else bad "$f shows a password:"; printf '%s\n' "$hits" | head -20 | sed 's/^/        /'; fi
done
[ "${HILOCK_MESSAGES_KEEP:-0}" = 1 ] && { rm -rf "/tmp/hilock-messages-out"; cp -r "$out" /tmp/hilock-messages-out; }
echo "messages suite: $passes passed, $fails failed ($(( $(date +%s) - start ))s)"
[ "$fails" -eq 0 ]
