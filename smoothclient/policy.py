"""
:class:`RetryPolicy`: one immutable, validated object that says how a logical call retries.

>>> from smoothclient import RetryPolicy
>>> policy = RetryPolicy(attempts=3, timeout=10)
>>> policy.replace(jitter="decorrelated").jitter
'decorrelated'
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Collection, Iterator, Mapping, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ._validate import fraction, optional_seconds, positive_int, seconds

if TYPE_CHECKING:
    from .events import CallEnded, RetryEvent

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_POLICY",
    "IDEMPOTENT_METHODS",
    "JITTER_KINDS",
    "POLICY_FIELDS",
    "RETRY_STATUSES",
    "JitterKind",
    "RetryBudget",
    "RetryPolicy",
    "override_policy",
    "overrides",
    "with_fields",
]

#: How a backoff window is sampled (see :mod:`smoothclient.engine.backoff`).
JitterKind = Literal["full", "equal", "decorrelated", "none"]
JITTER_KINDS: tuple[JitterKind, ...] = ("full", "equal", "decorrelated", "none")

#: Methods RFC 9110 defines as idempotent: safe to send twice.
IDEMPOTENT_METHODS: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
#: Statuses that mean "try again later": timeouts, too early, throttling, transient 5xx.
RETRY_STATUSES: frozenset[int] = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryBudget:
    """
    Cap retries to a fraction of recent traffic so a struggling server is not buried in them.

    Over the last ``window`` seconds, retries may be at most ``ratio`` times the requests plus
    ``min_per_second * window`` (so low-traffic clients can still retry).  The requests count
    the retries too, so a ratio of 0.5 lets the load on a failing origin at most double.

    Only retries of failures count against it (5xx, transport errors): a retry the server
    asked for (a 429, a ``Retry-After``, a spent quota) is held back by the pacer until the
    server said it may go, and costs no budget.  :data:`DEFAULT_BUDGET` is on in every
    :class:`RetryPolicy`; ``budget=None`` turns it off.
    """

    ratio: float = 0.2
    min_per_second: float = 1.0
    window: float = 10.0

    def __post_init__(self) -> None:
        """Validate the fields."""
        fraction("RetryBudget.ratio", self.ratio, upper_open=False)
        seconds("RetryBudget.min_per_second", self.min_per_second)
        seconds("RetryBudget.window", self.window, allow_zero=False)


#: The budget every policy has unless told otherwise: retries at most half of what is sent to
#: an origin over 10 s, plus one a second.  Half, not Finagle's or Envoy's fifth: an origin
#: failing half its requests (a brownout) still gets the retries that carry its calls through
#: (1.9 attempts a call at 4 attempts), while a dead one is held by the outage rule (see
#: docs/outages.md) long before the budget matters.
DEFAULT_BUDGET = RetryBudget(ratio=0.5, min_per_second=1.0, window=10.0)


def _frozen_statuses(value: object) -> frozenset[int]:
    if isinstance(value, str | bytes) or not isinstance(value, Set | list | tuple):
        msg = f"retry_statuses must be a set of ints, not {type(value).__name__}"
        raise TypeError(msg)
    statuses = frozenset(value)
    bad = [
        s for s in statuses if isinstance(s, bool) or not isinstance(s, int) or not 100 <= s < 600
    ]
    if bad:
        msg = f"retry_statuses must hold HTTP status codes (100-599), got {sorted(map(repr, bad))}"
        raise ValueError(msg)
    return statuses


def _frozen_methods(value: object) -> frozenset[str]:
    if isinstance(value, str | bytes) or not isinstance(value, Set | list | tuple):
        msg = f"retry_methods must be a set of method names, not {type(value).__name__}"
        raise TypeError(msg)
    if not all(isinstance(m, str) and m for m in value):
        msg = "retry_methods must hold non-empty strings such as 'GET'"
        raise ValueError(msg)
    return frozenset(m.upper() for m in value)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """
    How a logical call retries: immutable, validated at construction, cheap to copy.

    Args:
        attempts: total attempts, the first one included (>= 1).
        timeout: deadline of the whole logical call in seconds, waits included; ``None`` for no
            deadline.  Never slept past.
        wait_initial: the first backoff window's ceiling, in seconds.
        wait_max: the cap on any backoff window (bounds the window *before* sampling).
        wait_exp_base: growth factor of the backoff window per attempt.
        jitter: ``"full"`` (default), ``"equal"``, ``"decorrelated"`` or ``"none"``.
        retry_statuses: statuses that are retried.
        retry_methods: methods retried after the request may have been sent (idempotent ones).
        idempotency_header: a header that makes any method safe to retry (``None`` to disable).
        max_retry_after: a server asking to wait longer than this gets its answer returned at
            once instead of being slept on; ``None`` accepts any delay within the deadline.
        respect_retry_after: shift the window by ``Retry-After`` and exhausted quotas.
        retry_on_errors: retry transport errors (connection failures, timeouts).
        retry_forbidden_with_hints: retry a 403 that carries ``Retry-After`` or an exhausted quota
            (GitHub's rate limits answer 403).
        retry_throttled_any_method: retry a 429, or a 503 with ``Retry-After``, whatever the
            method (a POST too): the server did not act on the request (RFC 6585), so sending
            it again does nothing twice.  ``False``: only the methods of ``retry_methods`` (or
            an idempotency key) are retried after a 429.
        cut_attempts: whether ``timeout`` also cuts an attempt in progress.  ``True``: an
            attempt ends when the deadline does; ``False``: the deadline bounds waiting and
            retrying only, and an attempt runs as long as the client's own timeout allows (a
            long generation, a stream); ``None`` (default): the edge decides (``True``, except
            on a transport made for an SDK, ``sdk=True``).
        budget: the :class:`RetryBudget` (default :data:`DEFAULT_BUDGET`; ``None``: none).
        on_retry: called with a :class:`~smoothclient.events.RetryEvent` before each wait, after the
            failed response is closed; an exception it raises ends the call and propagates.
        on_success: called with a :class:`~smoothclient.CallEnded` when a call ends with a
            response below 400 (an exception it raises propagates).
        on_give_up: called with a :class:`~smoothclient.CallEnded` when a call ends any
            other way: an error status returned, an exception raised, a call not sent.
    """

    attempts: int = 5
    timeout: float | None = 60.0
    wait_initial: float = 0.1
    wait_max: float = 30.0
    wait_exp_base: float = 2.0
    jitter: JitterKind = "full"
    retry_statuses: Collection[int] = field(default=RETRY_STATUSES)
    retry_methods: Collection[str] = field(default=IDEMPOTENT_METHODS)
    idempotency_header: str | None = "Idempotency-Key"
    max_retry_after: float | None = 300.0
    respect_retry_after: bool = True
    retry_on_errors: bool = True
    retry_forbidden_with_hints: bool = True
    retry_throttled_any_method: bool = True
    cut_attempts: bool | None = None
    budget: RetryBudget | None = DEFAULT_BUDGET
    on_retry: Callable[[RetryEvent], None] | None = field(default=None, compare=False)
    on_success: Callable[[CallEnded], None] | None = field(default=None, compare=False)
    on_give_up: Callable[[CallEnded], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        """Validate and normalise every field."""
        setter = object.__setattr__
        positive_int("attempts", self.attempts)
        setter(self, "timeout", optional_seconds("timeout", self.timeout, allow_zero=False))
        setter(self, "wait_initial", seconds("wait_initial", self.wait_initial))
        setter(self, "wait_max", seconds("wait_max", self.wait_max))
        base = seconds("wait_exp_base", self.wait_exp_base)
        if base < 1:
            msg = f"wait_exp_base must be >= 1, got {self.wait_exp_base!r}"
            raise ValueError(msg)
        setter(self, "wait_exp_base", base)
        if self.wait_initial > self.wait_max:
            msg = f"wait_initial ({self.wait_initial}) must not exceed wait_max ({self.wait_max})"
            raise ValueError(msg)
        if self.jitter not in JITTER_KINDS:
            msg = f"jitter must be one of {', '.join(JITTER_KINDS)}, got {self.jitter!r}"
            raise ValueError(msg)
        setter(self, "retry_statuses", _frozen_statuses(self.retry_statuses))
        setter(self, "retry_methods", _frozen_methods(self.retry_methods))
        setter(self, "max_retry_after", optional_seconds("max_retry_after", self.max_retry_after))
        if self.budget is not None and not isinstance(self.budget, RetryBudget):
            msg = f"budget must be a RetryBudget or None, not {type(self.budget).__name__}"
            raise TypeError(msg)
        for name in ("on_retry", "on_success", "on_give_up"):
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                msg = f"{name} must be callable or None, not {type(hook).__name__}"
                raise TypeError(msg)
        if self.cut_attempts is not None and not isinstance(self.cut_attempts, bool):
            msg = f"cut_attempts must be True, False or None, not {self.cut_attempts!r}"
            raise TypeError(msg)
        if self.idempotency_header is not None and not isinstance(self.idempotency_header, str):
            msg = "idempotency_header must be a header name or None"
            raise TypeError(msg)

    def replace(self, **changes: Any) -> RetryPolicy:
        """Return a copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def is_idempotent(self, method: str, *, has_idempotency_key: bool = False) -> bool:
        """Whether a request may be sent again after it may already have reached the server."""
        return method.upper() in self.retry_methods or (
            has_idempotency_key and self.idempotency_header is not None
        )


