"""
The httpx family's edge, once: the transports of httpx and of httpx2 are both made from it.

httpx2 is httpx's continuation under another name: the same classes, defined again in its own
modules (``httpx2.Response`` is not ``httpx.Response``, and each client checks that a
transport's response is its own kind).  So nothing here imports either library: a
:class:`Family` is built from a library's module (``httpx`` with ``httpcore``, or ``httpx2``
with ``httpcore2``) and holds everything that names its classes; :class:`SyncEdge` and
:class:`AsyncEdge` are the transports' whole behaviour, reading their library from the
class's ``family``.  :mod:`.httpx_transport` and :mod:`smoothclient.httpx2` declare the
public classes on top: a base class of the library, a family, and a docstring.

The SDK mode (``sdk=True``) is for the clients an SDK builds on top (OpenAI's, Anthropic's):
a call the pacer refuses comes back as a 429 with ``Retry-After`` (the SDK raises its own
rate-limit error, not a connection error), a response given up on says ``x-should-retry:
false`` (the SDK does not retry what was retried here), an SDK's own retry (its
``x-stainless-retry-count`` header above 0) makes one attempt, and the deadline never cuts an
attempt the client's own timeout allows (docs/clients.md).
"""

from __future__ import annotations

import dataclasses
import json
import operator
import random
import time
from collections.abc import Callable, Coroutine, Iterable
from types import ModuleType
from typing import Any, ClassVar, Generic, NoReturn, Protocol, TypeVar

from ..engine.decide import ErrorKind
from ..errors import RateLimited
from ..hints import GENERIC, FieldAccess, wants_body
from ..httpcache.cache import HttpCache
from ..pacing.keys import origin_key
from ..pacing.pacer import PacerLike
from ..pacing.scopes import ScopeFn
from ..policy import RetryPolicy
from .base import Edge, EdgeCore, RequestInfo, cut_on_asyncio, drainable
from .cost import USAGE_LIMIT, CallCost, estimate_tokens, usage_of
from .flow import Failure, Reply
from .httpx_cached import Ended, send_async_cached, send_cached
from .httpx_deadline import ENDS, cut_at_deadline

__all__ = ["SDK_RETRY_COUNT", "AsyncEdge", "Family", "SyncEdge"]

#: The header the Stainless-built SDKs (OpenAI, Anthropic) send: how many retries of theirs
#: this request is (``0`` on the first try).
SDK_RETRY_COUNT = "x-stainless-retry-count"
_SECOND = operator.itemgetter(1)
_THIRD = operator.itemgetter(2)
_LOWER_AND_VALUE = operator.itemgetter(1, 2)
_WRONG_CLIENT = "{0} needs {1} (this transport is for the other kind of client)"


class _Sends(Protocol):
    """A sync transport of the family (``httpx.BaseTransport``, ``httpx2.BaseTransport``)."""

    def handle_request(self, request: Any) -> Any: ...
    def close(self) -> None: ...


class _SendsAsync(Protocol):
    """An async transport of the family."""

    async def handle_async_request(self, request: Any) -> Any: ...
    async def aclose(self) -> None: ...


#: The library's transport class a public class wraps (``httpx.BaseTransport``, ...).
T = TypeVar("T")
S = TypeVar("S", bound=_Sends)
A = TypeVar("A", bound=_SendsAsync)


def _names(headers: Any) -> Iterable[bytes]:
    return map(_SECOND, headers._list)  # an iterator: a scan passes over it once, no list made


def _pairs(headers: Any) -> Iterable[tuple[object, object]]:
    return map(_LOWER_AND_VALUE, headers._list)


def _values(headers: Any) -> list[bytes]:
    return list(map(_THIRD, headers._list))


def _origin_by_parts(request: Any) -> str:
    ref = request.url._uri_reference  # (the public properties: a call each, raw_host's bytes)
    return origin_key(ref.scheme, ref.host, ref.port)


def _public_origin(request: Any) -> str:
    return origin_key(request.url.scheme, request.url.raw_host, request.url.port)


