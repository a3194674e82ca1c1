"""Semaphores and count-down latch from Python: Redisson layouts, waiters
woken by message, permit leases, bad input."""

from __future__ import annotations

import threading
import time

import pytest

import hilock
from conftest import RedisServer, wait_for


def test_semaphore(client: hilock.Client, redis: RedisServer, name: str) -> None:
    sem = client.semaphore(name)
    assert sem.try_set_permits(2) is True
    assert sem.try_set_permits(5) is False
    assert redis("GET", name) == "2"
    assert sem.acquire(2, wait=0) is True
    assert sem.acquire(1, wait=0) is False
    assert sem.available_permits() == 0
    other = hilock.Client(redis.url)
    try:
        got = {}

        def waiter() -> None:
            got["ok"] = other.semaphore(name).acquire(1, wait=10)
            got["at"] = time.monotonic()

        t = threading.Thread(target=waiter)
        t.start()
        wait_for(lambda: redis("PUBSUB", "NUMSUB", "redisson_sc:{%s}" % name)[1] >= 1, 5,
                 "waiter subscribed")
        time.sleep(0.05)
        t0 = time.monotonic()
        sem.release(1)
        t.join()
        assert got["ok"] is True and got["at"] - t0 < 1.0  # the message, not the 10 s
    finally:
        other.close()
    sem.release(2)
    assert sem.drain_permits() == 2
    sem.add_permits(3)
    sem.set_permits(4)
    assert sem.available_permits() == 4
    with sem:
        assert sem.available_permits() == 3
    assert sem.available_permits() == 4
    assert sem.delete() is True
    assert redis("EXISTS", name) == 0


def test_semaphore_bad_input(client: hilock.Client, redis: RedisServer, name: str) -> None:
    sem = client.semaphore(name)
    for bad in (0, -1, 2**31):
        with pytest.raises(hilock.InvalidArgument):
            sem.try_set_permits(bad)
        with pytest.raises(hilock.InvalidArgument):
            sem.acquire(bad, wait=0)
    with pytest.raises(TypeError):
        sem.acquire(1.5, wait=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sem.release(True)
    assert redis("EXISTS", name) == 0
    redis("HSET", name, "f", "1")
    with pytest.raises(hilock.WrongTypeError):
        sem.acquire(1, wait=0)
    with pytest.raises(hilock.WrongTypeError):
        sem.release(1)
    assert redis("HGET", name, "f") == "1"
    redis("DEL", name)
    redis("SET", name, "999999999999999")
    with pytest.raises(hilock.InvalidArgument):
        sem.release(1)
    assert redis("GET", name) == "999999999999999"


def test_permit_expirable(client: hilock.Client, redis: RedisServer, name: str) -> None:
    pes = client.permit_expirable_semaphore(name)
    assert pes.try_set_permits(1)
    pid = pes.acquire(wait=0, lease=0.3)
    assert isinstance(pid, str) and len(pid) == 32
    assert redis("ZCARD", "{%s}:timeout" % name) == 1
    assert pes.acquire(wait=0) is None
    t0 = time.monotonic()
    again = pes.acquire(wait=5, lease=30)  # the first lease ends: no message needed
    assert again and 0.2 < time.monotonic() - t0 < 2.0
    with pytest.raises(hilock.NotOwnerError):
        pes.release(pid)  # its lease had ended
    pes.release(again)
    with pytest.raises(hilock.NotOwnerError):
        pes.release(again)
    with pytest.raises(hilock.InvalidArgument):
        pes.release("xyz")
    assert pes.available_permits() == 1
    assert pes.delete()


def test_count_down_latch(client: hilock.Client, redis: RedisServer, name: str) -> None:
    latch = client.count_down_latch(name)
    assert latch.wait(0) is True  # no latch: open
    assert latch.try_set_count(2) and not latch.try_set_count(3)
    assert latch.count == 2
    assert latch.wait(0.1) is False
    other = hilock.Client(redis.url)
    try:
        done = []

        def waiter() -> None:
            done.append((other.count_down_latch(name).wait(10), time.monotonic()))

        ts = [threading.Thread(target=waiter) for _ in range(2)]
        for t in ts:
            t.start()
        wait_for(lambda: redis("PUBSUB", "NUMSUB",
                               "redisson_countdownlatch__channel__{%s}" % name)[1] >= 1, 5,
                 "waiters subscribed")
        assert latch.count_down() == 1
        time.sleep(0.1)
        assert done == []
        t0 = time.monotonic()
        assert latch.count_down() == 0
        for t in ts:
            t.join()
        assert [ok for ok, _ in done] == [True, True]
        assert all(at - t0 < 1.0 for _, at in done)
    finally:
        other.close()
    assert redis("EXISTS", name) == 0
    with pytest.raises(hilock.InvalidArgument):
        latch.try_set_count(0)


SEM_CHILD = r"""
import sys, time, hilock
url, name, kind = sys.argv[1:4]
c = hilock.Client(url)
print("ready", flush=True)
try:
    if kind == "sem":
        c.semaphore(name).acquire(1, wait=None)
    elif kind == "pes":
        c.permit_expirable_semaphore(name).acquire(wait=None, lease=60)
    else:
        c.count_down_latch(name).wait(None)
    print("done", flush=True)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
c.close()
"""


@pytest.mark.parametrize("kind", ["sem", "pes", "latch"])
def test_ctrl_c_ends_a_wait(client: hilock.Client, redis: RedisServer, name: str,
                            kind: str) -> None:
    """Ctrl-C (SIGINT to a waiting process's main thread) ends a semaphore
    acquire or a latch wait at once; no permit is taken."""
    import signal
    import subprocess
    import sys
    if kind == "latch":
        client.count_down_latch(name).try_set_count(1)
        channel = "redisson_countdownlatch__channel__{%s}" % name
    else:
        client.semaphore(name).set_permits(0)  # exists, no permit free
        channel = "redisson_sc:{%s}" % name
    child = subprocess.Popen([sys.executable, "-c", SEM_CHILD, redis.url, name, kind],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        wait_for(lambda: redis("PUBSUB", "NUMSUB", channel)[1] == 1, 10, "child waiting")
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline().split()
        assert line and line[0] == "interrupted", line
        assert float(line[1]) - t0 < 0.5
        assert child.wait(10) == 0
        if kind != "latch":
            assert redis("GET", name) == "0"  # nothing taken
            assert redis("ZCARD", "{%s}:timeout" % name) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
