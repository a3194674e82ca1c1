"""Test harness: throwaway redis-server processes on free loopback ports.

Every server is started by a fixture and always stopped: fixture finalizers,
an atexit hook, and PR_SET_PDEATHSIG (the server dies with the test process
even if pytest is killed). A minimal RESP client (`Redis`) inspects keys
without any third-party package.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Callable, List, Optional

import pytest

# $HILOCK_REDIS_SERVER picks another server binary (valkey-server)
REDIS_SERVER = (os.environ.get("HILOCK_REDIS_SERVER") or shutil.which("redis-server")
                or "/usr/bin/redis-server")
_ALL: List["RedisServer"] = []


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond: Callable[[], Any], timeout: float, what: str = "condition", step: float = 0.005) -> Any:
    """Poll cond() until truthy or timeout seconds pass; fail the test then."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


class RespError(Exception):
    pass


class Redis:
    """A tiny blocking RESP2 client: enough to inspect and poke keys."""

    def __init__(self, port: int, password: Optional[str] = None, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        if password:
            self("AUTH", password)

    def close(self) -> None:
        self.sock.close()

    def __call__(self, *args: Any) -> Any:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        return self._read()

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _read(self) -> Any:
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode()
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RespError(f"bad reply {line!r}")


def _pdeathsig() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class RedisServer:
    def __init__(self, extra: Optional[List[str]] = None, password: Optional[str] = None) -> None:
        self.port = free_port()
        self.password = password
        self.extra = list(extra or [])
        if password:
            self.extra += ["--requirepass", password]
        self.dir = tempfile.mkdtemp(prefix="hilock-py-redis-")
        self.proc: Optional[subprocess.Popen] = None
        _ALL.append(self)
        self.start()

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        # a replica syncs at once through an RDB file (a diskless sync waits 5 s)
        cmd = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--repl-diskless-sync", "no",
               "--dir", self.dir,
               "--daemonize", "no", "--loglevel", "warning", *self.extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=_pdeathsig)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            try:
                r = Redis(self.port, self.password, timeout=1)
                try:
                    if r("PING") == "PONG":
                        return
                finally:
                    r.close()
            except (OSError, RespError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer PING")
            time.sleep(0.01)

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        """kill -9 (no save) and start again, empty, on the same port."""
        self.kill9()
        self.start()

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def cli(self) -> Redis:
        return Redis(self.port, self.password)

    def __call__(self, *args: Any) -> Any:
        """One command on a fresh connection."""
        r = self.cli()
        try:
            return r(*args)
        finally:
            r.close()


@atexit.register
def _stop_all() -> None:
    for s in _ALL:
        s.stop()


@pytest.fixture(scope="session")
def mypy_strict(tmp_path_factory: Any) -> Callable[..., "subprocess.CompletedProcess[str]"]:
    """mypy --strict on some files, its result. The runs of one pytest
    session share one cache (a directory of the session's own): the first
    run reads the standard library's stubs and the installed hilock, the
    later ones reuse them (each run with no cache took 5-20 s)."""
    pytest.importorskip("mypy")
    cache = str(tmp_path_factory.mktemp("mypy-cache"))

    def run(*paths: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", cache,
                               *paths], capture_output=True, text=True, timeout=180)
    return run


@pytest.fixture(scope="session")
def redis() -> Any:
    s = RedisServer()
    yield s
    s.stop()


@pytest.fixture
def own_redis() -> Any:
    """A server of the test's own (to restart, pause, ...)."""
    s = RedisServer()
    yield s
    s.stop()


@pytest.fixture
def client(redis: RedisServer) -> Any:
    import hilock

    c = hilock.Client(redis.url)
    yield c
    c.close()


@pytest.fixture
def name() -> str:
    """A fresh lock name per test."""
    return "test:" + uuid.uuid4().hex[:12]


class ClusterNode(RedisServer):
    """A cluster node: its bus port (port + 10000) must exist and be free too."""

    def start(self) -> None:
        for attempt in range(5):
            # below the ephemeral range, so that no outgoing connection takes the bus port
            while not (10000 <= self.port < 22000 and port_free(self.port)
                       and port_free(self.port + 10000)):
                self.port = random.randrange(10000, 22000)
            try:
                return super().start()
            except RuntimeError:  # lost a race for one of the two ports
                if attempt == 4:
                    raise
                self.port = 0


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
