"""
Spent quotas on real limiters: requests knocked into a quota stated spent, and how long a call
whose deadline ends before the reset takes to come back.

Each cell starts a fresh limiter (a quota of 5 a minute), spends it with 5 plain requests,
then makes 20 calls one after another, each with a 2 s deadline where the client has one: the
quota's reset is a minute away, so no call can succeed, and the best a client can do is send
nothing and say so at once.  A "fleet" cell makes the same 20 calls from 4 OS processes (5
each, spawned, started together), smoothclient's sharing one pacer through a redis-server on a
free port.

Limiters (``benchmarks/limiter_servers.py``): slowapi's fixed window (``X-RateLimit-*`` and
``Retry-After``), express-rate-limit in its ``draft-8`` (IETF ``RateLimit``) and ``legacy``
(``X-RateLimit-*``) header modes (skipped without node and npm).  smoothclient's own token
bucket is no such server: its GitHub style states a window of a second whatever its rate.

Clients: smoothclient's ``SmoothTransport`` (httpx) and ``SmoothAdapter`` (requests), with
``RetryPolicy(timeout=2)``; httpx bare (one attempt: what a call costs when it is sent);
urllib3's ``Retry(total=3, backoff_factor=0.5)`` not honouring ``Retry-After`` (honouring it,
a call sleeps the minute whatever its timeout, since urllib3 caps no ``Retry-After``).

Columns (medians of --runs runs):

  sent early     requests the limiter received after it was spent, earlier than 1 s before
                 its reset (all of them, here: the reset is a minute away)
  sent/call      the same per call
  call ms p50    the wall time of a call (a refusal, an error or the 429), median
  p90, max       ... its 90th percentile and its longest (the first call of each process
                 is sent: nothing is known yet)
  calls once stated, their p90, max
                 the calls that began after a call had come back (the quota was stated
                 spent then: the first answer), how long they took; a fleet's processes
                 start their first calls together, and those that began before that answer
                 could not know it

Run: python benchmarks/spent_quota.py [--runs 3] [--quick] [--only SUBSTRING ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import requests
import urllib3
from limiter_servers import Running, Skip, express_rate_limit, slowapi_server
from limiters import spawn_fleet

import smoothclient

LIMIT, WINDOW = 5, 60
CALLS, PROCS, DEADLINE = 20, 4, 2.0
PATH = "/work"  # (express-rate-limit limits only this path)
REDIS_ENV = "SPENT_QUOTA_REDIS"
#: How long a limiter is given to log what it answered before its log is read.
SETTLE = 0.3


def servers() -> dict[str, Callable[[], contextlib.AbstractContextManager[Running]]]:
    """The limiters, by name: each a fresh one when entered."""
    chosen: dict[str, Callable[[], contextlib.AbstractContextManager[Running]]] = {
        "slowapi fixed window": lambda: slowapi_server("fixed-window", LIMIT, WINDOW),
        "express draft-8": lambda: express_rate_limit("draft-8", LIMIT, WINDOW),
        "express legacy": lambda: express_rate_limit("legacy", LIMIT, WINDOW),
    }
    return chosen


def _policy() -> smoothclient.RetryPolicy:
    return smoothclient.RetryPolicy(timeout=DEADLINE)


def _pacer() -> smoothclient.Pacer:
    url = os.environ.get(REDIS_ENV)
    return smoothclient.Pacer(storage=url) if url else smoothclient.Pacer()


@contextlib.contextmanager
def client(name: str) -> Iterator[Callable[[str], object]]:
    """A function that makes one call of ``name``'s client (its result is not read)."""
    if name == "smoothclient httpx":
        transport = smoothclient.SmoothTransport(policy=_policy(), pacer=_pacer())
        with httpx.Client(transport=transport) as c:
            yield c.get
    elif name == "smoothclient adapter":
        with requests.Session() as s:
            adapter = smoothclient.SmoothAdapter(policy=_policy(), pacer=_pacer())
            s.mount("http://", adapter)
            yield s.get
    elif name == "httpx bare":
        with httpx.Client(timeout=DEADLINE) as c:
            yield c.get
    elif name == "urllib3 Retry":
        retry = urllib3.Retry(
            total=3, status_forcelist=(429,), respect_retry_after_header=False, backoff_factor=0.5
        )
        with urllib3.PoolManager(retries=retry, timeout=DEADLINE) as pool:

            def get(url: str) -> object:
                return pool.request("GET", url)

            yield get
    else:  # pragma: no cover - a typo in the table
        raise ValueError(name)


