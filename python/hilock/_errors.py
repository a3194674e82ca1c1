"""Exception hierarchy of hilock.

Every negative ``HILOCK_E*`` code of the C library maps to exactly one class
here; the SWIG layer calls :func:`from_code` with the code and the detail
message kept on the C handle that failed.
"""

from __future__ import annotations

import builtins
from typing import Dict, Type

__all__ = [
    "Error",
    "InvalidArgument",
    "LockTimeout",
    "NotOwnerError",
    "LockLostError",
    "ConnectionError",
    "AuthenticationError",
    "ProtocolError",
    "WrongTypeError",
    "OutOfMemoryError",
    "ClosedError",
    "NotAcknowledgedError",
    "from_code",
    "CODES",
]

# The C codes (hilock.h); kept here so this module imports without the
# extension (the extension imports it to raise).
EINVAL = -1
ETIMEDOUT = -2
ENOTOWNER = -3
ELOST = -4
ECONN = -5
EPROTO = -6
EAUTH = -7
EWRONGTYPE = -8
ENOMEM = -9
ECLOSED = -10
ETLS = -11
ECANCELED = -12
EUNACKED = -13


class Error(Exception):
    """Base class of every hilock error.

    ``code`` is the negative C code (``None`` when raised by the Python layer
    for a reason the C library did not report), ``detail`` the C detail text.
    """

    code: "int | None" = None

    def __init__(self, message: str, code: "int | None" = None, detail: str = "") -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.detail = detail


class InvalidArgument(Error, ValueError):
    """A bad argument: empty name, bad time value, bad URL (HILOCK_EINVAL)."""

    code = EINVAL


class LockTimeout(Error):
    """The wait elapsed without acquiring the lock (HILOCK_ETIMEDOUT).

    ``acquire()`` returns False instead; ``with lock:`` raises this."""

    code = ETIMEDOUT


class NotOwnerError(Error):
    """Release by a caller that does not hold the lock (HILOCK_ENOTOWNER):
    never held, expired, lost or force-unlocked. Nothing was changed."""

    code = ENOTOWNER


class LockLostError(Error):
    """The lock was lost while held (HILOCK_ELOST), or, when leaving a
    ``with`` block, it was no longer held by this owner at release."""

    code = ELOST


class ConnectionError(Error, builtins.ConnectionError):
    """Cannot reach the server, I/O error or command timeout (HILOCK_ECONN).
    Also a subclass of the builtin ConnectionError."""

    code = ECONN


class AuthenticationError(ConnectionError):
    """Authentication or database selection refused (HILOCK_EAUTH)."""

    code = EAUTH


class TLSError(ConnectionError):
    """The TLS handshake failed: the server's certificate did not verify
    (unknown CA, expired, wrong name) or the server refused ours (HILOCK_ETLS)."""

    code = ETLS


class NotAcknowledgedError(ConnectionError):
    """``replica_ack``: the server granted the lock but no replica
    acknowledged the grant within ``replica_ack_timeout``, so it was released
    again and nothing is held (HILOCK_EUNACKED). A waiting acquire tries
    again while its wait lasts; this is raised when the wait is over. A
    subclass of :class:`ConnectionError`: a failover now could have lost the
    grant, as a broken connection could."""

    code = EUNACKED


class ProtocolError(Error):
    """Unexpected reply or server error (HILOCK_EPROTO)."""

    code = EPROTO


class WrongTypeError(ProtocolError):
    """The lock's key holds a value that is not a lock (HILOCK_EWRONGTYPE)."""

    code = EWRONGTYPE


class OutOfMemoryError(Error, MemoryError):
    """The C library ran out of memory (HILOCK_ENOMEM)."""

    code = ENOMEM


class ClosedError(Error):
    """The client was closed, or was inherited across ``os.fork()``
    (HILOCK_ECLOSED). Open a new Client in the child process."""

    code = ECLOSED


class AcquireCancelled(Error):
    """A waiting acquire was cancelled (HILOCK_ECANCELED); nothing is held
    or queued. The Python layer turns it into the exception that caused the
    cancel (KeyboardInterrupt), so it is rarely seen."""

    code = ECANCELED


CODES: Dict[int, Type[Error]] = {
    EINVAL: InvalidArgument,
    ETIMEDOUT: LockTimeout,
    ENOTOWNER: NotOwnerError,
    ELOST: LockLostError,
    ECONN: ConnectionError,
    EPROTO: ProtocolError,
    EAUTH: AuthenticationError,
    EWRONGTYPE: WrongTypeError,
    ENOMEM: OutOfMemoryError,
    ECLOSED: ClosedError,
    ETLS: TLSError,
    ECANCELED: AcquireCancelled,
    EUNACKED: NotAcknowledgedError,
}

_NAMES = {
    EINVAL: "invalid argument",
    ETIMEDOUT: "timed out",
    ENOTOWNER: "not owner",
    ELOST: "lock lost",
    ECONN: "connection error",
    EPROTO: "protocol error",
    EAUTH: "authentication refused",
    EWRONGTYPE: "wrong type",
    ENOMEM: "out of memory",
    ECLOSED: "closed",
    ETLS: "tls",
    ECANCELED: "cancelled",
    EUNACKED: "not acknowledged",
}


def from_code(code: int, detail: str = "") -> Error:
    """The exception instance for a C code and its detail text."""
    cls = CODES.get(code, Error)
    name = _NAMES.get(code, f"error {code}")
    message = detail if detail else name
    if detail and not detail.lower().startswith(name):
        message = f"{name}: {detail}"
    return cls(message, code, detail)
