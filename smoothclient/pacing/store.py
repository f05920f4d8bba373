"""
The store seam: where pacing state lives, behind a small protocol of atomic operations.

A :class:`Store` hands out one :class:`Tracker` per key (an origin, or ``"origin scope"`` for
one scope of it: :mod:`.scopes`); every method of a
tracker is one atomic step on that key's state: the transitions of :mod:`.state`, applied
under the key's lock in memory, or as one server-side script in a shared store.  The edges
and the call flow talk to trackers only, so a new store (Redis, ...) slots in here without
touching them.

**Steps that do I/O** (a shared store's round trips) are written once, as generators that
yield :class:`Trip` requests and receive their replies (:data:`Steps`); a sync driver
(:func:`run`, what a tracker's plain methods use) and an async one (:func:`run_async`, what
async edges on asyncio use: the event loop never blocks) take the trips.  A tracker with such
steps exposes them as ``tracker.steps`` (a :class:`Stepwise`); :func:`stepwise` gives every
tracker one (a store with no I/O answers at once, yielding nothing).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Generator
from typing import Any, NamedTuple, Protocol, TypeAlias, TypeVar, runtime_checkable

from ..engine.decide import CohortView
from ..hints.model import Hints
from ..policy import RetryBudget
from . import admission as adm
from . import learning
from .budget import BudgetCounts
from .keys import LruMap
from .state import Admission, OriginState, OriginView, Settings

__all__ = [
    "Immediate",
    "MemoryStore",
    "MemoryTracker",
    "Steps",
    "Stepwise",
    "Store",
    "Tracker",
    "Trip",
    "answer",
    "answer_async",
    "boxed",
    "done",
    "in_thread",
    "on_asyncio",
    "run",
    "run_async",
    "stepwise",
]

T = TypeVar("T")


class Carrier(Protocol):
    """What takes a store's round trips: the sync way and the async way (see :class:`Trip`)."""

    def send(self, trip: Trip) -> Any:
        """The reply to ``trip``, here and now (bounded); raises if the store failed."""

    async def send_async(self, trip: Trip) -> Any:
        """The reply to ``trip`` without blocking the event loop (bounded); raises likewise."""


class Trip(NamedTuple):
    """One round trip a step asks for: ``op`` (a script's name) on ``keys`` with ``args``."""

    carrier: Carrier
    op: str
    keys: list[str]
    args: list[Any]


#: A step written once for every driver: yields trips, receives replies, returns its result.
#: A failed trip is thrown into it (the carrier's exception), so it falls back where it stands.
Steps: TypeAlias = Generator[Trip, Any, T]


def done(value: T) -> Steps[T]:
    """A step that needs no round trip: ``value`` at once."""
    return value
    yield  # pragma: no cover - a generator that yields nothing


def answer(steps: Generator[Any, Any, Any], trip: Trip) -> Any:
    """
    Take ``trip`` with its carrier's sync client: what ``steps`` yields next.

    A failed trip is thrown into ``steps`` (the step itself decides: falls back, never
    raises).  Every sync driver takes its trips this way (:func:`run`, the call flow's).
    """
    try:
        reply = trip.carrier.send(trip)
    except Exception as exc:
        return steps.throw(exc)
    return steps.send(reply)


def run(steps: Steps[T]) -> T:
    """Drive ``steps`` in this thread: each trip by its carrier's sync client."""
    try:
        trip = next(steps)
        while True:
            trip = answer(steps, trip)
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        steps.close()


def boxed(fn: Callable[[], Any]) -> tuple[bool, Any]:
    """
    ``(True, what fn() yields next)``, or ``(False, the result)`` when the generator ends.

    No ``StopIteration`` may leave a coroutine (it turns into ``RuntimeError``) or cross a
    thread: what advances a generator from one goes through this.
    """
    try:
        return True, fn()
    except StopIteration as stop:
        return False, stop.value


async def answer_async(steps: Generator[Any, Any, Any], trip: Trip) -> tuple[bool, Any]:
    """
    Take ``trip`` on the running event loop: what ``steps`` yields next (:func:`boxed`).

    The async way of :func:`answer`: awaited on the carrier's loop client, never blocking
    the loop; a failed trip is thrown into ``steps``.
    """
    try:
        reply = await trip.carrier.send_async(trip)
    except Exception as exc:
        return boxed(functools.partial(steps.throw, exc))
    return boxed(functools.partial(steps.send, reply))


async def run_async(steps: Steps[T]) -> T:
    """Drive ``steps`` on the running event loop: each trip awaited, never blocking it."""
    try:
        going, value = boxed(steps.__next__)
        while going:
            going, value = await answer_async(steps, value)
        result: T = value
        return result
    finally:
        steps.close()  # cancelled mid-trip: the step's own cleanup runs (GeneratorExit)


