"""The progress of a tuning job, told the same way by the CLI and the Python API.

A :class:`ProgressSnapshot` is what a :class:`~simpletvm.tuning.plan.TuningPlan` says of
itself at one moment (no I/O, tested with a fake clock); :class:`TuningProgress` shows
snapshots: a live line on a terminal, plain whole lines now and then anywhere else (a
pipe, a log file, a notebook's captured output).

The figure shown is a whole-model one only when it can be: until every task has a
measurement, the tasks not yet measured have no latency to count (TVM's default schedule
is not timed), so the line says "n of m tasks measured, those sum to X ms"; from then
on it says "estimate X ms", which only falls as the search finds faster schedules. In
the closing round the search's estimate stays on the line while its best records are
timed again; the final line gives the estimate that holds. The ETA is the budget's end
until the budget is over, and never moves earlier once shown. A last line says where
the whole wait went (:func:`spent_parts`).

Only the standard library and Rich load here: ``simpletvm.api`` imports this module
when ``autotune(progress=True)`` asks for it.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from simpletvm.console import clock_text, make_console, ms_text

# a plain (non-terminal) line comes at most every this many seconds, a sixth of a minutes
# budget within these bounds, and whenever the run enters a new phase
PLAIN_INTERVAL_MIN_S = 2.0
PLAIN_INTERVAL_MAX_S = 30.0
PLAIN_INTERVAL_NO_BUDGET_S = 10.0


@dataclass(frozen=True)
class ProgressSnapshot:
    """A tuning job at one moment; times are the plan's clock's seconds."""

    now: float
    trials: int
    tasks: int
    measured: int  # tasks with a latency (measured, or known from an earlier run)
    first_left: int  # tasks still to be measured once in this run (the budget waits for them)
    skipped: int  # tasks that cannot be tuned (they are built with their default schedules)
    estimate_s: float  # the search's: over the measured tasks, the whole model once complete
    iterations: int  # finished iterations (search and closing round)
    remeasuring: bool
    remeasure_left: int
    done: bool
    started_at: float | None
    deadline: float | None
    budget_trials: float  # trials the job may measure at most (inf: bounded by time only)

    @property
    def complete(self) -> bool:
        """Every task has a latency (or is skipped): the estimate is the whole model's."""
        return self.measured + self.skipped >= self.tasks

    @property
    def unmeasured(self) -> int:
        """Tasks the job has still to measure once: it runs past its budget for them (a
        task never measured would be built with its default schedule)."""
        return self.first_left

    @property
    def elapsed_s(self) -> float:
        return 0.0 if self.started_at is None else max(0.0, self.now - self.started_at)

    @property
    def budget_s(self) -> float | None:
        if self.deadline is None or self.started_at is None:
            return None
        return self.deadline - self.started_at

    @property
    def time_left_s(self) -> float | None:
        """Seconds of the ``minutes`` budget left (negative: over by that much)."""
        return None if self.deadline is None else self.deadline - self.now

    @property
    def over_budget(self) -> bool:
        return self.deadline is not None and self.now >= self.deadline and not self.done

    def overrun_reason(self) -> str | None:
        """Why the job goes on past its budget, or None when it does not."""
        if not self.over_budget:
            return None
        return self.overrun_cause()

    def overrun_cause(self, past: bool = False) -> str:
        """What keeps a job past its budget at this point (``past``: said once it ended,
        without the count)."""
        if self.unmeasured:
            if past:
                return "every task needed one measurement"
            return (
                f"every task needs one measurement: {self.unmeasured} "
                f"task{'s' if self.unmeasured != 1 else ''} left"
            )
        if self.remeasuring:
            return (
                "the closing round's last task"
                if past
                else "finishing the closing round's current task"
            )
        return "the iteration under way" if past else "finishing the current iteration"

    def eta(self) -> float | None:
        """When the job is expected to end (the clock's seconds): the budget's end until
        then, past it from the pace so far (each task still unmeasured needs one more
        iteration, at the seconds an iteration has taken on average); without a budget
        from the trials left at the pace so far; None when there is no telling yet."""
        if self.done:
            return self.now
        if self.deadline is not None and self.now < self.deadline:
            return self.deadline  # the budget bounds the wait: the plan ends there
        if self.started_at is None or self.iterations == 0:  # no pace yet
            return None
        per_iteration = self.elapsed_s / self.iterations
        if self.deadline is not None:
            # past the budget, the work left is the first iterations of unmeasured tasks
            # (and the iteration under way)
            return self.now + max(self.unmeasured, 1) * per_iteration
        if math.isfinite(self.budget_trials) and self.trials:
            per_trial = self.elapsed_s / self.trials
            return self.now + max(0.0, self.budget_trials - self.trials) * per_trial
        return None

    def text(
        self, now: float | None = None, overran: str | None = None, eta_floor: float | None = None
    ) -> str:
        """One line: trials, the estimate as it stands, the time left or the reason the
        job runs on, the ETA (no earlier than ``eta_floor``, the one shown before). ``now``
        moves the clock on for a live display between stages."""
        snap = self if now is None else _moved(self, now)
        parts = [f"{snap.trials} trials", snap.estimate_text()]
        if snap.remeasuring and not snap.done:
            parts.append(
                f"closing round: timing the best records again, "
                f"{snap.remeasure_left} task{'s' if snap.remeasure_left != 1 else ''} "
                "left"
            )
        parts.append(snap.time_text(overran, eta_floor))
        return ", ".join(part for part in parts if part)

    def estimate_text(self) -> str:
        ms = ms_text(self.estimate_s)
        if not self.complete:
            if not self.measured:
                return f"0 of {self.tasks} tasks measured"
            return f"{self.measured} of {self.tasks} tasks measured, those sum to {ms} ms"
        skipped = (
            f" ({self.skipped} skipped task{'s' if self.skipped != 1 else ''} not counted)"
            if self.skipped
            else ""
        )
        return f"estimate {ms} ms{skipped}"

    def time_text(self, overran: str | None = None, eta_floor: float | None = None) -> str:
        """Time left and the ETA (no earlier than ``eta_floor``); once done the time
        taken, and past a budget by how much and (``overran``: what kept it) why."""
        if self.started_at is None:
            return "starting"
        elapsed = clock_text(self.elapsed_s)
        if self.done:
            if self.deadline is None or self.now <= self.deadline:
                return f"{elapsed} elapsed"
            why = f": {overran}" if overran else ""
            return (
                f"{elapsed} elapsed, {clock_text(self.now - self.deadline)} over the "
                f"{clock_text(self.budget_s or 0.0)} budget{why}"
            )
        eta = max_known(self.eta(), eta_floor)
        eta_text = "" if eta is None else f", ETA {time.strftime('%H:%M:%S', time.localtime(eta))}"
        if self.deadline is None:
            return f"{elapsed} elapsed{eta_text}"
        budget = clock_text(self.budget_s or 0.0)
        left = self.time_left_s
        if left > 0:
            return f"{clock_text(left)} left of {budget}{eta_text}"
        return f"{clock_text(-left)} over the {budget} budget: {self.overrun_reason()}{eta_text}"


