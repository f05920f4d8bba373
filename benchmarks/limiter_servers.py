"""
Real rate limiters on 127.0.0.1, each started on a free port for a ``with`` block.

Each context manager yields a :class:`Running` server: its base URL, the :class:`Limit` it
enforces (so the ideal drain time can be computed) and the arrivals it saw (server side).

- :func:`nginx_limit_req`: nginx's ``limit_req`` (the system ``nginx``, installed from Debian's
  ``nginx-light`` when missing and root).  Bare 429s: no ``Retry-After``, no quota headers.
  With ``retry_after=N`` its 429s go through ``error_page`` to a location that adds
  ``Retry-After: N`` and nothing else: that is the "Retry-After only" server.
- :func:`nginx_limit_conn`: nginx's ``limit_conn``, a concurrency limit: at most N requests
  at a time, each served in a fixed time (the echo module's ``echo_sleep``; Debian's
  ``nginx-light`` has it), bare 429s for the rest.
- :func:`slowapi_server`: a Starlette app limited by slowapi (on the ``limits`` package),
  ``fixed-window`` or ``moving-window``, ``headers_enabled=True``, served by uvicorn.
- :func:`haproxy_stick_table`: HAProxy's stick table (``http_req_rate`` over 1 s, over the
  limit denied with 429; the system ``haproxy``, installed from Debian when missing and
  root). Bare 429s. Its rate counts denied requests too: knocking renews the penalty.
- :func:`express_rate_limit`: express + express-rate-limit (``benchmarks/express/server.js``,
  run by the system ``node``; its npm packages installed with ``npm ci`` into
  ``benchmarks/express/node_modules`` when missing), default MemoryStore (a fixed window from
  the first hit), in one header mode: ``draft-6``, ``draft-7``, ``draft-8`` or ``legacy``
  (X-RateLimit-*); its 429s carry ``Retry-After``.  Skipped without node and npm.
- :func:`limited_server`: smoothclient's own token-bucket test server, as a control.

The Python servers run in a child process (so they never compete with the client for the
GIL) that binds its own socket and talks to us over stdin/stdout: ``stats`` (arrivals as JSON),
``reset`` (a fresh limiter, arrivals cleared), EOF (stop).  nginx runs as a ``master_process
off`` child in a temp dir (config, pid, logs, temp paths, document root); its access log
(``$msec $status``, in the temp dir) is how arrivals are counted, and "reset" restarts it.

How many requests each limiter admits at once, and how fast afterwards (checked by
``python benchmarks/limiter_servers.py``, which also prints the headers each one sends):

- nginx ``rate=R burst=B nodelay``: a leaky bucket counted in milliseconds; it admits ``B + 1``
  at once (the first request finds an empty bucket, then ``B`` more fit), then one per ``1/R``
  s: a token bucket of ``B + 1`` tokens refilled at ``R``/s.
- nginx ``rate=R burst=B`` (no ``nodelay``, nginx's default): the same bucket, but a request
  that finds it full up to ``B`` waits in a queue and is answered when its turn comes (one per
  ``1/R`` s); beyond that, rejected.  A client sees slow successes, not only 429s.
- nginx ``limit_conn N``: N at a time, whatever the rate; a request finding N being served is
  rejected at once.  How fast it admits is N over the service time.
- slowapi / limits fixed window ``L/W``: the window starts at the first hit after the last one
  expired (in-memory storage: not aligned to the clock); every hit counts, admitted or not.
- slowapi / limits moving window ``L/W``: at most ``L`` admitted in any ``W`` seconds (only
  admitted hits are recorded).
- express-rate-limit ``limit: L, windowMs: W`` (MemoryStore): a fixed window of ``W`` from the
  first hit after the last one ended (not aligned to the clock); every hit counts, admitted
  or not.  Its reset (``RateLimit-Reset``, ``t=``, ``reset=``, ``Retry-After``) is the time
  left rounded up to whole seconds; ``X-RateLimit-Reset`` the window's end, epoch seconds
  rounded up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from smoothclient.tools.debian import Unavailable
from smoothclient.tools.debian import ensure_haproxy as _ensure_haproxy
from smoothclient.tools.debian import ensure_nginx as _ensure_nginx
from smoothclient.tools.nginx import conf as nginx_conf
from smoothclient.tools.server import LimitedServer

__all__ = [
    "Limit",
    "Running",
    "Skip",
    "ensure_nginx",
    "express_rate_limit",
    "limited_server",
    "nginx_limit_conn",
    "nginx_limit_req",
    "probe",
    "slowapi_server",
]

START_TIMEOUT = 20.0  # seconds a server may take to start listening
STOP_TIMEOUT = 5.0


class Skip(Exception):
    """This server cannot run here (say, no nginx and no way to install it)."""


@dataclass(frozen=True)
class Limit:
    """
    What a limiter allows, enough to compute the ideal drain time of a herd.

    ``kind`` is ``"bucket"`` (``free`` tokens at once, then ``rate`` per second),
    ``"fixed-window"`` or ``"moving-window"`` (``free`` = the limit L per ``window`` W seconds),
    or ``"concurrency"`` (``free`` requests at a time, each served in ``window`` seconds).
    """

    kind: str
    free: int
    rate: float = 0.0
    window: float = 0.0
    note: str = ""

    def ideal(self, calls: int) -> float:
        """
        The earliest time the last of ``calls`` simultaneous calls can succeed.

        Bucket: ``max(0, calls - free) / rate``.  Windows (fixed or moving): the k-th success
        (1-based) cannot come before ``floor((k - 1) / L) * W``, so the last one
        ``ceil(calls / L - 1) * W`` (= ``(ceil(calls / L) - 1) * W``).  Concurrency: waves of
        ``free``, each served in ``window``: ``ceil(calls / free) * window``.  All are lower
        bounds that assume the client knows exactly when capacity returns.
        """
        if self.kind == "bucket":
            return max(0, calls - self.free) / self.rate
        if self.kind == "concurrency":
            return math.ceil(calls / self.free) * self.window
        return max(0, math.ceil(calls / self.free) - 1) * self.window

    def unavoidable_429s(self, calls: int) -> int:
        """A herd that fires all at once gets at least this many 429s (the first wave)."""
        return max(0, calls - self.free)

    def describe(self) -> str:
        """A short human description."""
        if self.kind == "bucket":
            return f"bucket {self.rate:g}/s, {self.free} at once"
        if self.kind == "concurrency":
            return f"{self.free} at a time, {self.window * 1000:g} ms each"
        return f"{self.kind} {self.free} per {self.window:g}s"


@dataclass
class Running:
    """A started server: its URL, its limit and how to read (and reset) what it saw."""

    name: str
    url: str
    limit: Limit
    _arrivals: Callable[[], list[tuple[float, int]]] = field(repr=False)
    _reset: Callable[[bool], str] = field(repr=False)

    def arrivals(self) -> list[tuple[float, int]]:
        """``(epoch seconds, status)`` of every request seen since the last reset."""
        return self._arrivals()

    def counts(self) -> Counter[int]:
        """How many answers of each status since the last reset."""
        return Counter(status for _, status in self.arrivals())

    def reset(self, *, hard: bool = False) -> None:
        """
        A fresh limiter and an empty arrival log; ``url`` may change.

        ``hard=True`` restarts the server on a new port, so that clients still running from
        an earlier cell (threads cannot be cancelled) cannot reach the new limiter.  nginx is
        always restarted (it is quick); the Python servers reset in place unless ``hard``.
        """
        self.url = self._reset(hard)


# ---------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            msg = f"server exited with {proc.returncode} before listening on {port}"
            raise RuntimeError(msg)
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    msg = f"nothing listens on 127.0.0.1:{port} after {timeout}s"
    raise RuntimeError(msg)


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)


# ---------------------------------------------------------------- nginx


def ensure_nginx() -> str:
    """The ``nginx`` binary (smoothclient.tools.nginx: the system's, else Debian's); or Skip."""
    try:
        return _ensure_nginx()
    except Unavailable as exc:
        raise Skip(str(exc)) from exc


#: What goes in the ``http`` block (the frame around it: smoothclient.tools.nginx.conf).
_NGINX_HTTP = """\
    access_log off;
    keepalive_requests 100000;
    keepalive_timeout 120s;
    server_tokens off;
    log_format arrivals '$msec $status';
{limiter}    server {{
        listen 127.0.0.1:{port} reuseport;
        server_name bench;
        access_log {tmp}/access.log arrivals;
        root {tmp}/www;
        location / {{
{location}        }}
{extra}    }}
"""

_LIMIT_REQ = """\
    limit_req_zone $binary_remote_addr zone=bench:1m rate={rate}r/s;
    limit_req_status 429;
    limit_req_log_level warn;
