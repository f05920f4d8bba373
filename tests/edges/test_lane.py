"""The fast lane: what it learns from a first attempt's answer (pure, fake clock)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from smoothclient import Pacer, RetryPolicy, SmoothTransport
from smoothclient.edges import flow
from smoothclient.edges import lane as lane_module
from smoothclient.edges.lane import FastLane, Lane
from smoothclient.hints import GENERIC, Hints, read_fields
from smoothclient.pacing.steps import Steps, run
from smoothclient.pacing.store import KeyTracker, MemoryCell, Tracker
from smoothclient.testing import FakeClock

ORIGIN = "http://api.test:80"


@dataclass
class Answer:
    """What the lane reads of a response."""

    status_code: int
    headers: dict[str, str] = field(default_factory=dict)


def leave(lane: FastLane, driver: str, *args: Any) -> dict[str, Any] | Hints:
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


@pytest.mark.parametrize("driver", ["sync", "steps"])
def test_a_retryable_answer_hands_its_hints_to_the_flow(driver: str) -> None:
    """A 429 the flow will retry: no record, and the hints read here go with it (read once)."""
    _clock, _pacer, lane = known_origin()
    entry, tracker, sent_at = lane.enter(ORIGIN)
    assert tracker is not None
    answer = Answer(429, {"Retry-After": "2"})
    handed = leave(lane, driver, tracker, entry, sent_at, answer, ORIGIN)
    assert isinstance(handed, Hints)
    assert handed.retry_after == 2.0


def test_the_flow_reads_the_headers_of_a_first_answer_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through an edge: a 429 then a 200; the 429's headers are read by the lane alone."""
    reads: list[int] = []
    original = read_fields

    def counting(headers: Any, access: Any) -> Hints:
        reads.append(1)
        return original(headers, access)

    monkeypatch.setattr(lane_module, "read_fields", counting)
    monkeypatch.setattr(flow, "read_fields", counting)
    answers = iter([httpx.Response(429, headers={"Retry-After": "0"}), httpx.Response(200)])
    clock = FakeClock(100.0)
    transport = SmoothTransport(
        httpx.MockTransport(lambda request: next(answers)),
        policy=RetryPolicy(attempts=2),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as client:
        assert client.get("http://api.test/x").status_code == 200
    assert len(reads) == 2  # the 429's once (by the lane), the 200's once (by the flow)


class _LearnsMeanwhile:
    """
    A binder of a shared store whose scopes another process learns between two looks.

    Its first look finds no scope on the route; by the next, another process's answer (a
    cold-start probe's) named one: the request is bound by it then.
    """

    books: Callable[[str], object] | None = None

    def __init__(self, scoped: KeyTracker) -> None:
        self.scoped = scoped
        self.looks = 0

    def __call__(self, origin: str, request: object, late: bool) -> Tracker | None:
        self.looks += 1
        return None if self.looks == 1 else self.scoped

    def steps(self, origin: str, request: object, late: bool) -> Steps[Tracker | None]:
        return self(origin, request, late)
        yield  # pragma: no cover - a generator that returns at once


@pytest.mark.parametrize("driver", ["sync", "steps"])
def test_scopes_learned_while_the_origin_admitted_a_request_bind_it(driver: str) -> None:
    """
    Through a shared store, a request its origin alone admitted is bound again.

    A fleet's processes that started together bound their first requests while another's
    cold-start probe was out; the probe's answer named a quota spent, and the origin let
    them go: one in six runs of four processes sent a request into that quota.  Bound again,
    the request goes to the flow, which asks the scope, and the origin's slot is given back.
    """
    clock = FakeClock(100.0)
    pacer = Pacer(clock=clock, probe=0)
    binder = _LearnsMeanwhile(pacer.track("http://api.test:80#scope"))
    lane = FastLane(pacer, RetryPolicy(), GENERIC, binder)
    lane.shared = True  # (a store in Redis: the scopes learned by others come through it)
    if driver == "sync":
        entry, tracker, _ = lane.enter(ORIGIN)
    else:
        entry, tracker, _ = run(lane.enter_steps(ORIGIN))
    assert (entry, tracker) == (Lane.FLOW, None)
    assert binder.looks == 2
    assert pacer.view(ORIGIN).in_flight == 0  # the origin's slot given back
    # a store in memory: the binding and the admission are one moment, no second look
    fresh = Pacer(clock=clock, probe=0)
    binder = _LearnsMeanwhile(fresh.track("http://api.test:80#scope"))
    entry, tracker, _ = FastLane(fresh, RetryPolicy(), GENERIC, binder).enter(ORIGIN)
    assert entry is Lane.ADMITTED
    assert binder.looks == 1
