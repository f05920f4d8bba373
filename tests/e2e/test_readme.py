"""Every Python block of the README runs, with its URLs pointed at a local server."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from smoothclient.tools.server import LimitedServer

README = Path(__file__).parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 7


@pytest.mark.e2e
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    with LimitedServer(rate=1000, burst=100) as server:
        code = BLOCKS[index].replace("https://api.example.com", server.url)
        code = code.replace('mount("https://"', 'mount("http://"')
        exec(compile(code, f"README block {index}", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "Traceback" not in out


COMMANDS = [
    line.split("#", 1)[0].strip()
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    for line in block.splitlines()
    if line.startswith("smoothclient ")
]


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_shell_commands_run(command: str) -> None:
    """The smoothclient commands the README shows exit 0 (make and pip lines are not run here)."""
    args = shlex.split(command)[1:]
    done = subprocess.run(
        [sys.executable, "-m", "smoothclient", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
