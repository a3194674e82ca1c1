#!/usr/bin/env bash
# Install what hilock needs to build and test, if missing. Idempotent and quick
# when everything is there. Debian bookworm; run as root (or with sudo).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Note: nginx's Lua module needs OpenResty's LuaJIT (luajit2), which conflicts
# with Debian's plain luajit package, so we use luajit2 everywhere.
APT_PACKAGES=(
  build-essential cmake pkg-config git curl
  libhiredis-dev libssl-dev openssl libcunit1-dev swig valgrind
  libuv1-dev                     # the libuv adapter of the non-blocking API (tests, example)
  redis-server redis-tools
  lua5.1 liblua5.1-0-dev lua5.4 liblua5.4-dev luajit2 libluajit2-5.1-dev luarocks
  nginx libnginx-mod-http-lua
  python3 python3-venv python3-dev
  default-jdk-headless maven
  clang libclang-rt-14-dev       # tests/fuzz: libFuzzer + ASan/UBSan runtimes
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Java and Maven may come from outside apt on some machines; accept those.
if command -v java >/dev/null && command -v mvn >/dev/null; then
  tmp=()
  for p in "${missing[@]}"; do
    [[ "$p" == default-jdk-headless || "$p" == maven ]] || tmp+=("$p")
  done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # policy-rc.d keeps Debian from starting the system redis/nginx services.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Valkey 8.0 (tests run against Redis 7.0 and Valkey 8.0) is in
# bookworm-backports: reach it through our own sources file when the system
# does not list backports already (the system's lists stay as they are).
if ! dpkg-query -W -f='${Status}' valkey-server 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' |
      $SUDO tee /etc/apt/sources.list.d/hilock-bookworm-backports.sources >/dev/null
  fi
  echo "deps: installing valkey-server from bookworm-backports" >&2
  $SUDO apt-get update -qq
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  $SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports valkey-server >/dev/null
fi

# hiredis 1.x sources (TLS), pinned and checksummed: built into libhilock.
bash "$here/scripts/fetch-hiredis.sh" >/dev/null

# Per-suite extra dependencies (pip, Maven, ...).
for f in "$here"/tests/*/deps.sh; do
  [ -e "$f" ] && bash "$f"
done
exit 0
