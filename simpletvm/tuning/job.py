"""TuningJob: autotuning of one model as schedulable stages.

Per task, each iteration is four stages (thesis ch. 2.4.2): select candidates with the
cost model (client), build them (client), profile them on the target device, and
update the cost model and the records (client). The job runs one stage when told to
and says which stage and resource come next, so a single caller can run the stages in
order (``SimpleTVM.autotune``) and a scheduler can interleave the stages of many jobs.
After each iteration the job picks the task to measure next (:mod:`.tasks`).
"""

from __future__ import annotations

import math
import os
import time
import uuid
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from ..targets import ResolvedTarget, load_tensor_intrinsics, use_runtime_threads
from .options import TuningOptions
from .records import RecordStore
from .tasks import TaskProgress, next_task

STAGES = ("select", "build", "profile", "update")
CLIENT = "client"


@dataclass(frozen=True)
class StageSpec:
    """The next stage of a job and the resource it needs."""

    kind: str
    task: int
    task_name: str
    iteration: int
    resource: str


class TuningJob:
    """Tunes the tasks of one fused Relax module for one target.

    Args:
        fused_mod: the module after :func:`simpletvm.lowering.fuse`.
        target: where the tuned code will run.
        options: tuning parameters.
        records: the store's tuning records: every measured record is committed there
            under ``run_id`` as it arrives; with transfer learning the search starts
            from the best records of every run, without it from this run's only.
        runner: a MetaSchedule runner for the profile stage (default: local device).
        device_resource: the name of the resource profiling uses.
        device_check: called before each profile stage; raises when the device is gone
            (the stage then fails and can be run again once a device is back).
        context: a BenchmarkingContext that receives every stage's timing.
        run_id: the run the records belong to; a job started again under the same id
            resumes (default: a new id).
    """

    def __init__(
        self,
        fused_mod,
        target: ResolvedTarget,
        options: TuningOptions,
        *,
        records: RecordStore,
        runner=None,
        device_resource: str = "device:local",
        device_check: Callable[[], None] | None = None,
        context=None,
        num_threads: int | None = None,
        run_id: str | None = None,
    ):
        from tvm.s_tir import meta_schedule as ms

        from ..lowering import extract_tasks
        from .database import RecordDatabase

        load_tensor_intrinsics(target.kind)
        use_runtime_threads(target.host_cores())  # the runner processes measure with them
        self.target = target
        self.options = options
        self.records = records
        self.device_resource = device_resource
        self.device_check = device_check
        self.context = context
        self.run_id = run_id or uuid.uuid4().hex
        self._tvm_target = target.tvm_target()
        self._num_threads = num_threads or "physical"
        self.tasks = extract_tasks(fused_mod, target)
        self.progress = [TaskProgress(t.task_name, int(t.weight)) for t in self.tasks]
        self.first_round = first_round_trials(
            [task_flops(t) * int(t.weight) for t in self.tasks], options)
        self._deadline: float | None = None  # set when the first stage starts
        # records this run measured before it was stopped: counted, never re-measured
        self._measured_before = Counter(records.run_counts(self.run_id))
        self._database = RecordDatabase(
            records, self._tvm_target, run_id=self.run_id,
            scope="all" if options.transfer_learning else "run")
        self._cost_model = (
            ms.cost_model.XGBModel(
                extractor=ms.feature_extractor.PerStoreFeature(), adaptive_training=True)
            if options.cost_model == "xgb" else ms.cost_model.RandomModel()
        )
        self._builder = None
        self._runner = runner
        self._tune_contexts: dict[int, Any] = {}  # per started task: its search state
        self._workloads: dict[int, Any] = {}
        self._phase = "select"
        self._candidates: list = []
        self._build_results: list = []
        self._run_results: list = []
        self._finalized = False
        if options.total_trials is not None and options.total_trials < len(self.tasks):
            warnings.warn(
                f"total_trials={options.total_trials} cannot measure all {len(self.tasks)} "
                "tasks of this model; the unmeasured ones keep naive default schedules. "
                f"Give total_trials at least {len(self.tasks)} (several times more to tune "
                "well).", stacklevel=3)
        self._task_index = self._next_task()

    # ---- the load-awareness answers -------------------------------------------------
    def next_stage(self) -> StageSpec | None:
        """The stage that runs next, or None when the job is complete."""
        if self.is_complete():
            return None
        progress = self.progress[self._task_index]
        resource = self.device_resource if self._phase == "profile" else CLIENT
        return StageSpec(self._phase, self._task_index, progress.name, progress.iterations,
                         resource)

    def is_complete(self) -> bool:
        return self._task_index is None

    @property
    def trials(self) -> int:
        return sum(p.trials for p in self.progress)

    # ---- execution ------------------------------------------------------------------
    def run_stage(self) -> StageSpec:
        """Execute the next stage and record its timing; returns what ran."""
        spec = self.next_stage()
        if spec is None:
            raise RuntimeError("the tuning job is complete: no stage left to run")
        start = time.time()
        if self._deadline is None and self.options.minutes is not None:
            self._deadline = start + self.options.minutes * 60
        extra = getattr(self, f"_{spec.kind}")()
        end = time.time()
        if self.context is not None:
            progress = self.progress[spec.task]
            self.context.record_stage(
                task=spec.task, task_name=spec.task_name, iteration=spec.iteration,
                stage=spec.kind, resource=spec.resource, start=start, end=end,
                best_latency_s=(progress.best_latency_s
                                if math.isfinite(progress.best_latency_s) else None),
                trials=progress.trials, **extra,
            )
        return spec

    def run(self, on_stage: Callable[["TuningJob"], None] | None = None) -> None:
        """Run every stage in order, then finalize (what a job without a scheduler does);
        ``on_stage`` is called with the job after each stage (progress displays)."""
        while not self.is_complete():
            self.run_stage()
            if on_stage is not None:
                on_stage(self)
        self.finalize()

    def finalize(self) -> dict[str, Any]:
        """Close the search states and the build workers (the records are stored)."""
        if self._finalized:
            return self.summary()
        self._finalized = True
        self._close_tune_contexts()
        if self._builder is not None:
            self._builder.close()
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """Per-task trials, errors and best latency, the weighted model estimate (of the
        tuned tasks), and the tasks skipped because they could not be tuned."""
        tasks = [
            {"task": p.name, "weight": p.weight, "trials": p.trials, "errors": p.errors,
             "iterations": p.iterations,
             "best_latency_s": p.best_latency_s if math.isfinite(p.best_latency_s) else None,
             "skipped": p.skipped}
            for p in self.progress
        ]
        estimate = sum(p.weight * p.best_latency_s for p in self.progress
                       if math.isfinite(p.best_latency_s))
        return {"tasks": tasks, "num_tasks": len(self.tasks), "trials": self.trials,
                "errors": sum(p.errors for p in self.progress),
                "estimated_latency_s": estimate,
                "skipped_tasks": [{"task": p.name, "error": p.skipped}
                                  for p in self.progress if p.skipped]}

    # ---- stages ---------------------------------------------------------------------
    def _select(self) -> dict[str, Any]:
        try:
            if self._task_index not in self._tune_contexts:
                self._start_task()
                if self._task_budget_spent(self.progress[self._task_index]):  # resumed
                    self._finish_task()
                    return {"batch_size": 0}
            strategy = self._tune_contexts[self._task_index].search_strategy
            candidates = strategy.generate_measure_candidates()
        except Exception as error:  # noqa: BLE001 - MetaSchedule cannot schedule this task
            self._skip_task(f"{type(error).__name__}: {_first_line(error)}")
            return {"batch_size": 0, "errors": 1}
        if not candidates:  # None (budget spent) or [] (space exhausted)
            self._finish_task()
            return {"batch_size": 0}
        self._candidates = list(candidates)[:self._batch_limit()]
        self._phase = "build"
        return {"batch_size": len(self._candidates)}

    def _build(self) -> dict[str, Any]:
        from tvm.s_tir.meta_schedule.builder import BuilderInput

        if self._builder is None:
            from .builder import PersistentBuilder

            self._builder = PersistentBuilder(
                self.target.kind,
                max_workers=min(self.options.resolved_batch_size(), os.cpu_count() or 1),
                timeout_sec=self.options.build_timeout,
            )
        self._build_results = self._builder.build(
            [BuilderInput(c.sch.mod, self._tvm_target) for c in self._candidates])
        errors = sum(1 for r in self._build_results if r.error_msg)
        self._note_errors(r.error_msg for r in self._build_results)
        self.progress[self._task_index].errors += errors
        self._phase = "profile"
        return {"batch_size": len(self._candidates), "errors": errors}

    def _profile(self) -> dict[str, Any]:
        from tvm.s_tir.meta_schedule.runner import RunnerInput, RunnerResult

        if self.device_check is not None:
            self.device_check()
        runner = self._ensure_runner()
        built = [(i, r) for i, r in enumerate(self._build_results) if r.artifact_path]
        futures = runner.run([
            RunnerInput(r.artifact_path, self.target.device_type, self._candidates[i].args_info)
            for i, r in built
        ])
        results = [RunnerResult(None, r.error_msg) for r in self._build_results]
        for (index, _), future in zip(built, futures):
            results[index] = future.result()
        self._run_results = results
        errors = sum(1 for r, b in zip(results, self._build_results)
                     if r.error_msg and not b.error_msg)
        self._note_errors(r.error_msg for r, b in zip(results, self._build_results)
                          if not b.error_msg)
        self.progress[self._task_index].errors += errors
        self._phase = "update"
        return {"batch_size": len(results), "errors": errors}

    def _update(self) -> dict[str, Any]:
        from tvm.s_tir import meta_schedule as ms

        progress = self.progress[self._task_index]
        context, workload = self._tune_contexts[self._task_index], self._workloads[self._task_index]
        context.search_strategy.notify_runner_results(self._candidates, self._run_results)
        self._cost_model.update(context, self._candidates, self._run_results)
        measured = 0
        args_info = ms.arg_info.ArgInfo.from_prim_func(context.mod["main"])
        for candidate, result in zip(self._candidates, self._run_results):
            progress.trials += 1
            latency = _mean_seconds(result.run_secs)
            if latency is None:
                progress.trials_since_improvement += 1
                continue
            record = ms.database.TuningRecord(candidate.sch.trace, workload,
                                              result.run_secs, self._tvm_target, args_info)
            self._database.commit_tuning_record(record)  # stored at once, under the run id
            measured += 1
            if latency < progress.best_latency_s:
                progress.best_latency_s = latency
                progress.trials_since_improvement = 0
            else:
                progress.trials_since_improvement += 1
        progress.record_iteration()
        self._candidates, self._build_results, self._run_results = [], [], []
        if progress.trials >= FAILED_CANDIDATES_TO_SKIP and not math.isfinite(
                progress.best_latency_s):
            self._skip_task(f"all {progress.trials} candidates failed; the last: "
                            f"{progress.last_error}")
        elif self._task_budget_spent(progress):
            self._finish_task()
        else:
            self._phase = "select"
            self._task_index = self._next_task()
        return {"batch_size": measured}

    # ---- helpers --------------------------------------------------------------------
    def _batch_limit(self) -> int:
        """How many of the selected candidates this iteration may measure.

        A task's first iteration measures its FLOPs-sized share (:func:`first_round_trials`);
        no iteration measures more than what is left of the job's budget, and in the
        first round no more than a fair share of it, so that a tight ``total_trials``
        still measures every task (an unmeasured task runs its naive default schedule).
        Candidates come best-predicted first."""
        limit = self.options.resolved_batch_size()
        if not self.progress[self._task_index].history:
            limit = min(limit, self.first_round[self._task_index])
        left = self._global_budget_left()
        if math.isinf(left):
            return limit
        unmeasured = sum(1 for p in self.progress if not p.done and not p.history)
        if unmeasured and self.options.task_scheduler == "gradient":
            left = left // unmeasured
        return max(1, min(limit, int(left)))

    def _next_task(self) -> int | None:
        """The task whose iteration comes next; None (and the search states closed)
        once every task is done or the job's whole budget is spent."""
        index = None
        if self._global_budget_left() > 0:
            index = next_task(self.progress, self.options.task_scheduler)
        if index is None:
            self._close_tune_contexts()
        return index

    def _close_tune_contexts(self) -> None:
        for context in self._tune_contexts.values():
            context.post_tuning()
        self._tune_contexts.clear()

    def _global_budget_left(self) -> float:
        """Trials the job may still measure; 0 once its wall-clock budget is over and
        every task has been measured (a task never measured keeps TVM's naive schedule,
        which can cost more than all the others together)."""
        if self._deadline is not None and time.time() >= self._deadline and all(
                p.history or p.done for p in self.progress):
            return 0
        if self.options.total_trials is None:
            return math.inf
        return self.options.total_trials - max(self.trials, sum(self._measured_before.values()))

    def _task_budget_spent(self, progress: TaskProgress) -> bool:
        if progress.trials >= self.options.per_task_trials() or self._global_budget_left() <= 0:
            return True
        patience = self.options.early_stopping
        return patience is not None and progress.trials_since_improvement >= patience

    def _start_task(self) -> None:
        from tvm.s_tir import meta_schedule as ms

        index = self._task_index
        task = self.tasks[index]
        options = self.options
        if options.search_strategy == "evolutionary":
            strategy = ms.search_strategy.EvolutionarySearch(
                population_size=options.population,
                genetic_num_iters=options.genetic_iterations,
                eps_greedy=options.eps_greedy,
            )
        else:
            strategy = options.search_strategy
        seed = -1 if options.seed is None else options.seed + index
        context = ms.TuneContext(
            mod=task.dispatched[0], target=self._tvm_target,
            space_generator="post-order-apply", search_strategy=strategy,
            task_name=task.task_name, rand_state=seed, num_threads=self._num_threads,
        )
        workload = self._workloads[index] = self._database.commit_workload(context.mod)
        progress = self.progress[index]
        progress.trials = self._measured_before.get(str(workload.as_json()[0]), 0)
        budget = int(min(options.per_task_trials() - progress.trials,
                         self._global_budget_left()))
        context.pre_tuning(max_trials=budget, num_trials_per_iter=options.resolved_batch_size(),
                           database=self._database, cost_model=self._cost_model)
        if options.transfer_learning:
            self._warm_cost_model(context, workload)
        self._tune_contexts[index] = context

    def _warm_cost_model(self, context, workload) -> None:
        """Train the cost model on the best records known for this workload (an index
        lookup: the store is never read whole)."""
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        records = self._database.get_top_k(workload, TRANSFER_RECORDS)
        if records:
            self._cost_model.update(
                context, [r.as_measure_candidate() for r in records],
                [RunnerResult(list(r.run_secs), None) for r in records])
            best = min(_mean_seconds(r.run_secs) or math.inf for r in records)
            progress = self.progress[self._task_index]
            progress.best_latency_s = min(progress.best_latency_s, best)

    def _note_errors(self, messages) -> None:
        for message in messages:
            if message:
                self.progress[self._task_index].last_error = _first_line(message)

    def _skip_task(self, reason: str) -> None:
        """Give up on the current task: it keeps TVM's default schedule, the reason goes
        to the summary, and the budget to the other tasks. One task MetaSchedule cannot
        schedule (a design space it fails to generate, candidates that all fail) must
        not cost the job the work done on every other task."""
        progress = self.progress[self._task_index]
        progress.skipped = reason
        context = self._tune_contexts.pop(self._task_index, None)
        if context is not None:
            try:
                context.post_tuning()
            except Exception:  # noqa: BLE001 - its search state is broken: drop it
                pass
        if self.context is not None:
            self.context.logger.warning("task %d/%d %s skipped, it keeps TVM's default "
                                        "schedule: %s", self._task_index + 1,
                                        len(self.tasks), progress.name, reason)
        self._finish_task()

    def _finish_task(self) -> None:
        context = self._tune_contexts.pop(self._task_index, None)
        if context is not None:
            context.post_tuning()
        progress = self.progress[self._task_index]
        progress.done = True
        if self.context is not None:
            best = (f"{progress.best_latency_s * 1e3:.4f} ms"
                    if math.isfinite(progress.best_latency_s) else "none")
            self.context.logger.info(
                "task %d/%d %s tuned: %d trials, %d errors, best %s", self._task_index + 1,
                len(self.tasks), progress.name, progress.trials, progress.errors, best)
        self._phase = "select"
        self._task_index = self._next_task()

    def _ensure_runner(self):
        if self._runner is None:
            from tvm.s_tir import meta_schedule as ms

            from .orphans import exit_with_parent

            self._runner = ms.runner.LocalRunner(
                timeout_sec=self.options.resolved_timeout(self.target.device_type),
                initializer=exit_with_parent,
                evaluator_config=evaluator_config(self.options, self.target.device_type),
            )
        return self._runner


