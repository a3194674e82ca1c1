"""Fault suite: hilock against a real redis-server behind a TCP fault proxy
(tests/faults/faultproxy.py), a stopped/killed/restarted server, ACL users,
memory limits and hostile input.

Every scenario checks what a caller can rely on: no hang beyond wait +
timeouts, no hold left behind after an error return, never two holders that
both believe they hold, and the documented error. Times to detect a loss are
printed (pytest -s, or the summary the runner prints).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
import uuid

import pytest

import hilock
from conftest import (GARBAGE_PAYLOADS, TIMES, ClusterNode, Redis, RedisServer, RespError, numsub,
                      opened, report, stop_all, wait_for)
from faultproxy import FaultProxy

def make(c, kind, name):
    if kind == "read":
        return c.read_write_lock(name).read_lock()
    if kind == "write":
        return c.read_write_lock(name).write_lock()
    return c.lock(name) if kind == "reentrant" else c.fair_lock(name)


def warm(c, kind, name):
    """Load the scripts (so the armed fault hits the script, not NOSCRIPT)
    and leave a pooled connection."""
    w = make(c, kind, name + ":warm")
    assert w.acquire(wait=0, lease=5)
    w.release()


KINDS = ["reentrant", "fair"]
# the acquire latch: every lock kind, the read-write sides included
LATCHED_KINDS = KINDS + ["read", "write"]


# ---- item 1: a lost acquire reply is never turned into a second hold ----

def pooled_reply_lost_enters_once(server, proxy, url, name, kind):
    c = opened(url)
    try:
        lk = make(c, kind, name)
        warm(c, kind, name)  # a pooled connection, then its reply is lost
        proxy.reset_on_reply(name.encode())
        assert lk.acquire(wait=2, lease=30)
        assert proxy.fired("reset-on-reply") == 1
        assert lk.hold_count == 1
        # the resent call's answer stays where a late copy of it would look:
        # after a lost reply the client's next call takes another latch key
        pattern = "hilock_acquire_latch:{%s}:*" % name
        before = set(server("KEYS", pattern))
        assert lk.acquire(wait=0, lease=30)  # re-entry
        after = set(server("KEYS", pattern))
        assert len(before) == 1 and len(after) == 2 and before <= after, (before, after)
        lk.release()
        assert lk.hold_count == 1
        lk.release()
        assert server("EXISTS", name) == 0, "one acquire + one release left the lock held"
    finally:
        c.close()


def fresh_reply_lost_leaves_no_hold(server, proxy, url, name, kind):
    c = opened(url)
    try:
        lk = make(c, kind, name)
        warm(c, kind, name)
        proxy.reset()  # no live connection: the acquire goes out on a new one
        proxy.reset_on_reply(name.encode())
        t0 = time.monotonic()
        with pytest.raises(hilock.ConnectionError):
            lk.acquire(wait=2, lease=30)
        assert time.monotonic() - t0 < 2 + 2 * 1.0 + 1
        assert proxy.fired("reset-on-reply") == 1
        assert server("EXISTS", name) == 0, "an acquire that failed left a hold behind"
        if kind == "fair":
            assert server("LLEN", "redisson_lock_queue:{%s}" % name) == 0
    finally:
        c.close()


@pytest.mark.parametrize("kind", LATCHED_KINDS)
def test_reply_lost_on_pooled_connection_enters_once(server, proxy, name, kind):
    pooled_reply_lost_enters_once(server, proxy, proxy.url(), name, kind)


@pytest.mark.parametrize("kind", LATCHED_KINDS)
def test_reply_lost_on_fresh_connection_leaves_no_hold(server, proxy, name, kind):
    fresh_reply_lost_leaves_no_hold(server, proxy, proxy.url(), name, kind)


# The same on Redis Cluster: a one-master cluster that announces the fault
# proxy's port, so that every connection the client makes from the slot map
# goes through the proxy.

@pytest.fixture(scope="module")
def cluster_node():
    n = ClusterNode(extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
    try:
        n("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        wait_for(lambda: "cluster_state:ok" in n("CLUSTER", "INFO"), 10, "cluster_state:ok")
        yield n
    finally:
        n.stop()


@pytest.fixture
def cluster_proxy(cluster_node):
    p = FaultProxy(cluster_node.port)
    cluster_node("CONFIG", "SET", "cluster-announce-ip", "127.0.0.1")
    cluster_node("CONFIG", "SET", "cluster-announce-port", str(p.port))
    wait_for(lambda: cluster_node("CLUSTER", "SLOTS")[0][2][1] == p.port, 5, "announced port")
    yield p
    p.close()


@pytest.mark.parametrize("kind", LATCHED_KINDS)
def test_cluster_reply_lost_on_pooled_connection_enters_once(cluster_node, cluster_proxy, name,
                                                             kind):
    url = "redis+cluster://127.0.0.1:%d" % cluster_proxy.port
    pooled_reply_lost_enters_once(cluster_node, cluster_proxy, url, name, kind)


@pytest.mark.parametrize("kind", LATCHED_KINDS)
def test_cluster_reply_lost_on_fresh_connection_leaves_no_hold(cluster_node, cluster_proxy, name,
                                                               kind):
    url = "redis+cluster://127.0.0.1:%d" % cluster_proxy.port
    fresh_reply_lost_leaves_no_hold(cluster_node, cluster_proxy, url, name, kind)


@pytest.fixture(scope="module")
def two_masters():
    """A cluster of two masters (slots 0-8191, 8192-16383), no replicas."""
    a = b = None
    try:
        a = ClusterNode(extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
        b = ClusterNode(extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
        a("CLUSTER", "ADDSLOTSRANGE", "0", "8191")
        b("CLUSTER", "ADDSLOTSRANGE", "8192", "16383")
        a("CLUSTER", "MEET", "127.0.0.1", str(b.port))
        wait_for(lambda: all("cluster_state:ok" in n("CLUSTER", "INFO") and
                             "cluster_known_nodes:2" in n("CLUSTER", "INFO") for n in (a, b)),
                 20, "two-master cluster ok")
        yield a, b
    finally:
        for n in (a, b):
            if n is not None:
                n.stop()


def test_cluster_latched_reentry_while_slot_migrates(two_masters):
    """The acquire latch is read where the lock is free or ours. While the
    lock's slot is MIGRATING, the owner's latch key is not on the old master
    (the latch of an earlier call expired, or it was never written): a plain
    read of it inside the script fails as a non-local key. The scripts read
    and write it with redis.pcall, so the re-entry goes on (as one without a
    latch) instead of failing; after the migration ends it works as before."""
    a, b = two_masters
    name = next(n for n in ("f:" + uuid.uuid4().hex[:12] for _ in range(100))
                if int(a("CLUSTER", "KEYSLOT", n)) < 8192)
    slot = int(a("CLUSTER", "KEYSLOT", name))
    ida, idb = a("CLUSTER", "MYID"), b("CLUSTER", "MYID")
    c = opened("redis+cluster://127.0.0.1:%d,127.0.0.1:%d" % (a.port, b.port))
    try:
        lk = c.lock(name)
        assert lk.acquire(wait=0, lease=30)
        for k in a("KEYS", "hilock_acquire_latch:{%s}:*" % name):
            a("DEL", k)  # as after the latch lifetime
        b("CLUSTER", "SETSLOT", str(slot), "IMPORTING", ida)
        a("CLUSTER", "SETSLOT", str(slot), "MIGRATING", idb)
        try:
            assert lk.acquire(wait=0, lease=30)  # re-entry while the slot migrates
            assert a("HGET", name, c.owner()) == "2"
        finally:
            a("CLUSTER", "SETSLOT", str(slot), "STABLE")
            b("CLUSTER", "SETSLOT", str(slot), "STABLE")
        assert lk.acquire(wait=0, lease=30)
        assert lk.hold_count == 3
        for _ in range(3):
            lk.release()
        assert a("EXISTS", name) == 0
    finally:
        c.close()


# ---- semaphores: a lost acquire reply never takes permits twice ----

def sem_warm(c, kind, name):
    """Load the acquire and release scripts and leave a pooled connection."""
    if kind == "semaphore":
        w = c.semaphore(name + ":warm")
        w.try_set_permits(1)
        assert w.acquire(1, wait=0)
        w.release(1)
    else:
        w = c.permit_expirable_semaphore(name + ":warm")
        w.try_set_permits(1)
        w.release(w.acquire(wait=0, lease=5))


# The plain semaphore's acquire carries a per-owner request latch
# (hilock_sem_latch:{N}:<owner>:<epoch>), the permit-expirable one its ids.
SEM_KINDS = ["semaphore", "permit-expirable"]


@pytest.mark.parametrize("kind", SEM_KINDS)
def test_sem_reply_lost_on_pooled_connection_takes_once(server, proxy, name, kind):
    """The transport sends an attempt again once when its pooled connection
    turns out dead; the server may have run the first copy. Three permits,
    one acquire + one release: three free again, none taken twice."""
    c = opened(proxy.url())
    try:
        sem_warm(c, kind, name)
        if kind == "semaphore":
            s = c.semaphore(name)
            s.try_set_permits(3)
            proxy.reset_on_reply(name.encode())
            assert s.acquire(1, wait=2)
            assert proxy.fired("reset-on-reply") == 1
            assert server("GET", name) == "2", "one acquire took two permits"
            s.release(1)
        else:
            s = c.permit_expirable_semaphore(name)
            s.try_set_permits(3)
            proxy.reset_on_reply(name.encode())
            pid = s.acquire(wait=2)
            assert pid
            assert proxy.fired("reset-on-reply") == 1
            assert server("GET", name) == "2", "one acquire took two permits"
            assert server("ZCARD", "{%s}:timeout" % name) == 1
            s.release(pid)
        assert server("GET", name) == "3"
    finally:
        c.close()


@pytest.mark.parametrize("kind", SEM_KINDS)
def test_sem_reply_lost_on_fresh_connection_keeps_nothing(server, proxy, name, kind):
    """No resend on a fresh connection: the acquire fails, and the permits
    the server may have taken for it are given back (the permit ids are the
    request's own)."""
    c = opened(proxy.url())
    try:
        sem_warm(c, kind, name)
        s = c.semaphore(name) if kind == "semaphore" else c.permit_expirable_semaphore(name)
        s.try_set_permits(3)
        proxy.reset()  # no live connection: the acquire goes out on a new one
        proxy.reset_on_reply(name.encode())
        with pytest.raises(hilock.ConnectionError):
            if kind == "semaphore":
                s.acquire(1, wait=2)
            else:
                s.acquire(wait=2)
        assert proxy.fired("reset-on-reply") == 1
        assert server("GET", name) == "3", "a failed acquire kept a permit"
        if kind != "semaphore":
            assert server("ZCARD", "{%s}:timeout" % name) == 0
        else:
            # the request is marked given up (a late copy takes nothing),
            # with the one permit it had taken and that was given back
            latches = server("KEYS", "hilock_sem_latch:{%s}:*" % name)
            assert len(latches) == 1, latches
            assert re.fullmatch(r"x\d+:1", server("GET", latches[0])), server("GET", latches[0])
    finally:
        c.close()


def test_sem_acquire_timed_out_on_stopped_server_keeps_nothing(server, name):
    """The server SIGSTOPped with a plain semaphore's acquire on the wire:
    the reply times out (0.4 s), the settle goes out on a new connection
    and is answered once the server resumes, in whichever order the server
    then runs the two: the late acquire finds the request given up and
    takes nothing, or takes its permit and the settle gives it back."""
    c = opened(server.url, command_timeout=0.4)
    try:
        sem_warm(c, "semaphore", name)
        s = c.semaphore(name)
        s.try_set_permits(3)
        server.pause()
        timer = threading.Timer(0.9, server.resume)
        timer.start()
        try:
            with pytest.raises(hilock.ConnectionError):
                s.acquire(1, wait=2)
        finally:
            timer.join()
        wait_for(lambda: server("GET", name) == "3", 5, "every permit free again")
        time.sleep(0.3)  # nothing late takes one afterwards
        assert server("GET", name) == "3", "a timed-out acquire kept a permit"
    finally:
        server.resume()
        c.close()


# ---- item 2: a retried fair release returns the first answer ----

def test_fair_release_reply_lost_hands_over(server, proxy, name):
    holder = opened(proxy.url())
    other = opened(server.url)
    try:
        lk = holder.fair_lock(name)
        warm(holder, "fair", name)
        assert lk.acquire(wait=0, lease=30)
        got = []
        t = threading.Thread(target=lambda: got.append(other.fair_lock(name).acquire(wait=5, lease=30)))
        t.start()
        wait_for(lambda: server("LLEN", "redisson_lock_queue:{%s}" % name) == 1, 5, "waiter in line")
        proxy.reset_on_reply(b"publish")
        lk.release()  # NotOwnerError before the fix: the retry found it released
        assert proxy.fired("reset-on-reply") == 1
        t.join(10)
        assert got == [True]
    finally:
        holder.close()
        other.close()


# ---- issue 29: a release that cannot be confirmed stops renewal ----

def test_release_lost_on_every_try_ends_at_the_lease(server, proxy, name):
    """A watchdog hold whose release never reaches the server (every try's
    connection reset as it is sent): the release raises an error naming
    the server, the watchdog no longer renews the hold, so another client
    gets the lock once its lease is over; the same thread's next acquire
    completes the release first and holds once (no silent re-entry).
    On 7b6fa8d the watchdog kept renewing it: another client waiting 3
    leases never got it, and the holder re-entered (hold count 2)."""
    lease = 2.0
    holder = opened(proxy.url(), watchdog_lease=lease)
    other = opened(server.url)
    try:
        lk = holder.lock(name)
        warm(holder, "reentrant", name)
        assert lk.acquire(wait=0)
        for _ in range(4):  # the release and every retry of it
            proxy.reset_on_request(b"redisson_unlock_latch")
        t0 = time.monotonic()
        with pytest.raises(hilock.ConnectionError) as ei:
            lk.release()
        msg = str(ei.value)
        assert "not confirmed" in msg and "renewal stopped" in msg, msg
        assert "127.0.0.1:%d" % proxy.port in msg, msg
        assert proxy.fired("reset-on-request") >= 2
        proxy.clear()
        assert server("HEXISTS", name, holder.owner()) == 1  # never released
        assert other.lock(name).acquire(wait=3 * lease, lease=30)
        took = time.monotonic() - t0
        report("release lost on every try: another client acquired after", took)
        assert took <= lease + 1.0
        assert server("HEXISTS", name, holder.owner()) == 0
        other.lock(name).release()
        # again, and the same thread acquires at once (the hold still
        # there): the release is completed first, then one hold
        assert lk.acquire(wait=0)
        for _ in range(4):
            proxy.reset_on_request(b"redisson_unlock_latch")
        with pytest.raises(hilock.ConnectionError):
            lk.release()
        proxy.clear()
        assert server("HGET", name, holder.owner()) == "1"
        assert lk.acquire(wait=0)
        assert lk.hold_count == 1
        assert server("HGET", name, holder.owner()) == "1"
        lk.release()
        assert server("EXISTS", name) == 0
    finally:
        holder.close()
        other.close()


# ---- issue 29, issue 31 (d): a late copy of a release never touches a later hold ----
#
# A release held up on its way past the command timeout (its reply never
# comes on its connection: the client resends it, and the resend releases)
# or copied on its way (a proxy or network that sends it again: the client
# has its answer and cannot know). The copy reaches the server 4.5 s after
# the release was sent, past the 3 s its unlock latch lives (2 x 1 s command
# timeout + 1 s; the released hold had a 2 s lease), after the same owner
# released and took the lock again. Before the fix the copy released that
# later hold: the holder still believed it held the lock, and another client
# was granted it. The engine's rule holds for any delay (the owner's unlock
# latch lives as long as its hold, tests/c/test_proto.c).

LATE_COPY_S = 4.5


def _arm_late_copy(proxy, how):
    if how == "held":
        proxy.hold_request(b"redisson_unlock_latch", LATE_COPY_S)
    else:
        proxy.duplicate_later(b"redisson_unlock_latch", LATE_COPY_S)
    return "held-delivered" if how == "held" else "duplicate-delivered"


@pytest.mark.parametrize("how", ["held", "copied"])
def test_late_release_copy_leaves_a_later_hold(server, proxy, name, how):
    holder = opened(proxy.url(), command_timeout=1.0)
    other = opened(server.url)
    try:
        lk = holder.lock(name)
        warm(holder, "reentrant", name)
        assert lk.acquire(wait=0, lease=2)
        event = _arm_late_copy(proxy, how)
        t0 = time.monotonic()
        lk.release()  # held: resent after the timeout, and answered
        released = time.monotonic() - t0
        assert lk.acquire(wait=0, lease=30)
        lk.release()
        assert lk.acquire(wait=0, lease=30)
        wait_for(lambda: proxy.fired(event) == 1, LATE_COPY_S + 5, "the late copy delivered")
        late_at = time.monotonic() - t0
        time.sleep(0.1)  # the server has run it
        field = server("HGET", name, holder.owner())
        got = other.lock(name).acquire(wait=0, lease=30)
        print(f"[late copy, blocking, {how}] release answered after {released * 1000:.0f} ms; "
              f"copy delivered at {late_at * 1000:.0f} ms; holder's field {field!r}; "
              f"another client's acquire {'GRANTED' if got else 'refused'}")
        if got:
            other.lock(name).release()
        assert field == "1" and not got
        lk.release()
        assert server("EXISTS", name) == 0
    finally:
        holder.close()
        other.close()


@pytest.mark.parametrize("how", ["held", "copied"])
def test_aio_late_release_copy_leaves_a_later_hold(server, proxy, name, how):
    """As test_late_release_copy_leaves_a_later_hold, through hilock.aio."""
    import asyncio

    import hilock.aio as aio

    async def main():
        c = await aio.connect(proxy.url(), command_timeout=1.0, connect_timeout=1.0)
        other = opened(server.url)
        try:
            w = c.lock(name + ":warm")
            assert await w.acquire(wait=0, lease=5)
            await w.release()
            lk = c.lock(name)
            assert await lk.acquire(wait=0, lease=2)
            event = _arm_late_copy(proxy, how)
            t0 = time.monotonic()
            await lk.release()
            released = time.monotonic() - t0
            assert await lk.acquire(wait=0, lease=30)
            await lk.release()
            assert await lk.acquire(wait=0, lease=30)
            while proxy.fired(event) < 1 and time.monotonic() - t0 < LATE_COPY_S + 5:
                await asyncio.sleep(0.02)
            late_at = time.monotonic() - t0
            assert proxy.fired(event) == 1
            await asyncio.sleep(0.1)
            field = server("HGET", name, c.owner())
            got = other.lock(name).acquire(wait=0, lease=30)
            print(f"[late copy, aio, {how}] release answered after {released * 1000:.0f} ms; "
                  f"copy delivered at {late_at * 1000:.0f} ms; holder's field {field!r}; "
                  f"another client's acquire {'GRANTED' if got else 'refused'}")
            if got:
                other.lock(name).release()
            assert field == "1" and not got
            await lk.release()
            assert server("EXISTS", name) == 0
        finally:
            await c.close()
            other.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_aio_release_lost_on_every_try_ends_at_the_lease(server, proxy, name):
    """hilock.aio, as test_release_lost_on_every_try_ends_at_the_lease: a
    watchdog hold whose release and every retry of it are reset as they are
    sent. The release raises an error naming the server, the watchdog no
    longer renews the hold (another client gets it at the lease's end), and
    the same task's next acquire sends the release again first: one hold,
    not a silent re-entry. Before: the watchdog kept renewing the hold (the
    other client's acquire, waiting 3 leases, returned False) and the task
    re-entered it (hold count 2); tests/safety release-lost/aio."""
    import asyncio

    import hilock.aio as aio

    lease = 2.0

    async def main():
        c = await aio.connect(proxy.url(), watchdog_lease=lease, command_timeout=0.5,
                              connect_timeout=1.0)
        other = opened(server.url)
        try:
            w = c.lock(name + ":warm")
            assert await w.acquire(wait=0)
            await w.release()
            lk = c.lock(name)
            assert await lk.acquire(wait=0)
            owner = c.owner()
            for _ in range(4):  # the release and every retry of it
                proxy.reset_on_request(b"redisson_unlock_latch")
            t0 = time.monotonic()
            with pytest.raises(hilock.ConnectionError) as ei:
                await lk.release()
            msg = str(ei.value)
            assert "not confirmed" in msg and "renewal stopped" in msg, msg
            assert "127.0.0.1:%d" % proxy.port in msg, msg
            assert proxy.fired("reset-on-request") >= 2
            proxy.clear()
            assert server("HEXISTS", name, owner) == 1  # never released
            def take():  # in a thread of its own: the loop runs the watchdog meanwhile
                ol = other.lock(name)
                got = ol.acquire(wait=3 * lease, lease=30)
                took = time.monotonic() - t0
                held = server("HEXISTS", name, owner)
                if got:
                    ol.release()
                return got, took, held

            got, took, held = await asyncio.get_running_loop().run_in_executor(None, take)
            report("aio: release lost on every try: another client acquired after", took)
            assert got
            assert took <= lease + 1.0
            assert held == 0
            # again, and the same task acquires at once (the hold still
            # there): the release is sent again first, then one hold
            assert await lk.acquire(wait=0)
            for _ in range(4):
                proxy.reset_on_request(b"redisson_unlock_latch")
            with pytest.raises(hilock.ConnectionError):
                await lk.release()
            proxy.clear()
            assert server("HGET", name, owner) == "1"
            assert await lk.acquire(wait=0)
            assert server("HGET", name, owner) == "1"
            await lk.release()
            assert server("EXISTS", name) == 0
        finally:
            await c.close()
            other.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_aio_two_unanswered_releases_both_sent_again(server, proxy, name):
    """hilock.aio, as test_resty_two_unanswered_releases_both_sent_again: a
    hold taken twice (count 2, a fixed lease), then two releases, each reset
    on every try: neither ran (the second, behind the first sent again
    first, is not sent: "not sent"). The task's next acquire sends both again
    first, each under its own request id (the session's hl_unsettled_rel_*,
    as the C drivers and OpenResty): one hold after it, and one release
    frees the lock. Before (hilock.aio kept one unanswered release per hold
    and sent it again under a new id): hold count 2 after the acquire."""
    import asyncio

    import hilock.aio as aio

    async def main():
        c = await aio.connect(proxy.url(), command_timeout=0.5, connect_timeout=1.0)
        try:
            w = c.lock(name + ":warm")
            assert await w.acquire(wait=0, lease=5)  # scripts loaded, pooled
            await w.release()
            lk = c.lock(name)
            owner = c.owner()
            assert await lk.acquire(wait=0, lease=20)
            assert await lk.acquire(wait=0, lease=20)
            assert server("HGET", name, owner) == "2"
            for said in ("not confirmed", "not sent"):  # the second waits behind the first
                for _ in range(4):  # the release and every retry of it
                    proxy.reset_on_request(b"redisson_unlock_latch")
                with pytest.raises(hilock.ConnectionError) as ei:
                    await lk.release()
                assert said in str(ei.value), str(ei.value)
                proxy.clear()
            assert server("HGET", name, owner) == "2"  # neither ran
            assert await lk.acquire(wait=0, lease=20)
            holds = server("HGET", name, owner)
            print(f"[aio] acquire after two unanswered releases: hold count {holds}")
            assert holds == "1"
            await lk.release()
            assert server("EXISTS", name) == 0
        finally:
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 30))



