"""
Reading fields by the places of their names (hints/fields.py): a container whose access gives
its values by place reads exactly what looking at every name in turn reads, the table of
name lists stays bounded, and odd names never raise.
"""

from __future__ import annotations

import httpx
from hypothesis import given
from hypothesis import strategies as st

from smoothclient.edges.httpx_transport import HEADER_ACCESS
from smoothclient.hints import GENERIC, FieldAccess, read_fields
from smoothclient.hints import fields as fields_module
from smoothclient.hints.fields import MAX_NAME, MAX_PLANNED, MAX_PLANS, MAX_VALUE, collect

#: The same access with no values by place: every name looked at in turn.
LISTED = FieldAccess(HEADER_ACCESS.names, HEADER_ACCESS.pairs)

_NAMES = st.sampled_from(
    [
        "Server",
        "Date",
        "Age",
        "Content-Type",
        "RateLimit",
        "ratelimit-policy",
        "RateLimit-Policy",
        "Retry-After",
        "X-RateLimit-Remaining",
        "x-ratelimit-limit",
        "X-Should-Retry",
        "X-Request-Id",
        "x-" + "n" * (MAX_NAME + 1),  # too long to be read or remembered
    ]
)
_VALUES = st.one_of(
    st.sampled_from(
        ['"d";r=5;t=1', '"d";q=100;w=60', "  7 ", "1", "Sun, 22 Nov 2026 20:00:00 GMT"]
    ),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
    st.just("x" * (MAX_VALUE + 1)),  # ignored: too long
)
_HEADERS = st.lists(st.tuples(_NAMES, _VALUES), max_size=12)


@given(_HEADERS)
def test_read_by_place_is_read_name_by_name(pairs: list[tuple[str, str]]) -> None:
    """The same fields, values and order, whether the list of names was seen before or not."""
    headers = httpx.Headers(pairs)
    listed = collect(headers, LISTED)
    assert collect(headers, HEADER_ACCESS) == listed  # planned now (or before)
    assert collect(headers, HEADER_ACCESS) == listed  # from the plan
    assert collect(headers, GENERIC) == listed
    assert read_fields(headers, HEADER_ACCESS, now=0.0) == read_fields(headers, LISTED, now=0.0)


@given(st.lists(st.sampled_from(["5", "4", "3"]), min_size=2, max_size=5))
def test_a_countdown_under_one_list_of_names_reads_each_answer(left: list[str]) -> None:
    """A plan says where the fields are, never what they hold: every answer's own values."""
    for value in left:
        headers = httpx.Headers([("Server", "x"), ("RateLimit", f'"d";r={value};t=1')])
        assert collect(headers, HEADER_ACCESS) == {"ratelimit": [f'"d";r={value};t=1']}


def test_the_table_of_name_lists_stays_bounded() -> None:
    """Past MAX_PLANS lists it starts again; lists of long names, or too many, are not kept."""
    fields_module._PLANS.clear()
    for i in range(MAX_PLANS + 10):
        collect(httpx.Headers([(f"x-{i}", "1"), ("RateLimit", '"d";r=1')]), HEADER_ACCESS)
    assert 0 < len(fields_module._PLANS) <= MAX_PLANS
    fields_module._PLANS.clear()
    long = httpx.Headers([("x-" + "n" * MAX_NAME, "1"), ("Retry-After", "3")])
    assert collect(long, HEADER_ACCESS) == {"retry-after": ["3"]}
    many = httpx.Headers([(f"x-{i}", "1") for i in range(MAX_PLANNED)] + [("Age", "2")])
    assert collect(many, HEADER_ACCESS) == {"age": ["2"]}
    assert not fields_module._PLANS


def test_unhashable_names_are_read_name_by_name() -> None:
    """A container whose names cannot key the table is read the other way, never raising."""
    access = FieldAccess(
        lambda h: [[n] for n, _ in h], lambda h: [(n, v) for n, v in h], values=lambda h: h
    )
    assert collect([("Retry-After", "3")], access) == {"retry-after": ["3"]}


@given(_HEADERS)
def test_requests_headers_read_by_place_as_name_by_name(pairs: list[tuple[str, str]]) -> None:
    """requests' CaseInsensitiveDict (one value a name) reads the same either way."""
    from requests.structures import CaseInsensitiveDict

    from smoothclient.edges.requests_adapter import HEADER_ACCESS as REQUESTS

    headers = CaseInsensitiveDict(pairs)
    listed = collect(headers, FieldAccess(REQUESTS.names, REQUESTS.pairs))
    assert REQUESTS.values is not None
    assert collect(headers, REQUESTS) == listed
    assert collect(headers, REQUESTS) == listed
    assert collect(headers, GENERIC) == listed


@given(_HEADERS)
def test_aiohttp_headers_read_by_place_as_name_by_name(pairs: list[tuple[str, str]]) -> None:
    """aiohttp's CIMultiDictProxy (names repeated, any case) reads the same either way."""
    from multidict import CIMultiDict, CIMultiDictProxy

    from smoothclient.edges.aiohttp_middleware import HEADER_ACCESS as AIOHTTP

    headers = CIMultiDictProxy(CIMultiDict(pairs))
    listed = collect(headers, FieldAccess(AIOHTTP.names, AIOHTTP.pairs))
    assert AIOHTTP.values is not None
    assert collect(headers, AIOHTTP) == listed
    assert collect(headers, AIOHTTP) == listed
    assert collect(headers, GENERIC) == listed


def test_the_last_list_of_names_is_predicted_and_checked() -> None:
    """The next list is taken for the last one only when equal: another is planned, not reused."""
    first = httpx.Headers([("Server", "x"), ("RateLimit", '"d";r=5;t=1')])
    other = httpx.Headers([("RateLimit", '"d";r=4;t=1'), ("Server", "x")])
    assert collect(first, HEADER_ACCESS) == {"ratelimit": ['"d";r=5;t=1']}
    assert fields_module._last[0] == (b"server", b"ratelimit")
    assert collect(first, HEADER_ACCESS) == {"ratelimit": ['"d";r=5;t=1']}
    assert collect(other, HEADER_ACCESS) == {"ratelimit": ['"d";r=4;t=1']}
    assert fields_module._last[0] == (b"ratelimit", b"server")
    long = httpx.Headers([("x-" + "n" * MAX_NAME, "1"), ("Retry-After", "3")])
    assert collect(long, HEADER_ACCESS) == {"retry-after": ["3"]}
    assert fields_module._last[0] == (b"ratelimit", b"server")  # a long name is never kept
