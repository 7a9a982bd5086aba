"""The adapter that lets the scheduler drive SimpleTVM's TuningJob.

:class:`SimpleTVMJob` is a SimpleTVM run as a scheduler job, tuning stages included;
:class:`TuningJobAdapter` (tuning only) and superb's runs are made of it.
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

import sys
import traceback
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


TUNE = "tune"
"""The step of a :class:`SimpleTVMJob` whose stages are those of its TuningJob."""
IN_MODEL = "in_model"
"""The step after ``tune`` that times the tuned kernels inside the built model, on the
device, when the job's :class:`~simpletvm.in_model_round.InModelRound` is due."""


class SimpleTVMJob(Job):
    """A SimpleTVM run as a scheduler job: steps in order, one of them, ``tune``, the
    stages of the run's TuningJob.

    The scheduler drives SimpleTVM's tuning in two shapes, a tuning job on its own
    (:class:`TuningJobAdapter`) and superb's run from import to evaluation
    (``superb.run_job.RunJob``). Both are this class, so a stage behaves the same in
    each:

    - a stage other than the one :meth:`next_stage` names is not run: it ends as an
      ERROR result saying what was asked and what was next;
    - a stage that raises ends as an ERROR result with the error's type and text as
      ``error`` (the traceback goes to stderr), its ``details`` as on success: a job
      that sends its records to the driver sends those the stage measured;
    - the run's BenchmarkingContext is saved when a stage fails and when a step ends,
      tuning included, so a run that fails or dies later keeps what it measured.

    A subclass lists its steps in :attr:`steps`, runs each step other than ``tune`` in
    a method ``_<step>(stage)`` that calls :meth:`step_done` at its end, and names the
    steps that run on the device in :attr:`device_steps` (the others run on the client).
    A finished tuning may add the ``in_model`` step after ``tune`` (a device step).

    ``devices_here``: the tracker's devices are servers on this machine (the ones superb
    and the service start), so the tuned kernels can be timed inside the model here.
    """

    device_steps: frozenset[str] = frozenset()

    def __init__(
        self,
        simpletvm,
        steps: list[str],
        tracker: tuple[str, int] | None,
        device_key: str,
        devices_here: bool = False,
    ) -> None:
        from simpletvm.remote.rpc import DeviceGrant

        self.simpletvm = simpletvm
        self.context = simpletvm.context
        self.steps = steps
        self.tracker = tracker
        self.device_key = device_key
        self.device = DeviceGrant(device_key)
        self.devices_here = devices_here
        self.tuning = None
        self.in_model_round = None  # the round inside the model after the tuning

    def prepare_tuning(self, options, buffer_records: bool = False, in_model: bool | None = None):
        """The run's TuningJob (:func:`simpletvm.tuning_session.tuning_job`), each of its
        profile stages reaching the device the scheduler granted it, and the round inside
        the model that may follow it, whose time a ``minutes`` budget keeps. ``in_model``
        as for autotune(); a job whose records go to the driver (``buffer_records``) is
        never timed inside the model: its store is elsewhere."""
        from simpletvm.in_model_round import InModelRound
        from simpletvm.tuning_session import tuning_job

        self.in_model_round = InModelRound(
            self.simpletvm,
            options.minutes,
            False if buffer_records else in_model,
            devices_here=self.devices_here,
        )
        return tuning_job(
            self.simpletvm,
            options,
            self.tracker,
            self.device,
            buffer_records=buffer_records,
            after_s=self.in_model_round.reserve_s,
        )

    def start_tuning(self, options, buffer_records: bool, in_model: bool | None = None) -> None:
        """Start the run's tuning (:meth:`prepare_tuning`); a run resumed after its last
        tuning stage finishes its tuning here."""
        self.tuning = self.prepare_tuning(options, buffer_records, in_model)
        if self.tuning.is_complete():
            self._finish_tuning()

    def next_stage(self) -> Stage | None:
        if not self.steps:
            return None
        step = self.steps[0]
        if step == TUNE:
            spec = self.tuning.next_stage()
            return Stage(spec.kind, self._role(spec.on_device), spec.task, spec.iteration)
        return Stage(step, self._role(step in self.device_steps or step == IN_MODEL))

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        expected = self.next_stage()
        if stage != expected:
            return self._failed(f"asked to run {stage}, but the next stage is {expected}")
        if stage.resource_kind == DEVICE:
            self.device.grant(resource_name)
        try:
            getattr(self, f"_{self.steps[0]}")(stage)
        except Exception as error:  # noqa: BLE001 - a failed stage is a result, not a crash
            traceback.print_exc()
            return self._failed(_error_text(error))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return StageResult(details=self.stage_details())

    def stage_details(self) -> dict[str, Any]:
        """What a stage reports to the driver: with ``records_to_driver``, the records
        it measured."""
        return measured_records(self.tuning) if self.tuning is not None else {}

    def step_done(self) -> None:
        """End the current step and save the context with what it added."""
        self.steps.pop(0)
        self.context.save()

    def close(self) -> None:
        """Release the tuning's build workers and buffered records, and the session's
        temporary files."""
        if self.tuning is not None:
            self.tuning.finalize()
        self.simpletvm.close()

    def _tune(self, stage: Stage) -> None:
        self.tuning.run_stage()
        if self.tuning.is_complete():
            self._finish_tuning()

    def _finish_tuning(self) -> None:
        from simpletvm.tuning_session import finish_scheduled_tuning

        searched_s = finish_scheduled_tuning(
            self.simpletvm, self.tuning, self.tracker, self.device_key
        )
        if self.in_model_round.due(searched_s):
            self.steps.insert(1, IN_MODEL)
        self.step_done()

    def _in_model(self, stage: Stage) -> None:
        self.in_model_round.after_search()
        self.step_done()

    def _failed(self, error: str) -> StageResult:
        self.context.save()
        return StageResult(StageStatus.ERROR, error, details=self.stage_details())

    def _role(self, on_device: bool) -> str:
        return device_role(self.device_key) if on_device else CLIENT


