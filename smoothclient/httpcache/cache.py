"""
:class:`HttpCache`: the configured cache, and :class:`Lookup`, one request's way through it.

A :class:`Lookup` decides; it never sends, sleeps or spawns.  Its :meth:`~Lookup.step` says
what the edge does next: :class:`Serve` a stored response, :class:`Fetch` from the origin (with
validators), :class:`Wait` for another caller's revalidation, or :class:`Refuse`
(``only-if-cached``).  What the origin answered goes to :meth:`~Lookup.received`, an
exception to :meth:`~Lookup.failed`; :meth:`~Lookup.done` ends it.  The edges drive it through
``smoothclient.edges.cached``; docs/http-cache.md says how the whole works.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

from .._validate import fraction, optional_seconds, seconds
from ..window import jittered_lifetime, xfetch_due
from .entry import Entry, Junk
from .rules import (
    CACHEABLE_METHODS,
    SAFE_METHODS,
    Headers,
    cache_key,
    conditional_headers,
    freshness,
    header,
    invalidated_urls,
    merge_304,
    request_rules,
    storable,
    usable,
    vary_names,
    vary_values,
)
from .stores import Store, open_store

__all__ = ["CacheLabel", "Fetch", "HttpCache", "Keep", "Lookup", "Pass", "Refuse", "Serve", "Wait"]

log = logging.getLogger("smoothclient.httpcache")
T = TypeVar("T")

#: What the call record's ``cache`` says of a call.
CacheLabel = Literal["hit", "miss", "revalidated", "stale", "bypass"]
#: How often a caller waiting for another's revalidation looks again.
POLL = 0.02
#: The key of the slot early refreshes take turns in (``refresh_gap``): never a request's key.
EARLY_SLOT = "smoothclient early refresh slot"
#: The fractional part of the golden ratio: the step of the low-discrepancy sequence.
_GOLDEN = 0.6180339887498949
#: Statuses that let ``stale-if-error`` serve a stored response (RFC 5861 section 4).
ERROR_STATUSES = frozenset({500, 502, 503, 504})
#: Headers that describe the body as sent, not as stored (it is stored decoded).
_FRAMING = frozenset({"content-encoding", "content-length", "transfer-encoding"})
_TRANSFER = frozenset({"content-length", "transfer-encoding"})


@dataclass(frozen=True, slots=True)
class Serve:
    """Answer with ``entry``; ``background``: revalidate it too (the lookup holds the claim)."""

    entry: Entry
    label: CacheLabel
    background: bool = False


@dataclass(frozen=True, slots=True)
class Fetch:
    """Send the request to the origin, with ``headers`` (validators) added."""

    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Wait:
    """Another caller is revalidating: wait ``seconds``, then :meth:`Lookup.step` again."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Refuse:
    """``only-if-cached`` and nothing usable: answer 504 without sending."""


@dataclass(frozen=True, slots=True)
class Keep:
    """A storable response: feed its body to ``recorder`` as it is read."""

    recorder: Recorder


@dataclass(frozen=True, slots=True)
class Pass:
    """Return the origin's response as it is: nothing to store."""


