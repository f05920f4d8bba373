"""
A store in Redis: the processes and hosts of a fleet pace by one state per origin (and scope).

Every key holds one origin's (or scope's) :class:`~smoothclient.pacing.state.OriginState` as
text (:mod:`.codec`), a version, and the cohort counts of each process.  A step is the same
pure transition of :mod:`.state` that the in-memory store applies under a lock, applied here
to the process's copy and written back by one Lua script that checks the version first
(compare and set): one round trip when nobody else wrote in between, another (with the
fresh state) when someone did.  So there is one definition of every rule, and each step is
atomic across the fleet.

- **Keys** are hash-tagged by origin (``smoothclient:{https://api.test:443}`` and
  ``...:search`` for a scope), so an origin's keys live in one slot of a Redis Cluster or
  Valkey; every write sets an expiry past the longest time the state still matters (its
  gate, reset, learned rate), so an idle origin's key vanishes.
- **The fleet's clock** is the Redis server's ``TIME``: the pacer's clock is this process's
  monotonic clock plus an offset measured against it (stepped once when the store is made,
  by the offset a few readings all allow; then slewed, only when a reading's round trip
  rules the offset out), so hosts with skewed clocks agree on every deadline in the shared
  state, to a fraction of a millisecond on a loaded host.
- **Cohort counts** (waiting, in flight) are kept per process with the time each process
  last wrote them; counts older than :data:`COHORT_TTL` are dropped, so a crashed process's
  counts fade.  Sending, cancelling and failing change only this process's counts, written
  with its next step: a paced request costs one round trip before it is sent (its slot: a
  write that checks the version, which needs no read first when nobody else wrote) and one
  after (its answer).
- **Healthy origins cost nothing**: the fast lane trusts this process's copy for
  :data:`TRUST` seconds before it reads the key again.
- **Faults fail open**: Redis down, slow (over ``timeout``) or erroring, and the store falls
  back to this process's memory at once, from the last state it saw; it logs one warning per
  outage, tries Redis again after a jittered backoff, and never raises into a call.

**One definition, two drivers.**  Each step (:class:`RedisSteps`) is a generator: it applies
the pure transition to the copy, yields its round trip (a :class:`~.store.Trip`: the
``_SAVE`` or ``_READ`` script, keys and arguments) and handles the reply (written; or someone
wrote first: adopt what Redis holds and go again; or failed: fall back).  Sync edges drive it
with the sync client (:func:`~.store.run`; one connection pool for every thread, each trip
bounded by ``timeout``); async edges on asyncio drive the same generator on their event loop
(:func:`~.store.run_async`: each trip awaited on that loop's ``redis.asyncio`` client and
bounded by ``asyncio.timeout``), so the loop never blocks.  Both feed one fleet clock
(:meth:`Link.tick`) and note failures one way.  ``redis.asyncio`` runs on asyncio only: on
trio the async edges take the same steps in worker threads with the sync client.

- **Clients**: a URL gives a sync client and, when a loop first asks, an asyncio client per
  event loop (a ``redis.asyncio`` client belongs to the loop it first ran on), closed when
  the loop shuts down (:class:`LoopClients`).  A ready ``redis.Redis`` serves sync steps as
  it is; a ready ``redis.asyncio.Redis`` serves its own loop as it is, and sync steps get a
  client made from its connection settings.
- **Concurrency**: no lock is held across a round trip by an async driver; the copy's lock
  guards only the moments a step computes or adopts.  Tasks of one process race like
  processes: a write whose base version is stale fails, adopts and goes again.  A step
  computes on a private copy while another's write of the copy is still out, so no change
  is applied twice; its effect on this process's counts is applied at once and taken back if
  the write fails, so none is lost or counted twice.  Callers of one process still take
  turns per key, as on one connection (threads by a lock, a loop's tasks by an asyncio lock
  their driver awaits, at most the timeout), so they do not spend round trips racing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import math
import random
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from ..engine.decide import CohortView
from ..hints.model import Hints
from ..policy import RetryBudget
from . import learning
from . import state as st
from .codec import dump, load
from .keys import LruMap
from .state import Admission, OriginState, OriginView, Settings
from .store import MemoryStore, MemoryTracker, Steps, Trip, run

__all__ = [
    "COHORT_TTL",
    "TRUST",
    "LoopClients",
    "RedisSteps",
    "RedisStore",
    "RedisTracker",
    "connect",
]

log = logging.getLogger("smoothclient.pacing")
T = TypeVar("T")

#: How long the fast lane trusts a process's copy of a healthy origin's state (seconds).
TRUST = 0.1
#: A process's cohort counts are dropped this long after it last wrote them (seconds).
COHORT_TTL = 30.0
#: The longest a store waits on Redis for one step, by default (seconds).
TIMEOUT = 0.05
#: At most this many readings of the server's ``TIME`` set the fleet's clock at first.
CLOCK_READINGS = 4
#: Keys outlive the last time their state matters by this much (seconds).
LINGER = 60.0

# KEYS[1]: the state's key.  ARGV: the version the caller read, the state, the cohort, the
# expiry in ms.  Written only if nobody wrote since; else the current version, state, cohort.
_SAVE = """
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
local t = redis.call('TIME')
if v ~= tonumber(ARGV[1]) then
  local cur = redis.call('HMGET', KEYS[1], 's', 'c')
  return {0, v, cur[1] or '', cur[2] or '', t[1], t[2]}
