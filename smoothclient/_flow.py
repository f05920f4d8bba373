"""
One logical call as a generator of actions, shared by every edge (sync and async alike).

The generator yields :data:`SEND` (send the request and send back a :class:`Reply` or
:class:`Failure`), :class:`Sleep` (wait that long) or :data:`DISCARD` (close the last response,
its connection goes back to the pool).  It returns a :class:`CallRecord`; the edge then returns
the last response or raises the last exception.  It does no I/O: the edges send and sleep.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Generic, Protocol, TypeVar

from . import testing
from ._core import (
    CallState,
    ErrorKind,
    GiveUp,
    Outcome,
    Retry,
    RetryEvent,
    decide,
    retryable_status,
)
from ._errors import RateLimited
from ._parse import declared_length
from .hints import Hints, has_hints, read_hints, with_body_hints
from .pacer import Pacer
from .policy import RetryPolicy

__all__ = [
    "DISCARD",
    "DRAIN_LIMIT",
    "NOT_SENT",
    "SEND",
    "CallFlow",
    "CallRecord",
    "Failure",
    "FastLane",
    "Finished",
    "FirstAttempt",
    "Lane",
    "Reply",
    "Sleep",
    "describe",
    "drainable",
    "drive",
    "drive_async",
    "edge_config",
    "first_try",
    "first_try_async",
    "origin_key",
]

log = logging.getLogger("smoothclient")
_SUCCESS = GiveUp("success", final=True)
_NO_HINTS = Hints()
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
Action = Sleep | _Marker


@dataclass(frozen=True, slots=True)
class Reply:
    """The edge got a response."""

    status: int
    headers: Mapping[str, str] | Any
    body: bytes | None = None  # a small JSON error body, read for delay hints (R15)


@dataclass(frozen=True, slots=True)
class Failure:
    """The edge got an exception; ``sent`` False when the request surely never left."""

    kind: ErrorKind
    sent: bool
    exception: BaseException | None = None
    retry_after: float | None = None  # a delay the failure itself asked for


@dataclass
class CallRecord:
    """What happened during one logical call (attached to the final response)."""

    attempts: int = 0
    waits: list[float] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    gave_up: str | None = None

    @property
    def total_wait(self) -> float:
        """Seconds spent waiting (pacer slots and backoff)."""
        return sum(self.waits)

    def as_dict(self) -> dict[str, Any]:
        """A plain dict for ``response.extensions`` and logs."""
        return {
            "attempts": self.attempts,
            "waits": list(self.waits),
            "total_wait": self.total_wait,
            "reasons": list(self.reasons),
            "gave_up": self.gave_up,
        }


class CallFlow:
    """The retry loop of one logical call, as a generator of actions."""

    def __init__(
        self,
        policy: RetryPolicy,
        pacer: Pacer,
        origin: str,
        *,
        method: str,
        has_idempotency_key: bool,
        replayable: bool,
        rng: random.Random,
        describe: str,
        first: Reply | Failure | None = None,
        first_counted: bool = False,
        idempotent: bool | None = None,
    ) -> None:
        """
        Prepare one logical call; nothing happens until :meth:`run` is driven.

        ``first`` is the result of a first attempt the edge already sent on its fast lane;
        ``first_counted`` True when the pacer already counts it in flight.
        """
        mode = testing.current()
        if mode is not None:
            policy = policy.replace(attempts=min(policy.attempts, mode.attempts))
        self.no_wait = mode is not None
        self.policy = policy
        self.pacer = pacer
        self.origin = origin
        self.method = method.upper()
        self.has_key = has_idempotency_key
        self.replayable = replayable
        self.rng = rng
        self.describe = describe
        self.first = first
        self.first_counted = first_counted
        self.idempotent = idempotent
        self.record = CallRecord()

    def _sleep(self, seconds: float) -> Sleep:
        self.record.waits.append(seconds)
        return Sleep(0.0 if self.no_wait else seconds)

    def run(self) -> Generator[Action, Reply | Failure | None, CallRecord]:
        """Drive the call: yield actions, receive replies, return the record."""
        policy, pacer, clock = self.policy, self.pacer, self.pacer.clock
        started = clock()
        deadline = None if policy.timeout is None else started + policy.timeout
        state = CallState(started, self.method, self.has_key, self.idempotent, self.replayable)
        not_before = started
        result = self.first
        while True:
            if result is None:
                granted = yield from self._admit(not_before, deadline)
                if not granted:
                    return self.record
                sent_at = clock()
                pacer.sent(self.origin)
            else:  # the edge's fast path already sent the first attempt
                sent_at = started
                if not self.first_counted:
                    pacer.adopt(self.origin)
            pacer.record_attempt(self.origin, policy.budget, sent_at)
            self.record.attempts += 1
            if result is None:
                try:
                    result = yield SEND
                except BaseException:  # the edge gave up mid-send (cancelled, unexpected error)
                    pacer.failed(self.origin)
                    raise
            decision, outcome = self._decide(state, result, sent_at)
            if isinstance(decision, GiveUp):
                if not decision.final:
                    self.record.gave_up = decision.reason
                    log.debug("%s: giving up: %s", self.describe, decision.reason)
                return self.record
            yield DISCARD  # first: a hook that raises must not leave the response open
            self._announce(state, decision, outcome, result)
            not_before = clock() + decision.delay
            state = state.next(decision.delay)
            result = None

    def _admit(
        self, not_before: float, deadline: float | None
    ) -> Generator[Action, Reply | Failure | None, bool]:
        """Wait for the pacer's slot; False when it lies beyond the deadline."""
        if self.no_wait:  # testing mode: no pacing either
            if self.record.attempts:
                yield self._sleep(0.0)
            return True
        while True:
            now = self.pacer.clock()
            admission = self.pacer.acquire(
                self.origin, now, not_before=not_before, deadline=deadline
            )
            if not admission.granted:
                return self._refused(admission.delay)
            if admission.final:
                break
            yield self._sleep(admission.delay)
        if admission.delay > 0:
            try:
                yield self._sleep(admission.delay)
            except BaseException:
                self.pacer.cancel(self.origin)
                raise
        return True

    def _refused(self, delay: float) -> bool:
        reason = f"the origin admits no request for {delay:.3g} s, past the deadline"
        if self.record.attempts == 0:
            raise RateLimited(f"{self.describe}: {reason}", retry_after=delay)
        self.record.gave_up = reason
        return False

    def _decide(
        self, state: CallState, result: Reply | Failure | None, sent_at: float
    ) -> tuple[Retry | GiveUp, Outcome]:
        pacer, policy = self.pacer, self.policy
        now = pacer.clock()
        if isinstance(result, Reply):
            hints = read_hints(result.headers)
            if result.body is not None:
                hints = with_body_hints(hints, result.body)
            pacer.observe(self.origin, result.status, hints, now, sent_at=sent_at)
            outcome = Outcome.from_status(result.status, hints)
            if result.status < 400 and result.status not in policy.retry_statuses:
                return _SUCCESS, outcome  # the common case: nothing to decide
        elif isinstance(result, Failure):
            pacer.failed(self.origin)
            hints = (
                _NO_HINTS if result.retry_after is None else Hints(retry_after=result.retry_after)
            )
            outcome = Outcome.from_error(result.kind, sent=result.sent, hints=hints)
        else:  # pragma: no cover - edges always send a result
            msg = "the edge sent no result for SEND"
            raise TypeError(msg)
        decision = decide(
            policy,
            state,
            outcome,
            now=now,
            rng=self.rng,
            cohort=pacer.cohort(self.origin, now),
            budget_ok=pacer.budget_has_room(self.origin, policy.budget, now),
        )
        if isinstance(decision, Retry):
            pacer.budget_take(self.origin, policy.budget, now)
        return decision, outcome

    def _announce(
        self, state: CallState, decision: Retry, outcome: Outcome, result: Reply | Failure | None
    ) -> None:
        self.record.reasons.append(decision.reason)
        log.debug(
            "%s: attempt %d: %s; retrying in %.3f s (window %.3f-%.3f s)",
            self.describe,
            state.attempt,
            decision.reason,
            decision.delay,
            *decision.window,
        )
        hook = self.policy.on_retry
        if hook is not None:
            hook(
                RetryEvent(
                    origin=self.origin,
                    attempt=state.attempt,
                    delay=decision.delay,
                    reason=decision.reason,
                    status=outcome.status,
                    exception=result.exception if isinstance(result, Failure) else None,
                    window=decision.window,
                )
            )


