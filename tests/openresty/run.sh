#!/usr/bin/env bash
# OpenResty suite: Debian's nginx + lua module on a loopback port (one worker)
# running resty.hilock against a throwaway redis-server. Exit 0 = all passed.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../lua/lib.sh"
. "$here/lib.sh"
trap hl_cleanup EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
passes=0; fails=0
ok()   { echo "  ok    $*"; passes=$((passes+1)); }
bad()  { echo "  FAIL  $*"; fails=$((fails+1)); }
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
ms_now() { date +%s%3N; }

command -v curl >/dev/null || { echo "openresty: curl missing (tests/openresty/deps.sh)"; exit 1; }
hl_build || { echo "openresty: build failed"; exit 1; }
hl_start_redis --requirepass s3cret || { echo "openresty: redis failed"; exit 1; }
REDIS_AUTH_URL="redis://:s3cret@127.0.0.1:$REDIS_PORT/3"
hl_start_redis || { echo "openresty: redis failed"; exit 1; }
MAIN_REDIS_PORT="$REDIS_PORT"; MAIN_REDIS_URL="$REDIS_URL"; MAIN_REDIS_PID="$REDIS_PID"
# Redis Cluster (3 masters) and Sentinel (1 master, 1 replica, 3 sentinels)
# for the (j)-(m) tests; the nginx below knows all three URLs.
ha_t0=$(date +%s)
CLUSTER_UP=0; SENTINEL_UP=0
hl_start_cluster && CLUSTER_UP=1
hl_start_sentinels && SENTINEL_UP=1
REDIS_PORT="$MAIN_REDIS_PORT"; REDIS_URL="$MAIN_REDIS_URL"
echo "  ..    cluster up=$CLUSTER_UP, sentinels up=$SENTINEL_UP ($(( $(date +%s) - ha_t0 ))s)"
# A TLS server (throwaway CA: tests/c/make_certs.sh) with a password that
# needs percent-encoding, also on a unix socket, for the (t) test.
hl_tmpdir; chmod 755 "$HL_TMP"; TLS_TMP="$HL_TMP"
TLS_UP=0
bash "$HL_ROOT/tests/c/make_certs.sh" "$TLS_TMP/certs" &&
for try in 1 2 3; do # a new TLS port each try: the last one may have been taken
  hl_free_port || break
  tls_port="$HL_PORT"
  if hl_start_redis --tls-port "$tls_port" --tls-cert-file "$TLS_TMP/certs/server.crt" \
       --tls-key-file "$TLS_TMP/certs/server.key" --tls-ca-cert-file "$TLS_TMP/certs/ca.crt" \
       --tls-auth-clients no --requirepass 'p@ss%word' \
       --unixsocket "$TLS_TMP/r.sock" --unixsocketperm 777; then
    TLS_UP=1
    export TLS_URL="rediss://:p%40ss%25word@127.0.0.1:$tls_port/0?tls_server_name=localhost"
    export UNIX_URL="unix://:p%40ss%25word@$TLS_TMP/r.sock?db=0"
    export HL_TLS_CA="$TLS_TMP/certs/ca.crt"
    break
  fi
done
# A second TLS server that requires a client certificate (tls-auth-clients
# yes) for the (v) test.
MTLS_UP=0
[ "$TLS_UP" = 1 ] && for try in 1 2 3; do
  hl_free_port || break
  mtls_port="$HL_PORT"
  if hl_start_redis --tls-port "$mtls_port" --tls-cert-file "$TLS_TMP/certs/server.crt" \
       --tls-key-file "$TLS_TMP/certs/server.key" --tls-ca-cert-file "$TLS_TMP/certs/ca.crt" \
       --tls-auth-clients yes; then
    MTLS_UP=1
    export MTLS_URL="rediss://127.0.0.1:$mtls_port/0?tls_server_name=localhost"
    export MTLS_CERTS="$TLS_TMP/certs"
    break
  fi
done
REDIS_PORT="$MAIN_REDIS_PORT"; REDIS_URL="$MAIN_REDIS_URL"
hl_start_nginx || { echo "openresty: nginx failed"; exit 1; }
URL="http://127.0.0.1:$NGINX_PORT"

# A lock held by another process through the blocking C core (Lua 5.4
# module): prints "held" into $1 once it has the lock.
hold_elsewhere() { # outfile name lease_s hold_ms [fair [url]]
  LUA_CPATH="$HL_BUILD/lua/5.4/?.so" lua5.4 "$here/holder.lua" "${6:-$REDIS_URL}" \
    "$2" "$3" "$4" "${5:-}" >"$1" 2>&1 &
  HOLDER_PID=$!
  HL_PIDS+=("$HOLDER_PID")
  local deadline=$(( $(ms_now) + 5000 ))
  while [ "$(ms_now)" -lt "$deadline" ]; do
    grep -q held "$1" 2>/dev/null && return 0
    sleep 0.01
  done
  return 1
}

# t_call, t_done: CLOCK_MONOTONIC ms around hold_elsewhere's release, as the
# holder wrote them into its outfile ($1); /wait says when its acquire
# returned on the same clock, so "did it wait for the release" does not
# depend on when curl got to start on a loaded machine.
released_at() { read -r _ t_call t_done <<<"$(grep released "$1")"; }

# (a) 200 concurrent requests, each: lock, GET, sleep 1 ms, SET +1, unlock.
#     SCRIPT FLUSH first, so the driver's NOSCRIPT -> EVAL path runs too.
concurrent_count() { # fair(0/1) n
  local fair="$1" n="$2" key="or:count" cfg="$HL_TMP/curl-$1.cfg"
  [ "$fair" = 1 ] && key="or:count:fair"
  rcli SCRIPT FLUSH >/dev/null; rcli DEL "$key" >/dev/null; rcli CONFIG RESETSTAT >/dev/null
  : >"$cfg"
  for i in $(seq 1 "$n"); do
    printf 'url = "%s/count?fair=%s&i=%d"\noutput = "/dev/null"\n' "$URL" "$fair" "$i" >>"$cfg"
  done
  local t0; t0=$(ms_now)
  local codes; codes=$(curl -sS -Z --parallel-max "$n" --max-time 60 -w '%{http_code}\n' -K "$cfg" 2>"$HL_TMP/curl-$fair.err")
  local dt=$(( $(ms_now) - t0 ))
  local good; good=$(grep -c '^200$' <<<"$codes")
  local got; got=$(rcli GET "$key")
  # script calls: each request tries, retries once subscribed and releases;
  # waking every waiter on every unlock (thundering herd) would cost ~n*n/2
  local scripts; scripts=$(rcli INFO commandstats | tr -d '\r' |
    awk -F'[=,:]' '/^cmdstat_(evalsha|eval):/ { s += $3 } END { print s + 0 }')
  local label="(a) $n concurrent locked increments (fair=$fair): $got, $good x HTTP 200, ${dt} ms, $scripts script calls"
  if [ "$good" = "$n" ] && [ "$got" = "$n" ] && [ "$scripts" -lt $((6 * n)) ]; then
    ok "$label"; else bad "$label"; fi
}
concurrent_count 0 200
concurrent_count 1 200