def on_asyncio() -> bool:
    """Whether this runs on an asyncio loop (``redis.asyncio`` runs there, not on trio)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def in_thread(fn: Callable[[], T]) -> T:
    """
    ``fn()`` in a worker thread: a shared store's round trips, off an event loop they would block.

    Where :func:`run_async` cannot take them (trio: ``redis.asyncio`` runs on asyncio only).
    """
    try:
        import anyio.to_thread  # httpx brings it
    except ImportError:  # pragma: no cover - trio without httpx
        import trio

        result: T = await trio.to_thread.run_sync(fn)
        return result
    return await anyio.to_thread.run_sync(fn)


@runtime_checkable
class Tracker(Protocol):
    """Atomic operations on one key's pacing state (every ``now`` on the pacer's clock)."""

    @property
    def healthy(self) -> Callable[[float], bool]:
        """Whether a request needs no admission at all at ``now`` (a cheap, lock-free read)."""

    def try_now(self, now: float) -> bool:
        """Admit one request at once if a slot is free now (counted in flight)."""

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        """Reserve a slot no earlier than ``not_before`` (counted waiting if granted)."""

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        """What :meth:`acquire` would answer, reserving nothing."""

    def sent(self) -> None:
        """An admitted request is now on the wire."""

    def cancel(self) -> None:
        """An admitted request will not be sent."""

    def adopt(self) -> None:
        """Count a request sent on the fast lane as in flight."""

    def failed(self) -> None:
        """A request on the wire ended without a response."""

    @property
    def note_success(self) -> Callable[[float], None]:
        """Note a plain success at ``now`` on a healthy key (the fast lane's only bookkeeping)."""

    def observe(
        self,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> None:
        """Learn from one response."""

    def cohort(self, now: float) -> CohortView:
        """What the retry engine needs to know of the cohort."""

    def record_attempt(self, budget: RetryBudget, now: float) -> None:
        """Count one attempt toward ``budget``."""

    def try_retry(self, budget: RetryBudget, now: float) -> bool:
        """Take room for one retry from ``budget`` if it has it (check and take at once)."""

    def view(self, now: float) -> OriginView:
        """A snapshot, for monitoring."""

    def update(self, step: Callable[[OriginState], T]) -> T:
        """Apply ``step`` (a pure function of the state) as one atomic step; its result."""

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> T:
        """
        ``look`` at the state (which it must not change); its result.

        ``fresh``: a shared store reads the state now, not a copy it may trust a moment.
        """


class Stepwise(Protocol):
    """A tracker's steps that may do I/O, as :data:`Steps` (same meaning as on :class:`Tracker`)."""

    def healthy(self, now: float) -> Steps[bool]: ...  # pragma: no cover - a protocol

    def try_now(self, now: float) -> Steps[bool]: ...  # pragma: no cover - a protocol

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]: ...  # pragma: no cover - a protocol

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]: ...  # pragma: no cover - a protocol

    def observe(
        self,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> Steps[None]: ...  # pragma: no cover - a protocol

    def cohort(self, now: float) -> Steps[CohortView]: ...  # pragma: no cover - a protocol

    def record_attempt(
        self, budget: RetryBudget, now: float
    ) -> Steps[None]: ...  # pragma: no cover - a protocol

    def try_retry(
        self, budget: RetryBudget, now: float
    ) -> Steps[bool]: ...  # pragma: no cover - a protocol

    def update(
        self, step: Callable[[OriginState], T]
    ) -> Steps[T]: ...  # pragma: no cover - a protocol

    def read(
        self, look: Callable[[OriginState], T], *, fresh: bool = False
    ) -> Steps[T]: ...  # pragma: no cover - a protocol


class Immediate:
    """The :class:`Stepwise` of a tracker that does no I/O: each step answers at once."""

    __slots__ = ("tracker",)

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    def healthy(self, now: float) -> Steps[bool]:
        return done(self.tracker.healthy(now))

    def try_now(self, now: float) -> Steps[bool]:
        return done(self.tracker.try_now(now))

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]:
        return done(self.tracker.acquire(now, not_before=not_before, deadline=deadline))

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]:
        return done(self.tracker.when(now, not_before=not_before, deadline=deadline))

    def observe(
        self,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> Steps[None]:
        self.tracker.observe(status, hints, now, sent_at=sent_at, counted=counted)
        return done(None)

    def cohort(self, now: float) -> Steps[CohortView]:
        return done(self.tracker.cohort(now))

    def record_attempt(self, budget: RetryBudget, now: float) -> Steps[None]:
        self.tracker.record_attempt(budget, now)
        return done(None)

    def try_retry(self, budget: RetryBudget, now: float) -> Steps[bool]:
        return done(self.tracker.try_retry(budget, now))

    def update(self, step: Callable[[OriginState], T]) -> Steps[T]:
        return done(self.tracker.update(step))

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> Steps[T]:
        return done(self.tracker.read(look, fresh=fresh))


def stepwise(tracker: Tracker) -> Stepwise:
    """``tracker``'s steps as generators: its own (``tracker.steps``), else :class:`Immediate`."""
    steps: Stepwise | None = getattr(tracker, "steps", None)
    return Immediate(tracker) if steps is None else steps


class Store(Protocol):
    """Where the trackers' state lives."""

    def tracker(self, key: str) -> Tracker:
        """The tracker of ``key`` (state made if missing), marked recently used."""

    @property
    def peek(self) -> Callable[[str], Tracker | None]:
        """The tracker of an origin's key if its state exists; cheap, for the fast lane."""

    def keys(self) -> list[str]:
        """The keys whose state is kept, least recently used first."""

    def forget(self, key: str) -> None:
        """Drop ``key``'s state kept here (a scope its origin no longer names)."""


class MemoryTracker:
    """A :class:`Tracker` over state in this process, guarded by a lock of its own."""

    __slots__ = ("_counts", "healthy", "key", "lock", "note_success", "settings", "state")

    def __init__(self, key: str, settings: Settings) -> None:
        """Fresh state for ``key``."""
        self.key = key
        self.settings = settings
        self.state = OriginState()
        self.lock = threading.Lock()
        # the fast lane's two calls, bound to the state once (lock-free; see OriginState)
        self.healthy: Callable[[float], bool] = functools.partial(adm.healthy, self.state)
        self.note_success: Callable[[float], None] = self.state.succeeded
        self._counts: tuple[RetryBudget, BudgetCounts] | None = None  # the last budget's

    def try_now(self, now: float) -> bool:
        with self.lock:
            return adm.try_now(self.state, self.settings, now)

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        with self.lock:
            return adm.acquire(self.state, self.settings, now, not_before, deadline)

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        with self.lock:
            return adm.when(self.state, self.settings, now, not_before, deadline)

    def sent(self) -> None:
        with self.lock:
            self.state.waiting = max(0, self.state.waiting - 1)
            self.state.in_flight += 1

    def cancel(self) -> None:
        with self.lock:
            self.state.waiting = max(0, self.state.waiting - 1)

    def adopt(self) -> None:
        with self.lock:
            self.state.in_flight += 1

    def failed(self) -> None:
        with self.lock:
            self.state.in_flight = max(0, self.state.in_flight - 1)
            self.state.known = True

    def observe(
        self,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> None:
        with self.lock:
            learning.observe(
                self.state, self.settings, status, hints, now, sent_at=sent_at, counted=counted
            )

    def cohort(self, now: float) -> CohortView:
        with self.lock:
            return adm.cohort(self.state, now)

    def record_attempt(self, budget: RetryBudget, now: float) -> None:
        # lock-free, like note_success: on the healthy lane of every request (a lock cost a
        # microsecond or more); a race may lose one count, which only tightens the budget.
        # The last budget's counts are kept at hand: hashing the budget is most of the cost
        last = self._counts
        if last is None or last[0] is not budget:
            last = self._counts = (budget, self.state.budget(budget))
        last[1].record_request(now)

    def try_retry(self, budget: RetryBudget, now: float) -> bool:
        with self.lock:
            return self.state.budget(budget).try_retry(now)

    def view(self, now: float) -> OriginView:
        with self.lock:
            return adm.view(self.key, self.state, now)

    def update(self, step: Callable[[OriginState], T]) -> T:
        with self.lock:
            return step(self.state)

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> T:
        with self.lock:
            return look(self.state)


class MemoryStore:
    """
    The default store: state in this process, shared by its threads and event loops.

    Origins' keys and scopes' keys (``"origin scope"``) are kept apart, each in an LRU of its
    own size, so an origin naming many scopes never pushes other origins out.
    """

    __slots__ = ("_map", "_scoped", "peek")

    def __init__(self, settings: Settings, *, max_keys: int = 1024, max_scoped: int = 0) -> None:
        """Keep at most ``max_keys`` origins' state and ``max_scoped`` scopes' (LRU)."""
        self._map: LruMap[str, MemoryTracker] = LruMap(
            max_keys, lambda key: MemoryTracker(key, settings)
        )
        self._scoped: LruMap[str, MemoryTracker] = LruMap(
            max(1, max_scoped), lambda key: MemoryTracker(key, settings)
        )
        #: An origin's tracker if it has state (``dict.get`` itself: the fast lane's look).
        self.peek: Callable[[str], MemoryTracker | None] = self._map.peek

    def tracker(self, key: str) -> MemoryTracker:
        return (self._scoped if " " in key else self._map).get(key)

    def keys(self) -> list[str]:
        return self._map.keys() + self._scoped.keys()

    def forget(self, key: str) -> None:
        (self._scoped if " " in key else self._map).pop(key)
