"""
The hot path: a first attempt that needs no waiting skips the call flow entirely.

Why a module of its own: on a healthy origin the flow's generator, record object and locks
cost more than everything else smoothclient does for a request, and most requests are
first attempts that succeed.  This is the only code on that path, kept short and measured by
``benchmarks/overhead.py`` (the floor row is what any client that reads hints must do); there
are no written-out copies of code that lives elsewhere.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from enum import IntEnum
from typing import Any, Protocol, TypeVar

from .. import _mode as testing
from ..engine.decide import ends_call
from ..events import first_attempt_record
from ..hints import FieldAccess, Hints, has_hints, read_fields
from ..pacing.pacer import PacerLike
from ..pacing.scopes import names_new_scopes
from ..pacing.steps import Steps, run_async
from ..pacing.store import Tracker, stepwise
from ..policy import RetryPolicy
from .flow import Failure, Reply

__all__ = [
    "NOT_SENT",
    "FastLane",
    "FirstAttempt",
    "Lane",
    "first_try",
    "first_try_async",
    "left_of",
]


class Lane(IntEnum):
    """How an edge's first attempt entered the fast lane."""

    FLOW = 0  # not at all: the flow admits it
    HEALTHY = 1  # a healthy origin: sent at once, not counted in flight
    ADMITTED = 2  # a paced origin with a free slot now: sent at once, counted in flight


class Binder(Protocol):
    """
    Binds a request to scopes: ``(origin, request, late)`` -> a tracker, or ``None``.

    ``None``: its origin's alone; see :meth:`smoothclient.Pacer.bind`.  ``books(origin)`` is
    ``None`` when the origin can have no scopes now (binding is skipped then); ``books`` itself
    is ``None`` when any origin may have them.
    """

    books: Callable[[str], object] | None

    def __call__(
        self, origin: str, request: object, late: bool
    ) -> Tracker | None: ...  # pragma: no cover - a protocol

    def steps(
        self, origin: str, request: object, late: bool
    ) -> Steps[Tracker | None]: ...  # pragma: no cover - a protocol


# module-level aliases: reading an enum member off its class costs a dict miss and a lookup
_HEALTHY, _ADMITTED = Lane.HEALTHY, Lane.ADMITTED
#: The attempt was not sent on the fast lane.
NOT_SENT: tuple[None, None, None, Lane, None] = (None, None, None, Lane.FLOW, None)
_NOT_ENTERED: tuple[Lane, None, float] = (Lane.FLOW, None, 0.0)


