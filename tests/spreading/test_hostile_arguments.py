"""
Hostile arguments at construction: ValueError or TypeError saying what is allowed.

Found by the hostile-input campaign: an int of hundreds of digits (no float holds it) raised
OverflowError from ``float()`` or ``math.isfinite``, an infinite ``now`` OverflowError from
``math.ceil``, and a bool was taken as a rate of one.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from smoothclient import JitteredTTLCache, cached, jittered, paced
from smoothclient.spreading.offsets import next_run, offset_for
from smoothclient.spreading.poisson import PoissonScheduler
from smoothclient.spreading.reconciler import Reconciler

HUGE = 10**400


def _noop() -> None:
    return None


BUILDERS: dict[str, Callable[[object], object]] = {
    "ttl": lambda v: JitteredTTLCache(10, v),  # type: ignore[arg-type]
    "jitter": lambda v: JitteredTTLCache(10, 60, jitter=v),  # type: ignore[arg-type]
    "early_refresh": lambda v: cached(JitteredTTLCache(10, 60), early_refresh=v),  # type: ignore[arg-type]
    "stale_if_error": lambda v: cached(JitteredTTLCache(10, 60), stale_if_error=v),  # type: ignore[arg-type]
    "max_wait": lambda v: jittered(max_wait=v),  # type: ignore[arg-type]
    "paced rate": lambda v: paced(rate=v),  # type: ignore[arg-type]
    "paced per": lambda v: paced(rate=5, per=v),  # type: ignore[arg-type]
    "paced burst": lambda v: paced(rate=5, burst=v),  # type: ignore[arg-type]
    "events_per_day": lambda v: PoissonScheduler(_noop, events_per_day=v),  # type: ignore[arg-type]
    "poisson rate": lambda v: PoissonScheduler(_noop, rate=v),  # type: ignore[arg-type]
    "every": lambda v: Reconciler(list, _noop, every=v),  # type: ignore[arg-type]
    "period": lambda v: next_run("k", v, now=0),  # type: ignore[arg-type]
    "now": lambda v: next_run("k", 60, now=v),  # type: ignore[arg-type]
    "window": lambda v: offset_for("k", v),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("value", [HUGE, -HUGE, math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_number_no_float_holds_is_refused(name: str, value: object) -> None:
    """An int of 400 digits raised OverflowError (not ValueError) from each of these."""
    with pytest.raises(ValueError, match="must"):
        BUILDERS[name](value)


@pytest.mark.parametrize("name", ["events_per_day", "poisson rate", "now"])
def test_a_bool_or_text_is_not_a_number(name: str) -> None:
    """``PoissonScheduler(rate=True)`` ran at one event a second; ``now="1"`` failed late."""
    for value in (True, "1"):
        with pytest.raises(TypeError, match="must be"):
            BUILDERS[name](value)


@pytest.mark.parametrize("value", [float("nan"), "no", [], None, 1])
def test_idempotent_is_true_or_false(value: object) -> None:
    """``idempotent=`` is a flag: anything else is refused at once, saying what is allowed."""
    from smoothclient import retry, retry_context

    with pytest.raises(TypeError, match="idempotent must be True or False"):
        retry(idempotent=value)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="idempotent must be True or False"):
        retry_context(idempotent=value)  # type: ignore[arg-type]
