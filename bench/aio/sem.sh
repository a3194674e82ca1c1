#!/usr/bin/env bash
# hilock.aio semaphore bench (bench/aio/sem.py): semaphore acquire+release
# pairs/s against hilock.aio's lock, the blocking semaphore and the server's
# limit, on a throwaway redis-server. Uses the venv of tests/python (hilock
# installed from this tree, redis-py). About a minute.
# Usage: bash bench/aio/sem.sh [--slices 9] [--pairs 1000]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$root/tests/python/deps.sh"
mkdir -p "$root/build"
bash "$root/tests/python/install.sh" "$root/build/bench-aio-installed.sha1" >/dev/null
cd /tmp && exec "$root/build/venv/bin/python" "$root/bench/aio/sem.py" "$@"