class HttpCache:
    """
    An HTTP response cache (RFC 9111, private; RFC 5861) whose entries never expire together.

    Pass it to an edge (``SmoothAdapter(cache=cache)``); one cache may serve many edges and
    threads.  Each stored response is revalidated at a point drawn inside the last ``jitter``
    fraction of its freshness (or earlier by the XFetch rule), one revalidation per key at a
    time (per process in memory, per host in SQLite, per fleet in Redis).

    Args:
        storage: ``"memory://"`` (default), ``"sqlite:///path/to/file.db"``, ``"redis://..."``
            (``rediss://``, ``unix://``), a ``redis.Redis`` client, or a
            :class:`~smoothclient.httpcache.stores.Store`.
        max_bytes: the most bytes the memory and SQLite stores hold (least recent dropped).
        max_body: bodies larger than this are not stored (nor held while read).
        jitter: a revalidated entry is due again at an age drawn uniformly from the last
            ``jitter`` fraction of its freshness lifetime (``0 <= jitter < 1``; 0: at expiry).
        spread: an entry stored on a miss is first due in the last ``spread`` fraction of its
            lifetime (``0 <= spread < 1``), placed by a low-discrepancy sequence: entries
            fetched together (a cold start) come due spread out, once, and stay apart.
        early_refresh: XFetch's ``beta`` (``None``: off): a caller may revalidate earlier still,
            the likelier the slower the last fetch was.
        stale_while_revalidate: seconds a stale response may be served while it is revalidated
            in the background, when the server allows more (``None``: only the server's).
        stale_if_error: seconds a stale response may stand in for an error or an exception
            (``None``: only the server's and the request's).
        refresh_gap: early refreshes (of entries still fresh) at least this many seconds apart in
            the process (memory), the host (SQLite) or the fleet (Redis); ``None`` (default):
            not spaced.  About ``max-age / URLs / 2`` evens out the origin's load; an entry
            that expires while waiting its turn is revalidated at once, as any stale entry.
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
        spread: float = 0.5,
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
        if clock is not None and not callable(clock):
            msg = f"clock must be a callable returning seconds, not {clock!r}"
            raise TypeError(msg)
        if rng is not None and not isinstance(rng, random.Random):
            msg = f"rng must be a random.Random, not {type(rng).__name__}"
            raise TypeError(msg)
        self.max_bytes = max_bytes
        self.max_body = max_body
        self.jitter = fraction("jitter", jitter)
        self.spread = fraction("spread", spread)
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
            f"jitter={self.jitter}, spread={self.spread}, refresh_gap={self.refresh_gap}, "
            f"swr={self.stale_while_revalidate}, "
            f"sie={self.stale_if_error})"
        )

    def lookup(self, method: str, url: str, headers: Headers) -> Lookup:
        """Begin one request's way through the cache (call :meth:`Lookup.step` next)."""
        return Lookup(self, method, url, list(headers))

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

    def put(self, entry: Entry) -> None:
        """Store ``entry`` for as long as it may serve; failures are ignored."""
        ttl = entry.keep_for(self.clock())
        self._safe("put", lambda: self.store.put(entry, ttl), None)

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
        lookup: Lookup,
        status: int,
        headers: Headers,
        body: bytes,
        sent: float,
        received: float,
        *,
        first: bool = False,
    ) -> Entry:
        """
        The entry for a response to ``lookup``'s request, its refresh point drawn.

        ``first``: stored on a miss (its first point is spread wider: docs/http-cache.md
        section 3).
        """
        pairs = tuple(headers)
        found = freshness(pairs, sent, received, status=status)
        names = vary_names(pairs)
        caller_swr = self.stale_while_revalidate or 0.0
        caller_sie = self.stale_if_error or 0.0
        return Entry(
            key=lookup.key,
            status=status,
            headers=pairs,
            body=body,
            vary=names,
            selected=vary_values(names, lookup.headers),
            born=found.born,
            lifetime=found.lifetime,
            refresh=self._refresh_point(found.lifetime, first=first),
            revalidate=found.revalidate,
            strict=found.strict,
            swr=0.0 if found.strict else max(found.swr or 0.0, caller_swr),
            sie=0.0 if found.strict else max(found.sie or 0.0, caller_sie),
            delta=max(0.0, received - sent),
        )

    def _refresh_point(self, lifetime: float, *, first: bool) -> float:
        """The age at which an entry is due: see ``jitter`` and ``spread``."""
        if not first:
            return jittered_lifetime(lifetime, self.jitter, self.rng.random())
        with self._lock:  # the golden-ratio sequence: any n consecutive points evenly apart
            self._phase = (self._phase + _GOLDEN) % 1.0
            u = self._phase
        return jittered_lifetime(lifetime, self.spread, u)

    def due(self, entry: Entry, now: float) -> bool:
        """Whether a fresh ``entry`` is due for revalidation: its refresh point, or XFetch."""
        age = now - entry.born
        if age >= entry.refresh:
            return True
        beta = self.early_refresh
        return bool(beta) and xfetch_due(
            age, entry.lifetime, entry.delta, beta or 0.0, self.rng.random()
        )


def _key(method: str, url: str, headers: list[tuple[str, str]]) -> str:
    """The primary key; a request with credentials is keyed by a hash of them too."""
    key = cache_key(method, url)
    auth = header(headers, "authorization")
    if auth:
        key += " auth=" + hashlib.sha256(auth.encode()).hexdigest()[:24]
    return key


