"""Which task a tuning job measures next: every task once, then where latency falls most."""

import math

import pytest

from simpletvm.tuning.options import TuningOptions
from simpletvm.tuning.plan import MIN_FIRST_ROUND, first_round_trials
from simpletvm.tuning.tasks import TaskProgress, expected_gain, next_task


def _task(name, weight=1, history=(), done=False):
    task = TaskProgress(name, weight, done=done)
    for best in history:
        task.best_latency_s = best
        task.record_iteration()
    return task


def test_every_task_is_measured_once_in_order_before_any_is_measured_twice():
    tasks = [_task("a", history=[1.0]), _task("b"), _task("c", done=True), _task("d")]
    assert next_task(tasks) == 1
    tasks[1] = _task("b", history=[2.0])
    assert next_task(tasks) == 3


def test_the_heaviest_weighted_latency_wins_once_all_are_measured():
    light = _task("light", weight=1, history=[0.010])
    heavy = _task("heavy", weight=4, history=[0.010])  # same kernel, four times per model
    slow = _task("slow", weight=1, history=[0.030])
    assert next_task([light, heavy, slow]) == 1
    assert expected_gain(heavy) > expected_gain(slow) > expected_gain(light)


def test_a_task_tuned_often_yields_to_one_still_improving():
    # equal best latencies: the one with fewer iterations has more left to gain
    veteran = _task("veteran", history=[0.02] * 8)
    newcomer = _task("newcomer", history=[0.02])
    assert next_task([veteran, newcomer]) == 1
    # recent improvement counts: a task that just fell fast is worth another look
    improving = _task("improving", history=[0.08, 0.06, 0.04, 0.02, 0.02, 0.02, 0.02, 0.02])
    stalled = _task("stalled", history=[0.02] * 8)
    assert expected_gain(improving) == pytest.approx(0.2 * (0.02 - 0.02) / 3 + 0.8 * 0.02 / 8)
    improving.history.append(0.01)  # fell by half in its last iteration
    assert next_task([_task("stalled", history=[0.01] * 9), improving]) == 1
    assert next_task([stalled, improving]) == 0  # a slower task still weighs more


def test_tasks_without_a_measurement_wait_and_done_tasks_are_never_chosen():
    failing = _task("failing", history=[math.inf, math.inf])
    working = _task("working", history=[0.001] * 20)
    assert expected_gain(failing) == 0.0
    assert next_task([failing, working]) == 1
    assert next_task([failing, _task("w", history=[0.001], done=True)]) == 0
    assert next_task([_task("x", done=True)]) is None


def test_sequential_order_keeps_to_the_first_task_not_done():
    tasks = [_task("a", done=True), _task("b", history=[0.001] * 3), _task("c", weight=9)]
    assert next_task(tasks, "sequential") == 1
    assert next_task(tasks, "gradient") == 2


def test_the_first_round_is_sized_by_each_tasks_share_of_the_flops():
    # one heavy task, a middling one and three that hold almost nothing
    flops = [8e8, 1e8, 1e5, 1e5, 0.0]
    first = first_round_trials(flops, TuningOptions(total_trials=200, candidates_per_iteration=16))
    assert first[0] == 16  # capped at a batch
    assert MIN_FIRST_ROUND < first[1] < 16  # its share of 0.3 x 200 trials
    assert first[2:] == [MIN_FIRST_ROUND] * 3  # tiny tasks: a couple of trials each
    # without a total, a few trials per task on average, shared out alike
    even = first_round_trials([1.0, 1.0], TuningOptions(candidates_per_iteration=16))
    assert even[0] == even[1] and MIN_FIRST_ROUND < even[0] < 16


def test_a_job_bounded_by_minutes_or_total_trials_has_no_per_task_cap():
    from simpletvm.tuning.options import DEFAULT_TRIALS

    assert TuningOptions().per_task_trials() == DEFAULT_TRIALS
    assert TuningOptions(trials=8, minutes=5).per_task_trials() == 8
    for bounded in (TuningOptions(minutes=5), TuningOptions(total_trials=800)):
        assert bounded.per_task_trials() > 800  # the gradient order decides, not a cap
