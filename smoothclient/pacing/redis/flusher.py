"""
What a process deferred, written when no step of its own comes to carry it.

An answer that closes nothing waits on the process's copy of a key for its next step
(``RedisCell.defer``): the request that got it costs one round trip, not two.  But a process
whose calls to an origin end (idle between bursts, done, exiting) takes no next step: its last
answers, and with them the drop of its count in flight, never reached the fleet.  The others'
ledgers counted those requests in flight until the process's counts faded
(:data:`~.keyspace.COHORT_TTL`, 30 s): a fleet of six through Redis whose first processes were
done sent two to four requests a window with nine free, for twenty windows and more.

So a deferred answer waits at most :data:`FLUSH_AFTER`: a write then carries what waits, unless
a step of the process's own did first.  On asyncio, a callback on the loop that deferred (the
write goes through its ``redis.asyncio`` client); elsewhere, one daemon thread per process,
started the first time an answer waits and made anew in a forked child.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..steps import Steps, run, run_async

__all__ = ["FLUSH_AFTER", "arm", "unchanged"]

log = logging.getLogger("smoothclient.pacing")

#: The longest a deferred answer waits for its process's next step (seconds).
FLUSH_AFTER = 0.05


def unchanged(_o: object, _s: object) -> None:
    """A step that changes nothing: a write of what the copy holds (and what waits on it)."""


class _Thread:
    """A daemon thread that calls each armed flush when it is due."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.due: list[tuple[float, int, Callable[[], object]]] = []
        self.order = itertools.count()
        self.pid = 0  # the process whose thread runs (none yet)

    def reset(self) -> None:
        """In a child just forked: no thread, nothing due, a fresh lock."""
        self.__init__()  # type: ignore[misc]

    def arm(self, flush: Callable[[], object]) -> None:
        with self.cond:
            if self.pid != os.getpid():
                self.pid = os.getpid()
                threading.Thread(target=self._run, name="smoothclient-flush", daemon=True).start()
            heapq.heappush(self.due, (time.monotonic() + FLUSH_AFTER, next(self.order), flush))
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.due or self.due[0][0] > time.monotonic():
                    self.cond.wait(self.due[0][0] - time.monotonic() if self.due else None)
                flush = heapq.heappop(self.due)[2]
            _call(flush)


def _call(flush: Callable[[], object]) -> None:
    try:
        flush()
    except Exception:  # a store that fails never breaks anything: the next step retries
        log.debug("writing deferred answers failed", exc_info=True)


_THREAD = _Thread()
os.register_at_fork(after_in_child=_THREAD.reset)
_TASKS: set[asyncio.Task[None]] = set()  # (a task the loop holds only weakly must not vanish)


class Deferring(Protocol):
    """A key's copy with answers waiting on it (``RedisCell``)."""

    deferred: list[Any]
    armed: bool
    redis_key: str

    @property
    def link(self) -> Any: ...  # pragma: no cover - a protocol

    def update(self, step: Any) -> Steps[Any]: ...  # pragma: no cover - a protocol


def _due(cell: Deferring) -> bool:
    """Whether answers still wait on ``cell`` (and Redis is there to take them)."""
    cell.armed = False
    return bool(cell.deferred) and bool(cell.link.up_for(cell.redis_key))


def arm(cell: Deferring) -> None:
    """
    Write what waits on ``cell`` in :data:`FLUSH_AFTER`, if its own next step has not.

    On a running asyncio loop, as a task of that loop; else on the flusher's thread.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a thread (sync clients, trio's worker threads)
        _THREAD.arm(lambda: run(cell.update(unchanged)) if _due(cell) else None)
        return

    async def flush() -> None:
        try:
            if _due(cell):
                await run_async(cell.update(unchanged))
        except Exception:
            log.debug("writing deferred answers failed", exc_info=True)

    def start() -> None:
        task = loop.create_task(flush())
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    loop.call_later(FLUSH_AFTER, start)
