"""
Server hints: ``Retry-After`` and rate-limit headers, read the way a careful client reads them.

:func:`read_hints` turns any response's headers into :class:`Hints` following the rules of
HEADERS.md (R1-R15): strict number grammar, all three HTTP-date forms, millisecond companions,
epoch-vs-delta resets by magnitude, the ``Date`` header as clock reference, RFC 9651 parsing of
the IETF ``RateLimit`` / ``RateLimit-Policy`` fields (drafts -01 to -10), the ``X-RateLimit-*``
family and the common vendor variants, and the binding quota (the one closest to exhaustion).

It never raises on header content: anything unusable becomes ``None`` and is logged at debug
level on the ``smoothclient.hints`` logger.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import operator
import re
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from . import _sfv
from ._parse import declared_length, parse_date, parse_go_duration, parse_http_date, parse_number

__all__ = [
    "Hints",
    "Quota",
    "ResetFormat",
    "has_hints",
    "read_body_hints",
    "read_hints",
    "wants_body",
    "with_body_hints",
]

log = logging.getLogger("smoothclient.hints")

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


# --------------------------------------------------------------------------- header access (R1)


def _pairs(headers: HeadersLike) -> Iterable[tuple[Any, Any]]:
    multi = getattr(headers, "multi_items", None)
    if callable(multi):
        pairs: Iterable[tuple[Any, Any]] = multi()
        return pairs
    if isinstance(headers, Mapping):
        return headers.items()
    result: Iterable[tuple[Any, Any]] = headers
    return result


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    return str(value)


def _collect(headers: HeadersLike) -> dict[str, list[str]]:
    """The fields hints are read from (relevant names, ``Date``, ``Age``), lowercased."""
    fields: dict[str, list[str]] = {}
    keys, learn = _KNOWN_NAMES.fields, _KNOWN_NAMES.learn_field
    scan = _scanner_of(headers)
    if scan is _scan_httpx:  # lowercased names, undecoded: skip the views, decode what is kept
        for _, lower, raw in headers._list:  # type: ignore[union-attr]
            key = keys.get(lower, _UNSEEN)
            if key is _UNSEEN:
                key = learn(lower)
            if key is not None:
                fields.setdefault(key, []).append(raw.decode("latin-1").strip(" \t"))
        return fields
    pairs: Iterable[tuple[Any, Any]]
    if scan is _scan_requests:  # lowercased name -> (name as sent, value)
        pairs = ((lower, entry[1]) for lower, entry in headers._store.items())  # type: ignore[union-attr]
    else:
        pairs = _pairs(headers)
    for name, value in pairs:
        try:
            key = keys.get(name, _UNSEEN)
        except TypeError:  # an unhashable name in a list of pairs
            key = _UNSEEN
        if key is _UNSEEN:
            key = learn(name)
        if key is not None:
            fields.setdefault(key, []).append(_text(value).strip(" \t"))
    return fields


class _Ctx:
    """Per-response parsing context: the time reference and the reset interpretation."""

    __slots__ = ("_ref", "fields", "names", "now", "reset_format")

    def __init__(self, fields: dict[str, list[str]], now: float, reset_format: ResetFormat):
        self.fields = fields
        self.names = tuple(fields)  # the key of the per-name-set caches
        self.now = now
        self.reset_format = reset_format
        self._ref: float | None = None

    @property
    def ref(self) -> float:
        """The time absolute values are measured from (R8): the server's clock when sane."""
        if self._ref is None:
            self._ref = self.now
            for raw in self.fields.get("date", ()):
                server = parse_http_date(raw, self.now)
                if server is not None and abs(server - self.now) <= DAY:
                    self._ref = server
                    break
        return self._ref

    def raw(self, name: str) -> list[str]:
        return self.fields.get(name, [])

    def members(self, name: str) -> list[str]:
        """Every comma-separated member of every line of a list-valued field."""
        return [m.strip(" \t") for line in self.raw(name) for m in line.split(",")]

    def count(self, name: str) -> float | None:
        """R5/R9: the smallest valid count among all values (the legacy list form included)."""
        lines = self.fields.get(name)
        if lines is None:
            return None
        if len(lines) == 1 and "," not in lines[0]:  # the common case: one plain value
            value = parse_number(lines[0])
            if value is None:
                log.debug("ignoring unusable %s: %r", name, lines)
            return value
        values = [parse_number(m) for m in self.members(name)]
        valid = [v for v in values if v is not None]
        if not valid and self.raw(name):
            log.debug("ignoring unusable %s: %r", name, self.raw(name))
        return min(valid) if valid else None

    def absolute(self, epoch: float) -> float | None:
        """R6: an absolute time as seconds from now; slightly past is 0, far off is None."""
        delta = epoch - self.ref
        if delta < -DAY or delta > HORIZON:
            return None
        return max(0.0, delta)

    def delta(self, seconds: float) -> float | None:
        return seconds if 0 <= seconds <= HORIZON else None

    def reset(self, value: str) -> float | None:
        """R6: a reset value of unknown kind (delta, epoch, epoch ms or a date)."""
        number = parse_number(value)
        if number is None:
            when = parse_date(value, self.now)
            return None if when is None else self.absolute(when)
        fmt = self.reset_format
        if fmt == "delta" or (fmt == "auto" and number < 1e9):
            return self.delta(number)
        if fmt == "delta-ms":
            return self.delta(number / 1000)
        if fmt == "epoch" or (fmt == "auto" and number < 1e12):
            return self.absolute(number)
        return self.absolute(number / 1000)

    def retry_after(self, value: str) -> float | None:
        """R3: delay-seconds (fraction allowed) or an HTTP-date; a past date means now."""
        if parse_number(value) is not None:
            return self.reset(value)
        when = parse_http_date(value, self.now)
        if when is None:
            return None
        return min(max(0.0, when - self.ref), HORIZON) if when - self.ref <= HORIZON else None

    def timing(self, name: str, parse: Callable[[str], float | None] | None = None) -> float | None:
        """R5: the largest valid timing value among all values of a field."""
        lines = self.fields.get(name)
        if lines is None:
            return None
        parse = parse or self.reset
        if len(lines) == 1 and (single := parse(lines[0])) is not None:
            return single  # the common case: one valid value
        values: list[float] = []
        for line in lines:
            whole = parse(line)
            parts = [whole] if whole is not None else [parse(m) for m in line.split(",")]
            values.extend(v for v in parts if v is not None)
        if not values:
            log.debug("ignoring unusable %s: %r", name, lines)
        return max(values) if values else None


