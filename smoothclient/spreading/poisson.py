"""
About N events a day, at random, optionally inside a time-of-day window.

Following docs/window-math.md section 7.
"""

from __future__ import annotations

import inspect
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import time as dtime
from typing import Any, Literal
from zoneinfo import ZoneInfo

from .._validate import function, seconds
from ..engine.backoff import sample_backoff
from ._aio import refuse_generators, sleep_unless

log = logging.getLogger("smoothclient.schedule")

__all__ = ["PoissonScheduler", "TimeWindow", "poisson_gap"]


@dataclass(frozen=True)
class TimeWindow:
    """
    A daily time-of-day window in a time zone, e.g. 09:00-18:00 Europe/Paris.

    ``start > end`` crosses midnight (22:00-06:00).  DST is handled by evaluating wall-clock
    times in the zone: a window's length follows the day's real length.
    """

    start: dtime
    end: dtime
    tz: ZoneInfo | str = "UTC"

    def __post_init__(self) -> None:
        """Normalise the zone and validate."""
        if isinstance(self.tz, str):
            object.__setattr__(self, "tz", ZoneInfo(self.tz))
        if self.start == self.end:
            msg = "a window needs start != end (use no window for all day)"
            raise ValueError(msg)

    @property
    def zone(self) -> ZoneInfo:
        """The time zone."""
        assert isinstance(self.tz, ZoneInfo)
        return self.tz

    def _occurrence(self, day: datetime) -> tuple[datetime, datetime]:
        """The window that opens on ``day``'s date (local), as aware datetimes."""
        opens = datetime.combine(day.date(), self.start, self.zone)
        close_day = day.date() + timedelta(days=1 if self.end <= self.start else 0)
        closes = datetime.combine(close_day, self.end, self.zone)
        return opens, closes

    def current(self, when: datetime) -> tuple[datetime, datetime] | None:
        """The occurrence containing ``when``, if the window is open then."""
        local = when.astimezone(self.zone)
        instant = when.timestamp()  # compare instants: wall times repeat or vanish around DST
        for delta in (-1, 0):
            opens, closes = self._occurrence(local + timedelta(days=delta))
            if opens.timestamp() <= instant < closes.timestamp():
                return opens, closes
        return None

    def contains(self, when: datetime) -> bool:
        """Whether the window is open at ``when``."""
        return self.current(when) is not None

    def next_open(self, when: datetime) -> tuple[datetime, datetime]:
        """The occurrence that contains ``when`` or opens next after it."""
        found = self.current(when)
        if found is not None:
            return found
        local = when.astimezone(self.zone)
        for delta in range(3):
            opens, closes = self._occurrence(local + timedelta(days=delta))
            if opens.timestamp() > when.timestamp():
                return opens, closes
        msg = "no opening found"  # pragma: no cover - a daily window always reopens
        raise RuntimeError(msg)

    def open_seconds(self, day: datetime) -> float:
        """Length of the occurrence opening on ``day``, in seconds (DST included)."""
        opens, closes = self._occurrence(day.astimezone(self.zone))
        return closes.timestamp() - opens.timestamp()


# --------------------------------------------------------------------------- Poisson scheduler


@dataclass
class _Stats:
    events: int = 0
    failures: int = 0
    last_gap: float = 0.0


