"""
The crowd window: how many requests an origin takes at a time, for concurrency limits.

A concurrency limiter (nginx ``limit_conn``, Stripe's "concurrency" limits, a pool of workers
that turns away what finds them all busy) admits N requests at a time, whatever the rate: how
fast it admits is N over the time it takes to serve one.  Its throttles come back at once,
while the requests it admitted are still being served.  The rate controller
(:mod:`.controller`) reads those throttles as a rate exceeded and measures the rate over an
EPOCH: against a slow server, its herd's admitted requests have not come back yet, so it
measures almost nothing (one request a second against a limit of 50) and climbs back for
seconds.  A rate is the wrong model there: the number of requests in flight is the limit.

So on an origin that takes a while to serve any request (its quickest success took at least
:data:`SERVED`), a throttle that comes back while other requests are in flight sets a window
on the requests in flight, at most as many as the others were, and leaves the rate alone (the
rate controller still keeps its record: :func:`~.controller.noted`).  Successes widen the
window by one every window's worth (additive increase, as TCP's congestion window grows);
a quiet spell without throttles drops it.  Admission (:mod:`.state`) holds a request while the
window is full, and lets one go when the window has heard nothing for a few service times
(counts a fleet's process never wrote back must not hold an origin for good).

**Fleets that share nothing.**  The others of a fleet hold places this process cannot see: a
process that lost the first wave had all its requests turned away, its count in flight fell
to none while they came back, and the last of them was turned away "alone".  Read as a rate's
limit (below), the process was paced at one request a second and slow-started from there: a
fleet of three took 5x the ideal time.  A request turned away alone is a rate's limit only
when its throttle took about as long as a success (:data:`SLOW` of the quickest: a remote
server's round trip); turned away at once, the others hold every place, and the window goes
below one: one request every ``latency / window`` (the window's pace, on the GCRA mirror),
halved by each such throttle (:data:`SHRINK`) down to :data:`LEAST`, while throttles of
requests sent before the last cut change nothing (one cut per round trip, as TCP cuts once per
window).  The first success there (a place came free: the others are done, or one finished)
makes it a window of one again, and successes widen it from there.  Processes that hold places
keep them (a place freed by an answer is taken again by the next request) and the others
probe at their pace, so the limiter stays full while the fleet's work lasts.

A process whose very first request was turned away knows no service time yet: the rate
controller paces it (one a second) until its first success, which shows a slow origin; the
window then takes over from that learned rate (one place, the rate dropped).

A concurrency limit never turns away a request that is alone and slow to come back: one that
is, or one more slow throttle with the window already at one, shows a rate's limit.  The window
goes then, and for a quiet spell every throttle is the rate controller's, which measures its
cut knowing the throttles the window took.  So a rate limiter on a slow origin (a remote
server, 60 ms a round trip) is paced as before, after a few throttles more.  Only a request
sent after the last cut shows it: one sent before belongs to a round whose answer the cut
already took, and its lateness may be this client's own.  A fleet of twelve on one machine
sent its first wave at once; each process's throttles came back while its event loop was
busy, the last of them alone 95 ms after it was sent (105 ms a success), and the process read
a rate's limit: paced at a request a second for a quiet spell, it finished seconds after the
others (the fleet took 2.5-3.2x the ideal time, in 11 runs of 19).

Nor does it turn away, at once, the request that retakes a place a success of ours has just
freed (sent within :data:`RETAKE` of a service time after it, nothing else of ours in flight):
the place is ours again, unless another client took it in that moment.  A rate limiter in
front of a slow application (a gateway: its successes take the application's time, its
refusals come at once) looks like a full crowd, and there every retake is refused, since the
success spent what the rate allowed: nginx ``limit_req`` at 10 r/s before 30 ms answers
refused one request for each that got through.  :data:`RETAKES` retakes refused in a row,
with no knock refused between them (others of a fleet holding the places), show a rate's
limit, as a lone slow throttle does.  Only the first request after a freed place retakes it.

**Through a shared store** the window is the fleet's: ``o.in_flight`` is every process's
count summed (each as its process last wrote it), so the same rules set the window on the
fleet's requests in flight and admit against them.  Two things keep those counts fresh enough:
a success under a window is written at once, not deferred to the process's next step
(:func:`~.learning.can_wait`: deferred, a process that had finished its work held its places
until its count faded), and a request held by a full window asks again a quarter of a service
time later (:data:`ASK_AGAIN`, :func:`asks_again`), since each ask is a round trip.

Like :mod:`.state`, nothing here locks, sleeps or reads a clock.
"""

