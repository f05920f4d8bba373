"""
Prometheus metrics from the policy's hooks (the ``prometheus`` extra: ``prometheus-client``).

::

    metrics = PrometheusHooks()  # once per registry: it registers its metrics there
    client = httpx.Client(transport=SmoothTransport(policy=metrics.apply(RetryPolicy())))

Metrics (``smoothclient`` is the default namespace):

==================================== =============================== ========================
metric                               labels                          what
==================================== =============================== ========================
``smoothclient_calls_total``         origin, outcome                 logical calls ended
``smoothclient_attempts_total``      origin, outcome                 attempts those calls
                                                                     sent
``smoothclient_retries_total``       origin, reason, status_class    retries
``smoothclient_call_wait_seconds``   origin, outcome                 time a call spent
                                                                     waiting (backoff and
                                                                     pacer slots)
``smoothclient_retry_delay_seconds`` origin                          each retry's delay
``smoothclient_give_ups_total``      origin, why                     calls that gave up, by
                                                                     why (the budget, an
                                                                     outage, a closed quota)
``smoothclient_held_seconds_total``  origin                          seconds calls were held
                                                                     for an outage
==================================== =============================== ========================

And what a pacer holds now, per origin, from :class:`PacerCollector` (registered once per
pacer: ``registry.register(PacerCollector(pacer))``), read at each scrape from its views:

==================================== =============================== ========================
metric                               labels                          what
==================================== =============================== ========================
``smoothclient_origin_down_seconds`` origin                          how long the origin has
                                                                     failed everything (0:
                                                                     it is up)
``smoothclient_origin_closed_seconds`` origin                        how long a quota stated
                                                                     spent stays closed
``smoothclient_origin_retries_left`` origin                          retries its retry budget
                                                                     allows now
``smoothclient_origin_rate``         origin                          the rate it is paced at
                                                                     (req/s; absent: unpaced)
``smoothclient_origin_waiting``      origin                          requests waiting for a
                                                                     slot
``smoothclient_origin_in_flight``    origin                          requests sent, not yet
                                                                     answered
==================================== =============================== ========================

``outcome`` is one of ``success``, ``status`` (an error status returned), ``error`` (an
exception), ``unsent`` (given up before the first attempt): see
:func:`~smoothclient.telemetry.outcome_of`.  A retry's ``reason`` is its kind, one of
:data:`REASONS` (see :func:`reason_of`), and ``status_class`` the class of the status that
was retried (``"5xx"``, ``"4xx"``...; ``""`` for an exception).  A give-up's ``why`` is
its kind (see :func:`~smoothclient.telemetry.give_up_of`): how often the budget or an outage stopped
calls.  Every label takes a small set of values, whatever the servers answer; with many
origins, ``origin_label=False`` drops that label.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..events import CallEnded, RetryEvent
from . import (
    PACER_GAUGES,
    Hooks,
    checked_namespace,
    checked_pacer,
    give_up_of,
    outcome_of,
    pacer_samples,
)

if TYPE_CHECKING:
    from ..pacing.pacer import Pacer

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily, Metric
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is part of the test setup
    msg = (
        "smoothclient.telemetry.PrometheusHooks needs prometheus: "
        "pip install 'smoothclient[prometheus]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = ["REASONS", "PacerCollector", "PrometheusHooks", "reason_of", "status_class"]

#: Buckets of the wait histograms, in seconds: a fast retry to a long ``Retry-After``.
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

#: The values of the retries' ``reason`` label.
REASONS = ("rate_limited", "server_error", "status", "transport", "result", "error")
#: The engine's error kinds (``"connect error"``...) that are failures of the transport.
_TRANSPORT_KINDS = frozenset({"connect", "pool", "timeout", "read", "write", "protocol"})


def status_class(status: int | None) -> str:
    """``"5xx"`` for 503...: a status as a label of a few values (``""``: no status)."""
    if status is None:
        return ""
    return f"{status // 100}xx" if 100 <= status <= 599 else "other"


def _status_of(event: RetryEvent) -> int | None:
    """The status retried: the event's, or read from a reason ``"status 503"`` made without it."""
    if event.status is not None:
        return event.status
    kind, _, rest = event.reason.partition(" ")
    number = rest.partition(" ")[0].rstrip(":")
    return int(number) if kind == "status" and number.isdigit() else None


