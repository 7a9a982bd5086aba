"""Each run in its own process: a segfault, an exit without a result or a hang ends
that run only, as data; the sweep records it and goes on."""

from __future__ import annotations

import pytest

from superb.grid import parse_grid
from superb.plan import build_plan
from superb.runner import IsolatedRunner
from superb.sweep import run_sweep
from superb.testing import fake_child

UNTUNED = "fixed: {autotune: false}\n"  # no tracker to start for fake runs


@pytest.fixture(scope="module")
def runner():
    return IsolatedRunner(target=fake_child, preload=("superb.testing",))


def spec(tmp_path, model, key="k"):
    return {"key": key, "run_id": "r" * 32, "params": {"model": model},
            "log": str(tmp_path / f"{key}.log")}


@pytest.mark.parametrize("model, status, error", [
    ("fine", "ok", None),
    ("fail", "failed", "ModelImportError: a fake failure"),
    ("crash", "crashed", "the run's process died of SIGSEGV"),
    ("exit", "crashed", "the run's process ended with exit code 3 and no result"),
])
def test_every_ending_is_an_outcome(runner, tmp_path, model, status, error):
    events = []
    outcome = runner.run(spec(tmp_path, model), on_event=events.append)
    assert outcome.status == status
    assert (outcome.error or "").startswith(error or "")
    assert events == [{"type": "step", "step": "from_model"}]


def test_a_hanging_run_is_stopped_at_its_timeout(runner, tmp_path):
    outcome = runner.run(spec(tmp_path, "hang"), timeout=1.0)
    assert outcome.status == "timeout" and 1.0 <= outcome.wall_s < 10


def test_a_crash_does_not_take_down_the_sweep(runner, tmp_path):
    plan = build_plan(parse_grid(UNTUNED + "name: crashy\ngrid: {model: [a, crash, exit, b]}\n"))
    summary = run_sweep(plan, store=tmp_path / "store", runner=runner)
    assert summary.ran == 4 and [f["index"] for f in summary.failures] == [2, 3]
    rows = summary.experiment.state().rows
    assert [rows[r.key]["status"] for r in plan.runs] == ["ok", "crashed", "crashed", "ok"]


def test_fail_fast_leaves_the_rest_for_later(runner, tmp_path):
    plan = build_plan(parse_grid(UNTUNED + "name: ff\ngrid: {model: [a, crash, b, c]}\n"))
    summary = run_sweep(plan, store=tmp_path / "store", runner=runner, fail_fast=True)
    assert summary.ran == 2 and summary.not_started == 2
    summary = run_sweep(plan, store=tmp_path / "store", runner=runner)
    assert summary.ran == 2 and summary.skipped == 2 and len(summary.failures) == 1


def test_one_superb_per_experiment(runner, tmp_path):
    from superb.results import Experiment, ExperimentBusy

    plan = build_plan(parse_grid(UNTUNED + "name: busy\ngrid: {model: [a]}\n"))
    holder = Experiment(tmp_path / "store" / "superb" / "busy")
    holder.acquire()
    try:
        with pytest.raises(ExperimentBusy, match="another superb is running"):
            run_sweep(plan, store=tmp_path / "store", runner=runner)
    finally:
        holder.release()