"""
# a static file, not "return": return runs before limit_req and nothing is limited
_LIMIT_REQ_LOCATION = "            limit_req zone=bench burst={burst}{nodelay};\n"
_LIMIT_REQ_NO_BURST = "            limit_req zone=bench;\n"
_RETRY_AFTER_PAGE = "            error_page 429 @throttled;\n"
_RETRY_AFTER_LOCATION = """\
        location @throttled {{
            add_header Retry-After {seconds} always;
            return 429 "slow down\\n";
        }}
"""
_LIMIT_CONN = """\
    limit_conn_zone $server_name zone=bench:1m;
    limit_conn_status 429;
    limit_conn_log_level warn;
"""
_LIMIT_CONN_LOCATION = """\
            limit_conn bench {conns};
            echo_sleep {service};
            echo ok;
"""
#: Where Debian's nginx packages put the echo module (nginx-light has it built as a module).
ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"


@contextlib.contextmanager
def nginx_limit_req(
    rate: int = 10,
    burst: int = 5,
    *,
    retry_after: int | None = None,
    name: str = "nginx",
    queue: bool = False,
    service: float = 0.0,
) -> Iterator[Running]:
    """
    nginx ``limit_req zone rate=RATEr/s; limit_req burst=BURST nodelay; limit_req_status 429``.

    Admits ``burst + 1`` at once (see the module docstring); ``burst=0`` is nginx's default, no
    ``burst`` at all: one request every ``1/rate`` s, one a millisecond early refused.
    ``retry_after=N`` adds ``Retry-After: N`` to its 429s (through ``error_page``), nothing
    else.  ``queue``: no ``nodelay`` (nginx's default): requests over the rate wait in its
    queue, up to ``burst``.
    ``service``: what it admits takes that long to serve (``echo_sleep``: an application
    behind the gateway), while its 429s come at once.
    """
    location = _LIMIT_REQ_LOCATION.format(burst=burst, nodelay="" if queue else " nodelay")
    if not burst:  # nginx refuses "burst=0": no burst is no burst parameter at all
        location = _LIMIT_REQ_NO_BURST
    modules = ""
    if service:
        location += f"            echo_sleep {service};\n            echo ok;\n"
        modules = _echo_module()
    if retry_after is not None:
        location += _RETRY_AFTER_PAGE
    limit = Limit(
        "bucket",
        burst + 1,
        rate=float(rate),
        note=f"nginx limit_req rate={rate}r/s burst={burst}{'' if queue else ' nodelay'}",
    )
    with _nginx(
        name,
        limit,
        limiter=_LIMIT_REQ.format(rate=rate),
        location=location,
        extra="" if retry_after is None else _RETRY_AFTER_LOCATION.format(seconds=retry_after),
        modules=modules,
    ) as running:
        yield running


@contextlib.contextmanager
def nginx_limit_conn(
    conns: int = 5, service: float = 0.1, *, name: str = "nginx-conn"
) -> Iterator[Running]:
    """
    nginx ``limit_conn`` (``limit_conn_status 429``): at most ``conns`` requests at a time.

    Each request takes ``service`` seconds (the echo module's ``echo_sleep``); one that finds
    ``conns`` others being served is answered 429 at once, bare.  A concurrency limit, as
    Stripe's "concurrency" limiters are: how fast it admits depends on how fast it serves.
    """
    modules = _echo_module()
    limit = Limit(
        "concurrency",
        conns,
        window=service,
        note=f"nginx limit_conn {conns}, {service * 1000:g} ms a request",
    )
    with _nginx(
        name,
        limit,
        limiter=_LIMIT_CONN,
        location=_LIMIT_CONN_LOCATION.format(conns=conns, service=service),
        modules=modules,
    ) as running:
        yield running


def _echo_module() -> str:
    """The line that loads nginx's echo module (``echo_sleep``); or Skip without it."""
    if not os.path.exists(ECHO_MODULE):
        ensure_nginx()
        if not os.path.exists(ECHO_MODULE):
            msg = f"nginx has no echo module here ({ECHO_MODULE}: install nginx-light)"
            raise Skip(msg)
    return f"load_module {ECHO_MODULE};\n"


@contextlib.contextmanager
def _nginx(
    name: str, limit: Limit, *, limiter: str, location: str, extra: str = "", modules: str = ""
) -> Iterator[Running]:
    """An nginx child enforcing ``limit`` through the configuration pieces given."""
    binary = ensure_nginx()

    def command(tmp: Path, port: int) -> list[str]:
        http = _NGINX_HTTP.format(
            tmp=tmp, port=port, limiter=limiter, location=location, extra=extra
        )
        (tmp / "nginx.conf").write_text(nginx_conf(tmp, http, modules=modules, connections=4096))
        return [binary, "-p", str(tmp), "-c", str(tmp / "nginx.conf"), "-e", str(tmp / "error.log")]

    with _logged_child(name, limit, "nginx", command, to_log=False) as running:
        yield running


@contextlib.contextmanager
def _logged_child(
    name: str,
    limit: Limit,
    what: str,
    command: Callable[[Path, int], list[str]],
    *,
    to_log: bool,
    ready: Callable[[str], None] | None = None,
) -> Iterator[Running]:
    """
    A server child (nginx, HAProxy, node) in a temp dir, restarted on a fresh port at each reset.

    ``command(tmp, port)`` writes its configuration and gives its argv; it logs each request as
    ``epoch.ms status`` to ``tmp/access.log`` (itself, or through its stdout: ``to_log``).
    ``ready(url)``, when given, is called once it listens and raises RuntimeError until it
    answers (say, an unlimited health path).
    """
    tmp = Path(tempfile.mkdtemp(prefix=f"limiter-{what}-"))
    (tmp / "www").mkdir()
    (tmp / "www" / "work").write_text("ok\n")
    (tmp / "www" / "index.html").write_text("ok\n")
    state: dict[str, Any] = {"proc": None, "log": None, "since": 0.0}

    def start() -> str:
        for _ in range(5):  # the port is picked before the server binds it: retry a taken one
            port = _free_port()
            argv = command(tmp, port)
            (tmp / "access.log").write_text("")
            log = open(tmp / "access.log", "a") if to_log else None  # noqa: SIM115
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log if log is not None else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                _wait_listening(port, proc, START_TIMEOUT)
                if ready is not None:
                    ready(f"http://127.0.0.1:{port}")
            except RuntimeError:
                _stop(proc)
                if log is not None:
                    log.close()
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                if "Address already in use" in err or "cannot bind" in err:
                    continue
                msg = f"{what} did not start: {err.strip()[-800:]}"
                raise RuntimeError(msg) from None
            # (the check that it listens is a connection HAProxy logs as a bad request)
            state["proc"], state["log"], state["since"] = proc, log, time.time()
            return f"http://127.0.0.1:{port}"
        msg = f"{what}: no free port after 5 tries"
        raise RuntimeError(msg)

    def stop() -> None:
        if state["proc"] is not None:
            _stop(state["proc"])
            if state["proc"].stderr:
                state["proc"].stderr.close()
            state["proc"] = None
        if state["log"] is not None:
            state["log"].close()
            state["log"] = None

    def arrivals() -> list[tuple[float, int]]:
        out = []
        with open(tmp / "access.log") as f:
            for line in f:
                at, _, status = line.partition(" ")
                if status.strip().isdigit() and float(at) >= state["since"]:
                    out.append((float(at), int(status)))
        return out

    def reset(hard: bool) -> str:
        stop()
        return start()

    try:
        yield Running(name, start(), limit, arrivals, reset)
    finally:
        stop()
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- HAProxy


_HAPROXY_CONF = """\
global
    maxconn 8192
    log stdout format raw local0
defaults
    mode http
    log global
    log-format "%Ts.%ms %ST"
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-keep-alive 120s
frontend bench
    bind 127.0.0.1:{port}
    stick-table type ip size 1k expire 60s store http_req_rate({period}s)
    http-request track-sc0 src
    http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt {rate} }}
    http-request return status 200 content-type text/plain string "ok"
"""


def ensure_haproxy() -> str:
    """The ``haproxy`` binary (the system's, else Debian's); or Skip."""
    try:
        return _ensure_haproxy()
    except Unavailable as exc:
        raise Skip(str(exc)) from exc


@contextlib.contextmanager
def haproxy_stick_table(
    rate: int = 10, period: int = 1, *, name: str = "haproxy"
) -> Iterator[Running]:
    """
    HAProxy's stick table: 429 while the client's request rate over ``period`` s is > ``rate``.

    ``http_req_rate`` counts every request, the denied ones too (a sliding window, as
    HAProxy's rate counters are): a client that knocks while denied keeps itself denied.
    """
    binary = ensure_haproxy()
    limit = Limit(
        "moving-window",
        rate,
        window=float(period),
        note=f"HAProxy stick table http_req_rate({period}s) > {rate}: denied requests count",
    )

    def command(tmp: Path, port: int) -> list[str]:
        (tmp / "haproxy.cfg").write_text(_HAPROXY_CONF.format(port=port, rate=rate, period=period))
        return [binary, "-db", "-f", str(tmp / "haproxy.cfg")]

    with _logged_child(name, limit, "haproxy", command, to_log=True) as running:
        yield running


# ---------------------------------------------------------------- express-rate-limit (node)

#: The node server and its pinned packages (package.json, package-lock.json).
EXPRESS_DIR = Path(__file__).resolve().parent / "express"
#: The header modes ``benchmarks/express/server.js`` knows.
EXPRESS_MODES = ("draft-6", "draft-7", "draft-8", "legacy")


def _express_installed() -> bool:
    """Whether node_modules holds the exact versions package.json pins."""
    pins = json.loads((EXPRESS_DIR / "package.json").read_text())["dependencies"]
    for name, version in pins.items():
        installed = EXPRESS_DIR / "node_modules" / name / "package.json"
        if not installed.exists() or json.loads(installed.read_text())["version"] != version:
            return False
    return True


def ensure_express() -> str:
    """
    The ``node`` binary, with express and express-rate-limit in benchmarks/express; or Skip.

    Missing (or other) versions are installed with ``npm ci`` from package-lock.json, under a
    lock file in the temp dir (parallel lanes may all get here at once).
    """
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        msg = "express-rate-limit needs node and npm (Debian: apt install nodejs npm)"
        raise Skip(msg)
    if _express_installed():
        return node
    import fcntl

    with open(Path(tempfile.gettempdir()) / "smoothclient-bench-express.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _express_installed():
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=EXPRESS_DIR,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                timeout=300,
                check=False,
            )
            if done.returncode != 0 or not _express_installed():
                msg = f"npm ci in {EXPRESS_DIR} failed: {done.stderr.strip()[-800:]}"
                raise Skip(msg)
    return node


def _answers(url: str) -> None:
    """Wait until ``url`` answers 200 (RuntimeError after START_TIMEOUT)."""
    import urllib.request

    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            msg = f"{url} did not answer 200 within {START_TIMEOUT}s"
            raise RuntimeError(msg)
        time.sleep(0.05)


@contextlib.contextmanager
def express_rate_limit(
    mode: str = "draft-8", limit: int = 10, window: float = 1.0, *, name: str = ""
) -> Iterator[Running]:
    """
    express + express-rate-limit ``rateLimit({limit, windowMs})`` in one header ``mode``.

    ``draft-6``, ``draft-7`` or ``draft-8``: ``standardHeaders: mode, legacyHeaders: false``;
    ``legacy``: ``legacyHeaders: true, standardHeaders: false`` (X-RateLimit-*).  Default
    MemoryStore: a fixed window from the first hit, every hit counting; 429s carry
    ``Retry-After``.  Restarted on a fresh port at each reset (a fresh store).
    """
    if mode not in EXPRESS_MODES:
        msg = f"mode must be one of {', '.join(EXPRESS_MODES)}, got {mode!r}"
        raise ValueError(msg)
    node = ensure_express()
    window_ms = round(window * 1000)
    spec = Limit(
        "fixed-window",
        limit,
        window=window,
        note=f"express-rate-limit {limit} per {window_ms} ms, MemoryStore, headers {mode}",
    )

    def command(tmp: Path, port: int) -> list[str]:
        return [node, str(EXPRESS_DIR / "server.js"), str(port), mode, str(limit), str(window_ms)]

    with _logged_child(
        name or f"express-{mode}",
        spec,
        "node",
        command,
        to_log=True,
        ready=lambda url: _answers(url + "/healthz"),
    ) as running:
        yield running


# ---------------------------------------------------------------- Python servers in a child


class _Child:
    """A child process speaking the stats/reset protocol on its stdin/stdout."""

    def __init__(self, argv: list[str]) -> None:
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # its errors show on ours
            text=True,
            bufsize=1,
        )
        hello = self._line(START_TIMEOUT)
        self.url: str = hello["url"]

    def _line(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()))  # type: ignore[union-attr]
        reader.daemon = True
        reader.start()
        reader.join(timeout)
        if not box or not box[0]:
            _stop(self.proc)
            msg = f"server child {self.proc.args!r} did not answer within {timeout}s"
            raise RuntimeError(msg)
        return json.loads(box[0])  # type: ignore[no-any-return]

    def ask(self, command: str) -> dict[str, Any]:
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
            return self._line(30.0)

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                _stop(self.proc)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


