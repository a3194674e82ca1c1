"""hilock against the lock libraries users would pick instead (issue 18).

Run by bench/peers/run.sh, which installs the peers and builds the contenders
first. Starts its own redis-server(s) on free loopback ports, runs every
contender against the same server in the same run, alternating contenders in
short slices over several rounds, measures each figure's physical limit in the
same run, and writes report.md plus PNG plots into --out (--smoke: one short
round, no plots, no report; fails if any contender fails or a check fails).
"""
import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import redis

import report
from report import pct

HERE = os.path.dirname(os.path.abspath(__file__))
OWNER = "00000000-0000-0000-0000-000000000000:9"


def embedded_script(root, name):
    """A libcore script as the library embeds it: each "-- #include f" line
    replaced by f (cmake/embed_scripts.cmake does the same at build time)."""
    d = os.path.join(root, "libcore", "scripts")
    out = []
    for line in open(os.path.join(d, name)):
        if line.startswith("-- #include "):
            out.append(open(os.path.join(d, line.split()[2])).read())
        else:
            out.append(line)
    return "".join(out)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --- servers -----------------------------------------------------------------

class Server:
    def __init__(self, workdir):
        for _ in range(20):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            d = os.path.join(workdir, "redis-%d" % self.port)
            os.makedirs(d)
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", d, "--logfile", d + "/redis.log"])
            self.r = redis.Redis(port=self.port)
            for _ in range(100):
                try:
                    if self.r.ping():
                        self.url = "redis://127.0.0.1:%d" % self.port
                        return
                except redis.ConnectionError:
                    time.sleep(0.05)
                if self.proc.poll() is not None:
                    break
            self.stop()
        raise RuntimeError("cannot start redis-server")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def rb(server, clients, n, *cmd, pipeline=1, rnd=None, threads=0):
    """redis-benchmark: requests per second of one command."""
    argv = ["redis-benchmark", "-p", str(server.port), "-c", str(clients), "-n", str(n),
            "-P", str(pipeline), "--csv"]
    if threads:
        argv += ["--threads", str(threads)]
    if rnd:
        argv += ["-r", str(rnd)]
    out = subprocess.run(argv + list(cmd), capture_output=True, text=True, timeout=120, check=True)
    last = [l for l in out.stdout.splitlines() if l.strip()][-1]
    return float(last.split(",")[1].strip('"'))


# --- contenders --------------------------------------------------------------

class Contender:
    def __init__(self, name, argv, env=None):
        self.name, self.argv, self.env = name, argv, env

    def run(self, scenario, timeout=180, **kw):
        out = subprocess.run(self.argv + [scenario] + ["%s=%s" % kv for kv in kw.items()],
                             capture_output=True, text=True, timeout=timeout, env=self.env)
        if out.returncode != 0:
            raise RuntimeError("%s %s failed (%d): %s" % (self.name, scenario, out.returncode,
                                                        out.stderr.strip()[-2000:]))
        return json.loads(out.stdout.strip().splitlines()[-1])

    def start(self, scenario, **kw):
        p = subprocess.Popen(self.argv + [scenario] + ["%s=%s" % kv for kv in kw.items()],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=self.env)
        line = p.stdout.readline().strip()
        if line != "ready":
            p.kill()
            p.wait()
            raise RuntimeError("%s %s did not get ready: %r" % (self.name, scenario, line))
        return p

    def finish(self, p, timeout=120):
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise RuntimeError("%s did not finish in %d s" % (self.name, timeout))
        if p.returncode != 0:
            raise RuntimeError("%s exited with %d" % (self.name, p.returncode))
        return json.loads(out.strip().splitlines()[-1])


