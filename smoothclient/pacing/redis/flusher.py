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

And a process rarely waits those 50 ms when it is done: ``asyncio.run`` returned at its last
answer and closed the loop, the timer's write dropped with it, and the process exited; its
counts (waiting and in flight) stayed on the key for COHORT_TTL, and the others paced their
share of the rate against those phantoms (a fleet of six on express-rate-limit 10 a second:
10, 7, 4, then 1 request a second for 25 s, 3.5x the ideal time).  So what waits on a loop's
cells is written at once when that loop shuts its async generators down (:func:`drain`, from
the loop's client's keeper, with the sync client), and what waits on the thread at the
interpreter's exit (``atexit``, which a ``spawn``ed or plain process runs).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from ..state import OriginState
from ..steps import Steps, run, run_async

__all__ = ["FLUSH_AFTER", "always", "answered", "arm", "drain", "unchanged"]

log = logging.getLogger("smoothclient.pacing")

#: The longest a deferred answer waits for its process's next step (seconds).
FLUSH_AFTER = 0.05


def unchanged(_o: object, _s: object) -> None:
    """A step that changes nothing: a write of what the copy holds (and what waits on it)."""


def always(_o: object) -> bool:
    """An update that may always wait for the next step (``RedisCell.record_attempt``)."""
    return True


def answered(o: OriginState) -> None:
    """
    The key's origin answered: its state is known (a request ended, ``RedisCell.count``).

    Written at once (:func:`arm` ``at_once``), not with the next step: a cold-start probe's
    answer that taught its origin nothing else (a 429 naming its quota: the quota's scope
    learned it) left the origin unknown in Redis, and the fleet's other processes waited
    behind the probe for all of ``Pacer(probe=...)`` (250 ms) before they looked again.
    """
    o.known = True


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

    def arm(self, flush: Callable[[], object], after: float) -> None:
        with self.cond:
            if self.pid != os.getpid():
                self.pid = os.getpid()
                threading.Thread(target=self._run, name="smoothclient-flush", daemon=True).start()
            heapq.heappush(self.due, (time.monotonic() + after, next(self.order), flush))
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.due or self.due[0][0] > time.monotonic():
                    self.cond.wait(self.due[0][0] - time.monotonic() if self.due else None)
                flush = heapq.heappop(self.due)[2]
            _call(flush)

    def now(self) -> None:
        """Call every armed flush at once (the interpreter exits: its daemon thread with it)."""
        if self.pid != os.getpid():
            return
        with self.cond:
            due, self.due = self.due, []
        for _, _, flush in sorted(due):
            _call(flush)


def _call(flush: Callable[[], object]) -> None:
    try:
        flush()
    except Exception:  # a store that fails never breaks anything: the next step retries
        log.debug("writing deferred answers failed", exc_info=True)


_THREAD = _Thread()
os.register_at_fork(after_in_child=_THREAD.reset)
atexit.register(_THREAD.now)
_TASKS: set[asyncio.Task[None]] = set()  # (a task the loop holds only weakly must not vanish)
#: The cells with a flush armed on each loop, until it has written (or found nothing due).
_PENDING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, Deferring]] = (
    weakref.WeakKeyDictionary()
)


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


def arm(cell: Deferring, *, at_once: bool = False) -> None:
    """
    Write what waits on ``cell`` in :data:`FLUSH_AFTER` (or ``at_once``), unless a step did.

    On a running asyncio loop, as a task of that loop; else on the flusher's thread (the
    caller goes on: a write at once is the flusher's, not the caller's round trip).
    """
    after = 0.0 if at_once else FLUSH_AFTER
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a thread (sync clients, trio's worker threads)
        _THREAD.arm(functools.partial(_write_if_due, cell), after)
        return

    pending = _PENDING.get(loop)
    if pending is None:
        pending = _PENDING[loop] = {}
    pending[id(cell)] = cell

    async def flush() -> None:
        try:
            if _due(cell):
                await run_async(cell.update(unchanged))
        except Exception:
            log.debug("writing deferred answers failed", exc_info=True)
        if pending.get(id(cell)) is cell and not cell.armed:  # (armed again: pending still)
            del pending[id(cell)]

    def start() -> None:
        task = loop.create_task(flush())
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    loop.call_later(after, start)


def drain(loops: object) -> None:
    """
    Write at once what waits on the running loop's cells whose link's loop clients are ``loops``.

    Called as the loop shuts its async generators down, before its client closes: the loop's
    armed flushes would never run (``asyncio.run`` closes the loop at its last answer).  With
    the sync client, blocking the loop that once: ``redis.asyncio`` starts async generators of
    its own, which a loop past ``shutdown_asyncgens`` warns of and never finalizes.
    """
    try:
        pending = _PENDING.get(asyncio.get_running_loop(), {})
    except RuntimeError:  # (no loop running: nothing of a loop's waits)
        return
    for key, cell in list(pending.items()):
        if getattr(cell.link, "loops", None) is not loops:
            continue
        del pending[key]
        _call(functools.partial(_write_if_due, cell))


def _write_if_due(cell: Deferring) -> None:
    """Write what waits on ``cell`` now, with the sync driver, if anything still does."""
    if _due(cell):
        run(cell.update(unchanged))