@contextlib.contextmanager
def _child_running(name: str, argv: list[str], limit: Limit) -> Iterator[Running]:
    state = {"child": _Child(argv)}

    def arrivals() -> list[tuple[float, int]]:
        return [(at, status) for at, status in state["child"].ask("stats")["arrivals"]]

    def reset(hard: bool) -> str:
        if hard:
            state["child"].close()
            state["child"] = _Child(argv)
        else:
            state["child"].ask("reset")
        return state["child"].url

    try:
        yield Running(name, state["child"].url, limit, arrivals, reset)
    finally:
        state["child"].close()


@contextlib.contextmanager
def slowapi_server(
    strategy: str = "fixed-window", limit: int = 10, window: int = 1, *, name: str = ""
) -> Iterator[Running]:
    """A Starlette app behind slowapi's ``Limiter(strategy=..., headers_enabled=True)``."""
    if strategy not in ("fixed-window", "moving-window"):
        msg = f"strategy must be fixed-window or moving-window, got {strategy!r}"
        raise ValueError(msg)
    try:
        import slowapi  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        msg = f"slowapi server needs slowapi, starlette and uvicorn: {exc}"
        raise Skip(msg) from exc
    unit = {1: "second", 60: "minute", 3600: "hour"}.get(window) or f"{window} seconds"
    with _child_running(
        name or f"slowapi-{strategy}",
        ["slowapi", "--strategy", strategy, "--limit", f"{limit}/{unit}"],
        Limit(strategy, limit, window=float(window), note=f"slowapi {limit}/{unit} {strategy}"),
    ) as running:
        yield running