def _calls(
    name: str, url: str, calls: int, ready: Callable[[], object] | None = None
) -> list[tuple[float, float]]:
    """
    Make ``calls`` calls one after another; when each began and ended.

    On ``time.monotonic``, which the processes of a fleet share (Linux's ``CLOCK_MONOTONIC``).
    ``ready`` is called once the client is made (its imports done, its pacer built), before
    the first call: a fleet's barrier, so that no process's start-up runs beside another's
    timed calls (a service builds its clients when it starts, not in its first request).
    """
    spans = []
    with client(name) as get:
        if ready is not None:
            ready()
        for _ in range(calls):
            began = time.monotonic()
            with contextlib.suppress(Exception):  # a refusal, a 429 error: all the same here
                get(url)
            spans.append((began, time.monotonic()))
    return spans


def _child(name: str, url: str, calls: int, barrier: Any, queue: Any) -> None:
    try:
        queue.put(_calls(name, url, calls, ready=lambda: barrier.wait(60)))
    except Exception as exc:
        print(f"fleet process failed: {exc!r}", file=sys.stderr, flush=True)
        queue.put([])


def _fleet(name: str, url: str) -> list[tuple[float, float]]:
    results = spawn_fleet(_child, (name, url, CALLS // PROCS), PROCS, 120)
    return [span for spans in results for span in spans]


@dataclass
class Cell:
    server: str
    client: str
    fleet: bool
    sent: int
    p50: float
    p90: float
    worst: float
    known: int
    known_p90: float
    known_worst: float


def run_cell(running: Running, server: str, name: str, fleet: bool) -> Cell:
    """One run: spend the quota, then the calls; what the limiter saw after it was spent."""
    running.reset(hard=True)
    url = running.url + PATH
    with httpx.Client() as plain:
        for _ in range(LIMIT):
            plain.get(url)
    time.sleep(SETTLE)
    spent = len(running.arrivals())
    spans = _fleet(name, url) if fleet else _calls(name, url, CALLS)
    time.sleep(SETTLE)
    sent = len(running.arrivals()) - spent
    times = [end - began for began, end in spans]
    # the calls that began once a call had come back (with the quota stated spent: the
    # first answer); the others' processes could not know it yet
    stated = min(end for _, end in spans)
    known = [end - began for began, end in spans if began >= stated] or [0.0]
    return Cell(
        server,
        name,
        fleet,
        sent,
        statistics.median(times),
        _p90(times),
        max(times),
        len(known),
        _p90(known),
        max(known),
    )


def _p90(times: list[float]) -> float:
    return statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]


def _flush(url: str) -> None:
    import redis as redis_py

    with redis_py.Redis.from_url(url) as r:
        r.flushall()


CLIENTS = ("smoothclient httpx", "smoothclient adapter", "httpx bare", "urllib3 Retry")
TIMES = ("p50", "p90", "worst", "known_p90", "known_worst")
FLEET_CLIENTS = ("smoothclient httpx", "smoothclient adapter")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 run")
    parser.add_argument(
        "--only",
        nargs="+",
        action="extend",
        default=[],
        help="only the cells whose limiter and client name hold every one of these substrings",
    )
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    redis = None
    try:
        from smoothclient.tools.redis_server import RedisServer

        redis = RedisServer().start()
    except FileNotFoundError as exc:
        print(f"fleets through Redis skipped: {exc}")
    rows: list[str] = []
    for server, start in servers().items():
        try:
            cm = start()
            running = cm.__enter__()
        except Skip as exc:
            print(f"{server}: skipped ({exc})")
            continue
        try:
            cells = [(c, False) for c in CLIENTS]
            if redis is not None:
                cells += [(c, True) for c in FLEET_CLIENTS]
            for name, fleet in cells:
                named = f"{server} {name} {'fleet redis' if fleet else ''}".lower()
                if not all(o.lower() in named for o in args.only):
                    continue
                if fleet and redis is not None:
                    os.environ[REDIS_ENV] = redis.url
                got = []
                for _ in range(runs):
                    if fleet and redis is not None:
                        _flush(redis.url)
                    got.append(run_cell(running, server, name, fleet))
                os.environ.pop(REDIS_ENV, None)
                sent = statistics.median(c.sent for c in got)
                ms = [f"{statistics.median(getattr(c, f) for c in got) * 1000:.1f}" for f in TIMES]
                label = f"{name}, {PROCS} processes through Redis" if fleet else name
                known = statistics.median(c.known for c in got)
                cols = [
                    server,
                    label,
                    f"{sent:.0f}",
                    f"{sent / CALLS:.2f}",
                    *ms[:3],
                    f"{known:.0f}",
                ]
                cols += ms[3:]
                rows.append("| " + " | ".join(cols) + " |")
                print(rows[-1], file=sys.stderr, flush=True)
        finally:
            cm.__exit__(None, None, None)
    if redis is not None:
        redis.stop()
    head = "| limiter | client | sent early | sent/call | call ms p50 | p90 | max "
    print(head + "| calls once stated | their p90 ms | max |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
