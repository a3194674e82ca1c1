#!/usr/bin/env bash
# Smoke run of the peer benchmark (bench/peers/run.sh --smoke): every
# contender (hilock, Redisson, redis-py, python-redis-lock, pottery,
# node-redlock, redsync, aioredlock) runs one short slice of every figure
# against its own throwaway redis-servers, so the benchmark cannot rot.
# Fails when a contender fails, a hand-off breaks exclusion or the watchdog
# loses a lock. No plots, no report; about a minute.
set -uo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
# reuse the test command's build tree (scripts/test.sh sets HILOCK_BUILD)
[ -n "${HILOCK_BUILD:-}" ] && [ -f "$HILOCK_BUILD/CMakeCache.txt" ] && export HILOCK_PEERS_CBUILD="$HILOCK_BUILD"
if timeout 300 bash "$root/bench/peers/run.sh" --smoke; then
  echo "1 passed, 0 failed"
else
  echo "0 passed, 1 failed"; exit 1
fi
