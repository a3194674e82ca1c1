"""Client.stats() and the "hilock" logger against a real redis-server: after
a scripted sequence (2 grants, 1 timeout, 1 cancel, 1 hold removed by
another client's force unlock, 1 hold reported in doubt while the server is
stopped) every counter has its exact value, and the loss and the in-doubt
report were logged at WARNING, and hilock.prometheus carries the same
figures, rendered as text and scraped over HTTP from a real prometheus_client
exporter. Every wait is for a state seen on the server or in the counters,
never a bare sleep."""
import logging
import signal
import threading
import urllib.request
from typing import Any, Dict, FrozenSet, List, Tuple

import pytest

import hilock
import hilock.prometheus
from conftest import RedisServer, free_port, wait_for

LEASE = 1.5  # the in-doubt report comes 1.2 s into a silence


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: List[logging.LogRecord] = []
        self.mu = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self.mu:
            self.records.append(record)

    def warnings(self, text: str) -> List[str]:
        with self.mu:
            return [r.getMessage() for r in self.records
                    if r.levelno == logging.WARNING and text in r.getMessage()]


def test_scripted_sequence_exact_counters_and_logs(own_redis: RedisServer) -> None:
    rec = _Records()
    log = logging.getLogger("hilock")
    log.addHandler(rec)
    old = signal.signal(signal.SIGUSR1, _raise_stop)
    c = hilock.Client(own_redis.url, watchdog_lease=LEASE, command_timeout=LEASE / 3)
    other = hilock.Client(own_redis.url)
    try:
        s = c.stats()
        assert s["version"] == 1 and s["kinds"]["reentrant"]["granted"] == 0
        b, b2, d = c.lock("stats:b"), other.lock("stats:b"), c.lock("stats:d")
        # The watchdog counts a loss (and logs it) before it ends the hold
        # (hold_ms); on_lost runs after both: wait for it before reading.
        lost_calls: List[str] = []
        b.on_lost = d.on_lost = lambda lk, tid: lost_calls.append(lk.name)

        # 1 timeout, 1 try (busy) and 1 cancel while the other client holds stats:b
        assert b2.acquire(wait=0, lease=60)
        assert not b.acquire(wait=0.1)
        assert not b.acquire(wait=0)  # a try: busy
        channel = "redisson_lock__channel:{stats:b}"
        main = threading.main_thread().ident
        assert main is not None

        def interrupt_when_waiting() -> None:
            # the other client listens there as b2's holder: the waiter is the second
            wait_for(lambda: own_redis("PUBSUB", "NUMSUB", channel)[1] >= 2, 5, "waiter subscribed")
            signal.pthread_kill(main, signal.SIGUSR1)

        t = threading.Thread(target=interrupt_when_waiting)
        t.start()
        with pytest.raises(_Stop):
            b.acquire()  # waits until interrupted; the acquire is cancelled
        t.join()
        b2.release()

        # grant 1 (watchdog), removed by the other client's force unlock
        assert b.acquire(wait=0)
        assert b2.force_unlock()
        wait_for(lambda: c.stats()["kinds"]["reentrant"]["lost_gone"] == 1, 4 * LEASE,
                 "loss found by the watchdog")

        # grant 2 (watchdog), then the server stops: reported in doubt
        assert d.acquire(wait=0)
        own_redis.pause()
        try:
            wait_for(lambda: c.stats()["kinds"]["reentrant"]["lost_in_doubt"] == 1, 4 * LEASE,
                     "in-doubt report")
            wait_for(lambda: len(lost_calls) == 2, 4 * LEASE, "both on_lost callbacks")
            s = c.stats()  # while stopped: no renewal can find the hold gone yet
            scraped = _scrape(c) if _have("prometheus_client") else None
        finally:
            own_redis.resume()

        assert sorted(lost_calls) == ["stats:b", "stats:d"]
        k = s["kinds"]["reentrant"]
        assert (k["granted"], k["timed_out"], k["cancelled"], k["busy"]) == (2, 1, 1, 1)
        assert (k["granted_first_try"], k["granted_woken"], k["granted_retried"]) == (2, 0, 0)
        assert sum(k["wait_ms"]) == 4
        assert sum(k["wait_ms"][7:]) >= 1  # the 100 ms timeout: bucket [64, 128) ms or later
        assert (k["lost_gone"], k["lost_expired"], k["lost_in_doubt"]) == (1, 0, 1)
        assert sum(k["hold_ms"]) == 2
        assert (s["settles"], s["redirects"], s["replica_ack_failures"]) == (0, 0, 0)
        assert s["renewal_commands"] >= 1
        for kind, figures in s["kinds"].items():
            if kind != "reentrant":
                assert figures["granted"] + figures["timed_out"] + figures["cancelled"] == 0

        # the same figures in Prometheus's form: rendered, and scraped from an exporter
        if scraped is not None:
            _check_metrics(_parse(hilock.prometheus.render(s)), s, exact=True)
            _check_metrics(scraped, s, exact=False)  # read a moment later: renewals may move
        if _have("opentelemetry.sdk"):
            _check_metrics(_otel(s), s, exact=True)  # and as OpenTelemetry instruments

        # the logger heard both, at WARNING, with the lock's name
        wait_for(lambda: rec.warnings("in doubt"), 5, "in-doubt warning logged")
        lost = rec.warnings("lock 'stats:b' lost")
        assert len(lost) == 1 and "force unlock" in lost[0]
        assert len(rec.warnings("lock 'stats:d' lost (in doubt)")) == 1
    finally:
        signal.signal(signal.SIGUSR1, old)
        log.removeHandler(rec)
        c.close()
        other.close()