# --------------------------------------------------------------------------- Retry-After (R3, R4)


def _retry_after(ctx: _Ctx) -> float | None:
    if ctx.fields.keys().isdisjoint(_RETRY_AFTER_FIELDS):
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


def _should_retry(ctx: _Ctx) -> bool | None:
    if ctx.fields.keys().isdisjoint(_SHOULD_RETRY_FIELDS):
        return None
    for name in _SHOULD_RETRY_FIELDS:
        for value in ctx.raw(name):
            lowered = value.lower()
            if lowered in ("true", "false"):
                return lowered == "true"
    return None


# --------------------------------------------------------------------------- quotas (R9-R11)


def _quota(
    source: str,
    *,
    remaining: float | None = None,
    limit: float | None = None,
    used: float | None = None,
    window: float | None = None,
    reset_after: float | None = None,
    unit: str = "requests",
) -> Quota | None:
    if remaining is None and limit is not None and used is not None:
        remaining = max(limit - used, 0.0)
    if limit is None and remaining is not None and used is not None:
        limit = used + remaining
    if remaining is None and limit is None and reset_after is None:
        return None
    return Quota(source, remaining, limit, window, reset_after, unit)


_LIMIT_WINDOW = re.compile(r"([0-9]+)\s*;\s*(?:w|window)\s*=\s*([0-9]+)", re.ASCII)


