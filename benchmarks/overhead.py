"""
Overhead on a healthy origin: time per request added over the bare transport.

Four stacks, each with its own bare baseline:

- httpx, in memory: ``httpx.MockTransport`` (only client-side cost is measured), sync; and the
  same with a server that states its quota (IETF ``RateLimit``) on every response, what is
  left counting down as a real server's does (every answer differs).
- requests, in memory: urllib3's ``HTTPConnectionPool._make_request`` answers from memory, so
  everything above the socket runs (requests, the adapter, urllib3's ``urlopen`` and its Retry).
- requests, local server: a real server on 127.0.0.1 in a child process (so its thread does
  not compete with the client for the GIL); the client's CPU time is measured, since the
  loopback round trip is the same for every client and far noisier than the overhead.
- aiohttp and httpx async, local server: the same server and measure; aiohttp bare, with a
  middleware that does nothing (what having one costs aiohttp) and with ``SmoothMiddleware``;
  httpx's ``AsyncClient`` bare and on ``AsyncSmoothTransport``.  Each request is run to its end
  on one event loop (``run_until_complete``: the same cost for every client of a stack).

Besides the peers (httpx-retries with ``backoff_factor=0.5``, urllib3's ``Retry`` through
requests), a "floor" wrapper does only what any client that reads hints from every response
must do on a success, and nothing else: find the origin's state, look at every header name.
With ``RateLimit`` headers, one more smoothclient row reuses one answer's hints instead of
reading each: it splits the overhead into reading them and all the rest; and one more learns
every answer in full (``pacing/learning.py`` without its short-cut for an answer that says
only the countdown its model predicted): what that short-cut saves.

Method: the clients take turns in short rounds (order reversed every round, GC off inside a
round); "added" is the median over rounds of (client - bare) in the same round, which cancels
the drift of a shared machine far better than best-of-N.
Run: python benchmarks/overhead.py [--rounds 150]
"""

from __future__ import annotations

import argparse
import gc
import io
import itertools
import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

import httpx
import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.util import Retry

import smoothclient
from smoothclient.edges import httpx_transport, requests_adapter
from smoothclient.edges import lane as lane_module
from smoothclient.edges.lane import FastLane
from smoothclient.edges.requests_adapter import _origin
from smoothclient.hints import has_hints
from smoothclient.pacing import learning
from smoothclient.pacing.steps import run
from smoothclient.tools.server import LimitedServer

#: What a typical small API response carries besides any rate-limit fields.
PLAIN = {
    "Server": "nginx",
    "Date": "Sun, 22 Nov 2026 20:00:00 GMT",
    "Content-Type": "application/json",
    "Cache-Control": "no-store",
    "X-Request-Id": "4f1c2d",
}
POLICY = {**PLAIN, "RateLimit-Policy": '"d";q=100000;w=1'}
#: What is left counts down as a real server's does (a cache of identical answers is no help).
_left = itertools.cycle(range(99_999, 50_000, -1))


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, headers=PLAIN, content=b"{}")


def ok_with_quota(request: httpx.Request) -> httpx.Response:
    headers = {**POLICY, "RateLimit": f'"d";r={next(_left)};t=1'}
    return httpx.Response(200, headers=headers, content=b"{}")


Row = tuple[str, str, float, float]  # stack, client, median seconds per call, added over bare


def paired(
    stack: str,
    calls: dict[str, Callable[[], object]],
    *,
    rounds: int,
    per_round: int,
    clock: Callable[[], float] = time.perf_counter,
) -> list[Row]:
    """Median per-call time and median paired difference to the first (bare) client."""
    names = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for call in calls.values():
        for _ in range(20):  # warm up: connections, caches, the pacer's cold-start probe
            call()
    for index in range(rounds):
        gc.collect()
        gc.disable()
        try:
            for name in names if index % 2 == 0 else reversed(names):
                call = calls[name]
                start = clock()
                for _ in range(per_round):
                    call()
                samples[name].append((clock() - start) / per_round)
        finally:
            gc.enable()
    base = samples[names[0]]
    return [
        (
            stack,
            name,
            statistics.median(values),
            statistics.median(a - b for a, b in zip(values, base, strict=True)),
        )
        for name, values in samples.items()
    ]


class HintFloor(httpx.BaseTransport):
    """
    The least a transport that reads hints from every response does on a success: find the
    origin's state, look at every header name.  No retries, no pacing: a floor, not a client.
    """

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.origins: dict[tuple[str, bytes, int | None], object] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        self.origins.get((url.scheme, url.raw_host, url.port))
        response = self.inner.handle_request(request)
        has_hints(response.headers, httpx_transport.HEADER_ACCESS)
        return response


class SteppedLane(FastLane):
    """
    The fast lane through its step twins (``enter_steps``/``leave_steps``, driven by ``run``).

    The row it makes shows what the generator-free ``enter``/``leave`` save per request: the
    twins exist only for async edges on a shared store.
    """

    __slots__ = ()

    def enter(self, origin: str, request: object = None, now: float | None = None) -> Any:
        return run(self.enter_steps(origin, request))  # (the step twin reads its own clock)

    def leave(self, *args: Any, **kwargs: Any) -> Any:
        return run(self.leave_steps(*args, **kwargs))


