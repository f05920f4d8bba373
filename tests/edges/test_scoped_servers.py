"""
Several quotas on one host, through every edge: GitHub-, Discord- and IETF-like fakes.

Each fake keeps its quotas on the test's fake clock; every edge (httpx sync, httpx async on
asyncio and trio, requests) makes calls one after another through one pacer, and the test
reads how long each call waited (the fake clock's sleeps).
"""

from __future__ import annotations

import functools
import io
import math
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from smoothclient import (
    AsyncSmoothTransport,
    Pacer,
    RateLimited,
    RetryPolicy,
    SmoothAdapter,
    SmoothTransport,
)
from smoothclient.pacing import GITHUB_SCOPES, ScopeRequest
from smoothclient.testing import FakeClock

#: (method, path) -> (status, headers), on the fake clock.
Fake = Callable[[str, str], tuple[int, dict[str, str]]]
#: A client: path (with method) -> status.
Get = Callable[..., int]
ORIGIN = "https://api.test:443"
POLICY = RetryPolicy(attempts=4, timeout=300, wait_initial=0.1, wait_max=1.0)


def _httpx(
    fake: Fake, pacer: Pacer, clock: FakeClock, policy: RetryPolicy = POLICY, **kw: Any
) -> Get:
    def handler(request: httpx.Request) -> httpx.Response:
        status, headers = fake(request.method, request.url.path)
        return httpx.Response(status, headers=headers)

    transport = SmoothTransport(
        httpx.MockTransport(handler), policy=policy, pacer=pacer, sleep=clock.sleep, **kw
    )
    client = httpx.Client(transport=transport, base_url="https://api.test")
    return lambda path, method="GET": client.request(method, path).status_code


def _httpx_async(backend: str) -> Callable[..., Get]:
    def make(
        fake: Fake, pacer: Pacer, clock: FakeClock, policy: RetryPolicy = POLICY, **kw: Any
    ) -> Get:
        async def handler(request: httpx.Request) -> httpx.Response:
            status, headers = fake(request.method, request.url.path)
            return httpx.Response(status, headers=headers)

        transport = AsyncSmoothTransport(
            httpx.MockTransport(handler),
            policy=policy,
            pacer=pacer,
            sleep=clock.async_sleep,
            **kw,
        )

        def get(path: str, method: str = "GET") -> int:
            async def one() -> int:
                async with httpx.AsyncClient(
                    transport=transport, base_url="https://api.test"
                ) as client:
                    return (await client.request(method, path)).status_code

            status: int = anyio.run(one, backend=backend)
            return status

        return get

    return make


class _FakeHTTPAdapter(HTTPAdapter):
    fake: Fake

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        path = (request.path_url or "/").split("?", 1)[0]
        status, headers = self.fake(request.method or "GET", path)
        response = requests.Response()
        response.status_code = status
        response.headers = CaseInsensitiveDict(headers)
        response.raw = io.BytesIO(b"")
        response.url = request.url or ""
        response.request = request
        return response


class _Adapter(SmoothAdapter, _FakeHTTPAdapter):
    pass


def _requests(
    fake: Fake, pacer: Pacer, clock: FakeClock, policy: RetryPolicy = POLICY, **kw: Any
) -> Get:
    adapter = _Adapter(policy=policy, pacer=pacer, sleep=clock.sleep, **kw)
    adapter.fake = fake
    session = requests.Session()
    session.mount("https://", adapter)
    return lambda path, method="GET": session.request(method, f"https://api.test{path}").status_code


EDGES: dict[str, Callable[..., Get]] = {
    "httpx": _httpx,
    "httpx-asyncio": _httpx_async("asyncio"),
    "httpx-trio": _httpx_async("trio"),
    "requests": _requests,
}


@pytest.fixture(params=list(EDGES))
def edge(request: pytest.FixtureRequest) -> Callable[..., Get]:
    return EDGES[request.param]


