"""Slots go to the calls nearest their deadlines first: the waiters' queue of admission."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from smoothclient.pacing.admission import acquire, try_now, when
from smoothclient.pacing.codec import dump, load
from smoothclient.pacing.gcra import Gcra
from smoothclient.pacing.state import HORIZON, MAX_QUEUE, QUEUE_GRACE, OriginState, Settings

S = Settings()


def _paced(rate: float = 2.0) -> OriginState:
    """A known origin paced at ``rate`` (one slot every ``1 / rate`` s), its next slot at 0."""
    return OriginState(known=True, pace=Gcra(rate=rate))


def _until_slot(o: OriginState, now: float, deadline: float) -> tuple[float, bool]:
    """Ask as a call does until it is granted; when it was, and whether it was."""
    for _ in range(1000):
        a = acquire(o, S, now, 0.0, deadline)
        if not a.granted:
            return now, False
        if a.final:
            return now + a.delay, True
        now += a.delay
    raise AssertionError("never answered")


def test_a_held_call_gets_the_slot_before_a_newer_one_that_asks_first() -> None:
    """The older call was told to ask again; a newer call asking before it does waits."""
    o = _paced()
    assert acquire(o, S, 0.0, 0.0, 60.0).final  # the slot at 0 taken: the next is at 0.5
    old = acquire(o, S, 0.01, 0.0, 10.0)  # held: the slot is too far ahead to fix
    assert not old.final
    again = 0.01 + old.delay
    assert again < 0.5 - HORIZON / 4  # it asks again before its slot
    newer = acquire(o, S, again - 0.001, 0.0, 50.0)  # a newer call, just before it
    assert not newer.final
    assert newer.delay <= HORIZON / 2
    assert [d for d, _ in o.queue] == [10.0, 50.0]
    mine = acquire(o, S, again, 0.0, 10.0)
    assert mine.final
    assert abs(again + mine.delay - 0.5) < 1e-9  # the old call's: the slot at 0.5
    assert [d for d, _ in o.queue] == [50.0]  # served: it holds nobody back any more


def test_without_the_queue_the_newer_call_would_have_taken_it() -> None:
    """The same start with no older waiter: the newer call's ask is granted the slot."""
    o = _paced()
    assert acquire(o, S, 0.0, 0.0, 60.0).final
    a = acquire(o, S, 0.3, 0.0, 50.0)
    assert a.final
    assert abs(0.3 + a.delay - 0.5) < 1e-9


def test_a_waiter_that_stops_asking_is_forgotten_after_the_grace() -> None:
    """A cancelled call (never asks again) holds the others back for QUEUE_GRACE at most."""
    o = _paced()
    acquire(o, S, 0.0, 0.0, 60.0)
    gone = acquire(o, S, 0.01, 0.0, 10.0)
    due = 0.01 + gone.delay
    assert not acquire(o, S, due + QUEUE_GRACE / 2, 0.0, 50.0).final  # within the grace
    late = acquire(o, S, due + QUEUE_GRACE + 0.01, 0.0, 50.0)
    assert late.final
    assert late.granted
    assert o.queue == []


def test_callers_that_name_a_new_deadline_at_each_ask_are_all_served() -> None:
    """
    Thirty callers asking every 5 ms with ``deadline=now + 60`` each time: each ask's entry
    was due at its own next ask and held it back, for ever (a Redis cluster test hung on it).
    """
    o = _paced(rate=50.0)
    asks = dict.fromkeys(range(30), 0.0)
    served = 0
    for _ in range(20_000):
        if not asks:
            break
        i, now = min(asks.items(), key=lambda kv: kv[1])
        a = acquire(o, S, now, 0.0, now + 60.0)
        if a.final:
            served += 1
            o.waiting -= 1  # (it went)
            del asks[i]
        else:
            asks[i] = now + a.delay
    assert served == 30
    assert not asks


def test_a_waiter_past_its_deadline_holds_nobody_back() -> None:
    """A deadline that passed: the call gives up, its entry goes at once."""
    o = _paced()
    acquire(o, S, 0.0, 0.0, 60.0)
    o.queue = [[0.3, 0.4]]  # due to ask again for the slot at 0.5, but its deadline is 0.3
    assert not acquire(o, S, 0.29, 0.0, 50.0).final
    assert acquire(o, S, 0.31, 0.0, 50.0).final
    assert o.queue == []


