"""
Where stored responses live: one small seam, three stores (docs/http-cache.md section 5).

:class:`Store` is the seam: ``get`` an entry by key, ``put`` one for a number of seconds,
``delete`` keys, and ``claim`` / ``release`` the right to revalidate a key.  The memory store
leaves claims to the process (every claim succeeds: :class:`HttpCache` keeps one revalidation
per key in flight in its process); the SQLite store makes them host-wide with a row of a
claims table, the Redis store fleet-wide with a short lock key.  A store may raise anything:
the cache reads a failure as a miss.  A store whose calls never wait on I/O says so with a
true ``inline`` attribute (the memory store): the async edges call it on the event loop, and
any other in a thread.

Each store imports its library only when it is made: ``import smoothclient`` imports none.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from .entry import Entry, Junk, decode, encode

__all__ = ["MemoryStore", "RedisStore", "SqliteStore", "Store", "open_store"]


@runtime_checkable
class Store(Protocol):
    """The storage seam of :class:`~smoothclient.httpcache.HttpCache`."""

    def get(self, key: str) -> Entry | None:
        """The entry stored under ``key`` (``None``: none); may raise (a miss)."""

    def put(self, entry: Entry, ttl: float) -> None:
        """Store ``entry`` under its key for ``ttl`` seconds (a store may drop it sooner)."""

    def delete(self, keys: Iterable[str]) -> None:
        """Forget ``keys``."""

    def claim(self, key: str, ttl: float) -> bool:
        """Take the right to revalidate ``key`` for at most ``ttl`` seconds; ``False``: taken."""

    def release(self, key: str) -> None:
        """Give back a claim on ``key`` this store granted."""

    def close(self) -> None:
        """Release connections."""


class MemoryStore:
    """
    Entries in this process, least recently used dropped first, bounded in bytes.

    A ``cachetools.LRUCache`` sized by each entry's :attr:`~Entry.size`: an entry larger than
    the whole store is not kept.  Entries are kept as objects (no encoding on a hit).
    """

    #: Its calls never wait on I/O: the async edges make them on the event loop.
    inline = True

    def __init__(self, max_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        """An empty store of at most ``max_bytes``."""
        import cachetools

        self._data: cachetools.LRUCache[str, tuple[Entry, float]] = cachetools.LRUCache(
            max_bytes, getsizeof=lambda item: item[0].size
        )
        self._lock = threading.Lock()
        self._clock = clock

    def get(self, key: str) -> Entry | None:
        """The entry under ``key`` while its time lasts."""
        with self._lock:
            found = self._data.get(key)
            if found is None:
                return None
            entry, until = found
            if self._clock() >= until:
                del self._data[key]
                return None
            return entry

    def put(self, entry: Entry, ttl: float) -> None:
        """Keep ``entry`` for ``ttl`` seconds (not at all if it is larger than the store)."""
        with self._lock, contextlib.suppress(ValueError):
            self._data[entry.key] = (entry, self._clock() + ttl)

    def delete(self, keys: Iterable[str]) -> None:
        """Forget ``keys``."""
        with self._lock:
            for key in keys:
                self._data.pop(key, None)

    def claim(self, key: str, ttl: float) -> bool:
        """Always granted: the process's flights are the claim."""
        return True

    def release(self, key: str) -> None:
        """Nothing to release."""

    def close(self) -> None:
        """Nothing to close."""

    @property
    def currsize(self) -> float:
        """Bytes held."""
        return self._data.currsize