# (b) a request waiting 2 s for a lock held elsewhere does not block the
#     worker (nginx runs one): /ping, asked every 50 ms from 0.2 s into the
#     wait until it ends, is answered while the request still waits. A worker blocked by
#     the wait answers no ping before the wait ends. The pings answered
#     during the wait (at least 3) take < 50 ms at the median: on a loaded
#     machine a single ping can wait longer for a CPU, a worker blocked in
#     slices of the wait delays most of them.
name="or:busy:$RANDOM"
if hold_elsewhere "$HL_TMP/hold-b.out" "$name" 30 2800; then
  ( curl -sS --max-time 10 "$URL/wait?name=$name&wait=2" >"$HL_TMP/wait-b.out"
    ms_now >"$HL_TMP/wait-b.end" ) &
  WAITER=$!
  sleep 0.2
  pings=()
  while [ ! -s "$HL_TMP/wait-b.end" ] && [ "${#pings[@]}" -lt 40 ]; do
    t=$(curl -sS -o /dev/null -w '%{time_total}' "$URL/ping")
    pings+=("$(ms_now) $(awk -v t="$t" 'BEGIN { printf "%d", t * 1000000 }')")
    sleep 0.05
  done
  wait "$WAITER"
  ended=$(cat "$HL_TMP/wait-b.end")
  read -r res waited _ <"$HL_TMP/wait-b.out"
  # latencies (us) of the pings answered before the wait's answer came back
  during=$(printf '%s\n' "${pings[@]}" | awk -v e="$ended" '$1 < e { print $2 }' | sort -n)
  n=$(grep -c . <<<"$during")
  median=$(sed -n "$(( (n + 1) / 2 ))p" <<<"$during"); median=${median:-0}
  worst=$(tail -1 <<<"$during"); worst=${worst:-0}
  label="(b) /ping during a 2 s lock wait: $n answered during the wait, median $((median/1000)).$(( (median%1000)/100 )) ms, worst $((worst/1000)).$(( (worst%1000)/100 )) ms; waiter: $res after ${waited} ms"
  if [ "$n" -ge 3 ] && [ "$median" -lt 50000 ] && [ "$res" = timeout ] &&
     [ "$waited" -ge 1900 ] && [ "$waited" -lt 2700 ]; then
    ok "$label"; else bad "$label"; fi
  wait "$HOLDER_PID" 2>/dev/null
else
  bad "(b) could not take the lock from another process: $(cat "$HL_TMP/hold-b.out")"
fi

# (c) a lock held by a C-core process (30 s lease) blocks the request until
#     released ~300 ms later; the request wakes on the unlock message.
name="or:wake:$RANDOM"
if hold_elsewhere "$HL_TMP/hold-c.out" "$name" 30 300; then
  read -r res waited _ wat < <(curl -sS --max-time 40 "$URL/wait?name=$name&wait=20")
  wait "$HOLDER_PID" 2>/dev/null
  released_at "$HL_TMP/hold-c.out"; after=$(( ${wat:-0} - ${t_done:-0} ))
  label="(c) request blocked by a C-core holder (lease 30 s, released after 300 ms): $res ${after} ms after the unlock returned (waited ${waited} ms)"
  if [ "$res" = acquired ] && [ "${wat:-0}" -ge "${t_call:-1}" ] && [ "$after" -lt 3000 ]; then
    ok "$label"; else bad "$label"; fi
else
  bad "(c) could not take the lock from another process: $(cat "$HL_TMP/hold-c.out")"
fi

# (d) two requests in one worker are different owners; reentrancy within one.
name="or:ident:$RANDOM"
# The first holds until told (the key or:stop:{N}), not for a fixed time:
# on a loaded machine the second request could start after a 1 s hold ended.
curl -sS --max-time 20 "$URL/hold?name=$name&ms=15000" >"$HL_TMP/hold-d.out" &
HOLDREQ=$!
deadline=$(( $(ms_now) + 3000 ))
while [ "$(rcli EXISTS "$name")" != 1 ] && [ "$(ms_now)" -lt "$deadline" ]; do sleep 0.01; done
other=$(curl -sS --max-time 10 "$URL/try?name=$name")
rcli SET "or:stop:{$name}" 1 PX 60000 >/dev/null
wait "$HOLDREQ"
holder=$(cat "$HL_TMP/hold-d.out")
label="(d) second request while the first holds: '$other'; first: '$holder'"
if [ "$other" = "timeout release=nil:not owner" ] && [ "$holder" = released ]; then
  ok "$label"; else bad "$label"; fi

# (e) the watchdog (ngx.timer) keeps a lock taken without lease alive.
name="or:wd:$RANDOM"
res=$(curl -sS --max-time 10 "$URL/watchdog?name=$name")
label="(e) watchdog lease 0.6 s kept the lock 1.5 s: '$res'"
if [ "$res" = "kept lost=false" ] && [ "$(rcli EXISTS "$name")" = 0 ]; then
  ok "$label"; else bad "$label"; fi

