#!/usr/bin/env bash
# The hiredis 1.x C sources (with TLS: ssl.c) that hilock builds into its
# own library come from the PyPI sdist of the `hiredis` Python package, which
# carries them under vendor/hiredis. The pinned archive is downloaded (never
# committed: git ignores it) into third_party/hiredis-<PYPI_VERSION>.tar.gz,
# which the Python sdist carries (so the sdist builds with no network);
# CMakeLists.txt reads PYPI_VERSION and SHA256 below, checks the archive and
# unpacks vendor/hiredis into its build directory.
# This script makes sure the archive, with the pinned SHA-256, is in DIR and
# prints its path.
# Usage: scripts/fetch-hiredis.sh [DIR]
#   DIR default: $HILOCK_DEPS_DIR, else <repo>/third_party.
# The archive is taken from DIR when it is already there, else copied from
# <repo>/third_party, else downloaded: with curl from the PyPI simple index
# ($PIP_INDEX_URL when set, else https://pypi.org/simple; under a second,
# and no Python needed), else with pip (which honours PIP_INDEX_URL,
# PIP_FIND_LINKS and PIP_NO_INDEX). A checksum mismatch is an error.
# Moving the pin: set PYPI_VERSION and SHA256 (PyPI lists each file's
# SHA-256) and run this script.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYPI_VERSION=3.2.1      # hiredis-py 3.2.1 vendors hiredis (C) 1.3.0
SHA256=5a5f64479bf04dd829fe7029fad0ea043eac4023abc6e946668cbbec3493a78d
name="hiredis-$PYPI_VERSION.tar.gz"
dir="${1:-${HILOCK_DEPS_DIR:-$here/third_party}}"
archive="$dir/$name"
verify() { # FILE: the pinned checksum, or an error
  local got
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  [ "$got" = "$SHA256" ] && return 0
  echo "fetch-hiredis: checksum mismatch for $1: $got (want $SHA256)" >&2
  return 1
}
if [ -f "$archive" ]; then
  verify "$archive"; echo "$archive"; exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
from_index() { # the file's link on the PEP 503 simple page, then the file
  local index="${PIP_INDEX_URL:-https://pypi.org/simple}" page link
  [ -z "${PIP_NO_INDEX:-}" ] && command -v curl >/dev/null || return 1
  page="$(curl -fsSL --max-time 60 "${index%/}/hiredis/")" || return 1
  link="$(printf '%s\n' "$page" | grep -o "href=\"[^\"]*/$name[#\"][^\"]*" | head -1 |
          sed -e 's/^href="//' -e 's/#.*//')"
  [ -n "$link" ] || return 1
  case "$link" in http*) ;; /*) link="${index%%/simple*}$link" ;; *) link="${index%/}/hiredis/$link" ;; esac
  curl -fsSL --max-time 120 -o "$tmp/$name" "$link"
}
if [ -f "$here/third_party/$name" ]; then
  cp "$here/third_party/$name" "$tmp/$name"
elif from_index; then
  :
else
  rm -f "$tmp/$name"
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
  [ -f "$tmp/$name" ] || { echo "fetch-hiredis: pip gave no $name" >&2; exit 1; }
fi
verify "$tmp/$name"
mv "$tmp/$name" "$archive"
echo "$archive"
