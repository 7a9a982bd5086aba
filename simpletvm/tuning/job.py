"""TuningJob: autotuning of one model as schedulable stages.

Per task, each iteration is four stages (thesis ch. 2.4.2): select candidates with the
cost model (client), build them (client), profile them on the target device, and
update the cost model and the records (client). The job runs one stage when told to
and says which stage comes next and whether it needs the device, so a single caller can
run the stages in order (``SimpleTVM.autotune``) and a scheduler can interleave the
stages of many jobs. The decisions are a pure :class:`~.plan.TuningPlan`'s.
"""

from __future__ import annotations

import math
import os
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simpletvm._process.interrupts import keep_interrupts
from simpletvm._process.scratch import sweep_orphans
from simpletvm.compiler.conv_forms import ConvForms
from simpletvm.compiler.winograd import register_schedule_rules
from simpletvm.errors import error_gist
from simpletvm.targets import ResolvedTarget, load_tensor_intrinsics, use_runtime_threads
from simpletvm.tuning.candidate_check import mean_seconds, refuse_wrong_fastest
from simpletvm.tuning.cost_model import JobCostModel
from simpletvm.tuning.estimate import built_estimate
from simpletvm.tuning.options import TuningOptions
from simpletvm.tuning.plan import StageSpec, TuningPlan
from simpletvm.tuning.records import RecordStore
from simpletvm.tuning.task_search import (
    SearchSetup,
    TaskSearch,
    default_candidate,
    log_task_end,
    measured_modules,
    search_strategy,
    task_flops,
)
from simpletvm.tuning.tasks import TaskProgress
from simpletvm.tuning.timing import (
    alloc_arguments,
    evaluator_config,
    model_footprint_bytes,
    resolve_cache_mode,
    run_evaluator,
    warmed_up,
)

CLIENT = "client"


