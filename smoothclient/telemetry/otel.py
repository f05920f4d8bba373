"""
OpenTelemetry span events from the policy's hooks (the ``otel`` extra: ``opentelemetry-api``).

::

    tracing = OpenTelemetryHooks()
    client = httpx.Client(transport=SmoothTransport(policy=tracing.apply(RetryPolicy())))

Each retry and the end of each call become events on the span current when the hook runs:
the HTTP client span where httpx or requests is instrumented (the instrumentation wraps the
client's transport or adapter, ours included), else the caller's own span; with no span
recording, nothing is done.  Event names and attributes:

- ``smoothclient.retry``: ``smoothclient.origin``, ``smoothclient.attempt``,
  ``smoothclient.reason``, ``smoothclient.delay_s``, and the attempt's
  ``http.response.status_code`` or ``exception.type``;
- ``smoothclient.call_ended``: ``smoothclient.origin``, ``smoothclient.outcome`` (see
  :func:`~smoothclient.telemetry.outcome_of`), ``smoothclient.attempts``,
  ``smoothclient.total_wait_s``, ``smoothclient.pacer_wait_s``, and the final
  ``http.response.status_code``, ``smoothclient.gave_up`` or ``exception.type`` when there is
  one.

And what a pacer holds now, per origin, as observable gauges (:func:`observe_pacer`): the
same as the Prometheus ``PacerCollector``'s (``smoothclient.origin_down_seconds`` and the
others of :data:`~smoothclient.telemetry.PACER_GAUGES`, with a ``smoothclient.origin``
attribute).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import CallbackOptions, Meter, Observation
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is part of the test setup
    msg = "smoothclient.telemetry.OpenTelemetryHooks needs otel: pip install 'smoothclient[otel]'"
    raise ImportError(msg, name=exc.name) from exc

__all__ = ["OpenTelemetryHooks", "observe_pacer"]

Attributes = dict[str, str | int | float]


class OpenTelemetryHooks(Hooks):
    """Span events for each retry and for the end of each call (see the module)."""

    def on_retry(self, event: RetryEvent) -> None:
        """Add a ``smoothclient.retry`` event to the current span."""
        span = trace.get_current_span()
        if not span.is_recording():
            return
        attributes: Attributes = {
            "smoothclient.origin": event.origin,
            "smoothclient.attempt": event.attempt,
            "smoothclient.reason": event.reason,
            "smoothclient.delay_s": event.delay,
        }
        if event.status is not None:
            attributes["http.response.status_code"] = event.status
        if event.exception is not None:
            attributes["exception.type"] = type(event.exception).__qualname__
        span.add_event("smoothclient.retry", attributes)

    def on_success(self, ended: CallEnded) -> None:
        """Add a ``smoothclient.call_ended`` event to the current span."""
        self._ended(ended)

    def on_give_up(self, ended: CallEnded) -> None:
        """Add a ``smoothclient.call_ended`` event to the current span."""
        self._ended(ended)

    def _ended(self, ended: CallEnded) -> None:
        span = trace.get_current_span()
        if not span.is_recording():
            return
        record = ended.record
        attributes: Attributes = {
            "smoothclient.origin": ended.origin,
            "smoothclient.outcome": outcome_of(ended),
            "smoothclient.attempts": record.attempts,
            "smoothclient.total_wait_s": record.total_wait,
            "smoothclient.pacer_wait_s": float(sum(record.pacer_waits)),
            "smoothclient.held_for_outage_s": record.held_for_outage,
        }
        if ended.status is not None:
            attributes["http.response.status_code"] = ended.status
        if record.gave_up is not None:
            attributes["smoothclient.gave_up"] = record.gave_up
            attributes["smoothclient.give_up_why"] = give_up_of(ended)
        if ended.exception is not None:
            attributes["exception.type"] = type(ended.exception).__qualname__
        span.add_event("smoothclient.call_ended", attributes)


def observe_pacer(
    pacer: Pacer, *, meter: Meter | None = None, namespace: str = "smoothclient"
) -> None:
    """
    Observable gauges of what ``pacer`` holds now, per origin, read at each collection.

    ``meter``: where they are made (default: the global meter provider's ``smoothclient``
    meter).  Call it once per pacer and meter.
    """
    checked_namespace(namespace)
    pacer = checked_pacer(pacer)
    meter = meter or metrics.get_meter("smoothclient")
    for name, doc in PACER_GAUGES.items():
        meter.create_observable_gauge(
            f"{namespace}.{name}", callbacks=[_observer(pacer, name)], description=doc
        )


def _observer(pacer: Pacer, gauge: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(value, {"smoothclient.origin": origin})
            for name, origin, value in pacer_samples(pacer)
            if name == gauge
        ]

    return observe
