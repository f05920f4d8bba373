"""Stable offsets, spread, time windows, Poisson schedules and the reconciler (fake clocks)."""

from __future__ import annotations

import asyncio
import itertools
import queue
import random
import threading
import time as _time
from collections import Counter
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from smoothclient import spread
from smoothclient.spreading import PoissonScheduler, Reconciler, TimeWindow, next_run, offset_for
from smoothclient.spreading import _aio as schedule_module
from smoothclient.spreading.spread import SpreadCancelled, plan
from smoothclient.testing import FakeClock


def test_next_run_is_the_keys_slot() -> None:
    offset = offset_for("job", 3600)
    t = next_run("job", 3600, now=10 * 3600 + offset - 1)
    assert t == 10 * 3600 + offset
    assert next_run("job", timedelta(hours=1), now=t) == t
    assert next_run("job", 3600, now=t + 0.001) == t + 3600


def test_uniform_plan_never_clumps() -> None:
    """1,000 items over 10 s: no 100 ms bin above 2x the mean."""
    offsets = plan(1000, 10.0, "uniform", rng=random.Random(1))
    bins = Counter(int(o / 0.1) for o in offsets)
    assert max(bins.values()) <= 2 * 10
    assert all(0 <= o < 10 for o in offsets)
    assert len(set(offsets)) == 1000


def test_even_and_hashed_plans() -> None:
    assert plan(4, 2.0, "even") == [0.0, 0.5, 1.0, 1.5]
    keys = ["a", "b", "c"]
    assert plan(3, 60, "hashed", keys=keys) == [offset_for(k, 60) for k in keys]
    with pytest.raises(ValueError, match="one key per item"):
        plan(3, 60, "hashed")
    with pytest.raises(ValueError, match="placement"):
        plan(3, 60, "gaussian")  # type: ignore[arg-type]


def test_rate_cap() -> None:
    offsets = sorted(plan(10, 0.0, "even", rate=5.0))
    assert offsets == pytest.approx([i * 0.2 for i in range(10)])


def test_spread_sync_results_errors_progress(clock: FakeClock) -> None:
    seen: list[tuple[int, int]] = []

    def work(x: int) -> int:
        if x == 3:
            raise ValueError("bad item")
        return x * x

    result = spread(
        work,
        range(6),
        window=6.0,
        placement="even",
        progress=lambda done, total: seen.append((done, total)),
        clock=clock,
        sleep=clock.sleep,
        concurrency=1,
    )
    assert result.results == [0, 1, 4, None, 16, 25]
    assert isinstance(result.errors[3], ValueError)
    assert not result.ok
    assert seen[-1] == (6, 6)
    assert clock.sleeps == pytest.approx([1.0] * 5)


def test_spread_cancel_wakes_a_long_wait() -> None:
    """Cancelled during a long gap between starts, spread returns at once, not at the next start."""
    cancel = threading.Event()
    threading.Timer(0.05, cancel.set).start()
    started = _time.monotonic()
    result = spread(lambda item: item, [1, 2], window=20, placement="even", cancel=cancel)
    assert _time.monotonic() - started < 1.0  # the second start was 10 s away
    assert result.cancelled
    assert result.results[0] == 1
    assert isinstance(result.errors[1], SpreadCancelled)


def test_spread_cancel(clock: FakeClock) -> None:
    """Cancelling stops the items not yet started; they are recorded as cancelled."""
    cancel = threading.Event()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock() >= 1002.0:
            cancel.set()

    result = spread(
        lambda x: x,
        range(5),
        window=5,
        placement="even",
        cancel=cancel,
        clock=clock,
        sleep=sleep,
        concurrency=1,
    )
    assert result.cancelled
    assert result.results[:2] == [0, 1]
    assert set(result.errors) == {2, 3, 4}


def test_spread_async(clock: FakeClock) -> None:
    async def work(x: int) -> int:
        if x == 2:
            raise KeyError(x)
        return -x

    result = asyncio.run(
        spread(work, [1, 2, 3], window=3, placement="even", clock=clock, sleep=clock.async_sleep)
    )
    assert result.results == [-1, None, -3]
    assert list(result.errors) == [1]


def test_window_crossing_midnight() -> None:
    w = TimeWindow(time(22), time(6), tz="UTC")
    day = datetime(2026, 1, 10, tzinfo=ZoneInfo("UTC"))
    assert w.contains(day.replace(hour=23))
    assert w.contains(day.replace(hour=5, minute=59))
    assert not w.contains(day.replace(hour=12))
    opens, closes = w.next_open(day.replace(hour=12))
    assert (opens.hour, closes.hour, closes.timestamp() - opens.timestamp()) == (22, 6, 8 * 3600)


