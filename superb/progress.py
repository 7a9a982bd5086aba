"""What a sweep shows while it runs: a live display on a terminal, plain lines elsewhere.

Both show the same things: runs done of all, and for every run in flight its step, its
tuning (tasks measured, trials of the budget, best estimate so far), elapsed time and an
ETA. The ETA comes from measured times: a run's tuning rate so far, and the durations
of finished runs of the same kind (tuned, untuned) for what has not started.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from simpletvm.console import clock_text, latency_text

from .results import RunStatus

PLAIN_TUNING_EVERY_S = 15.0
MIN_ETA_S = 1.0  # while work remains, the ETA never reads zero


@dataclass
class RunView:
    """One run in flight, as the displays show it."""

    position: int
    label: str
    kind: str
    started: float
    step: str = "starting"
    num_tasks: int | None = None
    tasks_measured: int = 0
    trials: int = 0
    trial_budget: int | None = None
    minutes: float | None = None
    estimated_ms: float | None = None
    tuning_started: float | None = None

    def tuning_text(self) -> str:
        """Tasks and trials so far, and the estimate: until every task is measured a
        partial sum, said as one (it grows as tasks are added), then the model's."""
        if self.num_tasks is None:
            return ""
        budget = f"/{self.trial_budget}" if self.trial_budget else ""
        text = f"{self.tasks_measured}/{self.num_tasks} tasks, {self.trials}{budget} trials"
        if self.estimated_ms is not None:
            if self.tasks_measured < self.num_tasks:
                text += f", those tasks sum to {latency_text(self.estimated_ms)} ms"
            else:
                text += f", best estimate {latency_text(self.estimated_ms)} ms"
        return text

    def tuning_left(self, now: float) -> float | None:
        """Seconds of tuning left, from its budget and its rate so far (None: unknown)."""
        if self.tuning_started is None:
            return None
        spent = now - self.tuning_started
        left = []
        if self.minutes is not None:
            left.append(self.minutes * 60 - spent)
        if self.trial_budget and self.trials:
            left.append(spent * (self.trial_budget - self.trials) / self.trials)
        return max(0.0, min(left)) if left else None


