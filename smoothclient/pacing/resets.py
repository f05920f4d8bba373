"""
What a stated reset tells: its grain, a new window, the reset kept, and early probes.

A server states when its quota resets: to the millisecond, or in whole seconds (rounded up
or down, by its choice), or a second late (slowapi).  These rules read such statements for
the ledger of :mod:`.learning`; like it, nothing here locks, sleeps or reads a clock.
"""

from __future__ import annotations

from ..hints.model import Hints
from .controller import SKEW
from .state import EARLY_MAX, EARLY_MISSES, OriginState

__all__ = [
    "REFUTED",
    "due",
    "early_answered",
    "grain",
    "new_window",
    "rolled",
    "stated_reset",
]

#: ``window_hi`` of a limiter whose windows do not begin at their first request.
REFUTED = -1.0
#: Bounds on how long a window lasts (:func:`rolled`) this close (or four round trips, when
#: more) are tight: the next window's first request goes at the upper one.  Wider apart, it
#: goes between them, at the cost of one refusal at the most.
NARROW = 2 * SKEW


def early_answered(
    o: OriginState, status: int, hints: Hints, now: float, sent_at: float | None
) -> bool:
    """
    Learn from the answer to an early probe of a window's reset, if this is it.

    Through, or rejected by a window that had reset (its reset moved on by more than its
    grain): the others of a fleet took it first; the probe was not early for the server,
    and came as late into the new window as the window's start tells.  Rejected in the
    window it probed: a miss (:func:`early_miss`).
    """
    early = o.early_sent
    if early is None or sent_at is None or sent_at < early[0]:
        return False
    o.early_sent = None
    lead = early[1] - early[0]  # how long before the stated reset it went
    stated = hints.reset_after
    moved = stated is not None and now + stated > early[1] + grain(stated) + SKEW
    if status < 400 or moved:
        lead = min(EARLY_MAX, lead + late(o, hints, now, sent_at))
        o.early_lead, o.early_misses, o.early_floor = lead, 0, 0.0
    else:
        early_miss(o, lead, early[1] - now, hints.retry_after)
    return True


def grain(reset_after: float) -> float:
    """
    How coarse a stated time-to-reset is: 1 s when stated in whole seconds, else 0.

    A reset stated in whole seconds (IETF ``RateLimit``'s ``t``, most ``Retry-After``-like
    deltas) is rounded, up or down by the server's choice: stated from anywhere in a window,
    "1 s" puts the reset anywhere in the next second, a little later at each answer.
    """
    return 1.0 if reset_after >= 1 and reset_after % 1 == 0 else 0.0


def new_window(
    o: OriginState,
    remaining: float,
    reset_after: float | None,
    now: float,
    sent_at: float | None,
) -> bool:
    """
    Did a new window begin since the ledger's last report?

    Yes when the reset the model keeps has passed; when the stated reset moved on by more
    than its grain (:func:`grain`: a reset stated in whole seconds moves up to a second
    later at each answer within one window, and read as a new window at every answer, the
    spent period, the tally and the reset restarted with each 429, and a window was never
    told from a bucket: express-rate-limit, a fixed window of one second stating "1" from
    anywhere in it, took 1.3x the ideal); or when the quota came back: a request sent after
    the report that set the ledger was told more is left than that report said.
    """
    reset_at = o.reset_at
    if reset_at is None:
        return False
    if now >= reset_at:
        return True
    if reset_after is not None and now + reset_after > reset_at + grain(reset_after) + 0.001:
        return True
    told = o.ledger_set
    return told is not None and sent_at is not None and sent_at >= told[1] and remaining > told[0]


def stated_reset(kept: float | None, reset_after: float, now: float, *, fresh: bool) -> float:
    """
    The reset the model keeps, ``kept`` until now, after an answer stating ``reset_after``.

    The latest statement, unless it is coarse (:func:`grain`) and of the same window (not
    ``fresh``): then the earliest the window's answers stated.  Rounded up, that is the
    tightest bound on the true reset (the answer that came just after a whole second passed
    states it within a round trip); rounded down, every statement is early, and the ledger's
    probes find out.
    """
    stated = now + reset_after
    if fresh or kept is None or not grain(reset_after):
        return stated
    return min(kept, stated)


