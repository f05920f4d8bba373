"""
Decorators that spread calls in time: :func:`retry`, :func:`jittered` and :func:`paced`.

Each works on sync and async functions and on methods, and keeps the signature intact (wrapt).

>>> from smoothclient.decorators import retry
>>> @retry(on=ConnectionError, attempts=3, timeout=10)
... def fetch(): ...
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import random
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import wrapt

from ._errors import RateLimited
from ._flow import CallFlow, Failure, Reply, drive, drive_async
from ._validate import positive_int, seconds
from .pacer import Pacer
from .policy import DEFAULT_POLICY, RetryPolicy

__all__ = ["Scheduler", "async_sleep", "jittered", "paced", "retry"]

F = TypeVar("F", bound=Callable[..., Any])
OnError = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], Any]


async def async_sleep(seconds: float) -> None:
    """Sleep on whichever event loop runs: trio when it is the running one, else asyncio."""
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            pass
        else:
            await trio.sleep(seconds)
            return
    await asyncio.sleep(seconds)


# --------------------------------------------------------------------------- retry


class _RetryResult(Exception):
    """Carries a result the ``on_result`` predicate wants retried."""

    def __init__(self, result: Any, delay: float | None) -> None:
        super().__init__("the result asked for a retry")
        self.result = result
        self.delay = delay


def _verdict(value: Any) -> tuple[bool, float | None]:
    """A predicate's answer: False/None = no; True = yes; a number = yes, after that long."""
    if value is None or value is False:
        return False, None
    if isinstance(value, bool):
        return True, None
    if isinstance(value, int | float):
        return True, max(0.0, float(value))
    return True, None


def _error_classifier(on: OnError) -> Callable[[Exception], Failure | None]:
    candidates: tuple[Any, ...] = on if isinstance(on, tuple) else (on,)
    is_types = all(isinstance(t, type) and issubclass(t, BaseException) for t in candidates)
    types: tuple[type[BaseException], ...] = candidates if is_types else ()

    def failure_of(exc: Exception) -> Failure | None:
        if isinstance(exc, _RetryResult):
            return Failure("result", sent=True, exception=exc, retry_after=exc.delay)
        if is_types:
            retry, delay = isinstance(exc, types), None
        else:
            retry, delay = _verdict(on(exc))  # type: ignore[operator]
        return Failure("other", sent=True, exception=exc, retry_after=delay) if retry else None

    return failure_of


