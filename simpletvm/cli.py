"""The ``simpletvm`` command: a quickstart that tunes a built-in model end to end."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Autotune deep-learning models with Apache TVM.")


@app.command()
def quickstart(
    model: str = typer.Option("mobilenetv2", help="built-in model: mobilenet, mobilenetv2, "
                              "resnet18, resnet50"),
    image_size: int = typer.Option(96, help="input height and width"),
    alpha: Optional[float] = typer.Option(0.35, help="width multiplier (MobileNets only)"),
    trials: int = typer.Option(16, min=1, help="measured candidates per task"),
    batch_size: int = typer.Option(16, min=1, help="candidates per iteration: larger "
                                   "batches spend less time in the select stage"),
    population: int = typer.Option(128, min=8, help="evolutionary search population"),
    store: Optional[Path] = typer.Option(None, help="run store root "
                                         "(default: $SIMPLETVM_HOME or ~/tvm-benchmark)"),
    seed: int = typer.Option(0, help="seed for weights and search"),
) -> None:
    """Import a built-in model, measure it untuned, autotune it, build, save and measure
    it again, on this machine's CPU. Prints where the run's results are."""
    from rich.console import Console
    from rich.logging import RichHandler
    from rich.table import Table

    from . import BenchmarkingContext, SimpleTVM
    from .errors import SimpleTVMError

    console = Console()
    ctx = BenchmarkingContext("cpu", store=store)
    handler = RichHandler(console=console, show_path=False, show_time=False)
    handler.setLevel(logging.INFO)
    ctx.logger.addHandler(handler)
    options = {"image_size": image_size, "seed": seed}
    if alpha is not None and "mobilenet" in model:
        options["alpha"] = alpha
    stvm = SimpleTVM(ctx)
    try:
        stvm.from_model(model, **options)
        untuned = stvm.build(records=None).evaluate().last_evaluation
        stvm.autotune(trials=trials, batch_size=batch_size, population=population, seed=seed)
        tuned = stvm.build(records="run").save().evaluate().last_evaluation
    except (SimpleTVMError, ValueError) as error:
        ctx.save()
        console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(1) from error
    context_path = ctx.save()
    summary = stvm.tuning_summary
    table = Table(title=f"{model} on {ctx.target_spec.get('mcpu')} ({ctx.host['cpu_model']})")
    for column in ("build", "median ms", "mean ms", "p90 ms"):
        table.add_column(column, justify="right")
    table.add_row("untuned", f"{untuned['median_ms']:.3f}", f"{untuned['mean_ms']:.3f}",
                  f"{untuned['p90_ms']:.3f}")
    table.add_row("tuned", f"{tuned['median_ms']:.3f}", f"{tuned['mean_ms']:.3f}",
                  f"{tuned['p90_ms']:.3f}")
    console.print(table)
    tuning_s = ctx.step_durations().get("autotune", 0.0)
    console.print(
        f"speedup {untuned['median_ms'] / tuned['median_ms']:.2f}x after "
        f"{summary['trials']} trials over {summary['num_tasks']} tasks in {tuning_s:.0f} s")
    console.print(f"run id   {ctx.run_id}")
    console.print(f"context  {context_path}")
    console.print(f"module   {ctx.artifacts.get('module')}")
    console.print(f"log      {ctx.store.log_path(ctx.run_id)}")


@app.command()
def runs(store: Optional[Path] = typer.Option(None, help="run store root")) -> None:
    """List the runs in the store with their model and evaluation."""
    import json

    from rich.console import Console
    from rich.table import Table

    from .store import RunStore

    run_store = RunStore(store)
    table = Table(title=str(run_store.root))
    for column in ("run id", "created", "model", "tasks", "trials", "median ms"):
        table.add_column(column)
    for run_id in run_store.run_ids():
        path = run_store.context_path(run_id)
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        evaluation = data.get("evaluation") or {}
        table.add_row(run_id, data.get("created_at", "")[:19],
                      str(data.get("model", {}).get("source", "")),
                      str(data.get("model", {}).get("num_tasks", "")),
                      str(data.get("tuning", {}).get("trials", "")),
                      f"{evaluation['median_ms']:.3f}" if "median_ms" in evaluation else "")
    Console().print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
