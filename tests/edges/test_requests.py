"""The requests adapter's pure parts: origin keys and body rewinding (no server)."""

from __future__ import annotations

import io

import pytest
import requests
import requests.structures

from smoothclient.edges import requests_adapter as requests_edge
from smoothclient.edges.base import drainable
from smoothclient.edges.requests_adapter import _origin, _reply, _rewinder


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
