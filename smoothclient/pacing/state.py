"""
The state of one origin and every transition of it, as pure functions.

Nothing here locks, sleeps or reads a clock: each function takes the state, the pacer's
:class:`Settings` and ``now``, and updates the state in place.  A store applies them
atomically (the in-memory store under the origin's lock; a shared store as one server-side
step), which is why they never call out.

What moves the state (h11-style, in one place):

============================  =========================================================
evidence                      effect
============================  =========================================================
``Retry-After`` on an error   the gate closes until then, for everyone
quota with limit and window   the pace mirrors the server's bucket (rate = limit/window,
                              burst up to what the server says is left)
quota without a window        the window is guessed: the longest time-to-reset seen for a
                              quota of that size
quota exhausted + throttled   the gate closes until the reset
bare 429 / 503 with a delay   the learned rate is cut (multiplicative decrease)
success after a throttle      the learned rate grows, and is dropped after a quiet spell
first request to an origin    a probe: concurrent requests wait for its response
============================  =========================================================
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from ..engine.decide import CohortView
from ..hints.model import Hints
from ..policy import RetryBudget
from .budget import BudgetCounts
from .gcra import Gcra

__all__ = [
    "Admission",
    "OriginState",
    "OriginView",
    "Settings",
    "acquire",
    "cohort",
    "healthy",
    "observe",
    "try_now",
    "view",
]

#: Slots are fixed at most this far ahead; later requests ask again when closer, so a rate
#: learned or updated in the meantime applies to them.
HORIZON = 0.25
#: How often a request waiting on a cold-start probe checks again.
PROBE_POLL = 0.005
#: The delivered rate is measured over this many seconds.
EPOCH = 1.0
#: A young origin (seen for less than EPOCH) is cut only on this many answers, most of them
#: throttles: a herd into a limiter, not a few unlucky requests.
YOUNG_EVIDENCE = 10
#: A cut after which the share of throttles stays above this fraction of what it was did not
#: help: the throttles are noise, not a limiter.
NOISE = 0.5
#: ... judged on at least this many throttles since the cut.
NOISE_EVIDENCE = 3
#: Requests sent this soon after a quota ran out are not evidence of what it does then: the
#: processes of a fleet read one shared state through clocks a few milliseconds apart.
SKEW = 0.02
#: Past the measured admitted rate, a learned rate grows by this many req/s each second.
PROBE_GAIN = 0.3
#: After this many early probes in a row were rejected, a window's stated reset is trusted.
EARLY_MISSES = 3
#: How long the requests behind a window's reset probe wait for its answer, at most.
PROBE_WAIT = 1.0
#: How much evidence (requests sent while the quota was spent, before its reset: admitted
#: count +1, rejected -1, older evidence fading) makes the model a bucket or a window.
EVIDENCE = 1.5
#: How many quota sizes per origin keep a guessed window (for quotas that state none).
MAX_WINDOW_GUESSES = 8
#: Successes kept per origin (the last second's, for a learned rate): caps that estimate.
MAX_SUCCESSES = 4096


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


@dataclass(frozen=True, slots=True)
class Admission:
    """
    The pacer's answer to a request for a slot.

    ``delay``: seconds until the request may go.  ``final`` False means "ask again after
    ``delay``" (a cold-start probe is outstanding).  ``granted`` False means the slot would
    fall beyond the caller's deadline and nothing was reserved.
    """

    delay: float
    final: bool = True
    granted: bool = True


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
    noise_until: float = -1e18
    first_seen: float = 1e18  # when the first request to the origin went
    limit: float | None = None
    learned: bool = False
    last_throttle: float = -1e18
    # when recent successes came back (the admitted rate, should the server start to throttle)
    successes: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SUCCESSES))
    waiting: int = 0
    in_flight: int = 0
    budgets: dict[RetryBudget, BudgetCounts] = field(default_factory=dict)
    # the limiter model (see Kind): what the server's quota does between its resets
    kind: Kind = "unknown"
    evidence: float = 0.0  # > 0: the quota refills before its reset (a bucket); < 0: a window
    avail: float | None = None  # requests the quota still admits before reset_at (the ledger)
    exhausted: tuple[float, float] | None = None  # (since, until): the ledger ran out
    reset_probe: float | None = None  # when the request probing a window's reset went
    early_lead: float | None = None  # how long before its stated reset a window came back
    early_misses: int = 0  # early probes in a row that the window rejected
    early_sent: tuple[float, float] | None = None  # an early probe: when, and the reset then
    # route -> the scopes the server named on it (see .scopes): kept here too, so every
    # process sharing this state binds a route by what any of them learned
    routes: dict[str, tuple[str, ...]] = field(default_factory=dict)

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
    """Starts the cold-start probe if none went yet; the wait behind it, if one is out."""
    if o.known or s.probe == 0:
        return None
    if o.probe_until is None:
        o.probe_until = now + s.probe
        return None  # this request is the probe
    if now >= o.probe_until:
        o.known = True
        return None
    return _behind_probe(o, s, now)


def _behind_probe(o: OriginState, s: Settings, now: float) -> Admission | None:
    """The wait of a request behind an outstanding cold-start probe (reads only)."""
    if o.known or s.probe == 0 or o.probe_until is None or now >= o.probe_until:
        return None
    return Admission(min(PROBE_POLL, o.probe_until - now), final=False)


def _plan(
    o: OriginState, now: float, not_before: float, deadline: float | None
) -> tuple[Admission, float | None]:
    """The answer for a slot no earlier than ``not_before``, and the slot if it is granted."""
    at = _slot(o, max(now, not_before, o.gate))
    if at is None:  # a reset is being probed: its answer says how many may go
        return Admission(
            max(PROBE_POLL, (o.reset_probe or now) - now + PROBE_POLL), final=False
        ), None
    if deadline is not None and at > deadline:
        return Admission(at - now, final=True, granted=False), None
    if at - now > HORIZON:
        # too far ahead to fix a slot: the rate may change before then; ask again
        return Admission(at - now - HORIZON / 2, final=False), None
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
    if o.avail is None or o.avail >= 1 or (o.kind != "window" and o.pace.interval):
        return o.pace.earliest(at)
    if o.reset_probe is not None and at < o.reset_probe + PROBE_WAIT:
        return None  # another request probes the reset
    reset = o.reset_at
    if reset is None:
        return at
    if o.kind == "window" and o.early_misses < EARLY_MISSES and o.exhausted and at < reset:
        # A stated reset is a bound: servers round it up (GitHub) or add to it (slowapi adds
        # a second).  One probe goes early: halfway at first, then as early before the
        # stated reset as the last one that got through; a little later after a miss, and
        # none after a few misses in a row.
        if o.early_lead is None:
            return max(at, o.exhausted[0] + (reset - o.exhausted[0]) / 2)
        return max(at, o.exhausted[0], reset - o.early_lead)
    return max(at, reset)


def _take(o: OriginState, at: float) -> None:
    """Spend a slot at ``at``: the GCRA's, the ledger's, or the reset probe's."""
    o.pace.take(at)
    o.first_seen = min(o.first_seen, at)
    if o.avail is not None:
        if o.avail < 1 and (o.kind == "window" or not o.pace.interval):
            o.reset_probe = at  # this request probes the reset; the others wait for its answer
            if o.reset_at is not None and at < o.reset_at:
                o.early_sent = (at, o.reset_at)
        o.avail -= 1
        if o.avail < 1 and o.exhausted is None and o.reset_at is not None and at < o.reset_at:
            o.exhausted = (at, o.reset_at)


