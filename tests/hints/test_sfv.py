"""The RFC 9651 parser: what it accepts, what it refuses, and that it refuses nothing else."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