def test_stats_of_a_closed_client(redis: RedisServer) -> None:
    c = hilock.Client(redis.url)
    c.close()
    with pytest.raises(hilock.ClosedError):
        c.stats()



Metrics = Dict[Tuple[str, FrozenSet[Tuple[str, str]]], float]


def _have(module: str) -> bool:
    """prometheus_client and opentelemetry-sdk are in the python suite's
    venv (tests/python/deps.sh); the wheel suites' venvs have pytest and
    redis-py only, where the counting is still checked, not the exports."""
    import importlib.util
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def _parse(text: str) -> Metrics:
    from prometheus_client.parser import text_string_to_metric_families
    out: Metrics = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            key = (smp.name, frozenset(smp.labels.items()))
            assert key not in out, key
            out[key] = smp.value
    return out


def _scrape(c: Any) -> Metrics:
    """The client's metrics as a real prometheus_client exporter serves them."""
    from prometheus_client import CollectorRegistry, start_http_server
    registry = CollectorRegistry()
    registry.register(hilock.prometheus.Collector(c))
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            assert r.status == 200
            return _parse(r.read().decode())
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _otel(source: Any) -> Metrics:
    """source's figures as hilock.otel's instruments give them to an SDK's
    in-memory reader, under their Prometheus names (for _check_metrics)."""
    import hilock.otel
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        made = hilock.otel.instrument(provider.get_meter("hilock-test"), source)
        assert len(made) == 12
        data = reader.get_metrics_data()
    finally:
        provider.shutdown()
    back = {"hilock.acquires": "hilock_acquires_total", "hilock.grants": "hilock_grants_total",
            "hilock.losses": "hilock_losses_total",
            "hilock.acquire_wait.bucket": "hilock_acquire_wait_seconds_bucket",
            "hilock.hold.bucket": "hilock_hold_seconds_bucket"}
    out: Metrics = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                name = back.get(metric.name,
                                "hilock_" + metric.name[len("hilock."):] + "_total")
                assert metric.data.is_monotonic
                for p in metric.data.data_points:
                    out[(name, frozenset((k, str(v)) for k, v in p.attributes.items()))] = p.value
    return out