def retry(
    on: OnError = Exception,
    *,
    on_result: Callable[[Any], Any] | None = None,
    policy: RetryPolicy | None = None,
    idempotent: bool = True,
    rng: random.Random | None = None,
    sleep: Callable[[float], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    **policy_changes: Any,
) -> Callable[[F], F]:
    """
    Retry a function with the transports' policy, backoff, deadline and budget.

    Args:
        on: exception types to retry, or a predicate over the exception returning False (do not
            retry), True (retry) or a delay in seconds (retry no earlier: it *shifts* the window
            like ``Retry-After``, e.g. a delay read from an API's error).
        on_result: a predicate over the return value, with the same answers.
        policy: a :class:`~smoothclient.RetryPolicy` (default ``DEFAULT_POLICY``); any other
            keyword (``attempts=3, timeout=10``...) replaces a field of it.
        idempotent: False makes every failure final (nothing is retried after it may have run).
        rng: randomness for the jitter.
        sleep: a sync (or, for async functions, async) sleep; tests pass a fake clock's.
        clock: the monotonic clock the deadline is measured on (a fake one goes with a fake
            ``sleep``).
        **policy_changes: fields of :class:`~smoothclient.RetryPolicy` to replace.

    When retries run out the last exception is re-raised, or the last result returned.
    """
    base = policy or DEFAULT_POLICY
    effective = base.replace(**policy_changes) if policy_changes else base
    failure_of = _error_classifier(on)
    generator = rng or random.Random()

    def decorate(fn: F) -> F:
        name = f"call:{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
        pacer = Pacer(probe=0, clock=clock)

        def flow() -> CallFlow:
            return CallFlow(
                effective,
                pacer,
                name,
                method="CALL",
                has_idempotency_key=False,
                replayable=True,
                rng=generator,
                describe=name,
                idempotent=idempotent,
            )

        def checked(result: Any) -> Any:
            if on_result is not None:
                again, delay = _verdict(on_result(result))
                if again:
                    raise _RetryResult(result, delay)
            return result

        def outcome(error: BaseException | None, result: Any) -> Any:
            if isinstance(error, _RetryResult):
                return error.result
            if error is not None:
                raise error
            return result

        if inspect.iscoroutinefunction(fn):

            @wrapt.decorator
            async def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                async def send() -> Any:
                    return checked(await wrapped(*args, **kwargs))

                done = await drive_async(
                    flow(), send, _ok, failure_of, _nothing_async, sleep or async_sleep
                )
                return outcome(done.error, done.response)

            return async_wrapper(fn)  # type: ignore[return-value]

        @wrapt.decorator
        def sync_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            done = drive(
                flow(),
                lambda: checked(wrapped(*args, **kwargs)),
                _ok,
                failure_of,
                _nothing,
                sleep or time.sleep,
            )
            return outcome(done.error, done.response)

        return sync_wrapper(fn)  # type: ignore[return-value]

    return decorate


def _ok(result: Any) -> Reply:
    return Reply(200, ())


def _nothing(result: Any) -> None:
    return None


async def _nothing_async(result: Any) -> None:
    return None


# --------------------------------------------------------------------------- jittered


class Scheduler:
    """
    Runs sync calls at given times with one timer thread and a small worker pool.

    However many calls are pending, they cost heap entries, not threads.
    """

    def __init__(self, *, workers: int = 8, clock: Callable[[], float] = time.monotonic) -> None:
        """Create an idle scheduler; its threads start on first use."""
        self._workers = positive_int("workers", workers)
        self._clock = clock
        self._heap: list[tuple[float, int, Future[Any], Callable[[], Any]]] = []
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def call_at(self, when: float, fn: Callable[[], Any]) -> Future[Any]:
        """Run ``fn`` at ``when`` (on this scheduler's clock); the future has its result."""
        future: Future[Any] = Future()
        with self._cond:
            if self._closed:
                msg = "the scheduler is shut down"
                raise RuntimeError(msg)
            heapq.heappush(self._heap, (when, next(self._counter), future, fn))
            if self._thread is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="smoothclient")
                self._thread = threading.Thread(
                    target=self._loop, name="smoothclient-scheduler", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return future

    def pending(self) -> int:
        """Calls waiting for their time."""
        with self._cond:
            return len(self._heap)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > self._clock()):
                    timeout = self._heap[0][0] - self._clock() if self._heap else None
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, future, fn = heapq.heappop(self._heap)
            if future.set_running_or_notify_cancel():
                assert self._pool is not None
                self._pool.submit(_run_into, future, fn)

    def shutdown(self) -> None:
        """Cancel what is pending and stop the threads."""
        with self._cond:
            self._closed = True
            pending, self._heap = self._heap, []
            self._cond.notify()
        for _, _, future, _ in pending:
            future.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=False)


