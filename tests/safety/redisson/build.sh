#!/usr/bin/env bash
# Build the Redisson safety worker (Worker.java) into OUT: the classpath of
# Redisson 4.7.0 from tests/interop's Maven setup (its pom.xml, its deps.sh
# fetches what is missing into ~/.m2, every jar checked against its
# jars.sha256), then javac. Prints nothing on success; writes
# OUT/classpath.txt and OUT/classes/.
#   build.sh OUT
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
interop="$here/../../interop"
mkdir -p "$1" && out="$(cd "$1" && pwd)"
version=4.7.0
mkdir -p "$out/classes"
command -v java >/dev/null && command -v javac >/dev/null && command -v mvn >/dev/null ||
  { echo "redisson worker: java, javac and mvn are required (scripts/deps.sh --test)"; exit 1; }
args=(-B -q -f "$interop/pom.xml" dependency:build-classpath -Dredisson.version="$version"
      -Dinterop.build="$out/mvn" -Dmdep.outputFile="$out/classpath.txt")
if ! mvn -o "${args[@]}" >"$out/mvn.log" 2>&1; then
  bash "$interop/deps.sh" >>"$out/mvn.log" 2>&1 && mvn "${args[@]}" >>"$out/mvn.log" 2>&1 ||
    { cat "$out/mvn.log"; echo "redisson worker: maven failed"; exit 1; }
fi
# every jar as pinned for the interop suite
bad=0
for jar in $(tr ':' ' ' <"$out/classpath.txt"); do
  rel="${jar#*/repository/}"
  want="$(awk -v r="$rel" '$2 == r {print $1}' "$interop/jars.sha256")"
  if [ -z "$want" ] || [ "$want" != "$(sha256sum "$jar" | cut -d' ' -f1)" ]; then
    echo "redisson worker: $rel is not as pinned in tests/interop/jars.sha256"; bad=1
  fi
done
[ "$bad" = 0 ] || exit 1
javac -Xlint:all -Werror -d "$out/classes" -cp "$(cat "$out/classpath.txt")" "$here/Worker.java" \
  >"$out/javac.log" 2>&1 || { cat "$out/javac.log"; echo "redisson worker: javac failed"; exit 1; }
