"""
What a logical call tells its observers.

:class:`RetryEvent` is given to ``on_retry`` hooks before each wait, :class:`CallEnded` to
``on_success`` and ``on_give_up`` hooks when a call ends; :class:`CallRecord` says what
happened, attached to the final response or exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallEnded", "CallRecord", "RetryEvent", "first_attempt_record"]


@dataclass(frozen=True, slots=True)
class RetryEvent:
    """Given to ``on_retry`` hooks before each wait."""

    origin: str
    attempt: int
    delay: float
    reason: str
    status: int | None = None
    exception: BaseException | None = None
    window: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True, slots=True)
class CallEnded:
    """
    Given to the ``on_success`` or ``on_give_up`` hook when a logical call ends.

    ``on_success``: a response below 400; ``on_give_up``: anything else (an error status
    returned, an exception raised, a call not sent).
    """

    origin: str
    record: dict[str, Any]
    status: int | None = None
    exception: BaseException | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the call ended with a response below 400."""
        return self.exception is None and self.status is not None and self.status < 400


@dataclass
class CallRecord:
    """What happened during one logical call (attached to the final response)."""

    attempts: int = 0
    waits: list[float] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    gave_up: str | None = None

    @property
    def total_wait(self) -> float:
        """Seconds spent waiting (pacer slots and backoff)."""
        return sum(self.waits)

    def attach_to(self, error: BaseException) -> BaseException:
        """Note this record on ``error`` (a note and ``error.smoothclient``); return it."""
        error.add_note(
            f"smoothclient: {self.attempts} attempt(s), waited {self.total_wait:.3f} s"
            + (f"; gave up: {self.gave_up}" if self.gave_up else "")
        )
        error.smoothclient = self.as_dict()  # type: ignore[attr-defined]
        return error

    def as_dict(self) -> dict[str, Any]:
        """A plain dict for ``response.extensions`` and logs."""
        return {
            "attempts": self.attempts,
            "waits": list(self.waits),
            "total_wait": self.total_wait,
            "reasons": list(self.reasons),
            "gave_up": self.gave_up,
        }


def first_attempt_record() -> dict[str, Any]:
    """The record of a call whose first attempt ended it (a fresh dict each time)."""
    return {"attempts": 1, "waits": [], "total_wait": 0.0, "reasons": [], "gave_up": None}
