"""Progress: plain lines off a terminal, a live display on one, an ETA from run times."""

from __future__ import annotations

import io

from rich.console import Console

from superb.progress import LiveProgress, PlainProgress, make_progress

STAGE = {"type": "stage", "stage": "select", "task": 0, "num_tasks": 3, "trials": 4}


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    console = Console(file=out, width=200)
    progress = make_progress(console, total=3, done_before=1)
    assert isinstance(progress, PlainProgress)
    progress.start_run(2, "k1 trials=8")
    progress.event({"type": "tuning", "trials_per_task": 8, "total_trials": None})
    progress.event({"type": "step", "step": "autotune"})
    progress.event(STAGE)
    progress.event({**STAGE, "task": 1, "trials": 12})  # too soon for another line
    progress.finish_run("ok", 10.0, " (median 1.000 ms)")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[2/3] k1 trials=8"
    assert lines[1] == "[2/3]   autotune"
    assert lines[2] == "[2/3]   autotune task 1/3, 4/24 trials"
    assert lines[3].startswith("[2/3] ok in 10.0 s (median 1.000 ms)  (elapsed 0:00:00, eta ")
    assert len(lines) == 4
    assert progress.eta is not None and 9.0 <= progress.eta <= 10.0  # one run left


def test_live_display_on_a_terminal():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True)
    progress = make_progress(console, total=2, done_before=0)
    assert isinstance(progress, LiveProgress)
    try:
        progress.start_run(1, "k1 [8,16]")  # brackets are text, not markup
        progress.event({"type": "tuning", "trials_per_task": 8, "total_trials": 10})
        progress.event(STAGE)
        console.print(progress._render())
        progress.finish_run("failed", 2.0, ": Boom [x]")
    finally:
        progress.close()
    text = out.getvalue()
    assert "task 1/3, 4/10 trials" in text and "k1 [8,16]" in text and "Boom [x]" in text


def test_eta_takes_each_coming_run_from_runs_of_its_kind():
    progress = make_progress(Console(file=io.StringIO()), total=4, done_before=0,
                             kinds=["untuned", "tuned", "untuned", "tuned"])
    assert progress.eta is None  # nothing to go by yet
    progress.start_run(1, "a")
    progress.finish_run("ok", 2.0, "")
    progress.start_run(2, "b")
    progress.finish_run("ok", 30.0, "")
    assert 31.0 <= progress.eta <= 32.0  # one untuned (2 s) and one tuned (30 s) to come