def healthy(o: OriginState | None, now: float) -> bool:
    """Known, open, unpaced, no quota ledger, nobody waiting: no admission needed at all."""
    return (
        o is not None
        and o.known
        and not o.pace.interval
        and o.gate <= now
        and not o.waiting
        and o.kind != "window"
    )


def try_now(o: OriginState, s: Settings, now: float) -> bool:
    """Admit one request at once if a slot is free now (counted in flight); else nothing."""
    if _probing(o, s, now) is not None or o.waiting:
        return False
    at = _slot(o, max(now, o.gate))
    if at is None or at > now:
        return False
    _take(o, now)
    o.in_flight += 1
    return True


# ---------------------------------------------------------------------------- learning


def observe(
    o: OriginState,
    s: Settings,
    status: int,
    hints: Hints,
    now: float,
    *,
    sent_at: float | None,
    counted: bool,
) -> None:
    """
    Learn from one response (every response, successes included).

    ``sent_at`` (when the request went out) keeps a learned rate from being cut again by
    throttles of requests sent before the last cut.  ``counted`` False: the request was
    never counted in flight (a fast-lane request to a healthy origin).
    """
    hints = _capped(hints, s.max_gate)
    if status < 400:
        o.succeeded(now)
    if counted:
        o.in_flight = max(0, o.in_flight - 1)
    o.known = True
    throttled = status == 429 or (status == 503 and hints.retry_after is not None)
    throttled = throttled or (status == 403 and hints.exhausted)
    if hints.retry_after is not None and status >= 300 and (status != 429 or hints.origin_wide):
        # a 503's Retry-After speaks for the whole origin (so does a 429 saying its limit is
        # global); a 429's only for its request (the limiter model or the learned rate holds
        # the others back as far as needed)
        o.gate = max(o.gate, now + hints.retry_after)
    if hints.remaining is not None and hints.unit == "requests":
        early = o.early_sent
        if early is not None and sent_at is not None and sent_at >= early[0]:
            o.early_sent = None  # the answer to an early probe of a window's reset
            lead = early[1] - early[0]  # how long before the stated reset it went
            if status < 400:
                o.early_lead, o.early_misses = lead, 0
            else:
                o.early_lead, o.early_misses = lead * 0.75, o.early_misses + 1
        else:
            _weigh(o, status, sent_at, hints, now)
        _quota(o, hints, now, throttled=throttled)
    elif hints.exhausted and hints.reset_after is not None:
        o.gate = max(o.gate, now + hints.reset_after)  # another unit ran out
    elif throttled:
        _throttled(o, s, now, sent_at)
    elif o.learned:
        _recovered(o, s, now)


