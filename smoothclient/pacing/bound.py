"""
:class:`Bound`: the tracker of a request bound by several trackers (its origin's and its scopes').

It is admitted when all of them admit it (the latest slot wins), counted in each, and each
learns its part of every response (:func:`split`).  Scopes a response names that the request
was not bound by are learned for its route (:func:`remember`).  Pure bookkeeping over
trackers, so it works over any store: it composes their steps (:class:`BoundSteps`), and its
plain methods are the :class:`~.store.Tracker`'s, driving them; :mod:`.scopes` says where the
scopes come from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar, Union

from ..engine.decide import CohortView
from ..hints.model import Hints, Quota, hints_of
from ..policy import RetryBudget
from .keys import LruMap
from .state import Admission, OriginState, OriginView
from .steps import Steps, run
from .store import Tracker, stepwise

__all__ = [
    "MAX_PER_REQUEST",
    "Bound",
    "BoundSteps",
    "Pairs",
    "names_new_scopes",
    "remember",
    "split",
]


class ScopeBook(Protocol):
    """What a :class:`Bound` needs of its origin's scopes (:class:`.scopes.OriginScopes`)."""

    @property
    def routes(self) -> LruMap[str, Pairs]: ...  # pragma: no cover - a protocol

    def pairs(self, names: Iterable[str]) -> Pairs: ...  # pragma: no cover - a protocol

    def learn(
        self, route: str, names: tuple[str, ...]
    ) -> tuple[Pairs, bool]: ...  # pragma: no cover - a protocol


T = TypeVar("T")

#: Scopes one request may be bound by (a caller's function, or a server, naming more: the
#: first ones are kept).
MAX_PER_REQUEST = 4

#: The scopes a request is bound by: (name, tracker) pairs.
Pairs = tuple[tuple[str, Tracker], ...]
Observation = tuple[Union[str, None], int, Hints]  # noqa: UP007
_NONE = Hints()


def _throttle(status: int, hints: Hints) -> bool:
    if status == 429:
        return True
    return status == 403 and (hints.exhausted or hints.retry_after is not None)


def split(
    status: int, hints: Hints, bound: tuple[str, ...], given: tuple[str, ...]
) -> list[Observation]:
    """
    Who learns what from one response of a request bound by the scopes ``bound``.

    ``given`` are the scopes the caller named (quotas that name no scope are theirs; without
    them, the origin's).  Every quota goes to the scope it names.  A throttle goes to the
    scopes whose quota ran out; else to the caller's scopes, the scopes named, the scopes
    bound, or the origin, the first of these there is; a global limit, to the origin.  Other
    statuses go to every scope bound, and the origin keeps the host's signals (a 503's
    ``Retry-After``).  Trackers the request was counted on that learn nothing are released by
    the caller.
    """
    named: dict[str, list[Quota]] = {}
    unnamed: list[Quota] = []
    for quota in hints.quotas:
        if quota.scope is None:
            unnamed.append(quota)
        else:
            named.setdefault(quota.scope, []).append(quota)
    home: list[Quota] = [] if given else unnamed  # the origin's own quotas
    if len(named) == 1 and not unnamed and hints.retry_after is None:
        parts = dict.fromkeys(named, hints)  # the common case: one scope's quotas, no timing
    else:
        parts = {name: hints_of(quotas) for name, quotas in named.items()}
    for name in given:
        parts[name] = hints_of(unnamed + named.get(name, []))

    def with_timing(part: Hints) -> Hints:
        return hints_of(
            part.quotas,
            retry_after=hints.retry_after,
            should_retry=hints.should_retry,
            origin_wide=hints.origin_wide,
        )

    if _throttle(status, hints):
        if hints.origin_wide:
            return [(None, status, with_timing(hints_of(home)))]
        spent = [name for name, part in parts.items() if part.exhausted]
        if not spent and home and hints_of(home).exhausted:  # the host's own quota ran out
            return [(None, status, with_timing(hints_of(home)))]
        responsible = spent or list(given) or list(named) or list(bound)
        if not responsible:
            return [(None, status, with_timing(hints_of(home)))]
        return [(name, status, with_timing(parts.get(name, _NONE))) for name in responsible]
    if home or hints.retry_after is not None or hints.should_retry is not None:
        host = hints_of(home, retry_after=hints.retry_after, should_retry=hints.should_retry)
    else:
        host = _NONE
    seen: list[Observation] = [(None, status, host)]
    seen.extend((name, status, part) for name, part in parts.items())
    seen.extend((name, status, _NONE) for name in bound if name not in parts)
    return seen