class Family:
    """
    One library of the httpx family and what the edge needs of it.

    Args:
        lib: the library's module (``httpx`` or ``httpx2``).
        core: its connection library's module (``httpcore`` or ``httpcore2``).
        other: where the transports for the other library are, for errors
            (``"smoothclient.httpx2"`` for httpx, ``"smoothclient"`` for httpx2).
    """

    def __init__(self, lib: ModuleType, core: ModuleType, other: str) -> None:
        """Read every class the edge uses from ``lib`` once."""
        self.lib, self.core, self.other = lib, core, other
        self.name = lib.__name__
        self.Request: type[Any] = lib.Request
        self.Response: type[Any] = lib.Response
        self.transport_error: type[Exception] = lib.TransportError
        self.not_sent = (lib.ConnectError, lib.ConnectTimeout, lib.PoolTimeout)
        self.kinds: tuple[tuple[type[Exception], ErrorKind], ...] = (
            (lib.ConnectError, "connect"),
            (lib.ConnectTimeout, "connect"),
            (lib.PoolTimeout, "pool"),
            (lib.TimeoutException, "timeout"),
            (lib.ReadError, "read"),
            (lib.WriteError, "write"),
            (lib.RemoteProtocolError, "protocol"),
        )
        self.body_errors = (lib.HTTPError, lib.StreamError)
        self.access = self._fast_access()
        #: a request's origin, from its URL's parsed parts if kept as httpx keeps them (checked)
        ref = getattr(lib.URL("http://Xn--A.b:81/"), "_uri_reference", None)
        kept = ref is not None and (ref.scheme, ref.host, ref.port) == ("http", "xn--a.b", 81)
        self.origin: Callable[[Any], str] = _origin_by_parts if kept else _public_origin

    def _fast_access(self) -> FieldAccess:
        """
        Read the library's ``Headers`` through their ``(raw, lowercased, value)`` byte triples.

        That costs far less than the public views, which decode every entry.  Checked once, so
        another layout falls back to the public views.
        """
        sample = getattr(self.lib.Headers({"X-A": "b"}), "_list", None)
        fast = sample == [(b"X-A", b"x-a", b"b")]
        return FieldAccess(_names, _pairs, values=_values) if fast else GENERIC

    def failure(self, exc: Exception) -> Failure | None:
        """Classify a transport error; ``None`` for anything else (re-raised)."""
        if not isinstance(exc, self.transport_error):
            return None
        kind: ErrorKind = next((k for t, k in self.kinds if isinstance(exc, t)), "other")
        return Failure(kind, sent=not isinstance(exc, self.not_sent), exception=exc)

    def reply(self, response: Any) -> Reply:
        """The flow's view of a response, with its JSON error body if read (docs/headers.md R15)."""
        status, headers = response.status_code, response.headers
        if wants_body(status, headers):
            try:
                return Reply(status, headers, response.content)
            except self.lib.ResponseNotRead:
                pass
        return Reply(status, headers)

    def wrong_request(self, request: object, transport: str) -> TypeError:
        """A request of another library: say which transport its client needs."""
        kind = type(request).__module__.partition(".")[0]
        msg = (
            f"this {transport} sends with {self.name}, but an {kind} client was given it: "
            f"use {self.other}.{transport} with {kind}"
        )
        return TypeError(msg)

    def refusal(self, exc: RateLimited, request: Any, record: dict[str, Any]) -> Any:
        """
        A refused call as an SDK understands it: a 429 with ``Retry-After``, never sent.

        ``x-should-retry: false`` too: the SDK's own retry would come sooner than the pacer
        said (docs/clients.md).
        """
        headers = {
            "retry-after": f"{max(exc.retry_after, 0.0):.3f}",
            "x-should-retry": "false",
            "content-type": "application/json",
        }
        error = {"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": str(exc)}
        body = json.dumps({"type": "error", "error": error}).encode()
        response = self.Response(429, headers=headers, content=body, request=request)
        response.extensions["smoothclient"] = record
        return response


def _read(response: Any) -> Any:
    """
    Read a small JSON error body (sync responses), so :meth:`Family.reply` can use it.

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


async def _aread(response: Any) -> Any:
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
    attempt: Coroutine[Any, Any, Any], left: float, request: Any, timeout: Callable[..., Exception]
) -> Any:
    """
    ``attempt`` cut as a whole at ``left`` seconds, raising the library's ``ReadTimeout``.

    On asyncio the edges' own cut (:func:`.base.cut_on_asyncio`); elsewhere (trio) anyio's
    cancel scope, which follows the running library.  The sync transport ends every network
    wait with the attempt instead (:mod:`.httpx_deadline`).
    """
    import asyncio  # imported here: only async callers come this way, and it is cheap then

    def late(message: str) -> Exception:
        return timeout(message, request=request)

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio)
        import anyio

        with anyio.move_on_after(left):
            return await attempt
        message = f"the attempt outlasted what was left of the call's deadline ({left:.3g} s)"
        raise late(message) from None
    return await cut_on_asyncio(attempt, left, late)


def _cut(request: Any, left: float | None) -> Any:
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


def _route(request: Any) -> tuple[str, str]:
    """A request's method and path, for scopes."""
    return request.method, request.url.path


