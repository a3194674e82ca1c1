"""The safety harness: clients of every driver on one lock each, a fencing
store, a seeded nemesis, and the checkers. See README.md in this folder and
docs/safety.md.

    safety.py [--seed N] [--scenario NAME ...] [--drivers c,async,python,aio,openresty,redisson]
              [--long] [--list] [--keep DIR]

Exit status 1 when a scenario expected to pass shows a violation, or a
self-test scenario (a deliberately broken client or counter) shows none.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("HILOCK_ROOT", os.path.dirname(os.path.dirname(HERE)))
# tests/python first: its conftest.py (the harness) is the one imported here,
# not the fault suite's (fixtures over that harness); faultproxy from faults
sys.path.insert(0, os.path.join(ROOT, "tests", "faults"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from conftest import RedisServer, RespError, wait_for, REDIS_SERVER, _pdeathsig  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402

PROCS = 5
NS = 1_000_000_000


def mono() -> int:
    return time.monotonic_ns()


# ------------------------------------------------------------------ scenarios
# client: options for every worker (ms). faults: the nemesis' menu.
# expect: "pass" (any violation fails the run), "violation" (a self-test:
# the checkers must find one, else the run fails).
WATCHDOG = {"lease_ms": 0, "watchdog_lease_ms": 3000, "command_timeout_ms": 500,
            "connect_timeout_ms": 500, "wait_ms": 2000, "writes": 3, "hold_ms": 60}
FIXED = dict(WATCHDOG, lease_ms=1500)

# faults that keep every hold either alive or reported (the promise of
# DESIGN.md section 6), on one server with its data kept (appendfsync always)
SAFE_FAULTS = ["partition-one", "partition-all", "reset", "latency", "pause-server",
               "stop-client-short", "client-pause", "requests-lost", "replies-lost"]

SCENARIOS: Dict[str, Dict[str, Any]] = {
    "single-watchdog": {
        "topology": "single", "aof": "always", "client": WATCHDOG, "faults": SAFE_FAULTS,
        "seconds": 45, "long_seconds": 600, "expect": "pass",
        "what": "one server (appendfsync always), watchdog leases (3 s), the nemesis' safe menu"},
    "single-fixed": {
        "topology": "single", "aof": "always", "client": FIXED, "faults": SAFE_FAULTS,
        "seconds": 25, "long_seconds": 300, "expect": "pass",
        "what": "one server (appendfsync always), fixed 1.5 s leases; a client stops writing at "
                "4/5 of its lease by its own clock"},
    "single-kill-restart": {
        "topology": "single", "aof": "always", "client": WATCHDOG,
        "faults": ["kill-restart", "partition-one", "reset"], "seconds": 25,
        "long_seconds": 300, "expect": "pass",
        "what": "one server (appendfsync always) killed (-9) and restarted with its AOF"},
    "single-everysec": {
        "topology": "single", "aof": "everysec", "client": WATCHDOG,
        "faults": ["kill-restart"], "seconds": 40, "long_seconds": 300, "expect": "pass",
        "what": "one server, appendfsync everysec, kill -9 and restart (a killed process loses "
                "nothing it wrote to the AOF file; only a machine crash could, not simulated)"},
    "single-one-way": {
        "topology": "single", "aof": "always",
        # holds of 1.2-6 s (4 writes, 0.3-1.5 s apart): a holder silenced
        # past lease - lease/5 must be told in doubt while it holds
        "client": dict(WATCHDOG, writes=4, hold_ms=1500),
        "faults": ["requests-lost", "replies-lost"], "seconds": 40, "long_seconds": 180,
        "expect": "pass",
        "what": "one server, watchdog leases (3 s), holds of 1.2-6 s: one-way silence only "
                "(the requests of the holder (else one client) per driver dropped, or the "
                "replies to it, 0.5-5 s; connections kept open, new ones silent too)"},
    "fixed-one-way": {
        "topology": "single", "aof": "always", "client": FIXED,
        "faults": ["requests-lost", "replies-lost"], "seconds": 40, "long_seconds": 180,
        "expect": "pass",
        "what": "as single-one-way with fixed 1.5 s leases"},
    # ---- self-tests: the checkers must catch these
    "selftest-ignore-lease": {
        "topology": "single", "aof": "no", "client": dict(FIXED, lease_ms=400, hold_ms=300,
                                                          broken="ignore-lease"),
        "faults": [], "seconds": 8, "long_seconds": 8, "expect": "violation", "drivers": ["c", "async"],
        "what": "a broken client that keeps writing past its fixed lease (400 ms, ~700 ms of "
                "writes): double holds not told first, Porcupine Illegal"},
    "selftest-reused-token": {
        "topology": "single", "aof": "no", "client": dict(WATCHDOG, broken="reuse-token"),
        "faults": [], "seconds": 8, "long_seconds": 8, "expect": "violation", "drivers": ["c", "async"],
        "what": "a broken client that writes every grant under its first grant's token (as a "
                "counter reset would hand out): tokens issued again and lowered"},
}

# Self-tests of a deliberately broken library (CMake HILOCK_SAFETY_BREAK, built
# by broken.sh into build/safety/broken-<mode>: never a real build): each must
# fail the checkers. Not in the short run (two more library builds); the long
# run and --scenario NAME run them. "token-reset" is the same fault on the
# real library, which must pass.
SCENARIOS.update({
    "selftest-no-doubt": {
        "topology": "single", "aof": "always",
        # holds of 2.4-12 s, the holder's requests dropped 4-6 s: its lease
        # (3 s) runs out while it holds, and only the doubt rule tells it
        "client": dict(WATCHDOG, writes=6, hold_ms=2000), "faults": ["requests-lost"],
        "fault_secs": {"requests-lost": (4.0, 6.0)}, "build": "no-doubt",
        "seconds": 30, "long_seconds": 30, "expect": "violation", "drivers": ["c", "async"],
        "what": "a library built without the doubt rule (HILOCK_SAFETY_BREAK=no-doubt: renewals "
                "never reported in doubt); the holder's requests dropped 4-6 s"},
    "selftest-token-reset": {
        "topology": "single", "aof": "no", "client": WATCHDOG, "faults": ["token-reset"],
        "build": "token-reset", "seconds": 10, "long_seconds": 10, "expect": "violation",
        "drivers": ["c", "async"],
        "what": "a library built without the token's clock floor (HILOCK_SAFETY_BREAK=token-reset) "
                "while the token counter is reset to 0 every 0.7 s"},
    "token-reset": {
        "topology": "single", "aof": "no", "client": WATCHDOG, "faults": ["token-reset"],
        "seconds": 10, "long_seconds": 30, "expect": "pass",
        "drivers": ["c", "async", "python", "aio", "openresty"],
        "what": "the token counter reset to 0 every 0.7 s (as a restart without data would): "
                "the real library's tokens still never repeat or go down"},
})

# Known to fail on main at 7b6fa8d (issue 29): not in the short run; the long
# run and --scenario NAME run them, and their violations do not fail the run
# while they are listed here (one that passes is reported as XPASS, and
# fails the run, so the entry goes with the fix). The figures are measured
# (docs/safety.md).
SCENARIOS.update({
    "single-restart-empty": {
        "topology": "single", "aof": "no", "client": WATCHDOG,
        "faults": ["kill-restart", "partition-one", "reset"], "seconds": 40, "long_seconds": 300,
        "expect": "pass",
        "what": "one server without persistence, kill -9 and restart empty (no failover)"},
    "release-lost": {
        "topology": "single", "aof": "always", "client": WATCHDOG,
        "faults": ["release-lost"], "seconds": 40, "long_seconds": 300, "expect": "pass",
        "check_stuck": True,
        "what": "a release and its retries never reach the server (connection reset as each "
                "is sent): the lock must end at its lease, not stay with the client"},
    "late-release": {
        "topology": "single", "aof": "always", "client": WATCHDOG,
        "faults": ["late-release"], "seconds": 40, "long_seconds": 300, "expect": "pass",
        "what": "a copy of a release reaches the server 2.5-4 s late (after its 2 s latch), "
                "when the same owner may hold the lock again: it must change nothing"},
    "stop-client-long": {
        "topology": "single", "aof": "always", "client": WATCHDOG,
        "faults": ["stop-client-long"], "seconds": 40, "long_seconds": 300, "expect": "pass",
        "outside": True,
        "what": "a holder SIGSTOPped past its watchdog lease (a GC pause): it cannot be told "
                "in time; fencing must refuse its late writes"},
    "fixed-stop-client-long": {
        "topology": "single", "aof": "always", "client": FIXED,
        "faults": ["stop-client-long"], "seconds": 40, "long_seconds": 300, "expect": "pass",
        "what": "a fixed-lease holder SIGSTOPped past its lease: it must see by its own clock "
                "that the lease is over before it writes again"},
})

SENTINEL_ACK = dict(WATCHDOG, replica_ack=1, command_timeout_ms=1000)
SCENARIOS.update({
    "sentinel-failover": {
        "topology": "sentinel", "aof": "always", "client": SENTINEL_ACK,
        "faults": ["failover", "reset", "stop-client-short"], "seconds": 60,
        "long_seconds": 420, "expect": "pass",
        "what": "Sentinel (1 master + 2 replicas, 3 sentinels), replica_ack on: forced "
                "failovers (SENTINEL FAILOVER), connection resets, paused clients"},
    "sentinel-split-brain": {
        "topology": "sentinel", "aof": "always", "client": SENTINEL_ACK,
        "faults": ["split-brain"], "seconds": 60, "long_seconds": 420, "expect": "pass",
        "what": "Sentinel, replica_ack on: {old master, one client per driver} cut from "
                "{sentinels, replicas, other clients} for 4-8 s: a failover happens behind "
                "the old master's clients"},
    "sentinel-split-brain-noack": {
        "topology": "sentinel", "aof": "always", "client": dict(SENTINEL_ACK, replica_ack=-1),
        "faults": ["split-brain"], "seconds": 60, "long_seconds": 300, "expect": "pass",
        "outside": True,
        "what": "as sentinel-split-brain with replica_ack off"},
    "sentinel-min-replicas": {
        "topology": "sentinel", "aof": "always", "client": SENTINEL_ACK, "min_replicas": 1,
        "faults": ["split-brain"], "seconds": 60, "long_seconds": 300, "expect": "pass",
        "what": "as sentinel-split-brain with min-replicas-to-write 1 (max lag 2 s)"},
    "sentinel-kill-master": {
        "topology": "sentinel", "aof": "always", "client": SENTINEL_ACK,
        "faults": ["kill-master", "pause-master"], "seconds": 60, "long_seconds": 420,
        "expect": "pass",
        "what": "Sentinel, replica_ack on: the master killed (-9, restarted with its AOF after "
                "2-5 s) or paused 0.5-4 s: failovers to a replica"},
})

REDLOCK = dict(WATCHDOG, wait_ms=2000)
SCENARIOS.update({
    "redlock-safe": {
        "topology": "redlock", "aof": "always", "client": REDLOCK,
        "faults": ["partition-one", "reset", "pause-one", "stop-client-short", "restart-some"],
        "seconds": 40, "long_seconds": 300, "expect": "pass", "drivers": ["c", "async", "python", "aio"],
        "what": "Redlock of 5 servers (appendfsync always): partitions, resets, one server "
                "paused, clients paused, 1-2 servers killed and restarted with their data"},
    "redlock-restart-empty": {
        "topology": "redlock", "aof": "no", "client": REDLOCK, "faults": ["restart-some"],
        "seconds": 40, "long_seconds": 300, "expect": "pass", "drivers": ["c", "async", "python", "aio"],
        "what": "Redlock of 5 servers without persistence: 1-2 killed and restarted empty at once"},
})

KNOWN_FAILURES: Dict[str, str] = {
    "stop-client-long": "outside the guarantee: a paused holder cannot be told: seed 51, 30 s: "
                        "c 36, aio 10 double holds not told first, 0 stale writes accepted",
    "sentinel-failover": "outside the guarantee without fencing (docs/safety.md): after a "
                         "forced failover two masters grant for ~0.5 s: seed 7, 40 s: c 1, aio 6 "
                         "double holds not told first; seeds 52, 11: none; 0 tokens issued "
                         "twice, 0 stale writes accepted in all (before 27fe450/0d105d5, seed "
                         "11: c 41 tokens issued twice, 1 stale write accepted)",
    "sentinel-failover/redisson": "outside the guarantee (Redisson's tokens): long schedule, seed "
                                  "634195765, 420 s: 1 stale write accepted, between two grants "
                                  "of one Redisson client (1.130 and 1.141, 1.7 s apart) that "
                                  "Redisson gave the same token: it INCRed the counter on the old "
                                  "master until 147.0 s, 0.6 s after a forced failover, and the "
                                  "new master had missed the last 11 INCRs (692 Redisson tokens "
                                  "issued twice or not above an earlier grant's in the run); the "
                                  "store accepts a token equal to the highest. 2 double holds "
                                  "with a Redisson hold, 0 between hilock holds",
    # c and python: no double hold since the Sentinel name rule (a master
    # listing no replica acknowledges nothing once the client saw the name
    # with one); what is left is liveness under load
    "sentinel-split-brain/c": "liveness only: after a failover the new master acknowledges "
                              "nothing until a replica attaches, sentinels time out, attempts "
                              "stay off a master while one is settled: seed 7, 60 s: no grant "
                              "within the bound after the last heal (15.3 s); seed 52 under "
                              "load 20-32 the same; seeds 52, 11, 7: 0 double holds, 0 stale "
                              "writes accepted",
    "sentinel-split-brain/python": "liveness only, as sentinel-split-brain/c (the same "
                                   "transport)",
    "sentinel-split-brain/aio": "seed 52, 60 s, load 32: 89 double holds not told first with "
                                "no grant to the cut-off client (two masters granting after "
                                "the last heal; not yet explained); seeds 52, 11, 7 at load "
                                "8-11: none; and the liveness of sentinel-split-brain/c",
    # the long schedule of session 12 (seed 634195765, load 58-127): in the
    # split-brain scenarios every group, Redisson's too, without a grant
    # after the first split; not explained beyond what is said here
    "sentinel-split-brain": "liveness only, under load: long schedule, seed 634195765, 420 s, "
                            "load 80-127: no grant in any group after the first split (Redisson's "
                            "too: 7-20 grants each, all before 35.3 s); 0 double holds, 0 stale "
                            "writes accepted. The harness was starved (its nemesis woke up to "
                            "31.5 s late), its sentinel proxies stopped accepting in time from "
                            "92 s, 40 proxy threads died past 1024 descriptors (fixed: poll, "
                            "docs/safety.md). With the harness alone starved to 40 ms of every "
                            "800 ms (seed 52, 40 s, c and python) the wedge comes back (sentinel "
                            "proxies' accept queues at 83-89); with fewer proxy wakeups the "
                            "sentinels answer, but every acquire is refused 'has not answered "
                            "an earlier attempt yet (still being settled)' for the old master "
                            "to the end: not explained yet. At load 8-15 (seeds "
                            "52, 11, 7, 60 s) c, python and aio have grants after each heal; "
                            "openresty seed 52, 30 s, load 5-12: 136 grants, no violation",
    "sentinel-min-replicas": "as sentinel-split-brain (the same run, 300 s, load 58-117): 13-22 "
                             "grants per group, none after the first split, 0 double holds, "
                             "0 stale writes accepted",
    "sentinel-split-brain-noack": "outside the guarantee (replica_ack off): seed 11, 40 s: c 38, "
                                  "python 9, aio 107 double holds not told first, aio 2 tokens "
                                  "issued twice and 2 stale writes accepted (two masters, one "
                                  "millisecond); seed 52: aio 1 double hold",
    "sentinel-min-replicas/aio": "no grant within the bound after the last heal: seed 52, 40 s: "
                                 "10.1 s, 17.2 s, 10.1 s after 4005722 (one more run passed), "
                                 "seed 11: 23.8 s, 33.2 s, 33.2 s after 4005722; 0 double holds, "
                                 "0 tokens issued twice, 0 stale writes accepted (c and python "
                                 "pass). After the heal most aio acquires fail with 'no free "
                                 "connection in the pool (size 8)' (31 and 34 after 4005722, "
                                 "which gives a settling connection's place back): the places "
                                 "were held by refused acquires' connections kept for the "
                                 "replica ack, never given back (fixed in cc48ec0); after it, "
                                 "one run each passed: seed 52 195 grants, seed 11 187",
    "sentinel-kill-master": "0 tokens issued twice, 0 stale writes accepted, every call returned "
                            "(seeds 52, 11, 40 s; before: tokens issued twice, stale writes, aio "
                            "5 of 5 clients stuck in a call); aio no grant after the last heal "
                            "in 3 of 5 runs of seed 52 before 5cf4461 (a sentinel naming a "
                            "replica), 0 of 3 after; seed 11: python 1, aio 5 double holds not "
                            "told first (before 5cf4461), c 1 after (a master paused past a "
                            "failover granted once more on resuming; its holder was told lost "
                            "68 ms later, as the other was granted)",
    # Redisson's, not hilock's (tests/safety/redisson/one_way.py shows it
    # with one Redisson client and no hilock client)
    "single-one-way/redisson": "outside the guarantee (Redisson's, not hilock's): after a "
                               "one-way silence a Redisson client keeps the connection whose "
                               "request or reply was dropped, and every later acquire on it "
                               "fails with RedisResponseTimeoutException (500 ms) while it runs "
                               "on the server, re-entering and renewing the lock for that "
                               "client's thread: nobody else is granted it until the JVM exits. "
                               "Long schedule, seed 634195765, 180 s: no grant in the group for "
                               "83 s (99.5-182.7 s), 80.5 s after a heal (bound 10 s); 0 double "
                               "holds not told first, 0 stale writes accepted",
    "fixed-one-way/redisson": "as single-one-way/redisson (the same faults): seed 634195765, "
                              "180 s: 82.4 s without a grant in the group (its last heal was "
                              "answered in time that run)",
    "single-watchdog/redisson": "as single-one-way/redisson (the menu's one-way silences; a "
                                "reset in the menu ends the stall, when one comes): long "
                                "schedule, second run, seed 634195765, 600 s: no grant in the "
                                "group from 572.0 s to the end (604 s), 4 of the 5 Redisson "
                                "clients failing every acquire from 485-573 s to the end (two of "
                                "them from a server pause at 572.0-573.7 s, not explained: a "
                                "1.5 s pause alone did not do it to a lone Redisson client); "
                                "0 double holds, 0 stale writes accepted. First run: 49.6 s "
                                "without a grant, last heal answered in time",
    "release-lost/redisson": "outside the guarantee (Redisson's, not hilock's): a Redisson "
                             "release that never reached the server leaves the hold, and the "
                             "same thread's next tryLock re-enters it (count 2, 3, ...), so "
                             "every later unlock leaves it held: seed 52, 30 s: that client "
                             "took 118 of 135 grants and no other client (Redisson or hilock) "
                             "was granted the lock in the 21 s after; 0 double holds, 0 stale "
                             "writes",
    "redlock-safe": "liveness only, under load: long schedule, seed 634195765, 300 s, load "
                    "70-90: c 1, async 0, python 0 grants, every member of every attempt 'has "
                    "not answered an earlier attempt yet' (replies through the harness's proxies "
                    "later than the 50 ms member timeout, and a member settling an attempt takes "
                    "no new one: as redlock-restart-empty); aio 1130 grants, each heal followed "
                    "by a grant within 4.0 s but the last (a reset that took 9.8 s to apply) "
                    "ended after the clients had stopped (5a1ecb7 keeps such faults out of the "
                    "tail); 0 double holds, 0 stale writes accepted. Seed 31, 25 s, load 8-14: "
                    "c 39, python 52 grants, no double hold",
    "redlock-restart-empty": "0 double holds, 0 stale writes (seeds 52, 11, 40 s), but c and "
                             "python no grant after the first seconds: the harness's proxies "
                             "answer 3-5 s late with 10-15 clients, every attempt outlives the "
                             "50 ms member timeout and a member settling one takes no new "
                             "attempt (c alone, 20 s: 156 grants, no error)",
}

SHORT = ["single-watchdog", "single-fixed", "single-kill-restart", "selftest-ignore-lease",
         "selftest-reused-token"]
# In the short schedule a driver listed here runs only in the scenarios
# named: the default test run's time is nearly spent (measured 2026-11-29,
# load 10-16: the suite took 136 s with c, python and aio, 147 s with async
# in every short scenario, the difference in single-watchdog). The long
# schedule runs every driver in every scenario.
SHORT_ONLY_IN: Dict[str, List[str]] = {
    "async": ["single-kill-restart", "selftest-ignore-lease", "selftest-reused-token"],
    # five JVMs cost about 15-20 s of start-up in any scenario they join
    # (single-fixed took 48 s instead of 28-33 s, the suite 156 s, at load
    # 18-34): the long schedule only
    "redisson": [],
}


# ------------------------------------------------------------------ topology
class Single:
    """One redis-server; each worker reaches it through a proxy of its own."""

    def __init__(self, aof: str) -> None:
        extra = ["--appendonly", "no"] if aof == "no" else \
            ["--appendonly", "yes", "--appendfsync", aof, "--aof-use-rdb-preamble", "yes"]
        self.server = RedisServer(extra)
        self.proxies: List[FaultProxy] = []

    def url_for_worker(self) -> str:
        p = FaultProxy(self.server.port)
        self.proxies.append(p)
        return p.url()

    def masters(self) -> List[RedisServer]:
        return [self.server]

    def close(self) -> None:
        for p in self.proxies:
            p.close()
        self.server.stop()


class ProxyGroup:
    """One worker's proxies, one per Redlock member: a fault on the group is
    a fault on each."""

    def __init__(self, proxies: List[FaultProxy]) -> None:
        self.proxies = proxies

    def __getattr__(self, name: str) -> Callable[..., None]:
        def each(*a: Any, **kw: Any) -> None:
            for p in self.proxies:
                getattr(p, name)(*a, **kw)
        return each


class Redlock:
    """n independent servers (a Redlock of n); each worker reaches each
    through a proxy of its own, grouped (ProxyGroup)."""

    def __init__(self, aof: str, n: int = 5) -> None:
        extra = ["--appendonly", "no"] if aof == "no" else \
            ["--appendonly", "yes", "--appendfsync", aof]
        self.servers = [RedisServer(extra) for _ in range(n)]
        self.proxies: List[Any] = []

    def url_for_worker(self) -> str:
        ps = [FaultProxy(s.port) for s in self.servers]
        self.proxies.append(ProxyGroup(ps))
        return "|".join(p.url() for p in ps)

    def masters(self) -> List[RedisServer]:
        return self.servers

    def close(self) -> None:
        for g in self.proxies:
            g.close()
        for s in self.servers:
            s.stop()


def _dropped(x: Any) -> int:
    """Chunks a proxy (or each proxy of a ProxyGroup) dropped so far."""
    return sum(q.dropped for q in x.proxies) if isinstance(x, ProxyGroup) else x.dropped


def peer_pid(sock: Any, pids: Dict[int, str]) -> str:
    """The tag of the process (among pids) that opened this loopback
    connection to a proxy: its socket's inode from /proc/net/tcp, then the
    process holding a descriptor on that inode."""
    try:
        host, port = sock.getpeername()[:2]
        mine = sock.getsockname()[1]
        want_local, want_rem = "%04X" % port, "%04X" % mine
        inode = None
        with open("/proc/net/tcp") as f:
            for line in f.readlines()[1:]:
                w = line.split()
                if w[1].endswith(":" + want_local) and w[2].endswith(":" + want_rem):
                    inode = w[9]
                    break
        if inode is None:
            return ""
        link = f"socket:[{inode}]"
        for pid, tag in list(pids.items()):
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    try:
                        if os.readlink(f"/proc/{pid}/fd/{fd}") == link:
                            return tag
                    except OSError:
                        pass
            except OSError:
                pass
    except OSError:
        pass
    return ""


class Sentinel:
    """1 master + 2 replicas + 3 sentinels. Every data node is reached
    through a proxy in front of it, which it announces (replica-announce-port;
    the sentinels monitor the master's proxy), so clients, sentinels and
    replication all pass through the proxies; each connection is tagged by
    the process that opened it (a worker, "sentinel", "server"), so a
    partition can keep some clients with the old master."""

    def __init__(self, aof: str, min_replicas: int = 0) -> None:
        self.pids: Dict[int, str] = {}
        self.aof = aof
        self.front: List[FaultProxy] = []
        self.servers: List[RedisServer] = []
        self.sentinels: List[RedisServer] = []
        self.sproxies: List[FaultProxy] = []
        self.proxies: List[FaultProxy] = []  # (workers have no proxies of their own here)
        persist = ["--appendonly", "no"] if aof == "no" else \
            ["--appendonly", "yes", "--appendfsync", aof]
        for i in range(3):
            fp = FaultProxy(0)  # target set below, once the server's port is known
            fp.tagger = lambda sock: peer_pid(sock, self.pids)
            self.front.append(fp)
        extra_min = ["--min-replicas-to-write", str(min_replicas), "--min-replicas-max-lag", "2"] \
            if min_replicas else []
        for i in range(3):
            extra = persist + ["--replica-announce-ip", "127.0.0.1",
                               "--replica-announce-port", str(self.front[i].port)] + extra_min
            if i > 0:
                extra += ["--replicaof", "127.0.0.1", str(self.front[0].port)]
            srv = RedisServer(extra)
            self.front[i].target = ("127.0.0.1", srv.port)
            self.servers.append(srv)
            self._tag(srv, "server")
        for srv in self.servers[1:]:
            wait_for(lambda srv=srv: "master_link_status:up" in srv("INFO", "replication"), 15,
                     "replica linked")
        for k in range(3):
            sen = _SentinelProc(self.front[0].port)
            self.sentinels.append(sen)
            self._tag(sen, "sentinel")
            sp = FaultProxy(sen.port)
            sp.tagger = lambda sock: peer_pid(sock, self.pids)  # named only while cut
            self.sproxies.append(sp)

        def ready() -> bool:
            for sen in self.sentinels:
                rs = sen("SENTINEL", "replicas", "hm")
                if len(rs) != 2:
                    return False
                for r in rs:
                    f = dict(zip(r[::2], r[1::2]))
                    if f.get("flags") != "slave" or f.get("master-link-status") != "ok":
                        return False
            return True
        wait_for(ready, 30, "every sentinel sees both replicas", step=0.1)

        def met() -> bool:
            for sen in self.sentinels:
                f = sen("SENTINEL", "master", "hm")
                if dict(zip(f[::2], f[1::2])).get("num-other-sentinels") != "2":
                    return False
            return True
        wait_for(met, 30, "every sentinel knows the two others", step=0.1)
        self.url = "redis+sentinel://" + ",".join(f"127.0.0.1:{p.port}" for p in self.sproxies) + "/hm"

    def _tag(self, srv: RedisServer, tag: str) -> None:
        if srv.proc is not None:
            self.pids[srv.proc.pid] = tag

    def tag_worker(self, pid: int, tag: str) -> None:
        self.pids[pid] = tag

    def url_for_worker(self) -> str:
        return self.url

    def all_proxies(self) -> List[FaultProxy]:
        return self.front + self.sproxies

    def master_index(self) -> int:
        for sen in self.sentinels:
            try:
                port = int(sen("SENTINEL", "get-master-addr-by-name", "hm")[1])
                for i, fp in enumerate(self.front):
                    if fp.port == port:
                        return i
            except (OSError, RespError, TypeError):
                pass
        return 0

    def masters(self) -> List[RedisServer]:
        return [self.servers[self.master_index()]]

    def restarted(self, srv: RedisServer) -> None:
        self._tag(srv, "server")

    def close(self) -> None:
        for p in self.front + self.sproxies:
            p.close()
        for s in self.sentinels + self.servers:
            s.kill9()
            s.stop()


class _SentinelProc(RedisServer):
    def __init__(self, master_port: int) -> None:
        self.master_port = master_port
        super().__init__()

    def start(self) -> None:
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
                    f"sentinel monitor hm 127.0.0.1 {self.master_port} 2\n"
                    "sentinel down-after-milliseconds hm 1000\n"
                    "sentinel failover-timeout hm 5000\n")
        self.proc = subprocess.Popen([REDIS_SERVER, conf, "--sentinel"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=_pdeathsig)
        wait_for(lambda: self._pong(), 10, "sentinel PING", step=0.02)

    def _pong(self) -> bool:
        try:
            return self("PING") == "PONG"
        except (OSError, RespError):
            return False


# ------------------------------------------------------------------ nemesis
class Nemesis:
    """A seeded fault schedule: the same seed and scenario give the same list
    of (start offset, fault, parameters); each fault is healed before the next
    starts, then a quiet gap follows."""

    def __init__(self, seed: int, name: str, faults: List[str], active_s: float,
                 procs: Dict[str, List[subprocess.Popen]], topo: Any,
                 proxies_of: Dict[str, List[FaultProxy]], locks: Dict[str, str],
                 logs: Optional[Dict[str, List[str]]] = None,
                 fault_secs: Optional[Dict[str, Tuple[float, float]]] = None) -> None:
        self.r = random.Random(f"{seed}:{name}")
        self.fault_secs = fault_secs or {}  # a scenario's own duration range per fault
        self.logs = logs or {}
        self.faults = faults
        self.active_s = active_s
        self.procs = procs
        self.topo = topo
        self.proxies_of = proxies_of
        self.locks = locks
        self.log: List[Dict[str, Any]] = []
        self.heals: List[int] = []
        self.stop = threading.Event()
        self.schedule = self._plan()

    def _plan(self) -> List[Tuple[float, str, Dict[str, float]]]:
        out: List[Tuple[float, str, Dict[str, float]]] = []
        t = 1.5
        if not self.faults:
            return out
        while True:
            f = self.r.choice(self.faults)
            p: Dict[str, float] = {"proc": self.r.randrange(PROCS)}
            if f in ("partition-one", "partition-all", "requests-lost", "replies-lost"):
                p["secs"] = self.r.uniform(*self.fault_secs.get(f, (0.5, 5.0)))
            elif f == "latency":
                p["secs"] = self.r.uniform(1.0, 4.0)
                p["delay"] = self.r.uniform(0.05, 0.4)
            elif f in ("pause-server", "pause-one"):
                p["secs"] = self.r.uniform(0.3, 4.0)
            elif f == "stop-client-short":
                p["secs"] = self.r.uniform(0.2, 1.2)
            elif f == "stop-client-long":
                p["secs"] = self.r.uniform(3.0, 6.0)
            elif f == "client-pause":
                p["secs"] = self.r.uniform(0.3, 2.0)
            elif f == "kill-restart":
                p["secs"] = self.r.uniform(0.0, 1.5)
            elif f == "token-reset":
                p["secs"] = 0.0
            elif f == "restart-some":
                p["secs"] = self.r.uniform(0.0, 1.0)
                p["count"] = self.r.choice([1, 1, 2])
                p["first"] = self.r.randrange(5)
            elif f == "split-brain":
                p["secs"] = self.r.uniform(4.0, 8.0)
            elif f == "failover":
                p["secs"] = 0.0
            elif f == "kill-master":
                p["secs"] = self.r.uniform(2.0, 5.0)
            elif f == "pause-master":
                p["secs"] = self.r.uniform(0.5, 4.0)
            elif f == "release-lost":
                p["secs"] = 3.0
            elif f == "late-release":
                p["secs"] = 5.0
                p["delay"] = self.r.uniform(2.5, 4.0)
            else:
                p["secs"] = 0.0
            if t + p["secs"] > self.active_s:
                break
            out.append((t, f, p))
            t += p["secs"] + self.r.uniform(1.0, 3.0)
        return out

    def holder(self, d: str, fallback: int) -> int:
        """The client of driver d that holds its lock now, by its history
        (its last grant returned and neither its release begun nor a loss
        reported since), else fallback: a fault meant for a holder."""
        for k, path in enumerate(self.logs.get(d, [])):
            try:
                with open(path, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    f.seek(max(0, f.tell() - 4096))
                    tail = f.read().decode(errors="replace").splitlines()[1:]
            except OSError:
                continue
            for line in reversed(tail):
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("ev") == "report" or (e.get("ev") == "inv" and e.get("op") == "rel"):
                    break
                if e.get("ev") == "ret" and e.get("op") == "acq":
                    if e.get("res") == "ok":
                        return k
                    break
        return fallback

    def describe(self) -> str:
        return ", ".join(f"{t:.1f}s {f}({p['secs']:.1f}s)" for t, f, p in self.schedule)

    def _sleep(self, secs: float) -> None:
        self.stop.wait(max(0.0, secs))

    def _apply(self, f: str, p: Dict[str, float]) -> None:
        secs = p["secs"]
        i = int(p["proc"])
        allp = [x for ps in self.proxies_of.values() for x in ps]
        if isinstance(self.topo, Sentinel) and f in ("partition-one", "partition-all", "reset",
                                                      "latency"):
            self._apply_sentinel(f, p)
        elif f in ("split-brain", "failover", "kill-master", "pause-master"):
            self._apply_sentinel(f, p)
        elif f == "partition-one":
            ps = [ps[i] for ps in self.proxies_of.values()]
            for x in ps:
                x.blackhole(True)
            self._sleep(secs)
            for x in ps:
                x.blackhole(False)
        elif f in ("requests-lost", "replies-lost"):
            # one-way silence on every connection of one client per driver
            # (and on those it opens meanwhile: connect succeeds, then
            # nothing comes back): its requests dropped (the replies to
            # others' still flow), or the server's replies to it dropped.
            # The connections stay open (no FIN, no RST); what was dropped
            # stays lost after the heal
            # the client that holds the lock now, where one does (else
            # proc): the promise is about what its holder is told
            who = {d: self.holder(d, i) for d in self.proxies_of}
            p["target"] = ",".join(f"{d}:{k}" for d, k in who.items())  # type: ignore[assignment]
            ps = [self.proxies_of[d][k] for d, k in who.items()]
            up = f == "requests-lost"
            before = sum(_dropped(x) for x in ps)
            for x in ps:
                x.silence(up, not up)
            self._sleep(secs)
            for x in ps:
                x.silence(False, False)
            p["dropped"] = sum(_dropped(x) for x in ps) - before  # chunks
        elif f == "partition-all":
            for x in allp:
                x.blackhole(True)
            self._sleep(secs)
            for x in allp:
                x.blackhole(False)
        elif f == "reset":
            for x in allp:
                x.reset()
        elif f == "latency":
            for x in allp:
                x.latency(p["delay"], p["delay"])
            self._sleep(secs)
            for x in allp:
                x.latency(0.0, 0.0)
        elif f == "pause-server":
            for m in self.topo.masters():
                m.pause()
            self._sleep(secs)
            for m in self.topo.masters():
                m.resume()
        elif f.startswith("stop-client"):
            ws = [ps[i] for ps in self.procs.values() if i < len(ps)]
            for w in ws:
                if w.poll() is None:
                    os.kill(w.pid, signal.SIGSTOP)
            self._sleep(secs)
            for w in ws:
                if w.poll() is None:
                    os.kill(w.pid, signal.SIGCONT)
        elif f == "client-pause":
            for m in self.topo.masters():
                m("CLIENT", "PAUSE", str(int(secs * 1000)), "WRITE")
            self._sleep(secs)
        elif f == "kill-restart":
            for m in self.topo.masters():
                m.kill9()
            self._sleep(secs)
            for m in self.topo.masters():
                m.start()
        elif f == "release-lost":
            # one client per driver: its next release and the release's
            # retry both run on the server, and both replies are lost
            ps = [ps[i] for ps in self.proxies_of.values()]
            for x in ps:
                for _ in range(4):  # the release and every retry of it
                    x.reset_on_request(b"redisson_unlock_latch")
            self._sleep(secs)
            for x in ps:
                x.clear()
            p["fired"] = sum(x.fired("reset-on-request") for x in ps)
        elif f == "late-release":
            ps = [ps[i] for ps in self.proxies_of.values()]
            for x in ps:  # the next few releases each get a late copy
                for _ in range(4):
                    x.duplicate_later(b"redisson_unlock_latch", p["delay"])
            self._sleep(secs)
            for x in ps:
                x.clear()
            p["fired"] = sum(x.fired("duplicate-delivered") for x in ps)
        elif f == "restart-some":
            # kill -9 count of the Redlock's servers; restart them (with what
            # their persistence kept: nothing without AOF) after secs
            ms = self.topo.masters()
            some = [ms[(int(p["first"]) + k) % len(ms)] for k in range(int(p["count"]))]
            for m in some:
                m.kill9()
            self._sleep(secs)
            for m in some:
                m.start()
        elif f == "pause-one":
            ms = self.topo.masters()
            m = ms[i % len(ms)]
            m.pause()
            self._sleep(secs)
            m.resume()
        elif f == "token-reset":
            for m in self.topo.masters():
                for name in self.locks.values():
                    m("SET", "redisson_lock_token:{%s}" % name, "0")
        else:
            raise ValueError(f)

    def _apply_sentinel(self, f: str, p: Dict[str, float]) -> None:
        topo: Sentinel = self.topo
        secs = p["secs"]
        i = int(p["proc"])
        side_a = {f"w:{d}:{i}" for d in self.procs}
        workers = {f"w:{d}:{k}" for d in self.procs for k in range(len(self.procs[d]))}
        allp = topo.all_proxies()
        if f == "split-brain":
            # {old master, one client per driver} | {sentinels, replicas, the others}
            m = topo.master_index()
            for k, fp in enumerate(topo.front):
                fp.partition({"sentinel", "server"} | (workers - side_a) if k == m else side_a)
            for sp in topo.sproxies:
                sp.partition(side_a)
            self._sleep(secs)
            for x in allp:
                x.partition(())
        elif f == "partition-one":
            for x in allp:
                x.partition(side_a)
            self._sleep(secs)
            for x in allp:
                x.partition(())
        elif f == "partition-all":
            for x in allp:
                x.partition(workers)
            self._sleep(secs)
            for x in allp:
                x.partition(())
        elif f == "reset":
            for x in topo.front:
                x.reset()
        elif f == "latency":
            for x in topo.front:
                x.latency(p["delay"], p["delay"])
            self._sleep(secs)
            for x in topo.front:
                x.latency(0.0, 0.0)
        elif f == "failover":
            old = topo.master_index()
            topo.sentinels[0]("SENTINEL", "FAILOVER", "hm")
            wait_for(lambda: topo.master_index() != old, 15, "failover", step=0.1)
        elif f == "kill-master":
            m = topo.servers[topo.master_index()]
            m.kill9()
            self._sleep(secs)
            m.start()
            topo.restarted(m)
        elif f == "pause-master":
            m = topo.servers[topo.master_index()]
            m.pause()
            self._sleep(secs)
            m.resume()

    def run(self, t0: int) -> None:
        # a fault that ends later than planned (applying it is slow: a
        # Sentinel split under load took up to 37 s for 4-8 s planned) moves
        # the rest of the schedule back by as much, so each heal is still
        # followed by its quiet gap; without it the faults ran back to back
        # and nothing was ever healed for long (session 12: no grant after
        # the first split in any group of sentinel-split-brain)
        slip = 0.0
        for t, f, p in self.schedule:
            if t + slip + p["secs"] > self.active_s:
                break  # the clients' tail is kept for the checks after the last heal
            self._sleep(t + slip - (mono() - t0) / NS)
            if self.stop.is_set():
                return
            start = mono()
            try:
                self._apply(f, p)
                err = None
            except (OSError, RespError, RuntimeError, AssertionError) as e:
                err = str(e)
            end = mono()
            self.heals.append(end)
            self.log.append({"fault": f, "start": start, "end": end, "params": p, "err": err})
            slip = max(slip, (end - t0) / NS - (t + p["secs"]))
        if "token-reset" in self.faults:  # the self-test: keep resetting it
            while not self.stop.wait(0.7):
                try:
                    self._apply("token-reset", {"secs": 0.0, "proc": 0})
                except (OSError, RespError):
                    pass
        # servers restarted here die with this thread (PR_SET_PDEATHSIG of
        # tests/python/conftest.py): it lives until the run is over
        self.stop.wait()


# ------------------------------------------------------------------ history
def load(paths: List[str]) -> List[Dict[str, Any]]:
    evs = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    evs.append(json.loads(line))
    evs.sort(key=lambda e: e["t"])
    return evs


class Hold:
    def __init__(self, p: int, grant: str, token: Optional[int], inv: int, ret: int,
                 lease_ms: int) -> None:
        self.p, self.grant, self.token, self.inv, self.ret = p, grant, token, inv, ret
        self.lease_ms = lease_ms
        self.end: Optional[int] = None      # release invoked
        self.rel: Optional[str] = None      # its result
        self.rel_ret: Optional[int] = None
        self.told: Optional[int] = None     # first lost / in-doubt report (or own lease end)


def analyse(evs: List[Dict[str, Any]], fence_log: List[Tuple[int, str, int]],
            heals: List[int], t_end: int, checker: str, html: Optional[str],
            long_gap_s: float, peers: Optional[set] = None) -> Dict[str, Any]:
    """peers: the processes of another library (Redisson), which has no lost
    or in-doubt report, no replica acknowledgement and INCRs the token
    counter: a double hold with one of their holds on either side, and a
    token issued again or lowered by one of their grants, are counted apart
    (untold_peer, peer_tokens), not as violations of hilock's promise."""
    peers = peers or set()
    # open-ended operations return at END: after everything, also after the
    # lease end of the last fixed-lease grants
    END = max([e["t"] for e in evs] + [t_end]) + 3600 * NS
    invs: Dict[Tuple[int, int], Dict[str, Any]] = {}
    holds: List[Hold] = []
    cur: Dict[int, Hold] = {}
    ops: List[Dict[str, Any]] = []
    last_acq_inv: Dict[int, int] = {}
    open_ops: Dict[int, List[Dict[str, Any]]] = {}   # per process: open-ended ops to bound
    st = {"acq_ok": 0, "acq_timeout": 0, "acq_error": 0, "writes_ok": 0, "writes_refused": 0,
          "writes_error": 0, "rel_ok": 0, "rel_notowner": 0, "rel_error": 0, "reports": 0,
          "doubt_reports": 0, "fatal": 0}
    rel_errors: List[Tuple[int, int]] = []

    def bound_open(p: int, t: int) -> None:
        # an implicit release of p's earlier hold (lost, expired, release
        # unknown) is placed before p's next acquire, or never
        for o in open_ops.pop(p, []):
            o["ret"] = max(o["call"], t)

    for e in evs:
        p = e.get("p", -1)
        ev = e["ev"]
        if ev == "fatal":
            st["fatal"] += 1
            continue
        if ev == "inv":
            invs[(p, e["id"])] = e
            if e["op"] == "acq":
                last_acq_inv[p] = e["t"]
                bound_open(p, e["t"])
            elif e["op"] == "rel" and p in cur:
                cur[p].end = e["t"]
            continue
        if ev == "report":
            st["reports"] += 1
            st["doubt_reports"] += 1 if e.get("doubt") else 0
            h = cur.get(p)
            if h is not None and (h.rel_ret is None or e["t"] <= h.rel_ret):
                if h.told is None or e["t"] < h.told:
                    h.told = e["t"]
            o = {"c": p, "k": "lost", "o": "-", "call": e["t"], "ret": END}
            ops.append(o)
            open_ops.setdefault(p, []).append(o)
            continue
        if ev != "ret":
            continue
        i = invs.pop((p, e["id"]), None)
        if i is None:
            continue
        op, res = e["op"], e["res"]
        if op == "acq":
            if res == "ok":
                st["acq_ok"] += 1
                tok = e.get("token")
                h = Hold(p, e["grant"], None if tok is None else int(tok), i["t"], e["t"],
                         int(i.get("lease_ms", 0)))
                holds.append(h)
                cur[p] = h
                ops.append({"c": p, "k": "acq", "o": "ok", "call": i["t"], "ret": e["t"]})
                if h.lease_ms:
                    exp = i["t"] + h.lease_ms * 1_000_000
                    h.told = exp
                    o = {"c": p, "k": "expire", "o": "-", "call": exp, "ret": END}
                    ops.append(o)
                    open_ops.setdefault(p, []).append(o)
            else:
                st["acq_timeout" if res == "timeout" else "acq_error"] += 1
        elif op == "write":
            st["writes_" + ("ok" if res == "ok" else "refused" if res == "refused" else "error")] += 1
            ops.append({"c": p, "k": "write", "o": res, "call": i["t"], "ret": e["t"]})
        elif op == "rel":
            h = cur.get(p)
            if h is not None:
                h.rel, h.rel_ret = res, e["t"]
            if res in ("ok", "notowner"):
                st["rel_" + res] += 1
                ops.append({"c": p, "k": "rel", "o": res, "call": i["t"], "ret": e["t"]})
            else:
                st["rel_error"] += 1
                rel_errors.append((p, e["t"]))
                o = {"c": p, "k": "rel", "o": "unknown", "call": i["t"], "ret": END}
                ops.append(o)
                open_ops.setdefault(p, []).append(o)
    # invocations that never returned (a worker killed mid-call): open-ended
    for (p, _), i in invs.items():
        if i["op"] == "rel":
            ops.append({"c": p, "k": "rel", "o": "unknown", "call": i["t"], "ret": END})
        elif i["op"] == "write":
            ops.append({"c": p, "k": "write", "o": "unknown", "call": i["t"], "ret": END})
    for h in holds:
        if h.end is None:
            h.end = END

    # double holds: B granted while A (granted earlier) had not begun its release
    double, told_first, untold_peer = 0, 0, 0
    bad_pairs: List[str] = []
    by_ret = sorted(holds, key=lambda h: h.ret)
    for ia, a in enumerate(by_ret):
        for b in by_ret[ia + 1:]:
            if b.ret >= (a.end or END):
                break
            if b.p == a.p:
                continue
            double += 1
            # told first: the earlier holder had its report (or its fixed
            # lease's end) before B returned; or B itself returned told (a
            # fixed-lease grant whose lease, counted from its invoke, had
            # ended before it returned, as when its client was stopped
            # between the server's grant and reading it: its client knows by
            # its own clock it holds nothing and writes nothing under it)
            if (a.told is not None and a.told <= b.ret) or \
                    (b.told is not None and b.told <= b.ret):
                told_first += 1
            elif a.p in peers or b.p in peers:
                untold_peer += 1
            elif len(bad_pairs) < 5:
                bad_pairs.append(f"{a.grant}(token {a.token}) still held when {b.grant}"
                                 f"(token {b.token}) was granted")

    # tokens: issued twice; lower than (or equal to) a grant that returned
    # before this one was invoked
    tholds = [h for h in holds if h.token is not None]  # a Redlock grant has none
    seen: Dict[int, int] = {}
    seen_ours: Dict[int, int] = {}
    for h in tholds:
        seen[h.token] = seen.get(h.token, 0) + 1  # type: ignore[index]
        if h.p not in peers:
            seen_ours[h.token] = seen_ours.get(h.token, 0) + 1  # type: ignore[index]
    dup_tokens = sum(1 for n in seen_ours.values() if n > 1)
    peer_tokens = sum(1 for n in seen.values() if n > 1) - dup_tokens
    lowered = 0
    rets = sorted(tholds, key=lambda h: h.ret)
    k, hi = 0, None
    for b in sorted(tholds, key=lambda h: h.inv):
        while k < len(rets) and rets[k].ret < b.inv:
            hi = rets[k].token if hi is None else max(hi, rets[k].token)
            k += 1
        if hi is not None and b.token <= hi:
            if b.p in peers:
                peer_tokens += 1
            else:
                lowered += 1

    # the fencing store's own order: an accepted write under a token that a
    # different grant had already written with (or above)
    stale = 0
    hi_tok: Optional[int] = None
    hi_grants: set = set()
    for tok, grant, ok in fence_log:
        if not ok:
            continue
        if hi_tok is None or tok > hi_tok:
            hi_tok, hi_grants = tok, {grant}
        elif tok == hi_tok and grant not in hi_grants:
            stale += 1
            hi_grants.add(grant)
        elif tok < hi_tok:
            stale += 1  # the store's script refuses these; counted if it ever did not

    # liveness
    grant_times = sorted(h.ret for h in holds)

    def first_grant_after(t: int, not_p: Optional[int] = None) -> Optional[int]:
        for h in sorted(holds, key=lambda h: h.ret):
            if h.ret >= t and h.p != not_p:
                return h.ret
        return None

    # a heal can be judged only while the group's clients still run for the
    # bound after it: a group whose clients opened (and so stop) earlier
    # than the slowest group's, or a fault that ended late, can leave heals
    # after which none of its clients was still asking
    ends = [e["t"] for e in evs if e["ev"] == "end"]
    if ends:
        heals = [h for h in heals if h + long_gap_s * NS <= max(ends)]
    heal_gaps = []
    for h in heals:
        g = first_grant_after(h)
        heal_gaps.append(None if g is None else (g - h) / NS)
    last_heal_gap = heal_gaps[-1] if heal_gaps else None
    stuck = []
    for p, t in rel_errors:
        g = first_grant_after(t, p)
        stuck.append(None if g is None else (g - t) / NS)
    longest_gap = 0.0
    for a, b in zip(grant_times, grant_times[1:]):
        longest_gap = max(longest_gap, (b - a) / NS)
    per_proc: Dict[int, int] = {}
    for h in holds:
        per_proc[h.p] = per_proc.get(h.p, 0) + 1

    # Porcupine
    ops.sort(key=lambda o: o["call"])
    cmd = [checker] + (["-html", html] if html else [])
    try:
        out = subprocess.run(cmd, input=json.dumps({"ops": ops, "timeout_s": 30}),
                             capture_output=True, text=True, timeout=120)
        porc = json.loads(out.stdout)["result"] if out.returncode == 0 else "error: " + out.stderr
    except (subprocess.TimeoutExpired, ValueError) as e:
        porc = f"error: {e}"

    live_ok = bool(holds) and last_heal_gap is not None and last_heal_gap <= long_gap_s \
        if heals else bool(holds)
    return {"stats": st, "grants": len(holds), "double_holds": double, "told_first": told_first,
            "not_told": double - told_first - untold_peer, "untold_peer": untold_peer,
            "peer_tokens": peer_tokens, "fencing_only": bool(peers), "bad_pairs": bad_pairs, "dup_tokens": dup_tokens,
            "lowered_tokens": lowered, "stale_accepted": stale, "porcupine": porc,
            "ops": len(ops), "heal_gaps": heal_gaps, "last_heal_gap": last_heal_gap,
            "max_heal_gap": max([g for g in heal_gaps if g is not None], default=None),
            "stuck_after_failed_release": max([s if s is not None else float("inf")
                                               for s in stuck], default=None),
            "longest_gap": longest_gap, "max_share": max(per_proc.values(), default=0),
            "live_ok": live_ok}


def fmt_s(x: Optional[float]) -> str:
    return "-" if x is None else "never" if x == float("inf") else f"{x:.1f}s"


def violations(r: Dict[str, Any]) -> List[str]:
    v = []
    if r["not_told"]:
        v.append(f"{r['not_told']} double holds not told first")
    if r["stale_accepted"]:
        v.append(f"{r['stale_accepted']} stale writes accepted")
    if r["dup_tokens"]:
        v.append(f"{r['dup_tokens']} tokens issued twice")
    if r["lowered_tokens"]:
        v.append(f"{r['lowered_tokens']} grants with a token not above an earlier grant's")
    # a group with Redisson clients: they are never told (and grant without
    # a replica's acknowledgement), so Porcupine (which needs a report before
    # another grant) is not their guarantee: fencing is
    if r["porcupine"] != "Ok" and r["porcupine"] != "Unknown" and not r.get("fencing_only"):
        v.append(f"Porcupine: {r['porcupine']}")
    if not r["live_ok"]:
        v.append(f"liveness: no grant within bound after the last heal ({r['last_heal_gap']})")
    if r["stats"]["fatal"]:
        v.append(f"{r['stats']['fatal']} clients could not start")
    if r.get("check_stuck") and r["stuck_after_failed_release"] is not None and \
            r["stuck_after_failed_release"] > r["bound"]:
        v.append(f"liveness: {fmt_s(r['stuck_after_failed_release'])} before another client was "
                 f"granted the lock after a failed release (bound {r['bound']:.0f}s)")
    if r.get("hung"):
        v.append(f"{r['hung']} clients did not finish (a call did not return)")
    return v


# ------------------------------------------------------------------ driver
DRIVERS = ["c", "async", "python", "aio", "openresty", "redisson"]


# Redisson is a peer: its group is PROCS Redisson clients and PEERS hilock
# clients (blocking C) on one lock, so the two libraries also exclude each
# other under the faults
PEERS = 2


def group(driver: str) -> List[str]:
    """The worker kind of each client process of a driver's group."""
    if driver == "redisson":
        return ["redisson"] * PROCS + ["c"] * PEERS
    return [driver] * PROCS


_redisson_lock = threading.Lock()


def redisson_build(build: str) -> str:
    """Build the Redisson worker once per run (tests/safety/redisson/build.sh);
    its classpath."""
    out = os.path.join(build, "redisson")
    cpf = os.path.join(out, "classpath.txt")
    with _redisson_lock:
        if not getattr(redisson_build, "done", False):
            r = subprocess.run(["bash", os.path.join(HERE, "redisson", "build.sh"), out],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError("the Redisson worker did not build:\n" + r.stdout + r.stderr)
            redisson_build.done = True  # type: ignore[attr-defined]
    with open(cpf) as f:
        return os.path.join(out, "classes") + ":" + f.read().strip()


_broken_lock = threading.Lock()


def broken_build(build: str, mode: str) -> str:
    """Build the self-test library HILOCK_SAFETY_BREAK=mode and the C workers
    linked to it (broken.sh), once per run; their folder."""
    out = os.path.join(build, f"broken-{mode}")
    with _broken_lock:
        done = getattr(broken_build, "done", set())
        if mode not in done:
            r = subprocess.run(["bash", os.path.join(HERE, "broken.sh"), mode, out],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"the {mode} self-test build failed:\n" + r.stdout + r.stderr)
            done.add(mode)
            broken_build.done = done  # type: ignore[attr-defined]
    return out


def versions(paths: List[str]) -> List[str]:
    """The library versions the workers' start lines name (C workers only)."""
    out = []
    for path in paths:
        try:
            with open(path) as f:
                for line in f:
                    if '"ev":"start"' in line:
                        out.append(json.loads(line).get("version", ""))
                        break
        except (OSError, ValueError):
            pass
    return out


def _try(f: Callable[..., Any], *a: Any) -> None:
    try:
        f(*a)
    except RuntimeError:
        pass  # raised again where the worker is needed


def worker_cmd(driver: str, build: str, py: str, broken: Optional[str] = None) -> List[str]:
    if broken:  # a self-test: the C workers on the deliberately broken library
        if driver not in ("c", "async"):
            raise ValueError(f"no {broken} self-test build for driver {driver}")
        return [os.path.join(broken_build(build, broken), f"worker-{driver}")]
    if driver == "redisson":
        return ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx128m",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", redisson_build(build),
                "Worker"]
    if driver == "c":
        return [os.path.join(build, "worker-c")]
    if driver == "async":
        return [os.path.join(build, "worker-async")]
    if driver == "openresty":
        # worker_resty.sh execs nginx: the process is the client
        return [os.path.join(HERE, "worker_resty.sh")]
    if driver == "python":
        return [py, os.path.join(HERE, "worker.py")]
    if driver == "aio":
        return [py, os.path.join(HERE, "worker.py"), "--aio"]
    raise ValueError(driver)


def run_scenario(name: str, sc: Dict[str, Any], seed: int, drivers: List[str], long: bool,
                 work: str, build: str, py: str, checker: str) -> Tuple[bool, List[str]]:
    secs = sc["long_seconds"] if long else sc["seconds"]
    drivers = [d for d in drivers if d in sc.get("drivers", drivers)]
    client = dict(sc["client"])
    lease_s = (client["lease_ms"] or client["watchdog_lease_ms"]) / 1000.0
    tail = lease_s * 2 + client["wait_ms"] / 1000.0 + 3.0
    bound = lease_s + client["wait_ms"] / 1000.0 + 5.0
    topo: Any = Single(sc["aof"]) if sc["topology"] == "single" else \
        Redlock(sc["aof"]) if sc["topology"] == "redlock" else \
        Sentinel(sc["aof"], sc.get("min_replicas", 0))
    fence = RedisServer(["--appendonly", "no"])
    run_dir = os.path.join(work, f"{name}-{seed}")
    os.makedirs(run_dir, exist_ok=True)
    procs: Dict[str, List[subprocess.Popen]] = {}
    proxies_of: Dict[str, List[FaultProxy]] = {}
    logs: Dict[str, List[str]] = {}
    locks = {d: f"safety:{name}:{d}:{seed}" for d in drivers}
    words = [f"{k}={v}" for k, v in client.items()]
    lines: List[str] = []
    nem: Optional[Nemesis] = None
    try:
        # the clients that are slow to open (JVMs, seconds) start first and
        # the others once they are open, so that every client's SECONDS
        # count from about the nemesis' start (each counts from its own open)
        slow = {"redisson"}
        started: List[Tuple[str, int, str]] = []
        for d in drivers:
            procs[d], proxies_of[d], logs[d] = [], [], []
            for i, kind in enumerate(group(d)):
                url = topo.url_for_worker()
                if isinstance(topo, (Single, Redlock)):
                    proxies_of[d].append(topo.proxies[-1])
                logs[d].append(os.path.join(run_dir, f"{d}-{i}.jsonl"))
                procs[d].append(None)  # type: ignore[arg-type]
                started.append((d, i, url))

        def launch(d: str, i: int, url: str) -> None:
            path = logs[d][i]
            cmd = worker_cmd(group(d)[i], build, py, sc.get("build")) + \
                [url, locks[d], str(fence.port), str(i),
                                                       str(seed), str(secs), path] + words
            procs[d][i] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                           stderr=open(path + ".err", "w"))
            if isinstance(topo, Sentinel):
                topo.tag_worker(procs[d][i].pid, f"w:{d}:{i}")

        def ready() -> bool:
            for d in drivers:
                for path, w in zip(logs[d], procs[d]):
                    if w is None:
                        continue
                    try:
                        with open(path) as f:
                            text = f.read()
                    except FileNotFoundError:
                        text = ""
                    if '"ev":"ready"' not in text and w.poll() is None:
                        return False
            return True
        for first in (True, False):
            for d, i, url in started:
                if (group(d)[i] in slow) == first:
                    launch(d, i, url)
            # the nemesis starts once every client is open
            wait_for(ready, 60, "every client open", step=0.1)
        t0 = mono()
        nem = Nemesis(seed, name, sc["faults"], max(0.0, secs - tail), procs, topo, proxies_of,
                      locks, logs, sc.get("fault_secs"))
        lines.append(f"  nemesis: {nem.describe() or 'none'}")
        nt = threading.Thread(target=nem.run, args=(t0,), daemon=True)
        nt.start()
        hung: Dict[str, int] = {d: 0 for d in drivers}
        limit = time.monotonic() + secs + 30
        for d in drivers:
            for w in procs[d]:
                try:
                    w.wait(max(1.0, limit - time.monotonic()))
                except subprocess.TimeoutExpired:
                    hung[d] += 1
                    w.kill()
                    w.wait()
        diag = []
        for m in topo.masters():
            try:
                info = m("INFO", "all")
                diag.append({k: v for k, v in (ln.split(":", 1) for ln in info.splitlines()
                                              if ":" in ln)
                             if k in ("connected_clients", "rejected_connections",
                                      "total_connections_received", "maxclients",
                                      "loading", "role")})
            except (OSError, RespError) as e:
                diag.append({"error": str(e)})
        nem.stop.set()
        nt.join(30)
        t_end = mono()
        ok = True
        with open(os.path.join(run_dir, "nemesis.json"), "w") as f:
            json.dump({"faults": nem.log, "servers_at_end": diag}, f)
        for d in drivers:
            flog = []
            for item in fence("LRANGE", f"fence:log:{locks[d]}", "0", "-1") or []:
                tok, grant, acc = item.split(" ")
                flog.append((int(tok), grant, int(acc)))
            peers = {k for k, kind in enumerate(group(d)) if kind == "redisson"}
            r = analyse(load(logs[d]), flog, nem.heals, t_end, checker,
                        os.path.join(run_dir, f"{d}-porcupine.html"), bound, peers)
            r["hung"] = hung[d]
            r["bound"] = bound
            r["check_stuck"] = sc.get("check_stuck", False)
            with open(os.path.join(run_dir, f"{d}-result.json"), "w") as f:
                json.dump(r, f, indent=1, default=str)
            v = violations(r)
            # which library ran: a self-test must have run its broken build,
            # and no other scenario may ever run one
            vs = versions(logs[d])
            want = f"+BROKEN-{sc['build']}" if sc.get("build") else None
            wrong = [x for x in vs if (want not in x if want else "+BROKEN" in x)]
            if want:  # every client must have started on it (a client that
                # could not start is a violation, not a catch)
                wrong += ["(not started)"] * (len(logs[d]) - len(vs))
            known = KNOWN_FAILURES.get(f"{name}/{d}") or KNOWN_FAILURES.get(name)
            if wrong:
                verdict = f"FAIL: {len(wrong)} clients ran library {wrong[0]!r}" + \
                    (f", not the {sc['build']} self-test build" if want else "")
                ok = False
            elif known:
                # a known failure does not fail the run either way; one that
                # stops showing for good goes off the list with its fix
                verdict = "known failure (" + "; ".join(v) + ")" if v else \
                    "XPASS (listed in KNOWN_FAILURES, not seen this run)"
            elif sc["expect"] == "pass":
                verdict = "ok" if not v else "FAIL: " + "; ".join(v)
                ok = ok and not v
            else:
                verdict = "ok (caught: " + "; ".join(v) + ")" if v else "FAIL (nothing caught)"
                ok = ok and bool(v)
            s = r["stats"]
            mh = r["max_heal_gap"]
            lines.append(
                f"  {name:24} {d:7} grants {r['grants']:4}  double holds {r['double_holds']:3} "
                f"(told first {r['told_first']}"
                f"{', with a Redisson hold %d' % r['untold_peer'] if r['fencing_only'] else ''})  stale writes accepted {r['stale_accepted']}  "
                f"tokens dup/low {r['dup_tokens']}/{r['lowered_tokens']}"
                f"{' (Redisson %d)' % r['peer_tokens'] if r['fencing_only'] else ''}  "
                f"porcupine {r['porcupine']}  "
                f"reports {s['reports']} (doubt {s['doubt_reports']})  acq err {s['acq_error']}  "
                f"rel err/notowner {s['rel_error']}/{s['rel_notowner']}  refused writes "
                f"{s['writes_refused']}  liveness: max gap after heal "
                f"{'-' if mh is None else '%.1fs' % mh}, longest gap {r['longest_gap']:.1f}s, "
                f"after a failed release {fmt_s(r['stuck_after_failed_release'])}, "
                f"most grants to one client {r['max_share']}  "
                f"-> {verdict}")
            for bp in r["bad_pairs"][:3]:
                lines.append(f"      {bp}")
        return ok, lines
    finally:
        if nem is not None:
            nem.stop.set()
        for ws in procs.values():
            for w in ws:
                if w is not None and w.poll() is None:
                    try:
                        os.kill(w.pid, signal.SIGCONT)
                    except OSError:
                        pass
                    w.kill()
                    w.wait()
        topo.close()
        fence.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--scenario", action="append", default=None)
    ap.add_argument("--drivers", default=",".join(DRIVERS))
    ap.add_argument("--long", action="store_true")
    ap.add_argument("--seconds", type=float, default=None, help="override each scenario's length")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--work", default=None)
    ap.add_argument("--build", default=None)
    args = ap.parse_args()
    if args.list:
        for n, sc in SCENARIOS.items():
            print(f"{n:26} {sc['expect']:9} {sc['what']}")
        for n, why in KNOWN_FAILURES.items():
            print(f"{n:26} known-fail {why}")
        return 0
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**9)
    names = args.scenario or (list(SCENARIOS) if args.long else SHORT)
    drivers = [d for d in args.drivers.split(",") if d]
    build = args.build or os.path.join(ROOT, "build", "safety")
    checker = os.path.join(build, "safety-checker")
    py = os.environ.get("HILOCK_PYTHON", sys.executable)
    work = args.work or tempfile.mkdtemp(prefix="hilock-safety-")
    print(f"safety: seed {seed}, drivers {','.join(drivers)}, {PROCS} clients per driver, "
          f"histories in {work}")
    failed: List[str] = []
    summary: List[str] = []
    short = not args.scenario and not args.long
    plan = {n: [d for d in drivers if not short or n in SHORT_ONLY_IN.get(d, [n])]
            for n in names}
    if any("redisson" in ds and "redisson" in SCENARIOS[n].get("drivers", ds)
           for n, ds in plan.items()):
        # build the Redisson worker (Maven, javac) while the first scenarios run
        threading.Thread(target=lambda: _try(redisson_build, build), daemon=True).start()
    for n in names:
        sc = SCENARIOS[n]
        t = time.monotonic()
        if args.seconds:
            sc = dict(sc, seconds=args.seconds, long_seconds=args.seconds)
        ok, lines = run_scenario(n, sc, seed, plan[n], args.long, work, build, py, checker)
        print(f"scenario {n} ({sc['what']}): {'ok' if ok else 'FAILED'} in "
              f"{time.monotonic() - t:.0f}s", flush=True)
        for ln in lines:
            print(ln, flush=True)
        summary += lines
        if not ok:
            failed.append(n)
    print()
    if KNOWN_FAILURES:
        print("known failures (scenario or scenario/driver; the long schedule (suite safety) and --scenario NAME run "
              "them; they never fail a run):")
        for n, why in KNOWN_FAILURES.items():
            print(f"  {n}: {why}")
    if failed:
        # the failing lines again, last, where a truncated log still shows them
        for ln in summary:
            if "-> FAIL" in ln or ln.startswith("      "):
                print(ln)
        print(f"safety: FAILED {' '.join(failed)}; replay: tests/safety/run.sh --seed {seed} "
              + " ".join(f"--scenario {n}" for n in failed)
              + (" --long" if args.long else ""))
        return 1
    shutil.rmtree(work, ignore_errors=True) if not args.work else None
    print(f"safety: {len(names)} scenarios ok (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
