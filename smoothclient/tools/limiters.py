"""
Server-side rate limiters of every common kind, and herds against them in virtual time.

The limiters are pure (``now`` is passed in) and answer each request with a status and the
headers of a chosen style, as the limiter libraries people deploy do:

- :class:`TokenBucket`: a token (or leaky) bucket, the GCRA: nginx ``limit_req``, Envoy, ours;
- :class:`FixedWindow`: ``limit`` per window, the window starting at the first hit after the
  last one ended (the ``limits`` library's in-memory fixed window); rejected hits count too;
- :class:`MovingWindow`: at most ``limit`` admitted hits in any ``window`` seconds (a log).

Header styles: ``"ietf"`` (``RateLimit`` / ``RateLimit-Policy``), ``"x"`` (``X-RateLimit-*``
with a fractional epoch reset and ``Retry-After`` on 429s, as slowapi sends), ``"github"``
(``X-RateLimit-*`` with a whole-second epoch reset and no window), ``"retry-after"``
(``Retry-After: N`` on 429s only) and ``"bare"`` (a bare 429).

:func:`run_herd` sends ``calls`` requests at once from ``procs`` clients that share nothing
(each with its own pacer) through the real :class:`~smoothclient.AsyncSmoothTransport`, on
trio's virtual clock: a herd that takes seconds of server time runs in milliseconds, the same
way every time.  The laws of the pacer are tested against every kind this way.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..pacing.gcra import Gcra

__all__ = [
    "STYLES",
    "Concurrency",
    "FixedWindow",
    "HerdResult",
    "Limiter",
    "MovingWindow",
    "Noisy",
    "Style",
    "TokenBucket",
    "run_herd",
]

Style = Literal["ietf", "x", "github", "retry-after", "bare"]
STYLES: tuple[Style, ...] = ("ietf", "x", "github", "retry-after", "bare")


@dataclass(frozen=True, slots=True)
class Verdict:
    """A limiter's answer: admitted or not, what is left, when more comes, its window."""

    admitted: bool
    remaining: int
    reset_in: float  # seconds until the quota grows again (the window ends, a token comes)
    retry_in: float  # seconds a rejected request should wait


class Limiter(Protocol):
    """A server-side limiter: ``hit(now)`` admits or rejects one request."""

    limit: int
    window: float

    def hit(self, now: float) -> Verdict:
        """Admit or reject one request arriving at ``now``."""

    def ideal(self, calls: int) -> float:
        """The least time ``calls`` requests sent at once can all be admitted in."""


@dataclass
class TokenBucket:
    """``limit`` tokens per ``window`` seconds, at most ``burst`` at once (a GCRA)."""

    limit: int
    window: float = 1.0
    burst: int = 1
    _gcra: Gcra = field(init=False)

    def __post_init__(self) -> None:
        """Start full."""
        self._gcra = Gcra(self.limit / self.window, self.burst)

    def hit(self, now: float) -> Verdict:
        """Take a token if there is one."""
        bucket = self._gcra
        admitted = bucket.earliest(now) <= now
        if admitted:
            bucket.take(now)
        wait = max(0.0, bucket.earliest(now) - now)
        return Verdict(admitted, max(0, math.floor(bucket.tokens(now))), wait, wait)

    def ideal(self, calls: int) -> float:
        """The burst at once, then one per interval."""
        return max(0, calls - self.burst) * self.window / self.limit


@dataclass
class Concurrency:
    """
    At most ``limit`` requests at a time, each served in ``service`` seconds (nginx ``limit_conn``).

    A request that finds ``limit`` others being served is turned away at once.  :func:`run_herd`
    holds an admitted request for ``service`` and then calls :meth:`done`.
    """

    limit: int
    service: float = 0.1
    window: float = 0.0  # no window: how fast it admits is limit / service
    busy: int = field(default=0, init=False)

    def hit(self, now: float) -> Verdict:
        """Serve it if a place is free."""
        admitted = self.busy < self.limit
        if admitted:
            self.busy += 1
        return Verdict(admitted, self.limit - self.busy, self.service, self.service)

    def done(self) -> None:
        """One request served: its place is free."""
        self.busy = max(0, self.busy - 1)

    def ideal(self, calls: int) -> float:
        """Waves of ``limit``, each served in ``service``."""
        return math.ceil(calls / self.limit) * self.service


def _retry_in(window: FixedWindow | MovingWindow, stated: float) -> float:
    """
    A window's ``Retry-After``: the stated reset, or slowapi's ``int(stated)`` (``truncated``).

    slowapi adds a second to the reset it states and truncates ``Retry-After``'s seconds, so
    its ``Retry-After`` comes after the true reset and up to a second before the stated one.
    """
    return float(math.floor(stated)) if window.truncated else stated


