"""
The Redis store on a real Redis Cluster: three masters, no replicas, started here.

One cluster is shared by the module's tests that break nothing; each test that kills a master
has a cluster of its own.  All of them start together (a node waits two seconds after it
starts before it serves), so the module pays for one start.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import itertools
import logging
import pickle
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from smoothclient import AsyncSmoothTransport, Pacer, RetryPolicy, SmoothTransport
from smoothclient.hints import Hints
from smoothclient.pacing.keys import origin_key
from smoothclient.pacing.redis.link import Link, parse_cluster_url
from smoothclient.pacing.redis.store import RedisTracker, redis_key
from smoothclient.pacing.store import run_async
from smoothclient.tools.redis_server import RedisCluster, RedisServer, binary, cli
from smoothclient.tools.server import LimitedServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(binary() is None or cli() is None, reason="no redis-server or redis-cli"),
]
redis = pytest.importorskip("redis")
from redis.cluster import ClusterNode  # noqa: E402
from redis.cluster import RedisCluster as ClusterClient  # noqa: E402

#: the clusters of the module: one shared, one for each test that kills a master
ROLES = ("shared", "sync herd", "async herd")


@pytest.fixture(scope="module")
def clusters() -> Iterator[dict[str, RedisCluster]]:
    made = {role: RedisCluster() for role in ROLES}
    with concurrent.futures.ThreadPoolExecutor(len(made)) as pool:
        started = {role: pool.submit(c.start) for role, c in made.items()}
        errors = [f.exception() for f in started.values()]
    try:
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            pytest.skip(f"no Redis Cluster could be formed here: {failed}")
        yield made
    finally:
        for c in made.values():
            c.__exit__()


@pytest.fixture(autouse=True)
def _leaks_of_redis_py() -> Iterator[None]:
    """
    redis-py's cluster clients leave the connections of a node that left their table (a
    master killed, a startup node the table from CLUSTER SLOTS replaced) unclosed: collected
    here, their ResourceWarnings ignored, rather than raised at the end of the session.
    """
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture
def cluster(clusters: dict[str, RedisCluster]) -> RedisCluster:
    return clusters["shared"]


def fleet(cluster: RedisCluster, n: int = 2, **kw: Any) -> list[Pacer]:
    return [Pacer(storage=cluster.url, probe=0, **kw) for _ in range(n)]


def origins_on_every_node(cluster: RedisCluster) -> dict[int, str]:
    """An origin whose key lives on each master: port -> origin."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < len(cluster.nodes):
        origin = f"https://api{n}.test:443"
        found.setdefault(cluster.node_of(redis_key(origin)).port, origin)
        n += 1
    return found


def client_of(cluster: RedisCluster) -> Any:
    nodes = [ClusterNode("127.0.0.1", n.port) for n in cluster.nodes]  # type: ignore[no-untyped-call]
    return ClusterClient(startup_nodes=nodes)


def test_the_url_names_every_node_and_its_credentials() -> None:
    nodes, kwargs = parse_cluster_url("rediss+cluster://me:s%40cret@a:7000,[::1]:7001/0")
    assert nodes == [("a", 7000), ("::1", 7001)]
    assert kwargs == {"username": "me", "password": "s@cret", "ssl": True}
    with pytest.raises(ValueError, match="host:port"):
        parse_cluster_url("redis+cluster://a,b:7000")
    with pytest.raises(ValueError, match="at least one node"):
        Pacer(storage="redis+cluster://")


def test_a_gate_closes_its_origin_for_the_fleet_on_every_master(cluster: RedisCluster) -> None:
    """Origins whose keys live on each of the three masters: each shared, none moved."""
    a, b = fleet(cluster)
    for origin in origins_on_every_node(cluster).values():
        a.track(origin).observe(503, Hints(retry_after=2.0), a.clock(), counted=False)
        assert b.view(origin).gate_in == pytest.approx(2.0, abs=0.1)
        assert b.track(origin).acquire(b.clock()).delay > 1.5
    for pacer in (a, b):
        link = pacer.track("https://api0.test:443").link  # type: ignore[attr-defined]
        assert link.up
        assert link.failures == 0  # no step failed over to memory (a MovedError would)


