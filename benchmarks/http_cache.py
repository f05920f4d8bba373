"""
HTTP response caches side by side: smoothclient's HttpCache, hishel and requests-cache.

1. The cost of a hit: one session per cache on a local origin (``max-age=3600``), the URL
   stored, then ``session.get`` timed (``timeit``, rounds interleaved across the caches, the
   median of the rounds), microseconds per call.  A plain ``requests`` GET to the origin is the
   yardstick.
2. A fleet: 4 processes x 8 threads read the same 50 URLs (``Cache-Control: max-age=5``, an
   ``ETag``; 304 to a matching ``If-None-Match``), each thread one URL every 50 ms, all starting
   together (a cold fleet, the worst case for expiries in step).  The origin (a process of its
   own) logs each request's arrival.  Counted after the first second (the cold fill):
   origin requests per URL per expiry (``requests / (50 * seconds / 5)``: 1.0 is one request
   per URL per ``max-age`` for the whole fleet; a cache per process is 4.0 at best), and the
   peak per 100 ms over the mean.  Ours with memory (a cache per process), SQLite (one file on
   the host) and Redis (the fleet's), with early refreshes spaced (``+gap``), and on Redis
   without the lead (``+nolead``: each revalidation sent by the first reader after its point);
   hishel (``rfc=True``) and requests-cache (``cache_control=True``) on SQLite and Redis.

Run: python benchmarks/http_cache.py [--quick]   (--quick: 15 s fleets instead of 60 s)
Other shapes of fleet: ``--urls 200 --max-age 30``, ``--processes 8`` (``--warmup`` seconds
left out at the start: a fleet reading many URLs takes longer to fill).
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

URLS = 50
PROCESSES = 4
THREADS = 8
READ_EVERY = 0.05
MAX_AGE = 5
WARMUP = 1.0
GAP = MAX_AGE / URLS / 3  # refresh_gap for the "+gap" rows: a third of the mean spacing
BODY = b"x" * 1024


class _Origin(http.server.BaseHTTPRequestHandler):
    """``max-age`` and an ETag; 304 to a matching ``If-None-Match``; each arrival logged."""

    protocol_version = "HTTP/1.1"
    max_age = MAX_AGE
    log: Any = None
    lock = threading.Lock()

    def setup(self) -> None:
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle stalls

    def do_GET(self) -> None:
        if self.log is not None:
            with self.lock:
                self.log.write(f"{time.time():.4f}\n")
                self.log.flush()
        fresh = self.headers.get("If-None-Match") == '"v1"'
        self.send_response(304 if fresh else 200)
        self.send_header("Cache-Control", f"max-age={self.max_age}")
        self.send_header("ETag", '"v1"')
        self.send_header("Content-Length", "0" if fresh else str(len(BODY)))
        self.end_headers()
        if not fresh:
            self.wfile.write(BODY)

    def log_message(self, *args: object) -> None:
        pass


def _serve(max_age: int, log_path: str | None) -> http.server.ThreadingHTTPServer:
    handler = type("Origin", (_Origin,), {"max_age": max_age})
    if log_path:
        handler.log = open(log_path, "a")  # noqa: SIM115 - the origin's life
    server_class = type("Server", (http.server.ThreadingHTTPServer,), {"request_queue_size": 256})
    server = server_class(("127.0.0.1", 0), handler)  # (a backlog of 5 drops SYNs: 1 s stalls)
    server.daemon_threads = True
    return server


@contextlib.contextmanager
def origin_in_thread(max_age: int) -> Iterator[str]:
    server = _serve(max_age, None)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


# the clients


def make_session(kind: str, redis_url: str, tmp: str, cache: Any = None) -> requests.Session:
    """A session of ``kind`` ("smoothclient memory", "hishel sqlite", ...)."""
    family, storage = kind.rsplit(" ", 1)
    if family == "requests":
        return requests.Session()
    if family == "smoothclient":
        from smoothclient import SmoothAdapter

        s = requests.Session()
        s.mount("http://", SmoothAdapter(cache=cache or smooth_cache(storage, redis_url, tmp)))
        return s
    if family == "hishel":
        import hishel
        from hishel.requests import CacheAdapter

        store: Any
        if storage == "sqlite":
            store = hishel.SqliteStorage(database_path=f"{tmp}/hishel.db")
        else:
            import redis

            store = hishel.RedisStorage(client=redis.Redis.from_url(redis_url))
        s = requests.Session()
        s.mount("http://", CacheAdapter(storage=store, rfc=True))
        return s
    import requests_cache

    backend: Any = (
        requests_cache.SQLiteCache(f"{tmp}/requests-cache.db")
        if storage == "sqlite"
        else requests_cache.RedisCache(connection=__import__("redis").Redis.from_url(redis_url))
        if storage == "redis"
        else "memory"
    )
    return requests_cache.CachedSession(backend=backend, cache_control=True)


def smooth_cache(storage: str, redis_url: str, tmp: str) -> Any:
    from smoothclient import HttpCache

    where = {"memory": "memory://", "sqlite": f"sqlite://{tmp}/smooth.db", "redis": redis_url}
    name, _, variant = storage.partition("+")  # "redis+gap": early refreshes spaced
    return HttpCache(  # "redis+nolead": each revalidation sent by the first reader after it is due
        where[name],
        refresh_gap=GAP if variant == "gap" else None,
        lead=0.0 if variant == "nolead" else 0.2,
    )


# 1. the cost of a hit

HIT_CLIENTS = [
    "requests none",
    "smoothclient memory",
    "smoothclient sqlite",
    "smoothclient redis",
    "hishel sqlite",
    "hishel redis",
    "requests-cache memory",
    "requests-cache sqlite",
    "requests-cache redis",
]


def hit_costs(redis_url: str, tmp: str, rounds: int = 7, number: int = 300) -> list[list[str]]:
    with origin_in_thread(3600) as base:
        url = f"{base}/hit"
        sessions = {kind: make_session(kind, redis_url, tmp) for kind in HIT_CLIENTS}
        for s in sessions.values():
            s.get(url).raise_for_status()
            s.get(url)
        times: dict[str, list[float]] = {kind: [] for kind in HIT_CLIENTS}
        for _ in range(rounds):  # interleaved: drift of a busy machine hits each alike
            for kind, s in sessions.items():
                seconds = timeit.timeit(lambda s=s: s.get(url), number=number)  # type: ignore[misc]
                times[kind].append(seconds / number * 1e6)
    rows = []
    for kind in HIT_CLIENTS:
        median = statistics.median(times[kind])
        rows.append([kind, f"{median:.0f}", f"{min(times[kind]):.0f}"])
    return rows


# 2. the fleet


FLEET_CLIENTS = [
    "smoothclient memory",
    "smoothclient sqlite",
    "smoothclient redis",
    "smoothclient sqlite+gap",
    "smoothclient redis+gap",
    "smoothclient redis+nolead",
    "hishel sqlite",
    "hishel redis",
    "requests-cache sqlite",
    "requests-cache redis",
]


def worker(kind: str, base: str, redis_url: str, tmp: str, start: float, seconds: float) -> None:
    """One process of the fleet: 8 threads reading the 50 URLs until ``start + seconds``."""
    family, storage = kind.rsplit(" ", 1)
    if os.environ.get("HTTP_CACHE_BENCH_LOG"):  # the cache's debug log (store failures) on stderr
        import logging

        logging.basicConfig(level=logging.WARNING)
        logging.getLogger("smoothclient.httpcache").setLevel(logging.DEBUG)
    shared = smooth_cache(storage, redis_url, tmp) if family == "smoothclient" else None
    errors = Counter[str]()

    def read(thread: int) -> None:
        s = make_session(kind, redis_url, tmp, shared)
        rng = random.Random(thread * 7919 + os.getpid())
        i = rng.randrange(URLS)
        time.sleep(max(0.0, start - time.time()))
        end = start + seconds
        while time.time() < end:
            try:
                s.get(f"{base}/u/{i}").content  # noqa: B018 - reads the body
            except Exception as exc:  # counted: a benchmark goes on
                errors[type(exc).__name__] += 1
            i = (i + 1) % URLS
            time.sleep(READ_EVERY)

    threads = [threading.Thread(target=read, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print(json.dumps(dict(errors)), file=sys.stderr)


def fleet(kind: str, redis_url: str, seconds: float) -> list[str]:
    tmp = tempfile.mkdtemp(prefix="smoothclient-bench-")
    log = f"{tmp}/arrivals.log"
    origin = subprocess.Popen(
        [sys.executable, __file__, *_shape(), "--origin", log], stdout=subprocess.PIPE, text=True
    )
    try:
        assert origin.stdout is not None
        base = origin.stdout.readline().strip()
        _flush_redis(redis_url)
        # all processes up and importing done (2 s was too little on a loaded machine: the cold
        # fill then fell into the counted part, a peak of 12-15 in 100 ms)
        start = time.time() + 5.0
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    *_shape(),
                    "--worker",
                    kind,
                    base,
                    redis_url,
                    tmp,
                    str(start),
                    str(seconds),
                ]
            )
            for _ in range(PROCESSES)
        ]
        for w in workers:
            w.wait()
    finally:
        origin.terminate()
        origin.wait()
    arrivals = [float(line) - start for line in Path(log).read_text().split()]
    shutil.rmtree(tmp, ignore_errors=True)
    dump = os.environ.get("HTTP_CACHE_BENCH_DUMP")  # a folder: each fleet's arrivals as JSON
    if dump:
        Path(dump, kind.replace(" ", "-") + ".json").write_text(json.dumps(arrivals))
    return _fleet_row(kind, arrivals, seconds)


def _fleet_row(kind: str, arrivals: list[float], seconds: float) -> list[str]:
    cold = sum(1 for t in arrivals if t < WARMUP)
    steady = [t for t in arrivals if WARMUP <= t < seconds]
    span = seconds - WARMUP
    per_expiry = len(steady) / (URLS * span / MAX_AGE)
    buckets = Counter(int((t - WARMUP) / 0.1) for t in steady)
    n_buckets = round(span / 0.1)
    mean = len(steady) / n_buckets
    peak = max(buckets.values(), default=0)
    per_second = Counter(int(t - WARMUP) for t in steady)
    peak_s = max(per_second.values(), default=0)
    return [
        kind,
        str(cold),
        str(len(steady)),
        f"{per_expiry:.2f}",
        f"{mean:.2f}",
        str(peak),
        f"{peak / mean:.1f}" if mean else "-",
        f"{peak_s / (len(steady) / span):.1f}" if steady else "-",
    ]


def _shape() -> list[str]:
    """The fleet's shape, for the origin's and the workers' command lines."""
    return ["--urls", str(URLS), "--max-age", str(MAX_AGE), "--warmup", str(WARMUP)]


