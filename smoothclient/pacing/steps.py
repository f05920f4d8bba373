"""
Steps that may do I/O, written once for every driver (docs/store.md section 1).

A step is a generator that yields :class:`Trip` requests (a shared store's round trips) and
receives their replies (:data:`Steps`); a store with no I/O answers at once, yielding
nothing (:func:`done`).  Two drivers take the trips: :func:`run`, in this thread with a sync
client (what a tracker's plain methods use), and :func:`run_async`, awaited on the running
event loop (what async edges on asyncio use: the loop never blocks).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator
from typing import Any, NamedTuple, Protocol, TypeAlias, TypeVar

__all__ = [
    "Carrier",
    "Steps",
    "Trip",
    "answer",
    "answer_async",
    "boxed",
    "done",
    "in_thread",
    "on_asyncio",
    "run",
    "run_async",
]

T = TypeVar("T")


class Carrier(Protocol):
    """What takes a store's round trips: the sync way and the async way (see :class:`Trip`)."""

    def send(self, trip: Trip) -> Any:
        """The reply to ``trip``, here and now (bounded); raises if the store failed."""

    async def send_async(self, trip: Trip) -> Any:
        """The reply to ``trip`` without blocking the event loop (bounded); raises likewise."""


class Trip(NamedTuple):
    """One round trip a step asks for: ``op`` (a script's name) on ``keys`` with ``args``."""

    carrier: Carrier
    op: str
    keys: list[str]
    args: list[Any]


#: A step written once for every driver: yields trips, receives replies, returns its result.
#: A failed trip is thrown into it (the carrier's exception), so it falls back where it stands.
Steps: TypeAlias = Generator[Trip, Any, T]


def done(value: T) -> Steps[T]:
    """A step that needs no round trip: ``value`` at once."""
    return value
    yield  # pragma: no cover - a generator that yields nothing


def answer(steps: Generator[Any, Any, Any], trip: Trip) -> Any:
    """
    Take ``trip`` with its carrier's sync client: what ``steps`` yields next.

    A failed trip is thrown into ``steps`` (the step itself decides: falls back, never
    raises).  Every sync driver takes its trips this way (:func:`run`, the call flow's).
    """
    try:
        reply = trip.carrier.send(trip)
    except Exception as exc:
        return steps.throw(exc)
    return steps.send(reply)


def run(steps: Steps[T]) -> T:
    """Drive ``steps`` in this thread: each trip by its carrier's sync client."""
    try:
        trip = next(steps)
    except StopIteration as stop:  # answered at once (a store with no I/O): nothing to close
        first: T = stop.value
        return first
    try:
        while True:
            trip = answer(steps, trip)
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        steps.close()


def boxed(fn: Callable[[], Any]) -> tuple[bool, Any]:
    """
    ``(True, what fn() yields next)``, or ``(False, the result)`` when the generator ends.

    No ``StopIteration`` may leave a coroutine (it turns into ``RuntimeError``) or cross a
    thread: what advances a generator from one goes through this.
    """
    try:
        return True, fn()
    except StopIteration as stop:
        return False, stop.value


async def answer_async(steps: Generator[Any, Any, Any], trip: Trip) -> tuple[bool, Any]:
    """
    Take ``trip`` on the running event loop: what ``steps`` yields next (:func:`boxed`).

    The async way of :func:`answer`: awaited on the carrier's loop client, never blocking
    the loop; a failed trip is thrown into ``steps``.
    """
    try:
        reply = await trip.carrier.send_async(trip)
    except Exception as exc:
        return boxed(functools.partial(steps.throw, exc))
    return boxed(functools.partial(steps.send, reply))


async def run_async(steps: Steps[T]) -> T:
    """Drive ``steps`` on the running event loop: each trip awaited, never blocking it."""
    try:
        going, value = boxed(steps.__next__)
        while going:
            going, value = await answer_async(steps, value)
        result: T = value
        return result
    finally:
        steps.close()  # cancelled mid-trip: the step's own cleanup runs (GeneratorExit)


def on_asyncio() -> bool:
    """Whether this runs on an asyncio loop (``redis.asyncio`` runs there, not on trio)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def in_thread(fn: Callable[[], T]) -> T:
    """
    ``fn()`` in a worker thread: a shared store's round trips, off an event loop they would block.

    Where :func:`run_async` cannot take them (trio: ``redis.asyncio`` runs on asyncio only).
    """
    try:
        import anyio.to_thread  # httpx brings it
    except ImportError:  # pragma: no cover - trio without httpx
        import trio

        result: T = await trio.to_thread.run_sync(fn)
        return result
    return await anyio.to_thread.run_sync(fn)
