"""
httpx transports: :class:`SmoothTransport` and :class:`AsyncSmoothTransport`.

Each wraps a real transport (default: a new ``httpx.HTTPTransport()`` /
``httpx.AsyncHTTPTransport()``) and runs the shared call: the fast lane, then the call flow
(pacer admission, send, hints from every response, the retry decision, closing the failed
response, the wait).  What they do is written once, for httpx and httpx2 alike, in
:mod:`.httpx_common`; httpx2's classes are in :mod:`smoothclient.httpx2`.

>>> import httpx, smoothclient
>>> client = httpx.Client(transport=smoothclient.SmoothTransport())
"""

from __future__ import annotations

import httpcore
import httpx

from .httpx_common import AsyncEdge, Family, RateLimitedMixin, SyncEdge

__all__ = ["HEADER_ACCESS", "AsyncSmoothTransport", "RateLimitedError", "SmoothTransport"]

#: httpx as the edge sees it.
FAMILY = Family(httpx, httpcore, "smoothclient.httpx2")
HEADER_ACCESS = FAMILY.access


class RateLimitedError(RateLimitedMixin, httpx.TransportError):
    """
    :class:`~smoothclient.RateLimited`, raised by the httpx transports: an ``httpx.HTTPError``.

    The call gave up before sending, because the pacer would have held it past its deadline or
    ``max_retry_after``; ``retry_after`` says for how long.
    """


class SmoothTransport(SyncEdge[httpx.BaseTransport], httpx.BaseTransport):
    """
    An httpx transport that retries with shift-and-widen jitter and paces per origin.

    Args:
        transport: the transport that really sends (default ``httpx.HTTPTransport()``).
        policy: the :class:`~smoothclient.RetryPolicy` (default ``DEFAULT_POLICY``).
        pacer: a :class:`~smoothclient.Pacer` to share with other transports (default: its own).
        rng: randomness for jitter (default a fresh ``random.Random()``).
        sleep: how to wait (default ``time.sleep``; tests pass a fake clock's ``sleep``).
        scope: which quota scopes a request belongs to (overrides the pacer's ``scope``; see
            :class:`~smoothclient.pacing.ScopeRules`).
        overrides: whether :func:`~smoothclient.override_policy` blocks change its calls
            (default: only when it was given no policy or policy fields of its own).
        sdk: the client belongs to an SDK (OpenAI's, Anthropic's): a refusal is answered with
            a 429, a give-up says ``x-should-retry: false``, the SDK's own retries make one
            attempt each, attempts are not cut at the deadline, and token quotas are paced on
            an estimate of each request's tokens (docs/clients.md).
        cost: a function of a request: its estimated tokens, so an LLM API's token quotas
            are paced as calls (docs/headers.md R16); the answers' usage corrects it.
        cache: an :class:`~smoothclient.HttpCache`: fresh stored responses answer without
            sending (nor pacing), stale ones are revalidated once (docs/http-cache.md).
        **policy_fields: :class:`~smoothclient.RetryPolicy` fields (``attempts=3``), applied
            over ``policy``.
    """

    family = FAMILY
    rate_limited_error = RateLimitedError


class AsyncSmoothTransport(AsyncEdge[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """
    Async twin of :class:`SmoothTransport`; works on asyncio and trio.

    Args:
        transport: the transport that really sends (default ``httpx.AsyncHTTPTransport()``).
        policy: the :class:`~smoothclient.RetryPolicy` (default ``DEFAULT_POLICY``).
        pacer: a :class:`~smoothclient.Pacer`, shareable with sync transports too.
        rng: randomness for jitter.
        sleep: an async sleep (default ``anyio.sleep``, which follows the running event loop).
        scope: which quota scopes a request belongs to (overrides the pacer's ``scope``).
        overrides: whether :func:`~smoothclient.override_policy` blocks change its calls
            (default: only when it was given no policy or policy fields of its own).
        sdk: the client belongs to an SDK (see :class:`SmoothTransport`).
        cost: a request's estimated tokens (see :class:`SmoothTransport`).
        cache: an :class:`~smoothclient.HttpCache` (see :class:`SmoothTransport`).
        **policy_fields: :class:`~smoothclient.RetryPolicy` fields, applied over ``policy``.
    """

    family = FAMILY
    rate_limited_error = RateLimitedError
