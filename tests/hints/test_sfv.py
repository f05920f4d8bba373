"""The RFC 9651 parser: what it accepts, what it refuses, and that it refuses nothing else."""

from __future__ import annotations

import itertools
import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smoothclient.hints import sfv
from smoothclient.hints.sfv import Item, SFVError, Token, parse_dictionary, parse_list


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"d";r=99999;t=1', [Item("d", {"r": 99999, "t": 1})]),
        ('"a" , b;q=100;w=60', [Item("a"), Item(Token("b"), {"q": 100, "w": 60})]),
        ("-12.125, 0, 999999999999999", [Item(Decimal("-12.125")), Item(0), Item(999999999999999)]),
        ('"x\\"y\\\\z"', [Item('x"y\\z')]),
        ("?1;a, ?0", [Item(True, {"a": True}), Item(False)]),
        (":aGk=:", [Item(b"hi")]),
        ("@1700000000", [Item(1700000000)]),
        ("tok/x:y*;k=*t", [Item(Token("tok/x:y*"), {"k": Token("*t")})]),
        (
            '(1 "b" c);p=1.5, ()',
            [Item((Item(1), Item("b"), Item(Token("c"))), {"p": Decimal("1.5")}), Item(())],
        ),
        ("a;  b=1", [Item(Token("a"), {"b": 1})]),
        ("  a\t,\tb  ", [Item(Token("a")), Item(Token("b"))]),
        ("", []),
    ],
)
def test_lists(text: str, expected: list[Item]) -> None:
    assert parse_list(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "1234567890123456",  # an integer of 16 digits
        "1234567890123.5",  # a decimal with 13 integer digits
        "1.",  # a decimal without a fraction
        "1.2345",  # ... or with more than 3 digits of it
        "-",
        "-a",
        '"unterminated',
        '"bad \\n escape"',
        '"tab\tinside"',
        ":not base64!:",
        ":aGk:",  # bad padding
        "?2",
        "@1.5",  # a date is an integer
        "a,",  # a trailing comma
        "a,,b",
        "a;B=1",  # keys are lower case
        "a;=1",
        "a;k=",
        "(1 2",
        "(1,2)",
        "a b",
        "ä",
        "1;k=1.",
    ],
)
def test_malformed_lists_are_refused(text: str) -> None:
    with pytest.raises(SFVError):
        parse_list(text)


def test_dictionaries() -> None:
    parsed = parse_dictionary('limit=10, remaining=0;w=1, reset=2.5, flag, name="x"')
    assert parsed == {
        "limit": Item(10),
        "remaining": Item(0, {"w": 1}),
        "reset": Item(Decimal("2.5")),
        "flag": Item(True),
        "name": Item("x"),
    }
    for bad in ("Limit=1", "a=1,", "a=", "a=1 b=2"):
        with pytest.raises(SFVError):
            parse_dictionary(bad)


_PIECES = st.sampled_from(
    [*'az*AZ09-._:;=,"\\() \t?@!#$%&+^`|~/', "é", "\x7f", ":aGk=:", "?1", "@12", "1.25", '"x"']
)


@given(st.lists(_PIECES, max_size=40).map("".join))
def test_any_text_parses_or_raises_sfv_error(text: str) -> None:
    for parse in (parse_list, parse_dictionary):
        try:
            parsed: object = parse(text)
        except SFVError:
            continue  # refused, as malformed text must be; any other exception fails
        assert isinstance(parsed, list | dict)


def _whole(text: str) -> list[Item] | str:
    """What the character-by-character parser makes of ``text`` (its error's type, if any)."""
    try:
        return list(sfv._parse_whole(text))
    except SFVError:
        return "SFVError"


def _by_shape(text: str) -> list[Item] | str:
    try:
        return parse_list(text)
    except SFVError:
        return "SFVError"


@given(
    st.lists(_PIECES, max_size=30).map("".join),
    st.lists(st.text("0123456789", min_size=1, max_size=17), min_size=1, max_size=8),
)
def test_a_list_of_a_known_shape_reads_as_if_parsed_whole(text: str, digits: list[str]) -> None:
    _same_as_whole(text, digits)


def _same_as_whole(text: str, digits: list[str]) -> None:
    """``text``, then ``text`` with other digits: each read as if parsed whole."""
    sfv._SHAPES.clear()
    assert _by_shape(text) == _whole(text)  # the first of its shape: parsed whole
    runs = itertools.cycle(digits)
    other = re.sub(r"[0-9]+", lambda _: next(runs), text)  # the same text, other numbers
    assert _by_shape(other) == _whole(other)


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ('"d";r=99999;t=1', '"d";r=5;t=0'),
        ('"a";r=0;t=9, "b";r=-0;t=1', '"a";r=12;t=30, "b";r=-7;t=1'),  # "-0": the sign kept
        ('"a1";r=5', '"a2";r=5'),  # digits in a name: no shape, parsed whole
        ('a;r=5, "x1"', 'a;r=5, "x2"'),  # ... after the last integer
        ("?1;r=5", "?0;r=5"),  # ... in a boolean
        ("a;r=1.5", "a;r=2.25"),  # ... in a decimal
        ('"d";r=5', '"d";r=1234567890123456'),  # too long for an integer: refused
        ("@12;r=3", "@-15;r=4"),  # a date is an integer
        ("(1 2);r=3", "(4 5);r=6"),  # an inner list: parsed whole
        ('"d";r=1;r=2', '"d";r=3;r=4'),  # a key given twice keeps the last value
    ],
)
def test_the_numbers_of_a_shape(first: str, then: str) -> None:
    sfv._SHAPES.clear()
    parse_list(first)
    assert _by_shape(then) == _whole(then)


_BARE_TEXT = st.one_of(
    st.integers(-(10**15) + 1, 10**15 - 1).map(str),
    st.sampled_from(['"d"', '"x9"', "tok", "t0k", "?1", "?0", "1.5", "-0.25", ":aGk=:", "@9"]),
)
_MEMBER = st.builds(
    lambda value, params: value + "".join(f";{k}={v}" for k, v in params),
    _BARE_TEXT,
    st.lists(st.tuples(st.sampled_from(["r", "t", "q", "w", "k9"]), _BARE_TEXT), max_size=4),
)


@given(
    st.lists(_MEMBER, min_size=1, max_size=4).map(", ".join),
    st.lists(st.text("0123456789", min_size=1, max_size=16), min_size=1, max_size=8),
)
def test_a_valid_list_of_a_known_shape_reads_as_if_parsed_whole(
    text: str, digits: list[str]
) -> None:
    _same_as_whole(text, digits)


def test_a_parameter_given_twice_is_read_at_its_last_place() -> None:
    """
    ``t`` given twice keeps its first place and takes its last value: a shape made of equal
    numbers would read ``r`` and ``t`` from each other's runs (found by hypothesis).
    """
    _same_as_whole('0;t="d";r=0;t=0', ["0", "1"])
    _same_as_whole('"d";t=5;r=7;t=9', ["1", "2", "3"])
