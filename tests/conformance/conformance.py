#!/usr/bin/env python3
"""hilock conformance suite: scenarios written once as data, run by every driver.

Reads tests/conformance/scenarios/*.json (format: tests/conformance/README.md),
starts the servers the scenarios need (one redis-server; a 3-master cluster
with replicas; master + replica + 3 sentinels — the harness of tests/python,
all on free loopback ports, always stopped) and runs each scenario on every
driver at once, in lockstep: each step is carried out for every driver
before the next one starts, on lock names of that driver's own, and a
harness step (pause a server, fail over) is done once for all of them.

Drivers are agents that speak one line protocol (agent.c, agent.py,
agent.lua under each interpreter, agent_resty.lua behind nginx). A driver
that cannot run (not built, interpreter missing, agent does not start) fails
every scenario, with the reason.

Usage: conformance.py --driver NAME=SPEC ... [-k SUBSTRING]
  SPEC: threads:COMMAND   one agent process per scenario, actors are threads
        process:COMMAND   one agent process per actor
        http:NGINX_CONF_TEMPLATE:LUA_CPATH_DIR   nginx + agent_resty.lua
        missing:REASON    the driver cannot run (counted as failures)
  COMMAND gets the URL and the scenario's client options (key=value) appended.
Exit 0 when every (scenario, driver) passed (known failures aside).
"""
import argparse
import atexit
import glob
import http.client
import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
try:
    import hilock  # noqa: F401  (test_topologies imports it; its server classes do not use it)
except ImportError:  # the python driver then fails every scenario, with the reason; the rest run
    sys.modules["hilock"] = types.ModuleType("hilock")
from conftest import RedisServer, RespError, _pdeathsig, free_port  # noqa: E402
from test_topologies import Cluster, SentinelSet  # noqa: E402

# ---------------------------------------------------------------------------
# KNOWN FAILURES — (driver, scenario) pairs allowed to fail. An entry that
# passes fails the suite ("XPASS"), so the list cannot outlive the bug.
# (The OpenResty late-grant and partial-unlock entries went with issue 12's
# engine: resty.hilock now settles attempts and releases through it.)
# (The asyncio cluster entries went when hilock.aio learnt Redis Cluster.)
# (The c-async cluster, sentinel and replica-ack entries went when hilock_async
# learnt them: libcore/src/api/async_route.c.)
KNOWN_FAILURES = set()  # every driver passes every scenario
# ---------------------------------------------------------------------------

REPLY_SLACK_MS = 10000  # an answer may take this long beyond the request's own wait
_cleanup = []


class Fail(Exception):
    pass


def _run_cleanup():
    while _cleanup:
        try:
            _cleanup.pop()()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _on_signal(signum, _frame):
    _run_cleanup()
    os._exit(128 + signum)


