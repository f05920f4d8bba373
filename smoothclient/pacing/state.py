"""
The state of one origin, and admission to it, as pure functions.

How responses move the state (learning) is in :mod:`.learning`.

Nothing here locks, sleeps or reads a clock: each function takes the state, the pacer's
:class:`Settings` and ``now``, and updates the state in place.  A store applies them
atomically (the in-memory store under the origin's lock; a shared store as one server-side
step), which is why they never call out.

What moves the state (h11-style, in one place):

============================  =========================================================
evidence                      effect
============================  =========================================================
``Retry-After`` on an error   the gate closes until then, for everyone
failures in a row (5xx, no   the origin is down: the gate admits one probe at a time;
``Retry-After``, refused)     reopened, what waited is released at the rate served before
                              (see :mod:`.outage`)
quota with limit and window   the pace mirrors the server's bucket (rate = limit/window,
                              burst up to what the server says is left)
quota without a window        the window is guessed: the longest time-to-reset seen for a
                              quota of that size
quota exhausted + throttled   a bucket's gate closes until the reset (if its mirror
                              expected the request to get through)
a window's reset              the ledger admits this client's share of what is left (1
                              alone; learned by AIMD over windows when others spend it too)
bare 429 / 503 with a delay   the learned rate is cut (multiplicative decrease)
429 while others are in      the crowd window: at most as many in flight as were then
flight, on a slow origin      (a concurrency limit; see :mod:`.crowd`)
success after a throttle      the learned rate grows, and is dropped after a quiet spell
first request to an origin    a probe: concurrent requests wait for its response
============================  =========================================================
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from ..engine.decide import CohortView
from ..policy import RetryBudget
from .budget import BudgetCounts
from .gcra import Gcra
from .outage import Outage, taken

__all__ = [
    "Admission",
    "OriginState",
    "OriginView",
    "Settings",
    "acquire",
    "cohort",
    "healthy",
    "try_now",
    "view",
]

#: Slots are fixed at most this far ahead; later requests ask again when closer, so a rate
#: learned or updated in the meantime applies to them.
HORIZON = 0.25
#: How often a request waiting on a cold-start probe checks again.
PROBE_POLL = 0.005
#: After this many early probes in a row were rejected, a window's stated reset is trusted.
EARLY_MISSES = 3
#: A request goes into a quota stated spent at most this long before its stated reset (a
#: probe of a reset stated late: GitHub rounds it up, slowapi adds a second).  Earlier ones
#: knock on a closed door, which some APIs punish (GitHub may ban an integration for it).
EARLY_MAX = 1.0
#: How long the requests behind a window's reset probe wait for its answer, at most.
PROBE_WAIT = 1.0
#: Successes kept per origin (the last second's, for a learned rate): caps that estimate.
MAX_SUCCESSES = 4096
INF = float("inf")
#: A full crowd window that admitted nothing and heard nothing back for this many times the
#: quickest success took lets one request go (see ``_crowd_full``).
STALE = 4.0


#: What the server's quota does between its resets, as learned from the evidence:
#: ``"bucket"`` refills continuously (paced by the GCRA mirror), ``"window"`` refills at its
#: reset (a fixed or moving window: the ledger), ``"unknown"`` paced like a bucket.
Kind = Literal["unknown", "bucket", "window"]


@dataclass(frozen=True, slots=True)
class Settings:
    """The pacer's settings, as every transition sees them."""

    probe: float = 0.25
    learned_floor: float = 0.5
    quiet: float = 30.0
    max_gate: float = 300.0  # no hint closes an origin (or spaces its slots) longer than this
    shared: bool = False  # the state is the whole fleet's (a shared store): nobody else's


@dataclass(frozen=True, slots=True)
class Admission:
    """
    The pacer's answer to a request for a slot.

    ``delay``: seconds until the request may go.  ``final`` False means "ask again after
    ``delay``" (a cold-start probe is outstanding).  ``granted`` False means the slot would
    fall beyond the caller's deadline and nothing was reserved; ``closed_for`` then says how
    long until the reset of a quota the server stated spent, if that is what holds it.
    """

    delay: float
    final: bool = True
    granted: bool = True
    # refused: the server said the quota is spent and resets in this many seconds
    closed_for: float | None = None


