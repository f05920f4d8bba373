"""
Something not callable where a helper takes a function (issue 37): refused at construction.

A clock, sleep, key, hook or task of the wrong kind (a string, a number, a list, ``None``)
was taken without a word and failed at its first call, ``'str' object is not callable``, or
never where anyone saw it: a :class:`~smoothclient.spreading.jittered.Scheduler` whose clock
was a string lost its thread at the first ``later()``, its futures never done.  Each is now a
``TypeError`` when the helper is made, saying what is allowed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from smoothclient import jittered, paced, retry, spread
from smoothclient.cache import JitteredTTLCache, cached
from smoothclient.spreading import PoissonScheduler, Reconciler, retry_context
from smoothclient.spreading.jittered import Scheduler


def _work(item: int) -> int:
    return item


#: Not functions (typed Any: the point is to pass what the signatures forbid).
TEXT: Any = "x"
NUMBER: Any = 1
NOTHING: Any = None
ITEMS: Any = [1]

CASES: dict[str, tuple[Callable[[], object], str]] = {
    "jittered-sleep": (lambda: jittered(0.1, sleep=TEXT), "sleep must be a callable"),
    "paced-sleep": (lambda: paced(1, sleep=TEXT), "sleep must be a callable"),
    "paced-key": (lambda: paced(1, key=NUMBER), "key must be a callable"),
    "retry-sleep": (lambda: retry(sleep=TEXT), "sleep must be a callable"),
    "retry-clock": (lambda: retry(clock=TEXT), "clock must be a callable"),
    "retry-on_result": (lambda: retry(on_result=NUMBER), "on_result must be a callable"),
    "retry_context-clock": (lambda: retry_context(clock=TEXT), "clock must be a callable"),
    "retry_context-sleep": (lambda: retry_context(sleep=NUMBER), "sleep must be a callable"),
    "spread-fn": (lambda: spread(TEXT, [1], window=1), "fn must be callable"),
    "spread-clock": (lambda: spread(_work, [1], window=1, clock=TEXT), "clock must be"),
    "spread-sleep": (lambda: spread(_work, [1], window=1, sleep=TEXT), "sleep must be"),
    "spread-progress": (lambda: spread(_work, [1], window=1, progress=NUMBER), "progress must"),
    "spread-key": (lambda: spread(_work, [1], window=1, key=TEXT), "key must be a callable"),
    "scheduler-clock": (lambda: Scheduler(clock=TEXT), "clock must be a callable"),
    "reconciler-find_work": (lambda: Reconciler(ITEMS, _work, every=1), "find_work must be"),
    "reconciler-handle": (lambda: Reconciler(list, NOTHING, every=1), "handle must be callable"),
    "reconciler-key": (lambda: Reconciler(list, _work, every=1, key=NUMBER), "key must be"),
    "reconciler-clock": (lambda: Reconciler(list, _work, every=1, clock=TEXT), "clock must be"),
    "reconciler-sleep": (lambda: Reconciler(list, _work, every=1, sleep=NUMBER), "sleep must"),
    "poisson-task": (lambda: PoissonScheduler(NOTHING, rate=1), "task must be a callable"),
    "poisson-wall": (lambda: PoissonScheduler(list, rate=1, wall=TEXT), "wall must be"),
    "poisson-sleep": (lambda: PoissonScheduler(list, rate=1, sleep=TEXT), "sleep must be"),
    "poisson-on_gap": (lambda: PoissonScheduler(list, rate=1, on_gap=ITEMS), "on_gap must be"),
    "cached-key": (lambda: cached(JitteredTTLCache(1, 1), key=TEXT), "key must be a callable"),
    "cache-timer": (lambda: JitteredTTLCache(1, 1, timer=TEXT), "timer must be a callable"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_function_is_refused_when_the_helper_is_made(case: str) -> None:
    """A TypeError at construction, naming the parameter and what it takes."""
    make, message = CASES[case]
    with pytest.raises(TypeError, match=message):
        make()


def test_a_scheduler_is_never_left_without_its_thread() -> None:
    """Its clock a string: refused when made (it was: the thread died, ``later()`` never ran)."""
    with pytest.raises(TypeError, match="clock must be a callable returning seconds"):
        Scheduler(clock=TEXT)


async def _job(item: int = 0) -> int:
    return item


BLOCKING: dict[str, Callable[[Callable[..., Any]], object]] = {
    "jittered": lambda sleep: jittered(0.1, sleep=sleep)(_job),
    "paced": lambda sleep: paced(1, sleep=sleep)(_job),
    "retry": lambda sleep: retry(sleep=sleep)(_job),
    "spread": lambda sleep: spread(_job, [1], window=1, sleep=sleep),
}


@pytest.mark.parametrize("helper", sorted(BLOCKING))
def test_time_sleep_for_an_async_function_is_refused(helper: str) -> None:
    """It stalled the event loop, then failed: "object NoneType can't be used in 'await'"."""
    with pytest.raises(TypeError, match="must be an async sleep"):
        BLOCKING[helper](time.sleep)


@pytest.mark.parametrize("helper", ["jittered", "paced", "retry"])
def test_a_sync_sleep_of_an_async_function_is_let_be(helper: str) -> None:
    """A plain function giving nothing to await: the call goes on (it crashed at the await)."""
    slept: list[float] = []

    def record(seconds: float) -> None:
        slept.append(seconds)

    wrapped: Any = BLOCKING[helper](record)

    async def main() -> list[int]:
        return [await wrapped(n) for n in range(3)]

    assert asyncio.run(main()) == [0, 1, 2]
    if helper != "retry":  # (nothing to retry: no wait)
        assert slept


def test_retry_context_refuses_time_sleep_as_async_for_begins() -> None:
    """``async for`` over a retry_context given time.sleep: refused before any attempt."""
    attempts = 0

    async def main() -> None:
        nonlocal attempts
        async for attempt in retry_context(sleep=time.sleep):
            with attempt:
                attempts += 1

    with pytest.raises(TypeError, match="must be an async sleep"):
        asyncio.run(main())
    assert attempts == 0
    for attempt in retry_context(sleep=time.sleep):  # the sync loop takes it, as ever
        with attempt:
            attempts += 1
    assert attempts == 1


def test_a_reconciler_tick_that_fails_gives_its_items_back() -> None:
    """
    A tick's spread that failed (interrupted in its wait; an async tick given time.sleep)
    left the items it never started in flight: every later tick skipped them, for good.
    """

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    async def handle(item: int) -> None:
        pass

    work = [1, 2, 3]
    ticking = Reconciler(lambda: work, _work, every=1, spread_over=5, sleep=interrupted)
    with pytest.raises(KeyboardInterrupt):
        ticking.tick()
    assert ticking.in_flight == set()
    awaiting = Reconciler(lambda: work, handle, every=1, spread_over=5, sleep=time.sleep)
    with pytest.raises(TypeError, match="must be an async sleep"):
        asyncio.run(awaiting.tick_async())
    assert awaiting.in_flight == set()
