"""
smoothclient: stop client fleets from stampeding the services they call.

Public names load lazily, so ``import smoothclient`` costs almost nothing and never imports
httpx or requests; the names that need an extra (``SmoothTransport``, ``SmoothAdapter``, ...)
raise an :class:`ImportError` naming the extra to install when it is missing.

:data:`PUBLIC` is the one table of the names at the front: where each lives and which extra
it needs.  ``__all__`` lists the same names (a test holds them together).  The rest of the
toolbox lives in the namespace of its part: ``smoothclient.spreading`` (offsets, Poisson
schedules, the reconciler), ``smoothclient.telemetry`` (Prometheus, OpenTelemetry),
``smoothclient.pacing`` (scopes and their presets), ``smoothclient.hints``,
``smoothclient.events``, ``smoothclient.httpx2`` and ``smoothclient.aiohttp``; the names that
moved from the front still resolve there (:data:`MOVED`).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from ._lazy import load

if TYPE_CHECKING:
    from . import testing, window
    from .cache import JitteredTTLCache, cached
    from .edges.httpx_transport import AsyncSmoothTransport, SmoothTransport
    from .edges.requests_adapter import SmoothAdapter
    from .errors import InfeasibleWindow, RateLimited, SmoothError
    from .events import CallEnded, CallRecord, record_of
    from .hints import Hints, read_hints
    from .httpcache import HttpCache
    from .pacing.pacer import Pacer
    from .policy import DEFAULT_POLICY, RetryBudget, RetryPolicy, override_policy
    from .spreading.jittered import jittered
    from .spreading.paced import paced
    from .spreading.retry import retry, retry_context
    from .spreading.spread import spread

logging.getLogger("smoothclient").addHandler(logging.NullHandler())

#: Every public name: the module it lives in (under ``smoothclient.``) and the extra it needs.
PUBLIC: dict[str, tuple[str, str | None]] = {
    "AsyncSmoothTransport": ("edges.httpx_transport", "httpx"),
    "CallEnded": ("events", None),
    "CallRecord": ("events", None),
    "DEFAULT_POLICY": ("policy", None),
    "Hints": ("hints", None),
    "HttpCache": ("httpcache", None),
    "InfeasibleWindow": ("errors", None),
    "JitteredTTLCache": ("cache", None),
    "Pacer": ("pacing.pacer", None),
    "RateLimited": ("errors", None),
    "RetryBudget": ("policy", None),
    "RetryPolicy": ("policy", None),
    "SmoothAdapter": ("edges.requests_adapter", "requests"),
    "SmoothError": ("errors", None),
    "SmoothTransport": ("edges.httpx_transport", "httpx"),
    "cached": ("cache", None),
    "jittered": ("spreading.jittered", None),
    "override_policy": ("policy", None),
    "paced": ("spreading.paced", None),
    "read_hints": ("hints", None),
    "record_of": ("events", None),
    "retry": ("spreading.retry", None),
    "retry_context": ("spreading.retry", None),
    "spread": ("spreading.spread", None),
}
#: Names that moved from the front to the namespace of their part (the CHANGELOG lists each):
#: ``from smoothclient import PrometheusHooks`` still works, spelled
#: ``from smoothclient.telemetry import PrometheusHooks`` from now on.
MOVED: dict[str, str] = {
    "GITHUB_SCOPES": "pacing",
    "OpenTelemetryHooks": "telemetry",
    "PoissonScheduler": "spreading",
    "PrometheusHooks": "telemetry",
    "Quota": "hints",
    "Reconciler": "spreading",
    "RetryEntry": "events",
    "RetryEvent": "events",
    "ScopeRequest": "pacing",
    "ScopeRule": "pacing",
    "ScopeRules": "pacing",
    "TimeWindow": "spreading",
    "next_run": "spreading",
    "offset_for": "spreading",
    "read_body_hints": "hints",
}
#: Public submodules, imported on first use.
SUBMODULES = ("testing", "window")

#: Spelled out for type checkers; a test holds it to :data:`PUBLIC`.
__all__ = [
    "DEFAULT_POLICY",
    "AsyncSmoothTransport",
    "CallEnded",
    "CallRecord",
    "Hints",
    "HttpCache",
    "InfeasibleWindow",
    "JitteredTTLCache",
    "Pacer",
    "RateLimited",
    "RetryBudget",
    "RetryPolicy",
    "SmoothAdapter",
    "SmoothError",
    "SmoothTransport",
    "__version__",
    "cached",
    "jittered",
    "override_policy",
    "paced",
    "read_hints",
    "record_of",
    "retry",
    "retry_context",
    "spread",
    "testing",
    "window",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("smoothclient")
        except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
            return "0+unknown"
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in MOVED:  # an older spelling: resolved from its part's namespace
        return getattr(importlib.import_module(f"{__name__}.{MOVED[name]}"), name)
    if name not in PUBLIC:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return load(__name__, name, *PUBLIC[name], globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
