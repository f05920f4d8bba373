"""
Outages: an origin that fails nearly everything gets probes, not retries, and reopens gently.

Pure functions of an origin's :class:`~smoothclient.pacing.state.OriginState` and ``now``, like
the rest of the model: a store applies them atomically (see ``docs/outages.md``).

The law, in three parts:

1. **Down.**  :data:`DOWN_AFTER` failures in a row (500, 502, 503, 504, refused
   connections, timeouts) with no success between them, over at least :data:`MIN_SPAN`,
   and a run that what the origin answered just before makes a chance of 1 in 10**4
   (:func:`is_news`), or a 503 with ``Retry-After``, mark the origin down.  Such a run is
   rare when an origin fails only part of its requests, so a brownout keeps its retries; an
   origin that served well and died trips it in a quarter second, any other within one.
2. **Probes, not retries.**  While down, the origin's gate is closed: calls that still have
   deadline left wait without sending (first attempts and retries alike), and one request at
   a time goes as a probe when the gate opens.  A failed probe closes it again for a longer,
   jittered gap (from :data:`PROBE_GAP` to :data:`MAX_PROBE_GAP`; never before a gate a
   ``Retry-After`` closed), so a fleet sharing a store
   sends one probe per gap and a fleet sharing nothing sends a few.  A call whose deadline
   falls before the next probe gives up without sending, saying why.
3. **Reopen gently.**  The first answer that is not a failure reopens the origin.  What waited
   is then released at the rate the origin served just before it failed (a learned rate the
   controller grows per success, additively past that rate: :func:`release_step`), and for
   :data:`RELEASE` seconds a 5xx is also a throttle that cuts that rate once it is above the
   rate served before: a recovering server that answers its overload with 503s slows the
   release down instead of being buried by it, and a brownout's 503s do not cut it below what
   the origin served.
4. **In flight, bounded.**  A server that queues its overload answers a release too fast with
   nothing but slower successes until its queue times out, a second late.  So the release
   also keeps at most :data:`FLIGHT_GAIN` times the requests the origin had in flight before
   (Little's law: the rate it served times its quickest answer; at least :data:`MIN_FLIGHT`)
   in flight, as a rate: that many over how long its answers take now (see :func:`timed`).
   Answers that take longer than the quickest mean a queue is building, and the rate falls
   with them (see ``docs/outages.md`` section 3).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

from .state import HORIZON, PROBE_GAP, OriginState, Outage, Settings

__all__ = [
    "DOWN_AFTER",
    "Outage",
    "answered",
    "down_for",
    "failed",
    "failing_share",
    "is_failure",
    "is_news",
    "release_step",
    "run_span",
    "settled",
    "taken",
    "timed",
]

#: Failures in a row (no success between) that mark an origin down.
DOWN_AFTER = 12
#: ... over at least this long (seconds): a herd's answers, all failed within a few
#: milliseconds, say nothing of how long the origin fails.
MIN_SPAN = 0.25
#: ... and over at most this long, whatever the origin served before (see :func:`run_span`).
MAX_SPAN = 1.0
#: How unlikely (as ``-ln`` of the chance) a span without any success must be at the success
#: rate the origin had before the run: 9.2 is a chance of 10**-4 (see :func:`run_span`).
RUN_EVIDENCE = 9.2
#: The widest gap between probes: an origin back is found within about this long.
MAX_PROBE_GAP = 1.0
#: After reopening, a 5xx counts as a throttle (it cuts the release rate) for this long.
RELEASE = 10.0
#: The release ends (the pace drops) once it has held nobody back and cut nothing this long.
SETTLE = 2.0
#: The release keeps in flight at most this many times what the origin had in flight before
#: the outage (the rate it served times its quickest answer): twice, as BBR keeps twice the
#: bandwidth-delay product, room for a backlog and a queue at the origin of as much again.
FLIGHT_GAIN = 2.0
#: ... and at least this many requests a process: a quick origin's handful in flight bounds
#: nothing (its answers' times are the client's own scheduling as much as the server's, and
#: each process of a fleet that shares a store schedules its own: held to one process's
#: handful, a fleet of four through Redis released at the rate it was offered, never faster,
#: and some of its releases stalled at the floor).
MIN_FLIGHT = 4.0
#: Past the rate the origin served before it failed, a release grows by this share of that
#: rate a second, additively (see :func:`release_step`) ...
RELEASE_GAIN = 0.2
#: ... and by at least this many requests a second each second.
MIN_RELEASE_GAIN = 1.0
#: Each answer moves the smoothed time answers take by this share of the difference.
SMOOTHING = 0.25
#: Failures (a second's, decayed) below which :func:`failing_share` says nothing.
EPISODE_EVIDENCE = 4.0
#: What a second's failures spread evenly over it count for, decayed (see :func:`failed`).
_DECAYED = 1.0 - math.exp(-1.0)
#: Statuses that say the origin failed the request (not a rate limit, not the client's fault).
FAILURE_STATUSES = frozenset({500, 502, 503, 504})
_GOLDEN = 0.6180339887498949


def is_failure(status: int) -> bool:
    """Whether an answer is an outage's evidence: a 500, 502, 503 or 504."""
    return status in FAILURE_STATUSES


