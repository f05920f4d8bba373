"""
What every edge shares: its configuration and the one shape of a call.

The fast lane, then the call flow, then the record attached to what the caller gets.

An edge supplies only what is specific to its client library: how to send, how a response
reads as a :class:`~smoothclient.edges.flow.Reply`, which exceptions are transport failures,
how to close a response, how to sleep, and where the record goes.  A new edge (aiohttp, ...)
is a module beside ``httpx_transport`` and ``requests_adapter`` built on :class:`EdgeCore`.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from .._validate import function
from ..errors import RateLimited
from ..events import CallEnded, CallRecord
from ..hints import FieldAccess
from ..hints.numbers import declared_length
from ..pacing.pacer import Pacer, PacerLike
from ..pacing.scopes import ScopeFn
from ..pacing.steps import Steps, in_thread, on_asyncio
from ..pacing.store import Tracker
from ..policy import DEFAULT_POLICY, POLICY_FIELDS, RetryPolicy, overrides, with_fields
from .flow import CallFlow, Failure, Finished, Offload, Reply, drive, drive_async
from .lane import Binder, FastLane, Lane, _Response, first_try, first_try_async, left_of

__all__ = [
    "DRAIN_LIMIT",
    "Edge",
    "EdgeCore",
    "RequestInfo",
    "cut_on_asyncio",
    "describe",
    "drainable",
    "policy_fields",
]

R = TypeVar("R", bound=_Response)
A = TypeVar("A")
T = TypeVar("T")

#: Error bodies up to this size are read before closing, so the connection can be reused.
DRAIN_LIMIT = 64 * 1024


def drainable(headers: Mapping[str, str]) -> bool:
    """Whether a failed response's body is small enough to read before closing it."""
    size = declared_length(headers.get("content-length", ""))
    return size is not None and size <= DRAIN_LIMIT


async def cut_on_asyncio(
    attempt: Awaitable[T], left: float, late: Callable[[str], BaseException]
) -> T:
    """
    ``attempt`` cut as a whole at ``left`` seconds (asyncio): ``late(message)`` raised then.

    A read's own timeout bounds one read only: a header block dripped a byte at a time would
    hold the attempt past the call's deadline.  A timeout not this one's goes on as it was.
    """
    import asyncio  # imported here: only async edges come this way

    timer = asyncio.timeout(left)
    try:
        async with timer:
            return await attempt
    except TimeoutError:
        if not timer.expired():
            raise  # not ours
        msg = f"the attempt outlasted what was left of the call's deadline ({left:.3g} s)"
        raise late(msg) from None