def test_aio_release_after_unanswered_one_sends_that_one_first(server, proxy, name):
    """hilock.aio, as tests/c/test_async_faults "a release after an
    unanswered one sends that one first" (simulator seed 1009751): a hold
    taken twice, its first release reset on every try (never arrived), then
    the task releases again once the link is back. The session sends the
    unanswered one again first, then the new one: the key is gone, and the
    next acquire is a first hold (count 1). Before (hilock.aio asked the
    rule before an acquire only), the new release went alone (2 -> 1) and
    left its higher seq in the owner's unlock latch; the next acquire sent
    the earlier one again, refused as a late copy ("not owner"), and
    re-entered the hold left (count 2 while the caller counts 1)."""
    import asyncio

    import hilock.aio as aio

    async def main():
        c = await aio.connect(proxy.url(), command_timeout=0.5, connect_timeout=1.0)
        try:
            w = c.lock(name + ":warm")
            assert await w.acquire(wait=0, lease=5)  # scripts loaded, pooled
            await w.release()
            lk = c.lock(name)
            owner = c.owner()
            assert await lk.acquire(wait=0, lease=20)
            assert await lk.acquire(wait=0, lease=20)
            for _ in range(4):  # the release and every retry of it
                proxy.reset_on_request(b"redisson_unlock_latch")
            with pytest.raises(hilock.ConnectionError) as ei:
                await lk.release()
            assert "not confirmed" in str(ei.value), str(ei.value)
            proxy.clear()
            assert server("HGET", name, owner) == "2"  # it never arrived
            await lk.release()
            left = server("EXISTS", name)
            assert await lk.acquire(wait=0, lease=20)
            holds = server("HGET", name, owner)
            print(f"[aio] release after an unanswered one: key left {left}, next acquire's "
                  f"hold count {holds}")
            assert left == 0
            assert holds == "1"
            await lk.release()
            assert server("EXISTS", name) == 0
        finally:
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 30))


