from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smoothclient.engine.backoff import backoff_ceiling, backoff_window, sample_backoff, uniform
from smoothclient.spreading import offset_for
from smoothclient.spreading.offsets import even_offsets
from smoothclient.spreading.poisson import poisson_gap


def test_backoff_ceiling_grows_then_caps() -> None:
    """0.1, 0.2, 0.4 ... then the cap; a huge attempt number does not overflow."""
    got = [backoff_ceiling(n, initial=0.1, maximum=30) for n in range(1, 6)]
    assert got == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6])
    assert backoff_ceiling(10_000, initial=0.1, maximum=30) == 30


@pytest.mark.parametrize(
    ("kind", "window"),
    [
        ("full", (0.0, 0.8)),
        ("equal", (0.4, 0.8)),
        ("none", (0.8, 0.8)),
        ("decorrelated", (0.1, 1.5)),
    ],
)
def test_windows(kind: str, window: tuple[float, float]) -> None:
    got = backoff_window(kind, 4, initial=0.1, maximum=30, previous=0.5)  # type: ignore[arg-type]
    assert got == pytest.approx(window)


def test_unknown_kind() -> None:
    with pytest.raises(ValueError, match="jitter must be one of"):
        backoff_window("gaussian", 1, initial=0.1, maximum=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["full", "equal", "decorrelated"])
def test_saturated_clients_do_not_pile_on_the_cap(kind: str) -> None:
    """At attempt 30, fewer than 1% of 10,000 draws equal the cap: the cap bounds the window."""
    rng = random.Random(7)
    draws = [
        sample_backoff(kind, 30, initial=0.1, maximum=30, rng=rng, previous=30)  # type: ignore[arg-type]
        for _ in range(10_000)
    ]
    assert sum(d == 30 for d in draws) < 100
    assert max(Counter(round(d, 3) for d in draws).values()) < 100
    assert all(0 <= d <= 30 for d in draws)


def test_seeded_rng_gives_exact_delays() -> None:
    """An injected RNG makes delays exact and reproducible."""
    a = [sample_backoff("full", 3, initial=1, maximum=10, rng=random.Random(3)) for _ in range(2)]
    assert a[0] == a[1] == pytest.approx(random.Random(3).random() * 4)


@given(
    attempt=st.integers(1, 10_000),
    initial=st.floats(0.001, 10),
    maximum=st.floats(10, 1000),
    seed=st.integers(0, 2**32),
)
def test_backoff_within_bounds(attempt: int, initial: float, maximum: float, seed: int) -> None:
    """0 <= delay <= wait_max for every attempt; ceilings are monotone."""
    d = sample_backoff("full", attempt, initial=initial, maximum=maximum, rng=random.Random(seed))
    assert 0 <= d <= maximum
    assert backoff_ceiling(attempt, initial=initial, maximum=maximum) <= backoff_ceiling(
        attempt + 1, initial=initial, maximum=maximum
    )


def test_uniform_empty_window() -> None:
    assert uniform(3, 3, random.Random(0)) == 3
    assert 2 <= uniform(2, 3, random.Random(0)) <= 3


def test_offset_is_stable_and_in_range() -> None:
    assert offset_for("job-42", 900) == offset_for("job-42", timedelta(minutes=15))
    assert 0 <= offset_for("job-42", 900) < 900
    assert offset_for(b"job-42", 900) == offset_for("job-42", 900)
    assert offset_for(42, 60) == offset_for("42", 60)
    assert offset_for("job-42", 900, salt="a") != offset_for("job-42", 900, salt="b")


def test_offset_rejects_bad_keys_and_windows() -> None:
    with pytest.raises(TypeError):
        offset_for(4.2, 60)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        offset_for("k", 0)


def test_offset_is_stable_across_processes() -> None:
    """Another process with another PYTHONHASHSEED computes the same offsets."""
    code = "from smoothclient import offset_for; print(repr(offset_for('tenant-7', 3600)))"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert outs == {repr(offset_for("tenant-7", 3600))}


def test_offsets_are_uniform() -> None:
    """Chi-square over 100 bins for 10,000 keys stays below the 99.9% critical value."""
    bins = Counter(int(offset_for(f"key-{i}", 100.0)) for i in range(10_000))
    expected = 100.0
    chi2 = sum((bins.get(b, 0) - expected) ** 2 / expected for b in range(100))
    assert chi2 < 148.2  # chi-square, 99 dof, p = 0.001


def test_even_offsets() -> None:
    assert even_offsets(4, 2.0) == [0.0, 0.5, 1.0, 1.5]
    assert even_offsets(0, 2.0) == []


def test_poisson_gaps_have_the_right_mean() -> None:
    rng = random.Random(5)
    gaps = [poisson_gap(2.0, rng) for _ in range(20_000)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.5, rel=0.03)
    with pytest.raises(ValueError, match="rate"):
        poisson_gap(0, rng)
