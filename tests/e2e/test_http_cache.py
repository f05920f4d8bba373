"""
HttpCache against a real nginx (Cache-Control, ETag, Last-Modified, 304s) and a real Redis.

nginx serves static files, so its validators and conditional answers are its own; what it
received is read from its access log.  The cache's clock is virtual (started at the real time):
freshness runs out without sleeping.  Skipped where nginx or redis-server is not installed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import requests

from smoothclient import HttpCache, SmoothAdapter, record_of
from smoothclient.aiohttp import SmoothMiddleware
from smoothclient.httpcache.lookup import Fetch, Lookup
from smoothclient.testing import FakeClock
from smoothclient.tools.debian import Unavailable, ensure_nginx
from smoothclient.tools.nginx import conf as nginx_conf
from smoothclient.tools.redis_server import RedisServer, binary

pytestmark = pytest.mark.e2e

_HTTP = """\
    log_format seen '$uri $status';
    server {
        listen 127.0.0.1:%(port)d;
        access_log %(tmp)s/access.log seen;
        root %(tmp)s/www;
        location /fresh/ { add_header Cache-Control "max-age=60"; }
        location /nocache/ { add_header Cache-Control "no-cache"; }
        location /nostore/ { add_header Cache-Control "no-store"; }
        location /swr/ { add_header Cache-Control "max-age=1, stale-while-revalidate=60"; }
        location /heuristic/ { }
    }
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Nginx:
    """A running nginx: its base URL and what it was asked."""

    url: str
    log: Path

    def seen(self) -> Counter[tuple[str, int]]:
        """
        ``(path, status)`` -> how many requests nginx answered so.

        nginx writes a request's log line after its response went out, so a client can be
        ahead of the log: the log is read until it stops growing (for a short while).
        """
        deadline = time.monotonic() + 2.0
        last, still = -1, 0
        while time.monotonic() < deadline:
            size = self.log.stat().st_size if self.log.exists() else 0
            still = still + 1 if size == last else 0
            if still >= 3:
                break
            last = size
            time.sleep(0.02)
        if not self.log.exists():
            return Counter()
        pairs = (line.split() for line in self.log.read_text().splitlines() if line.strip())
        return Counter((path, int(status)) for path, status in pairs)


