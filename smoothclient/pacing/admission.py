"""
Admission to an origin: when a request may go, as pure functions of its state.

Each function takes the origin's :class:`~.state.OriginState`, the pacer's
:class:`~.state.Settings` and ``now``, and updates the state in place; a store applies it
atomically (see :mod:`.store`).  How answers move the state is in :mod:`.learning`,
:mod:`.controller`, :mod:`.crowd` and :mod:`.outage`.
"""

from __future__ import annotations

import math

from ..engine.decide import CohortView
from .crowd import asks_again
from .outage import failing_share, taken
from .resets import due as reset_due
from .state import (
    EARLY_MAX,
    EARLY_MISSES,
    HORIZON,
    INF,
    MAX_QUEUE,
    NO_DEADLINE,
    PROBE_POLL,
    PROBE_WAIT,
    QUEUE_GRACE,
    STALE,
    Admission,
    OriginState,
    OriginView,
    Settings,
)

__all__ = ["acquire", "cohort", "healthy", "try_now", "view", "when"]


def _probing(o: OriginState, s: Settings, now: float) -> Admission | None:
    """
    Starts the cold-start probe if none went yet; the wait behind it, if one is out.

    A probe not answered within ``probe`` seconds (a slow origin, an event loop starved by the
    herd waiting on it) lets one more request go as a probe, not the whole herd: released at
    once, a thousand asyncio tasks sent 650 requests into a bucket of 20 (700 429s).  The
    first answer, whichever it is, ends the probing (:func:`~.learning.observe`).
    """
    if o.known or s.probe == 0:
        return None
    if o.probe_until is None or now >= o.probe_until:
        o.probe_until = now + s.probe
        return None  # this request is the probe (the first, or one more: the last is late)
    return _behind_probe(o, s, now)


def _behind_probe(o: OriginState, s: Settings, now: float) -> Admission | None:
    """
    The wait of a request behind an outstanding cold-start probe (reads only).

    Polled more slowly the longer the probe is out (an eighth of that time, at most
    ``HORIZON``): a thousand tasks polling every 5 ms starved the loop the answer comes on.
    """
    if o.known or s.probe == 0 or o.probe_until is None or now >= o.probe_until:
        return None
    out = max(0.0, now - o.first_seen)
    poll = min(HORIZON, max(PROBE_POLL, out / 8))
    return Admission(min(poll, o.probe_until - now), final=False)


def _plan(
    o: OriginState, s: Settings, now: float, not_before: float, deadline: float | None
) -> tuple[Admission, float | None]:
    """The answer for a slot no earlier than ``not_before``, and the slot if it is granted."""
    if _crowd_full(o, now):  # asked again soon: an answer frees a place
        return Admission(_crowd_poll(o, s, deadline), final=False), None
    start = max(now, not_before, o.gate)
    at = _slot(o, start)
    if at is None:  # a reset is being probed: its answer says how many may go
        return Admission(
            max(PROBE_POLL, (o.reset_probe or now) - now + PROBE_POLL), final=False
        ), None
    if deadline is not None and at > deadline:
        closed = None if o.closed is None or o.closed <= now else o.closed - now
        return Admission(at - now, final=True, granted=False, closed_for=closed), None
    if at - now > HORIZON:
        # too far ahead to fix a slot: the rate may change before then; ask again
        again = at - now - HORIZON / 2
        pace = o.pace
        if (
            o.learned
            and pace.interval > HORIZON
            and pace.rate is not None
            and pace.rate < o.ceiling
        ):
            # a learned rate slow-starting from under one request a HORIZON (a fleet's
            # process that lost the first wave, paced from the floor) grows with each success
            # and every slot with it: ask again halfway, so a rate raised meanwhile applies
            # within half the wait, not after all of it
            again = min(again, start - now + (at - start) / 2)
        if o.in_flight and o.avail is not None and o.avail < 1:
            # the ledger ran out with answers in flight: an overtaken one gives a token back
            again = min(again, HORIZON / 2)
        return Admission(again, final=False), None
    return Admission(at - now), at


def acquire(
    o: OriginState, s: Settings, now: float, not_before: float, deadline: float | None
) -> Admission:
    """
    Reserve a slot no earlier than ``not_before``.

    A granted final admission counts the request as waiting until it is sent or cancelled.
    An answer to ask again never asks past ``deadline`` (see :func:`_by_deadline`).
    """
    return _by_deadline(_acquire(o, s, now, not_before, deadline), now, deadline)