def test_a_refused_call_leaves_the_queue() -> None:
    """A call whose slot lies beyond its deadline is refused and forgotten."""
    o = _paced(rate=0.5)  # a slot every 2 s
    acquire(o, S, 0.0, 0.0, 60.0)
    assert not acquire(o, S, 0.1, 0.0, 60.0).final
    assert not acquire(o, S, 0.1, 0.0, 1.0).granted  # the slot at 2 is past 1
    assert [d for d, _ in o.queue] == [60.0]


def test_the_queue_keeps_the_nearest_deadlines_and_is_bounded() -> None:
    """More waiters than MAX_QUEUE: the nearest deadlines are remembered, the rest ask again."""
    o = _paced(rate=0.1)
    acquire(o, S, 0.0, 0.0, 600.0)
    for i in range(MAX_QUEUE + 10):
        assert not acquire(o, S, 0.1, 0.0, 500.0 - i).final
    assert len(o.queue) == MAX_QUEUE
    assert o.queue[0][0] == 500.0 - (MAX_QUEUE + 9)
    assert [d for d, _ in o.queue] == sorted(d for d, _ in o.queue)


def test_when_reserves_nothing_and_queues_nobody() -> None:
    o = _paced()
    acquire(o, S, 0.0, 0.0, 60.0)
    when(o, S, 0.01, 0.0, 10.0)
    assert o.queue == []


def test_when_answers_as_acquire_would_with_waiters_ahead() -> None:
    """
    A slot the waiters nearer their deadlines will have is theirs in the plan too.

    (Planned as free, a bound request took the origin's slot, met a scope's waiters, and gave
    it back: a write each way through a shared store.)
    """
    o = _paced()
    assert acquire(o, S, 0.0, 0.0, 60.0).final
    held = acquire(o, S, 0.01, 0.0, 10.0)
    again = 0.01 + held.delay
    before = (list(map(list, o.queue)), o.pace.tat, o.waiting)
    planned = when(o, S, again - 0.001, 0.0, 50.0)
    assert (list(map(list, o.queue)), o.pace.tat, o.waiting) == before  # nothing reserved
    asked = acquire(o, S, again - 0.001, 0.0, 50.0)
    assert not planned.final
    assert not asked.final
    assert planned.delay == asked.delay
    assert when(o, S, again, 0.0, 10.0).final  # the waiter's own: its slot


def test_the_fast_lane_does_not_jump_the_queue() -> None:
    """try_now admits nothing while a waiter is queued, even with a slot free."""
    o = _paced()
    acquire(o, S, 0.0, 0.0, 60.0)
    acquire(o, S, 0.01, 0.0, 10.0)
    due = o.queue[0][1]
    assert not try_now(o, S, due)  # the slot at 0.5 is the waiter's
    assert _until_slot(o, due, 10.0) == (0.5, True)
    o.waiting = 0  # (it went)
    assert try_now(o, S, 1.0)  # served: the next slot is anyone's


def test_a_call_waiting_for_its_backoff_is_not_queued() -> None:
    """A retry whose backoff ends later than a HORIZON from now does not hold slots yet."""
    o = _paced()
    acquire(o, S, 0.0, 0.0, 60.0)
    acquire(o, S, 0.01, 2.0, 10.0)
    assert o.queue == []


def test_calls_served_in_deadline_order_whatever_order_they_ask_in() -> None:
    """Eight held calls, asking latest deadline first at each instant, get slots by deadline."""
    o = _paced(rate=10.0)
    acquire(o, S, 0.0, 0.0, 600.0)
    o.gate = 1.0  # closed for a second (a Retry-After): everyone waits
    deadlines = [5.0, 3.0, 8.0, 1.5, 9.0, 2.0, 7.0, 4.0]
    asks = dict.fromkeys(deadlines, 0.0)  # when each asks next
    slots: dict[float, float] = {}
    while asks:
        now = min(asks.values())
        for d in sorted((d for d, t in asks.items() if t <= now), reverse=True):
            a = acquire(o, S, now, 0.0, d)
            assert a.granted
            if a.final:
                slots[d] = now + a.delay
                del asks[d]
            else:
                asks[d] = now + a.delay
    assert sorted(deadlines, key=lambda d: slots[d]) == sorted(deadlines)
    assert min(slots.values()) >= 1.0  # none before the gate


