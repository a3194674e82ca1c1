"""The fault scenarios that apply to the OpenResty driver (resty.hilock),
run against it in a real nginx: the conformance suite's OpenResty agent
(tests/conformance/agent_resty.lua, one HTTP request per request line)
behind the same TCP fault proxy as the C/Python scenarios.

- a holder cut off from Redis is told "in doubt" before its lease ends on
  the server and another client takes the lock (issue 14 item 3: the rule
  is the engine's, hl_renew_doubt_after);
- a release whose reply is lost is answered once, by its latch (item 2);
- a release whose PUBLISH the ACL refuses is truthful: nothing released,
  still held (item 4);
- garbage payloads on a lock channel wake nobody.
- an acquire whose reply is lost with its pooled connection is sent once
  more and its acquire latch answers like the first run: exactly one hold,
  one release frees the lock; on a fresh connection it is not sent again
  but settled (the engine's machine asks the latch): no hold is left;
- an acquire whose reply timed out is settled on its own connection; when
  that connection dies too, on a new one (the settle machine's reconnect).
- a plain semaphore's acquire whose reply is lost is sent once more on a
  dead pooled connection (its request latch answers the first copy) or
  settled by the machine (a fresh connection, a timed-out reply on a
  SIGSTOPped server): the permits left taken are the ones the caller holds;
  a permit-expirable acquire's lost try gives its id back.
- a holder left unsure (issue 31 item 4): a half-dead link, requests lost,
  replies lost, the server stopped and the proxy refusing past the lease,
  all at once: lk:lost() says true before another client acquires; the
  worker stopped, or kept busy by a request, past the lease: the first
  lk:lost() after it says true.
- a late copy of a release (held up past the command timeout, or copied on
  its way) leaves the owner's later hold alone.
- a fault of the holder's pub/sub connection alone (replies lost, requests
  lost, reset then its replacement accepted and silent), then a force
  unlock: lk:lost() says true within a second (the worker's listener
  follows the session's liveness rule, proto.sublive).
(The pub/sub connection killed during a wait is tests/openresty (i) and the
conformance pubsub-killed scenario.)
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid

import pytest

import hilock
from conftest import GARBAGE_PAYLOADS, numsub, opened, report, wait_for, wait_renewed
from test_subscription import SUB_BOUND, SUB_FAULTS, SUB_LEASE, sub_fault_on

ROOT = os.environ.get("HILOCK_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get("HILOCK_BUILD") or os.path.join(ROOT, "build", "release")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx (one worker) serving the conformance agent on a free port."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="hilock-faults-nginx-")
        self.proc = None
        with open(os.path.join(ROOT, "tests", "conformance", "nginx.conf.in")) as f:
            template = f.read()
        for _ in range(5):
            self.port = _free_port()
            conf = template
            for k, v in (("@TMP@", self.dir), ("@PORT@", str(self.port)), ("@ROOT@", ROOT),
                         ("@CPATH@", os.path.join(BUILD, "lua", "luajit"))):
                conf = conf.replace(k, v)
            path = os.path.join(self.dir, "nginx.conf")
            with open(path, "w") as f:
                f.write(conf)
            self.proc = subprocess.Popen(["nginx", "-p", self.dir, "-c", path, "-e",
                                          os.path.join(self.dir, "error.log")],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if self.get("/ping") == "pong":
                        return
                except OSError:
                    time.sleep(0.05)
            self.stop(keep_dir=True)
        raise RuntimeError("nginx did not start: " + self.error_log())

    def get(self, path: str, timeout: float = 30) -> str:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            body = r.read().decode(errors="replace").strip()
            return body if r.status == 200 else "HTTP %d: %s" % (r.status, body)
        finally:
            c.close()

    def error_log(self) -> str:
        try:
            with open(os.path.join(self.dir, "error.log"), errors="replace") as f:
                return f.read()[-1500:]
        except OSError:
            return ""

    def stop(self, keep_dir: bool = False) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def nginx():
    n = Nginx()
    yield n
    with open(os.path.join(n.dir, "error.log"), errors="replace") as f:
        log = f.read()
    n.stop()
    # the driver must not have raised in a request or a timer; nginx itself
    # logs the resets the proxy injects (reset-on-reply; and the proxy that
    # resets and refuses: a renewal timer's send on a reset connection)
    resets = ("recv() failed (104: Connection reset by peer)",
              "send() failed (104: Connection reset by peer)")
    bad = [ln for ln in log.splitlines() if ("[error]" in ln or "[alert]" in ln)
           and not any(r in ln for r in resets)]
    assert not bad, "\n".join(bad[-10:])


class Actor:
    """One OpenResty request owner (explicit thread id) of one client."""
    _tids = iter(range(1, 1 << 40))

    def __init__(self, nginx: Nginx, url: str, **opts: int) -> None:
        self.nginx, self.url = nginx, url
        self.opts = ",".join("%s=%d" % kv for kv in sorted(opts.items()))
        self.tid = next(Actor._tids)

    def __call__(self, line: str, timeout: float = 30, busy_ms: int = 0,
                 then_line: str = "") -> str:
        args = {"url": self.url, "opts": self.opts, "tid": self.tid, "line": "X " + line}
        if busy_ms:  # the worker busy (its loop blocked) that long first
            args["busy_ms"] = busy_ms
        if then_line:  # run by the same request right after line: "A | B"
            args["then_line"] = "X " + then_line
        q = urllib.parse.urlencode(args)
        return self.nginx.get("/agent?" + q, timeout)


def other_lock(c, kind, name):
    if kind == "write":
        return c.read_write_lock(name).write_lock()
    return c.fair_lock(name) if kind == "f" else c.lock(name)


@pytest.mark.parametrize("kind", ["r"])  # the rule is kind-blind; each kind costs 4 s
def test_resty_partitioned_holder_told_before_lease_ends(nginx, server, proxy, name, kind):
    """Blackholed after a renewal went through: the request owner's lk:lost()
    says "in doubt" before the lease ends on the server and another client
    takes the lock (before: never told while the partition lasted)."""
    lease = 3.0
    a = Actor(nginx, proxy.url(), watchdog_lease_ms=int(lease * 1000), command_timeout_ms=300)
    other = opened(server.url)
    try:
        assert a("lock %s %s 0 0" % (kind, name)) == "ok 1"
        time.sleep(1.3)  # a renewal (every lease/3) went through
        proxy.blackhole(True)
        t_cut = time.monotonic()
        got = []
        t = threading.Thread(target=lambda: got.append(
            (other_lock(other, kind, name).acquire(wait=2 * lease, lease=30), time.monotonic())))
        t.start()
        told = None
        while told is None and time.monotonic() - t_cut < 2 * lease:
            if a("lost %s %s" % (kind, name)) == "ok 1":
                told = time.monotonic()
            else:
                time.sleep(0.02)
        t.join(3 * lease)
        assert told is not None, "the cut-off holder was never told"
        assert got and got[0][0], "the other client did not get the lock"
        report(f"openresty partition ({kind}): holder told after", told - t_cut)
        report(f"openresty partition ({kind}): other client acquired after", got[0][1] - t_cut)
        assert told < got[0][1], "both believed they held the lock"
    finally:
        proxy.blackhole(False)
        other.close()


def test_resty_accepts_then_never_answers_told_before_lease_ends(nginx, server, proxy, name):
    """The live connections reset, and every new one accepted then never
    answered (a half-dead host), with 10 s connect and command timeouts: the
    renewal tick sits in its connect/read for up to 10 s. The doubt check is
    a timer chain of its own, so the holder is still told before the lease
    ends on the server (the key's PTTL, read directly before the cut). Before
    (one chain for renewals and doubt checks): told only after the stuck
    renewal gave up, past the lease."""
    a = Actor(nginx, proxy.url(), watchdog_lease_ms=3000, command_timeout_ms=10000,
              connect_timeout_ms=10000)
    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        time.sleep(1.3)  # a renewal (every lease/3) went through
        t = time.monotonic()
        ends = t + int(server("PTTL", name)) / 1000.0
        proxy.blackhole(True)  # new connections: accepted, nothing forwarded
        proxy.reset()
        t_cut = time.monotonic()
        told = None
        while told is None and time.monotonic() - t_cut < 6:
            if a("lost r %s" % name) == "ok 1":
                told = time.monotonic()
            else:
                time.sleep(0.02)
        assert told is not None, "the holder was never told"
        report("openresty accepts, never answers: holder told after", told - t_cut)
        report("openresty accepts, never answers: lease ended on the server after", ends - t_cut)
        assert told < ends, "told %.2f s after the lease ended on the server" % (told - ends)
    finally:
        proxy.blackhole(False)


@pytest.mark.parametrize("kind", ["r", "f"])
def test_resty_release_reply_lost_answers_once(nginx, server, proxy, name, kind):
    """The release's reply is lost with its connection: the engine's release
    machine sends it once more and its latch answers like the first run."""
    a = Actor(nginx, proxy.url(), command_timeout_ms=1000)
    assert a("lock %s %s:warm 0 5000" % (kind, name)) == "ok 1"  # scripts loaded, pooled
    assert a("unlock %s %s:warm" % (kind, name)) == "ok"
    assert a("lock %s %s 0 30000" % (kind, name)) == "ok 1"
    proxy.reset_on_reply(b"redisson_unlock_latch")
    assert a("unlock %s %s" % (kind, name)) == "ok"
    assert proxy.fired("reset-on-reply") == 1
    assert server("EXISTS", name) == 0
    assert a("held %s %s" % (kind, name)) == "ok 0"


def test_resty_release_lost_on_every_try_ends_at_the_lease(nginx, server, proxy, name):
    """A watchdog hold whose release and every retry of it are reset as they
    are sent (test_faults.py test_release_lost_on_every_try_ends_at_the_lease):
    the release fails saying renewal stopped, the hold is renewed no more (so
    another client gets it at the lease's end), and the owner's next acquire
    sends the release again first: one hold. Before: the watchdog kept
    renewing it (the other client, waiting 3 leases, never got it) and the
    owner re-entered it."""
    lease = 2.0
    a = Actor(nginx, proxy.url(), watchdog_lease_ms=int(lease * 1000), command_timeout_ms=500)
    other = opened(server.url)
    try:
        assert a("lock r %s:warm 0 5000" % name) == "ok 1"  # scripts loaded, pooled
        assert a("unlock r %s:warm" % name) == "ok"
        assert a("lock r %s 0 0" % name) == "ok 1"
        for _ in range(4):  # the release and every retry of it
            proxy.reset_on_request(b"redisson_unlock_latch")
        t0 = time.monotonic()
        r = a("unlock r %s" % name)
        assert "not confirmed" in r and "renewal stopped" in r, r
        assert proxy.fired("reset-on-request") >= 2
        proxy.clear()
        assert server("EXISTS", name) == 1  # never released
        ol = other.lock(name)
        got = ol.acquire(wait=3 * lease, lease=30)
        took = time.monotonic() - t0
        report("openresty: release lost on every try: another client acquired after", took)
        assert got, "the hold was renewed after its release failed"
        assert took <= lease + 1.0
        ol.release()
        # again, and the owner acquires at once (the hold still there): the
        # release is sent again first, then one hold
        assert a("lock r %s 0 0" % name) == "ok 1"
        for _ in range(4):
            proxy.reset_on_request(b"redisson_unlock_latch")
        r = a("unlock r %s" % name)
        assert not r.startswith("ok"), r
        proxy.clear()
        assert server("HVALS", name) == ["1"]
        assert a("lock r %s 0 0" % name) == "ok 1"
        holds = server("HVALS", name)
        print(f"[openresty] acquire right after a second unanswered release: holds {holds}")
        assert holds == ["1"]
        assert a("unlock r %s" % name) == "ok"
        assert server("EXISTS", name) == 0
    finally:
        proxy.clear()
        other.close()


def test_resty_two_unanswered_releases_both_sent_again(nginx, server, proxy, name):
    """A hold taken twice (hold count 2, a fixed lease), then two releases,
    each reset on every try: neither ran. The owner's next acquire sends
    both again first, each under its own request id (the session's
    hl_unsettled_rel_*, as the C drivers): one hold after it, and one
    release frees the lock. Before (resty kept one unanswered release per
    hold and sent it again under a new id): hold count 2 after the acquire."""
    a = Actor(nginx, proxy.url(), command_timeout_ms=500)
    try:
        assert a("lock r %s:warm 0 5000" % name) == "ok 1"  # scripts loaded, pooled
        assert a("unlock r %s:warm" % name) == "ok"
        assert a("lock r %s 0 20000" % name) == "ok 1"
        assert a("lock r %s 0 20000" % name) == "ok 1"
        assert server("HVALS", name) == ["2"]
        for word in ("not confirmed", "not sent"):  # the second waits behind the first
            for _ in range(4):  # the release and every retry of it
                proxy.reset_on_request(b"redisson_unlock_latch")
            r = a("unlock r %s" % name)
            assert word in r, r
            proxy.clear()
        assert server("HVALS", name) == ["2"]  # neither ran
        assert a("lock r %s 0 20000" % name) == "ok 1"
        holds = server("HVALS", name)
        print(f"[openresty] acquire after two unanswered releases: holds {holds}")
        assert holds == ["1"]
        assert a("unlock r %s" % name) == "ok"
        assert server("EXISTS", name) == 0
    finally:
        proxy.clear()


def test_resty_release_after_an_unanswered_one_sends_that_one_first(nginx, server, proxy, name):
    """A hold taken twice (a fixed lease); the first release is reset on
    every try (it did not run), then the link heals and the owner releases
    again: the unanswered one goes first under its own id, then this one
    (the session's hl_unsettled_rel_* before a release too, as the C drivers
    since c5c67a9): the lock is free. Before: the second release ran alone
    and wrote its higher seq into the owner's unlock latch, so the first,
    sent again before the next acquire, was refused as a late copy: one hold
    left after both releases, two after the next acquire."""
    a = Actor(nginx, proxy.url(), command_timeout_ms=500)
    try:
        assert a("lock r %s:warm 0 5000" % name) == "ok 1"  # scripts loaded, pooled
        assert a("unlock r %s:warm" % name) == "ok"
        assert a("lock r %s 0 20000" % name) == "ok 1"
        assert a("lock r %s 0 20000" % name) == "ok 1"
        for _ in range(4):  # the release and every retry of it
            proxy.reset_on_request(b"redisson_unlock_latch")
        r = a("unlock r %s" % name)
        assert "not confirmed" in r, r
        proxy.clear()
        assert server("HVALS", name) == ["2"]  # it did not run
        r = a("unlock r %s" % name)
        left = server("HVALS", name)
        print(f"[openresty] second release after an unanswered one: {r!r}, holds left {left}")
        assert r == "ok", r
        assert left == [], left
    finally:
        proxy.clear()


@pytest.mark.parametrize("how", ["held", "copied"])
def test_resty_late_release_copy_leaves_a_later_hold(nginx, server, proxy, name, how):
    """A copy of a release reaches the server 4.5 s late (held up past the
    command timeout, or copied on its way), past every latch lifetime, after
    the request owner released and took the lock again: it must leave that
    hold alone (test_faults.py test_late_release_copy_leaves_a_later_hold;
    the rule is the engine's and the scripts', docs/protocol.md)."""
    from test_faults import LATE_COPY_S, _arm_late_copy
    a = Actor(nginx, proxy.url(), command_timeout_ms=1000)
    other = opened(server.url)
    try:
        assert a("lock r %s:warm 0 5000" % name) == "ok 1"  # scripts loaded, pooled
        assert a("unlock r %s:warm" % name) == "ok"
        assert a("lock r %s 0 2000" % name) == "ok 1"
        event = _arm_late_copy(proxy, how)
        t0 = time.monotonic()
        assert a("unlock r %s" % name) == "ok"
        released = time.monotonic() - t0
        assert a("lock r %s 0 30000" % name) == "ok 1"
        assert a("unlock r %s" % name) == "ok"
        assert a("lock r %s 0 30000" % name) == "ok 1"
        wait_for(lambda: proxy.fired(event) == 1, LATE_COPY_S + 5, "the late copy delivered")
        late_at = time.monotonic() - t0
        time.sleep(0.1)  # the server has run it
        held = a("held r %s" % name)
        got = other.lock(name).acquire(wait=0, lease=30)
        print(f"[late copy, openresty, {how}] release answered after {released * 1000:.0f} ms; "
              f"copy delivered at {late_at * 1000:.0f} ms; holder's held {held!r}; "
              f"another client's acquire {'GRANTED' if got else 'refused'}")
        if got:
            other.lock(name).release()
        assert held == "ok 1" and not got
        assert a("unlock r %s" % name) == "ok"
        assert server("EXISTS", name) == 0
    finally:
        other.close()


@pytest.mark.parametrize("kind", ["r", "f"])
def test_resty_acquire_reply_lost_on_pooled_connection_holds_once(nginx, server, proxy, name,
                                                                  kind):
    """The attempt runs, its reply is lost with its (pooled) connection: the
    driver sends it once more on a new connection and the acquire latch
    answers the first run's grant (before: the reply's loss was an error
    and the grant stayed behind, or a resend re-entered: two holds)."""
    a = Actor(nginx, proxy.url(), command_timeout_ms=1000)
    assert a("lock %s %s:warm 0 5000" % (kind, name)) == "ok 1"  # scripts loaded, pooled
    assert a("unlock %s %s:warm" % (kind, name)) == "ok"
    proxy.reset_on_reply(name.encode())
    assert a("lock %s %s 2000 30000" % (kind, name)) == "ok 1"
    assert proxy.fired("reset-on-reply") == 1
    assert a("holds %s %s" % (kind, name)) == "ok 1"
    assert a("unlock %s %s" % (kind, name)) == "ok"
    assert server("EXISTS", name) == 0, "one acquire + one release left the lock held"


@pytest.mark.parametrize("kind", ["r", "f"])
def test_resty_acquire_reply_lost_on_fresh_connection_leaves_no_hold(nginx, server, proxy, name,
                                                                     kind):
    """No pooled connection: the attempt goes out on a new one, its reply is
    lost with it. Not sent again; the machine asks the latch on another
    connection and gives the grant back: the acquire fails, nothing held."""
    a = Actor(nginx, proxy.url(), command_timeout_ms=1000)
    assert a("lock %s %s:warm 0 5000" % (kind, name)) == "ok 1"
    assert a("unlock %s %s:warm" % (kind, name)) == "ok"
    # the holder's listener (on the lock's channel) ends within a second of
    # the release and pools its connection: only then are all of them pooled
    wait_for(lambda: numsub(server, "redisson_lock__channel:{%s:warm}" % name) == 0, 5,
             "the holder's listener ended")
    proxy.reset()  # the pooled connections die (nginx drops them): the next one is new
    time.sleep(0.2)
    proxy.reset_on_reply(name.encode())
    answer = a("lock %s %s 2000 30000" % (kind, name))
    assert answer.startswith("err connection"), answer
    assert proxy.fired("reset-on-reply") == 1
    assert server("EXISTS", name) == 0, "an acquire that failed left a hold behind"
    if kind == "f":
        assert server("LLEN", "redisson_lock_queue:{%s}" % name) == 0


@pytest.mark.parametrize("later", [0.0, 3.5], ids=["at-once", "past-latch-lifetime"])
def test_resty_acquire_settle_tries_all_fail_leave_no_hold(nginx, name, later):
    """test_acquire_unsettled.py's scenario in OpenResty: the attempt runs on
    the client's one pooled connection and its reply is reset; the proxy
    refuses every new connection, so its resend (a dead pooled connection's
    command is sent once more) and every settle try find none: the acquire
    fails with the grant standing (count 1). The same owner then acquires
    and releases once (at once, or 3.5 s later: past the acquire latch's own
    lifetime, 2 x (0.5 + 0.5) s + 1 s): nothing may be left held.
    The server wants a password, so a new connection's handshake (AUTH)
    meets the refusal inside connect at any load (without it, connect may
    succeed and the refusal come with the read). Before: the acquire
    re-entered the grant, count 2, and its release left 1 (the resend's
    failed connect dropped "the first copy went out": no settle, nothing
    recorded; at load, also with the old, password-less form)."""
    from conftest import RedisServer
    from faultproxy import FaultProxy
    password = uuid.uuid4().hex
    server = RedisServer(password=password)
    proxy = FaultProxy(server.port)
    try:
        def url(db):
            return "redis://:%s@127.0.0.1:%d/%d" % (password, proxy.port, db)
        # the scripts loaded by a client of another pool (db 1: its
        # connections, and its holder's listener, are not the test client's)
        warm, other = Actor(nginx, url(1)), "warm-" + uuid.uuid4().hex[:12]
        assert warm("lock r %s 0 0" % other) == "ok 1"
        assert warm("unlock r %s" % other) == "ok"
        a = Actor(nginx, url(0), watchdog_lease_ms=10000, command_timeout_ms=500,
                  connect_timeout_ms=500)
        assert a("held r %s" % name) == "ok 0"  # its one connection, pooled
        proxy.reset_on_reply(name.encode())
        proxy.refuse(True)
        try:
            answer = a("lock r %s 0 0" % name)
            held = server("HVALS", name)
        finally:
            proxy.clear()
        assert answer.startswith("err connection"), answer
        assert proxy.fired("reset-on-reply") == 1  # the attempt's; nothing else got through
        assert held == ["1"], held  # the attempt ran: its grant stands for now
        time.sleep(later)
        assert a("lock r %s 0 0" % name) == "ok 1"
        count = server("HVALS", name)
        assert a("unlock r %s" % name) == "ok"
        left = server("HVALS", name)
        print("[unsettled, openresty] first acquire: %s; next acquire (%.1f s later): hold "
              "count %r; after its release: %r" % (answer, later, count, left))
        assert left == [], "still held (count %r) after its only release" % left
    finally:
        proxy.close()
        server.stop()


def test_resty_stalled_attempt_settled_on_a_new_connection(nginx, server, proxy, name):
    """The attempt's reply is late (the driver gives up after 300 ms and
    settles it on that connection), then that connection dies before the
    reply comes: the settle machine goes on on a new connection, where the
    acquire latch tells the grant and it is released (before: the settle
    ended with the dead connection and the grant stayed for its lease)."""
    a = Actor(nginx, proxy.url(), command_timeout_ms=300)
    assert a("lock r %s:warm 0 5000" % name) == "ok 1"
    assert a("unlock r %s:warm" % name) == "ok"
    proxy.latency(down=2.0)  # the attempt's reply waits 2 s in the proxy
    t0 = time.monotonic()
    answer = a("lock r %s 0 30000" % name)
    assert answer.startswith("err connection"), answer
    assert server("EXISTS", name) == 1  # granted on the server, reply late
    time.sleep(max(0.0, 0.6 - (time.monotonic() - t0)))
    proxy.latency()
    proxy.reset()  # the attempt's connection dies with its reply
    wait_for(lambda: server("EXISTS", name) == 0, 5, "the late grant released")
    report("openresty stalled attempt, connection lost: grant released after",
           time.monotonic() - t0)


def test_resty_stalled_attempt_settle_gives_up_then_settled_before_next_acquire(
        nginx, server, proxy, name):
    """As the test above, but the new connections are refused while the
    settle machine tries them (8 tries over ~3.5 s): it gives up with the
    late grant standing. The same owner's next acquire must settle it first
    (the session's record of the attempt) and hold once: one release frees
    the lock (before: it re-entered the grant, count 2, and its release left
    1 for the rest of the 30 s lease). While the settle still runs, the
    acquire fails ("not settled yet") instead of entering: it is asked again."""
    a = Actor(nginx, proxy.url(), command_timeout_ms=300, connect_timeout_ms=300)
    assert a("lock r %s:warm 0 5000" % name) == "ok 1"
    assert a("unlock r %s:warm" % name) == "ok"
    proxy.latency(down=2.0)  # the attempt's reply waits 2 s in the proxy
    t0 = time.monotonic()
    answer = a("lock r %s 0 30000" % name)
    assert answer.startswith("err connection"), answer
    assert server("HVALS", name) == ["1"]  # granted on the server, reply late
    time.sleep(max(0.0, 0.6 - (time.monotonic() - t0)))
    proxy.refuse(True)
    proxy.latency()
    proxy.reset()  # the attempt's connection dies with its reply; no new one is taken
    time.sleep(4.0)  # the settle machine's reconnect schedule (~3.5 s) runs out
    proxy.clear()
    tries = []
    while True:
        got = a("lock r %s 0 30000" % name)
        tries.append(got)
        if "not settled yet" not in got or time.monotonic() - t0 > 20:
            break
        time.sleep(0.5)
    count = server("HVALS", name)
    released = a("unlock r %s" % name)
    left = server("HVALS", name)
    print("[openresty settle gave up] next acquire: %r (after %d tries); hold count %r; after "
          "its release: %r" % (got, len(tries), count, left))
    assert got == "ok 1", tries
    assert released == "ok"
    assert left == [], "still held (count %r) after its only release" % left


def test_resty_settle_waiting_for_late_reply_is_handed_over_to_next_acquire(nginx, server, proxy,
                                                                            name):
    """The attempt's reply is held 3 s by the proxy: the acquire fails after
    the command timeout and a light thread waits for the late reply to
    settle it. The same owner acquires again at once: that settle has sent
    no undo yet (hl_settle_can_hand_over), so the acquire takes it over (the
    light thread stops) and settles the attempt itself on a connection that
    answers, then takes the lock: hold count 1, nothing left after its one
    release, nor once the late reply has come. Before: the acquire failed at
    once ("not settled yet")."""
    a = Actor(nginx, proxy.url(), command_timeout_ms=500)
    assert a("lock r %s:warm 0 5000" % name) == "ok 1"  # scripts loaded, pooled
    assert a("unlock r %s:warm" % name) == "ok"
    proxy.late_reply(name.encode(), 3.0)
    t0 = time.monotonic()
    first = a("lock r %s 0 30000" % name)
    assert first.startswith("err connection"), first
    assert server("HVALS", name) == ["1"]  # granted on the server, its reply late
    t1 = time.monotonic()
    again = a("lock r %s 0 30000" % name)
    t2 = time.monotonic()
    count = server("HVALS", name)
    if again == "ok 1":
        assert a("unlock r %s" % name) == "ok"
    left = server("EXISTS", name)
    report("openresty hand-over: the next acquire answered after (%r, holds %r, left %r)"
           % (again, count, left), t2 - t1)
    assert again == "ok 1", again
    assert count == ["1"], count
    assert left == 0, "still held after its only release"
    time.sleep(max(0.0, 3.5 - (time.monotonic() - t0)))
    assert server("EXISTS", name) == 0


def test_resty_stalled_server_gets_no_second_attempt(nginx, server, name):
    """The server SIGSTOPped: an acquire's reply times out (400 ms) and a
    light thread settles it. Another owner's acquire on that server then
    sends no attempt of its own (the engine's hl_settle_gate, as hilock_async
    and hilock.aio): it waits a command timeout for the settle to end and
    fails saying the server has not answered an earlier attempt yet.
    Before: it sent its attempt, which timed out too and parked one more
    connection (answer: a plain timeout). Once the server resumes, neither
    lock is held."""
    a = Actor(nginx, server.url, command_timeout_ms=400)
    b = Actor(nginx, server.url, command_timeout_ms=400)
    assert a("lock r %s:warm 0 5000" % name) == "ok 1"  # scripts loaded, pooled
    assert a("unlock r %s:warm" % name) == "ok"
    server.pause()
    try:
        first = a("lock r %s:1 0 30000" % name)
        t0 = time.monotonic()
        second = b("lock r %s:2 0 30000" % name)
        took = time.monotonic() - t0
    finally:
        server.resume()
    report("openresty stalled server: the second owner's acquire failed after (%r)" % second,
           took)
    assert first.startswith("err connection"), first
    assert second.startswith("err connection"), second
    assert "has not answered an earlier attempt yet" in second, second
    wait_for(lambda: server("EXISTS", name + ":1", name + ":2") == 0, 5, "nothing held")


def test_resty_release_with_publish_refused_is_truthful(nginx, server, name):
    """The ACL takes the channel rights away while a request holds: its
    release fails and says nothing was released, and that is the truth."""
    server("ACL", "SETUSER", "weak", "on", ">pw", "~*", "+@all", "allchannels")
    a = Actor(nginx, "redis://weak:pw@127.0.0.1:%d/0" % server.port)
    assert a("lock r %s 0 30000" % name) == "ok 1"
    server("ACL", "SETUSER", "weak", "resetchannels")
    answer = a("unlock r %s" % name)
    assert answer.startswith("err protocol") and "nothing was released" in answer, answer
    assert server("EXISTS", name) == 1
    assert a("held r %s" % name) == "ok 1"
    assert a("holds r %s" % name) == "ok 1"


def test_resty_garbage_payloads_on_lock_channel_are_ignored(nginx, server, name):
    holder = opened(server.url)
    try:
        lk = holder.lock(name)
        assert lk.acquire(wait=0, lease=30)
        b = Actor(nginx, server.url)
        got = []
        t = threading.Thread(target=lambda: got.append(b("lock r %s 8000 30000" % name)))
        t.start()
        ch = "redisson_lock__channel:{%s}" % name
        # the C holder's client listens there too (a force unlock is heard): 2
        wait_for(lambda: numsub(server, ch) == 2, 5, "waiter subscribed")
        for junk in GARBAGE_PAYLOADS:
            server("PUBLISH", ch, junk)
        time.sleep(0.2)
        assert got == [] and server("HLEN", name) == 1  # nobody took it
        t0 = time.monotonic()
        lk.release()
        t.join(10)
        assert got == ["ok 1"]
        report("openresty waiter woken after garbage payloads", time.monotonic() - t0)
    finally:
        holder.close()


# ---- a plain semaphore's acquire under the engine's request latch ----

def _sem_warm(a, name, kind="sem"):
    """Scripts loaded (acquire, release) and a pooled connection; 3 permits."""
    assert a("setp %s %s 3" % (kind, name)) == "ok 1"
    assert a("acquire %s %s 1 0 0" % (kind, name)) == "ok 1"
    assert a("release %s %s 1" % (kind, name)) == "ok"


def _sem_lost_on_fresh_connection(a, server, proxy, name, kind):
    """An acquire whose reply is lost with the connection opened for it
    fails, and every permit is free again when it returns."""
    _sem_warm(a, name, kind)
    proxy.reset()  # the pooled connections die: the next one is new
    time.sleep(0.2)
    proxy.reset_on_reply(name.encode())
    answer = a("acquire %s %s 1 2000 0" % (kind, name))
    assert answer.startswith("err connection"), answer
    assert proxy.fired("reset-on-reply") == 1
    assert server("GET", name) == "3", "a failed acquire kept a permit"


def test_resty_sem_reply_lost_on_pooled_connection_takes_once(nginx, server, proxy, name):
    """The try's reply is lost with its pooled connection: sent once more,
    the request latch answers the first copy's grant. Three permits, one
    acquire: two free, one release: three (before: the lost reply was an
    error and the first copy's permit stayed taken)."""
    a = Actor(nginx, proxy.url(), command_timeout_ms=1000)
    _sem_warm(a, name)
    proxy.reset_on_reply(name.encode())
    assert a("acquire sem %s 1 2000 0" % name) == "ok 1"
    assert proxy.fired("reset-on-reply") == 1
    assert server("GET", name) == "2", "one acquire took two permits, or none"
    assert a("release sem %s 1" % name) == "ok"
    assert server("GET", name) == "3"


def test_resty_sem_reply_lost_on_fresh_connection_keeps_nothing(nginx, server, proxy, name):
    """No pooled connection: not sent again; the machine settles the try
    through its latch (sem_settle.lua gives its permit back, a late copy
    takes nothing): the acquire fails and every permit is free (before: the
    failed acquire kept the permit the server had taken)."""
    _sem_lost_on_fresh_connection(Actor(nginx, proxy.url(), command_timeout_ms=1000), server,
                                  proxy, name, "sem")
    # the request is marked given up (a late copy takes nothing), with the
    # one permit it had taken and that was given back
    marks = [server("GET", k) for k in server("KEYS", "hilock_sem_latch:{%s}:*" % name)]
    assert [v for v in marks if re.fullmatch(r"x\d+:1", v)], marks


def test_resty_sem_acquire_timed_out_on_stopped_server_keeps_nothing(nginx, server, name):
    """The server SIGSTOPped with the acquire on the wire: its reply times
    out (400 ms), the settle goes out on a new connection and is answered
    once the server resumes; whichever of the two runs first, no permit
    stays taken (before: the late acquire kept its permit)."""
    a = Actor(nginx, server.url, command_timeout_ms=400)
    _sem_warm(a, name)
    server.pause()
    timer = threading.Timer(0.9, server.resume)
    timer.start()
    try:
        answer = a("acquire sem %s 1 2000 0" % name)
    finally:
        timer.join()
        server.resume()
    assert answer.startswith("err connection"), answer
    wait_for(lambda: server("GET", name) == "3", 5, "every permit free again")
    time.sleep(0.3)  # nothing late takes one afterwards
    assert server("GET", name) == "3", "a timed-out acquire kept a permit"


def test_resty_permit_reply_lost_on_fresh_connection_keeps_nothing(nginx, server, proxy, name):
    """A permit-expirable acquire's reply lost on a connection opened for
    it: the machine gives its id back before the call fails (before: the
    permit stayed taken until its lease ended, forever without one)."""
    _sem_lost_on_fresh_connection(Actor(nginx, proxy.url(), command_timeout_ms=1000), server,
                                  proxy, name, "pes")
    assert server("ZCARD", "{%s}:timeout" % name) == 0


# ---- a holder left unsure (issue 31 item 4 (a), (b), (e), (f)) ----

UNSURE_LEASE = 3.0
UNSURE_FAULTS = ["half-dead", "requests-lost", "replies-lost", "server-stopped", "proxy-refusing"]


def _unsure_case(nginx, fault: str) -> dict:
    """One holder (a request owner of its own client, lease 3 s, command and
    connect timeouts of lease/3 as test_silence.py) behind a proxy of its own
    to a server of its own; the fault starts right after a renewal. Then, one
    after the other in this thread: the holder's lk:lost(), the other
    client's try (direct to the server; not while the server is stopped),
    so the order seen is the order things happened."""
    from conftest import RedisServer
    from faultproxy import FaultProxy
    server = RedisServer()
    proxy = FaultProxy(server.port)
    name = "fu:" + uuid.uuid4().hex[:12]
    ms = int(UNSURE_LEASE * 1000)
    a = Actor(nginx, proxy.url(), watchdog_lease_ms=ms, command_timeout_ms=ms // 3,
              connect_timeout_ms=ms // 3)
    other = opened(server.url)
    out = {"fault": fault, "told": None, "got": None, "why": None}
    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        wait_renewed(server, name, UNSURE_LEASE)
        resume_at = None
        if fault == "half-dead":
            proxy.half_dead(True)
        elif fault == "requests-lost":
            proxy.silence(up=True, down=False)
        elif fault == "replies-lost":
            proxy.silence(up=False, down=True)
        elif fault == "server-stopped":
            server.pause()
            resume_at = time.monotonic() + UNSURE_LEASE + 1.0
        else:
            proxy.refuse(True)
            proxy.reset()
        t_cut = time.monotonic()
        lk = other.lock(name)
        while time.monotonic() - t_cut < 3 * UNSURE_LEASE and (out["told"] is None or
                                                               out["got"] is None):
            if out["told"] is None:
                answer = a("lost r %s" % name)
                if answer == "ok 1":
                    out["told"] = time.monotonic() - t_cut
            if resume_at is not None and time.monotonic() >= resume_at:
                server.resume()
                resume_at = None
            if out["got"] is None and resume_at is None and lk.acquire(wait=0, lease=30):
                out["got"] = time.monotonic() - t_cut
            time.sleep(0.02)
        if resume_at is not None:
            server.resume()
        out["pttl"] = int(server("PTTL", name))
    finally:
        proxy.clear()
        proxy.close()
        other.close()
        server.stop()
    return out


def test_resty_unsure_holder_told_before_other_acquires(nginx):
    """The faults of DESIGN.md §6 that leave a holder unsure, each on a
    server and proxy of its own, all at once (one nginx worker): a half-dead
    link (live connections drop every byte, new ones accepted and never
    answered), requests lost, replies lost, the server SIGSTOPped and the
    proxy resetting and refusing for longer than the lease. The holder's
    lk:lost() says true before the other client's acquire succeeds (replies
    lost: the renewals may still reach the server; nobody else acquires)."""
    got = {}

    def run(fault):
        try:
            got[fault] = _unsure_case(nginx, fault)
        except Exception as e:  # reported below, per case
            got[fault] = {"fault": fault, "error": repr(e)}

    threads = [threading.Thread(target=run, args=(f,)) for f in UNSURE_FAULTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    bad = []
    for f in UNSURE_FAULTS:
        r = got.get(f, {"error": "did not finish"})
        if "error" in r:
            bad.append("%s: %s" % (f, r["error"]))
            continue
        if r["told"] is not None:
            report(f"openresty {f}: holder told after", r["told"])
        if r["got"] is not None:
            report(f"openresty {f}: other client acquired after", r["got"])
        if r["told"] is None:
            bad.append("%s: the holder was never told" % f)
        elif r["got"] is not None and r["told"] > r["got"]:
            bad.append("%s: both believed they held the lock" % f)
        if r["got"] is None and not (f == "replies-lost" and r["pttl"] > 0):
            bad.append("%s: the other client never acquired (PTTL %d)" % (f, r["pttl"]))
    assert not bad, "; ".join(bad)


def _worker_pid(nginx) -> int:
    pid = nginx.proc.pid
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        kids = f.read().split()
    assert len(kids) == 1, kids
    return int(kids[0])


def test_resty_worker_blocked_past_lease_is_told_first_thing(nginx, server, name):
    """The nginx worker stopped (SIGSTOP: a busy request, a paused process)
    for longer than the lease: a renewal falls due, the lease ends on the
    server and another client takes the lock. A request that reached the
    worker on a kept-alive connection while it was stopped is served when it
    resumes, in the same turn of nginx's loop, before the worker's overdue
    timers run: lk:lost() must say true to it, not that the lock is held."""
    import signal
    ms = int(UNSURE_LEASE * 1000)
    a = Actor(nginx, server.url, watchdog_lease_ms=ms, command_timeout_ms=ms // 3)
    other = opened(server.url)
    worker = _worker_pid(nginx)
    q = urllib.parse.urlencode({"url": a.url, "opts": a.opts, "tid": a.tid,
                                "line": "X lost r %s" % name})
    conn = http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=10)

    def ask() -> str:
        conn.request("GET", "/agent?" + q)
        return conn.getresponse().read().decode(errors="replace").strip()

    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        wait_renewed(server, name, UNSURE_LEASE)
        assert ask() == "ok 0"  # the kept-alive connection
        os.kill(worker, signal.SIGSTOP)
        t_cut = time.monotonic()
        try:
            got = other.lock(name).acquire(wait=2 * UNSURE_LEASE, lease=30)
            t_got = time.monotonic() - t_cut
            conn.request("GET", "/agent?" + q)  # waits at the stopped worker
            time.sleep(0.2)
        finally:
            os.kill(worker, signal.SIGCONT)
        t_back = time.monotonic() - t_cut
        first = conn.getresponse().read().decode(errors="replace").strip()
        report("openresty worker stopped: other client acquired after", t_got)
        report("openresty worker stopped: worker resumed after", t_back)
        assert got, "the other client did not get the lock"
        assert first == "ok 1", "the resumed worker's first answer: %r" % first
        assert a("lost r %s" % name) == "ok 1"
    finally:
        conn.close()
        other.close()


def test_resty_request_blocking_worker_past_lease_is_told(nginx, server, name):
    """A request keeps the worker busy (its loop blocked: CPU work, a blocking
    call) for longer than the lease, then asks lk:lost() before it would
    touch what the lock guards. Meanwhile a renewal fell due, the lease ended
    on the server and another client took the lock: lk:lost() must say true
    although no timer of the worker could run."""
    ms = int(UNSURE_LEASE * 1000)
    a = Actor(nginx, server.url, watchdog_lease_ms=ms, command_timeout_ms=ms // 3)
    other = opened(server.url)
    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        wait_renewed(server, name, UNSURE_LEASE)
        t_cut = time.monotonic()
        answers = []
        q = threading.Thread(target=lambda: answers.append(
            (a("lost r %s" % name, busy_ms=ms + 1000), time.monotonic() - t_cut)))
        q.start()
        got = other.lock(name).acquire(wait=2 * UNSURE_LEASE, lease=30)
        t_got = time.monotonic() - t_cut
        q.join(10)
        assert got, "the other client did not get the lock"
        report("openresty busy request: other client acquired after", t_got)
        assert answers, "no answer"
        report("openresty busy request: lk:lost() answered after", answers[0][1])
        assert answers[0][0] == "ok 1", "after the busy request: %r" % answers[0][0]
    finally:
        other.close()


def _blocking_of(c, kind, name):
    if kind == "read":
        return c.read_write_lock(name).read_lock()
    if kind == "write":
        return c.read_write_lock(name).write_lock()
    if kind == "fenced":
        return c.fenced_lock(name)
    return c.fair_lock(name) if kind == "f" else c.lock(name)


@pytest.mark.parametrize("lease_ms", [0, 30000], ids=["watchdog", "fixed-lease"])
@pytest.mark.parametrize("kind", ["r", "f", "read", "write", "fenced"])
def test_resty_force_unlock_reported_at_once(nginx, server, name, kind, lease_ms):
    """A request owner holds the lock with a 30 s lease (the watchdog's:
    its first renewal 10 s after the grant; or fixed: no renewal at all),
    and another client force-unlocks it: lk:lost() says true well within
    1 s (the worker's holder listens on the lock's channel and checks its
    hold on the message); the release then says not owner, the fair lock's
    too (its unlock script answers "released" on a missing key). Before:
    not told within 5 s (and the fair release answered ok)."""
    a = Actor(nginx, server.url, watchdog_lease_ms=30000)
    other = opened(server.url)
    channel = ("redisson_rwlock:{%s}" if kind in ("read", "write")
               else "redisson_lock__channel:{%s}") % name
    try:
        assert a("lock %s %s 0 %d" % (kind, name, lease_ms)).startswith("ok 1")
        # the worker's listener subscribed (nothing waits for it on acquire)
        wait_for(lambda: numsub(server, channel) >= 1, 5.0, "the holder's subscription")
        assert a("lost %s %s" % (kind, name)) == "ok 0"
        t0 = time.monotonic()
        assert _blocking_of(other, kind, name).force_unlock()
        told = None
        while time.monotonic() - t0 < 5.0:
            if a("lost %s %s" % (kind, name)) == "ok 1":
                told = time.monotonic()
                break
            time.sleep(0.005)
        assert told is not None, "the holder was not told within 5 s of the force unlock"
        report(f"openresty force unlock ({kind}, lease {lease_ms} ms): holder told after",
               told - t0)
        assert told - t0 < 1.0
        assert a("unlock %s %s" % (kind, name)).startswith("err notowner")
        # the hold is over: the worker's listener lets the channel go
        wait_for(lambda: numsub(server, channel) == 0, 5.0, "the subscription ended")
    finally:
        other.close()


def test_resty_fixed_lease_hold_stops_listening_when_its_lease_ends(nginx, server, name):
    """A hold with a fixed lease (1 s) that nobody releases listens on its
    lock's channel until its lease ends (the hold table's t:end_next), then
    the worker's listener lets the channel go; lk:lost() stays false (it
    ended as its caller asked)."""
    a = Actor(nginx, server.url)
    channel = "redisson_lock__channel:{%s}" % name
    assert a("lock r %s 0 1000" % name) == "ok 1"
    wait_for(lambda: numsub(server, channel) >= 1, 5.0, "the holder's subscription")
    wait_for(lambda: numsub(server, channel) == 0, 8.0, "the subscription ended")
    assert a("lost r %s" % name) == "ok 0"


def test_resty_force_unlock_heard_after_the_first_lease(nginx, server, name):
    """A watchdog hold kept past its first lease (6 s, renewed every 2 s)
    is still heard at once: force-unlocked 6.3 s after the grant, 1.7 s
    before its next renewal, lk:lost() says true within 0.8 s. The worker's
    hold table (proto.holds) kept a watchdog hold as a fixed lease of the
    watchdog's length, so after 6 s neither a message on its channel nor
    the pub/sub connection's liveness rule had it checked, and the holder
    was told by the next renewal (as hilock.aio before a63d2c1)."""
    a = Actor(nginx, server.url, watchdog_lease_ms=6000)
    other = opened(server.url)
    channel = "redisson_lock__channel:{%s}" % name
    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        t_grant = time.monotonic()
        wait_for(lambda: numsub(server, channel) >= 1, 5.0, "the holder's subscription")
        time.sleep(max(0.0, 6.3 - (time.monotonic() - t_grant)))
        assert a("lost r %s" % name) == "ok 0"
        t0 = time.monotonic()
        assert other.lock(name).force_unlock()
        told = None
        while time.monotonic() - t0 < 3.0:
            if a("lost r %s" % name) == "ok 1":
                told = time.monotonic() - t0
                break
            time.sleep(0.005)
        report("openresty force unlock past the first watchdog lease: holder told after "
               "(-1: not within 3 s)", -0.001 if told is None else told)
        assert told is not None and told < 0.8, "not told within 0.8 s of the force unlock"
    finally:
        other.close()


@pytest.mark.parametrize("lease_ms", [0, 30000], ids=["watchdog", "fixed-lease"])
@pytest.mark.parametrize("kind", ["r", "f"])
def test_resty_force_unlock_before_the_subscription_is_heard(nginx, server, kind, lease_ms):
    """The request that acquires force-unlocks the lock at once (lk:force_unlock()
    on the connection the acquire pooled: its DEL + PUBLISH is sent before the
    request yields, so before the worker's listener, started by the grant,
    has even sent its SUBSCRIBE): the message is unheard, yet lk:lost() says
    true well within 1 s (the listener checks its holds once the subscription
    is confirmed); the next renewal is 10 s away, a fixed lease never renews.
    A new name each round (a new subscription). Before: round 0 not told
    within 3 s."""
    a = Actor(nginx, server.url, watchdog_lease_ms=30000)
    for i in range(5):
        name = "fr:" + uuid.uuid4().hex[:12]
        t0 = time.monotonic()
        assert a("lock %s %s 0 %d" % (kind, name, lease_ms),
                 then_line="force %s %s" % (kind, name)) == "ok 1 | ok 1"
        told = None
        while time.monotonic() - t0 < 3.0:
            if a("lost %s %s" % (kind, name)) == "ok 1":
                told = time.monotonic()
                break
            time.sleep(0.005)
        assert told is not None, "round %d: the holder was not told within 3 s" % i
        report(f"openresty force unlock before the subscription ({kind}, lease {lease_ms} ms,"
               f" round {i}): holder told after", told - t0)
        assert told - t0 < 1.0
        assert a("unlock %s %s" % (kind, name)).startswith("err notowner")


def test_resty_late_grant_after_partition_is_not_kept_by_re_entry(nginx, server, proxy):
    """As a safety client (tests/safety, seed 61, partition-all): the lock is
    free; every connection of the client is blackholed 3 s while a request
    tries to acquire it (2 s waits: each attempt's reply times out, the call
    fails, a settler waits for the late outcome); healed: the held-back
    attempt reaches the server and grants the lock to this owner. The
    request then takes and releases the lock once, as a caller that saw
    only failures does: afterwards another client must get the lock within
    the watchdog lease (3 s) plus a margin. It failed (docs/safety.md): each
    failed call's settler sent its undo after the heal, but the undos carried
    the per-owner unlock latch with the number of their own call, lower than
    the number a later call's late grant had written there, so 4 of 6 were
    refused as "late copies" (-1) and the grants stayed; the request's
    acquire re-entered them and the watchdog kept them for ever. The settle's
    undo now takes the request's own latch (proto_release.c)."""
    name = "fr:" + uuid.uuid4().hex[:12]
    w = Actor(nginx, proxy.url(), watchdog_lease_ms=3000, command_timeout_ms=500,
              connect_timeout_ms=500)
    other = opened(server.url)
    try:
        assert w("lock fenced %s 0 0" % name).startswith("ok 1")  # warm: pooled connections
        assert w("unlock fenced %s" % name) == "ok"
        proxy.blackhole(True)
        t_cut = time.monotonic()
        answers = []
        while time.monotonic() - t_cut < 3.0:
            answers.append(w("lock fenced %s 2000 0" % name, timeout=10))
        proxy.blackhole(False)
        assert not any(a.startswith("ok 1") for a in answers), answers
        time.sleep(1.0)  # the heal is over: whatever was held back arrived
        assert w("lock fenced %s 2000 0" % name).startswith("ok 1")
        assert w("unlock fenced %s" % name) == "ok"
        t0 = time.monotonic()
        got = other.fenced_lock(name).acquire(wait=6, lease=30)
        report("openresty after partition-all: other client acquired after",
               time.monotonic() - t0 if got else float("inf"))
        assert got, "another client could not get the lock for 6 s after the owner's release"
    finally:
        proxy.blackhole(False)
        other.close()


def _resty_sub_fault_on(proxy, fault: str) -> int:
    """sub_fault_on for the worker: its pub/sub listener takes its
    connection from the worker's keepalive pool, so a reset one may be
    replaced by a pooled command connection. Accepted-then-silent: new
    connections that start with SUBSCRIBE are muted (accepted, never
    answered) and every live connection is reset, so the listener's
    replacement is a new, muted one, while new command connections (the
    query and the checks below) are answered. How many pub/sub connections
    it hit."""
    if fault != "accepted-then-silent":
        return sub_fault_on(proxy, fault)
    subs = proxy.subscribers()
    proxy.mute_new_subscribers(True)
    for c in proxy.live():
        c.kill()
    return len(subs)


@pytest.mark.parametrize("fault", SUB_FAULTS)
def test_resty_pubsub_connection_fault_holder_told_of_force_unlock(nginx, server, proxy, name,
                                                                   fault):
    """The fault hits the holder's pub/sub connection alone (DESIGN.md §6,
    per connection and direction, as test_subscription.py does for the
    blocking client and hilock.aio): replies to it dropped, requests on it
    dropped, or reset with its replacement accepted and never answered. The
    command connection answers throughout (a hold-count query through it).
    Another client then force-unlocks and acquires at once: lk:lost() must
    say true within SUB_BOUND of the force unlock, not at the next renewal
    (10 s away with the 30 s watchdog lease). Before the worker's listener
    used the session's liveness rule (proto.sublive): replies-lost and
    accepted-then-silent not told within 3 s (the other client acquired
    within a few ms)."""
    a = Actor(nginx, proxy.url(), watchdog_lease_ms=int(SUB_LEASE * 1000))
    other = opened(server.url)
    channel = "redisson_lock__channel:{%s}" % name
    try:
        assert a("lock r %s 0 0" % name) == "ok 1"
        wait_for(lambda: numsub(server, channel) >= 1, 5.0, "the holder's subscription")
        time.sleep(0.2)  # its confirmation read (not dropped below)
        assert _resty_sub_fault_on(proxy, fault) == 1  # the one pub/sub connection
        time.sleep(0.3)
        tq = time.monotonic()
        assert a("holds r %s" % name) == "ok 1"  # the command connection answers
        assert time.monotonic() - tq < 1.0
        assert a("lost r %s" % name) == "ok 0"
        t0 = time.monotonic()
        assert other.lock(name).force_unlock()
        assert other.lock(name).acquire(wait=0)
        t_other = time.monotonic() - t0
        told = None
        while time.monotonic() - t0 < 3.0:
            if a("lost r %s" % name) == "ok 1":
                told = time.monotonic() - t0
                break
            time.sleep(0.005)
        report(f"openresty, {fault} on the subscription connection alone: holder told after "
               f"the force unlock (-1: not within 3 s)", -0.001 if told is None else told)
        report(f"openresty, {fault} on the subscription connection alone: other client "
               f"acquired after the force unlock", t_other)
        assert told is not None and told < SUB_BOUND, \
            f"openresty, {fault}: holder not told within {SUB_BOUND} s of the force unlock"
    finally:
        proxy.mute_new_subscribers(False)
        other.close()


# replies-lost only: requests-lost still delivers the unlock, and a reset
# (accepted-then-silent) was noticed before the fix too (0.8 s both ways)
@pytest.mark.parametrize("fault", ["replies-lost"])
def test_resty_fair_waiter_pubsub_fault_still_gets_the_lock(nginx, server, proxy, name, fault):
    """A fair waiter's own pub/sub connection (its waiter channel) goes
    silent while it waits (replies dropped). The holder (another client, a
    30 s watchdog lease) then releases: its publish to the waiter is lost,
    yet the waiter gets the lock within 3 s (the session's liveness rule,
    proto.sublive, gives the silent connection up within about 1 s; the
    waiter then tries again at once), not when its wait runs out. Before
    the fair wait used the rule: 6.9 s; after: 0.4 s."""
    a = Actor(nginx, proxy.url())
    other = opened(server.url)
    lk = other.fair_lock(name)
    got = []
    try:
        assert lk.acquire(wait=0)
        t = threading.Thread(target=lambda: got.append(
            (a("lock f %s 15000 0" % name, timeout=40), time.monotonic())))
        t.start()
        wait_for(lambda: len(proxy.subscribers()) >= 1, 5.0, "the waiter's subscription")
        time.sleep(0.3)  # its confirmation read
        subs = proxy.subscribers()
        assert len(subs) == 1  # the waiter's own connection
        if fault == "accepted-then-silent":  # its next one: accepted, never answered
            proxy.mute_new_subscribers(True)
            subs[0].kill()
        else:
            sub_fault_on(proxy, fault)
        time.sleep(0.3)
        t0 = time.monotonic()
        lk.release()
        t.join(30)
        assert got, "the waiter did not answer"
        took = got[0][1] - t0
        report(f"openresty fair waiter, {fault} on its pub/sub connection: acquired after "
               f"the release (answer {got[0][0]!r})", took)
        assert got[0][0] == "ok 1", got[0][0]
        assert took < 3.0, f"{fault}: the waiter got the lock {took:.2f} s after the release"
        assert a("unlock f %s" % name) == "ok"
    finally:
        proxy.mute_new_subscribers(False)
        other.close()


def test_resty_fair_grant_on_a_silent_connection_given_back_soon(nginx, server, proxy, name):
    """As test_late_reply's case for blocking and aio: a fair waiter's
    attempt, sent when the holder lets go, is granted on the server and its
    reply held 10 s (the connection open and silent). The acquire fails
    after the command timeout; the settling light thread waits one more
    command timeout on that connection (the engine's settle machine), then
    settles on a new one and gives the grant back. Before: the grant stayed
    until the late reply came."""
    holder = opened(server.url)
    hold = holder.fair_lock(name)
    a = Actor(nginx, proxy.url(), command_timeout_ms=500)
    try:
        assert hold.acquire(wait=0, lease=30)
        assert a("lock f %s:warm 0 5000" % name) == "ok 1"  # scripts loaded, pooled
        assert a("unlock f %s:warm" % name) == "ok"
        got = []
        t = threading.Thread(target=lambda: got.append(a("lock f %s 5000 30000" % name)))
        t.start()
        queue = "redisson_lock_queue:{%s}" % name
        wait_for(lambda: server("LLEN", queue) == 1
                 and server("PUBSUB", "CHANNELS", "*%s*" % name), 5, "the waiter in line")
        proxy.late_reply(name.encode(), 10.0)
        hold.release()
        granted = False  # the waiter's grant seen on the server (its reply held)
        end = time.monotonic() + 10
        while t.is_alive() and time.monotonic() < end:
            granted = granted or server("EXISTS", name) == 1
            time.sleep(0.01)
        t.join(1)
        t0 = time.monotonic()
        granted = granted or server("EXISTS", name) == 1
        assert got and got[0].startswith("err connection"), got
        assert granted, "the attempt was not granted on the server"
        gone = True
        try:
            wait_for(lambda: server("EXISTS", name) == 0 and server("EXISTS", queue) == 0, 3,
                     "the grant given back")
        except AssertionError:
            gone = False
        report("openresty: fair grant on a silent connection given back after",
               time.monotonic() - t0)
        assert gone, "the grant stayed while its connection was silent"
        assert proxy.fired("late-reply-delivered") == 0
        assert a("lock f %s 1000 30000" % name) == "ok 1"  # the client goes on
        assert a("unlock f %s" % name) == "ok"
    finally:
        proxy.clear()
        holder.close()
