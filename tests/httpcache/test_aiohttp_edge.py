"""
SmoothMiddleware(cache=...): what is particular to aiohttp's responses, against a local server.

The shared behaviour (hits, revalidation, stale-if-error, stale-while-revalidate) is tested
with the other edges in ``test_httpx_edges.py``; here: a stored response is a whole
``ClientResponse`` (every way of reading it works), a body is stored only once read to its
end, however it is read, and a response released early stores nothing.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from smoothclient import CallEnded, HttpCache, Pacer, RetryPolicy, record_of
from smoothclient.aiohttp import SmoothMiddleware
from smoothclient.edges import aiohttp_cached
from smoothclient.testing import FakeClock

#: (status, headers, body) per request; the last one repeats.
Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Origin:
    """What the local server answers, and the headers of each request it got."""

    answers: list[Answer]
    seen: list[dict[str, str]] = field(default_factory=list)
    chunked: bool = False  # send the body in parts, without a Content-Length

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(dict(request.headers))
        status, headers, body = self.answers[min(len(self.seen), len(self.answers)) - 1]
        if not self.chunked:
            return web.Response(status=status, headers=headers, body=body)
        response = web.StreamResponse(status=status, headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(0, len(body), 100):
            await response.write(body[i : i + 100])
        await response.write_eof()
        return response


@asynccontextmanager
async def session_on(
    origin: Origin, cache: HttpCache, **kwargs: Any
) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """A session with the middleware and ``cache``, and the local server's URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", origin.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/items"
    clock = FakeClock()
    edge = SmoothMiddleware(
        policy=kwargs.pop("policy", RetryPolicy(attempts=2, wait_initial=0.0)),
        pacer=Pacer(clock=clock),
        sleep=clock.async_sleep,
        cache=cache,
    )
    try:
        async with aiohttp.ClientSession(middlewares=(edge,), **kwargs) as session:
            yield session, url
    finally:
        await runner.cleanup()


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


FRESH = {"Cache-Control": "max-age=60", "Content-Type": "application/json"}


def test_a_hit_reads_every_way_a_response_reads() -> None:
    origin = Origin([(200, FRESH, b'{"items": [1, 2, 3]}')])

    async def main() -> None:
        async with session_on(origin, HttpCache()) as (session, url):
            async with session.get(url) as first:
                assert await first.json() == {"items": [1, 2, 3]}
            async with session.get(url) as hit:
                assert record_of(hit) is not None
                assert record_of(hit).cache == "hit"  # type: ignore[union-attr]
                assert (hit.status, hit.reason, hit.ok) == (200, "OK", True)
                assert hit.headers["Content-Type"] == "application/json"
                assert await hit.json() == {"items": [1, 2, 3]}
                assert await hit.text() == '{"items": [1, 2, 3]}'
                assert await hit.read() == b'{"items": [1, 2, 3]}'
                hit.raise_for_status()
            async with session.get(url) as streamed:
                parts = [chunk async for chunk in streamed.content.iter_chunked(4)]
                assert b"".join(parts) == b'{"items": [1, 2, 3]}'
                assert streamed.url == first.url
        assert len(origin.seen) == 1

    run(main)


def test_a_gzip_body_is_stored_decoded_and_a_hit_needs_no_decoding() -> None:
    body = b"items " * 100
    origin = Origin([(200, {**FRESH, "Content-Encoding": "gzip"}, gzip.compress(body))])

    async def main() -> None:
        async with session_on(origin, HttpCache()) as (session, url):
            async with session.get(url) as first:
                assert await first.read() == body
            async with session.get(url) as hit:
                assert await hit.read() == body
                assert "Content-Encoding" not in hit.headers
                assert hit.headers["Content-Length"] == str(len(body))
        assert len(origin.seen) == 1

    run(main)


def test_a_chunked_body_is_stored_once_read_in_parts_to_its_end() -> None:
    body = bytes(range(256)) * 8
    origin = Origin([(200, FRESH, body)], chunked=True)

    async def main() -> None:
        async with session_on(origin, HttpCache()) as (session, url):
            async with session.get(url) as first:
                parts = [chunk async for chunk in first.content.iter_chunked(300)]
            assert b"".join(parts) == body
            async with session.get(url) as hit:
                assert record_of(hit).cache == "hit"  # type: ignore[union-attr]
                assert await hit.read() == body
        assert len(origin.seen) == 1

    run(main)


def test_a_response_released_before_its_end_stores_nothing() -> None:
    origin = Origin([(200, FRESH, b"x" * 5000)], chunked=True)

    async def main() -> None:
        cache = HttpCache()
        async with session_on(origin, cache) as (session, url):
            async with session.get(url) as first:
                await first.content.read(10)  # then released, most of it unread
            async with session.get(url) as second:
                assert record_of(second).cache == "miss"  # type: ignore[union-attr]
                await second.read()
            async with session.get(url) as third:
                assert record_of(third).cache == "hit"  # type: ignore[union-attr]
        assert len(origin.seen) == 2
        assert not aiohttp_cached._WATCHED  # nothing left watched

    run(main)


