"""
The testing mode's switch, at the bottom of the package: the edges and ``@retry`` read it.

Its public face is :mod:`smoothclient.testing` (:func:`set_testing`, :func:`testing_mode`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["TestingMode", "current", "set_testing", "testing_mode"]


@dataclass(frozen=True, slots=True)
class TestingMode:
    """While active, no smoothclient wait sleeps and calls make at most ``attempts`` attempts."""

    __test__ = False  # not a pytest test class, despite the name
    attempts: int = 1


_lock = threading.Lock()
_mode: TestingMode | None = None


def current() -> TestingMode | None:
    """The active testing mode, or ``None``."""
    return _mode


def set_testing(on: bool, *, attempts: int = 1) -> None:
    """Turn the testing mode on (no waiting, at most ``attempts`` attempts) or off."""
    global _mode
    if on and (isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1):
        msg = f"attempts must be an int >= 1, got {attempts!r}"
        raise ValueError(msg)
    with _lock:
        _mode = TestingMode(attempts) if on else None


@contextmanager
def testing_mode(*, attempts: int = 1) -> Iterator[TestingMode]:  # noqa: PT028
    """Context manager form of :func:`set_testing`; restores the previous state on exit."""
    global _mode
    previous = _mode
    set_testing(True, attempts=attempts)
    try:
        assert _mode is not None
        yield _mode
    finally:
        with _lock:
            _mode = previous