@contextlib.contextmanager
def limited_server(
    style: str = "ietf", rate: float = 10.0, burst: int = 5, *, name: str = ""
) -> Iterator[Running]:
    """smoothclient's own ``LimitedServer`` (token bucket), in a child process."""
    with _child_running(
        name or f"limited-{style}",
        ["limited", "--style", style, "--rate", str(rate), "--burst", str(burst)],
        Limit("bucket", burst, rate=rate, note=f"LimitedServer {style} {rate:g}/s burst {burst}"),
    ) as running:
        yield running


# ---------------------------------------------------------------- the child side


def _slowapi_app(strategy: str, limit: str, log: list[tuple[float, int]]) -> tuple[Any, Any]:
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.middleware import SlowAPIASGIMiddleware
    from slowapi.util import get_remote_address
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    limiter = Limiter(
        key_func=get_remote_address,
        default_limits=[limit],
        strategy=strategy,
        headers_enabled=True,
        storage_uri="memory://",
    )

    async def work(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    app = Starlette(routes=[Route("/{path:path}", work)])
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]
    app.add_middleware(SlowAPIASGIMiddleware)

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_counted(message: Any) -> None:
            if message["type"] == "http.response.start":
                log.append((time.time(), int(message["status"])))
            await send(message)

        await app(scope, receive, send_counted)

    return counted, limiter


