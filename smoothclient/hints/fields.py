"""
Which header fields can carry a hint, and getting them out of any header container.

Servers send the same few field names on every response, so the names seen are remembered
(bounded, and never a long one): after the first few responses, "does this response carry any
hint?" is one C-level set comparison over its names.

A container is read through a :class:`FieldAccess` (how to list its names, and its
``(name, value)`` pairs).  :data:`GENERIC` reads mappings (``dict``, requests'
``CaseInsensitiveDict``, ``httpx.Headers``), objects with ``multi_items()`` and lists of pairs;
an edge that knows its library's container passes a faster access of its own.  Nothing here
knows httpx or requests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTEXT_FIELDS",
    "GENERIC",
    "MAX_NAME",
    "MAX_VALUE",
    "QUOTA_PREFIXES",
    "RETRY_AFTER_FIELDS",
    "SHOULD_RETRY_FIELDS",
    "TIMING_FIELDS",
    "FieldAccess",
    "KnownNames",
    "collect",
    "is_relevant",
    "scan",
    "text",
]

log = logging.getLogger("smoothclient.hints")

SHOULD_RETRY_FIELDS = ("stripe-should-retry", "x-should-retry")
RETRY_AFTER_FIELDS = (
    "retry-after",
    "retry-after-ms",
    "x-ms-retry-after-ms",
    "x-ratelimit-retry-after",
)
TIMING_FIELDS = frozenset(RETRY_AFTER_FIELDS + SHOULD_RETRY_FIELDS)
#: Read for context, not hints: the server's clock and a cache's age (docs/headers.md R8, R14).
CONTEXT_FIELDS = frozenset({"date", "age"})
#: Every quota field starts with one of these (each header family lists its own in ``read``).
QUOTA_PREFIXES = (
    "ratelimit",
    "x-ratelimit-",
    "x-rate-limit",
    "anthropic-ratelimit-",
    "x-shopify-shop-api-call-limit",
    "sforce-limit-info",
    "x-hubspot-ratelimit-",
    "x-ms-ratelimit-",
    "zendesk-ratelimit-",
)
#: No hint field has a longer name; longer names are neither read nor remembered.
MAX_NAME = 128
#: Longer values are ignored (logged): parsing a hostile header costs at most this much.
MAX_VALUE = 4096


def text(value: object) -> str:
    """A header name or value as ``str`` (bytes are latin-1, as HTTP fields are)."""
    if isinstance(value, _BYTES):
        return value.decode("latin-1")
    return str(value)


_BYTES = (bytes, bytearray)


def is_relevant(name: str) -> bool:
    """Whether a lowercased field name can carry a hint."""
    return name in TIMING_FIELDS or name.startswith(QUOTA_PREFIXES)


def _too_long(name: object) -> bool:
    """A name longer than any hint field's: neither read nor remembered."""
    return isinstance(name, bytes | bytearray | str) and len(name) > MAX_NAME


def _field_of(name: object) -> str | None:
    """The lowercased field ``name`` is read as, or ``None`` when it carries nothing we read."""
    if _too_long(name):
        return None
    key = text(name).strip().lower()
    return key if key in CONTEXT_FIELDS or is_relevant(key) else None


@dataclass(frozen=True, slots=True)
class FieldAccess:
    """
    How to read one kind of header container: its names, and its ``(name, value)`` pairs.

    ``names`` returns an iterable of the names (an iterator will do: it is asked again
    whenever the names are looked at once more, which a scan does only for names it has not
    learned).  ``per_call``, when given,
    says what a call costs in the units of the quotas not counted in requests (an LLM API's
    tokens), if known: such quotas are then read as calls (docs/headers.md R16).
    """

    names: Callable[[Any], Iterable[object]]
    pairs: Callable[[Any], Iterable[tuple[object, object]]]
    per_call: Callable[[], float | None] | None = None
    #: The values in the order of ``names`` (a sequence), for a container that keeps them
    #: so: the fields are then read by the places of their names, found once per list of
    #: names (a server sends the same list every time; see :func:`collect`).
    values: Callable[[Any], Sequence[object]] | None = None


def _generic_pairs(headers: Any) -> Iterable[tuple[object, object]]:
    multi = getattr(headers, "multi_items", None)
    if callable(multi):
        pairs: Iterable[tuple[object, object]] = multi()
        return pairs
    if isinstance(headers, Mapping):
        return headers.items()
    result: Iterable[tuple[object, object]] = headers
    return result


def _generic_names(headers: Any) -> Collection[object]:
    if isinstance(headers, Mapping):
        return headers.keys()
    if isinstance(headers, list | tuple):
        return [name for name, _ in headers]
    raise TypeError("an iterator of pairs: scanning it would consume it")


#: Mappings, ``multi_items()`` containers and lists of pairs.
GENERIC = FieldAccess(_generic_names, _generic_pairs)


