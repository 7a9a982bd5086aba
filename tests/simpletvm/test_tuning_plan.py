"""The tuning job's decisions without TVM: every test drives a TuningPlan with events and
checks the stages, budgets and task order it answers with."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from simpletvm.tuning.options import TuningOptions
from simpletvm.tuning.plan import (
    FAILED_CANDIDATES_TO_SKIP,
    MIN_FIRST_ROUND,
    REMEASURE_MARGIN,
    REMEASURE_ROUNDS,
    RIVAL_MIN_ITERATIONS,
    Phase,
    PlanOrderError,
    TuningPlan,
    first_round_trials,
)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plan_of(latencies_s, options, weights=None, flops=None, **kwargs) -> TuningPlan:
    names = [f"t{i}" for i in range(len(latencies_s))]
    return TuningPlan(
        names, weights or [1] * len(names), flops or [1e6] * len(names), options, **kwargs
    )


def iterate(plan: TuningPlan, latency_of, offered: int = 64, remeasured_as=None) -> tuple[int, int]:
    """One iteration of the current task: select, build, profile, update; returns
    (task, candidates measured). In the closing round the best records offered are
    timed at ``remeasured_as(task)`` (default: ``latency_of``) and each round settles
    its task."""
    assert plan.next_stage().kind == "select"
    task, closing = plan.task, plan.remeasuring
    assert plan.next_stage().remeasure == closing
    plan.stage_started()
    count = plan.selected(min(offered, plan.options.remeasure) if closing else offered)
    if count == 0:
        return task, 0
    assert plan.next_stage().kind == "build" and not plan.next_stage().on_device
    plan.built(0)
    assert plan.next_stage().kind == "profile" and plan.next_stage().on_device
    plan.profiled(0)
    assert plan.next_stage().kind == "update"
    if closing:
        latency = (remeasured_as or latency_of)(task)
        plan.remeasured([latency] * count, latency, True)
    else:
        plan.measured([latency_of(task)] * count)
    return task, count


def run_to_end(plan: TuningPlan, latency_of, limit=10_000) -> list[tuple[int, int]]:
    """The search's iterations, run to its end; then the closing round, to its end."""
    iterations = []
    while not plan.is_complete() and not plan.remeasuring and len(iterations) < limit:
        iterations.append(iterate(plan, latency_of))
    while not plan.is_complete():
        iterate(plan, latency_of)
    return iterations


# A fresh interpreter where importing TVM fails and the packages' __init__ files (which
# gather the modules that do use TVM) are skipped: only the plan and what it imports load.
PLAN_WITHOUT_TVM = """
import importlib, importlib.util, pathlib, sys, types

class NoTVM:
    def find_spec(self, name, path=None, target=None):
        if name == "tvm" or name.startswith("tvm."):
            raise ImportError(name + " is blocked")

sys.meta_path.insert(0, NoTVM())
root = pathlib.Path(importlib.util.find_spec("simpletvm").submodule_search_locations[0])
for init in root.rglob("__init__.py"):
    package = types.ModuleType(".".join(("simpletvm", *init.parent.relative_to(root).parts)))
    package.__path__ = [str(init.parent)]
    sys.modules[package.__name__] = package
importlib.import_module("simpletvm.tuning.plan")
"""


