"""
The aiohttp edge (:class:`smoothclient.aiohttp.SmoothMiddleware`) against a real local server.

Each test starts an ``aiohttp.web`` server on a free loopback port that answers from a script,
and runs a session with the middleware on the pacer's fake clock (no real waiting), except
where the deadline is what is tested.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web
from aiohttp.client_reqrep import ConnectionKey

import smoothclient
from smoothclient import (
    CallEnded,
    HttpCache,
    Pacer,
    RateLimited,
    RetryPolicy,
    override_policy,
    record_of,
)
from smoothclient.aiohttp import RateLimitedError, SmoothMiddleware
from smoothclient.edges import aiohttp_middleware
from smoothclient.pacing import ScopeRequest
from smoothclient.testing import FakeClock

T = TypeVar("T")
#: (status, headers, body) per request; the last entry repeats.
Answer = tuple[int, dict[str, str], bytes]
POLICY = RetryPolicy(attempts=3, timeout=60, wait_initial=0.1, wait_max=1.0)


@dataclass
class Script:
    """What the server answers, and what it got: each request's method and body."""

    answers: list[Answer]
    seen: list[tuple[str, bytes]] = field(default_factory=list)
    hold: asyncio.Event | None = None  # answer only once it is set
    delay: float = 0.0  # answer this much later

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append((request.method, body))
        if self.hold is not None:
            await self.hold.wait()
        await asyncio.sleep(self.delay)
        status, headers, content = self.answers[min(len(self.seen), len(self.answers)) - 1]
        return web.Response(status=status, headers=headers, body=content)


