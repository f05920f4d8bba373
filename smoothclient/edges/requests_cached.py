"""
The HTTP cache on the requests edge: requests' responses as ``smoothclient.edges.cached`` needs.

:class:`~smoothclient.SmoothAdapter` with ``cache=`` sends through :func:`send`: a stored
response comes back as a ``requests.Response`` built here (no connection, no pacing); a
storable one has its ``raw`` wrapped so its body is stored once read to the end.
"""

from __future__ import annotations

import http
import io
from collections.abc import Callable, Iterator
from typing import Any

import requests
import urllib3
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers

from ..errors import RateLimited
from ..httpcache.cache import HttpCache
from ..httpcache.entry import Entry
from ..httpcache.lookup import Recorder
from .cached import EdgeIO, Record, cached_send

__all__ = ["built", "send"]


def _joined(pairs: tuple[tuple[str, str], ...]) -> CaseInsensitiveDict[str]:
    """Headers as requests keeps them: a repeated field's values joined by commas."""
    headers: CaseInsensitiveDict[str] = CaseInsensitiveDict()
    for name, value in pairs:
        found = headers.get(name)
        headers[name] = value if found is None else f"{found}, {value}"
    return headers


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def built(entry: Entry, record: Record, request: requests.PreparedRequest) -> requests.Response:
    """
    A ``requests.Response`` of a stored response, its body already read.

    A body stored content-encoded (by an edge that stores bodies as sent) is decoded as it is
    read, as urllib3 decodes one from the network.
    """
    response = requests.Response()
    response.status_code = entry.status
    response.headers = _joined(entry.headers)
    if "content-encoding" in response.headers:
        response.raw = urllib3.HTTPResponse(
            body=io.BytesIO(entry.body),
            headers=dict(response.headers),
            status=entry.status,
            preload_content=False,
            decode_content=True,
        )
    else:
        response._content = entry.body
        response._content_consumed = True  # type: ignore[attr-defined]
        response.raw = io.BytesIO(entry.body)
    response.url = request.url or ""
    response.request = request
    response.reason = _reason(entry.status)
    response.encoding = get_encoding_from_headers(response.headers)
    response.smoothclient = record  # type: ignore[attr-defined]
    return response


class _TeeRaw:
    """A urllib3 response whose decoded body also goes to a recorder as it is read."""

    def __init__(self, raw: Any, recorder: Recorder) -> None:
        self._raw, self._recorder = raw, recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def _decodes(self, decode_content: bool | None) -> bool:
        return bool(decode_content if decode_content is not None else self._raw.decode_content)

    def stream(
        self, amt: int | None = 2**16, decode_content: bool | None = None
    ) -> Iterator[bytes]:
        """The body in chunks; read to its end, it is stored."""
        if not self._decodes(decode_content):
            self._recorder.abandon()  # the raw bytes are not what the cache stores
            yield from self._raw.stream(amt, decode_content=decode_content)
            return
        yield from self._recorder.tee(self._raw.stream(amt, decode_content=True))

    def read(self, amt: int | None = None, decode_content: bool | None = None, **kw: Any) -> bytes:
        """Read as urllib3 does; the end of the body stores it."""
        data: bytes = self._raw.read(amt, decode_content=decode_content, **kw)
        if not self._decodes(decode_content):
            self._recorder.abandon()
        elif amt is None or not data:
            self._recorder.feed(data)
            self._recorder.finish()
        else:
            self._recorder.feed(data)
        return data

    def close(self) -> None:
        """Close it (a body not read to its end is not stored)."""
        self._recorder.abandon()
        self._raw.close()


def _tee(response: requests.Response, recorder: Recorder) -> requests.Response:
    raw = response.raw
    if hasattr(raw, "stream") and hasattr(raw, "decode_content"):  # urllib3's
        response.raw = _TeeRaw(raw, recorder)
    else:
        recorder.abandon()  # another adapter's body: not stored
    return response


def _consume(response: requests.Response) -> None:
    try:
        response.content  # noqa: B018 - reads the body to its end
    finally:
        response.close()


def send(
    cache: HttpCache,
    request: requests.PreparedRequest,
    network: Callable[[requests.PreparedRequest], requests.Response],
    ended: Callable[[requests.Response, Record], object],
    sleep: Callable[[float], object],
    *,
    streamed: bool = False,
) -> requests.Response:
    """
    ``request`` through ``cache``; ``network`` sends a request through the retry flow.

    ``streamed``: ``stream=True`` (the key is not held while the caller reads).

    ``ended(response, record)`` tells the hooks of a call the cache answered alone (a call that
    was sent told them when its flow ended, before the cache's word: its ``cache`` is ``None``
    there).
    """

    def build(entry: Entry, record: Record) -> requests.Response:
        response = built(entry, record, request)
        if not record["attempts"]:  # answered by the cache alone (a sent call's hooks fired)
            ended(response, record)
        return response

    def with_headers(extra: dict[str, str]) -> requests.Response:
        if not extra:
            return network(request)
        validating = request.copy()
        validating.headers.update(extra)
        return network(validating)

    edge_io: EdgeIO[requests.Response] = EdgeIO(
        status=lambda r: r.status_code,
        headers=lambda r: r.headers.items(),
        build=build,
        tee=_tee,
        consume=_consume,
        close=lambda r: r.close(),
        record=lambda r: getattr(r, "smoothclient", None),
        failures=(requests.RequestException, RateLimited),
    )
    headers = request.headers.items()
    method, url = request.method or "GET", request.url or ""
    return cached_send(cache, edge_io, method, url, headers, with_headers, sleep, streamed=streamed)
