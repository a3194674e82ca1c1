#!/usr/bin/env bash
# docs suite: every fenced code block of README.md and docs/*.md runs against
# a throwaway redis-server (tests/docs/snippets.py; docs/testing.md says how
# each fence runs and how a block is marked skip / setup / with FRAME).
# Python blocks run on CPython 3.9 and 3.13 (pyenv, or python3.X on the
# PATH; HILOCK_DOCS_PYTHONS to change) with the abi3 package that
# tests/python/run.sh installs into build/venv, put on PYTHONPATH.
# Env: HILOCK_ROOT, HILOCK_BUILD (cmake build dir: libhilock, cli/hilock and
# the Lua modules), DOCS_ONLY (run only files whose path contains it).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../lua/lib.sh"
. "$here/../wheel/lib.sh"
root="$HL_ROOT"
trap hl_cleanup EXIT
trap 'exit 130' INT TERM
start=$(date +%s)

hl_build || { echo "docs: build failed"; echo "docs: 0 passed, 1 failed"; exit 1; }
if [ ! -x "$HL_BUILD/cli/hilock" ] || [ ! -f "$HL_BUILD/libcore/libhilock.so" ]; then
  cmake --build "$HL_BUILD" -j2 --target hilock_cli hilock >"$HL_BUILD.docs.log" 2>&1 ||
    { tail -30 "$HL_BUILD.docs.log"; echo "docs: build of the CLI failed"; exit 1; }
fi

# the Python package, as tests/python/run.sh installs it (incremental: a
# few seconds when its build directory is there), then its directory on
# PYTHONPATH for the other interpreters (one abi3 extension serves all)
bash "$root/tests/python/deps.sh" >/dev/null || { echo "docs: python deps failed"; exit 1; }
venv="$root/build/venv"
log="$root/build/docs-python-install.log"
if ! bash "$root/tests/python/install.sh" >"$log" 2>&1; then
  tail -30 "$log"; echo "docs: pip install failed (log: $log)"; exit 1
fi
hl_tmpdir; pkg="$HL_TMP/site"
mkdir -p "$pkg" && cp -r "$("$venv/bin/python" -c 'import hilock, os; print(os.path.dirname(hilock.__file__))')" "$pkg/" &&
  rm -rf "$pkg/hilock/__pycache__" || { echo "docs: cannot copy the package"; exit 1; }
export PYTHONPATH="$pkg"
pys=()
for v in ${HILOCK_DOCS_PYTHONS:-3.9 3.13}; do
  py="$(hl_python "$v")" || { echo "docs: no Python $v (pyenv or python$v)"; exit 1; }
  pys+=(--python "$v=$py")
done

hl_start_redis || { echo "docs: redis failed"; exit 1; }
python3 "$here/snippets.py" --root "$root" --build "$HL_BUILD" --port "$REDIS_PORT" \
  "${pys[@]}" --only "${DOCS_ONLY:-}"
rc=$?
echo "docs: $(( $(date +%s) - start )) s"
exit $rc
