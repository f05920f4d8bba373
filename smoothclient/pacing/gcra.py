"""
The generic cell rate algorithm (GCRA): a token bucket kept as one timestamp.

A bucket of ``burst`` tokens refilled at ``rate`` per second is the same thing as a
*theoretical arrival time* ``tat``: a request may go at ``max(now, tat - (burst - 1) / rate)``
and moves ``tat`` one interval on.  One timestamp per bucket, no refill loop, and the same few
lines serve the pacer's mirror of a server's limiter, ``@paced`` and the demo server.  Pure:
no lock and no clock; the caller passes ``now`` and holds whatever lock it needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Gcra"]


@dataclass(slots=True)
class Gcra:
    """
    A token bucket of ``burst`` tokens at ``rate`` per second (``rate=None``: unlimited).

    >>> bucket = Gcra(rate=10.0, burst=2.0)
    >>> [round(bucket.reserve(0.0), 6) for _ in range(4)]
    [0.0, 0.0, 0.1, 0.2]
    """

    burst: float = 1.0
    tat: float = -math.inf
    #: Seconds per token; 0 when unlimited (kept rather than the rate: it is what is read).
    interval: float = 0.0

    def __init__(self, rate: float | None = None, burst: float = 1.0) -> None:
        """A full bucket."""
        self.burst = burst
        self.tat = -math.inf
        self.interval = 0.0
        self.rate = rate

    @property
    def rate(self) -> float | None:
        """Tokens per second (``None``: unlimited)."""
        return 1.0 / self.interval if self.interval else None

    @rate.setter
    def rate(self, rate: float | None) -> None:
        self.interval = 1.0 / rate if rate else 0.0

    def earliest(self, now: float) -> float:
        """When the next request may go, no earlier than ``now``."""
        if not self.interval:
            return now
        return max(now, self.tat - (self.burst - 1) * self.interval)

    def take(self, at: float) -> None:
        """Spend the token of a request that goes at ``at``."""
        if self.interval:
            self.tat = max(self.tat, at) + self.interval

    def reserve(self, now: float) -> float:
        """Reserve the next slot: seconds from ``now`` until it."""
        at = self.earliest(now)
        self.take(at)
        return at - now

    def tokens(self, now: float) -> float:
        """Tokens in the bucket at ``now`` (fractional; ``burst`` when full or unlimited)."""
        if not self.interval:
            return self.burst
        return self.burst - max(0.0, self.tat - now) / self.interval

    def set_tokens(self, now: float, tokens: float) -> None:
        """Make the bucket hold ``tokens`` at ``now`` (what a server reports is left)."""
        if self.interval:
            self.tat = now + (self.burst - tokens) * self.interval
