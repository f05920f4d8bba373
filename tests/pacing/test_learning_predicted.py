"""
The predicted answer's short-cut in pacing/learning.py: an answer that says only the countdown
the model expected moves the state exactly as the whole of ``observe`` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from smoothclient.hints.model import Hints, Quota, hints_of
from smoothclient.pacing import admission as adm
from smoothclient.pacing import learning
from smoothclient.pacing.state import OriginState, Settings


def _never(*args: object) -> bool:
    return False


@contextmanager
def _whole_path() -> Iterator[None]:
    """``observe`` with the short-cut off: every answer through all of its rules."""
    short_cut = learning._predicted
    learning._predicted = _never  # type: ignore[assignment]
    try:
        yield
    finally:
        learning._predicted = short_cut


class _Counting:
    """The short-cut, counting the answers it took."""

    def __init__(self) -> None:
        self.taken = 0
        self.short_cut = learning._predicted

    def __call__(self, *args: Any) -> bool:
        taken: bool = self.short_cut(*args)
        self.taken += taken
        return taken


Step = tuple[float, int, Hints, bool, float]  # since the last, status, hints, counted, sent ago


def _run(steps: list[Step]) -> int:
    """Run ``steps`` on two states, with and without the short-cut; equal after each."""
    fast, whole, s = OriginState(), OriginState(), Settings()
    counting = _Counting()
    now = 1000.0
    for gap, status, hints, counted, ago in steps:
        now += gap
        for o in (fast, whole):
            if counted:
                adm.try_now(o, s, now)  # sent through admission, as a paced request is
        learning._predicted = counting  # type: ignore[assignment]
        try:
            learning.observe(fast, s, status, hints, now, sent_at=now - ago, counted=counted)
        finally:
            learning._predicted = counting.short_cut
        with _whole_path():
            learning.observe(whole, s, status, hints, now, sent_at=now - ago, counted=counted)
        assert fast == whole  # (dataclasses: every field, the bucket, the deques)
    return counting.taken


def _ietf(left: float, limit: float | None, window: float | None, reset: float | None) -> Hints:
    return hints_of([Quota("ietf:d", left, limit, window, reset, scope="d")])


def test_a_countdown_takes_the_short_cut_and_moves_the_state_as_observe_does() -> None:
    steps: list[Step] = []
    for index in range(400):
        left = 99_999.0 - index
        steps.append((0.0001, 200, _ietf(left, 100_000.0, 1.0, 1.0), index % 3 != 0, 0.00005))
    assert _run(steps) > 300  # most answers were the predicted countdown


_GAPS = st.sampled_from([0.0, 0.00005, 0.0005, 0.002, 0.3, 1.2, 40.0])
_STATUS = st.sampled_from([200, 200, 200, 200, 204, 304, 429, 403, 500, 503])
_RESETS = st.sampled_from([None, 0.0, 0.5, 1.0, 1.0, 30.0, 301.0, 4000.0])
_LIMITS = st.sampled_from([None, 0.0, 1.0, 10.0, 100.0, 100_000.0])
_WINDOWS = st.sampled_from([None, 0.0, 1.0, 60.0, 400.0])


@st.composite
def _answers(draw: st.DrawFn) -> list[Step]:
    """Mostly a countdown (sometimes back up, a new window), now and then something else."""
    limit, window = draw(_LIMITS), draw(_WINDOWS)
    left = draw(st.floats(0, 200, allow_nan=False))
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.integers(0, 9))
        left = max(0.0, left - draw(st.sampled_from([0, 1, 1, 1, 2, 5])))
        if kind == 0:
            left = draw(st.floats(0, 200, allow_nan=False))  # a new window, or a report overtaken
        if kind == 1:
            limit, window = draw(_LIMITS), draw(_WINDOWS)  # the quota changed
        reset = draw(_RESETS)
        unit = "tokens" if kind == 2 else "requests"
        quota = Quota("ietf:d", None if kind == 3 else left, limit, window, reset, unit, "d")
        retry_after = draw(st.sampled_from([None, 2.0])) if kind == 4 else None
        hints = hints_of([quota], retry_after=retry_after)
        status = draw(_STATUS) if kind >= 5 else 200
        steps.append((draw(_GAPS), status, hints, draw(st.booleans()), draw(_GAPS)))
    return steps


@settings(max_examples=300, deadline=None)
@given(_answers())
def test_any_run_of_answers_moves_the_state_as_observe_does(steps: list[Step]) -> None:
    _run(steps)
