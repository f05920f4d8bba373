"""The outage law: probes, not retries, while an origin fails everything; a gentle reopening."""

from __future__ import annotations

import random

import pytest

from smoothclient.hints import Hints
from smoothclient.pacing import learning, outage
from smoothclient.pacing.admission import acquire, cohort, healthy, try_now, view
from smoothclient.pacing.codec import dump, load
from smoothclient.pacing.outage import (
    DOWN_AFTER,
    MAX_PROBE_GAP,
    MAX_SPAN,
    MIN_SPAN,
    RUN_EVIDENCE,
    failed,
    run_span,
)
from smoothclient.pacing.state import OriginState, Settings

S = Settings()


def _served(o: OriginState, rate: float, until: float) -> float:
    """Successes at ``rate`` for the second before ``until``; returns ``until``."""
    o.known = True
    t = until - 1.0
    while t < until:
        learning.observe(o, S, 200, Hints(), t, sent_at=t, counted=False)
        t += 1 / rate
    return until


def _fail(o: OriginState, now: float, status: int = 503, retry_after: float | None = None) -> None:
    learning.observe(o, S, status, Hints(retry_after=retry_after), now, sent_at=now, counted=False)


def test_a_run_of_failures_marks_the_origin_down_and_closes_its_gate() -> None:
    """DOWN_AFTER failures in a row: not healthy, the gate closed, the view says since when."""
    o = OriginState()
    t = _served(o, 20, 1.0)
    for i in range(DOWN_AFTER - 1):
        _fail(o, t + i * 0.05)
    assert o.outage.down_since is None  # one short: still up
    now = t + 0.4
    assert healthy(o, now)
    _fail(o, now)
    assert o.outage.down_since == now
    assert not healthy(o, now)
    assert o.gate > now
    assert view("o", o, now + 0.1).down_for == pytest.approx(0.1)


def _browned(o: OriginState, ok: int, failed: int, until: float) -> float:
    """``ok`` successes and ``failed`` failures spread over the second before ``until``."""
    o.known = True
    answers = ["ok"] * ok + ["failed"] * failed
    random.Random(3).shuffle(answers)
    answers.append("ok")  # (the run begins after ``until``)
    for i, answer in enumerate(answers):
        t = until - 1.0 + (i + 1) / len(answers)
        if answer == "ok":
            learning.observe(o, S, 200, Hints(), t, sent_at=t, counted=False)
        else:
            _fail(o, t)
    return until


def test_a_dozen_failures_are_news_from_an_origin_that_failed_nothing_before() -> None:
    """An origin that served 20 a second and failed none: down a quarter second in, as ever."""
    o = OriginState()
    t = _served(o, 20, 1.0)
    for i in range(DOWN_AFTER):
        _fail(o, t + i * 0.01)
    assert o.outage.down_since is None  # (a dozen in 0.11 s: a herd's, no news yet)
    _fail(o, t + MIN_SPAN)
    assert o.outage.down_since == t + MIN_SPAN


def test_a_brownouts_run_must_be_unlikely_at_the_share_it_failed_before() -> None:
    """
    Two failures in three the second before: a dozen in a row is no news, 23 are (9.2 / 0.41).

    Or a run that outlasts what 11 successes a second make likely (0.84 s), whichever first.
    """
    o = OriginState()
    t = _browned(o, 10, 20, 1.0)
    for i in range(20):
        _fail(o, t + 0.01 + i * 0.02)
        assert o.outage.down_since is None, i
    while o.outage.down_since is None:
        _fail(o, t + 0.01 + o.outage.fails * 0.02)
    assert o.outage.fails == 23
    o = OriginState()
    t = _browned(o, 10, 20, 1.0)
    for i in range(DOWN_AFTER):
        _fail(o, t + 0.01 + i * 0.05)
    assert o.outage.down_since is None
    assert run_span(o) == pytest.approx(RUN_EVIDENCE / 11, abs=0.01)  # (with the last success)
    _fail(o, t + 0.011 + run_span(o))
    assert o.outage.down_since is not None


def test_an_origin_that_had_no_success_before_the_run_takes_the_longest_span() -> None:
    """Nothing served before the run (a new client, a quiet one): a second of failures."""
    o = OriginState()
    for i in range(DOWN_AFTER + 8):
        _fail(o, 1.0 + i * 0.05)
    assert o.outage.down_since is None
    _fail(o, 1.0 + MAX_SPAN)
    assert o.outage.down_since == 1.0 + MAX_SPAN


