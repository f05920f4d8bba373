"""A slow lookup behind a jittered cache: single-flight, stale-while-revalidate; sync and async."""

from __future__ import annotations

import asyncio
import threading
import time

from smoothclient import JitteredTTLCache, cached

calls = 0


@cached(JitteredTTLCache(maxsize=1024, ttl=0.5, jitter=0.2), stale_while_revalidate=5, info=True)
def exchange_rate(currency: str) -> float:
    global calls
    calls += 1
    time.sleep(0.1)  # a slow upstream
    return 1.1 if currency == "EUR" else 1.0


threads = [threading.Thread(target=exchange_rate, args=("EUR",)) for _ in range(32)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("32 concurrent misses, upstream calls:", calls)
time.sleep(0.6)  # the entry expires
start = time.perf_counter()
exchange_rate("EUR")  # stale value at once, refreshed in the background
print(f"read after expiry took {1000 * (time.perf_counter() - start):.2f} ms")
print(exchange_rate.cache_info())  # type: ignore[attr-defined]


@cached(JitteredTTLCache(maxsize=128, ttl=60))
async def profile(user: int) -> dict[str, int]:
    await asyncio.sleep(0.05)
    return {"user": user}


async def main() -> None:
    results = await asyncio.gather(*(profile(7) for _ in range(100)))
    print("100 concurrent async reads, distinct results:", len({id(r) for r in results}))


asyncio.run(main())