class Window:
    """A fixed-window quota on the fake clock."""

    def __init__(self, clock: FakeClock, limit: int, window: float) -> None:
        self.clock, self.limit, self.window = clock, limit, window
        self.start, self.used = clock(), 0

    def take(self) -> bool:
        now = self.clock()
        if now >= self.start + self.window:
            self.start, self.used = now, 0
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    @property
    def remaining(self) -> int:
        if self.clock() >= self.start + self.window:
            return self.limit
        return self.limit - self.used

    @property
    def reset_in(self) -> float:
        return max(0.0, self.start + self.window - self.clock())


def waited(clock: FakeClock, call: Callable[[], int]) -> tuple[int, float]:
    """The status of ``call`` and how long it slept in all."""
    before = len(clock.sleeps)
    status = call()
    return status, sum(clock.sleeps[before:])


# ---------------------------------------------------------------------------- GitHub


def github(clock: FakeClock) -> Fake:
    """``core`` 5000 an hour and ``search`` 30 a minute, named by ``x-ratelimit-resource``."""
    quotas = {"core": Window(clock, 5000, 3600), "search": Window(clock, 30, 60)}
    quotas["search"].used = 29  # one search left in this minute, 50 s to go
    quotas["search"].start = clock() - 10

    def answer(method: str, path: str) -> tuple[int, dict[str, str]]:
        resource = "search" if path.startswith("/search/") else "core"
        quota = quotas[resource]
        ok = quota.take()
        headers = {
            "x-ratelimit-limit": str(quota.limit),
            "x-ratelimit-remaining": str(quota.remaining),
            "x-ratelimit-used": str(quota.limit - quota.remaining),
            "x-ratelimit-reset": str(math.ceil(time.time() + quota.reset_in)),
            "x-ratelimit-resource": resource,
        }
        return (200 if ok else 403), headers

    return answer


def test_github_search_exhausted_does_not_hold_core_calls(edge: Callable[..., Get]) -> None:
    """Search is spent for 50 s: core calls go at once, the next search waits for its reset."""
    clock = FakeClock(1000.0)
    pacer = Pacer(clock=clock, probe=0)
    get = edge(github(clock), pacer, clock)
    assert waited(clock, lambda: get("/search/code")) == (200, 0.0)  # the last search
    for n in range(5):
        assert waited(clock, functools.partial(get, f"/repos/octo/{n}/issues")) == (200, 0.0)
    status, wait = waited(clock, lambda: get("/search/issues"))
    assert status == 200
    assert 49 <= wait <= 55  # the search quota's reset (whole seconds), not before
    scopes = pacer.scopes(ORIGIN)
    assert set(scopes) == {"core", "search"}
    assert scopes["core"].limit == 5000
    assert pacer.routes(ORIGIN)["GET /search/code"] == ("search",)
    assert pacer.routes(ORIGIN)["GET /repos/octo/{}/issues"] == ("core",)


def test_the_github_preset_binds_search_before_any_answer(edge: Callable[..., Get]) -> None:
    """With GITHUB_SCOPES, the first request on a new search route is bound by ``search``."""
    clock = FakeClock(1000.0)
    pacer = Pacer(clock=clock, probe=0, scope=GITHUB_SCOPES)
    get = edge(github(clock), pacer, clock)
    assert waited(clock, lambda: get("/search/code")) == (200, 0.0)
    status, wait = waited(clock, lambda: get("/search/commits"))  # a route never seen
    assert status == 200
    assert wait >= 49


# ---------------------------------------------------------------------------- Discord


def discord(clock: FakeClock, global_until: list[float]) -> Fake:
    """Two route buckets (5 per 5 s each) and a global limit switched on by the test."""
    buckets = {"aaa": Window(clock, 5, 5.0), "bbb": Window(clock, 5, 5.0)}

    def answer(method: str, path: str) -> tuple[int, dict[str, str]]:
        if clock() < global_until[0]:
            wait = global_until[0] - clock()
            return 429, {
                "X-RateLimit-Global": "true",
                "X-RateLimit-Scope": "global",
                "Retry-After": str(int(wait + 0.999)),
            }
        name = "aaa" if path.startswith("/channels/") else "bbb"
        bucket = buckets[name]
        ok = bucket.take()
        headers = {
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": str(bucket.remaining),
            "X-RateLimit-Reset-After": f"{bucket.reset_in:.3f}",
            "X-RateLimit-Bucket": name,
        }
        if not ok:
            headers |= {"X-RateLimit-Scope": "user", "Retry-After": str(int(bucket.reset_in + 1))}
        return (200 if ok else 429), headers

    return answer


