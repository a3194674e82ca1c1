"""Replies later than the command timeout that still arrive (issue 31 item
4 (c), (d)), per connection and direction: faultproxy.late_reply holds the
server's reply to one request on its connection, then delivers it there
(unless the client closed that connection meanwhile: then it cannot).

- (d) a release whose reply comes after the command timeout: the release is
  answered (or fails) within its bounds, the holder's next hold of the lock
  is its own and whole once the late reply is due (hold count 1 asked three
  times: no later call reads that reply as its own; refused to another
  client; freed by one release).
- (c) an acquire granted after the command timeout, its reply delivered
  late and the connection reset right after it, while the attempt is being
  settled: the grant is given back, nothing is held, and the client goes on
  (blocking: it used to crash here; tests/c test_settle_faults has it for
  both C APIs).

Parametrized over the blocking client (the C API through the package) and
hilock.aio; each scenario runs in one coroutine (hilock.aio's owner is the
task), the blocking calls straight from it. 0.5 s command timeouts,
replies 1.5 s late.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid

import pytest

import hilock
from conftest import report

LATE = 1.5
TIMEOUT = 0.5
# a grant's late reply must come while the settle still waits for it on
# its connection: one more command timeout after the attempt's own
LATE_GRANT = 0.75
DRIVERS = ["blocking", "aio"]


async def do(v):
    """A blocking call's value, or an aio call's awaited."""
    return await v if inspect.isawaitable(v) else v


async def opened(driver: str, url: str):
    if driver == "blocking":
        return hilock.Client(url, command_timeout=TIMEOUT, connect_timeout=1.0)
    import hilock.aio as aio
    return await aio.connect(url, command_timeout=TIMEOUT, connect_timeout=1.0)


async def hold_count(lk) -> int:
    n = lk.hold_count
    return await do(n() if callable(n) else n)


async def until(cond, secs: float) -> bool:
    end = time.monotonic() + secs
    while not cond():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.02)
    return True


def make(c, kind, name):
    return c.lock(name) if kind == "reentrant" else c.fair_lock(name)


@pytest.mark.parametrize("kind", ["reentrant", "fair"])
@pytest.mark.parametrize("driver", DRIVERS)
def test_release_reply_late_then_delivered(server, proxy, name, driver, kind):
    other = hilock.Client(server.url, command_timeout=1.0)

    async def main() -> None:
        c = await opened(driver, proxy.url())
        try:
            lk = make(c, kind, name)
            w = make(c, kind, "warm:" + uuid.uuid4().hex[:12])  # scripts loaded, a pooled connection
            assert await do(w.acquire(wait=0, lease=5))
            await do(w.release())
            assert await do(lk.acquire(wait=0, lease=30))
            proxy.late_reply(b"redisson_unlock_latch", LATE)
            t0 = time.monotonic()
            err = None
            try:
                await do(lk.release())
            except hilock.Error as e:  # allowed, if it says so: the key is what counts
                err = e
            answered = time.monotonic() - t0
            assert answered < TIMEOUT + 2.0, "the release waited for its late reply"
            assert server("EXISTS", name) == 0, "the release did not release"
            # the same owner takes the lock again before the late reply is due
            assert await do(lk.acquire(wait=0, lease=30))
            assert await until(lambda: proxy.fired("late-reply-delivered") +
                               proxy.fired("late-reply-undeliverable") == 1, LATE + 5)
            late_at = time.monotonic() - t0
            delivered = proxy.fired("late-reply-delivered") == 1
            for _ in range(3):  # every later call gets its own answer
                assert await hold_count(lk) == 1
            assert not make(other, kind, name).acquire(wait=0, lease=30), \
                "another client was granted the holder's later hold"
            await do(lk.release())
            assert server("EXISTS", name) == 0
            print(f"[{driver} {kind}] release answered after {answered * 1000:.0f} ms "
                  f"({'error: ' + str(err) if err else 'ok'}); the late reply "
                  f"{'delivered' if delivered else 'undeliverable (connection closed)'} at "
                  f"{late_at * 1000:.0f} ms; the later hold kept whole")
        finally:
            await do(c.close())

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        proxy.clear()
        other.close()


@pytest.mark.parametrize("driver", DRIVERS)
def test_grant_reply_late_then_reset_during_settle(server, proxy, name, driver):
    async def main() -> None:
        c = await opened(driver, proxy.url())
        try:
            lk = c.lock(name)
            # not a name containing name: its channel's (un)subscription
            # must not match the fault's pattern
            w = c.lock("warm:" + uuid.uuid4().hex[:12])
            assert await do(w.acquire(wait=0, lease=5))
            await do(w.release())
            proxy.late_reply(name.encode(), LATE_GRANT, reset=True)
            t0 = time.monotonic()
            with pytest.raises(hilock.ConnectionError):
                await do(lk.acquire(wait=0, lease=30))
            told = time.monotonic() - t0
            assert told < TIMEOUT + 1.0
            assert server("EXISTS", name) == 1, "the server did not run the attempt"
            assert await until(lambda: server("EXISTS", name) == 0, LATE_GRANT + 5), \
                "the late grant was not given back"
            given_back = time.monotonic() - t0
            assert proxy.fired("late-reply-then-reset") == 1
            report(f"{driver}: late grant then reset: acquire failed after", told)
            report(f"{driver}: late grant then reset: given back after", given_back)
            assert await do(lk.acquire(wait=1, lease=30))  # the client goes on
            assert await hold_count(lk) == 1
            await do(lk.release())
            assert server("EXISTS", name) == 0
        finally:
            await do(c.close())

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        proxy.clear()


@pytest.mark.parametrize("driver", DRIVERS)
def test_fair_grant_on_a_silent_connection_given_back_soon(server, proxy, name, driver):
    """A fair waiter's attempt, sent when the holder lets go, is granted on
    the server, and its connection then stays open and silent (its reply
    held 10 s: a link that accepts and never answers). The acquire fails
    after the command timeout; the settle waits one more command timeout
    for the reply on that connection, then settles on a new one
    (acquire_settle.lua: granted) and gives the grant back. Before (the
    engine's settle waited up to 60 s on the attempt's connection): the
    grant stayed until the late reply came, 10 s."""
    holder = hilock.Client(f"redis://127.0.0.1:{server.port}/0", command_timeout=2.0)
    hold = holder.fair_lock(name)
    assert hold.acquire(wait=0, lease=30)

    async def main() -> None:
        c = await opened(driver, proxy.url())
        try:
            w = c.fair_lock("warm:" + uuid.uuid4().hex[:12])
            assert await do(w.acquire(wait=0, lease=5))  # scripts loaded, pooled
            await do(w.release())
            lk = c.fair_lock(name)
            if driver == "blocking":
                fut = asyncio.get_running_loop().run_in_executor(
                    None, lambda: lk.acquire(wait=5, lease=30))
            else:
                fut = asyncio.ensure_future(lk.acquire(wait=5, lease=30))
            queue = "redisson_lock_queue:{%s}" % name
            # in line and listening: the next request naming the lock is the
            # attempt the holder's release wakes
            assert await until(lambda: server("LLEN", queue) == 1
                               and server("PUBSUB", "CHANNELS", "*%s*" % name), 5)
            proxy.late_reply(name.encode(), 10.0)
            hold.release()
            granted = False  # the waiter's grant seen on the server (its reply held)
            while not fut.done():
                granted = granted or server("EXISTS", name) == 1
                await asyncio.sleep(0.01)
            with pytest.raises(hilock.ConnectionError):
                await fut
            t0 = time.monotonic()
            granted = granted or server("EXISTS", name) == 1
            assert granted, "the attempt was not granted on the server"
            gone = await until(lambda: server("EXISTS", name) == 0
                               and server("EXISTS", queue) == 0, 3.0)
            report(f"{driver}: fair grant on a silent connection given back after",
                   time.monotonic() - t0)
            assert gone, "the grant stayed while its connection was silent"
            assert proxy.fired("late-reply-delivered") == 0  # not the late reply's doing
            assert await do(lk.acquire(wait=1, lease=30))  # the client goes on
            await do(lk.release())
        finally:
            await do(c.close())

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        proxy.clear()
        holder.close()
