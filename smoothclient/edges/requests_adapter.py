"""
:class:`SmoothAdapter`: a requests ``HTTPAdapter`` that retries and paces like the transports.

>>> import requests, smoothclient
>>> session = requests.Session()
>>> session.mount("https://", smoothclient.SmoothAdapter())
"""

from __future__ import annotations

import contextvars
import functools
import io
import operator
import random
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any
from urllib.parse import urldefrag, urljoin

import requests
import urllib3.poolmanager
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from requests.utils import requote_uri
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import NewConnectionError
from urllib3.response import BaseHTTPResponse
from urllib3.util import Retry, parse_url

from ..engine.decide import ErrorKind
from ..errors import RateLimited
from ..hints import GENERIC, FieldAccess, wants_body
from ..httpcache.cache import HttpCache
from ..pacing.keys import origin_key
from ..pacing.pacer import PacerLike
from ..pacing.scopes import ScopeFn
from ..policy import RetryPolicy
from .base import Edge, EdgeCore, RequestInfo, drainable, policy_fields
from .flow import Failure, Reply
from .watchdog import Watch, Watchdog

__all__ = ["RateLimitedError", "SmoothAdapter"]

_NO_RETRIES = Retry(total=0, connect=0, read=False, redirect=False, status=0, raise_on_status=False)


def _kind(exc: requests.RequestException) -> tuple[ErrorKind, bool]:
    """The error kind and whether the request may have been sent."""
    if isinstance(exc, requests.ConnectTimeout):
        return "connect", False
    if isinstance(exc, requests.ReadTimeout | requests.Timeout):
        return "timeout", True
    if isinstance(exc, requests.ConnectionError):
        reason = getattr(exc.args[0], "reason", None) if exc.args else None
        if isinstance(reason, NewConnectionError):
            return "connect", False
        return "read", True
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "protocol", True
    return "other", True


def _failure(exc: Exception) -> Failure | None:
    retryable = (
        requests.ConnectionError | requests.Timeout | requests.exceptions.ChunkedEncodingError
    )
    if not isinstance(exc, retryable):
        return None
    kind, sent = _kind(exc)
    return Failure(kind, sent=sent, exception=exc)


def _reply(response: requests.Response) -> Reply:
    """The flow's view of a response, with a small JSON error body (docs/headers.md R15)."""
    status, headers = response.status_code, response.headers
    if wants_body(status, headers):
        try:
            return Reply(status, headers, response.content)
        except (requests.RequestException, RuntimeError):
            pass  # unreadable: the flow goes on without the body's hints
    return Reply(status, headers)


def _discard(response: requests.Response) -> bool:
    """
    Read a small error body (so the connection is reused), then release the response.

    Whether its body is still whole (read before the release).
    """
    try:
        if drainable(response.headers):
            response.content  # noqa: B018 - reads the body
    except requests.RequestException:
        pass
    finally:
        response.close()
    return isinstance(response._content, bytes)


def _names(headers: Any) -> Collection[object]:
    return headers._store  # type: ignore[no-any-return]


def _pairs(headers: Any) -> Iterable[tuple[object, object]]:
    return ((lower, entry[1]) for lower, entry in headers._store.items())


def _values(headers: Any) -> list[object]:
    return list(map(_VALUE, headers._store.values()))


_VALUE = operator.itemgetter(1)


def _fast_access() -> FieldAccess:
    """
    Read requests' ``CaseInsensitiveDict`` through its ``_store``.

    It keeps ``lowercased name -> (name as sent, value)``: reading it directly skips a view per
    response.  Checked once, so another layout falls back to the public mapping.
    """
    store = getattr(CaseInsensitiveDict({"X-A": "b"}), "_store", None)
    if store != {"x-a": ("X-A", "b")}:
        return GENERIC
    return FieldAccess(_names, _pairs, values=_values)


HEADER_ACCESS = _fast_access()
_SCHEME_NETLOC = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)")


