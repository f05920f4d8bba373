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

from collections import deque
from dataclasses import dataclass, field

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

#: Below this fraction of the limit, a quota without a stated rate is spread until its reset.
LOW_WATER = 0.1
#: Slots are fixed at most this far ahead; later requests ask again when closer, so a rate
#: learned or updated in the meantime applies to them.
HORIZON = 0.25
#: How often a request waiting on a cold-start probe checks again.
PROBE_POLL = 0.005
#: How many quota sizes per origin keep a guessed window (for quotas that state none).
MAX_WINDOW_GUESSES = 8
#: Successes kept per origin (the last second's, for a learned rate): caps that estimate.
MAX_SUCCESSES = 4096


@dataclass(frozen=True, slots=True)
class Settings:
    """The pacer's settings, as every transition sees them."""

    probe: float = 0.25
    learned_floor: float = 0.5
    quiet: float = 30.0


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
    ceiling: float = float("inf")  # the learned rate at the last throttle
    limit: float | None = None
    learned: bool = False
    last_throttle: float = -1e18
    # when recent successes came back (the admitted rate, should the server start to throttle)
    successes: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SUCCESSES))
    waiting: int = 0
    in_flight: int = 0
    budgets: dict[RetryBudget, BudgetCounts] = field(default_factory=dict)

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
    if o.known or s.probe == 0:
        return None
    if o.probe_until is None:
        o.probe_until = now + s.probe
        return None  # this request is the probe
    if now >= o.probe_until:
        o.known = True
        return None
    return Admission(min(PROBE_POLL, o.probe_until - now), final=False)


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
    at = o.pace.earliest(max(now, not_before, o.gate))
    if deadline is not None and at > deadline:
        return Admission(at - now, final=True, granted=False)
    if at - now > HORIZON:
        # too far ahead to fix a slot: the rate may change before then; ask again
        return Admission(at - now - HORIZON / 2, final=False)
    o.pace.take(at)
    o.waiting += 1
    return Admission(at - now)


def healthy(o: OriginState | None, now: float) -> bool:
    """Known, open, unpaced, nobody waiting: a request needs no admission at all."""
    return o is not None and o.known and not o.pace.interval and o.gate <= now and not o.waiting


def try_now(o: OriginState, s: Settings, now: float) -> bool:
    """Admit one request at once if a slot is free now (counted in flight); else nothing."""
    if _probing(o, s, now) is not None or o.waiting or o.pace.earliest(max(now, o.gate)) > now:
        return False
    o.pace.take(now)
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
    if status < 400:
        o.succeeded(now)
    if counted:
        o.in_flight = max(0, o.in_flight - 1)
    o.known = True
    throttled = status == 429 or (status == 503 and hints.retry_after is not None)
    throttled = throttled or (status == 403 and hints.exhausted)
    if hints.retry_after is not None and status >= 300:
        o.gate = max(o.gate, now + hints.retry_after)
    if hints.remaining is not None and hints.unit == "requests":
        _quota(o, hints, now, throttled=throttled)
    elif hints.exhausted and hints.reset_after is not None:
        o.gate = max(o.gate, now + hints.reset_after)  # another unit ran out
    elif throttled:
        if sent_at is None or sent_at > o.last_throttle:
            _throttled(o, s, now)
    elif o.learned:
        _recovered(o, s, now)


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
    if hints.reset_after is not None:
        o.reset_at = now + hints.reset_after
    limit, window = hints.limit, hints.window
    if not window:  # none stated (or a useless 0)
        window = _guess_window(o, limit, hints.reset_after)
    if limit and window:
        # mirror the server's bucket: refill at limit / window (stated, or over the
        # longest time-to-reset seen), burst up to what the server has said is left
        pace.rate = limit / window
        pace.burst = max(1.0, min(limit, max(pace.burst, hints.remaining)))
    elif hints.remaining < 1 and o.reset_at is not None:
        pace.rate = 1.0 / max(o.reset_at - now, 0.001)
        pace.burst = 1.0
    else:
        pace.rate = None
    if throttled and hints.remaining <= 0 and hints.reset_after is not None:
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


def _throttled(o: OriginState, s: Settings, now: float) -> None:
    """Multiplicative decrease of a learned rate (the server said nothing but 429)."""
    pace = o.pace
    o.last_throttle = now
    if not o.learned or pace.rate is None:
        recent = sum(1 for t in o.successes if t >= now - 1.0)
        if recent == 0:
            return  # no evidence of any admitted rate yet: leave it to jittered backoff
        pace.rate = max(s.learned_floor, float(recent))
    else:
        o.ceiling = pace.rate
        pace.rate = max(s.learned_floor, pace.rate * 0.7)
    o.learned = True
    pace.burst = 1.0
    pace.tat = max(pace.tat, now)


def _recovered(o: OriginState, s: Settings, now: float) -> None:
    pace = o.pace
    if now - o.last_throttle > s.quiet:
        o.learned = False
        pace.rate = None
    elif pace.rate is not None:
        # grow fast far below the rate that was last throttled, slowly close to it
        # (per second: about x1.65 far below it, x1.05 close to it, whatever the rate)
        gain = 0.5 if pace.rate < 0.85 * o.ceiling else 0.05
        pace.rate *= 1 + gain / pace.rate


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
    )
