"""Every provider row and trap of docs/headers.md, in its documented format."""

from __future__ import annotations

import email.utils
import math
import re

import httpx
import pytest
import requests.structures
from hypothesis import given
from hypothesis import strategies as st

from smoothclient import Hints, read_hints
from smoothclient.hints import has_hints, read_body_hints, wants_body, with_body_hints
from smoothclient.hints.fields import GENERIC, MAX_NAME, QUOTA_PREFIXES, FieldAccess, KnownNames
from smoothclient.hints.numbers import parse_date, parse_go_duration, parse_number
from smoothclient.hints.read import EXTRACTORS, read_fields

NOW = 1_700_000_000.0  # Tue, 14 Nov 2023 22:13:20 GMT


def http_date(epoch: float) -> str:
    return email.utils.formatdate(epoch, usegmt=True)


# ----------------------------------------------------------- grammar (docs/headers.md R2, R3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("120", 120.0),
        ("2.0", 2.0),
        (" 7 ", 7.0),
        ("-1", None),
        ("+5", None),
        ("1e3", None),
        ("1_000", None),
        ("NaN", None),
        ("inf", None),
        ("0x10", None),
        ("4999abc", None),
        ("١٢", None),  # Arabic-Indic digits, which int() accepts
        ("", None),
        ("9" * 500, None),
        ("9" * 400, None),  # short enough to read, too large for a float
        ("9" * 300, 1e300),
        ("1" + "0" * 308, 1e308),
    ],
)
def test_number_grammar(text: str, expected: float | None) -> None:
    assert expected == parse_number(text)


def strict_number(text: str) -> float | None:
    """docs/headers.md R2 spelled out: the reference parse_number's short paths must agree with."""
    text = text.strip(" \t")
    if len(text) > 400 or not re.fullmatch(r"[0-9]+(\.[0-9]+)?", text, re.ASCII):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


@given(
    st.text(alphabet=" \t0123456789.e+-_٣", max_size=12)
    | st.text(max_size=8)
    | st.builds(lambda d, n: d * n, st.sampled_from("159"), st.integers(290, 410))  # near 1e308
)
def test_number_grammar_matches_its_definition(text: str) -> None:
    assert parse_number(text) == strict_number(text)


@pytest.mark.parametrize(
    "text",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
        "Sunday, 06-Nov-94 08:49:37 GMT",  # rfc850
        "Sun Nov  6 08:49:37 1994",  # asctime
        "Mon, 06 Nov 1994 08:49:37 GMT",  # bogus weekday
        "Sun, 06 Nov 1994 08:49:37",  # missing zone = GMT
        "Sun, 06 Nov 1994 09:49:37 +0100",  # numeric offset
    ],
)
def test_all_http_date_forms(text: str) -> None:
    assert parse_date(text, NOW) == 784111777.0


def test_two_digit_year_far_ahead_is_past_century() -> None:
    """A two-digit year more than 50 years ahead is read as the past century."""
    assert parse_date("Sunday, 06-Nov-94 08:49:37 GMT", NOW) == 784111777.0
    assert parse_date("Monday, 06-Nov-23 08:49:37 GMT", NOW) == 1699260577.0


@pytest.mark.parametrize(
    "text",
    [
        "120 (comment)",
        "Tue Feb 16 2021 09:02:42 GMT+0100 (Central European Standard Time)",
        "Sun, 31 Feb 1994 08:49:37 GMT",
        "Sun, 06 Nov 100000 08:49:37 GMT",
        "yesterday",
    ],
)
def test_garbage_dates(text: str) -> None:
    assert parse_date(text, NOW) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("12ms", 0.012),
        ("850ms", 0.85),
        ("1m30s", 90.0),
        ("1h2m3.5s", 3723.5),
        ("0", 0.0),
    ],
)
def test_go_durations(text: str, expected: float) -> None:
    assert parse_go_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "1x", "s", "1s garbage", "-1s"])
def test_bad_go_durations(text: str) -> None:
    assert parse_go_duration(text) is None


