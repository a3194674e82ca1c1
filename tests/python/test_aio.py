"""hilock.aio: the asyncio driver on the engine, against real redis-servers.

Each test runs its own event loop (asyncio.run; uvloop's in test_uvloop).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from typing import Any, Awaitable, Iterator, List, TypeVar

import pytest

import hilock
import hilock.aio as aio
from conftest import RedisServer

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


def timeout_ctx(seconds: float) -> Any:
    """asyncio.timeout (3.11+); on older Pythons a cancel scheduled by hand."""
    if hasattr(asyncio, "timeout"):
        return asyncio.timeout(seconds)
    pytest.skip("asyncio.timeout needs Python 3.11")


@pytest.fixture(scope="module")
def servers() -> Iterator[List[RedisServer]]:
    ss = [RedisServer() for _ in range(3)]
    yield ss
    for s in ss:
        s.stop()


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def leftovers(redis: RedisServer, name: str) -> List[Any]:
    """What a lock of that name leaves in Redis: key, fair queue and
    timeouts, subscribers on its channels."""
    r = redis.cli()
    try:
        return [r("EXISTS", name), r("LLEN", f"redisson_lock_queue:{{{name}}}"),
                r("ZCARD", f"redisson_lock_timeout:{{{name}}}"),
                r("PUBSUB", "NUMPAT"),
                len(r("PUBSUB", "CHANNELS", f"redisson_lock__channel:{{{name}}}*"))]
    finally:
        r.close()


def test_connect_acquire_release_queries(redis: RedisServer, name: str) -> None:
    async def main() -> None:
        c = await aio.connect(redis.url)
        try:
            lk = c.lock(name)
            assert lk.kind == "reentrant" and lk.name == name and not lk.fair
            assert await lk.acquire(wait=0)
            assert await lk.acquire(wait=0)  # re-entry
            assert await lk.hold_count() == 2
            assert await lk.owned() and await lk.locked()
            ttl = await lk.ttl()
            assert ttl is not None and 25 < ttl <= 30
            # the owner is this task's: client id + task id
            field = redis("HKEYS", name)
            assert field == [c.owner()] and c.owner() == f"{c.id}:{aio.task_id()}"
            await lk.release()
            assert await lk.hold_count() == 1
            await lk.release()
            assert not await lk.locked()
            with pytest.raises(hilock.NotOwnerError):
                await lk.release()
            # a fixed lease
            assert await lk.acquire(0, lease=2)
            ttl = await lk.ttl()
            assert ttl is not None and 1 < ttl <= 2
            await lk.extend(3)
            ttl = await lk.ttl()
            assert ttl is not None and 4 < ttl <= 5
            await lk.release()
            assert await lk.ttl() is None
        finally:
            await c.close()
        with pytest.raises(hilock.ClosedError):
            await c.lock(name).acquire(0)
    run(main())


def test_owner_is_per_task(redis: RedisServer, name: str) -> None:
    async def main() -> None:
        async with aio.Client(redis.url) as c:
            lk = c.lock(name)
            assert await lk.acquire(0)

            async def other() -> bool:
                return await c.lock(name).acquire(0)
            assert not await asyncio.create_task(other())  # another task: another owner
            assert await lk.acquire(0)  # same task: re-entry
            # an explicit thread id is an owner of its own
            assert not await c.lock(name, thread_id=7).acquire(0)
            await lk.release()
            await lk.release()
            assert await c.lock(name, thread_id=7).acquire(0)
            await c.lock(name, thread_id=7).release()
    run(main())


def test_wake_on_unlock_message_not_polling(redis: RedisServer, name: str) -> None:
    """A holder with a 30 s lease releases: the waiter has the lock within
    tens of ms (an unlock message, not a retry after the lease)."""
    async def main() -> None:
        async with aio.Client(redis.url) as c:
            held = asyncio.Event()
            go = asyncio.Event()
            released_at: List[float] = []

            async def holder() -> None:
                lk = c.lock(name)
                assert await lk.acquire(0, lease=30)
                held.set()
                await go.wait()
                released_at.append(time.monotonic())
                await lk.release()

            async def waiter() -> float:
                lk = c.lock(name)
                assert await lk.acquire(wait=20, lease=10)
                t = time.monotonic()
                await lk.release()
                return t

            h = asyncio.create_task(holder())
            await held.wait()
            w = asyncio.create_task(waiter())
            await asyncio.sleep(0.3)  # the waiter is asleep on the channel by now
            assert not w.done()
            go.set()
            got_at = await w
            await h
            # well within 1 s (typically well under 1 ms): without the message the
            # waiter would retry only when the 30 s lease ran out
            assert got_at - released_at[0] < 1.0, got_at - released_at[0]
    run(main())


def test_fair_order(redis: RedisServer, name: str) -> None:
    async def main() -> None:
        async with aio.Client(redis.url) as c:
            first = c.fair_lock(name)
            assert first.fair and first.kind == "fair"
            assert await first.acquire(0)
            order: List[int] = []

            async def waiter(i: int) -> None:
                lk = c.fair_lock(name)
                assert await lk.acquire(wait=10, lease=5)
                order.append(i)
                await asyncio.sleep(0.01)
                await lk.release()

            tasks = []
            for i in range(5):
                tasks.append(asyncio.create_task(waiter(i)))
                # each one queued before the next starts
                for _ in range(200):
                    if redis("LLEN", f"redisson_lock_queue:{{{name}}}") == i + 1:
                        break
                    await asyncio.sleep(0.01)
            await first.release()
            await asyncio.gather(*tasks)
            assert order == [0, 1, 2, 3, 4]
        assert leftovers(redis, name)[:3] == [0, 0, 0]
    run(main())


@pytest.mark.parametrize("kind", ["reentrant", "fair"])
def test_cancelled_waits_leave_nothing(redis: RedisServer, name: str, kind: str) -> None:
    """1,000 waits cancelled (task.cancel): no hold, no queue entry, no
    subscription left, and the lock still hands off afterwards."""
    async def main() -> None:
        async with aio.Client(redis.url) as c:
            mk = c.fair_lock if kind == "fair" else c.lock
            holder = mk(name)
            assert await holder.acquire(0, lease=30)
            n = 1000
            tasks = [asyncio.create_task(mk(name).acquire(wait=30, lease=5)) for _ in range(n)]
            deadline = time.monotonic() + 30
            if kind == "fair":
                while redis("LLEN", f"redisson_lock_queue:{{{name}}}") < n:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
            else:  # all asleep on the one shared subscription
                while sum(len(ch.members) for ch in c._pubsub.channels.values()) < n:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                assert redis("PUBSUB", "NUMSUB", f"redisson_lock__channel:{{{name}}}")[1] == 1
            for t in tasks:
                t.cancel()
            res = await asyncio.gather(*tasks, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for r in res)
            assert redis("HLEN", name) == 1  # the holder only
            assert redis("LLEN", f"redisson_lock_queue:{{{name}}}") == 0
            assert redis("ZCARD", f"redisson_lock_timeout:{{{name}}}") == 0
            await asyncio.sleep(0.1)
            # only the holder listens now (on its lock's channel, hl_hold_channel)
            hold_ch = f"redisson_lock__channel:{{{name}}}"
            assert list(c._pubsub.channels) == [hold_ch]
            assert not c._pubsub.channels[hold_ch].members
            assert redis("PUBSUB", "CHANNELS", f"redisson_lock__channel:{{{name}}}*") == [hold_ch]
            # and a new waiter still gets it on the holder's release
            w = asyncio.create_task(mk(name).acquire(wait=10, lease=5))
            await asyncio.sleep(0.2)
            t0 = time.monotonic()
            await holder.release()
            assert await w
            assert time.monotonic() - t0 < 1
    run(main())


def test_cancel_while_subscribing_leaves_no_subscription(redis: RedisServer, name: str) -> None:
    """A waiting acquire cancelled after it sent its subscription and before
    the server confirmed it: the task's waiter leaves the channel, so the
    client unsubscribes (before: the waiter stayed a member of the channel
    and the subscription was kept for the client's life)."""
    async def main() -> None:
        # the holders on a client of their own (a holder listens on its
        # lock's channel: its client's subscription would be shared)
        async with aio.Client(redis.url) as c, aio.Client(redis.url) as hc:
            other = f"{name}:keep"  # keeps the pub/sub connection open
            assert await c.lock(other, thread_id=1 << 40).acquire(0, lease=30)
            keeper = asyncio.create_task(c.lock(other).acquire(wait=30))
            while not c._pubsub.channels:
                await asyncio.sleep(0.01)
            hit = 0
            for i in range(20):
                lname = f"{name}:{i}"
                ch = f"redisson_lock__channel:{{{lname}}}"
                assert await hc.lock(lname, thread_id=1 << 40).acquire(0, lease=30)
                t = asyncio.create_task(c.lock(lname).acquire(wait=30))
                while ch not in c._pubsub.channels and not t.done():
                    await asyncio.sleep(0)
                if not c._pubsub.channels[ch].ready.done():
                    hit += 1  # subscribing: its confirmation not read yet
                t.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await t
                assert ch not in c._pubsub.channels, i
                await hc.lock(lname, thread_id=1 << 40).release()
            assert hit > 0
            await asyncio.sleep(0.1)
            assert redis("PUBSUB", "NUMSUB", f"redisson_lock__channel:{{{name}:0}}")[1] == 0
            keeper.cancel()
            with pytest.raises(asyncio.CancelledError):
                await keeper
    run(main())


def test_asyncio_timeout_cancels_cleanly(redis: RedisServer, name: str) -> None:
    async def main() -> None:
        async with aio.Client(redis.url) as c:
            for mk in (c.lock, c.fair_lock):
                lname = f"{name}:{mk.__name__}"
                holder = mk(lname, thread_id=1)  # another owner than this task
                assert await holder.acquire(0, lease=30)
                t0 = time.monotonic()
                with pytest.raises(TimeoutError):
                    async with timeout_ctx(0.3):
                        await mk(lname).acquire()  # forever
                assert time.monotonic() - t0 < 1.5
                assert redis("HLEN", lname) == 1
                assert redis("LLEN", f"redisson_lock_queue:{{{lname}}}") == 0
                assert redis("ZCARD", f"redisson_lock_timeout:{{{lname}}}") == 0
                # wait_for too
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(mk(lname).acquire(), 0.2)
                assert redis("LLEN", f"redisson_lock_queue:{{{lname}}}") == 0
                await holder.release()
    run(main())


def test_cancel_racing_a_grant_gives_it_back(redis: RedisServer, name: str) -> None:
    """A cancel that lands while the granting attempt is in flight: the
    grant is released, the task sees CancelledError, nothing is held."""
    async def main() -> None:
        async with aio.Client(redis.url) as c:
            for i in range(50):
                t = asyncio.create_task(c.lock(name).acquire(wait=5))
                # cancel after 0..n loop iterations: some before, some while the
                # attempt is on the wire, some after the grant
                for _ in range(i % 5):
                    await asyncio.sleep(0)
                t.cancel()
                try:
                    got = await t
                except asyncio.CancelledError:
                    got = False
                if got:  # finished before the cancel reached it: it holds
                    assert redis("HLEN", name) == 1
                    await c.lock(name, thread_id=aio._task_ids[t]).release()
                assert redis("EXISTS", name) == 0, i
    run(main())


def test_cancel_while_subscribing_leaves_no_listener(redis: RedisServer, name: str) -> None:
    """Waiting acquires (a lock and a multi-lock) cancelled at every point
    around their subscription, the SUBSCRIBE's confirmation included:
    afterwards no waiter is left on the channel (a stale member would take
    a later waiter's wake-up) and the client has unsubscribed."""
    async def main() -> None:
        # the holder on a client of its own: it listens on the channel too
        async with aio.Client(redis.url) as c, aio.Client(redis.url) as hc:
            assert await hc.lock(name, thread_id=1).acquire(wait=0, lease=60)
            for i in range(60):
                acq = (c.lock(name).acquire(wait=10) if i % 2 else
                       aio.MultiLock([c.lock(name)]).acquire(wait=10))
                t = asyncio.create_task(acq)
                await asyncio.sleep(0.0005 * (i % 7))
                t.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await t
            assert sum(len(ch.members) for ch in c._pubsub.channels.values()) == 0
            assert not c._pubsub.channels
            await asyncio.sleep(0.05)  # the UNSUBSCRIBE reached the server
            # the holder's client only
            assert redis("PUBSUB", "NUMSUB", f"redisson_lock__channel:{{{name}}}")[1] == 1
            await hc.lock(name, thread_id=1).release()
    run(main())


def test_cancel_as_connection_is_made_is_not_lost() -> None:
    """A caller cancelled in the loop iteration its connection was made
    (the task already due to resume) gets CancelledError, and the
    connection is closed. asyncio.wait_for before 3.12 returned the result
    instead: an acquire cancelled while its pub/sub connection opened
    waited its whole wait (test_cancel_while_subscribing_leaves_no_listener,
    about 1 run in 25)."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate = loop.create_future()
        proto = aio._Conn(loop)

        async def made() -> None:
            await gate

        t = asyncio.create_task(aio._connect_within(loop, made(), 5.0, proto))
        while t._fut_waiter is None:  # type: ignore[attr-defined]
            await asyncio.sleep(0)
        gate.set_result(None)
        while not t._fut_waiter.done():  # type: ignore[attr-defined]
            await asyncio.sleep(0)  # the connection is made: t is due to resume
        assert t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        await asyncio.sleep(0)
        assert proto.closed
    run(main())


def test_cancelled_release_keeps_hold_and_watchdog_in_step(redis: RedisServer, name: str) -> None:
    """A release cancelled while its command is on the wire waits for the
    answer: afterwards the lock is either released and unwatched, or still
    held and still renewed -- never released but renewed (a false 'lost')."""
    async def main() -> None:
        async with aio.Client(redis.url) as c:
            for i in range(30):
                lk = c.lock(name, thread_id=42)  # the release runs in a task of its own
                assert await lk.acquire(0)  # watchdog hold
                t = asyncio.create_task(lk.release())
                for _ in range(i % 4):
                    await asyncio.sleep(0)
                t.cancel()
                try:
                    await t
                except asyncio.CancelledError:
                    pass
                held = redis("EXISTS", name) == 1
                assert held == bool(c._holds.count()), (i, held, c._holds.count())
                if held:
                    await lk.release()
                assert redis("EXISTS", name) == 0 and not c._holds.count()
    run(main())


def test_attempt_lost_with_its_connection_is_settled(own_redis: RedisServer, name: str) -> None:
    """The connection dies after the attempt was sent and before its reply
    (server stalled, connection closed under it): the acquire fails with
    ConnectionError, and the grant the server makes late is given back
    through the acquire latch instead of staying for its 30 s lease."""
    async def main() -> None:
        async with aio.Client(own_redis.url, command_timeout=5.0) as c:
            lk = c.lock(name)
            assert await lk.acquire(0)  # scripts loaded, a pooled connection
            await lk.release()
            t = await _cut_while_stalled(own_redis, lk.acquire(0))
            with pytest.raises(hilock.ConnectionError):
                await t
            for _ in range(100):
                if own_redis("EXISTS", name) == 0:
                    break
                await asyncio.sleep(0.05)
            assert own_redis("EXISTS", name) == 0, own_redis("HGETALL", name)
    run(main())


def test_releases_share_the_owner_unlock_latch(own_redis: RedisServer, name: str) -> None:
    """Releases use the owner's unlock latch (the C client's request ids):
    40 acquire+release pairs by two owners leave two latch keys, not one
    per release; a release whose reply is lost (its connection closed under
    it) moves the epoch on (for the acquire latch; the unlock latch is one
    per owner whatever the epoch, and its seq order refuses late copies)."""
    async def main() -> None:
        async with aio.Client(own_redis.url, command_timeout=5.0) as c:
            for tid in (1, 2):
                for _ in range(20):
                    lk = c.lock(name, thread_id=tid)
                    assert await lk.acquire(0)
                    await lk.release()
            keys = own_redis("KEYS", f"redisson_unlock_latch:{{{name}}}:*")
            assert len(keys) == 2, keys
            lk = c.lock(name, thread_id=3)
            assert await lk.acquire(0)
            epoch = c._latch_epoch
            t = await _cut_while_stalled(own_redis, lk.release())
            try:
                await t  # the engine's one resend on a new connection may answer
            except hilock.ConnectionError:
                pass
            assert c._latch_epoch > epoch
    run(main())


async def _cut_while_stalled(server: RedisServer, coro: Any) -> "asyncio.Task[Any]":
    """Run coro as a task while server is stalled; once its command is
    sent, close the one connection carrying it (the reply is lost), then
    let the server go on. Returns the task."""
    for _ in range(200):  # nothing else on the wire first (the pub/sub connection
        if not _busy_conns():  # a holder opened while listening: its handshake)
            break
        await asyncio.sleep(0.01)
    server.pause()
    try:
        t = asyncio.create_task(coro)
        await asyncio.sleep(0.2)  # sent; the server does not answer
        busy = _busy_conns()
        # the command's connection; a holder's check of its hold (a lock
        # message that came late: its own earlier release's) may be out too
        assert 1 <= len(busy) <= 2, busy
        for b in busy:
            b.close()
        await asyncio.sleep(0.1)
    finally:
        server.resume()
    return t


def test_one_settling_attempt_per_server(own_redis: RedisServer, name: str) -> None:
    """The engine's rule (settle_gate), as the blocking C client: while a
    server settles an attempt whose reply timed out (it is stalled), new
    attempts to it wait up to the command timeout for that to end and then
    fail without being sent, instead of parking one more connection each
    there. Once the server answers, the late grant is given back and
    acquires work again."""
    async def main() -> None:
        async with aio.Client(own_redis.url, command_timeout=0.3) as c:
            lk = c.lock(name)
            assert await lk.acquire(0)  # scripts loaded, a pooled connection
            await lk.release()
            own_redis.pause()
            try:
                with pytest.raises(hilock.ConnectionError):
                    await lk.acquire(0)  # no reply: settled in the background
                assert len(_busy_conns()) == 1
                rs = await asyncio.gather(*(c.lock(f"{name}:{i}").acquire(0) for i in range(5)),
                                          return_exceptions=True)
                assert all(isinstance(r, hilock.ConnectionError) for r in rs), rs
                assert len(_busy_conns()) == 1  # before: 6, one per attempt sent
            finally:
                own_redis.resume()
            for _ in range(100):  # the late grant is given back
                if own_redis("EXISTS", name) == 0 and not _busy_conns():
                    break
                await asyncio.sleep(0.05)
            assert own_redis("EXISTS", name) == 0
            assert await lk.acquire(0)
            await lk.release()
            assert [own_redis("EXISTS", f"{name}:{i}") for i in range(5)] == [0] * 5
    run(main())


def _busy_conns() -> List[Any]:
    """The driver's command connections with a command on the wire."""
    import gc
    return [x for x in gc.get_objects() if isinstance(x, aio._Conn) and not x.closed
            and x.pending and x.on_push is None]


