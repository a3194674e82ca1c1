#!/usr/bin/env python3
"""The double-hold checker of safety.py (analyse) on small made-up histories:
what it must call a double hold not told first, and what it must not; and
the nemesis keeping each quiet gap when its faults run long.
run.sh runs it before every schedule (about 2 s).

    build/venv/bin/python tests/safety/test_checker.py BUILD_DIR/safety-checker
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safety  # noqa: E402

S = 1_000_000_000


def grant(p: int, n: int, inv: float, ret: float, lease_ms: int, rel: float,
          rel_res: str = "ok", writes: List[float] = ()) -> List[Dict[str, Any]]:
    """One client's acquire (granted), writes and release, times in s."""
    g = f"{p}.{n}"
    tok = int(ret * 1000)
    ev: List[Dict[str, Any]] = [
        {"ev": "inv", "op": "acq", "id": n * 10, "t": int(inv * S), "lease_ms": lease_ms, "p": p},
        {"ev": "ret", "op": "acq", "id": n * 10, "t": int(ret * S), "res": "ok", "token": tok,
         "grant": g, "p": p}]
    for k, w in enumerate(writes):
        ev += [{"ev": "inv", "op": "write", "id": n * 10 + 1 + k, "t": int(w * S), "token": tok,
                "grant": g, "p": p},
               {"ev": "ret", "op": "write", "id": n * 10 + 1 + k, "t": int(w * S) + 1000,
                "res": "ok", "p": p}]
    ev += [{"ev": "inv", "op": "rel", "id": n * 10 + 9, "t": int(rel * S), "grant": g, "p": p},
           {"ev": "ret", "op": "rel", "id": n * 10 + 9, "t": int(rel * S) + 1000, "res": rel_res,
            "p": p}]
    return ev


def run(checker: str, evs: List[Dict[str, Any]]) -> Dict[str, Any]:
    evs = sorted(evs, key=lambda e: e["t"])
    return safety.analyse(evs, [], [], evs[-1]["t"], checker, None, 10.0)


