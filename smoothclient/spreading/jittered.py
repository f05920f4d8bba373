"""``@jittered``: wait a uniform random delay before each call, or schedule it with ``.later()``."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, Protocol, TypeVar, overload

import wrapt

from .._validate import forward, function, positive_int, seconds
from ._aio import async_sleep, event_loop_sleep, iterate_after, kind_of

P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)
R = TypeVar("R")

__all__ = ["AsyncJittered", "Jittered", "Scheduler", "jittered"]

log = logging.getLogger("smoothclient")


class Scheduler:
    """
    Runs sync calls at given times with one timer thread and a small worker pool.

    However many calls are pending, they cost heap entries, not threads.
    """

    def __init__(self, *, workers: int = 8, clock: Callable[[], float] = time.monotonic) -> None:
        """Create an idle scheduler; its threads start on first use."""
        self._workers = positive_int("workers", workers)
        self._clock = forward(clock)  # a step back is no time passing: no call held past its delay
        self._heap: list[tuple[float, int, Future[Any], Callable[[], Any]]] = []
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def call_at(self, when: float, fn: Callable[[], Any]) -> Future[Any]:
        """Run ``fn`` at ``when`` (on this scheduler's clock); the future has its result."""
        future: Future[Any] = Future()
        with self._cond:
            if self._closed:
                msg = "the scheduler is shut down"
                raise RuntimeError(msg)
            heapq.heappush(self._heap, (when, next(self._counter), future, fn))
            if self._thread is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="smoothclient")
                self._thread = threading.Thread(
                    target=self._loop, name="smoothclient-scheduler", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return future

    def pending(self) -> int:
        """Calls waiting for their time."""
        with self._cond:
            return len(self._heap)

    def _loop(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # the clock raised: its calls fail with that, none left pending
            log.debug("the scheduler's clock raised: its pending calls fail", exc_info=True)
            with self._cond:
                self._closed = True
                pending, self._heap = self._heap, []
            for _, _, future, _ in pending:
                if future.set_running_or_notify_cancel():
                    future.set_exception(exc)

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > self._clock()):
                    timeout = self._heap[0][0] - self._clock() if self._heap else None
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, future, fn = heapq.heappop(self._heap)
            if future.set_running_or_notify_cancel():
                assert self._pool is not None
                try:
                    self._pool.submit(_run_into, future, fn)
                except RuntimeError as exc:  # the interpreter is shutting down: no new threads
                    future.set_exception(exc)
                    self.shutdown()
                    return

    def shutdown(self) -> None:
        """Cancel what is pending and stop the threads."""
        with self._cond:
            self._closed = True
            pending, self._heap = self._heap, []
            self._cond.notify()
        for _, _, future, _ in pending:
            future.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=False)


