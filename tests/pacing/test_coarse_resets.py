"""
Resets stated in whole seconds: express-rate-limit, IETF ``RateLimit``'s ``t``, most servers.

"Resets in 1 s" stated from anywhere in a window of one second puts the reset anywhere in the
next second, a little later at each answer.  Read as a new window at every answer, the spent
period, the tally and the reset restarted with each 429, a window was never told from a
bucket, and an early probe's rejection read as "beaten to a new window" (1.31x the ideal for
one process, 0.66 extra 429s a call for a fleet of six sharing nothing).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import pytest

from smoothclient import Hints, Pacer
from smoothclient.pacing import learning, resets
from smoothclient.pacing import state as st
from smoothclient.pacing.store import KeyTracker, MemoryCell
from smoothclient.tools.limiters import FixedWindow, MovingWindow, run_herd

ORIGIN = "http://api.test:80"


def _state(p: Pacer) -> st.OriginState:
    found = p.track(ORIGIN)
    assert isinstance(found, KeyTracker)
    assert isinstance(found.cell, MemoryCell)
    return found.cell.state


def _quota(remaining: float, reset_after: float) -> Hints:
    return Hints(remaining=remaining, limit=10, window=1.0, reset_after=reset_after)


def test_a_whole_second_restated_later_is_the_same_window() -> None:
    """Each answer says "1 s" from a little later: one window, its reset the earliest stated."""
    p = Pacer(probe=0)
    t = p.track(ORIGIN)
    for index in range(10):
        t.acquire(index * 0.001)
        t.sent()
    for index in range(10):
        now = 0.002 + index * 0.03
        t.observe(200, _quota(9 - index, 1.0), now, sent_at=index * 0.001)
    o = _state(p)
    assert o.reset_at == pytest.approx(1.002)  # the first answer's: the tightest bound
    assert o.exhausted is not None
    assert o.exhausted[1] == pytest.approx(1.002)
    assert o.period_ok == 10  # one window's tally, not restarted at each answer
    # a 429 stated from later in the same window is still that window
    t.acquire(0.4)
    t.sent()
    t.observe(429, _quota(0, 1.0), 0.41, sent_at=0.4)
    assert o.reset_at == pytest.approx(1.002)
    assert o.period_throttled == 1
    assert o.period_ok == 10


def test_a_reset_moved_by_more_than_its_grain_or_a_quota_come_back_is_a_new_window() -> None:
    """A new window shows as a reset a whole second further on, or as more left than told."""
    p = Pacer(probe=0)
    t = p.track(ORIGIN)
    t.acquire(0.0)
    t.sent()
    t.observe(200, _quota(0, 3.0), 0.01, sent_at=0.0)  # spent until about 3.01
    o = _state(p)
    assert o.exhausted is not None
    t.observe(200, _quota(0, 5.0), 0.5, sent_at=0.4)  # 5.5: two seconds on, a new window
    assert o.reset_at == pytest.approx(5.5)
    p2 = Pacer(probe=0)
    t2 = p2.track(ORIGIN)
    t2.acquire(0.0)
    t2.sent()
    t2.observe(200, _quota(2, 1.0), 0.01, sent_at=0.0)
    o2 = _state(p2)
    o2.period_ok = 5  # (a tally the new window must restart)
    t2.acquire(0.3)
    t2.sent()
    t2.observe(200, _quota(8, 1.0), 0.31, sent_at=0.3)  # sent after the report, more left
    assert o2.period_ok == 1
    assert o2.period_top == 8
    assert o2.reset_at == pytest.approx(1.31)


def test_a_reset_stated_to_the_millisecond_is_read_as_before() -> None:
    """Only whole seconds are coarse: a fractional reset that moves on is a new window."""
    p = Pacer(probe=0)
    t = p.track(ORIGIN)
    t.acquire(0.0)
    t.sent()
    t.observe(200, _quota(3, 0.75), 0.01, sent_at=0.0)
    t.acquire(0.02)
    t.sent()
    t.observe(200, _quota(2, 0.7505), 0.03, sent_at=0.02)
    assert _state(p).reset_at == pytest.approx(0.7805)  # the latest statement, as is


@pytest.mark.herd
@pytest.mark.parametrize(
    ("limiter", "procs", "calls", "bound", "extra"),
    [
        (FixedWindow(10, 1.0), 1, 60, 1.1, 0.05),  # 1.31x before
        (MovingWindow(10, 1.0), 1, 60, 1.25, 0.05),  # 1.31x before; 2x on the way
        (FixedWindow(10, 1.0), 6, 20, 1.2, 0.3),  # 0.66 extra 429s a call before
    ],
    ids=["fixed window", "moving window", "fixed window, fleet of 6 sharing nothing"],
)
def test_a_window_stating_whole_seconds_is_drained_near_the_ideal(
    limiter: FixedWindow | MovingWindow,
    procs: int,
    calls: int,
    bound: float,
    extra: float,
    wall_on_trio: Callable[..., None],
) -> None:
    """IETF ``RateLimit`` with ``t`` rounded up, as express-rate-limit sends it."""
    wall_on_trio()
    results = []
    for seed in range(3):
        fresh = type(limiter)(limiter.limit, limiter.window)
        results.append(
            run_herd(
                fresh,
                "ietf",
                calls,
                procs=procs,
                seed=seed,
                stagger=0.01,
                spread=0.002,
                proc_stagger=0.003,
            )
        )
    assert all(r.failed == 0 for r in results)
    assert statistics.median(r.ratio for r in results) <= bound
    assert statistics.median(r.extra_429s_per_call for r in results) <= extra


def test_a_window_that_begins_at_its_first_request_bounds_the_next_reset() -> None:
    """Measured from the send that found it whole to the next window's first answer."""
    p = Pacer(probe=0)
    t = p.track(ORIGIN)
    stated = Hints(remaining=9, limit=10, reset_after=1.9)  # an epoch rounded up: 0.9 s late
    t.acquire(0.0)
    t.sent()
    t.observe(200, stated, 0.01, sent_at=0.0)  # the first window begins with this request
    t.acquire(0.02)
    t.sent()
    t.observe(429, Hints(remaining=0, limit=10, reset_after=1.87), 0.03, sent_at=0.02)
    o = _state(p)
    assert o.exhausted is not None
    assert o.window_hi is None
    t.acquire(1.05)
    t.sent()
    t.observe(200, Hints(remaining=9, limit=10, reset_after=1.94), 1.06, sent_at=1.05)
    assert o.window_hi == pytest.approx(1.06)  # from its send at 0.0 to this answer
    assert o.window_began == pytest.approx(1.06)
    assert o.reset_at == pytest.approx(3.0)  # the stated reset is kept as stated
    assert resets.due(o) == pytest.approx(2.12)  # but nothing waits past the bound
    # spent again: the next probe goes at the bound, not at the stated reset
    t.acquire(1.07)
    t.sent()
    t.observe(429, Hints(remaining=0, limit=10, reset_after=1.92), 1.08, sent_at=1.07)
    assert t.acquire(1.5).delay <= 2.12 - 1.5 + 1e-9


