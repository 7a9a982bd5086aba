"""An unexpected error (a bug in superb, not bad input) at the command line: the rows
already recorded stay, stderr gets one line naming the error and one saying where the
full traceback was logged, and the exit code is 3, not a traceback. Ctrl-C in any command
exits 130, and messages print as written, brackets included."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

import superb.sweep
from simpletvm.exit_codes import ExitCode
from superb.cli import main
from superb.results import Experiment
from superb.testing import FakeRunSpec


@pytest.fixture
def fake_runs(monkeypatch):
    """superb run with fake jobs in place of SimpleTVM (a fraction of a second each)."""
    real = superb.sweep.run_sweep

    def run_sweep(plan, **options):
        return real(plan, job_factory=FakeRunSpec, **options)

    monkeypatch.setattr(superb.sweep, "run_sweep", run_sweep)


def test_a_bug_mid_sweep_keeps_the_rows_says_where_the_traceback_is_and_exits_3(
    cli, write_grid, store, tiny_onnx, fake_runs, monkeypatch
):
    grid = write_grid(f"""
        name: buggy
        fixed: {{model: {tiny_onnx}, autotune: false}}
        grid: {{evaluate_repeat: [1, 2, 3]}}
    """)
    real_detail, calls = superb.sweep._detail, []

    def detail(row):  # superb's own code fails as the second run is recorded
        calls.append(row)
        if len(calls) == 2:
            raise RuntimeError("a bug in superb\nsecond line")
        return real_detail(row)

    monkeypatch.setattr(superb.sweep, "_detail", detail)

    result = cli("run", grid, "--store", store, "--no-final-round", "--plain")

    experiment = Experiment(store / "superb" / "buggy")
    assert result.exit_code == ExitCode.UNEXPECTED, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0] == (
        "error: superb stopped on an unexpected error (a bug, not your "
        "input): RuntimeError: a bug in superb"
    )
    log = experiment.dir / "superb-errors.log"
    assert lines[1].startswith(
        f"full traceback in {log}; the 2 runs recorded are in "
        f"{experiment.runs_csv}; repeat the same command"
    )
    assert "Traceback" not in result.output
    logged = log.read_text()
    assert "Traceback (most recent call last)" in logged and "in detail" in logged
    assert "RuntimeError: a bug in superb" in logged
    # both runs that ended before the error are kept, in the log and in runs.csv
    assert len(experiment.state().rows) == 2
    assert list(pd.read_csv(experiment.runs_csv)["status"]) == ["ok", "ok"]

    monkeypatch.setattr(superb.sweep, "_detail", real_detail)
    result = cli("run", grid, "--store", store, "--no-final-round", "--plain")
    assert result.exit_code == 0, result.output
    assert "3 runs: 3 ok, 0 failed; 1 ran now, 2 done before" in result.stdout
    assert len(pd.read_csv(experiment.runs_csv)) == 3


def test_a_bug_in_any_command_is_one_line_and_a_logged_traceback(tmp_path, monkeypatch, capsys):
    def broken(*_args, **_kwargs):
        raise KeyError("column")

    monkeypatch.setattr(Experiment, "find", broken)
    monkeypatch.setenv("SIMPLETVM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "argv", ["superb", "report", str(tmp_path / "anything")])

    with pytest.raises(SystemExit) as stopped:
        main()

    assert stopped.value.code == ExitCode.UNEXPECTED
    captured = capsys.readouterr()
    log = tmp_path / "home" / "superb" / "superb-errors.log"
    assert captured.err.strip().splitlines() == [
        "error: superb stopped on an unexpected error (a bug, not your input): KeyError: 'column'",
        f"full traceback in {log}",
    ]
    assert "Traceback (most recent call last)" in log.read_text()
    assert "superb report" in log.read_text()


def test_ctrl_c_in_a_sweep_exits_130_saying_how_to_resume(
    cli, write_grid, store, tiny_onnx, monkeypatch
):
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(superb.sweep, "run_sweep", interrupted)
    grid = write_grid(f"fixed: {{model: {tiny_onnx}, autotune: false}}\n")
    result = cli("run", grid, "--store", store, "--no-final-round", "--plain")
    assert result.exit_code == ExitCode.INTERRUPTED == 130, result.output
    assert result.stderr.strip() == (
        "interrupted: repeat the same command to resume; runs "
        "in flight continue under their run ids"
    )


def test_ctrl_c_in_any_command_exits_130(cli, tmp_path, monkeypatch):
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Experiment, "find", interrupted)
    result = cli("report", tmp_path / "anything")
    assert result.exit_code == ExitCode.INTERRUPTED, result.output
    assert "Traceback" not in result.output and "Aborted" not in result.output


def test_messages_print_brackets_as_written(cli, write_grid, tiny_onnx):
    grid = write_grid(f"""
        name: sweep[bench]
        fixed: {{model: {tiny_onnx}, autotune: false}}
        grid: {{evaluate_repeat: [1, 2]}}
    """)
    result = cli("plan", grid, "--no-check")
    assert result.exit_code == 0, result.output
    assert "sweep[bench]: 2 runs" in result.stdout  # Rich markup would drop "[bench]"
