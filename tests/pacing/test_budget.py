"""Retry budgets as counts."""

from __future__ import annotations

from smoothclient import RetryBudget
from smoothclient.pacing.budget import BudgetCounts


def test_budget_counts() -> None:
    """At most ratio x requests + floor retries within the window."""
    counts = BudgetCounts(RetryBudget(ratio=0.1, min_per_second=0.0, window=10))
    for _ in range(100):
        counts.record_request(0.0)
    allowed = sum(counts.try_retry(0.5) for _ in range(50))
    assert allowed == 10
    assert counts.try_retry(20.0) is False  # old traffic fell out of the window
    counts.record_request(20.0)
    floor = BudgetCounts(RetryBudget(ratio=0.0, min_per_second=1.0, window=5))
    assert sum(floor.try_retry(0.0) for _ in range(10)) == 5


def test_a_healthy_spells_room_is_not_spent_in_one_burst_and_clawed_back() -> None:
    """
    Ten seconds at 60 first tries a second, then a brownout: retries every second.

    The burst takes what the healthy spell left (300 and more), charged to the spell's
    seconds: when they slide out of the window, the burst goes with them.  Charged to the
    seconds they were taken in, the burst outstayed what paid for it, and the retries
    stopped for seconds (180, 180, 180, 78, 0, 0, ...).
    """
    counts = BudgetCounts(RetryBudget(ratio=0.5, min_per_second=1.0, window=10))
    t = 0.0
    while t < 10:
        counts.record_request(t)
        t += 1 / 60
    per_second: list[int] = []
    while t < 25:  # the brownout: every attempt fails, and each call wants 3 retries
        second = 0
        for _ in range(60):
            counts.record_request(t)
            for _ in range(3):
                if not counts.try_retry(t):
                    break
                counts.record_request(t)
                second += 1
            t += 1 / 60
        per_second.append(second)
    assert min(per_second) >= 50  # never a second without retries (a half: one a first try)
    assert sum(per_second[5:]) <= 60 * len(per_second[5:]) + 20  # the ratio (and the reserve)


def test_late_times_keep_the_buckets_in_order() -> None:
    """An attempt counted at when it was sent, after newer ones, never breaks the window."""
    counts = BudgetCounts(RetryBudget(ratio=0.5, min_per_second=0.0, window=10.0))
    for i in range(200):
        counts.record_request(100.0 + i * 0.05)
        counts.record_request(92.0)  # sent long before, counted now
    seconds = [b[0] for b in counts.buckets]
    assert seconds == sorted(seconds)
    assert len(seconds) <= 11
    assert counts.try_retry(110.0)


def test_retries_taken_ahead_of_their_sends_fit_the_budget() -> None:
    """200 failed first attempts, each retry counted as an attempt when taken: all fit."""
    counts = BudgetCounts(RetryBudget(ratio=0.5, min_per_second=1.0, window=10.0))
    for _ in range(200):
        counts.record_request(1.0)  # the first attempts, all failed
    taken = 0
    for _ in range(200):  # every retry decided before any is sent (held by the pacer)
        if counts.try_retry(1.5):
            counts.record_request(1.5)  # counted when taken
            taken += 1
    assert taken == 200
