"""
A state read from a shared store is input (issue 37): cases a fuzzing campaign found.

Whatever the store holds, :func:`~smoothclient.pacing.codec.load` raises nothing, and the
state it gives (clamped as a Redis store clamps it) takes a call's steps without an exception
and without admitting a request, or closing the gate, further ahead than ``max_gate``.
"""

from __future__ import annotations

import base64
import json
import math
import struct

import pytest

from smoothclient.hints import Hints, Quota
from smoothclient.pacing import admission, learning
from smoothclient.pacing.codec import clamped, dump, load
from smoothclient.pacing.state import OriginState, Settings
from smoothclient.policy import RetryBudget

MAX_GATE = 30.0
NOW = 1000.0
S = Settings(max_gate=MAX_GATE)
BASE = json.loads(dump(OriginState()))
HUGE = int("1" + "0" * 400)  # no float holds it
QUOTA = Hints(
    remaining=2.0,
    limit=10.0,
    window=5.0,
    reset_after=3.0,
    quotas=(Quota("x", 2.0, 10.0, 5.0, 3.0),),
)


def _text(**fields: object) -> str:
    return json.dumps({**BASE, **fields})


def _doubles(*values: float) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode()


def _steps(o: OriginState) -> float:
    """A few calls' steps on ``o``: the longest delay granted, or gate seen."""
    now, worst = NOW, 0.0
    answers = [Hints(), Hints(retry_after=1.0), QUOTA]
    budget = RetryBudget()
    for status, hints in zip((200, 429, 200), answers, strict=True):
        granted = admission.acquire(o, S, now, now, now + 10 * MAX_GATE)
        if granted.granted:
            assert not math.isnan(granted.delay)
            worst = max(worst, granted.delay)
        worst = max(worst, admission.view("o", o, now).gate_in)
        o.budget(budget).record_request(now)
        o.budget(budget).try_retry(now)
        learning.observe(o, S, status, hints, now, sent_at=now - 0.1, counted=True)
        dump(o)
        now += 0.01
    return worst


RAISED = {
    # each raised out of a call's steps before: OverflowError from load (float() of the
    # integer); IndexError in learning.observe and the controller (loaded as () and (1,));
    # OverflowError in learning (floor(share * remaining)); IndexError in BudgetCounts
    "a burst of 400 digits": _text(pace=[HUGE, 0, 0]),
    "an early probe of no values": _text(early_sent=[]),
    "a cut of one value": _text(cut=[1]),
    "a share of 1e308": _text(
        avail=0, reset_at=0, kind="window", exhausted=[0, 0], share=int("1" + "0" * 308)
    ),
    "buckets of junk": _text(budgets=[[[0.5, 1.0, 10.0], [[], ["a"]]]]),
    # and their neighbours: no number past a float's, NaN, infinity or a value of another
    # shape reaches the rules
    "a gate of 400 digits": _text(gate=HUGE),
    "a count of 400 digits": _text(admitted=HUGE),
    "a ledger of three values": _text(ledger_set=[1, 2, 3]),
    "a slot owed at NaN": '{"pace": [1, NaN, 1]}',
    "successes at NaN": _text(successes=_doubles(math.nan, 1.0)),
    "throttles at infinity": _text(throttles=_doubles(1.0, math.inf)),
    "a burst below one": _text(pace=[-1e300, 1000, 1]),
}


@pytest.mark.parametrize("text", RAISED.values(), ids=RAISED.keys())
def test_junk_reads_and_takes_a_calls_steps_without_an_error(text: str) -> None:
    state = load(text)
    clamped(state, NOW, MAX_GATE)
    assert _steps(state) <= MAX_GATE


def test_a_state_read_keeps_its_values() -> None:
    """What the checks let through: every value of a busy state, infinities where they go."""
    o = OriginState()
    o.pace.rate, o.pace.burst, o.share, o.limit = 2.0, 5.0, 0.25, 1e200
    o.exhausted, o.cut = (1.0, 2.0), (3.0, None, 0.5, 4.0)
    read = load(dump(o))
    assert (read.pace.interval, read.pace.burst, read.pace.tat) == (0.5, 5.0, -math.inf)
    assert (read.share, read.exhausted, read.cut) == (0.25, (1.0, 2.0), (3.0, None, 0.5, 4.0))
    assert read.limit == 1e18  # clamped: no number the rules keep is larger
    assert read.ceiling == math.inf
    assert read.crowd_window == math.inf


AHEAD = {
    # each admitted a request, or closed the gate, past max_gate (30 s) before
    "slots 31 s apart": _text(pace=[1.0, 0, 31.0]),  # the slot after the next: 30.8 s
    "a reset probe sent 30 s ahead": _text(avail=0, reset_probe=NOW + 30),  # asked back in 30.005
    "an outage's probe gap of 31 s": _text(outage=[0, 0, 0, 0, 31, 0, 0, 0]),  # a gate of 31 s
}


@pytest.mark.parametrize("text", AHEAD.values(), ids=AHEAD.keys())
def test_nothing_a_store_holds_holds_a_request_past_max_gate(text: str) -> None:
    state = load(text)
    clamped(state, NOW, MAX_GATE)
    assert _steps(state) <= MAX_GATE
    state = clamped(load(text), NOW, MAX_GATE)
    assert admission.acquire(state, S, NOW, NOW, None).delay <= MAX_GATE
    assert admission.view("o", state, NOW).gate_in <= MAX_GATE