def test_the_plan_needs_no_tvm():
    done = subprocess.run(
        [sys.executable, "-c", PLAN_WITHOUT_TVM], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_every_task_first_measures_its_flops_share_then_the_heaviest_goes_on():
    options = TuningOptions(total_trials=60, candidates_per_iteration=8)
    plan = plan_of([0, 0, 0], options, weights=[1, 1, 4], flops=[1e9, 1e6, 1e9])
    assert plan.first_round == first_round_trials([1e9, 1e6, 4e9], options)
    assert plan.first_round[1] == MIN_FIRST_ROUND  # a tiny task gets a couple of trials
    latency = {0: 0.002, 1: 0.00001, 2: 0.002}
    iterations = run_to_end(plan, latency.get)
    assert [task for task, _ in iterations[:3]] == [0, 1, 2]  # the first round, in order
    assert [n for _, n in iterations[:3]] == plan.first_round
    assert iterations[3][0] == 2  # weight 4 x 2 ms: the heaviest
    assert plan.trials == 60 and plan.is_complete()  # the budget, exactly


def test_a_per_task_cap_ends_each_task():
    plan = plan_of([0, 0], TuningOptions(trials=10, candidates_per_iteration=4))
    run_to_end(plan, lambda task: 0.001)
    assert [p.trials for p in plan.progress] == [10, 10]
    assert all(p.done for p in plan.progress)


def test_early_stopping_ends_a_task_that_stopped_improving():
    plan = plan_of([0], TuningOptions(trials=64, candidates_per_iteration=4, early_stopping=8))
    iterations = run_to_end(plan, lambda task: 0.001)  # never better than its first candidate
    # 4 + 4 + 4 candidates: 3, 7, then 11 without improvement, past the patience of 8
    assert [n for _, n in iterations] == [4, 4, 4]
    assert plan.progress[0].done and plan.progress[0].trials_since_improvement == 11


def test_the_wall_clock_budget_stops_the_job_once_every_task_is_measured():
    clock = Clock()
    plan = plan_of([0, 0, 0], TuningOptions(minutes=1, candidates_per_iteration=4), clock=clock)
    task, _ = iterate(plan, lambda task: 0.001)
    clock.now += 120  # the budget is over after the first task's first iteration ...
    assert not plan.is_complete()
    late = [iterate(plan, lambda task: 0.001), iterate(plan, lambda task: 0.001)]
    assert all(p.history for p in plan.progress)  # ... but every task gets measured once,
    assert [n for _, n in late] == [MIN_FIRST_ROUND] * 2  # with the fewest trials
    assert plan.is_complete() and plan.budget_left() == 0


def test_a_resumed_run_counts_what_it_measured_before():
    options = TuningOptions(trials=12, total_trials=30, candidates_per_iteration=4)
    plan = plan_of([0, 0, 0], options, measured_before=[12, 5, 0])
    assert plan.progress[0].trials == 12
    run_to_end(plan, lambda task: 0.001)
    assert plan.progress[0].iterations == 0  # its budget was spent before the stop
    assert plan.trials == 30  # one budget across both attempts
    assert all(p.trials <= 12 for p in plan.progress)


def test_a_task_whose_candidates_all_fail_is_skipped_and_the_budget_goes_on():
    plan = plan_of([0, 0], TuningOptions(trials=12, candidates_per_iteration=4))
    iterations = run_to_end(plan, lambda task: None if task == 0 else 0.001)
    # a failing task has nothing to reason from: it waits until no other task promises
    # a gain, then fails until it is skipped
    assert [task for task, _ in iterations][:2] == [0, 1]
    assert plan.progress[0].skipped.startswith(f"all {FAILED_CANDIDATES_TO_SKIP} candidates failed")
    assert plan.progress[0].trials == FAILED_CANDIDATES_TO_SKIP
    assert plan.progress[1].trials == 12 and plan.is_complete()
    assert plan.summary()["skipped_tasks"][0]["task"] == "t0"


def test_a_task_the_search_cannot_schedule_is_skipped_at_once():
    plan = plan_of([0, 0], TuningOptions(trials=8, candidates_per_iteration=4))
    plan.task_failed("ScheduleError: reverse-compute-at")
    assert plan.task == 1 and plan.progress[0].skipped == "ScheduleError: reverse-compute-at"
    run_to_end(plan, lambda task: 0.001)
    assert plan.summary()["trials"] == 8


def test_an_exhausted_search_space_ends_its_task():
    plan = plan_of([0, 0], TuningOptions(trials=8, candidates_per_iteration=4))
    iterate(plan, lambda task: 0.001)
    assert plan.selected(0) == 0  # the search offered nothing
    assert plan.progress[plan.task - 1].done if plan.task else True


def test_sequential_order_tunes_each_task_to_its_end():
    plan = plan_of(
        [0, 0], TuningOptions(trials=8, candidates_per_iteration=4, task_scheduler="sequential")
    )
    tasks = [task for task, _ in run_to_end(plan, lambda task: 0.001)]
    assert tasks == sorted(tasks) and tasks[0] == 0 and tasks[-1] == 1


def test_the_estimate_weighs_each_task_by_its_calls():
    plan = plan_of([0, 0], TuningOptions(trials=2, candidates_per_iteration=2), weights=[3, 1])
    run_to_end(plan, {0: 0.002, 1: 0.001}.get)
    assert plan.summary()["estimated_latency_s"] == pytest.approx(3 * 0.002 + 0.001)
    assert math.isclose(plan.summary()["tasks"][0]["best_latency_s"], 0.002)


def test_rival_forms_count_once_and_the_slower_one_gets_less_budget():
    # t0 is shared; t1 and t2 are one layer in two forms, t2 the slower by 3 ms
    latency = {0: 1e-3, 1: 2e-3, 2: 5e-3}.__getitem__
    options = TuningOptions(total_trials=240, candidates_per_iteration=8)
    rivals = plan_of([0, 0, 0], options, rivals=[([1], [2])])
    plain = plan_of([0, 0, 0], options)
    with_rivals, without = run_to_end(rivals, latency), run_to_end(plain, latency)
    assert rivals.summary()["estimated_latency_s"] == pytest.approx(3e-3)  # t0 + t1
    assert plain.summary()["estimated_latency_s"] == pytest.approx(8e-3)

    def measured(iterations, task):
        return sum(n for t, n in iterations if t == task)

    assert 0 < measured(with_rivals, 2) < measured(without, 2)
    # the slower form is handicapped only once each form had a few iterations
    assert sum(task == 2 for task, _ in with_rivals) >= RIVAL_MIN_ITERATIONS
    assert measured(with_rivals, 1) > measured(without, 1)


def test_the_faster_rival_is_the_one_the_estimate_counts():
    latency = {0: 1e-3, 1: 4e-3, 2: 1.5e-3}.__getitem__  # the alternative form wins
    plan = plan_of(
        [0, 0, 0], TuningOptions(total_trials=60, candidates_per_iteration=8), rivals=[([1], [2])]
    )
    run_to_end(plan, latency)
    assert plan.summary()["estimated_latency_s"] == pytest.approx(2.5e-3)


def test_an_unmeasured_rival_form_is_left_out_of_the_estimate():
    plan = plan_of([0, 0, 0], TuningOptions(candidates_per_iteration=8), rivals=[([1], [2])])
    for _ in range(2):  # the first round reaches t0 and t1 only
        iterate(plan, {0: 1e-3, 1: 2e-3}.__getitem__)
    assert plan.task == 2
    assert plan.summary()["estimated_latency_s"] == pytest.approx(3e-3)


def test_the_closing_round_times_each_tasks_best_records_again_heaviest_first():
    latency = {0: 1e-3, 1: 4e-3, 2: 2e-3}.__getitem__
    plan = plan_of(
        [0, 0, 0],
        TuningOptions(trials=8, candidates_per_iteration=4, remeasure=3),
        weights=[5, 1, 1],
    )
    while not plan.remeasuring:
        iterate(plan, latency)
    closing = []
    while not plan.is_complete():  # the search's best, 1.5x slower when timed again
        closing.append(iterate(plan, latency, remeasured_as=lambda task: 1.5 * latency(task)))
    assert [task for task, _ in closing] == [0, 1, 2]  # 5 ms, 4 ms, 2 ms of the model
    assert [n for _, n in closing] == [3, 3, 3]  # remeasure records each
    assert plan.trials == 24  # timings again are not trials
    summary = plan.summary()
    assert summary["search_estimated_latency_s"] == pytest.approx(5e-3 + 4e-3 + 2e-3)
    assert summary["estimated_latency_s"] == pytest.approx(1.5 * 11e-3)
    assert summary["remeasured"] == 9 and summary["tasks"][1]["remeasured"] == 3
    assert summary["tasks"][1]["search_best_latency_s"] == pytest.approx(4e-3)


def test_a_task_whose_best_is_not_one_timed_again_gets_another_round_then_settles():
    plan = plan_of([0], TuningOptions(trials=4, candidates_per_iteration=4, remeasure=3))
    while not plan.remeasuring:
        iterate(plan, lambda task: 1e-3)
    rounds = 0
    while not plan.is_complete():
        spec = plan.next_stage()
        plan.selected(3), plan.built(0), plan.profiled(0)
        plan.remeasured([2e-3, None, 3e-3], 1.2e-3, best_remeasured=False)
        rounds += 1
        assert plan.next_stage() is None or plan.next_stage().iteration > spec.iteration
    assert rounds == REMEASURE_ROUNDS
    assert plan.progress[0].remeasured == 2 * REMEASURE_ROUNDS  # the failed ones not
    assert plan.summary()["estimated_latency_s"] == pytest.approx(1.2e-3)


def search_at_half_a_second_per_candidate(plan: TuningPlan, clock: Clock) -> None:
    """Two iterations of 4 candidates whose build and profile stages take 2 s each."""
    for _ in range(2):
        plan.stage_started()
        plan.selected(4)
        for event in (plan.built, plan.profiled):
            plan.stage_started()
            clock.now += 2
            event(0)
        plan.measured([1e-3] * 4)


def test_the_wall_clock_budget_keeps_what_the_closing_round_will_take():
    clock = Clock()
    plan = plan_of(
        [0, 0], TuningOptions(minutes=10, candidates_per_iteration=4, remeasure=3), clock=clock
    )
    assert plan.closing_reserve() == 60  # a tenth, until the search has timed candidates
    search_at_half_a_second_per_candidate(plan, clock)
    # so 2 tasks x 3 records x 1 s per candidate, with the margin for select stages
    reserve = plan.closing_reserve()
    assert reserve == pytest.approx(2 * 3 * 1.0 * REMEASURE_MARGIN)
    clock.now = 1000 + 600 - reserve - 1
    assert plan.budget_left() > 0
    clock.now += 1  # the search stops that long before the budget's end
    assert plan.budget_left() == 0
    iterate(plan, lambda task: 1e-3)  # (its select finds the budget spent)
    assert plan.remeasuring and plan.next_stage().remeasure
    clock.now += 60  # the whole budget is over while the first task is timed again:
    iterate(plan, lambda task: 1e-3)  # it is finished, the other keeps its timings
    assert plan.is_complete()
    assert sorted(p.remeasured for p in plan.progress) == [0, 3]


def test_the_wall_clock_budget_keeps_what_follows_the_job():
    clock = Clock()
    options = TuningOptions(minutes=10, candidates_per_iteration=4, remeasure=3)
    plan = plan_of([0, 0], options, clock=clock, after_s=25)
    search_at_half_a_second_per_candidate(plan, clock)  # the closing round's reserve: 18 s
    reserve = plan.closing_reserve()
    clock.now = 1000 + 600 - 25 - reserve - 1
    assert plan.budget_left() > 0
    clock.now += 1  # the search stops before both the closing round and what follows
    assert plan.budget_left() == 0
    iterate(plan, lambda task: 1e-3)
    assert plan.remeasuring
    clock.now = 1000 + 600 - 25  # the closing round ends where what follows begins
    iterate(plan, lambda task: 1e-3)
    assert plan.is_complete()


def test_remeasure_zero_ends_the_job_with_its_search():
    assert TuningOptions().remeasure == 2  # the default: each task's best two timed again
    plan = plan_of([0, 0], TuningOptions(trials=4, candidates_per_iteration=4, remeasure=0))
    iterations = run_to_end(plan, lambda task: 1e-3)
    assert len(iterations) == 2 and plan.is_complete()
    summary = plan.summary()
    assert summary["remeasured"] == 0
    assert summary["search_estimated_latency_s"] == summary["estimated_latency_s"]
    with pytest.raises(ValueError, match="remeasure must be 0"):
        TuningOptions(remeasure=-1)


def test_the_phases_follow_the_stages_and_refuse_an_event_out_of_order():
    plan = plan_of([0, 0], TuningOptions(trials=8, candidates_per_iteration=4))
    assert plan.next_stage().kind is Phase.SELECT
    with pytest.raises(PlanOrderError, match=r"built\(\) arrived in the select phase"):
        plan.built(0)
    assert plan.selected(4) == 4 and plan.next_stage().kind is Phase.BUILD
    with pytest.raises(PlanOrderError) as refused:
        plan.measured([1e-3] * 4)
    assert (refused.value.event, refused.value.phase, refused.value.expected) == (
        "measured",
        Phase.BUILD,
        Phase.UPDATE,
    )
    plan.built(0)
    assert plan.next_stage().kind is Phase.PROFILE and plan.next_stage().on_device
    plan.profiled(0)
    plan.measured([1e-3] * 4)
    assert plan.next_stage().kind is Phase.SELECT and plan.trials == 4


def test_a_plan_order_error_pickles_with_its_fields():
    import pickle

    error = pickle.loads(pickle.dumps(PlanOrderError("built", Phase.SELECT, Phase.BUILD)))
    assert (error.event, error.phase, error.expected) == ("built", Phase.SELECT, Phase.BUILD)
    assert "built() arrived in the select phase" in str(error)