def evaluator_config(options: TuningOptions, device_type: str):
    """How the profile stage times a candidate (see :class:`TuningOptions`)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.EvaluatorConfig(
        number=options.number, repeat=options.repeat, min_repeat_ms=options.min_repeat_ms,
        enable_cpu_cache_flush=options.cache_flush and device_type == "cpu")


MIN_FIRST_ROUND = 2  # trials a task's first iteration measures, however small the task
FIRST_ROUND_SHARE = 0.3  # part of a total_trials budget the first round shares out by FLOPs
FIRST_ROUND_PER_TASK = 8  # ... and at most this many trials per task on average


def task_flops(task) -> float:
    """FLOPs of one call of a task's PrimFunc (TVM's static estimate)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(task.dispatched[0]))
    except Exception:  # noqa: BLE001 - an unestimable task counts as small
        return 0.0


def first_round_trials(flops: list[float], options: TuningOptions) -> list[int]:
    """How many candidates each task's first iteration measures: its share of the
    model's FLOPs of about a third of the budget (of FIRST_ROUND_PER_TASK per task on
    average when the budget is open-ended or in minutes), at least MIN_FIRST_ROUND and at
    most a batch. A first round of one batch per task spent 608 of 800 trials on
    MobileNetV2, 144 of them on 9 tasks holding under 0.5% of its FLOPs."""
    batch = options.resolved_batch_size()
    pool = FIRST_ROUND_PER_TASK * len(flops)
    if options.total_trials is not None:
        pool = min(pool, FIRST_ROUND_SHARE * options.total_trials)
    total = sum(flops)
    if total <= 0:
        return [min(batch, max(MIN_FIRST_ROUND, int(pool / max(1, len(flops)))))] * len(flops)
    return [min(batch, max(MIN_FIRST_ROUND, round(pool * f / total))) for f in flops]


# best records per workload that warm the cost model: MetaSchedule decodes a record by
# replaying its trace on the workload (10-30 ms for a convolution here), at task start
TRANSFER_RECORDS = 64
FAILED_CANDIDATES_TO_SKIP = 8  # measured candidates, none working: the task is skipped


def _first_line(error) -> str:
    """The gist of an error message (TVM's span several screens), at most 300 characters."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    gist = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "")
    return gist[:300]


def _mean_seconds(run_secs) -> float | None:
    values = [float(v) for v in (run_secs or [])]
    return sum(values) / len(values) if values else None
