"""
aiohttp's edge: :class:`SmoothMiddleware`, a client middleware (aiohttp 3.12 and later).

A middleware gets each request with the handler that really sends it; this one runs the
shared call around that handler: the fast lane, then the call flow (pacer admission, send,
hints from every response, the retry decision, releasing the failed response, the wait).
The session's ``timeout`` (``total``) bounds the whole call, waits and retries included; the
policy's ``timeout`` cuts each attempt at what is left of the call's deadline (unless its
``cut_attempts`` is ``False``).  See docs/aiohttp.md.  With ``cache=`` an
:class:`~smoothclient.HttpCache` stands in front of the whole call (``edges/aiohttp_cached.py``;
docs/http-cache.md section 4).

aiohttp sends again outside its middlewares: each hop of a redirect, and an idempotent request
once more after a closed connection.  Both go through the middleware again, as the same
``session.request()`` (the same timer of aiohttp's); the middleware remembers, per task, the
last call's request and how it ended (:data:`_LAST`): a redirect's next hop goes on under the
chain's deadline, and the resend of a call that already gave up is answered with its error.

>>> import aiohttp
>>> from smoothclient.aiohttp import SmoothMiddleware
>>> session = aiohttp.ClientSession(middlewares=(SmoothMiddleware(),))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import operator
import random
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from .._validate import function
from ..engine.decide import ErrorKind
from ..errors import RateLimited
from ..hints import FieldAccess, wants_body
from ..httpcache.cache import HttpCache
from ..pacing.keys import origin_key
from ..pacing.pacer import PacerLike
from ..pacing.scopes import ScopeFn
from ..policy import RetryPolicy
from .aiohttp_cached import send_cached
from .base import Edge, EdgeCore, RequestInfo, cut_on_asyncio, drainable
from .flow import Failure, Reply

__all__ = ["RateLimitedError", "SmoothMiddleware"]

Handler = Callable[[aiohttp.ClientRequest], Awaitable[aiohttp.ClientResponse]]

#: aiohttp's errors as the flow's kinds, the most specific first.
_KINDS: tuple[tuple[type[BaseException], ErrorKind], ...] = (
    (aiohttp.ConnectionTimeoutError, "connect"),
    (aiohttp.ClientConnectorError, "connect"),
    (aiohttp.ServerTimeoutError, "timeout"),
    (aiohttp.ServerDisconnectedError, "protocol"),
    (aiohttp.ClientPayloadError, "read"),
    (aiohttp.ClientConnectionResetError, "read"),
    (aiohttp.ClientOSError, "read"),
    (TimeoutError, "timeout"),
)
#: Never reached the server: no connection was made.
_NOT_SENT = (aiohttp.ConnectionTimeoutError, aiohttp.ClientConnectorError)
#: Transport errors that no retry mends: a certificate the client refuses stays refused.
_FINAL = (aiohttp.ClientConnectorCertificateError,)

#: The errors after which aiohttp itself sends an idempotent request once more, middlewares
#: and all (meant for a pooled connection the server had closed).
_RESENT_AFTER = (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: The last call of this task that aiohttp may send on: its request's timer (aiohttp's own,
#: one per ``session.request()``), when it began, and the error it gave up with (``None``: it
#: ended in a redirect).
_LAST: contextvars.ContextVar[tuple[object, float, BaseException | None] | None] = (
    contextvars.ContextVar("smoothclient_aiohttp_last", default=None)
)


def _names(headers: Any) -> list[object]:
    return list(map(_NAME, headers.items()))  # (keys() names a repeated field once)


def _values(headers: Any) -> list[object]:
    return list(headers.values())


_NAME = operator.itemgetter(0)

#: ``CIMultiDictProxy``: its names, its pairs, and its values in the order of its names (the
#: fields are read by their places: 1.7 us a response, 9.1 by its pairs).
HEADER_ACCESS = FieldAccess(_names, operator.methodcaller("items"), values=_values)


def _failure(exc: Exception) -> Failure | None:
    """Classify an aiohttp transport error; ``None`` for anything else (re-raised)."""
    if isinstance(exc, _FINAL):
        return None
    kind = next((k for t, k in _KINDS if isinstance(exc, t)), None)
    if kind is None:
        if not isinstance(exc, aiohttp.ClientConnectionError):
            return None
        kind = "other"
    return Failure(kind, sent=not isinstance(exc, _NOT_SENT), exception=exc)


class _Sent:
    """
    One attempt's response as the call loop reads it, with its error body if one was read.

    aiohttp's response says ``status``; the call loop reads ``status_code``.
    """

    __slots__ = ("body", "headers", "response", "status_code")

    def __init__(self, response: aiohttp.ClientResponse, body: bytes | None) -> None:
        self.response = response
        self.status_code = response.status
        self.headers = response.headers
        self.body = body


def _reply(sent: _Sent) -> Reply:
    """The flow's view of a response, with its JSON error body when read (docs/headers.md R15)."""
    return Reply(sent.status_code, sent.headers, sent.body)


