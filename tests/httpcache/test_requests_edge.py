"""SmoothAdapter(cache=...): hits never reach the network or the pacer; bodies stored as read."""

from __future__ import annotations

import gzip
import io
from typing import Any

import pytest
import requests
import urllib3
from requests.adapters import HTTPAdapter

from smoothclient import CallEnded, HttpCache, Pacer, RetryPolicy, SmoothAdapter, record_of
from smoothclient.httpcache.lookup import Lookup
from smoothclient.testing import FakeClock

URL = "https://api.test/items"


class Memory(HTTPAdapter):
    """Answers from a script of (status, headers, body), the last repeated; counts sends."""

    script: list[tuple[int, dict[str, str], bytes] | Exception]
    sent: list[requests.PreparedRequest]

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.sent.append(request)
        step = self.script[min(len(self.sent), len(self.script)) - 1]
        if isinstance(step, Exception):
            raise step
        status, headers, body = step
        raw = urllib3.HTTPResponse(
            body=io.BytesIO(body), headers=headers, status=status, preload_content=False
        )
        return self.build_response(request, raw)


class Adapter(SmoothAdapter, Memory):
    """The smooth adapter over the scripted one."""


def session(
    script: list[tuple[int, dict[str, str], bytes] | Exception], **kw: Any
) -> tuple[requests.Session, Adapter, list[CallEnded]]:
    clock = FakeClock(0)
    ended: list[CallEnded] = []
    policy = RetryPolicy(attempts=2, wait_initial=0.01, on_success=ended.append)
    adapter = Adapter(
        policy=policy,
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
        cache=HttpCache(**kw),
    )
    adapter.script, adapter.sent = script, []
    s = requests.Session()
    s.mount("https://", adapter)
    return s, adapter, ended


def test_a_hit_sends_nothing_and_its_record_and_hooks_say_hit() -> None:
    s, adapter, ended = session([(200, {"Cache-Control": "max-age=60"}, b"hello")])
    first = s.get(URL)
    second = s.get(URL)
    assert (first.text, second.text) == ("hello", "hello")
    assert len(adapter.sent) == 1
    assert [record_of(r).cache for r in (first, second)] == ["miss", "hit"]  # type: ignore[union-attr]
    assert record_of(second).attempts == 0  # type: ignore[union-attr]
    assert [e.record.cache for e in ended] == [None, "hit"]  # the flow's hook fires first
    assert second.request is not None
    assert second.url == URL
    view = adapter._core.pacer.view("https://api.test:443")  # type: ignore[attr-defined]
    assert view.in_flight == 0


def test_a_gzipped_body_is_stored_decoded() -> None:
    body = gzip.compress(b"squeezed" * 10)
    s, _adapter, _ = session(
        [(200, {"Cache-Control": "max-age=60", "Content-Encoding": "gzip"}, body)]
    )
    assert s.get(URL).text == "squeezed" * 10
    hit = s.get(URL)
    assert hit.text == "squeezed" * 10
    assert "Content-Encoding" not in hit.headers
    assert hit.headers["Content-Length"] == "80"


def test_a_streamed_body_is_stored_only_once_read_to_its_end() -> None:
    s, _adapter, _ = session([(200, {"Cache-Control": "max-age=60"}, b"a" * 100_000)])
    with s.get(URL, stream=True) as partial:
        next(partial.iter_content(1000))
    assert record_of(s.get(URL, stream=True)).cache == "miss"  # type: ignore[union-attr]
    with s.get(URL, stream=True) as whole:
        assert len(b"".join(whole.iter_content(1000))) == 100_000
    assert record_of(s.get(URL)).cache == "hit"  # type: ignore[union-attr]


def test_a_revalidation_goes_through_the_flow_with_validators() -> None:
    s, adapter, _ = session(
        [
            (200, {"Cache-Control": "max-age=0", "ETag": '"v1"'}, b"body"),
            (503, {}, b""),
            (304, {"Cache-Control": "max-age=0", "ETag": '"v1"'}, b""),
        ]
    )
    s.get(URL)
    again = s.get(URL)
    assert (again.status_code, again.text) == (200, "body")
    record = record_of(again)
    assert record is not None
    assert (record.cache, record.attempts) == ("revalidated", 2)
    assert adapter.sent[-1].headers["If-None-Match"] == '"v1"'


def test_the_callers_own_validators_get_a_304_from_the_store_or_from_the_origin() -> None:
    """A fresh stored response they select: a 304 hit; stale: theirs sent as they are."""
    now = [1000.0]
    fields = {
        "Cache-Control": "max-age=60",
        "ETag": '"v1"',
        "Last-Modified": "Tue, 14 Nov 2023 21:13:20 GMT",
    }
    s, adapter, ended = session([(200, fields, b"body"), (304, fields, b"")], clock=lambda: now[0])
    s.get(URL)
    mine = {"If-None-Match": '"v1"'}
    hit = s.get(URL, headers=mine)
    assert (hit.status_code, hit.content) == (304, b"")
    assert hit.headers["ETag"] == '"v1"'
    assert "Content-Length" not in hit.headers
    assert (record_of(hit).cache, record_of(hit).attempts) == ("hit", 0)  # type: ignore[union-attr]
    assert ended[-1].record.cache == "hit"
    assert len(adapter.sent) == 1
    now[0] += 90  # stale
    validated = s.get(URL, headers=mine)
    assert (validated.status_code, validated.content) == (304, b"")
    assert record_of(validated).cache == "revalidated"  # type: ignore[union-attr]
    assert adapter.sent[-1].headers["If-None-Match"] == '"v1"'
    assert "If-Modified-Since" not in adapter.sent[-1].headers  # the caller's, as they are
    again = s.get(URL)
    assert (again.status_code, again.text) == (200, "body")  # freshened by the 304
    assert record_of(again).cache == "hit"  # type: ignore[union-attr]
    assert len(adapter.sent) == 2


