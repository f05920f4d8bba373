"""
Stored entries are input (issue 37): what a fuzzing campaign found in a shared store's bytes.

An entry written by anything but the cache (another version, an operator, a bug) reads as a
miss, never as an error out of the call nor as a store that failed (which the cache then
leaves alone for a while, so nothing is cached meanwhile); so does a Redis key of another type.
"""

from __future__ import annotations

import json
import math
import sqlite3
import struct
from pathlib import Path
from typing import Any

import pytest

from smoothclient.httpcache import RedisStore
from smoothclient.httpcache.entry import MAGIC, Junk, decode, encode
from smoothclient.testing import FakeClock
from smoothclient.tools.redis_server import RedisServer, binary

from .conftest import URL, Resp, client

KEY = "GET " + URL


def _blob(**head: Any) -> bytes:
    """An entry's bytes for ``KEY``, with ``head`` over a valid head."""
    fields: dict[str, Any] = {
        "k": KEY,
        "s": 200,
        "h": [["Cache-Control", "max-age=60"]],
        "v": [],
        "x": [],
        "b": 0,
        "l": 60,
        "r": 55,
        "rv": False,
        "st": False,
        "w": 0,
        "e": 0,
        "d": 0,
        "n": 2,
    }
    fields.update(head)
    raw = json.dumps(fields).encode()
    return MAGIC + struct.pack(">I", len(raw)) + raw + b"v1"


def _raw_blob(raw: bytes) -> bytes:
    return MAGIC + struct.pack(">I", len(raw)) + raw + b"v1"


def _planted(tmp_path: Path, wall: FakeClock, blob: bytes, statuses: list[int]) -> Any:
    """A client on a SQLite store whose entry for ``KEY`` holds ``blob``; the origin's answers."""
    answers = iter(statuses)

    def handler(_: object) -> Resp:
        return Resp(next(answers), [("Cache-Control", "max-age=60")], b"xy")

    path = tmp_path / "cache.db"
    c = client(wall, handler, storage=f"sqlite://{path}")
    assert c.get().cache == "miss"  # stored, then replaced by the junk
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE responses SET blob = ?", (blob,))
    return c


INFINITE = {"b": -math.inf, "l": math.inf, "e": math.inf}


def test_an_entry_born_at_minus_infinity_is_a_miss_not_an_overflow(
    tmp_path: Path, wall: FakeClock
) -> None:
    """
    Born at -Infinity with infinite stale-if-error: a 503 made it stand in, and its Age
    (``int(now - born)``) raised OverflowError out of the call.
    """
    c = _planted(tmp_path, wall, _blob(**INFINITE), [200, 503])
    response = c.get()
    assert (response.status, response.cache) == (503, "miss")


@pytest.mark.parametrize(
    "blob",
    [
        _raw_blob(b"[" * 100_000 + b"]" * 100_000),  # RecursionError in json.loads
        _blob(b=int("1" + "0" * 400)),  # OverflowError in float()
    ],
    ids=["head-nested-deep", "born-of-400-digits"],
)
def test_junk_that_raised_is_junk_not_a_store_that_failed(
    blob: bytes, tmp_path: Path, wall: FakeClock
) -> None:
    """
    Once a failed store: the cache left it alone (``STORE_PAUSE``), so the fresh answer
    fetched on the miss was not stored and the next call missed too.
    """
    with pytest.raises(Junk):
        decode(blob, KEY)
    c = _planted(tmp_path, wall, blob, [200, 200])
    assert [c.get().cache for _ in range(2)] == ["miss", "hit"]


@pytest.mark.parametrize(
    "head",
    [
        {"s": 2**70},  # a status of no three digits
        {"s": -1},
        {"l": math.inf},
        {"w": -math.inf},
        {"d": 10**400},
    ],
)
def test_out_of_range_fields_are_junk(head: dict[str, Any]) -> None:
    with pytest.raises(Junk):
        decode(_blob(**head), KEY)
    decode(_blob(), KEY)  # (the head they replace reads)


def test_an_age_past_2_to_the_31_is_sent_as_that(tmp_path: Path, wall: FakeClock) -> None:
    """RFC 9111 section 1.2.2: an Age of 309 digits (born at -1e308) is sent as 2147483648."""
    c = _planted(tmp_path, wall, _blob(b=-1e308, e=1e308), [200, 503])
    response = c.get()
    assert (response.status, response.cache) == (200, "stale")
    assert dict(response.headers)["Age"] == str(2**31)
    entry = decode(_blob(), KEY)
    assert decode(encode(entry), KEY) == entry


@pytest.mark.e2e
@pytest.mark.skipif(binary() is None, reason="no redis-server")
@pytest.mark.parametrize("kind", ["hash", "list"])
def test_a_redis_key_of_another_type_is_a_miss_not_a_failed_store(
    kind: str, wall: FakeClock
) -> None:
    """
    A hash where an entry's string goes: WRONGTYPE read as Redis failing, so the cache left
    the store alone and nothing was cached (this URL nor any other) for STORE_PAUSE.
    """
    redis = pytest.importorskip("redis")
    with RedisServer() as server:
        admin = redis.Redis.from_url(server.url)
        store = RedisStore.from_url(server.url)
        name = store._name(KEY)
        if kind == "hash":
            admin.hset(name, "a", "b")
        else:
            admin.rpush(name, "a")
        c = client(
            wall, lambda _: Resp(200, [("Cache-Control", "max-age=60")], b"xy"), storage=store
        )
        c.cache.STORE_PAUSE = 3600.0
        assert [c.get().cache for _ in range(2)] == ["miss", "hit"]  # (the SET replaced it)
        assert [c.get(URL + "?b").cache for _ in range(2)] == ["miss", "hit"]
        store.close()
        admin.close()
