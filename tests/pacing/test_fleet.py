"""
The rate controller for limiters that say nothing but 429, in fleets that share nothing.

N processes, each with its own pacer, against one limiter, in virtual time (see
:func:`~smoothclient.tools.limiters.run_herd`).  Medians over a few seeds: trio shuffles
task order, and one seed is one draw of everyone's jitter.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from smoothclient import Hints
from smoothclient.pacing import admission as adm
from smoothclient.pacing import controller, learning
from smoothclient.pacing import state as st
from smoothclient.tools.limiters import (
    FixedWindow,
    Limiter,
    Style,
    TokenBucket,
    Verdict,
    run_herd,
)

#: Nine draws: trio's task order is not seeded (equal deadlines wake in an order of memory
#: addresses), so a median over five still crossed a bound about once in twenty runs.
SEEDS = range(9)


def nginx() -> TokenBucket:
    """nginx ``limit_req`` 10 r/s burst 5 nodelay: a bucket of 6, bare 429s."""
    return TokenBucket(10, 1.0, 6)


def retry_after_only() -> TokenBucket:
    """5 r/s, a bucket of 3, ``Retry-After: 1`` on every 429 and nothing else."""
    return TokenBucket(5, 1.0, 3)


@pytest.mark.herd
@pytest.mark.parametrize("procs", [3, 6])
@pytest.mark.parametrize(
    ("make", "style", "retry_after"),
    [(nginx, "bare", None), (retry_after_only, "retry-after", 1.0)],
    ids=["bare 429", "Retry-After only"],
)
def test_a_fleet_sharing_nothing_sends_few_extra_429s(
    make: Callable[[], Limiter], style: Style, retry_after: float | None, procs: int
) -> None:
    """Beyond the unavoidable first wave, at most half a 429 per call; near the ideal time."""
    results = [
        run_herd(make(), style, 20, procs=procs, retry_after=retry_after, seed=seed)
        for seed in SEEDS
    ]
    assert all(r.failed == 0 for r in results)
    assert statistics.median(r.extra_429s_per_call for r in results) <= 0.5
    assert statistics.median(r.ratio for r in results) <= 1.75


@pytest.mark.herd
@pytest.mark.parametrize("procs", [3, 6])
def test_a_fleet_whose_first_process_took_the_whole_burst_drains_near_the_ideal(
    procs: int,
) -> None:
    """
    Processes 10 ms apart: the first takes nginx's whole burst, the others see only 429s.

    Those are paced from the floor (half a request a second) and slow-start from there; the
    first finishes within two seconds and leaves the limiter to them.  They took four seconds
    to find it (1.74 times the ideal with three processes): a success at the floor grew the
    rate by a quarter, the slot already owed stayed where the old rate had put it, and the
    requests waiting for it slept until then whatever the new rate.
    """
    results = [
        run_herd(nginx(), "bare", 20, procs=procs, proc_stagger=0.01, seed=seed) for seed in SEEDS
    ]
    assert all(r.failed == 0 for r in results)
    assert statistics.median(r.extra_429s_per_call for r in results) <= 0.5
    assert statistics.median(r.ratio for r in results) <= 1.5


def _at_the_floor() -> tuple[st.OriginState, st.Settings]:
    """A process whose first wave was all throttled: paced at one request an EPOCH."""
    o, s = st.OriginState(), st.Settings(probe=0)
    o.first_seen = 0.0
    for _ in range(controller.YOUNG_EVIDENCE):
        learning.observe(o, s, 429, Hints(), 0.01, sent_at=0.0, counted=False)
    assert o.pace.rate == 1 / controller.EPOCH
    return o, s


def test_a_process_that_lost_the_first_wave_probes_within_an_epoch() -> None:
    """It measured under one request an EPOCH got through: its next slot is an EPOCH on."""
    o, s = _at_the_floor()
    assert adm.acquire(o, s, 0.01, 0.01, None).delay == 0.0
    assert o.pace.earliest(0.02) == pytest.approx(0.01 + controller.EPOCH)
    p, q = st.OriginState(), st.Settings(probe=0, learned_floor=2.0)
    p.first_seen = 0.0
    for _ in range(controller.YOUNG_EVIDENCE):
        learning.observe(p, q, 429, Hints(), 0.01, sent_at=0.0, counted=False)
    assert p.pace.rate == 2.0  # never below the floor


def _slow_start(before: int, last: int, *, until: float = 3.0) -> st.OriginState:
    """
    From the floor, ``before`` successes spread over [0.5, until - 1), then ``last`` in the
    EPOCH before ``until``, then a throttle just after it.
    """
    o, s = _at_the_floor()
    span = until - 1.5
    times = [0.5 + span * i / before for i in range(before)]
    times += [until - 1.0 + i / last for i in range(last)]
    for at in times:
        learning.observe(o, s, 200, Hints(), at + 0.002, sent_at=at, counted=False)
    learning.observe(o, s, 429, Hints(), until + 0.002, sent_at=until, counted=False)
    return o


def test_a_cut_leaves_out_the_tokens_a_bucket_banked_during_a_slow_start() -> None:
    """
    A slow start past a bucket's rate drains what it banked: its last EPOCH overstates the
    rate.  What got through since the last throttle (the bucket was full at both) does not.
    """
    o = _slow_start(14, 16)
    assert o.pace.rate == pytest.approx(30 / (3.002 - 0.01))  # not 16
    assert o.through == 0  # counted afresh from this throttle


@pytest.mark.parametrize(
    ("before", "last", "until"),
    [(4, 6, 3.0), (30, 16, 4.6)],
    ids=["too few successes (a fleet's share)", "the last throttle too long ago"],
)
def test_a_cut_takes_its_epoch_without_enough_evidence_since_the_last_throttle(
    before: int, last: int, until: float
) -> None:
    """A share read low by a success or two, or over an idle spell, is no bound of the rate."""
    o = _slow_start(before, last, until=until)
    assert o.pace.rate == pytest.approx(last)


def test_a_raised_rate_moves_the_slot_already_owed() -> None:
    """At a request a second, a success that raises the rate shortens the wait for the next."""
    o, s = _at_the_floor()
    assert adm.acquire(o, s, 1.0, 1.0, None).delay == 0.0  # the next one goes at 1.0 ...
    o.waiting -= 1
    learning.observe(o, s, 200, Hints(), 1.002, sent_at=1.0, counted=False)
    assert o.pace.rate == pytest.approx(1.5)  # ... gets through: raised by half a request
    assert o.pace.earliest(1.002) == pytest.approx(1.0 + 1 / 1.5, abs=0.01)  # not 2.0


def test_a_request_far_from_its_slot_in_a_slow_start_asks_again_halfway() -> None:
    """A rate raised while it waits applies to it within half its wait, not after all of it."""
    o, s = _at_the_floor()
    adm.acquire(o, s, 0.01, 0.01, None)  # the slot at once; the next is 1 s on
    answer = adm.acquire(o, s, 0.02, 0.02, None)
    assert not answer.final
    assert answer.delay <= 0.5
    # a gate stated by the server does not move: asked for again just before it opens
    o.gate = 5.0
    assert adm.acquire(o, s, 0.02, 0.02, None).delay == pytest.approx(5.0 - 0.02 - st.HORIZON / 2)


def test_a_ceiling_is_refuted_by_successes_not_by_an_idle_epoch() -> None:
    """
    At a six-process fleet's share of a 5 req/s limiter (under one request a second), an
    EPOCH without a throttle holds one success or none: no evidence that the others are
    done.  Refuted on it, the slow start resumed and overshot again and again.
    """
    o, s = _at_the_floor()
    o.pace.rate, o.ceiling = 0.8, 0.8
    now = 1.0
    for _ in range(controller.REFUTE_EVIDENCE - 1):
        now += 1.25
        learning.observe(o, s, 200, Hints(), now, sent_at=now - 0.01, counted=False)
    assert o.ceiling == 0.8  # still the limit: the rate grew additively
    now += 1.25
    learning.observe(o, s, 200, Hints(), now, sent_at=now - 0.01, counted=False)
    assert o.ceiling == math.inf


@dataclass
class Logged(TokenBucket):
    """A token bucket that remembers when it admitted a request."""

    admitted: list[float] = field(default_factory=list)

    def hit(self, now: float) -> Verdict:
        verdict = super().hit(now)
        if verdict.admitted:
            self.admitted.append(now)
        return verdict


def test_a_limiters_first_throttle_measures_no_share_of_noise() -> None:
    """
    A cut on a limiter's first throttle (one in forty) that lands a little above its rate.

    A few more throttles follow: the share rose from 1 in 40, but that share was measured
    on one throttle.  Read as noise, the cut was undone and throttles ignored for ten
    seconds: a storm (a single pacer at 40 req/s sent 700 429s for 400 calls).
    """
    o, s = st.OriginState(), st.Settings(probe=0)
    o.first_seen, o.learned, o.ceiling = 0.0, True, math.inf
    o.pace.rate = 55.0
    now = 2.0
    o.spell_since, o.last_answer = 0.0, now  # (answering since it was first seen)
    for _ in range(40):  # a second at the limiter's rate, all through
        now += 1 / 40
        learning.observe(o, s, 200, Hints(), now, sent_at=now - 0.002, counted=False)
    learning.observe(o, s, 429, Hints(), now + 0.001, sent_at=now, counted=False)
    assert o.pace.rate is not None
    cut = o.pace.rate
    assert cut <= 42.0
    for i in range(20):  # cut a little above the limiter's 40 req/s: a few more throttles
        now += 1 / cut
        status = 429 if i % 5 == 4 else 200
        learning.observe(o, s, status, Hints(), now, sent_at=now - 0.002, counted=False)
    assert o.pace.rate <= cut  # not undone to 55 req/s
    assert o.noise_until < now


@pytest.mark.herd
@pytest.mark.parametrize("rate", [10, 40])
def test_one_pacer_reaches_the_admitted_rate_within_seconds(rate: int) -> None:
    """Alone, a learned rate gets 90% of what the limiter admits from the fifth second on."""
    limiter = Logged(rate, 1.0, 6)
    result = run_herd(limiter, "bare", rate * 10)
    assert result.failed == 0
    got = sum(1 for t in limiter.admitted if 4.0 <= t < 9.0)
    assert got >= 0.9 * rate * 5
    assert result.extra_429s_per_call <= 0.1


def test_a_cut_into_a_limiter_the_others_keep_full_is_not_undone_as_noise() -> None:
    """
    Nothing but throttles, and still mostly throttles after the cut: the rest of a fleet.

    Noise (a share of 429s whatever the rate) is told by most requests getting through; here
    undoing the cut would make the process unlimited for a while: a storm of 429s.
    """
    o, s = st.OriginState(), st.Settings(probe=0)
    o.first_seen = 0.0
    for _ in range(controller.YOUNG_EVIDENCE):  # a herd's first wave: all rejected
        learning.observe(o, s, 429, Hints(), 0.01, sent_at=0.0, counted=False)
    paced = o.pace.rate
    assert paced == 1 / controller.EPOCH  # paced, not left to backoff
    for _ in range(controller.YOUNG_EVIDENCE):  # the rest of the wave, answered after the cut
        learning.observe(o, s, 429, Hints(), 0.02, sent_at=0.0, counted=False)
    now = 0.02
    while now < 3.0:  # its retries, at its rate, still mostly rejected
        now += 1.0 / paced
        status = 200 if int(now) % 3 == 0 else 429
        learning.observe(o, s, status, Hints(), now, sent_at=now - 0.01, counted=False)
        assert o.pace.rate is not None
        assert o.pace.rate <= 2 * paced


def test_a_cut_that_measured_nothing_sets_no_ceiling() -> None:
    """
    At the floor, a second throttle finds nothing delivered in the last second: no measure.

    So the slow start that follows is not capped there: once the others of the fleet are
    done, the rate climbs back multiplicatively, not by :data:`PROBE_GAIN` a second.
    """
    o, s = st.OriginState(), st.Settings(probe=0)
    o.first_seen = 0.0
    for _ in range(controller.YOUNG_EVIDENCE):
        learning.observe(o, s, 429, Hints(), 0.01, sent_at=0.0, counted=False)
    o.latency = 0.002  # (answered with a success once: see the next test)
    learning.observe(o, s, 429, Hints(), 2.0, sent_at=1.99, counted=False)
    assert o.pace.rate == s.learned_floor
    now = 2.0
    for _ in range(6):
        now += 0.25
        learning.observe(o, s, 200, Hints(), now, sent_at=now - 0.01, counted=False)
    assert o.pace.rate is not None
    assert o.pace.rate >= s.learned_floor + 6 * 0.5


def test_a_process_never_served_keeps_probing_an_epoch_apart() -> None:
    """
    All its requests turned away: its one request an EPOCH is a guess, not halved.

    A fleet's others held the limiter (six processes against a concurrency limit of five:
    the one whose first request was turned away).  Halved, its next probe went two seconds
    on, after the others were done: 2.4x the ideal in virtual time, 1.4x without.
    """
    o, s = _at_the_floor()
    learning.observe(o, s, 429, Hints(), 1.02, sent_at=1.01, counted=False)
    assert o.pace.rate == 1 / controller.EPOCH
    learning.observe(o, s, 429, Hints(), 2.02, sent_at=2.01, counted=False)
    assert o.pace.rate == 1 / controller.EPOCH


def test_a_ceiling_no_throttle_confirms_for_an_epoch_is_refuted() -> None:
    """
    Cut to its share of a fleet, then the others are done: the limiter has room to spare.

    A whole EPOCH at the measured ceiling without a throttle refutes it: the slow start
    resumes instead of climbing by PROBE_GAIN a second (an nginx 3x20 fleet's last process
    crawled at 1-3 req/s for five seconds alone: 1.9x the ideal).
    """
    o, s = st.OriginState(), st.Settings(probe=0)
    o.first_seen = 0.0
    for _ in range(controller.YOUNG_EVIDENCE):
        learning.observe(o, s, 429, Hints(), 0.01, sent_at=0.0, counted=False)
    now = 0.01
    for _ in range(8):  # slow start: 0.5 req/s up to 2 and beyond
        now += 0.25
        learning.observe(o, s, 200, Hints(), now, sent_at=now - 0.01, counted=False)
    now += 0.25
    learning.observe(o, s, 429, Hints(), now, sent_at=now - 0.01, counted=False)
    cut = o.pace.rate
    assert cut is not None
    assert o.ceiling == cut  # measured: what got through in the last second
    for _ in range(12):  # three seconds at the cut rate, no throttle
        now += 0.25
        learning.observe(o, s, 200, Hints(), now, sent_at=now - 0.01, counted=False)
    assert o.ceiling == math.inf
    assert o.pace.rate is not None
    assert o.pace.rate >= cut + 3.0  # not cut + 3 * PROBE_GAIN


def _at_a_measured_ceiling(rate: float) -> tuple[st.OriginState, st.Settings]:
    """An origin paced at the rate its last cut measured getting through."""
    o, s = st.OriginState(known=True, learned=True, ceiling=rate, measured=rate), st.Settings()
    o.pace.rate = rate
    o.last_throttle = o.last_cut = 0.0
    return o, s


def _successes(o: st.OriginState, s: st.Settings, count: int, gap: float) -> float:
    """``count`` successes ``gap`` apart from time 0, each learned from; the last one's time."""
    now = 0.0
    for _ in range(count):
        now += gap
        controller.recovered(o, s, now, now - 0.01)
    return now


