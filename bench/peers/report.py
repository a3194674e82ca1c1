"""Tables, goal checks, plots and the Markdown report of bench/peers/peers.py."""
import json
import os
import platform
import re
import subprocess
import statistics
import time


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


FIGS = {
    "f1": "1. Uncontended lock+unlock pairs/s, one thread",
    "f2": "2. Hand-off under contention: 8 processes on one lock",
    "f3": "3. Fair lock: 16 queued waiters (4 processes x 4 threads)",
    "f4": "4. 16 threads / tasks on distinct keys",
    "f5": "5. Watchdog at scale",
    "f6": "6. Redlock of 5 servers, uncontended pairs",
    "f7": "7. asyncio: uncontended pairs, one task",
}
HILOCK = "hilock (C)"
POLLING = ["redis-py Lock", "pottery Redlock", "node-redlock", "redsync"]


def m(rows, name, key):
    return med([r[key] for r in rows.get(name, []) if key in r])


def rng(rows, name, key):
    xs = sorted(r[key] for r in rows.get(name, []) if key in r)
    return "%s..%s" % (fmt(xs[0]), fmt(xs[-1])) if len(xs) > 1 else ""


def fmt(x):
    if x != x:
        return "-"
    if abs(x) >= 1000:
        return "%.0f" % x
    if abs(x) >= 100:
        return "%.1f" % x
    if abs(x) >= 1:
        return "%.2f" % x
    return "%.3f" % x


# --- text summary (also the smoke output) -------------------------------------

COLS = {
    "f1": [("pairs_per_s", "pairs/s"), ("p50_us", "p50 us"), ("ratio", "/ limit")],
    "f2": [("p50_us", "p50 us"), ("p99_us", "p99 us"), ("grants_per_s", "grants/s"),
           ("hand_offs", "hand-offs measured"), ("ratio", "p50 / floor p50")],
    "f3": [("p50_us", "p50 us"), ("p99_us", "p99 us"), ("grants_per_s", "grants/s"),
           ("in_order", "in arrival order"), ("hand_offs", "hand-offs measured"),
           ("ratio", "p50 / floor p50")],
    "f4": [("pairs_per_s", "pairs/s"), ("ratio", "/ limit")],
    "f5": [("server_cpu_us_per_lock_s", "server CPU us per lock per s"),
           ("renewals_per_lock_s", "renewals per lock per s"),
           ("calls_per_s", "server calls/s"), ("server_us_per_s", "server us/s"),
           ("server_us_per_renewal", "server us per lock renewal"),
           ("client_cpu_pct", "client CPU %"), ("rss_mb", "client RSS MB"), ("lost", "lost"),
           ("ratio", "us per renewal / PEXPIRE us")],
    "f6": [("pairs_per_s", "pairs/s"), ("p50_us", "p50 us"), ("p99_us", "p99 us"),
           ("ratio", "/ one-server limit")],
    "f7": [("pairs_per_s", "pairs/s"), ("p50_us", "p50 us"), ("ratio", "/ limit")],
}
LIMIT = {
    "f1": ("limit", "1/2 x redis-benchmark -c 1 EVALSHA of hilock's lock script (pairs/s)"),
    "f2": ("floor_p50_us", "hand-off floor p50 us: raw PUBLISH -> subscriber -> one EVALSHA"),
    "f3": ("floor_p50_us", "hand-off floor p50 us: raw PUBLISH -> subscriber -> one EVALSHA"),
    "f4": ("limit", "1/2 x redis-benchmark -c 16 EVALSHA of the lock script on 16 keys (pairs/s)"),
    "f5": ("pexpire_usec", "server us of one pipelined PEXPIRE (the cheapest renewal of one key)"),
    "f6": ("limit", "1/2 x redis-benchmark -c 1 EVALSHA on one of the 5 servers (pairs/s)"),
    "f7": ("limit", "1/2 x redis-benchmark -c 1 EVALSHA of hilock's lock script (pairs/s)"),
}


