"""Reentrant and fair locks seen from Python: API shape, Redisson layout,
reentrancy, ownership, leases, watchdog, context managers, lifetimes."""

from __future__ import annotations

import gc
import math
import os
import sys
import threading
import time

import pytest

import hilock
from conftest import RedisServer, wait_for


def test_imported_from_install_not_source() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    assert not hilock.__file__.startswith(here)
    assert "site-packages" in hilock.__file__
    assert hilock.__version__.count(".") == 2
    assert hilock.version_number >= 100
    assert os.path.exists(os.path.join(os.path.dirname(hilock.__file__), "py.typed"))


def test_client_identity(client: hilock.Client) -> None:
    assert len(client.id) == 36 and client.id.count("-") == 4
    assert client.owner() == f"{client.id}:{hilock.thread_id()}"
    assert client.owner(7) == f"{client.id}:7"
    assert hilock.thread_id() == threading.get_native_id()


def test_acquire_release_layout(client: hilock.Client, redis: RedisServer, name: str) -> None:
    lock = client.lock(name)
    assert not lock.locked() and not lock.owned()
    assert lock.hold_count == 0 and lock.ttl is None
    assert lock.acquire() is True
    # Redisson RLock layout: one hash field "<uuid>:<tid>" = hold count
    assert redis("HGETALL", name) == [client.owner(), "1"]
    assert lock.locked() and lock.owned() and lock.hold_count == 1
    ttl = lock.ttl
    assert ttl is not None and 29.0 < ttl <= 30.0  # watchdog lease default 30 s
    lock.release()
    assert redis("EXISTS", name) == 0
    assert not lock.locked() and lock.ttl is None


def test_reentrancy(client: hilock.Client, redis: RedisServer, name: str) -> None:
    lock = client.lock(name)
    for n in range(1, 4):
        assert lock.acquire(wait=0)
        assert lock.hold_count == n
    # another Lock object of the same client/thread is the same owner
    assert client.lock(name).hold_count == 3
    assert redis("HGET", name, client.owner()) == "3"
    for n in (2, 1, 0):
        lock.release()
        assert lock.hold_count == n
    assert not lock.locked()
    with pytest.raises(hilock.NotOwnerError):
        lock.release()


def test_not_owner(client: hilock.Client, redis: RedisServer, name: str) -> None:
    lock = client.lock(name)
    with pytest.raises(hilock.NotOwnerError) as ei:
        lock.release()
    assert ei.value.code == -3 and "not" in str(ei.value)
    assert lock.acquire()
    # another thread of the same client is another owner
    errors: list = []

    def other() -> None:
        try:
            lock.release()
        except hilock.NotOwnerError as e:
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1
    # another client is another owner, even with the same thread id
    with hilock.Client(redis.url) as c2:
        with pytest.raises(hilock.NotOwnerError):
            c2.lock(name).release()
        assert c2.lock(name).acquire(wait=0) is False
    assert lock.hold_count == 1  # nothing changed
    lock.release()


def test_explicit_thread_id(client: hilock.Client, redis: RedisServer, name: str) -> None:
    a = client.lock(name, thread_id=42)
    b = client.lock(name, thread_id=43)
    assert a.thread_id == 42
    assert a.acquire(wait=0)
    assert redis("HGETALL", name) == [f"{client.id}:42", "1"]
    assert b.acquire(wait=0) is False
    assert not client.lock(name).owned()  # the OS thread is a third owner
    with pytest.raises(hilock.NotOwnerError):
        b.release()
    # the same explicit id from another OS thread is the same owner
    t = threading.Thread(target=a.release)
    t.start()
    t.join()
    assert not a.locked()
    with pytest.raises(TypeError):
        client.lock(name, thread_id="1")  # type: ignore[arg-type]
    with pytest.raises(hilock.InvalidArgument):
        client.lock(name, thread_id=-1)


def test_wait_zero_and_timeout(client: hilock.Client, redis: RedisServer, name: str) -> None:
    with hilock.Client(redis.url) as c2:
        other = c2.lock(name)
        assert other.acquire()
        lock = client.lock(name)
        assert lock.acquire(wait=0) is False
        t0 = time.monotonic()
        assert lock.acquire(wait=0.3) is False
        assert time.monotonic() - t0 >= 0.29
        other.release()
        assert lock.acquire(wait=0)
        lock.release()


