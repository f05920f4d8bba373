"""
smoothclient under aiohttp: :class:`SmoothMiddleware`, a client middleware (aiohttp 3.12+).

>>> import aiohttp
>>> from smoothclient.aiohttp import SmoothMiddleware
>>> session = aiohttp.ClientSession(middlewares=(SmoothMiddleware(),))  # doctest: +SKIP

Needs the ``aiohttp`` extra: ``pip install 'smoothclient[aiohttp]'``.
"""

from __future__ import annotations

from .edges.aiohttp_middleware import RateLimitedError, SmoothMiddleware

__all__ = ["RateLimitedError", "SmoothMiddleware"]