def _sdk_cost(request: Any) -> float:
    """An SDK's request's tokens, estimated from its body (:func:`.cost.estimate_tokens`)."""
    return estimate_tokens(request.content)


def _has_usage(response: Any) -> bool:
    """A success whose JSON body may say what it used (never a stream: those are not read)."""
    if response.status_code >= 300:
        return False
    headers = response.headers
    if not headers.get("content-type", "").startswith("application/json"):
        return False
    length = headers.get("content-length")
    return length is None or (length.isdigit() and int(length) <= USAGE_LIMIT)


def _sdk_retry(request: Any) -> bool:
    """Whether an SDK sends ``request`` as a retry of its own (its retry count above 0)."""
    count = request.headers.get(SDK_RETRY_COUNT)
    return count is not None and count.strip() not in ("", "0")


class _Edge(Edge, Generic[T]):
    """
    What the sync and async transports share: construction, the request's facts, SDK mode.

    Every constructor argument is taken here, once, for both transports and both libraries.
    """

    #: the library this class sends with (set by each public class)
    family: ClassVar[Family]
    #: the library's "rate limited" error (a ``TransportError`` of that library)
    rate_limited_error: ClassVar[type[RateLimited]]
    _sync: ClassVar[bool]

    #: the transport that really sends
    transport: T

    def __init__(
        self,
        transport: T | None = None,
        *,
        policy: RetryPolicy | None = None,
        pacer: PacerLike | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Any] | None = None,
        scope: ScopeFn | None = None,
        overrides: bool | None = None,
        sdk: bool = False,
        cost: Callable[[Any], float] | None = None,
        cache: HttpCache | None = None,
        **policy_fields: Any,
    ) -> None:
        """Wrap ``transport`` (see the public classes for the arguments)."""
        self._check_inner(transport)
        if not isinstance(sdk, bool):
            msg = f"sdk must be True or False, not {sdk!r}"
            raise TypeError(msg)
        if cache is not None and not isinstance(cache, HttpCache):
            msg = f"cache must be an HttpCache, not {type(cache).__name__}"
            raise TypeError(msg)
        #: the HTTP cache in front of the retry flow (docs/http-cache.md), if any
        self.cache = cache
        fam = self.family
        if cost is None and sdk:
            cost = _sdk_cost
        #: the running cost of a call in tokens, when token quotas are paced (``cost=``)
        self._cost = None if cost is None else CallCost(cost)
        access = fam.access
        if self._cost is not None:
            access = dataclasses.replace(access, per_call=self._cost.per_call)
        self._core = EdgeCore(policy, pacer, rng, access, _route, scope, policy_fields, overrides)
        if transport is None:
            transport = fam.lib.HTTPTransport() if self._sync else fam.lib.AsyncHTTPTransport()
        self.transport = transport  # the library's stock one when none was given
        self._sleep = sleep if sleep is not None else self._default_sleep()
        #: how the call reads a response, classifies an error, discards one, and waits
        self._reading = (fam.reply, fam.failure, self._discard, self._sleep)
        self.sdk = sdk
        #: whether a stock sync transport's network waits can be cut at the deadline
        self._cuts = self._sync and cut_at_deadline(transport, fam.core)

    @staticmethod
    def _default_sleep() -> Callable[[float], Any]:
        return time.sleep

    def _check_inner(self, transport: object) -> None:
        """``transport`` (the one that really sends) is of the kind this edge wraps."""
        lib, mine = self.family.lib, type(self).__name__
        sync_kind, async_kind = lib.BaseTransport, lib.AsyncBaseTransport
        kind = sync_kind if self._sync else async_kind
        if transport is None or isinstance(transport, kind):
            return
        other = "AsyncSmoothTransport" if self._sync else "SmoothTransport"
        sync = isinstance(transport, sync_kind)
        if sync or isinstance(transport, async_kind):
            what = "a sync" if sync else "an async"
            msg = f"{mine} wraps {kind.__qualname__}s; {what} transport goes in {other}"
        else:
            name = type(transport).__name__
            wanted = f"{self.family.name}.{kind.__qualname__}"
            msg = f"{mine}'s transport must be an {wanted}, not {name}"
        raise TypeError(msg)

    def _origin(self, request: Any) -> str:
        return self.family.origin(request)

    def _ends(self, request: Any) -> Ended:
        """How a cached call of ``request`` ends: the edge's hooks and metrics."""
        origin, core = self._origin(request), self._core

        def ended(response: Any, record: Any) -> object:
            return core._ended(origin, response, record)

        return ended

    def _info(self, request: Any) -> RequestInfo:
        key = self._core.policy.idempotency_header
        return RequestInfo(
            request.method,
            request.url.path,
            key is not None and key in request.headers,
            self._replayable(request),
        )

    def _replayable(self, request: Any) -> bool:
        """
        A request whose body is in memory can be sent again; a streaming generator cannot.

        A body of bytes (``ByteStream``) is in memory even when unread: httpx builds a
        redirect's request that way, and a GET redirected to a 503 was refused its retries.
        """
        lib = self.family.lib
        try:
            request.content  # noqa: B018 - raises RequestNotRead for streaming bodies
        except lib.RequestNotRead:
            return isinstance(request.stream, lib.ByteStream)
        return True

    def _begin(self, request: Any) -> tuple[EdgeCore, bool, float | None]:
        """
        How ``request`` runs: its core, whether the deadline cuts its attempts, its cost.

        The cost is its estimated tokens (``cost=``), if the transport paces them.
        """
        fam = self.family
        if not isinstance(request, fam.Request):
            raise fam.wrong_request(request, type(self).__name__)
        core = self._core.under(request.extensions.get("smoothclient"))
        if self.sdk and _sdk_retry(request):
            core = core.under({"attempts": 1})  # the SDK retries: no retries of ours on top
        cut = core.policy.cut_attempts
        priced = None if self._cost is None else self._cost.noted(request)
        return core, (not self.sdk) if cut is None else cut, priced

    def _discard(self, response: Any) -> Any:  # pragma: no cover - each transport has its own
        raise NotImplementedError

    def _used(self, response: Any, priced: float) -> None:
        """A success's reported usage corrects the cost estimate (``cost=``)."""
        used = usage_of(response.content)
        if used is not None and self._cost is not None:
            self._cost.used(priced, used)

    def _ended(self, response: Any, record: dict[str, Any]) -> Any:
        """The response handed over, with its record; in SDK mode a give-up says so."""
        response.extensions["smoothclient"] = record
        if self.sdk and record["gave_up"] is not None:
            response.headers["x-should-retry"] = "false"  # retried here: not again there
        return response

    def _refused(self, exc: RateLimited, request: Any) -> Any:
        """A call the pacer refused: the SDK's 429, or the library's ``RateLimitedError``."""
        record = getattr(exc, "smoothclient", {})
        if self.sdk:
            return self.family.refusal(exc, request, record)
        made: Any = self.rate_limited_error  # a RateLimitedMixin: takes the request
        error = made(str(exc), retry_after=exc.retry_after, request=request)
        error.smoothclient = record
        raise error from exc


