from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smoothclient import InfeasibleWindow, SmoothError
from smoothclient.window import (
    drain_time,
    economic_window,
    minimum_window,
    overflow_safe_rate,
)


def test_seed_rate_bound() -> None:
    """50,000 clients over 2,000 req/s of headroom need 25 s."""
    w = minimum_window(50_000, 2_000)
    assert w.width == 25.0
    assert w.binding.name == "rate"
    assert w.start == 0.0


def test_seed_concurrency_bound() -> None:
    """0.2 s service time over 400 spare connections also gives 25 s."""
    w = minimum_window(50_000, 10_000, service_time=0.2, connections=400)
    assert w.width == pytest.approx(25.0)
    assert w.binding.name == "concurrency"
    assert {b.name for b in w.lower_bounds} == {"rate", "concurrency"}


def test_seed_overflow_rate() -> None:
    """H = 2000, eps = 1% admits about 1899 req/s, about 5% more window (not 10%)."""
    lam = overflow_safe_rate(2000, 0.01)
    assert lam == pytest.approx(1899, abs=1)
    w = minimum_window(50_000, 2_000, overflow=0.01)
    assert w.binding.name == "overflow"
    assert w.width / 25.0 == pytest.approx(1.053, abs=0.002)


def _poisson_tail(lam: float, n: int) -> float:
    cdf = sum(math.exp(-lam) * lam**k / math.factorial(k) for k in range(n + 1))
    return 1 - cdf


@pytest.mark.parametrize("headroom", [1, 5, 20, 49])
def test_small_headroom_uses_exact_poisson(headroom: int) -> None:
    """Below H = 50 the bound is the exact Poisson tail, tight to the tolerance."""
    lam = overflow_safe_rate(headroom, 0.01)
    assert _poisson_tail(lam, headroom) <= 0.01 + 1e-9
    assert _poisson_tail(lam * 1.001, headroom) > 0.01


def test_normal_approximation_is_close_to_exact_at_the_switch() -> None:
    """At H = 50 the normal approximation agrees with the exact tail within 2%."""
    approx = overflow_safe_rate(50, 0.01)
    exact = overflow_safe_rate(49.999, 0.01)  # floor(49.999) = 49, exact branch
    assert approx == pytest.approx(exact, rel=0.05)


def test_retry_after_shifts_and_deadline_limits() -> None:
    """Retry-After shifts the start; the deadline bounds start + width."""
    w = minimum_window(1_000, 100, retry_after=5, deadline=30)
    assert (w.start, w.width, w.end) == (5.0, 10.0, 15.0)
    assert w.upper_bounds[0].value == 25.0
    assert w.p95_delay == pytest.approx(5 + 9.5)
    assert w.mean_delay == 10.0
    assert w.rate == 100.0


def test_quota_admits_a_slower_rate() -> None:
    """50 remaining over 10 s admits 5 req/s: 100 requests need 20 s."""
    w = minimum_window(100, 1_000, remaining=50, reset=10)
    assert w.binding.name == "rate-limit"
    assert w.width == 20.0


def test_exhausted_quota_shifts_to_reset() -> None:
    """0 remaining means the window starts at the reset."""
    w = minimum_window(100, 10, remaining=0, reset=7, retry_after=3)
    assert w.start == 7.0


def test_infeasible_names_both_bounds() -> None:
    """An infeasible request raises InfeasibleWindow naming the conflicting bounds."""
    with pytest.raises(InfeasibleWindow) as info:
        minimum_window(50_000, 2_000, p95_sla=10)
    message = str(info.value)
    assert "rate" in message
    assert "p95" in message
    assert isinstance(info.value, SmoothError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"cohort": -1, "headroom": 1}, ValueError),
        ({"cohort": 1, "headroom": 0}, ValueError),
        ({"cohort": "many", "headroom": 1}, TypeError),
        ({"cohort": 1, "headroom": 1, "service_time": 0.2}, ValueError),
        ({"cohort": 1, "headroom": 1, "remaining": 3}, ValueError),
        ({"cohort": 1, "headroom": math.nan}, ValueError),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        minimum_window(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("eps", [0, 1, -0.1, 2])
def test_overflow_must_be_a_probability(eps: float) -> None:
    with pytest.raises(ValueError, match="overflow"):
        overflow_safe_rate(100, eps)


def test_economic_window() -> None:
    """W* = sqrt(2 c_cap / c_wait), clamped into [minimum, maximum]."""
    assert economic_window(8, 1) == 4.0
    assert economic_window(8, 1, minimum=10) == 10.0
    assert economic_window(8, 1, maximum=3) == 3.0
    with pytest.raises(InfeasibleWindow):
        economic_window(8, 1, minimum=5, maximum=3)


def test_economic_window_minimises_cost() -> None:
    """The optimum beats its neighbours on C(W)."""
    c_cap, c_wait, m = 3.0, 0.5, 1000.0
    best = economic_window(c_cap, c_wait)

    def cost(w: float) -> float:
        return c_cap * m / w + c_wait * m * w / 2

    assert cost(best) < cost(best * 1.01)
    assert cost(best) < cost(best * 0.99)


def test_drain_time_constant_and_ramp() -> None:
    """Constant headroom gives M / H; a linear ramp H(t) = t gives sqrt(2 M)."""
    assert drain_time(50_000, 2_000) == 25.0
    assert drain_time(50, lambda t: t) == pytest.approx(10.0, rel=1e-6)
    assert drain_time(0, lambda t: 1.0) == 0.0


def test_drain_time_that_never_ends() -> None:
    with pytest.raises(InfeasibleWindow):
        drain_time(10, lambda t: 0.0, horizon=100)


@given(
    cohort=st.floats(0, 1e7),
    headroom=st.floats(1e-3, 1e6),
    overflow=st.floats(1e-6, 0.5),
)
def test_width_is_the_largest_lower_bound(cohort: float, headroom: float, overflow: float) -> None:
    w = minimum_window(cohort, headroom, overflow=overflow)
    assert w.width == max(b.value for b in w.lower_bounds)
    assert w.width >= cohort / headroom
