"""
smoothclient and its peers against real server-side rate limiters, on 127.0.0.1.

Servers (benchmarks/limiter_servers.py; each cell starts on a fresh limiter):

  nginx          nginx limit_req 10r/s burst 5 nodelay (a bucket of 6): bare 429s, no headers
  nginx-queue    the same without nodelay (nginx's default): up to 5 over the rate wait in
                 its queue and succeed late, the rest get bare 429s
  nginx-conn     nginx limit_conn 5, each request served in 100 ms (echo_sleep): a
                 concurrency limit, bare 429s for whatever comes while 5 are being served
  nginx-slow     nginx limit_req 10r/s burst 5 nodelay in front of an application that takes
                 30 ms (echo_sleep): a gateway's rate limit, its 429s at once, its successes slow
  nginx-noburst  nginx limit_req 10r/s with no burst (nginx's default): one request every
                 100 ms, any sooner refused; bare 429s
  fixed-window   slowapi (limits) fixed window 10/second, X-RateLimit-* + Retry-After
  moving-window  slowapi (limits) moving window 20/second, same headers
  fixed-window-3s  slowapi (limits) fixed window 30 per 3 seconds, same headers
  retry-after    nginx limit_req 5r/s burst 2 nodelay (a bucket of 3) + "Retry-After: 1" only
  haproxy        HAProxy stick table: 429 while over 10 requests in the last second, counting
                 the denied ones (knocking renews the penalty); bare 429s
  control-*      smoothclient's own LimitedServer 10/s burst 5, "ietf" and "github" styles
  express-*      express + express-rate-limit 10 per 1 s (MemoryStore: a fixed window from the
                 first hit, every hit counting; Retry-After on 429s), in one header mode:
                 draft-6 (RateLimit-Limit/-Remaining/-Reset + RateLimit-Policy), draft-7
                 (RateLimit: limit=, remaining=, reset=), draft-8 (RateLimit: "name"; r=; t=
                 + RateLimit-Policy), legacy (X-RateLimit-*, Reset in epoch seconds); opt-in

Scenarios: a herd (N GETs at once from one process: 60 on nginx, nginx-queue, nginx-conn,
nginx-slow, nginx-noburst, fixed-window and the controls, 100 on moving-window, 90 on
fixed-window-3s, 30 on retry-after; 60 on haproxy), and fleets of 3, 6 and 12 OS processes
(spawned, released together by a barrier, sharing nothing) of 20 GETs at once each: 3 and 6
against nginx, fixed-window and retry-after, 3 against nginx-noburst, 3, 6 and 12 against
nginx-conn, 12 against nginx and fixed-window.

Opt-in (not in the default run, nor --quick: about 25 more minutes at --lanes 1): the
express-rate-limit rows, "express <mode> 60" for each header mode, fleets 6x20 against
draft-6, draft-8 and legacy, 12x20 against draft-8.  --express adds them all; an --only
substring that names them ("express", "express draft-8", "express legacy fleet") adds the
ones it matches.  They need node and npm (benchmarks/express: package.json pins express and
express-rate-limit, installed by "npm ci" on first use); without them they are skipped.

Clients (one GET per call, retrying 429/503 until it succeeds, at most 50 attempts, waits
capped at 30 s, 60 s request timeouts):

  smoothclient httpx    AsyncSmoothTransport (SmoothTransport in threads on retry-after)
  smoothclient httpx2   the same on httpx2 (smoothclient.httpx2's transports, httpx2's clients)
  smoothclient adapter  SmoothAdapter on a requests Session, one thread per call
  smoothclient aiohttp  SmoothMiddleware on an aiohttp session (async on every server)
  httpx-retries         RetryTransport, Retry(backoff_factor=0.5), honours Retry-After
  tenacity              wait_random_exponential(0.5, max 30), ignores Retry-After
  stamina               retry_context, waits Retry-After when sent (herd.py's hook)
  backoff               on_predicate(expo, factor 0.5, full jitter), ignores Retry-After
  urllib3 Retry         requests + Retry(backoff_factor=0.5), one thread per call

The httpx clients are async on every server but retry-after, where everything runs in
threads (sync httpx clients, one thread per call).

Per cell: wall time until every call succeeded, requests the server saw, its 429s,
failures.  "ideal" is the drain time the limiter allows (see limiter_servers.Limit.ideal):
a bucket of B at once refilled at R/s: (calls - B) / R; a window of L per W (fixed or
moving): (ceil(calls / L) - 1) * W; N at a time, each served in S: ceil(calls / N) * S.
"extra/call" = max(0, 429s - (calls - B or L or N)) / calls: 429s beyond the unavoidable
first wave.  Each cell runs --runs times (default 3); the table shows the median of each
column separately and the range of the times; "sent" also shows the most one run sent when
that is over twice the median (a storm in one run of three hides in a median).

To fit ~12 minutes on 2 cores, cells run in parallel lanes (--lanes, default 6: separate
processes, each starting its own servers, so its own limiters; the clients mostly sleep,
and the control cells match the serial herd.py numbers): --lanes 1 runs one cell at a time
(about 45 minutes).  Each run starts on a fresh limiter (nginx is restarted; the Python
servers reset in place, or restart on a new port after a run that left threads behind).
Fleets run the two smoothclient clients each alone and sharing one pacer through Redis
("+redis": a redis-server the lane starts, flushed before every run), tenacity and urllib3
Retry (--fleet-clients, "all" for every one).  Every loop is
bounded: a run stops at 4x its ideal time + 15 s (at most --cell-timeout), its unfinished
calls count as failures, its time shows "(stopped)", and that cell is not run again.

Run: python benchmarks/limiters.py [--quick] [--only SUBSTRING ...] [--runs N] [--lanes N]
     [--express]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import requests

import smoothclient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from limiter_servers import (
    EXPRESS_MODES,
    Limit,
    Running,
    Skip,
    express_rate_limit,
    haproxy_stick_table,
    limited_server,
    nginx_limit_conn,
    nginx_limit_req,
    probe,
    slowapi_server,
)

ATTEMPTS = 50
WAIT_CAP = 30.0
REQUEST_TIMEOUT = 60.0
CALL_DEADLINE = 120.0
RETRY_ON = frozenset({429, 503})
FLEET_CALLS = 20

CLIENTS = (
    "smoothclient httpx",
    "smoothclient httpx2",
    "smoothclient adapter",
    "smoothclient aiohttp",
    "httpx-retries",
    "tenacity",
    "stamina",
    "backoff",
    "urllib3 Retry",
)
#: Fleets only: the processes share one pacer through a redis-server the lane starts.
SHARED_CLIENTS = ("smoothclient httpx +redis", "smoothclient adapter +redis")
REQUESTS_CLIENTS = frozenset(
    {"smoothclient adapter", "smoothclient adapter +redis", "urllib3 Retry"}
)
FLEET_CLIENTS_DEFAULT = (
    "smoothclient httpx",
    "smoothclient adapter",
    *SHARED_CLIENTS,
    "tenacity",
    "urllib3 Retry",
)
ALL_CLIENTS = (*CLIENTS, *SHARED_CLIENTS)
#: Where the lane's redis-server listens (set by the lane for its cells' processes).
REDIS_ENV = "SMOOTHCLIENT_BENCH_REDIS"

# ---------------------------------------------------------------- servers and scenarios

SERVERS: dict[str, tuple[Callable[[], contextlib.AbstractContextManager[Running]], str]] = {
    # name: (factory, how the httpx clients run: "async" or "threads")
    "nginx": (lambda: nginx_limit_req(10, 5, name="nginx"), "async"),
    "nginx-queue": (lambda: nginx_limit_req(10, 5, name="nginx-queue", queue=True), "async"),
    "nginx-conn": (lambda: nginx_limit_conn(5, 0.1, name="nginx-conn"), "async"),
    "nginx-noburst": (lambda: nginx_limit_req(10, 0, name="nginx-noburst"), "async"),
    "nginx-slow": (lambda: nginx_limit_req(10, 5, name="nginx-slow", service=0.03), "async"),
    "fixed-window": (lambda: slowapi_server("fixed-window", 10, 1), "async"),
    "moving-window": (lambda: slowapi_server("moving-window", 20, 1), "async"),
    "fixed-window-3s": (lambda: slowapi_server("fixed-window", 30, 3), "async"),
    "retry-after": (lambda: nginx_limit_req(5, 2, retry_after=1, name="retry-after"), "threads"),
    "haproxy": (lambda: haproxy_stick_table(10, 1), "async"),
    "control-ietf": (lambda: limited_server("ietf", 10, 5), "async"),
    "control-github": (lambda: limited_server("github", 10, 5), "async"),
    **{
        f"express-{m}": ((lambda m=m: express_rate_limit(m, 10, 1)), "async")  # type: ignore[misc]
        for m in EXPRESS_MODES
    },
}


@dataclass(frozen=True)
class Scenario:
    name: str
    server: str
    calls: int  # per process
    procs: int = 1
    opt_in: bool = False  # only with --express or an --only substring naming it

    @property
    def total(self) -> int:
        return self.calls * self.procs


SCENARIOS = [
    Scenario("nginx 60", "nginx", 60),
    Scenario("nginx queue 60", "nginx-queue", 60),
    Scenario("nginx conn 60", "nginx-conn", 60),
    Scenario("nginx slow 60", "nginx-slow", 60),
    Scenario("nginx no-burst 60", "nginx-noburst", 60),
    Scenario("fixed-window 60", "fixed-window", 60),
    Scenario("moving-window 100", "moving-window", 100),
    Scenario("fixed-window 3s 90", "fixed-window-3s", 90),
    Scenario("retry-after 30", "retry-after", 30),
    Scenario("haproxy 60", "haproxy", 60),
    Scenario("control-ietf 60", "control-ietf", 60),
    Scenario("control-github 60", "control-github", 60),
    Scenario("nginx fleet 3x20", "nginx", FLEET_CALLS, 3),
    Scenario("nginx fleet 6x20", "nginx", FLEET_CALLS, 6),
    Scenario("nginx fleet 12x20", "nginx", FLEET_CALLS, 12),
    Scenario("nginx no-burst fleet 3x20", "nginx-noburst", FLEET_CALLS, 3),
    Scenario("nginx conn fleet 3x20", "nginx-conn", FLEET_CALLS, 3),
    Scenario("nginx conn fleet 6x20", "nginx-conn", FLEET_CALLS, 6),
    Scenario("nginx conn fleet 12x20", "nginx-conn", FLEET_CALLS, 12),
    Scenario("fixed-window fleet 3x20", "fixed-window", FLEET_CALLS, 3),
    Scenario("fixed-window fleet 6x20", "fixed-window", FLEET_CALLS, 6),
    Scenario("fixed-window fleet 12x20", "fixed-window", FLEET_CALLS, 12),
    Scenario("retry-after fleet 3x20", "retry-after", FLEET_CALLS, 3),
    Scenario("retry-after fleet 6x20", "retry-after", FLEET_CALLS, 6),
    *(Scenario(f"express {m} 60", f"express-{m}", 60, opt_in=True) for m in EXPRESS_MODES),
    *(
        Scenario(f"express {m} fleet 6x20", f"express-{m}", FLEET_CALLS, 6, opt_in=True)
        for m in ("draft-6", "draft-8", "legacy")
    ),
    Scenario("express draft-8 fleet 12x20", "express-draft-8", FLEET_CALLS, 12, opt_in=True),
]
QUICK = ("nginx 60", "fixed-window 60", "retry-after 30", "control-ietf 60", "nginx fleet 3x20")

# ---------------------------------------------------------------- clients (one GET each)


class Throttled(Exception):
    def __init__(self, status: int, retry_after: str | None) -> None:
        super().__init__(status)
        self.status = status
        self.retry_after = retry_after


def _retry_after_hook(exc: Exception) -> bool | float:
    if isinstance(exc, Throttled):
        return float(exc.retry_after) if exc.retry_after else True
    return False


def _quiet_stamina() -> None:
    import stamina.instrumentation

    stamina.instrumentation.set_on_retry_hooks([])  # keep its log lines out of the output


def _smooth_policy() -> smoothclient.RetryPolicy:
    return smoothclient.RetryPolicy(attempts=ATTEMPTS, timeout=CALL_DEADLINE)


def _httpx_retry() -> Any:
    from httpx_retries import Retry

    return Retry(
        total=ATTEMPTS,
        backoff_factor=0.5,
        status_forcelist=sorted(RETRY_ON),
        max_backoff_wait=WAIT_CAP,
    )


def _last_result(state: Any) -> Any:
    """tenacity: when the attempts run out, return the last response instead of raising."""
    return state.outcome.result()


# async


async def _plain_get(client: httpx.AsyncClient, url: str) -> int:
    return (await client.get(url)).status_code


def _tenacity_setup() -> dict[str, Any]:
    """tenacity's arguments, the same for the sync and the async runs."""
    import tenacity

    return {
        "wait": tenacity.wait_random_exponential(multiplier=0.5, max=WAIT_CAP),
        "stop": tenacity.stop_after_attempt(ATTEMPTS),
        "retry": tenacity.retry_if_result(lambda r: r.status_code in RETRY_ON),
        "retry_error_callback": _last_result,
    }


