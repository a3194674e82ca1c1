#!/usr/bin/env bash
# Install what hilock needs, if missing. Idempotent and quick when everything
# is there. Debian bookworm; run as root (or with sudo).
#
#   scripts/deps.sh          building and the demo (scripts/demo.sh): a C
#                            compiler and make, CMake, OpenSSL's headers,
#                            redis-server and redis-cli; and it fetches the
#                            pinned hiredis archive (scripts/fetch-hiredis.sh)
#   scripts/deps.sh --test   that, plus everything the test suites need
#                            (scripts/test.sh runs this): CUnit, valgrind,
#                            clang, Lua, LuaRocks, nginx, SWIG, a JDK and
#                            Maven, Go, valkey (bookworm-backports), then each
#                            tests/*/deps.sh (PyPI, Maven Central, npm, Go
#                            module proxy)
#   scripts/deps.sh --list [--test]
#                            print what that tier installs when missing, one
#                            per line ("apt PKG", "backports PKG", "hiredis
#                            ARCHIVE", "script tests/S/deps.sh"), install nothing
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tier=build
list=0
for a in "$@"; do
  case "$a" in
    --test) tier=test ;;
    --list) list=1 ;;
    *) echo "usage: scripts/deps.sh [--list] [--test]" >&2; exit 2 ;;
  esac
done

BUILD_PACKAGES=(
  gcc libc6-dev make cmake libssl-dev
  curl ca-certificates           # scripts/fetch-hiredis.sh: the pinned hiredis archive from PyPI
  redis-server redis-tools
)
# Note: nginx's Lua module needs OpenResty's LuaJIT (luajit2), which conflicts
# with Debian's plain luajit package, so we use luajit2 everywhere.
TEST_PACKAGES=(
  build-essential pkg-config git curl openssl   # tests/c/make_certs.sh: openssl; tests/openresty: curl
  python3 python3-venv python3-dev
  libcunit1-dev valgrind
  libhiredis-dev                 # HILOCK_SYSTEM_HIREDIS builds (Debian packaging profile)
  swig                           # the Python package without build isolation
  ninja-build                    # scikit-build-core's generator (tests/python builds without isolation)
  libuv1-dev                     # the libuv adapter of the non-blocking API (tests, example)
  lua5.1 liblua5.1-0-dev lua5.4 liblua5.4-dev luajit2 libluajit2-5.1-dev luarocks
  nginx libnginx-mod-http-lua
  default-jdk-headless maven
  clang libclang-rt-14-dev       # tests/fuzz: libFuzzer + ASan/UBSan runtimes
)

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
policy_rc_d() { # keep Debian from starting the system redis/nginx services
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
updated=0
apt_install() { # [apt options...] -- packages...
  local opts=()
  while [ "$1" != -- ]; do opts+=("$1"); shift; done; shift
  echo "deps: installing $*" >&2
  [ $updated = 1 ] || { $SUDO apt-get update -qq; updated=1; }
  policy_rc_d
  $SUDO apt-get install -y -qq --no-install-recommends "${opts[@]+"${opts[@]}"}" "$@" >/dev/null
}

wanted=("${BUILD_PACKAGES[@]}")
[ $tier = test ] && wanted+=("${TEST_PACKAGES[@]}")
if [ $list = 1 ]; then
  printf 'apt %s\n' "${wanted[@]}"
  echo "hiredis $(sed -n 's/^PYPI_VERSION=\([0-9.]*\).*/hiredis-\1.tar.gz/p' "$here/scripts/fetch-hiredis.sh")"
  if [ $tier = test ]; then
    printf 'backports %s\n' valkey-server golang-1.23-go
    for f in "$here"/tests/*/deps.sh; do echo "script ${f#$here/}"; done
  fi
  exit 0
fi
missing=()
for p in "${wanted[@]}"; do installed "$p" || missing+=("$p"); done
# Java and Maven may come from outside apt on some machines; accept those.
if command -v java >/dev/null && command -v mvn >/dev/null; then
  tmp=()
  for p in "${missing[@]+"${missing[@]}"}"; do
    [[ "$p" == default-jdk-headless || "$p" == maven ]] || tmp+=("$p")
  done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
[ "${#missing[@]}" -eq 0 ] || apt_install -- "${missing[@]}"

# hiredis 1.x sources (TLS), pinned and checksummed: built into libhilock.
# Downloaded into third_party/ once (git ignores it); no network after that.
bash "$here/scripts/fetch-hiredis.sh" >/dev/null

[ $tier = test ] || exit 0

# Valkey 8.0 (tests run against Redis 7.0 and Valkey 8.0) and a Go toolchain
# that can fetch the one bench/peers/go/go.mod names (Go >= 1.21 downloads it
# from the Go module proxy; bookworm's own Go is 1.19) are in
# bookworm-backports: reach it through our own sources file when the system
# does not list backports already (the system's lists stay as they are).
backports=()
installed valkey-server || backports+=(valkey-server)
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || installed golang-1.23-go || backports+=(golang-1.23-go)
if [ "${#backports[@]}" -gt 0 ]; then
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' |
      $SUDO tee /etc/apt/sources.list.d/hilock-bookworm-backports.sources >/dev/null
    updated=0
  fi
  apt_install -t bookworm-backports -- "${backports[@]}"
fi

# Per-suite extra dependencies (pip, Maven, npm, Go modules, ...).
for f in "$here"/tests/*/deps.sh; do
  [ -e "$f" ] && bash "$f"
done
exit 0
