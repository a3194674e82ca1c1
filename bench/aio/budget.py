"""Where the microseconds of one uncontended acquire+release pair go, one
task / one thread, on one throwaway redis-server (issue 13's per-pair
budget). Alternating slices of every series, medians of wall and of this
process's CPU time per pair (CPU is what a loaded machine makes you wait
for; wall is what the caller sees):

  raw socket        a blocking Python socket sending hilock's own acquire
                    command twice (a re-entry: the same server work as a
                    pair): the kernel's and the server's part
  blocking hilock   hilock.Client (the C client through SWIG)
  asyncio floor     an asyncio BufferedProtocol and one task sending the
                    same bytes, one asyncio.Future per round trip: the
                    loop's own part, no hilock code at all
  floor+wake_now    the same with hilock._engine.ReplyFuture woken from the
                    read callback (what hilock.aio does)
  conn layer        hilock.aio's own connection (_Conn: its _engine.Wire,
                    reader, request queue, ReplyFuture) and its timed wait
                    (_Cancel.req), the same bytes: what hilock.aio's I/O costs
  + engine          the engine's acquire and release made and fed by
                    hilock._engine.Direct over that layer, driven by hand
                    (Direct.acquire/release send the command, Direct.done
                    feeds the reply and gives the connection back): the
                    least a driver on this connection can do
  hilock.aio        lock.acquire(0) / lock.release() on the same loop (the
                    difference to "+ engine" is the driver's own Python)
  ... on uvloop     the last three again on uvloop, when installed

Run:  build/venv/bin/python bench/aio/budget.py [--slices 9] [--pairs 1000]
(after bash bench/aio/run.sh --only pairs1 has installed the venv)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Server, new_loop, uvloop  # noqa: E402

import hilock  # noqa: E402
import hilock.aio as aio  # noqa: E402
from hilock import _engine as E  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slices", type=int, default=9)
    ap.add_argument("--pairs", type=int, default=1000)
    a = ap.parse_args()
    n = a.pairs
    srv = Server()
    try:
        names = E.Names("bench:budget", E.KIND_REENTRANT)
        owner = E.hold_owner(E.KIND_REENTRANT, "00000000-0000-4000-8000-000000000000", 1)
        cmd = names.acquire(owner, 0, 30000, 300000, 0, 1, 3000).next()[1]
        blocking = hilock.Client(srv.url)
        lk = blocking.lock("bench:budget:warm")  # loads the script
        assert lk.acquire(0)
        lk.release()

        def raw() -> None:
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = bytearray(65536)
            for _ in range(2 * n):
                s.sendall(cmd)
                s.recv_into(buf)
            s.close()

        def sync() -> None:
            b = blocking.lock("bench:budget:sync")
            for _ in range(n):
                b.acquire(0)
                b.release()

        class Floor(asyncio.BufferedProtocol):
            def __init__(self) -> None:
                self.buf = bytearray(16384)
                self.fut: Any = None
                self.now = False

            def get_buffer(self, sizehint: int) -> bytearray:
                return self.buf

            def buffer_updated(self, nbytes: int) -> None:
                if self.now:
                    self.fut.wake_now()
                else:
                    self.fut.set_result(None)

        async def floor(now: bool) -> None:
            loop = asyncio.get_running_loop()
            tr, p = await loop.create_connection(Floor, "127.0.0.1", srv.port)
            p.now = now
            for _ in range(2 * n):
                p.fut = E.ReplyFuture(loop) if now else loop.create_future()
                tr.write(cmd)
                await p.fut
            tr.close()

        async def layer(c: Any) -> None:
            loop = asyncio.get_running_loop()
            cancel = aio._Cancel()
            for _ in range(2 * n):
                conn = c._pool.idle.pop()
                await cancel.req(loop, conn.request(cmd), c._cmd_ms)
                c._pool.idle.append(conn)

        async def machines(c: Any) -> None:
            d = c._direct
            own = E.hold_owner(E.KIND_REENTRANT, c.id, 1)
            nm = E.Names("bench:budget:machines", E.KIND_REENTRANT)
            for _ in range(n):
                m, req = d.acquire(nm, own, 0, c._wd_ms)
                await req.fut
                d.done(m, req)
                m, req = d.release(nm, own, 0)
                await req.fut
                d.done(m, req)

        async def driver(c: Any) -> None:
            x = c.lock("bench:budget:aio")
            for _ in range(n):
                await x.acquire(0)
                await x.release()

        series: Dict[str, Callable[[], None]] = {"raw socket": raw, "blocking hilock": sync}
        loops: List[Tuple[str, asyncio.AbstractEventLoop, Any]] = []
        for kind in ["default"] + (["uvloop"] if uvloop is not None else []):
            loop = new_loop(kind)
            c = loop.run_until_complete(aio.connect(srv.url))
            loops.append((kind, loop, c))
            sfx = "" if kind == "default" else " (uvloop)"
            series["asyncio floor" + sfx] = (lambda lp: lambda: lp.run_until_complete(
                floor(False)))(loop)
            series["floor+wake_now" + sfx] = (lambda lp: lambda: lp.run_until_complete(
                floor(True)))(loop)
            for label, fn in (("conn layer", layer), ("+ engine", machines),
                              ("hilock.aio", driver)):
                series[label + sfx] = (lambda lp, f, cl: lambda: lp.run_until_complete(
                    f(cl)))(loop, fn, c)
        wall: Dict[str, List[float]] = {k: [] for k in series}
        cpu: Dict[str, List[float]] = {k: [] for k in series}
        for f in series.values():
            f()  # warm
        for _ in range(a.slices):
            for k, f in series.items():
                t0, c0 = time.perf_counter(), time.process_time()
                f()
                wall[k].append((time.perf_counter() - t0) * 1e6 / n)
                cpu[k].append((time.process_time() - c0) * 1e6 / n)
        for kind, loop, c in loops:
            loop.run_until_complete(c.close())
            loop.close()
        blocking.close()
        print("per acquire+release pair (2 round trips), one task / one thread; %d slices of "
              "%d pairs, medians (q1..q3)" % (a.slices, n))
        print("   %-26s %22s %22s" % ("series", "wall us/pair", "client CPU us/pair"))
        for k in series:
            w, c_ = sorted(wall[k]), sorted(cpu[k])
            q = len(w) // 4
            print("   %-26s %8.1f (%5.1f..%5.1f) %8.1f (%5.1f..%5.1f)" % (
                k, statistics.median(w), w[q], w[-1 - q], statistics.median(c_), c_[q],
                c_[-1 - q]))
        b = statistics.median(wall["blocking hilock"])
        for k in series:
            if k.startswith("hilock.aio"):
                rs = sorted(x / y for x, y in zip(wall["blocking hilock"], wall[k]))
                print("   %s / blocking (pairs/s, per slice): %.2f (%.2f..%.2f)" % (
                    k, statistics.median(rs), rs[len(rs) // 4], rs[-1 - len(rs) // 4]))
        del b
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
