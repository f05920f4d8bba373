"""retry, jittered and paced on sync and async functions and methods, with fake clocks."""

from __future__ import annotations

import asyncio
import gc
import inspect
import itertools
import random
import threading
import time

import pytest

from smoothclient import RateLimited, jittered, paced, retry
from smoothclient.events import RetryEvent
from smoothclient.spreading.jittered import Scheduler
from smoothclient.testing import FakeClock


def test_retry_until_success_keeps_signature(clock: FakeClock) -> None:
    calls = 0

    @retry(on=ConnectionError, attempts=5, sleep=clock.sleep, clock=clock, rng=random.Random(0))
    def fetch(x: int, *, y: str = "a") -> str:
        """Fetch."""
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("flaky")
        return f"{x}{y}"

    assert fetch(1, y="b") == "1b"
    assert calls == 3
    assert len(clock.sleeps) == 2
    assert inspect.signature(fetch) == inspect.signature(fetch.__wrapped__)  # type: ignore[attr-defined]
    assert list(inspect.signature(fetch).parameters) == ["x", "y"]
    assert fetch.__doc__ == "Fetch."


def test_retry_reraises_last_exception_and_ignores_others(clock: FakeClock) -> None:
    @retry(on=ConnectionError, attempts=3, sleep=clock.sleep, clock=clock)
    def down() -> None:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        down()
    assert len(clock.sleeps) == 2

    @retry(on=ConnectionError, sleep=clock.sleep, clock=clock)
    def bug() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        bug()
    assert len(clock.sleeps) == 2


def test_predicate_delay_shifts_the_window(clock: FakeClock) -> None:
    """A predicate returning seconds makes the next try wait at least that long."""

    class Throttled(Exception):
        retry_after = 7.0

    attempts = 0

    @retry(on=lambda e: getattr(e, "retry_after", False), sleep=clock.sleep, clock=clock)
    def call() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise Throttled
        return "ok"

    assert call() == "ok"
    assert 7.0 <= sum(clock.sleeps) <= 7.1 + 1e-9


def test_retry_on_result(clock: FakeClock) -> None:
    results = iter([None, None, "done"])

    @retry(on_result=lambda r: r is None, sleep=clock.sleep, clock=clock)
    def poll() -> str | None:
        return next(results)

    assert poll() == "done"

    @retry(on_result=lambda r: r is None, attempts=2, sleep=clock.sleep, clock=clock)
    def never() -> None:
        return None

    assert never() is None  # the last result comes back when attempts run out


def test_retry_deadline_and_hook(clock: FakeClock) -> None:
    events: list[RetryEvent] = []

    @retry(
        on=OSError, attempts=100, timeout=5, sleep=clock.sleep, clock=clock, on_retry=events.append
    )
    def down() -> None:
        raise OSError("down")

    with pytest.raises(OSError, match="down"):
        down()
    assert clock() <= 1_000.0 + 5.0  # no sleep passed the deadline on the clock
    assert events
    assert events[0].reason == "other error"


def test_not_idempotent_is_never_retried(clock: FakeClock) -> None:
    calls = 0

    @retry(on=OSError, idempotent=False, sleep=clock.sleep, clock=clock)
    def charge() -> None:
        nonlocal calls
        calls += 1
        raise OSError("maybe charged")

    with pytest.raises(OSError, match="maybe charged"):
        charge()
    assert calls == 1


def test_retry_async_and_methods(clock: FakeClock) -> None:
    class Client:
        def __init__(self) -> None:
            self.calls = 0

        @retry(on=TimeoutError, sleep=clock.async_sleep, clock=clock)
        async def get(self, x: int) -> int:
            self.calls += 1
            if self.calls < 2:
                raise TimeoutError
            return x * 2

    client = Client()
    assert inspect.iscoroutinefunction(Client.get)
    assert asyncio.run(client.get(21)) == 42
    assert client.calls == 2


def test_jittered_waits_within_bounds(clock: FakeClock) -> None:
    @jittered(2.0, 1.0, sleep=clock.sleep, rng=random.Random(4))
    def job(x: int) -> int:
        return x

    assert [job(i) for i in range(50)] == list(range(50))
    assert all(1.0 <= s < 2.0 for s in clock.sleeps)
    with pytest.raises(ValueError, match="min_wait"):
        jittered(1.0, 2.0)


