"""
Helpers for tests: a fake clock, seeded randomness, and a no-wait testing mode.

In your own test suite::

    import smoothclient.testing

    def test_my_client():
        with smoothclient.testing.testing_mode(attempts=2):
            ...  # smoothclient retries at most twice and never sleeps

The mode is process-wide but entirely yours: nothing turns it on unless you do.
"""

from __future__ import annotations

import random
import threading

__all__ = ["FakeClock", "TestingMode", "current", "seeded", "set_testing", "testing_mode"]


class FakeClock:
    """
    A clock that only moves when told to, usable as ``clock=``, ``sleep=`` and ``timer=``.

    Calling the instance returns the current time; :meth:`sleep` (and :meth:`async_sleep`)
    advance it instead of waiting and record each duration in :attr:`sleeps`.
    """

    def __init__(self, start: float = 0.0) -> None:
        """Start at ``start`` seconds."""
        self._now = float(start)
        self._lock = threading.Lock()
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        """Return the current fake time."""
        return self._now

    def time(self) -> float:
        """Return the current fake time (alias for calling the clock)."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (>= 0)."""
        if seconds < 0:
            msg = f"a clock cannot go backwards (advance by {seconds!r})"
            raise ValueError(msg)
        with self._lock:
            self._now += seconds

    tick = advance

    def sleep(self, seconds: float) -> None:
        """Record ``seconds`` and advance the clock by it, without waiting."""
        self.sleeps.append(seconds)
        self.advance(max(0.0, seconds))

    async def async_sleep(self, seconds: float) -> None:
        """Async twin of :meth:`sleep`."""
        self.sleep(seconds)


def seeded(seed: int = 0) -> random.Random:
    """A fresh :class:`random.Random` seeded with ``seed``, for reproducible jitter."""
    return random.Random(seed)


# the testing mode lives at the bottom of the package, where the edges read it
from ._mode import TestingMode, current, set_testing, testing_mode  # noqa: E402