from __future__ import annotations

import math

from .controller import forget
from .state import OriginState, Settings

__all__ = [
    "ASK_AGAIN",
    "KNOCK_GAP",
    "LEAST",
    "PATIENCE",
    "REGROW",
    "RETAKE",
    "RETAKES",
    "SERVED",
    "SHRINK",
    "SLOW",
    "asks_again",
    "crowded",
    "served",
    "width",
]
# (its fields are OriginState's: latency, crowd_window, crowded_at, crowd_moved, lone_at, and
# the GCRA mirror's rate while the window is below one)

#: An origin whose quickest success took less than this (seconds) serves quickly: the rate
#: controller's EPOCH holds many of its answers, and measures a concurrency limit's rate too.
SERVED = 0.02
#: The least window: a process that holds no place still sends one request every
#: ``latency / LEAST`` (200 ms, at 100 ms a request), to find a place when one comes free.
#: The others of a fleet that shares nothing keep the places they hold while they have work,
#: so a process that holds none gets one when they are done, and finds out by its next
#: request: at a tenth (a second apart), a fleet of three whose two first processes were
#: done in 0.9 s left the third to find out 0.8 s later (2.1x the ideal in virtual time,
#: 1.4x at a half).  Each process that holds none knocks that often: against nginx
#: ``limit_conn``, a fleet of twelve had 0.18-0.53 requests turned away a call (0.06-0.27 at
#: a tenth), and a fleet of dozens that shares nothing is turned away more; one that shares a
#: store counts the fleet's places and sends nothing into a full window.
LEAST = 0.5
#: A throttle that finds this process holding no place multiplies a window below one by this.
SHRINK = 0.5
#: A window below one that has heard of no success for this long (seconds) knocks more slowly:
#: each request turned away halves it below :data:`LEAST`, down to one request every
#: :data:`KNOCK_GAP`.  A concurrency limit busy with others' work admits nobody's knock for a
#: while, but a rate limiter in front of a slow application is read as one too (its successes
#: take the application's time, its refusals come at once), and one that counts the requests
#: it refuses (HAProxy's stick table) stays shut while it is knocked on: at ``LEAST`` against
#: 30 ms successes, a herd knocked every 60 ms for a minute and 50 of its 60 calls failed
#: (in virtual time, ``smoothclient/tools/limiters.py``; HAProxy on a loaded machine did the same).
PATIENCE = 1.0
#: The longest a window below one waits between knocks once :data:`PATIENCE` ran out.
KNOCK_GAP = 0.5
#: A throttle that took this share of the quickest success or more came back as late as a
#: success (a remote server's round trip: a rate limiter's); sooner, the limiter turned it
#: away at once.  Three quarters, not a half: on a loaded machine a fleet's event loops took
#: 50 ms and more to read a 429 that nginx sent at once, and a fleet's process read the
#: others' full limit_conn as a rate's (6x20: 3.25x the ideal with a half, 2.45x with this).
SLOW = 0.75
#: A request sent within this share of a service time after a success left nothing in flight
#: retakes the place that success freed (see :func:`crowded`).
RETAKE = 0.5
#: Retakes turned away at once, in a row, that show a rate's limit, not a concurrency limit.
RETAKES = 2


