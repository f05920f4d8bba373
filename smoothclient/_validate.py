"""Argument normalisation and validation shared by every configuration object."""

from __future__ import annotations

import math
from datetime import timedelta

__all__ = ["fraction", "optional_seconds", "positive_int", "seconds"]


def _float(value: int | float) -> float:
    """``value`` as a float; an int too large for one is infinite (then refused as such)."""
    try:
        return float(value)
    except OverflowError:  # an int of hundreds of digits
        return math.inf if value > 0 else -math.inf


def seconds(name: str, value: object, *, allow_zero: bool = True) -> float:
    """Return ``value`` (a number or a timedelta) as finite non-negative seconds, or raise."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number of seconds or a timedelta, not {type(value).__name__}"
        raise TypeError(msg)
    result = _float(value)
    if not math.isfinite(result) or result < 0 or (result == 0 and not allow_zero):
        allowed = "a finite number >= 0" if allow_zero else "a finite number > 0"
        msg = f"{name} must be {allowed}, got {value!r}"
        raise ValueError(msg)
    return result


def optional_seconds(name: str, value: object, *, allow_zero: bool = True) -> float | None:
    """Like :func:`seconds`, but ``None`` passes through (meaning "no limit")."""
    return None if value is None else seconds(name, value, allow_zero=allow_zero)


def flag(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool (``True`` or ``False``), or raise ``TypeError``."""
    if not isinstance(value, bool):
        msg = f"{name} must be True or False, not {value!r:.40}"
        raise TypeError(msg)
    return value


def positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` as an int no smaller than ``minimum``, or raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{name} must be an int, not {type(value).__name__}"
        raise TypeError(msg)
    if value < minimum:
        msg = f"{name} must be >= {minimum}, got {value!r}"
        raise ValueError(msg)
    return value


def fraction(name: str, value: object, *, upper_open: bool = True) -> float:
    """Return ``value`` as a float in ``[0, 1)`` (or ``[0, 1]``), or raise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number, not {type(value).__name__}"
        raise TypeError(msg)
    result = _float(value)
    ok = 0 <= result < 1 if upper_open else 0 <= result <= 1
    if not ok:
        allowed = "0 <= x < 1" if upper_open else "0 <= x <= 1"
        msg = f"{name} must satisfy {allowed}, got {value!r}"
        raise ValueError(msg)
    return result
