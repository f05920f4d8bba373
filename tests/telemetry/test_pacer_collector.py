"""What a pacer holds now, per origin, as Prometheus gauges read from its views."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from smoothclient import Hints, Pacer, RetryBudget
from smoothclient.telemetry import PacerCollector
from smoothclient.testing import FakeClock

ORIGIN = "https://api.test:443"


def _sample(registry: CollectorRegistry, name: str, origin: str = ORIGIN) -> float | None:
    return registry.get_sample_value(f"smoothclient_{name}", {"origin": origin})


def test_an_origin_down_and_its_budget_spent_show_in_the_gauges(clock: FakeClock) -> None:
    pacer = Pacer(clock=clock, probe=0)
    registry = CollectorRegistry()
    registry.register(PacerCollector(pacer))
    tracker = pacer.track(ORIGIN)
    budget = RetryBudget(ratio=0.1, min_per_second=0.0, window=10)
    for _ in range(20):
        tracker.record_attempt(budget, clock())
    assert _sample(registry, "origin_retries_left") == pytest.approx(2.0)
    assert _sample(registry, "origin_down_seconds") == 0.0
    for i in range(12):  # every request fails for a second: down
        if i:
            clock.advance(0.1)
        tracker.observe(503, Hints(), clock(), counted=False)
    assert tracker.try_retry(budget, clock())
    assert tracker.try_retry(budget, clock())
    clock.advance(0.2)
    assert _sample(registry, "origin_retries_left") == 0.0
    assert _sample(registry, "origin_down_seconds") == pytest.approx(0.2, abs=0.06)
    assert _sample(registry, "origin_waiting") == 0.0
    assert _sample(registry, "origin_rate") is None  # unpaced: not reported


def test_a_spent_quota_shows_closed_and_a_rate_paced(clock: FakeClock) -> None:
    pacer = Pacer(clock=clock, probe=0)
    registry = CollectorRegistry()
    registry.register(PacerCollector(pacer, namespace="smoothclient"))
    tracker = pacer.track(ORIGIN)
    tracker.observe(200, Hints(remaining=5, limit=30, reset_after=50.0), clock(), counted=False)
    tracker.observe(429, Hints(remaining=0, limit=30, reset_after=50.0), clock(), counted=False)
    closed = _sample(registry, "origin_closed_seconds")
    assert closed is not None
    assert 40 < closed <= 50
    rate = _sample(registry, "origin_rate")
    assert rate is not None
    assert rate > 0
    assert _sample(registry, "origin_retries_left") is None  # no budget counted here


def test_without_the_origin_label_nothing_is_reported_and_bad_arguments_raise(
    clock: FakeClock,
) -> None:
    pacer = Pacer(clock=clock)
    pacer.track(ORIGIN).observe(200, Hints(), clock(), counted=False)
    registry = CollectorRegistry()
    registry.register(PacerCollector(pacer, origin_label=False))
    assert _sample(registry, "origin_waiting") is None
    with pytest.raises(TypeError, match="namespace"):
        PacerCollector(pacer, namespace="")
    with pytest.raises(TypeError, match="Pacer"):
        PacerCollector(object())  # type: ignore[arg-type]


def test_the_same_gauges_are_observable_in_opentelemetry(clock: FakeClock) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

    from smoothclient.telemetry import observe_pacer

    pacer = Pacer(clock=clock, probe=0)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    observe_pacer(pacer, meter=provider.get_meter("test"))
    tracker = pacer.track(ORIGIN)
    for i in range(12):  # every request fails for a second: down
        if i:
            clock.advance(0.1)
        tracker.observe(503, Hints(), clock(), counted=False)
    clock.advance(0.2)
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        metric.name: [
            (p.attributes, p.value)
            for p in metric.data.data_points
            if isinstance(p, NumberDataPoint)  # (a gauge's)
        ]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    [(attributes, down)] = points["smoothclient.origin_down_seconds"]
    assert attributes == {"smoothclient.origin": ORIGIN}
    assert down == pytest.approx(0.2, abs=0.06)
    assert "smoothclient.origin_rate" not in points or not points["smoothclient.origin_rate"]
    with pytest.raises(TypeError, match="Pacer"):
        observe_pacer(object())  # type: ignore[arg-type]
    provider.shutdown()
