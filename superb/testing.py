"""Fakes for tests: run jobs that stand in for SimpleTVM in a sweep's scheduler.

``run_sweep(plan, job_factory=superb.testing.FakeRunSpec, backend=...)`` runs sweeps in
a fraction of a second per run, with the stages and resources of real runs: ``import``
and ``compile`` on the client, two tuning iterations (select, build, profile, update)
for a tuned run, ``evaluate`` on the run's device. A run whose ``model`` parameter says
so ends the way it names, in its first stage: ``"crash"`` dies of SIGSEGV, ``"exit"``
exits, ``"fail"`` reports a failure, ``"hang"`` sleeps until stopped; anything else
succeeds. A model named ``"<name>@<seconds>"`` makes each stage sleep that long.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass
from pathlib import Path

from scheduler.base import CLIENT, Job, Stage, StageResult, StageStatus

from .run_job import RunSpec

STAGE_S = 0.01
TUNING = [("select", False), ("build", False), ("profile", True), ("update", False)]


@dataclass(frozen=True)
class FakeRunSpec(RunSpec):
    """A :class:`superb.run_job.RunSpec` that builds a :class:`FakeRunJob`."""

    def __call__(self) -> Job:
        return FakeRunJob(self)


class FakeRunJob(Job):
    def __init__(self, spec: FakeRunSpec) -> None:
        self.spec = spec
        name = Path(str(spec.params.get("model"))).name  # superb makes model paths absolute
        self.model, _, seconds = name.partition("@")
        self.stage_s = float(seconds) if seconds else STAGE_S
        device = f"device:{spec.device_key}"
        tuning = [
            Stage(stage_name, device if on_device else CLIENT, 0, iteration)
            for iteration in range(2)
            for stage_name, on_device in TUNING
        ]
        self.stages = [
            Stage("import", CLIENT),
            *(tuning if spec.params.get("autotune", True) else []),
            Stage("compile", CLIENT),
            Stage("evaluate", device),
        ]
        Path(spec.log).parent.mkdir(parents=True, exist_ok=True)
        Path(spec.log).write_text(f"fake run {spec.key} pid {os.getpid()}\n")

    @property
    def job_id(self) -> str:
        return self.spec.key

    def next_stage(self) -> Stage | None:
        return self.stages[0] if self.stages else None

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        if self.model == "crash":
            ctypes.string_at(0)  # a segfault, as a TVM crash would be
        if self.model == "exit":
            os._exit(3)
        if self.model == "hang":
            time.sleep(3600)
        if self.model == "fail":
            return StageResult(
                StageStatus.ERROR,
                "ModelImportError: a fake failure",
                details={"step": stage.name, "pid": os.getpid()},
            )
        time.sleep(self.stage_s)
        self.stages.pop(0)
        return StageResult(
            details={"step": self.stages[0].name if self.stages else "done", "pid": os.getpid()}
        )
