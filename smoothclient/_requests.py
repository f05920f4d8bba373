"""
:class:`SmoothAdapter`: a requests ``HTTPAdapter`` that retries and paces like the transports.

>>> import requests, smoothclient
>>> session = requests.Session()
>>> session.mount("https://", smoothclient.SmoothAdapter())
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import NewConnectionError
from urllib3.util import Retry, parse_url

from ._core import ErrorKind
from ._flow import (
    CallFlow,
    Failure,
    Reply,
    describe,
    drive,
    edge_config,
    first_try,
    origin_key,
)
from .pacer import Pacer
from .policy import RetryPolicy

__all__ = ["SmoothAdapter"]

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
    return Reply(response.status_code, response.headers)


def _discard(response: requests.Response) -> None:
    """Read a small error body (so the connection is reused), then release the response."""
    length = response.headers.get("content-length", "")
    try:
        if length.isascii() and length.isdigit() and int(length) <= 64 * 1024:
            response.content  # noqa: B018 - reads the body
    except requests.RequestException:
        pass
    finally:
        response.close()


def _rewinder(body: object) -> tuple[bool, Callable[[], None]]:
    """Whether ``body`` can be sent again, and how to rewind it before each attempt."""
    if body is None or isinstance(body, bytes | str):
        return True, lambda: None
    seek = getattr(body, "seek", None)
    tell = getattr(body, "tell", None)
    if callable(seek) and callable(tell):
        try:
            if getattr(body, "seekable", lambda: True)():
                start = tell()
                return True, lambda: seek(start, io.SEEK_SET)
        except (OSError, ValueError):
            pass
    return False, lambda: None


class SmoothAdapter(HTTPAdapter):
    """
    A requests transport adapter with shift-and-widen retries and per-origin pacing.

    urllib3 never retries underneath it: its own ``max_retries`` is fixed at zero.

    Args:
        policy: the :class:`~smoothclient.RetryPolicy` (default ``DEFAULT_POLICY``).
        pacer: a :class:`~smoothclient.Pacer` to share (default: its own).
        rng: randomness for jitter.
        sleep: how to wait (default ``time.sleep``).
        **http_adapter_kwargs: passed to ``HTTPAdapter`` (``pool_connections``,
            ``pool_maxsize``, ``pool_block``); ``max_retries`` is refused.
    """

    def __init__(
        self,
        *,
        policy: RetryPolicy | None = None,
        pacer: Pacer | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], object] = time.sleep,
        **http_adapter_kwargs: Any,
    ) -> None:
        """Create the adapter."""
        if "max_retries" in http_adapter_kwargs:
            msg = "SmoothAdapter retries by itself: pass policy=RetryPolicy(...), not max_retries"
            raise TypeError(msg)
        self.policy, self.pacer, self._rng = edge_config(policy, pacer, rng)
        self._sleep = sleep
        super().__init__(max_retries=_NO_RETRIES, **http_adapter_kwargs)

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        """Send ``request`` through the retry flow; return the last response."""
        url = parse_url(request.url or "")
        origin = origin_key(url.scheme or "http", url.host or "", url.port)
        method = request.method or "GET"
        replayable, rewind = _rewinder(request.body)

        def attempt() -> requests.Response:
            rewind()
            return super(SmoothAdapter, self).send(request, **kwargs)

        first = first_try(self.pacer, self.policy, origin, attempt, _reply, _failure)
        if first.response is not None and first.record is not None:
            first.response.smoothclient = first.record  # type: ignore[attr-defined]
            return first.response
        key = self.policy.idempotency_header
        headers: Mapping[str, str] = request.headers
        flow = CallFlow(
            self.policy,
            self.pacer,
            origin,
            method=method,
            has_idempotency_key=key is not None and key in headers,
            replayable=replayable,
            rng=self._rng,
            describe=describe(method, origin, url.path or "/"),
            first=first.result,
        )
        done = drive(
            flow,
            attempt,
            _reply,
            _failure,
            _discard,
            self._sleep,
            last=first.response,
            error=first.error,
        )
        response = done.unwrap()
        response.smoothclient = done.record.as_dict()  # type: ignore[attr-defined]
        return response