def poll(fn, timeout_s, step_s=0.02):
    """fn() -> (done, observed); polled until done or timeout. -> (done, observed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, seen = fn()
        if done or time.monotonic() > deadline:
            return done, seen
        time.sleep(step_s)


def match(pattern, text, saved=None):
    """Does an answer (or a server value as text) match a pattern?

    Pattern words are matched against the first words of the text: 'a|b'
    (alternatives), 'lo..hi' (an integer in range), '*' (anything), '>T' /
    '=T' (an integer above / equal to the value saved as T). An 'err'
    answer may carry more words (its detail); anything else must match fully.
    """
    pw, tw = pattern.split(), text.split()
    if len(tw) < len(pw) or (len(tw) > len(pw) and pw[:1] != ["err"]):
        return False
    for p, t in zip(pw, tw):
        if p == "*":
            continue
        if p[:1] in (">", "="):
            if saved is None or p[1:] not in saved:
                raise Fail("pattern %s: nothing saved as %s" % (p, p[1:]))
            try:
                v, ref = int(t), int(saved[p[1:]])
            except ValueError:
                return False
            if not (v > ref if p[0] == ">" else v == ref):
                return False
            continue
        if ".." in p:
            lo, hi = p.split("..")
            try:
                if not int(lo) <= int(t) <= int(hi):
                    return False
            except ValueError:
                return False
        elif t not in p.split("|"):
            return False
    return True


def matches(expect, text, saved=None):
    return any(match(p, text, saved) for p in (expect if isinstance(expect, list) else [expect]))


# ------------------------------------------------------------- topologies --

class Single:
    name = "single"

    def __init__(self):
        self.server = RedisServer()
        self.url = "redis://127.0.0.1:%d" % self.server.port

    def node(self, role, key):
        return self.server

    def stop(self):
        self.server.stop()


class ClusterTopo:
    """3 masters + 3 replicas (tests/python's Cluster); slot moves tracked."""
    name = "cluster"

    def __init__(self):
        self.c = Cluster()
        self.url = self.c.url
        self.moved = {}  # slot -> master it was moved to

    def slot(self, key):
        return int(self.c.nodes[0]("CLUSTER", "KEYSLOT", key))

    def node(self, role, key):
        if role != "master" or key is None:
            raise Fail("cluster steps name a lock (their master)")
        return self.moved.get(self.slot(key)) or self.c.master_of(key)

    def owner(self, role, key):
        """The lock's master for reading its keys: follows MOVED to the slot's owner."""
        return SlotOwner(self, self.node(role, key))

    def stop(self):
        self.c.stop()


class SlotOwner:
    """Calls one node; a MOVED answer sends the command again to the node it names
    (a node may still point elsewhere for a moment after a slot moved: retried
    for up to 2 s, then the last MOVED is raised)."""

    def __init__(self, topo, node):
        self.topo, self.node = topo, node

    @property
    def port(self):
        return self.node.port

    def __call__(self, *args):
        deadline, hops = time.monotonic() + 2.0, 0
        while True:
            try:
                return self.node(*args)
            except RespError as e:
                w = str(e).split()
                if len(w) != 3 or w[0] != "MOVED" or time.monotonic() > deadline:
                    raise
                to = self.topo.c.by_port.get(int(w[2].rsplit(":", 1)[1]))
                if to is None:
                    raise
                if hops:  # sent back and forth: let the nodes agree first
                    time.sleep(0.05)
                hops += 1
                self.node = to


class SentinelTopo:
    """master + replica + 3 sentinels (tests/python's SentinelSet)."""
    name = "sentinel"

    def __init__(self):
        self.s = SentinelSet()
        self.url = self.s.url

    def master_port(self):
        return int(self.s.sentinels[0]("SENTINEL", "get-master-addr-by-name", "hm")[1])

    def node(self, role, key):
        m = self.master_port()
        pair = [self.s.master, self.s.replica]
        if role == "master":
            return next(n for n in pair if n.port == m)
        return next(n for n in pair if n.port != m)

    def failover(self):
        old = self.master_port()
        if not all(s.replica_ready() for s in self.s.sentinels):
            ok, _ = poll(lambda: (all(s.replica_ready() for s in self.s.sentinels), None), 15, 0.1)
            if not ok:
                raise Fail("the sentinels do not know the replica: cannot fail over")
        if self.s.sentinels[0]("SENTINEL", "FAILOVER", "hm") != "OK":
            raise Fail("SENTINEL FAILOVER refused")
        ok, _ = poll(lambda: (all(s.master_port_seen() != old for s in self.s.sentinels), None),
                     20, 0.05)
        if not ok:
            raise Fail("the sentinels did not all name a new master within 20 s")

    def stop(self):
        self.s.stop()


TOPOLOGIES = {"single": Single, "cluster": ClusterTopo, "sentinel": SentinelTopo}


# ----------------------------------------------------------------- agents --

class LineAgent:
    """One agent process speaking the line protocol on stdin/stdout."""

    def __init__(self, argv, env, logdir):
        self.queues = {}
        self.mu = threading.Lock()
        self.log = open(os.path.join(logdir, "agent-%s.err" % uuid.uuid4().hex[:8]), "wb")
        try:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.log,
                                         text=True, bufsize=1, preexec_fn=_pdeathsig)
        except OSError as e:
            raise Fail("cannot start %s: %s" % (argv[0], e))
        _cleanup.append(self.close)
        threading.Thread(target=self._read, daemon=True).start()
        text, _ = self.reply("agent", 15)
        if text != "ok ready":
            why = self._stderr()  # before close(): it closes the log
            self.close()
            raise Fail("agent did not start: %s%s" % (text, why))

    def _stderr(self):
        try:
            self.log.flush()
            with open(self.log.name, errors="replace") as f:
                tail = f.read()[-400:].strip()
            return (" | stderr: " + tail.replace("\n", " | ")) if tail else ""
        except OSError:
            return ""

    def _q(self, actor):
        with self.mu:
            return self.queues.setdefault(actor, queue.Queue())

    def _read(self):
        for line in self.proc.stdout:
            who, _, rest = line.rstrip("\n").partition(" ")
            self._q(who).put((rest, time.monotonic()))
        self._q("agent").put(("exited (status %s)" % self.proc.wait(), time.monotonic()))

    def send(self, actor, text):
        t = time.monotonic()
        try:
            self.proc.stdin.write("%s %s\n" % (actor, text))
            self.proc.stdin.flush()
        except (OSError, ValueError) as e:
            raise Fail("agent is gone (%s)%s" % (e, self._stderr()))
        return t

    def reply(self, actor, timeout_s):
        try:
            return self._q(actor).get(timeout=timeout_s)
        except queue.Empty:
            if self.proc.poll() is not None:
                return "agent exited with status %d%s" % (self.proc.returncode,
                                                          self._stderr()), time.monotonic()
            return "no answer within %.1f s" % timeout_s, time.monotonic()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(2)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Nginx:
    """nginx (one worker) serving agent_resty.lua on a free loopback port."""

    def __init__(self, template, cpath):
        self.dir = tempfile.mkdtemp(prefix="hilock-conformance-nginx-")
        self.proc = None
        for _ in range(5):
            self.port = free_port()
            with open(template) as f:
                conf = f.read()
            for k, v in (("@TMP@", self.dir), ("@PORT@", str(self.port)),
                         ("@ROOT@", ROOT), ("@CPATH@", cpath)):
                conf = conf.replace(k, v)
            path = os.path.join(self.dir, "nginx.conf")
            with open(path, "w") as f:
                f.write(conf)
            self.proc = subprocess.Popen(["nginx", "-p", self.dir, "-c", path, "-e",
                                          os.path.join(self.dir, "error.log")],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         preexec_fn=_pdeathsig)
            _cleanup.append(self.stop)
            ok, _ = poll(lambda: (self.proc.poll() is not None or self._ping(), None), 10, 0.05)
            if ok and self.proc.poll() is None:
                return
            self._kill()
        why = "nginx did not start" + self.error_log()
        self.stop()
        raise Fail(why)

    def _ping(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
            c.request("GET", "/ping")
            return c.getresponse().read().strip() == b"pong"
        except OSError:
            return False

    def error_log(self):
        try:
            with open(os.path.join(self.dir, "error.log"), errors="replace") as f:
                return " | error.log: " + f.read()[-600:].replace("\n", " | ")
        except OSError:
            return ""

    def _kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stop(self):
        self._kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class HttpActor:
    """One OpenResty actor: its requests, in order, as HTTP GETs to /agent."""
    _tids = iter(range(1, 1 << 40))

    def __init__(self, nginx, url, opts):
        self.nginx, self.url, self.opts = nginx, url, ",".join(opts)
        self.tid = next(HttpActor._tids)
        self.jobs, self.out = queue.Queue(), queue.Queue()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            line = self.jobs.get()
            if line is None:
                return
            q = urllib.parse.urlencode({"url": self.url, "opts": self.opts,
                                        "tid": self.tid, "line": line})
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.nginx.port, timeout=120)
                c.request("GET", "/agent?" + q)
                r = c.getresponse()
                body = r.read().decode(errors="replace").strip()
                c.close()
                text = body if r.status == 200 else "HTTP %d: %s%s" % (
                    r.status, body[:200], self.nginx.error_log())
            except OSError as e:
                text = "HTTP request failed: %s" % e
            self.out.put((text, time.monotonic()))