def held(
    o: OriginState, s: Settings, now: float, not_before: float, deadline: float | None
) -> Admission | None:
    """
    What :func:`acquire` answers a request that a full crowd window holds; else ``None``.

    That answer changes nothing a shared store writes (only this process's queue of waiters),
    so a store may give it from a copy it trusts, without a turn or a round trip: a fleet of
    twelve through Redis asked once every 25 ms per held request, and copying and comparing
    the state for each ask took both cores.
    """
    if not (o.known or s.probe == 0) or not _crowd_full(o, now):
        return None
    answer = Admission(_crowd_poll(o, s, deadline), final=False)
    if not_before <= now + HORIZON:
        _queue(o, NO_DEADLINE if deadline is None else deadline, now + answer.delay)
    return _by_deadline(answer, now, deadline)


def _by_deadline(answer: Admission, now: float, deadline: float | None) -> Admission:
    """
    ``answer``, but "ask again" no later than ``deadline``, and at it a refusal.

    Polls behind a probe (or a full crowd window) are a few milliseconds each, whatever the
    deadline: a call 3 ms from its end slept 5 ms more and ended past it.
    """
    if answer.final or deadline is None or now + answer.delay <= deadline:
        return answer
    if now >= deadline:
        return Admission(answer.delay, final=True, granted=False)
    return Admission(deadline - now, final=False)


def _acquire(
    o: OriginState, s: Settings, now: float, not_before: float, deadline: float | None
) -> Admission:
    probing = _probing(o, s, now)
    if probing is not None:
        return probing
    answer, at = _plan(o, s, now, not_before, deadline)
    due = NO_DEADLINE if deadline is None else deadline
    if at is not None:
        yielded = _yields(o, s, now, due, at)
        if yielded is not None:
            # a call nearer its deadline waits for this slot: it goes first (a call whose own
            # deadline would pass before it asked again takes the slot: no wait past it)
            # (yielding only to waiters due already, it is not remembered anew: a caller that
            # names a new deadline at each ask left an entry due at its own next ask, which
            # held that ask back, and so on for ever: 30 such callers asking every 5 ms were
            # never served; one remembered already is told when it asks next)
            again, anew = yielded
            _queue(o, due, now + again, new=anew)
            return Admission(again, final=False)
        _unqueue(o, due)
        _take(o, at)
        o.waiting += 1
    elif not answer.granted:
        _unqueue(o, due)  # it gives up: it holds nobody back
    elif not_before <= now + HORIZON:  # it waits for a slot, not a backoff
        _queue(o, due, now + answer.delay)
    return answer


def _yields(
    o: OriginState, s: Settings, now: float, due: float, at: float
) -> tuple[float, bool] | None:
    """
    Whether a call with deadline ``due`` leaves the slot at ``at`` to waiters nearer theirs.

    ``(when it asks again, whether it is remembered anew)``, or ``None``: it takes the slot.
    """
    ahead = _ahead(o, now, due, at)
    if ahead is None:
        return None
    first, behind = ahead
    again = min(HORIZON / 2, max(PROBE_POLL, first - now))
    if s.shared:
        # an ask costs a round trip and a copy of the key's state here: asked again halfway
        # to when the waiters ahead have had their slots (the one before its own, at the
        # pace; a quota's reset may admit them all at once).  Asking when the first of them
        # asks, each of a Redis fleet's 75 waiters a process asked every 5 ms through a
        # release (2,000 asks a second), and the processes' sends lagged their slots by
        # 110-150 ms.  In memory an ask costs microseconds, and asking often catches a slot
        # a raised rate frees
        turn = at + behind * o.pace.interval
        reset = reset_due(o)
        if reset is not None and reset > now:
            turn = min(turn, reset)
        again = min(HORIZON / 2, max(again, (turn - now) / 2))
    if now + again > due:
        return None
    return again, first > now


def _ahead(o: OriginState, now: float, deadline: float, at: float) -> tuple[float, float] | None:
    """
    When a waiter nearer its deadline than ``deadline`` asks again for the slot at ``at``.

    And how many slots after ``at`` such waiters take before this call's turn.  Slots go to the
    calls nearest their deadlines first (earliest deadline first: with one timeout for every
    call, the oldest first).  Without it the slots went to whoever asked: the calls that joined
    a backlog asked at once, the held ones asked again now and then, and some held calls waited
    out their deadlines behind newer ones (docs/outages.md section 5).  Only waiters that ask
    again by ``at`` hold slots, and only when they would take all there is room for then: a slot
    they would leave unused goes to the call asking now (a waiter queue never idles a slot).
    Waiters that stopped asking (cancelled, or a caller that names a new deadline at each ask)
    are forgotten :data:`QUEUE_GRACE` after their time to ask, and those past their deadlines at
    once.
    """
    queue = o.queue
    if not queue:
        return None
    lapsed = now - QUEUE_GRACE
    if queue[0][0] < now or any(due < lapsed for _, due in queue):  # (past its deadline: gone)
        queue[:] = [entry for entry in queue if entry[1] >= lapsed and entry[0] >= now]
    ahead = [due for d, due in queue if d < deadline and due <= at]
    room = _room(o, at)
    if len(ahead) < room:  # room at ``at`` for them all and this call
        return None
    return min(ahead), len(ahead) - room


