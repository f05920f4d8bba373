"""
The HTTP cache on every edge with ``cache=`` but requests: the httpx and httpx2 transports,
sync and async, and the aiohttp middleware (against a real local server, in a thread).

An edge joins by answering in ``_edge``; each test here runs on each of ``EDGES``.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType, SimpleNamespace
from typing import Any, Protocol

import aiohttp
import anyio
import httpx
import httpx2
import pytest

import smoothclient.httpx2
from smoothclient import (
    AsyncSmoothTransport,
    CallEnded,
    HttpCache,
    Pacer,
    RetryPolicy,
    SmoothTransport,
    record_of,
)
from smoothclient.aiohttp import SmoothMiddleware
from smoothclient.testing import FakeClock

URL = "https://api.test/items"
#: An answer of the fake origin: (status, headers, body).
Answer = tuple[int, dict[str, str], bytes]


class Get(Protocol):
    """A client of one edge: GET ``URL`` (with ``headers``) -> (status, text, record dict)."""

    def __call__(self, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, Any]]:
        """One call."""
        ...


class _Origin(BaseHTTPRequestHandler):
    """The local server of the aiohttp edge: answers each GET with its server's ``origin``."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        status, headers, body = self.server.origin(SimpleNamespace(headers=self.headers))
        self.send_response_only(status)  # no Date: the tests' caches run on their own clocks
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    origin: Callable[[Any], Answer]


_SERVER: list[_Server] = []


@pytest.fixture(scope="module", autouse=True)
def _local_server() -> Iterator[None]:
    """One local server for the module's aiohttp runs (started here, stopped at the end)."""
    server = _Server(("127.0.0.1", 0), _Origin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _SERVER.append(server)
    yield
    _SERVER.clear()
    server.shutdown()
    server.server_close()


def _aiohttp_edge(origin: Callable[[Any], Answer], cache: HttpCache, policy: RetryPolicy) -> Get:
    """A session with the middleware and ``cache``, against the local server."""
    server = _SERVER[0]
    server.origin = origin
    url = f"http://127.0.0.1:{server.server_address[1]}/items"
    clock = FakeClock()
    edge = SmoothMiddleware(policy=policy, pacer=Pacer(clock=clock), cache=cache)

    def get(headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, Any]]:
        async def one() -> tuple[int, str, dict[str, Any]]:
            async with aiohttp.ClientSession(middlewares=(edge,)) as session:
                async with session.get(url, headers=headers) as response:
                    text = await response.text()
                    record = response.smoothclient  # type: ignore[attr-defined]
                await asyncio.sleep(0.01)  # a background revalidation runs meanwhile, to its end
                others = asyncio.all_tasks() - {asyncio.current_task()}
                if others:
                    await asyncio.wait(others, timeout=1.0)
            return response.status, text, record

        return asyncio.run(one())

    return get


def _edge(
    lib: ModuleType, sync: bool, backend: str, origin: Callable[[Any], Answer], cache: HttpCache
) -> tuple[Get, list[CallEnded]]:
    """A client of the library on a transport with ``cache``, and the calls its hooks saw."""
    ended: list[CallEnded] = []
    policy = RetryPolicy(attempts=2, wait_initial=0.0, on_success=ended.append)
    policy = policy.replace(on_give_up=ended.append)
    if lib is aiohttp:
        return _aiohttp_edge(origin, cache, policy), ended
    family = smoothclient.httpx2 if lib is httpx2 else smoothclient

    def answer(request: Any) -> Any:
        status, headers, body = origin(request)
        sent = [(k, v.encode("latin-1")) for k, v in headers.items()]  # (bytes, as a server's)
        return lib.Response(status, headers=sent, content=body)

    async def answer_async(request: Any) -> Any:
        return answer(request)

    clock = FakeClock()
    if sync:
        transport = family.SmoothTransport(
            lib.MockTransport(answer), policy=policy, pacer=Pacer(), cache=cache, sleep=clock.sleep
        )
        client = lib.Client(transport=transport)

        def get(headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, Any]]:
            response = client.get(URL, headers=headers)
            return response.status_code, response.text, response.extensions["smoothclient"]

        return get, ended
    atransport = family.AsyncSmoothTransport(
        lib.MockTransport(answer_async),
        policy=policy,
        pacer=Pacer(),
        cache=cache,
        sleep=clock.async_sleep,
    )

    def aget(headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, Any]]:
        async def one() -> tuple[int, str, dict[str, Any]]:
            async with lib.AsyncClient(transport=atransport) as client:
                response = await client.get(URL, headers=headers)
                record = response.extensions["smoothclient"]
                await anyio.sleep(0.01)  # a background revalidation runs meanwhile
                return response.status_code, response.text, record

        result: tuple[int, str, dict[str, Any]] = anyio.run(one, backend=backend)
        return result

    return aget, ended


