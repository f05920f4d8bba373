"""
A fleet through Redis behind a cold-start probe whose answer names a spent quota (a scope).

Each pacer is a process of the fleet (its own connection, copy and cohort entry), against a
real ``redis-server``.  The probe's answer (a 429 naming its quota, as express-rate-limit's
``draft-8`` headers do) teaches the quota's scope, not the origin: the origin's state must
still say it was answered, at once, or the others wait out ``Pacer(probe=...)`` before they
look again (250 ms by default; 2 s here, past the calls' 1 s deadline).  One process:
``tests/edges/test_probe_scopes.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from smoothclient import (
    AsyncSmoothTransport,
    Pacer,
    RateLimited,
    RetryPolicy,
    SmoothTransport,
    record_of,
)
from smoothclient.hints import read_hints
from smoothclient.pacing.redis.keyspace import trusted_for
from smoothclient.pacing.redis.tracker import TRUST
from smoothclient.pacing.scopes import Bound
from smoothclient.pacing.state import PROBE_POLL, OriginState
from smoothclient.tools.redis_server import RedisServer

ORIGIN = "http://api.test:80"
SPENT = {
    "ratelimit-policy": '"5-in-1min"; q=5; w=60',
    "ratelimit": '"5-in-1min"; r=0; t=58',
    "retry-after": "58",
}
PROBE = 2.0
POLICY = RetryPolicy(timeout=1.0)


def fleet(server: RedisServer, n: int) -> list[Pacer]:
    return [Pacer(storage=server.url, probe=PROBE, storage_timeout=1.0) for _ in range(n)]


def route_of(request: object) -> tuple[str, str]:
    return "GET", str(request)


def assert_closed(error: BaseException) -> None:
    assert isinstance(error, RateLimited)
    assert "closed until its reset" in str(error)
    assert error.retry_after > 50.0
    record = record_of(error)
    assert record is not None
    assert record.attempts == 0
    assert record.gave_up_kind == "closed"


def until(done: object, within: float = 1.0) -> bool:
    """Poll ``done()`` (a callable) until true, for at most ``within`` seconds."""
    ends = time.monotonic() + within
    while not done():  # type: ignore[operator]
        if time.monotonic() > ends:
            return False
        time.sleep(0.002)
    return True


def test_a_probes_answer_that_taught_its_origin_nothing_else_reaches_the_fleet_at_once(
    server: RedisServer,
) -> None:
    """
    The origin's state says it was answered, in Redis, without waiting for a next step.

    The answer's quota went to its scope; the origin only counted the request out of flight
    (a count, written with the process's next step: none came, and the others waited out
    the probe).  Then another process's waiter is bound by the scope and refused.
    """
    a, b = fleet(server, 2)
    probe = a.track(ORIGIN)
    assert probe.acquire(a.clock()).granted  # the probe
    probe.sent()
    behind = b.track(ORIGIN).acquire(b.clock(), deadline=b.clock() + 1.0)
    assert not behind.final  # b waits behind a's probe
    late = a.bind(ORIGIN, "/work", route_of, late=True)
    assert late is not None
    late.observe(429, read_hints(SPENT), a.clock())
    assert until(lambda: b.track(ORIGIN).read(lambda o: o.known, fresh=True), 0.5)
    bound = b.bind(ORIGIN, "/work", route_of)
    assert isinstance(bound, Bound)
    refused = bound.acquire(b.clock(), deadline=b.clock() + 1.0)
    assert not refused.granted
    assert refused.closed_for is not None
    assert refused.closed_for > 50.0


def test_a_copy_behind_a_probe_is_trusted_for_a_poll_only() -> None:
    """Its answer is what the waiters wait for: each process reads the key once a poll."""
    assert trusted_for(OriginState(), TRUST) == TRUST  # (no probe out yet)
    assert trusted_for(OriginState(probe_until=10.0), TRUST) == PROBE_POLL
    assert trusted_for(OriginState(known=True, probe_until=10.0), TRUST) == TRUST


def test_a_waiter_sees_the_probes_answer_within_a_poll(server: RedisServer) -> None:
    """
    Not a copy of the key trusted for 0.1 s: behind the probe, b's copy was read just before.

    (Trusted, b's asks changed nothing and wrote nothing, so they read nothing either: its
    waiters went on waiting for up to 0.1 s after the answer was in Redis.)
    """
    a, b, c = fleet(server, 3)
    probe = a.track(ORIGIN)
    assert probe.acquire(a.clock()).granted
    probe.sent()
    assert not b.track(ORIGIN).acquire(b.clock()).final  # behind the probe: b's copy read
    late = a.bind(ORIGIN, "/work", route_of, late=True)
    assert late is not None
    late.observe(429, read_hints(SPENT), a.clock())
    assert until(lambda: c.track(ORIGIN).read(lambda o: o.known, fresh=True), 0.5)
    time.sleep(2 * PROBE_POLL)
    admitted = b.track(ORIGIN).acquire(b.clock())  # (the origin alone: it has no quota)
    assert admitted.final
    assert admitted.granted
    b.track(ORIGIN).cancel()


def _sync_fleet(pacers: list[Pacer]) -> tuple[list[float], list[BaseException], list[float]]:
    """
    The first pacer's call is the probe; the others' calls start while it is out.

    Each process's call from a thread of its own through its own transport; the probe's answer
    comes 50 ms after they started.  The times the limiter was asked, the errors, the calls'
    times.
    """
    arrived, release = threading.Event(), threading.Event()
    sent: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        arrived.set()
        release.wait(2.0)
        return httpx.Response(429, headers=SPENT)

    took: list[float] = []
    errors: list[BaseException] = []

    def call(pacer: Pacer) -> None:
        transport = SmoothTransport(httpx.MockTransport(handler), policy=POLICY, pacer=pacer)
        with httpx.Client(transport=transport, base_url="http://api.test") as client:
            began = time.monotonic()
            try:
                client.get("/work")
            except Exception as exc:
                errors.append(exc)
            took.append(time.monotonic() - began)

    threads = [threading.Thread(target=call, args=(pacer,)) for pacer in pacers]
    threads[0].start()
    assert arrived.wait(2.0)
    for thread in threads[1:]:
        thread.start()
    time.sleep(0.05)
    release.set()
    for thread in threads:
        thread.join(5.0)
    return sent, errors, took


def test_a_fleets_sync_calls_behind_the_probe_are_refused_once_it_is_answered(
    server: RedisServer,
) -> None:
    """Four processes: the probe alone is sent; the others refused, closed, long before 1 s."""
    sent, errors, took = _sync_fleet(fleet(server, 4))
    assert len(sent) == 1
    assert len(errors) == 3
    for error in errors:
        assert_closed(error)
    assert max(took) < 0.5  # (waiting out the probe, they ended at their 1 s deadline)


def test_a_fleets_async_calls_behind_the_probe_are_refused_once_it_is_answered(
    server: RedisServer,
) -> None:
    """The same on asyncio: each process's steps awaited on the loop (``redis.asyncio``)."""
    pacers = fleet(server, 4)

    async def main() -> tuple[list[float], list[BaseException], list[float]]:
        arrived, release = asyncio.Event(), asyncio.Event()
        sent: list[float] = []

        async def handler(request: httpx.Request) -> httpx.Response:
            sent.append(time.monotonic())
            arrived.set()
            await asyncio.wait_for(release.wait(), 2.0)
            return httpx.Response(429, headers=SPENT)

        took: list[float] = []
        errors: list[BaseException] = []

        async def call(pacer: Pacer) -> None:
            transport = AsyncSmoothTransport(
                httpx.MockTransport(handler), policy=POLICY, pacer=pacer
            )
            async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as c:
                began = time.monotonic()
                try:
                    await c.get("/work")
                except Exception as exc:
                    errors.append(exc)
                took.append(time.monotonic() - began)

        first = asyncio.create_task(call(pacers[0]))
        await asyncio.wait_for(arrived.wait(), 2.0)
        others = [asyncio.create_task(call(pacer)) for pacer in pacers[1:]]
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.wait_for(asyncio.gather(first, *others), 5.0)
        return sent, errors, took

    sent, errors, took = asyncio.run(main())
    assert len(sent) == 1
    assert len(errors) == 3
    for error in errors:
        assert_closed(error)
    assert max(took) < 0.5


def test_a_process_whose_first_call_starts_after_the_answer_sends_nothing(
    server: RedisServer,
) -> None:
    """
    Its first request looks up what the fleet learned of its route before it asks for a slot.

    Bound by the origin alone (this process had no copy of the origin's state to look in),
    it was admitted, the probe answered, and sent into the spent quota.
    """
    a, b = fleet(server, 2)
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(429, headers=SPENT)

    first = SmoothTransport(httpx.MockTransport(handler), policy=POLICY, pacer=a)
    with httpx.Client(transport=first, base_url="http://api.test") as client:
        assert client.get("/work").status_code == 429  # the probe: 58 s is past its deadline
    assert until(lambda: b.track(ORIGIN).read(lambda o: o.known, fresh=True), 0.5)
    b = Pacer(storage=b.storage, probe=PROBE)  # a process that knows nothing of the origin
    later = SmoothTransport(httpx.MockTransport(handler), policy=POLICY, pacer=b)
    with httpx.Client(transport=later, base_url="http://api.test") as client:
        began = time.monotonic()
        with pytest.raises(RateLimited) as caught:
            client.get("/work")
        took = time.monotonic() - began
    assert sent == ["/work"]
    assert_closed(caught.value)
    assert took < 0.5
