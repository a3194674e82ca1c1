"""Client.stats() and the "hilock" logger against a real redis-server: after
a scripted sequence (2 grants, 1 timeout, 1 cancel, 1 hold removed by
another client's force unlock, 1 hold reported in doubt while the server is
stopped) every counter has its exact value, and the loss and the in-doubt
report were logged at WARNING. Every wait is for a state seen on the server
or in the counters, never a bare sleep."""
import logging
import signal
import threading
from typing import Any, List

import pytest

import hilock
from conftest import RedisServer, wait_for

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

