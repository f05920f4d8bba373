"""``@paced``: a token bucket shared by every caller across threads and tasks."""

from __future__ import annotations

import functools
import math
import sys
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import wrapt

from .._validate import forward, function, positive_int, seconds, waited
from ..errors import RateLimited
from ..pacing.gcra import Gcra
from ..pacing.keys import LruMap
from ..pacing.state import OriginState
from ..pacing.steps import in_thread, on_asyncio, run_async
from ..pacing.store import Tracker, stepwise
from ._aio import event_loop_sleep, iterate_after, kind_of

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["paced"]


def _reserve(gcra: Gcra, now: float, block: bool) -> float:
    """Seconds until the caller may go, its slot taken; ``-seconds``: refused, nothing taken."""
    at = gcra.earliest(now)
    if at > now and not block:
        return -(at - now)
    gcra.take(at)
    return at - now


def _refused(wait: float) -> float:
    if wait < 0:
        raise RateLimited(f"no token for {-wait:.3g} s (block=False)", retry_after=-wait)
    return wait


class _Bucket:
    """A thread-safe GCRA token bucket in this process."""

    __slots__ = ("gcra", "lock")

    def __init__(self, rate: float, burst: float) -> None:
        self.gcra = Gcra(rate, burst)
        self.lock = threading.Lock()

    def reserve(self, now: float, *, block: bool) -> float:
        """Seconds until the caller may go; reserves the slot (unless refusing)."""
        with self.lock:
            return _refused(_reserve(self.gcra, now, block))

    async def reserve_async(self, now: float, *, block: bool) -> float:
        """:meth:`reserve` (no I/O: at once)."""
        return self.reserve(now, block=block)


class _SharedBucket:
    """A GCRA token bucket in a shared store (the pacer's Redis): one for the whole fleet."""

    __slots__ = ("burst", "rate", "tracker")

    def __init__(self, tracker: Tracker, rate: float, burst: float) -> None:
        self.tracker, self.rate, self.burst = tracker, rate, burst

    def _step(self, now: float, block: bool) -> Callable[[OriginState], float]:
        """The reservation, as one atomic step on the bucket's state."""
        rate, burst = self.rate, self.burst
        interval = 1.0 / rate  # compared as Gcra keeps it (a rate need not survive 1/(1/rate))

        def step(state: OriginState) -> float:
            if state.pace.interval != interval or state.pace.burst != burst:
                state.pace = Gcra(rate, burst)  # first use, or the decorator's numbers changed
            return _reserve(state.pace, now, block)

        return step

    def reserve(self, now: float, *, block: bool) -> float:
        """Seconds until the caller may go; reserves the slot (unless refusing)."""
        return _refused(self.tracker.update(self._step(now, block)))

    async def reserve_async(self, now: float, *, block: bool) -> float:
        """:meth:`reserve` that never blocks the event loop on the store's round trips."""
        step = self._step(now, block)
        if on_asyncio():  # awaited on the loop's redis.asyncio client
            return _refused(await run_async(stepwise(self.tracker).update(step)))
        return _refused(await in_thread(functools.partial(self.tracker.update, step)))