end
v = v + 1
redis.call('HSET', KEYS[1], 'v', v, 's', ARGV[2], 'c', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, v, '', '', t[1], t[2]}
"""
_READ = """
local cur = redis.call('HMGET', KEYS[1], 'v', 's', 'c')
local t = redis.call('TIME')
return {tonumber(cur[1] or '0'), cur[2] or '', cur[3] or '', t[1], t[2]}
"""


class _Down(Exception):
    """Redis is not to be asked now (down, or a step ran out of time)."""


#: What makes a sync client and an asyncio client alike: where to connect and as whom.
_PORTABLE = ("host", "port", "db", "username", "password", "path", "client_name")


def _portable(pool: Any, timeout: float) -> tuple[str, dict[str, Any]]:
    """A pool's connection class name and the settings a client of the other kind can take."""
    kwargs = pool.connection_kwargs
    given = {k: v for k, v in kwargs.items() if k in _PORTABLE or k.startswith("ssl_")}
    given.update(socket_timeout=timeout, socket_connect_timeout=timeout)
    return pool.connection_class.__name__, given


def _async_like(client: Any, timeout: float) -> Any:
    """A new ``redis.asyncio`` client to where the sync ``client`` connects (never retrying)."""
    import redis.asyncio
    import redis.asyncio.connection
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    name, kwargs = _portable(client.connection_pool, timeout)
    cls = getattr(redis.asyncio.connection, name, redis.asyncio.connection.Connection)
    pool = redis.asyncio.ConnectionPool(connection_class=cls, retry=Retry(NoBackoff(), 0), **kwargs)
    return redis.asyncio.Redis(connection_pool=pool)


def _sync_like(client: Any, timeout: float) -> Any:
    """A new sync ``redis.Redis`` client to where the asyncio ``client`` connects."""
    import redis
    import redis.connection
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    name, kwargs = _portable(client.connection_pool, timeout)
    cls = getattr(redis.connection, name, redis.connection.Connection)
    pool = redis.ConnectionPool(connection_class=cls, retry=Retry(NoBackoff(), 0), **kwargs)
    client = redis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # its pool is its own: closed with it
    return client


