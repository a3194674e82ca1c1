"""An acquire attempt whose reply is lost and whose settling fails every
try: the grant it may have taken must not outlive the call as a hold of its
owner.

The attempt on "<name>" runs on the server (hold count 1) and the proxy
resets the connection on its reply; each settle request (acquire_settle.lua
on the attempt's latch, told apart from the attempt by the latch key ending
the argument) is held up past the command timeout, so the acquire machine's
tries all fail and the call raises ConnectionError. The same thread then
takes the lock again and releases it once, as the torture workers do: the
owner must hold nothing afterwards. (Before the fix the orphan grant stayed
under the owner: the re-entry made it 2, the release left 1, and the
watchdog renewed that hold for as long as the thread kept re-entering -
test_torture's "still held after its only release".)

The same scenario through hilock.aio (one task, its owner). OpenResty's form
of the rule is test_resty.py's
test_resty_late_grant_after_partition_is_not_kept_by_re_entry.
"""

import time
import uuid

import pytest

import hilock
from conftest import RedisServer
from faultproxy import FaultProxy

TIMEOUT = 0.5


def test_acquire_settle_tries_all_fail_leave_no_hold():
    server = RedisServer()
    proxy = FaultProxy(server.port)
    client = None
    try:
        client = hilock.Client(proxy.url(), connect_timeout=TIMEOUT, command_timeout=TIMEOUT,
                               watchdog_lease=10.0)
        name = "unsettled-%s" % uuid.uuid4().hex[:8]
        owner = client.owner()
        warm = client.lock(name + "-warm")  # the scripts loaded: the attempt runs at once
        assert warm.acquire(wait=0)
        warm.release()
        # the attempt runs, its reply is lost; so is the reply of its one
        # resend (a pooled connection found dead is tried again at once)
        for _ in range(3):
            proxy.reset_on_reply(name.encode())
        # the settle's KEYS[1] is the latch key alone ("...:<epoch>\r\n"); the
        # attempt carries it with ":<seq>" after it
        proxy.delay_frames(("%s}:%s:0\r\n" % (name, owner)).encode(), 3 * TIMEOUT, upstream=True)
        lk = client.lock(name)
        t0 = time.monotonic()
        try:
            lk.acquire(wait=0)
            got = "granted"
        except hilock.ConnectionError as e:
            got = "ConnectionError: %s" % e
        held = server("HGET", name, owner)
        print("[unsettled] first acquire: %s after %.2f s; hold count on the server then: %r"
              % (got, time.monotonic() - t0, held))
        assert got.startswith("ConnectionError"), got
        assert held == "1", held  # the attempt ran: its grant stands for now
        assert proxy.fired("reset-on-reply") >= 2
        proxy.clear()
        del lk
        # the thread goes on: a new handle, one acquire, one release
        lk = client.lock(name)
        assert lk.acquire(wait=5.0)
        after_acquire = server("HGET", name, owner)
        lk.release()
        left = server("HGET", name, owner)
        print("[unsettled] next acquire: hold count %r; after its release: %r"
              % (after_acquire, left))
        assert left is None, "still held (count %r) after its only release" % left
    finally:
        if client is not None:
            client.close()
        proxy.close()
        server.stop()


@pytest.mark.parametrize("later", [0.0, 2.5], ids=["at-once", "past-latch-lifetime"])
def test_aio_acquire_settle_tries_all_fail_leave_no_hold(later):
    """hilock.aio, as the test above, in one task (its owner): the
    attempt's reply is reset, every settle try is held up past the command
    timeout, the call raises ConnectionError with the grant standing; the
    task's next acquire and its one release must leave the owner nothing.
    later: the next acquire comes that many seconds after, 2.5 s being past
    the acquire latch's own lifetime (2 x 0.5 s + 1 s): the settle sent then
    must still find what the attempt took (the latch lives the lease)."""
    import asyncio

    import hilock.aio as aio

    server = RedisServer()
    proxy = FaultProxy(server.port)

    async def main() -> None:
        c = await aio.connect(proxy.url(), connect_timeout=TIMEOUT, command_timeout=TIMEOUT,
                              watchdog_lease=10.0)
        try:
            name = "unsettled-%s" % uuid.uuid4().hex[:8]
            owner = c.owner()
            warm = c.lock("warm-%s" % uuid.uuid4().hex[:8])  # scripts loaded, a pooled connection
            assert await warm.acquire(wait=0)
            await warm.release()
            for _ in range(3):
                proxy.reset_on_reply(name.encode())
            proxy.delay_frames(("%s}:%s:0\r\n" % (name, owner)).encode(), 3 * TIMEOUT,
                               upstream=True)
            t0 = time.monotonic()
            try:
                await c.lock(name).acquire(wait=0)
                got = "granted"
            except hilock.ConnectionError as e:
                got = "ConnectionError: %s" % e
            held = server("HGET", name, owner)
            print("[unsettled, aio] first acquire: %s after %.2f s; hold count on the server "
                  "then: %r" % (got, time.monotonic() - t0, held))
            assert got.startswith("ConnectionError"), got
            assert held == "1", held  # the attempt ran: its grant stands for now
            assert proxy.fired("reset-on-reply") >= 1
            proxy.clear()
            await asyncio.sleep(later)
            lk = c.lock(name)  # the task goes on: a new handle, one acquire, one release
            assert await lk.acquire(wait=5.0)
            after_acquire = server("HGET", name, owner)
            await lk.release()
            left = server("HGET", name, owner)
            print("[unsettled, aio] next acquire (%.1f s later): hold count %r; after its "
                  "release: %r" % (later, after_acquire, left))
            assert left is None, "still held (count %r) after its only release" % left
        finally:
            await c.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        proxy.close()
        server.stop()


