from __future__ import annotations

import dataclasses
import re
from datetime import timedelta

import pytest

from smoothclient import DEFAULT_POLICY, RetryBudget, RetryPolicy


def test_defaults() -> None:
    """The production defaults of the foundation issue."""
    p = RetryPolicy()
    assert (p.attempts, p.timeout, p.wait_initial, p.wait_max, p.jitter) == (5, 60, 0.1, 30, "full")
    assert p.retry_statuses == frozenset({408, 425, 429, 500, 502, 503, 504})
    assert "POST" not in p.retry_methods
    assert p.max_retry_after == 300
    assert p.budget == RetryBudget(ratio=0.5, min_per_second=1.0, window=10.0)
    assert p == DEFAULT_POLICY


def test_frozen_and_replace() -> None:
    p = RetryPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.attempts = 3  # type: ignore[misc]
    q = p.replace(attempts=3, timeout=timedelta(seconds=5))
    assert (q.attempts, q.timeout) == (3, 5.0)
    assert p.attempts == 5


def test_normalisation() -> None:
    p = RetryPolicy(retry_statuses={503}, retry_methods=["get", "post"], timeout=None)
    assert p.retry_statuses == frozenset({503})
    assert p.retry_methods == frozenset({"GET", "POST"})
    assert p.timeout is None


def test_idempotency() -> None:
    p = RetryPolicy()
    assert p.is_idempotent("get")
    assert not p.is_idempotent("POST")
    assert p.is_idempotent("POST", has_idempotency_key=True)
    assert not p.replace(idempotency_header=None).is_idempotent("POST", has_idempotency_key=True)


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"attempts": 0}, ValueError, "attempts must be >= 1"),
        ({"attempts": 2.5}, TypeError, "attempts must be an int"),
        ({"timeout": 0}, ValueError, "timeout must be a finite number > 0"),
        ({"timeout": "60"}, TypeError, "timeout must be a number"),
        ({"wait_initial": -1}, ValueError, "wait_initial"),
        ({"wait_initial": 5, "wait_max": 1}, ValueError, "must not exceed wait_max"),
        ({"wait_exp_base": 0.5}, ValueError, "wait_exp_base must be >= 1"),
        ({"jitter": "gaussian"}, ValueError, "jitter must be one of"),
        ({"retry_statuses": {999}}, ValueError, "HTTP status codes"),
        ({"retry_statuses": "429"}, TypeError, "set of ints"),
        ({"retry_methods": [""]}, ValueError, "non-empty strings"),
        ({"max_retry_after": -1}, ValueError, "max_retry_after"),
        ({"budget": 0.2}, TypeError, "RetryBudget"),
        ({"on_retry": 3}, TypeError, "callable"),
        ({"idempotency_header": 3}, TypeError, "header name"),
    ],
)
def test_validation(changes: dict[str, object], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        RetryPolicy(**changes)  # type: ignore[arg-type]


def test_budget_validation() -> None:
    assert RetryBudget(ratio=0.1).ratio == 0.1
    with pytest.raises(ValueError, match="ratio"):
        RetryBudget(ratio=1.5)
    with pytest.raises(ValueError, match="window"):
        RetryBudget(window=0)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("retries", "retries=3 is attempts=4"),
        ("max_retries", "max_retries=3 is attempts=4"),
        ("status_forcelist", "retry_statuses="),
        ("backoff_factor", "wait_initial="),
        ("verify", "HTTPTransport(verify=...)"),
        ("http2", "HTTPTransport(http2=...)"),
    ],
)
def test_names_of_other_libraries_get_a_tailored_error(name: str, says: str) -> None:
    """A name another retry library uses says what to write here instead."""
    from smoothclient.policy import with_fields

    with pytest.raises(TypeError, match=re.escape(says)):
        with_fields(DEFAULT_POLICY, {name: 1})