EDGES = [
    pytest.param(httpx, True, "", id="httpx"),
    pytest.param(httpx, False, "asyncio", id="httpx-asyncio"),
    pytest.param(httpx, False, "trio", id="httpx-trio"),
    pytest.param(httpx2, True, "", id="httpx2"),
    pytest.param(httpx2, False, "asyncio", id="httpx2-asyncio"),
    pytest.param(aiohttp, False, "asyncio", id="aiohttp"),
]


@pytest.mark.parametrize(("lib", "sync", "backend"), EDGES)
def test_a_fresh_hit_is_not_sent_and_its_hooks_say_hit(
    lib: ModuleType, sync: bool, backend: str
) -> None:
    sent: list[Any] = []
    body = gzip.compress(b"items " * 20)

    def origin(request: Any) -> Answer:
        sent.append(request)
        return 200, {"Cache-Control": "max-age=60", "Content-Encoding": "gzip"}, body

    get, ended = _edge(lib, sync, backend, origin, HttpCache())
    first, hit = get(), get()
    assert len(sent) == 1  # a hit costs no request, nor pacing
    assert first[:2] == hit[:2] == (200, "items " * 20)  # stored as sent, decoded as sent
    assert (first[2]["cache"], hit[2]["cache"]) == ("miss", "hit")
    assert hit[2]["attempts"] == 0
    assert [e.record.cache for e in ended][-1] == "hit"  # the hit told the hooks too


@pytest.mark.parametrize(("lib", "sync", "backend"), EDGES)
def test_a_field_value_that_is_not_ascii_is_served_from_the_store(
    lib: ModuleType, sync: bool, backend: str
) -> None:
    """A server's Latin-1 "ü" in a field: every hit raised UnicodeEncodeError (httpx edges)."""

    def origin(request: Any) -> Answer:
        return 200, {"Cache-Control": "max-age=60", "X-Name": "M\u00fcller"}, b"items"

    get, _ = _edge(lib, sync, backend, origin, HttpCache())
    first, hit = get(), get()
    assert first[:2] == hit[:2] == (200, "items")
    assert hit[2]["cache"] == "hit"


@pytest.mark.parametrize(("lib", "sync", "backend"), EDGES)
def test_a_stale_entry_is_revalidated_with_its_validator(
    lib: ModuleType, sync: bool, backend: str
) -> None:
    now = [1000.0]
    sent: list[Any] = []

    def origin(request: Any) -> Answer:
        sent.append(request)
        if request.headers.get("if-none-match") == '"v1"':
            return 304, {"ETag": '"v1"', "Cache-Control": "max-age=10"}, b""
        return 200, {"ETag": '"v1"', "Cache-Control": "max-age=10"}, b"body"

    get, _ = _edge(lib, sync, backend, origin, HttpCache(clock=lambda: now[0]))
    assert get()[:2] == (200, "body")
    now[0] += 60  # long past its freshness (and any early refresh point)
    status, text, record = get()
    assert (status, text, record["cache"]) == (200, "body", "revalidated")
    assert sent[-1].headers["if-none-match"] == '"v1"'
    assert len(sent) == 2


@pytest.mark.parametrize(("lib", "sync", "backend"), EDGES)
def test_a_failing_origin_is_answered_from_a_stale_entry_when_allowed(
    lib: ModuleType, sync: bool, backend: str
) -> None:
    now = [1000.0]
    down = [False]

    def origin(request: Any) -> Answer:
        if down[0]:
            return 503, {}, b"down"
        return 200, {"Cache-Control": "max-age=10, stale-if-error=600"}, b"kept"

    get, _ = _edge(lib, sync, backend, origin, HttpCache(clock=lambda: now[0]))
    get()
    now[0] += 60
    down[0] = True
    status, text, record = get()
    assert (status, text, record["cache"]) == (200, "kept", "stale")


@pytest.mark.parametrize(("lib", "sync", "backend"), EDGES)
def test_stale_while_revalidate_answers_at_once_and_refreshes_behind(
    lib: ModuleType, sync: bool, backend: str
) -> None:
    now = [1000.0]
    version = [1]

    def origin(request: Any) -> Answer:
        return 200, {"Cache-Control": "max-age=10, stale-while-revalidate=600"}, b"v%d" % version[0]

    cache = HttpCache(clock=lambda: now[0])
    get, _ = _edge(lib, sync, backend, origin, cache)
    assert get()[1] == "v1"
    now[0] += 60
    version[0] = 2
    status, text, record = get()
    assert (status, text, record["cache"]) == (200, "v1", "stale")  # at once, the stored copy
    for _ in range(100):  # the background revalidation stores v2 (a thread or a task)
        entry = cache.get("GET " + URL)
        if entry is not None and entry.body == b"v2":
            break
        anyio.run(anyio.sleep, 0.01)
    assert get()[1] == "v2"


