#!/usr/bin/env bash
# Fault suite: the Python package (installed into $HILOCK_ROOT/build/venv as
# the python suite does) against real redis-server processes behind a TCP
# fault proxy of our own (faultproxy.py). Servers are started and stopped by
# the shared harness (tests/python/conftest.py); test_cli_* use the hilock
# command of $HILOCK_BUILD. Arguments go to one pytest run (e.g. -k); with
# none, two runs split the files (below). HILOCK_TORTURE_SECONDS (default 30) sets the
# length of the torture test.
set -uo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
venv="$root/build/venv"
bash "$root/tests/python/deps.sh" || { echo "python deps failed"; echo "0 passed, 1 failed"; exit 1; }

# the package as tests/python installs it (skipped when the sources did not change)
if ! bash "$root/tests/python/install.sh" "$root/build/faults-install.stamp" >"$root/build/faults-install.log" 2>&1; then
  tail -40 "$root/build/faults-install.log"; echo "pip install failed"; echo "0 passed, 1 failed"; exit 1
fi

work="$(mktemp -d /tmp/hilock-faults.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp "$root"/tests/python/conftest.py "$root"/tests/faults/*.py "$work/"
cd "$work"
export HILOCK_PYTHON="$venv/bin/python" HILOCK_ROOT="$root"
run() { timeout 700 "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra -s "$@"; }
if [ $# -gt 0 ]; then
  run "$@" .
  exit $?
fi
# Two pytest processes at once, each with its own servers on its own ports:
# the tests mostly wait on leases and timers (about 75 s each half, 150 s
# in one process). The silent-link tests in one, everything else in the other.
first=(test_silence.py)
rest=()
for f in test_*.py; do
  [[ " ${first[*]} " == *" $f "* ]] || rest+=("$f")
done
run "${first[@]}" >"$work/first.log" 2>&1 &
pid=$!
run "${rest[@]}" >"$work/rest.log" 2>&1
rc2=$?
wait "$pid"
rc1=$?
echo "--- ${first[*]}"; cat "$work/first.log"
echo "--- ${rest[*]}"; cat "$work/rest.log"
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]
