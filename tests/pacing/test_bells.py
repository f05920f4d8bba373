"""Bells: a request a full crowd window holds is woken when an attempt of its origin ends."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator
from typing import Any, cast

import httpx
import pytest

import smoothclient
from smoothclient.edges.base import REAL_SLEEPS, EdgeCore
from smoothclient.edges.driver import drive, drive_async
from smoothclient.edges.flow import SEND, CallFlow, Reply, Sleep
from smoothclient.events import RecordBuilder
from smoothclient.pacing.bells import Bells

A, B = "http://a.test", "http://b.test"


def _later(seconds: float, fn: Any, *args: Any) -> threading.Thread:
    def later() -> None:
        time.sleep(seconds)
        fn(*args)

    thread = threading.Thread(target=later)
    thread.start()
    return thread


def test_a_ring_with_nobody_waiting_is_lost() -> None:
    bells = Bells()
    bells.ring(A)  # nothing to wake, nothing kept
    began = time.monotonic()
    bells.wait(A, 0.05)
    assert time.monotonic() - began >= 0.045  # the ring before did not end this wait
    assert repr(bells) == "<Bells waiting=0>"


def test_a_wait_ends_at_its_time_when_nothing_rings() -> None:
    bells = Bells()
    began = time.monotonic()
    bells.wait(A, 0.03)
    assert 0.025 <= time.monotonic() - began < 0.5
    bells.wait(A, -1.0)  # (a wait already over: at once)


def test_a_ring_wakes_the_longest_waiting_thread_of_its_origin_only() -> None:
    bells = Bells()
    woken: list[str] = []

    def wait(name: str, origin: str) -> None:
        bells.wait(origin, 0.8)
        woken.append(name)

    threads = []
    for name, origin in (("first", A), ("second", A), ("other", B)):
        threads.append(threading.Thread(target=wait, args=(name, origin)))
        threads[-1].start()
        time.sleep(0.02)  # (in this order)
    began = time.monotonic()
    bells.ring(A)
    while not woken and time.monotonic() - began < 0.5:
        time.sleep(0.001)
    time.sleep(0.05)
    assert woken == ["first"]  # one place freed: one request asks again, the oldest
    bells.ring(A)
    threads[1].join(0.5)
    assert woken == ["first", "second"]
    assert time.monotonic() - began < 0.5  # both woken long before their 0.8 s
    threads[2].join()
    assert woken[-1] == "other"  # never rung: its wait ran out


def test_an_asyncio_wait_is_woken_from_another_thread() -> None:
    bells = Bells()

    async def main() -> float:
        began = time.monotonic()
        ringer = _later(0.02, bells.ring, A)
        await bells.wait_async(A, 0.8)
        ringer.join()
        return time.monotonic() - began

    assert asyncio.run(main()) < 0.5
    assert repr(bells) == "<Bells waiting=0>"


def test_an_asyncio_wait_cancelled_leaves_no_waiter() -> None:
    bells = Bells()

    async def cancelled() -> None:
        task = asyncio.create_task(bells.wait_async(A, 5.0))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert repr(bells) == "<Bells waiting=0>"


def test_a_waiter_whose_loop_closed_is_passed_over() -> None:
    """A loop closed with a held task in it: the ring goes on to the next waiter."""
    bells = Bells()
    loop = asyncio.new_event_loop()
    task = loop.create_task(bells.wait_async(A, 5.0))
    loop.run_until_complete(asyncio.sleep(0.01))  # (the task waits on the bell now)
    loop.close()
    woken = threading.Event()

    def waits() -> None:
        bells.wait(A, 0.8)
        woken.set()

    waiter = threading.Thread(target=waits)
    waiter.start()
    time.sleep(0.02)
    bells.ring(A)  # the closed loop's waiter cannot wake: the thread is woken instead
    assert woken.wait(0.5)
    waiter.join()
    task.get_coro().close()  # (its finally leaves the bells)
    assert repr(bells) == "<Bells waiting=0>"


class _HeldFlow:
    """A call a full window holds once (``Sleep(wake=True)``), then sent."""

    origin = A
    first = None

    def __init__(self, wait: float) -> None:
        self.wait = wait

    def run(self) -> Generator[Any, Any, RecordBuilder]:
        yield Sleep(self.wait, wake=True)
        yield SEND
        return RecordBuilder()


def _drive(flow: object, bells: Bells | None, sleep: Any = time.sleep) -> None:
    drive(
        cast("CallFlow", flow),
        lambda: httpx.Response(200),
        lambda r: Reply(r.status_code, r.headers),
        lambda exc: None,
        lambda r: None,
        sleep,
        bells=bells,
    )


def test_a_held_call_asks_again_when_another_attempt_of_its_origin_ends() -> None:
    bells = Bells()
    began = time.monotonic()
    ringer = _later(0.02, _drive, _SentFlow(), bells)  # another call's attempt ends
    _drive(_HeldFlow(0.8), bells)
    ringer.join()
    assert time.monotonic() - began < 0.5


def test_an_async_held_call_asks_again_when_another_attempt_of_its_origin_ends() -> None:
    bells = Bells()

    async def send() -> httpx.Response:
        return httpx.Response(200)

    async def discard(response: httpx.Response) -> None:
        return None

    async def held() -> float:
        began = time.monotonic()
        ringer = _later(0.02, _drive, _SentFlow(), bells)
        await drive_async(
            cast("CallFlow", _HeldFlow(0.8)),
            send,
            lambda r: Reply(r.status_code, r.headers),
            lambda exc: None,
            discard,
            asyncio.sleep,
            bells=bells,
        )
        ringer.join()
        return time.monotonic() - began

    assert asyncio.run(held()) < 0.5


def test_a_wait_the_bells_cannot_end_sleeps_as_asked() -> None:
    slept: list[float] = []
    _drive(_HeldFlow(0.3), None, slept.append)  # a fake clock's sleep: never woken
    assert slept == [0.3]


class _SentFlow:
    origin = A
    first = None

    def run(self) -> Generator[Any, Any, RecordBuilder]:
        yield SEND
        return RecordBuilder()


def test_only_an_edge_sleeping_on_the_real_clock_waits_on_its_pacers_bells() -> None:
    pacer = smoothclient.Pacer()
    core = EdgeCore(None, pacer, None, smoothclient.SmoothTransport.family.access, None, None, {})
    assert core._bells(time.sleep) is pacer.bells
    assert core._bells(asyncio.sleep) is pacer.bells
    assert core._bells(lambda seconds: None) is None  # a test's fake clock
    assert time.sleep in REAL_SLEEPS
