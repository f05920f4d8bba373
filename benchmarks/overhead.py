"""
Overhead on a healthy origin: time per request added over the bare transport.

httpx: in-memory MockTransport (so only client-side cost is measured), sync.
requests: a local HTTP server on 127.0.0.1 (HTTPAdapter has no in-memory transport), in a
child process so that its thread does not compete with the client for the GIL.
Run: python benchmarks/overhead.py [--n 5000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection

import httpx
import requests
from requests.adapters import HTTPAdapter
from urllib3.util import Retry

import smoothclient
from smoothclient._server import LimitedServer


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b"ok")


def ok_with_quota(request: httpx.Request) -> httpx.Response:
    headers = {"RateLimit": '"d";r=900;t=60', "RateLimit-Policy": '"d";q=1000;w=60'}
    return httpx.Response(200, headers=headers, content=b"ok")


def per_request(
    calls: dict[str, Callable[[], object]],
    n: int,
    repeats: int = 7,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Best-of-``repeats`` mean seconds per call, the clients interleaved round by round."""
    best = {name: float("inf") for name in calls}
    for call in calls.values():
        call()
    for _ in range(repeats):
        for name, call in calls.items():
            start = clock()
            for _ in range(n):
                call()
            best[name] = min(best[name], (clock() - start) / n)
    return best


def httpx_rows(n: int) -> list[tuple[str, float]]:
    from httpx_retries import Retry as HRetry
    from httpx_retries import RetryTransport

    transports: dict[str, httpx.BaseTransport] = {
        "bare MockTransport": httpx.MockTransport(ok),
        "smoothclient": smoothclient.SmoothTransport(httpx.MockTransport(ok)),
        "httpx-retries": RetryTransport(httpx.MockTransport(ok), retry=HRetry(total=5)),
        "smoothclient, RateLimit headers on every response": smoothclient.SmoothTransport(
            httpx.MockTransport(ok_with_quota)
        ),
    }
    clients = {name: httpx.Client(transport=t) for name, t in transports.items()}
    calls = {name: (lambda c=c: c.get("http://t/x")) for name, c in clients.items()}
    best = per_request(calls, n)
    for client in clients.values():
        client.close()
    return [(f"httpx / {name}", seconds) for name, seconds in best.items()]


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


def requests_rows(n: int) -> list[tuple[str, float]]:
    adapters: dict[str, HTTPAdapter] = {
        "bare HTTPAdapter": HTTPAdapter(),
        "smoothclient": smoothclient.SmoothAdapter(),
        "urllib3 Retry": HTTPAdapter(max_retries=Retry(total=5, backoff_factor=0.5)),
    }
    with server_process() as base:
        url = base + "/free"
        sessions = {}
        for name, adapter in adapters.items():
            sessions[name] = requests.Session()
            sessions[name].mount("http://", adapter)
        calls = {name: (lambda s=s: s.get(url)) for name, s in sessions.items()}
        # the client's own CPU time: the server's share and the loopback latency are the
        # same for every client, and wall time over a socket is far noisier than the overhead
        best = per_request(calls, n, repeats=9, clock=time.process_time)
        for session in sessions.values():
            session.close()
    return [(f"requests / {name}", seconds) for name, seconds in best.items()]


def table(rows: list[tuple[str, float]]) -> str:
    bases = {"httpx": rows[0][1], "requests": rows[4][1]}
    lines = ["| client | us per request | added over bare |", "|---|---|---|"]
    for name, seconds in rows:
        added = seconds - bases[name.split(" /")[0]]
        lines.append(f"| {name} | {seconds * 1e6:.1f} | {added * 1e6:+.1f} us |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="per-request overhead on a healthy origin")
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args()
    rows = httpx_rows(args.n) + requests_rows(max(args.n // 3, 100))
    print(table(rows))


if __name__ == "__main__":
    main()
