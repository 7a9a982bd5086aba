"""Tuning curves: how the model's estimated latency fell as trials were measured.

The estimate is MetaSchedule's: the sum over tasks of weight x best measured latency,
of the faster form only where a layer is tuned in two (the summary's ``rivals``).
Early in a run some tasks have no measurement yet (the first round of the gradient
order, or most of a sequential run); until a task is measured it counts at the first
latency it will be measured at, which makes every point of the curve a whole-model
figure and the last point the run's final estimate. The closing round's updates (stages
marked ``remeasure``) add no trials: they replace the search's best by the same records
timed again, so the curve's last points can rise to the estimate that holds.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from simpletvm.tuning.estimate import built_estimate

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
        estimate = built_estimate(best, weights, rivals)
        rows.append(
            {
                "trials": sum(trials_by_task.values()),
                "elapsed_s": stage["end"] - start,
                "estimated_latency_ms": estimate * 1e3,
            }
        )
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)