def _expired(timer: object) -> bool:
    """
    Whether aiohttp's timer of a call (the session's ``total``) has run out.

    aiohttp cancels the task when it does, and where the task was inside one of its own reads
    (waiting for a response's head or body) that read turns the cancellation into a plain
    ``TimeoutError``, the cancellation spent: only the timer still says the call is over.
    """
    check = getattr(timer, "assert_timeout", None)
    if check is None:
        return False
    try:
        check()
    except TimeoutError:
        return True
    return False


def _failure_under(timer: object) -> Callable[[Exception], Failure | None]:
    """:func:`_failure` for a call under aiohttp's ``timer``: its running out ends the call."""
    if timer is None:
        return _failure

    def failure(exc: Exception) -> Failure | None:
        if isinstance(exc, TimeoutError) and _expired(timer):
            return None  # the session's total, not the attempt's: raised, never retried
        return _failure(exc)

    return failure


async def _send(handler: Handler, timer: object, request: aiohttp.ClientRequest) -> _Sent:
    """Send once; read a small JSON error body (its hints), so a retry can use them."""
    if _expired(timer):  # aiohttp would send it, then raise at the response's head
        msg = "the session's total timeout ran out before this attempt"
        raise TimeoutError(msg)
    response = await handler(request)
    status = response.status
    if status >= 400 and wants_body(status, response.headers):
        try:
            return _Sent(response, await response.read())
        except BaseException:
            response.close()  # a body that fails to read fails the attempt with that error
            raise
    return _Sent(response, None)


async def _cut(
    handler: Handler, timer: object, request: aiohttp.ClientRequest, left: float | None
) -> _Sent:
    """One attempt, cut at what is left of the call's deadline (``left``; ``None``: none)."""
    if left is None:
        return await _send(handler, timer, request)
    return await cut_on_asyncio(_send(handler, timer, request), left, aiohttp.SocketTimeoutError)


async def _whole(
    handler: Handler, timer: object, request: aiohttp.ClientRequest, left: float | None
) -> _Sent:
    """One attempt the deadline does not cut (``cut_attempts=False``: the session's timeout)."""
    return await _send(handler, timer, request)


def _route(request: aiohttp.ClientRequest) -> tuple[str, str]:
    """A request's method and path, for scopes."""
    return request.method, request.url.path


def _replayable(request: aiohttp.ClientRequest) -> bool:
    """
    Whether the request's body can be sent again.

    Asked after the first attempt: bytes, text, JSON, forms and seekable files can;
    an async generator or a stream read once cannot (aiohttp marks its payload consumed).
    """
    body = request.body
    return isinstance(body, bytes) or not body.consumed


