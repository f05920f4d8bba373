"""The requests adapter's pure parts: origin keys and body rewinding (no server)."""

from __future__ import annotations

import io
from typing import Any

import pytest
import requests
import requests.structures

from smoothclient import Pacer, RetryPolicy, SmoothAdapter
from smoothclient.edges import requests_adapter as requests_edge
from smoothclient.edges.base import drainable
from smoothclient.edges.requests_adapter import _origin, _reply, _rewinder
from smoothclient.testing import FakeClock


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://api.test/x?q=1", "http://api.test:80"),
        ("https://API.Test/x", "https://api.test:443"),
        ("https://api.test:8443", "https://api.test:8443"),
        ("http://user:secret@api.test:81/x", "http://api.test:81"),
        ("http://[::1]:8080/x#frag", "http://[::1]:8080"),
        ("HTTP://api.test", "http://api.test:80"),
        ("api.test/x", "http://api.test:80"),  # not absolute: what urllib3 makes of it
    ],
)
def test_origin_keys(url: str, origin: str) -> None:
    assert _origin(url) == origin


def test_origin_cache_never_holds_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    keys: list[tuple[str, str]] = []

    def origin_of(scheme: str, hostport: str) -> str:
        keys.append((scheme, hostport))
        return "k"

    monkeypatch.setattr(requests_edge, "_origin_of", origin_of)
    assert _origin("http://user:hunter2@cached.test:81/x") == "k"
    assert keys == [("http", "cached.test:81")]


def test_rewinder() -> None:
    assert _rewinder(None) == (True, None)
    assert _rewinder(b"x") == (True, None)
    body = io.BytesIO(b"abc")
    body.read(1)
    replayable, rewind = _rewinder(body)
    assert replayable
    assert rewind is not None
    body.read()
    rewind()
    assert body.read() == b"bc"  # back to where it stood when the request was prepared
    assert _rewinder(iter([b"a"])) == (False, None)


def response(status: int, body: bytes, **headers: str) -> requests.Response:
    r = requests.Response()
    r.status_code = status
    r.headers = requests.structures.CaseInsensitiveDict(
        {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers}
    )
    r.raw = io.BytesIO(body)
    return r


def test_reply_carries_a_json_error_body() -> None:
    r = response(429, b'{"retry_after": 1.5}')
    reply = _reply(r)
    assert reply.body == b'{"retry_after": 1.5}'
    assert r.json()["retry_after"] == 1.5  # still there for the caller


def test_reply_leaves_other_bodies_unread() -> None:
    r = response(200, b'{"retry_after": 1.5}')
    assert _reply(r).body is None
    assert r.raw.tell() == 0
    assert _reply(response(429, b"<html>", **{"Content-Type": "text/html"})).body is None


def test_reply_survives_a_broken_body() -> None:
    class Broken(io.RawIOBase):
        def read(self, size: int = -1) -> bytes:
            raise requests.exceptions.ChunkedEncodingError("cut off")

    r = response(429, b"{}")
    r.raw = Broken()
    assert _reply(r).body is None


@pytest.mark.parametrize(
    ("length", "drained"),
    [
        ("0", True),
        ("65536", True),
        ("65537", False),
        ("", False),
        ("12a", False),
        (" 5", False),
        ("١٢", False),
        ("9" * 5000, False),  # int() of it is refused past 4,300 digits: never a crash
    ],
)
def test_only_small_stated_bodies_are_drained(length: str, drained: bool) -> None:
    """Both edges read a failed response's body before closing only if it says it is small."""
    headers = requests.structures.CaseInsensitiveDict({"Content-Length": length})
    assert drainable(headers) is drained


def test_a_redirect_chain_is_one_call_with_one_deadline(clock: FakeClock) -> None:
    """Ten hops, each a 503 first: the policy's timeout bounds the chain, not each hop."""
    from requests.adapters import HTTPAdapter
    from requests.structures import CaseInsensitiveDict

    seen: dict[str, int] = {}

    class Hops(HTTPAdapter):  # answers from memory: hop n 503s once, then redirects to n+1
        def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
            url = request.url or ""
            n = int(url.rsplit("/", 1)[1])
            seen[url] = seen.get(url, 0) + 1
            response = requests.Response()
            response.status_code = 503 if seen[url] == 1 else 302
            response.headers = CaseInsensitiveDict(
                {"Content-Length": "0", "Location": f"/hop/{n + 1}"}
                if response.status_code == 302
                else {"Content-Length": "0"}
            )
            response.raw = io.BytesIO(b"")
            response.url = url
            response.request = request
            clock.sleep(0.1)  # each answer takes 0.1 s
            return response

    class Adapter(SmoothAdapter, Hops):
        pass

    policy = RetryPolicy(timeout=3, wait_initial=0.2, wait_max=0.2, jitter="none")
    with requests.Session() as session:
        session.max_redirects = 10
        session.mount(
            "https://",
            Adapter(policy=policy, pacer=Pacer(clock=clock, probe=0), sleep=clock.sleep),
        )
        started = clock()
        response = session.get("https://chain.test/hop/0")
        chained = clock() - started
    # each hop alone fits its own 3 s (0.4 s a hop), the chain does not: it ends at its
    # deadline with the hop that could not be retried in time (before: 4.4 s, 10 redirects)
    assert response.status_code == 503
    assert chained <= 3 + 0.4  # (this fake answers in 0.1 s whatever the timeout: two hops)
    assert len(response.history) < 10