class Driver:
    def __init__(self, name, spec, logdir):
        self.name, self.logdir = name, logdir
        self.mode, _, rest = spec.partition(":")
        self.missing = rest if self.mode == "missing" else None
        if self.mode in ("threads", "process"):
            self.argv = shlex.split(rest)
        elif self.mode == "http":
            self.template, _, self.cpath = rest.partition(":")
            self.nginx = None
        elif self.mode != "missing":
            raise SystemExit("bad driver spec " + spec)

    def endpoints(self, url, opts):
        """-> open(actor) -> (send(text) -> t, reply(timeout) -> (text, t), close())."""
        if self.mode == "http":
            if self.nginx is None:
                try:
                    self.nginx = Nginx(self.template, self.cpath)
                except Fail as e:  # not again for every scenario
                    self.missing = str(e)
                    raise
            return HttpEndpoints(self.nginx, url, opts)
        return LineEndpoints(self.argv + [url] + opts, self.mode == "process", self.logdir)


class LineEndpoints:
    def __init__(self, argv, per_actor, logdir):
        self.argv, self.per_actor, self.logdir = argv, per_actor, logdir
        self.agents = {}

    def agent(self, actor):
        key = actor if self.per_actor else ""
        if key not in self.agents:
            self.agents[key] = LineAgent(self.argv, os.environ, self.logdir)
        return self.agents[key]

    open = agent

    def send(self, actor, text):
        return self.agent(actor).send(actor, text)

    def reply(self, actor, timeout_s):
        return self.agent(actor).reply(actor, timeout_s)

    def close(self):
        for a in self.agents.values():
            a.close()


