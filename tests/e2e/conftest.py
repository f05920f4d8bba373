"""Fixtures of the end-to-end tests: a real ``redis-server`` on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from smoothclient.tools.redis_server import RedisServer, binary


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A fresh ``redis-server`` for one test (skipped where none can be found or installed)."""
    if binary("redis") is None:
        pytest.skip("no redis-server")
    with RedisServer() as running:
        yield running
