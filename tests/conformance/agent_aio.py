#!/usr/bin/env python3
"""Conformance agent for the asyncio driver (hilock.aio, on hilock._engine).

One process, one event loop (uvloop when HILOCK_AIO_LOOP=uvloop), one
hilock.aio.Client opened with the options on the command line; every actor
is an asyncio task with its own request queue, so each actor is a distinct
owner "<client-id>:<task id>". Line protocol: see tests/conformance/README.md.

Usage: agent_aio.py URL [key=value ...]   (the same keys as agent.c, in ms)
"""
import asyncio
import os
import sys
import threading

import hilock
import hilock.aio as aio
from agent_common import client_kwargs, failure, make_lock, make_sem


def say(who, text):
    sys.stdout.write("%s %s\n" % (who, text))
    sys.stdout.flush()


class Agent:
    def __init__(self, client):
        self.client = client
        self.locks = {}

    def lock(self, kind, name):
        # one Lock per (kind, name); it acts for the task that calls it
        lk = self.locks.get((kind, name))
        if lk is None:
            lk = self.locks[(kind, name)] = make_lock(self.client, kind, name)
        return lk

    def sem(self, kind, name):
        s = self.locks.get((kind, name))
        if s is None:
            s = make_sem(self.client, kind, name)
            self.locks[(kind, name)] = s
        return s

    async def run_sem(self, w, state):
        # KIND sem | pes | latch; the actor's last permit id is in its state
        cmd, kind, name = w[1], w[2], w[3]
        s = self.sem(kind, name)
        arg = [int(x) for x in w[4:]]
        if cmd == "setp" and len(arg) == 1:
            ok = (await s.try_set_count(arg[0]) if kind == "latch"
                  else await s.try_set_permits(arg[0]))
            return "ok %d" % (1 if ok else 0)
        if cmd == "acquire" and len(arg) == 3 and kind != "latch":
            wait = None if arg[1] < 0 else arg[1] / 1000.0
            if kind == "sem":
                return "ok %d" % (1 if await s.acquire(arg[0], wait=wait) else 0)
            pid = await s.acquire(wait=wait, lease=arg[2] / 1000.0 if arg[2] > 0 else None)
            if pid:
                state["permit"] = pid
            return "ok %d" % (1 if pid else 0)
        if cmd == "release" and kind != "latch":
            if kind == "sem":
                await s.release(arg[0])
            else:
                await s.release(state.get("permit", ""))
            return "ok"
        if cmd == "avail":
            return "ok %d" % (await s.count() if kind == "latch" else await s.available_permits())
        if cmd == "countdown" and kind == "latch":
            return "ok %d" % await s.count_down()
        if cmd == "await" and kind == "latch" and len(arg) == 1:
            return "ok %d" % (1 if await s.wait(None if arg[0] < 0 else arg[0] / 1000.0) else 0)
        return "err usage unknown command %s for %s" % (cmd, kind)

    async def run(self, w, state):
        cmd, kind, name = w[1], w[2], w[3]
        if kind in ("sem", "pes", "latch"):
            return await self.run_sem(w, state)
        if kind not in ("r", "f", "fenced", "read", "write"):
            return "err usage kind must be r, f, fenced, read or write"
        lk = self.lock(kind, name)
        if cmd == "lock" and len(w) == 6:
            wait_ms, lease_ms = int(w[4]), int(w[5])
            wait = None if wait_ms < 0 else wait_ms / 1000.0
            lease = None if lease_ms <= 0 else lease_ms / 1000.0
            if kind == "fenced":
                token = await lk.acquire_token(wait=wait, lease=lease)
                return "ok 0" if token is None else "ok 1 %d" % token
            return "ok %d" % (1 if await lk.acquire(wait=wait, lease=lease) else 0)
        if cmd == "token":
            return "ok %d" % await lk.token()
        if cmd == "unlock":
            await lk.release()
            return "ok"
        if cmd == "force":
            return "ok %d" % (1 if await lk.force_unlock() else 0)
        if cmd == "locked":
            return "ok %d" % (1 if await lk.locked() else 0)
        if cmd == "held":
            return "ok %d" % (1 if await lk.owned() else 0)
        if cmd == "lost":
            return "ok %d" % (1 if lk.lost else 0)
        if cmd == "holds":
            return "ok %d" % await lk.hold_count()
        if cmd == "ttl":
            t = await lk.ttl()
            return "ok %d" % (-2 if t is None else -1 if t == float("inf") else round(t * 1000))
        return "err usage unknown command " + cmd

    async def actor(self, name, q):
        state = {}  # this actor's own: its last permit id
        while True:
            w = await q.get()
            try:
                reply = await self.run(w, state)
            except Exception as e:  # noqa: BLE001 - reported to the harness
                reply = failure(e)
            say(name, reply)


async def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: agent_aio.py URL [key=value ...]\n")
        sys.exit(2)
    try:
        client = await aio.connect(sys.argv[1], **client_kwargs(sys.argv[2:]))
    except (hilock.Error, ValueError) as e:
        say("agent", "err connection %s" % e)
        sys.stdout.flush()
        os._exit(1)
    agent = Agent(client)
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue = asyncio.Queue()

    def read_stdin():  # a thread: stdin has no portable non-blocking reader
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read_stdin, daemon=True).start()
    say("agent", "ok ready")
    actors = {}
    tasks = []
    while True:
        line = await lines.get()
        if line is None:
            break
        w = line.split()
        if not w:
            continue
        if w[0] == "quit":
            break
        if len(w) < 4:
            say(w[0], "err usage ACTOR CMD r|f|fenced|read|write NAME ...")
            continue
        q = actors.get(w[0])
        if q is None:
            q = actors[w[0]] = asyncio.Queue()
            tasks.append(asyncio.create_task(agent.actor(w[0], q)))
        q.put_nowait(w)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    if os.environ.get("HILOCK_AIO_LOOP") == "uvloop":
        import uvloop
        uvloop.install()
    asyncio.run(main())