class SweepProgress:
    """The state both displays show; subclasses decide how.

    ``kinds`` lists the kind of every run still to come, in order; ``jobs`` is how many
    runs are in flight at once (the ETA divides the work left among them).
    """

    def __init__(
        self, console, total: int, done_before: int, kinds: list[str] | None = None, jobs: int = 1
    ):
        self.console = console
        self.total, self.done_before, self.jobs = total, done_before, max(1, jobs)
        self.finished, self.ok, self.failed = 0, 0, 0
        self.kinds = list(kinds or [])
        self.kind_durations: dict[str, list[float]] = {}
        self.started = time.monotonic()
        self.runs: dict[str, RunView] = {}

    # ---- what the sweep reports ------------------------------------------------------
    def start_run(self, key: str, position: int, label: str, kind: str = "tuned") -> None:
        if kind in self.kinds:
            self.kinds.remove(kind)
        self.runs[key] = RunView(position, label, kind, time.monotonic())

    def stage(self, key: str, details: dict[str, Any]) -> None:
        """A stage of run ``key`` ended; ``details`` is what its job reported."""
        view = self.runs.get(key)
        if view is None:
            return
        view.step = details.get("step", view.step)
        if details.get("num_tasks") is not None:
            if view.tuning_started is None:
                view.tuning_started = time.monotonic()
            for name in (
                "num_tasks",
                "tasks_measured",
                "trials",
                "trial_budget",
                "minutes",
                "estimated_ms",
            ):
                setattr(view, name, details.get(name, getattr(view, name)))

    def finish_run(self, key: str, status: str, wall_s: float, detail: str) -> None:
        view = self.runs.pop(key, None)
        self.finished += 1
        self.ok += status == RunStatus.OK
        self.failed += status != RunStatus.OK
        if view is not None:
            self.kind_durations.setdefault(view.kind, []).append(wall_s)

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def close(self) -> None:
        pass

    # ---- derived -------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _expected(self, kind: str) -> float | None:
        times = self.kind_durations.get(kind) or [
            t for durations in self.kind_durations.values() for t in durations
        ]
        return sum(times) / len(times) if times else None

    @property
    def eta(self) -> float | None:
        """Seconds until the sweep ends; None while nothing measured says."""
        if self.total - self.done_before - self.finished <= 0:
            return 0.0
        now = time.monotonic()
        work = 0.0
        for view in self.runs.values():
            expected = self._expected(view.kind)
            elapsed = now - view.started
            left = view.tuning_left(now)
            if left is None and expected is None:
                return None
            candidates = [
                t for t in (left, None if expected is None else expected - elapsed) if t is not None
            ]
            work += max(candidates)
        queued = self.total - self.done_before - self.finished - len(self.runs)
        coming = self.kinds[:queued] + ["tuned"] * max(0, queued - len(self.kinds))
        for kind in coming:
            expected = self._expected(kind)
            if expected is None:
                return None
            work += expected
        return max(MIN_ETA_S, work / min(self.jobs, max(1, len(self.runs) + queued)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class PlainProgress(SweepProgress):
    """One line per run start, step and end; tuning progress every few seconds per run."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._last_tuning: dict[str, float] = {}

    def _prefix(self, view: RunView) -> str:
        return f"[{view.position}/{self.total}]"

    def start_run(self, key: str, position: int, label: str, kind: str = "tuned") -> None:
        super().start_run(key, position, label, kind)
        self.message(f"{self._prefix(self.runs[key])} {label}")

    def stage(self, key: str, details: dict[str, Any]) -> None:
        view = self.runs.get(key)
        before = view.step if view else None
        super().stage(key, details)
        if view is None:
            return
        if view.step != before and view.step != "done":
            self.message(f"{self._prefix(view)}   {view.step}")
        now = time.monotonic()
        if (
            view.step == "tune"
            and view.num_tasks is not None
            and (now - self._last_tuning.get(key, -PLAIN_TUNING_EVERY_S) >= PLAIN_TUNING_EVERY_S)
        ):
            self._last_tuning[key] = now
            self.message(f"{self._prefix(view)}   tune {view.tuning_text()}")

    def finish_run(self, key: str, status: str, wall_s: float, detail: str) -> None:
        view = self.runs.get(key)
        super().finish_run(key, status, wall_s, detail)
        prefix = self._prefix(view) if view else f"[?/{self.total}]"
        self.message(
            f"{prefix} {status} in {wall_s:.1f} s{detail}  "
            f"(elapsed {clock_text(self.elapsed)}, eta {clock_text(self.eta)})"
        )


class LiveProgress(SweepProgress):
    """A rich live display: the sweep's bar, and a step and tuning bar per run in flight."""

    def __init__(self, *args, **kwargs):
        from rich.live import Live

        super().__init__(*args, **kwargs)
        self._live = Live(
            console=self.console, get_renderable=self._render, refresh_per_second=4, transient=True
        )
        self._live.start()

    def _render(self):
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True, min_width=8)
        table.add_column(width=30, no_wrap=True)
        table.add_column(no_wrap=True)
        done = self.done_before + self.finished
        table.add_row(
            "runs",
            ProgressBar(total=self.total, completed=done),
            Text(
                f"{done}/{self.total}  ok {self.ok} failed {self.failed}  "
                f"elapsed {clock_text(self.elapsed)}  eta {clock_text(self.eta)}"
            ),
        )
        now = time.monotonic()
        for view in list(self.runs.values()):
            table.add_row(
                f"run {view.position}",
                Text(view.step),
                Text(f"{view.label}  {clock_text(now - view.started)}"),
            )
            if view.num_tasks is not None:
                table.add_row(
                    "",
                    ProgressBar(total=view.trial_budget or None, completed=view.trials),
                    Text(view.tuning_text()),
                )
        return table

    def finish_run(self, key: str, status: str, wall_s: float, detail: str) -> None:
        from rich.text import Text

        view = self.runs.get(key)
        super().finish_run(key, status, wall_s, detail)
        line = Text(f"{status:>7}", style="green" if status == RunStatus.OK else "red")
        where = f"{view.position}/{self.total} {view.label}" if view else key
        line.append(f" {where}  {wall_s:.1f} s{detail}")
        self.console.print(line, highlight=False)

    def close(self) -> None:
        self._live.stop()


class QuietProgress(SweepProgress):
    """Shows nothing (library use, tests)."""

    def __init__(self, total: int, done_before: int, kinds: list[str] | None = None, jobs: int = 1):
        super().__init__(None, total, done_before, kinds, jobs)

    def message(self, text: str) -> None:
        pass


def make_progress(
    console,
    total: int,
    done_before: int,
    kinds: list[str] | None = None,
    plain: bool | None = None,
    jobs: int = 1,
):
    """Live on a terminal, plain lines otherwise (or when ``plain`` says so)."""
    if plain is None:
        plain = not console.is_terminal
    return (PlainProgress if plain else LiveProgress)(console, total, done_before, kinds, jobs)