async def _closing(client: Any, gone: Callable[[], object]) -> AsyncIterator[None]:
    """Closes ``client`` when its event loop shuts its async generators down (``asyncio.run``)."""
    try:
        yield
    finally:
        gone()
        await client.aclose(close_connection_pool=True)


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

    async def scripts(self) -> tuple[Any, Any]:
        """The running loop's scripts: ``_SAVE`` and ``_READ`` on its client."""
        loop = asyncio.get_running_loop()
        entry = self._loops.get(loop)
        if entry is None:
            if self.given is not None and self._given_loop is None:
                self._given_loop = weakref.ref(loop)
                client, keeper = self.given, None
            else:
                client = self.make()
                keeper = _closing(client, functools.partial(self._loops.pop, loop, None))
                await keeper.__anext__()  # the loop finalizes it at shutdown: client closed
            entry = (client.register_script(_SAVE), client.register_script(_READ), keeper)
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
        """Register the scripts and set the clock against the server's ``TIME``."""
        self.client = client
        self.loops = loops or LoopClients(functools.partial(_async_like, client, timeout))
        self.timeout = timeout
        self.rng = rng or random.Random()
        self.save = client.register_script(_SAVE)
        self.read = client.register_script(_READ)
        self.down_until = -math.inf
        self.failures = 0
        self.down_since: float | None = None
        self._lock = threading.Lock()
        self.offset = time.time() - time.monotonic()  # the wall clock, until Redis says
        self._adjusted = time.monotonic()
        self._stepped = False
        with contextlib.suppress(_Down):  # if so, the wall clock stands in until Redis answers
            self._step_clock()

    def _step_clock(self) -> None:
        """
        Set the clock by a few readings of ``TIME``: the offset that all of them allow.

        Each reading bounds it by its round trip; one slow trip (a fleet's processes all
        starting at once) left the clock milliseconds off for a long time.
        """
        low, high = -math.inf, math.inf
        for _ in range(CLOCK_READINGS):
            sent = time.monotonic()
            seconds, micros = self.call(self.client.time)
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

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` against Redis, or :class:`_Down` (and the outage noted) if it fails."""
        if not self.up:
            raise _Down
        try:
            result = fn()
        except Exception as exc:  # a store that fails never breaks a call
            self._failed(exc)
            raise _Down from exc
        self._back(time.monotonic())
        return result

    def send(self, trip: Trip) -> Any:
        """The reply to ``trip`` (a script run with the sync client), or :class:`_Down`."""
        if trip.op == "turn":  # a sync driver on a loop's thread: no turn to wait for
            return None
        script = self.save if trip.op == "save" else self.read
        return self.call(lambda: script(keys=trip.keys, args=trip.args))

    async def send_async(self, trip: Trip) -> Any:
        """
        The reply to ``trip`` from the running loop's ``redis.asyncio`` client, or :class:`_Down`.

        Bounded by the timeout (``asyncio.timeout``); the loop runs on meanwhile.  A ``"turn"``
        trip is no round trip: the loop's lock of the key, acquired (or ``TimeoutError``).
        """
        if trip.op == "turn":
            lock = self.loops.turn(trip.keys[0])
            async with asyncio.timeout(self.timeout):
                await lock.acquire()
            return lock
        if not self.up:
            raise _Down
        try:
            save, read = await self.loops.scripts()
            script = save if trip.op == "save" else read
            async with asyncio.timeout(self.timeout):
                reply = await script(keys=trip.keys, args=trip.args)
        except Exception as exc:  # a store that fails never breaks a call
            self._failed(exc)
            raise _Down from exc
        self._back(time.monotonic())
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

    def _failed(self, exc: Exception) -> None:
        now = time.monotonic()
        with self._lock:
            self.failures += 1
            pause = min(30.0, 0.5 * 2 ** (self.failures - 1)) * self.rng.uniform(0.5, 1.5)
            self.down_until = now + pause
            first = self.down_since is None
            if first:
                self.down_since = now
        if first:
            log.warning(
                "Redis failed (%s); pacing from this process's memory until it is back", exc
            )
        else:
            log.debug("Redis still failing (%s); next try in %.2f s", exc, pause)

    def _back(self, now: float) -> None:
        if self.down_since is None and not self.failures:
            return
        with self._lock:
            since, self.down_since, self.failures = self.down_since, None, 0
        if since is not None:
            log.warning("Redis is back after %.1f s; pacing from it again", now - since)


def _horizon(o: OriginState, settings: Settings, now: float) -> float:
    """Seconds from ``now`` during which ``o`` still matters to anyone."""
    ends = [o.gate, o.pace.tat, o.last_throttle + settings.quiet]
    ends += [t for t in (o.reset_at, o.probe_until) if t is not None]
    latest = max((t for t in ends if math.isfinite(t)), default=now)
    return min(max(0.0, latest - now), 7 * 86400.0) + LINGER


class RedisTracker:
    """
    A :class:`~smoothclient.pacing.store.Tracker` over one key in Redis (see the module).

    Each step is written once, as a generator of round trips (:attr:`steps`, a
    :class:`RedisSteps`); the plain methods drive it here (:func:`~.store.run`, the sync
    client), async edges on asyncio drive the same generators on their event loop
    (:func:`~.store.run_async`, ``redis.asyncio``).  No lock is held across a round trip by
    an async driver: ``lock`` guards the copy only while a step computes or adopts (no I/O).
    Threads take ``turn`` across a whole sync step (so they queue, as on one connection,
    instead of racing), but tasks race: the version check orders them.  A step computes on
    the copy in place, or on a private copy while another step's write of the copy is out
    (so a change is never applied twice); its effect on this process's counts is applied at
    once and taken back if its write fails.
    """

    def __init__(
        self, key: str, settings: Settings, link: Link, fallback: MemoryTracker, me: str
    ) -> None:
        """Track ``key``; ``fallback`` serves while Redis is down; ``me`` names this process."""
        self.key = key
        self.redis_key = redis_key(key)
        self.settings = settings
        self.link = link
        self.fallback = fallback
        self.me = me
        self.state = OriginState()
        self.version = -1  # never read
        self.others: dict[str, list[float]] = {}  # other processes' [waiting, in flight, when]
        self.mine = [0, 0]  # this process's waiting and in flight
        self.written = [-1, -1]  # what of them the key holds
        self.text = ""  # the state as the key holds it
        self.wrote_at = -math.inf  # when this process last wrote its counts (fleet clock)
        self.synced = -math.inf  # when the copy was last read or written (monotonic)
        self.epoch = 0  # counts the copy's replacements (a reply sent before one may be stale)
        self.dirty: OriginState | None = None  # the copy, while a write of its change is out
        self.lock = threading.Lock()  # the copy (never held across a round trip)
        self.turn = threading.Lock()  # threads' sync steps, one at a time
        self.healthy: Callable[[float], bool] = self._healthy

    @property
    def steps(self) -> RedisSteps:
        """The steps as generators of round trips (what the edges drive)."""
        return RedisSteps(self)  # made when asked: no cycle keeps a dropped store's client

    _sync = steps

    def _take_turn(self) -> Steps[Any]:
        """
        The turn to hold across a step (its ``release()`` ends it), or ``None``.

        Callers of one process queue for a key, as on one connection, instead of racing (N
        writes on one version cost N round trips for the one that lands): a thread with no
        event loop takes ``turn`` (a threading lock); a task on a loop asks its driver for
        the loop's turn of the key (an asyncio lock, awaited: the loop never blocks on a
        thread's step), waiting at most the store's timeout, then going on without: the
        version check orders every writer anyway.
        """
        if asyncio.events._get_running_loop() is None:
            self.turn.acquire()
            return self.turn
        try:
            return (yield Trip(self.link, "turn", [self.redis_key], []))
        except Exception:  # waited its bound for the others' steps
            return None

    # ------------------------------------------------------------------ the copy

    def _adopt(self, version: int, text: Any, cohort: Any, now: float) -> None:
        """Take what the key holds as the copy (caller holds ``lock``)."""
        self.version = int(version)
        self.text = text.decode() if isinstance(text, bytes) else str(text or "")
        self.state = load(self.text) if self.text else OriginState()
        self.epoch += 1
        try:
            entries = json.loads(cohort) if cohort else {}
        except ValueError:
            entries = {}
        if not isinstance(entries, dict):
            entries = {}
        self.others = {
            who: entry
            for who, entry in entries.items()
            if who != self.me
            and isinstance(entry, list)
            and len(entry) == 3
            and all(isinstance(n, int | float) and math.isfinite(n) for n in entry)
        }
        self._fade(now, force=True)

    def _newer(self, version: Any, epoch: int) -> bool:
        """
        Whether a reply holding ``version``, asked for at ``epoch``, is to be adopted.

        Unless a newer copy came in since it was asked for: what Redis holds (the same
        version too: the copy then drops changes not written, as each read always did; a write
        of them still out puts its state back when it succeeds).  A key that expired or was
        flushed starts again from 0: adopted when nothing came in since.
        """
        return int(version) >= self.version or epoch == self.epoch

    def _fade(self, now: float, *, force: bool = False) -> None:
        """Drop the counts of processes silent for :data:`COHORT_TTL` (crashed, say)."""
        old = [who for who, entry in self.others.items() if entry[2] <= now - COHORT_TTL]
        for who in old:
            del self.others[who]
        if old or force:
            self._count()

    def _count(self, state: OriginState | None = None) -> None:
        state = self.state if state is None else state
        state.waiting = max(0, self.mine[0]) + int(sum(e[0] for e in self.others.values()))
        state.in_flight = max(0, self.mine[1]) + int(sum(e[1] for e in self.others.values()))

    def _refresh(self, fresh: bool = False) -> Steps[None]:
        """Read the key if the copy is older than :data:`TRUST` (or ``fresh``)."""
        if not fresh and time.monotonic() - self.synced <= TRUST:
            return
        epoch, sent = self.epoch, time.monotonic()
        reply = yield Trip(self.link, "read", [self.redis_key], [])
        received = time.monotonic()
        version, text, cohort, seconds, micros = reply
        self.link.tick(seconds, micros, sent, received)
        with self.lock:
            if self._newer(version, epoch):
                self._adopt(version, text, cohort, self.link.clock())
            self.synced = max(self.synced, received)

    def _step(
        self,
        step: Callable[[OriginState], T],
        fallback: Callable[[MemoryTracker], T],
        busy: Callable[[], T] | None = None,
    ) -> Steps[T]:
        """
        ``step`` applied atomically across the fleet; in this process's memory if down.

        Other processes (or tasks) writing first every time for longer than the store's
        timeout: the answer is ``busy()`` (nothing taken: "not now"), or, without one, the
        step's result on this process's copy.
        """
        turn = yield from self._take_turn()
        try:
            if not self.link.up:
                return fallback(self.fallback)
            started = time.monotonic()
            try:
                while True:  # another process wrote first: again, on what it wrote
                    result, unwritten = yield from self._try(step)
                    if unwritten is None:
                        return result
                    if time.monotonic() - started > self.link.timeout:
                        log.debug("%s: Redis busy with others' writes", self.key)
                        if busy is not None:
                            return busy()
                        with self.lock:  # kept here (fail open), counts and all
                            self.mine = [self.mine[0] + unwritten[0], self.mine[1] + unwritten[1]]
                            self._count()
                        return result
            except _Down:
                with self.lock:
                    self._hand_over()
                return fallback(self.fallback)
        finally:
            if turn is not None:
                turn.release()

    def _try(self, step: Callable[[OriginState], T]) -> Steps[tuple[T, list[int] | None]]:
        """
        ``step`` on the copy, written if nobody wrote since.

        Its result, and ``None`` when written (or when nothing changed on a copy trusted still);
        else the change of counts it would have made (the copy is now what is in Redis: try
        again).

        A step that changes the state is written at once, however old the copy: the write
        checks the version, so it succeeds only if the copy was current, and a paced slot
        costs one round trip.  A step that changes nothing on an old copy reads the key.
        """
        with self.lock:
            now = self.link.clock()
            self._fade(now)
            in_place = self.dirty is not self.state  # else another write of the copy is out
            if in_place:
                state = self.state
            else:
                state = load(self.text) if self.text else OriginState()
                self._count(state)
            before = (state.waiting, state.in_flight)
            result = step(state)
            delta = [state.waiting - before[0], state.in_flight - before[1]]
            self.mine = [self.mine[0] + delta[0], self.mine[1] + delta[1]]
            text = dump(state)
            if (
                text == self.text
                and self.mine == self.written
                and now - self.wrote_at < COHORT_TTL / 2
            ):
                if time.monotonic() - self.synced <= TRUST:
                    return result, None  # nothing changed (a poll that found no slot): no write
                self.mine = [self.mine[0] - delta[0], self.mine[1] - delta[1]]
                stale = True
            else:
                stale = False
                counts = [max(0, self.mine[0]), max(0, self.mine[1])]
                expected = list(self.mine)
                cohort = dict(self.others)
                cohort[self.me] = [*counts, now]
                args = [
                    self.version,
                    text,
                    json.dumps(cohort),
                    int(_horizon(state, self.settings, now) * 1000),
                ]
                epoch = self.epoch
                if in_place:
                    self.dirty = state
        if stale:
            yield from self._refresh()  # an old copy: what does Redis hold now?
            return result, delta
        settled = False
        try:
            sent = time.monotonic()
            reply = yield Trip(self.link, "save", [self.redis_key], args)
            received = time.monotonic()
            written, version, theirs, their_cohort, seconds, micros = reply
            self.link.tick(seconds, micros, sent, received)
            with self.lock:
                settled = True
                self._settle(state)
                self.synced = max(self.synced, received)
                if written:
                    if int(version) > self.version:  # the newest the copy knows of
                        self.version, self.text, self.written = int(version), text, expected
                        if self.state is not state:
                            self.state, self.epoch = state, self.epoch + 1
                            self._count()
                        elif self.mine != expected:  # counts changed while it was out
                            self._count()
                    self.wrote_at = now
                    return result, None
                self.mine = [self.mine[0] - delta[0], self.mine[1] - delta[1]]  # not counted
                if self._newer(version, epoch):
                    self._adopt(version, theirs, their_cohort, self.link.clock())
                elif self.state is state:  # a newer copy was written in between: not this one
                    self._undo()
                else:
                    self._count()
                return result, delta
        finally:
            if not settled:  # failed (_Down) or cancelled: nothing of it taken here
                with self.lock:
                    self._settle(state)
                    self.mine = [self.mine[0] - delta[0], self.mine[1] - delta[1]]
                    self.written = [-1, -1]  # whatever the key holds: written again next time
                    if self.state is state:
                        self._undo()
                    else:
                        self._count()

    def _settle(self, state: OriginState) -> None:
        """A write of ``state`` came back (or never will): the copy's change is no longer out."""
        if self.dirty is state:
            self.dirty = None

    def _undo(self) -> None:
        """The copy's unwritten change is dropped: the copy is what the key held (caller locks)."""
        self.state = load(self.text) if self.text else OriginState()
        self.epoch += 1
        self._count()

    def _hand_over(self) -> None:
        """Redis failed: the fallback goes on from the last state seen (caller holds ``lock``)."""
        target = self.fallback.state
        for f in dataclasses.fields(OriginState):
            setattr(target, f.name, getattr(self.state, f.name))
        target.waiting, target.in_flight = max(0, self.mine[0]), max(0, self.mine[1])
        self.synced = -math.inf

    def _local(self, change: Callable[[list[int]], None], fallback: Callable[[], None]) -> None:
        """A change of this process's counts only: written with its next step."""
        with self.lock:
            if not self.link.up:
                fallback()
                return
            change(self.mine)
            self._count()

    def _read(self, look: Callable[[OriginState], T], fresh: bool) -> Steps[T]:
        """``look`` at the copy (read again if older than TRUST, or ``fresh``)."""
        if not fresh and time.monotonic() - self.synced <= TRUST and self.link.up:
            with self.lock:  # a trusted copy (the fast lane's usual case): no turn, no trip
                return look(self.state)
        turn = yield from self._take_turn()
        try:
            if self.link.up:
                try:
                    yield from self._refresh(fresh)
                    with self.lock:
                        return look(self.state)
                except _Down:
                    with self.lock:
                        self._hand_over()
            return self.fallback.read(look)
        finally:
            if turn is not None:
                turn.release()

    # ------------------------------------------------------------------ the protocol

    def _healthy(self, now: float) -> bool:
        return self.read(lambda o: st.healthy(o, now))

    @property
    def note_success(self) -> Callable[[float], None]:
        """Note a plain success (on this process's copy: it goes out with the next step)."""
        return self._note_success

    def _note_success(self, now: float) -> None:
        if self.link.up:
            self.state.succeeded(now)
        else:
            self.fallback.note_success(now)

    def try_now(self, now: float) -> bool:
        return run(self._sync.try_now(now))

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        return run(self._sync.when(now, not_before=not_before, deadline=deadline))

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        return run(self._sync.acquire(now, not_before=not_before, deadline=deadline))

    def sent(self) -> None:
        def change(mine: list[int]) -> None:
            mine[0] -= 1
            mine[1] += 1

        self._local(change, self.fallback.sent)

    def cancel(self) -> None:
        def change(mine: list[int]) -> None:
            mine[0] -= 1

        self._local(change, self.fallback.cancel)

    def adopt(self) -> None:
        def change(mine: list[int]) -> None:
            mine[1] += 1

        self._local(change, self.fallback.adopt)

    def failed(self) -> None:
        def change(mine: list[int]) -> None:
            mine[1] -= 1
            self.state.known = True

        self._local(change, self.fallback.failed)

    def observe(
        self,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> None:
        run(self._sync.observe(status, hints, now, sent_at=sent_at, counted=counted))

    def cohort(self, now: float) -> CohortView:
        return run(self._sync.cohort(now))

    def record_attempt(self, budget: RetryBudget, now: float) -> None:
        run(self._sync.record_attempt(budget, now))

    def try_retry(self, budget: RetryBudget, now: float) -> bool:
        return run(self._sync.try_retry(budget, now))

    def update(self, step: Callable[[OriginState], T]) -> T:
        return run(self._sync.update(step))

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> T:
        """``look`` at the copy (read again if older than TRUST, or ``fresh``); every view."""
        if not fresh and time.monotonic() - self.synced <= TRUST and self.link.up:
            with self.lock:  # a trusted copy (the fast lane's usual case): no step to drive
                return look(self.state)
        return run(self._sync.read(look, fresh=fresh))

    def view(self, now: float) -> OriginView:
        key = self.key
        return self.read(lambda o: st.view(key, o, now))


class RedisSteps:
    """
    A :class:`RedisTracker`'s steps, each defined once as a generator of round trips.

    The pure transition (:mod:`.state`, :mod:`.learning`), what the fallback does instead, and
    what "busy" means for it.
    """

    __slots__ = ("t",)

    def __init__(self, tracker: RedisTracker) -> None:
        self.t = tracker

    def healthy(self, now: float) -> Steps[bool]:
        return self.read(lambda o: st.healthy(o, now))

    def try_now(self, now: float) -> Steps[bool]:
        s = self.t.settings
        return self.t._step(
            lambda o: st.try_now(o, s, now), lambda f: f.try_now(now), lambda: False
        )

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]:
        s = self.t.settings
        return self.read(lambda o: st.when(o, s, now, not_before, deadline))

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Steps[Admission]:
        s = self.t.settings
        return self.t._step(
            lambda o: st.acquire(o, s, now, not_before, deadline),
            lambda f: f.acquire(now, not_before=not_before, deadline=deadline),
            lambda: Admission(st.PROBE_POLL, final=False),  # ask again in a moment
        )

    def observe(
        self,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> Steps[None]:
        s = self.t.settings
        return self.t._step(
            lambda o: learning.observe(o, s, status, hints, now, sent_at=sent_at, counted=counted),
            lambda f: f.observe(status, hints, now, sent_at=sent_at, counted=counted),
        )

    def cohort(self, now: float) -> Steps[CohortView]:
        return self.read(lambda o: st.cohort(o, now))

    def record_attempt(self, budget: RetryBudget, now: float) -> Steps[None]:
        return self.t._step(
            lambda o: o.budget(budget).record_request(now),
            lambda f: f.record_attempt(budget, now),
        )

    def try_retry(self, budget: RetryBudget, now: float) -> Steps[bool]:
        return self.t._step(
            lambda o: o.budget(budget).try_retry(now),
            lambda f: f.try_retry(budget, now),
        )

    def update(self, step: Callable[[OriginState], T]) -> Steps[T]:
        return self.t._step(step, lambda f: f.update(step))

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> Steps[T]:
        return self.t._read(look, fresh)


def redis_key(key: str, prefix: str = "smoothclient") -> str:
    """The Redis key of a store key: ``origin`` or ``"origin scope"``, hash-tagged by origin."""
    origin, _, scope = key.partition(" ")
    tagged = f"{prefix}:{{{origin}}}"
    return f"{tagged}:{scope}" if scope else tagged


class RedisStore:
    """
    The :class:`~smoothclient.pacing.store.Store` of a fleet: state in Redis (see the module).

    Args:
        client: a ``redis.Redis`` client.
        settings: the pacer's settings.
        loops: each event loop's ``redis.asyncio`` client (default: made like ``client``).
        max_keys: how many keys this process keeps a copy of (least recently used forgotten;
            the keys in Redis expire on their own).
        timeout: the longest one step waits on Redis.
    """

    def __init__(
        self,
        client: Any,
        settings: Settings,
        *,
        max_keys: int = 1024,
        max_scoped: int = 0,
        timeout: float = TIMEOUT,
        loops: LoopClients | None = None,
    ) -> None:
        """Connect the store (never raises if Redis is down: it falls back at once)."""
        self.link = Link(client, timeout, loops=loops)
        self.fallback = MemoryStore(settings, max_keys=max_keys, max_scoped=max_scoped)
        me = uuid.uuid4().hex[:12]
        self._map: LruMap[str, RedisTracker] = LruMap(
            max_keys + max_scoped,
            lambda key: RedisTracker(key, settings, self.link, self.fallback.tracker(key), me),
        )
        self.peek: Callable[[str], RedisTracker | None] = self._map.peek

    def tracker(self, key: str) -> RedisTracker:
        return self._map.get(key)

    def keys(self) -> list[str]:
        return self._map.keys()


def connect(storage: object, timeout: float = TIMEOUT) -> tuple[Any, LoopClients]:
    """
    A ``redis.Redis`` client for ``storage``, and the ``redis.asyncio`` clients of event loops.

    ``storage``: a URL; a ready ``redis.Redis`` (used as it is by sync steps; each loop gets
    an asyncio client to the same server); or a ready ``redis.asyncio.Redis`` (used as it is
    on the first loop that runs a step; sync steps, other loops and the clock get clients to
    the same server, made from its connection settings: host, port or path, db, credentials,
    TLS files).  Every call of a client made here is bounded by ``timeout`` and never retried
    inside redis-py: the store decides what a failure means (fall back, back off).
    """
    try:
        import redis
        import redis.asyncio
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError as exc:  # pragma: no cover - the extra is part of the test setup
        msg = "a Redis storage needs redis-py: pip install 'smoothclient[redis]'"
        raise ImportError(msg) from exc
    given = None
    if isinstance(storage, str):
        client = redis.Redis.from_url(
            storage,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
    elif isinstance(storage, redis.Redis):
        client = storage
    elif isinstance(storage, redis.asyncio.Redis):
        client, given = _sync_like(storage, timeout), storage
    else:
        msg = (
            "storage must be 'memory://', a redis://, rediss:// or unix:// URL, or a "
            f"redis.Redis or redis.asyncio.Redis client, not {type(storage).__name__}"
        )
        raise TypeError(msg)
    return client, LoopClients(functools.partial(_async_like, client, timeout), given)