def _check_metrics(m: Metrics, s: Dict[str, Any], exact: bool) -> None:
    def v(name: str, **labels: str) -> float:
        return m[(name, frozenset(labels.items()))]

    r = "reentrant"
    assert v("hilock_acquires_total", kind=r, outcome="granted") == 2
    assert v("hilock_acquires_total", kind=r, outcome="timed_out") == 1
    assert v("hilock_acquires_total", kind=r, outcome="cancelled") == 1
    assert v("hilock_acquires_total", kind=r, outcome="busy") == 1
    assert v("hilock_grants_total", kind=r, path="first_try") == 2
    assert v("hilock_grants_total", kind=r, path="woken") == 0
    assert v("hilock_grants_total", kind=r, path="retried") == 0
    assert v("hilock_losses_total", kind=r, cause="gone") == 1
    assert v("hilock_losses_total", kind=r, cause="expired") == 0
    assert v("hilock_losses_total", kind=r, cause="in_doubt") == 1
    assert v("hilock_acquire_wait_seconds_bucket", kind=r, le="+Inf") == 4
    assert v("hilock_hold_seconds_bucket", kind=r, le="+Inf") == 2
    # cumulative log2 buckets: the 100 ms timeout is above 64 ms, so at most 3 by 0.064 s
    assert v("hilock_acquire_wait_seconds_bucket", kind=r, le="0.064") <= 3
    k = s["kinds"][r]
    for i, edge in enumerate(("0.001", "0.002", "0.004", "0.008")):
        assert v("hilock_acquire_wait_seconds_bucket", kind=r, le=edge) == sum(k["wait_ms"][:i + 1])
    for kind in ("fair", "read", "write", "fenced"):
        assert v("hilock_acquires_total", kind=kind, outcome="granted") == 0
        assert v("hilock_hold_seconds_bucket", kind=kind, le="+Inf") == 0
    for f in ("settles", "redirects", "replica_ack_failures", "reconnects", "renewals"):
        assert v("hilock_%s_total" % f) == s[f]
    for f in ("renewal_commands", "renewal_failures"):  # the stopped server: sent, unanswered
        assert v("hilock_%s_total" % f) == s[f] if exact else v("hilock_%s_total" % f) >= s[f]
    assert v("hilock_renewal_commands_total") >= 1
    # bounded: labelled by kind, never by the lock's name
    assert not any("stats:" in value for _, labels in m for _, value in labels)


def test_prometheus_sums_clients_and_skips_closed(redis: RedisServer) -> None:
    pytest.importorskip("prometheus_client")  # its text parser reads render's output
    a, b = hilock.Client(redis.url), hilock.Client(redis.url)
    try:
        for cl, n in ((a, 2), (b, 3)):
            for i in range(n):
                lk = cl.lock("prom:%d" % i)
                assert lk.acquire(wait=0, lease=5)
                lk.release()
        m = _parse(hilock.prometheus.render(a, b))
        key = ("hilock_acquires_total", frozenset({"kind": "reentrant", "outcome": "granted"}.items()))
        assert m[key] == 5
        b.close()
        assert _parse(hilock.prometheus.render(a, b))[key] == 2
    finally:
        a.close()
        b.close()


