#!/usr/bin/env bash
# hilock.aio bench (bench/aio/bench.py): the asyncio driver against blocking
# hilock, redis-py's asyncio Lock and the server's limit, on a throwaway
# redis-server; 10,000 waiters; cancellation. Uses the venv of tests/python
# (hilock installed from this tree, redis-py, uvloop). Several minutes.
# Usage: bash bench/aio/run.sh [--slices 15] [--pairs 300] [--waiters 10000] ...
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$root/tests/python/deps.sh"
mkdir -p "$root/build"
bash "$root/tests/python/install.sh" "$root/build/bench-aio-installed.sha1" >/dev/null
cd /tmp && exec "$root/build/venv/bin/python" "$root/bench/aio/bench.py" "$@"
