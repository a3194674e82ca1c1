#!/usr/bin/env bash
# The short safety schedule (tests/safety, docs/safety.md): the scenarios of
# SHORT in tests/safety/safety.py, about 2.5 minutes; in the default test
# run. `scripts/test.sh safety` runs the long schedule instead.
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/safety/run.sh" "$@"
