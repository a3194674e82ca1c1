"""hilock: Redis distributed locks in Redisson's data layout, from one C library.

    import hilock
    with hilock.Client("redis://127.0.0.1:6379/0") as client:
        with client.lock("orders:42", wait=5.0):
            ...

Times are float seconds. See docs/python.md for the full API.
"""

from typing import Any

from ._errors import (
    AcquireCancelled,
    AuthenticationError,
    TLSError,
    ClosedError,
    ConnectionError,
    Error,
    InvalidArgument,
    LockLostError,
    LockTimeout,
    NotAcknowledgedError,
    NotOwnerError,
    OutOfMemoryError,
    ProtocolError,
    WrongTypeError,
)
from ._core import (MAX_TIME, Client, FencedLock, Lock, MultiLock, ReadWriteLock, RedLock,
                    thread_id)
from ._semaphore import CountDownLatch, PermitExpirableSemaphore, Semaphore
from . import capi as _capi_module

_capi: Any = _capi_module  # the SWIG module carries no type information

__version__: str = _capi.hilock_version_string()
#: The C library's version number (major*10000 + minor*100 + patch).
version_number: int = _capi.hilock_version()


def strerror(code: int) -> str:
    """The C library's static description of a HILOCK_E* code."""
    return str(_capi.hilock_strerror(code))


__all__ = [
    "Client",
    "Lock",
    "MultiLock",
    "RedLock",
    "FencedLock",
    "ReadWriteLock",
    "Semaphore",
    "PermitExpirableSemaphore",
    "CountDownLatch",
    "thread_id",
    "strerror",
    "MAX_TIME",
    "Error",
    "InvalidArgument",
    "LockTimeout",
    "NotOwnerError",
    "LockLostError",
    "ConnectionError",
    "AuthenticationError",
    "TLSError",
    "ProtocolError",
    "WrongTypeError",
    "OutOfMemoryError",
    "ClosedError",
    "AcquireCancelled",
    "NotAcknowledgedError",
    "__version__",
]