def _room(o: OriginState, at: float) -> float:
    """How many requests may go at ``at``: the mirror's tokens, the ledger's, at least one."""
    pace = o.pace
    room = pace.tokens(at) if pace.interval else INF
    if o.avail is not None and o.avail >= 1:
        room = min(room, o.avail)
    return room if room == INF else max(1.0, math.floor(room))


def _queue(o: OriginState, deadline: float, at: float, *, new: bool = True) -> None:
    """
    Remember a waiter with ``deadline`` that asks again at ``at`` (kept in deadline order).

    ``new`` False: only if it is remembered already.
    """
    queue = o.queue
    for entry in queue:
        if entry[0] == deadline:
            entry[1] = at
            return
    if not new:
        return
    if len(queue) >= MAX_QUEUE:
        if deadline >= queue[-1][0]:
            return  # nearer deadlines fill the queue: it asks again like any other
        queue.pop()
    queue.append([deadline, at])
    queue.sort()


def _unqueue(o: OriginState, deadline: float) -> None:
    """Forget the waiter with ``deadline`` (it got its slot, or gave up)."""
    queue = o.queue
    for i, entry in enumerate(queue):
        if entry[0] == deadline:
            del queue[i]
            return


def when(
    o: OriginState, s: Settings, now: float, not_before: float, deadline: float | None
) -> Admission:
    """
    What :func:`acquire` would answer, reserving nothing.

    A slot the waiters nearer their deadlines are to have is theirs here too: planned by this
    answer, a bound request (an origin and its scopes) took the origin's slot, was refused by
    a scope's waiters, and gave it back, a write each way through a shared store (21 writes a
    request in a herd of a thousand tasks).
    """
    answer = _behind_probe(o, s, now)
    if answer is None:
        answer, at = _plan(o, s, now, not_before, deadline)
        if at is not None:
            yielded = _yields(o, s, now, NO_DEADLINE if deadline is None else deadline, at)
            if yielded is not None:
                answer = Admission(yielded[0], final=False)
    return _by_deadline(answer, now, deadline)


def _slot(o: OriginState, at: float) -> float | None:
    """
    The earliest time from ``at`` the model admits a request; ``None``: after a probe's answer.

    What the ledger says the quota still holds goes at once (at the pace of the GCRA mirror,
    if any).  Once it is spent, a bucket (or an unknown limiter with a known rate) is paced by
    the GCRA mirror; a window, or a quota whose rate is unknown, admits nothing until its
    reset, and after the reset one request goes alone: its answer says what the new window
    holds.
    """
    closed = o.closed is not None and at < o.closed
    if o.avail is None or o.avail >= 1 or (o.kind != "window" and o.pace.interval and not closed):
        return o.pace.earliest(at)
    if o.reset_probe is not None and at < o.reset_probe + PROBE_WAIT:
        return None  # another request probes the reset
    reset, due = o.reset_at, reset_due(o)  # (due: no later than a measured window lasts)
    if reset is None or due is None:
        return at
    if (
        (o.kind == "window" or closed)
        and o.early_misses < EARLY_MISSES
        and o.exhausted
        and at < reset
    ):
        # A stated reset is a bound: servers round it up (GitHub) or add to it (slowapi adds
        # a second).  One probe goes early: halfway at first (EARLY_MAX at most), then as
        # early before the stated reset as the last one that got through; a little later
        # after a miss, and none after a few misses in a row.
        if o.early_lead is None:
            early = reset - min(EARLY_MAX, (reset - o.exhausted[0]) / 2)
        else:
            early = max(o.exhausted[0], reset - min(EARLY_MAX, o.early_lead))
        return max(at, min(early, due))
    return max(at, due)


