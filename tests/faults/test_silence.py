"""Silent links: a holder whose link to Redis goes silent is told its lock is
lost or in doubt before any other client can be granted it, and two
`hilock run` commands on one name never run at the same time.

The faults (faultproxy.py), each switched on while the holder holds:
- half-dead: every live connection drops every byte both ways and new
  connections are accepted, then never answered (a load balancer or a
  half-dead host: connect succeeds, the handshake hangs);
- requests-lost: the client's bytes are dropped, the server's delivered;
- replies-lost: the server's bytes are dropped, the client's delivered (the
  renewals may still reach the server and keep the lock alive there);
- requests-lost-live, replies-lost-live (hilock.aio): the same, on the
  connections open at that moment only; the client's new connections work.

The holder keeps the client's default timeouts (command and connect 1 s) with
a 3 s watchdog lease: a command timeout of lease/3, so that the watchdog's
renewal I/O is stuck for as long as its period. The other client talks to
the server directly. What is asserted is order (told before the other
acquired; the first command's last sign of life before the second's start)
and generous bounds, not exact times; the times are printed.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

import hilock
from conftest import report, stop_all, wait_for, wait_renewed  # noqa: F401 (test_force's)
from faultproxy import FaultProxy

LEASE = 3.0
FAULTS = ["half-dead", "requests-lost", "replies-lost"]


def fault_on(proxy: FaultProxy, fault: str) -> None:
    if fault == "half-dead":
        proxy.half_dead(True)
    elif fault == "requests-lost":
        proxy.silence(up=True, down=False)
    elif fault == "replies-lost":
        proxy.silence(up=False, down=True)
    else:  # one way, on the connections live now only: new ones are healthy
        for c in proxy.live():
            if fault == "requests-lost-live":
                c.drop_up = True
            else:
                c.drop_down = True


def make(c, kind, name):
    if kind == "read":
        return c.read_write_lock(name).read_lock()
    if kind == "write":
        return c.read_write_lock(name).write_lock()
    return c.lock(name) if kind == "reentrant" else c.fair_lock(name)


def wait_permit_renewed(server, name: str, lease: float) -> None:
    """As wait_renewed, for the one permit of semaphore name: its expiry
    (epoch ms, the score in the semaphore's timeout ZSET) moved later."""
    key = "{%s}:timeout" % name
    first = None
    script = "local r = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES') return r[2]"

    def moved():
        nonlocal first
        got = server("EVAL", script, "1", key)  # the id is binary: only the score
        if not got:
            return False
        score = float(got)
        if first is None:
            first = score
        return score > first + 300

    wait_for(moved, 2 * lease, "a permit renewal")


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", ["reentrant", "fair", "write"])
def test_silent_link_holder_told_before_other_acquires(server, proxy, name, kind, fault):
    holder = hilock.Client(proxy.url(), watchdog_lease=LEASE, command_timeout=1.0,
                           connect_timeout=1.0)
    other = hilock.Client(server.url, command_timeout=1.0)
    try:
        lk = make(holder, kind, name)
        lost_at = []
        lk.on_lost = lambda l, tid: lost_at.append(time.monotonic())
        assert lk.acquire(wait=0)
        wait_renewed(server, name, LEASE)
        fault_on(proxy, fault)
        t_cut = time.monotonic()
        # replies-lost: the renewals may still reach the server, keeping the
        # lock alive there; then the other client does not get it at all
        got = make(other, kind, name).acquire(wait=2 * LEASE, lease=30)
        t_other = time.monotonic()
        if got:
            report(f"{fault} ({kind}): other client acquired after", t_other - t_cut)
        # told at all while the link is still silent (today: only after it heals)
        wait_for(lambda: lost_at, 2 * LEASE, "the holder to be told")
        report(f"{fault} ({kind}): holder told after", lost_at[0] - t_cut)
        if got:
            assert lost_at[0] < t_other, "both believed they held the lock"
        else:
            assert fault == "replies-lost", "the holder's lease never ran out"
        assert lk.lost
        assert "in doubt" in lk.errmsg or "lost" in lk.errmsg
    finally:
        proxy.clear()
        holder.close()
        other.close()


# ---- hilock.aio ----

AIO_FAULTS = FAULTS + ["requests-lost-live", "replies-lost-live"]
AIO_CASES = [(k, f) for f in FAULTS for k in ("reentrant", "fair", "write")]
AIO_CASES += [("reentrant", f) for f in AIO_FAULTS if f not in FAULTS]


@pytest.mark.parametrize("kind,fault", AIO_CASES)
def test_aio_silent_link_holder_told_before_other_acquires(server, proxy, name, kind, fault):
    """As the blocking client's case above, for a hilock.aio holder (its
    watchdog task and doubt timer on the loop). The other client is a
    blocking one, run in a thread. The whole link silent one way or both:
    the holder must be told while it is silent, before the other client is
    granted the lock (replies-lost: the renewals may keep it alive, then
    nobody else gets it). Only the live connections silent one way: the
    holder may renew on a new connection and keep the lock; if the other
    client gets it, the holder was told first."""
    import asyncio

    import hilock.aio as aio

    other = hilock.Client(server.url, command_timeout=1.0)

    async def main() -> None:
        holder = await aio.connect(proxy.url(), watchdog_lease=LEASE, command_timeout=1.0,
                                   connect_timeout=1.0)
        try:
            lk = make(holder, kind, name)
            lost_at = []
            lk.on_lost = lambda l, tid: lost_at.append(time.monotonic())
            assert await lk.acquire(wait=0)
            await asyncio.to_thread(wait_renewed, server, name, LEASE)
            fault_on(proxy, fault)
            t_cut = time.monotonic()
            got = await asyncio.to_thread(
                lambda: make(other, kind, name).acquire(wait=2 * LEASE, lease=30))
            t_other = time.monotonic()
            if got:
                report(f"aio {fault} ({kind}): other client acquired after", t_other - t_cut)
                assert lost_at, "both believed they held the lock (the holder was never told)"
                assert lost_at[0] < t_other, "both believed they held the lock"
            elif fault in ("half-dead", "requests-lost"):
                pytest.fail("the holder's lease never ran out on a link silent that way")
            if fault in FAULTS:
                # the whole link: told while it is still silent
                end = time.monotonic() + 2 * LEASE
                while not lost_at and time.monotonic() < end:
                    await asyncio.sleep(0.02)
                assert lost_at, "the holder was not told while its link was silent"
                assert lk.lost
            if lost_at:
                report(f"aio {fault} ({kind}): holder told after", lost_at[0] - t_cut)
            else:
                report(f"aio {fault} ({kind}): not told, lock kept (renewed on a new "
                       "connection); holder's key PTTL", server("PTTL", name) / 1000.0)
                assert await lk.owned()  # this task's (not under wait_for: a task of its own)
        finally:
            proxy.clear()
            await holder.close()
    try:
        asyncio.run(main())
    finally:
        other.close()


# ---- hilock run ----

# The command: "start T" when it begins, "tick T" every 10 ms while it runs,
# "end T" on SIGTERM (T monotonic seconds: the same clock in every process);
# with a second argument N it ends by itself after N seconds. Unbuffered
# writes: the handler may run in the middle of the loop's own write.
RUN_CMD = r'''
import os, signal, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def note(what):
    os.write(fd, ("%s %.6f\n" % (what, time.monotonic())).encode())
def stop(*_):
    note("end")
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
note("start")
until = time.monotonic() + float(sys.argv[2]) if len(sys.argv) > 2 else None
while until is None or time.monotonic() < until:
    note("tick")
    time.sleep(0.01)
note("end")
'''


def hilock_cli() -> str:
    hl = os.path.join(os.environ.get("HILOCK_BUILD", ""), "cli", "hilock")
    if not os.access(hl, os.X_OK):
        pytest.skip("no hilock CLI built (HILOCK_BUILD)")
    return hl


def times(path) -> list:
    """(what, T) of every complete line the command wrote."""
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path).read().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((parts[0], float(parts[1])))
    return out


