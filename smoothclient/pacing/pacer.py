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
  other concurrent requests wait for it so they can be paced; a probe unanswered for
  ``probe`` seconds lets one more request go as a probe, never the whole herd.

A healthy origin (quota far from exhausted, or no quota at all) gets no delay whatsoever.
The rules are pure functions in :mod:`smoothclient.pacing.state`; the state lives in a store
(:mod:`smoothclient.pacing.store`), in this process by default.

An origin with several quotas (GitHub's ``core`` and ``search``, Discord's route buckets)
keeps a state per scope as well (:mod:`smoothclient.pacing.scopes`): scopes the server names
are learned per route, and a ``scope`` function lets the caller say what it knows.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from .._validate import forward, function, positive_int, seconds
from .keys import LruMap
from .scopes import (
    MAX_ROUTES,
    MAX_SCOPES,
    Bound,
    OriginScopes,
    Pairs,
    ScopeFn,
    ScopeRequest,
    names_of,
    scope_key,
    template,
)
from .state import OriginView, Settings
from .steps import Steps, run
from .store import KeyTracker, MemoryStore, Store, Tracker, stepwise

__all__ = ["Pacer", "PacerLike"]


@runtime_checkable
class PacerLike(Protocol):
    """
    The door into pacing every edge uses: a clock and a tracker per origin.

    :meth:`track` gives an origin's tracker (its admission and what it learns, each a step
    of the store), :attr:`peek` the tracker of an origin that has state, cheaply (the fast
    lane's look).  :class:`Pacer` is the one implementation; an object with these can pace
    the edges.
    """

    clock: Callable[[], float]

    def track(self, origin: str) -> Tracker:
        """The tracker of ``origin``, marked recently used."""

    @property
    def peek(self) -> Callable[[str], Tracker | None]:
        """The tracker of an origin if it has state; cheap."""


#: The URL schemes of a shared storage: Redis, a Redis Cluster, a master Redis Sentinel names.
_SHARED = frozenset(
    {
        "redis",
        "rediss",
        "unix",
        "redis+cluster",
        "rediss+cluster",
        "redis+sentinel",
        "rediss+sentinel",
    }
)


def _store(
    storage: object, settings: Settings, *, max_keys: int, max_scoped: int, timeout: float
) -> tuple[Store, Callable[[], float]]:
    """The store ``storage`` names, and the clock it keeps time by."""
    if storage is None or storage == "memory://":
        return MemoryStore(settings, max_keys=max_keys, max_scoped=max_scoped), time.monotonic
    if isinstance(storage, str) and storage.partition("://")[0] not in _SHARED:
        msg = (
            "storage must be 'memory://' or a redis://, rediss://, unix://, redis+cluster:// "
            f"or redis+sentinel:// URL, not {storage!r}"
        )
        raise ValueError(msg)
    from .redis.store import RedisStore, connect  # only for a shared storage

    client, loops = connect(storage, timeout)
    store = RedisStore(
        client, settings, max_keys=max_keys, max_scoped=max_scoped, timeout=timeout, loops=loops
    )
    return store, store.link.clock


