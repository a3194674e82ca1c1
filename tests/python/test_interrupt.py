"""Python habits: Ctrl-C interrupts a waiting acquire (a subprocess sent
SIGINT while it waits: it leaves no hold and no queue entry), and the lock
speaks threading.Lock's protocol (acquire(blocking, timeout), locked())."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable, List

import pytest

import hilock
from conftest import RedisServer, wait_for

CHILD = r"""
import signal, sys, threading, time, hilock
# Python's own Ctrl-C handler even when started with SIGINT ignored (from a
# background job of a non-interactive shell, which ignores it)
signal.signal(signal.SIGINT, signal.default_int_handler)
url, name, kind, wait, multi = sys.argv[1:6]
to_helper = len(sys.argv) > 6 and sys.argv[6] == "helper"
if to_helper:
    # "go" on stdin: SIGINT straight to the thread that runs the acquire, as
    # the kernel may choose it for a process-directed signal
    def relay():
        sys.stdin.readline()
        t = next(t for t in threading.enumerate() if t.name == "hilock-acquire")
        signal.pthread_kill(t.ident, signal.SIGINT)
    threading.Thread(target=relay, daemon=True).start()
if len(sys.argv) > 6 and sys.argv[6] == "slow-start":
    # a loaded machine: the acquire thread is already waiting in line when
    # Thread.start() returns to the caller, and the Ctrl-C lands in between
    real_start = threading.Thread.start
    def start(self):
        real_start(self)
        if self.name == "hilock-acquire":
            time.sleep(30)  # ended by the SIGINT
    threading.Thread.start = start
c = hilock.Client(url)
lock = c.fair_lock(name) if kind == "fair" else c.lock(name)
target = hilock.MultiLock([lock, c.lock(name + ":b")]) if multi == "1" else lock
print(c.owner(), flush=True)
try:
    target.acquire(wait=None if wait == "none" else float(wait))
    print("acquired", flush=True)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
sys.stdout.flush()
c.close()
"""


# The bound: a Ctrl-C ends a waiting acquire within 0.1 s, from the
# signal to the acquire's return (KeyboardInterrupt caught in the child).
CTRL_C_BOUND_S = 0.1
# A loaded machine only ever adds to that time (the child's threads and the
# server wait for a CPU), never takes from it. So a slow answer is measured
# again, in a fresh child, and the fastest of at most this many tries must
# keep the bound: an acquire that does not end at Ctrl-C (it waits out its 8 s
# or its holder's 60 s lease) or ends late fails every try.
CTRL_C_TRIES = 3


def _ctrl_c_once(client: hilock.Client, redis: RedisServer, name: str, kind: str,
                 extra: List[str], send: Callable[[subprocess.Popen], None]) -> float:
    """One child waits for ``name`` (held here); send(child) interrupts it.
    -> seconds from the signal to the child's KeyboardInterrupt, after checking
    that the child left nothing behind (no hold, no queue entry)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, redis.url, name, kind, *extra],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        owner = child.stdout.readline().strip()
        # really waiting on the server before the signal, never a sleep
        if kind == "fair":
            wait_for(lambda: redis("LLEN", f"redisson_lock_queue:{{{name}}}") == 1, 10,
                     "child queued")
        else:
            # the holder here listens there too (a force unlock is heard)
            wait_for(lambda: redis("PUBSUB", "NUMSUB", f"redisson_lock__channel:{{{name}}}")[1]
                     == 2, 10, "child subscribed")
        t0 = time.monotonic()  # CLOCK_MONOTONIC is system-wide
        send(child)
        line = child.stdout.readline().split()
        assert line and line[0] == "interrupted", line
        took = float(line[1]) - t0
        assert child.wait(10) == 0
        # nothing left behind: the holder's hold only, no queue entry
        assert redis("HEXISTS", name, owner) == 0
        assert redis("HLEN", name) == 1
        assert redis("EXISTS", f"redisson_lock_queue:{{{name}}}") == 0
        assert redis("EXISTS", f"redisson_lock_timeout:{{{name}}}") == 0
        assert redis("EXISTS", name + ":b") == 0
        return took
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _ctrl_c_within_bound(client: hilock.Client, redis: RedisServer, name: str, kind: str,
                         extra: List[str], send: Callable[[subprocess.Popen], None]) -> None:
    holder = client.fair_lock(name) if kind == "fair" else client.lock(name)
    assert holder.acquire(wait=0, lease=60)
    try:
        tries = []
        while len(tries) < CTRL_C_TRIES:
            tries.append(_ctrl_c_once(client, redis, name, kind, extra, send))
            if tries[-1] < CTRL_C_BOUND_S:
                break
        assert holder.owned()
        assert min(tries) < CTRL_C_BOUND_S, \
            "Ctrl-C took " + ", ".join(f"{t:.3f}" for t in tries) + " s to end the acquire"
    finally:
        holder.release()


