"""hilock.aio's watchdog and the engine's "in doubt" rule (hl_renew_doubt_at):
a holder cut off from its server is told its hold is lost before the lease
can run out there (the blocking client's promise), whatever the renewals
are stuck on; a loop held up past a renewal renews before it reports.

The deadline each test holds the report to is the server's own: the lock
key's PTTL read (directly, not through the fault) just before the fault.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from typing import Any, Iterator, List

import pytest

import hilock.aio as aio
from conftest import Redis, RedisServer

sys.path.insert(0, os.path.join(os.environ.get("HILOCK_ROOT", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")), "tests", "faults"))
from faultproxy import FaultProxy  # noqa: E402

LEASE = 3.0


@pytest.fixture
def server() -> Iterator[RedisServer]:
    s = RedisServer()
    yield s
    s.resume()
    s.stop()


@pytest.fixture
def name() -> str:
    return "doubt-" + uuid.uuid4().hex[:8]


def expiry_of(server: RedisServer, name: str) -> float:
    """time.monotonic() at which the server's copy of the lock ends."""
    r = Redis(server.port)
    try:
        t = time.monotonic()
        ms = int(r("PTTL", name))
    finally:
        r.close()
    assert ms > 0, f"lock {name} not held on the server (PTTL {ms})"
    return t + ms / 1000.0


async def told_within(lk: Any, told: List[float], seconds: float) -> None:
    end = time.monotonic() + seconds
    while not told and time.monotonic() < end:
        await asyncio.sleep(0.02)


def test_server_stopped_holder_told_in_doubt_before_lease_ends(server: RedisServer,
                                                               name: str) -> None:
    """The issue's case: the server SIGSTOPped for 5 s under a 3 s lease.
    The holder must be told (lost, on_lost) before the key's lease ends on
    the server; once the server is back the key is gone and stays lost."""
    async def main() -> None:
        c = await aio.connect(server.url, watchdog_lease=LEASE, command_timeout=0.5)
        try:
            lk = c.lock(name)
            told: List[float] = []
            lk.on_lost = lambda l, tid: told.append(time.monotonic())
            assert await lk.acquire(wait=0)
            await asyncio.sleep(1.3)  # a renewal (every lease/3) went through
            assert not lk.lost
            ends = expiry_of(server, name)
            server.pause()
            t_stop = time.monotonic()
            try:
                await told_within(lk, told, 5.0)
                lost_then = lk.lost
            finally:
                server.resume()
            assert told, "the holder was never told while the server was stopped for 5 s"
            print(f"\n  server stopped: told after {told[0] - t_stop:.2f} s, "
                  f"lease ended on the server after {ends - t_stop:.2f} s")
            assert lost_then
            assert told[0] < ends, (f"told {told[0] - ends:.2f} s after the lease ended "
                                    "on the server")
        finally:
            await c.close()
    asyncio.run(main())


def test_accepts_then_never_answers_holder_told_in_doubt(server: RedisServer,
                                                         name: str) -> None:
    """The live connection is reset and every new one is accepted and then
    never answered (a half-dead host, a load balancer with nothing behind
    it): the watchdog's reconnect hangs in its handshake for as long as the
    connect timeout allows (10 s here). The doubt timer is a loop timer of
    its own, so the report still comes before the lease ends."""
    proxy = FaultProxy(server.port)

    async def main() -> None:
        c = await aio.connect(proxy.url(), watchdog_lease=LEASE, command_timeout=0.5,
                              connect_timeout=10.0)
        try:
            lk = c.lock(name)
            told: List[float] = []
            lk.on_lost = lambda l, tid: told.append(time.monotonic())
            assert await lk.acquire(wait=0)
            await asyncio.sleep(1.3)
            assert not lk.lost
            ends = expiry_of(server, name)
            proxy.blackhole(True)  # new connections: accepted, nothing forwarded
            proxy.reset()  # the live ones: reset
            t_cut = time.monotonic()
            await told_within(lk, told, 4.0)
            assert told, "the holder was never told while its server did not answer"
            print(f"\n  accepts, never answers: told after {told[0] - t_cut:.2f} s, "
                  f"lease ended on the server after {ends - t_cut:.2f} s")
            assert told[0] < ends
            assert lk.lost
        finally:
            proxy.blackhole(False)
            await c.close()
    try:
        asyncio.run(main())
    finally:
        proxy.close()


@pytest.mark.parametrize("asleep", [False, True], ids=["watchdog-not-started", "watchdog-asleep"])
def test_loop_held_up_past_renewal_renews_before_doubt(server: RedisServer, name: str,
                                                       asleep: bool) -> None:
    """The loop blocked until 2.55 s into a 3 s lease (past lease - lease/5
    = 2.4 s, so the doubt deadline and a renewal both fell due meanwhile),
    either right after the grant (the watchdog task not started yet) or
    once the watchdog sleeps until its renewal (then its wake-up and the
    doubt timer are due in the same loop iteration): the renewal goes out
    first and is confirmed, so the live hold is not reported; the key's
    lease is renewed on the server."""
    async def main() -> None:
        c = await aio.connect(server.url, watchdog_lease=LEASE, command_timeout=1.0)
        try:
            lk = c.lock(name)
            told: List[float] = []
            lk.on_lost = lambda l, tid: told.append(time.monotonic())
            t0 = time.monotonic()
            assert await lk.acquire(wait=0)
            if asleep:
                await asyncio.sleep(0.1)
            time.sleep(2.55 - (time.monotonic() - t0))  # the loop held up (a slow callback)
            await asyncio.sleep(0.6)
            assert not told and not lk.lost, "a live hold was reported lost"
            ends = expiry_of(server, name)
            assert ends - time.monotonic() > 2.0, "the hold was not renewed"
            assert await lk.owned()
            await lk.release()
        finally:
            await c.close()
    asyncio.run(main())


def test_released_holds_leave_no_watchdog_clock(server: RedisServer, name: str) -> None:
    """Each watched hold's doubt clock goes with the hold: 2,000 watchdog
    holds of distinct names taken and released keep nothing (memory that
    grew with every name a client ever held, until the doubt timer fired)."""
    async def main() -> None:
        c = await aio.connect(server.url)
        try:
            for i in range(2000):
                lk = c.lock(f"{name}:{i}")
                assert await lk.acquire(0)
                await lk.release()
            assert not c._wd and not c._wd_t, (len(c._wd), len(c._wd_t))
        finally:
            await c.close()
    asyncio.run(main())