# ---- item 3: a holder cut off from Redis is told before its lease ends ----

@pytest.mark.parametrize("kind", KINDS)
def test_partitioned_holder_told_before_lease_ends(server, proxy, name, kind):
    lease = 3.0
    holder = opened(proxy.url(), watchdog_lease=lease, command_timeout=0.3)
    other = opened(server.url)
    try:
        lk = make(holder, kind, name)
        lost_at = []
        lk.on_lost = lambda l, tid: lost_at.append(time.monotonic())
        assert lk.acquire(wait=0)
        time.sleep(1.3)  # a renewal (every lease/3) went through
        proxy.blackhole(True)
        t_cut = time.monotonic()
        assert make(other, kind, name).acquire(wait=2 * lease, lease=30)
        t_other = time.monotonic()
        assert lost_at, "the cut-off holder was never told"
        report(f"partition ({kind}): holder told after", lost_at[0] - t_cut)
        report(f"partition ({kind}): other client acquired after", t_other - t_cut)
        assert lost_at[0] < t_other, "both believed they held the lock"
        assert lk.lost
        assert "in doubt" in lk.errmsg
    finally:
        proxy.blackhole(False)
        holder.close()
        other.close()


RUN_CMD = r'''
import os, signal, sys, time
out = sys.argv[1]
def stop(*_):
    with open(out, "a") as f:
        f.write("end %.6f\n" % time.monotonic())
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
with open(out, "a") as f:
    f.write("start %.6f\n" % time.monotonic())
while True:
    time.sleep(0.01)
'''


