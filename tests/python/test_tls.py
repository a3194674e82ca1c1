"""TLS from Python against a real redis-server with a TLS port and a
throwaway CA (tests/c/make_certs.sh, openssl): keyword arguments and URL
query parameters, mutual TLS, and the errors of certificates that do not
verify."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse

import pytest

import hilock
from conftest import RedisServer, free_port

ROOT = os.environ.get("HILOCK_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="module")
def certs():
    d = tempfile.mkdtemp(prefix="hilock-pycerts-")
    try:  # removed also when make_certs.sh fails
        subprocess.check_call(["bash", os.path.join(ROOT, "tests", "c", "make_certs.sh"), d])
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _tls_server(certs: str, auth_clients: str = "optional") -> RedisServer:
    for _ in range(5):
        port = free_port()
        try:
            srv = RedisServer(extra=["--tls-port", str(port),
                                     "--tls-cert-file", os.path.join(certs, "server.crt"),
                                     "--tls-key-file", os.path.join(certs, "server.key"),
                                     "--tls-ca-cert-file", os.path.join(certs, "ca.crt"),
                                     "--tls-auth-clients", auth_clients])
        except Exception:  # the port was taken meanwhile: pick another
            continue
        srv.tls_port = port  # type: ignore[attr-defined]
        return srv
    raise RuntimeError("cannot start a TLS redis-server")


@pytest.fixture(scope="module")
def tls_server(certs):
    srv = _tls_server(certs)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def mtls_server(certs):
    srv = _tls_server(certs, "yes")
    yield srv
    srv.stop()


def test_rediss_with_keyword_ca(certs, tls_server):
    url = f"rediss://127.0.0.1:{tls_server.tls_port}/0"
    with hilock.Client(url, tls_ca_file=os.path.join(certs, "ca.crt")) as c:
        with c.lock("py:tls") as lk:
            assert lk.owned()
            assert tls_server("EXISTS", "py:tls") == 1
        assert tls_server("EXISTS", "py:tls") == 0


def test_rediss_with_query_and_percent_encoded_path(certs, tls_server):
    ca = urllib.parse.quote(os.path.join(certs, "ca.crt"), safe="")
    url = f"rediss://localhost:{tls_server.tls_port}/3?tls_ca_file={ca}&connect_timeout_ms=800"
    with hilock.Client(url) as c:
        lk = c.lock("py:tls:q")
        assert lk.acquire(wait=0, lease=5.0)
        lk.release()


def test_wrong_ca_is_a_tls_error_within_the_connect_timeout(certs, tls_server):
    url = f"rediss://127.0.0.1:{tls_server.tls_port}"
    t0 = time.monotonic()
    with pytest.raises(hilock.TLSError) as ei:
        hilock.Client(url, tls_ca_file=os.path.join(certs, "other-ca.crt"), connect_timeout=1.0)
    assert time.monotonic() - t0 < 1.5
    assert "certificate" in str(ei.value)
    assert isinstance(ei.value, hilock.ConnectionError)
    assert ei.value.code == -11
    # the test-only escape hatch accepts it
    with hilock.Client(url, tls_ca_file=os.path.join(certs, "other-ca.crt"), tls_insecure=True):
        pass


def test_wrong_server_name(certs, tls_server):
    url = f"rediss://127.0.0.1:{tls_server.tls_port}"
    with pytest.raises(hilock.TLSError):
        hilock.Client(url, tls_ca_file=os.path.join(certs, "ca.crt"),
                      tls_server_name="redis.example.org")
    with hilock.Client(url, tls_ca_file=os.path.join(certs, "ca.crt"), tls_server_name="localhost"):
        pass


def test_plain_client_to_tls_port(tls_server):
    with pytest.raises(hilock.ConnectionError) as ei:
        hilock.Client(f"redis://127.0.0.1:{tls_server.tls_port}", connect_timeout=1.0)
    assert "rediss://" in str(ei.value)


def test_mutual_tls(certs, mtls_server):
    url = f"rediss://127.0.0.1:{mtls_server.tls_port}"
    ca = os.path.join(certs, "ca.crt")
    with pytest.raises(hilock.TLSError):
        hilock.Client(url, tls_ca_file=ca)
    with hilock.Client(url, tls_ca_file=ca, tls_cert_file=os.path.join(certs, "client.crt"),
                       tls_key_file=os.path.join(certs, "client.key")) as c:
        with c.lock("py:mtls"):
            assert mtls_server("EXISTS", "py:mtls") == 1


def test_tls_settings_without_tls_are_refused(certs, tls_server):
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(tls_server.url, tls_ca_file=os.path.join(certs, "ca.crt"))
    with pytest.raises(TypeError):
        hilock.Client(tls_server.url, tls_ca_file=3)  # type: ignore[arg-type]
    # tls=True turns TLS on for a redis:// URL
    with hilock.Client(f"redis://127.0.0.1:{tls_server.tls_port}", tls=True,
                       tls_ca_file=os.path.join(certs, "ca.crt")):
        pass


def test_aio_rediss_and_mutual_tls(certs, tls_server, mtls_server):
    """hilock.aio over TLS: verified against the CA, mutual TLS with a client
    certificate, and a server whose certificate does not verify refused."""
    import asyncio
    import hilock.aio as aio

    ca = os.path.join(certs, "ca.crt")

    async def main() -> None:
        url = f"rediss://127.0.0.1:{tls_server.tls_port}/0"
        async with aio.Client(url, tls_ca_file=ca) as c:
            lk = c.lock("py:aio:tls")
            assert await lk.acquire(0)
            assert tls_server("EXISTS", "py:aio:tls") == 1
            w = asyncio.create_task(c.lock("py:aio:tls").acquire(5))  # another task waits
            await asyncio.sleep(0.1)
            await lk.release()
            assert await w  # woken over the TLS pub/sub connection
        murl = f"rediss://127.0.0.1:{mtls_server.tls_port}/0"
        async with aio.Client(murl, tls_ca_file=ca, tls_cert_file=os.path.join(certs, "client.crt"),
                              tls_key_file=os.path.join(certs, "client.key")) as c:
            assert await c.lock("py:aio:mtls").acquire(0, lease=5)
        with pytest.raises(hilock.ConnectionError):  # no client certificate
            await aio.connect(murl, tls_ca_file=ca, connect_timeout=1)
        with pytest.raises(hilock.TLSError):  # the system CAs do not know ours
            await aio.connect(url, connect_timeout=1)

    asyncio.run(main())
