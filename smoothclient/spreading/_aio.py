"""Sleeping on whichever event loop runs (asyncio or trio), for the spreading helpers."""

from __future__ import annotations

import asyncio
import sys
import threading

#: The async runners sleep in steps of at most this, so their ``stop()`` is seen within it.
STOP_POLL = 1.0

__all__ = ["STOP_POLL", "async_sleep", "sleep_unless"]


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
