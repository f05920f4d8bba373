"""
The limiter model and the rate controller, against every kind of limiter, in virtual time.

Each herd runs through the real async transport on trio's virtual clock (milliseconds of
real time); the bounds are looser than the benchmark targets because trio shuffles task order.
"""

from __future__ import annotations

import copy
import inspect
import random
import statistics
from collections.abc import Callable

import pytest

from smoothclient import Hints, Pacer
from smoothclient.pacing import admission as adm
from smoothclient.pacing import controller, learning
from smoothclient.pacing import state as st
from smoothclient.pacing.store import KeyTracker, MemoryCell
from smoothclient.tools.limiters import (
    Concurrency,
    FixedWindow,
    Limiter,
    MovingWindow,
    Noisy,
    PenaltyBox,
    Style,
    TokenBucket,
    run_herd,
)

ORIGIN = "http://api.test:80"


def tracker(p: Pacer) -> KeyTracker:
    found = p.track(ORIGIN)
    assert isinstance(found.cell, MemoryCell)
    return found


def state_of(t: KeyTracker) -> st.OriginState:
    """The state an in-memory tracker keeps."""
    assert isinstance(t.cell, MemoryCell)
    return t.cell.state


@pytest.mark.herd
@pytest.mark.parametrize(
    ("name", "limiter", "style", "calls", "retry_after"),
    [
        ("token bucket, IETF headers", TokenBucket(10, 1.0, 5), "ietf", 60, None),
        ("token bucket, X-RateLimit (reset = next token)", TokenBucket(10, 1.0, 5), "x", 60, None),
        (
            "token bucket, GitHub-style whole-second reset",
            TokenBucket(10, 1.0, 5),
            "github",
            60,
            None,
        ),
        ("leaky bucket, bare 429 (nginx)", TokenBucket(10, 1.0, 6), "bare", 60, None),
        ("token bucket, only Retry-After: 1", TokenBucket(5, 1.0, 3), "retry-after", 30, 1.0),
        ("fixed window, fractional epoch reset", FixedWindow(10, 1.0), "x", 60, None),
        ("moving window", MovingWindow(20, 1.0), "x", 100, None),
    ],
)
def test_one_client_drains_near_the_ideal_without_extra_429s(
    name: str,
    limiter: Limiter,
    style: Style,
    calls: int,
    retry_after: float | None,
    wall_on_trio: Callable[..., None],
) -> None:
    """Every limiter kind: close to the drain time it allows, hardly a 429 past the first wave."""
    wall_on_trio()  # epoch resets read on the virtual clock (on a loaded machine the wall's
    # clock ran ahead of it, and a moving window took 1.5x the ideal in a CI run)
    result = run_herd(limiter, style, calls, retry_after=retry_after)
    assert result.failed == 0
    assert result.ratio <= 1.45, name
    assert result.extra_429s_per_call <= 0.3, name


@pytest.mark.herd
@pytest.mark.parametrize("service", [0.1, 0.02], ids=["100ms", "20ms"])
def test_a_concurrency_limit_is_paced_by_what_is_in_flight(service: float) -> None:
    """
    nginx ``limit_conn``: 5 at a time, whatever the rate; the herd's first wave gets 429s.

    Read as a rate, its throttles cut the learned rate to what came back in the first EPOCH
    (the probe: one a second, against 50 or 250) and the herd took 3.7 and 17.5 times the
    ideal.  The crowd window holds the rest to what the server serves at a time.  The median
    of three herds: trio shuffles ready tasks at random, and one herd in some forty took 1.61
    where the others took 1.34-1.35 (the same before and after this round's changes).
    """
    results = [run_herd(Concurrency(5, service), "bare", 60) for _ in range(3)]
    assert all(r.failed == 0 for r in results)
    assert statistics.median(r.ratio for r in results) <= 1.45
    assert statistics.median(r.extra_429s_per_call for r in results) <= 0.1


#: Whether learning.observe tells the crowd window when a throttled request went (how long
#: its throttle took tells a fleet's full limiter from a remote rate limiter: crowd.crowded).
CROWD_SEES_SENT_AT = "crowded(o, s, now, counted, sent_at)" in inspect.getsource(learning)


