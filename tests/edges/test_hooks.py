"""The success and give-up hooks, on every way a call ends, through every edge kind."""

from __future__ import annotations

import anyio
import httpx
import pytest

from smoothclient import (
    AsyncSmoothTransport,
    CallEnded,
    Pacer,
    RetryPolicy,
    SmoothTransport,
)
from smoothclient.hints import Hints
from smoothclient.testing import FakeClock

URL = "https://api.test/items"
ORIGIN = "https://api.test:443"


def make(
    clock: FakeClock, answers: list[int | Exception], pacer: Pacer | None = None
) -> tuple[httpx.Client, list[tuple[str, CallEnded]]]:
    seen: list[tuple[str, CallEnded]] = []
    policy = RetryPolicy(
        attempts=2,
        wait_initial=0.01,
        max_retry_after=5,
        on_success=lambda e: seen.append(("success", e)),
        on_give_up=lambda e: seen.append(("give-up", e)),
    )
    sent = iter(answers)

    def handler(request: httpx.Request) -> httpx.Response:
        answer = next(sent)
        if isinstance(answer, Exception):
            raise answer
        return httpx.Response(answer)

    transport = SmoothTransport(
        httpx.MockTransport(handler),
        policy=policy,
        pacer=pacer or Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    return httpx.Client(transport=transport), seen


def test_a_success_on_the_fast_lane_and_after_a_retry(clock: FakeClock) -> None:
    client, seen = make(clock, [200, 503, 201])
    assert client.get(URL).status_code == 200
    assert client.get(URL).status_code == 201
    assert [kind for kind, _ in seen] == ["success", "success"]
    assert seen[1][1].record.attempts == 2
    assert seen[1][1].succeeded
    assert seen[1][1].origin == ORIGIN


def test_give_ups_an_error_status_an_exception_and_a_call_not_sent(clock: FakeClock) -> None:
    client, seen = make(
        clock, [404, 503, 503, httpx.ConnectError("refused"), httpx.ConnectError("x")]
    )
    assert client.get(URL).status_code == 404  # not retried: ends at once
    assert client.get(URL).status_code == 503  # retries spent
    with pytest.raises(httpx.ConnectError):
        client.get(URL)
    assert [kind for kind, _ in seen] == ["give-up"] * 3
    assert [e.status for _, e in seen] == [404, 503, None]
    assert isinstance(seen[2][1].exception, httpx.ConnectError)
    assert seen[2][1].record.attempts == 2
    assert not seen[2][1].succeeded

    pacer = Pacer(clock=clock, probe=0)
    pacer.track(ORIGIN).observe(503, Hints(retry_after=100.0), clock(), counted=False)
    closed, told = make(clock, [200], pacer)
    with pytest.raises(httpx.HTTPError):
        closed.get(URL)
    assert [kind for kind, _ in told] == ["give-up"]
    record = told[0][1].record
    assert record.attempts == 0
    assert record.gave_up is not None
    assert "admits no request for 100 s" in record.gave_up
    assert record.gave_up_kind == "outage"  # its one answer was a failure: down
    assert [seen[0][1].record.gave_up_kind, seen[1][1].record.gave_up_kind] == [None, "attempts"]


def test_hooks_on_the_async_edge(clock: FakeClock) -> None:
    seen: list[CallEnded] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(204)

    async def main() -> None:
        transport = AsyncSmoothTransport(
            httpx.MockTransport(handler),
            policy=RetryPolicy(on_success=seen.append),
            pacer=Pacer(clock=clock, probe=0),
            sleep=clock.async_sleep,
        )
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get(URL)

    anyio.run(main)
    assert [e.status for e in seen] == [204]


def test_a_hook_that_is_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="on_give_up must be callable"):
        RetryPolicy(on_give_up=3)  # type: ignore[arg-type]
