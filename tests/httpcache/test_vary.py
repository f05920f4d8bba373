"""
Vary: a request matches a stored variant when its values differ only where the field's
syntax says nothing does (RFC 9111 section 4.1), in virtual time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from smoothclient.httpcache.lookup import Fetch, Lookup, Wait
from smoothclient.httpcache.rules import vary_values
from smoothclient.testing import FakeClock

from .conftest import URL, Resp, client, fixed


def same(name: str, first: str, second: str) -> bool:
    """Whether a request with ``name: first`` selects the variant stored for ``second``."""
    return vary_values([name.lower()], [(name, first)]) == vary_values(
        [name.lower()], [(name, second)]
    )


@pytest.mark.parametrize(
    ("name", "first", "second"),
    [
        ("Accept-Language", "en, de", " en ,   de"),  # whitespace around the commas
        ("Accept-Language", "en,de", "en, de"),
        ("Accept-Language", "en, de", "eN, De"),  # language ranges are case-insensitive
        ("Accept-Language", "en;q=0.5, de", "en ; Q=0.5,de"),  # and so is the weight's q
        ("Accept-Language", "en, de", "en,, de,"),  # empty members are nothing
        ("Accept-Encoding", "gzip, br", "GZIP,br"),
        ("Accept-Charset", "utf-8, iso-8859-1;q=0.5", "UTF-8,ISO-8859-1 ;q=0.5"),
        ("Accept", "text/html;level=1, application/json", "Text/HTML; LEVEL=1 ,application/json"),
        ("Foo", "a b", " a   b "),  # any field: the whitespace around it and its runs inside
    ],
)
def test_values_that_differ_only_where_nothing_does_select_the_same_variant(
    name: str, first: str, second: str
) -> None:
    assert same(name, first, second)


@pytest.mark.parametrize(
    ("name", "first", "second"),
    [
        ("Accept-Language", "en, de", "de, en"),  # the order may say a preference
        ("Accept-Language", "en, de", "en"),
        ("Accept-Language", "en;q=0.5", "en;q=0.4"),
        ("Accept", 'text/html;p="A"', 'text/html;p="a"'),  # a parameter's value keeps its case
        ("Accept", 'text/html;p="a,b"', 'text/html;p="a, b"'),  # inside quotes: as it is
        ("Accept", 'a/b;p="x\\", y"', 'a/b;p="x\\",y"'),  # an escaped quote stays inside
        ("Foo", "1,2", "1, 2"),  # a field of unknown syntax may not be a list
        ("Foo", "abc", "ABC"),
    ],
)
def test_values_that_may_differ_in_meaning_select_another_variant(
    name: str, first: str, second: str
) -> None:
    assert not same(name, first, second)


def test_a_stored_variant_answers_a_request_whose_values_differ_only_in_form(
    wall: FakeClock,
) -> None:
    c = client(wall, fixed(cache_control="max-age=600", vary="Accept-Language, Accept-Encoding"))
    c.get(headers=[("Accept-Language", "en-US, de;q=0.5"), ("Accept-Encoding", "gzip, br")])
    for language, coding in (
        (" en-us ,de ; q=0.5", "gzip,br"),
        ("EN-US,DE;Q=0.5", "GZIP, BR"),
    ):
        answer = c.get(headers=[("Accept-Language", language), ("Accept-Encoding", coding)])
        assert (answer.status, answer.cache) == (200, "hit")
    other = c.get(headers=[("Accept-Language", "de;q=0.5, en-US"), ("Accept-Encoding", "gzip, br")])
    assert other.cache == "miss"
    assert len(c.origin.requests) == 2


def language(value: str) -> list[tuple[str, str]]:
    """A request's ``Accept-Language``."""
    return [("Accept-Language", value)]


def by_language(headers: list[tuple[str, str]]) -> Resp:
    """An origin that answers in the first language asked for (or en), varying on it."""
    asked = {k.lower(): v for k, v in headers}.get("accept-language", "en")
    fields = [("Cache-Control", "max-age=60"), ("Vary", "Accept-Language"), ("ETag", f'"{asked}"')]
    return Resp(200, fields, asked.encode())


def test_each_variant_is_stored_and_answers_on_its_own(wall: FakeClock) -> None:
    """Two languages read in turn: each one fetched once, then both hit (RFC 9111 section 4.1)."""
    c = client(wall, by_language)
    assert [c.get(headers=language(v)).cache for v in ("en", "de")] == ["miss", "miss"]
    for _ in range(3):
        for value in ("en", "de"):
            answer = c.get(headers=language(value))
            assert (answer.cache, answer.body) == ("hit", value.encode())
    assert c.get().cache == "miss"  # no Accept-Language at all: a variant of its own
    assert c.get().cache == "hit"
    assert len(c.origin.requests) == 3


