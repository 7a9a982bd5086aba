"""The decisions of a tuning job, without TVM: events in, the next stage out.

A :class:`TuningPlan` knows the tasks (names, weights, FLOPs), the options and what a
resumed run measured before. It says which stage comes next and whether it needs the
device, how many of the selected candidates an iteration measures, and when a task or
the whole job is done: the per-task cap, ``total_trials``, the wall-clock budget, early
stopping, and skipping a task that cannot be tuned. When the search is over, a closing
round measures each task's best few records again (heaviest tasks first; a ``minutes``
budget keeps the time it is expected to take): a search's best can be a lucky timing,
so the estimate only holds once it is timed anew. The executor
(:class:`~simpletvm.tuning.job.TuningJob`) does what a stage says with MetaSchedule and
reports back what happened (:meth:`selected`, :meth:`built`, :meth:`profiled`,
:meth:`measured`, :meth:`remeasured`, :meth:`task_failed`); everything here is tested
without TVM.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from simpletvm.errors import SimpleTVMError
from simpletvm.tuning.estimate import tuning_summary
from simpletvm.tuning.options import TuningOptions
from simpletvm.tuning.tasks import TaskProgress, next_task


class Phase(StrEnum):
    """The stage a task's iteration is in: a closed set, entered in this order, each
    left only by the event that ends it (a str, so ``phase == "select"`` reads as the
    stage's name does in records and traces)."""

    SELECT = "select"
    BUILD = "build"
    PROFILE = "profile"
    UPDATE = "update"


class PlanOrderError(SimpleTVMError):
    """An event arrived in a phase that does not expect it: the executor and the plan
    disagree on where the iteration is (a bug, never a user's mistake)."""

    def __init__(self, event: str, phase: Phase, expected: Phase) -> None:
        super().__init__(event, phase, expected)
        self.event, self.phase, self.expected = event, phase, expected

    def __str__(self) -> str:
        return (
            f"tuning plan: {self.event}() arrived in the {self.phase} phase; "
            f"it ends the {self.expected} phase"
        )


STAGES = tuple(phase.value for phase in Phase)
DEVICE_STAGES = frozenset({Phase.PROFILE.value})

MIN_FIRST_ROUND = 2  # trials a task's first iteration measures, however small the task
FIRST_ROUND_SHARE = 0.3  # part of a total_trials budget the first round shares out by FLOPs
FIRST_ROUND_PER_TASK = 8  # ... and at most this many trials per task on average
FAILED_CANDIDATES_TO_SKIP = 8  # measured candidates, none working: the task is skipped
# iterations every task of both rival forms gets before the slower form is handicapped:
# a Winograd task's first candidates can be several times slower than its tuned ones
RIVAL_MIN_ITERATIONS = 3
# the closing round's share of a minutes budget: what the search's own build and profile
# times say it takes, with REMEASURE_MARGIN for its select stages and smaller batches,
# at most REMEASURE_SHARE (the heaviest tasks come first, so a cut leaves light ones)
REMEASURE_SHARE = 0.1
REMEASURE_MARGIN = 3.0
# re-measure rounds a task gets for its best record to be one measured again (when the
# re-measured ones all got slower, the next best record may be a lucky one too)
REMEASURE_ROUNDS = 2


@dataclass(frozen=True)
class StageSpec:
    """The next stage of a job; ``on_device`` says whether it runs on the target device
    (a scheduler's adapter names the resource)."""

    kind: Phase
    task: int
    task_name: str
    iteration: int
    remeasure: bool = False  # of the closing round: the task's best records timed again

    @property
    def on_device(self) -> bool:
        return self.kind in DEVICE_STAGES


def first_round_trials(flops: Sequence[float], options: TuningOptions) -> list[int]:
    """How many candidates each task's first iteration measures: its share of the
    model's FLOPs of about a third of the budget (of FIRST_ROUND_PER_TASK per task on
    average when the budget is open-ended or in minutes), at least MIN_FIRST_ROUND and at
    most a batch. A first round of one batch per task would spend 608 of 800 trials on
    MobileNetV2, 144 of them on 9 tasks holding under 0.5% of its FLOPs."""
    batch = options.candidates_per_iteration
    pool = FIRST_ROUND_PER_TASK * len(flops)
    if options.total_trials is not None:
        pool = min(pool, FIRST_ROUND_SHARE * options.total_trials)
    total = sum(flops)
    if total <= 0:
        return [min(batch, max(MIN_FIRST_ROUND, int(pool / max(1, len(flops)))))] * len(flops)
    return [min(batch, max(MIN_FIRST_ROUND, round(pool * f / total))) for f in flops]


class TuningPlan:
    """Which task and stage come next, and how much each may measure.

    Args:
        names, weights, flops: per task (weight: calls per model run; flops: of one call).
        options: the job's options.
        measured_before: per task, the trials a stopped run under the same id measured;
            they count against every budget and are never measured again.
        rivals: pairs of task groups of which the model is built with one only (a
            layer in two forms, :mod:`simpletvm.compiler.conv_forms`): the estimate counts the
            faster group, and once every task of both had RIVAL_MIN_ITERATIONS, the
            slower group's tasks are measured further only when their expected gain
            exceeds the gap.
        after_s: seconds of a ``minutes`` budget kept for what follows the job (autotune's
            round of timing inside the model): the search and its closing round end that
            much before the budget does.
        budget_started: when a ``minutes`` budget began (the clock's seconds), when
            what precedes the first stage counts against it (autotune's whole wait);
            None: it begins with the first stage.
        clock: seconds (``time.time``); tests pass their own.
    """

    def __init__(
        self,
        names: Sequence[str],
        weights: Sequence[int],
        flops: Sequence[float],
        options: TuningOptions,
        measured_before: Sequence[int] | None = None,
        rivals: Sequence[tuple[Sequence[int], Sequence[int]]] = (),
        after_s: float = 0.0,
        budget_started: float | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.options = options
        self.after_s = after_s
        self.rivals = [(list(a), list(b)) for a, b in rivals]
        self.progress = [TaskProgress(name, int(weight)) for name, weight in zip(names, weights)]
        self.first_round = first_round_trials([f * int(w) for f, w in zip(flops, weights)], options)
        self.measured_before = list(measured_before or [0] * len(self.progress))
        for progress, before in zip(self.progress, self.measured_before):
            progress.trials = before
        self._clock = clock
        self._deadline: float | None = None  # set when the budget starts
        self._started_at: float | None = None  # ... and when that was
        if budget_started is not None:
            self._start_budget(budget_started)
        self._stage_began = 0.0
        self._candidates = 0  # of the current iteration, building or profiling
        self._candidate_s = {"build": [0.0, 0], "profile": [0.0, 0]}  # seconds, candidates
        self.remeasuring = False  # the closing round has begun
        self._remeasure_queue: list[int] = []
        self.phase = Phase.SELECT
        self.task: int | None = self._choose_task()

    # ---- what comes next ---------------------------------------------------------------
    def next_stage(self) -> StageSpec | None:
        if self.task is None:
            return None
        progress = self.progress[self.task]
        return StageSpec(
            self.phase,
            self.task,
            progress.name,
            progress.iterations + progress.remeasure_rounds,
            self.remeasuring,
        )

    def is_complete(self) -> bool:
        return self.task is None

    @property
    def trials(self) -> int:
        return sum(p.trials for p in self.progress)

    @property
    def started_at(self) -> float | None:
        """When the first stage began (the clock's seconds), None before."""
        return self._started_at

    @property
    def deadline(self) -> float | None:
        """When a ``minutes`` budget ends (the clock's seconds): None without one, or
        before the first stage."""
        return self._deadline

    @property
    def remeasure_left(self) -> int:
        """Tasks the closing round has still to time again (the current one included)."""
        return len(self._remeasure_queue)

    def now(self) -> float:
        """The plan's clock (progress displays read the time as the plan does)."""
        return self._clock()

    def stage_started(self) -> None:
        """A stage begins: the wall-clock budget runs from the first one, unless it
        began earlier (``budget_started``)."""
        self._stage_began = self._clock()
        if self._started_at is None:
            self._start_budget(self._stage_began)

    def _start_budget(self, when: float) -> None:
        self._started_at = when
        if self.options.minutes is not None:
            self._deadline = when + self.options.minutes * 60

    def closing_reserve(self) -> float:
        """Seconds of a ``minutes`` budget the search leaves to the closing round: its
        candidates (``remeasure`` per task with records) at the search's build and
        profile seconds per candidate, times REMEASURE_MARGIN; REMEASURE_SHARE of the
        budget until the search has timed any."""
        if not self.options.remeasure or self.options.minutes is None:
            return 0.0
        cap = REMEASURE_SHARE * self.options.minutes * 60
        if not all(count for _, count in self._candidate_s.values()):
            return cap
        per_candidate = sum(seconds / count for seconds, count in self._candidate_s.values())
        tasks = sum(1 for p in self.progress if not p.skipped)
        return min(cap, REMEASURE_MARGIN * tasks * self.options.remeasure * per_candidate)

    def _past_deadline(self) -> bool:
        """Whether the search has spent its part of a ``minutes`` budget (the rest is
        the closing round's, and what follows the job's)."""
        return self._deadline is not None and (
            self._clock() >= self._deadline - self.after_s - self.closing_reserve()
        )

    def task_budget(self) -> int:
        """The trials the current task may still measure (its search's max_trials)."""
        progress = self.progress[self.task]
        return int(min(self.options.per_task_trials() - progress.trials, self.budget_left()))

    def task_spent(self) -> bool:
        """True when the current task's budget is spent (e.g. by the run that resumed)."""
        progress = self.progress[self.task]
        if progress.trials >= self.options.per_task_trials() or self.budget_left() <= 0:
            return True
        patience = self.options.early_stopping
        return patience is not None and progress.trials_since_improvement >= patience

    def budget_left(self) -> float:
        """Trials the job may still measure; 0 once its wall-clock budget is over and
        every task has been measured (a task never measured is built with its default
        schedule, which no measurement has compared with any other)."""
        if self._past_deadline() and all(p.history or p.done for p in self.progress):
            return 0
        if self.options.total_trials is None:
            return math.inf
        return self.options.total_trials - max(self.trials, sum(self.measured_before))

    def batch_limit(self) -> int:
        """How many of the selected candidates this iteration may measure.

        A task's first iteration measures its FLOPs-sized share; no iteration measures
        more than what is left of the job's budget, and in the first round no more than
        a fair share of it, so that a tight ``total_trials`` still measures every task.
        Candidates come best-predicted first."""
        limit = self.options.candidates_per_iteration
        if not self.progress[self.task].history:
            # past a minutes budget a task not yet measured gets the fewest trials that
            # replace its naive schedule: a budget too short for every task's first round
            # still ends near its deadline instead of running every first round in full
            first = MIN_FIRST_ROUND if self._past_deadline() else self.first_round[self.task]
            limit = min(limit, first)
        left = self.budget_left()
        if math.isinf(left):
            return limit
        unmeasured = sum(1 for p in self.progress if not p.done and not p.history)
        if unmeasured and self.options.task_scheduler == "gradient":
            left = left // unmeasured
        return max(1, min(limit, int(left)))

    # ---- events ------------------------------------------------------------------------
    def selected(self, count: int) -> int:
        """The search (or the closing round) offered ``count`` candidates; returns how
        many to build (0: the task's search, or its re-measure, is over)."""
        self._expect("selected", Phase.SELECT)
        take = count if self.remeasuring else min(count, self.batch_limit(), self.task_budget())
        if take <= 0:  # (the budget ran out since the task was chosen)
            self.finish_task()
            return 0
        self.phase = Phase.BUILD
        self._candidates = take
        return take

    def known_best(self, latency: float) -> None:
        """The current task's best latency known from earlier runs (transfer learning)."""
        progress = self.progress[self.task]
        progress.best_latency_s = min(progress.best_latency_s, latency)

    def built(self, errors: int) -> None:
        self._expect("built", Phase.BUILD)
        self.progress[self.task].errors += errors
        self._stage_timed("build")
        self.phase = Phase.PROFILE

    def profiled(self, errors: int) -> None:
        self._expect("profiled", Phase.PROFILE)
        self.progress[self.task].errors += errors
        self._stage_timed("profile")
        self.phase = Phase.UPDATE

    def _expect(self, event: str, phase: Phase) -> None:
        """Refuse an event the current phase does not end."""
        if self.phase is not phase:
            raise PlanOrderError(event, self.phase, phase)

    def _stage_timed(self, kind: str) -> None:
        """A search stage that started at ``stage_started`` ended: its seconds per
        candidate tell how long the closing round will take."""
        if not self.remeasuring:
            timed = self._candidate_s[kind]
            timed[0] += self._clock() - self._stage_began
            timed[1] += self._candidates

    def measured(self, latencies: Sequence[float | None], last_error: str | None = None) -> None:
        """The candidates' mean latencies (None: it failed); ends the iteration and picks
        what comes next."""
        self._expect("measured", Phase.UPDATE)
        progress = self.progress[self.task]
        for latency in latencies:
            progress.trials += 1
            if latency is not None and latency < progress.best_latency_s:
                progress.best_latency_s = latency
                progress.trials_since_improvement = 0
            else:
                progress.trials_since_improvement += 1
        if last_error:
            progress.last_error = last_error
        progress.record_iteration()
        if progress.trials >= FAILED_CANDIDATES_TO_SKIP and not math.isfinite(
            progress.best_latency_s
        ):
            self.task_failed(
                f"all {progress.trials} candidates failed; the last: {progress.last_error}"
            )
        elif self.task_spent():
            self.finish_task()
        else:
            self.phase = Phase.SELECT
            self.task = self._choose_task()

    def remeasured(
        self, latencies: Sequence[float | None], best_latency_s: float | None, best_remeasured: bool
    ) -> None:
        """The closing round timed the current task's best records again: ``latencies``
        (None: it failed), its best latency now (``best_remeasured``: that of a record
        measured again). The task is settled when its best was re-measured, or after
        REMEASURE_ROUNDS rounds."""
        self._expect("remeasured", Phase.UPDATE)
        progress = self.progress[self.task]
        progress.remeasured += sum(1 for latency in latencies if latency is not None)
        progress.remeasure_rounds += 1
        if best_latency_s is not None:
            progress.best_latency_s = best_latency_s
        if best_remeasured or progress.remeasure_rounds >= REMEASURE_ROUNDS:
            self.finish_task()
        else:
            self.phase = Phase.SELECT
            self.task = self._choose_task()

    def task_failed(self, reason: str) -> None:
        """The current task cannot be tuned: it is built with its default schedule, the reason
        goes to the summary, and the budget to the other tasks."""
        self.progress[self.task].skipped = reason
        self.finish_task()

    def finish_task(self) -> None:
        """The current task's search (or, in the closing round, its re-measure) is over."""
        if self.remeasuring:
            self._remeasure_queue.remove(self.task)
        else:
            self.progress[self.task].done = True
        self.phase = Phase.SELECT
        self.task = self._choose_task()

    def _choose_task(self) -> int | None:
        if not self.remeasuring:
            task = self._next_search_task()
            if task is not None:
                return task
            self._begin_remeasure()
        if self._deadline is not None and self._clock() >= self._deadline - self.after_s:
            self._remeasure_queue.clear()
        return self._remeasure_queue[0] if self._remeasure_queue else None

    def _next_search_task(self) -> int | None:
        if self.budget_left() <= 0:
            return None
        for progress in self.progress:  # spent before a resume: nothing left to measure
            if not progress.done and progress.trials >= self.options.per_task_trials():
                progress.done = True
        return next_task(self.progress, self.options.task_scheduler, self._handicaps())

    def _begin_remeasure(self) -> None:
        """The search is over: queue the tasks with records, heaviest first, so that a
        wall-clock budget running out leaves only light tasks unverified."""
        self.remeasuring = True
        for progress in self.progress:
            progress.search_best_s = progress.best_latency_s
        if not self.options.remeasure:
            return

        def weighted(index: int) -> float:
            progress = self.progress[index]
            best = progress.best_latency_s
            return progress.weight * best if math.isfinite(best) else 0.0

        tuned = [
            index
            for index, progress in enumerate(self.progress)
            if progress.trials and not progress.skipped
        ]
        self._remeasure_queue = sorted(tuned, key=weighted, reverse=True)

    def _group_latency(self, group: Sequence[int]) -> float:
        """Calls x best latency of a group's tasks (inf until each has a measurement)."""
        return sum(self.progress[i].weight * self.progress[i].best_latency_s for i in group)

    def _losers(self, rivals=None) -> dict[int, float]:
        """Tasks of the slower group of each measured rivalry (of ``rivals``, default
        all) -> the gap in seconds."""
        losers: dict[int, float] = {}
        for first, second in self.rivals if rivals is None else rivals:
            a, b = self._group_latency(first), self._group_latency(second)
            if math.isfinite(a) and math.isfinite(b):
                loser, gap = (second, b - a) if b >= a else (first, a - b)
                losers.update({index: gap for index in loser})
        return losers

    def _handicaps(self) -> dict[int, float]:
        if self.options.task_scheduler != "gradient":
            return {}
        settled = [
            (first, second)
            for first, second in self.rivals
            if all(self.progress[i].iterations >= RIVAL_MIN_ITERATIONS for i in [*first, *second])
        ]
        return self._losers(settled)

    # ---- what it amounts to -----------------------------------------------------------
    def summary(self) -> dict:
        """Per-task trials, errors and best latency, the weighted model estimate (of the
        tuned tasks; before the closing round too), and the tasks skipped because they
        could not be tuned."""
        return tuning_summary(self.progress, self.rivals, self.trials)
