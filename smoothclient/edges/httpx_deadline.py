"""
The httpx family's sync transport, its attempts cut at the call's deadline: every read ends with it.

A socket's timeout bounds one read: a server that drips its header block a byte at a time
answers each read in time and holds the attempt as long as it likes.  Async edges cut the
whole attempt with a cancel scope; a sync transport has none.  So the stock
``httpx.HTTPTransport`` gets its network streams wrapped (:func:`cut_at_deadline`, httpcore's
public ``NetworkBackend`` interface): while an attempt of :class:`~.SmoothTransport` runs
(its end in :data:`ENDS`), each read, write and connect waits at most what is left of it, and
none starts once it is over (httpcore's own timeout errors, which httpx raises as
``httpx.ReadTimeout`` and kin).  Outside such an attempt (the body a client reads later, or
the same transport used directly) nothing changes.

The same wrapping serves httpx2 (on httpcore2): the connection library's module is a
parameter, and nothing here imports either.
"""

from __future__ import annotations

import contextvars
import ssl
import time
from collections.abc import Iterable
from types import ModuleType
from typing import Any

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


class _CutStream:
    """A network stream whose every wait ends with the attempt (see the module)."""

    def __init__(self, stream: Any, core: ModuleType) -> None:
        self._stream = stream
        self._core = core

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._stream.read(max_bytes, _left(timeout, self._core.ReadTimeout))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, self._core.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> _CutStream:
        wait = _left(timeout, self._core.ConnectTimeout)
        return _CutStream(self._stream.start_tls(ssl_context, server_hostname, wait), self._core)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _CutBackend:
    """A network backend that hands out cut streams (:class:`_CutStream`)."""

    def __init__(self, backend: Any, core: ModuleType) -> None:
        self.backend = backend
        self._core = core

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> _CutStream:
        wait = _left(timeout, self._core.ConnectTimeout)
        stream = self.backend.connect_tcp(host, port, wait, local_address, socket_options)
        return _CutStream(stream, self._core)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> _CutStream:
        wait = _left(timeout, self._core.ConnectTimeout)
        return _CutStream(self.backend.connect_unix_socket(path, wait, socket_options), self._core)

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


def cut_at_deadline(transport: object, core: ModuleType | None = None) -> bool:
    """
    Wrap the network backend of a stock sync transport; whether it is (now) wrapped.

    ``core``: the connection library the transport's pool comes from (default ``httpcore``,
    httpx's; ``httpcore2`` for httpx2).  httpx gives no public way to pass a backend, so
    this looks for its pool's (checked, and left alone when it is not the connection
    library's stock sync backend: such a transport bounds each read, not the attempt).
    """
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is None:
        return False
    if isinstance(backend, _CutBackend):
        return True
    if core is None:
        import httpcore  # httpx's; imported only here

        core = httpcore
    if isinstance(backend, core.SyncBackend):
        pool._network_backend = _CutBackend(backend, core)  # type: ignore[union-attr]
        return True
    return False