def test_a_first_probe_past_the_ceiling_refused_holds_the_next_ones_longer() -> None:
    """
    A limiter with no room above its rate (a bucket of no burst) refuses the first early request.

    Probing after each success there cost a 429 and an interval every other request (1 r/s,
    burst 1: 1.6x the ideal, 0.95 429s a call beyond the first wave).  Each first probe step
    refused doubles the successes waited at the measured rate before the next, up to HOLD.
    """
    o, s = _at_a_measured_ceiling(20.0)
    now, holds = 0.0, []
    for _ in range(5):
        for _ in range(o.hold):  # held: the rate stays
            now += 0.05
            controller.recovered(o, s, now, now - 0.01)
            assert o.pace.rate == 20.0
        now += 0.05
        controller.recovered(o, s, now, now - 0.01)
        assert o.pace.rate == 20.0 + controller.PROBE_GAIN / 20.0  # a probe step
        now += 0.04
        controller.noted(o, now)  # ... refused
        o.pace.rate = 20.0  # (the cut: see throttled)
        holds.append(o.hold)
    assert holds == [1, 3, 7, controller.HOLD, controller.HOLD]


def test_probes_that_got_through_for_a_while_halve_the_hold() -> None:
    """A limiter with room above the measured rate (a bucket's burst): probe sooner again."""
    o, s = _at_a_measured_ceiling(10.0)
    o.hold = 8
    now = _successes(o, s, 11, 0.05)
    assert o.probed == 3
    controller.noted(o, now + 0.05)
    assert o.hold == 4
    assert o.probed == 0