def main() -> int:
    checker = sys.argv[1]
    fails = 0

    def expect(what: str, r: Dict[str, Any], double: int, not_told: int) -> None:
        nonlocal fails
        ok = r["double_holds"] == double and r["not_told"] == not_told
        fails += 0 if ok else 1
        print(f"  {'ok  ' if ok else 'FAIL'}  {what}: double holds {r['double_holds']} (want "
              f"{double}), not told first {r['not_told']} (want {not_told})")

    # fixed-stop-client-long, seed 634195765 (async, python): client 2
    # invoked its acquire at 10.0 s, was stopped 5.5 s before the reply was
    # read, and returned "granted" at 15.5 s, long after its 1.5 s lease
    # ended (it wrote nothing, and its release said not owner); client 1,
    # granted at 15.2 s after that lease ended, still held the lock then.
    # The late grant held nothing: its own lease's end (by its invoke)
    # came before it returned, so the pair is told first.
    expect("a fixed-lease grant that returns after its own lease ended",
           run(checker, grant(1, 1, 15.0, 15.2, 1500, 15.9, writes=[15.3, 15.6]) +
               grant(2, 1, 10.0, 15.5, 1500, 15.55, rel_res="notowner")), 1, 0)
    # the same pair, client 2 granted within its lease (returned 0.1 s after
    # its invoke): two holders at once, the earlier one not told
    expect("a fixed-lease grant inside another's lease",
           run(checker, grant(1, 1, 15.0, 15.2, 1500, 15.9, writes=[15.3, 15.6]) +
               grant(2, 1, 15.4, 15.5, 1500, 15.8, writes=[15.6])), 1, 1)
    # watchdog leases: a second grant while the first holder holds, no
    # report to it
    expect("a watchdog grant while another holds, nobody told",
           run(checker, grant(1, 1, 1.0, 1.1, 0, 3.0, writes=[1.5]) +
               grant(2, 1, 1.2, 2.0, 0, 2.5, writes=[2.1])), 1, 1)
    # one after the other: no double hold
    expect("grants one after the other",
           run(checker, grant(1, 1, 1.0, 1.1, 0, 2.0) + grant(2, 1, 1.5, 2.1, 0, 2.5)), 0, 0)
    # liveness: a heal is judged only while the group's clients still run
    # for the bound (10 s) after it. Clients that end at 20 s (they opened
    # before a slower group, so they stop first): the heal at 15 s cannot be
    # followed by a grant of theirs, the one at 5 s must be
    ends = [{"ev": "end", "t": 20 * S, "p": 1}, {"ev": "end", "t": 20 * S, "p": 2}]
    hist = grant(1, 1, 1.0, 1.1, 0, 2.0) + grant(2, 1, 5.5, 6.0, 0, 6.5) + ends
    evs = sorted(hist, key=lambda e: e["t"])
    r = safety.analyse(evs, [], [5 * S, 15 * S], 21 * S, checker, None, 10.0)
    ok = r["live_ok"]
    fails += 0 if ok else 1
    print(f"  {'ok  ' if ok else 'FAIL'}  a heal less than the bound before the clients stop is not "
          f"judged: live {r['live_ok']} (want True)")
    hist = grant(1, 1, 1.0, 1.1, 0, 2.0) + ends
    evs = sorted(hist, key=lambda e: e["t"])
    r = safety.analyse(evs, [], [5 * S], 21 * S, checker, None, 10.0)
    ok = not r["live_ok"]
    fails += 0 if ok else 1
    print(f"  {'ok  ' if ok else 'FAIL'}  no grant after a heal 15 s before the clients stop: "
          f"live {r['live_ok']} (want False)")

    # the nemesis: three faults planned 0.1 s long with 0.3 s quiet gaps,
    # each taking 0.5 s to apply (a slow Sentinel split under load): every
    # heal must still be followed by its planned gap before the next fault
    nem = safety.Nemesis.__new__(safety.Nemesis)
    nem.schedule = [(0.0, "slow", {"secs": 0.1}), (0.4, "slow", {"secs": 0.1}),
                    (0.8, "slow", {"secs": 0.1})]
    nem.faults, nem.log, nem.heals, nem.active_s = [], [], [], 10.0
    nem.stop = threading.Event()
    nem._apply = lambda f, p: time.sleep(0.5)  # type: ignore[method-assign]
    th = threading.Thread(target=nem.run, args=(safety.mono(),), daemon=True)
    th.start()
    deadline = time.monotonic() + 30
    while len(nem.log) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    nem.stop.set()
    th.join(5)
    gaps = [(b["start"] - a["end"]) / S for a, b in zip(nem.log, nem.log[1:])]
    ok = len(nem.log) == 3 and all(g >= 0.29 for g in gaps)
    fails += 0 if ok else 1
    print(f"  {'ok  ' if ok else 'FAIL'}  faults that run long keep their quiet gaps: "
          f"{', '.join('%.2f s' % g for g in gaps)} between heal and next fault (want >= 0.3 s)")
    # and a schedule moved back past the active part (active_s) stops there:
    # the clients' tail after the last heal is kept. The third fault is moved
    # back by at least 0.8 s (two applies of >= 0.5 s for 0.1 s planned), so
    # it would end past 1.7 s; the second ends by 1.65 s unless the first
    # apply took over 1.2 s
    nem.schedule, nem.log, nem.active_s = nem.schedule, [], 1.65
    nem.stop = threading.Event()
    th = threading.Thread(target=nem.run, args=(safety.mono(),), daemon=True)
    th.start()
    time.sleep(3.0)
    nem.stop.set()
    th.join(5)
    ok = len(nem.log) == 2
    fails += 0 if ok else 1
    print(f"  {'ok  ' if ok else 'FAIL'}  no fault starts past the active part once moved back: "
          f"{len(nem.log)} of 3 ran (want 2)")
    fails += proxy_high_fds()
    print(f"checker self-test: {'ok' if not fails else f'{fails} failed'}")
    return 1 if fails else 0


def proxy_high_fds() -> int:
    """The fault proxy forwards on a connection whose descriptors are above
    1023 (FD_SETSIZE). The long schedule's Sentinel splits took the harness
    process past 1024 descriptors (session 12, seed 634195765): select()
    then raised ValueError in every new connection's pump thread, which left
    the connection open and silent, so its descriptors never came back, and
    no sentinel query through the proxies was answered again: no grant in any
    group after the first split. 1 on failure."""
    import resource
    import socket
    need = 1200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need and (hard == resource.RLIM_INFINITY or hard >= need):
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    elif soft < need:
        print(f"  skip  proxy on descriptors above 1023: the limit is {hard}")
        return 0
    echo = socket.socket()
    echo.bind(("127.0.0.1", 0))
    echo.listen(4)

    def serve() -> None:
        try:
            c, _ = echo.accept()
            with c:
                while True:
                    d = c.recv(64)
                    if not d:
                        return
                    c.sendall(d)
        except OSError:
            return
    threading.Thread(target=serve, daemon=True).start()
    proxy = safety.FaultProxy(echo.getsockname()[1])  # listening below 1024, as in that run
    hog = [os.open(os.devnull, os.O_RDONLY) for _ in range(1030)]
    got = b""
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=3) as cl:
            cl.sendall(b"ping")
            cl.settimeout(3)
            try:
                got = cl.recv(64)
            except OSError:
                pass
    finally:
        proxy.close()
        echo.close()
        for fd in hog:
            os.close(fd)
    ok = got == b"ping"
    print(f"  {'ok  ' if ok else 'FAIL'}  the fault proxy forwards on descriptors above 1023: "
          f"{got!r} back (want b'ping')")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
