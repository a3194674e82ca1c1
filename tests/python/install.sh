#!/usr/bin/env bash
# Install the hilock package (non-editable) into $HILOCK_VENV (default
# $HILOCK_ROOT/build/venv), unless the sources are unchanged since the
# install recorded in STAMP_FILE (default: .hilock-install.sha1 in the venv,
# which every suite shares: python, docs, faults, interop, conformance,
# messages and safety each ran its own pip install before, about 8 s each
# after the first).
# Needs the venv of tests/python/deps.sh. Exit 0 = `import hilock` works.
# Usage: tests/python/install.sh [STAMP_FILE]
set -uo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
venv="${HILOCK_VENV:-$root/build/venv}"
stamp="${1:-$venv/.hilock-install.sha1}"
sum="$(cd "$root" && find libcore bindings python pyproject.toml CMakeLists.txt cmake \
         -type f ! -name '*.pyc' -print0 2>/dev/null | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-40)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ] || ! "$venv/bin/python" -c "import hilock" 2>/dev/null; then
  rm -f "$stamp"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
    --config-settings="build-dir=$root/build/py/{wheel_tag}" --force-reinstall --no-deps "$root" || exit 1
  echo "$sum" >"$stamp"
fi
cd / && "$venv/bin/python" -c "import hilock"
