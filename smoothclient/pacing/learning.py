"""
How responses move an origin's state, as pure functions.

The limiter model and the quota mirror (the table in :mod:`.state`); for limiters that say
nothing but 429, the rate controller of :mod:`.controller`.

Like :mod:`.state`, nothing here locks, sleeps or reads a clock: a store applies
:func:`observe` atomically.
"""

from __future__ import annotations

import dataclasses
import math

from ..hints.model import Hints
from . import controller, crowd, outage, resets
from .controller import SKEW
from .state import OriginState, Settings

__all__ = ["can_wait", "observe"]

#: How much evidence (requests sent while the quota was spent, before its reset: admitted
#: count +1, rejected -1, older evidence fading) makes the model a bucket or a window.
EVIDENCE = 1.5
#: How many quota sizes per origin keep a guessed window (for quotas that state none).
MAX_WINDOW_GUESSES = 8


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
    if _predicted(o, s, status, hints, now, sent_at, counted):
        return  # the countdown the model expected: its ledger and mirror moved, nothing else
    hints = _capped(hints, s.max_gate)
    if status < 400:
        o.succeeded(now)
        o.through += 1
        if o.outage.release_until > now - outage.RELEASE:
            outage.settled(o, now)  # (after the learning below would be later than needed)
    if counted:
        o.in_flight = max(0, o.in_flight - 1)
    o.known = True
    throttled = status == 429 or (status == 503 and hints.retry_after is not None)
    throttled = throttled or (status == 403 and hints.exhausted)
    failure = outage.is_failure(status)
    if failure:
        # an outage's evidence; while an outage's backlog is released, also a throttle
        closed = status == 503 and hints.retry_after is not None
        throttled = (
            outage.failed(o, now=now, closed=closed) and hints.remaining is None
        ) or throttled
    elif o.outage.fails or o.outage.down_since is not None:
        outage.answered(o, s, now)
    if hints.retry_after is not None and status >= 300 and (status != 429 or hints.origin_wide):
        # a 503's Retry-After speaks for the whole origin (so does a 429 saying its limit is
        # global); a 429's only for its request (the limiter model or the learned rate holds
        # the others back as far as needed)
        o.gate = max(o.gate, now + hints.retry_after)
    if hints.remaining is not None and hints.unit == "requests":
        if not resets.early_answered(o, status, hints, now, sent_at):
            _weigh(o, status, sent_at, hints, now)
        _quota(
            o,
            s,
            hints,
            now,
            throttled=throttled,
            sent_at=sent_at,
            counted=counted,
            through=status < 400,
        )
        _tally(o, hints.remaining, throttled=throttled, through=status < 400)
    elif hints.exhausted and hints.reset_after is not None:
        o.gate = max(o.gate, now + hints.reset_after)  # another unit ran out
    elif throttled:
        if status == 429 and crowd.crowded(o, s, now, counted, sent_at):
            controller.noted(o, now)  # a concurrency limit's: the window is cut, not the rate
        else:
            controller.throttled(o, s, now, sent_at)
    else:
        if status < 400:  # (only where no quota is stated: a crowd window is set only there)
            crowd.served(o, s, now, sent_at)
        if o.learned and not failure:
            controller.recovered(o, s, now, sent_at)
    if o.outage.release_until > now - outage.RELEASE:
        # the release's bound in flight
        outage.timed(o, s, now, sent_at, ok=status < 400, cut=throttled)


