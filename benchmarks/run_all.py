"""Run every benchmark and write benchmarks/RESULTS.md (date, Python, machine, tables)."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
BENCHMARKS = [
    ("Herd and batch against a local rate-limited server", "herd.py"),
    ("Real limiters: nginx limit_req, limit_conn, slowapi windows, Retry-After", "limiters.py"),
    ("Per-request overhead on a healthy origin", "overhead.py"),
    ("Per-request overhead in instructions", "instructions.py"),
    ("A fleet's shared Redis store: what a request costs", "redis_store.py"),
    ("Cache expiry, stampedes and hot keys", "cache_expiry.py"),
    ("HTTP response caches: a hit, and a fleet's revalidations", "http_cache.py"),
    (
        "The HTTP cache against a public suite of cache tests, beside browsers",
        "http_cache_conformance.py",
    ),
    ("Outages without retry storms: a fleet of 4 against a server that goes down", "outage.py"),
    ("Random throttles: 30% of requests 429 whatever the rate", "noisy.py"),
    ("Spent quotas: no request into a quota stated spent, refusals at once", "spent_quota.py"),
    ("The OpenAI and Anthropic SDKs against a fake throttling by requests and tokens", "sdks.py"),
]


def table_of(output: str) -> str:
    """The tables of a benchmark's output (blank lines between them kept)."""
    lines = [line for line in output.splitlines() if line.startswith("|") or not line.strip()]
    return "\n".join(lines).strip()


def main() -> None:
    parts = [
        "# Benchmark results",
        "",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- Python: {platform.python_version()} ({platform.python_implementation()})",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "- regenerate with `make bench`",
        "",
    ]
    for title, script in BENCHMARKS:
        print(f"running {script} ...", flush=True)
        done = subprocess.run(
            [sys.executable, str(HERE / script)], stdout=subprocess.PIPE, text=True, check=True
        )
        doc = (HERE / script).read_text().split('"""')[1].strip()
        parts += [f"## {title} (`benchmarks/{script}`)", "", doc, "", table_of(done.stdout), ""]
    (HERE / "RESULTS.md").write_text("\n".join(parts))
    print((HERE / "RESULTS.md").read_text())


if __name__ == "__main__":
    main()