def _run_into(future: Future[Any], fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except BaseException as exc:
        future.set_exception(exc)


_default_scheduler: Scheduler | None = None
_default_lock = threading.Lock()


def _scheduler() -> Scheduler:
    global _default_scheduler
    with _default_lock:
        if _default_scheduler is None:
            _default_scheduler = Scheduler()
        return _default_scheduler


class _JitteredBound(wrapt.BoundFunctionWrapper[Any, Any]):
    def later(self, *args: Any, **kwargs: Any) -> Any:
        """Schedule the bound call after a jittered delay without blocking."""
        parent: _JitteredFunction = self._self_parent
        return parent._later(self.__wrapped__, args, kwargs)


class _JitteredFunction(wrapt.FunctionWrapper[Any, Any]):
    __bound_function_wrapper__ = _JitteredBound
    _self_draw: Callable[[], float]
    _self_scheduler: Scheduler | None
    _self_tasks: set[asyncio.Task[Any]]  # until done: the loop keeps only weak references

    def later(self, *args: Any, **kwargs: Any) -> Any:
        """Schedule the call after a jittered delay without blocking the caller."""
        return self._later(self.__wrapped__, args, kwargs)

    def _later(self, target: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        delay = self._self_draw()
        if inspect.iscoroutinefunction(target):

            async def run() -> Any:
                await async_sleep(delay)
                return await target(*args, **kwargs)

            task = asyncio.get_running_loop().create_task(run())
            self._self_tasks.add(task)  # a caller may drop it (fire and forget): keep it alive
            task.add_done_callback(self._self_tasks.discard)
            return task
        scheduler: Scheduler = self._self_scheduler or _scheduler()
        return scheduler.call_at(scheduler._clock() + delay, lambda: target(*args, **kwargs))


def jittered(
    max_wait: float,
    min_wait: float = 0.0,
    *,
    rng: random.Random | None = None,
    sleep: Callable[[float], Any] | None = None,
    scheduler: Scheduler | None = None,
) -> Callable[[F], F]:
    """
    Wait a uniform random delay in ``[min_wait, max_wait)`` before each call.

    ``fn.later(*args, **kwargs)`` schedules the call after such a delay without blocking: a
    :class:`concurrent.futures.Future` from a :class:`Scheduler` (one timer thread) for sync
    functions, an :class:`asyncio.Task` on the running loop for async ones.  Both have
    ``cancel()`` and the result.
    """
    hi = seconds("max_wait", max_wait)
    lo = seconds("min_wait", min_wait)
    if lo > hi:
        msg = f"min_wait ({lo}) must not exceed max_wait ({hi})"
        raise ValueError(msg)
    generator = rng or random.Random()

    def draw() -> float:
        return lo + (hi - lo) * generator.random()

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            async def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                await (sleep or async_sleep)(draw())
                return await wrapped(*args, **kwargs)

            wrapper: Callable[..., Any] = async_wrapper
        else:

            def sync_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                (sleep or time.sleep)(draw())
                return wrapped(*args, **kwargs)

            wrapper = sync_wrapper
        result = _JitteredFunction(fn, wrapper)
        result._self_draw = draw
        result._self_scheduler = scheduler
        result._self_tasks = set()
        return result  # type: ignore[return-value]

    return decorate


# --------------------------------------------------------------------------- paced


class _Bucket:
    """A thread-safe token bucket as reservations (GCRA): ``rate`` per second, ``burst``."""

    def __init__(self, rate: float, burst: float) -> None:
        self.interval = 1.0 / rate
        self.tolerance = (burst - 1) * self.interval
        self.tat = -float("inf")
        self.lock = threading.Lock()

    def reserve(self, now: float, *, block: bool) -> float:
        """Seconds until the caller may go; reserves the slot (unless refusing)."""
        with self.lock:
            at = max(now, self.tat - self.tolerance)
            if at > now and not block:
                raise RateLimited(
                    f"no token for {at - now:.3g} s (block=False)", retry_after=at - now
                )
            self.tat = max(self.tat, at) + self.interval
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
    if not rate > 0:
        msg = f"rate must be > 0, got {rate!r}"
        raise ValueError(msg)
    per_second = rate / seconds("per", per, allow_zero=False)
    if burst < 1:
        msg = f"burst must be >= 1, got {burst!r}"
        raise ValueError(msg)
    limit = positive_int("max_keys", max_keys)
    buckets: OrderedDict[Hashable, _Bucket] = OrderedDict()
    lock = threading.Lock()

    def bucket_for(args: Any, kwargs: Any) -> _Bucket:
        k = key(*args, **kwargs) if key is not None else None
        with lock:
            bucket = buckets.get(k)
            if bucket is None:
                bucket = buckets[k] = _Bucket(per_second, burst)
                while len(buckets) > limit:
                    buckets.popitem(last=False)
            else:
                buckets.move_to_end(k)
            return bucket

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
