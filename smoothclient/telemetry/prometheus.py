"""
Prometheus metrics from the policy's hooks (the ``prometheus`` extra: ``prometheus-client``).

::

    metrics = PrometheusHooks()  # once per registry: it registers its metrics there
    client = httpx.Client(transport=SmoothTransport(policy=metrics.apply(RetryPolicy())))

Metrics (``smoothclient`` is the default namespace):

==================================  ===========================  ==========================
metric                              labels                       what
==================================  ===========================  ==========================
``smoothclient_calls_total``        origin, outcome              logical calls ended
``smoothclient_attempts_total``     origin, outcome              attempts those calls sent
``smoothclient_retries_total``      origin, reason               retries (reason: ``status
                                                                 503``, ``connect error``...)
``smoothclient_call_wait_seconds``  origin, outcome              time a call spent waiting
                                                                 (backoff and pacer slots)
``smoothclient_retry_delay_seconds`` origin                      each retry's delay
==================================  ===========================  ==========================

``outcome`` is one of ``success``, ``status`` (an error status returned), ``error`` (an
exception), ``unsent`` (given up before the first attempt): see
:func:`~smoothclient.telemetry.outcome_of`.  Every label takes a small set of values; with
many origins, ``origin_label=False`` drops that label.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..events import CallEnded, RetryEvent
from . import Hooks, outcome_of

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is part of the test setup
    msg = "smoothclient.PrometheusHooks needs prometheus: pip install 'smoothclient[prometheus]'"
    raise ImportError(msg, name=exc.name) from exc

__all__ = ["PrometheusHooks"]

#: Buckets of the wait histograms, in seconds: a fast retry to a long ``Retry-After``.
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class PrometheusHooks(Hooks):
    """
    Counters and histograms of calls, attempts, retries and waits.

    Args:
        registry: where the metrics are registered (default: prometheus-client's global
            ``REGISTRY``).  Make one ``PrometheusHooks`` per registry and share it: a
            second one registering the same names raises ``ValueError``.
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
        """Register the metrics."""
        if not isinstance(namespace, str) or not namespace:
            msg = f"namespace must be a non-empty string, not {namespace!r}"
            raise TypeError(msg)
        where = REGISTRY if registry is None else registry
        self.origin_label = bool(origin_label)
        origin = ("origin",) if self.origin_label else ()
        ns, reg, wait_buckets = namespace, where, tuple(buckets)
        by_outcome = (*origin, "outcome")
        self.calls = Counter("calls", "Logical calls ended", by_outcome, namespace=ns, registry=reg)
        self.attempts = Counter(
            "attempts",
            "Attempts sent by the calls that ended",
            by_outcome,
            namespace=ns,
            registry=reg,
        )
        self.retries = Counter(
            "retries", "Retries, by reason", (*origin, "reason"), namespace=ns, registry=reg
        )
        self.call_wait = Histogram(
            "call_wait_seconds",
            "Seconds a call spent waiting (backoff and pacer slots)",
            by_outcome,
            namespace=ns,
            registry=reg,
            buckets=wait_buckets,
        )
        self.retry_delay = Histogram(
            "retry_delay_seconds",
            "Each retry's delay",
            origin,
            namespace=ns,
            registry=reg,
            buckets=wait_buckets,
        )

    def _labels(self, origin: str, *rest: str) -> tuple[str, ...]:
        return (origin, *rest) if self.origin_label else rest

    def on_retry(self, event: RetryEvent) -> None:
        """Count the retry and observe its delay."""
        self.retries.labels(*self._labels(event.origin, event.reason)).inc()
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
