"""
The health of each node of a Redis Cluster: a master away pauses its own keys, not the store.

A round trip that could not reach the master of its key's slot (refused, reset, over the
store's timeout) marks that node away for a jittered backoff, the store's own law
(:func:`pause`); steps on the keys it serves go to this process's memory meanwhile, and the
origins on the other masters share their state as before.  One warning when a node goes
away, one when it is back.  A cluster that says it is down (``CLUSTERDOWN``) is an outage of
the store (:mod:`.link`).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from typing import Any

__all__ = ["MAX_PAUSE", "Nodes", "node_of", "pause"]

log = logging.getLogger("smoothclient.pacing")

#: The longest pause before Redis is asked again after failed probes (seconds; jittered).
MAX_PAUSE = 10.0


def pause(failures: int, rng: random.Random) -> float:
    """How long to leave Redis (or a node) alone after ``failures`` failed probes in a row."""
    return min(MAX_PAUSE, 0.5 * 2.0 ** (failures - 1)) * rng.uniform(0.5, 1.5)


def node_of(client: Any, key: str | None) -> str | None:
    """
    ``host:port`` of the node serving ``key``'s slot in a cluster client's table, or ``None``.

    No round trip: the table the client has (``None`` for a client of one server, or one that
    has read no table yet).
    """
    client = getattr(client, "made", client)  # a client made when first used: if made yet
    if key is None or client is None or not hasattr(client, "nodes_manager"):
        return None
    try:
        name: str = client.get_node_from_key(key).name
    except Exception:  # a slot the table has no node for
        return None
    return name


class Nodes:
    """Which nodes of a cluster are away, and until when (see the module)."""

    def __init__(self, rng: random.Random) -> None:
        """Every node up."""
        self.rng = rng
        self.until: dict[str, float] = {}  # node -> when it may be asked again
        self.failures: dict[str, int] = {}  # node -> failed probes in a row
        self._lock = threading.Lock()

    def forked(self) -> None:
        """In a child just forked: a fresh lock."""
        self._lock = threading.Lock()

    def up(self, name: str | None) -> bool:
        """Whether the node ``name`` may be asked now (``None``: no node known, yes)."""
        return name is None or time.monotonic() >= self.until.get(name, -math.inf)

    def failed(self, name: str, why: str) -> None:
        """A round trip to ``name`` failed (``why``): it is left alone for a while."""
        now = time.monotonic()
        with self._lock:
            if now < self.until.get(name, -math.inf):  # trips out together: one failure
                return
            failures = self.failures[name] = self.failures.get(name, 0) + 1
            self.until[name] = now + pause(failures, self.rng)
        if failures == 1:
            log.warning(
                "Redis node %s failed (%s); pacing its keys from this process's memory "
                "until it is back",
                name,
                why,
            )
        else:
            log.debug("Redis node %s still failing (%s)", name, why)

    def back(self, name: str | None) -> None:
        """A round trip to ``name`` succeeded: it is asked again at once."""
        if name is None or name not in self.failures:
            return
        with self._lock:
            failed = self.failures.pop(name, 0)
            self.until.pop(name, None)
        if failed:
            log.warning("Redis node %s is back; pacing its keys from it again", name)
