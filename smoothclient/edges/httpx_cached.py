"""
The HTTP cache on the httpx and httpx2 transports (``cache=``), as :mod:`.cached` needs it.

A transport sees a body as sent, before the client decodes it: the stored body keeps its
``Content-Encoding`` (``recorder.as_sent()``), and a response built from it is decoded by the
client as the first answer was.  A stored response comes back as the library's ``Response``
(no connection, no pacing); a storable one has its stream wrapped so its body is stored once
read to the end (docs/http-cache.md section 4).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import ModuleType
from typing import Any, Protocol

from ..errors import RateLimited
from ..httpcache.cache import HttpCache
from ..httpcache.entry import Entry
from ..httpcache.lookup import Recorder
from .cached import EdgeIO, Record, cached_send, cached_send_async

__all__ = ["Ended", "Library", "send_async_cached", "send_cached"]


class Library(Protocol):
    """What this layer needs of one library of the httpx family (an ``httpx_common.Family``)."""

    lib: ModuleType
    Response: type[Any]
    transport_error: type[Exception]


#: How a sent call's response and record end (the edge's hooks and metrics).
Ended = Callable[[Any, Record], object]

#: Background revalidations on asyncio, kept referenced until they end.
_TASKS: set[asyncio.Task[None]] = set()


@functools.cache
def _streams(lib: Any) -> tuple[type[Any], type[Any]]:
    """The library's sync and async byte streams that also feed a recorder (made once each)."""

    class Tee(lib.SyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any, recorder: Recorder) -> None:
            self.inner, self.recorder = inner, recorder.as_sent()

        def __iter__(self) -> Iterator[bytes]:
            yield from self.recorder.tee(self.inner)

        def close(self) -> None:
            self.recorder.abandon()  # (after the end: stored already, nothing to abandon)
            self.inner.close()

    class ATee(lib.AsyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any, recorder: Recorder) -> None:
            self.inner, self.recorder = inner, recorder.as_sent()

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.recorder.atee(self.inner):
                yield chunk

        async def aclose(self) -> None:
            self.recorder.abandon()
            await self.inner.aclose()

    return Tee, ATee


def _io(fam: Library, request: Any, ended: Ended, sync: bool) -> EdgeIO[Any]:
    """How the cache layer reads, builds, tees and finishes this library's responses."""
    tee_sync, tee_async = _streams(fam.lib)

    def build(entry: Entry, record: Record) -> Any:
        # a value httpx read as UTF-8 or Latin-1 goes back as UTF-8 (httpx encodes a str as
        # ASCII, and a server's "ü" failed every hit): read again, it is the same text
        response = fam.Response(
            entry.status,
            headers=[(k, v if v.isascii() else v.encode()) for k, v in entry.headers],
            # a stream not yet read, as a transport's: iter_raw() works on a hit too
            stream=fam.lib.ByteStream(entry.body),
            request=request,
            extensions={"smoothclient": record},
        )
        if not record["attempts"]:  # answered by the cache alone (a sent call's hooks fired)
            ended(response, record)
        return response

    def tee(response: Any, recorder: Recorder) -> Any:
        if hasattr(response, "_content"):  # read already: its content decoded
            recorder.feed(response.content)
            recorder.finish()
        elif isinstance(response.stream, fam.lib.SyncByteStream) and sync:
            response.stream = tee_sync(response.stream, recorder)
        elif isinstance(response.stream, fam.lib.AsyncByteStream) and not sync:
            response.stream = tee_async(response.stream, recorder)
        else:
            recorder.abandon()
        return response

    def consume(response: Any) -> Any:
        if sync:
            try:
                return response.read()
            finally:
                response.close()

        async def read() -> None:
            try:
                await response.aread()
            finally:
                await response.aclose()

        return read()

    return EdgeIO(
        status=lambda r: r.status_code,
        headers=lambda r: r.headers.multi_items(),
        build=build,
        tee=tee,
        consume=consume,
        close=(lambda r: r.close()) if sync else (lambda r: r.aclose()),
        record=lambda r: r.extensions.get("smoothclient"),
        failures=(fam.transport_error, RateLimited),
    )


def _with(request: Any, extra: dict[str, str]) -> Any:
    """``request`` with the validators' headers added."""
    request.headers.update(extra)
    return request


def send_cached(
    fam: Library,
    cache: HttpCache,
    request: Any,
    ended: Ended,
    handle: Callable[[Any], Any],
    sleep: Callable[[float], Any],
) -> Any:
    """``request`` through ``cache``; ``handle`` sends it through the edge's retry flow."""

    def network(extra: dict[str, str]) -> Any:
        return handle(_with(request, extra))

    headers = request.headers.multi_items()
    io = _io(fam, request, ended, sync=True)
    return cached_send(cache, io, request.method, str(request.url), headers, network, sleep)


def _spawn(work: Callable[[], Awaitable[None]]) -> None:
    """A background revalidation as a task of the running loop (asyncio or trio)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: trio
        import trio

        trio.lowlevel.spawn_system_task(work)
        return
    coroutine: Any = work()
    task: asyncio.Task[None] = loop.create_task(coroutine)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


async def send_async_cached(
    fam: Library,
    cache: HttpCache,
    request: Any,
    ended: Ended,
    handle: Callable[[Any], Awaitable[Any]],
    sleep: Callable[[float], Any],
) -> Any:
    """Async twin of :func:`send_cached`."""

    async def network(extra: dict[str, str]) -> Any:
        return await handle(_with(request, extra))

    headers = request.headers.multi_items()
    io = _io(fam, request, ended, sync=False)
    return await cached_send_async(
        cache, io, request.method, str(request.url), headers, network, sleep, _spawn
    )
