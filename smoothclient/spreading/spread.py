""":func:`spread`: a batch over a window, not all at once (docs/window-math.md sections 2-4)."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, Literal, TypeVar, overload

from .._validate import forward, function, positive_int, seconds, waited
from ._aio import event_loop_sleep, refuse_generators
from .offsets import even_offsets, offset_for

log = logging.getLogger("smoothclient.schedule")
T = TypeVar("T")
Item = TypeVar("Item")
Placement = Literal["uniform", "hashed", "even"]

__all__ = ["Placement", "SpreadCancelled", "SpreadResult", "plan", "spread"]


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


@overload
def spread(  # type: ignore[overload-overlap]  # a coroutine function: the async form
    fn: Callable[[Item], Coroutine[Any, Any, T]],
    items: Iterable[Item],
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
) -> Coroutine[Any, Any, SpreadResult[T]]: ...


@overload
def spread(
    fn: Callable[[Item], T],
    items: Iterable[Item],
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
) -> SpreadResult[T]: ...


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
) -> SpreadResult[Any] | Coroutine[Any, Any, SpreadResult[Any]]:
    """
    Run ``fn(item)`` once per item, the starts spread over ``window`` seconds.

    Sync functions run on a pool of ``concurrency`` threads; for an async ``fn`` this returns a
    coroutine that runs tasks (at most ``concurrency`` at once).  One failing item does not stop
    the rest: its exception is in ``result.errors``.  ``progress(done, total)`` is called after
    each item.  Setting ``cancel`` (sync), or cancelling the awaiting task (async), stops items
    not yet started.  A generator function (of either kind) is refused with ``TypeError``:
    calling it would run none of its body.

    Returns:
        a :class:`SpreadResult` (or a coroutine of one, for async ``fn``).
    """
    kind = refuse_generators(fn, "spread's fn", "a function (sync or async) doing an item's work")
    function("key", key, "of an item", optional=True)
    todo = list(items)
    keys = [key(i) for i in todo] if key is not None else None
    if placement == "hashed" and keys is None:
        keys = [str(i) for i in todo]
    offsets = plan(len(todo), seconds("window", window), placement, keys=keys, rate=rate, rng=rng)
    workers = positive_int("concurrency", concurrency)
    clock = forward(clock)  # a step back is no time passing: no wait longer than its offset
    function("sleep", sleep, "taking seconds", optional=True)
    function("progress", progress, "taking (done, total)", optional=True)
    if kind == "coroutine":
        return _aspread(fn, todo, offsets, workers, progress, clock, event_loop_sleep(sleep))
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
    interrupted: list[BaseException] = []  # KeyboardInterrupt, SystemExit: the caller's

    def run(i: int) -> None:
        nonlocal done
        try:
            result.results[i] = fn(todo[i])
        except Exception as exc:
            result.errors[i] = exc
        except BaseException as exc:
            interrupted.append(exc)
            if cancel is not None:
                cancel.set()
        with lock:
            done += 1
            count = done
        if progress is not None:
            progress(count, len(todo))

    with ThreadPoolExecutor(workers, thread_name_prefix="smoothclient-spread") as pool:
        for n, i in enumerate(order):
            now = clock()
            wait = start + offsets[i] - now
            if wait > 0:
                sleep(wait)
                waited(clock, now, wait)
            if interrupted or (cancel is not None and cancel.is_set()):
                result.cancelled = True
                for j in order[n:]:
                    result.errors[j] = SpreadCancelled("spread was cancelled")
                break
            pool.submit(run, i)
    if interrupted:  # as the async form does: an interrupt is not an item's failure
        raise interrupted[0]
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
        now = clock()
        wait = start + offsets[i] - now
        if wait > 0:
            await sleep(wait)
            waited(clock, now, wait)
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
