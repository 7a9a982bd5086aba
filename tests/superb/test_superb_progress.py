"""Progress: plain lines off a terminal, a live display on one, an ETA from run times."""

from __future__ import annotations

import io

from rich.console import Console

from superb.progress import LiveProgress, PlainProgress, make_progress

TUNING = {
    "step": "tune",
    "num_tasks": 3,
    "tasks_measured": 1,
    "trials": 4,
    "trial_budget": 24,
    "estimated_ms": 1.5,
}


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    console = Console(file=out, width=200)
    progress = make_progress(console, total=3, done_before=1)
    assert isinstance(progress, PlainProgress)
    progress.start_run("k1", 2, "k1 trials=8")
    progress.stage("k1", {"step": "tune"})
    progress.stage("k1", TUNING)
    progress.stage("k1", {**TUNING, "tasks_measured": 2, "trials": 12})  # too soon
    progress.finish_run("k1", "ok", 10.0, " (median 1.000 ms)")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[2/3] k1 trials=8"
    assert lines[1] == "[2/3]   tune"
    # a partial sum, said as one: it grows as tasks are added
    assert lines[2] == "[2/3]   tune 1/3 tasks, 4/24 trials, those tasks sum to 1.500 ms"
    assert lines[3].startswith("[2/3] ok in 10.0 s (median 1.000 ms)  (elapsed 0:00, eta ")
    assert len(lines) == 4
    assert progress.eta is not None and 9.0 <= progress.eta <= 10.0  # one run left


def test_live_display_shows_every_run_in_flight():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True)
    progress = make_progress(console, total=3, done_before=0, jobs=2)
    assert isinstance(progress, LiveProgress)
    try:
        progress.start_run("k1", 1, "k1 [8,16]")  # brackets are text, not markup
        progress.start_run("k2", 2, "k2 [4]")
        progress.stage("k1", TUNING)
        progress.stage("k2", {"step": "compile"})
        console.print(progress._render())
        progress.finish_run("k1", "failed", 2.0, ": Boom [x]")
    finally:
        progress.close()
    text = out.getvalue()
    assert "1/3 tasks, 4/24 trials, those tasks sum to 1.500 ms" in text
    assert "k1 [8,16]" in text and "k2 [4]" in text and "compile" in text
    assert "Boom [x]" in text


def test_the_estimate_is_the_models_once_every_task_is_measured():
    from superb.progress import RunView

    view = RunView(1, "k", "tuned", 0.0, num_tasks=3, tasks_measured=3, trials=9)
    view.estimated_ms = 1.25
    assert view.tuning_text() == "3/3 tasks, 9 trials, best estimate 1.250 ms"


def test_eta_is_measured_and_never_zero_while_work_remains():
    progress = make_progress(
        Console(file=io.StringIO()),
        total=4,
        done_before=0,
        kinds=["untuned", "tuned", "untuned", "tuned"],
    )
    assert progress.eta is None  # nothing to go by yet
    progress.start_run("a", 1, "a", "untuned")
    progress.finish_run("a", "ok", 2.0, "")
    progress.start_run("b", 2, "b", "tuned")
    progress.finish_run("b", "ok", 30.0, "")
    assert 31.0 <= progress.eta <= 32.0  # one untuned (2 s) and one tuned (30 s) to come
    progress.start_run("c", 3, "c", "untuned")
    progress.start_run("d", 4, "d", "tuned")
    progress.stage("d", {**TUNING, "trials": 24})  # its budget is spent: tuning left 0
    progress.finish_run("c", "ok", 40.0, "")  # slower than the untuned before
    assert progress.eta >= 1.0  # never zero while a run is in flight
    progress.finish_run("d", "ok", 1.0, "")
    assert progress.eta == 0.0


def test_eta_of_a_tuning_run_follows_its_trial_rate():
    progress = make_progress(Console(file=io.StringIO()), total=1, done_before=0, kinds=["tuned"])
    progress.start_run("a", 1, "a", "tuned")
    progress.stage("a", TUNING)
    view = progress.runs["a"]
    view.tuning_started -= 10.0  # 4 of 24 trials in 10 s: 50 s to go
    assert 49.0 <= progress.eta <= 51.0
