#!/usr/bin/env bash
# lint suite: the drivers that do their own I/O -- the OpenResty driver
# (lua/resty/hilock.lua) and the asyncio driver (python/hilock/aio.py and
# _aio_sem.py, its semaphores) --
# only move bytes, and libcore's files keep to their layers (see the end of
# this file). Every command, script, key, channel and Redis error string
# belongs to the engine (libcore's proto layer, exposed as hilock.proto and
# hilock._engine); a driver names none of them outside comments. Takes well
# under a second.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
fails=0

# Redis commands and error words (as the server spells them), Redisson's
# key and channel prefixes, sentinel and cluster vocabulary, the connection
# handshake (proto.handshake_cmds / proto.handshake_reply), and "eval" as a
# string (an engine answer must say what to do, not name the command).
upper='AUTH|SELECT|EVALSHA|EVAL|SCRIPT|NOSCRIPT|MOVED|ASK|ASKING|TRYAGAIN|CLUSTERDOWN|LOADING|READONLY|MASTERDOWN|WRONGTYPE|PUBLISH|SPUBLISH|SUBSCRIBE|SSUBSCRIBE|UNSUBSCRIBE|SUNSUBSCRIBE|PEXPIRE|HEXISTS|HGET|HSET|PTTL|EXISTS|DEL|WAIT|ROLE|SENTINEL|CLUSTER|SLOTS'
lower='redisson_|evalsha|noscript|spublish|publish|switch-master|get-master-addr-by-name|pexpire|hincrby|["'"'"']eval["'"'"']'

# strip comments: "--" (Lua) or "#" (Python) to the end of the line (no
# string in either driver has one)
code() { case "$1" in *.py) sed 's/#.*$//' "$1" ;; *) sed 's/--.*$//' "$1" ;; esac; }
scan() { # file -> offending lines
  code "$1" | grep -nwE "$upper"
  code "$1" | grep -nE "$lower"
}

# the check must be able to fail: a sample with protocol strings is caught
sample="$(mktemp)"; trap 'rm -f "$sample"' EXIT
printf '%s\n' 'local x = "EVALSHA" -- fine in a comment: MOVED' \
  'if msg:find("^MOVED") then end' 'local k = "redisson_lock__channel:{" .. n .. "}"' >"$sample"
if [ "$(scan "$sample" | wc -l)" != 3 ]; then
  echo "  FAIL  lint self-check: the scan missed protocol strings in a sample"; fails=$((fails+1))
else
  echo "  ok    lint self-check: the scan catches protocol strings"
fi

pysample="$(mktemp --suffix=.py)"; trap 'rm -f "$sample" "$pysample"' EXIT
printf '%s\n' 'x = "EVALSHA"  # fine in a comment: MOVED' 'ch = "redisson_lock__channel:{" + n + "}"' >"$pysample"
if [ "$(scan "$pysample" | wc -l)" != 2 ]; then
  echo "  FAIL  lint self-check: the scan missed protocol strings in a Python sample"; fails=$((fails+1))
fi

for rel in lua/resty/hilock.lua python/hilock/aio.py python/hilock/_aio_sem.py; do
  driver="$root/$rel"
  if [ ! -f "$driver" ]; then
    echo "  FAIL  $rel is missing"; fails=$((fails+1)); continue
  fi
  hits="$(scan "$driver")"
  if [ -n "$hits" ]; then
    echo "  FAIL  $rel names protocol strings (move them into the engine):"
    echo "$hits" | sed 's/^/          /'
    fails=$((fails+1))
  else
    echo "  ok    $rel names no command, script, key, channel or Redis error ($(wc -l <"$driver") lines)"
  fi
done

# libcore's layers (scripts/layers.py, docs/architecture.md): no file
# includes a header of a layer above its own, nothing outside libcore
# includes a private header, and the committed include graph is current.
layers="$root/scripts/layers.py"
lsample="$(mktemp -d)"; trap 'rm -f "$sample" "$pysample"; rm -rf "$lsample"' EXIT
mkdir -p "$lsample/libcore/src/engine" "$lsample/libcore/src/transport" "$lsample/libcore/src/api" "$lsample/cli"
printf '#include "hilock.h"\n' >"$lsample/libcore/src/engine/proto.h"
printf '#include "proto.h"\nvoid hl_api_only(int on);\n' >"$lsample/libcore/src/api/api.h"
printf '#include "hilock.h"\nvoid hl_api_only(int on);\n' >"$lsample/cli/declares.c"
printf '#include "proto.h"\n#include "api.h"\n' >"$lsample/libcore/src/engine/proto_sample.c"
printf '#include "proto.h"\n#include "api.h"\n' >"$lsample/cli/sample.c"
printf '#include "proto.h"\n' >"$lsample/libcore/src/transport/transport_impl.h"
printf '#include "api.h"\n#include "transport_impl.h"\n' >"$lsample/libcore/src/api/lock.c"
printf '#include "proto.h"\n' >"$lsample/libcore/src/stray.c"
printf '#include "transport_impl.h"\nint f(int k) { return k == HILOCK_KIND_READ; }\n' >"$lsample/libcore/src/transport/kinds.c"
if [ "$(python3 "$layers" check "$lsample" | grep -c '^breach:')" != 6 ]; then
  echo "  FAIL  layers self-check: an upward include, a layer's inner header used from above, a private header used or a private function declared outside libcore, a file outside the layer folders, or a transport file naming a lock kind was missed"
  fails=$((fails+1))
else
  echo "  ok    layers self-check: an upward include, a layer's inner header used from above, an outside include of a private header, an outside declaration of a private function, a file outside the layer folders and a transport file naming a lock kind are caught"
fi
if out="$(python3 "$layers" check "$root")"; then
  echo "  ok    libcore includes follow the layer folders (engine < transport < api); no private header outside libcore; no transport file names a lock kind"
  [ -n "$out" ] && echo "$out" | sed 's/^/          /'
else
  echo "  FAIL  layer rules broken (scripts/layers.py; docs/architecture.md):"
  echo "$out" | sed 's/^/          /'
  fails=$((fails+1))
fi
if python3 "$layers" dot "$root" | diff -u "$root/docs/architecture.dot" - >/dev/null 2>&1; then
  echo "  ok    docs/architecture.dot is the current include graph"
else
  echo "  FAIL  docs/architecture.dot is stale: python3 scripts/layers.py dot > docs/architecture.dot"
  fails=$((fails+1))
fi

echo "lint suite: $([ $fails = 0 ] && echo ok || echo "$fails failed")"
[ "$fails" -eq 0 ]