@pytest.mark.parametrize(("lib", "sync", "backend"), EDGES)
def test_the_callers_own_validators_get_a_304_from_the_store_or_from_the_origin(
    lib: ModuleType, sync: bool, backend: str
) -> None:
    """A fresh stored response they select: a 304 hit; stale: theirs sent as they are."""
    now = [1000.0]
    sent: list[tuple[str | None, str | None]] = []
    fields = {
        "ETag": '"v1"',
        "Cache-Control": "max-age=60",
        "Last-Modified": "Tue, 14 Nov 2023 21:13:20 GMT",
    }

    def origin(request: Any) -> Answer:
        tag = request.headers.get("if-none-match")
        sent.append((tag, request.headers.get("if-modified-since")))
        return (304, fields, b"") if tag == '"v1"' else (200, fields, b"body")

    get, ended = _edge(lib, sync, backend, origin, HttpCache(clock=lambda: now[0]))
    assert get()[:2] == (200, "body")
    status, text, record = get({"If-None-Match": '"v1"'})
    assert (status, text, record["cache"], record["attempts"]) == (304, "", "hit", 0)
    assert [e.record.cache for e in ended][-1] == "hit"
    assert len(sent) == 1
    now[0] += 90  # stale
    status, text, record = get({"If-None-Match": '"v1"'})
    assert (status, text, record["cache"]) == (304, "", "revalidated")
    assert sent[-1] == ('"v1"', None)  # the caller's, not the store's If-Modified-Since added
    assert get()[:2] == (200, "body")  # freshened by the 304
    assert len(sent) == 2


@pytest.mark.parametrize(("lib", "sync", "backend"), EDGES)
def test_a_variant_answers_values_that_differ_only_in_form(
    lib: ModuleType, sync: bool, backend: str
) -> None:
    """Vary: Accept-Language; the same languages, spaced and cased otherwise, are a hit."""
    sent: list[Any] = []

    def origin(request: Any) -> Answer:
        sent.append(request)
        return 200, {"Cache-Control": "max-age=60", "Vary": "Accept-Language"}, b"en"

    get, _ = _edge(lib, sync, backend, origin, HttpCache())
    assert get({"Accept-Language": "en-US, de;q=0.5"})[2]["cache"] == "miss"
    status, text, record = get({"Accept-Language": "EN-us ,de ;Q=0.5"})
    assert (status, text, record["cache"]) == (200, "en", "hit")
    assert get({"Accept-Language": "de;q=0.5, en-US"})[2]["cache"] == "miss"  # another order
    assert len(sent) == 2


def test_cache_must_be_an_http_cache() -> None:
    with pytest.raises(TypeError, match="cache must be an HttpCache"):
        SmoothTransport(cache={})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cache must be an HttpCache"):
        AsyncSmoothTransport(cache="memory://")  # type: ignore[arg-type]


def test_record_of_reads_a_hit_typed() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Cache-Control": "max-age=60"}, content=b"x")

    transport = SmoothTransport(httpx.MockTransport(answer), cache=HttpCache())
    with httpx.Client(transport=transport) as client:
        client.get(URL)
        record = record_of(client.get(URL))
    assert record is not None
    assert record.cache == "hit"
    assert record.attempts == 0


@pytest.mark.parametrize("lib", [httpx, httpx2])
def test_a_hit_streams_like_a_sent_response(lib: ModuleType) -> None:
    """``iter_raw()`` on a hit: its stored bytes (a hit made already read raised StreamConsumed)."""

    def answer(request: Any) -> Any:
        return lib.Response(200, headers={"Cache-Control": "max-age=60"}, content=b"items")

    family = smoothclient.httpx2 if lib is httpx2 else smoothclient
    transport = family.SmoothTransport(lib.MockTransport(answer), pacer=Pacer(), cache=HttpCache())
    with lib.Client(transport=transport) as client:
        client.get(URL)
        with client.stream("GET", URL) as hit:
            assert hit.extensions["smoothclient"]["cache"] == "hit"
            assert b"".join(hit.iter_raw()) == b"items"
        assert client.get(URL).text == "items"
