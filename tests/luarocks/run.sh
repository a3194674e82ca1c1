#!/usr/bin/env bash
# LuaRocks suite: `luarocks --lua-version 5.1 make` and `luarocks
# --lua-version 5.4 make` (Debian's luarocks) build the rockspec into one
# fresh tree, as a user's ~/.luarocks gets both; then, with only the paths
# `luarocks --lua-version V path` prints for that tree (no LUA_CPATH set by
# hand), check.lua requires hilock and resty.hilock from the tree and takes a
# lock on a throwaway redis-server: lua5.1 and LuaJIT (same module, same ABI)
# with the 5.1 paths, lua5.4 with the 5.4 paths. First, the install lines of
# README.md and docs/lua.md build for the Lua their comment names. Exit 0 =
# every check passed.
set -uo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
here="$root/tests/luarocks"
. "$root/tests/lua/lib.sh"
trap hl_cleanup EXIT
trap 'exit 130' INT TERM
unset LUA_PATH LUA_CPATH LUA_PATH_5_4 LUA_CPATH_5_4 LUA_INIT LUA_INIT_5_4
passed=0; failed=0
rockspec="$(cd "$root" && ls hilock-*.rockspec | head -1)"
command -v luarocks >/dev/null || { echo "luarocks is not installed (scripts/deps.sh --test)"; echo "0 passed, 1 failed"; exit 1; }
hl_start_redis || { echo "luarocks: redis failed"; echo "0 passed, 1 failed"; exit 1; }
hl_tmpdir; tmp="$HL_TMP"

# `luarocks [--lua-version V] make   # ... Lua X.Y ...` in the docs: LuaRocks
# picks X.Y for those arguments (plain `luarocks make` is LuaRocks' default
# Lua, 5.1 on Debian)
while IFS= read -r line; do
  args="$(sed -E 's/^[[:space:]]*luarocks(([[:space:]]+--lua-version[[:space:]]+[0-9.]+)?)[[:space:]]+make.*/\1/' <<<"$line")"
  said="$(grep -o -m1 'Lua [0-9]\.[0-9]' <<<"${line#*#}" | head -1)"
  [ -n "$said" ] || continue
  got="$(luarocks $args config lua_version 2>/dev/null)"
  if [ "Lua $got" = "$said" ]; then echo "  ok    docs: 'luarocks$args make' builds for $said"; passed=$((passed+1))
  else echo "  FAIL  docs: '$(sed 's/^[[:space:]]*//' <<<"$line")' builds for Lua $got, not $said"; failed=$((failed+1)); fi
done < <(grep -h -E '^[[:space:]]*luarocks([[:space:]]+--lua-version[[:space:]]+[0-9.]+)?[[:space:]]+make\b.*#' "$root/README.md" "$root/docs/lua.md")

tree="$tmp/tree"
for spec in "5.1:lua5.1 luajit" "5.4:lua5.4"; do
  v="${spec%%:*}"; interps="${spec#*:}"
  echo "== luarocks --lua-version $v make $rockspec"
  t0=$(date +%s)
  if ! (cd "$root" && luarocks --lua-version "$v" --tree "$tree" make "$rockspec") >"$tmp/make-$v.log" 2>&1; then
    tail -30 "$tmp/make-$v.log"; echo "  FAIL  luarocks make ($v)"; failed=$((failed+1)); continue
  fi
  echo "  ok    luarocks make ($v) in $(( $(date +%s) - t0 ))s"; passed=$((passed+1))
  so="$tree/lib/lua/$v/hilock.so"
  exported="$(nm -D --defined-only "$so" 2>/dev/null | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | tr '\n' ' ')"
  if [ "$exported" = "luaopen_hilock " ]; then echo "  ok    $so exports only luaopen_hilock"; passed=$((passed+1))
  else echo "  FAIL  $so exports: $exported"; failed=$((failed+1)); fi
  for lua in $interps; do
    if (eval "$(luarocks --lua-version "$v" --tree "$tree" path)" && cd "$tmp" &&
        timeout 60 "$lua" "$here/check.lua" "$tree" "$REDIS_URL"); then passed=$((passed+1))
    else echo "  FAIL  $lua with the $v tree"; failed=$((failed+1)); fi
  done
done
echo "luarocks: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
