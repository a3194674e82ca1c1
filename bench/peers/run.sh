#!/usr/bin/env bash
# hilock side by side with the lock libraries users would pick instead
# (issue 18): Redisson, redis-py Lock (+ asyncio), python-redis-lock, pottery,
# node-redlock, redsync, aioredlock.
#
#   bench/peers/run.sh [-r rounds]     full run (default 3 rounds, ~10 min):
#                                      bench/peers/results/report.md + PNGs
#   bench/peers/run.sh --only f5       just those figures (comma-separated
#                                      f1..f7), rows printed as JSON, no report
#   bench/peers/run.sh --smoke         one short round, no plots, no report;
#                                      fails when a contender or a check fails
#                                      (tests/peers-smoke runs this)
#
# Installs the peers (deps.sh), builds hilock's contender and hand-off floor
# bench (Release, build/peers/cbuild), installs hilock's Python package into
# the peers' venv (full run only), then runs peers.py, which starts and stops
# its own redis-servers on free loopback ports.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${HILOCK_PEERS_BUILD:-$root/build/peers}"
smoke=0 rounds=3 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    -r) rounds="$2"; shift ;;
    --only) only="$2"; shift ;;
    *) echo "usage: $0 [--smoke] [-r rounds] [--only f1,...]" >&2; exit 2 ;;
  esac
  shift
done

bash "$here/deps.sh" $([ $smoke = 1 ] && echo --smoke)

# HILOCK_PEERS_CBUILD: an existing, configured build tree to use instead
# (the smoke suite passes the test command's build/release)
cb="${HILOCK_PEERS_CBUILD:-$out/cbuild}"
{ [ -n "${HILOCK_PEERS_CBUILD:-}" ] ||
    cmake -S "$root" -B "$cb" -DCMAKE_BUILD_TYPE=Release -DHILOCK_BUILD_TESTS=OFF; } >"$out/cbuild.log" 2>&1 &&
  cmake --build "$cb" -j2 --target peers_contender handoff_bench >>"$out/cbuild.log" 2>&1 ||
  { cat "$out/cbuild.log" >&2; exit 1; }

if [ $smoke = 0 ]; then
  # hilock's Python package, from this tree, into the peers' venv
  echo "peers: installing hilock's Python package from $root" >&2
  # (an isolated build: pip fetches whatever pyproject.toml's build-system needs)
  { "$out/venv/bin/python" -m pip uninstall -y -q hilock
    "$out/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "$root" &&
    (cd / && "$out/venv/bin/python" -c "import hilock"); } >"$out/pip-hilock.log" 2>&1 ||
    echo "peers: hilock's Python package did not install (see $out/pip-hilock.log); its rows are skipped" >&2
fi

args=(--root "$root" --build "$out" --hilock-c "$cb/bench/peers/peers_contender"
      --handoff-bench "$cb/bench/c/handoff_bench" --rounds "$rounds")
[ $smoke = 1 ] && args+=(--smoke)
[ -n "$only" ] && args+=(--only "$only")
cd "$here"
exec "$out/venv/bin/python" "$here/peers.py" "${args[@]}"
