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
- delay_frames(pat, s, upstream=False)  chunks containing pat wait s seconds
                        (server->client, or client->server with upstream)

Threads only (no asyncio), so it runs next to the blocking hilock calls in
the same test process. Every socket is closed by close().
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from typing import List, Optional, Tuple


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
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._pump, args=(client, server, True), daemon=True),
                        threading.Thread(target=self._pump, args=(server, client, False), daemon=True)]
        for t in self.threads:
            t.start()

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
                r, _, _ = select.select([src], [], [], 0.05)
                if not r:
                    continue
                data = src.recv(65536)
                if not data:
                    self.kill()
                    return
                while p.blackholed and not self.dead:
                    time.sleep(0.01)
                if upstream:
                    pat = p._take(p._rst_request, data)
                    if pat:
                        p.events.append(("reset-on-request", time.monotonic()))
                        self.kill()
                        return
                    if p._take(p._rst_reply, data):
                        self.kill_on_reply = True
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
                if delay:
                    time.sleep(delay)
                if self.dead:
                    return
                dst.sendall(data)
        except OSError:
            self.kill()


class FaultProxy:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.target: Tuple[str, int] = (host, port)
        self.up = 0.0
        self.down = 0.0
        self.blackholed = False
        self.refusing = False
        self.frame_delays: List[Tuple[bytes, float, bool]] = []
        self._rst_request: List[bytes] = []
        self._rst_reply: List[bytes] = []
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

    def clear(self) -> None:
        with self._mu:
            self._rst_request.clear()
            self._rst_reply.clear()
        self.frame_delays = []
        self.up = self.down = 0.0
        self.blackholed = False
        self.refusing = False

    def fired(self, kind: str) -> int:
        return sum(1 for k, _ in self.events if k == kind)

    # -- internals -----------------------------------------------------
    def _take(self, pats: List[bytes], data: bytes) -> Optional[bytes]:
        if not pats:
            return None
        with self._mu:
            for i, pat in enumerate(pats):
                if pat in data:
                    del pats[i]
                    return pat
        return None

    def _accept(self) -> None:
        while not self._stop:
            r, _, _ = select.select([self.sock], [], [], 0.05)
            if not r:
                continue
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if self.refusing:
                _rst(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=2)
                server.settimeout(None)
            except OSError:
                _rst(client)
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._mu:
                self.conns = [c for c in self.conns if not c.dead]
                self.conns.append(_Conn(self, client, server))

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()
        self.reset()
