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

Every metric is labelled by lock kind, and by lock name only when a source
opted in (a client made with ``stats_names`` > 0, or a dict with
``names``): then the per-kind metrics carry a ``name`` label, one series per
tracked (kind, name) pair and one per kind with ``name="(other)"`` for the
pairs beyond the limit (and for every count of a source that did not opt
in), so that summing over ``name`` gives the per-kind figures and the number
of series stays bounded by the limits. docs/observability.md lists them
with their meaning and what to alert on. ``render`` needs nothing but the standard library; ``Collector``
imports prometheus_client when it is made.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

__all__ = ["Collector", "OTHER", "families", "render"]

#: the ``name`` label of a kind's "other" entry (the pairs beyond a
#: client's ``stats_names`` limit)
OTHER = "(other)"

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
        if getattr(source, "stats_names", 0):
            return source.stats(by_name=True)  # type: ignore[no-any-return]
        return source.stats()  # type: ignore[no-any-return]
    except ClosedError:
        return None


def _add(into: Dict[str, Any], figures: Dict[str, Any]) -> None:
    for f, v in figures.items():
        if f in ("kind", "name"):
            continue
        if isinstance(v, list):
            cur = into.setdefault(f, [0] * len(v))
            into[f] = [a + b for a, b in zip(cur, v)]
        else:
            into[f] = into.get(f, 0) + v


def _summed(sources: Iterable[Any]) -> Dict[str, Any]:
    """The sources' figures summed; with ``names`` (a dict of (kind, name)
    -> figures, name None for the other entry) when any source opted in."""
    total: Dict[str, Any] = {"kinds": {}}
    read = [s for s in (_stats_of(source) for source in sources) if s is not None]
    by_name = any("names" in s for s in read)
    names: Dict[Tuple[str, Optional[str]], Dict[str, Any]] = {}
    for s in read:
        for kind, figures in s["kinds"].items():
            _add(total["kinds"].setdefault(kind, {}), figures)
            if by_name and "names" not in s:  # not opted in: all of it is "other"
                _add(names.setdefault((kind, None), {}), figures)
        for entry in s.get("names", ()):
            _add(names.setdefault((entry["kind"], entry["name"]), {}), entry)
        for f, v in s.items():
            if f not in ("kinds", "version", "names"):
                total[f] = total.get(f, 0) + v
    if by_name:
        total["names"] = names
    return total


def _series(s: Dict[str, Any]) -> List[Tuple[Tuple[Tuple[str, str], ...], Dict[str, Any]]]:
    """The label sets of the per-kind metrics with their figures: one per
    kind, or (names on) one per (kind, name) pair and one per kind's other
    entry (``name="(other)"``, present even when 0)."""
    if "names" not in s:
        return [((("kind", kind),), s["kinds"].get(kind, {})) for kind in _KINDS]
    out: List[Tuple[Tuple[Tuple[str, str], ...], Dict[str, Any]]] = []
    names = s["names"]
    for kind in _KINDS:
        for (k, name), figures in names.items():
            if k == kind and name is not None:
                out.append(((("kind", kind), ("name", name)), figures))
        out.append(((("kind", kind), ("name", OTHER)), names.get((kind, None), {})))
    return out


def _histogram(series: List[Tuple[Tuple[Tuple[str, str], ...], Dict[str, Any]]],
               field: str) -> List[Sample]:
    out: List[Sample] = []
    for labels, figures in series:
        counts = figures.get(field, [0] * _BUCKETS)
        running = 0
        for edge, n in zip(_EDGES, counts):
            running += n
            out.append(("_bucket", labels + (("le", repr(edge)),), float(running)))
        running += sum(counts[len(_EDGES):])
        out.append(("_bucket", labels + (("le", "+Inf"),), float(running)))
    return out


def families(*sources: Any) -> List[Family]:
    """The metric families of the sources' summed counters, as
    ``(name, type, help, [(suffix, labels, value), ...])``: the data that
    :func:`render` and :class:`Collector` write out."""
    s = _summed(sources)
    series = _series(s)

    def by_kind(label: str, pairs: Tuple[Tuple[str, str], ...]) -> List[Sample]:
        return [("_total", labels + ((label, value),), float(figures.get(field, 0)))
                for labels, figures in series for value, field in pairs]

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
         _histogram(series, "wait_ms")),
        ("hilock_hold_seconds", "histogram",
         "Time from a thread's first grant to its last release or its loss; log2 ms "
         "buckets, no _sum or _count (the +Inf bucket is the count).",
         _histogram(series, "hold_ms")),
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
            # one histogram per label set (kind, or kind and name), its
            # buckets in order
            groups: Dict[Tuple[str, ...], List[Tuple[str, float]]] = {}
            keys: List[str] = []
            for _s, lab, value in samples:
                keys = [k for k, _ in lab if k != "le"]
                groups.setdefault(tuple(v for k, v in lab if k != "le"), []).append(
                    (dict(lab)["le"], value))
            hist = HistogramMetricFamily(name, doc, labels=keys or ["kind"])
            for values, buckets in groups.items():
                hist.add_metric(list(values), buckets, None)
            yield hist
