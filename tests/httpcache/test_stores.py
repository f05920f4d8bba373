"""The stores: bounded, shared where they should be, and a failure or junk is a miss."""

from __future__ import annotations

import itertools
import logging
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smoothclient.httpcache import Entry, HttpCache, MemoryStore, RedisStore, SqliteStore
from smoothclient.httpcache.entry import Junk, decode, encode, index_of
from smoothclient.testing import FakeClock

from .conftest import URL, client, fixed


def entry(key: str = "GET " + URL, body: bytes = b"v1") -> Entry:
    return Entry(key, 200, (("ETag", '"a"'),), body, ("accept",), (None,), 1.0, 60.0, 55.0)


def test_an_entry_survives_its_bytes() -> None:
    e = entry(body=b"\x00\xffbody")
    assert decode(encode(e), e.key) == e


def test_an_index_of_variants_survives_its_bytes() -> None:
    index = index_of("GET " + URL, ("accept", "accept-language"), "0123abcd", 5.0, 120.0)
    assert decode(encode(index), index.key) == index
    assert decode(encode(entry()), entry().key).variants == ""


@given(st.binary(max_size=200))
def test_junk_bytes_never_decode(blob: bytes) -> None:
    with pytest.raises(Junk):
        decode(blob, "GET " + URL)


@pytest.mark.parametrize(
    "blob",
    [
        encode(entry())[:-1],  # a body cut short
        b"SCHC1\x00\x00\x00\x05{bad}",
        b"SCHC1\x00\x00\xff\xff{}",
        b"SCHC1\x00\x00\x00\x02{}",
        encode(entry(key="GET https://other.test/")),
    ],
)
def test_junk_heads_and_other_keys_are_junk(blob: bytes) -> None:
    with pytest.raises(Junk):
        decode(blob, "GET " + URL)


def test_the_memory_store_is_bounded_in_bytes() -> None:
    store = MemoryStore(max_bytes=4000)
    for i in range(10):
        store.put(entry(f"GET {URL}/{i}", b"x" * 1000), 60)
    assert store.currsize <= 4000
    assert store.get(f"GET {URL}/9") is not None
    assert store.get(f"GET {URL}/0") is None
    store.put(entry("GET big", b"x" * 5000), 60)  # larger than the whole store: not kept
    assert store.get("GET big") is None


def test_the_memory_store_forgets_an_entry_when_its_time_is_up() -> None:
    clock = FakeClock(0)
    store = MemoryStore(10_000, clock)
    store.put(entry(), 5)
    clock.advance(4.9)
    assert store.get(entry().key) is not None
    clock.advance(0.1)
    assert store.get(entry().key) is None


def test_the_sqlite_file_is_shared_by_two_caches(tmp_path: Path, wall: FakeClock) -> None:
    """Two caches on one file (two processes of a host): what one stores, the other hits."""
    storage = f"sqlite://{tmp_path}/cache.db"
    a = client(wall, fixed(cache_control="max-age=60"), storage=storage)
    b = client(wall, fixed(cache_control="max-age=60"), storage=storage)
    a.get()
    assert b.get().cache == "hit"
    assert len(b.origin.requests) == 0
    mode = sqlite3.connect(tmp_path / "cache.db").execute("PRAGMA journal_mode").fetchone()
    assert mode == ("wal",)


def test_a_sqlite_claim_holds_for_the_whole_host(tmp_path: Path, wall: FakeClock) -> None:
    """Two caches on one file: while one revalidates a key, the other waits; a lapsed claim goes."""
    storage = f"sqlite://{tmp_path}/cache.db"
    a = client(wall, fixed(cache_control="max-age=10"), storage=storage, lock_timeout=5)
    b = client(wall, fixed(cache_control="max-age=10"), storage=storage, lock_timeout=5)
    assert a.cache.claim("GET " + URL)
    assert not b.cache.claim("GET " + URL)
    a.cache.release("GET " + URL)
    assert b.cache.claim("GET " + URL)
    wall.advance(5)  # b's claim lapses (it never released it)
    assert a.cache.claim("GET " + URL)


