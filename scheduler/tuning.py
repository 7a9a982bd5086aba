"""The adapter that lets the scheduler drive SimpleTVM's TuningJob.

The rest of the scheduler knows nothing of TVM; this module imports SimpleTVM's tuning
only inside the worker process that builds the job, from a picklable
:class:`TuningJobSpec` (the driver imports ``simpletvm.remote.rpc``, which loads no TVM, to
name devices).
Each job profiles through the RPC tracker on servers of its device key. A profile stage
reaches the server of the device resource the scheduler granted it: a resource named
``<key>.<n>`` is the one server registered under that RPC key (:func:`rpc_devices`,
``LocalRPC(..., key_per_server=True)``); any other name stands for all servers of the
key, which the tracker hands out, and is exclusive only as the key's one resource
(:func:`simpletvm.remote.rpc.server_key`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.base import CLIENT, DEVICE, Job, Resource, Stage, StageResult, StageStatus
from scheduler.resources import device, device_role


def rpc_devices(key: str, count: int) -> list[Resource]:
    """``count`` devices of ``key``, each named by the RPC key its own server registers
    under (:func:`simpletvm.remote.rpc.device_keys`): a stage granted one profiles on that
    server and no other."""
    from simpletvm.remote.rpc import device_keys

    return [device(name, key) for name in device_keys(key, count)]


@dataclass(frozen=True)
class TuningJobSpec:
    """Everything needed to build one tuning job where it will run (a JobFactory)."""

    job_id: str
    model: str
    tracker: tuple[str, int]
    device_key: str
    target: str = "cpu"
    store: str | None = None
    run_id: str | None = None
    context_options: dict[str, Any] = field(default_factory=dict)
    model_options: dict[str, Any] = field(default_factory=dict)
    tuning: dict[str, Any] = field(default_factory=dict)
    records_to_driver: bool = False  # see :func:`record_writer`

    def __call__(self) -> Job:
        return TuningJobAdapter(self)


class TuningJobAdapter(Job):
    """A TuningJob seen through the scheduler's Job interface.

    Records go to the store's database as each update stage measures them, or, with
    ``records_to_driver``, back to the driver with the stage's outcome; when the last
    stage has run, the run's BenchmarkingContext is saved.
    """

    def __init__(self, spec: TuningJobSpec) -> None:
        from simpletvm import BenchmarkingContext, SimpleTVM
        from simpletvm.remote.rpc import DeviceGrant
        from simpletvm.tuning import TuningOptions

        self.spec = spec
        self.device = DeviceGrant(spec.device_key)
        context = BenchmarkingContext(spec.target, device_key=spec.device_key,
                                      store=spec.store, run_id=spec.run_id,
                                      **spec.context_options)
        self.simpletvm = SimpleTVM(context, rpc_tracker=spec.tracker).from_model(
            spec.model, **spec.model_options)
        self.tuning = self.simpletvm.tuning_job(TuningOptions(**spec.tuning), spec.tracker,
                                                self.device,
                                                buffer_records=spec.records_to_driver)

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    def next_stage(self) -> Stage | None:
        spec = self.tuning.next_stage()
        if spec is None:
            return None
        role = device_role(self.spec.device_key) if spec.on_device else CLIENT
        return Stage(spec.kind, role, spec.task, spec.iteration)

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        if stage.resource_kind == DEVICE:
            self.device.grant(resource_name)
        ran = self.tuning.run_stage()
        if (ran.kind, ran.task, ran.iteration) != (stage.kind, stage.task, stage.iteration):
            return StageResult(StageStatus.ERROR, f"ran {ran} but the scheduler asked for {stage}")
        if self.tuning.is_complete():
            self.simpletvm.finish_scheduled_tuning(self.tuning, self.spec.tracker,
                                                   self.spec.device_key)
            self.simpletvm.context.save()
        return StageResult(details=measured_records(self.tuning))

    def close(self) -> None:
        self.tuning.finalize()
        self.simpletvm.close()


def measured_records(tuning) -> dict[str, Any]:
    """A stage's details with the records its job measured, when they go to the driver."""
    from simpletvm.tuning.records import RecordBuffer

    records = tuning.records
    return {"records": records.drain()} if isinstance(records, RecordBuffer) else {}


def record_writer(store: str):
    """An ``on_stage`` listener for :meth:`Scheduler.run` that writes the records jobs
    return (``records_to_driver``) into ``store``'s database: the driver is its single
    writer, so jobs on other machines need no shared file system for records."""
    from simpletvm.tuning.record_files import open_records

    records = open_records(store)

    def write(job_id: str, record, details: dict[str, Any]) -> None:
        for workload_key, workload_json, rows, run_id, remeasured in details.get("records", ()):
            records.add(workload_key, workload_json, rows, run_id, remeasured)
    return write
