"""
:class:`~smoothclient.pacing.state.OriginState` to text and back, for stores outside the process.

JSON (infinities as ``Infinity``, as Python's ``json`` writes and reads them).  The cohort
counts (``waiting``, ``in_flight``) are not here: a shared store keeps them per process, so a
crashed process's counts fade (see :mod:`.redis.store`).

The waiters' queue is not here either: it says which of *this process's* calls ask again
when, so each process keeps its own (see :class:`.redis.tracker.RedisCell`); written to the
store, every waiter's ask was a write.

The times of recent successes and throttles are most of a busy origin's state (a hundred a
second at 100 req/s), and a shared store writes the state on every step: they are written as
base64 of their IEEE doubles, which C code packs and unpacks.  Turning each into milliseconds
in Python and writing those as JSON numbers made a step's cost grow with the rate
(``benchmarks/redis_store.py --rate 1000``: 271 -> 225 us a step, p50; 218 -> 207 at 100).
"""

from __future__ import annotations

import base64
import bisect
import dataclasses
import itertools
import json
import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from ..policy import RetryBudget
from .budget import BudgetCounts
from .gcra import Gcra
from .state import MAX_SUCCESSES, OriginState, Outage

__all__ = ["clamped", "dump", "load"]

log = logging.getLogger("smoothclient.pacing")

#: What each process keeps for itself: its cohort counts (and how many processes they are
#: of), its waiters' queue.
_OWN = frozenset({"waiting", "in_flight", "processes", "queue"})
_FIELDS = tuple(f.name for f in dataclasses.fields(OriginState) if f.name not in _OWN)


#: Successes and throttles older than this (before the newest) are not written: the rules
#: count them over the last second, and a cut's episode over three.
KEEP = 3.0


def _times(times: deque[float]) -> str:
    """The times within :data:`KEEP` of the newest (ascending): base64 of little-endian doubles."""
    if not times:
        return ""
    start = bisect.bisect_left(times, times[-1] - KEEP)
    packed = struct.pack(f"<{len(times) - start}d", *itertools.islice(times, start, None))
    return base64.b64encode(packed).decode("ascii")


def _load_times(value: str | list[Any]) -> deque[float]:
    if isinstance(value, str):
        packed = base64.b64decode(value, validate=True)
        if len(packed) % 8:
            raise ValueError("not a whole number of doubles")
        return deque(struct.unpack(f"<{len(packed) // 8}d", packed), maxlen=MAX_SUCCESSES)
    if not value:
        return deque(maxlen=MAX_SUCCESSES)
    base, offsets = value  # as written before: [base, [milliseconds after it, ...]]
    return deque((base + ms / 1000 for ms in offsets), maxlen=MAX_SUCCESSES)


def _plain(name: str, value: Any) -> Any:
    if name in ("successes", "throttles"):
        return _times(value)
    if name == "pace":
        return [value.burst, value.tat, value.interval]
    if name == "window_guesses":
        return [[k, v] for k, v in value.items()]
    if name == "budgets":
        return [
            [[b.ratio, b.min_per_second, b.window], [list(x) for x in counts.buckets]]
            for b, counts in value.items()
        ]
    if name == "routes":
        return {route: list(names) for route, names in value.items()}
    if name == "outage":
        return list(dataclasses.astuple(value))
    if isinstance(value, deque | tuple):
        return list(value)
    return value


def dump(state: OriginState) -> str:
    """The state as text (without its cohort counts)."""
    return json.dumps({name: _plain(name, getattr(state, name)) for name in _FIELDS})


def _gcra(value: list[float]) -> Gcra:
    gcra = Gcra(burst=float(value[0]))
    gcra.tat, gcra.interval = float(value[1]), float(value[2])
    return gcra


def _budgets(value: list[Any]) -> dict[RetryBudget, BudgetCounts]:
    found: dict[RetryBudget, BudgetCounts] = {}
    for (ratio, per_second, window), buckets in value:
        budget = RetryBudget(ratio=ratio, min_per_second=per_second, window=window)
        found[budget] = BudgetCounts(budget, deque(list(b) for b in buckets))
    return found


def _outage(value: list[Any]) -> Outage:
    fails, first, served, down, gap, probes, release, closed = value
    return Outage(
        int(fails),
        float(first),
        float(served),
        None if down is None else float(down),
        float(gap),
        int(probes),
        float(release),
        float(closed),
    )


def _tuple(value: list[Any] | None) -> tuple[Any, ...] | None:
    """An optional tuple field (JSON writes it as a list)."""
    return None if value is None else tuple(value)


_LOADERS: dict[str, Any] = {
    "pace": _gcra,
    "window_guesses": lambda v: {k: float(x) for k, x in v},
    "budgets": _budgets,
    "throttles": _load_times,
    "successes": _load_times,
    "routes": lambda v: {str(k): tuple(str(n) for n in names) for k, names in v.items()},
    "outage": _outage,
    "cut": _tuple,
    "exhausted": _tuple,
    "ledger_set": _tuple,
    "early_sent": _tuple,
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _checker(annotation: str) -> Callable[[Any], bool]:
    """What a plain field (one without a loader) may hold, from its annotation."""
    optional = annotation.endswith("| None")
    base = annotation.removesuffix("| None").strip()
    if base == "bool":
        ok: Callable[[Any], bool] = lambda v: isinstance(v, bool)  # noqa: E731
    elif base == "int":
        ok = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    elif base == "Kind":
        ok = lambda v: v in ("unknown", "bucket", "window")  # noqa: E731
    else:  # float
        ok = _number
    return (lambda v: v is None or ok(v)) if optional else ok


_CHECKS = {
    f.name: _checker(str(f.type))
    for f in dataclasses.fields(OriginState)
    if f.name in _FIELDS and f.name not in _LOADERS
}


def load(text: str | bytes) -> OriginState:
    """
    The state ``text`` holds (counts zero); a fresh state for anything unreadable.

    What a shared store holds is input like a server's header (another version of the
    library, an operator, a bug may have written it): every field is checked for its type,
    and anything else makes the state a fresh one, logged at debug level, never an error.
    """
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not an object")
        state = OriginState()
        for name in _FIELDS:
            if name in data:
                value = data[name]
                loader = _LOADERS.get(name)
                if loader is not None:
                    value = loader(value)
                elif not _CHECKS[name](value):
                    raise TypeError(f"{name}: {value!r:.40}")
                setattr(state, name, value)
        for name in ("cut", "exhausted", "ledger_set", "early_sent"):
            held = getattr(state, name)
            if held is not None and not all(v is None or _number(v) for v in held):
                raise TypeError(f"{name}: {held!r:.40}")
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        log.debug("a stored state that cannot be read is taken as a fresh one: %s", exc)
        return OriginState()
    return state


def clamped(state: OriginState, now: float, max_gate: float) -> OriginState:
    """
    ``state`` with no time further ahead than ``max_gate`` from ``now``.

    A gate, a slot owed or a reset a store holds far in the future (written by a clock far
    off, or by someone else) must not close an origin for longer than any server may.
    """
    latest = now + max_gate
    state.gate = min(state.gate, latest)
    state.pace.tat = min(state.pace.tat, latest)
    if state.reset_at is not None:
        state.reset_at = min(state.reset_at, latest)
    if state.closed is not None:
        state.closed = min(state.closed, latest)
    b = state.outage
    b.closed_until = min(b.closed_until, latest)
    b.release_until = min(b.release_until, latest)
    return state
