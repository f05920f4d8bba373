"""
A store in Redis: the processes and hosts of a fleet pace by one state per origin (and scope).

Every key holds one origin's (or scope's) :class:`~smoothclient.pacing.state.OriginState` as
text (:mod:`..codec`), a version, and the cohort counts of each process.  A step is the same
pure transition of :mod:`..state` that the in-memory store applies under a lock, applied here
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
  with its next step; but a key's first answer that taught it nothing else (a cold-start
  probe's 429 naming its quota: the quota's scope learned it) is written at once: the others
  wait behind that probe until they read it.
- **A paced request costs one round trip**: its slot (a write that checks the version, which
  needs no read first when nobody else wrote).  Its answer, when the others can learn of it a
  step later (:func:`~..learning.can_wait`: a success with quota left), is taken on this
  process's copy at once and goes to Redis with this process's next step (in a herd, its
  next slot), or, when none comes, instead of its next read of the key (the copy is trusted
  :data:`TRUST` seconds); until written it is applied again to every state adopted from
  Redis, so none is lost or taken twice.  Any other answer (a throttle, a spent quota, a
  ``Retry-After``, the answer to a probe the others wait for) is written at once.  Its
  attempt's count toward a retry budget, taken between its slot and its send, goes the same
  way: written at once, it held the send behind the key's turn (a herd's sends went up to
  0.6 s after their slots and arrived together, past a bucket's burst).
- **Healthy origins cost nothing**: the fast lane trusts this process's copy for
  :data:`TRUST` seconds before it reads the key again (behind a cold-start probe, for a
  poll: :func:`~.keyspace.trusted_for`).
- **Faults fail open**: Redis down, slow (over ``timeout``) or erroring, and the store falls
  back to this process's memory at once, from the last state it saw; it logs one warning per
  outage, tries Redis again after a jittered backoff, and never raises into a call.  The
  fallback takes over from the copy once an outage (a herd's trips failing one after
  another each handed it over again, and it forgot the slots it had granted).
- **Load is not an outage**: a trip that fails for load (no connection free, a reply about
  one key, a timeout on an event loop too busy to run its timer on time), a turn not come
  within its wait, others' writes winning for longer than the timeout: the step takes
  nothing from memory (a slot granted there is one Redis never hears of): a slot asked for
  is asked again, an answer waits on the copy for the next write.  A step that writes
  nothing while the key's turn is held (a herd's polls) is answered on a copy of what the
  key holds, without waiting for the turn.

**One definition, two drivers.** Each step (an operation of
:class:`~..store.KeyTracker`, over the cell's ``update`` or ``read``) is a generator: it
applies the pure transition to the copy, yields its round trip (a :class:`~..store.Trip`: the
``SAVE`` or ``READ`` script of :mod:`.scripts`, keys and arguments) and handles the reply
(written; or someone wrote first: adopt what Redis holds and go again; or failed: fall back).
Sync edges drive it with the sync client (:func:`~..store.run`; one connection pool for every
thread, each trip bounded by ``timeout``); async edges on asyncio drive the same generator on
their event loop (:func:`~..store.run_async`: each trip awaited on that loop's ``redis.asyncio``
client and bounded by the timeout), so the loop never blocks. Both feed one fleet clock
(:meth:`Link.tick`) and note failures one way. ``redis.asyncio`` runs on asyncio only: on trio
the async edges take the same steps in worker threads with the sync client.

- **One key's copy** and its steps' round trips are :class:`~.tracker.RedisCell`
  (:mod:`.tracker`), the store's cell; each operation is defined once over it
  (:class:`~..store.KeyTracker`).
- **Clients, round trips and the clock** live in :mod:`.link`.
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

import dataclasses
import os
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from ..keys import LruMap
from ..state import Settings
from ..store import KeyTracker, MemoryStore
from .keyspace import redis_key
from .link import TIMEOUT, Link, LoopClients, connect
from .tracker import COHORT_TTL, MAX_DEFERRED, TRUST, RedisCell

__all__ = [
    "COHORT_TTL",
    "MAX_DEFERRED",
    "TRUST",
    "Link",
    "LoopClients",
    "RedisCell",
    "RedisStore",
    "connect",
    "redis_key",
]


class RedisStore:
    """
    The :class:`~smoothclient.pacing.store.Store` of a fleet: state in Redis (see the module).

    Args:
        client: a sync client: ``redis.Redis`` (of a server, or of the master Redis Sentinel
            names) or ``redis.cluster.RedisCluster`` (see :func:`~.link.connect`).
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
        self.me = uuid.uuid4().hex[:12]  # this process, among the fleet's (new after a fork)
        fleet = dataclasses.replace(settings, shared=True)  # the fallback's is this process's
        self._map: LruMap[str, KeyTracker] = LruMap(
            max_keys + max_scoped,
            lambda key: KeyTracker(
                RedisCell(key, fleet, self.link, self.fallback.cell(key), self.me)
            ),
        )
        self.peek: Callable[[str], KeyTracker | None] = self._map.peek
        _STORES.add(self)

    def forked(self) -> None:
        """
        In a child just forked: a process of its own in the fleet.

        A pacer made before ``fork()`` (gunicorn ``--preload``, multiprocessing) gave every
        child its parent's identity: the fleet counted fifteen children as one.  The child
        gets a new one, its own counts (none yet), fresh locks (another thread may have held
        one at the fork), and reads every key again.
        """
        self.me = uuid.uuid4().hex[:12]
        self.link.forked()
        self._map.forked()
        for key in self._map.keys():  # noqa: SIM118 - an LruMap, not a dict
            tracker = self._map.peek(key)
            if tracker is not None and isinstance(tracker.cell, RedisCell):
                tracker.cell.forked(self.me)

    def tracker(self, key: str) -> KeyTracker:
        return self._map.get(key)

    def keys(self) -> list[str]:
        return self._map.keys()

    def forget(self, key: str) -> None:
        """Drop this process's copy of ``key`` (its key in Redis expires on its own)."""
        self._map.pop(key)
        self.fallback.forget(key)


#: Every Redis store of this process, told when it forks (``os.register_at_fork``).
_STORES: weakref.WeakSet[RedisStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        store.forked()


if hasattr(os, "register_at_fork"):  # (not on Windows)
    os.register_at_fork(after_in_child=_after_fork_in_child)
