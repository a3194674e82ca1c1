#!/usr/bin/env bash
# Wheel suite: the Python package as users get it.
#   1. python -m build --sdist, then the wheel built from that sdist by pip
#      with build isolation, as `pip install hilock-X.tar.gz` does, and
#      offline: no index, no network, the build requirements (scikit-build-
#      core, SWIG) from a wheelhouse, the hiredis sources from the sdist;
#      its time is printed;
#   2. the wheel: one cp39-abi3 wheel, only PyInit__capi exported, no
#      hiredis/libuuid needed at run time, licence and metadata inside;
#      auditwheel repair's output has a manylinux tag (auditwheel show);
#   3. auditwheel repair's output installed into a fresh venv of another
#      Python (HILOCK_PY_OTHER, default the oldest supported, 3.9) passes the
#      Python tests (tests/python);
#   4. `pip install -e .` gives a working `import hilock` outside the tree;
#   5. an offline install from a read-only copy of the tree.
# The full 3.9-3.13 matrix is the separate suite python-matrix.
set -uo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
here="$root/tests/wheel"
. "$here/lib.sh"
bash "$root/tests/python/deps.sh" >/dev/null || { echo "python deps failed"; echo "0 passed, 1 failed"; exit 1; }
venv="$root/build/venv"
export PATH="$venv/bin:$PATH"
tmp="$(mktemp -d /tmp/hilock-wheel.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
check() { # description, command...
  local what="$1"; shift
  if "$@" >"$tmp/check.log" 2>&1; then echo "  ok    $what"; passed=$((passed+1))
  else echo "  FAIL  $what"; tail -30 "$tmp/check.log"; failed=$((failed+1)); fi
}

