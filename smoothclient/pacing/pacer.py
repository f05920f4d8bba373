"""
:class:`Pacer`: per-origin shared state that keeps a client ahead of the server's limits.

One pacer may serve any number of transports and adapters, from threads and event loops at
once.  For each origin it keeps a mirror of the server's limiter, learned from the headers of
every response (:func:`smoothclient.read_hints`):

- a **gate**: closed until ``Retry-After`` or an exhausted quota's reset, for everyone;
- a **pace**: when the server states a rate (``RateLimit-Policy`` ``q/w``, ``X-RateLimit-Limit``
  over its window) or the remaining quota runs low, requests get *slots* at the admitted rate
  (a GCRA token bucket with the burst the server reports), so a cohort that waited on the gate
  arrives at the rate the server accepts, not together;
- a **learned rate** when the server says nothing but throttles: cut on each throttle,
  grown on success, dropped after a quiet spell;
- a **probe** on cold start: while the first response from a new origin is outstanding,
  other concurrent requests wait for it (at most ``probe`` seconds) so they can be paced.

A healthy origin (quota far from exhausted, or no quota at all) gets no delay whatsoever.
The rules are pure functions in :mod:`smoothclient.pacing.state`; the state lives in a store
(:mod:`smoothclient.pacing.store`), in this process by default.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from .._validate import positive_int, seconds
from .state import OriginView, Settings
from .store import MemoryStore, Store, Tracker

__all__ = ["Pacer", "PacerLike"]


@runtime_checkable
class PacerLike(Protocol):
    """What the edges need of a pacer: a clock and a tracker per origin."""

    clock: Callable[[], float]

    def track(self, origin: str) -> Tracker:
        """The tracker of ``origin``, marked recently used."""

    @property
    def peek(self) -> Callable[[str], Tracker | None]:
        """The tracker of an origin if it has state; cheap."""


class Pacer:
    """
    Per-origin gates, cohorts and admitted rates, shared safely by threads and event loops.

    Args:
        max_origins: how many origins to remember (least recently used are forgotten).
        probe: on cold start, how long concurrent requests wait for the first response of a new
            origin (0 disables the probe).
        learned_floor: the lowest learned rate, in req/s.
        quiet: seconds without throttling after which a learned rate is dropped.
        max_gate: the longest any server hint may hold an origin's requests back (a buggy or
            hostile ``Retry-After: 999999`` is read as this).
        clock: a monotonic clock (injectable for tests).
    """

    def __init__(
        self,
        *,
        max_origins: int = 1024,
        probe: float = 0.25,
        learned_floor: float = 0.5,
        quiet: float = 30.0,
        max_gate: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Create an empty pacer."""
        self.max_origins = positive_int("max_origins", max_origins)
        self.settings = Settings(
            probe=seconds("probe", probe),
            learned_floor=seconds("learned_floor", learned_floor, allow_zero=False),
            quiet=seconds("quiet", quiet, allow_zero=False),
            max_gate=seconds("max_gate", max_gate, allow_zero=False),
        )
        if not callable(clock):
            msg = f"clock must be a callable returning seconds, not {type(clock).__name__}"
            raise TypeError(msg)
        self.clock = clock
        self._store: Store = MemoryStore(self.settings, max_keys=self.max_origins)
        #: The tracker of an origin if it has state (the fast lane's cheap look; no lock).
        self.peek: Callable[[str], Tracker | None] = self._store.peek

    def __repr__(self) -> str:
        """Show how many origins are tracked."""
        return f"<Pacer origins={len(self._store.keys())}>"

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the settings only: what the pacer learned belongs to the process that did."""
        s = self.settings
        return {
            "max_origins": self.max_origins,
            "probe": s.probe,
            "learned_floor": s.learned_floor,
            "quiet": s.quiet,
            "max_gate": s.max_gate,
            "clock": self.clock,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle as a fresh pacer with the same settings (so a pickled session works)."""
        Pacer.__init__(self, **state)

    def track(self, origin: str) -> Tracker:
        """The tracker of ``origin`` (the edges' way in), marked recently used."""
        return self._store.tracker(origin)

    def view(self, origin: str) -> OriginView:
        """A snapshot of ``origin``'s state."""
        return self._store.tracker(origin).view(self.clock())

    def origins(self) -> list[str]:
        """The origins currently remembered, least recently used first."""
        return self._store.keys()
