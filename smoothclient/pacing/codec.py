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
import functools
import itertools
import json
import logging
import math
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from ..policy import RetryBudget
from .bound import MAX_PER_REQUEST
from .budget import BudgetCounts
from .gcra import Gcra
from .learning import MAX_WINDOW_GUESSES
from .outage import MAX_PROBE_GAP
from .state import MAX_SUCCESSES, OriginState, Outage

__all__ = ["clamped", "dump", "load"]

log = logging.getLogger("smoothclient.pacing")

#: What each process keeps for itself: its cohort counts (and how many processes they are
#: of), its waiters' queue.
_OWN = frozenset({"waiting", "in_flight", "processes", "queue"})
_FIELDS = tuple(f.name for f in dataclasses.fields(OriginState) if f.name not in _OWN)


#: The largest count a state may hold (a float's exact integers): more is junk.
MAX_INT = 2**53
#: No number a state holds is larger (in size): a larger one is clamped to it.
BOUND = 1e18
#: The most retry budgets a state read keeps (a policy or two count on an origin): the last.
MAX_BUDGETS = 16

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


def _number(value: Any) -> float:
    """
    A JSON number as a float within :data:`BOUND` (clamped); NaN or no number raises.

    No number the rules keep is larger (times, counts, rates; "never" is ``-1e18``), and
    ``float()`` of a larger integer overflows, and products of larger floats do.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"not a number: {value!r:.40}")
    if value != value:
        raise ValueError("NaN")
    return float(min(max(value, -BOUND), BOUND))  # (compared as it is: no overflow)


def _nonnegative(value: Any) -> float:
    return max(0.0, _number(value))


def _count(value: Any) -> int:
    """A JSON integer that counts something: 0 to :data:`MAX_INT` (a float's exact integers)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise TypeError(f"not a count: {value!r:.40}")
    return value


def _checked_times(times: deque[float]) -> deque[float]:
    """``times`` if every one is within :data:`BOUND`: one C-level sum, not a test per time."""
    if not -BOUND <= sum(times) <= BOUND:  # (NaN, an infinity or a huge time: outside)
        raise ValueError("times out of bounds")
    return times


def _load_times(value: str | list[Any]) -> deque[float]:
    if isinstance(value, str):
        packed = base64.b64decode(value, validate=True)
        if len(packed) % 8:
            raise ValueError("not a whole number of doubles")
        unpacked = struct.unpack(f"<{len(packed) // 8}d", packed)
        return _checked_times(deque(unpacked, maxlen=MAX_SUCCESSES))
    if not value:
        return deque(maxlen=MAX_SUCCESSES)
    base, offsets = value  # as written before: [base, [milliseconds after it, ...]]
    start = _number(base)
    return deque((start + _number(ms) / 1000 for ms in offsets), maxlen=MAX_SUCCESSES)


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


def _gcra(value: list[Any]) -> Gcra:
    burst, tat, interval = value
    gcra = Gcra(burst=max(1.0, _number(burst)))  # (a bucket holds one at least)
    gcra.tat = -math.inf if tat == -math.inf else _number(tat)  # (-inf: a bucket never used)
    gcra.interval = _nonnegative(interval)
    return gcra


def _guesses(value: list[Any]) -> dict[float | None, float]:
    """Quota size (or ``None``) -> its guessed window, as many as the rules keep (the last)."""
    guesses: dict[float | None, float] = {}
    for size, window in value[-MAX_WINDOW_GUESSES:]:
        guesses[None if size is None else _number(size)] = _nonnegative(window)
    return guesses


def _budgets(value: list[Any]) -> dict[RetryBudget, BudgetCounts]:
    found: dict[RetryBudget, BudgetCounts] = {}
    for (ratio, per_second, window), buckets in value[-MAX_BUDGETS:]:
        budget = RetryBudget(ratio=ratio, min_per_second=per_second, window=window)
        # one bucket a second of the window at most (the rules drop older ones): the last
        kept = buckets[-(int(budget.window) + 2) :]
        counts = deque([_number(at), _nonnegative(n), _nonnegative(r)] for at, n, r in kept)
        found[budget] = BudgetCounts(budget, counts)
    return found


def _routes(value: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Route -> the scopes named on it: strings, as many as the rules keep per route."""
    if not isinstance(value, dict):
        raise TypeError(f"routes: {value!r:.40}")
    routes: dict[str, tuple[str, ...]] = {}
    for route, names in value.items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise TypeError(f"routes: {names!r:.40}")
        routes[route] = tuple(names[:MAX_PER_REQUEST])
    return routes


def _outage(value: list[Any]) -> Outage:
    fails, first, served, down, gap, probes, release, closed = value
    return Outage(
        _count(fails),
        _number(first),
        _nonnegative(served),
        None if down is None else _number(down),
        min(_nonnegative(gap), MAX_PROBE_GAP),  # (the rules widen it no further)
        _count(probes),
        _number(release),
        _number(closed),
    )


def _pair(value: list[Any] | None) -> tuple[float, float] | None:
    """An optional pair of numbers (JSON writes it as a list)."""
    if value is None:
        return None
    first, second = value
    return _number(first), _number(second)


def _cut(value: list[Any] | None) -> tuple[float, float | None, float, float] | None:
    """The last cut: when, the rate then (or ``None``), a share of throttles, a rate."""
    if value is None:
        return None
    at, rate, share, cut = value
    return _number(at), None if rate is None else _number(rate), _number(share), _number(cut)


_LOADERS: dict[str, Any] = {
    "pace": _gcra,
    "window_guesses": _guesses,
    "budgets": _budgets,
    "throttles": _load_times,
    "successes": _load_times,
    "routes": _routes,
    "outage": _outage,
    "cut": _cut,
    "exhausted": _pair,
    "ledger_set": _pair,
    "early_sent": _pair,
}


def _checker(annotation: str, default: Any) -> Callable[[Any], Any]:
    """
    What a plain field (one without a loader) may hold, from its annotation: the value read.

    Raises ``TypeError`` or ``ValueError`` for anything else.  Numbers are clamped within
    :data:`BOUND`, but for an infinity where the field's default is one (no crowd window, no
    ceiling); counts are integers from 0 to :data:`MAX_INT`.
    """
    optional = annotation.endswith("| None")
    base = annotation.removesuffix("| None").strip()
    read: Callable[[Any], Any]
    if base == "bool":
        read = _bool
    elif base == "int":
        read = _count
    elif base == "Kind":
        read = _kind
    elif isinstance(default, float) and math.isinf(default):
        read = functools.partial(_or_infinite, default)
    else:  # float
        read = _number
    if optional:
        return lambda v: None if v is None else read(v)
    return read


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"not a bool: {value!r:.40}")
    return value


def _kind(value: Any) -> Any:
    if value not in ("unknown", "bucket", "window"):
        raise TypeError(f"not a kind: {value!r:.40}")
    return value


def _or_infinite(infinite: float, value: Any) -> float:
    """A number, or the infinity ``infinite`` (a field's default)."""
    return infinite if value == infinite else _number(value)


_FRESH = OriginState()
_CHECKS = {
    f.name: _checker(str(f.type), getattr(_FRESH, f.name))
    for f in dataclasses.fields(OriginState)
    if f.name in _FIELDS and f.name not in _LOADERS
}
#: this client's share of a window's quota: a fraction (``floor(share * remaining)`` of a
#: share of 1e308 raised OverflowError)
_CHECKS["share"] = lambda v: min(1.0, _nonnegative(v))


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
                setattr(state, name, _CHECKS[name](value) if loader is None else loader(value))
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        RecursionError,
        OverflowError,
    ) as exc:
        log.debug("a stored state that cannot be read is taken as a fresh one: %s", exc)
        return OriginState()
    return state


def clamped(state: OriginState, now: float, max_gate: float) -> OriginState:
    """
    ``state`` with no time further ahead than ``max_gate`` from ``now``.

    A gate, a slot owed or a reset a store holds far in the future (written by a clock far
    off, or by someone else) must not close an origin for longer than any server may, nor
    a pace space its slots further apart.
    """
    latest = now + max_gate
    state.gate = min(state.gate, latest)
    pace = state.pace
    pace.tat = min(pace.tat, latest)
    pace.interval = min(pace.interval, max_gate)  # slots no further apart either
    if state.reset_at is not None:
        state.reset_at = min(state.reset_at, latest)
    if state.closed is not None:
        state.closed = min(state.closed, latest)
    if state.reset_probe is not None:
        state.reset_probe = min(state.reset_probe, now)  # when a probe went: not ahead
    b = state.outage
    b.closed_until = min(b.closed_until, latest)
    b.release_until = min(b.release_until, latest)
    return state
