"""superb run on real SimpleTVM runs of a tiny model: rows, resume, failures, timeouts.

All untuned (about half a second a run) but one, which tunes through superb's own
local tracker and servers.
"""

from __future__ import annotations

import json
import multiprocessing.util
import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import psutil
import pytest
from superb_helpers import alive

from simpletvm.store import read_json_lines
from superb.results import LEAD_COLUMNS, RESULT_COLUMNS, Experiment


@pytest.fixture(scope="module")
def bad_onnx(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad") / "broken.onnx"
    path.write_bytes(b"this is not an onnx model")
    return path


def finished(experiment: Experiment) -> list[dict]:
    return [e for e in read_json_lines(experiment.log_path) if e.get("event") == "finished"]


def test_sweep_writes_a_row_per_run_and_skips_them_next_time(cli, write_grid, store, tiny_onnx):
    grid = write_grid(f"""
        name: rows
        fixed: {{model: {tiny_onnx}, autotune: false, evaluate_warmup: 1}}
        grid:
          evaluate_repeat: [3, 4]
          evaluate_number: [1, 2]
    """)
    result = cli("run", grid, "--store", store, "--no-final-round")
    assert result.exit_code == 0, result.output
    assert "4 runs: 4 ok, 0 failed; 4 ran now, 0 done before" in result.stdout
    assert "[1/4]   compile" in result.stdout and "[4/4] ok in" in result.stdout  # plain lines
    experiment = Experiment(store / "superb" / "rows")
    runs = pd.read_csv(experiment.runs_csv)
    params = [
        "param:evaluate_repeat",
        "param:evaluate_number",
        "param:model",
        "param:autotune",
        "param:evaluate_warmup",
    ]
    assert list(runs.columns) == LEAD_COLUMNS + params + RESULT_COLUMNS
    assert list(runs["index"]) == [1, 2, 3, 4] and set(runs["status"]) == {"ok"}
    assert list(runs["param:evaluate_repeat"]) == [3, 3, 4, 4]
    assert list(runs["eval_count"]) == [3, 3, 4, 4]
    assert runs["run_id"].str.len().eq(32).all() and runs["run"].is_unique
    assert (runs["eval_median_ms"] > 0).all() and runs["tuning_s"].isna().all()
    assert runs["max_rel_error"].between(0, 1e-5).all()  # the builds against ONNX Runtime
    assert (runs["tuned"] == False).all()  # noqa: E712 - pandas
    assert runs["target"].str.startswith("llvm -mcpu=").all()
    assert (runs["overhead_s"] < 1.0).all()
    for path in runs["context"]:  # per-run contexts stay in the run store
        assert json.loads(open(path).read())["evaluation"]["count"] in (3, 4)
    aggregate = pd.read_csv(experiment.aggregate_csv)
    assert len(aggregate) == 4 and list(aggregate["runs"]) == [1, 1, 1, 1]

    planned = json.loads(cli("plan", grid, "--store", store, "--json").stdout)
    assert [run["done"] for run in planned["runs"]] == [True] * 4
    again = cli("run", grid, "--store", store, "--no-final-round")
    assert again.exit_code == 0
    assert "0 ran now, 4 done before" in again.stdout
    assert len(finished(experiment)) == 4

    more = cli("run", grid, "--store", store, "--no-final-round", "-p", "evaluate_number=1,2,3")
    assert more.exit_code == 0 and "2 ran now, 4 done before" in more.stdout
    assert len(pd.read_csv(experiment.runs_csv)) == 6


def test_a_grid_with_the_old_name_of_candidates_per_iteration_runs(
    cli, write_grid, store, tiny_onnx
):
    """``batch_size``, the model's batch, once named the candidates per iteration: such a
    grid runs, with a warning naming the new name, and records the new one."""
    grid = write_grid(f"""
        name: old-name
        fixed: {{model: {tiny_onnx}, autotune: false, batch_size: 4, evaluate_repeat: 2}}
    """)
    with pytest.warns(
        FutureWarning, match="'batch_size' is the old name .*'candidates_per_iteration'"
    ):
        result = cli("run", grid, "--store", store, "--no-final-round")
    assert result.exit_code == 0, result.output
    runs = pd.read_csv(store / "superb" / "old-name" / "runs.csv")
    assert list(runs["status"]) == ["ok"] and list(runs["param:candidates_per_iteration"]) == [4]


@pytest.fixture
def private_tmp(monkeypatch):
    """A temporary directory of this test's own, for superb and its worker processes
    (this process's multiprocessing keeps the one it chose for its sockets, for good)."""
    multiprocessing.util.get_temp_dir()
    scratch = Path(tempfile.mkdtemp(prefix="superb-tmp-"))
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    yield scratch
    shutil.rmtree(scratch, ignore_errors=True)


def test_a_sweep_leaves_no_temporary_files_behind(cli, write_grid, store, tiny_onnx, private_tmp):
    """Each run's worker process exports its build to a temporary directory; the worker
    leaves through os._exit (or is killed when slow to leave), which deletes nothing on
    its own: the backend closes the run first."""
    grid = write_grid(f"""
        name: clean
        fixed: {{model: {tiny_onnx}, autotune: false, evaluate_repeat: 2}}
        grid: {{evaluate_number: [1, 2]}}
    """)
    result = cli("run", grid, "--store", store, "--no-final-round")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in private_tmp.iterdir() if p.name.startswith("simpletvm")) == []