class TuningJobAdapter(SimpleTVMJob):
    """A TuningJob seen through the scheduler's Job interface: the model is imported
    where the job is built, and its stages are the tuning's.

    Records go to the store's database as each update stage measures them, or, with
    ``records_to_driver``, back to the driver with the stage's outcome.
    """

    def __init__(self, spec: TuningJobSpec) -> None:
        from simpletvm import BenchmarkingContext, SimpleTVM
        from simpletvm.tuning import TuningOptions

        self.spec = spec
        context = BenchmarkingContext(
            spec.target,
            device_key=spec.device_key,
            store=spec.store,
            run_id=spec.run_id,
            **spec.context_options,
        )
        simpletvm = SimpleTVM(context, rpc_tracker=spec.tracker).from_model(
            spec.model, **spec.model_options
        )
        super().__init__(simpletvm, [TUNE], spec.tracker, spec.device_key)
        self.start_tuning(TuningOptions.from_mapping(spec.tuning), spec.records_to_driver)

    @property
    def job_id(self) -> str:
        return self.spec.job_id


def tuning_details(tuning) -> dict[str, Any]:
    """What a stage tells of its job's tuning: tasks (and those measured so far), trials,
    the trial budget (the total, or the per-task cap over the tasks, whichever is
    smaller; None when only ``minutes`` bound the job), the minutes, and the model's best
    estimate (ms; None before every task has a record)."""
    from simpletvm.tuning.options import UNCAPPED_TRIALS

    summary, options = tuning.summary(), tuning.options
    per_task = options.per_task_trials()
    budgets = [
        budget
        for budget in (
            options.total_trials,
            None if per_task >= UNCAPPED_TRIALS else per_task * summary["num_tasks"],
        )
        if budget
    ]
    estimate_s = summary["estimated_latency_s"]
    return {
        "num_tasks": summary["num_tasks"],
        "trials": summary["trials"],
        "tasks_measured": sum(1 for task in summary["tasks"] if task["trials"]),
        "trial_budget": min(budgets) if budgets else None,
        "minutes": options.minutes,
        "estimated_ms": estimate_s * 1e3 if estimate_s else None,
    }


def measured_records(tuning) -> dict[str, Any]:
    """A stage's details with the records its job measured, when they go to the driver."""
    from simpletvm.tuning.record_buffer import RecordBuffer

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


def _error_text(error: BaseException, limit: int = 500) -> str:
    """A failed stage's error: type and text on one line, cut to ``limit`` characters."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