# (e6) ... and a worker held up past a renewal (a busy loop in a request, no
#      yield, to 2.55 s of a 3 s lease: the renewal tick and the doubt
#      deadline both fire late, in one cycle) renews before it looks for
#      doubts: the live hold is kept, not reported lost (the engine's
#      renew_doubt_at; the C fix was 00d7e80). Right after the grant, and
#      once the timers wait (asleep=1).
for asleep in 0 1; do
  res=$(curl -sS --max-time 10 "$URL/busy?name=or:busy:$RANDOM&asleep=$asleep")
  label="(e6) worker held up to 2.55 s of a 3 s lease (asleep=$asleep): '$res'"
  if [[ "$res" =~ ^lost=false\ why=nil\ ttl=([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -gt 2000 ]; then
    ok "$label"; else bad "$label"; fi
done

# (e7) parity with the blocking bindings: lk:extend (as hilock_lock_extend and
#      Python's Lock.extend: adds to the lease; not owner / a read-write side
#      refused; a bad time raises) and semaphore counts up to the engine's
#      +-999999999999999 (before: add/set beyond +-2147483647 refused).
res=$(curl -sS --max-time 10 "$URL/parity?name=or:parity:$RANDOM")
label="(e7) extend and semaphore bounds as the other bindings: '$res'"
want="add=true avail=1000000000001 over=invalid argument set=true setover=invalid argument neg=true"
want="$want extend=true ttl=true other=not owner zero=false none=false released=not owner rw=invalid argument"
if [ "$res" = "$want" ]; then ok "$label"; else bad "$label"; fi

# (e4) ... renewing many holds with one script call per tick (the engine's
#      renew_many): 20 holds, ~7 ticks in 1.5 s; one call per hold would
#      make ~140.
res=$(curl -sS --max-time 10 "$URL/wdmany?name=or:wdm:$RANDOM&n=20")
label="(e4) watchdog renews 20 holds for 1.5 s (lease 0.6 s): '$res'"
if [[ "$res" =~ ^kept=true\ calls=([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -ge 3 ] &&
   [ "${BASH_REMATCH[1]}" -le 20 ]; then ok "$label"; else bad "$label"; fi

# (e5) unlock latches: one key per owner (the engine's per-owner request ids),
#      not one per release: 50 pairs of one request leave at most one.
res=$(curl -sS --max-time 20 "$URL/bench?n=50")
latches=$(rcli --scan --pattern 'redisson_unlock_latch:{bench:or:*' | wc -l)
label="(e5) 50 lock+unlock pairs of one request: '$res', unlock latch keys: $latches"
if [[ "$res" =~ ^50\  ]] && [ "$latches" -le 1 ]; then ok "$label"; else bad "$label"; fi

# (e2) ... and reports a watchdog lock deleted behind its back as lost.
res=$(curl -sS --max-time 10 "$URL/lost?name=or:lost:$RANDOM")
label="(e2) watchdog notices a forced unlock: '$res'"
if [ "$res" = "lost=true release=nil:not owner" ]; then ok "$label"; else bad "$label"; fi

# (e8) client:stats(): exact counters after a scripted sequence (1 timeout, 1
#      busy, 1 wait cancelled by lk:cancel() from another light thread, 1 woken grant, 1 grant lost to a force unlock, 1 reported in doubt
#      while the server is stopped), and the two losses logged at WARN.
name="or:stats:$RANDOM"
res=$(curl -sS --max-time 30 "$URL/stats?name=$name&step=1")
if [ "$res" = ready ]; then
  kill -STOP "$MAIN_REDIS_PID"
  res=$(curl -sS --max-time 30 "$URL/stats?name=$name&step=2")
  kill -CONT "$MAIN_REDIS_PID"
fi
label="(e8) client:stats() after the scripted sequence: '$res'"
if [ "$res" = "granted=3 timed_out=1 cancelled=1 busy=1 first_try=2 woken=1 retried=0 waits=5 late=some holds=3 lost_gone=1 lost_expired=0 lost_in_doubt=1 settles=0 redirects=0 acks=0 renewal_commands=some others=0" ] &&
   grep -q "hilock: lock '$name:g' lost: removed on the server" "$NGINX_TMP/error.log" &&
   grep -q "hilock: lock '$name:d' lost (in doubt)" "$NGINX_TMP/error.log"; then
  ok "$label"; else bad "$label"; grep "$name" "$NGINX_TMP/error.log" | tail -5; fi

# (e9) client:stats{by_name = true}: stats_names = 2, two names tracked and
#      the third counted in the reentrant kind's other entry, exact figures
#      (kind name granted first_try busy timed_out cancelled waits holds gone
#      expired doubt; N:a's waits include one cancelled by lk:cancel()); the
#      kind's totals (granted busy timed_out cancelled waits holds) are their sums.
res=$(curl -sS --max-time 30 "$URL/name_stats?name=or:pn:$RANDOM")
label="(e9) client:stats{by_name = true}: '$res'"
if [ "$res" = "reentrant a 1 1 1 1 1 3 1 0 0 0; reentrant b 1 1 0 0 0 1 1 1 0 0; reentrant (other) 1 1 0 1 0 2 1 0 0 0; kind 3 1 2 1 6 3; plain=true" ]; then
  ok "$label"; else bad "$label"; fi

# (e10) lk:cancel() from another light thread ends a 10 s acquire waiting
#      while another client holds: nil, "canceled" in under 1 s, nothing of
#      it left on the server (fair: its queue entry and its own channel's
#      subscription), not held, a second cancel finds nothing, counted as
#      cancelled (not timed out). Reentrant: another waiter on the same
#      shared listener (woken too by the cancel) still gets the lock at the
#      holder's release.
for fair in 0 1; do
  res=$(curl -sS --max-time 30 "$URL/cancel?name=or:cancel:$fair:$RANDOM&fair=$fair")
  label="(e10) lk:cancel() of a waiting acquire (fair=$fair): '$res'"
  if [ "$fair" = 1 ]; then
    want="cancel=true res=nil err=canceled ms=([0-9]+) queue=0 subs=0 held=false again=false cancelled=1 timed_out=0 granted=0"
  else
    want="cancel=true res=nil err=canceled ms=([0-9]+) queue=0 subs=-2 held=false again=false other=true cancelled=1 timed_out=0 granted=1"
  fi
  if [[ "$res" =~ ^$want$ ]] && [ "${BASH_REMATCH[1]}" -lt 1000 ]; then
    ok "$label"; else bad "$label"; fi
done

# (e11) ... and from another request of the worker (the lock object kept in
#      a module table): the waiting request answers "canceled" in under 1 s
#      of the cancel, holds nothing, the fair queue is empty, cancelled = 1.
for fair in 0 1; do
  name="or:xcancel:$fair:$RANDOM"
  curl -sS --max-time 30 "$URL/cancel_wait?name=$name&fair=$fair" >"$HL_TMP/xcancel-$fair.out" &
  WAITER=$!
  by=$(curl -sS --max-time 30 "$URL/cancel_by?name=$name")
  wait "$WAITER"
  res=$(cat "$HL_TMP/xcancel-$fair.out")
  label="(e11) lk:cancel() from another request (fair=$fair): '$by' / '$res'"
  if [[ "$by" =~ ^cancel=true\ ms=([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -lt 1000 ] &&
     [ "$res" = "res=nil err=canceled held=false queue=0 cancelled=1" ]; then
    ok "$label"; else bad "$label"; fi
done

# (e3) ... and remembers losses of request owners in bounded memory
#      (lost_memory = 8: at most 16 of 30 remembered, the newest ones).
res=$(curl -sS --max-time 10 "$URL/lost_bounded?name=$RANDOM")
label="(e3) lost holds of 30 owners, lost_memory 8: '$res'"
if [[ "$res" =~ ^watched=none\ remembered=([0-9]+)\ lost=([0-9]+)$ ]] &&
   [ "${BASH_REMATCH[1]}" -ge 8 ] && [ "${BASH_REMATCH[1]}" -le 16 ] &&
   [ "${BASH_REMATCH[2]}" = "${BASH_REMATCH[1]}" ]; then ok "$label"; else bad "$label"; fi

# (g) fair lock against a C-core holder: a waiter that gives up leaves the
#     queue; the next one is woken on its own channel by the holder's unlock.
name="or:fair:$RANDOM"
if hold_elsewhere "$HL_TMP/hold-g.out" "$name" 30 1200 fair; then
  read -r res1 waited1 _ < <(curl -sS --max-time 10 "$URL/wait?name=$name&wait=0.3&fair=1")
  qlen=$(rcli LLEN "redisson_lock_queue:{$name}"); zlen=$(rcli ZCARD "redisson_lock_timeout:{$name}")
  read -r res2 waited2 _ < <(curl -sS --max-time 40 "$URL/wait?name=$name&wait=20&fair=1")
  wait "$HOLDER_PID" 2>/dev/null
  label="(g) fair: gave up '$res1' after ${waited1} ms (queue $qlen/$zlen), next '$res2' after ${waited2} ms"
  if [ "$res1" = timeout ] && [ "$qlen" = 0 ] && [ "$zlen" = 0 ] && [ "$res2" = acquired ] &&
     [ "$waited2" -lt 5000 ]; then ok "$label"; else bad "$label"; fi
else
  bad "(g) could not take the fair lock from another process: $(cat "$HL_TMP/hold-g.out")"
fi

# (h) AUTH + SELECT from the URL on fresh pooled connections; bad password.
res=$(curl -sS --max-time 10 "$URL/auth")
label="(h) password + db 3 from the URL: '$res'"
if [ "$res" = "true:nil db=3 held=true release=true wrong=nil:auth" ]; then
  ok "$label"; else bad "$label"; fi

# (i) the pub/sub connection is killed while a request waits: the driver
#     listens again and still wakes on the unlock (reentrant: the worker's
#     shared listener; fair: the request's own subscription).
for fair in 0 1; do
  name="or:kill:$fair:$RANDOM"
  kind=""; [ "$fair" = 1 ] && kind=fair
  if hold_elsewhere "$HL_TMP/hold-i$fair.out" "$name" 30 1500 $kind; then
    curl -sS --max-time 40 "$URL/wait?name=$name&wait=25&fair=$fair" >"$HL_TMP/wait-i$fair.out" &
    WAITER=$!
    sleep 0.5
    killed=$(rcli CLIENT KILL TYPE pubsub)
    wait "$WAITER"; wait "$HOLDER_PID" 2>/dev/null
    read -r res waited _ <"$HL_TMP/wait-i$fair.out"
    label="(i) pub/sub connection killed ($killed) during a wait (fair=$fair): $res after ${waited} ms"
    if [ "$res" = acquired ] && [ "${killed:-0}" -ge 1 ] && [ "$waited" -lt 5000 ]; then
      ok "$label"; else bad "$label"; fi
  else
    bad "(i) could not take the lock from another process: $(cat "$HL_TMP/hold-i$fair.out")"
  fi
done

# (w) read-write lock against a C-core process, woken by messages on
#     redisson_rwlock:{N} (leases of 30 s: only a message wakes anyone early).
#     Times are CLOCK_MONOTONIC ms of both processes. w1: a C-core reader
#     holds 400 ms: two requests read at once (shared), a writer request
#     waits and gets it after the reader's unlock. w2: a C-core writer holds
#     400 ms: three reader requests wait and, holding 500 ms each, all get it
#     together (the write unlock wakes every waiter; one by one, the second
#     would come 500 ms after the first).
name="or:rw1:$RANDOM"
if hold_elsewhere "$HL_TMP/hold-w1.out" "$name" 30 400 read; then
  reqs=()
  for i in 1 2; do curl -sS --max-time 10 "$URL/wait?name=$name&wait=0&kind=read&hold_ms=100" >"$HL_TMP/w1-r$i.out" & reqs+=($!); done
  curl -sS --max-time 10 "$URL/wait?name=$name&wait=20&kind=write" >"$HL_TMP/w1-w.out" & reqs+=($!)
  wait "${reqs[@]}"; wait "$HOLDER_PID" 2>/dev/null
  read -r r1 _ <"$HL_TMP/w1-r1.out"; read -r r2 _ <"$HL_TMP/w1-r2.out"
  read -r rw _ _ wat <"$HL_TMP/w1-w.out"; released_at "$HL_TMP/hold-w1.out"
  after=$(( ${wat:-0} - ${t_done:-0} ))
  label="(w1) C-core reader holds 400 ms: readers '$r1' '$r2'; writer '$rw' ${after} ms after the reader's unlock returned"
  if [ "$r1" = acquired ] && [ "$r2" = acquired ] && [ "$rw" = acquired ] &&
     [ "${wat:-0}" -ge "${t_call:-1}" ] && [ "$after" -lt 1000 ]; then ok "$label"; else bad "$label"; fi
else
  bad "(w1) could not take the read lock from another process: $(cat "$HL_TMP/hold-w1.out")"
fi
name="or:rw2:$RANDOM"
if hold_elsewhere "$HL_TMP/hold-w2.out" "$name" 30 400 write; then
  reqs=()
  for i in 1 2 3; do curl -sS --max-time 10 "$URL/wait?name=$name&wait=20&kind=read&hold_ms=500" >"$HL_TMP/w2-r$i.out" & reqs+=($!); done
  wait "${reqs[@]}"; wait "$HOLDER_PID" 2>/dev/null
  released_at "$HL_TMP/hold-w2.out"
  got=""; early=0; worst=-1
  for i in 1 2 3; do
    read -r r _ _ at <"$HL_TMP/w2-r$i.out"; got="$got $r"
    [ "$r" = acquired ] || continue
    [ "$at" -lt "${t_call:-0}" ] && early=$((early + 1))
    [ $(( at - ${t_done:-0} )) -gt "$worst" ] && worst=$(( at - ${t_done:-0} ))
  done
  label="(w2) C-core writer holds 400 ms; three waiting readers holding 500 ms each:$got; last in ${worst} ms after the write unlock returned, $early before it was called"
  if [ "$got" = " acquired acquired acquired" ] && [ "$early" = 0 ] && [ "$worst" -lt 400 ]; then
    ok "$label"; else bad "$label"; fi
else
  bad "(w2) could not take the write lock from another process: $(cat "$HL_TMP/hold-w2.out")"
fi
#     w4: 60 concurrent requests on one read-write lock, every third a
#     writer: a writer never meets anyone inside, readers do share.
name="or:rwx:$RANDOM"; cfg="$HL_TMP/curl-rw.cfg"; : >"$cfg"
for i in $(seq 1 60); do
  printf 'url = "%s/rwcount?name=%s&w=%d&i=%d"\n' "$URL" "$name" $(( i % 3 == 0 )) "$i" >>"$cfg"
done
out=$(curl -sS -Z --parallel-max 60 --max-time 60 -K "$cfg" 2>"$HL_TMP/curl-rw.err")
served=$(grep -c '^bad=' <<<"$out")
bad=$(grep -o 'bad=[0-9]*' <<<"$out" | cut -d= -f2 | sort -n | tail -1)
maxr=$(grep -o 'maxr=[0-9]*' <<<"$out" | cut -d= -f2 | sort -n | tail -1)
label="(w4) 60 requests on one read-write lock (20 writers): $served served, ${bad:-?} overlaps with a writer, up to ${maxr:-?} readers at once; $(rcli EXISTS "$name") keys left"
if [ "$served" = 60 ] && [ "$bad" = 0 ] && [ "${maxr:-0}" -ge 2 ] && [ "$(rcli EXISTS "$name")" = 0 ]; then
  ok "$label"; else bad "$label"; head -3 "$HL_TMP/curl-rw.err"; fi
for kind in read write; do
  name="or:rwwd:$kind:$RANDOM"
  res=$(curl -sS --max-time 10 "$URL/watchdog?name=$name&kind=$kind")
  label="(w3) watchdog lease 0.6 s kept the $kind lock 1.5 s: '$res'"
  if [ "$res" = "kept lost=false" ] && [ "$(rcli EXISTS "$name")" = 0 ]; then
    ok "$label"; else bad "$label"; fi
done

# (x) fenced lock: tokens from a C-core process and from requests on one
#     name increase strictly, whoever takes it, and start above the counter
#     found (40; since 27fe450 a token is never below the server's clock in
#     ms either); a request waiting on a C-core holder wakes on its unlock.
name="or:fenced:$RANDOM"; rcli SET "redisson_lock_token:{$name}" 40 >/dev/null
tokens=""
if hold_elsewhere "$HL_TMP/hold-x1.out" "$name" 30 300 fenced; then
  read -r _ t1 _ <<<"$(grep held "$HL_TMP/hold-x1.out")"
  read -r r2 w2 t2 _ < <(curl -sS --max-time 10 "$URL/wait?name=$name&wait=10&kind=fenced")
  wait "$HOLDER_PID" 2>/dev/null
  hold_elsewhere "$HL_TMP/hold-x3.out" "$name" 30 10 fenced; wait "$HOLDER_PID" 2>/dev/null
  read -r _ t3 _ <<<"$(grep held "$HL_TMP/hold-x3.out")"
  read -r r4 _ t4 _ < <(curl -sS --max-time 10 "$URL/wait?name=$name&wait=1&kind=fenced")
  tokens="$t1 $t2 $t3 $t4"
  label="(x) fenced tokens C-core, request (woke after ${w2} ms), C-core, request: $tokens"
  if [ "$r2" = acquired ] && [ "$r4" = acquired ] && [ "${w2:-0}" -lt 1500 ] &&
     [ "${t1:-0}" -gt 40 ] && [ "${t2:-0}" -gt "${t1:-0}" ] && [ "${t3:-0}" -gt "${t2:-0}" ] &&
     [ "${t4:-0}" -gt "${t3:-0}" ]; then ok "$label"; else bad "$label"; fi
else
  bad "(x) could not take the fenced lock from another process: $(cat "$HL_TMP/hold-x1.out")"
fi

# (y) semaphores and the count-down latch through the engine (proto.sem).
#     y1: 30 concurrent requests on a 3-permit semaphore, each inside 50 ms:
#     never more than 3 inside, all served, woken by release messages.
name="or:sem:$RANDOM"; cfg="$HL_TMP/curl-sem.cfg"; : >"$cfg"
for i in $(seq 1 30); do
  printf 'url = "%s/semcount?name=%s&i=%d"\n' "$URL" "$name" "$i" >>"$cfg"
done
t0=$(ms_now)
out=$(curl -sS -Z --parallel-max 30 --max-time 30 -K "$cfg" 2>"$HL_TMP/curl-sem.err")
dt=$(( $(ms_now) - t0 ))
served=$(grep -c '^max=' <<<"$out"); most=$(grep -o '^max=[0-9]*' <<<"$out" | cut -d= -f2 | sort -n | tail -1)
label="(y1) 30 requests on a 3-permit semaphore: $served served, at most ${most:-?} inside at once, ${dt} ms, $(rcli GET "$name") permits left"
if [ "$served" = 30 ] && [ "$most" = 3 ] && [ "$(rcli GET "$name")" = 3 ]; then
  ok "$label"; else bad "$label"; head -3 "$HL_TMP/curl-sem.err"; fi
#     y2: a waiter woken by the release within 200 ms (no lease, nothing to
#     poll); try_set keeps an existing count; bad input and a key that is no
#     count refused, the key untouched; a permit-expirable permit whose lease
#     ends comes back without a message and its late release is "not owner";
#     a latch opens both awaiting threads at the third count-down.
res=$(curl -sS --max-time 30 "$URL/sem?name=or:sem2:$RANDOM")
# (the late release finds its permit given back already: the second acquire's
# try reclaimed the expired lease)
want='again=false woken=true avail=0 drain=1 zero=invalid argument: permits are 1..2147483647 expired=true late=not owner: the permit is not taken \(released before\?\) own=true left=0 latch=2 count=0 wrong=wrong type.* kept=abc'
label="(y2) semaphore, permit-expirable semaphore, latch: '$res'"
if [[ "$res" =~ ^${want}$ ]]; then ok "$label"; else bad "$label"; fi

# (u) the server stalls (SIGSTOP) while an acquire attempt is in flight: the
#     request gets a connection error after its 300 ms command timeout; once
#     the server resumes and runs the attempt, the driver settles it on the
#     same connection: no hold is left (reentrant), no line entry (fair,
#     queued behind a foreign hold).
for fair in 0 1; do
  name="or:stall:$fair:$RANDOM"
  # warm up (pooled connection, script cached) on a free lock
  curl -sS --max-time 5 "$URL/stall?name=or:stallwarm:$fair&fair=$fair" >/dev/null
  rcli DEL "or:stallwarm:$fair" >/dev/null
  if [ "$fair" = 1 ]; then
    rcli HSET "$name" "elsewhere:1" 1 >/dev/null; rcli PEXPIRE "$name" 30000 >/dev/null
  fi
  kill -STOP "$MAIN_REDIS_PID"
  curl -sS --max-time 20 "$URL/stall?name=$name&fair=$fair" >"$HL_TMP/stall-$fair.out" &
  STALLREQ=$!
  # the caller has its answer while the server is still stopped
  hl_wait_until 3000 bash -c "[ -s '$HL_TMP/stall-$fair.out' ]"
  res=$(head -1 "$HL_TMP/stall-$fair.out")
  kill -CONT "$MAIN_REDIS_PID"
  wait "$STALLREQ"
  hl_wait_until 3000 bash -c "[ \"\$(redis-cli -p $REDIS_PORT LLEN 'redisson_lock_queue:{$name}')\" = 0 ]"
  if [ "$fair" = 1 ]; then
    left="queue $(rcli LLEN "redisson_lock_queue:{$name}")/$(rcli ZCARD "redisson_lock_timeout:{$name}") holders $(rcli HLEN "$name")"
    want="queue 0/0 holders 1"
  else
    hl_wait_until 3000 bash -c "[ \"\$(redis-cli -p $REDIS_PORT EXISTS '$name')\" = 0 ]"
    left="holders $(rcli HLEN "$name")"
    want="holders 0"
  fi
  label="(u) server stalled during an acquire (fair=$fair): '$res'; after it resumed: $left"
  if [[ "$res" == connection* ]] && [ "$left" = "$want" ]; then ok "$label"; else bad "$label"; fi
  rcli DEL "$name" >/dev/null
done

# (s) a partial unlock re-applies the lease the hold was taken with (5 s),
#     not the watchdog lease (30 s).
res=$(curl -sS --max-time 10 "$URL/partial?name=or:partial:$RANDOM")
ttl=${res#ttl=}; ttl=${ttl%% *}
label="(s) partial unlock of a 5 s hold: '$res'"
if [[ "$res" == *" holds=1" ]] && [ "$ttl" -gt 3000 ] && [ "$ttl" -le 5000 ]; then
  ok "$label"; else bad "$label"; fi

# (q) cluster and sentinel URL forms; malformed ones raise.
res=$(curl -sS --max-time 10 "$URL/urls")
want="cluster:2:nil:0:true cluster:2:nil:0:true sentinel:2:mymaster:0:true sentinel:1:mymaster:3:true error error error error error"
label="(q) cluster/sentinel URLs: '$res'"
if [ "$res" = "$want" ]; then ok "$label"; else bad "$label (want '$want')"; fi

# (r) hostile replies from a fake server: a CLUSTER SLOTS range from -9e18
#     (looped for ever before), port 65536 and MOVED 65535; a sentinel naming
#     port "<port>x". Each is an error, not a hang or a raise.
for mode in cluster sentinel; do
  python3 "$here/fake_server.py" "$mode" >"$HL_TMP/fake-$mode.port" &
  HL_PIDS+=($!)
  for _ in $(seq 1 100); do [ -s "$HL_TMP/fake-$mode.port" ] && break; sleep 0.05; done
  fport=$(cat "$HL_TMP/fake-$mode.port")
  if [ "$mode" = cluster ]; then furl="redis+cluster://127.0.0.1:$fport"
  else furl="redis+sentinel://127.0.0.1:$fport/mymaster"; fi
  t0=$(ms_now)
  res=$(curl -sS --max-time 15 -G --data-urlencode "url=$furl" "$URL/hostile" 2>&1)
  dt=$(( $(ms_now) - t0 ))
  label="(r) hostile $mode replies: '$res' in ${dt} ms"
  if [[ "$res" == "error: "* ]] && [ "$dt" -lt 10000 ]; then ok "$label"; else bad "$label"; fi
  # the sentinel's failure is worded by what it answered (hl_msg_master_addr):
  # a malformed address is not "knows no master named" (said before)
  if [ "$mode" = sentinel ]; then
    label="(r) the sentinel's bad address is named: '$res'"
    if [[ "$res" == *"sentinel 127.0.0.1:$fport named no valid address for 'mymaster'"* ]]; then
      ok "$label"; else bad "$label"; fi
  fi
done
# (r2) a "sentinel" that answers get-master-addr-by-name with an error (a plain
#      redis-server): the error says so and names it (it said "knows no master
#      named 'mymaster'" before).
res=$(curl -sS --max-time 15 -G \
      --data-urlencode "url=redis+sentinel://127.0.0.1:$MAIN_REDIS_PORT/mymaster" "$URL/hostile" 2>&1)
label="(r2) a sentinel's error reply is told: '$res'"
if [[ "$res" == *"sentinel 127.0.0.1:$MAIN_REDIS_PORT: error reply: ERR unknown"* ]]; then
  ok "$label"; else bad "$label"; fi

# (t) TLS through cosockets, a percent-encoded password, unix:// (the engine's
#     URL parser through hilock.proto.parse_url).
if [ "$TLS_UP" = 1 ]; then
  res=$(curl -sS --max-time 20 "$URL/tls")
  # the wrong name must be refused; nginx's sslhandshake reports it as
  # "certificate host mismatch" or, now and then, lets the handshake return
  # and the next send finds the connection closed: both refuse, neither holds
  want="tls=held:true:true name=(tls|connection) password=auth unix=held:true:true cafile=raise"
  label="(t) TLS, percent-encoded password, unix socket: '$res'"
  if [[ "$res" =~ ^${want}$ ]]; then ok "$label"; else
    bad "$label (want '$want')"; grep -a ' -> ' "$NGINX_TMP/error.log" | tail -5; fi
else
  bad "(t) could not start the TLS redis-server"
fi

# (v) Mutual TLS: a client certificate and key (tls_cert_file/tls_key_file,
#     as options or URL query) against a server with tls-auth-clients yes;
#     without one the server refuses; an unreadable or non-PEM file raises.
if [ "$MTLS_UP" = 1 ]; then
  res=$(curl -sS --max-time 20 "$URL/mtls")
  want="opts=held:true:true url=held:true:true nocert=(tls|connection) othercert=(tls|connection) nofile=raise notpem=raise keyonly=raise"
  label="(v) mutual TLS: '$res'"
  if [[ "$res" =~ ^${want}$ ]]; then ok "$label"; else
    bad "$label (want '$want')"; grep -a ' -> ' "$NGINX_TMP/error.log" | tail -5; fi
else
  bad "(v) could not start the mutual-TLS redis-server"
fi

# ---- Redis Cluster: 3 masters, the driver routes by slot.
ccli() { redis-cli -p "${CLUSTER_PORTS[0]}" -c "$@"; }
if [ "$CLUSTER_UP" = 1 ]; then
  # (j) 120 concurrent requests on 12 lock names (reentrant and fair) spread
  #     over the masters, each a non-atomic GET+SET of its name's counter.
  n=120; names=12; cfg="$HL_TMP/curl-cluster.cfg"; : >"$cfg"
  for p in "${CLUSTER_PORTS[@]}"; do redis-cli -p "$p" FLUSHALL >/dev/null; redis-cli -p "$p" SCRIPT FLUSH >/dev/null; done
  for i in $(seq 1 "$n"); do
    printf 'url = "%s/ccount?k=%d&fair=%d"\noutput = "/dev/null"\n' "$URL" $((i % names)) $(( (i % names) % 2 )) >>"$cfg"
  done
  t0=$(ms_now)
  codes=$(curl -sS -Z --parallel-max "$n" --max-time 60 -w '%{http_code}\n' -K "$cfg" 2>"$HL_TMP/curl-cluster.err")
  dt=$(( $(ms_now) - t0 ))
  good=$(grep -c '^200$' <<<"$codes")
  total=0; exact=0
  for k in $(seq 0 $((names - 1))); do
    v=$(ccli GET "or:cc:{or:cl:$k}"); total=$((total + ${v:-0}))
    [ "${v:-0}" = $(( n / names )) ] && exact=$((exact + 1))
  done
  masters_used=0
  for p in "${CLUSTER_PORTS[@]}"; do
    [ "$(redis-cli -p "$p" DBSIZE)" -gt 0 ] && masters_used=$((masters_used + 1))
  done
  label="(j) cluster: $n concurrent locked increments on $names names: total $total, $exact/$names counters exact, $good x HTTP 200, names on $masters_used/3 masters, ${dt} ms"
  if [ "$good" = "$n" ] && [ "$total" = "$n" ] && [ "$exact" = "$names" ] && [ "$masters_used" = 3 ]; then
    ok "$label"; else bad "$label"; head -5 "$HL_TMP/curl-cluster.err"; fi

  # (k) a request blocked by a lock a C-core cluster client holds (30 s
  #     lease, released after ~300 ms) wakes on its SPUBLISH, via SSUBSCRIBE.
  for fair in 0 1; do
    name="or:cwake:$fair:$RANDOM"; kind=""; [ "$fair" = 1 ] && kind=fair
    if hold_elsewhere "$HL_TMP/hold-k$fair.out" "$name" 30 300 "${kind:-x}" "$CLUSTER_URL"; then
      read -r res waited _ wat < <(curl -sS --max-time 40 "$URL/wait?name=$name&wait=20&fair=$fair&url=cluster")
      wait "$HOLDER_PID" 2>/dev/null
      released_at "$HL_TMP/hold-k$fair.out"; after=$(( ${wat:-0} - ${t_done:-0} ))
      label="(k) cluster (fair=$fair): request blocked by a C-core holder (lease 30 s, released after 300 ms): $res ${after} ms after the unlock returned (waited ${waited} ms)"
      if [ "$res" = acquired ] && [ "${wat:-0}" -ge "${t_call:-1}" ] && [ "$after" -lt 3000 ]; then
        ok "$label"; else bad "$label"; fi
    else
      bad "(k) could not take the lock through the cluster: $(cat "$HL_TMP/hold-k$fair.out")"
    fi
  done

  # (l) the watchdog renews locks on every master (one pipeline per node).
  res=$(curl -sS --max-time 10 "$URL/cwatchdog?tag=$RANDOM")
  label="(l) cluster watchdog, six locks over the masters, lease 0.6 s kept 1.5 s: '$res'"
  if [ "$res" = "kept lost=0" ]; then ok "$label"; else bad "$label"; fi

  # (o) the slot of a lock held by a request (watchdog) and waited on by
  #     another moves to another master (MIGRATING/IMPORTING, MIGRATE,
  #     SETSLOT NODE): newcomers are still excluded at each step (plain,
  #     ASK, MOVED), the holder's watchdog renews it on the new master, the
  #     waiter's shard subscription follows the slot (the old master ends it)
  #     and the waiter wakes on the unlock.
  slot_owner() { # slot -> port of the master serving it
    redis-cli -p "${CLUSTER_PORTS[0]}" CLUSTER NODES | awk -v s="$1" '
      $3 ~ /master/ { for (i = 9; i <= NF; i++) { n = split($i, r, "-"); if (n == 1) r[2] = r[1]
        if ($i !~ /^\[/ && s + 0 >= r[1] + 0 && s + 0 <= r[2] + 0) { split($2, a, "[:@]"); print a[2] } } }'
  }
  shard_subs() { # port channel -> subscribers
    local out; out=$(redis-cli -p "$1" PUBSUB SHARDNUMSUB "$2"); echo "${out##*$'\n'}"
  }
  has_sub() { [ "$(shard_subs "$1" "$2")" = 1 ]; }
  pttl_rose() { # port key: PTTL went up since the previous call (a renewal)
    local cur; cur=$(redis-cli -p "$1" PTTL "$2")
    if [ "$cur" -gt "$LAST_PTTL" ]; then return 0; fi
    LAST_PTTL=$cur; return 1
  }
  name="or:mig:$RANDOM"; ch="redisson_lock__channel:{$name}"
  slot=$(redis-cli -p "${CLUSTER_PORTS[0]}" CLUSTER KEYSLOT "$name")
  from=$(slot_owner "$slot"); to=""
  for p in "${CLUSTER_PORTS[@]}"; do [ "$p" != "$from" ] && [ -z "$to" ] && to=$p; done
  curl -sS --max-time 40 "$URL/mhold?name=$name" >"$HL_TMP/mhold.out" &
  HOLDREQ=$!
  hl_wait_until 5000 bash -c "[ \"\$(redis-cli -p $from EXISTS '$name')\" = 1 ]"
  curl -sS --max-time 40 "$URL/wait?name=$name&wait=30&url=cluster" >"$HL_TMP/mwait.out" &
  WAITER=$!
  steps=""
  if hl_wait_until 5000 has_sub "$from" "$ch"; then
    id_from=$(redis-cli -p "$from" CLUSTER MYID); id_to=$(redis-cli -p "$to" CLUSTER MYID)
    redis-cli -p "$to" CLUSTER SETSLOT "$slot" IMPORTING "$id_from" >/dev/null
    redis-cli -p "$from" CLUSTER SETSLOT "$slot" MIGRATING "$id_to" >/dev/null
    steps="migrating:$(curl -sS --max-time 10 "$URL/try?name=$name&url=cluster" | cut -d' ' -f1)"
    mig=$(redis-cli -p "$from" MIGRATE 127.0.0.1 "$to" "$name" 0 5000)
    steps="$steps migrate=$mig ask:$(curl -sS --max-time 10 "$URL/try?name=$name&url=cluster" | cut -d' ' -f1)"
    for p in "${CLUSTER_PORTS[@]}"; do redis-cli -p "$p" CLUSTER SETSLOT "$slot" NODE "$id_to" >/dev/null; done
    steps="$steps moved:$(curl -sS --max-time 10 "$URL/try?name=$name&url=cluster" | cut -d' ' -f1)"
    LAST_PTTL=$(redis-cli -p "$to" PTTL "$name")
    hl_wait_until 4000 pttl_rose "$to" "$name" && steps="$steps renewed-on-new" || steps="$steps NOT-renewed"
    hl_wait_until 5000 has_sub "$to" "$ch" && steps="$steps resubscribed" || steps="$steps NOT-resubscribed"
    steps="$steps old-subs=$(shard_subs "$from" "$ch")"
  fi
  t_stop=$(ms_now)
  redis-cli -p "${CLUSTER_PORTS[0]}" -c SET "or:stop:{$name}" 1 >/dev/null
  wait "$WAITER"; woke=$(( $(ms_now) - t_stop ))
  wait "$HOLDREQ"
  read -r res waited _ <"$HL_TMP/mwait.out"
  held=$(cat "$HL_TMP/mhold.out")
  label="(o) slot $slot moved $from -> $to while held+waited: $steps; holder '$held'; waiter $res ${woke} ms after the release signal"
  if [ "$steps" = "migrating:timeout migrate=OK ask:timeout moved:timeout renewed-on-new resubscribed old-subs=0" ] &&
     [ "$held" = "released=true lost=false" ] && [ "$res" = acquired ] && [ "$woke" -lt 2000 ]; then
    ok "$label"; else bad "$label"; fi
else
  bad "(j)-(o) cluster tests skipped: the cluster did not start"
fi

# ---- Sentinel: 1 master + 1 replica + 3 sentinels.
if [ "$SENTINEL_UP" = 1 ]; then
  # (m) lock and unlock through the sentinel URL; the grant is acknowledged
  #     by the replica (WAIT, on by default with sentinels).
  redis-cli -p "$SENT_MASTER_PORT" CONFIG RESETSTAT >/dev/null
  res=$(curl -sS --max-time 10 "$URL/sentinel?name=or:sent:$RANDOM")
  waits=$(redis-cli -p "$SENT_MASTER_PORT" INFO commandstats | tr -d '\r' |
    awk -F'[=,:]' '/^cmdstat_wait:/ { print $3 }')
  label="(m) sentinel URL: '$res' (master $SENT_MASTER_PORT), WAIT calls on the master: ${waits:-0}"
  if [ "$res" = "acquired port=$SENT_MASTER_PORT held=true release=true" ] && [ "${waits:-0}" -ge 2 ]; then
    ok "$label"; else bad "$label"; fi

  # (p) the replica is stopped (SIGSTOP) for a moment: a grant it cannot
  #     acknowledge (WAIT 1 200) is given back and reported to the caller.
  kill -STOP "$SENT_REPLICA_PID"
  res=$(curl -sS --max-time 10 "$URL/noack?name=or:noack:$RANDOM")
  kill -CONT "$SENT_REPLICA_PID"
  label="(p) replica stopped: one try through the sentinel URL: '$res'"
  if [ "$res" = "nil not acknowledged again=true locked=false" ]; then ok "$label"; else bad "$label"; fi
  hl_wait_until 10000 bash -c "redis-cli -p $SENT_MASTER_PORT INFO replication | grep -q 'slave0:.*state=online'"

  # (p2) a watchdog hold (3 s lease, replica_ack 0.5 s), then the replica
  #     stopped: the master answers every renewal but no replica takes
  #     them, so none is a confirmation; the holder is told "in doubt"
  #     before its lease ends (before: never told).
  name="or:ackwd:$RANDOM"
  curl -sS --max-time 40 "$URL/ackwatch?name=$name" >"$HL_TMP/ackwatch.out" &
  ACKREQ=$!
  hl_wait_until 10000 bash -c "[ \"\$(redis-cli -p $SENT_MASTER_PORT EXISTS '$name')\" = 1 ]"
  sleep 0.5 # an acknowledged renewal or so
  kill -STOP "$SENT_REPLICA_PID"
  redis-cli -p "$SENT_MASTER_PORT" SET "or:paused:{$name}" 1 PX 30000 >/dev/null
  wait "$ACKREQ"
  kill -CONT "$SENT_REPLICA_PID"
  res=$(cat "$HL_TMP/ackwatch.out")
  told=$(sed -n 's/.*told_ms=\([0-9-]*\).*/\1/p' <<<"$res")
  label="(p2) replica stopped under a watchdog hold: holder told in doubt: '$res'"
  if [[ "$res" == "lost=true told_ms="* ]] && [ "${told:-9999}" -lt 3000 ]; then ok "$label"; else bad "$label"; fi
  hl_wait_until 10000 bash -c "redis-cli -p $SENT_MASTER_PORT INFO replication | grep -q 'slave0:.*state=online'"

  # (n) SENTINEL FAILOVER while a request holds a lock (watchdog, 3 s
  #     lease) and another waits for it: once the sentinels name the
  #     replica, new requests lock on it (the worker's cached master and
  #     pooled connections to the old one answer READONLY or are re-checked);
  #     the holder's renewals follow (never lost), the waiter's listener moves
  #     to the new master and the waiter wakes on the unlock there. The
  #     client has seen this master name with a replica, so the new master
  #     acknowledges nothing until the demoted one replicates from it (seconds
  #     after a forced failover: 17 s here once): the new requests are made
  #     once it does, and the holder's lease (30 s) outlasts that.
  sent_master_is() {
    local p; for p in "${SENTINEL_PORTS[@]}"; do
      local addr; addr=$(redis-cli -p "$p" SENTINEL get-master-addr-by-name hm)
      [ "${addr##*$'\n'}" = "$1" ] || return 1
    done
    local role; role=$(redis-cli -p "$1" ROLE)
    [ "${role%%$'\n'*}" = master ]
  }
  subscribed_on() { # port channel
    local out; out=$(redis-cli -p "$1" PUBSUB NUMSUB "$2"); [ "${out##*$'\n'}" = 1 ]
  }
  name="or:sfo:$RANDOM"; ch="redisson_lock__channel:{$name}"
  curl -sS --max-time 60 "$URL/mhold?name=$name&url=sentinel&lease=30" >"$HL_TMP/shold.out" &
  HOLDREQ=$!
  hl_wait_until 5000 bash -c "[ \"\$(redis-cli -p $SENT_MASTER_PORT EXISTS '$name')\" = 1 ]"
  curl -sS --max-time 60 "$URL/wait?name=$name&wait=50&url=sentinel" >"$HL_TMP/swait.out" &
  WAITER=$!
  hl_wait_until 5000 subscribed_on "$SENT_MASTER_PORT" "$ch" && before=subscribed || before=NOT-subscribed
  # The replica was stopped in (p)/(p2): until every sentinel has read its
  # INFO again (flags "slave" alone, link to the master "ok") SENTINEL
  # FAILOVER answers NOGOODSLAVE, so wait for that, then ask until the
  # sentinel takes the failover (NOGOODSLAVE/INPROG for a moment after).
  sentinels_see_replica() {
    local p; for p in "${SENTINEL_PORTS[@]}"; do
      redis-cli -p "$p" SENTINEL replicas hm | tr -d '\r' |
        awk 'NR % 2 == 1 { k = $0; next } k == "flags" { f = $0 } k == "master-link-status" { l = $0 }
             END { exit !(f == "slave" && l == "ok") }' || return 1
    done
  }
  failover_taken() { fo=$(redis-cli -p "${SENTINEL_PORTS[0]}" SENTINEL FAILOVER hm); [ "$fo" = OK ]; }
  hl_wait_until 20000 sentinels_see_replica || true
  fo=
  hl_wait_until 20000 failover_taken || true
  t0=$(ms_now)
  if hl_wait_until 20000 sent_master_is "$SENT_REPLICA_PORT"; then
    dt=$(( $(ms_now) - t0 ))
    hl_wait_until 25000 bash -c "redis-cli -p $SENT_REPLICA_PORT INFO replication | grep -q 'slave0:.*state=online'"
    dr=$(( $(ms_now) - t0 ))
    res1=$(curl -sS --max-time 10 "$URL/sentinel?name=or:sent:$RANDOM")
    res2=$(curl -sS --max-time 10 "$URL/sentinel?name=or:sent:$RANDOM")
    hl_wait_until 5000 subscribed_on "$SENT_REPLICA_PORT" "$ch" && after=resubscribed || after=NOT-resubscribed
    t_stop=$(ms_now)
    redis-cli -p "$SENT_REPLICA_PORT" SET "or:stop:{$name}" 1 >/dev/null
    wait "$WAITER"; woke=$(( $(ms_now) - t_stop ))
    wait "$HOLDREQ"
    read -r res waited _ <"$HL_TMP/swait.out"
    held=$(cat "$HL_TMP/shold.out")
    label="(n) SENTINEL FAILOVER ($fo, switched in ${dt} ms, a replica of the new master in ${dr} ms): new requests '$res1' / '$res2' (new master $SENT_REPLICA_PORT); holder '$held'; waiter $before/$after, $res ${woke} ms after the release signal"
    want="acquired port=$SENT_REPLICA_PORT held=true release=true"
    if [ "$res1" = "$want" ] && [ "$res2" = "$want" ] && [ "$held" = "released=true lost=false" ] &&
       [ "$before/$after" = subscribed/resubscribed ] && [ "$res" = acquired ] && [ "$woke" -lt 2000 ]; then
      ok "$label"; else bad "$label"; fi
  else
    bad "(n) the sentinels did not switch to $SENT_REPLICA_PORT after SENTINEL FAILOVER ($fo)"
    redis-cli -p "$SENT_MASTER_PORT" SET "or:stop:{$name}" 1 >/dev/null
    wait "$WAITER" "$HOLDREQ"
  fi
else
  bad "(m)-(n) sentinel tests skipped: the sentinels did not start"
fi

# (f) nothing alarming in nginx's error log but the two handshakes (v) wants
#     refused (no client certificate; one from another CA), which nginx logs.
alarming() {
  grep -E '\[(error|alert|crit|emerg)\]' "$NGINX_TMP/error.log" |
    grep -vE 'SSL_do_handshake\(\) failed \(SSL: .*(alert handshake failure|alert unknown ca).* request: "GET /mtls '
}
if alarming >/dev/null; then
  bad "(f) nginx error log:"; alarming | head -20
else
  ok "(f) nginx error log clean"
fi

echo "openresty suite: $passes passed, $fails failed ($(( $(date +%s) - start ))s)"
[ "$fails" -eq 0 ]