def test_an_origins_scopes_live_in_its_slot(cluster: RedisCluster) -> None:
    """A scope's key and its origin's hash to one slot: one node holds both, a script each."""
    (pacer,) = fleet(cluster, 1)
    origin = "https://api1.test:443"
    for key in (origin, f"{origin} search"):
        pacer._store.tracker(key).observe(503, Hints(retry_after=5.0), pacer.clock(), counted=False)
    client = client_of(cluster)
    slots = {client.keyslot(redis_key(k)) for k in (origin, f"{origin} search")}
    assert len(slots) == 1
    node = cluster.node_of(redis_key(origin))
    for key in (origin, f"{origin} search"):
        assert node.ask("EXISTS", redis_key(key)) == b":1\r\n"  # written on the node itself
    client.close()


def test_slots_are_never_given_twice_across_the_fleet(cluster: RedisCluster) -> None:
    """Three processes, three threads each, one paced origin on the cluster: slots distinct."""
    origin = "https://api2.test:443"
    pacers = fleet(cluster, 3)
    spent = Hints(remaining=0, limit=500, window=10, reset_after=10)  # 50 req/s, spent
    pacers[0].track(origin).observe(200, spent, pacers[0].clock(), counted=False)
    slots: list[float] = []
    lock = threading.Lock()

    def take(pacer: Pacer) -> None:
        tracker = pacer.track(origin)
        for _ in range(4):
            now = pacer.clock()
            admission = tracker.acquire(now, deadline=now + 60)
            while not admission.final:
                now = pacer.clock()
                admission = tracker.acquire(
                    now, not_before=now + admission.delay, deadline=now + 60
                )
            with lock:
                slots.append(now + admission.delay)
            tracker.cancel()

    threads = [threading.Thread(target=take, args=(p,)) for p in pacers for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    slots.sort()
    assert len(slots) == 36
    assert min(b - a for a, b in itertools.pairwise(slots)) >= 0.02 - 0.004


def test_a_script_flushed_on_every_node_is_loaded_again_where_its_key_lives(
    cluster: RedisCluster,
) -> None:
    (pacer,) = fleet(cluster, 1)
    origin = "https://api3.test:443"
    tracker = pacer.track(origin)
    tracker.read(lambda o: None, fresh=True)
    for node in cluster.nodes:
        assert node.ask("SCRIPT", "FLUSH") == b"+OK\r\n"
    tracker.observe(503, Hints(retry_after=3.0), pacer.clock(), counted=False)
    assert isinstance(tracker, RedisTracker)
    assert tracker.link.failures == 0
    assert fleet(cluster, 1)[0].view(origin).gate_in > 2


def test_a_cluster_client_and_its_asyncio_twin_are_accepted(cluster: RedisCluster) -> None:
    """A ready RedisCluster paces sync steps; the asyncio one its loop: both share the state."""
    from redis.asyncio.cluster import ClusterNode as AsyncNode
    from redis.asyncio.cluster import RedisCluster as AsyncClient

    origin = "https://api4.test:443"
    client = client_of(cluster)
    by_client = Pacer(storage=client, probe=0)
    by_client.track(origin).observe(503, Hints(retry_after=2.0), by_client.clock(), counted=False)
    assert by_client.track(origin).link.client is client  # type: ignore[attr-defined]

    async def main() -> float:
        nodes = [AsyncNode("127.0.0.1", n.port) for n in cluster.nodes]
        twin = AsyncClient(startup_nodes=nodes)
        pacer = Pacer(storage=twin, probe=0)
        tracker = pacer.track(origin)
        assert isinstance(tracker, RedisTracker)
        gate = await run_async(tracker.steps.read(lambda o: o.gate, fresh=True))
        assert tracker.link.loops.given is twin
        assert pacer.view(origin).gate_in > 1.5  # sync steps: a client made like it
        await twin.aclose()
        return float(gate - pacer.clock())

    assert asyncio.run(main()) == pytest.approx(2.0, abs=0.2)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(by_client)
    client.close()


def test_a_cluster_nobody_answers_paces_from_memory_at_once() -> None:
    """Made while no node answers: no error, each step from memory within its bound."""
    started = time.monotonic()
    pacer = Pacer(storage="redis+cluster://127.0.0.1:1,127.0.0.1:2", probe=0)
    origin = "https://api.test:443"
    pacer.track(origin).observe(503, Hints(retry_after=2.0), pacer.clock(), counted=False)
    assert pacer.view(origin).gate_in == pytest.approx(2.0, abs=0.1)  # from memory
    assert time.monotonic() - started < 1.0


def origin_of(limited: LimitedServer) -> str:
    url = httpx.URL(limited.url)
    return origin_key(url.scheme, url.host, url.port)


def _killed_mid_herd(cluster: RedisCluster, origin: str) -> RedisServer:
    """The master that holds ``origin``'s key (killed by the caller mid-herd)."""
    node = cluster.node_of(redis_key(origin))
    assert cluster.ok(node)
    return node


class RoundTrips:
    """How long each round trip to Redis took, sync and async."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.took: list[float] = []
        send, send_async = Link.send, Link.send_async

        def timed(link: Link, trip: Any) -> Any:
            started = time.monotonic()
            try:
                return send(link, trip)
            finally:
                self.took.append(time.monotonic() - started)

        async def timed_async(link: Link, trip: Any) -> Any:
            started = time.monotonic()
            try:
                return await send_async(link, trip)
            finally:
                self.took.append(time.monotonic() - started)

        monkeypatch.setattr(Link, "send", timed)
        monkeypatch.setattr(Link, "send_async", timed_async)


def test_a_sync_herd_completes_with_its_master_killed_in_the_middle(
    clusters: dict[str, RedisCluster],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """
    Three processes' transports share the cluster; the master of their origin dies halfway:
    every call still ends with a 200, no round trip hangs on the dead node, one warning a
    process.
    """
    cluster = clusters["sync herd"]
    trips = RoundTrips(monkeypatch)
    policy = RetryPolicy(attempts=20, timeout=20, wait_initial=0.01, wait_max=0.2)
    with LimitedServer(rate=200, burst=20) as limited, caplog.at_level(logging.WARNING):
        origin = origin_of(limited)
        node = _killed_mid_herd(cluster, origin)
        pacers = fleet(cluster, 3)
        clients = [httpx.Client(transport=SmoothTransport(pacer=p, policy=policy)) for p in pacers]
        statuses: list[int] = []
        lock = threading.Lock()

        def work(client: httpx.Client) -> None:
            for n in range(20):
                status = client.get(f"{limited.url}/items/{n}").status_code
                with lock:
                    statuses.append(status)

        threads = [threading.Thread(target=work, args=(c,)) for c in clients for _ in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(0.05)
        cluster.kill(node)
        for thread in threads:
            thread.join(30)
        for client in clients:
            client.close()
    assert statuses == [200] * 120
    # none hung on the dead master (a cluster that says CLUSTERDOWN: redis-py sleeps 0.25 s)
    assert max(trips.took) < 0.5
    warnings = [r for r in caplog.records if "Redis failed" in r.getMessage()]
    assert 1 <= len(warnings) <= len(pacers)  # the outage seen, once a process at most


def test_an_async_herd_completes_with_its_master_killed_in_the_middle(
    clusters: dict[str, RedisCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on asyncio (the loop's redis.asyncio cluster client): 60 tasks, all 200s."""
    cluster = clusters["async herd"]
    trips = RoundTrips(monkeypatch)
    policy = RetryPolicy(attempts=20, timeout=20, wait_initial=0.01, wait_max=0.2)

    async def main(limited: LimitedServer, node: RedisServer) -> list[int]:
        pacers = fleet(cluster, 2)
        statuses: list[int] = []
        clients = [
            httpx.AsyncClient(transport=AsyncSmoothTransport(pacer=p, policy=policy))
            for p in pacers
        ]

        async def get(client: httpx.AsyncClient, n: int) -> None:
            statuses.append((await client.get(f"{limited.url}/items/{n}")).status_code)

        async def killer() -> None:
            await asyncio.sleep(0.05)
            await asyncio.to_thread(cluster.kill, node)

        await asyncio.gather(killer(), *(get(c, n) for c in clients for n in range(30)))
        for client in clients:
            await client.aclose()
        tracker = pacers[0].track(origin)
        assert isinstance(tracker, RedisTracker)
        assert not tracker.link.up  # the death was seen (else the test proves nothing)
        return statuses

    with LimitedServer(rate=200, burst=20) as limited:
        origin = origin_of(limited)
        node = _killed_mid_herd(cluster, origin)
        statuses = asyncio.run(main(limited, node))
    assert statuses == [200] * 60
    assert trips.took
    assert max(trips.took) < 0.5  # each bounded by the store's timeout (and a turn of the loop)
