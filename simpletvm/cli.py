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
    minutes: float = typer.Option(5.0, min=0.1, help="wall-clock tuning budget"),
    trials: int = typer.Option(64, min=1, help="at most this many measured candidates "
                               "per task"),
    store: Optional[Path] = typer.Option(None, help="run store root "
                                         "(default: $SIMPLETVM_HOME or ~/tvm-benchmark)"),
    seed: int = typer.Option(0, help="seed for weights and search"),
) -> None:
    """Import a built-in model, measure it untuned, autotune it for a few minutes, build,
    save and measure it again, on this machine's CPU; then time it side by side with
    TFLite (XNNPACK) on the same input when TensorFlow is installed. Prints where the
    run's results are."""
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
        stvm.autotune(trials=trials, minutes=minutes, seed=seed)
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
    _compare_with_tflite(console, stvm, model, options)
    console.print(f"run id   {ctx.run_id}")
    console.print(f"context  {context_path}")
    console.print(f"module   {ctx.artifacts.get('module')}")
    console.print(f"log      {ctx.store.log_path(ctx.run_id)}")


def _compare_with_tflite(console, stvm, model: str, options: dict) -> None:
    """Time the tuned module and TFLite (XNNPACK) on one input, in turns, from Python:
    what a user's inference loop sees of either."""
    import numpy as np

    from .comparison import simpletvm_runner, time_side_by_side, tflite_runner
    from .models.tflite import keras_to_tflite
    from .models.zoo import build_keras_model

    try:
        keras_model = build_keras_model(model, **options)
        flatbuffer = keras_to_tflite(keras_model)
    except ImportError:
        console.print("TFLite is not installed here: no comparison")
        return
    size = options["image_size"]
    example = np.random.default_rng(0).standard_normal((1, size, size, 3)).astype("float32")
    threads = stvm.target.spec.get("num-cores", 1)
    runners = {"SimpleTVM tuned": simpletvm_runner(stvm, example),
               "TFLite (XNNPACK)": tflite_runner(flatbuffer, example, threads)}
    samples = time_side_by_side(runners, rounds=5, calls=20, warmup=5)
    medians = {name: float(np.median(s)) * 1e3 for name, s in samples.items()}
    ours, theirs = medians["SimpleTVM tuned"], medians["TFLite (XNNPACK)"]
    verdict = "faster" if ours < theirs else "slower"
    console.print(f"side by side on one input ({threads} threads, median per call from "
                  f"Python): SimpleTVM {ours:.3f} ms, TFLite {theirs:.3f} ms: "
                  f"{theirs / ours:.2f}x, SimpleTVM is {verdict}")


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