@pytest.mark.herd
@pytest.mark.skipif(
    not CROWD_SEES_SENT_AT,
    reason="learning.observe must pass sent_at to crowd.crowded (issue 34 item 3)",
)
@pytest.mark.parametrize(("procs", "bound"), [(3, 1.6), (6, 1.8)])
def test_a_fleet_sharing_nothing_keeps_a_concurrency_limit_full(procs: int, bound: float) -> None:
    """
    N processes x 20 calls against nginx ``limit_conn 5`` (100 ms a request), sharing nothing.

    The processes that lost the first wave had all their requests turned away, the last one
    "alone": read as a rate's limit, they were paced at a request a second and slow-started
    from there (3 processes: 5.0x the ideal, 6: 2.5x).  Turned away at once, they hold a
    window below one and probe at its pace, and take the places the winners leave (1.4-1.5x
    and 1.3-1.7x in medians over the seeds; the trio order of equal deadlines varies).
    """
    results = [
        run_herd(Concurrency(5, 0.1), "bare", 20, procs=procs, proc_stagger=0.003, seed=seed)
        for seed in range(5)
    ]
    assert all(r.failed == 0 for r in results)
    assert statistics.median(r.ratio for r in results) <= bound
    assert statistics.median(r.extra_429s_per_call for r in results) <= 0.3


@pytest.mark.herd
@pytest.mark.parametrize(
    ("limiter", "style", "calls", "retry_after"),
    [
        (TokenBucket(10, 1.0, 6), "bare", 60, None),
        (TokenBucket(5, 1.0, 3), "retry-after", 30, 1.0),
        (FixedWindow(10, 1.0), "x", 60, None),
    ],
    ids=["bare", "retry-after", "headers"],
)
def test_a_rate_limit_on_a_slow_origin_is_still_paced_by_its_rate(
    limiter: Limiter, style: Style, calls: int, retry_after: float | None
) -> None:
    """
    60 ms a round trip (a remote server): its throttles come back while others are in flight.

    The crowd window takes them until a request turned away alone shows a rate's limit: the
    rate controller then paces it as on a near server, knowing every throttle.  The median of
    three herds: trio shuffles ready tasks at random, and about one herd in twenty on the
    bare bucket had 0.32-0.48 extra 429s a call (the others 0.1-0.3), before and after this
    round's changes.
    """
    results = [
        run_herd(copy.deepcopy(limiter), style, calls, rtt=0.06, retry_after=retry_after)
        for _ in range(3)  # (each herd on a fresh limiter)
    ]
    assert all(r.failed == 0 for r in results)
    assert statistics.median(r.ratio for r in results) <= 1.3
    assert statistics.median(r.extra_429s_per_call for r in results) <= 0.3


@pytest.mark.herd
@pytest.mark.parametrize(("stagger", "spread"), [(0.02, 0.0), (0.02, 0.005), (0.05, 0.01)])
def test_a_herd_from_threads_drains_a_moving_window_near_the_ideal(
    stagger: float, spread: float, wall_on_trio: Callable[..., None]
) -> None:
    """
    Sends and answers interleave, answers overtake each other: still about the ideal.

    slowapi's moving window (its reset stated a second late) against a herd sent as threads
    send it: the calls start over ``stagger`` s, answers take up to ``spread`` longer on their
    way back.  Read in that order, answers once left the last tokens of the first window unspent
    and voted bucket, and the gate then closed until the late reset: 1.26 times the ideal.
    Medians over seeds: one seed's order of sends and answers now and then costs a window
    (1.3-1.5 times the ideal, seen with and without the waiters' queue).  Six seeds, not four:
    trio shuffles the order of ready tasks at random, and the median of four went over 1.15
    in 3-7% of runs (45 runs of six: none).
    """
    wall_on_trio()  # epoch resets read on the virtual clock, whatever the load
    results = [
        run_herd(
            MovingWindow(20, 1.0, reset_bias=1.0), "x", 100, stagger=stagger, spread=spread, seed=s
        )
        for s in range(6)
    ]
    assert all(r.failed == 0 for r in results)
    # (1.15 before a quota a 429 stated spent was closed until its stated reset: the herd
    # paced into a spent moving window got some through; now one probe goes near the reset)
    assert statistics.median(r.ratio for r in results) <= 1.15
    # one herd's order may cost a window and a half: 1.61 in two CI runs, about one herd in a
    # hundred (60 herds at 0c3eac3: none over 1.6, two at 1.54); two such in six are not luck
    ratios = sorted(r.ratio for r in results)
    assert ratios[-2] <= 1.5
    assert ratios[-1] <= 1.75
    assert max(r.extra_429s_per_call for r in results) <= 0.1


