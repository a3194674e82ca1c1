#!/usr/bin/env bash
# Tests of the hilock command-line tool against a real redis-server.
# Env: HILOCK_ROOT (repo root), HILOCK_BUILD (build dir with cli/hilock).
set -uo pipefail
ROOT="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
BUILD="${HILOCK_BUILD:-$ROOT/build/release}"
HL="$BUILD/cli/hilock"
if [ ! -x "$HL" ]; then
  cmake --build "$BUILD" --target hilock_cli -j2 >/dev/null || { echo "cannot build $HL"; exit 1; }
fi

T="$(mktemp -d /tmp/hilock-cli-test.XXXXXX)"
REDIS_PID=""
BG_PIDS=()
started=$(date +%s)

cleanup() {
  for p in "${BG_PIDS[@]+"${BG_PIDS[@]}"}"; do kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  if [ -n "$REDIS_PID" ]; then
    kill -TERM "$REDIS_PID" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$REDIS_PID" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$REDIS_PID" 2>/dev/null
  fi
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# wait_for TIMEOUT_S DESCRIPTION COMMAND... : poll until COMMAND succeeds.
wait_for() {
  local timeout="$1" what="$2"; shift 2
  local end=$(( $(now_ms) + timeout * 1000 ))
  while ! "$@" >/dev/null 2>&1; do
    if [ "$(now_ms)" -ge "$end" ]; then echo "    timed out waiting for: $what"; return 1; fi
    sleep 0.02
  done
}
# wait_exit PID TIMEOUT_S : wait for a background job, set $WAIT_RC.
wait_exit() {
  local pid="$1" timeout="$2"
  local end=$(( $(now_ms) + timeout * 1000 ))
  while kill -0 "$pid" 2>/dev/null; do
    # a zombie still answers kill -0 until reaped; check its state
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] && break
    if [ "$(now_ms)" -ge "$end" ]; then echo "    pid $pid did not exit in ${timeout}s"; WAIT_RC=999; return 1; fi
    sleep 0.02
  done
  wait "$pid"; WAIT_RC=$?
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start_redis() {
  for _ in 1 2 3 4 5; do
    PORT=$(free_port)
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$T" --logfile "$T/redis.log" --daemonize no &
    REDIS_PID=$!
    if wait_for 5 "redis-server on $PORT" redis-cli -p "$PORT" ping; then
      [ "$(redis-cli -p "$PORT" ping)" = PONG ] && return 0
    fi
    kill -KILL "$REDIS_PID" 2>/dev/null; wait "$REDIS_PID" 2>/dev/null; REDIS_PID=""
  done
  echo "cannot start redis-server"; exit 1
}

start_redis
export HILOCK_URL="redis://127.0.0.1:$PORT"
R() { redis-cli -p "$PORT" "$@"; }

passed=0; failed=0; failed_names=()
run_test() {
  local name="$1"
  echo "--- $name"
  if "$name"; then passed=$((passed+1)); echo "    ok"
  else failed=$((failed+1)); failed_names+=("$name"); echo "    FAILED"; fi
}
check() { # check DESCRIPTION COMMAND...
  local what="$1"; shift
  if ! "$@"; then echo "    check failed: $what"; return 1; fi
}
jcheck() { # jcheck JSONFILE PYTHON-EXPR (d = parsed document)
  python3 - "$1" "$2" <<'PY' || { echo "    json check failed: $2"; echo "    document: $(cat "$1")"; return 1; }
import json, sys
d = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2])
sys.exit(0 if ok else 1)
PY
}

# A command that signals it started, then waits for a go file.
holder_cmd() { # holder_cmd TAG -> shell snippet
  echo "touch $T/$1.started; while [ ! -e $T/$1.go ]; do sleep 0.02; done; touch $T/$1.done"
}
bg() { "$@" & BG_PIDS+=($!); LAST=$!; }

# ---------------------------------------------------------------------------
test_second_waits_then_runs() {
  bg "$HL" run cont -- sh -c "$(holder_cmd a)"; local a=$LAST
  wait_for 5 "first command started" test -e "$T/a.started" || return 1
  bg "$HL" run cont -- sh -c "test -e $T/a.done && touch $T/b.ran"; local b=$LAST
  # the second one is waiting when it listens on the lock's channel (the
  # holder listens there too: two subscribers)
  wait_for 5 "second waiter subscribed" sh -c "[ \"\$(redis-cli -p $PORT PUBSUB NUMSUB 'redisson_lock__channel:{cont}' | tail -1)\" = 2 ]" || return 1
  check "second did not run while the first held the lock" test ! -e "$T/b.ran" || return 1
  touch "$T/a.go"
  wait_exit "$a" 5; check "first exit 0 (got $WAIT_RC)" [ "$WAIT_RC" = 0 ] || return 1
  wait_exit "$b" 5; check "second exit 0 (got $WAIT_RC)" [ "$WAIT_RC" = 0 ] || return 1
  check "second ran after the first finished" test -e "$T/b.ran" || return 1
  check "lock released" [ "$(R EXISTS cont)" = 0 ]
}

test_wait_zero_conflict() {
  bg "$HL" run conf -- sh -c "$(holder_cmd c)"; local h=$LAST
  wait_for 5 "holder started" test -e "$T/c.started" || return 1
  local t0; t0=$(now_ms)
  "$HL" run --wait 0 conf -- touch "$T/c.bad" 2>"$T/c.err"; local rc=$?
  local dt=$(( $(now_ms) - t0 ))
  check "--wait 0 exits 1 (got $rc)" [ "$rc" = 1 ] || return 1
  check "--wait 0 returns at once (${dt} ms)" [ "$dt" -lt 1500 ] || return 1
  check "command not run" test ! -e "$T/c.bad" || return 1
  check "message on stderr" grep -q "not acquired" "$T/c.err" || return 1
  "$HL" run -w 0 -E 7 -q conf -- true 2>"$T/c.err2"; rc=$?
  check "--conflict-exit-code 7 (got $rc)" [ "$rc" = 7 ] || return 1
  check "--quiet prints nothing" [ ! -s "$T/c.err2" ] || return 1
  t0=$(now_ms)
  "$HL" run --wait 0.4 conf -- true 2>/dev/null; rc=$?
  dt=$(( $(now_ms) - t0 ))
  check "--wait 0.4 exits 1 (got $rc)" [ "$rc" = 1 ] || return 1
  check "--wait 0.4 waited ~0.4 s (${dt} ms)" [ "$dt" -ge 380 ] && [ "$dt" -lt 3000 ] || return 1
  touch "$T/c.go"
  wait_exit "$h" 5; check "holder exit 0" [ "$WAIT_RC" = 0 ]
}

test_exit_status_passthrough() {
  "$HL" run st -- sh -c 'exit 42'; local rc=$?
  check "exit 42 passed through (got $rc)" [ "$rc" = 42 ] || return 1
  check "lock released after exit 42" [ "$(R EXISTS st)" = 0 ] || return 1
  "$HL" run st -- true; rc=$?
  check "exit 0 (got $rc)" [ "$rc" = 0 ] || return 1
  "$HL" run st -- sh -c 'kill -KILL $$'; rc=$?
  check "killed by SIGKILL -> 137 (got $rc)" [ "$rc" = 137 ] || return 1
  "$HL" run st -- /nonexistent/cmd 2>"$T/st.err"; rc=$?
  check "command not found -> 127 (got $rc)" [ "$rc" = 127 ] || return 1
  check "lock released after all" [ "$(R EXISTS st)" = 0 ] || return 1
  "$HL" run st -- sh -c "$(holder_cmd st)" &  # passes fds and stdio through
  local p=$!; BG_PIDS+=($p)
  wait_for 5 "started" test -e "$T/st.started" || return 1
  local json; json="$("$HL" status --json st)"
  echo "$json" >"$T/st.json"
  jcheck "$T/st.json" "d['locks'][0]['holders'][0]['owner'].endswith(':$p')" || return 1
  touch "$T/st.go"; wait_exit "$p" 5
  check "holder exit 0" [ "$WAIT_RC" = 0 ]
}