def test_discord_route_buckets_apart_and_the_global_limit_for_all(
    edge: Callable[..., Get],
) -> None:
    clock = FakeClock(1000.0)
    pacer = Pacer(clock=clock, probe=0)
    global_until = [0.0]
    get = edge(discord(clock, global_until), pacer, clock)
    for n in range(5):  # spend bucket aaa
        assert get(f"/channels/{1000 + n}/messages") == 200
    for n in range(4):  # the other route's bucket is untouched: no wait at all
        assert waited(clock, functools.partial(get, f"/guilds/{n}/members")) == (200, 0.0)
    status, wait = waited(clock, lambda: get("/channels/77/messages"))
    assert status == 200
    assert 4 <= wait <= 6  # bucket aaa's reset
    assert set(pacer.scopes(ORIGIN)) == {"aaa", "bbb"}

    global_until[0] = clock() + 3.0  # the global limit: every route waits for it
    once = edge(discord(clock, global_until), pacer, clock, RetryPolicy(attempts=1))
    assert once("/guilds/9/members") == 429  # this call meets it (and is not retried)
    assert pacer.view(ORIGIN).gate_in == pytest.approx(3.0)  # the origin is closed
    status, wait = waited(clock, lambda: get("/channels/78/messages"))  # another route
    assert status == 200
    assert wait >= 2.9


# ---------------------------------------------------------------------------- IETF


def ietf_two_policies(clock: FakeClock) -> Fake:
    """A burst policy (10 a second) and a daily one (here 12 per 30 s) on every request."""
    burst, daily = Window(clock, 10, 1.0), Window(clock, 12, 30.0)

    def answer(method: str, path: str) -> tuple[int, dict[str, str]]:
        ok = daily.remaining > 0 and burst.remaining > 0
        if ok:
            burst.take()
            daily.take()
        headers = {
            "RateLimit-Policy": '"burst";q=10;w=1, "daily";q=12;w=30',
            "RateLimit": (
                f'"burst";r={burst.remaining};t={int(burst.reset_in + 0.999)}, '
                f'"daily";r={daily.remaining};t={int(daily.reset_in + 0.999)}'
            ),
        }
        return (200 if ok else 429), headers

    return answer


def test_ietf_two_policies_each_updated_and_the_latest_slot_wins(
    edge: Callable[..., Get],
) -> None:
    clock = FakeClock(1000.0)
    pacer = Pacer(clock=clock, probe=0)
    get = edge(ietf_two_policies(clock), pacer, clock)
    statuses = [get(f"/items/{n}") for n in range(12)]  # the daily quota, all of it
    assert statuses.count(200) == 12
    scopes = pacer.scopes(ORIGIN)
    assert set(scopes) == {"burst", "daily"}  # both updated by every response
    assert (scopes["daily"].limit, scopes["burst"].limit) == (12, 10)
    assert scopes["daily"].remaining is not None
    assert scopes["daily"].remaining < 1
    status, wait = waited(clock, lambda: get("/items/99"))
    assert status == 200
    assert wait >= 20  # the daily reset, though the burst quota had room long before


# ---------------------------------------------------------------------------- the caller's


