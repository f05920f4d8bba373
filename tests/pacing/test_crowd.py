"""The crowd window (a concurrency limit's), as pure functions on a state: no clock, no I/O."""

from __future__ import annotations

import copy
import math

import pytest

from smoothclient import Hints
from smoothclient.pacing import admission as adm
from smoothclient.pacing import crowd, learning
from smoothclient.pacing import state as st

S = st.Settings(probe=0)


def slow(in_flight: int = 0, latency: float = 0.1) -> st.OriginState:
    """An origin that takes ``latency`` to serve a request, ``in_flight`` others out."""
    return st.OriginState(known=True, latency=latency, in_flight=in_flight)


def test_a_throttle_while_others_are_served_sets_the_window_not_the_rate() -> None:
    o = slow(in_flight=6)  # this request and 5 others
    learning.observe(o, S, 429, Hints(), 10.0, sent_at=9.99, counted=True)
    assert o.crowd_window == 5.0
    assert o.pace.rate is None
    assert list(o.throttles) == [10.0]  # kept for the rate controller all the same
    assert not adm.healthy(o, 10.0)


def test_the_window_takes_the_fewest_others_seen() -> None:
    o = slow(in_flight=30)
    for others in (30, 12, 5, 9):
        o.in_flight = others
        assert crowd.crowded(o, S, 1.0, counted=True)
    assert o.crowd_window == 5.0


def test_a_request_not_counted_in_flight_starts_the_window_at_one() -> None:
    o = slow(in_flight=0)
    assert crowd.crowded(o, S, 1.0, counted=False)
    assert o.crowd_window == 1.0


def test_a_request_not_counted_in_flight_leaves_a_window_as_it_is() -> None:
    """
    It cannot tell how many others were: a window set by counted requests stays.

    Through a shared store, a process whose copy still showed the origin healthy sent its
    requests uncounted; their throttles cut the fleet's window of six to one, again and
    again, and the fleet of twelve took a second to grow it back.
    """
    o = slow(in_flight=6)
    assert crowd.crowded(o, S, 1.0, counted=True)
    assert o.crowd_window == 6.0
    o.in_flight = 0
    assert crowd.crowded(o, S, 1.01, counted=False, sent_at=1.005)
    assert o.crowd_window == 6.0
    assert crowd.crowded(o, S, 1.02, counted=True, sent_at=1.015)  # counted, others gone
    assert crowd.width(o) == crowd.LEAST  # (below one: the others hold every place)


@pytest.mark.parametrize("in_flight", [0, 3, 6, 7])
@pytest.mark.parametrize("window", [math.inf, 2.0, 6.0])
@pytest.mark.parametrize("deadline", [None, 1.001, 5.0])
def test_what_a_held_poll_is_answered_is_what_acquire_answers(
    in_flight: int, window: float, deadline: float | None
) -> None:
    """:func:`admission.held` answers only what acquire would, changing only the queue."""

    o = slow(in_flight=in_flight)
    o.crowd_window = window
    o.crowd_moved = 0.99
    o.pace.tat = 1.2  # (paced besides: a slot at 1.2 when the window has room)
    shared = st.Settings(probe=0, shared=True)
    quick, full = copy.deepcopy(o), copy.deepcopy(o)
    answer = adm.held(quick, shared, 1.0, 0.0, deadline)
    expected = adm.acquire(full, shared, 1.0, 0.0, deadline)
    if answer is None:
        assert quick == o  # it changed nothing
        assert window == math.inf or in_flight + 1 <= window
    else:
        assert answer == expected
        assert quick == full  # the queue too
        assert quick.waiting == o.waiting  # nothing taken


def test_a_lone_request_turned_away_is_a_rate_limit_for_a_quiet_spell() -> None:
    o = slow(in_flight=3)
    assert crowd.crowded(o, S, 1.0, counted=True)
    o.in_flight = 0
    assert not crowd.crowded(o, S, 2.0, counted=True)
    assert o.crowd_window == math.inf
    assert o.lone_at == 2.0
    o.in_flight = 4
    assert not crowd.crowded(o, S, 2.0 + S.quiet, counted=True)  # still a rate's
    assert crowd.crowded(o, S, 2.1 + S.quiet, counted=True)  # quiet long enough: a crowd again


def test_a_throttle_with_the_window_at_one_hands_over_to_the_rate() -> None:
    o = slow(in_flight=2)  # this request and one more: the window let two out
    o.crowd_window = 1.0
    learning.observe(o, S, 429, Hints(), 10.0, sent_at=9.9, counted=True)  # as slow as a success
    assert o.crowd_window == math.inf
    assert o.lone_at == 10.0


