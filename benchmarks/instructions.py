"""
Overhead in machine instructions: what smoothclient adds to a request, counted by valgrind.

Timings on a shared machine drift with its load; instruction counts do not, so they tell
whether a change made the hot path cheaper when the timed rows of ``overhead.py`` cannot.
Each stack runs N and 3N requests through httpx's ``MockTransport`` (bare, then wrapped by
``SmoothTransport``) under ``valgrind --tool=callgrind``; the difference of the two runs,
divided by 2N, is a request's count without the start-up.  "added" is wrapped minus bare.
The servers of ``overhead.py``: a plain one, and one stating its quota (IETF ``RateLimit``)
on every response, what is left counting down.  Skipped, with a message, without valgrind.

The pacer keeps time by a clock that moves 25 us each time it is read (a few times a request),
not by the wall's: under valgrind a request takes some fifty times as long, and a pacer reading
the wall would see answers milliseconds apart, which a server stating a whole second to its
reset does not send (the model reads each as a new window, a path a real client at this rate
rarely takes).  So the count is the same request's, and the same from run to run.
After a warm-up, the objects alive are frozen out of the garbage collector's generations
(``gc.freeze``): a full collection walks them all, and whether one falls in the N run or the
3N run otherwise moved the difference by more than a whole hot-path change saves.  The
young collections a request's allocations cause are still counted.
Run: python benchmarks/instructions.py [--requests 500]
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable

import httpx
from overhead import ok, ok_with_quota  # the same servers as the timed rows

import smoothclient

SERVERS = {"plain": ok, "RateLimit": ok_with_quota}
#: Requests sent before those counted: the first ones learn what later ones reuse (the pacer's
#: probe, the header names seen, the quota's template).
WARM_UP = 20


def ticks(step: float = 25e-6) -> Callable[[], float]:
    """A clock that moves ``step`` seconds each time it is read (in C: it adds no count)."""
    return functools.partial(next, itertools.count(1000.0, step))


def child(server: str, wrapped: bool, requests: int) -> None:
    """Send ``requests`` requests (run under valgrind)."""
    transport: httpx.BaseTransport = httpx.MockTransport(SERVERS[server])
    if wrapped:
        pacer = smoothclient.Pacer()
        # set after construction: a clock given to Pacer() is read through a guard against
        # steps back that the default clock (time.monotonic, which cannot step back) skips
        pacer.clock = ticks()
        transport = smoothclient.SmoothTransport(transport, pacer=pacer)
    with httpx.Client(transport=transport) as client:
        for _ in range(WARM_UP):
            client.get("http://api.test/x")
        # what is alive now (the imports, the client) is moved out of the collector's sight:
        # a full collection walks it all, and whether one falls in a run depends on N (one
        # in the 3N run and none in the N run moved a request's count by 10,000 and more)
        gc.freeze()
        for _ in range(requests):
            client.get("http://api.test/x")


def count(server: str, wrapped: bool, requests: int) -> int:
    """Instructions of a whole child run."""
    args = [sys.argv[0], "--child", server, "--requests", str(requests)]
    if wrapped:
        args.append("--wrapped")
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *args],
        capture_output=True,
        text=True,
        check=True,
        # string hashes differ run to run (dict probes with them): about 2,000 instructions a
        # request either way, as much as a small hot-path change saves
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no count in valgrind's output: {done.stderr[-500:]}")
    return int(found.group(1))


def per_request(server: str, wrapped: bool, n: int) -> float:
    return (count(server, wrapped, 3 * n) - count(server, wrapped, n)) / (2 * n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--child", choices=sorted(SERVERS), help=argparse.SUPPRESS)
    parser.add_argument("--wrapped", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.wrapped, args.requests)
        return
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: instruction counts skipped (apt-get install valgrind)")
        return
    print("| server | bare, instructions per request | smoothclient | added |")
    print("|---|---|---|---|")
    for server in SERVERS:
        bare = per_request(server, False, args.requests)
        smooth = per_request(server, True, args.requests)
        print(f"| {server} | {bare:,.0f} | {smooth:,.0f} | +{smooth - bare:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
