from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import smoothclient
from smoothclient import testing
from smoothclient.testing import FakeClock


def test_import_does_not_pull_http_clients() -> None:
    """import smoothclient imports neither httpx nor requests (nor cachetools, wrapt)."""
    code = (
        "import sys, smoothclient; "
        "smoothclient.RetryPolicy; smoothclient.read_hints; smoothclient.window; "
        "print(sorted(m for m in ('httpx', 'requests', 'urllib3', 'wrapt', 'cachetools') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_all_is_the_public_table_sorted() -> None:
    """__all__ lists exactly the names of the one public table (ruff keeps it sorted)."""
    expected = {*smoothclient.PUBLIC, *smoothclient.SUBMODULES, "__version__"}
    assert expected == set(smoothclient.__all__)
    assert len(expected) == len(smoothclient.__all__)


@pytest.mark.parametrize("name", sorted(smoothclient.PUBLIC))
def test_every_public_name_resolves_where_the_table_says(name: str) -> None:
    """Each name loads from the module its row names (the extras are installed here)."""
    module, _extra = smoothclient.PUBLIC[name]
    value = getattr(smoothclient, name)
    assert value is getattr(importlib.import_module(f"smoothclient.{module}"), name)
    assert name in dir(smoothclient)


def test_the_front_holds_at_most_25_names() -> None:
    """The front door stays small: the toolbox lives in the namespaces of its parts."""
    assert len(smoothclient.PUBLIC) <= 25
    assert not set(smoothclient.PUBLIC) & set(smoothclient.MOVED)


@pytest.mark.parametrize("name", sorted(smoothclient.MOVED))
def test_a_name_that_moved_resolves_from_its_namespace_and_the_front(name: str) -> None:
    """``from smoothclient import PrometheusHooks`` still works; it is the namespace's name."""
    namespace = importlib.import_module(f"smoothclient.{smoothclient.MOVED[name]}")
    assert name in namespace.__all__
    assert getattr(smoothclient, name) is getattr(namespace, name)
    assert name not in smoothclient.__all__


@pytest.mark.parametrize("package", ["spreading", "pacing", "telemetry"])
def test_a_namespace_says_what_it_lacks(package: str) -> None:
    namespace = importlib.import_module(f"smoothclient.{package}")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        namespace.nope  # noqa: B018


def test_layers_import_nothing_above_them() -> None:
    """The engine imports neither pacing nor edges; pacing imports no edge; no module the tools."""
    code = (
        "import sys, smoothclient.engine.decide, smoothclient.engine.backoff\n"
        "engine = sorted(m for m in sys.modules if m.startswith(('smoothclient.pacing', "
        "'smoothclient.edges', 'smoothclient.spreading', 'smoothclient.tools')))\n"
        "import smoothclient.pacing.pacer\n"
        "pacing = sorted(m for m in sys.modules if m.startswith(('smoothclient.edges', "
        "'smoothclient.spreading', 'smoothclient.tools')))\n"
        "print(engine, pacing)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []"


def test_no_module_over_600_lines() -> None:
    """A module that outgrows 600 lines is split along a seam (CONTRIBUTING.md's map)."""
    root = Path(smoothclient.__file__).parent
    sizes = {
        p.relative_to(root).as_posix(): len(p.read_text().splitlines()) for p in root.rglob("*.py")
    }
    assert len(sizes) > 30  # the walk found the package
    assert {name: n for name, n in sizes.items() if n > 600} == {}


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        smoothclient.nope  # noqa: B018


def test_version() -> None:
    assert smoothclient.__version__ == "0.1.0"


def test_fake_clock() -> None:
    clock = FakeClock(5.0)
    clock.sleep(2.0)
    clock.advance(1.0)
    assert clock() == clock.time() == 8.0
    assert clock.sleeps == [2.0]
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)


def test_testing_mode_restores_previous_state() -> None:
    assert testing.current() is None
    with testing.testing_mode(attempts=2) as mode:
        assert mode.attempts == 2
        with testing.testing_mode(attempts=1):
            assert testing.current() == testing.TestingMode(1)
        assert testing.current() == mode
    assert testing.current() is None
    with pytest.raises(ValueError, match="attempts"):
        testing.set_testing(True, attempts=0)


def test_seeded() -> None:
    assert testing.seeded(3).random() == testing.seeded(3).random()


@pytest.mark.parametrize(
    ("blocked", "name"),
    [
        ("httpx", "SmoothTransport"),
        ("httpx", "AsyncSmoothTransport"),
        ("requests", "SmoothAdapter"),
    ],
)
def test_missing_extra_names_it(blocked: str, name: str) -> None:
    """Without the extra, the lazy name raises an ImportError that says what to install."""
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "import smoothclient\n"
        "try:\n"
        f"    smoothclient.{name}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"pip install 'smoothclient[{blocked}]'" in out.stdout