def test_throttles_not_counted_in_flight_keep_the_window_at_one() -> None:
    """A herd sent to a healthy origin: none of its throttles can tell how many were out."""
    o = slow(in_flight=0)
    for _ in range(3):
        assert crowd.crowded(o, S, 1.0, counted=False)
    assert o.crowd_window == 1.0


def test_a_quickly_served_origin_has_no_window() -> None:
    o = slow(in_flight=5, latency=crowd.SERVED / 2)
    assert not crowd.crowded(o, S, 1.0, counted=True)
    assert o.crowd_window == math.inf


def test_an_origin_never_served_has_no_window() -> None:
    o = st.OriginState(known=True, in_flight=5)
    assert not crowd.crowded(o, S, 1.0, counted=True)


def test_successes_keep_the_quickest_time_and_widen_a_full_window() -> None:
    o = st.OriginState(known=True)
    crowd.served(o, S, 1.3, sent_at=1.0)
    crowd.served(o, S, 2.1, sent_at=2.0)
    crowd.served(o, S, 3.5, sent_at=3.0)
    assert o.latency is not None
    assert math.isclose(o.latency, 0.1)
    o.crowd_window, o.crowded_at, o.in_flight = 4.0, 3.5, 3  # (cut a service time ago)
    crowd.served(o, S, 3.6, sent_at=3.5)
    assert o.crowd_window == 4.25  # full (3 others + this one): one more every window's worth
    o.in_flight = 1
    crowd.served(o, S, 3.7, sent_at=3.6)
    assert o.crowd_window == 4.25  # not full: no evidence it could take more
    o.crowd_window, o.in_flight = 2.5, 1  # a window of 2.5 holds two: full with this one
    crowd.served(o, S, 3.8, sent_at=3.7)
    assert o.crowd_window == 2.9
    o.crowd_window = 4.25
    crowd.served(o, S, 3.0 + S.quiet + 1, sent_at=3.0 + S.quiet + 0.9)
    assert o.crowd_window == math.inf  # no crowd's throttle for a quiet spell


def test_a_full_window_not_cut_for_a_while_grows_by_one_a_success() -> None:
    """
    The others of a fleet that held the places are done: a slow start, not one a window.

    Grown by one a window's worth from one place, the last process of a fleet of three took a
    second to fill the five places the others had left.
    """
    o = slow(in_flight=0)
    o.crowd_window, o.crowded_at = 1.0, 10.0
    now = 10.0 + crowd.REGROW * 0.1  # (latency 0.1: four service times without a cut)
    for expected in (2.0, 3.0, 4.0):
        o.in_flight = int(expected) - 1  # full: the others and this one
        crowd.served(o, S, now, sent_at=now - 0.1)
        assert o.crowd_window == expected
        now += 0.01
    o.crowded_at = now  # a cut: one a window's worth again
    o.in_flight = 3
    crowd.served(o, S, now + 0.05, sent_at=now - 0.05)
    assert o.crowd_window == 4.25
    # a shared store's window counts the fleet's places: nobody holds them unseen
    o.crowd_window, o.crowded_at, o.in_flight = 4.0, 10.0, 3
    crowd.served(o, st.Settings(probe=0, shared=True), 20.0, sent_at=19.9)
    assert o.crowd_window == 4.25


def test_a_full_window_holds_requests_and_frees_a_place_per_answer() -> None:
    o = slow(in_flight=2)
    o.crowd_window, o.crowd_moved = 3.0, 10.0
    assert adm.try_now(o, S, 10.0)  # the third place
    assert o.in_flight == 3
    assert not adm.try_now(o, S, 10.01)
    admission = adm.acquire(o, S, 10.01, 10.01, None)
    assert not admission.final
    assert admission.delay == st.PROBE_POLL
    learning.observe(o, S, 200, Hints(), 10.1, sent_at=10.0, counted=True)
    assert adm.acquire(o, S, 10.1, 10.1, None).final