def test_waiter_woken_on_release(client: hilock.Client, redis: RedisServer, name: str) -> None:
    with hilock.Client(redis.url) as c2:
        other = c2.lock(name)
        assert other.acquire()
        got: list = []
        t = threading.Thread(target=lambda: got.append(client.lock(name).acquire(wait=10)))
        t.start()
        # two clients listen: the waiter and the holder (a watchdog hold
        # listens on its lock's channel for a force unlock)
        wait_for(lambda: redis("PUBSUB", "NUMSUB", f"redisson_lock__channel:{{{name}}}")[1] == 2,
                 5, "the waiter to subscribe")
        other.release()
        t.join(10)
        assert got == [True]
        # the waiter thread acquired as itself; it is gone, so force it away
        assert client.lock(name).force_unlock() is True


def test_lease_expiry(client: hilock.Client, redis: RedisServer, name: str) -> None:
    lock = client.lock(name)
    assert lock.acquire(lease=0.3)
    ttl = lock.ttl
    assert ttl is not None and 0 < ttl <= 0.3
    wait_for(lambda: not lock.locked(), 5, "the lease to expire")
    assert not lock.owned()
    with pytest.raises(hilock.NotOwnerError):
        lock.release()
    with hilock.Client(redis.url) as c2:
        assert c2.lock(name).acquire(wait=0, lease=5)
        c2.lock(name).release()


def test_watchdog_keeps_lock_past_lease(redis: RedisServer, name: str) -> None:
    with hilock.Client(redis.url, watchdog_lease=0.3) as c:
        lock = c.lock(name)
        assert lock.acquire()
        assert 0 < lock.ttl <= 0.3
        # keep checking for 4 leases: a renewal must have happened each time
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            assert lock.owned(), "the watchdog let the lock expire"
            time.sleep(0.05)
        assert not lock.lost
        lock.release()
        assert not lock.locked()


def test_fixed_lease_not_renewed(redis: RedisServer, name: str) -> None:
    with hilock.Client(redis.url, watchdog_lease=0.3) as c:
        lock = c.lock(name)
        assert lock.acquire(lease=0.4)
        wait_for(lambda: not lock.locked(), 5, "the fixed lease to expire")


def test_force_unlock(client: hilock.Client, redis: RedisServer, name: str) -> None:
    lock = client.lock(name)
    assert lock.force_unlock() is False
    assert lock.acquire()
    with hilock.Client(redis.url) as c2:
        assert c2.lock(name).force_unlock() is True
    assert not lock.locked()
    with pytest.raises(hilock.NotOwnerError):
        lock.release()


def test_lost_after_server_restart(own_redis: RedisServer, name: str) -> None:
    with hilock.Client(own_redis.url, watchdog_lease=0.6, command_timeout=0.5,
                       connect_timeout=0.5) as c:
        lock = c.lock(name)
        calls: list = []
        fired = threading.Event()

        def on_lost(l: hilock.Lock, tid: int) -> None:
            calls.append((l, tid, threading.current_thread().name, l.lost))
            fired.set()

        lock.on_lost = on_lost
        assert lock.on_lost is on_lost
        assert lock.acquire()
        assert not lock.lost
        own_redis.restart()  # kill -9, start empty on the same port
        wait_for(lambda: lock.lost, 10, "lock.lost after the restart")
        assert fired.wait(10)
        (l, tid, thread_name, was_lost), = calls
        assert l is lock and tid == hilock.thread_id()
        assert thread_name == "hilock-lost" and was_lost
        with pytest.raises(hilock.NotOwnerError):
            lock.release()
        # a new acquire works and resets `lost`
        assert lock.acquire(wait=5)
        assert not lock.lost
        lock.release()


def test_on_lost_after_force(redis: RedisServer, name: str) -> None:
    with hilock.Client(redis.url, watchdog_lease=0.3) as c:
        lock = c.lock(name)
        fired = threading.Event()
        lock.on_lost = lambda l, tid: fired.set()
        assert lock.acquire()
        redis("DEL", name)
        assert fired.wait(5)
        assert lock.lost


def test_context_manager(client: hilock.Client, redis: RedisServer, name: str) -> None:
    with client.lock(name, wait=1.0) as lock:
        assert lock.owned() and lock.hold_count == 1
        with lock:  # reentrant
            assert lock.hold_count == 2
        assert lock.hold_count == 1
    assert redis("EXISTS", name) == 0


def test_context_manager_releases_on_exception(client: hilock.Client, redis: RedisServer,
                                               name: str) -> None:
    with pytest.raises(KeyError):
        with client.lock(name):
            assert redis("EXISTS", name) == 1
            raise KeyError("boom")
    assert redis("EXISTS", name) == 0


def test_context_manager_timeout(client: hilock.Client, redis: RedisServer, name: str) -> None:
    with hilock.Client(redis.url) as c2:
        assert c2.lock(name).acquire()
        t0 = time.monotonic()
        with pytest.raises(hilock.LockTimeout) as ei:
            with client.lock(name, wait=0.2):
                pytest.fail("entered without the lock")
        assert time.monotonic() - t0 >= 0.19
        assert ei.value.code == -2
        c2.lock(name).release()