def _capped(hints: Hints, cap: float) -> Hints:
    """
    ``hints`` with no delay beyond ``cap``.

    A buggy or hostile header (``Retry-After: 999999``, 0 left until next month) must not
    lock every request out for longer.
    """
    retry_after, reset_after, window = hints.retry_after, hints.reset_after, hints.window
    if (
        (retry_after is None or retry_after <= cap)
        and (reset_after is None or reset_after <= cap)
        and (window is None or window <= cap)
    ):
        return hints  # the common case
    return dataclasses.replace(
        hints,
        retry_after=None if retry_after is None else min(retry_after, cap),
        reset_after=None if reset_after is None else min(reset_after, cap),
        window=None if window is None else min(window, cap),
    )


def _weigh(o: OriginState, status: int, sent_at: float | None, hints: Hints, now: float) -> None:
    """
    Weigh a response to a request sent while the ledger said the quota was spent.

    A bucket refills continuously, so such a request often gets through before the reset; a
    window refills only at its reset, so it is rejected.  A success that reports far more
    left than a bucket could have refilled since (half the quota or more) met a window that
    reset before it said it would (one aligned to the clock, say): a window's vote.  Older
    evidence fades.
    """
    spent = o.exhausted
    if spent is None or sent_at is None or not spent[0] + SKEW < sent_at < spent[1]:
        return
    weight = 1.0 if status < 400 else -1.0 if status == 429 else 0.0
    interval, limit, remaining = o.pace.interval, hints.limit, hints.remaining
    if weight > 0 and interval and limit and remaining is not None:
        refilled = (now - spent[0]) / interval  # what a bucket at the mirrored rate got back
        if remaining >= limit / 2 and remaining > refilled + 1:
            weight = -1.0
    _vote(o, weight)


def _vote(o: OriginState, weight: float) -> None:
    """Add evidence (> 0: a bucket, < 0: a window); older evidence fades."""
    o.evidence = o.evidence * 0.7 + weight
    if o.evidence >= EVIDENCE:
        o.kind = "bucket"
    elif o.evidence <= -EVIDENCE:
        o.kind = "window"