def reason_of(event: RetryEvent) -> str:
    """
    Why a retry was made, as one of :data:`REASONS` (a metric label).

    ``"rate_limited"`` (a 429), ``"server_error"`` (a 5xx), ``"status"`` (any other status
    retried: 408, 425...), ``"transport"`` (the request failed on its way: connect, timeout,
    read, write, protocol), ``"result"`` (``@retry``'s ``on_result`` wanted another try),
    ``"error"`` (any other exception).
    """
    status = _status_of(event)
    if status is not None:
        if status == 429:
            return "rate_limited"
        return "server_error" if 500 <= status <= 599 else "status"
    kind = event.reason.partition(" ")[0]
    if kind in _TRANSPORT_KINDS:
        return "transport"
    return "result" if kind == "result" else "error"


@dataclass(frozen=True, slots=True)
class _Metrics:
    """The collectors of one namespace in one registry, and the arguments that made them."""

    origin_label: bool
    buckets: tuple[float, ...]
    calls: Counter
    attempts: Counter
    retries: Counter
    call_wait: Histogram
    retry_delay: Histogram
    give_ups: Counter
    held: Counter


#: The metrics each registry has, by namespace: a second ``PrometheusHooks`` shares them.
_REGISTERED: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, _Metrics]] = (
    weakref.WeakKeyDictionary()
)
_REGISTERED_LOCK = threading.Lock()


def _register(
    registry: CollectorRegistry, ns: str, origin_label: bool, buckets: tuple[float, ...]
) -> _Metrics:
    """Make the collectors and register them; none stays registered if one cannot be."""
    origin = ("origin",) if origin_label else ()
    by_outcome = (*origin, "outcome")
    metrics = _Metrics(
        origin_label,
        buckets,
        calls=Counter("calls", "Logical calls ended", by_outcome, namespace=ns, registry=None),
        attempts=Counter(
            "attempts",
            "Attempts sent by the calls that ended",
            by_outcome,
            namespace=ns,
            registry=None,
        ),
        retries=Counter(
            "retries",
            "Retries, by reason and status class",
            (*origin, "reason", "status_class"),
            namespace=ns,
            registry=None,
        ),
        call_wait=Histogram(
            "call_wait_seconds",
            "Seconds a call spent waiting (backoff and pacer slots)",
            by_outcome,
            namespace=ns,
            registry=None,
            buckets=buckets,
        ),
        retry_delay=Histogram(
            "retry_delay_seconds",
            "Each retry's delay",
            origin,
            namespace=ns,
            registry=None,
            buckets=buckets,
        ),
        give_ups=Counter(
            "give_ups",
            "Calls that gave up, by why",
            (*origin, "why"),
            namespace=ns,
            registry=None,
        ),
        held=Counter(
            "held_seconds",
            "Seconds calls were held for an outage",
            origin,
            namespace=ns,
            registry=None,
        ),
    )
    done: list[Counter | Histogram] = []
    try:
        for collector in (
            metrics.calls,
            metrics.attempts,
            metrics.retries,
            metrics.call_wait,
            metrics.retry_delay,
            metrics.give_ups,
            metrics.held,
        ):
            registry.register(collector)
            done.append(collector)
    except ValueError:  # a name is taken by another collector: leave the registry as it was
        for collector in done:
            registry.unregister(collector)
        raise
    return metrics


