#!/usr/bin/env bash
# Extra apt package for the abi suite: abigail-tools (libabigail's abidw and
# abidiff).
set -euo pipefail
if ! command -v abidiff >/dev/null || ! command -v abidw >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "deps: installing abigail-tools" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends abigail-tools >/dev/null
fi
