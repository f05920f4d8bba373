"""
``@retry``: the transports' policy, backoff, deadline and budget for any function.

Sync or async functions and methods alike; :func:`retry_context` gives the same loop to a
block of code that is not a function (``for attempt in retry_context(...): with attempt:``).

The loop asks the engine (:func:`~smoothclient.engine.decide.decide`) what to do after each
failure, exactly as the HTTP edges do; there is nothing to pace, so no pacer is involved.
"""

from __future__ import annotations

import errno
import logging
import random
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar, overload

import wrapt

from .. import _mode as testing
from .._validate import flag, forward, function
from ..edges.flow import announce
from ..engine.decide import CallState, ErrorKind, GiveUp, Outcome, Retry, decide, spent
from ..events import CallEnded, RecordBuilder
from ..hints.model import Hints
from ..pacing.budget import BudgetCounts
from ..policy import DEFAULT_POLICY, RetryBudget, RetryPolicy
from ._aio import event_loop_sleep, kind_of

__all__ = ["Attempt", "RetryContext", "is_transient", "retry", "retry_context", "transient_errors"]

log = logging.getLogger("smoothclient")
F = TypeVar("F", bound=Callable[..., Any])
OnError = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], Any]
ErrorTypes = type[BaseException] | tuple[type[BaseException], ...]
_NO_HINTS = Hints()

#: The client libraries' transient errors, by module: each counts only once its library is
#: imported (smoothclient never imports one for this).
CLIENT_TRANSIENT_ERRORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("httpx", ("TransportError",)),
    ("requests", ("ConnectionError", "Timeout")),
    ("aiohttp", ("ClientConnectionError",)),
)
#: ``errno`` values of an ``OSError`` that say the network, not the program, failed (those of
#: ``ConnectionError`` and ``TimeoutError`` are already their subclasses).
NETWORK_ERRNOS: frozenset[int] = frozenset(
    getattr(errno, name)
    for name in ("ENETDOWN", "ENETUNREACH", "ENETRESET", "EHOSTDOWN", "EHOSTUNREACH")
    if hasattr(errno, name)
)


def transient_errors() -> tuple[type[BaseException], ...]:
    """
    The exception types ``@retry`` retries by default, as of now.

    ``ConnectionError`` and ``TimeoutError``, then ``httpx.TransportError``,
    ``requests.ConnectionError``, ``requests.Timeout`` and ``aiohttp.ClientConnectionError``
    for each of those libraries already imported (none is imported here).
    """
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module_name, names in CLIENT_TRANSIENT_ERRORS:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name in names:
            kind = getattr(module, name, None)
            if isinstance(kind, type) and issubclass(kind, BaseException):
                found.append(kind)
    return tuple(found)


def is_transient(exc: BaseException) -> bool:
    """
    Whether ``exc`` is a network failure worth retrying: ``@retry``'s default ``on``.

    One of :func:`transient_errors`, an ``OSError`` whose ``errno`` is a network's
    (:data:`NETWORK_ERRNOS`: network down or unreachable, host unreachable), or a DNS lookup
    that failed for now (``socket.gaierror`` ``EAI_AGAIN``).  A bug (``ValueError``,
    ``KeyError``...) never is.
    """
    if isinstance(exc, transient_errors()):
        return True
    if isinstance(exc, socket.gaierror):
        return exc.errno == socket.EAI_AGAIN
    return isinstance(exc, OSError) and exc.errno in NETWORK_ERRNOS


@dataclass(frozen=True, slots=True)
class _Failure:
    """An exception worth retrying, and the delay it asked for (if any)."""

    kind: ErrorKind
    exception: Exception
    retry_after: float | None = None


class _RetryResult(Exception):
    """Carries a result the ``on_result`` predicate wants retried."""

    def __init__(self, result: Any, delay: float | None) -> None:
        super().__init__("the result asked for a retry")
        self.result = result
        self.delay = delay


def _verdict(value: Any) -> tuple[bool, float | None]:
    """A predicate's answer: False/None = no; True = yes; a number = yes, after that long."""
    if value is None or value is False:
        return False, None
    if isinstance(value, bool):
        return True, None
    if isinstance(value, int | float):
        return True, max(0.0, float(value))
    return True, None


