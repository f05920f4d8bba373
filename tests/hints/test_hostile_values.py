"""
Hostile header values found by a fuzzing campaign (issue 37): each reads as nothing, or clamped.

Whatever a header says, every number :func:`read_hints` gives is finite, never negative, and
a delay or reset is within the horizon (docs/headers.md R9, R13); no reader of a family fails
on a value (a failure is swallowed there, and takes the family's other quotas with it).
"""

from __future__ import annotations

import dataclasses
import logging
import math

import pytest

from smoothclient.hints import GENERIC, Hints, read_fields, read_hints
from smoothclient.hints.model import HORIZON

NOW = 1_700_000_000.0


def _numbers(hints: Hints) -> list[float]:
    found = [hints.retry_after, hints.remaining, hints.limit, hints.window, hints.reset_after]
    for q in hints.quotas:
        found += [q.remaining, q.limit, q.window, q.reset_after]
    return [n for n in found if n is not None]


def _sane(hints: Hints) -> None:
    for number in _numbers(hints):
        assert math.isfinite(number), hints
        assert number >= 0, hints
    for delay in (hints.retry_after, hints.reset_after, *(q.reset_after for q in hints.quotas)):
        assert delay is None or delay <= HORIZON, hints


@pytest.fixture
def no_reader_fails(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Fails the test if a reader raised (``read_fields`` logs what it swallows)."""
    caplog.set_level(logging.DEBUG, "smoothclient.hints")
    return caplog


def _failed(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info]


HUGE = "9" * 400  # a count no float holds: float() of it is infinite


@pytest.mark.parametrize(
    "headers",
    [
        {"x-shopify-shop-api-call-limit": f"{HUGE}/{HUGE}"},  # once remaining NaN, limit inf
        {"x-shopify-shop-api-call-limit": f"1/{HUGE}"},  # once remaining and limit inf
        {"sforce-limit-info": f"api-usage={HUGE}/{HUGE}"},
        {"sforce-limit-info": f"api-usage=5/{'9' * 2000}"},
    ],
    ids=["shopify-both", "shopify-limit", "salesforce-both", "salesforce-2000-digits"],
)
def test_vendor_counts_of_hundreds_of_digits_are_no_counts(headers: dict[str, str]) -> None:
    """Shopify's and Salesforce's ``used/limit`` with a huge count: no quota, not NaN or inf."""
    hints = read_hints(headers, now=NOW)
    _sane(hints)
    assert hints.quotas == ()


def test_vendor_counts_of_a_usual_size_still_read() -> None:
    hints = read_hints(
        {"x-shopify-shop-api-call-limit": "39/40", "sforce-limit-info": "api-usage=25/5000"},
        now=NOW,
    )
    assert {(q.source, q.remaining, q.limit) for q in hints.quotas} == {
        ("shopify", 1.0, 40.0),
        ("salesforce:api-usage", 4975.0, 5000.0),
    }


@pytest.mark.parametrize("name", ["x-ratelimit-reset-after", "x-rate-limit-reset-after"])
@pytest.mark.parametrize("value", [str(int(HORIZON) + 1), "9" * 300])
def test_a_reset_after_beyond_the_horizon_is_no_value(name: str, value: str) -> None:
    """R13: ``X-RateLimit-Reset-After: 31536001`` (or 300 digits) was read as is."""
    hints = read_hints({name: value, "x-ratelimit-remaining": "0"}, now=NOW)
    _sane(hints)
    assert hints.reset_after is None
    assert read_hints({name: "30"}, now=NOW).reset_after == 30.0


@pytest.mark.parametrize("per_call", [1e-300, 5e-324])
@pytest.mark.parametrize(
    "headers",
    [
        {"x-ratelimit-remaining-tokens": "179769320", "x-ratelimit-limit-tokens": "200000000"},
        {"anthropic-ratelimit-tokens-limit": "1" + "0" * 299},
    ],
    ids=["openai", "anthropic"],
)
def test_a_cost_next_to_nothing_keeps_a_quota_of_tokens_in_tokens(
    headers: dict[str, str], per_call: float, no_reader_fails: pytest.LogCaptureFixture
) -> None:
    """
    R16 with a cost of 1e-300 tokens a call: once ``floor(inf)`` raised (every quota of the
    family lost) or the limit read as infinite calls; now the quota stays one of tokens.
    """
    access = dataclasses.replace(GENERIC, per_call=lambda: per_call)
    hints = read_fields([*headers.items(), ("x-ratelimit-remaining-requests", "7")], access)
    _sane(hints)
    assert not _failed(no_reader_fails)
    units = {q.source: (q.unit, q.scope) for q in hints.quotas}
    assert units["x-ratelimit-requests"] == ("requests", None)  # the family's other quota
    tokens = next(q for q in hints.quotas if q.scope == "tokens")
    assert tokens.unit == "tokens"


def test_a_usual_cost_still_reads_tokens_as_calls() -> None:
    access = dataclasses.replace(GENERIC, per_call=lambda: 1000.0)
    hints = read_fields({"x-ratelimit-remaining-tokens": "5500"}, access)
    (quota,) = hints.quotas
    assert (quota.remaining, quota.unit, quota.scope) == (5.0, "requests", "tokens")


@pytest.mark.parametrize("value", ["Sunday, 06-Nov-94 08:49:37 GMT", "Sun, 06-Nov-94 08:49:37"])
def test_a_two_digit_year_past_9999_is_no_date(
    value: str, no_reader_fails: pytest.LogCaptureFixture
) -> None:
    """
    An rfc850 date read on a clock past the year 9950 names a year ``datetime`` refuses: the
    ``Retry-After`` reader raised (swallowed); now the date is no value.
    """
    hints = read_hints({"retry-after": value}, now=1e12)
    assert hints.retry_after is None
    assert not _failed(no_reader_fails)
    assert read_hints({"retry-after": value}, now=NOW).retry_after == 0.0  # (1994: past)