class Lookup:
    """
    One request's way through an :class:`HttpCache` (see the module docstring).

    ``label`` is what the call record says of it once it is over.
    """

    def __init__(
        self, cache: HttpCache, method: str, url: str, headers: list[tuple[str, str]]
    ) -> None:
        """Read the request's own directives."""
        self.cache = cache
        self.method = method.upper()
        self.url = url
        self.headers = headers
        self.rules, self.directives = request_rules(headers)
        self.key = _key(self.method, url, headers) if self.method in CACHEABLE_METHODS else ""
        self.entry: Entry | None = None
        self.label: CacheLabel = "bypass"
        self.claimed = False
        self.waited = 0.0
        self.sent = 0.0

    @property
    def bypass(self) -> bool:
        """Whether the cache stays out of this request (not a GET, or ``no-store``)."""
        return not self.key or self.rules.bypass

    def step(self) -> Serve | Fetch | Wait | Refuse:
        """What to do next."""
        if self.bypass:
            return self._fetch(None)
        cache, rules = self.cache, self.rules
        entry = cache.get(self.key)
        if entry is not None and entry.selected != vary_values(entry.vary, self.headers):
            entry = None  # stored for another variant: this request is a miss
        self.entry = entry
        now = cache.clock()
        if entry is None:
            if rules.only_if_cached:
                return Refuse()
            if not cache.coalesces(self.key) or self._claim():
                return self._fetch(None)
            return self._wait()
        fresh = entry.freshness
        if usable(fresh, rules, now):
            if not rules.only_if_cached and cache.due(entry, now) and self._early():
                return self._fetch(entry)  # early: still fresh, so it stands in on failure
            return self._serve(entry, "hit")
        if rules.only_if_cached:
            return Refuse()
        if fresh.revalidate or rules.revalidate:  # each use is validated: no coalescing
            return self._fetch(entry)
        swr = not entry.strict and fresh.age(now) - entry.lifetime <= entry.swr
        if self._claim():
            return self._serve(entry, "stale", background=True) if swr else self._fetch(entry)
        if swr:
            return self._serve(entry, "stale")
        return self._wait()

    def _early(self) -> bool:
        """
        Claim the key for an early refresh, in the cache's turn of early refreshes if spaced.

        With ``refresh_gap``, an early refresh first takes the one slot of the process (memory),
        host (SQLite) or fleet (Redis) that lapses ``refresh_gap`` seconds later: while taken,
        due entries are served as the hits they still are, and come due again on the next read.
        """
        gap = self.cache.refresh_gap
        if gap is not None and not self.cache.claim(EARLY_SLOT, gap):
            return False
        return self._claim()

    def _claim(self) -> bool:
        if self.claimed:
            return True
        self.claimed = self.cache.claim(self.key)
        return self.claimed

    def _wait(self) -> Wait | Fetch:
        if self.waited >= self.cache.lock_timeout:  # the revalidation is taking too long
            return self._fetch(self.entry)
        self.waited += POLL
        return Wait(POLL)

    def _serve(self, entry: Entry, label: CacheLabel, *, background: bool = False) -> Serve:
        self._count(label)
        return Serve(entry, label, background)

    def _count(self, label: CacheLabel) -> None:
        self.label = label
        self.cache.counts[label] += 1

    def _fetch(self, entry: Entry | None) -> Fetch:
        """Go to the origin, with ``entry``'s validators."""
        self.entry = entry
        self.sent = self.cache.clock()
        if self.bypass:
            self.label = "bypass"
            return Fetch({})
        self.label = "miss"
        return Fetch({} if entry is None else conditional_headers(entry.headers))

    def background(self) -> Fetch:
        """After :class:`Serve` with ``background``: the revalidation to send."""
        return self._fetch(self.entry)

    def received(self, status: int, headers: Headers) -> Serve | Keep | Pass:
        """What to do with the origin's answer (``headers`` as received)."""
        pairs = list(headers)
        cache, now = self.cache, self.cache.clock()
        if self.method not in SAFE_METHODS:
            urls = invalidated_urls(self.method, status, self.url, pairs)
            cache.delete(_key(m, u, self.headers) for u in urls for m in CACHEABLE_METHODS)
        if self.bypass:
            self._count("bypass")
            return Pass()
        entry = self.entry
        if status == 304 and entry is not None:
            merged = merge_304(entry.headers, pairs)
            updated = cache.entry(self, entry.status, merged, entry.body, self.sent, now)
            cache.put(updated)
            self.done()
            self._count("revalidated")
            return Serve(updated, "revalidated")
        if status in ERROR_STATUSES and entry is not None:
            stand_in = self._stand_in(entry, now)
            if stand_in is not None:
                return stand_in
        self._count("miss")
        if not self._storable(status, pairs):
            if entry is not None and status < 500:
                cache.delete([self.key])
            self.done(cacheable=False)
            return Pass()
        size = header(pairs, "content-length")
        if size is not None and size.strip().isdigit() and int(size) > cache.max_body:
            self.done(cacheable=False)
            return Pass()
        return Keep(Recorder(self, status, pairs, now))

    def _storable(self, status: int, pairs: list[tuple[str, str]]) -> bool:
        lifetime = freshness(pairs, self.sent, self.cache.clock(), status=status).lifetime
        return storable(self.method, status, pairs, self.directives, lifetime=lifetime)

    def _stand_in(self, entry: Entry, now: float) -> Serve | None:
        """``entry`` answering for an error now: still fresh, or within ``stale-if-error``."""
        fresh = entry.freshness
        if usable(fresh, self.rules, now):
            self.done()
            return self._serve(entry, "hit")
        allowed = 0.0 if entry.strict else max(entry.sie, self.rules.sie or 0.0)
        if entry.strict or fresh.age(now) - entry.lifetime > allowed:
            return None
        self.done()
        return self._serve(entry, "stale")

    def failed(self) -> Serve | None:
        """The origin could not be reached: a stored response that may stand in, if any."""
        entry = self.entry
        found = None
        if entry is not None and not self.bypass:
            found = self._stand_in(entry, self.cache.clock())
        self.done()
        return found

    def stored(self, recorder: Recorder, body: bytes) -> None:
        """
        ``recorder`` read the whole body: store it, its framing headers made true.

        A decoded body loses ``Content-Encoding``; one kept as sent keeps it.
        """
        dropped = _TRANSFER if recorder.encoded else _FRAMING
        headers = [(k, v) for k, v in recorder.headers if k.lower() not in dropped]
        headers.append(("Content-Length", str(len(body))))
        entry = self.cache.entry(
            self, recorder.status, headers, body, self.sent, recorder.at, first=self.entry is None
        )
        self.cache.put(entry)
        self.done()

    def done(self, *, cacheable: bool = True) -> None:
        """End the lookup: give back its claim (idempotent)."""
        if self.claimed:
            self.claimed = False
            self.cache.release(self.key, cacheable=cacheable)


