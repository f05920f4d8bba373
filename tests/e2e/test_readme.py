"""Every Python block of the README and of docs/*.md runs, its URLs pointed at a local server."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from smoothclient.tools.server import LimitedServer

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
#: The README first, then every page of docs/, in a stable order.
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), re.S)


#: (page, index on that page, code) for every Python block.
BLOCKS = [
    (_name(page), index, code)
    for page in PAGES
    for index, code in enumerate(_blocks(page, "python"))
]


def test_readme_has_examples() -> None:
    """The front door keeps its examples: the edges, a shared pacer, Redis, the cache."""
    assert len(_blocks(README, "python")) >= 7


def test_docs_have_examples() -> None:
    """The examples moved out of the README still exist in docs/, and so are still run."""
    assert len(BLOCKS) >= 19
    pages = {page for page, _, _ in BLOCKS}
    assert {"docs/pacing.md", "docs/calls.md", "docs/spreading.md", "docs/headers.md"} <= pages
    assert "docs/window-math.md" in pages


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("page", "index", "code"), BLOCKS, ids=[f"{page}-{index}" for page, index, _ in BLOCKS]
)
def test_readme_block_runs(
    page: str, index: int, code: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Python block of the README or of docs/ runs without an error against a local server."""
    with LimitedServer(rate=1000, burst=100) as server:
        code = code.replace("https://api.example.com", server.url)
        code = code.replace('mount("https://"', 'mount("http://"')
        exec(compile(code, f"{page} block {index}", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "Traceback" not in out


COMMANDS = [
    line.split("#", 1)[0].strip()
    for page in PAGES
    for block in _blocks(page, "sh")
    for line in block.splitlines()
    if line.startswith("smoothclient ")
]


def test_shell_commands_are_found() -> None:
    """The smoothclient commands shown (in the README or docs/) are found, so they are run."""
    assert len(COMMANDS) >= 3


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_shell_commands_run(command: str) -> None:
    """The smoothclient commands the docs show exit 0 (make and pip lines are not run here)."""
    args = shlex.split(command)[1:]
    done = subprocess.run(
        [sys.executable, "-m", "smoothclient", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