def _release(settings: Settings, waiters: int = 40, rate: float = 20.0) -> tuple[float, bool]:
    """Held calls released at ``rate`` when a gate opens: asks per call, and in deadline order."""
    o = _paced(rate=rate)
    acquire(o, settings, 0.0, 0.0, 600.0)
    o.gate = 1.0
    deadlines = [10.0 + i / 100 for i in range(waiters)]
    asks = dict.fromkeys(deadlines, 0.0)
    slots: dict[float, float] = {}
    count = 0
    while asks:
        now = min(asks.values())
        for d in sorted((d for d, t in asks.items() if t <= now), reverse=True):
            a = acquire(o, settings, now, 0.0, d)
            count += 1
            if a.final:
                slots[d] = now + a.delay
                del asks[d]
            else:
                asks[d] = now + a.delay
    in_order = sorted(deadlines, key=lambda d: slots[d]) == sorted(deadlines)
    assert max(slots.values()) <= 1.0 + waiters / rate  # no slot left unused on the way
    return count / waiters, in_order


def test_a_shared_stores_waiters_ask_when_their_turn_nears() -> None:
    """
    Through a shared store an ask costs a round trip: waiters ask again as their turn nears.

    Asking whenever the first of those ahead asked, 40 waiters at 20 req/s asked 28 times
    each (every 5 ms); in memory an ask costs microseconds and they still do.
    """
    per_call, in_order = _release(Settings(shared=True))
    assert in_order
    assert per_call <= 12
    alone, in_order = _release(S)
    assert in_order
    assert alone > 2 * per_call


def test_the_queue_stays_in_its_process() -> None:
    """A stored state carries no queue: which calls ask again when is each process's own."""
    o = _paced()
    acquire(o, S, 0.0, 0.0, 60.0)
    acquire(o, S, 0.01, 0.0, 10.0)
    assert o.queue
    assert "queue" not in json.loads(dump(o))
    assert load(dump(o)).queue == []


@given(st.lists(st.lists(st.one_of(st.floats(), st.integers(), st.text(), st.none()))))
def test_a_stored_queue_is_ignored(junk: list[list[object]]) -> None:
    """A queue in a stored state (an older version's, junk): never read, never a crash."""
    assert load(json.dumps({"queue": junk})).queue == []


def test_a_shared_store_queues_too() -> None:
    """The fleet's state (a shared store) orders this process's waiters as memory does."""
    shared = Settings(shared=True)
    o = _paced()
    acquire(o, shared, 0.0, 0.0, 60.0)
    assert not acquire(o, shared, 0.01, 0.0, 10.0).final
    assert [d for d, _ in o.queue] == [10.0]


def test_a_call_never_waits_past_its_deadline_for_another() -> None:
    """Yielding would mean asking again after its own deadline: it takes the slot instead."""
    o = _paced()
    acquire(o, S, 0.0, 0.0, 60.0)
    o.queue = [[0.5, 0.499]]  # nearer its deadline, due to take the slot at 0.5
    a = acquire(o, S, 0.498, 0.0, 0.501)  # its own deadline: 3 ms from now, under PROBE_POLL
    assert a.final
    assert a.granted


def test_an_answer_to_ask_again_never_asks_past_the_deadline() -> None:
    """A full crowd window's poll (5 ms) 2 ms before the deadline: 2 ms, then a refusal."""
    o = OriginState(known=True, crowd_window=1.0, in_flight=1, latency=1.0, crowd_moved=0.49)
    a = acquire(o, S, 0.498, 0.0, 0.5)
    assert not a.final
    assert abs(a.delay - 0.002) < 1e-12
    assert not acquire(o, S, 0.5, 0.0, 0.5).granted
    assert when(o, S, 0.498, 0.0, 0.5).delay <= 0.002 + 1e-12
