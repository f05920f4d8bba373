"""@jittered and @paced on async generator functions: they wait on the event loop, then iterate."""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from smoothclient import RateLimited, jittered, paced
from smoothclient.testing import FakeClock


def collect(gen: AsyncIterator[Any]) -> list[Any]:
    """Run ``gen`` to its end on a new event loop."""

    async def main() -> list[Any]:
        return [item async for item in gen]

    return asyncio.run(main())


def test_jittered_async_generator_waits_with_the_async_sleep_before_iterating(
    clock: FakeClock,
) -> None:
    """The wait is awaited (a fake async sleep records it) before the first item, not at call."""

    @jittered(2.0, 1.0, sleep=clock.async_sleep, rng=random.Random(1))
    async def numbers(n: int) -> AsyncIterator[tuple[int, float]]:
        for i in range(n):
            yield i, clock()

    assert inspect.isasyncgenfunction(numbers)
    with pytest.raises(TypeError):
        numbers()  # type: ignore[call-arg]  # bad arguments fail at the call, as undecorated
    gen = numbers(3)
    assert clock.sleeps == []  # calling it does not wait
    items = collect(gen)
    assert [i for i, _ in items] == [0, 1, 2]
    assert len(clock.sleeps) == 1
    assert 1.0 <= clock.sleeps[0] < 2.0
    assert items[0][1] == 1_000.0 + clock.sleeps[0]  # the first item came after the wait


def test_jittered_and_paced_async_generators_never_call_time_sleep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the default sleep, an async generator must not block the loop in time.sleep."""

    loop_thread, real_sleep = threading.current_thread(), time.sleep

    def blocking(seconds: float) -> None:
        if threading.current_thread() is not loop_thread:
            # another test's thread still winding down (a server, a store's link): not ours
            real_sleep(seconds)
            return
        msg = f"time.sleep({seconds}) blocked the event loop"
        raise AssertionError(msg)

    @jittered(0.002, 0.001)
    async def a() -> AsyncIterator[str]:
        yield "a"

    @paced(1000, burst=1)
    async def b() -> AsyncIterator[str]:
        yield "b"

    monkeypatch.setattr(time, "sleep", blocking)
    assert collect(a()) == ["a"]
    assert collect(b()) + collect(b()) == ["b", "b"]  # the second waits 1 ms for its token


def test_paced_async_generators_take_a_token_each(clock: FakeClock) -> None:
    """Each generator waits for its own token on the event loop before its first item."""

    @paced(2, clock=clock, sleep=clock.async_sleep)
    async def stamp() -> AsyncIterator[float]:
        yield clock()

    assert [collect(stamp())[0] for _ in range(3)] == [1000.0, 1000.5, 1001.0]


def test_paced_async_generator_non_blocking_refuses_at_first_item(clock: FakeClock) -> None:
    """block=False: RateLimited comes when the iteration begins."""

    @paced(1, per=10, block=False, clock=clock)
    async def once() -> AsyncIterator[int]:
        yield 1

    assert collect(once()) == [1]
    with pytest.raises(RateLimited):
        collect(once())


def test_the_wrapped_generator_gets_asend_athrow_and_aclose(clock: FakeClock) -> None:
    """Values sent, exceptions thrown and closing go through to the decorated generator."""
    seen: list[object] = []

    @jittered(1.0, sleep=clock.async_sleep)
    async def echo() -> AsyncGenerator[object, object]:
        try:
            value: object = "ready"
            while True:
                try:
                    value = yield value
                except KeyError as exc:
                    value = f"caught {exc.args[0]}"
                seen.append(value)
        finally:
            seen.append("closed")

    async def main() -> list[object]:
        gen = echo()
        got = [await gen.asend(None), await gen.asend("x"), await gen.athrow(KeyError("k"))]
        await gen.aclose()
        return got

    assert asyncio.run(main()) == ["ready", "x", "caught k"]
    assert seen == ["x", "caught k", "closed"]


def test_jittered_later_refuses_async_generators() -> None:
    """later() cannot schedule an async generator (nothing would iterate it)."""

    @jittered(0.01)
    async def gen() -> AsyncIterator[int]:
        yield 1

    with pytest.raises(TypeError, match="async generator"):
        gen.later()
