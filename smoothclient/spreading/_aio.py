"""Sleeping on whichever event loop runs (asyncio or trio), for the spreading helpers."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

#: The async runners sleep in steps of at most this, so their ``stop()`` is seen within it.
STOP_POLL = 1.0

__all__ = ["STOP_POLL", "async_sleep", "iterate_after", "sleep_unless"]


async def async_sleep(seconds: float) -> None:
    """Sleep on whichever event loop runs: trio when it is the running one, else asyncio."""
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            pass
        else:
            await trio.sleep(seconds)
            return
    await asyncio.sleep(seconds)


async def sleep_unless(stop: threading.Event, seconds: float) -> None:
    """Sleep ``seconds`` on the event loop, waking within :data:`STOP_POLL` once ``stop`` is set."""
    while seconds > 0 and not stop.is_set():
        step = min(seconds, STOP_POLL)
        await async_sleep(step)
        seconds -= step


async def iterate_after(
    before: Callable[[], Awaitable[Any]], inner: AsyncGenerator[Any, Any]
) -> AsyncGenerator[Any, Any]:
    """
    The items of the async generator ``inner``, once ``before()`` (an async wait) is done.

    For the decorators on async generator functions: the wait runs on the event loop when the
    iteration begins (never a blocking sleep), then every ``asend``, ``athrow`` and ``aclose``
    goes through to ``inner``.
    """
    try:
        await before()
    except BaseException:
        await inner.aclose()  # never started: closing it runs nothing
        raise
    try:
        try:
            item = await inner.__anext__()
        except StopAsyncIteration:
            return
        while True:
            try:
                sent = yield item
            except GeneratorExit:  # aclose(): closed in the finally, not thrown in
                raise
            except BaseException as exc:  # athrow(): the inner generator handles it, or not
                try:
                    item = await inner.athrow(exc)
                except StopAsyncIteration:
                    return
            else:
                try:
                    item = await inner.asend(sent)
                except StopAsyncIteration:
                    return
    finally:
        await inner.aclose()