class SqliteStore:
    """
    Entries in one SQLite file the processes of a host share, and their claims.

    WAL journal (readers never wait for a writer), a busy timeout, one connection per thread;
    expired rows and, past ``max_bytes``, the oldest are deleted every ``SWEEP_EVERY`` writes.
    A claim is a row of the ``claims`` table (``INSERT OR IGNORE``): one revalidation per key
    on the host.
    """

    SWEEP_EVERY = 64
    BUSY_MS = 2000

    def __init__(self, path: str, max_bytes: int, clock: Callable[[], float] = time.time) -> None:
        """Open (or create) the file at ``path``."""
        import sqlite3

        self._sqlite = sqlite3
        self.path = path
        self.max_bytes = max_bytes
        self._clock = clock
        self._local = threading.local()
        self._writes = 0
        self._token = uuid.uuid4().hex
        conn = self._conn()
        conn.execute(
            "CREATE TABLE IF NOT EXISTS responses "
            "(key TEXT PRIMARY KEY, blob BLOB NOT NULL, until REAL NOT NULL, size INTEGER NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS claims "
            "(key TEXT PRIMARY KEY, owner TEXT NOT NULL, until REAL NOT NULL)"
        )
        conn.execute("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, n INTEGER)")

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():  # never share one across a fork
            conn = self._sqlite.connect(
                self.path,
                timeout=self.BUSY_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout={self.BUSY_MS}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def get(self, key: str) -> Entry | None:
        """The entry under ``key`` while its time lasts (junk raises: a miss)."""
        row = (
            self._conn()
            .execute("SELECT blob, until FROM responses WHERE key = ?", (key,))
            .fetchone()
        )
        if row is None or not isinstance(row[1], int | float) or self._clock() >= row[1]:
            return None
        return decode(row[0], key)

    def put(self, entry: Entry, ttl: float) -> None:
        """Keep ``entry`` for ``ttl`` seconds."""
        blob = encode(entry)
        self._conn().execute(
            "INSERT OR REPLACE INTO responses (key, blob, until, size) VALUES (?, ?, ?, ?)",
            (entry.key, blob, self._clock() + ttl, len(blob)),
        )
        self._writes += 1
        if self._writes % self.SWEEP_EVERY == 0:
            self.sweep()

    def sweep(self) -> None:
        """Delete expired rows, then the oldest until the file holds at most ``max_bytes``."""
        conn = self._conn()
        conn.execute("DELETE FROM responses WHERE until <= ?", (self._clock(),))
        conn.execute("DELETE FROM claims WHERE until <= ?", (self._clock(),))
        for _ in range(16):  # the soonest to expire first, a quarter at a time
            (total,) = conn.execute("SELECT COALESCE(SUM(size), 0) FROM responses").fetchone()
            if total <= self.max_bytes:
                return
            conn.execute(
                "DELETE FROM responses WHERE key IN (SELECT key FROM responses ORDER BY until "
                "LIMIT (SELECT COUNT(*) / 4 + 1 FROM responses))"
            )

    def delete(self, keys: Iterable[str]) -> None:
        """Forget ``keys``."""
        self._conn().executemany("DELETE FROM responses WHERE key = ?", [(k,) for k in keys])

    def ticket(self) -> int:
        """The next number of the sequence the host's caches share (first refresh points)."""
        row = (
            self._conn()
            .execute(
                "INSERT INTO counters (name, n) VALUES ('first', 1) "
                "ON CONFLICT (name) DO UPDATE SET n = n + 1 RETURNING n"
            )
            .fetchone()
        )
        return int(row[0])

    def claim(self, key: str, ttl: float) -> bool:
        """A row of ``claims`` for ``key`` (one lapsed is taken over): the host's one flight."""
        conn, now = self._conn(), self._clock()
        conn.execute("DELETE FROM claims WHERE key = ? AND until <= ?", (key, now))
        taken = conn.execute(
            "INSERT OR IGNORE INTO claims (key, owner, until) VALUES (?, ?, ?)",
            (key, self._owner(), now + ttl),
        )
        return bool(taken.rowcount == 1)

    def release(self, key: str) -> None:
        """Delete this process's claim on ``key``."""
        self._conn().execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self._owner()))

    def _owner(self) -> str:
        """Who holds this store's claims: it, in this process (a fork is another owner)."""
        return f"{self._token}-{os.getpid()}"

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisStore:
    """
    Entries in Redis, shared by a fleet; claims are lock keys, so one revalidation per key.

    Each entry is one string key (``PREFIX`` + a hash of the cache key) that Redis expires when
    the cache no longer needs it; a claim is ``SET lock NX PX`` with a token of this process,
    released only by its owner.  Timeouts are short: a slow Redis is a miss.
    """

    PREFIX = "smoothclient:http:"

    def __init__(self, client: Any) -> None:
        """Use ``client`` (a ``redis.Redis``; see :meth:`from_url`)."""
        self.client = client
        self._token = uuid.uuid4().hex.encode()
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_url(cls, url: str, timeout: float = 0.5) -> RedisStore:
        """A store on a new client of ``url`` (``redis://``, ``rediss://``, ``unix://``)."""
        import redis

        client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, health_check_interval=30
        )
        return cls(client)

    def _name(self, key: str, kind: str = "r:") -> str:
        return self.PREFIX + kind + hashlib.sha256(key.encode()).hexdigest()[:40]

    def get(self, key: str) -> Entry | None:
        """The entry under ``key`` (junk raises: a miss; a key of another type is junk too)."""
        try:
            blob = self.client.get(self._name(key))
        except Exception as exc:
            if str(exc).startswith("WRONGTYPE"):  # a reply about the key, not Redis failing
                raise Junk("a key of another type") from exc
            raise
        return None if blob is None else decode(blob, key)

    def put(self, entry: Entry, ttl: float) -> None:
        """Keep ``entry`` for ``ttl`` seconds (whole milliseconds, at least one)."""
        self.client.set(self._name(entry.key), encode(entry), px=max(1, int(ttl * 1000)))

    def delete(self, keys: Iterable[str]) -> None:
        """Forget ``keys``."""
        names = [self._name(k) for k in keys]
        if names:
            self.client.delete(*names)

    def ticket(self) -> int:
        """The next number of the sequence the fleet's caches share (first refresh points)."""
        return int(self.client.incr(self.PREFIX + "first"))

    def claim(self, key: str, ttl: float) -> bool:
        """``SET lock token NX PX ttl``: whether this process now holds it."""
        return bool(
            self.client.set(self._name(key, "l:"), self._token, nx=True, px=max(1, int(ttl * 1000)))
        )

    def release(self, key: str) -> None:
        """Delete the lock key if this process still holds it."""
        self._release(keys=[self._name(key, "l:")], args=[self._token])

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()