def _ledger(o: OriginState, remaining: float, reset_after: float | None, now: float) -> None:
    """
    Keep the ledger: what the quota still admits before its reset.

    A report may lower it at any time (someone else spent some).  It raises it only when a
    new window began (the reset passed, or moved on): a report that left the server before
    our latest sends would otherwise give back tokens that are gone.
    """
    left = remaining - o.in_flight - o.waiting
    new_window = o.reset_at is not None and (
        now >= o.reset_at or (reset_after is not None and now + reset_after > o.reset_at + 0.001)
    )
    if new_window:
        o.exhausted = None  # a spent quota's period ends with its window
    if o.avail is None or left < o.avail or new_window:
        o.avail = left
    if o.reset_probe is not None and now >= o.reset_probe:
        o.reset_probe = None  # answered: the ledger says what may go, or the next reset
    if o.avail >= 1:
        o.exhausted = None
        o.reset_probe = None
    elif reset_after is not None:  # spent since the first report that said so, until the reset
        o.exhausted = (now if o.exhausted is None else o.exhausted[0], now + reset_after)


def _guess_window(o: OriginState, limit: float | None, reset_after: float | None) -> float:
    """The window of a quota of ``limit`` that states none: its longest time-to-reset."""
    guesses = o.window_guesses
    guess = guesses.get(limit, 0.0)
    if reset_after is not None and reset_after > guess:
        guess = guesses[limit] = reset_after
        while len(guesses) > MAX_WINDOW_GUESSES:
            del guesses[next(iter(guesses))]  # the oldest quota size seen
    return guess


def _quota(o: OriginState, hints: Hints, now: float, *, throttled: bool) -> None:
    """
    Mirror the server's quota: rate, burst and the tokens it says are left.

    An exhausted quota closes the gate until its reset only on a throttled response: a
    token bucket often reports 0 left on a success while admitting the full rate, and its
    whole-second reset would stall a well-paced client.
    """
    assert hints.remaining is not None
    pace = o.pace
    o.learned = False
    o.limit = hints.limit
    available = hints.remaining - o.in_flight
    _ledger(o, hints.remaining, hints.reset_after, now)
    if hints.reset_after is not None:
        o.reset_at = now + hints.reset_after
    limit, window = hints.limit, hints.window
    if not window:  # none stated (or a useless 0)
        window = _guess_window(o, limit, hints.reset_after)
    if o.kind == "window":
        pace.rate = None  # the ledger paces a window: all it holds now, then its reset
    elif limit and window:
        # mirror the server's bucket: refill at limit / window (stated, or over the
        # longest time-to-reset seen), burst up to what the server has said is left
        pace.rate = limit / window
        pace.burst = max(1.0, min(limit, max(pace.burst, hints.remaining)))
    elif hints.remaining < 1 and o.reset_at is not None:
        pace.rate = 1.0 / max(o.reset_at - now, 0.001)
        pace.burst = 1.0
    else:
        pace.rate = None
    if throttled and hints.remaining <= 0 and hints.reset_after is not None and o.kind == "bucket":
        # a bucket that throttled: nothing before its reset (a window's ledger waits for its
        # own, and probes it; an unknown limiter is paced into the spent quota to tell which)
        o.gate = max(o.gate, now + hints.reset_after)
    if pace.interval:
        tokens = available - o.waiting
        # Responses overtake each other: one that left the server before our latest sends
        # reports tokens that are gone, and trusting it releases a burst that earns 429s.
        # So a report may always slow us down, but speeds us up only when it gives far
        # more than our own accounting (half the burst: a window reset, a refill we did
        # not model), never by the few tokens an overtaken response is off by.
        if tokens - pace.tokens(now) > pace.burst / 2:
            pace.set_tokens(now, tokens)
        else:
            pace.tat = max(pace.tat, now + (pace.burst - tokens) * pace.interval)


def _recent(times: deque[float], since: float) -> int:
    """How many of ``times`` (ascending) are at or after ``since``."""
    return len(times) - bisect.bisect_left(times, since)


