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
window by one every window's worth (additive increase, as TCP's congestion window grows); a
quiet spell without throttles drops it.  Admission (:mod:`.state`) holds a request while the
window is full, and lets one go when the window has heard nothing for a few service times
(counts a fleet's process never wrote back must not hold an origin for good).

A concurrency limit never turns away a request that is alone: one that is, or one more
throttle with the window already at one, shows a rate's limit.  The window goes then, and
for a quiet spell every throttle is the rate controller's, which measures its cut knowing
the throttles the window took.  So a rate limiter on a slow origin (a remote server, 60 ms a
round trip) is paced as before, after a few throttles more.  How long a throttle took does
not tell the two apart: a herd's own requests crowd the client, and its throttles came back
as late as the server's successes.

Not on a shared store yet: the requests in flight it counts are each process's, written
with its next step, so the others' counts lag the window they would have to fill (a fleet of
three through Redis took up to 10 s for 1.2 s of work; it keeps the rate controller).

Like :mod:`.state`, nothing here locks, sleeps or reads a clock.
"""

from __future__ import annotations

import math

from .state import OriginState, Settings

__all__ = ["SERVED", "crowded", "served"]
# (its fields are OriginState's: latency, crowd_window, crowded_at, crowd_moved, lone_at)

#: An origin whose quickest success took less than this (seconds) serves quickly: the rate
#: controller's EPOCH holds many of its answers, and measures a concurrency limit's rate too.
SERVED = 0.02


def served(o: OriginState, s: Settings, now: float, sent_at: float | None) -> None:
    """A success: the quickest yet?  And the window widened (or dropped after a quiet spell)."""
    if sent_at is not None and now >= sent_at and (o.latency is None or now - sent_at < o.latency):
        o.latency = now - sent_at  # (the least: a crowded client only makes them take longer)
    window = o.crowd_window
    if window == math.inf:
        return
    o.crowd_moved = now
    if now - o.crowded_at > s.quiet:
        o.crowd_window = math.inf  # no crowd's throttle for a quiet spell: no longer a crowd
    elif o.in_flight + o.waiting + 1 >= window:
        o.crowd_window = window + 1 / window  # it was full: one more every window's worth


def crowded(o: OriginState, s: Settings, now: float, counted: bool) -> bool:
    """
    Whether a throttle is a concurrency limit's (its window then set); ``False``: the rate's.

    Called after the request stopped counting in flight: ``o.in_flight`` are the others.  A
    request not counted in flight (sent to a healthy origin, a herd's first wave) cannot tell
    how many others were: the window starts at one, and successes widen it.  A request turned
    away while nobody else was in flight says the limit is a rate's (a concurrency limit
    serves one request at least): the window goes, and none is set for a quiet spell.
    """
    if s.shared or o.latency is None or o.latency < SERVED:
        return False  # (a shared store's counts are each process's, written when it can)
    others = o.in_flight
    if counted and (not others or o.crowd_window <= 1):
        # a lone request turned away, or one more with the window already at one (it can do
        # no more): a rate's limit (a request not counted in flight tells neither)
        o.crowd_window, o.lone_at = math.inf, now
        return False
    if now - o.lone_at <= s.quiet:
        return False
    o.crowd_window = max(1.0, min(o.crowd_window, float(others)))
    o.crowded_at = o.crowd_moved = now
    return True
