"""The sans-IO core: pure decisions from policy, state, outcome, cohort, clock and RNG."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smoothclient import Hints, RetryPolicy
from smoothclient.engine.decide import (
    CallState,
    CohortView,
    GiveUp,
    Outcome,
    Retry,
    decide,
)

POLICY = RetryPolicy()


def run(
    outcome: Outcome,
    *,
    policy: RetryPolicy = POLICY,
    state: CallState | None = None,
    now: float = 0.0,
    cohort: CohortView | None = None,
    seed: int = 0,
    budget_ok: bool = True,
) -> Retry | GiveUp:
    return decide(
        policy,
        state or CallState(started=0.0),
        outcome,
        now=now,
        rng=random.Random(seed),
        cohort=cohort,
        budget_ok=budget_ok,
    )


def test_success_is_not_retried() -> None:
    d = run(Outcome.from_status(200))
    assert isinstance(d, GiveUp)
    assert "200" in d.reason


def test_retryable_status_gets_a_full_jitter_delay() -> None:
    """The first retry is drawn from [0, wait_initial] with the seeded RNG, exactly."""
    d = run(Outcome.from_status(503))
    assert isinstance(d, Retry)
    assert d.window == (0.0, 0.1)
    assert d.delay == pytest.approx(0.1 * random.Random(0).random())
    assert d.reason == "status 503"


def test_attempts_exhausted() -> None:
    d = run(Outcome.from_status(503), state=CallState(started=0.0, attempt=5))
    assert isinstance(d, GiveUp)
    assert "5 attempts" in d.reason


def test_retry_after_shifts_the_window() -> None:
    """Never earlier than Retry-After: the window starts there."""
    for seed in range(50):
        d = run(Outcome.from_status(429, Hints(retry_after=5.0)), seed=seed)
        assert isinstance(d, Retry)
        assert d.delay >= 5.0
        assert d.window == (5.0, 5.1)


def test_exhausted_quota_shifts_to_reset() -> None:
    d = run(Outcome.from_status(429, Hints(remaining=0, reset_after=7.0)))
    assert isinstance(d, Retry)
    assert d.window[0] == 7.0
    assert d.delay >= 7.0


def test_retry_after_with_later_reset_widens_to_reset() -> None:
    """docs/headers.md R12: Retry-After is the lower bound, the later reset widens the window."""
    d = run(Outcome.from_status(429, Hints(retry_after=2, remaining=0, reset_after=10)))
    assert isinstance(d, Retry)
    assert d.window == (2.0, 10.0)


def test_cohort_widens_the_window() -> None:
    """60 waiting at an admitted 10 req/s: the window is at least 6 s wide."""
    cohort = CohortView(waiting=60, admitted_rate=10.0)
    d = run(Outcome.from_status(429, Hints(retry_after=1.0)), cohort=cohort)
    assert isinstance(d, Retry)
    assert d.window == (1.0, 7.0)


def test_gate_shifts_every_waiter() -> None:
    d = run(Outcome.from_status(503), cohort=CohortView(opens_in=4.0))
    assert isinstance(d, Retry)
    assert d.window == (4.0, 4.1)


def test_widening_respects_wait_max() -> None:
    """Widening never pushes a wait more than wait_max past the window's start."""
    cohort = CohortView(waiting=10_000, admitted_rate=1.0)
    d = run(Outcome.from_status(429, Hints(retry_after=1.0)), cohort=cohort)
    assert isinstance(d, Retry)
    assert d.window == (1.0, 31.0)


def test_max_retry_after_gives_up_at_once() -> None:
    d = run(Outcome.from_status(429, Hints(retry_after=3600.0)))
    assert isinstance(d, GiveUp)
    assert "max_retry_after" in d.reason
    d = run(Outcome.from_status(429, Hints(remaining=0, reset_after=3600.0)))
    assert isinstance(d, GiveUp)


def test_no_sleep_past_max_retry_after() -> None:
    policy = POLICY.replace(max_retry_after=6.0)
    d = run(
        Outcome.from_status(429, Hints(retry_after=5.0)),
        policy=policy,
        cohort=CohortView(waiting=100, admitted_rate=1.0),
    )
    assert isinstance(d, Retry)
    assert d.window == (5.0, 6.0)


def test_deadline_never_waited_past() -> None:
    """With 2 s left the window is clamped to 2 s; with 1 s left a 5 s Retry-After gives up."""
    policy = POLICY.replace(timeout=10.0)
    d = run(
        Outcome.from_status(429, Hints(retry_after=1.0)),
        policy=policy,
        now=8.0,
        cohort=CohortView(waiting=60, admitted_rate=10.0),
    )
    assert isinstance(d, Retry)
    assert d.window == (1.0, 2.0)
    d = run(Outcome.from_status(429, Hints(retry_after=5.0)), policy=policy, now=9.0)
    assert isinstance(d, GiveUp)
    assert "deadline" in d.reason