@dataclass
class FixedWindow:
    """``limit`` per window, starting at the first hit after the last window ended."""

    limit: int
    window: float = 1.0
    count_rejected: bool = True
    reset_bias: float = 0.0  # a server that states its reset this much late (slowapi: 1 s)
    truncated: bool = False  # its Retry-After's seconds truncated (slowapi's)
    _start: float = field(default=-math.inf, init=False)
    _count: int = field(default=0, init=False)

    def hit(self, now: float) -> Verdict:
        """Count the hit in the current window."""
        if now >= self._start + self.window:
            self._start, self._count = now, 0
        admitted = self._count < self.limit
        if admitted or self.count_rejected:
            self._count += 1
        reset = self._start + self.window - now
        stated = reset + self.reset_bias
        return Verdict(admitted, max(0, self.limit - self._count), stated, _retry_in(self, stated))

    def ideal(self, calls: int) -> float:
        """A full window at once, then a full one at each window's end."""
        return (math.ceil(calls / self.limit) - 1) * self.window


@dataclass
class MovingWindow:
    """At most ``limit`` admitted hits in any ``window`` seconds."""

    limit: int
    window: float = 1.0
    reset_bias: float = 0.0  # a server that states its reset this much late (slowapi: 1 s)
    truncated: bool = False  # its Retry-After's seconds truncated (slowapi's)
    _log: deque[float] = field(default_factory=deque, init=False)

    def hit(self, now: float) -> Verdict:
        """Admit the hit if fewer than ``limit`` were admitted in the last window."""
        log = self._log
        while log and log[0] <= now - self.window:
            log.popleft()
        admitted = len(log) < self.limit
        if admitted:
            log.append(now)
        reset = log[0] + self.window - now if log else 0.0
        stated = reset + self.reset_bias
        return Verdict(admitted, self.limit - len(log), stated, _retry_in(self, stated))

    def ideal(self, calls: int) -> float:
        """Like a fixed window when the first window's hits come at once."""
        return (math.ceil(calls / self.limit) - 1) * self.window


@dataclass
class PenaltyBox:
    """
    Over ``limit`` requests in the last ``window`` seconds, rejected: the rejected counted too.

    HAProxy's stick table (``http_req_rate``, as its docs show it for rate limiting) counts
    every request it sees, so a client that knocks while rejected keeps itself rejected.
    (HAProxy's counter weighs the last period in; a sliding log is the same law, exactly.)
    """

    limit: int
    window: float = 1.0
    _log: deque[float] = field(default_factory=deque, init=False)

    def hit(self, now: float) -> Verdict:
        """Count the hit; admit it if at most ``limit`` came in the last window, itself too."""
        log = self._log
        while log and log[0] <= now - self.window:
            log.popleft()
        log.append(now)
        return Verdict(len(log) <= self.limit, 0, self.window, self.window)

    def ideal(self, calls: int) -> float:
        """As a moving window's: ``limit`` at once, then ``limit`` each window."""
        return (math.ceil(calls / self.limit) - 1) * self.window


@dataclass
class Noisy:
    """No limit at all, but a share of requests answered 429 at random (say, a flaky proxy)."""

    share: float
    retry_in: float = 0.05
    seed: int = 0
    limit: int = 1_000_000
    window: float = 1.0
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        """Seed the coin."""
        self._rng = random.Random(self.seed)

    def hit(self, now: float) -> Verdict:
        """Toss the coin."""
        return Verdict(self._rng.random() >= self.share, self.limit, 0.0, self.retry_in)

    def ideal(self, calls: int) -> float:
        """Nothing to wait for."""
        return 0.0


def headers_for(
    limiter: Limiter,
    verdict: Verdict,
    style: Style,
    *,
    retry_after: float | None = None,
    wall: Callable[[], float] = time.time,
) -> list[tuple[str, str]]:
    """The headers a limiter library of ``style`` sends with ``verdict``."""
    epoch = wall()
    headers = [("Date", email.utils.formatdate(epoch, usegmt=True))]
    rejected = not verdict.admitted
    delay = verdict.retry_in
    if style == "ietf":
        headers += [
            ("RateLimit-Policy", f'"default";q={limiter.limit};w={math.ceil(limiter.window)}'),
            ("RateLimit", f'"default";r={verdict.remaining};t={math.ceil(verdict.reset_in)}'),
        ]
    elif style in ("x", "github"):
        reset = epoch + verdict.reset_in
        headers += [
            ("X-RateLimit-Limit", str(limiter.limit)),
            ("X-RateLimit-Remaining", str(verdict.remaining)),
            ("X-RateLimit-Reset", f"{reset:.3f}" if style == "x" else str(math.ceil(reset))),
        ]
    if rejected and style != "bare":  # whole seconds, rounded up, as most servers send it
        headers.append(
            ("Retry-After", f"{retry_after:g}" if retry_after else str(max(1, math.ceil(delay))))
        )
    return headers


