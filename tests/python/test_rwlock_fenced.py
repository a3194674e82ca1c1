"""Read-write lock and fenced lock from Python: Redisson layout, sharing and
exclusion, wake-up by message, tokens strictly increasing across clients."""

from __future__ import annotations

import threading
import time

import pytest

import hilock
from conftest import RedisServer, wait_for


def test_readers_share_writer_excludes(client: hilock.Client, redis: RedisServer,
                                       name: str) -> None:
    rw = client.read_write_lock(name)
    r1 = rw.read_lock(thread_id=1)
    r2 = rw.read_lock(thread_id=2)
    w3 = rw.write_lock(thread_id=3)
    assert r1.kind == "read" and w3.kind == "write"
    assert r1.acquire(wait=0, lease=60) and r2.acquire(wait=0, lease=60)
    flat = redis("HGETALL", name)
    assert dict(zip(flat[0::2], flat[1::2])) == {
        "mode": "read", client.owner(1): "1", client.owner(2): "1"}
    assert redis("EXISTS", "{%s}:%s:rwlock_timeout:1" % (name, client.owner(1))) == 1
    assert w3.acquire(wait=0) is False
    assert r1.locked() and not w3.locked()
    r1.release()
    r2.release()
    assert redis("EXISTS", name) == 0
    with w3:
        assert redis("HGET", name, client.owner(3) + ":write") == "1"
        assert r1.acquire(wait=0) is False
        with pytest.raises(hilock.NotOwnerError):
            rw.write_lock(thread_id=4).release()
    assert redis("EXISTS", name) == 0


def test_reader_woken_by_write_unlock(client: hilock.Client, redis: RedisServer,
                                      name: str) -> None:
    other = hilock.Client(redis.url)
    try:
        w = client.read_write_lock(name).write_lock()
        assert w.acquire(wait=0, lease=60)
        got = {}

        def reader() -> None:
            r = other.read_write_lock(name).read_lock()
            got["ok"] = r.acquire(wait=10, lease=60)
            got["at"] = time.monotonic()
            r.release()

        t = threading.Thread(target=reader)
        t.start()
        # the writer's client listens there too (a force unlock is heard)
        wait_for(lambda: redis("PUBSUB", "NUMSUB", "redisson_rwlock:{%s}" % name)[1] >= 2, 5,
                 "reader subscribed")
        time.sleep(0.05)
        t0 = time.monotonic()
        w.release()
        t.join(15)
        assert got["ok"] is True
        assert got["at"] - t0 < 2.0  # the lease is a minute: only the message wakes it
    finally:
        other.close()


def test_wrong_type(client: hilock.Client, redis: RedisServer, name: str) -> None:
    redis("SET", name, "x")
    with pytest.raises(hilock.WrongTypeError):
        client.read_write_lock(name).read_lock().acquire(wait=0)
    assert redis("GET", name) == "x"
    with pytest.raises(TypeError):
        client.read_write_lock(3)  # type: ignore[arg-type]


def test_fenced_tokens(client: hilock.Client, redis: RedisServer, name: str) -> None:
    other = hilock.Client(redis.url)
    try:
        a, b = client.fenced_lock(name), other.fenced_lock(name)
        assert isinstance(a, hilock.FencedLock) and a.kind == "fenced"
        assert a.token == 0
        last = 0
        for i in range(6):
            me, them = (a, b) if i % 2 == 0 else (b, a)
            tok = me.acquire_token(wait=2, lease=60)
            assert tok is not None and tok > last
            last = tok
            assert them.token == tok
            assert them.acquire_token(wait=0) is None
            me.release()
        assert redis("GET", "redisson_lock_token:{%s}" % name) == str(last)
        with a:  # a plain acquire takes a token too
            assert a.token > last
    finally:
        other.close()
