"""The pacer: gates, paced slots, learned rates, probes; all with explicit clock readings."""

from __future__ import annotations

import itertools
import pickle
import threading

import pytest

from smoothclient import Hints, Pacer, RetryBudget
from smoothclient.pacing import GITHUB_SCOPES
from smoothclient.pacing.learning import MAX_WINDOW_GUESSES
from smoothclient.pacing.pacer import PacerLike
from smoothclient.pacing.state import EARLY_MAX, Kind
from smoothclient.pacing.store import MemoryCell

ORIGIN = "http://api.test:80"


def memory(p: Pacer) -> MemoryCell:
    """The in-memory cell of ORIGIN, to look at its state."""
    tracker = p.track(ORIGIN)
    assert isinstance(tracker.cell, MemoryCell)
    return tracker.cell


def admit(p: Pacer, now: float, **kw: float) -> float:
    a = p.track(ORIGIN).acquire(now, **kw)
    assert a.final
    assert a.granted
    p.track(ORIGIN).sent()
    return a.delay


def known(p: Pacer, now: float = 0.0, hints: Hints | None = None, status: int = 200) -> None:
    """Finish the cold-start probe with one response."""
    assert p.track(ORIGIN).acquire(now).final
    p.track(ORIGIN).sent()
    p.track(ORIGIN).observe(status, hints or Hints(), now)


def test_healthy_origin_adds_no_delay() -> None:
    p = Pacer(probe=0)
    known(p, hints=Hints(remaining=4999, limit=5000, reset_after=3000))
    assert [admit(p, 1.0) for _ in range(100)] == [0.0] * 100


def test_cold_start_probe() -> None:
    """While the first request is out, others poll; after its response they go."""
    p = Pacer(probe=0.25)
    assert p.track(ORIGIN).acquire(0.0).delay == 0.0  # the probe
    p.track(ORIGIN).sent()
    waiting = p.track(ORIGIN).acquire(0.001)
    assert not waiting.final
    assert 0 < waiting.delay <= 0.005
    p.track(ORIGIN).observe(200, Hints(), 0.002)
    assert p.track(ORIGIN).acquire(0.003).final


def test_a_late_probe_lets_one_more_probe_go_not_the_herd() -> None:
    """Unanswered for ``probe`` seconds: one more request probes; the others keep waiting."""
    p = Pacer(probe=0.25)
    p.track(ORIGIN).acquire(0.0)
    p.track(ORIGIN).sent()
    assert not p.track(ORIGIN).acquire(0.1).final
    assert p.track(ORIGIN).acquire(0.3).final  # one more probe
    p.track(ORIGIN).sent()
    behind = [p.track(ORIGIN).acquire(0.31) for _ in range(100)]
    assert not any(a.final for a in behind)  # the herd still waits for an answer
    assert all(a.delay >= 0.005 for a in behind)
    p.track(ORIGIN).observe(200, Hints(), 0.4, sent_at=0.0)
    assert p.track(ORIGIN).acquire(0.41).final


def test_the_wait_behind_a_probe_polls_more_slowly_as_it_lasts() -> None:
    p = Pacer(probe=10.0)
    p.track(ORIGIN).acquire(0.0)
    p.track(ORIGIN).sent()
    soon, later = p.track(ORIGIN).when(0.01), p.track(ORIGIN).when(2.0)
    assert soon.delay == pytest.approx(0.005)
    assert later.delay == pytest.approx(0.25)  # an eighth of 2 s, at most the horizon


def test_stated_rate_paces_after_the_burst() -> None:
    """q=10;w=1 with 4 left: 4 go now, the rest at 0.1 s intervals."""
    p = Pacer(probe=0)
    known(p, hints=Hints(remaining=4, limit=10, window=1.0, reset_after=1.0))
    delays = []
    now = 0.0
    for _ in range(10):
        a = p.track(ORIGIN).acquire(now)
        while not a.final:  # beyond the horizon: ask again later
            now += a.delay
            a = p.track(ORIGIN).acquire(now)
        delays.append(round(now + a.delay, 6))
    assert delays[:4] == [0.0] * 4
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(delays[3:])]
    assert gaps == [0.1] * 6