def _legacy_window(ctx: _Ctx, name: str, limit: float | None) -> float | None:
    """The ``N;w=S`` member of a legacy limit field whose quota equals the limit."""
    lines = ctx.fields.get(name)
    if lines is None or (len(lines) == 1 and ";" not in lines[0]):
        return None  # the common case: no field, or a plain number
    for member in ctx.members(name):
        m = _LIMIT_WINDOW.fullmatch(member)
        if m and (limit is None or float(m.group(1)) == limit):
            return float(m.group(2))
    return None


def _x_family(ctx: _Ctx, prefix: str) -> Iterator[Quota]:
    """``X-RateLimit-*`` (GitHub, Okta, Reddit, Discord, ...) or ``X-Rate-Limit-*`` (Twitter)."""
    limit = ctx.count(prefix + "limit")
    if limit is None and prefix == "x-rate-limit-":
        limit = ctx.count("x-rate-limit")  # Zendesk
    reset = ctx.timing(prefix + "reset-after", parse_number)  # R7: relative first
    if reset is None:
        reset = ctx.timing(prefix + "reset")
    window = _legacy_window(ctx, prefix + "limit", limit) or ctx.count(prefix + "interval-seconds")
    quota = _quota(
        prefix.rstrip("-"),
        remaining=ctx.count(prefix + "remaining"),
        limit=limit,
        used=ctx.count(prefix + "used"),
        window=window,
        reset_after=reset,
    )
    if quota:
        yield quota


def _x_ratelimit(ctx: _Ctx) -> Iterator[Quota]:
    """``X-RateLimit-*``: GitHub, Okta, Reddit, Discord and many more."""
    return _x_family(ctx, "x-ratelimit-")


def _x_rate_limit(ctx: _Ctx) -> Iterator[Quota]:
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


def _reset_or_duration(ctx: _Ctx) -> Callable[[str], float | None]:
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


def _dimensioned(ctx: _Ctx) -> Iterator[Quota]:
    """OpenAI ``x-ratelimit-*-{requests,tokens}``, Kong ``-minute``, Anthropic dimensions."""
    for (family, dim), names in _dimensions(ctx.names):
        reset_name = names.get("reset")
        reset = ctx.timing(reset_name, _reset_or_duration(ctx)) if reset_name else None
        unit = "requests" if dim in _KONG_WINDOWS or dim == "requests" else dim
        quota = _quota(
            f"{family}-{dim}",
            remaining=ctx.count(names["remaining"]) if "remaining" in names else None,
            limit=ctx.count(names["limit"]) if "limit" in names else None,
            window=_KONG_WINDOWS.get(dim),
            reset_after=reset,
            unit=unit,
        )
        if quota:
            yield quota


def _int_param(item: _sfv.Item, key: str) -> int | None:
    value = item.params.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _policies(ctx: _Ctx) -> Mapping[str, tuple[int, int | None, str]]:
    """``RateLimit-Policy``: name -> (quota, window, unit); legacy integer items by position."""
    return _policies_of(", ".join(ctx.raw("ratelimit-policy")))


@functools.lru_cache(maxsize=256)
def _policies_of(text: str) -> Mapping[str, tuple[int, int | None, str]]:
    """:func:`_policies` of one field value (a server sends the same policy every time)."""
    if not text:
        return _NO_POLICIES
    try:
        items = _sfv.parse_list(text)
    except _sfv.SFVError:
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


def _ietf(ctx: _Ctx) -> Iterator[Quota]:
    """IETF ``RateLimit`` + ``RateLimit-Policy``: -08..-10 lists, -07 dictionary."""
    policies = _policies(ctx)
    text = ", ".join(ctx.raw("ratelimit"))
    paired: set[str] = set()
    if text:
        try:
            yield from _ietf_items(ctx, _sfv.parse_list(text), policies, paired)
        except _sfv.SFVError:
            yield from _ietf_dictionary(ctx, text, policies, paired)
    for name, (quota, window, unit) in policies.items():
        if name not in paired and not name.startswith("#") and unit == "requests":
            yield Quota(f"ietf:{name}", None, float(quota), _opt(window), None)


def _opt(value: int | None) -> float | None:
    return None if value is None else float(value)