def _backoff_on_status() -> Callable[[Any], Any]:
    """backoff's decorator, the same for the sync and the async runs."""
    import backoff

    return backoff.on_predicate(
        backoff.expo,
        lambda r: r.status_code in RETRY_ON,
        max_tries=ATTEMPTS,
        jitter=backoff.full_jitter,
        factor=0.5,
        max_value=WAIT_CAP,
        logger=None,
    )


async def _tenacity_get(client: httpx.AsyncClient, url: str) -> int:
    import tenacity

    retrying = tenacity.AsyncRetrying(**_tenacity_setup())
    response: httpx.Response = await retrying(client.get, url)
    return response.status_code


async def _stamina_get(client: httpx.AsyncClient, url: str) -> int:
    import stamina

    try:
        async for attempt in stamina.retry_context(
            on=_retry_after_hook, attempts=ATTEMPTS, timeout=CALL_DEADLINE
        ):
            with attempt:
                response = await client.get(url)
                if response.status_code in RETRY_ON:
                    raise Throttled(response.status_code, response.headers.get("retry-after"))
                return response.status_code
    except Throttled as exc:
        return exc.status
    return 0  # pragma: no cover


async def _backoff_get(client: httpx.AsyncClient, url: str) -> int:
    @_backoff_on_status()
    async def call() -> httpx.Response:
        return await client.get(url)

    return (await call()).status_code