@dataclass(frozen=True, slots=True)
class OriginView:
    """A snapshot of one origin's state, for monitoring and tests."""

    origin: str
    rate: float | None
    burst: float
    gate_in: float
    waiting: int
    in_flight: int
    learned: bool
    remaining: float | None = None  # what the quota still admits before its reset, if known
    limit: float | None = None  # the quota's size, if stated
    reset_in: float | None = None  # seconds until the quota resets, if known
    kind: Kind = "unknown"  # what the quota does between resets (see Kind)
    window: float | None = None  # the quota's window: limit over the mirrored rate, or guessed
    down_for: float | None = None  # how long the origin has been down (failing everything)
    # a throttle said the quota is spent: closed for this long, until its stated reset
    closed_for: float | None = None


@dataclass(slots=True)
class OriginState:
    """Everything the pacer knows of one origin."""

    known: bool = False
    probe_until: float | None = None
    pace: Gcra = field(default_factory=Gcra)  # the mirror of the server's bucket
    gate: float = 0.0
    reset_at: float | None = None
    # quota size -> longest time-to-reset seen with it, for quotas that state no window (one
    # origin can have several: GitHub's core 5000 an hour and search 30 a minute)
    window_guesses: dict[float | None, float] = field(default_factory=dict)
    ceiling: float = float("inf")  # the admitted rate measured at the last cut
    throttles: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SUCCESSES))
    last_cut: float = -1e18
    # the last cut: when, the rate and the share of throttles before its episode, its rate
    cut: tuple[float, float | None, float, float] | None = None
    cut_evidence: int = 0  # how many answers that share of throttles was measured on
    delivered_rate: float = 0.0  # the rate the last cut that measured any found delivered
    penalty_from: float = 0.0  # the rate a penalty's cuts halved from (0: no penalty)
    punishes: bool = False  # a penalty was seen: the limiter counts the requests it refuses
    noise_until: float = -1e18
    first_seen: float = 1e18  # when the first request to the origin went
    limit: float | None = None
    learned: bool = False
    last_throttle: float = -1e18
    unthrottled: int = 0  # successes since the last throttle (a learned rate's evidence)
    through: int = 0  # all successes since the last throttle (see controller.throttled)
    # when recent successes came back (the admitted rate, should the server start to throttle)
    successes: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SUCCESSES))
    waiting: int = 0
    in_flight: int = 0
    budgets: dict[RetryBudget, BudgetCounts] = field(default_factory=dict)
    # the limiter model (see Kind): what the server's quota does between its resets
    kind: Kind = "unknown"
    evidence: float = 0.0  # > 0: the quota refills before its reset (a bucket); < 0: a window
    # the guessed window spans a whole one: guessed across a reset, or from a report of a
    # quota at least half left (a window seen from its start); else it may be a time-to-reset
    # seen partway through a window: shorter than the window
    guess_whole: bool = False
    # requests sent while the quota was spent (since admitted_since, that period's start) that
    # got through: what a bucket refilled for others than the next one
    admitted_since: float | None = None
    admitted: int = 0
    avail: float | None = None  # requests the quota still admits before reset_at (the ledger)
    ledger_set: tuple[float, float] | None = None  # the report that set it: remaining, when
    exhausted: tuple[float, float] | None = None  # (since, until): the ledger ran out
    # tokens overtaken answers gave back to the ledger since it ran out: as many requests sent
    # into the "spent" quota got through on them, not on a refill (no bucket's evidence)
    given_back: int = 0
    reset_probe: float | None = None  # when the request probing a window's reset went
    early_lead: float | None = None  # how long before its stated reset a window came back
    early_misses: int = 0  # early probes in a row that the window rejected
    # the earliest before its stated reset a rejected early probe's Retry-After said the window
    # takes the next (0: none said; -1: tried once when the misses ran out)
    early_floor: float = 0.0
    early_sent: tuple[float, float] | None = None  # an early probe: when, and the reset then
    # a throttled answer said the quota is spent: nothing goes into it before this stated
    # reset but one probe at most EARLY_MAX before it (see _slot)
    closed: float | None = None
    # this client's share of a window's quota (see learning._share): below 1 only when
    # others spend the same quota, as the processes of a fleet that shares nothing do
    share: float = 1.0
    # the current window's tally, for the share: what its first report said was left, the
    # least any report said since, and this client's requests into it: sent, through, throttled
    period_top: float | None = None
    period_low: float = 0.0
    period_sent: int = 0
    period_ok: int = 0
    period_throttled: int = 0
    # route -> the scopes the server named on it (see .scopes): kept here too, so every
    # process sharing this state binds a route by what any of them learned
    routes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    latency: float | None = None  # the least time a success took (see .crowd)
    # how long answers take while an outage's backlog is released, smoothed (see .outage)
    answer_time: float | None = None
    unbounded: float = 0.0  # ... and the rate it would have but for the bound they set (0: none)
    # failures a second (each adds one, decaying e-fold a second) and when the last came: what
    # an origin answered besides its successes before an outage (see .outage)
    failing: float = 0.0
    failing_at: float = -1e18
    # the crowd window (see .crowd): at most this many requests in flight (inf: no limit)
    crowd_window: float = INF  # (not the quota's window: see kind)
    crowded_at: float = -1e18  # when a throttle last set it
    crowd_moved: float = -1e18  # when it last admitted a request or heard back from one
    lone_at: float = -1e18  # when a request was last turned away with nobody else in flight
    # the outage rule's part (see .outage): failures in a row, down since, probes, release
    outage: Outage = field(default_factory=Outage)

    def succeeded(self, now: float) -> None:
        """
        Note a success, and forget one that is over a second old.

        So the memory held follows the request rate, not the origin's lifetime.  Safe without
        the lock: deque operations are atomic (a race can at worst forget one recent success,
        which only lowers an estimate).
        """
        successes = self.successes
        successes.append(now)
        if successes[0] < now - 1.0:
            successes.popleft()

    def budget(self, budget: RetryBudget) -> BudgetCounts:
        """The counts of ``budget`` on this origin."""
        counts = self.budgets.get(budget)
        if counts is None:
            counts = self.budgets[budget] = BudgetCounts(budget)
        return counts


