"""Per-task progress of a tuning job, and which task it measures next.

A model's latency is the weighted sum of its tasks' latencies, so the next iteration is
worth most on the task whose weighted latency it is expected to lower most. The
``gradient`` order (Ansor's task scheduler, as MetaSchedule's GradientBased) measures
every task once, in order, so that each has a latency to reason from, then always picks
the task with the largest expected gain: its weight times a blend of its recent
improvement per iteration and its best latency divided by its iterations (the share a
further iteration may still remove). Budget flows to the few tasks that dominate the
latency, and the model's estimate falls from the first round on. ``sequential`` tunes
each task to the end of its budget before the next, the thesis' order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

TASK_SCHEDULERS = ("gradient", "sequential")
ALPHA = 0.2  # weight of the recent improvement against the best / iterations term
WINDOW = 3  # iterations the recent improvement is measured over


@dataclass
class TaskProgress:
    name: str
    weight: int
    trials: int = 0
    errors: int = 0
    best_latency_s: float = math.inf
    trials_since_improvement: int = 0
    iterations: int = 0
    done: bool = False
    history: list[float] = field(default_factory=list)  # best latency after each iteration
    skipped: str | None = (
        None  # why the task could not be tuned (it is built with its default schedule)
    )
    last_error: str | None = None  # of its most recent failed candidate
    search_best_s: float | None = None  # its best when the search ended
    remeasured: int = 0  # of its best records, timed again in the closing round
    remeasure_rounds: int = 0

    def record_iteration(self) -> None:
        self.iterations += 1
        self.history.append(self.best_latency_s)


def next_task(
    progress: Sequence[TaskProgress],
    order: str = "gradient",
    handicap: Mapping[int, float] | None = None,
) -> int | None:
    """Index of the task to measure next, or None when every task is done.

    ``handicap``: seconds a task's gain must exceed before it lowers the model's
    latency at all (a task of a layer's form that is slower than the layer's other form
    by that much)."""
    alive = [index for index, task in enumerate(progress) if not task.done]
    if not alive:
        return None
    if order == "sequential":
        return alive[0]
    unmeasured = [index for index in alive if not progress[index].history]
    if unmeasured:
        return unmeasured[0]
    handicap = handicap or {}
    return max(
        alive, key=lambda index: (expected_gain(progress[index]) - handicap.get(index, 0.0), -index)
    )


def expected_gain(task: TaskProgress) -> float:
    """Seconds of model latency the task's next iteration is expected to remove.

    A task with no successful measurement yet has nothing to reason from and gets 0:
    it is measured again only once no other task promises a gain.
    """
    if not task.history or not math.isfinite(task.history[-1]):
        return 0.0
    best = task.history[-1]
    earlier = task.history[-1 - WINDOW] if len(task.history) > WINDOW else math.inf
    recent = (earlier - best) / WINDOW if math.isfinite(earlier) else 0.0
    return task.weight * (ALPHA * recent + (1 - ALPHA) * best / len(task.history))
