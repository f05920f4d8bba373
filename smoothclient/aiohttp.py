"""
smoothclient under aiohttp: :class:`SmoothMiddleware`, a client middleware (aiohttp 3.12+).

>>> import aiohttp
>>> from smoothclient.aiohttp import SmoothMiddleware
>>> session = aiohttp.ClientSession(middlewares=(SmoothMiddleware(),))  # doctest: +SKIP

Needs the ``aiohttp`` extra: ``pip install 'smoothclient[aiohttp]'`` (without it, importing
this module raises an :class:`ImportError` saying so).
"""

from __future__ import annotations

from ._lazy import missing_extra

try:
    from .edges.aiohttp_middleware import RateLimitedError, SmoothMiddleware
except ModuleNotFoundError as exc:  # the extra is missing: say which one to install
    raise missing_extra(exc, "aiohttp", __name__) from exc

__all__ = ["RateLimitedError", "SmoothMiddleware"]
