"""
Server binaries the tests and benchmarks need (nginx, HAProxy), from Debian when missing.

The system's where installed; otherwise, running as root with ``apt-get`` (a fresh Debian
machine, CI), the package is installed once: no manual step.  Where neither works,
:class:`Unavailable` says why (a test skips on it, a benchmark leaves the row out).  The
packaged services are never used: every server the callers run is a child process of theirs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Sequence

__all__ = ["LOCK_WAIT", "Unavailable", "ensure", "ensure_haproxy", "ensure_nginx"]

_LOCK = threading.Lock()
_FOUND: dict[str, str] = {}


class Unavailable(RuntimeError):
    """No such binary here, and no way to install it."""


def _which(name: str) -> str | None:
    places = (f"/usr/sbin/{name}", f"/sbin/{name}")
    return shutil.which(name) or next((p for p in places if os.access(p, os.X_OK)), None)


#: How long apt waits for another process's lock on the package database (seconds).
LOCK_WAIT = 300


def ensure(name: str, packages: Sequence[str]) -> str:
    """
    The path of the binary ``name``: the system's, or installed from Debian when root.

    Installing runs ``apt-get update`` once, then ``apt-get install -y`` of the first of
    ``packages`` apt has a candidate for.  Several processes may install at once (the lanes
    of a benchmark): apt waits for the others' lock, and a binary that another installed
    meanwhile is taken whatever apt said.
    """
    with _LOCK:
        found = _FOUND.get(name) or _which(name) or _install(name, packages)
        _FOUND[name] = found
        return found


def ensure_nginx() -> str:
    """``nginx``: Debian's ``nginx-light`` (nginx with the echo module) when missing."""
    return ensure("nginx", ("nginx-light", "nginx"))


def ensure_haproxy() -> str:
    """``haproxy``, Debian's package when missing."""
    return ensure("haproxy", ("haproxy",))


def _install(name: str, packages: Sequence[str]) -> str:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        msg = f"{name} is not installed (apt-get install {packages[0]}) and cannot be here"
        raise Unavailable(msg)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def apt(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
            timeout=timeout,
        )

    wait = ("-o", f"DPkg::Lock::Timeout={LOCK_WAIT}")  # (another process installing)
    apt("apt-get", *wait, "update", timeout=300)
    package = current = None
    for line in apt("apt-cache", "policy", *packages, timeout=60).stdout.splitlines():
        if line and not line.startswith(" "):
            current = line.rstrip(":")
        elif "Candidate:" in line and "(none)" not in line and package is None:
            package = current
    if package is None:
        msg = f"apt has no candidate for {' or '.join(packages)}"
        raise Unavailable(msg)
    done = apt("apt-get", *wait, "install", "-y", "--no-install-recommends", package, timeout=600)
    found = _which(name)
    if found is None:  # (installed by another process meanwhile: found, whatever apt said)
        msg = f"apt-get install {package} failed: {done.stdout[-500:]}"
        raise Unavailable(msg)
    return found
