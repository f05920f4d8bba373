"""The jittered cache and cached(): fake timers, threads and tasks that really meet."""

from __future__ import annotations

import asyncio
import math
import pickle
import random
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator

import cachetools
import pytest

from smoothclient.cache import JitteredTTLCache, cached
from smoothclient.testing import FakeClock


def test_lifetimes_never_exceed_ttl_and_spread() -> None:
    """10,000 entries written at t=0 with ttl 60, jitter 0.1 expire within [54, 60], spread."""
    clock = FakeClock(0.0)
    cache: JitteredTTLCache[int, int] = JitteredTTLCache(
        20_000, 60, timer=clock, jitter=0.1, rng=random.Random(3)
    )
    for i in range(10_000):
        cache[i] = i
    expiries: list[float] = []
    clock.advance(53.9)
    t = 53.9
    while len(cache):
        before = len(cache)
        clock.advance(0.1)
        t += 0.1
        cache.expire()
        expiries += [t] * (before - len(cache))
    assert min(expiries) >= 54.0 - 1e-9
    assert max(expiries) <= 60.0 + 0.1
    per_step = Counter(round(e, 1) for e in expiries)
    mean = 10_000 / 60  # 6 s window, 60 steps of 0.1 s
    assert max(per_step.values()) <= 2 * mean


def test_drop_in_for_ttlcache() -> None:
    clock = FakeClock(0.0)
    cache: JitteredTTLCache[str, int] = JitteredTTLCache(2, 10, clock)
    cache["a"] = 1
    assert cache.ttl == 10
    assert cache["a"] == 1
    clock.advance(10.0)
    assert "a" not in cache
    cache["a"], cache["b"], cache["c"] = 1, 2, 3
    assert len(cache) == 2  # maxsize holds

    @cachetools.cached(JitteredTTLCache(10, 60))
    def double(x: int) -> int:
        return 2 * x

    assert double(2) == 4


def test_per_entry_ttl() -> None:
    clock = FakeClock(0.0)
    cache: JitteredTTLCache[str, int] = JitteredTTLCache(10, 100, clock, jitter=0.0)
    cache.set("short", 1, ttl=1)
    cache["long"] = 2
    clock.advance(1.0)
    assert "short" not in cache
    assert "long" in cache


def test_picklable() -> None:
    cache: JitteredTTLCache[str, int] = JitteredTTLCache(10, 60, jitter=0.2)
    cache["a"] = 1
    copy = pickle.loads(pickle.dumps(cache))
    assert copy["a"] == 1
    assert (copy.ttl, copy.jitter) == (60, 0.2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ttl": 0}, "ttl"),
        ({"ttl": 5, "jitter": 1.0}, "jitter"),
        ({"ttl": 5, "jitter": -0.1}, "jitter"),
    ],
)
def test_validation(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        JitteredTTLCache(10, **kwargs)  # type: ignore[arg-type]


def test_stale_modes_need_a_jittered_cache() -> None:
    with pytest.raises(TypeError, match="JitteredTTLCache"):
        cached(cachetools.TTLCache(10, 60), stale_while_revalidate=5)


def test_hits_misses_and_errors_not_cached() -> None:
    calls: list[int] = []

    @cached(JitteredTTLCache(10, 60), info=True)
    def f(x: int) -> int:
        calls.append(x)
        if x < 0:
            raise ValueError("negative")
        return x * 10

    assert f(1) == f(1) == 10
    with pytest.raises(ValueError, match="negative"):
        f(-1)
    with pytest.raises(ValueError, match="negative"):
        f(-1)
    assert calls == [1, -1, -1]
    info = f.cache_info()  # type: ignore[attr-defined]
    assert (info.hits, info.misses, info.loads, info.load_errors) == (1, 3, 3, 2)
    f.cache_clear()  # type: ignore[attr-defined]
    assert f.cache_info().currsize == 0  # type: ignore[attr-defined]


def test_single_flight_threads() -> None:
    """64 threads miss one key at once: exactly one load, everyone gets its result."""
    loads = 0
    gate = threading.Event()

    @cached(JitteredTTLCache(10, 60))
    def slow(key: str) -> str:
        nonlocal loads
        loads += 1
        gate.wait(2)
        return key.upper()

    results: list[str] = []
    ready = threading.Barrier(65)

    def call() -> None:
        ready.wait(5)
        results.append(slow("k"))

    threads = [threading.Thread(target=call) for _ in range(64)]
    for t in threads:
        t.start()
    ready.wait(5)  # every thread is about to call
    time.sleep(0.05)
    gate.set()
    for t in threads:
        t.join()
    assert loads == 1
    assert results == ["K"] * 64


def test_single_flight_shares_the_error() -> None:
    loads = 0
    gate = threading.Event()

    @cached(JitteredTTLCache(10, 60))
    def failing(key: str) -> str:
        nonlocal loads
        loads += 1
        gate.wait(2)
        raise RuntimeError("upstream down")

    errors: list[BaseException] = []
    ready = threading.Barrier(65)

    def call() -> None:
        ready.wait(5)
        try:
            failing("k")
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(64)]
    for t in threads:
        t.start()
    ready.wait(5)  # every thread is about to call
    time.sleep(0.05)
    gate.set()
    for t in threads:
        t.join()
    assert loads == 1
    assert len(errors) == 64


