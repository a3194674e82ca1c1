"""What the fault suite's files share: the fixtures of a test's own server,
a fault proxy in front of it and a fresh lock name, and `report` for the
times each scenario prints ("[time] ..." lines, kept in TIMES for the end of
the run).

tests/faults/run.sh puts the Python suite's harness (tests/python/conftest.py:
throwaway redis-server processes, a tiny RESP client) next to this file as
harness.py; what the test files import from conftest comes from there.
"""

from __future__ import annotations

import subprocess
import uuid
from typing import List, Tuple

import pytest

import hilock
from faultproxy import FaultProxy
from harness import ClusterNode, Redis, RedisServer, RespError, wait_for  # noqa: F401

TIMES: List[Tuple[str, float]] = []  # (scenario, seconds), in the order reported


def report(what: str, secs: float) -> None:
    TIMES.append((what, secs))
    print(f"[time] {what}: {secs * 1000:.0f} ms")


@pytest.fixture
def server():
    """A redis-server of the test's own (to stop, pause, restart...)."""
    s = RedisServer()
    yield s
    s.stop()


@pytest.fixture
def proxy(server):
    """A fault proxy in front of the test's server."""
    p = FaultProxy(server.port)
    yield p
    p.close()


@pytest.fixture
def name(request) -> str:
    """A fresh lock name, led by its file's ("silence:..." in test_silence.py)."""
    return request.module.__name__.replace("test_", "", 1) + ":" + uuid.uuid4().hex[:12]


def numsub(server, channel: str) -> int:
    """The channel's subscribers (PUBSUB NUMSUB on the test's server)."""
    return int(server("PUBSUB", "NUMSUB", channel)[1])


def wait_renewed(server, key: str, lease: float) -> None:
    """Wait until the watchdog renewed key once after its grant (its PTTL
    went back up), so that a fault that starts now starts right after a
    renewal."""
    ms = lease * 1000
    wait_for(lambda: server("PTTL", key) < ms - 300, 2 * lease, "the lease to run down")
    wait_for(lambda: server("PTTL", key) > ms - 200, 2 * lease, "a renewal")


# payloads on a lock's channel that must wake nobody
GARBAGE_PAYLOADS = ["", "2", "-1", "0x", "9" * 400, "\x00\xff", "1" * 30]


def stop_all(*procs) -> None:
    """Terminate (forwarded by `hilock run` to its command) and reap."""
    for p in procs:
        if p and p.poll() is None:
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def opened(url: str, **kw):
    """A client with command and connect timeouts of 1 s unless given."""
    kw.setdefault("command_timeout", 1.0)
    kw.setdefault("connect_timeout", 1.0)
    return hilock.Client(url, **kw)