def _take(o: OriginState, at: float) -> None:
    """Spend a slot at ``at``: the GCRA's, the ledger's, or the reset probe's."""
    o.pace.take(at)
    if o.outage.down_since is not None:
        taken(o, at)  # the probe of an origin that is down
    if o.crowd_window != INF:
        o.crowd_moved = at
    o.first_seen = min(o.first_seen, at)
    o.period_sent += 1
    if o.avail is not None:
        if o.avail < 1 and (o.kind == "window" or not o.pace.interval or o.closed is not None):
            o.reset_probe = at  # this request probes the reset; the others wait for its answer
            if o.reset_at is not None and at < o.reset_at:
                o.early_sent = (at, o.reset_at)
        o.avail -= 1
        if o.avail < 1 and o.exhausted is None and o.reset_at is not None and at < o.reset_at:
            o.exhausted = (at, o.reset_at)


def _crowd_full(o: OriginState, now: float) -> bool:
    """
    The crowd window (see :mod:`.crowd`) has no place for one more request.

    Unless it admitted nothing and heard nothing back for :data:`STALE` service times: the
    requests it counts are not being served then (a process of a fleet that ended before it
    wrote its last count, a request lost), and one goes all the same: the window never stops
    an origin for good.
    """
    if o.in_flight + o.waiting + 1 <= o.crowd_window:
        return False
    return now - o.crowd_moved < STALE * (o.latency or 0.0)


def _crowd_poll(o: OriginState, s: Settings, deadline: float | None) -> float:
    """
    When a request held by a full crowd window asks again.

    In memory at once (:data:`PROBE_POLL`): an ask costs microseconds, and this process's own
    answers free the places it waits for.  Through a shared store the places free as the
    fleet's answers come back, about ``latency / window`` apart, and reading them is a round
    trip: asked again a quarter of a service time later (at most ``HORIZON / 2``), but for
    the first of this process's waiters (the nearest its deadline, a deadline stated), which
    asks at :data:`PROBE_POLL`.  Its asks are answered from the process's copy of the state
    (read no more often: it is trusted that quarter), which this process's own answers
    update at once: a place one of them frees is taken within milliseconds, not a quarter of
    a service time later (every waiter of a process asked together, and a fleet of three
    through Redis was slower than the same fleet sharing nothing).
    """
    again = asks_again(o) if s.shared else None
    if again is None:
        return PROBE_POLL
    if deadline is not None and (not o.queue or deadline <= o.queue[0][0]):
        return PROBE_POLL
    return min(HORIZON / 2, max(PROBE_POLL, again))


def healthy(o: OriginState | None, now: float) -> bool:
    """Known, open, unpaced, no quota ledger, no window, nobody waiting: no admission at all."""
    return (
        o is not None
        and o.known
        and not o.pace.interval
        and o.gate <= now
        and not o.waiting
        and o.kind != "window"
        and o.crowd_window == INF
        and o.outage.down_since is None
    )


def try_now(o: OriginState, s: Settings, now: float) -> bool:
    """Admit one request at once if a slot is free now (counted in flight); else nothing."""
    if _probing(o, s, now) is not None or o.waiting or _crowd_full(o, now):
        return False
    at = _slot(o, max(now, o.gate))
    if at is None or at > now:
        return False
    if o.queue and _ahead(o, now, NO_DEADLINE, now) is not None:
        return False  # (a waiter asking for this slot now)
    _take(o, now)
    o.in_flight += 1
    return True


# ---------------------------------------------------------------------------- views


def cohort(o: OriginState, now: float) -> CohortView:
    """What the retry engine needs: waiting requests, admitted rate, gate."""
    return CohortView(
        waiting=o.waiting + 1,
        admitted_rate=o.pace.rate,
        opens_in=max(0.0, o.gate - now),
        # a window's ledger gives each request its own slot too: all it holds, then its reset
        # (and the crowd window admits each as a place frees)
        paced=o.pace.rate is not None
        or (o.kind == "window" and o.avail is not None)
        or o.crowd_window != INF,
        failing=failing_share(o, now),
    )


def view(origin: str, o: OriginState, now: float) -> OriginView:
    """A snapshot of the state, for monitoring."""
    return OriginView(
        origin,
        o.pace.rate,
        o.pace.burst,
        max(0.0, o.gate - now),
        o.waiting,
        o.in_flight,
        o.learned,
        o.avail,
        o.limit,
        None if o.reset_at is None else max(0.0, o.reset_at - now),
        o.kind,
        _window(o),
        None if o.outage.down_since is None else max(0.0, now - o.outage.down_since),
        None if o.closed is None or o.closed <= now else o.closed - now,
        min((c.room(now) for c in o.budgets.values()), default=None),
    )


def _window(o: OriginState) -> float | None:
    """The quota's window as the model sees it (``None``: no quota, or no way to tell)."""
    if o.limit and o.pace.rate and not o.learned:
        return o.limit / o.pace.rate
    return o.window_guesses.get(o.limit)