def test_a_429s_retry_after_holds_back_only_its_own_request() -> None:
    """Others are held back by the admitted rate, not by another request's Retry-After."""
    p = Pacer(probe=0)
    known(p)
    p.track(ORIGIN).acquire(0.0)
    p.track(ORIGIN).sent()
    p.track(ORIGIN).observe(429, Hints(retry_after=5.0), 0.0)
    assert p.track(ORIGIN).cohort(0.0).opens_in == 0.0
    assert p.track(ORIGIN).acquire(0.0).delay == 0.0


def test_a_503s_retry_after_gates_everyone() -> None:
    """A 503's Retry-After speaks for the whole origin (a load balancer, a maintenance)."""
    p = Pacer(probe=0)
    known(p)
    p.track(ORIGIN).acquire(0.0)
    p.track(ORIGIN).sent()
    p.track(ORIGIN).observe(503, Hints(retry_after=5.0), 0.0)
    a = p.track(ORIGIN).acquire(0.0)
    assert not a.final  # 5 s away: beyond the horizon
    assert p.track(ORIGIN).cohort(1.0).opens_in == pytest.approx(4.0)
    assert p.track(ORIGIN).acquire(4.9).delay == pytest.approx(0.1)
    # that one is the probe of an origin down: the others wait for its answer
    assert p.track(ORIGIN).cohort(4.9).opens_in > 0.1


def test_a_bucket_that_throttled_is_closed_until_its_reset() -> None:
    """Once the quota is known to refill continuously, a throttle closes it until its reset."""
    p = Pacer(probe=0)
    known(p)
    t = p.track(ORIGIN)
    assert isinstance(t.cell, MemoryCell)
    t.cell.state.kind = "bucket"
    t.acquire(0.0)
    t.sent()
    t.observe(429, Hints(remaining=0, limit=5000, reset_after=60.0), 0.0)
    assert t.cohort(0.0).opens_in == 60.0


@pytest.mark.parametrize("kind", ["unknown", "bucket", "window"])
def test_a_quota_a_throttle_said_spent_is_closed_until_its_reset(kind: Kind) -> None:
    """
    Whatever the limiter, nothing goes into a quota stated spent before its stated reset.

    One probe goes at most EARLY_MAX before it (a reset stated late); the others wait for its
    answer; a call whose deadline ends before that is refused at once, the reset in the answer.
    """
    p = Pacer(probe=0)
    known(p)
    t = p.track(ORIGIN)
    assert isinstance(t.cell, MemoryCell)
    t.cell.state.kind = kind
    t.acquire(0.0)
    t.sent()
    t.observe(429, Hints(remaining=0, limit=5000, reset_after=60.0), 0.0)
    refused = t.acquire(0.0, deadline=2.0)
    assert not refused.granted
    assert refused.closed_for == pytest.approx(60.0)
    assert t.view(0.0).closed_for == pytest.approx(60.0)
    now = 0.0
    for _ in range(100):  # asking again when nearer, as the edges do
        admission = t.acquire(now)
        now += admission.delay
        if admission.final:
            break
    assert 60.0 - EARLY_MAX <= now <= 60.0  # the probe goes near the stated reset
    assert t.when(now).delay > 0  # the others wait for the probe's answer
    t.sent()
    t.observe(200, Hints(remaining=4999, limit=5000, reset_after=60.0), 60.1)
    assert t.view(60.1).closed_for is None  # a new window: open again


def test_exhausted_success_does_not_gate() -> None:
    """A token bucket reports 0 left on a success; the mirror paces, the gate stays open."""
    p = Pacer(probe=0)
    known(p, hints=Hints(remaining=0, limit=10, window=1.0, reset_after=1.0))
    assert p.track(ORIGIN).cohort(0.0).opens_in == 0.0
    assert p.track(ORIGIN).acquire(0.0).delay == pytest.approx(0.1)


def test_deadline_refuses_without_reserving() -> None:
    p = Pacer(probe=0)
    known(p)
    p.track(ORIGIN).acquire(0.0)
    p.track(ORIGIN).sent()
    p.track(ORIGIN).observe(503, Hints(retry_after=30.0), 0.0)
    a = p.track(ORIGIN).acquire(0.0, deadline=5.0)
    assert not a.granted
    assert p.view(ORIGIN).waiting == 0