@pytest.fixture(scope="module")
def nginx() -> Iterator[Nginx]:
    try:  # the system's, else installed from Debian (as root): no manual step
        found = ensure_nginx()
    except Unavailable as exc:
        pytest.skip(str(exc))
    tmp = Path(tempfile.mkdtemp(prefix="smoothclient-nginx-"))
    www = tmp / "www"
    for folder in ("fresh", "nocache", "nostore", "swr", "heuristic"):
        (www / folder).mkdir(parents=True)
        for name in ("a", "b", "c", "d", "e"):
            (www / folder / name).write_text(f"{folder}/{name}\n")
    old = time.time() - 1000  # a heuristic lifetime of 100 s
    os.utime(www / "heuristic" / "a", (old, old))
    port = _free_port()
    (tmp / "nginx.conf").write_text(nginx_conf(tmp, _HTTP % {"tmp": tmp, "port": port}))
    process = subprocess.Popen(
        [found, "-p", str(tmp), "-c", str(tmp / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        else:
            pytest.skip("nginx did not start")
        yield Nginx(f"http://127.0.0.1:{port}", tmp / "access.log")
    finally:
        process.terminate()
        process.wait(5)
        shutil.rmtree(tmp, ignore_errors=True)


def session(cache: HttpCache) -> requests.Session:
    s = requests.Session()
    s.mount("http://", SmoothAdapter(cache=cache))
    return s


def labels(s: requests.Session, url: str, n: int, clock: FakeClock, step: float) -> list[str]:
    """The cache label of ``n`` GETs of ``url``, ``step`` virtual seconds apart."""
    found = []
    for _ in range(n):
        response = s.get(url)
        response.raise_for_status()
        record = record_of(response)
        assert record is not None
        found.append(str(record.cache))
        clock.advance(step)
    return found


def test_max_age_hits_then_an_etag_revalidation_gets_nginx_s_304(nginx: Nginx) -> None:
    clock = FakeClock(time.time())
    s = session(HttpCache(clock=clock, jitter=0.0, spread=0.0))
    url = f"{nginx.url}/fresh/a"
    assert labels(s, url, 3, clock, 20) == ["miss", "hit", "hit"]
    clock.advance(1)  # 61 s old: stale
    again = s.get(url)
    assert (record_of(again).cache, again.text) == ("revalidated", "fresh/a\n")  # type: ignore[union-attr]
    assert nginx.seen()[("/fresh/a", 200)] == 1
    assert nginx.seen()[("/fresh/a", 304)] == 1


def test_last_modified_gives_a_heuristic_lifetime(nginx: Nginx) -> None:
    clock = FakeClock(time.time())
    s = session(HttpCache(clock=clock, jitter=0.0, spread=0.0))
    url = f"{nginx.url}/heuristic/a"
    assert labels(s, url, 2, clock, 50) == ["miss", "hit"]
    clock.advance(5)  # past 10% of 1000 s
    assert record_of(s.get(url)).cache == "revalidated"  # type: ignore[union-attr]
    assert nginx.seen()[("/heuristic/a", 304)] == 1


def test_no_cache_revalidates_every_use_and_no_store_is_never_stored(nginx: Nginx) -> None:
    clock = FakeClock(time.time())
    s = session(HttpCache(clock=clock))
    assert labels(s, f"{nginx.url}/nocache/a", 3, clock, 0) == [
        "miss",
        "revalidated",
        "revalidated",
    ]
    assert nginx.seen()[("/nocache/a", 304)] == 2
    assert labels(s, f"{nginx.url}/nostore/a", 3, clock, 0) == ["miss"] * 3
    assert nginx.seen()[("/nostore/a", 200)] == 3


def test_stale_while_revalidate_serves_then_refreshes_in_the_background(nginx: Nginx) -> None:
    clock = FakeClock(time.time())
    s = session(HttpCache(clock=clock, jitter=0.0, spread=0.0))
    url = f"{nginx.url}/swr/a"
    s.get(url)
    clock.advance(5)
    assert record_of(s.get(url)).cache == "stale"  # type: ignore[union-attr]
    deadline = time.monotonic() + 5
    while nginx.seen()[("/swr/a", 304)] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert nginx.seen()[("/swr/a", 304)] == 1


def test_a_sqlite_cache_is_shared_by_the_processes_of_a_host(nginx: Nginx, tmp_path: Path) -> None:
    storage = f"sqlite://{tmp_path}/cache.db"
    s = session(HttpCache(storage))
    s.get(f"{nginx.url}/fresh/b")
    child = (
        "import requests, sys; from smoothclient import HttpCache, SmoothAdapter, record_of; "
        "s = requests.Session(); s.mount('http://', SmoothAdapter(cache=HttpCache(sys.argv[1]))); "
        "print(record_of(s.get(sys.argv[2])).cache)"
    )
    out = subprocess.run(
        [sys.executable, "-c", child, storage, f"{nginx.url}/fresh/b"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "hit"
    assert nginx.seen()[("/fresh/b", 200)] == 1


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    if binary() is None:
        pytest.skip("no redis-server")
    with RedisServer() as server:
        yield server.url


def test_a_fleet_on_redis_shares_entries_and_one_revalidation(nginx: Nginx, redis_url: str) -> None:
    clock = FakeClock(time.time())
    a, b = (HttpCache(redis_url, clock=clock, jitter=0.0, spread=0.0) for _ in range(2))
    url = f"{nginx.url}/fresh/c"
    session(a).get(url)
    assert record_of(session(b).get(url)).cache == "hit"  # type: ignore[union-attr]
    clock.advance(61)
    leader = Lookup(a, "GET", url, [])
    assert isinstance(leader.step(), Fetch)  # holds the fleet's lock key
    follower = Lookup(b, "GET", url, [])
    assert type(follower.step()).__name__ == "Wait"
    leader.done()
    assert isinstance(follower.step(), Fetch)
    follower.done()
    assert nginx.seen()[("/fresh/c", 200)] == 1


def test_junk_in_redis_and_a_dead_redis_are_misses(nginx: Nginx) -> None:
    if binary() is None:
        pytest.skip("no redis-server")
    import redis

    with RedisServer() as server:
        cache = HttpCache(server.url)
        s = session(cache)
        url = f"{nginx.url}/fresh/a"
        s.get(url)
        client = redis.Redis.from_url(server.url)
        keys = client.keys("smoothclient:http:r:*")
        assert keys
        for key in keys:
            client.set(key, b"\x00 not an entry")
        assert record_of(s.get(url)).cache == "miss"  # type: ignore[union-attr]
        server.kill()
        response = s.get(url)
        assert response.status_code == 200
        assert record_of(response).cache == "miss"  # type: ignore[union-attr]


async def _aiohttp_labels(
    cache: HttpCache, url: str, n: int, clock: FakeClock, step: float
) -> list[tuple[str, str]]:
    """The cache label and body of ``n`` GETs of ``url`` through the aiohttp edge."""
    found = []
    async with aiohttp.ClientSession(middlewares=(SmoothMiddleware(cache=cache),)) as s:
        for _ in range(n):
            async with s.get(url) as response:
                response.raise_for_status()
                text = await response.text()
                found.append((str(record_of(response).cache), text))  # type: ignore[union-attr]
            clock.advance(step)
    return found


def test_the_aiohttp_edge_hits_then_revalidates_with_nginx_s_304(nginx: Nginx) -> None:
    clock = FakeClock(time.time())
    cache = HttpCache(clock=clock, jitter=0.0, spread=0.0)
    url = f"{nginx.url}/fresh/d"
    found = asyncio.run(_aiohttp_labels(cache, url, 3, clock, 30.5))  # the 3rd at 61 s: stale
    assert found == [(label, "fresh/d\n") for label in ("miss", "hit", "revalidated")]
    assert nginx.seen()[("/fresh/d", 200)] == 1
    assert nginx.seen()[("/fresh/d", 304)] == 1


def test_the_aiohttp_edge_refreshes_stale_while_revalidate_in_a_task(nginx: Nginx) -> None:
    clock = FakeClock(time.time())
    cache = HttpCache(clock=clock, jitter=0.0, spread=0.0)
    url = f"{nginx.url}/swr/d"

    async def main() -> str:
        async with aiohttp.ClientSession(middlewares=(SmoothMiddleware(cache=cache),)) as s:
            async with s.get(url) as first:
                await first.read()
            clock.advance(5)
            async with s.get(url) as stale:
                label = str(record_of(stale).cache)  # type: ignore[union-attr]
                assert await stale.text() == "swr/d\n"
            deadline = time.monotonic() + 5
            while nginx.seen()[("/swr/d", 304)] == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # the task revalidates on this loop
        return label

    assert asyncio.run(main()) == "stale"
    assert nginx.seen()[("/swr/d", 304)] == 1


def test_the_aiohttp_edge_shares_a_redis_cache_with_the_requests_edge(
    nginx: Nginx, redis_url: str
) -> None:
    clock = FakeClock(time.time())
    url = f"{nginx.url}/fresh/e"
    cache = HttpCache(redis_url, clock=clock, jitter=0.0, spread=0.0)
    assert not cache.inline  # its calls run in threads, off the loop
    assert asyncio.run(_aiohttp_labels(cache, url, 1, clock, 0)) == [("miss", "fresh/e\n")]
    deadline = time.monotonic() + 5
    while cache.get(f"GET {url}") is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the write ran behind the call
    other = HttpCache(redis_url, clock=clock, jitter=0.0, spread=0.0)
    assert record_of(session(other).get(url)).cache == "hit"  # type: ignore[union-attr]
    assert asyncio.run(_aiohttp_labels(cache, url, 1, clock, 0)) == [("hit", "fresh/e\n")]
    assert nginx.seen()[("/fresh/e", 200)] == 1