# ----------------------------------------------------------- Retry-After (docs/headers.md R3-R5)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "120"}, 120.0),
        ({"Retry-After": "2.0"}, 2.0),  # Shopify decimal
        ({"Retry-After": http_date(NOW + 30)}, 30.0),
        ({"Retry-After": http_date(NOW - 3600)}, 0.0),  # past date: now
        ({"Retry-After": "Fri, 31 Dec 1999 23:59:59 GMT"}, 0.0),
        ({"Retry-After": "-5"}, None),
        ({"Retry-After": "120 (comment)"}, None),
        ({"Retry-After": str(400 * 86400)}, 365 * 86400.0),  # beyond the horizon: "long"
        ({"Retry-After": http_date(NOW + 400 * 86400)}, 365 * 86400.0),
        ({"Retry-After": "9" * 35}, None),
        ({"Retry-After": str(int(NOW + 40))}, 40.0),  # numeric above 1e9: epoch
        ({"retry-after-ms": "1500"}, 1.5),
        ({"x-ms-retry-after-ms": "1000"}, 1.0),  # Cosmos DB, Azure OpenAI
        ({"Retry-After": "2", "retry-after-ms": "1500"}, 1.5),  # |diff| < 1: the precise one
        ({"Retry-After": "10", "retry-after-ms": "1500"}, 10.0),  # otherwise the max
        ({"Retry-After": "10", "retry-after-ms": "junk"}, 10.0),  # invalid ms does not mask
        ({"X-RateLimit-Retry-After": "12"}, 12.0),  # Symfony / MailerLite
        ({"Retry-After": "5", "X-RateLimit-Retry-After": "12"}, 5.0),
        ({"Retry-After": "0"}, 0.0),  # Atlassian DC on 2xx: informational
    ],
)
def test_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert expected == read_hints(headers, now=NOW).retry_after


def test_retry_after_repeated_takes_the_max() -> None:
    """docs/headers.md R5: several values (lines or comma-joined) give the conservative max."""
    assert read_hints([("Retry-After", "5"), ("retry-after", "9")], now=NOW).retry_after == 9.0
    assert read_hints({"Retry-After": "5, 9"}, now=NOW).retry_after == 9.0


def test_date_header_rebases_absolute_times() -> None:
    """docs/headers.md R8: our clock 120 s ahead, the reset is read against the server's Date."""
    server_now = NOW - 120
    headers = {
        "Date": http_date(server_now),
        "X-RateLimit-Reset": str(int(server_now + 60)),
        "X-RateLimit-Remaining": "0",
        "Retry-After": http_date(server_now + 30),
    }
    hints = read_hints(headers, now=NOW)
    assert hints.reset_after == 60.0
    assert hints.retry_after == 30.0


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.84, 0.99])
def test_whole_second_date_does_not_shift_a_fractional_reset(fraction: float) -> None:
    """A Date in step with our clock (whole seconds behind it) leaves resets to the local clock."""
    now = 1_800_000_000.0 + fraction
    headers = {
        "Date": http_date(now),  # truncated to the second, as servers send it
        "X-RateLimit-Limit": "10",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": f"{now + 0.3:.3f}",
    }
    assert read_hints(headers, now=now).reset_after == pytest.approx(0.3, abs=0.001)


def test_insane_date_header_is_ignored() -> None:
    headers = {"Date": "Sun, 06 Nov 1994 08:49:37 GMT", "X-RateLimit-Reset": str(int(NOW + 60))}
    assert read_hints(headers, now=NOW).reset_after == 60.0


# --------------------------------------------------------------------------- providers (section 2)


def test_github() -> None:
    hints = read_hints(
        {
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": "4999",
            "x-ratelimit-used": "1",
            "x-ratelimit-reset": str(int(NOW + 3000)),
            "x-ratelimit-resource": "core",
        },
        now=NOW,
    )
    assert (hints.limit, hints.remaining, hints.reset_after) == (5000, 4999, 3000)


def test_github_secondary_limit() -> None:
    hints = read_hints({"retry-after": "60", "x-ratelimit-remaining": "4990"}, now=NOW)
    assert hints.retry_after == 60
    assert not hints.exhausted


def test_twitter() -> None:
    hints = read_hints(
        {
            "x-rate-limit-limit": "900",
            "x-rate-limit-remaining": "847",
            "x-rate-limit-reset": str(int(NOW + 900)),
        },
        now=NOW,
    )
    assert (hints.limit, hints.remaining, hints.reset_after) == (900, 847, 900)


def test_reddit_float_remaining_and_delta_reset() -> None:
    hints = read_hints(
        {"x-ratelimit-used": "1", "x-ratelimit-remaining": "0.0", "x-ratelimit-reset": "58"},
        now=NOW,
    )
    assert (hints.remaining, hints.limit, hints.reset_after) == (0.0, 1.0, 58.0)
    assert hints.exhausted
    hints = read_hints(
        {"x-ratelimit-used": "4", "x-ratelimit-remaining": "596.0", "x-ratelimit-reset": "58"},
        now=NOW,
    )
    assert hints.limit == 600.0


