"""
The edge contract: what every edge does with the same server behaviour.

Each edge (httpx sync, httpx async on asyncio and on trio, requests, aiohttp) runs the same
scripted exchanges against an in-memory server (aiohttp: a local one), on a fake clock.  A new
edge joins by adding one ``Edge`` to ``EDGES``.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import anyio
import httpx
import httpx2
import pytest
import requests
from aiohttp import web
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.exceptions import MaxRetryError, NewConnectionError

from smoothclient import (
    AsyncSmoothTransport,
    Pacer,
    RetryPolicy,
    SmoothAdapter,
    SmoothTransport,
)
from smoothclient import httpx2 as smooth_httpx2
from smoothclient.aiohttp import SmoothMiddleware
from smoothclient.testing import FakeClock


class Refused(Exception):
    """The connection was refused: each edge raises its library's own error for it."""


REFUSED = Refused()
#: (status, headers) per attempt, or REFUSED; the last entry repeats.
Script = list[tuple[int, dict[str, str]] | Refused]
URL = "http://api.test/items"


@dataclass
class Result:
    status: int | None
    record: dict[str, Any]
    error: BaseException | None
    sent: int


class Server:
    """Answers attempts from a script and counts them."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.sent = 0

    def next(self) -> tuple[int, dict[str, str]]:
        entry = self.script[min(self.sent, len(self.script) - 1)]
        self.sent += 1
        if isinstance(entry, Refused):
            raise entry
        return entry


Call = Callable[[Server, RetryPolicy, FakeClock, str], Result]


def _httpx_sync(lib: Any, smooth: Any) -> Call:
    """The sync transport of ``lib`` (``httpx`` or ``httpx2``): ``smooth`` is its class."""

    def call(server: Server, policy: RetryPolicy, clock: FakeClock, method: str) -> Result:
        def handler(request: Any) -> Any:
            try:
                status, headers = server.next()
            except Refused as exc:
                raise lib.ConnectError("refused", request=request) from exc
            return lib.Response(status, headers=headers, content=b"body")

        transport = smooth(
            lib.MockTransport(handler), policy=policy, pacer=Pacer(clock=clock), sleep=clock.sleep
        )
        with lib.Client(transport=transport) as client:
            try:
                response = client.request(method, URL)
            except lib.HTTPError as exc:
                return Result(None, getattr(exc, "smoothclient", {}), exc, server.sent)
        return Result(response.status_code, response.extensions["smoothclient"], None, server.sent)

    return call


def _httpx_async(backend: str, lib: Any = httpx, smooth: Any = AsyncSmoothTransport) -> Call:
    def call(server: Server, policy: RetryPolicy, clock: FakeClock, method: str) -> Result:
        async def handler(request: Any) -> Any:
            try:
                status, headers = server.next()
            except Refused as exc:
                raise lib.ConnectError("refused", request=request) from exc
            return lib.Response(status, headers=headers, content=b"body")

        async def main() -> Result:
            transport = smooth(
                lib.MockTransport(handler),
                policy=policy,
                pacer=Pacer(clock=clock),
                sleep=clock.async_sleep,
            )
            async with lib.AsyncClient(transport=transport) as client:
                try:
                    response = await client.request(method, URL)
                except lib.HTTPError as exc:
                    return Result(None, getattr(exc, "smoothclient", {}), exc, server.sent)
            record = response.extensions["smoothclient"]
            return Result(response.status_code, record, None, server.sent)

        result: Result = anyio.run(main, backend=backend)
        return result

    return call


class _ScriptedHTTPAdapter(HTTPAdapter):
    """What urllib3 would answer, from the script (no sockets)."""

    server: Server

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        try:
            status, headers = self.server.next()
        except Refused as exc:
            reason = NewConnectionError(None, "refused")  # type: ignore[arg-type]
            raise requests.ConnectionError(MaxRetryError(None, request.url, reason)) from exc  # type: ignore[arg-type]
        response = requests.Response()
        response.status_code = status
        response.headers = CaseInsensitiveDict(headers)
        response.raw = io.BytesIO(b"body")
        response.url = request.url or ""
        response.request = request
        return response


class _Adapter(SmoothAdapter, _ScriptedHTTPAdapter):
    pass


def _requests(server: Server, policy: RetryPolicy, clock: FakeClock, method: str) -> Result:
    adapter = _Adapter(policy=policy, pacer=Pacer(clock=clock), sleep=clock.sleep)
    adapter.server = server
    with requests.Session() as session:
        session.mount("http://", adapter)
        try:
            response = session.request(method, URL)
        except requests.RequestException as exc:
            return Result(None, getattr(exc, "smoothclient", {}), exc, server.sent)
    return Result(response.status_code, response.smoothclient, None, server.sent)  # type: ignore[attr-defined]


def _aiohttp(server: Server, policy: RetryPolicy, clock: FakeClock, method: str) -> Result:
    """A real local server answers; a refusal is raised by a middleware inside the edge's."""

    async def answer(request: web.Request) -> web.Response:
        status, headers = json.loads(request.headers["x-script"])
        return web.Response(status=status, headers=headers, body=b"body")

    async def scripted(request: aiohttp.ClientRequest, handler: Any) -> aiohttp.ClientResponse:
        try:
            entry = server.next()
        except Refused as exc:
            refused = ConnectionRefusedError(111, "refused")
            raise aiohttp.ClientConnectorError(request.connection_key, refused) from exc
        request.headers["x-script"] = json.dumps(entry)
        response: aiohttp.ClientResponse = await handler(request)
        return response

    async def main() -> Result:
        app = web.Application()
        app.router.add_route("*", "/items", answer)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/items"
        edge = SmoothMiddleware(policy=policy, pacer=Pacer(clock=clock), sleep=clock.async_sleep)
        try:
            async with aiohttp.ClientSession(middlewares=(edge, scripted)) as session:
                try:
                    async with session.request(method, url) as response:
                        record = response.smoothclient  # type: ignore[attr-defined]
                        return Result(response.status, record, None, server.sent)
                except aiohttp.ClientError as exc:
                    return Result(None, getattr(exc, "smoothclient", {}), exc, server.sent)
        finally:
            await runner.cleanup()

    return asyncio.run(main())