def test_aio_scripted_sequence_same_counters(own_redis: RedisServer) -> None:
    """hilock.aio counts the blocking client's sequence above to the same
    figures (names, shape and values), logs the same two warnings, and its
    stats() feeds hilock.prometheus alike."""
    import asyncio

    import hilock.aio as aio

    rec = _Records()
    log = logging.getLogger("hilock")
    log.addHandler(rec)
    other = hilock.Client(own_redis.url)

    async def until(cond: Any, seconds: float, what: str) -> None:
        end = asyncio.get_running_loop().time() + seconds
        while not cond():
            assert asyncio.get_running_loop().time() < end, "timed out waiting for " + what
            await asyncio.sleep(0.005)

    async def main() -> Dict[str, Any]:
        c = await aio.connect(own_redis.url, watchdog_lease=LEASE, command_timeout=LEASE / 3)
        try:
            s = c.stats()
            assert s == {**s, "version": 1} and s["kinds"]["reentrant"]["granted"] == 0
            b, b2, d = c.lock("astats:b"), other.lock("astats:b"), c.lock("astats:d")
            assert b2.acquire(wait=0, lease=60)
            assert not await b.acquire(wait=0.1)   # timed out
            assert not await b.acquire(wait=0)     # a try: busy
            waiting = asyncio.ensure_future(b.acquire())
            # the other (blocking) client listens there as b2's holder
            await until(lambda: own_redis("PUBSUB", "NUMSUB",
                                          "redisson_lock__channel:{astats:b}")[1] >= 2,
                        5, "waiter subscribed")
            waiting.cancel()                       # cancelled
            with pytest.raises(asyncio.CancelledError):
                await waiting
            b2.release()

            assert await b.acquire(wait=0)         # grant 1, removed by a force unlock
            assert b2.force_unlock()
            await until(lambda: c.stats()["kinds"]["reentrant"]["lost_gone"] == 1, 4 * LEASE,
                        "loss found by the watchdog")
            assert await d.acquire(wait=0)         # grant 2, then the server stops
            own_redis.pause()
            try:
                await until(lambda: c.stats()["kinds"]["reentrant"]["lost_in_doubt"] == 1,
                            4 * LEASE, "in-doubt report")
                return c.stats()
            finally:
                own_redis.resume()
        finally:
            await c.close()

    try:
        s = asyncio.run(main())
        blocking = hilock.Client(own_redis.url)
        try:
            shape = blocking.stats()
        finally:
            blocking.close()
        assert s.keys() == shape.keys() and s["kinds"].keys() == shape["kinds"].keys()
        assert all(s["kinds"][k].keys() == shape["kinds"][k].keys() for k in s["kinds"])
        k = s["kinds"]["reentrant"]
        assert (k["granted"], k["timed_out"], k["cancelled"], k["busy"]) == (2, 1, 1, 1)
        assert (k["granted_first_try"], k["granted_woken"], k["granted_retried"]) == (2, 0, 0)
        assert sum(k["wait_ms"]) == 4
        assert sum(k["wait_ms"][7:]) >= 1  # the 100 ms timeout
        assert (k["lost_gone"], k["lost_expired"], k["lost_in_doubt"]) == (1, 0, 1)
        assert sum(k["hold_ms"]) == 2
        assert (s["settles"], s["redirects"], s["replica_ack_failures"]) == (0, 0, 0)
        assert s["renewal_commands"] >= 1
        for kind, figures in s["kinds"].items():
            if kind != "reentrant":
                assert figures["granted"] + figures["timed_out"] + figures["cancelled"] == 0
        if _have("prometheus_client"):
            _check_metrics(_parse(hilock.prometheus.render(s)), s, exact=True)
        lost = rec.warnings("lock 'astats:b' lost")
        assert len(lost) == 1 and "force unlock" in lost[0]
        assert len(rec.warnings("lock 'astats:d' lost (in doubt)")) == 1
    finally:
        log.removeHandler(rec)
        other.close()


