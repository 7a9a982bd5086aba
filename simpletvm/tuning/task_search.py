"""One task's search inside a tuning job: MetaSchedule's search strategy over the task's
design spaces, the random sampling that stands in for it while the cost model is cold,
the task's default schedule until its first batch, and the modules measured, so that no
module is measured twice."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from simpletvm.compiler.core_split import space_generator
from simpletvm.errors import error_gist
from simpletvm.tuning.candidate_check import mean_seconds


@dataclass
class TaskSearch:
    """The search state of one task; ``context`` is set while the search is open."""

    task: Any  # MetaSchedule's ExtractedTask
    workload: Any = None  # the task's workload in the record database, once committed
    context: Any = None  # the TuneContext of its search strategy
    sampler: Any = None  # the TuneContext of its cold-start sampling, while it draws fresh
    default: Any = None  # its default schedule as a candidate, until its first batch
    measured: set[int] = field(default_factory=set)  # digests of the modules measured
    # the closing round: traces of its best records timed again (tried, succeeded)
    remeasure_tried: set[str] = field(default_factory=set)
    remeasure_done: set[str] = field(default_factory=set)

    @property
    def is_open(self) -> bool:
        return self.context is not None

    def offered(self, cold: bool) -> tuple[int, list[tuple[int, Any]], bool]:
        """How many candidates the search offered, those not measured yet (with their
        digests), and whether they were drawn by the cold-start sampling: while the cost
        model is ``cold``, unless the draws repeat what was measured or each other (a
        small design space, which the search enumerates and then ends)."""
        if cold and self.sampler is not None:
            draws = list(self.sampler.search_strategy.generate_measure_candidates() or [])
            fresh = self.not_measured(draws)
            if draws and len(fresh) == len(draws):
                return len(draws), fresh, True
            sampler, self.sampler = self.sampler, None
            sampler.post_tuning()
        offered = list(self.context.search_strategy.generate_measure_candidates() or [])
        return len(offered), self.not_measured(offered), False

    def with_default(self, fresh: list) -> list:
        """``fresh`` with the task's default schedule first, in its first batch, so
        tuning never ends worse than the untuned build (unless measured before)."""
        default, self.default = self.default, None
        if default is None:
            return fresh
        digest = module_hash(default.sch.mod)
        if digest in self.measured or any(d == digest for d, _ in fresh):
            return fresh
        return [(digest, default), *fresh]

    def not_measured(self, candidates: list) -> list[tuple[int, Any]]:
        """The candidates neither this job nor a stopped run under its id measured, each
        once, with their modules' digests (the search and the cold-start sampling do not
        know each other's)."""
        fresh: dict[int, Any] = {}
        for candidate in candidates:
            digest = module_hash(candidate.sch.mod)
            if digest not in self.measured:
                fresh.setdefault(digest, candidate)
        return list(fresh.items())

    def records_to_time_again(self, own_records, workload, count: int) -> list:
        """The task's ``count`` best records of this run not tried in the closing round
        yet (``own_records``: the run's record database); they count as tried."""
        tried = self.remeasure_tried
        records = [
            record
            for record in own_records.get_top_k(workload, count + len(tried))
            if str(record.trace) not in tried
        ][:count]
        tried.update(str(record.trace) for record in records)
        return records

    def commit_timed_again(self, own_records, workload, records: list, results: list):
        """Replace the ``records``' latencies by those timed again (``results``); returns
        each one's latency (None: it failed), the task's best latency now and whether
        the best is a record timed again."""
        from tvm.s_tir.meta_schedule.database import TuningRecord

        latencies = []
        for record, result in zip(records, results):
            latency = mean_seconds(result.run_secs)
            latencies.append(latency)
            if latency is not None:
                own_records.commit_remeasured(
                    TuningRecord(
                        record.trace,
                        record.workload,
                        result.run_secs,
                        record.target,
                        record.args_info,
                    )
                )
                self.remeasure_done.add(str(record.trace))
        best = own_records.get_top_k(workload, 1)
        best_s = mean_seconds(best[0].run_secs) if best else None
        return latencies, best_s, bool(best) and str(best[0].trace) in self.remeasure_done

    def close(self) -> None:
        """End the search and its sampling (a skipped task's state may be broken: its
        errors are ignored)."""
        contexts = [c for c in (self.context, self.sampler) if c is not None]
        self.context = self.sampler = None
        for context in contexts:
            try:
                context.post_tuning()
            except Exception:  # noqa: BLE001 - a skipped task's search state may be broken
                pass


