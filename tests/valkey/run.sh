#!/usr/bin/env bash
# The conformance suite (every driver: C, Python, Lua, OpenResty) and the
# Python cluster/sentinel topology tests again, against Valkey 8.0
# (valkey-server from bookworm-backports, scripts/deps.sh --test): the harnesses
# start $HILOCK_REDIS_SERVER instead of redis-server. The C suites run
# against Valkey in ctest (valkey_*).
set -uo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
bin="$(command -v valkey-server || true)"
if [ -z "$bin" ]; then
  echo "valkey: no valkey-server (scripts/deps.sh --test installs it from bookworm-backports)"
  echo "0 passed, 1 failed"; exit 1
fi
export HILOCK_REDIS_SERVER="$bin"
echo "valkey: $("$bin" --version)"
fails=0
HILOCK_ROOT="$root" bash "$root/tests/conformance/run.sh" || fails=$((fails+1))
HILOCK_ROOT="$root" bash "$root/tests/python/run.sh" -k "cluster or sentinel" || fails=$((fails+1))
echo "valkey: $((2 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
