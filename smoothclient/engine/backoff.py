"""
Backoff windows and uniform placement in them (docs/window-math.md section 5), pure and seeded.

Every sampler takes an explicit :class:`random.Random`, so tests (yours and ours) can seed it
and assert exact values.  Backoff is a *window*: the cap bounds the window before sampling,
so saturated clients keep spreading over ``[0, cap]`` instead of piling up on the cap.
"""

from __future__ import annotations

import math
import random

from ..policy import JITTER_KINDS, JitterKind

__all__ = [
    "JITTER_KINDS",
    "JitterKind",
    "backoff_ceiling",
    "backoff_window",
    "sample_backoff",
    "uniform",
]

# (named in the policy, the bottom layer: the engine reads them from there)


def backoff_ceiling(attempt: int, *, initial: float, maximum: float, base: float = 2.0) -> float:
    """
    Return ``min(maximum, initial * base ** (attempt - 1))`` without overflowing.

    ``attempt`` counts failed attempts so far (1 after the first failure).
    """
    if attempt < 1 or initial <= 0:
        return min(max(initial, 0.0), maximum)
    # Compare in log space: base ** 10_000 overflows, but the cap has long been reached.
    if base <= 1 or math.log(maximum / initial) >= (attempt - 1) * math.log(base):
        return min(maximum, initial * base ** (attempt - 1))
    return maximum


def backoff_window(
    kind: JitterKind,
    attempt: int,
    *,
    initial: float,
    maximum: float,
    base: float = 2.0,
    previous: float | None = None,
) -> tuple[float, float]:
    """
    Return the ``(low, high)`` window the next backoff delay is drawn from.

    - ``full``: ``[0, c]`` with ``c = min(maximum, initial * base^(attempt-1))``.
    - ``equal``: ``[c / 2, c]``.
    - ``decorrelated``: ``[initial, min(maximum, 3 * previous)]`` (``previous`` defaults to
      ``initial``), the shape that keeps a fleet from re-aligning after an outage.
    - ``none``: ``[c, c]``; plain exponential, which re-synchronises a fleet: never the default.
    """
    if kind == "decorrelated":
        prev = initial if previous is None or previous <= 0 else previous
        return (min(initial, maximum), min(maximum, max(initial, prev * 3)))
    ceiling = backoff_ceiling(attempt, initial=initial, maximum=maximum, base=base)
    if kind == "full":
        return (0.0, ceiling)
    if kind == "equal":
        return (ceiling / 2, ceiling)
    if kind == "none":
        return (ceiling, ceiling)
    msg = f"jitter must be one of {', '.join(JITTER_KINDS)}, got {kind!r}"
    raise ValueError(msg)


def uniform(low: float, high: float, rng: random.Random) -> float:
    """Return a uniform draw from ``[low, high]`` (``low`` when the window is empty)."""
    if high <= low:
        return low
    return low + (high - low) * rng.random()


def sample_backoff(
    kind: JitterKind,
    attempt: int,
    *,
    initial: float,
    maximum: float,
    rng: random.Random,
    base: float = 2.0,
    previous: float | None = None,
) -> float:
    """Draw one backoff delay from :func:`backoff_window`."""
    low, high = backoff_window(
        kind, attempt, initial=initial, maximum=maximum, base=base, previous=previous
    )
    return uniform(low, high, rng)
