"""hilock Python bench. Every figure is a ratio measured in the same run on
the same throwaway redis-server:

1. uncontended acquire+release pairs/s from one Python thread through the
   binding  ÷  the same loop in C through libhilock (c_pairs.c, linked
   statically)  -- target >= 0.75;
2. the same Python figure  ÷  redis-py's Lock (acquire+release) -- target >= 1.3;
3. the physical limit: two raw EVALSHA round trips on one hiredis connection
   (c_pairs.c), to show how close both come to the wire;
4. hand-off latency p50 with 8 waiting processes: time from a holder's
   release() call to the next holder's acquire() returning, hilock vs
   redis-py Lock (default sleep=0.1).

Rounds are interleaved so machine noise hits every series alike; medians
are reported.

Run:  build/venv/bin/python bench/python/bench.py [--pairs 3000] [--rounds 5]
(needs the package installed in that venv: bash tests/python/run.sh does it,
or pip install . ; and redis for redis-py: bash tests/python/deps.sh).
"""

from __future__ import annotations

import argparse
import glob
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import List, Optional, Tuple

import hilock
import redis as redispy

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CTX = mp.get_context("fork")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="hilock-bench-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = redispy.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                if r.ping():
                    break
            except redispy.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        r.close()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def find_static_lib() -> str:
    cands = []
    if os.environ.get("HILOCK_BUILD"):
        cands.append(os.path.join(os.environ["HILOCK_BUILD"], "libcore", "libhilock.a"))
    cands += glob.glob(os.path.join(ROOT, "build", "py", "*", "libcore", "libhilock.a"))
    cands.append(os.path.join(ROOT, "build", "release", "libcore", "libhilock.a"))
    for c in cands:
        if os.path.exists(c):
            return c
    bdir = os.path.join(ROOT, "build", "python-bench-lib")
    subprocess.check_call(["cmake", "-S", ROOT, "-B", bdir, "-DHILOCK_BUILD_TESTS=OFF",
                           "-DCMAKE_BUILD_TYPE=Release"], stdout=subprocess.DEVNULL)
    subprocess.check_call(["cmake", "--build", bdir, "--target", "hilock_static", "-j", "2"],
                          stdout=subprocess.DEVNULL)
    return os.path.join(bdir, "libcore", "libhilock.a")


def cmake_cache(lib: str, name: str) -> str:
    """A value the build recorded next to libhilock.a (build/<x>/libcore/..)."""
    cache = os.path.join(os.path.dirname(os.path.dirname(lib)), "CMakeCache.txt")
    with open(cache, encoding="utf-8") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    raise SystemExit(f"bench: no {name} in {cache}")


def build_c_pairs() -> str:
    out_dir = os.path.join(ROOT, "build", "python-bench")
    os.makedirs(out_dir, exist_ok=True)
    exe = os.path.join(out_dir, "c_pairs")
    lib = find_static_lib()
    # libhilock.a holds hiredis: its headers and link needs are in the cache
    subprocess.check_call(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                           "-I", os.path.join(ROOT, "libcore", "include"),
                           "-I", cmake_cache(lib, "HILOCK_HIREDIS_INCLUDE"),
                           os.path.join(HERE, "c_pairs.c"), lib]
                          + cmake_cache(lib, "HILOCK_STATIC_LIBS").split() + ["-o", exe])
    return exe


def c_round(exe: str, port: int, pairs: int) -> Tuple[float, float]:
    out = subprocess.check_output([exe, "127.0.0.1", str(port), "bench:c:" + uuid.uuid4().hex[:8],
                                   str(pairs)], text=True)
    kv = dict(p.split("=") for p in out.split())
    return float(kv["hilock_pairs_per_s"]), float(kv["raw_pairs_per_s"])


def py_round(client: hilock.Client, pairs: int) -> float:
    lock = client.lock("bench:py:" + uuid.uuid4().hex[:8])
    acquire, release = lock.acquire, lock.release
    for _ in range(200):
        acquire(0)
        release()
    t0 = time.perf_counter()
    for _ in range(pairs):
        acquire(0)
        release()
    return pairs / (time.perf_counter() - t0)


def redispy_round(r: "redispy.Redis", pairs: int) -> float:
    lock = r.lock("bench:rp:" + uuid.uuid4().hex[:8], timeout=30)
    for _ in range(200):
        lock.acquire(blocking=False)
        lock.release()
    t0 = time.perf_counter()
    for _ in range(pairs):
        lock.acquire(blocking=False)
        lock.release()
    return pairs / (time.perf_counter() - t0)


# -- hand-off latency --------------------------------------------------------

