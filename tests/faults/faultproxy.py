"""A TCP fault proxy between hilock and a real redis-server.

Listens on a free loopback port and forwards every connection to the
server. Faults are switched on and off while connections are live:

- latency(up=, down=)   delay each chunk by that many seconds, per direction
- blackhole(True)       keep the connections, forward nothing either way
- reset()               reset (RST) every live connection now
- reset_on_request(pat) the next client chunk containing pat is dropped and
                        the connection reset: the server never sees it
- reset_on_reply(pat)   the next client chunk containing pat is forwarded;
                        the server's reply to it is dropped and the
                        connection reset: the server ran it, the client
                        never hears back
- refuse(True)          new connections are reset at once
- close_when_down(True) a new connection the server does not take (it is
                        down) is closed (FIN) instead of reset, as a proxy
                        or load balancer with no live backend may do: the
                        client's connect succeeds, then it reads end of
                        stream
- delay_frames(pat, s, upstream=False)  chunks containing pat wait s seconds
                        (server->client, or client->server with upstream)
- partition(tags)       forward nothing either way on the connections whose
                        tag is in tags (the proxy's tagger names each new
                        connection, for instance by the process that opened
                        it; untagged connections are "")
- duplicate_later(pat, s)  the next client chunk containing pat is forwarded,
                        and a copy of it reaches the server s seconds later
                        on a connection of its own (its reply is dropped):
                        a late duplicate of a request, as a network that
                        retransmits or a proxy that retries produces
- hold_request(pat, s)   the next client chunk containing pat is not forwarded
                        on its connection (the client never gets a reply
                        there); it reaches the server s seconds later on a
                        connection of its own (its reply is dropped): a
                        request held up on its way past the command timeout
                        and delivered late (fired("held-delivered"))
- late_reply(pat, s, reset=False)  the next client chunk containing pat is
                        forwarded; the server's next reply on that
                        connection waits s seconds, then is delivered
                        (fired("late-reply-delivered")): a reply later
                        than the command timeout that still arrives (or
                        fired("late-reply-undeliverable") when the client
                        closed the connection meanwhile). With reset, the
                        connection is reset right after it
                        (fired("late-reply-then-reset"))
- silence(up=, down=)   drop (not hold) every byte in that direction, on the
                        live connections and on those accepted later:
                        up = requests lost, down = replies lost, both = a
                        silent link. silence(False, False) ends it for new
                        connections and live ones (what was dropped stays
                        lost, so those connections' streams are out of step)
- stall_new(True)       new connections are accepted and then never
                        answered (a load balancer or a half-dead host:
                        connect succeeds, the handshake hangs); they stay
                        silent until close(), even after stall_new(False)
- half_dead(True)       silence(True, True) and stall_new(True) at once
- mute_new_subscribers(True)  a new connection whose first request is a
                        SUBSCRIBE (SSUBSCRIBE too) drops every byte both
                        ways from then on: to its client, a pub/sub
                        connection accepted and never answered, while new
                        command connections are answered
- mute_subscribers_after_reply(True)  a connection that sends a SUBSCRIBE
                        (SSUBSCRIBE too) gets the first reply after it,
                        then every byte both ways is dropped: to its client,
                        a subscription confirmed and then never a word again
                        (a server, or a load balancer in front of it, that
                        keeps the connection open and stops answering)

Per connection: every live _Conn in proxy.live() has drop_up and drop_down,
to silence one direction of one connection only, and kill() to reset it.
proxy.subscribers() are the live connections that have sent a request
containing SUBSCRIBE (SSUBSCRIBE too): a client's pub/sub connection, to
fault it alone while its command connections stay healthy.

Threads only (no asyncio), so it runs next to the blocking hilock calls in
the same test process. Every socket is closed by close().
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from typing import Callable, FrozenSet, Iterable, List, Optional, Tuple


def _readable(sock: socket.socket, timeout: float) -> bool:
    """True when sock has something to read (or is at its end) within
    timeout s. poll, not select: select refuses a descriptor at or above
    FD_SETSIZE (1024) with ValueError, and a harness process that holds many
    connections (the safety suite's Sentinel splits) goes past it; every
    proxy connection opened from then on was left dead and open. A closed
    socket raises OSError (the callers' cue to stop)."""
    fd = sock.fileno()
    if fd < 0:
        raise OSError("socket closed")
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(int(timeout * 1000)))


def _rst(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Conn:
    def __init__(self, proxy: "FaultProxy", client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.dead = False
        self.kill_on_reply = False
        self.subscriber = False  # a request of it contained SUBSCRIBE
        self.first = True  # no request read yet
        self.mute_after_reply = False  # mute_subscribers_after_reply's, after the next reply
        self.late: Optional[Tuple[float, bool]] = None  # late_reply's, for the next reply
        self._tag: Optional[str] = None
        self.drop_up = proxy.drop_up      # requests from the client are dropped
        self.drop_down = proxy.drop_down  # replies from the server are dropped
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._pump, args=(client, server, True), daemon=True),
                        threading.Thread(target=self._pump, args=(server, client, False), daemon=True)]
        for t in self.threads:
            t.start()

    @property
    def tag(self) -> str:
        """Named by the proxy's tagger when first asked (only while a
        partition by tags is on), so a slow tagger never delays traffic."""
        if self._tag is None:
            t = self.proxy.tagger
            self._tag = t(self.client) if t is not None else ""
        return self._tag

    def kill(self) -> None:
        with self.lock:
            if self.dead:
                return
            self.dead = True
        _rst(self.client)
        _rst(self.server)

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        p = self.proxy
        try:
            while not self.dead:
                if not _readable(src, 0.05):
                    continue
                data = src.recv(65536)
                if not data:
                    self.kill()
                    return
                while (p.blackholed or (p.cut_tags and self.tag in p.cut_tags)) and not self.dead:
                    time.sleep(0.01)
                if upstream and b"SUBSCRIBE" in data:
                    self.subscriber = True
                    if p.muting_after:
                        self.mute_after_reply = True
                    if self.first and p.muting:
                        self.drop_up = self.drop_down = True
                if upstream:
                    self.first = False
                if self.drop_up if upstream else self.drop_down:
                    p.dropped += 1
                    continue
                if upstream:
                    pat = p._take(p._rst_request, data)
                    if pat:
                        p.events.append(("reset-on-request", time.monotonic()))
                        self.kill()
                        return
                    if p._take(p._rst_reply, data):
                        self.kill_on_reply = True
                    late = p._take_late(data)
                    if late is not None:
                        self.late = late
                    held = p._take_dup(data, p._holds)
                    if held is not None:
                        p._send_later(data, held, "held-delivered")
                        continue
                    dup = p._take_dup(data, p._dups)
                    if dup is not None:
                        p._send_later(data, dup)
                    delay = p.up
                    for pat, secs, up in p.frame_delays:
                        if up and pat in data:
                            delay = max(delay, secs)
                else:
                    if self.kill_on_reply:
                        p.events.append(("reset-on-reply", time.monotonic()))
                        self.kill()
                        return
                    delay = p.down
                    for pat, secs, up in p.frame_delays:
                        if not up and pat in data:
                            delay = max(delay, secs)
                    if self.late is not None:
                        secs, rst = self.late
                        self.late = None
                        time.sleep(secs)
                        if self.dead:  # the client closed it meanwhile
                            p.events.append(("late-reply-undeliverable", time.monotonic()))
                            return
                        dst.sendall(data)
                        if rst:
                            p.events.append(("late-reply-then-reset", time.monotonic()))
                            self.kill()
                            return
                        p.events.append(("late-reply-delivered", time.monotonic()))
                        continue
                if delay:
                    time.sleep(delay)
                if self.dead:
                    return
                dst.sendall(data)
                if not upstream and self.mute_after_reply:
                    self.drop_up = self.drop_down = True
        except Exception:  # noqa: BLE001 (whatever ends a pump closes its connection)
            self.kill()


class FaultProxy:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.target: Tuple[str, int] = (host, port)
        self.up = 0.0
        self.down = 0.0
        self.blackholed = False
        self.refusing = False
        self.fin_when_down = False
        self.tagger: Optional[Callable[[socket.socket], str]] = None
        self.cut_tags: FrozenSet[str] = frozenset()
        self.drop_up = False
        self.drop_down = False
        self.stalling = False
        self.muting = False
        self.muting_after = False
        self.stalled: List[socket.socket] = []  # accepted, never answered
        self.dropped = 0  # chunks dropped by silence()
        self.frame_delays: List[Tuple[bytes, float, bool]] = []
        self._rst_request: List[bytes] = []
        self._rst_reply: List[bytes] = []
        self._dups: List[Tuple[bytes, float]] = []
        self._holds: List[Tuple[bytes, float]] = []
        self._late: List[Tuple[bytes, float, bool]] = []
        self.events: List[Tuple[str, float]] = []
        self.conns: List[_Conn] = []
        self._mu = threading.Lock()
        self._stop = False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self, extra: str = "/0") -> str:
        return f"redis://127.0.0.1:{self.port}{extra}"

    # -- fault switches ------------------------------------------------
    def latency(self, up: float = 0.0, down: float = 0.0) -> None:
        self.up, self.down = up, down

    def blackhole(self, on: bool = True) -> None:
        self.blackholed = on

    def refuse(self, on: bool = True) -> None:
        self.refusing = on

    def close_when_down(self, on: bool = True) -> None:
        self.fin_when_down = on

    def silence(self, up: bool = True, down: bool = True) -> None:
        with self._mu:
            self.drop_up, self.drop_down = up, down
            for c in self.conns:
                c.drop_up, c.drop_down = up, down

    def stall_new(self, on: bool = True) -> None:
        self.stalling = on

    def mute_new_subscribers(self, on: bool = True) -> None:
        self.muting = on

    def mute_subscribers_after_reply(self, on: bool = True) -> None:
        self.muting_after = on

    def half_dead(self, on: bool = True) -> None:
        self.stall_new(on)
        self.silence(on, on)

    def live(self) -> List["_Conn"]:
        with self._mu:
            return [c for c in self.conns if not c.dead]

    def subscribers(self) -> List["_Conn"]:
        return [c for c in self.live() if c.subscriber]

    def reset(self) -> None:
        with self._mu:
            conns, self.conns = self.conns, []
        for c in conns:
            c.kill()

    def reset_on_request(self, pattern: bytes) -> None:
        with self._mu:
            self._rst_request.append(pattern)

    def reset_on_reply(self, pattern: bytes) -> None:
        with self._mu:
            self._rst_reply.append(pattern)

    def delay_frames(self, pattern: bytes, secs: float, upstream: bool = False) -> None:
        self.frame_delays.append((pattern, secs, upstream))

    def partition(self, tags: Iterable[str]) -> None:
        self.cut_tags = frozenset(tags)

    def duplicate_later(self, pattern: bytes, secs: float) -> None:
        with self._mu:
            self._dups.append((pattern, secs))

    def hold_request(self, pattern: bytes, secs: float) -> None:
        with self._mu:
            self._holds.append((pattern, secs))

    def late_reply(self, pattern: bytes, secs: float, reset: bool = False) -> None:
        with self._mu:
            self._late.append((pattern, secs, reset))

    def clear(self) -> None:
        with self._mu:
            self._late.clear()
            self._rst_request.clear()
            self._rst_reply.clear()
            self._dups.clear()
            self._holds.clear()
        self.frame_delays = []
        self.up = self.down = 0.0
        self.blackholed = False
        self.refusing = False
        self.fin_when_down = False
        self.cut_tags = frozenset()
        self.stalling = False
        self.silence(False, False)

    def fired(self, kind: str) -> int:
        return sum(1 for k, _ in self.events if k == kind)

    # -- internals -----------------------------------------------------
    @staticmethod
    def _subscription(data: bytes) -> bool:
        """A pub/sub (un)subscribe request: every holder listens on its
        lock's channel, so these name the lock too, at moments of the
        client's own (an unsubscribe goes out after the release returns).
        The one-shot rules are meant for the lock's commands: they skip these."""
        return b"subscribe\r\n" in data.lower()

    def _take(self, pats: List[bytes], data: bytes) -> Optional[bytes]:
        if not pats or self._subscription(data):
            return None
        with self._mu:
            for i, pat in enumerate(pats):
                if pat in data:
                    del pats[i]
                    return pat
        return None

    def _take_dup(self, data: bytes, dups: List[Tuple[bytes, float]]) -> Optional[float]:
        if not dups or self._subscription(data):
            return None
        with self._mu:
            for i, (pat, secs) in enumerate(dups):
                if pat in data:
                    del dups[i]
                    return secs
        return None

    def _take_late(self, data: bytes) -> Optional[Tuple[float, bool]]:
        if not self._late or self._subscription(data):
            return None
        with self._mu:
            for i, (pat, secs, rst) in enumerate(self._late):
                if pat in data:
                    del self._late[i]
                    return secs, rst
        return None

    def _send_later(self, data: bytes, secs: float, what: str = "duplicate-delivered") -> None:
        def run() -> None:
            time.sleep(secs)
            if self._stop:
                return
            try:
                s = socket.create_connection(self.target, timeout=2)
                s.sendall(data)
                s.settimeout(2)
                s.recv(65536)  # the reply, dropped
                s.close()
                self.events.append((what, time.monotonic()))
            except OSError:
                self.events.append(("duplicate-failed", time.monotonic()))
        threading.Thread(target=run, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                if not _readable(self.sock, 0.05):
                    continue
                client, _ = self.sock.accept()
            except OSError:
                if self._stop:
                    return
                time.sleep(0.05)  # out of descriptors for a moment: keep accepting
                continue
            if self.refusing:
                _rst(client)
                continue
            if self.stalling:
                with self._mu:
                    self.stalled.append(client)
                self.events.append(("stalled", time.monotonic()))
                continue
            try:
                server = socket.create_connection(self.target, timeout=2)
                server.settimeout(None)
            except OSError:
                if self.fin_when_down:
                    client.close()
                else:
                    _rst(client)
                continue
            try:
                for s in (client, server):
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn = _Conn(self, client, server)
            except (OSError, RuntimeError):  # reset meanwhile; no thread to be had
                _rst(client)
                _rst(server)
                continue
            with self._mu:
                self.conns = [c for c in self.conns if not c.dead]
                self.conns.append(conn)

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()
        self.reset()
        with self._mu:
            stalled, self.stalled = self.stalled, []
        for s in stalled:
            _rst(s)
