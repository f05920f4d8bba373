"""
Generators, async generators and async callable objects given to every helper (issue 37).

Each is either supported (its items all come through, and an async one never calls
``time.sleep``) or refused when decorated or configured, with a ``TypeError`` saying what to
give: a helper that calls a function for its effect (``spread``, the reconciler's ``handle``,
the Poisson scheduler's ``task``) would run none of a generator's body, ``@retry`` cannot
retry what runs after the call, and ``cached`` would hand later callers an exhausted one.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from smoothclient import cached, jittered, paced, retry, spread
from smoothclient.cache import JitteredTTLCache
from smoothclient.spreading import PoissonScheduler, Reconciler
from smoothclient.testing import FakeClock


def gen(n: int = 2) -> Iterator[int]:
    yield from range(n)


async def agen(n: int = 2) -> AsyncIterator[int]:
    for i in range(n):
        yield i


class AsyncCallable:
    """An object whose ``__call__`` is ``async def``: a coroutine function to the helpers."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, n: int = 2) -> int:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("first")
        return n


class GeneratorCallable:
    """An object whose ``__call__`` is a generator function."""

    def __call__(self, n: int = 2) -> Iterator[int]:
        yield from range(n)


@pytest.fixture
def no_time_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """``time.sleep`` fails the test: the async paths must await."""

    def blocked(seconds: float) -> None:
        raise AssertionError(f"time.sleep({seconds}) blocked the event loop")

    monkeypatch.setattr(time, "sleep", blocked)


REFUSED: dict[str, Callable[[Any], object]] = {
    "retry": lambda fn: retry(attempts=2)(fn),
    "cached": lambda fn: cached(JitteredTTLCache(8, 60))(fn),
    "spread": lambda fn: spread(fn, [1, 2], window=0),
    "spread-hashed": lambda fn: spread(fn, [1, 2], window=1, placement="hashed"),
    "reconciler": lambda fn: Reconciler(list, fn, every=1),
    "poisson": lambda fn: PoissonScheduler(fn, rate=1.0),
}


@pytest.mark.parametrize("fn", [gen, agen, GeneratorCallable()], ids=["gen", "agen", "object"])
@pytest.mark.parametrize("helper", sorted(REFUSED))
def test_generators_are_refused_by_what_calls_for_effect(helper: str, fn: Any) -> None:
    """spread ran none of a generator's body (each result a generator), so did the rest."""
    with pytest.raises(TypeError, match="generator"):
        REFUSED[helper](fn)


@pytest.mark.parametrize("helper", ["jittered", "paced"])
def test_jittered_and_paced_give_a_generators_items(helper: str, clock: FakeClock) -> None:
    """A sync generator function: the wait (a sync sleep) comes at the call; all items come."""
    decorate = (
        jittered(1.0, 0.5, sleep=clock.sleep, rng=random.Random(0))
        if helper == "jittered"
        else paced(1.0, clock=clock, sleep=clock.sleep)
    )
    wrapped = decorate(gen)
    assert [list(wrapped(3)) for _ in range(3)] == [[0, 1, 2]] * 3
    assert clock() > 1000.0  # it waited (on the fake clock)


@pytest.mark.parametrize("helper", ["jittered", "paced", "retry", "cached"])
def test_an_async_callable_object_is_awaited_never_slept_on(
    helper: str, clock: FakeClock, no_time_sleep: None
) -> None:
    """
    An object with ``async def __call__`` was taken for a plain function: ``@jittered`` and
    ``@paced`` slept with ``time.sleep`` on the event loop, ``@retry`` returned the coroutine
    unretried, ``cached`` kept the coroutine (awaited twice: RuntimeError).
    """
    target = AsyncCallable()
    decorators: dict[str, Callable[[Any], Any]] = {
        "jittered": jittered(0.5, rng=random.Random(0)),
        "paced": paced(100.0, burst=1),
        "retry": retry(on=ConnectionError, attempts=2, sleep=clock.async_sleep),
        "cached": cached(JitteredTTLCache(8, 60, timer=clock)),
    }
    wrapped = decorators[helper](target)

    async def main() -> list[Any]:
        out: list[Any] = []
        for n in (3, 3):
            try:
                out.append(await wrapped(n))
            except ConnectionError:
                out.append("error")
        return out

    results = asyncio.run(main())
    if helper == "retry":
        assert results == [3, 3]  # the first call's ConnectionError retried
    elif helper == "cached":
        assert results == ["error", 3]  # the error not cached; the value loaded once
    else:
        assert results == ["error", 3]


def test_the_reconciler_collects_an_async_generators_work() -> None:
    """An async generator function as ``find_work``: collected by ``tick_async``."""
    handled: list[int] = []

    async def find_work() -> AsyncIterator[int]:
        for i in range(3):
            yield i

    async def handle(item: int) -> None:
        handled.append(item)

    reconciler = Reconciler(find_work, handle, every=1, rng=random.Random(0))
    assert asyncio.run(reconciler.tick_async()) == 3
    assert sorted(handled) == [0, 1, 2]


def test_the_reconcilers_sync_tick_refuses_an_async_generators_work() -> None:
    """The sync tick cannot iterate it: a TypeError saying which runner can (as for a coroutine)."""

    async def find_work() -> AsyncIterator[int]:
        yield 1

    reconciler = Reconciler(find_work, lambda item: None, every=1)
    with pytest.raises(TypeError, match="run_async"):
        reconciler.tick()
    assert reconciler.in_flight == set()


def test_stacked_decorators_see_the_async_generator_beneath(no_time_sleep: None) -> None:
    """@jittered and @paced stack on one (awaiting); cached, @retry and spread refuse it."""

    def items(wrapped: Any) -> list[int]:
        async def main() -> list[int]:
            return [item async for item in wrapped(3)]

        return asyncio.run(main())

    assert items(jittered(0.001)(paced(1000.0)(agen))) == [0, 1, 2]
    assert items(paced(1000.0)(jittered(0.001)(agen))) == [0, 1, 2]
    with pytest.raises(TypeError, match="generator"):
        cached(JitteredTTLCache(4, 4))(jittered(0.001)(agen))
    with pytest.raises(TypeError, match="generator"):
        retry()(paced(1000.0)(agen))
    with pytest.raises(TypeError, match="must not be an async generator function"):
        spread(jittered(0.001)(agen), [1], window=0)