def _serve_protocol(
    url: str, arrivals: Callable[[], list[tuple[float, int]]], reset: Callable[[], None]
) -> None:
    """Answer stats/reset on stdin until EOF."""
    print(json.dumps({"url": url}), flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "stats":
            print(json.dumps({"arrivals": arrivals()}), flush=True)
        elif command == "reset":
            reset()
            print(json.dumps({"ok": True}), flush=True)
        else:
            print(json.dumps({"error": command}), flush=True)


def _child_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["slowapi", "limited"])
    parser.add_argument("--strategy", default="fixed-window")
    parser.add_argument("--limit", default="10/second")
    parser.add_argument("--style", default="ietf")
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--burst", type=float, default=5.0)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    if args.kind == "limited":
        server = LimitedServer(args.rate, args.burst, args.style).start()

        def limited_log() -> list[tuple[float, int]]:
            # LimitedServer logs monotonic times: turn them into epoch seconds
            shift = time.time() - time.monotonic()
            return [(a.at + shift, a.status) for a in list(server.log)]

        try:
            _serve_protocol(server.url, limited_log, server.reset)
        finally:
            server.stop()
        return

    import uvicorn

    log: list[tuple[float, int]] = []
    app, limiter = _slowapi_app(args.strategy, args.limit, log)
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only when the proto says
    # TCP (socket.socket()'s default proto 0 does not), and uvicorn writes the headers and the
    # body separately: without it every keep-alive request after the first waits ~40 ms for
    # the client's delayed ACK (Nagle).  uvicorn binding its own socket gets this right.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        backlog=2048,
        timeout_keep_alive=120,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.01)
    if not server.started:
        sys.exit("uvicorn did not start")

    def reset() -> None:
        limiter.reset()
        log.clear()

    try:
        _serve_protocol(f"http://127.0.0.1:{port}", lambda: list(log), reset)
    finally:
        server.should_exit = True
        thread.join(STOP_TIMEOUT)