def _error_classifier(on: OnError | None) -> Callable[[Exception], _Failure | None]:
    if on is None:
        on = is_transient
    candidates: tuple[Any, ...] = on if isinstance(on, tuple) else (on,)
    is_types = all(isinstance(t, type) and issubclass(t, BaseException) for t in candidates)
    if not is_types and (isinstance(on, tuple | type) or not callable(on)):
        msg = (
            "on must be an exception type, a tuple of them, or a predicate over the exception, "
            f"not {on!r}"
        )
        raise TypeError(msg)
    types: tuple[type[BaseException], ...] = candidates if is_types else ()

    def failure_of(exc: Exception) -> _Failure | None:
        if isinstance(exc, _RetryResult):
            return _Failure("result", exc, exc.delay)
        if is_types:
            retry, delay = isinstance(exc, types), None
        else:
            retry, delay = _verdict(on(exc))  # type: ignore[operator]
        return _Failure("other", exc, delay) if retry else None

    return failure_of


class _Budget:
    """A decorated function's retry budget (its calls share it, across threads)."""

    def __init__(self, budget: RetryBudget) -> None:
        self.counts = BudgetCounts(budget)
        self.lock = threading.Lock()

    def attempt(self, now: float) -> None:
        with self.lock:
            self.counts.record_request(now)

    def try_retry(self, now: float) -> bool:
        with self.lock:
            return self.counts.try_retry(now)


class _Run:
    """One call of a decorated function: its state between attempts."""

    def __init__(
        self,
        policy: RetryPolicy,
        name: str,
        idempotent: bool,
        rng: random.Random,
        clock: Callable[[], float],
        budget: _Budget | None,
        failure_of: Callable[[Exception], _Failure | None],
    ) -> None:
        mode = testing.current()
        if mode is not None:
            policy = policy.replace(attempts=min(policy.attempts, mode.attempts))
        self.no_wait = mode is not None
        self.policy, self.name, self.rng, self.clock = policy, name, rng, clock
        self.budget, self.failure_of = budget, failure_of
        self.state = CallState(clock(), name, idempotent=idempotent)
        self.record = RecordBuilder()

    def attempt(self) -> None:
        """An attempt starts."""
        self.record.attempts += 1
        if self.budget is not None:
            self.budget.attempt(self.clock())

    def failed(self, exc: Exception) -> float | None:
        """Seconds to wait before the next attempt, or ``None``: give up."""
        failure = self.failure_of(exc)
        if failure is None:
            return None
        now = self.clock()
        hints = _NO_HINTS if failure.retry_after is None else Hints(retry_after=failure.retry_after)
        outcome = Outcome.from_error(failure.kind, sent=True, hints=hints)
        decision = decide(self.policy, self.state, outcome, now=now, rng=self.rng)
        if isinstance(decision, Retry) and self.budget and not self.budget.try_retry(now):
            decision = spent(decision)
        if isinstance(decision, GiveUp):
            self.record.gave_up = decision.reason
            self.record.gave_up_kind = decision.kind
            log.debug("%s: giving up: %s", self.name, decision.reason)
            return None
        error = None if isinstance(exc, _RetryResult) else exc
        announce(self.policy, self.record, self.name, self.name, self.state, decision, None, error)
        self.state = self.state.next(decision.delay)
        self.record.waits.append(decision.delay)
        return 0.0 if self.no_wait else decision.delay

    def succeeded(self) -> None:
        """The call returned: the ``on_success`` hook."""
        hook = self.policy.on_success
        if hook is not None:
            hook(CallEnded(self.name, self.record.freeze()))

    def gave_up(self, exc: Exception) -> None:
        """The call ends with ``exc`` (or the result it carries): the record and the hook."""
        error = None if isinstance(exc, _RetryResult) else exc
        if error is not None:
            self.record.attach_to(error)
        hook = self.policy.on_give_up
        if hook is not None:
            hook(CallEnded(self.name, self.record.freeze(), exception=error))

    def give_up(self, exc: Exception) -> Any:
        """The last result (a result that asked for a retry), or the last error raised."""
        self.gave_up(exc)
        if isinstance(exc, _RetryResult):
            return exc.result
        raise exc

    def returned(self, result: Any) -> Any:
        """``result``, the call's value: the ``on_success`` hook first."""
        self.succeeded()
        return result


