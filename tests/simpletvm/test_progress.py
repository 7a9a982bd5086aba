"""The progress display, fed a TuningPlan (TVM-free) driven with a fake clock."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from simpletvm.progress import TuningProgress, snapshot
from simpletvm.tuning.options import TuningOptions
from simpletvm.tuning.plan import Phase, TuningPlan


class Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def drive(
    plan: TuningPlan, clock: Clock, on_stage, stage_s: float = 1.0, max_stages: int = 2000
) -> None:
    """Run the plan's stages as an executor would: each takes ``stage_s``; a task's
    candidates get faster with every iteration (never the same order across tasks)."""
    for _ in range(max_stages):
        spec = plan.next_stage()
        if spec is None:
            return
        plan.stage_started()
        clock.now += stage_s
        if spec.kind is Phase.SELECT:
            plan.selected(4)
        elif spec.kind is Phase.BUILD:
            plan.built(0)
        elif spec.kind is Phase.PROFILE:
            plan.profiled(0)
        elif spec.remeasure:
            best = plan.progress[spec.task].best_latency_s
            plan.remeasured([best * 1.1], best * 1.1, True)  # a lucky best, timed again
        else:
            progress = plan.progress[spec.task]
            base = (spec.task + 1) * 1e-4 / (1 + progress.iterations)
            plan.measured([base * (1 + k / 10) for k in range(plan._candidates)])
        on_stage(plan)
    raise AssertionError("the plan never completed")


def plain(width: int = 80) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=width, markup=False), out


@pytest.mark.parametrize("remeasure", [0, 2])
def test_the_figure_is_labelled_partial_then_only_falls(remeasure):
    """Whole-model figures only once every task is measured; from then on it never rises,
    the closing round included (its re-timed records, slower here, are the final line's)."""
    clock = Clock()
    names = [f"task_{i}" for i in range(6)]
    plan = TuningPlan(
        names, [1] * 6, [1e6] * 6, TuningOptions(minutes=1.0, remeasure=remeasure), clock=clock
    )
    snapshots = []
    drive(plan, clock, lambda p: snapshots.append(snapshot(p)))
    assert snapshots[-1].done
    partial = [s for s in snapshots if not s.complete]
    whole = [s for s in snapshots if s.complete]
    assert partial and whole
    for s in partial:
        sum_text = ", those sum to [\\d.]+ ms" if s.measured else ""
        assert re.search(rf"\b{s.measured} of 6 tasks measured{sum_text}, ", s.text()), s.text()
        assert "estimate" not in s.text()
    figures = [s.estimate_s for s in whole]
    assert all(b <= a for a, b in zip(figures, figures[1:])), figures
    assert figures[-1] < figures[0]  # tuning shows as the model getting faster
    assert all(re.search(r"estimate [\d.]+ ms", s.text()) for s in whole)
    if remeasure:  # a record was timed again, slower, and the line's figure held
        assert plan.summary()["remeasured"] and any(s.remeasuring for s in snapshots)
        assert plan.summary()["estimated_latency_s"] > figures[-1]


def test_time_left_eta_and_why_the_run_goes_past_its_budget():
    clock = Clock()
    names = [f"task_{i}" for i in range(8)]
    # 8 tasks at 4 s an iteration do not fit 0.2 min: the budget ends before each is measured
    plan = TuningPlan(names, [1] * 8, [1e6] * 8, TuningOptions(minutes=0.2), clock=clock)
    snapshots = []
    drive(plan, clock, lambda p: snapshots.append(snapshot(p)))
    early = snapshots[3]
    assert re.search(r"0:0\d left of 0:12, ETA \d\d:\d\d:\d\d", early.text()), early.text()
    over = [s for s in snapshots if s.over_budget and s.unmeasured]
    assert over, "the budget should end before every task is measured"
    text = over[0].text()
    assert re.search(
        rf"over the 0:12 budget: every task needs one measurement: "
        rf"{over[0].unmeasured} tasks? left",
        text,
    ), text
    # the ETA counts an iteration per task still unmeasured at the pace so far
    assert over[0].eta() == pytest.approx(
        over[0].now + over[0].unmeasured * over[0].elapsed_s / over[0].iterations
    )
    assert snapshots[-1].done and "elapsed" in snapshots[-1].text()


def test_plain_lines_are_whole_periodic_and_end_with_the_final_state():
    clock = Clock()
    names = [f"a_rather_long_fused_conv2d_add_relu_task_name_{i}" for i in range(5)]
    plan = TuningPlan(names, [1] * 5, [1e6] * 5, TuningOptions(minutes=0.5), clock=clock)
    console, out = plain(width=40)
    with TuningProgress(
        "models/a-model-with-a-long-name.onnx", minutes=0.5, console=console
    ) as show:
        assert not show.terminal
        drive(plan, clock, show.on_stage)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4
    assert all(
        line.startswith("tuning models/a-model-with-a-long-name.onnx: ") for line in lines
    ), lines  # none wrapped at 40 columns, none cut
    assert "elapsed" in lines[-1] and "estimate" in lines[-1]
    assert len(lines) == len(set(lines))  # the final state once
    # at most one line per interval besides the phase changes
    assert len(lines) <= plan.now() - snapshot(plan).started_at + 8


def test_a_terminal_gets_a_live_line_and_the_final_state_stays():
    clock = Clock()
    plan = TuningPlan(["t0", "t1"], [1, 1], [1e6] * 2, TuningOptions(trials=8), clock=clock)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, markup=False)
    with TuningProgress("m", console=console) as show:
        assert show.terminal
        drive(plan, clock, show.on_stage)
    assert re.search(r"tuning m: \d+ trials, estimate [\d.]+ ms", out.getvalue())


