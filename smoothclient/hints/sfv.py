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

__all__ = [
    "Item",
    "SFVError",
    "Shape",
    "Slot",
    "Token",
    "parse_dictionary",
    "parse_list",
    "shape_of",
    "split_runs",
]

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
    """
    Parse an sf-list; raise :class:`SFVError` when it is malformed.

    A server sends the same list every time but for its numbers (``r=`` counting down), so
    a list is parsed once per shape (the text with its digits taken out): later lists of that
    shape take their integers from the digits (see :class:`Shape`).
    """
    parts = _DIGITS.split(text)
    skeleton = "0".join(parts[0::2])  # runs are apart but where one is over 15 digits: "00"
    shape = _SHAPES[skeleton] if skeleton in _SHAPES else _shape(skeleton, text, parts)
    if shape is None:
        return list(_parse_list_cached(text))
    return shape.fill(parts[1::2])


def split_runs(text: str) -> list[str]:
    """
    ``text`` split at its runs of digits: text, run, text, ... (the runs at odd indices).

    ``"0".join`` of the even parts is the list's skeleton (what :func:`shape_of` takes); a
    caller that reads a list's numbers itself (``hints/ietf.py``) splits it once with this.
    """
    return _DIGITS.split(text)


def shape_of(skeleton: str, text: str, parts: list[str]) -> Shape | None:
    """
    The :class:`Shape` of the lists whose skeleton is ``skeleton`` (``None``: they have none).

    ``text`` is one of them, ``parts`` its :func:`split_runs`.  Remembered, as
    :func:`parse_list` remembers it.
    """
    return _SHAPES[skeleton] if skeleton in _SHAPES else _shape(skeleton, text, parts)


#: Runs of digits, each at most as long as an sf-integer (RFC 9651 section 3.3.1): a longer
#: one splits in two with nothing between, which no list of that shape has.  ``split`` keeps
#: the runs: text, run, text, ...
_DIGITS = re.compile(r"([0-9]{1,15})")


class Slot(int):
    """Where a shape's integer goes: the index of its digit run (its sign kept beside it)."""

    __slots__ = ()


class Shape:
    """
    A list's parse with each integer replaced by the index of the digit run it came from.

    Every character class of RFC 9651 that holds one digit holds all ten, so two lists whose
    texts differ only in their digits (each run no longer than an integer may be) parse into
    the same structure: the same items, parameters and kinds.  Only the values read from
    digits differ, and a shape is made only of a list whose every digit run is a whole integer
    (no digits in a string, token, key, byte sequence, decimal or boolean): it refills those.
    """

    __slots__ = ("items",)

    def __init__(
        self, items: tuple[tuple[BareItem, int, tuple[tuple[str, BareItem, int], ...]], ...]
    ) -> None:
        """Per item: its value (or a slot), the value's sign, and its parameters likewise."""
        self.items = items

    def fill(self, runs: list[str]) -> list[Item]:
        """The items of the list whose digit runs are ``runs``."""
        numbers = [int(run) for run in runs]
        out: list[Item] = []
        for value, sign, params in self.items:
            filled = {key: sign_ * numbers[v] if type(v) is Slot else v for key, v, sign_ in params}
            out.append(Item(sign * numbers[value] if type(value) is Slot else value, filled))
        return out


#: skeleton -> its shape; at most MAX_SHAPES (all forgotten at once when full: a server
#: sends a few shapes, and clearing is atomic where threads share the table)
_SHAPES: dict[str, Shape | None] = {}
MAX_SHAPES = 512


def _shape(skeleton: str, text: str, parts: list[str]) -> Shape | None:
    """
    The :class:`Shape` of lists whose text, digits taken out, is ``skeleton``.

    ``text`` is one such list, ``parts`` its split at :data:`_DIGITS`.  ``None``: ``text``
    is malformed, or holds digits that are not integers; such a list is parsed whole each
    time (its text cached).  Remembered in :data:`_SHAPES`.
    """
    if len(_SHAPES) >= MAX_SHAPES:
        _SHAPES.clear()
    shape = _SHAPES[skeleton] = _shaped(text, parts)
    return shape


def _shaped(text: str, parts: list[str]) -> Shape | None:
    """The shape of ``text``'s list, if it has one (see :func:`_shape`)."""
    try:
        items = _parse_list_cached(text)
    except SFVError:
        return None
    # each digit run with the sign before it (a list that parsed has none over 15 digits)
    runs = [
        (-1 if before.endswith("-") else 1, int(digits))
        for before, digits in zip(parts[0::2], parts[1::2], strict=False)
    ]
    slots = iter(range(len(runs)))

    def slot(value: BareItem) -> tuple[BareItem, int]:
        if type(value) is not int:
            return value, 1
        index = next(slots, None)
        if index is None or value != runs[index][0] * runs[index][1]:
            raise _NotAShape
        return Slot(index), runs[index][0]  # the sign from the text: "-0" is 0

    try:
        shaped: list[tuple[BareItem, int, tuple[tuple[str, BareItem, int], ...]]] = []
        for item in items:
            if isinstance(item.value, tuple | Decimal | bytes):
                return None  # an inner list, or digits that are no integer's
            value, sign = slot(item.value)
            params: list[tuple[str, BareItem, int]] = []
            for key, param in item.params.items():
                if isinstance(param, Decimal | bytes):
                    return None
                params.append((key, *slot(param)))
            shaped.append((value, sign, tuple(params)))
    except _NotAShape:
        return None
    if next(slots, None) is not None:
        return None  # digits left over: in a string, token, key or boolean
    shape = Shape(tuple(shaped))
    # a parameter given twice keeps its first place and takes its last value: the runs are
    # then met out of the text's order, unseen when they hold equal numbers.  A list of this
    # shape with a distinct number in each run, parsed whole, tells (once per shape)
    probe = [str(index) for index in range(len(runs))]
    probed = parts.copy()
    probed[1::2] = probe
    try:
        whole = list(_parse_whole("".join(probed)))
    except SFVError:  # pragma: no cover - the same skeleton parses alike
        return None
    return shape if shape.fill(probe) == whole else None


class _NotAShape(Exception):
    """An integer that is not the next digit run."""


def _parse_whole(text: str) -> tuple[Item, ...]:
    """A list parsed character by character."""
    p = _Parser(text)
    return tuple(p.members(p.item_or_inner_list))


#: A list that has no shape may still repeat (a policy never changes): parsed once.
_parse_list_cached = functools.lru_cache(maxsize=512)(_parse_whole)


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
