"""
Hostile-input regressions of the edges: odd responses, odd exceptions, cancellation.

Each test is one bug found by the hostile-input campaign on the edges; every one runs on a
fake clock over an in-memory transport, in well under a second.
"""

from __future__ import annotations

import asyncio
import io
import random
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from smoothclient import (
    AsyncSmoothTransport,
    Pacer,
    RateLimited,
    RetryPolicy,
    SmoothAdapter,
    SmoothTransport,
)
from smoothclient.events import RetryEvent
from smoothclient.hints import Hints
from smoothclient.testing import FakeClock

URL = "http://api.test/items"
ORIGIN = "http://api.test:80"


class _Body(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body of unknown length (not drained when released), that knows if it was closed."""

    def __init__(self) -> None:
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield b"busy"

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"busy"

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


def _closing(pacer: Pacer, clock: FakeClock) -> RetryPolicy:
    """A policy whose retry hook closes the origin for 100 s: the retry is refused."""

    def close_origin(event: RetryEvent) -> None:
        pacer.track(ORIGIN).observe(503, Hints(retry_after=100.0), clock(), counted=False)

    return RetryPolicy(attempts=3, timeout=10.0, on_retry=close_origin)


def test_a_retry_refused_after_an_unread_body_was_released_raises_sync() -> None:
    """
    A 503 of unknown length, its retry then refused by the pacer: no closed response returned.

    The flow released the 503 (its body unread: no Content-Length) before asking for the
    retry's slot; the pacer refused it, and the call returned the released response, which
    httpx then failed to read: ``httpx.StreamClosed``, no ``httpx.HTTPError``.
    """
    clock = FakeClock(1000.0)
    pacer = Pacer(clock=clock, probe=0)
    bodies: list[_Body] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(_Body())
        return httpx.Response(503, stream=bodies[-1])

    transport = SmoothTransport(
        httpx.MockTransport(handler),
        policy=_closing(pacer, clock),
        pacer=pacer,
        sleep=clock.sleep,
        rng=random.Random(0),
    )
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.HTTPError) as caught:
        client.get(URL)
    assert isinstance(caught.value, RateLimited)
    assert getattr(caught.value, "smoothclient", {})["attempts"] == 1
    assert all(body.closed for body in bodies)
    assert pacer.view(ORIGIN).in_flight == 0


def test_a_retry_refused_after_an_unread_body_was_released_raises_async() -> None:
    """Async twin: the released 503 came back and ``aread`` raised ``httpx.StreamClosed``."""
    clock = FakeClock(1000.0)
    pacer = Pacer(clock=clock, probe=0)
    bodies: list[_Body] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(_Body())
        return httpx.Response(503, stream=bodies[-1])

    transport = AsyncSmoothTransport(
        httpx.MockTransport(handler),
        policy=_closing(pacer, clock),
        pacer=pacer,
        sleep=clock.async_sleep,
        rng=random.Random(0),
    )

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport) as client:
            with pytest.raises(httpx.HTTPError):
                await client.get(URL)

    asyncio.run(main())
    assert all(body.closed for body in bodies)
    assert pacer.view(ORIGIN).in_flight == 0


def test_a_retry_refused_after_a_drained_body_returns_the_response() -> None:
    """A released 503 whose small body was read first is whole: it is still the answer."""
    clock = FakeClock(1000.0)
    pacer = Pacer(clock=clock, probe=0)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, content=b"busy")

    transport = SmoothTransport(
        httpx.MockTransport(handler),
        policy=_closing(pacer, clock),
        pacer=pacer,
        sleep=clock.sleep,
        rng=random.Random(0),
    )
    with httpx.Client(transport=transport) as client:
        response = client.get(URL)
    assert (response.status_code, response.content) == (503, b"busy")


class _Unsized(HTTPAdapter):
    """An inner adapter answering 503s of unknown length (no Content-Length)."""

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        response = requests.Response()
        response.status_code = 503
        response.headers = CaseInsensitiveDict({"content-type": "text/plain"})
        response.raw = io.BytesIO(b"busy")
        response.url = request.url or ""
        response.request = request
        return response


class _UnsizedSmooth(SmoothAdapter, _Unsized):
    """SmoothAdapter over :class:`_Unsized`."""


def test_a_retry_refused_after_an_unread_body_was_released_raises_requests() -> None:
    """requests: the released 503 came back and reading it raised ``ValueError``."""
    clock = FakeClock(1000.0)
    pacer = Pacer(clock=clock, probe=0)
    adapter = _UnsizedSmooth(
        policy=_closing(pacer, clock), pacer=pacer, sleep=clock.sleep, rng=random.Random(0)
    )
    with requests.Session() as session:
        session.mount("http://", adapter)
        with pytest.raises(requests.RequestException) as caught:
            session.get(URL)
    assert isinstance(caught.value, RateLimited)
