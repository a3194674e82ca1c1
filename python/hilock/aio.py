"""hilock.aio: hilock's locks for asyncio, on the same engine as the C library.

    import hilock.aio

    async def main() -> None:
        client = await hilock.aio.connect("redis://127.0.0.1:6379/0")
        async with client.lock("orders:42", wait=5.0):
            ...                      # held; the watchdog keeps it alive
        await client.close()

This module is a driver: it opens connections with the running loop
(plain sockets read and written by ``hilock._engine.Wire`` through
loop.add_reader, TLS through the loop's transports; uvloop works too),
writes the bytes the engine's machines (``hilock._engine``, libcore's
protocol layer) ask for and feeds the replies back. Every decision -- what
to send, what a reply means, when to wait and for how long, how to settle an
attempt whose reply never came -- is the engine's; this file names no
command, script, key, channel or server error (tests/lint checks it).

Per client: a small pool of connections (one command in flight on each), one
pub/sub connection shared by every waiter (an unlock message wakes one waiter
of that channel, a read-write "wake all" message every one), and one loop
timer at the session's next deadline (the engine's hold table says when each
hold taken without a lease is renewed, in one pipelined round trip per
server, or reported "in doubt"). No thread is started: a waiting acquire is
a suspended coroutine.

Owners: ``"<client-id>:<thread-id>"`` with the thread id taken per asyncio
task -- each task gets its own number (:func:`task_id`) the first time it
uses a lock, so two tasks of one client never share a hold, and a task keeps
its number for its whole life. ``thread_id=`` on ``client.lock()`` picks an
explicit one instead.

Cancelling a waiting acquire (``task.cancel()``, ``asyncio.timeout()``,
``asyncio.wait_for``) ends it through the engine's cancel input: a fair
waiter leaves the queue, the subscription is dropped, a grant that raced
with the cancel is given back, and then the CancelledError propagates.

Supported URLs: ``redis://``, ``rediss://`` (TLS), ``unix://``,
``redis[s]+sentinel://`` (the master asked of the sentinels, followed on
failover, grants acknowledged by a replica) and ``redis[s]+cluster://``
(the slot map asked of any node, a pool and a pub/sub connection per
master, redirects and retries as the engine's router decides, sharded
pub/sub on the slot's master, grants acknowledged by a replica).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import math
import os
import random
import socket
import ssl
import time
import uuid
import weakref
from types import TracebackType
from typing import (
    Any,
    Awaitable,
    Callable,
    Deque,
    Dict,
    List,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    Union,
)

from . import _engine as _E_module
# the blocking API's argument rules, shared: seconds -> ms, thread ids, notes
from ._core import (_check_stats_names, _check_tid, _figures_from, _from_redis, _lease_ms,
                    _note, _protocol_args, _redact_url, _stats_from_tuple, _to_ms, _wait_ms)
from ._errors import (
    ClosedError,
    Error,
    InvalidArgument,
    LockLostError,
    LockTimeout,
    NotOwnerError,
    from_code,
)

_E: Any = _E_module  # the extension carries no type information


def _mono_ms() -> int:
    """The session's clock (monotonic ms)."""
    return int(time.monotonic() * 1000)

__all__ = [
    "connect",
    "Client",
    "Lock",
    "FencedLock",
    "ReadWriteLock",
    "MultiLock",
    "RedLock",
    "Semaphore",
    "PermitExpirableSemaphore",
    "CountDownLatch",
    "task_id",
]

Seconds = Union[int, float]
LostCallback = Callable[[Any, int], Any]

_SEND = _E.ACT_SEND
_SUBSCRIBE = _E.ACT_SUBSCRIBE
_WAIT = _E.ACT_WAIT
_UNSUBSCRIBE = _E.ACT_UNSUBSCRIBE
_DONE = _E.ACT_DONE
_LONG_WAIT_MS = 60000  # "until a message": look again at least this often
_MAX_REDIRECTS = 20    # sentinel: "no master" answers followed per command
_REDIRECT_PAUSE_MS = 100  # between them (a failover takes a moment)

_log = logging.getLogger("hilock")


# --------------------------------------------------------------------------
# statistics: the blocking client's counters (hilock_client_stats), kept by
# this driver with the same names and meanings (docs/observability.md)
# --------------------------------------------------------------------------

# one kind's figures, in hilock_kind_stats's order (what _stats_from_tuple reads)
(_S_GRANTED, _S_TIMED_OUT, _S_CANCELLED, _S_BUSY, _S_FIRST, _S_WOKEN,
 _S_RETRIED) = range(7)
_S_BUCKETS = 24                      # HILOCK_STATS_BUCKETS
_S_WAIT = 7                          # wait_ms[24]
_S_HOLD = _S_WAIT + _S_BUCKETS       # hold_ms[24]
_S_LOST_EXPIRED = _S_HOLD + _S_BUCKETS
_S_LOST_GONE = _S_LOST_EXPIRED + 1
_S_LOST_DOUBT = _S_LOST_EXPIRED + 2
_S_LEN = _S_LOST_EXPIRED + 3
# the client's figures, in hilock_stats's order
(_C_RENEWALS, _C_RENEWAL_COMMANDS, _C_RENEWAL_FAILURES, _C_SETTLES, _C_RECONNECTS,
 _C_REDIRECTS, _C_REPLICA_ACK_FAILURES) = range(7)
_KINDS = 6                           # HILOCK_STATS_KINDS (index: the lock kind; 0 unused)
_GRANT_FIRST, _GRANT_WOKEN, _GRANT_RETRIED = _S_FIRST, _S_WOKEN, _S_RETRIED
_KIND_NAME = {1: "reentrant", 2: "fair", 3: "read", 4: "write", 5: "fenced"}  # hilock_kind


def _bucket(ms: float) -> int:
    """The log2 millisecond bucket of ms (as libcore's hl_stats_bucket)."""
    return 0 if ms < 1 else min(int(ms).bit_length(), _S_BUCKETS - 1)


def _grant_path(waits: List[int]) -> int:
    """How a grant came, from its acquire's waits (1: ended by a message or
    a cancel, 0: by its timer), as the blocking acquire tells it: none is
    the first try, else the last one decides."""
    return _GRANT_FIRST if not waits else _GRANT_WOKEN if waits[-1] else _GRANT_RETRIED


# --------------------------------------------------------------------------
# times and owners
# --------------------------------------------------------------------------


_task_ids: "weakref.WeakKeyDictionary[asyncio.Task[Any], int]" = weakref.WeakKeyDictionary()
_next_task_id = itertools.count(1)


def task_id() -> int:
    """The thread id the current asyncio task owns locks under: a number
    given to each task the first time it asks (per process, from 1), kept
    for the task's life. Outside a task: RuntimeError."""
    t = asyncio.current_task()
    if t is None:
        raise RuntimeError("hilock.aio: no running asyncio task")
    tid = _task_ids.get(t)
    if tid is None:
        tid = _task_ids[t] = next(_next_task_id)
    return tid


# this process's id, for request ids (a release runs one: no getpid() call
# each time); a forked child takes its own. A list: the engine's Direct
# reads item 0 too.
_pid_box = [os.getpid()]


def _after_fork() -> None:
    _pid_box[0] = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _raise(code: int, detail: str = "") -> None:
    raise from_code(code, detail)


def _answered(code: int, conn: Any, reply: Any) -> Error:
    """The error of a command the router gave up on: which server answered
    what (the server's own error text, cut short)."""
    text = str(reply.error or "")
    if len(text) > 200:
        text = text[:200] + "..."
    return from_code(code, f"{conn.what} answered {text!r}")


# --------------------------------------------------------------------------
# connections
# --------------------------------------------------------------------------


# The future of one reply (hilock._engine.ReplyFuture): asyncio.Future's
# protocol plus wake_now(), which a connection's read callback uses to run
# the waiting task at once instead of one loop iteration later (see its
# docstring in python/_engine.c).
_Fut: Any = _E.ReplyFuture


# One command on a connection (hilock._engine.Req): its connection, fut (the
# ReplyFuture its waiter awaits), reply (or None), failed (the connection
# closed under it) and deadline (the loop time after which a waiter gives
# up on it; 0: nobody waits). A C object: built twice per acquire+release.
_Req: Any = _E.Req


