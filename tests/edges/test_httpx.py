"""httpx transports with respx mocks, a fake clock and a seeded RNG (no real sleeping)."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest
import respx

from smoothclient import (
    AsyncSmoothTransport,
    Pacer,
    RetryBudget,
    RetryPolicy,
    SmoothTransport,
    record_of,
    testing,
)
from smoothclient.edges.httpx_transport import RateLimitedError
from smoothclient.edges.requests_adapter import _origin as requests_origin
from smoothclient.events import RetryEvent
from smoothclient.testing import FakeClock

URL = "https://api.test/items"


def make(clock: FakeClock, policy: RetryPolicy | None = None, **kw: object) -> httpx.Client:
    pacer = Pacer(clock=clock, probe=0)
    transport = SmoothTransport(
        policy=policy,
        pacer=pacer,
        sleep=clock.sleep,
        rng=random.Random(0),
        **kw,  # type: ignore[arg-type]
    )
    return httpx.Client(transport=transport)


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        yield router


def test_retries_then_succeeds(mock: respx.MockRouter, clock: FakeClock) -> None:
    mock.get(URL).side_effect = [httpx.Response(503), httpx.Response(502), httpx.Response(200)]
    with make(clock) as client:
        r = client.get(URL)
    assert r.status_code == 200
    record = r.extensions["smoothclient"]
    assert record["attempts"] == 3
    assert record["reasons"] == ["status 503", "status 502"]
    assert record["gave_up"] is None
    assert len(clock.sleeps) == 2
    assert clock.sleeps[0] <= 0.1
    assert clock.sleeps[1] <= 0.2


def test_gives_up_with_the_last_response(mock: respx.MockRouter, clock: FakeClock) -> None:
    mock.get(URL).side_effect = [httpx.Response(503)] * 3
    with make(clock, RetryPolicy(attempts=3)) as client:
        r = client.get(URL)
    assert r.status_code == 503
    assert r.extensions["smoothclient"]["attempts"] == 3
    assert "3 attempts" in r.extensions["smoothclient"]["gave_up"]


def test_retry_after_is_honoured(mock: respx.MockRouter, clock: FakeClock) -> None:
    mock.get(URL).side_effect = [
        httpx.Response(429, headers={"Retry-After": "7"}),
        httpx.Response(200),
    ]
    with make(clock) as client:
        r = client.get(URL)
    assert r.status_code == 200
    assert sum(clock.sleeps) >= 7.0
    assert sum(clock.sleeps) <= 7.1 + 1e-9


def test_long_retry_after_returns_at_once(mock: respx.MockRouter, clock: FakeClock) -> None:
    """A server asking for an hour gets its 429 back immediately, not a sleep."""
    mock.get(URL).side_effect = [httpx.Response(429, headers={"Retry-After": "3600"})]
    with make(clock) as client:
        r = client.get(URL)
    assert r.status_code == 429
    assert clock.sleeps == []
    assert "max_retry_after" in r.extensions["smoothclient"]["gave_up"]


def test_deadline_caps_every_wait(mock: respx.MockRouter, clock: FakeClock) -> None:
    mock.get(URL).side_effect = [httpx.Response(503, headers={"Retry-After": "3"})] * 10
    with make(clock, RetryPolicy(attempts=10, timeout=5.0)) as client:
        r = client.get(URL)
    assert r.status_code == 503
    assert sum(clock.sleeps) <= 5.0
    assert "deadline" in r.extensions["smoothclient"]["gave_up"]


def test_post_not_retried_after_it_may_have_been_sent(
    mock: respx.MockRouter, clock: FakeClock
) -> None:
    route = mock.post(URL)
    route.side_effect = [httpx.ReadTimeout("slow"), httpx.Response(200)]
    with make(clock) as client, pytest.raises(httpx.ReadTimeout) as info:
        client.post(URL, content=b"x")
    assert route.call_count == 1
    assert info.value.smoothclient["attempts"] == 1  # type: ignore[attr-defined]
    assert any("smoothclient: 1 attempt" in n for n in info.value.__notes__)


def test_post_retried_when_connect_failed(mock: respx.MockRouter, clock: FakeClock) -> None:
    route = mock.post(URL)
    route.side_effect = [httpx.ConnectError("refused"), httpx.Response(201)]
    with make(clock) as client:
        assert client.post(URL, content=b"x").status_code == 201
    assert route.call_count == 2


def test_post_with_idempotency_key(mock: respx.MockRouter, clock: FakeClock) -> None:
    route = mock.post(URL)
    route.side_effect = [httpx.Response(503), httpx.Response(201)]
    with make(clock) as client:
        r = client.post(URL, content=b"x", headers={"Idempotency-Key": "abc"})
    assert r.status_code == 201


def test_streaming_body_is_never_replayed(mock: respx.MockRouter, clock: FakeClock) -> None:
    route = mock.put(URL)
    route.side_effect = [httpx.Response(503), httpx.Response(200)]

    def body() -> Iterator[bytes]:
        yield b"chunk"

    with make(clock) as client:
        r = client.put(URL, content=body())
    assert r.status_code == 503
    assert route.call_count == 1
    assert "replayed" in r.extensions["smoothclient"]["gave_up"]


def test_transport_errors_retried_then_raised(mock: respx.MockRouter, clock: FakeClock) -> None:
    mock.get(URL).side_effect = httpx.ConnectError("refused")
    with make(clock, RetryPolicy(attempts=3)) as client, pytest.raises(httpx.ConnectError):
        client.get(URL)
    assert len(clock.sleeps) == 2


def test_other_exceptions_propagate(mock: respx.MockRouter, clock: FakeClock) -> None:
    mock.get(URL).side_effect = RuntimeError("bug")
    with make(clock) as client, pytest.raises(RuntimeError):
        client.get(URL)


def test_on_retry_hook_and_log_without_secrets(
    mock: respx.MockRouter, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[RetryEvent] = []
    mock.get(URL).side_effect = [httpx.Response(503), httpx.Response(200)]
    policy = RetryPolicy(on_retry=events.append)
    with caplog.at_level(logging.DEBUG, logger="smoothclient"), make(clock, policy) as client:
        client.get(
            "https://user:pw@api.test/items?token=s3cret",
            headers={"Authorization": "Bearer s3cret"},
        )
    assert [(e.origin, e.attempt, e.status, e.reason) for e in events] == [
        ("https://api.test:443", 1, 503, "status 503")
    ]
    assert "GET https://api.test:443/items: attempt 1: status 503" in caplog.text
    assert "s3cret" not in caplog.text
    assert "pw" not in caplog.text


def test_testing_mode_never_waits(mock: respx.MockRouter, clock: FakeClock) -> None:
    route = mock.get(URL)
    route.side_effect = [httpx.Response(429, headers={"Retry-After": "30"})] * 5
    with testing.testing_mode(attempts=2), make(clock) as client:
        r = client.get(URL)
    assert r.status_code == 429
    assert route.call_count == 2
    assert clock.sleeps == [0.0]


def test_failed_response_is_closed_before_waiting(clock: FakeClock) -> None:
    responses: list[httpx.Response] = []
    closed_when_sleeping: list[bool] = []

    def handler(request: httpx.Request) -> httpx.Response:
        # a streamed body stays open until read or closed (a content= body is read at once)
        status = 503 if not responses else 200
        responses.append(httpx.Response(status, stream=SyncBody(b"busy")))
        return responses[-1]

    def sleep(seconds: float) -> None:
        closed_when_sleeping.append(responses[0].is_closed)
        clock.sleep(seconds)

    transport = SmoothTransport(
        httpx.MockTransport(handler), pacer=Pacer(clock=clock, probe=0), sleep=sleep
    )
    with httpx.Client(transport=transport) as client:
        assert client.get(URL).status_code == 200
    assert closed_when_sleeping == [True]


class HookFailed(Exception):
    pass


def failing_hook(event: RetryEvent) -> None:
    raise HookFailed(event.reason)


def test_a_raising_on_retry_hook_leaks_no_connection(clock: FakeClock) -> None:
    """The hook's error reaches the caller, and the failed response is closed all the same."""
    responses: list[httpx.Response] = []

    def handler(request: httpx.Request) -> httpx.Response:
        responses.append(httpx.Response(503, stream=SyncBody(b"busy")))
        return responses[-1]

    transport = SmoothTransport(
        httpx.MockTransport(handler),
        policy=RetryPolicy(on_retry=failing_hook),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as client, pytest.raises(HookFailed):
        client.get(URL)
    assert len(responses) == 1
    assert responses[0].is_closed


@pytest.mark.anyio
async def test_async_raising_on_retry_hook_leaks_no_connection(clock: FakeClock) -> None:
    responses: list[httpx.Response] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        responses.append(httpx.Response(503, stream=AsyncBody(b"busy")))
        return responses[-1]

    transport = AsyncSmoothTransport(
        httpx.MockTransport(handler),
        policy=RetryPolicy(on_retry=failing_hook),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.async_sleep,
    )
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(HookFailed):
            await client.get(URL)
    assert responses[0].is_closed


def test_shared_pacer_gates_other_transports(clock: FakeClock) -> None:
    """A 503's Retry-After seen by one transport holds back another sharing the pacer."""
    pacer = Pacer(clock=clock, probe=0)
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(clock())
        if len(calls) == 1:
            return httpx.Response(503, headers={"Retry-After": "2"})
        return httpx.Response(200)

    a = SmoothTransport(
        httpx.MockTransport(handler), pacer=pacer, sleep=clock.sleep, policy=RetryPolicy(attempts=1)
    )
    b = SmoothTransport(httpx.MockTransport(handler), pacer=pacer, sleep=clock.sleep)
    with httpx.Client(transport=a) as ca, httpx.Client(transport=b) as cb:
        assert ca.get(URL).status_code == 503
        assert cb.get(URL).status_code == 200
    assert calls[1] - calls[0] >= 2.0


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://API.Test/items?q=1", "https://api.test:443"),
        ("http://user:secret@api.test:8080/", "http://api.test:8080"),
        ("https://bücher.example/x", "https://xn--bcher-kva.example:443"),
        ("https://[::1]:9000/", "https://[::1]:9000"),
        ("http://127.0.0.1/", "http://127.0.0.1:80"),
    ],
)
def test_origin_keys(url: str, origin: str) -> None:
    """Origins are keyed by scheme, ASCII host and port: no credentials, path or query."""
    transport = SmoothTransport(httpx.MockTransport(lambda r: httpx.Response(200)))
    assert transport._origin(httpx.Request("GET", url)) == origin
    assert requests_origin(url) == origin  # one Pacer can serve httpx and requests alike


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="policy"):
        SmoothTransport(policy=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pacer"):
        AsyncSmoothTransport(pacer="p")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_async_retries(clock: FakeClock) -> None:
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(503 if calls < 3 else 200, headers={"Retry-After": "1"})

    transport = AsyncSmoothTransport(
        httpx.MockTransport(handler),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.async_sleep,
        rng=random.Random(1),
    )
    async with httpx.AsyncClient(transport=transport) as client:
        r = await client.get(URL)
    assert r.status_code == 200
    assert r.extensions["smoothclient"]["attempts"] == 3
    assert sum(clock.sleeps) >= 2.0  # two retries, each at least Retry-After


@pytest.mark.anyio
async def test_async_errors_raise(clock: FakeClock) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("reset")

    transport = AsyncSmoothTransport(
        httpx.MockTransport(handler),
        policy=RetryPolicy(attempts=2),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.async_sleep,
    )
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ReadError):
            await client.get(URL)
    assert len(clock.sleeps) == 1


