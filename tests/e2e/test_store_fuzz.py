"""
Property: whatever a Redis key holds, the pacer on it stays within its bounds.

Random contents go into one origin's key (or one of its scopes') in a real ``redis-server``:
junk JSON of every type in every field of the state, huge and negative numbers, NaN-ish
strings, deep nesting, fields and versions of a future release, junk cohorts and keys of the
wrong type.  Then a pacer takes the steps of a call on it (acquire, send, observe, the views),
with the sync client or on an event loop.  Whatever the key held: no exception but redis-py's
or smoothclient's own, no admission delayed past ``max_gate``, no step spinning, and another
origin's key untouched.  ``make fuzz`` runs it with many more examples
(``SMOOTHCLIENT_FUZZ_EXAMPLES``, a tenth of them here: each is a few round trips).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from smoothclient import Pacer
from smoothclient.errors import SmoothError
from smoothclient.hints import Hints
from smoothclient.pacing.codec import dump
from smoothclient.pacing.redis.store import RedisCell, redis_key
from smoothclient.pacing.state import OriginState
from smoothclient.pacing.steps import run_async
from smoothclient.tools.redis_server import RedisServer, binary

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(binary() is None, reason="no redis-server")]
redis = pytest.importorskip("redis")

#: examples per run: a few in ``make test`` (about a second), a tenth of ``make fuzz``'s count
EXAMPLES = max(25, int(os.environ.get("SMOOTHCLIENT_FUZZ_EXAMPLES", "0")) // 10)
ORIGIN = "https://fuzzed.test:443"
OTHER = "https://bystander.test:443"
MAX_GATE = 30.0
FIELDS = sorted(json.loads(dump(OriginState())))
BASE = json.loads(dump(OriginState()))

NUMBERS = st.one_of(
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**53 + 1, 10**308, 1e-320, -0.0]),
)
NAN_ISH = st.sampled_from(["NaN", "nan", "Infinity", "-Infinity", "1e999", "-0", "", "0x10"])
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, NAN_ISH, st.text(max_size=8))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)
#: a value for one field: any JSON, or a short list of numbers (the shape of pace, outage...)
VALUE = st.one_of(JSON, st.lists(NUMBERS, max_size=9), st.lists(st.lists(NUMBERS), max_size=3))


def _deep(n: int) -> str:
    return "[" * n + "]" * n


STATE = st.one_of(
    # a state of this release with some fields junk, and fields of a later one
    st.dictionaries(st.sampled_from([*FIELDS, "format", "v2"]), VALUE, max_size=6).map(
        lambda junk: json.dumps({**BASE, **junk})
    ),
    JSON.map(json.dumps),
    st.integers(1, 200_000).map(_deep),
    st.binary(max_size=40),
)
VERSION = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(), NAN_ISH, st.binary(max_size=8), st.just(2**60)
)
COHORT = st.one_of(
    JSON.map(json.dumps),
    st.dictionaries(st.text(max_size=12), st.lists(NUMBERS, max_size=4)).map(json.dumps),
    st.binary(max_size=40),
)
#: the hash's fields, each there or not (and one a later release may add)
HASH = st.fixed_dictionaries(
    {}, optional={"v": VERSION, "s": STATE, "c": COHORT, "x": st.binary(max_size=8)}
)
KIND = st.sampled_from(["hash"] * 6 + ["string", "list", "set", "zset"])
ANSWER = st.sampled_from(
    [
        (200, Hints()),
        (200, Hints(remaining=3, limit=10, reset_after=2.0)),
        (429, Hints(retry_after=1.0)),
        (503, Hints()),
    ]
)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as running:
        yield running


def _plant(client: Any, key: str, kind: str, fields: dict[str, Any]) -> None:
    client.delete(key)
    if kind == "hash" and fields:
        client.hset(key, mapping=fields)
    elif kind == "string":
        client.set(key, b"\xff junk")
    elif kind == "list":
        client.rpush(key, "a", "b")
    elif kind == "set":
        client.sadd(key, "a")
    elif kind == "zset":
        client.zadd(key, {"a": 1.0})


def _steps(pacer: Pacer, key: str, status: int, hints: Hints) -> list[float]:
    """A call's steps on ``key`` with the sync client: the delays the pacer asked for."""
    tracker = pacer._store.tracker(key)
    now = pacer.clock()
    admission = tracker.acquire(now, deadline=now + 10 * MAX_GATE)
    delays = [admission.delay]
    tracker.sent()
    tracker.observe(status, hints, pacer.clock())
    view = tracker.view(pacer.clock())
    delays += [view.gate_in, view.closed_for or 0.0, view.reset_in or 0.0]
    tracker.cohort(pacer.clock())
    now = pacer.clock()
    delays.append(tracker.acquire(now, deadline=now + 10 * MAX_GATE).delay)
    tracker.cancel()
    for seen in (pacer.view(ORIGIN), *pacer.scopes(ORIGIN).values()):  # the pacer's views
        delays += [seen.gate_in, seen.closed_for or 0.0]
    return delays


