"""
The rate controller, as pure functions: AIMD on the delivered rate.

For limiters that say nothing but 429 (or only ``Retry-After``).

:func:`throttled` cuts the learned rate on a throttle, :func:`recovered` grows it between
throttles; :func:`smoothclient.pacing.learning.observe` calls them for answers that carry no
quota.  Like :mod:`.state`, nothing here locks, sleeps or reads a clock.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

from .outage import release_step
from .state import HORIZON, OriginState, Settings

__all__ = ["EPOCH", "SKEW", "forget", "noted", "recovered", "throttled"]

#: The delivered rate is measured over this many seconds.
EPOCH = 1.0
#: A young origin (seen for less than EPOCH) is cut only on this many answers, most of them
#: throttles (a share whose Wilson lower bound is a half): a herd into a limiter, not a few
#: unlucky requests.
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
#: A measured admitted rate is refuted (the slow start resumes) only after this many
#: successes without a throttle (and a whole EPOCH): at a fleet's share of a slow limiter
#: an EPOCH holds less than one request, no evidence of anything.
REFUTE_EVIDENCE = 4
#: At the measured admitted rate, at most this many successes since the last throttle before
#: probing past it (see ``OriginState.hold``).
HOLD = 10
#: A throttle measures the rate since the last one (both moments the limiter was full) only
#: 1 to 4 EPOCHs after it and on at least this many successes: fewer, a fleet's share read
#: low by a success or two, cut a process to half its share and left it to crawl.
FULL_EVIDENCE = 20


#: How sure "most requests were throttled" must be before a cut is taken for a limiter's (the
#: z of a one-sided 95% Wilson bound): 5 throttles of 10 answers are no evidence of most.
CONFIDENCE_Z = 1.645


def _lower_share(share: float, n: int) -> float:
    """
    The Wilson score lower bound of a share measured on ``n`` answers (0 for none).

    A share of throttles read on a handful of answers says little: 5 of the 10 answers to a
    herd's first second are as likely at random 30% throttles as at a limiter's 50%.
    """
    if n <= 0:
        return 0.0
    z2 = CONFIDENCE_Z * CONFIDENCE_Z
    centre = share + z2 / (2 * n)
    margin = CONFIDENCE_Z * math.sqrt(share * (1 - share) / n + z2 / (4 * n * n))
    return max(0.0, (centre - margin) / (1 + z2 / n))


def _recent(times: deque[float], since: float) -> int:
    """How many of ``times`` (ascending) are at or after ``since``."""
    return len(times) - bisect.bisect_left(times, since)


def throttled(o: OriginState, s: Settings, now: float, sent_at: float | None) -> None:
    """
    The rate controller for limiters that say nothing but 429: AIMD on the delivered rate.

    A throttle (at most one cut per request sent after the last cut, as TCP cuts once per round
    trip) sets the rate to what got through in the last :data:`EPOCH`: above a limiter's rate
    exactly its rate, so one cut lands on it; for N clients sharing nothing, each one's share,
    which is its rate times (admitted / sum of rates): a multiplicative decrease by the same
    measured factor for all.  That EPOCH also counts the tokens a bucket banked while the client
    sent below its rate; what got through since the last throttle (the limiter was full at both)
    does not, and is taken instead when it is the better part of it (see
    :data:`FULL_EVIDENCE`).  Between throttles the rate grows: multiplicatively until it reaches
    the last measured admitted rate (a slow start; the first measurement, taken during the first
    burst, is no ceiling, nor is a cut that found nothing delivered), then additively by
    :data:`PROBE_GAIN` per second.  A raise moves the slot already owed with it, and a request
    waiting for a far slot in a slow start asks again halfway: at the floor, a success that
    doubled the rate left the next request two seconds away all the same (the processes of a
    fleet that lost the first wave took seconds to find a limiter the others had left).  A
    ceiling is a share as much as a limit: a whole :data:`EPOCH` at or above it without a
    throttle, over at least :data:`REFUTE_EVIDENCE` successes, refutes it (the others of a fleet
    are done), and the slow start resumes (a slow-start restart, not a crawl by
    :data:`PROBE_GAIN` a second into a limiter left idle).
    Additive increase with multiplicative decrease is the law that converges N senders to
    fair shares without starving any (Chiu and Jain, 1989), and measuring the decrease keeps
    one sender at 90-100% of the admitted rate.

    Throttles that do not follow the rate (a flaky proxy answering a share of requests 429
    whatever the rate) must not drive it down without limit.  The test is the one TCP
    variants that tell random loss from congestion rest on (Veno, Westwood: a loss while the
    sender backed off is not congestion's): lower the rate and see whether the share of
    throttles falls.  A limiter's does (it throttles what exceeds its rate, about nothing
    once the rate is at or below it); random throttles' does not.  So a cut after which the
    share of throttles did not fall is undone, and throttles are then ignored for a while.
    Only when the share before the cut was not shown to be most (its Wilson lower bound
    under a half), though: a share of most is a limiter, and in a fleet that shares nothing
    the others keep it full whatever this process does, so its share does not fall either;
    undoing that cut made the process unlimited for seconds.  (The point share once decided
    it: 5 throttles of a herd's first 10 answers, at random 30% throttles, read as "most",
    and the rate fell to 2 req/s where a plain client got 200.)

    A fleet's first wave is where its 429s come from: N processes, each with its whole herd,
    into one bucket.  A process whose answers were all throttles (:data:`YOUNG_EVIDENCE` of
    them) has measured an admitted rate under one per :data:`EPOCH`: it is paced at that
    bound (or the floor) and slow-starts from there, rather than left to jittered backoff,
    which sends its herd back in waves until one request gets through.  (From half of it, the
    processes that lost the first wave of a fleet of three sent nothing for two seconds while
    the winner was done in one, and finished at 1.5x the ideal.)

    A cut takes effect only after the slot it found owed, at the old spacing (an interval of
    the rate its episode of cuts began at): a throttle of the request sent in that slot says
    nothing of the new rate and cuts nothing (cut on it, its EPOCH re-counting the first
    throttle, a fleet's slowest process went from 3 to 2 to 1 req/s in a third of a second,
    then crawled alone once the others were done).
    """
    pace = o.pace
    # two moments the limiter was full: what got through between them is its rate (at least)
    between = now - o.last_throttle
    measured = EPOCH <= between <= 4 * EPOCH and o.through >= FULL_EVIDENCE
    full = o.through / between if measured else 0.0
    noted(o, now)
    if now < o.noise_until or (sent_at is not None and sent_at <= o.last_cut):
        return
    cut = o.cut
    old = None if cut is None else cut[1]  # the rate its episode of cuts began at
    if cut and old and sent_at is not None and cut[3] < old and sent_at < cut[0] + 1 / old + SKEW:
        return  # sent in the slot owed at the old spacing (an interval of it): before the cut
    since = now - EPOCH
    delivered, throttled = _recent(o.successes, since), _recent(o.throttles, since)
    share = throttled / (throttled + delivered)
    # young: the origin, or this spell of answers (the first after IDLE without one), is less
    # than an EPOCH old; what got through in the EPOCH is then a burst's, not a rate (an
    # origin idle for a while, then 150 req/s into random 30% throttles: the first throttle
    # came after 6 successes, measured 6 req/s, and the rate fell to 2 req/s for good)
    young = now - max(o.first_seen, o.spell_since) < EPOCH
    if young and (
        throttled + delivered < YOUNG_EVIDENCE or _lower_share(share, throttled + delivered) < 0.5
    ):
        return  # young, and few answers or not most of them throttles: no limiter shown yet
    if o.learned and now - o.last_cut < EPOCH / 4:
        return  # the last cut has not shown its effect yet
    if (
        cut is not None
        and _lower_share(cut[2], o.cut_evidence) < 0.5
        and now - cut[0] >= EPOCH / 4  # (no later than the next cut may come)
        and (pace.rate or 0) <= 1.25 * cut[3]
    ):
        # (only when most requests got through before the cut: a share of most is a limiter,
        # into which the others of a fleet keep sending; undoing a cut of it starts a storm)
        # still sending near the rate it cut to: did the cut lower the share of throttles?
        # (and did most answers still get through after it, as they do with noise: after a
        # cut into a limiter that counts what it refuses, all are throttles for a while, and
        # undoing that cut sent an unpaced storm into HAProxy, throttles ignored: 600 req/s)
        after = cut[0] + 1e-9
        late = _recent(o.throttles, after)
        answers = late + _recent(o.successes, after)
        if (
            late >= NOISE_EVIDENCE
            and late >= NOISE * cut[2] * answers
            and _lower_share(late / answers, answers) < 0.5
        ):
            # no: they do not follow the rate (noise); undo the cut, to the rate its episode
            # began at, or (it began unpaced) twice what gets through now: throttles are
            # ignored for a while, and unpaced a misread limiter would get every retry at once
            pace.rate = cut[1] if cut[1] is not None else max(cut[3], 2 * delivered / EPOCH)
            o.cut = None
            o.noise_until = now + 10 * EPOCH
            return
    if not delivered and not o.learned and throttled < YOUNG_EVIDENCE:
        return  # no evidence of any admitted rate yet: leave it to jittered backoff
    before = pace.rate
    # over a whole EPOCH even on a young origin: what a first burst got through is no rate
    # (counted over less time, a burst of 5 read as 20 req/s and earned a storm of 429s)
    # none delivered: under one an EPOCH, or half the rate that got none through; not half
    # of a guess, though: a process never answered with a success (all its requests
    # turned away: a fleet's others held the limiter) measured nothing yet, and halving its
    # one an EPOCH left it probing every two seconds after the others were done (a fleet
    # of six against a concurrency limit: 2.4x the ideal)
    nothing = before * 0.5 if before and o.latency is not None else 1 / EPOCH
    rate = delivered / EPOCH if delivered else nothing
    if delivered:
        o.delivered_rate = delivered / EPOCH
    elif before and o.learned and o.delivered_rate:
        # a whole EPOCH throttled after a rate was measured getting through: a penalty (a
        # limiter that counts the requests it refuses stays closed while they come): each
        # probe waits twice as long as the last, and the first that gets through restores
        # that rate (see recovered)
        o.penalty_from = max(o.penalty_from, min(before, o.delivered_rate))
    if rate / 2 <= full < rate:
        # the EPOCH also counts what a bank of tokens saved while the rate was lower added
        # (a slow start past a 10 req/s bucket of 6 measured 16 and took four throttles to
        # come down): what got through since the last throttle, when the limiter was full
        # then too, is the rate without it
        rate = full
    rate = max(s.learned_floor, rate)
    if before is not None and o.learned:
        rate = min(rate, before)
    # a measured admitted rate is the slow start's ceiling; none got through (a fleet's
    # others took it all, or this rate sends less than one a measurement) measures nothing
    ceiling = rate if o.learned and delivered else math.inf
    if o.punishes and o.ceiling < math.inf:
        # a limiter that punishes knocking: a cut measures what got through while its
        # penalty lasted, less than it admits; the ceiling stays the best measured since
        ceiling = o.ceiling if ceiling == math.inf else max(ceiling, o.ceiling)
    o.ceiling = o.measured = ceiling
    evidence = throttled + delivered
    if cut is not None and now - cut[0] < 3 * EPOCH:
        before, share = cut[1], cut[2]  # one episode of cuts: undoing it restores its start
        evidence = o.cut_evidence
    elif throttled < NOISE_EVIDENCE:
        # a share measured on a throttle or two is none: a limiter's first throttle comes
        # with a share near 0, and any cut that lands a little above its rate raises it (read
        # as noise, undone, throttles ignored for 10 EPOCHs: a storm).  Never undone.
        share = 1.0
    o.cut = (now, before, share, rate)
    o.cut_evidence = evidence
    o.last_cut = now
    o.learned = True
    pace.rate = rate
    pace.burst = 1.0
    pace.tat = max(pace.tat, now)


def noted(o: OriginState, now: float) -> None:
    """
    A throttle's record, and nothing more: what :func:`throttled` measures its cuts by.

    Also kept of throttles the crowd window takes (:mod:`.crowd`): should the limiter prove to
    be a rate's, the controller cuts knowing them.
    """
    o.answered(now)
    if o.probed == 1:
        # the first step past the measured rate was refused: a limiter with no room above it
        # (no burst: 1 r/s, burst 1), where probing after each success cost a 429 and an
        # interval every other request; wait longer at that rate before the next probe
        o.hold = min(HOLD, 2 * o.hold + 1)
    elif o.probed or (o.hold and o.learned):
        # probes got through for a while (there was room above the rate), or a throttle came
        # while held at the rate (the others of a fleet share the limiter: the rate measured
        # was a share, and a process held at it was left behind when they were done)
        o.hold //= 2
    o.probed = 0
    o.last_throttle = now
    o.unthrottled = o.through = 0
    o.throttles.append(now)
    if o.throttles[0] < now - EPOCH:
        o.throttles.popleft()


def _raise(o: OriginState, now: float, rate: float) -> None:
    """
    Raise the learned rate to ``rate``, the slot already owed included.

    The GCRA fixed the next slot one interval of the old rate after the last: at half a
    request a second, a rate doubled by the answer to that request still waited two seconds
    for the next.  It now comes one interval of the new rate after the last slot.  Only that
    one interval moves: the slots already granted stay where they are (scaling the whole
    span ahead put the next slot among them: threads that had theirs sent together, and a
    Retry-After server's 429s cost a second each).  Only at under one request every two
    HORIZONs, where a waiting request's slot is not yet fixed: above, moving it sent the
    requests of a threaded herd on a 5 req/s bucket 0.5 s later in all (1.03x -> 1.11x).
    """
    pace = o.pace
    old = pace.interval
    pace.rate = rate
    if old > 2 * HORIZON and pace.tat > now:
        pace.tat -= old - pace.interval


def forget(o: OriginState) -> None:
    """The learned rate goes: no rate, no cut, no penalty, nothing measured of the limiter."""
    o.learned = o.punishes = False
    o.delivered_rate = o.penalty_from = 0.0
    o.measured, o.hold, o.probed = math.inf, 0, 0
    o.pace.rate = None
    o.cut = None


def recovered(o: OriginState, s: Settings, now: float, sent_at: float | None) -> None:
    pace = o.pace
    if now - o.last_throttle > s.quiet:
        forget(o)
    elif pace.rate is not None and sent_at is not None and sent_at <= o.last_cut:
        # in flight at the cut: part of the delivered rate it measured, which it completes
        # (no sign yet of how the cut rate fares)
        cut = o.cut
        top = math.inf if cut is None or cut[1] is None else cut[1]
        _raise(o, now, max(pace.rate, min(top, _recent(o.successes, now - EPOCH) / EPOCH)))
        if o.ceiling < math.inf:
            o.ceiling = max(o.ceiling, pace.rate)
    elif pace.rate is not None and o.penalty_from > pace.rate:
        # the first answer through after a penalty: the limiter is open again, at the rate
        # that got through before it (a slow start from the halved probe rate took seconds
        # to get back: 2.1x the ideal on HAProxy's stick table)
        _raise(o, now, o.penalty_from)
        # and no faster for long: past that rate, a limiter that punishes knocking is probed
        # additively only (a slow start from a refuted ceiling overshot it by half, and its
        # penalty came back every other second)
        o.ceiling = o.penalty_from
        o.penalty_from = 0.0
        o.punishes = True
    elif pace.rate is not None:
        # per success: below the measured admitted rate about x1.5 a second (half a
        # request per success), above it PROBE_GAIN req/s a second
        rate = pace.rate
        o.unthrottled += 1
        if (
            rate >= o.ceiling
            and now - o.last_throttle >= EPOCH
            and o.unthrottled >= REFUTE_EVIDENCE
            and not o.punishes
        ):
            # a whole EPOCH without a throttle at or above the measured admitted rate: no
            # longer the limit (the others of a fleet are done): slow start again
            o.ceiling = math.inf
        if rate < o.ceiling:
            # (an outage's release: more gently past what the origin served before it)
            step = release_step(o, now, rate)
            _raise(o, now, rate + (0.5 if step is None else min(0.5, step)))
        elif o.unthrottled > o.hold:
            _raise(o, now, rate + PROBE_GAIN / rate)
        else:
            return  # held at the measured rate
        if rate >= o.measured:
            o.probed += 1  # a step past what the last cut measured (see noted)
