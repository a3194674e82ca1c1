#!/usr/bin/env bash
# The man3 pages generated from hilock.h (scripts/gen-man3.py): every
# HILOCK_API function has a page (or a .so link to its group's page), and
# every page renders with groff -ww and no complaint.
# Usage: test_man3.sh SOURCE_DIR
set -uo pipefail
src="$1"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
python3 "$src/scripts/gen-man3.py" "$src/libcore/include/hilock.h" "$tmp/man3" >/dev/null || { echo "FAIL gen-man3.py"; exit 1; }
failed=0; pages=0
for fn in $(sed -n 's/.*HILOCK_API[^(]*[ *]\(hilock_[a-z0-9_]*\)(.*/\1/p' "$src/libcore/include/hilock.h"); do
  if [ ! -s "$tmp/man3/$fn.3" ]; then echo "FAIL no page for $fn"; failed=$((failed+1)); fi
done
[ -s "$tmp/man3/hilock.3" ] || { echo "FAIL no hilock.3"; failed=$((failed+1)); }
cd "$tmp"
for f in man3/*.3; do
  pages=$((pages+1))
  # -s: soelim resolves the .so links (relative to here), -ww: all warnings
  out="$(groff -s -man -Tutf8 -P-cbou -ww "$f" 2>&1 >"$tmp/page.txt")"
  [ -z "$out" ] || { echo "FAIL $f: $out"; failed=$((failed+1)); }
  grep -q "^NAME" "$tmp/page.txt" || { echo "FAIL $f has no NAME"; failed=$((failed+1)); }
done
grep -q "hilock_lock_acquire_tid" man3/hilock_lock_acquire.3 || { echo "FAIL group page misses a name"; failed=$((failed+1)); }
echo "man3: $pages pages, $failed problems"
[ "$failed" -eq 0 ]
