"""
The SDK mode with the real ``openai`` and ``anthropic`` packages, against a local fake of
their APIs that throttles by requests and tokens and sends their real rate-limit headers
(smoothclient.tools.llm_server).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from smoothclient import Pacer, RetryPolicy
from smoothclient.httpx2 import AsyncSmoothTransport, SmoothTransport
from smoothclient.tools.llm_server import WORDS, LLMServer

pytestmark = pytest.mark.e2e

VENDORS = ("openai", "anthropic")
FAST = RetryPolicy(attempts=3, wait_initial=0.01, wait_max=0.05)
MESSAGES: list[Any] = [{"role": "user", "content": "x" * 200}]


_OPEN: list[Any] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """Every SDK client a test made is closed after it (its connections with it)."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def sdk(vendor: str, url: str, transport: SmoothTransport, **kw: Any) -> Any:
    """The vendor's SDK client on ``transport``, aimed at the fake at ``url``."""
    http = httpx2.Client(transport=transport)
    client: Any
    if vendor == "openai":
        client = openai.OpenAI(api_key="sk-test", base_url=f"{url}/v1", http_client=http, **kw)
    else:
        client = anthropic.Anthropic(api_key="sk-test", base_url=url, http_client=http, **kw)
    _OPEN.append(client)
    return client


def chat(client: Any, **kw: Any) -> Any:
    """One chat call, the vendor's way."""
    if isinstance(client, openai.OpenAI):
        return client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=50, **kw)
    return client.messages.create(model="m", messages=MESSAGES, max_tokens=50, **kw)


def rate_limit_error(vendor: str) -> type[Exception]:
    return openai.RateLimitError if vendor == "openai" else anthropic.RateLimitError


@pytest.fixture(params=VENDORS)
def vendor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(vendor: str) -> Iterator[LLMServer]:
    with LLMServer(vendor, requests=20, tokens=100_000, window=1.0) as fake:
        yield fake


def test_calls_from_threads_are_paced_by_the_vendors_headers(
    vendor: str, server: LLMServer
) -> None:
    """40 calls from 8 threads against 20 a second: every one through, almost no 429."""
    client = sdk(vendor, server.url, SmoothTransport(sdk=True), max_retries=0)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: chat(client), range(40)))
    assert len(results) == 40
    assert server.statuses[200] == 40
    assert server.statuses[429] <= 4  # 0.1 a call at most
    assert set(server.retry_counts) == {"0"}  # the SDK never retried


def test_calls_are_paced_by_the_token_quota_when_it_binds(vendor: str) -> None:
    """
    40 calls of about 115 tokens against 3000 tokens a second (100 requests): the token quota
    binds; read as calls (docs/headers.md R16), it is paced too, almost no 429.
    """
    with LLMServer(vendor, requests=100, tokens=3000, window=1.0) as server:
        client = sdk(vendor, server.url, SmoothTransport(sdk=True), max_retries=0)
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: chat(client), range(40)))
    assert len(results) == 40
    assert server.statuses[200] == 40
    assert server.statuses[429] <= 4


def test_a_throttled_chat_post_is_retried_here_and_not_by_the_sdk(vendor: str) -> None:
    """A 429 on a POST: the server did not act, so it goes again; the SDK's retries stay off."""
    with LLMServer(vendor, requests=4, window=1.0) as server:
        server.requests.drain(-1.0)  # spent: the next request in 0.5 s
        client = sdk(vendor, server.url, SmoothTransport(sdk=True))  # the SDK's max_retries=2
        assert chat(client) is not None
    assert server.statuses[200] == 1
    assert 1 <= server.statuses[429] <= 4  # within the transport's 5 attempts
    assert set(server.retry_counts) == {"0"}


def test_a_give_up_is_the_sdks_rate_limit_error_and_the_sdk_does_not_retry_it(
    vendor: str, server: LLMServer
) -> None:
    """Three 429s here, then the SDK's own error: 3 requests, not 3 x (1 + max_retries)."""
    url = f"{server.url}/fail/429"
    client = sdk(vendor, url, SmoothTransport(policy=FAST, sdk=True), max_retries=2)
    with pytest.raises(rate_limit_error(vendor)):
        chat(client)
    assert server.sent == 3
    assert server.retry_counts == {"0": 3}