def open_store(storage: object, max_bytes: int, clock: Callable[[], float] = time.time) -> Store:
    """
    The store ``storage`` names.

    ``"memory://"``, ``"sqlite:///abs/path.db"`` (the path after ``sqlite://``, as in a
    ``file://`` URL), ``"redis://..."`` (``rediss://``, ``unix://``), a redis client, or a
    :class:`Store`.
    """
    if isinstance(storage, str):
        if storage == "memory://":
            return MemoryStore(max_bytes, clock)
        if storage.startswith("sqlite://"):
            path = storage.removeprefix("sqlite://")
            if path in ("", "/"):
                msg = "sqlite storage needs a path: sqlite:///path/to/cache.db"
                raise ValueError(msg)
            return SqliteStore(path, max_bytes, clock)
        if storage.startswith(("redis://", "rediss://", "unix://")):
            return RedisStore.from_url(storage)
        raise ValueError(_WHAT_STORAGE + f", not {storage!r}")
    if hasattr(storage, "register_script") and hasattr(storage, "set"):
        return RedisStore(storage)
    if isinstance(storage, Store):
        return storage
    raise TypeError(_WHAT_STORAGE + f", not {type(storage).__name__}")


_WHAT_STORAGE = (
    "storage must be 'memory://', 'sqlite:///path', 'redis://...', a redis client or a Store"
)
