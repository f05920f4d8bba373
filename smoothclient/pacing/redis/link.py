"""
The connection to Redis of the shared store (:mod:`.store`): clients, scripts, health, clock.

- **Clients** (made in :mod:`.clients`: servers, clusters, Sentinel): a sync client, one
  connection pool for every thread, and, when a loop first asks, an asyncio client per event
  loop (a ``redis.asyncio`` client belongs to the loop it first ran on), closed when the loop
  shuts down (:class:`LoopClients`).
- **Scripts** touch one key each (so one hash slot of a cluster): ``EVALSHA``, and ``EVAL``
  when the node has not the script yet (both routed by the key to the node owning its slot;
  ``SCRIPT LOAD`` would go to every master, and fail with any one of them down).
- **Round trips** (:class:`~..store.Trip`) run the two Lua scripts, each bounded by the
  store's timeout: :meth:`Link.send` with the sync client, :meth:`Link.send_async` on the
  running loop's client.  A failure marks Redis down for a jittered backoff (one warning an
  outage); the store falls back meanwhile.  A cluster's master that does not answer is
  marked down alone (:mod:`.nodes`): the steps on its keys fall back, the others go on.
- **The fleet's clock** is the server's ``TIME``, read with every round trip
  (:meth:`Link.tick`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import random
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from ..steps import Trip, on_asyncio
from .clients import Lazy, async_like, clients_for
from .flusher import drain
from .nodes import MAX_PAUSE, Nodes, node_of, pause
from .scripts import LOST, READ, SAVE, AsyncClusterScript, AsyncScript, ClusterScript, Script, named

__all__ = [
    "CLOCK_READINGS",
    "MAX_PAUSE",
    "STARVED_FOR",
    "TIMEOUT",
    "Link",
    "LoopClients",
    "Starved",
    "connect",
]

log = logging.getLogger("smoothclient.pacing")
T = TypeVar("T")

#: The longest a store waits on Redis for one step, by default (seconds).
TIMEOUT = 0.05
#: At most this many readings of the server's ``TIME`` set the fleet's clock at first.
CLOCK_READINGS = 4
#: An outage this soon after the last one ended is the same one (a restart flapping): it is
#: logged at debug level, so one restart makes one warning and one "back", whatever the driver.
QUIET_WARNINGS = 10.0


class _Down(Exception):
    """Redis is not to be asked now (down, or a step ran out of time)."""


class _Busy(_Down):
    """
    A round trip failed for load, not an outage (see :func:`busy`): Redis is still up.

    The step is not taken in this process's memory (a slot granted there is one Redis never
    hears of: another process, or this one a moment later, grants it again); it is answered
    as a store busy with others' writes (:meth:`~.tracker.RedisCell.update`).
    """


class Starved(TimeoutError):
    """
    A round trip timed out on an event loop that ran its timer late by more than the bound.

    The loop, not Redis, was slow (a thousand tasks on one loop, a loaded host): whether Redis
    answered in time is unknown, so it is load (for at most :data:`STARVED_FOR`), not an outage.
    """


#: Round trips timing out on a starved loop are load for at most this long (seconds) without
#: an answer from Redis; then an outage (a Redis that hangs on a busy loop is still found out).
STARVED_FOR = 1.0


def _is_cluster(client: Any) -> bool:
    """Whether ``client`` is a sync ``RedisCluster`` (or one made when first used)."""
    return isinstance(client, Lazy) or any(
        cls.__name__ == "RedisCluster" for cls in type(client).__mro__
    )


def _unmapped(client: Any) -> bool:
    """
    Whether ``client`` is a cluster's asyncio client that has not read the table of slots.

    Its first trip connects to a node and reads the table before it runs the script: bounded
    by the store's timeout, it timed out on a loaded host (the store then paced from memory
    until its backoff ended), so the first trips are given as long as a connection.
    """
    manager = getattr(client, "nodes_manager", None)
    return manager is not None and not manager.slots_cache


async def _closing(
    client: Any, gone: Callable[[], object], loops: object = None
) -> AsyncIterator[None]:
    """
    Closes ``client`` when its event loop shuts its async generators down (``asyncio.run``).

    What waits on the loop's cells of ``loops`` (its :class:`LoopClients`) is written first.
    """
    try:
        yield
    finally:
        drain(loops)
        gone()
        if hasattr(client, "nodes_manager"):  # a cluster's client closes its nodes' pools
            await client.aclose()
        else:
            await client.aclose(close_connection_pool=True)
            manager = getattr(client.connection_pool, "sentinel_manager", None)
            for watching in getattr(manager, "sentinels", ()):  # the Sentinels it asked
                await watching.aclose()


async def _within(awaitable: Awaitable[T], timeout: float) -> T:
    """
    ``await awaitable``, cancelled after ``timeout`` s (``TimeoutError``), like ``asyncio.timeout``.

    But the expiry takes one more turn of the loop before it cancels: a loop that was
    starved (a loaded host) runs the timer and the socket's callback in one turn, timer
    first, and ``asyncio.timeout`` then dropped a reply already read (Redis taken for down,
    the process pacing alone for a while).  A sync client's socket timeout has no such race.
    A cancel the awaitable swallowed or turned into another error is taken back
    (``uncancel``): left counted, it turned the task's next expiry into a ``CancelledError``
    that ended the caller's call.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    state = [False, False, False]  # finished, expired, expired late (a starved loop)
    due = loop.time() + timeout

    def cancel() -> None:
        if not state[0]:
            state[1] = True
            state[2] = loop.time() - due > timeout
            task.cancel()

    timer = loop.call_at(due, loop.call_soon, cancel)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if state[1]:
            state[1] = False
            if task.uncancel() == 0:
                raise (Starved if state[2] else TimeoutError) from None
        raise
    finally:
        state[0] = True
        timer.cancel()
        if state[1]:  # the awaitable swallowed our cancel, or turned it into another error:
            task.uncancel()  # take the request back, or the task's next timeout misfires


