"""The run log replayed (torn lines, unfinished runs, retries), the CSVs built from it,
and superb report / compare on experiments written here (no SimpleTVM runs)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from superb.plan import Run, run_key
from superb.results import (
    LEAD_COLUMNS,
    RESULT_COLUMNS,
    RUN_KEY_COLUMNS,
    STAGE_FIELDS,
    STAGES,
    Experiment,
    aggregate,
    make_row,
    runs_frame,
)
from superb.sweep import RunOutcome as Outcome


def fake_row(index, params, median, status="ok", repetition=1, tuning=None, attempt=1):
    run = Run(index, run_key(params, repetition), params, repetition)
    outcome = Outcome(status, None if status == "ok" else "Boom: it broke", "x" * 32, 1.5, 1.4)
    context = {
        "steps": [
            {"step": "from_model", "duration_s": 0.1},
            {"step": "autotune", "duration_s": tuning or 0.0},
        ],
        "stages": [
            {"stage": "select", "duration_s": 0.2},
            {"stage": "select", "duration_s": 0.4},
            {"stage": "profile", "duration_s": 1.0},
        ],
        "tuning": {"trials": 8, "num_tasks": 2, "errors": 0},
        "evaluation": {
            "count": 3,
            "median_ms": median,
            "mean_ms": median * 1.1,
            "max_rel_error": median * 1e-7,
        },
    }
    return make_row(
        run,
        outcome,
        context if status == "ok" else None,
        attempt=attempt,
        started_at=0.0,
        commit="abc",
    )


def write_experiment(directory, rows):
    experiment = Experiment(directory)
    for row in rows:
        experiment.record_started(
            Run(row["index"], row["run"], {}), row["attempt"], row["run_id"], 1
        )
        experiment.record_finished(row)
    experiment.write_csvs()
    return experiment


def test_log_replay_skips_torn_lines_and_keeps_the_last_row(tmp_path):
    experiment = Experiment(tmp_path)
    first = fake_row(1, {"trials": 8}, 2.0, status="failed")
    experiment.record_started(Run(1, first["run"], {}), 1, "a" * 32, 10)
    experiment.record_finished(first)
    with open(experiment.log_path, "a") as handle:
        handle.write('{"event": "finished", "run": "torn", "row": {"sta')  # killed mid-write
    retried = fake_row(1, {"trials": 8}, 2.0, attempt=2)
    experiment.record_started(Run(1, first["run"], {}), 2, "b" * 32, 11)
    experiment.record_finished(retried)
    experiment.record_started(Run(2, "unfinished", {}), 1, "c" * 32, 12)
    state = experiment.state()
    assert set(state.rows) == {first["run"]} and state.rows[first["run"]]["attempt"] == 2
    assert state.unfinished == {"unfinished"} and state.attempts["unfinished"] == 1
    assert state.is_complete(first["run"]) and not state.is_complete("unfinished")


def test_rows_carry_stage_means_and_evaluation(tmp_path):
    row = fake_row(1, {"trials": 8, "target": {"kind": "llvm"}}, 2.0, tuning=5.0)
    assert row["param:target"] == '{"kind":"llvm"}'  # mappings are JSON in a cell
    assert row["select_mean_s"] == pytest.approx(0.3) and row["select_count"] == 2
    assert row["profile_mean_s"] == 1.0 and row["build_mean_s"] is None
    assert row["tuning_s"] == 5.0 and row["eval_median_ms"] == 2.0
    assert row["max_rel_error"] == pytest.approx(2e-7)  # the build's against its source
    assert row["overhead_s"] == pytest.approx(0.1)
    frame = runs_frame([row])
    assert list(frame.columns) == LEAD_COLUMNS + ["param:trials", "param:target"] + RESULT_COLUMNS


def test_aggregate_means_over_repetitions_of_ok_runs():
    rows = [
        fake_row(i, {"model": m, "trials": 8}, median, repetition=rep, tuning=tuning)
        for i, (m, median, rep, tuning) in enumerate(
            [("a", 1.0, 1, 10.0), ("a", 3.0, 2, 20.0), ("b", 5.0, 1, 30.0)], 1
        )
    ]
    rows.append(fake_row(4, {"model": "b", "trials": 8}, 0.0, status="failed", repetition=2))
    result = aggregate(runs_frame(rows))
    assert list(result["param:model"]) == ["a", "b"]
    assert list(result["runs"]) == [2, 2] and list(result["failed"]) == [0, 1]
    assert list(result["eval_median_ms"]) == [2.0, 5.0]  # the failed run counts for nothing
    assert list(result["tuning_s"]) == [15.0, 30.0]
    assert result["select_mean_s"].tolist() == pytest.approx([0.3, 0.3])
    assert aggregate(runs_frame(rows), by=[])["runs"].tolist() == [4]
    with pytest.raises(ValueError, match="cannot group by"):
        aggregate(runs_frame(rows), by=["nope"])


def test_report_prints_and_writes_the_aggregate(cli, tmp_path):
    store = tmp_path / "store"
    rows = [fake_row(1, {"model": "a"}, 1.0), fake_row(2, {"model": "b"}, 0.0, "failed")]
    experiment = write_experiment(store / "superb" / "exp", rows)
    experiment.aggregate_csv.unlink()
    result = cli("report", "exp", "--store", store)
    assert result.exit_code == 0, result.output
    assert "exp: 2 runs" in result.stdout
    assert "failed #2" in result.stdout and "Boom: it broke" in result.stdout
    assert len(pd.read_csv(experiment.aggregate_csv)) == 2
    assert cli("report", tmp_path / "nowhere").exit_code == 2


def test_report_shows_a_parameter_named_like_a_summary_column_beside_it(cli, tmp_path):
    """A grid axis ``trials`` varies beside the summary's ``trials`` column (the tuning
    trials the runs made): both are printed, the parameter under its ``param:`` name."""
    store = tmp_path / "store"
    rows = [fake_row(i, {"model": "a", "trials": t}, 1.0) for i, t in enumerate([2, 4], 1)]
    write_experiment(store / "superb" / "exp", rows)
    result = cli("report", "exp", "--store", store)
    assert result.exit_code == 0, result.output
    assert "param:trials" in result.stdout and "exp: 2 runs" in result.stdout


def test_compare_matches_runs_and_applies_the_noise_threshold(cli, tmp_path):
    base = [
        fake_row(i, {"model": m}, v)
        for i, (m, v) in enumerate([("a", 10.0), ("b", 10.0), ("c", 10.0), ("d", 10.0)], 1)
    ]
    new = [
        fake_row(i, {"model": m}, v)
        for i, (m, v) in enumerate([("a", 10.3), ("b", 8.0), ("c", 12.0), ("e", 1.0)], 1)
    ]
    a = write_experiment(tmp_path / "a", base)
    b = write_experiment(tmp_path / "b", new)
    result = cli("compare", a.dir, b.dir, "--min-effect", "5")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "+3.0%" in out and "-20.0%" in out and "+20.0%" in out
    assert "1 higher, 1 lower, 1 same" in out
    assert "unmatched: 1 only in A, 1 only in B" in out
    assert cli("compare", a.dir, b.dir, "--metric", "nope").exit_code == 2


def test_stages_and_curves_csvs_come_from_the_contexts_once_per_run(tmp_path):
    def stage(name, iteration, start):
        record = {
            "task": 0,
            "task_name": "conv",
            "iteration": iteration,
            "stage": name,
            "resource": "device:cpu" if name == "profile" else "client",
            "start": start,
            "end": start + 1.0,
            "duration_s": 1.0,
        }
        if name == "update":  # two trials an iteration; the best gets 1 ms faster
            record.update(trials=2 * (iteration + 1), best_latency_s=0.004 - 0.001 * iteration)
        return record

    context = tmp_path / "context.json"
    context.write_text(
        json.dumps(
            {
                "tuning": {"tasks": [{"task": "conv", "weight": 2}]},
                "stages": [
                    stage(name, iteration, 100.0 + 4 * iteration + i)
                    for iteration in range(2)
                    for i, name in enumerate(STAGES)
                ],
            }
        )
    )
    tuned = fake_row(1, {"trials": 4}, 1.0)
    tuned["context"] = str(context)
    failed = fake_row(2, {"trials": 8}, 0.0, status="failed")
    experiment = write_experiment(tmp_path / "exp", [tuned, failed])
    experiment.write_csvs()  # rebuilt, not appended
    stages = pd.read_csv(experiment.stages_csv)
    assert list(stages.columns) == RUN_KEY_COLUMNS + STAGE_FIELDS
    assert set(stages["run"]) == {tuned["run"]} and list(stages["stage"]) == list(STAGES) * 2
    curves = pd.read_csv(experiment.curves_csv)
    assert list(curves.columns) == RUN_KEY_COLUMNS + ["trials", "elapsed_s", "estimated_latency_ms"]
    assert list(curves["trials"]) == [2, 4]
    assert curves["estimated_latency_ms"].tolist() == pytest.approx([8.0, 6.0])

    context.unlink()  # an experiment copied without its run store keeps its rows
    Experiment(experiment.dir).write_csvs()
    assert len(pd.read_csv(experiment.stages_csv)) == 8
    assert len(pd.read_csv(experiment.curves_csv)) == 2


def timed_row(tmp_path, index, params, calls_ms, repetition=1):
    """An ok run whose context (a file, as superb saves it) holds its timed calls."""
    run = Run(index, run_key(params, repetition), params, repetition)
    path = tmp_path / f"context-{index}.json"
    evaluation = {"count": len(calls_ms), "median_ms": float(pd.Series(calls_ms).median())}
    path.write_text(json.dumps({"evaluation": {**evaluation, "samples_ms": calls_ms}}))
    outcome = Outcome("ok", None, f"{index:032d}", 1.0, 1.0, str(path))
    return make_row(
        run,
        outcome,
        json.loads(path.read_text()),
        attempt=1,
        started_at=0.0,
        commit="abc",
    )


def test_report_gives_each_tuned_row_its_speed_up_and_flags_a_slower_one(cli, tmp_path):
    """The speed-up is the untuned twin's median over the tuned one's (twins: the same
    parameters but the tuning ones); a tuned row slower beyond the calls' spread is
    "slower", one whose interval reaches 1 "slower, within noise"."""
    import numpy as np

    rng = np.random.default_rng(0)

    def calls(median: float, spread: float) -> list[float]:
        return (median + spread * rng.standard_normal(30)).tolist()

    rows = [
        timed_row(tmp_path, 1, {"autotune": False, "model": "a", "trials": 4}, calls(1.00, 0.01)),
        timed_row(tmp_path, 2, {"autotune": True, "model": "a", "trials": 4}, calls(1.20, 0.01)),
        timed_row(tmp_path, 3, {"autotune": False, "model": "b", "trials": 4}, calls(1.00, 0.3)),
        timed_row(tmp_path, 4, {"autotune": True, "model": "b", "trials": 4}, calls(1.02, 0.3)),
        timed_row(tmp_path, 5, {"autotune": False, "model": "c", "trials": 4}, calls(2.00, 0.01)),
        timed_row(tmp_path, 6, {"autotune": True, "model": "c", "trials": 4}, calls(1.00, 0.01)),
    ]
    store = tmp_path / "store"
    write_experiment(store / "superb" / "exp", rows)
    from superb.report import make_report

    frame = make_report(Experiment.find("exp", store)).aggregate.set_index("param:model")
    tuned = frame[frame["param:autotune"].astype(str) == "True"]
    assert tuned["speedup"].round(2).to_dict() == pytest.approx(
        {"a": 1 / 1.2, "b": 1 / 1.02, "c": 2.0}, abs=0.03
    )
    assert tuned["flag"].to_dict() == {"a": "slower", "b": "slower, within noise", "c": ""}
    assert frame[frame["param:autotune"].astype(str) == "False"]["speedup"].isna().all()
    result = cli("report", "exp", "--store", store)
    assert result.exit_code == 0, result.output
    assert "speed-up" in result.stdout and "below 1: tuning made it slower" in result.stdout
    assert sum("slower" in line and "│" in line for line in result.stdout.splitlines()) == 2