def table(res, f):
    rows = res.get(f, {})
    cols = COLS[f]
    lk, ltext = LIMIT[f]
    lim = med([r[lk] for rs in rows.values() for r in rs if lk in r])
    out = ["| library | " + " | ".join(c[1] for c in cols) + " | rounds |",
           "|---|" + "---|" * (len(cols) + 1)]
    order = sorted(rows, key=lambda n: (n != HILOCK, not n.startswith("hilock"), n))
    for name in order:
        cells = []
        for key, _ in cols:
            v = fmt(m(rows, name, key))
            r = rng(rows, name, key)
            cells.append(v + (" (%s)" % r if r and key == "ratio" else ""))
        out.append("| %s | %s | %d |" % (name, " | ".join(cells), len(rows[name])))
    out.append("")
    out.append("Limit measured in the same run (median of the slices): %s = **%s**." % (ltext, fmt(lim)))
    return "\n".join(out)


def summary(res):
    lines = []
    for f, title in FIGS.items():
        if res.get(f):
            lines += ["", "== " + title, table(res, f)]
    lines.append("")
    lines.append("load average (1, 5, 15 min): " + "; ".join(
        "%s %.2f %.2f %.2f" % (w, *l) for w, l in res["load"]))
    if res["failures"]:
        lines.append("failures:")
        lines += ["  " + x for x in res["failures"]]
    return "\n".join(lines)


def smoke_problems(res):
    """The smoke run fails when a contender fails or a correctness check fails."""
    p = list(res["failures"])
    want = {"f1": 8, "f2": 8, "f3": 2, "f4": 7, "f5": 2, "f6": 7, "f7": 3}
    for f, n in want.items():
        got = len(res.get(f, {}))
        have_py = any(k == "hilock (Python)" for rs in res.values() if isinstance(rs, dict) for k in rs)
        if not have_py and f in ("f1", "f2", "f4", "f6", "f7"):
            n -= 1
        if got < n:
            p.append("%s: %d of %d contenders produced a result" % (f, got, n))
    for name, rs in res.get("f5", {}).items():
        for r in rs:
            if r["lost"]:
                p.append("watchdog: %s lost %d locks" % (name, r["lost"]))
    return p


# --- goals ----------------------------------------------------------------------

def goals(res):
    g = []
    f1, f2, f4, f5 = (res.get(k, {}) for k in ("f1", "f2", "f4", "f5"))
    h = m(f1, HILOCK, "pairs_per_s")
    best = max(((m(f1, n, "pairs_per_s"), n) for n in f1 if not n.startswith("hilock")),
               default=(float("nan"), "-"))
    r = m(f1, HILOCK, "ratio")
    bp50 = min(((m(f1, n, "p50_us"), n) for n in f1 if not n.startswith("hilock")),
               default=(float("nan"), "-"))
    g.append(("Pairs/s ahead of every peer and >= 0.9 of the limit",
              "hilock %s pairs/s = %s x limit; best peer %s %s pairs/s (p50 per pair: hilock %s us, "
              "lowest peer %s %s us)" % (fmt(h), fmt(r), best[1], fmt(best[0]),
                                          fmt(m(f1, HILOCK, "p50_us")), bp50[1], fmt(bp50[0])),
              h > best[0] and r >= 0.9))
    hp = m(f2, HILOCK, "p50_us")
    pol = [(m(f2, n, "p50_us"), n) for n in POLLING if n in f2]
    worst = min(pol, default=(float("nan"), "-"))
    red = m(f2, "Redisson", "p50_us")
    g.append(("Hand-off p50 >= 10x lower than every polling peer, not behind Redisson",
              "hilock p50 %s us; fastest polling peer %s %s us (%sx); Redisson %s us"
              % (fmt(hp), worst[1], fmt(worst[0]), fmt(worst[0] / hp), fmt(red)),
              worst[0] >= 10 * hp and hp <= red))
    r4 = m(f4, HILOCK, "ratio")
    g.append(("16 threads, distinct keys >= 0.8 of redis-benchmark -c 16",
              "hilock %s x limit" % fmt(r4), r4 >= 0.8))
    hw, rw = m(f5, HILOCK, "server_us_per_renewal"), m(f5, "Redisson", "server_us_per_renewal")
    hcpu = m(f5, HILOCK, "server_cpu_us_per_lock_s")
    rcpu = m(f5, "Redisson", "server_cpu_us_per_lock_s")
    hc, rc = m(f5, HILOCK, "calls_per_lock_s"), m(f5, "Redisson", "calls_per_lock_s")
    lost = sum(r["lost"] for rs in f5.values() for r in rs)
    g.append(("Watchdog: renewal cost per lock per second not above Redisson's, zero lost",
              "server CPU us per lock per s hilock %s vs Redisson %s (commandstats us per renewal "
              "%s vs %s); calls/s per lock %s vs %s; lost %d"
              % (fmt(hcpu), fmt(rcpu), fmt(hw), fmt(rw), fmt(hc), fmt(rc), lost),
              hcpu <= rcpu and lost == 0))
    return g


