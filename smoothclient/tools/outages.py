"""
A server of finite capacity with an outage, and an open-loop fleet against it, in virtual time.

The server admits ``capacity`` requests a second (a token bucket with a small burst) and
answers 503 above it; from ``down[0]`` to ``down[1]`` it answers every request 503 (with
``Retry-After`` if asked).  A fleet of ``procs`` clients that share nothing (or one pacer, as
a fleet through one store would) starts ``rate`` calls a second each, on schedule whatever
came back (an open loop), through the real :class:`~smoothclient.AsyncSmoothTransport` on
trio's virtual clock.  :func:`run_outage` measures what the server saw: the load during the
outage over what the fleet offered, the peak second after it over capacity, and the calls
that failed.  The outage law of the pacer is tested this way; ``benchmarks/outage.py`` runs
the same scenario against a real server, peers beside it.

With ``workers`` the server is a worker pool instead (``benchmarks/outage_server.py``'s
``pool``): ``workers`` workers serve ``capacity`` requests a second in all, in the order they
came (a queue of at most ``queue``; beyond it, 503 at once), and a request that waited over
``queue_timeout`` for its worker is still worked on and answered 503: rejected work that
costs capacity, where a release too fast keeps the server failing after the outage (a
metastable failure).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..pacing.gcra import Gcra

__all__ = ["OutageResult", "run_outage"]


@dataclass(frozen=True, slots=True)
class OutageResult:
    """What the server saw and how the calls ended."""

    arrivals: tuple[float, ...]  # when each request reached the server
    served: tuple[float, ...]  # when each success was answered
    offered: float  # calls a second the fleet started
    capacity: float
    down: tuple[float, float]
    calls: int
    failed: int

    def load_during(self) -> float:
        """Requests the server got during the outage over the calls started meanwhile."""
        start, end = self.down
        got = sum(1 for t in self.arrivals if start <= t < end)
        return got / (self.offered * (end - start))

    def peak_after(self, width: float = 1.0) -> float:
        """The most requests in any ``width`` s after the outage, as a rate over capacity."""
        after = sorted(t for t in self.arrivals if t >= self.down[1])
        best, lo = 0, 0
        for hi, t in enumerate(after):
            while after[lo] <= t - width:
                lo += 1
            best = max(best, hi - lo + 1)
        return best / width / self.capacity

    def goodput(self, start: float, end: float) -> float:
        """Successes a second answered from ``start`` to ``end``."""
        return sum(1 for t in self.served if start <= t < end) / (end - start)

    @property
    def failed_share(self) -> float:
        """The share of calls that did not end in a success."""
        return self.failed / self.calls


def run_outage(
    *,
    capacity: float = 100.0,
    procs: int = 4,
    rate: float = 15.0,
    down: tuple[float, float] = (3.0, 8.0),
    end: float = 14.0,
    retry_after: float | None = None,
    fail_share: float = 1.0,
    shared: bool = False,
    policy: Any = None,
    rtt: float = 0.005,
    seed: int = 0,
    workers: int = 0,
    queue: int = 500,
    queue_timeout: float = 1.0,
    burst: float | None = None,
) -> OutageResult:
    """
    Run the scenario; needs httpx and trio (the test extras).

    ``fail_share``: the share of requests failed while down (1: an outage; 0.5: a brownout).
    ``shared``: the fleet's clients use one pacer (as processes sharing one store do).
    ``policy``: the clients' policy (default: ``RetryPolicy(attempts=4, timeout=10)``).
    ``workers`` (0: a token bucket): a worker pool of that many, ``queue`` and
    ``queue_timeout`` as the module says.  ``burst``: the token bucket's (default: a twentieth
    of a second's capacity; ``benchmarks/outage.py``'s server has a tenth).
    """
    import httpx
    import trio
    import trio.testing

    from ..edges.httpx_transport import AsyncSmoothTransport
    from ..pacing.pacer import Pacer
    from ..policy import RetryPolicy

    chosen = policy or RetryPolicy(attempts=4, timeout=10.0)
    bucket = Gcra(rate=capacity, burst=burst or max(1.0, capacity / 20))
    arrivals: list[float] = []
    served: list[float] = []
    free = [0.0] * workers  # when each worker is next free
    waiting: deque[float] = deque()  # when each queued request starts
    service = workers / capacity if workers else 0.0
    coin = random.Random(seed)
    failed = 0
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        await trio.sleep(rtt / 2)
        now = trio.current_time()
        arrivals.append(now)
        headers = {}
        if down[0] <= now < down[1] and (fail_share >= 1 or coin.random() < fail_share):
            status = 503
            if retry_after is not None:
                headers["Retry-After"] = f"{retry_after:g}"
        elif workers:
            while waiting and waiting[0] <= now:
                waiting.popleft()  # (started: no longer queued)
            if len(waiting) >= queue:
                status = 503  # the queue is full: turned away at once, at no cost
            else:
                worker = min(range(workers), key=free.__getitem__)
                start = max(now, free[worker])
                free[worker] = start + service
                if start > now:
                    waiting.append(start)  # (FIFO: starts come in order)
                await trio.sleep_until(start + service)
                status = 200 if start - now <= queue_timeout else 503
        else:
            at = bucket.earliest(now)
            status = 200 if at <= now else 503
            if status == 200:
                bucket.take(now)
        await trio.sleep(rtt / 2)
        if status == 200:
            served.append(trio.current_time())
        return httpx.Response(status, headers=headers, content=b"{}")

    shared_pacer = Pacer(clock=trio.current_time) if shared else None

    async def client(index: int) -> None:
        nonlocal failed, calls
        transport = AsyncSmoothTransport(
            httpx.MockTransport(handler),
            policy=chosen,
            pacer=shared_pacer or Pacer(clock=trio.current_time),
            rng=random.Random(seed * 1000 + index),
            sleep=trio.sleep,
        )
        async with httpx.AsyncClient(transport=transport) as http:

            async def one() -> None:
                nonlocal failed
                try:
                    response = await http.get("http://service.test/work")
                except Exception:
                    failed += 1
                    return
                if response.status_code != 200:
                    failed += 1

            jitter = random.Random(seed * 7919 + index)
            async with trio.open_nursery() as nursery:
                at = jitter.uniform(0.0, 1.0 / rate)
                while at < end:
                    await trio.sleep_until(at)
                    calls += 1
                    nursery.start_soon(one)
                    at += jitter.expovariate(rate)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for index in range(procs):
                nursery.start_soon(client, index)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return OutageResult(tuple(arrivals), tuple(served), procs * rate, capacity, down, calls, failed)
