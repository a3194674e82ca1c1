"""Issue 18's figure 7 without the whole peer benchmark: hilock.aio, redis-py's
asyncio Lock and aioredlock, one task each, uncontended acquire+release pairs
on one throwaway redis-server, in alternating rounds (bench/peers/contender.py
drives each library exactly as bench/peers/run.sh does).

Run (after bash tests/python/deps.sh + install, and bench/peers/deps.sh for
aioredlock):  build/venv/bin/python bench/aio/f7.py [rounds]
"""
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTENDER = os.path.join(ROOT, "bench", "peers", "contender.py")
VENV = os.path.join(ROOT, "build", "venv", "bin", "python")         # hilock, redis-py
PEERS = os.path.join(ROOT, "build", "peers", "venv", "bin", "python")  # aioredlock


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    port = free_port()
    d = tempfile.mkdtemp(prefix="hilock-f7-")
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", "--dir", d],
                           stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        url = "redis://127.0.0.1:%d" % port
        libs = {"hilock (asyncio)": (VENV, "hilock-aio"),
                "redis-py asyncio Lock": (VENV, "redis-py-asyncio"),
                "aioredlock": (PEERS, "aioredlock")}
        res = {k: [] for k in libs}
        for r in range(rounds):
            for k, (py, lib) in libs.items():
                out = subprocess.run([py, CONTENDER, lib, "pairs", "url=" + url,
                                      "key=f7:%s:%d" % (lib, r), "n=1500", "warm=100"],
                                     capture_output=True, text=True, timeout=120)
                lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
                if not lines:
                    print(k, "failed:", out.stderr[-300:])
                    continue
                got = json.loads(lines[-1])
                res[k].append((got["pairs_per_s"], got["p50_us"]))
            print("round %d: %s" % (r + 1, ", ".join("%s %.0f" % (k, v[-1][0])
                                                    for k, v in res.items() if v)))
        for k, v in res.items():
            if v:
                print("%-24s median pairs/s %7.0f   p50 %6.1f us" % (
                    k, statistics.median(x for x, _ in v), statistics.median(y for _, y in v)))
    finally:
        srv.terminate()
        srv.wait(10)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
