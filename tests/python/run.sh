#!/usr/bin/env bash
# Python suite: install the package (non-editable) into $HILOCK_ROOT/build/venv
# and run pytest from outside the source tree, so the installed hilock is the
# one imported. Every redis-server is started and stopped by conftest.py.
set -uo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
venv="$root/build/venv"
bash "$root/tests/python/deps.sh" || { echo "python deps failed"; echo "0 passed, 1 failed"; exit 1; }

log="$root/build/python-install.log"
# install.sh: pip install into the venv with a build directory of our own
# (pyproject.toml names none: pip would build in a temporary one), skipped
# when the package's sources are those of the venv's last install
if ! bash "$root/tests/python/install.sh" >"$log" 2>&1; then
  tail -40 "$log"; echo "pip install failed (log: $log)"; echo "0 passed, 1 failed"; exit 1
fi

work="$(mktemp -d /tmp/hilock-pytest.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp "$root"/tests/python/*.py "$work/"
cd "$work"
# -p no:cacheprovider: nothing written next to the tests; the package must
# come from the venv, never from $root/python.
HILOCK_ROOT="$root" timeout 300 "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra "$@" .