def test_a_brownout_shedding_past_its_capacity_is_not_marked_down() -> None:
    """
    Two failures in three (half of what the server admits, all it sheds): no trip in 60 s.

    A dozen in a row comes every few seconds at that share; a run as long as the success rate
    before it asks for (about 0.8 s here) does not.  Seeded: the same draws every run.
    """
    rng = random.Random(7)
    o = OriginState()
    t = _served(o, 10, 1.0)
    longest = run = 0
    for _ in range(60 * 30):  # 30 answers a second for a minute
        t += rng.expovariate(30)
        if rng.random() < 2 / 3:
            _fail(o, t)
            run += 1
            longest = max(longest, run)
        else:
            learning.observe(o, S, 200, Hints(), t, sent_at=t, counted=False)
            run = 0
        assert o.outage.down_since is None
    assert longest >= DOWN_AFTER  # (the old rule, a dozen in a quarter second, tripped)


def test_a_herds_failures_within_milliseconds_do_not_mark_it_down() -> None:
    """Many failures at once say nothing of how long the origin fails."""
    o = OriginState()
    t = _served(o, 20, 1.0)
    for i in range(50):
        _fail(o, t + i * 0.001)
    assert o.outage.down_since is None


def test_a_success_between_failures_starts_a_new_run() -> None:
    """A brownout (failures with successes between them) never marks the origin down."""
    o = OriginState()
    t = _served(o, 20, 1.0)
    for i in range(4 * DOWN_AFTER):
        t += 0.01
        if i % 4 == 3:
            learning.observe(o, S, 200, Hints(), t, sent_at=t, counted=False)
        else:
            _fail(o, t)
    assert o.outage.down_since is None
    assert o.outage.fails <= 3


def test_while_down_one_probe_goes_per_gap_and_failed_probes_widen_it() -> None:
    """The first request at the gate is the probe: the gate moves on; a failure widens the gap."""
    o = OriginState()
    t = _served(o, 20, 1.0)
    for i in range(DOWN_AFTER):
        _fail(o, t + i * 0.05)
    now = o.gate
    first = acquire(o, S, now, now, now + 10)
    assert first.granted
    assert first.delay == 0.0
    assert not try_now(o, S, now)  # the others wait for its answer
    assert o.gate > now
    gaps = []
    for _ in range(8):
        now = o.gate
        assert acquire(o, S, now, now, now + 10).delay == 0.0
        _fail(o, now + 0.005)
        gaps.append(o.gate - now)
    assert max(gaps) <= MAX_PROBE_GAP + 0.01
    assert gaps[-1] > gaps[0]


def test_a_call_whose_deadline_ends_before_the_next_probe_is_refused_unsent() -> None:
    """Nothing is reserved, and the answer says how long the origin stays closed."""
    o = OriginState()
    t = _served(o, 20, 1.0)
    for i in range(DOWN_AFTER):
        _fail(o, t + i * 0.05)
    now = t + DOWN_AFTER * 0.05
    answer = acquire(o, S, now, now, now + 0.001)
    assert not answer.granted
    assert o.waiting == 0


def _reopened() -> tuple[OriginState, float]:
    """An origin that served 30/s, went down, and whose probe (sent at the gate) got through."""
    o = OriginState()
    t = _served(o, 30, 1.0)
    for i in range(DOWN_AFTER):
        _fail(o, t + i * 0.05)
    now = o.gate
    acquire(o, S, now, now, None)
    o.waiting, o.in_flight = 0, 1  # the probe went
    learning.observe(o, S, 200, Hints(), now + 0.01, sent_at=now, counted=True)
    return o, now


def test_reopening_releases_at_the_rate_served_before_and_5xx_then_cut_it() -> None:
    """The probe's success reopens; the release is paced, and an overload 503 cuts it."""
    o, now = _reopened()
    assert o.outage.down_since is None
    assert o.gate <= now + 0.01
    assert o.pace.rate == pytest.approx(30, abs=2)
    assert not healthy(o, now + 0.02)  # paced while the backlog goes
    now += 0.02
    for _ in range(60):  # the release grows with its successes
        learning.observe(o, S, 200, Hints(), now, sent_at=now, counted=False)
        now += 0.02
    grown = o.pace.rate
    assert grown is not None
    assert grown > 30
    for _ in range(5):
        _fail(o, now, 503)
        now += 0.3
    assert o.pace.rate is not None
    assert o.pace.rate < grown