def test_on_lost_after_force_unlock(redis: RedisServer, name: str) -> None:
    async def main() -> None:
        async with aio.Client(redis.url, watchdog_lease=0.6) as c:
            lk = c.lock(name)
            seen: List[Any] = []
            done = asyncio.Event()

            def lost(lock: Any, tid: int) -> None:
                seen.append((lock, tid))
                done.set()
            lk.on_lost = lost
            assert await lk.acquire()
            await asyncio.sleep(0.5)
            ttl = await lk.ttl()
            assert ttl is not None and ttl > 0.3  # renewed by the watchdog task
            assert not lk.lost
            assert await c.lock(name).force_unlock()
            await asyncio.wait_for(done.wait(), 3)
            assert seen == [(lk, aio.task_id())]
            assert lk.lost
            with pytest.raises(hilock.NotOwnerError):
                await lk.release()
            with pytest.raises(hilock.LockLostError):
                async with lk:  # the block ran, but the lock was gone at its end
                    assert await c.lock(name).force_unlock()
            assert await lk.acquire(0)  # a new hold resets it
            assert not lk.lost
            await lk.release()
    run(main())


def test_watchdog_keeps_alive_and_stops(redis: RedisServer, name: str) -> None:
    async def main() -> None:
        n0 = os_threads()
        async with aio.Client(redis.url, watchdog_lease=0.6) as c:
            lk = c.lock(name)
            assert await lk.acquire()
            await asyncio.sleep(1.5)  # more than two leases
            assert await lk.owned()
            assert os_threads() == n0  # no thread of ours
            await lk.release()
            assert c._holds.count() == 0
    run(main())