def test_a_refuted_ceiling_is_probed_past_by_the_slow_start() -> None:
    """
    At a slow rate an EPOCH at the ceiling refutes it before the hold ends: the slow start's
    first step past the old ceiling is a probe too, and refused it holds the next longer.
    """
    o, s = _at_a_measured_ceiling(1.0)
    o.hold = 3
    now = _successes(o, s, 4, 1.0)
    assert o.ceiling == math.inf
    assert o.pace.rate == 1.5
    controller.noted(o, now + 0.7)
    assert o.hold == 7


def test_forgetting_a_learned_rate_forgets_its_hold() -> None:
    o, _ = _at_a_measured_ceiling(1.0)
    o.hold, o.probed = 7, 1
    controller.forget(o)
    assert (o.measured, o.hold, o.probed) == (math.inf, 0, 0)


def test_an_early_probe_beaten_to_a_new_window_is_no_miss() -> None:
    """
    A window's early probe rejected by a window that had already reset (others took it).

    Its answer states a later reset than the one probed: the probe was not early for the
    server, only late for the fleet.  Counted as a miss, three of them in a row made every
    process of a fleet wait for slowapi's stated reset, a second late: two seconds a window.
    """
    o, s = st.OriginState(), st.Settings(probe=0)
    o.known, o.kind = True, "window"
    spent = Hints(remaining=0, limit=10, reset_after=2.0)
    learning.observe(o, s, 200, spent, 0.0, sent_at=0.0, counted=False)
    assert adm.acquire(o, s, 0.0, 0.0, None).final is False  # waits: the probe goes halfway
    probe = adm.acquire(o, s, 1.0, 1.0, None)
    assert probe.final
    assert probe.delay == 0.0
    assert o.early_sent is not None
    o.waiting, o.in_flight = 0, 1
    later = Hints(remaining=0, limit=10, reset_after=1.9)  # a new window's reset: 2.9, not 2.0
    learning.observe(o, s, 429, later, 1.0, sent_at=1.0, counted=True)
    assert o.early_misses == 0
    assert o.early_lead == pytest.approx(1.0)


