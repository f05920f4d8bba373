"""
How the package's names load lazily: the front's and every namespace's (one getter).

At the bottom of the package: the front (``smoothclient/__init__.py``) and the namespaces
(``smoothclient.spreading``, ``.telemetry``, ``.pacing``) build their ``__getattr__`` from it,
and the optional edges (``smoothclient.httpx2``, ``smoothclient.aiohttp``) name a missing
extra with it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["load", "missing_extra", "namespace"]

#: The packages each extra brings, to tell a missing extra from any other import failure.
EXTRA_PACKAGES = {
    "httpx": frozenset({"httpx", "httpcore", "anyio"}),
    "httpx2": frozenset({"httpx2", "httpcore2", "anyio", "h11", "idna", "truststore"}),
    "requests": frozenset({"requests", "urllib3"}),
    "aiohttp": frozenset({"aiohttp", "multidict", "yarl", "aiohappyeyeballs", "aiosignal"}),
    "prometheus": frozenset({"prometheus_client"}),
    "otel": frozenset({"opentelemetry"}),
}


def load(package: str, name: str, module_name: str, extra: str | None, into: dict[str, Any]) -> Any:
    """
    ``name`` from ``package.module_name``, kept in ``into`` (a package's globals) once loaded.

    A missing extra is an :class:`ImportError` saying which to install.  The subpackages'
    lazy names (``smoothclient.spreading``, ``.telemetry``, ``.pacing``) load through it too.
    """
    try:
        module = importlib.import_module(f"{package}.{module_name}")
    except ModuleNotFoundError as exc:
        if extra is None:
            raise
        raise missing_extra(exc, extra, f"{package}.{name}") from exc
    value = getattr(module, name)
    into[name] = value
    return value


def namespace(
    package: str, names: dict[str, str], into: dict[str, Any], extras: dict[str, str] | None = None
) -> Callable[[str], Any]:
    """
    A subpackage's module ``__getattr__``: ``name`` from ``package.names[name]``, loaded once.

    ``extras``: the extra a module of the subpackage needs (``{"prometheus": "prometheus"}``).
    """

    def lookup(name: str) -> Any:
        if name not in names:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        module = names[name]
        return load(package, name, module, (extras or {}).get(module), into)

    return lookup


def missing_extra(exc: ModuleNotFoundError, extra: str, what: str) -> ImportError:
    """
    The error saying ``what`` needs ``extra``, when ``exc`` is one of its packages missing.

    Any other missing module is raised as it was (a broken install is not a missing extra).
    """
    if (exc.name or "").partition(".")[0] not in EXTRA_PACKAGES[extra]:
        raise exc
    msg = f"{what} needs {extra}: pip install 'smoothclient[{extra}]'"
    return ImportError(msg, name=exc.name)
