"""What superb prints besides a sweep's progress: a plan's runs, a sweep's summary, and a
report's or a comparison's table."""

from __future__ import annotations

import json


def print_plan(console, the_plan, done: set[str]) -> None:
    """The plan's runs, one a row, with the parameters that vary and whether each is
    done; then the fixed parameters and what each exclude removed."""
    from rich.table import Table
    from rich.text import Text

    shown = the_plan.varying or the_plan.grid.parameter_names
    table = Table(title=f"{the_plan.grid.name}: {len(the_plan.runs)} runs", title_justify="left")
    for column in (
        ["#", "key"] + shown + (["rep"] if the_plan.grid.repetitions > 1 else []) + ["done"]
    ):
        table.add_column(column)
    for run in the_plan.runs:
        cells = [str(run.index), run.key] + [cell_text(run.params.get(name)) for name in shown]
        cells += [str(run.repetition)] if the_plan.grid.repetitions > 1 else []
        table.add_row(*[Text(c) for c in cells], "yes" if run.key in done else "")
    console.print(table)
    fixed = {n: v for n, v in the_plan.grid.fixed.items() if n not in shown}
    if fixed:
        console.print(Text("fixed: " + ", ".join(f"{n}={cell_text(v)}" for n, v in fixed.items())))
    if the_plan.grid.peers:
        console.print(Text("peers in the closing round: " + ", ".join(the_plan.grid.peers)))
    for i, removed in enumerate(the_plan.excluded):
        note = " (matches no combination: check it)" if removed == 0 else ""
        console.print(Text(f"exclude #{i + 1} removes {removed} runs{note}"))
    console.print(Text(f"{len(the_plan.runs)} runs, {len(done)} already done"))


def print_summary(console, summary, the_plan) -> None:
    from rich.table import Table
    from rich.text import Text

    experiment = summary.experiment
    ok = summary.total - len(summary.failures) - summary.not_started
    console.print(
        Text(
            f"{summary.total} runs: {ok} ok, {len(summary.failures)} failed"
            + (f", {summary.not_started} not started (--fail-fast)" if summary.not_started else "")
            + f"; {summary.ran} ran now, {summary.skipped} done before"
        )
    )
    if summary.failures:
        table = Table(title="failed runs", title_justify="left")
        for column in ("#", "key", "status", "error", "log"):
            table.add_column(column, overflow="fold")
        by_key = {run.key: run for run in the_plan.runs}
        for row in sorted(summary.failures, key=lambda r: r["index"]):
            run = by_key.get(row["run"])
            log = experiment.log_file(run) if run else ""
            table.add_row(
                str(row["index"]),
                row["run"],
                row["status"],
                Text(str(row["error"])),
                Text(str(log)),
            )
        console.print(table)
    console.print(Text(f"runs      {experiment.runs_csv}\naggregate {experiment.aggregate_csv}"))


def print_frame(console, frame, title: str) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    for column in frame.columns:
        table.add_column(
            column, overflow="fold", justify="right" if frame[column].dtype.kind in "if" else "left"
        )
    for _, row in frame.iterrows():
        table.add_row(*[Text(cell_text(value)) for value in row])
    console.print(table)


def cell_text(value) -> str:
    """A table cell: floats to four significant digits, NaN and None empty, dicts and
    lists as compact JSON."""
    if isinstance(value, float):
        if value != value:
            return ""
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


FINAL_COLUMNS = {
    "kind": "kind",
    "peer": "peer",
    "median_ms": "median ms",
    "low_ms": "low",
    "high_ms": "high",
    "samples": "calls",
    "vs_best": "vs best",
}


def print_final(console, final, path) -> None:
    """The closing round's cells by median (:func:`superb.verdicts.ranked`), the ones not
    timed with why, and what it ran on."""
    from rich.text import Text

    from .report import for_display
    from .verdicts import ranked

    frame = ranked(final)
    modules = frame[frame["kind"] == "simpletvm"]
    constant = [
        c for c in frame.columns if c.startswith("param:") and modules[c].nunique(dropna=False) <= 1
    ]
    shown, _ = for_display(frame.drop(columns=constant), FINAL_COLUMNS)
    first = final.iloc[0] if len(final) else {}
    rounds = int(final["rounds"].max()) if len(final) else 0
    print_frame(
        console, shown, f"closing round: {rounds} rounds side by side, median and 95% interval"
    )
    for _, row in frame[frame["status"] != "ok"].iterrows():
        what = row["peer"] if row["kind"] == "peer" else row["cell"]
        console.print(Text(f"not timed: {what}: {row['error']}"), soft_wrap=True)
    if len(final) and "host" in final.columns:
        console.print(
            Text(
                f"host {first['host']} (LLVM {first['llvm_cpu']}), {first['threads']} threads, "
                f"commit {first['commit']}, load {first['load_before']:.2f} -> {first['load_after']:.2f}"
            ),
            soft_wrap=True,
        )
    console.print(Text(f"final     {path}"))
