"""hilock.aio bench: the asyncio driver against the blocking Python API,
redis-py's asyncio Lock and the server's limit, all in one run on one
throwaway redis-server (issue 13's measures).

1. uncontended acquire+release pairs/s, one task / one thread, in short
   alternating slices (per-slice ratios, medians): hilock.aio on the default
   loop and on uvloop, blocking hilock, redis-py asyncio Lock; the limit is
   half the rate of redis-benchmark -c 1 EVALSHA of hilock's own lock script
   (a re-entry per call: HINCRBY + PEXPIRE). Targets: aio / blocking >= 0.8,
   aio / redis-py asyncio >= 1.5. Then the same with 8 tasks / 8 threads,
   each on a lock of its own.
2. hand-off p50: 1 holder + 8 waiters pass one lock, each holding it 2 ms
   and queueing again only once another has it, so every hand-off goes to a
   blocked waiter; latency = next holder's acquire returning - previous
   holder's release call. asyncio: 9 tasks of one loop; blocking: 9
   processes (as bench/python). Target: aio / blocking <= 1.5.
3. 10,000 concurrent waiters on one name, one loop, one process (a child
   process, so its threads and RSS are its own): all granted in turn (each
   releases at once), threads counted while they wait, RSS per waiter.
4. cancellation: a waiter asleep on the unlock message is cancelled
   (task.cancel()); time from the cancel call to the acquire's await ending,
   p50 (target <= 1 ms); then 1,000 waits cancelled at once on a reentrant
   and on a fair lock: holds, queue entries, timeouts, subscriptions left.

Run:  bash bench/aio/run.sh [--slices 15] [--pairs 300] [--waiters 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

import hilock
import hilock.aio as aio
import redis as redispy
import redis.asyncio as aredis

try:
    import uvloop
except ImportError:  # the figure is left out
    uvloop = None

CTX = mp.get_context("fork")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="hilock-aio-bench-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = "redis://127.0.0.1:%d/0" % self.port
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

    def redis(self) -> "redispy.Redis":
        return redispy.Redis(port=self.port, decode_responses=True)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        assert uvloop is not None
        return uvloop.new_event_loop()  # type: ignore[no-any-return]
    return asyncio.new_event_loop()


def run_on(kind: str, coro: Any) -> Any:
    loop = new_loop(kind)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


# --------------------------------------------------------------------- 1 --

def limit_pairs(srv: Server, n: int) -> float:
    """Half the rate of redis-benchmark -c 1 EVALSHA of hilock's lock script
    as hilock.aio sends it (a re-entry per call on one key: HINCRBY +
    PEXPIRE): the pairs/s a client could reach if a release cost what an
    acquire costs and the client itself cost nothing."""
    from hilock import _engine as E
    names = E.Names("bench:limit", E.KIND_REENTRANT)
    owner = E.hold_owner(E.KIND_REENTRANT, "00000000-0000-4000-8000-000000000000", 1)
    cmd = names.acquire(owner, 0, 30000, 300000).next()[1]
    parts = cmd.split(b"\r\n")  # RESP array of bulk strings -> argv
    argv = [parts[i].decode() for i in range(2, len(parts) - 1, 2)]
    c = hilock.Client(srv.url)  # loads the script (same engine, same body)
    lk = c.lock("bench:limit:warm")
    assert lk.acquire(0)
    lk.release()
    c.close()
    out = subprocess.run(["redis-benchmark", "-p", str(srv.port), "-c", "1", "-n", str(n),
                          "--csv", *argv], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1].split(",")[1].strip('"')) / 2


class AioPairs:
    """hilock.aio on its own loop (default or uvloop), kept open across slices."""

    def __init__(self, url: str, kind: str, ntasks: int) -> None:
        self.loop = new_loop(kind)
        self.ntasks = ntasks
        self.c = self.loop.run_until_complete(aio.connect(url, pool_size=max(8, ntasks)))

    def slice(self, n: int) -> float:
        async def one(i: int) -> None:
            lk = self.c.lock("bench:aio:pairs:%d" % i)
            for _ in range(n):
                await lk.acquire(0)
                await lk.release()

        async def body() -> float:
            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(self.ntasks)))
            return n * self.ntasks / (time.perf_counter() - t0)
        return float(self.loop.run_until_complete(body()))

    def close(self) -> None:
        self.loop.run_until_complete(self.c.close())
        self.loop.close()


class RedispyPairs:
    """redis-py's asyncio Lock (default loop), kept open across slices."""

    def __init__(self, url: str, ntasks: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.ntasks = ntasks
        self.r = aredis.Redis.from_url(url, max_connections=ntasks + 2)

    def slice(self, n: int) -> float:
        async def one(i: int) -> None:
            lk = self.r.lock("bench:redispy:pairs:%d" % i, timeout=30)
            for _ in range(n):
                await lk.acquire()
                await lk.release()

        async def body() -> float:
            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(self.ntasks)))
            return n * self.ntasks / (time.perf_counter() - t0)
        return float(self.loop.run_until_complete(body()))

    def close(self) -> None:
        self.loop.run_until_complete(self.r.aclose() if hasattr(self.r, "aclose")
                                     else self.r.close())
        self.loop.close()


