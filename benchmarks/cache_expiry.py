"""
Cache expiry benchmark: smoothclient's cache against plain cachetools, side by side.

1. Synchronized expiry (fake clock): 10,000 keys written at t=0 with ttl 60 s, each read every
   0.1 s from 50 s to 70 s; reloads per 0.1 s step (jitter 0.1 spreads expiries over 54-60 s).
2. Stampede on one expired key: 64 threads (and 64 asyncio tasks) at once, 50 ms loads;
   then the same with a failing upstream.
3. A hot key read by 20 threads (every 20 ms each) for 10 s with ttl 1 s and 0.1 s loads (real
   time): loads (about one per expiry is ideal) and read latency; slow reads waited on a load.

Run: python benchmarks/cache_expiry.py
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import cachetools

from smoothclient.cache import JitteredTTLCache, cached
from smoothclient.testing import FakeClock


def synchronized_expiry() -> list[list[str]]:
    rows = []
    for name in ("cachetools TTLCache", "JitteredTTLCache"):
        clock = FakeClock(0.0)
        if name.startswith("cachetools"):
            cache: Any = cachetools.TTLCache(20_000, 60, timer=clock)
            memo = cachetools.cached(cache)
        else:
            cache = JitteredTTLCache(20_000, 60, timer=clock, jitter=0.1)
            memo = cached(cache)
        reloads: Counter[float] = Counter()

        @memo
        def load(key: int) -> int:
            reloads[round(clock(), 1)] += 1
            return key

        for key in range(10_000):
            load(key)
        reloads.clear()
        clock.advance(50.0)
        while clock() < 70.0:
            clock.advance(0.1)
            for key in range(10_000):
                load(key)
        peak = max(reloads.values())
        window = [t for t in reloads if reloads[t]]
        span_steps = (max(window) - min(window)) / 0.1 + 1
        mean = sum(reloads.values()) / span_steps
        rows.append(
            [
                name,
                str(sum(reloads.values())),
                str(peak),
                f"{mean:.0f}",
                f"{peak / mean:.2f}x",
                f"{min(window):.1f}-{max(window):.1f} s",
            ]
        )
    return rows


def _threads(n: int, target: Callable[[], None]) -> float:
    threads = [threading.Thread(target=target) for _ in range(n)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - start


def stampede() -> list[list[str]]:
    rows = []
    for failing in (False, True):
        for name in ("cachetools lock=", "cachetools condition=", "smoothclient cached"):
            loads = 0
            errors = 0
            cache: Any = cachetools.TTLCache(10, 60)
            if name == "cachetools lock=":
                memo = cachetools.cached(cache, lock=threading.Lock())
            elif name == "cachetools condition=":
                memo = cachetools.cached(cache, condition=threading.Condition())
            else:
                memo = cached(JitteredTTLCache(10, 60))

            @memo
            def load(key: str) -> str:
                nonlocal loads
                loads += 1
                time.sleep(0.05)
                if failing:
                    raise ConnectionError("upstream down")
                return key

            def call() -> None:
                nonlocal errors
                try:
                    load("k")
                except ConnectionError:
                    errors += 1

            elapsed = _threads(64, call)
            label = "failing upstream" if failing else "healthy upstream"
            rows.append([f"64 threads, {label}", name, str(loads), str(errors), f"{elapsed:.2f}"])
    rows.append(_tasks())
    return rows


def _tasks() -> list[str]:
    loads = 0

    @cached(JitteredTTLCache(10, 60))
    async def load(key: str) -> str:
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.05)
        return key

    async def main() -> float:
        start = time.monotonic()
        await asyncio.gather(*(load("k") for _ in range(64)))
        return time.monotonic() - start

    elapsed = asyncio.run(main())
    return [
        "64 asyncio tasks, healthy upstream",
        "smoothclient cached",
        str(loads),
        "0",
        f"{elapsed:.2f}",
    ]


def hot_key() -> list[list[str]]:
    rows = []
    variants: list[tuple[str, Callable[[Callable[..., Any]], Any]]] = [
        (
            "cachetools condition=",
            cachetools.cached(cachetools.TTLCache(10, 1.0), condition=threading.Condition()),
        ),
        ("smoothclient, single-flight only", cached(JitteredTTLCache(10, 1.0, jitter=0.0))),
        (
            "smoothclient, stale-while-revalidate",
            cached(JitteredTTLCache(10, 1.0, jitter=0.0), stale_while_revalidate=1.0),
        ),
        (
            "smoothclient, early refresh",
            cached(JitteredTTLCache(10, 1.0, jitter=0.0), early_refresh=0.5),
        ),
    ]
    for name, memo in variants:
        loads = 0
        latencies: list[float] = []
        lock = threading.Lock()

        @memo
        def load(key: str) -> str:
            nonlocal loads
            loads += 1
            time.sleep(0.1)
            return key

        load("hot")
        stop = time.monotonic() + 10.0  # about 9 expiries of 1 s (+ 0.1 s load)

        def reader() -> None:
            while time.monotonic() < stop:
                start = time.perf_counter()
                load("hot")
                with lock:
                    latencies.append(time.perf_counter() - start)
                time.sleep(0.02)

        _threads(20, reader)
        latencies.sort()
        p99 = latencies[int(len(latencies) * 0.99)]
        slow = sum(1 for t in latencies if t >= 0.05)
        rows.append(
            [
                name,
                str(loads - 1),
                str(len(latencies)),
                str(slow),
                f"{statistics.median(latencies) * 1e3:.2f}",
                f"{p99 * 1e3:.1f}",
                f"{max(latencies) * 1e3:.1f}",
            ]
        )
    return rows


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main() -> None:
    print(
        table(
            [
                "cache",
                "reloads 50-70 s",
                "peak per 0.1 s",
                "mean per 0.1 s",
                "peak/mean",
                "reload span",
            ],
            synchronized_expiry(),
        )
    )
    print()
    print(table(["scenario", "memoizer", "loads", "errors raised", "seconds"], stampede()))
    print()
    header = [
        "hot key, 20 threads, 10 s",
        "loads",
        "reads",
        "reads >= 50 ms",
        "median ms",
        "p99 ms",
        "max ms",
    ]
    print(table(header, hot_key()))


if __name__ == "__main__":
    main()
