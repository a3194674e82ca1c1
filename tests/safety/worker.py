"""One safety client process: the blocking `hilock` package, or `hilock.aio`
with --aio. Loops on one fenced lock until its deadline: acquire, write under
the grant's token to the fencing store a few times, release. Every invoke and
return, and every lost / in-doubt report, is one JSON line in the log file,
timed by time.monotonic_ns() (CLOCK_MONOTONIC, the clock of every other
process of the run). The history format is in README.md of this folder.

    worker.py [--aio] URL LOCK FENCE_PORT PROC_ID SEED SECONDS LOG KEY=VALUE...

Options (KEY=VALUE): lease_ms (0 = watchdog), watchdog_lease_ms,
command_timeout_ms, connect_timeout_ms, replica_ack (1/0/-1), wait_ms,
writes (per grant), hold_ms (sleep between writes, at most), broken
("ignore-lease": keep writing past a fixed lease; for the self-test).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import sys
import threading
import time
from typing import Any, Dict, List, Optional

import hilock

FENCE_LUA = """
local function ge(a, b)
  if #a ~= #b then return #a > #b end
  return a >= b
end
local hi = redis.call('GET', KEYS[1])
local ok = 0
if (not hi) or ge(ARGV[1], hi) then
  redis.call('SET', KEYS[1], ARGV[1]); ok = 1
