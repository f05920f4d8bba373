"""
One logical call as a generator of actions, shared by every HTTP edge (sync and async alike).

The generator yields :data:`SEND` (send the request and send back a :class:`Reply` or
:class:`Failure`), :class:`Sleep` (wait that long) or :data:`DISCARD` (close the last response,
its connection goes back to the pool), and, for a shared store, the round trips of its steps
(:class:`~smoothclient.pacing.store.Trip`: send back the reply, or throw the failure in).  It
returns a :class:`~smoothclient.events.RecordBuilder`; the edge then returns the last response
or raises the last exception.  It does no I/O: it asks the pacer's tracker for slots and tells
it what came back (each a step: :func:`~smoothclient.pacing.store.stepwise`), and the engine
what to do next.  So a sync edge takes a step's round trips with the store's sync client, and
an async edge on asyncio awaits them on its loop (:func:`drive_async`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .. import _mode as testing
from ..engine.decide import (
    CallState,
    ErrorKind,
    GiveUp,
    GiveUpKind,
    Outcome,
    Retry,
    asked_for,
    decide,
    ends_call,
    spent,
)
from ..errors import RateLimited
from ..events import RecordBuilder, RetryEntry, RetryEvent
from ..hints import GENERIC, FieldAccess, Hints, read_fields, with_body_hints
from ..pacing import outage
from ..pacing.scopes import Bound, names_new_scopes
from ..pacing.steps import Steps, Trip, answer, answer_async, boxed
from ..pacing.store import Tracker, stepwise
from ..policy import RetryBudget, RetryPolicy

__all__ = [
    "DISCARD",
    "SEND",
    "CallFlow",
    "Failure",
    "Finished",
    "Reply",
    "Sleep",
    "announce",
    "drive",
    "drive_async",
]

log = logging.getLogger("smoothclient")
#: Transport failures that count toward an origin's outage (see pacing/outage.py).
OUTAGE_ERRORS = frozenset({"connect", "timeout", "read"})
_SUCCESS = GiveUp("success", final=True)
_NO_HINTS = Hints()
#: A retry the budget has no room for asks again after about this long (jittered into half
#: to all of it), until its deadline (see CallFlow._room).
BUDGET_WAIT = 0.25
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds``."""

    seconds: float


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


SEND = _Marker("SEND")
DISCARD = _Marker("DISCARD")
Action = Sleep | _Marker | Trip


@dataclass(frozen=True, slots=True)
class Reply:
    """The edge got a response."""

    status: int
    headers: Mapping[str, str] | Any
    body: bytes | None = None  # a small JSON error body, read for delay hints (docs/headers.md R15)
    hints: Hints | None = None  # what the headers say, when the fast lane read them already


@dataclass(frozen=True, slots=True)
class Failure:
    """The edge got an exception; ``sent`` False when the request surely never left."""

    kind: ErrorKind
    sent: bool
    exception: BaseException | None = None
    retry_after: float | None = None  # a delay the failure itself asked for


def announce(
    policy: RetryPolicy,
    record: RecordBuilder,
    describe: str,
    origin: str,
    state: CallState,
    decision: Retry,
    status: int | None,
    exception: BaseException | None,
) -> None:
    """Tell the record, the log and the ``on_retry`` hook that the call will retry."""
    record.retries.append(RetryEntry(decision.reason, decision.delay, decision.window, status))
    log.debug(
        "%s: attempt %d: %s; retrying in %.3f s (window %.3f-%.3f s)",
        describe, state.attempt, decision.reason, decision.delay, *decision.window,
    )  # fmt: skip
    hook = policy.on_retry
    if hook is not None:
        hook(
            RetryEvent(
                origin=origin, attempt=state.attempt, delay=decision.delay,
                reason=decision.reason, status=status, exception=exception,
                window=decision.window,
            )
        )  # fmt: skip


