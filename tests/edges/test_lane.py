"""The fast lane: what it learns from a first attempt's answer (pure, fake clock)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from smoothclient import Pacer, RetryPolicy
from smoothclient.edges.lane import FastLane, Lane
from smoothclient.hints import GENERIC, Hints
from smoothclient.pacing.store import MemoryTracker, run
from smoothclient.testing import FakeClock

ORIGIN = "http://api.test:80"


@dataclass
class Answer:
    """What the lane reads of a response."""

    status_code: int
    headers: dict[str, str] = field(default_factory=dict)


def leave(lane: FastLane, driver: str, *args: Any) -> dict[str, Any] | None:
    if driver == "sync":
        return lane.leave(*args)
    return run(lane.leave_steps(*args))


def known_origin() -> tuple[FakeClock, Pacer, FastLane]:
    """A pacer whose origin has answered once: healthy, its requests go uncounted."""
    clock = FakeClock(100.0)
    pacer = Pacer(clock=clock, probe=0)
    lane = FastLane(pacer, RetryPolicy(), GENERIC)
    entry, tracker, sent_at = lane.enter(ORIGIN)
    assert entry is Lane.ADMITTED
    assert tracker is not None
    assert lane.leave(tracker, entry, sent_at, Answer(200), ORIGIN) is not None
    return clock, pacer, lane


@pytest.mark.parametrize("driver", ["sync", "steps"])
def test_an_answer_to_a_healthy_origin_paced_since_is_learned_from(driver: str) -> None:
    # Sent while the origin was healthy (uncounted, no lock); before its answer came back,
    # other requests' throttles paced it.  Its success is the rate controller's evidence
    # (it went before the cut): a queueing limiter (nginx limit_req without nodelay) answers
    # the requests it held late, and a process that only noted them crawled up from the
    # floor (9.2 s instead of 6.1 s for 60 calls at 10 r/s).
    clock, pacer, lane = known_origin()
    entry, tracker, sent_at = lane.enter(ORIGIN)
    assert entry is Lane.HEALTHY
    assert isinstance(tracker, MemoryTracker)
    clock.advance(0.1)
    for _ in range(12):  # a herd's first wave, throttled
        tracker.observe(429, Hints(), clock(), sent_at=clock(), counted=False)
    assert pacer.view(ORIGIN).learned
    through = tracker.state.through
    assert leave(lane, driver, tracker, entry, sent_at, Answer(200), ORIGIN) is not None
    assert tracker.state.through == through + 1  # observed, not only noted
    assert pacer.view(ORIGIN).in_flight == 0  # it was never counted: nothing to release


@pytest.mark.parametrize("driver", ["sync", "steps"])
def test_a_plain_success_on_a_healthy_origin_is_only_noted(driver: str) -> None:
    clock, _pacer, lane = known_origin()
    entry, tracker, sent_at = lane.enter(ORIGIN)
    assert entry is Lane.HEALTHY
    assert isinstance(tracker, MemoryTracker)
    through, successes = tracker.state.through, len(tracker.state.successes)
    clock.advance(0.01)
    assert leave(lane, driver, tracker, entry, sent_at, Answer(200), ORIGIN) is not None
    assert tracker.state.through == through  # the lock-free note: no learning step
    assert len(tracker.state.successes) == successes + 1
