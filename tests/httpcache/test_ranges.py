"""Range requests: answered from a stored 200, and a 206 never stored nor served whole."""

from __future__ import annotations

import pytest

from smoothclient.httpcache.lookup import Fetch, Lookup
from smoothclient.httpcache.ranges import byte_range, if_range_holds, same_representation
from smoothclient.testing import FakeClock

from .conftest import URL, Handler, Resp, client, fixed

BODY = b"0123456789A"
DATE = "Tue, 14 Nov 2023 22:13:20 GMT"  # = conftest.NOW
EARLIER = "Mon, 13 Nov 2023 22:13:20 GMT"


@pytest.mark.parametrize(
    ("value", "span"),
    [
        ("bytes=0-1", (0, 1)),
        ("bytes=1-", (1, 10)),
        ("bytes=-1", (10, 10)),
        ("bytes=-100", (0, 10)),  # a suffix longer than the whole: the whole
        ("bytes=5-100", (5, 10)),  # past the end: clipped
        (" Bytes = 2 - 3 ", (2, 3)),
        ("bytes=0-1,3-4", None),  # several ranges: the whole
        ("items=0-1", None),
        ("bytes=11-", None),  # starts past the end
        ("bytes=3-2", None),
        ("bytes=-0", None),
        ("bytes=-", None),
        ("bytes=a-b", None),
        ("bytes=1", None),
        ("bytes=١-٢", None),  # (digits of another script)
        ("junk", None),
    ],
)
def test_one_byte_range_is_read_and_anything_else_is_none(
    value: str, span: tuple[int, int] | None
) -> None:
    assert byte_range(value, 11) == span


def test_nothing_is_a_range_of_an_empty_body() -> None:
    assert byte_range("bytes=0-", 0) is None


@pytest.mark.parametrize(
    ("if_range", "holds"),
    [
        ('"a"', True),
        ('"b"', False),
        ('W/"a"', False),  # a weak tag never holds
        (EARLIER, True),  # the Last-Modified, a day before the Date: strong
        (DATE, False),
        ("junk", False),
    ],
)
def test_if_range_holds_on_a_strong_match_only(if_range: str, holds: bool) -> None:
    stored = [("ETag", '"a"'), ("Last-Modified", EARLIER), ("Date", DATE)]
    assert if_range_holds(stored, [("If-Range", if_range)]) is holds
    assert if_range_holds(stored, [])


def test_a_last_modified_of_the_same_second_as_the_date_is_weak() -> None:
    stored = [("Last-Modified", DATE), ("Date", DATE)]
    assert not if_range_holds(stored, [("If-Range", DATE)])


def test_same_representation() -> None:
    assert same_representation([("ETag", '"a"')], [("ETag", '"a"')]) is True
    assert same_representation([("ETag", '"a"')], [("ETag", '"b"')]) is False
    assert same_representation([("ETag", 'W/"a"')], [("ETag", 'W/"a"')]) is None
    assert same_representation([("ETag", '"a"')], []) is None
    assert same_representation([("Last-Modified", DATE)], [("Last-Modified", DATE)]) is True
    assert same_representation([("Last-Modified", DATE)], [("Last-Modified", EARLIER)]) is False
    assert same_representation([], []) is None


@pytest.mark.parametrize(
    ("asked", "body", "content_range"),
    [
        ("bytes=0-1", b"01", "bytes 0-1/11"),
        ("bytes=1-", b"123456789A", "bytes 1-10/11"),
        ("bytes=-1", b"A", "bytes 10-10/11"),
    ],
)
def test_a_stored_200_answers_a_range_with_a_206_of_its_bytes(
    wall: FakeClock, asked: str, body: bytes, content_range: str
) -> None:
    c = client(wall, fixed(body=BODY, cache_control="max-age=3600", etag='"a"'))
    c.get()
    answer = c.get(headers=[("Range", asked)])
    got = {k.lower(): v for k, v in answer.headers}
    assert (answer.status, answer.cache, answer.body) == (206, "hit", body)
    assert (got["content-range"], got["content-length"]) == (content_range, str(len(body)))
    assert got["etag"] == '"a"'
    assert len(c.origin.requests) == 1
    whole = c.get()
    assert (whole.status, whole.body) == (200, BODY)


