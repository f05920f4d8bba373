"""The watchdog that cuts a sync attempt at its deadline (real sockets, real threads)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import requests
import urllib3.poolmanager

from smoothclient import SmoothAdapter
from smoothclient.edges import watchdog as wd
from smoothclient.edges.requests_adapter import _cut_pools, _CutHTTPPool, _CutHTTPSPool


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.settimeout(5.0)
    yield a, b
    a.close()
    b.close()


def test_a_read_past_the_deadline_is_cut(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    dog = wd.Watchdog(tick=0.01)
    watch = dog.watch(dog.clock() + 0.1)
    watch.attach(a)
    start = time.monotonic()
    b.sendall(b"x")  # a read in time is not cut
    assert a.recv(1) == b"x"
    assert a.recv(1) == b""  # the next read never gets data: shut at the deadline
    assert 0.05 < time.monotonic() - start < 1.0
    assert watch.cut


def test_a_finished_attempt_is_never_cut(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    dog = wd.Watchdog(tick=0.01)
    watch = dog.watch(dog.clock() + 0.05)
    watch.attach(a)
    watch.done = True
    time.sleep(0.15)
    b.sendall(b"y")
    assert a.recv(1) == b"y"  # still open
    assert not watch.cut


def test_a_socket_known_after_the_deadline_is_shut_at_once(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, _ = pair
    dog = wd.Watchdog(tick=0.01)
    watch = dog.watch(dog.clock() - 1.0)
    watch.fire()  # the deadline passed while the attempt was still connecting
    watch.attach(a)
    start = time.monotonic()
    assert a.recv(1) == b""
    assert time.monotonic() - start < 0.5


def test_the_thread_ends_when_idle_and_comes_back(
    monkeypatch: pytest.MonkeyPatch, pair: tuple[socket.socket, socket.socket]
) -> None:
    monkeypatch.setattr(wd, "IDLE", 0.05)
    a, _ = pair
    dog = wd.Watchdog(tick=0.01)
    first = dog.watch(dog.clock() + 10.0)
    first.attach(a)
    assert dog._running
    first.done = True
    deadline = time.monotonic() + 1.0
    while dog._running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not dog._running  # no thread while nothing is watched
    second = dog.watch(dog.clock() + 0.05)
    second.attach(a)
    assert dog._running
    assert a.recv(1) == b""
    assert second.cut


def test_the_adapter_makes_its_pools_of_watched_connections() -> None:
    adapter = SmoothAdapter()
    classes = adapter.poolmanager.pool_classes_by_scheme
    assert classes == {"http": _CutHTTPPool, "https": _CutHTTPSPool}
    proxied = adapter.proxy_manager_for("http://proxy.test:3128")
    assert proxied.pool_classes_by_scheme["https"] is _CutHTTPSPool


def test_a_manager_with_pools_of_its_own_keeps_them() -> None:
    class Own(urllib3.PoolManager):
        pass

    manager = Own()
    manager.pool_classes_by_scheme = {"http": urllib3.HTTPConnectionPool}
    assert _cut_pools(manager).pool_classes_by_scheme == {"http": urllib3.HTTPConnectionPool}
    assert urllib3.poolmanager.pool_classes_by_scheme["http"] is urllib3.HTTPConnectionPool


def test_a_pickled_adapter_gets_a_watchdog_again() -> None:
    import pickle

    session = requests.Session()
    session.mount("http://", SmoothAdapter())
    adapter = pickle.loads(pickle.dumps(session)).get_adapter("http://x.test/")
    assert isinstance(adapter._watchdog, wd.Watchdog)
    assert adapter.poolmanager.pool_classes_by_scheme["http"] is _CutHTTPPool


def test_a_forked_child_starts_its_own_thread_and_drops_the_parents_watches(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, _ = pair
    c, d = socket.socketpair()
    dog = wd.Watchdog(tick=0.01)
    inherited = wd.Watch(dog, dog.clock() - 1.0)
    inherited.sock = c
    dog._watches.append(inherited)
    dog._running, dog._pid = True, -1  # as a child sees it: no thread runs here
    mine = dog.watch(dog.clock() + 0.05)
    mine.attach(a)
    assert dog._running
    assert a.recv(1) == b""  # this process's own watch fires
    assert not inherited.cut  # the parent's connection is left alone
    d.sendall(b"z")
    assert c.recv(1) == b"z"
    c.close()
    d.close()
