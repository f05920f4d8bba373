"""
Cancelling an aiohttp call through :class:`~smoothclient.aiohttp.SmoothMiddleware` (issue 37).

A task cancelled while the pacer holds its call, while it waits between attempts, or while an
attempt waits for its answer (with and without an HTTP cache in front) leaves the pacer's
counts at 0 and gives its connection back: the next call on a session of one connection goes
through.  The waits park the task on an event (no real time passes); a real local server
answers, so each test is end to end, and each runs in well under a second.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from smoothclient import HttpCache, Pacer, RetryPolicy
from smoothclient.aiohttp import SmoothMiddleware
from smoothclient.testing import FakeClock
from smoothclient.tools.redis_server import RedisServer, binary

#: (status, headers) per request; the last entry repeats.
Answer = tuple[int, dict[str, str]]
POLICY = RetryPolicy(attempts=5, timeout=60, wait_initial=1.0, wait_max=2.0)
#: A quota spent for the next 30 s: the pacer holds the next call.
SPENT = {"RateLimit-Limit": "10", "RateLimit-Remaining": "0", "RateLimit-Reset": "30"}


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A redis-server of the test's own: its URL (skipped where there is none)."""
    if binary("redis") is None:
        pytest.skip("no redis-server")
    with RedisServer() as running:
        yield running.url


@dataclass
class Server:
    """Answers from a script; from request ``hold_from`` on, each answer waits for ``release``."""

    answers: list[Answer]
    seen: int = 0
    hold_from: int | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.seen += 1
        status, headers = self.answers[min(self.seen, len(self.answers)) - 1]
        self.arrived.set()
        if self.hold_from is not None and self.seen >= self.hold_from:
            await self.release.wait()
        return web.Response(status=status, headers=headers, body=b"x")


@asynccontextmanager
async def serving(server: Server) -> AsyncIterator[str]:
    """The server on a free loopback port: its URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/items"
    finally:
        server.release.set()
        await runner.cleanup()


class Parked:
    """An async sleep that notes the wait and parks the task until it is cancelled."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.parked = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.parked.set()
        await asyncio.Event().wait()


async def get(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url) as response:
        await response.read()
        return response.status


