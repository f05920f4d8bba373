"""
httpx transports: :class:`SmoothTransport` and :class:`AsyncSmoothTransport`.

Each wraps a real transport (default: a new ``httpx.HTTPTransport()`` /
``httpx.AsyncHTTPTransport()``) and drives the shared call flow: pacer admission, send,
hints from every response, the retry decision, closing the failed response, the wait.

>>> import httpx, smoothclient
>>> client = httpx.Client(transport=smoothclient.SmoothTransport())
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx

from ._core import ErrorKind
from ._flow import (
    CallFlow,
    Failure,
    FastLane,
    Lane,
    Reply,
    describe,
    drainable,
    drive,
    drive_async,
    edge_config,
    first_try,
    first_try_async,
    origin_key,
)
from .hints import wants_body
from .pacer import Pacer
from .policy import RetryPolicy

__all__ = ["AsyncSmoothTransport", "SmoothTransport"]

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_KINDS: tuple[tuple[type[Exception], ErrorKind], ...] = (
    (httpx.ConnectError, "connect"),
    (httpx.ConnectTimeout, "connect"),
    (httpx.PoolTimeout, "connect"),
    (httpx.TimeoutException, "timeout"),
    (httpx.ReadError, "read"),
    (httpx.WriteError, "write"),
    (httpx.RemoteProtocolError, "protocol"),
)


def _failure(exc: Exception) -> Failure | None:
    """Classify an httpx transport error; ``None`` for anything else (re-raised)."""
    if not isinstance(exc, httpx.TransportError):
        return None
    kind: ErrorKind = next((k for t, k in _KINDS if isinstance(exc, t)), "other")
    return Failure(kind, sent=not isinstance(exc, _NOT_SENT), exception=exc)


def _reply(response: httpx.Response) -> Reply:
    """The flow's view of a response: with its JSON error body, when that was read (R15)."""
    status, headers = response.status_code, response.headers
    if wants_body(status, headers):
        try:
            return Reply(status, headers, response.content)
        except httpx.ResponseNotRead:
            pass
    return Reply(status, headers)


def _read_reply(response: httpx.Response) -> Reply:
    """:func:`_reply` after reading a small JSON error body (sync responses)."""
    if wants_body(response.status_code, response.headers):
        try:
            response.read()
        except httpx.HTTPError:
            pass  # unreadable: no body hints, that is all
        except BaseException:
            response.close()  # interrupted mid-read: give the connection back
            raise
    return _reply(response)


async def _peek(response: httpx.Response) -> httpx.Response:
    """Read a small JSON error body (async responses), so :func:`_reply` can use it."""
    if wants_body(response.status_code, response.headers):
        try:
            await response.aread()
        except httpx.HTTPError:
            pass
        except BaseException:
            with anyio.CancelScope(shield=True):  # cancelled mid-read: still close it
                await response.aclose()
            raise
    return response


async def _peeked_reply(response: httpx.Response) -> Reply:
    """:func:`_reply` after :func:`_peek` (async responses)."""
    return _reply(await _peek(response))


def _replayable(request: httpx.Request) -> bool:
    """A request whose body is in memory can be sent again; a streaming generator cannot."""
    try:
        request.content  # noqa: B018 - raises RequestNotRead for streaming bodies
    except httpx.RequestNotRead:
        return False
    return True


class _Base:
    """What the sync and async transports share: configuration and the flow factory."""

    def __init__(
        self,
        *,
        policy: RetryPolicy | None,
        pacer: Pacer | None,
        rng: random.Random | None,
    ) -> None:
        self.policy, self.pacer, self._rng = edge_config(policy, pacer, rng)
        self._lane = FastLane(self.pacer, self.policy)

    def _origin(self, request: httpx.Request) -> str:
        url = request.url
        return origin_key(url.scheme, url.raw_host, url.port)

    def _flow(
        self, request: httpx.Request, origin: str, first: Reply | Failure | None, lane: Lane
    ) -> CallFlow:
        url = request.url
        key = self.policy.idempotency_header
        return CallFlow(
            self.policy,
            self.pacer,
            origin,
            method=request.method,
            has_idempotency_key=key is not None and key in request.headers,
            replayable=_replayable(request),
            rng=self._rng,
            describe=describe(request.method, origin, url.path),
            first=first,
            first_counted=lane is Lane.ADMITTED,
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
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        policy: RetryPolicy | None = None,
        pacer: Pacer | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        """Wrap ``transport``."""
        super().__init__(policy=policy, pacer=pacer, rng=rng)
        self.transport = transport if transport is not None else httpx.HTTPTransport()
        self._sleep = sleep

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the retry flow; return the last response."""
        origin = self._origin(request)
        send = self.transport.handle_request
        response, first, record, lane = first_try(
            self._lane, origin, send, request, _failure, _read_reply
        )
        if record is not None and response is not None:  # a success on the fast lane
            response.extensions["smoothclient"] = record
            return response
        done = drive(
            self._flow(request, origin, first, lane),
            lambda: send(request),
            _read_reply,
            _failure,
            self._discard,
            self._sleep,
            last=response,
            error=first.exception if isinstance(first, Failure) else None,
        )
        response = done.unwrap()
        response.extensions["smoothclient"] = done.record.as_dict()
        return response

    @staticmethod
    def _discard(response: httpx.Response) -> None:
        try:
            if drainable(response.headers):
                response.read()
        except httpx.HTTPError:
            pass
        finally:
            response.close()

    def close(self) -> None:
        """Close the wrapped transport."""
        self.transport.close()


class AsyncSmoothTransport(_Base, httpx.AsyncBaseTransport):
    """
    Async twin of :class:`SmoothTransport`; works on asyncio and trio.

    Args:
        transport: the transport that really sends (default ``httpx.AsyncHTTPTransport()``).
        policy: the :class:`~smoothclient.RetryPolicy` (default ``DEFAULT_POLICY``).
        pacer: a :class:`~smoothclient.Pacer`, shareable with sync transports too.
        rng: randomness for jitter.
        sleep: an async sleep (default ``anyio.sleep``, which follows the running event loop).
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        policy: RetryPolicy | None = None,
        pacer: Pacer | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Any] = anyio.sleep,
    ) -> None:
        """Wrap ``transport``."""
        super().__init__(policy=policy, pacer=pacer, rng=rng)
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._sleep = sleep

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the retry flow; return the last response."""
        origin = self._origin(request)
        send = self.transport.handle_async_request
        response, first, record, lane = await first_try_async(
            self._lane, origin, send, request, _failure, _peeked_reply
        )
        if record is not None and response is not None:  # a success on the fast lane
            response.extensions["smoothclient"] = record
            return response

        async def attempt() -> httpx.Response:
            return await _peek(await send(request))

        done = await drive_async(
            self._flow(request, origin, first, lane),
            attempt,
            _reply,
            _failure,
            self._discard,
            self._sleep,
            last=response,
            error=first.exception if isinstance(first, Failure) else None,
        )
        response = done.unwrap()
        response.extensions["smoothclient"] = done.record.as_dict()
        return response

    @staticmethod
    async def _discard(response: httpx.Response) -> None:
        try:
            if drainable(response.headers):
                await response.aread()
        except httpx.HTTPError:
            pass
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()