class ReusedHints:
    """
    The fast lane's ``read_fields`` that, while ``on``, reads one answer and reuses its hints.

    For the row that splits the overhead with ``RateLimit`` headers in two: what reading them
    costs, and what everything else does (binding, admission, learning).  Off, it reads as
    usual, so the other clients of the stack are not touched.
    """

    def __init__(self) -> None:
        self.read = lane_module.read_fields
        self.on = False
        self.hints: Any = None

    def __call__(self, headers: Any, access: Any) -> Any:
        if not self.on:
            return self.read(headers, access)
        if self.hints is None:
            self.hints = self.read(headers, access)
        return self.hints

    def call(self, client: httpx.Client) -> None:
        """One request with reading switched off."""
        self.on = True
        try:
            client.get("http://t/x")
        finally:
            self.on = False


def stepped(transport: smoothclient.SmoothTransport) -> smoothclient.SmoothTransport:
    """``transport`` with its fast lane through the step twins."""
    core = transport._core
    core.lane = SteppedLane(core.pacer, core.policy, core._access, core.bind)
    return transport


#: The row with everything but reading the hints (see :class:`ReusedHints`).
READ_ONCE = "smoothclient, one answer's hints reused (all but reading them)"
#: The row whose learning takes no short-cut (see :class:`WholeLearning`).
WHOLE = "smoothclient, every answer learned in full (no short-cut for a predicted one)"


class WholeLearning:
    """
    ``pacing/learning.py``'s short-cut for a predicted answer, off while ``on``.

    For the row that shows what the short-cut saves: each answer through all of ``observe``.
    """

    def __init__(self) -> None:
        self.short_cut = learning._predicted
        self.on = False

    def __call__(self, *args: Any) -> bool:
        return False if self.on else self.short_cut(*args)

    def call(self, client: httpx.Client) -> None:
        """One request with the short-cut off."""
        self.on = True
        try:
            client.get("http://t/x")
        finally:
            self.on = False


def httpx_rows(rounds: int) -> list[Row]:
    from httpx_retries import Retry as HRetry
    from httpx_retries import RetryTransport

    rows: list[Row] = []
    for stack, handler in (
        ("httpx, in memory", ok),
        ("httpx, in memory, RateLimit headers on every response", ok_with_quota),
    ):
        transports: dict[str, httpx.BaseTransport] = {
            "bare MockTransport": httpx.MockTransport(handler),
            "smoothclient": smoothclient.SmoothTransport(httpx.MockTransport(handler)),
            "httpx-retries": RetryTransport(
                httpx.MockTransport(handler), retry=HRetry(total=5, backoff_factor=0.5)
            ),
            "floor: origin lookup + header-name scan only": HintFloor(httpx.MockTransport(handler)),
            "smoothclient, fast lane through its step twins": stepped(
                smoothclient.SmoothTransport(httpx.MockTransport(handler))
            ),
            # what the default retry budget costs a healthy request (an attempt counted)
            "smoothclient, no retry budget": smoothclient.SmoothTransport(
                httpx.MockTransport(handler), policy=smoothclient.RetryPolicy(budget=None)
            ),
        }
        if handler is ok_with_quota:
            transports[READ_ONCE] = smoothclient.SmoothTransport(httpx.MockTransport(handler))
            transports[WHOLE] = smoothclient.SmoothTransport(httpx.MockTransport(handler))
        clients = {name: httpx.Client(transport=t) for name, t in transports.items()}
        calls = {name: (lambda c=c: c.get("http://t/x")) for name, c in clients.items()}
        if READ_ONCE in clients:
            reuse = lane_module.read_fields = ReusedHints()
            calls[READ_ONCE] = lambda c=clients[READ_ONCE]: reuse.call(c)
            whole = learning._predicted = WholeLearning()
            calls[WHOLE] = lambda c=clients[WHOLE]: whole.call(c)
        try:
            rows += paired(stack, calls, rounds=rounds, per_round=100)
        finally:
            if READ_ONCE in clients:
                lane_module.read_fields = reuse.read
                learning._predicted = whole.short_cut
        for client in clients.values():
            client.close()
    return rows


class AdapterFloor(HTTPAdapter):
    """:class:`HintFloor` for requests: the origin's state and a look at every header name."""

    def __init__(self) -> None:
        super().__init__()
        self.origins: dict[str, object] = {}

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.origins.get(_origin(request.url or ""))
        response = super().send(request, **kwargs)
        has_hints(response.headers, requests_adapter.HEADER_ACCESS)
        return response


def _adapters() -> dict[str, HTTPAdapter]:
    return {
        "bare HTTPAdapter": HTTPAdapter(),
        "smoothclient": smoothclient.SmoothAdapter(),
        "urllib3 Retry": HTTPAdapter(max_retries=Retry(total=5, backoff_factor=0.5)),
        "floor: origin lookup + header-name scan only": AdapterFloor(),
    }


