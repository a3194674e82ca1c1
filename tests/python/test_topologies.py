"""The Python package, unchanged, on Redis Cluster and Sentinel URLs.

One 3-master (+3 replicas) cluster built with `redis-cli --cluster create`
and one master + replica + 3 sentinels, each started once for this module on
loopback ports and always stopped (fixture finalizers, conftest's atexit hook,
PR_SET_PDEATHSIG). Lock data is checked on the server that must hold it: the
master owning the name's slot, or the sentinel master and its replica.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import hilock
from conftest import REDIS_SERVER, ClusterNode, RedisServer, RespError, _pdeathsig, wait_for

CLUSTER_ARGS = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "3000"]


def uniq(prefix: str) -> str:
    return f"{prefix}:{uuid.uuid4().hex[:10]}"


def info_field(server: RedisServer, section: str, key: str) -> Optional[str]:
    for line in server("INFO", section).splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1]
    return None


def wait_calls(server: RedisServer) -> int:
    """How many WAIT commands the server has run (INFO commandstats)."""
    v = info_field(server, "commandstats", "cmdstat_wait")
    return 0 if v is None else int(v.split("calls=")[1].split(",")[0])


# ---------------------------------------------------------------- cluster

class Cluster:
    def __init__(self) -> None:
        self.nodes: List[RedisServer] = []
        try:
            self.nodes = [ClusterNode(extra=CLUSTER_ARGS) for _ in range(6)]
            cmd = ["redis-cli", "--cluster", "create",
                   *[f"127.0.0.1:{n.port}" for n in self.nodes],
                   "--cluster-replicas", "1", "--cluster-yes"]
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                           check=True, timeout=30)
            wait_for(lambda: all("cluster_state:ok" in n("CLUSTER", "INFO")
                                 for n in self.nodes), 20, "cluster_state:ok on every node")
            self.by_port = {n.port: n for n in self.nodes}
            self.slots: List[Tuple[int, int, int]] = []
            for lo, hi, master, *_ in self.nodes[0]("CLUSTER", "SLOTS"):
                self.slots.append((int(lo), int(hi), int(master[1])))
            self.masters = sorted({self.by_port[p] for _, _, p in self.slots},
                                  key=lambda n: n.port)
            assert len(self.masters) == 3

            def replicas_online() -> bool:
                return all(info_field(m, "replication", "connected_slaves") == "1"
                           and "state=online" in (info_field(m, "replication", "slave0") or "")
                           for m in self.masters)
            wait_for(replicas_online, 20, "every master's replica online")
        except BaseException:
            self.stop()
            raise
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:2])

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def master_of(self, key: str) -> RedisServer:
        slot = int(self.nodes[0]("CLUSTER", "KEYSLOT", key))
        for lo, hi, port in self.slots:
            if lo <= slot <= hi:
                return self.by_port[port]
        raise AssertionError(f"no master for slot {slot}")

    def names_on_every_master(self, prefix: str) -> List[str]:
        """One fresh lock name per master, in master order."""
        found: Dict[int, str] = {}
        while len(found) < len(self.masters):
            n = uniq(prefix)
            found.setdefault(self.master_of(n).port, n)
        return [found[m.port] for m in self.masters]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture
def cclient(cluster: Cluster) -> Iterator[hilock.Client]:
    c = hilock.Client(cluster.url)
    yield c
    c.close()


@pytest.mark.parametrize("kind", ["lock", "fair_lock"])
def test_cluster_names_spread_over_masters(cluster: Cluster, cclient: hilock.Client,
                                           kind: str) -> None:
    names = [uniq(f"spread-{kind}") for _ in range(48)]
    locks = [getattr(cclient, kind)(n) for n in names]
    owner = cclient.owner()
    used = set()
    for n, lk in zip(names, locks):
        assert lk.acquire(wait=0, lease=20)
        m = cluster.master_of(n)
        used.add(m.port)
        assert m("HGET", n, owner) == "1", f"{n} not on the master of its slot"
        assert 0 < int(m("PTTL", n)) <= 20000
        assert lk.owned() and lk.locked() and lk.hold_count == 1
        assert lk.acquire(wait=0, lease=20)  # re-enter, same node
        assert m("HGET", n, owner) == "2"
    assert used == {m.port for m in cluster.masters}, "names did not reach every master"
    for n, lk in zip(names, locks):
        lk.release()
        lk.release()
        assert not lk.locked()
        assert cluster.master_of(n)("EXISTS", n) == 0


COUNTER_CHILD = textwrap.dedent("""
    import sys, threading, hilock
    from redis.cluster import RedisCluster
    url, name, kind, key, seed, n = sys.argv[1:7]
    c = hilock.Client(url)
    def work():
        r = RedisCluster(host="127.0.0.1", port=int(seed))
        lk = getattr(c, kind)(name)
        for _ in range(int(n)):
            assert lk.acquire(wait=30, lease=10)
            v = int(r.get(key) or 0)
            r.set(key, v + 1)
            lk.release()
        r.close()
    ts = [threading.Thread(target=work) for _ in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    c.close()
    print("done")
""")


@pytest.mark.parametrize("kind,iters", [("lock", 40), ("fair_lock", 20)])
def test_cluster_counter_threads_and_processes(cluster: Cluster, kind: str, iters: int) -> None:
    from redis.cluster import RedisCluster

    name = uniq(f"ctr-{kind}")
    key = "{" + name + "}:n"  # same hash tag as the lock: same slot, same master
    assert cluster.master_of(key).port == cluster.master_of(name).port
    seed = cluster.nodes[0].port
    procs = [subprocess.Popen([sys.executable, "-c", COUNTER_CHILD, cluster.url, name, kind, key,
                               str(seed), str(iters)], stdout=subprocess.PIPE, text=True,
                              preexec_fn=_pdeathsig) for _ in range(2)]
    clients = [hilock.Client(cluster.url) for _ in range(2)]
    errors: List[BaseException] = []

    def work(c: hilock.Client) -> None:
        try:
            r = RedisCluster(host="127.0.0.1", port=seed)
            lk = getattr(c, kind)(name)
            for _ in range(iters):
                assert lk.acquire(wait=30, lease=10)
                v = int(r.get(key) or 0)
                time.sleep(0)  # let another thread run inside the critical section
                r.set(key, v + 1)
                lk.release()
            r.close()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(clients[i % 2],)) for i in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        outs = [p.communicate(timeout=60)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for c in clients:
            c.close()
    assert not errors, errors
    assert [p.returncode for p in procs] == [0, 0]
    assert all(o.strip() == "done" for o in outs)
    m = cluster.master_of(name)
    assert int(m("GET", key)) == (4 + 2 * 2) * iters
    assert m("EXISTS", name) == 0


def shard_subscribers(server: RedisServer, channel: str) -> int:
    return int(server("PUBSUB", "SHARDNUMSUB", channel)[1])


@pytest.mark.parametrize("kind", ["lock", "fair_lock"])
def test_cluster_waiter_woken_by_sharded_unlock(cluster: Cluster, kind: str) -> None:
    name = uniq(f"wake-{kind}")
    m = cluster.master_of(name)
    holder_c, waiter_c = hilock.Client(cluster.url), hilock.Client(cluster.url)
    try:
        holder = getattr(holder_c, kind)(name)
        assert holder.acquire(wait=0, lease=30)
        res: Dict[str, Any] = {}
        started = threading.Event()

        def waiter() -> None:
            res["tid"] = hilock.thread_id()
            started.set()
            res["ok"] = getattr(waiter_c, kind)(name).acquire(wait=10, lease=10)
            res["at"] = time.monotonic()

        t = threading.Thread(target=waiter)
        t0 = time.monotonic()
        t.start()
        started.wait(5)
        # the waiter listens with SSUBSCRIBE on the master of the lock's slot;
        # on a plain lock's channel the holder's client listens too (a hold
        # observes its lock's channel for a force unlock), so the waiter is
        # the second subscriber there; a fair waiter has a channel of its own
        channel = "redisson_lock__channel:{" + name + "}"
        want = 2
        if kind == "fair_lock":
            channel += ":" + waiter_c.owner(res["tid"])
            want = 1
        wait_for(lambda: shard_subscribers(m, channel) >= want, 5, f"SSUBSCRIBE {channel}")
        time.sleep(max(0.0, 0.2 - (time.monotonic() - t0)))  # hold for 0.2 s at least
        assert t.is_alive() and "ok" not in res
        released = time.monotonic()
        holder.release()
        t.join(10)
        assert res.get("ok") is True
        # the lease was 30 s: only the unlock's SPUBLISH can wake it this soon
        assert 0 <= res["at"] - released < 2.0, res["at"] - released
        assert m("HGET", name, waiter_c.owner(res["tid"])) == "1"
        getattr(waiter_c, kind)(name, thread_id=res["tid"]).release()
        assert m("EXISTS", name) == 0
    finally:
        holder_c.close()
        waiter_c.close()


def test_cluster_multilock_across_masters(cluster: Cluster, cclient: hilock.Client) -> None:
    names = cluster.names_on_every_master("ml")
    masters = [cluster.master_of(n) for n in names]
    assert len({m.port for m in masters}) == 3
    other = hilock.Client(cluster.url)
    try:
        ml = hilock.MultiLock([cclient.lock(names[0]), cclient.fair_lock(names[1]),
                               cclient.lock(names[2])])
        assert ml.acquire(wait=1, lease=None)  # watchdog lease
        owner = cclient.owner()
        for n, m in zip(names, masters):
            assert m("HGET", n, owner) == "1"
            assert 0 < int(m("PTTL", n)) <= 30000
        rival = hilock.MultiLock([other.lock(n) for n in names])
        assert rival.acquire(wait=0.3, lease=5) is False
        assert all(m("HLEN", n) == 1 for n, m in zip(names, masters))
        ml.release()
        assert all(m("EXISTS", n) == 0 for n, m in zip(names, masters))

        # all or nothing: one member held elsewhere -> nothing left behind
        single = other.lock(names[1])
        assert single.acquire(wait=0, lease=10)
        assert ml.acquire(wait=0.3, lease=10) is False
        assert masters[0]("EXISTS", names[0]) == 0 and masters[2]("EXISTS", names[2]) == 0
        single.release()
        assert rival.acquire(wait=2, lease=10)
        rival.release()
        assert all(m("EXISTS", n) == 0 for n, m in zip(names, masters))
    finally:
        other.close()


def test_aio_cluster_masters_watchdog_multilock(cluster: Cluster) -> None:
    """hilock.aio on a cluster URL: each lock goes to its slot's master, the
    watchdog renews holds on every master, a waiter on another master is
    woken by the sharded unlock, a multi-lock spans the masters (all or
    nothing against a rival client)."""
    import asyncio
    import time
    import hilock.aio as aio

    names = cluster.names_on_every_master("aio-cl")
    masters = [cluster.master_of(n) for n in names]

    async def main() -> None:
        async with aio.Client(cluster.url, watchdog_lease=1.5) as c, \
                aio.Client(cluster.url) as other:
            locks = [c.lock(n) for n in names]
            for lk, n, m in zip(locks, names, masters):
                assert await lk.acquire(wait=0)  # watchdog lease
                assert m("HGET", n, c.owner()) == "1"
                assert await lk.hold_count() == 1 and await lk.locked()
            await asyncio.sleep(1.8)  # past the 1.5 s lease: renewed on every master
            for lk, n, m in zip(locks, names, masters):
                assert 0 < int(m("PTTL", n)) <= 1500
                await lk.release()
                assert m("EXISTS", n) == 0

            # a waiter on the last master, woken by the sharded message
            held, waiter = c.lock(names[2], thread_id=1), c.lock(names[2], thread_id=2)
            assert await held.acquire(wait=0, lease=20)
            w = asyncio.create_task(waiter.acquire(wait=10, lease=10))
            await asyncio.sleep(0.2)
            t0 = time.monotonic()
            await held.release()
            assert await w
            assert time.monotonic() - t0 < 1.0  # the message, not the 20 s lease
            assert await waiter.force_unlock()

            ml = aio.MultiLock([c.lock(names[0]), c.fair_lock(names[1]), c.lock(names[2])])
            rival = aio.MultiLock([other.lock(n) for n in names])
            assert await ml.acquire(wait=1, lease=10)
            assert all(m("HLEN", n) == 1 for n, m in zip(names, masters))
            assert await rival.acquire(wait=0.3, lease=10) is False
            assert all(m("HLEN", n) == 1 for n, m in zip(names, masters))
            # the refused members' connections (kept for the replica ack,
            # on by default on a cluster) went back to their pools
            for p in other._pools.values():
                assert p.nopen == len(p.idle), f"{p.addr}: {p.nopen} open, {len(p.idle)} idle"
            await ml.release()
            assert await rival.acquire(wait=1, lease=10)
            await rival.release()
            assert all(m("EXISTS", n) == 0 for n, m in zip(names, masters))

    asyncio.run(main())


def test_aio_cluster_semaphore_latch(cluster: Cluster) -> None:
    """hilock.aio semaphores on a cluster URL: each object's keys on its
    slot's master, a waiter on every master woken by the sharded release
    message, a latch opened by the sharded count-down, a name whose keys
    would span slots refused."""
    import asyncio
    import time
    import hilock.aio as aio

    names = cluster.names_on_every_master("aio-sem")
    masters = [cluster.master_of(n) for n in names]

    async def main() -> None:
        async with aio.Client(cluster.url) as c, aio.Client(cluster.url) as other:
            for n, m in zip(names, masters):
                sem = c.semaphore(n)
                assert await sem.try_set_permits(1) and await sem.acquire(1, wait=0)
                assert m("GET", n) == "0"
                w = asyncio.create_task(other.semaphore(n).acquire(1, wait=10))
                await asyncio.sleep(0.2)
                t0 = time.monotonic()
                await sem.release(1)
                assert await w and time.monotonic() - t0 < 1.0  # the sharded message
                assert await sem.delete() and m("EXISTS", n) == 0
            latch = c.count_down_latch(names[1])
            assert await latch.try_set_count(1)
            w = asyncio.create_task(other.count_down_latch(names[1]).wait(10))
            await asyncio.sleep(0.2)
            t0 = time.monotonic()
            assert await latch.count_down() == 0
            assert await w and time.monotonic() - t0 < 1.0
            with pytest.raises(hilock.InvalidArgument):
                c.semaphore("open{brace")

    asyncio.run(main())


def _cluster_failover(cluster: Cluster, to: RedisServer, was: RedisServer,
                      *how: str) -> None:
    """CLUSTER FAILOVER [how] on replica `to` of master `was`; returns once
    every node names `to` the master and `was` replicates from it, online."""
    to("CLUSTER", "FAILOVER", *how)

    def done() -> bool:
        return (to("ROLE")[0] == "master" and was("ROLE")[0] == "slave"
                and was("ROLE")[3] == "connected"
                and info_field(to, "replication", "connected_slaves") == "1"
                and "state=online" in (info_field(to, "replication", "slave0") or "")
                and all(any(int(m[1]) == to.port for _lo, _hi, m, *_ in n("CLUSTER", "SLOTS"))
                        for n in cluster.nodes))
    wait_for(done, 20, f"{to.port} took over from {was.port}")


def test_aio_cluster_failover_moves_hold_and_waiter(cluster: Cluster) -> None:
    """hilock.aio across a cluster failover (CLUSTER FAILOVER on the
    replica, then back): the hold is found on the new master (MOVED from the
    demoted one), the waiter's sharded subscription, dropped by the demoted
    master, is made again on the new one, and the release wakes it at once.
    The module's cluster is restored to its first masters afterwards."""
    import asyncio
    import hilock.aio as aio

    name = cluster.names_on_every_master("aio-fo")[0]
    old = cluster.master_of(name)
    new = next(n for n in cluster.nodes if n.port != old.port and n("ROLE")[0] == "slave"
               and int(n("ROLE")[2]) == old.port)
    chan = f"redisson_lock__channel:{{{name}}}"

    async def main() -> None:
        async with aio.Client(cluster.url) as a, aio.Client(cluster.url) as b:
            assert await a.lock(name).acquire(wait=0, lease=30)
            w = asyncio.create_task(b.lock(name, thread_id=7).acquire(wait=20, lease=10))
            deadline = time.monotonic() + 5
            # the holder listens on its lock's channel too (hold_channel)
            while old("PUBSUB", "SHARDNUMSUB", chan)[1] != 2:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            await asyncio.get_running_loop().run_in_executor(
                None, _cluster_failover, cluster, new, old)
            deadline = time.monotonic() + 5
            while new("PUBSUB", "SHARDNUMSUB", chan)[1] != 2:  # listening again
                assert time.monotonic() < deadline, "waiter and holder did not subscribe again"
                await asyncio.sleep(0.02)
            assert await a.lock(name).hold_count() == 1
            t0 = time.monotonic()
            await a.lock(name).release()
            assert await w
            assert time.monotonic() - t0 < 1.0  # the message, not the 30 s lease
            assert new("HGET", name, b.owner(7)) == "1"
            await b.lock(name, thread_id=7).release()
            assert new("EXISTS", name) == 0
            # the demoted master is in neither client's slot map now: its
            # pool is closed and forgotten (before: kept, connections open)
            gone = ("127.0.0.1", old.port)
            assert gone not in a._pools and gone not in b._pools
            import gc
            assert not [x for x in gc.get_objects() if isinstance(x, aio._Conn)
                        and not x.closed and x.pool is not None and x.pool.addr == gone]

    try:
        asyncio.run(main())
    finally:
        if new("ROLE")[0] == "master":
            # back at once: TAKEOVER (the masters vote for one failover of a
            # master per 2 x node timeout; nothing is written meanwhile)
            _cluster_failover(cluster, old, new, "TAKEOVER")


# ---------------------------------------------------------------- sentinel

class Sentinel(RedisServer):
    def __init__(self, master_port: int) -> None:
        self.master_port = master_port
        super().__init__()

    @property
    def url(self) -> str:
        raise AttributeError("a sentinel has no lock URL of its own")

    def start(self) -> None:
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
                    f"sentinel monitor hm 127.0.0.1 {self.master_port} 2\n"
                    "sentinel down-after-milliseconds hm 1000\n"
                    "sentinel failover-timeout hm 5000\n")
        self.proc = subprocess.Popen([REDIS_SERVER, conf, "--sentinel"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=_pdeathsig)

        def answers() -> bool:
            assert self.proc is not None and self.proc.poll() is None, "sentinel exited"
            try:
                return self("PING") == "PONG"
            except (OSError, RespError):
                return False
        wait_for(answers, 10, "sentinel PING", step=0.02)

    def replica_ready(self) -> bool:
        """The sentinel knows the replica from the replica's own INFO: a
        replica only listed in the master's INFO cannot be promoted yet
        (SENTINEL FAILOVER answers NOGOODSLAVE)."""
        rs = self("SENTINEL", "replicas", "hm")
        if len(rs) != 1:
            return False
        f = dict(zip(rs[0][::2], rs[0][1::2]))
        return (f.get("flags") == "slave" and f.get("master-link-status") == "ok"
                and bool(f.get("runid")))

    def master_port_seen(self) -> int:
        return int(self("SENTINEL", "get-master-addr-by-name", "hm")[1])


class SentinelSet:
    def __init__(self) -> None:
        self.master: Optional[RedisServer] = None
        self.replica: Optional[RedisServer] = None
        self.sentinels: List[Sentinel] = []
        try:
            self.master = RedisServer()
            self.replica = RedisServer(extra=["--replicaof", "127.0.0.1", str(self.master.port)])
            wait_for(lambda: info_field(self.replica, "replication",  # type: ignore[arg-type]
                                        "master_link_status") == "up", 10, "replica linked")
            self.sentinels = [Sentinel(self.master.port) for _ in range(3)]
            wait_for(lambda: all(s.replica_ready() for s in self.sentinels), 15,
                     "every sentinel has the replica's INFO (it can promote it)", step=0.05)
        except BaseException:
            self.stop()
            raise
        self.url = "redis+sentinel://" + ",".join(f"127.0.0.1:{s.port}"
                                                  for s in self.sentinels) + "/hm"

    def stop(self) -> None:
        for s in [*self.sentinels, self.replica, self.master]:
            if s is not None:
                # SIGKILL: after the failover a SIGTERMed master would wait up
                # to shutdown-timeout (10 s) for its resyncing replica
                s.kill9()
                s.stop()


@pytest.fixture(scope="module")
def sentinel() -> Iterator[SentinelSet]:
    s = SentinelSet()
    yield s
    s.stop()


@pytest.mark.parametrize("kind", ["lock", "fair_lock"])
def test_sentinel_lock_unlock(sentinel: SentinelSet, kind: str) -> None:
    master = sentinel.master
    assert master is not None
    name = uniq(f"sent-{kind}")
    with hilock.Client(sentinel.url, connect_timeout=0.5) as c:
        lk = getattr(c, kind)(name)
        with lk:
            assert master("HGET", name, c.owner()) == "1"
            assert lk.owned() and lk.hold_count == 1
        assert master("EXISTS", name) == 0
        assert lk.acquire(wait=0, lease=5)
        assert 0 < lk.ttl <= 5  # type: ignore[operator]
        assert c.lock(name, thread_id=12345).acquire(wait=0) is False
        with pytest.raises(hilock.NotOwnerError):
            c.lock(name, thread_id=12345).release()
        lk.release()
        assert not lk.locked()


def test_sentinel_replica_ack(sentinel: SentinelSet) -> None:
    master, replica = sentinel.master, sentinel.replica
    assert master is not None and replica is not None
    name = uniq("acked")
    with hilock.Client(sentinel.url, connect_timeout=0.5) as c:  # replica_ack on by default
        lk = c.lock(name)
        owner = c.owner()
        waits = wait_calls(master)
        for _ in range(10):
            assert lk.acquire(wait=5, lease=10)
            # read from the replica at once, no polling: WAIT already returned
            assert replica("HGET", name, owner) == "1"
            lk.release()
            assert replica("EXISTS", name) == 0
        assert wait_calls(master) >= waits + 20
    with hilock.Client(sentinel.url, connect_timeout=0.5, replica_ack=False) as c:
        waits = wait_calls(master)
        lk = c.lock(name)
        assert lk.acquire(wait=5, lease=10)
        lk.release()
        assert wait_calls(master) == waits


def test_aio_sentinel_master_and_replica_ack(sentinel: SentinelSet) -> None:
    """hilock.aio on a sentinel URL: the master is asked of the sentinels,
    a grant is acknowledged by the replica before acquire returns (WAIT on
    the granting connection), and a waiter is woken by the unlock."""
    import asyncio
    import hilock.aio as aio

    master, replica = sentinel.master, sentinel.replica
    assert master is not None and replica is not None
    name = uniq("aio-sent")

    async def main() -> None:
        async with aio.Client(sentinel.url, connect_timeout=0.5) as c:  # replica_ack on
            lk = c.lock(name)
            waits = wait_calls(master)
            for _ in range(5):
                assert await lk.acquire(wait=5, lease=10)
                assert replica("HGET", name, c.owner()) == "1"  # no polling: WAIT returned
                await lk.release()
            assert wait_calls(master) >= waits + 5
            assert await lk.acquire(0, lease=10)
            w = asyncio.create_task(c.lock(name).acquire(wait=5, lease=10))
            await asyncio.sleep(0.2)
            await lk.release()
            assert await w
        async with aio.Client(sentinel.url, connect_timeout=0.5, replica_ack=False) as c:
            waits = wait_calls(master)
            assert await c.lock(name + ":n").acquire(0, lease=10)
            await c.lock(name + ":n").release()
            assert wait_calls(master) == waits

    asyncio.run(main())


class StaleSentinel:
    """A sentinel that missed a failover: it names a replica as the master
    (SENTINEL get-master-addr-by-name answers its address) and says +PONG
    or +OK to anything else. A real one can stay so while it is cut off
    from the others; the safety suite's sentinel-kill-master met one."""

    def __init__(self, port: int) -> None:
        self.named = port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.asked = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        f = conn.makefile("rb")
        try:
            while True:
                head = f.readline()
                if not head.startswith(b"*"):
                    return
                args = []
                for _ in range(int(head[1:])):
                    n = int(f.readline()[1:])
                    args.append(f.read(n + 2)[:-2])
                cmd = [a.lower() for a in args[:2]]
                if cmd == [b"sentinel", b"get-master-addr-by-name"]:
                    self.asked += 1
                    port = str(self.named).encode()
                    conn.sendall(b"*2\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n" % (len(port), port))
                elif cmd[:1] == [b"ping"]:
                    conn.sendall(b"+PONG\r\n")
                else:
                    conn.sendall(b"+OK\r\n")
        except (OSError, ValueError):
            pass
        finally:
            f.close()
            conn.close()

    def close(self) -> None:
        self.sock.close()


def test_sentinel_behind_names_a_replica(sentinel: SentinelSet) -> None:
    """The first sentinel of the URL names the replica (it missed a
    failover): the blocking client and hilock.aio both check the role of
    what a sentinel names (ROLE) and ask the next sentinel, so they take
    the lock on the master. Before, hilock.aio took the first answer every
    time: each acquire failed once the replica's READONLY had sent it back
    to the same sentinel 20 times ('127.0.0.1:<replica> answered
    "READONLY You can't write against a read only replica..."')."""
    import asyncio
    import hilock.aio as aio

    master, replica = sentinel.master, sentinel.replica
    assert master is not None and replica is not None
    stale = StaleSentinel(replica.port)
    url = (f"redis+sentinel://127.0.0.1:{stale.port},"
           + ",".join(f"127.0.0.1:{s.port}" for s in sentinel.sentinels) + "/hm")
    name = uniq("stale-sentinel")
    try:
        with hilock.Client(url, connect_timeout=0.5) as c:
            lk = c.lock(name)
            assert lk.acquire(wait=2, lease=10)
            assert master("HGET", name, c.owner()) == "1"
            lk.release()

        async def main() -> None:
            async with aio.Client(url, connect_timeout=0.5, command_timeout=1.0) as c:
                lk = c.lock(name, thread_id=7)  # one owner, also inside wait_for's task
                for _ in range(3):
                    assert await asyncio.wait_for(lk.acquire(wait=2, lease=10), 20)
                    assert master("HGET", name, c.owner(7)) == "1"
                    await lk.release()
                assert master("EXISTS", name) == 0

        asked = stale.asked
        asyncio.run(main())
        assert stale.asked > asked  # it was asked, and its answer checked
    finally:
        stale.close()


def test_sentinel_failover_while_held_and_waited_on(sentinel: SentinelSet) -> None:
    """Last sentinel test: it swaps master and replica for good."""
    old, new = sentinel.master, sentinel.replica
    assert old is not None and new is not None
    name = uniq("failover")
    a = hilock.Client(sentinel.url, connect_timeout=0.5, watchdog_lease=6.0)
    b = hilock.Client(sentinel.url, connect_timeout=0.5)
    try:
        la = a.lock(name)
        assert la.acquire(wait=0, lease=None)  # watchdog, 6 s lease renewed every 2 s
        res: Dict[str, Any] = {}

        def waiter() -> None:
            res["tid"] = hilock.thread_id()
            try:
                res["ok"] = b.lock(name).acquire(wait=30, lease=5)
            except BaseException as e:  # reported below
                res["err"] = e
            res["at"] = time.monotonic()

        t = threading.Thread(target=waiter)
        t.start()
        assert sentinel.sentinels[0]("SENTINEL", "FAILOVER", "hm") == "OK"
        wait_for(lambda: sentinel.sentinels[0].master_port_seen() == new.port, 20,
                 "sentinel names the replica as master", step=0.05)
        # still A's, on the new master, and A's watchdog renews it there
        assert new("HGET", name, a.owner()) == "1"
        floor = int(new("PTTL", name))
        assert floor > 0
        wait_for(lambda: int(new("PTTL", name)) > floor, 6.0 / 3 + 1.5,
                 "a renewal on the new master")
        assert t.is_alive() and "ok" not in res, res
        assert la.owned() and not la.lost
        released = time.monotonic()
        la.release()
        t.join(35)
        assert "err" not in res, res.get("err")
        assert res.get("ok") is True
        assert res["at"] >= released
        # B's hold lives on the new master
        assert new("HGETALL", name) == [b.owner(res["tid"]), "1"]
        b.lock(name, thread_id=res["tid"]).release()
        assert new("EXISTS", name) == 0
    finally:
        a.close()
        b.close()


def test_aio_waiter_follows_a_failover() -> None:
    """hilock.aio hears a failover from the sentinels' +switch-master, as
    libcore and OpenResty do: a waiter listening on the old master listens
    again on the new one at once and is woken there by the unlock. The old
    master takes no part (the sentinels demote it seconds later, and until
    then it publishes nothing of the new master's). hilock.aio used to learn
    of a failover only when one of its calls asked the sentinels (at most
    once a second): with no call of its own in flight, this waiter heard
    nothing until the sentinels demoted the old master (~10 s), and a
    watchdog hold's renewals went on to the old master for up to a second
    (conformance sentinel-failover: the asyncio holder was told lost in 1
    run of 4-6)."""
    import asyncio
    import hilock.aio as aio

    s = SentinelSet()
    b = hilock.Client(s.url, connect_timeout=0.5, replica_ack=False)
    try:
        old, new = s.master, s.replica
        assert old is not None and new is not None
        name = uniq("aio-switch")
        lb = b.lock(name)
        assert lb.acquire(wait=0)  # watchdog: 30 s lease, never ends on its own here
        lb = b.lock(name, thread_id=hilock.thread_id())  # released from another thread

        async def main() -> float:
            loop = asyncio.get_running_loop()
            async with aio.Client(s.url, connect_timeout=0.5, replica_ack=False) as c:
                w = asyncio.create_task(c.lock(name).acquire(wait=20, lease=10))
                t0 = loop.time()
                chan = "redisson_lock__channel:{%s}" % name
                while int(old("PUBSUB", "NUMSUB", chan)[1]) == 0:  # listening on the old master
                    assert loop.time() - t0 < 5, "the waiter did not subscribe"
                    await asyncio.sleep(0.02)
                assert s.sentinels[0]("SENTINEL", "FAILOVER", "hm") == "OK"
                while not all(x.master_port_seen() == new.port for x in s.sentinels):
                    assert loop.time() - t0 < 25, "the sentinels did not all name the replica"
                    await asyncio.sleep(0.05)
                released = loop.time()
                await loop.run_in_executor(None, lb.release)  # on the new master
                assert await w
                return loop.time() - released

        took = asyncio.run(main())
        # with no +switch-master it took until the old master was demoted
        assert took < 5, f"the waiter was granted {took:.1f} s after the unlock"
    finally:
        b.close()
        s.stop()


@pytest.mark.parametrize("driver", ["blocking", "aio"])
def test_silent_sentinel_watch_is_given_up(driver: str) -> None:
    """The sentinel a client watches for +switch-master answers the
    SUBSCRIBE and then never a word again (a sentinel, or a load balancer in
    front of it, that keeps the connection open: the fault proxy's
    mute_subscribers_after_reply), DESIGN.md §6 "accepted and never answers"
    on the watch connection. The watch must find that out with the
    session's subscription liveness rule (a PING, unanswered in time: the
    next sentinel watched) and follow a failover: a waiter listening on the
    old master is woken on the new one by an unlock there. A deaf watch
    heard nothing and the waiter was only woken once the sentinels had
    demoted the old master (blocking client (libcore's watcher) and
    hilock.aio)."""
    import asyncio
    import hilock.aio as aio
    sys.path.insert(0, os.path.join(os.environ.get("HILOCK_ROOT", "."), "tests", "faults"))
    from faultproxy import FaultProxy

    s = SentinelSet()
    proxy = FaultProxy(s.sentinels[0].port)
    proxy.mute_subscribers_after_reply(True)
    # the proxy first: the watch starts there (every driver watches seed 0 first)
    url = ("redis+sentinel://" + ",".join([f"127.0.0.1:{proxy.port}"] +
                                          [f"127.0.0.1:{x.port}" for x in s.sentinels[1:]]) + "/hm")
    b = hilock.Client(s.url, connect_timeout=0.5, replica_ack=False)
    try:
        old, new = s.master, s.replica
        assert old is not None and new is not None
        name = uniq("silent-watch")
        chan = "redisson_lock__channel:{%s}" % name
        assert b.lock(name).acquire(wait=0)  # watchdog: 30 s lease, never ends on its own here

        def failover_then_release() -> float:
            t0 = time.monotonic()
            while int(old("PUBSUB", "NUMSUB", chan)[1]) == 0:  # listening on the old master
                assert time.monotonic() - t0 < 5, "the waiter did not subscribe"
                time.sleep(0.02)
            # the watch subscribed through the proxy (then muted there)
            wait_for(lambda: any(x.drop_down for x in proxy.subscribers()), 5,
                     "the watch subscribed on the proxied sentinel")
            assert s.sentinels[0]("SENTINEL", "FAILOVER", "hm") == "OK"
            while not all(x.master_port_seen() == new.port for x in s.sentinels):
                assert time.monotonic() - t0 < 25, "the sentinels did not all name the replica"
                time.sleep(0.05)
            # the unlock on the new master, by a client that asks the sentinels now
            with hilock.Client(s.url, connect_timeout=0.5, replica_ack=False) as d:
                t = time.monotonic()
                assert d.lock(name).force_unlock()
            return t

        if driver == "blocking":
            c = hilock.Client(url, connect_timeout=0.5, replica_ack=False)
            try:
                got: List[Any] = []
                th = threading.Thread(target=lambda: got.append(
                    (c.lock(name).acquire(wait=25, lease=10), time.monotonic())))
                th.start()
                released = failover_then_release()
                th.join(30)
                assert got and got[0][0], "the waiter was not granted"
                took = got[0][1] - released
            finally:
                c.close()
        else:
            async def main() -> float:
                loop = asyncio.get_running_loop()
                async with aio.Client(url, connect_timeout=0.5, replica_ack=False) as c:
                    w = asyncio.create_task(c.lock(name).acquire(wait=25, lease=10))
                    released = await loop.run_in_executor(None, failover_then_release)
                    assert await w
                    return time.monotonic() - released
            took = asyncio.run(main())
        print(f"{driver}: waiter granted {took:.2f} s after the unlock on the new master")
        # the watch deaf: until the sentinels demoted the old master
        assert took < 5, f"the waiter was granted {took:.1f} s after the unlock"
    finally:
        b.close()
        proxy.close()
        s.stop()
