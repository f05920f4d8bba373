"""Every example runs in seconds and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"
EXPECTED = {
    "jittered_batch.py": "200 jobs, 200 results",
    "reconciler_sqlite.py": "next tick recovered 20",
    "poisson_business_hours.py": "next event Mon 09:",
    "cache.py": "32 concurrent misses, upstream calls: 1",
    "scopes.py": "search 200 after 0.0 s    core 200 after 0.0 s",
}


def test_every_example_is_listed() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert EXPECTED[name] in done.stdout


def test_the_scopes_example_holds_back_searches_only() -> None:
    """examples/scopes.py: the searches after the third wait for their reset; core never."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "scopes.py")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert [line.split("core ")[1] for line in lines[:5]] == ["200 after 0.0 s"] * 5
    assert float(lines[3].split("after ")[1].split(" s")[0]) >= 0.7
