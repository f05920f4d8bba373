"""
The drivers of a call flow (:mod:`.flow`): the loops that do what its actions ask.

:func:`drive` runs a flow in a thread, :func:`drive_async` on an event loop.  They send, sleep,
close responses and take the round trips of a shared store's steps; the flow decides
everything else.  A request a full crowd window holds waits on its pacer's bell, and each
attempt that ends rings it (:mod:`smoothclient.pacing.bells`), when the edge sleeps on the
real clock.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..events import RecordBuilder
from ..pacing.bells import Bells
from ..pacing.steps import Trip, answer, answer_async, boxed
from .flow import DISCARD, SEND, Action, CallFlow, Failure, Reply, Sleep

__all__ = ["Finished", "Offload", "drive", "drive_async"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Finished(Generic[R]):
    """How a driven call ended: the last response (or ``None``), the last error, the record."""

    response: R | None
    error: BaseException | None
    record: RecordBuilder

    def unwrap(self) -> R:
        """Return the last response, or raise the last error."""
        if self.error is not None:
            raise self.record.attach_to(self.error)
        assert self.response is not None
        return self.response


def drive(
    flow: CallFlow,
    send: Callable[[], R],
    reply_of: Callable[[R], Reply],
    failure_of: Callable[[Exception], Failure | None],
    discard: Callable[[R], bool | None],
    sleep: Callable[[float], object],
    *,
    last: R | None = None,
    error: BaseException | None = None,
    bells: Bells | None = None,
) -> Finished[R]:
    """
    Run ``flow`` synchronously; return the last response or exception and the record.

    ``last`` / ``error``: what the edge's fast lane already got (``flow.first``).
    ``discard(response)`` releases a response; ``False`` when its body is gone (unread).
    ``bells``: the pacer's, when ``sleep`` is the real clock's: each attempt that ends rings
    its origin's, and a request a full crowd window holds waits on it (see
    :mod:`~smoothclient.pacing.bells`).
    """
    gen = flow.run()
    origin = flow.origin
    try:
        try:
            action = next(gen)
        finally:
            if bells is not None and flow.first is not None:
                bells.ring(origin)  # (the fast lane's attempt, learned from by now)
        while True:
            if action is SEND:
                try:
                    last, error = send(), None
                    result: Reply | Failure = reply_of(last)
                except Exception as exc:
                    failure = failure_of(exc)
                    if failure is None:
                        raise
                    last, error, result = None, exc, failure
                try:
                    action = gen.send(result)  # (learned from: the call may end here)
                finally:
                    if bells is not None:
                        bells.ring(origin)
            elif action is DISCARD:
                kept = discard(last) if last is not None else None
                action = gen.send(kept)
            elif isinstance(action, Trip):  # a shared store's round trip, taken here
                action = answer(gen, action)
            else:
                assert isinstance(action, Sleep)
                if action.wake and bells is not None:
                    bells.wait(origin, action.seconds)
                else:
                    sleep(action.seconds)
                action = next(gen)
    except StopIteration as stop:
        return Finished(last, error, stop.value)
    finally:
        gen.close()


#: Runs a step of the call's own code (the flow, the fast lane) somewhere else than in the
#: event loop's thread: a worker thread, when the pacer's store does blocking I/O there.
Offload = Callable[[Callable[[], Any]], Awaitable[Any]]


def _boxed_here(gen: Generator[Action, Any, Any], fn: Callable[[], Action]) -> tuple[bool, Any]:
    """:func:`~smoothclient.pacing.store.boxed`, the store's round trips taken here (a thread)."""

    def taken() -> Action:
        action = fn()
        while isinstance(action, Trip):
            action = answer(gen, action)
        return action

    return boxed(taken)


async def drive_async(
    flow: CallFlow,
    send: Callable[[], Awaitable[R]],
    reply_of: Callable[[R], Reply],
    failure_of: Callable[[Exception], Failure | None],
    discard: Callable[[R], Awaitable[bool | None]],
    sleep: Callable[[float], Awaitable[object]],
    *,
    last: R | None = None,
    error: BaseException | None = None,
    offload: Offload | None = None,
    bells: Bells | None = None,
) -> Finished[R]:
    """
    Async twin of :func:`drive` (``bells``: only on asyncio).

    The flow's own steps (its pacer calls) run right here, in the event loop, and the round
    trips of a shared store's steps are awaited on it (``redis.asyncio``: the loop never
    blocks; a failed or slow trip is thrown into the step, which falls back).  ``offload``:
    where the flow's steps run instead, round trips and all, e.g.
    :func:`~smoothclient.pacing.store.in_thread` for a shared store on trio
    (``redis.asyncio`` runs on asyncio only).
    """
    gen = flow.run()

    async def advance(fn: Callable[[], Action]) -> tuple[bool, Any]:
        if offload is not None:
            taken: tuple[bool, Any] = await offload(functools.partial(_boxed_here, gen, fn))
            return taken
        going, action = boxed(fn)
        while going and isinstance(action, Trip):  # a failed trip: the step falls back
            going, action = await answer_async(gen, action)
        return going, action

    origin = flow.origin
    try:
        going, action = await advance(gen.__next__)
        if bells is not None and flow.first is not None:
            bells.ring(origin)
        while going:
            if action is SEND:
                try:
                    last, error = await send(), None
                    result: Reply | Failure = reply_of(last)
                except Exception as exc:
                    failure = failure_of(exc)
                    if failure is None:
                        raise
                    last, error, result = None, exc, failure
                going, action = await advance(functools.partial(gen.send, result))
                if bells is not None:
                    bells.ring(origin)
                continue
            if action is DISCARD:
                kept = await discard(last) if last is not None else None
                going, action = await advance(functools.partial(gen.send, kept))
                continue
            assert isinstance(action, Sleep)
            if action.wake and bells is not None:
                await bells.wait_async(origin, action.seconds)
            else:
                await sleep(action.seconds)
            going, action = await advance(gen.__next__)
        return Finished(last, error, action)
    finally:
        gen.close()
