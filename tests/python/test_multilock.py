"""MultiLock (all or nothing) and RedLock (majority) over independent servers."""

from __future__ import annotations

import logging
import threading
from typing import Iterator, List

import pytest

import hilock
from conftest import RedisServer, wait_for


@pytest.fixture(scope="module")
def servers() -> Iterator[List[RedisServer]]:
    ss = [RedisServer() for _ in range(3)]
    yield ss
    for s in ss:
        s.stop()


@pytest.fixture
def clients(servers: List[RedisServer]) -> Iterator[List[hilock.Client]]:
    cs = [hilock.Client(s.url, command_timeout=0.5, connect_timeout=0.5) for s in servers]
    yield cs
    for c in cs:
        c.close()


def test_multilock_all_or_nothing(clients: List[hilock.Client], servers: List[RedisServer],
                                  name: str) -> None:
    locks = [c.lock(name) for c in clients]
    m = hilock.MultiLock(locks)
    assert m.locks == locks
    assert m.acquire(wait=1)
    assert m.owned()
    assert all(l.owned() for l in locks)
    assert m.validity is None  # watchdog lease
    m.release()
    assert not any(l.locked() for l in locks)
    assert not m.owned()
    # one member held by someone else: nothing is taken
    with hilock.Client(servers[1].url) as other:
        assert other.lock(name).acquire()
        assert m.acquire(wait=0.2) is False
        assert not locks[0].locked() and not locks[2].locked()
        other.lock(name).release()
    with pytest.raises(hilock.NotOwnerError):
        m.release()


def test_multilock_same_server_several_names(clients: List[hilock.Client], name: str) -> None:
    c = clients[0]
    locks = [c.lock(f"{name}:{i}") for i in range(3)] + [c.fair_lock(f"{name}:f")]
    with hilock.MultiLock(locks, wait=2) as m:
        assert m.owned() and all(l.owned() for l in locks)
    assert not any(l.locked() for l in locks)


def test_multilock_contention_threads(clients: List[hilock.Client], servers: List[RedisServer],
                                      name: str) -> None:
    key = name + ":n"
    total = [0]
    errors: List[BaseException] = []

    def worker() -> None:
        try:
            m = hilock.MultiLock([c.lock(name) for c in clients])
            r = servers[0].cli()
            for _ in range(15):
                with m:
                    v = int(r("GET", key) or 0)
                    r("SET", key, v + 1)
                    total[0] += 1
            r.close()
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors
    assert int(servers[0]("GET", key)) == 60 == total[0]


def test_redlock_majority(clients: List[hilock.Client], servers: List[RedisServer],
                          name: str) -> None:
    locks = [c.lock(name) for c in clients]
    rl = hilock.RedLock(locks)
    assert rl.acquire(wait=1, lease=5)
    v = rl.validity
    assert v is not None and 4.0 < v <= 5.0
    assert sum(l.locked() for l in locks) == 3
    rl.release()
    assert not any(l.locked() for l in locks)
    # one node taken by someone else: a majority (2 of 3) is still enough
    with hilock.Client(servers[2].url) as other:
        assert other.lock(name).acquire()
        assert rl.acquire(wait=0.5, lease=5)
        assert locks[0].owned() and locks[1].owned() and not locks[2].owned()
        # the third member was not ours: the C library may report that
        # (NotOwnerError) or not, but releases the members it holds either way
        try:
            rl.release()
        except hilock.NotOwnerError:
            pass
        assert not locks[0].locked() and not locks[1].locked()
        # two nodes taken: no majority, and nothing is left behind
        with hilock.Client(servers[1].url) as other2:
            assert other2.lock(name).acquire()
            assert rl.acquire(wait=0.3, lease=5) is False
            assert not locks[0].locked()
            other2.lock(name).release()
        other.lock(name).release()


def test_redlock_with_node_down(servers: List[RedisServer], name: str) -> None:
    extra = RedisServer()
    cs = [hilock.Client(s.url, command_timeout=0.3, connect_timeout=0.3)
          for s in (servers[0], servers[1], extra)]
    try:
        rl = hilock.RedLock([c.lock(name) for c in cs], member_timeout=0.1)
        extra.kill9()
        with rl:  # 2 of 3 reachable: majority
            assert rl.owned()
    finally:
        for c in cs:
            c.close()
        extra.stop()


def test_multilock_arguments(clients: List[hilock.Client], name: str) -> None:
    with pytest.raises(hilock.InvalidArgument):
        hilock.MultiLock([])
    with pytest.raises(TypeError):
        hilock.MultiLock(["x"])  # type: ignore[list-item]
    m = hilock.MultiLock([clients[0].lock(name)])
    with pytest.raises(hilock.InvalidArgument):
        m.acquire(lease=-1)


def test_multilock_timeout_in_with(clients: List[hilock.Client], servers: List[RedisServer],
                                   name: str) -> None:
    with hilock.Client(servers[0].url) as other:
        assert other.lock(name).acquire()
        with pytest.raises(hilock.LockTimeout):
            with hilock.MultiLock([c.lock(name) for c in clients], wait=0.1):
                pytest.fail("entered without the locks")
        other.lock(name).release()


def test_multilock_lost(servers: List[RedisServer], name: str) -> None:
    cs = [hilock.Client(s.url, watchdog_lease=0.3) for s in servers[:2]]
    try:
        m = hilock.MultiLock([c.lock(name) for c in cs])
        fired = threading.Event()
        m.on_lost = lambda ml, tid: fired.set()
        assert m.acquire()
        servers[1]("DEL", name)
        wait_for(lambda: m.lost, 5, "multilock.lost")
        assert fired.wait(5)
    finally:
        for c in cs:
            c.close()


def test_redlock_names_members_that_lose_holds_on_restart(
        servers: List[RedisServer], name: str, caplog: pytest.LogCaptureFixture) -> None:
    """issue 29 item 3: these servers run without AOF, so a restart loses
    the holds they granted; RedLock says so at construction (rl.warning and
    the logger hilock), naming each member, unless the member URL says
    delayed_restart=1."""
    servers[1]("CONFIG", "SET", "appendonly", "yes")
    servers[1]("CONFIG", "SET", "appendfsync", "always")
    caplog.set_level(logging.WARNING, logger="hilock")
    cs = [hilock.Client(s.url) for s in servers]
    try:
        rl = hilock.RedLock([c.lock(name) for c in cs])
        w = rl.warning
        assert w is not None
        lines = w.splitlines()
        assert len(lines) == 2
        assert lines[0].startswith(f"redlock: member 0 ('{name}' on 127.0.0.1:{servers[0].port})")
        assert lines[1].startswith(f"redlock: member 2 ('{name}' on 127.0.0.1:{servers[2].port})")
        assert all("appendonly no" in x and "delayed_restart=1" in x for x in lines)
        wait_for(lambda: sum("appendonly no" in r.getMessage() for r in caplog.records
                             if r.name == "hilock") == 2, timeout=5)
        assert rl.acquire(wait=1, lease=5)
        rl.release()
    finally:
        for c in cs:
            c.close()
        servers[1]("CONFIG", "SET", "appendonly", "no")
    ds = [hilock.Client(s.url + "?delayed_restart=1") for s in servers]
    try:
        assert hilock.RedLock([c.lock(name) for c in ds]).warning is None
    finally:
        for c in ds:
            c.close()
