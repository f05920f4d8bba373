"""The ``smoothclient`` logger stays quiet in applications that configure no logging."""

from __future__ import annotations

import logging
import subprocess
import sys


def test_the_package_logger_has_a_null_handler() -> None:
    """A library adds a NullHandler to its logger: Python's last-resort handler never fires."""
    handlers = logging.getLogger("smoothclient").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_a_warning_prints_nothing_without_logging_configured() -> None:
    """Without the NullHandler, a warning went to stderr through logging.lastResort."""
    code = (
        "import logging, smoothclient\n"
        "logging.getLogger('smoothclient').warning('unconfigured warning')\n"
        "logging.getLogger('smoothclient.hints').warning('unconfigured warning')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr == ""