def test_discord_prefers_reset_after() -> None:
    hints = read_hints(
        {
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": f"{NOW + 70:.3f}",
            "X-RateLimit-Reset-After": "64.57",
            "X-RateLimit-Bucket": "abcd1234",
            "Retry-After": "65",
        },
        now=NOW,
    )
    assert hints.reset_after == 64.57
    assert hints.retry_after == 65


def test_okta() -> None:
    hints = read_hints(
        {
            "X-Rate-Limit-Limit": "1200",
            "X-Rate-Limit-Remaining": "1199",
            "X-Rate-Limit-Reset": str(int(NOW + 60)),
        },
        now=NOW,
    )
    assert (hints.limit, hints.remaining, hints.reset_after) == (1200, 1199, 60)


def test_shopify_used_of_bucket() -> None:
    hints = read_hints(
        {"X-Shopify-Shop-Api-Call-Limit": "40/40", "Retry-After": "2.0"},
        now=NOW,
    )
    assert (hints.remaining, hints.limit, hints.retry_after) == (0, 40, 2.0)
    assert read_hints({"X-Shopify-Shop-Api-Call-Limit": "32/40"}, now=NOW).remaining == 8


def test_stripe_should_retry() -> None:
    assert read_hints({"Stripe-Should-Retry": "true"}, now=NOW).should_retry is True
    assert read_hints({"Stripe-Should-Retry": "false"}, now=NOW).should_retry is False
    assert read_hints({"Stripe-Should-Retry": "maybe"}, now=NOW).should_retry is None


def test_slack_and_kubernetes_retry_after() -> None:
    assert read_hints({"Retry-After": "30"}, now=NOW).retry_after == 30
    assert read_hints({"Retry-After": "1"}, now=NOW).retry_after == 1


def test_openai_requests_and_tokens() -> None:
    hints = read_hints(
        {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-limit-tokens": "150000",
            "x-ratelimit-remaining-requests": "59",
            "x-ratelimit-remaining-tokens": "149984",
            "x-ratelimit-reset-requests": "1s",
            "x-ratelimit-reset-tokens": "6m0s",
            "x-should-retry": "true",
        },
        now=NOW,
    )
    assert (hints.remaining, hints.limit, hints.reset_after) == (59, 60, 1.0)
    assert hints.unit == "requests"
    assert hints.should_retry is True
    tokens = next(q for q in hints.quotas if q.unit == "tokens")
    assert tokens.reset_after == 360.0


def test_openai_token_quota_binds_when_exhausted() -> None:
    hints = read_hints(
        {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "59",
            "x-ratelimit-limit-tokens": "150000",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-tokens": "12ms",
        },
        now=NOW,
    )
    assert hints.unit == "tokens"
    assert hints.exhausted
    assert hints.reset_after == pytest.approx(0.012)
    assert hints.admitted_rate is None


OPENAI = {
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-remaining-requests": "499",
    "x-ratelimit-reset-requests": "120ms",
    "x-ratelimit-limit-tokens": "30000",
    "x-ratelimit-remaining-tokens": "1000",
    "x-ratelimit-reset-tokens": "1m30s",
}


def test_a_token_quota_is_a_scope_of_its_own() -> None:
    """docs/headers.md R16: the request quota stays unscoped, the tokens one is 'tokens'."""
    hints = read_hints(OPENAI, now=NOW)
    scopes = {q.unit: q.scope for q in hints.quotas}
    assert scopes == {"requests": None, "tokens": "tokens"}
    tokens = next(q for q in hints.quotas if q.scope == "tokens")
    assert (tokens.remaining, tokens.reset_after) == (1000, 90.0)


def test_a_token_quota_reads_as_calls_when_a_call_costs_known_tokens() -> None:
    """R16 with a cost per call: 1000 tokens left at 300 a call admit 3 calls."""
    access = FieldAccess(GENERIC.names, GENERIC.pairs, lambda: 300.0)
    hints = read_fields(OPENAI, access, now=NOW)
    tokens = next(q for q in hints.quotas if q.scope == "tokens")
    assert (tokens.unit, tokens.remaining, tokens.limit) == ("requests", 3.0, 100.0)
    assert hints.remaining == 3.0  # now the one closest to running out (R10)
    no_estimate = FieldAccess(GENERIC.names, GENERIC.pairs, lambda: None)
    assert read_fields(OPENAI, no_estimate, now=NOW).quotas == read_hints(OPENAI, now=NOW).quotas