def test_a_scope_function_on_the_edge_keeps_models_apart(edge: Callable[..., Get]) -> None:
    """Unnamed quotas belong to the caller's scope: one model's exhaustion holds only it."""
    clock = FakeClock(1000.0)
    quotas = {"small": Window(clock, 3, 20.0), "large": Window(clock, 3, 20.0)}

    def fake(method: str, path: str) -> tuple[int, dict[str, str]]:
        quota = quotas[path.rsplit("/", 1)[1]]
        ok = quota.take()
        headers = {
            "x-ratelimit-limit-requests": "3",
            "x-ratelimit-remaining-requests": str(quota.remaining),
            "x-ratelimit-reset-requests": f"{quota.reset_in:.0f}s",
        }
        return (200 if ok else 429), headers

    def model(request: ScopeRequest) -> str:
        return request.path.rsplit("/", 1)[1]

    pacer = Pacer(clock=clock, probe=0)
    get = edge(fake, pacer, clock, scope=model)
    for _ in range(3):
        assert get("/v1/models/small") == 200
    assert waited(clock, lambda: get("/v1/models/large")) == (200, 0.0)
    status, wait = waited(clock, lambda: get("/v1/models/small"))
    assert status == 200
    assert wait >= 15
    assert set(pacer.scopes(ORIGIN)) == {"small", "large"}
    assert pacer.view(ORIGIN).gate_in == 0  # the origin itself never closed


# ---------------------------------------------------------------------------- spent quotas


def _spent(dialect: str, clock: FakeClock, sent: list[float]) -> Fake:
    """A quota of 30 spent before the test began, resetting in 50 s, in one dialect."""
    quota = Window(clock, 30, 60.0)
    quota.used, quota.start = 30, clock() - 10

    def answer(method: str, path: str) -> tuple[int, dict[str, str]]:
        sent.append(clock())
        ok = quota.take()
        left, reset = quota.remaining, quota.reset_in
        if dialect == "github":
            headers = {
                "x-ratelimit-limit": "30",
                "x-ratelimit-remaining": str(left),
                # rounded up, as GitHub does (``int(x + 0.999)`` stated it up to 1 ms early)
                "x-ratelimit-reset": str(math.ceil(time.time() + reset)),
                "x-ratelimit-resource": "search",
            }
            return (200 if ok else 403), headers
        if dialect == "x-ratelimit":
            headers = {
                "X-RateLimit-Limit": "30",
                "X-RateLimit-Remaining": str(left),
                "X-RateLimit-Reset-After": f"{reset:.3f}",
            }
        else:  # the IETF fields
            headers = {
                "RateLimit-Policy": '"q";q=30;w=60',
                "RateLimit": f'"q";r={left};t={int(reset + 0.999)}',
            }
        return (200 if ok else 429), headers

    return answer


@pytest.mark.parametrize("dialect", ["github", "x-ratelimit", "ietf"])
def test_a_spent_quota_is_never_knocked_on_before_its_reset(
    edge: Callable[..., Get], dialect: str
) -> None:
    """
    The first call learns the quota is spent; the next ones, whose deadline ends long before
    its reset, are refused at once without sending, the reset in the error; after the reset
    calls go again, the first of them no earlier than a second before the stated reset.
    """
    clock = FakeClock(1000.0)
    pacer = Pacer(clock=clock, probe=0)
    sent: list[float] = []
    get = edge(_spent(dialect, clock, sent), pacer, clock, policy=RetryPolicy(timeout=2))
    assert get("/search/code") in (403, 429)  # sent (nothing was known), the reset past 2 s
    assert len(sent) == 1
    for _ in range(3):
        slept, began = len(clock.sleeps), clock()
        with pytest.raises(RateLimited) as refused:
            get("/search/code")
        assert clock.sleeps[slept:] == []  # no wait (how fast, in wall time: benchmarks/)
        assert clock() == began
        assert refused.value.retry_after >= 1050.0 - clock() - 1.0  # the reset, not sooner
        assert "closed until its reset" in str(refused.value)
        clock.advance(5.0)
    assert len(sent) == 1
    closed = pacer.scopes(ORIGIN) or {"": pacer.view(ORIGIN)}
    assert any(v.closed_for is not None and 30 <= v.closed_for <= 51 for v in closed.values())
    patient = edge(_spent(dialect, clock, sent), pacer, clock, policy=RetryPolicy(timeout=120))
    sent.clear()
    assert patient("/search/code") == 200
    assert sent
    assert sent[0] >= 1050.0 - 1.0  # near the stated reset, never long before
