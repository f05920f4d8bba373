"""
:class:`Lookup`: one request's way through an :class:`~smoothclient.httpcache.HttpCache`.

A :class:`Lookup` decides; it never sends, sleeps or spawns.  Its :meth:`~Lookup.step` says
what the edge does next: :class:`Serve` a stored response, :class:`Fetch` from the origin (with
validators), :class:`Wait` for another caller's revalidation, or :class:`Refuse`
(``only-if-cached``).  What the origin answered goes to :meth:`~Lookup.received` (a
:class:`Keep` hands a :class:`Recorder` for the body), an exception to :meth:`~Lookup.failed`;
:meth:`~Lookup.done` ends it.  The edges drive it through ``smoothclient.edges.cached``;
docs/http-cache.md says how the whole works.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .cache import HttpCache
from .entry import Entry, aged
from .rules import (
    CACHEABLE_METHODS,
    SAFE_METHODS,
    cache_key,
    conditional_headers,
    freshness,
    header,
    invalidated_urls,
    merge_304,
    request_rules,
    storable,
    usable,
    vary_values,
)

if TYPE_CHECKING:
    from .rules import Headers

__all__ = [
    "EARLY_SLOT",
    "CacheLabel",
    "Fetch",
    "Keep",
    "Lookup",
    "Pass",
    "Recorder",
    "Refuse",
    "Serve",
    "Wait",
]

#: What the call record's ``cache`` says of a call.
CacheLabel = Literal["hit", "miss", "revalidated", "stale", "bypass"]
#: How often a caller waiting for another's revalidation looks again.
POLL = 0.02
#: The key of the slot early refreshes take turns in (``refresh_gap``): never a request's key.
EARLY_SLOT = "smoothclient early refresh slot"
#: Statuses that let ``stale-if-error`` serve a stored response (RFC 5861 section 4).
ERROR_STATUSES = frozenset({500, 502, 503, 504})
#: Headers that describe the body as sent, not as stored (it is stored decoded).
_TRANSFER = frozenset({"content-length", "transfer-encoding"})
_FRAMING = _TRANSFER | {"content-encoding"}
#: Fields of one connection, never stored (RFC 9110 section 7.6.1; with those ``Connection``
#: names, RFC 9111 section 3.1).
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"})
#: Makes giving a claim back once atomic: an async edge may end a lookup from two threads.
_DONE = threading.Lock()


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
        return Serve(aged(entry, self.cache.clock()), label, background)

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
            updated = cache.entry(
                self.key,
                self.headers,
                entry.status,
                merged,
                entry.body,
                self.sent,
                now,
                due=entry.born + entry.refresh,
            )
            cache.put(updated)
            self.done()
            self._count("revalidated")
            return Serve(aged(updated, now), "revalidated")
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
        dropped = (_TRANSFER if recorder.encoded else _FRAMING) | _HOP
        listed = header(recorder.headers, "connection") or ""
        dropped |= {name.strip().lower() for name in listed.split(",")}
        headers = [(k, v) for k, v in recorder.headers if k.lower() not in dropped]
        headers.append(("Content-Length", str(len(body))))
        entry = self.cache.entry(
            self.key,
            self.headers,
            recorder.status,
            headers,
            body,
            self.sent,
            recorder.at,
            first=self.entry is None,
            due=None if self.entry is None else self.entry.born + self.entry.refresh,
        )
        self.cache.put(entry)
        self.done()

    def done(self, *, cacheable: bool = True) -> None:
        """End the lookup: give back its claim (idempotent, from any thread)."""
        with _DONE:
            claimed, self.claimed = self.claimed, False
        if claimed:
            self.cache.release(self.key, cacheable=cacheable)


class Recorder:
    """
    Collects a storable response's body as the caller reads it; stores it once read to the end.

    Stops collecting (and stores nothing) past ``max_body`` bytes; :meth:`abandon` when the
    body is not read to its end.  Either ends the lookup (once: what comes after is ignored).
    The body fed is decoded (what requests gives), unless :meth:`as_sent` says it is still
    content-encoded (what an httpx transport sees): the stored headers say which.

    ``defer``: where the store's work at the end (the write, the claim given back) runs;
    ``None``: at once.  An async edge hands it to a thread, off the event loop.
    """

    __slots__ = ("at", "chunks", "defer", "encoded", "ended", "headers", "lookup", "size", "status")

    def __init__(
        self, lookup: Lookup, status: int, headers: list[tuple[str, str]], at: float
    ) -> None:
        """Collect for ``lookup`` the body of a response received ``at``."""
        self.lookup, self.status, self.headers, self.at = lookup, status, headers, at
        self.chunks: list[bytes] | None = []
        self.size = 0
        self.encoded = False
        self.ended = False
        self.defer: Callable[[Callable[[], object]], object] | None = None

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
            self._end(lambda: self.lookup.done(cacheable=False))
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
            self._ran_out(ended)

    async def atee(self, chunks: AsyncIterable[bytes]) -> AsyncGenerator[bytes, None]:
        """Async twin of :meth:`tee`."""
        ended = False
        try:
            async for chunk in chunks:
                self.feed(chunk)
                yield chunk
            ended = True
        finally:
            self._ran_out(ended)

    def _ran_out(self, ended: bool) -> None:
        """The stream ran out (stored) or was left (nothing stored)."""
        if ended:
            self.finish()
        else:
            self.abandon()

    def _end(self, work: Callable[[], object]) -> None:
        """End the lookup with ``work`` (once), where ``defer`` says."""
        if self.ended:
            return
        self.ended = True
        if self.defer is None:
            work()
        else:
            self.defer(work)

    def finish(self) -> None:
        """The body was read to its end: store it (once)."""
        if self.chunks is not None:
            body, self.chunks = b"".join(self.chunks), None
            self._end(lambda: self.lookup.stored(self, body))

    def abandon(self) -> None:
        """The body will not be read to its end: store nothing."""
        self.chunks = None
        self._end(self.lookup.done)