def test_anthropics_four_quotas_three_of_them_scopes_of_tokens() -> None:
    fields = {"retry-after": "7"}
    for dim in ("requests", "tokens", "input-tokens", "output-tokens"):
        fields |= {
            f"anthropic-ratelimit-{dim}-limit": "1000",
            f"anthropic-ratelimit-{dim}-remaining": "900",
            f"anthropic-ratelimit-{dim}-reset": "2023-11-14T22:13:30.5Z",
        }
    hints = read_hints(fields, now=NOW)
    assert sorted(str(q.scope) for q in hints.quotas) == [
        "None",
        "input-tokens",
        "output-tokens",
        "tokens",
    ]
    assert all(q.reset_after == pytest.approx(10.5) for q in hints.quotas)
    assert hints.retry_after == 7


def test_anthropic_rfc3339_reset() -> None:
    hints = read_hints(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "2023-11-14T22:14:00Z",
            "anthropic-ratelimit-tokens-limit": "40000",
            "anthropic-ratelimit-tokens-remaining": "39000",
            "anthropic-ratelimit-tokens-reset": "2023-11-14T22:14:30Z",
            "retry-after": "15",
        },
        now=NOW,
    )
    assert (hints.remaining, hints.limit, hints.reset_after) == (0, 50, 40.0)
    assert hints.retry_after == 15


def test_azure_resource_manager() -> None:
    hints = read_hints(
        {
            "x-ms-ratelimit-remaining-subscription-reads": "11999",
            "x-ms-ratelimit-remaining-resource": (
                "Microsoft.Compute/GetVMScaleSet3Min;197,Microsoft.Compute/GetVMScaleSet30Min;1297"
            ),
        },
        now=NOW,
    )
    assert hints.remaining == 197


def test_azure_openai_sentinels_are_null() -> None:
    hints = read_hints(
        {
            "x-ratelimit-limit-tokens": "-1",
            "x-ratelimit-remaining-tokens": "-1",
            "x-ratelimit-reset-tokens": "0",
        },
        now=NOW,
    )
    assert hints.remaining is None
    assert hints.limit is None


def test_cloudflare_draft_08() -> None:
    hints = read_hints(
        {
            "Ratelimit": '"default";r=50;t=30',
            "Ratelimit-Policy": '"default";q=100;w=60',
            "retry-after": "30",
        },
        now=NOW,
    )
    assert (hints.remaining, hints.limit, hints.window, hints.reset_after) == (50, 100, 60, 30)
    assert hints.admitted_rate == pytest.approx(50 / 30)


def test_cloudflare_unrelated_names_are_not_paired() -> None:
    """docs/headers.md R11: pair by name only; Cloudflare's own examples use different names."""
    hints = read_hints(
        {"Ratelimit": '"default";r=50;t=30', "Ratelimit-Policy": '"burst";q=100;w=60'},
        now=NOW,
    )
    assert hints.remaining == 50
    assert hints.limit is None


def test_gitlab_epoch_reset_under_ietf_name() -> None:
    hints = read_hints(
        {
            "RateLimit-Limit": "600",
            "RateLimit-Observed": "6",
            "RateLimit-Remaining": "594",
            "RateLimit-Reset": str(int(NOW + 40)),
            "RateLimit-ResetTime": http_date(NOW + 40),
            "RateLimit-Name": "throttle_authenticated_api",
        },
        now=NOW,
    )
    assert (hints.limit, hints.remaining, hints.reset_after) == (600, 594, 40)


def test_jira_minute_precision_reset() -> None:
    hints = read_hints(
        {
            "Retry-After": "40",
            "X-RateLimit-Limit": "100",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": "2023-11-14T22:14Z",
            "X-RateLimit-NearLimit": "true",
            "RateLimit-Reason": "jira-burst-based",
        },
        now=NOW,
    )
    assert hints.reset_after == 40.0
    assert hints.retry_after == 40.0


def test_atlassian_data_center() -> None:
    hints = read_hints(
        {
            "X-RateLimit-Limit": "100",
            "X-RateLimit-Remaining": "98",
            "X-RateLimit-Interval-Seconds": "1",
            "X-RateLimit-FillRate": "20",
            "retry-after": "0",
        },
        now=NOW,
    )
    assert (hints.remaining, hints.window, hints.retry_after) == (98, 1, 0)


def test_zendesk() -> None:
    hints = read_hints(
        {
            "X-Rate-Limit": "700",
            "X-Rate-Limit-Remaining": "699",
            "ratelimit-limit": "100",
            "ratelimit-remaining": "99",
            "ratelimit-reset": "41",
            "zendesk-ratelimit-tickets-index": "total=100; remaining=9; resets=41",
        },
        now=NOW,
    )
    assert (hints.remaining, hints.limit, hints.reset_after) == (9, 100, 41)


