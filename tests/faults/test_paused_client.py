"""The holder's own process paused (SIGSTOP, then SIGCONT: a VM or GC pause,
a debugger, a laptop lid) while it holds a watchdog lock and listens on the
lock's channel, with the subscription liveness check running (hl_sublive:
a PING after a quiet interval, the connection given up when the PING is
unanswered; 300 ms each with the 600 ms command timeout used here). Every
pause is longer than that interval and its PING deadline together, so on
SIGCONT a PING is overdue and a renewal fell due during the pause.

Each case runs on every driver that is a process of its own: the
conformance agents (tests/conformance, their line protocol) of the blocking
C client (`c`), hilock_async on an epoll loop (`c-async`), the Python
package (`python`) and hilock.aio (`asyncio`). The request a case asks
first after the pause is written to the agent's stdin while it is stopped,
so it is there when the process runs again: the answer is what the holder
sees before it can do anything under the lock. The OpenResty driver's
cases stop the nginx worker (test_resty.py's agent and nginx; its worker
stopped past the lease is test_resty.py's
test_resty_worker_blocked_past_lease_is_told_first_thing): the short stop
and the force unlock during a stop are the last two cases here.

- past the lease: another client acquires during the pause; the first
  `lost` after SIGCONT says 1, the release says the hold is gone;
- shorter than the lease (a renewal and a PING overdue, the lease not run
  out): `lost` says 0 on SIGCONT and every 100 ms for a lease after it, the
  lease is renewed, the release succeeds and frees the lock;
- a force unlock by another client during a short pause (its message
  reaches the paused holder's socket, or is lost with the connection the
  liveness check gives up): the holder is told within SUB_BOUND of SIGCONT.

Every agent must then answer, and exit when its stdin closes: no crash, no
hang. Times are time.monotonic(); they are printed, the order is asserted.
"""

from __future__ import annotations

import http.client
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

import hilock
from conftest import numsub, opened, report, wait_for, wait_renewed
from test_resty import Actor, _worker_pid, nginx  # noqa: F401 (nginx: the fixture)

ROOT = os.environ.get("HILOCK_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get("HILOCK_BUILD") or os.path.join(ROOT, "build", "release")
CONF = os.path.join(ROOT, "tests", "conformance")

COMMAND_TIMEOUT_MS = 600  # hl_sublive: PING after 300 ms of quiet, given up 300 ms later
SUB_BOUND = 1.0  # told of a force unlock within this of SIGCONT (test_subscription's bound)
DRIVERS = ["c", "c-async", "python", "asyncio"]


@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    """driver -> argv of its conformance agent (the C ones built here, as
    tests/conformance/run.sh builds them)."""
    out = tmp_path_factory.mktemp("agents")
    lib = os.path.join(BUILD, "libcore")
    py = os.environ.get("HILOCK_PYTHON", sys.executable)
    argv = {"python": [py, os.path.join(CONF, "agent.py")],
            "asyncio": [py, os.path.join(CONF, "agent_aio.py")]}
    for driver, src in (("c", "agent.c"), ("c-async", "agent_async.c")):
        exe = str(out / ("agent-" + driver))
        subprocess.run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
                        "-I" + os.path.join(ROOT, "libcore", "include"),
                        "-I" + os.path.join(ROOT, "tests", "common"),
                        os.path.join(CONF, src), os.path.join(ROOT, "tests", "common", "line_agent.c"),
                        "-o", exe, "-L" + lib, "-lhilock", "-Wl,-rpath," + lib, "-lpthread"],
                       check=True)
        argv[driver] = [exe]
    return argv


