"""Faults of a holder's pub/sub connection alone (DESIGN.md §6, per
connection and direction; issue 31 item 4), then a force unlock.

The holder's client (the blocking client, the C API's watchdog and listener
through the package, or hilock.aio) goes through the fault proxy and the
fault hits only its pub/sub connection (the one that sent SUBSCRIBE) while
its command connection stays healthy (a query through it is answered during
the fault). Then another client force-unlocks the lock and acquires it. The
holder must be told (lost, or in doubt) within a round trip of the force
unlock (SUB_BOUND), not at the next renewal (10 s away with a 30 s watchdog
lease) nor never. tests/c/test_async_force holds hilock_async to the same.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import hilock
import hilock.aio as aio
from conftest import numsub, report, wait_for
from test_force import holder_channel

SUB_LEASE = 30.0
SUB_BOUND = 1.0
SUB_FAULTS = ["requests-lost", "replies-lost", "accepted-then-silent"]


def sub_fault_on(proxy, fault: str) -> int:
    """fault on the proxy's live pub/sub connections alone; how many."""
    subs = proxy.subscribers()
    if fault == "accepted-then-silent":
        proxy.stall_new(True)  # the new pub/sub connection: connect succeeds, then silence
        for c in subs:
            c.kill()
    else:
        for c in subs:
            c.drop_up, c.drop_down = fault == "requests-lost", fault == "replies-lost"
    return len(subs)


def sub_case(fault: str, driver: str):
    return pytest.param(driver, fault, id=f"{driver}-{fault}")


@pytest.mark.parametrize("driver,fault", [sub_case(f, d) for d in ("blocking", "aio")
                                          for f in SUB_FAULTS])
def test_pubsub_connection_fault_holder_told_of_force_unlock(server, proxy, name, driver, fault):
    channel = holder_channel("plain", name)
    other = hilock.Client(server.url)
    figures = {}

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def call(v):  # an aio call's coroutine awaited, a blocking call's answer as is
            return await v if asyncio.iscoroutine(v) else v

        if driver == "aio":
            c = await aio.connect(proxy.url(), watchdog_lease=SUB_LEASE)
        else:
            c = hilock.Client(proxy.url(), watchdog_lease=SUB_LEASE)
        try:
            lk = c.lock(name)
            told = []
            lk.on_lost = lambda l, tid: told.append(time.monotonic())
            assert await call(lk.acquire(wait=0))
            await loop.run_in_executor(None, lambda: wait_for(
                lambda: numsub(server, channel) >= 1, 5.0, "the holder's subscription"))
            await asyncio.sleep(0.2)  # its confirmation read (not dropped below)
            assert sub_fault_on(proxy, fault) == 1  # the one pub/sub connection alone
            await asyncio.sleep(0.3)
            # the command connection is healthy: answered through the proxy (in this
            # task: an aio lock's owner is its task)
            tq = time.monotonic()
            assert await call(lk.hold_count() if driver == "aio" else lk.hold_count) == 1
            assert time.monotonic() - tq < 1.0
            assert not told and not lk.lost
            t0 = time.monotonic()
            assert await loop.run_in_executor(None, other.lock(name).force_unlock)
            assert await loop.run_in_executor(None, lambda: other.lock(name).acquire(wait=0))
            figures["other"] = time.monotonic() - t0
            while not told and time.monotonic() - t0 < 3.0:
                await asyncio.sleep(0.005)
            figures["told"] = told[0] - t0 if told else None
        finally:
            if driver == "aio":
                await c.close()
            else:
                await loop.run_in_executor(None, c.close)

    try:
        asyncio.run(main())
    finally:
        other.close()
    told = figures.get("told")
    report(f"{driver}, {fault} on the subscription connection alone: holder told after the "
           f"force unlock (-1: not within 3 s)", -0.001 if told is None else told)
    report(f"{driver}, {fault} on the subscription connection alone: other client acquired "
           f"after the force unlock", figures["other"])
    assert told is not None and told < SUB_BOUND, \
        f"{driver}, {fault}: holder not told within {SUB_BOUND} s of the force unlock"
