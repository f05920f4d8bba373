"""
Herd benchmark: smoothclient against common retry setups, on one local rate-limited server.

Scenarios (from the transports issue):
  herd-ietf     60 GETs at once, server 10 req/s burst 5, RateLimit/RateLimit-Policy headers
  herd-github   the same with X-RateLimit-* headers (epoch reset)
  herd-ra       the same with only Retry-After
  batch         600 GETs, 20 in flight, server 50 req/s burst 10, RateLimit headers
  adapter       the requests adapter (and urllib3 Retry), 60 threads, herd-ietf's server

"extra 429s per call" counts 429 responses beyond the unavoidable first wave
(clients - burst), divided by the number of calls.  Run: python benchmarks/herd.py [--quick]

``--load 500,1000 [--runs 3]`` (issue 37's load target): N asyncio tasks at once, one GET
each through one AsyncSmoothTransport, on an in-memory pacer and on a Redis pacer (a local
redis-server, flushed before each run), against a server of 100 req/s and a bucket of 20 in
a child process (its threads off this process's GIL); the runs interleaved (memory, Redis,
memory, ...), a table of every run and one of medians.  Also counted: the requests sent in
each 100 ms after the first 429 (a 429 storm is a burst into a spent bucket).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
import requests

import smoothclient
from smoothclient.tools.server import LimitedServer

ATTEMPTS = 50


@dataclass
class Row:
    scenario: str
    client: str
    calls: int
    sent: int
    n429: int
    failures: int
    elapsed: float
    ideal: float
    burst: int

    @property
    def extra_per_call(self) -> float:
        return max(0, self.n429 - (self.calls - self.burst)) / self.calls

    def cells(self) -> list[str]:
        share = self.n429 / self.sent if self.sent else 0.0
        return [
            self.scenario,
            self.client,
            str(self.sent),
            str(self.n429),
            f"{self.extra_per_call:.2f}",
            f"{share:.0%}",
            f"{self.elapsed:.2f}",
            f"{self.elapsed / self.ideal:.2f}x",
            f"{self.calls / self.elapsed:.1f}",
            str(self.failures),
        ]


HEADER = [
    "scenario",
    "client",
    "sent",
    "429s",
    "extra/call",
    "429 share",
    "time s",
    "vs ideal",
    "req/s",
    "fail",
]


class Throttled(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


# ---------------------------------------------------------------- async clients (one GET each)

AsyncGet = Callable[[httpx.AsyncClient, str], Awaitable[int]]


async def plain_get(client: httpx.AsyncClient, url: str) -> int:
    return (await client.get(url)).status_code


async def tenacity_get(client: httpx.AsyncClient, url: str) -> int:
    import tenacity

    retrying = tenacity.AsyncRetrying(
        wait=tenacity.wait_random_exponential(multiplier=0.5, max=30),
        stop=tenacity.stop_after_attempt(ATTEMPTS),
        retry=tenacity.retry_if_result(lambda r: r.status_code == 429),
        retry_error_callback=lambda state: state.outcome.result(),
    )
    response: httpx.Response = await retrying(client.get, url)
    return response.status_code


def _retry_after_hook(exc: Exception) -> bool | float:
    if isinstance(exc, Throttled):
        value = exc.response.headers.get("retry-after")
        return float(value) if value else True
    return False


async def stamina_get(client: httpx.AsyncClient, url: str) -> int:
    import stamina

    try:
        async for attempt in stamina.retry_context(
            on=_retry_after_hook, attempts=ATTEMPTS, timeout=120
        ):
            with attempt:
                response = await client.get(url)
                if response.status_code == 429:
                    raise Throttled(response)
                return response.status_code
    except Throttled as exc:
        return exc.response.status_code
    return 0  # pragma: no cover


async def backoff_get(client: httpx.AsyncClient, url: str) -> int:
    import backoff

    @backoff.on_predicate(
        backoff.expo,
        lambda r: r.status_code == 429,
        max_tries=ATTEMPTS,
        jitter=backoff.full_jitter,
        factor=0.5,
        logger=None,
    )
    async def call() -> httpx.Response:
        return await client.get(url)

    return (await call()).status_code


Factory = Callable[[httpx.Limits], httpx.AsyncBaseTransport]


def async_clients() -> dict[str, tuple[Factory, AsyncGet]]:
    from httpx_retries import Retry, RetryTransport

    policy = smoothclient.RetryPolicy(attempts=ATTEMPTS, timeout=120)

    def inner(limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
        return httpx.AsyncHTTPTransport(limits=limits)

    return {
        "smoothclient": (
            lambda lim: smoothclient.AsyncSmoothTransport(inner(lim), policy=policy),
            plain_get,
        ),
        "httpx-retries": (
            lambda lim: RetryTransport(
                inner(lim),
                retry=Retry(total=ATTEMPTS, backoff_factor=0.5, status_forcelist=[429]),
            ),
            plain_get,
        ),
        "tenacity": (inner, tenacity_get),
        "stamina": (inner, stamina_get),
        "backoff": (inner, backoff_get),
    }


async def run_async(
    server: LimitedServer, make: Factory, get: AsyncGet, calls: int, in_flight: int
) -> tuple[int, float]:
    limits = httpx.Limits(max_connections=in_flight)
    gate = asyncio.Semaphore(in_flight)
    failures = 0
    async with httpx.AsyncClient(transport=make(limits), base_url=server.url, timeout=60) as client:
        start = time.monotonic()

        async def one() -> None:
            nonlocal failures
            async with gate:
                try:
                    status = await get(client, "/work")
                except Exception:
                    status = 0
                if status != 200:
                    failures += 1

        await asyncio.gather(*(one() for _ in range(calls)))
        return failures, time.monotonic() - start


# ---------------------------------------------------------------- requests (threads)


def run_threads(server: LimitedServer, session: requests.Session, calls: int) -> tuple[int, float]:
    failures = 0
    lock = threading.Lock()

    def one() -> None:
        nonlocal failures
        try:
            ok = session.get(server.url + "/work", timeout=60).status_code == 200
        except requests.RequestException:
            ok = False
        if not ok:
            with lock:
                failures += 1

    threads = [threading.Thread(target=one) for _ in range(calls)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures, time.monotonic() - start


def urllib3_session(size: int) -> requests.Session:
    from requests.adapters import HTTPAdapter
    from urllib3.util import Retry

    session = requests.Session()
    retry = Retry(total=ATTEMPTS, backoff_factor=0.5, status_forcelist=[429])
    session.mount("http://", HTTPAdapter(max_retries=retry, pool_maxsize=size))
    return session


def smooth_session(size: int) -> requests.Session:
    session = requests.Session()
    policy = smoothclient.RetryPolicy(attempts=ATTEMPTS, timeout=120)
    session.mount("http://", smoothclient.SmoothAdapter(policy=policy, pool_maxsize=size))
    return session


# ---------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    name: str
    style: str
    rate: float
    burst: int
    calls: int
    in_flight: int


SCENARIOS = [
    Scenario("herd-ietf", "ietf", 10, 5, 60, 60),
    Scenario("herd-github", "github", 10, 5, 60, 60),
    Scenario("herd-ra", "retry-after", 10, 5, 60, 60),
    Scenario("batch", "ietf", 50, 10, 600, 20),
]


def measure(sc: Scenario, name: str, run: Callable[[LimitedServer], tuple[int, float]]) -> Row:
    with LimitedServer(sc.rate, sc.burst, sc.style) as server:
        failures, elapsed = run(server)
        ideal = max(sc.calls - sc.burst, 1) / sc.rate
        return Row(
            sc.name,
            name,
            sc.calls,
            len(server.log),
            server.count(429),
            failures,
            elapsed,
            ideal,
            sc.burst,
        )


def run_all(quick: bool = False) -> list[Row]:
    import stamina.instrumentation

    stamina.instrumentation.set_on_retry_hooks([])  # keep its log lines out of the table
    rows: list[Row] = []
    clients = async_clients()
    scenarios = SCENARIOS[:1] if quick else SCENARIOS
    for sc in scenarios:
        for name, (make, get) in clients.items():
            rows.append(
                measure(
                    sc,
                    name,
                    lambda s, m=make, g=get, c=sc: asyncio.run(
                        run_async(s, m, g, c.calls, c.in_flight)
                    ),
                )
            )
            print(" | ".join(rows[-1].cells()), flush=True)
    herd = SCENARIOS[0]
    adapter = Scenario("adapter", "ietf", 10, 5, 60, 60)
    for name, make_session in (
        ("smoothclient", smooth_session),
        ("urllib3 Retry", urllib3_session),
    ):
        session = make_session(60)
        rows.append(measure(adapter, name, lambda s, se=session: run_threads(s, se, herd.calls)))
        session.close()
        print(" | ".join(rows[-1].cells()), flush=True)
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- load (issue 37)

LOAD_RATE, LOAD_BURST = 100.0, 20


def serve(rate: float, burst: float) -> None:
    """The load runs' server, as a child: prints its URL; ``RESET`` / ``LOG`` on stdin."""
    with LimitedServer(rate, burst) as server:
        print(server.url, flush=True)
        for line in sys.stdin:
            if line.strip() == "RESET":
                server.reset()
                print("OK", flush=True)
            elif line.strip() == "LOG":
                with server._log_lock:
                    log = [[a.at, a.status] for a in server.log]
                print(json.dumps(log), flush=True)