def _pacer(name: str) -> smoothclient.Pacer | None:
    """The shared pacer of a ``+redis`` client; ``None``: the edge's own."""
    if not name.endswith("+redis"):
        return None
    return smoothclient.Pacer(storage=os.environ[REDIS_ENV])


def _library(name: str) -> Any:
    """The httpx library a client sends with: httpx2 for "smoothclient httpx2", else httpx."""
    if name == "smoothclient httpx2":
        import httpx2

        return httpx2
    return httpx


def _async_client(name: str, calls: int) -> tuple[httpx.AsyncBaseTransport, Any]:
    if name == "smoothclient httpx2":
        import httpx2

        from smoothclient.httpx2 import AsyncSmoothTransport

        limits2 = httpx2.Limits(max_connections=calls, max_keepalive_connections=calls)
        inner2 = httpx2.AsyncHTTPTransport(limits=limits2)
        made = AsyncSmoothTransport(inner2, policy=_smooth_policy())
        return made, _plain_get  # type: ignore[return-value]
    limits = httpx.Limits(max_connections=calls, max_keepalive_connections=calls)
    inner = httpx.AsyncHTTPTransport(limits=limits)
    if name.startswith("smoothclient httpx"):
        transport = smoothclient.AsyncSmoothTransport(
            inner, policy=_smooth_policy(), pacer=_pacer(name)
        )
        return transport, _plain_get
    if name == "httpx-retries":
        from httpx_retries import RetryTransport

        return RetryTransport(inner, retry=_httpx_retry()), _plain_get
    gets = {"tenacity": _tenacity_get, "stamina": _stamina_get, "backoff": _backoff_get}
    return inner, gets[name]


