#!/usr/bin/env bash
# The shared library exports only hilock_* symbols (hiredis and every
# internal hl_* function stay hidden), has SONAME libhilock.so.<major>, and
# needs no hiredis symbol from elsewhere.
# Usage: test_exports.sh /path/to/libhilock.so
set -u
lib="${1:?usage: test_exports.sh libhilock.so}"
fail=0
[ -f "$lib" ] || { echo "FAIL: $lib not found"; exit 1; }

defined=$(nm -D --defined-only "$lib" | awk 'NF >= 3 {print $3}' | sed 's/@.*//' | sort -u)
bad=$(printf '%s\n' "$defined" | grep -v '^hilock_' | grep -v '^$' || true)
if [ -n "$bad" ]; then
  echo "FAIL: exported symbols outside hilock_*:"; printf '  %s\n' $bad; fail=1
fi
for sym in hilock_version hilock_strerror hilock_client_open hilock_client_close \
           hilock_lock_new hilock_lock_acquire hilock_lock_release hilock_lock_free; do
  printf '%s\n' "$defined" | grep -qx "$sym" || { echo "FAIL: $sym not exported"; fail=1; }
done
undef=$(nm -D --undefined-only "$lib" | awk '{print $NF}' | grep -E '^(redis|hi_|sds|hl_)' || true)
if [ -n "$undef" ]; then
  echo "FAIL: undefined hiredis/internal symbols:"; printf '  %s\n' $undef; fail=1
fi
major=$(sed -n 's/^#define HILOCK_VERSION_MAJOR \([0-9]*\).*/\1/p' "$(dirname "$0")/../../libcore/include/hilock.h")
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
if [ "$soname" != "libhilock.so.$major" ]; then
  echo "FAIL: SONAME is '$soname', expected libhilock.so.$major"; fail=1
fi
n=$(printf '%s\n' "$defined" | grep -c '^hilock_')
if [ $fail -eq 0 ]; then echo "OK: $n symbols exported, all hilock_*; SONAME $soname"; fi
exit $fail
