# Shared pieces of the bench scripts (bench/run.sh, bench/cancel/run.sh,
# bench/tls/run.sh). Sourced, not run:
#
#   . "$ROOT/bench/lib.sh"
#   bench_build TARGET...          configure $BUILD (Release, no tests), build TARGETs
#   bench_workdir NAME             WORK=$(mktemp -d /tmp/hilock-NAME-XXXXXX), removed on
#                                  exit together with the server started below
#   bench_start_redis [CERTDIR]    redis-server on a free loopback port: PORT, URL, RPID;
#                                  with CERTDIR (tests/c/make_certs.sh output) also a TLS
#                                  port: TPORT, TURL (trusting CERTDIR/ca.crt)
#   val KEY FILE                   the value of KEY= in a bench's key=value output
#   median "A B C..."              median of numbers (mean of the middle two when even)
#   redis_version                  the redis-server version string
#
# Needs ROOT (the repository) set by the caller; BUILD defaults to
# $HILOCK_BENCH_BUILD or $ROOT/build/bench.

BUILD=${HILOCK_BENCH_BUILD:-$ROOT/build/bench}
WORK=
RPID=

bench_build() {
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DHILOCK_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j2 --target "$@" >/dev/null
}

bench_cleanup() {
  if [ -n "$RPID" ]; then kill "$RPID" 2>/dev/null || true; wait "$RPID" 2>/dev/null || true; fi
  [ -z "$WORK" ] || rm -rf "$WORK"
}

bench_workdir() {
  WORK=$(mktemp -d "/tmp/hilock-$1-XXXXXX")
  trap bench_cleanup EXIT INT TERM
}

bench_port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

bench_start_redis() {
  local certs=${1:-} tls=() attempt
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    PORT=$((20000 + RANDOM % 40000))
    bench_port_free "$PORT" || continue
    if [ -n "$certs" ]; then
      TPORT=$((20000 + RANDOM % 40000))
      bench_port_free "$TPORT" && [ "$PORT" != "$TPORT" ] || continue
      tls=(--tls-port "$TPORT" --tls-cert-file "$certs/server.crt" --tls-key-file "$certs/server.key"
           --tls-ca-cert-file "$certs/ca.crt" --tls-auth-clients no)
    fi
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no "${tls[@]}" \
      --dir "$WORK" --logfile "$WORK/redis.log" &
    RPID=$!
    for _ in $(seq 100); do
      redis-cli -p "$PORT" PING 2>/dev/null | grep -q PONG && break
      sleep 0.05
    done
    if redis-cli -p "$PORT" PING 2>/dev/null | grep -q PONG; then break; fi
    kill "$RPID" 2>/dev/null || true; wait "$RPID" 2>/dev/null || true; RPID=
  done
  [ -n "$RPID" ] || { echo "cannot start redis-server" >&2; exit 1; }
  URL=redis://127.0.0.1:$PORT
  [ -z "$certs" ] || TURL="rediss://127.0.0.1:$TPORT?tls_ca_file=$certs/ca.crt"
}

val() { sed -n "s/^$1=//p" "$2"; }
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR%2) printf "%.6g\n", a[(NR+1)/2]; else printf "%.6g\n", (a[NR/2]+a[NR/2+1])/2}'; }
redis_version() { redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'; }
