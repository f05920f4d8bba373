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
