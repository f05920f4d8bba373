"""
A small rate-limited HTTP server on 127.0.0.1, for the demo, the benchmarks and the tests.

A token bucket (``rate`` req/s, ``burst`` tokens) admits requests; the rest get 429 with the
headers of the chosen ``style``:

- ``"ietf"``: ``RateLimit`` / ``RateLimit-Policy`` (draft -08+) and ``Retry-After``;
- ``"github"``: ``X-RateLimit-Limit/-Remaining/-Reset`` (epoch seconds) and ``Retry-After``;
- ``"retry-after"``: only ``Retry-After`` on 429s;
- ``"none"``: bare 429s.

Paths: ``/free`` is never limited; ``/retry-after/N`` always answers 429 with ``Retry-After: N``;
``/status/N`` answers status N; ``/flaky/ID`` answers 503 the first time for each ID, then 200;
anything else goes through the bucket.  Every request is logged
(time, path, status) in :attr:`LimitedServer.log`.
"""

from __future__ import annotations

import functools
import math
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from ..pacing.gcra import Gcra

__all__ = ["Arrival", "LimitedServer", "Listening", "TokenBucket", "serve"]

STYLES = ("ietf", "github", "retry-after", "none")


class TokenBucket:
    """A thread-safe token bucket (the library's GCRA): ``rate`` per second, ``burst`` tokens."""

    def __init__(self, rate: float, burst: float) -> None:
        """Start full."""
        self._bucket = Gcra(rate, burst)
        self._lock = threading.Lock()

    def take(self, now: float) -> tuple[bool, float, float]:
        """Try to take a token: ``(admitted, tokens left, seconds until the next token)``."""
        with self._lock:
            bucket = self._bucket
            admitted = bucket.earliest(now) <= now
            if admitted:
                bucket.take(now)
            return admitted, bucket.tokens(now), bucket.earliest(now) - now


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request the server saw."""

    at: float
    path: str
    status: int


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet."""

    def _body(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)

    def do_GET(self) -> None:
        """Answer through the bucket (or misbehave, under ``/fault/``)."""
        self._body()
        if self.path.startswith("/fault/"):
            self._fault(self.path.split("?", 1)[0].split("/"))
            return
        status, headers = self.server.owner.answer(self.path)
        body = b"ok\n" if status < 400 else b"slow down\n"
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def _fault(self, parts: list[str]) -> None:
        """
        A server at its worst, for the end-to-end tests of every edge (each bounded in time).

        ``reset``: a 503 with a JSON body cut off mid-way, then the connection closed;
        ``stall``: a 503 whose headers never come (for 5 s); ``drip``: the header block one
        byte every 0.2 s (5 s in all); ``endless``: a 503 whose chunked body goes on (5 s).
        The first request to ``/fault/<kind>/once`` misbehaves, later ones answer 200.
        """
        owner, kind = self.server.owner, parts[2] if len(parts) > 2 else ""
        if parts[-1] == "once":
            with owner._log_lock:
                first = self.path not in owner._seen
                owner._seen.add(self.path)
            if not first:
                self._plain(200, b"ok\n")
                return
        if kind == "reset":
            self.wfile.write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"retry_after": 0.1, "pad'
            )
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif kind == "stall":
            time.sleep(5.0)
            self.close_connection = True
        elif kind == "drip":
            for byte in b"HTTP/1.1 503 Service Unavailable\r\nX-Drip: " + b"a" * 20:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
            self.close_connection = True
        elif kind == "endless":
            self.wfile.write(
                b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                self.wfile.write(b"4\r\nslow\r\n")
                self.wfile.flush()
                time.sleep(0.05)
            self.close_connection = True
        else:
            self._plain(404, b"no such fault\n")

    def _plain(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    owner: Any  # the Listening object it serves

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (resets, broken pipes) are normal here: stay quiet."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Listening:
    """
    A server on a free port of 127.0.0.1, served by a background thread.

    A context manager, or :meth:`start` / :meth:`stop`; ``handler`` answers its requests,
    which find this object as ``self.server.owner``.
    """

    handler: type[BaseHTTPRequestHandler]
    _httpd: _Server | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        assert self._httpd is not None, "the server is not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        """Listen on a free port of 127.0.0.1 in a background thread."""
        self._httpd = _Server(("127.0.0.1", 0), self.handler)
        self._httpd.owner = self
        # (stop() waits for the loop's next look at its flag: half a second by default)
        serve = functools.partial(self._httpd.serve_forever, poll_interval=0.05)
        threading.Thread(target=serve, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        """Start."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop."""
        self.stop()


class LimitedServer(Listening):
    """
    The rate-limited server; use as a context manager or call :meth:`start` / :meth:`stop`.

    Args:
        rate: admitted requests per second.
        burst: bucket size.
        style: which headers to send (see the module docstring).
    """

    handler = _Handler

    def __init__(self, rate: float = 10.0, burst: float = 5.0, style: str = "ietf") -> None:
        """Configure; nothing listens until :meth:`start`."""
        if style not in STYLES:
            msg = f"style must be one of {', '.join(STYLES)}, got {style!r}"
            raise ValueError(msg)
        self.rate, self.burst, self.style = rate, burst, style
        self.bucket = TokenBucket(rate, burst)
        self.log: list[Arrival] = []
        self._seen: set[str] = set()
        self._log_lock = threading.Lock()

    def reset(self) -> None:
        """Refill the bucket and clear the log."""
        self.bucket = TokenBucket(self.rate, self.burst)
        with self._log_lock:
            self.log = []

    def count(self, status: int) -> int:
        """How many logged answers had ``status``."""
        with self._log_lock:
            return sum(1 for a in self.log if a.status == status)

    def answer(self, path: str) -> tuple[int, list[tuple[str, str]]]:
        """Decide the status and headers for one request to ``path``."""
        now = time.monotonic()
        status, headers = self._decide(path.split("?", 1)[0], now)
        with self._log_lock:
            self.log.append(Arrival(now, path, status))
        return status, headers

    def _decide(self, path: str, now: float) -> tuple[int, list[tuple[str, str]]]:
        if path.startswith("/free"):
            return 200, []
        if path.startswith("/retry-after/"):
            return 429, [("Retry-After", path.rsplit("/", 1)[1])]
        if path.startswith("/status/"):
            return int(path.rsplit("/", 1)[1]), []
        if path.startswith("/flaky/"):
            with self._log_lock:
                first = path not in self._seen
                self._seen.add(path)
            return (503 if first else 200), []
        admitted, tokens, wait = self.bucket.take(now)
        headers = self._headers(tokens, wait)
        if not admitted and self.style != "none":
            headers.append(("Retry-After", str(max(1, math.ceil(wait)))))
        return (200 if admitted else 429), headers

    def _headers(self, tokens: float, wait: float) -> list[tuple[str, str]]:
        remaining = max(0, math.floor(tokens))
        if self.style == "ietf":
            return [
                ("RateLimit-Policy", f'"default";q={round(self.rate)};w=1'),
                ("RateLimit", f'"default";r={remaining};t={math.ceil(wait)}'),
            ]
        if self.style == "github":
            # GitHub's shape: a limit per (1 s) window, the window's end as epoch seconds
            return [
                ("X-RateLimit-Limit", str(round(self.rate))),
                ("X-RateLimit-Remaining", str(remaining)),
                ("X-RateLimit-Reset", str(math.floor(time.time()) + 1)),
            ]
        return []


@contextmanager
def serve(rate: float = 10.0, burst: float = 5.0, style: str = "ietf") -> Iterator[LimitedServer]:
    """Run a :class:`LimitedServer` for the duration of a ``with`` block."""
    server = LimitedServer(rate, burst, style)
    with server:
        yield server