def _set_shape(urls: int, max_age: int, processes: int, warmup: float) -> None:
    global URLS, MAX_AGE, PROCESSES, WARMUP, GAP
    URLS, MAX_AGE, PROCESSES, WARMUP = urls, max_age, processes, warmup
    GAP = MAX_AGE / URLS / 3


def _flush_redis(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushall()


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="15 s fleets instead of 60 s")
    parser.add_argument("--origin", help=argparse.SUPPRESS)
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument(
        "--only", help="run only the fleet of this name, or those whose name contains this"
    )
    parser.add_argument("--no-hits", action="store_true", help="skip the cost of a hit")
    parser.add_argument("--urls", type=int, default=URLS, help="URLs the fleet reads (50)")
    parser.add_argument("--max-age", type=int, default=MAX_AGE, help="their max-age (5)")
    parser.add_argument("--processes", type=int, default=PROCESSES, help="processes (4)")
    parser.add_argument(
        "--warmup", type=float, default=WARMUP, help="seconds not counted at the start (1)"
    )
    args = parser.parse_args()
    _set_shape(args.urls, args.max_age, args.processes, args.warmup)
    if args.origin:
        server = _serve(MAX_AGE, args.origin)
        print(f"http://127.0.0.1:{server.server_port}", flush=True)
        server.serve_forever()
        return
    if args.worker:
        kind, base, redis_url, tmp, start, seconds = args.worker
        worker(kind, base, redis_url, tmp, float(start), float(seconds))
        return
    from smoothclient.tools.redis_server import RedisServer

    seconds = (15.0 if args.quick else 60.0) + WARMUP - 1.0
    with RedisServer() as redis_server:
        if not args.no_hits:
            tmp = tempfile.mkdtemp(prefix="smoothclient-bench-")
            try:
                hits = hit_costs(redis_server.url, tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            print("Cost of a hit (session.get of a stored, fresh response), us per call\n")
            print(table(["client", "median us", "best us"], hits))
            print()
        kinds = [k for k in FLEET_CLIENTS if k == args.only] or [  # a whole name: that one
            k for k in FLEET_CLIENTS if not args.only or args.only in k
        ]
        rows = [fleet(kind, redis_server.url, seconds) for kind in kinds]
    print(
        f"Fleet: {PROCESSES} processes x {THREADS} threads, {URLS} URLs, max-age={MAX_AGE}, "
        f"{seconds:g} s (counted after the first {WARMUP:g} s)\n"
    )
    print(
        table(
            [
                "cache",
                "cold fill",
                "origin requests",
                "per URL per expiry",
                "mean per 100 ms",
                "peak per 100 ms",
                "peak / mean",
                "peak 1 s / mean",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