def test_default_inner_transports_and_close() -> None:
    sync = SmoothTransport()
    assert isinstance(sync.transport, httpx.HTTPTransport)
    sync.close()
    assert isinstance(AsyncSmoothTransport().transport, httpx.AsyncHTTPTransport)


# --------------------------------------------------------------------------- the fast lane


@pytest.mark.parametrize("successes", [0, 4])
def test_fast_lane_successes_count_toward_the_retry_budget(
    clock: FakeClock, successes: int
) -> None:
    """Calls that succeed at once still earn retries: the budget is a share of all traffic."""
    statuses = iter([200] * successes + [503, 200])
    policy = RetryPolicy(budget=RetryBudget(ratio=0.5, min_per_second=0.0))
    transport = SmoothTransport(
        httpx.MockTransport(lambda request: httpx.Response(next(statuses))),
        policy=policy,
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
        rng=random.Random(0),
    )
    with httpx.Client(transport=transport) as client:
        for _ in range(successes):
            assert client.get(URL).status_code == 200
        last = client.get(URL)
    # one retry needs 2 attempts on record: only the earlier successes can provide them
    assert last.status_code == (200 if successes else 503)


def test_fast_lane_learns_from_hints_on_successes(clock: FakeClock) -> None:
    """A success with quota headers on the fast lane still teaches the pacer the rate."""
    quota = {"RateLimit": '"d";r=50;t=10', "RateLimit-Policy": '"d";q=100;w=10'}
    pacer = Pacer(clock=clock, probe=0)
    transport = SmoothTransport(
        httpx.MockTransport(lambda request: httpx.Response(200, headers=quota)),
        pacer=pacer,
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as client:
        for _ in range(3):
            r = client.get(URL)
            assert r.extensions["smoothclient"]["attempts"] == 1
    view = pacer.scopes("https://api.test:443")["d"]  # the policy named "d" is a scope
    assert view.rate == pytest.approx(10.0)
    assert (view.remaining, view.limit) == (48, 100)  # 50 said, two sent since
    assert (view.waiting, view.in_flight) == (0, 0)
    origin = pacer.view("https://api.test:443")
    assert (origin.rate, origin.waiting, origin.in_flight) == (None, 0, 0)
    assert clock.sleeps == []  # 50 left: nobody waited


def test_fast_lane_keeps_in_flight_exact(mock: respx.MockRouter, clock: FakeClock) -> None:
    """Errors and retries after a fast-lane first attempt leave no request counted."""
    quota = {"RateLimit": '"d";r=50;t=10', "RateLimit-Policy": '"d";q=100;w=10'}
    mock.get(URL).side_effect = [
        httpx.Response(200, headers=quota),  # paced from now on
        httpx.ConnectError("refused"),  # a fast-lane (admitted) attempt fails, then retried
        httpx.Response(200, headers=quota),
        RuntimeError("bug"),  # not retryable: raised from the fast lane
        httpx.Response(503),  # an error status goes on into the flow
        httpx.Response(200),
    ]
    with make(clock) as client:
        assert client.get(URL).status_code == 200
        r = client.get(URL)
        assert r.extensions["smoothclient"]["attempts"] == 2
        with pytest.raises(RuntimeError):
            client.get(URL)
        r = client.get(URL)
        assert r.extensions["smoothclient"]["reasons"] == ["status 503"]
        pacer = client._transport.pacer  # type: ignore[attr-defined]
    view = pacer.view("https://api.test:443")
    assert (view.waiting, view.in_flight) == (0, 0)


# ----------------------------------------------------------- body hints (docs/headers.md R15)


class SyncBody(httpx.SyncByteStream):
    """A body that arrives over the wire (not read yet), as from a real server."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self.data


class AsyncBody(httpx.AsyncByteStream):
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


DISCORD = b'{"message": "You are being rate limited.", "retry_after": 6.25, "global": false}'
GOOGLE = (
    b'{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [{"@type": '
    b'"type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "4.5s"}]}}'
)


def json_error(
    status: int, body: bytes, stream: Callable[[bytes], Any], **headers: str
) -> httpx.Response:
    fields = {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers}
    return httpx.Response(status, headers=fields, stream=stream(body))


@pytest.mark.parametrize(
    ("body", "headers", "at_least", "at_most"),
    [
        (DISCORD, {}, 6.25, 6.35),  # only the body says when
        (DISCORD, {"Retry-After": "7"}, 6.25, 6.35),  # the body is the precise one
        (GOOGLE, {}, 4.5, 4.6),
        (b'{"retry_after": 1e999}', {"Retry-After": "2"}, 2.0, 2.1),  # garbage: the header
    ],
)
def test_sync_reads_delays_from_json_error_bodies(
    clock: FakeClock, body: bytes, headers: dict[str, str], at_least: float, at_most: float
) -> None:
    answers = iter([json_error(429, body, SyncBody, **headers), httpx.Response(200)])
    transport = SmoothTransport(
        httpx.MockTransport(lambda request: next(answers)),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as client:
        assert client.get(URL).status_code == 200
    assert at_least <= sum(clock.sleeps) <= at_most + 1e-9


def test_a_forbidden_with_a_retry_info_body_is_retried(clock: FakeClock) -> None:
    """Google Drive answers rate limits with 403 and says when only in the JSON body."""
    answers = iter([json_error(403, GOOGLE, SyncBody), httpx.Response(200)])
    transport = SmoothTransport(
        httpx.MockTransport(lambda request: next(answers)),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as client:
        assert client.get(URL).status_code == 200
    assert 4.5 <= sum(clock.sleeps) <= 4.6


@pytest.mark.parametrize("paced", [False, True])
def test_errors_no_policy_retries_end_on_the_fast_lane(clock: FakeClock, paced: bool) -> None:
    """A 404 is returned as the flow would return it: one attempt, no wait, counts exact."""
    quota = {"RateLimit": '"d";r=50;t=10', "RateLimit-Policy": '"d";q=100;w=10'}
    statuses = iter([200, 404, 422])
    headers = quota if paced else {}
    pacer = Pacer(clock=clock, probe=0)
    transport = SmoothTransport(
        httpx.MockTransport(lambda request: httpx.Response(next(statuses), headers=headers)),
        pacer=pacer,
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as client:
        client.get(URL)
        for status in (404, 422):
            response = client.get(URL)
            assert response.status_code == status
            assert response.extensions["smoothclient"] == {
                "attempts": 1,
                "waits": [],
                "total_wait": 0.0,
                "reasons": [],
                "gave_up": None,
                "status": status,
                "retries": [],
                "pacer_waits": [],
                "held_for_outage": 0.0,
                "gave_up_kind": None,
            }
    assert clock.sleeps == []
    view = pacer.view("https://api.test:443")
    assert (view.waiting, view.in_flight) == (0, 0)


def test_an_error_the_server_says_to_retry_still_is(clock: FakeClock) -> None:
    answers = iter([httpx.Response(409, headers={"x-should-retry": "true"}), httpx.Response(200)])
    transport = SmoothTransport(
        httpx.MockTransport(lambda request: next(answers)),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as client:
        response = client.get(URL)
    assert response.status_code == 200
    assert response.extensions["smoothclient"]["reasons"] == ["status 409"]


@pytest.mark.anyio
async def test_async_reads_delays_from_json_error_bodies(clock: FakeClock) -> None:
    answers = iter([json_error(429, DISCORD, AsyncBody), json_error(503, GOOGLE, AsyncBody)])

    async def handler(request: httpx.Request) -> httpx.Response:
        return next(answers, httpx.Response(200))

    transport = AsyncSmoothTransport(
        httpx.MockTransport(handler),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.async_sleep,
    )
    async with httpx.AsyncClient(transport=transport) as client:
        r = await client.get(URL)
    assert r.status_code == 200
    assert r.extensions["smoothclient"]["attempts"] == 3
    waits = r.extensions["smoothclient"]["waits"]  # no rate: each backoff, slept whole
    assert 6.25 <= waits[0] <= 6.25 + 0.1  # shifted by the body, then 0.1 s of jitter
    assert 4.5 <= waits[1] <= 4.5 + 0.2 + 1e-9  # the second window is twice as wide


def test_body_of_the_returned_error_stays_readable(clock: FakeClock) -> None:
    """Reading the body for hints does not take it from the caller."""
    transport = SmoothTransport(
        httpx.MockTransport(lambda request: json_error(429, DISCORD, SyncBody)),
        policy=RetryPolicy(attempts=1),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as client:
        r = client.get(URL)
    assert r.status_code == 429
    assert r.json()["retry_after"] == 6.25


@pytest.mark.anyio
async def test_cancelled_while_reading_an_error_body_closes_it(clock: FakeClock) -> None:
    closed: list[bool] = []

    class Stalled(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            await anyio.sleep_forever()
            yield b""  # pragma: no cover - never reached

        async def aclose(self) -> None:
            closed.append(True)

    async def handler(request: httpx.Request) -> httpx.Response:
        return json_error(429, b"{}" * 10, lambda body: Stalled())

    transport = AsyncSmoothTransport(
        httpx.MockTransport(handler), pacer=Pacer(clock=clock, probe=0), sleep=clock.async_sleep
    )
    async with httpx.AsyncClient(transport=transport) as client:
        with anyio.move_on_after(0.05) as scope:
            await client.get(URL)
    assert scope.cancelled_caught
    assert closed == [True]


@pytest.mark.anyio
async def test_cancelled_while_reading_a_paced_first_error_body_keeps_counts(
    clock: FakeClock,
) -> None:
    """A first attempt admitted on a paced origin and cancelled mid-read is not left in flight."""
    quota = {"RateLimit": '"d";r=50;t=10', "RateLimit-Policy": '"d";q=100;w=10'}

    class Stalled(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            await anyio.sleep_forever()
            yield b""  # pragma: no cover - never reached

    responses = iter(
        [
            httpx.Response(200, headers=quota),  # the origin is paced from now on
            json_error(429, b"{}" * 10, lambda body: Stalled(), **quota),
        ]
    )

    async def handler(request: httpx.Request) -> httpx.Response:
        return next(responses)

    pacer = Pacer(clock=clock, probe=0)
    transport = AsyncSmoothTransport(
        httpx.MockTransport(handler), pacer=pacer, sleep=clock.async_sleep
    )
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(URL)
        with anyio.move_on_after(0.05) as scope:
            await client.get(URL)
    assert scope.cancelled_caught
    view = pacer.view("https://api.test:443")
    assert (view.waiting, view.in_flight) == (0, 0)


@pytest.mark.anyio
async def test_async_attempt_is_cut_as_a_whole_at_the_deadline() -> None:
    """An attempt slower than the deadline, though no single read is: ReadTimeout, one try."""

    async def slow(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(5)
        return httpx.Response(200)  # pragma: no cover - cut before

    policy = RetryPolicy(timeout=0.05, attempts=3)
    transport = AsyncSmoothTransport(httpx.MockTransport(slow), policy=policy)
    async with httpx.AsyncClient(transport=transport) as client:
        with anyio.fail_after(2):  # this test's own guard
            with pytest.raises(httpx.ReadTimeout, match="deadline") as caught:
                await client.get(URL)
    assert caught.value.smoothclient["attempts"] == 1  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_a_timeout_error_of_the_inner_transport_is_not_taken_for_the_deadline() -> None:
    async def failing(request: httpx.Request) -> httpx.Response:
        raise TimeoutError("the inner transport's own")

    transport = AsyncSmoothTransport(httpx.MockTransport(failing), policy=RetryPolicy(timeout=5))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(TimeoutError, match="own"):
            await client.get(URL)


def test_a_retry_after_beyond_a_year_is_answered_at_once() -> None:
    """The server asks for more than max_retry_after: its answer comes back, not a quick retry."""
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(503, headers={"Retry-After": str(400 * 86400)})

    transport = SmoothTransport(httpx.MockTransport(handler), pacer=Pacer(probe=0))
    with httpx.Client(transport=transport) as client:
        response = client.get("https://far.test/x")
    assert response.status_code == 503
    assert len(calls) == 1
    record = response.extensions["smoothclient"]
    assert "over max_retry_after" in record["gave_up"]


def test_a_pool_timeout_is_retried_without_budget_or_outage() -> None:
    """The client's own pool had no connection free: nothing reached the server."""
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) <= 20:
            raise httpx.PoolTimeout("no connection free", request=request)
        return httpx.Response(200)

    pacer = Pacer(probe=0)
    policy = RetryPolicy(
        attempts=30,
        wait_initial=0.0,
        wait_max=0.0,
        budget=RetryBudget(ratio=0.0, min_per_second=0.0),
    )
    transport = SmoothTransport(httpx.MockTransport(handler), policy=policy, pacer=pacer)
    with httpx.Client(transport=transport) as client:
        response = client.get("https://pool.test/x")
    assert response.status_code == 200  # a budget of nothing spent nothing on them
    assert pacer.view("https://pool.test:443").down_for is None  # no outage's evidence