def _handoff_worker(kind: str, port: int, name: str, rounds: int, barrier, q, turns,
                    finished, procs: int) -> None:
    events: List[Tuple[float, float]] = []
    if kind == "hilock":
        c = hilock.Client(f"redis://127.0.0.1:{port}/0")
        lock = c.lock(name)
        acq, rel = (lambda: lock.acquire()), lock.release
    else:
        r = redispy.Redis(port=port)
        rl = r.lock(name, timeout=30)  # default sleep=0.1
        acq, rel = (lambda: rl.acquire(blocking=True)), rl.release
    barrier.wait()
    for _ in range(rounds):
        acq()
        t_acq = time.monotonic()
        with turns.get_lock():
            turns.value += 1
            mine = turns.value
        time.sleep(0.002)  # the critical section
        t_rel = time.monotonic()
        rel()
        events.append((t_acq, t_rel))
        # do not barge back in: queue again only once another process has
        # taken the lock, so every hand-off goes to a blocked waiter
        deadline = time.monotonic() + 5
        while (turns.value == mine and finished.value < procs - 1
               and time.monotonic() < deadline):
            time.sleep(0.0005)
    with finished.get_lock():
        finished.value += 1
    q.put(events)


def handoff_p50(kind: str, port: int, procs: int, rounds: int) -> Tuple[float, int]:
    name = f"bench:handoff:{kind}:{uuid.uuid4().hex[:8]}"
    barrier = CTX.Barrier(procs)
    q = CTX.Queue()
    turns = CTX.Value("i", 0)
    finished = CTX.Value("i", 0)
    ps = [CTX.Process(target=_handoff_worker,
                      args=(kind, port, name, rounds, barrier, q, turns, finished, procs))
          for _ in range(procs)]
    for p in ps:
        p.start()
    events: List[Tuple[float, float]] = []
    for _ in ps:
        events += q.get(timeout=600)
    for p in ps:
        p.join(30)
    events.sort()
    # latency of each hand-off: next acquire returned - previous release called
    lat = [events[i][0] - events[i - 1][1] for i in range(1, len(events))]
    # near the end fewer processes are still queued: keep the hand-offs made
    # while all the others were waiting
    lat = lat[: max(1, len(lat) - procs)]
    return statistics.median(lat), len(lat)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--procs", type=int, default=9, help="1 holder + 8 waiters")
    ap.add_argument("--handoff-rounds", type=int, default=25)
    ap.add_argument("--redispy-handoff-rounds", type=int, default=8)
    args = ap.parse_args()

    exe = build_c_pairs()
    srv = Server()
    try:
        client = hilock.Client(f"redis://127.0.0.1:{srv.port}/0")
        r = redispy.Redis(port=srv.port)
        cs, raws, pys, rps = [], [], [], []
        for _ in range(args.rounds):
            c, raw = c_round(exe, srv.port, args.pairs)
            cs.append(c)
            raws.append(raw)
            pys.append(py_round(client, args.pairs))
            rps.append(redispy_round(r, args.pairs))
        med = statistics.median
        c_med, raw_med, py_med, rp_med = med(cs), med(raws), med(pys), med(rps)
        ratio_c = med([p / c for p, c in zip(pys, cs)])
        ratio_rp = med([p / q for p, q in zip(pys, rps)])
        print(f"hilock {hilock.__version__}, python {sys.version.split()[0]}, "
              f"{args.rounds} rounds x {args.pairs} pairs, redis-server on 127.0.0.1:{srv.port}")
        print(f"raw limit (2 EVALSHA round trips, hiredis)  {raw_med:10.0f} pairs/s")
        print(f"C   libhilock acquire+release               {c_med:10.0f} pairs/s  "
              f"({c_med / raw_med:.2f} of raw)")
        print(f"Python hilock acquire+release               {py_med:10.0f} pairs/s  "
              f"({py_med / raw_med:.2f} of raw)")
        print(f"Python redis-py Lock acquire+release        {rp_med:10.0f} pairs/s  "
              f"({rp_med / raw_med:.2f} of raw)")
        print(f"RATIO python/C        = {ratio_c:.2f}   (target >= 0.75)")
        print(f"RATIO python/redis-py = {ratio_rp:.2f}   (target >= 1.3)")
        client.close()
        r.close()

        waiters = args.procs - 1
        hp, hn = handoff_p50("hilock", srv.port, args.procs, args.handoff_rounds)
        rp, rn = handoff_p50("redispy", srv.port, args.procs, args.redispy_handoff_rounds)
        print(f"hand-off p50, {waiters} waiting processes: hilock {hp * 1e3:.2f} ms "
              f"({hn} hand-offs), redis-py Lock (sleep 0.1) {rp * 1e3:.2f} ms ({rn} hand-offs)")
        print(f"hand-off p50 vs raw pair time: hilock {hp * raw_med:.1f}x, "
              f"redis-py {rp * raw_med:.1f}x;  RATIO redis-py/hilock = {rp / hp:.1f}")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
