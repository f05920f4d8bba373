"""
httpx2 transports: :class:`SmoothTransport` and :class:`AsyncSmoothTransport`.

httpx2 is httpx's continuation (the OpenAI and Anthropic SDKs send with it).  Its classes are
its own, so its clients take transports made for it: these, the same edge as
:class:`smoothclient.SmoothTransport` (:mod:`.httpx_common`) on httpx2's
classes.  Importing this module imports httpx2; ``import smoothclient`` does not.  The public
names are in :mod:`smoothclient.httpx2`.
"""

from __future__ import annotations

import httpcore2
import httpx2

from .httpx_common import AsyncEdge, Family, RateLimitedMixin, SyncEdge

__all__ = ["HEADER_ACCESS", "AsyncSmoothTransport", "RateLimitedError", "SmoothTransport"]

#: httpx2 as the edge sees it.
FAMILY = Family(httpx2, httpcore2, "smoothclient")
HEADER_ACCESS = FAMILY.access


class RateLimitedError(RateLimitedMixin, httpx2.TransportError):
    """
    :class:`~smoothclient.RateLimited`, raised by the httpx2 transports: an ``httpx2.HTTPError``.

    The call gave up before sending, because the pacer would have held it past its deadline or
    ``max_retry_after``; ``retry_after`` says for how long.
    """


class SmoothTransport(SyncEdge[httpx2.BaseTransport], httpx2.BaseTransport):
    """
    An httpx2 transport that retries with shift-and-widen jitter and paces per origin.

    The arguments of :class:`smoothclient.SmoothTransport`; ``transport`` is an httpx2 one
    (default ``httpx2.HTTPTransport()``).  For an SDK's client, ``sdk=True``:

    >>> import openai
    >>> client = openai.OpenAI(
    ...     api_key="sk-test",
    ...     http_client=httpx2.Client(transport=SmoothTransport(sdk=True)),
    ...     max_retries=0,
    ... )
    """

    family = FAMILY
    rate_limited_error = RateLimitedError


class AsyncSmoothTransport(AsyncEdge[httpx2.AsyncBaseTransport], httpx2.AsyncBaseTransport):
    """
    Async twin of :class:`SmoothTransport` for ``httpx2.AsyncClient``; asyncio and trio.

    The arguments of :class:`smoothclient.AsyncSmoothTransport`; ``transport`` is an httpx2
    one (default ``httpx2.AsyncHTTPTransport()``).
    """

    family = FAMILY
    rate_limited_error = RateLimitedError
