"""A scripted origin and an edge of plain objects, to drive the cache layer in virtual time."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from smoothclient.edges.cached import EdgeIO, cached_send
from smoothclient.httpcache import HttpCache
from smoothclient.httpcache.entry import Entry
from smoothclient.httpcache.lookup import Lookup, Recorder
from smoothclient.testing import FakeClock

NOW = 1_700_000_000.0
URL = "https://api.test/items"


@dataclass
class Resp:
    """A response of the fake edge."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    record: dict[str, Any] | None = None
    closed: bool = False

    @property
    def cache(self) -> str | None:
        """What the record says the cache did."""
        return None if self.record is None else self.record.get("cache")


class OriginDown(Exception):
    """The fake transport's failure."""


Handler = Callable[[list[tuple[str, str]]], Resp]


@dataclass
class Origin:
    """Answers each request with ``handler(request headers)``; counts and keeps them."""

    clock: FakeClock
    handler: Handler
    requests: list[list[tuple[str, str]]] = field(default_factory=list)
    took: float = 0.0  # seconds each answer takes

    def send(self, headers: list[tuple[str, str]]) -> Resp:
        """One request to the origin."""
        self.requests.append(headers)
        self.clock.advance(self.took)
        response = self.handler(headers)
        response.record = {"attempts": 1}
        return response


def fixed(status: int = 200, body: bytes = b"v1", **fields: str) -> Handler:
    """Always the same answer (``cache_control=`` -> ``Cache-Control``)."""
    headers = [(k.replace("_", "-").title(), v) for k, v in fields.items()]
    return lambda _: Resp(status, list(headers), body)


def _tee(response: Resp, recorder: Recorder) -> Resp:
    recorder.feed(response.body)  # the caller reads it all at once
    recorder.finish()
    return response


def _close(response: Resp) -> None:
    response.closed = True


IO: EdgeIO[Resp] = EdgeIO(
    status=lambda r: r.status,
    headers=lambda r: r.headers,
    build=lambda entry, record: Resp(entry.status, list(entry.headers), entry.body, record),
    tee=_tee,
    consume=lambda r: None,
    close=_close,
    record=lambda r: r.record,
    failures=(OriginDown,),
)


@dataclass
class Client:
    """The fake edge: a cache, an origin, and the background work spawned."""

    cache: HttpCache
    origin: Origin
    spawned: list[Callable[[], object]] = field(default_factory=list)

    def get(
        self, url: str = URL, headers: Iterable[tuple[str, str]] = (), method: str = "GET"
    ) -> Resp:
        """One call through the cache."""
        sent = list(headers)
        return cached_send(
            self.cache,
            IO,
            method,
            url,
            sent,
            lambda extra: self.origin.send(sent + list(extra.items())),
            self.origin.clock.sleep,
            self.spawned.append,
        )

    def entry(self, url: str = URL, headers: Iterable[tuple[str, str]] = ()) -> Entry | None:
        """What is stored for a GET of ``url`` with ``headers`` (its variant, if it varies)."""
        return Lookup(self.cache, "GET", url, list(headers)).find()


@pytest.fixture
def wall() -> FakeClock:
    """A wall clock at a fixed date."""
    return FakeClock(NOW)


def client(wall: FakeClock, handler: Handler, **settings: Any) -> Client:
    """A client on a memory cache with a seeded RNG and ``wall`` as its clock."""
    settings.setdefault("rng", random.Random(7))
    return Client(HttpCache(clock=wall, **settings), Origin(wall, handler))