def test_fenced_and_read_write(redis: RedisServer, name: str) -> None:
    async def main() -> None:
        async with aio.Client(redis.url) as c:
            f = c.fenced_lock(name + ":f")
            t1 = await f.acquire_token(0)
            assert t1 is not None and t1 >= 1
            await f.release()
            t2 = await f.acquire_token(0)
            assert t2 is not None and t2 > t1
            assert await f.token() == t2
            await f.release()
            rw = c.read_write_lock(name + ":rw")
            r1 = rw.read_lock()
            assert await r1.acquire(0)
            assert await c.read_write_lock(name + ":rw").read_lock(thread_id=99).acquire(0)
            assert not await rw.write_lock(thread_id=98).acquire(0)
            await r1.release()
            await rw.read_lock(thread_id=99).release()
            w = rw.write_lock()
            assert await w.acquire(0)
            assert not await rw.read_lock(thread_id=99).acquire(0)
            await w.release()
    run(main())


def test_bad_input(redis: RedisServer) -> None:
    async def main() -> None:
        cl = aio.Client("redis+cluster://127.0.0.1:1")
        for bad in ("x{y", "{}", "{}x{y}"):  # companion keys in another slot
            with pytest.raises(hilock.InvalidArgument, match="hash tag"):
                cl.lock(bad)
        with pytest.raises(hilock.ConnectionError):
            await cl.open()  # no node to ask for the slot map
        with pytest.raises(hilock.InvalidArgument):
            aio.Client("nope://x")
        with pytest.raises(hilock.ConnectionError):
            await aio.connect("redis://127.0.0.1:1", connect_timeout=0.5)
        async with aio.Client(redis.url) as c:
            with pytest.raises(hilock.InvalidArgument):
                c.lock("")
            with pytest.raises(hilock.InvalidArgument):
                c.lock("a\0b")
            with pytest.raises(hilock.InvalidArgument):
                await c.lock("x").acquire(wait=-1)
            with pytest.raises(TypeError):
                await c.lock("x").acquire(wait="1")  # type: ignore[arg-type]
            redis("SET", "aio:str", "x")
            with pytest.raises(hilock.WrongTypeError):
                await c.lock("aio:str").acquire(0)
    run(main())