class SyncEdge(_Edge[S]):
    """The sync transport of either library (see :class:`smoothclient.SmoothTransport`)."""

    _sync = True

    def handle_request(self, request: Any) -> Any:
        """Send ``request`` through the cache (if any) and the retry flow; return the response."""
        if self.cache is None:
            return self._handle(request)
        return send_cached(
            self.family, self.cache, request, self._ends(request), self._handle, self._sleep
        )

    def _handle(self, request: Any) -> Any:
        """Send ``request`` through the retry flow; return the last response."""
        core, cut, priced = self._begin(request)
        send = self._attempt if cut else self._whole
        try:
            response, record = core.call(
                self.family.origin(request), request, self._info, send, *self._reading
            )
        except RateLimited as exc:
            return self._refused(exc, request)
        if priced is not None and _has_usage(response):
            response.read()  # the caller reads all of it anyway
            self._used(response, priced)
        return self._ended(response, record)

    async def __aenter__(self) -> NoReturn:
        """An async client was given this sync transport: say which one it needs."""
        client = f"{self.family.name}.AsyncClient"
        raise TypeError(_WRONG_CLIENT.format(client, "AsyncSmoothTransport"))

    async def handle_async_request(self, request: Any) -> NoReturn:
        """An async client was given this sync transport: say which one it needs."""
        client = f"{self.family.name}.AsyncClient"
        raise TypeError(_WRONG_CLIENT.format(client, "AsyncSmoothTransport"))

    def _attempt(self, request: Any, left: float | None) -> Any:
        if left is None or not self._cuts:
            return _read(self.transport.handle_request(_cut(request, left)))
        token = ENDS.set(time.monotonic() + left)  # every network wait ends with the attempt
        try:
            return _read(self.transport.handle_request(_cut(request, left)))
        finally:
            ENDS.reset(token)

    def _whole(self, request: Any, left: float | None) -> Any:
        """An attempt the deadline does not cut (``cut_attempts``: the client's timeout does)."""
        return _read(self.transport.handle_request(request))

    def _discard(self, response: Any) -> bool:
        try:
            if drainable(response.headers) and not response.is_stream_consumed:
                response.read()
        except self.family.body_errors:
            pass  # a body that failed to read once is not read again
        finally:
            response.close()
        return hasattr(response, "_content")  # whether its body is still whole (read)

    def close(self) -> None:
        """Close the wrapped transport."""
        self.transport.close()


