"""
A stored response and its bytes: what every store keeps (the memory store keeps the object).

The bytes are a short magic, a JSON head and the body; anything else decodes to
:class:`Junk`, which a store reads as a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import struct
from dataclasses import dataclass
from typing import Any

from .rules import MAX_SECONDS, Freshness

__all__ = ["MAGIC", "Entry", "Junk", "aged", "decode", "encode", "index_of", "variant_key"]

MAGIC = b"SCHC1"
_HEAD = struct.Struct(">I")


class Junk(ValueError):
    """Stored bytes that are not an entry (a store treats them as a miss)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """
    One stored response: what it was, when it was born, how long it is fresh and when it is due.

    ``key``: the primary key it is stored under; ``vary``: the request fields it varies on and
    ``selected`` their values in the request that got it; ``born``, ``lifetime``,
    ``revalidate``, ``strict``: its :class:`~smoothclient.httpcache.rules.Freshness`;
    ``swr`` / ``sie``: the stale allowances in effect (server's and caller's together, 0 when
    ``strict``); ``refresh``: the age at which it is due for revalidation, drawn inside the
    last part of its lifetime (docs/http-cache.md section 3); ``delta``: how long fetching it
    took (the XFetch rule's delta).

    ``variants``: not empty, this is no response but the **index of the variants** of a
    response that varies: ``vary`` names the fields it varies on, each variant is stored under
    a key of its own made from this token and its values of those fields (see
    :func:`variant_key`), ``born`` is when the index was written and ``lifetime`` how long it
    is kept.  A new token makes every variant stored under the old one unreachable.
    """

    key: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    vary: tuple[str, ...]
    selected: tuple[str | None, ...]
    born: float
    lifetime: float
    refresh: float
    revalidate: bool = False
    strict: bool = False
    swr: float = 0.0
    sie: float = 0.0
    delta: float = 0.0
    variants: str = ""

    @property
    def freshness(self) -> Freshness:
        """Its freshness, for the rules."""
        return Freshness(self.born, self.lifetime, self.revalidate, self.strict)

    @property
    def size(self) -> int:
        """Its approximate size in bytes (the body, the headers and a fixed overhead)."""
        return len(self.body) + sum(len(k) + len(v) + 4 for k, v in self.headers) + 256

    def keep_for(self, now: float) -> float:
        """How long a store should keep it from ``now``: fresh, stale allowances, revalidation."""
        left = max(0.0, self.lifetime - (now - self.born))
        return left + max(self.swr, self.sie) + max(self.lifetime, 60.0)


def index_of(key: str, names: tuple[str, ...], token: str, now: float, keep: float) -> Entry:
    """The index of the variants of the response under ``key`` (see :attr:`Entry.variants`)."""
    return Entry(key, 0, (), b"", names, (), now, keep, keep, variants=token)


def variant_key(key: str, index: Entry, values: tuple[str | None, ...]) -> str:
    """
    The key of the variant of ``key`` selected by ``values`` (of the fields ``index`` names).

    A hash of the index's token, the names and the values: each field's value or its absence
    counts, and values made of the same text otherwise split never collide.
    """
    digest = hashlib.sha256(json.dumps([index.variants, index.vary, values]).encode())
    return f"{key} variant={digest.hexdigest()[:32]}"


def aged(entry: Entry, now: float) -> Entry:
    """
    ``entry`` as served at ``now``: its ``Age`` says its current age (RFC 9111 section 4).

    A cache sending a stored response must generate ``Age``: what the origin said (or
    nothing) plus the time the response spent here, so a client downstream knows how long
    it has left.  An age past :data:`~.rules.MAX_SECONDS` is sent as that, as RFC 9111
    section 1.2.2 asks of any delta-seconds.
    """
    age = str(int(min(max(0.0, now - entry.born), MAX_SECONDS)))  # (RFC 9111 section 1.2.2)
    headers = tuple((k, v) for k, v in entry.headers if k.lower() != "age")
    return dataclasses.replace(entry, headers=(*headers, ("Age", age)))


def encode(entry: Entry) -> bytes:
    """The entry as bytes."""
    head: dict[str, Any] = {
        "k": entry.key,
        "s": entry.status,
        "h": entry.headers,
        "v": entry.vary,
        "x": entry.selected,
        "b": entry.born,
        "l": entry.lifetime,
        "r": entry.refresh,
        "rv": entry.revalidate,
        "st": entry.strict,
        "w": entry.swr,
        "e": entry.sie,
        "d": entry.delta,
        "n": len(entry.body),
    }
    if entry.variants:
        head["g"] = entry.variants
    raw = json.dumps(head, separators=(",", ":")).encode()
    return MAGIC + _HEAD.pack(len(raw)) + raw + entry.body


def decode(blob: object, key: str) -> Entry:
    """
    The entry ``blob`` holds for ``key``; :class:`Junk` if it is anything else.

    Every field is checked for its type: bytes written by anything but :func:`encode` (or for
    another key) never reach the rules.
    """
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise Junk(type(blob).__name__)
    data = bytes(blob)
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _HEAD.size:
        raise Junk("no magic")
    (size,) = _HEAD.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _HEAD.size
    if start + size > len(data):
        raise Junk("truncated")
    try:
        head = json.loads(data[start : start + size])
        entry = Entry(
            key=_typed(head["k"], str),
            status=_status(head["s"]),
            headers=tuple((_typed(k, str), _typed(v, str)) for k, v in head["h"]),
            body=data[start + size :],
            vary=tuple(_typed(n, str) for n in head["v"]),
            selected=tuple(None if x is None else _typed(x, str) for x in head["x"]),
            born=_number(head["b"]),
            lifetime=_number(head["l"]),
            refresh=_number(head["r"]),
            revalidate=_typed(head["rv"], bool),
            strict=_typed(head["st"], bool),
            swr=_number(head["w"]),
            sie=_number(head["e"]),
            delta=_number(head["d"]),
            variants=_typed(head.get("g", ""), str),
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError) as exc:
        raise Junk(str(exc)) from exc
    matched = entry.variants or len(entry.vary) == len(entry.selected)
    if entry.key != key or not matched or head["n"] != len(entry.body):
        raise Junk("another key")
    return entry


def _typed(value: Any, kind: type[Any]) -> Any:
    if type(value) is not kind:
        msg = f"expected {kind.__name__}, got {type(value).__name__}"
        raise TypeError(msg)
    return value


def _status(value: Any) -> int:
    """A status code: three digits (0: an index of variants, which is no response)."""
    status: int = _typed(value, int)
    if not 0 <= status <= 999:
        msg = f"expected a status, got {status!r:.40}"
        raise ValueError(msg)
    return status


def _number(value: Any) -> float:
    """A finite number (no time or allowance an entry holds is infinite, nor NaN)."""
    if type(value) not in (int, float):
        msg = f"expected a number, got {value!r:.40}"
        raise TypeError(msg)
    number = float(value)  # (OverflowError for an int past a float's range)
    if not math.isfinite(number):
        msg = f"expected a finite number, got {value!r:.40}"
        raise ValueError(msg)
    return number