def test_reader_feed_from_and_command_timeout(own_redis: RedisServer, name: str) -> None:
    """The connections read into their own buffer (Reader.feed_from) and
    time out a reply with one timer per connection: a stalled server gives
    ConnectionError after command_timeout, and the client works again after."""
    from hilock import _engine as E
    rd = E.Reader()
    buf = bytearray(b"+OK\r\n:12\r\n" + bytes(20))
    rd.feed_from(buf, 8)  # "+OK\r\n:12"
    assert rd.get() is not None and rd.get() is None
    buf[0:2] = b"\r\n"
    rd.feed_from(buf, 2)
    assert E.decode_int(rd.get()) == 12
    with pytest.raises(ValueError):
        rd.feed_from(buf, len(buf) + 1)
    with pytest.raises(ValueError):
        rd.feed_from(buf, -1)
    with pytest.raises(TypeError):
        rd.feed_from(b"+OK\r\n", 5)

    async def main() -> None:
        async with aio.Client(own_redis.url, command_timeout=0.3) as c:
            lk = c.lock(name)
            assert await lk.acquire(0, lease=30)
            await asyncio.sleep(0.5)  # the connection's timer fired idle
            own_redis.pause()
            try:
                t0 = time.monotonic()
                with pytest.raises(hilock.ConnectionError):
                    await lk.locked()
                took = time.monotonic() - t0
            finally:
                own_redis.resume()
            assert 0.25 <= took < 3.0, took
            assert await lk.locked()
            await lk.release()
            assert not await lk.locked()
    run(main())


