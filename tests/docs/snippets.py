#!/usr/bin/env python3
"""Run every fenced code block of README.md and docs/*.md (suite docs).

Called by tests/docs/run.sh, which builds what is needed, starts a throwaway
redis-server and passes its port. Each block runs in a fresh working
directory, after FLUSHALL, with 127.0.0.1:6379 replaced by the test server's
address. docs/testing.md ("The documentation's code blocks") describes the
fences and the markers:

    <!-- snippet: skip REASON -->       not run, counted as skipped
    <!-- snippet: setup SHELL -->       SHELL runs first in the working directory
    <!-- snippet: with FRAME -->        the block goes into tests/docs/frames/FRAME.*
    <!-- snippet: only INTERP... -->    run on these interpreters only
    <!-- snippet: request PATH -->      nginx: GET PATH must answer 200

Usage: snippets.py --root R --build B --port P --python 3.9=/path/python ...
                   [--only FILE_SUBSTRING] [--list]
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SAMPLES = {"text", "json", "dot", "console", "output"}
RUNS = {"python", "c", "lua", "sh", "nginx", "redis"}
TIMEOUT = 120  # per command; generous: a loaded machine (load 30) slows every step
MARK = re.compile(r"^\s*<!--\s*snippet:\s*(\w+)\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w+-]*)\s*$")


class Block:
    def __init__(self, path, line, lang, body, marks):
        self.path, self.line, self.lang, self.body, self.marks = path, line, lang, body, marks

    def where(self):
        return f"{self.path}:{self.line}"


LIST = re.compile(r"^\s*([-*+]|\d+[.)])\s")


def parse(path):
    """Fenced blocks of a markdown file with the snippet marks on the lines
    just before each (blank lines between marks and fence are allowed).
    An indented code block (4 spaces after a blank line that follows a
    paragraph, heading or table, not a list) comes back with lang
    "(indented)": the suite asks for it to be fenced."""
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, marks, i = [], {}, 0
    last = ""  # the last non-blank line outside blocks
    while i < len(lines):
        if (lines[i].startswith("    ") and lines[i].strip() and i > 0 and not lines[i - 1].strip()
                and last and not last.startswith((" ", "\t")) and not LIST.match(last)
                and not MARK.match(last)):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            blocks.append(Block(path, i + 1, "(indented)", "\n".join(lines[i:j]) + "\n", {}))
            marks, i = {}, j
            continue
        m = MARK.match(lines[i])
        if m:
            key, val = m.group(1), m.group(2)
            marks[key] = (marks[key] + "; " + val) if key == "setup" and key in marks else val
            i += 1
            continue
        f = FENCE.match(lines[i])
        if f:
            indent, ticks, lang = f.group(1), f.group(2), f.group(3)
            j = i + 1
            while j < len(lines) and lines[j].strip() != ticks:
                j += 1
            body = "\n".join(l[len(indent):] if l.startswith(indent) else l
                             for l in lines[i + 1:j]) + "\n"
            blocks.append(Block(path, i + 1, lang, body, marks))
            marks, i, last = {}, j + 1, ""
            continue
        if lines[i].strip():
            marks = {}  # marks belong to the fence right after them
            last = lines[i]
        i += 1
    return blocks


def frame(root, name, body):
    """The block put into tests/docs/frames/NAME.* at its @BLOCK@ line (the
    line's indentation is added to every line of the block)."""
    cands = glob.glob(os.path.join(root, "tests", "docs", "frames", name + ".*"))
    if len(cands) != 1:
        raise RuntimeError(f"no frame {name!r} in tests/docs/frames")
    out = []
    for l in open(cands[0], encoding="utf-8").read().split("\n"):
        s = l.lstrip()
        if s == "@BLOCK@":
            ind = l[:len(l) - len(s)]
            out.extend(ind + b if b else b for b in body.rstrip("\n").split("\n"))
        else:
            out.append(l)
    return "\n".join(out)


def run(cmd, cwd, env, timeout=TIMEOUT, inp=None):
    """(rc, output); rc None on timeout. The command's process group is
    killed after it, so nothing it started is left."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.PIPE if inp is not None else subprocess.DEVNULL,
                         start_new_session=True, text=True)
    try:
        out, _ = p.communicate(inp, timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc = None
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return rc, out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Runner:
    def __init__(self, a):
        self.root, self.build, self.port = a.root, a.build, a.port
        self.pythons = [p.split("=", 1) for p in a.python]
        self.url = f"redis://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env["HILOCK_URL"] = self.url
        env["PATH"] = os.path.join(self.build, "cli") + os.pathsep + env.get("PATH", "")
        self.env = env

    # -- helpers
    def flush(self):
        subprocess.run(["redis-cli", "-p", str(self.port), "FLUSHALL"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10)

    def text(self, b):
        return b.body.replace("127.0.0.1:6379", f"127.0.0.1:{self.port}")

    def source(self, b):
        t = b.body
        if "with" in b.marks:
            t = frame(self.root, b.marks["with"], t)
        return t.replace("127.0.0.1:6379", f"127.0.0.1:{self.port}")

    def interps(self, b, all_):
        only = b.marks.get("only")
        if not only:
            return all_
        want = only.split()
        chosen = [x for x in all_ if x[0] in want]
        if not chosen:
            raise RuntimeError(f"only {only!r}: none of these here ({', '.join(x[0] for x in all_)})")
        return chosen

    # -- one block: a list of (label, ok, output)
    def block(self, b, work):
        unknown = set(b.marks) - {"skip", "setup", "with", "only", "request"}
        if unknown:
            return [("marks", False, f"unknown snippet mark(s): {', '.join(sorted(unknown))}")]
        if "setup" in b.marks:
            rc, out = run(["bash", "-e", "-c", b.marks["setup"]], work, self.env)
            if rc != 0:
                return [("setup", False, out)]
        return getattr(self, "run_" + b.lang)(b, work)

    def run_python(self, b, work):
        path = os.path.join(work, "snippet.py")
        open(path, "w").write(self.source(b))
        res = []
        for ver, exe in self.interps(b, self.pythons):
            self.flush()
            rc, out = run([exe, path], work, self.env)
            res.append((f"python {ver}", rc == 0, out))
        return res

    def run_c(self, b, work):
        src = self.source(b)
        path = os.path.join(work, "snippet.c")
        open(path, "w").write(src)
        inc = ["-I", os.path.join(self.root, "libcore", "include")]
        if b.marks.get("with") == "c-decl":  # declarations: compiled, not linked
            rc, out = run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", *inc, "-c", path,
                           "-o", os.path.join(work, "snippet.o")], work, self.env)
            return [("cc -c", rc == 0, out)]
        lib = os.path.join(self.build, "libcore")
        rc, out = run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", *inc,
                       path, "-o", os.path.join(work, "snippet"), "-L" + lib, "-lhilock",
                       "-Wl,-rpath," + lib, "-pthread"], work, self.env)
        if rc != 0:
            return [("cc", False, out)]
        rc, out = run([os.path.join(work, "snippet")], work, self.env)
        return [("run", rc == 0, out)]

    def run_lua(self, b, work):
        if b.marks.get("with", "").startswith("resty"):
            return self.nginx(b, work, lua=True)
        path = os.path.join(work, "snippet.lua")
        open(path, "w").write(self.source(b))
        res = []
        lua = [("lua5.4", "lua5.4", "5.4"), ("luajit", "luajit", "luajit")]
        for name, exe, d in self.interps(b, lua):
            self.flush()
            env = dict(self.env)
            env["LUA_CPATH"] = os.path.join(self.build, "lua", d, "?.so")
            env["LUA_PATH"] = os.path.join(self.root, "lua", "?.lua") + ";;"
            rc, out = run([exe, path], work, env)
            res.append((name, rc == 0, out))
        return res

    def run_sh(self, b, work):
        path = os.path.join(work, "snippet.sh")
        open(path, "w").write(self.source(b))
        rc, out = run(["bash", "-e", "-o", "pipefail", path], work, self.env)
        return [("bash", rc == 0, out)]

    def run_redis(self, b, work):
        res = []
        for line in self.text(b).split("\n"):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            rc, out = run(["redis-cli", "-p", str(self.port), *shlex.split(line)], work, self.env)
            ok = rc == 0 and not re.match(r"^(\(error\)|ERR|WRONGTYPE|NOPERM)", out.strip())
            res.append((f"redis-cli {line.split()[0]}", ok, out))
        return res

    def run_nginx(self, b, work):
        return self.nginx(b, work, lua=False)

    def nginx(self, b, work, lua):
        """An nginx with the lua module: an nginx block goes into http { }
        (with the luarocks paths and `listen 8080` made the test's); a lua
        block with a resty frame is the content of /snippet."""
        port = free_port()
        luapath = os.path.join(self.root, "lua", "?.lua")
        cpath = os.path.join(self.build, "lua", "luajit", "?.so")
        if lua:
            open(os.path.join(work, "snippet.lua"), "w").write(self.source(b))
            http = (f'lua_package_path "{luapath};;";\nlua_package_cpath "{cpath};;";\n'
                    f"lua_socket_log_errors off;\n"
                    f"server {{ listen 127.0.0.1:{port};\n"
                    f"  location = /snippet {{ content_by_lua_file {work}/snippet.lua; }} }}\n")
            request = "/snippet"
        else:
            http = self.source(b)
            for a, r in (("/usr/local/share/lua/5.1/?.lua", luapath), ("/usr/local/lib/lua/5.1/?.so", cpath),
                         ("/path/to/hilock/lua/?.lua", luapath), ("/path/to/build/lua/luajit/?.so", cpath)):
                http = http.replace(a, r)
            http = re.sub(r"\blisten\s+8080\s*;", f"listen 127.0.0.1:{port};", http)
            request = b.marks.get("request")
        conf = "\n".join([
            "load_module /usr/lib/nginx/modules/ndk_http_module.so;",
            "load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;",
            "worker_processes 1;", "daemon off;", f"pid {work}/nginx.pid;",
            f"error_log {work}/error.log warn;", "events { worker_connections 64; }",
            "http {", "access_log off;",
            *(f"{d}_temp_path {work}/{d};" for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")),
            http, "}", ""])
        cpath_ = os.path.join(work, "nginx.conf")
        open(cpath_, "w").write(conf)
        if not request:  # a fragment: the configuration must be valid
            rc, out = run(["nginx", "-t", "-p", work, "-c", cpath_, "-e", f"{work}/error.log"], work, self.env)
            return [("nginx -t", rc == 0, out)]
        self.flush()
        p = subprocess.Popen(["nginx", "-p", work, "-c", cpath_, "-e", f"{work}/error.log"], cwd=work,
                             stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            status, body = None, ""
            end = time.monotonic() + 30  # nginx up and answering
            while time.monotonic() < end and p.poll() is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{request}", timeout=TIMEOUT) as r:
                        status, body = r.status, r.read().decode(errors="replace")
                    break
                except urllib.error.HTTPError as e:
                    status, body = e.code, e.read().decode(errors="replace")
                    break
                except OSError:
                    time.sleep(0.05)
        finally:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log = open(os.path.join(work, "error.log")).read() if os.path.exists(os.path.join(work, "error.log")) else ""
        errors = [l for l in log.split("\n") if re.search(r"\[(error|crit|alert|emerg)\]", l)]
        ok = status == 200 and not errors
        return [(f"nginx GET {request}", ok, f"status {status}\n{body}" + "\n".join(errors))]


def words_before_first_example(path):
    """Words of README.md before its first lock example: the first block
    in C, Python, Lua or nginx that runs (the HTML comments not counted)."""
    n = 0
    for b in parse(path):
        if b.lang in ("c", "python", "lua", "nginx") and "skip" not in b.marks:
            stop = b.line
            break
    else:
        return None
    for l in open(path, encoding="utf-8").read().split("\n")[:stop - 1]:
        n += len(re.sub(r"<!--.*?-->", "", l).split())
    return n


def figures_without_source(path):
    """Bullets of README.md's "## Performance" section that give a figure
    but name no source (the committed report or docs/benchmarks.md)."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^## Performance\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not m:
        return ["no '## Performance' section"]
    bullets = re.split(r"^- ", m.group(1), flags=re.M)[1:]
    return [b.split("\n")[0][:60] for b in bullets
            if re.search(r"\d", b) and not re.search(r"report|benchmarks\.md", b)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--python", action="append", default=[], help="VERSION=EXECUTABLE")
    ap.add_argument("--only", default="", help="run only files whose path contains this")
    ap.add_argument("--list", action="store_true", help="list the blocks and what happens to each")
    a = ap.parse_args()
    files = [os.path.join(a.root, "README.md")] + sorted(glob.glob(os.path.join(a.root, "docs", "*.md")))
    files = [f for f in files if a.only in os.path.relpath(f, a.root)]
    runner = Runner(a)
    total_run = total_skip = total_fail = 0
    failed = []
    for f in files:
        rel = os.path.relpath(f, a.root)
        ran = skipped = fails = 0
        for b in parse(f):
            b.path = rel
            if "skip" in b.marks:
                if not b.marks["skip"]:
                    print(f"  FAIL  {b.where()}: 'snippet: skip' without a reason")
                    fails += 1
                    failed.append(b.where())
                    continue
                skipped += 1
                if a.list:
                    print(f"  skip  {b.where()} [{b.lang}] {b.marks['skip']}")
                continue
            if b.lang in SAMPLES:
                skipped += 1
                if a.list:
                    print(f"  skip  {b.where()} [{b.lang}] a sample, not run")
                continue
            if b.lang == "(indented)":
                print(f"  FAIL  {b.where()}: an indented code block: fence it (```sh, ```text, ...) "
                      f"so that this suite runs or counts it")
                fails += 1
                failed.append(b.where())
                continue
            if b.lang not in RUNS:
                print(f"  FAIL  {b.where()}: fence {b.lang or '(none)'!r}: say what it is "
                      f"({', '.join(sorted(RUNS | SAMPLES))}) or mark it <!-- snippet: skip REASON -->")
                fails += 1
                failed.append(b.where())
                continue
            if a.list:
                print(f"  run   {b.where()} [{b.lang}] {b.marks}")
                ran += 1
                continue
            work = tempfile.mkdtemp(prefix="hilock-docs.")
            os.chmod(work, 0o755)  # nginx's workers (nobody) read the block there
            t0 = time.monotonic()
            try:
                results = runner.block(b, work)
            except Exception as e:  # a broken mark or frame fails the block
                results = [("runner", False, f"{type(e).__name__}: {e}")]
            finally:
                shutil.rmtree(work, ignore_errors=True)
            ms = (time.monotonic() - t0) * 1000
            ok = all(r[1] for r in results)
            ran += 1
            labels = ", ".join(r[0] for r in results)
            if ok:
                print(f"  ok    {b.where()} [{b.lang}] {labels} ({ms:.0f} ms)")
            else:
                fails += 1
                failed.append(b.where())
                print(f"  FAIL  {b.where()} [{b.lang}] ({ms:.0f} ms)")
                for label, good, out in results:
                    if not good:
                        print(f"        {label}:")
                        for l in out.rstrip().split("\n")[-25:]:
                            print(f"          {l}")
        print(f"{rel}: {ran} run, {skipped} skipped, {fails} failed")
        total_run += ran
        total_skip += skipped
        total_fail += fails
    readme = os.path.join(a.root, "README.md")
    if not a.only or a.only in "README.md":
        w = words_before_first_example(readme)
        if w is None or w > 300:
            print(f"  FAIL  README.md: {w} words before the first lock example (at most 300)")
            total_fail += 1
            failed.append("README.md words")
        else:
            print(f"  ok    README.md: {w} words before the first lock example (at most 300)")
        bad = figures_without_source(readme)
        if bad:
            for b in bad:
                print(f"  FAIL  README.md Performance: a figure without its source: {b}")
            total_fail += 1
            failed.append("README.md figures")
        else:
            print("  ok    README.md: every figure under Performance names its source")
    print(f"docs: {total_run} blocks run, {total_skip} skipped, {total_fail} failed"
          + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if total_fail else 0


if __name__ == "__main__":
    sys.exit(main())
