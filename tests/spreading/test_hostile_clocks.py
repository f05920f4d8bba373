"""
Clocks that go backwards, given to every helper that takes one (issue 37).

An injected clock (or a wall clock set back) that steps back must not hold anything for the
length of the step: every helper takes a step back as no time passing (and a wait it slept as
time that passed).  No wait is negative, none is longer than the helper's own bound, nothing
raises and nothing stays stuck.  The steps are drawn by hypothesis;
every clock is fake but the scheduler's, which runs on real time and waits well under a second.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import pickle
import random
import threading
import time
from datetime import time as dtime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothclient import jittered, paced, retry, spread
from smoothclient._validate import Forward, forward
from smoothclient.cache import JitteredTTLCache, cached
from smoothclient.spreading import PoissonScheduler, Reconciler, TimeWindow
from smoothclient.spreading.jittered import Scheduler

EXAMPLES = int(os.environ.get("SMOOTHCLIENT_FUZZ_EXAMPLES", "40"))
#: What the clock does before each reading: a step (seconds; negative: back).
STEPS = st.lists(
    st.one_of(st.floats(-1e6, -1e-6), st.floats(0, 5), st.just(0.0)), min_size=1, max_size=12
)


class SteppingClock:
    """A fake clock that moves by the next of ``steps`` at each reading, and on ``sleep``."""

    def __init__(self, steps: list[float], start: float = 1e6) -> None:
        self.t = start
        self.steps = list(steps)
        self.waits: list[float] = []

    def __call__(self) -> float:
        if self.steps:
            self.t += self.steps.pop(0)
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, f"a negative sleep: {seconds}"
        self.waits.append(seconds)
        self.t += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


def test_forward_takes_a_step_back_as_no_time_passing(caplog: pytest.LogCaptureFixture) -> None:
    """Readings go on from where they were, at the clock's pace; junk readings are ignored."""
    readings: list[Any] = [10.0, 11.0, 5.0, 6.0, math.nan, "x", 7.5, -1e300, 100.0]
    clock = Forward(iter(readings).__next__)
    with caplog.at_level(logging.DEBUG, logger="smoothclient"):
        seen = [clock() for _ in readings]
    assert seen[:8] == [10.0, 11.0, 11.0, 12.0, 12.0, 12.0, 13.5, 13.5]
    assert seen == sorted(seen)
    assert "stepped back" in caplog.text
    assert "not a finite number" in caplog.text
    copy = pickle.loads(pickle.dumps(Forward(time.time)))
    assert copy() > 0
    assert forward(time.monotonic) is time.monotonic  # never steps back: left alone


@settings(max_examples=EXAMPLES, deadline=None)
@given(steps=STEPS, rate=st.sampled_from([1.0, 10.0, 1000.0]))
def test_paced_never_waits_the_length_of_a_step_back(steps: list[float], rate: float) -> None:
    """One caller at a time: each wait at most two intervals (was: the whole step back)."""
    clock = SteppingClock(steps)

    @paced(rate, clock=clock, sleep=clock.sleep)
    def call() -> None:
        pass

    for _ in range(len(steps) + 2):
        call()
    assert all(0 <= wait <= 1 / rate + 1e-9 for wait in clock.waits), clock.waits


@settings(max_examples=EXAMPLES, deadline=None)
@given(steps=STEPS, placement=st.sampled_from(["uniform", "even", "hashed"]))
def test_spread_never_waits_past_its_window_after_a_step_back(
    steps: list[float], placement: Any
) -> None:
    """The items start over their window, whatever the clock does (sync and async alike)."""
    window = 10.0
    for asynchronous in (False, True):
        clock = SteppingClock(steps)
        if asynchronous:

            async def work(item: int) -> int:
                return item

            result = asyncio.run(
                spread(
                    work,
                    range(5),
                    window=window,
                    placement=placement,
                    clock=clock,
                    sleep=clock.async_sleep,
                    rng=random.Random(0),
                )
            )
        else:
            result = spread(
                lambda item: item,
                range(5),
                window=window,
                placement=placement,
                clock=clock,
                sleep=clock.sleep,
                rng=random.Random(0),
                concurrency=1,
            )
        assert result.ok
        assert all(0 <= wait <= window for wait in clock.waits), clock.waits


@settings(max_examples=EXAMPLES, deadline=None)
@given(steps=STEPS)
def test_retry_waits_within_its_policy_whatever_the_clock(steps: list[float]) -> None:
    """Waits within [0, wait_max]; the call ends in its attempts, raising its own error."""
    clock = SteppingClock(steps)
    attempts: list[int] = []

    @retry(
        on=ConnectionError,
        attempts=6,
        wait_initial=0.1,
        wait_max=2.0,
        timeout=30.0,
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(0),
    )
    def call() -> None:
        attempts.append(1)
        raise ConnectionError

    with pytest.raises(ConnectionError):
        call()
    assert 1 <= len(attempts) <= 6
    assert all(0 <= wait <= 2.0 for wait in clock.waits), clock.waits


