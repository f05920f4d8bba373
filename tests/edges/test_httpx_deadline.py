"""httpx's sync transport: every network wait of an attempt ends with it."""

from __future__ import annotations

import time
from typing import Any

import httpcore
import httpx
import pytest

from smoothclient import SmoothTransport
from smoothclient.edges.httpx_deadline import ENDS, _CutBackend, _CutStream, cut_at_deadline


class _Stream(httpcore.NetworkStream):
    """Records the timeout each wait was given."""

    def __init__(self) -> None:
        self.waits: list[tuple[str, float | None]] = []

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.waits.append(("read", timeout))
        return b"x"

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.waits.append(("write", timeout))

    def close(self) -> None:
        self.waits.append(("close", None))

    def start_tls(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        self.waits.append(("tls", kwargs.get("timeout", args[2] if len(args) > 2 else None)))
        return self

    def get_extra_info(self, info: str) -> Any:
        return f"info:{info}"


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self.stream = _Stream()
        self.timeouts: list[float | None] = []
        self.slept: list[float] = []

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, *a: Any) -> Any:
        self.timeouts.append(timeout)
        return self.stream

    def connect_unix_socket(self, path: str, timeout: float | None = None, *a: Any) -> Any:
        self.timeouts.append(timeout)
        return self.stream

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_outside_an_attempt_nothing_changes() -> None:
    inner = _Stream()
    stream = _CutStream(inner, httpcore)
    assert stream.read(10, 5.0) == b"x"
    stream.write(b"y", None)
    assert inner.waits == [("read", 5.0), ("write", None)]
    assert stream.get_extra_info("socket") == "info:socket"


def test_within_an_attempt_each_wait_ends_with_it() -> None:
    backend = _Backend()
    cut = _CutBackend(backend, httpcore)
    token = ENDS.set(time.monotonic() + 2.0)
    try:
        stream = cut.connect_tcp("h", 1, timeout=30.0)
        stream.read(10, 30.0)
        stream.read(10, 0.5)  # a shorter timeout of its own stays
        stream.write(b"y", None)
        tls = stream.start_tls(None, "h", 30.0)  # type: ignore[arg-type]
        cut.connect_unix_socket("/s", None)
        cut.sleep(0.1)
    finally:
        ENDS.reset(token)
    assert isinstance(tls, _CutStream)
    waits = [w for _, w in backend.stream.waits]
    assert all(w is not None and w <= 2.0 for w in [*backend.timeouts, waits[0], *waits[2:]])
    assert waits[1] == 0.5
    assert backend.slept == [0.1]


@pytest.mark.parametrize(
    ("wait", "error"),
    [("read", httpcore.ReadTimeout), ("write", httpcore.WriteTimeout)],
)
def test_no_wait_starts_once_the_attempt_is_over(wait: str, error: type[Exception]) -> None:
    inner = _Stream()
    stream = _CutStream(inner, httpcore)
    token = ENDS.set(time.monotonic() - 0.01)
    try:
        with pytest.raises(error):
            stream.read(10, 5.0) if wait == "read" else stream.write(b"y", 5.0)
        with pytest.raises(httpcore.ConnectTimeout):
            _CutBackend(_Backend(), httpcore).connect_tcp("h", 1, 5.0)
    finally:
        ENDS.reset(token)
    assert inner.waits == []


def test_only_a_stock_transport_is_cut() -> None:
    stock = httpx.HTTPTransport()
    assert cut_at_deadline(stock)
    assert isinstance(stock._pool._network_backend, _CutBackend)
    assert cut_at_deadline(stock)  # once only
    assert not isinstance(stock._pool._network_backend.backend, _CutBackend)
    assert not cut_at_deadline(httpx.MockTransport(lambda r: httpx.Response(200)))
    assert SmoothTransport()._cuts
    assert not SmoothTransport(httpx.MockTransport(lambda r: httpx.Response(200)))._cuts
