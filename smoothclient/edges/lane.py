"""
The hot path: a first attempt that needs no waiting skips the call flow entirely.

Why a module of its own: on a healthy origin the flow's generator, record object and locks
cost more than everything else smoothclient does for a request, and most requests are
first attempts that succeed.  This is the only code on that path, kept short and measured by
``benchmarks/overhead.py`` (the floor row is what any client that reads hints must do); there
are no written-out copies of code that lives elsewhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import IntEnum
from typing import Any, Protocol, TypeVar

from .. import testing
from ..engine.decide import ends_call
from ..events import first_attempt_record
from ..hints import FieldAccess, Hints, has_hints, read_fields
from ..pacing.pacer import PacerLike
from ..policy import RetryPolicy
from .flow import Failure, Reply

__all__ = ["NOT_SENT", "FastLane", "FirstAttempt", "Lane", "first_try", "first_try_async"]


class Lane(IntEnum):
    """How an edge's first attempt entered the fast lane."""

    FLOW = 0  # not at all: the flow admits it
    HEALTHY = 1  # a healthy origin: sent at once, not counted in flight
    ADMITTED = 2  # a paced origin with a free slot now: sent at once, counted in flight


#: The attempt was not sent on the fast lane.
NOT_SENT: tuple[None, None, None, Lane] = (None, None, None, Lane.FLOW)


class _Response(Protocol):
    """What the fast lane reads of a response (httpx and requests alike)."""

    @property
    def status_code(self) -> int: ...  # pragma: no cover - a protocol

    @property
    def headers(self) -> Any: ...  # pragma: no cover - a protocol


class FastLane:
    """
    Send a first attempt at once when its origin needs no waiting; finish the call there.

    A request to a healthy origin (or to a paced one with a slot free right now) is sent at
    once; a response that ends the call (a success, or an error status no policy retries) is
    learned from and returned with no generator and, for a healthy origin without hints, no
    lock.  Anything else (a status that may be retried, an exception) goes on into the call
    flow as its first attempt.
    """

    __slots__ = ("_access", "_policy", "_retry_statuses", "pacer")

    def __init__(self, pacer: PacerLike, policy: RetryPolicy, access: FieldAccess) -> None:
        """Serve requests to ``pacer``'s origins under ``policy``."""
        self.pacer = pacer
        self._policy = policy
        self._retry_statuses = policy.retry_statuses
        self._access = access

    def enter(self, origin: str) -> Lane:
        """May a first attempt to ``origin`` be sent at once?"""
        if testing.current() is not None:
            return Lane.FLOW
        pacer = self.pacer
        now = pacer.clock()
        tracker = pacer.peek(origin)
        if tracker is not None and tracker.healthy(now):
            return Lane.HEALTHY
        return Lane.ADMITTED if pacer.track(origin).try_now(now) else Lane.FLOW

    def leave(self, origin: str, lane: Lane, response: _Response) -> dict[str, Any] | None:
        """The record when ``response`` ends the call (learned from); ``None``: to the flow."""
        status, headers = response.status_code, response.headers
        hints: Hints | None = None  # None: a plain success on a healthy origin, lock-free
        if status >= 400 or status in self._retry_statuses:
            hints = read_fields(headers, self._access)
            if not ends_call(self._policy, status, hints):
                return None  # the flow decides (and records why)
        elif lane is not Lane.HEALTHY or has_hints(headers, self._access):
            hints = read_fields(headers, self._access)
        pacer, budget = self.pacer, self._policy.budget
        now = pacer.clock()
        if hints is None and budget is None:
            tracker = pacer.peek(origin)
            if tracker is not None:
                tracker.note_success(now)
            return first_attempt_record()
        tracker = pacer.track(origin)
        if hints is None:
            tracker.note_success(now)
        else:
            tracker.observe(status, hints, now, counted=lane is Lane.ADMITTED)
        if budget is not None:  # the call's one attempt counts toward the retry budget
            tracker.record_attempt(budget, now)
        return first_attempt_record()

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
        if lane is Lane.ADMITTED:
            self.pacer.track(origin).failed()


RS = TypeVar("RS", bound=_Response)
#: A first attempt: the response (if any); what the flow takes as its first result (the
#: response's reply, or the failure); the record if the call is complete; the lane.
FirstAttempt = tuple[RS | None, Reply | Failure | None, dict[str, Any] | None, Lane]


def first_try(
    lane: FastLane,
    origin: str,
    send: Callable[[], RS],
    failure_of: Callable[[Exception], Failure | None],
    reply_of: Callable[[RS], Reply],
) -> FirstAttempt[RS]:
    """Send at once when the fast lane admits it (see :class:`FastLane`)."""
    entry = lane.enter(origin)
    if entry is Lane.FLOW:
        return NOT_SENT
    try:
        response = send()
    except BaseException as exc:
        return None, lane.failed(origin, entry, exc, failure_of), None, entry
    record = lane.leave(origin, entry, response)
    if record is not None:
        return response, None, record, entry
    try:
        return response, reply_of(response), None, entry
    except BaseException:
        lane.abandoned(origin, entry)
        raise


async def first_try_async(
    lane: FastLane,
    origin: str,
    send: Callable[[], Awaitable[RS]],
    failure_of: Callable[[Exception], Failure | None],
    reply_of: Callable[[RS], Reply],
) -> FirstAttempt[RS]:
    """Async twin of :func:`first_try`."""
    entry = lane.enter(origin)
    if entry is Lane.FLOW:
        return NOT_SENT
    try:
        response = await send()
    except BaseException as exc:
        return None, lane.failed(origin, entry, exc, failure_of), None, entry
    record = lane.leave(origin, entry, response)
    if record is not None:
        return response, None, record, entry
    try:
        return response, reply_of(response), None, entry
    except BaseException:
        lane.abandoned(origin, entry)
        raise