async def _run_async(name: str, url: str, calls: int, timeout: float) -> tuple[int, float, float]:
    transport, get = _async_client(name, calls)
    ok = 0
    async with _library(name).AsyncClient(
        transport=transport, base_url=url, timeout=REQUEST_TIMEOUT
    ) as client:
        start = time.monotonic()

        async def one() -> None:
            nonlocal ok
            try:
                if await get(client, "/work") == 200:
                    ok += 1
            except Exception:
                pass

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(one() for _ in range(calls))), timeout)
        return calls - ok, start, time.monotonic()


# sync (threads)


def _sync_httpx_get(name: str, calls: int) -> tuple[httpx.Client, Callable[[httpx.Client], int]]:
    lib = _library(name)
    limits = lib.Limits(max_connections=calls, max_keepalive_connections=calls)
    inner = lib.HTTPTransport(limits=limits)
    if name == "smoothclient httpx2":
        from smoothclient.httpx2 import SmoothTransport

        transport: httpx.BaseTransport = SmoothTransport(inner, policy=_smooth_policy())  # type: ignore[assignment]
    elif name.startswith("smoothclient httpx"):
        transport = smoothclient.SmoothTransport(inner, policy=_smooth_policy(), pacer=_pacer(name))
    elif name == "httpx-retries":
        from httpx_retries import RetryTransport

        transport = RetryTransport(inner, retry=_httpx_retry())
    else:
        transport = inner
    client = lib.Client(transport=transport, timeout=REQUEST_TIMEOUT)

    def plain(c: httpx.Client) -> int:
        return c.get("/work").status_code

    def with_tenacity(c: httpx.Client) -> int:
        import tenacity

        return tenacity.Retrying(**_tenacity_setup())(c.get, "/work").status_code

    def with_stamina(c: httpx.Client) -> int:
        import stamina

        try:
            for attempt in stamina.retry_context(
                on=_retry_after_hook, attempts=ATTEMPTS, timeout=CALL_DEADLINE
            ):
                with attempt:
                    response = c.get("/work")
                    if response.status_code in RETRY_ON:
                        raise Throttled(response.status_code, response.headers.get("retry-after"))
                    return response.status_code
        except Throttled as exc:
            return exc.status
        return 0  # pragma: no cover

    def with_backoff(c: httpx.Client) -> int:
        @_backoff_on_status()
        def call() -> httpx.Response:
            return c.get("/work")

        return call().status_code

    gets = {"tenacity": with_tenacity, "stamina": with_stamina, "backoff": with_backoff}
    return client, gets.get(name, plain)


def _requests_session(name: str, calls: int) -> requests.Session:
    from requests.adapters import HTTPAdapter
    from urllib3.util import Retry

    session = requests.Session()
    if name.startswith("smoothclient adapter"):
        adapter: HTTPAdapter = smoothclient.SmoothAdapter(
            policy=_smooth_policy(), pacer=_pacer(name), pool_connections=1, pool_maxsize=calls
        )
    else:
        retry = Retry(
            total=ATTEMPTS,
            backoff_factor=0.5,
            backoff_max=WAIT_CAP,
            status_forcelist=sorted(RETRY_ON),
        )
        adapter = HTTPAdapter(max_retries=retry, pool_connections=1, pool_maxsize=calls)
    session.mount("http://", adapter)
    return session