def _throttled(o: OriginState, s: Settings, now: float, sent_at: float | None) -> None:
    """
    The rate controller for limiters that say nothing but 429: AIMD on the delivered rate.

    A throttle (at most one cut per request sent after the last cut, as TCP cuts once per
    round trip) sets the rate to what got through in the last :data:`EPOCH`: above a limiter's
    rate exactly its rate, so one cut lands on it; for N clients sharing nothing, each one's
    share, which is its rate times (admitted / sum of rates): a multiplicative decrease by the
    same measured factor for all.  Between throttles the rate grows: multiplicatively until
    it reaches the last measured admitted rate (a slow start; the first measurement, taken
    during the first burst, is no ceiling), then additively by :data:`PROBE_GAIN` per second.
    Additive increase with multiplicative decrease is the law that converges N senders to
    fair shares without starving any (Chiu and Jain, 1989), and measuring the decrease keeps
    one sender at 90-100% of the admitted rate.

    Throttles that do not follow the rate (a flaky proxy answering a share of requests 429
    whatever the rate) must not drive it down without limit: a cut after which the share of
    throttles did not fall is undone, and throttles are then ignored for a while.
    """
    pace = o.pace
    o.last_throttle = now
    o.throttles.append(now)
    if o.throttles[0] < now - EPOCH:
        o.throttles.popleft()
    if now < o.noise_until or (sent_at is not None and sent_at <= o.last_cut):
        return
    since = now - EPOCH
    delivered, throttled = _recent(o.successes, since), _recent(o.throttles, since)
    share = throttled / (throttled + delivered)
    if now - o.first_seen < EPOCH and (share < 0.5 or throttled + delivered < YOUNG_EVIDENCE):
        return  # young, and few answers or most got through: too little to tell a limiter by
    if o.learned and now - o.last_cut < EPOCH / 4:
        return  # the last cut has not shown its effect yet
    cut = o.cut
    if cut is not None and now - cut[0] >= EPOCH / 2 and (pace.rate or 0) <= 1.25 * cut[3]:
        # still sending near the rate it cut to: did the cut lower the share of throttles?
        after = cut[0] + 1e-9
        late = _recent(o.throttles, after)
        if late >= NOISE_EVIDENCE and late >= NOISE * cut[2] * (late + _recent(o.successes, after)):
            pace.rate = cut[1]  # no: they do not follow the rate (noise); undo the cut
            o.cut = None
            o.noise_until = now + 10 * EPOCH
            return
    if not delivered and not o.learned:
        return  # no evidence of any admitted rate yet: leave it to jittered backoff
    before = pace.rate
    # over a whole EPOCH even on a young origin: what a first burst got through is no rate
    # (counted over less time, a burst of 5 read as 20 req/s and earned a storm of 429s)
    rate = max(s.learned_floor, delivered / EPOCH if delivered else (before or 1.0) * 0.5)
    if before is not None and o.learned:
        rate = min(rate, before)
    o.ceiling = rate if o.learned else math.inf
    if cut is not None and now - cut[0] < 3 * EPOCH:
        before, share = cut[1], cut[2]  # one episode of cuts: undoing it restores its start
    o.cut = (now, before, share, rate)
    o.last_cut = now
    o.learned = True
    pace.rate = rate
    pace.burst = 1.0
    pace.tat = max(pace.tat, now)


def _recovered(o: OriginState, s: Settings, now: float) -> None:
    pace = o.pace
    if now - o.last_throttle > s.quiet:
        o.learned = False
        pace.rate = None
        o.cut = None
    elif pace.rate is not None:
        # per success: below the measured admitted rate about x1.5 a second (half a
        # request per success), above it PROBE_GAIN req/s a second
        pace.rate += 0.5 if pace.rate < o.ceiling else PROBE_GAIN / pace.rate


# ---------------------------------------------------------------------------- views


def cohort(o: OriginState, now: float) -> CohortView:
    """What the retry engine needs: waiting requests, admitted rate, gate."""
    return CohortView(
        waiting=o.waiting + 1,
        admitted_rate=o.pace.rate,
        opens_in=max(0.0, o.gate - now),
        paced=o.pace.rate is not None,
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
    )


def _window(o: OriginState) -> float | None:
    """The quota's window as the model sees it (``None``: no quota, or no way to tell)."""
    if o.limit and o.pace.rate and not o.learned:
        return o.limit / o.pace.rate
    return o.window_guesses.get(o.limit)
