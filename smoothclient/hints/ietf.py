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
    """
    IETF ``RateLimit`` + ``RateLimit-Policy``: -08..-10 lists, -07 dictionary.

    A server repeats its policy and its list's shape, and counts what is left down: the
    quotas of a list are worked out once per (policy, shape) as a :class:`_Template`, and
    each response's list only fills in its numbers (the same quotas as :func:`_read_whole`).
    """
    fields = ctx.fields
    policy = ", ".join(fields.get("ratelimit-policy", ()))
    text = ", ".join(fields.get("ratelimit", ()))
    parts = sfv.split_runs(text)
    key = (policy, "0".join(parts[0::2]))
    template = _TEMPLATES.get(key, _UNKNOWN)
    if template is _UNKNOWN:
        template = _template_for(key, text, parts)
    if template is None:
        return _read_whole(ctx, policy, text)
    return template.fill(ctx, parts[1::2])


def _read_whole(ctx: Ctx, policy: str, text: str) -> list[Quota]:
    """:func:`ietf`, every part of the fields read (no template)."""
    policies = _policies_of(policy)
    paired: set[str] = set()
    quotas: list[Quota] = []
    if text:
        try:
            items = sfv.parse_list(text)
        except sfv.SFVError:
            quotas.extend(_ietf_dictionary(ctx, text, policies, paired))
        else:
            _ietf_items(ctx, items, policies, paired, quotas)
    quotas.extend(_unpaired(policies, paired))
    return quotas


def _unpaired(
    policies: Mapping[str, tuple[int, int | None, str]], paired: set[str]
) -> Iterator[Quota]:
    """The quotas of the named request policies no ``RateLimit`` member reported on."""
    for name, (quota, window, unit) in policies.items():
        if name not in paired and not name.startswith("#") and unit == "requests":
            size, scope = _opt(window), scope_name(name)
            yield Quota(f"ietf:{name}", None, float(quota), size, None, scope=scope)


#: One quota of a template: its source, the digit runs of its remaining and reset (``None``:
#: no reset), its limit, window, unit and scope.
_Part = tuple[str, int, int | None, float | None, float | None, str, str | None]


class _Template:
    """
    The quotas :func:`ietf` reads from every ``RateLimit`` list of one shape under one policy.

    Made from the list's :class:`~.sfv.Shape`: which items are read, which digit run holds
    each one's remaining and reset, and all that the policy says (limit, window, unit, the
    policies no item reports on).  Only those two numbers differ from list to list.
    """

    __slots__ = ("parts", "tail")

    def __init__(self, parts: tuple[_Part, ...], tail: tuple[Quota, ...]) -> None:
        """The items' ``parts`` and the quotas of the unreported policies (``tail``)."""
        self.parts = parts
        self.tail = tail

    def fill(self, ctx: Ctx, runs: list[str]) -> list[Quota]:
        """The quotas of the list whose digit runs are ``runs``."""
        delta = ctx.delta
        quotas = [
            Quota(
                source,
                float(runs[left]),
                limit,
                window,
                None if reset is None else delta(float(runs[reset])),
                unit,
                scope,
            )
            for source, left, reset, limit, window, unit, scope in self.parts
        ]
        quotas.extend(self.tail)
        return quotas


#: (policy text, list skeleton) -> its template (``None``: none, read whole); at most
#: MAX_TEMPLATES, all forgotten at once when full (a server sends a few; the clear is atomic)
_TEMPLATES: dict[tuple[str, str], _Template | None] = {}
MAX_TEMPLATES = 256
_UNKNOWN = _Template((), ())  # not looked at yet


def _template_for(key: tuple[str, str], text: str, parts: list[str]) -> _Template | None:
    """The template of ``key`` (``text`` is a list of that shape, split into ``parts``)."""
    if len(_TEMPLATES) >= MAX_TEMPLATES:
        _TEMPLATES.clear()
    template = _TEMPLATES[key] = _templated(key, text, parts)
    return template


def _templated(key: tuple[str, str], text: str, parts: list[str]) -> _Template | None:
    """
    What :func:`_ietf_items` reads of a list of this shape, as a template (see :func:`ietf`).

    ``None`` when the list has no shape (malformed, a dictionary, digits not an integer's)
    or a number read is signed (``-0`` is valid, ``-1`` not: told apart only by its digits).
    """
    policy, skeleton = key
    shape = sfv.shape_of(skeleton, text, parts) if text else None
    if shape is None:
        return None
    policies = _policies_of(policy)
    paired: set[str] = set()
    made: list[_Part] = []
    for value, _, params in shape.items:
        named = {name: (number, sign) for name, number, sign in params}  # the last one counts
        left, reset = named.get("r"), named.get("t")
        if (left and left[1] < 0) or (reset and reset[1] < 0):
            return None
        if not isinstance(value, str) or left is None or type(left[0]) is not sfv.Slot:
            log.debug("ignoring RateLimit item %r of %r", value, text)
            continue
        quota, window, unit = policies.get(value, (None, None, "requests"))
        paired.add(value)
        at = reset[0] if reset is not None and type(reset[0]) is sfv.Slot else None
        made.append(
            (f"ietf:{value}", left[0], at, _opt(quota), _opt(window), unit, scope_name(value))
        )
    return _Template(tuple(made), tuple(_unpaired(policies, paired)))


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
