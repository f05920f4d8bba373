"""
Helpers that spread calls in time, for code that is not an HTTP client.

``@retry`` (:mod:`.retry`), ``@jittered`` (:mod:`.jittered`), ``@paced`` (:mod:`.paced`),
:func:`~.spread.spread`, stable offsets (:mod:`.offsets`), Poisson schedules in time-of-day
windows (:mod:`.poisson`) and the scheduler-reconciler (:mod:`.reconciler`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import namespace

if TYPE_CHECKING:
    from .jittered import jittered
    from .offsets import next_run, offset_for
    from .paced import paced
    from .poisson import PoissonScheduler, TimeWindow
    from .reconciler import Reconciler
    from .retry import retry, retry_context
    from .spread import spread

#: The names of this namespace (lazy: each loads its module on first use).
NAMES: dict[str, str] = {
    "PoissonScheduler": "poisson",
    "Reconciler": "reconciler",
    "TimeWindow": "poisson",
    "jittered": "jittered",
    "next_run": "offsets",
    "offset_for": "offsets",
    "paced": "paced",
    "retry": "retry",
    "retry_context": "retry",
    "spread": "spread",
}
__all__ = [
    "PoissonScheduler",
    "Reconciler",
    "TimeWindow",
    "jittered",
    "next_run",
    "offset_for",
    "paced",
    "retry",
    "retry_context",
    "spread",
]


__getattr__ = namespace(__name__, NAMES, globals())
