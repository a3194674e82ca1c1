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
            assert not c._held and c._holds.count() == 0, (len(c._held), c._holds.count())
        finally:
            await c.close()
    asyncio.run(main())


def test_retry_on_a_silent_link_earns_no_grace(server: RedisServer, name: str) -> None:
    """Cut off (blackhole) after a confirmed renewal: the next renewal times
    out, and the loop is then held up past the doubt deadline, so the retry
    that was due goes out after it. That retry is not the first renewal sent
    since the last confirmation, so it earns no grace (the engine's rule as
    the C watchdog applies it, 8a3b270): the holder is told at once, well
    before the lease ends on the server, not when it ends."""
    proxy = FaultProxy(server.port)

    async def main() -> None:
        c = await aio.connect(proxy.url(), watchdog_lease=LEASE, command_timeout=0.5)
        try:
            lk = c.lock(name)
            told: List[float] = []
            lk.on_lost = lambda l, tid: told.append(time.monotonic())
            assert await lk.acquire(wait=0)
            # several idle pooled connections: the retry finds one and goes
            # out at once (a renewal that must open one is never "sent")
            await asyncio.gather(*(c.lock(f"{name}:{i}").locked() for i in range(4)))
            await asyncio.sleep(1.2)  # a renewal went through
            loop = asyncio.get_running_loop()
            key = next(iter(c._held))
            proxy.blackhole(True)
            ends = expiry_of(server, name)
            confirmed = c._holds.state(key)[1] / 1000.0  # loop time the confirmed renewal went out
            while loop.time() < confirmed + 1.6:  # the next renewal went out and timed out
                await asyncio.sleep(0.01)
            time.sleep(max(0.0, confirmed + 2.5 - loop.time()))  # held up past lease - lease/5
            await told_within(lk, told, 2.0)
            assert told, "never told"
            print(f"\n  retry on a silent link: told {ends - told[0]:.2f} s before the lease "
                  "ended on the server")
            assert told[0] < ends - 0.25, (
                f"told only {ends - told[0]:.2f} s before the lease ended on the server")
        finally:
            proxy.blackhole(False)
            await c.close()
    try:
        asyncio.run(main())
    finally:
        proxy.close()


def test_watchdog_survives_a_renewal_timeout(server: RedisServer, name: str) -> None:
    """A renewal that times out (the link silent for 0.8 s around it) ends
    that pass only: the next one renews, the hold is kept. (784e9bf's
    _renew_on read a reply outcome it never got: the watchdog task died with
    UnboundLocalError and the key expired unreported.)"""
    proxy = FaultProxy(server.port)

    async def main() -> None:
        c = await aio.connect(proxy.url(), watchdog_lease=LEASE, command_timeout=0.5)
        try:
            lk = c.lock(name)
            assert await lk.acquire(wait=0)
            loop = asyncio.get_running_loop()
            confirmed = c._holds.state(next(iter(c._held)))[1] / 1000.0
            while loop.time() < confirmed + 0.8:
                await asyncio.sleep(0.01)
            proxy.blackhole(True)  # the renewal at ~1.0 s times out at ~1.5 s
            while loop.time() < confirmed + 1.6:
                await asyncio.sleep(0.01)
            proxy.blackhole(False)
            while loop.time() < confirmed + 4.5:  # past the lease of the grant
                await asyncio.sleep(0.05)
            assert c._tick_h is not None  # the session's timer still runs
            assert expiry_of(server, name) - time.monotonic() > 1.0
            assert await lk.owned() and not lk.lost
            await lk.release()
        finally:
            proxy.blackhole(False)
            await c.close()
    try:
        asyncio.run(main())
    finally:
        proxy.close()


def test_one_of_several_holds_gone_is_the_one_reported(server: RedisServer, name: str) -> None:
    """Three watchdog holds renewed in one pass (every 2 s: a 6 s lease);
    the first is deleted behind the client's back: that one, and only that
    one, is reported lost, by the next pass (within 3 s: not by the doubt
    rule, at 4.8 s). (784e9bf applied the last hold's outcome to every hold
    of the pass: the deleted one was reported only as "in doubt".)"""
    async def main() -> None:
        c = await aio.connect(server.url, watchdog_lease=6.0)
        try:
            lks = [c.lock(f"{name}:{i}") for i in range(3)]
            for lk in lks:
                assert await lk.acquire(wait=0)
            r = Redis(server.port)
            try:
                assert r("DEL", f"{name}:0") == 1
            finally:
                r.close()
            end = time.monotonic() + 3.0
            while not lks[0].lost and time.monotonic() < end:
                await asyncio.sleep(0.02)
            assert [lk.lost for lk in lks] == [True, False, False]
            assert c._holds.count() == 2  # no longer watched: found gone, not in doubt
            assert [await lk.owned() for lk in lks] == [False, True, True]
            for lk in lks[1:]:
                await lk.release()
        finally:
            await c.close()
    asyncio.run(main())