def test_a_release_grows_additively_past_the_rate_served_before() -> None:
    """
    Past what the origin served (30/s), a release grows by a fifth of that a second, not x1.5.

    A slow start from there found a recovering server's capacity by overshooting it: a fleet's
    busiest second after an outage held 1.11-1.16 times the capacity.
    """
    o, now = _reopened()
    served = o.outage.served
    assert served == pytest.approx(30, abs=2)
    assert o.pace.rate is not None
    start = o.pace.rate
    for _ in range(40):  # a second of successes, one every 25 ms (40/s)
        now += 0.025
        learning.observe(o, S, 200, Hints(), now, sent_at=now, counted=False)
    assert o.pace.rate is not None
    # per success RELEASE_GAIN * served / rate: about a fifth of served in a second (x40/rate);
    # the slow start's half a request a success would have added 20
    grown = o.pace.rate - start
    assert 0.5 * outage.RELEASE_GAIN * served < grown < 1.5 * outage.RELEASE_GAIN * served
    assert outage.release_step(o, now, served - 1) is None  # below it: the slow start's step
    assert outage.release_step(o, now + outage.RELEASE, 2 * served) is None  # no release


def test_a_503_with_retry_after_closes_at_once_and_reopens_gently() -> None:
    """The server says when: nothing goes before then, and the reopening is paced too."""
    o = OriginState()
    t = _served(o, 20, 1.0)
    _fail(o, t, 503, retry_after=5.0)
    assert o.outage.down_since == t
    assert o.gate >= t + 5.0
    assert acquire(o, S, t + 1, t + 1, t + 3).granted is False


def test_transport_failures_count_and_the_state_survives_the_codec() -> None:
    """Refused connections count like 5xx; a shared store keeps the outage's part."""
    o = OriginState()
    t = _served(o, 20, 1.0)
    for i in range(DOWN_AFTER):
        failed(o, now=t + i * 0.05)
    assert o.outage.down_since is not None
    back = load(dump(o))
    assert back.outage == o.outage
    assert load('{"outage": [1, "x"]}').outage.down_since is None  # junk: a fresh state


@pytest.mark.herd
@pytest.mark.parametrize(("retry_after", "shared"), [(None, False), (None, True), (5.0, False)])
def test_a_fleet_does_not_bury_a_failing_server(retry_after: float | None, shared: bool) -> None:
    """
    Virtual time: 4 clients x 15 calls/s into a 100 req/s server down for 5 s.

    Before this law: 3.4x the offered load during the outage, a 3.3-4.4x wave after a
    ``Retry-After``, 30% of calls failed.
    """
    pytest.importorskip("trio")
    from smoothclient.tools.outages import run_outage

    result = run_outage(retry_after=retry_after, shared=shared)
    assert result.load_during() <= 1.1
    assert result.peak_after() <= 1.1  # (a slow start past the rate served before: 1.10-1.12)
    assert result.failed_share < 0.2


def test_the_release_ends_once_it_holds_nobody_back() -> None:
    """After a reopening, a release that cut nothing and held nobody for a while drops its pace."""
    o, now = _reopened()
    assert o.pace.rate is not None
    for _ in range(100):  # 3 s of successes at 33/s, nobody waiting
        now += 0.03
        learning.observe(o, S, 200, Hints(), now, sent_at=now, counted=False)
    assert o.pace.rate is None
    assert healthy(o, now)  # served as before the outage


@pytest.mark.herd
def test_a_brownout_keeps_its_origin_up_and_its_pace_off() -> None:
    """Virtual time: half the requests fail for 10 s; afterwards the fleet sends what it offers."""
    pytest.importorskip("trio")
    from smoothclient.tools.outages import run_outage

    result = run_outage(fail_share=0.5, down=(3.0, 13.0), end=16.0)
    after = [t for t in result.arrivals if 13.5 <= t < 15.5]
    assert len(after) / 2.0 >= 0.9 * result.offered
    assert result.failed_share < 0.1


def test_a_release_at_the_rate_served_before_is_not_cut_by_a_brownouts_503s() -> None:
    """Only a release faster than what the origin served is this client's overload."""
    o, now = _reopened()
    start = o.pace.rate
    assert start is not None
    for i in range(6):
        _fail(o, now + 0.3 * (i + 1))
        at = now + 0.3 * (i + 1)
        learning.observe(o, S, 200, Hints(), at + 0.01, sent_at=at, counted=False)
    assert o.pace.rate is not None
    assert o.pace.rate >= start


def _answers(o: OriginState, now: float, n: int, took: float, in_flight: int) -> float:
    """``n`` successes 1/30 s apart, each having taken ``took``, ``in_flight`` others out."""
    for _ in range(n):
        now += 1 / 30
        o.in_flight = in_flight + 1
        learning.observe(o, S, 200, Hints(), now, sent_at=now - took, counted=True)
    return now


