"""The Pythonic layer over the SWIG module ``hilock._capi``.

No lock logic lives here: every operation is one call into the C library.
This module converts float seconds to the C milliseconds, keeps C handles
alive as long as anything needs them, and runs ``on_lost`` callbacks on a
Python thread (see :class:`_LostDispatcher`).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import urllib.parse
import weakref
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    TypeVar,
    Union,
)

from . import _engine as _engine_module
from . import capi as _capi_module

_capi: Any = _capi_module  # the SWIG module carries no type information
_redact_url: Callable[[str], str] = _engine_module.redact_url
#: raises InvalidArgument saying why a name is refused (the engine's words)
_check_name: Callable[[str], None] = _engine_module.check_name
from ._errors import (
    ClosedError,
    Error,
    InvalidArgument,
    LockLostError,
    LockTimeout,
    NotAcknowledgedError,
    NotOwnerError,
)

if TYPE_CHECKING:  # imported at run time where used (they import this module)
    from ._semaphore import CountDownLatch, PermitExpirableSemaphore, Semaphore

__all__ = ["Client", "Lock", "MultiLock", "RedLock", "thread_id"]

_log = logging.getLogger("hilock")

Seconds = Union[int, float]
LostCallback = Callable[[Any, int], None]

#: Longest time accepted, in seconds (HILOCK_MAX_TIME_MS).
MAX_TIME = _capi.HILOCK_MAX_TIME_MS / 1000.0


# --------------------------------------------------------------------------
# time conversion
# --------------------------------------------------------------------------


def _to_ms(value: Seconds, what: str, *, zero_ok: bool) -> int:
    """Seconds (int or float, finite, >= 0) to whole milliseconds, rounding
    up so that a tiny positive time never becomes 0 (which means "one try"
    for a wait)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise InvalidArgument(f"invalid argument: {what} must be finite, got {value!r}")
    if value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise InvalidArgument(f"invalid argument: {what} must be {bound}, got {value!r}")
    if isinstance(value, int):
        ms = value * 1000
    else:
        # round to the microsecond first so 0.3 s is 300 ms, not 301
        ms = math.ceil(round(value * 1000.0, 3))
    if ms > _capi.HILOCK_MAX_TIME_MS:
        raise InvalidArgument(f"invalid argument: {what} too large ({value!r} s)")
    return int(ms)


def _wait_ms(wait: Optional[Seconds]) -> int:
    """None or math.inf = wait forever (-1), 0 = one try, > 0 = at most."""
    if wait == 0 and type(wait) is int:
        return 0
    if wait is None or (isinstance(wait, float) and wait == math.inf):
        return int(_capi.HILOCK_WAIT_FOREVER)
    return _to_ms(wait, "wait", zero_ok=True)


def _lease_ms(lease: Optional[Seconds]) -> int:
    """None = watchdog (0 in C), > 0 = fixed lease."""
    if lease is None:
        return int(_capi.HILOCK_LEASE_WATCHDOG)
    return _to_ms(lease, "lease", zero_ok=False)


def _protocol_args(
    wait: Any, lease: Any, blocking: Optional[bool], timeout: Optional[Seconds]
) -> Tuple[Optional[Seconds], Optional[Seconds]]:
    """(wait, lease) from either hilock's ``acquire(wait, lease)`` or
    threading.Lock's ``acquire(blocking=True, timeout=-1)`` (also positional:
    ``acquire(False)``, ``acquire(True, 5)``, as dogpile.cache calls it)."""
    if isinstance(wait, bool):  # threading style, positional
        if blocking is not None or timeout is not None:
            raise TypeError("acquire(): blocking given twice")
        blocking, timeout, wait, lease = wait, lease, None, None
    elif blocking is None and timeout is None:
        return wait, lease
    elif wait is not None:
        raise TypeError("acquire(): give wait or blocking/timeout, not both")
    if blocking is None:
        blocking = True
    if timeout is None:
        timeout = -1
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if not blocking:
        if timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        return 0, lease
    if timeout == -1:
        return None, lease
    if timeout < 0:
        raise ValueError("timeout value must be a non-negative number")
    return timeout, lease


def _interruptible(run: Callable[[], Any], cancel: Callable[[], Any],
                   undo: Callable[[], None]) -> bool:
    """Run the blocking acquire ``run`` so that a signal handler's exception
    (Ctrl-C: KeyboardInterrupt) ends the wait. Python runs signal handlers
    only on the main thread and only between bytecodes, so ``run`` (which
    names the caller's thread id explicitly) waits on a helper thread while
    this thread waits on an Event, which signals interrupt. On an exception
    the acquire is cancelled through the C API (it leaves the fair queue and
    its subscription) and, if its grant won the race, released again; then
    the exception propagates. Nothing is held or queued afterwards."""
    box: Dict[str, Any] = {}
    done = threading.Event()
    mu = threading.Lock()

    def body() -> None:
        with mu:  # the caller may have given up before this thread ran
            if box.get("abandoned"):
                return
            box["started"] = True
        try:
            box["ok"] = run()
        except BaseException as e:  # noqa: B036 - handed to the caller
            box["exc"] = e
        finally:
            done.set()

    try:
        # Started inside the try: Thread.start() waits for the new thread,
        # which may already be waiting on the server (in the fair queue) when
        # a signal's exception comes out of that wait.
        threading.Thread(target=body, name="hilock-acquire", daemon=True).start()
        # In short waits, not one long one: the kernel may deliver SIGINT to
        # the helper thread, whose C-level handler only flags it; a main
        # thread blocked in one long wait would not see the flag (no EINTR)
        # until the acquire ends. Each return to Python runs the handler.
        while not done.wait(0.02):
            pass
    except BaseException as first:
        while True:  # a helper that has not begun never will
            try:
                with mu:
                    if not box.get("started"):
                        box["abandoned"] = True
                break
            except BaseException:  # another Ctrl-C: the cleanup comes first
                pass
        while box.get("started") and not done.is_set():
            try:
                cancel()  # asks until the acquire has returned (it may not wait yet)
                done.wait(0.005)
            except BaseException:  # another Ctrl-C: the cleanup comes first
                pass
        if box.get("ok"):
            undo()
        raise first
    if "exc" in box:
        raise box["exc"]
    return bool(box["ok"])


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _check_tid(tid: Optional[int]) -> Optional[int]:
    if tid is None:
        return None
    if isinstance(tid, bool) or not isinstance(tid, int):
        raise TypeError(f"thread_id must be an int, not {type(tid).__name__}")
    if not 0 <= tid < 2**64:
        raise InvalidArgument(f"invalid argument: thread_id out of range: {tid}")
    return tid


