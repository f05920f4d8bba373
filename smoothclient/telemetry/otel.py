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
"""

from __future__ import annotations

from ..events import CallEnded, RetryEvent
from . import Hooks, give_up_of, outcome_of

try:
    from opentelemetry import trace
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is part of the test setup
    msg = "smoothclient.telemetry.OpenTelemetryHooks needs otel: pip install 'smoothclient[otel]'"
    raise ImportError(msg, name=exc.name) from exc

__all__ = ["OpenTelemetryHooks"]

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
