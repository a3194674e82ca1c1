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

        # 1 timeout, 1 try (busy) and 1 cancel while the other client holds stats:b
        assert b2.acquire(wait=0, lease=60)
        assert not b.acquire(wait=0.1)
        assert not b.acquire(wait=0)  # a try: busy
        channel = "redisson_lock__channel:{stats:b}"
        main = threading.main_thread().ident
        assert main is not None

        def interrupt_when_waiting() -> None:
            wait_for(lambda: own_redis("PUBSUB", "NUMSUB", channel)[1] >= 1, 5, "waiter subscribed")
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
            s = c.stats()  # while stopped: no renewal can find the hold gone yet
            scraped = _scrape(c)
        finally:
            own_redis.resume()

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
        _check_metrics(_parse(hilock.prometheus.render(s)), s, exact=True)
        _check_metrics(scraped, s, exact=False)  # read a moment later: renewals may move

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