test_sigterm_forwarded() {
  bg "$HL" run sig -- sh -c "trap 'touch $T/sig.term; exit 3' TERM; touch $T/sig.started; while :; do sleep 0.02; done"
  local p=$LAST
  wait_for 5 "started" test -e "$T/sig.started" || return 1
  check "lock held while running" [ "$(R EXISTS sig)" = 1 ] || return 1
  kill -TERM "$p"
  wait_exit "$p" 5
  check "exit status is the command's (3, got $WAIT_RC)" [ "$WAIT_RC" = 3 ] || return 1
  check "command got SIGTERM" test -e "$T/sig.term" || return 1
  check "lock released" [ "$(R EXISTS sig)" = 0 ] || return 1
  # a command that dies of the forwarded signal -> 128+15
  # (a non-interactive shell starts background jobs with SIGINT ignored, and
  # an ignored signal stays ignored: restore the default for this one)
  bg env --default-signal=INT "$HL" run sig -- sh -c "echo \$\$ >$T/sig2.pid; exec sleep 30"; p=$LAST
  wait_for 5 "started" test -s "$T/sig2.pid" || return 1
  wait_for 5 "sleep exec'd" grep -qx sleep "/proc/$(cat "$T/sig2.pid")/comm" || return 1
  kill -INT "$p"
  wait_exit "$p" 5
  check "SIGINT forwarded -> 130 (got $WAIT_RC)" [ "$WAIT_RC" = 130 ] || return 1
  check "lock released" [ "$(R EXISTS sig)" = 0 ]
}

test_lost_lock_kills_command() {
  bg "$HL" run --watchdog-lease 0.3 --grace 3 lost -- sh -c "trap 'touch $T/lost.term; exit 0' TERM; touch $T/lost.started; while :; do sleep 0.02; done" 2>"$T/lost.err"
  local p=$LAST
  wait_for 5 "started" test -e "$T/lost.started" || return 1
  "$HL" unlock --force --yes lost >/dev/null || return 1
  wait_exit "$p" 5
  check "exit status 75 after loss (got $WAIT_RC)" [ "$WAIT_RC" = 75 ] || return 1
  check "command got SIGTERM" test -e "$T/lost.term" || return 1
  check "loss reported on stderr" grep -q "lock lost was lost while the command was running" "$T/lost.err" || return 1
  # a command that ignores SIGTERM is killed after --grace
  bg "$HL" run --watchdog-lease 0.3 --grace 0.3 lost -- sh -c "trap '' TERM; touch $T/lost2.started; while :; do sleep 0.02; done" 2>/dev/null
  p=$LAST
  wait_for 5 "started" test -e "$T/lost2.started" || return 1
  "$HL" unlock --force --yes lost >/dev/null || return 1
  wait_exit "$p" 5
  check "SIGKILL after grace, exit 75 (got $WAIT_RC)" [ "$WAIT_RC" = 75 ]
}

test_lost_lock_warn() {
  bg "$HL" run --watchdog-lease 0.3 --on-lost=warn warn -- sh -c "$(holder_cmd w)" 2>"$T/w.err"
  local p=$LAST
  wait_for 5 "started" test -e "$T/w.started" || return 1
  "$HL" unlock --force --yes warn >/dev/null || return 1
  wait_for 5 "warning printed" grep -q "warning: lock warn was lost" "$T/w.err" || return 1
  check "command still running" kill -0 "$p" || return 1
  touch "$T/w.go"
  wait_exit "$p" 5
  check "warn mode keeps the command's status (0, got $WAIT_RC)" [ "$WAIT_RC" = 0 ]
}

test_fixed_lease_expiry() {
  bg "$HL" run --lease 0.4 --grace 3 lease -- sh -c "trap 'touch $T/l.term; exit 0' TERM; touch $T/l.started; while :; do sleep 0.02; done" 2>/dev/null
  local p=$LAST
  wait_for 5 "started" test -e "$T/l.started" || return 1
  check "no watchdog: key has the fixed lease" [ "$(R PTTL lease)" -le 400 ] || return 1
  wait_exit "$p" 5
  check "exit 75 when the lease ran out (got $WAIT_RC)" [ "$WAIT_RC" = 75 ] || return 1
  check "command got SIGTERM" test -e "$T/l.term"
}

test_status_unlocked() {
  "$HL" status --json nothing-here >"$T/s0.json" || return 1
  jcheck "$T/s0.json" "d['version']==1 and len(d['locks'])==1" || return 1
  jcheck "$T/s0.json" "d['locks'][0]=={**d['locks'][0], 'name':'nothing-here','kind':'none','locked':False,'lease_ms':None,'holders':[],'queue':[],'mode':None}" || return 1
  "$HL" status nothing-here | grep -q "lock nothing-here: not locked" || { echo "    human output wrong"; return 1; }
}

test_status_reentrant() {
  bg "$HL" run re -- sh -c "$(holder_cmd re)"; local p=$LAST
  wait_for 5 "started" test -e "$T/re.started" || return 1
  "$HL" status --json re >"$T/s1.json" || return 1
  jcheck "$T/s1.json" "(lambda l: l['kind']=='reentrant' and l['locked'] and len(l['holders'])==1 and l['holders'][0]['holds']==1 and l['holders'][0]['owner'].endswith(':$p') and 0 < l['lease_ms'] <= 30000 and l['queue']==[])(d['locks'][0])" || return 1
  touch "$T/re.go"; wait_exit "$p" 5
  # a hold count of 2, written the way Redisson stores it
  R HSET re2 "01234567-89ab-cdef-0123-456789abcdef:7" 2 >/dev/null
  R PEXPIRE re2 20000 >/dev/null
  "$HL" status --json re2 nothing-here >"$T/s2.json" || return 1
  jcheck "$T/s2.json" "d['locks'][0]['holders']==[{'owner':'01234567-89ab-cdef-0123-456789abcdef:7','holds':2,'role':'exclusive'}] and d['locks'][1]['kind']=='none'" || return 1
  "$HL" status re2 >"$T/s2.txt" || return 1
  grep -q "reentrant, locked, lease" "$T/s2.txt" && grep -q "holds 2" "$T/s2.txt" || { echo "    human output: $(cat "$T/s2.txt")"; return 1; }
  R DEL re2 >/dev/null
}