@pytest.mark.herd
@pytest.mark.parametrize(
    "limiter",
    [
        FixedWindow(30, 3.0, reset_bias=1.0, truncated=True),
        MovingWindow(30, 3.0, reset_bias=1.0, truncated=True),
    ],
    ids=["fixed", "moving"],
)
def test_a_long_window_stated_late_is_taken_when_its_retry_after_says(
    limiter: Limiter, wall_on_trio: Callable[..., None]
) -> None:
    """
    slowapi on a 3 s window: its reset stated a second late, ``Retry-After`` in between.

    The early probes crept up on the true reset a quarter at a time and ran out just short
    of it; every window after waited the stated reset: 1.33 times the ideal.
    """
    wall_on_trio()
    result = run_herd(limiter, "x", 90)
    assert result.failed == 0
    assert result.ratio <= 1.1
    assert result.extra_429s_per_call <= 0.1


def _probe_early(o: st.OriginState, s: st.Settings, now: float) -> float:
    """Send the next probe of a spent window: when it goes (it is admitted at once then)."""
    for _ in range(100):
        admission = adm.acquire(o, s, now, now, None)
        if admission.final:
            o.waiting, o.in_flight = 0, 1
            return now + admission.delay
        now += admission.delay  # asks again when nearer
    raise AssertionError("never admitted")


def test_when_early_probes_run_out_one_goes_where_retry_after_said() -> None:
    """
    Three early probes rejected: one more goes at the earliest a ``Retry-After`` said.

    Only one: if that one is rejected too, the stated reset is trusted.
    """
    o, s = st.OriginState(), st.Settings(probe=0)
    o.known, o.kind = True, "window"
    spent = Hints(remaining=0, limit=30, reset_after=4.0)
    learning.observe(o, s, 200, spent, 0.0, sent_at=0.0, counted=False)
    assert o.early_lead is None
    stated = 4.0
    probes: list[float] = []
    for _ in range(st.EARLY_MISSES):
        at = _probe_early(o, s, probes[-1] if probes else 0.0)
        probes.append(at)
        said = float(int(stated - at))  # slowapi's Retry-After
        rejected = Hints(remaining=0, limit=30, reset_after=stated - at, retry_after=said)
        learning.observe(o, s, 429, rejected, at, sent_at=at, counted=True)
    # EARLY_MAX before the stated reset at first (never earlier), then a quarter nearer
    assert probes == pytest.approx([3.0, 3.25, 3.4375])
    # they said (truncated) 1, 0 and 0 s: the window takes the next 0.75 s before the stated
    # reset at the earliest, which has passed: the next probe goes at once
    assert _probe_early(o, s, 3.5) == pytest.approx(3.5)
    again = Hints(remaining=0, limit=30, reset_after=0.5, retry_after=0.0)
    learning.observe(o, s, 429, again, 3.5, sent_at=3.5, counted=True)
    assert o.early_misses >= st.EARLY_MISSES  # no more early probes
    assert _probe_early(o, s, 3.5) == pytest.approx(stated)


@pytest.mark.herd
@pytest.mark.parametrize(
    ("limiter", "style", "retry_after"),
    [
        (TokenBucket(10, 1.0, 6), "bare", None),
        (FixedWindow(10, 1.0), "x", None),
        (TokenBucket(5, 1.0, 3), "retry-after", 1.0),
    ],
)
def test_a_fleet_sharing_nothing_finishes_without_starving(
    limiter: Limiter, style: Style, retry_after: float | None
) -> None:
    """Three processes, no shared state: all calls done within 2.5 times the ideal."""
    result = run_herd(limiter, style, 20, procs=3, retry_after=retry_after)
    assert result.failed == 0
    assert result.ratio <= 2.5


