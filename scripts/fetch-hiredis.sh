#!/usr/bin/env bash
# Fetch the hiredis 1.x C sources (with TLS: ssl.c) that hilock builds into
# its own library. They come from the PyPI sdist of the `hiredis` Python
# package, which carries them under vendor/hiredis; the version is pinned and
# the archive's SHA-256 checked before anything is unpacked.
# Usage: scripts/fetch-hiredis.sh [DEPS_DIR]   (default: <repo>/build/deps)
# Prints the directory holding hiredis/hiredis.h (the include root).
# Idempotent: nothing is downloaded when the sources are already there.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYPI_VERSION=3.2.1      # hiredis-py 3.2.1 vendors hiredis (C) 1.3.0
SHA256=5a5f64479bf04dd829fe7029fad0ea043eac4023abc6e946668cbbec3493a78d
deps="${1:-${HILOCK_DEPS_DIR:-$here/build/deps}}"
src="$deps/hiredis-py-$PYPI_VERSION"
if [ -f "$src/vendor/hiredis/ssl.c" ] && [ -f "$src/.verified" ]; then
  echo "$src/vendor"; exit 0
fi
mkdir -p "$deps"
tmp="$(mktemp -d "$deps/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
pip=()
py="${HILOCK_PYTHON:-python3}"
if "$py" -m pip --version >/dev/null 2>&1; then
  pip=("$py" -m pip)
else # Debian's python3 has no pip without python3-pip: a throwaway venv has one
  "$py" -m venv "$tmp/venv" >&2
  pip=("$tmp/venv/bin/python" -m pip)
fi
"${pip[@]}" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
  -d "$tmp" "hiredis==$PYPI_VERSION" >&2
archive="$tmp/hiredis-$PYPI_VERSION.tar.gz"
[ -f "$archive" ] || { echo "fetch-hiredis: pip gave no $archive" >&2; exit 1; }
got="$(sha256sum "$archive" | cut -d' ' -f1)"
if [ "$got" != "$SHA256" ]; then
  echo "fetch-hiredis: checksum mismatch for $archive: $got (want $SHA256)" >&2
  exit 1
fi
tar -xzf "$archive" -C "$tmp" "hiredis-$PYPI_VERSION/vendor/hiredis"
rm -rf "$src"
mv "$tmp/hiredis-$PYPI_VERSION" "$src"
echo "$SHA256" >"$src/.verified"
echo "$src/vendor"
