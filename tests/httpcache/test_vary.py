"""
Vary: a request matches a stored variant when its values differ only where the field's
syntax says nothing does (RFC 9111 section 4.1), in virtual time.
"""

from __future__ import annotations

import pytest

from smoothclient.httpcache.rules import vary_values
from smoothclient.testing import FakeClock

from .conftest import client, fixed


def same(name: str, first: str, second: str) -> bool:
    """Whether a request with ``name: first`` selects the variant stored for ``second``."""
    return vary_values([name.lower()], [(name, first)]) == vary_values(
        [name.lower()], [(name, second)]
    )


@pytest.mark.parametrize(
    ("name", "first", "second"),
    [
        ("Accept-Language", "en, de", " en ,   de"),  # whitespace around the commas
        ("Accept-Language", "en,de", "en, de"),
        ("Accept-Language", "en, de", "eN, De"),  # language ranges are case-insensitive
        ("Accept-Language", "en;q=0.5, de", "en ; Q=0.5,de"),  # and so is the weight's q
        ("Accept-Language", "en, de", "en,, de,"),  # empty members are nothing
        ("Accept-Encoding", "gzip, br", "GZIP,br"),
        ("Accept-Charset", "utf-8, iso-8859-1;q=0.5", "UTF-8,ISO-8859-1 ;q=0.5"),
        ("Accept", "text/html;level=1, application/json", "Text/HTML; LEVEL=1 ,application/json"),
        ("Foo", "a b", " a   b "),  # any field: the whitespace around it and its runs inside
    ],
)
def test_values_that_differ_only_where_nothing_does_select_the_same_variant(
    name: str, first: str, second: str
) -> None:
    assert same(name, first, second)


@pytest.mark.parametrize(
    ("name", "first", "second"),
    [
        ("Accept-Language", "en, de", "de, en"),  # the order may say a preference
        ("Accept-Language", "en, de", "en"),
        ("Accept-Language", "en;q=0.5", "en;q=0.4"),
        ("Accept", 'text/html;p="A"', 'text/html;p="a"'),  # a parameter's value keeps its case
        ("Accept", 'text/html;p="a,b"', 'text/html;p="a, b"'),  # inside quotes: as it is
        ("Accept", 'a/b;p="x\\", y"', 'a/b;p="x\\",y"'),  # an escaped quote stays inside
        ("Foo", "1,2", "1, 2"),  # a field of unknown syntax may not be a list
        ("Foo", "abc", "ABC"),
    ],
)
def test_values_that_may_differ_in_meaning_select_another_variant(
    name: str, first: str, second: str
) -> None:
    assert not same(name, first, second)


def test_a_stored_variant_answers_a_request_whose_values_differ_only_in_form(
    wall: FakeClock,
) -> None:
    c = client(wall, fixed(cache_control="max-age=600", vary="Accept-Language, Accept-Encoding"))
    c.get(headers=[("Accept-Language", "en-US, de;q=0.5"), ("Accept-Encoding", "gzip, br")])
    for language, coding in (
        (" en-us ,de ; q=0.5", "gzip,br"),
        ("EN-US,DE;Q=0.5", "GZIP, BR"),
    ):
        answer = c.get(headers=[("Accept-Language", language), ("Accept-Encoding", coding)])
        assert (answer.status, answer.cache) == (200, "hit")
    other = c.get(headers=[("Accept-Language", "de;q=0.5, en-US"), ("Accept-Encoding", "gzip, br")])
    assert other.cache == "miss"
    assert len(c.origin.requests) == 2