def _run_threads(name: str, url: str, calls: int, timeout: float) -> tuple[int, float, float]:
    if name in REQUESTS_CLIENTS:
        session = _requests_session(name, calls)

        def get() -> int:
            return session.get(url + "/work", timeout=REQUEST_TIMEOUT).status_code

        close: Callable[[], None] = session.close
    else:
        client, sync_get = _sync_httpx_get(name, calls)
        client.base_url = url

        def get() -> int:
            return sync_get(client)

        close = client.close
    ok = 0
    lock = threading.Lock()

    def one() -> None:
        nonlocal ok
        try:
            good = get() == 200
        except Exception:
            good = False
        if good:
            with lock:
                ok += 1

    threads = [threading.Thread(target=one, daemon=True) for _ in range(calls)]
    start = time.monotonic()
    for t in threads:
        t.start()
    deadline = start + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    end = time.monotonic()
    if not any(t.is_alive() for t in threads):
        close()  # else leave it to the daemon threads still running (they are bounded)
    with lock:
        return calls - ok, start, end


async def _run_aiohttp(name: str, url: str, calls: int, timeout: float) -> tuple[int, float, float]:
    """``calls`` GETs at once through an aiohttp session with the smoothclient middleware."""
    import aiohttp

    from smoothclient.aiohttp import SmoothMiddleware

    edge = SmoothMiddleware(policy=_smooth_policy(), pacer=_pacer(name))
    ok = 0
    async with aiohttp.ClientSession(
        middlewares=(edge,),
        connector=aiohttp.TCPConnector(limit=calls),
        timeout=aiohttp.ClientTimeout(sock_connect=REQUEST_TIMEOUT, sock_read=REQUEST_TIMEOUT),
    ) as session:
        start = time.monotonic()

        async def one() -> None:
            nonlocal ok
            try:
                async with session.get(url + "/work") as response:
                    await response.read()
                    ok += response.status == 200
            except Exception:
                pass

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(one() for _ in range(calls))), timeout)
        return calls - ok, start, time.monotonic()


def run_client(
    name: str, mode: str, url: str, calls: int, timeout: float
) -> tuple[int, float, float]:
    """Fire ``calls`` GETs at once; ``(failures, start, end)`` on the monotonic clock."""
    if name.startswith("smoothclient aiohttp"):  # asyncio only: async on every server
        return asyncio.run(_run_aiohttp(name, url, calls, timeout))
    if name in REQUESTS_CLIENTS or mode == "threads":
        return _run_threads(name, url, calls, timeout)
    return asyncio.run(_run_async(name, url, calls, timeout))


def _preload(name: str) -> None:
    """Import everything a client needs, so a fleet's processes start on equal terms."""
    import backoff  # noqa: F401
    import httpx_retries  # noqa: F401
    import stamina  # noqa: F401
    import tenacity  # noqa: F401
    import urllib3.util  # noqa: F401

    _quiet_stamina()
    _ = smoothclient.AsyncSmoothTransport, smoothclient.SmoothTransport, smoothclient.SmoothAdapter
    from smoothclient import aiohttp as _aiohttp_edge  # noqa: F401

    if name.endswith("+redis"):  # the shared pacer's client library (imported by its store)
        import redis.asyncio
        import redis.asyncio.connection
        import redis.asyncio.retry
        import redis.backoff
        import redis.connection
        import redis.retry  # noqa: F401
    elif name in REQUESTS_CLIENTS:
        _requests_session(name, 1).close()


# ---------------------------------------------------------------- fleets


def _fleet_child(
    name: str, mode: str, url: str, calls: int, timeout: float, barrier: Any, queue: Any
) -> None:
    try:
        logs = os.environ.get("LIMITERS_LOG")
        if logs:  # the process's debug log, for looking at how a fleet paced
            logging.basicConfig(
                filename=str(Path(logs, f"{os.getpid()}.log")),
                level=logging.DEBUG,
                format="%(created).3f %(process)d %(name)s %(message)s",
            )
        _preload(name)
        barrier.wait(120)
        queue.put(run_client(name, mode, url, calls, timeout))
    except Exception as exc:  # reported as all calls failed
        print(f"fleet process failed: {exc!r}", file=sys.stderr, flush=True)
        now = time.monotonic()
        queue.put((calls, now, now))


def spawn_fleet(
    child: Callable[..., None], args: tuple[Any, ...], procs: int, wait: float
) -> list[Any]:
    """
    Run ``child(*args, barrier, queue)`` in ``procs`` spawned processes; what each put.

    Each child does its start-up, waits at the barrier (so the fleet starts together) and
    puts one result on the queue.  Results not put within ``wait`` seconds are missing; a
    process still alive then is terminated.
    """
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    queue = ctx.Queue()
    workers = [ctx.Process(target=child, args=(*args, barrier, queue)) for _ in range(procs)]
    for w in workers:
        w.start()
    results = []
    give_up = time.monotonic() + wait
    for _ in range(procs):
        try:
            results.append(queue.get(timeout=max(1.0, give_up - time.monotonic())))
        except Exception:
            break
    for w in workers:
        w.join(10)
        if w.is_alive():
            w.terminate()
            w.join(5)
    return results


