#!/usr/bin/env bash
# Python matrix (not in the default run: scripts/test.sh python-matrix): the
# repaired abi3 wheel installed into a fresh venv of every supported CPython
# (HILOCK_PY_VERSIONS, default 3.9 to 3.13, from pyenv) runs tests/python.
set -uo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
. "$root/tests/wheel/lib.sh"
bash "$root/tests/python/deps.sh" >/dev/null || { echo "python deps failed"; echo "0 passed, 1 failed"; exit 1; }
export PATH="$root/build/venv/bin:$PATH"
tmp="$(mktemp -d /tmp/hilock-pymatrix.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
if ! hl_build_dists "$tmp/dist" >"$tmp/build.log" 2>&1 ||
   ! auditwheel repair -w "$tmp/repaired" "$tmp"/dist/hilock-*.whl >>"$tmp/build.log" 2>&1; then
  tail -40 "$tmp/build.log"; echo "python-matrix: build failed"; echo "0 passed, 1 failed"; exit 1
fi
whl="$(ls "$tmp"/repaired/hilock-*.whl)"
echo "  wheel: $(basename "$whl")"
passed=0; failed=0; ok=(); bad=()
for v in ${HILOCK_PY_VERSIONS:-3.9 3.10 3.11 3.12 3.13}; do
  echo "== Python $v"
  if hl_pytest_on "$v" "$whl" "$tmp"; then passed=$((passed+1)); ok+=("$v")
  else failed=$((failed+1)); bad+=("$v"); fi
done
echo "python-matrix: passed on ${ok[*]:-none}; failed on ${bad[*]:-none}"
echo "python-matrix: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
