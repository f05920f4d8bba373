"""Argument normalisation and validation shared by every configuration object."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

__all__ = [
    "Forward",
    "forward",
    "fraction",
    "function",
    "optional_seconds",
    "positive_int",
    "seconds",
    "waited",
]

log = logging.getLogger("smoothclient")


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


class Forward:
    """
    ``clock`` made never to go backwards: a step back counts as no time passing.

    Each reading is ``clock()`` plus every step back seen so far, so time goes on from where it
    was at the same pace as ``clock``: a wait measured across the step is never longer than
    the wait asked for (an injected clock, or a wall clock set back, would make it as long as
    the step).  A reading that is not a finite number is ignored likewise.  Both are logged at
    debug.  A wait the caller slept (:meth:`slept`) is time that passed: a step back during it
    does not undo it.  Thread-safe and picklable.
    """

    __slots__ = ("_floor", "_last", "_lock", "_skew", "clock")

    def __init__(self, clock: Callable[[], float]) -> None:
        """Wrap ``clock`` (a callable returning seconds)."""
        self.clock = clock
        self._last: float | None = None
        self._floor = -math.inf
        self._skew = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        """Seconds: ``clock()`` less the steps back it took, never below the last reading."""
        raw = self.clock()
        with self._lock:
            last = self._last
            if isinstance(raw, bool) or not isinstance(raw, int | float) or not _finite(raw):
                log.debug("the clock read %r, not a finite number: taken as no time passing", raw)
                return 0.0 if last is None else last
            now = raw + self._skew
            least = self._floor if last is None else max(last, self._floor)
            if now < least:
                log.debug("the clock stepped back %.6g s: taken as no time passing", least - now)
                self._skew += least - now
                now = least
            self._last = now
            return now

    def slept(self, since: float, seconds: float) -> None:
        """A caller that read ``since`` then slept ``seconds``: no later reading is earlier."""
        with self._lock:
            self._floor = max(self._floor, since + seconds)

    def __getstate__(self) -> tuple[Any, float | None, float, float]:
        """The clock and the readings so far (not the lock)."""
        return self.clock, self._last, self._floor, self._skew

    def __setstate__(self, state: tuple[Any, float | None, float, float]) -> None:
        """Restore, with a lock of its own."""
        self.clock, self._last, self._floor, self._skew = state
        self._lock = threading.Lock()


def waited(clock: Callable[[], float], since: float, seconds: float) -> None:
    """Tell a :class:`Forward` ``clock`` that its reader slept ``seconds`` after ``since``."""
    if isinstance(clock, Forward) and seconds > 0:
        clock.slept(since, seconds)


def _finite(value: int | float) -> bool:
    return -math.inf < _float(value) < math.inf


#: Clocks that never go backwards: :func:`forward` leaves them alone.
MONOTONIC: tuple[Callable[[], float], ...] = (time.monotonic, time.perf_counter)


def function(name: str, value: Any, what: str, *, optional: bool = False) -> Any:
    """
    Return ``value`` if it is callable (or ``None`` when ``optional``), or raise ``TypeError``.

    ``what`` says what the callable does (``"returning seconds"``): a string, a number or any
    other object given where a function goes fails here, not at its first call (in a thread,
    a scheduler's, it would never fail where anyone sees it).
    """
    if (value is None and optional) or callable(value):
        return value
    none = " (or None)" if optional else ""
    msg = f"{name} must be a callable {what}{none}, not {type(value).__name__}"
    raise TypeError(msg)


def forward(clock: Callable[[], float], name: str = "clock") -> Callable[[], float]:
    """``clock`` as a :class:`Forward` one, unless it is monotonic already (or one already)."""
    function(name, clock, "returning seconds")
    if any(clock is known for known in MONOTONIC) or isinstance(clock, Forward):
        return clock
    return Forward(clock)
