"""
The cache layer wired into an httpx transport in a few lines, as an edge would wire it.

A transport of this test's own wraps an inner one: the recipe of ``smoothclient.edges.cached``
for httpx, where a transport sees the body as sent (``recorder.as_sent()``).
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Iterator

import httpx
import pytest

from smoothclient.edges.cached import EdgeIO, Record, cached_send
from smoothclient.httpcache import Entry, HttpCache
from smoothclient.httpcache.lookup import Recorder

URL = "https://api.test/items"


class _Tee(httpx.SyncByteStream):
    """The body as sent, also fed to the recorder; stored once read to its end."""

    def __init__(self, inner: httpx.SyncByteStream, recorder: Recorder) -> None:
        self.inner, self.recorder = inner, recorder.as_sent()

    def __iter__(self) -> Iterator[bytes]:
        yield from self.recorder.tee(self.inner)

    def close(self) -> None:
        self.recorder.abandon()
        self.inner.close()


def _read_and_close(response: httpx.Response) -> None:
    try:
        response.read()
    finally:
        response.close()


class CachedTransport(httpx.BaseTransport):
    """An inner transport behind an HttpCache."""

    def __init__(self, inner: httpx.BaseTransport, cache: HttpCache) -> None:
        self.inner, self.cache = inner, cache

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        def build(entry: Entry, record: Record) -> httpx.Response:
            return httpx.Response(
                entry.status,
                headers=list(entry.headers),
                content=entry.body,
                request=request,
                extensions={"smoothclient": record},
            )

        def tee(response: httpx.Response, recorder: Recorder) -> httpx.Response:
            if hasattr(response, "_content"):  # read (and decoded) already: stored at once
                recorder.feed(response.content)
                recorder.finish()
                return response
            stream = response.stream
            assert isinstance(stream, httpx.SyncByteStream)
            response.stream = _Tee(stream, recorder)
            return response

        def send(extra: dict[str, str]) -> httpx.Response:
            request.headers.update(extra)
            response = self.inner.handle_request(request)
            response.extensions = {**response.extensions, "smoothclient": {"attempts": 1}}
            return response

        io: EdgeIO[httpx.Response] = EdgeIO(
            status=lambda r: r.status_code,
            headers=lambda r: r.headers.multi_items(),
            build=build,
            tee=tee,
            consume=_read_and_close,
            close=lambda r: r.close(),
            record=lambda r: r.extensions.get("smoothclient"),
            failures=(httpx.TransportError,),
        )
        headers = request.headers.multi_items()
        return cached_send(
            self.cache, io, request.method, str(request.url), headers, send, time.sleep
        )


@pytest.mark.parametrize("streamed", [True, False])
def test_an_httpx_transport_wired_in_a_few_lines_stores_the_body_as_sent(streamed: bool) -> None:
    """A gzipped body is stored gzipped, and a hit decodes it as the first answer did."""
    body = gzip.compress(b"plain text" * 5)
    sent: list[httpx.Request] = []

    def origin(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        headers = {"Cache-Control": "max-age=60", "Content-Encoding": "gzip"}
        if streamed:  # as a network transport answers: the body not read yet
            return httpx.Response(200, headers=headers, stream=httpx.ByteStream(body))
        return httpx.Response(200, headers=headers, content=body)

    cache = HttpCache()
    with httpx.Client(transport=CachedTransport(httpx.MockTransport(origin), cache)) as client:
        first = client.get(URL)
        hit = client.get(URL)
    assert first.text == hit.text == "plain text" * 5
    assert len(sent) == 1
    assert hit.extensions["smoothclient"]["cache"] == "hit"
    assert first.extensions["smoothclient"]["cache"] == "miss"
    entry = cache.get("GET " + URL)
    assert entry is not None
    encoding = [v for k, v in entry.headers if k.lower() == "content-encoding"]
    if streamed:  # stored as sent, its encoding kept
        assert (entry.body, encoding) == (body, ["gzip"])
    else:  # stored decoded, its encoding dropped
        assert (entry.body, encoding) == (b"plain text" * 5, [])
