"""
Hostile header values found by a fuzzing campaign (issue 37): each reads as nothing, or clamped.

Whatever a header says, every number :func:`read_hints` gives is finite, never negative, and
a delay or reset is within the horizon (docs/headers.md R9, R13); no reader of a family fails
on a value (a failure is swallowed there, and takes the family's other quotas with it).
"""

from __future__ import annotations

import logging
import math

import pytest

from smoothclient.hints import Hints, read_hints
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