def contenders(a):
    py = [a.venv + "/bin/python", os.path.join(HERE, "contender.py")]
    node_env = dict(os.environ, NODE_PATH=a.build + "/node/node_modules")
    jcp = open(a.build + "/jvm/classpath.txt").read().strip()
    c = {
        "hilock (C)": Contender("hilock (C)", [a.hilock_c]),
        "hilock (Python)": Contender("hilock (Python)", py + ["hilock"]),
        "Redisson": Contender("Redisson", [
            "java", "-XX:+UseSerialGC", "-Xss512k", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp", a.build + "/jvm/classes:" + jcp, "hilock.peers.Contender"]),
        "redis-py Lock": Contender("redis-py Lock", py + ["redis-py"]),
        "python-redis-lock": Contender("python-redis-lock", py + ["python-redis-lock"]),
        "pottery Redlock": Contender("pottery Redlock", py + ["pottery"]),
        "node-redlock": Contender("node-redlock", ["node", os.path.join(HERE, "node/contender.js")],
                                  node_env),
        "redsync": Contender("redsync", [a.build + "/go/peers-redsync"]),
        "redis-py asyncio Lock": Contender("redis-py asyncio Lock", py + ["redis-py-asyncio"]),
        "aioredlock": Contender("aioredlock", py + ["aioredlock"]),
        "hilock (asyncio)": Contender("hilock (asyncio)", py + ["hilock-aio"]),
    }
    ok = subprocess.run(py[:1] + ["-c", "import hilock"], capture_output=True).returncode == 0
    if not ok:
        log("peers: hilock's Python package is not importable in %s; its rows are skipped" % a.venv)
        del c["hilock (Python)"]
        del c["hilock (asyncio)"]
    return c


# --- statistics ----------------------------------------------------------------

def handoffs(events_by_proc, warm_ns=0, horizon=64):
    """events: [t_request, t_acquired, t_unlock_call] per grant, per process.
    Grants in the first warm_ns are dropped (JIT warm-up). Returns (hand-off
    samples in us, grants kept, exclusion violations, share of hand-offs that
    went to the earliest waiting request among the next `horizon` grants)."""
    ev = sorted((e[1], e[0], e[2]) for es in events_by_proc.values() for e in es)
    if ev and warm_ns:
        ev = [e for e in ev if e[0] >= ev[0][0] + warm_ns]
    samples, bad, inorder, judged = [], 0, 0, 0
    for i in range(1, len(ev)):
        acq, req, _unl = ev[i]
        punl = ev[i - 1][2]
        if acq < punl:
            bad += 1  # acquired before the previous holder called unlock
            continue
        if req < punl:  # this one was waiting when the holder let go
            samples.append((acq - punl) / 1e3)
            waiting = [e[1] for e in ev[i:i + horizon] if e[1] < punl]
            judged += 1
            inorder += req <= min(waiting)
    return samples, len(ev), bad, (inorder / judged if judged else float("nan"))


# --- figures -------------------------------------------------------------------

class Bench:
    def __init__(self, a):
        self.a = a
        self.smoke = a.smoke
        self.only = [f for f in a.only.split(",") if f]
        self.rounds = 1 if a.smoke else a.rounds
        self.c = contenders(a)
        self.work = tempfile.mkdtemp(prefix="hilock-peers-")
        self.srv = Server(self.work)
        self.res = {"load": []}
        self.failures = []

    def load(self, what):
        self.res["load"].append((what, os.getloadavg()))

    def names(self, wanted, r):
        names = [n for n in wanted if n in self.c]
        k = r % len(names) if names else 0
        return names[k:] + names[:k]  # a different contender goes first each round

    def attempt(self, fig, name, fn):
        log("peers: %s %s (%.0f s)" % (fig, name, time.monotonic() - self.t0))
        try:
            return fn()
        except Exception as e:  # report it, go on with the others
            log("peers: %s / %s: %s" % (fig, name, e))
            self.failures.append("%s / %s: %s" % (fig, name, str(e)[:300]))
            return None

    def lock_sha(self, server):
        src = embedded_script(self.a.root, "lock.lua")
        sha = server.r.script_load(src)
        # the script takes KEYS[1] = lock, ARGV = lease, owner (check it still does)
        server.r.evalsha(sha, 1, "peers:check", 30000, OWNER)
        if server.r.hget("peers:check", OWNER) != b"1":
            raise RuntimeError("libcore/scripts/lock.lua no longer takes (key, lease, owner)")
        server.r.delete("peers:check")
        return sha

    def limit_pairs(self, server, clients, n):
        """Half the rate of redis-benchmark EVALSHA of hilock's lock script
        (a pair is two scripts), with `clients` connections, distinct keys
        (and 2 client threads for more than one connection, so that the
        benchmark's own event loop is not the bottleneck on a 2-core box)."""
        key = "peers:rb:__rand_int__" if clients > 1 else "peers:rb"
        rps = rb(server, clients, n, "EVALSHA", self.sha_of[server.port], "1", key, "30000", OWNER,
                 rnd=clients if clients > 1 else None, threads=2 if clients > 1 else 0)
        server.r.flushall()
        return rps / 2

    def around(self, limit, run):
        """Limit measured just before and just after the slice (the load on
        a shared machine drifts within seconds): the slice's result with the
        mean of the two limits, or None."""
        before = limit()
        res = run()
        after = limit()
        if res is not None:
            res["limit"] = (before + after) / 2
        return res

    # 1 and 7: uncontended pairs, one thread
    def fig_pairs(self, fig, wanted):
        n, warm = (200, 50) if self.smoke else (2000, 2000)
        rows = {}
        self.load(fig)
        for r in range(self.rounds):
            for name in self.names(wanted, r):
                res = self.around(
                    lambda: self.limit_pairs(self.srv, 1, 4000 if self.smoke else 10000),
                    lambda: self.attempt(fig, name, lambda: self.c[name].run(
                        "pairs", url=self.srv.url, key="peers:%s:%d" % (fig, r), n=n, warm=warm)))
                if res:
                    res["ratio"] = res["pairs_per_s"] / res["limit"]
                    rows.setdefault(name, []).append(res)
        return rows

    # 2 and 3: hand-off under contention
    def fig_handoff(self, fig, wanted, procs, threads, fair):
        ms = 1500 if self.smoke else 4000
        rows = {}
        self.load(fig)
        for r in range(self.rounds):
            for name in self.names(wanted, r):
                res = self.around(self.floor, lambda: self.attempt(fig, name, lambda: self.handoff_slice(
                    self.c[name], "peers:%s:%d" % (fig, r), procs, threads, fair, ms)))
                if res:
                    res["floor_p50_us"] = res.pop("limit")
                    res["ratio"] = res["p50_us"] / res["floor_p50_us"]
                    rows.setdefault(name, []).append(res)
        return rows

    def floor(self):
        """Hand-off floor: raw PUBLISH -> subscriber -> one EVALSHA (hilock's
        bench/c/handoff_bench -k floor, from the PUBLISH call), p50 us."""
        out = subprocess.run([self.a.handoff_bench, "-k", "floor", "-m",
                              "300" if self.smoke else "1000", self.srv.url],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        vals = dict(l.split("=", 1) for l in out.splitlines() if "=" in l)
        return float(vals["call_p50_us"])

    def handoff_slice(self, c, key, procs, threads, fair, ms, hold_us=2000):
        counter = os.path.join(self.work, "counter")
        with open(counter, "wb") as f:
            f.write(b"\0" * 64)
        ps = []
        try:
            for _ in range(procs):
                ps.append(c.start("handoff", url=self.srv.url, key=key, threads=threads,
                                  ms=ms, fair=int(fair), counter=counter, gap=max(1, procs * threads // 2),
                                  hold_us=hold_us))
            for p in ps:
                p.stdin.write("go\n")
                p.stdin.flush()
            outs = {i: c.finish(p, timeout=ms // 1000 + 120)["events"] for i, p in enumerate(ps)}
        finally:
            for p in ps:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        warm = 0 if self.smoke else 1000
        samples, grants, bad, inorder = handoffs(outs, warm * 1000000)
        if bad:
            self.failures.append("%s on %s: %d grants before the previous holder's unlock call"
                                 % (c.name, key, bad))
        if not grants:
            raise RuntimeError("the lock was never granted")
        if not samples and not self.smoke:
            raise RuntimeError("no hand-off samples")
        return {"p50_us": pct(samples, 0.5), "p99_us": pct(samples, 0.99),
                "grants_per_s": grants / ((ms - warm) / 1000), "samples": samples, "hand_offs": len(samples), "violations": bad,
                "in_order": inorder}

    # 4: 16 threads / tasks on distinct keys
    def fig_threads(self, fig, wanted, n=16):
        ms = 500 if self.smoke else 2000
        rows = {}
        self.load(fig)
        for r in range(self.rounds):
            for name in self.names(wanted, r):
                res = self.around(
                    lambda: self.limit_pairs(self.srv, n, 8000 if self.smoke else 30000),
                    lambda: self.attempt(fig, name, lambda: self.c[name].run(
                        "threads", url=self.srv.url, key="peers:%s:%d" % (fig, r), threads=n,
                        ms=ms, warm_ms=200 if self.smoke else 1000)))
                if res:
                    res["ratio"] = res["pairs_per_s"] / res["limit"]
                    rows.setdefault(name, []).append(res)
        return rows

    # 5: watchdog at scale
    def fig_watchdog(self, fig, wanted):
        n, lease, window = (300, 1500, 2.0) if self.smoke else (10000, 3000, 9.0)
        rows = {}
        self.load(fig)
        for r in range(1 if self.smoke else 2):
            for name in self.names(wanted, r):
                self.srv.r.flushall()
                lim = self.pexpire_usec()
                res = self.attempt(fig, name, lambda: self.watchdog_slice(
                    self.c[name], "peers:%s:%d" % (fig, r), n, lease, window))
                if res:
                    res["pexpire_usec"] = lim
                    res["ratio"] = res["server_us_per_renewal"] / lim if lim else float("nan")
                    rows.setdefault(name, []).append(res)
        self.res["watchdog_params"] = {"locks": n, "lease_ms": lease, "window_s": window}
        return rows

    def pexpire_usec(self):
        """Server time of the cheapest possible renewal: one PEXPIRE per key,
        pipelined (redis-benchmark -P 100), from INFO commandstats."""
        for i in range(1000):
            self.srv.r.set("peers:px:%012d" % i, 1)
        self.srv.r.config_resetstat()
        rb(self.srv, 1, 20000, "PEXPIRE", "peers:px:__rand_int__", "3000", pipeline=100, rnd=1000)
        st = self.srv.r.info("commandstats").get("cmdstat_pexpire", {})
        self.srv.r.flushall()
        return float(st.get("usec_per_call", "nan"))

    def watchdog_slice(self, c, key, n, lease, window):
        p = subprocess.Popen(c.argv + ["watchdog", "url=" + self.srv.url, "key=" + key,
                                       "n=%d" % n, "lease=%d" % lease],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=c.env)
        try:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("did not take its locks")
            time.sleep(lease / 1000)  # let the first renewals settle in
            r = self.srv.r
            r.config_resetstat()
            scpu0 = server_cpu(r)
            cpu0, t0 = proc_cpu(p.pid), time.monotonic()
            time.sleep(window)
            cpu1, t1 = proc_cpu(p.pid), time.monotonic()
            stats = r.info("commandstats")
            scpu1 = server_cpu(r)
            rss = proc_rss(p.pid)
            pipe = r.pipeline(transaction=False)
            for i in range(n):
                pipe.exists("%s:%d" % (key, i))
            present = sum(pipe.execute())
            p.stdin.write("stop\n")
            p.stdin.flush()
            out = c.finish(p, timeout=300)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        dt = t1 - t0
        calls = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_config")
        usec = sum(v["usec"] for k, v in stats.items() if k != "cmdstat_config")
        renewals = n * dt / (lease / 3000)  # one renewal per lock per lease/3
        # The server's own CPU time (INFO cpu) is not inflated when the
        # machine is busy and the server waits for a core mid-command, as
        # commandstats' usec (wall time) is; per lock and second, it is the
        # issue's "renewal cost per lock per second".
        return {"server_cpu_us_per_lock_s": (scpu1 - scpu0) * 1e6 / dt / n,
                "renewals_per_lock_s": stats.get("cmdstat_pexpire", {}).get("calls", 0) / dt / n,
                "calls_per_s": calls / dt, "server_us_per_s": usec / dt,
                "server_us_per_renewal": usec / renewals,
                "calls_per_lock_s": calls / dt / n, "client_cpu_pct": 100 * (cpu1 - cpu0) / dt,
                "rss_mb": rss / 1024, "lost": out["lost"] + (n - present),
                "commands": {k[8:]: v["calls"] for k, v in stats.items() if k != "cmdstat_config"}}

    # 6: Redlock of 5
    def fig_redlock(self, fig, wanted):
        n, warm = (50, 10) if self.smoke else (500, 500)
        servers = [Server(self.work) for _ in range(5)]
        rows = {}
        try:
            for s in servers:
                self.sha_of[s.port] = self.lock_sha(s)
            urls = ",".join(s.url for s in servers)
            self.load(fig)
            for r in range(self.rounds):
                for name in self.names(wanted, r):
                    res = self.around(
                        lambda: self.limit_pairs(servers[0], 1, 4000 if self.smoke else 10000),
                        lambda: self.attempt(fig, name, lambda: self.c[name].run(
                            "redlock", urls=urls, key="peers:%s:%d" % (fig, r), n=n, warm=warm)))
                    if res:
                        res["ratio"] = res["pairs_per_s"] / res["limit"]
                        rows.setdefault(name, []).append(res)
        finally:
            for s in servers:
                s.stop()
        return rows

    def run(self):
        self.sha_of = {self.srv.port: self.lock_sha(self.srv)}
        t0 = self.t0 = time.monotonic()
        everyone = ["hilock (C)", "hilock (Python)", "Redisson", "redis-py Lock",
                    "python-redis-lock", "pottery Redlock", "node-redlock", "redsync"]
        figs = {
            "f1": lambda: self.fig_pairs("f1", everyone),
            "f2": lambda: self.fig_handoff("f2", everyone, 4 if self.smoke else 8, 1, False),
            "f3": lambda: self.fig_handoff("f3", ["hilock (C)", "Redisson"],
                                           2 if self.smoke else 4, 2 if self.smoke else 4, True),
            "f4": lambda: self.fig_threads("f4", ["hilock (C)", "hilock (Python)", "Redisson",
                                                  "redis-py Lock", "redis-py asyncio Lock",
                                                  "node-redlock", "redsync"]),
            "f5": lambda: self.fig_watchdog("f5", ["hilock (C)", "Redisson"]),
            "f6": lambda: self.fig_redlock("f6", ["hilock (C)", "hilock (Python)", "Redisson",
                                                  "pottery Redlock", "node-redlock", "redsync",
                                                  "aioredlock"]),
            "f7": lambda: self.fig_pairs("f7", ["hilock (asyncio)", "redis-py asyncio Lock",
                                                "aioredlock"]),
        }
        for f, run in figs.items():
            if not self.only or f in self.only:
                self.res[f] = run()
        self.load("end")
        self.res["elapsed_s"] = time.monotonic() - t0
        return self.res

    def close(self):
        self.srv.stop()
        shutil.rmtree(self.work, ignore_errors=True)


def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu(r):
    """CPU seconds the redis-server has used (user + system)."""
    st = r.info("cpu")
    return float(st["used_cpu_user"]) + float(st["used_cpu_sys"])


def proc_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--build", required=True, help="build/peers: venv, node, jvm, go")
    ap.add_argument("--hilock-c", required=True)
    ap.add_argument("--handoff-bench", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--only", default="",
                    help="comma-separated figures (f1..f7): run just those and print their "
                         "rows as JSON instead of writing the report")
    a = ap.parse_args()
    a.venv = a.build + "/venv"
    # SIGTERM (the suite's timeout) unwinds through the finally blocks below,
    # which stop every redis-server and contender this run started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    b = Bench(a)
    try:
        res = b.run()
    finally:
        b.close()
    res["failures"] = b.failures
    if a.only:
        print(json.dumps(res, indent=1, default=str))
        sys.exit(1 if b.failures else 0)
    print(report.summary(res))
    if a.smoke:
        problems = report.smoke_problems(res)
        for p in problems:
            log("peers smoke: " + p)
        sys.exit(1 if problems else 0)
    report.write(res, a, a.out)


if __name__ == "__main__":
    main()