def run_fleet(
    name: str, mode: str, url: str, procs: int, calls: int, timeout: float
) -> tuple[int, float, float]:
    args = (name, mode, url, calls, timeout)
    # (start-up, the barrier, then the cell itself)
    results = spawn_fleet(_fleet_child, args, procs, timeout + 150)
    failures = sum(r[0] for r in results) + calls * (procs - len(results))
    if not results:
        return failures, 0.0, timeout
    return failures, min(r[1] for r in results), max(r[2] for r in results)


# ---------------------------------------------------------------- measuring


@dataclass
class Run:
    scenario: str
    server: str
    client: str
    mode: str
    calls: int
    free: int
    sent: int
    n429: int
    failures: int
    elapsed: float
    ideal: float
    rep: int
    timed_out: bool = False


def cell_timeout(ideal: float, cap: float) -> float:
    """A cell may take 4x its ideal time plus 15 s (at most ``cap``) before it is stopped."""
    return min(cap, 4 * ideal + 15)


def measure(
    sc: Scenario, client: str, server: Running, mode: str, rep: int, cap: float, hard: bool
) -> Run:
    server.reset(hard=hard)
    if client.endswith("+redis"):  # a fresh shared state for every run
        import redis

        redis.Redis.from_url(os.environ[REDIS_ENV]).flushall()
    timeout = cell_timeout(server.limit.ideal(sc.total), cap)
    if sc.procs == 1:
        failures, start, end = run_client(client, mode, server.url, sc.calls, timeout)
    else:
        failures, start, end = run_fleet(client, mode, server.url, sc.procs, sc.calls, timeout)
    timed_out = end - start >= timeout - 0.05
    time.sleep(0.2)  # let the last log lines land
    arrivals = server.arrivals()
    counts = Counter(status for _, status in arrivals)
    trace = os.environ.get("LIMITERS_TRACE")
    if trace:  # every arrival, for looking at how a client paced
        began = time.time() - (time.monotonic() - start)  # the cell's start, epoch seconds
        name = f"{sc.name}-{client}-{rep}".replace(" ", "_")
        Path(trace, name + ".json").write_text(
            json.dumps({"began": began, "elapsed": end - start, "arrivals": arrivals})
        )
    shown_mode = "threads" if client in REQUESTS_CLIENTS else mode
    if client.startswith("smoothclient aiohttp"):
        shown_mode = "async"
    return Run(
        sc.name,
        sc.server,
        client,
        shown_mode,
        sc.total,
        server.limit.free,
        sum(counts.values()),
        counts.get(429, 0),
        failures,
        end - start,
        server.limit.ideal(sc.total),
        rep,
        timed_out,
    )


def plan(
    only: list[str], quick: bool, fleet_clients: tuple[str, ...], express: bool = False
) -> list[tuple[Scenario, tuple[str, ...]]]:
    chosen = []
    for sc in SCENARIOS:
        named = any(o.lower() in sc.name.lower() for o in only)
        if sc.opt_in and not (express or named):
            continue
        if quick and sc.name not in QUICK and not sc.opt_in:
            continue
        clients = (
            tuple(c for c in CLIENTS if c not in SHARED_CLIENTS) if sc.procs == 1 else fleet_clients
        )
        picked = tuple(
            c
            for c in clients
            if all(o.lower() in sc.name.lower() or o.lower() in c.lower() for o in only)
        )
        if picked:
            chosen.append((sc, picked))
    return chosen


def run_lane(
    work: list[tuple[Scenario, tuple[str, ...]]],
    runs: int,
    timeout: float,
    emit: Callable[[Run], None],
    ready: Callable[[], None] = lambda: None,
) -> None:
    """
    Run every cell of ``work`` (one server family each time) ``runs`` times.

    ``ready`` is called once, when the first server is up and checked, before the first cell
    (lanes use it to start their cells together, after everyone's start-up work).
    """
    _quiet_stamina()
    _preload("")
    pending = [ready]
    shared = None
    if any(c.endswith("+redis") for _, clients in work for c in clients):
        from smoothclient.tools.redis_server import RedisServer

        shared = RedisServer().start()
        os.environ[REDIS_ENV] = shared.url  # the fleet's processes inherit it

    def go() -> None:
        while pending:
            pending.pop()()

    merged: dict[Scenario, tuple[str, ...]] = {}
    for sc, clients in work:
        merged[sc] = merged.get(sc, ()) + tuple(c for c in clients if c not in merged.get(sc, ()))
    by_server: dict[str, list[tuple[Scenario, tuple[str, ...]]]] = {}
    for sc, clients in merged.items():
        by_server.setdefault(sc.server, []).append((sc, clients))
    for server_name, cells in by_server.items():
        factory, mode = SERVERS[server_name]
        try:
            with factory() as server:
                check = probe(server, at_once=True)
                if 429 not in check["statuses"]:
                    print(f"{server_name}: no 429 in a burst: {check['statuses']}", file=sys.stderr)
                    continue
                go()
                stalled: set[tuple[str, str]] = set()  # cells that timed out: not repeated
                hard = False
                for rep in range(runs):
                    for sc, clients in cells:
                        shift = rep % len(clients)  # rotate the order between repeats
                        for client in clients[shift:] + clients[:shift]:
                            if (sc.name, client) in stalled:
                                continue
                            run = measure(sc, client, server, mode, rep, timeout, hard)
                            emit(run)
                            # threads that outlived their cell may still be sending: the next
                            # cell gets a server on a new port
                            hard = run.timed_out
                            if run.timed_out:
                                stalled.add((sc.name, client))
        except Skip as exc:
            print(f"{server_name}: skipped: {exc}", file=sys.stderr, flush=True)
    go()
    if shared is not None:
        shared.stop()


