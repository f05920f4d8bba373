"""
``cached``'s single flight under loaders that fail (issue 37): threads and tasks that really meet.

Every caller waiting on a load gets that load's value, its exception, or the outcome of a load
of its own (after an interrupted leader); none hangs, none gets ``None`` for a value nobody
returned, and the in-flight table is empty once the callers are done.  The outcomes of the
loads are drawn by hypothesis; every wait is bounded (a hang fails, it does not block).
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import os
import threading
import types
from collections.abc import Callable, Generator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothclient.cache import JitteredTTLCache, cached
from smoothclient.testing import FakeClock

EXAMPLES = int(os.environ.get("SMOOTHCLIENT_FUZZ_EXAMPLES", "40"))
#: A load's outcome: a value, an ``Exception``, or an interrupt (a ``BaseException``).
Outcome = str
OUTCOMES = st.sampled_from(["value", "error", "interrupt"])


class Boom(Exception):
    """A loader's failure."""


class Interrupt(BaseException):
    """An interrupt raised in a loader (KeyboardInterrupt-like, but a test's own)."""


def memo_of(fn: Callable[..., Any]) -> Any:
    """The memo a ``cached`` wrapper closes over (via its ``load``)."""
    cells = {type(c.cell_contents).__name__: c.cell_contents for c in fn.__closure__ or ()}
    return cells["_Memo"]


def settle(outcome: Outcome, value: int) -> int:
    if outcome == "error":
        raise Boom(value)
    if outcome == "interrupt":
        raise Interrupt(value)
    return value


@settings(max_examples=EXAMPLES, deadline=None)
@given(outcomes=st.lists(OUTCOMES, min_size=1, max_size=6), callers=st.integers(2, 6))
def test_threads_on_one_key_get_a_loads_value_or_error(
    outcomes: list[Outcome], callers: int
) -> None:
    """Callers meet on one load; each ends with a load's value or error, or its own interrupt."""
    gate = threading.Event()
    loads: list[int] = []
    lock = threading.Lock()

    @cached(JitteredTTLCache(8, 60, timer=FakeClock(0.0)))
    def load(key: str) -> int:
        with lock:
            n = len(loads)
            loads.append(n)
        gate.wait(2.0)
        return settle(outcomes[n] if n < len(outcomes) else "value", n)

    results: list[tuple[str, Any]] = []

    def call() -> None:
        try:
            results.append(("value", load("k")))
        except Boom as exc:
            results.append(("error", exc.args[0]))
        except Interrupt as exc:
            results.append(("interrupt", exc.args[0]))

    threads = [threading.Thread(target=call, daemon=True) for _ in range(callers)]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join(5.0)
    assert not any(thread.is_alive() for thread in threads), "a caller hangs"
    assert len(results) == callers
    for kind, n in results:
        assert n in loads  # an outcome of a load that ran: never a None nobody returned
        assert kind == (outcomes[n] if n < len(outcomes) else "value")
    assert sum(kind == "interrupt" for kind, _ in results) == sum(
        outcomes[n] == "interrupt" for n in loads if n < len(outcomes)
    )  # an interrupt reaches its own caller only
    assert memo_of(load).flights == {}


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    outcomes=st.lists(st.sampled_from(["value", "error", "interrupt", "cancel"]), max_size=6),
    callers=st.integers(2, 6),
)
def test_tasks_on_one_key_get_a_loads_value_or_error(outcomes: list[Outcome], callers: int) -> None:
    """The async twin: a cancelled leader too, whose waiters load the key themselves."""
    loads: list[int] = []

    @cached(JitteredTTLCache(8, 60, timer=FakeClock(0.0)))
    async def load(key: str) -> int:
        n = len(loads)
        loads.append(n)
        await asyncio.sleep(0)
        outcome = outcomes[n] if n < len(outcomes) else "value"
        if outcome == "cancel":
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            await asyncio.sleep(0)
        return settle(outcome, n)

    async def main() -> list[BaseException | int]:
        async with asyncio.timeout(5.0):
            calls = [asyncio.ensure_future(load("k")) for _ in range(callers)]
            done = await asyncio.gather(*calls, return_exceptions=True)
        return list(done)

    results = asyncio.run(main())
    for result in results:
        if isinstance(result, asyncio.CancelledError):
            continue  # the cancelled leader itself
        n = result if isinstance(result, int) else result.args[0]
        assert n in loads
        expected = outcomes[n] if n < len(outcomes) else "value"
        kind = {int: "value", Boom: "error", Interrupt: "interrupt"}[type(result)]
        assert kind == expected
    assert sum(isinstance(r, asyncio.CancelledError) for r in results) == sum(
        outcomes[n] == "cancel" for n in loads if n < len(outcomes)
    )
    assert memo_of(load).flights == {}


@types.coroutine
def _suspend() -> Generator[None, None, None]:
    yield