class CallFlow:
    """The retry loop of one logical call, as a generator of actions."""

    def __init__(
        self,
        policy: RetryPolicy,
        tracker: Tracker,
        clock: Callable[[], float],
        origin: str,
        *,
        method: str,
        has_idempotency_key: bool,
        replayable: bool,
        rng: random.Random,
        describe: str,
        first: Reply | Failure | None = None,
        first_counted: bool = False,
        access: FieldAccess = GENERIC,
        started: float | None = None,
        rebind: Callable[[bool], Steps[Tracker | None]] | None = None,
    ) -> None:
        """
        Prepare one logical call; nothing happens until :meth:`run` is driven.

        ``first`` is the result of a first attempt the edge already sent on its fast lane;
        ``first_counted`` True when the tracker already counts it in flight.  ``access`` reads
        the edge's header containers.  ``started``: when the call began (before a fast-lane
        first attempt, whose time counts toward the deadline); default: now.  ``rebind(late)``
        binds the request to its scopes again (a step; see :meth:`smoothclient.Pacer.bind`):
        before each attempt it admits, and to learn the scopes a response names.
        """
        mode = testing.current()
        if mode is not None:
            policy = policy.replace(attempts=min(policy.attempts, mode.attempts))
        self.no_wait = mode is not None
        self.policy = policy
        self.tracker = tracker
        self.clock = clock
        self.origin = origin
        self.method = method.upper()
        self.has_key = has_idempotency_key
        self.replayable = replayable
        self.rng = rng
        self.describe = describe
        self.first = first
        self.first_counted = first_counted
        self.access = access
        self.started = started
        self.rebind = rebind
        self.base = tracker  # what the request is bound by when no scope binds it
        self.record = RecordBuilder()
        self.jittered = False  # the last retry's wait was drawn at random (no rate to pace at)
        self.counted_ahead = False  # the next attempt was counted by the budget when taken
        self.kept = True  # the last response released is still whole (its body in memory)
        self.released = False  # the last response was released before the retry was decided

    def _sleep(self, seconds: float) -> Sleep:
        self.record.waits.append(seconds)
        return Sleep(0.0 if self.no_wait else seconds)

    def run(self) -> Generator[Action, Any, RecordBuilder]:
        """Drive the call: yield actions, receive replies, return the record."""
        policy, clock = self.policy, self.clock
        started = clock() if self.started is None else self.started
        deadline = None if policy.timeout is None else started + policy.timeout
        state = CallState(started, self.method, self.has_key, None, self.replayable)
        not_before = started
        result = self.first
        while True:
            if result is None:
                granted = yield from self._admit(not_before, deadline)
                if not granted:
                    return self.record
                tracker = self.tracker  # as bound at admission
                sent_at = clock()
                tracker.sent()
            else:  # the edge's fast lane already sent the first attempt
                tracker = self.tracker
                sent_at = started
                if not self.first_counted:
                    tracker.adopt()
            if policy.budget is not None and not self.counted_ahead:
                yield from stepwise(tracker).record_attempt(policy.budget, sent_at)
            self.counted_ahead = False
            self.record.attempts += 1
            if result is None:
                try:
                    result = yield SEND
                except BaseException:  # the edge gave up mid-send (cancelled, unexpected error)
                    tracker.failed()
                    raise
            self.released = False
            decision, outcome = yield from self._decide(state, result, sent_at)
            if isinstance(decision, GiveUp):
                if not decision.final:
                    self.record.gave_up = decision.reason
                    self.record.gave_up_kind = decision.kind
                    log.debug("%s: giving up: %s", self.describe, decision.reason)
                if self.released and not self.kept:  # nothing whole to hand back
                    refusal = RateLimited(f"{self.describe}: {decision.reason}", retry_after=0.0)
                    refusal.smoothclient = self.record.as_dict()  # type: ignore[attr-defined]
                    raise refusal
                return self.record
            # first: a hook that raises must not leave the response open; the edge says
            # whether the response is still whole (its body read) once released
            yield from self._release()
            error = result.exception if isinstance(result, Failure) else None
            announce(
                policy, self.record, self.describe, self.origin, state, decision,
                outcome.status, error,
            )  # fmt: skip
            not_before = clock() + decision.delay
            state = state.next(decision.delay)
            result = None

    def _admit(self, not_before: float, deadline: float | None) -> Generator[Action, Any, bool]:
        """
        Wait for the tracker's slot; False when it lies beyond the deadline.

        A wait the pacer imposes counts like one the server asks for: one longer than
        ``max_retry_after`` is not waited either.
        """
        if self.no_wait:  # testing mode: no pacing either
            if self.record.attempts:
                yield self._sleep(0.0)
            return True
        cap = self.policy.max_retry_after
        began = self.clock()
        backoff = max(0.0, not_before - began)  # what the retry decision itself asked for
        if cap is not None:
            latest = max(began, not_before) + cap
            deadline = latest if deadline is None else min(deadline, latest)
        if self.jittered and backoff > 0:
            # a wait drawn before the origin had a rate: the slot is asked for at its end, so
            # a rate learned meanwhile (from the answers to the rest of a herd) paces it too
            yield self._sleep(backoff)
        while True:
            if self.rebind is not None:  # the scopes learned since bind the request too
                self.tracker = (yield from self.rebind(False)) or self.base
            now = self.clock()
            admission = yield from stepwise(self.tracker).acquire(
                now, not_before=not_before, deadline=deadline
            )
            if not admission.granted:
                down = yield from stepwise(self.tracker).read(outage.down_for(now))
                return self._refused(admission.delay, now, deadline, down, admission.closed_for)
            if admission.final:
                if (yield from self._rebound()):
                    continue  # scopes learned since it was bound bind it: asked of them too
                break
            yield from self._held(admission.delay, now)
            yield self._sleep(admission.delay)
        if admission.delay > 0:
            try:
                yield from self._held(admission.delay, now)
                yield self._sleep(admission.delay)
            except BaseException:
                self.tracker.cancel()
                raise
        waited = admission.delay + (now - began)
        if waited > backoff + 1e-9:  # the pacer held it longer than the backoff did
            self.record.pacer_waits.append(waited - backoff)
        return True

    def _rebound(self) -> Steps[bool]:
        """
        Whether scopes learned since it was bound bind a request its origin alone just admitted.

        Then the origin's slot is given back, and the request is asked of them all: the answer
        that ended its wait (a cold-start probe's, say) may have named a quota that is spent,
        and learned after the request was last bound, it was sent into it.  Not only after a
        wait: another thread's answer, or another process's through a shared store, may land
        between the binding and the admission.
        """
        if self.rebind is None or isinstance(self.tracker, Bound):
            return False
        bound = yield from self.rebind(False)
        if bound is None:
            return False
        self.tracker.cancel()
        self.tracker = bound
        return True

    def _held(self, delay: float, now: float, tracker: Tracker | None = None) -> Steps[bool]:
        """Count a wait as held for an outage when the origin is down; whether it is."""
        down = yield from stepwise(tracker or self.tracker).read(outage.down_for(now))
        if down is None:
            return False
        self.record.held_for_outage += delay
        log.debug(
            "%s: held %.3f s for an outage (every request failed for %.3g s)",
            self.describe,
            delay,
            down,
        )
        return True

    def _refused(
        self,
        delay: float,
        now: float,
        deadline: float | None,
        down: float | None,
        closed: float | None = None,
    ) -> bool:
        left = "no deadline" if deadline is None else f"{max(0.0, deadline - now):.3g} s left"
        reason = (
            f"the origin admits no request for {delay:.3g} s ({left} of the deadline or "
            "max_retry_after)"
        )
        kind: GiveUpKind = "deadline"
        if down is not None:
            reason += f"; it has failed every request for {down:.3g} s, next probe in {delay:.3g} s"
            kind = "outage"
        if closed is not None:
            reason += (
                f"; the server said its quota is spent: closed until its reset in {closed:.3g} s"
            )
            kind = "closed" if down is None else kind
        self.record.gave_up, self.record.gave_up_kind = reason, kind
        if self.record.attempts == 0 or not self.kept:
            # not sent, or the last response was released with its body unread: nothing
            # whole to hand back (returned, its body would raise once read)
            error = RateLimited(f"{self.describe}: {reason}", retry_after=max(delay, closed or 0.0))
            error.smoothclient = self.record.as_dict()  # type: ignore[attr-defined]
            raise error
        return False

    def _decide(
        self, state: CallState, result: Reply | Failure | None, sent_at: float
    ) -> Generator[Action, Any, tuple[Retry | GiveUp, Outcome]]:
        tracker, policy = self.tracker, self.policy
        now = self.clock()
        if isinstance(result, Reply):
            self.record.status = result.status
            hints = result.hints
            if hints is None:
                hints = read_fields(result.headers, self.access)
            if result.body is not None:
                hints = with_body_hints(hints, result.body)
            learner = tracker
            if self.rebind is not None and names_new_scopes(tracker, hints):
                learner = (yield from self.rebind(True)) or tracker  # learns the scopes named
            yield from stepwise(learner).observe(result.status, hints, now, sent_at=sent_at)
            outcome = Outcome.from_status(result.status, hints)
            if ends_call(policy, result.status, hints):
                return _SUCCESS, outcome  # the common case: nothing to decide
        elif isinstance(result, Failure):
            self.record.status = None
            tracker.failed()
            if result.kind in OUTAGE_ERRORS:  # refused, timed out, cut off: an outage's evidence
                yield from stepwise(tracker).update(functools.partial(outage.failed, now=now))
            hints = (
                _NO_HINTS if result.retry_after is None else Hints(retry_after=result.retry_after)
            )
            outcome = Outcome.from_error(result.kind, sent=result.sent, hints=hints)
        else:  # pragma: no cover - edges always send a result
            msg = "the edge sent no result for SEND"
            raise TypeError(msg)
        cohort = yield from stepwise(tracker).cohort(now)
        self.jittered = not cohort.paced
        decision = decide(policy, state, outcome, now=now, rng=self.rng, cohort=cohort)
        budget = policy.budget  # checked and taken in one step, only for a real retry
        if isinstance(decision, Retry) and budget and not asked_for(outcome):
            room = yield from self._room(decision, state, tracker, budget, now)
            if room is None:
                return spent(decision), outcome
            decision, now = room, self.clock()
            # the retry is an attempt from now on: counted when taken, not when sent (a herd's
            # retries held by the pacer were taken long before they were sent; the budget
            # counted them against attempts it had not yet seen, and read as spent)
            yield from stepwise(tracker).record_attempt(budget, now)
            self.counted_ahead = True
        if isinstance(decision, Retry) and (yield from self._held(decision.delay, now, tracker)):
            decision = dataclasses.replace(
                decision, reason=f"{decision.reason}; held for an outage (probes, not retries)"
            )
        return decision, outcome

    def _release(self) -> Generator[Action, Any, None]:
        """Release the last response (once): the edge says whether it is still whole."""
        if not self.released:
            self.released = True
            self.kept = (yield DISCARD) is not False

    def _room(
        self, decision: Retry, state: CallState, tracker: Tracker, budget: RetryBudget, now: float
    ) -> Generator[Action, Any, Retry | None]:
        """
        Take room for a retry from ``budget``, waiting for it within the deadline.

        A spent budget holds the retry back until the origin's traffic makes room (each
        attempt counted makes ``ratio`` of one), as a token bucket admits at its rate: the
        retries stay within the budget, and a call with deadline left is not given up for it
        (in a brownout past the origin's capacity, the budget gave up up to 5% of the calls
        where clients without one failed fewer).  The time waited comes off the retry's
        backoff.  ``None``: no room before the deadline (or no deadline, or testing mode).
        """
        waited = 0.0
        timeout = self.policy.timeout
        deadline = None if timeout is None else state.started + timeout
        while not (yield from stepwise(tracker).try_retry(budget, now)):
            pause = BUDGET_WAIT * (0.5 + 0.5 * self.rng.random())
            if deadline is None or self.no_wait or now + pause > deadline:
                return None
            yield from self._release()  # (held, it kept a connection others need to make room)
            yield self._sleep(pause)
            waited += pause
            now = self.clock()
        if not waited:
            return decision
        return dataclasses.replace(decision, delay=max(0.0, decision.delay - waited))


