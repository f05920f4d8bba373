"""
:class:`Pacer`: per-origin shared state that keeps a client ahead of the server's limits.

One pacer may serve any number of transports and adapters, from threads and event loops at
once: every method takes the clock reading explicitly and holds a lock only for a few
arithmetic steps, never across I/O.  Origins live in a bounded LRU.

For each origin it keeps a mirror of the server's limiter, learned from the headers of every
response (:func:`smoothclient.read_hints`):

- a **gate**: closed until ``Retry-After`` or an exhausted quota's reset, for everyone;
- a **pace**: when the server states a rate (``RateLimit-Policy`` ``q/w``, ``X-RateLimit-Limit``
  over its window) or the remaining quota runs low, requests get *slots* at the admitted rate
  (the generic cell rate algorithm: a token bucket with the burst the server reports), so a
  cohort that waited on the gate arrives at the rate the server accepts, not together;
- a **learned rate** when the server says nothing but throttles: halved on each throttle,
  grown on success, dropped after a quiet spell;
- a **probe** on cold start: while the first response from a new origin is outstanding,
  other concurrent requests wait for it (at most ``probe`` seconds) so they can be paced.

A healthy origin (quota far from exhausted, or no quota at all) gets no delay whatsoever.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._core import BudgetTracker, CohortView
from ._validate import positive_int, seconds
from .hints import Hints
from .policy import RetryBudget

__all__ = ["Admission", "OriginView", "Pacer"]

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


@dataclass
class _Origin:
    """Mutable per-origin state; every access holds ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    known: bool = False
    probe_until: float | None = None
    rate: float | None = None  # admitted rate for slots (None: not paced)
    burst: float = 1.0
    tat: float = 0.0  # GCRA theoretical arrival time
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
    budgets: dict[RetryBudget, BudgetTracker] = field(default_factory=dict)

    def interval(self) -> float:
        return 1.0 / self.rate if self.rate else 0.0

    def earliest(self, not_before: float) -> float:
        """When the next request may go, no earlier than ``not_before``: the gate, the pace."""
        at = max(not_before, self.gate)
        if self.rate is not None:
            at = max(at, self.tat - (self.burst - 1) * self.interval())
        return at

    def guess_window(self, limit: float | None, reset_after: float | None) -> float:
        """The window of a quota of ``limit`` that states none: its longest time-to-reset."""
        guesses = self.window_guesses
        guess = guesses.get(limit, 0.0)
        if reset_after is not None and reset_after > guess:
            guess = guesses[limit] = reset_after
            while len(guesses) > MAX_WINDOW_GUESSES:
                del guesses[next(iter(guesses))]  # the oldest quota size seen
        return guess

    def succeeded(self, now: float) -> None:
        """
        Note a success, and forget one that is over a second old.

        So the memory held follows the request rate, not the origin's lifetime.  Lock-free:
        deque operations are atomic (a race can at worst forget one recent success, which only
        lowers an estimate).
        """
        successes = self.successes
        successes.append(now)
        if successes[0] < now - 1.0:
            successes.popleft()

    def take(self, at: float) -> None:
        """Reserve the slot at ``at`` (advance the paced arrival time)."""
        if self.rate is not None:
            self.tat = max(self.tat, at) + self.interval()