@dataclass(frozen=True)
class SearchSetup:
    """What every task's search of a job shares: where its code runs, the threads that
    search, the record database the search reads its best from, the trials it selects
    per iteration."""

    tvm_target: Any
    num_threads: Any
    database: Any
    candidates_per_iteration: int

    def tune_context(self, mod, name: str, strategy, seed: int):
        """A TuneContext over the task's design spaces, as tuning generates them."""
        from tvm.s_tir import meta_schedule as ms

        return ms.TuneContext(
            mod=mod,
            target=self.tvm_target,
            space_generator=space_generator(mod, self.tvm_target),
            search_strategy=strategy,
            task_name=name,
            rand_state=seed,
            num_threads=self.num_threads,
        )

    def begin(self, context, spaces: list, budget: int, cost_model) -> None:
        """Ready ``context``'s search over ``spaces`` for ``budget`` trials."""
        context.pre_tuning(
            max_trials=budget,
            num_trials_per_iter=self.candidates_per_iteration,
            design_spaces=spaces,
            database=self.database,
            cost_model=cost_model,
        )

    def cold_sampler(self, context, spaces: list, budget: int, seed: int, cost_model):
        """The task's design spaces sampled at random (MetaSchedule's ReplayTrace), what
        the evolutionary search's first selects amount to while the cost model predicts
        at random, at a fraction of their cost: they sample and mutate a whole population
        to keep a batch picked by random scores."""
        from tvm.s_tir import meta_schedule as ms

        sampler = self.tune_context(
            context.mod, context.task_name, ms.search_strategy.ReplayTrace(), seed
        )
        self.begin(sampler, spaces, budget, cost_model)
        return sampler


def search_strategy(options):
    """The search strategy ``options`` name, as MetaSchedule's TuneContext takes it."""
    from tvm.s_tir import meta_schedule as ms

    if options.search_strategy != "evolutionary":
        return options.search_strategy
    return ms.search_strategy.EvolutionarySearch(
        population_size=options.population,
        genetic_num_iters=options.genetic_iterations,
        eps_greedy=options.eps_greedy,
    )


def default_candidate(context, tvm_target, logger=None):
    """The task's default schedule as a candidate (None: it has none; the task is tuned
    from the search's candidates alone)."""
    from simpletvm.compiler.default_schedules import default_candidate as candidate

    try:
        return candidate(context.mod, tvm_target, context=context)
    except Exception as error:  # noqa: BLE001 - the search still has its own
        if logger is not None:
            logger.warning("%s has no default schedule: %s", context.task_name, error_gist(error))
        return None


def measured_modules(own_records, workload, count: int) -> set[int]:
    """Digests of the modules a stopped run under this id measured for the task (its
    ``count`` records). MetaSchedule's search only remembers what it measured itself (it
    picks the database's best into each population), so a resumed search would offer
    them again."""
    if not count:
        return set()
    return {
        module_hash(record.as_measure_candidate().sch.mod)
        for record in own_records.get_top_k(workload, count)
    }


def log_task_end(logger, index: int, count: int, progress) -> None:
    """Log how task ``index`` (of ``count``) ended: skipped, or tuned (a progress
    display may leave these out)."""
    if progress.skipped:
        logger.warning(
            "task %d/%d %s skipped, it is built with its default schedule: %s",
            index + 1,
            count,
            progress.name,
            progress.skipped,
            extra={"tuning_task": True},
        )
        return
    best = (
        f"{progress.best_latency_s * 1e3:.4f} ms"
        if math.isfinite(progress.best_latency_s)
        else "none"
    )
    logger.info(
        "task %d/%d %s tuned: %d trials, %d errors, best %s",
        index + 1,
        count,
        progress.name,
        progress.trials,
        progress.errors,
        best,
        extra={"tuning_task": True},
    )


def task_flops(task) -> float:
    """FLOPs of one call of a task's PrimFunc (TVM's static estimate)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(task.dispatched[0]))
    except Exception:  # noqa: BLE001 - an unestimable task counts as small
        return 0.0


def module_hash(mod) -> int:
    import tvm_ffi

    return int(tvm_ffi.structural_hash(mod))