test_status_fair_queue() {
  bg "$HL" run --fair fq -- sh -c "$(holder_cmd fq)"; local h=$LAST
  wait_for 5 "holder started" test -e "$T/fq.started" || return 1
  bg "$HL" run --fair fq -- sh -c "echo 1 >>$T/fq.order"; local w1=$LAST
  wait_for 5 "first waiter queued" sh -c "[ \"\$(redis-cli -p $PORT LLEN 'redisson_lock_queue:{fq}')\" = 1 ]" || return 1
  bg "$HL" run --fair fq -- sh -c "echo 2 >>$T/fq.order"; local w2=$LAST
  wait_for 5 "second waiter queued" sh -c "[ \"\$(redis-cli -p $PORT LLEN 'redisson_lock_queue:{fq}')\" = 2 ]" || return 1
  "$HL" status --json fq >"$T/s3.json" || return 1
  jcheck "$T/s3.json" "(lambda l: l['kind']=='fair' and l['locked'] and l['holders'][0]['owner'].endswith(':$h') and [w['position'] for w in l['queue']]==[1,2] and l['queue'][0]['owner'].endswith(':$w1') and l['queue'][1]['owner'].endswith(':$w2') and 0 < l['queue'][0]['deadline_in_ms'] < l['queue'][1]['deadline_in_ms'] and l['queue'][0]['deadline_ms'] - d['locks'][0]['server_time_ms'] == l['queue'][0]['deadline_in_ms'])(d['locks'][0])" || return 1
  "$HL" status fq >"$T/s3.txt" || return 1
  grep -q "fair, locked" "$T/s3.txt" && grep -q "queue   1\." "$T/s3.txt" && grep -q "deadline in" "$T/s3.txt" || { echo "    human output: $(cat "$T/s3.txt")"; return 1; }
  touch "$T/fq.go"
  wait_exit "$h" 5; check "holder exit 0" [ "$WAIT_RC" = 0 ] || return 1
  wait_exit "$w1" 5; check "waiter 1 exit 0" [ "$WAIT_RC" = 0 ] || return 1
  wait_exit "$w2" 5; check "waiter 2 exit 0" [ "$WAIT_RC" = 0 ] || return 1
  check "FIFO order" [ "$(tr -d '\n' <"$T/fq.order")" = 12 ] || return 1
  check "queue empty" [ "$(R LLEN 'redisson_lock_queue:{fq}')" = 0 ]
}

test_interrupted_fair_waiter_leaves_queue() {
  bg "$HL" run --fair fi -- sh -c "$(holder_cmd fi)"; local h=$LAST
  wait_for 5 "holder started" test -e "$T/fi.started" || return 1
  bg "$HL" run --fair fi -- touch "$T/fi.bad" 2>/dev/null; local w=$LAST
  wait_for 5 "waiter queued" sh -c "[ \"\$(redis-cli -p $PORT LLEN 'redisson_lock_queue:{fi}')\" = 1 ]" || return 1
  kill -TERM "$w"
  wait_exit "$w" 5
  check "interrupted waiter exits 143 (got $WAIT_RC)" [ "$WAIT_RC" = 143 ] || return 1
  check "waiter left the queue" [ "$(R LLEN 'redisson_lock_queue:{fi}')" = 0 ] || return 1
  check "waiter left the deadlines" [ "$(R ZCARD 'redisson_lock_timeout:{fi}')" = 0 ] || return 1
  touch "$T/fi.go"; wait_exit "$h" 5
  check "command of the interrupted waiter never ran" test ! -e "$T/fi.bad"
}

test_status_readwrite_and_unknown() {
  R HSET rw mode read "01234567-89ab-cdef-0123-456789abcdef:1" 1 >/dev/null
  R PEXPIRE rw 20000 >/dev/null
  R SET notalock hello >/dev/null
  "$HL" status --json rw notalock >"$T/s4.json" || return 1
  jcheck "$T/s4.json" "d['locks'][0]['kind']=='read-write' and d['locks'][0]['mode']=='read' and d['locks'][0]['holders'][0]['role']=='read' and d['locks'][1]['kind']=='unknown' and d['locks'][1]['key_type']=='string'" || return 1
  "$HL" unlock --force --yes notalock 2>/dev/null; local rc=$?
  check "unlock of a non-lock key refused (1, got $rc)" [ "$rc" = 1 ] || return 1
  check "non-lock key untouched" [ "$(R GET notalock)" = hello ] || return 1
  R HSET oddhash field notanumber >/dev/null
  "$HL" status --json oddhash >"$T/s5.json" || return 1
  jcheck "$T/s5.json" "d['locks'][0]['kind']=='unknown' and d['locks'][0]['holders'][0]['holds'] is None and d['locks'][0]['note']" || return 1
  "$HL" unlock --force --yes oddhash 2>/dev/null; rc=$?
  check "unlock of a hash that is not a lock refused (1, got $rc)" [ "$rc" = 1 ] || return 1
  check "odd hash untouched" [ "$(R EXISTS oddhash)" = 1 ] || return 1
  # a read-write waiter listens on redisson_rwlock:{rw}: the force unlock must reach it
  redis-cli -p "$PORT" SUBSCRIBE 'redisson_rwlock:{rw}' >"$T/rw.sub" & BG_PIDS+=($!)
  local sub=$!
  wait_for 5 "subscriber ready" sh -c "[ \"\$(redis-cli -p $PORT PUBSUB NUMSUB 'redisson_rwlock:{rw}' | tail -1)\" = 1 ]" || return 1
  "$HL" unlock --force --yes rw >/dev/null || return 1
  check "read-write lock deleted" [ "$(R EXISTS rw)" = 0 ] || return 1
  wait_for 5 "wake-all message published" sh -c "tail -3 $T/rw.sub | grep -qx 1" || return 1
  kill "$sub" 2>/dev/null
}

test_unlock_cli() {
  "$HL" unlock nothing-here 2>/dev/null; local rc=$?
  check "unlock without --force is a usage error (2, got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" unlock --force --yes nothing-here >"$T/u.out"; rc=$?
  check "unlock of a free lock exits 0 (got $rc)" [ "$rc" = 0 ] || return 1
  grep -q "was not locked" "$T/u.out" || return 1
  # a waiter is woken by the force unlock (long holder lease: only the
  # published message can wake it quickly)
  R HSET fu "01234567-89ab-cdef-0123-456789abcdef:9" 1 >/dev/null
  R PEXPIRE fu 60000 >/dev/null
  bg "$HL" run fu -- true; local w=$LAST
  wait_for 5 "waiter subscribed" sh -c "[ \"\$(redis-cli -p $PORT PUBSUB NUMSUB 'redisson_lock__channel:{fu}' | tail -1)\" = 1 ]" || return 1
  "$HL" unlock --force fu </dev/null >"$T/u2.out"; rc=$?   # stdin not a tty: no question
  check "force unlock exit 0 (got $rc)" [ "$rc" = 0 ] || return 1
  grep -q "force-unlocked" "$T/u2.out" || return 1
  wait_exit "$w" 5
  check "woken waiter ran (got $WAIT_RC)" [ "$WAIT_RC" = 0 ]
}

test_unlock_confirmation_on_tty() {
  # script(1) gives hilock a terminal on stdin; the answer comes from our pipe
  R HSET tty "01234567-89ab-cdef-0123-456789abcdef:3" 1 >/dev/null
  R PEXPIRE tty 60000 >/dev/null
  echo n | script -qec "$HL unlock --force tty" /dev/null >"$T/tty1.out" 2>&1; local rc=$?
  check "declined -> exit 1 (got $rc)" [ "$rc" = 1 ] || { cat "$T/tty1.out"; return 1; }
  grep -q "Force-unlock tty held by 01234567-89ab-cdef-0123-456789abcdef:3" "$T/tty1.out" ||
    { echo "    no question asked: $(cat "$T/tty1.out")"; return 1; }
  check "lock kept after 'n'" [ "$(R EXISTS tty)" = 1 ] || return 1
  echo y | script -qec "$HL unlock --force tty" /dev/null >"$T/tty2.out" 2>&1; rc=$?
  check "accepted -> exit 0 (got $rc)" [ "$rc" = 0 ] || { cat "$T/tty2.out"; return 1; }
  check "lock gone after 'y'" [ "$(R EXISTS tty)" = 0 ] || return 1
  R HSET tty "01234567-89ab-cdef-0123-456789abcdef:3" 1 >/dev/null
  script -qec "$HL unlock --force --yes tty" /dev/null </dev/null >"$T/tty3.out" 2>&1; rc=$?
  check "--yes on a tty does not ask (got $rc)" [ "$rc" = 0 ] && ! grep -q "Force-unlock" "$T/tty3.out" || return 1
  check "lock gone with --yes" [ "$(R EXISTS tty)" = 0 ]
}