def test_below_one_with_no_success_for_a_while_knocks_slower_down_to_a_gap() -> None:
    """A limiter that counts what it refuses stays shut while knocked on at LEAST."""
    o = slow(latency=0.03)
    o.successes.append(10.0)  # the last success
    o.crowd_window = 1.0
    now = 10.2
    assert crowd.crowded(o, S, now, counted=True, sent_at=now - 0.001)
    assert crowd.width(o) == crowd.LEAST  # a success not long ago: the others may finish soon
    widths = []
    for step in range(1, 8):  # then no success for PATIENCE: each refusal halves it
        now = 10.0 + crowd.PATIENCE + 0.1 * step
        assert crowd.crowded(o, S, now, counted=True, sent_at=now - 0.001)
        widths.append(crowd.width(o))
    assert widths[:3] == pytest.approx([0.25, 0.125, 0.0625])
    least = 0.03 / crowd.KNOCK_GAP
    assert widths[-1] == pytest.approx(least)  # a knock every KNOCK_GAP at the least
    assert o.pace.interval == pytest.approx(crowd.KNOCK_GAP)
    crowd.served(o, S, now + 0.5, sent_at=now + 0.47)  # a place came free: one again
    assert crowd.width(o) == 1.0


def test_a_full_window_that_hears_nothing_back_lets_one_go() -> None:
    """Counts of a fleet's process that ended unwritten never hold an origin for good."""
    o = slow(in_flight=3, latency=0.1)
    o.crowd_window, o.crowd_moved = 3.0, 10.0
    assert not adm.try_now(o, S, 10.0 + 0.9 * st.STALE * 0.1)
    assert adm.try_now(o, S, 10.0 + 1.1 * st.STALE * 0.1)


def test_a_cohort_under_a_window_is_paced_by_it() -> None:
    o = slow()
    assert not adm.cohort(o, 0.0).paced
    o.crowd_window = 2.0
    assert adm.cohort(o, 0.0).paced


def test_a_shared_store_builds_the_window_on_the_fleets_counts() -> None:
    """Through a shared store ``in_flight`` is the fleet's: the window is the fleet's too."""
    shared = st.Settings(probe=0, shared=True)
    o = slow(in_flight=5)  # the fleet's others, every process's counts summed
    assert crowd.crowded(o, shared, 1.0, counted=True, sent_at=0.999)
    assert o.crowd_window == 5.0
    assert o.pace.rate is None


def test_a_full_window_is_asked_again_a_quarter_service_time_later_through_a_shared_store() -> None:
    """
    In memory a held request asks again at once; through a store an ask is a round trip.

    The fleet's places free about a service time apart, so asking every 5 ms was 20 round
    trips per place for each waiter of each process.
    """
    for settings, again in ((S, st.PROBE_POLL), (st.Settings(probe=0, shared=True), 0.025)):
        o = slow(in_flight=2, latency=0.1)
        o.crowd_window, o.crowd_moved = 2.0, 1.0
        answer = adm.acquire(o, settings, 1.0, 1.0, None)
        assert not answer.final
        assert answer.delay == again
    o = slow(in_flight=2, latency=5.0)  # a slow origin: never more than HORIZON / 2
    o.crowd_window, o.crowd_moved = 2.0, 1.0
    assert adm.acquire(o, st.Settings(probe=0, shared=True), 1.0, 1.0, None).delay == (
        st.HORIZON / 2
    )


def test_a_success_under_a_window_is_no_answer_to_defer() -> None:
    """The place it frees is the fleet's: a store that deferred it held the fleet's place."""
    o = slow()
    assert learning.can_wait(o, 200, Hints())
    o.crowd_window = 5.0
    assert not learning.can_wait(o, 200, Hints())


# ---------------------------------------------------------------- fleets that share nothing


def test_a_lone_request_turned_away_at_once_is_a_fleets_not_a_rate() -> None:
    """
    A fleet's others hold every place: this process's requests all came back turned away.

    Its count in flight fell to none while they came back, so the last was turned away
    "alone"; at once, though (3 ms, against 100 ms a success), as a full limiter turns away:
    the window goes below one (half a place: one request every 200 ms), not to the rate
    controller (one a second, then a slow start: a fleet of three took 5x the ideal).
    """
    o = slow(in_flight=0)
    assert crowd.crowded(o, S, 1.0, counted=True, sent_at=0.997)
    assert crowd.width(o) == 0.5
    assert o.crowd_window == 1.0  # admission's window: one at a time ...
    assert o.pace.rate == 5.0  # ... one every latency / window
    assert not o.learned
    assert o.lone_at < 0  # no rate's limit shown


def test_a_lone_throttle_as_slow_as_a_success_is_a_rate_limit() -> None:
    """A remote rate limiter: a throttle takes the round trip a success takes."""
    o = slow(in_flight=0)
    assert not crowd.crowded(o, S, 1.0, counted=True, sent_at=0.92)
    assert o.crowd_window == math.inf
    assert o.lone_at == 1.0


