"""
Every edge against a server at its worst: bodies cut off mid-way, answers that never come,
header blocks dripped a byte at a time, endless bodies.  Each call ends within its policy's
deadline (or sooner) with the client library's own error or a retried success, never a hang.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest
import requests

from smoothclient import AsyncSmoothTransport, RetryPolicy, SmoothAdapter, SmoothTransport
from smoothclient.tools.server import LimitedServer

Get = Callable[[str, RetryPolicy], tuple[int | None, dict[str, Any]]]


def _httpx(url: str, policy: RetryPolicy) -> tuple[int | None, dict[str, Any]]:
    with httpx.Client(transport=SmoothTransport(policy=policy), timeout=30) as client:
        try:
            response = client.get(url)
        except httpx.HTTPError as exc:
            return None, getattr(exc, "smoothclient", {})
    return response.status_code, response.extensions["smoothclient"]


def _httpx_async_on(backend: str) -> Get:
    def get(url: str, policy: RetryPolicy) -> tuple[int | None, dict[str, Any]]:
        async def main() -> tuple[int | None, dict[str, Any]]:
            transport = AsyncSmoothTransport(policy=policy)
            async with httpx.AsyncClient(transport=transport, timeout=30) as client:
                try:
                    response = await client.get(url)
                except httpx.HTTPError as exc:
                    return None, getattr(exc, "smoothclient", {})
            return response.status_code, response.extensions["smoothclient"]

        found: tuple[int | None, dict[str, Any]] = anyio.run(main, backend=backend)
        return found

    get.__name__ = f"httpx_{backend}"
    return get


_httpx_async = _httpx_async_on("asyncio")


def _requests(url: str, policy: RetryPolicy) -> tuple[int | None, dict[str, Any]]:
    with requests.Session() as session:
        session.mount("http://", SmoothAdapter(policy=policy))
        try:
            response = session.get(url, timeout=30)
        except requests.RequestException as exc:
            return None, getattr(exc, "smoothclient", {})
    return response.status_code, response.smoothclient  # type: ignore[attr-defined]


EDGES: dict[str, Get] = {"httpx": _httpx, "httpx-async": _httpx_async, "requests": _requests}


@pytest.fixture(scope="module")
def server() -> Iterator[LimitedServer]:
    with LimitedServer(rate=1e9, burst=1e9) as running:
        yield running


@pytest.fixture(params=list(EDGES))
def get(request: pytest.FixtureRequest) -> Get:
    return EDGES[request.param]


FAST = RetryPolicy(attempts=3, timeout=5, wait_initial=0.01, wait_max=0.05)


@pytest.mark.parametrize("kind", ["reset", "endless"])
def test_a_broken_error_answer_is_retried(server: LimitedServer, get: Get, kind: str) -> None:
    """A 503 cut off mid-body, or one whose body never ends: retried, then the 200."""
    start = time.monotonic()
    status, record = get(f"{server.url}/fault/{kind}/once?{kind}-{id(get)}", FAST)
    assert status == 200
    assert record["attempts"] == 2
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize("kind", ["stall"])
def test_an_answer_that_never_comes_ends_at_the_deadline(
    server: LimitedServer, get: Get, kind: str
) -> None:
    """Headers that never come: the deadline cuts the attempt's own timeout."""
    policy = FAST.replace(timeout=1.0)
    start = time.monotonic()
    status, _ = get(f"{server.url}/fault/{kind}?{kind}-{id(get)}", policy)
    elapsed = time.monotonic() - start
    assert status is None  # the client library's own timeout error, raised
    assert elapsed < 1.5


@pytest.mark.parametrize(
    "run",
    [_httpx, _httpx_async, _httpx_async_on("trio"), _requests],
    ids=["httpx", "asyncio", "trio", "requests"],
)
def test_a_dripped_header_block_ends_at_the_deadline(server: LimitedServer, run: Get) -> None:
    """
    Every read is quick but the header block never ends: the whole attempt is cut.

    Async edges cut it with a cancel scope, httpx's sync transport by ending every network
    wait with the attempt, the requests adapter with its watchdog (it shuts the socket).
    """
    policy = FAST.replace(timeout=0.8)
    start = time.monotonic()
    status, record = run(f"{server.url}/fault/drip?drip-{run.__name__}", policy)
    elapsed = time.monotonic() - start
    assert status is None  # httpx's own ReadTimeout, with the call's record
    assert record["attempts"] == 1
    assert elapsed < 1.3


def test_a_dripped_header_block_on_a_reused_connection_is_cut(server: LimitedServer) -> None:
    """The sync edges cut an attempt on a connection from the pool, too."""
    transport = SmoothTransport(policy=FAST.replace(timeout=0.8))
    with httpx.Client(transport=transport) as client:
        assert client.get(f"{server.url}/fault/none").status_code == 404  # a quick answer
        assert len(transport.transport._pool.connections) == 1  # type: ignore[attr-defined]
        start = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            client.get(f"{server.url}/fault/drip?reused-httpx")
        assert time.monotonic() - start < 1.3

    adapter = SmoothAdapter(policy=FAST.replace(timeout=0.8))
    with requests.Session() as session:
        session.mount("http://", adapter)
        assert session.get(f"{server.url}/fault/none").status_code == 404  # a quick answer
        start = time.monotonic()
        with pytest.raises(requests.ReadTimeout):
            session.get(f"{server.url}/fault/drip?reused")
        assert time.monotonic() - start < 1.3
        pools = adapter.poolmanager.pools
        made = [pools[key].num_connections for key in pools.keys()]  # noqa: SIM118 - no iter
        assert made == [1]  # the drip came on the first request's connection
