#!/usr/bin/env python3
"""A fake server for the hostile-reply tests: listens on a free loopback port
(printed on stdout), parses each RESP command and answers with bytes a real
server never sends. Mode "cluster": CLUSTER SLOTS names a range from
-9223372036854775807 and a port '65536'; scripts get MOVED 65535. Mode
"sentinel": the master's port is '<own port>x'. Runs until killed."""
import socket
import sys
import threading


def commands(buf):
    """Yield (argv, rest) for each complete RESP array of bulk strings."""
    while True:
        if not buf.startswith(b"*") or b"\r\n" not in buf:
            return
        head, rest = buf.split(b"\r\n", 1)
        argv = []
        for _ in range(int(head[1:])):
            if b"\r\n" not in rest:
                return
            n, rest = rest.split(b"\r\n", 1)
            n = int(n[1:])
            if len(rest) < n + 2:
                return
            argv.append(rest[:n])
            rest = rest[n + 2:]
        yield argv, rest
        buf = rest


def answer(mode, port, argv):
    cmd = argv[0].upper()
    if cmd == b"PING":
        return b"+PONG\r\n"
    if cmd == b"ROLE":
        return b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"
    if cmd == b"CLUSTER":
        return (b"*2\r\n*3\r\n:-9223372036854775807\r\n:5\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n"
                b"*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:65536\r\n" % port)
    if cmd == b"SENTINEL":
        p = b"%dx" % port
        return b"*2\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n" % (len(p), p)
    if cmd in (b"EVALSHA", b"EVAL"):
        return b"-MOVED 65535 127.0.0.1:%d\r\n" % port
    return b"-ERR unknown\r\n"


def serve(conn, mode, port):
    buf = b""
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            buf += data
            used = 0
            for argv, rest in commands(buf):
                conn.sendall(answer(mode, port, argv))
                used = len(buf) - len(rest)
            buf = buf[used:]


def main():
    mode = sys.argv[1]
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    port = ls.getsockname()[1]
    print(port, flush=True)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=serve, args=(conn, mode, port), daemon=True).start()


if __name__ == "__main__":
    main()
