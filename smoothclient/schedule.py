"""
Spreading recurring and bulk work over time.

Stable offsets, bulk spreading, Poisson schedules inside time-of-day windows, and the paired
scheduler-reconciler (SEEDS.md sections 6-8).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import time as dtime
from typing import Any, Generic, Literal, TypeVar
from zoneinfo import ZoneInfo

from ._validate import positive_int, seconds
from .decorators import async_sleep
from .jitter import even_offsets, offset_for, sample_backoff

__all__ = [
    "Placement",
    "PoissonScheduler",
    "Reconciler",
    "SpreadResult",
    "TimeWindow",
    "next_run",
    "offset_for",
    "plan",
    "spread",
]

log = logging.getLogger("smoothclient.schedule")
T = TypeVar("T")
#: The async runners sleep in steps of at most this, so their ``stop()`` is seen within it.
STOP_POLL = 1.0
Placement = Literal["uniform", "hashed", "even"]


def next_run(
    key: str | bytes | int, period: float | timedelta, *, now: float | None = None
) -> float:
    """
    The next time (epoch seconds, >= ``now``) at which ``key``'s periodic job runs.

    Runs happen at ``offset_for(key, period) + k * period``: the same slot in every period for
    the same key, in every process, with keys spread evenly over the period.
    """
    p = seconds("period", period, allow_zero=False)
    current = time.time() if now is None else now
    offset = offset_for(key, p)
    k = math.ceil((current - offset) / p)
    return offset + k * p


# --------------------------------------------------------------------------- spread


def plan(
    count: int,
    window: float,
    placement: Placement = "uniform",
    *,
    keys: Sequence[str | bytes | int] | None = None,
    rate: float | None = None,
    rng: random.Random | None = None,
) -> list[float]:
    """
    Start offsets (seconds from now) for ``count`` items spread over ``window``.

    - ``uniform``: random, stratified: the window is cut in ``count`` equal strata and each item
      lands uniformly inside its own (randomly assigned) stratum, so each offset is uniform over
      the window yet the items never clump;
    - ``hashed``: ``offset_for(key, window)``, stable across runs and processes;
    - ``even``: exactly even spacing, in input order.

    ``rate`` (items per second) then pushes offsets later so no two start closer than
    ``1 / rate``.
    """
    w = seconds("window", window)
    if placement == "even":
        offsets = even_offsets(count, w)
    elif placement == "hashed":
        if keys is None or len(keys) != count:
            msg = "hashed placement needs one key per item"
            raise ValueError(msg)
        offsets = [offset_for(k, w) if w > 0 else 0.0 for k in keys]
    elif placement == "uniform":
        r = rng or random.Random()
        strata = list(range(count))
        r.shuffle(strata)
        step = w / count if count else 0.0
        offsets = [(s + r.random()) * step for s in strata]
    else:
        msg = f"placement must be uniform, hashed or even, got {placement!r}"
        raise ValueError(msg)
    if rate is not None:
        offsets = _cap_rate(offsets, rate)
    return offsets


def _cap_rate(offsets: list[float], rate: float) -> list[float]:
    if not rate > 0:
        msg = f"rate must be > 0, got {rate!r}"
        raise ValueError(msg)
    gap = 1.0 / rate
    order = sorted(range(len(offsets)), key=offsets.__getitem__)
    out = list(offsets)
    last = -math.inf
    for i in order:
        out[i] = max(out[i], last + gap)
        last = out[i]
    return out


@dataclass
class SpreadResult(Generic[T]):
    """Results in input order (``None`` where an item failed) and the errors by index."""

    results: list[T | None]
    errors: dict[int, BaseException] = field(default_factory=dict)
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        """Every item ran and none failed."""
        return not self.errors and not self.cancelled


class SpreadCancelled(Exception):
    """Recorded for the items a cancelled :func:`spread` never started."""


def spread(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    window: float | timedelta,
    placement: Placement = "uniform",
    key: Callable[[Any], str | bytes | int] | None = None,
    rate: float | None = None,
    concurrency: int = 8,
    progress: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
    rng: random.Random | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Any] | None = None,
) -> Any:
    """
    Run ``fn(item)`` once per item, the starts spread over ``window`` seconds.

    Sync functions run on a pool of ``concurrency`` threads; for an async ``fn`` this returns a
    coroutine that runs tasks (at most ``concurrency`` at once).  One failing item does not stop
    the rest: its exception is in ``result.errors``.  ``progress(done, total)`` is called after
    each item.  Setting ``cancel`` (sync), or cancelling the awaiting task (async), stops items
    not yet started.

    Returns:
        a :class:`SpreadResult` (or a coroutine of one, for async ``fn``).
    """
    todo = list(items)
    keys = [key(i) for i in todo] if key is not None else None
    if placement == "hashed" and keys is None:
        keys = [str(i) for i in todo]
    offsets = plan(len(todo), seconds("window", window), placement, keys=keys, rate=rate, rng=rng)
    workers = positive_int("concurrency", concurrency)
    if inspect.iscoroutinefunction(fn):
        return _aspread(fn, todo, offsets, workers, progress, clock, sleep or async_sleep)
    if sleep is None:  # real time: a cancel wakes the wait at once, not at the next start
        sleep = time.sleep if cancel is None else cancel.wait
    return _spread_threads(fn, todo, offsets, workers, progress, cancel, clock, sleep)


def _spread_threads(
    fn: Callable[[Any], Any],
    todo: list[Any],
    offsets: list[float],
    workers: int,
    progress: Callable[[int, int], None] | None,
    cancel: threading.Event | None,
    clock: Callable[[], float],
    sleep: Callable[[float], Any],
) -> SpreadResult[Any]:
    result: SpreadResult[Any] = SpreadResult([None] * len(todo))
    lock = threading.Lock()
    done = 0
    start = clock()
    order = sorted(range(len(todo)), key=offsets.__getitem__)

    def run(i: int) -> None:
        nonlocal done
        try:
            result.results[i] = fn(todo[i])
        except Exception as exc:
            result.errors[i] = exc
        with lock:
            done += 1
            count = done
        if progress is not None:
            progress(count, len(todo))

    with ThreadPoolExecutor(workers, thread_name_prefix="smoothclient-spread") as pool:
        for n, i in enumerate(order):
            wait = start + offsets[i] - clock()
            if wait > 0:
                sleep(wait)
            if cancel is not None and cancel.is_set():
                result.cancelled = True
                for j in order[n:]:
                    result.errors[j] = SpreadCancelled("spread was cancelled")
                break
            pool.submit(run, i)
    return result


async def _aspread(
    fn: Callable[[Any], Any],
    todo: list[Any],
    offsets: list[float],
    workers: int,
    progress: Callable[[int, int], None] | None,
    clock: Callable[[], float],
    sleep: Callable[[float], Any],
) -> SpreadResult[Any]:
    result: SpreadResult[Any] = SpreadResult([None] * len(todo))
    gate = asyncio.Semaphore(workers)
    done = 0
    start = clock()

    async def run(i: int) -> None:
        nonlocal done
        wait = start + offsets[i] - clock()
        if wait > 0:
            await sleep(wait)
        async with gate:
            try:
                result.results[i] = await fn(todo[i])
            except Exception as exc:
                result.errors[i] = exc
        done += 1
        if progress is not None:
            progress(done, len(todo))

    await asyncio.gather(*(run(i) for i in range(len(todo))))
    return result


# --------------------------------------------------------------------------- time windows


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
    :meth:`stop`.
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
        per_second = rate if rate is not None else (events_per_day or 0.0) / 86400.0
        if not per_second > 0 or not math.isfinite(per_second):
            msg = f"the rate must be a finite number > 0, got {per_second!r} per second"
            raise ValueError(msg)
        if mode not in ("scale", "defer"):
            msg = f"mode must be 'scale' or 'defer', got {mode!r}"
            raise ValueError(msg)
        self.task = task
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
            await _sleep_unless(self._stop, gap)
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


async def _sleep_unless(stop: threading.Event, seconds: float) -> None:
    """Sleep ``seconds`` on the event loop, waking within :data:`STOP_POLL` once ``stop`` is set."""
    while seconds > 0 and not stop.is_set():
        step = min(seconds, STOP_POLL)
        await async_sleep(step)
        seconds -= step


# --------------------------------------------------------------------------- reconciler


class Reconciler:
    """
    The paired scheduler-reconciler: every tick, re-dispatch everything that should be in flight.

    Each tick (its interval jittered) calls ``find_work()`` (the authoritative query), then
    ``handle(item)`` for each item not already in flight in this process (by ``key``), spread
    over ``spread_over`` seconds.  Ticks never overlap; a failing query or item is logged and
    counted, never fatal.  ``handle`` must be idempotent: duplicates across processes (or with
    the user-triggered path) are normal.
    """

    def __init__(
        self,
        find_work: Callable[[], Iterable[Any]],
        handle: Callable[[Any], Any],
        *,
        every: float | timedelta,
        jitter: float = 0.1,
        spread_over: float | timedelta = 0.0,
        key: Callable[[Any], Hashable] = lambda item: item,
        concurrency: int = 8,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """
        Configure; call :meth:`tick` yourself, :meth:`start` a thread or await :meth:`run_async`.

        ``sleep`` (for tests: a fake clock's) must match the runner: a plain function for
        :meth:`tick` and :meth:`start`, an async one for :meth:`tick_async` and
        :meth:`run_async` (which run on asyncio).
        """
        self.find_work, self.handle, self.key = find_work, handle, key
        self.every = seconds("every", every, allow_zero=False)
        self.jitter = jitter
        if not 0 <= jitter < 1:
            msg = f"jitter must satisfy 0 <= jitter < 1, got {jitter!r}"
            raise ValueError(msg)
        self.spread_over = seconds("spread_over", spread_over)
        self.concurrency = positive_int("concurrency", concurrency)
        self.clock, self.sleep = clock, sleep
        self.rng = rng or random.Random()
        self.in_flight: set[Hashable] = set()
        self.last_tick_at: float | None = None
        self.counts = {"ticks": 0, "dispatched": 0, "skipped": 0, "failed": 0, "query_errors": 0}
        self._lock = threading.Lock()
        self._ticking = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def seconds_since_last_tick(self) -> float | None:
        """For monitoring: how long since a tick last ran (``None`` before the first)."""
        return None if self.last_tick_at is None else self.clock() - self.last_tick_at

    def next_interval(self) -> float:
        """The jittered interval to the next tick: ``every * U(1 - jitter, 1 + jitter)``."""
        return self.every * (1 + self.jitter * (2 * self.rng.random() - 1))

    def tick(self) -> int:
        """Run one tick now; return how many items it dispatched (0 if one is running)."""
        if not self._begin_tick():
            return 0  # never overlaps itself
        try:
            try:
                work = list(self.find_work())
            except Exception:
                return self._query_failed()
            fresh = self._claim(work)
            if fresh:
                spread(self._dispatch, fresh, **self._spread_options())
            return len(fresh)
        finally:
            self._ticking.release()

    async def tick_async(self) -> int:
        """
        Async twin of :meth:`tick`: ``find_work`` and ``handle`` may be sync or async.

        Async handlers run as tasks spread over ``spread_over`` (at most ``concurrency`` at
        once); sync ones as in :meth:`tick`, on threads, without blocking the event loop.
        """
        if not self._begin_tick():
            return 0
        try:
            try:
                found = self.find_work()
                work = list(await found if inspect.isawaitable(found) else found)
            except Exception:
                return self._query_failed()
            fresh = self._claim(work)
            if fresh and inspect.iscoroutinefunction(self.handle):
                await spread(self._dispatch_async, fresh, **self._spread_options())
            elif fresh:
                await asyncio.to_thread(spread, self._dispatch, fresh, **self._spread_options())
            return len(fresh)
        finally:
            self._ticking.release()

    def _begin_tick(self) -> bool:
        if not self._ticking.acquire(blocking=False):
            return False
        self.last_tick_at = self.clock()
        self.counts["ticks"] += 1
        return True

    def _query_failed(self) -> int:
        self.counts["query_errors"] += 1
        log.warning("reconciler query failed", exc_info=True)
        return 0

    def _spread_options(self) -> dict[str, Any]:
        return {
            "window": self.spread_over,
            "concurrency": self.concurrency,
            "rng": self.rng,
            "clock": self.clock,
            "sleep": self.sleep,
        }

    def _claim(self, work: list[Any]) -> list[Any]:
        fresh = []
        with self._lock:
            for item in work:
                k = self.key(item)
                if k in self.in_flight:
                    self.counts["skipped"] += 1
                else:
                    self.in_flight.add(k)
                    fresh.append(item)
        return fresh

    def _dispatch(self, item: Any) -> None:
        with self._settling(item):
            self.handle(item)

    async def _dispatch_async(self, item: Any) -> None:
        with self._settling(item):
            await self.handle(item)

    @contextlib.contextmanager
    def _settling(self, item: Any) -> Iterator[None]:
        """Count the item done or failed; release its key whatever happens (cancelled too)."""
        try:
            yield
        except Exception:
            with self._lock:
                self.counts["failed"] += 1
            log.warning("reconciler item failed", exc_info=True)
            raise
        else:
            with self._lock:
                self.counts["dispatched"] += 1
        finally:
            with self._lock:
                self.in_flight.discard(self.key(item))

    def run(self) -> None:
        """Tick until :meth:`stop`."""
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.next_interval())

    async def run_async(self, *, max_ticks: int | None = None) -> None:
        """
        Tick on the running event loop until :meth:`stop` (or ``max_ticks``), or cancel it.

        The wait between ticks uses ``sleep`` if it was given (it must then be async), else
        ``asyncio.sleep`` in steps of at most a second, so :meth:`stop` is seen within one.
        """
        self._stop.clear()
        ticks = 0
        while not self._stop.is_set() and (max_ticks is None or ticks < max_ticks):
            await self.tick_async()
            ticks += 1
            if max_ticks is None or ticks < max_ticks:
                if self.sleep is not None:
                    await self.sleep(self.next_interval())
                else:
                    await _sleep_unless(self._stop, self.next_interval())

    def start(self) -> None:
        """Tick in a daemon thread."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run, name="smoothclient-reconciler", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop ticking; wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
