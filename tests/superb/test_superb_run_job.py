"""A run's tuning stages behave the same whether the scheduler's TuningJobAdapter or
superb's RunJob drives them: a stage the job did not name and a stage that fails are
ERROR results, not exceptions, and the run's context is saved with what was measured.

A fake TuningJob stands in for SimpleTVM's (no TVM search runs), driven through the
jobs' own run_stage, as the scheduler's backends call it."""

from __future__ import annotations

import json
import time

import pytest

from scheduler import Stage, StageStatus
from scheduler.tuning import TuningJobAdapter, TuningJobSpec
from simpletvm import SimpleTVM, tuning_session
from simpletvm.in_model_round import InModelRound
from simpletvm.tuning import TuningOptions
from simpletvm.tuning.plan import STAGES, StageSpec
from superb import run_job
from superb.run_job import RunJob, RunSpec

RUN_ID = "r" * 32
TRACKER = ("127.0.0.1", 9190)


class FakeTuningJob:
    """Two iterations of one task's stages, recorded in the context as SimpleTVM's
    TuningJob records them; the stage named ``fail_at`` (stage, iteration) raises."""

    def __init__(self, context, fail_at: tuple[str, int] | None = None, done: bool = False):
        self.context = context
        self.fail_at = fail_at
        self.stages = (
            []
            if done
            else [
                StageSpec(name, 0, "conv2d", iteration) for iteration in range(2) for name in STAGES
            ]
        )
        self.options = TuningOptions(trials=8)
        self.records = None  # committed to the store as measured: nothing to send
        self.cache_mode, self.model_bytes, self.finalized = "none", 0, False

    @property
    def trials(self) -> int:
        return sum(1 for stage in self.context.stages if stage["stage"] == "profile")

    def next_stage(self) -> StageSpec | None:
        return self.stages[0] if self.stages else None

    def is_complete(self) -> bool:
        return not self.stages

    def run_stage(self) -> StageSpec:
        spec = self.stages[0]
        if (spec.kind, spec.iteration) == self.fail_at:
            raise RuntimeError(f"the device went away during {spec.kind}")
        now = time.time()
        self.context.record_stage(
            task=spec.task,
            task_name=spec.task_name,
            iteration=spec.iteration,
            stage=spec.kind,
            resource="client",
            start=now,
            end=now,
        )
        return self.stages.pop(0)

    def finalize(self) -> dict:
        self.finalized = True
        return self.summary()

    def summary(self) -> dict:
        return {
            "num_tasks": 1,
            "trials": self.trials,
            "tasks": [{"trials": self.trials}],
            "estimated_latency_s": None,
        }


@pytest.fixture
def tuning(monkeypatch):
    """SimpleTVM with a fake import, build and tuning job; set ``fail_at``/``done``
    before making a job."""
    options = {"fail_at": None, "done": False}
    monkeypatch.setattr(SimpleTVM, "from_model", lambda self, *args, **kwargs: self)
    monkeypatch.setattr(SimpleTVM, "build", lambda self, *args, **kwargs: self)
    monkeypatch.setattr(
        tuning_session,
        "tuning_job",
        lambda stvm, *args, **kwargs: FakeTuningJob(stvm.context, **options),
    )
    monkeypatch.setattr(run_job, "_write_output_to", lambda log: None)  # keep pytest's output
    return options


def make_job(kind: str, store) -> TuningJobAdapter | RunJob:
    """A job whose next stage is its first tuning stage."""
    if kind == "adapter":
        return TuningJobSpec(
            "job", "model.onnx", TRACKER, "board", store=str(store), run_id=RUN_ID
        )()
    job = RunSpec(
        "run",
        RUN_ID,
        {"model": "model.onnx", "evaluate": False},
        str(store),
        "board",
        str(store / "run.log"),
        tracker=TRACKER,
    )()
    assert job.run_stage(job.next_stage(), "client").ok  # import
    return job


def saved_context(store) -> dict:
    return json.loads((store / "runs" / RUN_ID / "context.json").read_text())


def run_until_error_or_tuned(job) -> list:
    results = []
    while job.tuning is not None and not job.tuning.is_complete():
        stage = job.next_stage()
        results.append(
            job.run_stage(stage, "board" if stage.resource_kind == "device" else "client")
        )
        if not results[-1].ok:
            break
    return results


@pytest.mark.parametrize("kind", ["adapter", "run"])
def test_a_failed_tuning_stage_is_an_error_result_and_the_context_keeps_what_was_measured(
    kind, tuning, tmp_path
):
    tuning["fail_at"] = ("profile", 1)
    job = make_job(kind, tmp_path)
    results = run_until_error_or_tuned(job)
    assert [r.status for r in results] == [StageStatus.OK] * 6 + [StageStatus.ERROR]
    assert results[-1].error == "RuntimeError: the device went away during profile"
    context = saved_context(tmp_path)
    assert [(s["stage"], s["iteration"]) for s in context["stages"]] == [
        *[(name, 0) for name in STAGES],
        ("select", 1),
        ("build", 1),
    ]
    assert not job.tuning.finalized  # a failed tuning is not recorded as finished


