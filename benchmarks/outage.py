"""
Outages without retry storms: a fleet of 4 processes against a server that goes down.

The server (benchmarks/outage_server.py, a plain asyncio HTTP server in its own process on a
free 127.0.0.1 port) has a capacity of 100 req/s (a token bucket of 10; over it, 503 at once)
and logs every request's arrival, answer time and status; the loads below are counted there.
The fleet: 4 OS processes, each starting 15 calls/s (60/s in all) on a fixed schedule (a
random phase per process), one thread per call, so calls start on time whatever the server
does (an open loop).  A call is one GET, at most 4 attempts, 5 s per attempt, a 10 s deadline
where the client has one.  Each run starts a fresh server and fresh processes.

Scenarios (t = seconds from the start of the schedule):

  hard        t=3-8: every request 503 at once, no Retry-After; calls until t=13
  ra5         the same with "Retry-After: 5" (the outage's length) on the outage's 503s
  ra3         the same with "Retry-After: 3" (shorter than the outage)
  brownout    t=3-13: half the requests that fit the capacity fail (503, no Retry-After);
              calls until t=16
  refused     t=3-8: the server stops listening and resets its open connections, then listens
              again on the same port (connections refused: counted by the clients, see below)
  metastable  90 calls/s (4 x 22.5) on a server of 10 workers, 100 ms a request (100/s), a
              FIFO queue of 500 (beyond it: 503 at once, free); a request that waited over 1 s
              in the queue is still worked on (it costs its 100 ms) and answered 503.  t=1-3:
              every request 503 at once; calls until t=15.  Does goodput come back to 90/s?

Clients (each process of the fleet runs one; 503, 502, 504, 429 and connection errors retried):

  no retry              httpx, one attempt (the baseline)
  smoothclient httpx    SmoothTransport(policy=RetryPolicy(attempts=4, timeout=10))
  smoothclient adapter  SmoothAdapter on a requests Session, the same policy
  smoothclient +redis   SmoothTransport, the same policy, Pacer(storage=redis://...) shared
                        by the fleet (a redis-server on a free port, flushed before each run)
  httpx-retries         RetryTransport(Retry(total=3, backoff_factor=0.5, backoff_jitter=1,
                        total_timeout=10)): full jitter, honours Retry-After; its deadline
                        bounds the time slept only
  stamina               retry_context(attempts=4, timeout=10), its default waits (0.1 s
                        doubling + up to 1 s jitter); the hook returns Retry-After when sent
  tenacity              stop_after_attempt(4) | stop_after_delay(10),
                        wait_random_exponential(0.5); no Retry-After support
  backoff               on_exception(expo, factor=0.5, full_jitter, max_tries=4, max_time=10);
                        no Retry-After support
  urllib3 Retry         PoolManager(retries=Retry(total=3, backoff_factor=0.5,
                        backoff_jitter=0.5, respect_retry_after_header=True)); no deadline

Columns (medians of --runs runs, each column separately):

  load in outage   requests the server received during the outage (the brownout: its 10 s;
                   metastable: its 2 s) over the calls the fleet started in that time; on
                   refused, the refused connections the clients made count as requests
  peak 100ms/1s    the busiest 100 ms bucket (as a rate) and the busiest 1 s bucket after the
                   outage's end (buckets aligned to it), over the capacity (100/s)
  recovery s       from the outage's end until the served rate is back: from then on, every
                   1 s window (sliding by 100 ms) until the schedule's end holds 200 answers
                   for at least 90% of the offered calls/s; "never": not even its last second
  sent/call        every request the server received (and refused connections) per call
  failed %         calls that did not end in a 2xx (calls still running 11 s after the
                   schedule ended count as failed)
  late %           calls that succeeded after more than 10 s (past the deadline)
  goodput          200s per second during the brownout; metastable: during its last 3 s

Run: python benchmarks/outage.py [--runs N] [--scenario NAME ...] [--client NAME ...]
[--quick] [--write] [--json FILE] [--selfcheck]; all of it takes about 45 minutes.
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import json
import math
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SERVER = HERE / "outage_server.py"

CAPACITY = 100.0
BURST = 10
PROCS = 4
PER_PROC = 15.0  # calls/s each process starts
ATTEMPTS = 4
DEADLINE = 10.0
REQUEST_TIMEOUT = 5.0
RETRY_ON = (429, 502, 503, 504)
TAIL = 11.0  # how long calls still running when the schedule ends may take to finish
RECOVERED = 0.9  # "back to the offered load": 200s at >= 90% of the offered calls/s
POOL = {"workers": 10, "queue": 500, "queue_timeout": 1.0}

CLIENTS = (
    "no retry",
    "smoothclient httpx",
    "smoothclient adapter",
    "smoothclient +redis",
    "httpx-retries",
    "stamina",
    "tenacity",
    "backoff",
    "urllib3 Retry",
)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    phases: tuple[tuple[float, float, str], ...]
    duration: float  # the schedule: calls start in [0, duration)
    kind: str = "bucket"
    per_proc: float = PER_PROC

    @property
    def window(self) -> tuple[float, float]:
        return self.phases[0][0], self.phases[0][1]

    def plan(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "capacity": CAPACITY,
            "burst": BURST,
            "phases": [list(p) for p in self.phases],
            **POOL,
        }


SCENARIOS = [
    Scenario("hard", "a. hard outage: 5 s of 503 without Retry-After", ((3, 8, "down"),), 13),
    Scenario("ra5", "b. outage with Retry-After: 5 (its length)", ((3, 8, "down-ra:5"),), 13),
    Scenario("ra3", "b. outage with Retry-After: 3 (shorter)", ((3, 8, "down-ra:3"),), 13),
    Scenario(
        "brownout", "c. brownout: half the requests 503 for 10 s", ((3, 13, "brownout:0.5"),), 16
    ),
    Scenario("refused", "d. outage by refused connections for 5 s", ((3, 8, "refuse"),), 13),
    Scenario(
        "metastable",
        "e. metastable: 90% of a worker pool's capacity, a 2 s outage at the start",
        ((1, 3, "down"),),
        15,
        kind="pool",
        per_proc=22.5,
    ),
]
QUICK = ("hard", "ra5", "metastable")
SELFCHECK = [
    Scenario("check-hard", "selfcheck: 2 s of 503", ((1, 3, "down"),), 4),
    Scenario("check-refused", "selfcheck: 2 s refused", ((1, 3, "refuse"),), 4),
]
WINDOW_COLUMNS = {"brownout", "metastable"}
DUMP: Path | None = None  # --dump: each run's server log and calls are written there

# ---------------------------------------------------------------- clients (in the child)


class Unavailable(Exception):
    """A retryable status, raised for the libraries that retry on exceptions."""

    def __init__(self, status: int, retry_after: str | None) -> None:
        super().__init__(status)
        self.status = status
        self.retry_after = retry_after


#: In a smoothclient process: why its calls gave up (telemetry.give_up_of), by reason.
GAVE_UP: dict[str, int] = {}


def _smooth_policy() -> Any:
    import smoothclient
    from smoothclient.telemetry import give_up_of

    def gave_up(ended: Any) -> None:
        why = give_up_of(ended) or "status"
        GAVE_UP[why] = GAVE_UP.get(why, 0) + 1

    return smoothclient.RetryPolicy(attempts=ATTEMPTS, timeout=DEADLINE, on_give_up=gave_up)


def _httpx_client(name: str, redis_url: str | None) -> Any:
    import httpx

    inner = httpx.HTTPTransport(
        limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200)
    )
    transport: httpx.BaseTransport = inner
    if name in ("smoothclient httpx", "smoothclient +redis"):
        import smoothclient

        pacer = smoothclient.Pacer(storage=redis_url) if name.endswith("+redis") else None
        transport = smoothclient.SmoothTransport(inner, policy=_smooth_policy(), pacer=pacer)
    elif name == "httpx-retries":
        from httpx_retries import Retry, RetryTransport

        retry = Retry(
            total=ATTEMPTS - 1,
            backoff_factor=0.5,
            backoff_jitter=1.0,
            status_forcelist=RETRY_ON,
            respect_retry_after_header=True,
            total_timeout=DEADLINE,
        )
        transport = RetryTransport(inner, retry=retry)
    return httpx.Client(transport=transport, timeout=REQUEST_TIMEOUT)


def make_call(name: str, url: str, redis_url: str | None) -> Callable[[], bool]:
    """One logical call of client ``name``: ``True`` when it ends in a 2xx."""
    target = url + "/work"
    if name == "smoothclient adapter":
        import requests

        import smoothclient

        session = requests.Session()
        session.mount(
            "http://",
            smoothclient.SmoothAdapter(
                policy=_smooth_policy(), pool_connections=1, pool_maxsize=200
            ),
        )
        return lambda: session.get(target, timeout=REQUEST_TIMEOUT).ok
    if name == "urllib3 Retry":
        import urllib3

        retry = urllib3.Retry(
            total=ATTEMPTS - 1,
            backoff_factor=0.5,
            backoff_jitter=0.5,
            status_forcelist=RETRY_ON,
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        pool = urllib3.PoolManager(
            maxsize=200, retries=retry, timeout=urllib3.Timeout(REQUEST_TIMEOUT)
        )
        return lambda: 200 <= pool.request("GET", target).status < 300

    import httpx

    client = _httpx_client(name, redis_url)

    def checked() -> Any:  # for the libraries that retry on exceptions
        response = client.get(target)
        if response.status_code in RETRY_ON:
            raise Unavailable(response.status_code, response.headers.get("retry-after"))
        return response

    if name == "stamina":
        import stamina
        import stamina.instrumentation

        stamina.instrumentation.set_on_retry_hooks([])  # no log lines

        def hook(exc: Exception) -> bool | float:
            if isinstance(exc, Unavailable):
                return float(exc.retry_after) if exc.retry_after else True
            return isinstance(exc, httpx.TransportError)

        def with_stamina() -> bool:
            for attempt in stamina.retry_context(on=hook, attempts=ATTEMPTS, timeout=DEADLINE):
                with attempt:
                    return bool(checked().is_success)
            return False  # pragma: no cover

        return with_stamina
    if name == "tenacity":
        import tenacity

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(ATTEMPTS) | tenacity.stop_after_delay(DEADLINE),
            wait=tenacity.wait_random_exponential(multiplier=0.5),
            retry=tenacity.retry_if_exception_type((Unavailable, httpx.TransportError)),
            reraise=True,
        )
        return lambda: bool(retrying(checked).is_success)
    if name == "backoff":
        import backoff

        with_backoff = backoff.on_exception(
            backoff.expo,
            (Unavailable, httpx.TransportError),
            max_tries=ATTEMPTS,
            max_time=DEADLINE,
            jitter=backoff.full_jitter,
            factor=0.5,
            logger=None,
        )(checked)
        return lambda: bool(with_backoff().is_success)
    if name in ("no retry", "smoothclient httpx", "smoothclient +redis", "httpx-retries"):
        return lambda: bool(client.get(target).is_success)
    msg = f"unknown client {name!r}"
    raise ValueError(msg)


def child(spec: dict[str, Any]) -> None:
    """A process of the fleet: warm up, say READY, wait for GO <t0>, run the schedule."""
    port = int(spec["url"].rsplit(":", 1)[1])
    connects: list[tuple[float, bool]] = []  # (epoch, connected), to the server's port only
    plain_connect = socket.socket.connect

    def counting_connect(sock: socket.socket, address: Any) -> None:
        if not (isinstance(address, tuple) and len(address) >= 2 and address[1] == port):
            plain_connect(sock, address)
            return
        at = time.time()
        try:
            plain_connect(sock, address)
        except OSError:
            connects.append((at, False))
            raise
        connects.append((at, True))

    socket.socket.connect = counting_connect  # type: ignore[method-assign]
    call = make_call(spec["client"], spec["url"], spec.get("redis"))
    try:
        call()  # connections, lazy imports
    except Exception as exc:
        print(f"warm-up failed: {exc!r}", file=sys.stderr, flush=True)
    GAVE_UP.clear()
    print("READY", flush=True)
    t0 = float(sys.stdin.readline().split()[1])
    connects.clear()
    rate, duration = spec["rate"], spec["duration"]
    phase = random.uniform(0, 1 / rate)
    schedule = []
    while phase + len(schedule) / rate < duration:
        schedule.append(phase + len(schedule) / rate)
    done: list[Any] = [None] * len(schedule)

    def one(k: int) -> None:
        start = time.time()
        try:
            ok = call()
        except Exception:
            ok = False
        done[k] = (round(start - t0, 4), round(time.time() - t0, 4), ok)

    threads = []
    for k, at in enumerate(schedule):
        delay = t0 + at - time.time()
        if delay > 0:
            time.sleep(delay)
        thread = threading.Thread(target=one, args=(k,), daemon=True)
        thread.start()
        threads.append(thread)
    stop_at = t0 + duration + spec["tail"]
    for thread in threads:
        thread.join(max(0.0, stop_at - time.time()))
    calls = [
        [round(at, 4), *(d if d is not None else (None, None, False))]
        for at, d in zip(schedule, done, strict=True)
    ]
    refused = [round(at - t0, 4) for at, ok in list(connects) if not ok]
    result = {"calls": calls, "refused": refused, "gave_up": GAVE_UP}
    print("RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # threads still running (unfinished calls) are dropped


# ---------------------------------------------------------------- one run (in the parent)


@dataclass
class Run:
    scenario: str
    client: str
    rep: int
    calls: int
    failed: int
    late: int
    unfinished: int
    load: float  # requests in the outage / calls started in it
    peak100: float  # over capacity
    peak1s: float
    recovery: float | None
    sent_per_call: float
    goodput_window: float
    goodput_end: float
    offered: float  # calls/s
    max_lag: float  # how late a call started against its schedule (s)
    extra: dict[str, Any] = field(default_factory=dict)


def _count(sorted_times: list[float], lo: float, hi: float) -> int:
    return bisect.bisect_left(sorted_times, hi) - bisect.bisect_left(sorted_times, lo)


def measure(
    sc: Scenario, client: str, rep: int, log: list[list[Any]], results: list[dict[str, Any]]
) -> Run:
    """The run's numbers from the server's log and the processes' calls."""
    calls = [c for r in results for c in r["calls"]]
    refused = [t for r in results for t in r["refused"] if t >= 0]
    everything = [a for a, _, _ in log if a >= 0] + refused  # the tail's requests too
    arrivals = sorted(a for a in everything if a < sc.duration)
    served = sorted(d for _, d, s in log if s == 200)
    ws, we = sc.window
    offered_window = sum(1 for c in calls if ws <= c[0] < we)
    offered = PROCS * sc.per_proc
    after = we
    peak100 = max(
        (
            _count(arrivals, after + k / 10, after + (k + 1) / 10)
            for k in range(int((sc.duration - after) * 10))
        ),
        default=0,
    )
    peak1s = max(
        (_count(arrivals, after + k, after + k + 1) for k in range(int(sc.duration - after))),
        default=0,
    )
    recovery = None  # the first 100 ms step from which every 1 s window is back at the offer
    for k in reversed(range(round((sc.duration - 1 - after) * 10) + 1)):
        t = after + k / 10
        if _count(served, t, t + 1) < RECOVERED * offered:
            break
        recovery = k / 10
    ok = [c for c in calls if c[3]]
    unfinished = sum(1 for c in calls if c[2] is None)
    lags = [c[1] - c[0] for c in calls if c[1] is not None]
    return Run(
        scenario=sc.name,
        client=client,
        rep=rep,
        calls=len(calls),
        failed=len(calls) - len(ok),
        late=sum(1 for c in ok if c[2] - c[1] > DEADLINE),
        unfinished=unfinished,
        load=_count(arrivals, ws, we) / max(offered_window, 1),
        peak100=peak100 * 10 / CAPACITY,
        peak1s=peak1s / CAPACITY,
        recovery=recovery,
        sent_per_call=len(everything) / max(len(calls), 1),
        goodput_window=_count(served, ws, we) / (we - ws),
        goodput_end=_count(served, sc.duration - 3, sc.duration) / 3,
        offered=offered,
        max_lag=max(lags, default=0.0),
        extra={"gave_up": _gave_up(results)},
    )


