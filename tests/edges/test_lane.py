"""The fast lane: what it learns from a first attempt's answer (pure, fake clock)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from smoothclient import Pacer, RetryPolicy
from smoothclient.edges.lane import FastLane, Lane
from smoothclient.hints import GENERIC, Hints
from smoothclient.pacing.store import KeyTracker, MemoryCell, run
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
@pytest.mark.parametrize("paced_since", [False, True])
def test_a_plain_success_sent_to_a_healthy_origin(driver: str, paced_since: bool) -> None:
    # Sent while the origin was healthy: uncounted, and its plain success only noted (no
    # lock).  Unless other requests' throttles paced the origin before it came back: then
    # it is the rate controller's evidence (it went before the cut).  A queueing limiter
    # (nginx limit_req without nodelay) answers the requests it held late, and a process
    # that only noted them crawled up from the floor (9.2 s instead of 6.1 s for 60 calls).
    clock, pacer, lane = known_origin()
    entry, tracker, sent_at = lane.enter(ORIGIN)
    assert entry is Lane.HEALTHY
    assert isinstance(tracker, KeyTracker)
    assert isinstance(tracker.cell, MemoryCell)
    state = tracker.cell.state
    clock.advance(0.1)
    if paced_since:
        for _ in range(12):  # a herd's first wave, throttled
            tracker.observe(429, Hints(), clock(), sent_at=clock(), counted=False)
        assert pacer.view(ORIGIN).learned
    through, successes = state.through, len(state.successes)
    assert leave(lane, driver, tracker, entry, sent_at, Answer(200), ORIGIN) is not None
    assert state.through == through + paced_since  # learned from, or only noted
    assert len(state.successes) == successes + 1
    assert pacer.view(ORIGIN).in_flight == 0  # it was never counted: nothing to release
