"""
httpx transports: :class:`SmoothTransport` and :class:`AsyncSmoothTransport`.

Each wraps a real transport (default: a new ``httpx.HTTPTransport()`` /
``httpx.AsyncHTTPTransport()``) and runs the shared call: the fast lane, then the call flow
(pacer admission, send, hints from every response, the retry decision, closing the failed
response, the wait).

>>> import httpx, smoothclient
>>> client = httpx.Client(transport=smoothclient.SmoothTransport())
"""

from __future__ import annotations

import operator
import random
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, NoReturn

import httpx

from ..engine.decide import ErrorKind
from ..errors import RateLimited
from ..hints import GENERIC, FieldAccess, wants_body
from ..pacing.keys import origin_key
from ..pacing.pacer import PacerLike
from ..pacing.scopes import ScopeFn
from ..policy import RetryPolicy
from .base import Edge, EdgeCore, RequestInfo, drainable
from .flow import Failure, Reply
from .httpx_deadline import ENDS, cut_at_deadline

__all__ = ["AsyncSmoothTransport", "RateLimitedError", "SmoothTransport"]

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_KINDS: tuple[tuple[type[Exception], ErrorKind], ...] = (
    (httpx.ConnectError, "connect"),
    (httpx.ConnectTimeout, "connect"),
    (httpx.PoolTimeout, "pool"),
    (httpx.TimeoutException, "timeout"),
    (httpx.ReadError, "read"),
    (httpx.WriteError, "write"),
    (httpx.RemoteProtocolError, "protocol"),
)
_SECOND = operator.itemgetter(1)
_LOWER_AND_VALUE = operator.itemgetter(1, 2)


def _names(headers: Any) -> list[bytes]:
    return list(map(_SECOND, headers._list))


def _pairs(headers: Any) -> Iterable[tuple[object, object]]:
    return map(_LOWER_AND_VALUE, headers._list)


def _fast_access() -> FieldAccess:
    """
    Read ``httpx.Headers`` through their ``(raw, lowercased, value)`` byte triples.

    That costs far less than the public views, which decode every entry.  Checked once, so
    another httpx layout falls back to the public views.
    """
    try:
        sample = httpx.Headers({"X-A": "b"})._list
    except AttributeError:  # pragma: no cover - a future httpx
        return GENERIC
    return FieldAccess(_names, _pairs) if sample == [(b"X-A", b"x-a", b"b")] else GENERIC


HEADER_ACCESS = _fast_access()


def _failure(exc: Exception) -> Failure | None:
    """Classify an httpx transport error; ``None`` for anything else (re-raised)."""
    if not isinstance(exc, httpx.TransportError):
        return None
    kind: ErrorKind = next((k for t, k in _KINDS if isinstance(exc, t)), "other")
    return Failure(kind, sent=not isinstance(exc, _NOT_SENT), exception=exc)


def _reply(response: httpx.Response) -> Reply:
    """The flow's view of a response, with its JSON error body when read (docs/headers.md R15)."""
    status, headers = response.status_code, response.headers
    if wants_body(status, headers):
        try:
            return Reply(status, headers, response.content)
        except httpx.ResponseNotRead:
            pass
    return Reply(status, headers)


def _read(response: httpx.Response) -> httpx.Response:
    """
    Read a small JSON error body (sync responses), so :func:`_reply` can use it.

    A body that fails to read (a reset, a read timeout) fails the attempt with that error:
    the response could not be handed over whole, retried or not.
    """
    if response.status_code >= 400 and wants_body(response.status_code, response.headers):
        try:
            response.read()
        except BaseException:
            response.close()  # give the connection back
            raise
    return response


async def _aread(response: httpx.Response) -> httpx.Response:
    """Async twin of :func:`_read`."""
    if response.status_code >= 400 and wants_body(response.status_code, response.headers):
        try:
            await response.aread()
        except BaseException:
            import anyio  # only here: a cancelled read must still close the response

            with anyio.CancelScope(shield=True):
                await response.aclose()
            raise
    return response


async def _bounded(
    attempt: Coroutine[Any, Any, httpx.Response], left: float, request: httpx.Request
) -> httpx.Response:
    """
    ``attempt`` cut as a whole at ``left`` seconds, raising ``httpx.ReadTimeout``.

    Each read's own timeout bounds one read only: a header block dripped a byte at a time
    would hold the attempt past the call's deadline.  A cancel scope bounds the whole
    attempt (``asyncio.timeout`` on asyncio, ``anyio`` elsewhere, e.g. trio).  The sync
    transport ends every network wait with the attempt instead (:mod:`.httpx_deadline`).
    """
    import asyncio  # imported here: only async callers come this way, and it is cheap then

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): anyio's scope follows the running library
        import anyio

        with anyio.move_on_after(left):
            return await attempt
        raise _deadline_passed(request, left) from None
    timer = asyncio.timeout(left)
    try:
        async with timer:
            return await attempt
    except TimeoutError:
        if not timer.expired():
            raise  # not ours
        raise _deadline_passed(request, left) from None