class HttpEndpoints:
    def __init__(self, nginx, url, opts):
        self.nginx, self.url, self.opts = nginx, url, opts
        self.actors = {}

    def actor(self, name):
        if name not in self.actors:
            self.actors[name] = HttpActor(self.nginx, self.url, self.opts)
        return self.actors[name]

    open = actor

    def send(self, actor, text):
        t = time.monotonic()
        self.actor(actor).jobs.put("%s %s" % (actor, text))
        return t

    def reply(self, actor, timeout_s):
        try:
            return self.actor(actor).out.get(timeout=timeout_s)
        except queue.Empty:
            return "no answer within %.1f s" % timeout_s, time.monotonic()

    def close(self):
        for a in self.actors.values():
            a.jobs.put(None)


# --------------------------------------------------------------- scenarios --

class Run:
    """One driver running one scenario."""

    def __init__(self, driver, scenario, topo, shared_token):
        self.driver, self.sc, self.topo = driver, scenario, topo
        self.shared_token = shared_token
        self.error = None
        self.marks = {}
        self.saved = {}  # "save": values of answers, for '>T' / '=T' patterns
        self.migrations = {}
        self.token = uuid.uuid4().hex[:8]
        self.ep = None
        if driver.missing:
            self.error = "cannot run: " + driver.missing
            return
        opts = ["%s=%d" % (k, int(v)) for k, v in sorted(scenario.get("client", {}).items())]
        try:
            self.ep = driver.endpoints(topo.url, opts)
        except Exception as e:  # noqa: BLE001 - reported as this driver's failure
            self.error = "cannot run: %s" % e

    def real(self, local):
        if local in self.sc.get("shared_locks", []):  # one name for every driver
            return "cf:%s:shared:%s:%s" % (self.sc["id"], local, self.shared_token)
        return "cf:%s:%s:%s:%s" % (self.sc["id"], self.driver.name, local, self.token)

    def names(self):
        return self.sc.get("locks", []) + self.sc.get("shared_locks", [])

    def expand(self, s):
        for local in self.names():
            s = s.replace("${%s}" % local, self.real(local))
        return s

    def command(self, text):
        w = text.split()
        if len(w) >= 3:
            w[2] = self.real(w[2])
        return " ".join(w)

    def close(self):
        if self.ep:
            self.ep.close()


