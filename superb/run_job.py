"""One superb run as one scheduler job, from import to evaluation.

Its stages: ``import`` (client: from_model, and the tuning job's setup for a tuned run),
the tuning stages (select, build and update on the client, profile on the device),
``compile`` (client: build, and save when asked) and ``evaluate`` (device: exclusive,
like profiling, so no evaluation overlaps another job's profile on that device). An
untuned run has no tuning stages. A device stage reaches the server of the device
resource it was granted (:class:`simpletvm.remote.rpc.DeviceGrant`).

The job lives in a worker process of its own (the scheduler's process backend): its
output goes to the run's log file, and its BenchmarkingContext is saved when it ends,
failed or not. A failing stage reports its error as data; the sweep turns the job's end
into the run's row.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from scheduler.base import CLIENT, DEVICE, Job, Stage, StageResult, StageStatus
from scheduler.resources import device_role

IMPORT, TUNE, COMPILE, EVALUATE = "import", "tune", "compile", "evaluate"


@dataclass(frozen=True)
class RunSpec:
    """Everything a run's job needs, picklable (the scheduler's JobFactory)."""

    key: str
    run_id: str
    params: dict[str, Any]
    store: str
    device_key: str
    log: str
    attempt: int = 1
    tracker: tuple[str, int] | None = None
    records_to_driver: bool = False  # return measured records with each stage (Ray)

    @property
    def job_id(self) -> str:
        return self.key

    @property
    def device_role(self) -> str:
        return device_role(self.device_key)

    def __call__(self) -> Job:
        return RunJob(self)


class RunJob(Job):
    """The run's SimpleTVM, driven one stage at a time."""

    def __init__(self, spec: RunSpec) -> None:
        from simpletvm import BenchmarkingContext, SimpleTVM
        from simpletvm.remote.rpc import DeviceGrant

        from .grid import calls_for

        _write_output_to(spec.log)
        print(f"--- superb run {spec.key} attempt {spec.attempt} run_id {spec.run_id} "
              f"pid {os.getpid()}", flush=True)
        self.spec = spec
        self.calls = calls_for(spec.params)
        options = dict(self.calls["context"])
        self.tuned = self.calls["autotune"] is not None
        self.tracker = spec.tracker if self.tuned else None
        self.context = BenchmarkingContext(options.pop("target"), store=spec.store,
                                           run_id=spec.run_id, **options)
        if self.tracker:
            self.context.device_key = spec.device_key
        self.simpletvm = SimpleTVM(self.context, rpc_tracker=self.tracker)
        self.device = DeviceGrant(spec.device_key)
        self.tuning = None
        self._steps = [IMPORT, *([TUNE] if self.tuned else []), COMPILE,
                       *([EVALUATE] if self.calls["evaluate"] is not None else [])]

    @property
    def job_id(self) -> str:
        return self.spec.key

    def next_stage(self) -> Stage | None:
        if not self._steps:
            return None
        step = self._steps[0]
        if step == TUNE:
            stage = self.tuning.next_stage()
            return Stage(stage.kind, self.spec.device_role if stage.on_device else CLIENT,
                         stage.task, stage.iteration)
        return Stage(step, self.spec.device_role if step == EVALUATE else CLIENT)

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        if stage.resource_kind == DEVICE:
            self.device.grant(resource_name)
        try:
            getattr(self, f"_{self._steps[0]}")(stage)
        except Exception as error:  # noqa: BLE001 - a failed run is a row, not a crash
            traceback.print_exc()
            self.context.save()
            return StageResult(StageStatus.ERROR, _error_text(error), details=self.stage_details())
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        if not self._steps:
            self.context.save()
        return StageResult(details=self.stage_details())

    def stage_details(self) -> dict[str, Any]:
        """What the stage reports: the run's step, tasks and trials, best estimate (for the
        display), and with ``records_to_driver`` the records it measured."""
        details: dict[str, Any] = {"step": self._steps[0] if self._steps else "done",
                                   "pid": os.getpid(),
                                   "context_path": str(self.context.store.context_path(
                                       self.context.run_id))}
        if self.tuning is not None:
            from scheduler.tuning import measured_records
            from simpletvm.tuning.options import UNCAPPED_TRIALS

            details.update(measured_records(self.tuning))

            summary, options = self.tuning.summary(), self.tuning.options
            per_task = options.per_task_trials()
            budgets = [budget for budget in (options.total_trials, None if per_task >= UNCAPPED_TRIALS
                                             else per_task * summary["num_tasks"]) if budget]
            details.update(
                num_tasks=summary["num_tasks"], trials=summary["trials"],
                tasks_measured=sum(1 for task in summary["tasks"] if task["trials"]),
                trial_budget=min(budgets) if budgets else None, minutes=options.minutes,
                estimated_ms=(summary["estimated_latency_s"] * 1e3
                              if summary["estimated_latency_s"] else None))
        return details

    def close(self) -> None:
        """The run's temporary files: its tuning's build workers and buffered records,
        its build's exported module (saved in the store when the grid saves it)."""
        if self.tuning is not None:
            self.tuning.finalize()
        self.simpletvm.close()

    # ---- the steps ---------------------------------------------------------------------
    def _import(self, stage: Stage) -> None:
        from simpletvm.tuning import TuningOptions

        self.simpletvm.from_model(**self.calls["from_model"])
        if self.tuned:
            options = TuningOptions(**self.calls["autotune"])
            self.context.record_parameters("autotune", **options.to_dict())
            self.tuning = self.simpletvm.tuning_job(
                options, self.tracker, self.device,
                buffer_records=self.spec.records_to_driver)
        self._steps.pop(0)
        if self.tuned and self.tuning.is_complete():  # resumed after its last stage
            self._finish_tuning()

    def _tune(self, stage: Stage) -> None:
        ran = self.tuning.run_stage()
        if (ran.kind, ran.task, ran.iteration) != (stage.kind, stage.task, stage.iteration):
            raise RuntimeError(f"ran {ran} but the scheduler asked for {stage}")
        if self.tuning.is_complete():
            self._finish_tuning()

    def _finish_tuning(self) -> None:
        self.simpletvm.finish_scheduled_tuning(self.tuning, self.tracker, self.spec.device_key)
        self._steps.pop(0)

    def _compile(self, stage: Stage) -> None:
        self.simpletvm.build(**self.calls["build"])
        if self.calls["save"]:
            self.simpletvm.save()
        self._steps.pop(0)

    def _evaluate(self, stage: Stage) -> None:
        if self.tracker:  # run() and evaluate() go to the servers of the context's key
            self.context.device_key = self.device.server_key
        self.simpletvm.evaluate(**self.calls["evaluate"])
        self._steps.pop(0)


def _write_output_to(log: str) -> None:
    """Send this process's output, Python's and native code's, to the run's log."""
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "ab", buffering=0) as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def _error_text(error: BaseException, limit: int = 500) -> str:
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
