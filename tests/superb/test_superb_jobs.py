"""superb run --jobs: tuning of several runs interleaved by the scheduler."""

from __future__ import annotations

import pandas as pd
import pytest

from scheduler import Trace
from simpletvm.tuning.record_files import open_records
from superb.results import Experiment


def _two_tuned_runs(write_grid, tiny_onnx, name: str):
    """A grid of two small tuned runs that differ only in their search seed."""
    return write_grid(f"""
        name: {name}
        fixed: {{model: {tiny_onnx}, trials: 4, candidates_per_iteration: 4, population: 32,
                 genetic_iterations: 1, transfer_learning: false, remeasure: 0,
                 evaluate_repeat: 5}}
        grid:
          seed: [0, 1]
    """)


@pytest.mark.slow
def test_jobs_tune_runs_together_without_overlapping_profiles(cli, write_grid, store, tiny_onnx):
    grid = _two_tuned_runs(write_grid, tiny_onnx, "together")
    result = cli(
        "run", grid, "--store", store, "--no-final-round", "--jobs", "2", "--policy", "interleaved"
    )
    assert result.exit_code == 0, result.output
    experiment = Experiment(store / "superb" / "together")
    runs = pd.read_csv(experiment.runs_csv)
    assert list(runs["status"]) == ["ok", "ok"]
    assert (runs["trials"] >= 5).all() and (runs["tuning_s"] > 0).all()
    assert (runs["profile_count"] > 0).all() and (runs["eval_median_ms"] > 0).all()
    traces = sorted(experiment.dir.glob("trace-*.csv"))
    assert len(traces) == 1 and traces[0].with_suffix(".png").stat().st_size > 0
    trace = Trace.from_csv(traces[0])
    assert trace.overlaps() == []
    assert {r.job for r in trace.records} == set(runs["run"])
    spans: dict[str, tuple[float, float]] = {}  # each run's first start and last end
    for record in trace.records:
        start, end = spans.get(record.job, (record.start, record.end))
        spans[record.job] = (min(start, record.start), max(end, record.end))
    # together: each run began before the other's last stage ended
    assert max(start for start, _ in spans.values()) < min(end for _, end in spans.values())


def test_unknown_policy_is_bad_input(cli, write_grid, store, tiny_onnx):
    grid = write_grid(f"""
        fixed: {{model: {tiny_onnx}}}
        grid: {{trials: [4]}}
    """)
    result = cli(
        "run", grid, "--store", store, "--no-final-round", "--jobs", "2", "--policy", "fastest"
    )
    assert result.exit_code == 2
    assert "--policy 'fastest' is unknown" in result.stderr


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # with the other tests that start Ray (test_scheduler_ray.py)
def test_jobs_run_as_ray_actors_with_backend_ray(cli, write_grid, store, tiny_onnx):
    grid = _two_tuned_runs(write_grid, tiny_onnx, "on-ray")
    result = cli(
        "run", grid, "--store", store, "--no-final-round", "--jobs", "2", "--backend", "ray"
    )
    assert result.exit_code == 0, result.output
    experiment = Experiment(store / "superb" / "on-ray")
    runs = pd.read_csv(experiment.runs_csv)
    assert list(runs["status"]) == ["ok", "ok"] and (runs["trials"] >= 5).all()
    # the actors returned their records with each stage; superb wrote them to the store
    records = open_records(store)
    for run_id, trials, errors in runs[["run_id", "trials", "tuning_errors"]].itertuples(
        index=False
    ):
        assert records.count(run_id=run_id) == trials - errors > 0
    trace = Trace.from_csv(next(experiment.dir.glob("trace-*.csv")))
    assert trace.overlaps() == []
    # client stages ran on the Ray node's own client slot, one job's at a time
    client_resources = {r.resource for r in trace.records if r.resource_kind == "client"}
    assert len(client_resources) == 1 and client_resources.pop().startswith("client@")


@pytest.mark.parametrize(
    "options,message",
    [
        (["--backend", "dask"], "--backend 'dask' is unknown: choose processes or ray"),
        (["--ray-address", "auto"], "--ray-address needs --backend ray"),
    ],
)
def test_bad_backend_options_are_bad_input(cli, write_grid, store, tiny_onnx, options, message):
    grid = write_grid(f"""
        fixed: {{model: {tiny_onnx}}}
        grid: {{trials: [4]}}
    """)
    result = cli("run", grid, "--store", store, "--no-final-round", *options)
    assert result.exit_code == 2
    assert message in result.stderr
    assert not (store / "superb").exists()


def test_a_trace_without_matplotlib_keeps_its_csv_and_says_how_to_get_the_chart(
    tmp_path, monkeypatch
):
    import sys

    from scheduler import client, devices
    from scheduler.simulate import simulate
    from scheduler.testing import MockJob
    from superb.sweep import save_trace

    trace = simulate(
        [
            MockJob(
                "job", iterations=1, durations={"select": 1, "build": 1, "profile": 1, "update": 1}
            )
        ],
        [client(), *devices("default", 1)],
        "round-robin",
    )
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)  # not installed
    note = save_trace(trace, tmp_path, "trace-x")
    assert "the Gantt chart needs matplotlib: pip install matplotlib" in note
    assert [p.name for p in tmp_path.iterdir()] == ["trace-x.csv"]
    monkeypatch.delitem(sys.modules, "matplotlib.backends.backend_agg")
    assert save_trace(trace, tmp_path, "trace-y") is None
    assert (tmp_path / "trace-y.png").stat().st_size > 0
