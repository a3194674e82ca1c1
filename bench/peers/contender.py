"""Python contenders of the peer benchmark (bench/peers/run.sh, peers.py).

    python contender.py LIB SCENARIO key=value...

LIB: hilock | redis-py | python-redis-lock | pottery | redis-py-asyncio | aioredlock | hilock-aio.
SCENARIO and its JSON output are the same for every contender of the
benchmark; see contender.c for the list. Each library is used the way its
README shows: its own defaults for how a waiter waits (redis-py polls every
0.1 s, python-redis-lock blocks on BLPOP, pottery retries in a loop), and a
10 s lease where the library wants one (hilock takes none: the watchdog).
"""
import asyncio
import json
import os
import sys
import threading
import time

import redis

LEASE_S = 10
now_ns = time.monotonic_ns  # CLOCK_MONOTONIC: comparable across processes


def args():
    out = {}
    for a in sys.argv[3:]:
        k, _, v = a.partition("=")
        out[k] = v
    return out


A = args()


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def wait_go():
    emit_line("ready")
    sys.stdin.readline()


def emit_line(s):
    sys.stdout.write(s + "\n")
    sys.stdout.flush()


def percentiles(lat, n, elapsed_ns):
    lat.sort()
    return {"pairs_per_s": n * 1e9 / elapsed_ns, "p50_us": lat[n // 2] / 1e3,
            "p99_us": lat[n * 99 // 100] / 1e3}


# --- blocking libraries: factory(key) -> (acquire(), release()) ----------

def sync_factory(lib, urls, threads=1):
    """Returns make(key) -> (acquire, release) closures for one thread."""
    if lib == "hilock":
        import hilock
        clients = [hilock.Client(u, pool_size=threads + 1) for u in urls]
        if len(urls) > 1:
            def make(key):
                m = hilock.RedLock([c.lock(key) for c in clients])
                return (lambda: m.acquire(lease=LEASE_S), m.release)
            return make

        def make(key):
            lk = clients[0].lock(key)
            return (lambda: lk.acquire(), lk.release)
        return make
    rs = [redis.Redis.from_url(u, max_connections=max(threads, 1) + 2) for u in urls]
    if lib == "redis-py":
        def make(key):
            lk = rs[0].lock(key, timeout=LEASE_S)
            return (lambda: lk.acquire(blocking=True), lk.release)
        return make
    if lib == "python-redis-lock":
        import redis_lock

        def make(key):
            lk = redis_lock.Lock(rs[0], key, expire=LEASE_S)
            return (lambda: lk.acquire(blocking=True), lk.release)
        return make
    if lib == "pottery":
        from pottery import Redlock

        def make(key):
            lk = Redlock(key=key, masters=set(rs), auto_release_time=LEASE_S)
            return (lambda: lk.acquire(blocking=True, timeout=-1), lk.release)
        return make
    raise SystemExit("contender.py: unknown sync library " + lib)


def run_pairs(make, n, warm):
    acquire, release = make(A["key"])
    lat = [0] * n
    t0 = 0
    for i in range(-warm, n):
        s = now_ns()
        if i == 0:
            t0 = s
        if not acquire():
            raise SystemExit("acquire failed")
        release()
        if i >= 0:
            lat[i] = now_ns() - s
    emit(percentiles(lat, n, now_ns() - t0))


def run_threads(make, nthreads, ms):
    counts = [0] * nthreads
    start = now_ns() + 300_000_000
    end = start + ms * 1_000_000

    def body(i):
        acquire, release = make("%s:%d" % (A["key"], i))
        while now_ns() < start:
            time.sleep(0.0001)
        c = 0
        while now_ns() < end:
            acquire()
            release()
            c += 1
        counts[i] = c
    ts = [threading.Thread(target=body, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    emit({"pairs_per_s": sum(counts) * 1e9 / (now_ns() - start)})


def read_counter(fd):
    return int.from_bytes(os.pread(fd, 8, 0).ljust(8, b"\0"), "little")


def run_handoff(make, nthreads, ms, counter):
    fd = os.open(counter, os.O_RDWR)
    gap = int(A.get("gap", 1))
    hold = int(A.get("hold_us", 0)) / 1e6
    makers = [make(A["key"]) for _ in range(nthreads)]
    wait_go()
    end = now_ns() + ms * 1_000_000
    events = [[] for _ in range(nthreads)]

    def body(i):
        acquire, release = makers[i]
        while True:
            req = now_ns()
            if not acquire():
                raise SystemExit("acquire failed")
            acq = now_ns()
            mine = read_counter(fd) + 1
            os.pwrite(fd, mine.to_bytes(8, "little"), 0)
            if hold:
                time.sleep(hold)
            unl = now_ns()
            release()
            if acq >= end:
                break
            events[i].append([req, acq, unl])
            while read_counter(fd) < mine + gap and now_ns() < end:
                time.sleep(0.00005)
    ts = [threading.Thread(target=body, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    emit({"events": [e for ev in events for e in ev]})


# --- asyncio libraries ------------------------------------------------------

async def async_factory(lib, urls):
    if lib == "hilock-aio":
        import hilock.aio as haio
        clients = [await haio.connect(u) for u in urls]
        if len(urls) > 1:
            def make(key):
                m = haio.RedLock([c.lock(key) for c in clients])
                return (lambda: m.acquire(lease=LEASE_S), m.release)
            return make

        def make(key):
            lk = clients[0].lock(key)
            return (lambda: lk.acquire(), lk.release)
        return make
    if lib == "redis-py-asyncio":
        import redis.asyncio as aredis
        r = aredis.Redis.from_url(urls[0])

        def make(key):
            lk = r.lock(key, timeout=LEASE_S)
            return (lambda: lk.acquire(blocking=True), lk.release)
        return make
    if lib == "aioredlock":
        from aioredlock import Aioredlock
        mgr = Aioredlock(urls)

        def make(key):
            box = {}

            async def acquire():
                box["lock"] = await mgr.lock(key, lock_timeout=LEASE_S)
                return True

            async def release():
                await mgr.unlock(box.pop("lock"))
            return (acquire, release)
        return make
    raise SystemExit("contender.py: unknown asyncio library " + lib)


async def arun(lib, scenario, urls):
    make = await async_factory(lib, urls)
    if scenario in ("pairs", "redlock"):
        n, warm = int(A["n"]), int(A.get("warm", 100))
        acquire, release = make(A["key"])
        lat = [0] * n
        t0 = 0
        for i in range(-warm, n):
            s = now_ns()
            if i == 0:
                t0 = s
            await acquire()
            await release()
            if i >= 0:
                lat[i] = now_ns() - s
        emit(percentiles(lat, n, now_ns() - t0))
    elif scenario == "threads":
        ntasks, ms = int(A.get("threads", 16)), int(A["ms"])
        start = now_ns()
        end = start + ms * 1_000_000

        async def body(i):
            acquire, release = make("%s:%d" % (A["key"], i))
            c = 0
            while now_ns() < end:
                await acquire()
                await release()
                c += 1
            return c
        counts = await asyncio.gather(*(body(i) for i in range(ntasks)))
        emit({"pairs_per_s": sum(counts) * 1e9 / (now_ns() - start)})
    else:
        raise SystemExit("contender.py: %s has no %s scenario" % (lib, scenario))


def main():
    lib, scenario = sys.argv[1], sys.argv[2]
    urls = A["urls"].split(",") if "urls" in A else [A["url"]]
    if lib in ("redis-py-asyncio", "aioredlock", "hilock-aio"):
        if os.environ.get("HILOCK_AIO_LOOP") == "uvloop":
            import uvloop
            uvloop.install()
        asyncio.run(arun(lib, scenario, urls))
        return
    threads = int(A.get("threads", 1))
    make = sync_factory(lib, urls, threads)
    if scenario in ("pairs", "redlock"):
        run_pairs(make, int(A["n"]), int(A.get("warm", 100)))
    elif scenario == "threads":
        run_threads(make, threads, int(A["ms"]))
    elif scenario == "handoff":
        run_handoff(make, threads, int(A["ms"]), A["counter"])
    else:
        raise SystemExit("contender.py: %s has no %s scenario" % (lib, scenario))
    # every scenario ended: exit without waiting for library threads
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