@pytest.mark.herd
def test_noisy_429s_do_not_collapse_the_rate() -> None:
    """30% of answers 429 whatever the rate: the throughput stays far above the floor."""
    result = run_herd(Noisy(0.3, retry_in=0.05), "retry-after", 400, retry_after=0.05)
    assert result.failed == 0
    assert 400 / result.elapsed >= 100


def test_a_window_is_recognised_and_waited_out() -> None:
    """Requests sent into a spent quota are rejected: a window; then nothing goes before reset."""
    p = Pacer(probe=0)
    t = tracker(p)
    quota = Hints(remaining=0, limit=10, window=1.0, reset_after=0.6)
    t.acquire(0.0)
    t.sent()
    t.observe(200, quota, 0.0, sent_at=0.0)  # spent until 0.6
    for now in (0.1, 0.2):  # paced into the spent quota (a bucket would admit them)
        assert t.acquire(now).delay == pytest.approx(0.0, abs=1e-9)
        t.sent()
    for now in (0.1, 0.2):  # a window rejects them
        left = Hints(remaining=0, limit=10, window=1.0, reset_after=0.6 - (now + 0.01))
        t.observe(429, left, now + 0.01, sent_at=now)  # the same window: the same reset
    assert state_of(t).kind == "window"
    # nothing goes but one probe, halfway to the stated reset (a reset may be stated late)
    assert t.acquire(0.25).delay == pytest.approx(0.05)  # halfway from 0.0 to 0.6
    t.sent()
    assert not t.acquire(0.3).final  # the others wait for the probe's answer
    t.observe(200, Hints(remaining=9, limit=10, window=1.0, reset_after=1.0), 0.61, sent_at=0.6)
    delays = [t.acquire(0.62).delay for _ in range(9)]
    assert delays == pytest.approx([0.0] * 9, abs=1e-9)  # the new window, at once


def test_a_bucket_is_recognised_and_paced() -> None:
    """Requests sent into a spent quota get through: a bucket, paced by its stated rate."""
    p = Pacer(probe=0)
    t = tracker(p)
    t.acquire(0.0)
    t.sent()
    t.observe(200, Hints(remaining=0, limit=10, window=1.0, reset_after=1.0), 0.0, sent_at=0.0)
    for now in (0.1, 0.2):
        assert t.acquire(now).final
        t.sent()
        t.observe(200, Hints(remaining=0, limit=10, window=1.0, reset_after=1.0), now, sent_at=now)
    assert state_of(t).kind == "bucket"
    assert t.acquire(0.25).delay == pytest.approx(0.05)  # the next token, not the reset


def test_a_ledger_never_spends_more_than_the_server_said_is_left() -> None:
    """Four left: four go at once; the fifth waits for the reset (no rate known)."""
    p = Pacer(probe=0)
    t = tracker(p)
    t.acquire(0.0)
    t.sent()
    t.observe(200, Hints(remaining=4, reset_after=0.5), 0.0, sent_at=0.0)
    assert [t.acquire(0.01).delay for _ in range(4)] == pytest.approx([0.0] * 4, abs=1e-9)
    assert not t.acquire(0.01).final  # nothing more before the reset at 0.5
    assert t.acquire(0.3).delay == pytest.approx(0.2)


def _spent_state() -> tuple[st.OriginState, st.Settings]:
    """A quota of 10 with a 2 s stated reset, spent at t=0 (mirrored at 5 req/s)."""
    o, s = st.OriginState(), st.Settings(probe=0)
    learning.observe(
        o, s, 200, Hints(remaining=0, limit=10, reset_after=2.0), 0.0, sent_at=0.0, counted=False
    )
    assert o.exhausted is not None
    assert o.pace.interval
    return o, s


def test_a_success_with_most_of_the_quota_left_votes_window() -> None:
    """Sent into the spent quota, got through, 8 of 10 left 0.1 s later: a window that reset."""
    o, s = _spent_state()
    learning.observe(
        o, s, 200, Hints(remaining=8, limit=10, reset_after=1.9), 0.1, sent_at=0.05, counted=False
    )
    assert o.evidence < 0
    p, _ = _spent_state()  # the same success leaving what a bucket refills: a bucket's vote
    learning.observe(
        p, s, 200, Hints(remaining=0, limit=10, reset_after=1.9), 0.1, sent_at=0.05, counted=False
    )
    assert p.evidence > 0