class Agent:
    """One conformance agent process: one client, actor A."""

    def __init__(self, argv, url: str, **opts: int) -> None:
        self.p = subprocess.Popen(argv + [url] + ["%s=%d" % kv for kv in sorted(opts.items())],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  bufsize=1)
        self.lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self.lines.get(timeout=20)
        assert ready == "agent ok ready", ready

    def _read(self) -> None:
        for line in self.p.stdout:
            self.lines.put(line.strip())

    def send(self, line: str) -> None:
        self.p.stdin.write("A " + line + "\n")
        self.p.stdin.flush()

    def answer(self, timeout: float = 10) -> str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no answer within %.0f s (exit code %r)"
                                 % (timeout, self.p.poll())) from None
        assert line.startswith("A "), line
        return line[2:]

    def __call__(self, line: str, timeout: float = 10) -> str:
        self.send(line)
        return self.answer(timeout)

    def stop(self) -> None:
        os.kill(self.p.pid, signal.SIGSTOP)
        # stopped (state T) before the caller goes on
        wait_for(lambda: _state(self.p.pid) == "T", 5.0, "the agent to stop")

    def resume(self) -> None:
        os.kill(self.p.pid, signal.SIGCONT)

    def close(self) -> int:
        """stdin closed: the agent frees its client and exits (no hang)."""
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGCONT)
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            return self.p.wait(15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return -999


def _state(pid: int) -> str:
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def holder(agents, driver, server, lease_ms: int) -> Agent:
    # a connect timeout of its own: only the command timeout paces the
    # liveness check, and a 600 ms handshake failed at load 120
    return Agent(agents[driver], server.url, watchdog_lease_ms=lease_ms,
                 command_timeout_ms=COMMAND_TIMEOUT_MS, connect_timeout_ms=3000)


def listening(server, name: str) -> None:
    """Until the holder's subscription on the lock's channel is up."""
    channel = "redisson_lock__channel:{%s}" % name
    wait_for(lambda: numsub(server, channel) >= 1, 5.0, "the holder's subscription")


@pytest.mark.parametrize("driver", DRIVERS)
def test_paused_past_lease_first_look_says_lost(agents, server, name, driver):
    """Stopped right after a renewal, for longer than the lease: another
    client acquires once the lease ends on the server. The `lost` queued
    during the pause is answered 1 on SIGCONT."""
    lease_ms = 2000
    a = holder(agents, driver, server, lease_ms)
    other = opened(server.url)
    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        listening(server, name)
        wait_renewed(server, name, lease_ms / 1000)
        a.stop()
        t_stop = time.monotonic()
        try:
            assert other.lock(name).acquire(wait=3 * lease_ms / 1000, lease=30), \
                "the other client did not get the lock"
            t_other = time.monotonic() - t_stop
            a.send("lost r %s" % name)  # waits in the stopped agent's stdin
            time.sleep(0.2)
        finally:
            a.resume()
        t_cont = time.monotonic() - t_stop
        first = a.answer()
        t_first = time.monotonic() - t_stop
        report(f"{driver} stopped past its lease: other client acquired after", t_other)
        report(f"{driver} stopped past its lease: SIGCONT after", t_cont)
        report(f"{driver} stopped past its lease: first `lost` answered after", t_first)
        assert first == "ok 1", f"{driver}: the first look after SIGCONT said {first!r}"
        rel = a("unlock r %s" % name)
        assert rel.startswith("err notowner") or rel.startswith("err lost"), rel
        assert a("held r %s" % name) == "ok 0"
        other.lock(name).release()
    finally:
        rc = a.close()
        other.close()
    assert rc == 0, f"{driver}: the agent exited with {rc}"


@pytest.mark.parametrize("driver", DRIVERS)
def test_paused_shorter_than_lease_no_false_lost(agents, server, name, driver):
    """Stopped right after a renewal for 1.3 s of a 3 s lease: on SIGCONT the
    renewal (every 1 s) and a PING are overdue, the lease has 1.7 s left.
    Nothing is lost: `lost` is 0 on SIGCONT and for a lease after it, the
    watchdog renews the lease, the release frees the lock."""
    lease_ms, pause = 3000, 1.3
    a = holder(agents, driver, server, lease_ms)
    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        listening(server, name)
        wait_renewed(server, name, lease_ms / 1000)
        a.stop()
        t_stop = time.monotonic()
        try:
            time.sleep(pause)
            a.send("lost r %s" % name)
            left = server("PTTL", name)
        finally:
            a.resume()
        t_cont = time.monotonic()
        first = a.answer()
        report(f"{driver} stopped {pause:.1f} s of a {lease_ms} ms lease: lease left at SIGCONT",
               left / 1000)
        assert left > 0, "the lease ran out during the pause: the case is void"
        assert first == "ok 0", f"{driver}: told lost after a pause shorter than the lease: {first!r}"
        looks, renewal = 0, None
        while time.monotonic() - t_cont < lease_ms / 1000:
            assert a("lost r %s" % name) == "ok 0", f"{driver}: lost {looks * 100} ms after SIGCONT"
            looks += 1
            if renewal is None and server("PTTL", name) > lease_ms - 300:
                renewal = time.monotonic() - t_cont
            time.sleep(0.1)
        report(f"{driver} stopped {pause:.1f} s: lease renewed after SIGCONT",
               -0.001 if renewal is None else renewal)
        report(f"{driver} stopped {pause:.1f} s: pause", t_cont - t_stop)
        assert renewal is not None, f"{driver}: the lease was not renewed within a lease of SIGCONT"
        assert a("holds r %s" % name) == "ok 1"
        assert a("unlock r %s" % name) == "ok"
        assert server("EXISTS", name) == 0
    finally:
        rc = a.close()
    assert rc == 0, f"{driver}: the agent exited with {rc}"


@pytest.mark.parametrize("driver", DRIVERS)
def test_force_unlock_during_pause_told_after_sigcont(agents, server, name, driver):
    """Another client force-unlocks and takes the lock while the holder (a
    30 s watchdog lease: no renewal falls due) is stopped for 1.2 s; the
    unlock message reaches the stopped holder's pub/sub socket, whose PING
    is overdue on SIGCONT. The holder is told within SUB_BOUND of SIGCONT
    (the message read, or the hold checked when the connection is given
    up), and its release says the hold is gone."""
    a = holder(agents, driver, server, 30000)
    other = hilock.Client(server.url)
    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        listening(server, name)
        time.sleep(0.2)  # the subscription confirmed
        a.stop()
        t_stop = time.monotonic()
        try:
            assert other.lock(name).force_unlock()
            assert other.lock(name).acquire(wait=0)
            time.sleep(max(0.0, 1.2 - (time.monotonic() - t_stop)))
        finally:
            a.resume()
        t_cont = time.monotonic()
        told = None
        while time.monotonic() - t_cont < 3.0:
            if a("lost r %s" % name) == "ok 1":
                told = time.monotonic() - t_cont
                break
            time.sleep(0.02)
        report(f"{driver} force unlock during a 1.2 s stop: told after SIGCONT (-1: not in 3 s)",
               -0.001 if told is None else told)
        assert told is not None and told < SUB_BOUND, \
            f"{driver}: not told within {SUB_BOUND} s of SIGCONT"
        rel = a("unlock r %s" % name)
        assert rel.startswith("err notowner") or rel.startswith("err lost"), rel
        assert other.lock(name).owned()
        other.lock(name).release()
    finally:
        rc = a.close()
        other.close()
    assert rc == 0, f"{driver}: the agent exited with {rc}"


# ---- OpenResty: the nginx worker stopped for less than the lease ----

def test_resty_worker_stopped_shorter_than_lease_no_false_lost(nginx, server, name):
    """The nginx worker stopped right after a renewal for 1.3 s of a 3 s
    lease (a renewal overdue on SIGCONT, the lease not run out). The request
    that waited at the stopped worker is answered `lost` 0, and so is every
    look for a lease after it; the lease is renewed, the release frees the
    lock."""
    lease_ms, pause = 3000, 1.3
    a = Actor(nginx, server.url, watchdog_lease_ms=lease_ms, command_timeout_ms=COMMAND_TIMEOUT_MS)
    worker = _worker_pid(nginx)
    q = urllib.parse.urlencode({"url": a.url, "opts": a.opts, "tid": a.tid,
                                "line": "X lost r %s" % name})
    conn = http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=10)
    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        listening(server, name)
        wait_renewed(server, name, lease_ms / 1000)
        conn.request("GET", "/agent?" + q)
        assert conn.getresponse().read().decode().strip() == "ok 0"  # kept alive
        os.kill(worker, signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            conn.request("GET", "/agent?" + q)  # waits at the stopped worker
            time.sleep(max(0.0, pause - (time.monotonic() - t_stop)))
            left = server("PTTL", name)
        finally:
            os.kill(worker, signal.SIGCONT)
        t_cont = time.monotonic()
        first = conn.getresponse().read().decode(errors="replace").strip()
        report("openresty worker stopped 1.3 s of a 3000 ms lease: lease left at SIGCONT",
               left / 1000)
        assert left > 0, "the lease ran out during the stop: the case is void"
        assert first == "ok 0", "told lost after a stop shorter than the lease: %r" % first
        renewal = None
        while time.monotonic() - t_cont < lease_ms / 1000:
            assert a("lost r %s" % name) == "ok 0"
            if renewal is None and server("PTTL", name) > lease_ms - 300:
                renewal = time.monotonic() - t_cont
            time.sleep(0.1)
        report("openresty worker stopped 1.3 s: lease renewed after SIGCONT",
               -0.001 if renewal is None else renewal)
        assert renewal is not None, "the lease was not renewed within a lease of SIGCONT"
        assert a("unlock r %s" % name) == "ok"
        assert server("EXISTS", name) == 0
    finally:
        conn.close()


def test_resty_force_unlock_during_worker_stop_told_after_sigcont(nginx, server, name):
    """Another client force-unlocks and takes the lock while the nginx worker
    holding it (a 30 s watchdog lease) is stopped for 1.2 s: the holder's
    lk:lost() says true within SUB_BOUND of SIGCONT."""
    a = Actor(nginx, server.url, watchdog_lease_ms=30000, command_timeout_ms=COMMAND_TIMEOUT_MS)
    worker = _worker_pid(nginx)
    other = hilock.Client(server.url)
    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        listening(server, name)
        time.sleep(0.2)  # the subscription confirmed
        os.kill(worker, signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            assert other.lock(name).force_unlock()
            assert other.lock(name).acquire(wait=0)
            time.sleep(max(0.0, 1.2 - (time.monotonic() - t_stop)))
        finally:
            os.kill(worker, signal.SIGCONT)
        t_cont = time.monotonic()
        told = None
        while time.monotonic() - t_cont < 3.0:
            if a("lost r %s" % name) == "ok 1":
                told = time.monotonic() - t_cont
                break
            time.sleep(0.02)
        report("openresty force unlock during a 1.2 s worker stop: told after SIGCONT "
               "(-1: not in 3 s)", -0.001 if told is None else told)
        assert told is not None and told < SUB_BOUND, \
            f"openresty: not told within {SUB_BOUND} s of SIGCONT"
        rel = a("unlock r %s" % name)
        assert rel.startswith("err notowner") or rel.startswith("err lost"), rel
        assert other.lock(name).owned()
        other.lock(name).release()
    finally:
        other.close()
