"""
The ``X-RateLimit-*`` family and its relatives.

``X-RateLimit-*`` (GitHub, Okta, Reddit, Discord, ...), ``X-Rate-Limit-*`` (Twitter, Zendesk)
and the per-dimension variants (OpenAI, Kong, Anthropic).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Iterator

from .context import Ctx
from .model import Quota, make_quota, scope_name
from .numbers import parse_go_duration, parse_number

__all__ = ["dimensioned", "legacy_window", "x_rate_limit", "x_ratelimit"]


_LIMIT_WINDOW = re.compile(r"([0-9]+)\s*;\s*(?:w|window)\s*=\s*([0-9]+)", re.ASCII)


def legacy_window(ctx: Ctx, name: str, limit: float | None) -> float | None:
    """The ``N;w=S`` member of a legacy limit field whose quota equals the limit."""
    lines = ctx.fields.get(name)
    if lines is None or (len(lines) == 1 and ";" not in lines[0]):
        return None  # the common case: no field, or a plain number
    for member in ctx.members(name):
        m = _LIMIT_WINDOW.fullmatch(member)
        if m and (limit is None or float(m.group(1)) == limit):
            return float(m.group(2))
    return None


def _x_family(ctx: Ctx, prefix: str) -> Iterator[Quota]:
    """``X-RateLimit-*`` (GitHub, Okta, Reddit, Discord, ...) or ``X-Rate-Limit-*`` (Twitter)."""
    limit = ctx.count(prefix + "limit")
    if limit is None and prefix == "x-rate-limit-":
        limit = ctx.count("x-rate-limit")  # Zendesk
    reset = ctx.timing(prefix + "reset-after", ctx.seconds)  # docs/headers.md R7: relative first
    if reset is None:
        reset = ctx.timing(prefix + "reset")
    window = legacy_window(ctx, prefix + "limit", limit) or ctx.count(prefix + "interval-seconds")
    quota = make_quota(
        prefix.rstrip("-"),
        remaining=ctx.count(prefix + "remaining"),
        limit=limit,
        used=ctx.count(prefix + "used"),
        window=window,
        reset_after=reset,
        scope=_scope(ctx, prefix),
    )
    if quota:
        yield quota


def _scope(ctx: Ctx, prefix: str) -> str | None:
    """GitHub's ``-Resource`` (``core``, ``search``, ...) or Discord's ``-Bucket``: the scope."""
    for name in (prefix + "resource", prefix + "bucket"):
        if name in ctx.fields:
            values = ctx.raw(name)
            return scope_name(values[0]) if len(values) == 1 else None
    return None


def x_ratelimit(ctx: Ctx) -> Iterator[Quota]:
    """``X-RateLimit-*``: GitHub, Okta, Reddit, Discord and many more."""
    return _x_family(ctx, "x-ratelimit-")


def x_rate_limit(ctx: Ctx) -> Iterator[Quota]:
    """``X-Rate-Limit-*``: Twitter, and Zendesk's bare ``X-Rate-Limit``."""
    return _x_family(ctx, "x-rate-limit-")


_KONG_WINDOWS = {
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "month": 30 * 86400.0,
    "year": 365 * 86400.0,
}
_SUFFIXED = re.compile(r"x-rate-?limit-(limit|remaining|reset)-(.+)")
_ANTHROPIC = re.compile(r"anthropic-ratelimit-(.+)-(limit|remaining|reset)")


def _reset_or_duration(ctx: Ctx) -> Callable[[str], float | None]:
    def parse(value: str) -> float | None:
        duration = parse_go_duration(value) if not parse_number(value) else None
        return ctx.delta(duration) if duration is not None else ctx.reset(value)

    return parse


@functools.lru_cache(maxsize=256)
def _dimensions(
    fields: tuple[str, ...],
) -> tuple[tuple[tuple[str, str], dict[str, str]], ...]:
    """(family, dimension) -> {limit/remaining/reset: field name}, per set of field names."""
    groups: dict[tuple[str, str], dict[str, str]] = {}
    for name in fields:
        if (m := _SUFFIXED.fullmatch(name)) and m.group(2) != "after":
            groups.setdefault(("x-ratelimit", m.group(2)), {})[m.group(1)] = name
        elif m := _ANTHROPIC.fullmatch(name):
            groups.setdefault(("anthropic", m.group(1)), {})[m.group(2)] = name
    return tuple(groups.items())


def dimensioned(ctx: Ctx) -> Iterator[Quota]:
    """OpenAI ``x-ratelimit-*-{requests,tokens}``, Kong ``-minute``, Anthropic dimensions."""
    for (family, dim), names in _dimensions(ctx.names):
        reset_name = names.get("reset")
        reset = ctx.timing(reset_name, _reset_or_duration(ctx)) if reset_name else None
        unit = "requests" if dim in _KONG_WINDOWS or dim == "requests" else dim
        quota = make_quota(
            f"{family}-{dim}",
            remaining=ctx.count(names["remaining"]) if "remaining" in names else None,
            limit=ctx.count(names["limit"]) if "limit" in names else None,
            window=_KONG_WINDOWS.get(dim),
            reset_after=reset,
            unit=unit,
        )
        if quota:
            yield quota if unit == "requests" else _as_scope(quota, dim, ctx.per_call)


def _as_scope(quota: Quota, dim: str, per_call: float | None) -> Quota:
    """
    docs/headers.md R16: a quota of tokens is a scope of its own, counted in calls if it can be.

    ``per_call``: what a call costs in tokens (the caller's estimate): what is left then reads
    as the calls it still admits (whole calls: a part of one admits none).
    """
    if not per_call or per_call <= 0:
        return dataclasses.replace(quota, scope=dim)
    remaining = None if quota.remaining is None else quota.remaining / per_call
    limit = None if quota.limit is None else quota.limit / per_call
    if (remaining is not None and not math.isfinite(remaining)) or (
        limit is not None and not math.isfinite(limit)
    ):
        # a cost next to nothing: more calls than a float holds; the quota stays in tokens
        return dataclasses.replace(quota, scope=dim)
    if remaining is not None:
        remaining = float(math.floor(remaining))
    return dataclasses.replace(quota, remaining=remaining, limit=limit, unit="requests", scope=dim)