#: The defaults: 5 attempts within 60 s, full jitter from 0.1 s doubling to a 30 s cap.
DEFAULT_POLICY = RetryPolicy()


#: The names of RetryPolicy's fields (what may be given as keywords or overridden).
POLICY_FIELDS = frozenset(f.name for f in dataclasses.fields(RetryPolicy))


#: Names other retry libraries use, and what to write here instead.
_OTHER_NAMES: dict[str, str] = {
    "retries": "attempts= counts every attempt, the first included (retries=3 is attempts=4)",
    "max_retries": "attempts= counts every attempt, the first included (max_retries=3 is "
    "attempts=4); an SDK's own max_retries is best set to 0 so retries do not multiply",
    "total": "attempts= counts every attempt, the first included (total=3 is attempts=4)",
    "stop_after_attempt": "attempts=",
    "backoff_factor": "wait_initial= (the first backoff window, in seconds)",
    "backoff_max": "wait_max=",
    "backoff_jitter": "jitter= ('full', 'equal', 'decorrelated' or 'none')",
    "status_forcelist": "retry_statuses=",
    "allowed_methods": "retry_methods=",
    "respect_retry_after_header": "respect_retry_after=",
    "total_timeout": "timeout= (the whole call, waits included)",
    "max_time": "timeout= (the whole call, waits included)",
    "on": "@retry(on=...) for functions; an edge retries statuses (retry_statuses=) and "
    "transport errors (retry_on_errors=)",
}
for _name in ("verify", "cert", "http2", "http1", "limits", "proxy", "proxies", "trust_env"):
    _OTHER_NAMES[_name] = (
        "a connection option: give it to the transport that really sends, e.g. "
        f"SmoothTransport(httpx.HTTPTransport({_name}=...))"
    )


