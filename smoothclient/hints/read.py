"""
:func:`read_hints`: any response's headers -> :class:`Hints`, following docs/headers.md.

Each header family lives in a module of its own (``timing``, ``ietf``, ``xratelimit``,
``vendors``); this module runs those a response's field names call for, and picks the binding
quota (the one closest to exhaustion).  It never raises on header content: anything unusable
becomes ``None`` and is logged at debug level on the ``smoothclient.hints`` logger.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from . import fields as _fields
from .context import Ctx
from .fields import GENERIC, RETRY_AFTER_FIELDS, SHOULD_RETRY_FIELDS, FieldAccess, collect
from .ietf import ietf, legacy_ietf
from .model import HeadersLike, Hints, Quota, ResetFormat, hints_of
from .numbers import parse_number
from .timing import retry_after, should_retry
from .vendors import vendors
from .xratelimit import dimensioned, x_rate_limit, x_ratelimit

__all__ = ["EXTRACTORS", "has_hints", "read_fields", "read_hints"]

log = logging.getLogger("smoothclient.hints")

Extractor = Callable[[Ctx], Iterable[Quota]]
#: Each header family with the field-name prefixes that make it worth running: most responses
#: carry none of them, and reading hints must cost next to nothing on a healthy origin.
EXTRACTORS: tuple[tuple[Extractor, tuple[str, ...]], ...] = (
    (ietf, ("ratelimit",)),
    (legacy_ietf, ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset")),
    (x_ratelimit, ("x-ratelimit-",)),
    (x_rate_limit, ("x-rate-limit",)),
    (dimensioned, ("x-ratelimit-", "x-rate-limit-", "anthropic-ratelimit-")),
    (
        vendors,
        (
            "x-shopify-shop-api-call-limit",
            "sforce-limit-info",
            "x-hubspot-ratelimit-",
            "x-ms-ratelimit-",
            "zendesk-ratelimit-",
        ),
    ),
)
_EMPTY = Hints()


def _from_cache(ctx: Ctx) -> bool:
    """Rate-limit fields on a cached response (positive Age) are stale (docs/headers.md R14)."""
    if "age" not in ctx.fields:
        return False
    ages = [parse_number(v) for v in ctx.raw("age")]
    return any(a is not None and a > 0 for a in ages)


def _safely(what: str, fn: Callable[[Any], Any], arg: Any, default: Any) -> Any:
    try:
        return fn(arg)
    except Exception:  # never crash on server input
        log.debug("could not read %s hints; ignoring them", what, exc_info=True)
        return default


_TIMING = frozenset(RETRY_AFTER_FIELDS)
_VERDICT = frozenset(SHOULD_RETRY_FIELDS)
_GLOBAL = frozenset({"x-ratelimit-global", "x-ratelimit-scope"})


@functools.lru_cache(maxsize=256)
def _plan(names: tuple[str, ...]) -> tuple[tuple[Extractor, ...], bool, bool, bool, bool]:
    """
    What is worth running on these field names (a server sends the same ones every time).

    The extractors, then whether a ``Retry-After`` field, a verdict, an ``Age`` or a global
    marker is among them: the readers of those are skipped when it is not.
    """
    extractors = tuple(
        extract
        for extract, prefixes in EXTRACTORS
        if any(name.startswith(prefixes) for name in names)
    )
    return (
        extractors,
        not _TIMING.isdisjoint(names),
        not _VERDICT.isdisjoint(names),
        "age" in names,
        not _GLOBAL.isdisjoint(names),
    )


#: Cheaply: could these headers hold any hint?  ``False``: :func:`read_hints` finds nothing.
has_hints = _fields.scan


def read_fields(
    headers: Any,
    access: FieldAccess = GENERIC,
    *,
    now: float | None = None,
    reset_format: ResetFormat = "auto",
) -> Hints:
    """
    :func:`read_hints` of a container read through ``access`` (the edges' fast path).

    No :func:`has_hints` first: collecting the fields looks at every name once anyway (a
    response with none to read gives none), and the edges call this only on responses that
    may well carry some (they ask :func:`has_hints` themselves where most carry none).
    """
    try:
        found = collect(headers, access)
    except Exception:  # never crash on server input (or an odd container)
        log.debug("could not read header hints; ignoring them", exc_info=True)
        return _EMPTY
    if not found:
        return _EMPTY
    ctx = Ctx(found, time.time() if now is None else float(now), reset_format)
    if access.per_call is not None:
        ctx.per_call = access.per_call()
    extractors, timed, verdicts, aged, marked = _plan(ctx.names)
    delay = _safely("Retry-After", retry_after, ctx, None) if timed else None
    verdict = _safely("should-retry", should_retry, ctx, None) if verdicts else None
    quotas: list[Quota] = []
    if extractors and not (aged and _from_cache(ctx)):
        for extract in extractors:
            try:
                quotas.extend(extract(ctx))
            except Exception:  # never crash on server input
                log.debug("could not read %s hints; ignoring them", extract.__name__, exc_info=True)
    return hints_of(
        quotas, retry_after=delay, should_retry=verdict, origin_wide=marked and _global(ctx)
    )


def _global(ctx: Ctx) -> bool:
    """Discord: the limit hit is the whole host's (``X-RateLimit-Global``, ``-Scope: global``)."""
    if "x-ratelimit-global" in ctx.fields:
        return any(v.strip().lower() == "true" for v in ctx.raw("x-ratelimit-global"))
    if "x-ratelimit-scope" in ctx.fields:
        return any(v.strip().lower() == "global" for v in ctx.raw("x-ratelimit-scope"))
    return False


def read_hints(
    headers: HeadersLike,
    *,
    now: float | None = None,
    reset_format: ResetFormat = "auto",
) -> Hints:
    """
    Read ``Retry-After`` and rate-limit headers into :class:`Hints`.

    Args:
        headers: any mapping (``dict``, ``httpx.Headers``, requests' case-insensitive dict) or an
            iterable of ``(name, value)`` pairs in which a name may repeat.
        now: the current time in epoch seconds (default ``time.time()``); all results are
            seconds relative to it.
        reset_format: how to read numeric ``*-Reset`` values: ``"auto"`` decides by magnitude
            (below 1e9 delta seconds, below 1e12 epoch seconds, else epoch milliseconds);
            the other values force one reading, for servers that document an exception.

    Never raises on any header content.
    """
    return read_fields(headers, GENERIC, now=now, reset_format=reset_format)