def test_a_herd_into_a_window_it_read_as_spent_too_soon_is_no_bucket() -> None:
    """
    The ledger ran out counting requests in flight the server had already counted.

    Their successes went "into the spent quota", but no more got through than the window's
    first report said it held: no bucket's vote (a herd, or a fleet through one store, read a
    window as a bucket and paced it at half its rate).  One more than it held is.
    """
    o, s = st.OriginState(), st.Settings(probe=0)
    reports = [(9, 0.0)] + [(left, 0.05) for left in range(8, -1, -1)]
    for i, (left, sent_at) in enumerate(reports):
        o.in_flight = 9 - i  # the rest of the herd, still in flight
        o.exhausted = (0.01, 2.0) if i else None  # the ledger: spent by the herd in flight
        learning.observe(
            o,
            s,
            200,
            Hints(remaining=left, limit=10, reset_after=1.9),
            0.06,
            sent_at=sent_at,
            counted=True,
        )
    assert o.evidence <= 0  # those with most of it left were a window's votes
    assert o.kind != "bucket"
    o.exhausted, o.evidence = (0.01, 2.0), 0.0
    learning.observe(
        o, s, 200, Hints(remaining=0, limit=10, reset_after=1.8), 0.2, sent_at=0.15, counted=False
    )
    assert o.evidence > 0


def test_requests_sent_right_after_exhaustion_are_no_evidence() -> None:
    """Within SKEW of the exhaustion another process's clock may have told the other story."""
    o, s = _spent_state()
    learning.observe(
        o,
        s,
        200,
        Hints(remaining=0, limit=10, reset_after=1.9),
        0.1,
        sent_at=controller.SKEW / 2,
        counted=False,
    )
    assert o.evidence == 0


@pytest.mark.herd
@pytest.mark.parametrize("phase", [0.6, 0.9])
def test_a_bucket_stating_clock_aligned_resets_is_paced_at_its_rate(
    phase: float, wall_on_trio: Callable[..., None]
) -> None:
    """
    GitHub's headers on a token bucket (10/s, 5 at once): the reset is the next whole second.

    Started late in a second, the first time-to-reset is a fraction of the window, so the rate
    guessed from it is too high; the bucket's rejections of that pace are no window's evidence
    (read as a window, the ledger sent 5 a second: twice the ideal time).
    """
    wall_on_trio(1_700_000_000 + phase)
    result = run_herd(TokenBucket(10, 1.0, 5), "github", 60)
    assert result.failed == 0
    assert result.ratio <= 1.3


def _guessed_spent(reset_after: float) -> tuple[st.OriginState, st.Settings]:
    """A quota of 10 stating no window, spent at t=0 with ``reset_after`` to go."""
    o, s = st.OriginState(), st.Settings(probe=0)
    learning.observe(
        o,
        s,
        200,
        Hints(remaining=0, limit=10, reset_after=reset_after),
        0.0,
        sent_at=0.0,
        counted=False,
    )
    assert o.exhausted is not None
    return o, s


def test_rejections_at_a_rate_guessed_partway_through_a_window_are_no_evidence() -> None:
    """0.1 s before its reset a quota of 10 reads as 100 req/s: a bucket rejects that pace too."""
    o, s = _guessed_spent(0.1)
    assert o.pace.rate == pytest.approx(100)
    for sent in (0.03, 0.05, 0.07):
        left = Hints(remaining=0, limit=10, reset_after=0.1 - (sent + 0.002))
        learning.observe(o, s, 429, left, sent + 0.002, sent_at=sent, counted=False)
    assert o.evidence == 0
    assert o.kind == "unknown"