def _jittered(gap: float, now: float) -> float:
    """``gap`` scaled into [0.5, 1] by a value drawn from ``now`` (pure; no RNG to inject)."""
    draw = math.modf(abs(now) * 1000.0 * _GOLDEN)[0]
    return gap * (0.5 + 0.5 * draw)


def failing_share(o: OriginState, now: float) -> float:
    """
    The share of the origin's answers in the last second that were failures.

    0 on fewer than :data:`EPISODE_EVIDENCE` failures: a client's one unlucky answer is no
    episode, and one failure in two answers of a quiet client says nothing of the origin.
    """
    fails = o.failing * math.exp(min(0.0, o.failing_at - now))
    if fails < EPISODE_EVIDENCE:
        return 0.0
    ok = len(o.successes) - bisect.bisect_left(o.successes, now - 1.0)
    return fails / (fails + ok)


def down_for(now: float) -> Callable[[OriginState], float | None]:
    """A look at a state: how long its origin has been down at ``now`` (``None``: it is not)."""

    def look(o: OriginState) -> float | None:
        since = o.outage.down_since
        return None if since is None else max(0.0, now - since)

    return look


def failed(o: OriginState, *, now: float, closed: bool = False) -> bool:
    """
    Note a failure (an :func:`is_failure` status or a transport failure).

    ``closed``: the answer closed the origin for a while (a 503's ``Retry-After``): it is down
    at once, so that what waits behind that gate is released gently when it opens.

    Returns whether it is, for the release's rate controller, a throttle: a 5xx while what
    waited out an outage is being released (see :data:`RELEASE`).
    """
    b = o.outage
    before = o.failing * math.exp(min(0.0, o.failing_at - now))  # (a second's, before this)
    o.failing, o.failing_at = before + 1.0, now
    if b.fails and o.successes and o.successes[-1] >= b.first_fail:
        b.fails = 0  # a success since: a new run
    if not b.fails:
        b.first_fail = now
        if b.down_since is None and now >= b.release_until:  # (down or releasing: it stands)
            # what it answered: its successes, and the failures between them (a brownout's
            # calls need both; released at its successes alone, a process that tripped in a
            # brownout served a third of its calls for ten seconds)
            b.served = sum(1 for t in o.successes if t >= now - 1.0) + before
    b.fails += 1
    if b.down_since is not None:  # a probe failed: the next goes later
        b.gap = min(MAX_PROBE_GAP, b.gap * 1.5)
        _close(o, now + _jittered(b.gap, now))
        return False
    span = now - b.first_fail
    if is_news(o, now) or closed:
        b.down_since, b.gap, b.probes = now, PROBE_GAP, 0
        if span > 0 and b.served < 1:  # an origin that never served: its failures' rate
            b.served = b.fails / span
        o.gate = max(o.gate, now + _jittered(b.gap, now))
        return False
    # a throttle only while the release sends faster than the origin served before: at or
    # below that rate its 5xx are not this client's doing (a brownout's cut it to the floor)
    rate = o.pace.rate
    return now < b.release_until and rate is not None and rate > 1.1 * b.served