def max_known(*values: float | None) -> float | None:
    """The largest of the values that are known (None when none is)."""
    known = [value for value in values if value is not None]
    return max(known) if known else None


def spent_parts(
    started: float, ended: float, stages: list[dict], inside_s: float | None
) -> dict[str, float]:
    """Where a tuning's wall time went (seconds by part, in order), from its start and end
    (the clock's seconds) and the stages it recorded since it started: finding the tasks
    (before the first stage), the search, the closing round, the round inside the model
    (``inside_s``), and the rest (closing the search, saving the cost model)."""
    own = [stage for stage in stages if stage["start"] >= started]
    if not own:  # nothing left to measure: it all went to finding that out
        return {"preparing": ended - started - (inside_s or 0.0), "in_model": inside_s or 0.0}
    first = own[0]["start"]
    closing = [stage for stage in own if stage.get("remeasure")]
    search_end = closing[0]["start"] if closing else own[-1]["end"]
    parts = {"preparing": first - started, "search": search_end - first}
    if closing:
        parts["closing_round"] = own[-1]["end"] - search_end
    if inside_s:
        parts["in_model"] = inside_s
    parts["finishing"] = max(0.0, ended - started - sum(parts.values()))
    return parts


SPENT_WORDS = {
    "preparing": "finding the tasks",
    "search": "searching",
    "closing_round": "timing the best records again",
    "in_model": "timing inside the model",
    "finishing": "closing the search",
}