def test_window_dst() -> None:
    """Paris springs forward on 2026-03-29: 01:00-05:00 lasts 3 hours that night."""
    w = TimeWindow(time(1), time(5), tz="Europe/Paris")
    paris = ZoneInfo("Europe/Paris")
    assert w.open_seconds(datetime(2026, 3, 29, 12, tzinfo=paris)) == 3 * 3600
    assert w.open_seconds(datetime(2026, 3, 28, 12, tzinfo=paris)) == 4 * 3600
    with pytest.raises(ValueError, match="start != end"):
        TimeWindow(time(1), time(1))


def test_poisson_mean_gap_all_day() -> None:
    s = PoissonScheduler(lambda: None, events_per_day=2000, rng=random.Random(2))
    t, gaps = 0.0, []
    for _ in range(10_000):
        nxt = s.next_event(t)
        gaps.append(nxt - t)
        t = nxt
    assert sum(gaps) / len(gaps) == pytest.approx(86400 / 2000, rel=0.05)


@pytest.mark.parametrize("mode", ["scale", "defer"])
def test_poisson_inside_business_hours(mode: str) -> None:
    """10,000 events: none outside 09:00-18:00 New York; scale mode keeps the daily target."""
    window = TimeWindow(time(9), time(18), tz="America/New_York")
    s = PoissonScheduler(
        lambda: None,
        events_per_day=500,
        window=window,
        mode=mode,  # type: ignore[arg-type]
        rng=random.Random(3),
    )
    start = datetime(2026, 3, 1, tzinfo=ZoneInfo("America/New_York")).timestamp()
    t = start
    for _ in range(10_000):
        t = s.next_event(t)
        assert window.contains(datetime.fromtimestamp(t, ZoneInfo("UTC")))
    days = (t - start) / 86400
    per_day = 10_000 / days
    if mode == "scale":
        assert per_day == pytest.approx(500, rel=0.05)
    else:
        assert per_day < 500  # deferred events wait for the opening


def test_poisson_runner_hooks_and_backoff(clock: FakeClock) -> None:
    outcomes: list[bool] = []
    fails = iter([True, True, False, False])

    def task() -> None:
        if next(fails):
            raise RuntimeError("flaky")

    s = PoissonScheduler(
        task,
        rate=1.0,
        wall=clock,
        sleep=clock.sleep,
        rng=random.Random(5),
        on_outcome=lambda ok, err: outcomes.append(ok),
        backoff_initial=2.0,
    )
    s.run(max_events=4)
    assert outcomes == [False, False, True, True]
    assert (s.stats.events, s.stats.failures) == (2, 2)
    assert clock.sleeps[1] >= 2.0  # the gap after a failure includes the backoff


def test_poisson_thread_start_stop() -> None:
    ran = threading.Event()
    s = PoissonScheduler(ran.set, rate=200.0)
    s.start()
    assert ran.wait(2)
    s.stop()
    assert s.stats.events >= 1


def test_poisson_validation() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        PoissonScheduler(lambda: None)
    with pytest.raises(ValueError, match="mode"):
        PoissonScheduler(lambda: None, rate=1, mode="later")  # type: ignore[arg-type]


def test_reconciler_recovers_lost_work_exactly_once(clock: FakeClock) -> None:
    """Lose every enqueued item: the next tick re-enqueues each pending row exactly once."""
    pending = {f"job-{i}" for i in range(50)}
    q: queue.Queue[str] = queue.Queue()
    r = Reconciler(
        lambda: sorted(pending), q.put, every=60, spread_over=5, clock=clock, sleep=clock.sleep
    )
    assert r.tick() == 50
    while not q.empty():  # the queue is flushed: everything is lost
        q.get()
    assert r.tick() == 50
    recovered = []
    while not q.empty():
        recovered.append(q.get())
    assert sorted(recovered) == sorted(pending)
    assert r.counts["dispatched"] == 100
    assert r.seconds_since_last_tick is not None


def test_reconciler_skips_in_flight_and_survives_failures(clock: FakeClock) -> None:
    gate = threading.Event()
    handled: list[str] = []

    def handle(item: str) -> None:
        if item == "bad":
            raise RuntimeError("item failed")
        if item == "slow":
            gate.wait(2)
        handled.append(item)

    r = Reconciler(lambda: ["slow", "bad", "ok"], handle, every=1, concurrency=4)
    worker = threading.Thread(target=r.tick)
    worker.start()
    deadline = _time.monotonic() + 5
    while "ok" not in handled and _time.monotonic() < deadline:
        _time.sleep(0.001)
    assert r.tick() == 0  # never overlaps itself
    gate.set()
    worker.join()
    assert r.counts["failed"] == 1
    assert sorted(handled) == ["ok", "slow"]
    assert r.in_flight == set()

    def broken() -> list[str]:
        raise ConnectionError("db down")

    r2 = Reconciler(broken, handle, every=1)
    assert r2.tick() == 0
    assert r2.counts["query_errors"] == 1


def test_reconciler_interval_jitter() -> None:
    r = Reconciler(list, print, every=100, jitter=0.2, rng=random.Random(1))
    intervals = [r.next_interval() for _ in range(1000)]
    assert all(80 <= i <= 120 for i in intervals)
    assert max(intervals) - min(intervals) > 30