@pytest.mark.parametrize("kind", ["adapter", "run"])
def test_a_stage_the_job_did_not_name_is_an_error_result_and_does_not_run(kind, tuning, tmp_path):
    job = make_job(kind, tmp_path)
    expected = job.next_stage()
    result = job.run_stage(Stage("update", "client", 0, 0), "client")
    assert result.status == StageStatus.ERROR
    assert result.error == (
        f"asked to run {Stage('update', 'client', 0, 0)}, but the next stage is {expected}"
    )
    assert job.next_stage() == expected and job.tuning.context.stages == []
    assert saved_context(tmp_path)["stages"] == []


@pytest.mark.parametrize("kind", ["adapter", "run"])
def test_the_last_tuning_stage_finishes_the_tuning_and_saves_the_context(kind, tuning, tmp_path):
    job = make_job(kind, tmp_path)
    results = run_until_error_or_tuned(job)
    assert len(results) == 8 and all(r.ok for r in results)
    assert job.tuning.finalized
    context = saved_context(tmp_path)
    assert [s["step"] for s in context["steps"] if s["step"] == "autotune"] == ["autotune"]
    assert context["tuning"]["trials"] == 2 and len(context["stages"]) == 8
    assert (job.next_stage() is None) == (kind == "adapter")  # a run goes on to compile


@pytest.mark.parametrize("kind", ["adapter", "run"])
def test_a_job_resumed_after_its_last_tuning_stage_finishes_its_tuning_at_once(
    kind, tuning, tmp_path
):
    tuning["done"] = True
    job = make_job(kind, tmp_path)
    assert job.tuning.finalized
    assert job.next_stage() == (None if kind == "adapter" else Stage("compile", "client"))
    assert [s["step"] for s in saved_context(tmp_path)["steps"]][-1] == "autotune"


@pytest.mark.parametrize("records_to_driver", [False, True])
def test_a_run_asked_to_time_inside_the_model_does_so_on_the_device_before_compiling(
    tuning, tmp_path, monkeypatch, records_to_driver
):
    rounds = []
    monkeypatch.setattr(
        InModelRound,
        "run",
        lambda self, records="run": rounds.append((records, self.devices_here)),
    )  # what the step's round runs: the timing itself is tested in test_in_model.py
    job = RunSpec(
        "run",
        RUN_ID,
        {"model": "model.onnx", "evaluate": False, "in_model": True},
        str(tmp_path),
        "board",
        str(tmp_path / "run.log"),
        tracker=TRACKER,
        records_to_driver=records_to_driver,
        devices_here=True,
    )()
    assert job.run_stage(job.next_stage(), "client").ok  # import
    assert all(r.ok for r in run_until_error_or_tuned(job))
    if records_to_driver:  # the store is the driver's: nothing to time here
        assert job.next_stage() == Stage("compile", "client") and not rounds
        return
    stage = job.next_stage()
    assert stage.name == "in_model" and stage.resource_kind == "device"
    assert job.run_stage(stage, "board").ok
    assert rounds == [("run", True)]
    assert job.next_stage() == Stage("compile", "client")


@pytest.mark.parametrize("records_to_driver", [False, True])
def test_a_tuned_run_on_the_sweeps_own_device_is_built_and_timed_as_its_untuned_twin(
    tuning, tmp_path, monkeypatch, records_to_driver
):
    """The sweep's device is this machine: the tuned module is timed here, as the
    untuned one is (SimpleTVM's pool, the faster thread count), not through its server
    (TVM's pool), which made tuned rows read slower than their twins. A job on another
    node (its records sent to the driver) is timed on the server."""
    seen = []
    monkeypatch.setattr(
        SimpleTVM, "build", lambda self, **_: seen.append(("build", self.rpc_tracker))
    )
    monkeypatch.setattr(
        SimpleTVM, "evaluate", lambda self, **_: seen.append(("evaluate", self.rpc_tracker))
    )
    job = RunSpec(
        "run",
        RUN_ID,
        {"model": "model.onnx", "in_model": False},
        str(tmp_path),
        "board",
        str(tmp_path / "run.log"),
        tracker=TRACKER,
        records_to_driver=records_to_driver,
        devices_here=True,
    )()
    assert job.run_stage(job.next_stage(), "client").ok  # import
    assert all(r.ok for r in run_until_error_or_tuned(job))
    assert job.run_stage(job.next_stage(), "client").ok  # compile
    stage = job.next_stage()
    assert stage.name == "evaluate" and stage.resource_kind == "device"  # still exclusive
    assert job.run_stage(stage, "board").ok
    where = TRACKER if records_to_driver else None
    assert seen == [("build", where), ("evaluate", where)]
