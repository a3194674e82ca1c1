"""hilock.Client.from_redis / hilock.aio.Client.from_redis: a configured
redis-py client (real redis-py, real server with requirepass and an ACL
user, a non-zero db) opens a hilock client to the same server with the same
credentials and db: a lock taken through it is seen by redis-py in that db,
and a wrong password is refused as it would be."""
import asyncio

import pytest

import hilock
import hilock.aio
from conftest import RedisServer

redis_py = pytest.importorskip("redis")
import redis.asyncio as redis_aio  # noqa: E402


@pytest.fixture(scope="module")
def auth_server():
    s = RedisServer(password="Pw-from-redis")
    s("ACL", "SETUSER", "alice", "on", ">Al1ce-from-redis", "~*", "&*", "+@all")
    yield s
    s.stop()


def test_blocking_default_user_and_db(auth_server: RedisServer) -> None:
    r = redis_py.Redis(host="127.0.0.1", port=auth_server.port, db=3, password="Pw-from-redis",
                       socket_timeout=2.5, socket_connect_timeout=1.5)
    with hilock.Client.from_redis(r) as c:
        assert "Pw-from-redis" not in repr(c) and "***" in c.url
        assert c.url.endswith(f"127.0.0.1:{auth_server.port}/3")
        with c.lock("fr:lock"):
            assert r.exists("fr:lock") == 1          # the same server and db
            assert redis_py.Redis(port=auth_server.port, password="Pw-from-redis",
                                  db=0).exists("fr:lock") == 0
    r.close()


def test_blocking_acl_user_from_url(auth_server: RedisServer) -> None:
    r = redis_py.Redis.from_url(f"redis://alice:Al1ce-from-redis@127.0.0.1:{auth_server.port}/2")
    with hilock.Client.from_redis(r) as c:
        assert c.url.startswith("redis://alice:***@")
        with c.fair_lock("fr:fair"):
            assert r.hlen("fr:fair") == 1
    bad = redis_py.Redis(host="127.0.0.1", port=auth_server.port, username="alice",
                         password="wrong")
    with pytest.raises(hilock.AuthenticationError):
        hilock.Client.from_redis(bad)
    r.close()
    bad.close()


def test_blocking_keywords_win_and_non_redis_refused(auth_server: RedisServer) -> None:
    r = redis_py.Redis(port=auth_server.port, password="Pw-from-redis")
    with hilock.Client.from_redis(r, watchdog_lease=5.0) as c:
        with c.lock("fr:wd"):
            assert 0 < r.pttl("fr:wd") <= 5000
    with pytest.raises(TypeError):
        hilock.Client.from_redis(object())
    r.close()


def test_aio_acl_user(auth_server: RedisServer) -> None:
    async def main() -> None:
        r = redis_aio.Redis(host="127.0.0.1", port=auth_server.port, db=4, username="alice",
                            password="Al1ce-from-redis")
        async with hilock.aio.Client.from_redis(r) as c:
            assert "Al1ce" not in repr(c)
            async with c.lock("fr:aio"):
                assert await r.exists("fr:aio") == 1
        await r.aclose() if hasattr(r, "aclose") else await r.close()
        bad = redis_aio.Redis(port=auth_server.port, password="wrong")
        with pytest.raises(hilock.AuthenticationError):
            async with hilock.aio.Client.from_redis(bad):
                pass
    asyncio.run(main())