@pytest.mark.parametrize(
    "headers",
    [
        [("Range", "bytes=0-1,3-4")],
        [("Range", "bytes=20-")],
        [("Range", "bytes=0-1"), ("If-Range", '"other"')],
    ],
)
def test_a_range_it_does_not_serve_is_answered_whole(
    wall: FakeClock, headers: list[tuple[str, str]]
) -> None:
    c = client(wall, fixed(body=BODY, cache_control="max-age=3600", etag='"a"'))
    c.get()
    answer = c.get(headers=headers)
    assert (answer.status, answer.cache, answer.body) == (200, "hit", BODY)


def test_a_response_that_takes_no_ranges_is_answered_whole(wall: FakeClock) -> None:
    c = client(wall, fixed(body=BODY, cache_control="max-age=3600", accept_ranges="none"))
    c.get()
    assert c.get(headers=[("Range", "bytes=0-1")]).status == 200


def partial_origin(etag: str = '"a"') -> Handler:
    """An origin that answers every request with bytes 0-1 of BODY."""
    fields = [("Cache-Control", "max-age=3600"), ("Content-Range", "bytes 0-1/11")]
    if etag:
        fields.append(("ETag", etag))
    return lambda headers: Resp(206, list(fields), b"01")


def test_a_206_is_passed_on_and_never_stored_nor_served_whole(wall: FakeClock) -> None:
    c = client(wall, partial_origin())
    first = c.get(headers=[("Range", "bytes=0-1")])
    assert (first.status, first.cache, first.body) == (206, "miss", b"01")
    assert c.entry() is None
    c.origin.handler = fixed(body=BODY, cache_control="max-age=3600")
    whole = c.get()
    assert (whole.status, whole.cache, whole.body) == (200, "miss", BODY)


def test_a_range_miss_claims_nothing_and_waits_for_nothing(wall: FakeClock) -> None:
    c = client(wall, fixed(body=BODY, cache_control="max-age=3600"))
    ranged = Lookup(c.cache, "GET", URL, [("Range", "bytes=0-1")])
    assert isinstance(ranged.step(), Fetch)
    plain = Lookup(c.cache, "GET", URL, [])
    assert isinstance(plain.step(), Fetch)  # it claims the key: the range did not
    assert not ranged.claimed
    assert plain.claimed
    plain.done()


def test_a_206_of_the_stored_response_freshens_it_and_leaves_its_body(wall: FakeClock) -> None:
    c = client(wall, fixed(body=BODY, cache_control="max-age=60", etag='"a"', x_version="1"))
    c.get()
    wall.advance(90)
    c.origin.handler = lambda headers: Resp(
        206,
        [
            ("Cache-Control", "max-age=60"),
            ("ETag", '"a"'),
            ("Content-Range", "bytes 0-1/11"),
            ("X-Version", "2"),
        ],
        b"01",
    )
    answer = c.get(headers=[("Range", "bytes=0-1")])
    assert (answer.status, answer.body) == (206, b"01")
    assert ("If-None-Match", '"a"') in c.origin.requests[-1]
    whole = c.get()
    got = {k.lower(): v for k, v in whole.headers}
    assert (whole.status, whole.cache, whole.body) == (200, "hit", BODY)
    assert (got["x-version"], got["content-length"]) == ("2", "11")
    assert "content-range" not in got


def test_a_206_of_another_representation_deletes_the_stale_copy(wall: FakeClock) -> None:
    c = client(wall, fixed(body=BODY, cache_control="max-age=60", etag='"a"'))
    c.get()
    wall.advance(90)
    c.origin.handler = partial_origin('"b"')
    assert c.get(headers=[("Range", "bytes=0-1")]).status == 206
    assert c.entry() is None


def test_a_206_that_cannot_tell_leaves_the_stored_copy_as_it_was(wall: FakeClock) -> None:
    c = client(wall, fixed(body=BODY, cache_control="max-age=60", etag='"a"'))
    c.get()
    before = c.entry()
    wall.advance(90)
    c.origin.handler = partial_origin("")
    assert c.get(headers=[("Range", "bytes=0-1")]).status == 206
    assert c.entry() == before


def test_a_304_to_a_ranged_revalidation_is_answered_with_the_range(wall: FakeClock) -> None:
    c = client(wall, fixed(body=BODY, cache_control="max-age=60", etag='"a"'))
    c.get()
    wall.advance(90)
    c.origin.handler = fixed(304, b"", etag='"a"', cache_control="max-age=60")
    answer = c.get(headers=[("Range", "bytes=-2")])
    assert (answer.status, answer.cache, answer.body) == (206, "revalidated", b"9A")
    assert c.get().cache == "hit"
