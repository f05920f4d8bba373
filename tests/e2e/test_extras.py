"""
A real virtual environment without the extras: every name that needs one says which.

The venv has no pip packages at all; the package is on ``PYTHONPATH``.  A second run adds
requests (and only what requests itself needs), copied from this environment, so httpx and
anyio are missing while requests is there.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PROBE = """
import smoothclient
for name in (
    "SmoothTransport", "AsyncSmoothTransport", "SmoothAdapter", "PrometheusHooks",
    "OpenTelemetryHooks",
):
    try:
        getattr(smoothclient, name)
        print(name, "ok")
    except ImportError as exc:
        print(name, "->", exc)
try:
    smoothclient.Pacer(storage="redis://127.0.0.1:1/0")
except ImportError as exc:
    print("redis ->", exc)
print("pacer", smoothclient.Pacer())
"""


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    where = tmp_path_factory.mktemp("bare-venv")
    venv.create(where, with_pip=False)
    yield where / "bin" / "python"
    shutil.rmtree(where, ignore_errors=True)


def run(python: Path, code: list[str], path: list[Path]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
    return subprocess.run(
        [str(python), *code], capture_output=True, text=True, env=env, timeout=60, cwd=path[0]
    )


def test_no_extras_every_name_says_which_extra(bare: Path) -> None:
    done = run(bare, ["-c", PROBE], [ROOT])
    assert done.returncode == 0, done.stderr
    out = done.stdout
    wanted = "SmoothTransport needs httpx: pip install 'smoothclient[httpx]'"
    assert f"SmoothTransport -> smoothclient.{wanted}" in out
    assert "AsyncSmoothTransport -> " in out
    assert "smoothclient[requests]" in out
    assert "redis -> a Redis storage needs redis-py: pip install 'smoothclient[redis]'" in out
    assert "pacer <Pacer origins=0>" in out
    assert "PrometheusHooks needs prometheus: pip install 'smoothclient[prometheus]'" in out
    assert "OpenTelemetryHooks needs otel: pip install 'smoothclient[otel]'" in out


def test_the_cli_says_which_extra_the_demo_needs(bare: Path) -> None:
    done = run(bare, ["-m", "smoothclient", "demo"], [ROOT])
    assert done.returncode == 2
    assert "pip install 'smoothclient[httpx]'" in done.stdout
    fleet = run(bare, ["-m", "smoothclient", "demo", "--fleet", "2"], [ROOT])
    assert "pip install 'smoothclient[httpx,redis]'" in fleet.stdout
    assert run(bare, ["-m", "smoothclient", "--version"], [ROOT]).returncode == 0


def test_requests_only_httpx_names_still_say_httpx(bare: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    for module in ("requests", "urllib3", "idna", "charset_normalizer", "certifi"):
        spec = importlib.util.find_spec(module)
        assert spec is not None
        assert spec.origin is not None
        shutil.copytree(Path(spec.origin).parent, site / module)
    done = run(bare, ["-c", PROBE], [ROOT, site])
    assert done.returncode == 0, done.stderr
    assert "SmoothAdapter ok" in done.stdout
    assert "SmoothTransport -> smoothclient.SmoothTransport needs httpx" in done.stdout
