#!/usr/bin/env bash
# Fetch what the interop suite needs from Maven Central (Redisson, slf4j and the
# Maven plugins used by run.sh) into the default ~/.m2. Idempotent; returns at
# once when a previous run fetched everything for this exact pom.xml.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v mvn >/dev/null || ! command -v java >/dev/null; then
  echo "interop deps: java and mvn are required (scripts/deps.sh installs them)" >&2
  exit 1
fi
repo="${HOME}/.m2/repository"
stamp="$repo/.hilock-interop-$(sha1sum "$here/pom.xml" | cut -c1-12)"
if [ -e "$stamp" ] && [ -d "$repo/org/redisson/redisson" ]; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# A full package (not just dependency:go-offline, which misses some plugin
# dependencies) so that run.sh can later build with -o.
echo "interop deps: fetching Maven artifacts" >&2
if ! mvn -B -q -Dstyle.color=never -f "$here/pom.xml" package dependency:build-classpath \
  -Dinterop.build="$tmp/jvm" -Dmdep.outputFile="$tmp/jvm/classpath.txt" >"$tmp/mvn.log" 2>&1; then
  cat "$tmp/mvn.log" >&2
  exit 1
fi
mkdir -p "$repo" && touch "$stamp"