def thread_id() -> int:
    """The calling OS thread's id as used in owner strings (the C default)."""
    return int(_capi.hilock_thread_id())


# --------------------------------------------------------------------------
# lost events
# --------------------------------------------------------------------------


class _QueueThread:
    """A daemon thread per process that drains one of the C shim's queues
    (hilock.i): started on first use, and again in a forked child (whose
    copy of the parent's thread does not run). Subclasses give the thread's
    name and its ``_run``; callers hold ``self._mu`` around
    ``_ensure_thread``."""

    _thread_name = ""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._pid = 0

    def _ensure_thread(self) -> None:
        pid = os.getpid()
        if self._thread is not None and self._pid == pid and self._thread.is_alive():
            return
        self._pid = pid
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def _after_fork_in_child(self) -> None:
        self._mu = threading.Lock()
        self._thread = None

    def _run(self) -> None:
        raise NotImplementedError


class _LostDispatcher(_QueueThread):
    """Runs ``on_lost`` callbacks.

    The C watchdog thread never runs Python: the C shim in hilock.i queues
    (token, thread id) and this daemon thread, blocked in ``hl_lost_next``
    with the GIL released, looks the token up and calls the callbacks. One
    thread per process, started on first use (and again in a forked child).
    """

    _thread_name = "hilock-lost"

    def __init__(self) -> None:
        super().__init__()
        self._targets: Dict[int, "weakref.ref[Any]"] = {}
        self._next = 1

    def register(self, target: Any) -> int:
        with self._mu:
            token = self._next
            self._next += 1
            self._targets[token] = weakref.ref(target)
            self._ensure_thread()
            return token

    def unregister(self, token: int) -> None:
        with self._mu:
            self._targets.pop(token, None)

    def _run(self) -> None:
        while True:
            got, token, tid = _capi.hl_lost_next(-1)
            if not got or token == 0:
                continue
            with self._mu:
                ref = self._targets.get(token)
            target = ref() if ref is not None else None
            if target is not None:
                target._fire_lost(int(tid))


_dispatcher = _LostDispatcher()


# -- statistics and trace events ------------------------------------------

_KIND_NAMES = {1: "reentrant", 2: "fair", 3: "read", 4: "write", 5: "fenced"}
_STATS_BUCKETS = 24
_STATS_NAMES_MAX = 65536  # HILOCK_STATS_NAMES_MAX
_KIND_FIELDS = ("granted", "timed_out", "cancelled", "busy", "granted_first_try", "granted_woken",
                "granted_retried", "wait_ms", "hold_ms", "lost_expired", "lost_gone",
                "lost_in_doubt")
_CLIENT_FIELDS = ("renewals", "renewal_commands", "renewal_failures", "settles", "reconnects",
                  "redirects", "replica_ack_failures")


def _stats_from_tuple(t: Tuple[int, ...]) -> Dict[str, Any]:
    """hilock_stats (as hl_client_stats_tuple flattens it) as a dict:
    ``{"version", "kinds": {kind name: {...}}, <client figures>}``; wait_ms
    and hold_ms are lists of HILOCK_STATS_BUCKETS log2 ms buckets."""
    out: Dict[str, Any] = {"version": t[0]}
    i = 1
    kinds: Dict[str, Dict[str, Any]] = {}
    for k in range(6):  # HILOCK_STATS_KINDS; index 0 is unused
        figures: Dict[str, Any] = {}
        for f in _KIND_FIELDS:
            if f in ("wait_ms", "hold_ms"):
                figures[f] = list(t[i:i + _STATS_BUCKETS])
                i += _STATS_BUCKETS
            else:
                figures[f] = t[i]
                i += 1
        if k in _KIND_NAMES:
            kinds[_KIND_NAMES[k]] = figures
    out["kinds"] = kinds
    for f in _CLIENT_FIELDS:
        out[f] = t[i]
        i += 1
    return out


