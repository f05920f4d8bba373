"""
Keys of pacing state: the origin of a request, and a bounded LRU map of per-key state.

An origin is ``scheme://host:port`` with the default port filled in, the same through every
edge (httpx gives the IDNA host, requests the one in the URL; IPv6 literals are bracketed).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LruMap", "origin_key"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@functools.lru_cache(maxsize=1024)
def origin_key(scheme: str, host: str | bytes, port: int | None) -> str:
    """``scheme://host:port`` with the default port filled in: the pacer's origin key."""
    if isinstance(host, bytes):  # httpx's raw_host: the ASCII (IDNA) form, cheaper to get
        host = host.decode("latin-1")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal, bracketed as in a URL (as urllib3 gives it)
    scheme = scheme.lower()
    if port is None:
        port = 443 if scheme in ("https", "wss") else 80
    return f"{scheme}://{host.lower()}:{port}"


class LruMap(Generic[K, V]):
    """
    A thread-safe map of at most ``limit`` entries, each made on first use.

    The least recently used are forgotten first.

    :meth:`peek` is a lock-free read (a dict read is atomic), for hot paths that only look.
    """

    __slots__ = ("_data", "_factory", "_lock", "limit", "peek")

    def __init__(self, limit: int, factory: Callable[[K], V]) -> None:
        """Keep at most ``limit`` entries; ``factory(key)`` makes a missing one."""
        self.limit = limit
        self._factory = factory
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        #: The entry of a key if there is one, without marking it used (``dict.get`` itself:
        #: lock-free, a dict read is atomic).
        self.peek: Callable[[K], V | None] = self._data.get

    def forked(self) -> None:
        """A fresh lock, in a child just forked (another thread may have held this one)."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many entries are kept."""
        return len(self._data)

    def get(self, key: K) -> V:
        """The entry of ``key`` (made if missing), marked most recently used."""
        with self._lock:
            value = self._data.get(key)
            if value is None:
                value = self._data[key] = self._factory(key)
                while len(self._data) > self.limit:
                    self._data.popitem(last=False)
            else:
                self._data.move_to_end(key)
            return value

    def pop(self, key: K) -> None:
        """Forget ``key`` (nothing if it is not kept)."""
        with self._lock:
            self._data.pop(key, None)

    def put(self, key: K, value: V) -> None:
        """Set ``key`` to ``value``, marked most recently used."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.limit:
                self._data.popitem(last=False)

    def keys(self) -> list[K]:
        """The keys, least recently used first."""
        with self._lock:
            return list(self._data)
