"""
Bells: a request that a full crowd window holds is woken when an attempt of its origin ends.

A request held by a full window (a concurrency limit, :mod:`.crowd`) asks the pacer again
after a poll: a few milliseconds in memory, a quarter of a service time through a shared
store, where each ask is a round trip.  Most places such a request waits for are freed by
its own process's answers: each process of a fleet has requests in flight and more waiting.
Polled, a freed place stayed empty for about half a poll: a fleet of twelve through Redis,
against a limit of five requests each served in 100 ms, kept four of the five places busy
(its server's log), and took 1.3x the ideal time.

So the edge that ends an attempt rings its origin's bell, and the request of that origin
that has waited longest (in this process, on this pacer) asks again at once.  A ring is only
news: the woken request asks the pacer, which may hold it again (another process took the
place); a ring that finds nobody waiting is lost; every wait still ends at its poll.  Only
edges that sleep on the real clock wait on a bell (a test's fake clock is never woken).

One bell per pacer, made with it (never shared between pacers nor processes); a ring is a
dict's truth when nobody waits (the hot path of every request that ends).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

__all__ = ["Bells"]

#: A waiter: wakes its request; ``False`` when it could not (already woken, its loop closed).
Waiter = Callable[[], bool]


class Bells:
    """Per origin, the requests that wait for a place, woken one per ring (oldest first)."""

    __slots__ = ("_lock", "_waiting")

    def __init__(self) -> None:
        """No request waiting."""
        self._lock = threading.Lock()
        self._waiting: dict[str, dict[Waiter, None]] = {}  # (oldest first)

    def __repr__(self) -> str:
        """How many requests wait, in all."""
        return f"<Bells waiting={sum(map(len, self._waiting.values()))}>"

    def ring(self, origin: str) -> None:
        """An attempt to ``origin`` ended: the request of it that waited longest asks again."""
        if not self._waiting:  # (nobody waits anywhere: no lock)
            return
        with self._lock:
            queue = self._waiting.get(origin)
            while queue:
                waiter = next(iter(queue))
                del queue[waiter]
                if waiter():
                    break
            if queue is not None and not queue:
                del self._waiting[origin]

    def wait(self, origin: str, seconds: float) -> None:
        """Sleep ``seconds`` (this thread), or less: until a ring of ``origin`` wakes it."""
        event = threading.Event()

        def wake() -> bool:
            event.set()
            return True

        self._enter(origin, wake)
        try:
            event.wait(max(0.0, seconds))
        finally:
            self._leave(origin, wake)

    async def wait_async(self, origin: str, seconds: float) -> None:
        """:meth:`wait` on the running asyncio loop (a ring may come from any thread)."""
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()

        def wake() -> bool:
            if woken.done():
                return False
            try:
                loop.call_soon_threadsafe(_resolve, woken)
            except RuntimeError:  # its loop is closed
                return False
            return True

        timer = loop.call_later(max(0.0, seconds), _resolve, woken)
        self._enter(origin, wake)
        try:
            await woken
        finally:
            timer.cancel()
            self._leave(origin, wake)

    def _enter(self, origin: str, waiter: Waiter) -> None:
        with self._lock:
            queue = self._waiting.get(origin)
            if queue is None:
                queue = self._waiting[origin] = {}
            queue[waiter] = None

    def _leave(self, origin: str, waiter: Waiter) -> None:
        with self._lock:
            queue = self._waiting.get(origin)
            if queue is None:
                return
            queue.pop(waiter, None)  # (woken: a ring took it out)
            if not queue:
                del self._waiting[origin]


def _resolve(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)