def test_cli_run_stops_command_before_other_gets_lock(server, proxy, name, tmp_path):
    hl = os.path.join(os.environ.get("HILOCK_BUILD", ""), "cli", "hilock")
    if not os.access(hl, os.X_OK):
        pytest.skip("no hilock CLI built (HILOCK_BUILD)")
    py = os.environ.get("HILOCK_PYTHON", "python3")
    a_out, b_out = tmp_path / "a", tmp_path / "b"
    a = subprocess.Popen([hl, "run", "--url", proxy.url(), "--watchdog-lease", "6", name, "--",
                          py, "-c", RUN_CMD, str(a_out)], stderr=subprocess.PIPE)
    b = None
    try:
        wait_for(lambda: a_out.exists() and "start" in a_out.read_text(), 5, "first command")
        time.sleep(2.5)  # a renewal went through
        proxy.blackhole(True)
        t_cut = time.monotonic()
        b = subprocess.Popen([hl, "run", "--url", server.url, name, "--", py, "-c", RUN_CMD,
                              str(b_out)])
        wait_for(lambda: b_out.exists() and "start" in b_out.read_text(), 12, "second command")
        assert a.wait(5) == 75, "the cut-off run did not report the loss"
        a_end = float(a_out.read_text().split("end ")[1].split()[0])
        b_start = float(b_out.read_text().split("start ")[1].split()[0])
        report("partition: hilock run stopped its command after", a_end - t_cut)
        assert a_end < b_start, "two hilock run commands ran at the same time"
    finally:
        proxy.blackhole(False)
        stop_all(a, b)


