"""Every exception type, raised by a real situation against real servers."""

from __future__ import annotations

import builtins
import socket
import threading

import pytest

import hilock
from conftest import RedisServer, free_port


def test_hierarchy() -> None:
    for cls in (hilock.InvalidArgument, hilock.LockTimeout, hilock.NotOwnerError,
                hilock.LockLostError, hilock.ConnectionError, hilock.AuthenticationError,
                hilock.ProtocolError, hilock.WrongTypeError, hilock.OutOfMemoryError,
                hilock.ClosedError):
        assert issubclass(cls, hilock.Error)
    assert issubclass(hilock.ConnectionError, builtins.ConnectionError)
    assert issubclass(hilock.InvalidArgument, ValueError)
    assert issubclass(hilock.AuthenticationError, hilock.ConnectionError)
    assert issubclass(hilock.OutOfMemoryError, MemoryError)
    # every C code has a class and a C description
    from hilock import _errors

    for code in range(-1, -13, -1):
        assert _errors.CODES[code].code == code
        assert hilock.strerror(code)
    assert _errors.from_code(-99, "x").code == -99


def test_invalid_argument_url() -> None:
    with pytest.raises(hilock.InvalidArgument) as ei:
        hilock.Client("http://127.0.0.1:6379")
    assert ei.value.code == -1 and ei.value.detail  # the C detail text


def test_invalid_argument_name(client: hilock.Client) -> None:
    with pytest.raises(ValueError):
        client.lock("")
    with pytest.raises(hilock.InvalidArgument):
        client.lock("x" * 5000)


def test_connection_refused() -> None:
    port = free_port()
    with pytest.raises(ConnectionError) as ei:  # the builtin catches it too
        hilock.Client(f"redis://127.0.0.1:{port}", connect_timeout=0.5)
    assert isinstance(ei.value, hilock.ConnectionError)
    assert ei.value.code == -5 and str(port) in str(ei.value)


def test_connection_error_on_command_timeout(own_redis: RedisServer) -> None:
    with hilock.Client(own_redis.url, command_timeout=0.2, connect_timeout=0.2) as c:
        lock = c.lock("paused")
        own_redis.pause()  # the server hangs: the command times out
        try:
            with pytest.raises(hilock.ConnectionError):
                lock.acquire(wait=0)
        finally:
            own_redis.resume()
        assert lock.acquire(wait=2)
        lock.release()


def test_connection_error_when_server_gone(own_redis: RedisServer) -> None:
    with hilock.Client(own_redis.url, command_timeout=0.3, connect_timeout=0.3) as c:
        lock = c.lock("gone")
        own_redis.kill9()
        with pytest.raises(hilock.ConnectionError):
            lock.locked()


def test_authentication_error() -> None:
    s = RedisServer(password="s3cret")
    try:
        with pytest.raises(hilock.AuthenticationError) as ei:
            hilock.Client(f"redis://:wrong@127.0.0.1:{s.port}")
        assert ei.value.code == -7
        with pytest.raises(hilock.AuthenticationError):
            hilock.Client(f"redis://127.0.0.1:{s.port}")  # no password
        with hilock.Client(s.url) as c:
            assert c.lock("a").acquire(wait=0, lease=5)
    finally:
        s.stop()


def test_wrong_type(client: hilock.Client, redis: RedisServer, name: str) -> None:
    redis("SET", name, "not a lock")
    with pytest.raises(hilock.WrongTypeError) as ei:
        client.lock(name).acquire(wait=0)
    assert isinstance(ei.value, hilock.ProtocolError) and ei.value.code == -8
    redis("DEL", name)


def test_protocol_error_from_server_error(own_redis: RedisServer, name: str) -> None:
    """A server that refuses scripts answers with an error reply: EPROTO."""
    with hilock.Client(own_redis.url) as c:
        lock = c.lock(name)
        own_redis("CONFIG", "SET", "maxmemory", "1")  # writes are refused (OOM)
        own_redis("CONFIG", "SET", "maxmemory-policy", "noeviction")
        try:
            with pytest.raises(hilock.ProtocolError) as ei:
                lock.acquire(wait=0)
            assert ei.value.code == -6 and ei.value.detail
        finally:
            own_redis("CONFIG", "SET", "maxmemory", "0")


def test_protocol_error_from_garbage_server() -> None:
    """Something that is not Redis on the port: the open fails cleanly."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.recv(1024)
                    conn.sendall(b"+HELLO I AM NOT REDIS\r\n")
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        # The open may not send a command that tells (no AUTH/SELECT needed);
        # the first lock command gets an answer that is not a lock reply.
        with pytest.raises(hilock.ProtocolError) as ei:
            with hilock.Client(f"redis://127.0.0.1:{port}", connect_timeout=0.5,
                               command_timeout=0.5) as c:
                c.lock("x").acquire(wait=0)
        assert ei.value.code == -6
    finally:
        stop.set()
        t.join()
        srv.close()


def test_closed_error(redis: RedisServer, name: str) -> None:
    c = hilock.Client(redis.url)
    lock = c.lock(name)
    c.close()
    with pytest.raises(hilock.ClosedError) as ei:
        lock.acquire(wait=0)
    assert ei.value.code == -10


def test_lock_timeout_and_not_owner_and_lost(client: hilock.Client, redis: RedisServer,
                                             name: str) -> None:
    with hilock.Client(redis.url) as c2:
        assert c2.lock(name).acquire()
        with pytest.raises(hilock.LockTimeout):
            with client.lock(name, wait=0.05):
                pass
        with pytest.raises(hilock.NotOwnerError):
            client.lock(name).release()
        c2.lock(name).release()
    with pytest.raises(hilock.LockLostError):
        with client.lock(name, lease=0.1):
            redis("DEL", name)


def test_out_of_memory_class_is_reachable() -> None:
    """HILOCK_ENOMEM cannot be provoked safely in-process; check the mapping
    the SWIG layer uses."""
    from hilock import _errors

    e = _errors.from_code(-9, "malloc failed")
    assert isinstance(e, hilock.OutOfMemoryError) and isinstance(e, MemoryError)
    assert "malloc failed" in str(e)


def test_exception_carries_its_own_threads_message(client: hilock.Client, name: str) -> None:
    """Threads failing at once on one shared lock handle: each exception
    names its own owner (the C library keeps error messages per thread)."""
    wrong: list = []
    barrier = threading.Barrier(4)

    def run(tid: int) -> None:
        lock = client.lock(name, thread_id=tid)  # same C handle, own owner
        barrier.wait()
        for _ in range(300):
            try:
                lock.release()
            except hilock.NotOwnerError as e:
                if not str(e).endswith(f":{tid}"):
                    wrong.append((tid, str(e)))
            else:
                wrong.append((tid, "released a lock it did not hold"))

    threads = [threading.Thread(target=run, args=(50001 + i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