def _predicted(
    o: OriginState,
    s: Settings,
    status: int,
    hints: Hints,
    now: float,
    sent_at: float | None,
    counted: bool,
) -> bool:
    """
    :func:`observe` of an answer that says only what the model expected, if it is one.

    A success in the window the ledger keeps, the same stated quota and window, what is left
    counted down (no more than the report that set the ledger said), room left after it, no
    probe, spent period, outage or release under way: of :func:`observe`'s rules only the
    ledger, the mirror's rate and tokens and the window's tally move, as they would there
    (tests/pacing/test_learning_predicted.py runs both on the same answers).  ``False``:
    anything else, learned by the whole of :func:`observe` (nothing moved here).
    """
    remaining, limit, window, reset_after = (
        hints.remaining,
        hints.limit,
        hints.window,
        hints.reset_after,
    )
    reset_at, avail, out = o.reset_at, o.avail, o.outage
    if (
        status >= 400
        or remaining is None
        or not limit
        or not window
        or limit < window / s.max_gate  # (spaced past max_gate: _quota caps it)
        or hints.retry_after is not None
        or hints.unit != "requests"
        or reset_at is None
        or avail is None
        or resets.new_window(o, remaining, reset_after, now, sent_at)
        or window > s.max_gate
        or (reset_after is not None and reset_after > s.max_gate)
        or o.kind == "window"
        or o.early_sent is not None
        or o.exhausted is not None
        or out.fails
        or out.down_since is not None
        or out.release_until > now - outage.RELEASE
    ):
        return False
    if _overtaken(o, remaining, sent_at, counted):
        return False  # a token given back: news
    in_flight = max(0, o.in_flight - 1) if counted else o.in_flight
    left = remaining - in_flight - o.waiting
    if left < avail:
        avail = left
        if avail < 1:
            return False  # the quota runs out: news
        o.avail, o.ledger_set = avail, (remaining, now)
    elif avail < 1:
        return False
    # what observe, _quota, _ledger and _tally do with such an answer, in their order
    o.succeeded(now)
    o.through += 1
    o.in_flight = in_flight
    o.known = True
    o.learned = False
    o.limit = limit
    if o.reset_probe is not None:
        o.reset_probe = None
    o.given_back = 0
    o.closed = None
    if reset_after is not None:
        o.reset_at = resets.stated_reset(reset_at, reset_after, now, fresh=False)
    pace = o.pace
    pace.rate = limit / window
    pace.burst = max(1.0, min(limit, max(pace.burst, remaining)))
    if pace.interval:
        tokens = remaining - in_flight - o.waiting
        if tokens - pace.tokens(now) > pace.burst / 2:
            pace.set_tokens(now, tokens)
        else:
            pace.tat = max(pace.tat, now + (pace.burst - tokens) * pace.interval)
    if o.period_top is None:
        o.period_top = o.period_low = remaining
    o.period_low = min(o.period_low, remaining)
    o.period_ok += 1
    return True