def _parsed_origin(url: str) -> str:
    parsed = parse_url(url)
    return origin_key(parsed.scheme or "http", parsed.host or "", parsed.port)


@functools.lru_cache(maxsize=1024)
def _origin_of(scheme: str, hostport: str) -> str:
    return _parsed_origin(f"{scheme}://{hostport}")


def _origin(url: str) -> str:
    """The pacer's origin key of a prepared request's URL (cached per scheme and host:port)."""
    m = _SCHEME_NETLOC.match(url)
    if m is None:  # not absolute: let urllib3 make what it can of it
        return _parsed_origin(url)
    # never the user-info: no credentials in the cache, and the origin does not depend on them
    return _origin_of(m.group(1), m.group(2).rpartition("@")[2])


def _path(url: str) -> str:
    return parse_url(url).path or "/"


#: The attempt this thread is in, and its deadline's watch (set by :class:`SmoothAdapter`).
_WATCH: contextvars.ContextVar[Watch | None] = contextvars.ContextVar("_WATCH", default=None)


def _watched(sock: Any, getresponse: Callable[[], BaseHTTPResponse]) -> BaseHTTPResponse:
    """Read the response head with the socket under the attempt's watch (if any)."""
    watch = _WATCH.get()
    if watch is None:
        return getresponse()
    watch.attach(sock)  # the adapter ends the watch when the attempt returns or raises
    return getresponse()


class _CutHTTPConnection(HTTPConnection):
    """urllib3's connection, its response head read under the attempt's watch."""

    def getresponse(self) -> Any:
        return _watched(self.sock, super().getresponse)


class _CutHTTPSConnection(HTTPSConnection):
    """urllib3's TLS connection, its response head read under the attempt's watch."""

    def getresponse(self) -> Any:
        return _watched(self.sock, super().getresponse)


class _CutHTTPPool(HTTPConnectionPool):
    ConnectionCls = _CutHTTPConnection


class _CutHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _CutHTTPSConnection


def _cut_pools(manager: Any) -> Any:
    """
    ``manager`` making its pools of the connections above, when it makes urllib3's own.

    ``pool_classes_by_scheme`` is the attribute urllib3 sets on each manager to be replaced;
    a manager with pools of its own (SOCKS) keeps them, and its reads stay bounded one by one.
    """
    if (
        getattr(manager, "pool_classes_by_scheme", None)
        is urllib3.poolmanager.pool_classes_by_scheme
    ):
        manager.pool_classes_by_scheme = {"http": _CutHTTPPool, "https": _CutHTTPSPool}
    return manager


#: What HTTPAdapter itself takes.
_ADAPTER_ARGS = frozenset({"pool_connections", "pool_maxsize", "pool_block"})


def _route(request: requests.PreparedRequest) -> tuple[str, str]:
    """A request's method and path, for scopes."""
    return request.method or "GET", _path(request.url or "")


def _cut(timeout: Any, left: float) -> Any:
    """A requests ``timeout`` (none, seconds, or (connect, read)) cut to ``left`` seconds."""
    if isinstance(timeout, tuple):
        return tuple(left if part is None else min(part, left) for part in timeout)
    if isinstance(timeout, int | float):
        return min(timeout, left)
    return left


def _rewinder(body: object) -> tuple[bool, Callable[[], object] | None]:
    """Whether ``body`` can be sent again, and how to rewind it before each attempt, if at all."""
    if body is None or isinstance(body, bytes | str):
        return True, None
    seek = getattr(body, "seek", None)
    tell = getattr(body, "tell", None)
    if callable(seek) and callable(tell):
        try:
            if getattr(body, "seekable", lambda: True)():
                start = tell()
                return True, lambda: seek(start, io.SEEK_SET)
        except (OSError, ValueError):
            pass
    return False, None