def _scripts_run(s: RedisServer) -> int:
    """Script runs the server has answered (INFO commandstats)."""
    info = s("INFO", "commandstats")
    info = info.decode() if isinstance(info, bytes) else info
    return sum(int(line.split("calls=")[1].split(",")[0]) for line in info.splitlines()
               if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")))


def test_aio_grant_paths_and_hold(own_redis: RedisServer) -> None:
    """A wait woken by the holder's unlock message is granted 'woken'; one
    whose holder's lease ran out (no message) 'retried'; a reentrant hold
    is timed once, from its first grant to its last release."""
    import asyncio

    import hilock.aio as aio

    redis = own_redis  # a server of its own: only this test runs scripts there
    other = hilock.Client(redis.url)

    async def main() -> Dict[str, Any]:
        c = await aio.connect(redis.url)
        try:
            # one owner for the waiting task and this one: the re-entry is its
            a, held = c.lock("apath:a", thread_id=7), other.lock("apath:a")
            assert held.acquire(wait=0, lease=60)
            calls = _scripts_run(redis)
            waiting = asyncio.ensure_future(a.acquire(wait=10))
            # it sleeps once it listens and its attempt after subscribing (its
            # second) was refused: only then is the release's message its wake-up
            while (redis("PUBSUB", "NUMSUB", "redisson_lock__channel:{apath:a}")[1] < 1
                   or _scripts_run(redis) < calls + 2):
                await asyncio.sleep(0.005)
            held.release()                        # the message wakes it
            assert await waiting
            assert await a.acquire(wait=0)        # re-entry: one hold
            await a.release()
            await a.release()
            r, held_r = c.lock("apath:r"), other.lock("apath:r")
            assert held_r.acquire(wait=0, lease=0.3)  # ends without a message
            assert await r.acquire(wait=10)
            await r.release()
            with pytest.raises(hilock.NotOwnerError):
                await r.release()
            return c.stats()
        finally:
            await c.close()

    try:
        k = asyncio.run(main())["kinds"]["reentrant"]
        assert (k["granted"], k["granted_first_try"], k["granted_woken"],
                k["granted_retried"]) == (3, 1, 1, 1)
        assert sum(k["hold_ms"]) == 2 and sum(k["wait_ms"]) == 3
        assert sum(k["wait_ms"][9:]) >= 1  # the 0.3 s lease ran out first: from 256 ms
    finally:
        other.close()


# -- per-name counters (stats_names) ---------------------------------------

def _check_names(s: Dict[str, Any], a: str, b: str) -> None:
    """The per-name figures after _names_sequence: a and b tracked
    (stats_names=2), the third name in the reentrant kind's other entry;
    the kind's figures are the sum of the three entries."""
    names = s["names"]
    assert [(e["kind"], e["name"]) for e in names] == [
        ("reentrant", a), ("reentrant", b), ("reentrant", None)]
    ea, eb, eo = names

    def figures(e: Dict[str, Any]) -> Tuple[int, ...]:
        return (e["granted"], e["granted_first_try"], e["busy"], e["timed_out"], e["cancelled"],
                sum(e["wait_ms"]), sum(e["hold_ms"]),
                e["lost_gone"], e["lost_expired"], e["lost_in_doubt"])

    assert figures(ea) == (1, 1, 1, 1, 0, 2, 1, 0, 0, 0)
    assert figures(eb) == (1, 1, 0, 0, 0, 1, 1, 1, 0, 0)
    assert figures(eo) == (1, 1, 0, 1, 0, 2, 1, 0, 0, 0)
    k = s["kinds"]["reentrant"]
    for f in ("granted", "busy", "timed_out", "lost_gone"):
        assert k[f] == ea[f] + eb[f] + eo[f]
    for f in ("wait_ms", "hold_ms"):
        assert k[f] == [x + y + z for x, y, z in zip(ea[f], eb[f], eo[f])]


def _check_name_metrics(m: Metrics) -> None:
    def v(metric: str, **labels: str) -> float:
        return m[(metric, frozenset(labels.items()))]

    r, other = "reentrant", hilock.prometheus.OTHER
    assert v("hilock_acquires_total", kind=r, name="n:a", outcome="busy") == 1
    assert v("hilock_acquires_total", kind=r, name="n:a", outcome="timed_out") == 1
    assert v("hilock_acquires_total", kind=r, name="n:b", outcome="granted") == 1
    assert v("hilock_losses_total", kind=r, name="n:b", cause="gone") == 1
    assert v("hilock_acquires_total", kind=r, name=other, outcome="granted") == 1
    assert v("hilock_hold_seconds_bucket", kind=r, name="n:a", le="+Inf") == 1
    assert v("hilock_acquire_wait_seconds_bucket", kind=r, name=other, le="+Inf") == 2
    # every kind has its other series; no per-kind series without a name
    assert v("hilock_acquires_total", kind="fair", name=other, outcome="granted") == 0
    assert not any(n.startswith("hilock_acquires") and "name" not in dict(labels)
                   for n, labels in m)
    assert not any(dict(labels).get("name") == "n:c" for _, labels in m)


def test_per_name_counters_and_exports(own_redis: RedisServer) -> None:
    """A client made with stats_names=2: exact figures for two names and the
    other entry after a scripted sequence (on n:a a busy try, a timeout and
    a grant with its release; on n:b a grant lost to a force unlock; on n:c,
    the third name, a timeout and a grant with its release), and the
    Prometheus exporter (scraped over HTTP) and OpenTelemetry carry a name
    label for it only; a client without stats_names has none."""
    c = hilock.Client(own_redis.url, stats_names=2, watchdog_lease=LEASE)
    other = hilock.Client(own_redis.url)
    try:
        assert c.stats_names == 2 and other.stats_names == 0
        assert c.stats(by_name=True)["names"] == []
        a, b, n3 = c.lock("n:a"), c.lock("n:b"), c.lock("n:c")
        a2, b2, n32 = other.lock("n:a"), other.lock("n:b"), other.lock("n:c")
        lost: List[str] = []
        b.on_lost = lambda lk, tid: lost.append(lk.name)

        assert a2.acquire(wait=0, lease=60)
        assert not a.acquire(wait=0)       # busy
        assert not a.acquire(wait=0.05)    # timed out (its first try is not a try of ours)
        a2.release()
        assert a.acquire(wait=0, lease=60)
        a.release()

        assert b.acquire(wait=0)           # watchdog; removed by a force unlock
        assert b2.force_unlock()
        wait_for(lambda: lost == ["n:b"], 4 * LEASE, "n:b's on_lost")

        assert n32.acquire(wait=0, lease=60)
        assert not n3.acquire(wait=0.05)   # timed out: counted in the other entry
        n32.release()
        assert n3.acquire(wait=0, lease=60)
        n3.release()

        s = c.stats(by_name=True)
        _check_names(s, "n:a", "n:b")
        assert "names" not in c.stats()
        with pytest.raises(hilock.InvalidArgument):
            other.stats(by_name=True)
        if _have("prometheus_client"):
            _check_name_metrics(_parse(hilock.prometheus.render(c)))
            _check_name_metrics(_scrape(c))
            plain = _scrape(other)
            assert plain and not any("name" in dict(labels) for _, labels in plain)
            assert plain[("hilock_acquires_total",
                          frozenset({("kind", "reentrant"), ("outcome", "granted")}))] == 2
            # summed with a client that did not opt in (its 2 grants): its
            # counts are in the other series
            both = _parse(hilock.prometheus.render(c, other))
            assert both[("hilock_acquires_total", frozenset(
                {("kind", "reentrant"), ("name", "(other)"), ("outcome", "granted")}))] == 3
            assert both[("hilock_acquires_total", frozenset(
                {("kind", "reentrant"), ("name", "n:a"), ("outcome", "granted")}))] == 1
        if _have("opentelemetry.sdk"):
            _check_name_metrics(_otel(c))
    finally:
        c.close()
        other.close()


def test_per_name_option_checked(redis: RedisServer) -> None:
    for bad in (-1, 65537):
        with pytest.raises(hilock.InvalidArgument):
            hilock.Client(redis.url, stats_names=bad)
    with pytest.raises(TypeError):
        hilock.Client(redis.url, stats_names="3")  # type: ignore[arg-type]
    import hilock.aio as aio
    with pytest.raises(hilock.InvalidArgument):
        aio.Client(redis.url, stats_names=-1)


def test_aio_per_name_counters(own_redis: RedisServer) -> None:
    """hilock.aio with stats_names=2: the blocking test's sequence gives the
    same per-name figures, and hilock.prometheus labels them by name."""
    import asyncio

    import hilock.aio as aio

    other = hilock.Client(own_redis.url)

    async def until(cond: Any, seconds: float, what: str) -> None:
        end = asyncio.get_running_loop().time() + seconds
        while not cond():
            assert asyncio.get_running_loop().time() < end, "timed out waiting for " + what
            await asyncio.sleep(0.005)

    async def main() -> Dict[str, Any]:
        c = await aio.connect(own_redis.url, stats_names=2, watchdog_lease=LEASE)
        try:
            assert c.stats_names == 2 and c.stats(by_name=True)["names"] == []
            a, b, n3 = c.lock("n:a"), c.lock("n:b"), c.lock("n:c")
            a2, b2, n32 = other.lock("n:a"), other.lock("n:b"), other.lock("n:c")
            lost: List[str] = []
            b.on_lost = lambda lk, tid: lost.append(lk.name)
            assert a2.acquire(wait=0, lease=60)
            assert not await a.acquire(wait=0)
            assert not await a.acquire(wait=0.05)
            a2.release()
            assert await a.acquire(wait=0, lease=60)
            await a.release()
            assert await b.acquire(wait=0)
            assert b2.force_unlock()
            await until(lambda: lost == ["n:b"], 4 * LEASE, "n:b's on_lost")
            assert n32.acquire(wait=0, lease=60)
            assert not await n3.acquire(wait=0.05)
            n32.release()
            assert await n3.acquire(wait=0, lease=60)
            await n3.release()
            with pytest.raises(hilock.InvalidArgument):
                aio.Client(own_redis.url).stats(by_name=True)  # not opened: no I/O
            return c.stats(by_name=True)
        finally:
            await c.close()

    try:
        s = asyncio.run(main())
        _check_names(s, "n:a", "n:b")
        if _have("prometheus_client"):
            _check_name_metrics(_parse(hilock.prometheus.render(s)))
    finally:
        other.close()