def test_sqlite_junk_rows_are_misses(
    tmp_path: Path, wall: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cache.db"
    c = client(wall, fixed(cache_control="max-age=60"), storage=f"sqlite://{path}")
    c.get()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE responses SET blob = ?", (b"junk",))
    with caplog.at_level(logging.DEBUG, "smoothclient.httpcache"):
        assert c.get().cache == "miss"
    assert "a miss" in caplog.text
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE responses SET until = 'x'")
    assert c.get().cache == "miss"


def test_sqlite_sweeps_expired_rows_and_keeps_under_its_bound(tmp_path: Path) -> None:
    clock = FakeClock(0)
    store = SqliteStore(str(tmp_path / "c.db"), max_bytes=20_000, clock=clock)
    for i in range(SqliteStore.SWEEP_EVERY):
        store.put(entry(f"GET {URL}/{i}", b"x" * 1000), 10 if i < 8 else 60)
    clock.advance(11)
    store.sweep()
    conn = sqlite3.connect(tmp_path / "c.db")
    (total,) = conn.execute("SELECT SUM(size) FROM responses").fetchone()
    (rows,) = conn.execute("SELECT COUNT(*) FROM responses").fetchone()
    assert rows < SqliteStore.SWEEP_EVERY - 8
    assert total <= 20_000


class Broken:
    """A store whose every method raises."""

    def get(self, key: str) -> Entry | None:
        raise OSError("disk on fire")

    def put(self, entry: Entry, ttl: float) -> None:
        raise OSError("disk on fire")

    def delete(self, keys: Iterable[str]) -> None:
        raise OSError("disk on fire")

    def claim(self, key: str, ttl: float) -> bool:
        raise OSError("disk on fire")

    def release(self, key: str) -> None:
        raise OSError("disk on fire")

    def close(self) -> None:
        raise OSError("disk on fire")


def test_a_store_that_fails_is_a_miss_never_a_failed_call(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60"), storage=Broken())
    c.cache.STORE_PAUSE = 0.0  # every call tries the store
    assert [c.get().cache for _ in range(3)] == ["miss"] * 3
    assert c.get(method="DELETE").status == 200
    c.cache.close()


class Counted(Broken):
    """A failing store that counts the calls it gets."""

    calls = 0

    def get(self, key: str) -> Entry | None:
        Counted.calls += 1
        raise OSError("timed out")


def test_a_store_that_failed_is_left_alone_for_a_while(wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60"), storage=Counted())
    c.cache.STORE_PAUSE = 3600.0
    assert [c.get().cache for _ in range(5)] == ["miss"] * 5
    assert Counted.calls == 1


class DeadRedis:
    """A redis client whose server is gone."""

    def register_script(self, script: str) -> object:
        return self.set

    def set(self, *args: object, **kw: object) -> object:
        raise ConnectionError("Connection refused")

    get = delete = set

    def close(self) -> None:
        pass


class JunkRedis(DeadRedis):
    """A redis client whose keys hold anything but entries."""

    def set(self, *args: object, **kw: object) -> object:
        return True

    def get(self, *args: object, **kw: object) -> object:
        return b"\x00junk"


@pytest.mark.parametrize("redis", [DeadRedis(), JunkRedis()])
def test_a_redis_that_fails_or_holds_junk_is_a_miss(redis: object, wall: FakeClock) -> None:
    c = client(wall, fixed(cache_control="max-age=60"), storage=redis)
    assert isinstance(c.cache.store, RedisStore)
    assert [c.get().cache for _ in range(2)] == ["miss", "miss"]


def test_importing_the_package_imports_no_store_library() -> None:
    code = (
        "import sys, smoothclient; smoothclient.HttpCache; import smoothclient.httpcache; "
        "print(sorted(m for m in ('sqlite3', 'redis', 'cachetools') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_memory_cache_is_the_default() -> None:
    cache = HttpCache()
    assert isinstance(cache.store, MemoryStore)
    assert "MemoryStore" in repr(cache)


def test_caches_sharing_a_sqlite_file_share_one_sequence_of_first_points(
    tmp_path: Path, wall: FakeClock
) -> None:
    """Two caches on one file number their entries' first points as one: they never collide."""
    path = f"sqlite:///{tmp_path / 'shared.db'}"
    first, second = HttpCache(path, clock=wall), HttpCache(path, clock=wall)
    stores = [first.store, second.store]
    assert all(isinstance(store, SqliteStore) for store in stores)
    tickets = [s.ticket() for s in stores * 2]  # type: ignore[attr-defined]
    assert tickets == [1, 2, 3, 4]
    points = [cache._refresh_point(100.0, first=True) for cache in (first, second) * 10]
    assert all(10.0 <= p <= 100.0 for p in points)
    ordered = sorted([10.0, *points, 100.0])
    assert max(b - a for a, b in itertools.pairwise(ordered)) < 3 * 90 / 20