@overload
def retry(
    types: ErrorTypes | None = None,
    /,
    *,
    on: OnError | None = None,
    on_result: Callable[[Any], Any] | None = None,
    policy: RetryPolicy | None = None,
    idempotent: bool = True,
    rng: random.Random | None = None,
    sleep: Callable[[float], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    **policy_changes: Any,
) -> Callable[[F], F]: ...


@overload
def retry(fn: F, /) -> F: ...


def retry(
    target: Any = None,
    /,
    *,
    on: OnError | None = None,
    on_result: Callable[[Any], Any] | None = None,
    policy: RetryPolicy | None = None,
    idempotent: bool = True,
    rng: random.Random | None = None,
    sleep: Callable[[float], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    **policy_changes: Any,
) -> Any:
    """
    Retry a function with the transports' policy, backoff, deadline and budget.

    Used bare (``@retry``) or with arguments (``@retry(on=..., attempts=3)``).

    Args:
        target: the one positional argument: the function itself (bare ``@retry``), or the
            exception types of ``on`` (``@retry(OSError)``).
        on: what to retry: exception types (a type or a tuple of them), or a predicate over
            the exception returning False (do not retry), True (retry) or a delay in seconds
            (retry no earlier: it *shifts* the window like ``Retry-After``, e.g. a delay read
            from an API's error); a predicate goes by keyword (``on=...``).  The default
            retries transient network errors only (:func:`is_transient`):
            ``ConnectionError``, ``TimeoutError``, an ``OSError`` of an unreachable network
            or host, a DNS lookup failed for now, and, when their library is imported,
            ``httpx.TransportError``, ``requests.ConnectionError``, ``requests.Timeout`` and
            ``aiohttp.ClientConnectionError``.  Any other exception (a bug: ``ValueError``,
            ``KeyError``...) ends the call at once; ``on=Exception`` retries them all.
        on_result: a predicate over the return value, with the same answers.
        policy: a :class:`~smoothclient.RetryPolicy` (default ``DEFAULT_POLICY``); any other
            keyword (``attempts=3, timeout=10``...) replaces a field of it.
        idempotent: False makes every failure final (nothing is retried after it may have run).
        rng: randomness for the jitter.
        sleep: a sync (or, for async functions, async) sleep; tests pass a fake clock's.
        clock: the monotonic clock the deadline is measured on (a fake one goes with a fake
            ``sleep``).
        **policy_changes: fields of :class:`~smoothclient.RetryPolicy` to replace.

    When retries run out the last exception is re-raised, or the last result returned.
    """
    bare: Any = None
    if target is not None:
        if _is_error_types(target):
            if on is not None:
                msg = "give on once: as the positional argument or as on=, not both"
                raise TypeError(msg)
            on = target
        elif callable(target) or isinstance(target, classmethod | staticmethod):
            bare = target  # @retry without parentheses: the function itself
        else:
            msg = (
                "retry's positional argument must be an exception type, a tuple of them, or the "
                f"function to decorate (bare @retry), not {target!r}"
            )
            raise TypeError(msg)
    idempotent = flag("idempotent", idempotent)
    clock = forward(clock)  # a step back is no time passing: the deadline is not pushed away
    function("sleep", sleep, "taking seconds", optional=True)
    function("on_result", on_result, "of the result", optional=True)
    effective = _policy(policy, policy_changes)
    failure_of = _error_classifier(on)
    generator = rng or random.Random()
    budget = None if effective.budget is None else _Budget(effective.budget)

    def decorate(fn: F) -> F:
        _check_decoratable(fn)
        name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"

        def run() -> _Run:
            return _Run(effective, name, idempotent, generator, clock, budget, failure_of)

        def checked(result: Any) -> Any:
            if on_result is not None:
                again, delay = _verdict(on_result(result))
                if again:
                    raise _RetryResult(result, delay)
            return result

        if kind_of(fn) == "coroutine":
            pause = event_loop_sleep(sleep)

            @wrapt.decorator
            async def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                state = run()
                while True:
                    state.attempt()
                    try:
                        result = checked(await wrapped(*args, **kwargs))
                    except Exception as exc:
                        delay = state.failed(exc)
                        if delay is None:
                            return state.give_up(exc)
                    else:
                        return state.returned(result)  # its hook's error is not retried
                    await pause(delay)

            return async_wrapper(fn)  # type: ignore[return-value]

        wait = sleep or time.sleep

        @wrapt.decorator
        def sync_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            state = run()
            while True:
                state.attempt()
                try:
                    result = checked(wrapped(*args, **kwargs))
                except Exception as exc:
                    delay = state.failed(exc)
                    if delay is None:
                        return state.give_up(exc)
                else:
                    return state.returned(result)  # its hook's error is not retried
                wait(delay)

        return sync_wrapper(fn)  # type: ignore[return-value]

    return decorate if bare is None else decorate(bare)


def _is_error_types(value: object) -> bool:
    """Whether ``value`` is an exception type or a tuple of them."""
    candidates = value if isinstance(value, tuple) else (value,)
    return all(isinstance(t, type) and issubclass(t, BaseException) for t in candidates)


def _check_decoratable(fn: Any) -> None:
    """Refuse what ``@retry`` cannot retry: a generator's body runs after the call returns."""
    if kind_of(fn) in ("generator", "async generator"):
        msg = "@retry cannot retry a generator (its body runs while it is iterated, after the call)"
        raise TypeError(msg)
    if isinstance(fn, classmethod | staticmethod):
        kind = type(fn).__name__
        msg = f"put @retry below @{kind}, not above it (it must wrap the function itself)"
        raise TypeError(msg)


def _policy(policy: RetryPolicy | None, changes: dict[str, Any]) -> RetryPolicy:
    """``policy`` (default ``DEFAULT_POLICY``) with ``changes`` to its fields."""
    if policy is not None and not isinstance(policy, RetryPolicy):
        msg = f"policy must be a RetryPolicy, not {type(policy).__name__}"
        raise TypeError(msg)
    base = policy or DEFAULT_POLICY
    return base.replace(**changes) if changes else base


class Attempt:
    """
    One attempt of a :func:`retry_context` block: run it as ``with attempt:``.

    An exception the block retries is swallowed by the ``with``, and the loop waits before the
    next attempt; any other, or the last, propagates (with the call record noted on it).
    """

    __slots__ = ("_run", "delay", "number", "raised")

    def __init__(self, run: _Run) -> None:
        self._run = run
        self.number: int = run.record.attempts  #: 1 for the first attempt
        self.delay: float | None = None  #: the wait before the next attempt, once this failed
        self.raised = False  #: whether the block raised

    def __repr__(self) -> str:
        """Show the attempt's number."""
        return f"<Attempt {self.number}>"

    def __enter__(self) -> Attempt:
        """Start the attempt."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        """Swallow an exception that will be retried; let any other one go on."""
        self.raised = exc is not None
        if exc is None or not isinstance(exc, Exception):
            return False  # success, or KeyboardInterrupt and the like: never retried
        self.delay = self._run.failed(exc)
        if self.delay is None:
            self._run.gave_up(exc)
            return False
        return True


class RetryContext:
    """
    The retry loop of :func:`retry_context`: iterate it (``for`` or ``async for``).

    Each iteration runs the loop afresh: one object can guard a block that runs many times.
    """

    def __init__(
        self,
        on: OnError | None,
        policy: RetryPolicy,
        idempotent: bool,
        rng: random.Random,
        sleep: Callable[[float], Any] | None,
        clock: Callable[[], float],
        name: str,
    ) -> None:
        self.policy = policy
        self._failure_of = _error_classifier(on)
        self._idempotent, self._rng, self._sleep, self._clock = idempotent, rng, sleep, clock
        self._name = name
        self._budget = None if policy.budget is None else _Budget(policy.budget)

    def _start(self) -> _Run:
        return _Run(
            self.policy,
            self._name,
            self._idempotent,
            self._rng,
            self._clock,
            self._budget,
            self._failure_of,
        )

    def __iter__(self) -> Iterator[Attempt]:
        """The attempts, waiting (with a sync sleep) between them."""
        run = self._start()
        wait = self._sleep or time.sleep
        while True:
            run.attempt()
            attempt = Attempt(run)
            yield attempt
            if attempt.delay is None:  # the block ran through (or raised what ends the call)
                if not attempt.raised:
                    run.succeeded()
                return
            wait(attempt.delay)

    async def __aiter__(self) -> AsyncIterator[Attempt]:
        """The attempts, waiting (with an async sleep: ``time.sleep`` is a TypeError) between."""
        pause = event_loop_sleep(self._sleep)
        run = self._start()
        while True:
            run.attempt()
            attempt = Attempt(run)
            yield attempt
            if attempt.delay is None:
                if not attempt.raised:
                    run.succeeded()
                return
            await pause(attempt.delay)


def retry_context(
    on: OnError | None = None,
    *,
    policy: RetryPolicy | None = None,
    idempotent: bool = True,
    rng: random.Random | None = None,
    sleep: Callable[[float], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    name: str = "retry_context",
    **policy_changes: Any,
) -> RetryContext:
    """
    ``@retry``'s loop for a block of code that is not a function.

    ::

        for attempt in retry_context(on=httpx.HTTPError, attempts=5):
            with attempt:
                sync_the_catalogue()

    (``async for`` in async code.)  The arguments are :func:`retry`'s (but ``on_result``: a
    block returns nothing; ``on`` defaults to the same transient network errors,
    :func:`is_transient`); ``name`` is what the log lines and hooks call the block.  An
    exception ``on`` retries is swallowed by ``with attempt:`` and the loop waits before the
    next attempt; when retries run out it propagates, with the call record noted on it
    (:func:`~smoothclient.record_of`).  The ``on_success`` / ``on_give_up`` hooks of the
    policy are called as for a decorated function.
    """
    return RetryContext(
        on,
        _policy(policy, policy_changes),
        flag("idempotent", idempotent),
        rng or random.Random(),
        function("sleep", sleep, "taking seconds", optional=True),
        forward(clock),
        name,
    )
