"""
httpx2 transports: the httpx edge on httpx2's classes, and the SDK mode of both.

The contract suite (test_contract.py) runs the shared behaviour on httpx2 too; these are the
httpx tests that touch what differs per library (its classes, its errors, its connection
library) and the SDK mode.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import anyio
import httpcore2
import httpx
import httpx2
import pytest

import smoothclient
from smoothclient import Hints, Pacer, RateLimited, RetryPolicy
from smoothclient.edges.httpx_deadline import ENDS, _CutBackend, cut_at_deadline
from smoothclient.httpx2 import AsyncSmoothTransport, RateLimitedError, SmoothTransport
from smoothclient.testing import FakeClock

URL = "https://api.test/items"
ORIGIN = "https://api.test:443"


def answers(*responses: httpx2.Response) -> tuple[httpx2.MockTransport, list[httpx2.Request]]:
    """A mock transport answering ``responses`` in turn (the last repeats), and what it got."""
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return responses[min(len(seen), len(responses)) - 1]

    return httpx2.MockTransport(handler), seen


def closed_pacer(clock: FakeClock) -> Pacer:
    """An origin closed for 100 s by a 503's Retry-After (beyond max_retry_after=5)."""
    pacer = Pacer(clock=clock, probe=0)
    pacer.track(ORIGIN).observe(503, Hints(retry_after=100.0), clock(), counted=False)
    return pacer


def test_retries_then_succeeds(clock: FakeClock) -> None:
    inner, seen = answers(httpx2.Response(503), httpx2.Response(200))
    transport = SmoothTransport(inner, pacer=Pacer(clock=clock, probe=0), sleep=clock.sleep)
    with httpx2.Client(transport=transport) as client:
        response = client.get(URL)
    assert response.status_code == 200
    assert len(seen) == 2
    assert response.extensions["smoothclient"]["reasons"] == ["status 503"]


def test_a_client_of_the_other_library_gets_a_type_error_naming_the_right_transport() -> None:
    """httpx2 checks a transport's response is its own (a bare AssertionError): caught first."""
    with (
        httpx2.Client(transport=smoothclient.SmoothTransport()) as client,  # type: ignore[arg-type]
        pytest.raises(TypeError, match=r"use smoothclient\.httpx2\.SmoothTransport with httpx2"),
    ):
        client.get(URL)
    with (
        httpx.Client(transport=SmoothTransport()) as other,  # type: ignore[arg-type]
        pytest.raises(TypeError, match=r"use smoothclient\.SmoothTransport with httpx"),
    ):
        other.get(URL)

    async def use_async() -> None:
        transport = smoothclient.AsyncSmoothTransport()
        async with httpx2.AsyncClient(transport=transport) as client:  # type: ignore[arg-type]
            await client.get(URL)

    with pytest.raises(TypeError, match=r"smoothclient\.httpx2\.AsyncSmoothTransport"):
        anyio.run(use_async)


