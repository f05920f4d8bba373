"""
smoothclient: stop client fleets from stampeding the services they call.

Public names load lazily, so ``import smoothclient`` costs almost nothing and never imports
httpx or requests; the names that need an extra (``SmoothTransport``, ``SmoothAdapter``, ...)
raise an :class:`ImportError` naming the extra to install when it is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import testing, window
    from ._core import RetryEvent
    from ._errors import InfeasibleWindow, RateLimited, SmoothError
    from ._httpx import AsyncSmoothTransport, SmoothTransport
    from ._requests import SmoothAdapter
    from .cache import JitteredTTLCache, cached
    from .decorators import jittered, paced, retry
    from .hints import Hints, Quota, read_body_hints, read_hints
    from .jitter import offset_for
    from .pacer import Pacer
    from .policy import DEFAULT_POLICY, RetryBudget, RetryPolicy
    from .schedule import PoissonScheduler, Reconciler, TimeWindow, next_run, spread

__all__ = [
    "DEFAULT_POLICY",
    "AsyncSmoothTransport",
    "Hints",
    "InfeasibleWindow",
    "JitteredTTLCache",
    "Pacer",
    "PoissonScheduler",
    "Quota",
    "RateLimited",
    "Reconciler",
    "RetryBudget",
    "RetryEvent",
    "RetryPolicy",
    "SmoothAdapter",
    "SmoothError",
    "SmoothTransport",
    "TimeWindow",
    "__version__",
    "cached",
    "jittered",
    "next_run",
    "offset_for",
    "paced",
    "read_body_hints",
    "read_hints",
    "retry",
    "spread",
    "testing",
    "window",
]

# name -> (module, extra needed or None)
_LAZY: dict[str, tuple[str, str | None]] = {
    "AsyncSmoothTransport": ("_httpx", "httpx"),
    "DEFAULT_POLICY": ("policy", None),
    "Hints": ("hints", None),
    "InfeasibleWindow": ("_errors", None),
    "JitteredTTLCache": ("cache", None),
    "Pacer": ("pacer", None),
    "PoissonScheduler": ("schedule", None),
    "Quota": ("hints", None),
    "Reconciler": ("schedule", None),
    "RateLimited": ("_errors", None),
    "RetryBudget": ("policy", None),
    "RetryEvent": ("_core", None),
    "RetryPolicy": ("policy", None),
    "SmoothAdapter": ("_requests", "requests"),
    "SmoothError": ("_errors", None),
    "SmoothTransport": ("_httpx", "httpx"),
    "TimeWindow": ("schedule", None),
    "cached": ("cache", None),
    "jittered": ("decorators", None),
    "next_run": ("schedule", None),
    "paced": ("decorators", None),
    "retry": ("decorators", None),
    "spread": ("schedule", None),
    "offset_for": ("jitter", None),
    "read_hints": ("hints", None),
    "read_body_hints": ("hints", None),
}
_SUBMODULES = frozenset({"testing", "window"})
_EXTRA_OF = {"httpx": "httpx", "requests": "requests"}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("smoothclient")
        except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
            return "0+unknown"
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _LAZY:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    module_name, extra = _LAZY[name]
    try:
        module = importlib.import_module(f"{__name__}.{module_name}")
    except ModuleNotFoundError as exc:
        if extra is None or exc.name != _EXTRA_OF.get(extra):
            raise
        msg = f"smoothclient.{name} needs {extra}: pip install 'smoothclient[{extra}]'"
        raise ImportError(msg, name=exc.name) from exc
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