def _check_stats_names(n: Any) -> int:
    """The stats_names option (C hilock_options.stats_names): an int in
    0..HILOCK_STATS_NAMES_MAX."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError("stats_names must be an int")
    if not 0 <= n <= _STATS_NAMES_MAX:
        raise InvalidArgument("invalid argument: stats_names must be in 0..%d, got %d"
                              % (_STATS_NAMES_MAX, n), _capi.HILOCK_EINVAL)
    return n


def _figures_from(t: Sequence[int]) -> Dict[str, Any]:
    """One hilock_kind_stats, flattened in declaration order, as a dict."""
    figures: Dict[str, Any] = {}
    i = 0
    for f in _KIND_FIELDS:
        if f in ("wait_ms", "hold_ms"):
            figures[f] = list(t[i:i + _STATS_BUCKETS])
            i += _STATS_BUCKETS
        else:
            figures[f] = t[i]
            i += 1
    return figures


def _names_from_list(pairs: List[Tuple[int, Optional[str], Sequence[int]]],
                     probes: Dict[Tuple[int, Optional[str]], int]) -> List[Dict[str, Any]]:
    """hl_client_name_stats_list's (kind, name, figures) as stats()'s
    ``names``. A main-thread acquire's first try that missed (a probe) was
    counted busy on its pair's entry, or on its kind's other entry (name
    None) when the pair is not tracked: taken off there."""
    out: List[Dict[str, Any]] = []
    for kind, name, fig in pairs:
        if kind not in _KIND_NAMES:
            continue
        d: Dict[str, Any] = {"kind": _KIND_NAMES[kind], "name": name}
        d.update(_figures_from(fig))
        d["busy"] -= probes.get((kind, name), 0)
        out.append(d)
    return out


# hilock_trace_event
_TRACE_LOST, _TRACE_IN_DOUBT, _TRACE_RECONNECT, _TRACE_SETTLE, _TRACE_WARNING = 1, 2, 3, 4, 5


class _TraceLogger(_QueueThread):
    """Logs the C library's trace events on ``logging.getLogger("hilock")``:
    losses, in-doubt reports, reconnects and warnings at WARNING, settles at
    INFO.
    The C callback only queues a copy (hilock.i); this daemon thread,
    blocked in ``hl_trace_next`` with the GIL released, logs them. The
    messages come from the library and hold no password."""

    _thread_name = "hilock-trace"

    def watch(self, h: Any) -> None:
        _capi.hl_client_watch_trace(h, 1)
        with self._mu:
            self._ensure_thread()

    def _run(self) -> None:
        while True:
            if not _capi.hl_trace_next(-1):
                continue
            ev = _capi.hl_trace_take()
            if ev is None:
                continue
            event, _kind, _name, _tid, _ms, message = ev
            level = logging.INFO if event == _TRACE_SETTLE else logging.WARNING
            _log.log(level, "%s", message)


_trace_logger = _TraceLogger()

# Every open Client and MultiLock, so that a forked child can let go of the
# C handles it inherited without calling into the C library (see _at_fork).
_live_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()
_live_multilocks: "weakref.WeakSet[MultiLock]" = weakref.WeakSet()


def _disown(ptr: Any) -> None:
    if ptr is not None:
        try:
            ptr.thisown = False
        except AttributeError:
            pass


def _after_fork_in_child() -> None:
    """In the child of os.fork(): the inherited C handles belong to the
    parent's threads and connections. Calls on them raise ClosedError (the C
    library checks the pid); here we only make sure the child never frees
    them (their destructors would touch mutexes and condition variables
    that the parent's vanished threads may hold). The memory is the child's
    copy of the parent's: nothing leaks in the parent."""
    _dispatcher._after_fork_in_child()
    _trace_logger._after_fork_in_child()
    for c in list(_live_clients):
        c._inherited = True
        _disown(c._h)
        for h in list(c._handles.values()):
            _disown(h.ptr)
        for h in list(c._pinned):
            _disown(h.ptr)
        for rw in list(c._rwlocks.values()):
            _disown(rw)
    for m in list(_live_multilocks):
        _disown(m._ptr)
        for h in m._handles:
            _disown(h.ptr)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _call_listeners(listeners: Iterable[Any], tid: int) -> None:
    for view in list(listeners):
        cb = view._on_lost
        if cb is None:
            continue
        try:
            cb(view, tid)
        except Exception:  # a callback's failure must not stop the others
            _log.exception("hilock: on_lost callback for %r raised", view)


# --------------------------------------------------------------------------
# client
# --------------------------------------------------------------------------


def _url_settings(**kw: Optional[str]) -> str:
    parts = []
    for name, value in kw.items():
        if value is None:
            continue
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
        parts.append(f"{name}={urllib.parse.quote(value, safe='')}")
    return "&".join(parts)


def _with_query(url: str, settings: str) -> str:
    if not settings:
        return url
    base, sep, query = url.partition("?")
    return f"{base}?{settings}&{query}" if sep and query else f"{base}?{settings}"


def _from_redis(r: Any) -> Tuple[str, Dict[str, Any]]:
    """The URL and keyword arguments that reach the server a configured
    redis-py client (``redis.Redis`` or ``redis.asyncio.Redis``) talks to,
    with its credentials (also from a credential provider), database,
    timeouts and TLS settings."""
    pool = getattr(r, "connection_pool", None)
    kw = getattr(pool, "connection_kwargs", None)
    if not isinstance(kw, dict):
        raise TypeError("from_redis takes a redis.Redis or redis.asyncio.Redis client "
                        f"(not {type(r).__name__}: for a cluster or Sentinel give the URL)")
    user, password = kw.get("username"), kw.get("password")
    provider = kw.get("credential_provider")
    if provider is not None:
        creds = provider.get_credentials()
        if len(creds) == 1:
            password = creds[0]
        elif len(creds) == 2:
            user, password = creds
    if kw.get("ssl_password") or kw.get("ssl_ca_data"):
        raise InvalidArgument("invalid argument: from_redis: an encrypted TLS key "
                              "(ssl_password) and in-memory CAs (ssl_ca_data) are not "
                              "supported; give files", _capi.HILOCK_EINVAL)
    q = urllib.parse.quote
    auth = ""
    if user is not None or password is not None:
        auth = q(str(user or ""), safe="")
        if password is not None:
            auth += ":" + q(str(password), safe="")
        auth += "@"
    db = int(kw.get("db") or 0)
    opts: Dict[str, Any] = {}
    path = kw.get("path")
    if path:
        url = f"unix://{auth}{q(str(path), safe='/')}?db={db}"
    else:
        host = str(kw.get("host") or "localhost")
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        cls = getattr(pool, "connection_class", None)
        tls = "SSL" in getattr(cls, "__name__", "") or any(
            k.startswith("ssl_") and kw.get(k) is not None and k != "ssl_cert_reqs"
            for k in ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile"))
        url = f"{'rediss' if tls else 'redis'}://{auth}{host}:{int(kw.get('port') or 6379)}/{db}"
        if tls:
            for mine, theirs in (("tls_ca_file", "ssl_ca_certs"), ("tls_ca_dir", "ssl_ca_path"),
                                 ("tls_cert_file", "ssl_certfile"),
                                 ("tls_key_file", "ssl_keyfile")):
                if kw.get(theirs):
                    opts[mine] = str(kw[theirs])
            reqs = kw.get("ssl_cert_reqs")
            if reqs in ("none", 0) or getattr(reqs, "name", None) == "CERT_NONE":
                opts["tls_insecure"] = True
    for mine, theirs in (("connect_timeout", "socket_connect_timeout"),
                         ("command_timeout", "socket_timeout")):
        v = kw.get(theirs)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            opts[mine] = float(v)
    return url, opts


class Client:
    """A connection pool to one Redis server plus the watchdog and pub/sub
    threads of the C library.

    ``url``: ``redis[s]://[user[:password]@]host[:port][/db][?query]``,
    ``unix:///path?db=N&password=P``,
    ``redis[s]+sentinel://[user[:password]@]s1[:p1][,s2[:p2]...]/mastername[/db]`` or
    ``redis[s]+cluster://h1[:p1][,h2[:p2]...]`` (every form: docs/urls.md).
    TLS (``rediss`` schemes or ``tls=True``): ``tls_ca_file``, ``tls_ca_dir``,
    ``tls_cert_file`` + ``tls_key_file`` (mutual TLS), ``tls_server_name``
    (SNI and the name checked) and, for tests only, ``tls_insecure=True``.
    ``sentinel_user``/``sentinel_password``: the sentinels' own credentials.
    A setting in the URL's query wins over the keyword argument.
    ``replica_ack``: WAIT for a replica after acquire/release (None = the C
    default: on for sentinel URLs, off for one server). Times are seconds. Opening connects once
    to check the server, credentials and database, and raises
    :class:`hilock.ConnectionError` / :class:`hilock.AuthenticationError` /
    :class:`hilock.TLSError` / :class:`hilock.InvalidArgument` on failure.

    ``close()`` (or leaving a ``with`` block) stops the watchdog: locks still
    held are NOT released; they expire after their lease. Afterwards every
    call on this client or its locks raises :class:`hilock.ClosedError`.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        connect_timeout: Seconds = 1.0,
        command_timeout: Seconds = 1.0,
        watchdog_lease: Seconds = 30.0,
        fair_wait_window: Seconds = 300.0,
        pool_size: int = 8,
        replica_ack: Optional[bool] = None,
        replica_ack_timeout: Seconds = 1.0,
        tls: bool = False,
        tls_ca_file: Optional[str] = None,
        tls_ca_dir: Optional[str] = None,
        tls_cert_file: Optional[str] = None,
        tls_key_file: Optional[str] = None,
        tls_server_name: Optional[str] = None,
        tls_insecure: bool = False,
        sentinel_user: Optional[str] = None,
        sentinel_password: Optional[str] = None,
        stats_names: int = 0,
    ) -> None:
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, not {type(url).__name__}")
        settings = _url_settings(
            tls_ca_file=tls_ca_file, tls_ca_dir=tls_ca_dir, tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file, tls_server_name=tls_server_name,
            sentinel_user=sentinel_user, sentinel_password=sentinel_password)
        for name, flag in (("tls", tls), ("tls_insecure", tls_insecure)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False")
        if "\0" in url:
            # C strings end at the first NUL: refuse rather than connect elsewhere
            raise InvalidArgument("invalid argument: the URL contains a NUL byte",
                                  _capi.HILOCK_EINVAL)
        if isinstance(pool_size, bool) or not isinstance(pool_size, int):
            raise TypeError("pool_size must be an int")
        if not 1 <= pool_size <= 1024:
            raise InvalidArgument(f"invalid argument: pool_size must be in 1..1024, got {pool_size}")
        opts = _capi.hilock_options()
        _capi.hilock_options_init(opts, _capi.HILOCK_OPTIONS_VERSION)
        opts.connect_timeout_ms = _to_ms(connect_timeout, "connect_timeout", zero_ok=False)
        opts.command_timeout_ms = _to_ms(command_timeout, "command_timeout", zero_ok=False)
        opts.watchdog_lease_ms = _to_ms(watchdog_lease, "watchdog_lease", zero_ok=False)
        opts.fair_wait_window_ms = _to_ms(fair_wait_window, "fair_wait_window", zero_ok=False)
        opts.pool_size = pool_size
        if replica_ack is not None and not isinstance(replica_ack, bool):
            raise TypeError("replica_ack must be None, True or False")
        opts.replica_ack = 0 if replica_ack is None else (1 if replica_ack else -1)
        opts.replica_ack_timeout_ms = _to_ms(replica_ack_timeout, "replica_ack_timeout",
                                             zero_ok=False)
        opts.stats_names = _check_stats_names(stats_names)
        self._stats_names = stats_names
        self._mu = threading.Lock()
        self._url = _redact_url(url)  # shown only: passwords as ***
        self._h: Any = None
        self._handles: "weakref.WeakValueDictionary[Tuple[int, str], _Handle]" = (
            weakref.WeakValueDictionary()
        )
        self._pinned: Set[_Handle] = set()
        # C read-write locks by name (each owns its two side handles); kept
        # for the client's life, one per name used
        self._rwlocks: Dict[str, Any] = {}
        self._inherited = False  # set in a fork()ed child
        # main-thread acquires' first tries that missed, by kind and by
        # (kind, name) (stats())
        self._probes: Dict[int, int] = {}
        # (kind, None): those of pairs not tracked (in their kind's other entry)
        self._name_probes: Dict[Tuple[int, Optional[str]], int] = {}
        opts.tls = 1 if tls else 0
        opts.tls_insecure = 1 if tls_insecure else 0
        # string settings travel as URL query parameters: one parser (the
        # engine's) reads them, and the URL's own values come last, so win
        self._h = _capi.hilock_client_open(_with_query(url, settings), opts)
        self._id: str = _capi.hilock_client_id(self._h)
        _trace_logger.watch(self._h)
        _live_clients.add(self)

    @classmethod
    def from_redis(cls, r: Any, **kwargs: Any) -> "Client":
        """A hilock client to the server a configured ``redis.Redis`` talks
        to, with its credentials (username/password or credential
        provider), database, socket timeouts and TLS settings (CA file or
        directory, client certificate and key, ``ssl_cert_reqs="none"``).
        Keyword arguments as :class:`Client`'s win. Only one server: for a
        cluster or Sentinel pass the URL."""
        url, opts = _from_redis(r)
        opts.update(kwargs)
        return cls(url, **opts)

    # -- identity -----------------------------------------------------------

    @property
    def id(self) -> str:
        """The client's UUID: the first half of every owner string."""
        return self._id

    @property
    def url(self) -> str:
        """The URL the client was opened with, passwords shown as ``***``
        (for logs and messages; it cannot open another client)."""
        return self._url

    @property
    def closed(self) -> bool:
        return self._h is None

    def owner(self, thread_id: Optional[int] = None) -> str:
        """The owner string ``"<client-id>:<thread-id>"`` (calling thread by
        default) that this client writes into lock hashes."""
        tid = _check_tid(thread_id)
        return f"{self._id}:{tid if tid is not None else _capi.hilock_thread_id()}"

    @property
    def errmsg(self) -> str:
        """Detail of the last client-level failure (listener/watchdog
        connection trouble)."""
        with self._mu:
            if self._h is None:
                return "client closed"
            return str(_capi.hilock_client_errmsg(self._h))

    # -- locks --------------------------------------------------------------

    def _handle(self, kind: int, name: str) -> "_Handle":
        if not isinstance(name, str):
            raise TypeError(f"lock name must be a str, not {type(name).__name__}")
        # empty, too long, a NUL byte (C strings end there: "a\0b" would
        # silently be lock "a"): the engine's words, as every binding's
        _check_name(name)
        with self._mu:
            if self._h is None:
                raise ClosedError("closed: the client is closed", _capi.HILOCK_ECLOSED)
            key = (kind, name)
            h = self._handles.get(key)
            if h is None:
                owner = None
                if kind in (_capi.HILOCK_KIND_READ, _capi.HILOCK_KIND_WRITE):
                    # both sides belong to one C read-write lock, freed with it
                    owner = self._rwlocks.get(name)
                    if owner is None:
                        owner = self._rwlocks[name] = _capi.hilock_rwlock_new(self._h, name)
                    side = (_capi.hilock_rwlock_read_lock if kind == _capi.HILOCK_KIND_READ
                            else _capi.hilock_rwlock_write_lock)
                    ptr = side(owner)
                else:
                    new = {_capi.HILOCK_KIND_REENTRANT: _capi.hilock_lock_new,
                           _capi.HILOCK_KIND_FAIR: _capi.hilock_fair_lock_new,
                           _capi.HILOCK_KIND_FENCED: _capi.hilock_fenced_lock_new}[kind]
                    ptr = new(self._h, name)
                h = _Handle(self, ptr, name, kind, owner)
                self._handles[key] = h
            return h

    def lock(
        self,
        name: str,
        *,
        wait: Optional[Seconds] = None,
        lease: Optional[Seconds] = None,
        thread_id: Optional[int] = None,
    ) -> "Lock":
        """A reentrant lock named ``name`` (Redisson RLock layout).

        ``wait``/``lease`` are the defaults used by ``with lock:``;
        ``thread_id`` replaces the calling OS thread's id in the owner."""
        return Lock(self._handle(_capi.HILOCK_KIND_REENTRANT, name), wait, lease, thread_id)

    def fair_lock(
        self,
        name: str,
        *,
        wait: Optional[Seconds] = None,
        lease: Optional[Seconds] = None,
        thread_id: Optional[int] = None,
    ) -> "Lock":
        """A fair (FIFO) lock named ``name`` (Redisson FairLock layout)."""
        return Lock(self._handle(_capi.HILOCK_KIND_FAIR, name), wait, lease, thread_id)

    def fenced_lock(
        self,
        name: str,
        *,
        wait: Optional[Seconds] = None,
        lease: Optional[Seconds] = None,
        thread_id: Optional[int] = None,
    ) -> "FencedLock":
        """A fenced lock named ``name`` (Redisson RFencedLock layout): a
        reentrant lock whose every grant takes the next fencing token from
        ``redisson_lock_token:{name}``."""
        return FencedLock(self._handle(_capi.HILOCK_KIND_FENCED, name), wait, lease, thread_id)

    def read_write_lock(self, name: str) -> "ReadWriteLock":
        """A read-write lock named ``name`` (Redisson RReadWriteLock layout):
        many readers (``.read_lock()``) or one writer (``.write_lock()``)."""
        if not isinstance(name, str):
            raise TypeError(f"lock name must be a str, not {type(name).__name__}")
        return ReadWriteLock(self, name)

    def semaphore(self, name: str) -> "Semaphore":
        """A semaphore named ``name`` (Redisson RSemaphore layout)."""
        from ._semaphore import Semaphore
        return Semaphore(self, name)

    def permit_expirable_semaphore(self, name: str) -> "PermitExpirableSemaphore":
        """A semaphore whose permits have ids and leases (Redisson
        RPermitExpirableSemaphore layout)."""
        from ._semaphore import PermitExpirableSemaphore
        return PermitExpirableSemaphore(self, name)

    def count_down_latch(self, name: str) -> "CountDownLatch":
        """A count-down latch named ``name`` (Redisson RCountDownLatch layout)."""
        from ._semaphore import CountDownLatch
        return CountDownLatch(self, name)

    # -- statistics -----------------------------------------------------------

    @property
    def stats_names(self) -> int:
        """The per-name limit the client was made with (0: no per-name
        counters)."""
        return self._stats_names

    def stats(self, by_name: bool = False) -> Dict[str, Any]:
        """The client's counters (C ``hilock_client_stats``) as a dict:
        ``kinds`` maps each lock kind ("reentrant", "fair", "read", "write",
        "fenced") to its acquire outcomes (granted, timed_out, cancelled;
        granted_first_try / granted_woken / granted_retried), ``wait_ms`` and
        ``hold_ms`` (24 log2 millisecond buckets) and losses (lost_gone,
        lost_expired, lost_in_doubt); the top level holds the client's
        renewals, renewal_commands, renewal_failures, settles, reconnects,
        redirects and replica_ack_failures. docs/observability.md says what
        each means.

        ``by_name=True`` (a client made with ``stats_names`` > 0) adds
        ``names``: the per-name counters (C ``hilock_client_each_name_stats``),
        a list of dicts with ``kind``, ``name`` and the figures of a kind,
        one per tracked (kind, name) pair in the order first counted, then
        one per kind whose "other" entry (``name`` None) counted something.
        Raises ClosedError on a closed client, InvalidArgument for
        ``by_name=True`` without ``stats_names``."""
        if by_name and not self._stats_names:
            raise InvalidArgument("invalid argument: stats(by_name=True) needs a client made "
                                  "with stats_names > 0", _capi.HILOCK_EINVAL)
        with self._mu:
            if self._h is None:
                raise ClosedError("client is closed")
            out = _stats_from_tuple(_capi.hl_client_stats_tuple(self._h))
            pairs = _capi.hl_client_name_stats_list(self._h) if by_name else None
            probes = dict(self._probes)
            name_probes = dict(self._name_probes)
        # On the main thread a waiting acquire first tries once without a
        # helper thread; a miss there is not one of the caller's tries.
        for kind, n in probes.items():
            name = _KIND_NAMES.get(kind)
            if name is not None:
                out["kinds"][name]["busy"] -= n
        if pairs is not None:
            out["names"] = _names_from_list(pairs, name_probes)
        return out

    def _note_probe(self, kind: int, name: str) -> None:
        with self._mu:
            self._probes[kind] = self._probes.get(kind, 0) + 1
            if self._stats_names and self._h is not None:
                # the try was counted on its pair: in the pair's entry when
                # tracked (then all its counts are), else in the other entry;
                # so this map has at most stats_names + 5 keys
                key = (kind, name if _capi.hl_client_name_tracked(self._h, kind, name) else None)
                self._name_probes[key] = self._name_probes.get(key, 0) + 1

    # -- lifetime -----------------------------------------------------------

    def close(self) -> None:
        """Stop the watchdog and listener, close every connection. Held locks
        are not released: they stop being renewed and expire after their
        lease. Idempotent."""
        with self._mu:
            h, self._h = self._h, None
            self._pinned.clear()
        if h is not None and not self._inherited:
            _capi.hilock_client_close(h)

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._h is None else "open"
        return f"<hilock.Client {self._url!r} id={self._id} {state}>"


class _Handle:
    """One C lock handle (per client, kind and name), shared by the Lock
    views of that name. Keeps the client alive; the client keeps it alive
    (pins it) while Python believes something holds it, so that the watchdog
    keeps renewing a lock whose Lock object was dropped while held."""

    def __init__(self, client: Client, ptr: Any, name: str, kind: int, owner: Any = None) -> None:
        self.client = client
        self.owner = owner  # the C read-write lock a side belongs to (kept alive)
        self.ptr = ptr
        self.name = name
        self.kind = kind
        self.mu = threading.Lock()
        self.holds = 0
        self.token = 0
        self.listeners: "weakref.WeakSet[Lock]" = weakref.WeakSet()

    def pin(self, delta: int) -> None:
        with self.mu:
            before = self.holds
            self.holds = after = max(0, before + delta)
        if (before > 0) == (after > 0):
            return  # only a 0 <-> non-zero transition changes the pin
        client = self.client
        with client._mu:
            if after > 0 and client._h is not None:
                client._pinned.add(self)
            else:
                client._pinned.discard(self)

    def listen(self, view: "Lock") -> None:
        with self.mu:
            self.listeners.add(view)
            if self.token == 0:
                self.token = _dispatcher.register(self)
                _capi.hl_lock_watch_lost(self.ptr, self.token)

    def _fire_lost(self, tid: int) -> None:
        self.pin(-1)
        _call_listeners(self.listeners, tid)

    def __del__(self) -> None:
        if self.token:
            _dispatcher.unregister(self.token)


_G = TypeVar("_G", bound="_WithBlock")


def _check_on_lost(cb: Optional[LostCallback]) -> Optional[LostCallback]:
    if cb is not None and not callable(cb):
        raise TypeError("on_lost must be callable or None")
    return cb


class _WithBlock:
    """``with obj:`` acquires with the object's default wait and lease
    (LockTimeout when the wait elapses) and releases at the block's end
    (see _exit_release). Lock and MultiLock (RedLock) share it."""

    _kind = "lock"  # the word in the timeout message
    _wait: Optional[Seconds]
    _lease: Optional[Seconds]
    name: Any

    def acquire(self, wait: Any = None, lease: Optional[Seconds] = None) -> bool:
        raise NotImplementedError

    def __enter__(self: _G) -> _G:
        if not self.acquire(self._wait, self._lease):
            raise LockTimeout(
                f"timed out: {self._kind} {self.name!r} not acquired within {self._wait} s",
                _capi.HILOCK_ETIMEDOUT,
            )
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _exit_release(self, exc)


class Lock(_WithBlock):
    """A reentrant or fair lock. Get one with ``client.lock(name)`` or
    ``client.fair_lock(name)``.

    Ownership is per client and thread: the calling OS thread's id (the C
    default) or the ``thread_id`` given to ``client.lock()``. Several Lock
    objects of the same client and name share one C handle.
    """

    def __init__(
        self,
        handle: _Handle,
        wait: Optional[Seconds] = None,
        lease: Optional[Seconds] = None,
        thread_id: Optional[int] = None,
    ) -> None:
        self._h = handle
        self._tid = _check_tid(thread_id)
        # validate now so a bad default fails here, not at `with`
        _wait_ms(wait)
        _lease_ms(lease)
        self._wait = wait
        self._lease = lease
        self._on_lost: Optional[LostCallback] = None

    # -- properties ---------------------------------------------------------

    @property
    def name(self) -> str:
        return self._h.name

    @property
    def fair(self) -> bool:
        return bool(self._h.kind == _capi.HILOCK_KIND_FAIR)

    @property
    def kind(self) -> str:
        """``reentrant``, ``fair``, ``fenced``, ``read`` or ``write``."""
        return {_capi.HILOCK_KIND_REENTRANT: "reentrant", _capi.HILOCK_KIND_FAIR: "fair",
                _capi.HILOCK_KIND_FENCED: "fenced", _capi.HILOCK_KIND_READ: "read",
                _capi.HILOCK_KIND_WRITE: "write"}[self._h.kind]

    @property
    def client(self) -> Client:
        return self._h.client

    @property
    def thread_id(self) -> Optional[int]:
        """The explicit thread id given at creation, or None (calling thread)."""
        return self._tid

    # -- operations ---------------------------------------------------------

    def acquire(
        self,
        wait: Any = None,
        lease: Optional[Seconds] = None,
        *,
        blocking: Optional[bool] = None,
        timeout: Optional[Seconds] = None,
    ) -> bool:
        """Acquire (or re-enter) the lock.

        ``wait``: None = wait forever, 0 = one try, > 0 = at most that many
        seconds. ``lease``: None = watchdog (renewed while held), > 0 = the
        lock expires after that many seconds. Returns False when the wait
        elapsed. The GIL is released while waiting.

        threading.Lock's form works too: ``acquire(blocking=True,
        timeout=-1)``, ``acquire(False)``, ``acquire(True, 5)`` (then the
        lease is the watchdog).

        On the main thread a waiting acquire is interrupted by Ctrl-C
        (KeyboardInterrupt, or any exception a signal handler raises): it is
        cancelled, nothing is held or queued, and the exception propagates."""
        wait, lease = _protocol_args(wait, lease, blocking, timeout)
        w, l = _wait_ms(wait), _lease_ms(lease)
        ptr = self._h.ptr
        if w != 0 and _on_main_thread():
            tid = self._tid if self._tid is not None else int(_capi.hilock_thread_id())
            t0 = time.monotonic()
            try:
                ok = _capi.hilock_lock_acquire_tid(ptr, tid, 0, l)  # uncontended: no thread
            except NotAcknowledgedError:
                # a grant no replica acknowledged (given back; a single try
                # reports it as HILOCK_EUNACKED): the waiting call below
                # retries it for what is left of the wait, as a call without
                # this shortcut would; any other error, or no wait left, is
                # the answer
                if w > 0:
                    w = int(w - (time.monotonic() - t0) * 1000)
                    if w <= 0:
                        raise
                ok = False
            if not ok:
                # the C library counted that try as "busy"; the waiting
                # call below is the one acquire the caller made
                self._h.client._note_probe(self._h.kind, self._h.name)
                ok = _interruptible(
                    lambda: _capi.hilock_lock_acquire_tid(ptr, tid, w, l),
                    lambda: _capi.hilock_lock_cancel(ptr, tid),
                    lambda: _capi.hilock_lock_release_tid(ptr, tid))
        elif self._tid is None:
            ok = _capi.hilock_lock_acquire(ptr, w, l)
        else:
            ok = _capi.hilock_lock_acquire_tid(ptr, self._tid, w, l)
        if ok:
            self._h.pin(+1)
        return bool(ok)

    def release(self) -> None:
        """Release one hold. Raises NotOwnerError when this owner does not
        hold the lock (never held, expired, lost or forced)."""
        try:
            if self._tid is None:
                _capi.hilock_lock_release(self._h.ptr)
            else:
                _capi.hilock_lock_release_tid(self._h.ptr, self._tid)
        except NotOwnerError:
            self._h.pin(-1)
            raise
        self._h.pin(-1)

    def extend(self, lease: Seconds) -> None:
        """Add ``lease`` seconds to the remaining lease of this owner's hold,
        atomically on the server (as redis-py's ``Lock.extend``). Meant for
        a fixed lease; under the watchdog the next renewal sets the watchdog
        lease again. NotOwnerError when this owner does not hold it;
        InvalidArgument for a time <= 0 or a key without expiry."""
        ms = _to_ms(lease, "lease", zero_ok=False)
        if self._tid is None:
            _capi.hilock_lock_extend(self._h.ptr, ms)
        else:
            _capi.hilock_lock_extend_tid(self._h.ptr, self._tid, ms)

    def force_unlock(self) -> bool:
        """Delete the lock whoever holds it and wake a waiter. Returns
        whether there was a lock to delete."""
        return bool(_capi.hilock_lock_force_unlock(self._h.ptr))

    def locked(self) -> bool:
        """Whether anyone holds the lock."""
        return bool(_capi.hilock_lock_is_locked(self._h.ptr))

    def owned(self) -> bool:
        """Whether this owner (client + thread) holds the lock."""
        if self._tid is None:
            return bool(_capi.hilock_lock_is_held(self._h.ptr))
        return bool(_capi.hilock_lock_is_held_tid(self._h.ptr, self._tid))

    @property
    def hold_count(self) -> int:
        """How many times this owner holds the lock (0 = not held)."""
        if self._tid is None:
            return int(_capi.hilock_lock_hold_count(self._h.ptr))
        return int(_capi.hilock_lock_hold_count_tid(self._h.ptr, self._tid))

    @property
    def ttl(self) -> Optional[float]:
        """Remaining lease in seconds; None when the lock does not exist;
        math.inf when the key has no expiry (never set by hilock)."""
        ms = int(_capi.hilock_lock_remaining_ms(self._h.ptr))
        if ms == -2:
            return None
        if ms == -1:
            return math.inf
        return ms / 1000.0

    @property
    def lost(self) -> bool:
        """True once the watchdog found a hold of this lock gone (expired,
        forced, taken over); reset by the next successful acquire."""
        if self._tid is None:
            return bool(_capi.hilock_lock_is_lost(self._h.ptr))
        return bool(_capi.hilock_lock_is_lost_tid(self._h.ptr, self._tid))

    @property
    def on_lost(self) -> Optional[LostCallback]:
        """``callback(lock, thread_id)`` run when the watchdog finds a hold
        of this lock gone. It runs on the ``hilock-lost`` daemon thread,
        shortly after the C watchdog's detection (``lost`` is already True)."""
        return self._on_lost

    @on_lost.setter
    def on_lost(self, cb: Optional[LostCallback]) -> None:
        self._on_lost = _check_on_lost(cb)
        if cb is not None:
            self._h.listen(self)

    @property
    def errmsg(self) -> str:
        """Detail message of the last failure on the C handle."""
        return str(_capi.hilock_lock_errmsg(self._h.ptr))

    def __repr__(self) -> str:
        kind = "fair_lock" if self.fair else "lock"
        tid = "" if self._tid is None else f" thread_id={self._tid}"
        return f"<hilock.{kind} {self.name!r}{tid} client={self._h.client.id}>"


def _exit_release(obj: Any, exc: Optional[BaseException]) -> None:
    """Release at the end of a ``with`` block. When the block raised, that
    exception wins and a release failure is attached as a note; otherwise a
    lock that is no longer ours raises LockLostError (the block ran, but not
    necessarily under the lock)."""
    try:
        obj.release()
    except NotOwnerError as e:
        if exc is None:
            raise LockLostError(
                f"lock lost: {obj.name!r} was no longer held by this owner when the "
                f"with block ended ({e})",
                e.code,
                e.detail,
            ) from e
        _note(exc, f"hilock: release after the exception failed: {e}")
    except Error as e:
        if exc is None:
            raise
        _note(exc, f"hilock: release after the exception failed: {e}")


def _note(exc: BaseException, text: str) -> None:
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(text)


# --------------------------------------------------------------------------
# multi-lock and Redlock
# --------------------------------------------------------------------------


class MultiLock(_WithBlock):
    """All-or-nothing over several locks (any kinds, any clients).

    ``acquire`` takes every member or none. Members are Lock objects; their
    own thread_id/wait/lease defaults are not used: pass ``thread_id`` here.
    The MultiLock keeps its members (and their clients) alive."""

    _kind = "multilock"

    def __init__(
        self,
        locks: Iterable[Lock],
        *,
        wait: Optional[Seconds] = None,
        lease: Optional[Seconds] = None,
        thread_id: Optional[int] = None,
        member_timeout: Optional[Seconds] = None,
    ) -> None:
        members: List[Lock] = list(locks)
        for m in members:
            if not isinstance(m, Lock):
                raise TypeError(f"{type(self).__name__} members must be hilock.Lock objects")
        if not members:
            raise InvalidArgument(f"invalid argument: {type(self).__name__} needs at least one lock")
        self._members = members
        self._handles = [m._h for m in members]  # keep the C handles alive
        self._tid = _check_tid(thread_id)
        _wait_ms(wait)
        _lease_ms(lease)
        self._wait = wait
        self._lease = lease
        self._on_lost: Optional[LostCallback] = None
        self._token = 0
        self._mu = threading.Lock()
        self._ptr = self._new([h.ptr for h in self._handles])
        _live_multilocks.add(self)
        if member_timeout is not None:
            _capi.hilock_multilock_set_member_timeout(
                self._ptr, _to_ms(member_timeout, "member_timeout", zero_ok=False)
            )

    @staticmethod
    def _new(ptrs: List[Any]) -> Any:
        return _capi.hilock_multilock_new(ptrs)

    @property
    def locks(self) -> List[Lock]:
        return list(self._members)

    @property
    def thread_id(self) -> Optional[int]:
        return self._tid

    @property
    def name(self) -> str:
        return "+".join(m.name for m in self._members)

    def acquire(
        self,
        wait: Any = None,
        lease: Optional[Seconds] = None,
        *,
        blocking: Optional[bool] = None,
        timeout: Optional[Seconds] = None,
    ) -> bool:
        """Acquire (see Lock.acquire for wait/lease, threading.Lock's form
        and Ctrl-C). Returns False when the wait elapsed (or, for RedLock, no
        majority within validity)."""
        wait, lease = _protocol_args(wait, lease, blocking, timeout)
        w, l = _wait_ms(wait), _lease_ms(lease)
        if w != 0 and _on_main_thread():
            ptr = self._ptr
            tid = self._tid if self._tid is not None else int(_capi.hilock_thread_id())
            if _capi.hilock_multilock_acquire_tid(ptr, tid, 0, l):
                return True
            return _interruptible(
                lambda: _capi.hilock_multilock_acquire_tid(ptr, tid, w, l),
                lambda: _capi.hilock_multilock_cancel(ptr, tid),
                lambda: _capi.hilock_multilock_release_tid(ptr, tid))
        if self._tid is None:
            return bool(_capi.hilock_multilock_acquire(self._ptr, w, l))
        return bool(_capi.hilock_multilock_acquire_tid(self._ptr, self._tid, w, l))

    def release(self) -> None:
        """Release every member; NotOwnerError if one was not held (the others
        are still released)."""
        if self._tid is None:
            _capi.hilock_multilock_release(self._ptr)
        else:
            _capi.hilock_multilock_release_tid(self._ptr, self._tid)

    def owned(self) -> bool:
        if self._tid is None:
            return bool(_capi.hilock_multilock_is_held(self._ptr))
        return bool(_capi.hilock_multilock_is_held_tid(self._ptr, self._tid))

    @property
    def validity(self) -> Optional[float]:
        """Seconds of validity left from the last successful acquire (RedLock:
        lease - elapsed - clock drift) of this thread's (or thread_id's)
        hold; 0 when it holds nothing; None under the watchdog."""
        if self._tid is None:
            ms = int(_capi.hilock_multilock_validity_ms(self._ptr))
        else:
            ms = int(_capi.hilock_multilock_validity_ms_tid(self._ptr, self._tid))
        if ms < 0:
            return None
        return ms / 1000.0

    @property
    def lost(self) -> bool:
        return bool(_capi.hilock_multilock_is_lost(self._ptr))

    @property
    def on_lost(self) -> Optional[LostCallback]:
        return self._on_lost

    @on_lost.setter
    def on_lost(self, cb: Optional[LostCallback]) -> None:
        self._on_lost = _check_on_lost(cb)
        with self._mu:
            if cb is not None and self._token == 0:
                self._token = _dispatcher.register(self)
                _capi.hl_multilock_watch_lost(self._ptr, self._token)

    def _fire_lost(self, tid: int) -> None:
        _call_listeners([self], tid)

    @property
    def errmsg(self) -> str:
        return str(_capi.hilock_multilock_errmsg(self._ptr))

    def __del__(self) -> None:
        # free the C multi-lock before its member handles can go
        ptr = getattr(self, "_ptr", None)
        if ptr is not None and getattr(ptr, "thisown", False):
            self._ptr = None
            _capi.hilock_multilock_free(ptr)
        if getattr(self, "_token", 0):
            _dispatcher.unregister(self._token)

    def __repr__(self) -> str:
        return f"<hilock.{type(self).__name__} {self.name!r}>"


class FencedLock(Lock):
    """A reentrant lock whose grants carry fencing tokens (Redisson
    RFencedLock). ``acquire_token()`` returns the grant's token; pass it
    with every write so that the storage can refuse a writer whose lock
    expired (a lower token than one it has already seen)."""

    def acquire_token(
        self, wait: Optional[Seconds] = None, lease: Optional[Seconds] = None
    ) -> Optional[int]:
        """Acquire (or re-enter) like ``acquire``; returns the grant's
        fencing token, or None when the wait elapsed."""
        w, l = _wait_ms(wait), _lease_ms(lease)
        if self._tid is None:
            token = _capi.hilock_lock_acquire_token(self._h.ptr, w, l)
        else:
            token = _capi.hilock_lock_acquire_token_tid(self._h.ptr, self._tid, w, l)
        if not token:
            return None
        self._h.pin(+1)
        return int(token)

    @property
    def token(self) -> int:
        """The latest token issued for this name (0: none yet); while this
        owner holds the lock, the token of its latest grant."""
        return int(_capi.hilock_lock_token(self._h.ptr))


class ReadWriteLock:
    """Many readers or one writer (Redisson RReadWriteLock). Both sides
    are reentrant Locks; a writer may also take the read side."""

    def __init__(self, client: Client, name: str) -> None:
        self._client = client
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def read_lock(
        self,
        *,
        wait: Optional[Seconds] = None,
        lease: Optional[Seconds] = None,
        thread_id: Optional[int] = None,
    ) -> Lock:
        """The read side: shared with other readers, excluded by a writer."""
        return Lock(self._client._handle(_capi.HILOCK_KIND_READ, self._name), wait, lease,
                    thread_id)

    def write_lock(
        self,
        *,
        wait: Optional[Seconds] = None,
        lease: Optional[Seconds] = None,
        thread_id: Optional[int] = None,
    ) -> Lock:
        """The write side: excludes readers and other writers."""
        return Lock(self._client._handle(_capi.HILOCK_KIND_WRITE, self._name), wait, lease,
                    thread_id)

    def __repr__(self) -> str:
        return f"<hilock.ReadWriteLock {self._name!r}>"


class RedLock(MultiLock):
    """Redlock: a majority (n/2+1) of n locks, each on an independent Redis
    server, within the validity window (lease - elapsed - drift). On failure
    every member is unlocked."""

    _kind = "redlock"

    @staticmethod
    def _new(ptrs: List[Any]) -> Any:
        return _capi.hilock_redlock_new(ptrs)

    @property
    def warning(self) -> Optional[str]:
        """What the C library found at construction about members whose
        restart can lose the holds they granted (no AOF, an AOF not synced
        at every write, settings it could not read), one line per member;
        None when nothing. The same lines go to the logger ``hilock`` at
        WARNING. A member whose URL says ``delayed_restart=1`` is not
        checked (docs/safety.md, "Redlock")."""
        w = _capi.hilock_multilock_warning(self._ptr)
        return str(w) if w else None