def test_latencies_known_from_earlier_runs_count_but_the_budget_still_waits_for_each_task():
    """Transfer learning gives tasks a latency before this run measures them: the figure
    counts it, and the line still says why the run goes on (each task measured once)."""
    clock = Clock()
    names = [f"task_{i}" for i in range(8)]
    plan = TuningPlan(names, [1] * 8, [1e6] * 8, TuningOptions(minutes=0.2), clock=clock)
    for progress in plan.progress:
        progress.best_latency_s = 1e-3  # known from an earlier run
    snapshots = []
    drive(plan, clock, lambda p: snapshots.append(snapshot(p)))
    assert all(s.complete for s in snapshots)
    over = [s for s in snapshots if s.over_budget]
    assert over and all(
        "every task needs one measurement" in s.text() for s in over if s.unmeasured
    ), [s.text() for s in over]
    assert any(s.unmeasured for s in over)


def test_no_eta_in_the_past_before_any_pace():
    clock = Clock()
    plan = TuningPlan(["a", "b"], [1, 1], [1e6] * 2, TuningOptions(minutes=0.05), clock=clock)
    plan.stage_started()
    clock.now += 10  # a first stage that outlasts the whole budget
    snap = snapshot(plan)
    assert snap.over_budget and snap.eta() is None
    assert snap.text().endswith("every task needs one measurement: 2 tasks left"), snap.text()


def test_what_follows_the_job_is_shown_after_its_line():
    clock = Clock()
    plan = TuningPlan(["t0", "t1"], [1, 1], [1e6] * 2, TuningOptions(trials=8), clock=clock)
    console, out = plain(width=60)
    with TuningProgress("m", console=console) as show:
        drive(plan, clock, show.on_stage)
        show.then("timing the tuned kernels inside the model")
        show.then("timed inside the model: estimate 1.234 ms")
    lines = out.getvalue().splitlines()
    assert lines[-2].endswith("elapsed; timing the tuned kernels inside the model"), lines
    assert lines[-1].startswith("tuning m: ") and lines[-1].endswith(
        "; timed inside the model: estimate 1.234 ms"
    )


def test_a_budget_started_before_the_first_stage_counts_what_came_before():
    """autotune()'s budget runs from its call: the job's own preparation counts."""
    clock = Clock()
    options = TuningOptions(minutes=1.0)
    plan = TuningPlan(["a", "b"], [1, 1], [1e6] * 2, options, budget_started=990.0, clock=clock)
    assert (plan.started_at, plan.deadline) == (990.0, 1050.0)
    plan.stage_started()  # the first stage, ten seconds into the budget
    assert (plan.started_at, plan.deadline) == (990.0, 1050.0)
    assert snapshot(plan).time_left_s == 50.0


def test_the_eta_is_the_budgets_end_until_then_and_never_moves_earlier():
    clock = Clock()
    names = [f"task_{i}" for i in range(8)]
    # 8 tasks at 4 s an iteration do not fit 0.2 min: the ETA moves past the budget's end
    plan = TuningPlan(names, [1] * 8, [1e6] * 8, TuningOptions(minutes=0.2), clock=clock)
    console, out = plain(width=200)
    shown = []

    def on_stage(p) -> None:
        show.on_stage(p)
        if not show.last.done:
            shown.append(show.eta)
        if show.last.now < show.last.deadline:
            assert show.last.eta() == show.last.deadline

    with TuningProgress("m", minutes=0.2, console=console, interval=0) as show:
        drive(plan, clock, on_stage)
    assert all(later >= earlier for earlier, later in zip(shown, shown[1:])), shown
    assert shown[-1] > plan.deadline  # it did move later, and stayed there
    etas = re.findall(r"ETA (\d\d:\d\d:\d\d)", out.getvalue())
    assert etas == sorted(etas) and len(set(etas)) > 1, etas


def test_where_the_time_went():
    from simpletvm.progress import spent_parts, spent_text

    stages = [
        {"start": 90.0, "end": 91.0},  # an earlier job's: not this one's
        {"start": 104.0, "end": 130.0},
        {"start": 130.0, "end": 140.0},
        {"start": 140.0, "end": 144.0, "remeasure": True},
    ]
    parts = spent_parts(100.0, 160.0, stages, inside_s=15.0)
    assert parts == {
        "preparing": 4.0,
        "search": 36.0,
        "closing_round": 4.0,
        "in_model": 15.0,
        "finishing": 1.0,
    }
    assert spent_text(parts, 60.0) == (
        "spent 1:00 of the 1:00 budget: 0:04 finding the tasks, 0:36 searching, "
        "0:04 timing the best records again, 0:15 timing inside the model, 0:01 closing "
        "the search"
    )
    assert spent_text({"preparing": 0.2, "search": 9.0}, None) == "spent 0:09: 0:09 searching"
    # every task spent before (a run resumed): no stage, the time went to finding that out
    assert spent_parts(200.0, 203.0, stages, inside_s=None) == {"preparing": 3.0, "in_model": 0}