def test_once_a_reset_was_seen_only_rejections_a_bucket_owed_are_evidence() -> None:
    """Guessed across a reset, the rate is trusted: a rejection before its token was due is not."""
    o, s = _guessed_spent(0.1)
    now = 0.1  # the reset passed: the next report starts the window, a whole one away
    learning.observe(
        o, s, 200, Hints(remaining=0, limit=10, reset_after=1.0), now, sent_at=now, counted=False
    )
    assert o.guess_whole
    assert o.pace.rate == pytest.approx(10)
    spent = o.exhausted
    assert spent is not None
    early = spent[0] + 0.05  # half a token's time after it ran out: a bucket rejects it too
    left = Hints(remaining=0, limit=10, reset_after=0.9)
    learning.observe(o, s, 429, left, early + 0.002, sent_at=early, counted=False)
    assert o.evidence == 0
    assert o.gate <= early + 0.002  # nor does it close a bucket's gate
    owed = spent[0] + 0.1  # a bucket at 10/s had a token for this one
    learning.observe(o, s, 429, left, owed + 0.002, sent_at=owed, counted=False)
    assert o.evidence == -1


def test_a_bucket_closes_only_on_a_throttle_its_mirror_did_not_expect() -> None:
    """A known bucket: a rejection sent before its token was due leaves the gate open."""
    o, s = _guessed_spent(0.5)
    o.kind, o.guess_whole = "bucket", True

    def rejected(reset_after: float, now: float, sent_at: float) -> None:
        spent = Hints(remaining=0, limit=10, reset_after=reset_after)
        learning.observe(o, s, 429, spent, now, sent_at=sent_at, counted=False)

    rejected(0.45, now=0.05, sent_at=0.03)
    assert o.gate == 0.0  # 0.03 s after it ran out: no token was due at 20 req/s
    rejected(0.4, now=0.1, sent_at=0.08)
    assert o.gate == pytest.approx(0.5)  # one was: the mirror is off, wait for the reset


def test_a_window_seen_from_its_start_is_told_at_once() -> None:
    """
    9 of 10 left, 1 s to go: the whole window; rejections a bucket owed vote at once.

    What the burst sent before the quota ran out got through, but a bucket refilled nothing
    for it: only requests sent into the spent quota count against a rejection's vote.
    """
    o, s = st.OriginState(), st.Settings(probe=0)
    learning.observe(
        o, s, 200, Hints(remaining=9, limit=10, reset_after=1.0), 0.0, sent_at=0.0, counted=False
    )
    assert o.guess_whole
    learning.observe(
        o, s, 200, Hints(remaining=0, limit=10, reset_after=0.99), 0.01, sent_at=0.0, counted=False
    )
    for _ in range(8):  # the rest of the first burst, sent before it ran out, comes back
        learning.observe(
            o,
            s,
            200,
            Hints(remaining=0, limit=10, reset_after=0.98),
            0.02,
            sent_at=0.0,
            counted=False,
        )
    for sent in (0.12, 0.22):  # paced at 10/s into the spent quota: a bucket would admit them
        left = Hints(remaining=0, limit=10, reset_after=1.0 - (sent + 0.002))
        learning.observe(o, s, 429, left, sent + 0.002, sent_at=sent, counted=False)
    assert o.kind == "window"


def test_answers_that_overtake_each_other_are_not_counted_twice() -> None:
    """
    Answers read out of order (threads) leave the ledger and the mirror exact.

    A quota of 20 stating no window (slowapi's headers): the probe, then ten at once, which
    the server counts in order (18 to 9 left) but whose answers come back in two groups, the
    last counted of each first.  Each report subtracts what is still in flight, the requests
    it overtook included, though the server counted them already: read so, four of the nine
    left were spent, and the requests paced into a quota that was not read as a bucket's.
    """
    p = Pacer(probe=0)
    t = tracker(p)

    def quota(left: int, now: float) -> Hints:
        return Hints(remaining=left, limit=20, reset_after=2.0 - now)

    t.acquire(0.0)
    t.sent()
    t.observe(200, quota(19, 0.001), 0.001, sent_at=0.0)
    for _ in range(10):
        assert t.acquire(0.002).delay == pytest.approx(0.0, abs=1e-9)
        t.sent()
    for k, left in enumerate([14, 18, 17, 16, 15, 9, 13, 12, 11, 10]):
        now = 0.01 + k * 0.001
        t.observe(200, quota(left, now), now, sent_at=0.002)
    assert t.view(0.03).remaining == 9
    delays = [t.acquire(0.03).delay for _ in range(9)]
    assert delays == pytest.approx([0.0] * 9, abs=1e-9)
    assert t.acquire(0.03).delay > 0.05  # the tenth is paced into the spent quota


