"""Semaphore, permit-expirable semaphore and count-down latch (Redisson's
RSemaphore, RPermitExpirableSemaphore and RCountDownLatch layouts).

Like the locks, every operation is one call into the C library; this module
converts seconds to milliseconds, checks Python types and makes waits
interruptible by Ctrl-C on the main thread.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Dict, Optional, Type

from . import capi as _capi_module
from ._core import Seconds, _check_name, _interruptible, _on_main_thread, _to_ms, _wait_ms
from ._errors import ClosedError, InvalidArgument

if TYPE_CHECKING:
    from ._core import Client

_capi: Any = _capi_module

__all__ = ["Semaphore", "PermitExpirableSemaphore", "CountDownLatch"]


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not -(2**63) <= value < 2**63:
        raise InvalidArgument(f"invalid argument: {what} out of range: {value}",
                              _capi.HILOCK_EINVAL)
    return value


class _Object:
    _new: Any = None
    _cancel: Any = None

    def __init__(self, client: "Client", name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        _check_name(name)  # empty, too long, a NUL byte: the engine says which
        h = client._h
        if h is None:
            raise ClosedError("closed: the client is closed", _capi.HILOCK_ECLOSED)
        self._client = client  # keeps the C client alive as long as this handle
        self._name = name
        self._ptr = type(self)._new(h, name)

    @property
    def name(self) -> str:
        return self._name

    @property
    def client(self) -> "Client":
        return self._client

    def _wait(self, wait: Optional[Seconds], run: Any, undo: Any) -> Any:
        """run(tid, wait_ms) with Ctrl-C ending the wait on the main thread."""
        w = _wait_ms(wait)
        tid = int(_capi.hilock_thread_id())
        if w != 0 and _on_main_thread():
            first = run(tid, 0)  # a free permit needs no helper thread
            if first:
                return first
            box: Dict[str, Any] = {}

            def body() -> bool:
                box["r"] = run(tid, w)
                return bool(box["r"])

            _interruptible(body, lambda: type(self)._cancel(self._ptr, tid),
                           lambda: undo(box.get("r")))
            return box.get("r")
        return run(tid, w)

    def __repr__(self) -> str:
        return f"<hilock.{type(self).__name__} {self._name!r}>"


class Semaphore(_Object):
    """A counting semaphore shared by every client (Redisson RSemaphore
    layout: the free permits at key ``name``, wake-ups on
    ``redisson_sc:{name}``). Permits belong to nobody: any client may
    release them. ``with sem:`` takes one permit (waiting as long as it
    takes) and gives it back."""

    _new = staticmethod(lambda h, n: _capi.hilock_semaphore_new(h, n))
    _cancel = staticmethod(lambda p, tid: _capi.hilock_semaphore_cancel(p, tid))

    def try_set_permits(self, permits: int) -> bool:
        """Set the number of permits if the semaphore does not exist yet."""
        return bool(_capi.hilock_semaphore_try_set_permits(self._ptr, _int(permits, "permits")))

    def acquire(self, permits: int = 1, wait: Optional[Seconds] = None) -> bool:
        """Take ``permits`` permits; False when the wait (None: forever,
        0: one try, seconds) elapsed first."""
        k = _int(permits, "permits")
        ptr = self._ptr
        return bool(self._wait(
            wait, lambda tid, w: _capi.hilock_semaphore_acquire_tid(ptr, tid, k, w),
            lambda r: _capi.hilock_semaphore_release(ptr, k) if r else None))

    def release(self, permits: int = 1) -> None:
        """Give back ``permits`` permits (any client may)."""
        _capi.hilock_semaphore_release(self._ptr, _int(permits, "permits"))

    def available_permits(self) -> int:
        return int(_capi.hilock_semaphore_available(self._ptr))

    def drain_permits(self) -> int:
        """Take every free permit; returns how many."""
        return int(_capi.hilock_semaphore_drain(self._ptr))

    def add_permits(self, delta: int) -> None:
        """Add ``delta`` permits (negative: fewer from now on)."""
        _capi.hilock_semaphore_add_permits(self._ptr, _int(delta, "delta"))

    def set_permits(self, permits: int) -> None:
        """Make the free count exactly ``permits``."""
        _capi.hilock_semaphore_set_permits(self._ptr, _int(permits, "permits"))

    def delete(self) -> bool:
        """Delete the semaphore; True when there was one."""
        return bool(_capi.hilock_semaphore_delete(self._ptr))

    def __enter__(self) -> "Semaphore":
        self.acquire(1)
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.release(1)


class PermitExpirableSemaphore(_Object):
    """A semaphore whose every permit has an id and its own lease (Redisson
    RPermitExpirableSemaphore layout): a permit whose lease ended comes back
    by itself, so a holder that dies cannot keep it."""

    _new = staticmethod(lambda h, n: _capi.hilock_permit_semaphore_new(h, n))
    _cancel = staticmethod(lambda p, tid: _capi.hilock_permit_semaphore_cancel(p, tid))

    def try_set_permits(self, permits: int) -> bool:
        return bool(_capi.hilock_permit_semaphore_try_set_permits(
            self._ptr, _int(permits, "permits")))

    def acquire(self, wait: Optional[Seconds] = None,
                lease: Optional[Seconds] = None) -> Optional[str]:
        """Take one permit; returns its id (32 hex characters), or None when
        the wait elapsed. ``lease``: seconds, or None = until released."""
        l = 0 if lease is None else _to_ms(lease, "lease", zero_ok=False)
        ptr = self._ptr
        pid = self._wait(
            wait, lambda tid, w: _capi.hilock_permit_semaphore_acquire_tid(ptr, tid, w, l),
            lambda r: _capi.hilock_permit_semaphore_release(ptr, r) if r else None)
        return pid or None

    def release(self, permit_id: str) -> None:
        """Give back the permit ``permit_id``. NotOwnerError when it is not
        taken (released before) or its lease had ended."""
        if not isinstance(permit_id, str):
            raise TypeError(f"permit_id must be a str, not {type(permit_id).__name__}")
        _capi.hilock_permit_semaphore_release(self._ptr, permit_id)

    def update_lease(self, permit_id: str, lease: Seconds) -> None:
        """A new lease of ``lease`` seconds from now for a taken permit
        (NotOwnerError when it was released or its lease had ended)."""
        if not isinstance(permit_id, str):
            raise TypeError(f"permit_id must be a str, not {type(permit_id).__name__}")
        _capi.hilock_permit_semaphore_update_lease(
            self._ptr, permit_id, _to_ms(lease, "lease", zero_ok=False))

    def available_permits(self) -> int:
        return int(_capi.hilock_permit_semaphore_available(self._ptr))

    def add_permits(self, delta: int) -> None:
        _capi.hilock_permit_semaphore_add_permits(self._ptr, _int(delta, "delta"))

    def delete(self) -> bool:
        return bool(_capi.hilock_permit_semaphore_delete(self._ptr))


class CountDownLatch(_Object):
    """A count-down latch shared by every client (Redisson RCountDownLatch
    layout): ``wait()`` returns once the count reached zero."""

    _new = staticmethod(lambda h, n: _capi.hilock_latch_new(h, n))
    _cancel = staticmethod(lambda p, tid: _capi.hilock_latch_cancel(p, tid))

    def try_set_count(self, count: int) -> bool:
        """Set the count if the latch has none."""
        return bool(_capi.hilock_latch_try_set_count(self._ptr, _int(count, "count")))

    def count_down(self) -> int:
        """Count down by one; returns the count left."""
        return int(_capi.hilock_latch_count_down(self._ptr))

    @property
    def count(self) -> int:
        return int(_capi.hilock_latch_count(self._ptr))

    def wait(self, timeout: Optional[Seconds] = None) -> bool:
        """Wait until the count is zero (as threading.Event.wait): True, or
        False when ``timeout`` seconds passed first (None: forever)."""
        ptr = self._ptr
        return bool(self._wait(
            timeout, lambda tid, w: _capi.hilock_latch_await_tid(ptr, tid, w),
            lambda r: None))

    def delete(self) -> bool:
        """Delete the latch (opens it for every waiter)."""
        return bool(_capi.hilock_latch_delete(self._ptr))

