"""The tuning curve read from a context's stages."""

import pytest

from simpletvm.tuning import tuning_curve


def _update(task, trials, best, end):
    return {
        "stage": "update",
        "task_name": task,
        "trials": trials,
        "best_latency_s": best,
        "start": end - 1,
        "end": end,
    }


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


def test_of_two_rival_forms_of_a_layer_the_curve_counts_the_faster():
    context = {
        "tuning": {
            "tasks": [
                {"task": "shared", "weight": 1},
                {"task": "f4", "weight": 2},
                {"task": "direct", "weight": 2},
            ],
            "rivals": [[["f4"], ["direct"]]],
        },
        "stages": [
            _update("shared", 2, 0.001, 101.0),
            _update("f4", 2, 0.004, 102.0),
            _update("direct", 2, 0.003, 103.0),
            _update("f4", 4, 0.001, 104.0),
        ],
    }
    curve = tuning_curve(context)
    # f4 first counts at 4 ms (x2), direct at 3 ms (x2): 1 + 6; then f4 at 1 ms: 1 + 2
    assert curve["estimated_latency_ms"].tolist() == pytest.approx([7.0, 7.0, 7.0, 3.0])