def _through_random_throttles(tracker: KeyTracker, start: float, throttle: Hints) -> float:
    """
    Successes a second over the last 4 of 5 s from ``start``: 150 req/s offered (or less, as
    the pacer admits), 30% of them throttled at random with ``throttle``'s hints.
    """
    rng = random.Random(3)
    now, through = start, 0
    while now < start + 5.0:
        admission = tracker.acquire(now)
        now += admission.delay
        if not admission.final:
            continue
        tracker.sent()
        ok = rng.random() >= 0.3
        tracker.observe(200 if ok else 429, Hints() if ok else throttle, now + 0.002, sent_at=now)
        through += ok and now >= start + 1.0
        now += 1 / 150
    return through / 4.0


def test_random_throttles_do_not_cut_the_rate_for_good() -> None:
    """
    A client offering 150 req/s to a server that throttles 30% at random, whatever the rate.

    Cutting on such throttles lowers the rate but not the share of throttles: the cut is
    undone, and the client keeps about the rate it offers (a limiter's throttles would fall).
    """
    tracker = Pacer(probe=0).track(ORIGIN)
    assert _through_random_throttles(tracker, 0.0, Hints(retry_after=0.05)) >= 0.8 * 0.7 * 150


@pytest.mark.parametrize(
    "throttle", [Hints(), Hints(retry_after=0.05)], ids=["bare", "retry-after"]
)
def test_random_throttles_after_an_idle_spell_do_not_cut_the_rate_for_good(
    throttle: Hints,
) -> None:
    """
    The same server, met again after a few idle seconds: the first spell's burst is no rate.

    The first throttle came after six successes in 30 ms; counted as what got through in
    the last second, it cut the rate to 6 req/s, on a share of one throttle (which a cut is
    never undone on), and the noise went on cutting it: 1.5-4.5 successes a second of 105.
    """
    tracker = Pacer(probe=0).track(ORIGIN)
    tracker.acquire(0.0)
    tracker.sent()
    tracker.observe(200, Hints(), 0.002, sent_at=0.0)  # met once, then idle
    assert _through_random_throttles(tracker, 3.0, throttle) >= 0.8 * 0.7 * 150


def test_a_young_origin_is_not_cut_on_a_share_of_throttles_that_may_be_chance() -> None:
    """5 throttles in a herd's first 10 answers: not shown to be most; no cut yet."""
    p = Pacer(probe=0)
    tracker = p.track(ORIGIN)
    for i in range(10):
        tracker.acquire(0.0)
        tracker.sent()
        tracker.observe(429 if i % 2 else 200, Hints(), 0.01 * i, sent_at=0.0)
    assert p.view(ORIGIN).rate is None
    for i in range(20):  # a herd into a limiter: most of 30 answers throttles
        tracker.acquire(0.2)
        tracker.sent()
        tracker.observe(429 if i < 18 else 200, Hints(), 0.2 + 0.01 * i, sent_at=0.2)
    assert p.view(ORIGIN).rate is not None


@pytest.mark.herd
def test_a_limiter_that_counts_refused_requests_is_not_kept_closed() -> None:
    """
    HAProxy's stick table: what it refuses counts too, so knocking renews the penalty.

    The probes of a penalty slow down (each cut halves the rate), the first through restores
    the rate measured before it, and past that the rate grows additively only: no slow start
    that overshoots into a new penalty every other second (2.7x the ideal on most seeds).
    """
    results = [
        run_herd(PenaltyBox(10, 1.0), "bare", 60, stagger=0.01, seed=seed) for seed in range(6)
    ]
    assert all(r.failed == 0 for r in results)
    # the first wave's 50 refusals alone keep it closed for a second: 6 s (1.2x) at best
    # (1.65 when any call took a free slot; 1.71 with the slots going to the waiters nearest
    # their deadlines first: the order of a herd's sends differs, and 3 refusals of 59 more)
    assert statistics.median(r.ratio for r in results) <= 1.75
    assert max(r.ratio for r in results) <= 2.0
    assert max(r.extra_429s_per_call for r in results) <= 0.25