def _ietf_items(
    ctx: _Ctx,
    items: list[_sfv.Item],
    policies: Mapping[str, tuple[int, int | None, str]],
    paired: set[str],
) -> Iterator[Quota]:
    for item in items:
        remaining = _int_param(item, "r")
        if not isinstance(item.value, str) or remaining is None:
            log.debug("ignoring RateLimit item %r", item)
            continue
        quota, window, unit = policies.get(item.value, (None, None, "requests"))
        paired.add(item.value)
        t = _int_param(item, "t")
        yield Quota(
            f"ietf:{item.value}",
            float(remaining),
            _opt(quota),
            _opt(window),
            None if t is None else ctx.delta(float(t)),
            unit,
        )


def _ietf_dictionary(
    ctx: _Ctx,
    text: str,
    policies: Mapping[str, tuple[int, int | None, str]],
    paired: set[str],
) -> Iterator[Quota]:
    try:
        members = _sfv.parse_dictionary(text)
    except _sfv.SFVError:
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


def _legacy_ietf(ctx: _Ctx) -> Iterator[Quota]:
    """Drafts -01..-06 ``RateLimit-Limit/-Remaining/-Reset``; GitLab, Kong, Zendesk lists."""
    limit = ctx.count("ratelimit-limit")
    reset = ctx.timing("ratelimit-reset")
    if reset is None:
        reset = ctx.timing("ratelimit-resettime")
    window = _legacy_window(ctx, "ratelimit-limit", limit)
    if window is None:
        policies = _policies(ctx)
        window = next(
            (float(w) for n, (q, w, _) in policies.items() if n.startswith("#") and w), None
        )
    quota = _quota(
        "ratelimit-limit",
        remaining=ctx.count("ratelimit-remaining"),
        limit=limit,
        used=ctx.count("ratelimit-observed"),
        window=window,
        reset_after=reset,
    )
    if quota:
        yield quota