def test_auth_and_db() -> None:
    s = RedisServer(password="s3cret")
    try:
        async def main() -> None:
            with pytest.raises(hilock.AuthenticationError):
                await aio.connect(f"redis://:wrong@127.0.0.1:{s.port}/0")
            async with aio.Client(f"redis://:s3cret@127.0.0.1:{s.port}/3") as c:
                assert await c.lock("db3").acquire(0)
                assert s("SELECT", "3") == "OK"
        run(main())
    finally:
        s.stop()


def test_unix_socket(name: str) -> None:
    import tempfile
    d = tempfile.mkdtemp(prefix="hilock-aio-unix-")
    path = os.path.join(d, "redis.sock")
    s = RedisServer(extra=["--unixsocket", path, "--unixsocketperm", "700"])
    try:
        async def main() -> None:
            async with aio.Client(f"unix://{path}?db=2") as c:
                lk = c.lock(name)
                assert await lk.acquire(0)
                r = s.cli()
                try:  # in database 2, over the socket
                    assert r("EXISTS", name) == 0 and r("SELECT", "2") == "OK"
                    assert r("EXISTS", name) == 1
                finally:
                    r.close()
                w = asyncio.create_task(c.lock(name).acquire(5))
                await asyncio.sleep(0.1)
                await lk.release()
                assert await w
        run(main())
    finally:
        s.stop()
        os.rmdir(d) if not os.listdir(d) else None


def _errorstat(server: RedisServer, err: str) -> int:
    """How many error replies of that kind the server sent (INFO errorstats)."""
    for line in server("INFO", "errorstats").splitlines():
        if line.startswith(f"errorstat_{err}:count="):
            return int(line.split("=", 1)[1].split(",", 1)[0])
    return 0


def test_single_server_loading_is_retried(name: str) -> None:
    """A single server that is loading its data answers every command with
    a LOADING error for a while: an acquire, a release and a query sent
    then are sent again after the engine router's pause (as the C clients
    do) instead of failing. The load: DEBUG RELOAD of 40 keys at 10 ms each
    (key-load-delay), the server answering between keys."""
    s = RedisServer(["--enable-debug-command", "local", "--rdbcompression", "no",
                     "--loading-process-events-interval-bytes", "1024"])
    try:
        s("DEBUG", "POPULATE", "40", "filler", "2048")
        s("CONFIG", "SET", "key-load-delay", "10000")

        async def main() -> None:
            async with aio.Client(s.url) as c:
                a, b = c.lock(name + "a", thread_id=1), c.lock(name + "b")
                assert await a.acquire(0, lease=30)
                # three idle connections: the acquire and the release below
                # each send on one directly (_send_idle), the query is routed
                await asyncio.gather(*(c.lock(name + "c").locked() for _ in range(3)))
                # a's hold check (once its channel subscription is confirmed,
                # 9d7bd03) may still have one of them: wait until it is back
                for _ in range(500):
                    if c._pool.nopen == len(c._pool.idle):
                        break
                    await asyncio.sleep(0.01)
                assert len(c._pool.idle) >= 3, (c._pool.nopen, len(c._pool.idle))
                reload = threading.Thread(target=s, args=("DEBUG", "RELOAD"))
                reload.start()
                try:
                    r = s.cli()
                    try:
                        for _ in range(400):  # until the server says it is loading
                            try:
                                r("PING")
                            except Exception as e:
                                assert "LOADING" in str(e), e
                                break
                            await asyncio.sleep(0.005)
                        else:
                            raise AssertionError("the server never said it was loading")
                    finally:
                        r.close()
                    before = _errorstat(s, "LOADING")
                    got, _rel, locked = await asyncio.gather(
                        b.acquire(0, lease=30), a.release(), c.lock(name + "c").locked())
                    assert _errorstat(s, "LOADING") > before  # the driver's commands were refused
                finally:
                    reload.join()
                assert got is True and locked is False
                assert s("EXISTS", name + "a") == 0 and s("EXISTS", name + "b") == 1
        run(main())
    finally:
        s.stop()


def test_server_restart_pubsub_reconnects(own_redis: RedisServer, name: str) -> None:
    """The pub/sub connection dies: waiters listen again and still wake on
    the next unlock."""
    async def main() -> None:
        async with aio.Client(own_redis.url) as c:
            holder = c.lock(name, thread_id=1)
            assert await holder.acquire(0, lease=30)
            w = asyncio.create_task(c.lock(name).acquire(wait=20, lease=5))
            await asyncio.sleep(0.3)
            r = own_redis.cli()
            r("CLIENT", "KILL", "TYPE", "pubsub")
            r.close()
            await asyncio.sleep(0.3)
            t0 = time.monotonic()
            await holder.release()
            assert await w
            assert time.monotonic() - t0 < 1
    run(main())


