"""
Scopes: several quotas on one origin, each paced apart.

Real APIs keep several quotas on one host: GitHub's ``core`` and ``search``
(``x-ratelimit-resource``), Discord's route buckets (``X-RateLimit-Bucket``), IETF
``RateLimit`` policies by name, a model's quota at an LLM provider.  A request is bound by its
origin's tracker, which takes the signals that speak for the whole host (a 503's
``Retry-After``, Discord's global limit, quotas that name no scope), and by the tracker of
each scope it belongs to.  Its scopes come from, in order:

1. the caller: a scope function (:data:`ScopeFn`, e.g. :class:`ScopeRules`) on the pacer or
   the edge, request -> scope name(s);
2. learned: the scopes the server named in its responses on the request's route (method and
   path with ids templated, :func:`template`);
3. none: the origin's tracker alone (as for every origin that never names a scope).

:class:`Bound` is the tracker of a request bound by several: it is admitted when all of them
admit it (the latest slot wins), and splits each response among them (:func:`split`).
Everything here is pure bookkeeping over trackers, so it works over any store.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar, Union

from ..engine.decide import CohortView
from ..hints.model import Hints, Quota, hints_of
from ..policy import RetryBudget
from .keys import LruMap
from .state import Admission, OriginState, OriginView
from .store import Steps, Tracker, run, stepwise

__all__ = [
    "MAX_ROUTES",
    "MAX_SCOPES",
    "Bound",
    "OriginScopes",
    "Pairs",
    "ScopeFn",
    "ScopeRequest",
    "ScopeRule",
    "ScopeRules",
    "names_new_scopes",
    "names_of",
    "remember",
    "scope_key",
    "split",
    "template",
]

T = TypeVar("T")

#: Routes remembered per origin (least recently used forgotten), by default.
MAX_ROUTES = 256
#: Scopes remembered per origin (least recently used forgotten), by default.
MAX_SCOPES = 16
#: Scopes one request may be bound by (a caller's function, or a server, naming more: the
#: first ones are kept).
MAX_PER_REQUEST = 4
_TEMPLATE_LENGTH = 256


@dataclass(frozen=True, slots=True)
class ScopeRequest:
    """What a scope function sees of a request."""

    method: str  #: upper case
    origin: str  #: ``scheme://host:port``
    path: str  #: without the query string
    request: object  #: the client library's own request (``httpx.Request``, ...)


#: A caller's scope function: the scope name(s) a request belongs to, or ``None`` (learn them).
ScopeFn = Callable[[ScopeRequest], Union[str, Iterable[str], None]]  # noqa: UP007


def scope_key(origin: str, scope: str) -> str:
    """The store key of one scope of an origin (an origin key holds no space)."""
    return f"{origin} {scope}"


def names_of(value: object, where: str = "a scope function") -> tuple[str, ...]:
    """Scope names from what a scope function returned (``None``, a name, or names)."""
    if value is None:
        return ()
    if isinstance(value, str):
        names: tuple[object, ...] = (value,)
    elif isinstance(value, Iterable):
        names = tuple(value)
    else:
        names = (value,)
    for name in names:
        if not isinstance(name, str) or not name or " " in name:
            msg = f"{where} must return None, a scope name or names (no spaces), not {value!r}"
            raise TypeError(msg)
    return tuple(dict.fromkeys(names))[:MAX_PER_REQUEST]  # type: ignore[return-value]


_UUID = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"[0-9a-fA-F]{12,}")


def _is_id(segment: str) -> bool:
    """Numbers, UUIDs, long hex, and long tokens with digits in them are ids."""
    if segment.isdigit():
        return True
    if len(segment) < 12:
        return False
    if _HEX.fullmatch(segment) or _UUID.fullmatch(segment):
        return True
    return len(segment) >= 16 and any(c.isdigit() for c in segment)


@functools.lru_cache(maxsize=1024)
def template(method: str, path: str) -> str:
    """
    A request's route: ``GET /repos/{}/issues/{}``, with the ids in its path templated.

    So 10,000 requests for 10,000 ids share one route (and one learned scope).
    """
    path = path.split("?", 1)[0]
    segments = ["{}" if _is_id(segment) else segment for segment in path.split("/")]
    return f"{method.upper()} {'/'.join(segments)}"[:_TEMPLATE_LENGTH]


@dataclass(frozen=True, slots=True)
class ScopeRule:
    """
    One rule of :class:`ScopeRules`.

    Requests whose path starts with ``prefix`` (and whose method is in ``methods``, and whose
    origin's host is ``host``, where given) are in ``scope``.
    """

    scope: str
    prefix: str = "/"
    methods: Collection[str] | None = None  #: kept as an upper-case frozenset
    host: str | None = None

    def __post_init__(self) -> None:
        """Validate the fields."""
        names_of(self.scope, "ScopeRule.scope")
        if not isinstance(self.prefix, str) or not self.prefix.startswith("/"):
            msg = f"prefix must be a path starting with '/', not {self.prefix!r}"
            raise ValueError(msg)
        if self.methods is not None:
            if isinstance(self.methods, str) or not all(isinstance(m, str) for m in self.methods):
                msg = f"methods must be a set of method names, not {self.methods!r}"
                raise TypeError(msg)
            object.__setattr__(self, "methods", frozenset(m.upper() for m in self.methods))

    def matches(self, request: ScopeRequest) -> bool:
        """Whether ``request`` is in this rule's scope."""
        if self.methods is not None and request.method not in self.methods:
            return False
        if self.host is not None and _host(request.origin) != self.host.lower():
            return False
        return request.path.startswith(self.prefix)


def _host(origin: str) -> str:
    return origin.partition("://")[2].rpartition(":")[0]


@dataclass(frozen=True, slots=True)
class ScopeRules:
    """
    A scope function made of plain data: the first rule that matches a request names its scope.

    >>> rules = ScopeRules((ScopeRule("search", "/search/"),))
    >>> rules(ScopeRequest("GET", "https://api.test:443", "/search/code", None))
    'search'

    Extend one with ``ScopeRules((ScopeRule(...),)) + rules`` (yours first: they win).
    """

    rules: tuple[ScopeRule, ...] = ()

    def __post_init__(self) -> None:
        """Validate the rules."""
        if not all(isinstance(rule, ScopeRule) for rule in self.rules):
            msg = f"rules must be ScopeRule objects, not {self.rules!r}"
            raise TypeError(msg)

    def __call__(self, request: ScopeRequest) -> str | None:
        """The scope of ``request`` (``None``: no rule matches; the server's are learned)."""
        return next((rule.scope for rule in self.rules if rule.matches(request)), None)

    def __add__(self, other: ScopeRules) -> ScopeRules:
        """These rules, then ``other``'s."""
        return ScopeRules(self.rules + other.rules)


#: The scopes a request is bound by: (name, tracker) pairs.
Pairs = tuple[tuple[str, Tracker], ...]


class OriginScopes:
    """
    One origin's scopes: a tracker per scope, and each route's scopes (both bounded LRUs).

    Trackers come from ``make`` (the store) once and are kept here, so binding a request
    costs two dictionary reads.  A route keeps the trackers it was bound to even after its
    scope name is forgotten (at most ``max_routes`` x 4 of them).  The :class:`Bound` of a
    route's learned scopes is made once and shared by its requests (:meth:`bound`).
    """

    __slots__ = ("_bound", "_lock", "_make", "_trackers", "max_scopes", "routes")

    def __init__(
        self,
        make: Callable[[str], Tracker],
        max_routes: int = MAX_ROUTES,
        max_scopes: int = MAX_SCOPES,
    ) -> None:
        """Trackers from ``make(name)``; at most ``max_routes`` routes, ``max_scopes`` scopes."""
        self.routes: LruMap[str, Pairs] = LruMap(max_routes, lambda _: ())
        self.max_scopes = max_scopes
        self._make = make
        self._trackers: OrderedDict[str, Tracker] = OrderedDict()
        self._lock = threading.Lock()
        self._bound: dict[tuple[str, bool], Bound] = {}

    def bound(self, origin: Tracker, route: str, pairs: Pairs, origin_bound: bool) -> Bound:
        """
        The :class:`Bound` of a request on ``route`` bound by ``pairs`` (its learned scopes).

        A Bound holds no state of its own, so one serves every request while the route's
        scopes stay the same: made again only when they change (or the origin's tracker does).
        """
        key = (route, origin_bound)
        found = self._bound.get(key)
        if found is None or found.scopes is not pairs or found.origin is not origin:
            if len(self._bound) >= 2 * self.routes.limit:
                self._bound.clear()  # bounded: the routes in use are made again
            found = self._bound[key] = Bound(
                origin, pairs, given=(), route=route, book=self, origin_bound=origin_bound
            )
        return found

    def pairs(self, names: Iterable[str]) -> Pairs:
        """The tracker of each scope named (made if new), marked recently used."""
        found: list[tuple[str, Tracker]] = []
        with self._lock:
            for name in names:
                tracker = self._trackers.get(name)
                if tracker is None:
                    tracker = self._trackers[name] = self._make(name)
                    while len(self._trackers) > self.max_scopes:
                        self._trackers.popitem(last=False)
                else:
                    self._trackers.move_to_end(name)
                found.append((name, tracker))
        return tuple(found)

    def learn(self, route: str, names: tuple[str, ...]) -> tuple[Pairs, bool]:
        """The server named ``names`` on ``route``: their trackers, and whether that is news."""
        current = self.routes.peek(route)
        if current is not None and tuple(name for name, _ in current) == names:
            return current, False
        pairs = self.pairs(names[:MAX_PER_REQUEST])
        self.routes.put(route, pairs)
        return pairs, True

    def trackers(self) -> dict[str, Tracker]:
        """Each scope's tracker, least recently named first."""
        with self._lock:
            return dict(self._trackers)


# One observation: the scope (``None``: the origin), the status it sees and its hints.
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
        responsible = (
            [name for name, part in parts.items() if part.exhausted]
            or list(given)
            or list(named)
            or list(bound)
        )
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


class _TryNow(Protocol):
    """:meth:`Tracker.try_now`'s shape (its parameter named, as the protocol's)."""

    def __call__(self, now: float) -> bool: ...  # pragma: no cover - a protocol


class Bound:
    """
    The :class:`~smoothclient.pacing.store.Tracker` of a request bound by several trackers.

    Its origin's and each of its scopes': admitted when every one admits it (the latest slot
    wins), counted in each, and each learns its part of every response (:func:`split`).
    Retry budgets are the origin's.  Scopes a response names that the request was not bound
    by are learned for its route (``book``), so the next request on the route is bound by them.
    """

    __slots__ = (
        "_all",
        "book",
        "given",
        "healthy",
        "origin",
        "origin_bound",
        "route",
        "scopes",
        "try_now",
    )

    def __init__(
        self,
        origin: Tracker,
        scopes: Pairs,
        *,
        given: tuple[str, ...],
        route: str,
        book: OriginScopes,
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
        # bound by one tracker alone (a healthy origin's route with one scope): its own calls
        alone = self._all[0] if len(self._all) == 1 else None
        self.healthy: Callable[[float], bool] = self._healthy if alone is None else alone.healthy
        #: Admitted at once by all, or by none (those that did are released).
        self.try_now: _TryNow = self._try_now if alone is None else alone.try_now

    @property
    def steps(self) -> BoundSteps:
        """The steps as generators (what async edges drive; the methods here drive them too)."""
        return BoundSteps(self)

    def __repr__(self) -> str:
        """Show the route and the scopes."""
        return f"<Bound {self.route!r} scopes={[name for name, _ in self.scopes]}>"

    def _healthy(self, now: float) -> bool:
        return run(self.steps.healthy(now))

    @property
    def note_success(self) -> Callable[[float], None]:
        """Note a plain success on every tracker."""
        return self._note_success

    def _note_success(self, now: float) -> None:
        for tracker in self._all:
            tracker.note_success(now)

    def _try_now(self, now: float) -> bool:
        return run(self.steps.try_now(now))

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        """The latest of what each would answer, reserving nothing."""
        return run(self.steps.when(now, not_before=not_before, deadline=deadline))

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        """A slot from each at the latest time any of them admits the request (see steps)."""
        return run(self.steps.acquire(now, not_before=not_before, deadline=deadline))

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
        run(self.steps.observe(status, hints, now, sent_at=sent_at, counted=counted))

    def cohort(self, now: float) -> CohortView:
        """The tightest of the cohorts: most waiting, lowest rate, latest opening."""
        return run(self.steps.cohort(now))

    def record_attempt(self, budget: RetryBudget, now: float) -> None:
        """Budgets are the origin's."""
        self.origin.record_attempt(budget, now)

    def try_retry(self, budget: RetryBudget, now: float) -> bool:
        """Budgets are the origin's."""
        return self.origin.try_retry(budget, now)

    def view(self, now: float) -> OriginView:
        """The origin's view (each scope's: :meth:`smoothclient.Pacer.scopes`)."""
        return self.origin.view(now)

    def update(self, step: Callable[[OriginState], T]) -> T:
        """``step`` on the origin's state."""
        return self.origin.update(step)

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> T:
        """``look`` at the origin's state."""
        return self.origin.read(look, fresh=fresh)


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
        scopes = b.scopes
        if (
            len(scopes) == 1
            and status < 400
            and not b.origin_bound
            and not b.given
            and hints.retry_after is None
            and hints.should_retry is None
            and all(quota.scope == scopes[0][0] for quota in hints.quotas)
        ):  # the common case, as split() would have it: all of it is the one scope's
            yield from stepwise(scopes[0][1]).observe(
                status, hints, now, sent_at=sent_at, counted=counted
            )
            b.origin.note_success(now)
            return
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
