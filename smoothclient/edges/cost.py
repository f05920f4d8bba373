"""
Cost-aware pacing: what a call costs in the units of an LLM API's token quotas.

A caller says what a request will cost (``cost=``, a function of the request: its estimated
tokens); :class:`CallCost` keeps the running estimate of a call's cost, corrected by what the
responses report they used.  An edge hands :meth:`CallCost.per_call` to the hints reader
(``FieldAccess.per_call``), which then reads a quota of tokens as the calls it still admits,
a scope of its own (docs/headers.md R16): the pacer paces it as it paces requests.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["CallCost", "estimate_tokens", "usage_of"]

log = logging.getLogger("smoothclient")

#: How much one call moves the running estimates (an exponential average).
WEIGHT = 0.2
#: The correction by usage stays within these factors of the caller's estimate.
SCALE_BOUNDS = (0.1, 10.0)
#: Fields of a request body that say how many tokens the answer may use.
_MAX_OUT = ("max_tokens", "max_completion_tokens", "max_output_tokens")
#: A response body read for its usage is at most this long.
USAGE_LIMIT = 256 * 1024


def estimate_tokens(body: bytes) -> float:
    """
    A rough estimate of a chat request's tokens: its body's characters / 4, plus its answer's cap.

    The default ``cost`` of an SDK's transport; the responses' usage corrects it.
    """
    tokens = len(body) / 4
    if b"max_" in body:
        try:
            fields = json.loads(body)
        except ValueError:
            return tokens
        if isinstance(fields, dict):
            for name in _MAX_OUT:
                value = fields.get(name)
                if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                    return tokens + float(value)
    return tokens


def usage_of(body: bytes) -> float | None:
    """
    The tokens a JSON answer says it used (OpenAI's ``usage``, Anthropic's, the Responses API's).

    ``None`` when it says nothing readable.
    """
    try:
        usage = json.loads(body).get("usage")
    except (ValueError, AttributeError):
        return None
    if not isinstance(usage, Mapping):
        return None

    def number(name: str) -> float | None:
        value = usage.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        return float(value) if math.isfinite(value) and value >= 0 else None

    total = number("total_tokens")
    if total is not None:
        return total
    for first, second in (
        ("input_tokens", "output_tokens"),
        ("prompt_tokens", "completion_tokens"),
    ):
        a, b = number(first), number(second)
        if a is not None and b is not None:
            return a + b
    return None


class CallCost:
    """
    The running cost of a call, in tokens: the caller's estimates, corrected by usage.

    Args:
        cost: a function of a request: its estimated tokens (an exception or a bad number
            counts as no estimate, logged at debug level).
    """

    __slots__ = ("cost", "estimate", "scale")

    def __init__(self, cost: Callable[[Any], float]) -> None:
        """No estimate yet."""
        if not callable(cost):
            msg = f"cost must be a function of a request, not {type(cost).__name__}"
            raise TypeError(msg)
        self.cost = cost
        self.estimate: float | None = None
        self.scale = 1.0

    def noted(self, request: object) -> float | None:
        """The estimate for ``request``, taken into the running one."""
        try:
            value = float(self.cost(request))
        except Exception:  # a caller's function: never breaks a call
            log.debug("cost= raised; the call counts as no estimate", exc_info=True)
            return None
        if not math.isfinite(value) or value <= 0:
            return None
        held = self.estimate
        self.estimate = value if held is None else held + WEIGHT * (value - held)
        return value

    def used(self, estimated: float, actual: float) -> None:
        """A call estimated at ``estimated`` used ``actual``: the correction moves towards it."""
        if estimated <= 0 or actual <= 0:
            return
        low, high = SCALE_BOUNDS
        ratio = min(high, max(low, actual / estimated))
        self.scale += WEIGHT * (ratio - self.scale)

    def per_call(self) -> float | None:
        """What a call costs now, in tokens (``None`` before the first estimate)."""
        estimate = self.estimate
        return None if estimate is None else estimate * self.scale
