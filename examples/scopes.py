"""
Two quotas on one host: a spent search quota holds back searches only, never the core calls.

A stand-in for api.github.com (httpx.MockTransport, no network): ``core`` admits 5,000 an
hour, ``search`` 3 every 0.8 seconds, each named by ``x-ratelimit-resource``.  Run it: the
searches after the third wait for their own reset; the core calls between them go at once.
"""

from __future__ import annotations

import time

import httpx

from smoothclient import Pacer, SmoothTransport

WINDOWS = {"core": (5000, 3600.0), "search": (3, 0.8)}
used = {"core": [time.monotonic(), 0], "search": [time.monotonic(), 0]}


def github(request: httpx.Request) -> httpx.Response:
    resource = "search" if request.url.path.startswith("/search/") else "core"
    limit, window = WINDOWS[resource]
    start, count = used[resource]
    now = time.monotonic()
    if now >= start + window:
        start, count = now, 0
    ok = count < limit
    used[resource] = [start, count + ok]
    headers = {
        "x-ratelimit-limit": str(limit),
        "x-ratelimit-remaining": str(limit - count - ok),
        "x-ratelimit-reset": f"{time.time() + start + window - now:.3f}",
        "x-ratelimit-resource": resource,
    }
    return httpx.Response(200 if ok else 403, headers=headers)


def timed(client: httpx.Client, path: str) -> str:
    start = time.monotonic()
    status = client.get(path).status_code
    return f"{status} after {time.monotonic() - start:3.1f} s"


pacer = Pacer()
transport = SmoothTransport(httpx.MockTransport(github), pacer=pacer)
with httpx.Client(transport=transport, base_url="https://api.github.com") as client:
    for n in range(5):
        search = timed(client, f"/search/issues?q={n}")
        core = timed(client, f"/repos/octo/{n}/issues")
        print(f"search {search}    core {core}")
origin = "https://api.github.com:443"
print({name: (view.remaining, view.limit) for name, view in pacer.scopes(origin).items()})
print(pacer.routes(origin))