@dataclass(frozen=True, slots=True)
class Finished(Generic[R]):
    """How a driven call ended: the last response (or ``None``), the last error, the record."""

    response: R | None
    error: BaseException | None
    record: RecordBuilder

    def unwrap(self) -> R:
        """Return the last response, or raise the last error."""
        if self.error is not None:
            raise self.record.attach_to(self.error)
        assert self.response is not None
        return self.response


def drive(
    flow: CallFlow,
    send: Callable[[], R],
    reply_of: Callable[[R], Reply],
    failure_of: Callable[[Exception], Failure | None],
    discard: Callable[[R], bool | None],
    sleep: Callable[[float], object],
    *,
    last: R | None = None,
    error: BaseException | None = None,
) -> Finished[R]:
    """
    Run ``flow`` synchronously; return the last response or exception and the record.

    ``last`` / ``error``: what the edge's fast lane already got (``flow.first``).
    ``discard(response)`` releases a response; ``False`` when its body is gone (unread).
    """
    gen = flow.run()
    try:
        action = next(gen)
        while True:
            if action is SEND:
                try:
                    last, error = send(), None
                    result: Reply | Failure = reply_of(last)
                except Exception as exc:
                    failure = failure_of(exc)
                    if failure is None:
                        raise
                    last, error, result = None, exc, failure
                action = gen.send(result)
            elif action is DISCARD:
                kept = discard(last) if last is not None else None
                action = gen.send(kept)
            elif isinstance(action, Trip):  # a shared store's round trip, taken here
                action = answer(gen, action)
            else:
                assert isinstance(action, Sleep)
                sleep(action.seconds)
                action = next(gen)
    except StopIteration as stop:
        return Finished(last, error, stop.value)
    finally:
        gen.close()


