"""Torture: 8 processes x 4 threads through one fault proxy that resets
connections at random (also right after the server ran a command, so its
reply is lost), with short leases and forced unlocks on some names.

Asserts: nobody hangs (every acquire returns within its wait plus the
timeouts), no two holders of a watchdog name at once (the "inside" marker),
and no hold left behind once every worker has released and exited.
"""

import json
import os
import random
import subprocess
import threading
import time

from conftest import RedisServer
from faultproxy import FaultProxy

PROCS = 8
DURATION = float(os.environ.get("HILOCK_TORTURE_SECONDS", "30"))


def test_torture():
    server = RedisServer()
    proxy = FaultProxy(server.port)
    stop = threading.Event()
    resets = [0]

    def faults() -> None:
        r = random.Random(1)
        while not stop.wait(r.uniform(0.1, 0.4)):
            x = r.random()
            if x < 0.3:
                proxy.reset()
            elif x < 0.5:
                proxy.reset_on_reply(b"EVAL")  # the next script's reply is lost
            elif x < 0.8:
                proxy.reset_on_reply(b"x:")  # ... one on a watchdog name
            else:
                proxy.reset_on_request(b"EVAL")  # the next script never arrives
            resets[0] += 1

    here = os.path.dirname(os.path.abspath(__file__))
    py = os.environ.get("HILOCK_PYTHON", "python3")
    outs = [os.path.join(here, "torture-%d.json" % i) for i in range(PROCS)]
    ft = threading.Thread(target=faults, daemon=True)
    procs = []
    try:
        ft.start()
        procs = [subprocess.Popen([py, os.path.join(here, "torture_worker.py"), proxy.url(),
                                   str(server.port), str(i), str(DURATION), outs[i]], cwd=here)
                 for i in range(PROCS)]
        for p in procs:
            assert p.wait(DURATION + 60) == 0, "a worker failed or hung"
        stop.set()
        ft.join()
        total = {"acquired": 0, "timeouts": 0, "forced": 0, "lost": 0, "overlaps": [],
                 "max_overrun": 0.0, "errors": {}, "release_failed": {}, "phantoms": []}
        unreleased = set()
        for o in outs:
            with open(o) as f:
                s = json.load(f)
            for k in ("acquired", "timeouts", "forced", "lost"):
                total[k] += s[k]
            total["overlaps"] += s["overlaps"]
            total["phantoms"] += s["phantoms"]
            unreleased.update(tuple(x) for x in s["unreleased_owners"])
            total["max_overrun"] = max(total["max_overrun"], s["max_overrun"])
            for k, v in s["errors"].items():
                total["errors"][k] = total["errors"].get(k, 0) + v
            for k, v in s["release_failed"].items():
                total["release_failed"][k] = total["release_failed"].get(k, 0) + v
        shown = dict(total, phantoms=len(total["phantoms"]), overlaps=len(total["overlaps"]))
        print("[torture] %d fault injections (%d replies lost, %d requests dropped); %s"
              % (resets[0], proxy.fired("reset-on-reply"), proxy.fired("reset-on-request"),
                 json.dumps(shown)))
        assert total["acquired"] > 100, "too little work to mean anything"
        assert proxy.fired("reset-on-reply") > 5
        assert not total["overlaps"], "two holders at once: %s" % total["overlaps"][:5]
        assert not total["phantoms"], "still held after its only release: %s" % total["phantoms"][:5]
        assert total["max_overrun"] < 2.0, "an acquire overran its wait by %.2f s" % total["max_overrun"]
        # every worker released what it held and exited: a hold still there
        # must belong to a thread whose release failed (it ends with its
        # lease); any other is a phantom (an acquire counted twice)
        for n in ("x:%d" % i for i in range(3)):
            fields = server("HGETALL", n) or []
            print("[torture] left on %s: %s" % (n, fields))
            phantom = [o for o in fields[0::2] if (n, o) not in unreleased]
            assert not phantom, "%s still held by %s after every worker left" % (n, phantom)
    finally:
        stop.set()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for o in outs:
            if os.path.exists(o):
                os.unlink(o)
        proxy.close()
        server.stop()