def _sessions(adapters: dict[str, HTTPAdapter]) -> dict[str, requests.Session]:
    sessions = {}
    for name, adapter in adapters.items():
        sessions[name] = requests.Session()
        sessions[name].mount("http://", adapter)
    return sessions


@contextmanager
def in_memory_urllib3() -> Iterator[None]:
    """urllib3 answers every request from memory, below its retry loop."""

    def answer(
        pool: HTTPConnectionPool, conn: object, method: str, url: str, **kw: Any
    ) -> urllib3.HTTPResponse:
        return urllib3.HTTPResponse(
            body=io.BytesIO(b"{}"),
            headers={**PLAIN, "Content-Length": "2"},
            status=200,
            preload_content=kw.get("preload_content", True),
            decode_content=kw.get("decode_content", True),
            request_method=method,
            request_url=url,
            retries=kw.get("retries"),
            pool=pool,
        )

    original = HTTPConnectionPool._make_request
    HTTPConnectionPool._make_request = answer  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        HTTPConnectionPool._make_request = original  # type: ignore[method-assign]


def requests_memory_rows(rounds: int) -> list[Row]:
    with in_memory_urllib3():
        sessions = _sessions(_adapters())
        calls = {name: (lambda s=s: s.get("http://memory.test/x")) for name, s in sessions.items()}
        return paired("requests, in memory", calls, rounds=rounds, per_round=50)


def _serve(conn: Connection) -> None:
    with LimitedServer(rate=1e9, burst=1e9) as server:
        conn.send(server.url)
        conn.recv()  # until told to stop


@contextmanager
def server_process() -> Iterator[str]:
    """A healthy local server in a child process; yields its URL."""
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("spawn").Process(target=_serve, args=(theirs,))
    child.start()
    try:
        yield ours.recv()
    finally:
        ours.send("stop")
        child.join(5)


def requests_server_rows(rounds: int) -> list[Row]:
    with server_process() as base:
        url = base + "/free"
        sessions = _sessions(_adapters())
        calls = {name: (lambda s=s: s.get(url)) for name, s in sessions.items()}
        rows = paired(
            "requests, local server (client CPU)",
            calls,
            rounds=rounds,
            per_round=20,
            clock=time.process_time,
        )
        for session in sessions.values():
            session.close()
    return rows


def async_server_rows(rounds: int) -> list[Row]:
    import asyncio

    import aiohttp

    from smoothclient.aiohttp import SmoothMiddleware

    async def nothing(request: Any, handler: Any) -> Any:
        return await handler(request)

    async def aiohttp_get(session: aiohttp.ClientSession, url: str) -> None:
        async with session.get(url) as response:
            await response.read()

    async def httpx_get(client: httpx.AsyncClient, url: str) -> None:
        await client.get(url)

    loop = asyncio.new_event_loop()
    rows: list[Row] = []
    with server_process() as base:
        url = base + "/free"

        async def sessions() -> dict[str, aiohttp.ClientSession]:
            return {
                "bare aiohttp": aiohttp.ClientSession(),
                "a middleware doing nothing": aiohttp.ClientSession(middlewares=(nothing,)),
                "smoothclient SmoothMiddleware": aiohttp.ClientSession(
                    middlewares=(SmoothMiddleware(),)
                ),
            }

        async def clients() -> dict[str, httpx.AsyncClient]:
            return {
                "bare httpx AsyncClient": httpx.AsyncClient(),
                "smoothclient AsyncSmoothTransport": httpx.AsyncClient(
                    transport=smoothclient.AsyncSmoothTransport()
                ),
            }

        aio, hx = loop.run_until_complete(sessions()), loop.run_until_complete(clients())
        stacks: list[tuple[str, dict[str, Any], Callable[[Any, str], Any]]] = [
            ("aiohttp, local server (client CPU)", aio, aiohttp_get),
            ("httpx async, local server (client CPU)", hx, httpx_get),
        ]
        for stack, held, get in stacks:
            calls = {
                name: (lambda c=c, get=get: loop.run_until_complete(get(c, url)))
                for name, c in held.items()
            }
            rows += paired(stack, calls, rounds=rounds, per_round=20, clock=time.process_time)
            for c in held.values():
                loop.run_until_complete(c.close() if hasattr(c, "closed") else c.aclose())
    loop.close()
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| stack | client | us per request | added over bare |", "|---|---|---|---|"]
    for stack, name, seconds, added in rows:
        lines.append(f"| {stack} | {name} | {seconds * 1e6:.1f} | {added * 1e6:+.1f} us |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="per-request overhead on a healthy origin")
    parser.add_argument("--rounds", type=int, default=150)
    args = parser.parse_args()
    rows = httpx_rows(args.rounds) + requests_memory_rows(args.rounds)
    rows += requests_server_rows(args.rounds) + async_server_rows(args.rounds)
    print(table(rows))


if __name__ == "__main__":
    main()