def _went_on(timer: object) -> float | None:
    """
    Whether this call goes on from the task's last one: when that began (a redirect chain's).

    The last call gave up on an error aiohttp sends again after: its error is raised (the
    call already spent its attempts on it; aiohttp's resend would start it over, attempts and
    all, doubling what a failing origin gets).  Anything else clears the mark.
    """
    last = _LAST.get()
    _LAST.set(None)
    if last is None or timer is None or last[0] is not timer:
        return None
    if last[2] is not None:
        raise last[2]
    return last[1]


class RateLimitedError(RateLimited, aiohttp.ClientError):
    """
    :class:`~smoothclient.RateLimited` from :class:`SmoothMiddleware`: an ``aiohttp.ClientError``.

    The call gave up before sending, because the pacer would have held it past its deadline or
    ``max_retry_after``; ``retry_after`` says for how long.  ``request_info`` is the request
    not sent.
    """

    def __init__(
        self, message: str, *, retry_after: float, request_info: aiohttp.RequestInfo
    ) -> None:
        """The message, the delay and the request not sent."""
        RateLimited.__init__(self, message, retry_after=retry_after)
        self.request_info = request_info


def _rate_limited(exc: RateLimited, request: aiohttp.ClientRequest) -> RateLimitedError:
    error = RateLimitedError(
        str(exc), retry_after=exc.retry_after, request_info=request.request_info
    )
    error.smoothclient = exc.smoothclient  # type: ignore[attr-defined]
    return error


