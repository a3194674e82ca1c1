#!/usr/bin/env python3
"""hilock <-> Redisson interoperability suite (orchestrator, stdlib only).

Starts a throwaway redis-server on a free loopback port, one Redisson agent
(a JVM), hilock C driver processes and, when the Python package is importable,
hilock Python driver processes; then runs every scenario in both directions
and checks the raw data in Redis as well as what each side's API reports.

All agents speak the same line protocol (see Agent.java / driver.c):
    request  ACTOR COMMAND ARGS...       answer  ACTOR ok|err VALUES...

Usage: interop.py --agent-cmd "java ..." --driver-cmd "path/to/driver" \
                  [--py-driver-cmd "python3 driver.py"] [-k SUBSTRING]
Prints one line per check and a closing "N passed, N failed"; exit 1 on any
failure.
"""
import argparse
import atexit
import json
import os
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

WATCHDOG_MS = 1500      # both sides: Redisson lockWatchdogTimeout, hilock watchdog_lease_ms
WAKE_LIMIT_MS = 50.0    # a woken waiter must hold the lock within this after the unlock
WAKE_TRIES = 3          # a slow hand-off (a scheduler or JVM pause on 2 shared cores) is
                        # measured again; a wake by the lease (30 s) would fail every try


def timed_wake(measure):
    """Run measure() (one full hand-off, returns ms) until one is under the limit."""
    seen = []
    for _ in range(WAKE_TRIES):
        seen.append(measure())
        if seen[-1] < WAKE_LIMIT_MS:
            break
    return seen
LONG_LEASE = 30000      # so a wake can only come from the pub/sub message
FAIR_WAIT = 20000       # fair waiters' wait (= their queue window on both sides)

_cleanup = []


def _run_cleanup():
    while _cleanup:
        fn = _cleanup.pop()
        try:
            fn()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _on_signal(signum, _frame):
    _run_cleanup()
    sys.exit(128 + signum)


def _install_cleanup():
    atexit.register(_run_cleanup)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def wait_until(fn, timeout, what, interval=0.005):
    """Poll fn() until it returns a true value; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Failure("timed out waiting for " + what)
        time.sleep(interval)


# ---------------------------------------------------------------- Redis --

class Resp:
    """A minimal RESP2 client for raw checks (one socket; a call holds it from
    request to reply, so scenarios running at once may share it)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        self.mu = threading.Lock()

    def close(self):
        self.sock.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise Failure("redis error: " + rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode()
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise Failure("bad RESP reply %r" % line)

    def __call__(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        with self.mu:
            self.sock.sendall(b"".join(out))
            return self._reply()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="hilock-interop-")
        self.proc = None
        self.port = None

    def start(self):
        exe = shutil.which("redis-server")
        check(exe, "redis-server not found")
        for _ in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.dir, "--daemonize", "no",
                 "--loglevel", "warning"],
                stdout=open(os.path.join(self.dir, "redis.log"), "wb"),
                stderr=subprocess.STDOUT)
            _cleanup.append(self.stop)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    r = Resp(self.port)
                    if r("PING") == "PONG":
                        r.close()
                        return
                except OSError:
                    time.sleep(0.02)
            self.stop()
        raise Failure("could not start redis-server")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------- agents --

