"""The cache layer in virtual time: hits, refresh points, single flight, stale modes, storing."""

from __future__ import annotations

import itertools
import random

import pytest

from smoothclient.httpcache import HttpCache
from smoothclient.httpcache.lookup import Fetch, Keep, Lookup, Serve, Wait
from smoothclient.testing import FakeClock

from .conftest import NOW, URL, OriginDown, Resp, client, fixed


def test_a_miss_is_stored_and_the_next_call_is_a_hit_that_sends_nothing(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60"))
    first = c.get()
    wall.advance(5)  # before the earliest first refresh point (10% of its life, spread=0.9)
    second = c.get()
    assert (first.cache, second.cache) == ("miss", "hit")
    assert second.body == b"v1"
    assert second.record is not None
    assert second.record["attempts"] == 0
    assert len(c.origin.requests) == 1
    assert c.cache.counts["hit"] == 1


def test_entries_stored_together_are_first_due_evenly_spread(wall: FakeClock) -> None:
    """200 misses at once: due over [0.5, 1.0] of 100 s, no gap wider than 3 even shares."""
    c = client(wall, fixed(cache_control="max-age=100"), spread=0.5)
    points = []
    for i in range(200):
        c.get(f"{URL}/{i}")
        entry = c.entry(f"{URL}/{i}")
        assert entry is not None
        points.append(entry.refresh)
    assert all(50.0 <= p <= 100.0 for p in points)
    ordered = sorted([50.0, *points, 100.0])
    assert max(b - a for a, b in itertools.pairwise(ordered)) < 3 * 50 / 200


def test_entries_stored_apart_are_first_due_evenly_spread_on_the_clock(wall: FakeClock) -> None:
    """
    50 misses over 3 s (a cold start's fill), max-age=5: their first due instants stay evenly
    apart; placed by age alone, the fill's order and pace broke the sequence's spacing.
    """
    c = client(wall, fixed(cache_control="max-age=5"))
    rng = random.Random(3)
    dues = []
    for i in range(50):
        wall.advance(rng.uniform(0.0, 0.12))
        c.get(f"{URL}/{i}")
        entry = c.entry(f"{URL}/{i}")
        assert entry is not None
        assert 0.5 <= entry.refresh <= 5.0  # in the last 90% of its life (spread=0.9)
        dues.append((entry.born + entry.refresh) % 4.5)  # on the clock, modulo the window
    ordered = sorted(dues)
    gaps = [b - a for a, b in itertools.pairwise([*ordered, ordered[0] + 4.5])]
    assert min(gaps) > 0.5 * 4.5 / 50  # the sequence's gaps: none nearly shared
    assert max(gaps) < 2 * 4.5 / 50


def test_an_entry_revalidated_on_time_keeps_its_phase(wall: FakeClock) -> None:
    """
    Each on-time revalidation is due one period (95% of a life) after the last was due, however
    late its reader came: entries keep the phases their first points spread them to (drawn at
    random each time, or counted from each revalidation, their phases drifted into bunches).
    """
    c = client(wall, fixed(cache_control="max-age=100", etag='"v1"'), jitter=0.1)
    c.get()
    first = c.entry()
    assert first is not None
    dues = [first.born + first.refresh]
    c.origin.handler = fixed(304, b"", cache_control="max-age=100")
    for late in [0.01, 2.0, 0.5, 4.9, 0.0, 3.3] * 3:  # when the next reader comes, after it is due
        wall.advance(dues[-1] + late - wall())
        assert c.get().cache == "revalidated"
        renewed = c.entry()
        assert renewed is not None
        assert renewed.born == pytest.approx(wall())
        dues.append(renewed.born + renewed.refresh)
    assert [b - a for a, b in itertools.pairwise(dues)] == pytest.approx([95.0] * 18)


def test_an_entry_revalidated_early_is_due_again_on_its_schedule(wall: FakeClock) -> None:
    """A revalidation before its point (a request's ``no-cache``) leaves the schedule alone."""
    c = client(wall, fixed(cache_control="max-age=100", etag='"v1"'), jitter=0.1)
    c.get()
    first = c.entry()
    assert first is not None
    due = first.born + first.refresh
    c.origin.handler = fixed(304, b"", cache_control="max-age=100")
    wall.advance(first.refresh / 2)
    assert c.get(headers=[("Cache-Control", "no-cache")]).cache == "revalidated"
    renewed = c.entry()
    assert renewed is not None
    assert renewed.born + renewed.refresh == pytest.approx(due)


def test_entries_revalidated_together_after_they_expired_keep_their_phases(
    wall: FakeClock,
) -> None:
    """
    Entries that all expired together (the origin was down), revalidated in the same second,
    still come due apart: each keeps the schedule of its first point.
    """
    c = client(wall, fixed(cache_control="max-age=100", etag='"v1"'), spread=0.5)
    for i in range(50):
        c.get(f"{URL}/{i}")
    firsts = [c.entry(f"{URL}/{i}") for i in range(50)]
    wall.advance(150)  # every one expired (and still kept, for its validator)
    c.origin.handler = fixed(304, b"", cache_control="max-age=100")
    dues = []
    for i, first in enumerate(firsts):
        assert first is not None
        assert c.get(f"{URL}/{i}").cache == "revalidated"
        entry = c.entry(f"{URL}/{i}")
        assert entry is not None
        assert 0.0 < entry.refresh <= 100.0
        periods = (entry.born + entry.refresh - first.born - first.refresh) / 95.0
        assert periods == pytest.approx(round(periods))  # on its first point's schedule
        dues.append(entry.born + entry.refresh)
    ordered = sorted(dues)
    assert min(b - a for a, b in itertools.pairwise(ordered)) > 0.5 * 50 / 50  # not together


def test_a_due_entry_is_revalidated_once_with_validators_and_a_304_refreshes_it(
    wall: FakeClock,
) -> None:
    def origin(headers: list[tuple[str, str]]) -> Resp:
        if ("If-None-Match", '"v1"') in headers:
            return Resp(304, [("ETag", '"v1"'), ("Cache-Control", "max-age=100"), ("X-New", "1")])
        return Resp(200, [("ETag", '"v1"'), ("Cache-Control", "max-age=100")], b"body")

    c = client(wall, origin, lead=0.0)  # no lead: the first reader after the point revalidates
    c.get()
    entry = c.entry()
    assert entry is not None
    wall.advance(entry.refresh - 0.01)
    assert c.get().cache == "hit"
    wall.advance(0.02)  # past the refresh point, still fresh
    revalidated = c.get()
    assert revalidated.cache == "revalidated"
    assert (revalidated.status, revalidated.body) == (200, b"body")
    assert ("X-New", "1") in revalidated.headers
    assert len(c.origin.requests) == 2
    renewed = c.entry()
    assert renewed is not None
    assert renewed.born == pytest.approx(wall())
    assert c.get().cache == "hit"


def test_a_fresh_entry_due_for_refresh_serves_others_while_one_revalidates(
    wall: FakeClock,
) -> None:
    c = client(wall, fixed(cache_control="max-age=100", etag='"v1"'))
    c.get()
    wall.advance(99.99)
    first = Lookup(c.cache, "GET", URL, [])
    assert isinstance(first.step(), Fetch)  # it claimed the revalidation
    second = Lookup(c.cache, "GET", URL, [])
    step = second.step()
    assert isinstance(step, Serve)
    assert step.label == "hit"
    first.done()


def test_a_stale_entry_makes_the_others_wait_for_the_one_revalidation(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=10", etag='"v1"'))
    c.get()
    wall.advance(20)
    leader = Lookup(c.cache, "GET", URL, [])
    assert isinstance(leader.step(), Fetch)
    follower = Lookup(c.cache, "GET", URL, [])
    assert isinstance(follower.step(), Wait)
    outcome = leader.received(304, [("Cache-Control", "max-age=10")])
    assert isinstance(outcome, Serve)
    assert outcome.label == "revalidated"
    step = follower.step()
    assert isinstance(step, Serve)
    assert step.label == "hit"


def test_misses_coalesce_but_not_on_an_uncacheable_url(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="no-store"))
    leader = Lookup(c.cache, "GET", URL, [])
    assert isinstance(leader.step(), Fetch)
    follower = Lookup(c.cache, "GET", URL, [])
    assert isinstance(follower.step(), Wait)
    leader.received(200, [("Cache-Control", "no-store")])
    assert isinstance(follower.step(), Fetch)  # nothing was stored: it goes itself
    assert isinstance(Lookup(c.cache, "GET", URL, []).step(), Fetch)  # and so does the next


def test_a_waiter_gives_up_waiting_after_the_lock_timeout(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=10"), lock_timeout=0.1)
    leader = Lookup(c.cache, "GET", URL, [])
    leader.step()
    follower = Lookup(c.cache, "GET", URL, [])
    steps = [follower.step() for _ in range(10)]
    assert isinstance(steps[-1], Fetch)
    assert sum(isinstance(s, Wait) for s in steps) == 5


def test_stale_while_revalidate_serves_at_once_and_revalidates_in_the_background(
    wall: FakeClock,
) -> None:
    c = client(wall, fixed(cache_control="max-age=10, stale-while-revalidate=30", etag='"v1"'))
    c.get()
    wall.advance(25)
    stale = c.get()
    assert stale.cache == "stale"
    assert len(c.spawned) == 1
    assert len(c.origin.requests) == 1
    assert c.get().cache == "stale"  # the revalidation is in flight: served, not spawned again
    assert len(c.spawned) == 1
    c.spawned[0]()
    assert ("If-None-Match", '"v1"') in c.origin.requests[1]
    assert c.get().cache == "hit"
    wall.advance(10 + 31)  # past the allowance: a plain revalidation
    assert c.get().cache == "miss"


def test_the_caller_can_allow_stale_while_revalidate(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=10"), stale_while_revalidate=60)
    c.get()
    wall.advance(30)
    assert c.get().cache == "stale"


def test_must_revalidate_forbids_every_stale_mode(wall: FakeClock) -> None:
    c = client(
        wall,
        fixed(cache_control="max-age=10, must-revalidate, stale-if-error=60"),
        stale_while_revalidate=60,
        stale_if_error=60,
    )
    c.get()
    wall.advance(20)
    c.origin.handler = fixed(503)
    assert c.get().status == 503


def test_stale_if_error_answers_for_errors_and_exceptions_within_its_allowance(
    wall: FakeClock,
) -> None:
    c = client(wall, fixed(cache_control="max-age=10, stale-if-error=60"))
    c.get()
    wall.advance(30)
    c.origin.handler = fixed(503)
    on_503 = c.get()
    assert (on_503.status, on_503.cache, on_503.body) == (200, "stale", b"v1")
    assert on_503.record is not None
    assert on_503.record["attempts"] == 1

    def down(headers: list[tuple[str, str]]) -> Resp:
        raise OriginDown

    c.origin.handler = down
    assert c.get().cache == "stale"
    wall.advance(60)
    with pytest.raises(OriginDown):
        c.get()


def test_the_caller_and_the_request_can_allow_stale_if_error(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=10"), stale_if_error=100)
    c.get()
    wall.advance(50)
    c.origin.handler = fixed(500)
    assert c.get().cache == "stale"
    other = client(wall, fixed(cache_control="max-age=10"))
    other.get()
    wall.advance(50)
    other.origin.handler = fixed(502)
    assert other.get().status == 502
    assert other.get(headers=[("Cache-Control", "stale-if-error=100")]).cache == "stale"


def test_a_failed_early_refresh_serves_the_still_fresh_copy(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=100"))
    c.get()
    wall.advance(99.99)
    c.origin.handler = fixed(503)
    answer = c.get()
    assert (answer.status, answer.cache) == (200, "hit")
    assert len(c.origin.requests) == 2


def test_only_if_cached(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=10"))
    only = [("Cache-Control", "only-if-cached")]
    assert c.get(headers=only).status == 504
    c.get()
    assert c.get(headers=only).cache == "hit"
    wall.advance(20)
    assert c.get(headers=only).status == 504
    assert len(c.origin.requests) == 1


def test_no_store_requests_bypass_and_no_cache_requests_revalidate(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60", etag='"v1"'))
    assert c.get(headers=[("Cache-Control", "no-store")]).cache == "bypass"
    assert c.entry() is None
    c.get()
    again = c.get(headers=[("Cache-Control", "no-cache")])
    assert again.cache == "miss"  # the origin sent the whole body again
    assert ("If-None-Match", '"v1"') in c.origin.requests[-1]


def test_a_no_cache_response_is_validated_on_every_use(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="no-cache", etag='"v1"'))
    c.get()
    c.origin.handler = fixed(304, b"", etag='"v1"')
    assert [c.get().cache for _ in range(3)] == ["revalidated"] * 3
    assert len(c.origin.requests) == 4


def test_unsafe_methods_invalidate_what_they_touch(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60"))
    c.get()
    c.get(f"{URL}/2")
    c.origin.handler = fixed(201, location="/items/2")
    assert c.get(method="POST").cache == "bypass"
    assert c.entry() is None
    assert c.entry(f"{URL}/2") is None


def test_a_response_varies_on_the_fields_it_names(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60", vary="Accept"))
    c.get(headers=[("Accept", "application/json")])
    assert c.get(headers=[("Accept", "application/json")]).cache == "hit"
    assert c.get(headers=[("Accept", "text/html")]).cache == "miss"


def test_requests_with_credentials_never_share_an_entry(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60"))
    c.get(headers=[("Authorization", "Bearer a")])
    assert c.get(headers=[("Authorization", "Bearer a")]).cache == "hit"
    assert c.get(headers=[("Authorization", "Bearer b")]).cache == "miss"
    assert c.get().cache == "miss"


@pytest.mark.parametrize(
    "cache_control",
    ["max-age=60, public", "max-age=60, must-revalidate", "s-maxage=60, max-age=60"],
)
def test_a_response_to_credentials_is_never_shared_even_when_it_says_it_may(
    wall: FakeClock, cache_control: str
) -> None:
    """RFC 9111 section 3.5 would let a shared cache share these: this cache never does."""
    c = client(wall, fixed(cache_control=cache_control))
    c.get(headers=[("Authorization", "Bearer a")])
    assert c.get(headers=[("Authorization", "Bearer a")]).cache == "hit"
    assert c.get().cache == "miss"
    assert c.get(headers=[("Authorization", "Bearer b")]).cache == "miss"
    assert len(c.origin.requests) == 3


def test_bodies_over_max_body_are_not_stored(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60", body=b"x" * 100), max_body=50)
    assert c.get().body == b"x" * 100
    assert c.entry() is None
    declared = client(wall, fixed(cache_control="max-age=60", content_length="100"), max_body=50)
    declared.get()
    assert declared.entry() is None


def test_the_stored_body_is_decoded_its_framing_headers_made_true(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60", content_encoding="gzip", body=b"plain"))
    c.get()
    entry = c.entry()
    assert entry is not None
    names = {k.lower(): v for k, v in entry.headers}
    assert "content-encoding" not in names
    assert names["content-length"] == "5"


def test_xfetch_revalidates_earlier_when_the_fetch_is_slow(wall: FakeClock) -> None:
    """With beta, an entry whose fetch took 5 s is due well before its jittered point."""
    c = client(wall, fixed(cache_control="max-age=100"), jitter=0, spread=0, early_refresh=1.0)
    c.origin.took = 5.0
    c.get()
    entry = c.entry()
    assert entry is not None
    wall.advance(entry.lifetime - (wall() - entry.born) - 10)  # 10 s before expiry
    dues = [c.cache.due(entry, wall()) for _ in range(200)]
    assert 0 < sum(dues) < 200  # some callers, not all: P(due) = exp(-10 / 5)
    assert sum(dues) == pytest.approx(200 * 0.135, abs=20)


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"max_bytes": 0}, ValueError),
        ({"max_body": "1"}, TypeError),
        ({"jitter": 1.0}, ValueError),
        ({"stale_if_error": -1}, ValueError),
        ({"lock_timeout": 0}, ValueError),
        ({"rng": 3}, TypeError),
        ({"clock": 3}, TypeError),
        ({"storage": "ftp://x"}, ValueError),
        ({"storage": 3}, TypeError),
        ({"storage": "sqlite://"}, ValueError),
    ],
)
def test_settings_are_validated_saying_what_is_allowed(
    settings: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error, match=r"must|needs"):
        HttpCache(**settings)  # type: ignore[arg-type]


def test_the_age_of_a_stored_response_counts_from_its_date(wall: FakeClock) -> None:
    """Dated 50 s ago (49 proven: whole seconds) with max-age=60: fresh for 11 s more."""
    date = "Tue, 14 Nov 2023 22:12:30 GMT"  # NOW - 50
    c = client(wall, fixed(cache_control="max-age=60", date=date), jitter=0.0, spread=0.0)
    c.get()
    wall.advance(10.9)
    assert c.get().cache == "hit"
    wall.advance(0.2)
    assert c.get().cache == "miss"
    assert NOW == 1_700_000_000.0


def test_a_seeded_rng_draws_the_same_refresh_points(wall: FakeClock) -> None:
    a = client(wall, fixed(cache_control="max-age=60"), rng=random.Random(1))
    b = client(wall, fixed(cache_control="max-age=60"), rng=random.Random(1))
    a.get()
    b.get()
    ea, eb = a.entry(), b.entry()
    assert ea is not None
    assert eb is not None
    assert ea.refresh == eb.refresh


def test_the_async_layer_hits_revalidates_in_the_background_and_stands_in(
    wall: FakeClock,
) -> None:
    """cached_send_async: the same outcomes, its spawned revalidation and closes awaited."""
    import asyncio
    import dataclasses
    from collections.abc import Awaitable, Callable

    from smoothclient.edges.cached import cached_send_async

    from .conftest import IO

    c = client(
        wall, fixed(cache_control="max-age=10, stale-while-revalidate=30, stale-if-error=60")
    )
    spawned: list[Callable[[], Awaitable[None]]] = []
    closed: list[Resp] = []

    async def close(response: Resp) -> None:
        closed.append(response)

    io = dataclasses.replace(IO, close=close)

    async def send(extra: dict[str, str]) -> Resp:
        return c.origin.send(list(extra.items()))

    async def nap(seconds: float) -> None:
        wall.advance(seconds)

    async def get() -> Resp:
        return await cached_send_async(c.cache, io, "GET", URL, [], send, nap, spawned.append)

    async def scenario() -> list[str | None]:
        labels = [(await get()).cache, (await get()).cache]
        wall.advance(20)
        labels.append((await get()).cache)  # stale: served, revalidated in the background
        await spawned[0]()
        labels.append((await get()).cache)
        wall.advance(50)
        c.origin.handler = fixed(503)
        answer = await get()
        labels.append(answer.cache)
        return labels

    assert asyncio.run(scenario()) == ["miss", "hit", "stale", "hit", "stale"]
    assert len(closed) == 1
    assert closed[0].status == 503
    assert len(c.origin.requests) == 3


def test_the_settings_are_fixed_once_made() -> None:
    cache = HttpCache(jitter=0.2)
    with pytest.raises(AttributeError, match="fixed at construction"):
        cache.jitter = 0.5
    assert cache.jitter == 0.2


def test_a_body_fed_as_sent_keeps_its_content_encoding(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60", content_encoding="gzip", body=b"zz"))
    lookup = Lookup(c.cache, "GET", URL, [])
    lookup.step()
    kept = lookup.received(200, [("Cache-Control", "max-age=60"), ("Content-Encoding", "gzip")])
    assert isinstance(kept, Keep)
    recorder = kept.recorder.as_sent()
    recorder.feed(b"zz")
    recorder.finish()
    entry = c.entry()
    assert entry is not None
    assert ("Content-Encoding", "gzip") in entry.headers
    assert ("Content-Length", "2") in entry.headers


def test_early_refreshes_take_turns_refresh_gap_apart(wall: FakeClock) -> None:
    """Two entries due at once: one revalidates, the other stays a hit until the gap is over."""
    c = client(wall, fixed(cache_control="max-age=1000"), refresh_gap=1.0)
    c.get(f"{URL}/a")
    c.get(f"{URL}/b")
    wall.advance(990)  # both due (first points in [500, 1000]), both still fresh
    assert c.get(f"{URL}/a").cache == "miss"  # revalidated (the fake origin sends 200s)
    assert c.get(f"{URL}/b").cache == "hit"  # its turn has not come
    wall.advance(0.5)
    assert c.get(f"{URL}/b").cache == "hit"
    wall.advance(0.6)  # the gap is over: b's turn
    assert c.get(f"{URL}/b").cache == "miss"
    assert len(c.origin.requests) == 4


def test_a_recorder_tees_a_stream_and_stores_it_only_read_to_its_end(wall: FakeClock) -> None:
    """tee and atee: all chunks passed through; an abandoned stream stores nothing."""
    import asyncio
    from collections.abc import AsyncIterator

    def keep() -> Keep:
        lookup = Lookup(client(wall, fixed()).cache, "GET", URL, [])
        lookup.step()
        kept = lookup.received(200, [("Cache-Control", "max-age=60")])
        assert isinstance(kept, Keep)
        return kept

    whole = keep()
    assert list(whole.recorder.tee([b"a", b"b"])) == [b"a", b"b"]
    assert whole.recorder.lookup.cache.get("GET " + URL) is not None
    cut = keep()
    stream = cut.recorder.tee([b"a", b"b"])
    next(stream)
    stream.close()
    assert cut.recorder.lookup.cache.get("GET " + URL) is None

    async def chunks() -> AsyncIterator[bytes]:
        yield b"a"
        yield b"b"

    async def read() -> list[bytes]:
        return [chunk async for chunk in keep_async.recorder.atee(chunks())]

    keep_async = keep()
    assert asyncio.run(read()) == [b"a", b"b"]
    stored = keep_async.recorder.lookup.cache.get("GET " + URL)
    assert stored is not None
    assert stored.body == b"ab"


def test_odd_lifetimes_and_due_instants_never_break_a_refresh_point() -> None:
    """Infinite, NaN or vanishing numbers give a point counted from birth, never an error."""
    from smoothclient.httpcache.cache import _at_phase, _on_schedule

    inf, nan = float("inf"), float("nan")
    assert _on_schedule(1e-320, 1e-320, 0.0, -1e300, 0.0) == 1e-320
    assert _on_schedule(95.0, 100.0, 1000.0, nan, 1000.0) == 95.0
    assert _on_schedule(95.0, 100.0, 1000.0, 5000.0, 1000.0) == 95.0  # due after this life
    assert _on_schedule(95.0, 100.0, 1000.0, 997.0, 1000.0) == 92.0  # one period after 997
    assert _at_phase(inf, inf, 1e9, 0.3) == inf
    assert _at_phase(100.0, 0.0, 1e9, 0.3) == 100.0
    assert 10.0 < _at_phase(100.0, 90.0, 1e9, 0.3) <= 100.0


def _field(resp: Resp, name: str) -> list[str]:
    return [v for k, v in resp.headers if k.lower() == name]


def test_a_stored_response_is_served_with_its_current_age(wall: FakeClock) -> None:
    """RFC 9111 section 4: ``Age`` generated on a hit, the origin's own age plus the time here."""
    c = client(wall, fixed(cache_control="max-age=600", age="30"))
    assert _field(c.get(), "age") == ["30"]  # (a miss: as the origin sent it)
    wall.advance(5)
    hit = c.get()
    assert hit.cache == "hit"
    assert _field(hit, "age") == ["35"]  # one Age, not the stored one and a new one
    assert _field(c.get(), "age") == ["35"]


def test_fields_of_one_connection_are_not_stored(wall: FakeClock) -> None:
    """``Connection`` and the fields it names (RFC 9111 section 3.1) are not served from a store."""
    c = client(
        wall,
        fixed(
            cache_control="max-age=600", connection="a, Keep-Alive", a="1", keep_alive="x", b="2"
        ),
    )
    c.get()
    hit = c.get()
    assert hit.cache == "hit"
    names = {k.lower() for k, _ in hit.headers}
    assert {"connection", "a", "keep-alive"}.isdisjoint(names)
    assert "b" in names


@pytest.mark.parametrize("vary", ["*", "foo, *", "*, foo", "*, *"])
def test_a_vary_with_a_star_anywhere_is_never_served(wall: FakeClock, vary: str) -> None:
    c = client(wall, fixed(cache_control="max-age=600", vary=vary))
    c.get()
    assert c.get().cache == "miss"
    assert len(c.origin.requests) == 2
