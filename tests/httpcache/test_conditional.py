"""
The caller's own conditional requests (RFC 9111 section 4.3.2), in virtual time.

A request with ``If-None-Match`` or ``If-Modified-Since``: a fresh stored response its
validators select is answered with a 304 from the store; anything else goes to the origin
with the caller's validators as they are, and the origin's 304 is the caller's (freshening
the stored response when it is about that one).
"""

from __future__ import annotations

import pytest

from smoothclient.httpcache.lookup import Fetch, Lookup, Wait
from smoothclient.httpcache.validation import (
    caller_conditional,
    not_modified,
    not_modified_headers,
    validated_by_304,
)
from smoothclient.testing import FakeClock

from .conftest import URL, Resp, client, fixed

DATE = "Tue, 14 Nov 2023 22:13:20 GMT"  # = conftest.NOW
EARLIER = "Tue, 14 Nov 2023 21:13:20 GMT"  # an hour before
LATER = "Tue, 14 Nov 2023 23:13:20 GMT"  # an hour after
VALIDATORS = {"if-none-match", "if-modified-since"}

Headers = list[tuple[str, str]]


def h(**fields: str) -> Headers:
    """Headers from keywords (``if_none_match`` -> ``If-None-Match``)."""
    return [(k.replace("_", "-").title(), v) for k, v in fields.items()]


def validators(sent: Headers) -> Headers:
    """The validators among the headers a request was sent with."""
    return [(k, v) for k, v in sent if k.lower() in VALIDATORS]


def fields(response: Resp) -> dict[str, str]:
    """A response's fields by lowercased name."""
    return {k.lower(): v for k, v in response.headers}


# the rules


@pytest.mark.parametrize(
    ("request_headers", "conditional"),
    [
        (h(if_none_match='"a"'), True),
        (h(if_none_match="*"), True),
        (h(if_modified_since=DATE), True),
        (h(if_modified_since="yesterday"), False),  # not a date: ignored
        (h(if_none_match=" "), False),
        (h(if_none_match='"a"', range="bytes=0-9"), False),  # a range request: left as it was
        (h(accept="text/html"), False),
    ],
)
def test_a_request_is_conditional_with_its_own_validators(
    request_headers: Headers, conditional: bool
) -> None:
    assert caller_conditional(request_headers) is conditional


@pytest.mark.parametrize(
    ("stored", "request_headers", "selected"),
    [
        (h(etag='"a"'), h(if_none_match='"a"'), True),
        (h(etag='W/"a"'), h(if_none_match='"a"'), True),  # a weak comparison
        (h(etag='"a"'), h(if_none_match='W/"a"'), True),
        (h(etag='"a"'), h(if_none_match='"x", "a", "y"'), True),
        (h(etag='"a,b"'), h(if_none_match='"a,b"'), True),  # a comma inside the tag
        (h(etag='"a"'), h(if_none_match="*"), True),
        (h(), h(if_none_match="*"), True),
        (h(etag='"a"'), h(if_none_match='"b"'), False),
        (h(etag='"a"'), h(if_none_match='"A"'), False),  # tags are case-sensitive
        (h(), h(if_none_match='"a"'), False),
        (h(last_modified=EARLIER), h(if_modified_since=DATE), True),
        (h(last_modified=DATE), h(if_modified_since=DATE), True),
        (h(last_modified=LATER), h(if_modified_since=DATE), False),
        (h(date=EARLIER), h(if_modified_since=DATE), True),  # no Last-Modified: its Date
        (h(date=LATER), h(if_modified_since=DATE), False),
        (h(last_modified=LATER, date=EARLIER), h(if_modified_since=DATE), False),
        (h(), h(if_modified_since=DATE), False),
        # If-None-Match first: If-Modified-Since is not read when it is there
        (
            h(etag='"a"', last_modified=EARLIER),
            h(if_none_match='"b"', if_modified_since=DATE),
            False,
        ),
        (h(etag='"a"', last_modified=LATER), h(if_none_match='"a"', if_modified_since=DATE), True),
    ],
)
def test_the_callers_validators_select_a_stored_response(
    stored: Headers, request_headers: Headers, selected: bool
) -> None:
    assert not_modified(stored, request_headers) is selected


def test_a_304_from_the_store_carries_what_rfc_9110_asks_and_no_more() -> None:
    stored = h(
        etag='"a"',
        cache_control="max-age=60",
        content_location="/items.json",
        date=DATE,
        expires=LATER,
        vary="Accept",
        last_modified=EARLIER,
        age="3",
        content_type="application/json",
        content_length="120",
        set_cookie="s=1",
        x_other="1",
    )
    kept = {k.lower() for k, _ in not_modified_headers(stored)}
    assert kept == {
        "etag",
        "cache-control",
        "content-location",
        "date",
        "expires",
        "vary",
        "last-modified",
        "age",
    }