def test_learned_rate_without_headers() -> None:
    """Throttles with no quota headers: the rate is what got through; slow start; probing."""
    p = Pacer(probe=0)
    t = p.track(ORIGIN)
    known(p, now=0.0)  # an origin seen for a while (a young one needs a herd to be cut),
    known(p, now=9.0)  # and answering (a spell that began a second ago is young too)
    for i in range(5):
        known(p, now=10.0 + 0.01 * i)
    for _ in range(3):
        t.acquire(10.1)
        t.sent()
    t.observe(429, Hints(retry_after=1.0), 10.1, sent_at=10.05)
    assert p.view(ORIGIN).rate == 5.0  # 5 got through in the last second
    assert p.view(ORIGIN).learned
    # the same wave (sent before the cut): no second cut
    t.observe(429, Hints(retry_after=1.0), 10.1, sent_at=10.05)
    assert p.view(ORIGIN).rate == 5.0
    t.observe(200, Hints(), 10.2)  # below the (not yet measured) ceiling: x1.5/s
    assert p.view(ORIGIN).rate == pytest.approx(5.5)
    for i in range(6):  # 6 got through in the last second, then a throttle: the admitted rate
        t.observe(200, Hints(), 11.0 + i * 0.05)
    t.observe(429, Hints(retry_after=1.0), 11.4, sent_at=11.35)
    assert p.view(ORIGIN).rate == 6.0
    t.observe(200, Hints(), 11.5)  # at the measured rate: additive probing
    assert p.view(ORIGIN).rate == pytest.approx(6.0 + 0.3 / 6.0)
    t.acquire(50.0)
    t.sent()
    t.observe(200, Hints(), 50.0)  # a quiet spell: pacing dropped
    assert p.view(ORIGIN).rate is None


def test_throttle_without_evidence_leaves_it_to_backoff() -> None:
    p = Pacer(probe=0)
    p.track(ORIGIN).acquire(0.0)
    p.track(ORIGIN).sent()
    p.track(ORIGIN).observe(503, Hints(retry_after=1.0), 0.0)
    assert p.view(ORIGIN).rate is None


def test_cohort_counts_waiting_requests() -> None:
    p = Pacer(probe=0)
    known(p, hints=Hints(remaining=0, limit=10, window=1.0))
    p.track(ORIGIN).acquire(0.0)
    p.track(ORIGIN).acquire(0.0)
    view = p.track(ORIGIN).cohort(0.0)
    assert (view.waiting, view.admitted_rate, view.paced) == (3, 10.0, True)
    p.track(ORIGIN).cancel()
    p.track(ORIGIN).sent()
    assert p.view(ORIGIN).waiting == 0
    assert p.view(ORIGIN).in_flight == 1


def test_other_unit_exhausted_gates() -> None:
    p = Pacer(probe=0)
    known(p, hints=Hints(remaining=0, reset_after=2.0, unit="tokens"))
    assert p.track(ORIGIN).cohort(0.0).opens_in == 2.0


def test_lru_bounds_memory() -> None:
    p = Pacer(max_origins=3)
    for i in range(10):
        p.track(f"http://h{i}:80").acquire(0.0)
    assert p.origins() == ["http://h7:80", "http://h8:80", "http://h9:80"]
    assert "origins=3" in repr(p)


def test_budget() -> None:
    p = Pacer()
    budget = RetryBudget(ratio=0.0, min_per_second=0.2, window=10)
    tracker = p.track(ORIGIN)
    tracker.record_attempt(budget, 0.0)
    assert tracker.try_retry(budget, 0.0)  # checked and taken in one step
    assert tracker.try_retry(budget, 0.0)
    assert not tracker.try_retry(budget, 0.0)


def test_validation() -> None:
    with pytest.raises(ValueError, match="max_origins"):
        Pacer(max_origins=0)
    with pytest.raises(ValueError, match="probe"):
        Pacer(probe=-1)


