"""A batch of 200 jobs spread over 2 seconds instead of fired at once."""

from __future__ import annotations

import time
from collections import Counter

from smoothclient import spread

started: list[float] = []


def job(n: int) -> int:
    started.append(time.monotonic())
    return n * n


t0 = time.monotonic()
result = spread(job, range(200), window=2.0, placement="uniform", concurrency=8)
assert result.ok, result.errors
bins = Counter(int((t - t0) / 0.1) for t in started)
print("starts per 100 ms:", [bins.get(i, 0) for i in range(20)])
print(f"200 jobs, {len(result.results)} results, busiest 100 ms: {max(bins.values())} starts")