def test_an_early_probe_beaten_to_a_new_window_goes_as_much_earlier_next_time() -> None:
    """
    The new window that rejected an early probe began its longest time-to-reset before its
    stated reset: the probe came that late into it, and the next goes that much earlier.

    Kept at the same lead, a process of a fleet of twelve sharing nothing against slowapi
    came a tenth of a second into every window, already full, twenty windows in a row.  A
    probe that is first into its window (its answer states the whole span) keeps its lead.
    """
    o, s = st.OriginState(), st.Settings(probe=0)
    o.known, o.kind = True, "window"
    learning.observe(
        o, s, 200, Hints(remaining=0, limit=10, reset_after=1.0), 0.0, sent_at=0.0, counted=False
    )
    probe = adm.acquire(o, s, 0.5, 0.5, None)  # halfway to the stated reset: a lead of 0.5
    assert probe.final
    assert o.early_sent == (0.5, 1.0)
    o.waiting, o.in_flight = 0, 1
    # a window that began at 0.45 (its reset stated at 1.45, a span of 1.0 after it)
    late = Hints(remaining=0, limit=10, reset_after=0.95)
    learning.observe(o, s, 429, late, 0.5, sent_at=0.5, counted=True)
    assert o.early_misses == 0
    assert o.early_lead == pytest.approx(0.55)

    first = st.OriginState()
    first.known, first.kind = True, "window"
    learning.observe(
        first,
        s,
        200,
        Hints(remaining=0, limit=10, reset_after=1.0),
        0.0,
        sent_at=0.0,
        counted=False,
    )
    assert adm.acquire(first, s, 0.5, 0.5, None).final
    first.waiting, first.in_flight = 0, 1
    through = Hints(remaining=9, limit=10, reset_after=1.0)  # the window's first: all of it
    learning.observe(first, s, 200, through, 0.5, sent_at=0.5, counted=True)
    assert first.early_lead == pytest.approx(0.5)


