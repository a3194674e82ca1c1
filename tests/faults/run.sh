#!/usr/bin/env bash
# Fault suite: the Python package (installed into $HILOCK_ROOT/build/venv as
# the python suite does) against real redis-server processes behind a TCP
# fault proxy of our own (faultproxy.py). Servers are started and stopped by
# the shared harness (tests/python/conftest.py); test_cli_* use the hilock
# command of $HILOCK_BUILD. HILOCK_TORTURE_SECONDS (default 30) sets the
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
timeout 700 "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra -s "$@" .