# ---------------------------------------------------------------------------- admission


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
    o: OriginState, now: float, not_before: float, deadline: float | None
) -> tuple[Admission, float | None]:
    """The answer for a slot no earlier than ``not_before``, and the slot if it is granted."""
    if _crowd_full(o, now):  # asked again soon: an answer frees a place
        return Admission(PROBE_POLL, final=False), None
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
    """
    probing = _probing(o, s, now)
    if probing is not None:
        return probing
    answer, at = _plan(o, now, not_before, deadline)
    if at is not None:
        _take(o, at)
        o.waiting += 1
    return answer


def when(
    o: OriginState, s: Settings, now: float, not_before: float, deadline: float | None
) -> Admission:
    """What :func:`acquire` would answer, reserving nothing."""
    return _behind_probe(o, s, now) or _plan(o, now, not_before, deadline)[0]


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
    reset = o.reset_at
    if reset is None:
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
            return max(at, reset - min(EARLY_MAX, (reset - o.exhausted[0]) / 2))
        return max(at, o.exhausted[0], reset - min(EARLY_MAX, o.early_lead))
    return max(at, reset)


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
    )


def _window(o: OriginState) -> float | None:
    """The quota's window as the model sees it (``None``: no quota, or no way to tell)."""
    if o.limit and o.pace.rate and not o.learned:
        return o.limit / o.pace.rate
    return o.window_guesses.get(o.limit)