def test_single_flight_tasks() -> None:
    loads = 0

    @cached(JitteredTTLCache(10, 60))
    async def slow(key: str) -> str:
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.01)
        return key * 2

    async def main() -> list[str]:
        return await asyncio.gather(*(slow("ab") for _ in range(64)))

    assert asyncio.run(main()) == ["abab"] * 64
    assert loads == 1


def test_async_error_shared_and_not_cached() -> None:
    loads = 0

    @cached(JitteredTTLCache(10, 60))
    async def failing(key: str) -> str:
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.01)
        raise RuntimeError("down")

    async def main() -> list[object]:
        return await asyncio.gather(*(failing("k") for _ in range(16)), return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) for r in results)
    assert loads == 1
    asyncio.run(main())
    assert loads == 2


def test_single_flight_across_event_loops() -> None:
    """Loops in four threads share one load (each used to fail on the others' future)."""
    loads = 0
    release = threading.Event()

    @cached(JitteredTTLCache(10, 60))
    async def slow(key: str) -> str:
        nonlocal loads
        loads += 1
        while not release.is_set():
            await asyncio.sleep(0.005)
        return key * 2

    results: list[object] = []

    def run() -> None:
        try:
            results.append(asyncio.run(slow("ab")))
        except Exception as exc:  # pragma: no cover - what the test must not see
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)  # all four are in: one loading, three waiting on it
    release.set()
    for thread in threads:
        thread.join(5)
    assert results == ["abab"] * 4
    assert loads == 1


def test_a_cancelled_loader_hands_the_key_to_its_waiters() -> None:
    """The task loading a key is cancelled: a waiter loads it, nobody else sees the cancel."""
    loads = 0

    @cached(JitteredTTLCache(10, 60))
    async def slow(key: str) -> str:
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.02)
        return f"{key}{loads}"

    async def main() -> tuple[bool, list[str]]:
        leader = asyncio.create_task(slow("k"))
        await asyncio.sleep(0)  # the leader is loading
        waiters = [asyncio.create_task(slow("k")) for _ in range(3)]
        await asyncio.sleep(0.005)
        leader.cancel()
        values = await asyncio.gather(*waiters)
        return leader.cancelled(), values

    cancelled, values = asyncio.run(main())
    assert cancelled
    assert values == ["k2"] * 3  # one new load, shared
    assert loads == 2


class Interrupted(BaseException):
    """Stands for KeyboardInterrupt in the loading thread."""


def test_an_interrupted_loader_thread_hands_the_key_to_its_waiters() -> None:
    loads = 0
    waiting = threading.Event()

    @cached(JitteredTTLCache(10, 60))
    def slow(key: str) -> str:
        nonlocal loads
        loads += 1
        if loads == 1:
            waiting.wait(5)
            time.sleep(0.1)  # the waiters are blocked on this load
            raise Interrupted
        return key

    results: list[object] = []

    def call() -> None:
        try:
            results.append(slow("k"))
        except Interrupted as exc:
            results.append(exc)

    leader = threading.Thread(target=call)
    leader.start()
    time.sleep(0.01)
    waiters = [threading.Thread(target=call) for _ in range(3)]
    for thread in waiters:
        thread.start()
    waiting.set()
    for thread in (leader, *waiters):
        thread.join(5)
    assert sum(isinstance(r, Interrupted) for r in results) == 1  # only the loader's own call
    assert sorted(r for r in results if isinstance(r, str)) == ["k"] * 3
    assert loads == 2


