"""hilock.aio's semaphore, permit-expirable semaphore and count-down latch:
exclusion, wake-up by message (never by polling), cancellation, bad input,
and the same objects shared with the blocking API -- against a real
redis-server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any, Awaitable, List, TypeVar

import pytest

import hilock
import hilock.aio as aio
from conftest import RedisServer

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


def sem_channel(name: str) -> str:
    return "redisson_sc:{%s}" % name


def latch_channel(name: str) -> str:
    return "redisson_countdownlatch__channel__{%s}" % name


async def subscribers(redis: RedisServer, channel: str, n: int, timeout: float = 5.0) -> None:
    """Wait until channel has n subscribers (the waiters listen)."""
    deadline = time.monotonic() + timeout
    while redis("PUBSUB", "NUMSUB", channel)[1] != n:
        assert time.monotonic() < deadline, f"{channel}: not {n} subscribers"
        await asyncio.sleep(0.01)


def test_exclusion_many_tasks(redis: RedisServer, name: str) -> None:
    """24 tasks of two clients through a 3-permit semaphore: never more
    than 3 inside, and 3 are reached; every permit comes back."""
    async def main() -> None:
        c1, c2 = await aio.connect(redis.url), await aio.connect(redis.url)
        try:
            assert await c1.semaphore(name).try_set_permits(3)
            inside, most = 0, 0

            async def worker(c: aio.Client) -> None:
                nonlocal inside, most
                sem = c.semaphore(name)
                for _ in range(3):
                    assert await sem.acquire(1, wait=20)
                    inside += 1
                    most = max(most, inside)
                    await asyncio.sleep(0.005)
                    inside -= 1
                    await sem.release(1)

            await asyncio.gather(*(worker(c1 if i % 2 else c2) for i in range(24)))
            assert most == 3
            assert await c1.semaphore(name).available_permits() == 3
            await subscribers(redis, sem_channel(name), 0)
        finally:
            await c1.close()
            await c2.close()
    run(main())


def test_woken_by_message_not_polling(redis: RedisServer, name: str) -> None:
    """A waiter sleeps until the channel's message: permits added without
    a message do not wake it (no polling); a release of 2 (one message "2")
    wakes both waiters within tens of ms; the latch's last count-down
    wakes every waiter."""
    async def main() -> None:
        c = await aio.connect(redis.url)
        try:
            sem = c.semaphore(name)
            assert await sem.try_set_permits(1) and await sem.acquire(1, wait=0)
            ws = [asyncio.create_task(c.semaphore(name).acquire(1, wait=30)) for _ in range(2)]
            await subscribers(redis, sem_channel(name), 1)  # one subscription for both
            await asyncio.sleep(0.3)
            redis("INCRBY", name, "2")  # free permits, no message
            await asyncio.sleep(0.5)
            assert not any(w.done() for w in ws), "woken without a message: polling"
            redis("DECRBY", name, "2")
            t0 = time.monotonic()
            await sem.release(2)
            assert await asyncio.gather(*ws) == [True, True]
            assert time.monotonic() - t0 < 0.5  # the message, not a 30 s wait
            assert await sem.available_permits() == 0

            latch = c.count_down_latch(name + "L")
            assert await latch.try_set_count(2)
            waits = [asyncio.create_task(latch.wait(30)) for _ in range(3)]
            await subscribers(redis, latch_channel(name + "L"), 1)
            assert await latch.count_down() == 1
            await asyncio.sleep(0.2)
            assert not any(w.done() for w in waits)
            t0 = time.monotonic()
            assert await latch.count_down() == 0
            assert await asyncio.gather(*waits) == [True, True, True]
            assert time.monotonic() - t0 < 0.5
            assert await latch.wait(0) is True and await latch.count() == 0
        finally:
            await c.close()
    run(main())


def test_timeouts_and_permit_lease(redis: RedisServer, name: str) -> None:
    """A wait that elapses returns False / None; a permit whose lease ends
    comes back without a message (the lease bounds the sleep) and its
    late release is NotOwnerError; update_lease keeps a permit."""
    async def main() -> None:
        c = await aio.connect(redis.url)
        try:
            sem = c.semaphore(name)
            assert await sem.try_set_permits(1) and await sem.acquire(wait=0)
            t0 = time.monotonic()
            assert await sem.acquire(1, wait=0.3) is False
            assert 0.25 < time.monotonic() - t0 < 2.0
            pes = c.permit_expirable_semaphore(name + "P")
            assert await pes.try_set_permits(1)
            pid = await pes.acquire(wait=0, lease=0.6)
            assert pid is not None and len(pid) == 32
            assert await pes.acquire(wait=0) is None
            t0 = time.monotonic()
            pid2 = await pes.acquire(wait=5, lease=10)
            assert pid2 is not None and pid2 != pid
            assert 0.4 < time.monotonic() - t0 < 2.5
            with pytest.raises(hilock.NotOwnerError):
                await pes.release(pid)
            await pes.update_lease(pid2, 0.3)
            await asyncio.sleep(0.5)
            with pytest.raises(hilock.NotOwnerError):
                await pes.update_lease(pid2, 5)
            assert await pes.available_permits() == 1
            latch = c.count_down_latch(name + "L")
            assert await latch.try_set_count(1)
            assert await latch.wait(0.2) is False
        finally:
            await c.close()
    run(main())


def test_cancellation_leaves_nothing_taken(redis: RedisServer, name: str) -> None:
    """task.cancel() and asyncio.wait_for end a waiting acquire with
    nothing taken and nobody subscribed; a cancel racing with the grant
    gives the permit back (60 rounds); a cancelled permit-expirable acquire
    leaves no permit id behind."""
    async def main() -> None:
        c = await aio.connect(redis.url)
        try:
            sem = c.semaphore(name)
            assert await sem.try_set_permits(1) and await sem.acquire(wait=0)
            t = asyncio.create_task(sem.acquire(1))
            await subscribers(redis, sem_channel(name), 1)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sem.acquire(1), 0.2)
            await subscribers(redis, sem_channel(name), 0)
            assert redis("GET", name) == "0"
            await sem.release(1)
            # the race: a release and the cancel in the same loop turn
            kept = 0
            for i in range(60):
                assert await sem.acquire(wait=0)
                t = asyncio.create_task(sem.acquire(1, wait=10))
                await asyncio.sleep(0.002 * (i % 6))
                await sem.release(1)
                await asyncio.sleep(0.001 * (i % 3))
                t.cancel()
                try:
                    if await t:
                        kept += 1
                        await sem.release(1)
                except asyncio.CancelledError:
                    pass
                assert redis("GET", name) == "1", f"round {i}: a permit was left taken"
            await subscribers(redis, sem_channel(name), 0)

            pes = c.permit_expirable_semaphore(name + "P")
            assert await pes.try_set_permits(1)
            pid = await pes.acquire(wait=0)
            assert pid is not None
            t2 = asyncio.create_task(pes.acquire(wait=10))
            await subscribers(redis, sem_channel(name + "P"), 1)
            t2.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t2
            assert redis("ZCARD", "{%sP}:timeout" % name) == 1  # only pid's
            await pes.release(pid)
            assert redis("ZCARD", "{%sP}:timeout" % name) == 0
            assert await pes.available_permits() == 1
            for i in range(20):  # the race again: a granted permit id is given back
                pid = await pes.acquire(wait=0)
                assert pid is not None
                t2 = asyncio.create_task(pes.acquire(wait=10))
                await asyncio.sleep(0.002 * (i % 4))
                await pes.release(pid)
                t2.cancel()
                try:
                    got = await t2
                    if got is not None:
                        await pes.release(got)
                except asyncio.CancelledError:
                    pass
                assert redis("ZCARD", "{%sP}:timeout" % name) == 0, f"round {i}"
            # a latch wait cancelled by asyncio.timeout (3.11+) or wait_for
            latch = c.count_down_latch(name + "L")
            assert await latch.try_set_count(1)
            if hasattr(asyncio, "timeout"):
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await latch.wait()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(latch.wait(), 0.2)
            await subscribers(redis, latch_channel(name + "L"), 0)
            await subscribers(redis, sem_channel(name + "P"), 0)
            assert await latch.count() == 1
            # and no waiter left behind in the client (it would take wake-ups)
            assert sum(len(ch.members) for ch in c._pubsub.channels.values()) == 0
        finally:
            await c.close()
    run(main())


def test_bad_input_key_untouched(redis: RedisServer, name: str) -> None:
    async def main() -> None:
        c = await aio.connect(redis.url)
        try:
            sem = c.semaphore(name)
            for bad in (0, -1, 2**31):
                with pytest.raises(hilock.InvalidArgument):
                    await sem.try_set_permits(bad)
                with pytest.raises(hilock.InvalidArgument):
                    await sem.acquire(bad, wait=0)
                with pytest.raises(hilock.InvalidArgument):
                    await sem.release(bad)
            with pytest.raises(hilock.InvalidArgument):
                await sem.set_permits(-1)
            with pytest.raises(TypeError):
                await sem.acquire(1.5, wait=0)  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                await sem.release(True)
            with pytest.raises(hilock.InvalidArgument):
                await c.count_down_latch(name).try_set_count(0)
            with pytest.raises(hilock.InvalidArgument):
                await c.permit_expirable_semaphore(name).release("not-an-id")
            with pytest.raises(hilock.InvalidArgument):
                c.semaphore("")
            with pytest.raises(hilock.InvalidArgument):
                await c.permit_expirable_semaphore(name).acquire(wait=0, lease=0)
            assert redis("EXISTS", name) == 0
            # a lock's hash at the key: WrongTypeError, the hash untouched
            redis("HSET", name, "owner", "1")
            for call in (lambda: sem.acquire(1, wait=0), lambda: sem.release(1),
                         lambda: sem.available_permits(), lambda: sem.acquire(1, wait=1),
                         lambda: c.count_down_latch(name).wait(1),
                         lambda: c.count_down_latch(name).count_down()):
                with pytest.raises(hilock.WrongTypeError):
                    await call()
            assert redis("HGETALL", name) == ["owner", "1"]
            redis("DEL", name)
            # a string that is no count
            redis("SET", name, "abc")
            with pytest.raises(hilock.WrongTypeError):
                await sem.release(1)
            with pytest.raises(hilock.WrongTypeError):
                await sem.acquire(1, wait=0)
            assert redis("GET", name) == "abc"
            redis("DEL", name)
            # a count at the edge: a release would overflow, nothing changes
            redis("SET", name, "999999999999999")
            with pytest.raises(hilock.InvalidArgument):
                await sem.release(1)
            assert redis("GET", name) == "999999999999999"
            redis("DEL", name)
            await subscribers(redis, sem_channel(name), 0)
        finally:
            await c.close()
    run(main())


def test_shared_with_the_blocking_api(redis: RedisServer, name: str) -> None:
    """The same name through hilock (blocking) and hilock.aio: permits are
    counted together, each side's release wakes the other's waiter, a
    permit id taken by one is released by the other, the blocking side's
    count-down opens an asyncio waiter."""
    blocking = hilock.Client(redis.url)

    async def main() -> None:
        c = await aio.connect(redis.url)
        try:
            bsem, asem = blocking.semaphore(name), c.semaphore(name)
            assert bsem.try_set_permits(2) and not await asem.try_set_permits(9)
            assert await asem.acquire(1, wait=0) and bsem.acquire(1, wait=0)
            assert await asem.acquire(1, wait=0) is False and not bsem.acquire(1, wait=0)
            # blocking waiter (a thread) woken by an asyncio release
            bt = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(
                None, lambda: bsem.acquire(1, wait=10)))
            await subscribers(redis, sem_channel(name), 1)
            t0 = time.monotonic()
            await asem.release(1)
            assert await bt is True and time.monotonic() - t0 < 1.0
            # asyncio waiter woken by a blocking release
            at = asyncio.create_task(asem.acquire(1, wait=10))
            await subscribers(redis, sem_channel(name), 1)
            t0 = time.monotonic()
            await asyncio.get_running_loop().run_in_executor(None, lambda: bsem.release(1))
            assert await at is True and time.monotonic() - t0 < 1.0
            await asem.release(1)
            bsem.release(1)
            assert bsem.available_permits() == 2 == await asem.available_permits()

            bp, ap = (blocking.permit_expirable_semaphore(name + "P"),
                      c.permit_expirable_semaphore(name + "P"))
            assert await ap.try_set_permits(1)
            pid = await ap.acquire(wait=0, lease=30)
            assert pid is not None and bp.acquire(wait=0) is None
            bp.release(pid)
            assert await ap.available_permits() == 1

            bl, al = blocking.count_down_latch(name + "L"), c.count_down_latch(name + "L")
            assert bl.try_set_count(1)
            w = asyncio.create_task(al.wait(10))
            await subscribers(redis, latch_channel(name + "L"), 1)
            t0 = time.monotonic()
            await asyncio.get_running_loop().run_in_executor(None, bl.count_down)
            assert await w is True and time.monotonic() - t0 < 1.0
        finally:
            await c.close()
    try:
        run(main())
    finally:
        blocking.close()


def test_async_with_and_repr(redis: RedisServer, name: str) -> None:
    async def main() -> None:
        c = await aio.connect(redis.url)
        try:
            sem = c.semaphore(name)
            assert await sem.try_set_permits(1)
            async with sem:
                assert await sem.available_permits() == 0
            assert await sem.available_permits() == 1
            assert sem.name == name and sem.client is c and name in repr(sem)
            assert await sem.delete() is True and redis("EXISTS", name) == 0
            hold: List[Any] = [c.semaphore(name), c.permit_expirable_semaphore(name),
                               c.count_down_latch(name)]
            assert [type(o).__name__ for o in hold] == [
                "Semaphore", "PermitExpirableSemaphore", "CountDownLatch"]
            assert isinstance(hold[0], aio.Semaphore)
        finally:
            await c.close()
    run(main())


def test_example_runs(redis: RedisServer) -> None:
    """examples/asyncio_semaphore.py (type-checked by test_aio.py's mypy
    run): 10 jobs, at most 3 at once, the latch opens."""
    root = os.environ.get("HILOCK_ROOT", "")
    example = os.path.join(root, "examples", "asyncio_semaphore.py")
    if not root or not os.path.exists(example):
        pytest.skip("HILOCK_ROOT (the source tree with examples/) not given")
    out = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HILOCK_URL": redis.url})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "latch open: True most at once: 3" in out.stdout, out.stdout
    assert redis("EXISTS", "examples:jobs", "examples:done", "examples:slots") == 0


def test_lost_reply_settled(own_redis: RedisServer, name: str) -> None:
    """The server stops (SIGSTOP) with an acquire on the wire: the driver
    times out, the engine settles the try through its request latch, and
    once the server runs again the permit the late acquire took is given
    back -- the call failed, so nothing stays taken. Same for a
    permit-expirable acquire (its id given back)."""
    async def main() -> None:
        c = await aio.connect(own_redis.url, command_timeout=0.3)
        try:
            sem = c.semaphore(name)
            pes = c.permit_expirable_semaphore(name + "P")
            assert await sem.try_set_permits(1) and await pes.try_set_permits(1)
            # the scripts loaded (a late EVALSHA of an unknown script would take nothing)
            assert await sem.acquire(1, wait=0)
            await sem.release(1)
            pid = await pes.acquire(wait=0)
            assert pid is not None
            await pes.release(pid)
            for acquire, left in ((lambda: sem.acquire(1, wait=0), lambda: own_redis("GET", name)),
                                  (lambda: pes.acquire(wait=0),
                                   lambda: own_redis("ZCARD", "{%sP}:timeout" % name))):
                own_redis.pause()
                try:
                    t = asyncio.create_task(acquire())
                    await asyncio.sleep(0.6)  # the try timed out; settling goes on
                finally:
                    own_redis.resume()
                with pytest.raises(hilock.ConnectionError):
                    await t
                # the late acquire ran, then the settle: nothing taken
                assert left() in ("1", 0)
            assert own_redis("GET", name) == "1" and await pes.available_permits() == 1
        finally:
            await c.close()
    run(main())


def test_uvloop(redis: RedisServer, name: str) -> None:
    """On uvloop: a waiter woken by the release message, a cancelled wait
    leaves nothing taken."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        async with aio.Client(redis.url) as c:
            sem = c.semaphore(name)
            assert await sem.try_set_permits(1) and await sem.acquire(1, wait=0)
            w = asyncio.create_task(c.semaphore(name).acquire(1, wait=10))
            await subscribers(redis, sem_channel(name), 1)
            t0 = time.monotonic()
            await sem.release(1)
            assert await w and time.monotonic() - t0 < 1.0
            t = asyncio.create_task(sem.acquire(1))
            await subscribers(redis, sem_channel(name), 1)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            await sem.release(1)
            assert redis("GET", name) == "1"
    if sys.version_info >= (3, 12):
        uvloop.run(main())
    else:
        uvloop.install()
        try:
            asyncio.run(main())
        finally:
            asyncio.set_event_loop_policy(None)