def test_post_is_not_retried_on_status() -> None:
    d = run(Outcome.from_status(503), state=CallState(started=0, method="POST"))
    assert isinstance(d, GiveUp)
    assert "not idempotent" in d.reason


@pytest.mark.parametrize(
    ("status", "hints", "retried"),
    [
        (429, Hints(), True),
        (503, Hints(retry_after=2.0), True),
        (503, Hints(), False),
        (500, Hints(retry_after=2.0), False),
    ],
)
def test_a_throttled_post_is_retried(status: int, hints: Hints, retried: bool) -> None:
    """A 429, or a 503 with Retry-After, says the server did not act: any method goes again."""
    d = run(Outcome.from_status(status, hints), state=CallState(started=0, method="POST"))
    assert isinstance(d, Retry) is retried


def test_a_throttled_call_declared_not_idempotent_is_not_retried() -> None:
    """The caller's word wins: idempotent=False (``@retry``'s) or the policy's switch."""
    state = CallState(started=0, method="POST", idempotent=False)
    assert isinstance(run(Outcome.from_status(429), state=state), GiveUp)
    policy = POLICY.replace(retry_throttled_any_method=False)
    d = run(Outcome.from_status(429), policy=policy, state=CallState(started=0, method="POST"))
    assert isinstance(d, GiveUp)
    assert "not idempotent" in d.reason


def test_post_with_idempotency_key_is_retried() -> None:
    state = CallState(started=0, method="POST", has_idempotency_key=True)
    assert isinstance(run(Outcome.from_status(503), state=state), Retry)


def test_post_retried_only_when_certainly_not_sent() -> None:
    state = CallState(started=0, method="POST")
    assert isinstance(run(Outcome.from_error("connect", sent=False), state=state), Retry)
    d = run(Outcome.from_error("read", sent=True), state=state)
    assert isinstance(d, GiveUp)
    assert "may have been sent" in d.reason
    assert isinstance(run(Outcome.from_error("read", sent=True)), Retry)


def test_errors_can_be_switched_off() -> None:
    d = run(Outcome.from_error("timeout", sent=True), policy=POLICY.replace(retry_on_errors=False))
    assert isinstance(d, GiveUp)


def test_unreplayable_body() -> None:
    d = run(Outcome.from_status(503), state=CallState(started=0, replayable=False))
    assert isinstance(d, GiveUp)
    assert "replayed" in d.reason


def test_budget_spent() -> None:
    d = run(Outcome.from_status(503), budget_ok=False)
    assert isinstance(d, GiveUp)
    assert "budget" in d.reason


def test_server_says_do_not_retry() -> None:
    d = run(Outcome.from_status(503, Hints(should_retry=False)))
    assert isinstance(d, GiveUp)
    assert isinstance(run(Outcome.from_status(409, Hints(should_retry=True))), Retry)


def test_forbidden_with_rate_limit_hints() -> None:
    """GitHub answers rate limits with 403 and remaining 0 or Retry-After."""
    assert isinstance(run(Outcome.from_status(403, Hints(retry_after=3.0))), Retry)
    assert isinstance(run(Outcome.from_status(403, Hints(remaining=0, reset_after=2))), Retry)
    assert isinstance(run(Outcome.from_status(403)), GiveUp)


def test_retry_after_ignored_when_not_respected() -> None:
    d = run(
        Outcome.from_status(429, Hints(retry_after=5.0)),
        policy=POLICY.replace(respect_retry_after=False),
    )
    assert isinstance(d, Retry)
    assert d.window == (0.0, 0.1)


def test_decorrelated_uses_previous_wait() -> None:
    policy = POLICY.replace(jitter="decorrelated")
    state = CallState(started=0, attempt=3, previous_wait=2.0)
    d = run(Outcome.from_status(503), policy=policy, state=state)
    assert isinstance(d, Retry)
    assert d.window == (0.1, 6.0)


def test_call_state_next() -> None:
    s = CallState(started=1.0).next(0.5).next(1.5)
    assert (s.attempt, s.previous_wait, s.total_wait) == (3, 1.5, 2.0)


@given(
    attempt=st.integers(1, 50),
    retry_after=st.none() | st.floats(0, 400),
    waiting=st.integers(1, 10_000),
    rate=st.none() | st.floats(0.01, 1000),
    elapsed=st.floats(0, 60),
    seed=st.integers(0, 1000),
)
def test_never_exceeds_caps_or_deadline(
    attempt: int,
    retry_after: float | None,
    waiting: int,
    rate: float | None,
    elapsed: float,
    seed: int,
) -> None:
    """Every delay respects Retry-After, max_retry_after, wait_max past its start, the deadline."""
    policy = RetryPolicy(attempts=100)
    d = run(
        Outcome.from_status(429, Hints(retry_after=retry_after)),
        policy=policy,
        state=CallState(started=0.0, attempt=attempt),
        now=elapsed,
        cohort=CohortView(waiting=waiting, admitted_rate=rate),
        seed=seed,
    )
    if isinstance(d, GiveUp):
        assert (retry_after or 0) > 300 or (retry_after or 0) > 60 - elapsed
        return
    assert d.delay >= (retry_after or 0)
    assert d.delay <= 300
    assert d.delay <= (retry_after or 0) + policy.wait_max
    assert d.delay <= 60 - elapsed


