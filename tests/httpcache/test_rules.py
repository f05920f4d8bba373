"""The RFC 9111 / RFC 5861 rules as pure functions: freshness, storing, using, validating."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smoothclient.httpcache import rules
from smoothclient.httpcache.rules import (
    cache_key,
    directives,
    freshness,
    http_date,
    invalidated_urls,
    request_rules,
    storable,
    usable,
    vary_names,
    vary_values,
)
from smoothclient.httpcache.validation import conditional_headers, merge_304

NOW = 1_700_000_000.0
DATE = "Tue, 14 Nov 2023 22:13:20 GMT"  # = NOW


def h(**fields: str) -> list[tuple[str, str]]:
    """Headers from keywords (``cache_control`` -> ``Cache-Control``)."""
    return [(k.replace("_", "-").title(), v) for k, v in fields.items()]


def test_the_date_used_here_is_now() -> None:
    assert http_date(DATE) == NOW


@pytest.mark.parametrize(
    ("headers", "lifetime"),
    [
        (h(cache_control="max-age=60"), 60.0),
        (h(cache_control="max-age=60, s-maxage=5"), 60.0),  # s-maxage: shared caches only
        (h(cache_control="s-maxage=5"), 0.0),
        (h(cache_control='max-age="30"'), 30.0),
        (h(cache_control="max-age=-1"), 0.0),  # invalid: stale
        (h(cache_control="max-age=abc"), 0.0),
        (h(cache_control="max-age=99999999999"), float(2**31)),
        (h(date=DATE, expires="Tue, 14 Nov 2023 22:14:20 GMT"), 60.0),
        (h(date=DATE, expires="0"), 0.0),
        (h(date=DATE, expires="Tue, 14 Nov 2023 22:12:20 GMT"), 0.0),
        (h(cache_control="max-age=10", date=DATE, expires="Tue, 14 Nov 2023 23:13:20 GMT"), 10.0),
        (h(date=DATE, last_modified="Tue, 14 Nov 2023 19:26:40 GMT"), 1000.0),  # 10% of 10000 s
        (h(date=DATE, last_modified="Wed, 15 Nov 2023 22:13:20 GMT"), 0.0),  # in the future
        (h(), 0.0),
    ],
)
def test_freshness_lifetime(headers: list[tuple[str, str]], lifetime: float) -> None:
    """max-age, then Expires - Date, then 10% of Date - Last-Modified, else 0."""
    assert freshness(headers, NOW, NOW).lifetime == lifetime


def test_the_heuristic_is_only_for_heuristically_cacheable_statuses() -> None:
    headers = h(date=DATE, last_modified="Tue, 14 Nov 2023 19:26:40 GMT")
    assert freshness(headers, NOW, NOW, status=302).lifetime == 0.0


def test_age_counts_the_age_header_the_delay_and_the_date() -> None:
    """Corrected initial age: max(apparent age, Age + response delay)."""
    found = freshness(h(age="30", date=DATE), NOW - 2, NOW)
    assert found.age(NOW) == 32.0
    early_date = freshness(h(date="Tue, 14 Nov 2023 22:12:20 GMT"), NOW, NOW)
    assert early_date.age(NOW) == 59.0  # made at least 59 s ago (Date counts whole seconds)
    assert early_date.age(NOW + 5) == 64.0


def test_no_cache_and_must_revalidate() -> None:
    assert freshness(h(cache_control="no-cache, max-age=60"), NOW, NOW).revalidate
    strict = freshness(h(cache_control="must-revalidate, max-age=60"), NOW, NOW)
    assert strict.strict
    assert not strict.revalidate
    assert freshness(h(cache_control="max-age=60"), NOW, NOW).fresh(NOW + 59)
    assert not freshness(h(cache_control="no-cache, max-age=60"), NOW, NOW).fresh(NOW)


def test_stale_allowances_are_read() -> None:
    found = freshness(
        h(cache_control="max-age=1, stale-while-revalidate=30, stale-if-error=600"), NOW, NOW
    )
    assert (found.swr, found.sie) == (30.0, 600.0)


def test_directives_keep_quoted_commas_and_the_first_of_a_repeat() -> None:
    cc = directives('private="a, b", max-age=5, MAX-AGE=9, no-cache')
    assert cc.items["private"] == '"a, b"'
    assert cc.seconds("max-age") == 5
    assert "no-cache" in cc


@given(st.text(max_size=300))
def test_directives_never_raise(value: str) -> None:
    cc = directives(value)
    assert len(cc.items) <= rules.MAX_DIRECTIVES


@pytest.mark.parametrize("age", ["abc", "-7200", "7200.0", "7200, 0", "0, 0", "7200;foo=bar", ""])
def test_an_age_that_cannot_be_read_makes_the_response_stale(age: str) -> None:
    """Never younger than it may be: "abc" or "7200, 0" ignored made an old response fresh."""
    found = freshness(h(cache_control="max-age=3600", age=age), 0.0, 0.0)
    assert found.lifetime == 0.0
    assert not found.fresh(0.0)
    assert freshness(h(cache_control="max-age=3600", age="10"), 0.0, 0.0).fresh(0.0)


@given(
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=0, max_value=10**6),
    st.floats(min_value=0, max_value=100),
    st.floats(min_value=0, max_value=10**6),
)
def test_age_only_grows_and_lifetime_is_never_negative(
    max_age: int, age: int, delay: float, later: float
) -> None:
    found = freshness(h(cache_control=f"max-age={max_age}", age=str(age)), NOW - delay, NOW)
    assert found.lifetime >= 0
    assert found.age(NOW) >= age
    assert found.age(NOW + later) >= found.age(NOW)


def stores(status: int = 200, method: str = "GET", request: str = "", **fields: str) -> bool:
    headers = h(**fields)
    lifetime = freshness(headers, NOW, NOW, status=status).lifetime
    return storable(method, status, headers, directives(request), lifetime=lifetime)


def test_what_is_stored() -> None:
    """A GET with something to gain, understood, and nobody saying no-store."""
    assert stores(cache_control="max-age=60")
    assert stores(etag='"a"')  # no freshness, but a validator to revalidate with
    assert stores(cache_control="private, max-age=5")  # a private cache may
    assert not stores()  # nothing to gain
    assert not stores(cache_control="no-store, max-age=60")
    assert not stores(request="no-store", cache_control="max-age=60")
    assert not stores(method="POST", cache_control="max-age=60")
    assert not stores(status=206, cache_control="max-age=60")
    assert not stores(status=302, etag='"a"')  # not heuristic: needs explicit freshness
    assert stores(status=302, cache_control="max-age=60")
    assert not stores(cache_control="max-age=60", vary="*")
    assert stores(status=404, cache_control="max-age=60")


@pytest.mark.parametrize("status", [299, 404, 410, 499, 500, 502, 503, 504, 599])
def test_any_final_status_with_explicit_freshness_is_stored(status: int) -> None:
    """RFC 9111 section 3: max-age, Expires, public or private let any final status be stored."""
    assert stores(status=status, cache_control="max-age=60")
    assert stores(status=status, expires="Tue, 14 Nov 2023 23:13:20 GMT")
    assert stores(status=status, cache_control="private", etag='"a"')


@pytest.mark.parametrize("status", [100, 101, 199, 206, 304, 600, 999])
def test_interim_partial_and_not_modified_answers_are_never_stored(status: int) -> None:
    assert not stores(status=status, cache_control="max-age=60")


@pytest.mark.parametrize("status", [301, 308, 404, 410, 501])
def test_heuristically_cacheable_statuses_are_fresh_from_last_modified(status: int) -> None:
    """RFC 9110 section 15.1: these need no explicit freshness; 10% of their age since modified."""
    headers = h(date=DATE, last_modified="Tue, 14 Nov 2023 12:13:20 GMT")  # 10 h before
    assert freshness(headers, NOW, NOW, status=status).lifetime == 3600.0
    assert stores(status=status, date=DATE, last_modified="Tue, 14 Nov 2023 12:13:20 GMT")


@pytest.mark.parametrize("status", [302, 403, 500, 503, 599])
def test_other_statuses_get_a_heuristic_lifetime_only_when_public(status: int) -> None:
    """RFC 9111 section 5.2.2.9: public makes a response heuristically cacheable."""
    modified = "Tue, 14 Nov 2023 12:13:20 GMT"
    assert freshness(h(date=DATE, last_modified=modified), NOW, NOW, status=status).lifetime == 0
    assert not stores(status=status, date=DATE, last_modified=modified)
    public = h(date=DATE, last_modified=modified, cache_control="public")
    assert freshness(public, NOW, NOW, status=status).lifetime == 3600.0
    assert stores(status=status, date=DATE, last_modified=modified, cache_control="public")


def test_must_understand_stores_only_a_status_this_cache_understands() -> None:
    """RFC 9111 section 5.2.2.3: and for those, it overrides no-store."""
    assert not stores(status=599, cache_control="max-age=60, must-understand")
    assert not stores(status=599, cache_control="max-age=60, must-understand, no-store")
    assert stores(status=200, cache_control="max-age=60, must-understand, no-store")
    assert stores(status=404, cache_control="max-age=60, must-understand")
    assert not stores(status=200, cache_control="max-age=60, no-store")


def test_request_directives() -> None:
    found = freshness(h(cache_control="max-age=100"), NOW, NOW)
    plain, _ = request_rules([])
    assert usable(found, plain, NOW + 99)
    assert not usable(found, plain, NOW + 100)
    max_age, _ = request_rules(h(cache_control="max-age=10"))
    assert usable(found, max_age, NOW + 10)
    assert not usable(found, max_age, NOW + 11)
    min_fresh, _ = request_rules(h(cache_control="min-fresh=30"))
    assert usable(found, min_fresh, NOW + 69)
    assert not usable(found, min_fresh, NOW + 70)
    max_stale, _ = request_rules(h(cache_control="max-stale=20"))
    assert usable(found, max_stale, NOW + 120)
    assert not usable(found, max_stale, NOW + 121)
    any_stale, _ = request_rules(h(cache_control="max-stale"))
    assert any_stale.max_stale == math.inf
    assert usable(found, any_stale, NOW + 10**6)
    no_cache, _ = request_rules(h(cache_control="no-cache"))
    assert not usable(found, no_cache, NOW)
    pragma, _ = request_rules(h(pragma="no-cache"))
    assert pragma.revalidate
    flags, _ = request_rules(h(cache_control="only-if-cached, no-store"))
    assert flags.only_if_cached
    assert flags.bypass


def test_must_revalidate_refuses_max_stale() -> None:
    found = freshness(h(cache_control="max-age=10, must-revalidate"), NOW, NOW)
    max_stale, _ = request_rules(h(cache_control="max-stale=100"))
    assert not usable(found, max_stale, NOW + 11)


def test_vary() -> None:
    names = vary_names(h(vary="Accept-Encoding, accept ,Accept"))
    assert names == ("accept", "accept-encoding")
    assert vary_values(names, h(accept="a/b", accept_encoding="gzip,  br")) == ("a/b", "gzip,br")
    assert vary_values(names, []) == (None, None)


def test_keys_drop_the_fragment_and_lowercase_scheme_and_host() -> None:
    assert cache_key("get", "HTTP://Api.Test/a?b=1#frag") == "GET http://api.test/a?b=1"
    assert cache_key("GET", "https://x.test") == "GET https://x.test/"


def test_validators_sent_on_revalidation() -> None:
    stored = h(etag='"v1"', last_modified="Tue, 14 Nov 2023 19:26:40 GMT")
    assert conditional_headers(stored) == {
        "If-None-Match": '"v1"',
        "If-Modified-Since": "Tue, 14 Nov 2023 19:26:40 GMT",
    }
    assert conditional_headers(h(last_modified="junk")) == {}


def test_a_304_updates_the_stored_headers_but_not_the_framing() -> None:
    stored = [
        ("Content-Length", "5"),
        ("ETag", '"v1"'),
        ("Cache-Control", "max-age=1"),
        ("X-A", "1"),
    ]
    fresh = [("Cache-Control", "max-age=60"), ("Content-Length", "0"), ("X-B", "2")]
    merged = dict(merge_304(stored, fresh))
    assert merged == {
        "Content-Length": "5",
        "ETag": '"v1"',
        "Cache-Control": "max-age=60",
        "X-A": "1",
        "X-B": "2",
    }


def test_a_304_never_replaces_what_describes_the_stored_body_nor_its_etag() -> None:
    """Its coding, digest, range and validator are the stored body's (as browsers keep them)."""
    stored = [
        ("Content-Encoding", "gzip"),
        ("Content-MD5", "a"),
        ("Content-Range", "bytes 0-4/5"),
        ("ETag", '"v1"'),
        ("Content-Type", "text/plain"),
    ]
    fresh = [
        ("Content-Encoding", "br"),
        ("Content-MD5", "b"),
        ("Content-Range", "bytes 0-9/10"),
        ("ETag", '"v2"'),
        ("Content-Type", "text/html"),
    ]
    merged = dict(merge_304(stored, fresh))
    assert merged == {**dict(stored), "Content-Type": "text/html"}


def test_a_304_without_a_date_drops_the_stored_date_and_age() -> None:
    stored = [("Date", DATE), ("Age", "100"), ("ETag", '"v1"')]
    assert merge_304(stored, [("Cache-Control", "max-age=5")]) == [
        ("ETag", '"v1"'),
        ("Cache-Control", "max-age=5"),
    ]


def test_unsafe_methods_invalidate_their_target_and_same_origin_locations() -> None:
    url = "https://api.test/items/1"
    response = h(location="/items/2", content_location="https://other.test/x")
    assert invalidated_urls("POST", 201, url, response) == [url, "https://api.test/items/2"]
    assert invalidated_urls("GET", 200, url, response) == []
    assert invalidated_urls("DELETE", 500, url, response) == []  # a failure changed nothing