def left_of(deadline: float | None, now: float) -> float | None:
    """What is left of ``deadline`` at ``now`` (``None``: there is none), never below 0."""
    return None if deadline is None else max(0.0, deadline - now)


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
    learned from and returned with no generator and, for an origin still healthy and a
    response without hints, no lock.  Anything else (a status that may be retried, an
    exception) goes on into the call flow as its first attempt.
    """

    __slots__ = ("_access", "_policy", "_retry_statuses", "bind", "pacer", "shared")

    def __init__(
        self,
        pacer: PacerLike,
        policy: RetryPolicy,
        access: FieldAccess,
        bind: Binder | None = None,
    ) -> None:
        """Serve requests to ``pacer``'s origins under ``policy`` (scopes from ``bind``)."""
        self.pacer = pacer
        self.bind = bind
        self._policy = policy
        self._retry_statuses = policy.retry_statuses
        self._access = access
        #: whether the pacer's store does I/O (a round trip may come between clock readings)
        self.shared: bool = getattr(pacer, "shared", False)

    def enter(
        self, origin: str, request: object = None, now: float | None = None
    ) -> tuple[Lane, Tracker | None, float]:
        """
        May a first attempt to ``origin`` be sent at once?  The lane, tracker and time.

        ``now``: the time the caller read just before (the clock is read when not given, and
        after binding the request to scopes, which may take a round trip).

        Through a shared store, a request its origin alone admits is bound again: the scopes
        another process learned between the binding and the admission bind it too, and the
        flow asks them (the origin's slot given back).  A fleet's processes starting together
        bound their first requests while another's cold-start probe was out, were admitted
        when its answer came, and sent one into the quota that answer had just named spent.
        """
        if testing.current() is not None:
            return _NOT_ENTERED
        pacer, bind = self.pacer, self.bind
        if bind is None or (bind.books is not None and bind.books(origin) is None):
            bound = None  # no scopes: the origin's tracker alone
        else:
            bound = bind(origin, request, False)
            now = None
        if now is None:
            now = pacer.clock()
        if bound is None:  # the origin's tracker alone: looked at without a lock first
            tracker = pacer.peek(origin)
            if tracker is not None and tracker.healthy(now):
                return _HEALTHY, tracker, now
            tracker = pacer.track(origin)
        else:
            tracker = bound
            if tracker.healthy(now):
                return _HEALTHY, tracker, now
        if not tracker.try_now(now):
            return _NOT_ENTERED
        if (
            bound is None
            and self.shared
            and bind is not None
            and bind(origin, request, False) is not None  # learned meanwhile: see above
        ):
            tracker.failed()
            return _NOT_ENTERED
        return _ADMITTED, tracker, now

    def learner(self, tracker: Tracker, hints: Hints, origin: str, request: object) -> Tracker:
        """The tracker to learn ``hints`` with: one that learns scopes, if they name any."""
        if self.bind is None or not names_new_scopes(tracker, hints):
            return tracker
        return self.bind(origin, request, True) or tracker

    def leave(
        self,
        tracker: Tracker,
        lane: Lane,
        sent_at: float,
        response: _Response,
        origin: str = "",
        request: object = None,
    ) -> dict[str, Any] | Hints:
        """
        The record when ``response`` ends the call (learned from); else its hints, to the flow.

        The flow takes the hints read here (:class:`~.flow.Reply`): a response is read once.
        """
        status, headers = response.status_code, response.headers
        now = self.pacer.clock()
        if status >= 400 or status in self._retry_statuses:
            hints = read_fields(headers, self._access)
            if not ends_call(self._policy, status, hints):
                return hints  # the flow decides (and records why)
            tracker = self.learner(tracker, hints, origin, request)
            tracker.observe(status, hints, now, sent_at=sent_at, counted=lane is _ADMITTED)
        elif lane is not _HEALTHY or has_hints(headers, self._access) or not tracker.healthy(now):
            # (sent to a healthy origin that is paced now, a throttle of another request
            # since: its answer is the rate controller's evidence, as a paced request's is)
            hints = read_fields(headers, self._access)
            tracker = self.learner(tracker, hints, origin, request)
            tracker.observe(status, hints, now, sent_at=sent_at, counted=lane is _ADMITTED)
        else:
            tracker.note_success(now)  # a plain success on a healthy origin: lock-free
        budget = self._policy.budget
        if budget is not None:  # the call's one attempt counts toward the retry budget
            tracker.record_attempt(budget, now)
        return first_attempt_record(status)

    @staticmethod
    def failed(
        tracker: Tracker,
        lane: Lane,
        exc: BaseException,
        failure_of: Callable[[Exception], Failure | None],
    ) -> Failure:
        """A fast-lane attempt raised: the failure for the flow, or ``exc`` re-raised."""
        failure = failure_of(exc) if isinstance(exc, Exception) else None
        if failure is None:
            FastLane.abandoned(tracker, lane)
            raise exc
        return failure

    @staticmethod
    def abandoned(tracker: Tracker, lane: Lane) -> None:
        """A fast-lane attempt ends before the flow takes it over (raised, cancelled)."""
        if lane is _ADMITTED:
            tracker.failed()

    # ------------------------------------------------------------ steps (async, shared store)
    # Twins of enter / learner / leave for async edges on a shared store: the same decisions,
    # each tracker call a step (a generator of round trips, :mod:`smoothclient.pacing.store`)
    # that the edge drives on its event loop.  The plain methods above stay generator-free:
    # they are the hot path of every other edge (benchmarks/overhead.py's row "fast lane
    # through its step twins": driving these instead costs about 2.5 us a request).

    def enter_steps(
        self, origin: str, request: object = None
    ) -> Steps[tuple[Lane, Tracker | None, float]]:
        """:meth:`enter` as a step."""
        if testing.current() is not None:
            return _NOT_ENTERED
        pacer, bind = self.pacer, self.bind
        if bind is None or (bind.books is not None and bind.books(origin) is None):
            bound = None
        else:
            bound = yield from bind.steps(origin, request, False)
        now = pacer.clock()
        if bound is None:
            tracker = pacer.peek(origin)
            if tracker is not None and (yield from stepwise(tracker).healthy(now)):
                return Lane.HEALTHY, tracker, now
            tracker = pacer.track(origin)
        else:
            tracker = bound
            if (yield from stepwise(tracker).healthy(now)):
                return Lane.HEALTHY, tracker, now
        if not (yield from stepwise(tracker).try_now(now)):
            return _NOT_ENTERED
        if bound is None and self.shared and bind is not None:  # (see enter)
            rebound = yield from bind.steps(origin, request, False)
            if rebound is not None:
                tracker.failed()
                return _NOT_ENTERED
        return Lane.ADMITTED, tracker, now

    def learner_steps(
        self, tracker: Tracker, hints: Hints, origin: str, request: object
    ) -> Steps[Tracker]:
        """:meth:`learner` as a step."""
        if self.bind is None or not names_new_scopes(tracker, hints):
            return tracker
        return (yield from self.bind.steps(origin, request, True)) or tracker

    def leave_steps(
        self,
        tracker: Tracker,
        lane: Lane,
        sent_at: float,
        response: _Response,
        origin: str = "",
        request: object = None,
    ) -> Steps[dict[str, Any] | Hints]:
        """:meth:`leave` as a step."""
        status, headers = response.status_code, response.headers
        now = self.pacer.clock()
        if status >= 400 or status in self._retry_statuses:
            hints = read_fields(headers, self._access)
            if not ends_call(self._policy, status, hints):
                return hints
            tracker = yield from self.learner_steps(tracker, hints, origin, request)
            yield from stepwise(tracker).observe(
                status, hints, now, sent_at=sent_at, counted=lane is Lane.ADMITTED
            )
        elif (
            lane is not Lane.HEALTHY
            or has_hints(headers, self._access)
            or not (yield from stepwise(tracker).healthy(now))
        ):
            hints = read_fields(headers, self._access)
            tracker = yield from self.learner_steps(tracker, hints, origin, request)
            yield from stepwise(tracker).observe(
                status, hints, now, sent_at=sent_at, counted=lane is Lane.ADMITTED
            )
        else:
            tracker.note_success(now)
        budget = self._policy.budget
        if budget is not None:
            yield from stepwise(tracker).record_attempt(budget, now)
        return first_attempt_record(status)