class LoopClients:
    """
    One ``redis.asyncio`` client per event loop, made when the loop first asks.

    A ``redis.asyncio`` client belongs to the loop it first ran on, so a pacer used from
    several loops (threads each running one, or one ``asyncio.run`` after another) gives each
    its own client, and closes it when that loop shuts down (``asyncio.run`` and
    ``loop.shutdown_asyncgens()`` finalize the loop's async generators: one of them closes
    it); a loop's entry goes with the loop.  A ``given`` client (a ready
    ``redis.asyncio.Redis``) serves the first loop that asks, and is never closed here.
    """

    def __init__(self, make: Callable[[], Any], given: Any = None) -> None:
        """``make()``: a new client; ``given``: the caller's own, for its loop."""
        self.make = make
        self.given = given
        self._given_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, ...]] = (
            weakref.WeakKeyDictionary()
        )
        self._turns: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()

    def node_of(self, key: str) -> str | None:
        """The cluster node serving ``key`` in the running loop's client's table, if any."""
        try:
            entry = self._loops.get(asyncio.get_running_loop())
        except RuntimeError:  # no loop running: the sync client's table is the one
            return None
        return None if entry is None else node_of(entry[0].client, key)

    def turn(self, key: str) -> asyncio.Lock:
        """The running loop's turn of ``key``: its tasks take one step on the key at a time."""
        loop = asyncio.get_running_loop()
        turns = self._turns.get(loop)
        if turns is None:
            turns = self._turns[loop] = {}
        lock = turns.get(key)
        if lock is None:
            if len(turns) > 4096:  # forget the idle ones: a key's lock is cheap to make again
                for idle in [k for k, v in turns.items() if not v.locked()]:
                    del turns[idle]
            lock = turns[key] = asyncio.Lock()
        return lock

    def taken(self, key: str) -> bool:
        """Whether a task of the running loop holds its turn of ``key`` (no loop: False)."""
        loop = asyncio.events._get_running_loop()
        turns = None if loop is None else self._turns.get(loop)
        lock = None if turns is None else turns.get(key)
        return lock is not None and lock.locked()

    async def scripts(self) -> tuple[AsyncScript, AsyncScript]:
        """The running loop's scripts: ``SAVE`` and ``READ`` on its client."""
        loop = asyncio.get_running_loop()
        entry = self._loops.get(loop)
        if entry is None:
            if self.given is not None and self._given_loop is None:
                self._given_loop = weakref.ref(loop)
                client, keeper = self.given, None
            else:
                client = self.make()
                keeper = _closing(client, functools.partial(self._loops.pop, loop, None), self)
                await keeper.__anext__()  # the loop finalizes it at shutdown: client closed
            script = AsyncClusterScript if hasattr(client, "nodes_manager") else AsyncScript
            entry = (script(client, SAVE), script(client, READ), keeper)
            self._loops[loop] = entry
        return entry[0], entry[1]


