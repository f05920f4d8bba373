"""
On the async edges a store that waits on I/O (SQLite, Redis, any store not ``inline``) never
blocks the event loop: its calls run in threads, while the memory store is called inline.

The watchdog: a task ticking every 10 ms beside a call through a store whose reads and writes
each block 0.2 s (``time.sleep``); on a blocked loop one tick would take 0.2 s or more.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

import aiohttp
import anyio
import httpx
import pytest
from aiohttp import web

from smoothclient import AsyncSmoothTransport, HttpCache, Pacer, RetryPolicy, record_of
from smoothclient.aiohttp import SmoothMiddleware
from smoothclient.edges import cached
from smoothclient.httpcache import Entry
from smoothclient.httpcache.stores import MemoryStore, SqliteStore

URL = "https://api.test/items"
FRESH = {"Cache-Control": "max-age=60"}
#: How long each read and write of the slow store blocks its thread.
SLOW = 0.2


class SlowStore:
    """A store whose reads and writes block ``SLOW`` seconds (a slow disk, a far Redis)."""

    def __init__(self) -> None:
        self.inner = MemoryStore(2**20)

    def get(self, key: str) -> Entry | None:
        time.sleep(SLOW)
        return self.inner.get(key)

    def put(self, entry: Entry, ttl: float) -> None:
        time.sleep(SLOW)
        self.inner.put(entry, ttl)

    def delete(self, keys: Iterable[str]) -> None:
        self.inner.delete(keys)

    def claim(self, key: str, ttl: float) -> bool:
        return True

    def release(self, key: str) -> None:
        """Nothing held."""

    def close(self) -> None:
        """Nothing to close."""


async def longest_tick(work: Callable[[], Awaitable[object]]) -> float:
    """The longest a 10 ms tick of a concurrent task took while ``work`` ran."""
    longest = 0.0
    running = True

    async def tick() -> None:
        nonlocal longest
        last = time.monotonic()
        while running:
            await anyio.sleep(0.01)
            now = time.monotonic()
            longest, last = max(longest, now - last), now

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(tick)
        await anyio.sleep(0.02)
        await work()
        running = False
    return longest


def _transport(cache: HttpCache, sent: list[httpx.Request]) -> AsyncSmoothTransport:
    async def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, headers=FRESH, content=b"body")

    return AsyncSmoothTransport(
        httpx.MockTransport(answer), policy=RetryPolicy(attempts=1), pacer=Pacer(), cache=cache
    )


async def _until_stored(cache: HttpCache) -> None:
    """The write runs behind the call: wait for it (at most a second)."""
    for _ in range(100):
        if await anyio.to_thread.run_sync(cache.get, "GET " + URL) is not None:
            return
        await anyio.sleep(0.01)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_slow_store_does_not_stall_the_loop_of_an_httpx_client(backend: str) -> None:
    cache = HttpCache(SlowStore())
    sent: list[httpx.Request] = []
    labels: list[str | None] = []

    async def main() -> float:
        async with httpx.AsyncClient(transport=_transport(cache, sent)) as client:

            async def twice() -> None:
                for _ in range(2):
                    response = await client.get(URL)
                    labels.append(record_of(response).cache)  # type: ignore[union-attr]
                    await _until_stored(cache)

            return await longest_tick(twice)

    longest = anyio.run(main, backend=backend)
    assert labels == ["miss", "hit"]  # the store worked, from its threads
    assert len(sent) == 1
    assert longest < SLOW / 2  # the loop kept ticking through 0.2 s store calls


def test_a_slow_store_does_not_stall_the_loop_of_an_aiohttp_session() -> None:
    cache = HttpCache(SlowStore())
    labels: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        return web.Response(headers=FRESH, body=b"body")

    async def main() -> float:
        app = web.Application()
        app.router.add_get("/items", answer)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/items"
        edge = SmoothMiddleware(policy=RetryPolicy(attempts=1), pacer=Pacer(), cache=cache)
        try:
            async with aiohttp.ClientSession(middlewares=(edge,)) as session:

                async def twice() -> None:
                    for _ in range(2):
                        async with session.get(url) as response:
                            await response.read()
                            labels.append(record_of(response).cache)  # type: ignore[union-attr]
                        for _ in range(100):  # the write runs behind the call
                            if await asyncio.to_thread(cache.get, f"GET {url}") is not None:
                                break

                return await longest_tick(twice)
        finally:
            await runner.cleanup()

    longest = asyncio.run(main())
    assert labels == ["miss", "hit"]
    assert longest < SLOW / 2


def test_the_memory_store_is_called_on_the_loop_without_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_threads() -> None:
        raise AssertionError("the memory store went to a thread")

    monkeypatch.setattr(cached, "_pool", no_threads)
    cache = HttpCache()
    assert cache.inline
    sent: list[httpx.Request] = []

    async def main() -> list[str | None]:
        async with httpx.AsyncClient(transport=_transport(cache, sent)) as client:
            responses = [await client.get(URL) for _ in range(2)]
        return [record_of(r).cache for r in responses]  # type: ignore[union-attr]

    assert asyncio.run(main()) == ["miss", "hit"]


def test_only_the_memory_store_is_inline(tmp_path: object) -> None:
    assert HttpCache().inline
    assert not HttpCache(f"sqlite://{tmp_path}/c.db").inline
    assert not HttpCache(SlowStore()).inline
    assert isinstance(HttpCache(f"sqlite://{tmp_path}/d.db").store, SqliteStore)
