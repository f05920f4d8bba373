"""``Retry-After`` (docs/headers.md R3, R4) and the servers' explicit retry verdicts."""

from __future__ import annotations

from .context import Ctx
from .fields import RETRY_AFTER_FIELDS, SHOULD_RETRY_FIELDS
from .numbers import parse_number

__all__ = ["retry_after", "should_retry"]


def retry_after(ctx: Ctx) -> float | None:
    """docs/headers.md R3, R4: the delay ``Retry-After`` and its millisecond companions ask for."""
    if ctx.fields.keys().isdisjoint(RETRY_AFTER_FIELDS):
        return None
    seconds = ctx.timing("retry-after", ctx.retry_after)
    ms_values = [ctx.timing(n, parse_number) for n in ("retry-after-ms", "x-ms-retry-after-ms")]
    valid_ms = [ctx.delta(v / 1000) for v in ms_values if v is not None]
    ms = max((v for v in valid_ms if v is not None), default=None)
    if seconds is not None and ms is not None:
        return ms if abs(seconds - ms) < 1 else max(seconds, ms)
    if seconds is not None or ms is not None:
        return seconds if ms is None else ms
    names = ("retry-after", "retry-after-ms", "x-ms-retry-after-ms")
    if any(ctx.raw(n) for n in names):
        return None
    return ctx.timing("x-ratelimit-retry-after", ctx.retry_after)


def should_retry(ctx: Ctx) -> bool | None:
    """The server's explicit verdict (``Stripe-Should-Retry``, ``x-should-retry``)."""
    if ctx.fields.keys().isdisjoint(SHOULD_RETRY_FIELDS):
        return None
    for name in SHOULD_RETRY_FIELDS:
        for value in ctx.raw(name):
            lowered = value.lower()
            if lowered in ("true", "false"):
                return lowered == "true"
    return None
