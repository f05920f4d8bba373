"""
One key of a Redis store: this process's copy of its state, and its steps' round trips.

:class:`RedisCell` is the store's :class:`~..store.Cell`: its two primitives (``update``,
``read``) as generators of round trips, the fast lane's calls and this process's counts;
every operation of a tracker is written once over them (:class:`~..store.KeyTracker`).  The
design (keys, the fleet's clock, cohort counts, deferred answers, faults, concurrency) is
described in :mod:`.store`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from ...policy import RetryBudget
from .. import admission as adm
from ..codec import clamped, dump, load
from ..state import MAX_SUCCESSES, OriginState, Settings
from ..steps import Steps, Trip, run
from ..store import Later, MemoryCell, Step
from . import keyspace
from .flusher import always, answered, arm, unchanged
from .keyspace import COHORT_TTL, redis_key
from .link import Link, _Busy, _Down

__all__ = ["COHORT_TTL", "MAX_DEFERRED", "TRUST", "RedisCell", "redis_key"]

log = logging.getLogger("smoothclient.pacing")
T = TypeVar("T")

#: How long the fast lane trusts a process's copy of a healthy origin's state (seconds).
TRUST = 0.1
#: At most this many answers wait on a process's copy for its next step; one more is written.
MAX_DEFERRED = 64


class RedisCell:
    """
    A :class:`~smoothclient.pacing.store.Cell` over one key in Redis (see the module).

    Its primitives are generators of round trips: a tracker's plain methods drive them here
    (:func:`~..store.run`, the sync client), async edges on asyncio drive the same generators
    on their event loop (:func:`~..store.run_async`, ``redis.asyncio``).  Redis down, each
    step goes to ``fallback`` (this process's memory) with the settings of one process.

    No lock is held across a round trip by an async driver: ``lock`` guards the copy only
    while a step computes or adopts (no I/O).  Threads take ``turn`` across a whole sync step
    (so they queue, as on one connection, instead of racing), but tasks race: the version
    check orders them.  A step computes on the copy in place, or on a private copy while
    another step's write of the copy is out (so a change is never applied twice); its effect
    on this process's counts is applied at once and taken back if its write fails.
    """

    def __init__(
        self, key: str, settings: Settings, link: Link, fallback: MemoryCell, me: str
    ) -> None:
        """Track ``key``; ``fallback`` serves while Redis is down; ``me`` names this process."""
        self.key = key
        self.redis_key = redis_key(key)
        self.settings = settings
        self.link = link
        self.fallback = fallback
        self.me = me
        self.state = OriginState()
        # this process's waiters (admission's queue): which of its calls ask again when is
        # nobody else's, and written to the key every waiter's ask was a write (a fleet of
        # four wrote so often that its steps fell back to memory)
        self.queue: list[list[float]] = []
        self.version = -1  # never read
        self.others: dict[str, list[float]] = {}  # other processes' [waiting, in flight, when]
        self.mine = [0, 0]  # this process's waiting and in flight
        self.written = [-1, -1]  # what of them the key holds
        self.text = ""  # the state as the key holds it
        self.wrote_at = -math.inf  # when this process last wrote its counts (fleet clock)
        self.synced = -math.inf  # when the copy was last read or written (monotonic)
        self.epoch = 0  # counts the copy's replacements (a reply sent before one may be stale)
        self.dirty: OriginState | None = None  # the copy, while a write of its change is out
        self.away = False  # the fallback took over from the copy (an outage): once an outage
        self.deferred: list[Callable[[OriginState], object]] = []  # answers not yet written
        self.armed = False  # a write of them is due in flusher.FLUSH_AFTER
        # plain successes noted lock-free (the fast lane's), written with the next step: on
        # the copy alone they were lost at its next read, and the fleet's state counted a
        # tenth of them (an outage's release then started from a tenth of the rate served)
        self.unsent: deque[float] = deque(maxlen=MAX_SUCCESSES)
        self.lock = threading.Lock()  # the copy (never held across a round trip)
        self.turn = threading.Lock()  # threads' sync steps, one at a time
        self.healthy: Callable[[float], bool] = self._healthy

    def forked(self, me: str) -> None:
        """In a child just forked: this process's identity ``me``, no counts, fresh locks."""
        self.me = me
        self.mine, self.written = [0, 0], [-1, -1]
        self.others = {}
        self.queue = []
        self.deferred, self.armed = [], False
        self.dirty = None
        self.away = False
        self.unsent.clear()
        self.synced = -math.inf  # read the key again before trusting the copy
        self.lock = threading.Lock()
        self.turn = threading.Lock()

    def _take_turn(self) -> Steps[Any]:
        """
        The turn to hold across a step (``release()`` ends it); ``False``: none came in time.

        Callers of one process queue for a key, as on one connection, instead of racing (N
        writes on one version cost N round trips for the one that lands): a thread with no
        event loop takes ``turn`` (a threading lock); a task on a loop asks its driver for
        the loop's turn of the key (an asyncio lock, awaited: the loop never blocks on a
        thread's step), waiting at most :func:`~.link.turn_wait`, then racing nobody: the step
        is answered as busy (:meth:`_busy`).  (A sync driver on a loop's thread: ``None``.)
        """
        if asyncio.events._get_running_loop() is None:
            self.turn.acquire()
            return self.turn
        try:
            return (yield Trip(self.link, "turn", [self.redis_key], []))
        except Exception:  # waited its bound for the others' steps
            return False

    def _turn_taken(self) -> bool:
        """Whether another caller of this process holds the turn of the key (a step is out)."""
        if asyncio.events._get_running_loop() is None:
            return self.turn.locked()
        return self.link.loops.taken(self.redis_key)

    def _held(self, now: float) -> OriginState:
        """A private copy of what the key holds, clamped, with the cohort's counts."""
        state = load(self.text) if self.text else OriginState()
        clamped(state, now, self.settings.max_gate)
        self._count(state)
        return state

    def _apply(self, state: OriginState, change: Callable[[OriginState], T]) -> T:
        """``change`` on ``state`` with this process's waiters (admission's queue): its result."""
        state.queue = self.queue
        try:
            return change(state)
        finally:
            self.queue = state.queue  # (this process's waiters: kept whatever becomes of state)

    def _look(self, look: Step[T]) -> T:
        """``look`` at the copy with this process's waiters (the caller holds ``lock``)."""
        return self._apply(self.state, lambda o: look(o, self.settings))

    def _glance(self, step: Step[T]) -> tuple[T] | None:
        """``step`` on a copy of what the key holds: ``(result,)`` if it writes nothing (a poll)."""
        with self.lock:
            state = self._held(self.link.clock())
            before = (state.waiting, state.in_flight)
            result = self._apply(state, lambda o: step(o, self.settings))
            if (state.waiting, state.in_flight) != before or dump(state) != self.text:
                return None
            return (result,)

    # ------------------------------------------------------------------ the copy

    def _adopt(self, version: int, text: Any, cohort: Any, now: float) -> None:
        """Take what the key holds as the copy (caller holds ``lock``)."""
        self.version = int(version)
        self.text = text.decode(errors="replace") if isinstance(text, bytes) else str(text or "")
        fresh = load(self.text) if self.text else OriginState()
        self.state = clamped(fresh, now, self.settings.max_gate)
        self.epoch += 1
        self._replay()
        self.others = keyspace.others_of(cohort, self.me, now)
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
        state.processes = 1 + len(self.others)

    def _trusted(self) -> bool:
        """Whether the copy was read or written within TRUST, or less (:func:`trusted_for`)."""
        return time.monotonic() - self.synced <= keyspace.trusted_for(self.state, TRUST)

    def _refresh(self, fresh: bool = False) -> Steps[None]:
        """Read the key if the copy is older than :data:`TRUST` (or ``fresh``)."""
        if not fresh and self._trusted():
            return
        epoch, sent = self.epoch, time.monotonic()
        reply = yield Trip(self.link, "read", [self.redis_key], [])
        received = time.monotonic()
        version, text, cohort, seconds, micros = reply
        self.link.tick(seconds, micros, sent, received)
        with self.lock:
            self.away = False
            if self._newer(version, epoch):
                self._adopt(version, text, cohort, self.link.clock())
            self.synced = max(self.synced, received)

    def update(
        self,
        step: Step[T],
        *,
        busy: Callable[[], T] | None = None,
        later: Later | None = None,
        quick: Step[T | None] | None = None,
    ) -> Steps[T]:
        """
        ``step`` applied atomically across the fleet; in this process's memory if down.

        ``later`` (an answer the others may learn a step later): taken on the copy at once,
        written with this process's next step (:meth:`defer`); ``quick``: from a trusted copy.

        Load, not an outage (others' writes winning for longer than the timeout, no turn in
        time, a trip failing for load): answered by :meth:`_busy`, never from memory.
        """
        if later is not None and later[2](self.state) and self.defer(later, step):
            return None  # type: ignore[return-value]  # (an answer: None) on the copy now
        if quick is not None and self._trusted() and self.link.up_for(self.redis_key):
            with self.lock:  # (``quick`` changes nothing the key holds: no turn, no trip)
                answer = self._look(quick)
            if answer is not None:
                return answer
        if self._turn_taken() and self._trusted() and self.link.up_for(self.redis_key):
            glanced = self._glance(step)
            if glanced is not None:  # it writes nothing: no turn to wait for
                return glanced[0]
        turn = yield from self._take_turn()
        try:
            if not self.link.up_for(self.redis_key):
                with self.lock:
                    self._hand_over()
                return self._in_memory(step)
            if turn is False:
                return self._busy(step, busy, later)
            started = time.monotonic()
            try:
                while True:  # another process wrote first: again, on what it wrote
                    result, unwritten = yield from self._try(step, busy is not None)
                    if unwritten is None:
                        return result
                    if time.monotonic() - started > self.link.timeout:
                        log.debug("%s: Redis busy with others' writes", self.key)
                        return self._busy(step, busy, later)
            except _Busy:
                return self._busy(step, busy, later)
            except _Down:
                with self.lock:
                    self._hand_over()
                return self._in_memory(step)
        finally:
            if turn:
                turn.release()

    def _busy(self, step: Step[T], busy: Callable[[], T] | None, later: Later | None) -> T:
        """
        ``step`` while Redis is busy (load, not an outage): nothing taken from memory.

        A slot asked for is not taken (:meth:`_glance`'s answer, else ``busy()``); any other
        step waits on the copy for the next write (:meth:`defer`; past 4 * MAX_DEFERRED: memory).
        """
        if busy is not None:
            glanced = self._glance(step)
            return busy() if glanced is None else glanced[0]
        settings = self.settings
        if later is not None:
            learn = later[0]

            def again(o: OriginState) -> object:
                return learn(o, settings, False)

        else:

            def again(o: OriginState) -> object:
                return step(o, settings)

        if len(self.deferred) >= 4 * MAX_DEFERRED:
            return self._in_memory(step)
        with self.lock:
            state = self.state
            if later is not None and later[1]:
                self.mine[1] -= 1
                self._count()  # (learned as answered: not in flight for the ledger)
            before = (state.waiting, state.in_flight)
            result = self._apply(state, again)
            self.mine[0] += state.waiting - before[0]
            self.mine[1] += state.in_flight - before[1]
            self.deferred.append(again)
            self._count()
        return result  # type: ignore[return-value]  # (an answer's result: None)

    def _in_memory(self, step: Step[T]) -> T:
        """
        A step taken in this process's memory (Redis is away), its change of counts kept too.

        This process's counts are its own whatever store paces it: a request counted in
        Redis and answered while Redis was away would otherwise stay in flight in the
        counts written when Redis is back, and every window the fleet shares would admit
        one request fewer for as long as this process lives.
        """
        with self.lock:
            state = self.fallback.state
            before = (state.waiting, state.in_flight)
            result = run(self.fallback.update(step))
            self.mine[0] += state.waiting - before[0]
            self.mine[1] += state.in_flight - before[1]
        return result

    def _try(self, step: Step[T], poll: bool = False) -> Steps[tuple[T, list[int] | None]]:
        """
        ``step`` on the copy, written if nobody wrote since.

        Its result, and ``None`` when written (or when nothing changed on a copy trusted still);
        else the change of counts it would have made (the copy is now what is in Redis: try
        again).

        A step that changes the state is written at once, however old the copy: the write
        checks the version, so it succeeds only if the copy was current, and a paced slot
        costs one round trip.  A step that changes nothing on an old copy reads the key.  A
        step on the copy itself carries the answers deferred on it (:meth:`defer`).  A
        ``poll`` for a slot that takes none writes this process's counts only when they were
        last written :data:`TRUST` seconds ago or more: in a herd every request's counts
        changed, and each poll after it was a write (nine round trips a request, serialized
        on the key's turn).
        """
        carried: list[Callable[[OriginState], object]] = []
        with self.lock:
            now = self.link.clock()
            self._fade(now)
            in_place = self.dirty is not self.state  # else another write of the copy is out
            state = self.state if in_place else self._held(now)
            before = (state.waiting, state.in_flight)
            if self.unsent:
                keyspace.merge_successes(state, self.unsent)
            result = self._apply(state, lambda o: step(o, self.settings))
            delta = [state.waiting - before[0], state.in_flight - before[1]]
            self.mine = [self.mine[0] + delta[0], self.mine[1] + delta[1]]
            text = dump(state)
            if (
                text == self.text
                and (self.mine == self.written or (poll and now - self.wrote_at < TRUST))
                and now - self.wrote_at < COHORT_TTL / 2
            ):
                if in_place:
                    self.deferred.clear()  # what they changed is what the key holds
                if self._trusted():
                    return result, None  # nothing changed (a poll that found no slot): no write
                self.mine = [self.mine[0] - delta[0], self.mine[1] - delta[1]]
                stale = True
            else:
                stale = False
                expected = list(self.mine)
                args = [
                    self.version,
                    text,
                    self.me,
                    int(keyspace.horizon(state, self.settings, now) * 1000),
                    *keyspace.entries_of(self.mine, delta, now),
                ]
                epoch = self.epoch
                if in_place:
                    self.dirty = state
                    carried, self.deferred = self.deferred, []
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
                self.away = False
                self._settle(state)
                self.synced = max(self.synced, received)
                if written:
                    if int(version) > self.version:  # the newest the copy knows of
                        self.version, self.text, self.written = int(version), text, expected
                        self.others = keyspace.others_of(their_cohort, self.me, now)
                        if self.state is not state:
                            self.state, self.epoch = state, self.epoch + 1
                            self._replay()
                        self._count()
                    self.wrote_at = now
                    return result, None
                self.mine = [self.mine[0] - delta[0], self.mine[1] - delta[1]]  # not counted
                self._requeue(carried)
                if self._newer(version, epoch):
                    self._adopt(version, theirs, their_cohort, self.link.clock())
                elif self.state is state:  # a newer copy was written in between: not this one
                    self._undo()
                else:
                    self._carry_over(carried)
                return result, delta
        finally:
            if not settled:  # failed (_Down) or cancelled: nothing of it taken here
                with self.lock:
                    self._settle(state)
                    self.mine = [self.mine[0] - delta[0], self.mine[1] - delta[1]]
                    self.written = [-1, -1]  # whatever the key holds: written again next time
                    self._requeue(carried)
                    if self.state is state:
                        self._undo()
                    else:
                        self._carry_over(carried)

    def _settle(self, state: OriginState) -> None:
        """A write of ``state`` came back (or never will): the copy's change is no longer out."""
        if self.dirty is state:
            self.dirty = None

    def _undo(self) -> None:
        """The copy's unwritten change is dropped: the copy is what the key held (caller locks)."""
        self.state = load(self.text) if self.text else OriginState()
        self.epoch += 1
        self._replay()
        self._count()

    def _replay(self) -> None:
        """The answers not yet written, applied again to a copy just replaced (caller locks)."""
        for answer in self.deferred:
            answer(self.state)

    def _requeue(self, carried: list[Callable[[OriginState], object]]) -> None:
        """A write that carried answers failed: they wait for the next (caller locks)."""
        if carried:
            self.deferred[:0] = carried

    def _carry_over(self, carried: list[Callable[[OriginState], object]]) -> None:
        """
        A write that carried answers failed after the copy was replaced (caller locks).

        The copy came from a write or a read that went while these answers were out with
        the failed write: it lacks them.
        """
        for answer in carried:
            answer(self.state)
        self._count()

    def _hand_over(self) -> None:
        """
        Redis failed: the fallback goes on from the last state seen (caller holds ``lock``).

        Once an outage (handed over again, it forgot the slots it had granted: see :mod:`.store`).
        """
        if self.away:
            return
        self.away = True
        target = self.fallback.state
        for f in dataclasses.fields(OriginState):
            setattr(target, f.name, getattr(self.state, f.name))
        target.waiting, target.in_flight = max(0, self.mine[0]), max(0, self.mine[1])
        target.processes = 1  # (this process's alone now)
        self.deferred.clear()  # on the copy, so in the fallback's state now
        self.synced = -math.inf

    def count(self, waiting: int, in_flight: int, *, known: bool = False) -> None:
        """A change of this process's counts, written with its next step (``known`` news: now)."""
        with self.lock:
            # its own, whatever store paces it (:meth:`_in_memory`)
            self.mine[0] += waiting
            self.mine[1] += in_flight
            news, up = known and not self.state.known, self.link.up_for(self.redis_key)
            if known:
                self.state.known = True
            if up:
                self._count()
                if news:  # an answer that taught the key nothing else: others wait on it
                    self.deferred.append(answered)  # (a probe's: :func:`~.flusher.answered`)
            else:
                self.fallback.count(waiting, in_flight, known=known)
        if news and up:
            arm(self, at_once=True)

    def read(self, look: Step[T], *, fresh: bool = False) -> Steps[T]:
        """
        ``look`` at the copy (read again if older than TRUST, or ``fresh``).

        Answers deferred on the copy are written instead of a read: the write's reply is as
        fresh, and an idle process's last answers reach the fleet.
        """
        if not fresh and self._trusted() and self.link.up_for(self.redis_key):
            with self.lock:  # a trusted copy (the fast lane's usual case): no turn, no trip
                return self._look(look)
        if self.deferred and self.link.up_for(self.redis_key):
            yield from self.update(unchanged)
            fresh = False  # the write's reply (or what it adopted) is as fresh as a read
        turn = yield from self._take_turn()
        try:
            if self.link.up_for(self.redis_key):
                try:
                    if turn is not False:  # (else load: the copy as it is)
                        yield from self._refresh(fresh)
                    with self.lock:
                        return self._look(look)
                except _Busy:
                    with self.lock:
                        return self._look(look)
                except _Down:
                    with self.lock:
                        self._hand_over()
            else:
                with self.lock:
                    self._hand_over()
            settings = self.settings  # (the fleet's, as on the copy)
            return run(self.fallback.read(lambda o, _s: look(o, settings)))
        finally:
            if turn:
                turn.release()

    def defer(self, later: Later, step: Step[object]) -> bool:
        """
        Take ``later``'s answer on the copy now; it goes to Redis with this process's next step.

        For answers that close nothing: the fleet learns them a step later, and the request
        that got them costs one round trip (its slot), not two.  ``later``'s ``released``: the
        request leaves this process's in-flight count at once.  False when
        :data:`MAX_DEFERRED` answers already wait (write this one now, and them with it).
        Redis down: ``step`` (the whole update) in this process's memory.
        """
        if not self.link.up_for(self.redis_key):
            with self.lock:
                self._hand_over()
            self._in_memory(step)
            return True
        settings, (learn, released, _) = self.settings, later

        def answer(o: OriginState) -> object:
            return learn(o, settings, False)

        with self.lock:
            if len(self.deferred) >= MAX_DEFERRED:
                return False
            if released:  # learned as answered: the ledger counts it in flight no more
                self.mine[1] -= 1
                self._count()
            answer(self.state)
            self.deferred.append(answer)
            armed, self.armed = self.armed, True
            self._count()
        if not armed:  # written by this process's next step, or by the flusher at the latest
            arm(self)
        return True

    # ------------------------------------------------------------------ the fast lane

    def _healthy(self, now: float) -> bool:
        return run(self.read(lambda o, _s: adm.healthy(o, now)))

    @property
    def note_success(self) -> Callable[[float], None]:
        """Note a plain success (on this process's copy: it goes out with the next step)."""
        return self._note_success

    def _note_success(self, now: float) -> None:
        if self.link.up_for(self.redis_key):
            self.unsent.append(now)
        else:
            self.fallback.note_success(now)

    def record_attempt(self, budget: RetryBudget, now: float) -> Steps[None]:
        """
        A step: the budget's counts are the fleet's, written with this process's next step.

        Counted on the copy at once, like an answer that closes nothing (:meth:`defer`): an
        attempt is counted between its slot and its send, so a count written at once held the
        send behind the key's turn and a round trip (a thousand tasks on one loop: sends 0.4 s
        late after their slots, past a bucket's 0.2 s of burst, arriving together: a storm
        of 429s).  The others learn it a step later, which only holds their retries back.
        """

        def count(o: OriginState, _s: Settings, _counted: bool = False) -> None:
            o.budget(budget).record_request(now)

        return self.update(count, later=(count, False, always))