def _wake(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


_RECV_BUF = 16384  # per connection: replies and messages are small


class _Conn(_E.ConnBase, asyncio.BufferedProtocol):  # type: ignore[misc]
    """One connection: bytes out, replies in (the engine's reader), matched
    in order to the commands sent. Replies nobody asked for (pub/sub
    messages) go to on_push.

    A BufferedProtocol: the transport reads into this connection's own
    buffer (a plain Protocol makes the selector loop allocate a 256 KiB
    bytes object per read, which glibc may serve with mmap/munmap: tens of
    microseconds a round trip). One timer per connection, armed at the
    earliest deadline of a request being waited for and left running while
    replies come in time, replaces a timer per request."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 on_push: Optional[Callable[[Any], None]] = None,
                 on_close: Optional[Callable[["_Conn"], None]] = None) -> None:
        self.loop = loop
        self.reader = _E.Reader()
        self.buf = bytearray(_RECV_BUF)
        self.pending: Deque[_Req] = collections.deque()
        self.transport: Optional[asyncio.Transport] = None
        self.closed = False
        self.on_push = on_push
        self.on_close = on_close
        self.broken = False  # a reply timed out: never reused
        self.gen = 0  # the client's master generation it was opened in
        self.timer: Optional[asyncio.TimerHandle] = None
        self.timer_at = 0.0
        self.pool: Optional["_Pool"] = None  # the pool it belongs to (None: pub/sub)
        self.what = ""  # "host:port" or the socket path, for messages

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def attach(self, sock: socket.socket) -> None:
        """A plain (not TLS) connected socket, read and written by the
        engine's Wire instead of an asyncio transport: it parses, matches
        and wakes in one C call per read (python/_engine_wire.c). The Wire
        takes the fd over; it stands where the transport would (write,
        close)."""
        wire = _E.Wire(sock.detach(), self.loop, self.reader, self.pending, self._on_wire)
        self.transport = wire
        if self.closed:  # closed (abandoned) while connecting
            wire.close()
            return
        self.loop.add_reader(wire.fileno(), wire)

    def _on_wire(self, r: Any) -> None:
        """The Wire's word: a reply nobody asked for (a message), or None
        (end of stream, a socket error, a stream the reader cannot parse)."""
        if r is None:
            self.close()
        elif self.on_push is not None:
            self.on_push(r)

    def get_buffer(self, sizehint: int) -> bytearray:
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        # the TLS read path: the replies handed out as a Wire hands them
        # (a stream the reader cannot parse: nothing more to trust)
        if not self.reader.deliver(self.buf, nbytes, self.pending, self._on_wire):
            self.close()

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self._closed()

    def _closed(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        while self.pending:
            req = self.pending.popleft()
            req.failed = True
            if not req.fut.done():
                req.fut.set_result(None)
        if self.on_close is not None:
            self.on_close(self)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self._closed()

    def give(self) -> None:
        """Back to its pool (which closes it if it cannot be used again),
        or closed when it has none."""
        if self.pool is not None:
            self.pool.put(self)
        else:
            self.close()

    def request(self, data: bytes) -> _Req:
        req = _Req(self, _Fut(self.loop))
        if self.closed or self.transport is None:
            req.failed = True
            req.fut.set_result(None)
            return req
        self.pending.append(req)
        self.transport.write(data)
        return req

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def arm(self, at: float) -> None:
        """Make sure the timer fires by loop time at."""
        if self.timer is None or at < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer_at = at
            self.timer = self.loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        now = self.loop.time()
        nxt = 0.0
        for req in self.pending:
            d = req.deadline
            if d and not req.fut.done():
                if d <= now + 1e-6:
                    req.fut.set_result(None)  # no reply in time: the waiter decides
                elif not nxt or d < nxt:
                    nxt = d
        if nxt:
            self.arm(nxt)


async def _await_req(loop: asyncio.AbstractEventLoop, req: _Req, timeout_ms: int) -> int:
    """Wait for req's reply up to timeout_ms. Returns 0
    (reply in req.reply), 1 (no reply in time: the connection is left as it
    is, the reply may still come) or 2 (the connection closed). A
    cancellation during the wait is remembered, the wait goes on, and
    CancelledError is raised once the outcome is known (the caller must
    first feed it to its machine: see _Cancel)."""
    fut = req.fut
    if fut.done() and req.reply is None and not req.failed:
        fut = req.fut = _Fut(loop)  # waited before and timed out: wait again
    if not fut.done():
        req.deadline = d = loop.time() + timeout_ms / 1000.0
        req.conn.arm(d)
        try:
            await fut
        finally:
            req.deadline = 0.0
    if req.reply is not None:
        return 0
    return 2 if req.failed else 1


class _Cancel:
    """Remembers a CancelledError that arrived while a machine had a
    command in flight or was waiting, so the machine can be finished first."""

    exc: Optional[BaseException] = None  # a class default: no __init__ to run per call

    async def req(self, loop: asyncio.AbstractEventLoop, req: _Req, timeout_ms: int) -> int:
        """_await_req, finishing the wait when cancelled (see the class)."""
        fut = req.fut
        if not fut.done():
            # the usual case, inline (no coroutine per layer on the hot path)
            req.deadline = deadline = loop.time() + timeout_ms / 1000.0
            conn = req.conn
            if conn.timer is None or deadline < conn.timer_at:
                conn.arm(deadline)
            try:
                await fut
            except asyncio.CancelledError as e:
                self.exc = self.exc or e
                if req.fut.cancelled():
                    req.fut = _Fut(loop)
                    if req.reply is not None or req.failed:
                        req.fut.set_result(None)
                timeout_ms = max(1, int((deadline - loop.time()) * 1000))
            else:
                req.deadline = 0.0
                if req.reply is not None:
                    return 0
                return 2 if req.failed else 1
        else:
            deadline = loop.time() + timeout_ms / 1000.0
        while True:
            try:
                return await _await_req(loop, req, timeout_ms)
            except asyncio.CancelledError as e:
                if self.exc is None:
                    self.exc = e
                if req.fut.cancelled():
                    req.fut = _Fut(loop)
                    if req.reply is not None or req.failed:
                        req.fut.set_result(None)
                timeout_ms = max(1, int((deadline - loop.time()) * 1000))

    async def sleep(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        fut: "asyncio.Future[None]" = loop.create_future()
        h = loop.call_later(seconds, _wake, fut)
        try:
            await self.sleep_on(fut)
        finally:
            h.cancel()

    async def sleep_on(self, fut: "asyncio.Future[None]") -> None:
        try:
            await fut
        except asyncio.CancelledError as e:
            if self.exc is None:
                self.exc = e


class _Pool:
    """Connections to one server (the client's endpoint or master; on a
    cluster one pool per master, addr), one command in flight on each."""

    def __init__(self, client: "Client", size: int,
                 addr: Optional[Tuple[str, int]] = None) -> None:
        self.client = client
        self.size = size
        self.addr = addr
        self.idle: List[_Conn] = []
        self.nopen = 0
        # callers waiting for a connection: each future gets one, None (a
        # place is free: open one) or False (stalled: _stalled)
        self.waiting: Deque["asyncio.Future[Any]"] = collections.deque()
        self.moved = 0.0  # loop time a connection was last given back or a place freed
        self.retired = False  # cluster: its node left the slot map (see retire)
        # every connection open, idle or carrying a command: close() ends
        # them all, also one a call took and never gave back
        self.conns: Set[_Conn] = set()

    def get_nowait(self) -> Optional[_Conn]:
        idle = self.idle
        gen = self.client._gen
        while idle:
            c = idle.pop()
            if not c.closed and c.gen == gen:
                return c
            c.close()  # closed, or to a master that is no more
        return None

    async def get(self, _since: float = 0.0) -> _Conn:
        """A connection of this pool: an idle one, a new one while fewer
        than size are open, else the next one given back (callers served in
        turn). A caller waits while the pool moves; when no connection was
        given back and no place freed for command_timeout + connect_timeout
        (the bound of libcore's hl_pool_get), ConnectionError: no call waits
        for a connection forever, however its places were lost."""
        c = self.get_nowait()
        if c is not None:
            return c
        client = self.client
        if client._closed:
            raise ClosedError("closed: the client is closed", _E.E_CLOSED)
        if self.retired:
            raise self._gone()
        if self.nopen < self.size:
            self.nopen += 1
            try:
                c = await client._open_conn(self._on_close, addr=self.addr)
                c.pool = self
                self.conns.add(c)  # open: _open_conn raises for one closed already
                return c
            except BaseException:
                self.nopen -= 1
                self._hand_on()
                raise
        loop = client._loop
        if not _since:
            _since = loop.time()
        fut: "asyncio.Future[Any]" = loop.create_future()
        self.waiting.append(fut)
        timer: List[asyncio.TimerHandle] = []  # the stall timer, rearmed while the pool moves
        timer.append(loop.call_at(self._stall_at(_since), self._stalled, fut, _since, timer))
        try:
            got = await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                got = fut.result()
                if got is None:
                    self._hand_on()  # a free place it will not use: the next waiter's
                elif got is not False:
                    self.put(got)
            raise
        finally:
            for h in timer:
                h.cancel()
        if got is False:
            try:
                self.waiting.remove(fut)
            except ValueError:
                pass
            raise from_code(_E.E_CONN, f"no free connection in the pool (size {self.size}): "
                            f"none given back for {client._cmd_ms + client._connect_ms} ms")
        if got is None:  # a place freed up: open one
            return await self.get(_since)
        return got  # type: ignore[no-any-return]

    def _stall_at(self, since: float) -> float:
        """Loop time at which a caller waiting since then gives up: the bound
        after its arrival or the pool's last move, whichever is later."""
        client = self.client
        return max(since, self.moved) + (client._cmd_ms + client._connect_ms) / 1000.0

    def _stalled(self, fut: "asyncio.Future[Any]", since: float,
                 timer: List[asyncio.TimerHandle]) -> None:
        if fut.done():
            return
        at = self._stall_at(since)
        loop = self.client._loop
        if loop.time() + 1e-6 < at:  # the pool moved meanwhile: wait on
            timer.append(loop.call_at(at, self._stalled, fut, since, timer))
            return
        fut.set_result(False)  # no connection in time

    def drop_idle(self) -> None:
        for c in self.idle:
            c.close()
        self.idle.clear()

    def put(self, c: _Conn) -> None:
        if self.waiting:
            self.moved = self.client._loop.time()
        if (c.closed or c.broken or c.pending or self.client._closed or self.retired
                or c.gen != self.client._gen):
            c.close()
            return
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_result(c)
                return
        self.idle.append(c)

    def _hand_on(self) -> None:
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _on_close(self, c: _Conn) -> None:
        self.conns.discard(c)
        self.nopen -= 1
        if self.waiting:
            self.moved = self.client._loop.time()
        self._hand_on()

    def close(self) -> None:
        self.idle.clear()
        for c in list(self.conns):
            c.close()
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_exception(ClosedError("closed: the client is closed", _E.E_CLOSED))

    def _gone(self) -> Error:
        host, port = self.addr or ("?", 0)
        return from_code(_E.E_CONN, f"{host}:{port} is no master in the cluster's slot map "
                         "any more")

    def retire(self) -> None:
        """Cluster: its node serves no slot any more. Idle connections are
        closed now; one carrying a command finishes it and is closed when
        given back; a caller waiting for a connection gets a connection
        error (the router then looks at the slot map again)."""
        self.retired = True
        for c in self.idle:
            c.close()
        self.idle.clear()
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_exception(self._gone())


# --------------------------------------------------------------------------
# pub/sub: one connection per client, waiters per channel
# --------------------------------------------------------------------------


class _Waiter:
    """One acquire (or multi-lock) listening on channels. woken: a wake-up
    arrived that it has not used yet; fut: set while it sleeps; moved: a
    channel it listened on is gone from its connection (cluster: the slot
    moved, or the node's connection closed), so it must subscribe again."""

    __slots__ = ("fut", "woken", "moved")

    def __init__(self) -> None:
        self.fut: Optional["asyncio.Future[None]"] = None
        self.woken = False
        self.moved = False

    def move(self) -> None:
        self.moved = True
        self.wake()

    def wake(self) -> None:
        self.woken = True
        if self.fut is not None and not self.fut.done():
            self.fut.set_result(None)


class _MemberWaiter(_Waiter):
    """A multi-lock's listener on one member's channel: passes a wake-up
    on to the call's waiter only while the member is held by another owner
    (the engine's hl_ml_wakes_on); the call's own take-back of a member it
    took is announced on that channel too, and must not wake it."""

    __slots__ = ("parent", "armed")

    def __init__(self, parent: _Waiter) -> None:
        super().__init__()
        self.parent = parent
        self.armed = True

    def move(self) -> None:
        self.parent.move()

    def wake(self) -> None:
        if self.armed:
            self.parent.wake()


class _Hold:
    """One hold of this client (in the session's hold table under its key),
    listening on its lock's channel (the engine's hold_channel): the lock's
    names, owner and thread, where it listens, and its check's state."""

    __slots__ = ("names", "owner", "tid", "ps", "releasing", "after")

    def __init__(self, names: Any, owner: str, tid: int) -> None:
        self.names = names
        self.owner = owner
        self.tid = tid
        self.ps: Optional["_PubSub"] = None
        self.releasing = 0  # releases of it under way: a "gone" then is theirs to say
        self.after = False  # found gone during a release: checked again after it, if kept


class _Channel:
    __slots__ = ("name", "members", "ready", "wakes", "holders")

    def __init__(self, name: str, ready: "asyncio.Future[bool]") -> None:
        self.name = name
        self.members: Dict[_Waiter, None] = {}
        # holds of this client listening here (Client._hold_start): a lock
        # message makes them check their hold; they take no waiter's wake-up
        self.holders: Dict[Tuple[int, str, str], None] = {}
        self.ready = ready
        # the engine's wake rule of a semaphore or latch channel (SemNames.wakes:
        # reply -> -1 all, n waiters); None: a lock's (lock_wakes)
        self.wakes: Optional[Callable[[Any], int]] = None


class _PubSub:
    """One pub/sub connection and its channels: the client's (one server,
    sentinel) or, on a cluster, one per master (addr) with shard channels."""

    def __init__(self, client: "Client", addr: Optional[Tuple[str, int]] = None) -> None:
        self.client = client
        self.addr = addr
        self.sharded = client._cluster
        self.conn: Optional[_Conn] = None
        self.connecting: Optional["asyncio.Future[Optional[_Conn]]"] = None
        self.channels: Dict[str, _Channel] = {}
        self.unsub_pending: Dict[str, int] = {}
        self.subscribing: Deque[str] = collections.deque()  # sharded: answers due, in order
        # the session's liveness rule of the connection (hilock._engine.Sublive):
        # a PING when nothing was heard for an interval, the connection given
        # up when that is unanswered as long again, and while it is not known
        # alive its holds checked on the command connection (a force unlock
        # published on a connection that delivers nothing goes unheard)
        self.live = _E.Sublive(client._cmd_ms or 0)
        self.live_timer: Optional[asyncio.TimerHandle] = None
        self.live_at = 0

    async def _connection(self) -> Optional[_Conn]:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        if self.connecting is not None:
            return await asyncio.shield(self.connecting)
        loop = self.client._loop
        self.connecting = loop.create_future()
        conn: Optional[_Conn] = None
        try:
            conn = await self.client._open_conn(self._on_close, on_push=self._on_push,
                                                addr=self.addr)
        except Error:
            conn = None
        except asyncio.CancelledError:
            conn = None
            raise
        finally:
            self.conn = conn
            fut, self.connecting = self.connecting, None
            fut.set_result(conn)
        if conn is not None and not conn.closed:
            self.live.opened(_mono_ms())  # not known alive until a frame is heard
            self._live_arm()
        return conn

    def _subscribe(self, conn: _Conn, name: str) -> None:
        """Subscribe conn to channel name (sharded: its answer is awaited
        in order) and start the liveness rule if it was idle."""
        if self.sharded:
            self.subscribing.append(name)
        conn.write(_E.subscribe_cmd(name, self.sharded))
        self._live_start()

    def _live_start(self) -> None:
        """A channel is listened to on a kept connection the rule was idle
        for (nothing listened): not known alive until a frame is heard."""
        conn = self.conn
        if conn is not None and not conn.closed and self.live.next() < 0:
            self.live.opened(_mono_ms())
            self._live_arm()

    def _live_arm(self) -> None:
        """Make sure the liveness timer fires by the rule's next deadline."""
        nxt = self.live.next()
        if nxt < 0 or self.client._closed:
            return
        if self.live_timer is not None:
            if self.live_at <= nxt:
                return
            self.live_timer.cancel()
        self.live_at = nxt
        self.live_timer = self.client._loop.call_later(
            max(0, nxt - _mono_ms()) / 1000.0, self._live_tick)

    def _live_tick(self) -> None:
        """What the liveness rule has due (Sublive.due): the holds listening
        here checked, the connection given up (it is listened on again as
        after any loss), or a PING written."""
        self.live_timer = None
        if self.client._closed:
            return
        if not self.channels:
            self.live.idle()  # nothing listens: nothing to check
            return
        due = self.live.due(_mono_ms())
        if due & _E.SUBLIVE_CHECK:
            self.client._unheard([k for c in self.channels.values() for k in c.holders])
        conn = self.conn
        if conn is not None and not conn.closed:
            if due & _E.SUBLIVE_RESET:
                conn.close()  # _on_close: a new connection subscribes again
            elif due & _E.SUBLIVE_PING:
                conn.write(_E.ping_cmd())
        self._live_arm()

    def _on_push(self, r: Any) -> None:
        # any frame (a message, a confirmation, a PING's answer): it delivers
        self.live.heard(_mono_ms())
        if self.sharded and r.error is not None:
            # a subscription refused (its slot is not served here): the
            # oldest one awaiting its answer; its waiters look again
            self.client._map_stale = True
            while self.subscribing:
                c = self.channels.get(self.subscribing.popleft())
                if c is not None and not c.ready.done():
                    self._moved(c)
                    break
            return
        typ, ch, _payload = _E.decode_pubsub(r)
        if typ == _E.PS_MESSAGE:
            c = self.channels.get(ch)
            if c is None:
                return
            if c.holders:
                # the session says which holds are to be checked (an unlock
                # or force unlock of the lock: are they still there?)
                self.client._heard(list(c.holders), r)
            # the engine's wake rule of the channel (a lock's, a semaphore's
            # or a latch's): how many of its waiters this frame wakes
            self._wake_n(c, (c.wakes or _E.lock_wakes)(r))
        elif typ == _E.PS_SUBSCRIBE:
            if self.sharded:
                try:
                    self.subscribing.remove(ch)
                except ValueError:
                    pass
            c = self.channels.get(ch)
            if c is not None and not c.ready.done():
                c.ready.set_result(True)
            if c is not None and c.holders:
                # holds granted before this took effect: a force unlock
                # published meanwhile went unheard (the session has them checked)
                self.client._heard(list(c.holders), r)
        elif typ == _E.PS_UNSUBSCRIBE:
            n = self.unsub_pending.get(ch, 0)
            if n > 0:
                if n == 1:
                    del self.unsub_pending[ch]
                else:
                    self.unsub_pending[ch] = n - 1
            elif self.sharded:
                # not asked for: the server dropped the shard channel, its
                # slot moved to another master
                c = self.channels.get(ch)
                if c is not None:
                    self.client._map_stale = True
                    self._moved(c)

    def _moved(self, c: _Channel) -> None:
        """The channel is no longer heard here: forget it, tell its waiters
        (their machines subscribe again where the slot map says)."""
        if self.channels.get(c.name) is c:
            del self.channels[c.name]
        if not c.ready.done():
            c.ready.set_result(False)
        for w in list(c.members):
            w.move()
        if c.holders:
            # the holders listen again where the slot lives now, and look
            # (a message may have gone while nobody heard it)
            self.client._holds_moved(list(c.holders))

    @staticmethod
    def _wake_one(c: _Channel) -> None:
        # prefer a member asleep now; else one that will look before sleeping
        spare = None
        for w in c.members:
            if not w.woken:
                if w.fut is not None:
                    w.wake()
                    return
                if spare is None:
                    spare = w
        if spare is not None:
            spare.wake()

    @classmethod
    def _wake_n(cls, c: _Channel, n: int) -> None:
        if n < 0:
            for w in c.members:
                w.wake()
            return
        for _ in range(min(n, len(c.members))):
            cls._wake_one(c)

    def _on_close(self, conn: _Conn) -> None:
        if self.conn is conn:
            self.conn = None
            # its holds checked at once (a message may have gone with it)
            self.live.closed(_mono_ms())
            self._live_arm()
        self.unsub_pending.clear()
        self.subscribing.clear()
        if self.sharded:
            # the master may be gone (failover): every waiter subscribes
            # again where the reloaded slot map says
            if not self.client._closed:
                self.client._map_stale = True
            for c in list(self.channels.values()):
                self._moved(c)
            return
        chans = list(self.channels.values())
        for c in chans:
            if not c.ready.done():
                c.ready.set_result(False)
        if chans and not self.client._closed:
            # messages may be lost from now on: listen again, then everyone retries
            self.client._spawn(self._resubscribe())

    async def _resubscribe(self) -> None:
        delay = 0.05
        while self.channels and not self.client._closed:
            conn = await self._connection()
            if conn is not None:
                self.client._st[_C_RECONNECTS] += 1
                _log.warning("pub/sub listener connected again; waits woken to try again")
                loop = self.client._loop
                for name, c in list(self.channels.items()):
                    if c.ready.done():
                        c.ready = loop.create_future()
                    conn.write(_E.subscribe_cmd(name, self.sharded))
                for c in list(self.channels.values()):
                    for w in list(c.members):
                        w.wake()
                # the holds are checked once each subscription is confirmed
                # (a message may have been missed meanwhile)
                return
            for c in list(self.channels.values()):
                for w in list(c.members):
                    w.wake()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def join(self, name: str, w: _Waiter, timeout_ms: int,
                   wakes: Optional[Callable[[Any], int]] = None) -> bool:
        """Make w a member of channel name, subscribed. False: could not
        subscribe (the machine then falls back to timed retries). wakes:
        the channel's wake rule when it is no lock's. Cancelled while
        joining: w is no member (its caller never learns where it joined)."""
        try:
            return await self._join(name, w, timeout_ms, wakes)
        except BaseException:
            self.leave(name, w)
            raise

    async def _join(self, name: str, w: _Waiter, timeout_ms: int,
                    wakes: Optional[Callable[[Any], int]]) -> bool:
        c = self.channels.get(name)
        if c is None:
            c = _Channel(name, self.client._loop.create_future())
            c.wakes = wakes
            self.channels[name] = c
            c.members[w] = None
            conn = await self._connection()
            if conn is None:
                self.leave(name, w)
                return False
            if self.channels.get(name) is not c:  # moved or closed meanwhile
                return False
            self._subscribe(conn, name)
        else:
            c.members[w] = None
        if not c.ready.done():
            fut = c.ready
            h = self.client._loop.call_later(timeout_ms / 1000.0, _wake_false, fut)
            try:
                await asyncio.shield(fut)
            finally:
                h.cancel()
        ok = bool(c.ready.result()) if c.ready.done() else False
        return ok and self.channels.get(name) is c

    def observe_now(self, name: str, key: Tuple[int, str, str]) -> bool:
        """observe without waiting, when it needs no new connection (the
        usual case: no task made per hold). False: use observe."""
        c = self.channels.get(name)
        if c is not None:
            c.holders[key] = None
            return True
        conn = self.conn
        if conn is None or conn.closed or self.connecting is not None:
            return False
        c = _Channel(name, self.client._loop.create_future())
        self.channels[name] = c
        c.holders[key] = None
        self._subscribe(conn, name)
        return True

    async def observe(self, name: str, key: Tuple[int, str, str]) -> None:
        """Make hold key listen on channel name (subscribed once per name,
        shared with its waiters and the name's other holds). A subscription
        that cannot be made leaves the hold unheard here (its watchdog still
        renews it)."""
        c = self.channels.get(name)
        if c is not None:
            c.holders[key] = None
            return
        c = _Channel(name, self.client._loop.create_future())
        self.channels[name] = c
        c.holders[key] = None
        conn = await self._connection()
        if conn is None:
            self.unobserve(name, key)
            return
        if self.channels.get(name) is not c:  # moved, closed or let go meanwhile
            return
        self._subscribe(conn, name)

    def unobserve(self, name: str, key: Tuple[int, str, str]) -> None:
        c = self.channels.get(name)
        if c is None or key not in c.holders:
            return
        del c.holders[key]
        self._drop_idle(name, c)

    def leave(self, name: str, w: _Waiter) -> None:
        c = self.channels.get(name)
        if c is None or w not in c.members:
            return
        del c.members[w]
        if w.woken:
            # a wake-up it did not use (it was cancelled, timed out or got
            # the lock another way): hand it on so no waiter misses an unlock
            w.woken = False
            self._wake_one(c)
        self._drop_idle(name, c)

    def _drop_idle(self, name: str, c: _Channel) -> None:
        """Unsubscribe from a channel nobody waits or holds on any more."""
        if not c.members and not c.holders:
            del self.channels[name]
            conn = self.conn
            if conn is not None and not conn.closed:
                self.unsub_pending[name] = self.unsub_pending.get(name, 0) + 1
                conn.write(_E.subscribe_cmd(name, self.sharded, True))

    def close(self) -> None:
        if self.live_timer is not None:
            self.live_timer.cancel()
            self.live_timer = None
        self.live.idle()
        for c in self.channels.values():
            if not c.ready.done():
                c.ready.set_result(False)
            for w in c.members:
                w.wake()
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _settle_conn_closed(conn: "_Conn") -> None:
    """A settling connection of its own (no pool) closed: nothing to do."""


async def _connect_within(loop: asyncio.AbstractEventLoop, coro: Any, seconds: float,
                          proto: "_Conn") -> None:
    """Run coro (a connection to make for proto) for at most seconds:
    asyncio.TimeoutError after that. Not asyncio.wait_for: before Python
    3.12 it returns the result when the caller is cancelled in the loop
    iteration the connection was made, and the cancellation is lost (an
    acquire cancelled while its pub/sub connection opened then waited its
    whole wait). Here the caller's cancellation always raises; a
    connection made after all is closed."""
    task = loop.create_task(coro)
    waiter: "asyncio.Future[None]" = loop.create_future()

    def done(_: Any = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    h = loop.call_later(seconds, done)
    task.add_done_callback(done)
    try:
        await waiter  # set by the task or the timer; cancelled only with the caller
    except BaseException:
        _abandon(task, done, proto)
        raise
    finally:
        h.cancel()
    if not task.done():
        _abandon(task, done, proto)
        raise asyncio.TimeoutError()
    task.result()  # OSError, ssl.SSLError


async def _open_plain(loop: asyncio.AbstractEventLoop, host: Optional[str], port: int,
                      path: Optional[str], proto: "_Conn") -> None:
    """Connect a plain TCP or unix socket (every address host resolves to,
    in order, as loop.create_connection does) and attach it to proto."""
    if path:
        targets: List[Tuple[int, Any]] = [(socket.AF_UNIX, path)]
    else:
        try:  # a numeric address: no resolver thread (loop.getaddrinfo's executor)
            infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_NUMERICHOST)
        except socket.gaierror:
            infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
        targets = [(i[0], i[4]) for i in infos]
    err: Optional[OSError] = None
    for family, addr in targets:
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.setblocking(False)
            if family != socket.AF_UNIX:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(s, addr)
        except OSError as e:
            s.close()
            err = e
            continue
        except BaseException:
            s.close()
            raise
        proto.attach(s)
        return
    raise err or OSError(f"cannot resolve {host}")


def _abandon(task: "asyncio.Task[Any]", done: Callable[..., None], proto: "_Conn") -> None:
    """A connection task nobody waits for any more: cancelled; whatever it
    made is closed and its outcome read (no 'never retrieved' log)."""
    task.remove_done_callback(done)
    task.cancel()
    def reap(t: "asyncio.Task[Any]") -> None:
        proto.close()
        if not t.cancelled():
            t.exception()
    task.add_done_callback(reap)


def _wake_false(fut: "asyncio.Future[bool]") -> None:
    if not fut.done():
        fut.set_result(False)


async def _subscribe_step(c: "Client", m: Any, slot: int, channel: str, cancel: _Cancel,
                          wakes: Optional[Callable[[Any], int]] = None
                          ) -> Tuple[_Waiter, Optional["_PubSub"]]:
    """A machine's subscribe action: a new waiter joins channel on the
    pub/sub connection of slot, and the machine is told whether it is
    listening. (waiter, its pub/sub connection; None when the join was
    cancelled: the waiter may then be a member anywhere, see _leave)."""
    w = _Waiter()
    ps: Optional[_PubSub] = None
    try:
        ps, ok = await c._join(slot, channel, w, c._cmd_ms, wakes)
    except asyncio.CancelledError as e:
        cancel.exc = cancel.exc or e
        ok = False
    m.on_subscribed(ok)
    return w, ps


async def _wait_step(loop: asyncio.AbstractEventLoop, m: Any, w: Optional[_Waiter], ms: int,
                     cancel: _Cancel, waits: Optional[List[int]] = None) -> _Waiter:
    """A machine's wait action: sleep on w (made if None) until woken or ms
    pass (-1: a long while), then tell the machine m, if any (its channel
    moved: listen again). A cancellation ends the sleep and is remembered in
    cancel. One coroutine: a waiter keeps this frame alive for as long as it
    waits, so the sleep is not a coroutine of its own (RSS per waiter).
    waits: gets 1 when a wake-up or a cancel ended the sleep, 0 when ms did."""
    if w is None:
        w = _Waiter()
    if w.woken:
        w.woken = False
        if waits is not None:
            waits.append(1)
    else:
        fut: "asyncio.Future[None]" = loop.create_future()
        w.fut = fut
        h = loop.call_later((_LONG_WAIT_MS if ms < 0 else ms) / 1000.0, _wake, fut)
        try:
            await fut
        except asyncio.CancelledError as e:
            if cancel.exc is None:
                cancel.exc = e
        finally:
            h.cancel()
            w.fut = None
        if waits is not None:
            waits.append(1 if w.woken or cancel.exc is not None else 0)
        w.woken = False
    if m is not None:
        if w.moved:  # its channel moved (cluster): listen where it is now
            w.moved = False
            m.on_resubscribe()
        else:
            m.on_wake()
    return w


# --------------------------------------------------------------------------
# client
# --------------------------------------------------------------------------


async def connect(url: str = "redis://127.0.0.1:6379/0", **kwargs: Any) -> "Client":
    """Open an asyncio client (see :class:`Client` for the keyword
    arguments); it connects once to check the server and credentials."""
    client = Client(url, **kwargs)
    await client.open()
    return client


class Client(_E.ClientBase):  # type: ignore[misc]
    """An asyncio hilock client: a small connection pool, one pub/sub
    connection and the session's timer (renewals), all on the running loop.

    ``client = await hilock.aio.connect(url)`` or ``async with
    hilock.aio.Client(url) as client``. Keyword arguments as
    :class:`hilock.Client` (seconds): ``connect_timeout``,
    ``command_timeout``, ``watchdog_lease``, ``fair_wait_window``,
    ``pool_size``, ``tls`` and ``tls_*``, ``replica_ack`` (None: on for
    sentinel URLs), ``replica_ack_timeout``, ``sentinel_user`` /
    ``sentinel_password``. ``close()`` stops the watchdog
    (locks still held are not released: they expire after their lease).
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
        tls: bool = False,
        tls_ca_file: Optional[str] = None,
        tls_ca_dir: Optional[str] = None,
        tls_cert_file: Optional[str] = None,
        tls_key_file: Optional[str] = None,
        tls_server_name: Optional[str] = None,
        tls_insecure: bool = False,
        replica_ack: Optional[bool] = None,
        replica_ack_timeout: Seconds = 1.0,
        sentinel_user: Optional[str] = None,
        sentinel_password: Optional[str] = None,
        stats_names: int = 0,
    ) -> None:
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, not {type(url).__name__}")
        if "\0" in url:
            raise InvalidArgument("invalid argument: the URL contains a NUL byte", _E.E_INVAL)
        self._stats_names = _check_stats_names(stats_names)
        if isinstance(pool_size, bool) or not isinstance(pool_size, int):
            raise TypeError("pool_size must be an int")
        if not 1 <= pool_size <= 1024:
            raise InvalidArgument(f"invalid argument: pool_size must be in 1..1024, got {pool_size}")
        ep: Dict[str, Any] = _E.parse_url(url)
        if replica_ack is not None and not isinstance(replica_ack, bool):
            raise TypeError("replica_ack must be None, True or False")
        self._mode: str = ep["mode"]
        self._sentinel = self._mode == "sentinel"
        self._cluster = self._mode == "cluster"
        self._sentinel_user = ep.get("sentinel_user") or sentinel_user
        self._sentinel_password = ep.get("sentinel_password") or sentinel_password
        # replica acknowledgement: on by default where a failover can happen
        self._ack = (self._sentinel or self._cluster) if replica_ack is None else replica_ack
        self._ack_ms = _to_ms(replica_ack_timeout, "replica_ack_timeout", zero_ok=False)
        # replicas of a master (cached), and when learnt: per pool address
        # (None: the client's one server or master)
        self._nreps: Dict[Any, Tuple[int, int]] = {}
        # Sentinel: a master of the name was seen with a replica; from then
        # on every master of it needs a replica's acknowledgement
        self._replicated = False
        # cluster: the slot map (master address per slot), the pools and
        # pub/sub connections per master
        self._slot_node: List[Optional[Tuple[str, int]]] = []
        self._map_stale = True
        self._map_loading: Optional["asyncio.Future[None]"] = None
        self._pools: Dict[Tuple[str, int], _Pool] = {}
        self._pubsubs: Dict[Tuple[str, int], _PubSub] = {}
        self._master: Optional[Tuple[str, int]] = None  # sentinel: the master, cached
        self._master_from = 0  # sentinel: the index of the sentinel that named it
        self._master_at = 0
        self._gen = 0  # bumped when the master changes: older connections are dropped
        self._url = _redact_url(url)  # shown only: passwords as ***
        self._ep = ep
        self._connect_ms = ep.get("connect_timeout_ms") or _to_ms(
            connect_timeout, "connect_timeout", zero_ok=False)
        self._cmd_ms = ep.get("command_timeout_ms") or _to_ms(
            command_timeout, "command_timeout", zero_ok=False)
        self._wd_ms = _to_ms(watchdog_lease, "watchdog_lease", zero_ok=False)
        self._window_ms = _to_ms(fair_wait_window, "fair_wait_window", zero_ok=False)
        self._ssl: Optional[ssl.SSLContext] = None
        self._server_name: Optional[str] = None
        if tls or ep.get("tls"):
            self._ssl = self._ssl_context(
                ep.get("tls_ca_file") or tls_ca_file, ep.get("tls_ca_dir") or tls_ca_dir,
                ep.get("tls_cert_file") or tls_cert_file, ep.get("tls_key_file") or tls_key_file,
                bool(ep.get("tls_insecure")) or tls_insecure)
            self._server_name = ep.get("tls_server_name") or tls_server_name or ep.get("host")
        self._id: str = str(uuid.uuid4())  # canonical 36-character form
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._closed = False
        self._opened = False
        self._pool = _Pool(self, pool_size)
        self._pubsub = _PubSub(self)
        self._lost: Dict[Tuple[int, str, str], None] = {}
        self._leases: Dict[Tuple[int, str, str], int] = {}
        # every hold, (kind, name, owner) -> _Hold, listening on its lock's channel
        self._held: Dict[Tuple[int, str, str], _Hold] = {}
        # the session's hold table (the engine's, times in Client._now_ms):
        # when each watchdog hold is renewed or reported "in doubt", when a
        # fixed lease ends, which holds to check after a frame on their
        # channel; one loop timer at its next deadline (_tick)
        self._holds = _E.Holds(self._wd_ms, self._cmd_ms)
        self._tick_h: Optional[asyncio.TimerHandle] = None
        self._tick_at = -1
        self._listeners: Dict[Tuple[int, str], "weakref.WeakSet[Any]"] = {}
        # multi-locks with a member of this client, per member (kind, name):
        # told of every hold of it lost (MultiLock._member_lost)
        self._ml_hooks: Dict[Tuple[int, str], "weakref.WeakSet[Any]"] = {}
        self._tasks: Set["asyncio.Task[Any]"] = set()
        self._seq = 0
        # acquire latch (the engine's hl_acquire_latch_arg): attempts are
        # idempotent per call; the epoch moves on whenever an attempt's reply
        # was lost, so later calls never overwrite what a late copy must find
        self._latch_epoch = 0
        self._latch_ttl_ms: int = _E.latch_ttl(self._cmd_ms)
        # one server, no replica acknowledgement: an acquire's first attempt
        # and a release's command are made in one engine call each (set at open)
        self._direct: Any = None
        # attempts being settled per server (pool address; None: the one
        # server or master), and who waits for one of them to end
        self._settling: Dict[Optional[Tuple[str, int]], int] = {}
        self._settled: Dict[Optional[Tuple[str, int]], List["asyncio.Future[None]"]] = {}
        # the settle tasks of (lock name, owner) and their machines, for a
        # hand-over (Lock._settle_earlier)
        self._settle_runs: Dict[Tuple[str, str],
                                List[Tuple["asyncio.Task[Any]", List[Any]]]] = {}
        # counters (stats()): per lock kind, and the client's
        self._st_kind: List[List[int]] = [[0] * _S_LEN for _ in range(_KINDS)]
        self._st: List[int] = [0] * 7
        # per (kind, name), opt-in (stats_names): the first pairs counted,
        # in that order; the later ones in their kind's "other" entry, as
        # libcore's stats.c keeps them
        self._st_names: Dict[Tuple[int, str], List[int]] = {}
        self._st_other: List[List[int]] = [[0] * _S_LEN for _ in range(_KINDS)]
        # when each hold (key as _held's) was first granted (Client._now_ms):
        # its hold time is counted when it ends (last release, or loss)
        self._since: Dict[Tuple[int, str, str], int] = {}
        # the session's acquire attempts not settled (hilock._engine.Unsettled):
        # settled again before their owner's next acquire of the lock
        self._unsettled_acq = _E.Unsettled()

    @staticmethod
    def _ssl_context(ca_file: Optional[str], ca_dir: Optional[str], cert: Optional[str],
                     key: Optional[str], insecure: bool) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=ca_file, capath=ca_dir)
        if cert:
            ctx.load_cert_chain(cert, key)
        if insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    # -- life ---------------------------------------------------------------

    @classmethod
    def from_redis(cls, r: Any, **kwargs: Any) -> "Client":
        """A client (not open yet: ``async with`` or ``await .open()``) to
        the server a configured ``redis.asyncio.Redis`` (or ``redis.Redis``)
        talks to, with its credentials, database, socket timeouts and TLS
        settings; as :meth:`hilock.Client.from_redis`."""
        url, opts = _from_redis(r)
        opts.update(kwargs)
        return cls(url, **opts)

    async def open(self) -> "Client":
        """Bind to the running loop and check the server once (connection,
        credentials, database). Idempotent."""
        if self._closed:
            raise ClosedError("closed: the client is closed", _E.E_CLOSED)
        if self._opened:
            return self
        self._loop = asyncio.get_running_loop()
        if self._cluster:
            await self._load_slots()  # connection, credentials, a slot map
            self._opened = True
            return self
        conn = await self._pool.get()
        if self._sentinel:
            self._spawn(self._watch_sentinels())
        # the check hilock.Client makes at open
        reply = await self._ask(conn, _E.ping_cmd(), "no answer from the server at open "
                                "(closed by it: a TLS client certificate it refused?)")
        rc = _E.decode_ping(reply)
        if rc:
            conn.close()
            raise from_code(rc, f"refused at open: {reply.error or 'unexpected reply'}")
        self._pool.put(conn)
        if not (self._ack or self._sentinel):
            # the loop's clock read in C where it is asyncio's own (time.monotonic)
            mono = getattr(type(self._loop), "time", None) is asyncio.BaseEventLoop.time
            self._direct = _E.Direct(self, self._pool, self._loop, self._window_ms,
                                     self._latch_ttl_ms, self._cmd_ms, self._wd_ms, self._id,
                                     _pid_box, mono)
        self._opened = True
        return self

    async def close(self) -> None:
        """Stop the watchdog, drop every connection. Held locks are not
        released (they expire after their lease)."""
        if self._closed:
            return
        self._closed = True
        self._direct = None
        if self._tick_h is not None:
            self._tick_h.cancel()
            self._tick_h = None
        for key in self._held:
            self._holds.remove(key)
        self._held.clear()
        self._pool.close()
        self._pubsub.close()
        for p in self._pools.values():
            p.close()
        for ps in self._pubsubs.values():
            ps.close()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> "Client":
        return await self.open()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.close()

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
        return self._closed

    def owner(self, thread_id: Optional[int] = None) -> str:
        """The owner string of the current task (or of thread_id)."""
        tid = _check_tid(thread_id)
        return f"{self._id}:{task_id() if tid is None else tid}"

    def _spawn(self, coro: Awaitable[Any]) -> None:
        t: "asyncio.Task[Any]" = self._loop.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("closed: the client is closed", _E.E_CLOSED)
        if not self._opened:
            raise ClosedError("closed: the client is not open (await client.open())",
                              _E.E_CLOSED)

    def _request_id(self) -> str:
        self._seq += 1
        return f"{self._id}:{_pid_box[0]}:{self._seq}"

    def _release_id(self) -> str:
        """A release's request id: the owner's unlock latch (one key per
        owner, overwritten by its releases), as the C client's releases use
        it (the engine's hl_release_request_id). Its seq comes from the same
        counter as the acquires' (_seq), which lets the engine's scripts
        refuse a late copy of an older release."""
        self._seq += 1
        rid: str = _E.release_request_id(self._id, _pid_box[0], self._latch_epoch, self._seq)
        return rid

    # -- connections --------------------------------------------------------

    async def _open_conn(self, on_close: Callable[[_Conn], None],
                         on_push: Optional[Callable[[Any], None]] = None,
                         addr: Optional[Tuple[str, int]] = None) -> _Conn:
        ep = self._ep
        if addr is not None:  # a cluster node
            conn = await self._connect(addr[0], addr[1], None, ep.get("user"),
                                       ep.get("password"), 0, on_push)
        elif self._sentinel:
            conn = await self._master_conn(on_push)
        else:
            conn = await self._connect(ep.get("host"), ep.get("port", 0), ep.get("path"),
                                       ep.get("user"), ep.get("password"), ep.get("db", 0),
                                       on_push)
        conn.on_close = on_close
        if conn.closed:
            # closed between its connect (or handshake) and now (a proxy or
            # load balancer in front of a dead server accepts, then resets):
            # its on_close was not set yet and will never run, so whoever
            # counts it (a pool's slot) must hear it now, from this error
            raise from_code(_E.E_CONN, f"{conn.what}: closed the connection right after "
                            "connecting")
        return conn

    async def _master_conn(self, on_push: Optional[Callable[[Any], None]]) -> _Conn:
        """Sentinel: a connection to the master, as libcore's hl_connect:
        the address a sentinel names must say it is a master (its role), else
        the next sentinel is asked. A sentinel that has not heard of a
        failover yet (or never will, cut off from the others) names the old
        master, now a replica; taking its word every time made every call
        fail on the replica's refusal to write for as long as it stayed
        behind."""
        ep = self._ep
        nseeds = len(ep["seeds"])
        start = 0
        while True:
            if start == 0:
                host, port = await self._master_addr()
                k = self._master_from
            else:
                (host, port), k = await self._master_addr_from(start)
            gen = self._gen
            conn = await self._connect(host, port, None, ep.get("user"), ep.get("password"),
                                       ep.get("db", 0), on_push)
            conn.gen = gen
            req = conn.request(_E.role_cmd())
            st = await _await_req(self._loop, req, self._cmd_ms)
            if st == 0 and req.reply.error is None and _E.decode_role(req.reply)[0]:
                return conn
            conn.close()
            if self._master == (host, port):
                self._master = None  # not kept for the next connection either
            start = k + 1
            if start >= nseeds:
                raise from_code(_E.E_CONN, f"{host}:{port} named by sentinel is not a master "
                                "(failover in progress?)")

    async def _master_addr(self) -> Tuple[str, int]:
        """Sentinel: the master the sentinels name (asked at most once a
        second; _not_master() asks again at once)."""
        now = _E.now_ms()
        if self._master is not None and now - self._master_at < 1000:
            return self._master
        addr, _k = await self._master_addr_from(0)
        return addr

    async def _master_addr_from(self, first: int) -> Tuple[Tuple[str, int], int]:
        """Sentinel: the master the first sentinel from index first on that
        answers names, and that sentinel's index (kept as _master_from).
        None naming it: the last sentinel's failure, in the engine's words
        (no reply within N ms, the connection closed or failed, an error
        reply, or a nil reply: it knows no master of that name)."""
        last = ""
        name = self._ep["master_name"]
        for i, (host, port) in enumerate(self._ep["seeds"]):
            if i < first:
                continue
            where = f"sentinel {host}:{port}"
            try:
                conn = await self._connect(host, port, None, self._sentinel_user,
                                           self._sentinel_password, 0, None)
            except Error as e:
                why = e.detail or str(e)
                # the address named as the sentinel's (a handshake's failure
                # names the server alone)
                last = (why if where in why
                        else why.replace(f"{host}:{port}", where, 1) if f"{host}:{port}" in why
                        else f"{why} ({where})")
                continue
            try:
                req = conn.request(_E.sentinel_master_cmd(name))
                st = await _await_req(self._loop, req, self._cmd_ms)
                if st != 0:
                    last = "asking for the master: " + (
                        _E.no_reply_msg(self._cmd_ms, where) if st == 1
                        else f"connection to {where} closed")
                    continue
                try:
                    addr: Tuple[str, int] = _E.decode_master_addr(req.reply)
                except Error:
                    last = _E.master_addr_msg(where, name, req.reply)
                    continue
            finally:
                conn.close()
            self._note_master(addr)
            self._master_from = i
            return addr, i
        raise from_code(_E.E_CONN, f"no sentinel named master {name!r}"
                        + (f": {last}" if last else ""))

    def _note_master(self, addr: Tuple[str, int]) -> None:
        """Sentinel: addr is the master now (a sentinel's answer or its
        failover message). Another than the one known: a failover, so
        the connections to the old master go and waiters listen again."""
        if self._master is not None and addr != self._master:
            self._gen += 1
            self._pool.drop_idle()
            ps = self._pubsub.conn
            if ps is not None:
                ps.close()  # waiters listen again on the new master, and retry
        self._master, self._master_at = addr, _E.now_ms()

    async def _watch_sentinels(self) -> None:
        """Sentinel: listen for the sentinels' failover messages on one sentinel at a time,
        as libcore's sentinel watcher and OpenResty do. Asked only every
        second (_master_addr), the renewals went on to the old master for up
        to a second after a failover; the old master takes writes until the
        sentinels demote it (seconds later), so those renewals were answered
        while the lease on the new master ran out, and another client could
        take the lock there."""
        seeds = self._ep["seeds"]
        name = self._ep["master_name"]
        i, backoff = 0, 0.05

        # the session's liveness rule of the watch connection (as the lock
        # subscriptions'): a sentinel, or a proxy in front of it, that keeps
        # the connection open and stops answering would leave the client
        # deaf to failovers; a PING when nothing was heard for an interval,
        # and the next sentinel watched when that goes unanswered as long
        live = _E.Sublive(self._cmd_ms or 0)

        def on_push(r: Any) -> None:
            live.heard(_mono_ms())  # any frame: a message, a PING's answer
            hp = _E.decode_switch_master(r, name)
            if hp is not None:
                self._note_master((hp[0], int(hp[1])))

        while not self._closed:
            host, port = seeds[i % len(seeds)]
            i += 1
            try:
                conn = await self._connect(host, port, None, self._sentinel_user,
                                           self._sentinel_password, 0, on_push)
            except Error:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            closed = self._loop.create_future()
            # this connection's own future (a close reported late must not
            # end the watch of the next one)
            conn.on_close = lambda _c, f=closed: _wake(f)
            try:
                req = conn.request(_E.sentinel_watch_cmd())
                if await _await_req(self._loop, req, self._cmd_ms) == 0 and req.reply.error is None:
                    backoff = 0.05
                    # a switch may have happened before this subscription
                    self._master_at = 0
                    live.opened(_mono_ms())
                    live.heard(_mono_ms())  # the SUBSCRIBE's answer
                    if self._master is not None:
                        # asked now (as libcore's watcher), of this sentinel
                        # first (it answers): waiters on a master switched
                        # meanwhile listen again now, not at the demotion
                        try:
                            await self._master_addr_from((i - 1) % len(seeds))
                        except Error:
                            pass
                    while not closed.done() and not self._closed:
                        due = live.due(_mono_ms())
                        if due & _E.SUBLIVE_RESET:
                            break  # unanswered: the next sentinel
                        if due & _E.SUBLIVE_PING:
                            conn.write(_E.ping_cmd())
                        nxt = live.next()
                        wait = None if nxt < 0 else max(0, nxt - _mono_ms()) / 1000.0
                        await asyncio.wait([closed], timeout=wait)
                else:
                    await asyncio.sleep(backoff)
            finally:
                conn.close()

    def _not_master(self) -> None:
        """A node answered that it is no master (failover): find it again,
        drop the connections to the old one."""
        self._master = None
        self._gen += 1
        self._pool.drop_idle()
        ps = self._pubsub.conn
        if ps is not None and getattr(ps, "gen", self._gen) != self._gen:
            ps.close()  # listen on the new master (a replica relays messages, but may go)

    def _redirected(self, reply: Any) -> bool:
        """Sentinel: True when the reply says the node is no master any more
        (then the master is looked up again and the command goes there)."""
        if self._sentinel and reply.error is not None and _E.not_master(reply):
            self._not_master()
            return True
        return False

    async def _replica_ack(self, conn: _Conn, cancel: _Cancel) -> bool:
        """The engine's replica acknowledgement of the write just made on
        conn (same connection); gives conn back (or closes it)."""
        # per node: a cluster pool's address; with sentinels the master of
        # the connection's generation (a failover starts a new count, and
        # an answer from the old master cannot land on the new one's)
        where: Any = conn.pool.addr if conn.pool is not None else None
        if where is None:
            where = ("gen", conn.gen)
            for key in [k for k in self._nreps if k is not None and k[0] == "gen" and k != where]:
                del self._nreps[key]
        nrep, nrep_at = self._nreps.get(where, (-1, 0))
        # Sentinel: whether the name keeps replicas is remembered for the
        # client, not per generation: a master promoted a moment ago, or
        # one cut off from its replicas, may list none
        k = _E.Ack(nrep, _E.now_ms() - nrep_at if nrep >= 0 else -1, self._ack_ms,
                   self._sentinel and self._replicated)
        while True:
            t = k.next()
            if t[0] == _SEND:
                req = conn.request(t[1])
                if await cancel.req(self._loop, req, self._cmd_ms + t[2]) == 0:
                    k.on_reply(req.reply)
                else:
                    k.on_error()
                continue
            _act, acked, failed, nrep = t
            if nrep >= 0:
                self._nreps[where] = (nrep, _E.now_ms())
            if k.replicated:
                self._replicated = True
            if failed:
                conn.close()
            else:
                conn.give()
            return bool(acked)

    # -- cluster topology and routing ---------------------------------------

    def _pool_at(self, addr: Tuple[str, int]) -> _Pool:
        p = self._pools.get(addr)
        if p is None:
            p = self._pools[addr] = _Pool(self, self._pool.size, addr)
        return p

    async def _slot_addr(self, slot: int) -> Tuple[str, int]:
        """Cluster: the master serving slot (the map reloaded first when a
        redirect or a lost connection made it stale)."""
        if self._map_stale or not self._slot_node or self._slot_node[slot] is None:
            try:
                await self._load_slots()
            except Error:
                if not self._slot_node:
                    raise
        addr = self._slot_node[slot] if self._slot_node else None
        if addr is None:
            raise from_code(_E.E_CONN, f"no master serves slot {slot}")
        return addr

    async def _load_slots(self) -> None:
        """Cluster: ask the known masters, then the URL's nodes, for the slot
        map (one question at a time per client)."""
        if self._map_loading is not None:
            await asyncio.shield(self._map_loading)
            return
        fut = self._map_loading = self._loop.create_future()
        try:
            seen: Set[Tuple[str, int]] = set()
            cands: List[Tuple[str, int]] = []
            seeds: List[Tuple[str, int]] = [(str(h), int(p)) for h, p in self._ep["seeds"]]
            for a in list(self._pools) + seeds:
                if a not in seen:
                    seen.add(a)
                    cands.append(a)
            last: Optional[Error] = None
            for addr in cands:
                try:
                    ranges = await self._ask_slots(addr)
                except Error as e:
                    last = e
                    continue
                if not ranges:
                    last = from_code(_E.E_CONN, f"{addr[0]}:{addr[1]}: empty slot map "
                                     "(cluster not ready)")
                    continue
                m: List[Optional[Tuple[str, int]]] = [None] * _E.NSLOTS
                for lo, hi, host, port in ranges:
                    m[lo:hi + 1] = [(host, port)] * (hi - lo + 1)
                self._slot_node = m
                self._map_stale = False
                self._drop_departed({(str(r[2]), int(r[3])) for r in ranges})
                return
            raise last or from_code(_E.E_CONN, "no cluster node reachable")
        finally:
            self._map_loading = None
            fut.set_result(None)

    def _drop_departed(self, masters: Set[Tuple[str, int]]) -> None:
        """Cluster: the pools (and idle pub/sub connections) of nodes that
        are no master in the new slot map are closed and forgotten, so a
        cluster whose masters change over time does not keep connections
        to every node it ever saw. Commands on their way finish (_Pool.retire)."""
        for addr in [a for a in self._pools if a not in masters]:
            self._pools.pop(addr).retire()
            self._nreps.pop(addr, None)
        for addr in [a for a, ps in self._pubsubs.items()
                     if a not in masters and not ps.channels and ps.connecting is None]:
            ps = self._pubsubs.pop(addr)
            conn, ps.conn = ps.conn, None
            if conn is not None:
                conn.on_close = None  # nothing to tell: it listens to nothing
                conn.close()

    async def _ask_slots(self, addr: Tuple[str, int]) -> Any:
        pool = self._pools.get(addr)
        conn = pool.get_nowait() if pool is not None else None
        if conn is None:
            ep = self._ep
            conn = await self._connect(addr[0], addr[1], None, ep.get("user"),
                                       ep.get("password"), 0, None)
        reply = await self._ask(conn, _E.cluster_slots_cmd(),
                                f"{addr[0]}:{addr[1]}: closed the connection before the slot map")
        conn.give()
        return _E.decode_slots(reply)

    async def _routed(self, slot: int, data: bytes, timeout_ms: int,
                      cancel: Optional[_Cancel] = None,
                      first: Optional[_Req] = None) -> Tuple[int, Any, Optional[_Conn], int]:
        """Send one command to the master that serves slot and wait for its
        answer, following what the engine's router makes of an error reply
        (cluster: the slot moved, is moving, is not served for a moment, the
        node is loading or no master; sentinel: no master) or of a
        connection that could not be made.
        Returns (st, req, conn, code): st 0 = the answer in req.reply, conn
        to give back; 1 = no answer within timeout_ms (the command may
        still run: conn is left as it is); 2 = conn closed after the send;
        3 = nothing more to try (code: why; conn None, req None or an
        Error saying why: the one that left no connection to send on, or
        the server's answer the router gave up on).
        cancel: a cancellation is remembered there (see _Cancel) and ends
        the routing before the next send (one server: after a pause; the
        first send goes out, it may be the cancel's own). first (one server): data was
        already sent directly (_send_idle) and first holds its error reply:
        routing starts from that reply."""
        loop = self._loop
        cluster = self._cluster
        rt: Any = None
        ask: Optional[Tuple[str, int]] = None  # cluster: this command's ASK target
        redirects = 0  # sentinel: "no master" answers followed
        again = False  # one server: a pause was made (a cancel meanwhile ends it)
        while True:
            if cancel is not None and cancel.exc is not None and (cluster or again):
                return 3, None, None, _E.E_CANCELED
            again = True
            if first is not None:
                req, first = first, None
                conn = req.conn
                st = 0
            else:
                try:
                    pool = self._pool if not cluster else self._pool_at(
                        ask if ask is not None else await self._slot_addr(slot))
                    conn = pool.get_nowait() or await pool.get()
                except asyncio.CancelledError as e:
                    if cancel is None:
                        raise
                    cancel.exc = cancel.exc or e
                    return 3, None, None, _E.E_CANCELED
                except Error as e:  # the error itself in req's place (_call)
                    if not cluster:
                        return 3, e, None, e.code or _E.E_CONN
                    self._map_stale = True
                    rt = rt or _E.Router(self._mode)
                    a = rt.on_conn_error(False)
                    if a[0] != _E.ROUTE_REFRESH:
                        return 3, e, None, e.code or _E.E_CONN
                    ask = None
                    await self._route_pause(a[1], cancel)
                    continue
                if ask is not None:
                    conn.request(_E.asking_cmd())  # its answer is read and dropped
                req = conn.request(data)
                if cancel is None:
                    try:
                        st = await _await_req(loop, req, timeout_ms)
                    except BaseException:
                        conn.broken = True
                        conn.close()
                        raise
                else:
                    st = await cancel.req(loop, req, timeout_ms)
            if st != 0:
                if cluster:
                    self._map_stale = True  # the node may be gone
                return st, req, conn, 0
            r = req.reply
            if r.error is None:
                return 0, req, conn, 0
            if self._sentinel and redirects < _MAX_REDIRECTS and self._redirected(r):
                redirects += 1
                conn.close()  # no master any more: the same command on the new one
                await self._route_pause(_REDIRECT_PAUSE_MS, cancel)
                continue
            # what the engine's router makes of any other error reply (a
            # slot moved or moving, a server still loading its data or
            # demoted: the same command again, where and after the pause it
            # says, a bounded number of times)
            rt = rt or _E.Router(self._mode)
            a = rt.on_reply(r)
            act = a[0]
            if act == _E.ROUTE_DONE:
                return 0, req, conn, 0
            ask = None
            if act == _E.ROUTE_REFRESH:
                conn.close()  # a demoted server: a new connection (cluster: a new map)
                if cluster:
                    self._map_stale = True
            else:
                conn.give()
            if act in (_E.ROUTE_MOVED, _E.ROUTE_ASK):
                self._st[_C_REDIRECTS] += 1
            if act == _E.ROUTE_MOVED:
                _slot, host, port, pause = a[1], a[2], a[3], a[4]
                if self._slot_node and 0 <= _slot < len(self._slot_node):
                    self._slot_node[_slot] = (host, port)
                self._map_stale = True  # the rest of the map later
                await self._route_pause(pause, cancel)
            elif act == _E.ROUTE_ASK:
                ask = (a[1], a[2])
            elif act in (_E.ROUTE_RETRY, _E.ROUTE_REFRESH):
                await self._route_pause(a[1], cancel)
            else:
                return 3, _answered(a[1], conn, r), None, a[1]

    async def _route_pause(self, ms: int, cancel: Optional[_Cancel]) -> None:
        if ms <= 0:
            return
        if cancel is None:
            await asyncio.sleep(ms / 1000.0)
        else:
            await cancel.sleep(self._loop, ms / 1000.0)

    async def _join(self, slot: int, name: str, w: _Waiter, timeout_ms: int,
                    wakes: Optional[Callable[[Any], int]] = None
                    ) -> Tuple[Optional[_PubSub], bool]:
        """Make w a member of channel name on the pub/sub connection that
        hears it (cluster: the slot's master, followed when the slot moved
        while subscribing). (the _PubSub to leave later or None, subscribed).
        wakes: the channel's wake rule when it is no lock's (_PubSub.join).
        Cancelled meanwhile: w is no member anywhere, CancelledError raised."""
        if not self._cluster:
            try:
                return self._pubsub, await self._pubsub.join(name, w, timeout_ms, wakes)
            except BaseException:
                self._pubsub.leave(name, w)
                raise
        ps: Optional[_PubSub] = None
        for _ in range(3):
            try:
                addr = await self._slot_addr(slot)
            except Error:
                return ps, False
            if ps is not None and ps.addr != addr:
                ps.leave(name, w)
            ps = self._pubsubs.get(addr)
            if ps is None:
                ps = self._pubsubs[addr] = _PubSub(self, addr)
            try:
                ok = await ps.join(name, w, timeout_ms, wakes)
            except BaseException:
                ps.leave(name, w)
                raise
            if ok:
                return ps, True
            if not w.moved:
                return ps, False
            w.moved = w.woken = False  # refused there: where does the slot live now?
        return ps, False

    async def _connect(self, host: Optional[str], port: int, path: Optional[str],
                       user: Optional[str], password: Optional[str], db: int,
                       on_push: Optional[Callable[[Any], None]]) -> _Conn:
        loop = self._loop
        ep = self._ep
        proto = _Conn(loop, on_push=on_push)
        what = path or f"{host}:{port}"
        proto.what = what
        coro: Awaitable[Any]
        try:
            if self._ssl is None:  # plain: the engine's Wire does the socket's I/O
                coro = _open_plain(loop, host, port, path, proto)
            elif path:
                coro = loop.create_unix_connection(lambda: proto, path, ssl=self._ssl,
                                                   server_hostname=self._server_name)
            else:
                coro = loop.create_connection(
                    lambda: proto, host or "", port, ssl=self._ssl,
                    server_hostname=(self._server_name or host) if self._ssl else None)
            await _connect_within(loop, coro, self._connect_ms / 1000.0, proto)
        except ssl.SSLError as e:
            raise from_code(_E.E_TLS, f"TLS handshake with {what}: {e}") from None
        except (OSError, asyncio.TimeoutError) as e:
            raise from_code(_E.E_CONN, f"cannot connect to {what}: {e or 'timeout'}") from None
        for cmd in _E.handshake_cmds(user, password, db):
            reply = await self._ask(proto, cmd,
                                    f"{what}: closed the connection during the handshake")
            rc = _E.handshake_reply(reply)
            if rc:
                proto.close()
                raise from_code(rc, f"{what}: {reply.error or 'unexpected reply'}")
        del ep
        return proto

    async def _ask(self, conn: _Conn, cmd: bytes, closed: str) -> Any:
        """One command on conn (opening it: a handshake, a check), its
        reply; conn is closed when none came (ConnectionError: no reply in
        time, or closed, the message for that)."""
        req = conn.request(cmd)
        try:
            st = await _await_req(self._loop, req, self._cmd_ms)
        except BaseException:
            conn.close()
            raise
        if st != 0:
            conn.close()
            raise from_code(_E.E_CONN, _E.no_reply_msg(self._cmd_ms, conn.what) if st == 1
                            else closed)
        return req.reply

    async def _call(self, data: bytes, slot: int = 0) -> Any:
        """One command, one reply (a plain query) on the master of slot: the
        reply or an error."""
        self._check()
        st, req, conn, code = await self._routed(slot, data, self._cmd_ms)
        if st == 3:
            if isinstance(req, Error):  # no connection to send it on: why
                raise req
            raise from_code(code, "no master to send the command to")
        assert conn is not None and conn.pool is not None
        if st == 0:
            conn.give()
            return req.reply
        conn.close()
        raise from_code(_E.E_CONN, _E.no_reply_msg(self._cmd_ms, conn.what) if st == 1
                        else "connection closed")

    async def _run_call(self, m: Any, what: Union[str, Callable[[int], Error]],
                        slot: int = 0) -> int:
        """Drive a one-command machine (Names.force, Names.extend,
        SemNames.op): its decoded value, or the error raised (what: the
        detail, or the error of a code)."""
        self._check()
        while True:
            t = m.next()
            if t[0] != _SEND:
                break
            try:
                m.on_reply(await self._call(t[1], slot))
            except Error as e:
                m.on_error(e.code or _E.E_CONN)
        if t[1]:
            raise what(t[1]) if callable(what) else from_code(t[1], what)
        return int(t[2])

    def _start_settle(self, conn: _Conn, first: _Req, s: Any, who: Tuple[str, str]) -> None:
        """Settle owner's attempt on a lock, who = (name, owner), in the
        background (_settle_on), counted against its server until it ends
        (_settle_gate)."""
        pool = conn.pool
        addr = pool.addr if pool is not None else None
        if pool is not None and not conn.closed:
            # the connection leaves its pool (libcore's hl_pool_forget): its
            # place goes to the next caller now, not when the settle ends (up
            # to a minute on a server that stays silent), so calls that need
            # a connection are not held up by it
            conn.pool = None
            conn.on_close = _settle_conn_closed
            pool._on_close(conn)
        self._settling[addr] = self._settling.get(addr, 0) + 1
        self._st[_C_SETTLES] += 1
        _log.info("an acquire attempt's reply timed out; the settler gives back a late grant")
        box = [s]
        t = self._loop.create_task(self._settle_on(conn, first, box, addr))
        self._tasks.add(t)
        runs = self._settle_runs.setdefault(who, [])
        runs.append((t, box))

        def ended(t: "asyncio.Task[Any]") -> None:
            # here, not in the task: one cancelled before it ran has run nothing
            self._tasks.discard(t)
            conn.close()
            runs[:] = [r for r in runs if r[0] is not t]  # its machine goes with it
            if not runs and self._settle_runs.get(who) is runs:
                del self._settle_runs[who]
            n = self._settling.get(addr, 0) - 1
            if n > 0:
                self._settling[addr] = n
            else:
                self._settling.pop(addr, None)
            for fut in self._settled.pop(addr, []):
                _wake(fut)
        t.add_done_callback(ended)

    async def _hand_over(self, who: Tuple[str, str]) -> bool:
        """The settles of who's attempts the engine lets go
        (Settle.can_hand_over: no undo sent yet) are dropped with their
        connections, as hilock_async's step_pre_settle does: their records
        are then not settled, and the caller settles the attempt itself on
        a connection that answers. True when one was dropped."""
        drop = [(t, box) for t, box in self._settle_runs.get(who, ())
                if box and box[0].can_hand_over()]
        for t, _ in drop:
            t.cancel()
        if drop:
            await asyncio.wait([t for t, _ in drop])
        for _, box in drop:
            box.clear()  # the machine freed: its record is not settled
        return bool(drop)

    def _where_slot(self, slot: int) -> str:
        """The server a command on slot goes to, for messages: host:port
        (a cluster: the slot's master as last known; Sentinel: the master
        the sentinels last named), or the unix socket's path."""
        ep = self._ep
        addr: Any = None
        if self._cluster:
            addr = self._slot_node[slot] if self._slot_node else None
        elif self._sentinel:
            addr = self._master
        elif ep.get("path"):
            return f"unix:{ep['path']}"
        else:
            addr = (ep.get("host"), ep.get("port", 0))
        return f"{addr[0]}:{addr[1]}" if addr else "?"

    async def _settle_gate(self, slot: int, bounded: bool, cancel: _Cancel) -> int:
        """The engine's rule before an acquire attempt (settle_gate): while
        its server still settles an earlier attempt (stalled, or the way to
        it is), wait as long as the engine says for that to end. 0: send
        it; else the code to give it up with (E_CONN; E_CANCELED when
        cancelled meanwhile)."""
        where = self._slot_node[slot] if self._cluster and self._slot_node else None
        ms = _E.settle_gate(self._settling.get(where, 0), bounded, self._cmd_ms)
        if ms > 0:
            loop = self._loop
            deadline = loop.time() + ms / 1000.0
            while (cancel.exc is None and loop.time() < deadline
                   and _E.settle_gate(self._settling.get(where, 0), True, 0) >= 0):
                fut: "asyncio.Future[None]" = loop.create_future()
                waiters = self._settled.setdefault(where, [])
                waiters.append(fut)
                h = loop.call_at(deadline, _wake, fut)
                try:
                    await cancel.sleep_on(fut)
                finally:
                    h.cancel()
                    if fut in waiters:
                        waiters.remove(fut)
            if cancel.exc is not None:
                return int(_E.E_CANCELED)
        if _E.settle_gate(self._settling.get(where, 0), True, 0) < 0:
            return 0
        return int(_E.E_CONN)

    async def _settle_on(self, conn: _Conn, first: _Req, box: List[Any],
                         addr: Optional[Tuple[str, int]]) -> None:
        """Drive a settle machine on the connection whose attempt's reply
        did not come in time (its undo must follow the attempt there). When
        that connection dies first, the machine says so (its reconnect) and
        its next steps go on new connections to the same server, with the
        pauses it asks for in between (as libcore's drain). addr: the
        server, counted in _settling until its task ends (_start_settle).
        box: [the machine], read each time (no frame keeps it: a hand-over
        empties box, which frees it)."""
        cur: Optional[_Conn] = conn
        reqs: Deque[_Req] = collections.deque([first])
        try:
            while True:
                t = box[0].next()
                if t[0] == _WAIT:
                    if cur is None:  # between two connections: a pause
                        await asyncio.sleep(max(1, t[1]) / 1000.0)
                        continue
                    req = reqs.popleft() if reqs else None
                    st = 2 if req is None else await _await_req(self._loop, req, max(1, t[1]))
                    if st == 0:
                        box[0].on_reply(req.reply)  # type: ignore[union-attr]
                        continue
                    box[0].on_error()
                    if box[0].reconnect:  # nothing more will come on it
                        cur.close()
                        cur = None
                        reqs.clear()
                elif t[0] == _SEND:
                    if t[2] or cur is None:
                        if cur is not None:
                            cur.close()
                        cur = None
                        reqs.clear()
                        try:
                            cur = await self._open_conn(_settle_conn_closed, addr=addr)
                        except Error:
                            box[0].on_error()  # the machine decides: another try later, or done
                            continue
                    reqs.append(cur.request(t[1]))
                else:
                    return
        finally:
            if cur is not None:
                cur.close()

    # -- locks --------------------------------------------------------------

    def _names_of(self, kind: int, name: str) -> Any:
        if not isinstance(name, str):
            raise TypeError(f"lock name must be a str, not {type(name).__name__}")
        try:
            return _E.Names(name, kind, self._cluster)
        except InvalidArgument:
            raise
        except ValueError as e:
            raise InvalidArgument(f"invalid argument: {e}", _E.E_INVAL) from None

    def lock(self, name: str, *, wait: Optional[Seconds] = None,
             lease: Optional[Seconds] = None, thread_id: Optional[int] = None) -> "Lock":
        """A reentrant lock (Redisson RLock layout). wait/lease: the defaults
        of ``async with lock``; thread_id: an explicit owner instead of the
        current task's."""
        return Lock(self, self._names_of(_E.KIND_REENTRANT, name), wait, lease, thread_id)

    def fair_lock(self, name: str, *, wait: Optional[Seconds] = None,
                  lease: Optional[Seconds] = None, thread_id: Optional[int] = None) -> "Lock":
        """A fair (FIFO) lock (Redisson FairLock layout)."""
        return Lock(self, self._names_of(_E.KIND_FAIR, name), wait, lease, thread_id)

    def fenced_lock(self, name: str, *, wait: Optional[Seconds] = None,
                    lease: Optional[Seconds] = None,
                    thread_id: Optional[int] = None) -> "FencedLock":
        """A reentrant lock whose grants carry a fencing token."""
        return FencedLock(self, self._names_of(_E.KIND_FENCED, name), wait, lease, thread_id)

    def read_write_lock(self, name: str) -> "ReadWriteLock":
        """A read-write lock (Redisson RReadWriteLock layout)."""
        return ReadWriteLock(self, name)

    # -- semaphores and the count-down latch (hilock/_aio_sem.py) ------------

    def semaphore(self, name: str) -> "Semaphore":
        """A counting semaphore (Redisson RSemaphore layout)."""
        return Semaphore(self, name)

    def permit_expirable_semaphore(self, name: str) -> "PermitExpirableSemaphore":
        """A semaphore whose permits have ids and leases (Redisson
        RPermitExpirableSemaphore layout)."""
        return PermitExpirableSemaphore(self, name)

    def count_down_latch(self, name: str) -> "CountDownLatch":
        """A count-down latch (Redisson RCountDownLatch layout)."""
        return CountDownLatch(self, name)

    # -- watchdog -----------------------------------------------------------

    def _now_ms(self) -> int:
        """The watchdog's clock: the loop's, in ms (its timers use it)."""
        return int(self._loop.time() * 1000.0)

    def _arm(self) -> None:
        """The session's timer: a loop timer at its hold table's next
        deadline (Holds.next), so that no stuck connect, handshake or read
        of a renewal can put off a report."""
        at = self._holds.next()
        if at < 0 or self._closed:
            return  # a timer still armed fires and finds nothing due
        if self._tick_h is not None:
            if self._tick_at <= at:
                return
            self._tick_h.cancel()
        self._tick_at = at
        self._tick_h = self._loop.call_at(at / 1000.0, self._tick)

    def _tick(self) -> None:
        """What the session has due: the renewals (every watchdog hold due
        within a period goes in this pass, so holds share one pass per
        period; handed out first, so that one that fell due while the loop
        was held up goes out before its hold can be reported), the checks,
        the holds to report lost "in doubt" (once per silence; still
        renewed) and the fixed leases that ended (they stop listening)."""
        self._tick_h = None
        if self._closed:
            return
        hs = self._holds
        now = max(self._now_ms(), self._tick_at)
        keys = hs.renew_due(now, _E.renew_period(self._wd_ms))
        if keys:
            self._spawn(self._renew({k: self._held[k] for k in keys}))
        self._send_checks()
        while True:
            key = hs.doubt_next(now)
            if key is None:
                break
            h = self._held[key]
            self._count_lost(key, h.tid, _S_LOST_DOUBT, now - hs.state(key)[1])
            self._mark_lost(key, h.tid)
        while True:
            key = hs.end_next(now)
            if key is None:
                break
            self._hold_drop(key)
        self._arm()

    def _unsure(self, key: Tuple[int, str, str]) -> bool:
        """Whether the hold key is lost or in doubt at this moment by the
        session's rule (Holds.is_lost), its report made or not: asked right
        after the loop was blocked past the hold's deadline, before the
        timer has run (as hilock_async_is_lost)."""
        return key in self._held and bool(self._holds.is_lost(key, self._now_ms()))

    def _report_lost(self) -> None:
        """The holds the session found lost (a renewal or a check found the
        field gone): each stops listening and is reported."""
        while True:
            key = self._holds.lost_next()
            if key is None:
                return
            h = self._held.get(key)
            if h is None:
                self._holds.remove(key)
                continue
            expired = self._holds.state(key)[2]  # reported in doubt first
            self._hold_drop(key, h)
            self._count_lost(key, h.tid, _S_LOST_EXPIRED if expired else _S_LOST_GONE)
            self._mark_lost(key, h.tid)

    async def _renew(self, due: Dict[Tuple[int, str, str], _Hold]) -> None:
        """Renew the holds the session handed out, pipelined (cluster: one
        batch per master, all at once). A node that says it is no master of
        a lock any more has its holds sent again on the master looked up
        anew, twice at most. Every hold's outcome reaches the session,
        whatever happens (TROUBLE for the ones no answer came for)."""
        try:
            for _ in range(3):
                if self._sentinel:
                    # at most one question to the sentinels a second: after a
                    # failover the renewals go to the new master within a tick,
                    # not only once the old one refuses writes
                    await self._master_addr()
                if not await self._renew_batch(due):
                    return
                await asyncio.sleep(_REDIRECT_PAUSE_MS / 1000.0)  # redirected: on the new master
        except Error:
            pass  # trouble: the next renewal goes out when due
        finally:
            now = self._now_ms()
            for key, h in due.items():
                if self._held.get(key) is h:
                    self._holds.outcome(key, _E.RENEW_TROUBLE, True, now)
            self._report_lost()
            self._arm()

    async def _renew_batch(self, due: Dict[Tuple[int, str, str], _Hold]) -> bool:
        """One pipelined renewal of the holds in due (cluster: one per
        master, all at once); their outcomes are fed and they leave due,
        but for those a node redirected. True when one was."""
        if not self._cluster:
            return await self._renew_on(self._pool, list(due.items()), due)
        groups: Dict[Tuple[str, int], List[Tuple[Tuple[int, str, str], _Hold]]] = {}
        for it in due.items():
            groups.setdefault(await self._slot_addr(it[1].names.slot), []).append(it)
        res = await asyncio.gather(*(self._renew_on(self._pool_at(a), g, due)
                                     for a, g in groups.items()), return_exceptions=True)
        return any(r is True for r in res)

    async def _renew_on(self, pool: _Pool, items: List[Tuple[Tuple[int, str, str], _Hold]],
                        due: Dict[Tuple[int, str, str], _Hold]) -> bool:
        redirected = False
        conn = pool.get_nowait() or await pool.get()
        reqs = [conn.request(h.names.renew_cmd(h.owner, self._wd_ms)) for _k, h in items]
        self._st[_C_RENEWAL_COMMANDS] += len(reqs)
        sent = self._now_ms()
        good = True
        answered: List[Tuple[Tuple[int, str, str], _Hold, int, int]] = []
        for (key, h), req in zip(items, reqs):
            st = await _await_req(self._loop, req, self._cmd_ms) if good else 2
            if st != 0:
                good = False
                self._st[_C_RENEWAL_FAILURES] += 1
                continue
            out = _E.renew_outcome(req.reply)
            this_sent = sent
            if out == _E.RENEW_EVAL:
                again = conn.request(h.names.renew_cmd(h.owner, self._wd_ms, True))
                self._st[_C_RENEWAL_COMMANDS] += 1
                this_sent = self._now_ms()
                reqs.append(again)  # keeps order: read right now
                if await _await_req(self._loop, again, self._cmd_ms) != 0:
                    good = False
                    self._st[_C_RENEWAL_FAILURES] += 1
                    continue
                out = _E.renew_outcome(again.reply)
            if out == _E.RENEW_REDIRECT:
                good = False
            answered.append((key, h, out, this_sent))
        acked, given = True, False
        if self._ack:
            # replica_ack: a renewal no replica took is no confirmation (a
            # master cut off from its replicas may be replaced by one whose
            # lease runs from the last renewal it took): WAIT on the same
            # connection, as for a grant (the session applies hl_renew_unacked)
            if good and any(a[2] == _E.RENEW_RENEWED for a in answered):
                cancel = _Cancel()
                acked = await self._replica_ack(conn, cancel)  # gives conn back
                given = True
                if cancel.exc is not None:
                    raise cancel.exc
            else:
                acked = False
        if given:
            pass
        elif good:
            pool.put(conn)
        else:
            conn.close()
        for key, h, out, this_sent in answered:
            if out == _E.RENEW_REDIRECT:
                self._st[_C_RENEWAL_FAILURES] += 1
                if self._cluster:
                    self._map_stale = True  # the slot moved (or a failover)
                elif not redirected:
                    self._not_master()
                redirected = True
                continue  # stays due: sent again
            if due.pop(key, None) is not h or self._held.get(key) is not h:
                continue  # released meanwhile (and maybe granted anew)
            out = self._holds.outcome(key, out, acked, this_sent)
            if out != _E.RENEW_LOST:
                self._st[_C_RENEWALS if out == _E.RENEW_RENEWED else _C_RENEWAL_FAILURES] += 1
        return redirected

    # -- holders listen on their lock's channel -------------------------------

    def _hold_start(self, key: Tuple[int, str, str], names: Any, owner: str, tid: int,
                    lease_ms: int, sent_at: int) -> None:
        """A hold granted by an attempt sent at sent_at (Client._now_ms;
        lease_ms: its fixed lease, 0 = the watchdog's): the session's table
        has it (renewed, or ended with its lease), and it listens on its
        lock's channel (names.hold_channel, one subscription per name shared
        with waiters and the name's other holds), so that a force unlock is
        reported at once, not at the next renewal or never (a fixed lease).
        A fixed lease's hold listens until that lease ends (the latest
        grant's)."""
        h = self._held.get(key)
        self._holds.grant(key, not lease_ms, lease_ms, sent_at)
        if h is None:
            h = self._held[key] = _Hold(names, owner, tid)
            ps = self._pubsub
            if self._cluster or not ps.observe_now(names.hold_channel, key):
                self._spawn(self._observe(key, h))  # a connection to open, or a slot to find
            else:
                h.ps = ps
        self._arm()

    async def _observe(self, key: Tuple[int, str, str], h: _Hold) -> None:
        """Listen for hold h where its slot lives (cluster: the map reloaded
        first when stale)."""
        n = h.names
        ps: Optional[_PubSub]
        if not self._cluster:
            ps = self._pubsub
        else:
            try:
                addr = await self._slot_addr(n.slot)
            except Error:
                return  # unheard: the watchdog still renews it
            ps = self._pubsubs.get(addr)
            if ps is None:
                ps = self._pubsubs[addr] = _PubSub(self, addr)
        if self._held.get(key) is not h or self._closed:
            return
        h.ps = ps
        await ps.observe(n.hold_channel, key)

    def _hold_drop(self, key: Tuple[int, str, str], h: Optional[_Hold] = None) -> None:
        """key's hold is over (released, lost, or its fixed lease ended):
        it stops listening."""
        cur = self._held.get(key)
        if cur is None or (h is not None and cur is not h):
            return
        del self._held[key]
        self._holds.remove(key)
        if cur.ps is not None:
            cur.ps.unobserve(cur.names.hold_channel, key)

    def _holds_moved(self, keys: List[Tuple[int, str, str]]) -> None:
        """Their channel is no longer heard where they listened (cluster:
        the slot moved, or the node's connection closed): listen again where
        the slot map says. (Not checked now: the map may still name the node
        that dropped the channel; a force unlock unheard meanwhile is found
        by the watchdog's next renewal.)"""
        for key in keys:
            h = self._held.get(key)
            if h is not None and not self._closed:
                h.ps = None
                self._spawn(self._observe(key, h))

    def _heard(self, keys: List[Tuple[int, str, str]], r: Any) -> None:
        """A pub/sub frame r on the channel these holds listen on: the
        session (Holds.heard) says which are to be checked now."""
        if self._closed:
            return
        now = self._now_ms()
        due = False
        for key in keys:
            due = self._holds.heard(key, r, now) or due
        if due:
            self._send_checks()

    def _unheard(self, keys: List[Tuple[int, str, str]]) -> None:
        """The pub/sub connection these holds listen on is not known alive
        (Sublive.due's SUBLIVE_CHECK): the session (Holds.unheard) says which
        are to be checked now."""
        if self._closed:
            return
        now = self._now_ms()
        due = False
        for key in keys:
            due = self._holds.unheard(key, now) or due
        if due:
            self._send_checks()

    def _send_checks(self) -> None:
        """Send the checks the session hands out ("is the hold still
        there?": the engine's hold_check_cmd, no renewal), one task each."""
        now = self._now_ms()
        while True:
            key = self._holds.check_next(now)
            if key is None:
                return
            h = self._held.get(key)
            if h is None or self._closed:
                self._holds.check_outcome(key, None)
            elif h.releasing:
                h.after = True  # its release answers first (usually that message is its own)
                self._holds.check_outcome(key, None)
            else:
                self._spawn(self._check_hold(key, h))

    async def _check_hold(self, key: Tuple[int, str, str], h: _Hold) -> None:
        gone: Optional[bool] = None
        try:
            n = h.names
            try:
                gone = _E.hold_gone(await self._call(n.hold_check_cmd(h.owner), n.slot))
            except Error:
                gone = None  # nothing known: the watchdog's renewals and doubt timer go on
            if gone and h.releasing:
                h.after = True  # the release says "not owner", or keeps it: look again then
                gone = None
        finally:
            if self._held.get(key) is h:  # else released meanwhile: out of the table
                self._holds.check_outcome(key, gone)
        self._report_lost()
        self._send_checks()  # one heard again while this was out

    def _release_done(self, key: Tuple[int, str, str], h: _Hold) -> None:
        """A release of h's hold ended: a check that found it gone meanwhile
        is made again if the hold is still believed held."""
        h.releasing -= 1
        if not h.releasing and h.after:
            h.after = False
            if self._held.get(key) is h and self._holds.check(key, self._now_ms()):
                self._send_checks()

    def _mark_lost(self, key: Tuple[int, str, str], tid: int) -> None:
        if len(self._lost) >= 65536:
            self._lost.pop(next(iter(self._lost)))
        self._lost[key] = None
        mls = self._ml_hooks.get((key[0], key[1]))
        if mls:
            for ml in list(mls):
                ml._member_lost(self, key, tid)
        views = self._listeners.get((key[0], key[1]))
        if not views:
            return
        for view in list(views):
            cb = view._on_lost
            if cb is None or (view._tid is not None and view._tid != tid):
                continue
            self._call_lost(cb, view, tid)

    def _call_lost(self, cb: LostCallback, view: Any, tid: int) -> None:
        """An on_lost callback, on the loop; a coroutine it returns, as a task."""
        try:
            res = cb(view, tid)
            if asyncio.iscoroutine(res):
                self._spawn(res)
        except Exception:  # a callback's error must not stop the watchdog
            self._loop.call_exception_handler(
                {"message": "hilock.aio on_lost callback failed", "exception": None})

    # -- statistics -----------------------------------------------------------

    @property
    def stats_names(self) -> int:
        """The per-name limit the client was made with (0: no per-name
        counters)."""
        return self._stats_names

    def stats(self, by_name: bool = False) -> Dict[str, Any]:
        """The client's counters as a dict of the same shape, names and
        meanings as :meth:`hilock.Client.stats` (docs/observability.md):
        ``kinds`` maps each lock kind to its acquire outcomes, grant paths,
        ``wait_ms`` / ``hold_ms`` buckets and losses; the top level holds
        the client's renewal, settle, reconnect, redirect and replica
        figures. ``by_name=True`` (a client made with ``stats_names`` > 0)
        adds ``names``, the per-name counters, as the blocking client's.
        Counted by this client since it was made; no I/O. Raises
        ClosedError on a closed client, InvalidArgument for ``by_name=True``
        without ``stats_names``."""
        if by_name and not self._stats_names:
            raise InvalidArgument("invalid argument: stats(by_name=True) needs a client made "
                                  "with stats_names > 0", _E.E_INVAL)
        if self._closed:
            raise ClosedError("client is closed")
        flat: List[int] = [1]
        for k in self._st_kind:
            flat.extend(k)
        flat.extend(self._st)
        out = _stats_from_tuple(tuple(flat))
        if by_name:
            names: List[Dict[str, Any]] = []
            entries: List[Tuple[int, Optional[str], List[int]]] = [
                (kind, name, st) for (kind, name), st in self._st_names.items()]
            entries += [(kind, None, st) for kind, st in enumerate(self._st_other)
                        if kind and any(st)]
            for kind, name, st in entries:
                d: Dict[str, Any] = {"kind": _KIND_NAME[kind], "name": name}
                d.update(_figures_from(st))
                names.append(d)
            out["names"] = names
        return out

    def _name_slot(self, kind: int, name: str) -> Optional[List[int]]:
        """Where the counts of (kind, name) go besides the kind's (None:
        per-name counters off): its entry, made on its first count while
        fewer than stats_names are tracked, else its kind's other entry."""
        if not self._stats_names or not 0 < kind < _KINDS:
            return None
        st = self._st_names.get((kind, name))
        if st is None:
            if len(self._st_names) >= self._stats_names:
                return self._st_other[kind]
            st = self._st_names[(kind, name)] = [0] * _S_LEN
        return st

    def _count_acquire(self, kind: int, name: str, wait_ms: int, code: int, path: int,
                       started: float) -> None:
        """An acquire call of the lock (kind, name) ended: code 0 granted
        (path), E_TIMEDOUT, E_CANCELED; started: its loop time at the start."""
        ms = (self._loop.time() - started) * 1000.0
        k = self._st_kind[kind if 0 < kind < _KINDS else 0]
        n = self._name_slot(kind, name)
        for st in (k, n) if n is not None else (k,):
            if code == _E.E_TIMEDOUT and wait_ms == 0:
                st[_S_BUSY] += 1  # a try, not a wait
                continue
            if code == 0:
                st[_S_GRANTED] += 1
                st[path] += 1
            elif code == _E.E_TIMEDOUT:
                st[_S_TIMED_OUT] += 1
            else:
                st[_S_CANCELLED] += 1
            st[_S_WAIT + _bucket(ms)] += 1

    def _count_first_grant(self, kind: int, name: str, ms: float) -> None:
        """An acquire granted by its first attempt after ms (the direct path)."""
        n = self._name_slot(kind, name)
        for st in (self._st_kind[kind], n) if n is not None else (self._st_kind[kind],):
            st[_S_GRANTED] += 1
            st[_S_FIRST] += 1
            st[_S_WAIT + _bucket(ms)] += 1

    def _hold_end(self, key: Tuple[int, str, str]) -> None:
        """key's hold ended (its last release, or its loss): its hold time."""
        at = self._since.pop(key, None)
        if at is not None:
            b = _S_HOLD + _bucket(self._now_ms() - at)
            self._st_kind[key[0] if 0 < key[0] < _KINDS else 0][b] += 1
            n = self._name_slot(key[0], key[1])
            if n is not None:
                n[b] += 1

    def _count_lost(self, key: Tuple[int, str, str], tid: int, field: int,
                    silent_ms: int = 0) -> None:
        """key's hold was lost (field: _S_LOST_*): counted, its hold ended,
        logged at WARNING on the "hilock" logger (as the blocking client's
        trace: the lock's name and thread, never a URL)."""
        self._st_kind[key[0] if 0 < key[0] < _KINDS else 0][field] += 1
        n = self._name_slot(key[0], key[1])
        if n is not None:
            n[field] += 1
        self._hold_end(key)
        if field == _S_LOST_DOUBT:
            _log.warning("lock %r lost (in doubt): no renewal confirmed for %d ms; thread %d "
                         "must stop using it", key[1], silent_ms, tid)
        else:
            _log.warning("lock %r lost: %s; it was held by thread %d", key[1],
                         "its lease ran out while renewals went unconfirmed"
                         if field == _S_LOST_EXPIRED
                         else "removed on the server (force unlock or deleted)", tid)

    def __repr__(self) -> str:
        return f"<hilock.aio.Client {self._url!r} id={self._id}{' closed' if self._closed else ''}>"


# --------------------------------------------------------------------------
# acquire and release: the engine's machines, driven
# --------------------------------------------------------------------------


def _new_acquire(c: Client, names: Any, owner: str, wait_ms: int, lease_ms: int,
                 line_ms: int = 0) -> Any:
    """The engine's acquire machine for one run."""
    c._seq += 1
    # the acquire latch on every topology (a migrating slot makes the
    # scripts go on without it: acquire_latch.lua)
    return names.acquire(owner, wait_ms, lease_ms, c._window_ms, c._latch_epoch, c._seq,
                         c._latch_ttl_ms, line_ms)


async def _run_acquire(c: Client, names: Any, owner: str, wait_ms: int, lease_ms: int,
                       cancel: _Cancel, keep: bool = False, line_ms: int = 0,
                       m: Any = None, first: Any = None,
                       sent: Optional[Tuple[_Req, int]] = None, bounded: bool = False,
                       ttl_out: Optional[List[int]] = None,
                       sent_at: Optional[List[int]] = None,
                       waits: Optional[List[int]] = None,
                       why: Optional[List[str]] = None
                       ) -> Tuple[int, int, int, Optional[_Conn]]:
    """One run of the acquire machine: (result, hold_count, token, conn);
    keep: conn is the granting attempt's connection (for the replica
    acknowledgement; the caller gives it back), else None. line_ms > 0: a
    multi-lock member's one try joins the fair lock's line with that window
    (the multi-lock leaves it). m: a machine already started (Lock._acquire's
    first attempt), first: its action taken but not yet done, and when that
    is a send already made directly, sent = (its request, cancel.req's
    status). bounded: a multi-lock member's try, which does not wait for
    its server to settle an earlier attempt (_settle_gate). ttl_out: gets
    the remaining lease the last refused attempt reported. sent_at[0]: set
    to when each attempt goes out (Client._now_ms; the last one is the
    grant's, whose lease a watchdog hold's doubt is counted from). waits:
    gets, per wait, 1 when a message (or a cancel) ended it, 0 when its
    timer did (the grant's path in the stats). why: gets the last
    connection trouble, naming the server (for the error the caller raises
    when the run ends in one)."""
    loop = c._loop
    ps: Optional[_PubSub] = None  # where w listens
    slot = names.slot
    if m is None:
        m = _new_acquire(c, names, owner, wait_ms, lease_ms, line_ms)
    w: Optional[_Waiter] = None
    channel = ""
    held: Optional[_Conn] = None  # the last attempt's connection (keep)
    try:
        while True:
            if first is not None:
                t, first = first, None
            else:
                if cancel.exc is not None:
                    m.cancel()
                t = m.next()
            act = t[0]
            if act == _SEND:
                if sent is None:
                    if t[2] and c._settling:  # an attempt; its server may be stalled
                        code = await c._settle_gate(slot, bounded, cancel)
                        if code:
                            if code == _E.E_CONN:
                                _trouble(why, f"server {c._where_slot(slot)} has not "
                                         "answered an earlier attempt yet (still being "
                                         "settled); no new attempt sent to it")
                            m.on_error(code)
                            continue
                    if sent_at is not None:
                        sent_at[0] = c._now_ms()
                st, req, conn, code = await _send(c, slot, t[1], c._cmd_ms, cancel, sent)
                sent = None
                if st == 3:
                    _trouble(why, req)
                    m.on_error(code)
                    continue
                assert conn is not None
                if st == 0:
                    again = m.on_reply(req.reply)
                    if again is None and req.reply.error is not None:
                        _trouble(why, _answered(_E.E_PROTO, conn, req.reply))
                    if again is not None:  # the script body: routed again (the
                        # node that answered may not be the slot's master)
                        conn.give()
                        st, req, conn2, code = await c._routed(slot, again, c._cmd_ms, cancel)
                        if st == 3:
                            _trouble(why, req)
                            m.on_error(code)
                            continue
                        assert conn2 is not None
                        conn = conn2
                        if st == 0:
                            m.on_reply(req.reply)
                            if req.reply.error is not None:
                                _trouble(why, _answered(_E.E_PROTO, conn, req.reply))
                if st == 0:
                    if keep and t[2]:
                        if held is not None:
                            held.give()
                        held = conn
                    else:
                        conn.give()
                elif st == 1 and t[2]:
                    # the attempt may still run on the server: settle it there;
                    # later calls take another latch key (its late copy must find it)
                    _trouble(why, _E.no_reply_msg(c._cmd_ms, conn.what))
                    conn.broken = True
                    c._latch_epoch += 1
                    s = m.on_unknown(_E.E_CONN, c._request_id(), c._cmd_ms, c._unsettled_acq)
                    if s is None:
                        conn.close()
                    else:
                        c._start_settle(conn, req, s, (names.name, owner))
                        s = None
                else:
                    _trouble(why, _E.no_reply_msg(c._cmd_ms, conn.what) if st == 1
                             else f"{conn.what} closed the connection before the reply")
                    conn.close()
                    if st == 2 and t[2]:
                        # sent, and the connection died: the engine settles it
                        # through the latch before finishing
                        c._latch_epoch += 1
                        m.on_reply_lost(_E.E_CONN)
                    else:
                        m.on_error(_E.E_CONN)
            elif act == _SUBSCRIBE:
                if held is not None:  # do not sit on a connection while waiting
                    held.give()
                    held = None
                channel = t[1]
                w, ps = await _subscribe_step(c, m, slot, channel, cancel)
            elif act == _WAIT:
                # the last attempt's request (and its reply) are not kept
                # alive while waiting: the next send makes a new one
                ms, t, req = t[2], None, None
                w = await _wait_step(loop, m, w, ms, cancel, waits)
            elif act == _UNSUBSCRIBE:
                if w is not None:
                    _leave(c, ps, t[1], w)
                    w = None
            else:
                c._unsettled_acq.after(m)  # the session keeps an attempt left unsettled
                if ttl_out is not None:
                    ttl_out.append(m.last_ttl())
                got: Optional[_Conn] = None
                if t[1] == 0:  # the grant's connection, for the caller's ack
                    got, held = held, None
                # else a kept attempt's connection (refused, timed out,
                # failed) goes back to its pool below
                return t[1], t[2], t[3], got
    finally:
        if w is not None:
            _leave(c, ps, channel, w)
        if held is not None:
            held.give()


async def _send(c: Client, slot: int, data: bytes, timeout_ms: int, cancel: _Cancel,
                sent: Optional[Tuple[_Req, int]] = None) -> Tuple[int, Any, Optional[_Conn], int]:
    """data to the master of slot: on an idle connection when nothing is to
    be routed (_send_idle), else through Client._routed; an error reply goes
    to the router. sent: (request, status as _Cancel.req's) of data already
    on the wire. (st, req, conn, code) as Client._routed."""
    if sent is None:
        req = _send_idle(c, data)
        if req is None:
            return await c._routed(slot, data, timeout_ms, cancel)
        st = await cancel.req(c._loop, req, timeout_ms)
    else:
        req, st = sent
    if st == 0 and req.reply.error is not None:  # the router's say first
        return await c._routed(slot, data, timeout_ms, cancel, req)
    return st, req, req.conn, 0


def _trouble(why: Optional[List[str]], what: Any) -> None:
    """Keep what went wrong on the way to a server for the caller's error:
    an Error's detail, or a text; nothing for None (a cancel)."""
    if why is None or what is None:
        return
    text = (what.detail or str(what)) if isinstance(what, Error) else str(what)
    if text:
        why[:] = [text]


def _send_idle(c: Client, data: bytes) -> Optional[_Req]:
    """The usual case of a send: one server (nothing to route) and an idle
    connection. data is sent on it; its request, or None (then the caller
    goes through Client._routed). Pool.get_nowait and _Conn.request in one
    call: this runs twice per acquire+release pair."""
    if c._cluster or c._sentinel:
        return None
    idle = c._pool.idle
    gen = c._gen
    while idle:
        conn = idle.pop()
        if conn.closed or conn.gen != gen or conn.transport is None:
            conn.close()  # closed, or to a master that is no more
            continue
        req = _Req(conn, _Fut(conn.loop))
        conn.pending.append(req)
        conn.transport.write(data)
        return req
    return None


def _leave(c: Client, ps: Optional[_PubSub], channel: str, w: _Waiter) -> None:
    """w leaves channel. ps is None when a cancellation came while joining:
    w may then be a member on any pub/sub connection (leave is a no-op
    where it is not), and must not stay subscribed (as _aio_sem does)."""
    for p in ([ps] if ps is not None else [c._pubsub, *c._pubsubs.values()]):
        p.leave(channel, w)


async def _direct_wait(c: Client, req: _Req, cancel: _Cancel,
                       exc: Optional[BaseException] = None) -> None:
    """Wait for the reply to a command Direct sent (its deadline and the
    connection's timer already set). A cancellation (or exc, one that came
    while the caller waited itself) is remembered in cancel and the wait
    goes on until the outcome is known."""
    if exc is None:
        try:
            await req.fut
            return
        except asyncio.CancelledError as e:
            exc = e
    cancel.exc = cancel.exc or exc  # the command is on the wire: its answer first
    left = max(1, int((req.deadline - c._loop.time()) * 1000)) if req.deadline else c._cmd_ms
    await cancel.req(c._loop, req, left)


async def _release(c: Client, names: Any, owner: str, key: Tuple[int, str, str],
                   m: Any = None, first: Any = None, sent: Optional[Tuple[_Req, int]] = None,
                   cancel: Optional[_Cancel] = None, rid: Optional[str] = None,
                   again: bool = False) -> None:
    """Run the release machine. A cancellation while a command is on the
    wire waits for its answer first (so the hold and the watchdog agree),
    then propagates. m: a machine already started (Lock.release's Direct
    call), first: the action it took and has not done yet, and when that is
    a send already made, sent = (its request, status as _Cancel.req's).
    rid: the request id m was made with, or to make it with (None: a new
    one); again: rid is a release that got no answer, sent again (the
    session keeps it already)."""
    if cancel is None:
        cancel = _Cancel()
    at = _E.now_ms()
    if m is None:
        rid = rid or c._release_id()
        m = names.release(owner, c._leases.get(key, 0), c._wd_ms, rid, c._cmd_ms)
        if key in c._lost:
            m.known_lost()  # a fair unlock's "released" cannot be trusted after a loss
    h = c._held.get(key)
    if h is not None:
        h.releasing += 1
    try:
        await _release_run(c, names, owner, key, m, first, sent, cancel,
                           None if again else rid, at)
    finally:
        if h is not None:
            c._release_done(key, h)


async def _release_run(c: Client, names: Any, owner: str, key: Tuple[int, str, str],
                       m: Any, first: Any, sent: Optional[Tuple[_Req, int]],
                       cancel: _Cancel, rid: Optional[str], at: int) -> None:
    where = ""  # the server of the last try that got no answer, for the message
    while True:
        if first is not None:
            t, first = first, None
        else:
            t = m.next()
        if t[0] != _SEND:
            break
        if sent is None and cancel.exc is not None:
            raise cancel.exc  # nothing on the wire: the hold is as it was
        st, req, conn, code = await _send(c, names.slot, t[1], t[2] if t[2] > 0 else c._cmd_ms,
                                          cancel, sent)
        sent = None
        if st == 3:
            if cancel.exc is not None and code == _E.E_CANCELED:
                raise cancel.exc  # nothing more on the wire
            m.on_error(code)
        elif st == 0:
            assert conn is not None and conn.pool is not None
            conn.give()
            m.on_reply(req.reply)
        else:
            assert conn is not None
            where = conn.what or where
            conn.close()
            # sent, and no reply: a late copy may still reach the server, so
            # later releases use another unlock latch (the one resend below
            # still finds this one's)
            c._latch_epoch += 1
            m.on_error(_E.E_CONN)
    _release_end(c, names, owner, key, t, cancel.exc, where, rid, at)


def _release_end(c: Client, names: Any, owner: str, key: Tuple[int, str, str], t: Any,
                 exc: Optional[BaseException], where: str = "", rid: Optional[str] = None,
                 at: int = 0) -> None:
    """The release machine's outcome t (ACT_DONE, result, remaining,
    still_held, renew, unconfirmed): the hold's bookkeeping, then exc or the
    result's error. rid: its request id, sent at at (_E.now_ms()), for the
    session to keep when no try got an answer (None: kept already)."""
    unconfirmed = bool(t[5]) and t[1] != 0
    if not t[3]:
        c._leases.pop(key, None)
        c._hold_drop(key)
        if t[1] == 0:
            c._hold_end(key)
    elif not t[4]:
        # the engine's rule (hl_release.renew): a release no try got an
        # answer to may or may not have run; renewing the hold would keep
        # the lock for the client's whole life when it did not. Unrenewed,
        # it ends at its lease at the latest.
        c._hold_drop(key)  # no longer believed held: nor renewed, nor listened for
    lease = 0
    if unconfirmed:
        lease = max(c._wd_ms, c._leases.get(key, 0))
        if rid is not None:  # the session sends it again before the owner's next acquire
            c._unsettled_acq.rel_put(names.name, owner, rid, at + lease, _E.now_ms())
    if t[1] == _E.E_NOTOWNER:
        c._since.pop(key, None)  # over, not timed (as the blocking client)
    if exc is not None:
        raise exc
    result = t[1]
    if result:
        if result == _E.E_NOTOWNER:
            raise NotOwnerError(f"not owner: lock {names.name!r} is not held by {owner}",
                                result)
        if unconfirmed:
            _raise(result, f"release of lock {names.name!r} not confirmed (no answer from "
                   f"{where or c._url}); renewal stopped: it ends at its lease ({lease} ms) at "
                   "the latest")
        _raise(result, f"release of lock {names.name!r}")


async def _quietly(coro: Any) -> None:
    """Run coro (giving back what nobody asked for: a grant or permits a
    cancelled acquire took) to its end even if the caller is cancelled
    again; its errors are dropped (the lease is the last resort)."""
    t = asyncio.get_running_loop().create_task(coro)
    while not t.done():
        try:
            await asyncio.shield(t)
        except asyncio.CancelledError:
            continue
        except Error:
            return
    if not t.cancelled():
        t.exception()


class Lock:
    """A reentrant, fair, fenced, read or write lock of an aio Client. Get
    one with ``client.lock(name)``, ``client.fair_lock(name)``, ... Owned by
    the current asyncio task (or the thread_id given at creation)."""

    def __init__(self, client: Client, names: Any, wait: Optional[Seconds] = None,
                 lease: Optional[Seconds] = None, thread_id: Optional[int] = None) -> None:
        self._c = client
        self._n = names
        self._kind: int = names.kind  # kept: Names makes a new str per .name
        self._name: str = names.name
        self._tid = _check_tid(thread_id)
        _wait_ms(wait)
        _lease_ms(lease)
        self._wait = wait
        self._lease = lease
        self._on_lost: Optional[LostCallback] = None
        self._token = 0
        # (task ref, _who() of that task)
        self._last: Optional[Tuple["weakref.ReferenceType[asyncio.Task[Any]]",
                                   Tuple[str, int, Tuple[int, str, str]]]] = None
        self._fixed: Optional[Tuple[str, int, Tuple[int, str, str]]] = None  # _who() for thread_id

    @property
    def name(self) -> str:
        return str(self._n.name)

    @property
    def kind(self) -> str:
        """``reentrant``, ``fair``, ``fenced``, ``read`` or ``write``."""
        return {_E.KIND_REENTRANT: "reentrant", _E.KIND_FAIR: "fair", _E.KIND_FENCED: "fenced",
                _E.KIND_READ: "read", _E.KIND_WRITE: "write"}[self._n.kind]

    @property
    def fair(self) -> bool:
        return bool(self._n.kind == _E.KIND_FAIR)

    @property
    def client(self) -> Client:
        return self._c

    @property
    def thread_id(self) -> Optional[int]:
        """The explicit thread id given at creation, or None (current task)."""
        return self._tid

    def _who(self) -> Tuple[str, int, Tuple[int, str, str]]:
        """(owner, thread id, the client's key of the hold) of the caller:
        the explicit thread id's, or the current task's."""
        if self._tid is not None:
            w = self._fixed
            if w is None:
                owner = _E.hold_owner(self._kind, self._c._id, self._tid)
                w = self._fixed = (owner, self._tid, (self._kind, self._name, owner))
            return w
        # the last task's, kept (a weak reference: a task that ended can
        # neither be kept alive nor mistaken for a new one); the client's
        # loop given: no running-loop lookup, which costs a getpid() call
        t = asyncio.current_task(self._c._loop)
        last = self._last
        if last is not None and t is not None and last[0]() is t:
            return last[1]
        tid = task_id()  # RuntimeError outside a task
        owner = _E.hold_owner(self._kind, self._c._id, tid)
        w = (owner, tid, (self._kind, self._name, owner))
        if t is not None:
            self._last = (weakref.ref(t), w)
        return w

    def _owner(self) -> Tuple[str, int]:
        w = self._who()
        return w[0], w[1]

    def _key(self, owner: str) -> Tuple[int, str, str]:
        return (self._kind, self._name, owner)

    async def acquire(self, wait: Any = None, lease: Optional[Seconds] = None, *,
                      blocking: Optional[bool] = None,
                      timeout: Optional[Seconds] = None) -> bool:
        """Acquire (or re-enter) the lock. wait: None = forever, 0 = one
        try, > 0 = at most that many seconds; lease: None = watchdog, > 0 =
        expires after that many seconds. Returns False when the wait
        elapsed. Cancelling the task cancels the wait cleanly (nothing held,
        nothing queued) and raises CancelledError.

        threading.Lock's form works too, as on hilock.Lock:
        ``acquire(blocking=False)``, ``acquire(timeout=5)``,
        ``acquire(False)``, ``acquire(True, 5)`` (then the lease is the
        watchdog)."""
        if blocking is not None or timeout is not None or isinstance(wait, bool):
            wait, lease = _protocol_args(wait, lease, blocking, timeout)
        w = 0 if wait == 0 and type(wait) is int else _wait_ms(wait)
        l = 0 if lease is None else _lease_ms(lease)  # 0: the watchdog's
        c = self._c
        if c._unsettled_acq.rel_any():
            await self._settle_release()
        if c._unsettled_acq:
            await self._settle_earlier()
        d = c._direct  # None until open, after close, and beyond one server
        if d is None or c._closed or c._settling:  # (settling: the gate's path)
            return await self._acquire(w, l)
        # one server: the first attempt made by the engine in one call; an
        # uncontended acquire ends here (no frame of the general path)
        owner, tid, key = self._who()
        at = c._now_ms()  # the attempt goes out now (a watchdog hold's lease runs from then)
        got = d.acquire(self._n, owner, w, l or c._wd_ms)
        if got is None:  # no idle connection: the general path opens one
            return await self._acquire(w, l)
        m, req = got
        try:
            await req.fut
        except asyncio.CancelledError as e:
            return await self._acquire(w, l, (m, req, None, e), at)
        nxt = d.done(m, req)
        if nxt is None:  # no reply, or an error reply for the router
            return await self._acquire(w, l, (m, req, None, None), at)
        if nxt[0] == _DONE and nxt[1] == 0:
            c._count_first_grant(self._kind, self._name, c._now_ms() - at)
            return self._granted(owner, tid, key, l, nxt[3], at)
        return await self._acquire(w, l, (m, None, nxt, None), at)

    async def _settle_earlier(self) -> None:
        """The session's rule (Unsettled.before): an earlier attempt of this
        owner on this lock that may have been granted and was never settled
        is settled first; when that fails too, or another call of this
        owner settles one, this acquire fails instead of entering."""
        c = self._c
        owner = self._who()[0]
        waited = handed = False
        while True:
            m = c._unsettled_acq.before(self._n, owner, c._window_ms)
            if m is None:
                return
            if m is True:  # its settle runs: take it over if the engine lets us,
                if not handed:
                    handed = True
                    if await c._hand_over((self._name, owner)):
                        continue
                if not waited and c._settling:  # else wait as the gate does, once
                    waited = True
                    await c._settle_gate(self._n.slot, False, _Cancel())
                    continue
            else:
                await _run_acquire(c, self._n, owner, 0, 1, _Cancel(), m=m)
                if c._unsettled_acq.settled(m):
                    continue
            _raise(_E.E_CONN, f"an earlier acquire attempt of this owner on lock "
                   f"{self._name!r} is not settled yet; not entered")

    async def _settle_release(self, release: bool = False) -> None:
        """The session's rule (Unsettled.rel_next), before this owner's
        acquire, or its release when release is True: this owner's releases
        of the lock that got no answer (their holds may still be there) are
        sent again first, each under its own request id, rather than
        re-entered, and before a new release so that the owner's releases
        run in the order asked (a newer one that ran first would leave its
        higher seq in the owner's unlock latch, which then refuses the older
        one as a late copy and a hold is left: simulator seed 1009751). Not
        owner: they ran, or the hold expired; any other failure is the
        acquire's, nothing acquired (the session keeps them), or for a
        release: the new one is not sent but kept after them and the call
        fails saying so. A refusal (not all could be kept) fails an acquire
        until their lease has ended; a release goes on."""
        c = self._c
        owner, _tid, key = self._who()
        u = c._unsettled_acq
        while True:
            rid, refused = u.rel_next(self._name, owner, _E.now_ms())
            if rid is None:
                if refused > 0 and not release:
                    _raise(_E.E_CONN, f"releases of lock {self._name!r} got no answer and not "
                           "all could be kept to be sent again; not entered until their lease "
                           f"ends (in {max(0, refused - _E.now_ms())} ms)")
                return
            ran: Optional[bool] = None
            err: Optional[Error] = None
            try:
                await _release(c, self._n, owner, key, rid=rid, again=True)
                ran = True
            except NotOwnerError:
                ran = False
            except Error as e:
                if not release:
                    raise
                err = e
            finally:
                u.rel_end(self._name, owner, rid, ran, _E.now_ms())
            if err is not None:
                self._release_deferred(owner, key, err)

    def _release_deferred(self, owner: str, key: Tuple[int, str, str], err: Error) -> None:
        """A new release of owner not sent because an earlier one, sent
        again first, got no answer again (err): kept after that one (the
        session sends both, in order, before the owner's next acquire or
        release), as a release that got no answer: its hold, renewal
        stopped, ends at its lease at the latest. Raises."""
        c = self._c
        lease = max(c._wd_ms, c._leases.get(key, 0))
        now = _E.now_ms()
        c._unsettled_acq.rel_put(self._name, owner, c._release_id(), now + lease, now)
        c._hold_drop(key)  # no longer believed held: nor renewed, nor listened for
        _raise(err.code or _E.E_CONN,
               f"release of lock {self._name!r} not sent: an earlier release of this owner got "
               "no answer again; sent after it, before the next acquire; renewal stopped: it "
               f"ends at its lease ({lease} ms) at the latest")

    async def _acquire(self, w: int, l: int, direct: Any = None, direct_at: int = 0) -> bool:
        """The general path (see _acquire_run), counted in the client's
        stats: the call's outcome, how a grant came, its time."""
        c = self._c
        # from acquire's own first attempt when it made one (the same clock)
        started = (direct_at / 1000.0 if direct is not None
                   else c._loop.time() if c._loop is not None else 0.0)
        waits: List[int] = []
        try:
            got = await self._acquire_run(w, l, direct, direct_at, waits)
        except asyncio.CancelledError:
            if c._loop is not None:
                c._count_acquire(self._kind, self._name, w, _E.E_CANCELED, 0, started)
            raise
        c._count_acquire(self._kind, self._name, w, 0 if got else _E.E_TIMEDOUT,
                          _grant_path(waits), started)
        return got

    async def _acquire_run(self, w: int, l: int, direct: Any, direct_at: int,
                           waits: List[int]) -> bool:
        """The general path. direct: (m, req, t, exc) from acquire's Direct
        call: its machine m, and either req None and t the machine's next
        action, not done yet, or req its send on the wire whose reply has
        not been fed to m (exc: the cancellation that came while waiting
        for it); direct_at: when that call sent its attempt (Client._now_ms).
        waits: gets how each of the call's waits ended (_run_acquire)."""
        c = self._c
        if c._closed or not c._opened:
            c._check()
        owner, tid = self._owner()
        watchdog = l == 0
        lease = c._wd_ms if watchdog else l
        cancel = _Cancel()
        key = (self._kind, self._name, owner)
        deadline = -1 if w <= 0 else _E.now_ms() + w
        at = [direct_at]  # when the latest attempt went out (the grant's, at the end)
        why: List[str] = []  # the last connection trouble, for the error
        while True:
            left = w if deadline < 0 else max(1, deadline - _E.now_ms())
            d = c._direct
            if d is not None and (direct is not None or not c._settling):  # see acquire
                if direct is not None:
                    (m, req, t, exc), direct = direct, None
                    if exc is not None:
                        await _direct_wait(c, req, cancel, exc)
                else:
                    at[0] = c._now_ms()
                    got = d.acquire(self._n, owner, left, lease)
                    if got is None:  # no idle connection: the general path opens one
                        result, _holds, token, _c = await _run_acquire(
                            c, self._n, owner, left, lease, cancel, sent_at=at, waits=waits,
                            why=why)
                        break
                    m, req = got
                    await _direct_wait(c, req, cancel)
                sent: Optional[Tuple[_Req, int]] = None
                if req is not None:
                    nxt = d.done(m, req)
                    if nxt is None:  # no reply, or an error reply for the router
                        sent = (req, 0 if req.reply is not None else 2 if req.failed else 1)
                        t = m.sent()
                    elif cancel.exc is not None and nxt[0] != _DONE:
                        t = None  # _run_acquire cancels the machine first
                    else:
                        t = nxt
                if t is not None and t[0] == _DONE:
                    result, token = t[1], t[3]
                else:
                    result, _holds, token, _c = await _run_acquire(
                        c, self._n, owner, left, lease, cancel, m=m, first=t, sent=sent,
                        sent_at=at, waits=waits, why=why)
                break
            result, _holds, token, conn = await _run_acquire(c, self._n, owner, left, lease,
                                                             cancel, keep=c._ack, sent_at=at,
                                                             waits=waits, why=why)
            if conn is None:
                break
            if await c._replica_ack(conn, cancel) or cancel.exc is not None:
                break
            c._st[_C_REPLICA_ACK_FAILURES] += 1
            # nobody replicated the grant, so a failover now would forget it:
            # give it back, and try again while the caller may still wait
            c._leases[key] = lease
            await _quietly(_release(c, self._n, owner, key))
            pause = _E.ack_retry(w, deadline)
            if pause is None:
                raise from_code(_E.E_UNACKED, f"lock {self.name!r} released again: no replica "
                                f"acknowledged it within {c._ack_ms} ms")
            await cancel.sleep(c._loop, pause / 1000.0)
            waits.append(0)  # a timed pause before the next attempt
            if cancel.exc is not None:
                raise cancel.exc
        if result == 0:
            if cancel.exc is not None:
                if watchdog:
                    c._leases.pop(key, None)
                else:
                    c._leases[key] = l
                await _quietly(_release(c, self._n, owner, key))
                raise cancel.exc
            return self._granted(owner, tid, key, l, token, at[0])
        if cancel.exc is not None:
            raise cancel.exc
        if result == _E.E_TIMEDOUT:
            return False
        detail = {_E.E_WRONGTYPE: f"key {self.name!r} holds a value that is not a lock"}.get(
            result, f"acquire of lock {self.name!r}" + (f": {why[0]}" if why else ""))
        _raise(result, detail)
        return False  # not reached

    def _granted(self, owner: str, tid: int, key: Tuple[int, str, str], l: int,
                 token: int, sent_at: int) -> bool:
        """A hold granted to owner (key: the client's key of it; l: its
        lease, 0 = watchdog; sent_at: when the granting attempt went out,
        Client._now_ms): the client's bookkeeping of it. Returns True."""
        c = self._c
        if l:
            c._leases[key] = l
        else:
            c._leases.pop(key, None)
        c._lost.pop(key, None)
        self._token = token
        if key not in c._since:  # a re-entry keeps the first grant's time
            c._since[key] = c._now_ms()
        c._hold_start(key, self._n, owner, tid, l, sent_at)
        return True

    async def release(self) -> None:
        """Release one hold. NotOwnerError when this owner does not hold it."""
        c = self._c
        if c._closed or not c._opened:
            c._check()
        owner, _tid, key = self._who()
        h = c._held.get(key)
        if h is None:
            await self._release(c, owner, key)
            return
        h.releasing += 1  # a check finding it gone meanwhile is this release's to say
        try:
            await self._release(c, owner, key)
        finally:
            c._release_done(key, h)

    async def _release(self, c: Client, owner: str, key: Tuple[int, str, str]) -> None:
        if c._unsettled_acq.rel_any():  # this owner's unanswered releases go first
            await self._settle_release(release=True)
        n = self._n
        d = c._direct
        got = None if d is None else d.release(n, owner, c._leases.get(key, 0))
        if got is None:  # not one server, or no idle connection: the general path
            await _release(c, n, owner, key)
            return
        made = (c._latch_epoch, c._seq)  # its request id's (release_request_id)
        # one server: the command made and sent by the engine in one call
        m, req = got
        if key in c._lost:
            m.known_lost()  # read with the reply (d.done): a fair "released" is not owner
        cancel: Optional[_Cancel] = None  # made when needed (not on the usual path)
        try:
            await req.fut
        except asyncio.CancelledError as e:
            cancel = _Cancel()
            await _direct_wait(c, req, cancel, e)
        nxt = d.done(m, req)
        if nxt is not None and nxt[0] != _SEND:
            _release_end(c, n, owner, key, nxt, None if cancel is None else cancel.exc)
            return
        rid = _E.release_request_id(c._id, _pid_box[0], made[0], made[1])
        if nxt is None:  # no reply, or an error reply for the router
            await _release(c, n, owner, key, m=m, first=m.sent(), cancel=cancel,
                           sent=(req, 0 if req.reply is not None else 2 if req.failed else 1),
                           rid=rid)
        else:
            await _release(c, n, owner, key, m=m, first=nxt, cancel=cancel, rid=rid)

    async def extend(self, lease: Seconds) -> None:
        """Add lease seconds to the remaining lease of this owner's hold,
        atomically on the server (as hilock.Lock.extend). Meant for a fixed
        lease; under the watchdog the next renewal sets the watchdog lease
        again. NotOwnerError when this owner does not hold it;
        InvalidArgument for a time <= 0, a key without expiry or a
        read-write lock side."""
        ms = _to_ms(lease, "lease", zero_ok=False)
        if self._n.kind in (_E.KIND_READ, _E.KIND_WRITE):
            raise InvalidArgument("invalid argument: extend: not for read-write lock sides",
                                  _E.E_INVAL)
        owner, _tid = self._owner()
        v = await self._c._run_call(self._n.extend(owner, ms), f"extend of {self.name!r}",
                                    self._n.slot)
        if v == 0:
            raise NotOwnerError(f"not owner: lock {self.name!r} is not held by {owner}",
                                _E.E_NOTOWNER)
        if v < 0:
            raise InvalidArgument(f"invalid argument: lock {self.name!r} has no expiry to extend",
                                  _E.E_INVAL)

    async def force_unlock(self) -> bool:
        """Delete the lock whoever holds it, and wake a waiter. Returns
        whether there was a lock to delete."""
        return bool(await self._c._run_call(self._n.force(), f"force unlock of {self.name!r}",
                                            self._n.slot))

    async def locked(self) -> bool:
        """Whether anyone holds the lock."""
        return bool(self._n.decode_locked(await self._c._call(self._n.query_cmd(_E.Q_LOCKED), self._n.slot)))

    async def owned(self) -> bool:
        """Whether this owner holds the lock."""
        owner, _tid = self._owner()
        return bool(_E.decode_flag(await self._c._call(self._n.query_cmd(_E.Q_HELD, owner), self._n.slot)))

    async def hold_count(self) -> int:
        """How many times this owner holds the lock (0 = not held)."""
        owner, _tid = self._owner()
        return int(_E.decode_holds(await self._c._call(self._n.query_cmd(_E.Q_HOLDS, owner), self._n.slot)))

    async def ttl(self) -> Optional[float]:
        """Remaining lease in seconds; None when there is no lock; math.inf
        when the key has no expiry."""
        ms = int(_E.decode_pttl(await self._c._call(self._n.query_cmd(_E.Q_TTL), self._n.slot)))
        if ms == -2:
            return None
        if ms == -1:
            return math.inf
        return ms / 1000.0

    @property
    def lost(self) -> bool:
        """True once the watchdog found this owner's hold gone, or reported
        it "in doubt" (no renewal confirmed for lease - lease/5: the lease
        may end on the server), or when it is in doubt now by that rule and
        the loop has not run the report yet (it was blocked); reset by the
        next successful acquire. (Call it from the owning task.)"""
        owner, _tid = self._owner()
        key = self._key(owner)
        return key in self._c._lost or self._c._unsure(key)

    @property
    def on_lost(self) -> Optional[LostCallback]:
        """``callback(lock, thread_id)`` called on the loop when the
        watchdog finds a hold of this lock gone or in doubt; a coroutine it
        returns is run as a task."""
        return self._on_lost

    @on_lost.setter
    def on_lost(self, cb: Optional[LostCallback]) -> None:
        if cb is not None and not callable(cb):
            raise TypeError("on_lost must be callable or None")
        self._on_lost = cb
        key = (self._n.kind, self._n.name)
        views = self._c._listeners.get(key)
        if views is None:
            views = self._c._listeners[key] = weakref.WeakSet()
        views.add(self)

    async def __aenter__(self) -> "Lock":
        if not await self._acquire(_wait_ms(self._wait), _lease_ms(self._lease)):
            raise LockTimeout(f"timed out: lock {self.name!r} not acquired within {self._wait} s",
                              _E.E_TIMEDOUT)
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await _exit_release(self, exc)

    def __repr__(self) -> str:
        tid = "" if self._tid is None else f" thread_id={self._tid}"
        return f"<hilock.aio.{self.kind} lock {self.name!r}{tid} client={self._c.id}>"


async def _exit_release(obj: Any, exc: Optional[BaseException]) -> None:
    """Release at the end of an ``async with`` block, as hilock.Lock's
    ``with``: the block's own exception wins (a release failure becomes a
    note on it); otherwise a lock no longer ours raises LockLostError."""
    try:
        await obj.release()
    except NotOwnerError as e:
        if exc is None:
            raise LockLostError(
                f"lock lost: {obj.name if hasattr(obj, 'name') else obj!r} was no longer held "
                f"by this owner when the async with block ended ({e})", e.code, e.detail) from e
        _note(exc, f"hilock: release after the exception failed: {e}")
    except Error as e:
        if exc is None:
            raise
        _note(exc, f"hilock: release after the exception failed: {e}")


class FencedLock(Lock):
    """A reentrant lock whose every grant carries a fencing token (a number
    that grows with each new holder)."""

    async def acquire_token(self, wait: Optional[Seconds] = None,
                            lease: Optional[Seconds] = None) -> Optional[int]:
        """Acquire; the grant's fencing token, or None when the wait elapsed."""
        if not await self.acquire(wait, lease):
            return None
        return self._token

    async def token(self) -> int:
        """The lock's current token (0 before the first grant)."""
        return int(_E.decode_token(await self._c._call(self._n.query_cmd(_E.Q_TOKEN), self._n.slot)))


class ReadWriteLock:
    """Redisson's RReadWriteLock: many readers or one writer."""

    def __init__(self, client: Client, name: str) -> None:
        self._c = client
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def read_lock(self, *, wait: Optional[Seconds] = None, lease: Optional[Seconds] = None,
                  thread_id: Optional[int] = None) -> Lock:
        return Lock(self._c, self._c._names_of(_E.KIND_READ, self._name), wait, lease, thread_id)

    def write_lock(self, *, wait: Optional[Seconds] = None, lease: Optional[Seconds] = None,
                   thread_id: Optional[int] = None) -> Lock:
        return Lock(self._c, self._c._names_of(_E.KIND_WRITE, self._name), wait, lease,
                    thread_id)


# --------------------------------------------------------------------------
# multi-lock and Redlock
# --------------------------------------------------------------------------


class MultiLock:
    """All of several locks (possibly on different servers) or none. Every
    member's request is in flight at once (asyncio.gather); a busy attempt
    waits on the busy members' unlock messages, bounded by their leases."""

    _redlock = False

    def __init__(self, locks: Sequence[Lock], *, wait: Optional[Seconds] = None,
                 lease: Optional[Seconds] = None, thread_id: Optional[int] = None) -> None:
        locks = list(locks)
        if not locks:
            raise InvalidArgument("invalid argument: a multi-lock needs at least one lock",
                                  _E.E_INVAL)
        for lk in locks:
            if not isinstance(lk, Lock):
                raise TypeError("members must be hilock.aio locks")
        self._locks = locks
        self._tid = _check_tid(thread_id)
        _wait_ms(wait)
        _lease_ms(lease)
        self._wait = wait
        self._lease = lease
        self._validity: Optional[float] = None
        self._on_lost: Optional[LostCallback] = None
        # per thread id holding it: [hold count, members taken (bools),
        # members of those found lost (bools)]
        self._holds: Dict[int, List[Any]] = {}
        # thread ids whose hold was lost (the engine's ml_hold_lost), until
        # their next grant
        self._lost: Dict[int, None] = {}
        for lk in locks:  # each member's client tells this of a hold lost
            key = (lk._kind, lk._name)
            hooks = lk._c._ml_hooks.get(key)
            if hooks is None:
                hooks = lk._c._ml_hooks[key] = weakref.WeakSet()
            hooks.add(self)

    @property
    def locks(self) -> List[Lock]:
        return list(self._locks)

    @property
    def lost(self) -> bool:
        """True once this owner's hold (the calling task's, or thread_id's)
        is lost by the engine's rule (``ml_hold_lost``, as the blocking
        MultiLock): a member the watchdog found gone or reported "in doubt"
        (Redlock: members still held fewer than the quorum); reset by the
        next successful acquire. Only watchdog holds (no lease) are watched."""
        return self._tid_now() in self._lost

    @property
    def on_lost(self) -> Optional[LostCallback]:
        """``callback(multilock, thread_id)`` called on the loop once per
        hold that becomes lost (see ``lost``); a coroutine it returns is run
        as a task."""
        return self._on_lost

    @on_lost.setter
    def on_lost(self, cb: Optional[LostCallback]) -> None:
        if cb is not None and not callable(cb):
            raise TypeError("on_lost must be callable or None")
        self._on_lost = cb

    def _member_lost(self, c: Client, key: Tuple[int, str, str], tid: int) -> None:
        """Client c's watchdog found the hold key (of thread id tid) gone or
        in doubt: if it is a member of tid's hold here, the engine says
        whether the whole hold is lost now (once per hold)."""
        h = self._holds.get(tid)
        if h is None:
            return
        taken, gone = h[1], h[2]
        for i, lk in enumerate(self._locks):
            if (lk._c is not c or not taken[i] or gone[i] or lk._kind != key[0]
                    or lk._name != key[1] or self._member(lk, tid)[2] != key[2]):
                continue
            gone[i] = True
            n, nacq, nlost = len(taken), sum(taken), sum(gone)
            if tid not in self._lost and _E.ml_hold_lost(self._redlock, n, nacq, nlost):
                if len(self._lost) >= 65536:
                    self._lost.pop(next(iter(self._lost)))
                self._lost[tid] = None
                cb = self._on_lost
                if cb is not None:
                    c._call_lost(cb, self, tid)

    @property
    def validity(self) -> Optional[float]:
        """Redlock: seconds of the lease left after the last grant (lease -
        elapsed - drift); None before a grant."""
        return self._validity

    def _tid_now(self) -> int:
        # the calling task's: members run in tasks of their own (gather)
        return task_id() if self._tid is None else self._tid

    @staticmethod
    def _member(lk: Lock, tid: int) -> Tuple[Client, Any, str, int]:
        return lk._c, lk._n, _E.hold_owner(lk._n.kind, lk._c._id, tid), tid

    async def _one_try(self, lk: Lock, lease_ms: int, tid: int, line_ms: int,
                       ttls: List[int], i: int) -> int:
        """One member's try; ttls[i]: the remaining lease of its holder, when held."""
        c, n, owner, tid = self._member(lk, tid)
        c._check()
        lease = c._wd_ms if lease_ms == 0 else lease_ms
        cancel = _Cancel()
        out: List[int] = []
        at = [c._now_ms()]
        try:
            result, _h, _t, conn = await _run_acquire(c, n, owner, 0, lease, cancel,
                                                      keep=c._ack, line_ms=line_ms,
                                                      bounded=True, ttl_out=out, sent_at=at)
            if out:
                ttls[i] = out[0]
            if conn is not None and not await c._replica_ack(conn, cancel):
                await _quietly(_release(c, n, owner, (n.kind, n.name, owner)))
                result = _E.E_CONN
        except Error as e:
            return e.code or _E.E_CONN
        key = (n.kind, n.name, owner)
        if result == 0:
            if lease_ms == 0:
                c._leases.pop(key, None)
            else:
                c._leases[key] = lease_ms
            c._lost.pop(key, None)
            c._hold_start(key, n, owner, tid, lease_ms, at[0])
        if cancel.exc is not None:
            raise cancel.exc
        return int(result)

    async def _leave_line(self, lk: Lock, tid: int, window_ms: int) -> None:
        c, n, owner, _tid = self._member(lk, tid)
        try:
            await c._run_call(n.fair_cancel(owner, window_ms),
                              f"leaving the line of {lk.name!r}", n.slot)
        except Error:
            pass  # best effort: the line drops a silent waiter at its deadline

    async def _give_back(self, lk: Lock, tid: int) -> None:
        c, n, owner, _tid = self._member(lk, tid)
        try:
            await _release(c, n, owner, (n.kind, n.name, owner))
        except Error:
            pass

    async def acquire(self, wait: Any = None, lease: Optional[Seconds] = None, *,
                      blocking: Optional[bool] = None,
                      timeout: Optional[Seconds] = None) -> bool:
        """Acquire every member (Redlock: a majority within the validity
        window). Returns False when the wait elapsed. ``blocking`` /
        ``timeout``: threading.Lock's form, as Lock.acquire."""
        wait, lease = _protocol_args(wait, lease, blocking, timeout)
        w, l = _wait_ms(wait), _lease_ms(lease)
        locks = self._locks
        n = len(locks)
        loop = asyncio.get_running_loop()
        deadline = None if w < 0 else loop.time() + w / 1000.0
        vlease = l if l > 0 else locks[0]._c._wd_ms
        tid = self._tid_now()
        waiter = _Waiter()
        joined: List[Tuple[_PubSub, str]] = []
        # a held fair member's unlock wakes only the head of its line: the
        # call waits in that line (the engine's window) on its own channel
        window = [_E.ml_line_window(lk._n.kind, w, lk._c._window_ms) for lk in locks]
        in_line = [False] * n
        mws = [_MemberWaiter(waiter) for _ in locks]
        joined_w: List[_Waiter] = []
        heard = [False] * n  # the member's channel is listened to (its unlock wakes us)
        ttls = [0] * n
        quorum = _E.ml_quorum(self._redlock, n)
        attempt = 0

        async def listen() -> None:
            for i, (lk, mw) in enumerate(zip(locks, mws)):  # listen first: an unlock
                c, nm, owner, _tid = self._member(lk, tid)  # during the attempt wakes us
                c._check()
                ch = nm.wait_channel(owner)
                try:
                    ps, ok = await c._join(nm.slot, ch, mw, c._cmd_ms)
                except BaseException:
                    _leave(c, None, ch, mw)  # cancelled while joining
                    raise
                heard[i] = ok
                if ps is not None:
                    joined.append((ps, ch))
                    joined_w.append(mw)

        try:
            await listen()
            while True:
                if waiter.moved:  # a member's channel moved (cluster): listen again
                    for (ps, ch), mw in zip(joined, joined_w):
                        ps.leave(ch, mw)
                    joined.clear()
                    joined_w.clear()
                    waiter.moved = False
                    await listen()
                waiter.woken = False
                t0 = _E.now_ms()
                rcs = await asyncio.gather(*(self._one_try(lk, l, tid, max(0, window[i]), ttls, i)
                                             for i, lk in enumerate(locks)),
                                           return_exceptions=True)
                t1 = _E.now_ms()
                cancelled = next((r for r in rcs if isinstance(r, BaseException)), None)
                codes = [r if isinstance(r, int) else _E.E_CANCELED for r in rcs]
                for i, r in enumerate(codes):
                    in_line[i] = _E.ml_in_line(window[i], r)
                    mws[i].armed = r == _E.E_TIMEDOUT  # held by another: its unlock is ours
                ok = sum(1 for r in codes if r == 0)
                fatal = next((r for r in codes if r not in (0, _E.E_TIMEDOUT)
                              and r not in (_E.E_CONN, _E.E_CANCELED)), 0)
                validity = _E.ml_validity(vlease, t0, t1)
                if cancelled is None and _E.ml_success(self._redlock, n, ok, bool(fatal),
                                                       validity):
                    self._validity = validity / 1000.0 if self._redlock else None
                    self._granted(tid, [r == 0 for r in codes])
                    return True
                await asyncio.gather(*(self._give_back(lk, tid) for lk, r in zip(locks, codes)
                                       if _E.ml_take_back(self._redlock, False, r)))
                if cancelled is not None:
                    raise cancelled
                if fatal:
                    _raise(fatal, f"multi-lock member: {from_code(fatal)}")
                if w == 0 or (deadline is not None and loop.time() >= deadline):
                    return False
                # the engine's sleep: until a busy member's unlock message,
                # bounded by the shortest lease held and half a line window;
                # a short random pause only when no message can tell
                attempt += 1
                left = -1 if deadline is None else max(0, int((deadline - loop.time()) * 1000))
                ms = _E.ml_wait_ms(
                    self._redlock,
                    [(r, ttls[i] if r == _E.E_TIMEDOUT else 0, heard[i],
                      window[i] if in_line[i] else -1) for i, r in enumerate(codes)],
                    self._redlock and ok >= quorum,
                    _E.ml_backoff(attempt, random.getrandbits(64)), left)
                if ms != 0:
                    cancel = _Cancel()
                    await _wait_step(loop, None, waiter, ms, cancel)
                    if cancel.exc is not None:
                        raise cancel.exc
        finally:
            for (ps, ch), mw in zip(joined, joined_w):
                ps.leave(ch, mw)
            # leave every line the call may still be in (granted, wait over,
            # cancelled, failed), all at once; a second cancel does not stop it
            leave = [self._leave_line(lk, tid, window[i]) for i, lk in enumerate(locks)
                     if in_line[i]]
            if leave:
                await asyncio.shield(asyncio.gather(*leave))

    def _granted(self, tid: int, taken: List[bool]) -> None:
        """tid's acquire took the members taken: its hold (a re-entry adds
        to it), not lost."""
        h = self._holds.get(tid)
        if h is None:
            self._holds[tid] = [1, taken, [False] * len(taken)]
        else:
            h[0] += 1
            for i, t in enumerate(taken):
                if t:
                    h[1][i], h[2][i] = True, False
        self._lost.pop(tid, None)

    async def release(self) -> None:
        """Release every member (each one that fails is reported after all
        were tried)."""
        tid = self._tid_now()
        h = self._holds.get(tid)
        if h is not None:
            h[0] -= 1
            if h[0] <= 0:
                del self._holds[tid]  # no longer watched here, whatever the answers
        rcs = await asyncio.gather(*(self._release_member(lk, tid) for lk in self._locks),
                                   return_exceptions=True)
        errs = [r for r in rcs if isinstance(r, BaseException)]
        if errs and (not self._redlock or len(errs) == len(rcs)):
            raise errs[0]

    async def _release_member(self, lk: Lock, tid: int) -> None:
        c, n, owner, _tid = self._member(lk, tid)
        await _release(c, n, owner, (n.kind, n.name, owner))

    async def __aenter__(self) -> "MultiLock":
        if not await self.acquire(self._wait, self._lease):
            raise LockTimeout("timed out: multi-lock not acquired", _E.E_TIMEDOUT)
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await _exit_release(self, exc)

    def __repr__(self) -> str:
        kind = "RedLock" if self._redlock else "MultiLock"
        return f"<hilock.aio.{kind} {[lk.name for lk in self._locks]!r}>"


class RedLock(MultiLock):
    """Redlock: a majority (n/2+1) of independent servers' locks within the
    validity window (lease - elapsed - drift); members that fail are
    released too."""

    _redlock = True


# the semaphores and the latch drive the engine's wait machine with this
# module's connections and pub/sub (their own file, off the locks' path)
from ._aio_sem import CountDownLatch, PermitExpirableSemaphore, Semaphore  # noqa: E402
