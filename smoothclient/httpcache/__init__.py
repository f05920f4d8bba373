"""
An HTTP response cache whose entries never expire together (docs/http-cache.md).

:class:`HttpCache` is the configured cache every edge takes (``cache=``); ``rules`` holds the
RFC 9111 / RFC 5861 rules as pure functions, ``stores`` the storage seam and its three stores.
Importing this package imports neither ``sqlite3`` nor ``redis``: a store imports its library
when it is made.
"""

from __future__ import annotations

from .cache import HttpCache
from .entry import Entry
from .lookup import Lookup
from .stores import MemoryStore, RedisStore, SqliteStore, Store

__all__ = ["Entry", "HttpCache", "Lookup", "MemoryStore", "RedisStore", "SqliteStore", "Store"]