def test_a_release_whose_answers_slow_down_is_held_to_its_flight() -> None:
    """
    Answers that take longer than the quickest (a queue building at the origin) lower the
    release's rate below what the origin served; quick ones again give the rate back.

    Without the bound, the slow start went on growing while the answers took ten times
    longer: a worker pool's queue filled until it timed out, and failed for good.
    """
    o, now = _reopened()  # served 30/s; the probe took 0.01 s
    now = _answers(o, now, 20, 0.01, 1)
    grown = o.pace.rate
    assert grown is not None
    assert grown > 30
    now = _answers(o, now, 15, 0.1, 6)  # ten times as long, more in flight than the window
    held = o.pace.rate
    assert held is not None
    assert held < 30
    _answers(o, now, 10, 0.01, 1)  # (within SETTLE of the reopening: still released)
    assert o.pace.rate is not None
    assert o.pace.rate >= grown  # (the rate the slow start had reached, given back)


def test_a_brownouts_quick_503s_do_not_lock_in_what_slow_answers_held_back() -> None:
    """
    A failure that cut nothing leaves the bound free to give the rate back.

    Seen on a real server under load: 200 calls queued in a pool of five made the answers
    slow, the bound held the release at its floor, and each 503 of a brownout (a quick one,
    below the rate served before: not a throttle) locked that floor in.  The calls crept out
    at 0.5-4 req/s and some passed their 10 s deadline.
    """
    o, now = _reopened()  # served 30/s
    now = _answers(o, now, 15, 0.5, 20)  # slow answers, many in flight: held back
    held = o.pace.rate
    assert held is not None
    assert held < 15
    for _ in range(8):  # quick answers again, every other one a 503 turned away at once
        now += 1 / 30
        _fail(o, now)
        now = _answers(o, now, 1, 0.01, 1)
    assert o.pace.rate is not None
    assert o.pace.rate >= 30  # (the rate served before, given back)


def test_a_quick_origins_jitter_does_not_hold_its_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """A few requests in flight are never held: 1-30 ms answers are a client's own scheduling."""
    rates = []
    for bounded in (True, False):
        if not bounded:
            monkeypatch.setattr(outage, "timed", lambda *a, **k: None)
        o, now = _reopened()
        for i in range(60):
            now += 1 / 30
            o.in_flight = 3
            took = 0.001 if i % 2 else 0.03
            learning.observe(o, S, 200, Hints(), now, sent_at=now - took, counted=True)
        rates.append(o.pace.rate)
    assert rates[0] == rates[1]


def test_a_fleets_handful_in_flight_does_not_hold_its_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """
    Four processes sharing one store, three requests in flight each: twelve in the fleet's
    counts, each process's own scheduling, not a queue at the origin.

    Held to one process's handful (MIN_FLIGHT), a fleet of four through Redis was released
    at the rate it was offered, never faster, and some releases stalled at the floor.
    """

    def released(processes: int) -> float | None:
        o, now = _reopened()
        o.processes = processes
        for i in range(60):
            now += 1 / 30
            o.in_flight = 12
            took = 0.001 if i % 2 else 0.03
            learning.observe(o, S, 200, Hints(), now, sent_at=now - took, counted=True)
        return o.pace.rate

    alone = released(1)  # one process with twelve in flight: held to its handful
    fleet = released(4)
    monkeypatch.setattr(outage, "timed", lambda *a, **k: None)
    assert fleet == released(4)  # (as if there were no bound)
    assert alone is not None
    assert fleet is not None
    assert alone < fleet


@pytest.mark.herd
def test_no_metastable_failure_after_an_outage_of_a_worker_pool() -> None:
    """
    Virtual time: 4 clients offer 90 calls/s to a pool of 10 workers (100/s) whose queued
    requests time out after 1 s, down for 2 s.

    Before the release kept its flight bounded: the release's slow start filled the queue
    (nothing but slower successes, then a second of 503s), the origin was marked down again,
    and so on: goodput 0 for seconds at a time, 29% of calls failed, 2.4x capacity after.
    """
    pytest.importorskip("trio")
    from smoothclient.tools.outages import run_outage

    result = run_outage(rate=22.5, down=(1.0, 3.0), end=15.0, workers=10)
    assert min(result.goodput(k, k + 1) for k in range(5, 15)) >= 0.9 * result.offered
    assert result.peak_after() <= 1.25
    assert result.failed_share <= 2 / 15  # (what sending once loses: the outage's calls)