# ---- item 4: a PUBLISH refused by the ACL never half-releases ----

@pytest.mark.parametrize("rule", [["resetchannels"], ["allchannels", "-publish", "-spublish"]],
                         ids=["no-channels", "no-publish"])
@pytest.mark.parametrize("kind", KINDS)
def test_release_with_publish_refused_is_truthful(server, name, rule, kind):
    server("ACL", "SETUSER", "weak", "on", ">pw", "~*", "+@all", "allchannels")
    url = f"redis://weak:pw@127.0.0.1:{server.port}/0"
    c = opened(url)
    try:
        lk = make(c, kind, name)
        assert lk.acquire(wait=0, lease=30)
        server("ACL", "SETUSER", "weak", *rule)  # the rights go away while it is held
        # a user without them is refused at open (docs/acl.md)
        with pytest.raises(hilock.AuthenticationError):
            opened(url)
        if kind == "fair":  # a waiter in line: the release must wake it
            server("RPUSH", "redisson_lock_queue:{%s}" % name, "someone:1")
            server("ZADD", "redisson_lock_timeout:{%s}" % name, int(time.time() * 1000) + 60000,
                   "someone:1")
        with pytest.raises(hilock.ProtocolError) as ei:
            lk.release()
        assert "nothing was released" in str(ei.value)
        assert "publish" in str(ei.value) or "can't run this command" in str(ei.value)
        # the error is the truth: nothing was released
        assert server("EXISTS", name) == 1
        assert lk.owned()
        assert lk.hold_count == 1
    finally:
        c.close()


def test_documented_channel_rule_is_enough(server, name):
    # the channel rule of docs/acl.md is enough (with all keys and commands)
    server("ACL", "SETUSER", "app", "on", ">pw", "~*", "&redisson_lock__channel:*", "+@all")
    a = opened(f"redis://app:pw@127.0.0.1:{server.port}/0")
    b = opened(f"redis://app:pw@127.0.0.1:{server.port}/0")
    try:
        for kind in KINDS:
            la = make(a, kind, name + kind)
            lb = (b.lock if kind == "reentrant" else b.fair_lock)(name + kind, thread_id=7)
            assert la.acquire(wait=0, lease=30)
            got = []
            t = threading.Thread(target=lambda: got.append(lb.acquire(wait=5, lease=30)))
            t.start()
            time.sleep(0.2)
            t0 = time.monotonic()
            la.release()
            t.join(10)
            assert got == [True]
            assert time.monotonic() - t0 < 1, "the waiter was not woken by the release"
            lb.release()
    finally:
        a.close()
        b.close()


# ---- item 7: NUL bytes in names and URLs ----

def test_nul_in_name_and_url_refused(server):
    c = opened(server.url)
    try:
        with pytest.raises(hilock.InvalidArgument):
            c.lock("a\x00b")
        with pytest.raises(hilock.InvalidArgument):
            c.fair_lock("\x00")
    finally:
        c.close()
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(server.url + "\x00garbage")


# ---- item 8: a release works on a server out of memory ----

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lease", [30, None], ids=["lease", "watchdog"])
def test_release_under_maxmemory_noeviction(server, name, kind, lease):
    c = opened(server.url)
    try:
        lk = make(c, kind, name)
        assert lk.acquire(wait=0, lease=lease)
        assert lk.acquire(wait=0, lease=lease)  # two holds: a partial release first
        server("CONFIG", "SET", "maxmemory-policy", "noeviction")
        server("CONFIG", "SET", "maxmemory", "1")
        try:
            with pytest.raises(RespError, match="OOM"):
                server("SET", "filler", "x")  # the server is out of memory
            lk.release()  # one hold left: decremented, lease applied again
            assert lk.hold_count == 1
            lk.release()
            assert server("EXISTS", name) == 0
            # a new acquire is refused with the server's reason, leaving nothing
            with pytest.raises(hilock.Error, match="OOM"):
                make(c, kind, name).acquire(wait=0, lease=30)
            assert server("EXISTS", name) == 0
        finally:
            server("CONFIG", "SET", "maxmemory", "0")
    finally:
        c.close()


# ---- item 9: a server that does not speak RESP; URLs without hosts ----