def test_a_variant_is_revalidated_alone(wall: FakeClock) -> None:
    c = client(wall, by_language)
    c.get(headers=language("en"))
    wall.advance(58)
    c.get(headers=language("de"))
    wall.advance(3)  # en is stale, de is not (nor yet due for an early refresh)
    c.origin.handler = lambda headers: Resp(
        304, [("ETag", '"en"'), ("Cache-Control", "max-age=60")]
    )
    answer = c.get(headers=language("en"))
    assert (answer.cache, answer.body) == ("revalidated", b"en")
    assert ("If-None-Match", '"en"') in c.origin.requests[-1]
    assert c.get(headers=language("de")).cache == "hit"
    assert len(c.origin.requests) == 3


def test_a_stale_variant_being_revalidated_holds_no_other_variant_up(wall: FakeClock) -> None:
    c = client(wall, by_language)
    c.get(headers=language("en"))
    c.get(headers=language("de"))
    wall.advance(90)
    en = Lookup(c.cache, "GET", URL, language("en"))
    assert isinstance(en.step(), Fetch)  # claims en's variant
    de = Lookup(c.cache, "GET", URL, language("de"))
    assert isinstance(de.step(), Fetch)  # not a Wait for en's revalidation
    again = Lookup(c.cache, "GET", URL, language("en"))
    assert isinstance(again.step(), Wait)
    en.done()
    de.done()
    again.done()


def test_a_response_that_stops_varying_replaces_every_variant(wall: FakeClock) -> None:
    c = client(wall, by_language)
    c.get(headers=language("en"))
    c.get(headers=language("de"))
    wall.advance(90)
    c.origin.handler = fixed(cache_control="max-age=60", body=b"one for all")
    c.get(headers=language("en"))
    answer = c.get(headers=language("de"))
    assert (answer.cache, answer.body) == ("hit", b"one for all")


def test_a_response_varying_on_other_fields_makes_the_old_variants_unreachable(
    wall: FakeClock,
) -> None:
    c = client(wall, by_language)
    c.get(headers=language("en"))
    c.get(headers=language("de"))
    c.origin.handler = fixed(cache_control="max-age=60", vary="Accept", body=b"by accept")
    wall.advance(90)
    c.get(headers=language("en"))
    c.origin.handler = by_language
    answer = c.get(headers=language("de"))
    assert (answer.cache, answer.body) == ("hit", b"by accept")  # no Accept: the same variant
    assert c.entry(headers=language("de")) is not None
    assert len(c.origin.requests) == 3


def test_an_unsafe_method_invalidates_every_variant(wall: FakeClock) -> None:
    c = client(wall, by_language)
    c.get(headers=language("en"))
    c.get(headers=language("de"))
    c.origin.handler = fixed(204)
    c.get(method="PUT")
    c.origin.handler = by_language
    assert c.get(headers=language("en")).cache == "miss"
    assert c.get(headers=language("de")).cache == "miss"
    # the variants stored after it were not the old ones come back
    assert c.get(headers=language("de")).cache == "hit"


def test_a_response_that_may_not_be_stored_removes_its_variant_alone(wall: FakeClock) -> None:
    c = client(wall, by_language)
    c.get(headers=language("en"))
    wall.advance(58)
    c.get(headers=language("de"))
    wall.advance(3)  # en is stale, de is not
    c.origin.handler = fixed(cache_control="no-store", vary="Accept-Language")
    c.get(headers=language("en"))
    assert c.entry(headers=language("en")) is None
    c.origin.handler = by_language
    assert c.get(headers=language("de")).cache == "hit"


def test_the_index_outlives_the_variants_it_lists(wall: FakeClock) -> None:
    """A long-lived variant stored after a short-lived one stays reachable after the first ends."""
    c = client(wall, by_language)
    c.get(headers=language("en"))  # max-age=60
    c.origin.handler = lambda headers: Resp(
        200, [("Cache-Control", "max-age=3600"), ("Vary", "Accept-Language")], b"de"
    )
    c.get(headers=language("de"))
    wall.advance(300)  # en's entry (and the index first written for it) kept 240 s at most
    assert c.cache.store.get(f"GET {URL}") is not None
    answer = c.get(headers=language("de"))
    assert (answer.cache, answer.body) == ("hit", b"de")


def test_variants_are_shared_through_a_sqlite_file(tmp_path: Path, wall: FakeClock) -> None:
    storage = f"sqlite://{tmp_path}/cache.db"
    a = client(wall, by_language, storage=storage)
    b = client(wall, by_language, storage=storage)
    a.get(headers=language("en"))
    b.get(headers=language("de"))
    assert [x.get(headers=language(v)).cache for x in (a, b) for v in ("en", "de")] == ["hit"] * 4
    assert len(a.origin.requests) + len(b.origin.requests) == 2