def test_threads_share_one_origin_safely() -> None:
    """16 threads x 500 admissions: counts stay consistent, slots stay spaced."""
    p = Pacer(probe=0)
    known(p, hints=Hints(remaining=0, limit=1000, window=1.0))
    slots: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(500):
            a = p.track(ORIGIN).acquire(0.0)
            if a.final:
                p.track(ORIGIN).sent()
                with lock:
                    slots.append(a.delay)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slots.sort()
    assert len(set(slots)) == len(slots)
    assert all(b - a >= 0.001 - 1e-9 for a, b in itertools.pairwise(slots))
    assert p.view(ORIGIN).waiting == 0


def test_try_now_admits_only_without_waiting() -> None:
    """The edges' fast lane: a free slot is taken and counted; no slot reserves nothing."""
    p = Pacer(probe=0)
    known(p, hints=Hints(remaining=2, limit=10, window=1.0, reset_after=1.0))
    assert p.track(ORIGIN).try_now(0.0)
    assert p.track(ORIGIN).try_now(0.0)
    assert p.view(ORIGIN).in_flight == 2
    assert not p.track(ORIGIN).try_now(0.0)  # the burst is spent: 0.1 s to the next slot
    assert p.view(ORIGIN).in_flight == 2
    assert admit(p, 0.0) == pytest.approx(0.1)  # nothing was reserved by the refusal
    assert p.track(ORIGIN).try_now(0.25)


def test_try_now_respects_gate_queue_and_probe() -> None:
    p = Pacer(probe=0.25)
    assert p.track(ORIGIN).try_now(0.0)  # the cold-start probe itself
    assert not p.track(ORIGIN).try_now(0.01)  # others wait for its response
    p.track(ORIGIN).observe(503, Hints(retry_after=2.0), 0.02)
    assert not p.track(ORIGIN).try_now(1.0)  # the gate is closed
    assert p.track(ORIGIN).acquire(2.1).final  # somebody is waiting for a slot...
    assert not p.track(ORIGIN).try_now(2.1)  # ...so nobody jumps the queue
    p.track(ORIGIN).sent()
    assert not p.track(ORIGIN).try_now(2.1)  # it probes the origin the 503 closed...
    p.track(ORIGIN).observe(200, Hints(), 2.15, sent_at=2.1)
    assert p.track(ORIGIN).try_now(2.2)  # ...which its success reopens


def test_observe_uncounted_keeps_in_flight() -> None:
    p = Pacer(probe=0)
    known(p)
    assert p.track(ORIGIN).try_now(0.0)
    p.track(ORIGIN).observe(200, Hints(), 0.1, counted=False)  # a healthy-lane response
    assert p.view(ORIGIN).in_flight == 1
    p.track(ORIGIN).observe(200, Hints(), 0.1)
    assert p.view(ORIGIN).in_flight == 0


def test_a_stale_quota_never_reopens_a_spent_burst() -> None:
    """
    Responses overtake each other: one that left the server before our latest sends reports
    more tokens than are left.  The mirror keeps the more pessimistic of its own accounting and
    the server's word, so such a response cannot release a burst the server will refuse.
    """

    def paced_after_stale(stale: bool) -> float:
        p = Pacer(probe=0)
        known(p, hints=Hints(remaining=5, limit=10, window=1.0, reset_after=1.0))
        for _ in range(5):
            assert admit(p, 0.0) == 0.0  # the reported burst, spent at once
        if stale:  # the answer to a request sent before those five, still saying 5 left
            p.track(ORIGIN).observe(200, Hints(remaining=5, limit=10, window=1.0), 0.01)
        return p.track(ORIGIN).acquire(0.01).delay

    assert paced_after_stale(stale=True) >= paced_after_stale(stale=False) > 0


def test_a_window_reset_reopens_at_once() -> None:
    """A fixed window (GitHub's hour) refills all at once: the server's word then wins."""
    p = Pacer(probe=0)
    known(p, hints=Hints(remaining=100, limit=100, window=3600.0, reset_after=10.0))
    assert [admit(p, 0.0) for _ in range(100)] == [0.0] * 100  # the whole window, at once
    for _ in range(100):
        p.track(ORIGIN).observe(200, Hints(remaining=0, limit=100, window=3600.0), 1.0)
    assert p.track(ORIGIN).acquire(1.0).delay > 30  # spent: one token per 36 s from here
    p.track(ORIGIN).cancel()
    p.track(ORIGIN).observe(200, Hints(remaining=100, limit=100, window=3600.0), 10.5)  # new window
    assert [admit(p, 10.5) for _ in range(50)] == [0.0] * 50