def test_hubspot_interval_is_window_length() -> None:
    hints = read_hints(
        {
            "X-HubSpot-RateLimit-Daily": "250000",
            "X-HubSpot-RateLimit-Daily-Remaining": "249000",
            "X-HubSpot-RateLimit-Interval-Milliseconds": "10000",
            "X-HubSpot-RateLimit-Max": "100",
            "X-HubSpot-RateLimit-Remaining": "10",
        },
        now=NOW,
    )
    assert (hints.remaining, hints.limit, hints.window, hints.reset_after) == (10, 100, 10, None)


def test_salesforce_usage_is_used_not_remaining() -> None:
    hints = read_hints({"Sforce-Limit-Info": "api-usage=25/5000"}, now=NOW)
    assert (hints.remaining, hints.limit, hints.window) == (4975, 5000, 86400)
    hints = read_hints(
        {"Sforce-Limit-Info": "api-usage=10018/100000; per-app-api-usage=240/250(appName=x)"},
        now=NOW,
    )
    assert (hints.remaining, hints.limit) == (10, 250)


def test_google_and_nginx_send_nothing() -> None:
    assert read_hints({"Content-Type": "application/json"}, now=NOW) == Hints()


def test_kong() -> None:
    hints = read_hints(
        {
            "RateLimit-Limit": "6",
            "RateLimit-Remaining": "4",
            "RateLimit-Reset": "47",
            "X-RateLimit-Limit-Minute": "10",
            "X-RateLimit-Remaining-Minute": "4",
            "Retry-After": "47",
        },
        now=NOW,
    )
    # the per-minute quota (4 of 10) is closer to exhaustion than RateLimit-* (4 of 6)
    assert (hints.remaining, hints.limit, hints.window) == (4, 10, 60)
    minute = next(q for q in hints.quotas if q.source.endswith("minute"))
    assert minute.window == 60


def test_whoop_legacy_limit_list() -> None:
    hints = read_hints(
        {
            "X-RateLimit-Limit": "100, 100;window=60, 10000;window=86400",
            "X-RateLimit-Remaining": "98",
            "X-RateLimit-Reset": "23",
        },
        now=NOW,
    )
    assert (hints.limit, hints.window, hints.remaining, hints.reset_after) == (100, 60, 98, 23)


def test_prisjakt_ms_delta_needs_an_override() -> None:
    headers = {"X-Rate-Limit-Reset": "600000", "X-Rate-Limit-Remaining": "0"}
    assert read_hints(headers, now=NOW).reset_after == 600000.0  # auto: delta seconds
    assert read_hints(headers, now=NOW, reset_format="delta-ms").reset_after == 600.0


def test_epoch_ms_reset() -> None:
    hints = read_hints(
        {"X-RateLimit-Reset": str(int((NOW + 12) * 1000)), "X-RateLimit-Remaining": "0"}, now=NOW
    )
    assert hints.reset_after == 12.0


def test_lemlist_js_date_is_rejected() -> None:
    hints = read_hints(
        {
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": (
                "Tue Feb 16 2021 09:02:42 GMT+0100 (Central European Standard Time)"
            ),
        },
        now=NOW,
    )
    assert hints.reset_after is None
    assert hints.remaining == 0


def test_rachio_rfc3339_reset() -> None:
    hints = read_hints(
        {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "2023-11-15T00:00:00Z"}, now=NOW
    )
    assert hints.reset_after == pytest.approx(1_700_006_400 - NOW)


@pytest.mark.parametrize(
    ("reset", "expected"),
    [
        (str(int(NOW - 30)), 0.0),  # slightly past: 0
        (str(int(NOW - 2 * 86400)), None),  # more than a day past: garbage
        (str(int(NOW + 400 * 86400)), None),  # more than a year ahead
    ],
)
def test_epoch_window(reset: str, expected: float | None) -> None:
    hints = read_hints({"X-RateLimit-Reset": reset, "X-RateLimit-Remaining": "0"}, now=NOW)
    assert expected == hints.reset_after


# ----------------------------------------------------------- IETF drafts (docs/headers.md R11)


def test_draft_07_dictionary() -> None:
    hints = read_hints(
        {"RateLimit": "limit=100, remaining=50, reset=5", "RateLimit-Policy": "100;w=10"}, now=NOW
    )
    assert (hints.limit, hints.remaining, hints.reset_after, hints.window) == (100, 50, 5, 10)


def test_draft_04_separate_fields() -> None:
    hints = read_hints(
        {
            "RateLimit-Limit": "10",
            "RateLimit-Remaining": "3",
            "RateLimit-Reset": "7",
            "RateLimit-Policy": "10;w=1, 50;w=60, 1000;w=3600, 5000;w=86400",
        },
        now=NOW,
    )
    assert (hints.limit, hints.remaining, hints.reset_after, hints.window) == (10, 3, 7, 1)


