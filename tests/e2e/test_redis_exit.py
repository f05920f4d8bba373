"""
A process done with an origin leaves no counts behind in Redis, however soon it ends.

Its last answers wait on its copy for its next step (``RedisCell.defer``), the flusher writing
them :data:`~smoothclient.pacing.redis.flusher.FLUSH_AFTER` later at the latest.  But a fleet
process's ``asyncio.run`` returned at its last answer and closed the loop before the flusher's
timer ran, and a process exiting took the flusher's daemon thread with it: the process's
counts (waiting and in flight) stayed on the key for ``COHORT_TTL`` (30 s), and the others
paced their share of the rate against them (express-rate-limit 10 a second, a fleet of six
through Redis: 10, 7, 4, then 1 request a second for 25 s; 3.5x the ideal time).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from smoothclient import Pacer
from smoothclient.hints import Hints
from smoothclient.pacing.redis import flusher
from smoothclient.pacing.redis.store import RedisCell
from smoothclient.pacing.steps import run_async
from smoothclient.tools.redis_server import RedisServer

ORIGIN = "https://api.test:443"
QUOTA = Hints(remaining=50, limit=100, window=10, reset_after=10)  # 10 req/s, quota left


@pytest.fixture(autouse=True)
def _flusher_never_on_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flusher's timer never comes in time: only the end of the loop or process writes."""
    monkeypatch.setattr(flusher, "FLUSH_AFTER", 3600.0)


def seen_by_another(server: RedisServer) -> int:
    """What a fresh process reads of the fleet's requests waiting or in flight."""
    other = Pacer(storage=server.url, probe=0)
    return int(other.track(ORIGIN).read(lambda o: o.waiting + o.in_flight, fresh=True))


def test_a_loop_that_ends_at_its_last_answer_writes_it(server: RedisServer) -> None:
    """``asyncio.run`` returns at once: the answer, and its request's count, still reach Redis."""
    pacer = Pacer(storage=server.url, probe=0)
    tracker = pacer.track(ORIGIN)
    cell = tracker.cell
    assert isinstance(cell, RedisCell)
    tracker.observe(200, QUOTA, pacer.clock(), counted=False)  # the origin known
    tracker.update(lambda o: None)  # (written)

    async def last_request() -> None:
        now = pacer.clock()
        assert (await run_async(tracker.steps.acquire(now, deadline=now + 5))).final
        tracker.sent()
        assert seen_by_another(server) == 1
        await run_async(tracker.steps.observe(200, QUOTA, pacer.clock(), sent_at=now))
        assert cell.deferred  # its answer waits on the copy; the loop ends now

    asyncio.run(last_request())
    assert not cell.deferred
    assert seen_by_another(server) == 0  # not 1 until its counts fade, 30 s later


CHILD = """
    import sys
    from smoothclient import Pacer
    from smoothclient.hints import Hints
    from smoothclient.pacing.redis import flusher

    flusher.FLUSH_AFTER = 3600.0
    quota = Hints(remaining=50, limit=100, window=10, reset_after=10)
    pacer = Pacer(storage=sys.argv[1], probe=0)
    tracker = pacer.track("https://api.test:443")
    tracker.observe(200, quota, pacer.clock(), counted=False)
    tracker.update(lambda o: None)
    now = pacer.clock()
    assert tracker.acquire(now, deadline=now + 5).final
    tracker.sent()
    tracker.observe(200, quota, pacer.clock(), sent_at=now)
    assert tracker.cell.deferred
    print("in flight, deferred", flush=True)
"""


def test_a_process_that_exits_at_its_last_answer_writes_it(server: RedisServer) -> None:
    """A sync process (the flusher's daemon thread) exiting right after its last answer."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "in flight, deferred" in done.stdout
    assert seen_by_another(server) == 0
