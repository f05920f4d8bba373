"""
The virtual-time simulators themselves: the limiters' laws and a small run of each scenario.

The herds that test the pacer against them (``tests/pacing``, marked ``herd``) run untraced by
coverage; these small runs are what counts the simulators' own lines.
"""

from __future__ import annotations

import math

import pytest

from smoothclient.tools.limiters import (
    STYLES,
    Concurrency,
    FixedWindow,
    Limiter,
    MovingWindow,
    Noisy,
    PenaltyBox,
    Style,
    TokenBucket,
    Verdict,
    headers_for,
    run_herd,
)


def _admitted(limiter: Limiter, times: list[float]) -> list[bool]:
    return [limiter.hit(t).admitted for t in times]


def test_a_token_bucket_admits_its_burst_then_one_per_interval() -> None:
    bucket = TokenBucket(10, burst=2)
    assert _admitted(bucket, [0.0, 0.0, 0.0, 0.05, 0.1]) == [True, True, False, False, True]
    assert bucket.ideal(12) == pytest.approx(1.0)


def test_a_fixed_window_counts_its_refusals_unless_told_not_to() -> None:
    counting = FixedWindow(2, 1.0)
    assert _admitted(counting, [0.0, 0.1, 0.2]) == [True, True, False]
    assert counting.hit(0.3).remaining == 0
    assert counting.hit(1.0).admitted  # a new window at the first hit after the last ended
    lenient = FixedWindow(2, 1.0, count_rejected=False, reset_bias=1.0, truncated=True)
    assert _admitted(lenient, [0.0, 0.1, 0.2]) == [True, True, False]
    verdict = lenient.hit(0.5)
    assert verdict.reset_in == pytest.approx(1.5)  # a second late, as slowapi states it
    assert verdict.retry_in == 1.0  # and truncated
    assert counting.ideal(5) == 2.0


def test_a_moving_window_admits_what_its_last_window_leaves_room_for() -> None:
    window = MovingWindow(2, 1.0)
    assert _admitted(window, [0.0, 0.5, 0.9, 1.0, 1.2, 1.5]) == [
        True,
        True,
        False,
        True,
        False,
        True,
    ]
    assert window.ideal(4) == 1.0


def test_a_penalty_box_stays_shut_while_knocked_on() -> None:
    box = PenaltyBox(2, 1.0)
    knocks = [0.0, 0.1, 0.2, 0.8, 1.15, 1.5]
    assert _admitted(box, knocks) == [True, True, False, False, False, False]
    assert box.hit(3.0).admitted  # a quiet window later
    assert box.ideal(4) == 1.0


def test_a_concurrency_limit_frees_a_place_when_one_is_done() -> None:
    limit = Concurrency(2, service=0.1)
    assert _admitted(limit, [0.0, 0.0, 0.0]) == [True, True, False]
    limit.done()
    assert limit.hit(0.1).admitted
    assert limit.ideal(5) == pytest.approx(0.3)


def test_noise_refuses_about_its_share_whatever_the_rate() -> None:
    noisy = Noisy(0.3, seed=1)
    refused = sum(not noisy.hit(0.0).admitted for _ in range(2000))
    assert 500 <= refused <= 700
    assert noisy.ideal(100) == 0.0


@pytest.mark.parametrize("style", STYLES)
def test_each_style_states_what_its_libraries_send(style: Style) -> None:
    refused = Verdict(False, 0, 0.4, 0.4)
    names = {name for name, _ in headers_for(TokenBucket(5), refused, style, wall=lambda: 1e9)}
    assert "Date" in names
    assert ("RateLimit" in names) == (style == "ietf")
    assert ("X-RateLimit-Reset" in names) == (style in ("x", "github"))
    assert ("Retry-After" in names) == (style != "bare")


def test_a_small_herd_through_the_pacer_ends_and_is_counted() -> None:
    pytest.importorskip("trio")
    result = run_herd(TokenBucket(20, burst=2), "ietf", 6, procs=2, stagger=0.01, spread=0.005)
    assert result.calls == 12
    assert result.failed == 0
    assert result.sent >= result.calls
    assert result.ratio >= 0.9  # nobody beats the limiter's own ideal
    assert 0.0 <= result.extra_429s_per_call <= result.rejected / result.calls


def test_a_herd_behind_a_concurrency_limit_or_a_slow_backend_ends() -> None:
    pytest.importorskip("trio")
    crowded = run_herd(Concurrency(2, service=0.05), "bare", 4)
    assert crowded.failed == 0
    assert crowded.elapsed >= 0.1  # two waves of two
    gateway = run_herd(TokenBucket(50, burst=2), "retry-after", 4, service=0.02, retry_after=0.1)
    assert gateway.failed == 0
    assert gateway.elapsed >= 0.02


def test_a_small_outage_is_measured_in_both_kinds_of_server() -> None:
    pytest.importorskip("trio")
    from smoothclient.tools.outages import run_outage

    bucket = run_outage(procs=1, rate=5.0, down=(0.5, 1.0), end=2.0, retry_after=0.5)
    assert bucket.calls >= 5
    assert 0 <= bucket.failed <= bucket.calls
    assert bucket.load_during() >= 0.0
    assert bucket.peak_after() * bucket.capacity >= 1  # somebody came back
    assert bucket.goodput(1.0, 2.0) > 0
    pool = run_outage(procs=2, rate=5.0, down=(0.5, 1.0), end=2.0, workers=2, shared=True)
    assert pool.served
    assert math.isfinite(pool.failed_share)