def test_failures_are_recorded_and_the_sweep_goes_on(cli, write_grid, store, tiny_onnx, bad_onnx):
    grid = write_grid(f"""
        name: keep-going
        fixed: {{autotune: false, evaluate_repeat: 2, evaluate_warmup: 0}}
        grid:
          model: [{bad_onnx}, {tiny_onnx}]
          evaluate_number: [1, 2]
    """)
    result = cli("run", grid, "--store", store, "--no-final-round")
    assert result.exit_code == 1
    assert "4 runs: 2 ok, 2 failed" in result.stdout
    assert "failed runs" in result.stdout
    runs = pd.read_csv(store / "superb" / "keep-going" / "runs.csv")
    assert list(runs["status"]) == ["failed", "failed", "ok", "ok"]
    assert "Error" in runs["error"][0] and pd.isna(runs["error"][2])  # ok rows: no error
    assert runs.loc[0, "from_model_s"] >= 0  # the failed step's time is still recorded

    # failed runs are complete: the same command runs nothing, and still exits 1
    again = cli("run", grid, "--store", store, "--no-final-round")
    assert again.exit_code == 1 and "0 ran now" in again.stdout
    retried = cli("run", grid, "--store", store, "--no-final-round", "--retry-failed")
    assert retried.exit_code == 1 and "2 ran now" in retried.stdout
    runs = pd.read_csv(store / "superb" / "keep-going" / "runs.csv")
    assert len(runs) == 4 and list(runs["attempt"]) == [2, 2, 1, 1]


def test_fail_fast_stops_at_the_first_failure(cli, write_grid, store, tiny_onnx, bad_onnx):
    grid = write_grid(f"""
        name: fail-fast
        fixed: {{autotune: false, evaluate_repeat: 2}}
        grid:
          model: [{bad_onnx}, {tiny_onnx}]
          evaluate_number: [1, 2]
    """)
    result = cli("run", grid, "--store", store, "--no-final-round", "--fail-fast")
    assert result.exit_code == 1
    assert "0 ok, 1 failed, 3 not started (--fail-fast)" in result.stdout
    assert len(pd.read_csv(store / "superb" / "fail-fast" / "runs.csv")) == 1


def test_a_run_past_its_timeout_is_stopped(cli, write_grid, store, tiny_onnx):
    grid = write_grid(f"""
        name: timeout
        fixed: {{model: {tiny_onnx}, autotune: false}}
        grid: {{evaluate_repeat: [2, 5000000]}}
    """)
    # the short run (import, build with default schedules, two timings) ends well
    # inside the limit on a busy machine; the long one would take minutes
    result = cli("run", grid, "--store", store, "--no-final-round", "--run-timeout", "20")
    assert result.exit_code == 1
    runs = pd.read_csv(store / "superb" / "timeout" / "runs.csv")
    assert list(runs["status"]) == ["ok", "timeout"]
    assert "longer than 20 s" in runs.loc[1, "error"]
    assert runs.loc[1, "wall_s"] < 35


@contextmanager
def listeners_started():
    """Watch this process's descendants while inside: yields a dict that ends up holding
    each one seen listening on a TCP port (pid -> (process, ports)). A port alone cannot
    tell: another test's tracker may take a port the moment superb's frees it."""
    seen: dict[int, tuple[psutil.Process, set[int]]] = {}
    stopped = threading.Event()

    def watch():
        while not stopped.wait(0.2):
            for process in psutil.Process().children(recursive=True):
                try:
                    ports = {
                        c.laddr.port
                        for c in process.net_connections("tcp")
                        if c.status == psutil.CONN_LISTEN
                    }
                except psutil.Error:
                    continue
                if ports:
                    seen.setdefault(process.pid, (process, set()))[1].update(ports)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        stopped.set()
        watcher.join()


@pytest.mark.slow
def test_tuned_sweep_profiles_through_its_own_tracker(
    cli, write_grid, store, tiny_onnx, private_tmp
):
    grid = write_grid(f"""
        name: tuned
        fixed:
          model: {tiny_onnx}
          trials: 4
          candidates_per_iteration: 4
          population: 32
          genetic_iterations: 1
          seed: 0
          transfer_learning: false
          remeasure: 0
          in_model: true
          evaluate_repeat: 3
          save: true
    """)
    with listeners_started() as listeners:
        result = cli("run", grid, "--store", store, "--no-final-round")
    assert result.exit_code == 0, result.output
    row = pd.read_csv(store / "superb" / "tuned" / "runs.csv").iloc[0]
    assert row["status"] == "ok" and row["tuned"] == True and row["records"] == "run"  # noqa
    assert row["trials"] >= 5 and row["num_tasks"] >= 2 and row["tuning_errors"] == 0
    assert row["tuning_s"] > 0 and row["device_key"] == "superb-cpu"
    for stage in ("select", "build", "profile", "update"):
        assert row[f"{stage}_mean_s"] > 0 and row[f"{stage}_count"] >= 2
    context = json.loads(open(row["context"]).read())
    assert context["artifacts"]["module"]  # save: true
    # the tuned kernels timed inside the model (on the sweep's own device) before the build
    steps = [step["step"] for step in context["steps"]]
    assert steps.index("in_model") == steps.index("autotune") + 1 < steps.index("build")
    assert context["steps"][steps.index("in_model")]["kernels"] >= 1
    assert context["tuning"]["in_model_latency_s"] > 0
    host, port = context["tuning"]["rpc_tracker"]
    trackers = [process for process, ports in listeners.values() if port in ports]
    assert trackers and not any(alive(p) for p in trackers)  # superb stopped it
    assert not any(alive(p) for p, _ in listeners.values())  # and its servers
    # the candidates' builds, the buffered records and the exported module: all deleted
    assert sorted(p.name for p in private_tmp.iterdir() if p.name.startswith("simpletvm")) == []
