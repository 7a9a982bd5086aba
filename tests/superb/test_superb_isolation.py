"""Every run is one scheduler job in a process of its own: a segfault, an exit, a failure
or a hang ends that run only, as data; the sweep records it and goes on, keeps --jobs
runs in flight, and never lets an evaluation share a device with a profile."""

from __future__ import annotations

import pytest

from scheduler import Trace
from superb.grid import parse_grid
from superb.plan import build_plan
from superb.sweep import run_sweep
from superb.testing import FakeRunSpec

UNTUNED = "fixed: {autotune: false}\n"  # no tracker to start for fake runs


def sweep(tmp_path, grid: str, **options):
    plan = build_plan(parse_grid(grid))
    return plan, run_sweep(plan, store=tmp_path / "store", job_factory=FakeRunSpec, **options)


def test_every_ending_is_a_row(tmp_path):
    plan, summary = sweep(
        tmp_path,
        UNTUNED + "name: endings\ngrid: {model: [fine, fail, crash, exit, hang]}\n",
        run_timeout=3,
    )
    rows = summary.experiment.state().rows
    found = {rows[run.key]["param:model"].rsplit("/", 1)[-1]: rows[run.key] for run in plan.runs}
    assert {model: row["status"] for model, row in found.items()} == {
        "fine": "ok",
        "fail": "failed",
        "crash": "crashed",
        "exit": "crashed",
        "hang": "timeout",
    }
    assert found["fail"]["error"] == "ModelImportError: a fake failure"
    assert found["crash"]["error"].startswith(
        "the run's process died (killed by SIGSEGV); last output: fake run"
    )
    assert found["exit"]["error"].startswith("the run's process died (exit code 3)")
    assert found["hang"]["error"] == "the run took longer than 3 s and was stopped"
    assert 3 <= found["hang"]["wall_s"] < 15
    assert summary.ran == 5 and len(summary.failures) == 4


def test_fail_fast_leaves_the_rest_for_later(tmp_path):
    grid = UNTUNED + "name: ff\ngrid: {model: [a, crash, b, c]}\n"
    _, summary = sweep(tmp_path, grid, fail_fast=True)
    assert summary.ran == 2 and summary.not_started == 2
    _, summary = sweep(tmp_path, grid)
    assert summary.ran == 2 and summary.skipped == 2 and len(summary.failures) == 1


def test_one_superb_per_experiment(tmp_path):
    from superb.results import Experiment, ExperimentBusy

    holder = Experiment(tmp_path / "store" / "superb" / "busy")
    holder.acquire()
    try:
        with pytest.raises(ExperimentBusy, match="another superb is running"):
            sweep(tmp_path, UNTUNED + "name: busy\ngrid: {model: [a]}\n")
    finally:
        holder.release()


def test_jobs_keep_runs_in_flight_and_evaluations_never_share_a_device_with_a_profile(tmp_path):
    """Three tuned runs, --jobs 2: the third starts the moment the first ends (no batch
    barrier), and on the one device no evaluation overlaps another run's profile."""
    # the fakes profile nowhere: a tracker address keeps superb from starting one
    _, summary = sweep(
        tmp_path,
        "name: flight\nfixed: {device_key: fake}\ngrid: {model: [a@0.05, b@0.15, c@0.05]}\n",
        jobs=2,
        policy="round-robin",
        tracker=("127.0.0.1", 9),
    )
    assert summary.ok and summary.ran == 3
    trace = Trace.from_csv(next(summary.experiment.dir.glob("trace-*.csv")))
    spans = {
        job: (
            min(r.start for r in trace.records if r.job == job),
            max(r.end for r in trace.records if r.job == job),
        )
        for job in {r.job for r in trace.records}
    }
    by_start = sorted(spans, key=lambda job: spans[job][0])
    third_job = by_start[2]
    ended_first = min(spans, key=lambda job: spans[job][1])
    assert spans[third_job][0] >= spans[ended_first][1]  # it waited for a free slot ...
    assert spans[third_job][0] < max(end for _, end in spans.values())  # ... not for all
    assert spans[third_job][0] - spans[ended_first][1] < 5.0
    on_device = [r for r in trace.records if r.role == "device:fake"]
    assert {r.stage for r in on_device} == {"profile", "evaluate"}
    assert trace.overlaps() == []
    evaluations = [r for r in on_device if r.stage == "evaluate"]
    profiles = [r for r in on_device if r.stage == "profile"]
    assert evaluations and not [
        (e, p)
        for e in evaluations
        for p in profiles
        if e.job != p.job and e.start < p.end and p.start < e.end
    ]


def test_a_stopped_run_continues_under_its_run_id(tmp_path):
    """The run id is logged before the run starts; a rerun of an unfinished run reuses
    it, so its tuning continues from the records it measured."""
    plan = build_plan(parse_grid(UNTUNED + "name: again\ngrid: {model: [a, b]}\n"))
    from superb.results import Experiment

    experiment = Experiment(tmp_path / "store" / "superb" / "again")
    experiment.dir.mkdir(parents=True)
    experiment.record_started(plan.runs[0], 1, "f" * 32, None)  # a sweep killed mid-run
    summary = run_sweep(plan, store=tmp_path / "store", job_factory=FakeRunSpec)
    rows = summary.experiment.state().rows
    assert rows[plan.runs[0].key]["run_id"] == "f" * 32
    assert rows[plan.runs[0].key]["attempt"] == 2
    assert rows[plan.runs[1].key]["run_id"] != "f" * 32
    assert summary.ran == 2 and summary.ok