@pytest.mark.herd
@pytest.mark.parametrize("service", [0.03, 0.1])
def test_a_limiter_that_counts_refusals_in_front_of_a_slow_application_is_not_buried(
    service: float,
) -> None:
    """
    A gateway refuses at once, the application behind it serves in ``service``: read as a
    concurrency limit (its refusals come back while others are served), a window below one.

    Knocking at its least window (every two service times) kept HAProxy's stick table shut
    for good at 30 ms: a minute of knocks every 60 ms, 977 requests, 50 of 60 calls failed.
    With no success for a second, each refusal halves the window further, to a knock every
    half second: the penalty runs out.
    """
    result = run_herd(PenaltyBox(10, 1.0), "bare", 60, timeout=60.0, service=service)
    assert result.failed == 0
    assert result.ratio <= 3.5
    assert result.sent <= 300  # (977 knocking at the least window)


@pytest.mark.herd
def test_a_slow_limiter_with_no_burst_is_not_probed_after_every_success() -> None:
    """
    1 r/s, burst 1, no headers: any request sent early is refused.

    Probing past the measured rate after each success (0.3 r/s a second is a third of this
    rate) cost a 429 and most of an interval every other request: 1.59x the ideal and 0.95
    429s a call beyond the first wave.
    """
    result = run_herd(TokenBucket(1, 1.0, 1), "bare", 30, spread=0.004, seed=6, timeout=120.0)
    assert result.failed == 0
    assert result.ratio <= 1.3
    assert result.extra_429s_per_call <= 0.45


@pytest.mark.herd
def test_nginx_with_no_burst_is_drained_with_few_extra_429s() -> None:
    """
    nginx ``limit_req`` at 10 r/s with no ``burst`` (its default): one request every 100 ms.

    A guard, not the target: 1.82x the ideal and 0.12 429s a call beyond the first wave (real
    nginx: 1.82-1.83x, the peers 3.3-6.5x with 2-5.5; docs/benchmarks.md says where the time
    goes).  A slow start that never reached the rate, or probes refused at every step, would
    break it.
    """
    result = run_herd(TokenBucket(10, 1.0, 1), "bare", 60, spread=0.004, seed=6)
    assert result.failed == 0
    assert result.ratio <= 2.0
    assert result.extra_429s_per_call <= 0.2


@pytest.mark.herd
def test_a_rate_limit_in_front_of_a_slow_application_is_paced_as_a_rate() -> None:
    """
    nginx ``limit_req`` (10 r/s, burst 6) refuses at once; the application serves in 30 ms.

    Read as a concurrency limit, every success freed "a place" that the next request took at
    once, and was refused: one 429 for each call that got through (1.02 beyond the first
    wave a call, in the model and on the real nginx).  Two such refusals in a row show a
    rate's limit, and the rate controller paces it.
    """
    results = [
        run_herd(TokenBucket(10, 1.0, 6), "bare", 60, service=0.03, spread=0.004, seed=seed)
        for seed in range(4)
    ]
    assert all(r.failed == 0 for r in results)
    assert max(r.ratio for r in results) <= 1.1
    assert max(r.extra_429s_per_call for r in results) <= 0.35


@pytest.mark.parametrize("limit", [0.1, 0.25])
def test_a_quota_under_one_request_a_window_spaces_requests_at_most_max_gate_apart(
    limit: float,
) -> None:
    """
    A quota of a fraction of a request a window (HubSpot's daily ``0.1``, or 1,000 tokens
    over a call costing 4,000) is mirrored at one request every ``max_gate`` at the least:
    spaced ``window / limit`` apart, each slot was past what any header may hold a request
    (500 s with ``max_gate`` 50, every call refused with the default 300).
    """
    o, s = st.OriginState(), st.Settings(max_gate=50.0, probe=0)
    quota = Hints(remaining=limit, limit=limit, window=50.0, reset_after=40.0)
    for at in (0.0, 0.1):
        learning.observe(o, s, 200, quota, at, sent_at=at - 0.01, counted=False)
    assert o.pace.interval <= s.max_gate
    assert adm.acquire(o, s, 0.2, 0.2, None).delay <= s.max_gate