class PrometheusHooks(Hooks):
    """
    Counters and histograms of calls, attempts, retries, waits and give-ups.

    Args:
        registry: where the metrics are registered (default: prometheus-client's global
            ``REGISTRY``).  Several ``PrometheusHooks`` on one registry and namespace share
            the same metrics (they must then agree on ``origin_label`` and ``buckets``).
        namespace: the metrics' name prefix.
        origin_label: whether the metrics carry the origin (the scheme, host and port) as a
            label; ``False`` for clients that call many hosts.
        buckets: the wait histograms' buckets, in seconds.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        namespace: str = "smoothclient",
        origin_label: bool = True,
        buckets: Sequence[float] = WAIT_BUCKETS,
    ) -> None:
        """Register the metrics, or share those registered already."""
        checked_namespace(namespace)
        where = REGISTRY if registry is None else registry
        self.origin_label = bool(origin_label)
        wait_buckets = tuple(buckets)
        with _REGISTERED_LOCK:
            known = _REGISTERED.setdefault(where, {})
            before = known.get(namespace)
            try:  # registers afresh unless the names are taken (or were unregistered since)
                metrics = known[namespace] = _register(
                    where, namespace, self.origin_label, wait_buckets
                )
            except ValueError:
                if before is None:  # taken by collectors of someone else's
                    raise
                if (before.origin_label, before.buckets) != (self.origin_label, wait_buckets):
                    msg = (
                        f"the {namespace}_* metrics of this registry were made with "
                        f"origin_label={before.origin_label}, buckets={before.buckets}: pass "
                        "the same, or use another namespace or registry"
                    )
                    raise ValueError(msg) from None
                metrics = before  # made by an earlier PrometheusHooks: shared
        self.calls = metrics.calls
        self.attempts = metrics.attempts
        self.retries = metrics.retries
        self.call_wait = metrics.call_wait
        self.retry_delay = metrics.retry_delay
        self.give_ups = metrics.give_ups
        self.held = metrics.held

    def _labels(self, origin: str, *rest: str) -> tuple[str, ...]:
        return (origin, *rest) if self.origin_label else rest

    def on_retry(self, event: RetryEvent) -> None:
        """Count the retry and observe its delay."""
        kinds = (reason_of(event), status_class(_status_of(event)))
        self.retries.labels(*self._labels(event.origin, *kinds)).inc()
        labels = self._labels(event.origin)
        (self.retry_delay.labels(*labels) if labels else self.retry_delay).observe(event.delay)

    def on_success(self, ended: CallEnded) -> None:
        """Count the call, its attempts and its wait."""
        self._ended(ended)

    def on_give_up(self, ended: CallEnded) -> None:
        """Count the call, its attempts and its wait."""
        self._ended(ended)

    def _ended(self, ended: CallEnded) -> None:
        labels = self._labels(ended.origin, outcome_of(ended))
        self.calls.labels(*labels).inc()
        self.attempts.labels(*labels).inc(ended.record.attempts)
        self.call_wait.labels(*labels).observe(ended.record.total_wait)
        why = give_up_of(ended)
        if why:
            self.give_ups.labels(*self._labels(ended.origin, why)).inc()
        if ended.record.held_for_outage > 0:
            origin = self._labels(ended.origin)
            (self.held.labels(*origin) if origin else self.held).inc(ended.record.held_for_outage)


class PacerCollector:
    """
    Gauges of what a pacer holds now, per origin: down, closed, retry budget, rate, counts.

    Read from :meth:`Pacer.view <smoothclient.Pacer.view>` at each scrape (through a shared
    store, its state as the fleet shares it).  Register it once per pacer and registry::

        REGISTRY.register(PacerCollector(pacer))

    Args:
        pacer: the pacer whose origins are reported.
        namespace: the metrics' name prefix.
        origin_label: ``False`` reports nothing (the gauges are per origin; without the label
            they would say nothing of which origin is down).
    """

    def __init__(
        self, pacer: Pacer, *, namespace: str = "smoothclient", origin_label: bool = True
    ) -> None:
        """Report ``pacer``'s origins under ``namespace``."""
        self.pacer = checked_pacer(pacer)
        self.namespace = checked_namespace(namespace)
        self.origin_label = bool(origin_label)

    def _families(self) -> dict[str, GaugeMetricFamily]:
        return {
            name: GaugeMetricFamily(f"{self.namespace}_{name}", doc, labels=["origin"])
            for name, doc in PACER_GAUGES.items()
        }

    def describe(self) -> Iterator[Metric]:
        """The metrics' names (no view is read when registering)."""
        yield from self._families().values()

    def collect(self) -> Iterator[Metric]:
        """One sample per origin remembered and gauge (a view that fails is skipped)."""
        families = self._families()
        if self.origin_label:
            for name, origin, value in pacer_samples(self.pacer):
                families[name].add_metric([origin], value)
        yield from families.values()
