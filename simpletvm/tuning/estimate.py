"""What a tuning job amounts to: the model's estimate from its tasks' best latencies,
the form of each contested layer the build takes left out, and the summary a job
reports (per task, and for the model)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from simpletvm.compiler.winograd.policy import second_form_built
from simpletvm.tuning.tasks import TaskProgress


def built_estimate(
    latency: Mapping[Any, float],
    weights: Mapping[Any, int],
    rivals: Sequence[tuple[Sequence[Any], Sequence[Any]]],
) -> float:
    """The model's estimate: calls x best latency over the measured tasks (``latency``
    has those only), leaving out of each pair of rival task groups the form the build
    does not take (:func:`second_form_built`; a form counts once all its tasks are
    measured). The plan's summary and the tuning curve both use it."""

    def cost(group) -> float | None:
        if not all(task in latency for task in group):
            return None
        return sum(weights.get(task, 1) * latency[task] for task in group)

    left_out = set()
    for first, second in rivals:
        left_out.update(first if second_form_built(cost(first), cost(second)) else second)
    return sum(
        weights.get(task, 1) * seconds for task, seconds in latency.items() if task not in left_out
    )


def tuning_summary(
    progress: Sequence[TaskProgress],
    rivals: Sequence[tuple[Sequence[int], Sequence[int]]],
    trials: int,
) -> dict:
    """Per-task trials, errors and best latency, the weighted model estimate (of the
    tuned tasks; before the closing round too), and the tasks skipped because they
    could not be tuned (``rivals``: pairs of task groups, by index, the build takes one
    of)."""

    def finite(seconds: float | None) -> float | None:
        return seconds if seconds is not None and math.isfinite(seconds) else None

    tasks = [
        {
            "task": p.name,
            "weight": p.weight,
            "trials": p.trials,
            "errors": p.errors,
            "iterations": p.iterations,
            "best_latency_s": finite(p.best_latency_s),
            "search_best_latency_s": finite(p.search_best_s),
            "remeasured": p.remeasured,
            "skipped": p.skipped,
        }
        for p in progress
    ]
    weights = {i: p.weight for i, p in enumerate(progress)}

    def estimate(best: Sequence[float | None]) -> float:
        return built_estimate(
            {i: s for i, s in enumerate(best) if finite(s) is not None}, weights, rivals
        )

    rival_names = [[[progress[i].name for i in group] for group in pair] for pair in rivals]
    return {
        "tasks": tasks,
        "num_tasks": len(progress),
        "trials": trials,
        "rivals": rival_names,
        "errors": sum(p.errors for p in progress),
        "estimated_latency_s": estimate([p.best_latency_s for p in progress]),
        # the search's own estimate, before its best records were timed again
        "search_estimated_latency_s": estimate(
            [p.best_latency_s if p.search_best_s is None else p.search_best_s for p in progress]
        ),
        "remeasured": sum(p.remeasured for p in progress),
        "skipped_tasks": [{"task": p.name, "error": p.skipped} for p in progress if p.skipped],
    }
