"""
The HTTP cache in front of any edge's call flow: look up, send with validators, store, stand in.

An edge wires an :class:`~smoothclient.httpcache.HttpCache` in a few lines: it describes its
responses once as an :class:`EdgeIO`, and its send (the whole retry-and-pacing flow, with
extra headers) goes through :func:`cached_send` (or :func:`cached_send_async`)::

    io = EdgeIO(
        status=lambda r: r.status_code,
        headers=lambda r: r.headers.items(),
        build=built_response,  # (entry, record dict) -> a response of the library
        tee=teed,  # (response, recorder) -> the response, its body fed to recorder as read
        consume=read_and_close,  # reads a response to its end (background revalidations)
        close=close,  # releases a response unread
        record=lambda r: r.extensions.get("smoothclient"),  # the flow's record dict, if any
        failures=(httpx.TransportError, RateLimited),  # what stale-if-error answers for
    )

    def handle_request(self, request):
        if self.cache is None:
            return self.send_through_flow(request, {})
        return cached_send(
            self.cache, io, request.method, str(request.url), request.headers.items(),
            lambda extra: self.send_through_flow(request, extra), time.sleep,
        )

``tee`` is handed a :class:`~smoothclient.httpcache.lookup.Recorder`: feed it the body as the
caller reads it, decoded (the stored headers then drop ``Content-Encoding``: requests), or as
sent after ``recorder.as_sent()`` (an httpx transport sees the bytes before the client decodes
them: ``Content-Encoding`` is kept, and ``build`` gets it back to decode), then ``finish()``
at its end, or ``abandon()`` when the response is closed before (``recorder.tee(chunks)`` and
``recorder.atee(chunks)`` wrap a body stream doing all that); a response whose body was read
already is fed whole at once.  ``tests/httpcache/test_httpx_wiring.py`` wires an httpx
transport this way, whole.

The record of every response the caller gets says ``cache``: ``"hit"``, ``"miss"``,
``"revalidated"``, ``"stale"`` or ``"bypass"`` (the layer sets it on the dict ``record``
returns, or builds it).  A hit never reaches ``send``: it costs no pacing.  A revalidation
is ``send`` with validators: paced and retried like any request.  docs/http-cache.md
section 4 says what each outcome does.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..events import CallRecord
from ..httpcache.cache import HttpCache
from ..httpcache.entry import Entry
from ..httpcache.lookup import Fetch, Keep, Lookup, Pass, Recorder, Refuse, Serve, Wait

__all__ = [
    "EdgeIO",
    "cached_send",
    "cached_send_async",
    "in_thread",
    "off_loop",
    "refused",
    "served_record",
]

R = TypeVar("R")
T = TypeVar("T")
Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class EdgeIO(Generic[R]):
    """How the cache layer reads, builds and finishes one edge's responses (see above)."""

    status: Callable[[R], int]
    headers: Callable[[R], Iterable[tuple[str, str]]]
    build: Callable[[Entry, Record], R]
    tee: Callable[[R, Recorder], R]
    consume: Callable[[R], object]
    close: Callable[[R], object]
    record: Callable[[R], Record | None]
    failures: tuple[type[BaseException], ...] = (Exception,)


def served_record(entry: Entry, label: str, record: Record | None = None) -> Record:
    """
    The record of a call the cache answered with ``entry``.

    ``record``: the flow's, when a request was sent (a revalidation, an error stood in for):
    its attempts and waits are kept, its status becomes the stored one's.
    """
    if record is None:
        return CallRecord(status=entry.status, cache=label).as_dict()
    return {**record, "status": entry.status, "cache": label}


def refused(lookup: Lookup) -> Entry:
    """The 504 an ``only-if-cached`` request gets when nothing stored may answer it."""
    return Entry(lookup.key, 504, (("Content-Length", "0"),), b"", (), (), 0.0, 0.0, 0.0)


def in_thread(work: Callable[[], object]) -> None:
    """Run ``work`` in a daemon thread (a background revalidation)."""
    threading.Thread(target=work, name="smoothclient-revalidate", daemon=True).start()