@pytest.mark.parametrize(
    ("stored", "answer", "request_headers", "about_it"),
    [
        (h(etag='"a"'), h(etag='"a"'), h(if_none_match='"x", "a"'), True),
        (h(etag='"a"'), h(etag='"x"'), h(if_none_match='"x", "a"'), False),  # the caller's
        (h(etag='W/"a"'), h(etag='W/"a"'), h(if_none_match='W/"a"'), True),
        (h(etag='W/"a"'), h(etag='"a"'), h(if_none_match='"a"'), False),  # strong: strong only
        (h(), h(etag='"a"'), h(if_none_match='"a"'), False),
        (h(last_modified=EARLIER), h(last_modified=EARLIER), h(if_modified_since=DATE), True),
        (h(last_modified=EARLIER), h(last_modified=DATE), h(if_modified_since=DATE), False),
        # a 304 with no validator: only when the request named the stored response alone
        (h(etag='"a"'), h(), h(if_none_match='"a"'), True),
        (h(etag='"a"'), h(), h(if_none_match='W/"a"'), True),
        (h(etag='"a"'), h(), h(if_none_match='"a", "x"'), False),
        (h(etag='"a"'), h(), h(if_none_match="*"), False),
        (h(), h(), h(if_none_match='"a"'), False),
        (h(last_modified=EARLIER), h(), h(if_modified_since=EARLIER), True),
        (h(last_modified=EARLIER), h(), h(if_modified_since=DATE), False),
        (h(date=EARLIER), h(), h(if_modified_since=EARLIER), False),
    ],
)
def test_a_304_to_the_callers_validators_is_about_the_stored_response_or_not(
    stored: Headers, answer: Headers, request_headers: Headers, about_it: bool
) -> None:
    assert validated_by_304(stored, answer, request_headers) is about_it


# the cache


def test_a_fresh_stored_response_the_callers_etag_selects_is_a_304_from_the_store(
    wall: FakeClock,
) -> None:
    c = client(
        wall,
        fixed(
            cache_control="max-age=600",
            etag='"v1"',
            date=DATE,
            content_type="text/plain",
            vary="Accept",
        ),
    )
    c.get(headers=[("Accept", "text/plain")])
    wall.advance(2)
    for tags in ('"v1"', 'W/"v1"', '"v0", "v1"', "*"):
        answer = c.get(headers=[("Accept", "text/plain"), ("If-None-Match", tags)])
        assert (answer.status, answer.body, answer.cache) == (304, b"", "hit")
        assert answer.record is not None
        assert (answer.record["status"], answer.record["attempts"]) == (304, 0)
        got = fields(answer)
        assert (got["etag"], got["cache-control"], got["date"], got["vary"], got["age"]) == (
            '"v1"',
            "max-age=600",
            DATE,
            "Accept",
            "2",
        )
        assert "content-type" not in got
        assert "content-length" not in got
    assert len(c.origin.requests) == 1  # the origin was asked once, for the first
    plain = c.get(headers=[("Accept", "text/plain")])
    assert (plain.status, plain.body, plain.cache) == (200, b"v1", "hit")  # the store unchanged
    assert c.cache.counts["hit"] == 5
    # where the caller's validators do not apply, the stored response answers as it is: a
    # stored 404 (the origin ignores them there), a range request, a date that is not one
    other = f"{URL}/gone"
    c.origin.handler = fixed(404, b"gone", cache_control="max-age=600", etag='"v1"')
    c.get(other)
    for asked in (
        [("If-None-Match", '"v1"')],
        [("If-None-Match", '"v1"'), ("Range", "bytes=0-1")],
        [("If-Modified-Since", "yesterday")],
    ):
        answer = c.get(other, headers=asked)
        assert (answer.status, answer.body, answer.cache) == (404, b"gone", "hit")
    assert len(c.origin.requests) == 2


def test_if_modified_since_is_a_304_from_the_store_unless_the_stored_one_is_later(
    wall: FakeClock,
) -> None:
    c = client(wall, fixed(cache_control="max-age=600", last_modified=EARLIER, date=DATE))
    c.get()
    for since in (EARLIER, DATE):
        answer = c.get(headers=[("If-Modified-Since", since)])
        assert (answer.status, answer.cache) == (304, "hit")
        assert fields(answer)["last-modified"] == EARLIER
    assert len(c.origin.requests) == 1
    older = "Tue, 14 Nov 2023 20:13:20 GMT"  # before the stored Last-Modified: changed since
    answer = c.get(headers=[("If-Modified-Since", older)])
    assert (answer.status, answer.cache) == (200, "miss")
    assert validators(c.origin.requests[-1]) == [("If-Modified-Since", older)]


