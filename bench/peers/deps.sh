#!/usr/bin/env bash
# Install the peer benchmark's contenders from their registries, into
# build/peers/ (git-ignored) and the standard caches (~/.m2, ~/go/pkg/mod,
# ~/.npm, pip's cache). Idempotent: a stamp per part, so a second call with
# nothing changed returns at once.
#
#   bench/peers/deps.sh [--smoke]
#
#   venv  build/peers/venv: redis (redis-py), python-redis-lock, pottery,
#         aioredlock (+ matplotlib unless --smoke)           PyPI
#   node  build/peers/node: redlock + ioredis (package-lock.json) npm
#   jvm   build/peers/jvm: the Redisson 4.7.0 contender        Maven Central
#   go    build/peers/go/peers-redsync: redsync v4 + go-redis v9 Go module proxy
# System packages (redis-server, python3-venv, a JDK and maven) come from
# scripts/deps.sh; nodejs/npm are installed here if missing; the Go toolchain
# must be on the PATH, in /usr/local/go/bin, or bookworm-backports'
# golang-1.23-go (scripts/deps.sh --test installs it; it fetches the newer
# toolchain go/go.mod names from the Go module proxy, GOTOOLCHAIN=auto).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${HILOCK_PEERS_BUILD:-$root/build/peers}"
smoke=0; [ "${1:-}" = --smoke ] && smoke=1
mkdir -p "$out"
export PATH="$PATH:/usr/local/go/bin:/usr/lib/go-1.23/bin"
sum() { cat "$@" | sha1sum | cut -c1-12; }
fresh() { [ "$(cat "$out/$1.stamp" 2>/dev/null)" = "$2" ]; }

# 0. node and npm (Debian: nodejs, npm) when missing
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "peers deps: installing nodejs npm" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null ||
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }
fi
command -v go >/dev/null || { echo "peers deps: the Go toolchain (go) is not on the PATH" >&2; exit 1; }

# 1. Python peers
# pinned with their hashes (scripts/pin-python-deps.py writes these files)
req="$here/requirements.txt"
[ $smoke = 1 ] && req="$here/requirements-smoke.txt"
s="$(sha1sum "$req" | cut -c1-12)"
if ! fresh venv "$s" && ! { [ $smoke = 1 ] && [ -n "$(cat "$out/venv.stamp" 2>/dev/null)" ]; }; then
  [ -x "$out/venv/bin/python" ] || python3 -m venv "$out/venv"
  echo "peers deps: pip install --require-hashes -r ${req#$root/}" >&2
  "$out/venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes -r "$req"
  echo "$s" >"$out/venv.stamp"
fi

# 2. node-redlock
s="$(sum "$here/node/package.json" "$here/node/package-lock.json")"
if ! fresh node "$s" || [ ! -d "$out/node/node_modules/redlock" ]; then
  mkdir -p "$out/node"
  cp "$here/node/package.json" "$here/node/package-lock.json" "$out/node/"
  echo "peers deps: npm ci (redlock, ioredis)" >&2
  (cd "$out/node" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$s" >"$out/node.stamp"
fi

# 3. Redisson (Maven Central)
s="$(sum "$here/java/pom.xml" "$here"/java/src/main/java/hilock/peers/*.java)"
if ! fresh jvm "$s" || [ ! -f "$out/jvm/classpath.txt" ]; then
  echo "peers deps: mvn package (Redisson)" >&2
  mvn -B -q -Dstyle.color=never -f "$here/java/pom.xml" package dependency:build-classpath \
    -Dpeers.build="$out/jvm" -Dmdep.outputFile="$out/jvm/classpath.txt" >"$out/mvn.log" 2>&1 ||
    { cat "$out/mvn.log" >&2; exit 1; }
  echo "$s" >"$out/jvm.stamp"
fi

# 4. redsync (Go module proxy)
s="$(sum "$here/go/go.mod" "$here/go/go.sum" "$here/go/main.go")"
if ! fresh go "$s" || [ ! -x "$out/go/peers-redsync" ]; then
  echo "peers deps: go build (redsync)" >&2
  mkdir -p "$out/go"
  (cd "$here/go" && go build -o "$out/go/peers-redsync" .)
  echo "$s" >"$out/go.stamp"
fi