def with_fields(policy: RetryPolicy, fields: Mapping[str, Any]) -> RetryPolicy:
    """``policy`` with ``fields`` (RetryPolicy fields by name) applied and validated."""
    unknown = sorted(set(fields) - POLICY_FIELDS)
    if unknown:
        hints = [f"{name}: {_OTHER_NAMES[name]}" for name in unknown if name in _OTHER_NAMES]
        msg = f"unknown arguments {unknown}: the RetryPolicy fields are {sorted(POLICY_FIELDS)}"
        if hints:
            msg += ". " + "; ".join(hints)
        raise TypeError(msg)
    return policy.replace(**fields)


_OVERRIDES: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "smoothclient_overrides", default=None
)


#: ``overrides()``: the policy fields :func:`override_policy` sets for calls made here, if any
#: (the context variable's own ``get``: every call reads it, so no Python frame of ours).
overrides: Callable[[], Mapping[str, Any] | None] = _OVERRIDES.get


@contextlib.contextmanager
def override_policy(**fields: Any) -> Iterator[None]:
    """
    Change policy fields for the calls made inside the block, through every edge.

    Per thread and per task (``contextvars``): other threads' and tasks' calls are not
    touched.  Nested blocks add to the outer one.  ``attempts=1`` turns retries off.

    >>> from smoothclient import override_policy
    >>> with override_policy(attempts=1, timeout=5):
    ...     pass  # calls here make one attempt, within 5 s
    """
    merged = {**(_OVERRIDES.get() or {}), **fields}
    with_fields(DEFAULT_POLICY, merged)  # refused here, not at the first call
    token = _OVERRIDES.set(merged)
    try:
        yield
    finally:
        _OVERRIDES.reset(token)
