"""Scopes: routes, the response split, the bound tracker, the bounded books (pure, fake clock)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from smoothclient import Pacer, read_hints
from smoothclient.hints.model import Hints, Quota, hints_of
from smoothclient.pacing import GITHUB_SCOPES, ScopeRequest, ScopeRule, ScopeRules
from smoothclient.pacing.scopes import Bound, OriginScopes, names_of, split, template
from smoothclient.pacing.steps import run
from smoothclient.testing import FakeClock

ORIGIN = "https://api.test:443"
NOW = 1_700_000_000.0


def route(request: Any) -> tuple[str, str]:
    method, path = request
    return str(method), str(path)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/repos/octo/cat/issues/1234", "GET /repos/octo/cat/issues/{}"),
        ("/items/8f14e45f-ceea-467f-a0e6-ff5f3bd1d2ab", "GET /items/{}"),
        ("/commits/2fd4e1c67a2d28fced849ee1bb76e7391b93eb12", "GET /commits/{}"),
        ("/customers/cus_NffrFeUfNV2Hib1x?expand=x", "GET /customers/{}"),
        ("/search/code", "GET /search/code"),
        ("/v1/chat/completions", "GET /v1/chat/completions"),
    ],
)
def test_ids_are_templated_out_of_routes(path: str, expected: str) -> None:
    assert template("get", path) == expected


def test_ten_thousand_ids_make_one_route() -> None:
    clock = FakeClock(0.0)
    pacer = Pacer(clock=clock, probe=0)
    hints = read_hints({"x-ratelimit-remaining": "10", "x-ratelimit-resource": "core"}, now=NOW)
    for n in range(10_000):
        tracker = pacer.bind(ORIGIN, ("GET", f"/users/{n}/repos"), route, late=n == 0)
        assert tracker is not None
        tracker.observe(200, hints, clock(), counted=False)
    assert pacer.routes(ORIGIN) == {"GET /users/{}/repos": ("core",)}


def test_requests_on_a_route_share_one_bound_until_its_scopes_change() -> None:
    clock = FakeClock(0.0)
    pacer = Pacer(clock=clock, probe=0)
    core = read_hints({"x-ratelimit-remaining": "10", "x-ratelimit-resource": "core"}, now=NOW)
    late = pacer.bind(ORIGIN, ("GET", "/users/1"), route, late=True)
    assert late is not None
    late.observe(200, core, clock(), counted=False)
    first = pacer.bind(ORIGIN, ("GET", "/users/2"), route)
    assert isinstance(first, Bound)
    assert pacer.bind(ORIGIN, ("GET", "/users/3"), route) is first  # nothing made per request
    search = read_hints({"x-ratelimit-remaining": "5", "x-ratelimit-resource": "search"}, now=NOW)
    first.observe(200, search, clock(), counted=False)  # the route now names another scope
    again = pacer.bind(ORIGIN, ("GET", "/users/4"), route)
    assert isinstance(again, Bound)
    assert again is not first
    assert [name for name, _ in again.scopes] == ["search"]


def test_routes_and_scopes_per_origin_are_bounded() -> None:
    clock = FakeClock(0.0)
    pacer = Pacer(clock=clock, probe=0, max_routes=4, max_scopes=3, max_origins=2)
    for n in range(50):  # a server naming a new scope on every new route
        hints = read_hints({"x-ratelimit-remaining": "9", "x-ratelimit-bucket": f"b{n}"})
        tracker = pacer.bind(ORIGIN, ("GET", f"/r{n}"), route, late=True)
        assert tracker is not None
        tracker.observe(200, hints, clock(), counted=False)
    assert len(pacer.routes(ORIGIN)) == 4
    assert len(pacer.scopes(ORIGIN)) == 3
    pacer.track("https://other.test:443")
    assert "https://other.test:443" in pacer.origins()  # scopes never push origins out
    assert all(" " not in origin for origin in pacer.origins())


def test_names_of_validates_what_a_scope_function_returns() -> None:
    assert names_of(None) == ()
    assert names_of("a") == ("a",)
    assert names_of(["a", "b", "a"]) == ("a", "b")
    assert names_of([f"s{n}" for n in range(9)]) == ("s0", "s1", "s2", "s3")  # at most 4
    for bad in (3, ["ok", 3], "", "two words"):
        with pytest.raises(TypeError, match="scope name"):
            names_of(bad)


def test_scope_rules_first_match_and_validation() -> None:
    on = ScopeRequest("GET", "https://api.github.com:443", "/search/code", None)
    assert GITHUB_SCOPES(on) == "code_search"
    assert GITHUB_SCOPES(ScopeRequest("GET", on.origin, "/search/issues", None)) == "search"
    assert GITHUB_SCOPES(ScopeRequest("POST", on.origin, "/graphql", None)) == "graphql"
    assert GITHUB_SCOPES(ScopeRequest("PATCH", on.origin, "/repos/a/b", None)) == "write"
    assert GITHUB_SCOPES(ScopeRequest("GET", on.origin, "/repos/a/b", None)) is None
    assert GITHUB_SCOPES(ScopeRequest("GET", "https://gh.test:443", "/search/x", None)) is None
    mine = ScopeRules((ScopeRule("mine", "/search/", methods={"get"}),)) + GITHUB_SCOPES
    assert mine(on) == "mine"  # the first rule wins
    with pytest.raises(ValueError, match="prefix"):
        ScopeRule("x", "search")
    with pytest.raises(TypeError, match="methods"):
        ScopeRule("x", "/", methods="GET")
    with pytest.raises(TypeError, match="scope name"):
        ScopeRule("two words")
    with pytest.raises(TypeError, match="ScopeRule"):
        ScopeRules(("x",))  # type: ignore[arg-type]


def test_bad_scope_functions_are_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="scope"):
        Pacer(scope="search")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_scopes"):
        Pacer(max_scopes=0)


def test_a_pacer_with_rules_pickles() -> None:
    pacer = pickle.loads(pickle.dumps(Pacer(scope=GITHUB_SCOPES, max_routes=9)))
    assert (pacer.scope, pacer.max_routes) == (GITHUB_SCOPES, 9)


# ---------------------------------------------------------------------------- hints


def test_hints_name_their_scopes() -> None:
    github = read_hints({"x-ratelimit-remaining": "0", "x-ratelimit-resource": "search"}, now=NOW)
    assert [q.scope for q in github.quotas] == ["search"]
    ietf = read_hints(
        {
            "RateLimit-Policy": '"burst";q=10;w=1, "daily";q=1000;w=86400',
            "RateLimit": '"burst";r=9;t=1, "daily";r=0;t=600',
        },
        now=NOW,
    )
    assert sorted(q.scope or "" for q in ietf.quotas) == ["burst", "daily"]
    assert ietf.scoped
    assert not ietf.origin_wide
    hostile = read_hints({"x-ratelimit-remaining": "1", "x-ratelimit-bucket": "a b" * 50})
    assert [q.scope for q in hostile.quotas] == [None]  # not a token: no scope
    assert not read_hints({"x-ratelimit-remaining": "1"}).scoped
    assert read_hints({"X-RateLimit-Global": "true", "Retry-After": "2"}).origin_wide
    assert read_hints({"X-RateLimit-Scope": "global", "Retry-After": "2"}).origin_wide
    assert not read_hints({"X-RateLimit-Scope": "user", "Retry-After": "2"}).origin_wide


# ---------------------------------------------------------------------------- split


def q(scope: str | None, remaining: float) -> Quota:
    return Quota("test", remaining, 10.0, None, 5.0, scope=scope)


def test_split_successes_update_every_scope_and_keep_host_signals() -> None:
    hints = hints_of([q("core", 5), q(None, 3)], retry_after=2.0)
    seen = {name: (status, h) for name, status, h in split(503, hints, ("core", "old"), ())}
    assert seen[None][1].remaining == 3
    assert seen[None][1].retry_after == 2.0
    assert seen["core"][1].remaining == 5
    assert seen["core"][1].retry_after is None
    assert seen["old"][1] == Hints()  # bound, not named: the status only


def test_split_a_throttle_goes_to_the_exhausted_scope() -> None:
    hints = hints_of([q("core", 4000), q("search", 0)], retry_after=30.0)
    seen = split(429, hints, ("core",), ())
    assert [(name, status) for name, status, _ in seen] == [("search", 429)]
    assert seen[0][2].retry_after == 30.0


def test_split_a_throttle_on_the_hosts_spent_quota_goes_to_the_host() -> None:
    """OpenAI's shape: the requests quota (unnamed) spent, the tokens scope not: the host's."""
    hints = hints_of([q(None, 0), q("tokens", 9)])
    seen = split(429, hints, ("tokens",), ())
    assert [(name, status) for name, status, _ in seen] == [(None, 429)]
    assert seen[0][2].exhausted


def test_split_a_throttle_without_an_exhausted_quota() -> None:
    plain = Hints(retry_after=1.0)
    assert [n for n, _, _ in split(429, plain, ("write",), ("write",))] == ["write"]
    assert [n for n, _, _ in split(429, plain, ("aaa",), ())] == ["aaa"]
    assert [n for n, _, _ in split(429, plain, (), ())] == [None]
    named = hints_of([q("core", 50)], retry_after=1.0)
    assert [n for n, _, _ in split(429, named, (), ())] == ["core"]
    glob = Hints(retry_after=3.0, origin_wide=True)
    assert [n for n, _, _ in split(429, glob, ("aaa",), ())] == [None]


def test_split_unnamed_quotas_belong_to_the_callers_scope() -> None:
    hints = hints_of([q(None, 0)])
    seen = {name: h for name, _, h in split(200, hints, ("gpt",), ("gpt",))}
    assert seen["gpt"].remaining == 0
    assert seen[None].remaining is None  # the origin does not close for it


# ---------------------------------------------------------------------------- Bound


def bound_pair(clock: FakeClock) -> tuple[Pacer, Bound]:
    pacer = Pacer(clock=clock, probe=0)
    book = OriginScopes(pacer.track)
    bound = Bound(
        pacer.track(ORIGIN), book.pairs(("x a", "x b")), given=(), route="GET /", book=book
    )
    return pacer, bound


def exhaust(pacer: Pacer, key: str, reset: float, now: float) -> None:
    pacer.track(key).observe(
        200, Hints(remaining=0, limit=10, reset_after=reset), now, counted=False
    )


def test_bound_waits_for_the_latest_slot() -> None:
    clock = FakeClock(0.0)
    pacer, bound = bound_pair(clock)
    pacer.track("x b").observe(503, Hints(retry_after=7.0), 0.0, counted=False)
    admission = bound.acquire(0.0)  # too far off to fix a slot: ask again, nothing held
    assert (admission.granted, admission.final) == (True, False)
    assert 6.5 < admission.delay <= 7.0
    assert [pacer.track(k).view(0.0).waiting for k in (ORIGIN, "x a", "x b")] == [0, 0, 0]
    admission = bound.acquire(6.9)
    assert (admission.granted, admission.final) == (True, True)
    assert admission.delay == pytest.approx(0.1)
    assert repr(bound) == "<Bound 'GET /' scopes=['x a', 'x b']>"


def test_bound_refused_by_one_cancels_the_others() -> None:
    clock = FakeClock(0.0)
    pacer, bound = bound_pair(clock)
    exhaust(pacer, "x b", 100.0, 0.0)
    admission = bound.acquire(0.0, deadline=5.0)
    assert not admission.granted
    assert pacer.track(ORIGIN).view(0.0).waiting == 0
    assert pacer.track("x a").view(0.0).waiting == 0


def test_bound_try_now_is_all_or_nothing() -> None:
    clock = FakeClock(0.0)
    pacer, bound = bound_pair(clock)
    assert bound.try_now(0.0)
    assert [pacer.track(k).view(0.0).in_flight for k in (ORIGIN, "x a", "x b")] == [1, 1, 1]
    bound.observe(200, Hints(), 0.0)
    assert [pacer.track(k).view(0.0).in_flight for k in (ORIGIN, "x a", "x b")] == [0, 0, 0]
    exhaust(pacer, "x b", 100.0, 0.0)
    assert not bound.try_now(0.0)
    assert [pacer.track(k).view(0.0).in_flight for k in (ORIGIN, "x a", "x b")] == [0, 0, 0]
    assert not bound.healthy(0.0)


def test_bound_releases_what_learned_nothing_and_counts_in_each() -> None:
    clock = FakeClock(0.0)
    pacer, bound = bound_pair(clock)
    bound.adopt()
    bound.observe(429, hints_of([q("a", 0)], retry_after=1.0), 0.0)  # only "a" throttled
    assert [pacer.track(k).view(0.0).in_flight for k in (ORIGIN, "x a", "x b")] == [0, 0, 0]
    bound.acquire(0.0)
    bound.sent()
    bound.failed()
    assert [pacer.track(k).view(0.0).in_flight for k in (ORIGIN, "x a", "x b")] == [0, 0, 0]
    bound.acquire(0.0)
    bound.cancel()
    assert [pacer.track(k).view(0.0).waiting for k in (ORIGIN, "x a", "x b")] == [0, 0, 0]


def test_bound_cohort_is_the_tightest() -> None:
    clock = FakeClock(0.0)
    pacer, bound = bound_pair(clock)
    pacer.track("x a").observe(200, Hints(remaining=5, limit=10, window=10), 0.0, counted=False)
    pacer.track(ORIGIN).observe(503, Hints(retry_after=4.0), 0.0, counted=False)
    cohort = bound.cohort(0.0)
    assert cohort.opens_in == pytest.approx(4.0)
    assert cohort.admitted_rate is not None
    bound.note_success(1.0)
    assert bound.view(0.0).origin == ORIGIN


@pytest.mark.parametrize("driver", ["sync", "steps"])
@pytest.mark.parametrize("origin_bound", [False, True])
def test_a_route_with_one_scope_releases_every_tracker_that_counted_it(
    driver: str, origin_bound: bool
) -> None:
    # The common case (one scope, a success naming only it) takes a shortcut past split():
    # the scope learns the quota; the origin is released too when it admitted the request.
    pacer = Pacer(clock=FakeClock(0.0), probe=0)
    book = OriginScopes(pacer.track)
    bound = Bound(
        pacer.track(ORIGIN),
        book.pairs(("x a",)),
        given=(),
        route="GET /",
        book=book,
        origin_bound=origin_bound,
    )
    bound.adopt()
    hints = hints_of([q("x a", 7)])
    if driver == "sync":
        bound.observe(200, hints, 1.0)
    else:
        run(bound.steps.observe(200, hints, 1.0))
    origin, scope = pacer.track(ORIGIN).view(1.0), pacer.track("x a").view(1.0)
    assert (origin.in_flight, scope.in_flight) == (0, 0)
    assert scope.remaining == 7
    assert origin.remaining is None  # the scope's quota is not the host's


def test_a_scope_forgotten_by_its_origin_is_forgotten_by_the_store() -> None:
    """A server naming a new scope on every response keeps the store bounded by max_scopes."""
    pacer = Pacer(probe=0, max_scopes=4)
    book = pacer.scope_book
    origin = "https://named.test:443"
    pacer.track(origin)
    for i in range(50):
        pacer._books.get(origin).pairs((f"scope-{i}",))
    assert book(origin) is not None
    stored = pacer._store.keys()
    scoped = [key for key in stored if key.startswith(origin + " ")]
    assert len(scoped) == 4
    assert set(pacer.scopes(origin)) == {f"scope-{i}" for i in range(46, 50)}


def test_binding_fresh_is_deprecated_and_changes_nothing() -> None:
    """``fresh=`` warns, and binds as without it (a process with no copy reads the key first)."""
    pacer = Pacer(clock=FakeClock(), probe=0, scope=lambda r: "search")

    def route_of(request: object) -> tuple[str, str]:
        return "GET", str(request)

    with pytest.warns(DeprecationWarning, match="fresh"):
        warned = pacer.bind(ORIGIN, "/search/1", route_of, fresh=True)
    with pytest.warns(DeprecationWarning, match="fresh"):
        stepped = run(pacer.binding(ORIGIN, "/search/1", route_of, fresh=False))
    plain = pacer.bind(ORIGIN, "/search/1", route_of)
    assert isinstance(warned, Bound)
    assert isinstance(stepped, Bound)
    assert isinstance(plain, Bound)
    assert [n for n, _ in warned.scopes] == [n for n, _ in plain.scopes] == ["search"]
    assert [n for n, _ in stepped.scopes] == ["search"]