#: Runs a step of the call's own code (the flow, the fast lane) somewhere else than in the
#: event loop's thread: a worker thread, when the pacer's store does blocking I/O there.
Offload = Callable[[Callable[[], Any]], Awaitable[Any]]


def _boxed_here(gen: Generator[Action, Any, Any], fn: Callable[[], Action]) -> tuple[bool, Any]:
    """:func:`~smoothclient.pacing.store.boxed`, the store's round trips taken here (a thread)."""

    def taken() -> Action:
        action = fn()
        while isinstance(action, Trip):
            action = answer(gen, action)
        return action

    return boxed(taken)


async def drive_async(
    flow: CallFlow,
    send: Callable[[], Awaitable[R]],
    reply_of: Callable[[R], Reply],
    failure_of: Callable[[Exception], Failure | None],
    discard: Callable[[R], Awaitable[bool | None]],
    sleep: Callable[[float], Awaitable[object]],
    *,
    last: R | None = None,
    error: BaseException | None = None,
    offload: Offload | None = None,
) -> Finished[R]:
    """
    Async twin of :func:`drive`.

    The flow's own steps (its pacer calls) run right here, in the event loop, and the round
    trips of a shared store's steps are awaited on it (``redis.asyncio``: the loop never
    blocks; a failed or slow trip is thrown into the step, which falls back).  ``offload``:
    where the flow's steps run instead, round trips and all, e.g.
    :func:`~smoothclient.pacing.store.in_thread` for a shared store on trio
    (``redis.asyncio`` runs on asyncio only).
    """
    gen = flow.run()

    async def advance(fn: Callable[[], Action]) -> tuple[bool, Any]:
        if offload is not None:
            taken: tuple[bool, Any] = await offload(functools.partial(_boxed_here, gen, fn))
            return taken
        going, action = boxed(fn)
        while going and isinstance(action, Trip):  # a failed trip: the step falls back
            going, action = await answer_async(gen, action)
        return going, action

    try:
        going, action = await advance(gen.__next__)
        while going:
            if action is SEND:
                try:
                    last, error = await send(), None
                    result: Reply | Failure = reply_of(last)
                except Exception as exc:
                    failure = failure_of(exc)
                    if failure is None:
                        raise
                    last, error, result = None, exc, failure
                going, action = await advance(functools.partial(gen.send, result))
                continue
            if action is DISCARD:
                kept = await discard(last) if last is not None else None
                going, action = await advance(functools.partial(gen.send, kept))
                continue
            assert isinstance(action, Sleep)
            await sleep(action.seconds)
            going, action = await advance(gen.__next__)
        return Finished(last, error, action)
    finally:
        gen.close()