def test_draft_01_legacy_limit_list() -> None:
    hints = read_hints(
        {"RateLimit-Limit": "100, 100;w=60", "RateLimit-Remaining": "50", "RateLimit-Reset": "50"},
        now=NOW,
    )
    assert (hints.limit, hints.window) == (100, 60)


def test_multiple_policies_bind_closest_to_exhaustion() -> None:
    hints = read_hints(
        {
            "RateLimit-Policy": '"permin";q=50;w=60, "perhr";q=1000;w=3600',
            "RateLimit": '"permin";r=40;t=10, "perhr";r=20;t=1200',
        },
        now=NOW,
    )
    assert (hints.remaining, hints.limit, hints.window, hints.reset_after) == (20, 1000, 3600, 1200)


def test_ratelimit_split_across_lines() -> None:
    hints = read_hints(
        [
            ("RateLimit-Policy", '"a";q=50;w=60'),
            ("RateLimit-Policy", '"b";q=10;w=1'),
            ("RateLimit", '"a";r=40'),
            ("RateLimit", '"b";r=1;t=1'),
        ],
        now=NOW,
    )
    assert (hints.remaining, hints.limit) == (1, 10)


def test_non_request_units_do_not_count() -> None:
    hints = read_hints(
        {
            "RateLimit-Policy": '"bytes";q=1000;qu="content-bytes";w=60, "req";q=10;w=1',
            "RateLimit": '"req";r=5;t=1',
        },
        now=NOW,
    )
    assert (hints.remaining, hints.limit, hints.unit) == (5, 10, "requests")


@pytest.mark.parametrize(
    "bad",
    [
        '"default";r=-1',  # negative
        '"default";r=1.5',  # Decimal
        '"default";t=3',  # missing r
    ],
)
def test_bad_items_are_ignored_on_their_own(bad: str) -> None:
    hints = read_hints({"RateLimit": f'{bad}, "other";r=7'}, now=NOW)
    assert hints.remaining == 7
    assert len(hints.quotas) == 1


def test_malformed_field_is_ignored_whole() -> None:
    hints = read_hints({"RateLimit": '"default";r=50;t=30,,,', "Retry-After": "3"}, now=NOW)
    assert hints.remaining is None
    assert hints.retry_after == 3


def test_cached_responses_carry_no_quota() -> None:
    headers = {"Age": "30", "RateLimit": '"d";r=0;t=30', "Retry-After": "3"}
    hints = read_hints(headers, now=NOW)
    assert hints.remaining is None
    assert hints.retry_after == 3


# ----------------------------------------------------------- header access (docs/headers.md R1)


def test_header_containers() -> None:
    """dict, httpx.Headers (repeated lines kept), requests' dict and pairs all work."""
    pairs = [("Retry-After", "4"), ("retry-after", "6")]
    assert read_hints(httpx.Headers(pairs), now=NOW).retry_after == 6
    cid = requests.structures.CaseInsensitiveDict({"RETRY-AFTER": "4"})
    assert read_hints(cid, now=NOW).retry_after == 4
    assert read_hints([(b"Retry-After", b"5")], now=NOW).retry_after == 5


def test_binding_ties_and_zero_limit() -> None:
    """remaining = 0 binds; a limit of 0 is a real value."""
    hints = read_hints(
        {
            "x-ratelimit-limit": "0",
            "x-ratelimit-remaining": "0",
            "ratelimit-limit": "100",
            "ratelimit-remaining": "50",
        },
        now=NOW,
    )
    assert (hints.limit, hints.remaining) == (0, 0)


def test_now_defaults_to_the_wall_clock() -> None:
    import time

    hints = read_hints({"X-RateLimit-Reset": str(int(time.time()) + 100)})
    assert hints.reset_after is not None
    assert 98 <= hints.reset_after <= 100


header_names = st.sampled_from(
    [
        "retry-after",
        "retry-after-ms",
        "ratelimit",
        "ratelimit-policy",
        "ratelimit-limit",
        "ratelimit-reset",
        "x-ratelimit-reset",
        "x-ratelimit-remaining",
        "x-ratelimit-limit",
        "x-ratelimit-reset-tokens",
        "anthropic-ratelimit-requests-reset",
        "sforce-limit-info",
        "x-shopify-shop-api-call-limit",
        "zendesk-ratelimit-x",
        "x-ms-ratelimit-remaining-resource",
        "date",
        "age",
    ]
)


