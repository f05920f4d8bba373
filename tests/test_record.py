"""The typed call record: one reader for every edge and @retry; retries, waits and log agree."""

from __future__ import annotations

import logging

import httpx
import pytest

from smoothclient import CallRecord, Pacer, RetryPolicy, SmoothTransport, record_of, retry
from smoothclient.events import RetryEntry
from smoothclient.hints import Hints
from smoothclient.testing import FakeClock

URL = "https://api.test/items"


def client(clock: FakeClock, statuses: list[int], pacer: Pacer | None = None) -> httpx.Client:
    answers = iter(statuses)
    transport = SmoothTransport(
        httpx.MockTransport(lambda request: httpx.Response(next(answers))),
        policy=RetryPolicy(attempts=3, wait_initial=0.5, wait_max=0.5, jitter="none"),
        pacer=pacer or Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    return httpx.Client(transport=transport)


def test_a_retried_call_reads_as_typed_entries_agreeing_with_the_log(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="smoothclient"), client(clock, [503, 200]) as c:
        response = c.get(URL)
    record = record_of(response)
    assert isinstance(record, CallRecord)
    assert (record.attempts, record.status, record.gave_up) == (2, 200, None)
    assert record.retries == (RetryEntry("status 503", 0.5, (0.5, 0.5), 503),)
    assert record.reasons == ["status 503"]
    assert isinstance(record.total_wait, float)
    assert record.total_wait == pytest.approx(0.5)
    assert record.pacer_waits == ()
    assert "retrying in 0.500 s" in caplog.text  # the log line says what the record says
    with pytest.raises(AttributeError):
        record.attempts = 3  # type: ignore[misc]


def test_pacer_waits_are_told_apart_from_backoff(clock: FakeClock) -> None:
    pacer = Pacer(clock=clock, probe=0)
    with client(clock, [503, 200], pacer) as c:
        # the origin is closed for 2 s: the first attempt waits for the pacer, the retry for
        # its 0.5 s backoff only
        pacer.track("https://api.test:443").observe(
            503, Hints(retry_after=2.0), clock(), counted=False
        )
        response = c.get(URL)
    record = record_of(response)
    assert record is not None
    # the 503s mark the origin down (a 503's Retry-After closes it): the first attempt is its
    # probe, and the retry waits for its backoff or the next probe, whichever is later
    assert record.pacer_waits == pytest.approx((2.0,), abs=0.01)
    assert record.retries[0].delay >= 0.5
    assert record.total_wait == pytest.approx(2.0 + record.retries[0].delay, abs=0.01)


def test_exceptions_of_edges_and_retry_carry_the_record(clock: FakeClock) -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    transport = SmoothTransport(
        httpx.MockTransport(refused),
        policy=RetryPolicy(attempts=2, wait_initial=0.01),
        pacer=Pacer(clock=clock, probe=0),
        sleep=clock.sleep,
    )
    with httpx.Client(transport=transport) as c, pytest.raises(httpx.ConnectError) as caught:
        c.get(URL)
    record = record_of(caught.value)
    assert record is not None
    assert (record.attempts, record.status) == (2, None)

    @retry(on=ValueError, attempts=2, wait_initial=0.01, sleep=clock.sleep, clock=clock)
    def flaky() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no") as failed:
        flaky()
    from_retry = record_of(failed.value)
    assert from_retry is not None
    assert from_retry.attempts == 2
    assert len(from_retry.retries) == 1
    assert record_of(ValueError("not ours")) is None
    assert record_of(httpx.Response(200)) is None


def test_a_record_round_trips_through_its_dict() -> None:
    record = CallRecord(
        attempts=3,
        retries=(RetryEntry("status 429", 1.5, (0.0, 2.0), 429),),
        waits=(1.5, 0.25),
        pacer_waits=(0.25,),
        gave_up="the retry budget is spent",
        status=429,
        gave_up_kind="budget",
    )
    assert CallRecord.from_dict(record.as_dict()) == record
    old = CallRecord.from_dict({"attempts": 2, "reasons": ["status 503"], "waits": [0.1]})
    assert old.reasons == ["status 503"]
    assert old.total_wait == pytest.approx(0.1)


def test_a_call_held_for_an_outage_says_so(clock: FakeClock) -> None:
    """The record counts the time held while the origin was down; the retry's reason says it."""
    pacer = Pacer(clock=clock, probe=0)
    tracker = pacer.track("https://api.test:443")
    for _ in range(12):  # the origin fails every request for a second: down
        tracker.observe(503, Hints(), clock(), counted=False)
        clock.sleep(0.1)
    with client(clock, [503, 200], pacer) as c:
        response = c.get(URL)
    record = record_of(response)
    assert record is not None
    assert record.status == 200
    assert record.held_for_outage > 0
    assert any("held for an outage" in reason for reason in record.reasons)
    assert CallRecord.from_dict(record.as_dict()) == record