# an owner no task of this process is: aio.task_id() numbers tasks from 1, so a
# small explicit thread id (5 was used) is the test task's own once enough
# tasks ran before it (-k "multilock or redlock or lost or restart": the
# multi-lock below re-entered the "other" owner's hold and was granted)
OTHER_TID = 1 << 40


def test_multilock_and_redlock(servers: List[RedisServer], name: str) -> None:
    async def main() -> None:
        cs = [await aio.connect(s.url) for s in servers]
        try:
            m = aio.MultiLock([c.lock(name) for c in cs])
            assert await m.acquire(wait=1)
            assert all([await lk.owned() for lk in m.locks])
            # another task: busy until we release, then woken by the unlock messages
            other = aio.MultiLock([c.lock(name) for c in cs])

            async def contender() -> float:
                assert await other.acquire(wait=10, lease=5)
                t = time.monotonic()
                await other.release()
                return t
            t = asyncio.create_task(contender())
            await asyncio.sleep(0.3)
            assert not t.done()
            t0 = time.monotonic()
            await m.release()
            assert await t - t0 < 1.0  # woken by a member's unlock, not its 30 s lease
            assert not any([await lk.locked() for lk in m.locks])
            # all or nothing: one member held elsewhere
            assert await cs[1].lock(name, thread_id=OTHER_TID).acquire(0)
            assert not await aio.MultiLock([c.lock(name) for c in cs]).acquire(wait=0)
            assert not await cs[0].lock(name).locked() and not await cs[2].lock(name).locked()
            # Redlock: 2 of 3 is a majority
            rl = aio.RedLock([c.lock(name) for c in cs])
            assert await rl.acquire(wait=0, lease=10)
            assert rl.validity is not None and 9 < rl.validity <= 10
            await rl.release()
            await cs[1].lock(name, thread_id=OTHER_TID).release()
        finally:
            for c in cs:
                await c.close()
    run(main())


async def until(cond: Any, seconds: float, what: str) -> None:
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.02)


def test_multilock_lost_and_on_lost(servers: List[RedisServer], name: str) -> None:
    """A member's hold deleted behind the multi-lock's back (its watchdog
    renews every 0.2 s): the multi-lock is lost for its owner, on_lost is
    called once with (multilock, thread_id); the other owners' view is not;
    the next grant clears it. (Before: aio.MultiLock had neither.)"""
    async def main() -> None:
        cs = [await aio.connect(s.url, watchdog_lease=0.6) for s in servers[:2]]
        try:
            m = aio.MultiLock([c.lock(name) for c in cs])
            calls: List[Any] = []
            m.on_lost = lambda ml, tid: calls.append((ml, tid))
            assert await m.acquire()
            assert not m.lost
            await asyncio.sleep(0.5)  # renewed: still held, not lost
            assert not m.lost and not calls
            servers[1]("DEL", name)
            await until(lambda: m.lost, 5, "multilock.lost")
            assert calls == [(m, aio.task_id())]

            async def other_task() -> bool:
                return m.lost
            assert not await asyncio.create_task(other_task())  # not that owner's
            await asyncio.sleep(0.5)  # more renewal passes: reported once
            assert len(calls) == 1
            assert await m.locks[0].owned()
            with pytest.raises(hilock.NotOwnerError):
                await m.release()  # the gone member is reported, the other released
            assert not await m.locks[0].locked()
            assert m.lost  # until the next grant
            assert await m.acquire()
            assert not m.lost
            await m.release()
            assert len(calls) == 1
        finally:
            for c in cs:
                await c.close()
    run(main())


def test_redlock_lost_when_below_quorum(servers: List[RedisServer], name: str) -> None:
    """Redlock of 3 (the engine's ml_hold_lost): one member gone leaves a
    majority held, not lost; a second one gone is: on_lost (a coroutine
    here, run as a task) once."""
    async def main() -> None:
        cs = [await aio.connect(s.url, watchdog_lease=0.6) for s in servers]
        try:
            rl = aio.RedLock([c.lock(name, thread_id=7) for c in cs], thread_id=7)
            calls: List[int] = []

            async def on_lost(ml: Any, tid: int) -> None:
                calls.append(tid)
            rl.on_lost = on_lost
            assert await rl.acquire()
            servers[0]("DEL", name)
            await until(lambda: rl.locks[0].lost, 5, "the first member found gone")
            assert not rl.lost  # 2 of 3 still held
            servers[2]("DEL", name)
            await until(lambda: rl.lost, 5, "redlock.lost")
            await until(lambda: bool(calls), 1, "on_lost ran")
            assert calls == [7]
            await rl.release()  # a majority is not released: no error
        finally:
            for c in cs:
                await c.close()
    run(main())


def scripts_run(s: RedisServer) -> int:
    """Script runs the server has answered (INFO commandstats)."""
    info = s("INFO", "commandstats")
    info = info.decode() if isinstance(info, bytes) else info
    n = 0
    for line in info.splitlines():
        if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")):
            n += int(line.split("calls=")[1].split(",")[0])
    return n