# the limits the servers above enforce (checked at run time: Running.limit), for planning only
PLANNED = {
    "nginx": Limit("bucket", 6, rate=10),
    "nginx-queue": Limit("bucket", 6, rate=10),
    "nginx-conn": Limit("concurrency", 5, window=0.1),
    "nginx-slow": Limit("bucket", 6, rate=10),
    "nginx-noburst": Limit("bucket", 1, rate=10),
    "fixed-window": Limit("fixed-window", 10, window=1),
    "moving-window": Limit("moving-window", 20, window=1),
    "fixed-window-3s": Limit("fixed-window", 30, window=3),
    "retry-after": Limit("bucket", 3, rate=5),
    "haproxy": Limit("moving-window", 10, window=1),
    "control-ietf": Limit("bucket", 5, rate=10),
    "control-github": Limit("bucket", 5, rate=10),
    **{f"express-{m}": Limit("fixed-window", 10, window=1) for m in EXPRESS_MODES},
}


def estimate(sc: Scenario, client: str, runs: int) -> float:
    """Rough seconds a cell takes, all its runs (for spreading the work over lanes)."""
    ideal = PLANNED[sc.server].ideal(sc.total)
    if client == "urllib3 Retry" and sc.server == "nginx":  # no jitter: lockstep, times out
        return cell_timeout(ideal, 150)
    return runs * (2.0 * ideal + (3.0 if sc.procs > 1 else 0.7))


# ---------------------------------------------------------------- reporting


HEADER = [
    "scenario",
    "client",
    "mode",
    "calls",
    "sent",
    "429s",
    "extra/call",
    "time s",
    "time range",
    "ideal s",
    "vs ideal",
    "fail",
]


def summarize(runs: list[Run]) -> list[list[str]]:
    cells: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        cells.setdefault((r.scenario, r.client), []).append(r)
    order = {sc.name: i for i, sc in enumerate(SCENARIOS)}
    rows = []
    for (scenario, client), rs in sorted(
        cells.items(), key=lambda kv: (order.get(kv[0][0], 99), ALL_CLIENTS.index(kv[0][1]))
    ):
        first = rs[0]
        med = statistics.median
        n429 = med(r.n429 for r in rs)
        extra = med(max(0, r.n429 - (r.calls - r.free)) / r.calls for r in rs)
        elapsed = med(r.elapsed for r in rs)
        times = sorted(r.elapsed for r in rs)
        capped = " (stopped)" if any(r.timed_out for r in rs) else ""
        rows.append(
            [
                scenario,
                client,
                first.mode,
                str(first.calls),
                _sent(rs),
                f"{n429:g}",
                f"{extra:.2f}",
                f"{elapsed:.2f}{capped}",
                f"{times[0]:.2f}-{times[-1]:.2f}" if len(times) > 1 else f"{len(rs)} run",
                f"{first.ideal:.2f}",
                f"{elapsed / first.ideal:.2f}x" if first.ideal else "-",
                f"{med(r.failures for r in rs):g}",
            ]
        )
    return rows


def _sent(rs: list[Run]) -> str:
    """The median of the requests sent, and the most when over twice it (a storm in a run)."""
    typical, most = statistics.median(r.sent for r in rs), max(r.sent for r in rs)
    return f"{typical:g} (max {most:g})" if most > 2 * typical else f"{typical:g}"


def table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _progress(r: Run) -> None:
    print(
        f"  {r.scenario} / {r.client} #{r.rep + 1}: {r.elapsed:.2f}s (ideal {r.ideal:.2f}), "
        f"sent {r.sent}, 429s {r.n429}, fail {r.failures}"
        + (" (stopped at the cell timeout)" if r.timed_out else ""),
        file=sys.stderr,
        flush=True,
    )