def can_wait(o: OriginState, status: int, hints: Hints) -> bool:
    """
    Whether the others of a fleet can learn of an answer a step later.

    A success with quota left and no ``Retry-After``: a shared store may pass it on with its
    next step.  Any other answer (a throttle, a spent quota, a ``Retry-After``) stops the
    others at once, and so does a success that says no quota on an origin paced by a learned
    rate: the controller measures the rate the fleet got through from those, at the next
    throttle of any process (late, they read the fleet's rate low and cut it too far: a
    fleet of three against nginx took 1.6x instead of 1.02x).  So does the answer others
    wait for: while a probe is out (the cold-start probe of an origin not yet known, a
    window's reset probe or early probe), the others hold back until it is answered (late,
    a fleet through Redis sometimes sent a window's requests one window late).
    """
    if status >= 400 or hints.retry_after is not None or hints.exhausted:
        return False
    if not o.known or o.reset_probe is not None or o.early_sent is not None:
        return False
    if o.crowd_window != math.inf:
        return False  # (the place it frees is the fleet's: others wait for it)
    return hints.remaining is not None or not o.learned


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
    reset before it said it would (one aligned to the clock, say): a window's vote.  A
    success is a bucket's vote only once more got through since the window's first report
    than that report said was left: before, the ledger ran out only because it counts the
    requests in flight, which the server had already counted in the reports it read (a
    herd, or a fleet through one store, read a window as a bucket and paced it at half its
    rate, closed until each stated reset).  Older evidence fades.

    A rejection is a window's vote only if a bucket would have admitted it: one at a rate
    the model can trust (a stated window, or one guessed across a reset) that had refilled a
    token for it beyond those it admitted since the quota ran out.  Sent sooner, or paced
    by a window guessed from a time-to-reset seen partway through it (shorter than the
    window, so faster than the server), a bucket rejects it too: no evidence.
    """
    spent = o.exhausted
    if spent is None or sent_at is None or not spent[0] + SKEW < sent_at < spent[1]:
        return
    weight = 1.0 if status < 400 else -1.0 if status == 429 else 0.0
    if weight > 0 and o.given_back > 0:
        o.given_back -= 1  # it went on a token the ledger had counted twice: no refill
        return
    if weight > 0:
        o.admitted = _admitted(o, spent[0]) + 1
        o.admitted_since = spent[0]
    interval, limit, remaining = o.pace.interval, hints.limit, hints.remaining
    if weight > 0 and interval and limit and remaining is not None:
        refilled = (now - spent[0]) / interval  # what a bucket at the mirrored rate got back
        if remaining >= limit / 2 and remaining > refilled + 1:
            weight = -1.0
    elif weight < 0 and not _owed(o, hints, sent_at):
        weight = 0.0
    if weight > 0 and o.period_top is not None and o.period_ok <= o.period_top:
        weight = 0.0  # no more got through in this window than its first report said it held
    _vote(o, weight)


def _owed(o: OriginState, hints: Hints, sent_at: float | None) -> bool:
    """
    Would a bucket at the mirrored rate have admitted a request sent at ``sent_at``?

    Yes if it had refilled a token for it since the quota ran out, beyond those it admitted
    since, and the rate can be trusted: stated (a window), or guessed over a whole window
    (across a reset, or when the quota was at least half left: a time-to-reset seen partway
    through a window is shorter than the window, and a rate guessed from it is faster than
    the server's).  With no rate or no spent quota, no way to tell: yes.
    """
    spent, interval = o.exhausted, o.pace.interval
    if spent is None or sent_at is None or not interval:
        return True
    if not hints.window and not o.guess_whole:
        return False
    refilled = (sent_at - spent[0]) / interval
    return refilled + 1e-9 >= _admitted(o, spent[0]) + 1


def _admitted(o: OriginState, since: float) -> int:
    """Requests sent into the quota spent ``since`` that got through (0 for another period)."""
    return o.admitted if o.admitted_since == since else 0


def _vote(o: OriginState, weight: float) -> None:
    """Add evidence (> 0: a bucket, < 0: a window); older evidence fades."""
    o.evidence = o.evidence * 0.7 + weight
    if o.evidence >= EVIDENCE:
        o.kind = "bucket"
    elif o.evidence <= -EVIDENCE:
        o.kind = "window"


def _ledger(
    o: OriginState,
    remaining: float,
    reset_after: float | None,
    now: float,
    overtaken: bool,
    alone: bool = False,
    *,
    new_window: bool,
    through: bool = False,
) -> None:
    """
    Keep the ledger: what the quota still admits before its reset.

    A report may lower it at any time (someone else spent some).  It raises it only when a
    new window began (the reset passed, or moved on): a report that left the server before
    our latest sends would otherwise give back tokens that are gone.  Or by one for an
    ``overtaken`` answer (see :func:`_overtaken`): the report that set the ledger counted
    its request twice, as spent and as in flight.  At a window's reset it admits only this
    client's share of what is left (:func:`_share`), unless the client is ``alone`` (its
    state is the whole fleet's).
    """
    left = remaining - o.in_flight - o.waiting
    if new_window:
        o.exhausted = o.closed = None  # a spent quota's period ends with its window
        o.guess_whole = True
        if (
            through
            and remaining < 1
            and reset_after is not None
            and resets.grain(reset_after)
            and o.limit
            and o.period_ok >= o.limit
            and not o.in_flight
        ):
            # Alone on the quota (the last window admitted only this client's requests),
            # the new window let one in (no other is out) and holds nothing more: a fixed
            # window gives a lone client all of it at its reset, so this one refills as it
            # was spent (a moving window, a bucket).  Stated exactly, its reset says when
            # the next slot frees; stated in whole seconds it says "1 s", a whole second
            # that a moving window of one second did not need (2x the ideal): paced by the
            # mirror.
            o.evidence, o.kind = EVIDENCE, "bucket"
        sharing = o.kind == "window" and not alone  # a bucket's mirror paces it
        if sharing:
            _share(o)
        o.period_top = o.period_low = remaining
        o.period_sent = o.period_ok = o.period_throttled = 0
        if remaining >= 1 and sharing:
            # this answer's request got into the new window (it opened it, often): it is part
            # of this client's share of it, not on top of it (each process of a fleet of
            # twelve probed a window open, then sent its share: twice its part, and the
            # window turned away a request for each it admitted)
            own = 1 if through else 0
            share = max(1, math.floor(o.share * (remaining + own) + 0.5)) - own
            left = min(left, share - o.in_flight - o.waiting)
    if o.avail is None or left < o.avail or new_window:
        o.avail = left
        o.ledger_set = (remaining, now)
    elif overtaken:
        o.avail += 1
        if o.exhausted is not None and o.avail + o.waiting >= 1:
            # a request waiting for a slot holds the token: it goes into the "spent" quota
            o.given_back = min(o.given_back + 1, o.waiting)
    if o.reset_probe is not None and now >= o.reset_probe:
        o.reset_probe = None  # answered: the ledger says what may go, or the next reset
    if o.exhausted is None or o.avail >= 1:
        o.given_back = 0
    if o.avail >= 1:
        o.exhausted = o.closed = None
        o.reset_probe = None
    elif reset_after is not None:  # spent since the first report that said so, until the reset
        start, end = (now, None) if o.exhausted is None else o.exhausted
        o.exhausted = (start, resets.stated_reset(end, reset_after, now, fresh=False))


def _share(o: OriginState) -> None:
    """
    At a window's end: this client's share of the next one, from its tally of the last.

    A quota that others spend too (the processes of a fleet that share nothing, each
    reading the same headers) admits each of them a part of every window.  Each one that
    sends all the window holds at its reset earns the fleet a 429 for every request beyond
    the one window (N - 1 windows' worth in a fleet of N).  So each client sends at a reset
    only its share of what is left (the ledger), and learns that share by AIMD over windows
    (Chiu and Jain, 1989: additive increase with multiplicative decrease, the law that
    moves N senders toward fair shares): a window in which some of its requests were
    throttled cuts it to the part of the window's admissions that were its own (a measured
    decrease).  A window with no throttle that had room left at the last report seen
    raises it to its part of what the window admitted, so that each takes its part of the
    room (a client left alone is back to all of it within a window or two), by one request
    at least (the additive increase) and at most doubled (its answers may have come back
    before the others' requests were counted); a window the others filled without a
    throttle holds no more for anyone.  Alone, a client sees no admissions but its own: its
    share stays 1.  A window it sent nothing into says nothing.  A limit: a client whose
    requests took a whole window measures all of it as its own and does not yield; the
    others get their part as its demand ends (a fleet's calls still finish together, the
    windows full).

    A state the whole fleet shares (:attr:`~.state.Settings.shared`) has no share to learn:
    its tally would count the fleet's requests, less any update a race or an outage lost,
    and read those as others' (a fleet through Redis sent half of what its windows held).
    """
    top = o.period_top
    sent = max(o.period_sent, o.period_ok + o.period_throttled)
    if top is None or top < 1 or not sent:
        return
    if o.period_throttled:  # the window was full: it admitted its whole limit
        used = max(o.limit or top, top - o.period_low, o.period_ok, 1.0)
    else:  # what it admitted, as far as reported
        used = max(top - o.period_low, o.period_ok, 1.0)
    got = o.period_ok / used
    if o.period_throttled:
        o.share = max(1 / top, min(o.share, got))
    elif o.period_low >= 1:  # the window had room left at its last report
        o.share = min(1.0, 2 * o.share, max(got, o.share + 1 / top))


def _tally(o: OriginState, remaining: float, *, throttled: bool, through: bool) -> None:
    """Count one report into the current window's tally (see :func:`_share`)."""
    if o.period_top is None:
        o.period_top = o.period_low = remaining
    o.period_low = min(o.period_low, remaining)
    if throttled:
        o.period_throttled += 1
    elif through:
        o.period_ok += 1


def _overtaken(o: OriginState, remaining: float, sent_at: float | None, counted: bool) -> bool:
    """
    Was this answer's request counted twice by the report that last set the ledger?

    That report subtracted every request then in flight from what it said was left.  One of
    them that the server had counted before it (it reports more left) and whose answer
    comes only now (answers overtake each other: threads, connections, a fleet's processes)
    was counted twice.  Left uncorrected, a herd sent from threads reads its window as spent
    a few requests early, and the requests paced into the "spent" quota that get through
    read as a bucket's refill.
    """
    told = o.ledger_set
    return (
        counted
        and sent_at is not None
        and told is not None
        and remaining > told[0]
        and sent_at < told[1]
    )


def _guess_window(o: OriginState, limit: float | None, reset_after: float | None) -> float:
    """The window of a quota of ``limit`` that states none: its longest time-to-reset."""
    guesses = o.window_guesses
    guess = guesses.get(limit, 0.0)
    if reset_after is not None and reset_after > guess:
        guess = guesses[limit] = reset_after
        while len(guesses) > MAX_WINDOW_GUESSES:
            del guesses[next(iter(guesses))]  # the oldest quota size seen
    return guess


def _quota(
    o: OriginState,
    s: Settings,
    hints: Hints,
    now: float,
    *,
    throttled: bool,
    sent_at: float | None,
    counted: bool = True,
    through: bool = False,
) -> None:
    """
    Mirror the server's quota: rate, burst and the tokens it says are left.

    An exhausted quota closes the gate until its reset only on a throttled response: a
    token bucket often reports 0 left on a success while admitting the full rate, and its
    whole-second reset would stall a well-paced client.  The mirror spaces requests at most
    ``max_gate`` apart: a quota of less than one request a window (a tenth of a call, or a
    quota of tokens over a call costing more than it holds) spaced them further, each slot
    past what any header may hold a request.
    """
    alone = s.shared
    assert hints.remaining is not None
    pace = o.pace
    o.learned = False
    o.limit = hints.limit
    available = hints.remaining - o.in_flight
    owed = throttled and _owed(o, hints, sent_at)  # before the ledger moves the spent period
    overtaken = _overtaken(o, hints.remaining, sent_at, counted)
    new_window = resets.new_window(o, hints.remaining, hints.reset_after, now, sent_at)
    first = o.reset_at is None  # the first report: the first window seen begins
    resets.rolled(
        o,
        hints.remaining,
        hints.limit,
        now,
        sent_at,
        fresh=new_window or first,
        through=through,
        fine=hints.reset_after is not None and not resets.grain(hints.reset_after),
    )
    _ledger(
        o,
        hints.remaining,
        hints.reset_after,
        now,
        overtaken,
        alone,
        new_window=new_window,
        through=through,
    )
    if hints.reset_after is not None:
        o.reset_at = resets.stated_reset(o.reset_at, hints.reset_after, now, fresh=new_window)
    limit, window = hints.limit, hints.window
    if not window:  # none stated (or a useless 0)
        window = _guess_window(o, limit, hints.reset_after)
        if limit and hints.remaining >= limit / 2 and window == hints.reset_after:
            o.guess_whole = True  # guessed when the window was young: it spans about all of it
    if o.kind == "window":
        pace.rate = None  # the ledger paces a window: all it holds now, then its reset
    elif limit and window:
        # mirror the server's bucket: refill at limit / window (stated, or over the
        # longest time-to-reset seen), burst up to what the server has said is left
        pace.rate = max(limit / window, 1.0 / s.max_gate)
        pace.burst = max(1.0, min(limit, max(pace.burst, hints.remaining)))
    elif hints.remaining < 1 and o.reset_at is not None:
        pace.rate = 1.0 / max(o.reset_at - now, 0.001)
        pace.burst = 1.0
    else:
        pace.rate = None
    if throttled and hints.remaining <= 0 and o.reset_at is not None:
        # the server said the quota is spent and when it resets: closed until then, whatever
        # the limiter (a bucket's mirror would pace requests into it, each one refused)
        o.closed = o.reset_at
    if owed and hints.remaining <= 0 and hints.reset_after is not None and o.kind == "bucket":
        # a bucket that throttled a request its mirror said it would admit: nothing before
        # its reset (a window's ledger waits for its own, and probes it; an unknown limiter
        # is paced into the spent quota to tell which; a request sent before its token was
        # due, at a faster rate since corrected, says nothing against the mirror)
        o.gate = max(o.gate, now + hints.reset_after)
    if pace.interval:
        tokens = available - o.waiting
        # Responses overtake each other: one that left the server before our latest sends
        # reports tokens that are gone, and trusting it releases a burst that earns 429s.
        # So a report may always slow us down, but speeds us up only when it gives far
        # more than our own accounting (half the burst: a window reset, a refill we did
        # not model), never by the few tokens an overtaken response is off by.  Except
        # the one token an overtaken answer proves was counted twice (as in the ledger).
        if overtaken:
            pace.set_tokens(now, min(pace.burst, pace.tokens(now) + 1))
        if tokens - pace.tokens(now) > pace.burst / 2:
            pace.set_tokens(now, tokens)
        else:
            pace.tat = max(pace.tat, now + (pace.burst - tokens) * pace.interval)
