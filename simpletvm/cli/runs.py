"""``simpletvm runs``: the runs in the store, listed or pruned."""

from __future__ import annotations

from pathlib import Path

import typer

from simpletvm.cli.program import command
from simpletvm.cli_options import STORE_HELP
from simpletvm.console import latency_text, make_console

HIDDEN_KINDS = ("run",)  # runs `simpletvm runs` lists with --all only


@command()
def runs(
    store: Path | None = typer.Option(None, help=STORE_HELP),
    all_runs: bool = typer.Option(
        False,
        "--all",
        help="include runs that recorded nothing and runs of saved modules "
        "(`simpletvm run` that failed)",
    ),
    json_output: bool = typer.Option(False, "--json", help="print the list as JSON"),
    prune: bool = typer.Option(
        False, "--prune", help="remove failed and empty runs, after a confirmation"
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="prune without asking"),
) -> None:
    """List the runs in the store.

    Each run's id, kind (the command that made it), status, model, latency (the
    evaluation's median, or a benchmark's tuned median) and date, oldest first. Runs
    that recorded nothing (a context made in Python and never saved) are listed with
    --all only, after the others."""
    import json

    from simpletvm.context import describe_run
    from simpletvm.store import RunStore

    run_store = RunStore(store)
    listed = [describe_run(run_store, run_id) for run_id in run_store.run_ids()]
    listed.sort(key=lambda row: (row["status"] == "empty", row["created_at"] or ""))
    if prune:
        _prune(run_store, listed, yes)
        return
    hidden = []
    if not all_runs:
        hidden = [r for r in listed if r["kind"] in HIDDEN_KINDS or r["status"] == "empty"]
        listed = [row for row in listed if row not in hidden]
    if json_output:
        print(json.dumps(listed, indent=2))
        return
    _print_runs(run_store, listed)
    empty = sum(row["status"] == "empty" for row in hidden)
    unlisted = [
        f"{count} {what}"
        for count, what in (
            (empty, "that recorded nothing (--prune removes them)"),
            (len(hidden) - empty, "of saved modules"),
        )
        if count
    ]
    if unlisted:
        make_console().print(
            f"not listed: {'; '.join(unlisted)}; --all lists them", highlight=False
        )


def _print_runs(run_store, rows: list[dict]) -> None:
    """The runs, one a line, their ids never cut: a table on a terminal wide enough for
    it (other columns fold), else plain columns (a pipe, a file, a narrow terminal)."""
    from datetime import datetime

    from rich import box
    from rich.table import Table
    from rich.text import Text

    console = make_console()
    header = ("run id", "kind", "status", "model", "latency", "date")
    lines = []
    for row in rows:
        created = row["created_at"] or ""
        if created:
            created = datetime.fromisoformat(created).astimezone().strftime("%Y-%m-%d %H:%M")
        model = row["model"] or ""
        if model and Path(model).suffix:
            model = Path(model).name  # a file: its name (the path is in context.json)
        latency = f"{latency_text(row['latency_ms'])} ms" if row["latency_ms"] else ""
        lines.append((row["run_id"], row["kind"] or "", row["status"], model, latency, created))
    console.print(f"runs in {run_store.root}", highlight=False, soft_wrap=True)
    if not rows:
        console.print("none yet: simpletvm quickstart, or simpletvm tune MODEL")
        return
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    if not console.is_terminal or console.width < sum(widths) + 2 * len(widths):
        for line in [header, *lines]:
            print(
                "  ".join(
                    f"{cell:>{w}}" if i == 4 else f"{cell:<{w}}"
                    for i, (cell, w) in enumerate(zip(line, widths))
                ).rstrip()
            )
        return
    styles = {"ok": "green", "failed": "red", "interrupted": "yellow", "running": "cyan"}
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("run id", no_wrap=True, min_width=32)
    for column in header[1:]:
        table.add_column(
            column, overflow="fold", justify="right" if column == "latency" else "left"
        )
    for line in lines:
        table.add_row(line[0], line[1], Text(line[2], style=styles.get(line[2], "")), *line[3:])
    console.print(table)


def _prune(run_store, rows: list[dict], yes: bool) -> None:
    """Remove failed and empty runs, naming each, after a confirmation."""
    import shutil

    doomed = [row for row in rows if row["status"] in ("failed", "empty")]
    console = make_console()
    if not doomed:
        console.print("nothing to prune: no failed or empty runs")
        return
    for row in doomed:
        console.print(
            f"  {row['run_id']}  {row['status']:<7} {row['kind'] or ''} {row['model'] or ''}",
            highlight=False,
        )
    if not yes and not typer.confirm(f"remove these {len(doomed)} runs?", default=False):
        console.print("removed none")
        return
    for row in doomed:
        shutil.rmtree(run_store.run_dir(row["run_id"]), ignore_errors=True)
        shutil.rmtree(run_store.module_dir(row["run_id"]), ignore_errors=True)
    console.print(f"removed {len(doomed)} runs")
