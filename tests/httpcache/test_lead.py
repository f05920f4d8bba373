"""
The lead, in virtual time: a reader ahead of an entry's refresh point has it sent at the point.

docs/http-cache.md section 3: a due entry revalidated by its next reader reaches the origin at
its point plus that reader's wait, and the waits undo the spacing of the points.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import random
from collections.abc import Callable

import pytest

from smoothclient.httpcache import HttpCache
from smoothclient.httpcache.lookup import Fetch, Keep, Lookup, Serve
from smoothclient.testing import FakeClock

from .conftest import URL, Resp, client


def _tagged(headers: list[tuple[str, str]]) -> Resp:
    fields = [("ETag", '"v1"'), ("Cache-Control", "max-age=100")]
    return Resp(304 if ("If-None-Match", '"v1"') in headers else 200, fields, b"body")


def test_a_reader_within_the_lead_has_the_revalidation_sent_at_the_point(
    wall: FakeClock,
) -> None:
    """A hit now, one revalidation spawned, sent (with validators) at the point exactly."""
    c = client(wall, _tagged)
    c.get()
    entry = c.entry()
    assert entry is not None
    point = entry.born + entry.refresh
    wall.advance(point - 0.1 * entry.lifetime - wall())  # inside the lead (20% of its life)
    assert c.get().cache == "hit"
    assert len(c.spawned) == 1
    assert c.get().cache == "hit"  # the key is claimed: nobody else schedules it
    assert (len(c.spawned), len(c.origin.requests)) == (1, 1)
    sent_at: list[float] = []

    def timed(headers: list[tuple[str, str]]) -> Resp:
        sent_at.append(wall())
        return _tagged(headers)

    c.origin.handler = timed
    c.spawned[0]()  # the background job: sleeps until the point, then sends
    assert sent_at == [pytest.approx(point)]
    assert ("If-None-Match", '"v1"') in c.origin.requests[-1]
    renewed = c.entry()
    assert renewed is not None
    assert renewed.born == pytest.approx(point)
    assert renewed.born + renewed.refresh == pytest.approx(point + 95.0)  # its schedule kept
    assert c.cache.counts["revalidated"] == 1


def test_before_the_lead_and_with_no_lead_nothing_is_scheduled(wall: FakeClock) -> None:
    for lead, early in ((0.2, 0.3), (0.0, 0.01)):
        c = client(wall, _tagged, lead=lead)
        c.get()
        entry = c.entry()
        assert entry is not None
        wall.advance(entry.born + entry.refresh - early * entry.lifetime - wall())
        assert c.get().cache == "hit"
        assert c.spawned == []


def test_a_caller_conditional_or_ranged_read_schedules_nothing(wall: FakeClock) -> None:
    c = client(wall, _tagged)
    c.get()
    entry = c.entry()
    assert entry is not None
    wall.advance(entry.born + entry.refresh - 0.05 * entry.lifetime - wall())
    assert c.get(headers=[("If-None-Match", '"v1"')]).status == 304
    assert c.get(headers=[("Range", "bytes=0-1")]).status == 206
    assert c.spawned == []


def test_a_lead_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match="lead"):
        HttpCache(lead=1.0)
    with pytest.raises(TypeError, match="lead"):
        HttpCache(lead="0.2")  # type: ignore[arg-type]


def _fleet_arrivals(
    urls: int, max_age: int, seconds: float, lead: float, seed: int
) -> tuple[list[float], list[tuple[float, float, float]]]:
    """
    ``urls`` read through one cache at random instants (each URL 60 times per ``max_age`` on
    average), in virtual time: when each request reached the origin, and for each
    revalidation (sent, its point, its expiry).
    """
    now = [1_700_000_000.0]
    rng = random.Random(seed)
    cache = HttpCache(clock=lambda: now[0], rng=random.Random(seed), lead=lead)
    queue: list[tuple[float, int, Callable[[], None]]] = []
    order = itertools.count()
    arrivals: list[float] = []
    revalidations: list[tuple[float, float, float]] = []

    def at(when: float, job: Callable[[], None]) -> None:
        heapq.heappush(queue, (when, next(order), job))

    def send(lookup: Lookup, fetch: Fetch) -> None:
        entry = lookup.entry
        if entry is not None:
            point = entry.born + entry.refresh
            revalidations.append((now[0], point, entry.born + entry.lifetime))
        arrivals.append(now[0])
        fresh = fetch.headers.get("If-None-Match") == '"v1"'
        fields = [("Cache-Control", f"max-age={max_age}"), ("ETag", '"v1"')]
        answer = lookup.received(304 if fresh else 200, fields)
        if isinstance(answer, Keep):
            answer.recorder.feed(b"body")
            answer.recorder.finish()

    def read(url: str) -> None:
        lookup = Lookup(cache, "GET", url, [])
        step = lookup.step()
        if isinstance(step, Fetch):
            send(lookup, step)
        elif isinstance(step, Serve) and step.background:

            def later() -> None:
                send(lookup, lookup.background())

            at(now[0] + step.delay, later)
        at(now[0] + rng.expovariate(60 / max_age), lambda: read(url))

    for i in range(urls):
        at(now[0] + rng.uniform(0, 1), functools.partial(read, f"{URL}/{i}"))
    end = now[0] + seconds
    while queue[0][0] < end:
        when, _, job = heapq.heappop(queue)
        now[0] = when
        job()
    return arrivals, revalidations


@pytest.mark.parametrize(("urls", "max_age"), [(50, 5), (10, 2), (200, 30)])
def test_revalidations_reach_the_origin_at_their_points_never_after_expiry(
    urls: int, max_age: int
) -> None:
    """Readers at random instants: every revalidation is sent at its point, before expiry."""
    _, revalidations = _fleet_arrivals(urls, max_age, 3 * max_age, 0.2, seed=3)
    assert len(revalidations) >= urls * 2
    assert all(sent == pytest.approx(point) for sent, point, _ in revalidations)
    assert all(sent < expiry for sent, _, expiry in revalidations)


def test_without_the_lead_the_readers_waits_bunch_the_revalidations() -> None:
    """The same readers, 50 URLs of max-age=5: the busiest 100 ms twice as full without it."""

    def busiest(lead: float) -> int:
        arrivals, _ = _fleet_arrivals(50, 5, 30.0, lead, seed=5)
        start = arrivals[0] + 5.0  # past the cold start's fill
        counts = [0] * 400
        for t in arrivals:
            if t >= start:
                counts[int((t - start) / 0.1)] += 1
        return max(counts)

    assert busiest(0.2) <= 2 < busiest(0.0)


def test_an_entry_revalidated_by_another_since_it_was_read_is_not_revalidated_again(
    wall: FakeClock,
) -> None:
    """A reader read the entry, another revalidated it and gave the key back: no second one."""
    c = client(wall, _tagged, lead=0.0)
    c.get()
    entry = c.entry()
    assert entry is not None
    wall.advance(entry.refresh + 0.01)  # due, still fresh
    late = Lookup(c.cache, "GET", URL, [])
    late.entry = late.find()  # it read the due entry ...
    first = Lookup(c.cache, "GET", URL, [])
    assert isinstance(first.step(), Fetch)
    assert isinstance(first.received(304, [("Cache-Control", "max-age=100")]), Serve)
    assert not first.claimed  # ... the other revalidated it and gave the key back
    assert late._early() is False
    assert not late.claimed


def test_the_async_layer_sends_at_the_point_and_a_cancelled_wait_gives_the_key_back(
    wall: FakeClock,
) -> None:
    """cached_send_async: the job sleeps until the point; cancelled meanwhile, it releases."""
    import asyncio
    from collections.abc import Awaitable

    from smoothclient.edges.cached import cached_send_async

    from .conftest import IO

    c = client(wall, _tagged)
    spawned: list[Callable[[], Awaitable[None]]] = []
    naps: list[float] = []

    async def send(extra: dict[str, str]) -> Resp:
        return c.origin.send(list(extra.items()))

    async def nap(seconds: float) -> None:
        naps.append(seconds)
        wall.advance(seconds)

    async def cancelled(seconds: float) -> None:
        raise asyncio.CancelledError

    async def get() -> Resp:
        return await cached_send_async(c.cache, IO, "GET", URL, [], send, nap, spawned.append)

    async def scenario() -> None:
        await get()
        entry = c.entry()
        assert entry is not None
        point = entry.born + entry.refresh
        wall.advance(point - 0.05 * entry.lifetime - wall())
        assert (await get()).cache == "hit"
        await spawned[0]()
        assert naps == [pytest.approx(0.05 * entry.lifetime)]
        assert wall() == pytest.approx(point)  # sent at the point
        assert len(c.origin.requests) == 2
        renewed = c.entry()
        assert renewed is not None
        wall.advance(renewed.born + renewed.refresh - 0.05 * renewed.lifetime - wall())
        assert await cached_send_async(c.cache, IO, "GET", URL, [], send, cancelled, spawned.append)
        with pytest.raises(asyncio.CancelledError):
            await spawned[1]()
        key = Lookup(c.cache, "GET", URL, []).key
        assert c.cache.claim(key)  # the key was given back

    asyncio.run(scenario())