def test_jittered_later_runs_10000_calls_on_one_timer_thread() -> None:
    scheduler = Scheduler(workers=4)
    done = threading.Semaphore(0)
    before = threading.active_count()

    @jittered(0.05, scheduler=scheduler)
    def job(i: int) -> int:
        done.release()
        return i

    futures = [job.later(i) for i in range(10_000)]
    assert threading.active_count() <= before + 1 + 4
    for _ in range(10_000):
        assert done.acquire(timeout=10)
    assert [f.result(timeout=5) for f in futures[:10]] == list(range(10))
    scheduler.shutdown()


def test_jittered_later_cancel_and_methods() -> None:
    scheduler = Scheduler()
    ran: list[int] = []

    class Worker:
        @jittered(0.5, 0.4, scheduler=scheduler)
        def work(self, i: int) -> int:
            ran.append(i)
            return i

    w = Worker()
    keep = w.work.later(1)
    dropped = w.work.later(2)
    assert dropped.cancel()
    assert keep.result(timeout=5) == 1
    time.sleep(0.05)
    assert ran == [1]
    scheduler.shutdown()


def test_jittered_later_async() -> None:
    @jittered(0.01)
    async def job(x: int) -> int:
        return x + 1

    async def main() -> tuple[int, bool]:
        task = job.later(1)
        cancelled = job.later(2)
        cancelled.cancel()
        await asyncio.sleep(0)
        return await task, cancelled.cancelled()

    assert asyncio.run(main()) == (2, True)


def test_jittered_later_async_fire_and_forget() -> None:
    """A dropped task is kept alive until it ran (the loop holds tasks only weakly)."""
    ran: list[int] = []

    @jittered(0.01)
    async def job(x: int) -> None:
        ran.append(x)

    async def main() -> int:
        job.later(1)  # the caller keeps nothing
        gc.collect()
        held = len(job._self_tasks)  # type: ignore[attr-defined]
        await asyncio.sleep(0.05)
        return held

    assert asyncio.run(main()) == 1
    assert ran == [1]
    assert not job._self_tasks  # type: ignore[attr-defined]  # forgotten once done


def test_paced_spaces_calls(clock: FakeClock) -> None:
    """10 calls at 5/s with a burst of 2: two at once, then 0.2 s apart."""

    @paced(5, burst=2, clock=clock, sleep=clock.sleep)
    def call() -> float:
        return clock()

    times = [call() for _ in range(10)]
    assert times[0] == times[1] == 1000.0
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(times[1:])]
    assert gaps == [0.2] * 8


def test_paced_non_blocking_and_keys(clock: FakeClock) -> None:
    @paced(1, per=10, block=False, key=lambda user: user, clock=clock)
    def act(user: str) -> str:
        return user

    assert act("a") == "a"
    assert act("b") == "b"  # its own bucket
    with pytest.raises(RateLimited) as info:
        act("a")
    assert info.value.retry_after == pytest.approx(10.0)


def test_paced_threads_share_one_bucket() -> None:
    stamps: list[float] = []
    lock = threading.Lock()

    @paced(200, burst=1)
    def hit() -> None:
        with lock:
            stamps.append(time.monotonic())

    threads = [threading.Thread(target=lambda: [hit() for _ in range(5)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stamps.sort()
    assert len(stamps) == 40
    assert stamps[-1] - stamps[0] >= 39 / 200 * 0.9


def test_paced_async(clock: FakeClock) -> None:
    @paced(2, clock=clock, sleep=clock.async_sleep)
    async def call() -> float:
        return clock()

    async def main() -> list[float]:
        return [await call() for _ in range(3)]

    assert asyncio.run(main()) == [1000.0, 1000.5, 1001.0]


def test_paced_validation() -> None:
    with pytest.raises(ValueError, match="rate"):
        paced(0)
    with pytest.raises(ValueError, match="burst"):
        paced(1, burst=0.5)


@pytest.mark.parametrize("rate", [20.0, 49.0, 99.0])
def test_a_shared_paced_bucket_keeps_its_state_whatever_the_rate(rate: float) -> None:
    """49 req/s is not 1/(1/49): the stored bucket must still be recognised, not remade."""
    from smoothclient.pacing.state import Settings
    from smoothclient.pacing.store import MemoryStore
    from smoothclient.spreading.paced import _SharedBucket

    bucket = _SharedBucket(MemoryStore(Settings()).tracker("paced:f:None"), rate, 1.0)
    assert bucket.reserve(0.0, block=True) == 0.0
    assert bucket.reserve(0.0, block=True) == pytest.approx(1 / rate)