@pytest.mark.parametrize("kind,wait,multi", [("reentrant", "none", "0"), ("fair", "8", "0"),
                                             ("fair", "none", "0")])
def test_ctrl_c_interrupts_a_waiting_acquire(client: hilock.Client, redis: RedisServer,
                                             name: str, kind: str, wait: str,
                                             multi: str) -> None:
    _ctrl_c_within_bound(client, redis, name, kind, [wait, multi],
                         lambda child: os.kill(child.pid, signal.SIGINT))


def test_ctrl_c_as_the_acquire_thread_starts(client: hilock.Client, redis: RedisServer,
                                             name: str) -> None:
    """A Ctrl-C that comes out of Thread.start(), when the helper thread is
    already in the fair queue, still cancels the acquire: the child leaves
    the queue (it left its entry there for the entry's deadline, 68 s here)."""
    _ctrl_c_within_bound(client, redis, name, "fair", ["8", "0", "slow-start"],
                         lambda child: os.kill(child.pid, signal.SIGINT))


@pytest.mark.parametrize("kind", ["reentrant", "fair"])
def test_ctrl_c_delivered_to_the_acquire_thread(client: hilock.Client, redis: RedisServer,
                                                name: str, kind: str) -> None:
    """A process-directed SIGINT may land on the helper thread that runs the
    acquire; its C handler only flags it, and the main thread must still see
    it within 0.1 s (it waited for the whole acquire: 8 s here)."""
    def go(child: subprocess.Popen) -> None:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()

    _ctrl_c_within_bound(client, redis, name, kind, ["8", "0", "helper"], go)


def test_threading_lock_protocol(client: hilock.Client, redis: RedisServer, name: str) -> None:
    mine, other = client.lock(name), client.lock(name, thread_id=424242)
    assert not mine.locked()
    assert mine.acquire(False)  # dogpile.cache: mutex.acquire(False)
    assert mine.locked()
    mine.release()
    assert mine.acquire(blocking=True, timeout=-1)
    mine.release()
    assert other.acquire(wait=0, lease=30)
    try:
        assert mine.locked()
        assert mine.acquire(False) is False
        assert mine.acquire(blocking=False) is False
        t0 = time.monotonic()
        assert mine.acquire(True, 0.2) is False
        assert mine.acquire(timeout=0.2) is False
        assert time.monotonic() - t0 >= 0.4
        with pytest.raises(ValueError):
            mine.acquire(False, 1)
        with pytest.raises(ValueError):
            mine.acquire(blocking=False, timeout=1)
        with pytest.raises(ValueError):
            mine.acquire(timeout=-2)
        with pytest.raises(TypeError):
            mine.acquire(5, blocking=True)
        with pytest.raises(TypeError):
            mine.acquire(timeout="1")
        assert not mine.owned()
    finally:
        other.release()
    assert not mine.locked()


def test_extend_adds_to_a_fixed_lease(client: hilock.Client, redis: RedisServer,
                                      name: str) -> None:
    lock, other = client.lock(name), client.lock(name, thread_id=424242)
    with pytest.raises(hilock.NotOwnerError):
        lock.extend(1)
    assert lock.acquire(wait=0, lease=2)
    lock.extend(60)
    assert 60_000 < redis("PTTL", name) <= 62_000
    with pytest.raises(hilock.NotOwnerError):
        other.extend(1)
    with pytest.raises(hilock.InvalidArgument):
        lock.extend(0)
    with pytest.raises(TypeError):
        lock.extend("1")  # type: ignore[arg-type]
    lock.release()
    assert redis("EXISTS", name) == 0


def test_errors_cover_cancelled() -> None:
    assert hilock.AcquireCancelled.code == -12
    assert issubclass(hilock.AcquireCancelled, hilock.Error)
    assert hilock.strerror(-12) == "acquire cancelled"
