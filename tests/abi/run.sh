#!/usr/bin/env bash
# The ABI holds (issue 31): libhilock.so and hilock.h as built now against the
# baseline, commit 7b6fa8d (tests/abi/baseline.sh made the committed files):
# 1. abidiff (libabigail) compares the baseline's ABI (hilock-7b6fa8d.abi)
#    with build/release/libcore/libhilock.so and its DWARF (a
#    RelWithDebInfo build, as scripts/test.sh makes), restricted to the
#    types of libcore/include: a removed or changed function, or a change of
#    any type a function reaches (struct layout, member type, enumerator
#    value, typedef, parameter, return type) fails. Additions do not:
#    functions, enumerators at new values, and members appended to the
#    structs hilock.abignore names (library-allocated or versioned).
# 2. hilock-7b6fa8d.h, static assertions compiled after the current hilock.h:
#    every enumerator and numeric #define of the baseline's hilock.h keeps its
#    value (the error codes are an enum that no function names, so the DWARF
#    does not carry them), and each struct hilock.abignore lets grow keeps
#    every baseline member at the same offset with the same type (the
#    suppression hides every change of such a struct from abidiff).
# Needs abidiff (tests/abi/deps.sh installs abigail-tools) and the build.
# Usage: tests/abi/run.sh [libhilock.so]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="$here/tests/abi"
base=7b6fa8d
lib="${1:-${HILOCK_BUILD:-$here/build/release}/libcore/libhilock.so}"
[ -f "$lib" ] || { echo "abi: $lib not built (scripts/test.sh builds it)"; exit 1; }
command -v abidiff >/dev/null || { echo "abi: no abidiff (bash tests/abi/deps.sh installs abigail-tools)"; exit 1; }
fail=0

out="$(abidiff --leaf-changes-only --fail-no-debug-info --no-added-syms --exported-interfaces-only \
        --suppressions "$dir/hilock.abignore" --headers-dir2 "$here/libcore/include" \
        "$dir/hilock-$base.abi" "$lib" 2>&1)"
rc=$?
# abidiff's status is a bit mask: 1 error, 2 usage, 4 a change, 8 an
# incompatible change. With additions hidden and the suppressions applied,
# any bit set is a failure.
if [ $rc -ne 0 ]; then
  printf '%s\n' "$out"
  echo "abi: FAILED: abidiff $base -> $(basename "$lib") exited $rc (bits: 1 error, 4 change, 8 incompatible change)"
  fail=1
else
  echo "abi: abidiff $base -> build: no function or type removed or changed"
fi

# The baseline's constants and growable structs (hilock-7b6fa8d.h).
log="$(mktemp)"; trap 'rm -f "$log"' EXIT
if cc -std=c11 -fsyntax-only -I "$here/libcore/include" -include hilock.h -x c \
     "$dir/hilock-$base.h" 2>"$log"; then
  echo "abi: $base's constants keep their values and its growable structs only grew" \
       "($(grep -c '^_Static_assert' "$dir/hilock-$base.h") assertions)"
else
  grep -E 'error' "$log"
  echo "abi: FAILED: a constant or a growable struct of $base's hilock.h was removed or changed"
  fail=1
fi
exit $fail
