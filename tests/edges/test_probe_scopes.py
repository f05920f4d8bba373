"""
Calls waiting behind a cold-start probe whose answer names a spent quota (a scope), in one process.

The first request to an origin goes alone (the probe); calls that start while it is out wait
for its answer.  A ``RateLimit-Policy`` answer names its quota, so the quota's scope learns it
("spent until its reset"), not the origin the waiters wait on: each waiter must be refused at
once with the reset in its error, sending nothing, and never wait out ``Pacer(probe=...)``.
The fleet through Redis is in ``tests/e2e/test_redis_probe_scopes.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

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
from smoothclient.edges.flow import SEND, CallFlow, Reply, Sleep
from smoothclient.pacing.steps import Steps
from smoothclient.pacing.store import Tracker
from smoothclient.testing import FakeClock

ORIGIN = "http://api.test:80"
#: express-rate-limit's draft-8 answer once its quota of 5 a minute is spent: it names it.
SPENT = {
    "ratelimit-policy": '"5-in-1min"; q=5; w=60',
    "ratelimit": '"5-in-1min"; r=0; t=58',
    "retry-after": "58",
}
#: Far longer than any call here waits once the probe's answer lands.
PROBE = 5.0


def route_of(request: object) -> tuple[str, str]:
    return "GET", str(request)


Rebind = Callable[[bool], Steps[Tracker | None]]


def flow_of(pacer: Pacer, clock: FakeClock, rebind: Rebind | None = None) -> CallFlow:
    """The flow of one call ``GET /work`` (deadline 2 s), bound to scopes as an edge binds it."""

    def bind(late: bool) -> Steps[Tracker | None]:
        return pacer.binding(ORIGIN, "/work", route_of, late=late)

    return CallFlow(
        RetryPolicy(timeout=2.0),
        pacer.track(ORIGIN),
        clock,
        ORIGIN,
        method="GET",
        has_idempotency_key=False,
        replayable=True,
        rng=random.Random(0),
        describe="GET /work",
        rebind=rebind or bind,
    )


def answer(probe: Generator[Any, Any, Any]) -> None:
    """The probe's answer lands: a 429 naming its spent quota (the call then gives up)."""
    with contextlib.suppress(StopIteration):
        probe.send(Reply(429, SPENT))


def refused(waiter: Generator[Any, Any, Any]) -> RateLimited:
    """The waiter's next ask: refused unsent (never SEND), the error it raised."""

    def ask() -> None:
        action = next(waiter)
        while isinstance(action, Sleep):  # (a waiter may poll once more, never send)
            action = next(waiter)
        assert action is not SEND

    with pytest.raises(RateLimited) as caught:
        ask()
    return caught.value


def assert_closed(error: RateLimited) -> None:
    assert "closed until its reset in 58 s" in str(error)
    assert error.retry_after == pytest.approx(58.0, abs=0.5)
    record = record_of(error)
    assert record is not None
    assert record.attempts == 0
    assert record.gave_up_kind == "closed"


def answered_at_binding(
    pacer: Pacer, clock: FakeClock, nth: int
) -> tuple[list[Tracker | None], Rebind]:
    """
    A probe sent, and a call's binding during which its answer lands: at the ``nth`` binding.

    Each binding is kept; the ``nth`` found the origin alone (no scope learned yet).
    """
    probe = flow_of(pacer, clock).run()
    assert next(probe) is SEND
    binds: list[Tracker | None] = []

    def rebind(late: bool) -> Steps[Tracker | None]:
        bound = yield from pacer.binding(ORIGIN, "/work", route_of, late=late)
        binds.append(bound)
        if len(binds) == nth:  # bound by the origin alone: the answer lands
            assert bound is None
            answer(probe)
        return bound

    return binds, rebind


def test_waiters_behind_a_probe_are_refused_when_its_answer_names_a_spent_scope() -> None:
    """One process: three calls behind the probe, refused at their next ask after its answer."""
    clock = FakeClock(100.0)
    pacer = Pacer(clock=clock, probe=PROBE)
    probe = flow_of(pacer, clock).run()
    assert next(probe) is SEND
    waiters = [flow_of(pacer, clock).run() for _ in range(3)]
    polls = [next(w) for w in waiters]
    assert all(isinstance(p, Sleep) and p.seconds < 0.1 for p in polls)  # behind the probe
    answer(probe)
    clock.advance(max(p.seconds for p in polls if isinstance(p, Sleep)))
    for waiter in waiters:
        assert_closed(refused(waiter))
    assert clock() - 100.0 < 0.1  # one poll: nothing like the probe's wait
    assert pacer.view(ORIGIN).waiting == 0


