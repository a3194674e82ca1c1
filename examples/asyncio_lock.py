"""hilock.aio in a few lines: tasks of one process share a counter in Redis
through a lock; each waiter sleeps until the unlock message (no polling).

Run: HILOCK_URL=redis://127.0.0.1:6379 python examples/asyncio_lock.py
(type-checked with mypy --strict by the Python suite).
"""
from __future__ import annotations

import asyncio
import os

import hilock
import hilock.aio


async def worker(client: hilock.aio.Client, i: int, counter: list[int]) -> None:
    # owner = this task: each task holds for itself
    async with client.lock("examples:counter", wait=10.0):
        value = counter[0]
        await asyncio.sleep(0.001)  # other tasks wait on the message meanwhile
        counter[0] = value + 1


async def take_and_release(lock: hilock.aio.Lock) -> None:
    await lock.acquire()
    await lock.release()


async def main() -> None:
    url = os.environ.get("HILOCK_URL", "redis://127.0.0.1:6379")
    client = await hilock.aio.connect(url, watchdog_lease=30.0)
    try:
        counter = [0]
        await asyncio.gather(*(worker(client, i, counter) for i in range(20)))
        print("counter:", counter[0])
        fair = client.fair_lock("examples:fair")
        if await fair.acquire(wait=1.0, lease=5.0):  # False: still busy after 1 s
            await fair.release()
        # A wait can be cancelled like any await: nothing is left queued or
        # held. (A lock belongs to the task that took it, so the task that
        # acquires also releases.)
        waiter = asyncio.ensure_future(take_and_release(client.lock("examples:counter")))
        done, _ = await asyncio.wait({waiter}, timeout=0.5)
        if not done:
            waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    except hilock.ConnectionError as e:
        print("cannot reach", url, e)
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
