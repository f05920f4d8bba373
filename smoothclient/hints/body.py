"""
Delay hints in JSON error bodies: Discord's ``retry_after`` and Google's ``RetryInfo``.

Following docs/headers.md R15.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from typing import Any

from .model import HORIZON, Hints
from .numbers import declared_length

__all__ = ["BODY_LIMIT", "read_body_hints", "wants_body", "with_body_hints"]

log = logging.getLogger("smoothclient.hints")
_EMPTY = Hints()

BODY_LIMIT = 64 * 1024
_DURATION = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)s", re.ASCII)
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


def wants_body(status: int, headers: Any) -> bool:
    """
    Whether a response's body may hold delay hints worth reading (docs/headers.md R15).

    An error status with a JSON body of a stated length up to :data:`BODY_LIMIT`; a body of
    unknown length (chunked) is never read for hints.
    """
    if status < 400:
        return False
    try:
        kind = str(headers.get("content-type", "")).lower()
        length = str(headers.get("content-length", ""))
    except Exception:  # never crash on server input or odd header objects
        return False
    size = declared_length(length)
    return "json" in kind and size is not None and size <= BODY_LIMIT


def read_body_hints(body: bytes | str) -> Hints:
    """
    Delay hints some APIs put in a JSON error body instead of (or besides) headers.

    - Discord: ``{"retry_after": 64.57, ...}`` (seconds, more precise than its header);
    - Google APIs: ``{"error": {"details": [{"@type": ".../google.rpc.RetryInfo",
      "retryDelay": "27s"}]}}``.

    Returns :class:`Hints` with ``retry_after`` set, or empty ones.  Never raises.
    """
    try:
        if len(body) > BODY_LIMIT:
            return _EMPTY
        document = json.loads(body)
    except (ValueError, TypeError, RecursionError):
        return _EMPTY
    if not isinstance(document, dict):
        return _EMPTY
    delay = _discord_delay(document)
    if delay is None:
        delay = _google_delay(document)
    if delay is None or not 0 <= delay <= HORIZON:
        if delay is not None:
            log.debug("ignoring an unusable delay in the body: %r", delay)
        return _EMPTY
    return Hints(retry_after=delay)


def _discord_delay(document: dict[str, Any]) -> float | None:
    value = document.get("retry_after")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return seconds if math.isfinite(seconds) else None


def _google_delay(document: dict[str, Any]) -> float | None:
    error = document.get("error")
    details = error.get("details") if isinstance(error, dict) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and detail.get("@type") == _RETRY_INFO:
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and (m := _DURATION.fullmatch(delay.strip())):
                return float(m.group(1))
    return None


def with_body_hints(hints: Hints, body: bytes | str) -> Hints:
    """
    ``hints`` completed by the body's delay (:func:`read_body_hints`).

    The body fills in a missing ``retry_after``; when both are given and agree to within a
    second (Discord rounds its header up to whole seconds), the body's more precise value wins;
    otherwise the later of the two.
    """
    found = read_body_hints(body).retry_after
    if found is None:
        return hints
    header = hints.retry_after
    if header is not None and abs(header - found) >= 1:
        found = max(header, found)
    return dataclasses.replace(hints, retry_after=found)
