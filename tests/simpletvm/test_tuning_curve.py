"""The tuning curve read from a context's stages."""

import pytest

from simpletvm.tuning import tuning_curve


def _update(task, trials, best, end):
    return {"stage": "update", "task_name": task, "trials": trials, "best_latency_s": best,
            "start": end - 1, "end": end}


def test_curve_counts_unmeasured_tasks_at_their_first_latency_and_ends_at_the_estimate():
    context = {
        "tuning": {"tasks": [{"task": "a", "weight": 2}, {"task": "b", "weight": 1}]},
        "stages": [
            {"stage": "select", "task_name": "a", "start": 100.0, "end": 101.0},
            _update("a", 2, 0.004, 102.0),
            _update("a", 4, 0.003, 104.0),
            _update("b", 2, 0.010, 106.0),
            _update("b", 4, None, 108.0),  # a batch that measured nothing keeps the best
        ],
    }
    curve = tuning_curve(context)
    assert list(curve["trials"]) == [2, 4, 6, 8]
    assert list(curve["elapsed_s"]) == [2.0, 4.0, 6.0, 8.0]
    assert curve["estimated_latency_ms"].tolist() == pytest.approx([18.0, 16.0, 16.0, 16.0])


def test_untuned_run_gives_an_empty_curve_with_the_columns():
    curve = tuning_curve({"stages": [], "tuning": {}})
    assert curve.empty and list(curve.columns) == ["trials", "elapsed_s", "estimated_latency_ms"]