def test_a_throttle_sent_before_the_last_cut_shows_no_rate_however_late() -> None:
    """
    A wave's last throttle, read late by a loaded client, is no rate's limit.

    A fleet of twelve sent its first wave at once: each process's requests came back turned
    away, cutting the window to the others still out, and the last came back alone, 95 ms
    after it was sent against 105 ms a success (the client's event loop late to read what
    nginx answered at once).  Sent before the cuts, it tells nothing the cuts did not: read
    as a rate's limit, the process was paced at a request a second for a quiet spell, and the
    fleet took 2.5-3.2x the ideal time in 11 runs of 19.  A request sent after the cut and
    turned away alone as slowly still shows a rate's limit.
    """
    o = slow(in_flight=3)  # this request and two more of its wave, all sent at 0.9
    learning.observe(o, S, 429, Hints(), 1.0, sent_at=0.9, counted=True)
    assert o.crowd_window == 2.0
    learning.observe(o, S, 429, Hints(), 1.01, sent_at=0.9, counted=True)
    assert o.crowd_window == 1.0
    learning.observe(o, S, 429, Hints(), 1.02, sent_at=0.9, counted=True)  # alone, late
    assert o.crowd_window == 1.0
    assert o.lone_at < 0
    assert not o.learned  # the rate controller paces nothing
    o.in_flight = 1
    learning.observe(o, S, 429, Hints(), 1.2, sent_at=1.1, counted=True)  # sent after the cut
    assert o.crowd_window == math.inf
    assert o.lone_at == 1.2


def test_a_window_below_one_is_cut_once_a_round_down_to_the_least() -> None:
    o = slow(in_flight=0)
    assert crowd.crowded(o, S, 1.0, counted=True, sent_at=0.997)
    # the herd's others, sent with it before the cut: nothing more
    for _ in range(5):
        assert crowd.crowded(o, S, 1.001, counted=True, sent_at=0.997)
    assert crowd.width(o) == 0.5
    # each request sent after a cut and turned away halves it, down to LEAST
    now = 1.2
    for expected in (max(crowd.LEAST, 0.25), crowd.LEAST, crowd.LEAST):
        assert crowd.crowded(o, S, now, counted=True, sent_at=now - 0.003)
        assert math.isclose(crowd.width(o), expected)
        now += 1.0


def test_below_one_the_next_request_waits_its_interval() -> None:
    """Not sent at once into the full limiter that turned the last one away."""
    o = slow(in_flight=0)
    assert crowd.crowded(o, S, 10.0, counted=True, sent_at=9.997)
    admission = adm.acquire(o, S, 10.0, 10.0, None)
    assert admission.final
    assert math.isclose(admission.delay, 0.2)  # latency / window: 0.1 / 0.5


def test_a_success_below_one_holds_a_place_again() -> None:
    """A place came free (the others are done): one at a time, and successes widen it."""
    o = slow(in_flight=0)
    assert crowd.crowded(o, S, 10.0, counted=True, sent_at=9.997)
    crowd.served(o, S, 10.3, sent_at=10.2)
    assert crowd.width(o) == 1.0
    assert o.pace.rate is None
    crowd.served(o, S, 10.4, sent_at=10.3)
    assert o.crowd_window == 2.0


def _retake_refused(o: st.OriginState, served_at: float) -> bool:
    """A success at ``served_at`` frees the only place; the request sent at once is refused."""
    crowd.served(o, S, served_at, sent_at=served_at - 0.1)
    return crowd.crowded(o, S, served_at + 0.003, counted=True, sent_at=served_at)


def test_retakes_turned_away_at_once_in_a_row_are_a_rate_limit() -> None:
    """
    A rate limiter in front of a slow application (a gateway) looks like a full crowd.

    Its successes take the application's time, its refusals come at once.  A concurrency
    limit gives back the place a success of ours just freed; a rate's limit that success has
    just spent turns the next request away, every time: nginx ``limit_req`` in front of 30 ms
    answers had one request turned away for each that got through.
    """
    o = slow(in_flight=0)
    assert crowd.crowded(o, S, 1.0, counted=True, sent_at=0.997)  # a full crowd, it seems
    assert _retake_refused(o, 1.3)  # one: another client may have taken the place
    assert o.crowd_window == 1.0
    assert not _retake_refused(o, 1.6)  # twice in a row: a rate's limit
    assert o.crowd_window == math.inf
    assert o.lone_at == 1.603
    assert o.retakes_refused == 0


