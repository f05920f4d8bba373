"""
The HTTP cache on the aiohttp edge (``SmoothMiddleware(cache=...)``), as :mod:`.cached` needs it.

aiohttp decodes a body as the caller reads it: the cache stores it decoded (its
``Content-Encoding`` dropped), as on the requests edge.  A stored response comes back as a
``ClientResponse`` of the request's response class, made without a connection, its body in
it (``read()``, ``text()``, ``json()`` and ``content`` all give it).  A storable response's
payload stream is watched: the body is stored once the caller has read it to its end, and
nothing is stored when the response is released or closed before.  The key is not held while
the caller reads (``streamed``): a body read late, or never, holds nobody up.
docs/http-cache.md section 4 says how a call goes.
"""

from __future__ import annotations

import asyncio
import http
import inspect
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp.helpers import TimerNoop
from aiohttp.streams import EmptyStreamReader
from multidict import CIMultiDict, CIMultiDictProxy

from ..errors import RateLimited
from ..httpcache.cache import HttpCache
from ..httpcache.entry import Entry
from ..httpcache.lookup import Recorder
from .cached import EdgeIO, Record, cached_send_async

__all__ = ["Ended", "send_cached"]

#: How a call the cache answered alone ends: the edge's hooks (``response, record``).
Ended = Callable[[aiohttp.ClientResponse, Record], object]
#: What stale-if-error answers for: aiohttp's transport errors, timeouts, the pacer's refusal.
FAILURES = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError, RateLimited)
#: Background revalidations, kept referenced until they end.
_TASKS: set[asyncio.Task[None]] = set()
#: The recorder of each watched payload stream (by the stream's id; see :class:`_Watched`).
_WATCHED: dict[int, Recorder] = {}
#: Content codings aiohttp decodes as it reads (when the session's ``auto_decompress`` is on).
_IDENTITY = frozenset({"", "identity"})


class _Drained:
    """The protocol of a stream fed whole at once: there is no connection to pause."""

    upgraded = False

    def pause_reading(self) -> None:
        """Nothing to pause."""

    def resume_reading(self, resume_parser: bool = True) -> None:
        """Nothing to resume."""


def _filled(body: bytes, loop: asyncio.AbstractEventLoop) -> aiohttp.StreamReader:
    """A payload stream holding ``body``, at its end."""
    reader = aiohttp.StreamReader(_Drained(), 2**16, loop=loop)  # type: ignore[arg-type]
    reader.feed_data(body)
    reader.feed_eof()
    return reader


class _Watched(aiohttp.StreamReader):
    """
    A payload stream whose reads also feed its recorder (``_WATCHED``): the body as read.

    A stream's class is switched to this one (no new slots: the same layout) once its
    response may be stored; every read of aiohttp's ``StreamReader`` takes its bytes through
    ``_read_nowait_chunk``.  The end of the body (the parser's end, nothing left unread)
    stores it; an exception set on the stream (a release, a close, a broken connection)
    before that stores nothing.
    """

    __slots__ = ()

    def _read_nowait_chunk(self, n: int) -> bytes:
        data = super()._read_nowait_chunk(n)
        recorder = _WATCHED.get(id(self))
        if recorder is not None:
            recorder.feed(data)
            if self._eof and not self._buffer:
                _ended(self, finished=True)
        return data

    def feed_eof(self) -> None:
        """The parser's end: the body is whole once nothing is left unread."""
        super().feed_eof()
        if not self._buffer:
            _ended(self, finished=True)

    def set_exception(self, *args: Any, **kwargs: Any) -> None:
        """Released, closed or broken: the body will not be read to its end."""
        super().set_exception(*args, **kwargs)
        _ended(self, finished=False)


def _ended(reader: aiohttp.StreamReader, *, finished: bool) -> None:
    recorder = _WATCHED.pop(id(reader), None)
    if recorder is not None:
        if finished:
            recorder.finish()
        else:
            recorder.abandon()


def _watchable(content: object) -> bool:
    """Whether ``content`` is aiohttp's own stream, nothing read from it yet."""
    return (
        type(content) is aiohttp.StreamReader
        and hasattr(aiohttp.StreamReader, "_read_nowait_chunk")
        and content._cursor == 0
    )


