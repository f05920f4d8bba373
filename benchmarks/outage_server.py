"""
The server of benchmarks/outage.py: a plain asyncio HTTP/1.1 server with finite capacity and a
timeline of outages, logging every request's arrival, answer time and status.

Run as a child process: ``python benchmarks/outage_server.py PLAN_JSON``.  It binds a free
127.0.0.1 port, prints ``PORT <n>``, then reads commands on stdin:

- ``GO <epoch>``: the timeline's zero (``time.time()``); the log so far (warm-ups, which
  see a healthy server) is dropped;
- ``STOP``: print ``LOG <json>`` (``[[arrival, answered, status], ...]``, seconds from zero) and
  exit.

The plan (JSON): ``kind`` and ``phases`` (``[start, end, mode]``, seconds from zero):

- ``kind "bucket"``: ``capacity`` req/s, a token bucket of ``burst``; over it, 503 at once.
  Answers are immediate (no service time).
- ``kind "pool"``: ``workers`` workers, each taking ``workers / capacity`` s a request, a FIFO
  queue of at most ``queue`` (beyond: 503 at once, free); a request that waited more than
  ``queue_timeout`` s for its worker is still worked on (its cost is paid) and answered 503.

Modes of a phase (outside every phase: healthy):

- ``down``: every request 503 at once, no Retry-After, costs nothing;
- ``down-ra:N``: the same with ``Retry-After: N``;
- ``brownout:P``: after the capacity check, a share P of the requests fail (503): the k-th
  request admitted in the brownout fails when ``(draw + k * 0.618...) mod 1 < P`` (a golden
  ratio sequence, ``draw`` random per run), so any n admitted requests hold within a couple of
  n * P failures.  A coin flipped per request (as this server did before) gave each run's
  goodput a spread of its own of about 1.6/s (the binomial's, over 10 s of 100 admitted a
  second), as large as the differences between clients the column is read for;
- ``refuse``: the port stops listening and every open connection is reset; at the phase's end
  it listens again on the same port.  Refused connections are not seen here (the clients
  count them).
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import sys
import time
from typing import Any

OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"
#: The golden ratio's fraction: its multiples mod 1 fill [0, 1) as evenly as any sequence can.
GOLDEN = 0.6180339887498949
UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"


def _unavailable(retry_after: str | None) -> bytes:
    if retry_after is None:
        return UNAVAILABLE
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nretry-after: "
        + retry_after.encode()
        + b"\r\ncontent-length: 0\r\n\r\n"
    )


class Server:
    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.kind: str = plan["kind"]
        self.capacity = float(plan["capacity"])
        self.burst = float(plan.get("burst", 10))
        self.draw = random.random()  # (the brownout's sequence: see the module's docstring)
        self.tokens = self.burst
        self.refilled = time.time()
        self.phases: list[tuple[float, float, str]] = [tuple(p) for p in plan["phases"]]
        self.t0 = time.time()
        self.started = False  # GO came: the timeline runs
        self.log: list[tuple[float, float, int]] = []
        self.conns: set[Conn] = set()
        self.listener: asyncio.base_events.Server | None = None
        self.port = 0
        self.queue: asyncio.Queue[tuple[float, Conn]] | None = None
        self.tasks: set[asyncio.Task[None]] = set()  # kept from the garbage collector

    # ------------------------------------------------------------ timeline

    def mode(self, now: float) -> str:
        if not self.started:  # (the warm-ups before GO: healthy, whenever they come)
            return ""
        rel = now - self.t0
        for start, end, mode in self.phases:
            if start <= rel < end:
                return mode
        return ""

    def record(self, arrival: float, answered: float, status: int) -> None:
        self.log.append((arrival - self.t0, answered - self.t0, status))

    def take_token(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.refilled) * self.capacity)
        self.refilled = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    # ------------------------------------------------------------ requests

    def handle(self, conn: Conn) -> None:
        """A request's head arrived on ``conn``: answer it now or queue it."""
        now = time.time()
        mode = self.mode(now)
        if mode.startswith("down"):
            retry_after = mode.partition(":")[2] or None
            conn.answer(_unavailable(retry_after))
            self.record(now, now, 503)
            return
        if self.kind == "pool":
            assert self.queue is not None
            try:
                self.queue.put_nowait((now, conn))
            except asyncio.QueueFull:
                conn.answer(UNAVAILABLE)
                self.record(now, now, 503)
            return
        status = 200 if self.take_token(now) else 503
        if status == 200 and mode.startswith("brownout"):
            self.draw = (self.draw + GOLDEN) % 1.0
            if self.draw < float(mode.partition(":")[2]):
                status = 503
        conn.answer(OK if status == 200 else UNAVAILABLE)
        self.record(now, now, status)

    async def worker(self, service: float, queue_timeout: float) -> None:
        assert self.queue is not None
        free_at = 0.0
        while True:
            arrival, conn = await self.queue.get()
            start = max(time.time(), free_at)
            free_at = start + service  # absolute: sleeping late does not lower capacity
            delay = free_at - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            status = 200 if start - arrival <= queue_timeout else 503
            conn.answer(OK if status == 200 else UNAVAILABLE)
            self.record(arrival, time.time(), status)

    # ------------------------------------------------------------ listening

    async def listen(self) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(4096)
        self.port = sock.getsockname()[1]
        self.listener = await loop.create_server(lambda: Conn(self), sock=sock)

    def refuse(self) -> None:
        """Stop listening and reset every open connection."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        for conn in list(self.conns):
            conn.reset()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        if self.kind == "pool":
            workers = int(self.plan["workers"])
            self.queue = asyncio.Queue(maxsize=int(self.plan["queue"]))
            service = workers / self.capacity
            for _ in range(workers):
                task = loop.create_task(self.worker(service, float(self.plan["queue_timeout"])))
                self.tasks.add(task)
        await self.listen()
        print(f"PORT {self.port}", flush=True)
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = (await reader.readline()).decode().strip()
            if line.startswith("GO "):
                self.t0 = float(line.split()[1])
                self.started = True
                self.log.clear()
                for start, end, mode in self.phases:
                    if mode == "refuse":
                        loop.call_later(max(0.0, self.t0 + start - time.time()), self.refuse)
                        loop.call_later(
                            max(0.0, self.t0 + end - time.time()),
                            lambda: self.tasks.add(loop.create_task(self.listen())),
                        )
            elif line == "STOP" or not line:
                rows = [[round(a, 4), round(d, 4), s] for a, d, s in self.log]
                sys.stdout.write("LOG " + json.dumps(rows, separators=(",", ":")) + "\n")
                sys.stdout.flush()
                return


class Conn(asyncio.Protocol):
    """One client connection: parses request heads, answers in order, keeps alive."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = b""
        self.busy = False  # a request of this connection is being answered
        self.close_after = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.conns.discard(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.next_request()

    def next_request(self) -> None:
        if self.busy or self.transport is None:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].lower()
        body = 0
        at = head.find(b"content-length:")
        if at >= 0:
            body = int(head[at + 15 :].split(b"\r\n", 1)[0])
        if len(self.buf) < end + 4 + body:
            return
        self.buf = self.buf[end + 4 + body :]
        self.close_after = b"connection: close" in head
        self.busy = True
        self.server.handle(self)

    def answer(self, response: bytes) -> None:
        self.busy = False
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(response)
        if self.close_after:
            self.transport.close()
            return
        if self.buf:
            self.next_request()

    def reset(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def main() -> None:
    plan = json.loads(sys.argv[1])
    asyncio.run(Server(plan).run())


if __name__ == "__main__":
    main()
