"""
A local fake of the OpenAI and Anthropic chat APIs, throttling by requests and by tokens.

For the tests and the benchmark of the SDK mode (docs/clients.md): the real ``openai`` and
``anthropic`` packages talk to it as to the vendor.  Two buckets refill continuously, one of
``requests`` and one of ``tokens`` per ``window`` seconds; a call takes one request and its
token cost (its prompt's characters / 4, plus ``max_tokens``) at once, or gets a 429.  Every
answer carries the vendor's own rate-limit headers:

- ``"openai"``: ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests``,
  ``x-ratelimit-reset-requests`` (a Go duration: ``1s``, ``850ms``, ``6m0s``), the same for
  ``-tokens``; a 429's JSON error says ``rate_limit_exceeded``;
- ``"anthropic"``: ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
  remaining,reset}`` (the reset an RFC 3339 time) and, on a 429, ``retry-after`` (whole
  seconds, rounded up, as Anthropic sends it).

``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages`` (Anthropic) answer a JSON
completion with its ``usage``, or with ``"stream": true`` server-sent events, one every
``stream_gap`` seconds.  ``/fail/N`` paths answer status N always.
"""

from __future__ import annotations

import datetime
import json
import math
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from typing import Any

from .server import Listening, _Server

__all__ = ["Bucket", "LLMServer", "go_duration"]

VENDORS = ("openai", "anthropic")


class Bucket:
    """A bucket of ``limit`` units refilled at ``limit / window`` a second (starts full)."""

    def __init__(self, limit: float, window: float) -> None:
        """Start full."""
        self.limit, self.rate = limit, limit / window
        self.level, self.at = float(limit), time.monotonic()

    def fill(self, now: float) -> float:
        """The level now."""
        self.level = min(self.limit, self.level + (now - self.at) * self.rate)
        self.at = now
        return self.level

    def drain(self, to: float = 0.0) -> None:
        """Leave ``to`` units now (below 0: the next unit comes later than one refill)."""
        self.level, self.at = to, time.monotonic()

    def until(self, amount: float) -> float:
        """Seconds until ``amount`` is there (0: it is)."""
        return max(0.0, (amount - self.level) / self.rate)

    def full_in(self) -> float:
        """Seconds until the bucket is full again (the vendors' "reset")."""
        return (self.limit - self.level) / self.rate


def go_duration(seconds: float) -> str:
    """``seconds`` as OpenAI writes a reset: ``850ms`` below a second, else ``6m0s``, ``1s``."""
    if seconds <= 0.0:
        return "0s"
    if seconds < 1.0:
        return f"{max(1, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60.0)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