def test_a_fresh_stored_response_the_callers_etag_does_not_select_goes_to_the_origin(
    wall: FakeClock,
) -> None:
    """The caller holds another copy than the store: the origin says which is current."""
    version: list[tuple[str, bytes]] = [('"v1"', b"v1")]

    def origin(headers: Headers) -> Resp:
        tag, body = version[-1]
        fields = [("Cache-Control", "max-age=600"), ("ETag", tag)]
        if ("If-None-Match", tag) in headers:
            return Resp(304, fields)
        return Resp(200, fields, body)

    c = client(wall, origin)
    c.get()
    version.append(('"v2"', b"v2"))  # the caller got v2 elsewhere: the store's v1 is older
    answer = c.get(headers=[("If-None-Match", '"v2"')])
    assert (answer.status, answer.cache) == (304, "miss")  # the origin's 304, passed on
    assert validators(c.origin.requests[-1]) == [("If-None-Match", '"v2"')]  # not replaced
    stored = c.entry()
    assert stored is not None
    assert (stored.status, stored.body) == (200, b"v1")  # a 304 about another copy: untouched
    answer = c.get(headers=[("If-None-Match", '"v0"')])  # an older copy than the origin's
    assert (answer.status, answer.body, answer.cache) == (200, b"v2", "miss")
    stored = c.entry()
    assert stored is not None
    assert stored.body == b"v2"  # the 200 stored as any
    assert len(c.origin.requests) == 3


def test_a_stale_stored_response_is_validated_with_the_callers_validators(
    wall: FakeClock,
) -> None:
    def origin(headers: Headers) -> Resp:
        fields = [("Cache-Control", "max-age=60"), ("ETag", '"v1"'), ("X-Seen", "2")]
        if ("If-None-Match", '"v1"') in headers:
            return Resp(304, fields)
        return Resp(200, [*fields[:2], ("Last-Modified", EARLIER)], b"v1")

    c = client(wall, origin)
    c.get()
    wall.advance(90)
    answer = c.get(headers=[("If-None-Match", '"v1"')])
    assert (answer.status, answer.body, answer.cache) == (304, b"", "revalidated")
    # the caller's own validators, as they are (not the store's If-Modified-Since added)
    assert validators(c.origin.requests[-1]) == [("If-None-Match", '"v1"')]
    stored = c.entry()
    assert stored is not None
    assert (stored.status, stored.body) == (200, b"v1")  # freshened, never stored as a 304
    assert ("X-Seen", "2") in stored.headers
    assert stored.born == pytest.approx(wall())
    again = c.get()
    assert (again.status, again.body, again.cache) == (200, b"v1", "hit")
    assert len(c.origin.requests) == 2


def test_a_304_about_another_copy_never_freshens_the_stored_one(wall: FakeClock) -> None:
    """A 304 with no validator, to a tag the store does not hold: the stored one stays stale."""
    c = client(wall, fixed(cache_control="max-age=60", etag='"v1"'))
    c.get()
    wall.advance(90)
    c.origin.handler = fixed(304, b"", cache_control="max-age=60")
    answer = c.get(headers=[("If-None-Match", '"v2"')])
    assert (answer.status, answer.cache) == (304, "miss")
    assert validators(c.origin.requests[-1]) == [("If-None-Match", '"v2"')]
    stored = c.entry()
    assert stored is not None
    assert stored.body == b"v1"
    assert stored.born < wall() - 80  # as it was: stale
    c.origin.handler = fixed(200, b"v2", cache_control="max-age=60", etag='"v2"')
    assert c.get().body == b"v2"  # the next plain call revalidates it, as any stale one


def test_a_304_to_a_conditional_miss_is_passed_on_and_nothing_is_held_up(
    wall: FakeClock,
) -> None:
    c = client(wall, fixed(304, b"", etag='"v1"', cache_control="max-age=60"))
    answer = c.get(headers=[("If-None-Match", '"v1"')])
    assert (answer.status, answer.cache) == (304, "miss")
    assert c.entry() is None  # a 304 is never stored as a response
    key = f"GET {URL}"
    assert c.cache.coalesces(key)  # nor does it mark the URL uncacheable
    conditional = Lookup(c.cache, "GET", URL, [("If-None-Match", '"v1"')])
    assert isinstance(conditional.step(), Fetch)
    plain = Lookup(c.cache, "GET", URL, [])
    assert isinstance(plain.step(), Fetch)  # the conditional miss held no claim
    assert isinstance(Lookup(c.cache, "GET", URL, []).step(), Wait)
    plain.done()


def test_a_stored_response_that_stands_in_for_an_error_is_a_304_when_selected(
    wall: FakeClock,
) -> None:
    c = client(wall, fixed(cache_control="max-age=60, stale-if-error=600", etag='"v1"'))
    c.get()
    wall.advance(90)
    c.origin.handler = fixed(503, b"down")
    answer = c.get(headers=[("If-None-Match", '"v1"')])
    assert (answer.status, answer.body, answer.cache) == (304, b"", "stale")
    other = c.get(headers=[("If-None-Match", '"v0"')])  # another copy: the stored one, whole
    assert (other.status, other.body, other.cache) == (200, b"v1", "stale")


def test_a_stale_response_is_not_served_behind_a_conditional_request(wall: FakeClock) -> None:
    """stale-while-revalidate: the caller's validators go to the origin, in the foreground."""
    c = client(wall, fixed(cache_control="max-age=60, stale-while-revalidate=600", etag='"v1"'))
    c.get()
    wall.advance(90)
    c.origin.handler = fixed(304, b"", cache_control="max-age=60", etag='"v1"')
    answer = c.get(headers=[("If-None-Match", '"v1"')])
    assert (answer.status, answer.cache) == (304, "revalidated")
    assert c.spawned == []
    assert len(c.origin.requests) == 2