# TLS: --tls-* options and the URL query form, against a TLS port (throwaway
# CA from tests/c/make_certs.sh).
test_tls_options() {
  local rc tp tls_pid
  bash "$ROOT/tests/c/make_certs.sh" "$T/certs" || return 1
  tp=$(free_port)
  redis-server --port 0 --tls-port "$tp" --bind 127.0.0.1 --save '' --appendonly no \
    --tls-cert-file "$T/certs/server.crt" --tls-key-file "$T/certs/server.key" \
    --tls-ca-cert-file "$T/certs/ca.crt" --tls-auth-clients no \
    --dir "$T" --logfile "$T/redis-tls.log" --daemonize no &
  tls_pid=$!; BG_PIDS+=("$tls_pid")
  wait_for 5 "TLS redis-server on $tp" redis-cli -p "$tp" --tls --cacert "$T/certs/ca.crt" ping || return 1
  "$HL" status --url "rediss://127.0.0.1:$tp" --tls-ca "$T/certs/ca.crt" tlsx >"$T/tls.out" 2>&1; rc=$?
  check "status over TLS with --tls-ca -> 0 (got $rc: $(cat "$T/tls.out"))" [ "$rc" = 0 ] || return 1
  "$HL" run --url "rediss://127.0.0.1:$tp?tls_ca_file=$T/certs/ca.crt" tlsrun -- true; rc=$?
  check "run over TLS, CA in the URL -> 0 (got $rc)" [ "$rc" = 0 ] || return 1
  HILOCK_URL="rediss://127.0.0.1:$tp" "$HL" run --tls-ca "$T/certs/ca.crt" \
    --tls-server-name localhost tlsrun2 -- true; rc=$?
  check "run with \$HILOCK_URL, --tls-ca and --tls-server-name -> 0 (got $rc)" [ "$rc" = 0 ] || return 1
  "$HL" status --url "rediss://127.0.0.1:$tp" --tls-ca "$T/certs/other-ca.crt" x >/dev/null 2>"$T/tls.err"; rc=$?
  check "wrong CA fails (got $rc)" [ "$rc" != 0 ] || return 1
  check "the error names the certificate: $(cat "$T/tls.err")" grep -q "certificate" "$T/tls.err" || return 1
  "$HL" run --url "rediss://127.0.0.1:$tp" --tls-ca "$T/certs/other-ca.crt" x -- true 2>"$T/tls2.err"; rc=$?
  check "run with the wrong CA fails (got $rc)" [ "$rc" != 0 ] || return 1
  "$HL" status --url "rediss://127.0.0.1:$tp" --tls-ca "$T/certs/other-ca.crt" --tls-insecure x >/dev/null 2>&1; rc=$?
  check "--tls-insecure accepts it (got $rc)" [ "$rc" = 0 ]
}

test_shared_exclusive_fenced() {
  # two -s holders at once; a -x waits for both, then runs
  bg "$HL" run -s rwc -- sh -c "$(holder_cmd s1)"; local s1=$LAST
  bg "$HL" run --shared rwc -- sh -c "$(holder_cmd s2)"; local s2=$LAST
  wait_for 5 "both readers run at once" sh -c "test -e $T/s1.started && test -e $T/s2.started" || return 1
  check "mode read" [ "$(R HGET rwc mode)" = read ] || return 1
  "$HL" run -x --wait 0 -q rwc -- touch "$T/x.bad"; local rc=$?
  check "-x --wait 0 past readers exits 1 (got $rc)" [ "$rc" = 1 ] || return 1
  check "-x command not run" test ! -e "$T/x.bad" || return 1
  bg "$HL" run --exclusive rwc -- sh -c "test -e $T/s1.done && test -e $T/s2.done && touch $T/x.ran"; local x=$LAST
  # the two readers listen there too (a holder listens on its lock's channel)
  wait_for 5 "writer waits on the rw channel" sh -c "[ \"\$(redis-cli -p $PORT PUBSUB NUMSUB 'redisson_rwlock:{rwc}' | tail -1)\" = 3 ]" || return 1
  touch "$T/s1.go"; wait_exit "$s1" 5
  check "writer still waits for the second reader" test ! -e "$T/x.ran" || return 1
  touch "$T/s2.go"; wait_exit "$s2" 5
  wait_exit "$x" 5; check "writer exit 0 (got $WAIT_RC)" [ "$WAIT_RC" = 0 ] || return 1
  check "writer ran after both readers" test -e "$T/x.ran" || return 1
  check "rw lock released" [ "$(R EXISTS rwc)" = 0 ] || return 1
  # environment: the lock's name, and with --fenced the grant's token
  "$HL" run env1 -- sh -c 'echo "$HILOCK_LOCK_NAME:${HILOCK_FENCING_TOKEN-none}"' >"$T/env1" || return 1
  check "HILOCK_LOCK_NAME set, no token (got $(cat "$T/env1"))" [ "$(cat "$T/env1")" = "env1:none" ] || return 1
  "$HL" run --fenced fen -- sh -c 'echo "$HILOCK_FENCING_TOKEN"' >"$T/tok1" || return 1
  "$HL" run --fenced fen -- sh -c 'echo "$HILOCK_FENCING_TOKEN"' >"$T/tok2" || return 1
  # a missing counter starts at the server's clock in milliseconds
  local t1 t2; t1=$(cat "$T/tok1"); t2=$(cat "$T/tok2")
  check "tokens increase from the server's clock (got $t1 $t2)" sh -c '[ "$1" -gt 1000000000000 ] && [ "$2" -gt "$1" ]' _ "$t1" "$t2" || return 1
  check "counter key" [ "$(R GET 'redisson_lock_token:{fen}')" = "$t2" ] || return 1
  # status of a fenced lock while held: kind fenced, the grant's token
  bg "$HL" run --fenced fen -- sh -c "$(holder_cmd fen)"; local f=$LAST
  wait_for 5 "fenced holder started" test -e "$T/fen.started" || return 1
  "$HL" status --json fen >"$T/fen.json" || return 1
  local t3; t3=$(R GET 'redisson_lock_token:{fen}')
  check "a third token (got $t3 after $t2)" [ "$t3" -gt "$t2" ] || return 1
  jcheck "$T/fen.json" "(lambda l: l['kind']=='fenced' and l['token']==$t3 and l['holders'][0]['owner'].endswith(':$f'))(d['locks'][0])" || return 1
  "$HL" status fen | grep -q "fenced, locked, lease .* left, fencing token $t3" || { echo "    human output: $("$HL" status fen)"; return 1; }
  touch "$T/fen.go"; wait_exit "$f" 5
  "$HL" run -s -x bad -- true 2>/dev/null; rc=$?
  check "-s with -x is a usage error (got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" run --fair --fenced bad -- true 2>/dev/null; rc=$?
  check "--fair with --fenced is a usage error (got $rc)" [ "$rc" = 2 ]
}

