#!/usr/bin/env bash
# The long safety schedule (tests/safety, docs/safety.md): every scenario,
# each for minutes rather than seconds (at least 30 minutes in all). Runs
# only when named: scripts/test.sh safety (or safety-long, the same).
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/safety/run.sh" --long "$@"