# --- machine and versions ----------------------------------------------------------

def sh(*argv, cwd=None):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=cwd)
        return (out.stdout + out.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def versions(a):
    v = {}
    v["hilock"] = sh("git", "-C", a.root, "log", "-1", "--format=%h %cd", "--date=short")
    v["redis-server"] = re.sub(r".*v=(\S+).*", r"\1", sh("redis-server", "--version"))
    py = a.venv + "/bin/python"
    pkgs = ["redis", "python-redis-lock", "pottery", "aioredlock", "hiredis", "matplotlib", "hilock"]
    code = ("import importlib.metadata as m\n"
            "for p in %r:\n"
            "    try: print(p, m.version(p))\n"
            "    except Exception: print(p, '-')\n" % pkgs)
    for line in sh(py, "-c", code).splitlines():
        k, _, ver = line.partition(" ")
        v["PyPI " + k] = ver
    v["Python"] = sh(py, "-c", "import sys; print(sys.version.split()[0])")
    for pkg in ("redlock", "ioredis"):
        try:
            with open(os.path.join(a.build, "node/node_modules", pkg, "package.json")) as f:
                v["npm " + pkg] = json.load(f)["version"]
        except OSError:
            v["npm " + pkg] = "-"
    v["node"] = sh("node", "--version")
    pom = open(os.path.join(os.path.dirname(__file__), "java/pom.xml")).read()
    v["Maven org.redisson:redisson"] = re.search(r"<redisson.version>(.*?)<", pom).group(1)
    v["java"] = sh("java", "-version").splitlines()[0]
    gomod = open(os.path.join(os.path.dirname(__file__), "go/go.mod")).read()
    for mod in ("github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9"):
        mm = re.search(re.escape(mod) + r" (\S+)", gomod)
        v["Go " + mod] = mm.group(1) if mm else "-"
    v["go"] = sh("go", "version")
    return v


def machine():
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem = [l for l in open("/proc/meminfo") if l.startswith("MemTotal")][0].split()[1]
    except OSError:
        mem = "0"
    return "%s, %d cores (%s), %.0f GB RAM, %s %s" % (
        platform.node() or "?", os.cpu_count(), model, int(mem) / 1048576, platform.system(),
        platform.release())


# --- plots ---------------------------------------------------------------------------

def bars(plt, res, f, key, title, ylabel, path, limit_key=None):
    rows = res.get(f, {})
    if not rows:
        return None
    names = sorted(rows, key=lambda n: (not n.startswith("hilock"), n))
    vals = [m(rows, n, key) for n in names]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    colors = ["#c0392b" if n.startswith("hilock") else "#7f8c8d" for n in names]
    ax.bar(range(len(names)), vals, color=colors)
    ax.set_xticks(range(len(names)), names, rotation=25, ha="right")
    if limit_key:
        lim = med([r[limit_key] for rs in rows.values() for r in rs if limit_key in r])
        ax.axhline(lim, color="#2c3e50", ls="--", lw=1, label="limit (same run) %s" % fmt(lim))
        ax.legend(loc="upper right")
        for i, n in enumerate(names):
            ax.annotate("%s x" % fmt(m(rows, n, "ratio")), (i, vals[i]), ha="center",
                        va="bottom", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.basename(path)


def cdf(plt, res, f, title, path):
    rows = res.get(f, {})
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name in sorted(rows, key=lambda n: (not n.startswith("hilock"), n)):
        xs = sorted(x for r in rows[name] for x in r.get("samples", []) if x > 0)
        if not xs:
            continue
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.plot(xs, ys, label="%s (p50 %s us)" % (name, fmt(m(rows, name, "p50_us"))),
                lw=2.2 if name.startswith("hilock") else 1.2)
    floor = med([r["floor_p50_us"] for rs in rows.values() for r in rs])
    ax.axvline(floor, color="#2c3e50", ls="--", lw=1, label="floor p50 %s us" % fmt(floor))
    ax.set_xscale("log")
    ax.set_xlabel("unlock call -> next holder's acquire returns (us, log scale)")
    ax.set_ylabel("share of hand-offs")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.basename(path)


def plots(res, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    p = {}
    p["f1"] = bars(plt, res, "f1", "pairs_per_s", FIGS["f1"], "pairs/s", out + "/f1_pairs.png", "limit")
    p["f2"] = cdf(plt, res, "f2", FIGS["f2"], out + "/f2_handoff_cdf.png")
    p["f3"] = cdf(plt, res, "f3", FIGS["f3"], out + "/f3_fair_cdf.png")
    p["f4"] = bars(plt, res, "f4", "pairs_per_s", FIGS["f4"], "aggregate pairs/s",
                   out + "/f4_threads.png", "limit")
    p["f5"] = bars(plt, res, "f5", "server_us_per_renewal", FIGS["f5"] + ": server time per lock renewal",
                   "server us per renewed lock", out + "/f5_watchdog.png", "pexpire_usec")
    p["f6"] = bars(plt, res, "f6", "pairs_per_s", FIGS["f6"], "pairs/s", out + "/f6_redlock.png", "limit")
    p["f7"] = bars(plt, res, "f7", "pairs_per_s", FIGS["f7"], "pairs/s", out + "/f7_asyncio.png", "limit")
    return p


# --- the report ----------------------------------------------------------------------

ABOUT = {
    "f1": "Each library's idiomatic call pair on one free lock, one thread, one connection "
          "(hilock and Redisson: no lease, so the watchdog is armed; the others: a 10 s lease).",
    "f2": "8 processes (one client each) loop acquire / hold 2 ms / release on one lock for 4 s "
          "per slice (the first second dropped: JIT warm-up). After releasing, a process waits "
          "until 4 other grants went by before it asks again, so at every unlock 4 processes are "
          "blocked waiting and none can arrive while the lock is free: every sample is a "
          "hand-off to a blocked waiter (not the releaser barging back, not a newcomer beating "
          "sleeping pollers). Latency: from the holder's unlock *call* to the next holder's "
          "acquire returning (CLOCK_MONOTONIC, system-wide). Waiters wait the "
          "library's own way: hilock, Redisson and python-redis-lock are woken (pub/sub, BLPOP); "
          "redis-py sleeps 0.1 s between tries, node-redlock 200 +- 200 ms, redsync 50-250 ms, "
          "pottery retries in a loop.",
    "f3": "Fair lock (Redisson RFairLock layout): 4 processes x 4 threads queue on one lock, "
          "hold 2 ms, and a releaser re-queues at once (4 s slices, first second dropped). In arrival order = share of hand-offs that went to the "
          "waiter whose acquire call started first among those waiting.",
    "f4": "16 threads (hilock, redis-py, redsync goroutines) or 16 concurrent tasks (Redisson "
          "lockAsync/unlockAsync chains, node-redlock on one pipelining ioredis connection, "
          "redis-py asyncio), each on its own key, 2 s per slice; hilock and redsync get a "
          "pool of 16 connections, Redisson 16.",
    "f5": "10,000 locks taken without a lease and kept by the library's watchdog, lease 3 s "
          "(renewal every 1 s); after one lease of settling, 9 s measured: server commands and "
          "their server time from INFO commandstats deltas, the client process's CPU and RSS, "
          "and at the end every key checked (EXISTS) and every lock's ownership asked of the "
          "library. Only hilock and Redisson have a watchdog (redis-py, pottery, redsync and "
          "redlock 4 extend only when asked; python-redis-lock starts one thread per lock).",
    "f6": "5 independent redis-servers on this machine; each library's Redlock / majority lock "
          "with a 10 s lease; acquire+release pairs, one thread.",
    "f7": "hilock.aio (the asyncio driver on the engine, default event loop), redis-py's "
          "asyncio Lock and aioredlock, one task, against the same limit as figure 1.",
}


def write(res, a, out):
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        if f.endswith(".png"):
            os.remove(os.path.join(out, f))
    p = plots(res, out)
    ver = versions(a)
    lines = ["# hilock vs peer lock libraries", "",
             "Generated by `bench/peers/run.sh` (rounds: %d) on %s; the run took %.0f s."
             % (a.rounds, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), res["elapsed_s"]),
             "Every contender ran against the same throwaway redis-server in the same run, "
             "contenders alternating in short slices, a different one first each round; each "
             "slice's limit was measured just before and just after it (their mean), and every "
             "figure is also given as a ratio to that limit. Values are medians over rounds (ratio ranges in brackets).",
             "", "Machine: " + machine() + ". Load average (1, 5, 15 min) as each figure began: " +
             "; ".join("%s %.2f %.2f %.2f" % (w, *l) for w, l in res["load"]) +
             ". The machine was shared with other engineers' builds and tests: absolute rates "
             "drift, the same-run ratios are what count.", ""]
    lines += ["## Goals for hilock", "", "| goal | measured | met |", "|---|---|---|"]
    for goal, got, ok in goals(res):
        lines.append("| %s | %s | %s |" % (goal, got, "yes" if ok else "**no**"))
    lines += ["", "Why hilock trails where it does, and what each figure does and does not "
              "show: [bench/peers/NOTES.md](../NOTES.md).", ""]
    for f, title in FIGS.items():
        lines += ["## " + title, "", ABOUT[f], ""]
        if res.get(f):
            lines.append(table(res, f))
            if f == "f5":
                lines.append("")
                lines.append("Commands the server ran during the window (last round): " + "; ".join(
                    "%s: %s" % (n, ", ".join("%s %d" % kv for kv in sorted(
                        rs[-1]["commands"].items(), key=lambda kv: -kv[1])[:4]))
                    for n, rs in res[f].items()))
        else:
            lines.append("No results.")
        if p.get(f):
            lines += ["", "![%s](%s)" % (title, p[f])]
        lines.append("")
    if res["failures"]:
        lines += ["## Failures in this run", ""] + ["- " + x for x in res["failures"]] + [""]
    lines += ["## Versions", "", "| component | version |", "|---|---|"]
    lines += ["| %s | %s |" % kv for kv in ver.items()]
    with open(os.path.join(out, "report.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    slim = {k: ({n: [{kk: vv for kk, vv in r.items() if kk != "samples"} for r in rs]
                 for n, rs in v.items()} if isinstance(v, dict) and k.startswith("f") else v)
            for k, v in res.items()}
    slim["versions"] = ver
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump(slim, fh, indent=1)
