"""Cost-aware pacing's pieces: the estimate, the usage read back, the running correction."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from smoothclient import Pacer
from smoothclient.edges.cost import CallCost, estimate_tokens, usage_of
from smoothclient.httpx2 import SmoothTransport
from smoothclient.testing import FakeClock


def test_estimate_is_a_quarter_of_the_body_plus_the_answers_cap() -> None:
    body = json.dumps({"messages": [{"content": "x" * 400}], "max_tokens": 50}).encode()
    assert estimate_tokens(body) == pytest.approx(len(body) / 4 + 50)
    assert estimate_tokens(b"x" * 40) == 10.0
    assert estimate_tokens(b'{"max_tokens": "lots"}') == pytest.approx(22 / 4)
    assert estimate_tokens(b"max_ but not json") == pytest.approx(17 / 4)


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        ({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}, 15.0),  # OpenAI
        ({"input_tokens": 10, "output_tokens": 7}, 17.0),  # Anthropic
        ({"prompt_tokens": 3, "completion_tokens": 4}, 7.0),
        ({"total_tokens": -1}, None),
        ({"total_tokens": True}, None),
        ("lots", None),
        (None, None),
    ],
)
def test_usage_read_from_each_vendors_answer(usage: Any, tokens: float | None) -> None:
    assert usage_of(json.dumps({"usage": usage}).encode()) == tokens


def test_usage_of_garbage_is_none() -> None:
    assert usage_of(b"not json") is None
    assert usage_of(b"[1, 2]") is None


def test_the_running_cost_follows_estimates_and_is_corrected_by_usage() -> None:
    cost = CallCost(lambda request: request)
    assert cost.per_call() is None
    assert cost.noted(100.0) == 100.0
    assert cost.per_call() == 100.0
    cost.noted(200.0)
    assert cost.per_call() == pytest.approx(120.0)  # an exponential average
    for _ in range(50):
        cost.used(100.0, 50.0)  # calls use half what was estimated
    assert cost.per_call() == pytest.approx(60.0, rel=1e-3)
    for _ in range(100):
        cost.used(1.0, 1e9)  # absurd usage: the correction stays bounded
    assert cost.scale == pytest.approx(10.0, rel=1e-3)


def test_a_bad_cost_function_is_no_estimate_and_never_breaks_a_call() -> None:
    def boom(request: object) -> float:
        raise ValueError("no")

    assert CallCost(boom).noted(object()) is None
    assert CallCost(lambda r: float("nan")).noted(object()) is None
    assert CallCost(lambda r: -5).noted(object()) is None
    with pytest.raises(TypeError, match="cost must be a function"):
        CallCost(5)  # type: ignore[arg-type]


def test_a_transport_with_cost_reads_usage_and_paces_tokens_as_calls(clock: FakeClock) -> None:
    """cost=: the token quota reads as calls (a scope of its own), the usage corrects it."""
    answer = {"usage": {"total_tokens": 500}}
    headers = {
        "x-ratelimit-limit-tokens": "10000",
        "x-ratelimit-remaining-tokens": "1000",
        "x-ratelimit-reset-tokens": "6m0s",
    }
    inner = httpx2.MockTransport(lambda r: httpx2.Response(200, json=answer, headers=headers))
    transport = SmoothTransport(
        inner, pacer=Pacer(clock=clock, probe=0), sleep=clock.sleep, cost=lambda r: 250.0
    )
    with httpx2.Client(transport=transport) as client:
        response = client.post("https://api.test/v1/chat/completions", json={})
    assert response.json() == answer  # still readable by the caller
    assert transport._cost is not None
    assert transport._cost.per_call() == pytest.approx(250.0 * (1 + 0.2))  # moved towards 500