def test_a_throttle_sent_before_the_cut_took_effect_does_not_cut_again() -> None:
    """
    A cut takes effect after the slot already owed, an interval of the old rate later.  A
    throttle of the request sent in it says nothing of the new rate; cut again on it (its
    EPOCH re-counting the first throttle), a fleet's slow process went from 3 to 2 to 1 req/s
    in a third of a second, then crawled alone once the others were done.
    """
    o, s = _at_the_floor()
    for now in (1.0, 1.6, 2.2, 2.7):  # slow start from 1 to 3 req/s
        learning.observe(o, s, 200, Hints(), now, sent_at=now - 0.002, counted=False)
    assert o.pace.rate == pytest.approx(3.0)
    learning.observe(o, s, 429, Hints(), 3.1, sent_at=3.098, counted=False)
    assert o.pace.rate == pytest.approx(2.0)  # two got through in the last second
    # the slot owed at the old rate, a third of a second on: sent before the cut took effect
    learning.observe(o, s, 429, Hints(), 3.432, sent_at=3.43, counted=False)
    assert o.pace.rate == pytest.approx(2.0)
    assert o.ceiling == pytest.approx(2.0)
    # a throttle at the new spacing is evidence against the new rate: it cuts
    learning.observe(o, s, 429, Hints(), 3.932, sent_at=3.93, counted=False)
    assert o.pace.rate is not None
    assert o.pace.rate < 2.0


