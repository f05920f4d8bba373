"""
smoothclient: stop client fleets from stampeding the services they call.

Public names load lazily, so ``import smoothclient`` costs almost nothing and never imports
httpx or requests; the names that need an extra (``SmoothTransport``, ``SmoothAdapter``, ...)
raise an :class:`ImportError` naming the extra to install when it is missing.

:data:`PUBLIC` is the one table of the public names: where each lives and which extra it
needs.  ``__all__`` lists the same names (a test holds them together).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import testing, window
    from .cache import JitteredTTLCache, cached
    from .edges.httpx_transport import AsyncSmoothTransport, SmoothTransport
    from .edges.requests_adapter import SmoothAdapter
    from .errors import InfeasibleWindow, RateLimited, SmoothError
    from .events import CallEnded, CallRecord, RetryEntry, RetryEvent, record_of
    from .hints import Hints, Quota, read_body_hints, read_hints
    from .httpcache import HttpCache
    from .pacing.pacer import Pacer
    from .pacing.presets import GITHUB_SCOPES
    from .pacing.scopes import ScopeRequest, ScopeRule, ScopeRules
    from .policy import DEFAULT_POLICY, RetryBudget, RetryPolicy, override_policy
    from .spreading.jittered import jittered
    from .spreading.offsets import next_run, offset_for
    from .spreading.paced import paced
    from .spreading.poisson import PoissonScheduler, TimeWindow
    from .spreading.reconciler import Reconciler
    from .spreading.retry import retry, retry_context
    from .spreading.spread import spread
    from .telemetry.otel import OpenTelemetryHooks
    from .telemetry.prometheus import PrometheusHooks

logging.getLogger("smoothclient").addHandler(logging.NullHandler())

#: Every public name: the module it lives in (under ``smoothclient.``) and the extra it needs.
PUBLIC: dict[str, tuple[str, str | None]] = {
    "AsyncSmoothTransport": ("edges.httpx_transport", "httpx"),
    "CallEnded": ("events", None),
    "CallRecord": ("events", None),
    "DEFAULT_POLICY": ("policy", None),
    "GITHUB_SCOPES": ("pacing.presets", None),
    "Hints": ("hints", None),
    "HttpCache": ("httpcache", None),
    "InfeasibleWindow": ("errors", None),
    "JitteredTTLCache": ("cache", None),
    "OpenTelemetryHooks": ("telemetry.otel", "otel"),
    "Pacer": ("pacing.pacer", None),
    "PoissonScheduler": ("spreading.poisson", None),
    "PrometheusHooks": ("telemetry.prometheus", "prometheus"),
    "Quota": ("hints", None),
    "RateLimited": ("errors", None),
    "Reconciler": ("spreading.reconciler", None),
    "RetryBudget": ("policy", None),
    "RetryEntry": ("events", None),
    "RetryEvent": ("events", None),
    "RetryPolicy": ("policy", None),
    "ScopeRequest": ("pacing.scopes", None),
    "ScopeRule": ("pacing.scopes", None),
    "ScopeRules": ("pacing.scopes", None),
    "SmoothAdapter": ("edges.requests_adapter", "requests"),
    "SmoothError": ("errors", None),
    "SmoothTransport": ("edges.httpx_transport", "httpx"),
    "TimeWindow": ("spreading.poisson", None),
    "cached": ("cache", None),
    "jittered": ("spreading.jittered", None),
    "next_run": ("spreading.offsets", None),
    "offset_for": ("spreading.offsets", None),
    "override_policy": ("policy", None),
    "paced": ("spreading.paced", None),
    "read_body_hints": ("hints", None),
    "read_hints": ("hints", None),
    "record_of": ("events", None),
    "retry": ("spreading.retry", None),
    "retry_context": ("spreading.retry", None),
    "spread": ("spreading.spread", None),
}
#: Public submodules, imported on first use.
SUBMODULES = ("testing", "window")
#: The packages each extra brings, to tell a missing extra from any other import failure.
_EXTRA_PACKAGES = {
    "httpx": frozenset({"httpx", "httpcore", "anyio"}),
    "httpx2": frozenset({"httpx2", "httpcore2", "anyio", "h11", "idna", "truststore"}),
    "requests": frozenset({"requests", "urllib3"}),
    "aiohttp": frozenset({"aiohttp", "multidict", "yarl", "aiohappyeyeballs", "aiosignal"}),
    "prometheus": frozenset({"prometheus_client"}),
    "otel": frozenset({"opentelemetry"}),
}

#: Spelled out for type checkers; a test holds it to :data:`PUBLIC`.
__all__ = [
    "DEFAULT_POLICY",
    "GITHUB_SCOPES",
    "AsyncSmoothTransport",
    "CallEnded",
    "CallRecord",
    "Hints",
    "HttpCache",
    "InfeasibleWindow",
    "JitteredTTLCache",
    "OpenTelemetryHooks",
    "Pacer",
    "PoissonScheduler",
    "PrometheusHooks",
    "Quota",
    "RateLimited",
    "Reconciler",
    "RetryBudget",
    "RetryEntry",
    "RetryEvent",
    "RetryPolicy",
    "ScopeRequest",
    "ScopeRule",
    "ScopeRules",
    "SmoothAdapter",
    "SmoothError",
    "SmoothTransport",
    "TimeWindow",
    "__version__",
    "cached",
    "jittered",
    "next_run",
    "offset_for",
    "override_policy",
    "paced",
    "read_body_hints",
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
    if name not in PUBLIC:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    module_name, extra = PUBLIC[name]
    try:
        module = importlib.import_module(f"{__name__}.{module_name}")
    except ModuleNotFoundError as exc:
        if extra is None:
            raise
        raise _missing_extra(exc, extra, f"smoothclient.{name}") from exc
    value = getattr(module, name)
    globals()[name] = value
    return value


def _missing_extra(exc: ModuleNotFoundError, extra: str, what: str) -> ImportError:
    """
    The error saying ``what`` needs ``extra``, when ``exc`` is one of its packages missing.

    Any other missing module is raised as it was (a broken install is not a missing extra).
    """
    if (exc.name or "").partition(".")[0] not in _EXTRA_PACKAGES[extra]:
        raise exc
    msg = f"{what} needs {extra}: pip install 'smoothclient[{extra}]'"
    return ImportError(msg, name=exc.name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