def reply_timeout_s(step):
    if "timeout_ms" in step:
        return step["timeout_ms"] / 1000.0
    w = step.get("send", "").split()
    wait = int(w[3]) if w and w[0] == "lock" and len(w) >= 5 else 0
    return (max(wait, 0) + REPLY_SLACK_MS) / 1000.0


def check_answer(r, step, text, t):
    """None if the answer (and its timing) is as the step expects, else why not."""
    want = step.get("expect", step.get("reply"))
    if want is not None and not matches(want, text, r.saved):
        return "got %r, expected %r" % (text, want)
    if "since" in step:
        dt = (t - r.marks[step["since"]]) * 1000
        if "max_ms" in step and dt > step["max_ms"]:
            return "%r came %.0f ms after %s (at most %d ms allowed)" % (
                text, dt, step["since"], step["max_ms"])
        if "min_ms" in step and dt < step["min_ms"]:
            return "%r came %.0f ms after %s (at least %d ms expected)" % (
                text, dt, step["since"], step["min_ms"])
    return None


def save(r, step, text):
    """A step with "save": NAME keeps the last word of its answer as NAME."""
    if "save" in step and text.split():
        r.saved[step["save"]] = text.split()[-1]


def lock_of_step(r, step):
    for local in r.names():
        if "${%s}" % local in json.dumps(step.get("redis", [])) or step.get("lock") == local:
            return r.real(local)
    return None


def redis_once(r, step):
    """Run the step's server command where it belongs; -> (ok, what was seen)."""
    if r.topo.name == "cluster":
        node = r.topo.owner(step.get("node", "master"), lock_of_step(r, step))
    else:
        node = r.topo.node(step.get("node", "master"), lock_of_step(r, step))
    args = [r.expand(a) if isinstance(a, str) else a for a in step["redis"]]
    try:
        v = node(*args)
    except (OSError, RespError) as e:
        return False, "%s on :%d failed: %s" % (" ".join(map(str, args)), node.port, e)
    seen = "nil" if v is None else " ".join(map(str, v)) if isinstance(v, list) else str(v)
    ok = matches(step["expect"], seen, r.saved)
    if ok:
        save(r, step, seen)
    return ok, "%s on :%d -> %s" % (" ".join(map(str, args)), node.port, seen)


def actor_once(r, step):
    t0 = r.ep.send(step["actor"], r.command(step["send"]))
    if "mark" in step:
        r.marks[step["mark"]] = t0
    text, t = r.ep.reply(step["actor"], reply_timeout_s(step))
    why = check_answer(r, step, text, t)
    if why is None:
        save(r, step, text)
    return why is None, why or text


def waiters_once(r, step):
    name = r.real(step["lock"])
    node = r.topo.owner("master", name) if r.topo.name == "cluster" else r.topo.node("master", name)
    if step.get("kind", "r") == "f":
        n = node("LLEN", "redisson_lock_queue:{%s}" % name)
    else:
        sub = "SHARDNUMSUB" if r.topo.name == "cluster" else "NUMSUB"
        channel = {"rw": "redisson_rwlock:{%s}", "sem": "redisson_sc:{%s}",
                   "latch": "redisson_countdownlatch__channel__{%s}"}.get(
                       step.get("kind"), "redisson_lock__channel:{%s}")
        n = node("PUBSUB", sub, channel % name)[1]
    return int(n) >= step["min"], "%s waiters seen" % n