# ---------------------------------------------------------------------- windows: each its share


@pytest.mark.herd
@pytest.mark.parametrize("procs", [3, 6])
def test_a_fleet_sharing_nothing_takes_its_shares_of_a_fixed_window(procs: int) -> None:
    """
    Every process reads the same ``X-RateLimit-Remaining``: each sends only its share of it.

    Each one sending all a window held at its reset earned the fleet five windows' worth of
    429s a window (1.5 extra 429s a call with six processes, 0.4 with three).
    """
    results = [run_herd(FixedWindow(10, 1.0), "x", 20, procs=procs, seed=seed) for seed in SEEDS]
    assert all(r.failed == 0 for r in results)
    # (0.10-0.19 when any call took a free slot, 0.13-0.27 with the slots going to the waiters
    # nearest their deadlines first: a herd's order of sends differs)
    assert statistics.median(r.extra_429s_per_call for r in results) <= 0.3
    assert statistics.median(r.ratio for r in results) <= 1.45  # a window late at most


def _window_tally(
    top: float, low: float, ok: int, throttled: int, share: float = 1.0
) -> st.OriginState:
    o = st.OriginState(kind="window", limit=10.0, share=share)
    o.period_top, o.period_low = top, low
    o.period_sent, o.period_ok, o.period_throttled = ok + throttled, ok, throttled
    return o


def test_a_throttled_window_cuts_the_share_to_the_part_that_got_through() -> None:
    """A full window (the limit admitted), 2 of ours among them: a share of 0.2."""
    o = _window_tally(top=10, low=0, ok=2, throttled=8)
    learning._share(o)
    assert o.share == pytest.approx(0.2)


def test_a_share_never_falls_below_one_request_a_window() -> None:
    o = _window_tally(top=10, low=0, ok=0, throttled=5)
    learning._share(o)
    assert o.share == pytest.approx(0.1)