def _tee(auto_decompress: bool) -> Callable[[aiohttp.ClientResponse, Recorder], Any]:
    """How a storable response's body reaches its recorder."""

    def tee(response: aiohttp.ClientResponse, recorder: Recorder) -> aiohttp.ClientResponse:
        coding = response.headers.get("Content-Encoding", "").strip().lower()
        content = response.content
        if coding not in _IDENTITY and not auto_decompress:
            recorder.abandon()  # the bytes are as sent, the stored headers would not say so
        elif response._body is not None:  # read already (an error's small JSON body)
            recorder.feed(response._body)
            recorder.finish()
        elif isinstance(content, EmptyStreamReader):
            recorder.finish()
        elif _watchable(content):
            key = id(content)
            _WATCHED[key] = recorder
            content.__class__ = _Watched
            weakref.finalize(response, _WATCHED.pop, key, None)  # dropped unread: forgotten
            if content._eof and not content._buffer:
                _ended(content, finished=True)
        else:
            recorder.abandon()
        return response

    return tee


class _Unsent:
    """The stream writer of a response made without a connection: it wrote nothing."""

    output_size = 0


#: Whether a response class's constructor takes ``stream_writer`` (aiohttp 3.14), by class.
_WRITER_TAKEN: dict[type[Any], bool] = {}


def _takes_stream_writer(cls: type[Any]) -> bool:
    """Whether the response class's constructor takes ``stream_writer`` (aiohttp 3.14)."""
    taken = _WRITER_TAKEN.get(cls)
    if taken is None:
        taken = _WRITER_TAKEN[cls] = "stream_writer" in inspect.signature(cls).parameters
    return taken


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def built(request: aiohttp.ClientRequest, entry: Entry, record: Record) -> aiohttp.ClientResponse:
    """
    A response of ``request``'s response class made from ``entry``, its record attached.

    Made as aiohttp makes one, then given what ``start()`` would have read: status, headers,
    cookies, and the body (read already, and in ``content``).  No connection: nothing to
    release.
    """
    cls = request.response_class
    loop = asyncio.get_running_loop()
    kwargs: dict[str, Any] = {}
    if _takes_stream_writer(cls):
        kwargs["stream_writer"] = _Unsent()
    response = cls(
        request.method,
        request.original_url,
        writer=None,
        continue100=None,
        timer=TimerNoop(),
        request_info=request.request_info,
        traces=[],
        loop=loop,
        session=getattr(request, "_session", None),  # type: ignore[arg-type]
        **kwargs,
    )
    headers = CIMultiDict(entry.headers)
    response.version = aiohttp.HttpVersion11
    response.status = entry.status
    response.reason = _reason(entry.status)
    response._headers = CIMultiDictProxy(headers)
    response._raw_headers = tuple(
        (k.encode("utf-8", "surrogateescape"), v.encode("utf-8", "surrogateescape"))
        for k, v in entry.headers
    )
    cookies = headers.getall("Set-Cookie", [])
    if cookies:
        response._raw_cookie_headers = tuple(cookies)
    response.content = _filled(entry.body, loop)
    response._body = entry.body
    response.smoothclient = record  # type: ignore[attr-defined]
    return response


async def _consume(response: aiohttp.ClientResponse) -> None:
    """Read a background revalidation's body to its end (a watched one is stored), release."""
    try:
        await response.read()
    finally:
        response.release()


def _spawn(work: Callable[[], Awaitable[None]]) -> None:
    """A background revalidation as a task of the running loop, referenced until it ends."""
    coroutine: Any = work()
    task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coroutine)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


async def send_cached(
    cache: HttpCache,
    request: aiohttp.ClientRequest,
    ended: Ended,
    flow: Callable[[bool], Awaitable[aiohttp.ClientResponse]],
    sleep: Callable[[float], Awaitable[object]],
) -> aiohttp.ClientResponse:
    """
    ``request`` through ``cache``; ``flow(foreground)`` sends it through the edge's retry flow.

    ``foreground``: the caller's own call (``False``: a background revalidation, after the
    caller got its answer).  ``ended(response, record)`` tells the hooks of a call the cache
    answered alone.
    """
    caller = asyncio.current_task()

    def build(entry: Entry, record: Record) -> aiohttp.ClientResponse:
        response = built(request, entry, record)
        if not record["attempts"]:  # answered by the cache alone (a sent call's hooks fired)
            ended(response, record)
        return response

    async def network(extra: dict[str, str]) -> aiohttp.ClientResponse:
        request.headers.update(extra)
        return await flow(asyncio.current_task() is caller)

    session = getattr(request, "_session", None)
    io: EdgeIO[aiohttp.ClientResponse] = EdgeIO(
        status=lambda r: r.status,
        headers=lambda r: r.headers.items(),
        build=build,
        tee=_tee(bool(getattr(session, "auto_decompress", True))),
        consume=_consume,
        close=lambda r: r.release(),
        record=lambda r: getattr(r, "smoothclient", None),
        failures=FAILURES,
    )
    headers = list(request.headers.items())
    return await cached_send_async(
        cache,
        io,
        request.method,
        str(request.url),
        headers,
        network,
        sleep,
        _spawn,
        streamed=True,
    )
