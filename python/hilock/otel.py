"""hilock's counters as OpenTelemetry metrics.

    from opentelemetry import metrics
    import hilock, hilock.otel

    client = hilock.Client("redis://127.0.0.1:6379/0")
    hilock.otel.instrument(metrics.get_meter("hilock"), client)

Needs opentelemetry-api (``pip install hilock[otel]``; an SDK and an
exporter are the application's choice). ``instrument`` registers one
observable counter per figure of :mod:`hilock.prometheus` (the same
figures, attributes and sums over the sources; a dict as ``stats()``
returns it is a source too), read afresh at each collection:

    hilock.acquires {kind, outcome}   hilock.grants {kind, path}
    hilock.losses {kind, cause}       hilock.renewals, hilock.renewal_commands,
    hilock.renewal_failures, hilock.settles, hilock.reconnects,
    hilock.redirects, hilock.replica_ack_failures
    hilock.acquire_wait.bucket {kind, le}, hilock.hold.bucket {kind, le}

The last two are the log2 millisecond buckets as cumulative counts per
upper bound ``le`` in seconds (OpenTelemetry has no observable histogram;
``le="+Inf"`` is the count). docs/observability.md says what each means.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List

from .prometheus import families

__all__ = ["instrument"]

# Prometheus family name -> OpenTelemetry instrument name, unit
_NAMES = {
    "hilock_acquires": ("hilock.acquires", "{call}"),
    "hilock_grants": ("hilock.grants", "{call}"),
    "hilock_losses": ("hilock.losses", "{hold}"),
    "hilock_acquire_wait_seconds": ("hilock.acquire_wait.bucket", "{call}"),
    "hilock_hold_seconds": ("hilock.hold.bucket", "{hold}"),
}


def _name_of(family: str) -> Any:
    if family in _NAMES:
        return _NAMES[family]
    return "hilock." + family[len("hilock_"):], "1"


def instrument(meter: Any, *sources: Any) -> List[Any]:
    """Register the sources' counters on meter (an
    ``opentelemetry.metrics.Meter``) as observable counters; returns the
    instruments made."""
    from opentelemetry.metrics import CallbackOptions, Observation

    def callback_for(index: int) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            _name, _mtype, _doc, samples = families(*sources)[index]
            return [Observation(value, dict(labels)) for suffix, labels, value in samples
                    if suffix in ("_total", "_bucket")]
        return callback

    made = []
    for i, (fam, _mtype, doc, _samples) in enumerate(families()):
        name, unit = _name_of(fam)
        made.append(meter.create_observable_counter(name, callbacks=[callback_for(i)],
                                                    unit=unit, description=doc))
    return made