# 0. offline builds. The wheelhouse holds the build
# requirements only: pyproject.toml's [build-system] requires and what the
# backend asks for on this machine (cmake or ninja from PyPI when the system
# has none); pip gets PIP_NO_INDEX=1 and runs in a network namespace of its
# own (no route out), so the hiredis sources must come from what is being
# installed. Every build below is offline: the wheel from the sdist
# (step 1) and the read-only tree (step 5).
wh="$tmp/wheelhouse"
mapfile -t buildreqs < <(cd "$root" && PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -c '
import tomllib, scikit_build_core.build as backend
with open("pyproject.toml", "rb") as f:
    reqs = tomllib.load(f)["build-system"]["requires"]
print("\n".join(reqs + list(backend.get_requires_for_build_wheel())))')
if "$venv/bin/python" -m pip download -q --disable-pip-version-check -d "$wh" \
     "${buildreqs[@]}" >"$tmp/wh.log" 2>&1; then
  echo "  wheelhouse: $(cd "$wh" && ls | tr '\n' ' ')"
else
  cat "$tmp/wh.log"; echo "wheel: pip download of the build requirements failed"; echo "0 passed, 1 failed"; exit 1
fi
nonet=()
if unshare -n true 2>/dev/null; then nonet=(unshare -n)
elif unshare -rn true 2>/dev/null; then nonet=(unshare -rn)
else echo "  (no network namespace here: offline installs use PIP_NO_INDEX only)"; fi
offline_pip() { # VENV ARGS...: pip install with no index and no network
  local v="$1"; shift
  "${nonet[@]}" env PIP_NO_INDEX=1 PIP_FIND_LINKS="$wh" PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$v/bin/python" -m pip install --no-deps "$@"
}
imports() { # VENV: the installed hilock imports and answers, outside the tree
  (cd "$tmp" && "$1/bin/python" -c 'import hilock; assert hilock.strerror(-3).startswith("not owner"); import hilock.aio')
}

# 1. the sdist, then the wheel pip builds from it in an isolated environment
if ! "$venv/bin/python" -m build --sdist --no-isolation --outdir "$tmp/dist" "$root" >"$tmp/build.log" 2>&1; then
  tail -40 "$tmp/build.log"; echo "wheel: python -m build --sdist failed"; echo "0 passed, 1 failed"; exit 1
fi
sdist="$(ls "$tmp"/dist/hilock-*.tar.gz)"
t0=$(date +%s)
if ! "${nonet[@]}" env PIP_NO_INDEX=1 PIP_FIND_LINKS="$wh" PIP_NO_CACHE_DIR=1 \
     "$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$tmp/dist" "$sdist" \
     >>"$tmp/build.log" 2>&1; then
  tail -40 "$tmp/build.log"; echo "wheel: pip wheel from the sdist failed"; echo "0 passed, 1 failed"; exit 1
fi
echo "  ok    wheel built from the sdist by pip, offline (isolated: scikit-build-core, swig from the wheelhouse; PIP_NO_INDEX=1, no network) in $(( $(date +%s) - t0 ))s"
passed=$((passed+1))
whl="$(ls "$tmp"/dist/hilock-*.whl)"
echo "  $(basename "$sdist"): $(du -k "$sdist" | cut -f1) KiB; $(basename "$whl"): $(du -k "$whl" | cut -f1) KiB"

# 2. what is inside
check "one abi3 wheel for CPython >= 3.9" grep -q -- '-cp39-abi3-linux_x86_64\.whl$' <<<"$whl"
check "sdist carries the C sources, SWIG interface, CMake files and LICENSE" \
  bash -c "tar tzf '$sdist' | grep -c -E '^hilock-[^/]+/(LICENSE|pyproject.toml|CMakeLists.txt|bindings/hilock.i|libcore/src/api/lock.c|libcore/include/hilock.h|python/CMakeLists.txt)$' | grep -qx 7"
check "sdist has no build output" bash -c "! tar tzf '$sdist' | grep -E '/build/|\\.so$|\\.o$'"
# the pinned hiredis sources travel in the sdist: the archive fetch-hiredis.sh
# names, with its pinned SHA-256
hiredis_in_sdist() {
  local v sum
  v=$(sed -n 's/^PYPI_VERSION=\([0-9.]*\).*/\1/p' "$root/scripts/fetch-hiredis.sh")
  sum=$(sed -n 's/^SHA256=//p' "$root/scripts/fetch-hiredis.sh")
  [ "$(tar xzf "$sdist" -O "$(basename "$sdist" .tar.gz)/third_party/hiredis-$v.tar.gz" | sha256sum | cut -d' ' -f1)" = "$sum" ]
}
check "sdist carries third_party/hiredis-*.tar.gz with the pinned SHA-256" hiredis_in_sdist
unzip -q -o "$whl" -d "$tmp/whl"
so="$(ls "$tmp"/whl/hilock/_capi.abi3.so)"
check "wheel: only PyInit__capi exported" \
  bash -c "[ \"\$(nm -D --defined-only '$so' | awk '\$2 ~ /^[TDBRVW]\$/ {print \$3}')\" = PyInit__capi ]"
check "wheel: hiredis folded in, no libuuid (no DT_NEEDED on them)" \
  bash -c "! readelf -d '$so' | grep -E 'NEEDED.*(hiredis|uuid)'"
# hilock._engine (the engine for hilock.aio): the same rules
eng="$(ls "$tmp"/whl/hilock/_engine.abi3.so 2>/dev/null || echo "$tmp/whl/hilock/_engine.abi3.so")"
check "wheel: _engine.abi3.so with only PyInit__engine exported, hiredis folded in" \
  bash -c "[ \"\$(nm -D --defined-only '$eng' | awk '\$2 ~ /^[TDBRVW]\$/ {print \$3}')\" = PyInit__engine ] &&
           ! readelf -d '$eng' | grep -E 'NEEDED.*(hiredis|uuid)'"
check "wheel: LICENSE, MIT licence, Requires-Python, classifiers in METADATA" \
  bash -c "m=\$(cat '$tmp'/whl/hilock-*.dist-info/METADATA) && ls '$tmp'/whl/hilock-*.dist-info/licenses/LICENSE &&
           grep -qx 'License-Expression: MIT' <<<\"\$m\" && grep -qx 'Requires-Python: >=3.9' <<<\"\$m\" &&
           grep -q 'Classifier: Programming Language :: Python :: 3.13' <<<\"\$m\""
# OpenSSL (rediss://), the one shared library outside the manylinux set, is
# copied by auditwheel repair into hilock.libs/ under a unique name.
check "auditwheel repair" auditwheel repair -w "$tmp/repaired" "$whl"
repaired="$(ls "$tmp"/repaired/hilock-*manylinux*.whl 2>/dev/null)"
[ -n "$repaired" ] && echo "  $(basename "$repaired"): $(du -k "$repaired" | cut -f1) KiB"
check "auditwheel show (repaired wheel): a manylinux tag" \
  bash -c "auditwheel show '$repaired' | tr '\n' ' ' | grep -q 'platform tag: \"manylinux_2_[0-9]*_x86_64\"'"

# twine check: what PyPI would say of the sdist and the wheels (metadata,
# README rendering)
check "twine check: sdist, wheel, repaired wheel" twine check --strict "$sdist" "$whl" "$repaired"

# 3. the repaired wheel on another Python version, with the Python tests
other="${HILOCK_PY_OTHER:-3.9}"
# The binding's surface (locks, errors, the asyncio parity and engine types)
# on the oldest Python: 13 s instead of the whole of tests/python (93 s),
# which suite python runs on the build's Python and python-matrix on each.
if [ -n "$repaired" ] && hl_pytest_on "$other" "$repaired" "$tmp" \
     test_lock.py test_errors.py test_aio_parity.py test_aio_engine_types.py; then
  echo "  ok    repaired wheel on Python $other: tests/python's lock, error and parity tests pass"; passed=$((passed+1))
else
  echo "  FAIL  repaired wheel on Python $other"; failed=$((failed+1))
fi

# 4. editable install. The build requirements come from the pip cache and
# the build directory is the one `pip install .` (tests/python) uses, so a
# run after the Python suite rebuilds nothing.
editable() {
  python3 -m venv "$tmp/edit-venv" &&
  "$tmp/edit-venv/bin/pip" install -q --disable-pip-version-check "scikit-build-core>=0.10" "swig>=4.2" &&
  "$tmp/edit-venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation \
    --config-settings="build-dir=$root/build/py/{wheel_tag}" -e "$root" &&
  (cd "$tmp" && HILOCK_ROOT="$root" "$tmp/edit-venv/bin/python" -c '
import hilock, os
assert hilock.__file__ == os.path.join(os.environ["HILOCK_ROOT"], "python", "hilock", "__init__.py"), hilock.__file__
assert hilock.strerror(-3).startswith("not owner"), hilock.strerror(-3)
print(hilock.__version__)')
}
check "pip install -e . then import hilock (the tree's python/hilock)" editable

# 5. a read-only install. A copy of the tree (what git tracks or would track) mounted read-only, and
# offline too: pip builds in a temporary directory and writes nothing next to
# the sources.
readonly_tree() {
  local ro="$tmp/ro-tree"
  mkdir -p "$ro" &&
  (cd "$root" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -C "$ro" -xf - &&
  # a checkout where scripts/fetch-hiredis.sh (deps.sh) put the pinned archive
  # (git ignores it): offline from there on
  mkdir -p "$ro/third_party" && cp "$(bash "$root/scripts/fetch-hiredis.sh")" "$ro/third_party/" &&
  python3 -m venv "$tmp/ro-venv" &&
  if [ "$(id -u)" = 0 ]; then # root ignores permission bits: a read-only bind mount
    unshare -m sh -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && "$@"' sh "$ro" \
      bash -c "$(declare -f offline_pip); wh='$wh'; nonet=(${nonet[*]}); offline_pip '$tmp/ro-venv' '$ro'"
  else
    chmod -R a-w "$ro" && offline_pip "$tmp/ro-venv" "$ro"; local rc=$?; chmod -R u+w "$ro"; return $rc
  fi &&
  imports "$tmp/ro-venv"
}
check "pip install from a read-only copy of the tree, offline" readonly_tree

echo "wheel: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