#: A full window not cut for this many service times grows by one a success (doubling every
#: round trip, a slow start, as TCP restarts one after a quiet spell), not by one a window's
#: worth: the others of a fleet that held the places are done, and a process that grew by
#: one a window from one place took a second to fill five (the last of a fleet of three).
#: Not through a shared store, whose window counts the fleet's places (a fleet of twelve
#: through Redis went from 1.3-1.4x the ideal to 1.3-1.8x, 0.2 turned away a call).
REGROW = 4.0
#: Through a shared store, a request held by a full window asks again this share of a service
#: time later, and a process trusts its copy of the fleet's counts no longer: places free as
#: the fleet's answers come back, and each ask is a round trip.
ASK_AGAIN = 0.25


def asks_again(o: OriginState) -> float | None:
    """How soon a window's held request asks again through a shared store (``None``: no window)."""
    if o.crowd_window == math.inf or not o.latency:
        return None
    return ASK_AGAIN * o.latency


def _below_one(o: OriginState) -> bool:
    """Whether the window is below one: paced by the GCRA mirror (no learned rate, no quota)."""
    return (
        o.crowd_window != math.inf
        and not o.learned
        and o.pace.rate is not None
        and o.avail is None
        and bool(o.latency)
    )


def width(o: OriginState) -> float:
    """The window: how many requests at a time (below one: a share of one; ``inf``: none)."""
    if _below_one(o) and o.latency and o.pace.rate is not None:
        return o.pace.rate * o.latency
    return o.crowd_window


def _retook(o: OriginState, sent_at: float | None) -> bool:
    """Whether a request sent at ``sent_at`` retook the place the last success freed."""
    if sent_at is None or not o.latency:
        return False
    return o.freed_at <= sent_at <= o.freed_at + RETAKE * o.latency


def _least(o: OriginState, now: float) -> float:
    """The least window now: :data:`LEAST`, or less once no success came for :data:`PATIENCE`."""
    last = o.successes[-1] if o.successes else o.first_seen
    if now - last < PATIENCE or not o.latency:
        return LEAST
    return min(LEAST, o.latency / KNOCK_GAP)


def _set(o: OriginState, s: Settings, window: float, now: float) -> None:
    """
    Make the window ``window``.

    Below one, admission's window is one and the GCRA mirror spaces the requests by
    ``latency / window``, the next one interval from now (its first slot was free: a request
    sent right after a cut came back turned away, and cut again), at most ``max_gate`` apart
    (an origin that took 100 s to answer, or such a time read from a shared store, spaced
    them 200 s apart after one throttle).
    """
    pace = o.pace
    if window >= 1 or not o.latency:
        if _below_one(o):
            pace.rate = None
        o.crowd_window = max(1.0, window)
        return
    o.crowd_window = 1.0
    pace.rate = max(window / o.latency, 1.0 / s.max_gate)
    pace.burst = 1.0
    pace.tat = max(pace.tat, now + pace.interval)


def _take_over(o: OriginState, s: Settings, now: float) -> None:
    """
    The first success shows a slow origin paced by a rate learned from throttles alone.

    A process whose first request was turned away (others of a fleet held every place) knew no
    service time, and the rate controller paced it at a request a second: a concurrency
    limit's share is a window (one place: this success's), not that rate.
    """
    if not o.learned or o.punishes or now - o.lone_at <= s.quiet:
        return
    forget(o)
    o.ceiling = math.inf
    o.crowd_window = 1.0
    o.crowded_at = o.crowd_moved = now