class Pacer:
    """
    Per-origin gates, cohorts and admitted rates, shared safely by threads and event loops.

    Args:
        max_origins: how many origins to remember (least recently used are forgotten).
        probe: on cold start, how long concurrent requests wait for the first response of a new
            origin (0 disables the probe).
        learned_floor: the lowest learned rate, in req/s.
        quiet: seconds without throttling after which a learned rate is dropped.
        clock: a monotonic clock (injectable for tests).
    """

    def __init__(
        self,
        *,
        max_origins: int = 1024,
        probe: float = 0.25,
        learned_floor: float = 0.5,
        quiet: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Create an empty pacer."""
        self._max_origins = positive_int("max_origins", max_origins)
        self._probe = seconds("probe", probe)
        self._floor = seconds("learned_floor", learned_floor, allow_zero=False)
        self._quiet = seconds("quiet", quiet, allow_zero=False)
        self.clock = clock
        self._origins: OrderedDict[str, _Origin] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        """Show how many origins are tracked."""
        return f"<Pacer origins={len(self._origins)}>"

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the settings only: what the pacer learned belongs to the process that did."""
        return {
            "max_origins": self._max_origins,
            "probe": self._probe,
            "learned_floor": self._floor,
            "quiet": self._quiet,
            "clock": self.clock,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle as a fresh pacer with the same settings (so a pickled session works)."""
        Pacer.__init__(self, **state)

    def _get(self, origin: str, *, touch: bool = False) -> _Origin:
        """The origin's state; ``touch`` marks it recently used (once per attempt is enough)."""
        state = self._origins.get(origin)  # a dict read is atomic: no lock on the hot path
        if state is not None and not touch:
            return state
        with self._lock:
            state = self._origins.get(origin)
            if state is None:
                state = self._origins[origin] = _Origin()
                while len(self._origins) > self._max_origins:
                    self._origins.popitem(last=False)
            else:
                self._origins.move_to_end(origin)
            return state

    # ------------------------------------------------------------------ admission

    def acquire(
        self, origin: str, now: float, *, not_before: float = 0.0, deadline: float | None = None
    ) -> Admission:
        """
        Reserve a slot for one request to ``origin`` no earlier than ``not_before``.

        A granted final admission counts the request as waiting until :meth:`sent` or
        :meth:`cancel`.
        """
        o = self._get(origin, touch=True)
        with o.lock:
            probing = self._probing(o, now)
            if probing is not None:
                return probing
            at = o.earliest(max(now, not_before))
            if deadline is not None and at > deadline:
                return Admission(at - now, final=True, granted=False)
            if at - now > HORIZON:
                # too far ahead to fix a slot: the rate may change before then; ask again
                return Admission(at - now - HORIZON / 2, final=False)
            o.take(at)
            o.waiting += 1
            return Admission(at - now)

    def _probing(self, o: _Origin, now: float) -> Admission | None:
        if o.known or self._probe == 0:
            return None
        if o.probe_until is None:
            o.probe_until = now + self._probe
            return None  # this request is the probe
        if now >= o.probe_until:
            o.known = True
            return None
        return Admission(min(PROBE_POLL, o.probe_until - now), final=False)

    def healthy(self, origin: str, now: float) -> bool:
        """
        True when ``origin`` needs no pacing at all: known, open, no rate, nothing learned.

        Lock-free (it only reads), for the edges' fast path: a request to a healthy origin skips
        admission, and a plain success skips :meth:`observe` (see :meth:`note_success`).
        """
        o = self._origins.get(origin)
        return o is not None and o.known and o.rate is None and o.gate <= now and not o.waiting

    def try_now(self, origin: str, now: float) -> bool:
        """
        Admit one request to ``origin`` at once if a slot is free now; otherwise reserve nothing.

        True counts the request as sent (in flight), as :meth:`acquire` then :meth:`sent` would:
        the edges' fast path for a paced origin that still has room (most requests to a server
        that states its quota on every response).
        """
        o = self._get(origin, touch=True)
        with o.lock:
            if self._probing(o, now) is not None or o.waiting or o.earliest(now) > now:
                return False
            o.take(now)
            o.in_flight += 1
            return True

    def note_success(self, origin: str, now: float) -> None:
        """Record a success that took the fast path (for the learned-rate estimate)."""
        o = self._origins.get(origin)
        if o is not None:  # the hot path: _Origin.succeeded written out
            successes = o.successes
            successes.append(now)
            if successes[0] < now - 1.0:
                successes.popleft()

    def adopt(self, origin: str) -> None:
        """Count a request sent on the fast path as in flight, before :meth:`observe`."""
        o = self._get(origin)
        with o.lock:
            o.in_flight += 1

    def sent(self, origin: str) -> None:
        """A request that was admitted is now on the wire."""
        o = self._get(origin)
        with o.lock:
            o.waiting = max(0, o.waiting - 1)
            o.in_flight += 1

    def cancel(self, origin: str) -> None:
        """A request that was admitted will not be sent (cancelled, gave up)."""
        o = self._get(origin)
        with o.lock:
            o.waiting = max(0, o.waiting - 1)

    def failed(self, origin: str) -> None:
        """A request on the wire ended without a response (a transport error)."""
        o = self._get(origin)
        with o.lock:
            o.in_flight = max(0, o.in_flight - 1)
            o.known = True

    # ------------------------------------------------------------------ learning

    def observe(
        self,
        origin: str,
        status: int,
        hints: Hints,
        now: float,
        *,
        sent_at: float | None = None,
        counted: bool = True,
    ) -> None:
        """
        Learn from one response (every response, successes included).

        ``sent_at`` (when the request went out) keeps a learned rate from being cut again by
        throttles of requests sent before the last cut.  ``counted`` False: the request was
        never counted in flight (a fast-path request to a healthy origin).
        """
        o = self._get(origin)
        with o.lock:
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
                self._quota(o, hints, now, throttled=throttled)
            elif hints.exhausted and hints.reset_after is not None:
                o.gate = max(o.gate, now + hints.reset_after)  # another unit ran out
            elif throttled:
                if sent_at is None or sent_at > o.last_throttle:
                    self._throttled(o, now)
            elif o.learned:
                self._recovered(o, now)

    def _quota(self, o: _Origin, hints: Hints, now: float, *, throttled: bool) -> None:
        """
        Mirror the server's quota: rate, burst and the tokens it says are left.

        An exhausted quota closes the gate until its reset only on a throttled response: a
        token bucket often reports 0 left on a success while admitting the full rate, and its
        whole-second reset would stall a well-paced client.
        """
        assert hints.remaining is not None
        o.learned = False
        o.limit = hints.limit
        available = hints.remaining - o.in_flight
        if hints.reset_after is not None:
            o.reset_at = now + hints.reset_after
        limit, window = hints.limit, hints.window
        if not window:  # none stated (or a useless 0)
            window = o.guess_window(limit, hints.reset_after)
        if limit and window:
            # mirror the server's bucket: refill at limit / window (stated, or over the
            # longest time-to-reset seen), burst up to what the server has said is left
            o.rate = limit / window
            o.burst = max(1.0, min(limit, max(o.burst, hints.remaining)))
        elif hints.remaining < 1 and o.reset_at is not None:
            o.rate = 1.0 / max(o.reset_at - now, 0.001)
            o.burst = 1.0
        else:
            o.rate = None
        if throttled and hints.remaining <= 0 and hints.reset_after is not None:
            o.gate = max(o.gate, now + hints.reset_after)
        if o.rate is not None:
            tokens = available - o.waiting
            interval = o.interval()
            own = o.burst - max(0.0, o.tat - now) / interval  # tokens by our own accounting
            reported = now + (o.burst - tokens) * interval
            # Responses overtake each other: one that left the server before our latest sends
            # reports tokens that are gone, and trusting it releases a burst that earns 429s.
            # So a report may always slow us down, but speeds us up only when it gives far
            # more than our own accounting (half the burst: a window reset, a refill we did
            # not model), never by the few tokens an overtaken response is off by.
            if tokens - own > o.burst / 2:
                o.tat = reported
            else:
                o.tat = max(o.tat, reported)

    def _throttled(self, o: _Origin, now: float) -> None:
        """Multiplicative decrease of a learned rate (the server said nothing but 429)."""
        o.last_throttle = now
        if not o.learned or o.rate is None:
            recent = sum(1 for t in o.successes if t >= now - 1.0)
            if recent == 0:
                return  # no evidence of any admitted rate yet: leave it to jittered backoff
            o.rate = max(self._floor, float(recent))
        else:
            o.ceiling = o.rate
            o.rate = max(self._floor, o.rate * 0.7)
        o.learned = True
        o.burst = 1.0
        o.tat = max(o.tat, now)

    def _recovered(self, o: _Origin, now: float) -> None:
        if now - o.last_throttle > self._quiet:
            o.learned = False
            o.rate = None
        elif o.rate is not None:
            # grow fast far below the rate that was last throttled, slowly close to it
            # (per second: about x1.65 far below it, x1.05 close to it, whatever the rate)
            gain = 0.5 if o.rate < 0.85 * o.ceiling else 0.05
            o.rate *= 1 + gain / o.rate

    # ------------------------------------------------------------------ views

    def cohort(self, origin: str, now: float) -> CohortView:
        """What the retry core needs: waiting requests, admitted rate, gate."""
        o = self._get(origin)
        with o.lock:
            return CohortView(
                waiting=o.waiting + 1,
                admitted_rate=o.rate,
                opens_in=max(0.0, o.gate - now),
                paced=o.rate is not None,
            )

    def budget_has_room(self, origin: str, budget: RetryBudget | None, now: float) -> bool:
        """Whether the origin's retry budget has room for one more retry (True without one)."""
        return budget is None or self._tracker(origin, budget).has_room(now)

    def budget_take(self, origin: str, budget: RetryBudget | None, now: float) -> None:
        """Count one retry against the origin's budget."""
        if budget is not None:
            self._tracker(origin, budget).record_retry(now)

    def record_attempt(self, origin: str, budget: RetryBudget | None, now: float) -> None:
        """Count one attempt toward the origin's retry budget."""
        if budget is not None:
            self._tracker(origin, budget).record_request(now)

    def _tracker(self, origin: str, budget: RetryBudget) -> BudgetTracker:
        o = self._get(origin)
        with o.lock:
            tracker = o.budgets.get(budget)
            if tracker is None:
                tracker = o.budgets[budget] = BudgetTracker(budget)
            return tracker

    def view(self, origin: str) -> OriginView:
        """A snapshot of ``origin``'s state."""
        o = self._get(origin)
        now = self.clock()
        with o.lock:
            return OriginView(
                origin,
                o.rate,
                o.burst,
                max(0.0, o.gate - now),
                o.waiting,
                o.in_flight,
                o.learned,
            )

    def origins(self) -> list[str]:
        """The origins currently remembered, least recently used first."""
        with self._lock:
            return list(self._origins)