class PoissonScheduler:
    """
    Run ``task`` about ``events_per_day`` times a day (or at ``rate`` per second), at random.

    Gaps are exponential, so events never line up with other schedulers'.  With a ``window``,
    events happen only inside it: ``mode="scale"`` (default) scales the rate to the window's
    length so the daily target holds with no burst at opening; ``mode="defer"`` keeps the
    all-day rate and defers events that fall outside to the next opening.  A failing task backs
    off with decorrelated jitter.  Hooks: ``on_gap(seconds)``, ``on_outcome(ok, error)``,
    ``on_wait(seconds)``.  Run it with :meth:`start` (a thread) or :meth:`run_async`; stop with
    :meth:`stop`.  ``task`` must not be a generator function (``TypeError``: calling it would
    run none of its body).
    """

    def __init__(
        self,
        task: Callable[[], Any],
        *,
        events_per_day: float | None = None,
        rate: float | None = None,
        window: TimeWindow | None = None,
        mode: Literal["scale", "defer"] = "scale",
        backoff_initial: float = 1.0,
        backoff_max: float = 300.0,
        on_gap: Callable[[float], None] | None = None,
        on_outcome: Callable[[bool, BaseException | None], None] | None = None,
        on_wait: Callable[[float], None] | None = None,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], Any] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        """Configure; nothing runs until :meth:`start` or :meth:`run_async`."""
        if (events_per_day is None) == (rate is None):
            msg = "give exactly one of events_per_day and rate"
            raise ValueError(msg)
        given = rate if rate is not None else events_per_day
        if isinstance(given, bool) or not isinstance(given, int | float):
            msg = f"events_per_day or rate must be a number, not {type(given).__name__}"
            raise TypeError(msg)
        try:
            per_second = float(given) if rate is not None else given / 86400.0
        except OverflowError:  # an int of hundreds of digits
            per_second = math.inf
        if not 0 < per_second < math.inf:
            msg = f"the rate must be a finite number > 0, got {per_second!r} per second"
            raise ValueError(msg)
        if mode not in ("scale", "defer"):
            msg = f"mode must be 'scale' or 'defer', got {mode!r}"
            raise ValueError(msg)
        function("task", task, "doing the work")
        function("wall", wall, "returning epoch seconds")
        function("sleep", sleep, "taking seconds")
        for hook, value in (("on_gap", on_gap), ("on_outcome", on_outcome), ("on_wait", on_wait)):
            function(hook, value, "(a hook)", optional=True)
        self.task = task
        refuse_generators(task, "task", "a function (sync, or async for run_async) doing the work")
        self.rate = per_second
        self.window = window
        self.mode = mode
        self.backoff = (
            seconds("backoff_initial", backoff_initial),
            seconds("backoff_max", backoff_max),
        )
        self.on_gap, self.on_outcome, self.on_wait = on_gap, on_outcome, on_wait
        self.wall, self.sleep = wall, sleep
        self.rng = rng or random.Random()
        self.stats = _Stats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous_backoff: float | None = None

    def next_event(self, after: float) -> float:
        """The next event time (epoch seconds) after ``after``: pure but for the RNG."""
        if self.window is None:
            return after + self.rng.expovariate(self.rate)
        if self.mode == "defer":
            when = after + self.rng.expovariate(self.rate)
            opens, _ = self.window.next_open(self._dt(when))
            return max(when, opens.timestamp())
        return self._scaled(after)

    def _dt(self, epoch: float) -> datetime:
        return datetime.fromtimestamp(epoch, self.window.zone if self.window else None)

    def _scaled(self, after: float) -> float:
        """Walk ``Exp(rate * 86400 / open seconds)`` of *open* time forward from ``after``."""
        assert self.window is not None
        t = after
        opens, closes = self.window.next_open(self._dt(t))
        length = self.window.open_seconds(opens)
        need = self.rng.expovariate(self.rate * 86400.0 / length)
        while True:
            t = max(t, opens.timestamp())
            available = closes.timestamp() - t
            if need <= available:
                return t + need
            need -= available
            # carry the remainder into the next occurrence, rescaled to its length
            opens, closes = self.window.next_open(self._dt(closes.timestamp()))
            new_length = self.window.open_seconds(opens)
            need *= new_length / length
            length = new_length

    def _run_once(self) -> float:
        """Run the task once; return the delay before the next attempt."""
        try:
            self.task()
        except Exception as exc:
            return self._failed(exc)
        return self._succeeded()

    async def _run_once_async(self) -> float:
        """:meth:`_run_once` for :meth:`run_async`: a coroutine task is awaited."""
        try:
            result = self.task()
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            return self._failed(exc)
        return self._succeeded()

    def _failed(self, exc: Exception) -> float:
        """Count a failure; return the decorrelated backoff before the next attempt."""
        self.stats.failures += 1
        if self.on_outcome:
            self.on_outcome(False, exc)
        lo, hi = self.backoff
        delay = sample_backoff(
            "decorrelated",
            1,
            initial=lo,
            maximum=hi,
            rng=self.rng,
            previous=self._previous_backoff,
        )
        self._previous_backoff = delay
        return delay

    def _succeeded(self) -> float:
        self.stats.events += 1
        self._previous_backoff = None
        if self.on_outcome:
            self.on_outcome(True, None)
        return 0.0

    def _plan_next(self, now: float, backoff: float) -> float:
        when = self.next_event(now + backoff)
        gap = when - now
        self.stats.last_gap = gap
        if self.on_gap:
            self.on_gap(gap)
        if self.on_wait:
            self.on_wait(gap)
        return gap

    def run(self, *, max_events: int | None = None) -> None:
        """Run in this thread until :meth:`stop` (or ``max_events`` attempts)."""
        gap = self._plan_next(self.wall(), 0.0)
        count = 0
        while not self._stop.is_set() and (max_events is None or count < max_events):
            if self.sleep is time.sleep:
                self._stop.wait(gap)  # wakes at once on stop()
            else:
                self.sleep(gap)
            if self._stop.is_set():
                return
            backoff = self._run_once()
            count += 1
            gap = self._plan_next(self.wall(), backoff)

    def start(self) -> None:
        """Run in a daemon thread."""
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="smoothclient-poisson", daemon=True)
        self._thread.start()

    async def run_async(self, *, max_events: int | None = None) -> None:
        """
        Run on the current event loop until :meth:`stop` (or cancelled).

        ``task`` may be a coroutine function here (it is awaited); a sync one runs on the loop.
        :meth:`stop` is noticed within a second, even in the middle of a long gap.
        """
        gap = self._plan_next(self.wall(), 0.0)
        count = 0
        while not self._stop.is_set() and (max_events is None or count < max_events):
            await sleep_unless(self._stop, gap)
            if self._stop.is_set():
                return
            backoff = await self._run_once_async()
            count += 1
            gap = self._plan_next(self.wall(), backoff)

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop after the current task, if any; wait for the thread runner to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


def poisson_gap(rate: float, rng: random.Random) -> float:
    """Return an exponential gap for a Poisson process of ``rate`` events per second."""
    if not rate > 0 or not math.isfinite(rate):
        msg = f"rate must be a finite number > 0, got {rate!r}"
        raise ValueError(msg)
    return rng.expovariate(rate)
