"""SimpleTVM: the fluent flow from_model -> autotune -> build -> save -> load -> run -> evaluate.

Each step records its wall time and parameters in the BenchmarkingContext, and the flow
is enforced: a step called before the one it needs raises a FlowError naming it.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simpletvm.context import BenchmarkingContext, StepStatus
from simpletvm.errors import FlowError, IncompatibleModuleError, RunNotFoundError, SimpleTVMError
from simpletvm.hostinfo import host_fingerprint
from simpletvm.models import ImportedModel, TensorSpec, import_model
from simpletvm.runtime.accuracy import check_tolerance, compare
from simpletvm.runtime.loaded import as_numpy
from simpletvm.runtime.reference import SourceOutputs
from simpletvm.store import atomic_write_json
from simpletvm.targets import ResolvedTarget, resolve_target, use_runtime_threads
from simpletvm.tuning.options import TuningOptions
from simpletvm.tuning.record_files import open_records

if TYPE_CHECKING:
    from simpletvm.remote.rpc import DeviceGrant

MODULE_FILE = "model.so"
METADATA_FILE = "metadata.json"
# autotune() times tuned kernels inside the model after a search (or within a minutes
# budget) this long: the round's two builds and their timing take tens of seconds
IN_MODEL_AFTER_S = 60.0
# what a minutes budget keeps for that round, at most half the budget: a base and a share
# per kernel of the model, for the round builds the model twice (and a mix of both at
# times), checking each kernel's new schedules against TVM's naive ones the first time
# (compiler/build.py). On a 2-core host the round took 14 s on a 5-kernel CNN in a fresh
# store and 34 s on MobileNetV2 (0.35, 64x64: 33 kernels, its defaults checked before)
IN_MODEL_BASE_S = 10.0
IN_MODEL_PER_KERNEL_S = 1.0


class FlowState(StrEnum):
    """Where a SimpleTVM is in its flow: a closed set; each step checks it may run in
    the current state (:meth:`SimpleTVM._require`) and moves only along ``NEXT``."""

    NEW = "new"
    IMPORTED = "imported"  # from_model(): a Relax module to tune or build
    BUILT = "built"  # build(): a module compiled here, to save, run or evaluate
    LOADED = "loaded"  # load(): a saved module, compiled already


# the states each state may move to: importing and loading start over from anywhere
NEXT = {
    FlowState.NEW: {FlowState.IMPORTED, FlowState.LOADED},
    FlowState.IMPORTED: {FlowState.IMPORTED, FlowState.BUILT, FlowState.LOADED},
    FlowState.BUILT: {FlowState.IMPORTED, FlowState.BUILT, FlowState.LOADED},
    FlowState.LOADED: {FlowState.IMPORTED, FlowState.LOADED},
}


class SimpleTVM:
    """Import, tune, build, save, load, run and evaluate a model on one target.

    Args:
        context: where this execution is recorded (default: a CPU context).
        rpc_tracker: ``(host, port)`` of a TVM RPC tracker whose servers, registered
            under ``context.device_key``, are the target device: autotune() profiles
            candidates there, and run() and evaluate() send the module there (exported
            once per build, uploaded and loaded by a server at each call). Without one,
            everything runs on this machine, autotune() profiling in a local runner
            process (no RPC session per candidate: a third of the profiling cost).
    """

    def __init__(
        self, context: BenchmarkingContext | None = None, rpc_tracker: tuple[str, int] | None = None
    ):
        self.context = context or BenchmarkingContext()
        self.rpc_tracker = rpc_tracker
        if rpc_tracker is not None and not self.context.device_key:
            raise SimpleTVMError(
                "an RPC tracker needs the device key its servers register under: "
                "BenchmarkingContext(target, device_key='...')"
            )
        self.target: ResolvedTarget = resolve_target(
            self.context.target, self.context.cpu_arch, self.context.num_threads
        )
        use_runtime_threads(self.target.host_cores())
        self.context.target_spec = self.target.spec
        self.model: ImportedModel | None = None
        self.state = FlowState.NEW
        self._forms = None  # the imported model lowered: ConvForms
        self._executable = None
        self._vm = None
        self._library_file: Path | None = None  # the exported module, once exported
        self._export_dir = None  # a temporary directory holding it when not saved
        self._record_buffer = None  # a buffered tuning job's records (tuning_job())
        self._built_from: str | None = None
        self.tuning_summary: dict[str, Any] | None = None
        self.in_model = None  # choose_in_model()'s InModelTiming
        self.last_evaluation: dict[str, Any] | None = None
        self._source = None  # the model's SourceOutputs: its framework's answers

    def __repr__(self) -> str:
        return f"SimpleTVM(run_id={self.context.run_id!r}, target={self.target.kind!r})"

    @property
    def store(self):
        return self.context.store

    @property
    def vm(self):
        """The Relax VirtualMachine of the built or loaded module (to call its
        functions directly, e.g. ``stvm.vm["main"](tensor)``)."""
        self._require("vm", FlowState.BUILT, FlowState.LOADED)
        return self._vm

    @property
    def fused_module(self):
        """The imported model after lowering, each layer in its default form: what a
        TuningJob built by hand takes (tuning also takes the tasks of contested layers'
        other forms, :attr:`conv_forms`; build() compiles each layer's fastest)."""
        self._require("fused_module", FlowState.IMPORTED, FlowState.BUILT)
        return self._forms.default

    @property
    def conv_forms(self):
        """The model's :class:`~simpletvm.compiler.conv_forms.ConvForms`: its lowering in every
        form tuning measures."""
        self._require("conv_forms", FlowState.IMPORTED, FlowState.BUILT)
        return self._forms

    # ---- steps ----------------------------------------------------------------------
    def from_model(
        self,
        source: Any,
        *,
        output_name: str | list[str] | None = None,
        output_size: int | None = None,
        input_shapes: Any = None,
        batch_size: int = 1,
        format: str | None = None,  # noqa: A002
        signature: str = "serving_default",
        lowering: dict[str, Any] | None = None,
        **options: Any,
    ) -> SimpleTVM:
        """Import a model: a built-in name (``"mobilenetv2"``, ``"resnet18"``...), a
        SavedModel directory, a frozen ``.pb`` (with ``output_name``), a ``.keras``/``.h5``
        file, a TF Hub handle, a ``.tflite`` or ``.onnx`` file, or a Keras/ONNX object.

        ``input_shapes`` fixes unknown dimensions; ``options`` configure built-in models
        (``image_size``, ``classes``, ``seed``, ``alpha``); ``lowering`` passes options to
        :func:`simpletvm.compiler.lowering.fuse` (``winograd``, ``layout``,
        ``separate_residual_pads``, ``window_pads``).
        """
        from simpletvm.compiler.conv_forms import ConvForms

        with self.context.step("from_model", source=str(source)) as step:
            self.context.record_parameters(
                "from_model",
                source=str(source),
                output_name=output_name,
                output_size=output_size,
                input_shapes=input_shapes,
                batch_size=batch_size,
                format=format,
                signature=signature,
                lowering=lowering,
                **options,
            )
            model = import_model(
                source,
                format=format,
                output_name=output_name,
                output_size=output_size,
                input_shapes=input_shapes,
                batch_size=batch_size,
                signature=signature,
                cache_dir=self.store.zoo_dir,
                **options,
            )
            self.model = model
            self._source = SourceOutputs(model)
            self._forms = ConvForms(model.mod, self.target, **(lowering or {}))
            self._executable = self._vm = None
            self._built_from = None
            self._enter(FlowState.IMPORTED)
            self.context.model = model.describe()
            step["format"] = model.format
        return self

    def autotune(
        self,
        trials: int | None = None,
        *,
        total_trials: int | None = None,
        minutes: float | None = None,
        timeout: float | None = None,
        candidates_per_iteration: int | None = None,
        transfer_learning: bool = True,
        early_stopping: int | None = None,
        search_strategy: str = "evolutionary",
        cost_model: str = "xgb",
        seed: int | None = None,
        on_stage: Callable | None = None,
        progress: Any = False,
        in_model: bool | None = None,
        **search: Any,
    ) -> SimpleTVM:
        """Tune every task of the model with MetaSchedule (optional before build()).

        ``trials`` caps each task (default 64, or no cap when ``total_trials`` or
        ``minutes``, wall clock, bound the whole job); see :class:`TuningOptions` for
        every parameter. ``on_stage(job)`` is
        called after every stage with the :class:`~simpletvm.tuning.job.TuningJob`
        (``trials``, ``progress``, ``summary()``), for progress displays.
        ``progress=True`` shows the job's progress on standard error as the ``simpletvm``
        command does (a live line on a terminal, a plain line now and then elsewhere);
        a :class:`~simpletvm.progress.TuningProgress` given instead is used as it is.
        ``in_model``: after the search, time each tuned kernel against the schedule
        chosen before it inside the model (:meth:`choose_in_model`); by default when the
        model runs on this machine's CPU and the search took (or ``minutes`` gives it) a
        minute or more. A ``minutes`` budget covers autotune()'s whole wait from its call:
        finding the tasks, the search, its closing round and the round inside the model,
        whose time it keeps (:meth:`in_model_reserve_s`): the search ends that much
        earlier. Where the time went is in ``tuning_summary["spent_s"]``.
        """
        budget_started = time.time()
        self._require("autotune()", FlowState.IMPORTED, FlowState.BUILT)
        options = TuningOptions.from_mapping(
            dict(
                trials=trials,
                total_trials=total_trials,
                minutes=minutes,
                timeout=timeout,
                candidates_per_iteration=candidates_per_iteration,
                transfer_learning=transfer_learning,
                early_stopping=early_stopping,
                search_strategy=search_strategy,
                cost_model=cost_model,
                seed=seed,
                **search,
            )
        )
        after_s = self.in_model_reserve_s(minutes, in_model)
        display = None
        if progress:
            from simpletvm.progress import TuningProgress

            display = (
                progress
                if isinstance(progress, TuningProgress)
                else TuningProgress(self._display_name(), minutes)
            )
        with display if display is not None else nullcontext():
            with self.context.step("autotune") as step, self._profiling_tracker() as tracker:
                self.context.record_parameters("autotune", **options.to_dict())
                address = tracker.address if tracker is not None else None
                device_key = self.context.device_key or (tracker.key if tracker else "local")
                job = self.tuning_job(
                    options, address, device_key, after_s=after_s, budget_started=budget_started
                )
                if display is None:
                    job.run(on_stage)
                else:
                    from simpletvm.progress import combine

                    display.on_stage(job)  # the tasks found, before the first stage's wait
                    job.run(combine(on_stage, display.on_stage))
                self.record_tuning(job, address, device_key)
                step["trials"] = job.trials
                if after_s:
                    step["kept_for_in_model_s"] = after_s
            inside_s = None
            if self.in_model_due(in_model, minutes, time.time() - budget_started):
                self.time_in_model_after_search(strict=in_model is True, display=display)
                inside_s = self.context.steps[-1]["duration_s"]
            self._record_spent(budget_started, minutes, inside_s, display)
        return self

    def _record_spent(self, started: float, minutes: float | None, inside_s, display) -> None:
        """Where autotune()'s wait went, in its summary and the context (and the
        display's last line): the budget covers it all."""
        from simpletvm.progress import spent_parts, spent_text

        parts = spent_parts(started, time.time(), self.context.stages, inside_s)
        self.tuning_summary["spent_s"] = self.context.tuning["spent_s"] = parts
        if display is not None:
            display.finish(spent_text(parts, None if minutes is None else minutes * 60))

    def in_model_reserve_s(
        self, minutes: float | None, in_model: bool | None = None, *, devices_here: bool = False
    ) -> float:
        """Seconds a ``minutes`` budget keeps for the round inside the model that follows
        its search (0: none is planned); ``in_model`` and ``devices_here`` as for
        :meth:`in_model_due`."""
        if minutes is None or not self._targets_this_cpu(devices_here):
            return 0.0  # no budget to keep it in, or a round this machine cannot time
        if not self.in_model_due(in_model, minutes, 0.0, devices_here=devices_here):
            return 0.0
        import tvm

        kernels = sum(
            isinstance(func, tvm.tirx.PrimFunc) for _, func in self._forms.default.functions_items()
        )
        return min(IN_MODEL_BASE_S + IN_MODEL_PER_KERNEL_S * kernels, minutes * 30)

    def in_model_due(
        self,
        in_model: bool | None,
        minutes: float | None,
        searched_s: float,
        *,
        devices_here: bool = False,
    ) -> bool:
        """Whether a search (of ``minutes``, that took ``searched_s``) is followed by the
        round inside the model: as ``in_model`` says, else when the model runs on this
        machine's CPU and the budget or the search was a minute or more.
        ``devices_here``: the RPC tracker's devices are servers on this machine."""
        if in_model is not None:
            return in_model
        long_enough = searched_s >= IN_MODEL_AFTER_S or (
            minutes is not None and minutes * 60 >= IN_MODEL_AFTER_S
        )
        return long_enough and self._targets_this_cpu(devices_here)

    def time_in_model_after_search(
        self, *, strict: bool, display=None, devices_here: bool = False
    ) -> None:
        """The round inside the model that follows a search (autotune's, or a scheduler
        job's step), told on a progress ``display`` if given; when not ``strict`` (the
        round was not asked for), a worker that cannot time warns instead of raising:
        the search's records are in the store either way. ``devices_here`` as for
        :meth:`choose_in_model`."""
        from simpletvm.runtime.in_situ import InSituTimingFailed

        if display is not None:
            display.then("timing the tuned kernels inside the model")
        try:
            self.choose_in_model("run", devices_here=devices_here)
        except InSituTimingFailed as error:
            if strict:
                raise
            warnings.warn(
                f"the tuned kernels were not timed inside the model ({error}); "
                "build() applies every record",
                stacklevel=3,
            )
            if display is not None:
                display.then("not timed inside the model")
            return
        if display is not None:
            from simpletvm.progress import ms_text

            kernels = ms_text(self.tuning_summary["estimated_latency_s"])
            display.then(
                f"timed inside the model: {ms_text(self.in_model.chosen_model_ms / 1e3)} ms, "
                f"the model as a whole (its kernels timed alone: {kernels} ms)"
            )

    def choose_in_model(self, records: str = "run", *, devices_here: bool = False) -> SimpleTVM:
        """Time each task's fastest record against the schedule chosen before it (at
        first its default schedule) inside the model built here, and keep the choices in
        the store: build() then applies a record only where it ran faster there, by more
        than the timing's margin. ``records`` as for build(). autotune() does this after
        a search of a minute or more on this machine's CPU. ``devices_here``: the RPC
        tracker's devices are servers on this machine (those superb and the service
        start), so the model runs on this CPU all the same."""
        self._require("choose_in_model()", FlowState.IMPORTED, FlowState.BUILT)
        if not self._targets_this_cpu(devices_here):
            raise SimpleTVMError(
                "choose_in_model() times kernels inside the model on this machine's CPU; "
                f"the target ({self.target.kind}) or an RPC tracker puts the model elsewhere: "
                "build there with the records as they are"
            )
        from simpletvm.tuning.database import records_database
        from simpletvm.tuning.in_model import choose_in_model

        database = records_database(
            records, self._records_for_build(), self.target.tvm_target(), self.context.run_id
        )
        with self.context.step("in_model", records=records) as step:
            timing = choose_in_model(
                self._forms,
                self.target,
                database,
                [(list(spec.shape), spec.dtype) for spec in self.model.inputs],
                # on the threads the build will run on: pinned, else chosen as it chooses
                threads=self.context.num_threads or self.target.host_cores(),
                choose_threads=self.context.num_threads is None,
            )
            step["kernels"] = len(timing.findings)
            step["threads"] = timing.threads
            step["incumbents_kept"] = [f.task for f in timing.kept]
            step["challengers_model_ms"] = timing.challengers_model_ms
            step["incumbents_model_ms"] = timing.incumbents_model_ms
            step["chosen_model_ms"] = timing.chosen_model_ms
            step["kept_as_a_whole"] = timing.kept_as_a_whole
            step["unseen_kernels"] = timing.unseen
            step["mixed_model_ms"] = timing.mixed_model_ms
            step["mixed_against_ms"] = timing.mixed_against_ms
            step["form_switches"] = timing.form_switches
        self.in_model = timing
        if self.tuning_summary is not None and records == "run":
            # the promise: what the module built from these findings runs in, here
            self.tuning_summary["in_model_latency_s"] = timing.chosen_model_ms / 1e3
            self.context.tuning["in_model_latency_s"] = timing.chosen_model_ms / 1e3
        return self

    def _targets_this_cpu(self, devices_here: bool = False) -> bool:
        """The model runs on this machine's CPU: not another device, not through RPC
        unless the tracker's devices are servers on this machine (``devices_here``)."""
        return (
            self.target.device_type == "cpu"
            and self.target.runs_here
            and (self.rpc_tracker is None or devices_here)
        )

    def _display_name(self) -> str:
        """The model as a progress line names it: a file's name, or the name given."""
        source = str(self.model.source) if self.model is not None else "model"
        return Path(source).name or source

    def tuning_job(
        self,
        options: TuningOptions,
        tracker: tuple[str, int] | None = None,
        device_key: str | DeviceGrant = "local",
        buffer_records: bool = False,
        after_s: float = 0.0,
        budget_started: float | None = None,
    ):
        """The TuningJob autotune() runs, profiling on ``device_key`` servers of
        ``tracker`` (None: on this machine, in a local runner); a scheduler drives the
        same job stage by stage instead, passing a :class:`~.rpc.DeviceGrant` as
        ``device_key`` that it points at each profile stage's device. ``buffer_records``:
        the job's records wait in ``job.records`` (a
        :class:`~.tuning.record_buffer.RecordBuffer`) for the caller to drain and hand to the
        store's single writer. ``after_s``: seconds of a ``minutes`` budget kept for what
        follows the job; ``budget_started``: when the budget began (default: at the
        job's first stage)."""
        self._require("tuning_job()", FlowState.IMPORTED, FlowState.BUILT)
        from simpletvm.remote.rpc import DeviceGrant
        from simpletvm.remote.runner import DeviceRunner, rpc_runner
        from simpletvm.tuning.job import TuningJob
        from simpletvm.tuning.record_buffer import RecordBuffer
        from simpletvm.tuning.records import tvm_target_key

        device = device_key if isinstance(device_key, DeviceGrant) else DeviceGrant(device_key)
        runner = (
            DeviceRunner(
                tracker, device, partial(rpc_runner, options, self.target.device_type, tracker)
            )
            if tracker is not None
            else None
        )
        records = open_records(self.store.root)
        if buffer_records:  # build(records="run") reads the run's records through it too
            self._record_buffer = records = RecordBuffer(records.path)
        job = TuningJob(
            self._forms,
            self.target,
            options,
            records=records,
            runner=runner,
            device_resource=device,
            device_check=runner.require_device if runner is not None else None,
            context=self.context,
            num_threads=self.context.num_threads,
            run_id=self.context.run_id,
            cost_model_file=self.store.cost_model_path(tvm_target_key(self.target.tvm_target())),
            after_s=after_s,
            budget_started=budget_started,
        )
        self.context.model["num_tasks"] = len(job.tasks)
        return job

    def finish_scheduled_tuning(
        self, job, tracker: tuple[str, int] | None, device_key: str
    ) -> float:
        """Finalize a job that a scheduler drove stage by stage (:meth:`tuning_job`) and
        record it as this run's autotune step, spanning its stages; returns that span in
        seconds (the search's time, as :meth:`in_model_due` takes it)."""
        job.finalize()
        stages = self.context.stages
        start = stages[0]["start"] if stages else time.time()
        end = stages[-1]["end"] if stages else start
        self.context.steps.append(
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
        self.record_tuning(job, tracker, device_key)
        return end - start

    def record_tuning(self, job, tracker: tuple[str, int] | None, device_key: str) -> None:
        """Keep a finished job's summary here and in the context."""
        self.tuning_summary = job.summary()
        self.context.tuning = {
            **self.tuning_summary,
            "rpc_tracker": list(tracker) if tracker else None,
            "device_key": device_key,
            "runner": "rpc" if tracker else "local",
            "cache_mode": job.cache_mode,
            "model_bytes": job.model_bytes,
        }

    def build(self, records: str | None = "global", *, default_schedules: bool = True) -> SimpleTVM:
        """Compile the model, applying tuning records.

        ``records``: ``"global"`` (every run's records in the store, default), ``"best"``
        (the best record per workload only), ``"run"`` (this run's records), another
        run's id, the path of a records database or store directory (another machine's
        records; a record directory in the legacy JSON-lines format is imported), or None
        (or ``"none"``: untuned). A kernel without a record gets SimpleTVM's default
        schedule (parallel, vectorized); ``default_schedules=False`` leaves it with TVM's
        naive one, the baseline to compare tuning with.
        """
        self._require("build()", FlowState.IMPORTED, FlowState.BUILT)
        if isinstance(records, str) and records.lower() == "none":
            records = None  # as the command line spells it
        from simpletvm.compiler.build import compile_fused
        from simpletvm.tuning.database import best_latency_s, records_database

        with self.context.step("build", records=records) as step:
            self.context.record_parameters(
                "build", records=records, default_schedules=default_schedules
            )
            database = (
                None
                if records is None
                else records_database(
                    records,
                    self._records_for_build(),
                    self.target.tvm_target(),
                    self.context.run_id,
                )
            )
            fused = self._forms.default
            if database is not None:
                fused, choices = self._forms.choose(
                    partial(best_latency_s, database), kept=database.kept_form
                )
                if choices:
                    step["conv_forms"] = [choice.describe() for choice in choices]
                database = database.with_in_model_choices()
                step.update(_records_match(fused, self.target, database))
            self._executable = compile_fused(
                fused,
                self.target,
                database,
                default_schedules=default_schedules,
                verdicts=self._verdicts(database),
            )
            self._library_file = None
            # code for another CPU runs only on a device of that kind, through RPC
            self._vm = self._new_vm(self._library_here()) if self.target.runs_here else None
            self._built_from = records
            self._enter(FlowState.BUILT)
            self._use_fork_join_pool(step)
            self._choose_threads(step)
        return self

    def save(self, directory: str | Path | None = None) -> SimpleTVM:
        """Store the built module (weights included) and its metadata under the run id."""
        self._require("save()", FlowState.BUILT)
        target_dir = Path(directory) if directory else self.store.module_dir(self.context.run_id)
        with self.context.step("save", path=str(target_dir)):
            target_dir.mkdir(parents=True, exist_ok=True)
            tmp = target_dir / f".{MODULE_FILE}.tmp.so"
            if self._library_file is not None:  # exported at build: the same file
                shutil.copyfile(self._library_file, tmp)
            else:
                self._export(tmp)
            tmp.replace(target_dir / MODULE_FILE)
            self._library_file = target_dir / MODULE_FILE
            atomic_write_json(target_dir / METADATA_FILE, self._metadata())
            self.context.artifacts["module"] = str(target_dir)
        return self

    def load(self, run_id: str, directory: str | Path | None = None) -> SimpleTVM:
        """Bring back a module saved by ``save()`` (by run id, or from ``directory``)."""
        import tvm

        source_dir = Path(directory) if directory else self.store.module_dir(run_id)
        with self.context.step("load", run_id=run_id) as step:
            metadata_path = source_dir / METADATA_FILE
            if not metadata_path.exists():
                raise RunNotFoundError(
                    f"no saved module for run {run_id!r} under {source_dir}: check the run id "
                    f"and the store root ({self.store.root})"
                )
            metadata = json.loads(metadata_path.read_text())
            self._check_compatible(metadata, source_dir)
            self._library_file = source_dir / MODULE_FILE
            if self.target.runs_here:
                library = tvm.runtime.load_module(str(self._library_file))
                self._vm, self._executable = self._new_vm(library), library
            else:  # code for another CPU: run() and evaluate() upload the file
                self._vm = self._executable = None
            self.model = ImportedModel(
                None,
                [TensorSpec.from_dict(d) for d in metadata["inputs"]],
                [TensorSpec.from_dict(d) for d in metadata["outputs"]],
                metadata["model"].get("source", run_id),
                "saved",
                {"loaded_from": run_id},
            )
            self._source = SourceOutputs(self.model)
            self.context.model = {**metadata["model"], "loaded_from": run_id}
            self._forms = None
            self._built_from = metadata.get("records")  # what the saved build applied
            self._enter(FlowState.LOADED)
            self._use_fork_join_pool(step)
            self._choose_threads(step)
        return self

    def run(self, data: Any) -> np.ndarray | list[np.ndarray]:
        """Inference: a NumPy array (one-input models), a list, or ``{name: array}``.

        Returns an array, or a list of arrays for models with several outputs (each a
        view of the call's own output, which later calls leave alone). With an RPC
        tracker, the model runs on a server of the device key.
        """
        self._require("run()", FlowState.BUILT, FlowState.LOADED)
        import tvm

        arrays = self._match_inputs(data)
        with self.context.tally("run") as step:  # one record for every call
            vm, device, where = self._execution()
            step["device"] = where
            result = vm["main"](*[tvm.runtime.tensor(a, device) for a in arrays])
            return as_numpy(result)

    def evaluate(
        self,
        repeat: int = 50,
        warmup: int = 5,
        number: int = 1,
        seed: int = 0,
        tolerance: float | None = None,
    ) -> SimpleTVM:
        """Check the module's answers, then time whole-model inference on random inputs;
        statistics go to the context.

        First the module's outputs on the inputs are compared with the source
        framework's on the same inputs (:meth:`check_answers`): the statistics carry the
        worst relative error over the outputs (``max_rel_error``), who computed the
        reference (``reference``) and the ``tolerance``; an error over it raises
        WrongAnswerError, the answers' statistics recorded.

        Then ``repeat`` samples of ``number`` runs each, after ``warmup`` runs and at
        least 0.2 s of them (an idle machine runs its first 20-50 ms of calls slowly). On
        this CPU the thread count is chosen again first, as at build and load: a shared
        host's speed moves within minutes, and with it the faster count.

        With an RPC tracker, the timing happens on a server of the device key, and the
        statistics say which (``device``: tracker, key, server address).
        """
        self._require("evaluate()", FlowState.BUILT, FlowState.LOADED)
        if repeat < 1 or number < 1 or warmup < 0:
            raise ValueError("evaluate() needs repeat >= 1, number >= 1 and warmup >= 0")
        check_tolerance(tolerance)
        import tvm

        from simpletvm.runtime.evaluation import random_inputs, summarize, time_vm

        with self.context.step("evaluate", repeat=repeat, number=number, warmup=warmup) as step:
            self.context.record_parameters(
                "evaluate",
                repeat=repeat,
                warmup=warmup,
                number=number,
                seed=seed,
                tolerance=tolerance,
            )
            vm, device, where = self._execution()
            step["device"] = where
            arrays = random_inputs(self.model.inputs, seed)
            inputs = [tvm.runtime.tensor(a, device) for a in arrays]
            answers = self._answers(vm, inputs, arrays, seed, tolerance)
            self._choose_threads(step, inputs)  # the host may have moved since build or load
            samples = time_vm(vm, device, inputs, warmup, repeat, number)
            stats = summarize(samples)
            stats.update(
                repeat=repeat,
                warmup=warmup,
                number=number,
                tuned=self._built_from is not None,
                records=self._built_from,
                device=where,
                **answers,
            )
            if self.rpc_tracker is None and self.target.device_type == "cpu":
                from simpletvm.runtime.threads import runtime_threads

                stats["threads"] = runtime_threads()
            self.last_evaluation = stats
            self.context.evaluation = stats
        return self

    def check_answers(self, seed: int = 0, tolerance: float | None = None) -> dict[str, Any]:
        """Compare the module's outputs with the source framework's on evaluate()'s random
        inputs of ``seed``: Keras for Keras models and the built-in ones, TensorFlow for
        SavedModels, TF Hub modules and GraphDefs, TFLite's interpreter for ``.tflite``
        files, ONNX Runtime for ONNX models (when installed).

        Returns ``max_rel_error`` (over each output, its largest difference over the
        reference's largest magnitude; the worst output's), ``reference`` (the framework,
        or ``none: <why>``: then no error) and ``tolerance``. Raises WrongAnswerError
        naming the output when one is further off than ``tolerance`` (relative; by
        default its dtype's, :data:`~simpletvm.closeness.TOLERANCE`, or one
        quantization step). The source runs once per model and seed.
        """
        self._require("check_answers()", FlowState.BUILT, FlowState.LOADED)
        check_tolerance(tolerance)
        import tvm

        from simpletvm.runtime.evaluation import random_inputs

        vm, device, _ = self._execution()
        arrays = random_inputs(self.model.inputs, seed)
        inputs = [tvm.runtime.tensor(a, device) for a in arrays]
        return self._answers(vm, inputs, arrays, seed, tolerance)

    def close(self) -> None:
        """Delete the session's temporary files: the exported module of a build that was
        not saved (the session exports it again if it needs it) and a buffered tuning
        job's copy of its records. A scheduler's worker calls it when it releases its
        job: the worker leaves through ``os._exit``, which skips the deletion at exit."""
        if self._record_buffer is not None:
            self._record_buffer.discard()
            self._record_buffer = None
        if self._export_dir is None:
            return
        if self._library_file is not None and self._library_file.parent == Path(
            self._export_dir.name
        ):
            self._library_file = None
        self._export_dir.cleanup()
        self._export_dir = None

    # ---- helpers --------------------------------------------------------------------
    def _enter(self, state: FlowState) -> None:
        if state not in NEXT[self.state]:
            raise FlowError(f"a SimpleTVM cannot go from {self.state} to {state}")
        self.state = state

    def _require(self, step: str, *states: FlowState) -> None:
        """Refuse ``step`` unless the flow is in one of ``states``, naming the fix."""
        if self.state in states:
            return
        if FlowState.IMPORTED in states:  # steps that work on the imported model
            if self.state is FlowState.LOADED:
                raise FlowError(
                    f"{step} needs an imported model, but this SimpleTVM holds a module "
                    "loaded with load(), which is already compiled: call from_model() to "
                    "import the model again"
                )
            raise FlowError(f"{step} needs a model: call from_model() first")
        if states == (FlowState.BUILT,):
            if self.state is FlowState.LOADED:
                raise FlowError(
                    f"{step} needs a module built here; a loaded module is "
                    "saved already (under the run id it was loaded from)"
                )
            raise FlowError(f"{step} needs a built module: call build() first")
        raise FlowError(f"{step} needs a module: call build() or load() first")

    def _use_fork_join_pool(self, step: dict) -> None:
        """Point the module's parallel loops at SimpleTVM's pool when it runs on this CPU;
        the step says which pool runs them."""
        if self._runs_on_this_cpu():
            from simpletvm.runtime.loaded import use_fork_join_pool

            step["fork_join_pool"] = use_fork_join_pool(
                self._library_file, self.target.host_cores()
            )

    def _choose_threads(self, step: dict, inputs: list | None = None) -> None:
        """Leave the runtime on the thread count this module runs fastest on here, unless
        the context pins ``num_threads`` or the module runs elsewhere; the step records
        the choice and the timings behind it."""
        if self._runs_on_this_cpu() and self.context.num_threads is None:
            from simpletvm.runtime.loaded import choose_threads

            step["runtime_threads"] = choose_threads(
                self._vm, self.model.inputs, self.target, inputs
            )

    def _answers(self, vm, inputs: list, arrays: list, seed: int, tolerance) -> dict[str, Any]:
        """The module's answers on ``inputs`` (``arrays`` here) against the source's
        (:meth:`check_answers`); a refused build's go to the context first."""
        expected = self._source.on(seed, arrays)
        outputs = as_numpy(vm["main"](*inputs)) if expected.outputs is not None else []
        answers = compare(
            [spec.name for spec in self.model.outputs],
            outputs if isinstance(outputs, list) else [outputs],
            expected,
            tolerance,
        )
        refusal = answers.refusal()
        if refusal is not None:
            self.last_evaluation = self.context.evaluation = answers.stats()
            raise refusal
        return answers.stats()

    def _runs_on_this_cpu(self) -> bool:
        """A module is built or loaded here, for this machine's CPU."""
        return self._vm is not None and self._targets_this_cpu()

    def _library_here(self):
        """The built module for this machine, as a loaded shared library.

        A CPU module straight from the compiler runs from LLVM's JIT, in memory, where its
        parallel loops can only use TVM's pool; exported and loaded like a saved module,
        they use SimpleTVM's (:mod:`simpletvm.runtime.fork_join`). A GPU module loads as is."""
        if self.target.device_type != "cpu":
            return self._executable
        import tvm

        self._library_file = self._temporary_export()
        return tvm.runtime.load_module(str(self._library_file))

    def _temporary_export(self) -> Path:
        """The built module exported to a temporary directory kept while it is in use."""
        from simpletvm._process.scratch import scratch_directory

        self._export_dir = scratch_directory("module")
        path = Path(self._export_dir.name) / MODULE_FILE
        self._export(path)
        return path

    def _new_vm(self, executable):
        from tvm import relax

        return relax.VirtualMachine(executable, self.target.device())

    def _export(self, path: Path) -> None:
        """Write the built library, linked by a cross compiler for another CPU."""
        self._executable.export_library(str(path), fcompile=self.target.library_compiler())

    def _execution(self):
        """Where run() and evaluate() execute: ``(vm, device, where)``. With an RPC tracker,
        on a server of the device key (the module exported once per build, uploaded and
        loaded there); else on this machine."""
        if self.rpc_tracker is None:
            if not self.target.runs_here:
                raise SimpleTVMError(
                    f"the module is for another CPU ({self.target.cross_triple}) and cannot "
                    "run here: run it on such a device through an RPC tracker, "
                    "SimpleTVM(BenchmarkingContext(target, device_key=KEY), "
                    "rpc_tracker=(host, port)), with a server of KEY on the device"
                )
            return self._vm, self.target.device(), {"runner": "local"}
        from tvm import relax

        from simpletvm.remote.rpc import remote_module

        if self._library_file is None:
            self._library_file = self._temporary_export()
        remote = remote_module(self.rpc_tracker, self.context.device_key, self._library_file)
        device = remote.device(self.target.device_type)
        where = {
            "runner": "rpc",
            "rpc_tracker": list(self.rpc_tracker),
            "device_key": self.context.device_key,
            "server": list(remote.server),
        }
        return relax.VirtualMachine(remote.library, device), device, where

    def _profiling_tracker(self):
        """The user's tracker, or none: profiling then happens on this machine."""
        from simpletvm.remote.rpc import RemoteTracker

        if self.rpc_tracker is not None:
            return RemoteTracker(*self.rpc_tracker, key=self.context.device_key)
        return nullcontext()

    def _verdicts(self, database):
        """Where a build's schedule checks are kept: beside the records it reads, else
        in the store's records (an untuned build's defaults)."""
        from simpletvm.tuning.records import tvm_target_key
        from simpletvm.tuning.verdicts import StoredVerdicts

        if database is not None:
            return database.verdicts()
        return StoredVerdicts(self._records_for_build(), tvm_target_key(self.target.tvm_target()))

    def _records_for_build(self):
        """The store's records, or a buffered job's: its records may never reach this
        machine's store (another node's), and its buffer reads the store and its copy."""
        if self._record_buffer is not None:
            return self._record_buffer
        return open_records(self.store.root)

    def _metadata(self) -> dict[str, Any]:
        return {
            "run_id": self.context.run_id,
            "target": self.target.spec,
            "device_type": self.target.device_type,
            "host": self.context.host,
            "host_fingerprint": host_fingerprint(),
            "inputs": [s.to_dict() for s in self.model.inputs],
            "outputs": [s.to_dict() for s in self.model.outputs],
            "model": self.context.model,
            "records": self._built_from,
            "versions": self.context.versions,
        }

    def _check_compatible(self, metadata: dict[str, Any], source_dir: Path) -> None:
        saved_kind = metadata["target"]["kind"]
        if saved_kind != self.target.kind:
            raise IncompatibleModuleError(
                f"the module in {source_dir} was built for target {saved_kind!r}, but this "
                f"context targets {self.target.kind!r}: load it with "
                f"BenchmarkingContext({saved_kind!r}) or rebuild it for this target"
            )
        if (
            self.target.device_type == "cpu"
            and self.target.runs_here
            and metadata["host_fingerprint"] != host_fingerprint()
        ):
            raise IncompatibleModuleError(
                f"the module in {source_dir} was built on another CPU "
                f"({metadata['host'].get('cpu_model')}, {metadata['host'].get('hostname')}); "
                "its machine code may not run here: rebuild it on this host"
            )

    def _match_inputs(self, data: Any) -> list[np.ndarray]:
        specs = self.model.inputs
        if isinstance(data, dict):
            missing = [s.name for s in specs if s.name not in data]
            if missing:
                raise ValueError(
                    f"run() is missing inputs {missing}; the model takes {[s.name for s in specs]}"
                )
            values = [data[s.name] for s in specs]
        elif isinstance(data, (list, tuple)):
            values = list(data)
        else:
            values = [data]
        if len(values) != len(specs):
            raise ValueError(
                f"run() got {len(values)} inputs; the model takes {len(specs)}: "
                f"{[(s.name, s.shape) for s in specs]}"
            )
        arrays = []
        for spec, value in zip(specs, values):
            array = np.asarray(value)
            if tuple(array.shape) != tuple(spec.shape):
                raise ValueError(
                    f"input {spec.name!r} must have shape {spec.shape}, got {array.shape}"
                )
            if array.dtype != np.dtype(spec.dtype):  # refused as TFLite and ONNX Runtime do
                raise ValueError(
                    f"input {spec.name!r} must be {spec.dtype}, got {array.dtype}: "
                    f"convert it first (array.astype({spec.dtype!r}))"
                )
            arrays.append(np.ascontiguousarray(array))
        return arrays


def _records_match(fused, target: ResolvedTarget, database) -> dict[str, Any]:
    """What a build found in its records: how many records were there for this target
    (``records_loaded``), how many of the built module's tasks have one applied
    (``tasks_with_records`` of ``tasks``), how many records lost inside the model to the
    default schedule (``tasks_on_default_in_model``) or to an earlier record
    (``tasks_on_earlier_record_in_model``), and, when none has, why as far as the store
    tells (``records_mismatch``: ``"empty"``, no records at all; ``"target"``, records
    only for other targets or CPUs, named in ``records_targets``; ``"workloads"``,
    records for this target but of other tasks: another model or input shape)."""
    from simpletvm.compiler.lowering import extract_tasks
    from simpletvm.tuning.database import best_latency_s

    tasks = extract_tasks(fused, target)
    loaded = len(database)
    found = {
        "records_loaded": loaded,
        "tasks": len(tasks),
        "tasks_with_records": sum(best_latency_s(database, task) is not None for task in tasks),
    }
    if database.in_model:
        applied = [database.in_model_schedule(task.dispatched[0]) for task in tasks]
        found["tasks_on_default_in_model"] = applied.count("default")
        found["tasks_on_earlier_record_in_model"] = applied.count("earlier record")
    if found["tasks_with_records"] or found.get("tasks_on_default_in_model") or not tasks:
        return found
    if loaded:
        found["records_mismatch"] = "workloads"
        return found
    run_id = database.run_id if database.scope == "run" else None
    targets = (
        database.records.target_keys(run_id) if hasattr(database.records, "target_keys") else []
    )
    found["records_mismatch"] = "target" if targets else "empty"
    if targets:
        found["records_targets"] = targets
        found["target_key"] = database.target_key
    return found
