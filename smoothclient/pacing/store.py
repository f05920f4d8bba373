"""
The store seam: where pacing state lives, behind two primitives (docs/store.md section 1).

A store keeps one :class:`Cell` per key (an origin, or ``"origin scope"`` for one scope of
it: :mod:`.scopes`).  A cell does two things, each a step: :meth:`Cell.update` applies a
transition (a pure function of the state and the settings: :mod:`.admission`,
:mod:`.learning`, :mod:`.controller`, :mod:`.crowd`, :mod:`.outage`) atomically, under the
key's lock in memory or as one server-side script in a shared store; :meth:`Cell.read` looks
at the state.  Besides them, the fast lane's lock-free calls and this process's own counts.

:class:`KeyTracker` is every operation the edges and the call flow ask of a key (admission,
learning, the cohort, budgets), written once over a cell; :class:`~.bound.Bound` composes
trackers for a request bound by several scopes.  A new store slots in here, touching neither.

**Steps that do I/O** (a shared store's round trips) are written once, as generators that
yield :class:`~.steps.Trip` requests and receive their replies (:data:`~.steps.Steps`); a
sync driver (:func:`~.steps.run`, what a tracker's plain methods use) and an async one
(:func:`~.steps.run_async`, what async edges on asyncio use: the event loop never blocks)
take the trips (:mod:`.steps`).  A tracker's steps are ``tracker.steps`` (a
:class:`Stepwise`; :func:`stepwise`); a store with no I/O answers each at once, yielding
nothing.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, TypeVar, cast, runtime_checkable

from ..engine.decide import CohortView
from ..hints.model import Hints
from ..policy import RetryBudget
from . import admission as adm
from . import learning
from .budget import BudgetCounts
from .keys import LruMap
from .state import PROBE_POLL, Admission, OriginState, OriginView, Settings
from .steps import Steps, done, run

__all__ = [
    "Cell",
    "CellSteps",
    "KeyTracker",
    "Later",
    "MemoryCell",
    "MemoryStore",
    "Step",
    "Stepwise",
    "Store",
    "Tracker",
    "at_once",
    "stepwise",
]

T = TypeVar("T")


#: A transition: a pure function of a key's state and the settings it is paced by (it may
#: change the state; never locks, sleeps or reads a clock).
Step: TypeAlias = Callable[[OriginState, Settings], T]


#: What a store may do with an answer that closes nothing (:func:`.learning.can_wait`):
#: ``(answer, released, may)``.  A store may apply ``answer(state, settings, False)`` at once
#: (the update without the request's count) and let its news reach the others later (with
#: its next write), releasing one request in flight when ``released``; ``may(state)`` says
#: whether the answer may wait on that state.  A store in one process ignores it: it applies
#: the update itself.  (A plain tuple: made on the fast lane of every response with hints,
#: where a named tuple's making cost 0.2 us.)
Later: TypeAlias = tuple[
    Callable[[OriginState, Settings, bool], object], bool, Callable[[OriginState], bool]
]


@runtime_checkable
class Cell(Protocol):
    """
    One key's state in a store: what a store implements (docs/store.md section 1).

    Two primitives, each a step (:data:`Steps`; a store with no I/O yields nothing):
    :meth:`update` applies a transition atomically, :meth:`read` looks at the state.  Besides
    them, what the hot path needs without a lock (:attr:`healthy`, :attr:`note_success`,
    :meth:`record_attempt`), and this process's own counts (:meth:`count`).  Everything else
    a tracker does is written once over these (:class:`KeyTracker`).
    """

    key: str

    @property
    def healthy(self) -> Callable[[float], bool]:
        """Whether a request needs no admission at all at ``now`` (a cheap, lock-free read)."""

    @property
    def note_success(self) -> Callable[[float], None]:
        """Note a plain success at ``now`` on a healthy key (the fast lane's only bookkeeping)."""

    def update(
        self,
        step: Step[T],
        *,
        busy: Callable[[], T] | None = None,
        later: Later | None = None,
        quick: Step[T | None] | None = None,
    ) -> Steps[T]:
        """
        ``step`` applied as one atomic step on the state; its result.

        ``busy``: what a shared store answers when others' writes kept it from applying the
        step for longer than its timeout (nothing taken); ``later``: the update may reach
        the others a step later (see :data:`Later`); ``quick``: the step's answer if it would
        change nothing the store writes (else ``None``), for a shared store to give from a
        copy it trusts, with no round trip (a poll a full window holds).  A store in one
        process needs none of them.
        """

    def read(self, look: Step[T], *, fresh: bool = False) -> Steps[T]:
        """
        ``look`` at the state (which it must not change); its result.

        ``fresh``: a shared store reads the state now, not a copy it may trust a moment.
        """

    def record_attempt(self, budget: RetryBudget, now: float) -> Steps[None] | None:
        """
        Count one attempt toward ``budget``: done at once, lock-free (``None``), or a step.

        On every request's fast lane: a store that can count without a lock does so.
        """

    def count(self, waiting: int, in_flight: int, *, known: bool = False) -> None:
        """
        Change this process's own counts by ``waiting`` and ``in_flight`` (never below 0).

        ``known``: a request ended without a response (the origin is known to answer, or
        not, from now on).  No I/O: a shared store writes them with its next step.
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

    def view(self, now: float) -> Steps[OriginView]: ...  # pragma: no cover - a protocol

    def update(
        self, step: Callable[[OriginState], T]
    ) -> Steps[T]: ...  # pragma: no cover - a protocol

    def read(
        self, look: Callable[[OriginState], T], *, fresh: bool = False
    ) -> Steps[T]: ...  # pragma: no cover - a protocol


class _Driven:
    """A tracker's steps, each driven to its end in this thread (:func:`run`) when called."""

    __slots__ = ("steps",)

    def __init__(self, steps: Stepwise) -> None:
        self.steps = steps

    def __getattr__(self, name: str) -> Callable[..., Any]:
        step = getattr(self.steps, name)

        def driven(*args: Any, **kwargs: Any) -> Any:
            return run(step(*args, **kwargs))

        return driven


class Tracker:
    """
    Atomic operations on one key's pacing state (every ``now`` on the pacer's clock).

    What the edges and the call flow talk to: :class:`KeyTracker` (one key, over a
    :class:`Cell`) and :class:`~.bound.Bound` (a request bound by several).  Each operation
    that may do I/O is a step of :attr:`steps` (a :class:`Stepwise`, what async edges drive);
    the plain methods here drive the same steps in this thread (:func:`run`), or do them at
    once where a tracker can (:attr:`_plain`).
    """

    __slots__ = ()

    #: The steps as generators of round trips (:func:`stepwise`).
    steps: Stepwise
    #: Whether a request needs no admission at all at ``now`` (a cheap, lock-free read).
    healthy: Callable[[float], bool]
    #: Note a plain success at ``now`` on a healthy key (the fast lane's only bookkeeping).
    note_success: Callable[[float], None]
    #: Count one attempt toward a budget at ``now`` (on the fast lane of every request).
    record_attempt: Callable[[RetryBudget, float], None]

    @property
    def _plain(self) -> Any:
        """The operations of :attr:`steps`, each returning its result (driven by :func:`run`)."""
        return _Driven(self.steps)

    def try_now(self, now: float) -> bool:
        """Admit one request at once if a slot is free now (counted in flight)."""
        return self._plain.try_now(now)  # type: ignore[no-any-return]

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        """Reserve a slot no earlier than ``not_before`` (counted waiting if granted)."""
        return self._plain.acquire(now, not_before=not_before, deadline=deadline)  # type: ignore[no-any-return]

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        """What :meth:`acquire` would answer, reserving nothing."""
        return self._plain.when(now, not_before=not_before, deadline=deadline)  # type: ignore[no-any-return]

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
        self._plain.observe(status, hints, now, sent_at=sent_at, counted=counted)

    def cohort(self, now: float) -> CohortView:
        """What the retry engine needs to know of the cohort."""
        return self._plain.cohort(now)  # type: ignore[no-any-return]

    def try_retry(self, budget: RetryBudget, now: float) -> bool:
        """Take room for one retry from ``budget`` if it has it (check and take at once)."""
        return self._plain.try_retry(budget, now)  # type: ignore[no-any-return]

    def view(self, now: float) -> OriginView:
        """A snapshot, for monitoring."""
        return self._plain.view(now)  # type: ignore[no-any-return]

    def update(self, step: Callable[[OriginState], T]) -> T:
        """Apply ``step`` (a pure function of the state) as one atomic step; its result."""
        return self._plain.update(step)  # type: ignore[no-any-return]

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> T:
        """
        ``look`` at the state (which it must not change); its result.

        ``fresh``: a shared store reads the state now, not a copy it may trust a moment.
        """
        return self._plain.read(look, fresh=fresh)  # type: ignore[no-any-return]

    def sent(self) -> None:
        """An admitted request is now on the wire."""
        raise NotImplementedError  # pragma: no cover - each kind of tracker has its own

    def cancel(self) -> None:
        """An admitted request will not be sent."""
        raise NotImplementedError  # pragma: no cover - each kind of tracker has its own

    def adopt(self) -> None:
        """Count a request sent on the fast lane as in flight."""
        raise NotImplementedError  # pragma: no cover - each kind of tracker has its own

    def failed(self) -> None:
        """A request on the wire ended without a response."""
        raise NotImplementedError  # pragma: no cover - each kind of tracker has its own


def _state_only(step: Callable[[OriginState], T]) -> Step[T]:
    """A step of the state alone as a :data:`Step` (the settings unused)."""
    return lambda o, _s: step(o)


class CellSteps:
    """
    A :class:`KeyTracker`'s steps: each operation once, as the pure transition its cell applies.

    The transitions are those of :mod:`.admission` and :mod:`.learning` (and the budgets');
    the cell decides how they are applied atomically (under a lock, or as a round trip).

    Each operation goes through a pair of primitives: by default the cell's own
    (:meth:`Cell.update`, :meth:`Cell.read`: steps, what async edges drive).  Given the pair
    of :func:`at_once` instead, the same operations return their results here and now: a
    :class:`KeyTracker`'s plain methods (:meth:`record_attempt` excepted: the tracker counts
    an attempt itself).
    """

    __slots__ = ("_defers", "_read", "_update", "cell")

    def __init__(
        self,
        cell: Cell,
        update: Callable[..., Steps[Any]] | None = None,
        read: Callable[..., Steps[Any]] | None = None,
    ) -> None:
        self.cell = cell
        self._update = cell.update if update is None else update
        self._read = cell.read if read is None else read
        #: whether the cell may let an answer's news wait (:data:`Later`); one that applies
        #: every update itself is not told how
        self._defers = not isinstance(cell, MemoryCell)

    def healthy(self, now: float) -> Steps[bool]:
        return self._read(lambda o, _s: adm.healthy(o, now))

    def try_now(self, now: float) -> Steps[bool]:
        return self._update(lambda o, s: adm.try_now(o, s, now), busy=_no)

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]:
        return self._update(
            lambda o, s: adm.acquire(o, s, now, not_before, deadline),
            busy=_poll,
            quick=lambda o, s: adm.held(o, s, now, not_before, deadline),
        )

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]:
        return self._read(lambda o, s: adm.when(o, s, now, not_before, deadline))

    def observe(
        self,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> Steps[None]:
        # (closures: on the fast lane of every response with hints, partials cost a microsecond)
        def learn(o: OriginState, s: Settings, counted: bool = counted) -> None:
            learning.observe(o, s, status, hints, now, sent_at=sent_at, counted=counted)

        if not self._defers:
            return self._update(learn)

        def may(o: OriginState) -> bool:
            return learning.can_wait(o, status, hints)

        return self._update(learn, later=(learn, counted, may))

    def cohort(self, now: float) -> Steps[CohortView]:
        return self._read(lambda o, _s: adm.cohort(o, now))

    def record_attempt(self, budget: RetryBudget, now: float) -> Steps[None]:
        steps = self.cell.record_attempt(budget, now)
        return done(None) if steps is None else steps

    def try_retry(self, budget: RetryBudget, now: float) -> Steps[bool]:
        return self._update(lambda o, _s: o.budget(budget).try_retry(now))

    def view(self, now: float) -> Steps[OriginView]:
        key = self.cell.key
        return self._read(lambda o, _s: adm.view(key, o, now))

    def update(self, step: Callable[[OriginState], T]) -> Steps[T]:
        return self._update(_state_only(step))

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> Steps[T]:
        return self._read(_state_only(look), fresh=fresh)


def _no() -> bool:
    """A shared store busy with others' writes: no slot now."""
    return False


def _poll() -> Admission:
    """A shared store busy with others' writes: ask again in a moment (nothing taken)."""
    return Admission(PROBE_POLL, final=False)


def at_once(cell: Cell) -> tuple[Callable[..., Steps[Any]], Callable[..., Steps[Any]]]:
    """
    ``cell``'s primitives done here and now: ``(apply, look)``, each returning its result.

    A cell with no I/O offers them (:meth:`MemoryCell.apply`, :meth:`MemoryCell.look`: no
    generator to drive); any other cell's steps are driven here (:func:`run`).  Typed as the
    steps they stand for: :class:`CellSteps` over them returns results, not steps.
    """
    apply, look = getattr(cell, "apply", None), getattr(cell, "look", None)
    if apply is not None and look is not None:
        return cast("Callable[..., Steps[Any]]", apply), cast("Callable[..., Steps[Any]]", look)

    def driven_update(step: Step[T], **options: Any) -> Any:
        return run(cell.update(step, **options))

    def driven_read(look: Step[T], **options: Any) -> Any:
        return run(cell.read(look, **options))

    return driven_update, driven_read


class KeyTracker(Tracker):
    """
    The tracker of one key: every operation written once over its :class:`Cell`.

    Its steps (:class:`CellSteps`) are the cell's two primitives applied to the pure
    transitions; the plain methods are the same operations over the primitives done at once
    (:func:`at_once`), but for the fast lane's lock-free calls and this process's counts,
    which go to the cell directly.
    """

    __slots__ = ("_plain", "cell", "healthy", "key", "note_success", "record_attempt", "steps")

    def __init__(self, cell: Cell) -> None:
        """The tracker of ``cell``'s key."""
        self.cell = cell
        self.key = cell.key
        self.steps: CellSteps = CellSteps(cell)
        #: The plain operations: the same steps, their primitives done at once, each
        #: returning its result (see :class:`CellSteps`).
        self._plain: Any = CellSteps(cell, *at_once(cell))
        # the fast lane's calls, the cell's own (lock-free in memory)
        self.healthy: Callable[[float], bool] = cell.healthy
        self.note_success: Callable[[float], None] = cell.note_success
        #: Count one attempt toward a budget: the cell's own call where it counts at once
        self.record_attempt: Callable[[RetryBudget, float], None] = (
            cell.record_attempt if isinstance(cell, MemoryCell) else self._record_attempt
        )

    def __repr__(self) -> str:
        """Show the key and the kind of cell."""
        return f"<KeyTracker {self.key!r} on {type(self.cell).__name__}>"

    def _record_attempt(self, budget: RetryBudget, now: float) -> None:
        steps = self.cell.record_attempt(budget, now)
        if steps is not None:
            run(steps)

    def sent(self) -> None:
        self.cell.count(-1, 1)

    def cancel(self) -> None:
        self.cell.count(-1, 0)

    def adopt(self) -> None:
        self.cell.count(0, 1)

    def failed(self) -> None:
        self.cell.count(0, -1, known=True)


def stepwise(tracker: Tracker) -> Stepwise:
    """``tracker``'s steps as generators (what async edges drive)."""
    return tracker.steps


class Store(Protocol):
    """Where the trackers' state lives: a :class:`KeyTracker` (over a :class:`Cell`) per key."""

    def tracker(self, key: str) -> KeyTracker:
        """The tracker of ``key`` (state made if missing), marked recently used."""

    @property
    def peek(self) -> Callable[[str], KeyTracker | None]:
        """The tracker of an origin's key if its state exists; cheap, for the fast lane."""

    def keys(self) -> list[str]:
        """The keys whose state is kept, least recently used first."""

    def forget(self, key: str) -> None:
        """Drop ``key``'s state kept here (a scope its origin no longer names)."""


class MemoryCell:
    """A :class:`Cell` over state in this process, guarded by a lock of its own."""

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

    def update(
        self,
        step: Step[T],
        *,
        busy: Callable[[], T] | None = None,
        later: Later | None = None,
        quick: Step[T | None] | None = None,
    ) -> Steps[T]:
        return self.apply(step)
        yield  # pragma: no cover - a generator that yields nothing

    def read(self, look: Step[T], *, fresh: bool = False) -> Steps[T]:
        return self.look(look)
        yield  # pragma: no cover - a generator that yields nothing

    def apply(
        self,
        step: Step[T],
        *,
        busy: Callable[[], T] | None = None,
        later: Later | None = None,
        quick: Step[T | None] | None = None,
    ) -> T:
        """:meth:`update` done at once (no I/O here): ``step`` under the lock, its result."""
        with self.lock:
            return step(self.state, self.settings)

    def look(self, look: Step[T], *, fresh: bool = False) -> T:
        """:meth:`read` done at once: ``look`` under the lock, its result."""
        with self.lock:
            return look(self.state, self.settings)

    def record_attempt(self, budget: RetryBudget, now: float) -> None:
        # lock-free, like note_success: on the healthy lane of every request (a lock cost a
        # microsecond or more); a race may lose one count, which only tightens the budget.
        # The last budget's counts are kept at hand: hashing the budget is most of the cost
        last = self._counts
        if last is None or last[0] is not budget:
            last = self._counts = (budget, self.state.budget(budget))
        last[1].record_request(now)

    def count(self, waiting: int, in_flight: int, *, known: bool = False) -> None:
        with self.lock:
            state = self.state
            if waiting:
                state.waiting = max(0, state.waiting + waiting)
            if in_flight:
                state.in_flight = max(0, state.in_flight + in_flight)
            if known:
                state.known = True


class MemoryStore:
    """
    The default store: state in this process, shared by its threads and event loops.

    Origins' keys and scopes' keys (``"origin scope"``) are kept apart, each in an LRU of its
    own size, so an origin naming many scopes never pushes other origins out.
    """

    __slots__ = ("_map", "_scoped", "peek")

    def __init__(self, settings: Settings, *, max_keys: int = 1024, max_scoped: int = 0) -> None:
        """Keep at most ``max_keys`` origins' state and ``max_scoped`` scopes' (LRU)."""
        self._map: LruMap[str, KeyTracker] = LruMap(
            max_keys, lambda key: KeyTracker(MemoryCell(key, settings))
        )
        self._scoped: LruMap[str, KeyTracker] = LruMap(
            max(1, max_scoped), lambda key: KeyTracker(MemoryCell(key, settings))
        )
        #: An origin's tracker if it has state (``dict.get`` itself: the fast lane's look).
        self.peek: Callable[[str], KeyTracker | None] = self._map.peek

    def tracker(self, key: str) -> KeyTracker:
        return (self._scoped if " " in key else self._map).get(key)

    def cell(self, key: str) -> MemoryCell:
        """The cell of ``key`` (state made if missing): a shared store's fallback."""
        cell = self.tracker(key).cell
        assert isinstance(cell, MemoryCell)  # (made here)
        return cell

    def keys(self) -> list[str]:
        return self._map.keys() + self._scoped.keys()

    def forget(self, key: str) -> None:
        (self._scoped if " " in key else self._map).pop(key)
