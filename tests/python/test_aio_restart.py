"""hilock.aio across a server killed (kill -9) and restarted, and with every
pooled connection busy: no call waits forever, and the pool gets its slots
back from connections that died at any point of their opening.

The server is a real redis-server behind tests/faults' proxy, as in the
safety suite (tests/safety): while the server is down the proxy accepts each
connection, fails to reach the server and closes it, so a connect succeeds
and the connection dies right after.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from typing import Iterator

import pytest

import hilock
import hilock.aio as aio
from conftest import RedisServer

sys.path.insert(0, os.path.join(os.environ.get("HILOCK_ROOT", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")), "tests", "faults"))
from faultproxy import FaultProxy  # noqa: E402


@pytest.fixture
def server() -> Iterator[RedisServer]:
    s = RedisServer(["--appendonly", "yes", "--appendfsync", "always"])
    yield s
    s.stop()


@pytest.fixture
def name() -> str:
    return "restart-" + uuid.uuid4().hex[:8]


async def busy_loop(stop: asyncio.Event) -> None:
    """An application loop busy 10 ms out of every step: a reset the proxy
    sends right after a connect is there before the connecting task runs
    again (on an idle loop it usually comes later, which is how the leak
    hid: it took a loaded machine, as in the safety suite)."""
    while not stop.is_set():
        time.sleep(0.01)
        await asyncio.sleep(0)


def test_pool_slots_come_back_after_kill_and_restart(server: RedisServer, name: str) -> None:
    """Calls made while the server is down (each connection accepted by the
    proxy, then reset) fail with ConnectionError; once it is back the next
    acquire is granted. Before the fix (aio.py's _open_conn handed out a
    connection that had closed before its on_close was set, so its pool
    slot was never given back) the first acquire of the outage used up the
    pool's 2 slots (its attempt, then the settle of that attempt) and
    waited in _Pool.get forever (here: still waiting after 10 s)."""
    proxy = FaultProxy(server.port)

    async def main() -> None:
        c = await aio.connect(proxy.url(), pool_size=2, command_timeout=1.0,
                              connect_timeout=1.0)
        stop = asyncio.Event()
        busy = asyncio.create_task(busy_loop(stop))
        try:
            lk = c.lock(name, thread_id=1)  # one owner, also inside wait_for's tasks
            assert await lk.acquire(wait=0)
            await lk.release()
            server.kill9()
            proxy.close_when_down()
            failed = 0
            for _ in range(8):
                try:
                    with pytest.raises(hilock.ConnectionError):
                        await asyncio.wait_for(lk.acquire(wait=0), 10)
                except asyncio.TimeoutError:
                    pytest.fail(f"{failed} calls failed while the server was down, then an "
                                "acquire(wait=0) still waited after 10 s (pool slots leaked)")
                failed += 1
            server.start()
            t0 = time.monotonic()
            try:
                got = await asyncio.wait_for(lk.acquire(wait=2), 10)
            except asyncio.TimeoutError:
                pytest.fail(f"{failed} calls failed while the server was down; after its "
                            "restart an acquire still waited after 10 s (pool slots leaked)")
            print(f"\n  {failed} calls failed while down; granted "
                  f"{time.monotonic() - t0:.2f} s after the restart")
            assert got
            await lk.release()
        finally:
            stop.set()
            await busy
            await c.close()
    try:
        asyncio.run(main())
    finally:
        proxy.close()


def test_calls_on_an_exhausted_pool_return(server: RedisServer, name: str) -> None:
    """The pool's one connection taken and never given back (as the places
    lost by the leak above were): a query and an acquire fail with
    ConnectionError once no connection came back for command_timeout +
    connect_timeout (1 + 1 s), as libcore's hl_pool_get. Before, both
    waited in _Pool.get forever (here: still waiting after 10 s)."""
    async def main() -> None:
        c = await aio.connect(server.url, pool_size=1, command_timeout=1.0,
                              connect_timeout=1.0)
        try:
            lk = c.lock(name)
            held = await c._pool.get()  # never given back (white box: a lost place)
            for what, call in (("locked()", lk.locked), ("acquire(wait=0.5)",
                                                       lambda: lk.acquire(wait=0.5))):
                t0 = time.monotonic()
                try:
                    with pytest.raises(hilock.ConnectionError):
                        await asyncio.wait_for(call(), 10)
                except asyncio.TimeoutError:
                    pytest.fail(f"{what} on an exhausted pool still waited after 10 s")
                took = time.monotonic() - t0
                print(f"\n  {what} on an exhausted pool: ConnectionError after {took:.2f} s")
                assert took < 6.0  # the bound (2 s) and a margin for a loaded machine
            c._pool.put(held)
            assert await lk.locked() is False  # the pool works on
        finally:
            await c.close()
    asyncio.run(main())


def test_calls_queued_on_a_moving_pool_are_all_served(server: RedisServer,
                                                      name: str) -> None:
    """One pooled connection, every reply 0.5 s late (the proxy), 8 queries
    at once: they queue for the connection and are answered in turn over
    4 s, longer than the pool's bound (1 + 1 s): a caller gives up only
    when no connection comes back for that long, not while the pool moves."""
    proxy = FaultProxy(server.port)

    async def main() -> None:
        c = await aio.connect(proxy.url(), pool_size=1, command_timeout=1.0,
                              connect_timeout=1.0)
        try:
            lk = c.lock(name)
            assert await lk.locked() is False
            proxy.latency(down=0.5)
            t0 = time.monotonic()
            res = await asyncio.gather(*(asyncio.wait_for(lk.locked(), 30) for _ in range(8)),
                                       return_exceptions=True)
            print(f"\n  8 queries on 1 connection, replies 0.5 s late: all returned after "
                  f"{time.monotonic() - t0:.1f} s: {res}")
            assert res == [False] * 8
        finally:
            proxy.latency()
            await c.close()
    try:
        asyncio.run(main())
    finally:
        proxy.close()


def test_a_free_slot_is_handed_on_past_a_cancelled_waiter(server: RedisServer,
                                                          name: str) -> None:
    """One pooled connection; A's query is on it, B and C wait for it. A's
    connection is reset: its slot goes to B, who is cancelled before it can
    use it (by A's task, as soon as A's call fails). C gets the slot and its
    query answered. Before, the cancelled B kept the free slot to itself: C
    waited until a connection was given back (for ever, had none been out;
    with the pool's bound only, 2 s, then ConnectionError)."""
    proxy = FaultProxy(server.port)

    async def main() -> None:
        c = await aio.connect(proxy.url(), pool_size=1, command_timeout=1.0,
                              connect_timeout=1.0)
        try:
            lk = c.lock(name)
            assert await lk.locked() is False  # the one connection is open
            proxy.latency(down=0.5)  # A's reply is held up: A keeps the connection
            b: "asyncio.Task[bool]"

            async def a() -> str:
                try:
                    await lk.locked()
                    return "answered"
                except hilock.ConnectionError:
                    b.cancel()  # B's slot came with this failure: B never runs first
                    return "reset"

            ta = asyncio.create_task(a())
            await asyncio.sleep(0.1)  # A's query is sent
            b = asyncio.create_task(lk.locked())
            tc = asyncio.create_task(lk.locked())
            await asyncio.sleep(0.1)  # B and C wait for the connection
            proxy.latency()
            proxy.reset()
            t0 = time.monotonic()
            assert await asyncio.wait_for(ta, 10) == "reset"
            with pytest.raises(asyncio.CancelledError):
                await b
            try:
                got = await asyncio.wait_for(tc, 10)
            except hilock.ConnectionError as e:
                pytest.fail(f"C failed after {time.monotonic() - t0:.2f} s: {e}")
            print(f"\n  C answered {time.monotonic() - t0:.2f} s after the reset")
            assert got is False
        finally:
            proxy.latency()
            await c.close()
    try:
        asyncio.run(main())
    finally:
        proxy.close()


def test_acquire_errors_name_the_server(server: RedisServer, name: str) -> None:
    """A hilock.aio acquire that fails on the way to its server says which
    server and what happened (issue 29: every error names the server), as
    the blocking package does: the server paused (no reply within the
    command timeout), a later attempt while that one is being settled, the
    server down, and a proxy in front of a dead server that accepts and
    closes. Before, each was just
    "connection error: acquire of lock '<name>'" (_run_acquire kept only
    the code of what _routed and the connections reported)."""
    proxy = FaultProxy(server.port)

    async def main() -> None:
        direct = await aio.connect(server.url, command_timeout=0.3, connect_timeout=0.3)
        other = await aio.connect(server.url, command_timeout=0.3, connect_timeout=0.3)
        via = await aio.connect(proxy.url(), command_timeout=0.3, connect_timeout=0.3)
        try:
            for c in (direct, other, via):
                lk = c.lock(name)
                assert await lk.acquire(wait=0)
                await lk.release()
            where = f"127.0.0.1:{server.port}"
            server.pause()
            try:
                with pytest.raises(hilock.ConnectionError) as e:
                    await asyncio.wait_for(direct.lock(name).acquire(wait=0), 10)
            finally:
                server.resume()
            print(f"\n  paused: {e.value}")
            assert f"no reply within 300 ms from {where}" in str(e.value)
            # direct is still settling that attempt: "not answered an earlier
            # attempt yet"; a client of its own finds the server gone
            server.kill9()
            with pytest.raises(hilock.ConnectionError) as e:
                await asyncio.wait_for(direct.lock(name).acquire(wait=0), 10)
            print(f"  settling: {e.value}")
            assert f"server {where} has not answered an earlier attempt yet" in str(e.value)
            with pytest.raises(hilock.ConnectionError) as e:
                await asyncio.wait_for(other.lock(name).acquire(wait=0), 10)
            print(f"  down: {e.value}")
            assert where in str(e.value)
            assert "cannot connect" in str(e.value) or "closed the connection" in str(e.value)
            proxy.close_when_down()
            with pytest.raises(hilock.ConnectionError) as e:
                await asyncio.wait_for(via.lock(name).acquire(wait=0), 10)
            print(f"  behind a proxy: {e.value}")
            assert f"127.0.0.1:{proxy.port}" in str(e.value)
        finally:
            await direct.close()
            await other.close()
            await via.close()
    try:
        asyncio.run(main())
    finally:
        proxy.close()


def test_acquire_error_reply_names_the_server_and_the_error() -> None:
    """An error reply the acquire cannot use (here NOREPLICAS: a server with
    min-replicas-to-write 1 and no replica refuses every write) is named
    with the server that gave it. Before: "protocol error: acquire of lock
    '<name>'" and nothing else (the safety suite's sentinel-min-replicas,
    aio: 61 such errors in one run)."""
    s = RedisServer(["--min-replicas-to-write", "1"])

    async def main() -> None:
        async with aio.Client(s.url, command_timeout=0.5, connect_timeout=0.5) as c:
            with pytest.raises(hilock.ProtocolError) as e:
                await asyncio.wait_for(c.lock("noreplicas").acquire(wait=0), 10)
            print(f"\n  {e.value}")
            assert f"127.0.0.1:{s.port} answered" in str(e.value)
            assert "NOREPLICAS" in str(e.value)
    try:
        asyncio.run(main())
    finally:
        s.stop()


def test_a_settling_connection_gives_its_pool_place_back(server: RedisServer,
                                                           name: str) -> None:
    """An attempt whose reply does not come in time is settled on its own
    connection, which may stay silent for long (here the proxy holds the
    request back and delivers it later on a connection of its own, so no
    reply ever comes on the first one). That connection leaves the pool at
    once, as in libcore (hl_pool_forget): with a pool of 1, a query made
    meanwhile gets a new connection. Before, the settle kept the only place
    and the query failed after command + connect timeout with 'no free
    connection in the pool (size 1)' (in the safety suite's
    sentinel-min-replicas, aio: 42 such errors in one run after the last
    heal)."""
    proxy = FaultProxy(server.port)

    async def main() -> None:
        c = await aio.connect(proxy.url(), pool_size=1, command_timeout=0.3,
                              connect_timeout=0.3)
        try:
            lk = c.lock(name, thread_id=1)
            assert await lk.acquire(wait=0)  # the script is loaded, the pool warm
            await lk.release()
            proxy.hold_request(b"EVALSHA", 3.0)
            with pytest.raises(hilock.ConnectionError):
                await asyncio.wait_for(lk.acquire(wait=0), 10)
            t0 = time.monotonic()
            try:
                held = await asyncio.wait_for(c.lock(name + ":other").locked(), 10)
            except hilock.ConnectionError as e:
                pytest.fail(f"a query while the attempt is settled: {e}")
            print(f"\n  query answered in {time.monotonic() - t0:.3f} s")
            assert held is False
        finally:
            await c.close()
    try:
        asyncio.run(main())
    finally:
        proxy.close()


@pytest.mark.parametrize("kind", ["lock", "multilock"])
def test_refused_acquires_with_replica_ack_give_their_connection_back(
        server: RedisServer, name: str, kind: str) -> None:
    """With replica_ack on (the default on a cluster and with sentinels; here
    asked for on one server), an attempt's connection is kept for the
    acknowledgement of a grant. A refused acquire (wait=0 against a holder;
    a multi-lock member's one try) must give it back to its pool. Before,
    _run_acquire dropped it when the result was not a grant: each refusal
    lost one place for the client's life, so with pool_size=2 the third
    call failed with 'no free connection in the pool (size 2)' (a cluster
    multi-lock's rival lost one place per member per try; the safety
    suite's sentinel-min-replicas/aio saw most acquires fail so after the
    heal)."""
    async def main() -> None:
        holder = await aio.connect(server.url)
        c = await aio.connect(server.url, pool_size=2, replica_ack=True,
                              command_timeout=0.5, connect_timeout=0.5)
        try:
            assert await holder.lock(name).acquire(wait=0, lease=30)
            if kind == "lock":
                obj = c.lock(name)
            else:
                obj = aio.MultiLock([c.lock(name + ":free"), c.lock(name)])
            for i in range(6):  # three times the pool's size
                try:
                    assert await obj.acquire(wait=0, lease=30) is False
                except hilock.ConnectionError as e:
                    pytest.fail(f"refused {kind} acquire {i}: {e}")
                # every connection the call took is back (idle) or closed
                opened, idle = c._pool.nopen, len(c._pool.idle)
                assert opened == idle, (f"after refused {kind} acquire {i}: {opened} "
                                        f"connections open, {idle} idle")
            assert await c.lock(name + ":free").locked() is False  # the pool works on
        finally:
            await c.close()
            await holder.close()
    asyncio.run(main())


def test_sentinel_failure_names_the_sentinel_and_what_happened() -> None:
    """A sentinel that names no master is told by what happened, in the
    engine's words (hl_msg_master_addr / hl_msg_no_reply, as the blocking
    client says it): a silent sentinel (a listener of the test's own that
    never accepts) is "no reply within 300 ms from sentinel H:P", a server
    that answers get-master-addr-by-name with an error (a plain
    redis-server) is "sentinel H:P: error reply: ERR ...". Before: "no
    sentinel named master 'hm'" and nothing else for the silent one, "...
    (protocol error: the sentinel names no such master)" for the error
    reply. The sentinel password never shows; with it, the handshake's
    failure names the sentinel too (before: "no reply within 300 ms from
    127.0.0.1:P", no word of a sentinel)."""
    import socket
    lsn = socket.socket()
    lsn.bind(("127.0.0.1", 0))
    lsn.listen(8)  # never accepted: the kernel completes the connects, no reply comes
    silent = lsn.getsockname()[1]
    plain = RedisServer([])
    pw = "s3cret-sentinel-pw"

    async def fails(url: str, **kw: object) -> str:
        with pytest.raises(hilock.ConnectionError) as e:
            c = await asyncio.wait_for(aio.connect(url, connect_timeout=0.3,
                                                   command_timeout=0.3, **kw), 10)
            try:
                await asyncio.wait_for(c.lock("x").acquire(wait=0), 10)
            finally:
                await c.close()
        print(f"\n  {url}: {e.value}")
        assert pw not in str(e.value) and pw not in repr(e.value)
        return str(e.value)

    async def main() -> None:
        msg = await fails(f"redis+sentinel://127.0.0.1:{silent}/hm")
        assert f"no reply within 300 ms from sentinel 127.0.0.1:{silent}" in msg
        msg = await fails(f"redis+sentinel://127.0.0.1:{silent}/hm", sentinel_password=pw)
        assert f"no reply within 300 ms from sentinel 127.0.0.1:{silent}" in msg
        msg = await fails(f"redis+sentinel://127.0.0.1:{plain.port}/hm")
        assert f"sentinel 127.0.0.1:{plain.port}: error reply: ERR unknown" in msg
        assert "knows no master" not in msg
    try:
        asyncio.run(main())
    finally:
        lsn.close()
        plain.stop()
