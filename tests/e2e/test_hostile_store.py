"""A shared store is input too: junk in Redis never raises, spins, or closes an origin."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from smoothclient import Pacer
from smoothclient.hints import Hints
from smoothclient.pacing.codec import dump, load
from smoothclient.pacing.redis.tracker import redis_key
from smoothclient.pacing.state import OriginState
from smoothclient.tools.redis_server import RedisServer, binary

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(binary() is None, reason="no redis-server"),
]
redis = pytest.importorskip("redis")

ORIGIN = "https://api.test:443"
KEY = redis_key(ORIGIN)
FAR = 10**12


@pytest.fixture(scope="module", params=["redis", "valkey"])
def server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A real server of each kind the store runs on: Redis, and Valkey where installed."""
    if binary(request.param) is None:
        pytest.skip(f"no {request.param}-server")
    with RedisServer(server=request.param) as running:
        yield running


def _state(**fields: Any) -> str:
    data = json.loads(dump(OriginState()))
    data.update(fields)
    return json.dumps(data)


JUNK: dict[str, Callable[[Any], None]] = {
    "version not a number": lambda r: r.hset(KEY, mapping={"v": "abc", "s": _state()}),
    "version 1.5": lambda r: r.hset(KEY, mapping={"v": "1.5", "s": _state()}),
    "version negative": lambda r: r.hset(KEY, mapping={"v": "-3", "s": _state()}),
    "a string key": lambda r: r.set(KEY, "junk"),
    "a list key": lambda r: r.lpush(KEY, "a", "b"),
    "a field of the wrong type": lambda r: r.hset(KEY, mapping={"v": 1, "s": _state(gate="x")}),
    "a bool where a number goes": lambda r: r.hset(KEY, mapping={"v": 1, "s": _state(gate=True)}),
    "a kind unheard of": lambda r: r.hset(KEY, mapping={"v": 1, "s": _state(kind="wild")}),
    "deep JSON": lambda r: r.hset(KEY, mapping={"v": 1, "s": "[" * 200_000 + "]" * 200_000}),
    "not JSON": lambda r: r.hset(KEY, mapping={"v": 1, "s": "\xff{"}),
    "a gate far ahead": lambda r: r.hset(KEY, mapping={"v": 1, "s": _state(gate=FAR)}),
    "a gate of Infinity": lambda r: r.hset(KEY, mapping={"v": 1, "s": '{"gate": Infinity}'}),
    "a slot owed far ahead": lambda r: r.hset(
        KEY, mapping={"v": 1, "s": _state(pace=[1.0, FAR, 1.0])}
    ),
    "a cohort from the future": lambda r: r.hset(
        KEY, mapping={"v": 1, "s": _state(), "c": json.dumps({"x": [10**6, 10**6, FAR]})}
    ),
    "a cohort of junk": lambda r: r.hset(KEY, mapping={"v": 1, "s": _state(), "c": "[1,"}),
    # once RecursionError out of json.loads, and OverflowError out of math.isfinite (issue 37)
    "a cohort nested deep": lambda r: r.hset(
        KEY, mapping={"v": 1, "s": _state(), "c": "[" * 200_000 + "]" * 200_000}
    ),
    "a cohort of a 400-digit count": lambda r: r.hset(
        KEY, mapping={"v": 1, "s": _state(), "c": '{"x": [1, ' + "9" * 400 + ", 1]}"}
    ),
    "an outage of junk": lambda r: r.hset(KEY, mapping={"v": 1, "s": _state(outage=[1, "x"])}),
}


@pytest.mark.parametrize("junk", sorted(JUNK))
def test_junk_in_the_store_is_a_fresh_state_never_an_error(server: RedisServer, junk: str) -> None:
    """A call's steps go on at once, admitted at once: the junk is neither obeyed nor raised."""
    client = redis.Redis.from_url(server.url)
    client.delete(KEY)
    JUNK[junk](client)
    pacer = Pacer(storage=server.url, probe=0, max_gate=60)
    tracker = pacer.track(ORIGIN)
    started = time.monotonic()
    now = pacer.clock()
    admission = tracker.acquire(now, deadline=now + 120)
    assert admission.granted
    assert admission.delay <= 60  # never past max_gate
    tracker.sent()
    tracker.observe(200, Hints(), pacer.clock())
    assert time.monotonic() - started < 1.0  # no spin against a version it can never match
    again = tracker.acquire(pacer.clock(), deadline=pacer.clock() + 120)
    assert again.delay <= 60
    other = Pacer(storage=server.url, probe=0).track("https://other.test:443")
    other_now = pacer.clock()
    assert other.acquire(other_now, deadline=other_now + 1).granted  # no other origin touched
    client.delete(KEY)


def test_the_codec_takes_junk_as_a_fresh_state() -> None:
    """Every field checked for its type; anything else is a fresh state, not an exception."""
    for text in (_state(gate="x"), _state(learned=1), _state(waiting=None), '{"cut": ["a"]}'):
        assert load(text) == OriginState()
    assert load(_state(gate=5.0)).gate == 5.0
