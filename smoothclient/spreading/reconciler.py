"""The paired scheduler-reconciler (docs/window-math.md section 8): :class:`Reconciler`."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import threading
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Hashable, Iterable, Iterator
from datetime import timedelta
from typing import Any

from .._validate import forward, function, positive_int, seconds
from ._aio import refuse_generators, sleep_unless
from .spread import spread

log = logging.getLogger("smoothclient.schedule")

__all__ = ["Reconciler"]


class Reconciler:
    """
    The paired scheduler-reconciler: every tick, re-dispatch everything that should be in flight.

    Each tick (its interval jittered) calls ``find_work()`` (the authoritative query), then
    ``handle(item)`` for each item not already in flight in this process (by ``key``), spread
    over ``spread_over`` seconds.  Ticks never overlap; a failing query or item is logged and
    counted, never fatal.  ``handle`` must be idempotent: duplicates across processes (or with
    the user-triggered path) are normal.  ``concurrency`` bounds the items handled at once: a
    bound, not a pool's size (threads start only as items need them), so any positive int is
    allowed and a huge one means no bound.
    """

    def __init__(
        self,
        find_work: Callable[[], Iterable[Any] | Awaitable[Iterable[Any]] | AsyncIterable[Any]],
        handle: Callable[[Any], Any],
        *,
        every: float | timedelta,
        jitter: float = 0.1,
        spread_over: float | timedelta = 0.0,
        key: Callable[[Any], Hashable] = lambda item: item,
        concurrency: int = 8,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """
        Configure; call :meth:`tick` yourself, :meth:`start` a thread or await :meth:`run_async`.

        ``sleep`` (for tests: a fake clock's) must match the runner: a plain function for
        :meth:`tick` and :meth:`start`, an async one for :meth:`tick_async` and
        :meth:`run_async` (which run on asyncio).  ``find_work`` may be async there (a
        coroutine function or an async generator function); ``handle`` must not be a generator
        function of either kind (``TypeError``: calling it would run none of its body).
        """
        function("find_work", find_work, "returning the items")
        function("key", key, "of an item")
        function("sleep", sleep, "taking seconds", optional=True)
        self._async_handle = (
            refuse_generators(handle, "handle", "a function (sync or async) handling an item")
            == "coroutine"
        )
        self.find_work, self.handle, self.key = find_work, handle, key
        self.every = seconds("every", every, allow_zero=False)
        self.jitter = jitter
        if not 0 <= jitter < 1:
            msg = f"jitter must satisfy 0 <= jitter < 1, got {jitter!r}"
            raise ValueError(msg)
        self.spread_over = seconds("spread_over", spread_over)
        self.concurrency = positive_int("concurrency", concurrency)
        self.clock, self.sleep = forward(clock), sleep  # (a step back is no time passing)
        self.rng = rng or random.Random()
        self.in_flight: set[Hashable] = set()
        self.last_tick_at: float | None = None
        self.counts = {"ticks": 0, "dispatched": 0, "skipped": 0, "failed": 0, "query_errors": 0}
        self._lock = threading.Lock()
        self._ticking = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def seconds_since_last_tick(self) -> float | None:
        """For monitoring: how long since a tick last ran (``None`` before the first)."""
        return None if self.last_tick_at is None else self.clock() - self.last_tick_at

    def next_interval(self) -> float:
        """The jittered interval to the next tick: ``every * U(1 - jitter, 1 + jitter)``."""
        return self.every * (1 + self.jitter * (2 * self.rng.random() - 1))

    def tick(self) -> int:
        """Run one tick now; return how many items it dispatched (0 if one is running)."""
        if not self._begin_tick():
            return 0  # never overlaps itself
        try:
            try:
                found = self.find_work()
                if inspect.isawaitable(found) or hasattr(found, "__aiter__"):
                    _discard_awaitable(found)
                    msg = "find_work is async: run the reconciler with run_async() or tick_async()"
                    raise TypeError(msg)
                work = list(found)
            except TypeError:
                raise
            except Exception:
                return self._query_failed()
            fresh = self._claim(work)
            with self._released_if_not_run(fresh):
                if fresh:
                    spread(self._dispatch, fresh, **self._spread_options())
            return len(fresh)
        finally:
            self._ticking.release()

    async def tick_async(self) -> int:
        """
        Async twin of :meth:`tick`: ``find_work`` and ``handle`` may be sync or async.

        Async handlers run as tasks spread over ``spread_over`` (at most ``concurrency`` at
        once); sync ones as in :meth:`tick`, on threads, without blocking the event loop.
        """
        if not self._begin_tick():
            return 0
        try:
            try:
                work = await _collect(self.find_work())
            except Exception:
                return self._query_failed()
            fresh = self._claim(work)
            with self._released_if_not_run(fresh):
                if fresh and self._async_handle:
                    await spread(self._dispatch_async, fresh, **self._spread_options())
                elif fresh:
                    options = self._spread_options()
                    await asyncio.to_thread(lambda: spread(self._dispatch, fresh, **options))
            return len(fresh)
        finally:
            self._ticking.release()

    def _begin_tick(self) -> bool:
        if not self._ticking.acquire(blocking=False):
            return False
        self.last_tick_at = self.clock()
        self.counts["ticks"] += 1
        return True

    def _query_failed(self) -> int:
        self.counts["query_errors"] += 1
        log.warning("reconciler query failed", exc_info=True)
        return 0

    def _spread_options(self) -> dict[str, Any]:
        return {
            "window": self.spread_over,
            "concurrency": self.concurrency,
            "rng": self.rng,
            "clock": self.clock,
            "sleep": self.sleep,
        }

    def _claim(self, work: list[Any]) -> list[Any]:
        fresh = []
        with self._lock:
            for item in work:
                k = self.key(item)
                if k in self.in_flight:
                    self.counts["skipped"] += 1
                else:
                    self.in_flight.add(k)
                    fresh.append(item)
        return fresh

    @contextlib.contextmanager
    def _released_if_not_run(self, fresh: list[Any]) -> Iterator[None]:
        """
        The keys of ``fresh`` given back if their spread fails.

        Interrupted, cancelled, a sleep that raised: the items it never started would stay in
        flight, skipped by every later tick.
        """
        try:
            yield
        except BaseException:
            with self._lock:
                for item in fresh:
                    self.in_flight.discard(self.key(item))
            raise

    def _dispatch(self, item: Any) -> None:
        with self._settling(item):
            self.handle(item)

    async def _dispatch_async(self, item: Any) -> None:
        with self._settling(item):
            await self.handle(item)

    @contextlib.contextmanager
    def _settling(self, item: Any) -> Iterator[None]:
        """Count the item done or failed; release its key whatever happens (cancelled too)."""
        try:
            yield
        except Exception:
            with self._lock:
                self.counts["failed"] += 1
            log.warning("reconciler item failed", exc_info=True)
            raise
        else:
            with self._lock:
                self.counts["dispatched"] += 1
        finally:
            with self._lock:
                self.in_flight.discard(self.key(item))

    def run(self) -> None:
        """Tick until :meth:`stop`."""
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.next_interval())

    async def run_async(self, *, max_ticks: int | None = None) -> None:
        """
        Tick on the running event loop until :meth:`stop` (or ``max_ticks``), or cancel it.

        The wait between ticks uses ``sleep`` if it was given (it must then be async), else
        ``asyncio.sleep`` in steps of at most a second, so :meth:`stop` is seen within one.
        """
        self._stop.clear()
        ticks = 0
        while not self._stop.is_set() and (max_ticks is None or ticks < max_ticks):
            await self.tick_async()
            ticks += 1
            if max_ticks is None or ticks < max_ticks:
                if self.sleep is not None:
                    await self.sleep(self.next_interval())
                else:
                    await sleep_unless(self._stop, self.next_interval())

    def start(self) -> None:
        """Tick in a daemon thread."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run, name="smoothclient-reconciler", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop ticking; wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


async def _collect(found: Any) -> list[Any]:
    """The items of what ``find_work`` returned: an iterable, an awaitable of one, or async."""
    if inspect.isawaitable(found):
        found = await found
    if hasattr(found, "__aiter__"):  # an async generator function's (or any async iterable)
        return [item async for item in found]
    return list(found)


def _discard_awaitable(found: object) -> None:
    """Close a coroutine nobody will await (no "never awaited" warning)."""
    close = getattr(found, "close", None)
    if callable(close):
        close()