# ---------------------------------------------------------------- probing


def probe(running: Running, n: int | None = None, *, at_once: bool = False) -> dict[str, Any]:
    """
    Send ``n`` GETs one after another (default: free + 4) and keep the first 200 and 429.

    Returns the statuses in order and the raw headers of the first 200 and the first 429;
    used to check a limiter really limits and to show what it sends.  ``at_once``: all ``n``
    together, from threads (statuses in the order they came back): a queueing limiter answers
    requests sent one after another late, never 429.
    """
    import httpx

    n = n if n is not None else running.limit.free + 4
    statuses: list[int] = []
    samples: dict[int, list[tuple[str, str]]] = {}
    with httpx.Client(base_url=running.url, timeout=10) as client:

        def get() -> None:
            r = client.get("/work")
            statuses.append(r.status_code)
            samples.setdefault(r.status_code, [(k, v) for k, v in r.headers.items()])

        if not at_once:
            for _ in range(n):
                get()
        else:
            threads = [threading.Thread(target=get) for _ in range(n)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    return {"statuses": statuses, "samples": samples, "at": time.time()}


def _self_check() -> None:
    """Start each server, show its 200 and 429 headers, check it limits."""
    checks: list[tuple[str, Callable[[], contextlib.AbstractContextManager[Running]]]] = [
        ("nginx limit_req 10r/s burst 5", lambda: nginx_limit_req(10, 5)),
        ("nginx limit_req 10r/s, no burst", lambda: nginx_limit_req(10, 0)),
        (
            "nginx limit_req 5r/s burst 2 + Retry-After: 1",
            lambda: nginx_limit_req(5, 2, retry_after=1),
        ),
        ("nginx limit_conn 5, 100 ms a request", lambda: nginx_limit_conn(5, 0.1)),
        ("slowapi fixed-window 10/second", lambda: slowapi_server("fixed-window", 10)),
        ("slowapi moving-window 20/second", lambda: slowapi_server("moving-window", 20)),
        ("HAProxy stick table, over 10 in 1 s denied", lambda: haproxy_stick_table(10, 1)),
        *(
            (f"express-rate-limit 10 per 1 s, {m}", lambda m=m: express_rate_limit(m, 10, 1))
            for m in EXPRESS_MODES
        ),
        ("LimitedServer ietf 10/s burst 5", lambda: limited_server("ietf", 10, 5)),
        ("LimitedServer github 10/s burst 5", lambda: limited_server("github", 10, 5)),
    ]
    for title, factory in checks:
        try:
            with factory() as server:
                # a concurrency limit turns away only what comes while others are served
                at_once = server.limit.kind == "concurrency"
                result = probe(server, at_once=at_once)
                admitted = result["statuses"].index(429) if 429 in result["statuses"] else None
                counted = server.counts()
                print(f"## {title}: {server.url} ({server.limit.describe()})")
                print(f"statuses in order: {result['statuses']}")
                print(f"server counted: {dict(counted)}; admitted before the first 429: {admitted}")
                for status, headers in sorted(result["samples"].items()):
                    print(f"  {status}:")
                    for k, v in headers:
                        print(f"    {k}: {v}")
                if admitted is None:
                    print("  !! no 429 at all: this server does not limit")
                for hard in (False, True):
                    server.reset(hard=hard)
                    after = server.counts()
                    again = probe(server, server.limit.free + 1, at_once=at_once)
                    print(
                        f"after reset(hard={hard}): {dict(after)} at {server.url}, "
                        f"then statuses: {again['statuses']}"
                    )
                print()
        except Skip as exc:
            print(f"## {title}: SKIPPED ({exc})\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child_main(sys.argv[2:])
    else:
        _self_check()
