#!/usr/bin/env bash
# Fetch what the interop suite needs from Maven Central (Redisson, slf4j and the
# Maven plugins used by run.sh) into the default ~/.m2. Idempotent; returns at
# once when a previous run fetched everything for this exact pom.xml and the
# Redisson versions below (the pom's default, 3.52.0, and 4.7.0: run.sh runs
# the suite against each).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v mvn >/dev/null || ! command -v java >/dev/null; then
  echo "interop deps: java and mvn are required (scripts/deps.sh --test installs them)" >&2
  exit 1
fi
repo="${HOME}/.m2/repository"
versions="3.52.0 4.7.0"
stamp="$repo/.hilock-interop-$( (cat "$here/pom.xml"; echo "$versions") | sha1sum | cut -c1-12)"
if [ -e "$stamp" ] && [ -d "$repo/org/redisson/redisson" ]; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# A full package (not just dependency:go-offline, which misses some plugin
# dependencies) so that run.sh can later build with -o.
echo "interop deps: fetching Maven artifacts" >&2
for v in $versions; do
  if ! mvn -B -q -Dstyle.color=never -f "$here/pom.xml" package dependency:build-classpath \
    -Dredisson.version="$v" -Dinterop.build="$tmp/jvm-$v" \
    -Dmdep.outputFile="$tmp/jvm-$v/classpath.txt" >"$tmp/mvn.log" 2>&1; then
    cat "$tmp/mvn.log" >&2
    exit 1
  fi
done
mkdir -p "$repo" && touch "$stamp"
