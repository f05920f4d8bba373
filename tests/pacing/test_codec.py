"""The state as text and back: every field the rules read survives, garbage reads as fresh."""

from __future__ import annotations

import dataclasses
from collections import deque

from smoothclient.hints import Hints
from smoothclient.pacing import admission as adm
from smoothclient.pacing import learning
from smoothclient.pacing.codec import dump, load
from smoothclient.pacing.redis.keyspace import merge_successes
from smoothclient.pacing.state import OriginState, Settings
from smoothclient.policy import RetryBudget

S = Settings()


def busy_state() -> OriginState:
    """A state that went through quotas, throttles, a window and budgets."""
    o = OriginState()
    adm.acquire(o, S, 0.0, 0.0, None)
    learning.observe(
        o,
        S,
        200,
        Hints(remaining=3, limit=10, window=10, reset_after=4),
        0.1,
        sent_at=0.0,
        counted=True,
    )
    for n in range(5):
        learning.observe(o, S, 429, Hints(retry_after=1.0), 0.2 + n, sent_at=0.1 + n, counted=False)
    o.budget(RetryBudget()).record_request(3.0)
    o.budget(RetryBudget(ratio=0.5)).try_retry(3.5)
    o.window_guesses[None] = 60.0
    o.exhausted = (1.0, 2.0)
    return o


def test_every_field_survives_but_the_counts() -> None:
    o = busy_state()
    o.waiting, o.in_flight = 3, 2
    back = load(dump(o))
    for f in dataclasses.fields(OriginState):
        if f.name in ("waiting", "in_flight"):
            assert getattr(back, f.name) == 0  # kept per process by a shared store
        elif f.name == "pace":
            assert (back.pace.burst, back.pace.tat, back.pace.interval) == (
                o.pace.burst,
                o.pace.tat,
                o.pace.interval,
            )
        elif f.name == "budgets":
            assert {b: list(c.buckets) for b, c in back.budgets.items()} == {
                b: list(c.buckets) for b, c in o.budgets.items()
            }
        else:
            assert getattr(back, f.name) == getattr(o, f.name), f.name
    assert back.successes.maxlen == o.successes.maxlen


def test_a_loaded_state_takes_the_same_steps() -> None:
    o = busy_state()
    back = load(dump(o))
    for when in (5.0, 6.0, 9.0):
        assert adm.acquire(back, S, when, 0.0, None) == adm.acquire(o, S, when, 0.0, None)


def test_garbage_reads_as_a_fresh_state() -> None:
    for text in ("", "{", "[1, 2]", '{"pace": 3}', '{"budgets": [[1]]}', b"\xff"):
        assert load(text) == OriginState()


def test_old_successes_are_not_written_and_times_keep_their_value() -> None:
    o = OriginState()
    for n in range(50):
        o.successes.append(100.0 + n * 0.1234567)  # 6 s of them
    back = load(dump(o))
    assert back.successes[-1] == o.successes[-1]
    assert list(back.successes) == [t for t in o.successes if t >= o.successes[-1] - 3.0]
    assert len(back.successes) < len(o.successes)
    assert back.successes.maxlen == o.successes.maxlen


def test_times_written_as_milliseconds_still_read() -> None:
    """A fleet mid-upgrade: a state written by a process that wrote times as milliseconds."""
    back = load('{"successes": [100.5, [0, 250, 1000]], "throttles": []}')
    assert list(back.successes) == [100.5, 100.75, 101.5]
    assert not back.throttles


def test_unreadable_times_read_as_a_fresh_state() -> None:
    for times in ('"not base64!"', '"AAAA"', "[1]", '"' + "A" * 12 + '"'):
        assert load('{"through": 7, "successes": ' + times + "}") == OriginState()


def test_successes_merged_from_a_write_are_answers() -> None:
    """A fleet's successes noted on its fast lane reach the state in a write: a spell's too."""
    state = OriginState()
    merge_successes(state, deque([10.0, 10.5]))
    assert state.spell_since == 10.0
    assert state.last_answer == 10.5
    merge_successes(state, deque([10.5, 11.0, 14.0]))  # two idle seconds and more: a new spell
    assert list(state.successes) == [10.0, 10.5, 11.0, 14.0]
    assert (state.spell_since, state.last_answer) == (14.0, 14.0)