def test_bounds_on_a_window_narrow_to_where_its_next_one_opens() -> None:
    """
    Halfway between the bounds once a refusal gave the lower one; at the upper once narrow.

    Measured once from a window opened late, the upper bound alone never tightened, and a
    fleet through Redis opened every window of slowapi's a tenth of a second late.
    """
    o, s = st.OriginState(), st.Settings()
    o.reset_at, o.window_hi, o.window_began, o.latency = 11.5, 1.3, 10.0, 0.001
    o.ledger_set, o.avail = (0.0, 10.0), 0
    assert resets.due(o) == pytest.approx(11.3)  # no lower bound yet: the upper
    refused = Hints(remaining=0, limit=10, reset_after=0.84)  # (the same window's reset)
    learning.observe(o, s, 429, refused, 10.66, sent_at=10.65, counted=False)
    assert o.window_lo == pytest.approx(0.65)
    assert o.window_hi == pytest.approx(1.3)  # (refused before the bound: not refuted)
    assert resets.due(o) == pytest.approx(10.975)  # halfway
    o.reset_at = 12.2
    assert resets.due(o) == pytest.approx(11.2)  # EARLY_MAX before the stated reset at most
    o.reset_at = 11.5
    o.window_lo = 1.3 - resets.NARROW / 2
    assert resets.due(o) == pytest.approx(11.3)  # narrow: the upper bound
    o.window_lo, o.latency = 1.2, 0.05  # (four round trips apart are narrow too)
    assert resets.due(o) == pytest.approx(11.3)


def test_a_refusal_stated_in_whole_seconds_bounds_no_window() -> None:
    """Its reset may be the next window's, which others of a fleet opened and spent."""
    o, s = st.OriginState(), st.Settings()
    o.reset_at, o.window_hi, o.window_began = 11.5, 1.3, 10.0
    o.ledger_set, o.avail = (0.0, 10.0), 0
    learning.observe(o, s, 429, _quota(0, 1), 10.66, sent_at=10.65, counted=False)
    assert o.window_lo == 0.0
    assert resets.due(o) == pytest.approx(11.3)


def test_a_refusal_after_the_bound_refutes_it() -> None:
    """A limiter whose windows do not begin at their first request: the stated reset alone."""
    p = Pacer(probe=0)
    t = p.track(ORIGIN)
    o = _state(p)
    o.reset_at, o.window_hi, o.window_began = 3.0, 1.0, 1.0
    o.ledger_set = (0.0, 1.0)
    assert resets.due(o) == pytest.approx(2.0)
    t.acquire(2.1)
    t.sent()
    t.observe(429, Hints(remaining=0, limit=10, reset_after=0.89), 2.11, sent_at=2.1)
    assert o.window_hi == resets.REFUTED
    assert resets.due(o) == o.reset_at


@pytest.mark.herd
@pytest.mark.parametrize("phase", [0.0, 0.4, 0.8])
def test_an_epoch_reset_rounded_up_does_not_lock_a_client_out_of_every_other_window(
    phase: float, wall_on_trio: Callable[..., None]
) -> None:
    """
    ``X-RateLimit-Reset`` in whole epoch seconds, a window that begins at its first request.

    Opened at the stated reset, each window's true reset fell just after a whole second, was
    stated a second late, and the client lost every other window (1.84x at some phases).
    """
    wall_on_trio(1_700_000_000 + phase)
    result = run_herd(FixedWindow(10, 1.0), "github", 60, stagger=0.01, spread=0.002)
    assert result.failed == 0
    assert result.ratio <= 1.35
    assert result.extra_429s_per_call <= 0.05


@pytest.mark.parametrize(
    ("reset_after", "grain"),
    [(1, 1.0), (60.0, 1.0), (1.5, 0.0), (0.0, 0.0), (0.999, 0.0), (math.inf, 0.0)],
)
def test_the_grain_of_a_stated_reset(reset_after: float, grain: float) -> None:
    """Whole seconds (an int too) are coarse; fractions, zero and infinity are not."""
    assert resets.grain(reset_after) == grain
