"""
The state of one origin: the data every rule of the model reads, and the constants they share.

The rules that move it are pure functions in modules of their own: admission in
:mod:`.admission`, what answers teach in :mod:`.learning`, the learned rate in
:mod:`.controller`, the crowd window in :mod:`.crowd`, outages in :mod:`.outage` (which alone
moves :class:`Outage`).  Nothing there locks, sleeps or reads a clock: each takes the state,
the pacer's :class:`Settings` and ``now``, and updates the state in place.  A store applies
them atomically (the in-memory store under the origin's lock; a shared store as one
server-side step), which is why they never call out.

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

from ..policy import RetryBudget
from .budget import BudgetCounts
from .gcra import Gcra

__all__ = [
    "Admission",
    "OriginState",
    "OriginView",
    "Outage",
    "Settings",
]

#: The first gap between probes of an origin that is down (seconds); each failed probe
#: widens it by half, up to :data:`.outage.MAX_PROBE_GAP`.
PROBE_GAP = 0.25
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
#: Calls waiting for a slot that an origin remembers, those nearest their deadlines (see
#: :func:`.admission.acquire`): the slots go to them first.
MAX_QUEUE = 64
#: A remembered waiter that has not asked again this long after it was due to is forgotten
#: (it gave up, was cancelled, or its process died): it holds nobody back for longer.
QUEUE_GRACE = 0.1
#: The deadline a call without one is queued at: after every call that has one.
NO_DEADLINE = 1e18
#: Successes kept per origin (the last second's, for a learned rate): caps that estimate.
MAX_SUCCESSES = 4096
INF = float("inf")
#: No answer for this long (seconds): the next begin a new spell (a wait for a ``Retry-After``
#: of a second or so does not).
IDLE = 2.0
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
    # the retries the origin's retry budget allows now (the fewest, with several budgets;
    # None: no budget has counted a request here)
    retries_left: float | None = None


@dataclass(slots=True)
class Outage:
    """The outage rule's part of an origin's state (moved only by :mod:`.outage`)."""

    fails: int = 0  # failures since the last success (a run)
    first_fail: float = -1e18  # when the run began
    served: float = 0.0  # answers in the second before the run began (req/s; see failed)
    down_since: float | None = None  # when the origin was marked down (None: it is not)
    gap: float = PROBE_GAP  # the gap before the next probe
    probes: int = 0  # probes sent since the origin went down
    release_until: float = -1e18  # after reopening: 5xx are throttles until then
    closed_until: float = -1e18  # the gate this rule closed (a server's Retry-After is not)


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
    last_answer: float = -1e18  # when the last answer came (a success or a throttle)
    spell_since: float = -1e18  # when this spell of answers began (none for IDLE before)
    limit: float | None = None
    learned: bool = False
    last_throttle: float = -1e18
    unthrottled: int = 0  # successes since the last throttle (a learned rate's evidence)
    # the admitted rate the last cut measured (inf: none), the successes to wait at it before
    # probing past it, and the steps taken past it since the last throttle (see .controller)
    measured: float = INF
    hold: int = 0
    probed: int = 0
    through: int = 0  # all successes since the last throttle (see controller.throttled)
    # when recent successes came back (the admitted rate, should the server start to throttle)
    successes: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SUCCESSES))
    waiting: int = 0
    in_flight: int = 0
    # how many processes those counts are of: 1, or a fleet's that share a store (its cohort)
    processes: int = 1
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
    # a window that begins at its first request (see resets.rolled): the longest one lasted
    # (-1: the limiter keeps no such windows), when the current one's first answer came, and
    # when the request that found it whole went
    window_hi: float | None = None
    window_lo: float = 0.0  # (and the longest after its first answer a request it refused went)
    window_began: float | None = None
    opened_sent: float | None = None
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
    freed_at: float = -1e18  # when a success last left nothing in flight under the window
    retakes_refused: int = 0  # requests that retook a freed place turned away at once, in a row
    # the outage rule's part (see .outage): failures in a row, down since, probes, release
    outage: Outage = field(default_factory=Outage)
    # calls told to ask again for a slot: [deadline, when it is due to ask], nearest deadline
    # first (at most MAX_QUEUE): a slot goes to a later deadline only when none of these asks
    queue: list[list[float]] = field(default_factory=list)

    def succeeded(self, now: float) -> None:
        """
        Note a success, and forget one that is over a second old.

        So the memory held follows the request rate, not the origin's lifetime.  Safe without
        the lock: deque operations are atomic (a race can at worst forget one recent success,
        which only lowers an estimate).
        """
        self.answered(now)
        successes = self.successes
        successes.append(now)
        if successes[0] < now - 1.0:
            successes.popleft()

    def answered(self, now: float) -> None:
        """
        Note an answer (a success or a throttle): :data:`IDLE` after the last, a new spell.

        What got through in the last second is a rate only over a second of answers: a burst
        after an idle spell counts a few milliseconds' (see :func:`.controller.throttled`).
        """
        if now - self.last_answer > IDLE:
            self.spell_since = now
        if now > self.last_answer:
            self.last_answer = now

    def budget(self, budget: RetryBudget) -> BudgetCounts:
        """The counts of ``budget`` on this origin."""
        counts = self.budgets.get(budget)
        if counts is None:
            counts = self.budgets[budget] = BudgetCounts(budget)
        return counts