async def _steps_async(pacer: Pacer, key: str, status: int, hints: Hints) -> list[float]:
    """The same steps on an event loop (redis.asyncio)."""
    tracker = pacer._store.tracker(key)
    assert isinstance(tracker.cell, RedisCell)
    steps = tracker.steps
    now = pacer.clock()
    admission = await run_async(steps.acquire(now, deadline=now + 10 * MAX_GATE))
    tracker.sent()
    await run_async(steps.observe(status, hints, pacer.clock()))
    await run_async(steps.cohort(pacer.clock()))
    now = pacer.clock()
    again = await run_async(steps.acquire(now, deadline=now + 10 * MAX_GATE))
    tracker.cancel()
    view = tracker.view(pacer.clock())
    return [admission.delay, again.delay, view.gate_in, view.closed_for or 0.0]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@example(  # bytes that are no UTF-8 where the state goes (once an escaping UnicodeDecodeError)
    kind="hash", fields={"s": b"\x80"}, scoped=False, answer=(200, Hints()), driver="sync"
)
@given(
    kind=KIND,
    fields=HASH,
    scoped=st.booleans(),
    answer=ANSWER,
    driver=st.sampled_from(["sync", "sync", "async"]),
)
def test_any_store_contents_keep_the_pacer_within_its_bounds(
    server: RedisServer,
    kind: str,
    fields: dict[str, Any],
    scoped: bool,
    answer: tuple[int, Hints],
    driver: str,
) -> None:
    """No foreign exception, no delay past max_gate, no spin, no other origin touched."""
    client = redis.Redis.from_url(server.url)
    bystander = Pacer(storage=server.url, probe=0)
    bystander.track(OTHER).observe(503, Hints(retry_after=20.0), bystander.clock(), counted=False)
    before = client.hgetall(redis_key(OTHER))
    key = f"{ORIGIN} search" if scoped else ORIGIN
    _plant(client, redis_key(key), kind, fields)

    pacer = Pacer(storage=server.url, probe=0, max_gate=MAX_GATE)
    started = time.monotonic()
    delays: list[float] = []
    with contextlib.suppress(redis.RedisError, SmoothError):  # the only ones allowed out
        if driver == "sync":
            delays = _steps(pacer, key, *answer)
        else:
            delays = asyncio.run(_steps_async(pacer, key, *answer))
    assert max(delays, default=0.0) <= MAX_GATE + 0.01
    assert time.monotonic() - started < 2.0  # no spin against junk it can never match
    assert client.hgetall(redis_key(OTHER)) == before  # the bystander's key: untouched
    assert bystander.view(OTHER).gate_in > 15.0
    client.delete(redis_key(key), redis_key(OTHER))
    for each in (client, _client_of(pacer), _client_of(bystander)):
        each.close()


def _client_of(pacer: Pacer) -> Any:
    tracker = pacer.track(OTHER)
    assert isinstance(tracker.cell, RedisCell)
    return tracker.cell.link.client