def paced(
    rate: float,
    per: float = 1.0,
    *,
    burst: float = 1.0,
    block: bool = True,
    key: Callable[..., Hashable] | None = None,
    max_keys: int = 1024,
    storage: object = "memory://",
    name: str | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], Any] | None = None,
) -> Callable[[F], F]:
    """
    Let at most ``rate`` calls per ``per`` seconds through, across threads and tasks.

    Bursts of up to ``burst`` go at once; then callers wait for their slot, or get
    :class:`~smoothclient.RateLimited` with ``block=False``.  ``key`` (a function of the
    arguments) gives each key its own bucket, at most ``max_keys`` of them (least recently used
    forgotten).

    ``storage`` (a ``redis://`` URL or a ``redis.Redis`` client, as for
    :class:`~smoothclient.Pacer`) makes the bucket the fleet's: every process decorating the
    same function (``name``, default its module and qualified name) shares it, each token
    taken atomically; a Redis that fails falls back to this process's bucket.  The clock is
    then the Redis server's ``TIME``.

    An async generator function waits for its token (on the event loop) before its first item.
    """
    if callable(rate):
        msg = (
            "paced needs its rate: write @paced(rate), @paced(rate, per=seconds) ..., "
            "not a bare @paced"
        )
        raise TypeError(msg)
    if isinstance(rate, bool) or not isinstance(rate, int | float):
        msg = f"rate must be a number, not {type(rate).__name__}"
        raise TypeError(msg)
    try:
        per_second = rate / seconds("per", per, allow_zero=False) if rate > 0 else 0.0
    except OverflowError:  # an int of hundreds of digits
        per_second = math.inf
    if not (math.isfinite(per_second) and per_second > 0 and math.isfinite(1 / per_second)):
        msg = f"rate must be a finite number > 0 whose interval is finite too, got {rate!r}"
        raise ValueError(msg)
    if isinstance(burst, bool) or not isinstance(burst, int | float):
        msg = f"burst must be a number, not {type(burst).__name__}"
        raise TypeError(msg)
    if not (1 <= burst <= sys.float_info.max):  # (math.isfinite raises for a huge int)
        msg = f"burst must be a finite number >= 1, got {burst!r}"
        raise ValueError(msg)
    function("clock", clock, "returning seconds", optional=True)
    function("key", key, "of the arguments", optional=True)
    function("sleep", sleep, "taking seconds", optional=True)
    limit = positive_int("max_keys", max_keys)
    store = None
    if storage is not None and storage != "memory://":
        from ..pacing.pacer import Pacer

        store = Pacer(storage=storage, max_origins=limit)  # its store, and the fleet's clock
        clock = clock or store.clock
    # in this process, a clock's step back is no time passing (a slot an hour away otherwise)
    now = forward(clock) if store is None and clock is not None else clock or time.monotonic

    def decorate(fn: F) -> F:
        shared_name = name or _name_of(fn)
        buckets: LruMap[Hashable, _Bucket | _SharedBucket] = LruMap(
            limit,
            lambda k: (
                _Bucket(per_second, burst)
                if store is None
                else _SharedBucket(store.track(_key(shared_name, k)), per_second, burst)
            ),
        )

        def bucket_for(args: Any, kwargs: Any) -> _Bucket | _SharedBucket:
            return buckets.get(key(*args, **kwargs) if key is not None else None)

        return _wrap(fn, bucket_for, now, block, sleep)

    return decorate


def _name_of(fn: object) -> str:
    """A function's module and qualified name; a callable object's class's (it has none)."""
    named = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', '?')}"


def _key(name: str, key: Hashable) -> str:
    """The store key of one bucket (no spaces: a space would make it a scope's key)."""
    return f"paced:{name}:{key!r}".replace(" ", "")


def _wrap(
    fn: F,
    bucket_for: Callable[[Any, Any], _Bucket | _SharedBucket],
    clock: Callable[[], float],
    block: bool,
    sleep: Callable[[float], Any] | None,
) -> F:
    """``fn`` waiting for a token of its bucket before each call."""
    kind = kind_of(fn)
    pause = event_loop_sleep(sleep) if kind in ("async generator", "coroutine") else None

    async def token(args: Any, kwargs: Any) -> None:
        """Wait for a token on the event loop."""
        now = clock()
        wait = await bucket_for(args, kwargs).reserve_async(now, block=block)
        if wait > 0:
            assert pause is not None
            await pause(wait)
            waited(clock, now, wait)

    if kind == "async generator":  # the wait comes before the first item

        @wrapt.decorator
        def agen_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            return iterate_after(lambda: token(args, kwargs), wrapped(*args, **kwargs))

        return agen_wrapper(fn)  # type: ignore[return-value]

    if kind == "coroutine":

        @wrapt.decorator
        async def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            await token(args, kwargs)
            return await wrapped(*args, **kwargs)

        return async_wrapper(fn)  # type: ignore[return-value]

    @wrapt.decorator
    def sync_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        now = clock()
        wait = bucket_for(args, kwargs).reserve(now, block=block)
        if wait > 0:
            (sleep or time.sleep)(wait)
            waited(clock, now, wait)
        return wrapped(*args, **kwargs)

    return sync_wrapper(fn)  # type: ignore[return-value]
