"""superb as a real process: SIGKILLed mid-sweep, then started again with the same
command, it skips finished runs, reruns the unfinished one, and ends with exactly one
row per run. And Ctrl-C stops it cleanly with exit code 130, even when superb was started
with SIGINT ignored, and the same command then resumes."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time

import pandas as pd
import psutil
import pytest
from superb_helpers import REPO, alive, run_superb, superb_command, superb_env

from simpletvm.store import read_json_lines


def events(log, kind):
    return [e for e in read_json_lines(log) if e.get("event") == kind]


def wait_for(condition, process, timeout=90.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, (process.communicate()[1] or "superb exited")[-2000:]
        assert time.monotonic() < deadline, "superb did not get there in time"
        time.sleep(0.05)


def test_resume_after_sigkill_loses_and_duplicates_nothing(write_grid, store, tiny_onnx):
    grid = write_grid(f"""
        name: killed
        fixed: {{model: {tiny_onnx}, autotune: false, evaluate_warmup: 1}}
        grid:
          evaluate_repeat: [200, 201, 202, 203]
    """)  # each run measures about a second
    log = store / "superb" / "killed" / "log.jsonl"
    process = subprocess.Popen(
        superb_command("run", grid, "--store", store, "--no-final-round"),
        cwd=REPO,
        env=superb_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # kill it while the second run is in progress
        wait_for(
            lambda: len(events(log, "running")) >= 2 and len(events(log, "finished")) == 1, process
        )
        process.kill()
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
    assert len(events(log, "finished")) == 1
    orphan = events(log, "running")[-1]["pid"]
    deadline = time.monotonic() + 10
    while alive(orphan) and time.monotonic() < deadline:  # the run dies with superb
        time.sleep(0.1)
    assert not alive(orphan), "the killed sweep left its run's process behind"

    result = run_superb("run", grid, "--store", store, "--no-final-round")
    assert result.returncode == 0, result.stderr
    assert "3 ran now, 1 done before" in result.stdout
    runs = pd.read_csv(store / "superb" / "killed" / "runs.csv")
    assert list(runs["param:evaluate_repeat"]) == [200, 201, 202, 203]
    assert runs["run"].is_unique and set(runs["status"]) == {"ok"}
    assert list(runs["attempt"]) == [1, 2, 1, 1]  # the killed run ran again ...
    assert runs["run_id"][1] == events(log, "started")[1]["run_id"]  # ... under its run id
    assert len(events(log, "finished")) == 4


# an evaluate_repeat that times the tiny model for seconds: long enough for a signal to
# land while it runs, short enough to run it again on resume
LONG_REPEAT = 2000


def test_ctrl_c_stops_the_sweep_and_the_same_command_resumes(
    write_grid, store, tiny_onnx, tmp_path
):
    grid = write_grid(f"""
        name: interrupted
        fixed: {{model: {tiny_onnx}, autotune: false}}
        grid: {{evaluate_repeat: [{LONG_REPEAT}, 2]}}
    """)
    log = store / "superb" / "interrupted" / "log.jsonl"
    _interrupt_while_evaluating(grid, store, log, tmp_path, signal.SIG_DFL)  # as a terminal

    result = run_superb("run", grid, "--store", store, "--no-final-round")
    assert result.returncode == 0, result.stderr
    assert "2 runs: 2 ok, 0 failed; 2 ran now, 0 done before" in result.stdout
    runs = pd.read_csv(store / "superb" / "interrupted" / "runs.csv")
    assert list(runs["param:evaluate_repeat"]) == [LONG_REPEAT, 2]
    assert runs["run"].is_unique and set(runs["status"]) == {"ok"}
    assert list(runs["attempt"]) == [2, 1]  # the interrupted run ran again ...
    assert runs["run_id"][0] == events(log, "started")[0]["run_id"]  # ... under its run id
    assert len(events(log, "finished")) == 2


def test_ctrl_c_stops_a_sweep_started_with_sigint_ignored(write_grid, store, tiny_onnx, tmp_path):
    """Background shells and test runners (a pytest-xdist worker started from one) start
    programs with SIGINT ignored, which survives fork and exec; superb still stops on one
    SIGINT, as `kill -INT` from a script expects."""
    grid = write_grid(f"""
        name: ignored
        fixed: {{model: {tiny_onnx}, autotune: false}}
        grid: {{evaluate_repeat: [{LONG_REPEAT}]}}
    """)
    _interrupt_while_evaluating(
        grid, store, store / "superb" / "ignored" / "log.jsonl", tmp_path, signal.SIG_IGN
    )


def _interrupt_while_evaluating(grid, store, log, tmp_path, sigint) -> None:
    """Start ``superb run GRID`` with SIGINT's disposition ``sigint`` inherited, send it one
    SIGINT while its first run evaluates, and check that it stopped as Ctrl-C promises:
    exit code 130, how to resume on stderr, the run's process gone, no run finished (its
    experiment's ``log``)."""
    stderr_file = tmp_path / "superb.stderr"  # a file: a pipe's end waits for every child
    previous = signal.signal(signal.SIGINT, sigint)  # inherited through fork and exec
    try:
        with open(stderr_file, "w") as stderr_sink:
            process = subprocess.Popen(
                superb_command("run", grid, "--store", store, "--no-final-round"),
                cwd=REPO,
                env={**superb_env(), "PYTHONFAULTHANDLER": "1"},
                stdout=subprocess.DEVNULL,
                stderr=stderr_sink,
            )
    finally:
        signal.signal(signal.SIGINT, previous)
    wait_for(lambda: len(events(log, "running")) == 1, process)
    run_pid, run_id = events(log, "running")[0]["pid"], events(log, "running")[0]["run_id"]
    run_log = store / "runs" / run_id / "run.log"
    wait_for(
        lambda: run_log.exists() and "step evaluate started" in run_log.read_text(), process
    )  # superb waits on the run's worker now
    process.send_signal(signal.SIGINT)
    _wait_or_fail_with_threads(process, stderr_file, timeout=30)
    stderr = stderr_file.read_text()
    assert process.returncode == 130, stderr
    assert "interrupted: repeat the same command to resume" in stderr
    assert not alive(run_pid)
    assert events(log, "finished") == []


