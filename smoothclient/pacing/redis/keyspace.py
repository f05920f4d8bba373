"""
What a key of the Redis store is called and holds beyond the state's rules.

Its name (:func:`redis_key`: hash-tagged by origin, so an origin's keys share a cluster's
slot), how long it outlives its state (:func:`horizon`), how long a process trusts its copy
of it (:func:`trusted_for`), how a process's plain successes join the state it writes
(:func:`merge_successes`), and the other processes' counts read from it (:func:`others_of`).
"""

from __future__ import annotations

import heapq
import json
import math
from collections import deque
from typing import Any

from ..codec import KEEP
from ..crowd import asks_again
from ..state import MAX_SUCCESSES, PROBE_POLL, OriginState, Settings

__all__ = [
    "COHORT_TTL",
    "LINGER",
    "MAX_COUNT",
    "entries_of",
    "horizon",
    "merge_successes",
    "others_of",
    "redis_key",
    "trusted_for",
]

#: Keys outlive the last time their state matters by this much (seconds).
LINGER = 60.0
#: The most requests one process may say it has waiting or in flight (more is junk).
MAX_COUNT = 1_000_000
#: A process's cohort counts are dropped this long after it last wrote them (seconds).
COHORT_TTL = 30.0


def horizon(o: OriginState, settings: Settings, now: float) -> float:
    """Seconds from ``now`` during which ``o`` still matters to anyone."""
    ends = [o.gate, o.pace.tat, o.last_throttle + settings.quiet]
    ends += [t for t in (o.reset_at, o.probe_until) if t is not None]
    latest = max((t for t in ends if math.isfinite(t)), default=now)
    return min(max(0.0, latest - now), 7 * 86400.0) + LINGER


def trusted_for(o: OriginState, trust: float) -> float:
    """
    How long a process trusts its copy ``o`` of a key (seconds): ``trust``, or less.

    A crowd window's held requests ask again a quarter of a service time apart
    (:func:`~..crowd.asks_again`).  Behind a cold-start probe, :data:`~..state.PROBE_POLL`:
    its answer is what the others wait for, and a copy trusted ``trust`` (0.1 s) kept each
    process's waiters from seeing it until then.  (The copy is the process's: its waiters
    read the key at most once a poll between them, whatever their number.)
    """
    again = asks_again(o)
    if again is not None:
        trust = min(trust, again)
    if not o.known and o.probe_until is not None:
        trust = min(trust, PROBE_POLL)
    return trust


def redis_key(key: str, prefix: str = "smoothclient") -> str:
    """The Redis key of a store key: ``origin`` or ``"origin scope"``, hash-tagged by origin."""
    origin, _, scope = key.partition(" ")
    tagged = f"{prefix}:{{{origin}}}"
    return f"{tagged}:{scope}" if scope else tagged


def merge_successes(state: OriginState, unsent: deque[float]) -> None:
    """
    Add ``unsent`` successes to ``state``'s, kept ascending (the rules bisect them).

    They stay in ``unsent`` (a write that loses to another process's is taken again on what
    that one wrote: popped, they were lost), so a time the state has already is not added
    twice; those older than what a state keeps (:data:`~.codec.KEEP`) are dropped.
    """
    while unsent and unsent[0] < unsent[-1] - KEEP:
        unsent.popleft()
    have = set(state.successes)
    mine = sorted(t for t in unsent if t not in have)
    if mine:
        state.successes = deque(heapq.merge(state.successes, mine), maxlen=MAX_SUCCESSES)
        for at in mine:  # (answers, as each success noted at once is: see OriginState.answered)
            state.answered(at)


def entries_of(mine: list[int], delta: list[int], now: float) -> tuple[str, str]:
    """
    This process's cohort entries for a write: if its state is written, and if not.

    ``mine``: its counts (waiting, in flight) with the step's ``delta`` in them.  The store's
    save script writes one of them into the cohort as it stands, whichever write wins (see
    :mod:`.scripts`).  If another's write won, the counts the step released go all the same
    (a request answered or given up: a fact, whoever wrote first), and none it took (a place
    is taken only with the state that grants it).
    """
    released = [mine[0] - max(0, delta[0]), mine[1] - max(0, delta[1])]
    return _entry(mine, now), _entry(released, now)


def _entry(counts: list[int], now: float) -> str:
    return json.dumps([max(0, counts[0]), max(0, counts[1]), now])


def others_of(cohort: Any, me: str, now: float) -> dict[str, list[float]]:
    """
    The other processes' ``[waiting, in flight, when written]``, read from a key's cohort.

    Another's counts are input: junk is dropped, and so are counts negative or absurd and
    counts written in the future.
    """
    try:
        entries = json.loads(cohort) if cohort else {}
    except (ValueError, RecursionError):  # (not JSON, or nested past the parser's depth)
        entries = {}
    if not isinstance(entries, dict):
        return {}
    return {
        who: entry
        for who, entry in entries.items()
        if who != me
        and isinstance(entry, list)
        and len(entry) == 3
        and all(_number(n) for n in entry)
        and 0 <= entry[0] <= MAX_COUNT
        and 0 <= entry[1] <= MAX_COUNT
        and entry[2] <= now + COHORT_TTL
    }


def _number(value: Any) -> bool:
    """
    Whether a cohort's ``value`` is a finite number (not a bool).

    Compared, not converted: ``math.isfinite`` of an integer of 400 digits raised
    ``OverflowError``.
    """
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and -_HUGE < value < _HUGE


#: Past this, an integer a cohort holds is junk (all that are real are far smaller).
_HUGE = 2**63