test_semaphore() {
  # two permits: two commands run at once, the third waits for a permit
  bg "$HL" run --semaphore jobs:2 -- sh -c "$(holder_cmd j1)"; local j1=$LAST
  bg "$HL" run --semaphore jobs:2 -- sh -c "$(holder_cmd j2)"; local j2=$LAST
  wait_for 5 "two holders run at once" sh -c "test -e $T/j1.started && test -e $T/j2.started" || return 1
  check "no permit left" [ "$(R GET jobs)" = 0 ] || return 1
  check "two leases" [ "$(R ZCARD '{jobs}:timeout')" = 2 ] || return 1
  "$HL" status --json jobs >"$T/jobs.json" || return 1
  jcheck "$T/jobs.json" "(lambda l: l['kind']=='permit-semaphore' and l['count']==0 and l['permits_taken']==2 and len(l['permits'])==2 and all(len(p['id'])==32 and 0 < p['lease_in_ms'] <= 30000 for p in l['permits']))(d['locks'][0])" || return 1
  "$HL" status jobs >"$T/jobs.held" || return 1
  check "status lists the permits taken (got: $(tr '\n' ' ' <"$T/jobs.held"))" sh -c "grep -q 'permit-expirable semaphore, 0 permits free, 2 taken' $T/jobs.held && [ \"\$(grep -Ec '^  permit [0-9a-f]{32}  lease .* left' $T/jobs.held)\" = 2 ]" || return 1
  "$HL" run --semaphore jobs:2 --wait 0 -q -- touch "$T/j.bad"; local rc=$?
  check "third --wait 0 exits 1 (got $rc)" [ "$rc" = 1 ] || return 1
  check "third command not run" test ! -e "$T/j.bad" || return 1
  bg "$HL" run --semaphore jobs:2 -- sh -c 'echo "$HILOCK_LOCK_NAME $HILOCK_PERMIT_ID" >'"$T/j3.env"; local j3=$LAST
  # the two holders listen there too (a permit given back by another is
  # reported at once), then the third waits there
  wait_for 5 "third waits on the semaphore channel" sh -c "[ \"\$(redis-cli -p $PORT PUBSUB NUMSUB 'redisson_sc:{jobs}' | tail -1)\" = 3 ]" || return 1
  touch "$T/j1.go"; wait_exit "$j1" 5; check "first exit 0 (got $WAIT_RC)" [ "$WAIT_RC" = 0 ] || return 1
  wait_exit "$j3" 5; check "third ran once a permit came back (got $WAIT_RC)" [ "$WAIT_RC" = 0 ] || return 1
  check "environment: name and a 32-hex permit id (got $(cat "$T/j3.env"))" grep -Eq '^jobs [0-9a-f]{32}$' "$T/j3.env" || return 1
  touch "$T/j2.go"; wait_exit "$j2" 5
  check "permits back" [ "$(R GET jobs)" = 2 ] || return 1
  check "no leases left" [ "$(R ZCARD '{jobs}:timeout')" = 0 ] || return 1
  "$HL" status jobs >"$T/jobs.status" || return 1
  check "status shows the free permits (got: $(tr '\n' ' ' <"$T/jobs.status"))" grep -q "semaphore or count-down latch, count 2" "$T/jobs.status" || return 1
  R SET drained 0 >/dev/null
  "$HL" status --json drained >"$T/drained.json" || return 1
  jcheck "$T/drained.json" "d['locks'][0]['kind']=='count' and d['locks'][0]['count']==0 and d['locks'][0]['permits']==[]" || return 1
  "$HL" status drained | grep -q "semaphore, 0 permits free" || { echo "    human output: $("$HL" status drained)"; return 1; }
  "$HL" unlock --force --yes jobs 2>/dev/null; rc=$?
  check "unlock --force of a semaphore refused (1, got $rc), count kept" [ "$rc" = 1 ] && [ "$(R GET jobs)" = 2 ] || return 1
  # the permit's lease is renewed while the command runs (0.3 s watchdog lease)
  "$HL" run --semaphore renew:1 --watchdog-lease 0.3 -- sleep 1; rc=$?
  check "renewed past its lease: exit 0 (got $rc)" [ "$rc" = 0 ] || return 1
  check "renew permit back" [ "$(R GET renew)" = 1 ] || return 1
  # a permit taken away (the semaphore deleted) stops the command: exit 75
  bg "$HL" run --semaphore gone:1 --watchdog-lease 0.3 -- sleep 30; local g=$LAST
  wait_for 5 "holder runs" sh -c "[ \"\$(redis-cli -p $PORT ZCARD '{gone}:timeout')\" = 1 ]" || return 1
  R DEL gone '{gone}:timeout' >/dev/null
  wait_exit "$g" 5; check "lost permit -> 75 (got $WAIT_RC)" [ "$WAIT_RC" = 75 ] || return 1
  "$HL" run --semaphore jobs -- true 2>/dev/null; rc=$?
  check "NAME without :PERMITS is a usage error (got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" run --semaphore jobs:0 -- true 2>/dev/null; rc=$?
  check "0 permits is a usage error (got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" run --semaphore jobs:2 -s -- true 2>/dev/null; rc=$?
  check "--semaphore with -s is a usage error (got $rc)" [ "$rc" = 2 ] || return 1
  R HSET hashy f 1 >/dev/null
  "$HL" run --semaphore hashy:1 -- touch "$T/h.bad" 2>/dev/null; rc=$?
  check "a hash at the name: exit 1, untouched (got $rc)" [ "$rc" = 1 ] && [ "$(R HGET hashy f)" = 1 ] || return 1
}

test_usage_and_errors() {
  local rc
  "$HL" >/dev/null 2>&1; rc=$?; check "no command -> 2 (got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" run >/dev/null 2>&1; rc=$?; check "run without NAME -> 2 (got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" run x >/dev/null 2>&1; rc=$?; check "run without COMMAND -> 2 (got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" run --wait abc x -- true >/dev/null 2>&1; rc=$?; check "bad --wait -> 2 (got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" run --on-lost=maybe x -- true >/dev/null 2>&1; rc=$?; check "bad --on-lost -> 2" [ "$rc" = 2 ] || return 1
  "$HL" frobnicate >/dev/null 2>&1; rc=$?; check "unknown command -> 2" [ "$rc" = 2 ] || return 1
  for sub in run status unlock; do
    "$HL" "$sub" --help >"$T/help.txt" || { echo "    $sub --help failed"; return 1; }
    grep -q "Usage: hilock $sub" "$T/help.txt" || { echo "    $sub --help text"; return 1; }
  done
  "$HL" --help | grep -q "Usage: hilock" || return 1
  local dead; dead=$(free_port)
  "$HL" status --url "redis://127.0.0.1:$dead" x >/dev/null 2>"$T/e.err"; rc=$?
  check "unreachable server -> 69 (got $rc)" [ "$rc" = 69 ] || return 1
  check "one-line error on stderr" [ "$(wc -l <"$T/e.err")" = 1 ] && grep -q "^hilock: cannot connect" "$T/e.err" || { cat "$T/e.err"; return 1; }
  HILOCK_URL="redis://127.0.0.1:$dead" "$HL" run x -- true 2>/dev/null; rc=$?
  check "run against unreachable \$HILOCK_URL -> 69 (got $rc)" [ "$rc" = 69 ] || return 1
  # a URL that cannot be parsed is a usage error, for every command
  "$HL" run --url garbage://x x -- true 2>/dev/null; rc=$?
  check "run --url garbage://x -> 2 (got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" status --url "redis+cluster://" x >/dev/null 2>&1; rc=$?
  check "status --url redis+cluster:// -> 2 (got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" unlock --url "redis+sentinel:///m" x >/dev/null 2>&1; rc=$?
  check "unlock --url redis+sentinel:///m -> 2 (got $rc)" [ "$rc" = 2 ] || return 1
  "$HL" run --url "$HILOCK_URL" urlopt -- true; rc=$?
  check "--url works (got $rc)" [ "$rc" = 0 ]
}