def is_news(o: OriginState, now: float) -> bool:
    """
    Whether the run of failures under way marks the origin down at ``now``.

    :data:`DOWN_AFTER` failures over at least :data:`MIN_SPAN`, and a run that the origin's
    answers in the second before it began make a chance of ``exp(-RUN_EVIDENCE)`` (1 in
    10**4) or less: by its length (:func:`run_span`), or by its count at the share of those
    answers that failed (a dozen in a row is news from an origin that failed none, not from
    one failing two in three).  Counting to a dozen alone is not enough: in a brownout that
    fails more than half of what is sent (half of what the server admits, and all it sheds
    past its capacity) a process sees a dozen in a row every few seconds, and a fleet sharing
    a store, with four times the answers, more often still (``benchmarks/outage.py``'s
    brownout: each false trip held a process's calls behind probes for up to a second).
    """
    b = o.outage
    span = now - b.first_fail
    if b.fails < DOWN_AFTER or span < MIN_SPAN:
        return False
    if span >= run_span(o):
        return True
    ok = _served_before(o)
    # the failures of the second before the run: its decayed count (``served`` less the
    # successes) undoes the decay of failures spread over that second; then their share,
    # leaning to failure (two more assumed)
    failed = max(0.0, b.served - ok) / _DECAYED
    failing = (failed + 2.0) / (failed + ok + 2.0)
    return b.fails * -math.log(failing) >= RUN_EVIDENCE


def run_span(o: OriginState) -> float:
    """
    How long a run of failures lasts before its length alone is news (MIN_SPAN to MAX_SPAN).

    Long enough that, at the rate the origin's successes came in the second before the run
    began, a span without one has a chance of ``exp(-RUN_EVIDENCE)``; :data:`MAX_SPAN` when
    none came (a new client, a quiet one, an origin already failing).
    """
    before = _served_before(o)
    if before <= 0:
        return MAX_SPAN
    return min(MAX_SPAN, max(MIN_SPAN, RUN_EVIDENCE / before))


def _served_before(o: OriginState) -> int:
    """The successes in the second before the run of failures under way began."""
    start, successes = o.outage.first_fail, o.successes
    return bisect.bisect_left(successes, start) - bisect.bisect_left(successes, start - 1.0)


def _close(o: OriginState, until: float) -> None:
    """Close the gate until ``until`` (never shortening it), noting that this rule did."""
    if until > o.gate:
        o.gate = o.outage.closed_until = until


def taken(o: OriginState, at: float) -> None:
    """A request was admitted at ``at`` while the origin is down: it is the probe."""
    b = o.outage
    b.probes += 1
    _close(o, at + b.gap)  # the others wait for its answer (or the next probe)


def answered(o: OriginState, s: Settings, now: float) -> None:
    """
    An answer that is not a failure: the run ends; an origin down reopens.

    What waited is released at the rate served before the outage (at least the pacer's
    floor), which the rate controller then grows per success; an origin whose pace the server
    states keeps that pace.
    """
    b = o.outage
    b.fails = 0
    if b.down_since is None:
        return
    b.down_since = None
    b.gap = PROBE_GAP
    b.release_until = now + RELEASE
    o.answer_time, o.unbounded = None, 0.0  # (timed: this release's answers)
    if o.gate <= b.closed_until:  # (a gate a server's Retry-After closed stays closed)
        o.gate = min(o.gate, now)
    pace = o.pace
    if pace.rate is None or o.learned:  # (a rate cut during the outage measured nothing)
        # counted again now: a fleet's processes write their plain successes with their next
        # step, so the second before the failures holds more of them now than it did then
        start = bisect.bisect_left(o.successes, b.first_fail - 1.0)
        served = bisect.bisect_right(o.successes, b.first_fail) - start
        pace.rate = max(s.learned_floor, b.served, served)
        pace.burst = 1.0
        pace.tat = max(pace.tat, now)
        o.learned = True
        o.ceiling = math.inf  # a slow start: no measured ceiling yet
        o.cut = None
        # dated a second back, a release's first cut measures a second reaching into the
        # outage, and cuts deeper than what got through since the reopening (110 req/s to
        # 40 where 80 had got through).  Measured from the reopening, a fleet's busiest
        # second after an outage rose from 1.0-1.1 to 1.1-1.2 times the origin's capacity
        # (benchmarks/outage.py): the deeper first cut stands, as TCP halves its window when
        # a slow start ends in a loss
        o.last_throttle = max(o.last_throttle, now - 1.0)


def release_step(o: OriginState, now: float, rate: float) -> float | None:
    """
    How much a success raises a release's rate past what the origin served before it failed.

    ``None``: no release, or still below that rate (the slow start's step stands).  Above it
    the release grows by :data:`RELEASE_GAIN` of that rate a second (at least
    :data:`MIN_RELEASE_GAIN`: an origin that served a request or two a second, or none, grows
    as a slow start does), a share of it a success at ``rate`` successes a second, not by half
    a request a success (x1.5 a second): what waited only needs more than the origin served
    to drain, and a slow start found the origin's capacity by overshooting it.  Each process
    of a fleet that shares nothing finds it by its own 503s, a quarter of a second or more
    after the origin's burst ran out, so the fleet's busiest second after an outage held
    1.13-1.16 times the origin's capacity (``benchmarks/outage.py``, hard and refused,
    medians of 3); at this gain, 0.97-1.01.  Draining is slower, within the calls'
    deadlines: an outage shorter than the deadline is waited out at the rate served before,
    and every rate above it drains.
    """
    b = o.outage
    if now >= b.release_until or rate <= b.served:
        return None
    return max(RELEASE_GAIN * b.served, MIN_RELEASE_GAIN) / rate