class Pacer:
    """
    Per-origin gates, cohorts and admitted rates, shared safely by threads and event loops.

    Args:
        max_origins: how many origins to remember (least recently used are forgotten).
        probe: on cold start, concurrent requests wait for the first response of a new origin;
            every ``probe`` seconds without one, one more request goes as a probe (0 disables
            the probe).
        learned_floor: the lowest learned rate, in req/s.
        quiet: seconds without throttling after which a learned rate is dropped.
        max_gate: the longest any server hint may hold an origin's requests back (a buggy or
            hostile ``Retry-After: 999999`` is read as this).
        scope: the caller's scope function (request -> scope name(s), or ``None`` to learn
            them), e.g. :data:`smoothclient.pacing.GITHUB_SCOPES`; an edge's own ``scope``
            overrides it.
        max_routes: routes remembered per origin, each with the scopes the server named on it.
        max_scopes: scopes remembered per origin (each keeps a state like an origin's).
        storage: where the state lives: ``"memory://"`` (this process, the default), or a
            ``redis://``, ``rediss://`` or ``unix://`` URL, or a ``redis.Redis`` or
            ``redis.asyncio.Redis`` client, or a Redis Cluster's
            (``redis+cluster://host:port,host:port``, a ``redis.cluster.RedisCluster`` or its
            asyncio twin), or a master Redis Sentinel names
            (``redis+sentinel://host:port/service``), for a fleet that paces as one
            (:mod:`smoothclient.pacing.redis`; needs the ``redis`` extra).  A Redis that
            fails is never waited on beyond ``storage_timeout``: the pacer goes on from this
            process's memory.
        storage_timeout: the longest one step waits on a shared storage (seconds).
        clock: a monotonic clock (injectable for tests; default ``time.monotonic``, or the
            Redis server's ``TIME`` for a Redis storage).
    """

    def __init__(
        self,
        *,
        max_origins: int = 1024,
        probe: float = 0.25,
        learned_floor: float = 0.5,
        quiet: float = 30.0,
        max_gate: float = 300.0,
        scope: ScopeFn | None = None,
        max_routes: int = MAX_ROUTES,
        max_scopes: int = MAX_SCOPES,
        storage: object = "memory://",
        storage_timeout: float = 0.05,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """Create an empty pacer."""
        self.max_origins = positive_int("max_origins", max_origins)
        self.settings = Settings(
            probe=seconds("probe", probe),
            learned_floor=seconds("learned_floor", learned_floor, allow_zero=False),
            quiet=seconds("quiet", quiet, allow_zero=False),
            max_gate=seconds("max_gate", max_gate, allow_zero=False),
        )
        function("clock", clock, "returning seconds", optional=True)
        function("scope", scope, "of a ScopeRequest", optional=True)
        self._scope = scope
        self.max_routes = positive_int("max_routes", max_routes)
        self.max_scopes = positive_int("max_scopes", max_scopes)
        self.storage = storage
        self.storage_timeout = seconds("storage_timeout", storage_timeout, allow_zero=False)
        self._store, store_clock = _store(
            storage,
            self.settings,
            max_keys=self.max_origins,
            max_scoped=self.max_origins * self.max_scopes,
            timeout=self.storage_timeout,
        )
        self.clock: Callable[[], float] = store_clock if clock is None else forward(clock)
        self._clock_given = clock  # (pickled: a Redis store's clock is its live link's)
        #: Whether the state lives outside this process (Redis): shared with other processes,
        #: and each step a round trip (async edges await them on their asyncio loop; on
        #: trio, in worker threads).
        self.shared = not isinstance(self._store, MemoryStore)
        self._books: LruMap[str, OriginScopes] = LruMap(
            self.max_origins,
            lambda origin: OriginScopes(
                functools.partial(self._scope_tracker, origin),
                self.max_routes,
                self.max_scopes,
                functools.partial(self._forget_scope, origin),
            ),
        )
        #: The tracker of an origin if it has state (the fast lane's cheap look; no lock).
        self.peek: Callable[[str], Tracker | None] = self._store.peek
        #: An origin's scopes if it has any (``None``: none yet); a dict read, no lock.
        self.scope_book: Callable[[str], OriginScopes | None] = self._books.peek

    @property
    def scope(self) -> ScopeFn | None:
        """The caller's scope function, fixed at construction (edges read it when made)."""
        return self._scope

    def __repr__(self) -> str:
        """Show how many origins are tracked."""
        return f"<Pacer origins={len(self._store.keys())}>"

    def __getstate__(self) -> dict[str, Any]:
        """
        Pickle the settings only: what the pacer learned belongs to the process that did.

        A pacer on a Redis client cannot be pickled (a live connection): build it from a URL.
        """
        if not (self.storage is None or isinstance(self.storage, str)):
            msg = (
                "a Pacer on a Redis client object cannot be pickled (its connection is live); "
                "build it with storage='redis://...' to pickle it, or make one per process"
            )
            raise TypeError(msg)
        s = self.settings
        return {
            "max_origins": self.max_origins,
            "probe": s.probe,
            "learned_floor": s.learned_floor,
            "quiet": s.quiet,
            "max_gate": s.max_gate,
            "scope": self.scope,
            "max_routes": self.max_routes,
            "max_scopes": self.max_scopes,
            "storage": self.storage,
            "storage_timeout": self.storage_timeout,
            "clock": self._clock_given,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle as a fresh pacer with the same settings (so a pickled session works)."""
        Pacer.__init__(self, **state)

    def track(self, origin: str) -> KeyTracker:
        """The tracker of ``origin`` (the edges' door into pacing), marked recently used."""
        return self._store.tracker(origin)

    def bind(
        self,
        origin: str,
        request: object,
        route_of: Callable[[object], tuple[str, str]],
        *,
        scope: ScopeFn | None = None,
        late: bool = False,
        fresh: bool | None = None,
    ) -> Tracker | None:
        """
        The tracker of one request when scopes bind it, else ``None`` (see :meth:`binding`).

        A store in this process takes no round trip: the parts of :meth:`binding` run here
        with no step to drive (the fast lane binds every request to an origin with scopes).
        ``fresh`` is deprecated and changes nothing (see :meth:`binding`).
        """
        if fresh is not None:
            _fresh_is_gone("bind")
        routed = self._route(origin, request, route_of, scope, late)
        if self.shared:
            return run(self._binding(origin, routed, late))
        if routed is None:
            return None
        book, route, given = routed
        found = self._pairs(origin, book, route, given, late, None)
        if found is None:
            return None
        book, pairs, tracker = found
        return self._bound(book, tracker, route, pairs, given, not tracker.healthy(self.clock()))

    def binding(
        self,
        origin: str,
        request: object,
        route_of: Callable[[object], tuple[str, str]],
        *,
        scope: ScopeFn | None = None,
        late: bool = False,
        fresh: bool | None = None,
    ) -> Steps[Tracker | None]:
        """
        The tracker of one request when scopes bind it, else ``None`` (its origin's alone).

        A step (a generator of a shared store's round trips: :mod:`.store`).

        ``route_of(request)`` gives its method and path, asked for only when the origin has
        scopes or a scope function applies.  ``scope`` overrides the pacer's function.
        ``late``: the request was admitted by its origin alone and a response named scopes: a
        tracker over the origin alone that learns them (never ``None``).  With a shared
        store, what other processes learned of the route is looked up in this process's copy
        of the origin's state (at most the store's trust period old; read first when it has
        none: :meth:`_told`).  ``fresh`` is deprecated and changes nothing: the origin's state
        is read whenever this process has no copy of it (it will be removed).
        """
        if fresh is not None:
            _fresh_is_gone("binding")
        return self._binding(origin, self._route(origin, request, route_of, scope, late), late)

    def _binding(
        self,
        origin: str,
        routed: tuple[OriginScopes | None, str, tuple[str, ...]] | None,
        late: bool,
    ) -> Steps[Tracker | None]:
        if routed is None:
            return None
        book, route, given = routed
        told = None
        if self.shared and not late:
            told = yield from self._told(origin, route, book)
        found = self._pairs(origin, book, route, given, late, told)
        if found is None:
            return None
        book, pairs, tracker = found
        origin_bound = not (yield from stepwise(tracker).healthy(self.clock()))
        return self._bound(book, tracker, route, pairs, given, origin_bound)

    # The parts of a binding between its round trips (see binding): pure bookkeeping.

    def _route(
        self,
        origin: str,
        request: object,
        route_of: Callable[[object], tuple[str, str]],
        scope: ScopeFn | None,
        late: bool,
    ) -> tuple[OriginScopes | None, str, tuple[str, ...]] | None:
        """A request's origin's scopes (if any), route and the scopes given; ``None``: unbound."""
        fn = scope if scope is not None else self.scope
        book = self._books.peek(origin)
        if book is None and fn is None and not late and not self.shared:
            return None  # the common case: nothing but the origin
        method, path = route_of(request)
        method = method.upper()
        given = names_of(fn(ScopeRequest(method, origin, path, request))) if fn and not late else ()
        return book, template(method, path), given

    def _pairs(
        self,
        origin: str,
        book: OriginScopes | None,
        route: str,
        given: tuple[str, ...],
        late: bool,
        told: tuple[str, ...] | None,
    ) -> tuple[OriginScopes, Pairs, Tracker] | None:
        """
        The scopes that bind a request on ``route``, and its origin's tracker; ``None``: none.

        ``told``: the scopes another process learned on the route (a shared store).
        """
        if book is None:
            if not (given or late or told):
                return None
            book = self._books.get(origin)
        if told:
            book.learn(route, told)
        pairs: Pairs = ()
        if not late:
            learned = book.routes.peek(route) or ()
            pairs = book.pairs(given) + learned if given else learned
            if given and learned:
                pairs = tuple(dict(pairs).items())  # a scope given and learned counts once
            if not pairs:
                return None
        return book, pairs, self._store.peek(origin) or self._store.tracker(origin)

    @staticmethod
    def _bound(
        book: OriginScopes,
        tracker: Tracker,
        route: str,
        pairs: Pairs,
        given: tuple[str, ...],
        origin_bound: bool,
    ) -> Tracker:
        """The tracker of a request bound by ``pairs`` (``origin_bound``: its origin's too)."""
        if not given:  # the scopes the server named on this route: one Bound for them all
            return book.bound(tracker, route, pairs, origin_bound)
        return Bound(tracker, pairs, given=given, route=route, book=book, origin_bound=origin_bound)

    def _told(
        self, origin: str, route: str, book: OriginScopes | None
    ) -> Steps[tuple[str, ...] | None]:
        """
        A shared store: the scopes another process learned on ``route``, if this one has not.

        Looked up in this process's copy of the origin's state, read first when it has none:
        the request's first look at the origin (for its slot) would read it next anyway.
        Looked up in a copy only, the first request of a fleet's process that started as
        another's answer named a spent quota (a cold-start probe's) was bound by the origin
        alone, admitted, and sent into the quota.
        """
        if book is not None and book.routes.peek(route) is not None:
            return None
        tracker = self._store.tracker(origin)
        told = yield from stepwise(tracker).read(
            lambda o: o.routes.get(route) if o.routes else None
        )
        return told

    def _forget_scope(self, origin: str, scope: str) -> None:
        self._store.forget(scope_key(origin, scope))

    def _scope_tracker(self, origin: str, scope: str) -> Tracker:
        return self._store.tracker(scope_key(origin, scope))

    def view(self, origin: str) -> OriginView:
        """A snapshot of ``origin``'s state (its own, not its scopes': :meth:`scopes`)."""
        return self._store.tracker(origin).view(self.clock())

    def scopes(self, origin: str) -> dict[str, OriginView]:
        """
        A snapshot of each scope of ``origin`` known: remaining, limit, reset, rate, ...

        Scopes appear once a response names them or a scope function gives them.
        """
        now = self.clock()
        book = self._books.peek(origin)
        trackers = book.trackers() if book is not None else {}
        return {name: tracker.view(now) for name, tracker in trackers.items()}

    def routes(self, origin: str) -> dict[str, tuple[str, ...]]:
        """Each route of ``origin`` remembered, with the scopes the server named on it."""
        book = self._books.peek(origin)
        if book is None:
            return {}
        routes = book.routes.keys()
        return {route: tuple(n for n, _ in book.routes.peek(route) or ()) for route in routes}

    def origins(self) -> list[str]:
        """The origins currently remembered, least recently used first."""
        stored = self._store.keys()
        return [key for key in stored if " " not in key]


def _fresh_is_gone(method: str) -> None:
    warnings.warn(
        f"Pacer.{method}(fresh=...) is deprecated and changes nothing (a process with no copy"
        " of the origin's state reads it first); it will be removed",
        DeprecationWarning,
        stacklevel=3,
    )
