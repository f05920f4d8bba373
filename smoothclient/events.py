"""
What a logical call tells its observers.

:class:`RetryEvent` is given to ``on_retry`` hooks before each wait, :class:`CallEnded` to
``on_success`` and ``on_give_up`` hooks when a call ends; :class:`CallRecord` says what
happened, attached to the final response or exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CallEnded",
    "CallRecord",
    "RecordBuilder",
    "RetryEntry",
    "RetryEvent",
    "first_attempt_record",
    "record_of",
]


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

    ``on_success``: a response below 400 (or, for ``@retry``, a value returned); ``on_give_up``:
    anything else (an error status returned, an exception raised, a call not sent, a result
    still unwanted when retries ran out).  ``origin`` is the request's origin, or the
    decorated function's name for ``@retry``.
    """

    origin: str
    record: CallRecord
    status: int | None = None
    exception: BaseException | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the call succeeded (the ``on_success`` hook's case)."""
        return (
            self.exception is None
            and self.record.gave_up is None
            and (self.status is None or self.status < 400)
        )


@dataclass(frozen=True, slots=True)
class RetryEntry:
    """One retry: why, the backoff window drawn from, and the delay drawn from it."""

    reason: str
    delay: float
    window: tuple[float, float] = (0.0, 0.0)
    status: int | None = None  # of the attempt that was retried (None: an exception)

    def as_dict(self) -> dict[str, Any]:
        """A plain dict."""
        return {
            "reason": self.reason,
            "delay": self.delay,
            "window": list(self.window),
            "status": self.status,
        }


@dataclass(frozen=True, slots=True)
class CallRecord:
    """
    What happened during one logical call; read it with :func:`record_of`.

    Attributes:
        attempts: attempts sent (0: given up before the first).
        retries: one entry per retry (its reason, backoff window and delay), as logged.
        waits: every wait, in order (backoff and the pacer's slots together).
        pacer_waits: the part of each wait the pacer imposed beyond the backoff delay.
        held_for_outage: seconds of those waits spent held while the origin was down (it
            failed every request: see ``docs/outages.md``), without sending.
        total_wait: seconds waited in all.
        gave_up: why the call gave up (``None``: it ended with a success or a final status).
        gave_up_kind: the same as one word (``"budget"``, ``"outage"``, ``"closed"``,
            ``"attempts"``, ``"deadline"``, ``"max_retry_after"``, ``"not_idempotent"``,
            ``"not_replayable"``, ``"other"``; ``None`` when it did not give up).
        status: the final response's status (``None``: the call ended with an exception).
        cache: what the HTTP cache did (``"hit"``, ``"miss"``, ``"revalidated"``, ``"stale"``,
            ``"bypass"``; ``None``: no cache); see docs/http-cache.md section 4.
    """

    attempts: int = 0
    retries: tuple[RetryEntry, ...] = ()
    waits: tuple[float, ...] = ()
    pacer_waits: tuple[float, ...] = ()
    gave_up: str | None = None
    status: int | None = None
    held_for_outage: float = 0.0
    cache: str | None = None
    gave_up_kind: str | None = None

    @property
    def total_wait(self) -> float:
        """Seconds spent waiting (pacer slots and backoff)."""
        return float(sum(self.waits))

    @property
    def reasons(self) -> list[str]:
        """Why each retry was made."""
        return [entry.reason for entry in self.retries]

    def as_dict(self) -> dict[str, Any]:
        """
        A plain dict (what the edges attach: ``response.extensions["smoothclient"]``...).

        ``"cache"`` is there only when an HTTP cache took part.
        """
        data = {
            "attempts": self.attempts,
            "waits": list(self.waits),
            "total_wait": self.total_wait,
            "reasons": self.reasons,
            "gave_up": self.gave_up,
            "status": self.status,
            "retries": [entry.as_dict() for entry in self.retries],
            "pacer_waits": list(self.pacer_waits),
            "held_for_outage": self.held_for_outage,
            "gave_up_kind": self.gave_up_kind,
        }
        if self.cache is not None:
            data["cache"] = self.cache
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CallRecord:
        """The record :meth:`as_dict` gave (missing keys read as empty)."""
        retries = tuple(
            RetryEntry(e["reason"], float(e["delay"]), tuple(e["window"]), e.get("status"))
            for e in data.get("retries", ())
        )
        if not retries:  # an older or hand-made record: reasons only
            retries = tuple(RetryEntry(reason, 0.0) for reason in data.get("reasons", ()))
        return cls(
            attempts=int(data.get("attempts", 0)),
            retries=retries,
            waits=tuple(float(w) for w in data.get("waits", ())),
            pacer_waits=tuple(float(w) for w in data.get("pacer_waits", ())),
            gave_up=data.get("gave_up"),
            status=data.get("status"),
            held_for_outage=float(data.get("held_for_outage", 0.0)),
            cache=data.get("cache"),
            gave_up_kind=data.get("gave_up_kind"),
        )


def record_of(outcome: object) -> CallRecord | None:
    """
    The record of the call that gave ``outcome``; ``None``: no smoothclient call made it.

    ``outcome``: an httpx or requests response, or an exception any edge or ``@retry``
    raised.
    """
    data = getattr(outcome, "smoothclient", None)
    if data is None:
        extensions = getattr(outcome, "extensions", None)
        if isinstance(extensions, Mapping):
            data = extensions.get("smoothclient")
    return CallRecord.from_dict(data) if isinstance(data, Mapping) else None


@dataclass
class RecordBuilder:
    """The record of a call in progress (the flow's and ``@retry``'s)."""

    attempts: int = 0
    retries: list[RetryEntry] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    pacer_waits: list[float] = field(default_factory=list)
    gave_up: str | None = None
    status: int | None = None
    held_for_outage: float = 0.0
    gave_up_kind: str | None = None

    def freeze(self) -> CallRecord:
        """The record as it stands."""
        return CallRecord(
            self.attempts,
            tuple(self.retries),
            tuple(self.waits),
            tuple(self.pacer_waits),
            self.gave_up,
            self.status,
            self.held_for_outage,
            gave_up_kind=self.gave_up_kind,
        )

    def as_dict(self) -> dict[str, Any]:
        """The record as a plain dict."""
        return self.freeze().as_dict()

    def attach_to(self, error: BaseException) -> BaseException:
        """Note this record on ``error`` (a note and ``error.smoothclient``); return it."""
        record = self.freeze()
        error.add_note(
            f"smoothclient: {record.attempts} attempt(s), waited {record.total_wait:.3f} s"
            + (f"; gave up: {record.gave_up}" if record.gave_up else "")
        )
        error.smoothclient = record.as_dict()  # type: ignore[attr-defined]
        return error


def first_attempt_record(status: int | None = None) -> dict[str, Any]:
    """The record of a call whose first attempt ended it (a fresh dict each time)."""
    # copied from a template (a dict copies its table at once, on every healthy request);
    # the lists are fresh: a caller may change its record's, never another's
    record = _FIRST.copy()
    record["waits"], record["reasons"], record["retries"], record["pacer_waits"] = [], [], [], []
    record["status"] = status
    return record


#: :func:`first_attempt_record`'s keys in their order, with the values shared by every one.
_FIRST: dict[str, Any] = {
    "attempts": 1,
    "waits": None,
    "total_wait": 0.0,
    "reasons": None,
    "gave_up": None,
    "status": None,
    "retries": None,
    "pacer_waits": None,
    "held_for_outage": 0.0,
    "gave_up_kind": None,
}
