"""retry_context (a block retried like a decorated function) and @retry's end-of-call hooks."""

from __future__ import annotations

import asyncio
import random

import pytest

from smoothclient import CallEnded, RetryPolicy, record_of, retry, retry_context
from smoothclient.events import RetryEvent
from smoothclient.testing import FakeClock


def hooks() -> tuple[RetryPolicy, list[tuple[str, CallEnded]]]:
    seen: list[tuple[str, CallEnded]] = []
    policy = RetryPolicy(
        on_success=lambda e: seen.append(("success", e)),
        on_give_up=lambda e: seen.append(("give-up", e)),
    )
    return policy, seen


def test_a_block_is_retried_until_it_succeeds(clock: FakeClock) -> None:
    policy, seen = hooks()
    runs: list[int] = []
    block = retry_context(
        on=ConnectionError, attempts=5, sleep=clock.sleep, clock=clock, name="sync", policy=policy
    )
    for attempt in block:
        with attempt:
            runs.append(attempt.number)
            if len(runs) < 3:
                raise ConnectionError("flaky")
    assert runs == [1, 2, 3]
    assert len(clock.sleeps) == 2
    assert [kind for kind, _ in seen] == ["success"]
    ended = seen[0][1]
    assert ended.origin == "sync"
    assert ended.record.attempts == 3
    assert ended.record.reasons == ["other error", "other error"]
    assert ended.succeeded


def test_the_last_error_propagates_with_its_record(clock: FakeClock) -> None:
    policy, seen = hooks()
    runs = 0

    def block() -> None:
        nonlocal runs
        for attempt in retry_context(
            on=ConnectionError, attempts=3, sleep=clock.sleep, clock=clock, policy=policy
        ):
            with attempt:
                runs += 1
                raise ConnectionError("down")

    with pytest.raises(ConnectionError, match="down") as caught:
        block()
    assert runs == 3
    record = record_of(caught.value)
    assert record is not None
    assert record.attempts == 3
    assert record.gave_up is not None
    assert "3 attempts" in record.gave_up
    assert [kind for kind, _ in seen] == ["give-up"]
    assert seen[0][1].exception is caught.value
    assert not seen[0][1].succeeded


def test_an_error_it_does_not_retry_ends_at_once(clock: FakeClock) -> None:
    policy, seen = hooks()
    runs = 0

    def block() -> None:
        nonlocal runs
        for attempt in retry_context(
            on=ConnectionError, sleep=clock.sleep, clock=clock, policy=policy
        ):
            with attempt:
                runs += 1
                raise KeyError("bug")

    with pytest.raises(KeyError):
        block()
    assert runs == 1
    assert clock.sleeps == []
    assert [kind for kind, _ in seen] == ["give-up"]


def test_an_error_caught_inside_the_loop_is_no_success(clock: FakeClock) -> None:
    """Whoever swallows the last error around ``with attempt:`` does not turn it into a success."""
    policy, seen = hooks()
    for attempt in retry_context(
        on=ConnectionError, attempts=1, sleep=clock.sleep, clock=clock, policy=policy
    ):
        try:
            with attempt:
                raise ConnectionError("down")
        except ConnectionError:
            pass
    assert [kind for kind, _ in seen] == ["give-up"]


def test_a_keyboard_interrupt_is_never_retried(clock: FakeClock) -> None:
    runs = 0

    def block() -> None:
        nonlocal runs
        for attempt in retry_context(sleep=clock.sleep, clock=clock):
            with attempt:
                runs += 1
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        block()
    assert runs == 1


def test_the_deadline_and_the_retry_hook_apply(clock: FakeClock) -> None:
    events: list[RetryEvent] = []
    start = clock()

    def block() -> None:
        for attempt in retry_context(
            on=OSError,
            attempts=100,
            timeout=5,
            sleep=clock.sleep,
            clock=clock,
            on_retry=events.append,
            rng=random.Random(1),
        ):
            with attempt:
                raise OSError("down")

    with pytest.raises(OSError, match="down"):
        block()
    assert clock() <= start + 5.0
    assert events
    assert all(e.origin == "retry_context" for e in events)


def test_one_context_runs_a_fresh_loop_each_time(clock: FakeClock) -> None:
    context = retry_context(on=ValueError, attempts=2, sleep=clock.sleep, clock=clock)
    runs: list[int] = []

    def block() -> None:
        for attempt in context:
            with attempt:
                runs.append(attempt.number)
                raise ValueError("bad")

    for _ in range(2):
        with pytest.raises(ValueError, match="bad"):
            block()
    assert runs == [1, 2, 1, 2]  # the second loop had its own two attempts


def test_async_for_waits_with_an_async_sleep(clock: FakeClock) -> None:
    policy, seen = hooks()
    runs = 0

    async def main() -> None:
        nonlocal runs
        async for attempt in retry_context(
            on=TimeoutError, sleep=clock.async_sleep, clock=clock, policy=policy
        ):
            with attempt:
                runs += 1
                if runs < 2:
                    raise TimeoutError

    asyncio.run(main())
    assert runs == 2
    assert len(clock.sleeps) == 1
    assert [kind for kind, _ in seen] == ["success"]


def test_bad_arguments_are_refused_when_the_context_is_made() -> None:
    with pytest.raises(TypeError, match="on must be"):
        retry_context(on=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="policy must be a RetryPolicy"):
        retry_context(policy={"attempts": 2})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attempts"):
        retry_context(attempts=0)


def test_retry_calls_the_success_and_give_up_hooks(clock: FakeClock) -> None:
    policy, seen = hooks()
    answers = iter([None, "done"])

    @retry(on_result=lambda r: r is None, sleep=clock.sleep, clock=clock, policy=policy)
    def poll() -> str | None:
        return next(answers)

    @retry(on=OSError, attempts=2, sleep=clock.sleep, clock=clock, policy=policy)
    def down() -> None:
        raise OSError("down")

    @retry(on_result=lambda r: r is None, attempts=1, sleep=clock.sleep, clock=clock, policy=policy)
    def never() -> None:
        return None

    assert poll() == "done"
    with pytest.raises(OSError, match="down"):
        down()
    assert never() is None
    assert [kind for kind, _ in seen] == ["success", "give-up", "give-up"]
    assert seen[0][1].record.attempts == 2
    assert seen[0][1].origin.endswith("poll")
    assert isinstance(seen[1][1].exception, OSError)
    assert seen[2][1].exception is None  # an unwanted result, returned
    assert seen[2][1].record.gave_up is not None
    assert not seen[2][1].succeeded


def test_an_error_in_the_success_hook_is_not_retried(clock: FakeClock) -> None:
    calls = 0

    def broken(ended: CallEnded) -> None:
        raise RuntimeError("hook bug")

    @retry(sleep=clock.sleep, clock=clock, on_success=broken)
    def job() -> int:
        nonlocal calls
        calls += 1
        return calls

    with pytest.raises(RuntimeError, match="hook bug"):
        job()
    assert calls == 1