def test_multilock_fair_member_messages(servers: List[RedisServer], name: str) -> None:
    """A held FAIR member wakes a waiting multi-lock by message: the call
    joins the member's line and listens on its own waiter channel, which the
    member's unlock uses for the head of the line (as libcore's multi-lock,
    test_multilock 'fair member'). While the member is held (lease 20 s) the
    waiter runs few scripts there, the unlock hands over at once, and no line
    entry is left after a grant, a wait that runs out, a cancel or an
    asyncio timeout."""
    fair = servers[1]
    queue, zset = f"redisson_lock_queue:{{{name}}}", f"redisson_lock_timeout:{{{name}}}"

    async def main() -> None:
        cs = [await aio.connect(s.url) for s in servers]
        try:
            def multi() -> aio.MultiLock:
                return aio.MultiLock([cs[0].lock(name + "a"), cs[1].fair_lock(name),
                                      cs[2].lock(name + "c")], thread_id=33)
            other = cs[1].fair_lock(name, thread_id=777)
            assert await other.acquire(0, lease=20)
            m = multi()
            t = asyncio.create_task(m.acquire(wait=5))
            await asyncio.sleep(0.2)  # tried, in line, asleep
            assert fair("LLEN", queue) == 1
            before = scripts_run(fair)
            await asyncio.sleep(0.8)
            runs = scripts_run(fair) - before
            assert not t.done()
            t0 = time.monotonic()
            await other.release()
            assert await t
            handoff = time.monotonic() - t0
            print(f"[fair member: {runs} scripts in 800 ms, hand-off {handoff * 1000:.0f} ms]")
            assert runs <= 2
            assert handoff < 0.5  # by message, not the 20 s lease
            assert fair("EXISTS", queue) == 0 and fair("EXISTS", zset) == 0
            await m.release()

            # the wait runs out: it leaves the line and took nothing
            assert await other.acquire(0, lease=20)
            assert not await multi().acquire(wait=0.3)
            assert fair("EXISTS", queue) == 0 and fair("EXISTS", zset) == 0
            assert servers[0]("EXISTS", name + "a") == 0
            assert servers[2]("EXISTS", name + "c") == 0

            # cancelled while asleep in line
            t = asyncio.create_task(multi().acquire(wait=10))
            await asyncio.sleep(0.3)
            assert fair("LLEN", queue) == 1
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert fair("EXISTS", queue) == 0 and fair("EXISTS", zset) == 0

            # an asyncio timeout around the wait
            if hasattr(asyncio, "timeout"):
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.3):
                        await multi().acquire(wait=10)
                assert fair("EXISTS", queue) == 0 and fair("EXISTS", zset) == 0
            assert servers[0]("EXISTS", name + "a") == 0
            assert servers[2]("EXISTS", name + "c") == 0
            await other.release()
        finally:
            for c in cs:
                await c.close()
    run(main())


def test_redlock_sleep_is_the_engines(servers: List[RedisServer], name: str) -> None:
    """A failed Redlock attempt sleeps as the engine's ml_wait_ms says:
    bounded by the SHORTEST lease of the members held by others, whose end
    no message announces. Two of three members held elsewhere, one for
    0.4 s, one for 20 s: the quorum (2) is there once the short lease ends,
    and the Redlock takes it then, not after the long one (before: the
    driver slept the longest lease, here the whole 4 s wait)."""
    async def main() -> None:
        cs = [await aio.connect(s.url) for s in servers]
        others = [await aio.connect(s.url) for s in servers[:2]]
        try:
            other = [c.lock(name, thread_id=1) for c in others]
            assert await other[0].acquire(0, lease=0.4)
            assert await other[1].acquire(0, lease=20)
            rl = aio.RedLock([c.lock(name) for c in cs])
            t0 = time.monotonic()
            assert await rl.acquire(wait=4, lease=10)
            took = time.monotonic() - t0
            assert took < 2.0, took
            await rl.release()
            await other[1].release()
        finally:
            for c in cs + others:
                await c.close()
    run(main())


def test_multilock_own_give_back_does_not_wake(servers: List[RedisServer], name: str) -> None:
    """A multi-lock waiting on a held (reentrant) member while it took and
    gave back the others: its give-back's unlock messages on those members'
    channels do not wake it. It ran the held member's script some 1700
    times in 800 ms before (woken by its own publishes)."""
    async def main() -> None:
        cs = [await aio.connect(s.url) for s in servers]
        try:
            other = cs[1].lock(name, thread_id=777)
            assert await other.acquire(0, lease=20)
            m = aio.MultiLock([cs[0].lock(name + "a"), cs[1].lock(name),
                               cs[2].lock(name + "c")], thread_id=33)
            t = asyncio.create_task(m.acquire(wait=5))
            await asyncio.sleep(0.2)
            before = scripts_run(servers[1])
            await asyncio.sleep(0.8)
            runs = scripts_run(servers[1]) - before
            t0 = time.monotonic()
            await other.release()
            assert await t
            assert time.monotonic() - t0 < 0.5  # woken by the holder's unlock
            assert runs <= 2
            await m.release()
        finally:
            for c in cs:
                await c.close()
    run(main())


def test_uvloop(redis: RedisServer, name: str) -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        async with aio.Client(redis.url) as c:
            lk = c.lock(name)
            assert await lk.acquire(0, lease=30)

            async def waiter() -> bool:
                return await c.lock(name).acquire(wait=5)
            w = asyncio.create_task(waiter())
            await asyncio.sleep(0.2)
            await lk.release()
            assert await w
            assert await c.fair_lock(name + "f", thread_id=3).acquire(0)
            t = asyncio.create_task(c.fair_lock(name + "f").acquire())
            await asyncio.sleep(0.2)
            assert redis("LLEN", f"redisson_lock_queue:{{{name}f}}") == 1
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert redis("LLEN", f"redisson_lock_queue:{{{name}f}}") == 0
    uvloop.install() if sys.version_info < (3, 12) else None
    if sys.version_info >= (3, 12):
        uvloop.run(main())
    else:
        asyncio.run(main())
        asyncio.set_event_loop_policy(None)


