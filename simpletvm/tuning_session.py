"""What autotune() runs: its budget (from its call), its progress display, the search (a
:class:`~simpletvm.tuning.job.TuningJob`), the round inside the model that follows it
(:class:`~simpletvm.in_model_round.InModelRound`), and where the wait went.

A scheduler drives the same job stage by stage instead (``scheduler.tuning``); it
records the finished job here too (:func:`finish_scheduled_tuning`).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simpletvm.context import StepStatus
from simpletvm.flow import FlowState, require
from simpletvm.in_model_round import InModelRound

if TYPE_CHECKING:
    from simpletvm.remote.rpc import DeviceGrant
    from simpletvm.tuning.options import TuningOptions


class TuningSession:
    """One autotune() of ``stvm`` with ``options``, its budget counted from ``started``
    (the clock's seconds). ``in_model`` as autotune() takes it; ``progress``: True for
    the job's progress on standard error, or a
    :class:`~simpletvm.progress.TuningProgress` to use as it is."""

    def __init__(
        self,
        stvm,
        options: TuningOptions,
        started: float,
        *,
        in_model: bool | None = None,
        progress: Any = False,
    ):
        self.stvm = stvm
        self.options = options
        self.started = started
        self.in_model_round = InModelRound(stvm, options.minutes, in_model)
        self.display = self._display(progress)

    def run(self, on_stage=None) -> None:
        """The search, then the round inside the model when it is due; ``on_stage(job)``
        is called after every stage."""
        stvm, display = self.stvm, self.display
        reserve_s = self.in_model_round.reserve_s
        with display if display is not None else nullcontext():
            with stvm.context.step("autotune") as step, self._profiling_tracker() as tracker:
                stvm.context.record_parameters("autotune", **self.options.to_dict())
                address = tracker.address if tracker is not None else None
                device_key = stvm.context.device_key or (tracker.key if tracker else "local")
                job = tuning_job(
                    stvm,
                    self.options,
                    address,
                    device_key,
                    after_s=reserve_s,
                    budget_started=self.started,
                )
                if display is None:
                    job.run(on_stage)
                else:
                    from simpletvm.progress import combine

                    display.on_stage(job)  # the tasks found, before the first stage's wait
                    job.run(combine(on_stage, display.on_stage))
                record_tuning(stvm, job, address, device_key)
                step["trials"] = job.trials
                if reserve_s:
                    step["kept_for_in_model_s"] = reserve_s
            inside_s = None
            if self.in_model_round.due(time.time() - self.started):
                self.in_model_round.after_search(display)
                inside_s = stvm.context.steps[-1]["duration_s"]
            self._record_spent(inside_s)

    def _display(self, progress: Any):
        if not progress:
            return None
        from simpletvm.progress import TuningProgress

        if isinstance(progress, TuningProgress):
            return progress
        model = self.stvm.model
        source = str(model.source) if model is not None else "model"
        return TuningProgress(Path(source).name or source, self.options.minutes)

    def _profiling_tracker(self):
        """The user's tracker, or none: profiling then happens on this machine."""
        from simpletvm.remote.rpc import RemoteTracker

        stvm = self.stvm
        if stvm.rpc_tracker is not None:
            return RemoteTracker(*stvm.rpc_tracker, key=stvm.context.device_key)
        return nullcontext()

    def _record_spent(self, inside_s: float | None) -> None:
        """Where autotune()'s wait went, in its summary and the context (and the
        display's last line): the budget covers it all."""
        from simpletvm.progress import spent_parts, spent_text

        stvm, minutes = self.stvm, self.options.minutes
        parts = spent_parts(self.started, time.time(), stvm.context.stages, inside_s)
        stvm.tuning_summary["spent_s"] = stvm.context.tuning["spent_s"] = parts
        if self.display is not None:
            self.display.finish(spent_text(parts, None if minutes is None else minutes * 60))


def tuning_job(
    stvm,
    options: TuningOptions,
    tracker: tuple[str, int] | None = None,
    device_key: str | DeviceGrant = "local",
    buffer_records: bool = False,
    after_s: float = 0.0,
    budget_started: float | None = None,
):
    """The TuningJob autotune() runs for ``stvm``'s model, profiling on ``device_key``
    servers of ``tracker`` (None: on this machine, in a local runner); a scheduler drives
    the same job stage by stage instead, passing a :class:`~.rpc.DeviceGrant` as
    ``device_key`` that it points at each profile stage's device. ``buffer_records``: the
    job's records wait in ``job.records`` (a
    :class:`~.tuning.record_buffer.RecordBuffer`, also ``stvm.record_buffer``) for the
    caller to drain and hand to the store's single writer. ``after_s``: seconds of a
    ``minutes`` budget kept for what follows the job; ``budget_started``: when the budget
    began (default: at the job's first stage)."""
    require(stvm.state, "tuning_job()", FlowState.IMPORTED, FlowState.BUILT)
    from simpletvm.remote.rpc import DeviceGrant
    from simpletvm.remote.runner import DeviceRunner, rpc_runner
    from simpletvm.tuning.job import TuningJob
    from simpletvm.tuning.record_buffer import RecordBuffer
    from simpletvm.tuning.record_files import open_records
    from simpletvm.tuning.records import tvm_target_key

    target, context = stvm.target, stvm.context
    device = device_key if isinstance(device_key, DeviceGrant) else DeviceGrant(device_key)
    runner = (
        DeviceRunner(tracker, device, partial(rpc_runner, options, target.device_type, tracker))
        if tracker is not None
        else None
    )
    records = open_records(stvm.store.root)
    if buffer_records:  # build(records="run") reads the run's records through it too
        stvm.record_buffer = records = RecordBuffer(records.path)
    job = TuningJob(
        stvm.conv_forms,
        target,
        options,
        records=records,
        runner=runner,
        device_resource=device,
        device_check=runner.require_device if runner is not None else None,
        context=context,
        num_threads=context.num_threads,
        run_id=context.run_id,
        cost_model_file=stvm.store.cost_model_path(tvm_target_key(target.tvm_target())),
        after_s=after_s,
        budget_started=budget_started,
    )
    context.model["num_tasks"] = len(job.tasks)
    return job


def record_tuning(stvm, job, tracker: tuple[str, int] | None, device_key: str) -> None:
    """Keep a finished job's summary in ``stvm`` and its context."""
    stvm.tuning_summary = job.summary()
    stvm.context.tuning = {
        **stvm.tuning_summary,
        "rpc_tracker": list(tracker) if tracker else None,
        "device_key": device_key,
        "runner": "rpc" if tracker else "local",
        "cache_mode": job.cache_mode,
        "model_bytes": job.model_bytes,
    }


def finish_scheduled_tuning(stvm, job, tracker: tuple[str, int] | None, device_key: str) -> float:
    """Finalize a job that a scheduler drove stage by stage (:func:`tuning_job`) and record it as the run's
    autotune step, spanning its stages; returns that span in seconds (the search's time,
    as :meth:`InModelRound.due` takes it)."""
    job.finalize()
    stages = stvm.context.stages
    start = stages[0]["start"] if stages else time.time()
    end = stages[-1]["end"] if stages else start
    stvm.context.steps.append(
        {
            "step": "autotune",
            "status": StepStatus.OK,
            "scheduled": True,
            "start": start,
            "end": end,
            "duration_s": end - start,
            "trials": job.trials,
        }
    )
    record_tuning(stvm, job, tracker, device_key)
    return end - start
