#!/usr/bin/env python3
"""Conformance agent for the Python package (hilock, over the SWIG module).

One process, one hilock.Client opened with the options on the command line;
every actor is a thread of tests/common/line_agent.py (its own owner
"<client-id>:<os-thread-id>"). Line protocol: see
tests/conformance/README.md.

Usage: agent.py URL [key=value ...]   (the same keys as agent.c, in ms)
"""
import os
import sys
import threading

import hilock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from line_agent import say, serve  # noqa: E402
from agent_common import client_kwargs, failure, make_lock, make_sem  # noqa: E402


class Agent:
    def __init__(self, url, kw):
        self.client = hilock.Client(url, **kw)
        self.locks = {}
        self.locks_mu = threading.Lock()

    def lock(self, kind, name):
        # one Lock per (kind, name); it acts for the calling thread
        with self.locks_mu:
            lk = self.locks.get((kind, name))
            if lk is None:
                lk = make_lock(self.client, kind, name)
                self.locks[(kind, name)] = lk
            return lk

    def sem(self, kind, name):
        with self.locks_mu:
            s = self.locks.get((kind, name))
            if s is None:
                s = make_sem(self.client, kind, name)
                self.locks[(kind, name)] = s
            return s

    def run_sem(self, w, state):
        # KIND sem | pes | latch; the actor's last permit id is in its state
        cmd, kind, name = w[1], w[2], w[3]
        s = self.sem(kind, name)
        arg = [int(x) for x in w[4:]]
        if cmd == "setp" and len(arg) == 1:
            ok = s.try_set_count(arg[0]) if kind == "latch" else s.try_set_permits(arg[0])
            return "ok %d" % (1 if ok else 0)
        if cmd == "acquire" and len(arg) == 3 and kind != "latch":
            wait = None if arg[1] < 0 else arg[1] / 1000.0
            if kind == "sem":
                return "ok %d" % (1 if s.acquire(arg[0], wait=wait) else 0)
            pid = s.acquire(wait=wait, lease=arg[2] / 1000.0 if arg[2] > 0 else None)
            if pid:
                state["permit"] = pid
            return "ok %d" % (1 if pid else 0)
        if cmd == "release" and kind != "latch":
            if kind == "sem":
                s.release(arg[0])
            else:
                s.release(state.get("permit", ""))
            return "ok"
        if cmd == "avail":
            return "ok %d" % (s.count if kind == "latch" else s.available_permits())
        if cmd == "countdown" and kind == "latch":
            return "ok %d" % s.count_down()
        if cmd == "await" and kind == "latch" and len(arg) == 1:
            return "ok %d" % (1 if s.wait(None if arg[0] < 0 else arg[0] / 1000.0) else 0)
        return "err usage unknown command %s for %s" % (cmd, kind)

    def run(self, w, state):
        cmd, kind, name = w[1], w[2], w[3]
        if kind in ("sem", "pes", "latch"):
            return self.run_sem(w, state)
        if kind not in ("r", "f", "fenced", "read", "write"):
            return "err usage kind must be r, f, fenced, read or write"
        lk = self.lock(kind, name)
        if cmd == "lock" and len(w) == 6:
            wait_ms, lease_ms = int(w[4]), int(w[5])
            wait = None if wait_ms < 0 else wait_ms / 1000.0
            lease = None if lease_ms <= 0 else lease_ms / 1000.0
            if kind == "fenced":
                token = lk.acquire_token(wait=wait, lease=lease)
                return "ok 0" if token is None else "ok 1 %d" % token
            return "ok %d" % (1 if lk.acquire(wait=wait, lease=lease) else 0)
        if cmd == "token":
            return "ok %d" % lk.token
        if cmd == "unlock":
            lk.release()
            return "ok"
        if cmd == "force":
            return "ok %d" % (1 if lk.force_unlock() else 0)
        if cmd == "locked":
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
        return "err usage unknown command " + cmd

    def serve(self):
        say("agent", "ok ready")
        serve(self.run, failure, min_words=4, usage="err usage ACTOR CMD r|f|fenced|read|write NAME ...")


def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: agent.py URL [key=value ...]\n")
        sys.exit(2)
    try:
        agent = Agent(sys.argv[1], client_kwargs(sys.argv[2:]))
    except hilock.Error as e:
        say("agent", "err connection %s" % e)
        sys.exit(1)
    agent.serve()


if __name__ == "__main__":
    main()
