"""The holder itself paused past its lease (issue 31 item 4 (f)): a process
stopped (SIGSTOP, a VM or GC pause) or an event loop blocked while a
renewal falls due, the lease ends on the server meanwhile and another
client takes the lock. When the holder runs again, the first thing it can
see must already be "lost": no look at the hold after the other client's
grant may say it still holds.

- blocking (the C API through the Python package): a holder process
  SIGSTOPped; it asks `lost` in a loop and reports the last time it saw
  False. The moment the watchdog thread reports it is up to the scheduler
  once the process runs again, so `lost` must follow the engine's clock
  rule itself.
- hilock.aio: the loop blocked (a synchronous call in a coroutine) while
  another client takes the lock; the coroutine asks `lost` right after,
  before the loop has run any timer.

Every time is time.monotonic() (CLOCK_MONOTONIC, one clock for every
process on the machine); the order is what is asserted, the times are
printed. hilock_async's case is tests/c/test_async_silence ((f)).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import hilock
from conftest import report, wait_renewed

LEASE = 2.0
LABELS = {"other": "other client acquired", "look": "the holder's first look",
          "told": "on_lost called"}


# The holder: takes the lock with the watchdog, says "held", then looks at
# `lost` in a loop; the first time it is True it prints the time of the
# last look that said False and the time of that first True, and exits.
HOLDER = r'''
import sys, time
import hilock
url, name, lease = sys.argv[1], sys.argv[2], float(sys.argv[3])
c = hilock.Client(url, watchdog_lease=lease, command_timeout=0.6, connect_timeout=0.6)
lk = c.lock(name)
assert lk.acquire(wait=0)
print("held", flush=True)
believed = time.monotonic()
while True:
    t = time.monotonic()
    if lk.lost:
        print("believed %.6f lost %.6f" % (believed, t), flush=True)
        break
    believed = t
    time.sleep(0.0005)
'''


def test_blocking_holder_stopped_past_lease_sees_lost_first(server, name):
    py = os.environ.get("HILOCK_PYTHON", sys.executable)
    other = hilock.Client(server.url, command_timeout=1.0)
    p = subprocess.Popen([py, "-c", HOLDER, server.url, name, str(LEASE)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        wait_renewed(server, name, LEASE)
        os.kill(p.pid, signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            assert other.lock(name).acquire(wait=3 * LEASE, lease=30)
            t_other = time.monotonic()
        finally:
            os.kill(p.pid, signal.SIGCONT)
        line = p.stdout.readline().split()
        assert p.wait(10) == 0 and len(line) == 4, line
        believed, told = float(line[1]), float(line[3])
        report("stopped holder: other client acquired after", t_other - t_stop)
        report("stopped holder: last look saying held, after", believed - t_stop)
        report("stopped holder: first look saying lost, after", told - t_stop)
        assert believed < t_other, "the holder believed it held after another client's grant"
        other.lock(name).release()
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()
        other.close()


def test_aio_loop_blocked_past_lease_sees_lost_first(server, name):
    import asyncio

    import hilock.aio as aio

    other = hilock.Client(server.url, command_timeout=1.0)
    figures = {}

    async def main() -> None:
        c = await aio.connect(server.url, watchdog_lease=LEASE, command_timeout=0.6,
                              connect_timeout=0.6)
        try:
            lk = c.lock(name)
            told = []
            lk.on_lost = lambda l, tid: told.append(time.monotonic())
            assert await lk.acquire(wait=0)
            await asyncio.to_thread(wait_renewed, server, name, LEASE)
            got = []

            def take() -> None:
                if other.lock(name).acquire(wait=3 * LEASE, lease=30):
                    got.append(time.monotonic())

            t0 = time.monotonic()
            th = threading.Thread(target=take)
            th.start()
            th.join()  # the loop blocked until the other client holds the lock
            lost_then = lk.lost
            t_look = time.monotonic()
            assert got, "the other client did not get the lock in 3 leases"
            figures.update(other=got[0] - t0, look=t_look - t0)
            print(f"[aio loop blocked] the first look said lost={lost_then}")
            assert lost_then, "the holder's first look after the other's grant said it holds"
            end = time.monotonic() + 2 * LEASE
            while not told and time.monotonic() < end:
                await asyncio.sleep(0.01)
            assert told and lk.lost
            figures["told"] = told[0] - t0
            with pytest.raises(hilock.Error):
                await lk.release()
        finally:
            await c.close()

    try:
        asyncio.run(main())
    finally:
        for what in ("other", "look", "told"):
            if what in figures:
                report(f"aio loop blocked: {LABELS[what]} after", figures[what])
        other.lock(name).force_unlock()
        other.close()