EDGES: dict[str, Call] = {
    "httpx": _httpx_sync(httpx, SmoothTransport),
    "httpx-asyncio": _httpx_async("asyncio"),
    "httpx-trio": _httpx_async("trio"),
    "httpx2": _httpx_sync(httpx2, smooth_httpx2.SmoothTransport),
    "httpx2-asyncio": _httpx_async("asyncio", httpx2, smooth_httpx2.AsyncSmoothTransport),
    "httpx2-trio": _httpx_async("trio", httpx2, smooth_httpx2.AsyncSmoothTransport),
    "requests": _requests,
    "aiohttp": _aiohttp,
}
POLICY = RetryPolicy(attempts=3, timeout=60, wait_initial=0.1, wait_max=1.0)


@pytest.fixture(params=list(EDGES))
def edge(request: pytest.FixtureRequest) -> Call:
    return EDGES[request.param]


def run(edge: Call, script: Script, policy: RetryPolicy = POLICY, method: str = "GET") -> Result:
    return edge(Server(script), policy, FakeClock(100.0), method)


def test_a_success_ends_the_call_at_once(edge: Call) -> None:
    """One attempt, no wait, a record saying so."""
    result = run(edge, [(200, {})])
    assert (result.status, result.sent) == (200, 1)
    assert result.record == {
        "attempts": 1,
        "waits": [],
        "total_wait": 0.0,
        "reasons": [],
        "gave_up": None,
        "status": 200,
        "retries": [],
        "pacer_waits": [],
        "held_for_outage": 0.0,
        "gave_up_kind": None,
    }


def test_a_transient_error_is_retried(edge: Call) -> None:
    """503 then 200: two attempts, one backoff wait within the first window."""
    result = run(edge, [(503, {}), (200, {})])
    assert (result.status, result.sent) == (200, 2)
    assert result.record["attempts"] == 2
    assert result.record["reasons"] == ["status 503"]
    assert 0 <= result.record["total_wait"] <= 0.1
    assert result.record["gave_up"] is None


def test_retry_after_shifts_the_wait(edge: Call) -> None:
    """No retry earlier than the server said."""
    result = run(edge, [(429, {"Retry-After": "2"}), (200, {})])
    assert result.status == 200
    assert result.record["total_wait"] >= 2.0


def test_an_error_no_policy_retries_is_returned_at_once(edge: Call) -> None:
    """A 404 is the caller's answer: one attempt, nothing given up on."""
    result = run(edge, [(404, {}), (200, {})])
    assert (result.status, result.sent) == (404, 1)
    assert result.record["gave_up"] is None


def test_attempts_run_out(edge: Call) -> None:
    """The last response is returned, with why the call gave up."""
    result = run(edge, [(503, {})])
    assert (result.status, result.sent) == (503, 3)
    assert result.record["attempts"] == 3
    assert "3 attempts used" in result.record["gave_up"]


def test_a_connection_failure_is_retried(edge: Call) -> None:
    """A refused connection never reached the server: retried for any method."""
    result = run(edge, [REFUSED, (200, {})], method="POST")
    assert (result.status, result.sent) == (200, 2)


def test_a_non_idempotent_method_is_not_retried_after_sending(edge: Call) -> None:
    """A POST that got a 503 may have had effects: it is not sent again."""
    result = run(edge, [(503, {}), (200, {})], method="POST")
    assert (result.status, result.sent) == (503, 1)
    assert "not idempotent" in result.record["gave_up"]


def test_a_server_delay_beyond_the_cap_is_returned(edge: Call) -> None:
    """Asked to wait longer than max_retry_after: the answer comes back at once."""
    policy = POLICY.replace(max_retry_after=5)
    result = run(edge, [(503, {"Retry-After": "60"}), (200, {})], policy)
    assert (result.status, result.sent) == (503, 1)
    assert "max_retry_after" in result.record["gave_up"]


def test_the_last_error_is_raised_with_the_record(edge: Call) -> None:
    """Connection failures all the way: the client library's own error, with the record."""
    result = run(edge, [REFUSED])
    assert result.status is None
    assert result.sent == 3
    assert result.record["attempts"] == 3
    assert result.error is not None
    assert any("3 attempt(s)" in note for note in getattr(result.error, "__notes__", []))


@pytest.mark.parametrize("headers", [{}, {"Retry-After": "1"}])
def test_a_throttled_post_is_retried(edge: Call, headers: dict[str, str]) -> None:
    """A 429 (or a 503 saying when to come back): the server did not act, so a POST goes again."""
    status = 503 if headers else 429
    result = run(edge, [(status, headers), (200, {})], method="POST")
    assert (result.status, result.sent) == (200, 2)
    assert result.record["reasons"][0].startswith(f"status {status}")


def test_a_throttled_post_is_not_retried_when_the_policy_says_so(edge: Call) -> None:
    """retry_throttled_any_method=False: a 429 is retried for idempotent methods only."""
    policy = POLICY.replace(retry_throttled_any_method=False)
    result = run(edge, [(429, {}), (200, {})], policy, method="POST")
    assert (result.status, result.sent) == (429, 1)
    assert "not idempotent" in result.record["gave_up"]
