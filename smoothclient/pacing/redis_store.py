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

Sync edges call it directly (each step bounded by ``timeout``); async edges take the same
steps in worker threads (``Pacer.shared``), so a step never holds their event loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from ..engine.decide import CohortView
from ..hints.model import Hints
from ..policy import RetryBudget
from . import learning
from . import state as st
from .codec import dump, load
from .keys import LruMap
from .state import Admission, OriginState, OriginView, Settings
from .store import MemoryStore, MemoryTracker

__all__ = ["COHORT_TTL", "TRUST", "RedisStore", "RedisTracker", "connect"]

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


class Link:
    """
    The connection to Redis: its scripts, its health and the fleet's clock.

    Args:
        client: a ``redis.Redis`` client (its pool shared by every thread).
        timeout: the longest one step waits on Redis.
        rng: randomness for the reconnect backoff.
    """

    def __init__(self, client: Any, timeout: float = TIMEOUT, rng: random.Random | None = None):
        """Register the scripts and set the clock against the server's ``TIME``."""
        self.client = client
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
    """A :class:`~smoothclient.pacing.store.Tracker` over one key in Redis (see the module)."""

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
        self.lock = threading.Lock()
        self.healthy: Callable[[float], bool] = self._healthy

    # ------------------------------------------------------------------ the copy

    def _adopt(self, version: int, text: Any, cohort: Any, now: float) -> None:
        self.version = int(version)
        self.text = text.decode() if isinstance(text, bytes) else str(text or "")
        self.state = load(self.text) if self.text else OriginState()
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

    def _fade(self, now: float, *, force: bool = False) -> None:
        """Drop the counts of processes silent for :data:`COHORT_TTL` (crashed, say)."""
        old = [who for who, entry in self.others.items() if entry[2] <= now - COHORT_TTL]
        for who in old:
            del self.others[who]
        if old or force:
            self._count()

    def _count(self) -> None:
        self.state.waiting = max(0, self.mine[0]) + int(sum(e[0] for e in self.others.values()))
        self.state.in_flight = max(0, self.mine[1]) + int(sum(e[1] for e in self.others.values()))

    def _refresh(self) -> None:
        """Read the key if the copy is older than :data:`TRUST` (caller holds the lock)."""
        if time.monotonic() - self.synced <= TRUST:
            return
        sent = time.monotonic()
        reply = self.link.call(lambda: self.link.read(keys=[self.redis_key]))
        received = time.monotonic()
        version, text, cohort, seconds, micros = reply
        self.link.tick(seconds, micros, sent, received)
        self._adopt(version, text, cohort, self.link.clock())
        self.synced = received

    def _step(
        self,
        step: Callable[[OriginState], T],
        fallback: Callable[[MemoryTracker], T],
        busy: Callable[[], T] | None = None,
    ) -> T:
        """
        ``step`` applied atomically across the fleet; in this process's memory if down.

        Other processes writing first every time for longer than the store's timeout: the
        answer is ``busy()`` (nothing taken: "not now"), or, without one, the step's result
        on this process's copy.
        """
        with self.lock:
            if not self.link.up:
                return fallback(self.fallback)
            started = time.monotonic()
            try:
                while True:  # another process wrote first: again, on what it wrote
                    result, unwritten = self._try(step)
                    if unwritten is None:
                        return result
                    if time.monotonic() - started > self.link.timeout:
                        log.debug("%s: Redis busy with others' writes", self.key)
                        if busy is not None:
                            return busy()
                        self.mine = unwritten  # kept here (fail open), counts and all
                        self._count()
                        return result
            except _Down:
                self._hand_over()
                return fallback(self.fallback)

    def _try(self, step: Callable[[OriginState], T]) -> tuple[T, list[int] | None]:
        """
        ``step`` on the copy, written if nobody wrote since.

        Its result, and ``None`` when written (or when nothing changed on a copy trusted still);
        else the counts it would have left (the copy is now what is in Redis: try again).

        A step that changes the state is written at once, however old the copy: the write
        checks the version, so it succeeds only if the copy was current, and a paced slot
        costs one round trip.  A step that changes nothing on an old copy reads the key.
        """
        self._fade(self.link.clock())
        state, mine = self.state, list(self.mine)
        before = (state.waiting, state.in_flight)
        result = step(state)
        self.mine = [mine[0] + state.waiting - before[0], mine[1] + state.in_flight - before[1]]
        text = dump(state)
        now = self.link.clock()
        if text == self.text and self.mine == self.written and now - self.wrote_at < COHORT_TTL / 2:
            if time.monotonic() - self.synced <= TRUST:
                return result, None  # nothing changed (a poll that found no slot): no write
            stepped, self.mine = self.mine, mine
            self._refresh()  # an old copy: what does Redis hold now?
            return result, stepped
        cohort = dict(self.others)
        cohort[self.me] = [max(0, self.mine[0]), max(0, self.mine[1]), now]
        ttl = int(_horizon(state, self.settings, now) * 1000)
        sent = time.monotonic()
        try:
            reply = self.link.call(
                lambda: self.link.save(
                    keys=[self.redis_key],
                    args=[self.version, text, json.dumps(cohort), ttl],
                )
            )
        except _Down:
            self.mine = mine  # not written: the fallback takes the step from the counts before
            raise
        received = time.monotonic()
        written, version, theirs, their_cohort, seconds, micros = reply
        self.link.tick(seconds, micros, sent, received)
        self.synced = received
        if written:
            self.version, self.text, self.written = int(version), text, list(self.mine)
            self.wrote_at = now
            return result, None
        stepped, self.mine = self.mine, mine  # someone wrote first: not counted
        self._adopt(version, theirs, their_cohort, self.link.clock())
        return result, stepped

    def _hand_over(self) -> None:
        """Redis failed: the fallback goes on from the last state seen (no cold start)."""
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
        s = self.settings
        return self._step(lambda o: st.try_now(o, s, now), lambda f: f.try_now(now), lambda: False)

    def when(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        s = self.settings
        return self.read(lambda o: st.when(o, s, now, not_before, deadline))

    def acquire(
        self, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        s = self.settings
        return self._step(
            lambda o: st.acquire(o, s, now, not_before, deadline),
            lambda f: f.acquire(now, not_before=not_before, deadline=deadline),
            lambda: Admission(st.PROBE_POLL, final=False),  # ask again in a moment
        )

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
        s = self.settings
        self._step(
            lambda o: learning.observe(o, s, status, hints, now, sent_at=sent_at, counted=counted),
            lambda f: f.observe(status, hints, now, sent_at=sent_at, counted=counted),
        )

    def cohort(self, now: float) -> CohortView:
        return self.read(lambda o: st.cohort(o, now))

    def record_attempt(self, budget: RetryBudget, now: float) -> None:
        self._step(
            lambda o: o.budget(budget).record_request(now),
            lambda f: f.record_attempt(budget, now),
        )

    def try_retry(self, budget: RetryBudget, now: float) -> bool:
        return self._step(
            lambda o: o.budget(budget).try_retry(now), lambda f: f.try_retry(budget, now)
        )

    def update(self, step: Callable[[OriginState], T]) -> T:
        return self._step(step, lambda f: f.update(step))

    def read(self, look: Callable[[OriginState], T], *, fresh: bool = False) -> T:
        """``look`` at the copy (read again if older than TRUST, or ``fresh``); every view."""
        with self.lock:
            if self.link.up:
                try:
                    if fresh:
                        self.synced = -math.inf
                    self._refresh()
                    return look(self.state)
                except _Down:
                    self._hand_over()
        return self.fallback.read(look)

    def view(self, now: float) -> OriginView:
        key = self.key
        return self.read(lambda o: st.view(key, o, now))


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
    ) -> None:
        """Connect the store (never raises if Redis is down: it falls back at once)."""
        self.link = Link(client, timeout)
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


def connect(storage: object, timeout: float = TIMEOUT) -> Any:
    """
    A ``redis.Redis`` client for ``storage`` (a URL, or a client given as it is).

    Every call is bounded by ``timeout`` and never retried inside redis-py: the store decides
    what a failure means (fall back, back off).
    """
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError as exc:  # pragma: no cover - the extra is part of the test setup
        msg = "a Redis storage needs redis-py: pip install 'smoothclient[redis]'"
        raise ImportError(msg) from exc
    if isinstance(storage, str):
        return redis.Redis.from_url(
            storage,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
    if isinstance(storage, redis.Redis):
        return storage
    msg = (
        "storage must be 'memory://', a redis://, rediss:// or unix:// URL, or a redis.Redis "
        f"client, not {type(storage).__name__}"
    )
    raise TypeError(msg)
