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

:class:`~.bound.Bound` (:mod:`.bound`) is the tracker of a request bound by several: it is
admitted when all of them admit it (the latest slot wins), and splits each response among
them (:func:`~.bound.split`).  Everything here is pure bookkeeping over trackers, so it works
over any store.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import TypeVar, Union

from .bound import MAX_PER_REQUEST, Bound, Pairs, names_new_scopes, remember, split
from .keys import LruMap
from .store import Tracker

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


class OriginScopes:
    """
    One origin's scopes: a tracker per scope, and each route's scopes (both bounded LRUs).

    Trackers come from ``make`` (the store) once and are kept here, so binding a request
    costs two dictionary reads.  A route keeps the trackers it was bound to even after its
    scope name is forgotten (at most ``max_routes`` x 4 of them).  The :class:`Bound` of a
    route's learned scopes is made once and shared by its requests (:meth:`bound`).
    """

    __slots__ = ("_bound", "_drop", "_lock", "_make", "_trackers", "max_scopes", "routes")

    def __init__(
        self,
        make: Callable[[str], Tracker],
        max_routes: int = MAX_ROUTES,
        max_scopes: int = MAX_SCOPES,
        drop: Callable[[str], None] | None = None,
    ) -> None:
        """
        Trackers from ``make(name)``; at most ``max_routes`` routes, ``max_scopes`` scopes.

        ``drop(name)``: a scope forgotten here is forgotten by the store too (a server naming
        a new scope on every response kept a tracker per name there: megabytes).
        """
        self.routes: LruMap[str, Pairs] = LruMap(max_routes, lambda _: ())
        self.max_scopes = max_scopes
        self._make = make
        self._drop = drop
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
                        gone, _ = self._trackers.popitem(last=False)
                        if self._drop is not None:
                            self._drop(gone)
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
