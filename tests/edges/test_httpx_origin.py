"""
httpx's origin read from its URL's parsed parts (edges/httpx_common.py) is the one its public
properties give, for every kind of host and port.
"""

from __future__ import annotations

import httpx
import pytest

from smoothclient.edges.httpx_common import _origin_by_parts, _public_origin
from smoothclient.edges.httpx_transport import SmoothTransport


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/x",
        "https://EXAMPLE.com:443/x?q=1",
        "https://example.com:8443/",
        "http://127.0.0.1:8080/a",
        "https://[::1]:8443/",
        "http://[2001:db8::1]/",
        "http://中国.icom.museum/",
        "http://xn--fiqs8s.icom.museum:81/",
        "https://user:secret@api.test/x",
    ],
)
def test_the_parts_give_the_public_origin(url: str) -> None:
    request = httpx.Request("GET", url)
    assert _origin_by_parts(request) == _public_origin(request)


def test_httpx_reads_the_parts() -> None:
    """The layout check passes on the httpx installed: the fast reading is the one used."""
    assert SmoothTransport.family.origin is _origin_by_parts
