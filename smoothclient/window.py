"""
Window math: how wide to spread a cohort of operations, from docs/window-math.md sections 2-4.

Pure functions of numbers: no clock, no I/O, no randomness.  Every result is exact to floating
point (the overflow bound uses the exact Poisson tail below a headroom of 50 and the normal
approximation with continuity correction above it).

>>> from smoothclient.window import minimum_window
>>> w = minimum_window(50_000, 2_000, service_time=0.2, connections=400)
>>> w.width, w.binding.name
(25.0, 'rate')
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

from ._validate import optional_seconds, seconds
from .errors import InfeasibleWindow

__all__ = [
    "Bound",
    "WindowResult",
    "drain_time",
    "economic_window",
    "jittered_lifetime",
    "minimum_window",
    "overflow_safe_rate",
    "xfetch_due",
]

#: Below this headroom the exact Poisson tail is used instead of the normal approximation.
EXACT_POISSON_BELOW = 50.0


@dataclass(frozen=True, slots=True)
class Bound:
    """One constraint on the window width: ``width >= value`` (lower) or ``width <= value``."""

    name: str
    kind: str  # "lower" or "upper"
    value: float
    why: str

    def __str__(self) -> str:
        op = ">=" if self.kind == "lower" else "<="
        return f"{self.name}: W {op} {self.value:.6g} s ({self.why})"


@dataclass(frozen=True, slots=True)
class WindowResult:
    """
    The smallest safe window and every bound that went into it.

    The cohort is spread uniformly over ``[start, start + width]``.
    """

    cohort: float
    start: float
    width: float
    binding: Bound
    lower_bounds: tuple[Bound, ...]
    upper_bounds: tuple[Bound, ...]

    @property
    def end(self) -> float:
        """When the last operation of the cohort starts, in seconds from now."""
        return self.start + self.width

    @property
    def rate(self) -> float:
        """Mean arrival rate inside the window (operations per second)."""
        return math.inf if self.width == 0 else self.cohort / self.width

    @property
    def p95_delay(self) -> float:
        """95th percentile of the added delay: ``start + 0.95 * width``."""
        return self.start + 0.95 * self.width

    @property
    def mean_delay(self) -> float:
        """Expected added delay: ``start + width / 2``."""
        return self.start + self.width / 2


def _positive(name: str, value: object) -> float:
    return seconds(name, value, allow_zero=False)


def overflow_safe_rate(headroom: float, overflow: float) -> float:
    """
    Return the largest mean rate ``lam`` with ``P(Poisson(lam) > headroom) <= overflow``.

    Arrivals in one second of a uniformly spread cohort are about Poisson(M / W); this is the rate
    the window may run at so that a second overflows the headroom with probability at most
    ``overflow``.  Above a headroom of 50 it uses the normal approximation with continuity
    correction ``((-z + sqrt(z^2 + 4 (H + 0.5))) / 2)^2``; below, the exact Poisson tail.

    Args:
        headroom: Spare capacity ``H`` in requests per second (> 0).
        overflow: Acceptable probability ``eps`` that one second exceeds ``H``, in (0, 1).
    """
    h = _positive("headroom", headroom)
    eps = float(overflow)
    if not 0 < eps < 1:
        msg = f"overflow must be a probability strictly between 0 and 1, got {overflow!r}"
        raise ValueError(msg)
    if h >= EXACT_POISSON_BELOW:
        z = NormalDist().inv_cdf(1 - eps)
        return ((-z + math.sqrt(z * z + 4 * (h + 0.5))) / 2) ** 2
    return _exact_poisson_rate(math.floor(h), eps)


def _poisson_tail(lam: float, n: int) -> float:
    """``P(X > n)`` for ``X ~ Poisson(lam)``, summed in log space for stability."""
    if lam == 0:
        return 0.0
    log_term = -lam  # log P(X = 0)
    cdf = math.exp(log_term)
    for k in range(1, n + 1):
        log_term += math.log(lam) - math.log(k)
        cdf += math.exp(log_term)
    return max(0.0, 1.0 - cdf)


def _exact_poisson_rate(n: int, eps: float) -> float:
    lo, hi = 0.0, float(n + 1)
    while _poisson_tail(hi, n) <= eps:  # pragma: no cover - the tail at n + 1 always exceeds
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _poisson_tail(mid, n) <= eps:
            lo = mid
        else:
            hi = mid
    return lo


def minimum_window(
    cohort: float,
    headroom: float,
    *,
    service_time: float | None = None,
    connections: float | None = None,
    overflow: float | None = None,
    retry_after: float | None = None,
    remaining: float | None = None,
    reset: float | None = None,
    deadline: float | None = None,
    p95_sla: float | None = None,
) -> WindowResult:
    """
    Return the minimum safe window for ``cohort`` operations against ``headroom`` req/s.

    Each constraint of docs/window-math.md section 3 gives a bound; the width is the largest
    lower bound, checked against the smallest upper bound.

    Args:
        cohort: ``M``, operations to place (>= 0).
        headroom: ``H``, spare capacity in requests per second (> 0).
        service_time: tail service time ``s``; with ``connections`` gives ``W >= M s / K``.
        connections: ``K``, spare connections.
        overflow: ``eps``; gives ``W >= M / overflow_safe_rate(H, eps)``.
        retry_after: the server's ``Retry-After``: the window starts no earlier.
        remaining: requests the server's quota still admits before ``reset``.
        reset: seconds until the quota resets.  With ``remaining > 0`` it admits
            ``min(H, remaining / reset)`` req/s; with ``remaining == 0`` the window starts at reset.
        deadline: hard deadline ``D`` measured from now: the window must end by then.
        p95_sla: the 95th percentile of the added delay must stay below this.

    Raises:
        InfeasibleWindow: the largest lower bound exceeds the smallest upper bound.
        ValueError, TypeError: an argument is out of range or of the wrong type.
    """
    m = seconds("cohort", cohort)
    h = _positive("headroom", headroom)
    lower = [Bound("rate", "lower", m / h, f"M / H = {m:g} / {h:g}")]
    start = 0.0
    if (service_time is None) != (connections is None):
        msg = "service_time and connections go together: give both or neither"
        raise ValueError(msg)
    if service_time is not None and connections is not None:
        s = seconds("service_time", service_time)
        k = _positive("connections", connections)
        lower.append(Bound("concurrency", "lower", m * s / k, f"M s / K = {m:g} x {s:g} / {k:g}"))
    if overflow is not None:
        lam = overflow_safe_rate(h, overflow)
        lower.append(
            Bound("overflow", "lower", m / lam, f"M / lambda_eps, lambda_eps = {lam:.6g} req/s")
        )
    ra = optional_seconds("retry_after", retry_after)
    if ra is not None:
        start = ra
    start = _apply_quota(lower, m, h, start, remaining, reset)
    upper = _upper_bounds(start, deadline, p95_sla)
    binding = max(lower, key=lambda b: b.value)
    if upper:
        tightest = min(upper, key=lambda b: b.value)
        if binding.value > tightest.value:
            msg = (
                f"no window fits: {binding} exceeds {tightest}; add capacity or loosen the "
                "requirements"
            )
            raise InfeasibleWindow(msg, lower=binding, upper=tightest)
    return WindowResult(m, start, binding.value, binding, tuple(lower), tuple(upper))


def _apply_quota(
    lower: list[Bound],
    m: float,
    h: float,
    start: float,
    remaining: float | None,
    reset: float | None,
) -> float:
    if remaining is None and reset is None:
        return start
    if remaining is None or reset is None:
        msg = "remaining and reset go together: give both or neither"
        raise ValueError(msg)
    r = seconds("remaining", remaining)
    delta = seconds("reset", reset)
    if r == 0:
        return max(start, delta)
    admitted = h if delta == 0 else min(h, r / delta)
    lower.append(
        Bound("rate-limit", "lower", m / admitted, f"M / min(H, R / reset) = {admitted:.6g} req/s")
    )
    return start


def _upper_bounds(start: float, deadline: float | None, p95_sla: float | None) -> list[Bound]:
    upper: list[Bound] = []
    d = optional_seconds("deadline", deadline)
    if d is not None:
        upper.append(Bound("deadline", "upper", d - start, f"start + W <= D = {d:g}"))
    sla = optional_seconds("p95_sla", p95_sla)
    if sla is not None:
        upper.append(Bound("p95", "upper", (sla - start) / 0.95, f"start + 0.95 W <= {sla:g}"))
    return upper


def economic_window(
    capacity_cost: float,
    wait_cost: float,
    *,
    minimum: float = 0.0,
    maximum: float | None = None,
) -> float:
    """
    Return the window minimising ``C(W) = c_cap M / W + c_wait M W / 2``.

    The optimum ``W* = sqrt(2 c_cap / c_wait)`` does not depend on ``M``; it is clamped to
    ``[minimum, maximum]``, typically ``minimum_window(...).width`` and its tightest upper bound.

    Args:
        capacity_cost: ``c_cap``, cost per req/s of capacity (> 0).
        wait_cost: ``c_wait``, cost per request-second of waiting (> 0).
        minimum: smallest acceptable width.
        maximum: largest acceptable width, or ``None``.

    Raises:
        InfeasibleWindow: ``minimum > maximum``.
    """
    c_cap = _positive("capacity_cost", capacity_cost)
    c_wait = _positive("wait_cost", wait_cost)
    lo = seconds("minimum", minimum)
    hi = optional_seconds("maximum", maximum)
    if hi is not None and lo > hi:
        msg = f"no window fits: minimum {lo:g} s exceeds maximum {hi:g} s"
        raise InfeasibleWindow(msg, lower=lo, upper=hi)
    best = math.sqrt(2 * c_cap / c_wait)
    best = max(best, lo)
    return best if hi is None else min(best, hi)


def drain_time(
    backlog: float,
    headroom: float | Callable[[float], float],
    *,
    horizon: float = 365 * 86400.0,
) -> float:
    """
    Return the shortest time to serve ``backlog`` requests with ``headroom`` req/s.

    ``headroom`` may be a number (the answer is ``backlog / headroom``) or a function of time
    ``H(t)`` for a ramping capacity: the answer is the ``T`` where the integral of ``H`` over
    ``[0, T]`` reaches ``backlog``.  Negative values of ``H(t)`` count as zero.

    Raises:
        InfeasibleWindow: the backlog does not drain within ``horizon`` seconds.
    """
    m = seconds("backlog", backlog)
    if not callable(headroom):
        return m / _positive("headroom", headroom)
    if m == 0:
        return 0.0
    limit = _positive("horizon", horizon)

    def served(t: float) -> float:
        return _simpson(lambda x: max(0.0, float(headroom(x))), t)

    hi = min(1.0, limit)
    while served(hi) < m:
        if hi >= limit:
            msg = f"backlog of {m:g} does not drain within the horizon of {limit:g} s"
            raise InfeasibleWindow(msg, lower=m, upper=limit)
        hi = min(hi * 2, limit)
    lo = 0.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if served(mid) < m:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * hi:
            break
    return hi


def _simpson(f: Callable[[float], float], t: float, n: int = 2048) -> float:
    step = t / n
    total = f(0.0) + f(t)
    for i in range(1, n):
        total += (4 if i % 2 else 2) * f(i * step)
    return total * step / 3


def jittered_lifetime(ttl: float, jitter: float, u: float) -> float:
    """
    A lifetime in ``[ttl * (1 - jitter), ttl]``, placed by ``u`` in ``[0, 1)``.

    docs/http-cache.md section 3.

    What :class:`~smoothclient.JitteredTTLCache` and the HTTP cache's refresh point share:
    entries written together end over the last ``jitter`` fraction of their life, never later.
    """
    return ttl * (1 - jitter * u)


def xfetch_due(now: float, expiry: float, delta: float, beta: float, u: float) -> bool:
    """
    XFetch: recompute early when ``now - delta * beta * ln(u) >= expiry``.

    docs/http-cache.md section 3.

    ``delta``: how long the last recompute took; ``beta``: how eager (1.0 the paper's default);
    ``u``: uniform in ``(0, 1]``.  The nearer the expiry and the slower the recompute, the
    likelier a caller recomputes before the entry expires.
    """
    return now - delta * beta * math.log(max(u, 1e-300)) >= expiry