def policy_fields(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the RetryPolicy fields out of ``kwargs`` (the rest stays)."""
    return {name: kwargs.pop(name) for name in list(kwargs) if name in POLICY_FIELDS}


def describe(method: str, origin: str, path: str) -> str:
    """``GET https://host:443/path`` for logs: never the query string or credentials."""
    return f"{method.upper()} {origin}{path.split('?', 1)[0]}"


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What the call flow needs to know of a request (asked for only when the flow runs)."""

    method: str
    path: str
    has_idempotency_key: bool
    replayable: bool


class EdgeCore:
    """
    An edge's policy, pacer, randomness and fast lane, and its call loop (sync and async).

    Args:
        policy: the retry policy (default ``DEFAULT_POLICY``).
        pacer: any pacer with a clock and per-origin trackers (default: a new :class:`Pacer`).
        rng: randomness for jitter.
        access: how this edge's header containers are read.
        route_of: a request's method and path (for scopes).
        scope: the edge's scope function (overrides the pacer's).
    """

    __slots__ = ("_access", "bind", "lane", "offload", "overrides", "pacer", "policy", "rng")

    def __init__(
        self,
        policy: object,
        pacer: object,
        rng: random.Random | None,
        access: FieldAccess,
        route_of: Callable[[Any], tuple[str, str]] | None = None,
        scope: object = None,
        fields: Mapping[str, Any] | None = None,
        overrides: bool | None = None,
    ) -> None:
        """
        Validate ``policy`` and ``pacer`` and fill in the defaults.

        ``fields``: policy fields given as keywords (``attempts=3``), applied over ``policy``.
        ``overrides``: whether :func:`~smoothclient.override_policy` blocks change this edge's
        calls; default: only when it was given no policy of its own (an SDK's transport keeps
        the policy its author chose, whatever an application's block says).
        """
        if overrides is not None and not isinstance(overrides, bool):
            msg = f"overrides must be True, False or None, not {overrides!r}"
            raise TypeError(msg)
        self.overrides = (policy is None and not fields) if overrides is None else overrides
        if policy is not None and not isinstance(policy, RetryPolicy):
            msg = f"policy must be a RetryPolicy, not {type(policy).__name__}"
            raise TypeError(msg)
        if fields:
            policy = with_fields(policy or DEFAULT_POLICY, fields)
        if pacer is not None and not isinstance(pacer, PacerLike):
            kind = type(pacer).__name__
            msg = f"pacer must be a Pacer (or have clock, track and peek), not {kind}"
            raise TypeError(msg)
        self.policy: RetryPolicy = policy or DEFAULT_POLICY
        self.pacer: PacerLike = pacer or Pacer()
        self.rng = rng or random.Random()
        self._access = access
        function("scope", scope, "of a ScopeRequest", optional=True)
        self.bind = _binder(self.pacer, route_of, scope)
        self.lane = FastLane(self.pacer, self.policy, access, self.bind)
        # a store that does I/O (Redis): async calls on asyncio await its steps' round trips
        # on their loop (redis.asyncio); elsewhere (trio) they run its steps in worker threads
        self.offload: Offload | None = in_thread if getattr(self.pacer, "shared", False) else None

    def under(self, extra: object = None) -> EdgeCore:
        """
        This core, or one with the policy the current overrides give.

        The fields of :func:`~smoothclient.override_policy` (if this edge takes them), then
        ``extra`` (a request's own:
        a RetryPolicy, or a mapping of its fields) over this core's policy.
        """
        fields = overrides() if self.overrides else None
        if fields is None and extra is None:
            return self  # the common case
        policy = with_fields(self.policy, fields) if fields else self.policy
        if isinstance(extra, RetryPolicy):
            policy = extra  # the request's own policy: the most specific word
        elif isinstance(extra, Mapping):
            policy = with_fields(policy, extra)
        elif extra is not None:
            msg = (
                f"a request's smoothclient extension must be a RetryPolicy or a dict, not {extra!r}"
            )
            raise TypeError(msg)
        core = copy.copy(self)
        core.policy = policy
        core.lane = FastLane(self.pacer, policy, self._access, self.bind)
        return core

    def _started(self, began: float | None = None) -> tuple[float, float, float | None]:
        """
        Now, when the call began, and its deadline (it counts the first attempt too).

        ``began``: earlier than now when this call goes on one that began before (the next hop
        of a redirect chain): the deadline is the whole chain's.  Now is the fast lane's time
        too (one clock reading: nothing but looking at the origin's state comes between).
        """
        now = self.pacer.clock()
        started = now if began is None else min(now, began)
        timeout = self.policy.timeout
        return now, started, None if timeout is None else started + timeout

    def _within(
        self, send: Callable[[A, float | None], T], deadline: float | None
    ) -> Callable[[A], T]:
        """``send`` told, at each attempt, what is left of ``deadline``."""
        clock = self.pacer.clock
        return lambda request: send(request, left_of(deadline, clock()))

    def flow(
        self,
        origin: str,
        info: RequestInfo,
        first: Reply | Failure | None,
        lane: Lane,
        started: float | None = None,
        tracker: Tracker | None = None,
        request: object = None,
    ) -> CallFlow:
        """
        The call flow of one request whose first attempt went as ``first`` on ``lane``.

        ``tracker``: the one that admitted the first attempt on the fast lane.
        """
        bind = self.bind
        rebind: Callable[[bool], Steps[Tracker | None]] | None = (
            None if bind is None else lambda late: bind.steps(origin, request, late)
        )
        if tracker is None:  # not admitted on the fast lane: the flow binds it (a step)
            tracker = self.pacer.track(origin)
        return CallFlow(
            self.policy,
            tracker,
            self.pacer.clock,
            origin,
            method=info.method,
            has_idempotency_key=info.has_idempotency_key,
            replayable=info.replayable,
            rng=self.rng,
            describe=describe(info.method, origin, info.path),
            first=first,
            first_counted=lane is Lane.ADMITTED,
            access=self._access,
            started=started,
            rebind=rebind,
        )

    def call(
        self,
        origin: str,
        request: A,
        info: Callable[[A], RequestInfo],
        send: Callable[[A, float | None], R],
        reply_of: Callable[[R], Reply],
        failure_of: Callable[[Exception], Failure | None],
        discard: Callable[[R], bool | None],
        sleep: Callable[[float], object],
        began: float | None = None,
    ) -> tuple[R, dict[str, Any]]:
        """
        One logical call of ``request``: the last response and its record, or the last error.

        ``send(request, left)`` sends one attempt; ``left`` is what remains of the policy's
        deadline (``None``: none), which the attempt's own timeouts must not exceed.
        ``began``: when the logical call began, if before now (a redirect chain's next hop).
        """
        now, started, deadline = self._started(began)
        try:
            response, first, record, lane, tracker = first_try(
                self.lane, origin, send, request, deadline, failure_of, reply_of, now
            )
            if record is not None and response is not None:  # ended on the fast lane
                return self._ended(origin, response, record)
            attempt = self._within(send, deadline)
            done = drive(
                self.flow(origin, info(request), first, lane, started, tracker, request),
                lambda: attempt(request),
                reply_of,
                failure_of,
                discard,
                sleep,
                last=response,
                error=first.exception if isinstance(first, Failure) else None,
            )
        except RateLimited as exc:  # not sent: the pacer would hold it too long
            self._not_sent(origin, exc)
            raise
        return self._finished(origin, done)

    async def call_async(
        self,
        origin: str,
        request: A,
        info: Callable[[A], RequestInfo],
        send: Callable[[A, float | None], Awaitable[R]],
        reply_of: Callable[[R], Reply],
        failure_of: Callable[[Exception], Failure | None],
        discard: Callable[[R], Awaitable[bool | None]],
        sleep: Callable[[float], Awaitable[object]],
        began: float | None = None,
    ) -> tuple[R, dict[str, Any]]:
        """Async twin of :meth:`call`."""
        _, started, deadline = self._started(began)
        offload = self.offload
        on_loop = offload is not None and on_asyncio()
        if on_loop:
            offload = None  # the steps run here; their round trips are awaited on this loop
        try:
            response, first, record, lane, tracker = await first_try_async(
                self.lane,
                origin,
                send,
                request,
                deadline,
                failure_of,
                reply_of,
                offload,
                on_loop,
            )
            if record is not None and response is not None:  # ended on the fast lane
                return self._ended(origin, response, record)
            attempt = self._within(send, deadline)
            done = await drive_async(
                self.flow(origin, info(request), first, lane, started, tracker, request),
                lambda: attempt(request),
                reply_of,
                failure_of,
                discard,
                sleep,
                last=response,
                error=first.exception if isinstance(first, Failure) else None,
                offload=offload,
            )
        except RateLimited as exc:  # not sent: the pacer would hold it too long
            self._not_sent(origin, exc)
            raise
        return self._finished(origin, done)

    def _ended(self, origin: str, response: R, record: dict[str, Any]) -> tuple[R, dict[str, Any]]:
        """A call ended with ``response``: the success or give-up hook, then the result."""
        policy = self.policy
        if policy.on_success is not None or policy.on_give_up is not None:
            ended = CallEnded(origin, CallRecord.from_dict(record), response.status_code)
            hook = policy.on_success if ended.succeeded else policy.on_give_up
            if hook is not None:
                hook(ended)
        return response, record

    def _finished(self, origin: str, done: Finished[R]) -> tuple[R, dict[str, Any]]:
        """A call ended in the flow: its response, or its error raised (the hooks told)."""
        record = done.record.as_dict()
        if done.error is not None:
            self._gave_up(origin, done.error, done.record.freeze())
        return self._ended(origin, done.unwrap(), record)

    def _not_sent(self, origin: str, exc: RateLimited) -> None:
        """A call the pacer would hold too long gives up unsent: its record, the hook told."""
        data = getattr(exc, "smoothclient", None)  # the flow's record of it
        unsent = CallRecord.from_dict(data) if isinstance(data, dict) else CallRecord()
        unsent = replace(unsent, gave_up=str(exc), gave_up_kind=unsent.gave_up_kind or "other")
        exc.smoothclient = unsent.as_dict()  # type: ignore[attr-defined]
        self._gave_up(origin, exc, unsent)

    def _gave_up(self, origin: str, error: BaseException, record: CallRecord) -> None:
        hook = self.policy.on_give_up
        if hook is not None:
            hook(CallEnded(origin, record, exception=error))


def _binder(
    pacer: PacerLike, route_of: Callable[[Any], tuple[str, str]] | None, scope: object
) -> Binder | None:
    """How requests are bound to scopes: ``None`` when the pacer has no scopes."""
    if getattr(pacer, "bind", None) is None or route_of is None:
        return None
    return _Bind(pacer, route_of, scope)  # type: ignore[arg-type]


class _Bind:
    """
    :meth:`Pacer.bind` with an edge's ``route_of`` and scope function (picklable).

    ``books``: when only scopes the server names can bind a request (no scope function, a
    store in this process), an origin's scopes if it has any (``None``: it has none, and
    :meth:`Pacer.bind` would answer ``None``); the fast lane asks it first, a dict read.
    ``None`` when any origin may be bound.  The pacer's ``scope`` is read when the edge is made.
    """

    __slots__ = ("books", "pacer", "route_of", "scope")

    def __init__(
        self, pacer: Pacer, route_of: Callable[[Any], tuple[str, str]], scope: ScopeFn | None
    ) -> None:
        self.pacer, self.route_of, self.scope = pacer, route_of, scope
        self.books: Callable[[str], object] | None = (
            pacer.scope_book if scope is None and pacer.scope is None and not pacer.shared else None
        )

    def __getstate__(self) -> tuple[Pacer, Callable[[Any], tuple[str, str]], ScopeFn | None]:
        return self.pacer, self.route_of, self.scope

    def __setstate__(
        self, state: tuple[Pacer, Callable[[Any], tuple[str, str]], ScopeFn | None]
    ) -> None:
        _Bind.__init__(self, *state)

    def __call__(self, origin: str, request: object, late: bool) -> Tracker | None:
        return self.pacer.bind(origin, request, self.route_of, scope=self.scope, late=late)

    def steps(self, origin: str, request: object, late: bool) -> Steps[Tracker | None]:
        """The binding as a step (a shared store's round trips yielded: :mod:`.pacing.store`)."""
        return self.pacer.binding(origin, request, self.route_of, scope=self.scope, late=late)


class Edge:
    """What every edge class shows of its core: the policy and the pacer it runs with."""

    _core: EdgeCore

    @property
    def policy(self) -> RetryPolicy:
        """The retry policy."""
        return self._core.policy

    @property
    def pacer(self) -> PacerLike:
        """The pacer (shared with whichever transports and adapters were given it)."""
        return self._core.pacer