class SmoothMiddleware(Edge):
    """
    An aiohttp client middleware that retries with shift-and-widen jitter and paces per origin.

    Give it to a session: ``aiohttp.ClientSession(middlewares=(SmoothMiddleware(),))``.  The
    last response comes back with its record (:func:`~smoothclient.record_of`); a call that
    ends in an error raises aiohttp's own, the record attached.

    Args:
        policy: the :class:`~smoothclient.RetryPolicy` (default ``DEFAULT_POLICY``).
        pacer: a :class:`~smoothclient.Pacer` to share with other edges (default: its own).
        rng: randomness for jitter (default a fresh ``random.Random()``).
        sleep: an async sleep (default ``asyncio.sleep``; tests pass a fake clock's).
        scope: which quota scopes a request belongs to (overrides the pacer's ``scope``; see
            :class:`~smoothclient.pacing.ScopeRules`).
        overrides: whether :func:`~smoothclient.override_policy` blocks change its calls
            (default: only when it was given no policy or policy fields of its own).
        cache: an :class:`~smoothclient.HttpCache` in front of the retry flow: a fresh stored
            response answers without a request (docs/http-cache.md); ``None`` (default): none.
        **policy_fields: :class:`~smoothclient.RetryPolicy` fields (``attempts=3``), applied
            over ``policy``.
    """

    def __init__(
        self,
        *,
        policy: RetryPolicy | None = None,
        pacer: PacerLike | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        scope: ScopeFn | None = None,
        overrides: bool | None = None,
        cache: HttpCache | None = None,
        **policy_fields: Any,
    ) -> None:
        """Check the arguments; the middleware is ready for any number of sessions."""
        if cache is not None and not isinstance(cache, HttpCache):
            msg = f"cache must be an HttpCache, not {type(cache).__name__}"
            raise TypeError(msg)
        function("sleep", sleep, "awaitable taking seconds")
        if inspect.isbuiltin(sleep):  # time.sleep: it would stall the loop, then fail to await
            msg = f"sleep must be an async sleep (asyncio.sleep's kind), not {sleep!r}"
            raise TypeError(msg)
        self._core = EdgeCore(
            policy, pacer, rng, HEADER_ACCESS, _route, scope, policy_fields, overrides
        )
        self._sleep = sleep
        #: the HTTP cache in front of the retry flow (docs/http-cache.md), if any
        self.cache = cache

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: Handler
    ) -> aiohttp.ClientResponse:
        """Send ``request`` through the cache (if any) and the retry flow; the last response."""
        timer = getattr(request, "_timer", None)  # aiohttp's own: one per session.request()
        began = None if _LAST.get() is None else _went_on(timer)
        if self.cache is None:
            return await self._call(request, handler, timer, began)

        async def flow(foreground: bool) -> aiohttp.ClientResponse:
            if foreground:
                return await self._call(request, handler, timer, began)
            return await self._call(request, handler, None, None)  # after the caller's call

        response = await send_cached(self.cache, request, self._ends(request), flow, self._sleep)
        last = _LAST.get()
        if last is not None and last[2] is not None:  # a stored copy stood in for that error
            _LAST.set(None)
        return response

    def _ends(self, request: aiohttp.ClientRequest) -> Callable[[Any, Any], object]:
        """How a call of ``request`` the cache answered alone ends: the edge's hooks."""
        origin, core = self._origin(request), self._core

        def ended(response: aiohttp.ClientResponse, record: dict[str, Any]) -> object:
            return core._ended(origin, _Sent(response, None), record)

        return ended

    async def _call(
        self,
        request: aiohttp.ClientRequest,
        handler: Handler,
        timer: object,
        began: float | None,
    ) -> aiohttp.ClientResponse:
        """The retry flow; ``timer``, ``began``: aiohttp's timer, when the chain began."""
        core = self._core.under()
        if timer is not None:
            began = core.pacer.clock() if began is None else began
        try:
            sent, record = await core.call_async(
                self._origin(request),
                request,
                self._info,
                functools.partial(
                    _whole if core.policy.cut_attempts is False else _cut, handler, timer
                ),
                _reply,
                _failure_under(timer),
                functools.partial(_discard, timer),
                self._sleep if timer is None else _waiting(self._sleep, timer),
                began,
            )
        except RateLimited as exc:
            raise _rate_limited(exc, request) from exc
        except _RESENT_AFTER as exc:
            if began is not None and not isinstance(exc, _NOT_SENT):  # (aiohttp raises those)
                _LAST.set((timer, began, exc))
            raise
        response = sent.response
        if began is not None and response.status in _REDIRECTS:
            _LAST.set((timer, began, None))
        response.smoothclient = record  # type: ignore[attr-defined]
        return response

    @staticmethod
    def _origin(request: aiohttp.ClientRequest) -> str:
        url = request.url
        return origin_key(url.scheme, url.raw_host or "", url.port)

    def _info(self, request: aiohttp.ClientRequest) -> RequestInfo:
        key = self._core.policy.idempotency_header
        return RequestInfo(
            request.method,
            request.url.path,
            key is not None and key in request.headers,
            _replayable(request),
        )


def _waiting(
    sleep: Callable[[float], Awaitable[object]], timer: object
) -> Callable[[float], Awaitable[object]]:
    """``sleep``, refused once aiohttp's ``timer`` ran out (its cancellation spent elsewhere)."""

    async def wait(seconds: float) -> object:
        if _expired(timer):
            msg = "the session's total timeout ran out before this wait"
            raise TimeoutError(msg)
        return await sleep(seconds)

    return wait


async def _discard(timer: object, sent: _Sent) -> bool:
    """
    Release a response the call will not return: read a small body first (reuse).

    Whether its body is still whole (read before the release).  A read cut by the session's
    total (aiohttp's ``timer``) ends the call with its ``TimeoutError``.
    """
    response = sent.response
    whole = sent.body is not None
    try:
        if not whole and drainable(response.headers):
            await response.read()
            whole = True
    except (TimeoutError, aiohttp.ClientError) as exc:
        if isinstance(exc, TimeoutError) and _expired(timer):
            raise
        # a body that failed to read once is not read again
    finally:
        if not whole:
            # (read to its end, it gave its connection back; released, aiohttp refuses to read
            # it again, and a call that gives up before its next attempt returns it)
            response.release()
    return whole
