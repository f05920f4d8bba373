"""
What hints are, and the constants every reader shares.

:class:`Hints` is what a response says about when to come back; :class:`Quota` is one quota
it describes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["DAY", "HORIZON", "HeadersLike", "Hints", "Quota", "ResetFormat", "make_quota"]

HORIZON = 365 * 86400.0  # R13: anything further away is garbage
DAY = 86400.0
ResetFormat = Literal["auto", "delta", "delta-ms", "epoch", "epoch-ms"]
HeadersLike = Mapping[str, str] | Iterable[tuple[str, str]] | Any


@dataclass(frozen=True, slots=True)
class Quota:
    """One quota a response describes; ``unit`` is ``"requests"`` unless the header says so."""

    source: str
    remaining: float | None = None
    limit: float | None = None
    window: float | None = None
    reset_after: float | None = None
    unit: str = "requests"


@dataclass(frozen=True, slots=True)
class Hints:
    """
    What a response says about when to come back.

    Attributes:
        retry_after: seconds to wait before the next request (``Retry-After`` and its ms forms).
        remaining: requests left in the binding quota (the one closest to exhaustion).
        limit: size of the binding quota.
        window: length of the binding quota's window, in seconds.
        reset_after: seconds until the binding quota resets.
        should_retry: the server's explicit verdict (``Stripe-Should-Retry``, ``x-should-retry``).
        unit: what the binding quota counts (``"requests"``, ``"tokens"``, ...).
        quotas: every quota found, for callers that want more than the binding one.
    """

    retry_after: float | None = None
    remaining: float | None = None
    limit: float | None = None
    window: float | None = None
    reset_after: float | None = None
    should_retry: bool | None = None
    unit: str = "requests"
    quotas: tuple[Quota, ...] = ()

    @property
    def exhausted(self) -> bool:
        """True when the binding quota has nothing left."""
        return self.remaining is not None and self.remaining <= 0

    @property
    def admitted_rate(self) -> float | None:
        """
        The request rate the server says it accepts, in requests per second, if known.

        ``remaining / reset_after`` when both are known and positive, else ``limit / window``.
        ``None`` for quotas not counted in requests.
        """
        if self.unit != "requests":
            return None
        if self.remaining and self.reset_after:
            return self.remaining / self.reset_after
        if self.limit and self.window:
            return self.limit / self.window
        return None


def make_quota(
    source: str,
    *,
    remaining: float | None = None,
    limit: float | None = None,
    used: float | None = None,
    window: float | None = None,
    reset_after: float | None = None,
    unit: str = "requests",
) -> Quota | None:
    """A quota from whichever of its numbers a header gave (``None`` if it gave none)."""
    if remaining is None and limit is not None and used is not None:
        remaining = max(limit - used, 0.0)
    if limit is None and remaining is not None and used is not None:
        limit = used + remaining
    if remaining is None and limit is None and reset_after is None:
        return None
    return Quota(source, remaining, limit, window, reset_after, unit)
