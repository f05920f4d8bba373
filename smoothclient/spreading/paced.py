"""``@paced``: a token bucket shared by every caller across threads and tasks."""

from __future__ import annotations

import inspect
import math
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import wrapt

from .._validate import positive_int, seconds
from ..errors import RateLimited
from ..pacing.gcra import Gcra
from ..pacing.keys import LruMap
from ._aio import async_sleep

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["paced"]


class _Bucket:
    """A thread-safe GCRA token bucket that refuses (``block=False``) or reserves a slot."""

    __slots__ = ("gcra", "lock")

    def __init__(self, rate: float, burst: float) -> None:
        self.gcra = Gcra(rate, burst)
        self.lock = threading.Lock()

    def reserve(self, now: float, *, block: bool) -> float:
        """Seconds until the caller may go; reserves the slot (unless refusing)."""
        with self.lock:
            at = self.gcra.earliest(now)
            if at > now and not block:
                raise RateLimited(
                    f"no token for {at - now:.3g} s (block=False)", retry_after=at - now
                )
            self.gcra.take(at)
            return at - now


def paced(
    rate: float,
    per: float = 1.0,
    *,
    burst: float = 1.0,
    block: bool = True,
    key: Callable[..., Hashable] | None = None,
    max_keys: int = 1024,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Any] | None = None,
) -> Callable[[F], F]:
    """
    Let at most ``rate`` calls per ``per`` seconds through, across threads and tasks.

    Bursts of up to ``burst`` go at once; then callers wait for their slot, or get
    :class:`~smoothclient.RateLimited` with ``block=False``.  ``key`` (a function of the
    arguments) gives each key its own bucket, at most ``max_keys`` of them (least recently used
    forgotten).
    """
    if isinstance(rate, bool) or not isinstance(rate, int | float):
        msg = f"rate must be a number, not {type(rate).__name__}"
        raise TypeError(msg)
    per_second = rate / seconds("per", per, allow_zero=False) if rate > 0 else 0.0
    if not (math.isfinite(per_second) and per_second > 0 and math.isfinite(1 / per_second)):
        msg = f"rate must be a finite number > 0 whose interval is finite too, got {rate!r}"
        raise ValueError(msg)
    if isinstance(burst, bool) or not isinstance(burst, int | float):
        msg = f"burst must be a number, not {type(burst).__name__}"
        raise TypeError(msg)
    if not (math.isfinite(burst) and burst >= 1):
        msg = f"burst must be a finite number >= 1, got {burst!r}"
        raise ValueError(msg)
    buckets: LruMap[Hashable, _Bucket] = LruMap(
        positive_int("max_keys", max_keys), lambda _: _Bucket(per_second, burst)
    )

    def bucket_for(args: Any, kwargs: Any) -> _Bucket:
        return buckets.get(key(*args, **kwargs) if key is not None else None)

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @wrapt.decorator
            async def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                wait = bucket_for(args, kwargs).reserve(clock(), block=block)
                if wait > 0:
                    await (sleep or async_sleep)(wait)
                return await wrapped(*args, **kwargs)

            return async_wrapper(fn)  # type: ignore[return-value]

        @wrapt.decorator
        def sync_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            wait = bucket_for(args, kwargs).reserve(clock(), block=block)
            if wait > 0:
                (sleep or time.sleep)(wait)
            return wrapped(*args, **kwargs)

        return sync_wrapper(fn)  # type: ignore[return-value]

    return decorate