class NotRedis:
    """A TCP server answering every connection with an HTTP error."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        self.sock.settimeout(0.05)
        while not self.stop:
            try:
                s, _ = self.sock.accept()
            except OSError:
                continue
            try:
                s.settimeout(1)
                s.recv(4096)
                s.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.stop = True
        self.t.join()
        self.sock.close()


def test_non_redis_server_is_a_protocol_error():
    srv = NotRedis()
    try:
        t0 = time.monotonic()
        with pytest.raises(hilock.ProtocolError):
            opened(f"redis://127.0.0.1:{srv.port}/0")
        assert time.monotonic() - t0 < 3
    finally:
        srv.close()


@pytest.mark.parametrize("url", ["redis+sentinel:///m", "redis+sentinel://", "redis+cluster://",
                                 "redis+cluster:///"])
def test_url_without_hosts_is_invalid(url):
    with pytest.raises(hilock.InvalidArgument):
        opened(url)


# ---- transport faults that need no fix: bounded, truthful, no phantom ----

def test_refused_connection_fails_fast(server, proxy, name):
    proxy.refuse(True)
    t0 = time.monotonic()
    with pytest.raises(hilock.ConnectionError):
        c = opened(proxy.url())
        c.lock(name).acquire(wait=1)
    assert time.monotonic() - t0 < 3
    assert server("EXISTS", name) == 0


def test_blackhole_acquire_bounded_and_no_phantom(server, proxy, name):
    c = opened(proxy.url())
    try:
        lk = c.lock(name)
        assert not lk.locked()
        proxy.blackhole(True)
        t0 = time.monotonic()
        with pytest.raises(hilock.ConnectionError):
            lk.acquire(wait=1, lease=30)
        took = time.monotonic() - t0
        assert took < 1 + 1.0 + 1.5, took
        proxy.blackhole(False)
        # the attempt reaches the server late: the drain gives it back
        wait_for(lambda: server("EXISTS", name) == 0, 5, "late grant given back")
    finally:
        c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_drained_attempt_settled_when_kept_connection_dies(server, proxy, name, kind):
    """The server grants the attempt, its reply comes after the command
    timeout (the connection is kept to settle the late outcome), then that
    connection dies before the reply: the grant must still be given back
    (before: held until the 30 s lease ended)."""
    c = opened(proxy.url(), command_timeout=0.5)
    try:
        lk = make(c, kind, name)
        warm(c, kind, name)
        proxy.latency(down=3.0)  # every reply from now on arrives 3 s late
        t0 = time.monotonic()
        with pytest.raises(hilock.ConnectionError):
            lk.acquire(wait=0, lease=30)
        assert time.monotonic() - t0 < 0.5 + 1.0
        assert server("EXISTS", name) == 1, "the server did not run the attempt"
        proxy.latency(down=0.0)
        proxy.reset()  # the kept connection dies; its late reply never comes
        t_cut = time.monotonic()
        wait_for(lambda: server("EXISTS", name) == 0, 5, "the unanswered grant given back")
        report(f"kept connection reset ({kind}): grant given back after", time.monotonic() - t_cut)
        assert lk.acquire(wait=1, lease=30)  # and the client can take it again
        assert lk.hold_count == 1
        lk.release()
        assert server("EXISTS", name) == 0
    finally:
        c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_aio_drained_attempt_settled_when_kept_connection_dies(server, proxy, name, kind):
    """hilock.aio, as the test above: the attempt's reply comes after the
    command timeout (its connection is kept to settle the late outcome),
    then that connection dies before the reply. The settle machine asks
    for a new connection (reconnect); the grant must be given back on it
    and no queue entry left (before: the settling ended with the dead
    connection and the grant stayed for its 30 s lease)."""
    import asyncio

    import hilock.aio as aio

    async def gone(cmd, within):
        t0 = time.monotonic()
        while time.monotonic() - t0 < within:
            if server(*cmd) == 0:
                return True
            await asyncio.sleep(0.02)
        return False

    async def main():
        c = await aio.connect(proxy.url(), command_timeout=0.5, connect_timeout=1.0)
        try:
            lk = c.lock(name) if kind == "reentrant" else c.fair_lock(name)
            w = c.lock(name + ":warm") if kind == "reentrant" else c.fair_lock(name + ":warm")
            assert await w.acquire(wait=0, lease=5)  # scripts loaded, a pooled connection
            await w.release()
            proxy.latency(down=3.0)  # every reply from now on arrives 3 s late
            t0 = time.monotonic()
            with pytest.raises(hilock.ConnectionError):
                await lk.acquire(wait=0, lease=30)
            assert time.monotonic() - t0 < 0.5 + 1.0
            assert server("EXISTS", name) == 1, "the server did not run the attempt"
            proxy.latency(down=0.0)
            proxy.reset()  # the kept connection dies; its late reply never comes
            t_cut = time.monotonic()
            assert await gone(["EXISTS", name], 5), "the unanswered grant was not given back"
            report(f"aio: kept connection reset ({kind}): grant given back after",
                   time.monotonic() - t_cut)
            assert server("EXISTS", f"redisson_lock_queue:{{{name}}}",
                          f"redisson_lock_timeout:{{{name}}}") == 0
            assert await lk.acquire(wait=1, lease=30)  # and the client can take it again
            assert await lk.hold_count() == 1
            await lk.release()
            assert server("EXISTS", name) == 0
        finally:
            await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_reset_on_request_then_works(server, proxy, name, kind):
    c = opened(proxy.url())
    try:
        lk = make(c, kind, name)
        warm(c, kind, name)
        proxy.reset_on_request(name.encode())
        # the pooled connection dies before the server saw anything: retried
        assert lk.acquire(wait=1, lease=30)
        assert proxy.fired("reset-on-request") == 1
        assert lk.hold_count == 1
        lk.release()
        assert server("EXISTS", name) == 0
    finally:
        c.close()


# ---- a replica: stopped, killed, or the client pointed at it ----

@pytest.fixture
def replica(server):
    server("CONFIG", "SET", "repl-diskless-sync-delay", "0")  # default: 5 s before a sync
    r = RedisServer(extra=["--replicaof", "127.0.0.1", str(server.port)])
    try:
        # online, loaded, and its first acknowledgement in (before it, WAIT
        # may count no replica although the sync is over)
        wait_for(lambda: "master_link_status:up" in r("INFO", "replication"), 10, "replica up")
        server("SET", "replica-probe", "1")
        server("DEL", "replica-probe")
        wait_for(lambda: server("WAIT", "1", "200") == 1, 10, "replica acknowledged")
        yield r
    finally:
        r.stop()


def warm_acked(c, kind, name):
    """warm() for a client with replica_ack: the master's replica count is
    known (ROLE) and the replica has acknowledged once (just after its sync
    it may answer late: retried within the wait)."""
    w = make(c, kind, name + ":warm")
    assert w.acquire(wait=5, lease=5)
    w.release()


@pytest.mark.parametrize("kind", ["fair"])  # the queue too; the ack rule is one for both kinds
def test_replica_stopped_ack_refused_nothing_held(server, replica, name, kind):
    """replica_ack on (1 s: a loaded machine's replica may take 0.3 s), the
    replica SIGSTOPped (the master still counts it):
    the documented NotAcknowledgedError (a ConnectionError, HILOCK_EUNACKED)
    within wait + ack timeouts, the grant
    given back, another client gets the lock at once; with the replica back,
    acquire works again."""
    c = opened(server.url, replica_ack=True, replica_ack_timeout=1.0)
    other = opened(server.url)
    try:
        lk = make(c, kind, name)
        warm_acked(c, kind, name)
        replica.pause()
        t0 = time.monotonic()
        with pytest.raises(hilock.NotAcknowledgedError) as ei:
            lk.acquire(wait=0.5, lease=30)
        took = time.monotonic() - t0
        report(f"replica stopped ({kind}): unacknowledged acquire refused after", took)
        assert took < 0.5 + 2 * 1.0 + 1.5, took
        assert ei.value.code == -13 and isinstance(ei.value, hilock.ConnectionError)
        assert "no replica acknowledged" in str(ei.value)
        assert server("EXISTS", name) == 0, "an acquire that failed left a hold behind"
        if kind == "fair":
            assert server("LLEN", "redisson_lock_queue:{%s}" % name) == 0
        o = make(other, kind, name)
        assert o.acquire(wait=0, lease=30), "the refused grant was not given back"
        o.release()
        replica.resume()
        assert lk.acquire(wait=2, lease=30)
        assert lk.hold_count == 1
        # an unacknowledged release still counts as a release (docs/c-api.md)
        replica.pause()
        lk.release()
        assert server("EXISTS", name) == 0
    finally:
        replica.resume()
        c.close()
        other.close()


def test_replica_stopped_watchdog_holder_told_in_doubt(server, replica, name):
    """replica_ack on, a watchdog hold (lease 3 s), then the replica stopped:
    the master still answers every renewal, but no replica takes them, so
    none is a confirmation (a master cut off from its replicas may be
    replaced by one that never saw them, where the lease runs out from the
    last acknowledged renewal). The holder is told "in doubt" before that
    lease ends (before: renewals counted as confirmed, never told)."""
    lease = 3.0
    c = opened(server.url, replica_ack=True, replica_ack_timeout=0.5, watchdog_lease=lease)
    try:
        warm_acked(c, "reentrant", name)
        lk = make(c, "reentrant", name)
        lost_at = []
        lk.on_lost = lambda l, tid: lost_at.append(time.monotonic())
        assert lk.acquire(wait=2)
        # the replica's copy of the hold: its lease as of the last renewal
        # a replica took
        wait_for(lambda: replica("EXISTS", name) == 1, 5, "the hold on the replica")
        replica.pause()
        t0 = time.monotonic()
        wait_for(lambda: lost_at, 2 * lease, "the holder told in doubt")
        told = lost_at[0] - t0
        report("replica stopped under a watchdog hold: holder told in doubt after", told)
        assert told < lease, told
        assert lk.lost
        assert server("EXISTS", name) == 1  # the master still renews it
    finally:
        replica.resume()
        c.close()


def test_aio_replica_stopped_watchdog_holder_told_in_doubt(server, replica, name):
    """hilock.aio, as the test above: replica_ack on, a watchdog hold (lease
    3 s), then the replica stopped; the master answers every renewal, no
    replica takes them, so none is a confirmation: the holder is told "in
    doubt" before the lease ends (before: never told)."""
    import asyncio

    import hilock.aio as aio

    lease = 3.0

    async def main():
        c = await aio.connect(server.url, replica_ack=True, replica_ack_timeout=0.5,
                              watchdog_lease=lease)
        try:
            w = c.lock(name + ":warm")  # the master's replica count known (ROLE)
            assert await w.acquire(wait=5, lease=5)
            await w.release()
            lk = c.lock(name)
            lost_at = []
            lk.on_lost = lambda l, tid: lost_at.append(time.monotonic())
            assert await lk.acquire(wait=2)
            assert replica("EXISTS", name) == 1  # acknowledged: the replica has it
            replica.pause()
            t0 = time.monotonic()
            while not lost_at and time.monotonic() - t0 < 2 * lease:
                await asyncio.sleep(0.02)
            told = lost_at[0] - t0 if lost_at else None
            if told is not None:
                report("aio: replica stopped under a watchdog hold: holder told in doubt after",
                       told)
            assert told is not None and told < lease, told
            assert lk.lost
            assert server("EXISTS", name) == 1  # the master still renews it
        finally:
            replica.resume()
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 30))


