"""The Prometheus and OpenTelemetry adapters, on the real client libraries, through the edges."""

from __future__ import annotations

import httpx
import pytest
import requests
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from smoothclient import CallEnded, Pacer, RetryPolicy, SmoothAdapter, SmoothTransport, retry
from smoothclient.events import CallRecord
from smoothclient.telemetry import Hooks, OpenTelemetryHooks, PrometheusHooks, outcome_of
from smoothclient.testing import FakeClock

ORIGIN = "https://api.test:443"
POLICY = RetryPolicy(attempts=3, wait_initial=0.01, max_retry_after=5)


def client(clock: FakeClock, policy: RetryPolicy, answers: list[int]) -> httpx.Client:
    sent = iter(answers)
    transport = SmoothTransport(
        httpx.MockTransport(lambda request: httpx.Response(next(sent))),
        policy=policy,
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    return httpx.Client(transport=transport)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_prometheus_counts_calls_attempts_retries_and_waits(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusHooks(registry=registry)
    http = client(clock, metrics.apply(POLICY), [503, 200, 404, 503, 503, 503])
    assert http.get(f"{ORIGIN}/a").status_code == 200
    assert http.get(f"{ORIGIN}/b").status_code == 404
    assert http.get(f"{ORIGIN}/c").status_code == 503

    def calls(outcome: str) -> float:
        return value(registry, "smoothclient_calls_total", origin=ORIGIN, outcome=outcome)

    assert calls("success") == 1
    assert calls("status") == 2
    attempts = "smoothclient_attempts_total"
    assert value(registry, attempts, origin=ORIGIN, outcome="success") == 2
    assert value(registry, attempts, origin=ORIGIN, outcome="status") == 4
    retries = value(
        registry,
        "smoothclient_retries_total",
        origin=ORIGIN,
        reason="server_error",
        status_class="5xx",
    )
    assert retries == 3
    delays = "smoothclient_retry_delay_seconds_count"
    assert value(registry, delays, origin=ORIGIN) == 3
    waited = value(registry, "smoothclient_call_wait_seconds_sum", origin=ORIGIN, outcome="status")
    assert waited > 0


def test_prometheus_without_the_origin_label_and_on_retry(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusHooks(registry=registry, origin_label=False, namespace="jobs")
    runs = 0

    @retry(on=OSError, policy=metrics.apply(POLICY), sleep=clock.sleep, clock=clock)
    def job() -> str:
        nonlocal runs
        runs += 1
        if runs < 2:
            raise OSError("flaky")
        return "ok"

    assert job() == "ok"
    assert value(registry, "jobs_calls_total", outcome="success") == 1
    assert value(registry, "jobs_retries_total", reason="error", status_class="") == 1
    assert value(registry, "jobs_retry_delay_seconds_count") == 1
    again = PrometheusHooks(registry=registry, origin_label=False, namespace="jobs")
    assert again.calls is metrics.calls  # the same metrics, shared
    with pytest.raises(ValueError, match="origin_label=False"):
        PrometheusHooks(registry=registry, origin_label=True, namespace="jobs")
    with pytest.raises(TypeError, match="namespace"):
        PrometheusHooks(registry=registry, namespace="")


def test_adapters_stack_after_the_hooks_a_policy_has(clock: FakeClock) -> None:
    seen: list[str] = []
    registry = CollectorRegistry()
    policy = PrometheusHooks(registry=registry).apply(
        RetryPolicy(on_success=lambda e: seen.append("mine"))
    )
    http = client(clock, policy, [200])
    http.get(f"{ORIGIN}/")
    assert seen == ["mine"]
    assert value(registry, "smoothclient_calls_total", origin=ORIGIN, outcome="success") == 1
    with pytest.raises(TypeError, match="RetryPolicy"):
        Hooks().apply({"attempts": 2})  # type: ignore[arg-type]


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_opentelemetry_adds_events_to_the_current_span(
    clock: FakeClock, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    http = client(clock, OpenTelemetryHooks().apply(POLICY), [503, 200])
    with provider.get_tracer("test").start_as_current_span("fetch"):
        assert http.get(f"{ORIGIN}/a").status_code == 200
    (span,) = exporter.get_finished_spans()
    names = [event.name for event in span.events]
    assert names == ["smoothclient.retry", "smoothclient.call_ended"]
    retried, ended = (dict(event.attributes or {}) for event in span.events)
    assert retried["smoothclient.reason"] == "status 503"
    assert retried["http.response.status_code"] == 503
    assert retried["smoothclient.attempt"] == 1
    assert ended["smoothclient.outcome"] == "success"
    assert ended["smoothclient.attempts"] == 2
    assert ended["http.response.status_code"] == 200


def test_opentelemetry_on_the_requests_adapter_and_a_give_up(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    session = requests.Session()
    adapter = SmoothAdapter(
        policy=OpenTelemetryHooks().apply(RetryPolicy(attempts=2, wait_initial=0.01))
    )
    session.mount("http://", adapter)
    with (
        provider.get_tracer("test").start_as_current_span("fetch"),
        pytest.raises(requests.ConnectionError),
    ):
        session.get("http://127.0.0.1:9/", timeout=0.5)  # the discard port: refused
    (span,) = exporter.get_finished_spans()
    ended = dict(span.events[-1].attributes or {})
    assert ended["smoothclient.outcome"] == "error"
    assert str(ended["exception.type"]).endswith("ConnectionError")


def test_opentelemetry_does_nothing_without_a_recording_span(clock: FakeClock) -> None:
    http = client(clock, OpenTelemetryHooks().apply(POLICY), [503, 200])
    assert http.get(f"{ORIGIN}/a").status_code == 200  # no span: no error, nothing recorded


def test_outcome_of_each_way_a_call_ends() -> None:
    assert outcome_of(CallEnded("o", CallRecord(attempts=1), status=200)) == "success"
    assert outcome_of(CallEnded("o", CallRecord(attempts=1), status=404)) == "status"
    assert outcome_of(CallEnded("o", CallRecord(attempts=2), exception=OSError())) == "error"
    assert outcome_of(CallEnded("o", CallRecord(gave_up="closed"), exception=OSError())) == "unsent"
    assert outcome_of(CallEnded("o", CallRecord(attempts=0, cache="hit"), status=200)) == "cached"
    assert outcome_of(CallEnded("o", CallRecord(attempts=0, cache="stale"), status=200)) == "cached"
    revalidated = CallRecord(attempts=1, cache="revalidated")
    assert outcome_of(CallEnded("o", revalidated, status=200)) == "success"


def test_prometheus_counts_an_http_cache_hit_as_cached(clock: FakeClock) -> None:
    """The second GET of a fresh response is the cache's: no attempt, outcome ``cached``."""
    from smoothclient import HttpCache

    registry = CollectorRegistry()
    metrics = PrometheusHooks(registry=registry)
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, headers={"Cache-Control": "max-age=60"}, content=b"x")

    transport = SmoothTransport(
        httpx.MockTransport(answer),
        policy=metrics.apply(POLICY),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
        cache=HttpCache(clock=clock),
    )
    with httpx.Client(transport=transport) as http:
        assert http.get(f"{ORIGIN}/doc").status_code == 200
        hit = http.get(f"{ORIGIN}/doc")
        assert hit.status_code == 200
        assert hit.read() == b"x"
    assert len(sent) == 1

    def calls(outcome: str) -> float:
        return value(registry, "smoothclient_calls_total", origin=ORIGIN, outcome=outcome)

    assert calls("success") == 1
    assert calls("cached") == 1
    assert value(registry, "smoothclient_attempts_total", origin=ORIGIN, outcome="success") == 1