@given(st.lists(st.tuples(header_names | st.text(max_size=30), st.text(max_size=80)), max_size=8))
def test_never_raises(pairs: list[tuple[str, str]]) -> None:
    """Arbitrary text in any header never raises, and results are sane."""
    hints = read_hints(pairs, now=NOW)
    for value in (hints.retry_after, hints.reset_after):
        assert value is None or 0 <= value <= 365 * 86400
    for count in (hints.remaining, hints.limit):
        assert count is None or count >= 0


@given(st.binary(max_size=60))
def test_never_raises_on_bytes(raw: bytes) -> None:
    read_hints([(b"ratelimit", raw), (b"retry-after", raw)], now=NOW)


def test_broken_mapping_does_not_raise() -> None:
    class Broken:
        def items(self) -> None:
            raise RuntimeError("boom")

        def __iter__(self) -> None:
            raise RuntimeError("boom")

    assert read_hints(Broken(), now=NOW) == Hints()


# --------------------------------------------------------------------------- the cheap scan


value_text = st.sampled_from(["1", "0", "60", '"d";r=5;t=9', '"d";q=10;w=60', "garbage", ""])
named = st.lists(
    st.tuples(
        header_names | st.sampled_from(["Server", "content-type", "X-Request-Id"]), value_text
    ),
    max_size=6,
)


def as_types(pairs: list[tuple[str, str]]) -> list[object]:
    """The same fields as every kind of headers the edges and users pass."""
    ascii_pairs = [(n, v) for n, v in pairs if n.isascii()]
    return [
        pairs,
        dict(pairs),
        httpx.Headers(ascii_pairs),
        requests.structures.CaseInsensitiveDict(dict(pairs)),
        {n.upper().encode(): v.encode() for n, v in ascii_pairs},
    ]


@given(named)
def test_has_hints_false_means_nothing_to_read(pairs: list[tuple[str, str]]) -> None:
    """The scan is a sound shortcut: when it says no, read_hints finds nothing either."""
    for headers in as_types(pairs):
        if not has_hints(headers):
            assert read_hints(headers, now=NOW) == Hints()


@pytest.mark.parametrize("make", [dict, httpx.Headers, requests.structures.CaseInsensitiveDict])
def test_has_hints_after_learning_names(make: type) -> None:
    """Names learned as irrelevant never hide a relevant one that arrives later."""
    boring = make({"Server": "x", "Content-Type": "text/plain"})
    assert not has_hints(boring)
    assert not has_hints(boring)  # now answered from the learned names
    assert has_hints(make({"Server": "x", "Retry-After": "5"}))
    assert has_hints(make({"X-RateLimit-Remaining": "5", "Content-Type": "text/plain"}))


#: Reads a plain list of names.
NAMES = FieldAccess(lambda names: names, lambda names: [])


def test_learned_names_are_bounded() -> None:
    names = KnownNames(limit=3)
    assert not names.scan([f"x-header-{i}" for i in range(10)], NAMES)
    assert len(names._no) == 3
    assert not names.scan([f"x-header-{i}" for i in range(10)], NAMES)  # still correct past it
    assert names.scan(["x-header-1", "Retry-After"], NAMES)


@given(named)
def test_every_container_reads_the_same(pairs: list[tuple[str, str]]) -> None:
    """httpx's raw list, requests' store, dicts and pairs all give the same hints."""
    unique = list({n.lower(): (n, v) for n, v in pairs if n.isascii()}.values())
    results = [read_hints(headers, now=NOW) for headers in as_types(unique)]
    assert all(result == results[0] for result in results)


def test_learned_fields_are_bounded_and_exact() -> None:
    names = KnownNames(limit=2)
    assert names.learn(" Retry-After ") == "retry-after"
    assert names.learn(b"DATE") == "date"  # read for context, not a hint
    assert names.learn("Server") is None
    assert names.fields == {" Retry-After ": "retry-after", b"DATE": "date"}  # full: no more
    assert names.learn(("not", "a", "str")) is None  # never stored: not a str or bytes


def test_long_names_are_neither_read_nor_remembered() -> None:
    """A hostile server's huge names cost no memory: only short names are learned."""
    names = KnownNames(limit=10)
    long_name = "x-ratelimit-" + "a" * MAX_NAME
    assert names.learn(long_name) is None
    assert not names.scan([long_name, "b" * 10_000], NAMES)
    assert names.fields == {}
    assert (names._yes, names._no) == (set(), set())


def test_unhashable_names_in_pairs_are_read() -> None:
    pairs = [(["Retry-After"], "5"), ("Retry-After", "7")]
    assert read_hints(pairs, now=NOW).retry_after == 7.0


def test_an_iterator_of_pairs_is_not_consumed_by_the_scan() -> None:
    pairs = iter([("Retry-After", "5")])
    assert has_hints(pairs)
    assert read_hints(pairs, now=NOW).retry_after == 5.0


