#!/usr/bin/env bash
# Extra apt package for the OpenResty suite: curl (the concurrent HTTP client).
set -euo pipefail
if ! command -v curl >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends curl >/dev/null
fi