def cluster_ids(topo):
    return {m.port: m("CLUSTER", "MYID") for m in topo.c.masters}


def migrate(r, step):
    """One phase of moving the lock's slot to another master."""
    topo, name = r.topo, r.real(step["lock"])
    if topo.name != "cluster":
        raise Fail("migrate needs the cluster topology")
    phase = step["do"]
    if phase == "migrate_begin":
        slot = topo.slot(name)
        src = topo.node("master", name)
        dst = next(m for m in topo.c.masters if m.port != src.port)
        r.migrations[step["lock"]] = (slot, src, dst)
    slot, src, dst = r.migrations[step["lock"]]
    ids = cluster_ids(topo)
    if phase == "migrate_begin":
        dst("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src.port])
        src("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst.port])
    elif phase == "migrate_keys":
        while True:
            keys = src("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            src("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)
    elif phase == "migrate_end":
        others = [m for m in topo.c.masters if m.port not in (src.port, dst.port)]
        topo.moved[slot] = dst
        # done when every node (replicas too) names the new owner. SETSLOT
        # NODE does not always win: a node whose config epoch is not the
        # highest can have the old owner gossiped back to it (seen on a
        # loaded machine: every node, the new owner too, named the old one
        # 10 s later), so the assignment is made again, with the epoch
        # bumped on the new owner, as redis-cli --cluster fix would
        ok, seen = False, ""
        for attempt in range(3):
            if attempt:
                dst("CLUSTER", "BUMPEPOCH")
            for m in [dst, src] + others:
                m("CLUSTER", "SETSLOT", slot, "NODE", ids[dst.port])
            ok, seen = poll(lambda: owners_agree(topo, slot, dst.port), 5, 0.05)
            if ok:
                break
        if not ok:
            raise Fail("slot %d moved %d -> %d, but the nodes say: %s" % (
                slot, src.port, dst.port, seen))


def owners_agree(topo, slot, port):
    seen = {}
    for n in topo.c.nodes:
        owner = None
        for lo, hi, master, *_ in n("CLUSTER", "SLOTS"):
            if int(lo) <= slot <= int(hi):
                owner = int(master[1])
        seen[n.port] = owner
    return all(v == port for v in seen.values()), " ".join(
        "%d:%s" % kv for kv in sorted(seen.items()))


def global_op(step, topo):
    op = step["do"]
    if op == "sleep":
        time.sleep(step["ms"] / 1000.0)
    elif op in ("pause", "resume"):
        node = topo.node(step.get("node", "master"), None)
        if op == "pause":
            node.pause()
        else:
            node.resume()
    elif op == "restart":
        topo.node(step.get("node", "master"), None).restart()
    elif op == "kill_pubsub":
        if topo.node(step.get("node", "master"), None)("CLIENT", "KILL", "TYPE", "pubsub") < 1:
            raise Fail("CLIENT KILL TYPE pubsub found no subscriber")
    elif op == "failover":
        if not hasattr(topo, "failover"):
            raise Fail("failover needs the sentinel topology")
        topo.failover()
    else:
        raise Fail("unknown harness step %r" % op)


PER_RUN_OPS = {"migrate_begin", "migrate_keys", "migrate_end"}


def execute(step, live, topo):
    """Carry out one step for every live run; a run that fails gets .error."""
    def fail(r, why):
        r.error = "step %s (%s): %s" % (step["_n"], step.get("why", step_text(step)), why)

    if "each_driver" in step:
        # driver after driver: every sub-step for one before the next starts;
        # what one saves, the next sees (one lock name shared by all)
        for r in live:
            for sub in step["each_driver"]:
                if r.error:
                    break
                sub["_n"] = step["_n"]
                execute(sub, [r], topo)
                for other in live:
                    other.saved.update(r.saved)
        return
    if "at_once" in step:
        # each driver runs the sub-steps in order at its own pace, every
        # driver at the same time (a thread each; a run touches only its own
        # agents and fresh server connections). In lockstep a driver's next
        # step waits for the slowest driver's answer, which on a loaded
        # machine can outlast a short lease between a grant and its check.
        subs = step["at_once"]
        bad = [s.get("do") for s in subs if "do" in s and s["do"] not in PER_RUN_OPS
               and s["do"] != "waiters"]
        if bad:
            raise Fail("at_once cannot hold harness steps (%s): they act for every driver"
                       % ", ".join(bad))

        def one(r):
            for i, sub in enumerate(subs, 1):
                if r.error:
                    break
                sub = dict(sub, _n="%s.%d" % (step["_n"], i))
                try:
                    execute(sub, [r], topo)
                except Exception as e:  # noqa: BLE001 - this driver's failure
                    fail(r, "%s.%d: harness: %s" % (step["_n"], i, e))

        # agents start here, not on a thread that ends: an agent process dies
        # with the thread that started it (PR_SET_PDEATHSIG)
        for r in live:
            for actor in sorted({sub["actor"] for sub in subs if "actor" in sub}):
                try:
                    r.ep.open(actor)
                except Fail as e:
                    fail(r, str(e))
        live = [r for r in live if not r.error]
        threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in live]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return
    if "do" in step and step["do"] not in PER_RUN_OPS and step["do"] != "waiters":
        global_op(step, topo)
        return
    for r in live:
        try:
            if "do" in step and step["do"] in PER_RUN_OPS:
                migrate(r, step)
            elif step.get("do") == "waiters":
                ok, seen = poll(lambda: waiters_once(r, step), step.get("within_ms", 5000) / 1000)
                if not ok:
                    fail(r, "waiters did not appear: " + seen)
        except (Fail, OSError, RespError) as e:
            fail(r, str(e))
    if "do" in step:
        return
    if "eventually" in step:
        inner = dict(step["eventually"])
        deadline = time.monotonic() + step["within_ms"] / 1000.0
        for r in live:
            once = redis_once if "redis" in inner else actor_once
            ok, seen = poll(lambda: once(r, inner), max(0.0, deadline - time.monotonic()), 0.05)
            if not ok:
                fail(r, "not within %d ms; last: %s" % (step["within_ms"], seen))
        return
    if "redis" in step:
        for r in live:
            try:
                ok, seen = redis_once(r, step)
            except Fail as e:
                ok, seen = False, str(e)
            if not ok:
                fail(r, "%s, expected %r" % (seen, step["expect"]))
        return
    actor = step["actor"]
    if "send" in step:
        for r in live:
            try:
                t = r.ep.send(actor, r.command(step["send"]))
            except Fail as e:
                fail(r, str(e))
                continue
            if "mark" in step:
                r.marks[step["mark"]] = t
        if step.get("async"):
            return
    for r in live:
        if r.error:
            continue
        text, t = r.ep.reply(actor, reply_timeout_s(step))
        try:
            why = check_answer(r, step, text, t)
        except Fail as e:
            why = str(e)
        if why:
            fail(r, why)
        else:
            save(r, step, text)


def step_text(step):
    if "send" in step:
        return "%s: %s" % (step["actor"], step["send"])
    if "reply" in step:
        return "%s answers" % step["actor"]
    if "redis" in step:
        return " ".join(map(str, step["redis"]))
    if "eventually" in step:
        return "eventually " + step_text(step["eventually"])
    if "each_driver" in step:
        return "each driver in turn: " + "; ".join(step_text(s) for s in step["each_driver"])
    if "at_once" in step:
        return "each driver at its own pace: " + "; ".join(step_text(s) for s in step["at_once"])
    return step.get("do", "?")


def run_scenario(sc, drivers, topo):
    shared_token = uuid.uuid4().hex[:8]
    runs = [Run(d, sc, topo, shared_token) for d in drivers]
    try:
        for n, step in enumerate(sc["steps"], 1):
            step["_n"] = n
            live = [r for r in runs if not r.error]
            if not live:
                break
            try:
                execute(step, live, topo)
            except (Fail, OSError, RespError) as e:
                for r in live:
                    r.error = r.error or "step %d (%s): harness: %s" % (n, step_text(step), e)
    finally:
        for r in runs:
            r.close()
        if topo.name != "cluster":  # a paused server must not stay paused
            for role in ("master", "replica"):
                try:
                    topo.node(role, None).resume()
                except Exception:  # noqa: BLE001 - single has no replica role
                    pass
    return {r.driver.name: r.error for r in runs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", action="append", default=[], metavar="NAME=SPEC")
    ap.add_argument("-k", default="", help="only scenarios whose id contains this")
    args = ap.parse_args()
    atexit.register(_run_cleanup)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)
    logdir = tempfile.mkdtemp(prefix="hilock-conformance-")
    _cleanup.append(lambda: shutil.rmtree(logdir, ignore_errors=True))
    drivers = []
    for d in args.driver:
        name, _, spec = d.partition("=")
        drivers.append(Driver(name, spec, logdir))
    scenarios = []
    for path in sorted(glob.glob(os.path.join(HERE, "scenarios", "*.json"))):
        with open(path) as f:
            sc = json.load(f)
        sc["id"] = os.path.basename(path)[3:-5]  # NN-id.json
        if args.k in sc["id"]:
            scenarios.append(sc)

    topos, topo_errors = {}, {}
    results = {}
    t_start = time.monotonic()
    for sc in scenarios:
        t0 = time.monotonic()
        tname = sc.get("topology", "single")
        try:
            if tname not in topos and tname not in topo_errors:
                topos[tname] = TOPOLOGIES[tname]()
                _cleanup.append(topos[tname].stop)
        except Exception as e:  # noqa: BLE001 - set-up failed: every driver fails its scenarios
            traceback.print_exc()
            topo_errors[tname] = "harness: cannot set up %s: %s" % (tname, e)
        if tname in topo_errors:
            res = {d.name: topo_errors[tname] for d in drivers}
        else:
            res = run_scenario(sc, drivers, topos[tname])
        results[sc["id"]] = res
        print("== %s (%s, %.1f s): %s" % (sc["id"], tname, time.monotonic() - t0,
                                          sc.get("title", "")))
        for d in drivers:
            err = res[d.name]
            known = (d.name, sc["id"]) in KNOWN_FAILURES
            if err is None:
                print("  %-6s %s%s" % ("XPASS" if known else "ok", d.name,
                                       "  (passes now: remove it from KNOWN_FAILURES)"
                                       if known else ""))
            else:
                print("  %-6s %s: %s" % ("known" if known else "FAIL", d.name, err))
        sys.stdout.flush()

    passed = failed = known_n = 0
    print("\nmatrix (ok, FAIL, known = listed in KNOWN_FAILURES, XPASS = listed but passes)")
    names = [d.name for d in drivers]
    width = max([len(s["id"]) for s in scenarios] + [8])
    print("  %-*s  %s" % (width, "scenario", " ".join("%-9s" % n for n in names)))
    for sc in scenarios:
        cells = []
        for n in names:
            known = (n, sc["id"]) in KNOWN_FAILURES
            ok = results[sc["id"]][n] is None
            if ok and not known:
                cell, passed = "ok", passed + 1
            elif not ok and known:
                cell, known_n = "known", known_n + 1
            else:
                cell, failed = ("XPASS" if ok else "FAIL"), failed + 1
            cells.append("%-9s" % cell)
        print("  %-*s  %s" % (width, sc["id"], " ".join(cells)))
    print("\n%d passed, %d failed, %d known failures (%.0f s)" % (
        passed, failed, known_n, time.monotonic() - t_start))
    _run_cleanup()
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