@dataclass(frozen=True, slots=True)
class HerdResult:
    """What a herd saw: how long until every call succeeded, what the server answered."""

    elapsed: float
    ideal: float
    sent: int
    rejected: int
    failed: int
    calls: int
    first_wave: int

    @property
    def ratio(self) -> float:
        """Elapsed time over the ideal (1.0 is perfect)."""
        return self.elapsed / self.ideal if self.ideal > 0 else math.inf

    @property
    def extra_429s_per_call(self) -> float:
        """429s beyond the unavoidable first wave, per call."""
        return max(0, self.rejected - (self.calls - self.first_wave)) / self.calls


def run_herd(
    limiter: Limiter,
    style: Style,
    calls: int,
    *,
    procs: int = 1,
    rtt: float = 0.002,
    spread: float = 0.0,
    stagger: float = 0.0,
    proc_stagger: float = 0.0,
    service: float = 0.0,
    retry_after: float | None = None,
    policy: Any = None,
    seed: int = 0,
    timeout: float = 600.0,
) -> HerdResult:
    """
    Send ``calls`` requests at once from each of ``procs`` clients; all of it in virtual time.

    Needs httpx and trio (the test extras).  ``retry_after`` makes every 429 say exactly that.
    ``spread``: each answer takes up to this much longer on its way back (at random, seeded),
    so answers overtake each other; ``stagger``: each call starts up to this much later (at
    random, seeded), so sends and answers interleave.  Both as for a herd sent from threads.
    ``proc_stagger``: client ``i`` starts ``i * proc_stagger`` seconds late (the processes of a
    real fleet released together are milliseconds apart, and the first takes the whole burst).
    ``service``: a backend behind a rate limiter takes this long to serve what it admits, while
    the limiter refuses at once (a gateway in front of a slow application).
    """
    import httpx
    import trio
    import trio.testing

    from ..edges.httpx_transport import AsyncSmoothTransport
    from ..pacing.pacer import Pacer
    from ..policy import RetryPolicy

    chosen = policy or RetryPolicy(attempts=1000, timeout=timeout, max_retry_after=None)
    log: list[tuple[float, int]] = []
    start_wall = time.time()
    delays = random.Random(seed)

    async def handler(request: httpx.Request) -> httpx.Response:
        await trio.sleep(rtt / 2)
        now = trio.current_time()
        verdict = limiter.hit(now)
        log.append((now, 200 if verdict.admitted else 429))
        if verdict.admitted and isinstance(limiter, Concurrency):
            await trio.sleep(limiter.service)  # served: its place is taken meanwhile
            limiter.done()
        elif verdict.admitted and service:
            await trio.sleep(service)  # the backend serves it; refusals come at once
        headers = headers_for(
            limiter, verdict, style, retry_after=retry_after, wall=lambda: start_wall + now
        )
        await trio.sleep(rtt / 2 + (delays.uniform(0.0, spread) if spread else 0.0))
        # epoch values are read against the real wall clock: re-base them to "now"
        shift = time.time() - (start_wall + trio.current_time())
        return httpx.Response(
            200 if verdict.admitted else 429,
            headers=[_shifted(name, value, shift) for name, value in headers],
            content=b"{}",
        )

    done: list[float] = []
    failed = 0

    async def client(index: int) -> None:
        nonlocal failed
        if proc_stagger:
            await trio.sleep(index * proc_stagger)
        transport = AsyncSmoothTransport(
            httpx.MockTransport(handler),
            policy=chosen,
            pacer=Pacer(clock=trio.current_time),
            rng=random.Random(seed * 1000 + index),
            sleep=trio.sleep,
        )
        async with httpx.AsyncClient(transport=transport) as http:

            async def one(start: float) -> None:
                nonlocal failed
                if start:
                    await trio.sleep(start)
                try:
                    response = await http.get("http://limited.test/x")
                except Exception:
                    failed += 1
                    return
                if response.status_code != 200:
                    failed += 1
                done.append(trio.current_time())

            async with trio.open_nursery() as nursery:
                for _ in range(calls):
                    nursery.start_soon(one, delays.uniform(0.0, stagger) if stagger else 0.0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for index in range(procs):
                nursery.start_soon(client, index)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    total = calls * procs
    first = min(total, _first_wave(limiter))
    return HerdResult(
        elapsed=max(done, default=0.0),
        ideal=limiter.ideal(total) + rtt,
        sent=len(log),
        rejected=sum(1 for _, status in log if status == 429),
        failed=failed,
        calls=total,
        first_wave=first,
    )


def _first_wave(limiter: Limiter) -> int:
    burst = getattr(limiter, "burst", None)
    return int(burst) if burst is not None else limiter.limit


def _shifted(name: str, value: str, shift: float) -> tuple[str, str]:
    """Move an epoch reset or a Date by ``shift`` seconds (virtual time -> the wall clock)."""
    if name == "X-RateLimit-Reset":
        number = float(value) + shift
        return name, (f"{number:.3f}" if "." in value else str(math.ceil(number)))
    if name == "Date":
        parsed = email.utils.parsedate_to_datetime(value).timestamp()
        return name, email.utils.formatdate(parsed + shift, usegmt=True)
    return name, value
