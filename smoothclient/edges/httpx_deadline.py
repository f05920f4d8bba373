"""
httpx's sync transport, its attempts cut at the call's deadline: every read ends with it.

A socket's timeout bounds one read: a server that drips its header block a byte at a time
answers each read in time and holds the attempt as long as it likes.  Async edges cut the
whole attempt with a cancel scope; a sync transport has none.  So the stock
``httpx.HTTPTransport`` gets its network streams wrapped (:func:`cut_at_deadline`, httpcore's
public ``NetworkBackend`` interface): while an attempt of :class:`~.SmoothTransport` runs
(its end in :data:`ENDS`), each read, write and connect waits at most what is left of it, and
none starts once it is over (httpcore's own timeout errors, which httpx raises as
``httpx.ReadTimeout`` and kin).  Outside such an attempt (the body a client reads later, or
the same transport used directly) nothing changes.
"""

from __future__ import annotations

import contextvars
import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpcore

__all__ = ["ENDS", "cut_at_deadline"]

#: When the attempt this thread is in ends (``time.monotonic``), if it runs under a deadline:
#: set by the transport around each attempt.
ENDS: contextvars.ContextVar[float | None] = contextvars.ContextVar("ENDS", default=None)


def _left(timeout: float | None, late: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of the attempt; ``late`` raised when nothing is."""
    ends = ENDS.get()
    if ends is None:
        return timeout
    left = ends - time.monotonic()
    if left <= 0.0:
        msg = "the attempt outlasted what was left of the call's deadline"
        raise late(msg)
    return left if timeout is None or timeout > left else timeout


class _CutStream(httpcore.NetworkStream):
    """A network stream whose every wait ends with the attempt (see the module)."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        wait = _left(timeout, httpcore.ConnectTimeout)
        return _CutStream(self._stream.start_tls(ssl_context, server_hostname, wait))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _CutBackend(httpcore.NetworkBackend):
    """A network backend that hands out cut streams (:class:`_CutStream`)."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self.backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        wait = _left(timeout, httpcore.ConnectTimeout)
        stream = self.backend.connect_tcp(host, port, wait, local_address, socket_options)
        return _CutStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        wait = _left(timeout, httpcore.ConnectTimeout)
        return _CutStream(self.backend.connect_unix_socket(path, wait, socket_options))

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


def cut_at_deadline(transport: object) -> bool:
    """
    Wrap the network backend of a stock ``httpx.HTTPTransport``; whether it is (now) wrapped.

    httpx gives no public way to pass a backend, so this looks for its pool's (checked, and
    left alone when it is not httpcore's stock sync backend: such a transport bounds each
    read, not the attempt).
    """
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.SyncBackend):
        pool._network_backend = _CutBackend(backend)  # type: ignore[union-attr]
        return True
    return isinstance(backend, _CutBackend)
