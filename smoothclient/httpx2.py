"""
smoothclient under httpx2: :class:`SmoothTransport` and :class:`AsyncSmoothTransport`.

httpx2 is httpx's continuation (the OpenAI and Anthropic SDKs send with it); its clients take
only transports made for it.  These are the same edge as :class:`smoothclient.SmoothTransport`
on httpx2's classes.

>>> import httpx2
>>> from smoothclient.httpx2 import SmoothTransport
>>> client = httpx2.Client(transport=SmoothTransport())

Needs the ``httpx2`` extra: ``pip install 'smoothclient[httpx2]'`` (without it, importing
this module raises an :class:`ImportError` saying so).
"""

from __future__ import annotations

from ._lazy import missing_extra

try:
    from .edges.httpx2_transport import AsyncSmoothTransport, RateLimitedError, SmoothTransport
except ModuleNotFoundError as exc:  # the extra is missing: say which one to install
    raise missing_extra(exc, "httpx2", __name__) from exc

__all__ = ["AsyncSmoothTransport", "RateLimitedError", "SmoothTransport"]