def _sole(b: Bound, status: int, hints: Hints) -> Tracker | None:
    """
    The one scope that learns all of a response, in the common case (as :func:`split` has it).

    A success on a route bound by one scope alone (its origin healthy, no scope given) whose
    quotas are all that scope's, with no timing for the host: only the scope learns from it
    (the origin notes a success).  ``None``: any other case, for :func:`split` to share out.
    """
    scopes = b.scopes
    if (
        len(scopes) != 1
        or status >= 400
        or b.origin_bound
        or b.given
        or hints.retry_after is not None
        or hints.should_retry is not None
    ):
        return None
    name, tracker = scopes[0]
    for quota in hints.quotas:
        if quota.scope != name:
            return None
    return tracker


class Bound(Tracker):
    """
    The :class:`~smoothclient.pacing.store.Tracker` of a request bound by several trackers.

    Its origin's and each of its scopes': admitted when every one admits it (the latest slot
    wins), counted in each, and each learns its part of every response (:func:`split`).
    Retry budgets are the origin's.  Scopes a response names that the request was not bound
    by are learned for its route (``book``), so the next request on the route is bound by them.
    The operations are its steps (:class:`BoundSteps`), driven by the plain methods of
    :class:`~smoothclient.pacing.store.Tracker`; but for the counts, which go to each tracker.
    """

    __slots__ = (
        "_all",
        "_alone",
        "book",
        "given",
        "healthy",
        "note_success",
        "origin",
        "origin_bound",
        "route",
        "scopes",
        "steps",
    )

    def __init__(
        self,
        origin: Tracker,
        scopes: Pairs,
        *,
        given: tuple[str, ...],
        route: str,
        book: ScopeBook,
        origin_bound: bool = True,
    ) -> None:
        """
        Bind ``origin``'s tracker and ``scopes`` (name, tracker) for a request on ``route``.

        ``origin_bound`` False: the origin was healthy when the request was bound, so only its
        scopes admit and count it (the origin still learns the host's signals from its answer).
        """
        self.origin = origin
        self.origin_bound = origin_bound = origin_bound or not scopes
        self.scopes = scopes
        mine = [tracker for _, tracker in scopes]
        #: Every tracker that admits and counts the request.
        self._all: tuple[Tracker, ...] = tuple([origin, *mine] if origin_bound else mine)
        self.given = given
        self.route = route
        self.book = book
        self.steps: BoundSteps = BoundSteps(self)
        # bound by one tracker alone (a healthy origin's route with one scope): its own calls
        self._alone = alone = self._all[0] if len(self._all) == 1 else None
        self.healthy: Callable[[float], bool] = self._healthy if alone is None else alone.healthy
        self.note_success: Callable[[float], None] = (
            self._note_success if alone is None else alone.note_success
        )

    def __repr__(self) -> str:
        """Show the route and the scopes."""
        return f"<Bound {self.route!r} scopes={[name for name, _ in self.scopes]}>"

    def _healthy(self, now: float) -> bool:
        return run(self.steps.healthy(now))

    def _note_success(self, now: float) -> None:
        for tracker in self._all:
            tracker.note_success(now)

    def try_now(self, now: float) -> bool:
        """Admitted at once by all, or by none (those that did are released)."""
        alone = self._alone
        return run(self.steps.try_now(now)) if alone is None else alone.try_now(now)

    def sent(self) -> None:
        """Sent: on the wire for every tracker."""
        for tracker in self._all:
            tracker.sent()

    def cancel(self) -> None:
        """Not sent after all."""
        for tracker in self._all:
            tracker.cancel()

    def adopt(self) -> None:
        """Count a request sent on the fast lane in flight everywhere."""
        for tracker in self._all:
            tracker.adopt()

    def failed(self) -> None:
        """Ended without a response."""
        for tracker in self._all:
            tracker.failed()

    def record_attempt(self, budget: RetryBudget, now: float) -> None:
        """Budgets are the origin's."""
        self.origin.record_attempt(budget, now)

    def observe(
        self,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> None:
        """Each tracker learns its part; scopes named on this route are remembered."""
        sole = _sole(self, status, hints)
        if sole is None:
            run(self.steps.observe(status, hints, now, sent_at=sent_at, counted=counted))
            return
        # the common case (a success on a route of one scope), with no step of its own to drive
        sole.observe(status, hints, now, sent_at=sent_at, counted=counted)
        self.origin.note_success(now)


class BoundSteps:
    """
    A :class:`Bound`'s steps, each defined once as a generator (its trackers' steps in turn).

    The sync methods of :class:`Bound` drive them here; async edges drive them on their loop.
    """

    __slots__ = ("b",)

    def __init__(self, bound: Bound) -> None:
        self.b = bound

    def healthy(self, now: float) -> Steps[bool]:
        for tracker in self.b._all:
            if not (yield from stepwise(tracker).healthy(now)):
                return False
        return True

    def try_now(self, now: float) -> Steps[bool]:
        """Admitted at once by all, or by none (those that did are released)."""
        taken: list[Tracker] = []
        for tracker in self.b._all:
            if not (yield from stepwise(tracker).try_now(now)):
                for done in taken:
                    done.failed()
                return False
            taken.append(tracker)
        return True

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]:
        """The latest of what each would answer, reserving nothing."""
        at = not_before
        for tracker in self.b._all:
            admission = yield from stepwise(tracker).when(now, not_before=at, deadline=deadline)
            if not admission.final or not admission.granted:
                return admission
            at = max(at, now + admission.delay)
        return Admission(max(0.0, at - now))

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]:
        """
        A slot from each at the latest time any of them admits the request.

        First asked of each without reserving (so no tracker spends a slot on a request that
        another holds back), then reserved in each.
        """
        planned = yield from self.when(now, not_before=not_before, deadline=deadline)
        if not planned.final or not planned.granted:
            return planned
        at = now + planned.delay
        granted: list[Tracker] = []
        for tracker in self.b._all:
            admission = yield from stepwise(tracker).acquire(now, not_before=at, deadline=deadline)
            if not admission.granted or not admission.final:  # another request came first
                for done in granted:
                    done.cancel()
                return admission
            granted.append(tracker)
            at = max(at, now + admission.delay)
        return Admission(max(0.0, at - now))

    def observe(
        self,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> Steps[None]:
        """Each tracker learns its part; scopes named on this route are remembered."""
        b = self.b
        sole = _sole(b, status, hints)
        if sole is not None:
            yield from stepwise(sole).observe(status, hints, now, sent_at=sent_at, counted=counted)
            b.origin.note_success(now)
            return
        scopes = b.scopes
        named = tuple(dict.fromkeys(q.scope for q in hints.quotas if q.scope is not None))
        fresh: dict[str, Tracker] = {}
        if named and not b.given:
            pairs, news = b.book.learn(b.route, named)
            fresh = dict(pairs)
            if news:  # and for every process sharing the origin's state
                route, limit = b.route, b.book.routes.limit
                yield from stepwise(b.origin).update(lambda o: remember(o, route, named, limit))
        mine = dict(scopes)
        names = tuple(mine)
        learned: set[str | None] = set()
        for name, seen_status, part in split(status, hints, names, b.given):
            if name is None:
                if not b.origin_bound and part is _NONE and seen_status < 400:
                    b.origin.note_success(now)  # nothing else for the host: lock-free
                    learned.add(None)
                    continue
                tracker, was_counted = b.origin, counted and b.origin_bound
            else:
                found = mine.get(name)
                was_counted = counted and found is not None
                if found is None:
                    found = fresh.get(name) or b.book.pairs((name,))[0][1]
                tracker = found
            yield from stepwise(tracker).observe(
                seen_status, part, now, sent_at=sent_at, counted=was_counted
            )
            learned.add(name)
        if counted:  # counted in flight but taught nothing: released
            if None not in learned and b.origin_bound:
                b.origin.failed()
            for name, tracker in scopes:
                if name not in learned:
                    tracker.failed()

    def cohort(self, now: float) -> Steps[CohortView]:
        """The tightest of the cohorts: most waiting, lowest rate, latest opening."""
        views = []
        for tracker in self.b._all:
            views.append((yield from stepwise(tracker).cohort(now)))
        rates = [v.admitted_rate for v in views if v.admitted_rate is not None]
        return CohortView(
            waiting=max(v.waiting for v in views),
            admitted_rate=min(rates) if rates else None,
            opens_in=max(v.opens_in for v in views),
            paced=any(v.paced for v in views),
        )

    def record_attempt(self, budget: RetryBudget, now: float) -> Steps[None]:
        """Budgets are the origin's."""
        return stepwise(self.b.origin).record_attempt(budget, now)

    def try_retry(self, budget: RetryBudget, now: float) -> Steps[bool]:
        """Budgets are the origin's."""
        return stepwise(self.b.origin).try_retry(budget, now)

    def view(self, now: float) -> Steps[OriginView]:
        """The origin's view (each scope's: :meth:`smoothclient.Pacer.scopes`)."""
        return stepwise(self.b.origin).view(now)

    def update(self, step: Callable[[OriginState], T]) -> Steps[T]:
        """``step`` on the origin's state."""
        return stepwise(self.b.origin).update(step)

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> Steps[T]:
        """``look`` at the origin's state."""
        return stepwise(self.b.origin).read(look, fresh=fresh)


def names_new_scopes(tracker: Tracker, hints: Hints) -> bool:
    """Whether ``hints`` name scopes that ``tracker`` (an origin's alone) cannot learn."""
    return not isinstance(tracker, Bound) and hints.scoped


def remember(o: OriginState, route: str, names: tuple[str, ...], limit: int) -> None:
    """Keep ``route``'s scopes in the origin's state, at most ``limit`` routes (oldest go)."""
    o.routes.pop(route, None)
    o.routes[route] = names[:MAX_PER_REQUEST]
    while len(o.routes) > limit:
        del o.routes[next(iter(o.routes))]