def test_a_cancelled_waiter_leaves_the_load_alone() -> None:
    @cached(JitteredTTLCache(10, 60))
    async def slow(key: str) -> str:
        await asyncio.sleep(0.02)
        return key

    async def main() -> tuple[str, str]:
        leader = asyncio.create_task(slow("k"))
        await asyncio.sleep(0)
        impatient, patient = asyncio.create_task(slow("k")), asyncio.create_task(slow("k"))
        await asyncio.sleep(0.005)
        impatient.cancel()
        return await leader, await patient

    assert asyncio.run(main()) == ("k", "k")


def test_stale_while_revalidate_sync() -> None:
    """After expiry the stale value comes back at once and one background load refreshes it."""
    clock = FakeClock(0.0)
    version = 0
    loaded = threading.Event()

    @cached(JitteredTTLCache(10, 10, clock, jitter=0.0), stale_while_revalidate=30, info=True)
    def get(key: str) -> int:
        nonlocal version
        version += 1
        loaded.set()
        return version

    assert get("k") == 1
    clock.advance(11.0)
    loaded.clear()
    assert get("k") == 1  # stale, served at once
    assert loaded.wait(2)
    deadline = time.monotonic() + 2
    while get("k") != 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert get("k") == 2
    info = get.cache_info()  # type: ignore[attr-defined]
    assert info.stale_served >= 1
    assert info.loads == 2
    clock.advance(100.0)  # past the stale window: a plain miss
    assert get("k") == 3


def test_stale_while_revalidate_async() -> None:
    clock = FakeClock(0.0)
    version = 0

    @cached(JitteredTTLCache(10, 10, clock, jitter=0.0), stale_while_revalidate=30)
    async def get(key: str) -> int:
        nonlocal version
        version += 1
        return version

    async def main() -> list[int]:
        first = await get("k")
        clock.advance(11.0)
        stale = await get("k")
        await asyncio.sleep(0.01)  # let the background refresh run
        return [first, stale, await get("k")]

    assert asyncio.run(main()) == [1, 1, 2]


def test_stale_if_error() -> None:
    clock = FakeClock(0.0)
    fail = False

    @cached(JitteredTTLCache(10, 10, clock, jitter=0.0), stale_if_error=60, info=True)
    def get(key: str) -> str:
        if fail:
            raise ConnectionError("down")
        return "v1"

    assert get("k") == "v1"
    clock.advance(20.0)
    fail = True
    assert get("k") == "v1"  # the reload failed: the stale value stands in
    clock.advance(100.0)
    with pytest.raises(ConnectionError):
        get("k")
    assert get.cache_info().load_errors == 2  # type: ignore[attr-defined]


def test_early_refresh_reloads_before_expiry() -> None:
    """XFetch: with a measured load time, a hot key is reloaded before it expires."""
    clock = FakeClock(0.0)
    loads = 0

    @cached(
        JitteredTTLCache(10, 10, clock, jitter=0.0),
        early_refresh=1.0,
        info=True,
        rng=random.Random(1),
    )
    def get(key: str) -> int:
        nonlocal loads
        loads += 1
        clock.advance(1.0)  # the load takes 1 s of fake time
        return loads

    get("k")  # loaded at t=1, fresh until 11
    values = []
    while clock() < 10.9:
        clock.advance(0.1)
        values.append(get("k"))
    info = get.cache_info()  # type: ignore[attr-defined]
    assert info.early_refreshes >= 1
    assert info.misses == 1  # nobody waited on a miss
    assert values[-1] >= 2


def test_methods_via_methodkey() -> None:
    class Repo:
        def __init__(self) -> None:
            self.calls = 0

        @cached(JitteredTTLCache(10, 60), key=cachetools.keys.methodkey)
        def get(self, key: str) -> str:
            self.calls += 1
            return key

    repo = Repo()
    assert repo.get("a") == repo.get("a") == "a"
    assert repo.calls == 1


def test_bare_cached_raises_when_decorating() -> None:
    """@cached without its cache used to return a function where the value was expected."""

    def load(key: str) -> str:
        return key

    with pytest.raises(TypeError, match=r"cached needs a cache: write @cached\(JitteredTTLCache"):
        cached(load)
    with pytest.raises(TypeError, match="cache must be a cachetools cache or another mutable"):
        cached(5)