def served(o: OriginState, s: Settings, now: float, sent_at: float | None) -> None:
    """A success: the quickest yet?  And the window widened (or dropped after a quiet spell)."""
    first = o.latency is None
    if sent_at is not None and now >= sent_at and (o.latency is None or now - sent_at < o.latency):
        o.latency = now - sent_at  # (the least: a crowded client only makes them take longer)
    if first and o.latency is not None and o.latency >= SERVED:
        _take_over(o, s, now)
    window = o.crowd_window
    if window == math.inf:
        return
    if _retook(o, sent_at):
        o.retakes_refused = 0
    if not o.in_flight:
        o.freed_at = now
    o.crowd_moved = now
    if now - o.crowded_at > s.quiet:
        _set(o, s, math.inf, now)  # no crowd's throttle for a quiet spell: no longer a crowd
    elif width(o) < 1:
        _set(o, s, 1.0, now)  # a place came free, and this process holds it
    elif o.in_flight + o.waiting + 2 > window:
        # it was full (no place for one more besides this one's, now free): one more every
        # window's worth (a window of 2.5 holds two: two in flight is full), or one more a
        # success after a quiet spell
        quiet = (
            not s.shared  # (a shared window counts the fleet's places: nobody holds them unseen)
            and o.latency is not None
            and now - o.crowded_at >= REGROW * o.latency
        )
        o.crowd_window = window + (1 if quiet else 1 / window)


def _a_rate(o: OriginState, s: Settings, now: float) -> bool:
    """A rate's limit shown: no window, none for a quiet spell; ``False``: the controller's."""
    _set(o, s, math.inf, now)
    o.lone_at = now
    return False


def crowded(
    o: OriginState, s: Settings, now: float, counted: bool, sent_at: float | None = None
) -> bool:
    """
    Whether a throttle is a concurrency limit's (its window then set); ``False``: the rate's.

    Called after the request stopped counting in flight: ``o.in_flight`` are the others.  A
    request not counted in flight (sent to a healthy origin, a herd's first wave) cannot tell
    how many others were: the window starts at one, and successes widen it; a window there
    already stays as it is (through a shared store, a process whose copy still showed the
    origin healthy, its requests not counted, cut the fleet's window of six to one again and
    again, and the fleet of twelve took a second to grow it back).  A request turned
    away while nobody else was in flight, its throttle as slow as a success (``sent_at``
    unknown: taken as slow), says the limit is a rate's (a concurrency limit serves one request
    at least): the window goes, and none is set for a quiet spell.  Turned away at once, alone,
    the others of a fleet hold every place: the window goes below one (see the module).
    """
    if o.latency is None or o.latency < SERVED:
        return False
    others = o.in_flight
    now_width = width(o)
    slow = sent_at is None or now - sent_at >= SLOW * o.latency
    fresh = sent_at is None or sent_at >= o.crowded_at  # sent after the last cut
    if counted and slow and fresh and (not others or now_width <= 1):
        # a lone request turned away, or one more with the window already at one (it can do
        # no more), as slow as a success: a rate's limit (a request not counted in flight
        # tells neither; nor does one sent before the last cut, see the module)
        return _a_rate(o, s, now)
    if now - o.lone_at <= s.quiet:
        return False
    if counted and not others and _retook(o, sent_at):
        # the place a success of ours had just freed, turned away at once: a concurrency
        # limit gives it back (unless another client took it in between); a rate's limit
        # that a success has just spent turns the next request away, each time
        o.retakes_refused += 1
        o.freed_at = -1e18  # (one retake a freed place: what follows it is not one)
        if o.retakes_refused >= RETAKES:
            o.retakes_refused = 0
            return _a_rate(o, s, now)
    else:
        # any other request turned away (a knock, one sent while others were out): the
        # others of a fleet hold the places, and the retakes turned away are not in a row
        o.retakes_refused = 0
    if not counted:  # it cannot tell how many others were: a window there stays
        window = 1.0 if now_width == math.inf else now_width
    elif others:
        window = min(now_width, float(others))
    elif fresh:
        window = max(_least(o, now), SHRINK * min(now_width, 1.0))  # others hold every place
    else:
        window = min(now_width, 1.0)  # this round's cut is taken
    _set(o, s, window, now)
    if fresh:
        o.crowded_at = now
    o.crowd_moved = now
    return True
