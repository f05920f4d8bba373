"""
Cut a sync attempt at the call's deadline: what a socket's own timeout cannot do.

A socket timeout bounds one read.  A server that drips its header block a byte at a time
answers every read in time and holds the attempt as long as it likes.  Async edges cut the
whole attempt with a cancel scope; a sync edge has no such scope, so a :class:`Watchdog`
thread shuts the attempt's socket down when the deadline passes.  The blocked read returns at
once, the attempt fails, and the edge reports a read timeout.

One thread per watchdog, started on the first watch and gone after a second with nothing to
watch; a watch costs an object and a deque append, no lock.  The deadline is met to within
:data:`TICK`.  A process forked from one with a watchdog running starts its own, and never
fires the watches it inherited (their sockets are the parent's connections too).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["TICK", "Watch", "Watchdog"]

#: How often the watchdog looks at its watches (seconds): the cut's lateness at most.
TICK = 0.05
#: The thread ends after this long with nothing to watch (seconds).
IDLE = 1.0


def _shut(sock: socket.socket) -> None:
    """Shut ``sock`` down both ways (the plain socket's call: a TLS socket keeps its state)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class Watch:
    """
    One attempt's deadline, and the socket to shut when it passes.

    ``cut`` says whether it was shut (the edge then raises its read timeout); ``done`` ends
    the watch (the attempt finished in time).
    """

    __slots__ = ("cut", "deadline", "done", "sock", "watchdog")

    def __init__(self, watchdog: Watchdog, deadline: float) -> None:
        """Watch until ``deadline`` (on the watchdog's clock)."""
        self.watchdog = watchdog
        self.deadline = deadline
        self.sock: socket.socket | None = None
        self.cut = False
        self.done = False

    def attach(self, sock: socket.socket | None) -> None:
        """The socket the attempt now reads from: watched until :attr:`done`."""
        if sock is None or self.done:
            return
        self.sock = sock
        self.watchdog.add(self)
        if self.cut:  # the deadline passed before the socket was known
            _shut(sock)

    def fire(self) -> None:
        """The deadline passed: shut the socket, if the attempt has one yet."""
        self.cut = True
        sock = self.sock
        if sock is not None and not self.done:
            _shut(sock)


class Watchdog:
    """
    A thread that fires the watches whose deadline passed (see the module).

    Args:
        clock: the clock deadlines are on (default ``time.monotonic``).
        tick: how often it looks (seconds).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, tick: float = TICK) -> None:
        """Nothing runs until the first watch."""
        self.clock = clock
        self.tick = tick
        self._watches: deque[Watch] = deque()
        self._lock = threading.Lock()
        self._running = False
        self._pid = os.getpid()

    def watch(self, deadline: float) -> Watch:
        """A watch of one attempt until ``deadline``: attach its socket when it has one."""
        return Watch(self, deadline)

    def add(self, watch: Watch) -> None:
        """Look after ``watch`` (its thread started if none runs)."""
        if self._pid != os.getpid():
            self._forked()
        self._watches.append(watch)
        if not self._running:
            self._start()

    def _forked(self) -> None:
        """In a forked child: the thread (and any lock it held) stayed in the parent."""
        self._watches.clear()
        self._lock = threading.Lock()
        self._running = False
        self._pid = os.getpid()

    def _start(self) -> None:
        with self._lock:
            if self._running:
                return
            thread = threading.Thread(target=self._run, name="smoothclient-watchdog", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # the interpreter is shutting down: reads stay bounded one by one
                return
            self._running = True

    def _run(self) -> None:
        watches = self._watches
        quiet_since = self.clock()
        while True:
            time.sleep(self.tick)
            now = self.clock()
            for _ in range(len(watches)):
                watch = watches.popleft()
                if watch.done:
                    continue
                if now >= watch.deadline:
                    watch.fire()
                else:
                    watches.append(watch)
            if watches:
                quiet_since = now
            elif now - quiet_since >= IDLE:
                with self._lock:
                    self._running = False
                    if not watches:  # a watch added from here on starts a thread again
                        return
                    self._running = True
