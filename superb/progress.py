"""What a sweep shows while it runs: a live display on a terminal, plain lines elsewhere.

Both show the same things: runs done of all, the current run's step and tuning
progress (tasks and trials), elapsed time and an ETA from the runs finished so far.
"""

from __future__ import annotations

import time
from typing import Any

PLAIN_TUNING_EVERY_S = 15.0


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class SweepProgress:
    """The state both displays show; subclasses decide how."""

    def __init__(self, console, total: int, done_before: int, kinds: list[str] | None = None):
        self.console = console
        self.total, self.done_before = total, done_before
        self.finished, self.ok, self.failed = 0, 0, 0
        self.durations: list[float] = []
        # the kind of each run still to come ("tuned", "untuned"): the ETA takes each
        # from the mean time of finished runs of its kind
        self.kinds = list(kinds or [])
        self.kind_durations: dict[str, list[float]] = {}
        self.started = time.monotonic()
        self.run_started = self.started
        self.position = done_before
        self.label = ""
        self.step = ""
        self.task: tuple[int, int | None] | None = None
        self.trials = 0
        self.trials_expected: int | None = None
        self._tuning: dict[str, Any] = {}

    # ---- what the sweep reports ------------------------------------------------------
    def start_run(self, position: int, label: str) -> None:
        self.position, self.label = position, label
        self.step, self.task, self.trials, self.trials_expected = "starting", None, 0, None
        self._tuning = {}
        self.run_started = time.monotonic()

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "step":
            self.step = event["step"]
        elif kind == "tuning":
            self._tuning = event
        elif kind == "stage":
            self.task = (event["task"] + 1, event.get("num_tasks"))
            self.trials = event.get("trials", self.trials)
            if event.get("num_tasks") and self._tuning:
                expected = event["num_tasks"] * self._tuning.get("trials_per_task", 0)
                cap = self._tuning.get("total_trials")
                self.trials_expected = min(expected, cap) if cap else expected

    def finish_run(self, status: str, wall_s: float, detail: str) -> None:
        self.finished += 1
        self.ok += status == "ok"
        self.failed += status != "ok"
        self.durations.append(wall_s)
        if self.kinds:
            self.kind_durations.setdefault(self.kinds.pop(0), []).append(wall_s)
        self.run_started = time.monotonic()  # no run in progress until the next starts

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def close(self) -> None:
        pass

    # ---- derived -------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def eta(self) -> float | None:
        remaining = self.total - self.done_before - self.finished
        if remaining <= 0:
            return 0.0
        if not self.durations:
            return None
        overall = sum(self.durations) / len(self.durations)

        def expected(kind: str) -> float:
            times = self.kind_durations.get(kind)
            return sum(times) / len(times) if times else overall

        coming = self.kinds[:remaining] if len(self.kinds) >= remaining else []
        total = sum(expected(kind) for kind in coming) if coming else remaining * overall
        current = time.monotonic() - self.run_started
        return max(0.0, total - current)

    def tuning_text(self) -> str:
        if self.task is None:
            return ""
        task, tasks = self.task
        expected = f"/{self.trials_expected}" if self.trials_expected else ""
        return f"task {task}/{tasks or '?'}, {self.trials}{expected} trials"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class PlainProgress(SweepProgress):
    """One line per run start, step and end; tuning progress every few seconds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._last_tuning = 0.0
        self._last_task = None

    def _prefix(self) -> str:
        return f"[{self.position}/{self.total}]"

    def start_run(self, position: int, label: str) -> None:
        super().start_run(position, label)
        self._last_task = None
        self.message(f"{self._prefix()} {label}")

    def event(self, event: dict[str, Any]) -> None:
        super().event(event)
        if event.get("type") == "step":
            self.message(f"{self._prefix()}   {self.step}")
        elif event.get("type") == "stage":
            now = time.monotonic()
            if self.task != self._last_task and (self._last_task is None or
                                                  now - self._last_tuning >= PLAIN_TUNING_EVERY_S):
                self._last_tuning, self._last_task = now, self.task
                self.message(f"{self._prefix()}   autotune {self.tuning_text()}")

    def finish_run(self, status: str, wall_s: float, detail: str) -> None:
        super().finish_run(status, wall_s, detail)
        self.message(f"{self._prefix()} {status} in {wall_s:.1f} s{detail}  "
                     f"(elapsed {clock(self.elapsed)}, eta {clock(self.eta)})")


class LiveProgress(SweepProgress):
    """A rich live display: the sweep's bar and the current run's step and tuning bar."""

    def __init__(self, *args, **kwargs):
        from rich.live import Live

        super().__init__(*args, **kwargs)
        self._live = Live(console=self.console, get_renderable=self._render,
                          refresh_per_second=4, transient=True)
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
        table.add_row("runs", ProgressBar(total=self.total, completed=done),
                      Text(f"{done}/{self.total}  ok {self.ok} failed {self.failed}  "
                           f"elapsed {clock(self.elapsed)}  eta {clock(self.eta)}"))
        if self.label:
            run_time = clock(time.monotonic() - self.run_started)
            table.add_row(f"run {self.position}", Text(self.step),
                          Text(f"{self.label}  {run_time}"))
            if self.task is not None:
                table.add_row("tuning", ProgressBar(total=self.trials_expected or None,
                                                    completed=self.trials),
                              Text(self.tuning_text()))
        return table

    def finish_run(self, status: str, wall_s: float, detail: str) -> None:
        super().finish_run(status, wall_s, detail)
        from rich.text import Text

        line = Text(f"{status:>7}", style="green" if status == "ok" else "red")
        line.append(f" {self.position}/{self.total} {self.label}  {wall_s:.1f} s{detail}")
        self.console.print(line, highlight=False)
        self.label = ""

    def close(self) -> None:
        self._live.stop()


class QuietProgress(SweepProgress):
    """Shows nothing (library use, tests)."""

    def __init__(self, total: int, done_before: int, kinds: list[str] | None = None):
        super().__init__(None, total, done_before, kinds)

    def message(self, text: str) -> None:
        pass


def make_progress(console, total: int, done_before: int, kinds: list[str] | None = None,
                  plain: bool | None = None):
    """Live on a terminal, plain lines otherwise (or when ``plain`` says so)."""
    if plain is None:
        plain = not console.is_terminal
    return (PlainProgress if plain else LiveProgress)(console, total, done_before, kinds)