@dataclass(frozen=True, slots=True)
class Finished(Generic[R]):
    """How a driven call ended: the last response (or ``None``), the last error, the record."""

    response: R | None
    error: BaseException | None
    record: CallRecord

    def unwrap(self) -> R:
        """Return the last response, or raise the last error."""
        if self.error is not None:
            record = self.record
            self.error.add_note(
                f"smoothclient: {record.attempts} attempt(s), waited {record.total_wait:.3f} s"
                + (f"; gave up: {record.gave_up}" if record.gave_up else "")
            )
            self.error.smoothclient = record.as_dict()  # type: ignore[attr-defined]
            raise self.error
        assert self.response is not None
        return self.response


@functools.lru_cache(maxsize=1024)
def origin_key(scheme: str, host: str | bytes, port: int | None) -> str:
    """``scheme://host:port`` with the default port filled in: the pacer's origin key."""
    if isinstance(host, bytes):  # httpx's raw_host: the ASCII (IDNA) form, cheaper to get
        host = host.decode("latin-1")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal, bracketed as in a URL (as urllib3 gives it)
    scheme = scheme.lower()
    if port is None:
        port = 443 if scheme in ("https", "wss") else 80
    return f"{scheme}://{host.lower()}:{port}"


#: Error bodies up to this size are read before closing, so the connection can be reused.
DRAIN_LIMIT = 64 * 1024


