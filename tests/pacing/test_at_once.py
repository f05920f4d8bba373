"""
A tracker's plain operations and its steps are the same operations (pacing/store.py): driven
as steps or done at once over a memory cell (MemoryCell.apply/look), and over a cell with
steps only (driven by run), every answer and every state are the same.  And Pacer.bind, the
binding done at once for a store in this process, binds as Pacer.binding does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from smoothclient import Pacer, RetryBudget
from smoothclient.hints.model import Hints, Quota, hints_of
from smoothclient.pacing.scopes import ScopeRequest
from smoothclient.pacing.state import Settings
from smoothclient.pacing.steps import Steps, run
from smoothclient.pacing.store import KeyTracker, MemoryCell, Step, Tracker, at_once

BUDGET = RetryBudget()


class StepsOnly:
    """A memory cell showing only what every cell has: its steps (no ``apply``/``look``)."""

    def __init__(self, cell: MemoryCell) -> None:
        self.inner = cell
        self.key = cell.key
        self.healthy = cell.healthy
        self.note_success = cell.note_success
        self.record_attempt = cell.record_attempt
        self.count = cell.count

    def update(self, step: Step[Any], **options: Any) -> Steps[Any]:
        return self.inner.update(step, **options)

    def read(self, look: Step[Any], **options: Any) -> Steps[Any]:
        return self.inner.read(look, **options)


Op = tuple[str, float, int, Hints]  # what, time since the last, status, hints


def _apply(tracker: KeyTracker, op: Op, now: float, as_steps: bool) -> object:
    """One operation on ``tracker``: its plain method, or its step driven by ``run``."""
    what, _, status, hints = op
    steps = tracker.steps
    calls: dict[str, tuple[Callable[[], object], Callable[[], Steps[Any]]]] = {
        "try_now": (lambda: tracker.try_now(now), lambda: steps.try_now(now)),
        "acquire": (
            lambda: tracker.acquire(now, deadline=now + 1),
            lambda: steps.acquire(now, deadline=now + 1),
        ),
        "when": (lambda: tracker.when(now), lambda: steps.when(now)),
        "observe": (
            lambda: tracker.observe(status, hints, now, sent_at=now - 0.01),
            lambda: steps.observe(status, hints, now, sent_at=now - 0.01),
        ),
        "cohort": (lambda: tracker.cohort(now), lambda: steps.cohort(now)),
        "try_retry": (lambda: tracker.try_retry(BUDGET, now), lambda: steps.try_retry(BUDGET, now)),
        "view": (lambda: tracker.view(now), lambda: steps.view(now)),
        "update": (
            lambda: tracker.update(lambda o: o.waiting),
            lambda: steps.update(lambda o: o.waiting),
        ),
        "read": (lambda: tracker.read(lambda o: o.avail), lambda: steps.read(lambda o: o.avail)),
    }
    plain, stepped = calls[what]
    return run(stepped()) if as_steps else plain()


_OPS = st.tuples(
    st.sampled_from(
        [
            *("try_now", "acquire", "when", "observe", "observe"),
            *("cohort", "try_retry", "view", "update", "read"),
        ]
    ),
    st.sampled_from([0.0, 0.001, 0.02, 0.3, 2.0]),
    st.sampled_from([200, 200, 429, 503]),
    st.sampled_from(
        [
            Hints(),
            Hints(retry_after=1.0),
            hints_of([Quota("ietf:d", 5.0, 10.0, 1.0, 1.0)]),
            hints_of([Quota("ietf:d", 0.0, 10.0, 1.0, 0.5)]),
        ]
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_OPS, max_size=40))
def test_plain_operations_answer_and_move_the_state_as_their_steps(ops: list[Op]) -> None:
    plain = KeyTracker(MemoryCell("o", Settings()))
    stepped = KeyTracker(MemoryCell("o", Settings()))
    driven = KeyTracker(StepsOnly(MemoryCell("o", Settings())))
    now = 1000.0
    for op in ops:
        now += op[1]
        expected = _apply(stepped, op, now, as_steps=True)
        assert _apply(plain, op, now, as_steps=False) == expected
        assert _apply(driven, op, now, as_steps=False) == expected
        state = stepped.cell.state  # type: ignore[attr-defined]
        assert plain.cell.state == state  # type: ignore[attr-defined]  # (every field)
        assert driven.cell.inner.state == state  # type: ignore[attr-defined]


def test_a_cell_without_primitives_done_at_once_has_its_steps_driven() -> None:
    """at_once: a memory cell's own pair; any other cell's steps, driven here."""
    cell = MemoryCell("o", Settings())
    assert at_once(cell) == (cell.apply, cell.look)
    update, read = at_once(StepsOnly(cell))
    done: Any = update(lambda o, _s: setattr(o, "waiting", 3))  # (a result: typed as a step)
    assert done is None
    waiting: Any = read(lambda o, _s: o.waiting)
    assert waiting == 3


def _route(request: object) -> tuple[str, str]:
    method, path = str(request).split(" ")
    return method, path


def _named(request: ScopeRequest) -> str | None:
    return "search" if request.path.startswith("/search") else None


def _same(a: Tracker | None, b: Tracker | None) -> None:
    """The same binding: none, or the same trackers for the same scopes."""
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert type(a) is type(b)
        for name in ("origin", "scopes", "given", "route", "origin_bound"):
            assert getattr(a, name, None) == getattr(b, name, None)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["GET /x", "GET /search/1", "POST /repos/123/issues"]),
            st.booleans(),  # late
            st.booleans(),  # with the scope function
            st.sampled_from([None, "core", "search"]),  # the scope an answer names
            st.sampled_from([200, 429]),
        ),
        max_size=15,
    )
)
def test_bind_binds_as_the_binding_step(
    requests: list[tuple[str, bool, bool, str | None, int]],
) -> None:
    pacer = Pacer(probe=0, clock=lambda: 1000.0)
    for request, late, with_fn, named, status in requests:
        fn = _named if with_fn else None
        bound = pacer.bind("https://a:443", request, _route, scope=fn, late=late)
        stepped = run(pacer.binding("https://a:443", request, _route, scope=fn, late=late))
        _same(bound, stepped)
        tracker = bound or pacer.track("https://a:443")
        quota = Quota("ietf:x", 5.0, 10.0, 1.0, 1.0, scope=named)
        tracker.observe(status, hints_of([quota]), 1000.0, counted=False)
