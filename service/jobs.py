"""A service job, built in its worker process: import the model, answer from the store's
records when they suffice (thesis 4.3: "what is known answers first"), else tune warm
from them (and, on the service's own devices after a search of a minute or more, time the
tuned kernels inside the model: :data:`scheduler.tuning.IN_MODEL`); then build and save
the module under the job's run id.

This module is imported by the scheduler's worker (a picklable :class:`ServiceJobSpec`
builds the job there), so an importer that crashes fails that job only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.base import Job, Stage
from scheduler.tuning import TUNE, SimpleTVMJob, tuning_details

IMPORT, SAVE = "import", "save"


@dataclass(frozen=True)
class ServiceJobSpec:
    """Everything a worker needs to build one service job (a JobFactory)."""

    job_id: str
    model: str
    store: str
    tracker: tuple[str, int] | None
    device_key: str
    target: str = "cpu"
    tuning: dict[str, Any] = field(default_factory=dict)
    latency_ms: float | None = None
    known_only: bool = False
    niceness: int = 10  # the job's CPU priority below the service's (see ServiceJob)
    devices_here: bool = False  # the tracker's servers run on this machine (the service's)

    def __call__(self) -> Job:
        return ServiceJob(self)


class ServiceJob(SimpleTVMJob):
    """Import the model, tune (unless the store's records already answer), then build
    from the store's records and save the module where the store keeps the run's modules.

    The import is a client stage like the tuning's, so the scheduler runs it beside the
    other jobs' stages and the trace shows it. The worker runs at a lower CPU priority
    than the service (``niceness``): status requests are answered first, and the
    devices' servers, which measure, keep the cores they need.
    """

    def __init__(self, spec: ServiceJobSpec) -> None:
        import os

        from simpletvm import BenchmarkingContext, SimpleTVM

        os.nice(spec.niceness)  # before the tuning's build workers, which inherit it
        self.spec = spec
        context = BenchmarkingContext(
            spec.target, device_key=spec.device_key, store=spec.store, run_id=spec.job_id
        )
        super().__init__(
            SimpleTVM(context, rpc_tracker=spec.tracker),
            [IMPORT, TUNE, SAVE],
            spec.tracker,
            spec.device_key,
            devices_here=spec.devices_here,
        )
        self.pid = os.getpid()
        self.known_ms: float | None = None
        self.answered_from_store = False

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    def _import(self, stage: Stage) -> None:
        from simpletvm.tuning import TuningOptions

        spec = self.spec
        self.simpletvm.from_model(spec.model)
        tuning = self.prepare_tuning(TuningOptions.from_mapping(spec.tuning))
        known_s = tuning.known_estimate_s()  # None: some task has no record
        self.known_ms = None if known_s is None else known_s * 1e3
        target_met = (
            spec.latency_ms is not None
            and self.known_ms is not None
            and self.known_ms <= spec.latency_ms
        )
        resumed = tuning.trials > 0
        self.answered_from_store = (
            self.known_ms is not None and (spec.known_only or target_met) and not resumed
        )
        if spec.known_only and not self.answered_from_store:
            tuning.finalize()
            raise ValueError(
                "known-only: the store has no records for some of this model's "
                "tasks on this target; submit it with a budget to tune it"
            )
        self.step_done()
        if self.answered_from_store:
            tuning.finalize()
            self.steps = [SAVE]
            return
        self.tuning = tuning
        if tuning.is_complete():
            self._finish_tuning()

    def _save(self, stage: Stage) -> None:
        self.simpletvm.build("global").save()
        self.step_done()

    def stage_details(self) -> dict[str, Any]:
        details: dict[str, Any] = {
            "pid": self.pid,
            "known_ms": self.known_ms,
            "answered_from_store": self.answered_from_store,
        }
        if self.tuning is not None:
            tuning = tuning_details(self.tuning)
            budget = tuning["trial_budget"]
            details["trials"] = tuning["trials"]
            details["estimate_ms"] = tuning["estimated_ms"]
            details["progress"] = min(1.0, tuning["trials"] / budget) if budget else None
        if not self.steps:
            details["module"] = str(self.simpletvm.store.module_dir(self.spec.job_id))
        return details
