"""The Redis store on a master that a real Redis Sentinel names (both started here)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from smoothclient import Pacer
from smoothclient.hints import Hints
from smoothclient.pacing.redis.store import RedisCell
from smoothclient.pacing.steps import run_async
from smoothclient.tools.redis_server import RedisServer, binary, sentinel

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(binary() is None, reason="no redis-server"),
]
redis = pytest.importorskip("redis")
from redis.asyncio.sentinel import Sentinel as AsyncSentinel  # noqa: E402
from redis.sentinel import Sentinel  # noqa: E402

ORIGIN = "https://api.test:443"


@pytest.fixture
def servers() -> Iterator[tuple[RedisServer, RedisServer]]:
    with RedisServer() as master, sentinel(master) as watching:
        yield master, watching


def test_a_sentinel_url_paces_on_the_master_it_names(
    servers: tuple[RedisServer, RedisServer],
) -> None:
    """Shared with a pacer on the master's own URL, sync steps and a loop's alike."""
    master, watching = servers
    by_sentinel = Pacer(storage=f"redis+sentinel://127.0.0.1:{watching.port}/mymaster", probe=0)
    direct = Pacer(storage=master.url, probe=0)
    by_sentinel.track(ORIGIN).observe(
        503, Hints(retry_after=2.0), by_sentinel.clock(), counted=False
    )
    assert direct.view(ORIGIN).gate_in == pytest.approx(2.0, abs=0.1)
    tracker = by_sentinel.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)

    async def on_a_loop() -> float:
        gate = await run_async(tracker.steps.read(lambda o: o.gate, fresh=True))
        return float(gate - by_sentinel.clock())

    assert asyncio.run(on_a_loop()) == pytest.approx(2.0, abs=0.2)
    assert tracker.cell.link.up
    assert tracker.cell.link.failures == 0


def test_clients_from_master_for_are_accepted(servers: tuple[RedisServer, RedisServer]) -> None:
    """A sync one: each loop gets an asyncio one from the same Sentinels; and the reverse."""
    master, watching = servers
    Pacer(storage=master.url, probe=0).track(ORIGIN).observe(
        503, Hints(retry_after=2.0), time.time(), counted=False
    )
    sentinels = Sentinel([("127.0.0.1", watching.port)])  # type: ignore[no-untyped-call]
    client = sentinels.master_for("mymaster")  # type: ignore[no-untyped-call]
    by_client = Pacer(storage=client, probe=0)

    async def read(pacer: Pacer) -> float:
        tracker = pacer.track(ORIGIN)
        assert isinstance(tracker.cell, RedisCell)
        gate = await run_async(tracker.steps.read(lambda o: o.gate, fresh=True))
        assert tracker.cell.link.failures == 0
        return float(gate - pacer.clock())

    assert asyncio.run(read(by_client)) == pytest.approx(2.0, abs=0.2)

    async def given_async() -> float:
        found = AsyncSentinel([("127.0.0.1", watching.port)])  # type: ignore[no-untyped-call]
        twin = found.master_for("mymaster")
        pacer = Pacer(storage=twin, probe=0)
        assert pacer.view(ORIGIN).gate_in > 1.5  # sync steps: a client from the same Sentinels
        seen = await read(pacer)
        made = pacer.track(ORIGIN).cell.link.client  # type: ignore[attr-defined]  # sync steps'
        for each in (made, *made.connection_pool.sentinel_manager.sentinels):  # (never closed)
            each.close()
        await twin.aclose()
        for each in found.sentinels:
            await each.aclose()
        return seen

    assert asyncio.run(given_async()) == pytest.approx(2.0, abs=0.2)
    client.close()
    for each in sentinels.sentinels:
        each.close()


def test_a_master_gone_fails_open(servers: tuple[RedisServer, RedisServer]) -> None:
    master, watching = servers
    pacer = Pacer(storage=f"redis+sentinel://127.0.0.1:{watching.port}/mymaster", probe=0)
    tracker = pacer.track(ORIGIN)
    tracker.observe(503, Hints(retry_after=2.0), pacer.clock(), counted=False)
    master.kill()
    started = time.monotonic()
    tracker.read(lambda o: None, fresh=True)  # a round trip: to the master Sentinel names
    now = pacer.clock()
    admission = tracker.acquire(now, deadline=now + 10)
    assert time.monotonic() - started < 0.5
    assert isinstance(tracker.cell, RedisCell)
    assert not tracker.cell.link.up  # the master's death seen
    assert admission.delay > 1.5  # from memory: the gate it saw last


def test_a_sentinel_url_names_its_service() -> None:
    with pytest.raises(ValueError, match="service"):
        Pacer(storage="redis+sentinel://127.0.0.1:26379")
