"""
What hints are, and the constants every reader shares.

:class:`Hints` is what a response says about when to come back; :class:`Quota` is one quota
it describes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

__all__ = [
    "DAY",
    "HORIZON",
    "HeadersLike",
    "Hints",
    "Quota",
    "ResetFormat",
    "binding",
    "hints_of",
    "make_quota",
    "scope_name",
    "slot_init",
]

HORIZON = 365 * 86400.0  # docs/headers.md R13: anything further away is garbage
DAY = 86400.0
ResetFormat = Literal["auto", "delta", "delta-ms", "epoch", "epoch-ms"]
HeadersLike = Mapping[str, str] | Iterable[tuple[str, str]] | Any

C = TypeVar("C", bound=type)


class _Unset:
    """A field with a default factory was not given (shown as dataclasses show it)."""

    def __repr__(self) -> str:
        return "<factory>"


_UNSET = _Unset()


def slot_init(cls: C) -> C:
    """
    A frozen, slotted dataclass with an ``__init__`` that stores each field through its slot.

    A frozen dataclass's own ``__init__`` goes through ``object.__setattr__`` once per field,
    which costs twice as much; every response's hints build a :class:`Quota` and a
    :class:`Hints` (and an RFC 9651 ``Item`` per member).  The same signature and defaults (a
    default factory called per instance); the instances stay immutable.
    """
    fields = dataclasses.fields(cls)
    names: dict[str, Any] = {f"_set_{f.name}": getattr(cls, f.name).__set__ for f in fields}
    names["_UNSET"] = _UNSET
    params, body = [], []
    for f in fields:
        if f.default_factory is not dataclasses.MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_UNSET")
            body.append(f"    if {f.name} is _UNSET:\n        {f.name} = _factory_{f.name}()")
        elif f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            names[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        body.append(f"    _set_{f.name}(self, {f.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body)
    exec(source, names)  # as dataclasses makes its __init__: text of the field names only
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    made = vars(cls)["__init__"]  # the one dataclass made: its annotations and docstring
    init.__annotations__, init.__doc__ = made.__annotations__, made.__doc__
    cls.__init__ = init  # type: ignore[misc]
    return cls


@slot_init
@dataclass(frozen=True, slots=True)
class Quota:
    """
    One quota a response describes; ``unit`` is ``"requests"`` unless the header says so.

    ``scope`` is the server's name for the quota when it gives one (GitHub's
    ``x-ratelimit-resource``, Discord's ``X-RateLimit-Bucket``, an IETF policy name): quotas
    with different scopes are paced apart.
    """

    source: str
    remaining: float | None = None
    limit: float | None = None
    window: float | None = None
    reset_after: float | None = None
    unit: str = "requests"
    scope: str | None = None


@slot_init
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
        origin_wide: the server says the limit it hit holds for the whole host (Discord's
            ``X-RateLimit-Global``), not for one scope of it.
    """

    retry_after: float | None = None
    remaining: float | None = None
    limit: float | None = None
    window: float | None = None
    reset_after: float | None = None
    should_retry: bool | None = None
    unit: str = "requests"
    quotas: tuple[Quota, ...] = ()
    origin_wide: bool = False

    @property
    def scoped(self) -> bool:
        """True when a quota here names its scope, or the limit hit is the whole host's."""
        return self.origin_wide or any(q.scope is not None for q in self.quotas)

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
    scope: str | None = None,
) -> Quota | None:
    """A quota from whichever of its numbers a header gave (``None`` if it gave none)."""
    if remaining is None and limit is not None and used is not None:
        remaining = max(limit - used, 0.0)
    if limit is None and remaining is not None and used is not None:
        limit = used + remaining
    if remaining is None and limit is None and reset_after is None:
        return None
    return Quota(source, remaining, limit, window, reset_after, unit, scope)


def scope_name(value: str | None) -> str | None:
    """A server's scope name if it is a plain token of at most 64 characters, else ``None``."""
    if value is None:
        return None
    known = _NAMES.get(value, _UNSET)
    if not isinstance(known, _Unset):
        return known  # a server names the same few scopes on every response: remembered
    stripped = value.strip()
    found = stripped if _SCOPE.fullmatch(stripped) else None
    if len(value) <= 2 * _SCOPE_LENGTH:  # never a long value (a hostile server's)
        if len(_NAMES) >= MAX_NAMES:
            _NAMES.clear()  # a server names a few: all forgotten at once when full
        _NAMES[value] = found
    return found


_SCOPE_LENGTH = 64
_SCOPE = re.compile(rf"[A-Za-z0-9_.:/~+-]{{1,{_SCOPE_LENGTH}}}")
#: value -> its scope name (``None``: none); at most MAX_NAMES
_NAMES: dict[str, str | None] = {}
MAX_NAMES = 1024


def binding(quotas: Sequence[Quota]) -> Quota | None:
    """docs/headers.md R10: the quota closest to exhaustion (smallest remaining/limit ratio)."""
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


def hints_of(
    quotas: Sequence[Quota],
    *,
    retry_after: float | None = None,
    should_retry: bool | None = None,
    origin_wide: bool = False,
) -> Hints:
    """:class:`Hints` with ``quotas``, the binding one (see :func:`binding`) in front."""
    bound = binding(quotas)
    if bound is None:
        return Hints(
            retry_after=retry_after,
            should_retry=should_retry,
            quotas=tuple(quotas),
            origin_wide=origin_wide,
        )
    # by position (on every response with a quota): Hints' fields in their order
    return Hints(
        retry_after,
        bound.remaining,
        bound.limit,
        bound.window,
        bound.reset_after,
        should_retry,
        bound.unit,
        tuple(quotas),
        origin_wide,
    )