def _run_into(future: Future[Any], fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except BaseException as exc:
        future.set_exception(exc)


_default_scheduler: Scheduler | None = None
_default_lock = threading.Lock()


def _scheduler() -> Scheduler:
    global _default_scheduler
    with _default_lock:
        if _default_scheduler is None:
            _default_scheduler = Scheduler()
        return _default_scheduler


class _JitteredBound(wrapt.BoundFunctionWrapper[Any, Any]):
    def later(self, *args: Any, **kwargs: Any) -> Any:
        """Schedule the bound call after a jittered delay without blocking."""
        parent: _JitteredFunction = self._self_parent
        return parent._later(self.__wrapped__, args, kwargs)


class _JitteredFunction(wrapt.FunctionWrapper[Any, Any]):
    __bound_function_wrapper__ = _JitteredBound
    _self_draw: Callable[[], float]
    _self_scheduler: Scheduler | None
    _self_tasks: set[asyncio.Task[Any]]  # until done: the loop keeps only weak references

    def later(self, *args: Any, **kwargs: Any) -> Any:
        """Schedule the call after a jittered delay without blocking the caller."""
        return self._later(self.__wrapped__, args, kwargs)

    def _later(self, target: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        kind = kind_of(target)
        if kind == "async generator":
            msg = "later() cannot schedule an async generator: iterate it (it waits first)"
            raise TypeError(msg)
        delay = self._self_draw()
        if kind == "coroutine":

            async def run() -> Any:
                await async_sleep(delay)
                return await target(*args, **kwargs)

            task = asyncio.get_running_loop().create_task(run())
            self._self_tasks.add(task)  # a caller may drop it (fire and forget): keep it alive
            task.add_done_callback(self._self_tasks.discard)
            return task
        scheduler: Scheduler = self._self_scheduler or _scheduler()
        return scheduler.call_at(scheduler._clock() + delay, lambda: target(*args, **kwargs))


class Jittered(Protocol[P, R]):
    """A ``@jittered`` function: call it (after a jittered wait), or schedule it with ``later``."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Wait a jittered delay, then call."""

    def later(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Schedule the call after a jittered delay; its future has the result."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """Bind as a method."""


class AsyncJittered(Protocol[P, R_co]):
    """A ``@jittered`` coroutine function: await it, or schedule it as a task with ``later``."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R_co]:
        """Wait a jittered delay, then call."""

    def later(self, *args: P.args, **kwargs: P.kwargs) -> asyncio.Task[R_co]:
        """Schedule the call after a jittered delay as a task on the running loop."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """Bind as a method."""


class _Decorator(Protocol):
    @overload
    def __call__(  # type: ignore[overload-overlap]  # a coroutine function: the async form
        self, fn: Callable[P, Coroutine[Any, Any, R]]
    ) -> AsyncJittered[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R]) -> Jittered[P, R]: ...


def jittered(
    max_wait: float,
    min_wait: float = 0.0,
    *,
    rng: random.Random | None = None,
    sleep: Callable[[float], Any] | None = None,
    scheduler: Scheduler | None = None,
) -> _Decorator:
    """
    Wait a uniform random delay in ``[min_wait, max_wait)`` before each call.

    ``fn.later(*args, **kwargs)`` schedules the call after such a delay without blocking: a
    :class:`concurrent.futures.Future` from a :class:`Scheduler` (one timer thread) for sync
    functions, an :class:`asyncio.Task` on the running loop for async ones.  Both have
    ``cancel()`` and the result.

    An async generator function waits (on the event loop) before its first item.
    """
    if callable(max_wait):
        msg = (
            "jittered needs its bounds: write @jittered(max_wait) or @jittered(max_wait, "
            "min_wait) (seconds), not a bare @jittered"
        )
        raise TypeError(msg)
    hi = seconds("max_wait", max_wait)
    lo = seconds("min_wait", min_wait)
    if lo > hi:
        msg = f"min_wait ({lo}) must not exceed max_wait ({hi})"
        raise ValueError(msg)
    function("sleep", sleep, "taking seconds", optional=True)
    generator = rng or random.Random()

    def draw() -> float:
        return lo + (hi - lo) * generator.random()

    def decorate(fn: Callable[..., Any]) -> Any:
        kind = kind_of(fn)
        pause = event_loop_sleep(sleep) if kind in ("async generator", "coroutine") else None
        if pause is not None and kind == "async generator":

            def agen_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                assert pause is not None
                return iterate_after(lambda: pause(draw()), wrapped(*args, **kwargs))

            wrapper: Callable[..., Any] = agen_wrapper
        elif pause is not None:

            async def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                assert pause is not None
                await pause(draw())
                return await wrapped(*args, **kwargs)

            wrapper = async_wrapper
        else:

            def sync_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                (sleep or time.sleep)(draw())
                return wrapped(*args, **kwargs)

            wrapper = sync_wrapper
        result = _JitteredFunction(fn, wrapper)
        result._self_draw = draw
        result._self_scheduler = scheduler
        result._self_tasks = set()
        return result

    return decorate
