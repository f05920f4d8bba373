"""Vendor headers outside the common families: Shopify, Salesforce, HubSpot, Azure, Zendesk."""

from __future__ import annotations

import re
from collections.abc import Iterator

from .context import Ctx
from .model import DAY, Quota, make_quota
from .numbers import parse_number

__all__ = ["vendors"]


_USED_OF = re.compile(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", re.ASCII)
_SFORCE = re.compile(r"([a-z-]+)=([0-9]+)/([0-9]+)", re.ASCII)


def vendors(ctx: Ctx) -> Iterator[Quota]:
    """Shopify, Salesforce, HubSpot, Azure, Zendesk endpoint headers."""
    for value in ctx.raw("x-shopify-shop-api-call-limit"):
        if (m := _USED_OF.fullmatch(value)) and (counts := _used_of(m[1], m[2])):
            yield Quota("shopify", *counts, None, None)
    for value in ctx.raw("sforce-limit-info"):
        for name, used, limit in _SFORCE.findall(value.lower()):
            if counts := _used_of(used, limit):
                window = DAY if name.endswith("api-usage") else None
                yield Quota(f"salesforce:{name}", *counts, window)
    yield from _hubspot(ctx)
    for name, values in ctx.fields.items():
        if name.startswith("x-ms-ratelimit-remaining-"):
            yield from _azure(name, values)
        elif name.startswith("zendesk-ratelimit-"):
            yield from _zendesk(ctx, name, values)


def _used_of(used: str, limit: str) -> tuple[float, float] | None:
    """
    What is left of ``used``/``limit`` and the limit (docs/headers.md R9), or ``None``.

    Each a count as :func:`~.numbers.parse_number` reads it: a run of hundreds of digits is
    no count (``float()`` of it is infinite, and what is left of two of them NaN).
    """
    spent, size = parse_number(used), parse_number(limit)
    if spent is None or size is None:
        return None
    return max(size - spent, 0.0), size


def _hubspot(ctx: Ctx) -> Iterator[Quota]:
    interval = ctx.count("x-hubspot-ratelimit-interval-milliseconds")
    pairs = (
        ("max", "remaining", None if interval is None else interval / 1000),
        ("daily", "daily-remaining", DAY),
        ("secondly", "secondly-remaining", 1.0),
    )
    for limit_name, remaining_name, window in pairs:
        quota = make_quota(
            f"hubspot:{limit_name}",
            remaining=ctx.count("x-hubspot-ratelimit-" + remaining_name),
            limit=ctx.count("x-hubspot-ratelimit-" + limit_name),
            window=window,
        )
        if quota:
            yield quota


def _azure(name: str, values: list[str]) -> Iterator[Quota]:
    for value in values:
        for member in value.split(","):
            count = parse_number(member.rsplit(";", 1)[-1])
            if count is not None:
                yield Quota(f"azure:{name[25:]}", count)


_KV = re.compile(r"\s*([a-z]+)\s*=\s*([^;]*)")


def _zendesk(ctx: Ctx, name: str, values: list[str]) -> Iterator[Quota]:
    for value in values:
        parts = dict(_KV.findall(value.lower()))
        resets = parts.get("resets")
        quota = make_quota(
            f"zendesk:{name[18:]}",
            remaining=parse_number(parts.get("remaining", "")),
            limit=parse_number(parts.get("total", "")),
            reset_after=None if resets is None else ctx.reset(resets),
        )
        if quota:
            yield quota


# Each extractor with the field-name prefixes that make it worth running: most responses carry