def test_aio_stalled_attempt_settle_gives_up_then_settled_before_next_acquire():
    """hilock.aio: the attempt's reply is late (the call fails after the
    command timeout and a settling task waits for the reply on that
    connection), then that connection dies and every new one is refused
    while the settle machine tries them (8 tries over ~3.5 s): it gives up
    with the late grant standing. The task's next acquire must settle it
    first and hold once; while the settle still runs that acquire fails
    ("not settled yet") and is asked again. Before: it re-entered the grant
    (count 2) and its release left 1 for the rest of the 30 s lease."""
    import asyncio

    import hilock.aio as aio

    server = RedisServer()
    proxy = FaultProxy(server.port)

    async def main() -> None:
        c = await aio.connect(proxy.url(), connect_timeout=TIMEOUT, command_timeout=TIMEOUT)
        try:
            name = "unsettled-%s" % uuid.uuid4().hex[:8]
            owner = c.owner()
            warm = c.lock("warm-%s" % uuid.uuid4().hex[:8])  # scripts loaded, a pooled connection
            assert await warm.acquire(wait=0, lease=5)
            await warm.release()
            proxy.latency(down=2.0)  # the attempt's reply waits 2 s in the proxy
            t0 = time.monotonic()
            try:
                await c.lock(name).acquire(wait=0, lease=30)
                got = "granted"
            except hilock.ConnectionError as e:
                got = "ConnectionError: %s" % e
            assert got.startswith("ConnectionError"), got
            assert server("HGET", name, owner) == "1"  # granted on the server, reply late
            await asyncio.sleep(max(0.0, 0.8 - (time.monotonic() - t0)))
            proxy.refuse(True)
            proxy.latency()
            proxy.reset()  # the attempt's connection dies with its reply; no new one is taken
            await asyncio.sleep(4.0)  # the settle machine's reconnect schedule (~3.5 s) runs out
            proxy.clear()
            lk = c.lock(name)
            tries = []
            while True:
                try:
                    ok = await lk.acquire(wait=0, lease=30)
                    tries.append(ok)
                    break
                except hilock.ConnectionError as e:
                    tries.append(str(e))
                    if "not settled yet" not in str(e) or time.monotonic() - t0 > 20:
                        break
                    await asyncio.sleep(0.5)
            count = server("HGET", name, owner)
            await lk.release()
            left = server("HGET", name, owner)
            print("[aio settle gave up] next acquire: %r; hold count %r; after its release: %r"
                  % (tries, count, left))
            assert tries[-1] is True, tries
            assert left is None, "still held (count %r) after its only release" % left
        finally:
            await c.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 40))
    finally:
        proxy.close()
        server.stop()


def test_aio_settle_waiting_for_late_reply_is_handed_over_to_next_acquire():
    """hilock.aio: the attempt's reply is held 3 s by the proxy, so the call
    fails after the command timeout and a settling task waits for the late
    reply on that connection. The task acquires again at once: the settle
    has sent no undo yet (hl_settle_can_hand_over), so the acquire drops it
    with its connection and settles the attempt itself on a new one (the
    grant released under its latch), then takes the lock: hold count 1, and
    nothing left after its one release. Before: the acquire waited a command
    timeout for the settle, then failed ("not settled yet")."""
    import asyncio

    import hilock.aio as aio

    server = RedisServer()
    proxy = FaultProxy(server.port)

    async def main() -> None:
        c = await aio.connect(proxy.url(), connect_timeout=TIMEOUT, command_timeout=TIMEOUT)
        try:
            name = "handover-%s" % uuid.uuid4().hex[:8]
            owner = c.owner()
            warm = c.lock("warm-%s" % uuid.uuid4().hex[:8])  # scripts loaded, a pooled connection
            assert await warm.acquire(wait=0, lease=5)
            await warm.release()
            proxy.late_reply(name.encode(), 3.0)
            t0 = time.monotonic()
            try:
                await c.lock(name).acquire(wait=0, lease=30)
                got = "granted"
            except hilock.ConnectionError as e:
                got = "ConnectionError: %s" % e
            assert got.startswith("ConnectionError"), got
            assert server("HGET", name, owner) == "1"  # granted on the server, reply late
            lk = c.lock(name)
            t1 = time.monotonic()
            try:
                again = repr(await lk.acquire(wait=0, lease=30))
            except hilock.ConnectionError as e:
                again = "ConnectionError: %s" % e
            t2 = time.monotonic()
            count = server("HGET", name, owner)
            if again == "True":
                await lk.release()
            left = server("HGET", name, owner)
            print("[aio hand-over] first acquire failed after %.2f s; the next: %s after "
                  "%.2f s; hold count %r; after its release: %r"
                  % (t1 - t0, again, t2 - t1, count, left))
            assert again == "True", again
            assert count == "1", count
            assert left is None, "still held (count %r) after its only release" % left
            await asyncio.sleep(max(0.0, 3.5 - (time.monotonic() - t0)))
            assert proxy.fired("late-reply-delivered") == 0  # its connection was dropped
            assert server("HGET", name, owner) is None
        finally:
            await c.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        proxy.close()
        server.stop()
