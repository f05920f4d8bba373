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


def test_a_binary_another_process_installed_meanwhile_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """
    Two lanes of a benchmark installed haproxy at once: one held apt's lock, and the other's
    install failed and skipped its rows, though the binary was there a moment later.
    """
    import subprocess

    calls: list[list[str]] = []
    there: list[str] = []

    def apt(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if "policy" in argv:
            return subprocess.CompletedProcess(argv, 0, "racing:\n  Candidate: 1.0\n")
        if "install" in argv:
            there.append("/bin/sh")  # the other process's install landed; this one's failed
            return subprocess.CompletedProcess(argv, 100, "E: Could not get lock")
        return subprocess.CompletedProcess(argv, 0, "")

    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(
        "shutil.which", lambda name: "/usr/bin/apt-get" if name == "apt-get" else None
    )
    monkeypatch.setattr(debian, "_which", lambda name: there[0] if there else None)
    monkeypatch.setattr("subprocess.run", apt)
    assert debian.ensure("racing", ("racing",)) == "/bin/sh"
    installs = [argv for argv in calls if "install" in argv]
    assert installs
    assert f"DPkg::Lock::Timeout={debian.LOCK_WAIT}" in installs[0]  # it waits for the lock