def cached_send(
    cache: HttpCache,
    io: EdgeIO[R],
    method: str,
    url: str,
    headers: Iterable[tuple[str, str]],
    send: Callable[[dict[str, str]], R],
    sleep: Callable[[float], object],
    spawn: Callable[[Callable[[], object]], None] = in_thread,
    *,
    streamed: bool = False,
) -> R:
    """
    One call through ``cache``: a stored response, or ``send(extra_headers)``'s, stored.

    ``streamed``: the caller reads the body when it likes (requests' ``stream=True``), so the
    key is not held while it does (others needing the key go to the origin meanwhile, rather
    than wait on a read that may never come); the body is still stored once read to its end.

    ``spawn`` runs a background revalidation (``stale-while-revalidate``, or one sent at an
    entry's refresh point: it sleeps until then with ``sleep``).
    """
    lookup = Lookup(cache, method, url, list(headers))
    step = lookup.step()
    while isinstance(step, Wait):
        sleep(step.seconds)
        step = lookup.step()
    if not isinstance(step, Fetch):

        def revalidate(delay: float) -> None:
            spawn(lambda: _revalidate(lookup, io, send, sleep, delay))

        return _from_store(lookup, io, step, revalidate)
    try:
        response = send(step.headers)
    except io.failures as exc:
        return _stand_in(lookup, io, exc, lookup.failed())
    except BaseException:
        lookup.done()
        raise
    answer = _answer(lookup, io, response, _received(lookup, io, response))[0]
    if streamed:
        lookup.done()
    return answer


def _from_store(
    lookup: Lookup, io: EdgeIO[R], step: Serve | Refuse, revalidate: Callable[[float], None]
) -> R:
    """The response from the store (a 504 for ``only-if-cached``), revalidations started."""
    if isinstance(step, Refuse):
        gateway_timeout = refused(lookup)
        return io.build(gateway_timeout, served_record(gateway_timeout, "miss"))
    if step.background:
        revalidate(step.delay)
    return io.build(step.entry, served_record(step.entry, step.label))


def _stand_in(lookup: Lookup, io: EdgeIO[R], exc: BaseException, found: Serve | None) -> R:
    """The stored response ``found`` that answers for ``exc`` (stale-if-error), or ``exc``."""
    if found is None:
        raise exc
    record = getattr(exc, "smoothclient", None)
    return io.build(found.entry, served_record(found.entry, found.label, record))


def _received(lookup: Lookup, io: EdgeIO[R], response: R) -> Serve | Keep | Pass:
    """What the lookup makes of the origin's ``response`` (the store read and written)."""
    try:
        return lookup.received(io.status(response), io.headers(response))
    except BaseException:
        lookup.done()
        raise


def _answer(
    lookup: Lookup,
    io: EdgeIO[R],
    response: R,
    outcome: Serve | Keep | Pass,
    defer: Callable[[Callable[[], object]], object] | None = None,
) -> tuple[R, bool, object]:
    """
    The caller's response for the origin's ``response`` and the lookup's ``outcome`` of it.

    Also whether it is that response, and what closing it returned (an awaitable, on async
    edges).  A 304 (or an error a stored response stands in for) is closed and answered from
    the store.  ``defer``: where the body's recorder does the store's work at its end.
    """
    record = io.record(response)
    if isinstance(outcome, Serve):
        closed = io.close(response)
        built = io.build(outcome.entry, served_record(outcome.entry, outcome.label, record))
        return built, False, closed
    if record is not None:
        record["cache"] = lookup.label
    if isinstance(outcome, Keep):
        outcome.recorder.defer = defer
        return io.tee(response, outcome.recorder), True, None
    return response, True, None


def _revalidate(
    lookup: Lookup,
    io: EdgeIO[R],
    send: Callable[[dict[str, str]], R],
    sleep: Callable[[float], object],
    delay: float,
) -> None:
    """
    A background revalidation, sent ``delay`` s from now: its result stored.

    A failure leaves the stored copy.
    """
    try:
        if delay > 0:
            sleep(delay)
        response = send(lookup.background().headers)
        response, fetched, _ = _answer(lookup, io, response, _received(lookup, io, response))
        if fetched:
            io.consume(response)  # read to its end: a Keep stores it
    except Exception:
        pass
    finally:
        lookup.done()


