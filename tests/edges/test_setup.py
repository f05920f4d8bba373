"""Set-ups that cannot work are refused at construction; a call that gives up unsent raises
the client library's own error (and smoothclient.RateLimited)."""

from __future__ import annotations

import anyio
import httpx
import pytest
import requests

from smoothclient import (
    AsyncSmoothTransport,
    Pacer,
    RateLimited,
    RetryPolicy,
    SmoothAdapter,
    SmoothTransport,
    retry,
)
from smoothclient.hints import Hints
from smoothclient.testing import FakeClock

ORIGIN = "https://api.test:443"


def test_a_wrapped_transport_of_the_wrong_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="async transport goes in AsyncSmoothTransport"):
        SmoothTransport(httpx.AsyncHTTPTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sync transport goes in SmoothTransport"):
        AsyncSmoothTransport(httpx.HTTPTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must be an httpx\.BaseTransport, not str"):
        SmoothTransport("http://x")  # type: ignore[arg-type]


def test_a_client_of_the_wrong_kind_says_which_transport_it_needs() -> None:
    async def use_sync_in_async() -> None:
        async with httpx.AsyncClient(transport=SmoothTransport()) as client:  # type: ignore[arg-type]
            await client.get("https://api.test/")

    with pytest.raises(TypeError, match=r"httpx\.AsyncClient needs AsyncSmoothTransport"):
        anyio.run(use_sync_in_async)
    client = httpx.Client(transport=AsyncSmoothTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"httpx\.Client needs SmoothTransport"):
        client.get("https://api.test/")
    sync_client = httpx.Client(transport=AsyncSmoothTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"httpx\.Client needs SmoothTransport"):
        sync_client.__enter__()


def test_policy_fields_as_keywords_on_every_edge() -> None:
    assert SmoothTransport(attempts=2).policy.attempts == 2
    base = RetryPolicy(attempts=7, timeout=5)
    transport = AsyncSmoothTransport(policy=base, attempts=3)
    assert (transport.policy.attempts, transport.policy.timeout) == (3, 5)
    adapter = SmoothAdapter(attempts=3, pool_maxsize=4)
    assert adapter.policy.attempts == 3
    with pytest.raises(TypeError, match="RetryPolicy fields"):
        SmoothTransport(attempt=2)
    with pytest.raises(TypeError, match="unknown arguments"):
        SmoothAdapter(retries=2)
    with pytest.raises(ValueError, match="attempts"):
        SmoothAdapter(attempts=0)


def test_retry_refuses_what_is_neither_types_nor_a_predicate() -> None:
    for bad in (5, "ValueError", (ValueError, 5)):
        with pytest.raises(TypeError, match="exception type"):
            retry(on=bad)  # type: ignore[arg-type]


def closed_pacer(clock: FakeClock) -> Pacer:
    """An origin closed for 100 s by a 503's Retry-After (beyond max_retry_after=5)."""
    pacer = Pacer(clock=clock, probe=0)
    pacer.track(ORIGIN).observe(503, Hints(retry_after=100.0), clock(), counted=False)
    return pacer


POLICY = RetryPolicy(max_retry_after=5, timeout=60)


def test_httpx_gives_up_unsent_with_an_httpx_error(clock: FakeClock) -> None:
    transport = SmoothTransport(
        httpx.MockTransport(lambda r: httpx.Response(200)),
        policy=POLICY,
        pacer=closed_pacer(clock),
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.HTTPError) as caught:
        client.get("https://api.test/items")
    assert isinstance(caught.value, RateLimited)
    assert caught.value.retry_after == pytest.approx(100.0)
    assert caught.value.smoothclient["attempts"] == 0  # type: ignore[attr-defined]
    assert caught.value.request.url == "https://api.test/items"
    assert clock.sleeps == []


def test_httpx_async_gives_up_unsent_with_an_httpx_error(clock: FakeClock) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)

    async def main() -> None:
        transport = AsyncSmoothTransport(
            httpx.MockTransport(handler),
            policy=POLICY,
            pacer=closed_pacer(clock),
            sleep=clock.async_sleep,
        )
        async with httpx.AsyncClient(transport=transport) as client:
            with pytest.raises(httpx.HTTPError) as caught:
                await client.get("https://api.test/items")
        assert isinstance(caught.value, RateLimited)

    anyio.run(main)


def test_requests_gives_up_unsent_with_a_requests_error(clock: FakeClock) -> None:
    adapter = SmoothAdapter(policy=POLICY, pacer=closed_pacer(clock), sleep=clock.sleep)
    with requests.Session() as session:
        session.mount("https://", adapter)
        with pytest.raises(requests.RequestException) as caught:
            session.get("https://api.test/items")
    assert isinstance(caught.value, RateLimited)
    assert caught.value.retry_after == pytest.approx(100.0)
    assert caught.value.request is not None
    assert caught.value.smoothclient["gave_up"]  # type: ignore[attr-defined]
