"""Sleeping on whichever event loop runs (asyncio or trio), for the spreading helpers."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import sys
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Literal

#: The async runners sleep in steps of at most this, so their ``stop()`` is seen within it.
STOP_POLL = 1.0

log = logging.getLogger("smoothclient")

__all__ = [
    "STOP_POLL",
    "async_sleep",
    "event_loop_sleep",
    "iterate_after",
    "kind_of",
    "refuse_generators",
    "sleep_unless",
]

Kind = Literal["coroutine", "async generator", "generator", "plain"]


def kind_of(fn: object) -> Kind:
    """
    What calling ``fn`` gives: a coroutine, an async generator, a generator, or a plain value.

    Sees through ``classmethod``/``staticmethod`` and, for a callable object (not a function,
    method, class or partial), its class's ``__call__``: an object whose ``__call__`` is
    ``async def`` is a coroutine function as far as the decorators go.
    """
    target = fn.__func__ if isinstance(fn, classmethod | staticmethod) else fn
    if not (
        inspect.isroutine(target)
        or isinstance(target, type | functools.partial)
        or not callable(target)
    ):
        target = type(target).__call__  # (callable: its class has one)
    if inspect.isasyncgenfunction(target):
        return "async generator"
    if inspect.iscoroutinefunction(target):
        return "coroutine"
    if inspect.isgeneratorfunction(target):
        return "generator"
    return "plain"


def refuse_generators(fn: object, what: str, instead: str) -> Kind:
    """
    ``fn``'s kind (:func:`kind_of`); ``TypeError`` for a generator function, or no function.

    For the helpers that call ``fn`` for its effect: a generator's body runs only as it is
    iterated, so calling it would run nothing.  ``what`` names the parameter, ``instead`` says
    what to give.
    """
    if not callable(fn):
        msg = f"{what} must be callable, not {type(fn).__name__}: give {instead}"
        raise TypeError(msg)
    kind = kind_of(fn)
    if kind in ("generator", "async generator"):
        msg = (
            f"{what} must not be {'an' if kind[0] == 'a' else 'a'} {kind} function (calling it "
            "runs none of its body): "
            f"give {instead}"
        )
        raise TypeError(msg)
    return kind


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


def event_loop_sleep(sleep: Callable[[float], Any] | None) -> Callable[[float], Awaitable[None]]:
    """
    The sleep of an async function: ``sleep`` (awaited), or :func:`async_sleep` when ``None``.

    ``time.sleep`` (any builtin) is refused with ``TypeError``: it would stall the event loop,
    then fail at its ``await``.  Another function that gives nothing to await is let be (it
    slept, blocking: logged at debug).
    """
    if sleep is None:
        return async_sleep
    if sleep is time.sleep or inspect.isbuiltin(sleep):
        msg = (
            f"sleep must be an async sleep (an async def taking seconds) for an async function, "
            f"not {getattr(sleep, '__qualname__', sleep)!r}: it would stall the event loop"
        )
        raise TypeError(msg)

    async def pause(seconds: float) -> None:
        paused = sleep(seconds)
        if inspect.isawaitable(paused):
            await paused
        else:
            log.debug("the sleep of an async function gave nothing to await (it blocked)")

    return pause


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
