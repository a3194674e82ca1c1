#!/usr/bin/env bash
# The peers smoke suite's registry dependencies (PyPI, npm, Maven Central, Go
# module proxy), installed by bench/peers/deps.sh into build/peers/.
# Idempotent; quick when already satisfied. A failure here (no Go toolchain,
# a registry out of reach) is reported but does not stop scripts/deps.sh for
# the other suites: tests/peers-smoke/run.sh runs the same step again and
# fails on its own.
root="${HILOCK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
bash "$root/bench/peers/deps.sh" --smoke ||
  echo "peers-smoke deps: bench/peers/deps.sh failed; the peers-smoke suite will fail" >&2
exit 0