def test_mypy_strict_on_example(mypy_strict: Any) -> None:
    """The asyncio example type-checks under mypy --strict against the
    installed package (py.typed)."""
    root = os.environ.get("HILOCK_ROOT", "")
    example = os.path.join(root, "examples", "asyncio_lock.py")
    if not root or not os.path.exists(example):
        pytest.skip("HILOCK_ROOT (the source tree with examples/) not given")
    # one mypy run for both asyncio examples (the semaphore one: test_aio_sem.py runs it)
    out = mypy_strict(example, os.path.join(root, "examples", "asyncio_semaphore.py"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_example_runs(redis: RedisServer) -> None:
    """examples/asyncio_lock.py: 20 tasks add 1 each under the lock."""
    root = os.environ.get("HILOCK_ROOT", "")
    example = os.path.join(root, "examples", "asyncio_lock.py")
    if not root or not os.path.exists(example):
        pytest.skip("HILOCK_ROOT (the source tree with examples/) not given")
    out = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HILOCK_URL": redis.url})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "counter: 20" in out.stdout
    assert redis("EXISTS", "examples:counter", "examples:fair") == 0


def test_wire_on_a_socket_pair() -> None:
    """hilock._engine.Wire, the plain connections' socket I/O, on a socket
    pair: a write the kernel cannot take at once goes out in full from the
    write callback, in order; a reply goes to the oldest request and wakes
    its future; a reply nobody asked for and the end of the stream go to
    on_event; a stream the reader cannot parse ends it; close() leaves the
    loop and is idempotent."""
    import collections
    import socket
    from hilock import _engine as E

    class Req:
        def __init__(self, loop: Any) -> None:
            self.reply: Any = None
            self.fut = E.ReplyFuture(loop)

    async def until(cond: Any) -> None:
        """Let the loop run until cond() holds (at most ~1 s)."""
        for _ in range(1000):
            if cond():
                return
            await asyncio.sleep(0.001)

    def wired(loop: Any, events: List[Any], pending: Any) -> Any:
        """A Wire on one end of a socket pair, in the loop; the other end."""
        a, b = socket.socketpair()
        wire = E.Wire(a.detach(), loop, E.Reader(), pending, events.append)
        loop.add_reader(wire.fileno(), wire)
        return wire, b

    async def main() -> None:
        loop = asyncio.get_running_loop()
        events: List[Any] = []
        pending: Any = collections.deque()
        wire, b = wired(loop, events, pending)
        b.setblocking(False)
        big = bytes(range(256)) * 16384  # 4 MiB: more than the socket buffers
        wire.write(big)
        wire.write(b"tail")
        assert wire.buffered() > 0
        got = bytearray()
        while len(got) < len(big) + 4:
            try:
                chunk = b.recv(1 << 20)
            except BlockingIOError:
                await asyncio.sleep(0.001)
                continue
            got += chunk
        assert bytes(got) == big + b"tail"
        await until(lambda: wire.buffered() == 0)  # the writer callback leaves
        assert wire.buffered() == 0
        r1, r2 = Req(loop), Req(loop)
        pending.extend([r1, r2])
        b.send(b":1\r\n+OK\r\n$3\r\nmsg\r\n")  # two replies, then one nobody asked for
        await asyncio.wait_for(r2.fut, 2)
        assert r1.fut.done() and r1.reply is not None and r2.reply is not None
        assert E.decode_int(r1.reply) == 1 and r2.reply.error is None
        await until(lambda: events)
        assert len(events) == 1 and events[0] is not None
        b.send(b"?garbage\r\n")  # not RESP: the stream ends
        await until(lambda: len(events) > 1)
        assert events[1:] == [None]
        wire.close()
        wire.close()
        assert wire.fileno() == -1
        wire.write(b"x")  # closed: nothing sent, no error
        b.close()
        # the end of the stream, on a fresh pair
        ended: List[Any] = []
        wire, b = wired(loop, ended, collections.deque())
        b.close()
        await until(lambda: ended)
        assert ended == [None]
        wire.close()
        # a write error: said through call_soon, once
        failed: List[Any] = []
        wire, b = wired(loop, failed, collections.deque())
        b.close()
        wire.write(b"x")
        wire.write(b"y")
        assert failed == []
        await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert failed == [None]
        wire.close()
        # a Wire that cannot be made still closes the fd it was given
        a, b = socket.socketpair()
        fd = a.detach()
        with pytest.raises(TypeError):
            E.Wire(fd, loop, E.Reader(), collections.deque(), "not callable")
        with pytest.raises(OSError):
            os.fstat(fd)
        b.close()
    run(main())


def test_reader_deliver_hands_replies_as_the_wire_does() -> None:
    """Reader.deliver, the TLS connections' read path: bytes fed in any
    split; each complete reply goes to the oldest request (its reply set,
    its future woken; an engine Req or any object with reply and fut) and
    one nobody asked for to on_event; a stream the reader cannot parse
    gives False (the connection is then closed) and stays refused."""
    import collections
    from hilock import _engine as E

    async def main() -> None:
        loop = asyncio.get_running_loop()
        rd = E.Reader()
        pending: Any = collections.deque()
        events: List[Any] = []
        a = E.Req(None, E.ReplyFuture(loop))
        pending.append(a)
        data = b":1\r\n$3\r\nabc\r\n"
        buf = bytearray(64)
        buf[:6] = data[:6]  # the first reply and a part of the second
        assert rd.deliver(buf, 6, pending, events.append) is True
        assert a.fut.done() and E.decode_int(a.reply) == 1 and not pending and events == []
        rest = data[6:]
        buf[:len(rest)] = rest
        assert rd.deliver(buf, len(rest), pending, events.append) is True
        assert len(events) == 1 and events[0].error is None  # nobody waited: on_event
        b = E.Req(None, E.ReplyFuture(loop))
        pending.append(b)
        buf[:5] = b"?bad\n"
        assert rd.deliver(buf, 5, pending, events.append) is False
        assert rd.deliver(buf, 0, pending, events.append) is False  # stays broken
        assert not b.fut.done() and len(events) == 1
        with pytest.raises(ValueError):
            rd.deliver(buf, 65, pending, events.append)
    run(main())
