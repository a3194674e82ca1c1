"""One torture process (see test_torture.py): THREADS threads take locks
through the fault proxy for DURATION seconds and write a JSON summary.

argv: proxy_url server_port seed duration out_file

- "x:*" names (watchdog, never force-unlocked): inside the lock a thread
  claims the marker key "inside:<name>" with SET NX on its own direct
  connection; a claim that fails means two holders at once.
- "c:*" names (short fixed leases, forced unlocks by a chaos thread): no
  exclusion claim (a forced unlock takes the lock away by design), only
  that every call returns in bounded time with a hilock error or success.
"""

import json
import random
import sys
import threading
import time

import hilock
from conftest import Redis

THREADS = 4
EXCL = ["x:%d" % i for i in range(3)]
CHAOS = ["c:%d" % i for i in range(3)]
CONNECT_S = COMMAND_S = 0.5


def main() -> None:
    url, port, seed, duration, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        float(sys.argv[4]), sys.argv[5]
    rnd = random.Random(seed)
    stats = {"acquired": 0, "timeouts": 0, "errors": {}, "overlaps": [], "max_overrun": 0.0,
             "release_failed": {}, "lost": 0, "forced": 0, "unreleased_owners": [], "phantoms": []}
    mu = threading.Lock()
    client = None
    for _ in range(50):  # the open's own checks go through the faults too
        try:
            client = hilock.Client(url, connect_timeout=CONNECT_S, command_timeout=COMMAND_S,
                                   watchdog_lease=10.0)
            break
        except hilock.ConnectionError:
            time.sleep(0.1)
    assert client is not None, "could not open a client through the fault proxy"
    end = time.monotonic() + duration

    def note_error(e: BaseException) -> None:
        with mu:
            k = type(e).__name__
            stats["errors"][k] = stats["errors"].get(k, 0) + 1

    def worker(i: int) -> None:
        r = random.Random(seed * 100 + i)
        direct = Redis(port)
        me = "%d:%d" % (seed, i)
        while time.monotonic() < end:
            excl = r.random() < 0.6
            name = r.choice(EXCL if excl else CHAOS)
            lk = client.fair_lock(name) if r.random() < 0.3 else client.lock(name)
            wait = r.choice([0, 0.05, 0.2, 0.5])
            lease = None if excl else r.choice([0.3, 0.8])
            t0 = time.monotonic()
            try:
                ok = lk.acquire(wait=wait, lease=lease)
            except hilock.Error as e:
                note_error(e)
                ok = False
            took = time.monotonic() - t0
            # bound: the wait, then per attempt a connect + a command, a
            # settle, and scheduling slack on a loaded 2-core machine
            over = took - wait - 3 * (CONNECT_S + COMMAND_S)
            with mu:
                stats["max_overrun"] = max(stats["max_overrun"], over)
            if not ok:
                with mu:
                    stats["timeouts"] += 1
                continue
            with mu:
                stats["acquired"] += 1
            if excl:
                try:
                    claimed = direct("SET", "inside:" + name, me, "NX", "PX", 60000)
                except Exception:
                    claimed = "?"
                if claimed is None:
                    holder = direct("GET", "inside:" + name)
                    with mu:
                        stats["overlaps"].append([name, me, holder, lk.lost])
                time.sleep(r.random() * 0.02)
                if claimed == "OK" and direct("GET", "inside:" + name) == me:
                    direct("DEL", "inside:" + name)
            else:
                time.sleep(r.random() * 0.02)
            # a release that failed on the wire is tried again (new request)
            # until it answers: one hold was taken, one must be given back
            for attempt in range(20):
                try:
                    lk.release()
                    break
                except (hilock.NotOwnerError, hilock.LockLostError):
                    with mu:
                        stats["lost"] += 1
                    break
                except hilock.Error as e:
                    note_error(e)
                    time.sleep(0.05)
            else:
                with mu:
                    stats["release_failed"][name] = stats["release_failed"].get(name, 0) + 1
                    stats["unreleased_owners"].append([name, client.owner()])
                continue
            # one acquire, one release: this thread must hold nothing now
            # (a lost acquire reply answered twice would leave a hold)
            if excl and direct("HEXISTS", name, client.owner()) == 1:
                with mu:
                    stats["phantoms"].append([name, client.owner(),
                                              direct("HGET", name, client.owner())])
        direct.close()

    def chaos() -> None:
        r = random.Random(seed + 7)
        while time.monotonic() < end:
            time.sleep(r.random() * 0.3)
            try:
                if client.lock(r.choice(CHAOS)).force_unlock():
                    with mu:
                        stats["forced"] += 1
            except hilock.Error as e:
                note_error(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    if seed % 2 == 0:
        threads.append(threading.Thread(target=chaos))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    with open(out, "w") as f:
        json.dump(stats, f)


if __name__ == "__main__":
    main()
