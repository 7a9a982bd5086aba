"""SimpleTVM: the fluent flow from_model -> autotune -> build -> save -> load -> run -> evaluate.

Each step records its wall time and parameters in the BenchmarkingContext, and the flow
is enforced: a step called before the one it needs raises a FlowError naming it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from simpletvm.built_module import (
    METADATA_FILE,
    MODULE_FILE,
    CompiledModule,
    compare_outputs,
    match_inputs,
    saved_metadata,
    saved_metadata_of,
    saved_model,
)
from simpletvm.context import BenchmarkingContext
from simpletvm.errors import SimpleTVMError
from simpletvm.flow import FlowState, move, require
from simpletvm.in_model_round import InModelRound
from simpletvm.models import ImportedModel, import_model
from simpletvm.runtime.accuracy import check_tolerance
from simpletvm.runtime.loaded import as_numpy
from simpletvm.runtime.reference import SourceOutputs
from simpletvm.store import atomic_write_json
from simpletvm.targets import ResolvedTarget, resolve_target, use_runtime_threads
from simpletvm.tuning.options import TuningOptions
from simpletvm.tuning.record_files import open_records


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
        self._module: CompiledModule | None = None  # built or loaded
        # a buffered tuning job's records (simpletvm.tuning_session.tuning_job)
        self.record_buffer = None
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
        return self._module.vm

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
            self._module = None
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
        whose time it keeps (:class:`~simpletvm.in_model_round.InModelRound`): the
        search ends that much earlier. Where the time went is in
        ``tuning_summary["spent_s"]``.
        """
        budget_started = time.time()
        self._require("autotune()", FlowState.IMPORTED, FlowState.BUILT)
        from simpletvm.tuning_session import TuningSession

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
        session = TuningSession(self, options, budget_started, in_model=in_model, progress=progress)
        session.run(on_stage)
        return self

    def choose_in_model(self, records: str = "run", *, devices_here: bool = False) -> SimpleTVM:
        """Time each task's fastest record against the schedule chosen before it (at
        first its default schedule) inside the model built here, and keep the choices in
        the store: build() then applies a record only where it ran faster there, by more
        than the timing's margin. ``records`` as for build(). autotune() does this after
        a search of a minute or more on this machine's CPU. ``devices_here``: the RPC
        tracker's devices are servers on this machine (those superb and the service
        start), so the model runs on this CPU all the same."""
        self._require("choose_in_model()", FlowState.IMPORTED, FlowState.BUILT)
        InModelRound(self, devices_here=devices_here).run(records)
        return self

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
        from simpletvm.tuning.database import applied_records

        with self.context.step("build", records=records) as step:
            self.context.record_parameters(
                "build", records=records, default_schedules=default_schedules
            )
            fused, database, found = applied_records(
                self._forms, records, self.records_for_build(), self.target, self.context.run_id
            )
            step.update(found)
            executable = compile_fused(
                fused,
                self.target,
                database,
                default_schedules=default_schedules,
                verdicts=database.verdicts() if database is not None else self._verdicts(),
            )
            self._module = CompiledModule.compiled(executable, self.target)
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
            self._module.save(target_dir)
            atomic_write_json(
                target_dir / METADATA_FILE,
                saved_metadata(self.context, self.target, self.model, self._built_from),
            )
            self.context.artifacts["module"] = str(target_dir)
        return self

    def load(self, run_id: str, directory: str | Path | None = None) -> SimpleTVM:
        """Bring back a module saved by ``save()`` (by run id, or from ``directory``)."""
        source_dir = Path(directory) if directory else self.store.module_dir(run_id)
        with self.context.step("load", run_id=run_id) as step:
            metadata = saved_metadata_of(source_dir, run_id, self.store.root, self.target)
            self._module = CompiledModule.loaded(source_dir / MODULE_FILE, self.target)
            self.model = saved_model(metadata, run_id)
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

        arrays = match_inputs(self.model.inputs, data)
        with self.context.tally("run") as step:  # one record for every call
            vm, device, where = self._module.execution(self.rpc_tracker, self.context.device_key)
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
            vm, device, where = self._module.execution(self.rpc_tracker, self.context.device_key)
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

        vm, device, _ = self._module.execution(self.rpc_tracker, self.context.device_key)
        arrays = random_inputs(self.model.inputs, seed)
        inputs = [tvm.runtime.tensor(a, device) for a in arrays]
        return self._answers(vm, inputs, arrays, seed, tolerance)

    def close(self) -> None:
        """Delete the session's temporary files: the exported module of a build that was
        not saved (the session exports it again if it needs it) and a buffered tuning
        job's copy of its records. A scheduler's worker calls it when it releases its
        job: the worker leaves through ``os._exit``, which skips the deletion at exit."""
        if self.record_buffer is not None:
            self.record_buffer.discard()
            self.record_buffer = None
        if self._module is not None:
            self._module.close()

    # ---- helpers --------------------------------------------------------------------
    def _enter(self, state: FlowState) -> None:
        self.state = move(self.state, state)

    def _require(self, step: str, *states: FlowState) -> None:
        require(self.state, step, *states)

    def _use_fork_join_pool(self, step: dict) -> None:
        """Point the module's parallel loops at SimpleTVM's pool when it runs on this CPU;
        the step says which pool runs them."""
        if self._runs_on_this_cpu():
            from simpletvm.runtime.loaded import use_fork_join_pool

            step["fork_join_pool"] = use_fork_join_pool(
                self._module.library_file, self.target.host_cores()
            )

    def _choose_threads(self, step: dict, inputs: list | None = None) -> None:
        """Leave the runtime on the thread count this module runs fastest on here, unless
        the context pins ``num_threads`` or the module runs elsewhere; the step records
        the choice and the timings behind it."""
        if self._runs_on_this_cpu() and self.context.num_threads is None:
            from simpletvm.runtime.loaded import choose_threads

            step["runtime_threads"] = choose_threads(
                self._module.vm, self.model.inputs, self.target, inputs
            )

    def _answers(self, vm, inputs: list, arrays: list, seed: int, tolerance) -> dict[str, Any]:
        """The module's answers on ``inputs`` (``arrays`` here) against the source's
        (:meth:`check_answers`); a refused build's go to the context first."""
        expected = self._source.on(seed, arrays)
        answers = compare_outputs(vm, inputs, expected, self.model.outputs, tolerance)
        refusal = answers.refusal()
        if refusal is not None:
            self.last_evaluation = self.context.evaluation = answers.stats()
            raise refusal
        return answers.stats()

    def _runs_on_this_cpu(self) -> bool:
        """A module is built or loaded here, for this machine's CPU."""
        target = self.target
        return (
            self._module is not None
            and self._module.vm is not None
            and target.device_type == "cpu"
            and target.runs_here
            and self.rpc_tracker is None
        )

    def _verdicts(self):
        """Where an untuned build's schedule checks are kept: in the store's records."""
        from simpletvm.tuning.records import tvm_target_key
        from simpletvm.tuning.verdicts import StoredVerdicts

        return StoredVerdicts(self.records_for_build(), tvm_target_key(self.target.tvm_target()))

    def records_for_build(self):
        """The store's records, or a buffered job's: its records may never reach this
        machine's store (another node's), and its buffer reads the store and its copy."""
        if self.record_buffer is not None:
            return self.record_buffer
        return open_records(self.store.root)