def due(o: OriginState) -> float | None:
    """
    When the quota resets, as the model's waits take it: the kept reset, or earlier.

    No later than a window that begins at its first request lasts (:func:`rolled`) from the
    current window's first answer, and halfway to that while the bounds on how long it lasts
    are wider than :data:`NARROW`.  (The kept reset itself stays what the server stated, for
    :func:`new_window` to tell a new window by.)
    """
    reset, hi, began = o.reset_at, o.window_hi, o.window_began
    if reset is None or hi is None or hi <= 0 or began is None:
        return reset
    bound = began + hi
    lo = o.window_lo
    if lo > 0 and hi - lo > max(NARROW, 4 * (o.latency or 0.0)):
        # the bound is loose: the window's first request goes halfway between what it lasted
        # at the least and at the most (a refusal raised the least, an answer through lowers
        # the most), but no earlier than EARLY_MAX before the stated reset.  Without it the
        # bound never tightened: measured once from a window opened late, a fleet through
        # Redis opened every window a tenth of a second late (1.1x the ideal on slowapi)
        bound = min(bound, max(began + (lo + hi) / 2, reset - EARLY_MAX))
    return min(reset, bound)


def rolled(
    o: OriginState,
    remaining: float,
    limit: float | None,
    now: float,
    sent_at: float | None,
    *,
    fresh: bool,
    through: bool,
    fine: bool = False,
) -> None:
    """
    Measure how long a window that begins at its first request lasts, or refute that it does.

    express-rate-limit's default store, and many limiters keyed per client, begin a window at
    the first request after the last one ended.  Its reset stated as a whole epoch second
    (``X-RateLimit-Reset``) is up to a second late, by how the window's start falls between
    whole seconds, differently in each window: early probes that learned one window's
    lateness missed in the next, and a client that opened each window at the stated reset
    stayed a second late in every one (every other window of one second lost, 1.8x).  Such a
    window is not longer than from the send of the request that found it whole (it began
    that window) to the answer of a request that found the next one whole past a spent quota;
    so the next reset is no later than that span after the next window's first answer
    (:func:`due`).  A request sent after that bound and still refused in the same
    window refutes it: the limiter keeps its windows some other way (aligned to the clock,
    say), and the stated reset is read alone from then on.  A request refused before that
    bound shows that the window lasts longer than from its first answer to that request's
    send, when its reset is stated ``fine`` (not in whole seconds: one stated coarsely may be
    the next window's, opened and spent by others of a fleet that shares nothing).
    """
    hi = o.window_hi
    if fresh:
        opened = o.opened_sent
        whole = limit is not None and sent_at is not None and remaining >= limit - 1
        spent = o.exhausted is not None  # (before the ledger ends the spent period)
        if opened is not None and through and whole and spent and hi != REFUTED:
            o.window_hi = now - opened if hi is None else min(hi, now - opened)
            if o.window_lo >= o.window_hi:  # the bounds disagree (the limiter changed)
                o.window_lo = 0.0
        o.window_began = now
        o.opened_sent = sent_at if whole else None
    elif not through and hi is not None and hi > 0 and o.window_began is not None:
        if sent_at is None:
            return
        if sent_at >= o.window_began + hi + SKEW:
            o.window_hi = REFUTED
        elif fine:  # it arrived before the window's end, the window's first after its start
            o.window_lo = max(o.window_lo, sent_at - o.window_began)


def late(o: OriginState, hints: Hints, now: float, sent_at: float) -> float:
    """
    How long after its window began an answered request was sent (0 when unknown).

    A window's stated reset less its span (stated, or its longest time-to-reset seen: what
    a server that states its reset late states at the window's start) is when it began.
    A probe that went that late into a new window others had reached first goes that much
    earlier next time: kept where it was, a process of a fleet that shares nothing came a
    tenth of a second into every window, already full, for twenty windows in a row.
    """
    span = hints.window or o.window_guesses.get(hints.limit, 0.0)
    if hints.reset_after is None or span <= 0:
        return 0.0
    began = now + hints.reset_after - span
    return min(span, max(0.0, sent_at - began))


def early_miss(o: OriginState, lead: float, before: float, retry_after: float | None) -> None:
    """
    A window rejected a probe sent ``lead`` before its stated reset (``before`` is left).

    The next probe goes later (a quarter nearer the stated reset).  Its ``Retry-After`` says
    how long before the stated reset the window takes the next, at the earliest: slowapi
    states a reset a second late and truncates ``Retry-After``, which lands between the true
    reset and the stated one.  When the misses run out (the stated reset is trusted then),
    one more probe goes there, the earliest any of them said: on a 3 s window the probes
    crept up on the true reset (a quarter at a time) and ran out just short of it, and every
    window after waited the extra second.
    """
    misses = o.early_misses + 1
    floor = o.early_floor
    if retry_after is not None and floor >= 0:
        floor = max(floor, before - retry_after)
    lead *= 0.75
    if misses >= EARLY_MISSES and floor > 0:
        lead, misses, floor = floor, EARLY_MISSES - 1, -1.0
    o.early_lead, o.early_misses, o.early_floor = lead, misses, floor
