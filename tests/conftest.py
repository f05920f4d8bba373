from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from smoothclient import testing
from smoothclient.testing import FakeClock

settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000.0)


@pytest.fixture
def rng() -> random.Random:
    return random.Random(1234)


@pytest.fixture(autouse=True)
def _no_testing_mode() -> Iterator[None]:
    testing.set_testing(False)
    yield
    testing.set_testing(False)


@pytest.fixture(autouse=True)
def _herds_untraced(request: pytest.FixtureRequest) -> Iterator[None]:
    """
    A test marked ``herd`` runs without the trace function (coverage's, under ``make test``).

    Such a test drives thousands of requests through the whole pacer in virtual time, and line
    tracing tripled its time: the herds took over half of ``make test``.  Its lines are not
    counted as covered, so the coverage floor measures the other tests (each law's unit tests
    and the end-to-end ones): the stricter count.
    """
    if request.node.get_closest_marker("herd") is None:
        yield
        return
    trace, thread_trace = sys.gettrace(), threading.gettrace()
    sys.settrace(None)
    threading.settrace(None)  # (threads a herd starts)
    try:
        yield
    finally:
        threading.settrace(thread_trace)
        sys.settrace(trace)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e is end-to-end (``make test-fast`` leaves it out)."""
    for item in items:
        if "e2e" in item.path.parts:
            item.add_marker(pytest.mark.e2e)