def spent_text(parts: dict[str, float], budget_s: float | None) -> str:
    """``spent 1:02 of the 1:00 budget: 0:04 finding the tasks, 0:41 searching, ...``
    (parts under half a second left out)."""
    total = clock_text(sum(parts.values()))
    of = f" of the {clock_text(budget_s)} budget" if budget_s is not None else ""
    shown = [
        f"{clock_text(seconds)} {SPENT_WORDS.get(part, part)}"
        for part, seconds in parts.items()
        if seconds >= 0.5
    ]
    return f"spent {total}{of}: {', '.join(shown)}"


def _moved(snapshot: ProgressSnapshot, now: float) -> ProgressSnapshot:
    from dataclasses import replace

    return replace(snapshot, now=max(now, snapshot.now))


def snapshot(job_or_plan: Any) -> ProgressSnapshot:
    """What a TuningJob (or its TuningPlan) says of its progress now."""
    plan = getattr(job_or_plan, "plan", job_or_plan)
    summary = plan.summary()
    tasks = summary["tasks"]
    skipped = sum(1 for task in tasks if task["skipped"])
    measured = sum(
        1 for task in tasks if not task["skipped"] and task["best_latency_s"] is not None
    )
    options = plan.options
    budget_trials = (
        options.total_trials
        if options.total_trials is not None
        else options.per_task_trials() * len(tasks)
    )
    return ProgressSnapshot(
        now=plan.now(),
        trials=summary["trials"],
        tasks=len(tasks),
        measured=measured,
        first_left=sum(1 for p in plan.progress if not p.history and not p.done),
        skipped=skipped,
        estimate_s=summary["search_estimated_latency_s"],
        iterations=sum(p.iterations + p.remeasure_rounds for p in plan.progress),
        remeasuring=plan.remeasuring,
        remeasure_left=plan.remeasure_left,
        done=plan.is_complete(),
        started_at=plan.started_at,
        deadline=plan.deadline,
        budget_trials=float(budget_trials),
    )


def plain_interval(minutes: float | None) -> float:
    """Seconds between plain lines: a sixth of the budget, within bounds."""
    if minutes is None:
        return PLAIN_INTERVAL_NO_BUDGET_S
    return min(PLAIN_INTERVAL_MAX_S, max(PLAIN_INTERVAL_MIN_S, minutes * 60 / 6))