class Link:
    """
    The connection to Redis: its scripts, its health and the fleet's clock.

    Args:
        client: a ``redis.Redis`` client (its pool shared by every thread).
        timeout: the longest one step waits on Redis.
        rng: randomness for the reconnect backoff.
        loops: the ``redis.asyncio`` clients of each event loop (default: made like ``client``).

    It carries a step's round trips (:class:`~smoothclient.pacing.store.Trip`): :meth:`send`
    with ``client`` (sync edges, and async edges on trio, in worker threads), and
    :meth:`send_async` with the running loop's ``redis.asyncio`` client (async edges on
    asyncio).  Both note failures the same way and feed one fleet clock (:meth:`tick`).
    """

    def __init__(
        self,
        client: Any,
        timeout: float = TIMEOUT,
        rng: random.Random | None = None,
        loops: LoopClients | None = None,
    ):
        """
        Register the scripts and set the clock against the server's ``TIME``.

        Made on an event loop's thread, it asks nothing: the sync client would block the loop
        for the readings.  The wall clock stands in until the first step's read, whose
        ``TIME`` reading sets it (:meth:`tick`).
        """
        self.client = client
        self.loops = loops or LoopClients(functools.partial(async_like, client, timeout))
        self.timeout = timeout
        self.rng = rng or random.Random()
        script = ClusterScript if _is_cluster(client) else Script
        self.save = script(client, SAVE)
        self.read = script(client, READ)
        self.down_until = -math.inf
        self.failures = 0
        self.nodes = Nodes(self.rng)  # a cluster's: a master away pauses its keys only
        self.down_since: float | None = None
        self.starved_since: float | None = None  # the first of trips timing out on a busy loop
        self.back_at = -math.inf  # when Redis was last back after an outage warned of
        self.warned = False  # the current outage was warned of
        self._lock = threading.Lock()
        self.offset = time.time() - time.monotonic()  # the wall clock, until Redis says
        self._adjusted = time.monotonic()
        self._stepped = False
        if not on_asyncio():
            with contextlib.suppress(_Down):  # if so, the wall clock stands in until Redis answers
                self._step_clock()

    def forked(self) -> None:
        """In a child just forked: fresh locks (redis-py makes its connections anew itself)."""
        self._lock = threading.Lock()
        self.nodes.forked()
        if isinstance(self.client, Lazy):  # another thread may have been making it
            self.client.forked()

    def _step_clock(self) -> None:
        """
        Set the clock by a few readings of ``TIME``: the offset that all of them allow.

        Each reading bounds it by its round trip; one slow trip (a fleet's processes all
        starting at once) left the clock milliseconds off for a long time.
        """
        low, high = -math.inf, math.inf
        for _ in range(CLOCK_READINGS):
            sent = time.monotonic()
            seconds, micros = self.call(lambda: self.client.time())
            received = time.monotonic()
            server = float(seconds) + float(micros) / 1e6
            low2, high2 = max(low, server - received), min(high, server - sent)
            if low2 > high2:  # the clocks disagree with an earlier reading: trust the latest
                low2, high2 = server - received, server - sent
            low, high = low2, high2
            if high - low < 0.001:
                break
        with self._lock:
            self.offset, self._stepped = (low + high) / 2, True
            self._adjusted = time.monotonic()

    def clock(self) -> float:
        """The fleet's time: Redis's ``TIME``, read through this process's monotonic clock."""
        return time.monotonic() + self.offset

    @property
    def up(self) -> bool:
        """Whether Redis may be asked now."""
        return time.monotonic() >= self.down_until

    def up_for(self, key: str) -> bool:
        """Whether Redis may be asked now about ``key`` (and its cluster node, if away)."""
        if not self.nodes.until:
            return self.up
        return self.up and self.nodes.up(node_of(self.client, key) or self.loops.node_of(key))

    def call(self, fn: Callable[[], T], key: str | None = None) -> T:
        """``fn()`` against Redis, or :class:`_Down` (and the outage noted) if it fails."""
        if not self.up:
            raise _Down
        try:
            result = fn()
        except Exception as exc:  # a store that fails never breaks a call
            if self._failed(exc, node_of(self.client, key)):
                raise _Busy from exc
            raise _Down from exc
        self._back(time.monotonic(), node_of(self.client, key))
        return result

    def send(self, trip: Trip) -> Any:
        """The reply to ``trip`` (a script run with the sync client), or :class:`_Down`."""
        if trip.op == "turn":  # a sync driver on a loop's thread: no turn to wait for
            return None
        script = self.save if trip.op == "save" else self.read
        return self.call(lambda: script(keys=trip.keys, args=trip.args), trip.keys[0])

    async def send_async(self, trip: Trip) -> Any:
        """
        The reply to ``trip`` from the running loop's ``redis.asyncio`` client, or :class:`_Down`.

        Bounded by the timeout (:func:`_within`); the loop runs on meanwhile.  The first trip
        of a loop's client is given as long as a connection: it connects and makes the
        connection's handshake (a fleet of twelve asyncio processes starting together on two
        cores timed out on it at 50 ms, 11 of the 12, and paced from memory, each alone, while
        the fleet's first wave went out).  A ``"turn"``
        trip is no round trip: the loop's lock of the key, acquired (or ``TimeoutError``),
        waited for as long as a connection (:func:`turn_wait`).
        """
        if trip.op == "turn":
            lock = self.loops.turn(trip.keys[0])
            await _within(lock.acquire(), turn_wait(self.timeout))
            return lock
        if not self.up:
            raise _Down
        try:
            save, read = await self.loops.scripts()
            script = save if trip.op == "save" else read
            cold = not script.answered or _unmapped(script.client)
            bound = max(1.0, 10 * self.timeout) if cold else self.timeout
            reply = await _within(script(keys=trip.keys, args=trip.args), bound)
            save.answered = read.answered = True  # (their client is connected)
        except Exception as exc:  # a store that fails never breaks a call
            if self._failed(exc, self.loops.node_of(trip.keys[0])):
                raise _Busy from exc
            raise _Down from exc
        self._back(time.monotonic(), self.loops.node_of(trip.keys[0]))
        return reply

    def tick(self, seconds: Any, micros: Any, sent: float, received: float) -> None:
        """A ``TIME`` reading taken between ``sent`` and ``received`` (monotonic)."""
        self._tick(float(seconds) + float(micros) / 1e6, sent, received)

    def _tick(self, server: float, sent: float, received: float) -> None:
        """
        Bound the offset by one reading: Redis read its clock between ``sent`` and ``received``.

        So the offset lies between ``server - received`` and ``server - sent``; it is moved
        only when it falls outside (to the nearest bound), never toward each reading's midpoint:
        a round trip's halves are unequal on a loaded host, and chasing midpoints made the
        fleet's clock wobble by milliseconds against the server's (hosts disagreed on a reset
        by as much, and a report of the same window read as a new one).
        """
        low, high = server - received, server - sent
        with self._lock:
            if not self._stepped:  # once, before any state is shared
                self.offset, self._stepped = (low + high) / 2, True
            else:  # slewed: at most a tenth of the time passed, so the clock never runs back
                target = min(max(self.offset, low), high)
                room = 0.1 * max(0.0, received - self._adjusted)
                self.offset += max(-room, min(room, target - self.offset))
            self._adjusted = received

    def _failed(self, exc: Exception, node: str | None = None) -> bool:
        """
        A round trip failed: an outage of Redis, or load it is not; True for load.

        Load (no connection free in time, a reply about one key: :func:`busy`; a timeout on
        an event loop too busy to run its timer on time, for at most :data:`STARVED_FOR`)
        costs that step alone (answered as busy, nothing taken from memory), and the next
        goes to Redis again; an outage pauses every step (:meth:`_paused`), and a cluster's
        ``node`` that did not answer pauses the steps on its keys (:class:`~.nodes.Nodes`).
        """
        if busy(exc) or self._starved(exc):
            log.debug("Redis busy (%s): this step answered as busy", _name(exc))
            return True
        if node is not None and named(exc, LOST):
            self.nodes.failed(node, _name(exc))
        else:
            self._paused(exc)
        return False

    def _starved(self, exc: Exception) -> bool:
        """Whether ``exc`` is a trip timed out on a starved loop, Redis answering lately."""
        if not isinstance(exc, Starved):
            return False
        now = time.monotonic()
        with self._lock:
            if self.starved_since is None:
                self.starved_since = now
            return now - self.starved_since < STARVED_FOR

    def _paused(self, exc: Exception) -> None:
        """
        A round trip failed: Redis is not asked for a jittered pause, longer each probe.

        The trips in flight when Redis went away fail together (a herd's tasks and threads):
        one outage, one pause; a failure while Redis is already paused neither lengthens the
        pause nor counts as a failed probe.  Counting each of them doubled the pause some
        twenty times in a millisecond: a process paced alone for its longest pause after
        one slow moment.
        """
        now = time.monotonic()
        with self._lock:
            if now < self.down_until:  # the same outage, already noted
                log.debug("Redis failed too (%s) while paused", _name(exc))
                return
            self.failures += 1
            wait = pause(self.failures, self.rng)
            self.down_until = now + wait
            first = self.down_since is None
            if first:
                self.down_since = now
        if first and now - self.back_at < QUIET_WARNINGS:
            self.warned = False  # back a moment ago: the same outage, flapping (a restart)
            log.debug("Redis failed again (%s) soon after it was back", _name(exc))
        elif first:
            self.warned = True
            log.warning(
                "Redis failed (%s); pacing from this process's memory until it is back",
                _name(exc),
            )
        else:
            log.debug("Redis still failing (%s); next try in %.2f s", _name(exc), wait)

    def _back(self, now: float, node: str | None = None) -> None:
        """A round trip succeeded: Redis (and ``node``) answers, so it is asked again at once."""
        if self.nodes.failures:
            self.nodes.back(node)
        if self.starved_since is not None:
            self.starved_since = None
        if self.down_since is None and not self.failures:
            return
        with self._lock:
            since, self.down_since, self.failures = self.down_since, None, 0
            self.down_until = -math.inf
            warned, self.warned = self.warned, False
            if warned:
                self.back_at = now
        if since is not None and warned:
            log.warning("Redis is back after %.1f s; pacing from it again", now - since)
        elif since is not None:
            log.debug("Redis is back after %.1f s", now - since)


