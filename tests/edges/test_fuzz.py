"""
Property: whatever a server answers, a call ends within its bounds.

Random statuses and header sets (rate-limit fields with hostile values among them) go through
the real transport over ``MockTransport`` on a fake clock.  Whatever happens: no exception but
httpx's own (or smoothclient's ``RateLimited``), no single sleep past ``max_retry_after``, no
call past its deadline.  ``make fuzz`` runs the same properties with many more examples.
"""

from __future__ import annotations

import contextlib
import os

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smoothclient import Pacer, RateLimited, RetryPolicy, SmoothTransport
from smoothclient.testing import FakeClock

EXAMPLES = int(os.environ.get("SMOOTHCLIENT_FUZZ_EXAMPLES", "300"))
NAMES = [
    "Retry-After",
    "RateLimit",
    "RateLimit-Policy",
    "RateLimit-Reset",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "X-RateLimit-Reset-After",
    "X-RateLimit-Interval-Seconds",
    "Retry-After-Ms",
    "Content-Length",
    "Date",
    "zendesk-ratelimit-tickets-index",
    "Sforce-Limit-Info",
    "X-RateLimit-Resource",
    "X-RateLimit-Bucket",
    "X-RateLimit-Global",
    "X-RateLimit-Scope",
]
VALUES = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        [
            "1" + "0" * 299,
            "0.0000000001",
            '"default";r=0;t=999999',
            '"default";q=1;w=0',
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Fri, 31 Dec 9999 23:59:59 GMT",
            "total=1; remaining=0; resets=999999",
            "api-usage=1/1",
            "search",
            "core",
            "true",
            "global",
            '"burst";r=0;t=5, "daily";r=3;t=60',
            "9" * 5000,
            "",
        ]
    ),
    st.text(max_size=40),
)
ANSWERS = st.lists(
    st.tuples(
        st.sampled_from([200, 200, 403, 404, 429, 429, 500, 503]),
        st.lists(st.tuples(st.sampled_from(NAMES), VALUES), max_size=5),
    ),
    min_size=1,
    max_size=6,
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    answers=ANSWERS, timeout=st.sampled_from([None, 5.0, 60.0]), cap=st.sampled_from([2.0, 300.0])
)
def test_any_answers_end_within_the_bounds(
    answers: list[tuple[int, list[tuple[str, str]]]], timeout: float | None, cap: float
) -> None:
    """No foreign exception, no sleep past max_retry_after, no call past its deadline."""
    clock = FakeClock(1_000.0)
    sent = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal sent
        status, headers = answers[min(sent, len(answers) - 1)]
        sent += 1
        safe = [(n, v) for n, v in headers if n != "Content-Length" or v.isdigit()]
        raw = [(n.encode("latin-1"), v.encode("latin-1", "replace")) for n, v in safe]
        return httpx.Response(status, headers=raw)

    policy = RetryPolicy(attempts=4, timeout=timeout, max_retry_after=cap)
    transport = SmoothTransport(
        httpx.MockTransport(handler), policy=policy, pacer=Pacer(clock=clock), sleep=clock.sleep
    )
    with httpx.Client(transport=transport) as client:
        for n in range(3):  # later calls meet what the first taught the pacer (and its scopes)
            start = clock()
            with contextlib.suppress(httpx.HTTPError, RateLimited):
                client.get(f"https://api.test/x/{n}" if n < 2 else "https://api.test/y")
            if timeout is not None:
                assert clock() - start <= timeout + 1e-6
    assert max(clock.sleeps, default=0.0) <= cap + 1e-6
