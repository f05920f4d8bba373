"""
The OpenAI and Anthropic SDKs, 100 chat calls from 8 threads, against a local fake of their API
that throttles by requests and by tokens (smoothclient.tools.llm_server) and sends their real
rate-limit headers.

Clients:

  smoothclient   the SDK on httpx2.Client(transport=smoothclient.httpx2.SmoothTransport(sdk=True)),
                 max_retries=0 (docs/clients.md)
  SDK alone      the SDK as it comes: its own client and its own retries (max_retries=2, waits
                 Retry-After when sent, else 0.5 s doubling)

Scenarios (a bucket of 20 requests and 2000 tokens a second, both starting full):

  requests  calls of about 100 tokens: the request quota binds (20 calls a second)
  tokens    calls of about 150 tokens: the token quota binds (13.3 calls a second)

"ideal" is the drain time the two buckets allow: max((calls - 20) / 20, (calls x tokens -
2000) / 2000).  "429s/call": the throttles per call; "sent/call": requests per call;
"failed": calls that raised (the SDK's RateLimitError).

Run: python benchmarks/sdks.py [--calls N] [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx2
import openai

from smoothclient.httpx2 import SmoothTransport
from smoothclient.tools.llm_server import LLMServer

REQUESTS, TOKENS, THREADS, ANSWER = 20, 2000, 8, 50
SCENARIOS = {"requests": 200, "tokens": 400}  # the prompt's characters (4 a token)


def _client(vendor: str, url: str, smooth: bool) -> Any:
    kw: dict[str, Any] = {"api_key": "sk-test"}
    if smooth:
        kw |= {"http_client": httpx2.Client(transport=SmoothTransport(sdk=True)), "max_retries": 0}
    if vendor == "openai":
        return openai.OpenAI(base_url=f"{url}/v1", **kw)
    return anthropic.Anthropic(base_url=url, **kw)


def _call(client: Any, chars: int) -> Callable[[int], Any]:
    messages: list[Any] = [{"role": "user", "content": "x" * chars}]
    if isinstance(client, openai.OpenAI):
        return lambda _: client.chat.completions.create(
            model="m", messages=messages, max_tokens=ANSWER
        )
    return lambda _: client.messages.create(model="m", messages=messages, max_tokens=ANSWER)


def run(vendor: str, scenario: str, smooth: bool, calls: int) -> dict[str, float]:
    """One run: its time, ideal time, 429s, requests and failures."""
    chars = SCENARIOS[scenario]
    tokens = chars // 4 + ANSWER
    ideal = max((calls - REQUESTS) / REQUESTS, (calls * tokens - TOKENS) / TOKENS)
    with LLMServer(vendor, requests=REQUESTS, tokens=TOKENS, window=1.0) as fake:
        client = _client(vendor, fake.url, smooth)
        call = _call(client, chars)
        failed = 0
        start = time.monotonic()
        with ThreadPoolExecutor(THREADS) as pool:
            for future in [pool.submit(call, i) for i in range(calls)]:
                try:
                    future.result()
                except (openai.APIError, anthropic.APIError):
                    failed += 1
        took = time.monotonic() - start
        client.close()
        return {
            "time": took,
            "ideal": ideal,
            "throttled": fake.statuses[429] / calls,
            "sent": fake.sent / calls,
            "failed": failed,
        }


def main() -> None:
    """Every vendor, scenario and client; the median of ``--runs``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(
        "| SDK | binds | client | time (s) | ideal (s) | x ideal | 429s/call | sent/call | failed |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for vendor in ("openai", "anthropic"):
        for scenario in SCENARIOS:
            for smooth in (True, False):
                runs = [run(vendor, scenario, smooth, args.calls) for _ in range(args.runs)]
                med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                name = "smoothclient" if smooth else "SDK alone"
                print(
                    f"| {vendor} | {scenario} | {name} | {med['time']:.2f} | {med['ideal']:.2f} "
                    f"| {med['time'] / med['ideal']:.2f} | {med['throttled']:.2f} "
                    f"| {med['sent']:.2f} | {med['failed']:g} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