def turn_wait(timeout: float) -> float:
    """
    How long a task waits for its loop's turn of a key (seconds): as long as a connection.

    Its turn comes when the steps ahead of it are done, each bounded by ``timeout`` (and,
    Redis gone, none waits on it: they go to memory at once); most take no round trip.  A
    thousand tasks that waited the timeout alone (50 ms) on a loaded loop gave up by the
    hundreds, asked again every few milliseconds, and the loop starved on their asking.
    """
    return max(1.0, 10 * timeout)


#: Errors that say Redis is there but busy, or that one key is in trouble: not an outage.
_BUSY = frozenset({"MaxConnectionsError", "ResponseError", "NoScriptError", "WatchError"})
#: Replies of Redis that say it is down all the same: a cluster that lost a master.
_DOWN = frozenset({"ClusterDownError", "MasterDownError", "TryAgainError"})


def busy(exc: BaseException) -> bool:
    """
    Whether a failed round trip is load or one key's trouble rather than Redis gone.

    500 asyncio tasks on one pacer emptied redis-py's pool of 100 connections; read as an
    outage, the fleet paced from memory and sent twenty times the 429s.  A reply of Redis
    about a key (a key of another type) said Redis was up, and paused every origin.
    """
    if named(exc, _DOWN):
        return False
    if named(exc, _BUSY):
        return True
    return "No connection available" in str(exc)  # a blocking pool's wait ran out


def _name(exc: BaseException) -> str:
    """An exception as a log line shows it: its type, and its message if it has one."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def connect(storage: object, timeout: float = TIMEOUT) -> tuple[Any, LoopClients]:
    """
    A sync client for ``storage``, and the ``redis.asyncio`` clients of event loops.

    What ``storage`` may be, and how each client is made: :func:`.clients.clients_for`.
    """
    client, make, given = clients_for(storage, timeout)
    return client, LoopClients(make, given)