def test_context_manager_lock_lost(client: hilock.Client, redis: RedisServer, name: str) -> None:
    with pytest.raises(hilock.LockLostError) as ei:
        with client.lock(name):
            redis("DEL", name)  # someone else removed it while we were inside
    assert isinstance(ei.value.__cause__, hilock.NotOwnerError)
    # with an exception in the block, that exception wins
    with pytest.raises(ZeroDivisionError) as zi:
        with client.lock(name):
            redis("DEL", name)
            1 / 0
    if sys.version_info >= (3, 11):
        assert any("release" in n for n in zi.value.__notes__)


def test_fair_lock_basics(client: hilock.Client, redis: RedisServer, name: str) -> None:
    lock = client.fair_lock(name)
    assert lock.fair and not client.lock(name).fair
    assert lock.acquire()
    assert redis("HGETALL", name) == [client.owner(), "1"]
    assert lock.acquire(wait=0) and lock.hold_count == 2
    with hilock.Client(redis.url) as c2:
        assert c2.fair_lock(name).acquire(wait=0.1) is False
        # the waiter that gave up left the queue
        assert redis("LLEN", f"redisson_lock_queue:{{{name}}}") == 0
    lock.release()
    lock.release()
    assert not lock.locked()


def test_time_arguments(client: hilock.Client, name: str) -> None:
    lock = client.lock(name)
    for bad in (math.nan, -1, -0.5, math.inf):
        with pytest.raises(hilock.InvalidArgument):
            lock.acquire(lease=bad)
    for bad in (math.nan, -0.001, -1):
        with pytest.raises(ValueError):  # InvalidArgument is a ValueError
            lock.acquire(wait=bad)
    with pytest.raises(hilock.InvalidArgument):
        lock.acquire(lease=0)
    with pytest.raises(hilock.InvalidArgument):
        lock.acquire(wait=hilock.MAX_TIME * 2)
    with pytest.raises(TypeError):
        lock.acquire(wait="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lock.acquire(lease=True)  # type: ignore[arg-type]
    with pytest.raises(hilock.InvalidArgument):
        client.lock(name, wait=-1)
    assert not lock.locked()  # nothing was sent for bad arguments
    # tiny leases round up to 1 ms instead of meaning "watchdog"
    assert lock.acquire(wait=math.inf, lease=0.0001)
    wait_for(lambda: not lock.locked(), 2, "a 1 ms lease to expire")
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client("redis://127.0.0.1:1", command_timeout=0)
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client("redis://127.0.0.1:1", watchdog_lease=math.nan)


def test_lock_keeps_client_alive(redis: RedisServer, name: str) -> None:
    c = hilock.Client(redis.url)
    lock = c.lock(name)
    cid = c.id
    del c
    gc.collect()
    assert lock.acquire()
    assert lock.client.id == cid
    lock.release()
    lock.client.close()


def test_dropped_lock_object_keeps_renewing(redis: RedisServer, name: str) -> None:
    with hilock.Client(redis.url, watchdog_lease=0.3) as c:
        assert c.lock(name).acquire()  # the Lock object is dropped at once
        gc.collect()
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            assert redis("EXISTS", name) == 1, "lock expired after its object was dropped"
            time.sleep(0.05)
        c.lock(name).release()  # another object of the same owner releases it
        assert redis("EXISTS", name) == 0


def test_close_with_lock_held(redis: RedisServer, name: str) -> None:
    c = hilock.Client(redis.url, watchdog_lease=0.5)
    lock = c.lock(name)
    assert lock.acquire()
    owner = c.owner()
    c.close()
    c.close()  # idempotent
    assert c.closed
    # nothing was released...
    assert redis("HGET", name, owner) == "1"
    # ...every call now raises ClosedError...
    for call in (lock.acquire, lock.release, lock.locked, lock.owned, lock.force_unlock):
        with pytest.raises(hilock.ClosedError):
            call()
    with pytest.raises(hilock.ClosedError):
        c.lock(name)
    # ...and, no longer renewed, the lock expires after its lease
    wait_for(lambda: redis("EXISTS", name) == 0, 5, "the orphaned lock to expire")


def test_client_context_manager(redis: RedisServer, name: str) -> None:
    with hilock.Client(redis.url) as c:
        lock = c.lock(name)
        assert lock.acquire(lease=10)
    assert c.closed
    assert redis("EXISTS", name) == 1  # close released nothing
    redis("DEL", name)
