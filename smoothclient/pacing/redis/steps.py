"""
The steps of a :class:`~.tracker.RedisTracker`, each defined once as a generator of trips.

Every step is the pure transition of :mod:`..state` or :mod:`..learning`, what the in-memory
fallback does instead when Redis is down, and, for a slot, what "busy" means (others wrote
first for longer than the timeout: ask again in a moment).  The sync driver
(:func:`~..store.run`) and the async one (:func:`~..store.run_async`) take their round trips.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from ...engine.decide import CohortView
from ...hints.model import Hints
from ...policy import RetryBudget
from .. import admission as adm
from .. import learning
from .. import state as st
from ..state import Admission, OriginState, Settings
from ..store import MemoryTracker, Steps, done

__all__ = ["RedisSteps", "Stepper"]

T = TypeVar("T")


class Stepper(Protocol):
    """What the steps need of the tracker that runs them (a ``RedisTracker``)."""

    settings: Settings
    state: OriginState

    def _step(
        self,
        step: Callable[[OriginState], T],
        fallback: Callable[[MemoryTracker], T],
        busy: Callable[[], T] | None = None,
    ) -> Steps[T]: ...  # pragma: no cover - a protocol

    def _read(
        self, look: Callable[[OriginState], T], fresh: bool
    ) -> Steps[T]: ...  # pragma: no cover - a protocol

    def defer(
        self,
        answer: Callable[[OriginState], object],
        counted: bool,
        fallback: Callable[[MemoryTracker], object],
    ) -> bool: ...  # pragma: no cover - a protocol


class RedisSteps:
    """
    A :class:`RedisTracker`'s steps, each defined once as a generator of round trips.

    The pure transition (:mod:`..state`, :mod:`..learning`), what the fallback does instead, and
    what "busy" means for it.
    """

    __slots__ = ("t",)

    def __init__(self, tracker: Stepper) -> None:
        self.t = tracker

    def healthy(self, now: float) -> Steps[bool]:
        return self.read(lambda o: adm.healthy(o, now))

    def try_now(self, now: float) -> Steps[bool]:
        s = self.t.settings
        return self.t._step(
            lambda o: adm.try_now(o, s, now), lambda f: f.try_now(now), lambda: False
        )

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]:
        s = self.t.settings
        return self.read(lambda o: adm.when(o, s, now, not_before, deadline))

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]:
        s = self.t.settings
        return self.t._step(
            lambda o: adm.acquire(o, s, now, not_before, deadline),
            lambda f: f.acquire(now, not_before=not_before, deadline=deadline),
            lambda: Admission(st.PROBE_POLL, final=False),  # ask again in a moment
        )

    def observe(
        self,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> Steps[None]:
        s = self.t.settings

        def learn(counted: bool) -> Callable[[OriginState], None]:
            return lambda o: learning.observe(
                o, s, status, hints, now, sent_at=sent_at, counted=counted
            )

        def fallback(f: MemoryTracker) -> None:
            f.observe(status, hints, now, sent_at=sent_at, counted=counted)

        if learning.can_wait(self.t.state, status, hints) and self.t.defer(
            learn(False), counted, fallback
        ):
            return done(None)  # on the copy now, to Redis with the next step
        return self.t._step(learn(counted), fallback)

    def cohort(self, now: float) -> Steps[CohortView]:
        return self.read(lambda o: adm.cohort(o, now))

    def record_attempt(self, budget: RetryBudget, now: float) -> Steps[None]:
        return self.t._step(
            lambda o: o.budget(budget).record_request(now),
            lambda f: f.record_attempt(budget, now),
        )

    def try_retry(self, budget: RetryBudget, now: float) -> Steps[bool]:
        return self.t._step(
            lambda o: o.budget(budget).try_retry(now),
            lambda f: f.try_retry(budget, now),
        )

    def update(self, step: Callable[[OriginState], T]) -> Steps[T]:
        return self.t._step(step, lambda f: f.update(step))

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> Steps[T]:
        return self.t._read(look, fresh)