def test_a_wrapped_transport_of_the_other_library_is_refused() -> None:
    with pytest.raises(TypeError, match=r"must be an httpx2\.BaseTransport, not HTTPTransport"):
        SmoothTransport(httpx.HTTPTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sync transport goes in SmoothTransport"):
        AsyncSmoothTransport(httpx2.HTTPTransport())  # type: ignore[arg-type]


def test_default_inner_transports_are_httpx2s_and_cut_at_the_deadline() -> None:
    sync = SmoothTransport()
    assert isinstance(sync.transport, httpx2.HTTPTransport)
    assert isinstance(sync.transport._pool._network_backend, _CutBackend)
    assert sync._cuts
    sync.close()
    assert isinstance(AsyncSmoothTransport().transport, httpx2.AsyncHTTPTransport)


def test_a_cut_wait_raises_httpcore2s_own_timeout() -> None:
    """httpx2 maps httpcore2's errors to its own: the cut streams must raise those."""
    stock = httpx2.HTTPTransport()
    assert cut_at_deadline(stock, httpcore2)
    backend = stock._pool._network_backend
    token = ENDS.set(time.monotonic() - 1.0)  # the attempt is over
    try:
        with pytest.raises(httpcore2.ConnectTimeout):
            backend.connect_tcp("127.0.0.1", 9, 5.0)
    finally:
        ENDS.reset(token)


def test_a_refusal_is_an_httpx2_error(clock: FakeClock) -> None:
    transport = SmoothTransport(
        httpx2.MockTransport(lambda r: httpx2.Response(200)),
        policy=RetryPolicy(max_retry_after=5),
        pacer=closed_pacer(clock),
        sleep=clock.sleep,
    )
    with httpx2.Client(transport=transport) as client, pytest.raises(httpx2.HTTPError) as caught:
        client.get(URL)
    assert isinstance(caught.value, RateLimitedError)
    assert isinstance(caught.value, RateLimited)
    assert caught.value.retry_after == pytest.approx(100.0)
    assert caught.value.request.url == URL


class _Unread(httpx2.BaseTransport):
    """Answers 503 then 200 without reading the body (as a real one streams it out)."""

    def __init__(self) -> None:
        self.seen = 0

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.seen += 1
        return httpx2.Response(503 if self.seen == 1 else 200)


def test_streaming_body_is_never_replayed(clock: FakeClock) -> None:
    inner = _Unread()
    transport = SmoothTransport(inner, pacer=Pacer(clock=clock, probe=0), sleep=clock.sleep)

    def body() -> Iterator[bytes]:
        yield b"chunk"

    with httpx2.Client(transport=transport) as client:
        response = client.put(URL, content=body())
    assert (response.status_code, inner.seen) == (503, 1)
    assert "replayed" in response.extensions["smoothclient"]["gave_up"]


def test_reads_a_delay_from_a_json_error_body(clock: FakeClock) -> None:
    """docs/headers.md R15 on httpx2's responses: the body's retry_after shifts the wait."""
    body = b'{"message": "You are being rate limited.", "retry_after": 6.25}'
    error = httpx2.Response(
        429,
        headers={"Content-Type": "application/json", "Content-Length": str(len(body))},
        stream=httpx2.ByteStream(body),
    )
    inner, _ = answers(error, httpx2.Response(200))
    transport = SmoothTransport(inner, pacer=Pacer(clock=clock, probe=0), sleep=clock.sleep)
    with httpx2.Client(transport=transport) as client:
        assert client.get(URL).status_code == 200
    assert 6.25 <= sum(clock.sleeps) <= 6.35


@pytest.mark.anyio
async def test_async_attempt_is_cut_as_a_whole_at_the_deadline() -> None:
    async def slow(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep(5)
        return httpx2.Response(200)  # pragma: no cover - cut before

    transport = AsyncSmoothTransport(
        httpx2.MockTransport(slow), policy=RetryPolicy(timeout=0.05, attempts=3)
    )
    async with httpx2.AsyncClient(transport=transport) as client:
        with anyio.fail_after(2), pytest.raises(httpx2.ReadTimeout, match="deadline"):
            await client.get(URL)


def test_import_smoothclient_imports_no_httpx2_and_a_missing_one_names_the_extra() -> None:
    code = (
        "import sys, smoothclient; print('httpx2' in sys.modules)\n"
        "sys.modules['httpx2'] = None\n"
        "try:\n"
        "    import smoothclient.httpx2\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, _, rest = out.stdout.partition("\n")
    assert first == "False"
    assert "pip install 'smoothclient[httpx2]'" in rest


def test_sdk_and_cut_attempts_are_checked_at_construction() -> None:
    with pytest.raises(TypeError, match="sdk must be True or False"):
        SmoothTransport(sdk="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cut_attempts must be True, False or None"):
        RetryPolicy(cut_attempts="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cost must be a function"):
        SmoothTransport(cost=5)  # type: ignore[arg-type]


def test_a_give_up_in_sdk_mode_tells_the_sdk_not_to_retry(clock: FakeClock) -> None:
    """x-should-retry: false on a response given up on; nothing added to a success."""
    inner, seen = answers(httpx2.Response(503))
    transport = SmoothTransport(
        inner,
        policy=RetryPolicy(attempts=2),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
        sdk=True,
    )
    with httpx2.Client(transport=transport) as client:
        response = client.get(URL)
    assert (response.status_code, len(seen)) == (503, 2)
    assert response.headers["x-should-retry"] == "false"
    ok, _ = answers(httpx2.Response(200))
    with httpx2.Client(transport=SmoothTransport(ok, sdk=True)) as client:
        assert "x-should-retry" not in client.get(URL).headers


def test_a_refusal_in_sdk_mode_is_a_429_on_both_clients(clock: FakeClock) -> None:
    """Never sent: the SDK gets a 429 with Retry-After and the record, sync and async."""
    sync = SmoothTransport(
        httpx2.MockTransport(lambda r: httpx2.Response(200)),
        policy=RetryPolicy(max_retry_after=5),
        pacer=closed_pacer(clock),
        sdk=True,
    )
    with httpx2.Client(transport=sync) as client:
        response = client.get(URL)
    assert (response.status_code, response.headers["x-should-retry"]) == (429, "false")
    assert float(response.headers["retry-after"]) == pytest.approx(100.0)
    assert response.json()["error"]["type"] == "rate_limit_error"

    async def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200)  # pragma: no cover - never sent

    async def main() -> httpx2.Response:
        transport = AsyncSmoothTransport(
            httpx2.MockTransport(handler),
            policy=RetryPolicy(max_retry_after=5),
            pacer=closed_pacer(clock),
            sdk=True,
        )
        async with httpx2.AsyncClient(transport=transport) as client:
            answer = await client.get(URL)
            await answer.aread()
            return answer

    answered = anyio.run(main)
    assert answered.status_code == 429
    assert answered.extensions["smoothclient"]["attempts"] == 0
