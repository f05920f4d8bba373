"""Hostile command-line arguments: each is a usage error (exit code 2, a message), no traceback."""

from __future__ import annotations

import pytest

from smoothclient.tools.cli import main

HUGE = "9" * 400  # a duration of infinite seconds, an integer no float holds


@pytest.mark.parametrize(
    "argv",
    [
        ["offset", "k", "--window", "0"],
        ["offset", "k", "--window", "0.0"],
        ["offset", "k", "--window", HUGE],
        ["offset", "k", "--window", "10", "--salt", "\udcfe"],
        ["simulate", "--clients", "0"],
        ["simulate", "--clients", "-1"],
        ["simulate", "--clients", HUGE],
        ["demo", "--clients", "0"],
        ["demo", "--clients", "-1"],
        ["demo", "--clients", "99999999999999999999"],
        ["demo", "--fleet", "-1"],
        ["demo", "--fleet", "99999999999999999999"],
        ["demo", "--rate", "1e-320"],
        ["demo", "--rate", "nan"],
        ["demo", "--burst", "1e-320"],
        ["demo", "--burst", "inf"],
    ],
)
def test_a_hostile_argument_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """
    Each was a traceback (ValueError, OverflowError, ZeroDivisionError) or a run never ending.

    ``offset --window 0`` and a window of 400 digits (infinite) raised ValueError from
    ``offset_for``; ``simulate --clients 0``/``-1`` ValueError, 400 digits OverflowError;
    ``demo --clients 0`` ZeroDivisionError; ``demo --fleet -1``, a rate or burst of 1e-320
    and a herd of 10**20 clients never ended.
    """
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err
    assert "must be" in err


def test_an_offset_of_any_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    """A key of bytes not UTF-8 (a surrogate in argv) has its offset: it raised on printing."""
    assert main(["offset", "\udcff", "--window", "10"]) == 0
    assert capsys.readouterr().out.startswith("\\xff: offset ")


def test_an_offset_of_a_plain_key_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    """Keys are hashed as their UTF-8 bytes, as before."""
    from smoothclient.spreading.offsets import offset_for

    assert main(["offset", "job-7", "--window", "15m"]) == 0
    expected = offset_for("job-7", 900.0)
    assert f"{expected:,.1f} s" in capsys.readouterr().out