async def _anyio_sleep(seconds: float) -> None:
    import anyio  # imported on first use: httpx itself needs it only for its async client

    await anyio.sleep(seconds)


class AsyncEdge(_Edge[A]):
    """The async transport of either library (see :class:`smoothclient.AsyncSmoothTransport`)."""

    _sync = False

    @staticmethod
    def _default_sleep() -> Callable[[float], Any]:
        return _anyio_sleep

    async def handle_async_request(self, request: Any) -> Any:
        """Send ``request`` through the cache (if any) and the retry flow; return the response."""
        if self.cache is None:
            return await self._handle(request)
        return await send_async_cached(
            self.family, self.cache, request, self._ends(request), self._handle, self._sleep
        )

    async def _handle(self, request: Any) -> Any:
        """Send ``request`` through the retry flow; return the last response."""
        core, cut, priced = self._begin(request)
        send = self._attempt if cut else self._whole
        try:
            response, record = await core.call_async(
                self.family.origin(request), request, self._info, send, *self._reading
            )
        except RateLimited as exc:
            return self._refused(exc, request)
        if priced is not None and _has_usage(response):
            await response.aread()  # the caller reads all of it anyway
            self._used(response, priced)
        return self._ended(response, record)

    def __enter__(self) -> NoReturn:
        """A sync client was given this async transport: say which one it needs."""
        raise TypeError(_WRONG_CLIENT.format(f"{self.family.name}.Client", "SmoothTransport"))

    def handle_request(self, request: Any) -> NoReturn:
        """A sync client was given this async transport: say which one it needs."""
        raise TypeError(_WRONG_CLIENT.format(f"{self.family.name}.Client", "SmoothTransport"))

    async def _attempt(self, request: Any, left: float | None) -> Any:
        if left is None:
            return await self._whole(request, left)
        timeout = self.family.lib.ReadTimeout
        return await _bounded(self._whole(request, left, cut=True), left, request, timeout)

    async def _whole(self, request: Any, left: float | None, *, cut: bool = False) -> Any:
        sent = _cut(request, left) if cut else request
        return await _aread(await self.transport.handle_async_request(sent))

    async def _discard(self, response: Any) -> bool:
        try:
            if drainable(response.headers) and not response.is_stream_consumed:
                await response.aread()
        except self.family.body_errors:
            pass  # a body that failed to read once is not read again
        finally:
            await response.aclose()
        return hasattr(response, "_content")  # whether its body is still whole (read)

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()


class RateLimitedMixin(RateLimited):
    """
    :class:`~smoothclient.RateLimited` as a library's ``TransportError`` (each declares one).

    The call gave up before sending, because the pacer would have held it past its deadline or
    ``max_retry_after``; ``retry_after`` says for how long.
    """

    def __init__(self, message: str, *, retry_after: float, request: Any) -> None:
        """The message, the delay and the request not sent."""
        RateLimited.__init__(self, message, retry_after=retry_after)
        self._request = request