def _wait_or_fail_with_threads(process, stderr_file, timeout: float) -> None:
    """Wait for superb to exit; when it does not within ``timeout``, fail with where each
    of its threads was (faulthandler writes them to its stderr on SIGABRT), its child
    processes killed."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        left = psutil.Process(process.pid).children(recursive=True)  # its runs, fork server
        process.send_signal(signal.SIGABRT)
        process.wait(timeout=30)
        for child in left:  # not left burning a core under the rest of the suite
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        pytest.fail(
            f"superb still ran {timeout:.0f} s after the signal; its threads "
            f"then:\n{stderr_file.read_text()[-12000:]}"
        )


def _run_records(store, run_id: str) -> list[tuple[int, str, str]]:
    """(workload, trace, run_secs) of every record the run committed to the store."""
    import json
    import sqlite3

    with sqlite3.connect(f"file:{store / 'records.sqlite'}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT workload_id, json FROM records WHERE run_id = ?", (run_id,)
        ).fetchall()
    return [
        (workload, json.dumps(json.loads(text)[0]), json.dumps(json.loads(text)[1]))
        for workload, text in rows
    ]


@pytest.mark.slow
def test_a_sweep_killed_mid_tuning_resumes_the_tuning(write_grid, store, tiny_onnx):
    """SIGKILL superb while a tuned run is tuning; the same command continues that run
    under its run id from the records it measured: none measured twice, the trial budget
    kept, one row, exit code 0."""
    grid = write_grid(f"""
        name: tuning-killed
        fixed: {{model: {tiny_onnx}, total_trials: 24, candidates_per_iteration: 4,
                 population: 32, genetic_iterations: 1, transfer_learning: false, seed: 3,
                 remeasure: 2, evaluate_repeat: 5}}
        grid: {{trials: [12]}}
    """)
    log = store / "superb" / "tuning-killed" / "log.jsonl"
    process = subprocess.Popen(
        superb_command("run", grid, "--store", store, "--no-final-round"),
        cwd=REPO,
        env=superb_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: (
                events(log, "running")
                and (store / "records.sqlite").exists()
                and len(_run_records(store, events(log, "started")[0]["run_id"])) >= 8
            ),
            process,
            timeout=300,
        )
        process.kill()
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
    run_id = events(log, "started")[0]["run_id"]
    before = _run_records(store, run_id)
    assert 8 <= len(before) < 24 and events(log, "finished") == []

    result = run_superb("run", grid, "--store", store, "--no-final-round", timeout=600)
    assert result.returncode == 0, result.stderr
    runs = pd.read_csv(store / "superb" / "tuning-killed" / "runs.csv")
    assert len(runs) == 1 and runs["status"][0] == "ok" and runs["run_id"][0] == run_id
    assert runs["attempt"][0] == 2
    after = _run_records(store, run_id)
    measured = [(workload, trace) for workload, trace, _ in after]
    # what the killed attempt measured is kept (the closing round re-timed the best) ...
    assert {(workload, trace) for workload, trace, _ in before} <= set(measured)
    assert len(measured) == len(set(measured))  # ... and nothing was measured again
    assert len(after) <= 24 and runs["trials"][0] <= 24  # one budget for both attempts
    assert runs["trials"][0] >= len(after)