end
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ok)
return ok
"""


def now() -> int:
    return time.monotonic_ns()


class Log:
    def __init__(self, path: str, proc: int) -> None:
        self.f = open(path, "a", buffering=1)
        self.proc = proc
        self.mu = threading.Lock()
        self.next_id = 0
        self.ready = time.monotonic()

    def ready_now(self) -> None:
        self.write({"ev": "ready", "t": now()})

    def write(self, rec: Dict[str, Any]) -> None:
        rec["p"] = self.proc
        line = json.dumps(rec, separators=(",", ":"))
        with self.mu:
            self.f.write(line + "\n")

    def inv(self, op: str, **kw: Any) -> int:
        self.next_id += 1
        self.write({"ev": "inv", "op": op, "id": self.next_id, "t": now(), **kw})
        return self.next_id

    def ret(self, op: str, oid: int, res: str, **kw: Any) -> None:
        self.write({"ev": "ret", "op": op, "id": oid, "t": now(), "res": res, **kw})


class Fence:
    """The fencing store: a plain RESP connection to its own redis-server."""

    def __init__(self, port: int, lock: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        self.keys = [f"fence:hi:{lock}", f"fence:log:{lock}"]

    def _cmd(self, *args: str) -> bytes:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise OSError("fence store closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def write(self, token: int, grant: str) -> str:
        line = self._cmd("EVAL", FENCE_LUA, "2", self.keys[0], self.keys[1], str(token), grant)
        if line == b":1":
            return "ok"
        if line == b":0":
            return "refused"
        raise OSError(f"fence store answered {line!r}")


def open_retry(fn: Any, log: Log, ready: bool = True) -> Any:
    """Open the client; the open is not what is tested, so a fault that
    hits it (servers and clients start together) is waited out."""
    while True:
        try:
            c = fn()
            break
        except hilock.ConnectionError:
            if time.monotonic() > log.ready + 30:
                raise
            time.sleep(0.1)
    if ready:
        log.ready_now()
    return c


def parse_opts(words: List[str]) -> Dict[str, int]:
    o = {"lease_ms": 0, "watchdog_lease_ms": 3000, "command_timeout_ms": 500,
         "connect_timeout_ms": 500, "replica_ack": 0, "wait_ms": 2000, "writes": 3,
         "hold_ms": 60}
    broken = ""
    for w in words:
        k, v = w.split("=", 1)
        if k == "broken":
            broken = v
        else:
            o[k] = int(v)
    o["broken"] = broken  # type: ignore[assignment]
    return o


def client_kw(o: Dict[str, Any]) -> Dict[str, Any]:
    kw: Dict[str, Any] = {"watchdog_lease": o["watchdog_lease_ms"] / 1000.0,
                          "command_timeout": o["command_timeout_ms"] / 1000.0,
                          "connect_timeout": o["connect_timeout_ms"] / 1000.0}
    if o["replica_ack"]:
        kw["replica_ack"] = o["replica_ack"] > 0
    return kw


def err_name(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class Plan:
    """What one iteration does, from the seeded generator (same seed, same plan)."""

    def __init__(self, seed: int, proc: int, o: Dict[str, Any]) -> None:
        self.r = random.Random(f"{seed}:{proc}")
        self.o = o

    def holds(self) -> List[float]:
        return [self.r.uniform(0.2, 1.0) * self.o["hold_ms"] / 1000.0 for _ in range(self.o["writes"])]

    def pause(self) -> float:
        return self.r.uniform(0.0, 0.05)


def may_write(o: Dict[str, Any], lost: bool, acq_inv: int) -> bool:
    """A correct client writes only while it believes it holds the lock: not
    after a lost / in-doubt report, and with a fixed lease not past
    (invoke of the acquire + lease - 1/5 of it) by its own clock."""
    if lost:
        return False
    if o["lease_ms"] and o["broken"] != "ignore-lease":
        return now() < acq_inv + (o["lease_ms"] - o["lease_ms"] // 5) * 1_000_000
    return True


def run_blocking(url: str, lock_name: str, fence: Fence, log: Log, plan: Plan,
                 o: Dict[str, Any], deadline: float) -> None:
    urls = url.split("|")
    clients = []
    for i, u in enumerate(urls):
        clients.append(open_retry(lambda u=u: hilock.Client(u, **client_kw(o)), log,
                                  ready=i == len(urls) - 1))
    client = clients[0]
    # "u1|u2|...": a Redlock over one lock per server; its grants have no
    # fencing token, so a write is only a claim (for Porcupine)
    lock: Any = hilock.RedLock([c.lock(lock_name) for c in clients]) if len(clients) > 1 \
        else client.fenced_lock(lock_name)
    deadline += time.monotonic() - log.ready

    def on_lost(lk: Any, t: int) -> None:
        msg = getattr(lk, "errmsg", "") or ""
        log.write({"ev": "report", "op": "lost", "t": now(), "doubt": "doubt" in msg, "tid": t})

    lock.on_lost = on_lost
    lease = o["lease_ms"] / 1000.0 if o["lease_ms"] else None
    grants = 0
    while time.monotonic() < deadline:
        oid = log.inv("acq", lease_ms=o["lease_ms"])
        acq_inv = now()
        try:
            if len(clients) > 1:
                token = 0 if lock.acquire(wait=o["wait_ms"] / 1000.0, lease=lease) else None
            else:
                token = lock.acquire_token(wait=o["wait_ms"] / 1000.0, lease=lease)
        except hilock.Error as e:
            log.ret("acq", oid, "error", err=err_name(e))
            time.sleep(plan.pause() + 0.05)
            continue
        if token is None:
            log.ret("acq", oid, "timeout")
            continue
        grants += 1
        grant = f"{log.proc}.{grants}"
        log.ret("acq", oid, "ok", token=token if len(clients) == 1 else None, grant=grant)
        for hold in plan.holds():
            time.sleep(hold)
            if not may_write(o, lock.lost, acq_inv):
                break
            wid = log.inv("write", token=token, grant=grant)
            try:
                log.ret("write", wid, fence.write(token, grant) if len(clients) == 1 else "ok")
            except OSError as e:
                log.ret("write", wid, "error", err=str(e))
        rid = log.inv("rel", grant=grant)
        try:
            lock.release()
            log.ret("rel", rid, "ok")
        except hilock.NotOwnerError:
            log.ret("rel", rid, "notowner")
        except hilock.Error as e:
            log.ret("rel", rid, "error", err=err_name(e))
        time.sleep(plan.pause())
    for c in clients:
        c.close()


async def run_aio(url: str, lock_name: str, fence: Fence, log: Log, plan: Plan,
                  o: Dict[str, Any], deadline: float) -> None:
    import hilock.aio
    clients = []
    for u in url.split("|"):
        client = None
        while client is None:
            try:
                client = await hilock.aio.connect(u, **client_kw(o))
            except hilock.ConnectionError:
                if time.monotonic() > log.ready + 30:
                    raise
                await asyncio.sleep(0.1)
        clients.append(client)
    log.ready_now()
    deadline += time.monotonic() - log.ready
    # "u1|u2|...": a Redlock over one lock per server (as run_blocking); its
    # grants have no fencing token, so a write is only a claim (for Porcupine)
    redlock = len(clients) > 1
    lock: Any = hilock.aio.RedLock([c.lock(lock_name) for c in clients]) if redlock \
        else clients[0].fenced_lock(lock_name)
    doubts = [0]  # the client's lost_in_doubt count at the last report

    def on_lost(lk: Any, t: int) -> None:
        # a hilock.aio lock has no errmsg: an "in doubt" loss is the one the
        # client's counters count as such (counted before the callback)
        doubt = "doubt" in (getattr(lk, "errmsg", "") or "")
        if not redlock:
            try:
                n = clients[0].stats()["kinds"]["fenced"]["lost_in_doubt"]
                doubt, doubts[0] = doubt or n > doubts[0], n
            except (hilock.Error, KeyError, TypeError):
                pass
        log.write({"ev": "report", "op": "lost", "t": now(), "doubt": doubt, "tid": t})

    lock.on_lost = on_lost
    lease = o["lease_ms"] / 1000.0 if o["lease_ms"] else None
    grants = 0
    # the fencing store is written with the blocking socket: a write is a
    # short local round trip, and a real application's storage call would
    # hold the task the same way
    while time.monotonic() < deadline:
        oid = log.inv("acq", lease_ms=o["lease_ms"])
        acq_inv = now()
        try:
            if redlock:
                token = 0 if await lock.acquire(wait=o["wait_ms"] / 1000.0, lease=lease) \
                    else None
            else:
                token = await lock.acquire_token(wait=o["wait_ms"] / 1000.0, lease=lease)
        except hilock.Error as e:
            log.ret("acq", oid, "error", err=err_name(e))
            await asyncio.sleep(plan.pause() + 0.05)
            continue
        if token is None:
            log.ret("acq", oid, "timeout")
            continue
        grants += 1
        grant = f"{log.proc}.{grants}"
        log.ret("acq", oid, "ok", token=None if redlock else token, grant=grant)
        for hold in plan.holds():
            await asyncio.sleep(hold)
            if not may_write(o, lock.lost, acq_inv):
                break
            wid = log.inv("write", token=token, grant=grant)
            try:
                log.ret("write", wid, "ok" if redlock else fence.write(token, grant))
            except OSError as e:
                log.ret("write", wid, "error", err=str(e))
        rid = log.inv("rel", grant=grant)
        try:
            await lock.release()
            log.ret("rel", rid, "ok")
        except hilock.NotOwnerError:
            log.ret("rel", rid, "notowner")
        except hilock.Error as e:
            log.ret("rel", rid, "error", err=err_name(e))
        await asyncio.sleep(plan.pause())
    for c in clients:
        await c.close()


def main() -> int:
    args = sys.argv[1:]
    aio = False
    if args and args[0] == "--aio":
        aio, args = True, args[1:]
    url, lock_name, fence_port, proc, seed, secs, path = args[:7]
    o = parse_opts(args[7:])
    log = Log(path, int(proc))
    fence = Fence(int(fence_port), lock_name)
    plan = Plan(int(seed), int(proc), o)
    deadline = time.monotonic() + float(secs)
    log.ready = time.monotonic()
    log.write({"ev": "start", "t": now(), "pid": os.getpid(), "driver": "aio" if aio else "python"})
    try:
        if aio:
            asyncio.run(run_aio(url, lock_name, fence, log, plan, o, deadline))
        else:
            run_blocking(url, lock_name, fence, log, plan, o, deadline)
    except hilock.Error as e:  # the client could not open: recorded, the checker counts it
        log.write({"ev": "fatal", "t": now(), "err": f"{err_name(e)}: {e}"})
        return 1
    log.write({"ev": "end", "t": now()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
