"""
A small, strict parser for RFC 9651 Structured Field Values (lists and dictionaries).

Only parsing is needed (to read ``RateLimit`` and ``RateLimit-Policy``).  Any deviation from
the grammar raises :class:`SFVError`; callers ignore the whole field then, as the RateLimit
drafts require ("Malformed RateLimit header fields MUST be ignored").
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypeVar

from .model import slot_init

__all__ = ["Item", "SFVError", "Token", "parse_dictionary", "parse_list"]

BareItem = int | Decimal | str | bytes | bool
M = TypeVar("M")
Params = dict[str, BareItem]


class SFVError(ValueError):
    """The field value does not follow RFC 9651."""


class Token(str):
    """An sf-token (distinguished from an sf-string, which is a plain ``str``)."""

    __slots__ = ()


@slot_init
@dataclass(frozen=True, slots=True)
class Item:
    """A bare item (or an inner list) with its parameters."""

    value: BareItem | tuple[Item, ...]
    params: Params = field(default_factory=dict)


_BARE = (
    r'"((?:[ !#-\[\]-~]|\\["\\])*)"'  # an sf-string (its escapes undone later)
    r"|(-?[0-9]+(?:\.[0-9]*)?)"  # an integer or a decimal (their lengths checked later)
    r"|([A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*)"  # a token
    r"|\?([01])"  # a boolean
    r"|:([A-Za-z0-9+/=]*):"  # a byte sequence
    r"|@(-?[0-9]+(?:\.[0-9]*)?)"  # a date
)
#: A bare item (groups 1-6, one per kind), and a parameter (group 1 its key, 2-7 its value):
#: each matched in one step, since the edges parse a RateLimit field on every response.
_ITEM = re.compile(_BARE)
_PARAM = re.compile(r"; *([a-z*][a-z0-9_.*-]*)(?:=(?:" + _BARE + "))?")
_OWS = re.compile(r"[ \t]*")
_SP = re.compile(r" *")
_KEY = re.compile(r"[a-z*][a-z0-9_.*-]*")
_ESCAPE = re.compile(r"\\(.)")


def _number(text: str) -> int | Decimal:
    whole, dot, fraction = text.lstrip("-").partition(".")
    if not dot:
        if len(whole) > 15:
            raise SFVError("integer too long")
        return int(text)
    if len(whole) > 12:
        raise SFVError("decimal too long")
    if not 1 <= len(fraction) <= 3:
        raise SFVError("bad decimal fraction")
    return Decimal(text)


def _bare(match: re.Match[str], first: int) -> BareItem:
    """The bare item ``match`` found, its kind's group numbered from ``first``."""
    kind = match.lastindex
    assert kind is not None
    text = match.group(kind)
    kind -= first
    if kind == 0:
        return _ESCAPE.sub(r"\1", text) if "\\" in text else text
    if kind == 1:
        return _number(text)
    if kind == 2:
        return Token(text)
    if kind == 3:
        return text == "1"
    if kind == 4:
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise SFVError("bad byte sequence") from exc
    value = _number(text)
    if not isinstance(value, int):
        raise SFVError("date must be an integer")
    return value


class _Parser:
    __slots__ = ("i", "s")

    def __init__(self, text: str) -> None:
        if not text.isascii():
            raise SFVError("non-ASCII field value")
        self.s = text.strip(" \t")
        self.i = 0

    def expect(self, char: str) -> None:
        if not self.s.startswith(char, self.i):
            raise SFVError(f"expected {char!r} at {self.i}")
        self.i += 1

    def skip(self, pattern: re.Pattern[str]) -> None:
        self.i = self._match(pattern, "").end()  # these patterns match at least ""

    def _match(self, pattern: re.Pattern[str], what: str) -> re.Match[str]:
        match = pattern.match(self.s, self.i)
        if match is None:
            raise SFVError(f"bad {what} at {self.i}")
        self.i = match.end()
        return match

    def members(self, parse_one: Callable[[], M]) -> list[M]:
        """What ``parse_one`` reads of each comma-separated member (one loop, no callbacks)."""
        s, end = self.s, len(self.s)
        out: list[M] = []
        while self.i < end:
            out.append(parse_one())
            i = _OWS.match(s, self.i).end()  # type: ignore[union-attr] # matches at least ""
            if i >= end:
                self.i = i
                break
            if s[i] != ",":
                raise SFVError(f"expected ',' at {i}")
            self.i = i = _OWS.match(s, i + 1).end()  # type: ignore[union-attr]
            if i >= end:
                raise SFVError("trailing comma")
        return out

    def item_or_inner_list(self) -> Item:
        if self.s.startswith("(", self.i):
            return self.inner_list()
        value = self.bare_item()
        return Item(value, self.params())

    def inner_list(self) -> Item:
        self.expect("(")
        items: list[Item] = []
        while True:
            self.skip(_SP)
            if self.s.startswith(")", self.i):
                self.i += 1
                return Item(tuple(items), self.params())
            items.append(Item(self.bare_item(), self.params()))
            if not self.s.startswith((" ", ")"), self.i):
                raise SFVError("bad inner list")

    def bare_item(self) -> BareItem:
        return _bare(self._match(_ITEM, "item"), 1)

    def params(self) -> Params:
        params: Params = {}
        s = self.s
        while s.startswith(";", self.i):
            match = _PARAM.match(s, self.i)
            if match is None:
                raise SFVError(f"bad parameter at {self.i}")
            self.i = match.end()
            params[match.group(1)] = True if match.lastindex == 1 else _bare(match, 2)
        return params

    def key(self) -> str:
        return self._match(_KEY, "key").group()


def parse_list(text: str) -> list[Item]:
    """Parse an sf-list; raise :class:`SFVError` when it is malformed."""
    return list(_parse_list_cached(text))


@functools.lru_cache(maxsize=512)
def _parse_list_cached(text: str) -> tuple[Item, ...]:
    """Servers repeat the same field values (a policy never changes): parse each once."""
    p = _Parser(text)
    return tuple(p.members(p.item_or_inner_list))


def parse_dictionary(text: str) -> dict[str, Item]:
    """Parse an sf-dictionary; raise :class:`SFVError` when it is malformed."""
    p = _Parser(text)

    def member() -> tuple[str, Item]:
        key = p.key()
        if p.s.startswith("=", p.i):
            p.i += 1
            return key, p.item_or_inner_list()
        return key, Item(True, p.params())

    return dict(p.members(member))  # a key given again keeps its place, takes the last value
