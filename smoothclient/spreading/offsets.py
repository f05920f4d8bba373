"""
Stable placement without coordination (docs/window-math.md section 6).

Hashed offsets that are the same in every process, even spacing by rank, and each recurring
job's own slot in its period.
"""

from __future__ import annotations

import hashlib
import math
import time
from datetime import timedelta

from .._validate import seconds

__all__ = ["even_offsets", "next_run", "offset_for"]

_TWO_64 = float(2**64)


def _key_bytes(key: str | bytes | int) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key).encode("ascii")
    msg = f"key must be str, bytes or int, not {type(key).__name__}"
    raise TypeError(msg)


def offset_for(key: str | bytes | int, window: float | timedelta, *, salt: str = "") -> float:
    """
    Return the stable offset of ``key`` in ``[0, window)`` seconds.

    The same key (and salt) gets the same offset in every process on every machine: a 64-bit
    BLAKE2b digest (never Python's salted ``hash()``) is mapped onto the window by
    multiply-shift, so the bias is below 2**-53.  Use ``salt`` to give one set of keys a
    different placement per job.
    """
    w = seconds("window", window, allow_zero=False)
    digest = hashlib.blake2b(_key_bytes(key), digest_size=8, person=_person(salt)).digest()
    fraction = int.from_bytes(digest, "big") / _TWO_64
    return min(fraction * w, math.nextafter(w, 0.0))


def _person(salt: str) -> bytes:
    raw = salt.encode("utf-8")
    if len(raw) > 16:
        raw = hashlib.blake2b(raw, digest_size=16).digest()
    return raw


def even_offsets(count: int, window: float) -> list[float]:
    """Return ``count`` offsets spaced exactly evenly over ``[0, window)``."""
    if count <= 0:
        return []
    step = window / count
    return [i * step for i in range(count)]


def next_run(
    key: str | bytes | int, period: float | timedelta, *, now: float | None = None
) -> float:
    """
    The next time (epoch seconds, >= ``now``) at which ``key``'s periodic job runs.

    Runs happen at ``offset_for(key, period) + k * period``: the same slot in every period for
    the same key, in every process, with keys spread evenly over the period.
    """
    p = seconds("period", period, allow_zero=False)
    current = time.time() if now is None else now
    if isinstance(current, bool) or not isinstance(current, int | float):
        msg = f"now must be epoch seconds (a number) or None, not {type(current).__name__}"
        raise TypeError(msg)
    if not -1e300 < current < 1e300:  # finite, and an int that a float holds
        msg = f"now must be a finite number of epoch seconds, got {current!r}"
        raise ValueError(msg)
    offset = offset_for(key, p)
    k = math.ceil((current - offset) / p)
    return offset + k * p