def test_a_waiter_bound_just_before_the_probes_answer_lands_is_refused_not_sent() -> None:
    """
    The answer lands between a waiter's binding (the origin alone) and its ask for a slot.

    Its origin then admits it (the probe was answered; the origin itself has no quota): the
    slot is given back and the request asked of the scopes learned meanwhile, which refuse
    it.  Granted by the origin alone, it was sent into the spent quota.
    """
    clock = FakeClock(100.0)
    pacer = Pacer(clock=clock, probe=PROBE)
    binds, rebind = answered_at_binding(pacer, clock, 2)  # its second ask: the answer lands
    waiter = flow_of(pacer, clock, rebind).run()
    poll = next(waiter)
    assert isinstance(poll, Sleep)  # behind the probe
    clock.advance(poll.seconds)
    assert_closed(refused(waiter))
    assert binds[0] is None
    assert binds[1] is None
    assert binds[-1] is not None  # bound by the scope the answer named
    assert pacer.view(ORIGIN).waiting == 0  # the origin's slot given back
    assert list(pacer.scopes(ORIGIN)) == ["5-in-1min"]


def test_a_call_bound_just_before_the_probes_answer_lands_is_refused_at_its_first_ask() -> None:
    """
    The answer lands between a call's first binding (the origin alone) and its first ask.

    Its origin admits it at once, with no wait between: bound again all the same, it is
    refused by the scope the answer named (another thread's answer, or another process's
    through a shared store, lands there as well as during a wait).
    """
    clock = FakeClock(100.0)
    pacer = Pacer(clock=clock, probe=PROBE)
    binds, rebind = answered_at_binding(pacer, clock, 1)  # its first ask: the answer lands
    assert_closed(refused(flow_of(pacer, clock, rebind).run()))
    assert binds[0] is None
    assert binds[-1] is not None  # bound by the scope the answer named
    assert pacer.view(ORIGIN).waiting == 0  # the origin's slot given back
    assert clock() == 100.0  # no wait at all


def test_one_process_with_threads_waits_only_for_the_probes_answer() -> None:
    """
    Real threads through one transport's pacer: the waiters end with the probe's answer.

    (The fleet through Redis waited out the probe, 250 ms by default: one process never did,
    its scopes and its origin's state being in its own memory.)
    """
    pacer = Pacer(probe=PROBE)
    arrived, release = threading.Event(), threading.Event()
    sent: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        arrived.set()
        release.wait(2.0)
        return httpx.Response(429, headers=SPENT)

    transport = SmoothTransport(
        httpx.MockTransport(handler), policy=RetryPolicy(timeout=1.0), pacer=pacer
    )
    client = httpx.Client(transport=transport, base_url="http://api.test")
    took: list[float] = []
    errors: list[BaseException] = []

    def call() -> None:
        began = time.monotonic()
        try:
            client.get("/work")
        except Exception as exc:
            errors.append(exc)
        took.append(time.monotonic() - began)

    first = threading.Thread(target=call)
    first.start()
    assert arrived.wait(2.0)
    waiters = [threading.Thread(target=call) for _ in range(3)]
    for thread in waiters:
        thread.start()
    time.sleep(0.05)  # (they wait behind the probe)
    release.set()
    for thread in [first, *waiters]:
        thread.join(5.0)
    client.close()
    assert len(sent) == 1  # the probe alone was sent
    assert len(errors) == 3
    for error in errors:
        assert isinstance(error, RateLimited)
        assert_closed(error)
    assert max(took) < 0.5  # not the probe's 5 s, nor the 1 s deadline


def test_one_process_on_asyncio_waits_only_for_the_probes_answer() -> None:
    """The same with tasks on one loop through an async transport."""
    pacer = Pacer(probe=PROBE)

    async def main() -> tuple[int, list[BaseException], list[float]]:
        arrived, release = asyncio.Event(), asyncio.Event()
        sent: list[float] = []

        async def handler(request: httpx.Request) -> httpx.Response:
            sent.append(time.monotonic())
            arrived.set()
            await asyncio.wait_for(release.wait(), 2.0)
            return httpx.Response(429, headers=SPENT)

        transport = AsyncSmoothTransport(
            httpx.MockTransport(handler), policy=RetryPolicy(timeout=1.0), pacer=pacer
        )
        took: list[float] = []
        errors: list[BaseException] = []
        async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:

            async def call() -> None:
                began = time.monotonic()
                try:
                    await client.get("/work")
                except Exception as exc:
                    errors.append(exc)
                took.append(time.monotonic() - began)

            first = asyncio.create_task(call())
            await asyncio.wait_for(arrived.wait(), 2.0)
            waiters = [asyncio.create_task(call()) for _ in range(3)]
            await asyncio.sleep(0.05)
            release.set()
            await asyncio.wait_for(asyncio.gather(first, *waiters), 5.0)
        return len(sent), errors, took

    sent, errors, took = asyncio.run(main())
    assert sent == 1
    assert len(errors) == 3
    for error in errors:
        assert isinstance(error, RateLimited)
        assert_closed(error)
    assert max(took) < 0.5
