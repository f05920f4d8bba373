from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from smoothclient.tools import cli
from smoothclient.tools.demo import CAREFUL, DemoRun, chart, retry_after_seconds, run_demo, table
from smoothclient.tools.simulate import simulate


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("1.5s", 1.5), ("250ms", 0.25), ("15m", 900), ("2h", 7200), ("1d", 86400)],
)
def test_durations(text: str, seconds: float) -> None:
    assert cli.parse_duration(text) == seconds


def test_bad_duration() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        cli.parse_duration("soon")


def test_window_prints_every_bound(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "window",
            "--cohort",
            "50000",
            "--headroom",
            "2000",
            "--service-time",
            "0.2s",
            "--connections",
            "400",
            "--overflow",
            "0.01",
            "--deadline",
            "2m",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    for needle in ("rate", "concurrency", "overflow", "<- binding", "deadline", "26.328 s"):
        assert needle in out


def test_window_infeasible_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["window", "--cohort", "50000", "--headroom", "2000", "--p95", "10"])
    err = capsys.readouterr().err
    assert code == 1
    assert "rate" in err
    assert "p95" in err


def test_bad_arguments_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["window", "--cohort", "-5", "--headroom", "2000"])
    assert info.value.code == 2
    assert cli.main(["window", "--cohort", "5", "--headroom", "1", "--service-time", "0.2"]) == 2


def test_offset(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["offset", "tenant-7", "--window", "15m"]) == 0
    assert "tenant-7: offset 79.536 s" in capsys.readouterr().out


def test_module_entry_point_and_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "smoothclient", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ("window", "offset", "demo", "simulate"):
        assert command in out


def test_simulate_ranks_strategies(capsys: pytest.CaptureFixture[str]) -> None:
    """Shift-and-widen drains near M/H with no retry peak; fixed re-synchronises the herd."""
    smooth = simulate(10_000, 500, "shift-widen")
    fixed = simulate(10_000, 500, "fixed")
    full = simulate(10_000, 500, "full")
    assert smooth.drain_ratio < 1.1
    assert smooth.peak_to_average < 1.3
    assert fixed.drain_ratio > 5
    assert smooth.attempts < full.attempts < fixed.attempts
    assert cli.main(["simulate", "--clients", "2000", "--headroom", "100"]) == 0
    assert "shift-widen" in capsys.readouterr().out
    with pytest.raises(ValueError, match="strategy"):
        simulate(10, 1, "magic")


@pytest.mark.e2e
def test_demo_sets_smoothclient_beside_a_careful_loop() -> None:
    """A small herd: the careful jittered loop and smoothclient both finish; the table says how."""
    careful, smooth = run_demo(clients=20, rate=40, burst=5)
    assert (careful.name, smooth.name) == (CAREFUL, "smoothclient")
    assert careful.failures == smooth.failures == 0
    assert careful.sent - careful.throttled == smooth.sent - smooth.throttled == 20
    assert smooth.throttled < careful.throttled  # paced at the advertised rate: hardly a 429
    text = table([careful, smooth], clients=20, rate=40, burst=5)
    assert "429 responses" in text
    assert "full-jitter backoff" in text
    assert "at least Retry-After" in text
    assert f"({smooth.throttled} vs {careful.throttled} 429s)" in text
    drawn = chart([careful, smooth])
    assert "█" in drawn
    assert max(len(line) for line in drawn.splitlines()) <= 100


def _table(*runs: DemoRun) -> str:
    return table(runs, clients=10, rate=10, burst=5)


def test_the_verdict_reads_the_numbers_either_way() -> None:
    """The table's last line is measured: a smoothclient run that lost would say so."""
    careful = DemoRun(CAREFUL, [(0.0, 200)] * 10, 1.0, 0)
    slower = DemoRun("smoothclient", [(0.0, 200)] * 20, 1.5, 0)
    assert "2.0x more requests than careful retries" in _table(careful, slower)
    assert "0.50 s later" in _table(careful, slower)
    faster = DemoRun("smoothclient", [(0.0, 200)] * 5, 0.25, 0)
    assert "2.0x fewer requests" in _table(careful, faster)
    assert "0.75 s sooner" in _table(careful, faster)
    fleet = [DemoRun("each alone", [], 1.0, 0), DemoRun("sharing Redis", [], 1.0, 0)]
    assert "jitter" not in table(fleet, clients=10, rate=10, burst=5)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3", 3.0),
        (" 1.5 ", 1.5),
        ("-4", 0.0),
        ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # in the past: at once
        ("soon", None),
        ("", None),
        (None, None),
        ("nan", None),
    ],
)
def test_the_careful_loop_reads_retry_after(value: str | None, seconds: float | None) -> None:
    """Delay-seconds or an HTTP-date (RFC 9110), against a fixed clock."""
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after_seconds(value, now=now) == seconds


@pytest.mark.e2e
def test_demo_plot_writes_a_png(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    target = Path(str(tmp_path)) / "herd.png"
    code = cli.main(
        ["demo", "--clients", "12", "--rate", "40", "--burst", "4", "--plot", str(target)]
    )
    assert code == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "chart written to" in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`smoothclient --version` prints the installed version and exits 0."""
    import smoothclient

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"smoothclient {smoothclient.__version__}"


def test_a_long_run_charts_in_at_most_thirty_rows() -> None:
    """11.5 s of arrivals: rows widen (here to 0.5 s) so the chart fits a screen."""
    arrivals = [(i * 0.05, 429 if i % 3 else 200) for i in range(230)]
    long = DemoRun(CAREFUL, arrivals, 11.5, 0)
    short = DemoRun("smoothclient", arrivals[:100], 5.0, 0)
    lines = chart([long, short]).splitlines()
    assert len(lines) <= 30
    assert "one row = 500 ms" in lines[-1]
    assert sum(line.count("█") + line.count("░") for line in lines) > 0