def _rfc3339(after: float) -> str:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=after)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LLMServer(Listening):
    """
    The fake; a context manager (or :meth:`start` / :meth:`stop`).

    Args:
        vendor: ``"openai"`` or ``"anthropic"``: the paths, bodies and headers.
        requests: requests per ``window``.
        tokens: tokens per ``window``.
        window: seconds.
        stream_gap: seconds between two events of a streamed answer.
        latency: seconds each answer takes.
    """

    def __init__(
        self,
        vendor: str = "openai",
        *,
        requests: float = 60.0,
        tokens: float = 10_000.0,
        window: float = 60.0,
        stream_gap: float = 0.0,
        latency: float = 0.0,
    ) -> None:
        """Configure; nothing listens until :meth:`start`."""
        if vendor not in VENDORS:
            msg = f"vendor must be one of {', '.join(VENDORS)}, got {vendor!r}"
            raise ValueError(msg)
        self.vendor, self.window = vendor, window
        self.stream_gap, self.latency = stream_gap, latency
        self.requests = Bucket(requests, window)
        self.tokens = Bucket(tokens, window)
        self._lock = threading.Lock()
        #: answers by status
        self.statuses: Counter[int] = Counter()
        #: requests by the SDK's retry count header (``"0"``: first tries)
        self.retry_counts: Counter[str] = Counter()
        #: events of streamed answers written so far (each counted as its write begins)
        self.streamed = 0

    @property
    def sent(self) -> int:
        """Requests received."""
        return sum(self.statuses.values())

    def admit(self, cost: float) -> tuple[int, list[tuple[str, str]]]:
        """Take one request and ``cost`` tokens, or refuse: the status and the headers."""
        with self._lock:
            now = time.monotonic()
            self.requests.fill(now)
            self.tokens.fill(now)
            wait = max(self.requests.until(1.0), self.tokens.until(cost))
            if wait <= 0.0:
                self.requests.level -= 1.0
                self.tokens.level -= cost
            status = 200 if wait <= 0.0 else 429
            self.statuses[status] += 1
            return status, self._headers(wait)

    def _headers(self, wait: float) -> list[tuple[str, str]]:
        r, t = self.requests, self.tokens
        if self.vendor == "openai":
            return [
                ("x-ratelimit-limit-requests", f"{r.limit:g}"),
                ("x-ratelimit-remaining-requests", str(max(0, math.floor(r.level)))),
                ("x-ratelimit-reset-requests", go_duration(r.full_in())),
                ("x-ratelimit-limit-tokens", f"{t.limit:g}"),
                ("x-ratelimit-remaining-tokens", str(max(0, math.floor(t.level)))),
                ("x-ratelimit-reset-tokens", go_duration(t.full_in())),
            ]
        headers = [
            ("anthropic-ratelimit-requests-limit", f"{r.limit:g}"),
            ("anthropic-ratelimit-requests-remaining", str(max(0, math.floor(r.level)))),
            ("anthropic-ratelimit-requests-reset", _rfc3339(r.full_in())),
        ]
        for name in ("tokens", "input-tokens", "output-tokens"):
            headers += [
                (f"anthropic-ratelimit-{name}-limit", f"{t.limit:g}"),
                (f"anthropic-ratelimit-{name}-remaining", str(max(0, math.floor(t.level)))),
                (f"anthropic-ratelimit-{name}-reset", _rfc3339(t.full_in())),
            ]
        if wait > 0.0:
            headers.append(("retry-after", str(math.ceil(wait))))
        return headers


def cost_of(body: dict[str, Any]) -> tuple[int, int]:
    """A call's prompt tokens (its messages' characters / 4) and its ``max_tokens``."""
    chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
    return max(1, chars // 4), int(
        body.get("max_tokens") or body.get("max_completion_tokens") or 16
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        owner: LLMServer = self.server.owner
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        owner.retry_counts[self.headers.get("x-stainless-retry-count", "-")] += 1
        if self.path.startswith("/fail/"):
            owner.statuses[int(self.path[6:9])] += 1
            self._json(int(self.path[6:9]), {"error": {"message": "failing"}}, [])
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        prompt, completion = cost_of(body)
        status, headers = owner.admit(prompt + completion)
        if owner.latency:
            time.sleep(owner.latency)
        if status == 429:
            self._json(429, _rate_limited(owner.vendor), headers)
        elif body.get("stream"):
            self._stream(owner, prompt, completion, headers)
        else:
            self._json(200, _completion(owner.vendor, prompt, completion), headers)

    def _json(self, status: int, body: dict[str, Any], headers: list[tuple[str, str]]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in [*headers, ("content-type", "application/json")]:
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(
        self, owner: LLMServer, prompt: int, completion: int, headers: list[tuple[str, str]]
    ) -> None:
        self.send_response(200)
        for name, value in [*headers, ("content-type", "text/event-stream")]:
            self.send_header(name, value)
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        for event in _events(owner.vendor, prompt, completion):
            owner.streamed += 1  # (counted first: a client may read it before a write returns)
            self.wfile.write(event.encode())
            self.wfile.flush()
            if owner.stream_gap:
                time.sleep(owner.stream_gap)


def _rate_limited(vendor: str) -> dict[str, Any]:
    if vendor == "openai":
        return {
            "error": {
                "message": "Rate limit reached",
                "type": "requests",
                "code": "rate_limit_exceeded",
            }
        }
    return {"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited"}}


def _completion(vendor: str, prompt: int, completion: int) -> dict[str, Any]:
    if vendor == "openai":
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hello"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "fake",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }


#: The words a streamed answer sends, one event each.
WORDS = ("one", " two", " three", " four")


def _events(vendor: str, prompt: int, completion: int) -> list[str]:
    if vendor == "openai":
        chunks = [
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "fake",
                "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
            }
            for word in WORDS
        ]
        return [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    message = _completion(vendor, prompt, completion) | {"content": [], "stop_reason": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": message}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    events += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}},
        )
        for w in WORDS
    ]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": completion},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events]


LLMServer.handler = _Handler