#: The threads the async edges' store calls run in (made on first use, again after a fork).
_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="smoothclient-store")
            _POOL = (os.getpid(), executor)
        return _POOL[1]


def _in_pool(work: Callable[[], object]) -> None:
    """Run ``work`` in a store thread, not waiting for it (the end of a body read)."""
    _pool().submit(contextvars.copy_context().run, work)


async def off_loop(cache: HttpCache, work: Callable[[], T], cleanup: Callable[[], object]) -> T:
    """
    ``work()`` (a lookup's step, reading and writing the store) without blocking the loop.

    At once when the cache's store is :attr:`~smoothclient.httpcache.HttpCache.inline` (the
    memory store), else in a thread (asyncio: a pool of this module; trio: its own threads).
    ``cleanup``: run after ``work`` if the caller is cancelled meanwhile (a claim given back).
    """
    if cache.inline:
        return work()
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: trio, which waits for the thread when cancelled
        import trio

        return await trio.to_thread.run_sync(work)
    future: Future[T] = _pool().submit(contextvars.copy_context().run, work)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.add_done_callback(lambda _: cleanup())
        raise


def _release(lookup: Lookup) -> None:
    """Give back the lookup's claim without waiting (in a store thread, unless inline)."""
    if lookup.cache.inline:
        lookup.done()
    else:
        _in_pool(lookup.done)


async def cached_send_async(
    cache: HttpCache,
    io: EdgeIO[R],
    method: str,
    url: str,
    headers: Iterable[tuple[str, str]],
    send: Callable[[dict[str, str]], Awaitable[R]],
    sleep: Callable[[float], Awaitable[object]],
    spawn: Callable[[Callable[[], Awaitable[None]]], None],
    *,
    streamed: bool = False,
) -> R:
    """
    Async twin of :func:`cached_send`: the store's calls never block the loop.

    ``io.consume`` and ``io.close`` may return awaitables (awaited); ``spawn`` starts a
    background revalidation as a task (``asyncio``: keep a reference to it until it ends).
    The lookup's steps run where :func:`off_loop` says; a body's recorder stores it from a
    store thread, not waited for (the key stays claimed until it is stored).
    """
    lookup = Lookup(cache, method, url, list(headers))
    step = await off_loop(cache, lookup.step, lookup.done)
    while isinstance(step, Wait):
        await sleep(step.seconds)
        step = await off_loop(cache, lookup.step, lookup.done)
    if not isinstance(step, Fetch):

        def revalidate(delay: float) -> None:
            async def work() -> None:
                await _revalidate_async(lookup, io, send, sleep, delay)

            spawn(work)

        return _from_store(lookup, io, step, revalidate)
    try:
        response = await send(step.headers)
    except io.failures as exc:
        return _stand_in(lookup, io, exc, await off_loop(cache, lookup.failed, lookup.done))
    except BaseException:
        _release(lookup)
        raise
    answer, _, closed = await _answer_async(lookup, io, response)
    await _maybe(closed)
    if streamed:
        _release(lookup)
    return answer


async def _answer_async(lookup: Lookup, io: EdgeIO[R], response: R) -> tuple[R, bool, object]:
    """:func:`_answer` with the lookup's step off the loop, the body's store work too."""
    outcome = await off_loop(lookup.cache, lambda: _received(lookup, io, response), lookup.done)
    defer = None if lookup.cache.inline else _in_pool
    return _answer(lookup, io, response, outcome, defer)


async def _revalidate_async(
    lookup: Lookup,
    io: EdgeIO[R],
    send: Callable[[dict[str, str]], Awaitable[R]],
    sleep: Callable[[float], Awaitable[object]],
    delay: float,
) -> None:
    try:
        if delay > 0:
            await sleep(delay)
        fetch = lookup.background()
        response, fetched, closed = await _answer_async(lookup, io, await send(fetch.headers))
        await _maybe(closed)
        if fetched:
            await _maybe(io.consume(response))  # read to its end: a Keep stores it
    except Exception:
        _release(lookup)  # (a lookup that ended gives nothing back twice)
    except BaseException:  # cancelled (the loop closing while it waits): the claim goes back
        _release(lookup)
        raise


async def _maybe(result: object) -> None:
    if inspect.isawaitable(result):
        await result
