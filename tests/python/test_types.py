"""Types of the blocking package: examples/typed_blocking.py uses every
object (Client, Lock, fair and fenced locks, ReadWriteLock and its sides,
MultiLock, RedLock, Semaphore, PermitExpirableSemaphore, CountDownLatch)
and passes mypy --strict against the installed package (py.typed); a copy
with one misspelt method per object must fail on each of those lines (an
object typed Any lets its typo through)."""
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

import pytest

TYPOS = [  # (what the example says, the typo), one per object
    ("lock.hold_count", "lock.hold_cnt"),
    ("fair.acquire(", "fair.aquire("),
    ("fenced.acquire_token(", "fenced.acquire_tokn("),
    ("rw.read_lock()", "rw.read_lck()"),
    ("multi = hilock.MultiLock(", "multi = hilock.MultiLck("),
    ("red.acquire(", "red.acquir("),
    ("sem.try_set_permits(", "sem.try_set_permit("),
    ("pes.try_set_permits(", "pes.try_set_permts("),
    ("latch.count_down()", "latch.count_dwn()"),
    ("client.url", "client.ulr"),
]


def test_mypy_strict_finds_a_typo_on_every_object(mypy_strict: Any) -> None:
    root = os.environ.get("HILOCK_ROOT", "")
    example = os.path.join(root, "examples", "typed_blocking.py")
    if not root or not os.path.exists(example):
        pytest.skip("HILOCK_ROOT (the source tree with examples/) not given")
    good = mypy_strict(example)
    assert good.returncode == 0, good.stdout + good.stderr
    src = open(example).read()
    lines = []
    for right, wrong in TYPOS:
        assert src.count(right) >= 1, right
        i = src.index(right)
        lines.append(src.count("\n", 0, i) + 1)
        src = src[:i] + wrong + src[i + len(right):]
    with tempfile.TemporaryDirectory() as d:
        bad = os.path.join(d, "typed_blocking_typos.py")
        with open(bad, "w") as f:
            f.write(src)
        out = mypy_strict(bad)
    flagged = {int(m.group(1)) for m in re.finditer(r"typed_blocking_typos\.py:(\d+): error", out.stdout)}
    missed = [TYPOS[k][1] for k, line in enumerate(lines) if line not in flagged]
    assert not missed, f"mypy let these through: {missed}\n{out.stdout}"


def test_typed_example_runs(redis) -> None:  # type: ignore[no-untyped-def]
    """examples/typed_blocking.py runs: every object used once."""
    root = os.environ.get("HILOCK_ROOT", "")
    example = os.path.join(root, "examples", "typed_blocking.py")
    if not root or not os.path.exists(example):
        pytest.skip("HILOCK_ROOT (the source tree with examples/) not given")
    out = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HILOCK_URL": redis.url})
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(redis.url)