def test_async_self_await_on_the_same_key_does_not_deadlock() -> None:
    """An async cached function awaiting itself with its own key completes, as the sync one."""

    @cached(
        cachetools.LRUCache(maxsize=10),
        key=lambda n, depth=0: cachetools.keys.hashkey(n),
        info=True,
    )
    async def load(n: int, depth: int = 0) -> int:
        if depth == 0:
            return await load(n, depth=1)  # inner call: run uncached, not waited on
        return n * 10

    @cached(cachetools.LRUCache(maxsize=10), key=lambda n, depth=0: cachetools.keys.hashkey(n))
    async def fanned(n: int, depth: int = 0) -> int:
        if depth == 0:  # a task it starts (and waits for) asks for the same key
            (inner,) = await asyncio.gather(fanned(n, depth=1))
            return inner + 1
        return n

    async def main() -> tuple[int, int, int]:
        first = await asyncio.wait_for(load(1), timeout=1.0)
        again = await load(1)  # the outer call's value was cached
        return first, again, await asyncio.wait_for(fanned(5), timeout=1.0)

    assert asyncio.run(main()) == (10, 10, 6)
    info = load.cache_info()  # type: ignore[attr-defined]
    assert (info.loads, info.hits) == (1, 1)


def test_other_tasks_still_share_one_load_while_it_awaits_itself() -> None:
    """Only the loading task chain skips the flight; concurrent callers still wait on it."""
    loads = 0

    @cached(cachetools.LRUCache(maxsize=10), key=lambda n, depth=0: cachetools.keys.hashkey(n))
    async def load(n: int, depth: int = 0) -> int:
        nonlocal loads
        if depth == 0:
            loads += 1
            await asyncio.sleep(0.01)
            return await load(n, depth=1)
        return n

    async def main() -> list[int]:
        return await asyncio.wait_for(asyncio.gather(*(load(3) for _ in range(8))), timeout=1.0)

    assert asyncio.run(main()) == [3] * 8
    assert loads == 1


def test_cache_info_is_typed_and_refuses_a_function_without_it() -> None:
    """``cache_info(fn)`` reads what ``@cached(..., info=True)`` keeps; a plain one is refused."""
    from smoothclient.cache import cache_info

    @cached(JitteredTTLCache(maxsize=8, ttl=60), info=True)
    def double(x: int) -> int:
        return 2 * x

    double(1)
    double(1)
    assert (cache_info(double).hits, cache_info(double).misses) == (1, 1)
    with pytest.raises(TypeError, match="info=True"):
        cache_info(lambda: None)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["generator", "async-generator"])
def test_a_generator_function_is_refused(asynchronous: bool) -> None:
    """
    A cached generator kept the generator object: the second caller got it exhausted (nothing).

    It is refused at decoration, saying what to cache instead.
    """
    decorate = cached(JitteredTTLCache(8, 60))
    if asynchronous:

        async def agen() -> AsyncIterator[int]:
            yield 1

        with pytest.raises(TypeError, match=r"generator function.*list or tuple"):
            decorate(agen)
    else:

        def gen() -> Iterator[int]:
            yield 1

        with pytest.raises(TypeError, match=r"generator function.*list or tuple"):
            decorate(gen)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: JitteredTTLCache(math.nan, 60), ValueError, "maxsize must be a number >= 0"),
        (lambda: JitteredTTLCache("8", 60), TypeError, "maxsize must be a number >= 0"),  # type: ignore[arg-type]
        (lambda: JitteredTTLCache(True, 60), TypeError, "maxsize must be a number >= 0"),
        (lambda: cached(JitteredTTLCache(8, 60), lock=3), TypeError, "lock must be a lock"),
        (lambda: cached(JitteredTTLCache(8, 60), rng="x"), TypeError, "rng must be"),  # type: ignore[arg-type]
        (lambda: cached(JitteredTTLCache(8, 60), info="yes"), TypeError, "info must be"),  # type: ignore[arg-type]
    ],
    ids=["maxsize-nan", "maxsize-text", "maxsize-bool", "lock", "rng", "info"],
)
def test_bad_arguments_are_refused_when_made(
    make: Callable[[], object], error: type[Exception], match: str
) -> None:
    """
    A NaN maxsize made a cache that never evicts (unbounded); a text one failed at the first
    store; a lock that is no lock at the first call; an rng that is none at the first early
    refresh; info="yes" passed as True.  Each is refused when made, saying what is allowed.
    """
    with pytest.raises(error, match=match):
        make()
