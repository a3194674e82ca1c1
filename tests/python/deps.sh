#!/usr/bin/env bash
# pip-level dependencies of the Python suite and bench: a venv at
# $HILOCK_ROOT/build/venv with pytest and redis (redis-py, for the bench's
# comparison). Idempotent; quick when already satisfied. System packages
# (python3-venv, python3-dev, swig, cmake, redis-server) come from scripts/deps.sh.
set -euo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
venv="$root/build/venv"
py="${HILOCK_PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$root/build"
  "$py" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import pytest, redis, setuptools, wheel" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "pytest>=7" "redis>=4.5" "setuptools>=61" wheel
fi