def test_a_window_with_room_left_raises_the_share() -> None:
    """
    No throttle, room left: to its part of what the window admitted, so the room is filled.

    At most doubled (its answers may have come before the others' requests counted), one
    request more at least, and never past all of it.
    """
    o = _window_tally(top=10, low=7, ok=2, throttled=0, share=0.2)
    learning._share(o)
    assert o.share == pytest.approx(0.4)  # 2 of the 3 it saw admitted: 2/3, doubled at most
    o = _window_tally(top=10, low=2, ok=2, throttled=0, share=0.2)
    learning._share(o)
    assert o.share == pytest.approx(0.3)  # 2 of 8: 0.25, one request more at least
    o = _window_tally(top=10, low=6, ok=4, throttled=0, share=0.9)
    learning._share(o)
    assert o.share == 1.0


def test_a_window_others_filled_without_a_throttle_keeps_the_share() -> None:
    o = _window_tally(top=10, low=0, ok=2, throttled=0, share=0.2)
    learning._share(o)
    assert o.share == pytest.approx(0.2)


def test_a_window_nothing_was_sent_into_says_nothing() -> None:
    o = _window_tally(top=10, low=0, ok=0, throttled=0, share=0.4)
    learning._share(o)
    assert o.share == pytest.approx(0.4)


def test_a_client_alone_keeps_all_of_every_window() -> None:
    """Its 429s are its own first wave: all the window admitted was its own."""
    o = _window_tally(top=10, low=0, ok=10, throttled=50)
    learning._share(o)
    assert o.share == 1.0


_ALONE = st.Settings(probe=0)


def _first_report_after_the_reset(
    o: st.OriginState, settings: st.Settings = _ALONE, status: int = 200
) -> None:
    """The window reset at 1.0: the first answer after it says 9 of 10 are left."""
    learning.observe(
        o,
        settings,
        status,
        Hints(remaining=9, limit=10, reset_after=1.0),
        1.01,
        sent_at=1.0,
        counted=False,
    )


def test_a_new_window_admits_only_the_share_of_what_is_left() -> None:
    o = st.OriginState(kind="window", limit=10.0, share=0.25, known=True)
    o.avail, o.reset_at = 0.0, 1.0
    _first_report_after_the_reset(o)
    assert o.avail == 2  # a quarter of 9, rounded


def test_a_request_that_opened_the_window_is_part_of_the_share() -> None:
    """
    The answer that says a window began is its own request's, admitted into it: counted in.

    A tenth of ten is that one request; on top of it, each process of a fleet of twelve sent
    two requests into each window of ten (its probe, then its share), and the window turned
    away a request for each it admitted.
    """
    o = st.OriginState(kind="window", limit=10.0, share=0.1, known=True)
    o.avail, o.reset_at = 0.0, 1.0
    _first_report_after_the_reset(o)
    assert o.avail == 0
    refused = st.OriginState(kind="window", limit=10.0, share=0.1, known=True)
    refused.avail, refused.reset_at = 0.0, 1.0
    _first_report_after_the_reset(refused, status=429)
    assert refused.avail == 1  # (its request did not get in: one a window, at least)


def test_a_bucket_keeps_all_of_what_is_left() -> None:
    """A bucket's reset moves on with every answer: no window's tally, its mirror paces it."""
    o = st.OriginState(kind="bucket", limit=10.0, known=True)
    o.avail, o.reset_at = 0.0, 1.0
    o.period_top, o.period_low, o.period_sent, o.period_throttled = 10.0, 0.0, 5, 5
    _first_report_after_the_reset(o)
    assert o.share == 1.0
    assert o.avail == 9


def test_a_state_the_whole_fleet_shares_keeps_all_of_every_window() -> None:
    """Through one store the tally is the fleet's (less lost updates): no share to learn."""
    o = _window_tally(top=10, low=0, ok=2, throttled=8)
    o.known, o.avail, o.reset_at = True, 0.0, 1.0
    _first_report_after_the_reset(o, st.Settings(probe=0, shared=True))
    assert o.share == 1.0
    assert o.avail == 9