class Recorder:
    """
    Collects a storable response's body as the caller reads it; stores it once read to the end.

    Stops collecting (and stores nothing) past ``max_body`` bytes; :meth:`abandon` when the
    body is not read to its end.  Either ends the lookup.  The body fed is decoded (what
    requests gives), unless :meth:`as_sent` says it is still content-encoded (what an httpx
    transport sees): the stored headers say which.
    """

    __slots__ = ("at", "chunks", "encoded", "headers", "lookup", "size", "status")

    def __init__(
        self, lookup: Lookup, status: int, headers: list[tuple[str, str]], at: float
    ) -> None:
        """Collect for ``lookup`` the body of a response received ``at``."""
        self.lookup, self.status, self.headers, self.at = lookup, status, headers, at
        self.chunks: list[bytes] | None = []
        self.size = 0
        self.encoded = False

    def as_sent(self) -> Recorder:
        """The body will be fed as sent, ``Content-Encoding`` and all (it is kept); ``self``."""
        self.encoded = True
        return self

    def feed(self, chunk: bytes) -> None:
        """A part of the body, in order."""
        if self.chunks is None:
            return
        self.size += len(chunk)
        if self.size > self.lookup.cache.max_body:
            self.chunks = None
            self.lookup.done(cacheable=False)
            return
        self.chunks.append(bytes(chunk))

    def tee(self, chunks: Iterable[bytes]) -> Generator[bytes, None, None]:
        """
        ``chunks`` passed through, each fed here; stored when they run out, not if abandoned.

        What an edge wraps its body stream in: closed before its end (the caller stopped
        reading), nothing is stored.
        """
        ended = False
        try:
            for chunk in chunks:
                self.feed(chunk)
                yield chunk
            ended = True
        finally:
            self._end(ended)

    async def atee(self, chunks: AsyncIterable[bytes]) -> AsyncGenerator[bytes, None]:
        """Async twin of :meth:`tee`."""
        ended = False
        try:
            async for chunk in chunks:
                self.feed(chunk)
                yield chunk
            ended = True
        finally:
            self._end(ended)

    def _end(self, ended: bool) -> None:
        """The stream ran out (stored) or was left (nothing stored)."""
        if ended:
            self.finish()
        else:
            self.abandon()

    def finish(self) -> None:
        """The body was read to its end: store it (once)."""
        if self.chunks is not None:
            chunks, self.chunks = self.chunks, None
            self.lookup.stored(self, b"".join(chunks))

    def abandon(self) -> None:
        """The body will not be read to its end: store nothing."""
        self.chunks = None
        self.lookup.done()