class KnownNames:
    """
    Field names seen to carry no hint (and those seen to), exactly as containers give them.

    Bounded: past ``limit`` names it stops learning (later scans take the exact path for
    unknown names, still correct), and names longer than :data:`MAX_NAME` are never kept.
    """

    __slots__ = ("_no", "_yes", "fields", "limit")

    def __init__(self, limit: int = 1024) -> None:
        """Remember at most ``limit`` names of each kind."""
        #: name as a container gives it -> the lowercased field it is read as, or None
        self.fields: dict[object, str | None] = {}
        self._no: set[object] = set()
        self._yes: set[object] = set()
        self.limit = limit

    def learn(self, name: object) -> str | None:
        """The field ``name`` is read as (``None``: not read), remembered when short."""
        found = _field_of(name)
        if len(self.fields) < self.limit and type(name) in (str, bytes) and not _too_long(name):
            self.fields[name] = found
        return found

    def scan(self, headers: Any, access: FieldAccess = GENERIC) -> bool:
        """
        Cheaply: could ``headers`` hold any hint?  (Only the names are looked at.)

        ``False`` means reading them would find nothing; an unscannable container (an
        iterator, unhashable names) says ``True``.
        """
        try:
            # the common case in one pass over the names as the container gives them (no list
            # made: an iterator will do); only names not all known are listed and looked at
            if self._no.issuperset(access.names(headers)):
                return False
            names = list(access.names(headers))
            if not self._yes.isdisjoint(names):
                return True
        except Exception:
            return True
        return self._learn(names)

    def _learn(self, names: Collection[object]) -> bool:
        relevant = False
        for name in names:
            field = self.learn(name)
            known = self._yes if field is not None and field not in CONTEXT_FIELDS else self._no
            relevant = relevant or known is self._yes
            if len(known) < self.limit and not _too_long(name):
                known.add(name)
        return relevant


_KNOWN = KnownNames()
_UNSEEN = "\0"  # a name not learned yet (no field is called that)
#: :meth:`KnownNames.scan` of the process-wide table.
scan = _KNOWN.scan


#: A list of names -> where the fields read are in it: ``(place, field)`` pairs (see
#: :func:`collect`).  At most MAX_PLANS lists, all forgotten at once when full (a server
#: sends a few; the clear is atomic).
_PLANS: dict[tuple[object, ...], tuple[tuple[int, str], ...]] = {}
MAX_PLANS = 256
#: Lists of more names are planned each time, not remembered.
MAX_PLANNED = 64


def _plan(names: tuple[object, ...]) -> tuple[tuple[int, str], ...]:
    """Where the fields hints are read from are in ``names``, and which field each is."""
    known, learn = _KNOWN.fields, _KNOWN.learn
    plan = []
    for place, name in enumerate(names):
        key = known.get(name, _UNSEEN)
        if key is _UNSEEN:
            key = learn(name)
        if key is not None:
            plan.append((place, key))
    found = tuple(plan)
    if len(names) <= MAX_PLANNED and not any(map(_too_long, names)):  # bounded memory
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        _PLANS[names] = found
    return found


#: What :func:`collect` reads: ``(place, field)`` pairs, and the values the places are in.
_Read = tuple[tuple[tuple[int, str], ...], Sequence[object]]


def _placed(headers: Any, access: FieldAccess) -> _Read | None:
    """
    The fields read, by the places of their names in the container (``access.values``).

    ``None``: the container gives no values by place, or names that are not all hashable.
    """
    values_of = access.values
    if values_of is None:
        return None
    global _last
    names = tuple(access.names(headers))
    last_names, plan = _last
    try:
        if names != last_names:  # (the last response's names, predicted: an equal hashes nothing)
            kept = _PLANS.get(names)
            plan = _plan(names) if kept is None else kept
            if names in _PLANS:  # (a list kept: never a long one)
                _last = (names, plan)  # (one tuple: a thread reads the old pair or the new)
    except TypeError:  # an unhashable name
        return None
    return plan, values_of(headers)


#: The last list of names planned and its plan: a server sends the same names every time, so
#: the next response's are predicted to be these (checked by equality, which hashes nothing).
_last: tuple[tuple[object, ...], tuple[tuple[int, str], ...]] = ((), ())


def _listed(headers: Any, access: FieldAccess) -> _Read:
    """The fields read, each name of ``access.pairs`` looked at in turn (their values kept)."""
    plan: list[tuple[int, str]] = []
    values: list[object] = []
    known, learn = _KNOWN.fields, _KNOWN.learn
    for name, value in access.pairs(headers):
        try:
            key = known.get(name, _UNSEEN)
        except TypeError:  # an unhashable name in a list of pairs
            key = _UNSEEN
        if key is _UNSEEN:
            key = learn(name)
        if key is not None:
            plan.append((len(values), key))
            values.append(value)
    return tuple(plan), values


def collect(headers: Any, access: FieldAccess = GENERIC) -> dict[str, list[str]]:
    """
    The fields hints are read from (relevant names, ``Date``, ``Age``), lowercased.

    A container whose access gives its values by place (:attr:`FieldAccess.values`) is read
    by the places of those fields in its list of names, found once per list: a response's
    other fields are not looked at one by one.
    """
    fields: dict[str, list[str]] = {}
    plan, values = _placed(headers, access) or _listed(headers, access)
    for place, key in plan:
        value = values[place]
        value_text = value.decode("latin-1") if type(value) is bytes else text(value)
        if len(value_text) > MAX_VALUE:
            log.debug("ignoring %s: its value is over %d characters", key, MAX_VALUE)
            continue
        fields.setdefault(key, []).append(value_text.strip(" \t"))
    return fields