def test_a_variant_answers_values_that_differ_only_in_form() -> None:
    """Vary: Accept-Language; the same languages, spaced and cased otherwise, are a hit."""
    fields = {"Cache-Control": "max-age=60", "Vary": "Accept-Language"}
    s, adapter, _ = session([(200, fields, b"en")])
    first = s.get(URL, headers={"Accept-Language": "en-US, de;q=0.5"})
    assert record_of(first).cache == "miss"  # type: ignore[union-attr]
    hit = s.get(URL, headers={"Accept-Language": "EN-us ,de ;Q=0.5"})
    assert (hit.text, record_of(hit).cache) == ("en", "hit")  # type: ignore[union-attr]
    other = s.get(URL, headers={"Accept-Language": "de;q=0.5, en-US"})  # another order
    assert record_of(other).cache == "miss"  # type: ignore[union-attr]
    assert len(adapter.sent) == 2


def test_two_variants_and_a_range_of_one_through_the_adapter() -> None:
    """Each language stored beside the other; a range of one answered by a 206 from it."""
    fields = {"Cache-Control": "max-age=60", "Vary": "Accept-Language"}
    s, adapter, _ = session([(200, fields, b"english"), (200, fields, b"deutsch")])
    for language in ("en", "de", "en", "de"):
        s.get(URL, headers={"Accept-Language": language})
    part = s.get(URL, headers={"Accept-Language": "de", "Range": "bytes=-4"})
    assert (part.status_code, part.text) == (206, "tsch")
    assert part.headers["Content-Range"] == "bytes 3-6/7"
    assert record_of(part).cache == "hit"  # type: ignore[union-attr]
    assert len(adapter.sent) == 2


def test_stale_if_error_answers_for_a_connection_error() -> None:
    s, _adapter, _ = session(
        [
            (200, {"Cache-Control": "max-age=0, stale-if-error=600"}, b"old"),
            requests.ConnectionError("refused"),
        ]
    )
    s.get(URL)
    answer = s.get(URL)
    assert (answer.text, record_of(answer).cache) == ("old", "stale")  # type: ignore[union-attr]


def test_without_a_cache_nothing_changes_and_a_bad_cache_is_refused() -> None:
    s = requests.Session()
    adapter = Adapter(sleep=lambda _: None)
    adapter.script, adapter.sent = [(200, {"Cache-Control": "max-age=60"}, b"x")], []
    s.mount("https://", adapter)
    s.get(URL)
    response = s.get(URL)
    assert len(adapter.sent) == 2
    assert record_of(response).cache is None  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="HttpCache"):
        SmoothAdapter(cache="memory://")  # type: ignore[arg-type]


def test_prometheus_counts_the_calls_the_cache_answered() -> None:
    from prometheus_client import CollectorRegistry

    from smoothclient.telemetry import PrometheusHooks

    registry = CollectorRegistry()
    hooks = PrometheusHooks(registry=registry, origin_label=False)
    clock = FakeClock(0)
    adapter = Adapter(
        policy=hooks.apply(RetryPolicy()),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
        cache=HttpCache(),
    )
    adapter.script, adapter.sent = [(200, {"Cache-Control": "max-age=60"}, b"x")], []
    s = requests.Session()
    s.mount("https://", adapter)
    for _ in range(3):
        s.get(URL)
    cached = registry.get_sample_value("smoothclient_calls_total", {"outcome": "cached"})
    success = registry.get_sample_value("smoothclient_calls_total", {"outcome": "success"})
    assert (cached, success) == (2.0, 1.0)


def test_a_body_stored_as_sent_by_another_edge_is_decoded_on_a_hit() -> None:
    """An entry whose body is still gzipped (an httpx edge stores bodies as sent) reads plain."""
    from smoothclient.edges.requests_cached import built
    from smoothclient.httpcache import Entry

    body = gzip.compress(b"plain text")
    entry = Entry("GET " + URL, 200, (("Content-Encoding", "gzip"),), body, (), (), 0, 60, 60)
    request = requests.Request("GET", URL).prepare()
    assert built(entry, {"attempts": 0}, request).text == "plain text"


def test_a_body_read_from_raw_is_stored_only_decoded_and_whole() -> None:
    """raw.read() to the end stores it; raw bytes asked undecoded are never stored."""
    s, _adapter, _ = session([(200, {"Cache-Control": "max-age=60"}, b"abc")])
    undecoded = s.get(URL, stream=True)
    assert undecoded.raw.read(decode_content=False) == b"abc"
    undecoded.close()
    assert record_of(s.get(URL, stream=True)).cache == "miss"  # type: ignore[union-attr]
    in_parts = s.get(URL, stream=True)
    assert in_parts.raw.read(2) + in_parts.raw.read(2) + in_parts.raw.read(2) == b"abc"
    assert record_of(s.get(URL)).cache == "hit"  # type: ignore[union-attr]


def test_a_streamed_response_left_unread_holds_nobody_up() -> None:
    """stream=True, never read: the next call goes to the origin at once (no 10 s wait)."""
    s, adapter, _ = session([(200, {"Cache-Control": "max-age=60"}, b"abc")])
    cache = adapter._cache
    assert cache is not None
    left = s.get(URL, stream=True)
    lookup = Lookup(cache, "GET", URL, [])
    assert type(lookup.step()).__name__ == "Fetch"  # the key is free: no Wait
    lookup.done()
    left.close()