def test_spread_uniform_starts_with_a_fake_clock(clock: FakeClock) -> None:
    """Running spread itself: 1,000 uniform starts over 10 s, no 100 ms bin above 2x the mean."""
    spread(
        lambda i: i,
        range(1000),
        window=10.0,
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(9),
        concurrency=1,
    )
    starts = list(itertools.accumulate(clock.sleeps))  # the dispatch loop sleeps to each start
    bins = Counter(int(s / 0.1) for s in starts)
    assert len(starts) >= 999
    assert max(starts) < 10.0
    assert max(bins.values()) <= 20


def test_poisson_run_async(clock: FakeClock) -> None:
    ran: list[float] = []
    s = PoissonScheduler(lambda: ran.append(clock()), rate=100.0, wall=clock, rng=random.Random(1))

    async def main() -> None:
        await s.run_async(max_events=5)

    asyncio.run(main())
    assert len(ran) == 5
    assert s.stats.events == 5


def test_poisson_run_async_awaits_a_coroutine_task() -> None:
    ran: list[int] = []

    async def task() -> None:
        await asyncio.sleep(0)
        ran.append(1)

    s = PoissonScheduler(task, rate=200.0, rng=random.Random(2))
    asyncio.run(s.run_async(max_events=5))
    assert ran == [1] * 5  # it used to count five events and run none
    assert s.stats.events == 5


def test_poisson_run_async_stops_in_a_long_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule_module, "STOP_POLL", 0.02)
    s = PoissonScheduler(lambda: None, events_per_day=1, rng=random.Random(3))  # gaps of hours

    async def main() -> float:
        runner = asyncio.create_task(s.run_async())
        await asyncio.sleep(0.05)
        s.stop()
        started = _time.monotonic()
        await asyncio.wait_for(runner, 1.0)
        return _time.monotonic() - started

    assert asyncio.run(main()) < 0.5
    assert s.stats.events == 0


def test_reconciler_run_async_stops_between_long_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule_module, "STOP_POLL", 0.02)
    r = Reconciler(list, print, every=3600)

    async def main() -> float:
        runner = asyncio.create_task(r.run_async())
        await asyncio.sleep(0.05)  # one tick done, an hour to the next
        r.stop()
        started = _time.monotonic()
        await asyncio.wait_for(runner, 1.0)
        return _time.monotonic() - started

    assert asyncio.run(main()) < 0.5


def test_reconciler_async_recovers_lost_work_exactly_once(clock: FakeClock) -> None:
    """The async runner: async query and handler, spread as tasks, ticks on the loop."""
    pending = {f"job-{i}" for i in range(30)}
    handled: list[str] = []
    ticks_seen: list[float] = []

    async def find_work() -> list[str]:
        ticks_seen.append(clock())
        return sorted(pending)

    async def handle(item: str) -> None:
        handled.append(item)

    r = Reconciler(
        find_work,
        handle,
        every=60,
        jitter=0.1,
        spread_over=5,
        clock=clock,
        sleep=clock.async_sleep,
        rng=random.Random(3),
    )
    asyncio.run(r.run_async(max_ticks=2))
    assert sorted(handled) == sorted([*pending, *pending])  # each tick: every row, once
    assert r.counts == {"ticks": 2, "dispatched": 60, "skipped": 0, "failed": 0, "query_errors": 0}
    assert r.in_flight == set()
    gap = ticks_seen[1] - ticks_seen[0]
    assert 54 <= gap <= 66 + 5  # the spread (at most 5 s), then a jittered 60 s +- 10%


def test_reconciler_async_with_sync_parts_and_failures(clock: FakeClock) -> None:
    handled: list[str] = []

    def handle(item: str) -> None:  # sync: runs on threads, the loop stays free
        if item == "bad":
            raise RuntimeError("item failed")
        handled.append(item)

    r = Reconciler(lambda: ["a", "bad", "b"], handle, every=1)
    assert asyncio.run(r.tick_async()) == 3
    assert sorted(handled) == ["a", "b"]
    assert (r.counts["dispatched"], r.counts["failed"]) == (2, 1)

    async def broken() -> list[str]:
        raise ConnectionError("db down")

    r2 = Reconciler(broken, handle, every=1)
    assert asyncio.run(r2.tick_async()) == 0
    assert r2.counts["query_errors"] == 1


def test_reconciler_cancelled_handler_leaves_nothing_in_flight() -> None:
    """A handler cancelled mid-way (not an error) is released, so the next tick retries it."""
    started = asyncio.Event()

    async def handle(item: str) -> None:
        started.set()
        await asyncio.Event().wait()  # never finishes on its own

    r = Reconciler(lambda: ["job"], handle, every=60)

    async def main() -> None:
        task = asyncio.create_task(r.tick_async())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert r.in_flight == set()
    assert (r.counts["dispatched"], r.counts["failed"]) == (0, 0)  # neither done nor failed