def test_a_rate_the_bound_gives_back_moves_the_slot_owed_with_it() -> None:
    """
    One slow answer with many in flight drops the release to the floor; the slot then taken
    is owed at the floor's spacing.  Quick answers give the rate back, and that slot with it:
    left two seconds out, it held the process's whole backlog for them.
    """
    o, now = _reopened()
    now = _answers(o, now, 5, 0.01, 1)
    now = _answers(o, now, 1, 1.0, 30)  # a stall: a second, thirty in flight
    assert o.pace.rate == S.learned_floor
    assert acquire(o, S, now, now, None).delay == 0.0  # a slot at the floor's spacing
    o.waiting, o.in_flight = 0, 1
    now = _answers(o, now, 3, 0.01, 0)
    answer = acquire(o, S, now, now, None)
    assert answer.final
    assert answer.delay < 0.5


def test_a_brownout_that_trips_the_rule_reopens_at_what_the_origin_answered() -> None:
    """
    An origin failing half its requests (20 successes and 20 failures a second, 3 s) that then
    fails a run long enough to be marked down reopens at the 40 a second it answered: its
    calls need two attempts each.  (At its 20 successes alone, a process of a fleet that
    tripped in a brownout served a third of its calls for ten seconds.)
    """
    o = OriginState()
    o.known = True
    t = 0.0
    while t < 3.0:
        learning.observe(o, S, 200, Hints(), t, sent_at=t, counted=False)
        _fail(o, t + 0.025)
        t += 0.05
    for i in range(DOWN_AFTER):
        _fail(o, t + i * 0.05)
    assert o.outage.down_since is not None
    now = o.gate
    acquire(o, S, now, now, None)
    o.waiting, o.in_flight = 0, 1
    learning.observe(o, S, 200, Hints(), now + 0.01, sent_at=now, counted=True)
    assert o.pace.rate == pytest.approx(40, rel=0.1)


def _spent_budget_call(timeout: float | None) -> tuple[int, list[float]]:
    """
    One call whose first answer is a 503, its budget spent; while it waits, other calls'
    attempts (two a wait) make room.  Its final status and the clock's sleeps.
    """
    import httpx

    from smoothclient import Pacer, RetryBudget, RetryPolicy, SmoothTransport
    from smoothclient.testing import FakeClock

    clock = FakeClock()
    pacer = Pacer(clock=clock, probe=0)
    budget = RetryBudget(ratio=0.5, min_per_second=0.0)
    statuses = iter([503, 200])
    tracker = pacer.track("https://api.test:443")

    def sleep(seconds: float) -> None:  # the origin's other traffic, meanwhile
        clock.sleep(seconds)
        tracker.record_attempt(budget, clock())
        tracker.record_attempt(budget, clock())

    transport = SmoothTransport(
        httpx.MockTransport(lambda request: httpx.Response(next(statuses))),
        policy=RetryPolicy(attempts=3, timeout=timeout, budget=budget),
        pacer=pacer,
        sleep=sleep,
        rng=random.Random(0),
    )
    with httpx.Client(transport=transport) as client:
        status = client.get("https://api.test/x").status_code
    return status, clock.sleeps


def test_a_retry_waits_for_budget_room_within_its_deadline() -> None:
    """
    A spent budget holds a retry back until traffic makes room, not longer than the deadline.

    It gave the call up at once: in a brownout past the origin's capacity, up to 5% of the
    calls, where clients without a budget failed fewer.
    """
    status, sleeps = _spent_budget_call(timeout=10.0)
    assert status == 200
    assert 0 < sum(sleeps) <= 10.0


def test_a_call_without_a_deadline_gives_up_on_a_spent_budget() -> None:
    """No deadline to wait within: the budget gives the retry up at once, as it did."""
    status, sleeps = _spent_budget_call(timeout=None)
    assert status == 503
    assert not sleeps


def test_the_failing_share_needs_a_few_failures_and_fades() -> None:
    """One failure in two answers says nothing; a brownout's half does; a second later, less."""
    o = OriginState()
    t = _served(o, 20, 1.0)
    _fail(o, t)
    assert outage.failing_share(o, t) == 0.0  # one failure: no episode
    for i in range(1, 20):
        _fail(o, t + i * 0.05)
        learning.observe(o, S, 200, Hints(), t + i * 0.05, sent_at=t + i * 0.05, counted=False)
    now = t + 1.0
    share = outage.failing_share(o, now)
    assert 0.3 < share < 0.7
    assert outage.failing_share(o, now + 2.0) == 0.0  # faded below the evidence
    assert cohort(o, now).failing == share