EPISODE = CohortView(failing=0.5)  # an origin failing half its answers: a brownout


def test_an_origins_episode_spreads_the_last_retry_over_the_time_left() -> None:
    """
    Half the answers failing: the retries are quick but the last, which spreads.

    A request that failed at random is retried at once (its retry succeeds as often then as
    later, and a retry held back leaves the origin's capacity idle); the call's last attempt,
    the one that decides whether it fails, is drawn from the whole time left, not the next
    second (the episode may be a stretch of time that fails everything).
    """
    policy = RetryPolicy(attempts=4, timeout=10.0)
    first = run(
        Outcome.from_status(503), policy=policy, state=CallState(started=0.0), cohort=EPISODE
    )
    assert isinstance(first, Retry)
    assert first.window == pytest.approx((0.0, 0.1))  # the backoff's own
    second = run(
        Outcome.from_status(503),
        policy=policy,
        state=CallState(started=0.0, attempt=2, previous_wait=0.05),
        now=1.0,
        cohort=EPISODE,
    )
    assert isinstance(second, Retry)
    assert second.window[1] <= 0.2 + 1e-9  # still the backoff's own (doubled)
    last = run(
        Outcome.from_error("connect", sent=False),
        policy=policy,
        state=CallState(started=0.0, attempt=3),
        now=4.0,
        cohort=EPISODE,
    )
    assert isinstance(last, Retry)
    assert last.window == pytest.approx((0.0, 6.0))  # the last attempt: anywhere in what is left


@pytest.mark.parametrize(("attempts", "spread_from"), [(2, None), (3, 2), (5, 4), (8, 7)])
def test_only_the_last_retry_of_any_policy_spreads(attempts: int, spread_from: int | None) -> None:
    """Whatever the attempts, the first retry stays quick and only the last one spreads."""
    policy = RetryPolicy(attempts=attempts, timeout=60.0, wait_max=60.0)
    for attempt in range(1, attempts):
        d = run(
            Outcome.from_status(503),
            policy=policy,
            state=CallState(started=0.0, attempt=attempt),
            now=1.0,
            cohort=EPISODE,
        )
        assert isinstance(d, Retry)
        assert (d.window[1] > 30.0) == (attempt == spread_from), attempt


@pytest.mark.parametrize(
    ("outcome", "cohort"),
    [
        (Outcome.from_status(503), CohortView(failing=0.1)),  # a healthy origin's odd 5xx
        (Outcome.from_status(503), CohortView()),  # nothing known
        (Outcome.from_status(429), EPISODE),  # a throttle: the pacer's business
        (Outcome.from_status(503, Hints(retry_after=2.0)), EPISODE),  # the server said when
    ],
)
def test_without_an_episode_or_with_a_servers_word_retries_stay_quick(
    outcome: Outcome, cohort: CohortView
) -> None:
    policy = RetryPolicy(attempts=4, timeout=10.0)
    d = run(outcome, policy=policy, cohort=cohort)
    assert isinstance(d, Retry)
    assert (
        d.window[1] - d.window[0] <= 0.1 + 1e-9
    )  # the backoff's own width (after any Retry-After)


def test_no_deadline_no_spread() -> None:
    """With no deadline there is no time left to spread over: the backoff's own window."""
    d = run(Outcome.from_status(503), policy=RetryPolicy(timeout=None), cohort=EPISODE)
    assert isinstance(d, Retry)
    assert d.window == (0.0, 0.1)


def test_an_episodes_spread_never_passes_wait_max() -> None:
    policy = RetryPolicy(attempts=3, timeout=60.0, wait_max=2.0)
    state = CallState(started=0.0, attempt=2)
    d = run(Outcome.from_status(503), policy=policy, state=state, cohort=EPISODE)
    assert isinstance(d, Retry)
    assert d.window == (0.0, 2.0)


def test_an_episodes_spread_never_passes_max_retry_after() -> None:
    policy = RetryPolicy(attempts=3, timeout=60.0, max_retry_after=1.5)
    state = CallState(started=0.0, attempt=2)
    d = run(Outcome.from_status(503), policy=policy, state=state, cohort=EPISODE)
    assert isinstance(d, Retry)
    assert d.window == (0.0, 1.5)
