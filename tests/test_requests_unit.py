"""The requests adapter's pure parts: origin keys and body rewinding (no server)."""

from __future__ import annotations

import io

import pytest

from smoothclient import _requests as requests_edge
from smoothclient._requests import _origin, _rewinder


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