# Options anywhere on the line (GNU getopt permutation); "--" ends them;
# run reads options up to COMMAND and never COMMAND's own.
test_options_anywhere() {
  local rc dead; dead=$(free_port)
  "$HL" status opt:a --url "redis://127.0.0.1:$dead" >/dev/null 2>&1; rc=$?
  check "status NAME --url DEAD honours --url: 69 (got $rc)" [ "$rc" = 69 ] || return 1
  HILOCK_URL="redis://127.0.0.1:$dead" "$HL" status opt:a --url "$HILOCK_URL" >/dev/null; rc=$?
  check "status NAME --url GOOD over a dead \$HILOCK_URL: 0 (got $rc)" [ "$rc" = 0 ] || return 1
  "$HL" status opt:a opt:b --json >"$T/o1.json" || return 1
  jcheck "$T/o1.json" "[l['name'] for l in d['locks']]==['opt:a','opt:b']" || return 1
  "$HL" status -- --json >"$T/o2.txt" || return 1
  grep -q "^lock --json: not locked" "$T/o2.txt" || { echo "    '--' did not end the options: $(cat "$T/o2.txt")"; return 1; }
  "$HL" run opt:r -w 0 --url "$HILOCK_URL" -- sh -c 'echo "args: $*" >'"$T/o3.txt" - -n --url x; rc=$?
  check "run NAME OPTIONS -- COMMAND: 0 (got $rc)" [ "$rc" = 0 ] || return 1
  check "COMMAND's own options left alone ($(cat "$T/o3.txt"))" [ "$(cat "$T/o3.txt")" = "args: -n --url x" ] || return 1
  "$HL" run opt:r echo -w 0 >"$T/o4.txt"; rc=$?
  check "run NAME COMMAND -w: COMMAND's (got $rc, $(cat "$T/o4.txt"))" [ "$rc" = 0 ] && [ "$(cat "$T/o4.txt")" = "-w 0" ] || return 1
  R HSET opt:u "01234567-89ab-cdef-0123-456789abcdef:7" 1 >/dev/null
  "$HL" unlock opt:u --force --yes >/dev/null; rc=$?
  check "unlock NAME --force --yes: 0 (got $rc)" [ "$rc" = 0 ] && [ "$(R EXISTS opt:u)" = 0 ]
}

# flock(1)'s spellings: -n (one try), -w SECONDS, -E CODE, -c 'command'.
test_flock_spellings() {
  local rc t0 dt
  bg "$HL" run fl -- sh -c "$(holder_cmd fl)"; local h=$LAST
  wait_for 5 "holder started" test -e "$T/fl.started" || return 1
  t0=$(now_ms)
  "$HL" run -n fl -- touch "$T/fl.bad" 2>/dev/null; rc=$?
  dt=$(( $(now_ms) - t0 ))
  check "-n: conflict exit 1 (got $rc) at once (${dt} ms)" [ "$rc" = 1 ] && [ "$dt" -lt 1500 ] || return 1
  "$HL" run --nonblock -E 9 fl -c "touch $T/fl.bad" 2>/dev/null; rc=$?
  check "--nonblock -E 9 -c: 9 (got $rc)" [ "$rc" = 9 ] || return 1
  "$HL" run fl -n --conflict-exit-code 8 -- true 2>/dev/null; rc=$?
  check "-n after NAME: 8 (got $rc)" [ "$rc" = 8 ] || return 1
  t0=$(now_ms)
  "$HL" run -w 0.3 --timeout 0.3 fl -- true 2>/dev/null; rc=$?
  dt=$(( $(now_ms) - t0 ))
  check "-w/--timeout 0.3: 1 (got $rc) after ~0.3 s (${dt} ms)" [ "$rc" = 1 ] && [ "$dt" -ge 280 ] || return 1
  check "nothing ran" test ! -e "$T/fl.bad" || return 1
  touch "$T/fl.go"; wait_exit "$h" 5
  "$HL" run -n fl -c 'echo "$0 ran" >'"$T/fl.out"'; exit 3'; rc=$?
  check "-c runs through sh -c and passes its status: 3 (got $rc)" [ "$rc" = 3 ] || return 1
  check "-c ran /bin/sh" [ "$(cat "$T/fl.out")" = "/bin/sh ran" ] || return 1
  "$HL" run fl -c true -- echo x >/dev/null 2>&1; rc=$?
  check "-c and COMMAND together: usage 2 (got $rc)" [ "$rc" = 2 ]
}

# status PATTERN (SCAN, companion keys left out) and the waiting clients
# (subscribers of the wake-up channel; a fair lock's: its queued waiters').
test_status_patterns_waiting() {
  R HSET pat:1 "01234567-89ab-cdef-0123-456789abcdef:7" 1 >/dev/null
  R HSET pat:2 "01234567-89ab-cdef-0123-456789abcdef:8" 2 >/dev/null
  R SET other:1 3 >/dev/null
  "$HL" status 'pat:*' --json >"$T/p1.json" || return 1
  jcheck "$T/p1.json" "[l['name'] for l in d['locks']]==['pat:1','pat:2'] and d['locks'][1]['holders'][0]['holds']==2" || return 1
  "$HL" status 'nomatch:*' >"$T/p2.txt" || return 1
  grep -q "^no name matches nomatch:\*" "$T/p2.txt" || { echo "    no-match output: $(cat "$T/p2.txt")"; return 1; }
  R DEL pat:1 pat:2 other:1 >/dev/null
  bg "$HL" run wt -- sh -c "$(holder_cmd wt)"; local h=$LAST
  wait_for 5 "holder started" test -e "$T/wt.started" || return 1
  bg "$HL" run wt -- true; local w1=$LAST
  bg "$HL" run wt -- true; local w2=$LAST
  # the holder listens on its lock's channel too (for a force unlock): 3
  wait_for 5 "two waiters subscribed" sh -c "[ \"\$(redis-cli -p $PORT PUBSUB NUMSUB 'redisson_lock__channel:{wt}' | tail -1)\" = 3 ]" || return 1
  "$HL" status --json wt >"$T/p3.json" || return 1
  jcheck "$T/p3.json" "d['locks'][0]['kind']=='reentrant' and d['locks'][0]['waiting']==3" || return 1
  "$HL" status wt | grep -q "^  waiting 3 " || { echo "    human output: $("$HL" status wt)"; return 1; }
  touch "$T/wt.go"
  wait_exit "$h" 5 && wait_exit "$w1" 5 && wait_exit "$w2" 5 || return 1
  "$HL" status --json wt >"$T/p4.json" || return 1
  jcheck "$T/p4.json" "d['locks'][0]['waiting']==0" || return 1
  # a fair lock: its queued waiter listens on its own channel (the holder
  # listens on the lock's, which is not counted for a fair lock)
  bg "$HL" run --fair pf:1 -- sh -c "$(holder_cmd pf)"; h=$LAST
  wait_for 5 "fair holder started" test -e "$T/pf.started" || return 1
  bg "$HL" run --fair pf:1 -- true; w1=$LAST
  wait_for 5 "fair waiter queued" sh -c "[ \"\$(redis-cli -p $PORT LLEN 'redisson_lock_queue:{pf:1}')\" = 1 ]" || return 1
  wait_for 5 "fair waiter listening" sh -c "\"$HL\" status --json pf:1 | grep -q '\"waiting\":1'" || return 1
  "$HL" status '*pf:1*' --json >"$T/p5.json" || return 1
  jcheck "$T/p5.json" "[l['name'] for l in d['locks']]==['pf:1'] and d['locks'][0]['kind']=='fair' and d['locks'][0]['waiting']==1 and len(d['locks'][0]['queue'])==1" || return 1
  touch "$T/pf.go"
  wait_exit "$h" 5 && wait_exit "$w1" 5
}