def test_a_step_back_does_not_push_a_retrys_deadline_away() -> None:
    """A clock set back an hour mid-call: the deadline still comes after 30 s of waits."""
    clock = SteppingClock([])
    calls = 0

    @retry(on=ConnectionError, attempts=1000, wait_initial=1.0, wait_max=1.0, timeout=30.0)
    def plain() -> None:  # (the default clock: monotonic, left alone)
        pass

    @retry(
        on=ConnectionError,
        attempts=1000,
        wait_initial=1.0,
        wait_max=1.0,
        timeout=30.0,
        budget=None,
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(0),
    )
    def call() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            clock.t -= 3600.0
        raise ConnectionError

    with pytest.raises(ConnectionError):
        call()
    assert sum(clock.waits) <= 31.0  # was: 500 s (the attempts ran out before the deadline)
    plain()


def test_a_call_failing_at_once_does_not_spend_its_attempts_at_its_deadline() -> None:
    """Waits of up to 1 s over 30 s: some sixty attempts, not every attempt allowed."""
    clock = SteppingClock([])
    attempts: list[int] = []

    @retry(
        on=ConnectionError,
        attempts=5_000,
        wait_initial=1.0,
        wait_max=1.0,
        timeout=30.0,
        budget=None,
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(0),
    )
    def call() -> None:
        attempts.append(1)
        raise ConnectionError

    with pytest.raises(ConnectionError):
        call()
    assert len(attempts) <= 200


@settings(max_examples=EXAMPLES, deadline=None)
@given(steps=STEPS, ttl=st.sampled_from([1.0, 60.0]))
def test_no_cache_entry_outlives_its_ttl_after_a_step_back(steps: list[float], ttl: float) -> None:
    """Read often, the cache sees every step: an entry is gone once ``ttl`` has passed."""
    clock = SteppingClock([])
    cache: JitteredTTLCache[str, int] = JitteredTTLCache(8, ttl, timer=clock, jitter=0.5)
    cache["k"] = 1
    lived = 0.0
    for step in steps:
        clock.t += step
        lived += max(step, 0.0)
        present = "k" in cache
        assert present or lived >= ttl * 0.5
        if lived > ttl:
            assert not present, f"outlived its ttl of {ttl} s: {lived} s"


def test_cached_early_refresh_and_stale_modes_hold_across_a_step_back() -> None:
    """XFetch, stale-while-revalidate and stale-if-error on a clock set back: no error, no hang."""
    clock = SteppingClock([])
    loads: list[float] = []

    @cached(
        JitteredTTLCache(8, 10.0, timer=clock, jitter=0.0),
        early_refresh=1.0,
        stale_if_error=5.0,
        rng=random.Random(0),
    )
    def load(key: str) -> float:
        loads.append(clock.t)
        return clock.t

    first = load("k")
    clock.t -= 1e6
    assert load("k") == first  # still fresh: no time passed
    clock.t += 11.0
    load("k")
    assert len(loads) == 2  # expired after 11 s


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    walls=st.lists(st.floats(1.6e9, 1.9e9), min_size=2, max_size=8),
    window=st.booleans(),
    mode=st.sampled_from(["scale", "defer"]),
)
def test_poisson_gaps_are_never_negative_on_a_wall_clock_going_backwards(
    walls: list[float], window: bool, mode: Any
) -> None:
    """Each gap is from the wall's own now: never negative, never NaN, whatever the wall does."""
    readings = iter(walls)
    gaps: list[float] = []
    scheduler = PoissonScheduler(
        lambda: None,
        events_per_day=1000,
        window=TimeWindow(dtime(9), dtime(18), "Europe/Paris") if window else None,
        mode=mode,
        wall=lambda: next(readings, walls[-1]),
        sleep=lambda seconds: None,
        on_gap=gaps.append,
        rng=random.Random(0),
    )
    scheduler.run(max_events=len(walls) - 1)
    assert gaps
    assert all(0 <= gap < 3 * 86400 for gap in gaps), gaps


def test_the_reconcilers_time_since_its_last_tick_is_never_negative() -> None:
    """A clock set back after a tick: 0 s since it (was -5), then its pace again."""
    clock = SteppingClock([])
    reconciler = Reconciler(list, lambda item: None, every=1, clock=clock)
    reconciler.tick()
    clock.t -= 5.0
    assert reconciler.seconds_since_last_tick == 0.0
    clock.t += 2.0
    assert reconciler.seconds_since_last_tick == 2.0


def test_a_later_call_runs_after_its_delay_when_the_clock_steps_back() -> None:
    """The scheduler's clock set back an hour right after a ``later``: the call still runs."""
    offset = [0.0]

    def clock() -> float:
        return time.monotonic() + offset[0]

    scheduler = Scheduler(clock=clock)
    ran = threading.Event()

    @jittered(0.05, scheduler=scheduler, rng=random.Random(0))
    def job() -> None:
        ran.set()

    try:
        clock()  # seen before the step
        future = job.later()
        offset[0] -= 3600.0
        future.result(timeout=2.0)  # was: an hour
        assert ran.is_set()
    finally:
        scheduler.shutdown()


def test_a_scheduler_whose_clock_raises_fails_its_calls_not_its_thread() -> None:
    """The clock raised in the scheduler's thread: it died, every pending call never done."""
    readings = [0]

    def clock() -> float:
        readings[0] += 1
        if readings[0] > 1:
            raise LookupError("the clock is gone")
        return 0.0

    scheduler = Scheduler(clock=clock)
    try:
        future = scheduler.call_at(10.0, lambda: None)
        with pytest.raises(LookupError, match="the clock is gone"):
            future.result(timeout=2.0)  # was: never done
    finally:
        scheduler.shutdown()
