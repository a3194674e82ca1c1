#!/usr/bin/env bash
# The peers smoke suite's registry dependencies (PyPI, npm, Maven Central, Go
# module proxy), installed by bench/peers/deps.sh into build/peers/.
# Idempotent; quick when already satisfied.
set -euo pipefail
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
exec bash "$root/bench/peers/deps.sh" --smoke
