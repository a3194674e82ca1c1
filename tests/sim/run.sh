#!/usr/bin/env bash
# Suite sim: the deterministic simulation of hilock_async sessions
# (tests/sim/sim.c; docs/testing.md, "The simulator"). Arguments go to the
# program:
#   tests/sim/run.sh                       # the default run: 1,000 seeds from a new start,
#                                          # after the seeds of tests/sim/regress.txt
#   tests/sim/run.sh --seed N -v           # replay seed N, printing its schedule and log
#   tests/sim/run.sh --seeds 100000        # the long run
#   tests/sim/run.sh --all --seeds 300     # also the fault and lock kinds with known findings
# Env: HILOCK_ROOT (repo root), HILOCK_BUILD (build dir, default build/release).
set -uo pipefail
ROOT="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
BUILD="${HILOCK_BUILD:-$ROOT/build/release}"
SIM="$BUILD/tests/sim/hilock_sim"
if ! cmake --build "$BUILD" --target hilock_sim -j2 >"$BUILD/sim-build.log" 2>&1; then
  cat "$BUILD/sim-build.log"; echo "cannot build $SIM"; echo "0 passed, 1 failed"; exit 1
fi
export HILOCK_SIM_SELF="tests/sim/run.sh"
if [ $# -eq 0 ]; then # the default run also replays the seeds found before
  ALSO=$(sed -e 's/#.*//' "$ROOT/tests/sim/regress.txt" | tr -s ' \n' '\n' | grep -E '^[0-9]+$' | paste -sd, -)
  [ -n "$ALSO" ] && exec "$SIM" --also "$ALSO"
fi
exec "$SIM" "$@"
