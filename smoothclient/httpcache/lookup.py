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

import dataclasses
import hashlib
import secrets
import threading
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .cache import HttpCache
from .entry import Entry, aged, index_of, variant_key
from .ranges import partial, same_representation
from .rules import (
    CACHEABLE_METHODS,
    SAFE_METHODS,
    cache_key,
    freshness,
    header,
    invalidated_urls,
    request_rules,
    storable,
    usable,
    vary_names,
    vary_values,
)
from .validation import (
    caller_conditional,
    conditional_headers,
    merge_304,
    not_modified,
    not_modified_headers,
    validated_by_304,
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
    """Answer with ``entry``; ``background``: revalidate it too, ``delay`` seconds from now."""

    entry: Entry
    label: CacheLabel
    background: bool = False
    delay: float = 0.0


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
        #: The caller sent its own validators: they go to the origin as they are, and a
        #: stored response they select is answered with a 304 (docs/http-cache.md section 1).
        self.conditional = bool(self.key) and caller_conditional(headers)
        #: The caller asks for a range: a stored 200 answers it with a 206 of those bytes;
        #: sent to the origin, it is answered in the foreground and holds nobody up (its
        #: answer is likely a 206, which stores nothing).
        self.ranged = bool(self.key) and header(headers, "range") is not None
        self.entry: Entry | None = None
        #: Where this request's response is stored: the primary key, or its variant's key
        #: when the stored response varies (``index``: the index of its variants).
        self.slot = self.key
        self.index: Entry | None = None
        self.label: CacheLabel = "bypass"
        self.claimed = False
        self._claimed_key = ""
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
        entry = self.find()
        self.entry = entry
        now = cache.clock()
        if entry is None:
            if rules.only_if_cached:
                return Refuse()
            # (a caller's conditional miss is not waited for: its answer is likely a 304)
            if self.conditional or self.ranged:
                return self._fetch(None)
            if not cache.coalesces(self.slot) or self._claim():
                return self._fetch(None)
            return self._wait()
        fresh = entry.freshness
        held = self._held(entry)
        if usable(fresh, rules, now):
            if not rules.only_if_cached:
                if held is False:  # the caller holds another copy: the origin says which
                    return self._fetch(entry)
                if not self.ranged and cache.due(entry, now) and self._early():
                    return self._fetch(entry)  # early: still fresh, so it stands in on failure
                ahead = None if self.ranged or self.conditional else cache.ahead(entry, now)
                if ahead is not None and self._early(ahead):  # sent at its point, not later
                    return self._serve(entry, "hit", True, ahead)
            return self._serve(entry, "hit")
        if rules.only_if_cached:
            return Refuse()
        if fresh.revalidate or rules.revalidate:  # each use is validated: no coalescing
            return self._fetch(entry)
        if self.conditional:  # stale: validated with the caller's validators, never behind
            return self._fetch(entry) if held is False or self._claim() else self._wait()
        if self.ranged:  # validated in the foreground, claiming nothing
            return self._fetch(entry)
        swr = not entry.strict and fresh.age(now) - entry.lifetime <= entry.swr
        if self._claim():
            return self._serve(entry, "stale", True) if swr else self._fetch(entry)
        if swr:
            return self._serve(entry, "stale")
        return self._wait()

    def find(self) -> Entry | None:
        """
        The stored response that may answer this request (``None``: none), by the store's key.

        Under the primary key is the response, or the index of its variants (a response that
        varies): then the variant the request's values of the index's fields select, under
        a key of its own (:attr:`slot`).  A response stored for other values is no answer.
        """
        cache = self.cache
        found = cache.get(self.key)
        self.index, self.slot = None, self.key
        if found is not None and found.variants:
            self.index = found
            self.slot = variant_key(self.key, found, vary_values(found.vary, self.headers))
            found = cache.get(self.slot)
            if found is not None and (found.variants or found.vary != self.index.vary):
                found = None  # (not what this index stores: never served)
        if found is not None and found.selected != vary_values(found.vary, self.headers):
            return None  # stored for another variant: this request is a miss
        return found

    def _early(self, ahead: float = 0.0) -> bool:
        """
        Claim the key for an early refresh (sent ``ahead`` s from now), in its turn if spaced.

        With ``refresh_gap``, one sent now first takes the one slot of the process (memory),
        host (SQLite) or fleet (Redis) that lapses ``refresh_gap`` seconds later: while taken,
        due entries are served as the hits they still are, and come due again on the next read.
        Claimed, the entry is read again: not revalidated twice if another caller just did.
        """
        gap, was = self.cache.refresh_gap, self.entry
        if gap is not None and not ahead and not self.cache.claim(EARLY_SLOT, gap):
            return False
        if not self._claim(self.cache.lock_timeout + ahead) or was is None:
            return self.claimed
        now = self.cache.get(self.slot)
        if now is not None and (now.born, now.refresh) != (was.born, was.refresh):
            self.done()
        return self.claimed

    def _claim(self, ttl: float | None = None) -> bool:
        if self.claimed:
            return True
        self.claimed = self.cache.claim(self.slot, ttl)
        if self.claimed:
            self._claimed_key = self.slot
        return self.claimed

    def _wait(self) -> Wait | Fetch:
        if self.waited >= self.cache.lock_timeout:  # the revalidation is taking too long
            return self._fetch(self.entry)
        self.waited += POLL
        return Wait(POLL)

    def _held(self, entry: Entry) -> bool | None:
        """
        Whether the caller's own validators select ``entry`` (``None``: they do not apply).

        They apply to a conditional request, and to a stored 2xx only (the origin ignores them
        for any other status, RFC 9110 section 13.2.1: the stored response answers as it is).
        """
        if not self.conditional or not 200 <= entry.status < 300:
            return None
        return not_modified(entry.headers, self.headers)

    def _serve(self, entry: Entry, label: CacheLabel, bg: bool = False, delay: float = 0) -> Serve:
        self._count(label)
        return Serve(self._shaped(entry, self.cache.clock()), label, bg, delay)

    def _shaped(self, entry: Entry, now: float) -> Entry:
        """
        ``entry`` as this request gets it ``now``.

        With its current ``Age``; a 304 when the caller's validators select it; the 206 of
        the range asked for, when it is a 200 and one range is asked for.
        """
        served = aged(entry, now)
        if self._held(entry):  # the caller has this response already: a 304, no body
            headers = tuple(not_modified_headers(served.headers))
            return dataclasses.replace(served, status=304, headers=headers, body=b"")
        if self.ranged:
            return partial(served, self.headers) or served
        return served

    def _count(self, label: CacheLabel) -> None:
        self.label = label
        self.cache.counts[label] += 1

    def _fetch(self, entry: Entry | None) -> Fetch:
        """Go to the origin, with ``entry``'s validators (or the caller's own, as they are)."""
        self.entry = entry
        self.sent = self.cache.clock()
        if self.bypass:
            self.label = "bypass"
            return Fetch({})
        self.label = "miss"
        if entry is None or self.conditional:
            return Fetch({})
        return Fetch(conditional_headers(entry.headers))

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
        if status == 304 and self.conditional:
            return self._not_modified(entry, pairs, now)
        if status == 304 and entry is not None:
            return Serve(self._shaped(self._freshen(entry, pairs, now), now), "revalidated")
        if status == 206:
            return self._partial_content(entry, pairs, now)
        if status in ERROR_STATUSES and entry is not None:
            stand_in = self._stand_in(entry, now)
            if stand_in is not None:
                return stand_in
        self._count("miss")
        if not self._storable(status, pairs):
            if entry is not None and status < 500:
                cache.delete([self.slot])
            self.done(cacheable=False)
            return Pass()
        size = header(pairs, "content-length")
        if size is not None and size.strip().isdigit() and int(size) > cache.max_body:
            self.done(cacheable=False)
            return Pass()
        return Keep(Recorder(self, status, pairs, now))

    def _not_modified(self, entry: Entry | None, pairs: list[tuple[str, str]], now: float) -> Pass:
        """
        A 304 to the caller's own validators: theirs to have (it is what they asked).

        When it is about the stored response too, that is freshened by it first; a 304 about
        another copy (one the caller holds) leaves the store as it was.
        """
        if entry is None or not validated_by_304(entry.headers, pairs, self.headers):
            self.done()
            self._count("miss")
            return Pass()
        self._freshen(entry, pairs, now)
        return Pass()

    def _partial_content(
        self, entry: Entry | None, pairs: list[tuple[str, str]], now: float
    ) -> Pass:
        """
        A 206 from the origin: the caller's, never stored (it is a part, not the response).

        When it is a part of the stored response (the same strong validator, RFC 9111
        section 3.4: one range, its ``Content-Range`` alone), it freshens that as a 304 would;
        when its validator says the stored response is no longer the current one (the
        validators sent did not match), that is deleted; else the store is left as it was.
        """
        if entry is not None and not self.conditional:
            same = same_representation(entry.headers, pairs)
            if same and entry.status == 200 and header(pairs, "content-range") is not None:
                self._freshen(entry, pairs, now, "miss")
                return Pass()
            if same is False:
                self.cache.delete([self.slot])
        self.done()
        self._count("miss")
        return Pass()

    def _freshen(
        self,
        entry: Entry,
        pairs: list[tuple[str, str]],
        now: float,
        label: CacheLabel = "revalidated",
    ) -> Entry:
        """``entry`` updated by a 304 (or a 206 of it) received ``now`` and stored (it ends)."""
        updated = self._place(
            entry.status,
            merge_304(entry.headers, pairs),
            entry.body,
            self.sent,
            now,
            due=entry.born + entry.refresh,
        )
        self.done()
        self._count(label)
        return updated

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
        self._place(
            recorder.status,
            headers,
            body,
            self.sent,
            recorder.at,
            first=self.entry is None,
            due=None if self.entry is None else self.entry.born + self.entry.refresh,
        )
        self.done()

    def _place(
        self,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        sent: float,
        received: float,
        *,
        first: bool = False,
        due: float | None = None,
    ) -> Entry:
        """
        Store a response to this request where it belongs, and return its entry.

        One that does not vary goes under the primary key (replacing an index of variants
        there: its variants become unreachable).  One that varies goes under its variant's key,
        in the index of the fields it names: the one stored when it names the same fields
        (extended to outlive the variant), else a new one (the variants of the old, which
        named other fields, become unreachable).
        """
        cache = self.cache
        names = vary_names(headers)
        key, index = self.key, None
        if names:
            index = self.index
            if index is None or index.vary != names:
                index = index_of(self.key, names, secrets.token_hex(8), received, 0.0)
            key = variant_key(self.key, index, vary_values(names, self.headers))
        entry = cache.entry(
            key, self.headers, status, headers, body, sent, received, first=first, due=due
        )
        cache.put(entry)
        if index is not None:
            now = cache.clock()
            needed = entry.keep_for(now)
            if index is not self.index or index.born + index.lifetime < now + needed:
                index = index_of(self.key, names, index.variants, now, 2 * needed)
                cache.put(index, index.lifetime)
            self.index, self.slot = index, key
        return entry

    def done(self, *, cacheable: bool = True) -> None:
        """End the lookup: give back its claim (idempotent, from any thread)."""
        with _DONE:
            claimed, self.claimed = self.claimed, False
        if claimed:
            self.cache.release(self._claimed_key, cacheable=cacheable)


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
