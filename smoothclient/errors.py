"""
Exceptions raised by smoothclient itself.

Failures of the calls smoothclient wraps are never wrapped: when retries are used up, the last
response is returned or the last exception is re-raised as it was.  Only smoothclient's own
failures have a type here::

    SmoothError
    ├── InfeasibleWindow   (also a ValueError) the window constraints contradict each other
    └── RateLimited        a paced call would have to wait and was told not to
"""

from __future__ import annotations

__all__ = ["InfeasibleWindow", "RateLimited", "SmoothError"]


class SmoothError(Exception):
    """Base class of every exception smoothclient raises on its own account."""


class InfeasibleWindow(SmoothError, ValueError):
    """
    No window satisfies every constraint: a lower bound exceeds an upper bound.

    The message names the conflicting bounds; ``lower`` and ``upper`` hold them.
    """

    def __init__(self, message: str, *, lower: object = None, upper: object = None) -> None:
        super().__init__(message)
        self.lower = lower
        self.upper = upper


class RateLimited(SmoothError):
    """A paced call found no token and was asked not to block (``block=False``)."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after