class TuningProgress:
    """Shows a tuning job's progress: ``with TuningProgress(name) as show:
    job.run(on_stage=show.on_stage)``.

    On a terminal a live line redrawn twice a second (the time left moves between
    stages); elsewhere a plain line every :func:`plain_interval` seconds and whenever the
    run enters a new phase (every task measured, budget over, closing round), each line
    whole, whatever the width. The last line says where tuning ended.

    Args:
        name: what is tuned (the model), at the start of each line.
        minutes: the job's budget, for the plain lines' interval.
        console: a Rich console to draw on (default: standard error, as tqdm does).
        terminal: force the live display on or off (default: the console's own).
        interval: seconds between plain lines (default: :func:`plain_interval`).
    """

    def __init__(
        self,
        name: str,
        minutes: float | None = None,
        console=None,
        terminal: bool | None = None,
        interval: float | None = None,
    ):
        self.console = make_console(stderr=True) if console is None else console
        self.name = name
        self.terminal = self.console.is_terminal if terminal is None else terminal
        self.interval = plain_interval(minutes) if interval is None else interval
        self.last: ProgressSnapshot | None = None
        self.first_complete_s: float | None = None  # the estimate when it became whole
        self._printed_at: float | None = None
        self._phase: tuple | None = None
        self._live = None
        self._printed: str | None = None
        self.overran: str | None = None  # what first kept the job past its budget
        self.after: str | None = None  # what autotune does once the job is over
        self.eta: float | None = None  # the latest ETA shown: it never moves earlier
        self.spent: str | None = None  # where the whole wait went, said last

    # ---- what a line says -----------------------------------------------------------
    def line(self, now: float | None = None) -> str:
        if self.last is None:
            return f"tuning {self.name}: starting"
        if not self.last.done:
            moved = self.last if now is None else _moved(self.last, now)
            self.eta = max_known(moved.eta(), self.eta)
        text = self.last.text(now, self.overran, self.eta)
        if (
            self.last.complete
            and self.first_complete_s is not None
            and ms_text(self.last.estimate_s) != ms_text(self.first_complete_s)
        ):
            text = text.replace(
                self.last.estimate_text(),
                f"{self.last.estimate_text()} (from {ms_text(self.first_complete_s)} ms "
                "when every task had one)",
                1,
            )
        if self.after is not None:
            text = f"{text}; {self.after}"
        return f"tuning {self.name}: {text}"

    def then(self, text: str) -> None:
        """What follows the job (autotune's round inside the model), shown after the
        job's own line from now on."""
        self.after = text
        if self._live is not None:
            self._live.refresh()
        elif not self.terminal and self.last is not None:
            self._print(self.line())

    def finish(self, spent: str) -> None:
        """Where the whole wait went (:func:`spent_text`), said once, after the last line."""
        self.spent = spent

    def __rich__(self):
        from rich.text import Text

        now = time.time()  # the plan's clock, unless a test gave it its own
        clock = now if self.last is not None and abs(now - self.last.now) < 1e6 else None
        return Text(self.line(clock))  # wrapped at words on a narrow terminal, never cut

    # ---- events ------------------------------------------------------------------------
    def on_stage(self, job: Any) -> None:
        """After each stage of ``job`` (a TuningJob, or anything with its ``plan``)."""
        self.update(snapshot(job))

    def update(self, snap: ProgressSnapshot) -> None:
        if snap.complete and self.first_complete_s is None:
            self.first_complete_s = snap.estimate_s
        self.last = snap
        if snap.over_budget and self.overran is None:
            self.overran = snap.overrun_cause(past=True)
        if self.terminal:
            if self._live is not None:
                self._live.refresh()
            return
        phase = (snap.complete, snap.over_budget, snap.remeasuring, snap.done)
        due = self._printed_at is None or snap.now - self._printed_at >= self.interval
        if due or phase != self._phase:
            self._print(self.line())
            self._printed_at, self._phase = snap.now, phase

    def _print(self, text: str) -> None:
        self._printed = text
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)
        _flush(self.console)

    # ---- the live display ----------------------------------------------------------
    def __enter__(self) -> TuningProgress:
        if self.terminal:
            from rich.live import Live

            self._live = Live(self, console=self.console, refresh_per_second=2, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._live is not None:
            self._live.__exit__(*exc_info)
            self._live = None
        if self.last is not None and self.line() != self._printed:
            self._print(self.line())  # where tuning ended (or stopped), once
        if self.spent is not None:
            self._print(f"tuning {self.name}: {self.spent}")


def _flush(console) -> None:
    stream: TextIO = getattr(console, "file", None) or sys.stdout
    try:
        stream.flush()
    except (AttributeError, ValueError, OSError):
        pass


def combine(*callbacks: Callable | None) -> Callable | None:
    """One ``on_stage`` calling each given one in turn (None when none is given)."""
    given = [callback for callback in callbacks if callback is not None]
    if not given:
        return None
    if len(given) == 1:
        return given[0]

    def on_stage(job) -> None:
        for callback in given:
            callback(job)

    return on_stage
