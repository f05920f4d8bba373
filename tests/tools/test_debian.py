"""The server binaries the tests and benchmarks need: found, or installed, or said why not."""

from __future__ import annotations

import os

import pytest

from smoothclient.tools import debian


def test_a_binary_on_the_path_is_used_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_apt(*args: object, **kwargs: object) -> None:
        raise AssertionError("apt-get run for a binary that is installed")

    monkeypatch.setattr("subprocess.run", no_apt)
    found = debian.ensure("sh", ("dash",))
    assert os.access(found, os.X_OK)
    assert debian.ensure("sh", ("dash",)) == found  # remembered


def test_no_binary_and_no_way_to_install_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # not root: apt-get cannot run
    with pytest.raises(debian.Unavailable, match="apt-get install no-such-package"):
        debian.ensure("no-such-binary-here", ("no-such-package",))
