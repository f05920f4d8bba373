"""PrometheusHooks: made twice on one registry, and labels that stay few whatever servers say."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.registry import Collector

from smoothclient import CallEnded, CallRecord, Pacer, RetryBudget, RetryPolicy, SmoothTransport
from smoothclient.events import RetryEvent
from smoothclient.telemetry import PrometheusHooks, give_up_of
from smoothclient.telemetry.prometheus import REASONS, reason_of, status_class
from smoothclient.testing import FakeClock


@pytest.fixture
def default_registry() -> Iterator[list[PrometheusHooks]]:
    """Hooks made on the global REGISTRY, unregistered after the test."""
    made: list[PrometheusHooks] = []
    yield made
    collectors = {id(c): c for h in made for c in collectors_of(h)}
    for collector in collectors.values():
        REGISTRY.unregister(collector)


def collectors_of(hooks: PrometheusHooks) -> tuple[Collector, ...]:
    """The collectors of ``hooks``."""
    return (
        hooks.calls,
        hooks.attempts,
        hooks.retries,
        hooks.call_wait,
        hooks.retry_delay,
        hooks.give_ups,
        hooks.held,
    )


def test_hooks_made_twice_on_the_default_registry_share_its_metrics(
    default_registry: list[PrometheusHooks],
) -> None:
    """A second PrometheusHooks() used to raise DuplicateTimeseries (ValueError)."""
    first = PrometheusHooks(namespace="twice")
    default_registry.append(first)
    second = PrometheusHooks(namespace="twice")
    default_registry.append(second)
    assert second.calls is first.calls
    assert second.retries is first.retries
    event = RetryEvent("https://a.test:443", 1, 0.5, "status 503", status=503)
    first.on_retry(event)
    second.on_retry(event)
    labels = {"origin": "https://a.test:443", "reason": "server_error", "status_class": "5xx"}
    assert REGISTRY.get_sample_value("twice_retries_total", labels) == 2


def test_metrics_unregistered_since_are_registered_afresh() -> None:
    """A registry that lost the metrics gets new ones, not the dropped collectors."""
    registry = CollectorRegistry()
    first = PrometheusHooks(registry=registry)
    for collector in collectors_of(first):
        registry.unregister(collector)
    second = PrometheusHooks(registry=registry)
    assert second.calls is not first.calls
    third = PrometheusHooks(registry=registry)
    assert third.calls is second.calls


def test_names_taken_by_other_collectors_still_raise_and_leave_nothing_behind() -> None:
    """Someone else's collector under our name: ValueError, and none of ours registered."""
    registry = CollectorRegistry()
    Counter("retries", "not ours", namespace="smoothclient", registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        PrometheusHooks(registry=registry)
    assert registry.get_sample_value("smoothclient_calls_total", {}) is None
    names = {metric.name for metric in registry.collect()}
    assert names == {"smoothclient_retries"}


def test_different_arguments_for_the_same_metrics_are_refused() -> None:
    """Sharing needs the same label set and buckets: a clear ValueError otherwise."""
    registry = CollectorRegistry()
    PrometheusHooks(registry=registry, buckets=(0.1, 1.0))
    with pytest.raises(ValueError, match=r"buckets=\(0.1, 1.0\)"):
        PrometheusHooks(registry=registry, buckets=(0.5,))
    PrometheusHooks(registry=registry, namespace="other", buckets=(0.5,))  # its own metrics


@pytest.mark.parametrize(
    ("event", "reason", "status"),
    [
        (RetryEvent("o", 1, 0.1, "status 429", status=429), "rate_limited", "4xx"),
        (RetryEvent("o", 1, 0.1, "status 503", status=503), "server_error", "5xx"),
        (RetryEvent("o", 1, 0.1, "status 408", status=408), "status", "4xx"),
        (RetryEvent("o", 1, 0.1, "status 503"), "server_error", "5xx"),  # made without status
        (RetryEvent("o", 1, 0.1, "connect error", exception=OSError()), "transport", ""),
        (RetryEvent("o", 1, 0.1, "timeout error", exception=OSError()), "transport", ""),
        (RetryEvent("o", 1, 0.1, "other error", exception=ValueError()), "error", ""),
        (RetryEvent("o", 1, 0.1, "result error"), "result", ""),
        (RetryEvent("o", 1, 0.1, "something new"), "error", ""),
    ],
)
def test_each_retry_has_a_reason_kind_and_a_status_class(
    event: RetryEvent, reason: str, status: str
) -> None:
    """The reason label is a kind of :data:`REASONS`; the status goes in as its class."""
    assert reason_of(event) == reason
    assert reason in REASONS
    registry = CollectorRegistry()
    PrometheusHooks(registry=registry).on_retry(event)
    labels = {"origin": "o", "reason": reason, "status_class": status}
    assert registry.get_sample_value("smoothclient_retries_total", labels) == 1


def test_retry_labels_stay_bounded_whatever_the_statuses() -> None:
    """Every status from 0 to 999 and every error kind: a handful of label values, no more."""
    registry = CollectorRegistry()
    hooks = PrometheusHooks(registry=registry, origin_label=False)
    for status in range(1000):
        hooks.on_retry(RetryEvent("o", 1, 0.1, f"status {status}", status=status))
    for kind in ("connect", "timeout", "read", "write", "protocol", "other", "result"):
        hooks.on_retry(RetryEvent("o", 1, 0.1, f"{kind} error"))
    (family,) = (m for m in registry.collect() if m.name == "smoothclient_retries")
    label_sets = {
        (s.labels["reason"], s.labels["status_class"])
        for s in family.samples
        if s.name.endswith("_total")
    }
    assert {reason for reason, _ in label_sets} <= set(REASONS)
    classes = {cls for _, cls in label_sets}
    assert classes == {"", "1xx", "2xx", "3xx", "4xx", "5xx", "other"}
    assert len(label_sets) <= 12
    assert status_class(None) == ""


def _gave_up(
    answer: Callable[[httpx.Request], httpx.Response],
    policy: RetryPolicy,
    method: str = "GET",
    calls: int = 1,
) -> list[str]:
    """The ``why`` of each call's give-up, through a real transport on a fake clock."""
    clock = FakeClock(1000.0)
    seen: list[str] = []

    def hook(ended: CallEnded) -> None:
        seen.append(give_up_of(ended))

    transport = SmoothTransport(
        httpx.MockTransport(answer),
        policy=policy.replace(on_give_up=hook),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as client:
        for _ in range(calls):
            with contextlib.suppress(httpx.HTTPError):
                client.request(method, "https://api.test/x")
    return seen


def test_why_a_call_gave_up_is_told_from_the_engines_own_reasons() -> None:
    """The label set holds against the words the engine and the call flow really write."""
    failing = lambda request: httpx.Response(503)  # noqa: E731
    assert _gave_up(failing, RetryPolicy(attempts=2, budget=None)) == ["attempts"]
    assert _gave_up(failing, RetryPolicy(budget=None), method="POST") == ["not_idempotent"]
    stingy = RetryBudget(ratio=0.0, min_per_second=0.0)
    assert _gave_up(failing, RetryPolicy(attempts=3, budget=stingy)) == ["budget"]
    down = _gave_up(failing, RetryPolicy(budget=None, max_retry_after=0.1), calls=10)
    assert down[-1] == "outage"  # refused unsent: the origin fails everything

    def spent(request: httpx.Request) -> httpx.Response:
        headers = {"x-ratelimit-limit": "30", "x-ratelimit-remaining": "0"}
        return httpx.Response(429, headers={**headers, "x-ratelimit-reset-after": "50"})

    assert _gave_up(spent, RetryPolicy(timeout=2), calls=2)[-1] == "closed"


def test_give_ups_are_counted_by_why() -> None:
    registry = CollectorRegistry()
    hooks = PrometheusHooks(registry=registry, origin_label=False)
    record = CallRecord(
        attempts=3, gave_up="status 503: the retry budget is spent", gave_up_kind="budget"
    )
    hooks.on_give_up(CallEnded("https://api.test:443", record, status=503))
    made_by_hand = CallRecord(attempts=3, gave_up="the retry budget is spent")
    assert give_up_of(CallEnded("https://api.test:443", made_by_hand)) == "other"
    hooks.on_give_up(CallEnded("https://api.test:443", CallRecord(attempts=1), status=404))
    held = CallRecord(attempts=1, held_for_outage=1.5)
    hooks.on_success(CallEnded("https://api.test:443", held, status=200))
    assert registry.get_sample_value("smoothclient_give_ups_total", {"why": "budget"}) == 1
    assert registry.get_sample_value("smoothclient_give_ups_total", {"why": "other"}) is None
    assert registry.get_sample_value("smoothclient_held_seconds_total", {}) == 1.5