def drainable(headers: Mapping[str, str]) -> bool:
    """Whether a failed response's body is small enough to read before closing it."""
    size = declared_length(headers.get("content-length", ""))
    return size is not None and size <= DRAIN_LIMIT


def describe(method: str, origin: str, path: str) -> str:
    """``GET https://host:443/path`` for logs: never the query string or credentials."""
    return f"{method.upper()} {origin}{path.split('?', 1)[0]}"


def drive(
    flow: CallFlow,
    send: Callable[[], R],
    reply_of: Callable[[R], Reply],
    failure_of: Callable[[Exception], Failure | None],
    discard: Callable[[R], None],
    sleep: Callable[[float], object],
    *,
    last: R | None = None,
    error: BaseException | None = None,
) -> Finished[R]:
    """
    Run ``flow`` synchronously; return the last response or exception and the record.

    ``last`` / ``error``: what the edge's fast path already got (``flow.first``).
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
                if last is not None:
                    discard(last)
                action = next(gen)
            else:
                assert isinstance(action, Sleep)
                sleep(action.seconds)
                action = next(gen)
    except StopIteration as stop:
        return Finished(last, error, stop.value)
    finally:
        gen.close()


async def drive_async(
    flow: CallFlow,
    send: Callable[[], Awaitable[R]],
    reply_of: Callable[[R], Reply],
    failure_of: Callable[[Exception], Failure | None],
    discard: Callable[[R], Awaitable[None]],
    sleep: Callable[[float], Awaitable[object]],
    *,
    last: R | None = None,
    error: BaseException | None = None,
) -> Finished[R]:
    """Async twin of :func:`drive`."""
    gen = flow.run()
    try:
        action = next(gen)
        while True:
            if action is SEND:
                try:
                    last, error = await send(), None
                    result: Reply | Failure = reply_of(last)
                except Exception as exc:
                    failure = failure_of(exc)
                    if failure is None:
                        raise
                    last, error, result = None, exc, failure
                action = gen.send(result)
            elif action is DISCARD:
                if last is not None:
                    await discard(last)
                action = next(gen)
            else:
                assert isinstance(action, Sleep)
                await sleep(action.seconds)
                action = next(gen)
    except StopIteration as stop:
        return Finished(last, error, stop.value)
    finally:
        gen.close()


class Lane(IntEnum):
    """How an edge's first attempt entered the fast lane."""

    FLOW = 0  # not at all: the flow admits it
    HEALTHY = 1  # a healthy origin: sent at once, not counted in flight
    ADMITTED = 2  # a paced origin with a free slot now: sent at once, counted in flight


# module-level aliases: reading an enum member off its class costs a dict miss and a lookup
_FLOW, _HEALTHY, _ADMITTED = Lane.FLOW, Lane.HEALTHY, Lane.ADMITTED
#: The attempt was not sent on the fast lane.
NOT_SENT: tuple[None, None, None, Lane] = (None, None, None, _FLOW)


