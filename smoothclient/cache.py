"""
Caches whose entries written together do not expire together.

:class:`JitteredTTLCache` is a real cachetools cache (a :class:`cachetools.TLRUCache`, whose
per-item expiry heap accepts out-of-order expiries) where each entry lives a lifetime drawn
uniformly from ``[ttl * (1 - jitter), ttl]``: never longer than ``ttl``, and spread over the last
``jitter`` fraction of it.

:func:`cached` memoizes sync and async functions on any cachetools cache, adding what a fleet
needs: single-flight loading (concurrent misses on a key run the function once; every waiter gets
that result or that exception), probabilistic early refresh (XFetch), stale-while-revalidate and
stale-if-error (RFC 5861) and counters.  Early refresh and the stale modes need a
:class:`JitteredTTLCache`, which tells each entry when it stops being fresh.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar, cast

import cachetools
from cachetools.keys import hashkey

from ._validate import flag, forward, fraction, function, optional_seconds, seconds
from .spreading._aio import kind_of
from .window import jittered_lifetime, xfetch_due

__all__ = ["CacheInfo", "JitteredTTLCache", "cache_info", "cached"]

K = TypeVar("K")
V = TypeVar("V")
F = TypeVar("F", bound=Callable[..., Any])


def _size_values_not_entries(cache: Any) -> None:
    """
    A cache's ``getsizeof`` sizes the values the caller sees, not our entries around them.

    cachetools keeps a ``getsizeof`` given to a cache as an attribute of that cache; it is
    wrapped once so it is handed the value inside each entry.
    """
    sizer = vars(cache).get("getsizeof") if hasattr(cache, "__dict__") else None
    if sizer is None or getattr(sizer, "_smoothclient_unwraps", False):
        return

    def getsizeof(value: Any) -> Any:
        return sizer(value.value if isinstance(value, _Entry) else value)

    getsizeof._smoothclient_unwraps = True  # type: ignore[attr-defined]
    cache.getsizeof = getsizeof


@dataclass
class _Entry:
    """What :func:`cached` stores: the value, when it stops being fresh, and its load time."""

    value: Any
    delta: float  # seconds the load took (XFetch's delta)
    grace: float = 0.0  # how long past freshness the cache must keep it (stale modes)
    fresh_until: float = math.inf


class JitteredTTLCache(cachetools.TLRUCache[K, V, float]):
    """
    A TTL cache whose entries live ``ttl * U(1 - jitter, 1)`` seconds.

    A drop-in for :class:`cachetools.TTLCache` (same positional order, a ``ttl`` attribute,
    picklable), usable with ``cachetools.cached`` and ``cachedmethod`` as well as with
    :func:`smoothclient.cache.cached`.

    Args:
        maxsize: the most entries (or total size with ``getsizeof``).
        ttl: the longest lifetime of an entry, in seconds (> 0).
        timer: the clock (default ``time.monotonic``; tests pass a fake one).  A step back of
            it counts as no time passing: no entry outlives ``ttl`` because of one.
        getsizeof: the size of a value.
        jitter: the fraction of ``ttl`` over which expiries spread, ``0 <= jitter < 1``.
        rng: randomness for the lifetimes.
    """

    def __init__(
        self,
        maxsize: float,
        ttl: float,
        timer: Callable[[], float] = time.monotonic,
        getsizeof: Callable[[V], float] | None = None,
        *,
        jitter: float = 0.1,
        rng: random.Random | None = None,
    ) -> None:
        """Create an empty cache."""
        number = isinstance(maxsize, int | float) and not isinstance(maxsize, bool)
        if not (number and maxsize >= 0):  # (NaN too: a cache that never evicts)
            msg = f"maxsize must be a number >= 0 (entries, or a total size), got {maxsize!r:.40}"
            raise (ValueError if number else TypeError)(msg)
        self.ttl = seconds("ttl", ttl, allow_zero=False)
        self.jitter = fraction("jitter", jitter)
        self._rng = rng or random.Random()
        self._next_ttl: float | None = None
        if not callable(timer):
            msg = f"timer must be a callable returning seconds, not {type(timer).__name__}"
            raise TypeError(msg)
        super().__init__(maxsize, self._ttu, forward(timer), getsizeof)

    def lifetime(self) -> float:
        """Draw one entry lifetime from ``[ttl * (1 - jitter), ttl]``."""
        ttl = self._next_ttl if self._next_ttl is not None else self.ttl
        return jittered_lifetime(ttl, self.jitter, self._rng.random())

    def _ttu(self, key: K, value: V, now: float) -> float:
        expires = now + self.lifetime()
        if isinstance(value, _Entry):
            value.fresh_until = expires
            return expires + value.grace
        return expires

    def set(self, key: K, value: V, *, ttl: float | None = None) -> None:
        """Store ``value``; ``ttl`` overrides the cache's for this entry (jitter still applies)."""
        self._next_ttl = None if ttl is None else seconds("ttl", ttl, allow_zero=False)
        try:
            self[key] = value
        finally:
            self._next_ttl = None