def test_a_refusal_is_the_sdks_rate_limit_error_never_a_connection_error(vendor: str) -> None:
    """A quota spent for 1000 s: the first call's 429 is returned, the next is never sent."""
    with LLMServer(vendor, requests=5, window=1000.0) as server:
        server.requests.drain()
        client = sdk(vendor, server.url, SmoothTransport(sdk=True))
        with pytest.raises(rate_limit_error(vendor)):
            chat(client)
        with pytest.raises(rate_limit_error(vendor)) as refused:
            chat(client)
        assert server.sent == 1  # the second was answered here
    response = refused.value.response  # type: ignore[attr-defined]
    assert float(response.headers["retry-after"]) > 5
    assert response.headers["x-should-retry"] == "false"
    assert response.extensions["smoothclient"]["attempts"] == 0


def test_the_sdks_own_retries_make_one_attempt_each() -> None:
    """
    Connection failures: 3 attempts here, then each SDK retry is one attempt (not 3 more).

    The SDK retries an exception (it cannot be told not to): its retry count header says
    so, and the transport makes that one attempt.
    """
    tries: list[str] = []

    def refuse(request: httpx2.Request) -> httpx2.Response:
        tries.append(request.headers.get("x-stainless-retry-count", "-"))
        raise httpx2.ConnectError("refused", request=request)

    transport = SmoothTransport(
        httpx2.MockTransport(refuse), policy=FAST, pacer=Pacer(probe=0), sdk=True
    )
    client = sdk("openai", "http://api.test", transport, max_retries=1)
    with pytest.raises(openai.APIConnectionError):
        chat(client)
    assert tries == ["0", "0", "0", "1"]


def test_the_deadline_never_cuts_an_attempt_the_clients_timeout_allows(vendor: str) -> None:
    """A 0.6 s answer under a 0.3 s deadline: through in SDK mode, cut when asked."""
    with LLMServer(vendor, latency=0.6) as server:
        policy = RetryPolicy(timeout=0.3)
        assert chat(sdk(vendor, server.url, SmoothTransport(policy=policy, sdk=True))) is not None
        cutting = SmoothTransport(policy=policy.replace(cut_attempts=True), sdk=True)
        timeout_error = openai.APITimeoutError if vendor == "openai" else anthropic.APITimeoutError
        with pytest.raises(timeout_error):
            chat(sdk(vendor, server.url, cutting, max_retries=0))


def _text(event: Any) -> str | None:
    """The text an event of either SDK's stream carries, if any."""
    choices = getattr(event, "choices", None)
    if choices:
        content: str | None = choices[0].delta.content
        return content
    delta = getattr(event, "delta", None)
    return getattr(delta, "text", None)


def test_a_stream_is_neither_cut_by_the_deadline_nor_buffered(vendor: str) -> None:
    """Events 0.15 s apart under a 0.3 s deadline: all arrive, the first before the last left."""
    with LLMServer(vendor, stream_gap=0.15) as server:
        transport = SmoothTransport(policy=RetryPolicy(timeout=0.3), sdk=True)
        client = sdk(vendor, server.url, transport, max_retries=0)
        texts: list[str] = []
        written_at_first = -1
        for event in chat(client, stream=True):
            text = _text(event)
            if text is None:
                continue
            if not texts:
                written_at_first = server.streamed
            texts.append(text)
    assert "".join(texts) == "".join(WORDS)
    total = len(WORDS) + (1 if vendor == "openai" else 4)
    assert 0 < written_at_first < total  # handed over while the server was still writing


def test_async_clients_of_both_sdks(vendor: str) -> None:
    """
    The async transport under AsyncOpenAI / AsyncAnthropic: a throttled call, then a stream.

    On asyncio: the SDKs' stream generators are left to asyncio's finalizer (trio runs the
    transport in tests/edges/test_contract.py).
    """
    server = LLMServer(vendor, requests=4, window=1.0).start()
    server.requests.drain(-1.0)  # spent: the next request in 0.5 s

    async def main() -> list[str]:
        http = httpx2.AsyncClient(transport=AsyncSmoothTransport(sdk=True))
        client: Any
        if vendor == "openai":
            client = openai.AsyncOpenAI(api_key="k", base_url=f"{server.url}/v1", http_client=http)
            await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=5)
            stream = await client.chat.completions.create(
                model="m", messages=MESSAGES, max_tokens=5, stream=True
            )
        else:
            client = anthropic.AsyncAnthropic(api_key="k", base_url=server.url, http_client=http)
            await client.messages.create(model="m", messages=MESSAGES, max_tokens=5)
            stream = await client.messages.create(
                model="m", messages=MESSAGES, max_tokens=5, stream=True
            )
        async with stream:
            texts = [t async for e in stream if (t := _text(e)) is not None]
        await client.close()
        return texts

    try:
        assert "".join(asyncio.run(main())) == "".join(WORDS)
    finally:
        server.stop()
    assert 1 <= server.statuses[429] <= 4
    assert set(server.retry_counts) == {"0"}