class SyncPairs:
    """Blocking hilock: one thread per task of the asyncio series."""

    def __init__(self, url: str, nthreads: int) -> None:
        self.c = hilock.Client(url, pool_size=max(8, nthreads))
        self.n = nthreads

    def slice(self, n: int) -> float:
        import threading

        def one(i: int) -> None:
            lk = self.c.lock("bench:sync:pairs:%d" % i)
            for _ in range(n):
                lk.acquire(0)
                lk.release()
        t0 = time.perf_counter()
        if self.n == 1:
            one(0)
        else:
            ts = [threading.Thread(target=one, args=(i,)) for i in range(self.n)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        return n * self.n / (time.perf_counter() - t0)

    def close(self) -> None:
        self.c.close()


def pairs_figure(srv: Server, ntasks: int, slices: int, per: int) -> None:
    """Alternating short slices of every series (the load on this shared
    machine drifts within seconds): per-slice ratios, medians."""
    series: Dict[str, Any] = {"blocking": SyncPairs(srv.url, ntasks),
                              "aio": AioPairs(srv.url, "default", ntasks)}
    if uvloop is not None:
        series["aio_uvloop"] = AioPairs(srv.url, "uvloop", ntasks)
    series["redispy_aio"] = RedispyPairs(srv.url, ntasks)
    got: Dict[str, List[float]] = {k: [] for k in ["limit"] + list(series)}
    cpu: Dict[str, List[float]] = {k: [] for k in series}  # this process's CPU per pair
    try:
        for s in series.values():
            s.slice(50)  # warm: connections, scripts
        for _ in range(slices):
            if ntasks == 1:
                got["limit"].append(limit_pairs(srv, per * 2))
            for k, s in series.items():
                c0 = time.process_time()
                got[k].append(s.slice(per))
                cpu[k].append((time.process_time() - c0) * 1e6 / (per * ntasks))
    finally:
        for s in series.values():
            s.close()
    med = {k: statistics.median(v) for k, v in got.items() if v}

    def ratio(a: str, b: str) -> Tuple[float, float, float]:
        rs = sorted(x / y for x, y in zip(got[a], got[b]))
        return statistics.median(rs), rs[len(rs) // 4], rs[(3 * len(rs)) // 4]

    who = "one task / one thread" if ntasks == 1 else "%d tasks / %d threads, a lock each" % (
        ntasks, ntasks)
    print("\n1. uncontended pairs/s, %s: %d alternating slices of %d pairs per task (medians)"
          % (who, slices, per))
    if "limit" in med:
        print("   limit (1/2 redis-benchmark -c1 EVALSHA lock script)  %8.0f" % med["limit"])
    for k, label in (("blocking", "blocking hilock"), ("aio", "hilock.aio, default loop"),
                     ("aio_uvloop", "hilock.aio, uvloop"),
                     ("redispy_aio", "redis-py asyncio Lock, default loop")):
        if k in med:
            extra = "  %.2f of limit" % (med[k] / med["limit"]) if "limit" in med else ""
            print("   %-52s %8.0f%s  (client CPU %.1f us/pair)"
                  % (label, med[k], extra, statistics.median(cpu[k])))
    print("   aio / blocking             %.2f (slices q1..q3 %.2f..%.2f)  target >= 0.8"
          % ratio("aio", "blocking"))
    if "aio_uvloop" in med:
        print("   aio on uvloop / blocking   %.2f (slices q1..q3 %.2f..%.2f)"
              % ratio("aio_uvloop", "blocking"))
    print("   aio / redis-py asyncio     %.2f (slices q1..q3 %.2f..%.2f)  target >= 1.5"
          % ratio("aio", "redispy_aio"))


# --------------------------------------------------------------------- 2 --

async def aio_handoff(url: str, waiters: int, rounds: int) -> List[float]:
    c = await aio.connect(url)
    name = "bench:aio:handoff"
    lat: List[float] = []
    released = [0.0]
    holder = [-1]

    async def worker(i: int) -> None:
        lk = c.lock(name)
        for _ in range(rounds):
            await lk.acquire(wait=30, lease=10)
            now = time.perf_counter()
            if released[0] and holder[0] != i:
                lat.append(now - released[0])
            holder[0] = i
            await asyncio.sleep(0.002)
            released[0] = time.perf_counter()
            await lk.release()
            while holder[0] == i:  # queue again only once another has it
                await asyncio.sleep(0.0005)
                if all(t.done() for t in others if t is not asyncio.current_task()):
                    break

    others: List["asyncio.Task[None]"] = []
    others.extend(asyncio.create_task(worker(i)) for i in range(waiters + 1))
    await asyncio.gather(*others)
    await c.close()
    return lat


def _sync_handoff_worker(url: str, name: str, i: int, rounds: int, shared: Any,
                         q: Any) -> None:
    c = hilock.Client(url)
    lk = c.lock(name)
    lat = []
    for _ in range(rounds):
        lk.acquire(wait=30, lease=10)
        now = time.monotonic()
        with shared.get_lock():
            rel, who = shared[0], shared[1]
        if rel and int(who) != i:
            lat.append(now - rel)
        with shared.get_lock():
            shared[1] = i
        time.sleep(0.002)
        with shared.get_lock():
            shared[0] = time.monotonic()
        lk.release()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            with shared.get_lock():
                if int(shared[1]) != i:
                    break
            time.sleep(0.0005)
    c.close()
    q.put(lat)


def sync_handoff(url: str, waiters: int, rounds: int) -> List[float]:
    shared = CTX.Array("d", [0.0, -1.0])
    q = CTX.Queue()
    ps = [CTX.Process(target=_sync_handoff_worker,
                      args=(url, "bench:sync:handoff", i, rounds, shared, q))
          for i in range(waiters + 1)]
    for p in ps:
        p.start()
    lat: List[float] = []
    for _ in ps:
        lat += q.get(timeout=120)
    for p in ps:
        p.join()
    return lat


# --------------------------------------------------------------------- 3 --

def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def nthreads() -> int:
    return len(os.listdir("/proc/self/task"))


async def many_waiters(url: str, n: int) -> Dict[str, Any]:
    c = await aio.connect(url, pool_size=8)
    name = "bench:aio:many"
    holder = c.lock(name, thread_id=10**9)
    assert await holder.acquire(0, lease=60)
    inside = [0]
    worst = [0]
    granted = [0]
    import gc
    gc.collect()
    rss0, th0 = rss_kib(), nthreads()

    async def waiter() -> None:
        lk = c.lock(name)
        await lk.acquire(wait=None, lease=60)
        inside[0] += 1
        worst[0] = max(worst[0], inside[0])
        granted[0] += 1
        inside[0] -= 1
        await lk.release()

    tasks = [asyncio.create_task(waiter()) for _ in range(n)]
    t0 = time.monotonic()
    while sum(len(ch.members) for ch in c._pubsub.channels.values()) < n:
        await asyncio.sleep(0.05)
        if time.monotonic() - t0 > 120:
            raise RuntimeError("waiters did not all subscribe")
    settle = time.monotonic() - t0
    th_samples = []
    for _ in range(10):
        th_samples.append(nthreads())
        await asyncio.sleep(0.05)
    rss1 = rss_kib()
    t1 = time.monotonic()
    await holder.release()
    while granted[0] < n:
        th_samples.append(nthreads())
        await asyncio.sleep(0.1)
    await asyncio.gather(*tasks)
    total = time.monotonic() - t1
    r = redispy.Redis.from_url(url)
    left = r.exists(name)
    numsub = r.pubsub_numsub("redisson_lock__channel:{%s}" % name)[0][1]
    r.close()
    await c.close()
    return {"waiters": n, "granted": granted[0], "max_inside": worst[0],
            "threads_before": th0, "threads_min": min(th_samples), "threads_max": max(th_samples),
            "rss_before_kib": rss0, "rss_waiting_kib": rss1,
            "rss_per_waiter_b": (rss1 - rss0) * 1024 / n, "queue_s": settle,
            "all_granted_s": total, "per_handoff_ms": total * 1000 / n,
            "left": left, "subscribers_left": numsub}


def _many_child(url: str, n: int, loop_kind: str, q: Any) -> None:
    q.put(run_on(loop_kind, many_waiters(url, n)))


def many_waiters_proc(url: str, n: int, loop_kind: str) -> Dict[str, Any]:
    q = CTX.Queue()
    p = CTX.Process(target=_many_child, args=(url, n, loop_kind, q))
    p.start()
    res = q.get(timeout=600)
    p.join()
    return res  # type: ignore[no-any-return]


def many_waiters_figure(srv: Any, waiters: int) -> None:
    print("\n3. %d concurrent waiters on one name, one loop, one process" % waiters)
    for kind in ["default"] + (["uvloop"] if uvloop is not None else []):
        m = many_waiters_proc(srv.url, waiters, kind)
        print("   %-8s granted %d/%d (at most %d inside at once); threads %d before, %d..%d "
              "while waiting and handing off; RSS %.1f -> %.1f MiB = %.0f bytes per waiter; "
              "queued in %.1f s; all granted in %.1f s (%.2f ms per hand-off); left: key %d, "
              "subscribers %d" % (kind, m["granted"], m["waiters"], m["max_inside"],
                                  m["threads_before"], m["threads_min"], m["threads_max"],
                                  m["rss_before_kib"] / 1024, m["rss_waiting_kib"] / 1024,
                                  m["rss_per_waiter_b"], m["queue_s"], m["all_granted_s"],
                                  m["per_handoff_ms"], m["left"], m["subscribers_left"]))


# --------------------------------------------------------------------- 4 --

async def cancel_latency(url: str, samples: int, fair: bool) -> List[float]:
    c = await aio.connect(url)
    name = "bench:aio:cancel:%s" % ("fair" if fair else "re")
    mk = c.fair_lock if fair else c.lock
    holder = mk(name, thread_id=10**9)
    assert await holder.acquire(0, lease=60)
    lat = []
    for _ in range(samples):
        t = asyncio.create_task(mk(name).acquire(wait=30, lease=5))
        # asleep on the message: subscribed and the retry after it failed
        while not any(w.fut is not None for ch in c._pubsub.channels.values()
                      for w in ch.members):
            await asyncio.sleep(0.001)
        t0 = time.perf_counter()
        t.cancel()
        try:
            await t
        except asyncio.CancelledError:
            pass
        lat.append(time.perf_counter() - t0)
    await holder.release()
    await c.close()
    return lat


async def cancel_many(url: str, n: int, fair: bool) -> Dict[str, int]:
    c = await aio.connect(url)
    name = "bench:aio:cancelmany:%s" % ("fair" if fair else "re")
    mk = c.fair_lock if fair else c.lock
    holder = mk(name, thread_id=10**9)
    assert await holder.acquire(0, lease=60)
    tasks = [asyncio.create_task(mk(name).acquire(wait=60, lease=5)) for _ in range(n)]
    while sum(len(ch.members) for ch in c._pubsub.channels.values()) < n:
        await asyncio.sleep(0.02)
    r = redispy.Redis.from_url(url)
    queued = r.llen("redisson_lock_queue:{%s}" % name)
    for t in tasks:
        t.cancel()
    res = await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(0.2)
    out = {"waits": n, "queued_before": queued,
           "cancelled": sum(isinstance(x, asyncio.CancelledError) for x in res),
           "holders_left": r.hlen(name) - 1,
           "queue_left": r.llen("redisson_lock_queue:{%s}" % name),
           "timeouts_left": r.zcard("redisson_lock_timeout:{%s}" % name),
           "subscribed_channels_left": len(r.pubsub_channels("redisson_lock__channel:{%s}*" % name))}
    await holder.release()
    r.close()
    await c.close()
    return out


# ------------------------------------------------------------------- main --

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slices", type=int, default=15)
    ap.add_argument("--pairs", type=int, default=300, help="pairs per slice and series")
    ap.add_argument("--handoffs", type=int, default=30, help="rounds per hand-off worker")
    ap.add_argument("--waiters", type=int, default=10000)
    ap.add_argument("--cancels", type=int, default=200)
    ap.add_argument("--only", choices=["pairs", "pairs1", "waiters"], default=None,
                    help="pairs: figure 1 only; pairs1: its one-task half only; "
                         "waiters: figure 3 only")
    a = ap.parse_args()
    srv = Server()
    try:
        print("hilock.aio bench: redis-server on 127.0.0.1:%d, Python %s, %d cores (shared: "
              "ratios in the same run are what count)" % (srv.port, sys.version.split()[0],
                                                          os.cpu_count() or 0))
        if a.only == "waiters":
            many_waiters_figure(srv, a.waiters)
            return
        pairs_figure(srv, 1, a.slices, a.pairs)
        if a.only == "pairs1":
            return
        pairs_figure(srv, 8, max(3, a.slices // 2), max(50, a.pairs // 4))
        if a.only == "pairs":
            return

        h_aio = run_on("default", aio_handoff(srv.url, 8, a.handoffs))
        h_sync = sync_handoff(srv.url, 8, a.handoffs)
        print("\n2. hand-off, 1 holder + 8 waiters, %d rounds each" % a.handoffs)
        print("   hilock.aio (9 tasks, one loop)   p50 %.3f ms  p90 %.3f ms  (%d hand-offs)"
              % (pct(h_aio, .5) * 1e3, pct(h_aio, .9) * 1e3, len(h_aio)))
        print("   blocking hilock (9 processes)   p50 %.3f ms  p90 %.3f ms  (%d hand-offs)"
              % (pct(h_sync, .5) * 1e3, pct(h_sync, .9) * 1e3, len(h_sync)))
        print("   aio / blocking p50: %.2f  target <= 1.5" % (pct(h_aio, .5) / pct(h_sync, .5)))

        many_waiters_figure(srv, a.waiters)

        print("\n4. cancellation")
        for fair in (False, True):
            lat = run_on("default", cancel_latency(srv.url, a.cancels, fair))
            print("   %-9s cancel -> acquire returns: p50 %.3f ms  p90 %.3f ms  max %.3f ms "
                  "(%d samples)  target p50 <= 1 ms" % ("fair" if fair else "reentrant",
                                                       pct(lat, .5) * 1e3, pct(lat, .9) * 1e3,
                                                       max(lat) * 1e3, len(lat)))
        for fair in (False, True):
            m = run_on("default", cancel_many(srv.url, 1000, fair))
            print("   %-9s %s" % ("fair" if fair else "reentrant",
                                  ", ".join("%s %d" % kv for kv in m.items())))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
