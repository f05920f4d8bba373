"""
The sans-IO retry engine.

:func:`decide` is a pure function of the policy, the call's state, the outcome of the last
attempt, the cohort the pacer sees, the clock reading and an RNG.  It answers :class:`Retry`
(wait ``delay`` seconds, drawn from ``window``) or :class:`GiveUp`.  The httpx transports, the
requests adapter and the ``@retry`` decorator all drive this one function; only they sleep.

The window is built in three steps (docs/pacing.md section 3):

1. backoff: ``[low, high]`` from the jitter kind, the cap bounding it before sampling;
2. shift: it starts no earlier than ``Retry-After``, an exhausted quota's reset, or the
   pacer's gate, whichever is latest;
3. widen: it is at least ``waiting / admitted_rate`` wide (the cohort over the rate the server
   admits), and reaches the quota's reset when ``Retry-After`` comes earlier (docs/headers.md R12).

Then it is clamped: never beyond ``wait_max`` past its start, ``max_retry_after`` or the
deadline.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from ..hints.model import Hints
from ..policy import RetryPolicy
from .backoff import backoff_window, uniform

__all__ = [
    "CallState",
    "CohortView",
    "Decision",
    "ErrorKind",
    "GiveUp",
    "Outcome",
    "Retry",
    "asked_for",
    "decide",
    "ends_call",
    "retryable_status",
]

#: ``"pool"``: the client's own connection pool had none free in time (never sent; says
#: nothing of the server).
ErrorKind = Literal["connect", "pool", "timeout", "read", "write", "protocol", "other", "result"]
_NO_HINTS = Hints()


@dataclass(frozen=True, slots=True)
class Outcome:
    """
    What the last attempt produced: a status with its hints, or an error.

    ``sent`` is False only when the request certainly never reached the server (a refused
    connection, a pool timeout); such a failure is safe to retry for any method.
    """

    status: int | None = None
    hints: Hints = _NO_HINTS
    error: ErrorKind | None = None
    sent: bool = True

    @classmethod
    def from_status(cls, status: int, hints: Hints = _NO_HINTS) -> Outcome:
        """An HTTP response."""
        return cls(status=status, hints=hints)

    @classmethod
    def from_error(cls, kind: ErrorKind, *, sent: bool, hints: Hints = _NO_HINTS) -> Outcome:
        """
        An error of ``kind``; ``sent=False`` when it certainly was not sent.

        ``hints.retry_after`` carries a delay the error itself asked for (``@retry``'s ``on``
        predicate may return one); it shifts the window like ``Retry-After``.
        """
        return cls(error=kind, sent=sent, hints=hints)


@dataclass(frozen=True, slots=True)
class CallState:
    """The logical call so far: which attempt just ended, when it started, what it waited."""

    started: float
    method: str = "GET"
    has_idempotency_key: bool = False
    idempotent: bool | None = None  # overrides the method rule (``@retry`` declares it)
    replayable: bool = True
    attempt: int = 1
    previous_wait: float | None = None
    total_wait: float = 0.0

    def next(self, waited: float) -> CallState:
        """The state after waiting ``waited`` seconds and starting the next attempt."""
        return CallState(
            self.started,
            self.method,
            self.has_idempotency_key,
            self.idempotent,
            self.replayable,
            self.attempt + 1,
            waited,
            self.total_wait + waited,
        )


@dataclass(frozen=True, slots=True)
class CohortView:
    """
    What the pacer knows about the origin's cohort.

    ``waiting`` requests (this one included) wait on the origin, which admits
    ``admitted_rate`` req/s (``None`` when unknown) and is closed for ``opens_in`` more seconds.
    ``paced`` means the pacer gives each request its own slot at the admitted rate: the core then
    asks for the window's start and lets the pacer spread the cohort exactly.  ``failing`` is
    the share of the origin's answers in the last second that were failures (5xx, refused
    connections, timeouts; 0 on too little evidence): see :data:`EPISODE_SHARE`.
    """

    waiting: int = 1
    admitted_rate: float | None = None
    opens_in: float = 0.0
    paced: bool = False
    failing: float = 0.0

    @property
    def width(self) -> float:
        """The window the cohort needs so it arrives at the admitted rate."""
        if not self.admitted_rate or self.admitted_rate <= 0:
            return 0.0
        return self.waiting / self.admitted_rate


#: An origin failing at least this share of its answers (see :attr:`CohortView.failing`) is in
#: an episode (a brownout, a deploy, a bad node), and a failure's last retry spreads over the
#: time the call has left.  An episode lasts seconds: drawn within the next second
#: (exponential backoff from 100 ms), all of a call's attempts fell in the same brownout, and
#: a fleet failed half again as many calls as peers whose fixed backoff happened to reach past
#: it (``benchmarks/outage.py``'s brownout).  Only the last retry, the one that decides
#: whether the call fails, is spread: a request that failed at random succeeds as often
#: retried at once as later, and every retry deferred leaves the origin's capacity idle at the
#: episode's start (with the retries after the first spread, the fleet sent 96 a second where
#: the brownout's server admitted 100, and served 49.6 calls/s in it where urllib3's Retry
#: served 50.1, with the server's failures drawn evenly).  Below the share (a healthy origin's
#: odd 5xx), every retry stays quick.
EPISODE_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class Retry:
    """Wait ``delay`` seconds, then try again; ``window`` is where ``delay`` was drawn from."""

    delay: float
    reason: str
    window: tuple[float, float]


#: Why a call gave up, as a small fixed set (a metric label): the budget was spent, the
#: origin is down (its next probe is past the deadline), the server said its quota is spent
#: (closed past the deadline), the attempts were used, the deadline came, the server asked
#: for a wait over ``max_retry_after``, the method is not idempotent, the body cannot be
#: replayed, or any other reason (a status or error not retried, the server said not to).
GiveUpKind = Literal[
    "budget",
    "outage",
    "closed",
    "attempts",
    "deadline",
    "max_retry_after",
    "not_idempotent",
    "not_replayable",
    "other",
]


@dataclass(frozen=True, slots=True)
class GiveUp:
    """
    Stop: return the last response or raise the last error.  ``reason`` says why.

    ``kind`` says it as one of :data:`GiveUpKind`.  ``final`` is True when the outcome was
    not a failure worth retrying at all (a success, a 404): nothing was given up on.
    """

    reason: str
    final: bool = False
    kind: GiveUpKind = "other"


def spent(retry: Retry) -> GiveUp:
    """The retry ``retry`` is not taken: the retry budget is spent."""
    return GiveUp(f"{retry.reason}: the retry budget is spent", kind="budget")


Decision = Retry | GiveUp


def retryable_status(policy: RetryPolicy, status: int, hints: Hints) -> bool:
    """Whether a response of ``status`` with ``hints`` is worth retrying at all (any method)."""
    return (
        status in policy.retry_statuses
        or (hints.should_retry is True and status >= 400)
        or (
            status == 403
            and policy.retry_forbidden_with_hints
            and (hints.retry_after is not None or hints.exhausted)
        )
    )


def ends_call(policy: RetryPolicy, status: int, hints: Hints) -> bool:
    """
    Whether a response ends the logical call whatever else is known about it.

    A success does, and so does an error status no policy would retry (a 404, a 422) when
    the server gave no verdict.  A 403 never does here: its JSON body may make it retryable
    (Google's ``RetryInfo``), so :func:`decide` looks at it with the body read.
    """
    if status < 400:
        return status not in policy.retry_statuses
    return (
        status != 403 and hints.should_retry is None and not retryable_status(policy, status, hints)
    )


def _classify(policy: RetryPolicy, state: CallState, outcome: Outcome) -> str | GiveUp:
    """Why the outcome is worth retrying, or why not."""
    idempotent = state.idempotent
    if idempotent is None:
        idempotent = policy.is_idempotent(
            state.method, has_idempotency_key=state.has_idempotency_key
        )
    if outcome.error is not None:
        if not policy.retry_on_errors:
            return GiveUp(f"{outcome.error} error: errors are not retried")
        if outcome.sent and not idempotent:
            return GiveUp(
                f"{outcome.error} error: {state.method} may have been sent", kind="not_idempotent"
            )
        return f"{outcome.error} error"
    status = outcome.status or 0
    hints = outcome.hints
    if hints.should_retry is False and status >= 400:
        return GiveUp(f"status {status}: the server said not to retry")
    if not retryable_status(policy, status, hints):
        return GiveUp(f"status {status} is not retried", final=True)
    if not idempotent and not (state.idempotent is None and _unacted(policy, status, hints)):
        return GiveUp(f"status {status}: {state.method} is not idempotent", kind="not_idempotent")
    return f"status {status}"


def _unacted(policy: RetryPolicy, status: int, hints: Hints) -> bool:
    """
    A throttling answer: the server did not act on the request, so any method may go again.

    A 429 (RFC 6585), or a 503 that says when to come back; unless the policy says otherwise
    (``retry_throttled_any_method=False``) or the caller declared the call not idempotent.
    """
    return policy.retry_throttled_any_method and (
        status == 429 or (status == 503 and hints.retry_after is not None)
    )


def _server_shift(policy: RetryPolicy, outcome: Outcome) -> tuple[float, float] | GiveUp:
    """``(start, widen_to)``: the earliest retry the server allows, and its quota reset."""
    hints = outcome.hints
    if not policy.respect_retry_after:
        return (0.0, 0.0)
    retry_after = hints.retry_after or 0.0
    reset = hints.reset_after if hints.exhausted and hints.reset_after is not None else 0.0
    start = retry_after if hints.retry_after is not None else reset
    limit = policy.max_retry_after
    if limit is not None and start > limit:
        return GiveUp(
            f"the server asks to wait {start:.3g} s, over max_retry_after {limit:g} s",
            kind="max_retry_after",
        )
    return (start, max(start, reset))


def decide(
    policy: RetryPolicy,
    state: CallState,
    outcome: Outcome,
    *,
    now: float,
    rng: random.Random,
    cohort: CohortView | None = None,
    budget_ok: bool = True,
) -> Decision:
    """
    Decide whether and when the logical call tries again.

    Args:
        policy: the retry policy.
        state: the call so far (``state.attempt`` attempts have been made).
        outcome: what the last attempt produced.
        now: the current clock reading (same clock as ``state.started``).
        rng: randomness for the jitter draw.
        cohort: what the pacer sees of the origin (default: alone, rate unknown, open).
        budget_ok: False when the retry budget has no room left.
    """
    why = _classify(policy, state, outcome)
    if isinstance(why, GiveUp):
        return why
    if state.attempt >= policy.attempts:
        return GiveUp(f"{why}: {policy.attempts} attempts used", kind="attempts")
    if not state.replayable:
        return GiveUp(f"{why}: the request body cannot be replayed", kind="not_replayable")
    if not budget_ok:
        return GiveUp(f"{why}: the retry budget is spent", kind="budget")
    shift = _server_shift(policy, outcome)
    if isinstance(shift, GiveUp):
        return shift
    view = cohort or CohortView()
    window = _window(policy, state, shift, view)
    spread = (
        state.attempt >= max(2, policy.attempts - 1)  # (the last retry, never the first)
        and view.failing >= EPISODE_SHARE
        and shift == (0.0, 0.0)
        and _failure(outcome)
    )
    return _fit_deadline(policy, state, why, window, now, rng, paced=view.paced, spread=spread)


def _failure(outcome: Outcome) -> bool:
    """Whether an outcome is the origin failing (a 5xx, an error), not a throttle or refusal."""
    return outcome.error is not None or (outcome.status is not None and outcome.status >= 500)


def _window(
    policy: RetryPolicy,
    state: CallState,
    shift: tuple[float, float],
    cohort: CohortView,
) -> tuple[float, float]:
    low, high = backoff_window(
        policy.jitter,
        state.attempt,
        initial=policy.wait_initial,
        maximum=policy.wait_max,
        base=policy.wait_exp_base,
        previous=state.previous_wait,
    )
    server_start, widen_to = shift
    base = max(server_start, cohort.opens_in)
    start = base + low
    width = max(high - low, cohort.width, widen_to - start)
    end = min(start + width, max(start, base + policy.wait_max))
    if policy.max_retry_after is not None:
        end = min(end, max(start, policy.max_retry_after))
    return (start, end)


def _fit_deadline(
    policy: RetryPolicy,
    state: CallState,
    why: str,
    window: tuple[float, float],
    now: float,
    rng: random.Random,
    *,
    paced: bool,
    spread: bool = False,
) -> Decision:
    """
    The window cut to the deadline, and a delay drawn from it.

    ``spread`` (the origin fails a large share of its answers, see :data:`EPISODE_SHARE`, and
    this is the call's last retry, not its first): the window reaches at least to the time
    left over the attempts left (within ``wait_max`` and ``max_retry_after``, the caps of any
    wait), so the call's last attempt is drawn from what is left of its deadline instead of
    its next second.
    """
    start, end = window
    if policy.timeout is not None:
        deadline = state.started + policy.timeout
        left = deadline - now
        while left > 0 and now + left > deadline:  # float rounding must not pass the deadline
            left = math.nextafter(left, 0.0)
        if start > left:
            return GiveUp(
                f"{why}: the next try at {start:.3g} s would pass the deadline", kind="deadline"
            )
        if spread:
            attempts_left = max(1, policy.attempts - state.attempt)
            spread_to = min(start + (left - start) / attempts_left, policy.wait_max)
            if policy.max_retry_after is not None:  # (the caps of any wait: see _window)
                spread_to = min(spread_to, policy.max_retry_after)
            end = max(end, spread_to)
            paced = False  # (a draw of its own: the episode, not the cohort, sets the window)
        previous = state.previous_wait
        if not paced and end > left and previous is not None and left < previous:
            # the deadline cuts the window to less than the last wait: each cut draws a
            # shorter wait, and a call failing at once spent every attempt left in its last
            # moments (five in 80 ms; 5,000 on a fake clock): one cut wait, then no more
            return GiveUp(
                f"{why}: {left:.3g} s left of the deadline, less than the last wait",
                kind="deadline",
            )
        end = min(end, left)
    delay = start if paced else uniform(start, end, rng)
    return Retry(delay, why, (start, end))


def asked_for(outcome: Outcome) -> bool:
    """
    A retry that costs the server nothing to budget for.

    One it asked for (429, ``Retry-After``, a spent quota: paced), or one of a request that
    never left the client's own connection pool.
    """
    hints = outcome.hints
    return (
        outcome.status == 429
        or hints.retry_after is not None
        or hints.exhausted
        or outcome.error == "pool"
    )