def _gave_up(results: list[dict[str, Any]]) -> dict[str, int]:
    """Why smoothclient's calls gave up, over the fleet (empty for the other clients)."""
    total: dict[str, int] = {}
    for r in results:
        for why, n in r.get("gave_up", {}).items():
            total[why] = total.get(why, 0) + n
    return dict(sorted(total.items()))


def _read_line(proc: subprocess.Popen[str], prefix: str, what: str) -> str:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    msg = f"{what} exited ({proc.poll()}) without {prefix.strip()}"
    raise RuntimeError(msg)


def run_once(sc: Scenario, client: str, rep: int, redis_url: str | None) -> Run:
    server = subprocess.Popen(
        [sys.executable, str(SERVER), json.dumps(sc.plan())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    children: list[subprocess.Popen[str]] = []
    try:
        url = f"http://127.0.0.1:{_read_line(server, 'PORT ', 'the server')}"
        if client.endswith("+redis"):
            import redis

            assert redis_url is not None
            redis.Redis.from_url(redis_url).flushall()
        spec = {
            "client": client,
            "url": url,
            "redis": redis_url,
            "rate": sc.per_proc,
            "duration": sc.duration,
            "tail": TAIL,
        }
        children = [
            subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(PROCS)
        ]
        for proc in children:
            _read_line(proc, "READY", f"a {client} process")
        t0 = time.time() + 0.3
        for proc in (server, *children):
            assert proc.stdin is not None
            proc.stdin.write(f"GO {t0!r}\n")
            proc.stdin.flush()
        results = []
        for proc in children:
            out, _ = proc.communicate(timeout=max(5.0, t0 + sc.duration + TAIL + 30 - time.time()))
            line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                msg = f"a {client} process exited ({proc.returncode}) without its result"
                raise RuntimeError(msg)
            results.append(json.loads(line[7:]))
        time.sleep(0.1)
        out, _ = server.communicate("STOP\n", timeout=30)
        log_line = next(x for x in out.splitlines() if x.startswith("LOG "))
        log = json.loads(log_line[4:])
        if DUMP is not None:
            name = f"{sc.name}-{client.replace(' ', '_')}-{rep + 1}.json"
            (DUMP / name).write_text(json.dumps({"log": log, "results": results}))
        return measure(sc, client, rep, log, results)
    finally:
        for proc in (*children, server):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------- tables


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _fmt_recovery(values: list[float | None]) -> str:
    as_num = [math.inf if v is None else v for v in values]
    med = _median(as_num)
    return "never" if math.isinf(med) else f"{med:.1f}"


def columns(sc: Scenario) -> list[tuple[str, Callable[[list[Run]], str]]]:
    def med(attr: str, fmt: str) -> Callable[[list[Run]], str]:
        return lambda rs: format(_median([getattr(r, attr) for r in rs]), fmt)

    def pct(attr: str) -> Callable[[list[Run]], str]:
        return lambda rs: f"{_median([100 * getattr(r, attr) / max(r.calls, 1) for r in rs]):.1f}"

    cols: list[tuple[str, Callable[[list[Run]], str]]] = [
        ("scenario", lambda rs: sc.name),
        ("client", lambda rs: rs[0].client),
        ("load in outage (x offered)", lambda rs: med("load", ".2f")(rs) + "x"),
        ("peak after /100ms (x cap)", lambda rs: med("peak100", ".2f")(rs) + "x"),
        ("peak after /1s (x cap)", lambda rs: med("peak1s", ".2f")(rs) + "x"),
        ("recovery s", lambda rs: _fmt_recovery([r.recovery for r in rs])),
        ("sent/call", med("sent_per_call", ".2f")),
        ("failed %", pct("failed")),
        ("late %", pct("late")),
    ]
    if sc.name == "brownout" or sc.kind == "pool":
        cols.append(("goodput in outage /s", med("goodput_window", ".1f")))
    if sc.kind == "pool":
        cols.append(("goodput last 3 s /s", med("goodput_end", ".1f")))
        cols.append(
            (
                "recovered",
                lambda rs: (
                    f"{sum(r.goodput_end >= RECOVERED * r.offered for r in rs)}/{len(rs)} runs"
                ),
            )
        )
    cols.append(("runs", lambda rs: str(len(rs))))
    return cols


def table(sc: Scenario, runs: list[Run], clients: tuple[str, ...]) -> str:
    cols = columns(sc)
    lines = ["| " + " | ".join(h for h, _ in cols) + " |", "|" + "---|" * len(cols)]
    for client in clients:
        rs = [r for r in runs if r.scenario == sc.name and r.client == client]
        if rs:
            lines.append("| " + " | ".join(f(rs) for _, f in cols) + " |")
    return "\n".join(lines)


def heading(sc: Scenario) -> str:
    offered = PROCS * sc.per_proc
    ws, we = sc.window
    return (
        f"### {sc.title}\n\n{PROCS} processes x {sc.per_proc:g} calls/s = {offered:g} calls/s "
        f"offered, capacity {CAPACITY:g}/s; outage t={ws:g}-{we:g} s, calls until "
        f"t={sc.duration:g} s."
    )


def report(scenarios: list[Scenario], runs: list[Run], clients: tuple[str, ...]) -> str:
    parts = []
    for sc in scenarios:
        parts += [heading(sc), "", table(sc, runs, clients), ""]
    return "\n".join(parts)


def _progress(r: Run) -> None:
    rec = "never" if r.recovery is None else f"{r.recovery:.1f}s"
    print(
        f"  {r.scenario} / {r.client} #{r.rep + 1}: load {r.load:.2f}x, peak "
        f"{r.peak100:.2f}x/{r.peak1s:.2f}x, recovery {rec}, sent/call {r.sent_per_call:.2f}, "
        f"failed {r.failed}/{r.calls} ({r.unfinished} unfinished), late {r.late}, goodput "
        f"{r.goodput_window:.1f}/{r.goodput_end:.1f}, max start lag {r.max_lag * 1000:.0f} ms"
        + (f", gave up: {r.extra['gave_up']}" if r.extra.get("gave_up") else ""),
        file=sys.stderr,
        flush=True,
    )


def timeline(dump: dict[str, Any], step: float = 0.25) -> str:
    """
    A dumped run (--dump) step by step: what the server got and answered, and how long.

    Columns: requests arrived; answered 200; answered 503 at once (no work: down, queue full);
    answered 503 after a wait (a pool's queued request that timed out: work paid for); the
    mean and most time an answer took; calls started and calls ended ok / failed.
    """
    log = dump["log"]
    calls = [c for r in dump["results"] for c in r["calls"]]
    end = max([d for _, d, _ in log] + [0.0])
    rows = [
        "   t  arrived   200  503now  503late  mean ms  max ms  started  ok  failed",
    ]
    for k in range(math.ceil(end / step)):
        lo, hi = k * step, (k + 1) * step
        got = [x for x in log if lo <= x[1] < hi]
        took = [d - a for a, d, _ in got]
        rows.append(
            f"{lo:5.2f} {sum(1 for a, _, _ in log if lo <= a < hi):8d} "
            f"{sum(1 for x in got if x[2] == 200):5d} "
            f"{sum(1 for a, d, s in got if s != 200 and d - a < 0.05):7d} "
            f"{sum(1 for a, d, s in got if s != 200 and d - a >= 0.05):8d} "
            f"{1000 * statistics.fmean(took) if took else 0:8.0f} "
            f"{1000 * max(took, default=0):7.0f} "
            f"{sum(1 for c in calls if lo <= c[0] < hi):8d} "
            f"{sum(1 for c in calls if c[2] is not None and lo <= c[2] < hi and c[3]):3d} "
            f"{sum(1 for c in calls if c[2] is not None and lo <= c[2] < hi and not c[3]):7d}"
        )
    return "\n".join(rows)


# ---------------------------------------------------------------- main


def selfcheck() -> None:
    """The no-retry baseline on a short timeline: the server must see 1.0x in the outage."""
    for sc in SELFCHECK:
        r = run_once(sc, "no retry", 0, None)
        _progress(r)
        expected_failures = PROCS * sc.per_proc * (sc.window[1] - sc.window[0])
        assert 0.95 <= r.load <= 1.05, f"{sc.name}: load {r.load:.3f}x, not 1.0x"
        assert abs(r.sent_per_call - 1) <= 0.05, f"{sc.name}: {r.sent_per_call:.3f} sent/call"
        assert abs(r.failed - expected_failures) <= 0.05 * expected_failures + 4, (
            f"{sc.name}: {r.failed} failed, expected about {expected_failures:g}"
        )
        assert r.recovery is not None, f"{sc.name}: the served rate never recovered"
        assert r.recovery <= 0.2, f"{sc.name}: recovery {r.recovery}"
        assert r.peak1s <= 1.05 * PROCS * sc.per_proc / CAPACITY, f"{sc.name}: peak {r.peak1s}"
        assert r.unfinished == 0, f"{sc.name}: {r.unfinished} calls unfinished"
    print("selfcheck passed: the no-retry fleet loads the server 1.0x in both outages")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    names = [sc.name for sc in SCENARIOS]
    parser.add_argument("--runs", type=int, default=None, help="runs per cell (default 3)")
    parser.add_argument(
        "--scenario", action="append", choices=names, help="only these scenarios (repeatable)"
    )
    parser.add_argument(
        "--client", action="append", choices=CLIENTS, help="only these clients (repeatable)"
    )
    parser.add_argument("--quick", action="store_true", help=f"1 run, only {', '.join(QUICK)}")
    parser.add_argument("--write", action="store_true", help="write the tables to OUTAGE.md")
    parser.add_argument("--json", metavar="FILE", help="also write every run to FILE")
    parser.add_argument(
        "--dump", metavar="DIR", help="write each run's server log and calls to DIR (--timeline)"
    )
    parser.add_argument(
        "--timeline", metavar="FILE", help="print a dumped run second by second, and exit"
    )
    parser.add_argument("--selfcheck", action="store_true", help="check the measuring, quickly")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(json.loads(args.child))
        return
    if args.selfcheck:
        selfcheck()
        return
    if args.timeline:
        print(timeline(json.loads(Path(args.timeline).read_text())))
        return
    if args.dump:
        global DUMP
        DUMP = Path(args.dump)
        DUMP.mkdir(parents=True, exist_ok=True)
    runs_per_cell = args.runs if args.runs is not None else (1 if args.quick else 3)
    wanted = args.scenario or (list(QUICK) if args.quick else names)
    scenarios = [sc for sc in SCENARIOS if sc.name in wanted]
    clients = tuple(c for c in CLIENTS if not args.client or c in args.client)

    import smoothclient

    print(
        f"smoothclient {smoothclient.__version__} from {Path(smoothclient.__file__).parent}; "
        f"{len(scenarios) * len(clients)} cells x {runs_per_cell} runs",
        file=sys.stderr,
        flush=True,
    )
    redis_server = None
    redis_url = None
    if any(c.endswith("+redis") for c in clients):
        from smoothclient.tools.redis_server import RedisServer

        redis_server = RedisServer().start()
        redis_url = redis_server.url
    started = time.monotonic()
    runs: list[Run] = []
    try:
        for rep in range(runs_per_cell):
            for sc in scenarios:
                shift = rep % len(clients)  # rotate the order between repeats
                for client in clients[shift:] + clients[:shift]:
                    for attempt in range(2):  # once more if a process broke (not a result)
                        try:
                            runs.append(run_once(sc, client, rep, redis_url))
                            _progress(runs[-1])
                            break
                        except (RuntimeError, subprocess.TimeoutExpired) as exc:
                            print(
                                f"  {sc.name} / {client} #{rep + 1}: {exc}"
                                + (", again" if attempt == 0 else ", skipped"),
                                file=sys.stderr,
                                flush=True,
                            )
    finally:
        if redis_server is not None:
            redis_server.stop()
    print(f"done in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in runs], indent=1))
    text = report(scenarios, runs, clients)
    print(text)
    if args.write:
        doc = __doc__.strip()
        header = [
            "# Outages without retry storms (`benchmarks/outage.py`)",
            "",
            f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
            f"- smoothclient {smoothclient.__version__}, Python {platform.python_version()}",
            f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
            f"- command: `python benchmarks/outage.py {' '.join(sys.argv[1:])}`".rstrip(),
            f"- medians of {runs_per_cell} run(s) per cell",
            "",
            "```text",
            doc,
            "```",
            "",
        ]
        (HERE / "OUTAGE.md").write_text("\n".join(header) + text)
        print(f"wrote {HERE / 'OUTAGE.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