@pytest.mark.parametrize("kind", KINDS)
def test_replica_ack_retried_while_the_wait_lasts(server, replica, name, kind):
    """replica_ack on (0.3 s), the replica stopped for 1.5 s: an acquire
    that may wait 5 s keeps taking the lock, asking for the acknowledgement
    and giving it back until the replica answers, then holds it once (the
    docs promise retries while the wait lasts); nothing is left behind by
    the attempts given back."""
    c = opened(server.url, replica_ack=True, replica_ack_timeout=0.3)
    try:
        lk = make(c, kind, name)
        warm_acked(c, kind, name)
        replica.pause()
        timer = threading.Timer(1.5, replica.resume)
        timer.start()
        t0 = time.monotonic()
        try:
            assert lk.acquire(wait=5, lease=30), "not acquired"
        finally:
            timer.join()
        took = time.monotonic() - t0
        report(f"replica stopped 1.5 s ({kind}): acquired with replica_ack after", took)
        assert 1.4 < took < 5, took
        assert lk.hold_count == 1
        lk.release()
        assert server("EXISTS", name) == 0
        if kind == "fair":
            assert server("LLEN", "redisson_lock_queue:{%s}" % name) == 0
    finally:
        replica.resume()
        c.close()


def test_replica_killed_ack_refused_until_it_is_back(server, replica, name):
    """The replica killed: the master drops it and lists no replica, but it
    had one, so nothing it grants is on a replica (had the replica been cut
    off rather than killed, a sentinel could have promoted it): each acquire
    is refused with NotAcknowledgedError and leaves nothing held, while the
    wait lasts; once the replica is started again, one acquire is one hold.
    On 7b6fa8d the acquire after the kill succeeded (WAIT's 0 followed by a
    ROLE listing no replica counted as "nothing to lose")."""
    c = opened(server.url, replica_ack=True, replica_ack_timeout=0.3)
    try:
        lk = c.lock(name)
        warm_acked(c, "reentrant", name)
        replica.kill9()
        wait_for(lambda: server("ROLE")[2] == [], 10, "the master lists no replica")
        t0 = time.monotonic()
        with pytest.raises(hilock.NotAcknowledgedError) as ei:
            lk.acquire(wait=1, lease=30)
        report("replica killed: acquire with replica_ack refused after", time.monotonic() - t0)
        assert "no replica acknowledged" in str(ei.value)
        assert server("EXISTS", name) == 0
        assert lk.hold_count == 0
        replica.start()
        wait_for(lambda: server("ROLE")[2] != [], 10, "the replica is back")
        t0 = time.monotonic()
        assert lk.acquire(wait=10, lease=30)
        report("replica started again: acquire with replica_ack after", time.monotonic() - t0)
        assert lk.hold_count == 1
        lk.release()
        assert server("EXISTS", name) == 0
    finally:
        c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_client_on_replica_clear_error_no_hang(server, replica, name, kind):
    """A client pointed at a replica: READONLY is a clear ConnectionError at
    once (no retry loop, no hang) and nothing is written anywhere."""
    c = opened(replica.url)
    try:
        lk = make(c, kind, name)
        t0 = time.monotonic()
        with pytest.raises(hilock.ConnectionError) as ei:
            lk.acquire(wait=1, lease=30)
        assert time.monotonic() - t0 < 1 + 1.0 + 1.0
        assert "READONLY" in str(ei.value) or "not the master" in str(ei.value)
        assert server("EXISTS", name) == 0 and replica("EXISTS", name) == 0
        assert server("DBSIZE") == 0
    finally:
        c.close()


def test_latency_both_ways_still_exclusive(server, proxy, name):
    proxy.latency(up=0.02, down=0.02)
    a, b = opened(proxy.url()), opened(server.url)
    try:
        la, lb = a.lock(name), b.lock(name)
        assert la.acquire(wait=1, lease=30)
        assert not lb.acquire(wait=0.2)
        t0 = time.monotonic()
        la.release()
        assert lb.acquire(wait=2)
        assert time.monotonic() - t0 < 1
        lb.release()
    finally:
        a.close()
        b.close()


def test_sigstop_server_during_acquire(server, name):
    c = opened(server.url)
    try:
        lk = c.lock(name)
        assert not lk.locked()
        server.pause()
        try:
            t0 = time.monotonic()
            with pytest.raises(hilock.ConnectionError):
                lk.acquire(wait=1, lease=30)
            assert time.monotonic() - t0 < 1 + 1.0 + 1.5
        finally:
            server.resume()
        wait_for(lambda: server("EXISTS", name) == 0, 5, "late grant given back")
        assert lk.acquire(wait=1, lease=30)
        lk.release()
    finally:
        c.close()


