"""
:class:`HttpCache`: the configured cache, its store, its claims and how it makes entries.

One request's way through it is a :class:`~smoothclient.httpcache.lookup.Lookup`
(made by the edges, above this module); docs/http-cache.md says how the whole works.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from .._validate import fraction, function, optional_seconds, seconds
from ..window import jittered_lifetime, xfetch_due
from .entry import Entry, Junk
from .rules import Headers, freshness, vary_names, vary_values
from .stores import Store, open_store

__all__ = ["HttpCache"]

log = logging.getLogger("smoothclient.httpcache")
T = TypeVar("T")
#: The fractional part of the golden ratio: the step of the low-discrepancy sequence.
_GOLDEN = 0.6180339887498949


class HttpCache:
    """
    An HTTP response cache (RFC 9111, private; RFC 5861) whose entries never expire together.

    Pass it to an edge (``SmoothAdapter(cache=cache)``); one cache may serve many edges and
    threads.  Each stored response is revalidated at a point inside the last part of its
    freshness (or earlier by the XFetch rule), one revalidation per key at a time (per process
    in memory, per host in SQLite, per fleet in Redis).

    Args:
        storage: ``"memory://"`` (default), ``"sqlite:///path/to/file.db"``, ``"redis://..."``
            (``rediss://``, ``unix://``), a ``redis.Redis`` client, or a
            :class:`~smoothclient.httpcache.stores.Store`.
        max_bytes: the most bytes the memory and SQLite stores hold (least recent dropped).
        max_body: bodies larger than this are not stored (nor held while read).
        jitter: a revalidated entry is due again one period after its last point, the period
            ``1 - jitter / 2`` of its freshness lifetime (``0 <= jitter < 1``; 0: at expiry):
            counted from when it was due, not from when a reader came, so entries keep their
            phases (docs/http-cache.md section 3).
        spread: an entry stored on a miss is first due in the last ``spread`` fraction of its
            lifetime (``0 <= spread < 1``), at an instant of the clock placed by a
            low-discrepancy sequence (shared by the host's or the fleet's caches through
            SQLite or Redis): entries fetched together (a cold start) come due spread out,
            and stay apart.
        lead: a reader that finds an entry within this fraction of its lifetime (at most
            ``lock_timeout``) before its refresh point has its revalidation sent at the point
            itself, in the background (``0 <= lead < 1``; 0: revalidated by the first reader
            after the point): the origin sees the points as they were spread, not each point
            plus the wait for its next reader (docs/http-cache.md section 3).
        early_refresh: XFetch's ``beta`` (``None``: off): a caller may revalidate earlier still,
            the likelier the slower the last fetch was.
        stale_while_revalidate: seconds a stale response may be served while it is revalidated
            in the background, when the server allows more (``None``: only the server's).
        stale_if_error: seconds a stale response may stand in for an error or an exception
            (``None``: only the server's and the request's).
        refresh_gap: early refreshes sent by a reader after the point (those the lead did not
            schedule) at least this many seconds apart in the process (memory), the host
            (SQLite) or the fleet (Redis); ``None`` (default): not spaced.  An entry that
            expires while waiting its turn is revalidated at once, as any stale entry.
        lock_timeout: the longest a revalidation holds its key (and a caller waits for one).
        clock: wall-clock seconds (default ``time.time``; dates are read against it).
        rng: randomness for the refresh points.

    ``counts`` says how many lookups ended each way (``"hit"``, ``"miss"``, ``"revalidated"``,
    ``"stale"``, ``"bypass"``; a background revalidation counts too), in this process.
    """

    def __init__(
        self,
        storage: object = "memory://",
        *,
        max_bytes: int = 64 * 2**20,
        max_body: int = 2**20,
        jitter: float = 0.1,
        spread: float = 0.9,
        lead: float = 0.2,
        early_refresh: float | None = None,
        stale_while_revalidate: float | None = None,
        stale_if_error: float | None = None,
        refresh_gap: float | None = None,
        lock_timeout: float = 10.0,
        clock: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """Validate the settings and open the store."""
        for name, value in (("max_bytes", max_bytes), ("max_body", max_body)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                msg = f"{name} must be a positive int (bytes), not {value!r}"
                raise ValueError(msg) if isinstance(value, int) else TypeError(msg)
        function("clock", clock, "returning seconds", optional=True)
        if rng is not None and not isinstance(rng, random.Random):
            msg = f"rng must be a random.Random, not {type(rng).__name__}"
            raise TypeError(msg)
        self.max_bytes = max_bytes
        self.max_body = max_body
        self.jitter = fraction("jitter", jitter)
        self.spread = fraction("spread", spread)
        self.lead = fraction("lead", lead)
        self.early_refresh = optional_seconds("early_refresh", early_refresh)
        self.stale_while_revalidate = optional_seconds(
            "stale_while_revalidate", stale_while_revalidate
        )
        self.stale_if_error = optional_seconds("stale_if_error", stale_if_error)
        self.lock_timeout = seconds("lock_timeout", lock_timeout, allow_zero=False)
        self.refresh_gap = optional_seconds("refresh_gap", refresh_gap, allow_zero=False)
        self.clock: Callable[[], float] = clock or time.time
        self.rng = rng or random.Random()
        self._phase = self.rng.random()  # where this cache's sequence of first points starts
        self.store: Store = open_store(storage, max_bytes, self.clock)
        self._flights: dict[str, float] = {}  # key -> when the claim lapses
        self._uncacheable: dict[str, float] = {}  # key -> until when misses do not coalesce
        self._lock = threading.Lock()
        self._paused_until = 0.0
        self.counts = dict.fromkeys(("hit", "miss", "revalidated", "stale", "bypass"), 0)

    #: Seconds a store that failed is left alone (its calls are misses meanwhile).
    STORE_PAUSE = 1.0
    #: The settings: fixed once made (make another cache to change them).
    SETTINGS = frozenset(
        {
            "max_bytes",
            "max_body",
            "jitter",
            "spread",
            "lead",
            "early_refresh",
            "stale_while_revalidate",
            "stale_if_error",
            "lock_timeout",
            "refresh_gap",
            "clock",
            "rng",
            "store",
        }
    )

    def __setattr__(self, name: str, value: object) -> None:
        """Set an attribute; a setting only once, at construction."""
        if name in self.SETTINGS and name in self.__dict__:
            msg = f"HttpCache.{name} is fixed at construction: make another HttpCache"
            raise AttributeError(msg)
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        """The store and the settings that matter."""
        return (
            f"HttpCache({type(self.store).__name__}, max_body={self.max_body}, "
            f"jitter={self.jitter}, spread={self.spread}, lead={self.lead}, "
            f"refresh_gap={self.refresh_gap}, swr={self.stale_while_revalidate}, "
            f"sie={self.stale_if_error})"
        )

    @property
    def inline(self) -> bool:
        """
        Whether the store's calls never wait on I/O (the memory store's ``inline``).

        The async edges make them on the event loop; any other store's in a thread.
        """
        return getattr(self.store, "inline", False) is True

    def close(self) -> None:
        """Close the store's connections."""
        self._safe("close", self.store.close, None)

    # the store, its failures read as misses

    def _safe(self, what: str, fn: Callable[[], T], default: T) -> T:
        """
        ``fn()``, or ``default`` when the store fails (then it is left alone ``STORE_PAUSE`` s).

        A store that is down costs each call its timeouts once, not on every call.
        """
        if self._paused_until and time.monotonic() < self._paused_until:
            return default
        try:
            return fn()
        except Junk as exc:
            log.debug("http cache store held junk (%s): a miss", exc)
            return default
        except Exception as exc:  # any store failure is a miss, never a failed call
            self._paused_until = time.monotonic() + self.STORE_PAUSE
            log.debug("http cache store %s failed (%s: %s): a miss", what, type(exc).__name__, exc)
            return default

    def get(self, key: str) -> Entry | None:
        """The entry under ``key``; ``None`` for none, junk and any failure."""
        return self._safe("get", lambda: self.store.get(key), None)

    def put(self, entry: Entry, ttl: float | None = None) -> None:
        """
        Store ``entry`` for ``ttl`` seconds; failures are ignored.

        ``None``: for as long as it may serve (:meth:`Entry.keep_for`).
        """
        keep = entry.keep_for(self.clock()) if ttl is None else ttl
        self._safe("put", lambda: self.store.put(entry, keep), None)

    def delete(self, keys: Iterable[str]) -> None:
        """Forget ``keys``; failures are ignored."""
        keys = list(keys)
        self._safe("delete", lambda: self.store.delete(keys), None)

    # one revalidation per key in flight

    def claim(self, key: str, ttl: float | None = None) -> bool:
        """
        Take ``key`` for a revalidation: in this process, then in the store (host, fleet).

        ``ttl``: how long the claim lasts if not released (default ``lock_timeout``).
        """
        now = self.clock()
        ttl = self.lock_timeout if ttl is None else ttl
        with self._lock:
            lapses = self._flights.get(key)
            if lapses is not None and now < lapses:
                return False
            self._flights[key] = now + ttl
        if self._safe("claim", lambda: self.store.claim(key, ttl), True):
            return True
        with self._lock:
            self._flights.pop(key, None)
        return False

    def release(self, key: str, *, cacheable: bool = True) -> None:
        """Give ``key`` back; ``cacheable=False``: misses on it stop coalescing for a while."""
        with self._lock:
            self._flights.pop(key, None)
            if not cacheable:
                if len(self._uncacheable) > 4096:
                    self._uncacheable.clear()
                self._uncacheable[key] = self.clock() + 60.0
        self._safe("release", lambda: self.store.release(key), None)

    def coalesces(self, key: str) -> bool:
        """Whether misses on ``key`` wait for one fetch (not when it was lately uncacheable)."""
        until = self._uncacheable.get(key)
        return until is None or self.clock() >= until

    # entries

    def entry(
        self,
        key: str,
        request_headers: Headers,
        status: int,
        headers: Headers,
        body: bytes,
        sent: float,
        received: float,
        *,
        first: bool = False,
        due: float | None = None,
    ) -> Entry:
        """
        The entry for a response to the request of ``key``, its refresh point drawn.

        ``request_headers``: that request's, for the values of the fields it varies on.

        ``first``: stored on a miss (its first point is spread wider: docs/http-cache.md
        section 3).  ``due``: revalidated, the instant the copy it replaces was due (the next
        point keeps to that copy's schedule, not to when a reader came).
        """
        pairs = tuple(headers)
        found = freshness(pairs, sent, received, status=status)
        names = vary_names(pairs)
        caller_swr = self.stale_while_revalidate or 0.0
        caller_sie = self.stale_if_error or 0.0
        return Entry(
            key=key,
            status=status,
            headers=pairs,
            body=body,
            vary=names,
            selected=vary_values(names, request_headers),
            born=found.born,
            lifetime=found.lifetime,
            refresh=self._refresh_point(
                found.lifetime, first=first, born=found.born, due=due, now=received
            ),
            revalidate=found.revalidate,
            strict=found.strict,
            swr=0.0 if found.strict else max(found.swr or 0.0, caller_swr),
            sie=0.0 if found.strict else max(found.sie or 0.0, caller_sie),
            delta=max(0.0, received - sent),
        )

    def _refresh_point(
        self,
        lifetime: float,
        *,
        first: bool,
        born: float = 0.0,
        due: float | None = None,
        now: float = 0.0,
    ) -> float:
        """The age at which an entry is due: see ``jitter`` and ``spread``."""
        if due is not None or not first:
            # every revalidated entry due one period after it was last due: entries keep the
            # phases their first points spread them to (a point drawn at random each time, or
            # counted from each revalidation, made each entry's phase a random walk, and the
            # fleet's revalidations bunched by chance again within a few lifetimes)
            period = jittered_lifetime(lifetime, self.jitter, 0.5)
            return period if due is None else _on_schedule(period, lifetime, born, due, now)
        # the golden-ratio sequence: any n consecutive points evenly apart; numbered by the
        # store where it can (a fleet's caches share one sequence, not one each that collide)
        ticket = getattr(self.store, "ticket", None)
        n = None if ticket is None else self._safe("ticket", ticket, None)
        with self._lock:
            if n is None:
                self._phase = (self._phase + _GOLDEN) % 1.0
                u = self._phase
            else:
                u = (int(n) * _GOLDEN) % 1.0
        return _at_phase(lifetime, self.spread * lifetime, born, u)

    def ahead(self, entry: Entry, now: float) -> float | None:
        """
        Seconds until a fresh ``entry``'s refresh point, if within its lead (else ``None``).

        A reader that sees it then has its revalidation sent at the point itself, in the
        background: the origin sees the points as they were spread, not each point plus the
        wait for its next reader.  The lead is at most ``lock_timeout`` (the key stays claimed
        until the point, and a background job waits for it), and at most half the way to the
        point: a response read again just after it was fetched schedules nothing (it may
        never be read again).
        """
        lead = min(self.lead * entry.lifetime, self.lock_timeout, entry.refresh / 2)
        left = entry.born + entry.refresh - now
        return left if 0.0 < left <= lead else None

    def due(self, entry: Entry, now: float) -> bool:
        """Whether a fresh ``entry`` is due for revalidation: its refresh point, or XFetch."""
        age = now - entry.born
        if age >= entry.refresh:
            return True
        beta = self.early_refresh
        return bool(beta) and xfetch_due(
            age, entry.lifetime, entry.delta, beta or 0.0, self.rng.random()
        )


def _at_phase(lifetime: float, window: float, born: float, u: float) -> float:
    """
    The first refresh point (an age): the last instant of the life at phase ``u`` of the clock.

    The instants ``t`` with ``t mod window == u * window`` (the clock's own seconds: the same
    for every cache of a fleet); the last of them within the life is in its last ``window``
    seconds.  Points placed at ages ``lifetime - window * u`` were evenly apart only for
    entries born together: entries born a few tenths of a second apart (a cold start's) broke
    the sequence's spacing (docs/http-cache.md section 3); on the clock, it holds.
    """
    if window <= 0.0 or not math.isfinite(born + lifetime):
        return lifetime
    return lifetime - (born + lifetime - u * window) % window


def _on_schedule(period: float, lifetime: float, born: float, due: float, now: float) -> float:
    """
    The refresh point (an age) on the schedule of the copy that was ``due``.

    That is the last instant ``due + k * period`` within the new life, unless it has passed
    (then ``period``, counted from the new copy's birth).  An entry is revalidated when a
    reader comes after it is due, some time later; a point counted from the revalidation would
    move the entry's phase by that delay each lifetime, a random walk again (docs/http-cache.md
    section 3): counted from when it was due, it stays.
    """
    if period <= 0.0 or not math.isfinite(due):
        return period
    try:
        steps = math.floor((born + lifetime - due) / period)
    except (OverflowError, ValueError):  # a lifetime of odd size: counted from its birth
        return period
    point = due + steps * period - born
    if steps < 0 or point <= now - born:
        return period
    return point
