#!/usr/bin/env python3
"""The hilock Python side of the interoperability suite.

Same line protocol as Agent.java and driver.c: every actor is a thread of
tests/common/line_agent.py (so a distinct owner "<client-id>:<os-thread-id>"),
running its commands in order through the hilock package's public API.
KIND: r reentrant, f fair, R / W the read / write side of a read-write lock,
F fenced; flock NAME WAIT LEASE -> ok TOKEN|0 EPOCH_US, token NAME -> ok TOKEN.

Usage: driver.py REDIS_URL WATCHDOG_LEASE_MS
"""
import os
import sys
import threading
import time

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.join(_here, "..", "common")]
from interop import Resp  # noqa: E402  (the suite's tiny RESP client)
from line_agent import say, serve  # noqa: E402

import hilock  # noqa: E402


def epoch_us():
    return time.time_ns() // 1000


class Driver:
    def __init__(self, url, watchdog_ms):
        self.client = hilock.Client(url, watchdog_lease=watchdog_ms / 1000.0)
        self.port = int(url.rsplit(":", 1)[1].split("/")[0])
        self.locks = {}
        self.locks_mu = threading.Lock()

    def lock(self, kind, name):
        # One Lock object per (kind, name), kept alive so its on_lost stays
        # registered; it acts for the calling thread, so actors share it.
        with self.locks_mu:
            lk = self.locks.get((kind, name))
            if lk is None:
                if kind == "r":
                    lk = self.client.lock(name)
                elif kind == "f":
                    lk = self.client.fair_lock(name)
                elif kind == "R":
                    lk = self.client.read_write_lock(name).read_lock()
                elif kind == "W":
                    lk = self.client.read_write_lock(name).write_lock()
                elif kind == "F":
                    lk = self.client.fenced_lock(name)
                else:
                    raise ValueError("kind must be r, f, R, W or F")
                lk.on_lost = lambda l, tid: say("!", "lost %s %d" % (l.name, tid))
                self.locks[(kind, name)] = lk
            return lk

    @staticmethod
    def acquire(lk, wait_ms, lease_ms):
        wait = None if wait_ms < 0 else wait_ms / 1000.0
        lease = None if lease_ms <= 0 else lease_ms / 1000.0
        return lk.acquire(wait=wait, lease=lease)

    def sem(self, kind, name):
        with self.locks_mu:
            s = self.locks.get((kind, name))
            if s is None:
                c = self.client
                s = (c.semaphore(name) if kind == "s" else
                     c.permit_expirable_semaphore(name) if kind == "p" else
                     c.count_down_latch(name))
                self.locks[(kind, name)] = s
            return s

    def run_sem(self, w):
        """The semaphore / latch commands of Agent.java and driver.c."""
        cmd, name = w[1], w[2]
        num = [int(x) for x in w[3:] if x.lstrip("-").isdigit()]

        def secs(ms):
            return None if ms < 0 else ms / 1000.0
        if cmd == "semset":
            return "ok %d" % self.sem("s", name).try_set_permits(num[0])
        if cmd == "semacq":
            got = self.sem("s", name).acquire(num[0], wait=secs(num[1]))
            return "ok %d %d" % (1 if got else 0, epoch_us())
        if cmd == "semrel":
            before = epoch_us()
            self.sem("s", name).release(num[0])
            return "ok %d" % before
        if cmd == "semavail":
            return "ok %d" % self.sem("s", name).available_permits()
        if cmd == "pesacq":
            pid = self.sem("p", name).acquire(wait=secs(num[0]),
                                              lease=num[1] / 1000.0 if num[1] > 0 else None)
            return "ok %s %d" % (pid or "-", epoch_us())
        if cmd == "pesrel":
            try:
                self.sem("p", name).release(w[3])
            except hilock.NotOwnerError:
                return "err notowner"
            return "ok 1"
        if cmd == "latchset":
            return "ok %d" % self.sem("l", name).try_set_count(num[0])
        if cmd == "latchdown":
            before = epoch_us()
            self.sem("l", name).count_down()
            return "ok %d" % before
        if cmd == "latchawait":
            got = self.sem("l", name).wait(secs(num[0]))
            return "ok %d %d" % (1 if got else 0, epoch_us())
        if cmd == "latchcount":
            return "ok %d" % self.sem("l", name).count
        return None

    def run(self, w, state):
        cmd = w[1]
        if cmd.startswith(("sem", "pes", "latch")):
            answer = self.run_sem(w)
            if answer is not None:
                return answer
        if cmd == "id":
            return "ok " + self.client.id
        if cmd == "tid":
            return "ok %d" % hilock.thread_id()
        if cmd == "owner":
            return "ok " + self.client.owner()
        if cmd == "flock":
            lk = self.lock("F", w[2])
            wait, lease = int(w[3]), int(w[4])
            token = lk.acquire_token(wait=None if wait < 0 else wait / 1000.0,
                                     lease=None if lease <= 0 else lease / 1000.0)
            return "ok %d %d" % (token or 0, epoch_us())
        if cmd == "token":
            return "ok %d" % self.lock("F", w[2]).token
        lk = self.lock(w[2], w[3])
        if cmd == "lock":
            got = self.acquire(lk, int(w[4]), int(w[5]))
            return "ok %d %d" % (1 if got else 0, epoch_us())
        if cmd == "unlock":
            before = epoch_us()
            try:
                lk.release()
            except hilock.NotOwnerError:
                return "err notowner"
            return "ok %d" % before
        if cmd == "force":
            before = epoch_us()
            return "ok %d %d" % (1 if lk.force_unlock() else 0, before)
        if cmd == "islocked":
            return "ok %d" % (1 if lk.locked() else 0)
        if cmd == "held":
            return "ok %d" % (1 if lk.owned() else 0)
        if cmd == "lost":
            return "ok %d" % (1 if lk.lost else 0)
        if cmd == "holds":
            return "ok %d" % lk.hold_count
        if cmd == "ttl":
            t = lk.ttl
            return "ok %d" % (-2 if t is None else -1 if t == float("inf") else round(t * 1000))
        if cmd == "counter":
            if "redis" not in state:
                state["redis"] = Resp(self.port)
            r, key, n, lease = state["redis"], w[4], int(w[5]), int(w[6])
            for _ in range(n):
                self.acquire(lk, -1, lease)
                try:
                    v = r("GET", key)  # deliberately non-atomic
                    r("SET", key, int(v or 0) + 1)
                finally:
                    lk.release()
            return "ok %d" % n
        return "err unknown command " + cmd

    @staticmethod
    def failure(e):
        return "err %s: %s" % (type(e).__name__, str(e).replace("\n", " "))

    def serve(self):
        say("agent", "ok ready " + self.client.id)
        serve(self.run, self.failure)  # ends the process


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.stderr.write("usage: driver.py REDIS_URL WATCHDOG_LEASE_MS\n")
        sys.exit(2)
    Driver(sys.argv[1], int(sys.argv[2])).serve()