def _deadline_passed(request: httpx.Request, left: float) -> httpx.ReadTimeout:
    msg = f"the attempt outlasted what was left of the call's deadline ({left:.3g} s)"
    return httpx.ReadTimeout(msg, request=request)


def _cut(request: httpx.Request, left: float | None) -> httpx.Request:
    """The request with its timeouts cut to ``left`` seconds (what remains of the deadline)."""
    if left is None:
        return request
    timeout = request.extensions.get("timeout")
    if isinstance(timeout, dict):
        try:
            if max(timeout.values()) <= left:
                return request  # the common case: every timeout ends before the deadline
        except TypeError:  # a timeout of None (none at all) compares with nothing: cut it
            pass
        request.extensions["timeout"] = {
            name: left if value is None else min(value, left) for name, value in timeout.items()
        }
    else:
        request.extensions["timeout"] = dict.fromkeys(("connect", "read", "write", "pool"), left)
    return request


def _route(request: httpx.Request) -> tuple[str, str]:
    """A request's method and path, for scopes."""
    return request.method, request.url.path


def _replayable(request: httpx.Request) -> bool:
    """
    A request whose body is in memory can be sent again; a streaming generator cannot.

    A body of bytes (``httpx.ByteStream``) is in memory even when unread: httpx builds a
    redirect's request that way, and a GET redirected to a 503 was refused its retries.
    """
    try:
        request.content  # noqa: B018 - raises RequestNotRead for streaming bodies
    except httpx.RequestNotRead:
        return isinstance(request.stream, httpx.ByteStream)
    return True


_WRONG_CLIENT = "{0} needs {1} (this transport is for the other kind of client)"


def _check_inner(transport: object, kind: type, mine: str, other: str) -> None:
    """``transport`` (the one that really sends) is of the kind this edge wraps."""
    if transport is None or isinstance(transport, kind):
        return
    sync = isinstance(transport, httpx.BaseTransport)
    if sync or isinstance(transport, httpx.AsyncBaseTransport):
        what = "a sync" if sync else "an async"
        msg = f"{mine} wraps {kind.__qualname__}s; {what} transport goes in {other}"
    else:
        name = type(transport).__name__
        msg = f"{mine}'s transport must be an httpx.{kind.__qualname__}, not {name}"
    raise TypeError(msg)


class RateLimitedError(RateLimited, httpx.TransportError):
    """
    :class:`~smoothclient.RateLimited`, raised by the httpx transports: an ``httpx.HTTPError``.

    The call gave up before sending, because the pacer would have held it past its deadline or
    ``max_retry_after``; ``retry_after`` says for how long.
    """

    def __init__(self, message: str, *, retry_after: float, request: httpx.Request) -> None:
        """The message, the delay and the request not sent."""
        RateLimited.__init__(self, message, retry_after=retry_after)
        self._request = request


def _rate_limited(exc: RateLimited, request: httpx.Request) -> RateLimitedError:
    error = RateLimitedError(str(exc), retry_after=exc.retry_after, request=request)
    error.smoothclient = exc.smoothclient  # type: ignore[attr-defined]
    return error


class _Base(Edge):
    """What the sync and async transports share: the edge core and the request's facts."""

    def __init__(
        self,
        policy: RetryPolicy | None,
        pacer: PacerLike | None,
        rng: random.Random | None,
        scope: ScopeFn | None,
        fields: dict[str, Any],
        overrides: bool | None = None,
    ) -> None:
        self._core = EdgeCore(policy, pacer, rng, HEADER_ACCESS, _route, scope, fields, overrides)

    @staticmethod
    def _origin(request: httpx.Request) -> str:
        url = request.url
        return origin_key(url.scheme, url.raw_host, url.port)

    def _info(self, request: httpx.Request) -> RequestInfo:
        key = self._core.policy.idempotency_header
        return RequestInfo(
            request.method,
            request.url.path,
            key is not None and key in request.headers,
            _replayable(request),
        )


