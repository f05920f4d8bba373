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
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

__all__ = ["Item", "SFVError", "Token", "parse_dictionary", "parse_list"]

BareItem = int | Decimal | str | bytes | bool
Params = dict[str, BareItem]


class SFVError(ValueError):
    """The field value does not follow RFC 9651."""


class Token(str):
    """An sf-token (distinguished from an sf-string, which is a plain ``str``)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Item:
    """A bare item (or an inner list) with its parameters."""

    value: BareItem | tuple[Item, ...]
    params: Params = field(default_factory=dict)


_TCHAR = set("!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits + ":/")
_KEY_START = set(string.ascii_lowercase + "*")
_KEY_CHAR = set(string.ascii_lowercase + string.digits + "_-.*")


class _Parser:
    def __init__(self, text: str) -> None:
        if not text.isascii():
            raise SFVError("non-ASCII field value")
        self.s = text.strip(" \t")
        self.i = 0

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def done(self) -> bool:
        return self.i >= len(self.s)

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise SFVError(f"expected {char!r} at {self.i}")
        self.i += 1

    def skip(self, chars: str) -> None:
        while self.peek() and self.peek() in chars:
            self.i += 1

    def members(self, parse_one: Callable[[], None]) -> None:
        while not self.done():
            parse_one()
            self.skip(" \t")
            if self.done():
                return
            self.expect(",")
            self.skip(" \t")
            if self.done():
                raise SFVError("trailing comma")

    def item_or_inner_list(self) -> Item:
        if self.peek() == "(":
            return self.inner_list()
        value = self.bare_item()
        return Item(value, self.params())

    def inner_list(self) -> Item:
        self.expect("(")
        items: list[Item] = []
        while True:
            self.skip(" ")
            if self.peek() == ")":
                self.i += 1
                return Item(tuple(items), self.params())
            items.append(Item(self.bare_item(), self.params()))
            if self.peek() not in (" ", ")"):
                raise SFVError("bad inner list")

    def params(self) -> Params:
        params: Params = {}
        while self.peek() == ";":
            self.i += 1
            self.skip(" ")
            key = self.key()
            value: BareItem = True
            if self.peek() == "=":
                self.i += 1
                value = self.bare_item()
            params[key] = value
        return params

    def key(self) -> str:
        if self.peek() not in _KEY_START or not self.peek():
            raise SFVError(f"bad key at {self.i}")
        start = self.i
        while self.peek() and self.peek() in _KEY_CHAR:
            self.i += 1
        return self.s[start : self.i]

    def bare_item(self) -> BareItem:
        c = self.peek()
        if c == "-" or c.isdigit():
            return self.number()
        if c == '"':
            return self.sf_string()
        if c == ":":
            return self.byte_sequence()
        if c == "?":
            return self.boolean()
        if c == "@":
            self.i += 1
            value = self.number()
            if not isinstance(value, int):
                raise SFVError("date must be an integer")
            return value
        if c and (c.isalpha() or c == "*"):
            return self.token()
        raise SFVError(f"bad item at {self.i}")

    def number(self) -> int | Decimal:
        start = self.i
        if self.peek() == "-":
            self.i += 1
        digits_start = self.i
        while self.peek().isdigit():
            self.i += 1
        int_len = self.i - digits_start
        if int_len == 0:
            raise SFVError("number without digits")
        if self.peek() != ".":
            if int_len > 15:
                raise SFVError("integer too long")
            return int(self.s[start : self.i])
        if int_len > 12:
            raise SFVError("decimal too long")
        self.i += 1
        frac_start = self.i
        while self.peek().isdigit():
            self.i += 1
        if not 1 <= self.i - frac_start <= 3:
            raise SFVError("bad decimal fraction")
        return Decimal(self.s[start : self.i])

    def sf_string(self) -> str:
        self.expect('"')
        out: list[str] = []
        while True:
            c = self.peek()
            if not c:
                raise SFVError("unterminated string")
            self.i += 1
            if c == '"':
                return "".join(out)
            if c == "\\":
                nxt = self.peek()
                if nxt not in ('"', "\\"):
                    raise SFVError("bad escape")
                self.i += 1
                out.append(nxt)
            elif not " " <= c <= "~":
                raise SFVError("bad string character")
            else:
                out.append(c)

    def token(self) -> Token:
        start = self.i
        self.i += 1
        while self.peek() and self.peek() in _TCHAR:
            self.i += 1
        return Token(self.s[start : self.i])

    def byte_sequence(self) -> bytes:
        self.expect(":")
        end = self.s.find(":", self.i)
        if end < 0:
            raise SFVError("unterminated byte sequence")
        raw = self.s[self.i : end]
        self.i = end + 1
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise SFVError("bad byte sequence") from exc

    def boolean(self) -> bool:
        self.expect("?")
        c = self.peek()
        if c not in ("0", "1"):
            raise SFVError("bad boolean")
        self.i += 1
        return c == "1"


def parse_list(text: str) -> list[Item]:
    """Parse an sf-list; raise :class:`SFVError` when it is malformed."""
    return list(_parse_list_cached(text))


@functools.lru_cache(maxsize=512)
def _parse_list_cached(text: str) -> tuple[Item, ...]:
    """Servers repeat the same field values (a policy never changes): parse each once."""
    p = _Parser(text)
    out: list[Item] = []
    p.members(lambda: out.append(p.item_or_inner_list()))
    return tuple(out)


def parse_dictionary(text: str) -> dict[str, Item]:
    """Parse an sf-dictionary; raise :class:`SFVError` when it is malformed."""
    p = _Parser(text)
    out: dict[str, Item] = {}

    def member() -> None:
        key = p.key()
        if p.peek() == "=":
            p.i += 1
            out[key] = p.item_or_inner_list()
        else:
            out[key] = Item(True, p.params())

    p.members(member)
    return out
