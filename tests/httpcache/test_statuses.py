"""Which statuses are stored and reused (RFC 9110 section 15.1, RFC 9111 section 3)."""

from __future__ import annotations

import pytest

from smoothclient.testing import FakeClock

from .conftest import client, fixed

DATE = "Tue, 14 Nov 2023 22:13:20 GMT"  # = conftest.NOW
DAY_BEFORE = "Mon, 13 Nov 2023 22:13:20 GMT"


@pytest.mark.parametrize("status", [301, 308, 404, 410, 501])
def test_a_heuristically_cacheable_status_is_reused_on_its_last_modified(
    wall: FakeClock, status: int
) -> None:
    """Modified a day before: fresh for 10% of that (2.4 h) with no explicit freshness."""
    c = client(wall, fixed(status, b"gone", date=DATE, last_modified=DAY_BEFORE))
    c.get()
    wall.advance(600)
    again = c.get()
    assert (again.status, again.cache, again.body) == (status, "hit", b"gone")
    assert len(c.origin.requests) == 1


@pytest.mark.parametrize("status", [299, 499, 500, 502, 503, 504, 599])
def test_any_final_status_with_explicit_freshness_is_reused_while_fresh(
    wall: FakeClock, status: int
) -> None:
    c = client(wall, fixed(status, b"busy", cache_control="max-age=60"))
    assert c.get().cache == "miss"
    wall.advance(5)
    again = c.get()
    assert (again.status, again.cache, again.body) == (status, "hit", b"busy")
    wall.advance(60)
    assert c.get().cache == "miss"
    assert len(c.origin.requests) == 2


def test_an_error_without_explicit_freshness_is_not_stored(wall: FakeClock) -> None:
    c = client(wall, fixed(503, b"busy", date=DATE, last_modified=DAY_BEFORE))
    c.get()
    assert c.get().cache == "miss"
    assert c.entry() is None


def test_a_copy_that_may_stand_in_wins_over_a_fresh_error(wall: FakeClock) -> None:
    """stale-if-error: the stored success answers, and stays stored; the error is not kept."""
    c = client(wall, fixed(cache_control="max-age=10, stale-if-error=600"))
    c.get()
    wall.advance(30)
    c.origin.handler = fixed(503, b"busy", cache_control="max-age=60")
    answer = c.get()
    assert (answer.status, answer.cache, answer.body) == (200, "stale", b"v1")
    stored = c.entry()
    assert stored is not None
    assert stored.status == 200


def test_a_fresh_error_replaces_a_stale_copy_that_may_not_stand_in(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=10"))
    c.get()
    wall.advance(30)
    c.origin.handler = fixed(503, b"busy", cache_control="max-age=60")
    assert c.get().status == 503
    again = c.get()
    assert (again.status, again.cache) == (503, "hit")


def test_must_understand_with_an_unknown_status_is_never_stored(wall: FakeClock) -> None:
    c = client(wall, fixed(599, b"?", cache_control="max-age=3600, must-understand"))
    c.get()
    assert c.get().cache == "miss"
    known = client(wall, fixed(200, b"ok", cache_control="max-age=3600, must-understand, no-store"))
    known.get()
    assert known.get().cache == "hit"


def test_public_makes_an_unknown_status_heuristically_fresh(wall: FakeClock) -> None:
    c = client(wall, fixed(599, b"?", cache_control="public", date=DATE, last_modified=DAY_BEFORE))
    c.get()
    wall.advance(60)
    assert c.get().cache == "hit"
    plain = client(wall, fixed(599, b"?", date=DATE, last_modified=DAY_BEFORE))
    plain.get()
    assert plain.get().cache == "miss"