class SmoothTransport(_Base, httpx.BaseTransport):
    """
    An httpx transport that retries with shift-and-widen jitter and paces per origin.

    Args:
        transport: the transport that really sends (default ``httpx.HTTPTransport()``).
        policy: the :class:`~smoothclient.RetryPolicy` (default ``DEFAULT_POLICY``).
        pacer: a :class:`~smoothclient.Pacer` to share with other transports (default: its own).
        rng: randomness for jitter (default a fresh ``random.Random()``).
        sleep: how to wait (default ``time.sleep``; tests pass a fake clock's ``sleep``).
        scope: which quota scopes a request belongs to (overrides the pacer's ``scope``; see
            :class:`~smoothclient.ScopeRules`).
        overrides: whether :func:`~smoothclient.override_policy` blocks change its calls
            (default: only when it was given no policy or policy fields of its own).
        **policy_fields: :class:`~smoothclient.RetryPolicy` fields (``attempts=3``), applied
            over ``policy``.
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        policy: RetryPolicy | None = None,
        pacer: PacerLike | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], object] = time.sleep,
        scope: ScopeFn | None = None,
        overrides: bool | None = None,
        **policy_fields: Any,
    ) -> None:
        """Wrap ``transport``."""
        _check_inner(transport, httpx.BaseTransport, "SmoothTransport", "AsyncSmoothTransport")
        super().__init__(policy, pacer, rng, scope, policy_fields, overrides)
        self.transport = transport if transport is not None else httpx.HTTPTransport()
        self._sleep = sleep
        #: whether an attempt in progress is cut at the deadline (a stock transport's is)
        self._cuts = cut_at_deadline(self.transport)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the retry flow; return the last response."""
        core = self._core.under(request.extensions.get("smoothclient"))
        try:
            response, record = core.call(
                self._origin(request),
                request,
                self._info,
                self._attempt,
                _reply,
                _failure,
                self._discard,
                self._sleep,
            )
        except RateLimited as exc:
            raise _rate_limited(exc, request) from exc
        response.extensions["smoothclient"] = record
        return response

    async def __aenter__(self) -> NoReturn:
        """An async client was given this sync transport: say which one it needs."""
        raise TypeError(_WRONG_CLIENT.format("httpx.AsyncClient", "AsyncSmoothTransport"))

    async def handle_async_request(self, request: httpx.Request) -> NoReturn:
        """An async client was given this sync transport: say which one it needs."""
        raise TypeError(_WRONG_CLIENT.format("httpx.AsyncClient", "AsyncSmoothTransport"))

    def _attempt(self, request: httpx.Request, left: float | None) -> httpx.Response:
        if left is None or not self._cuts:
            return _read(self.transport.handle_request(_cut(request, left)))
        token = ENDS.set(time.monotonic() + left)  # every network wait ends with the attempt
        try:
            return _read(self.transport.handle_request(_cut(request, left)))
        finally:
            ENDS.reset(token)

    @staticmethod
    def _discard(response: httpx.Response) -> None:
        try:
            if drainable(response.headers) and not response.is_stream_consumed:
                response.read()
        except (httpx.HTTPError, httpx.StreamError):
            pass  # a body that failed to read once is not read again
        finally:
            response.close()

    def close(self) -> None:
        """Close the wrapped transport."""
        self.transport.close()


async def _anyio_sleep(seconds: float) -> None:
    import anyio  # imported on first use: httpx itself needs it only for its async client

    await anyio.sleep(seconds)


class AsyncSmoothTransport(_Base, httpx.AsyncBaseTransport):
    """
    Async twin of :class:`SmoothTransport`; works on asyncio and trio.

    Args:
        transport: the transport that really sends (default ``httpx.AsyncHTTPTransport()``).
        policy: the :class:`~smoothclient.RetryPolicy` (default ``DEFAULT_POLICY``).
        pacer: a :class:`~smoothclient.Pacer`, shareable with sync transports too.
        rng: randomness for jitter.
        sleep: an async sleep (default ``anyio.sleep``, which follows the running event loop).
        scope: which quota scopes a request belongs to (overrides the pacer's ``scope``).
        overrides: whether :func:`~smoothclient.override_policy` blocks change its calls
            (default: only when it was given no policy or policy fields of its own).
        **policy_fields: :class:`~smoothclient.RetryPolicy` fields, applied over ``policy``.
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        policy: RetryPolicy | None = None,
        pacer: PacerLike | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Any] = _anyio_sleep,
        scope: ScopeFn | None = None,
        overrides: bool | None = None,
        **policy_fields: Any,
    ) -> None:
        """Wrap ``transport``."""
        _check_inner(transport, httpx.AsyncBaseTransport, "AsyncSmoothTransport", "SmoothTransport")
        super().__init__(policy, pacer, rng, scope, policy_fields, overrides)
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._sleep = sleep

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the retry flow; return the last response."""
        core = self._core.under(request.extensions.get("smoothclient"))
        try:
            response, record = await core.call_async(
                self._origin(request),
                request,
                self._info,
                self._attempt,
                _reply,
                _failure,
                self._discard,
                self._sleep,
            )
        except RateLimited as exc:
            raise _rate_limited(exc, request) from exc
        response.extensions["smoothclient"] = record
        return response

    def __enter__(self) -> NoReturn:
        """A sync client was given this async transport: say which one it needs."""
        raise TypeError(_WRONG_CLIENT.format("httpx.Client", "SmoothTransport"))

    def handle_request(self, request: httpx.Request) -> NoReturn:
        """A sync client was given this async transport: say which one it needs."""
        raise TypeError(_WRONG_CLIENT.format("httpx.Client", "SmoothTransport"))

    async def _attempt(self, request: httpx.Request, left: float | None) -> httpx.Response:
        if left is None:
            return await self._send(request, left)
        return await _bounded(self._send(request, left), left, request)

    async def _send(self, request: httpx.Request, left: float | None) -> httpx.Response:
        return await _aread(await self.transport.handle_async_request(_cut(request, left)))

    @staticmethod
    async def _discard(response: httpx.Response) -> None:
        try:
            if drainable(response.headers) and not response.is_stream_consumed:
                await response.aread()
        except (httpx.HTTPError, httpx.StreamError):
            pass  # a body that failed to read once is not read again
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()