@pytest.mark.parametrize("fault", ["kill9-restart", "flushall"])
def test_hold_gone_on_server_reports_loss(server, name, fault):
    c = opened(server.url, watchdog_lease=1.5)
    try:
        lk = c.lock(name)
        lost = threading.Event()
        lk.on_lost = lambda l, tid: lost.set()
        assert lk.acquire(wait=0)
        if fault == "flushall":
            server("FLUSHALL")
        else:
            server.restart()  # kill -9, started again empty: the hold is gone
        t0 = time.monotonic()
        assert lost.wait(5), "the holder was never told"
        report(f"{fault}: loss reported", time.monotonic() - t0)
        assert lk.lost
        with pytest.raises(hilock.Error):
            lk.release()
    finally:
        c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_script_flush_is_transparent(server, name, kind):
    c = opened(server.url)
    try:
        lk = make(c, kind, name)
        assert lk.acquire(wait=0, lease=30)
        server("SCRIPT", "FLUSH")
        assert lk.acquire(wait=0, lease=30)
        server("SCRIPT", "FLUSH")
        lk.release()
        lk.release()
        assert server("EXISTS", name) == 0
    finally:
        c.close()


def test_client_kill_pubsub_waiter_still_woken(server, name):
    a, b = opened(server.url), opened(server.url)
    try:
        la = a.lock(name)
        assert la.acquire(wait=0, lease=30)
        got = []
        t = threading.Thread(target=lambda: got.append(b.lock(name).acquire(wait=8)))
        t.start()
        # the holder's client listens there too (a force unlock is heard): 2
        ch = "redisson_lock__channel:{%s}" % name
        wait_for(lambda: numsub(server, ch) == 2, 5, "waiter subscribed")
        server("CLIENT", "KILL", "TYPE", "pubsub")
        wait_for(lambda: numsub(server, ch) == 2, 5, "waiter subscribed again")
        t0 = time.monotonic()
        la.release()
        t.join(10)
        assert got == [True]
        assert time.monotonic() - t0 < 2, "the waiter slept through the unlock"
    finally:
        a.close()
        b.close()


# ---- item 5: woken again once the re-SUBSCRIBE is confirmed ----

@pytest.mark.parametrize("kind", KINDS)
def test_unlock_before_resubscribe_took_effect_is_not_missed(server, proxy, name, kind):
    a, b = opened(server.url), opened(proxy.url())
    try:
        la = make(a, kind, name)
        assert la.acquire(wait=0, lease=30)
        got = []
        t = threading.Thread(target=lambda: got.append(make(b, kind, name).acquire(wait=8, lease=30)))
        t.start()
        wait_for(lambda: server("PUBSUB", "NUMPAT") == 0 and sum(
            int(x) for x in server("PUBSUB", "NUMSUB", *[
                c for c in server("PUBSUB", "CHANNELS", "redisson_lock__channel:*")])[1::2]) == 2,
            5, "waiter subscribed")  # and the holder's client (it listens for a force unlock)
        # the waiter's next SUBSCRIBE takes 1 s to reach the server
        proxy.delay_frames(b"SUBSCRIBE", 1.0, upstream=True)
        server("CLIENT", "KILL", "TYPE", "pubsub")
        time.sleep(0.4)  # woken by the reconnect, retried, asleep again
        t0 = time.monotonic()
        la.release()  # published while nobody listens
        t.join(10)
        assert got == [True]
        took = time.monotonic() - t0
        report(f"unlock during re-subscribe ({kind}): waiter acquired after", took)
        assert took < 2.5, "the waiter slept through the unlock"
    finally:
        a.close()
        b.close()


def test_garbage_payloads_on_lock_channel_are_ignored(server, name):
    a, b = opened(server.url), opened(server.url)
    try:
        la = a.lock(name)
        assert la.acquire(wait=0, lease=30)
        got = []
        t = threading.Thread(target=lambda: got.append(b.lock(name).acquire(wait=8)))
        t.start()
        ch = "redisson_lock__channel:{%s}" % name
        # the holder's client listens there too (a force unlock is heard): 2
        wait_for(lambda: numsub(server, ch) == 2, 5, "waiter subscribed")
        for junk in GARBAGE_PAYLOADS:
            server("PUBLISH", ch, junk)
        time.sleep(0.2)
        assert got == [] and server("HLEN", name) == 1  # nobody took it
        la.release()
        t.join(10)
        assert got == [True]
    finally:
        a.close()
        b.close()


HOLDER = r"""
import sys, time, hilock
c = hilock.Client(sys.argv[1], watchdog_lease=float(sys.argv[3]))
lk = c.lock(sys.argv[2])
assert lk.acquire(wait=0)
print("held", flush=True)
time.sleep(3600)
"""


def test_holder_sigkill_waiter_gets_lock_after_lease(server, name):
    p = subprocess.Popen([os.environ.get("HILOCK_PYTHON", "python3"), "-c", HOLDER, server.url, name, "1.5"],
                         stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline().strip() == b"held"
        c = opened(server.url)
        try:
            lk = c.lock(name)
            assert not lk.acquire(wait=0)
            p.kill()
            p.wait()
            t0 = time.monotonic()
            assert lk.acquire(wait=5)
            took = time.monotonic() - t0
            report("holder SIGKILL: waiter acquired after", took)
            assert took < 1.5 + 0.5
            lk.release()
        finally:
            c.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_report_times():
    for what, secs in TIMES:
        print(f"[time] {what}: {secs * 1000:.0f} ms")


def test_aio_watchdog_survives_a_renewal_whose_connection_dies(server, proxy, name):
    """hilock.aio: the connection dies as a renewal is sent (the server never
    sees it). The watchdog must renew on a new connection at its next tick,
    for this hold and for another one renewed in the same batch. Found by
    tests/safety (an acquire that never returned, 4 of 5 aio clients, seed
    21 of single-everysec): the watchdog task died on an UnboundLocalError
    when the first renewal of a batch failed, so no hold was renewed again
    (each expired unreported) and later calls could wait forever."""
    import asyncio

    import hilock.aio as aio

    async def main():
        c = await aio.connect(proxy.url(), watchdog_lease=0.9, command_timeout=0.5,
                              connect_timeout=0.5)
        try:
            a, b = c.lock(name), c.lock(name + ":b")
            lost = []
            a.on_lost = lambda lk, tid: lost.append(lk.name)
            b.on_lost = lambda lk, tid: lost.append(lk.name)
            assert await a.acquire(wait=0)
            assert await b.acquire(wait=0)
            proxy.reset_on_request(name.encode())  # the next renewal batch: reset, unsent
            await asyncio.sleep(0.9 * 3)  # three leases: only renewals keep the holds
            assert proxy.fired("reset-on-request") == 1
            assert server("EXISTS", name) == 1, "the hold was not renewed after the reset"
            assert server("EXISTS", name + ":b") == 1, "the other hold was not renewed either"
            assert await a.owned() and await b.owned()
            assert lost == []
            await a.release()
            await b.release()
        finally:
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 30))