def test_windows_are_guessed_per_quota() -> None:
    """
    GitHub states no window: it is the longest time-to-reset seen, per quota size, so a
    search response (30 a minute) is not paced as if its 30 were spread over core's hour.
    """
    p = Pacer(probe=0)
    known(p, hints=Hints(remaining=4000, limit=5000, reset_after=3500.0))
    p.track(ORIGIN).acquire(0.0)
    p.track(ORIGIN).sent()
    p.track(ORIGIN).observe(200, Hints(remaining=0, limit=30, reset_after=50.0), 0.0)
    assert 1.5 <= p.track(ORIGIN).acquire(0.0).delay <= 2.0  # 30 per >= 50 s, not 30 per 3500 s
    p.track(ORIGIN).cancel()
    for limit in range(100, 120):  # many quota sizes: the guesses stay bounded
        p.track(ORIGIN).observe(200, Hints(remaining=1, limit=limit, reset_after=9.0), 0.0)
    assert len(memory(p).state.window_guesses) == MAX_WINDOW_GUESSES


def test_success_memory_follows_the_rate_not_the_lifetime() -> None:
    p = Pacer(probe=0)
    known(p)
    for i in range(10_000):  # 100 s at 100 successes a second, half on each path
        if i % 2:
            p.track(ORIGIN).note_success(i / 100)
        else:
            p.track(ORIGIN).observe(200, Hints(), i / 100, counted=False)
    assert len(memory(p).state.successes) <= 102  # about the last second's
    p.track(ORIGIN).observe(429, Hints(), 100.0, counted=False)  # the learned rate still sees them
    assert p.view(ORIGIN).rate == pytest.approx(100, abs=2)


def test_pickling_keeps_the_settings_not_the_state() -> None:
    p = Pacer(max_origins=5, probe=0.1, learned_floor=2.0, quiet=9.0)
    known(p, hints=Hints(retry_after=30.0), status=429)
    copy = pickle.loads(pickle.dumps(p))
    assert copy.max_origins == 5
    assert (copy.settings.probe, copy.settings.learned_floor, copy.settings.quiet) == (
        0.1,
        2.0,
        9.0,
    )
    assert copy.origins() == []
    assert copy.track(ORIGIN).acquire(0.0).delay == 0.0  # the original's gate did not come along


def test_the_view_shows_the_quota() -> None:
    """Remaining, limit, window (stated, or the longest reset seen), reset and rate."""
    from smoothclient.hints import Hints

    pacer = Pacer(probe=0)
    stated = pacer.track("https://a.test:443")
    stated.observe(200, Hints(remaining=50, limit=100, window=10), pacer.clock(), counted=False)
    view = pacer.view("https://a.test:443")
    assert (view.remaining, view.limit, view.window, view.rate) == (50, 100, 10.0, 10.0)
    guessed = pacer.track("https://b.test:443")
    guessed.observe(
        200, Hints(remaining=50, limit=100, reset_after=30), pacer.clock(), counted=False
    )
    other = pacer.view("https://b.test:443")
    assert other.window == 30.0
    assert other.reset_in is not None
    assert 29 < other.reset_in <= 30
    assert pacer.view("https://c.test:443").window is None


def test_the_public_face_is_the_views_and_the_edges_door() -> None:
    """``help(Pacer)`` shows the views and the door every edge uses, nothing private."""
    public = {name for name in dir(Pacer) if not name.startswith("_")}
    views = {"origins", "routes", "scope", "scopes", "view"}  # scope: a setting, read-only
    assert public == views | {"track", "bind", "binding"}
    pacer = Pacer()
    assert isinstance(pacer, PacerLike)  # the edges' protocol, by public names
    assert callable(pacer.peek)
    assert pacer.scope_book("https://nowhere.test:443") is None


def test_the_scope_function_is_fixed_at_construction() -> None:
    """Edges read the pacer's scope function when made: it cannot be swapped under them."""
    pacer = Pacer(scope=GITHUB_SCOPES)
    assert pacer.scope is GITHUB_SCOPES
    with pytest.raises(AttributeError):
        pacer.scope = None  # type: ignore[misc]