@dataclass
class LoadRow:
    store: str
    tasks: int
    sent: int
    n429: int
    failures: int
    elapsed: float
    worst_100ms: int  # the most requests the server saw in any 100 ms once its bucket was spent
    outages: int  # the store's warnings that Redis failed (an outage, or load taken for one)

    def cells(self) -> list[str]:
        return [
            self.store,
            str(self.tasks),
            str(self.sent),
            str(self.n429),
            str(self.failures),
            f"{self.elapsed:.2f}",
            str(self.worst_100ms),
            str(self.outages),
        ]


LOAD_HEADER = ["store", "tasks", "sent", "429s", "fail", "time s", "worst 100 ms", "outages"]


class _Outages(logging.Handler):
    """Counts the pacing log's warnings that Redis failed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "failed" in record.getMessage():
            self.count += 1


def _ask(child: subprocess.Popen[str], command: str) -> str:
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write(command + "\n")
    child.stdin.flush()
    return child.stdout.readline()


async def _load(url: str, pacer: smoothclient.Pacer, tasks: int) -> tuple[int, float]:
    policy = smoothclient.RetryPolicy(attempts=ATTEMPTS, timeout=120)
    transport = smoothclient.AsyncSmoothTransport(policy=policy, pacer=pacer)
    failures = 0
    async with httpx.AsyncClient(transport=transport, timeout=60) as client:
        start = time.monotonic()

        async def one() -> None:
            nonlocal failures
            try:
                ok = (await client.get(url + "/work")).status_code == 200
            except Exception:
                ok = False
            failures += not ok

        await asyncio.gather(*(one() for _ in range(tasks)))
        return failures, time.monotonic() - start


def _worst_window(log: list[list[float]], width: float = 0.1) -> int:
    """The most arrivals in any ``width`` s after the first 429 (the bucket spent)."""
    first = next((at for at, status in log if status == 429), None)
    if first is None:
        return 0
    times = sorted(at for at, _ in log if at >= first)
    worst, lo = 0, 0
    for hi, at in enumerate(times):
        while times[lo] < at - width:
            lo += 1
        worst = max(worst, hi - lo + 1)
    return worst


def run_load(sizes: list[int], runs: int) -> list[LoadRow]:
    import redis

    from smoothclient.tools.redis_server import RedisServer

    rows: list[LoadRow] = []
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(LOAD_RATE), str(LOAD_BURST)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        with RedisServer() as server, redis.Redis.from_url(server.url) as admin:
            for _ in range(runs):
                for tasks in sizes:
                    for store in ("memory", "redis"):
                        admin.flushall()
                        _ask(child, "RESET")
                        storage = server.url if store == "redis" else "memory://"
                        pacer = smoothclient.Pacer(storage=storage)
                        outages = _Outages()
                        pacing_log = logging.getLogger("smoothclient.pacing")
                        pacing_log.addHandler(outages)
                        try:
                            failures, elapsed = asyncio.run(_load(url, pacer, tasks))
                        finally:
                            pacing_log.removeHandler(outages)
                        log = json.loads(_ask(child, "LOG"))
                        row = LoadRow(
                            store,
                            tasks,
                            len(log),
                            sum(1 for _, status in log if status == 429),
                            failures,
                            elapsed,
                            _worst_window(log),
                            outages.count,
                        )
                        rows.append(row)
                        print(" | ".join(row.cells()), flush=True)
    finally:
        child.kill()
        child.wait()
    return rows


def load_tables(rows: list[LoadRow]) -> str:
    lines = ["| " + " | ".join(LOAD_HEADER) + " |", "|" + "---|" * len(LOAD_HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    lines += ["", "Medians:", "", "| store | tasks | runs | 429s | sent | fail | worst 100 ms |"]
    lines.append("|" + "---|" * 7)
    groups: dict[tuple[str, int], list[LoadRow]] = {}
    for r in rows:
        groups.setdefault((r.store, r.tasks), []).append(r)
    for (store, tasks), group in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        med = [
            statistics.median(getattr(r, f) for r in group)
            for f in ("n429", "sent", "failures", "worst_100ms")
        ]
        n429 = sorted(r.n429 for r in group)
        lines.append(
            f"| {store} | {tasks} | {len(group)} | {med[0]:g} ({n429[0]}-{n429[-1]}) | "
            f"{med[1]:g} | {med[2]:g} | {med[3]:g} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--quick", action="store_true", help="only the first scenario")
    parser.add_argument("--load", help="issue 37's load runs: task counts, e.g. 500,1000")
    parser.add_argument("--runs", type=int, default=3, help="load runs of each cell")
    parser.add_argument("--serve", nargs=2, type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
    elif args.load:
        sizes = [int(n) for n in args.load.split(",")]
        print(load_tables(run_load(sizes, args.runs)))
    else:
        print(table(run_all(args.quick)))


if __name__ == "__main__":
    main()
