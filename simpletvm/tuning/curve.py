"""Tuning curves: how the model's estimated latency fell as trials were measured.

The estimate is MetaSchedule's: the sum over tasks of weight x best measured latency,
of the faster form only where a layer is tuned in two (the summary's ``rivals``).
Early in a run some tasks have no measurement yet (the first round of the gradient
order, or most of a sequential run); until a task is measured it counts at the first
latency it will be measured at, which makes every point of the curve a whole-model
figure and the last point the run's final estimate.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .plan import second_form_built

CURVE_COLUMNS = ["trials", "elapsed_s", "estimated_latency_ms"]


def tuning_curve(context: Any) -> pd.DataFrame:
    """One row per update stage: cumulative trials, seconds since tuning began, estimate.

    ``context`` is a BenchmarkingContext or its saved dictionary (context.json). A run
    that did not tune gives an empty frame with the same columns.
    """
    data = context if isinstance(context, dict) else context.to_dict()
    tuning = data.get("tuning") or {}
    weights = {task["task"]: task["weight"] for task in tuning.get("tasks", [])}
    rivals = tuning.get("rivals", [])
    updates = [s for s in data.get("stages", []) if s["stage"] == "update"]
    if not updates or not weights:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    start = min(s["start"] for s in data["stages"])
    first_best: dict[str, float] = {}
    for stage in updates:
        if stage.get("best_latency_s") is not None:
            first_best.setdefault(stage["task_name"], stage["best_latency_s"])
    best = dict(first_best)
    trials_by_task: dict[str, int] = {}
    rows = []
    for stage in updates:
        name = stage["task_name"]
        trials_by_task[name] = stage.get("trials", 0)
        if stage.get("best_latency_s") is not None:
            best[name] = stage["best_latency_s"]
        estimate = _estimate(best, weights, rivals)
        rows.append({"trials": sum(trials_by_task.values()), "elapsed_s": stage["end"] - start,
                     "estimated_latency_ms": estimate * 1e3})
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def _estimate(best: dict[str, float], weights: dict[str, int], rivals: list) -> float:
    """Weight x best latency over the tasks measured so far; of two rival forms, the
    faster once both are measured, else the first (the one the build takes then)."""
    def cost(names) -> float | None:
        if not all(name in best for name in names):
            return None
        return sum(weights.get(name, 1) * best[name] for name in names)

    left_out = set()
    for first, second in rivals:
        left_out.update(first if second_form_built(cost(first), cost(second)) else second)
    return sum(weights.get(task, 1) * latency for task, latency in best.items()
               if task not in left_out)
