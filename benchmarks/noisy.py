"""
Random throttles: a server that answers a share of requests 429 whatever the rate.

A flaky proxy, a load balancer shedding at random, a limiter in front of many tenants: 30% of
requests get ``429`` with ``Retry-After: 0.05`` and nothing about any rate.  No client can
do better than honour each ``Retry-After`` for the request it answered and keep the others
going; cutting the rate on such throttles only slows the client down (they do not fall when
it sends less).

The server is a threaded ``http.server`` in a child process (so it never competes with the
clients for the GIL) on a free loopback port; 16 client threads call it for ``--seconds``
each run.  Clients (each call retried on 429 until it succeeds, at most 5 attempts, within a
2 s deadline where the client has one):

  smoothclient adapter  SmoothAdapter on a requests Session (default policy, timeout=2)
  smoothclient httpx    SmoothTransport on an httpx Client (default policy, timeout=2)
  urllib3 Retry         requests + Retry(total=4, status_forcelist=[429], honours Retry-After)
  requests (no retry)   a plain Session: what the server gives without retrying

Columns: successful calls per second, failed calls (per cent; chance alone fails 0.3^5 =
0.24% of calls that make 5 attempts), requests per call.  Medians of ``--runs`` runs.

Run: python benchmarks/noisy.py [--runs N] [--seconds S] [--share P] [--json]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

import smoothclient

THREADS = 16
ATTEMPTS = 5
DEADLINE = 2.0
CLIENTS = ("smoothclient adapter", "smoothclient httpx", "urllib3 Retry", "requests (no retry)")

SERVER = r"""
import http.server, random, sys, threading
share = float(sys.argv[2])
rng = random.Random(7)
lock = threading.Lock()
seen = [0]

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        with lock:
            seen[0] += 1
            throttle = rng.random() < share
        if self.path == "/count":
            body = str(seen[0]).encode()
            self.send_response(200)
        elif throttle:
            body = b"slow down"
            self.send_response(429)
            self.send_header("Retry-After", "0.05")
        else:
            body = b"ok"
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
server.daemon_threads = True
print("ready", flush=True)
server.serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _client(name: str) -> Callable[[str], int]:
    if name == "smoothclient adapter":
        session = requests.Session()
        adapter = smoothclient.SmoothAdapter(
            policy=smoothclient.RetryPolicy(attempts=ATTEMPTS, timeout=DEADLINE),
            pacer=smoothclient.Pacer(),
        )
        session.mount("http://", adapter)
        return lambda url: session.get(url, timeout=5).status_code
    if name == "smoothclient httpx":
        transport = smoothclient.SmoothTransport(
            policy=smoothclient.RetryPolicy(attempts=ATTEMPTS, timeout=DEADLINE),
            pacer=smoothclient.Pacer(),
        )
        client = httpx.Client(transport=transport, timeout=5)
        return lambda url: client.get(url).status_code
    session = requests.Session()
    if name == "urllib3 Retry":
        retry = _FloatRetry(
            total=ATTEMPTS - 1,
            status_forcelist=[429],
            respect_retry_after_header=True,
            backoff_factor=0.0,
            raise_on_status=False,
        )
        session.mount("http://", HTTPAdapter(max_retries=retry, pool_maxsize=THREADS))
    else:
        session.mount("http://", HTTPAdapter(pool_maxsize=THREADS))
    return lambda url: session.get(url, timeout=5).status_code


class _FloatRetry(Retry):
    """urllib3's Retry reading a fractional ``Retry-After`` (it takes whole seconds only)."""

    def parse_retry_after(self, retry_after: str) -> float:
        try:
            return max(0.0, float(retry_after))
        except ValueError:
            return super().parse_retry_after(retry_after)


def _count(base: str) -> int:
    return int(requests.get(f"{base}/count", timeout=5).text)


def run_once(name: str, base: str, seconds: float) -> dict[str, float]:
    """16 threads calling for ``seconds``: successes per second, failed share, requests/call."""
    get = _client(name)
    ok = failed = 0
    errors: dict[str, int] = {}
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker() -> None:
        nonlocal ok, failed
        while time.monotonic() < stop:
            try:
                good = get(f"{base}/work") == 200
            except Exception as exc:  # a give-up raised (RateLimited, a transport error)
                good = False
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            with lock:
                if good:
                    ok += 1
                else:
                    failed += 1

    before = _count(base)
    began = time.monotonic()
    pool = [threading.Thread(target=worker, daemon=True) for _ in range(THREADS)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(seconds + DEADLINE + 10)
    elapsed = time.monotonic() - began
    sent = _count(base) - before - 1
    calls = ok + failed
    if errors:
        print(f"  {name}: {errors}", file=sys.stderr)
    return {
        "ok_per_s": ok / elapsed,
        "failed_pct": 100.0 * failed / max(1, calls),
        "requests_per_call": sent / max(1, calls),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--share", type=float, default=0.3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), str(args.share)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()
        base = f"http://127.0.0.1:{port}"
        results: dict[str, list[dict[str, float]]] = {name: [] for name in CLIENTS}
        for _ in range(args.runs):  # interleaved: every client sees the same machine load
            for name in CLIENTS:
                results[name].append(run_once(name, base, args.seconds))
    finally:
        server.terminate()
        server.wait(5)
    rows: dict[str, Any] = {}
    for name, runs in results.items():
        rows[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        rows[name]["ok_per_s_range"] = (
            min(r["ok_per_s"] for r in runs),
            max(r["ok_per_s"] for r in runs),
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"random {args.share:.0%} 429s (Retry-After 0.05), {THREADS} threads x "
        f"{args.seconds:g} s, medians of {args.runs}"
    )
    print("| client | successes/s (range) | failed calls | requests/call |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        lo, hi = row["ok_per_s_range"]
        print(
            f"| {name} | {row['ok_per_s']:.0f} ({lo:.0f}-{hi:.0f}) | "
            f"{row['failed_pct']:.2f}% | {row['requests_per_call']:.2f} |"
        )


if __name__ == "__main__":
    main()
