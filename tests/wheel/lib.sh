# Helpers shared by tests/wheel and tests/python-matrix (sourced).

# hl_build_dists OUTDIR: sdist, then a wheel built from it (python -m build,
# no isolation: the build requirements are in build/venv, tests/python/deps.sh).
hl_build_dists() {
  rm -rf "$1" && "$root/build/venv/bin/python" -m build --no-isolation --outdir "$1" "$root"
}

# hl_python VERSION: the interpreter for a Python version (X.Y): pyenv's
# (PYENV_ROOT or ~/.pyenv), else pythonX.Y on the PATH.
hl_python() {
  local v="$1" p
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  command -v "python$v"
}

# hl_pytest_on VERSION WHEEL TMPDIR: a venv of that Python at
# build/pyvenv-VERSION (kept: pytest and redis stay installed), the wheel
# force-installed into it, then tests/python run from a copy outside the tree.
hl_pytest_on() { # VERSION WHEEL TMPDIR [TEST FILES...]: all of tests/python without them
  local v="$1" whl="$2" work="$3/pytest-$1" py venv="$root/build/pyvenv-$1"
  shift 3
  py="$(hl_python "$v")" || { echo "  no Python $v (pyenv or python$v)"; return 1; }
  # pytest and redis-py as pinned (with hashes) in tests/wheel/requirements-pytest.txt
  local req="$root/tests/wheel/requirements-pytest.txt" sum
  sum="$(sha256sum "$req" | cut -d' ' -f1)"
  if ! "$venv/bin/python" -c 'import pytest, redis' 2>/dev/null ||
     [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$sum" ]; then
    rm -rf "$venv" && "$py" -m venv "$venv" &&
    "$venv/bin/pip" install -q --disable-pip-version-check --require-hashes -r "$req" &&
    echo "$sum" >"$venv/.requirements.sha256" || return 1
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$whl" || return 1
  mkdir -p "$work" && cp "$root"/tests/python/*.py "$work/" &&
  # HILOCK_ROOT: the tests find the repository's helpers (tests/c/make_certs.sh)
  (cd "$work" && HILOCK_ROOT="$root" timeout 300 "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra "$@")
}
