"""hilock.aio's semaphore, permit-expirable semaphore and count-down latch
(Redisson's RSemaphore, RPermitExpirableSemaphore and RCountDownLatch
layouts), on the same engine as hilock.Semaphore & co.

    sem = client.semaphore("jobs")
    await sem.try_set_permits(4)
    async with sem:                  # one permit, waiting as long as it takes
        ...

A driver like hilock/aio.py: the engine (``hilock._engine.SemNames``, over
libcore's proto_sem.c) says what to send, what each answer means, when to
listen, for how long to sleep and how a lost answer is settled; this file
moves the bytes with the client's router (on a cluster: the master of the
object's slot, sharded pub/sub), sleeps on the client's
pub/sub connection (the engine's wake rule per channel: a release of k
wakes k waiters, a latch reaching zero wakes all) and names no command,
script, key or channel (tests/lint checks it).

Cancelling a waiting acquire (``task.cancel()``, ``asyncio.timeout()``)
ends it through the engine's cancel input; a command already on the wire
answers first, and permits it took are given back before the
CancelledError propagates. A try whose answer never came is settled by
the engine (a plain semaphore's through its request latch, a
permit-expirable one by giving its id back) before the call fails.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Optional, Tuple, Type

from . import _engine as _E_module
from ._core import _to_ms, _wait_ms
from ._errors import Error, InvalidArgument, from_code
from .aio import (
    _SEND,
    _SUBSCRIBE,
    _UNSUBSCRIBE,
    _WAIT,
    Client,
    Seconds,
    _Cancel,
    _quietly,
    _send,
    _subscribe_step,
    _wait_step,
    _Waiter,
)

_E: Any = _E_module  # the extension carries no type information

__all__ = ["Semaphore", "PermitExpirableSemaphore", "CountDownLatch"]


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not -(2**63) <= value < 2**63:
        raise InvalidArgument(f"invalid argument: {what} out of range: {value}", _E.E_INVAL)
    return value


async def _run_wait(c: Client, sn: Any, m: Any, cancel: _Cancel) -> Tuple[int, Optional[str]]:
    """Drive one wait machine (SemNames.wait) to its end: (result, permit
    id or None). Commands go to the master of the object's slot (the
    client's router); a cancellation is remembered in cancel and fed to the
    machine between its steps."""
    loop = c._loop
    slot = sn.slot
    ps: Any = None  # the _PubSub w listens on
    w: Optional[_Waiter] = None
    channel = ""
    try:
        while True:
            if cancel.exc is not None:
                m.cancel()
            t = m.next()
            act = t[0]
            if act == _SEND:
                st, req, conn, code = await _send(c, slot, t[1], c._cmd_ms, cancel)
                if st == 3:
                    m.on_error(code)
                    continue
                assert conn is not None
                if st == 0:
                    again = m.on_reply(req.reply)
                    if again is not None:  # the script's body, routed again
                        conn.give()
                        st, req, conn, code = await c._routed(slot, again, c._cmd_ms, cancel)
                        if st == 3:
                            m.on_error(code)
                            continue
                        if st == 0:
                            m.on_reply(req.reply)
                assert conn is not None
                if st == 0:
                    conn.give()
                else:
                    # sent, no answer: the server may have run it (the engine
                    # settles it through the request latch or the permit id)
                    conn.broken = True
                    conn.close()
                    c._latch_epoch += 1  # later calls: a new latch key (a late copy may come)
                    m.on_reply_lost(_E.E_CONN)
            elif act == _SUBSCRIBE:
                channel = t[1]
                w, ps = await _subscribe_step(c, m, slot, channel, cancel, sn.wakes)
            elif act == _WAIT:
                w = await _wait_step(loop, m, w, t[2], cancel)
            elif act == _UNSUBSCRIBE:
                if w is not None:
                    if ps is not None:
                        ps.leave(t[1], w)
                    w = None
            else:
                return int(t[1]), t[2]
    finally:
        if w is not None and ps is not None:  # (a join that raised left nothing)
            ps.leave(channel, w)


class _Object:
    _kind = 0
    _what = ""

    def __init__(self, client: Client, name: str) -> None:
        if not isinstance(client, Client):
            raise TypeError("client must be a hilock.aio.Client")
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        try:
            self._sn: Any = _E.SemNames(name, self._kind, client._cluster)
        except ValueError as e:
            raise InvalidArgument(f"invalid argument: {self._what} name: {e}",
                                  _E.E_INVAL) from None
        self._c = client
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def client(self) -> Client:
        return self._c

    def _error(self, code: int) -> Error:
        n = self._name
        if code == _E.E_WRONGTYPE:
            return from_code(code, f"key {n!r} holds a value that is not a {self._what}")
        if code == _E.E_INVAL:
            return from_code(code, f"{self._what} {n!r}: the count would overflow; "
                                   "nothing changed")
        return from_code(code, f"{self._what} {n!r}")

    async def _op(self, verb: str, *arg: Any) -> int:
        """One command machine (SemNames.op) on the pool: its value."""
        return await self._c._run_call(self._sn.op(verb, *arg), self._error, self._sn.slot)

    async def _wait(self, permits: int, wait_ms: int, lease_ms: int) -> Tuple[int, Optional[str]]:
        """The engine's wait; a cancellation gives back what was taken, then
        propagates."""
        c = self._c
        c._check()
        if self._kind == _E.SEM_SEMAPHORE:
            # the owner's request latch: a resend takes nothing twice, and a
            # try whose reply was lost is settled by the engine before it ends
            c._seq += 1
            m = self._sn.wait(permits, wait_ms, lease_ms, c.owner(), c._latch_epoch, c._seq,
                              c._latch_ttl_ms)
        else:
            m = self._sn.wait(permits, wait_ms, lease_ms)
        cancel = _Cancel()
        result, pid = await _run_wait(c, self._sn, m, cancel)
        if cancel.exc is not None:
            if result == 0:
                await _quietly(self._give_back(permits, pid))
            raise cancel.exc
        if result not in (0, _E.E_TIMEDOUT):
            raise self._error(result)
        return result, pid

    async def _give_back(self, permits: int, pid: Optional[str]) -> None:
        pass  # a latch takes nothing

    async def delete(self) -> bool:
        """Delete it (both keys) and wake its waiters; True when there was one."""
        return await self._op("delete") == 1

    def __repr__(self) -> str:
        return f"<hilock.aio.{type(self).__name__} {self._name!r}>"


class Semaphore(_Object):
    """A counting semaphore shared by every client (Redisson RSemaphore
    layout: the free permits at key ``name``). Permits belong to nobody:
    any client may release them. ``async with sem:`` takes one permit
    (waiting as long as it takes) and gives it back."""

    _kind = _E.SEM_SEMAPHORE
    _what = "semaphore"

    async def try_set_permits(self, permits: int) -> bool:
        """Set the number of permits if the semaphore does not exist yet."""
        return await self._op("try_set", _int(permits, "permits")) == 1

    async def acquire(self, permits: int = 1, wait: Optional[Seconds] = None) -> bool:
        """Take ``permits`` permits; False when the wait (None: forever, 0:
        one try, seconds) elapsed first."""
        result, _pid = await self._wait(_int(permits, "permits"), _wait_ms(wait), 0)
        return result == 0

    async def _give_back(self, permits: int, pid: Optional[str]) -> None:
        await self.release(permits)

    async def release(self, permits: int = 1) -> None:
        """Give back ``permits`` permits (any client may)."""
        await self._op("release", _int(permits, "permits"))

    async def available_permits(self) -> int:
        return await self._op("count")

    async def drain_permits(self) -> int:
        """Take every free permit; returns how many."""
        return await self._op("drain")

    async def add_permits(self, delta: int) -> None:
        """Add ``delta`` permits (negative: fewer from now on)."""
        await self._op("add", _int(delta, "delta"))

    async def set_permits(self, permits: int) -> None:
        """Make the free count exactly ``permits``."""
        await self._op("set", _int(permits, "permits"))

    async def __aenter__(self) -> "Semaphore":
        await self.acquire(1)
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.release(1)


class PermitExpirableSemaphore(_Object):
    """A semaphore whose every permit has an id and its own lease (Redisson
    RPermitExpirableSemaphore layout): a permit whose lease ended comes back
    by itself, so a holder that dies cannot keep it."""

    _kind = _E.SEM_PERMIT
    _what = "permit-expirable semaphore"

    async def try_set_permits(self, permits: int) -> bool:
        return await self._op("try_set", _int(permits, "permits")) == 1

    async def acquire(self, wait: Optional[Seconds] = None,
                      lease: Optional[Seconds] = None) -> Optional[str]:
        """Take one permit; its id (32 hex characters), or None when the
        wait elapsed. ``lease``: seconds, or None = until released."""
        lease_ms = 0 if lease is None else _to_ms(lease, "lease", zero_ok=False)
        result, pid = await self._wait(1, _wait_ms(wait), lease_ms)
        return pid if result == 0 else None

    async def _give_back(self, permits: int, pid: Optional[str]) -> None:
        if pid:
            await self._op("permit_release", pid)

    async def release(self, permit_id: str) -> None:
        """Give back the permit ``permit_id``. NotOwnerError when it is not
        taken (released before) or its lease had ended."""
        if not isinstance(permit_id, str):
            raise TypeError(f"permit_id must be a str, not {type(permit_id).__name__}")
        try:
            await self._op("permit_release", permit_id)
        except Error as e:
            if e.code != _E.E_NOTOWNER:
                raise
            raise from_code(_E.E_NOTOWNER, f"permit {permit_id} of semaphore {self._name!r} is not "
                                    "taken (released before, or its lease ended)") from None

    async def update_lease(self, permit_id: str, lease: Seconds) -> None:
        """A new lease of ``lease`` seconds from now for a taken permit
        (NotOwnerError when it was released or its lease had ended)."""
        if not isinstance(permit_id, str):
            raise TypeError(f"permit_id must be a str, not {type(permit_id).__name__}")
        ms = _to_ms(lease, "lease", zero_ok=False)
        try:
            await self._op("update_lease", (permit_id, ms))
        except Error as e:
            if e.code != _E.E_NOTOWNER:
                raise
            raise from_code(_E.E_NOTOWNER, f"permit {permit_id} of semaphore {self._name!r} is not "
                                    "taken (released, or its lease ended)") from None

    async def available_permits(self) -> int:
        """Free permits (permits whose lease ended are given back first)."""
        return await self._op("count")

    async def add_permits(self, delta: int) -> None:
        await self._op("add", _int(delta, "delta"))


class CountDownLatch(_Object):
    """A count-down latch shared by every client (Redisson RCountDownLatch
    layout): ``await latch.wait()`` returns once the count reached zero."""

    _kind = _E.SEM_LATCH
    _what = "count-down latch"

    async def try_set_count(self, count: int) -> bool:
        """Set the count if the latch has none."""
        return await self._op("try_set", _int(count, "count")) == 1

    async def count_down(self) -> int:
        """Count down by one; returns the count left."""
        return await self._op("count_down")

    async def count(self) -> int:
        """The count now (0: open). A method: it asks the server."""
        return await self._op("count")

    async def wait(self, timeout: Optional[Seconds] = None) -> bool:
        """Wait until the count is zero (as asyncio.Event.wait, with a
        timeout): True, or False when ``timeout`` seconds passed first
        (None: forever)."""
        result, _pid = await self._wait(1, _wait_ms(timeout), 0)
        return result == 0