class Side:
    """One agent process (Redisson JVM, hilock C driver, hilock Python driver)."""

    def __init__(self, label, argv):
        self.label = label
        self.argv = argv
        self.has_events = True  # reports "! lost" lines from its lost callback
        self.sent_us = {}
        self.replies = {}
        self.events = []
        self.lock = threading.Lock()
        self.write_mu = threading.Lock()  # one request line at a time on stdin
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, bufsize=1,
                                     encoding="utf-8", env=dict(os.environ, PYTHONIOENCODING="utf-8"))
        _cleanup.append(self.stop)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        status, vals = self.recv("agent", 60)
        check(status == "ok" and vals[0] == "ready", "%s did not start: %s %s"
              % (label, status, vals))
        self.client_id = vals[1]

    def _q(self, actor):
        with self.lock:
            return self.replies.setdefault(actor, queue.Queue())

    def _read(self):
        for line in self.proc.stdout:
            words = line.split()
            if not words:
                continue
            if words[0] == "!":
                self.events.append(words[1:])
                continue
            # Drivers without a fine clock (Lua) leave timestamps to us:
            # "@" = now (receipt), "^" = when the request was sent.
            now = str(time.time_ns() // 1000)
            sent = str(self.sent_us.get(words[0], 0))
            words = [now if x == "@" else sent if x == "^" else x for x in words]
            self._q(words[0]).put(words[1:])
        self._q("agent").put(["err", "exited"])

    def send(self, actor, *cmd):
        self.sent_us[actor] = time.time_ns() // 1000
        try:
            with self.write_mu:
                self.proc.stdin.write(" ".join([actor] + [str(c) for c in cmd]) + "\n")
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise Failure("%s has exited (rc %s)" % (self.label, self.proc.poll()))

    def recv(self, actor, timeout=10):
        try:
            words = self._q(actor).get(timeout=timeout)
        except queue.Empty:
            raise Failure("%s actor %s: no answer within %ss" % (self.label, actor, timeout))
        return words[0], words[1:]

    def pending(self, actor):
        return not self._q(actor).empty()

    def call(self, actor, *cmd, timeout=10):
        self.send(actor, *cmd)
        status, vals = self.recv(actor, timeout)
        check(status == "ok", "%s %s %s: %s %s" % (self.label, actor, " ".join(map(str, cmd)),
                                                   status, " ".join(vals)))
        return vals

    def value(self, actor, *cmd):
        return int(self.call(actor, *cmd)[0])

    def stderr_tail(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-2000:]

    def exited(self):
        return self.proc.poll() is not None

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class PerActorSide:
    """A side whose driver runs one actor per process (Lua has no threads):
    every actor gets its own process, hence its own client and owner."""

    def __init__(self, label, argv):
        self.label = label
        self.argv = argv
        self.has_events = False
        self.events = []
        self.procs = {}
        self.client_id = self._of("agent-probe").client_id

    def _of(self, actor):
        p = self.procs.get(actor)
        if p is None:
            p = self.procs[actor] = Side("%s[%s]" % (self.label, actor), self.argv)
        return p

    def send(self, actor, *cmd):
        self._of(actor).send(actor, *cmd)

    def recv(self, actor, timeout=10):
        return self._of(actor).recv(actor, timeout)

    def pending(self, actor):
        return self._of(actor).pending(actor)

    def call(self, actor, *cmd, timeout=10):
        return self._of(actor).call(actor, *cmd, timeout=timeout)

    def value(self, actor, *cmd):
        return self._of(actor).value(actor, *cmd)

    def exited(self):
        return any(p.exited() for p in list(self.procs.values()))

    def stderr_tail(self):
        return "".join(p.stderr_tail() for p in list(self.procs.values())
                       if p.exited())[-2000:]

    def stop(self):
        for p in list(self.procs.values()):
            p.stop()


# ------------------------------------------------------------ scenarios --

class Ctx:
    def __init__(self, redis, sides):
        self.r = redis
        self.sides = sides
        self.n = 0
        self.mu = threading.Lock()

    def actor(self, tag):
        with self.mu:
            self.n += 1
            return "%s%d" % (tag, self.n)


def companion(prefix, name):
    """Redisson's rule: "prefix:{name}", or "prefix:name" if name has a '{'."""
    return "%s:%s" % (prefix, name if "{" in name else "{%s}" % name)


def names(name):
    return {"channel": companion("redisson_lock__channel", name),
            "queue": companion("redisson_lock_queue", name),
            "timeout": companion("redisson_lock_timeout", name)}


def server_ms(r):
    sec, usec = r("TIME")
    return int(sec) * 1000 + int(usec) // 1000


def hash_of(r, name):
    flat = r("HGETALL", name) or []
    return dict(zip(flat[0::2], flat[1::2]))


def numsub(r, channel):
    return int(r("PUBSUB", "NUMSUB", channel)[1])


def lock(side, actor, kind, name, wait, lease, timeout=10):
    v = side.call(actor, "lock", kind, name, wait, lease, timeout=timeout)
    return int(v[0]), int(v[1])


def wait_for_waiter(c, kind, name, owner, position):
    """Condition: the waiter is listening (and, fair, queued at position)."""
    n = names(name)
    if kind == "r":
        wait_until(lambda: numsub(c.r, n["channel"]) >= 1, 5, "waiter subscribed on " + n["channel"])
    else:
        wait_until(lambda: c.r("LINDEX", n["queue"], position) == owner, 5,
                   "%s queued at %d" % (owner, position))
        own = n["channel"] + ":" + owner
        wait_until(lambda: numsub(c.r, own) >= 1, 5, "waiter subscribed on " + own)


def scn_hold(c, A, B, kind, lease, name=None):
    """A holds; B's try fails and B's queries read A's lock right."""
    name = name or "it:hold:%s:%s:%s>%s" % (kind, lease, A.label, B.label)
    a, b = c.actor("a"), c.actor("b")
    owner = A.call(a, "owner")[0]
    got, _ = lock(A, a, kind, name, 0, lease)
    check(got == 1, "holder could not take a free lock")
    h = hash_of(c.r, name)
    check(h == {owner: "1"}, "hash after acquire is %r, want {%s: 1}" % (h, owner))
    expect_max = lease if lease > 0 else WATCHDOG_MS
    pttl = c.r("PTTL", name)
    check(0 < pttl <= expect_max, "PTTL %d not in (0, %d]" % (pttl, expect_max))

    got, _ = lock(B, b, kind, name, 0, 5000)
    check(got == 0, "%s took a lock %s holds" % (B.label, A.label))
    if kind == "f":
        n = names(name)
        check(c.r("LLEN", n["queue"]) == 0 and c.r("ZCARD", n["timeout"]) == 0,
              "a failed single try left a trace in the fair queue")
    check(B.value(b, "islocked", kind, name) == 1, "%s isLocked = false" % B.label)
    check(B.value(b, "held", kind, name) == 0, "%s thinks it holds A's lock" % B.label)
    check(B.value(b, "holds", kind, name) == 0, "%s hold count != 0" % B.label)
    ttl = B.value(b, "ttl", kind, name)
    check(0 < ttl <= expect_max, "%s remaining TTL %d not in (0, %d]" % (B.label, ttl, expect_max))
    check(A.value(a, "holds", kind, name) == 1, "holder's own hold count != 1")
    check(A.value(a, "held", kind, name) == 1, "holder's own held != 1")
    B.send(b, "unlock", kind, name)
    st, vals = B.recv(b)
    check(st == "err" and vals[0] == "notowner",
          "%s unlock of A's lock answered %s %s, want err notowner" % (B.label, st, vals))
    check(hash_of(c.r, name) == {owner: "1"}, "non-owner unlock changed the hash")
    A.call(a, "unlock", kind, name)
    check(c.r("EXISTS", name) == 0, "lock still exists after the holder's unlock")
    check(B.value(b, "islocked", kind, name) == 0, "%s still sees it locked" % B.label)


def scn_wake(c, A, B, kind, name=None):
    """A unlocks; B's blocked waiter holds the lock within WAKE_LIMIT_MS."""
    name = name or "it:wake:%s:%s>%s" % (kind, A.label, B.label)
    a, b = c.actor("a"), c.actor("b")
    owner_b = B.call(b, "owner")[0]

    def measure():
        check(lock(A, a, kind, name, 0, LONG_LEASE)[0] == 1, "holder could not lock")
        B.send(b, "lock", kind, name, 10000, LONG_LEASE)
        wait_for_waiter(c, kind, name, owner_b, 0)
        check(not B.pending(b), "waiter answered while the lock was held")
        t0 = int(A.call(a, "unlock", kind, name)[0])
        st, vals = B.recv(b, 15)
        check(st == "ok" and vals[0] == "1", "waiter did not acquire: %s %s" % (st, vals))
        check(hash_of(c.r, name) == {owner_b: "1"}, "hash after hand-off is not the waiter's")
        B.call(b, "unlock", kind, name)
        return (int(vals[1]) - t0) / 1000.0

    seen = timed_wake(measure)
    tries = ", ".join("%.1f" % m for m in seen)
    check(seen[-1] < WAKE_LIMIT_MS, "hand-off took %s ms (limit %.0f)" % (tries, WAKE_LIMIT_MS))
    return "hand-off %s ms" % tries


def scn_reentrant(c, A, B, kind):
    """3 holds on A: the field reads 3; B cannot take it until the 3rd unlock."""
    name = "it:reent:%s:%s>%s" % (kind, A.label, B.label)
    a, b = c.actor("a"), c.actor("b")
    owner = A.call(a, "owner")[0]
    for i in (1, 2, 3):
        check(lock(A, a, kind, name, 0, 10000)[0] == 1, "re-entry %d refused" % i)
        check(c.r("HGET", name, owner) == str(i), "hold field after %d locks = %r"
              % (i, c.r("HGET", name, owner)))
        check(A.value(a, "holds", kind, name) == i, "holder's hold count != %d" % i)
    check(c.r("HLEN", name) == 1, "hash has more than one field")
    notes = []
    for left in (2, 1, 0):
        check(lock(B, b, kind, name, 0, 10000)[0] == 0,
              "%s took it while %d holds remained" % (B.label, left + 1))
        check(B.value(b, "islocked", kind, name) == 1, "%s isLocked false" % B.label)
        check(B.value(b, "holds", kind, name) == 0, "%s hold count != 0" % B.label)
        A.call(a, "unlock", kind, name)
        if left:
            check(c.r("HGET", name, owner) == str(left), "after unlock, field != %d" % left)
            check(A.value(a, "holds", kind, name) == left, "holder count != %d" % left)
            pttl = c.r("PTTL", name)
            check(pttl > 0, "lease not re-applied after partial unlock (PTTL %d)" % pttl)
            if left == 2:
                # Known difference: Redisson's unlock re-applies lockWatchdogTimeout
                # (RedissonLock.internalLockLeaseTime) whatever lease the lock was
                # taken with; hilock re-applies the lease of the last acquire.
                if A.label == "redisson":
                    check(pttl <= WATCHDOG_MS, "Redisson partial unlock: PTTL %d, expected "
                          "its lockWatchdogTimeout (%d)" % (pttl, WATCHDOG_MS))
                else:
                    check(WATCHDOG_MS < pttl <= 10000, "hilock partial unlock: PTTL %d, "
                          "expected the 10000 ms lease re-applied" % pttl)
                notes.append("PTTL after partial unlock %d ms" % pttl)
    check(c.r("EXISTS", name) == 0, "lock not deleted after the last unlock")
    check(lock(B, b, kind, name, 0, 10000)[0] == 1, "%s cannot take the freed lock" % B.label)
    B.call(b, "unlock", kind, name)
    return "; ".join(notes)


def scn_watchdog(c, A, B, kind="r"):
    """A's watchdog lock stays alive over > 3 leases while B watches and tries."""
    name = "it:watchdog:%s:%s>%s" % (kind, A.label, B.label)
    a, b1, b2 = c.actor("a"), c.actor("b"), c.actor("b")
    owner = A.call(a, "owner")[0]
    events_before = len(A.events)
    check(lock(A, a, kind, name, 0, 0)[0] == 1, "holder could not lock")
    span = 3.2 * WATCHDOG_MS
    B.send(b1, "lock", kind, name, int(span), LONG_LEASE)  # must time out
    ttls = []
    end = time.monotonic() + span / 1000.0
    while time.monotonic() < end:
        ttls.append(B.value(b2, "ttl", kind, name))
        check(ttls[-1] > 0, "lock expired under the watchdog (TTL %d after %d polls)"
              % (ttls[-1], len(ttls)))
        check(ttls[-1] <= WATCHDOG_MS, "TTL %d above the watchdog lease" % ttls[-1])
        check(c.r("HGET", name, owner) == "1", "holder's field gone")
        time.sleep(0.05)
    st, vals = B.recv(b1, 10)
    check(st == "ok" and vals[0] == "0", "%s took over a watchdog lock: %s %s"
          % (B.label, st, vals))
    check(A.value(a, "held", kind, name) == 1, "holder lost its lock")
    A.call(a, "unlock", kind, name)
    check(c.r("EXISTS", name) == 0, "lock survived its unlock")
    # this lock's events only: other watchdog scenarios hold locks on the same
    # side at the same time; main() fails the run on any lost event outside
    # the lost scenarios, however late it arrives
    lost = [e for e in A.events[events_before:] if e[1:2] == [name]]
    check(not lost, "holder reported lost locks: %r" % lost)
    return "%d TTL reads over %.1f s, min %d ms" % (len(ttls), span / 1000, min(ttls))


def scn_fair(c, A, B, wait=FAIR_WAIT):
    """Waiters from both sides queue on one fair lock; grants follow arrival.

    wait > 0: each waiter's window is its wait; wait -1 (forever): both sides
    use their default window, 300 000 ms (Redisson fairLockWaitTimeout,
    hilock fair_wait_window_ms)."""
    window = wait if wait > 0 else 300000
    name = "it:fair:%s:%s>%s" % (wait, A.label, B.label)
    n = names(name)
    h = c.actor("h")
    check(lock(A, h, "f", name, 0, LONG_LEASE)[0] == 1, "holder could not lock")
    waiters = []  # (side, actor, owner) in arrival order: B, A, B, A
    for i, side in enumerate((B, A, B, A)):
        w = c.actor("w")
        owner = side.call(w, "owner")[0]
        side.send(w, "lock", "f", name, wait, LONG_LEASE)
        wait_for_waiter(c, "f", name, owner, i)
        waiters.append((side, w, owner))
    line = c.r("LRANGE", n["queue"], 0, -1)
    check(line == [o for _, _, o in waiters], "queue %r not in arrival order" % line)

    def deadlines_step(label):
        scores = [float(c.r("ZSCORE", n["timeout"], o)) for o in c.r("LRANGE", n["queue"], 0, -1)]
        steps = [scores[i + 1] - scores[i] for i in range(len(scores) - 1)]
        check(all(s == window for s in steps), "%s: deadline steps %r, want %d each"
              % (label, steps, window))

    deadlines_step("after queueing")
    prev_side, prev_actor = A, h
    grants = []
    for i, (side, w, owner) in enumerate(waiters):
        t0 = int(prev_side.call(prev_actor, "unlock", "f", name)[0])
        st, vals = side.recv(w, 10)
        check(st == "ok" and vals[0] == "1", "waiter %d did not acquire: %s %s" % (i, st, vals))
        grants.append((int(vals[1]) - t0) / 1000.0)
        check(hash_of(c.r, name) == {owner: "1"}, "grant %d went to %r, want %s"
              % (i, hash_of(c.r, name), owner))
        for s2, w2, _ in waiters[i + 1:]:
            check(not s2.pending(w2), "a later waiter answered before its turn")
        check(c.r("LRANGE", n["queue"], 0, -1) == [o for _, _, o in waiters[i + 1:]],
              "queue after grant %d is wrong" % i)
        if len(waiters) - i > 2:
            deadlines_step("after grant %d" % i)
        prev_side, prev_actor = side, w
    prev_side.call(prev_actor, "unlock", "f", name)
    check(c.r("EXISTS", name, n["queue"], n["timeout"]) == 0, "fair lock left keys behind")
    return "hand-offs " + ", ".join("%.1f" % g for g in grants) + " ms"


def scn_force(c, A, B, kind):
    """A force-unlocks a lock B holds; B's blocked waiter acquires at once."""
    name = "it:force:%s:%s>%s" % (kind, A.label, B.label)
    a, b0, b1 = c.actor("a"), c.actor("b"), c.actor("b")
    owner_b1 = B.call(b1, "owner")[0]

    def measure():
        check(lock(B, b0, kind, name, 0, LONG_LEASE)[0] == 1, "holder could not lock")
        B.send(b1, "lock", kind, name, 10000, LONG_LEASE)
        wait_for_waiter(c, kind, name, owner_b1, 0)
        v = A.call(a, "force", kind, name)
        check(v[0] == "1", "force unlock reported nothing deleted")
        st, wake = B.recv(b1, 15)
        check(st == "ok" and wake[0] == "1", "waiter did not acquire: %s %s" % (st, wake))
        check(hash_of(c.r, name) == {owner_b1: "1"}, "waiter does not hold it after the wake")
        B.send(b0, "unlock", kind, name)
        st, vals = B.recv(b0)
        check(st == "err" and vals[0] == "notowner",
              "old holder's unlock answered %s %s" % (st, vals))
        B.call(b1, "unlock", kind, name)
        check(A.value(a, "force", kind, name) == 0, "force of a free lock reported a delete")
        return (int(wake[1]) - int(v[1])) / 1000.0

    seen = timed_wake(measure)
    tries = ", ".join("%.1f" % m for m in seen)
    check(seen[-1] < WAKE_LIMIT_MS,
          "wake after force took %s ms (limit %.0f)" % (tries, WAKE_LIMIT_MS))
    return "wake %s ms" % tries


def scn_contention(c, parties, per=200):
    """Every party runs `per` locked non-atomic increments; the total is exact."""
    key, name = "it:counter:%d" % c.n, "it:contended:%d" % c.n
    c.r("SET", key, 0)
    actors = []
    for side in parties:
        actor = c.actor("k")
        side.send(actor, "counter", "r", name, key, per, LONG_LEASE)
        actors.append((side, actor))
    t = time.monotonic()
    for side, actor in actors:
        st, vals = side.recv(actor, 150)
        check(st == "ok", "%s counter failed: %s" % (side.label, " ".join(vals)))
    total = int(c.r("GET", key))
    want = per * len(parties)
    check(total == want, "counter %d, want %d: mutual exclusion broken" % (total, want))
    check(c.r("EXISTS", name) == 0, "lock left held after the loops")
    return "%d sections in %.2f s" % (want, time.monotonic() - t)


def scn_lost(c, A, B):
    """B force-unlocks A's watchdog lock: A finds it lost, and A's unlock is refused."""
    name = "it:lost:%s>%s" % (A.label, B.label)
    a, b = c.actor("a"), c.actor("b")
    check(lock(A, a, "r", name, 0, 0)[0] == 1, "holder could not lock")
    tid = A.call(a, "tid")[0]
    before = len(A.events)
    check(B.call(b, "force", "r", name)[0] == "1", "force reported nothing deleted")
    note = ""
    if A.label != "redisson":  # hilock tells the holder (Redisson has no such API)
        wait_until(lambda: A.value(a, "lost", "r", name) == 1, 3 * WATCHDOG_MS / 1000.0,
                   "hilock's is_lost flag")
        note = "is_lost set"
        if A.has_events:
            wait_until(lambda: [e for e in A.events[before:] if e[:3] == ["lost", name, tid]],
                       2, "hilock's lost callback")
            note += ", callback ran"
    check(A.value(a, "held", "r", name) == 0, "holder still thinks it holds it")
    A.send(a, "unlock", "r", name)
    st, vals = A.recv(a)
    check(st == "err" and vals[0] == "notowner", "unlock after loss answered %s %s" % (st, vals))
    check(c.r("EXISTS", name) == 0, "the watchdog re-created the forced lock")
    return note


def scn_fair_cancel(c, A, B):
    """A waiter that gives up leaves the line; those behind move up by its window."""
    name = "it:fcancel:%s>%s" % (A.label, B.label)
    n = names(name)
    h, w1, w2, w3 = c.actor("h"), c.actor("w"), c.actor("w"), c.actor("w")
    short = 400
    check(lock(A, h, "f", name, 0, LONG_LEASE)[0] == 1, "holder could not lock")
    plan = [(B, w1, short), (A, w2, FAIR_WAIT), (B, w3, FAIR_WAIT)]
    owners = []
    for i, (side, w, wait) in enumerate(plan):
        owners.append(side.call(w, "owner")[0])
        side.send(w, "lock", "f", name, wait, LONG_LEASE)
        wait_for_waiter(c, "f", name, owners[-1], i)
    d = [float(c.r("ZSCORE", n["timeout"], o)) for o in owners]
    check(d[1] - d[0] == FAIR_WAIT and d[2] - d[1] == FAIR_WAIT,
          "deadlines %r do not step by the waiters' windows" % d)
    st, vals = B.recv(w1, 5)  # gives up after `short` ms
    check(st == "ok" and vals[0] == "0", "short waiter answered %s %s" % (st, vals))
    check(c.r("LRANGE", n["queue"], 0, -1) == owners[1:], "queue after cancel is %r"
          % c.r("LRANGE", n["queue"], 0, -1))
    check(c.r("ZSCORE", n["timeout"], owners[0]) is None, "cancelled waiter kept a deadline")
    e = [float(c.r("ZSCORE", n["timeout"], o)) for o in owners[1:]]
    check(e[0] == d[1] - short and e[1] == d[2] - short,
          "deadlines after cancel %r, want %r" % (e, [d[1] - short, d[2] - short]))
    A.call(h, "unlock", "f", name)
    for side, w in ((A, w2), (B, w3)):
        st, vals = side.recv(w, 5)
        check(st == "ok" and vals[0] == "1", "waiter did not acquire: %s %s" % (st, vals))
        side.call(w, "unlock", "f", name)
    check(c.r("EXISTS", name, n["queue"], n["timeout"]) == 0, "fair lock left keys behind")


def scn_fair_stale(c, S):
    """S evicts a waiter whose deadline passed and respects one that is live."""
    name = "it:fstale:%s" % S.label
    n = names(name)
    s = c.actor("s")
    now = server_ms(c.r)
    dead, live = "00000000-0000-0000-0000-000000000000:1", "00000000-0000-0000-0000-000000000000:2"
    c.r("RPUSH", n["queue"], dead, live)
    c.r("ZADD", n["timeout"], now - 1000, dead, now + 60000, live)
    check(lock(S, s, "f", name, 0, 10000)[0] == 0, "took a free fair lock past a live waiter")
    check(c.r("LRANGE", n["queue"], 0, -1) == [live], "queue after the try is %r, want [live]"
          % c.r("LRANGE", n["queue"], 0, -1))
    check(c.r("ZRANGE", n["timeout"], 0, -1) == [live], "deadlines after the try are wrong")
    c.r("ZADD", n["timeout"], server_ms(c.r) - 1, live)
    check(lock(S, s, "f", name, 0, 10000)[0] == 1, "did not evict the expired head")
    check(c.r("EXISTS", n["queue"], n["timeout"]) == 0, "queue not empty after eviction")
    S.call(s, "unlock", "f", name)


def scn_fair_orphan(c, S):
    """Known difference: a queue head with no deadline in the ZSET.

    Redisson's stale-waiter sweep stops at such a head (it never expires), so
    a Redisson client cannot take the free lock; hilock drops it like an
    expired waiter. Only reachable by damaged data (e.g. one of the two keys
    evicted under maxmemory), but pinned here so a change on either side shows."""
    name = "it:forphan:%s" % S.label
    n = names(name)
    s = c.actor("s")
    orphan = "00000000-0000-0000-0000-000000000000:3"
    c.r("RPUSH", n["queue"], orphan)
    got = lock(S, s, "f", name, 0, 10000)[0]
    if S.label == "redisson":
        check(got == 0, "Redisson took the lock past a head without a deadline")
        check(c.r("LRANGE", n["queue"], 0, -1) == [orphan], "Redisson changed the queue")
        c.r("DEL", n["queue"], n["timeout"])
        return "Redisson blocks behind it"
    check(got == 1, "hilock did not drop a head without a deadline")
    check(c.r("EXISTS", n["queue"]) == 0, "orphan head still queued")
    S.call(s, "unlock", "f", name)
    return "hilock drops it"


def scn_unlock_expired(c, S, kind):
    """Unlock after the lease ran out: "not owner" for RLock, "released" for
    the fair lock (Redisson's fair unlock script answers 1 when the key is
    gone, and hilock's does the same)."""
    name = "it:expired:%s:%s" % (kind, S.label)
    s = c.actor("s")
    check(lock(S, s, kind, name, 0, 200)[0] == 1, "could not lock")
    wait_until(lambda: c.r("EXISTS", name) == 0, 3, "the 200 ms lease to run out")
    S.send(s, "unlock", kind, name)
    st, vals = S.recv(s)
    if kind == "r":
        check(st == "err" and vals[0] == "notowner", "RLock unlock after expiry: %s %s"
              % (st, vals))
    else:
        check(st == "ok", "fair unlock after expiry: %s %s" % (st, vals))


# ----------------------------------------------------------------- main --

# ------------------------------------------------- read-write lock (R/W) --

def rw_channel(name):
    return companion("redisson_rwlock", name)


def rw_timeout_key(name, owner, k):
    """A read hold's key: "{N}:<owner>:rwlock_timeout:<k>" (N as is if it has a '{')."""
    return "%s:%s:rwlock_timeout:%d" % (name if "{" in name else "{%s}" % name, owner, k)


def scn_rw_share(c, A, B):
    """Readers of both sides share; a writer of either side is kept out."""
    name = "it:rw:share:%s>%s" % (A.label, B.label)
    a, b, aw, bw = c.actor("a"), c.actor("b"), c.actor("aw"), c.actor("bw")
    oa, ob = A.call(a, "owner")[0], B.call(b, "owner")[0]
    check(lock(A, a, "R", name, 0, 10000)[0] == 1, "%s reader could not lock" % A.label)
    check(lock(B, b, "R", name, 0, 10000)[0] == 1, "%s reader was kept out by a reader" % B.label)
    h = hash_of(c.r, name)
    check(h == {"mode": "read", oa: "1", ob: "1"}, "hash with two readers is %r" % h)
    for o in (oa, ob):
        t = c.r("PTTL", rw_timeout_key(name, o, 1))
        check(0 < t <= 10000, "read hold key of %s has PTTL %s" % (o, t))
    check(lock(A, aw, "W", name, 0, 10000)[0] == 0, "%s writer got in past readers" % A.label)
    check(lock(B, bw, "W", name, 0, 10000)[0] == 0, "%s writer got in past readers" % B.label)
    check(B.value(bw, "islocked", "R", name) == 1, "%s: read side not locked" % B.label)
    check(B.value(bw, "islocked", "W", name) == 0, "%s: write side locked" % B.label)
    check(B.value(b, "held", "R", name) == 1, "%s reader does not hold it" % B.label)
    B.call(b, "unlock", "R", name)
    check(hash_of(c.r, name) == {"mode": "read", oa: "1"}, "hash after one reader left")
    check(c.r("EXISTS", rw_timeout_key(name, ob, 1)) == 0, "left reader's hold key remains")
    A.call(a, "unlock", "R", name)
    check(c.r("EXISTS", name) == 0, "read-write lock remains after the last reader")


def scn_rw_exclude(c, A, B):
    """A writer of one side keeps the other side's readers and writers out."""
    name = "it:rw:excl:%s>%s" % (A.label, B.label)
    a, b = c.actor("a"), c.actor("b")
    oa = A.call(a, "owner")[0]
    check(lock(A, a, "W", name, 0, 10000)[0] == 1, "%s writer could not lock" % A.label)
    check(lock(A, a, "W", name, 0, 10000)[0] == 1, "%s writer could not re-enter" % A.label)
    h = hash_of(c.r, name)
    check(h == {"mode": "write", oa + ":write": "2"}, "hash with a writer is %r" % h)
    check(lock(B, b, "R", name, 0, 10000)[0] == 0, "%s reader got in past a writer" % B.label)
    check(lock(B, b, "W", name, 0, 10000)[0] == 0, "%s writer got in past a writer" % B.label)
    check(B.value(b, "islocked", "W", name) == 1, "%s: write side not locked" % B.label)
    check(B.value(b, "held", "W", name) == 0, "%s thinks it writes" % B.label)
    B.send(b, "unlock", "W", name)
    st, vals = B.recv(b)
    check(st == "err" and vals[0] == "notowner", "%s unlock of A's write lock: %s %s"
          % (B.label, st, vals))
    # the writer also reads; after the write unlocks it is a read lock
    check(lock(A, a, "R", name, 0, 10000)[0] == 1, "writer could not take the read side")
    A.call(a, "unlock", "W", name)
    A.call(a, "unlock", "W", name)
    check(hash_of(c.r, name) == {"mode": "read", oa: "1"}, "not a read lock after the write unlock")
    check(lock(B, b, "R", name, 0, 10000)[0] == 1, "%s reader kept out of a read lock" % B.label)
    B.call(b, "unlock", "R", name)
    A.call(a, "unlock", "R", name)
    check(c.r("EXISTS", name) == 0, "read-write lock remains")


def scn_rw_wake(c, A, B, first, then):
    """A holds side `first`; B waits for side `then`; A's unlock message wakes B."""
    name = "it:rw:wake:%s%s:%s>%s" % (first, then, A.label, B.label)
    a, b = c.actor("a"), c.actor("b")

    def measure():
        check(lock(A, a, first, name, 0, LONG_LEASE)[0] == 1, "holder could not lock")
        B.send(b, "lock", then, name, 10000, LONG_LEASE)
        wait_until(lambda: numsub(c.r, rw_channel(name)) >= 1, 5, "waiter subscribed")
        time.sleep(0.05)  # past its first attempt
        check(not B.pending(b), "waiter answered while the lock was held")
        t0 = int(A.call(a, "unlock", first, name)[0])
        st, vals = B.recv(b, 15)
        check(st == "ok" and vals[0] == "1", "waiter did not acquire: %s %s" % (st, vals))
        B.call(b, "unlock", then, name)
        check(c.r("EXISTS", name) == 0, "lock remains after the hand-off")
        return (int(vals[1]) - t0) / 1000.0

    seen = timed_wake(measure)
    tries = ", ".join("%.1f" % m for m in seen)
    check(seen[-1] < WAKE_LIMIT_MS, "hand-off took %s ms (limit %.0f)" % (tries, WAKE_LIMIT_MS))
    return "hand-off %s ms" % tries


def scn_rw_watchdog(c, A, B, side):
    """A holds side with the watchdog past 2 leases; B is still kept out."""
    name = "it:rw:wd:%s:%s>%s" % (side, A.label, B.label)
    a, b = c.actor("a"), c.actor("b")
    check(lock(A, a, side, name, 0, 0)[0] == 1, "holder could not lock")
    time.sleep(2.5 * WATCHDOG_MS / 1000.0)
    check(lock(B, b, "W", name, 0, 10000)[0] == 0, "%s writer got in: not renewed" % B.label)
    check(0 < c.r("PTTL", name) <= WATCHDOG_MS, "lease not the watchdog's")
    A.call(a, "unlock", side, name)
    check(c.r("EXISTS", name) == 0, "lock remains")


def scn_fenced(c, A, B):
    """Fenced lock: grants of both sides take strictly increasing tokens from
    redisson_lock_token:{N}; the other side reads the holder's token and is
    kept out while it holds."""
    name = "it:fenced:%s>%s" % (A.label, B.label)
    a, b = c.actor("a"), c.actor("b")
    last = int(c.r("GET", companion("redisson_lock_token", name)) or 0)
    for i in range(8):
        S, T, s, t = (A, B, a, b) if i % 2 == 0 else (B, A, b, a)
        tok = int(S.call(s, "flock", name, 2000, 10000)[0])
        check(tok > last, "%s token %d after %d: not increasing" % (S.label, tok, last))
        last = tok
        check(T.value(t, "token", name) == tok, "%s reads another token while %s holds %d"
              % (T.label, S.label, tok))
        check(int(T.call(t, "flock", name, 0, 10000)[0]) == 0, "%s got a held fenced lock"
              % T.label)
        check(int(c.r("GET", companion("redisson_lock_token", name))) == tok,
              "counter is not the last token")
        S.call(s, "unlock", "F", name)
    check(c.r("EXISTS", name) == 0, "fenced lock remains")
    return "tokens up to %d" % last


def scn_sem(c, A, B):
    """Semaphore: A sets 2 permits, B takes both, A waits for one and is woken
    by B's release (the new count on redisson_sc:{N}) within tens of ms; the
    count is what both sides read."""
    name = "it:sem:%s>%s" % (A.label, B.label)
    a, b = c.actor("a"), c.actor("b")
    check(A.value(a, "semset", name, 2) == 1, "first trySetPermits refused")
    check(B.value(b, "semset", name, 5) == 0, "second trySetPermits accepted")
    check(c.r("GET", name) == "2", "count %r, want '2'" % c.r("GET", name))
    check(int(B.call(b, "semacq", name, 2, 0)[0]) == 1, "%s could not take 2 of 2" % B.label)
    check(int(A.call(a, "semacq", name, 1, 0)[0]) == 0, "%s took a permit of none" % A.label)

    def handoff():
        A.send(a, "semacq", name, 1, LONG_LEASE)
        wait_until(lambda: numsub(c.r, companion("redisson_sc", name)) >= 1, 5,
                   "waiter subscribed")
        time.sleep(0.05)
        check(not A.pending(a), "%s took a permit while none was free" % A.label)
        before = int(B.call(b, "semrel", name, 1)[0])
        st, vals = A.recv(a, 15)
        check(st == "ok" and vals[0] == "1", "waiter: %s %s" % (st, vals))
        B.call(b, "semacq", name, 1, 0)  # back to none free for the next try
        A.call(a, "semrel", name, 1)
        B.call(b, "semacq", name, 1, 0)
        return (int(vals[1]) - before) / 1000.0
    seen = timed_wake(handoff)
    check(seen[-1] < WAKE_LIMIT_MS, "woken after %s ms (by message it is ~1 ms)" % seen)
    B.call(b, "semrel", name, 2)
    check(A.value(a, "semavail", name) == 2 and B.value(b, "semavail", name) == 2,
          "available is not 2 on both sides")
    c.r("DEL", name)
    return "wake %.1f ms" % seen[-1]


def scn_sem_count(c, parties, permits=3, per=40):
    """Semaphore permits counted exactly: every actor loops acquire 1 /
    release 1 with an inside counter; never more holders than permits, and
    every permit is back at the end."""
    name, key = "it:semcount:%d" % c.n, "it:seminside:%d" % c.n
    c.r("DEL", name, key, key + ":over")
    check(parties[0].value(c.actor("s"), "semset", name, permits) == 1, "trySetPermits refused")
    actors = []
    for side in parties:
        actor = c.actor("k")
        side.send(actor, "semloop", name, key, per, permits)
        actors.append((side, actor))
    t = time.monotonic()
    for side, actor in actors:
        st, vals = side.recv(actor, 150)
        check(st == "ok", "%s semloop failed: %s" % (side.label, " ".join(vals)))
    over = c.r("GET", key + ":over")
    check(over is None, "%s times more holders than %d permits" % (over, permits))
    check(c.r("GET", name) == str(permits), "count %r at the end, want %d"
          % (c.r("GET", name), permits))
    return "%d rounds by %d actors in %.2f s" % (per * len(parties), len(parties),
                                                  time.monotonic() - t)


def scn_pes(c, A, B):
    """Permit-expirable semaphore: ids and leases in Redisson's ZSET; a permit
    released by the other side; a waiter of either side gets a permit whose
    lease ended (no message comes for that)."""
    name = "it:pes:%s>%s" % (A.label, B.label)
    a, b = c.actor("a"), c.actor("b")
    check(A.value(a, "semset", name, 1) == 1, "trySetPermits refused")
    pid = A.call(a, "pesacq", name, 0, LONG_LEASE)[0]
    check(len(pid) == 32, "permit id %r" % pid)
    check(c.r("ZCARD", companion_suffix(name, "timeout")) == 1, "no lease in the ZSET")
    check(B.call(b, "pesacq", name, 0, LONG_LEASE)[0] == "-", "%s got a second permit of 1"
          % B.label)
    B.call(b, "pesrel", name, pid)          # any side may release by id
    A.send(a, "pesrel", name, pid)
    st, vals = A.recv(a)
    check(st == "err" and vals[0] == "notowner", "released twice: %s %s" % (st, vals))
    short = A.call(a, "pesacq", name, 0, 400)[0]
    check(len(short) == 32, "no permit after the release")
    t0 = time.monotonic()
    got = B.call(b, "pesacq", name, 5000, LONG_LEASE, timeout=15)[0]
    took = time.monotonic() - t0
    check(len(got) == 32, "%s got nothing after the lease ended" % B.label)
    check(0.2 < took < 3.0, "%s waited %.2f s for a 0.4 s lease" % (B.label, took))
    A.send(a, "pesrel", name, short)
    st, vals = A.recv(a)
    check(st == "err", "a permit whose lease ended was released as held")
    B.call(b, "pesrel", name, got)
    c.r("DEL", name, companion_suffix(name, "timeout"))
    return "expired permit taken after %.2f s" % took


def scn_latch(c, A, B):
    """Count-down latch: waiters of both sides wake when the other side's
    count-down reaches zero (message "0")."""
    name = "it:latch:%s>%s" % (A.label, B.label)
    a, b, wa, wb = c.actor("a"), c.actor("b"), c.actor("w"), c.actor("w")
    check(A.value(a, "latchset", name, 2) == 1, "trySetCount refused")
    check(B.value(b, "latchset", name, 9) == 0, "second trySetCount accepted")
    check(B.value(b, "latchcount", name) == 2, "count is not 2")
    A.send(wa, "latchawait", name, LONG_LEASE)
    B.send(wb, "latchawait", name, LONG_LEASE)
    wait_until(lambda: numsub(c.r, "redisson_countdownlatch__channel__{%s}" % name) >= 2, 5,
               "both waiters subscribed")
    A.call(a, "latchdown", name)
    time.sleep(0.1)
    check(not A.pending(wa) and not B.pending(wb), "a waiter returned at count 1")
    before = int(B.call(b, "latchdown", name)[0])
    worst = 0.0
    for S, w in ((A, wa), (B, wb)):
        st, vals = S.recv(w, 15)
        check(st == "ok" and vals[0] == "1", "%s waiter: %s %s" % (S.label, st, vals))
        worst = max(worst, (int(vals[1]) - before) / 1000.0)
    check(worst < 1000, "waiters woke %.1f ms after the count-down" % worst)
    check(c.r("EXISTS", name) == 0, "latch key remains at zero")
    return "both woken within %.1f ms" % worst


def scn_top(c, J, H, cli):
    """hilock top --once --json 'job:*' over locks some of which Redisson took
    (J) and the rest hilock (H): 3 reentrant (one held twice by Redisson with
    a hilock waiter), a fair lock (Redisson holder, a Redisson and a hilock
    waiter queued), a read-write lock read by both, a permit-expirable
    semaphore with a Redisson permit. Each must be listed with the right
    kind, owners, hold counts, queue, waiters and permits (issue 28)."""
    check(cli, "no hilock CLI given (--cli)")
    names_all = ["job:r1", "job:r2", "job:r3", "job:f", "job:rw", "job:sem"]
    fair = names("job:f")
    c.r("DEL", *(names_all + [fair["queue"], fair["timeout"],
                               companion_suffix("job:sem", "timeout")]))
    r1, r1w, r2, r3 = c.actor("t"), c.actor("t"), c.actor("t"), c.actor("t")
    fh, fw1, fw2, rj, rh, sj = (c.actor("t") for _ in range(6))
    own = {a: S.call(a, "owner")[0] for a, S in ((r1, J), (r1w, H), (r2, H), (r3, J),
                                                   (fh, J), (fw1, J), (fw2, H),
                                                   (rj, J), (rh, H))}
    waiters = []  # (side, actor) still blocked, answered at cleanup
    try:
        check(lock(J, r1, "r", "job:r1", 0, 0)[0] == 1, "redisson: job:r1")
        check(lock(J, r1, "r", "job:r1", 0, 0)[0] == 1, "redisson: job:r1 again")
        H.send(r1w, "lock", "r", "job:r1", FAIR_WAIT, LONG_LEASE)
        waiters.append((H, r1w))
        wait_for_waiter(c, "r", "job:r1", own[r1w], 0)
        check(lock(H, r2, "r", "job:r2", 0, LONG_LEASE)[0] == 1, "hilock: job:r2")
        check(lock(J, r3, "r", "job:r3", 0, LONG_LEASE)[0] == 1, "redisson: job:r3")
        check(lock(J, fh, "f", "job:f", 0, LONG_LEASE)[0] == 1, "redisson: job:f")
        for i, (S, w) in enumerate(((J, fw1), (H, fw2))):
            S.send(w, "lock", "f", "job:f", FAIR_WAIT, LONG_LEASE)
            waiters.append((S, w))
            wait_for_waiter(c, "f", "job:f", own[w], i)
        check(lock(J, rj, "R", "job:rw", 0, LONG_LEASE)[0] == 1, "redisson: job:rw read")
        check(lock(H, rh, "R", "job:rw", 0, LONG_LEASE)[0] == 1, "hilock: job:rw read")
        check(J.value(sj, "semset", "job:sem", 3) == 1, "redisson: trySetPermits job:sem")
        pid = J.call(sj, "pesacq", "job:sem", 0, LONG_LEASE)[0]
        check(len(pid) == 32, "redisson: permit id %r" % pid)
        c.r("SET", "job:plain", "x")  # not a lock: left out

        out = subprocess.run([cli, "top", "--once", "--json", "--url",
                              "redis://127.0.0.1:%d" % c.r_port, "job:*"],
                             capture_output=True, text=True, timeout=30)
        check(out.returncode == 0, "hilock top exited %d: %s" % (out.returncode, out.stderr))
        d = json.loads(out.stdout)
        locks = d["locks"]
        got = [l["name"] for l in locks]
        # a hilock holder listens on its lock's channel (watchdog or fixed
        # lease) and counts as waiting: job:r2 and job:rw 1 each
        check(got == ["job:f", "job:r1", "job:r2", "job:rw", "job:r3", "job:sem"],
              "names in waiters order: %r" % got)
        L = {l["name"]: l for l in locks}

        def holders(name):
            return [(h["owner"], h["holds"], h["role"]) for h in L[name]["holders"]]

        def expect(name, what, have, want):
            check(have == want, "%s %s: %r, want %r" % (name, what, have, want))

        kinds = {n: L[n]["kind"] for n in L}
        expect("all", "kinds", kinds, {"job:f": "fair", "job:r1": "reentrant",
                                       "job:r2": "reentrant", "job:r3": "reentrant",
                                       "job:rw": "read-write", "job:sem": "permit-semaphore"})
        expect("job:r1", "holders", holders("job:r1"), [(own[r1], 2, "exclusive")])
        expect("job:r1", "waiting", L["job:r1"]["waiting"], 1)
        check(0 < L["job:r1"]["lease_ms"] <= WATCHDOG_MS,
              "job:r1 lease %r not in (0, %d] (Redisson's watchdog)"
              % (L["job:r1"]["lease_ms"], WATCHDOG_MS))
        expect("job:r2", "holders", holders("job:r2"), [(own[r2], 1, "exclusive")])
        expect("job:r3", "holders", holders("job:r3"), [(own[r3], 1, "exclusive")])
        for n in ("job:r2", "job:r3"):
            check(0 < L[n]["lease_ms"] <= LONG_LEASE, "%s lease %r" % (n, L[n]["lease_ms"]))
            expect(n, "waiting", L[n]["waiting"], 1 if n == "job:r2" else 0)
        expect("job:f", "holders", holders("job:f"), [(own[fh], 1, "exclusive")])
        expect("job:f", "queue", [(q["position"], q["owner"]) for q in L["job:f"]["queue"]],
               [(1, own[fw1]), (2, own[fw2])])
        zs = [int(float(c.r("ZSCORE", fair["timeout"], own[w]))) for w in (fw1, fw2)]
        expect("job:f", "queue deadlines",
               [q["deadline_ms"] for q in L["job:f"]["queue"]], zs)
        expect("job:f", "waiting", L["job:f"]["waiting"], 2)
        expect("job:rw", "mode", L["job:rw"]["mode"], "read")
        expect("job:rw", "holders", sorted(holders("job:rw")),
               sorted([(own[rj], 1, "read"), (own[rh], 1, "read")]))
        expect("job:rw", "waiting", L["job:rw"]["waiting"], 1)  # hilock's reader
        sem = L["job:sem"]
        expect("job:sem", "count, taken, permit ids",
               (sem["count"], sem["permits_taken"], [p["id"] for p in sem["permits"]]),
               (2, 1, [pid]))
        check(0 < sem["permits"][0]["lease_in_ms"] <= LONG_LEASE,
              "job:sem permit lease %r" % sem["permits"][0]["lease_in_ms"])
        expect("job:sem", "waiting", sem["waiting"], 0)
    finally:
        # hand every lock on (the waiters get theirs) and release it all
        for S, a, k, n in ((J, r1, "r", "job:r1"), (J, r1, "r", "job:r1"),
                           (H, r2, "r", "job:r2"), (J, r3, "r", "job:r3"),
                           (J, fh, "f", "job:f"), (J, rj, "R", "job:rw"),
                           (H, rh, "R", "job:rw")):
            S.send(a, "unlock", k, n)
            S.recv(a)
        for (S, w), (k, n) in zip(waiters, (("r", "job:r1"), ("f", "job:f"), ("f", "job:f"))):
            S.recv(w, 25)
            S.call(w, "unlock", k, n)
        c.r("DEL", "job:plain", "job:sem", companion_suffix("job:sem", "timeout"))
    # (unlock and acquire latches, short-lived request ids of both sides, stay)
    left = [k for k in c.r("KEYS", "*job:*") if "_latch:" not in k]
    check(left == [], "keys left after release: %r" % left)
    return "6 locks listed right (3 reentrant, fair with 2 queued, read-write, semaphore)"


def companion_suffix(name, suffix):
    """Redisson's suffixName: "{name}:suffix", or "name:suffix" if name has a '{'."""
    return "%s:%s" % (name if "{" in name else "{%s}" % name, suffix)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent-cmd", required=True)
    ap.add_argument("--driver-cmd", required=True)
    ap.add_argument("--py-driver-cmd")
    ap.add_argument("--py-missing", help="why there is no Python side (counted as a failure)")
    ap.add_argument("--lua-driver-cmd")
    ap.add_argument("--lua-missing", help="why there is no Lua side (counted as a failure)")
    ap.add_argument("--cli", help="the hilock command-line tool (for hilock top)")
    ap.add_argument("-k", default="")
    ap.add_argument("--redisson-version", default="3.x")
    args = ap.parse_args()
    _install_cleanup()

    passed, failed, failures = 0, 0, []
    if args.py_missing:
        failed += 1
        failures.append("python side")
        print("FAIL python side: %s" % args.py_missing, flush=True)
    if args.lua_missing:
        failed += 1
        failures.append("lua side")
        print("FAIL lua side: %s" % args.lua_missing, flush=True)
    redis = RedisServer()
    redis.start()
    port = str(redis.port)
    print("interop: redis-server on 127.0.0.1:%s" % port, flush=True)
    url = "redis://127.0.0.1:" + port

    def start(label, cmd, *extra):
        return Side(label, shlex.split(cmd) + list(extra))

    try:
        jvm = start("redisson", args.agent_cmd, url, str(WATCHDOG_MS))
        c1 = start("hilock-c", args.driver_cmd, "127.0.0.1", port, str(WATCHDOG_MS))
        c2 = start("hilock-c#2", args.driver_cmd, "127.0.0.1", port, str(WATCHDOG_MS))
        hilocks = [c1]
        py = []
        if args.py_driver_cmd:
            py = [start("hilock-py", args.py_driver_cmd, url, str(WATCHDOG_MS)),
                  start("hilock-py#2", args.py_driver_cmd, url, str(WATCHDOG_MS))]
            hilocks.append(py[0])
        lua = []
        if args.lua_driver_cmd:
            lua = [PerActorSide("hilock-lua", shlex.split(args.lua_driver_cmd)
                                + [url, str(WATCHDOG_MS)])]
            _cleanup.append(lua[0].stop)
            hilocks.append(lua[0])
        print("interop: redisson client %s, hilock-c client %s%s" % (
            jvm.client_id, c1.client_id,
            ", hilock-py client %s" % py[0].client_id if py else " (no Python side)")
            + (", hilock-lua (one client per actor)" if lua else " (no Lua side)"),
            flush=True)
    except Failure as e:
        print("FAIL setup: %s" % e)
        for s in (locals().get(k) for k in ("jvm", "c1", "c2")):
            if s:
                print("--- %s stderr:\n%s" % (s.label, s.stderr_tail()))
        print("%d passed, %d failed" % (passed, failed + 1))
        return 1

    ctx = Ctx(Resp(redis.port), [jvm] + hilocks)
    ctx.r_port = redis.port
    plan = []
    for hl in hilocks:
        for A, B in ((jvm, hl), (hl, jvm)):
            d = "%s->%s" % (A.label, B.label)
            for kind in ("r", "f"):
                for lease in (10000, 0):
                    if kind == "f" and lease == 0:
                        continue
                    plan.append(("hold[%s,%s] %s" % (kind, "watchdog" if lease == 0 else
                                                     "lease", d), scn_hold, (A, B, kind, lease)))
            plan.append(("hold[r,utf-8 name] %s" % d, scn_hold,
                         (A, B, "r", 10000, "it:hold:ünïcødé:ключ:%s>%s" % (A.label, B.label))))
            for kind in ("r", "f"):
                plan.append(("wake[%s,{tag}] %s" % (kind, d), scn_wake,
                             (A, B, kind, "{it:tag:%s}:wake:%s>%s" % (kind, A.label, B.label))))
                plan.append(("wake[%s] %s" % (kind, d), scn_wake, (A, B, kind)))
                plan.append(("reentrant[%s] %s" % (kind, d), scn_reentrant, (A, B, kind)))
                plan.append(("force[%s] %s" % (kind, d), scn_force, (A, B, kind)))
            for kind in ("r", "f"):
                plan.append(("watchdog[%s] %s" % (kind, d), scn_watchdog, (A, B, kind)))
            plan.append(("lost %s" % d, scn_lost, (A, B)))
            plan.append(("fair-order %s" % d, scn_fair, (A, B)))
            plan.append(("fair-order[wait forever] %s" % d, scn_fair, (A, B, -1)))
            plan.append(("fair-cancel %s" % d, scn_fair_cancel, (A, B)))
    # read-write and fenced locks: every side, both directions; the watchdog
    # cases (about 4 s each) on the C side only (the same engine renews for
    # every binding; conformance rw-watchdog runs it on each driver)
    for hl in hilocks:
        for A, B in ((jvm, hl), (hl, jvm)):
            d = "%s->%s" % (A.label, B.label)
            plan.append(("rw-share %s" % d, scn_rw_share, (A, B)))
            plan.append(("rw-exclude %s" % d, scn_rw_exclude, (A, B)))
            for first, then in (("W", "R"), ("W", "W"), ("R", "W")):
                plan.append(("rw-wake[%s then %s] %s" % (first, then, d), scn_rw_wake,
                             (A, B, first, then)))
            plan.append(("fenced %s" % d, scn_fenced, (A, B)))
            if hl is c1:
                for side in ("R", "W"):
                    plan.append(("rw-watchdog[%s] %s" % (side, d), scn_rw_watchdog,
                                 (A, B, side)))
    # semaphores and latch: every side (C, Python, Lua), both directions;
    # permits counted across 4 Redisson threads and 4 hilock threads in two
    # processes (the C side)
    for hl in hilocks:
        for A, B in ((jvm, hl), (hl, jvm)):
            d = "%s->%s" % (A.label, B.label)
            plan.append(("semaphore %s" % d, scn_sem, (A, B)))
            plan.append(("permit-semaphore %s" % d, scn_pes, (A, B)))
            plan.append(("latch %s" % d, scn_latch, (A, B)))
    plan.append(("semaphore-count redisson x4 + hilock-c x4", scn_sem_count,
                 ([jvm] * 4 + [c1, c1, c2, c2],)))
    for S in [jvm] + hilocks:
        plan.append(("fair-stale %s" % S.label, scn_fair_stale, (S,)))
        plan.append(("fair-orphan-head %s" % S.label, scn_fair_orphan, (S,)))
        for kind in ("r", "f"):
            plan.append(("unlock-expired[%s] %s" % (kind, S.label), scn_unlock_expired, (S, kind)))
    plan.append(("top[job:*] redisson + hilock-c", scn_top, (jvm, c1, args.cli)))
    if py:
        plan.append(("top[job:*] redisson + hilock-py", scn_top, (jvm, py[0], args.cli)))
    plan.append(("contention redisson x2 + hilock-c x2", scn_contention, ([jvm, jvm, c1, c2],)))
    if py:
        plan.append(("contention redisson x2 + hilock-py x2", scn_contention,
                     ([jvm, jvm] + py,)))
        plan.append(("contention redisson + hilock-c + hilock-py", scn_contention,
                     ([jvm, c1, py[0]],)))

    def run_one(title, fn, fargs):
        """-> (passed, report line)"""
        t = time.monotonic()
        try:
            note = fn(ctx, *fargs)
            return True, "PASS %-48s %5.2fs %s" % (title, time.monotonic() - t, note or "")
        except Failure as e:
            return False, "FAIL %-48s %5.2fs %s" % (title, time.monotonic() - t, e)
        except Exception:  # noqa: BLE001 - any crash is a failure, keep going
            return False, "FAIL %s (crash)\n%s" % (title, traceback.format_exc())

    def record(title, ok, line):
        nonlocal passed, failed
        print(line, flush=True)
        if ok:
            passed += 1
        else:
            failed += 1
            failures.append(title)

    plan = [p for p in plan if not args.k or args.k in p[0]]
    start_all = time.monotonic()
    # The watchdog scenarios spend their seconds waiting for renewals to come
    # due (3.2 or 2.5 leases each) on locks of their own: they run all at
    # once, after the others, each in a thread; the rest runs one at a time.
    batch = [p for p in plan if p[1] in (scn_watchdog, scn_rw_watchdog)]
    for title, fn, fargs in plan:
        if fn not in (scn_watchdog, scn_rw_watchdog):
            record(title, *run_one(title, fn, fargs))
    results = [None] * len(batch)

    def run_batch(i):
        results[i] = run_one(*batch[i])

    threads = [threading.Thread(target=run_batch, args=(i,)) for i in range(len(batch))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for (title, _, _), (ok, line) in zip(batch, results):
        record(title, ok, line)
    # A lost callback may run after its scenario ended: only the lost and
    # force scenarios take a lock away from its holder (a hilock holder
    # hears a force unlock on its lock's channel, fixed lease or not).
    for side in [jvm, c1, c2] + py + lua:
        stray = [e for e in side.events if e[:1] == ["lost"] and
                 not (len(e) > 1 and e[1].startswith(("it:lost:", "it:force:")))]
        if stray:
            record("no stray lost events (%s)" % side.label, False,
                   "FAIL %s reported lost locks outside the lost scenarios: %r"
                   % (side.label, stray))
    for side in [jvm, c1, c2] + py + lua:
        if side.exited():
            failed += 1
            failures.append(side.label + " exited")
            print("FAIL %s exited early:\n%s" % (side.label, side.stderr_tail()))
    print("interop: %.1f s; redisson %s agent, sides %s" % (
        time.monotonic() - start_all, args.redisson_version, ", ".join(s.label for s in [jvm, c1, c2] + py + lua)))
    if failures:
        print("failed: " + "; ".join(failures))
    if failed:
        for side in [jvm, c1, c2] + py + lua:
            tail = side.stderr_tail().strip()
            if tail:
                print("--- %s stderr (tail):\n%s" % (side.label, tail))
    _run_cleanup()
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