def test_a_response_never_read_holds_up_nobody() -> None:
    """The key is not held while the caller reads: one never read leaves the next call free."""
    origin = Origin([(200, FRESH, b"body")])

    async def main() -> None:
        async with session_on(origin, HttpCache(lock_timeout=5.0)) as (session, url):
            unread = await session.get(url)  # neither read nor released yet
            async with session.get(url) as second:
                assert await second.read() == b"body"
            unread.release()
        assert len(origin.seen) == 2

    run(main)


def test_a_revalidation_sends_validators_and_merges_the_304() -> None:
    now = [1000.0]
    tagged = {"ETag": '"v1"', "Cache-Control": "max-age=10"}
    origin = Origin([(200, {**tagged, "X-Version": "1"}, b"body"), (304, tagged, b"")])

    async def main() -> None:
        async with session_on(origin, HttpCache(clock=lambda: now[0])) as (session, url):
            async with session.get(url) as first:
                await first.read()
            now[0] += 60
            async with session.get(url) as again:
                assert record_of(again).cache == "revalidated"  # type: ignore[union-attr]
                assert record_of(again).attempts == 1  # type: ignore[union-attr]
                assert (again.status, await again.read()) == (200, b"body")
                assert again.headers["X-Version"] == "1"  # the stored headers, merged
        assert origin.seen[-1]["If-None-Match"] == '"v1"'

    run(main)


def test_a_hit_tells_the_hooks_and_a_refused_404_body_is_stored_too() -> None:
    ended: list[CallEnded] = []
    policy = RetryPolicy(attempts=1, on_success=ended.append, on_give_up=ended.append)
    origin = Origin([(404, FRESH, b'{"error": "no such item"}')])

    async def main() -> None:
        async with session_on(origin, HttpCache(), policy=policy) as (session, url):
            for _ in range(2):
                async with session.get(url) as response:
                    assert response.status == 404
                    assert await response.json() == {"error": "no such item"}
        assert len(origin.seen) == 1
        assert [e.record.cache for e in ended] == [None, "hit"]

    run(main)


def test_a_session_without_auto_decompress_stores_no_encoded_body() -> None:
    origin = Origin([(200, {**FRESH, "Content-Encoding": "gzip"}, gzip.compress(b"z" * 100))])

    async def main() -> None:
        async with session_on(origin, HttpCache(), auto_decompress=False) as (session, url):
            for _ in range(2):
                async with session.get(url) as response:
                    assert gzip.decompress(await response.read()) == b"z" * 100
        assert len(origin.seen) == 2

    run(main)


def test_cache_must_be_an_http_cache() -> None:
    with pytest.raises(TypeError, match="cache must be an HttpCache"):
        SmoothMiddleware(cache="memory://")  # type: ignore[arg-type]


def test_a_stored_redirect_standing_in_for_a_dropped_connection_is_followed() -> None:
    """
    The middleware answers aiohttp's resend after a dropped connection with the call's error;
    a stored redirect that stood in for that error is followed on, not answered so.
    """
    now = [1000.0]
    down = [False]

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/items":
            headers = {"Location": "/target", "Cache-Control": "max-age=1, stale-if-error=600"}
            return web.Response(status=301, headers=headers)
        return web.Response(body=b"target")

    async def dropping(request: aiohttp.ClientRequest, handler: Any) -> aiohttp.ClientResponse:
        if down[0] and request.url.path == "/items":
            raise aiohttp.ServerDisconnectedError()
        response: aiohttp.ClientResponse = await handler(request)
        return response

    hops: list[str] = []

    async def counting(request: aiohttp.ClientRequest, handler: Any) -> aiohttp.ClientResponse:
        hops.append(request.url.path)  # each time aiohttp sends, resends included
        response: aiohttp.ClientResponse = await handler(request)
        return response

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/items"
        clock = FakeClock()
        edge = SmoothMiddleware(
            policy=RetryPolicy(attempts=2, wait_initial=0.0),
            pacer=Pacer(clock=clock),
            sleep=clock.async_sleep,
            cache=HttpCache(clock=lambda: now[0]),
        )
        try:
            middlewares = (counting, edge, dropping)
            async with aiohttp.ClientSession(middlewares=middlewares) as session:
                async with session.get(url) as first:
                    assert await first.read() == b"target"
                now[0] += 60
                down[0] = True
                async with session.get(url) as again:
                    assert (again.status, await again.read()) == (200, b"target")
                    assert [r.status for r in again.history] == [301]
                    assert record_of(again.history[0]).cache == "stale"  # type: ignore[union-attr]
        finally:
            await runner.cleanup()

    run(main)
    assert hops == ["/items", "/target", "/items", "/target"]  # no hop answered with the error