class TuningJob:
    """Tunes the tasks of one fused Relax module for one target.

    The decisions (which task and stage come next, how much each measures, when a task
    or the job is done) are a :class:`~simpletvm.tuning.plan.TuningPlan`'s; the job
    carries them out with MetaSchedule and reports what happened back to it.

    Args:
        fused_mod: the module after :func:`simpletvm.compiler.lowering.fuse`, or a model's
            :class:`~simpletvm.compiler.conv_forms.ConvForms` (the tasks of every form of its
            contested layers, the rival forms' tasks known to the plan).
        target: where the tuned code will run.
        options: tuning parameters.
        records: the store's tuning records: every measured record is committed there
            under ``run_id`` as it arrives; with transfer learning the search starts
            from the best records of every run, without it from this run's only.
        builder: a MetaSchedule builder for the build stage (default: persistent build
            workers on this machine).
        runner: a MetaSchedule runner for the profile stage (default: local device).
            :mod:`simpletvm.testing` has fakes of both.
        device_resource: the name the context records for profile stages: a str, or an
            object whose str() names the device of the stage (a
            :class:`~simpletvm.remote.rpc.DeviceGrant`).
        device_check: called before each profile stage; raises when the device is gone
            (the stage then fails and can be run again once a device is back).
        context: a BenchmarkingContext that receives every stage's timing.
        run_id: the run the records belong to; a job started again under the same id
            resumes: what it measured counts against the budget and is never measured
            again (default: a new id).
        cost_model_file: where the store keeps this target's cost model.
        after_s: seconds of a ``minutes`` budget kept for what follows the job
            (:class:`~simpletvm.tuning.plan.TuningPlan`).
        budget_started: when a ``minutes`` budget began (``time.time()``), when the
            job's own preparation counts against it (default: its first stage).
    """

    def __init__(
        self,
        fused_mod,
        target: ResolvedTarget,
        options: TuningOptions,
        *,
        records: RecordStore,
        builder=None,
        runner=None,
        device_resource: Any = "device:local",
        device_check: Callable[[], None] | None = None,
        context=None,
        num_threads: int | None = None,
        run_id: str | None = None,
        cost_model_file: Path | None = None,
        after_s: float = 0.0,
        budget_started: float | None = None,
    ):
        from simpletvm.compiler.lowering import extract_tasks, workload_key
        from simpletvm.tuning.database import RecordDatabase

        load_tensor_intrinsics(target.kind, target.llvm_triple)
        register_schedule_rules()  # the Winograd operator's transform blocks name them
        use_runtime_threads(target.host_cores())  # the runner processes measure with them
        sweep_orphans()  # the scratch directories of killed jobs before this one
        self.target = target
        self.options = options
        self.records = records
        self.device_resource = device_resource
        self.device_check = device_check
        self.context = context
        self.run_id = run_id or uuid.uuid4().hex
        self._tvm_target = target.tvm_target()
        forms = fused_mod if isinstance(fused_mod, ConvForms) else None
        self.tasks = extract_tasks(forms.modules() if forms else fused_mod, target)
        self.searches = [TaskSearch(task) for task in self.tasks]
        self.cache_mode = resolve_cache_mode(
            options.cache_flush, device_type=target.device_type, local=runner is None
        )
        self.model_bytes = model_footprint_bytes(forms.default if forms else fused_mod)
        measured_before = records.run_counts(self.run_id)
        keys = [workload_key(t.dispatched[0]) for t in self.tasks]
        index = {key: i for i, key in enumerate(keys)}
        self.plan = TuningPlan(
            [t.task_name for t in self.tasks],
            [int(t.weight) for t in self.tasks],
            [task_flops(t) for t in self.tasks],
            options,
            measured_before=[measured_before.get(key, 0) for key in keys],
            rivals=[
                ([index[k] for k in r.default_tasks], [index[k] for k in r.variant_tasks])
                for r in (forms.rivalries if forms else [])
            ],
            after_s=after_s,
            budget_started=budget_started,
        )
        self._database = RecordDatabase(
            records,
            self._tvm_target,
            run_id=self.run_id,
            scope="all" if options.transfer_learning else "run",
        )
        self._own_records = RecordDatabase(
            records, self._tvm_target, scope="run", run_id=self.run_id
        )
        self._setup = SearchSetup(
            self._tvm_target,
            num_threads or "physical",
            self._database,
            options.candidates_per_iteration,
        )
        # shared by every task's search; with transfer learning the store's, what earlier
        # jobs on this target measured
        self._cost_model = JobCostModel(
            options.cost_model,
            cost_model_file if options.cost_model == "xgb" and options.transfer_learning else None,
        )
        self._builder = builder
        self._own_builder = builder is None  # ours to start and to close
        self._runner = runner
        self._runs_locally = runner is None
        self._sampled = False  # the current candidates came from the cold-start sampling
        self._best_records: list = []  # the records the closing round's iteration times
        self._last_error: str | None = None  # of the current iteration's candidates
        self._candidates: list = []  # of the current iteration, and what they gave
        self._build_results: list = []
        self._run_results: list = []
        self._finalized = False
        if options.total_trials is not None and options.total_trials < len(self.tasks):
            warnings.warn(
                f"total_trials={options.total_trials} cannot measure all {len(self.tasks)} "
                "tasks of this model; the unmeasured ones are built untuned, with SimpleTVM's "
                "default schedules on CPUs (DLight's on GPUs). "
                f"Give total_trials at least {len(self.tasks)} (several times more to tune "
                "well).",
                stacklevel=3,
            )

    # ---- the load-awareness answers -------------------------------------------------
    def next_stage(self) -> StageSpec | None:
        """The stage that runs next (``on_device``: it profiles), or None when done."""
        return self.plan.next_stage()

    def is_complete(self) -> bool:
        return self.plan.is_complete()

    @property
    def progress(self) -> list[TaskProgress]:
        return self.plan.progress

    @property
    def first_round(self) -> list[int]:
        return self.plan.first_round

    @property
    def trials(self) -> int:
        return self.plan.trials

    # ---- execution ------------------------------------------------------------------
    def run_stage(self) -> StageSpec:
        """Execute the next stage and record its timing; returns what ran."""
        spec = self.next_stage()
        if spec is None:
            raise RuntimeError("the tuning job is complete: no stage left to run")
        start = time.time()
        self.plan.stage_started()
        with keep_interrupts(deferred=True):  # Ctrl-C ends the tuning after the stage
            extra = getattr(self, f"_{spec.kind}")()
        self._close_finished_tasks()
        end = time.time()
        if self.context is not None:
            progress = self.progress[spec.task]
            self.context.record_stage(
                task=spec.task,
                task_name=spec.task_name,
                iteration=spec.iteration,
                stage=spec.kind,
                resource=str(self.device_resource) if spec.on_device else CLIENT,
                start=start,
                end=end,
                best_latency_s=(
                    progress.best_latency_s if math.isfinite(progress.best_latency_s) else None
                ),
                trials=progress.trials,
                **({"remeasure": True} if spec.remeasure else {}),
                **extra,
            )
        return spec

    def run(self, on_stage: Callable[[TuningJob], None] | None = None) -> None:
        """Run every stage in order, then finalize (what a job without a scheduler does);
        ``on_stage`` is called with the job after each stage (progress displays)."""
        while not self.is_complete():
            self.run_stage()
            if on_stage is not None:
                on_stage(self)
        self.finalize()

    def finalize(self) -> dict[str, Any]:
        """Close the search states, the build workers and this thread's connection to
        the records (they are stored, or wait in a buffer to be drained)."""
        if self._finalized:
            return self.summary()
        self._finalized = True
        for index, search in enumerate(self.searches):
            if search.is_open:
                self._close_task(index)
        if self._own_builder and self._builder is not None:
            self._builder.close()
        self._cost_model.save()
        self.records.close()
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """Per-task trials, errors and best latency, the weighted model estimate (of the
        tuned tasks), and the tasks skipped because they could not be tuned."""
        return self.plan.summary()

    def known_estimate_s(self) -> float | None:
        """The model's estimate from the store's best record of every task on this
        target, before any tuning (seconds); None when some task has none."""
        from simpletvm.tuning.database import RecordDatabase, best_latency_s

        database = RecordDatabase(self.records, self._tvm_target, scope="best")
        best = {i: best_latency_s(database, task) for i, task in enumerate(self.tasks)}
        if any(latency is None for latency in best.values()):
            return None
        weights = {i: int(task.weight) for i, task in enumerate(self.tasks)}
        return built_estimate(best, weights, self.plan.rivals)

    # ---- stages ---------------------------------------------------------------------
    def _select(self) -> dict[str, Any]:
        if self.plan.remeasuring:
            return self._select_best_records()
        index = self.plan.task
        search = self.searches[index]
        try:
            if not search.is_open:
                if self.plan.task_spent():  # resumed after its budget was spent
                    self.plan.finish_task()
                    return {"candidates": 0}
                self._start_task(index)
            offered, fresh, self._sampled = search.offered(self._cost_model.is_cold())
            fresh = search.with_default(fresh)  # the task's first batch only
        except Exception as error:  # noqa: BLE001 - MetaSchedule cannot schedule this task
            self.plan.task_failed(f"{type(error).__name__}: {error_gist(error)}")
            return {"candidates": 0, "errors": 1}
        if offered and not fresh:  # all measured already: ask again
            return {"candidates": 0, "measured_before": offered}
        fresh = fresh[: self.plan.selected(len(fresh))]
        search.measured.update(digest for digest, _ in fresh)
        self._candidates = [candidate for _, candidate in fresh]
        return {"candidates": len(self._candidates), **({"sampled": True} if self._sampled else {})}

    def _build(self) -> dict[str, Any]:
        from tvm.s_tir.meta_schedule.builder import BuilderInput

        if self._builder is None:
            from simpletvm.tuning.builder import PersistentBuilder

            self._builder = PersistentBuilder(
                self.target.kind,
                self.target.llvm_triple,
                max_workers=min(self.options.candidates_per_iteration, os.cpu_count() or 1),
                timeout_sec=self.options.build_timeout,
                link=self._runs_locally,  # the local runner loads a linked library as it is
            )
        self._build_results = self._builder.build(
            [BuilderInput(c.sch.mod, self._tvm_target) for c in self._candidates]
        )
        errors = sum(1 for r in self._build_results if r.error_msg)
        self._note_errors(r.error_msg for r in self._build_results)
        self.plan.built(errors)
        return {"candidates": len(self._candidates), "errors": errors}

    def _profile(self) -> dict[str, Any]:
        from tvm.s_tir.meta_schedule.runner import RunnerInput, RunnerResult

        if self.device_check is not None:
            self.device_check()
        runner = self._ensure_runner()
        built = [(i, r) for i, r in enumerate(self._build_results) if r.artifact_path]
        inputs = [
            RunnerInput(r.artifact_path, self.target.device_type, self._candidates[i].args_info)
            for i, r in built
        ]
        futures = runner.run(warmed_up(inputs))
        futures = futures[1:] if inputs else futures  # the warm-up's timing is dropped
        results = [RunnerResult(None, r.error_msg) for r in self._build_results]
        for (index, _), future in zip(built, futures):
            results[index] = future.result()
        self._run_results = results
        errors = sum(
            1 for r, b in zip(results, self._build_results) if r.error_msg and not b.error_msg
        )
        self._note_errors(
            r.error_msg for r, b in zip(results, self._build_results) if not b.error_msg
        )
        self.plan.profiled(errors)
        return {"candidates": len(results), "errors": errors}

    def _update(self) -> dict[str, Any]:
        from tvm.s_tir import meta_schedule as ms

        if self.plan.remeasuring:
            return self._update_best_records()
        search = self.searches[self.plan.task]
        context, workload = search.context, search.workload
        source = search.sampler if self._sampled else context
        if self.target.device_type == "cpu" and self.target.runs_here:
            best = self._database.get_top_k(workload, 1)
            self._run_results, wrong = refuse_wrong_fastest(
                context.mod,
                self._candidates,
                self._run_results,
                mean_seconds(best[0].run_secs) if best else None,
                self._tvm_target,
            )
            self._note_errors(wrong)
        source.search_strategy.notify_runner_results(self._candidates, self._run_results)
        self._cost_model.update(context, self._candidates, self._run_results)
        args_info = ms.arg_info.ArgInfo.from_prim_func(context.mod["main"])
        latencies = []
        for candidate, result in zip(self._candidates, self._run_results):
            latency = mean_seconds(result.run_secs)
            latencies.append(latency)
            if latency is not None:
                record = ms.database.TuningRecord(
                    candidate.sch.trace, workload, result.run_secs, self._tvm_target, args_info
                )
                self._database.commit_tuning_record(record)  # stored at once, under the run id
        self._candidates, self._build_results, self._run_results = [], [], []
        self.plan.measured(latencies, self._last_error)
        self._last_error = None
        return {"candidates": sum(1 for latency in latencies if latency is not None)}

    # ---- the closing round: each task's best records timed again ----------------------
    def _select_best_records(self) -> dict[str, Any]:
        """The current task's best records of this run that were not timed again yet,
        as candidates for the build and profile stages."""
        index = self.plan.task
        try:
            records = self.searches[index].records_to_time_again(
                self._own_records, self._workload(index), self.options.remeasure
            )
            candidates = [record.as_measure_candidate() for record in records]
        except Exception as error:  # noqa: BLE001 - the task keeps its search's timings
            self._last_error = f"{type(error).__name__}: {error_gist(error)}"
            self.plan.finish_task()
            return {"candidates": 0, "errors": 1}
        self._best_records, self._candidates = records, candidates
        self.plan.selected(len(candidates))
        return {"candidates": len(candidates)}

    def _update_best_records(self) -> dict[str, Any]:
        """Replace the timed records' latencies by the new ones, and tell the plan the
        task's best now and whether it is a record timed again."""
        index = self.plan.task
        latencies, best_s, best_timed_again = self.searches[index].commit_timed_again(
            self._own_records, self._workload(index), self._best_records, self._run_results
        )
        self._best_records, self._candidates = [], []
        self._build_results, self._run_results = [], []
        self.plan.remeasured(latencies, best_s, best_timed_again)
        return {"candidates": sum(1 for latency in latencies if latency is not None)}

    # ---- helpers --------------------------------------------------------------------
    def _workload(self, index: int):
        """The task's workload in the record database (committed once per task)."""
        search = self.searches[index]
        if search.workload is None:
            search.workload = self._database.commit_workload(search.task.dispatched[0])
        return search.workload

    def _start_task(self, index: int) -> None:
        log = self.context.logger if self.context is not None else None
        self._cost_model.read_store([task.dispatched[0] for task in self.tasks], log)
        search, options, setup = self.searches[index], self.options, self._setup
        seed = -1 if options.seed is None else options.seed + index
        context = setup.tune_context(
            search.task.dispatched[0], search.task.task_name, search_strategy(options), seed
        )
        workload = self._workload(index)
        search.measured = measured_modules(
            self._own_records, workload, self.plan.measured_before[index]
        )
        spaces = context.generate_design_space()
        setup.begin(context, spaces, self.plan.task_budget(), self._cost_model.model)
        search.context = context
        if self.target.device_type == "cpu":
            search.default = default_candidate(context, self._tvm_target, log)
        if options.transfer_learning:
            self._warm_cost_model(context, workload)
        if options.search_strategy == "evolutionary" and self._cost_model.is_cold():
            # seeds apart from every task's search
            seed = -1 if options.seed is None else options.seed + len(self.tasks) + index
            search.sampler = setup.cold_sampler(
                context, spaces, self.plan.task_budget(), seed, self._cost_model.model
            )

    def _warm_cost_model(self, context, workload) -> None:
        """Train the cost model on the best records known for this workload (an index
        lookup: the store is never read whole), unless the store's cost model holds the
        workload's measurements already."""
        records = self._database.get_top_k(workload, TRANSFER_RECORDS)
        if not records:
            return
        self._cost_model.warm(context, records)
        self.plan.known_best(min(mean_seconds(r.run_secs) or math.inf for r in records))

    def _note_errors(self, messages) -> None:
        for message in messages:
            if message:
                self._last_error = error_gist(message)

    def _close_finished_tasks(self) -> None:
        """Close the search of every task the plan has finished (or skipped)."""
        for index, search in enumerate(self.searches):
            if search.is_open and self.progress[index].done:
                self._close_task(index)

    def _close_task(self, index: int) -> None:
        self.searches[index].close()
        if self.context is not None:
            log_task_end(self.context.logger, index, len(self.tasks), self.progress[index])

    def _ensure_runner(self):
        if self._runner is None:
            from tvm.s_tir import meta_schedule as ms

            from simpletvm._process.orphans import exit_with_this_process

            self._runner = ms.runner.LocalRunner(
                timeout_sec=self.options.resolved_timeout(self.target.device_type),
                initializer=exit_with_this_process(),
                evaluator_config=evaluator_config(self.options, self.cache_mode),
                f_alloc_argument=alloc_arguments,
                f_run_evaluator=run_evaluator(self.cache_mode, self.model_bytes),
            )
        return self._runner


# best records per workload that warm the cost model: MetaSchedule decodes a record by
# replaying its trace on the workload (tens of milliseconds for a convolution), at task
# start, so more records delay every task's first select
TRANSFER_RECORDS = 64