def test_a_retake_that_gets_through_or_a_knock_turned_away_starts_the_count_again() -> None:
    """A concurrency fleet: another process took a freed place once, not each time."""
    o = slow(in_flight=0)
    assert crowd.crowded(o, S, 1.0, counted=True, sent_at=0.997)
    assert _retake_refused(o, 1.3)
    crowd.served(o, S, 1.5, sent_at=1.4)  # ... and a retake of the next freed place gets it
    crowd.served(o, S, 1.6, sent_at=1.5)
    assert o.retakes_refused == 0
    assert _retake_refused(o, 1.8)
    assert crowd.crowded(o, S, 2.5, counted=True, sent_at=2.497)  # a knock, turned away
    assert o.retakes_refused == 0
    assert _retake_refused(o, 2.8)
    assert o.crowd_window == 1.0  # still a crowd


def test_only_the_first_request_after_a_freed_place_retakes_it() -> None:
    """Others sent right after it (a window that grew to two) are knocks, not retakes."""
    o = slow(in_flight=0)
    assert crowd.crowded(o, S, 1.0, counted=True, sent_at=0.997)
    assert _retake_refused(o, 1.3)
    assert crowd.crowded(o, S, 1.31, counted=True, sent_at=1.303)  # sent after the retake
    assert o.crowd_window == 1.0
    assert o.retakes_refused == 0


@pytest.mark.parametrize("shared", [False, True])
def test_a_rate_learned_before_the_first_success_gives_way_to_the_window(shared: bool) -> None:
    """
    A process whose first request was turned away knew no service time: the rate
    controller paced it at a request a second.  Its first success shows a slow origin:
    one place, not that rate (through a shared store too: the fleet's state).
    """
    o = st.OriginState(known=True)
    o.learned, o.pace.rate, o.last_throttle = True, 1.0, 1.9
    settings = st.Settings(probe=0, shared=shared)
    learning.observe(o, settings, 200, Hints(), 2.1, sent_at=2.0, counted=True)
    assert not o.learned
    assert o.pace.rate is None
    assert o.crowd_window == 2.0  # its place, and this success's full window widened
    # not on a quickly served origin (a rate limiter's)
    quick = st.OriginState(known=True)
    quick.learned, quick.pace.rate, quick.last_throttle = True, 1.0, 1.9
    learning.observe(quick, S, 200, Hints(), 2.01, sent_at=2.0, counted=True)
    assert quick.learned


def test_a_slow_origins_crowd_spaces_requests_at_most_max_gate_apart() -> None:
    """
    A window below one spaces requests by ``latency / window``, never past ``max_gate``.

    An origin that took 100 s to answer (or such a time read from a shared store) spaced
    them 200 s apart after one throttle, where ``max_gate`` was 30.
    """
    o, s = st.OriginState(), st.Settings(max_gate=30.0)
    o.latency = 100.0
    learning.observe(o, s, 429, Hints(retry_after=1.0), 1000.0, sent_at=999.9, counted=True)
    assert o.pace.interval <= s.max_gate
    admitted = adm.acquire(o, s, 1000.05, 1000.05, 1300.05)
    assert admitted.delay <= s.max_gate


def test_through_a_shared_store_the_first_waiter_asks_again_soonest() -> None:
    """
    A process's first waiter asks at once (from the copy its own answers update); the rest a
    quarter of a service time apart, as does a call that states no deadline (were every
    such call first, every one would ask every few milliseconds).
    """
    o = slow(in_flight=5)
    o.crowd_window, o.crowd_moved = 5.0, 0.99
    shared = st.Settings(probe=0, shared=True)
    first = adm.held(o, shared, 1.0, 0.0, 10.0)
    later = adm.held(o, shared, 1.0, 0.0, 20.0)
    unbounded = adm.held(o, shared, 1.0, 0.0, None)
    assert first is not None
    assert later is not None
    assert unbounded is not None
    assert first.delay == st.PROBE_POLL
    assert later.delay == unbounded.delay == pytest.approx(crowd.ASK_AGAIN * 0.1)
    again = adm.held(o, shared, 1.005, 0.0, 10.0)  # still the first
    assert again is not None
    assert again.delay == st.PROBE_POLL
    alone = adm.held(o, S, 1.0, 0.0, 20.0)  # in memory: every waiter at once
    assert alone is not None
    assert alone.delay == st.PROBE_POLL
