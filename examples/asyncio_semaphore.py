"""hilock.aio's semaphore and count-down latch in a few lines: 10 jobs, at
most 3 at a time across every process sharing the name; a latch opens when
all are done. Waiters sleep until the channel's message (no polling).

Run: HILOCK_URL=redis://127.0.0.1:6379 python examples/asyncio_semaphore.py
(run and type-checked with mypy --strict by the Python suite).
"""
from __future__ import annotations

import asyncio
import os

import hilock
import hilock.aio


async def job(client: hilock.aio.Client, i: int, running: list[int]) -> None:
    async with client.semaphore("examples:jobs"):  # one permit, as long as it takes
        running[0] += 1
        running[1] = max(running[1], running[0])
        await asyncio.sleep(0.01)
        running[0] -= 1
    await client.count_down_latch("examples:done").count_down()


async def main() -> None:
    url = os.environ.get("HILOCK_URL", "redis://127.0.0.1:6379")
    client = await hilock.aio.connect(url)
    try:
        jobs = client.semaphore("examples:jobs")
        await jobs.try_set_permits(3)  # False when someone set it first
        done = client.count_down_latch("examples:done")
        await done.try_set_count(10)
        running = [0, 0]
        tasks = [asyncio.create_task(job(client, i, running)) for i in range(10)]
        opened = await done.wait(timeout=30.0)  # True once the count reached 0
        await asyncio.gather(*tasks)
        print("latch open:", opened, "most at once:", running[1])

        slots = client.permit_expirable_semaphore("examples:slots")
        await slots.try_set_permits(1)
        pid = await slots.acquire(wait=5.0, lease=10.0)  # the permit's id, or None
        if pid is not None:
            await slots.release(pid)  # NotOwnerError had its lease ended
        await jobs.delete()
        await slots.delete()
    except hilock.ConnectionError as e:
        print("cannot reach", url, e)
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
