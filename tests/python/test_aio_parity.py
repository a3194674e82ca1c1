"""Parity: hilock.aio's locks take the same arguments as hilock's blocking
ones and mean the same by them (docs/python.md, "Each call in each
binding"). Every case runs on both against one real redis-server and the
outcomes (result, or exception type) must be equal, and equal to the
expected one.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

import hilock
import hilock.aio as aio
from conftest import RedisServer


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    s = RedisServer()
    yield s
    s.stop()


def outcome(f: Callable[[], Any]) -> Any:
    try:
        return f()
    except Exception as e:  # the type is the outcome
        return type(e)


# (args, kwargs) of acquire -> expected outcome when the lock is free / when
# another client holds it (fixed lease), whatever the binding
CASES: Dict[str, Tuple[Tuple[Any, ...], Dict[str, Any], Any, Any]] = {
    "blocking=False": ((), {"blocking": False}, True, False),
    "False": ((False,), {}, True, False),
    "timeout=0.2": ((), {"timeout": 0.2}, True, False),
    "True, 0.2": ((True, 0.2), {}, True, False),
    "blocking=True, timeout=0.2": ((), {"blocking": True, "timeout": 0.2}, True, False),
    "wait=0": ((0,), {}, True, False),
    "wait=0.2, lease=5": ((0.2, 5), {}, True, False),
    "blocking=False, timeout=1": ((), {"blocking": False, "timeout": 1}, ValueError,
                                  ValueError),
    "timeout=-5": ((), {"timeout": -5}, ValueError, ValueError),
    "wait=1, blocking=True": ((1,), {"blocking": True}, TypeError, TypeError),
    "False, blocking=True": ((False,), {"blocking": True}, TypeError, TypeError),
    "timeout='1'": ((), {"timeout": "1"}, TypeError, TypeError),
}


@pytest.mark.parametrize("held", [False, True], ids=["free", "held-elsewhere"])
@pytest.mark.parametrize("multi", [False, True], ids=["Lock", "MultiLock"])
@pytest.mark.parametrize("case", list(CASES))
def test_acquire_spellings_mean_the_same(server: RedisServer, case: str, multi: bool,
                                         held: bool) -> None:
    args, kwargs, free_want, held_want = CASES[case]
    want = held_want if held else free_want
    name = "parity-" + uuid.uuid4().hex[:8]
    other = hilock.Client(server.url)
    try:
        if held:
            assert other.lock(name).acquire(0, 30)

        # blocking
        with hilock.Client(server.url) as c:
            lk = c.lock(name)
            obj: Any = hilock.MultiLock([lk]) if multi else lk
            t0 = time.monotonic()
            got_blocking = outcome(lambda: obj.acquire(*args, **kwargs))
            waited_blocking = time.monotonic() - t0
            if got_blocking is True:
                obj.release()

        # asyncio
        async def main() -> Tuple[Any, float]:
            c = await aio.connect(server.url)
            try:
                lk = c.lock(name)
                obj: Any = aio.MultiLock([lk]) if multi else lk
                t0 = time.monotonic()
                try:
                    got: Any = await obj.acquire(*args, **kwargs)
                except Exception as e:
                    got = type(e)
                waited = time.monotonic() - t0
                if got is True:
                    await obj.release()
                return got, waited
            finally:
                await c.close()
        got_aio, waited_aio = asyncio.run(main())
    finally:
        other.close()
    assert (got_blocking, got_aio) == (want, want), (
        f"acquire({case}) on a {'held' if held else 'free'} "
        f"{'MultiLock' if multi else 'Lock'}: blocking {got_blocking}, asyncio {got_aio}, "
        f"expected {want}")
    if held and want is False and "0.2" in case:
        # a timeout of 0.2 s waited for it on both (not a single try)
        assert waited_blocking >= 0.19 and waited_aio >= 0.19, (waited_blocking, waited_aio)


@pytest.mark.parametrize("side", ["read", "write"])
def test_extend_of_a_read_write_side_refused_on_both(server: RedisServer, side: str) -> None:
    name = "parity-rw-" + uuid.uuid4().hex[:8]
    with hilock.Client(server.url) as c:
        rw = c.read_write_lock(name)
        lk = rw.read_lock() if side == "read" else rw.write_lock()
        assert lk.acquire(0, 30)
        got_blocking = outcome(lambda: lk.extend(5))
        lk.release()

    async def main() -> Any:
        c = await aio.connect(server.url)
        try:
            rw = c.read_write_lock(name)
            lk = rw.read_lock() if side == "read" else rw.write_lock()
            assert await lk.acquire(0, 30)
            try:
                await lk.extend(5)
                got: Any = None
            except Exception as e:
                got = type(e)
            await lk.release()
            return got
        finally:
            await c.close()
    assert (got_blocking, asyncio.run(main())) == (hilock.InvalidArgument,
                                                    hilock.InvalidArgument)


def test_semaphore_bounds_are_the_engines_on_both(server: RedisServer) -> None:
    """Counts within +-999999999999999 (the engine's HL_SEM_COUNT_MAX),
    permits per call 1..2147483647, on both Python bindings (and, in
    tests/openresty (e7) and tests/lua, on the Lua ones): the same calls
    succeed and the same are refused (InvalidArgument)."""
    name = "parity-sem-" + uuid.uuid4().hex[:8]
    calls = [("add_permits", 10 ** 12), ("add_permits", 10 ** 15), ("set_permits", 10 ** 15 - 1),
             ("set_permits", 10 ** 15), ("add_permits", -(10 ** 15 - 1)), ("set_permits", -1),
             ("acquire", 2 ** 31), ("acquire", 0)]
    want = [None, hilock.InvalidArgument, None, hilock.InvalidArgument, None,
            hilock.InvalidArgument, hilock.InvalidArgument, hilock.InvalidArgument]
    with hilock.Client(server.url) as c:
        s = c.semaphore(name + ":b")
        assert s.try_set_permits(1)
        got_blocking = [outcome(lambda: getattr(s, m)(v)) for m, v in calls]

    async def main() -> List[Any]:
        c = await aio.connect(server.url)
        try:
            s = c.semaphore(name + ":a")
            assert await s.try_set_permits(1)
            out: List[Any] = []
            for m, v in calls:
                try:
                    out.append(await getattr(s, m)(v))
                except Exception as e:
                    out.append(type(e))
            return out
        finally:
            await c.close()
    got_aio = asyncio.run(main())
    assert got_blocking == want, got_blocking
    assert got_aio == want, got_aio
