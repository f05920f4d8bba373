"""
The IETF reader's templates (hints/ietf.py): a list of a known shape under a known policy
reads exactly as if read whole, the table stays bounded, and junk never raises.
"""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smoothclient.hints import ietf, read_hints, sfv
from smoothclient.hints.context import Ctx
from smoothclient.hints.model import Quota


def _ctx(policy: str | None, text: str | None) -> Ctx:
    fields = {}
    if policy is not None:
        fields["ratelimit-policy"] = [policy]
    if text is not None:
        fields["ratelimit"] = [text]
    return Ctx(fields, 1_000_000.0, "auto")


def _whole(policy: str | None, text: str | None) -> list[Quota]:
    """What the reader makes of the fields with no template (every part read)."""
    return ietf._read_whole(_ctx(policy, text), policy or "", text or "")


def _templated(policy: str | None, text: str | None) -> list[Quota]:
    return ietf.ietf(_ctx(policy, text))


def _forget() -> None:
    ietf._TEMPLATES.clear()
    sfv._SHAPES.clear()


def _same_as_whole(policy: str | None, text: str, digits: list[str]) -> None:
    """``text``, then ``text`` with other digits (its template's): each as if read whole."""
    _forget()
    assert _templated(policy, text) == _whole(policy, text)  # the first: makes the template
    assert _templated(policy, text) == _whole(policy, text)  # the same text, from it
    runs = itertools.cycle(digits)
    other = re.sub(r"[0-9]+", lambda _: next(runs), text)  # the same shape, other numbers
    assert _templated(policy, other) == _whole(policy, other)


_POLICIES = st.sampled_from(
    [
        None,
        "",
        '"d";q=100;w=60',
        '"d";q=100000;w=1',
        '"a";q=5, "b";q=10;w=1;qu="tokens", "c";q=7;w=9',
        "10;w=5, 20",
        '"d";q=-1;w=1',
        "not a ( policy",
        '"x9";q=1',
    ]
)
_NUMBER = st.one_of(
    st.integers(0, 10**6).map(str),
    st.integers(-50, -0).map(str),
    st.sampled_from(["-0", "007", "31536000", "31536001", "999999999999999", "1.5", "?1", "tok"]),
)
_NAME = st.sampled_from(['"d"', '"a"', '"b"', '"c"', "d", '"x9"', "?1", "12", '"é"', "1.5"])
_PARAM = st.tuples(st.sampled_from(["r", "t", "q", "w", "k9"]), _NUMBER).map("{0[0]}={0[1]}".format)
_MEMBER = st.builds(
    lambda name, params: name + "".join(f";{p}" for p in params),
    _NAME,
    st.lists(_PARAM, max_size=4),
)
_DIGITS = st.lists(st.text("0123456789", min_size=1, max_size=16), min_size=1, max_size=6)


@given(_POLICIES, st.lists(_MEMBER, max_size=4).map(", ".join), _DIGITS)
def test_a_list_read_from_its_template_reads_as_if_read_whole(
    policy: str | None, text: str, digits: list[str]
) -> None:
    _same_as_whole(policy, text, digits)


_PIECES = st.sampled_from([*'az09-._:;=,"() \t?@', "r=", "t=", "é", "1.25", '"d"', "1" * 16])


@given(_POLICIES, st.lists(_PIECES, max_size=30).map("".join), _DIGITS)
def test_any_text_reads_as_if_read_whole_and_never_raises(
    policy: str | None, text: str, digits: list[str]
) -> None:
    _same_as_whole(policy, text, digits)


@pytest.mark.parametrize(
    ("policy", "first", "then"),
    [
        ('"d";q=100;w=60', '"d";r=99;t=30', '"d";r=98;t=29'),
        ('"d";q=100;w=60', '"d";r=99;t=30', '"d";r=5;t=31536001'),  # beyond the horizon: None
        ('"d";q=100;w=60', '"d";r=0;t=1', '"d";r=-0;t=1'),  # a sign: read whole
        ('"d";q=100;w=60', '"d";r=1;t=1', '"d";r=-1;t=1'),  # a negative count: ignored
        ('"a";q=5, "b";q=10', '"a";r=4', '"a";r=3'),  # "b" unreported: from the policy
        ('"a";q=5', '"a";r=4;r=9', '"a";r=3;r=8'),  # a key given twice: the last one
        ('"a";q=5', '"a";r=?1;t=3', '"a";r=?0;t=4'),  # not a count: the item is ignored
        ('"a";q=5', '"a";r=4;t=?1', '"a";r=3;t=tok'),  # not a reset: none
        ("10;w=5", "remaining=3, limit=10", "remaining=2, limit=10"),  # a -07 dictionary
        ('"d";q=100;w=60', '"d";r=99999999999999;t=1', '"d";r=1234567890123456;t=1'),
    ],
)
def test_the_numbers_of_a_template(policy: str, first: str, then: str) -> None:
    _forget()
    assert _templated(policy, first) == _whole(policy, first)
    assert _templated(policy, then) == _whole(policy, then)


def test_a_countdown_reads_its_numbers_from_one_template() -> None:
    _forget()
    policy = '"d";q=100000;w=1'
    for left in range(99_999, 99_899, -1):
        hints = read_hints({"RateLimit-Policy": policy, "RateLimit": f'"d";r={left};t=1'})
        assert (hints.remaining, hints.limit, hints.window, hints.reset_after) == (
            float(left),
            100000.0,
            1.0,
            1.0,
        )
    assert len(ietf._TEMPLATES) == 1


def test_the_templates_are_bounded() -> None:
    _forget()
    for index in range(3 * ietf.MAX_TEMPLATES):
        name = "n" + "x" * (index % 40) + "y" * (index // 40)  # a new shape each time
        assert _templated(None, f"{name};r=1") == _whole(None, f"{name};r=1")
        assert len(ietf._TEMPLATES) <= ietf.MAX_TEMPLATES