def settled(o: OriginState, now: float) -> None:
    """
    A success while what waited out an outage is released: the release may end.

    Once the release rate has held no request back (no slot owed ahead, nobody waiting) and
    nothing was cut for :data:`SETTLE` seconds, the origin is served as before the outage,
    unpaced: a rate kept longer held a recovered origin below what its callers offer.
    """
    b = o.outage
    if (
        now - (b.release_until - RELEASE) >= SETTLE
        and now - o.last_throttle >= SETTLE
        and o.pace.tat <= now
        and not o.waiting
    ):
        b.release_until = -1e18
        if o.learned:
            o.learned = False
            o.pace.rate = None
            o.cut = None
            o.ceiling = math.inf


def timed(
    o: OriginState, s: Settings, now: float, sent_at: float | None, *, ok: bool, cut: bool
) -> None:
    """
    An answer while what waited out an outage is released: keep the release's flight bounded.

    Little's law: requests in flight are the rate times how long each takes.  Before the
    outage the origin had the rate it served times its quickest answer in flight; the release
    keeps at most :data:`FLIGHT_GAIN` times that (at least :data:`MIN_FLIGHT`), as TCP keeps
    a window: it sends as fast as answers come back, plus what the requests in flight lack
    of the window over the time an answer takes (a window kept as a rate: the requests
    waiting hold slots of it).  Against an origin that queues its overload, a release too fast
    fills the window, not the queue, so the queue stays short.  And answers that take longer
    than the quickest mean a queue is building all the same (a fleet's windows add up): the
    window shrinks with them, below twice the quickest (the gradient limiter of Netflix's
    concurrency-limits; TCP Vegas reads the same signal).  The window grows with what the
    release gets through, so an origin with more room than before lets it grow.

    A failure (``ok`` False) counts only when it took longer than answers do: a 503 from a
    queue that timed out says how long the queue is, one turned away at once says nothing of
    it.  ``cut``: the answer was a throttle, so the rate controller may have cut the rate.
    """
    if sent_at is None or now < sent_at:
        return
    took = now - sent_at
    if ok and (o.latency is None or took < o.latency):
        o.latency = took  # (the least a success took: see .crowd)
    smoothed = o.answer_time
    if smoothed is None:
        if not ok:
            return
        smoothed = took
    elif ok or took > smoothed:
        smoothed += SMOOTHING * (took - smoothed)
    o.answer_time = smoothed
    rate, quickest = o.pace.rate, o.latency
    if rate is None or not o.learned or quickest is None or smoothed <= 0:
        return
    answers = len(o.successes) - bisect.bisect_left(o.successes, now - 1.0)
    window = FLIGHT_GAIN * max(o.outage.served, answers) * quickest
    floor = MIN_FLIGHT * max(1, o.processes)  # (each process's own scheduling: see MIN_FLIGHT)
    window = max(floor, window * min(1.0, FLIGHT_GAIN * quickest / smoothed))
    # the gap closed over two answers' times: what is sent now shows in the answers one later
    bound = max(s.learned_floor, answers + (window - o.in_flight) / (2 * smoothed))
    if rate >= o.unbounded or cut:
        # the controller grew it past what the bound last held back, or may have cut it (a
        # throttle): its rate stands.  A failure that cut nothing leaves the bound free to
        # give back what it held: a brownout's 503s during a release, each one locking in the
        # bound a backlog of slow answers had set, held 200 calls at 0.5-1 req/s for seconds
        # after the answers came quick again, past the calls' 10 s deadline
        o.unbounded = rate
    pace = o.pace
    old = pace.interval
    pace.rate = min(o.unbounded, bound)
    if old > pace.interval and old > 2 * HORIZON and pace.tat > now:
        # given back: the slot owed at the old spacing comes sooner too (as the controller's
        # raise moves it: a stalled answer dropped the rate to the floor, and the slot then
        # taken held the rest two seconds); one fixed for a waiting request is never that far
        pace.tat -= old - pace.interval