def started(path) -> bool:
    return any(w == "start" for w, _ in times(path))


def run_args(hl, url, name, mode, *opts):
    args = [hl, "run", "--url", url, *opts]
    if mode == "semaphore":  # one permit: a lock's exclusion
        return args + ["--semaphore", name + ":1"]
    if mode == "fair":
        args.append("--fair")
    elif mode == "write":
        args.append("-x")
    elif mode == "fenced":
        args.append("--fenced")
    return args + [name]


# every fault with a plain lock; the other kinds under the half-dead link
CLI_CASES = [("plain", f) for f in FAULTS] + [(m, "half-dead") for m in ("fair", "write", "fenced")]
# a permit of a one-permit semaphore, renewed by hilock run itself
CLI_CASES += [("semaphore", f) for f in ("half-dead", "requests-lost")]


@pytest.mark.parametrize("mode,fault", CLI_CASES)
def test_cli_run_silent_link_never_overlaps(server, proxy, name, tmp_path, fault, mode):
    hl = hilock_cli()
    py = os.environ.get("HILOCK_PYTHON", "python3")
    a_out, b_out = str(tmp_path / "a"), str(tmp_path / "b")
    a = subprocess.Popen(run_args(hl, proxy.url(), name, mode, "--watchdog-lease", str(LEASE)) +
                         ["--", py, "-c", RUN_CMD, a_out])
    b = None
    try:
        wait_for(lambda: started(a_out), 10, "the first command")
        if mode == "semaphore":  # the permit's lease, in the semaphore's timeout ZSET
            wait_permit_renewed(server, name, LEASE)
        else:
            wait_renewed(server, name, LEASE)
        fault_on(proxy, fault)
        t_cut = time.monotonic()
        b = subprocess.Popen(run_args(hl, server.url, name, mode, "-w", str(2 * LEASE)) +
                             ["--", py, "-c", RUN_CMD, b_out, "0.2"])
        # the first run stops its command and says the lock was lost, while
        # the link is still silent (today: only after it heals)
        try:
            rc = a.wait(2 * LEASE + 2)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc == 75, "the cut-off hilock run did not stop its command (exit %r)" % rc
        a_last = max(t for _, t in times(a_out))
        report(f"{fault} ({mode}): hilock run stopped its command after", a_last - t_cut)
        b.wait(3 * LEASE + 5)
        if started(b_out):
            b_start = min(t for w, t in times(b_out) if w == "start")
            report(f"{fault} ({mode}): the second command started after", b_start - t_cut)
            assert a_last < b_start, "two hilock run commands ran at the same time"
        else:
            assert fault == "replies-lost", "the first run's lease never ran out"
    finally:
        proxy.clear()
        stop_all(a, b)