async def cancelled_then_next(
    server: Server,
    until: Callable[[Parked, Pacer], Awaitable[Any]],
    *,
    cache: HttpCache | None = None,
    warm: bool = False,
    storage: str | None = None,
) -> tuple[Pacer, Parked, int]:
    """
    A call cancelled once ``until(parked)`` returns, then another call: the pacer, the waits.

    The session has one connection: a call that kept its own would leave the next one waiting
    for it (cut at 2 s here).  The next call comes a minute later (the pacer's fake clock).
    """
    clock = FakeClock(1000.0)
    pacer = Pacer(clock=clock) if storage is None else Pacer(storage=storage, probe=0)
    parked = Parked()
    edge = SmoothMiddleware(policy=POLICY, pacer=pacer, sleep=parked, cache=cache)
    async with (
        serving(server) as url,
        aiohttp.ClientSession(
            middlewares=(edge,), connector=aiohttp.TCPConnector(limit=1)
        ) as session,
    ):
        if warm:
            assert await get(session, url) == 200
        task = asyncio.create_task(get(session, url))
        await asyncio.wait_for(until(parked, pacer), 2.0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()
        server.hold_from = None
        server.release.set()
        clock.advance(60.0)  # past any hold of the pacer's
        async with asyncio.timeout(2.0):
            status = await get(session, url + "?next")
    return pacer, parked, status


def counts(pacer: Pacer) -> tuple[int, int]:
    """The origin's calls waiting and in flight."""
    (origin,) = pacer.origins()
    view = pacer.view(origin)
    return view.waiting, view.in_flight


async def parked(parked: Parked, pacer: Pacer) -> None:
    await parked.parked.wait()


@pytest.mark.parametrize("cache", [False, True], ids=["no-cache", "cache"])
def test_cancelled_while_waiting_to_retry(cache: bool) -> None:
    """503, then parked in the backoff: cancelled, nothing counted, the connection free."""
    server = Server([(503, {}), (200, {})])

    async def main() -> tuple[Pacer, Parked, int]:
        return await cancelled_then_next(server, parked, cache=HttpCache() if cache else None)

    pacer, waits, status = asyncio.run(main())
    assert status == 200
    assert len(waits.waits) == 1
    assert counts(pacer) == (0, 0)
    assert server.seen == 2


@pytest.mark.parametrize("cache", [False, True], ids=["no-cache", "cache"])
def test_cancelled_while_the_pacer_holds_the_call(cache: bool) -> None:
    """A spent quota holds the next call for its reset: cancelled there, nothing counted."""
    server = Server([(200, SPENT), (200, {})])

    async def main() -> tuple[Pacer, Parked, int]:
        return await cancelled_then_next(
            server, parked, cache=HttpCache() if cache else None, warm=True
        )

    pacer, waits, status = asyncio.run(main())
    assert waits.waits[0] > 1.0  # the pacer's hold, not a backoff
    assert status == 200
    assert counts(pacer) == (0, 0)
    assert server.seen == 2  # the held call was never sent


@pytest.mark.parametrize("cache", [False, True], ids=["no-cache", "cache"])
def test_cancelled_while_an_attempt_waits_for_its_answer(cache: bool) -> None:
    """The server holds the answer: cancelled mid-attempt, the connection is given back."""
    server = Server([(200, {})], hold_from=1)

    async def arrived(_: Parked, pacer: Pacer) -> None:
        await server.arrived.wait()

    async def main() -> tuple[Pacer, Parked, int]:
        return await cancelled_then_next(server, arrived, cache=HttpCache() if cache else None)

    pacer, waits, status = asyncio.run(main())
    assert (status, waits.waits) == (200, [])
    assert counts(pacer) == (0, 0)
    assert server.seen == 2


def test_cancelled_while_an_attempt_to_a_paced_origin_waits_for_its_answer() -> None:
    """A paced origin (its quota known) counts the attempt in flight: cancelled, uncounted."""
    quota = {"RateLimit-Limit": "10", "RateLimit-Remaining": "5", "RateLimit-Reset": "30"}
    server = Server([(200, quota)], hold_from=2)

    during: list[tuple[int, int]] = []

    async def arrived(_: Parked, pacer: Pacer) -> None:
        while server.seen < 2:
            await asyncio.sleep(0.01)
        during.append(counts(pacer))

    async def main() -> tuple[Pacer, Parked, int]:
        return await cancelled_then_next(server, arrived, warm=True)

    pacer, _, status = asyncio.run(main())
    assert during == [(0, 1)]  # the attempt was counted in flight
    assert status == 200
    assert counts(pacer) == (0, 0)
    assert server.seen == 3


def test_cancelled_on_a_redis_pacer_while_waiting_and_mid_attempt(redis_url: str) -> None:
    """The fleet's counts in Redis: a call cancelled in its wait, one mid-attempt: both at 0."""
    quota = {"RateLimit-Limit": "100", "RateLimit-Remaining": "50", "RateLimit-Reset": "30"}
    waiting = Server([(503, {}), (200, {})])
    held = Server([(200, quota)], hold_from=2)
    during: list[tuple[int, int]] = []

    async def arrived(_: Parked, pacer: Pacer) -> None:
        while held.seen < 2:
            await asyncio.sleep(0.01)
        during.append(counts(pacer))

    async def main() -> list[tuple[tuple[int, int], int]]:
        out = []
        for server, until, warm in ((waiting, parked, False), (held, arrived, True)):
            pacer, _, status = await cancelled_then_next(
                server, until, warm=warm, storage=redis_url
            )
            out.append((counts(pacer), status))
        return out

    assert asyncio.run(main()) == [((0, 0), 200), ((0, 0), 200)]
    assert during == [(0, 1)]


def test_a_caller_waiting_on_a_cancelled_callers_fill_goes_on() -> None:
    """
    Two calls of one URL through one HTTP cache: the second waits for the first's answer to
    be stored; the first is cancelled mid-attempt: the second is answered all the same, and
    nothing stays counted or held.
    """
    server = Server([(200, {"Cache-Control": "max-age=60"})], hold_from=1)

    async def main() -> tuple[Pacer, list[int]]:
        pacer = Pacer(clock=FakeClock(1000.0))
        edge = SmoothMiddleware(policy=POLICY, pacer=pacer, cache=HttpCache(lock_timeout=5.0))
        async with (
            serving(server) as url,
            aiohttp.ClientSession(
                middlewares=(edge,), connector=aiohttp.TCPConnector(limit=2)
            ) as session,
        ):
            first = asyncio.create_task(get(session, url))
            await asyncio.wait_for(server.arrived.wait(), 2.0)
            second = asyncio.create_task(get(session, url))
            await asyncio.sleep(0.05)  # the second waits on the first's fill
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await first
            server.hold_from = None
            server.release.set()
            async with asyncio.timeout(2.0):
                statuses = [await second, await get(session, url)]
        return pacer, statuses

    pacer, statuses = asyncio.run(main())
    assert statuses == [200, 200]
    assert counts(pacer) == (0, 0)
