"""
Adapters from the policy's hooks to metrics and tracing systems.

Each adapter is a :class:`Hooks`: three methods, one per hook of
:class:`~smoothclient.RetryPolicy` (``on_retry``, ``on_success``, ``on_give_up``), and
:meth:`Hooks.apply` to put them on a policy (after the hooks it already has, which still
run).  A new adapter goes in a module of this package of its own, importing its library there
only (each is an extra).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from .._lazy import namespace
from ..events import CallEnded, RetryEvent
from ..policy import DEFAULT_POLICY, RetryPolicy

if TYPE_CHECKING:
    from ..pacing.pacer import Pacer
    from .otel import OpenTelemetryHooks, observe_pacer
    from .prometheus import PacerCollector, PrometheusHooks

__all__ = [
    "PACER_GAUGES",
    "Hooks",
    "OpenTelemetryHooks",
    "PacerCollector",
    "PrometheusHooks",
    "checked_namespace",
    "checked_pacer",
    "give_up_of",
    "observe_pacer",
    "outcome_of",
    "pacer_samples",
]
#: The adapters, each loaded on first use (each needs its extra).
NAMES: dict[str, str] = {
    "OpenTelemetryHooks": "otel",
    "observe_pacer": "otel",
    "PacerCollector": "prometheus",
    "PrometheusHooks": "prometheus",
}
__getattr__ = namespace(__name__, NAMES, globals(), {"otel": "otel", "prometheus": "prometheus"})

E = TypeVar("E")


def outcome_of(ended: CallEnded) -> str:
    """
    How a call ended, as a small fixed set (a metric label).

    ``"success"``; ``"cached"`` (answered by the HTTP cache alone: a hit, or a stale response
    served while revalidated); ``"status"`` (an error status returned); ``"error"`` (an
    exception after sending); ``"unsent"`` (given up before the first attempt).
    """
    if ended.record.cache in ("hit", "stale") and ended.record.attempts == 0:
        return "cached"
    if ended.succeeded:
        return "success"
    if ended.record.attempts == 0:
        return "unsent"
    return "error" if ended.exception is not None else "status"


def give_up_of(ended: CallEnded) -> str:
    """
    Why a call gave up, as a small fixed set (a metric label); ``""`` when it did not.

    ``"budget"`` (the retry budget was spent: the origin fails too much to retry),
    ``"outage"`` (the origin is down and the next probe is past the deadline), ``"closed"``
    (a quota the server said is spent resets past the deadline), ``"attempts"``,
    ``"deadline"``, ``"max_retry_after"``, ``"not_idempotent"``, ``"not_replayable"``, or
    ``"other"`` (a status or error not retried, the server said not to retry; or a record
    made by hand that does not say).
    """
    record = ended.record
    if record.gave_up is None:
        return ""
    return record.gave_up_kind or "other"


#: The gauges of what a pacer holds now, per origin (:func:`pacer_samples`): name and help.
PACER_GAUGES: dict[str, str] = {
    "origin_down_seconds": "Seconds the origin has failed every request (0: up)",
    "origin_closed_seconds": "Seconds a quota stated spent stays closed",
    "origin_retries_left": "Retries the origin's retry budget allows now",
    "origin_rate": "The rate the origin is paced at (requests per second)",
    "origin_waiting": "Requests waiting for a slot",
    "origin_in_flight": "Requests sent and not yet answered",
}


def checked_namespace(namespace: Any) -> str:
    """``namespace``, a metrics' name prefix, if it is a non-empty string; else ``TypeError``."""
    if not isinstance(namespace, str) or not namespace:
        msg = f"namespace must be a non-empty string, not {namespace!r}"
        raise TypeError(msg)
    return namespace


def checked_pacer(pacer: Any) -> Pacer:
    """``pacer``, if it has views of its origins; else ``TypeError``."""
    if not callable(getattr(pacer, "view", None)) or not callable(getattr(pacer, "origins", None)):
        msg = f"pacer must be a smoothclient Pacer, not {type(pacer).__name__}"
        raise TypeError(msg)
    result: Pacer = pacer
    return result


def pacer_samples(pacer: Pacer) -> Iterator[tuple[str, str, float]]:
    """
    ``(gauge, origin, value)`` for each origin the pacer remembers and each of its gauges.

    Read from :meth:`Pacer.view <smoothclient.Pacer.view>` (through a shared store, the
    fleet's state); an origin whose view fails is skipped, a gauge with no value (an unpaced
    origin's rate, a budget never counted) is left out.
    """
    for origin in pacer.origins():
        try:
            view = pacer.view(origin)
        except Exception:  # a scrape never fails for one origin
            continue
        values = {
            "origin_down_seconds": view.down_for or 0.0,
            "origin_closed_seconds": view.closed_for or 0.0,
            "origin_retries_left": view.retries_left,
            "origin_rate": view.rate,
            "origin_waiting": float(view.waiting),
            "origin_in_flight": float(view.in_flight),
        }
        for name, value in values.items():
            if value is not None:
                yield name, origin, value


def _both(first: Callable[[E], Any] | None, then: Callable[[E], Any]) -> Callable[[E], Any]:
    """A hook calling ``first`` (if any), then ``then``."""
    if first is None:
        return then

    def hook(event: E) -> None:
        first(event)
        then(event)

    return hook


class Hooks:
    """The base of the adapters: hooks that do nothing until a subclass says what."""

    def on_retry(self, event: RetryEvent) -> None:
        """Before each wait for a retry."""

    def on_success(self, ended: CallEnded) -> None:
        """When a call ends with a success."""

    def on_give_up(self, ended: CallEnded) -> None:
        """When a call ends any other way."""

    def apply(self, policy: RetryPolicy | None = None) -> RetryPolicy:
        """
        ``policy`` (default ``DEFAULT_POLICY``) with these hooks added.

        The hooks it had run first, then these: adapters stack
        (``b.apply(a.apply(policy))``).
        """
        base = policy or DEFAULT_POLICY
        if not isinstance(base, RetryPolicy):
            msg = f"policy must be a RetryPolicy, not {type(base).__name__}"
            raise TypeError(msg)
        return base.replace(
            on_retry=_both(base.on_retry, self.on_retry),
            on_success=_both(base.on_success, self.on_success),
            on_give_up=_both(base.on_give_up, self.on_give_up),
        )