def test_every_family_prefix_is_scanned_for() -> None:
    """The scan's prefixes cover every header family's (one table each, kept in step)."""
    family = {prefix for _, prefixes in EXTRACTORS for prefix in prefixes}
    assert all(p.startswith(QUOTA_PREFIXES) for p in family)
    assert all(any(f.startswith(q) or q.startswith(f) for f in family) for q in QUOTA_PREFIXES)


# ----------------------------------------------------------- bodies (docs/headers.md R15)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'{"message": "You are being rate limited.", "retry_after": 64.57, "global": false}',
            64.57,
        ),
        ('{"retry_after": 2}', 2.0),
        (
            b'{"error": {"code": 429, "details": [{"@type": "type.googleapis.com/google.rpc.'
            b'ErrorInfo"}, {"@type": "type.googleapis.com/google.rpc.RetryInfo", '
            b'"retryDelay": "27s"}]}}',
            27.0,
        ),
        (
            b'{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", '
            b'"retryDelay": "0.000340s"}]}}',
            0.00034,
        ),
        (b'{"retry_after": -1}', None),
        (b'{"retry_after": true}', None),
        (b'{"retry_after": "5"}', None),
        (b'{"retry_after": 1e400}', None),
        (b'{"retry_after": 99999999999999999999999999999999999999999999}', None),
        (b'{"error": {"details": [{"@type": "x", "retryDelay": "3s"}]}}', None),
        (b'{"error": {"details": "nope"}}', None),
        (
            b'{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", '
            b'"retryDelay": "3 minutes"}]}}',
            None,
        ),
        (b"[1, 2]", None),
        (b"not json", None),
        (b"\xff\xfe", None),
        (b"[" * 100_000, None),
        (b" " * 70_000 + b'{"retry_after": 1}', None),  # past the size limit
    ],
)
def test_read_body_hints(body: bytes | str, expected: float | None) -> None:
    assert read_body_hints(body).retry_after == expected


@given(st.binary(max_size=200) | st.text(max_size=200))
def test_read_body_hints_never_raises(body: bytes | str) -> None:
    found = read_body_hints(body).retry_after
    assert found is None or 0 <= found <= 365 * 86400


@pytest.mark.parametrize(
    ("header", "body", "expected"),
    [
        (None, 6.25, 6.25),  # the body fills in
        (7.0, 6.25, 6.25),  # they agree to a second: the body is the precise one
        (30.0, 6.25, 30.0),  # they disagree: the later
        (3.0, None, 3.0),  # nothing in the body
    ],
)
def test_with_body_hints(header: float | None, body: float | None, expected: float) -> None:
    text = "{}" if body is None else f'{{"retry_after": {body}}}'
    merged = with_body_hints(Hints(retry_after=header, remaining=3.0), text)
    assert merged.retry_after == expected
    assert merged.remaining == 3.0  # the rest of the header hints kept


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {"Content-Type": "application/json", "Content-Length": "80"}, True),
        (
            503,
            {"content-type": "application/problem+json; charset=utf-8", "content-length": "9"},
            True,
        ),
        (200, {"Content-Type": "application/json", "Content-Length": "80"}, False),
        (429, {"Content-Type": "text/html", "Content-Length": "80"}, False),
        (429, {"Content-Type": "application/json"}, False),  # chunked: unknown length
        (429, {"Content-Type": "application/json", "Content-Length": "99999999"}, False),
        (429, {"Content-Type": "application/json", "Content-Length": "-1"}, False),
        (429, {"Content-Type": "application/json", "Content-Length": "1e3"}, False),
    ],
)
def test_wants_body(status: int, headers: dict[str, str], expected: bool) -> None:
    assert wants_body(status, httpx.Headers(headers)) is expected
    assert wants_body(status, requests.structures.CaseInsensitiveDict(headers)) is expected


def test_wants_body_odd_values() -> None:
    assert not wants_body(429, {"content-type": "application/json", "content-length": "٣"})
    assert not wants_body(429, [("content-type", "application/json")])  # no .get: no body


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Server": "nginx", "Content-Type": "application/json"},
        {"Date": "Sun, 06 Nov 1994 08:49:37 GMT", "Age": "5", "Server": "nginx"},
        [("Date", "Sun, 06 Nov 1994 08:49:37 GMT"), ("date", "garbage")],
    ],
)
def test_headers_with_no_hint_field_read_as_no_hints(headers: object) -> None:
    """Only context fields (Date, Age) or none at all: nothing, whichever access reads them."""
    assert read_hints(headers, now=NOW) == Hints()