RS = TypeVar("RS", bound=_Response)
A = TypeVar("A")
#: A first attempt: the response (if any); what the flow takes as its first result (the
#: response's reply, or the failure); the record if the call is complete; the lane; the
#: tracker that admitted it (``None``: not sent).
FirstAttempt = tuple[RS | None, Reply | Failure | None, dict[str, Any] | None, Lane, Tracker | None]


def first_try(
    lane: FastLane,
    origin: str,
    send: Callable[[A, float | None], RS],
    request: A,
    deadline: float | None,
    failure_of: Callable[[Exception], Failure | None],
    reply_of: Callable[[RS], Reply],
    now: float | None = None,
) -> FirstAttempt[RS]:
    """
    Send ``request`` at once when the fast lane admits it (see :class:`FastLane`).

    ``send(request, left)`` is told what is left of the call's ``deadline`` (on the pacer's
    clock); ``now``: the time the caller just read, if it did.
    """
    entry, tracker, sent_at = lane.enter(origin, request, now)
    if tracker is None:
        return NOT_SENT
    if entry is _HEALTHY and not lane.shared:
        left = left_of(deadline, sent_at)  # (nothing came between: a look at the state)
    else:  # a slot taken (under a lock, or a round trip) since
        left = left_of(deadline, lane.pacer.clock())
    try:
        response = send(request, left)
    except BaseException as exc:
        return None, lane.failed(tracker, entry, exc, failure_of), None, entry, tracker
    record = lane.leave(tracker, entry, sent_at, response, origin, request)
    if isinstance(record, dict):
        return response, None, record, entry, tracker
    try:
        return response, _read_once(reply_of(response), record), None, entry, tracker
    except BaseException:
        lane.abandoned(tracker, entry)
        raise


def _read_once(reply: Reply, hints: Hints) -> Reply:
    """``reply`` carrying the hints the lane read from it, so the flow does not read them again."""
    return Reply(reply.status, reply.headers, reply.body, hints)


async def first_try_async(
    lane: FastLane,
    origin: str,
    send: Callable[[A, float | None], Awaitable[RS]],
    request: A,
    deadline: float | None,
    failure_of: Callable[[Exception], Failure | None],
    reply_of: Callable[[RS], Reply],
    offload: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
    on_loop: bool = False,
) -> FirstAttempt[RS]:
    """
    Async twin of :func:`first_try`.

    Where the lane's pacer calls run: here (a store in memory: no I/O); ``on_loop``: as
    steps whose round trips are awaited on the running asyncio loop (a shared store); else
    ``offload`` (a worker thread: a shared store on trio).
    """
    if on_loop:
        entry, tracker, sent_at = await run_async(lane.enter_steps(origin, request))
    elif offload is None:
        entry, tracker, sent_at = lane.enter(origin, request)
    else:
        entry, tracker, sent_at = await offload(functools.partial(lane.enter, origin, request))
    if tracker is None:
        return NOT_SENT
    try:
        response = await send(request, left_of(deadline, lane.pacer.clock()))
    except BaseException as exc:
        return None, lane.failed(tracker, entry, exc, failure_of), None, entry, tracker
    if on_loop:
        steps = lane.leave_steps(tracker, entry, sent_at, response, origin, request)
        record = await run_async(steps)
    elif offload is None:
        record = lane.leave(tracker, entry, sent_at, response, origin, request)
    else:
        leave = functools.partial(lane.leave, tracker, entry, sent_at, response, origin, request)
        record = await offload(leave)
    if isinstance(record, dict):
        return response, None, record, entry, tracker
    try:
        return response, _read_once(reply_of(response), record), None, entry, tracker
    except BaseException:
        lane.abandoned(tracker, entry)
        raise
