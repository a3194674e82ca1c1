"""hilock.aio semaphore bench: uncontended acquire(1)+release(1) pairs/s of
hilock.aio's semaphore, against hilock.aio's reentrant lock, the blocking
Python semaphore and the server's limit, in one run on one throwaway
redis-server (issue 17's "semaphore acquire/release pairs/s", asyncio).

One task / one thread, short alternating slices of every series (the load
on a shared machine drifts within seconds): per-slice ratios, medians.
Series: aio semaphore (acquire(1, wait=0) + release(1)), aio permit-
expirable semaphore (acquire(wait=0, lease=30) + release(id)), aio lock
(acquire(0) + release()), blocking hilock semaphore (same calls).
Limit: one redis-benchmark -c 1 run of EVALSHA of the semaphore's acquire
script and one of its release script (the engine's own commands; the
acquire without its request latch, so a little cheaper than what hilock.aio
sends), combined as 1 / (1/acquire rate + 1/release rate): the pairs/s of a
client that cost nothing.

Run:  bash bench/aio/sem.sh [--slices 9] [--pairs 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Server, new_loop  # noqa: E402

import hilock  # noqa: E402
import hilock.aio as aio  # noqa: E402
from hilock import _engine as E  # noqa: E402


def argv_of(cmd: bytes) -> List[str]:
    parts = cmd.split(b"\r\n")  # RESP array of bulk strings -> argv
    return [parts[i].decode() for i in range(2, len(parts) - 1, 2)]


def bench_rate(srv: Server, argv: List[str], n: int) -> float:
    out = subprocess.run(["redis-benchmark", "-p", str(srv.port), "-c", "1", "-n", str(n),
                          "--csv", *argv], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1].split(",")[1].strip('"'))


def limit_pairs(srv: Server, n: int) -> float:
    sn = E.SemNames("bench:sem:limit", E.SEM_SEMAPHORE)
    acq = argv_of(sn.wait(1, 0).next()[1])
    rel = argv_of(sn.op("release", 1).next()[1])
    r = srv.redis()
    r.set("bench:sem:limit", 10**12)  # never runs out during the run
    r.close()
    c = hilock.Client(srv.url)  # loads both scripts (same engine, same bodies)
    s = c.semaphore("bench:sem:limit:warm")
    s.try_set_permits(1)
    assert s.acquire(1, wait=0)
    s.release(1)
    c.close()
    ra, rr = bench_rate(srv, acq, n), bench_rate(srv, rel, n)
    return 1.0 / (1.0 / ra + 1.0 / rr)


class AioSeries:
    """One hilock.aio client on its own loop, kept open across slices."""

    def __init__(self, url: str, what: str) -> None:
        self.loop = new_loop("default")
        self.what = what
        self.c = self.loop.run_until_complete(aio.connect(url))
        name = "bench:aio:" + what
        if what == "sem":
            self.s: Any = self.c.semaphore(name)
        elif what == "pes":
            self.s = self.c.permit_expirable_semaphore(name)
        else:
            self.s = self.c.lock(name)
        if what != "lock":
            self.loop.run_until_complete(self.s.try_set_permits(1))

    def slice(self, n: int) -> float:
        s, what = self.s, self.what

        async def body() -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                if what == "sem":
                    assert await s.acquire(1, wait=0)
                    await s.release(1)
                elif what == "pes":
                    pid = await s.acquire(wait=0, lease=30)
                    assert pid is not None
                    await s.release(pid)
                else:
                    assert await s.acquire(0)
                    await s.release()
            return n / (time.perf_counter() - t0)
        return float(self.loop.run_until_complete(body()))

    def close(self) -> None:
        self.loop.run_until_complete(self.c.close())
        self.loop.close()


class SyncSem:
    def __init__(self, url: str) -> None:
        self.c = hilock.Client(url)
        self.s = self.c.semaphore("bench:sync:sem")
        self.s.try_set_permits(1)

    def slice(self, n: int) -> float:
        s = self.s
        t0 = time.perf_counter()
        for _ in range(n):
            assert s.acquire(1, wait=0)
            s.release(1)
        return n / (time.perf_counter() - t0)

    def close(self) -> None:
        self.c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slices", type=int, default=9)
    ap.add_argument("--pairs", type=int, default=1000, help="pairs per slice")
    a = ap.parse_args()
    srv = Server()
    try:
        series: Dict[str, Any] = {"aio_sem": AioSeries(srv.url, "sem"),
                                  "aio_pes": AioSeries(srv.url, "pes"),
                                  "aio_lock": AioSeries(srv.url, "lock"),
                                  "blocking_sem": SyncSem(srv.url)}
        got: Dict[str, List[float]] = {k: [] for k in ["limit"] + list(series)}
        try:
            for s in series.values():
                s.slice(50)  # warm: connections, scripts
            for _ in range(a.slices):
                got["limit"].append(limit_pairs(srv, a.pairs * 4))
                for k, s in series.items():
                    got[k].append(s.slice(a.pairs))
        finally:
            for s in series.values():
                s.close()
    finally:
        srv.stop()
    med = {k: statistics.median(v) for k, v in got.items()}

    def ratio(x: str, y: str) -> Tuple[float, float, float]:
        rs = sorted(p / q for p, q in zip(got[x], got[y]))
        return statistics.median(rs), rs[0], rs[-1]

    print("hilock.aio semaphore pairs/s, one task / one thread: %d alternating slices of %d "
          "pairs (medians; ratios: median of per-slice ratios, min..max)" % (a.slices, a.pairs))
    print("   limit (redis-benchmark -c1 EVALSHA acquire, release)  %8.0f" % med["limit"])
    for k, label in (("aio_sem", "hilock.aio semaphore"),
                     ("aio_pes", "hilock.aio permit-expirable semaphore"),
                     ("aio_lock", "hilock.aio reentrant lock"),
                     ("blocking_sem", "blocking hilock semaphore")):
        print("   %-52s %8.0f  %.2f of limit" % (label, med[k], med[k] / med["limit"]))
    for x, y in (("aio_sem", "limit"), ("aio_sem", "aio_lock"), ("aio_pes", "aio_lock"),
                 ("aio_sem", "blocking_sem")):
        print("   %-14s / %-14s %.2f (%.2f..%.2f)" % ((x, y) + ratio(x, y)))


if __name__ == "__main__":
    main()