@pytest.mark.parametrize(
    ("status", "hints", "learned", "waits"),
    [
        (200, Hints(), False, True),
        (200, Hints(remaining=5, limit=10, reset_after=1), True, True),
        (304, Hints(remaining=5), False, True),
        (200, Hints(), True, False),  # evidence of the rate the fleet got through
        (200, Hints(remaining=0, limit=10, reset_after=1), False, False),
        (200, Hints(retry_after=1.0), False, False),
        (429, Hints(), False, False),
        (503, Hints(), False, False),
    ],
)
def test_which_answers_a_fleet_can_learn_a_step_later(
    status: int, hints: Hints, learned: bool, waits: bool
) -> None:
    o = st.OriginState(known=True, learned=learned)
    assert learning.can_wait(o, status, hints) is waits


@pytest.mark.parametrize(
    "probe",
    [
        {"known": False},
        {"known": True, "reset_probe": 3.0},
        {"known": True, "early_sent": (3.0, 4.0)},
    ],
)
def test_an_answer_others_wait_for_never_waits(probe: dict[str, object]) -> None:
    """A probe is out: the others hold back until it is answered."""
    o = st.OriginState(**probe)  # type: ignore[arg-type]
    assert not learning.can_wait(o, 200, Hints(remaining=5, limit=10, reset_after=1))
    assert learning.can_wait(st.OriginState(known=True), 200, Hints(remaining=5))


def test_a_cut_followed_by_nothing_but_throttles_is_not_undone_as_noise() -> None:
    """
    A limiter that counts what it refuses (HAProxy's stick table) after a cut: a penalty.

    A burst got through, then throttles: cut on a share of 3 in 11, not shown to be most.
    After it, every answer was a throttle (most of them to requests in flight at the cut):
    the share rose.  Read as noise, the cut was undone to the unpaced rate its episode began
    at, and throttles were ignored for ten seconds: one client of 60 calls sent 600 requests
    a second into HAProxy for ten seconds.  Noise is told by most answers still successes.
    """
    o, s = st.OriginState(), st.Settings(probe=0)
    o.first_seen = 0.0
    now = 5.0
    o.spell_since, o.last_answer = 0.0, now  # (answering since it was first seen)
    for _ in range(8):  # a burst through, unpaced
        now += 0.005
        learning.observe(o, s, 200, Hints(), now, sent_at=now - 0.002, counted=False)
    o.last_cut = 4.0  # (a cut of an earlier episode, since forgotten)
    for _ in range(2):  # then throttles (of requests sent before that cut: no cut)
        now += 0.005
        learning.observe(o, s, 429, Hints(), now, sent_at=3.9, counted=False)
    sent = now
    now += 0.005
    learning.observe(o, s, 429, Hints(), now, sent_at=sent, counted=False)  # the cut
    assert o.pace.rate is not None
    cut, cut_at = o.pace.rate, now
    for _ in range(4):  # requests in flight at the cut, refused
        now += 0.003
        learning.observe(o, s, 429, Hints(), now, sent_at=sent, counted=False)
    for _ in range(6):  # and those sent after it, at its rate: refused too (the penalty)
        now = max(now, cut_at + 0.45) + 1 / cut
        learning.observe(o, s, 429, Hints(), now, sent_at=now - 0.002, counted=False)
        assert o.pace.rate is not None  # never unpaced
        assert o.pace.rate <= cut
    assert o.noise_until < now


def test_a_cut_undone_as_noise_leaves_a_rate_above_what_gets_through() -> None:
    """
    Random throttles (30%, whatever the rate) on an unpaced origin: the cut is undone.

    Undone to no rate at all, with throttles ignored for ten seconds, a limiter misread as
    noise would have every retry at once; the undo leaves twice what got through instead
    (about the rate offered here), which throttles of noise never cut.
    """
    rng = random.Random(5)
    o, s = st.OriginState(), st.Settings(probe=0)
    o.first_seen = 0.0
    now, undone = 0.0, False
    while now < 5.0 and not undone:  # 200 req/s offered (or the cut rate), 30% throttled
        now += 1 / min(200.0, o.pace.rate or 200.0)
        status = 429 if rng.random() < 0.3 else 200
        learning.observe(o, s, status, Hints(), now, sent_at=now - 0.002, counted=False)
        undone = o.noise_until > now
    assert undone
    got = sum(1 for t in o.successes if t >= now - controller.EPOCH)
    assert o.pace.rate is not None
    assert o.pace.rate >= 1.5 * got  # not cut below what gets through