# --stats: one line "hilock: stats: k=v ... name=JSON" on stderr (docs/cli.md)
stats_line() { grep '^hilock: stats: ' "$1"; }
stat() { # stat FILE KEY -> the value of KEY in FILE's stats line
  stats_line "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
stats_is() { # stats_is FILE KEY=VALUE... : every pair as printed
  local f="$1" kv; shift
  check "one stats line in $(basename "$f")" [ "$(stats_line "$f" | wc -l)" = 1 ] || { cat "$f"; return 1; }
  for kv in "$@"; do
    local got; got="$(stat "$f" "${kv%%=*}")"
    check "${kv%%=*}=${kv#*=} (got '$got')" [ "$got" = "${kv#*=}" ] || { cat "$f"; return 1; }
  done
}

test_run_stats() {
  local z="renewals=0 renewal_failures=0 settles=0 reconnects=0 redirects=0"
  # granted at the first try; hold at least the command's 0.3 s
  "$HL" run --stats rs -- sleep 0.3 2>"$T/rs1.err" || return 1
  stats_is "$T/rs1.err" kind=reentrant outcome=granted path=first_try lost=0 lost_gone=0 \
    lost_expired=0 lost_in_doubt=0 $z || return 1
  check "hold_ms >= 300 ($(stat "$T/rs1.err" hold_ms))" [ "$(stat "$T/rs1.err" hold_ms)" -ge 300 ] || return 1
  check "name printed as a JSON string" grep -q ' name="rs"$' "$T/rs1.err" || return 1
  # without --stats: no line
  "$HL" run rs -- true 2>"$T/rs0.err" || return 1
  check "no stats line without --stats" [ ! -s "$T/rs0.err" ] || return 1
  # while another holds it: one try (busy), a wait that runs out, a wait woken by the release
  bg "$HL" run rs -- sh -c "$(holder_cmd rs)"; local h=$LAST
  wait_for 5 "holder started" test -e "$T/rs.started" || return 1
  "$HL" run --stats -n -q rs -- true 2>"$T/rs2.err"
  stats_is "$T/rs2.err" outcome=busy path=- hold_ms=- || return 1
  "$HL" run --stats -w 0.3 rs -- true 2>"$T/rs3.err"
  stats_is "$T/rs3.err" outcome=timed_out path=- hold_ms=- lost=0 || return 1
  check "wait_ms >= 300 ($(stat "$T/rs3.err" wait_ms))" [ "$(stat "$T/rs3.err" wait_ms)" -ge 300 ] || return 1
  bg "$HL" run --stats rs -- true 2>"$T/rs4.err"; local w=$LAST
  # the holder listens there too (a watchdog hold hears a force unlock): 2
  wait_for 5 "waiter subscribed" sh -c "[ \"\$(redis-cli -p $PORT PUBSUB NUMSUB 'redisson_lock__channel:{rs}' | tail -1)\" = 2 ]" || return 1
  # a waiter that is interrupted: cancelled
  bg env --default-signal=INT "$HL" run --stats rs -- true 2>"$T/rs5.err"; local c=$LAST
  wait_for 5 "second waiter subscribed" sh -c "[ \"\$(redis-cli -p $PORT PUBSUB NUMSUB 'redisson_lock__channel:{rs}' | tail -1)\" = 3 ]" || return 1
  kill -INT "$c"; wait_exit "$c" 5
  check "interrupted waiter exits 130 (got $WAIT_RC)" [ "$WAIT_RC" = 130 ] || return 1
  stats_is "$T/rs5.err" outcome=cancelled path=- hold_ms=- || return 1
  touch "$T/rs.go"
  wait_exit "$h" 5 && wait_exit "$w" 5 || return 1
  stats_is "$T/rs4.err" kind=reentrant outcome=granted path=woken lost=0 $z || return 1
  # a hold removed by a force unlock while the command runs: lost, and counted as gone
  bg "$HL" run --stats --watchdog-lease 0.3 --on-lost=warn rsl -- sh -c "$(holder_cmd rsl)" 2>"$T/rs6.err"; h=$LAST
  wait_for 5 "holder started" test -e "$T/rsl.started" || return 1
  "$HL" unlock --force --yes rsl >/dev/null || return 1
  wait_for 5 "loss reported" grep -q "warning: lock rsl was lost" "$T/rs6.err" || return 1
  touch "$T/rsl.go"; wait_exit "$h" 5
  check "warn keeps the command's status (0, got $WAIT_RC)" [ "$WAIT_RC" = 0 ] || return 1
  stats_is "$T/rs6.err" outcome=granted path=first_try lost=1 lost_gone=1 lost_expired=0 \
    lost_in_doubt=0 || return 1
  # the other kinds name themselves; a permit has no grant path
  "$HL" run --stats --fair -q rsf -- true 2>"$T/rs7.err" || return 1
  stats_is "$T/rs7.err" kind=fair outcome=granted path=first_try || return 1
  "$HL" run --stats -x rsw -- true 2>"$T/rs8.err" || return 1
  stats_is "$T/rs8.err" kind=write outcome=granted path=first_try || return 1
  "$HL" run --stats --fenced rsx -- true 2>"$T/rs9.err" || return 1
  stats_is "$T/rs9.err" kind=fenced outcome=granted path=first_try || return 1
  "$HL" run --stats --semaphore rss:1 -- true 2>"$T/rs10.err" || return 1
  stats_is "$T/rs10.err" kind=semaphore outcome=granted path=- lost=0 $z
}

test_top() {
  # 3 reentrant locks (one with a waiter), a fair lock with 2 queued, a
  # read-write lock read by 2, a permit of a semaphore; a plain key and a
  # lock outside the pattern are not listed. A holder of a reentrant or
  # read-write lock listens on its lock's channel (for a force unlock), so it
  # counts as waiting there, with the watchdog or a fixed lease alike
  local i
  for i in 1 2 3; do bg "$HL" run --lease 30 "job:r$i" -- sh -c "$(holder_cmd top$i)"; done
  bg "$HL" run --fair job:f -- sh -c "$(holder_cmd topf)"
  bg "$HL" run --lease 30 -s job:rw -- sh -c "$(holder_cmd toprw1)"
  bg "$HL" run --lease 30 -s job:rw -- sh -c "$(holder_cmd toprw2)"
  bg "$HL" run --semaphore job:sem:3 -- sh -c "$(holder_cmd topsem)"
  bg "$HL" run other:x -- sh -c "$(holder_cmd topx)"
  for i in top1 top2 top3 topf toprw1 toprw2 topsem topx; do
    wait_for 5 "$i started" test -e "$T/$i.started" || return 1
  done
  R SET job:plain x >/dev/null
  bg "$HL" run job:r1 -- true; local w1=$LAST
  bg "$HL" run --fair job:f -- true; local f1=$LAST
  wait_for 5 "first fair waiter queued" sh -c "[ \"\$(redis-cli -p $PORT LLEN 'redisson_lock_queue:{job:f}')\" = 1 ]" || return 1
  bg "$HL" run --fair job:f -- true; local f2=$LAST
  wait_for 5 "reentrant waiter subscribed" sh -c "[ \"\$(redis-cli -p $PORT PUBSUB NUMSUB 'redisson_lock__channel:{job:r1}' | tail -1)\" = 2 ]" || return 1
  wait_for 5 "both fair waiters listening" sh -c "\"$HL\" status --json job:f | grep -q '\"waiting\":2'" || return 1
  "$HL" top --once --json 'job:*' >"$T/top.json" || return 1
  # most waiting first, ties by name: job:f (its 2 queued waiters' own
  # channels; its holder listens on the lock's, not counted for a fair
  # lock), job:r1 (its holder and its waiter), job:rw (its 2 readers), then
  # job:r2, job:r3 and job:sem (their holders; a permit holder listens on
  # the semaphore's channel)
  jcheck "$T/top.json" "d['version']==1 and [l['name'] for l in d['locks']]==['job:f','job:r1','job:rw','job:r2','job:r3','job:sem']" || return 1
  jcheck "$T/top.json" "[l['kind'] for l in d['locks']]==['fair','reentrant','read-write','reentrant','reentrant','permit-semaphore']" || return 1
  jcheck "$T/top.json" "d['locks'][0]['waiting']==2 and len(d['locks'][0]['queue'])==2 and len(d['locks'][0]['holders'])==1" || return 1
  jcheck "$T/top.json" "[l['waiting'] for l in d['locks'][1:]]==[2,2,1,1,1]" || return 1
  jcheck "$T/top.json" "all(len(d['locks'][i]['holders'])==1 and d['locks'][i]['holders'][0]['holds']==1 and 0<d['locks'][i]['lease_ms']<=30000 for i in (1,3,4))" || return 1
  jcheck "$T/top.json" "d['locks'][2]['mode']=='read' and [h['role'] for h in d['locks'][2]['holders']]==['read','read']" || return 1
  jcheck "$T/top.json" "d['locks'][5]['count']==2 and d['locks'][5]['permits_taken']==1" || return 1
  # --sort name, and the table for people
  "$HL" top --once --json --sort name 'job:*' >"$T/top2.json" || return 1
  jcheck "$T/top2.json" "[l['name'] for l in d['locks']]==['job:f','job:r1','job:r2','job:r3','job:rw','job:sem']" || return 1
  "$HL" top --once 'job:*' >"$T/top.txt" || return 1
  check "table: header and 6 lines" [ "$(wc -l <"$T/top.txt")" = 8 ] || { cat "$T/top.txt"; return 1; }
  check "table: fair line first, 2 waiting" grep -Eq '^fair +2 +2 ' <(sed -n 3p "$T/top.txt") || { cat "$T/top.txt"; return 1; }
  check "table: read-write holders" grep -Eq '^rw/read .* 2 +- .*\+1 +job:rw$' "$T/top.txt" || { cat "$T/top.txt"; return 1; }
  "$HL" top --json 'job:*' 2>/dev/null; check "--json without --once is a usage error" [ $? = 2 ] || return 1
  "$HL" top --once --sort age 2>/dev/null; check "bad --sort is a usage error" [ $? = 2 ] || return 1
  for i in top1 top2 top3 topf toprw1 toprw2 topsem topx; do touch "$T/$i.go"; done
  for p in "${BG_PIDS[@]}"; do wait_exit "$p" 10 2>/dev/null; done
  R DEL job:plain >/dev/null
  "$HL" top --once --json 'job:*' >"$T/top3.json" || return 1
  # released: only the semaphore stays (its 3 permits free), as Redisson keeps it
  jcheck "$T/top3.json" "[(l['name'], l['count'], l['holders']) for l in d['locks']]==[('job:sem', 3, [])]"
}

# hilock top on a Redis Cluster of 3 masters (tests/openresty/lib.sh starts
# it): locks on every master are listed, one document, in order.
top_cluster_steps() {
  hl_start_cluster || { echo "    cannot start a cluster"; return 1; }
  local url="$CLUSTER_URL" n i
  # a holder listens on its lock's channel (for a force unlock), so each
  # of them counts as one waiting there
  for i in 1 2 3 4 5 6; do
    bg "$HL" run --url "$url" --lease 30 "job:c$i" -- sh -c "$(holder_cmd tc$i)"
  done
  bg "$HL" run --url "$url" --fair job:cf -- sh -c "$(holder_cmd tcf)"
  for i in tc1 tc2 tc3 tc4 tc5 tc6 tcf; do
    wait_for 10 "$i started" test -e "$T/$i.started" || return 1
  done
  bg "$HL" run --url "$url" --fair job:cf -- true
  wait_for 10 "fair waiter listening" sh -c "\"$HL\" status --url '$url' --json job:cf | grep -q '\"waiting\":1'" || return 1
  local masters=0 p
  for p in "${CLUSTER_PORTS[@]}"; do
    [ "$(redis-cli -p "$p" --scan --pattern 'job:c*' | wc -l)" -gt 0 ] && masters=$((masters + 1))
  done
  check "the locks are on 2 or 3 masters ($masters)" [ "$masters" -ge 2 ] || return 1
  "$HL" top --url "$url" --once --json 'job:*' >"$T/topc.json" || return 1
  # one waiting each (the fair one: its queued waiter), so by name
  jcheck "$T/topc.json" "[l['name'] for l in d['locks']]==['job:c%d' % i for i in range(1, 7)]+['job:cf']" || return 1
  jcheck "$T/topc.json" "d['locks'][6]['kind']=='fair' and len(d['locks'][6]['queue'])==1 and all(l['waiting']==1 for l in d['locks'])" || return 1
  jcheck "$T/topc.json" "all(l['kind']=='reentrant' and len(l['holders'])==1 and l['lease_ms']>0 for l in d['locks'][:6])" || return 1
  for i in tc1 tc2 tc3 tc4 tc5 tc6 tcf; do touch "$T/$i.go"; done
}

test_top_cluster() {
  . "$ROOT/tests/lua/lib.sh"
  . "$ROOT/tests/openresty/lib.sh"
  top_cluster_steps; local rc=$?
  for i in tc1 tc2 tc3 tc4 tc5 tc6 tcf; do touch "$T/$i.go"; done
  for p in "${BG_PIDS[@]}"; do wait_exit "$p" 10 2>/dev/null; done
  hl_cleanup
  return $rc
}

for t in test_second_waits_then_runs test_wait_zero_conflict test_exit_status_passthrough \
         test_sigterm_forwarded test_lost_lock_kills_command test_lost_lock_warn \
         test_fixed_lease_expiry test_status_unlocked test_status_reentrant \
         test_status_fair_queue test_interrupted_fair_waiter_leaves_queue \
         test_status_readwrite_and_unknown test_unlock_cli test_unlock_confirmation_on_tty \
         test_usage_and_errors test_tls_options test_shared_exclusive_fenced test_semaphore \
         test_options_anywhere test_flock_spellings test_status_patterns_waiting test_run_stats test_top test_top_cluster; do
  if [ -n "${CLI_TESTS:-}" ] && [[ " $CLI_TESTS " != *" $t "* ]]; then continue; fi
  run_test "$t"
done

echo
echo "cli tests: $passed passed, $failed failed ($(( $(date +%s) - started ))s)"
[ "$failed" -gt 0 ] && echo "failed: ${failed_names[*]}"
[ "$failed" -eq 0 ]
