"""
Retry budgets as plain counts: requests and retries per second over a sliding window.

Pure: no lock, no clock; the store that holds the counts applies :func:`try_retry` (check
and take in one step) under its own lock, or as one server-side script.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ..policy import RetryBudget

__all__ = ["BudgetCounts"]


@dataclass(slots=True)
class BudgetCounts:
    """Counts of attempts and retries in one-second buckets over ``budget.window`` seconds."""

    budget: RetryBudget
    buckets: deque[list[float]] = field(default_factory=deque)

    def _bucket(self, now: float) -> list[float]:
        second = math.floor(now)
        if self.buckets and second < self.buckets[-1][0]:
            # a time older than the newest second (an attempt counted at when it was sent,
            # after others): counted in the newest, so the buckets stay in order (appended
            # out of order, they grew without end and the budget read as spent)
            second = int(self.buckets[-1][0])
        horizon = second - self.budget.window
        while self.buckets and self.buckets[0][0] <= horizon:
            self.buckets.popleft()
        if not self.buckets or self.buckets[-1][0] != second:
            self.buckets.append([second, 0.0, 0.0])
        return self.buckets[-1]

    def record_request(self, now: float) -> None:
        """Count one attempt (first tries and retries alike)."""
        buckets = self.buckets
        if buckets and buckets[-1][0] <= now < buckets[-1][0] + 1:
            buckets[-1][1] += 1  # the common case: this second's bucket (every request's)
            return
        self._bucket(now)[1] += 1

    def room(self, now: float) -> float:
        """How many retries the budget allows now (its counts untouched: a view's)."""
        horizon = math.floor(now) - self.budget.window
        live = [b for b in self.buckets if b[0] > horizon]
        budget = self.budget
        allowed = budget.ratio * sum(b[1] for b in live) + budget.min_per_second * budget.window
        return max(0.0, allowed - sum(b[2] for b in live))

    def has_room(self, now: float) -> bool:
        """Whether one more retry fits the budget now."""
        self._bucket(now)
        return self.room(now) >= 1

    def try_retry(self, now: float) -> bool:
        """
        Take room for one retry if the budget has it; return whether it did.

        The retry is charged to the oldest second whose requests still leave room for one,
        so that it leaves the window with the requests that paid for it; only beyond them
        (the ``min_per_second`` reserve) to this second.  Charged to this second always, a
        healthy spell's room paid for a burst of retries when failures began, the spell slid
        out of the window while the burst stayed in it, and the retries stopped until the
        burst slid out too: at the end of a ten-second brownout (``benchmarks/outage.py``) a
        fleet sharing one budget held its retries up to a second while the server, admitting
        more than the fleet's first tries, sat idle.
        """
        if not self.has_room(now):
            return False
        ratio = self.budget.ratio
        horizon = math.floor(now) - self.budget.window
        for bucket in self.buckets:
            if bucket[0] > horizon and ratio * bucket[1] - bucket[2] >= 1:
                bucket[2] += 1
                return True
        self.buckets[-1][2] += 1  # (has_room made this second's bucket the newest)
        return True
