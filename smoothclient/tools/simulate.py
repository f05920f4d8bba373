"""
``smoothclient simulate``: a herd in virtual time, no sleeping, seconds to run.

``clients`` requests arrive at once at a server admitting ``headroom`` req/s (a token bucket
holding 0.1 s of headroom).  Rejected requests retry per strategy:

- ``none``: again after one round trip (50 ms): a retry storm;
- ``fixed``: exactly ``Retry-After`` (1 s) later: the herd comes back whole;
- ``full``: full-jitter exponential backoff, ``U(0, min(30, 0.1 * 2^n))``;
- ``shift-widen``: ``Retry-After`` shifts the window and the cohort widens it to
  ``waiting / headroom``, smoothclient's rule.

A fluid model (fractional request counts, 10 ms ticks, prefix-sum spreading) keeps 100,000
clients fast.  It reports the peak-to-average arrival rate, the drain time and its ratio to the
minimum ``M / H``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["STRATEGIES", "SimResult", "simulate"]

STRATEGIES = ("none", "fixed", "full", "shift-widen")
TICK = 0.01
RTT = 0.05
RETRY_AFTER = 1.0
MAX_ATTEMPT = 30


@dataclass(frozen=True, slots=True)
class SimResult:
    """What one simulated strategy did."""

    strategy: str
    clients: int
    headroom: float
    attempts: float
    drain_time: float
    peak_per_second: float
    first_second: float

    @property
    def minimum(self) -> float:
        """The minimum drain time ``M / H``."""
        return self.clients / self.headroom

    @property
    def drain_ratio(self) -> float:
        """Drain time over the minimum."""
        return self.drain_time / self.minimum

    @property
    def peak_to_average(self) -> float:
        """Peak arrivals in one second over the mean, both after the first second (the herd)."""
        span = self.drain_time - 1.0
        mean = (self.attempts - self.first_second) / span if span > 0 else 0.0
        return self.peak_per_second / mean if mean else 0.0


def _window(strategy: str, attempt: int, waiting: float, headroom: float) -> tuple[float, float]:
    if strategy == "none":
        return RTT, RTT
    if strategy == "fixed":
        return RETRY_AFTER, RETRY_AFTER
    if strategy == "full":
        return 0.0, min(30.0, 0.1 * 2**attempt)
    return RETRY_AFTER, RETRY_AFTER + max(waiting / headroom, 0.1 * 2**attempt)


def simulate(clients: int, headroom: float, strategy: str, *, horizon: float = 1000.0) -> SimResult:
    """Simulate ``clients`` simultaneous requests against ``headroom`` req/s."""
    if strategy not in STRATEGIES:
        msg = f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}"
        raise ValueError(msg)
    if clients <= 0 or headroom <= 0:
        msg = "clients and headroom must be > 0"
        raise ValueError(msg)
    ticks = int(horizon / TICK)
    # diff[a][t]: change in the arrival density of attempt-a retries at tick t
    diff = [[0.0] * (ticks + 2) for _ in range(MAX_ATTEMPT + 1)]
    density = [0.0] * (MAX_ATTEMPT + 1)
    arrivals_now = [0.0] * (MAX_ATTEMPT + 1)
    arrivals_now[0] = float(clients)
    capacity, burst = headroom * TICK, headroom * 0.1
    tokens, served, total, waiting = burst, 0.0, 0.0, 0.0
    per_second: dict[int, float] = {}
    drained_at = horizon
    for t in range(ticks):
        tokens = min(burst, tokens + capacity)
        for a in range(MAX_ATTEMPT + 1):
            density[a] += diff[a][t]
            arrivals_now[a] += density[a]
        arriving = sum(arrivals_now)
        total += arriving
        second = int(t * TICK)
        per_second[second] = per_second.get(second, 0.0) + arriving
        admitted = min(arriving, tokens)
        tokens -= admitted
        served += admitted
        waiting = clients - served
        if waiting <= 1e-6:
            drained_at = (t + 1) * TICK
            break
        rejected_share = 1 - admitted / arriving if arriving else 0.0
        for a in range(MAX_ATTEMPT + 1):
            rejected = arrivals_now[a] * rejected_share
            arrivals_now[a] = 0.0
            if rejected > 0:
                nxt = min(a + 1, MAX_ATTEMPT)
                lo, hi = _window(strategy, a, waiting, headroom)
                start = t + 1 + int(lo / TICK)
                width = max(1, int((hi - lo) / TICK))
                if start + width >= ticks:
                    continue
                diff[nxt][start] += rejected / width
                diff[nxt][start + width] -= rejected / width
    # the first second holds the herd itself, the same for every strategy: leave it out
    peak = max((v for k, v in per_second.items() if k > 0), default=0.0)
    return SimResult(strategy, clients, headroom, total, drained_at, peak, per_second.get(0, 0.0))
