"""hilock's counters as Prometheus metrics.

    import hilock, hilock.prometheus

    client = hilock.Client("redis://127.0.0.1:6379/0")
    text = hilock.prometheus.render(client)     # text exposition format 0.0.4

    # with prometheus_client (pip install hilock[prometheus]):
    from prometheus_client import REGISTRY, start_http_server
    REGISTRY.register(hilock.prometheus.Collector(client))
    start_http_server(9100)

A source is a :class:`hilock.Client`, a :class:`hilock.aio.Client` (both
have ``stats()``) or a dict as ``stats()`` returns it. With several sources
(the clients of one process) each figure is their sum, so a scrape has the
same series whatever number of clients the process opened; a closed client
is left out (its counts drop out of the sums: a counter reset to
Prometheus, which ``rate()`` handles).

Every metric is labelled by lock kind, never by lock name, so their number
is bounded. docs/observability.md lists them with their meaning and what to
alert on. ``render`` needs nothing but the standard library; ``Collector``
imports prometheus_client when it is made.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

__all__ = ["Collector", "families", "render"]

_BUCKETS = 24  # HILOCK_STATS_BUCKETS
# Upper edges in seconds of the log2 ms buckets 0..22 (bucket 0: under 1 ms,
# bucket i: under 2^i ms); bucket 23 is +Inf.
_EDGES = [(1 << i) / 1000.0 for i in range(_BUCKETS - 1)]
_KINDS = ("reentrant", "fair", "read", "write", "fenced")

_OUTCOMES = (("granted", "granted"), ("timed_out", "timed_out"),
             ("cancelled", "cancelled"), ("busy", "busy"))
_PATHS = (("first_try", "granted_first_try"), ("woken", "granted_woken"),
          ("retried", "granted_retried"))
_CAUSES = (("gone", "lost_gone"), ("expired", "lost_expired"), ("in_doubt", "lost_in_doubt"))
_CLIENT = (
    ("hilock_renewals", "renewals", "Holds whose watchdog renewal the server confirmed."),
    ("hilock_renewal_commands", "renewal_commands",
     "Watchdog renewal commands sent (one renews a batch of holds)."),
    ("hilock_renewal_failures", "renewal_failures",
     "Hold renewals that got no usable answer (retried at the next pass)."),
    ("hilock_settles", "settles",
     "Acquire attempts whose reply timed out, handed to the settler."),
    ("hilock_reconnects", "reconnects",
     "Pub/sub listener connections made again after their link was lost."),
    ("hilock_redirects", "redirects", "Cluster MOVED/ASK answers followed."),
    ("hilock_replica_ack_failures", "replica_ack_failures",
     "Grants no replica acknowledged in time (given back)."),
)

# One metric family: (name without _total, type, help, samples); a sample is
# (suffix, labels, value).
Sample = Tuple[str, Tuple[Tuple[str, str], ...], float]
Family = Tuple[str, str, str, List[Sample]]


def _stats_of(source: Any) -> Optional[Dict[str, Any]]:
    if isinstance(source, dict):
        return source
    from ._errors import ClosedError
    try:
        return source.stats()  # type: ignore[no-any-return]
    except ClosedError:
        return None


def _summed(sources: Iterable[Any]) -> Dict[str, Any]:
    total: Dict[str, Any] = {"kinds": {}}
    for source in sources:
        s = _stats_of(source)
        if s is None:
            continue
        for kind, figures in s["kinds"].items():
            into = total["kinds"].setdefault(kind, {})
            for f, v in figures.items():
                if isinstance(v, list):
                    cur = into.setdefault(f, [0] * len(v))
                    into[f] = [a + b for a, b in zip(cur, v)]
                else:
                    into[f] = into.get(f, 0) + v
        for f, v in s.items():
            if f not in ("kinds", "version"):
                total[f] = total.get(f, 0) + v
    return total


def _histogram(kinds: Dict[str, Any], field: str) -> List[Sample]:
    out: List[Sample] = []
    for kind in _KINDS:
        counts = kinds.get(kind, {}).get(field, [0] * _BUCKETS)
        running = 0
        for edge, n in zip(_EDGES, counts):
            running += n
            out.append(("_bucket", (("kind", kind), ("le", repr(edge))), float(running)))
        running += sum(counts[len(_EDGES):])
        out.append(("_bucket", (("kind", kind), ("le", "+Inf")), float(running)))
    return out


def families(*sources: Any) -> List[Family]:
    """The metric families of the sources' summed counters, as
    ``(name, type, help, [(suffix, labels, value), ...])``: the data that
    :func:`render` and :class:`Collector` write out."""
    s = _summed(sources)
    kinds = s["kinds"]

    def by_kind(label: str, pairs: Tuple[Tuple[str, str], ...]) -> List[Sample]:
        return [("_total", (("kind", kind), (label, value)),
                 float(kinds.get(kind, {}).get(field, 0)))
                for kind in _KINDS for value, field in pairs]

    out: List[Family] = [
        ("hilock_acquires", "counter",
         "Acquire calls by lock kind and outcome (busy: a try that found the lock held).",
         by_kind("outcome", _OUTCOMES)),
        ("hilock_grants", "counter",
         "Granted acquire calls by how the grant came (first_try, woken by an unlock "
         "message, retried on a timer).",
         by_kind("path", _PATHS)),
        ("hilock_acquire_wait_seconds", "histogram",
         "Time of each acquire call (granted, timed out or cancelled); log2 ms buckets, "
         "no _sum or _count (the +Inf bucket is the count).",
         _histogram(kinds, "wait_ms")),
        ("hilock_hold_seconds", "histogram",
         "Time from a thread's first grant to its last release or its loss; log2 ms "
         "buckets, no _sum or _count (the +Inf bucket is the count).",
         _histogram(kinds, "hold_ms")),
        ("hilock_losses", "counter",
         "Holds lost while their holder held them, by cause (gone: removed on the server; "
         "expired: lease ran out unrenewed; in_doubt: no renewal confirmed in time).",
         by_kind("cause", _CAUSES)),
    ]
    for name, field, doc in _CLIENT:
        out.append((name, "counter", doc, [("_total", (), float(s.get(field, 0)))]))
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(v: float) -> str:
    return str(int(v)) if v == int(v) else repr(v)


def render(*sources: Any) -> str:
    """The sources' summed counters in Prometheus's text exposition format
    (version 0.0.4, ``Content-Type: text/plain; version=0.0.4``)."""
    lines: List[str] = []
    for name, mtype, doc, samples in families(*sources):
        full = name + "_total" if mtype == "counter" else name
        lines.append("# HELP %s %s" % (full, doc.replace("\\", "\\\\").replace("\n", "\\n")))
        lines.append("# TYPE %s %s" % (full, mtype))
        for suffix, labels, value in samples:
            lab = ",".join('%s="%s"' % (k, _escape(v)) for k, v in labels)
            lines.append("%s%s%s %s" % (name, suffix, "{%s}" % lab if lab else "", _number(value)))
    return "\n".join(lines) + "\n"


class Collector:
    """A prometheus_client collector of the sources' summed counters:
    ``REGISTRY.register(hilock.prometheus.Collector(client))``. Each scrape
    reads ``stats()`` afresh. Needs prometheus_client
    (``pip install hilock[prometheus]``)."""

    def __init__(self, *sources: Any) -> None:
        from prometheus_client import core  # noqa: F401  (fail early when missing)
        self._sources = sources

    def describe(self) -> List[Any]:
        return []  # unchecked collector: registered without a first scrape

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
        for name, mtype, doc, samples in families(*self._sources):
            if mtype == "counter":
                labels = [k for k, _ in samples[0][1]]
                fam = CounterMetricFamily(name, doc, labels=labels)
                for _suffix, lab, value in samples:
                    fam.add_metric([v for _, v in lab], value)
                yield fam
                continue
            hist = HistogramMetricFamily(name, doc, labels=["kind"])
            for kind in _KINDS:
                buckets = [(v, value) for _s, lab, value in samples
                           for k, v in lab if _s == "_bucket" and k == "le"
                           and dict(lab)["kind"] == kind]
                hist.add_metric([kind], buckets, None)
            yield hist