_USED_OF = re.compile(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", re.ASCII)
_SFORCE = re.compile(r"([a-z-]+)=([0-9]+)/([0-9]+)", re.ASCII)


def _vendors(ctx: _Ctx) -> Iterator[Quota]:
    """Shopify, Salesforce, HubSpot, Azure, Zendesk endpoint headers."""
    for value in ctx.raw("x-shopify-shop-api-call-limit"):
        if m := _USED_OF.fullmatch(value):
            used, limit = float(m.group(1)), float(m.group(2))
            yield Quota("shopify", max(limit - used, 0.0), limit, None, None)
    for value in ctx.raw("sforce-limit-info"):
        for name, used, limit in _SFORCE.findall(value.lower()):
            window = DAY if name.endswith("api-usage") else None
            yield Quota(
                f"salesforce:{name}", max(float(limit) - float(used), 0.0), float(limit), window
            )
    yield from _hubspot(ctx)
    for name, values in ctx.fields.items():
        if name.startswith("x-ms-ratelimit-remaining-"):
            yield from _azure(name, values)
        elif name.startswith("zendesk-ratelimit-"):
            yield from _zendesk(ctx, name, values)


def _hubspot(ctx: _Ctx) -> Iterator[Quota]:
    interval = ctx.count("x-hubspot-ratelimit-interval-milliseconds")
    pairs = (
        ("max", "remaining", None if interval is None else interval / 1000),
        ("daily", "daily-remaining", DAY),
        ("secondly", "secondly-remaining", 1.0),
    )
    for limit_name, remaining_name, window in pairs:
        quota = _quota(
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


def _zendesk(ctx: _Ctx, name: str, values: list[str]) -> Iterator[Quota]:
    for value in values:
        parts = dict(_KV.findall(value.lower()))
        resets = parts.get("resets")
        quota = _quota(
            f"zendesk:{name[18:]}",
            remaining=parse_number(parts.get("remaining", "")),
            limit=parse_number(parts.get("total", "")),
            reset_after=None if resets is None else ctx.reset(resets),
        )
        if quota:
            yield quota


# Each extractor with the field-name prefixes that make it worth running: most responses carry
# none of them, and reading hints must cost next to nothing on a healthy origin.
_EXTRACTORS: tuple[tuple[Callable[[_Ctx], Iterator[Quota]], tuple[str, ...]], ...] = (
    (_ietf, ("ratelimit",)),
    (_legacy_ietf, ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset")),
    (_x_ratelimit, ("x-ratelimit-",)),
    (_x_rate_limit, ("x-rate-limit",)),
    (_dimensioned, ("x-ratelimit-", "x-rate-limit-", "anthropic-ratelimit-")),
    (
        _vendors,
        (
            "x-shopify-shop-api-call-limit",
            "sforce-limit-info",
            "x-hubspot-ratelimit-",
            "x-ms-ratelimit-",
            "zendesk-ratelimit-",
        ),
    ),
)
_ALL_PREFIXES = tuple({p for _, prefixes in _EXTRACTORS for p in prefixes})
_SHOULD_RETRY_FIELDS = ("stripe-should-retry", "x-should-retry")
_RETRY_AFTER_FIELDS = (
    "retry-after",
    "retry-after-ms",
    "x-ms-retry-after-ms",
    "x-ratelimit-retry-after",
)
_TIMING_FIELDS = frozenset(_RETRY_AFTER_FIELDS + _SHOULD_RETRY_FIELDS)
#: Read for context, not hints: the server's clock (R8) and a cache's age (R14).
_CONTEXT_FIELDS = frozenset({"date", "age"})
#: Every relevant field name contains one of these: a cheap first test before the exact one.
_NEEDLES = ("retry", "limit")


def _binding(quotas: list[Quota]) -> Quota | None:
    """R10: the quota closest to exhaustion (smallest remaining/limit ratio)."""
    if len(quotas) == 1:  # the common case
        q = quotas[0]
        found = q.remaining is not None or q.limit is not None or q.reset_after is not None
        return q if found else None
    known = [q for q in quotas if q.remaining is not None]
    if not known:
        return next((q for q in quotas if q.limit is not None or q.reset_after is not None), None)

    def key(q: Quota) -> tuple[bool, bool, float, float, bool]:
        remaining = q.remaining if q.remaining is not None else 0.0
        limited = q.limit is not None and q.limit > 0
        ratio = remaining / q.limit if limited and q.limit else remaining
        return (remaining > 0, not limited, ratio, remaining, q.reset_after is None)

    return min(known, key=key)


def _from_cache(ctx: _Ctx) -> bool:
    """R14: rate-limit fields on a response served from a cache (positive Age) are stale."""
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


@functools.lru_cache(maxsize=256)
def _extractors_for(names: tuple[str, ...]) -> tuple[Callable[[_Ctx], Iterator[Quota]], ...]:
    """The extractors worth running on these field names (a server sends the same ones)."""
    return tuple(
        extract
        for extract, prefixes in _EXTRACTORS
        if any(name.startswith(prefixes) for name in names)
    )


def _gather_quotas(ctx: _Ctx) -> list[Quota]:
    quotas: list[Quota] = []
    for extract in _extractors_for(ctx.names):
        try:
            quotas.extend(extract(ctx))
        except Exception:  # never crash on server input
            log.debug("could not read %s hints; ignoring them", extract.__name__, exc_info=True)
    return quotas


_EMPTY = Hints()


def _is_relevant(name: str) -> bool:
    """Whether a lowercased field name can carry a hint."""
    return name in _TIMING_FIELDS or name.startswith(_ALL_PREFIXES)


def _relevant_in(names: str) -> bool:
    """Whether any of the lowercased, newline-separated ``names`` can carry a hint."""
    if not any(needle in names for needle in _NEEDLES):
        return False  # the common case, decided by two substring searches
    return any(_is_relevant(name.strip()) for name in names.split("\n"))


_SECOND = operator.itemgetter(1)


class _KnownNames:
    """
    Field names seen to carry no hint (and those seen to), exactly as headers give them.

    Servers send the same few names on every response, so after the first few responses a
    scan is one C-level ``issuperset`` over the names.  Bounded: past ``limit`` names it stops
    learning (scans then take the exact path for unknown names, still correct).
    """

    __slots__ = ("_bytes", "_relevant_bytes", "_relevant_str", "_str", "fields", "limit")

    def __init__(self, limit: int = 1024) -> None:
        #: name as headers give it -> the lowercased field it is read as, or None (not read)
        self.fields: dict[object, str | None] = {}
        self._bytes: set[bytes] = set()
        self._str: set[object] = set()
        self._relevant_bytes: set[bytes] = set()  # and those that do, to answer yes as fast
        self._relevant_str: set[object] = set()
        self.limit = limit

    def httpx_names(self, headers: Any) -> bool:
        """Whether any name of these ``httpx.Headers`` may carry a hint."""
        # httpx keeps (raw name, lowercased name, value) byte triples: the lowercased names
        # cost far less than the public views, which decode every entry
        entries = headers._list
        if self._bytes.issuperset(map(_SECOND, entries)):
            return False
        if not self._relevant_bytes.isdisjoint(map(_SECOND, entries)):
            return True
        return self._learn(self._bytes, self._relevant_bytes, map(_SECOND, entries))

    def str_names(self, names: Iterable[object]) -> bool:
        """Whether any of these names (any case) may carry a hint."""
        if self._str.issuperset(names):
            return False
        if not self._relevant_str.isdisjoint(names):
            return True
        return self._learn(self._str, self._relevant_str, names)

    def learn_field(self, name: object) -> str | None:
        """The field :func:`read_hints` reads ``name`` as (``None``: not read), remembered."""
        key = _text(name).strip().lower()
        found = key if key in _CONTEXT_FIELDS or _is_relevant(key) else None
        if len(self.fields) < self.limit and type(name) in (str, bytes):
            self.fields[name] = found
        return found

    def _learn(self, no: set[Any], yes: set[Any], names: Iterable[object]) -> bool:
        relevant = False
        for name in names:
            key = self.learn_field(name)
            if key is not None and key not in _CONTEXT_FIELDS:
                relevant = True
                if len(yes) < self.limit:
                    yes.add(name)
            elif len(no) < self.limit:
                no.add(name)
        return relevant


_KNOWN_NAMES = _KnownNames()
_UNSEEN = "\0"  # a name not learned yet (no field is called that)


_scan_httpx = _KNOWN_NAMES.httpx_names
_scan_mapping = _KNOWN_NAMES.str_names


def _scan_requests(headers: Any) -> bool:
    return _KNOWN_NAMES.str_names(headers._store)


def _scan_pairs(headers: Any) -> bool:
    return _relevant_in("\n".join(_text(name) for name, _ in _pairs(headers)).lower())


def _scanner(headers: object) -> Callable[[Any], bool]:
    """How to scan the names of headers of this type (decided once per type)."""
    store = getattr(headers, "_list", None)
    if (
        type(headers).__module__.startswith("httpx")
        and isinstance(store, list)
        and all(isinstance(e, tuple) and len(e) == 3 and isinstance(e[1], bytes) for e in store)
    ):
        return _scan_httpx
    store = getattr(headers, "_store", None)
    if type(headers).__name__ == "CaseInsensitiveDict" and isinstance(store, dict):
        return _scan_requests  # requests keeps lowercased names as the keys of ``_store``
    if isinstance(headers, Mapping):
        return _scan_mapping
    if isinstance(headers, list | tuple):
        return _scan_pairs
    return _maybe  # an iterator: scanning it would consume it


def _maybe(headers: Any) -> bool:
    return True


_SCANNERS: dict[type, Callable[[Any], bool]] = {}


def _scanner_of(headers: object) -> Callable[[Any], bool]:
    kind = type(headers)
    scan = _SCANNERS.get(kind)
    if scan is None:
        scan = _scanner(headers)
        if kind not in (list, tuple) and len(_SCANNERS) < 64:
            _SCANNERS[kind] = scan
    return scan


def has_hints(headers: HeadersLike) -> bool:
    """
    Cheaply: could these headers hold any hint?  (Only the names are looked at.)

    ``False`` means :func:`read_hints` would return empty :class:`Hints`.
    """
    scan = _SCANNERS.get(type(headers)) or _scanner_of(headers)
    return scan(headers)


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
    if not _safely("header", has_hints, headers, True):
        return _EMPTY  # the common case: nothing to read
    fields = _safely("header", _collect, headers, None)
    if not fields:
        return _EMPTY
    ctx = _Ctx(fields, time.time() if now is None else float(now), reset_format)
    retry_after = _safely("Retry-After", _retry_after, ctx, None)
    should_retry = _safely("should-retry", _should_retry, ctx, None)
    quotas = [] if _from_cache(ctx) else _gather_quotas(ctx)
    bound = _binding(quotas)
    if bound is None:
        return Hints(retry_after=retry_after, should_retry=should_retry, quotas=tuple(quotas))
    return Hints(
        retry_after=retry_after,
        remaining=bound.remaining,
        limit=bound.limit,
        window=bound.window,
        reset_after=bound.reset_after,
        should_retry=should_retry,
        unit=bound.unit,
        quotas=tuple(quotas),
    )


# --------------------------------------------------------------------------- bodies (R15)

#: Error bodies larger than this are never parsed for hints.
BODY_LIMIT = 64 * 1024
_DURATION = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)s", re.ASCII)
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


def wants_body(status: int, headers: Any) -> bool:
    """
    Whether a response's body may hold delay hints worth reading (R15).

    An error status with a JSON body of a stated length up to :data:`BODY_LIMIT`; a body of
    unknown length (chunked) is never read for hints.
    """
    if status < 400:
        return False
    try:
        kind = str(headers.get("content-type", "")).lower()
        length = str(headers.get("content-length", ""))
    except Exception:  # never crash on server input or odd header objects
        return False
    size = declared_length(length)
    return "json" in kind and size is not None and size <= BODY_LIMIT


def read_body_hints(body: bytes | str) -> Hints:
    """
    Delay hints some APIs put in a JSON error body instead of (or besides) headers.

    - Discord: ``{"retry_after": 64.57, ...}`` (seconds, more precise than its header);
    - Google APIs: ``{"error": {"details": [{"@type": ".../google.rpc.RetryInfo",
      "retryDelay": "27s"}]}}``.

    Returns :class:`Hints` with ``retry_after`` set, or empty ones.  Never raises.
    """
    try:
        if len(body) > BODY_LIMIT:
            return _EMPTY
        document = json.loads(body)
    except (ValueError, TypeError, RecursionError):
        return _EMPTY
    if not isinstance(document, dict):
        return _EMPTY
    delay = _discord_delay(document)
    if delay is None:
        delay = _google_delay(document)
    if delay is None or not 0 <= delay <= HORIZON:
        if delay is not None:
            log.debug("ignoring an unusable delay in the body: %r", delay)
        return _EMPTY
    return Hints(retry_after=delay)


def _discord_delay(document: dict[str, Any]) -> float | None:
    value = document.get("retry_after")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return seconds if math.isfinite(seconds) else None


def _google_delay(document: dict[str, Any]) -> float | None:
    error = document.get("error")
    details = error.get("details") if isinstance(error, dict) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and detail.get("@type") == _RETRY_INFO:
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and (m := _DURATION.fullmatch(delay.strip())):
                return float(m.group(1))
    return None


def with_body_hints(hints: Hints, body: bytes | str) -> Hints:
    """
    ``hints`` completed by the body's delay (:func:`read_body_hints`).

    The body fills in a missing ``retry_after``; when both are given and agree to within a
    second (Discord rounds its header up to whole seconds), the body's more precise value wins;
    otherwise the later of the two.
    """
    found = read_body_hints(body).retry_after
    if found is None:
        return hints
    header = hints.retry_after
    if header is not None and abs(header - found) >= 1:
        found = max(header, found)
    return dataclasses.replace(hints, retry_after=found)