def run_lanes(work: list[tuple[Scenario, tuple[str, ...]]], args: argparse.Namespace) -> list[Run]:
    """
    Spread the cells over ``args.lanes`` child processes and collect their runs.

    Each lane starts its own servers (so its own limiters) for the cells it was given; cells
    go to the least loaded lane, longest first.
    """
    cells = [(sc, client) for sc, clients in work for client in clients]
    lanes: list[list[tuple[Scenario, str]]] = [[] for _ in range(min(args.lanes, len(cells)))]
    load = [0.0] * len(lanes)
    for sc, client in sorted(cells, key=lambda c: -estimate(c[0], c[1], args.runs)):
        i = load.index(min(load))
        lanes[i].append((sc, client))
        load[i] += estimate(sc, client, args.runs)
    print(
        f"{len(lanes)} lanes, estimated " + ", ".join(f"{w:.0f}s" for w in load),
        file=sys.stderr,
        flush=True,
    )
    procs = []
    for lane in lanes:
        payload = json.dumps([[asdict(sc), [client]] for sc, client in lane])
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--lane-work",
                    payload,
                    "--runs",
                    str(args.runs),
                    "--cell-timeout",
                    str(args.cell_timeout),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    runs: list[Run] = []
    lock = threading.Lock()
    ready = threading.Semaphore(0)

    def collect(proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("RUN "):
                with lock:
                    runs.append(Run(**json.loads(line[4:])))
            elif line.strip() == "READY":
                ready.release()
            else:
                print(line, end="", file=sys.stderr, flush=True)

    readers = [threading.Thread(target=collect, args=(p,), daemon=True) for p in procs]
    for t in readers:
        t.start()
    # start every lane's cells together, once all lanes have imported and started a server
    start_by = time.monotonic() + 180
    for _ in procs:
        ready.acquire(timeout=max(0.0, start_by - time.monotonic()))
    for p in procs:
        with contextlib.suppress(OSError, ValueError):
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()
    hard_stop = time.monotonic() + args.hard_timeout
    for p, t in zip(procs, readers, strict=True):
        try:
            p.wait(max(1.0, hard_stop - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"lane {p.pid} over --hard-timeout: stopped", file=sys.stderr)
            p.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
            if p.poll() is None:
                p.kill()
        t.join(10)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--quick", action="store_true", help="1 run each, fewer scenarios")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="SUBSTRING",
        help="keep cells whose scenario or client contains it (repeat: all must match)",
    )
    parser.add_argument(
        "--express",
        action="store_true",
        help="add the express-rate-limit rows (opt-in; node and npm needed)",
    )
    parser.add_argument("--runs", type=int, default=None, help="runs per cell (default 3)")
    parser.add_argument(
        "--lanes", type=int, default=6, help="cells run in this many processes at once"
    )
    parser.add_argument(
        "--fleet-clients",
        default=",".join(FLEET_CLIENTS_DEFAULT),
        help='comma-separated clients for the fleet scenarios, or "all"',
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=150.0,
        help="cap on a cell's time (s); each cell also stops at 4x its ideal + 15 s",
    )
    parser.add_argument("--hard-timeout", type=float, default=1800.0, help="whole run cap (s)")
    parser.add_argument("--json", metavar="FILE", help="also write every run to FILE")
    parser.add_argument(
        "--trace", metavar="DIR", help="write each run's server-side arrivals to DIR/*.json"
    )
    parser.add_argument(
        "--log", metavar="DIR", help="write each fleet process's debug log to DIR/<pid>.log"
    )
    parser.add_argument("--lane-work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    runs_per_cell = args.runs if args.runs is not None else (1 if args.quick else 3)
    args.runs = max(1, min(runs_per_cell, 20))

    if args.lane_work is not None:  # a lane child: run, print RUN lines
        work = [(Scenario(**sc), tuple(c)) for sc, c in json.loads(args.lane_work)]

        def emit(r: Run) -> None:
            _progress(r)
            print("RUN " + json.dumps(asdict(r)), flush=True)

        def ready() -> None:  # tell the parent, wait for its go (at most 3 minutes)
            print("READY", flush=True)
            box: list[str] = []
            waiter = threading.Thread(target=lambda: box.append(sys.stdin.readline()), daemon=True)
            waiter.start()
            waiter.join(180)

        run_lane(work, args.runs, args.cell_timeout, emit, ready)
        return

    fleet = ALL_CLIENTS if args.fleet_clients == "all" else tuple(args.fleet_clients.split(","))
    unknown = set(fleet) - set(ALL_CLIENTS)
    if unknown:
        parser.error(
            f"unknown fleet clients {sorted(unknown)}; choose from {', '.join(ALL_CLIENTS)}"
        )
    if args.trace:
        Path(args.trace).mkdir(parents=True, exist_ok=True)
        os.environ["LIMITERS_TRACE"] = str(Path(args.trace).resolve())
    if args.log:
        Path(args.log).mkdir(parents=True, exist_ok=True)
        os.environ["LIMITERS_LOG"] = str(Path(args.log).resolve())
    work = plan(args.only, args.quick, fleet, args.express)
    if not work:
        parser.error("no scenario/client matches --only")
    started = time.monotonic()
    print(
        f"smoothclient {smoothclient.__version__} from {Path(smoothclient.__file__).parent}; "
        f"{sum(len(c) for _, c in work)} cells x {args.runs} runs",
        file=sys.stderr,
        flush=True,
    )
    if args.lanes <= 1:
        runs: list[Run] = []

        def keep(r: Run) -> None:
            _progress(r)
            runs.append(r)

        run_lane(work, args.runs, args.cell_timeout, keep)
    else:
        runs = run_lanes(work, args)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in runs], indent=1))
    print(f"done in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    print(table(summarize(runs)))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
