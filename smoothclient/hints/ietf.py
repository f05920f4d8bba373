"""
The IETF ``RateLimit`` fields, parsed with a strict RFC 9651 parser.

Drafts -08 to -10 (lists of named items with ``RateLimit-Policy``), -07 (a dictionary) and
-01 to -06 (``RateLimit-Limit/-Remaining/-Reset``, also sent by GitLab, Kong and Zendesk).
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Iterator, Mapping
from decimal import Decimal

from . import sfv
from .context import Ctx
from .model import Quota, make_quota, scope_name
from .xratelimit import legacy_window

__all__ = ["ietf", "legacy_ietf"]

log = logging.getLogger("smoothclient.hints")


def _int_param(item: sfv.Item, key: str) -> int | None:
    value = item.params.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _policies(ctx: Ctx) -> Mapping[str, tuple[int, int | None, str]]:
    """``RateLimit-Policy``: name -> (quota, window, unit); legacy integer items by position."""
    return _policies_of(", ".join(ctx.raw("ratelimit-policy")))


@functools.lru_cache(maxsize=256)
def _policies_of(text: str) -> Mapping[str, tuple[int, int | None, str]]:
    """:func:`_policies` of one field value (a server sends the same policy every time)."""
    if not text:
        return _NO_POLICIES
    try:
        items = sfv.parse_list(text)
    except sfv.SFVError:
        log.debug("ignoring malformed RateLimit-Policy: %r", text)
        return _NO_POLICIES
    out: dict[str, tuple[int, int | None, str]] = {}
    for index, item in enumerate(items):
        if isinstance(item.value, str):
            quota = _int_param(item, "q")
            unit = item.params.get("qu", "requests")
            if quota is not None and isinstance(unit, str):
                out[item.value] = (quota, _int_param(item, "w"), unit)
        elif isinstance(item.value, int) and not isinstance(item.value, bool):
            out[f"#{index}"] = (item.value, _int_param(item, "w"), "requests")
    return types.MappingProxyType(out)  # cached and shared: read-only


_NO_POLICIES: Mapping[str, tuple[int, int | None, str]] = types.MappingProxyType({})


def ietf(ctx: Ctx) -> list[Quota]:
    """IETF ``RateLimit`` + ``RateLimit-Policy``: -08..-10 lists, -07 dictionary."""
    policies = _policies(ctx)
    text = ", ".join(ctx.raw("ratelimit"))
    paired: set[str] = set()
    quotas: list[Quota] = []
    if text:
        try:
            items = sfv.parse_list(text)
        except sfv.SFVError:
            quotas.extend(_ietf_dictionary(ctx, text, policies, paired))
        else:
            _ietf_items(ctx, items, policies, paired, quotas)
    for name, (quota, window, unit) in policies.items():
        if name not in paired and not name.startswith("#") and unit == "requests":
            size, scope = _opt(window), scope_name(name)
            quotas.append(Quota(f"ietf:{name}", None, float(quota), size, None, scope=scope))
    return quotas


def _opt(value: int | None) -> float | None:
    return None if value is None else float(value)


def _ietf_items(
    ctx: Ctx,
    items: list[sfv.Item],
    policies: Mapping[str, tuple[int, int | None, str]],
    paired: set[str],
    quotas: list[Quota],
) -> None:
    """The quotas of -08..-10 list items, appended to ``quotas`` (those paired, to ``paired``)."""
    for item in items:
        remaining = _int_param(item, "r")
        if not isinstance(item.value, str) or remaining is None:
            log.debug("ignoring RateLimit item %r", item)
            continue
        quota, window, unit = policies.get(item.value, (None, None, "requests"))
        paired.add(item.value)
        t = _int_param(item, "t")
        quotas.append(
            Quota(
                f"ietf:{item.value}",
                float(remaining),
                _opt(quota),
                _opt(window),
                None if t is None else ctx.delta(float(t)),
                unit,
                scope_name(item.value),
            )
        )


def _ietf_dictionary(
    ctx: Ctx,
    text: str,
    policies: Mapping[str, tuple[int, int | None, str]],
    paired: set[str],
) -> Iterator[Quota]:
    try:
        members = sfv.parse_dictionary(text)
    except sfv.SFVError:
        log.debug("ignoring malformed RateLimit: %r", text)
        return
    values = {k: v.value for k, v in members.items()}
    numbers = {
        k: float(v)
        for k, v in values.items()
        if isinstance(v, int | Decimal) and not isinstance(v, bool) and v >= 0
    }
    if "remaining" not in numbers and "limit" not in numbers:
        return
    limit = numbers.get("limit")
    window = next(
        (float(w) for n, (q, w, _) in policies.items() if w and (limit is None or q == limit)),
        None,
    )
    paired.update(policies)
    reset = numbers.get("reset")
    yield Quota(
        "ietf-07",
        numbers.get("remaining"),
        limit,
        window,
        None if reset is None else ctx.delta(reset),
    )


def legacy_ietf(ctx: Ctx) -> Iterator[Quota]:
    """Drafts -01..-06 ``RateLimit-Limit/-Remaining/-Reset``; GitLab, Kong, Zendesk lists."""
    limit = ctx.count("ratelimit-limit")
    reset = ctx.timing("ratelimit-reset")
    if reset is None:
        reset = ctx.timing("ratelimit-resettime")
    window = legacy_window(ctx, "ratelimit-limit", limit)
    if window is None:
        policies = _policies(ctx)
        window = next(
            (float(w) for n, (q, w, _) in policies.items() if n.startswith("#") and w), None
        )
    quota = make_quota(
        "ratelimit-limit",
        remaining=ctx.count("ratelimit-remaining"),
        limit=limit,
        used=ctx.count("ratelimit-observed"),
        window=window,
        reset_after=reset,
    )
    if quota:
        yield quota
