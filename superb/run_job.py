"""One superb run as one scheduler job, from import to evaluation.

Its stages: ``import`` (client: from_model, and the tuning job's setup for a tuned run),
the tuning stages (select, build and update on the client, profile on the device),
``in_model`` after a long enough search on the sweep's own devices (device: the tuned
kernels timed inside the model, :data:`scheduler.tuning.IN_MODEL`), ``compile`` (client: build, and save when asked) and ``evaluate`` (device: exclusive,
like profiling, so no evaluation overlaps another job's profile on that device). An
untuned run has no tuning stages. A device stage reaches the server of the device
resource it was granted (:class:`simpletvm.remote.rpc.DeviceGrant`).

The job lives in a worker process of its own (the scheduler's process backend): its
output goes to the run's log file, and its BenchmarkingContext is saved after each step
and when a stage fails. A failing stage reports its error as data; the sweep turns the
job's end into the run's row.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from scheduler.base import Job, Stage
from scheduler.tuning import TUNE, SimpleTVMJob, tuning_details

IMPORT, COMPILE, EVALUATE = "import", "compile", "evaluate"


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
    devices_here: bool = False  # the tracker's servers run on this machine (the sweep's own)
    save_module: bool = False  # save the build for the sweep's closing round, whatever `save`

    @property
    def job_id(self) -> str:
        return self.key

    def __call__(self) -> Job:
        return RunJob(self)


class RunJob(SimpleTVMJob):
    """The run's SimpleTVM, driven one stage at a time (stages fail and the context is
    saved as :class:`scheduler.tuning.SimpleTVMJob` says)."""

    device_steps = frozenset({EVALUATE})

    def __init__(self, spec: RunSpec) -> None:
        from simpletvm import BenchmarkingContext, SimpleTVM

        from .parameters import calls_for

        _write_output_to(spec.log)
        print(
            f"--- superb run {spec.key} attempt {spec.attempt} run_id {spec.run_id} "
            f"pid {os.getpid()}",
            flush=True,
        )
        self.spec = spec
        self.calls = calls_for(spec.params)
        options = dict(self.calls["context"])
        self.tuned = self.calls["autotune"] is not None
        tracker = spec.tracker if self.tuned else None
        context = BenchmarkingContext(
            options.pop("target"), store=spec.store, run_id=spec.run_id, **options
        )
        if tracker:
            context.device_key = spec.device_key
        super().__init__(
            SimpleTVM(context, rpc_tracker=tracker),
            [
                IMPORT,
                *([TUNE] if self.tuned else []),
                COMPILE,
                *([EVALUATE] if self.calls["evaluate"] is not None else []),
            ],
            tracker,
            spec.device_key,
            devices_here=spec.devices_here,
        )

    @property
    def job_id(self) -> str:
        return self.spec.key

    def stage_details(self) -> dict[str, Any]:
        """What the stage reports: the run's step, tasks and trials, best estimate (for the
        display), and with ``records_to_driver`` the records it measured."""
        details: dict[str, Any] = {
            "step": self.steps[0] if self.steps else "done",
            "pid": os.getpid(),
            "context_path": str(self.context.store.context_path(self.context.run_id)),
            **super().stage_details(),
        }
        if self.tuning is not None:
            details.update(tuning_details(self.tuning))
        return details

    # ---- the steps other than tuning ---------------------------------------------------
    def _import(self, stage: Stage) -> None:
        from simpletvm.tuning import TuningOptions

        self.simpletvm.from_model(**self.calls["from_model"])
        self.step_done()
        if self.tuned:
            options = TuningOptions.from_mapping(self.calls["autotune"])
            self.context.record_parameters("autotune", **options.to_dict())
            self.start_tuning(
                options, self.spec.records_to_driver, in_model=self.spec.params.get("in_model")
            )

    @property
    def timed_here(self) -> bool:
        """The module runs on the sweep's own device, which is this machine: it is built
        and timed here as its untuned twin is (SimpleTVM's pool, the faster thread count),
        not through a server (TVM's pool), so the two compare. A job whose records go to
        the driver (Ray) may run on another node: it is timed on the device's server."""
        return self.spec.devices_here and not self.spec.records_to_driver

    def _compile(self, stage: Stage) -> None:
        if self.timed_here:
            self.simpletvm.rpc_tracker = None  # tuned already: the rest runs here
        self.simpletvm.build(**self.calls["build"])
        if self.calls["save"] or self.spec.save_module:
            self.simpletvm.save()
        self.step_done()

    def _evaluate(self, stage: Stage) -> None:
        if self.tracker and not self.timed_here:  # evaluate() goes to the key's servers
            self.context.device_key = self.device.server_key
        self.simpletvm.evaluate(**self.calls["evaluate"])
        self.step_done()


def _write_output_to(log: str) -> None:
    """Send this process's output, Python's and native code's, to the run's log."""
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "ab", buffering=0) as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