class SmoothAdapter(Edge, HTTPAdapter):
    """
    A requests transport adapter with shift-and-widen retries and per-origin pacing.

    urllib3 never retries underneath it: its own ``max_retries`` is fixed at zero.

    Args:
        policy: the :class:`~smoothclient.RetryPolicy` (default ``DEFAULT_POLICY``).
        pacer: a :class:`~smoothclient.Pacer` to share (default: its own).
        rng: randomness for jitter.
        sleep: how to wait (default ``time.sleep``).
        scope: which quota scopes a request belongs to (overrides the pacer's ``scope``; see
            :class:`~smoothclient.pacing.ScopeRules`).
        overrides: whether :func:`~smoothclient.override_policy` blocks change its calls
            (default: only when it was given no policy or policy fields of its own).
        cache: an :class:`~smoothclient.HttpCache`: fresh stored responses answer without
            sending (nor pacing); see docs/http-cache.md.
        **kwargs: :class:`~smoothclient.RetryPolicy` fields (``attempts=3``), applied over
            ``policy``; the rest go to ``HTTPAdapter`` (``pool_connections``,
            ``pool_maxsize``, ``pool_block``); ``max_retries`` is refused.
    """

    def __init__(
        self,
        *,
        policy: RetryPolicy | None = None,
        pacer: PacerLike | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], object] = time.sleep,
        scope: ScopeFn | None = None,
        overrides: bool | None = None,
        cache: HttpCache | None = None,
        **http_adapter_kwargs: Any,
    ) -> None:
        """Create the adapter."""
        if cache is not None and not isinstance(cache, HttpCache):
            msg = f"cache must be an HttpCache, not {type(cache).__name__}"
            raise TypeError(msg)
        self._cache = cache
        if "max_retries" in http_adapter_kwargs:
            msg = "SmoothAdapter retries by itself: pass policy=RetryPolicy(...), not max_retries"
            raise TypeError(msg)
        fields = policy_fields(http_adapter_kwargs)
        unknown = sorted(set(http_adapter_kwargs) - _ADAPTER_ARGS)
        if unknown:
            msg = (
                f"unknown arguments {unknown}: SmoothAdapter takes RetryPolicy fields and "
                f"HTTPAdapter's {sorted(_ADAPTER_ARGS)}"
            )
            raise TypeError(msg)
        self._core = EdgeCore(policy, pacer, rng, HEADER_ACCESS, _route, scope, fields, overrides)
        self._sleep = sleep
        super().__init__(max_retries=_NO_RETRIES, **http_adapter_kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        """requests' pool manager, its connections' response heads cut at the deadline."""
        self._watchdog = Watchdog()
        self._hops = _Hops(self._core.pacer.clock, 1.0)  # (made again when unpickled)
        super().init_poolmanager(*args, **kwargs)
        _cut_pools(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        """requests' proxy manager, its connections' response heads cut at the deadline."""
        return _cut_pools(super().proxy_manager_for(proxy, **proxy_kwargs))

    #: What pickling keeps (requests pickles sessions with their adapters): the pacer comes
    #: back empty with its settings, shared as before by the adapters that shared it.
    __attrs__ = [*HTTPAdapter.__attrs__, "_core", "_sleep"]  # noqa: RUF012

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        """Send ``request`` through the cache (if any) and the retry flow; return the response."""
        cache = getattr(self, "_cache", None)  # (an unpickled adapter has none)
        if cache is None:
            return self._send(request, **kwargs)
        from .requests_cached import send

        core = self._core

        def ended(response: requests.Response, record: dict[str, Any]) -> object:
            return core._ended(_origin(request.url or ""), response, record)

        streamed = bool(kwargs.get("stream"))
        network = lambda r: self._send(r, **kwargs)  # noqa: E731
        return send(cache, request, network, ended, self._sleep, streamed=streamed)

    def _send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        """Send ``request`` through the retry flow; return the last response."""
        url = request.url or ""
        replayable, rewind = _rewinder(request.body)

        def attempt(request: requests.PreparedRequest, left: float | None) -> requests.Response:
            if rewind is not None:
                rewind()
            if left is None:
                return super(SmoothAdapter, self).send(request, **kwargs)
            # no attempt outlives the policy's deadline: each read's timeout is cut to it, and
            # the watchdog shuts a response head that drips on past it
            kwargs["timeout"] = _cut(kwargs.get("timeout"), left)
            watch = self._watchdog.watch(self._watchdog.clock() + left)
            token = _WATCH.set(watch)
            try:
                return super(SmoothAdapter, self).send(request, **kwargs)
            except requests.RequestException as exc:
                if watch.cut:
                    msg = (
                        f"the attempt outlasted what was left of the call's deadline ({left:.3g} s)"
                    )
                    raise requests.ReadTimeout(msg, request=request) from exc
                raise
            finally:
                watch.done = True
                _WATCH.reset(token)

        def info(request: requests.PreparedRequest) -> RequestInfo:
            key = core.policy.idempotency_header
            return RequestInfo(
                request.method or "GET",
                _path(url),
                key is not None and key in request.headers,
                replayable,
            )

        core = self._core.under()
        began = self._hops.begun(url)
        try:
            response, record = core.call(
                _origin(url),
                request,
                info,
                attempt,
                _reply,
                _failure,
                _discard,
                self._sleep,
                began,
            )
        except RateLimited as exc:
            error = RateLimitedError(str(exc), retry_after=exc.retry_after, request=request)
            error.smoothclient = exc.smoothclient  # type: ignore[attr-defined]
            raise error from exc
        response.smoothclient = record  # type: ignore[attr-defined]
        if response.is_redirect:  # requests follows it with another send: the same call
            self._hops.redirected(response, core.pacer.clock() if began is None else began)
        return response


class _Hops:
    """
    Redirect chains as one call: each hop's send is told when the chain began.

    requests follows a redirect by calling the adapter again, in the same thread, for the
    ``Location`` of the response it just got; each hop had a deadline of its own (ten hops of
    503-then-200 took 16 s under ``timeout=3``).  A redirect's target is remembered per thread,
    briefly, with when its chain began; the send for that target takes it over.
    """

    LIMIT = 256

    def __init__(self, clock: Callable[[], float], keep: float) -> None:
        self.clock, self.keep = clock, keep
        self.lock = threading.Lock()
        self.chains: dict[tuple[int, str], tuple[float, float]] = {}

    def redirected(self, response: requests.Response, began: float) -> None:
        """``response`` redirects: the send for its target goes on the chain begun at ``began``."""
        target = _target(response.url or "", response.headers.get("location") or "")
        with self.lock:
            if len(self.chains) >= self.LIMIT:
                self.chains.clear()
            self.chains[threading.get_ident(), target] = (began, self.clock())

    def begun(self, url: str) -> float | None:
        """When the chain ``url`` is the next hop of began (``None``: it starts one)."""
        if not self.chains:
            return None
        with self.lock:
            found = self.chains.pop((threading.get_ident(), _target(url, "")), None)
        if found is None:
            return None
        began, at = found
        if self.clock() - at > self.keep:
            return None  # too long ago to be the next hop
        return began


def _target(url: str, location: str) -> str:
    """Where a redirect leads (or ``url`` itself), as requests asks for it, sans fragment."""
    joined = urljoin(url, requote_uri(location)) if location else url
    return urldefrag(joined)[0]


class RateLimitedError(RateLimited, requests.RequestException):
    """
    :class:`~smoothclient.RateLimited` from :class:`SmoothAdapter`: a ``RequestException``.

    The call gave up before sending, because the pacer would have held it past its deadline or
    ``max_retry_after``; ``retry_after`` says for how long.
    """

    def __init__(
        self, message: str, *, retry_after: float, request: requests.PreparedRequest
    ) -> None:
        """The message, the delay and the request not sent."""
        requests.RequestException.__init__(self, message, request=request)
        self.retry_after = retry_after