def test_a_redirect_to_a_503_is_retried_by_a_transport_that_never_reads_the_body() -> None:
    """httpx builds a redirect's request with an unread body of bytes: it can be sent again."""
    answers = iter([302, 503, 200])
    sent: list[str] = []

    class Raw(httpx.BaseTransport):  # like HTTPTransport: streams the body, never reads it
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(request.url.path)
            status = next(answers)
            headers = {"Location": "/b"} if status == 302 else {}
            return httpx.Response(status, headers=headers)

    transport = SmoothTransport(Raw(), policy=RetryPolicy(wait_initial=0.0, wait_max=0.0))
    with httpx.Client(transport=transport, follow_redirects=True) as client:
        response = client.get("https://moved.test/a")
    assert response.status_code == 200
    assert sent == ["/a", "/b", "/b"]


def test_a_call_waiting_for_budget_room_releases_its_failed_response_first(
    clock: FakeClock,
) -> None:
    """
    Held while the call waits, a failed response keeps its connection from the pool.

    200 calls each failing once through a pool of 5 timed out that way once the budget held
    their retries: the attempts that make room for them had no connection to go out on.
    """
    events: list[str] = []

    class Body(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            yield b"busy"

        def close(self) -> None:
            events.append("released")

    def sleep(seconds: float) -> None:
        events.append("slept")
        clock.sleep(seconds)

    def transport(headers: dict[str, str]) -> SmoothTransport:
        return SmoothTransport(
            httpx.MockTransport(
                lambda request: httpx.Response(503, headers=headers, stream=Body())
            ),
            policy=RetryPolicy(timeout=2, budget=RetryBudget(ratio=0.0, min_per_second=0.0)),
            pacer=Pacer(clock=clock, probe=0),
            sleep=sleep,
            rng=random.Random(0),
        )

    with httpx.Client(transport=transport({"Content-Length": "4"})) as client:
        response = client.get(URL)
    assert events[:2] == ["released", "slept"]  # released before the budget's first wait
    assert response.status_code == 503  # handed back whole: its small body was read first
    assert response.content == b"busy"
    record = record_of(response)
    assert record is not None
    assert record.gave_up_kind == "budget"
    with (
        httpx.Client(transport=transport({})) as client,  # a body of unknown length
        pytest.raises(RateLimitedError, match="the retry budget is spent"),
    ):
        client.get(URL)  # (released unread: nothing whole to hand back)