def test_a_leader_closed_from_another_context_leaves_no_flight_behind() -> None:
    """
    A loading coroutine closed outside its task's context (the GC of a loop closed with it
    pending) raised ValueError resetting its context variable, and left its flight in the
    table, finished: every later call of the key spun on it forever.
    """
    calls: list[int] = []

    @cached(JitteredTTLCache(8, 60, timer=FakeClock(0.0)))
    async def load(key: str) -> int:
        calls.append(1)
        if len(calls) == 1:
            await _suspend()
        return len(calls)

    leader = load("k")
    leader.send(None)  # suspended inside the loader, its flight in the table
    contextvars.Context().run(leader.close)  # as the GC closes it: not in its context
    assert memo_of(load).flights == {}

    async def again() -> int:
        async with asyncio.timeout(2.0):
            return await load("k")

    assert asyncio.run(again()) == 2


def test_a_leader_task_destroyed_with_its_closed_loop_hands_the_key_on() -> None:
    """The same through a loop closed with the loading task pending, then collected."""
    calls: list[int] = []

    @cached(JitteredTTLCache(8, 60, timer=FakeClock(0.0)))
    async def load(key: str) -> int:
        calls.append(1)
        if len(calls) == 1:
            await asyncio.Event().wait()
        return len(calls)

    loop = asyncio.new_event_loop()
    task = loop.create_task(load("k"))
    loop.run_until_complete(asyncio.sleep(0.01))
    loop.close()
    task._log_destroy_pending = False  # type: ignore[attr-defined]  # (it is pending: said)
    del task
    gc.collect()
    assert memo_of(load).flights == {}

    async def again() -> int:
        async with asyncio.timeout(2.0):
            return await load("k")

    assert asyncio.run(again()) == 2


class _Clock:
    """A cache timer that raises on its ``fail``-th reading."""

    def __init__(self, fail: int) -> None:
        self.readings = 0
        self.fail = fail

    def __call__(self) -> float:
        self.readings += 1
        if self.readings == self.fail:
            raise Boom("clock")
        return 0.0


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("fail", range(1, 9))
def test_a_clock_failing_as_a_load_starts_leaves_no_flight_behind(
    asynchronous: bool, fail: int
) -> None:
    """A cache timer that raised as a load began left the key in flight forever (a hang)."""
    cache: JitteredTTLCache[Any, Any] = JitteredTTLCache(8, 60, timer=_Clock(fail))
    calls = 4  # the clock fails at one reading of one of them
    if asynchronous:

        @cached(cache)
        async def afn(key: str) -> str:
            return key

        async def each() -> list[str]:
            out = []
            for _ in range(calls):
                try:
                    async with asyncio.timeout(2.0):
                        out.append(await afn("k"))
                except Boom:
                    out.append("boom")
            return out

        results = asyncio.run(each())
        table = memo_of(afn).flights
    else:

        @cached(cache)
        def fn(key: str) -> str:
            return key

        results = []

        def each_sync() -> None:
            for _ in range(calls):
                try:
                    results.append(fn("k"))
                except Boom:
                    results.append("boom")

        thread = threading.Thread(target=each_sync, daemon=True)
        thread.start()
        thread.join(2.0)
        assert not thread.is_alive(), "a call hangs"
        table = memo_of(fn).flights
    assert results.count("boom") <= 1
    assert results[-1] == "k"
    assert table == {}


@pytest.mark.parametrize("outcome", ["error", "interrupt", "cancel"])
def test_a_waiter_on_another_loop_gets_the_error_or_loads_itself(outcome: str) -> None:
    """
    The leader on one event loop (a thread), a waiter on another: the leader's error reaches
    the waiter; after an interrupt or a cancellation the waiter loads the key itself.
    """
    leading, waiting = threading.Event(), threading.Event()
    loads: list[str] = []

    @cached(JitteredTTLCache(8, 60, timer=FakeClock(0.0)))
    async def load(key: str) -> str:
        loads.append(threading.current_thread().name)
        if len(loads) == 1:
            leading.set()
            while not waiting.is_set():
                await asyncio.sleep(0.001)
            await asyncio.sleep(0.01)  # the waiter is on the flight by now
            if outcome == "cancel":
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                await asyncio.sleep(0)
            settle(outcome, 0)
        return "loaded"

    results: dict[str, object] = {}

    def run(name: str) -> None:
        async def main() -> object:
            if name == "waiter":
                leading.wait(2.0)
                waiting.set()
            async with asyncio.timeout(2.0):
                return await load("k")

        try:
            results[name] = asyncio.run(main())
        except BaseException as exc:  # (what each caller ended with)
            results[name] = type(exc).__name__

    threads = [threading.Thread(target=run, args=(n,), name=n) for n in ("leader", "waiter")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5.0)
    assert not any(thread.is_alive() for thread in threads), "a caller hangs"
    expected_leader = {"error": "Boom", "interrupt": "Interrupt", "cancel": "CancelledError"}
    assert results["leader"] == expected_leader[outcome]
    if outcome == "error":
        assert (results["waiter"], loads) == ("Boom", ["leader"])
    else:
        assert (results["waiter"], loads) == ("loaded", ["leader", "waiter"])
    assert memo_of(load).flights == {}