@asynccontextmanager
async def serving(script: Script) -> AsyncIterator[str]:
    """The script served on a free loopback port: its base URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", script.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        if script.hold is not None:
            script.hold.set()
        await runner.cleanup()


def middleware(clock: FakeClock, policy: RetryPolicy = POLICY, **kwargs: Any) -> SmoothMiddleware:
    """The edge on the fake clock: its waits are recorded, not slept."""
    return SmoothMiddleware(
        policy=policy, pacer=Pacer(clock=clock), sleep=clock.async_sleep, **kwargs
    )


def run(main: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(main())  # type: ignore[arg-type]


async def fetch(
    url: str, edge: SmoothMiddleware, method: str = "GET", **kwargs: Any
) -> tuple[int, bytes, smoothclient.CallRecord | None]:
    """One request through a session with ``edge``: the status, the body, the record."""
    async with (
        aiohttp.ClientSession(middlewares=(edge,)) as session,
        session.request(method, url, **kwargs) as response,
    ):
        return response.status, await response.read(), record_of(response)


@pytest.mark.e2e
def test_a_503_is_retried_and_the_record_says_so(clock: FakeClock) -> None:
    """503 then 200: two requests reach the server, one backoff wait, the record typed."""
    script = Script([(503, {}, b""), (200, {}, b"ok")])

    async def main() -> None:
        async with serving(script) as url:
            status, body, record = await fetch(url + "/items", middleware(clock))
        assert (status, body) == (200, b"ok")
        assert record is not None
        assert (record.attempts, record.reasons, record.gave_up) == (2, ["status 503"], None)
        assert 0 <= record.total_wait <= 0.1

    run(main)
    assert len(script.seen) == 2


THROTTLED = json.dumps({"message": "slow down", "retry_after": 3.5}).encode()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("throttle", "delay"),
    [
        ((429, {"Retry-After": "2"}, b""), 2.0),
        ((429, {"Content-Type": "application/json"}, THROTTLED), 3.5),  # docs/headers.md R15
    ],
    ids=["retry-after-header", "json-body"],
)
def test_the_server_delay_shifts_the_wait(clock: FakeClock, throttle: Answer, delay: float) -> None:
    """A 429 saying how long to wait (a header, or a JSON body alone) is retried no earlier."""
    script = Script([throttle, (200, {}, b"ok")])

    async def main() -> None:
        async with serving(script) as url:
            status, _, record = await fetch(url, middleware(clock))
        assert status == 200
        assert record is not None
        assert record.total_wait >= delay

    run(main)
    assert len(script.seen) == 2


@pytest.mark.e2e
def test_giving_up_returns_the_last_response_readable_with_its_record(clock: FakeClock) -> None:
    """503s all the way: the third 503 comes back, its JSON body still readable by the caller."""
    error = json.dumps({"error": "busy"}).encode()
    script = Script([(503, {"Content-Type": "application/json"}, error)])
    ended: list[CallEnded] = []

    async def main() -> None:
        edge = middleware(clock, POLICY.replace(on_give_up=ended.append))
        async with serving(script) as url:
            status, body, record = await fetch(url, edge)
        assert (status, body) == (503, error)
        assert record is not None
        assert record.attempts == 3
        assert record.gave_up is not None
        assert "3 attempts used" in record.gave_up

    run(main)
    assert len(script.seen) == 3
    assert [e.status for e in ended] == [503]


@pytest.mark.e2e
def test_override_policy_changes_calls_of_an_edge_that_takes_it(clock: FakeClock) -> None:
    """Inside override_policy(attempts=2): 2 attempts; an edge that does not opt in keeps 3."""
    script = Script([(503, {}, b"")])

    async def main() -> list[int]:
        taking, keeping = middleware(clock, overrides=True), middleware(clock)
        attempts = []
        async with serving(script) as url:
            with override_policy(attempts=2):
                for edge in (taking, keeping):
                    record = (await fetch(url, edge))[2]
                    assert record is not None
                    attempts.append(record.attempts)
        return attempts

    assert run(main) == [2, 3]


@pytest.mark.e2e
def test_a_post_is_not_retried_after_a_503(clock: FakeClock) -> None:
    """A POST that got a 503 may have had effects: not sent again."""
    script = Script([(503, {}, b""), (200, {}, b"")])

    async def main() -> None:
        async with serving(script) as url:
            status, _, record = await fetch(url, middleware(clock), "POST", data=b"x")
        assert status == 503
        assert record is not None
        assert "not idempotent" in (record.gave_up or "")

    run(main)
    assert len(script.seen) == 1


@pytest.mark.e2e
def test_a_refusal_by_the_pacer_is_an_aiohttp_client_error(clock: FakeClock) -> None:
    """
    An origin closed for 100 s (a 503's Retry-After beyond max_retry_after): the next call
    is not sent and raises RateLimitedError, both smoothclient's RateLimited and aiohttp's.
    """
    script = Script([(503, {"Retry-After": "100"}, b"")])
    policy = POLICY.replace(max_retry_after=5)

    async def main() -> None:
        edge = middleware(clock, policy)
        async with serving(script) as url:
            status, _, _ = await fetch(url, edge)  # the 503 is returned: 100 s is too long
            assert status == 503
            with pytest.raises(aiohttp.ClientError) as caught:
                await fetch(url, edge)
        assert isinstance(caught.value, RateLimitedError)
        assert isinstance(caught.value, RateLimited)
        assert caught.value.retry_after == pytest.approx(100.0, abs=1.0)
        assert str(caught.value.request_info.url) == url
        record = record_of(caught.value)
        assert record is not None
        assert record.attempts == 0

    run(main)
    assert len(script.seen) == 1
    assert clock.sleeps == []


def free_port() -> int:
    """A loopback port nothing listens on (bound and let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.e2e
def test_a_refused_connection_is_a_connect_error_retried_for_any_method(clock: FakeClock) -> None:
    """Nothing listens: a POST is retried (it was never sent), then aiohttp's error is raised."""
    retries: list[str] = []
    edge = middleware(clock, POLICY.replace(on_retry=lambda event: retries.append(event.reason)))

    async def main() -> None:
        with pytest.raises(aiohttp.ClientConnectorError) as caught:
            await fetch(f"http://127.0.0.1:{free_port()}/", edge, "POST", data=b"x")
        record = record_of(caught.value)
        assert record is not None
        assert record.attempts == 3

    run(main)
    assert retries == ["connect error", "connect error"]


@pytest.mark.e2e
def test_a_closed_connection_is_retried_and_aiohttp_does_not_start_the_call_over(
    clock: FakeClock,
) -> None:
    """
    A server that closes every connection unanswered: 3 attempts, then aiohttp's error.

    aiohttp sends an idempotent request once more after that error, middlewares and all: the
    call already spent its attempts, so that resend is not sent (3 requests, not 6).  The next
    call of the same task is a call of its own, with its own attempts.
    """
    accepted = 0

    async def close_unanswered(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        await reader.readuntil(b"\r\n\r\n")
        accepted += 1
        writer.close()

    async def main() -> list[int]:
        server = await asyncio.start_server(close_unanswered, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
        counts = []
        async with server:
            for _ in range(2):
                with pytest.raises(aiohttp.ServerDisconnectedError) as caught:
                    await fetch(url, middleware(clock))
                record = record_of(caught.value)
                assert record is not None
                assert record.reasons == ["protocol error", "protocol error"]
                counts.append(accepted)
        return counts

    assert run(main) == [3, 6]


@pytest.mark.e2e
def test_a_redirect_chain_is_one_call_with_one_deadline(clock: FakeClock) -> None:
    """
    aiohttp follows redirects outside the middleware; the hops still share the deadline.

    Ten hops, each a 503 (Retry-After: 1) before its redirect: under timeout=3, the chain
    ends with a 503 about 3 s in, not ten seconds of waits later.
    """
    tries: dict[int, int] = {}

    async def hop(request: web.Request) -> web.Response:
        number = int(request.match_info["n"])
        tries[number] = tries.get(number, 0) + 1
        if tries[number] == 1:
            return web.Response(status=503, headers={"Retry-After": "1"})
        if number == 10:
            return web.Response(text="arrived")
        raise web.HTTPFound(f"/hop/{number + 1}")

    async def main() -> tuple[int, smoothclient.CallRecord | None]:
        app = web.Application()
        app.router.add_get("/hop/{n}", hop)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}/hop/1"
            edge = middleware(clock, RetryPolicy(attempts=5, timeout=3, max_retry_after=None))
            status, _, record = await fetch(url, edge)
        finally:
            await runner.cleanup()
        return status, record

    status, record = run(main)
    assert status == 503
    assert record is not None
    assert record.gave_up is not None
    assert sum(clock.sleeps) <= 3.0
    assert 2 <= len(tries) < 10


@pytest.mark.e2e
def test_the_deadline_cuts_an_attempt_that_hangs() -> None:
    """A server that never answers: the attempt ends at the policy's deadline, a timeout."""
    script = Script([(200, {}, b"")])
    policy = RetryPolicy(attempts=5, timeout=0.3, wait_initial=0.01, wait_max=0.02)

    async def main() -> None:
        script.hold = asyncio.Event()  # made on this loop
        edge = SmoothMiddleware(policy=policy)
        started = asyncio.get_running_loop().time()
        async with serving(script) as url:
            with pytest.raises(aiohttp.ServerTimeoutError) as caught:
                await fetch(url, edge)
        assert asyncio.get_running_loop().time() - started < 1.0
        assert "deadline" in str(caught.value)
        record = record_of(caught.value)
        assert record is not None
        assert record.attempts == 1

    run(main)


@pytest.mark.e2e
def test_an_attempt_the_policy_does_not_cut_runs_past_the_deadline() -> None:
    """cut_attempts=False: a slow answer (0.4 s) under timeout=0.1 still comes back, whole."""
    script = Script([(200, {}, b"slow")], delay=0.4)
    policy = RetryPolicy(timeout=0.1, cut_attempts=False)

    async def main() -> tuple[int, bytes]:
        async with serving(script) as url:
            status, body, _ = await fetch(url, SmoothMiddleware(policy=policy))
        return status, body

    assert run(main) == (200, b"slow")


@pytest.mark.e2e
def test_a_scope_function_keeps_two_models_quotas_apart(clock: FakeClock) -> None:
    """
    The edge's ``scope=`` sees aiohttp's request: one model's spent quota holds only it.

    Each model may make 3 requests per 20 s (on the fake clock), said in unnamed
    x-ratelimit-*-requests fields, so they belong to the caller's scope.
    """
    began = clock()
    used = {"small": 0, "large": 0}

    async def model_call(request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if clock() >= began + 20:
            used[name] = 0
        used[name] += 1
        headers = {
            "x-ratelimit-limit-requests": "3",
            "x-ratelimit-remaining-requests": str(max(0, 3 - used[name])),
            "x-ratelimit-reset-requests": f"{began + 20 - clock():.0f}s",
        }
        return web.Response(status=200 if used[name] <= 3 else 429, headers=headers)

    def model(request: ScopeRequest) -> str:
        return request.path.rsplit("/", 1)[1]

    async def main() -> tuple[list[int], float, float]:
        app = web.Application()
        app.router.add_get("/v1/models/{model}", model_call)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/models/"
        edge = middleware(clock, scope=model)
        statuses = []
        try:
            for _ in range(3):
                statuses.append((await fetch(base + "small", edge))[0])
            statuses.append((await fetch(base + "large", edge))[0])
            large_waited = sum(clock.sleeps)
            statuses.append((await fetch(base + "small", edge))[0])
        finally:
            await runner.cleanup()
        return statuses, large_waited, sum(clock.sleeps)

    statuses, large_waited, small_waited = run(main)
    assert statuses == [200] * 5
    assert large_waited == 0.0
    assert small_waited >= 15


@pytest.mark.e2e
def test_a_streamed_success_comes_back_before_its_body_is_sent() -> None:
    """The response is handed over at its headers: its body is the caller's to stream."""

    async def main() -> bytes:
        go_on = asyncio.Event()

        async def stream(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(b"first ")
            await go_on.wait()  # the rest only once the caller holds the response
            await response.write(b"rest")
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_get("/", stream)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
        try:
            async with (
                asyncio.timeout(1.0),
                aiohttp.ClientSession(middlewares=(SmoothMiddleware(),)) as session,
                session.get(url) as response,
            ):
                assert response.status == 200
                go_on.set()
                return await response.read()
        finally:
            go_on.set()
            await runner.cleanup()

    assert run(main) == b"first rest"


@pytest.mark.e2e
def test_the_sessions_total_timeout_ends_the_call_waits_and_all() -> None:
    """
    503s under a request total of 0.3 s: asyncio's TimeoutError, long before 50 attempts.

    The connection is opened (and the server warmed) by a first call outside the timed one, so
    a loaded machine's slow first connect does not eat the 0.3 s; the call ends at its total
    wherever that falls: in a wait, or inside an attempt (where aiohttp's read turns the
    cancellation into a TimeoutError that used to be retried, the call going on for seconds).
    """
    script = Script([(200, {}, b"warm"), (503, {}, b"")])
    policy = RetryPolicy(attempts=50, wait_initial=0.05, wait_max=0.05)

    async def main() -> float:
        loop = asyncio.get_running_loop()
        async with (
            serving(script) as url,
            aiohttp.ClientSession(middlewares=(SmoothMiddleware(policy=policy),)) as session,
        ):
            async with session.get(url) as response:
                assert await response.read() == b"warm"
            started = loop.time()
            with pytest.raises(TimeoutError):
                async with session.get(url, timeout=aiohttp.ClientTimeout(0.3)) as response:
                    await response.read()
            return loop.time() - started

    assert run(main) < 1.0
    assert 2 <= len(script.seen) - 1 < 50


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("cut_attempts", "cache"), [(True, False), (False, False), (True, True)], ids=str
)
def test_the_sessions_total_running_out_inside_an_attempt_ends_the_call(
    cut_attempts: bool, cache: bool
) -> None:
    """
    The session's total runs out while an attempt waits for its answer: nothing is sent again.

    aiohttp's read of the response's head turns its timer's cancellation into a plain
    TimeoutError; the middleware took it for the attempt's own timeout and retried, each
    retry sent to the server and failing at once (4 more requests here; 50 attempts on 503s
    went on for 39 s under load).
    """
    script = Script([(503, {}, b"")], delay=1.0)
    policy = RetryPolicy(attempts=5, wait_initial=0.01, wait_max=0.01, cut_attempts=cut_attempts)

    async def main() -> float:
        loop = asyncio.get_running_loop()
        async with serving(script) as url:
            edge = SmoothMiddleware(policy=policy, cache=HttpCache() if cache else None)
            started = loop.time()
            with pytest.raises(TimeoutError):
                await fetch(url, edge, timeout=aiohttp.ClientTimeout(0.2))
            return loop.time() - started

    assert run(main) < 0.9  # before the server's answer (1 s): ended at the total (0.2 s)
    assert len(script.seen) == 1


@pytest.mark.e2e
def test_the_sessions_total_running_out_in_a_503s_body_ends_the_call() -> None:
    """
    The total runs out while the 503's body (read so the connection is reused) drips: done.

    The read turned aiohttp's cancellation into a TimeoutError the release swallowed, and the
    call then slept the 503's Retry-After (2 s) past a total of 0.3 s before it ended.
    """
    seen: list[int] = []

    async def dripping(request: web.Request) -> web.StreamResponse:
        seen.append(1)
        headers = {"Retry-After": "2", "Content-Length": "10"}
        response = web.StreamResponse(status=503, headers=headers)
        await response.prepare(request)
        await response.write(b"12345")
        with contextlib.suppress(ConnectionError):
            await asyncio.sleep(1.0)
            await response.write(b"67890")
        return response

    async def main() -> float:
        app = web.Application()
        app.router.add_get("/", dripping)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            with pytest.raises(TimeoutError):
                await fetch(
                    url, SmoothMiddleware(policy=POLICY), timeout=aiohttp.ClientTimeout(0.3)
                )
            return loop.time() - started
        finally:
            await runner.cleanup()

    assert run(main) < 1.5  # was 2.4 s: the Retry-After slept after the total (0.3 s)
    assert len(seen) == 1


async def _chunks() -> AsyncIterator[bytes]:
    yield b"stream"


@pytest.mark.e2e
def test_bodies_in_memory_are_sent_again_and_a_stream_is_not(clock: FakeClock) -> None:
    """bytes, text, JSON, a form and a file are replayed whole on a retry; a generator is not."""
    form = aiohttp.FormData({"a": "1"})
    bodies: list[dict[str, Any]] = [
        {"data": b"raw"},
        {"data": "text"},
        {"json": {"k": 1}},
        {"data": form},
        {"data": io.BytesIO(b"file")},
    ]

    async def main() -> list[list[bytes]]:
        sent: list[list[bytes]] = []
        for kwargs in [*bodies, {"data": _chunks()}]:
            script = Script([(503, {}, b""), (200, {}, b"")])
            async with serving(script) as url:
                await fetch(url, middleware(clock), "PUT", **kwargs)
            sent.append([body for _, body in script.seen])
        return sent

    sent = run(main)
    for replayed in sent[:-1]:
        assert len(replayed) == 2
        assert replayed[0] == replayed[1] != b""
    assert sent[-1] == [b"stream"]  # consumed by the first attempt: the 503 is returned


_KEY = ConnectionKey("api.test", 80, False, True, None, None, None, None)


@pytest.mark.parametrize(
    ("error", "kind", "sent"),
    [
        (
            aiohttp.ClientConnectorError(_KEY, ConnectionRefusedError(111, "refused")),
            "connect",
            False,
        ),
        (aiohttp.ClientConnectorDNSError(_KEY, OSError(-2, "unknown host")), "connect", False),
        (aiohttp.ConnectionTimeoutError("connect timed out"), "connect", False),
        (aiohttp.SocketTimeoutError("read timed out"), "timeout", True),
        (aiohttp.ServerDisconnectedError(), "protocol", True),
        (aiohttp.ClientPayloadError("body cut short"), "read", True),
        (aiohttp.ClientConnectionResetError("reset"), "read", True),
        (aiohttp.ClientOSError(32, "broken pipe"), "read", True),
        (TimeoutError(), "timeout", True),
        (aiohttp.ClientConnectionError("other"), "other", True),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None,
)
def test_aiohttp_errors_as_failure_kinds(error: Exception, kind: str, sent: bool) -> None:
    """Each aiohttp transport error is the flow's failure kind; whether it may have been sent."""
    failure = aiohttp_middleware._failure(error)
    assert failure is not None
    assert (failure.kind, failure.sent, failure.exception) == (kind, sent, error)


def test_what_is_not_a_transport_error_is_raised_as_it_is() -> None:
    """A bad URL, a bug, a refused certificate: no failure (the flow re-raises them)."""
    certificate = aiohttp.ClientConnectorCertificateError(_KEY, ValueError("untrusted"))
    for error in (aiohttp.InvalidURL("x"), ValueError("bug"), certificate):
        assert aiohttp_middleware._failure(error) is None


def test_import_smoothclient_aiohttp_is_the_edge() -> None:
    """The public module re-exports the edge's names; they need the aiohttp extra."""
    assert SmoothMiddleware is aiohttp_middleware.SmoothMiddleware
    assert issubclass(RateLimitedError, aiohttp.ClientError)
    with pytest.raises(TypeError, match="policy must be a RetryPolicy"):
        SmoothMiddleware(policy=3)  # type: ignore[arg-type]


def python(*lines: str) -> str:
    """What a fresh interpreter running ``lines`` prints."""
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(lines)], capture_output=True, text=True, check=True
    )
    return done.stdout


def test_import_smoothclient_imports_no_aiohttp() -> None:
    """The package's public names load without aiohttp; smoothclient.aiohttp brings it."""
    printed = python(
        "import sys, smoothclient",
        "smoothclient.RetryPolicy, smoothclient.record_of",
        "print('aiohttp' in sys.modules)",
        "import smoothclient.aiohttp",
        "print('aiohttp' in sys.modules)",
    )
    assert printed.split() == ["False", "True"]


def test_without_aiohttp_the_import_says_which_extra() -> None:
    """A missing aiohttp is an ImportError naming the extra to install."""
    printed = python(
        "import sys",
        "sys.modules['aiohttp'] = None",
        "try:",
        "    import smoothclient.aiohttp",
        "except ImportError as exc:",
        "    print(exc)",
    )
    assert "pip install 'smoothclient[aiohttp]'" in printed


def test_a_sleep_that_is_no_function_is_refused_when_made() -> None:
    """It was taken, and failed at the first wait with "'str' object is not callable"."""
    sleep: Any = "asyncio.sleep"
    with pytest.raises(TypeError, match="sleep must be a callable awaitable taking seconds"):
        SmoothMiddleware(sleep=sleep)
    blocking: Any = time.sleep  # it stalled the loop, then failed to be awaited
    with pytest.raises(TypeError, match="sleep must be an async sleep"):
        SmoothMiddleware(sleep=blocking)