class FastLane:
    """
    The edges' fast lane: a first attempt that needs no waiting skips the flow entirely.

    A request to a healthy origin (or to a paced one with a slot free right now) is sent at
    once; a response that ends the call (a success, or an error status no policy retries) is
    learned from and returned with no generator, no record object and, for a healthy origin
    without hints, no lock.  Anything else (a status that may be retried, an exception) goes
    on into :class:`CallFlow` as its first attempt.
    """

    __slots__ = ("_budget", "_policy", "_retry_statuses", "pacer")

    def __init__(self, pacer: Pacer, policy: RetryPolicy) -> None:
        """Serve requests to ``pacer``'s origins under ``policy``."""
        self.pacer = pacer
        self._policy = policy
        self._budget = policy.budget
        self._retry_statuses = policy.retry_statuses

    def enter(self, origin: str) -> Lane:
        """May a first attempt to ``origin`` be sent at once?"""
        if testing._mode is not None:  # the hot path: no call
            return _FLOW
        pacer = self.pacer
        now = pacer.clock()
        if pacer.healthy(origin, now):
            return _HEALTHY
        return _ADMITTED if pacer.try_now(origin, now) else _FLOW

    def leave(self, origin: str, lane: Lane, response: _Response) -> dict[str, Any] | None:
        """
        The record when ``response`` ends the call (learned from); ``None``: to the flow.

        A success ends it, and so does an error status no policy would retry (a 404, a 422):
        the flow would give up on it at once, with the same record.
        """
        status, headers = response.status_code, response.headers
        hints: Hints | None = None  # None: a plain success on a healthy origin, lock-free
        if status >= 400 or status in self._retry_statuses:
            if status == 403:
                return None  # its JSON body may make it retryable (Google's RetryInfo): the flow
            hints = read_hints(headers)
            if hints.should_retry is not None or retryable_status(self._policy, status, hints):
                return None  # the flow decides (and records why)
        elif lane is not _HEALTHY or has_hints(headers):
            hints = read_hints(headers)
        pacer = self.pacer
        now = pacer.clock()
        if hints is None:
            pacer.note_success(origin, now)
        else:
            pacer.observe(origin, status, hints, now, counted=lane is _ADMITTED)
        if self._budget is not None:  # the call's one attempt counts toward the retry budget
            pacer.record_attempt(origin, self._budget, now)
        return {"attempts": 1, "waits": [], "total_wait": 0.0, "reasons": [], "gave_up": None}

    def failed(
        self,
        origin: str,
        lane: Lane,
        exc: BaseException,
        failure_of: Callable[[Exception], Failure | None],
    ) -> Failure:
        """A fast-lane attempt raised: the failure for the flow, or ``exc`` re-raised."""
        failure = failure_of(exc) if isinstance(exc, Exception) else None
        if failure is None:
            self.abandoned(origin, lane)
            raise exc
        return failure

    def abandoned(self, origin: str, lane: Lane) -> None:
        """A fast-lane attempt ends before the flow takes it over (raised, cancelled)."""
        if lane is _ADMITTED:
            self.pacer.failed(origin)


class _Response(Protocol):
    """What the fast lane reads of a response (httpx and requests alike)."""

    @property
    def status_code(self) -> int: ...  # pragma: no cover - a protocol

    @property
    def headers(self) -> Any: ...  # pragma: no cover - a protocol


RS = TypeVar("RS", bound=_Response)
A = TypeVar("A")
#: A first attempt: the response (if any); what the flow takes as its first result (the
#: response's reply, or the failure); the record if the call is complete; the lane.
FirstAttempt = tuple[RS | None, Reply | Failure | None, dict[str, Any] | None, Lane]


def first_try(
    lane: FastLane,
    origin: str,
    send: Callable[[A], RS],
    request: A,
    failure_of: Callable[[Exception], Failure | None],
    reply_of: Callable[[RS], Reply],
) -> FirstAttempt[RS]:
    """Send ``request`` at once when the fast lane admits it (see :class:`FastLane`)."""
    entry = lane.enter(origin)
    if entry is _FLOW:
        return NOT_SENT
    try:
        response = send(request)
    except BaseException as exc:
        return None, lane.failed(origin, entry, exc, failure_of), None, entry
    record = lane.leave(origin, entry, response)
    if record is not None:
        return response, None, record, entry
    try:
        return response, reply_of(response), None, entry  # may read a small error body
    except BaseException:
        lane.abandoned(origin, entry)
        raise


async def first_try_async(
    lane: FastLane,
    origin: str,
    send: Callable[[A], Awaitable[RS]],
    request: A,
    failure_of: Callable[[Exception], Failure | None],
    reply_of: Callable[[RS], Awaitable[Reply]],
) -> FirstAttempt[RS]:
    """Async twin of :func:`first_try`."""
    entry = lane.enter(origin)
    if entry is _FLOW:
        return NOT_SENT
    try:
        response = await send(request)
    except BaseException as exc:
        return None, lane.failed(origin, entry, exc, failure_of), None, entry
    record = lane.leave(origin, entry, response)
    if record is not None:
        return response, None, record, entry
    try:
        return response, await reply_of(response), None, entry
    except BaseException:
        lane.abandoned(origin, entry)
        raise


def edge_config(
    policy: object, pacer: object, rng: random.Random | None
) -> tuple[RetryPolicy, Pacer, random.Random]:
    """Validate an edge's ``policy`` and ``pacer`` arguments and fill in the defaults."""
    from .policy import DEFAULT_POLICY

    if policy is not None and not isinstance(policy, RetryPolicy):
        msg = f"policy must be a RetryPolicy, not {type(policy).__name__}"
        raise TypeError(msg)
    if pacer is not None and not isinstance(pacer, Pacer):
        msg = f"pacer must be a Pacer, not {type(pacer).__name__}"
        raise TypeError(msg)
    return policy or DEFAULT_POLICY, pacer or Pacer(), rng or random.Random()