class CacheInfo(NamedTuple):
    """Counters of a :func:`cached` function."""

    hits: int
    misses: int
    loads: int
    early_refreshes: int
    stale_served: int
    load_errors: int
    maxsize: float
    currsize: float


@dataclass
class _Flight:
    """One load in progress for a key: waiters block on ``done`` and read the outcome."""

    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None
    leader: int = field(default_factory=threading.get_ident)  # the thread that loads


@dataclass
class _Stats:
    hits: int = 0
    misses: int = 0
    loads: int = 0
    early_refreshes: int = 0
    stale_served: int = 0
    load_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)


class _Memo(Generic[K]):
    """The shared state and decisions of one cached function (sync or async)."""

    def __init__(
        self,
        cache: Any,
        lock: Any,
        early_refresh: float | None,
        swr: float | None,
        sie: float | None,
        rng: random.Random,
    ) -> None:
        self.cache = cache
        _size_values_not_entries(cache)
        self.lock = lock
        self.beta = early_refresh
        self.swr = swr
        self.sie = sie
        self.rng = rng
        self.stats = _Stats()
        self.flights: dict[Hashable, Any] = {}
        self.flights_lock = threading.Lock()
        timer = getattr(cache, "timer", None)
        self.now: Callable[[], float] = timer if callable(timer) else time.monotonic

    @property
    def grace(self) -> float:
        return max(self.swr or 0.0, self.sie or 0.0)

    def lookup(self, key: Hashable) -> tuple[str, Any]:
        """``("fresh"|"refresh"|"stale"|"miss", entry)`` for ``key`` now."""
        with self.lock:
            entry = self.cache.get(key)
        if not isinstance(entry, _Entry):
            return "miss", None
        now = self.now()
        if now < entry.fresh_until:
            if self.beta and self._xfetch(entry, now):
                return "refresh", entry
            return "fresh", entry
        if self.swr is not None and now < entry.fresh_until + self.swr:
            return "stale", entry
        return "expired", entry

    def route(self, key: Hashable) -> tuple[str, Any]:
        """
        What a call for ``key`` must do, counted once here for sync and async alike.

        ``("hit", entry)``: return ``entry.value``; ``("early", entry)``: reload now (XFetch),
        falling back to ``entry.value``; ``("background", entry)``: return ``entry.value`` and
        reload in the background; ``("load", entry_or_None)``: reload, with :meth:`fallback` on
        failure.
        """
        state, entry = self.lookup(key)
        if state == "fresh" or (state == "refresh" and key in self.flights):
            self.stats.add("hits")
            return "hit", entry
        if state == "refresh":
            self.stats.add("hits")
            self.stats.add("early_refreshes")
            return "early", entry
        if state == "stale":
            self.stats.add("stale_served")
            return "background", entry
        self.stats.add("misses")
        return "load", entry

    def loaded(self, key: Hashable) -> _Entry | None:
        """The entry for ``key`` if it is fresh now (a waiter whose loader gave up checks)."""
        state, entry = self.lookup(key)
        return entry if state in ("fresh", "refresh") else None

    def stands_in(self, action: str, entry: Any) -> bool:
        """
        Whether ``entry`` may stand in for a load that just failed.

        Still fresh after a failed early refresh (XFetch), or stale-if-error allows it; never a
        value older than the cache's lifetime otherwise.
        """
        if action == "early" and self.now() < entry.fresh_until:
            return True
        return self.fallback(entry)

    def fallback(self, entry: Any) -> bool:
        """Stale-if-error: whether ``entry`` may stand in for the load that just failed."""
        if self.stale_ok(entry):
            self.stats.add("stale_served")
            return True
        return False

    def _xfetch(self, entry: _Entry, now: float) -> bool:
        """XFetch: recompute early when ``now - delta * beta * ln(U) >= expiry``."""
        return xfetch_due(now, entry.fresh_until, entry.delta, self.beta or 0.0, self.rng.random())

    def store(self, key: Hashable, value: Any, delta: float) -> None:
        # a value larger than the whole cache is returned, not kept (as cachetools.cached);
        # a load timed on a clock that stepped back took no time
        with self.lock, contextlib.suppress(ValueError):
            self.cache[key] = _Entry(value, max(0.0, delta), self.grace)

    def stale_ok(self, entry: Any) -> bool:
        """Stale-if-error: may ``entry`` stand in for a failed load now?"""
        return (
            isinstance(entry, _Entry)
            and self.sie is not None
            and self.now() < entry.fresh_until + self.sie
        )

    def info(self) -> CacheInfo:
        s = self.stats
        with self.lock:
            maxsize, currsize = self.cache.maxsize, self.cache.currsize
        return CacheInfo(
            s.hits,
            s.misses,
            s.loads,
            s.early_refreshes,
            s.stale_served,
            s.load_errors,
            maxsize,
            currsize,
        )

    def clear(self) -> None:
        with self.lock:
            self.cache.clear()


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen (asyncio logs unseen ones as errors)."""
    if not future.cancelled():
        future.exception()


class _LeaderGone(Exception):
    """The loader of a key was cancelled or interrupted: its waiters load the key themselves."""


#: The keys the current task chain is loading, as ``(id(memo), key)``: what the thread of a
#: sync flight is to the sync path (a task, and the tasks it starts, inherit it).
_LOADING: contextvars.ContextVar[frozenset[tuple[int, Hashable]]] = contextvars.ContextVar(
    "smoothclient_cache_loading", default=frozenset()
)


def _sync_wrapper(fn: Callable[..., Any], memo: _Memo[Any], key: Callable[..., Hashable]) -> Any:
    def load(k: Hashable, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``fn`` once for ``k`` however many threads ask at once."""
        while True:
            with memo.flights_lock:
                flight: _Flight | None = memo.flights.get(k)
                if flight is None:
                    flight = memo.flights[k] = _Flight()
                    break
            if flight.leader == threading.get_ident():  # fn calls itself with its own key
                return fn(*args, **kwargs)  # waiting on itself would never end: no caching
            flight.done.wait()
            if isinstance(flight.error, _LeaderGone):  # its loader was interrupted
                entry = memo.loaded(k)  # another waiter may have loaded it by now
                if entry is not None:
                    return entry.value
                continue  # load it here, or follow whoever does
            if flight.error is not None:
                raise flight.error
            return flight.value
        try:  # (from here on the flight ends, whatever raises: a clock too)
            start = memo.now()
            memo.stats.add("loads")
            flight.value = fn(*args, **kwargs)
            memo.store(k, flight.value, memo.now() - start)
            return flight.value
        except Exception as exc:
            memo.stats.add("load_errors")
            flight.error = exc
            raise
        except BaseException:  # interrupted (KeyboardInterrupt, SystemExit): not the waiters
            memo.stats.add("load_errors")
            flight.error = _LeaderGone()
            raise
        finally:
            with memo.flights_lock:
                del memo.flights[k]
            flight.done.set()

    def refresh_in_background(k: Hashable, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        with memo.flights_lock:
            if k in memo.flights:
                return

        def run() -> None:
            # the stale value keeps being served; a failure is counted in load_errors
            with contextlib.suppress(Exception):
                load(k, args, kwargs)

        threading.Thread(target=run, name="smoothclient-refresh", daemon=True).start()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        k = key(*args, **kwargs)
        action, entry = memo.route(k)
        if action == "hit":
            return entry.value
        if action == "background":
            refresh_in_background(k, args, kwargs)
            return entry.value
        try:
            return load(k, args, kwargs)
        except Exception:
            if memo.stands_in(action, entry):
                return entry.value
            raise

    return wrapper


def _async_wrapper(
    fn: Callable[..., Awaitable[Any]], memo: _Memo[Any], key: Callable[..., Hashable]
) -> Any:
    async def load(k: Hashable, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """
        Run ``fn`` once for ``k`` however many tasks ask at once, on any event loops.

        The flight is a thread-safe future, so tasks of other loops (other threads) wait on it
        too; a waiter whose leader was cancelled loads the key itself.
        """
        mine = (id(memo), k)
        while True:
            with memo.flights_lock:
                flight: concurrent.futures.Future[Any] | None = memo.flights.get(k)
                if flight is None:
                    flight = memo.flights[k] = concurrent.futures.Future()
                    flight.set_running_or_notify_cancel()  # a waiter's cancel never reaches it
                    break
            if mine in _LOADING.get():  # fn awaits itself with its own key (as the sync path)
                return await fn(*args, **kwargs)  # waiting on itself would never end: no caching
            waited = asyncio.wrap_future(flight)
            waited.add_done_callback(_retrieve)  # a cancelled waiter leaves it unread
            try:
                return await asyncio.shield(waited)
            except _LeaderGone:  # its loader was cancelled
                entry = memo.loaded(k)  # another waiter may have loaded it by now
                if entry is not None:
                    return entry.value
        loading = _LOADING.set(_LOADING.get() | {mine})
        try:  # (from here on the flight ends, whatever raises: a clock too)
            start = memo.now()
            memo.stats.add("loads")
            value = await fn(*args, **kwargs)
            memo.store(k, value, memo.now() - start)
            flight.set_result(value)
            return value
        except Exception as exc:
            memo.stats.add("load_errors")
            flight.set_exception(exc)
            raise
        except BaseException:  # cancelled: the waiters are not, they load it themselves
            memo.stats.add("load_errors")
            flight.set_exception(_LeaderGone())
            raise
        finally:
            with memo.flights_lock:
                del memo.flights[k]
            # closed outside its task's context (the GC of a loop closed with it pending):
            # that context is gone, and so is the mark
            with contextlib.suppress(ValueError):
                _LOADING.reset(loading)

    background: set[asyncio.Task[Any]] = set()

    async def quiet(k: Hashable, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # the stale value keeps being served; a failure is counted in load_errors
        with contextlib.suppress(Exception):
            await load(k, args, kwargs)

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        k = key(*args, **kwargs)
        action, entry = memo.route(k)
        if action == "hit":
            return entry.value
        if action == "background":
            if k not in memo.flights:
                task = asyncio.get_running_loop().create_task(quiet(k, args, kwargs))
                background.add(task)
                task.add_done_callback(background.discard)
            return entry.value
        try:
            return await load(k, args, kwargs)
        except Exception:
            if memo.stands_in(action, entry):
                return entry.value
            raise

    return wrapper


def cached(
    cache: Any,
    *,
    key: Callable[..., Hashable] = hashkey,
    lock: Any = None,
    early_refresh: float | None = None,
    stale_while_revalidate: float | None = None,
    stale_if_error: float | None = None,
    info: bool = False,
    rng: random.Random | None = None,
) -> Callable[[F], F]:
    """
    Memoize a sync or async function in ``cache``, loading each key once at a time.

    Args:
        cache: any cachetools cache (a :class:`JitteredTTLCache` for the features below).
        key: builds the cache key from the arguments (cachetools' ``hashkey`` by default; use
            ``cachetools.keys.methodkey`` for methods).
        lock: guards the cache (default: a new ``threading.RLock``).
        early_refresh: XFetch's ``beta`` (1.0 is the paper's default): a hot key is reloaded by
            one caller shortly before it expires, so nobody waits on a miss.
        stale_while_revalidate: for this many seconds after expiry, return the stale value at
            once and reload once in the background (a thread, or a task for async functions).
        stale_if_error: for this many seconds after expiry, serve the stale value when the
            reload fails.
        info: add ``cache_info()`` and ``cache_clear()`` to the wrapper.
        rng: randomness for early refresh.

    Exceptions are never cached: every caller waiting on a failed load gets its exception.
    Single-flight holds across threads and, for async functions, across the tasks of any
    number of asyncio event loops (a loader that is cancelled hands the key to its waiters).
    Async functions need asyncio (not trio): the flights and background refreshes use it.
    A function that calls (or awaits) itself with the key it is loading gets that inner call
    run uncached: waiting on its own load would never end.  A generator function is refused
    (``TypeError``): its generator, once cached, would reach later callers exhausted.
    """
    if callable(cache) and not hasattr(cache, "__setitem__"):
        msg = (
            "cached needs a cache: write @cached(JitteredTTLCache(maxsize, ttl)) (or any "
            f"cachetools cache), not a bare @cached (got the function {cache!r})"
        )
        raise TypeError(msg)
    if not (hasattr(cache, "get") and hasattr(cache, "__setitem__")):
        msg = f"cache must be a cachetools cache or another mutable mapping, not {cache!r}"
        raise TypeError(msg)
    function("key", key, "of the arguments")
    if lock is not None and not (hasattr(lock, "__enter__") and hasattr(lock, "__exit__")):
        msg = f"lock must be a lock (a context manager, as threading.RLock()), not {lock!r:.40}"
        raise TypeError(msg)
    if rng is not None and not isinstance(rng, random.Random):
        msg = f"rng must be a random.Random (or None), not {type(rng).__name__}"
        raise TypeError(msg)
    info = flag("info", info)
    beta = optional_seconds("early_refresh", early_refresh)
    swr = optional_seconds("stale_while_revalidate", stale_while_revalidate)
    sie = optional_seconds("stale_if_error", stale_if_error)
    needs_expiry = beta is not None or swr is not None or sie is not None
    if needs_expiry and not isinstance(cache, JitteredTTLCache):
        msg = "early_refresh and the stale modes need a JitteredTTLCache (it knows expiries)"
        raise TypeError(msg)

    def decorate(fn: F) -> F:
        kind = kind_of(fn)
        if kind in ("generator", "async generator"):
            msg = (
                "cached cannot cache a generator function: it would keep the generator, which "
                "its first caller exhausts; cache a function that returns a list or tuple"
            )
            raise TypeError(msg)
        memo: _Memo[Any] = _Memo(
            cache, lock or threading.RLock(), beta, swr, sie, rng or random.Random()
        )
        if kind == "coroutine":
            wrapper = _async_wrapper(fn, memo, key)
        else:
            wrapper = _sync_wrapper(fn, memo, key)
        if info:
            wrapper.cache_info = memo.info
            wrapper.cache_clear = memo.clear
        wrapper.cache = cache
        return cast(F, wrapper)

    return decorate


def cache_info(fn: Callable[..., Any]) -> CacheInfo:
    """
    The hits, misses and size of a function decorated with ``@cached(..., info=True)``.

    Typed access (``fn.cache_info()`` is there too, but a type checker does not know it):

    >>> from smoothclient import JitteredTTLCache, cached
    >>> from smoothclient.cache import cache_info
    >>> @cached(JitteredTTLCache(maxsize=8, ttl=60), info=True)
    ... def double(x: int) -> int:
    ...     return 2 * x
    >>> double(2)
    4
    >>> cache_info(double).misses
    1
    """
    found = getattr(fn, "cache_info", None)
    if found is None:
        name = getattr(fn, "__qualname__", fn)
        msg = f"{name!r} keeps no cache info: decorate it with @cached(..., info=True)"
        raise TypeError(msg)
    info: CacheInfo = found()
    return info
