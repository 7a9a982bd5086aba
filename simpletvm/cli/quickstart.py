"""``simpletvm quickstart``: a built-in model tuned and timed against untuned and TFLite."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from simpletvm.cli.guard import active_contexts, refuse
from simpletvm.cli.program import command
from simpletvm.cli.reports import (
    estimate_text,
    print_skipped,
    print_unchecked,
    tuning_progress,
    tuning_time,
    tuning_verdict,
)
from simpletvm.cli_options import MIN_MINUTES, MINUTES_HELP, STORE_HELP, THREADS_HELP
from simpletvm.console import latency_text, make_console

# the quickstart's comparison: 1000 calls per side and thread count in 20 turns, about a
# second in all (100 calls in 5 turns were over in a tenth of one: a short stall of the
# shared host moved a median by several percent)
COMPARISON_ROUNDS = 20
COMPARISON_CALLS = 50


@command()
def quickstart(
    model: str = typer.Option(
        "mobilenetv2", help="built-in model: mobilenet, mobilenetv2, resnet18, resnet50"
    ),
    image_size: int = typer.Option(96, help="input height and width"),
    alpha: float | None = typer.Option(0.35, help="width multiplier (MobileNets only)"),
    minutes: float = typer.Option(5.0, min=MIN_MINUTES, help=MINUTES_HELP),
    trials: int | None = typer.Option(
        None,
        min=1,
        help="at most this many measured candidates per task (default: no cap within the minutes)",
    ),
    store: Path | None = typer.Option(None, help=STORE_HELP),
    seed: int = typer.Option(0, help="seed for weights and search"),
    threads: int | None = typer.Option(None, min=1, help=THREADS_HELP),
) -> None:
    """Tune a built-in model and time it against untuned and TFLite.

    Imports a built-in model, measures it untuned, autotunes it, builds, saves and
    measures it again, on this machine's CPU; then times it side by side with TFLite
    (XNNPACK) on the same input when TensorFlow is installed. Prints where the run's
    results are."""
    from rich.logging import RichHandler
    from rich.table import Table

    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.errors import SimpleTVMError

    console = make_console()
    ctx = BenchmarkingContext("cpu", store=store, num_threads=threads)
    ctx.kind = "quickstart"
    active_contexts.append(ctx)
    handler = RichHandler(console=console, show_path=False, show_time=False)
    handler.setLevel(logging.INFO)
    # the tuning's progress line tells what the per-task lines would (they stay in the log)
    handler.addFilter(lambda record: not getattr(record, "tuning_task", False))
    ctx.logger.addHandler(handler)
    options = {"image_size": image_size, "seed": seed}
    if alpha is not None and "mobilenet" in model:
        options["alpha"] = alpha
    stvm = SimpleTVM(ctx)
    try:
        stvm.from_model(model, **options)
        ctx.status = "running"
        ctx.save()  # listed as running while it works
        untuned = stvm.build(records=None).evaluate().last_evaluation
        untuned_module = _untuned_runner(stvm, options)  # kept across the rebuild
        stvm.autotune(
            trials=trials,
            minutes=minutes,
            seed=seed,
            progress=tuning_progress(console, model, minutes),
        )
        tuned = stvm.build(records="run").save().evaluate().last_evaluation
    except (SimpleTVMError, ValueError) as error:
        ctx.status = "failed"
        ctx.save()
        raise refuse(console, error) from error
    ctx.status = "ok"
    context_path = ctx.save()
    summary = stvm.tuning_summary
    table = Table(title=f"{model} on {ctx.target_spec.get('mcpu')} ({ctx.host['cpu_model']})")
    checked = tuned["max_rel_error"] is not None
    error_column = f"rel. error vs {tuned['reference']}" if checked else "rel. error"
    for column in ("build", "median ms", "mean ms", "p90 ms", error_column):
        table.add_column(column, justify="right")
    for name, evaluation in (("untuned", untuned), ("tuned", tuned)):
        error = evaluation["max_rel_error"]
        table.add_row(
            name,
            *(latency_text(evaluation[key]) for key in ("median_ms", "mean_ms", "p90_ms")),
            "-" if error is None else f"{error:.1e}",
        )
    console.print(table)
    print_unchecked(console, tuned)
    verdict = tuning_verdict(
        float(latency_text(untuned["median_ms"])), float(latency_text(tuned["median_ms"]))
    )
    console.print(
        f"{verdict} (median) after {summary['trials']} trials over {summary['num_tasks']} "
        f"tasks in {tuning_time(summary)}; {estimate_text(summary)}"
    )
    print_skipped(console, summary)
    _compare_with_tflite(console, stvm, model, options, untuned_module)
    console.print(f"run id   {ctx.run_id}", soft_wrap=True)
    console.print(f"context  {context_path}", soft_wrap=True)
    console.print(f"module   {ctx.artifacts.get('module')}", soft_wrap=True)
    console.print(f"log      {ctx.store.log_path(ctx.run_id)}", soft_wrap=True)


def _example(options: dict):
    import numpy as np

    size = options["image_size"]
    return np.random.default_rng(0).standard_normal((1, size, size, 3)).astype("float32")


def _untuned_runner(stvm, options: dict):
    """The built module's entry on the quickstart's input; it keeps the module it was
    made from when ``stvm`` builds again."""
    from simpletvm.runtime.comparison import simpletvm_runner

    return simpletvm_runner(stvm, _example(options))


def _compare_with_tflite(console, stvm, model: str, options: dict, untuned) -> None:
    """Time the tuned module, the ``untuned`` one and TFLite (XNNPACK) on one input, in
    turns, from Python: what a user's inference loop sees of either. Each runs on every
    core and on one (the modules only on their count when ``--threads`` pins one), and
    the comparison takes each one's faster count."""
    import numpy as np

    from simpletvm.models.zoo import builtin_tflite
    from simpletvm.runtime.comparison import (
        at_thread_counts,
        simpletvm_runner,
        tflite_runners,
        thread_counts,
        time_side_by_side,
    )

    example = _example(options)
    try:
        tflite = tflite_runners(
            builtin_tflite(model, stvm.store.zoo_dir, **options), example, stvm.target.host_cores()
        )
    except ImportError:
        console.print("TFLite is not installed here: no comparison")
        return
    modules = {"SimpleTVM": simpletvm_runner(stvm, example), "SimpleTVM untuned": untuned}
    with at_thread_counts(modules, thread_counts(stvm)) as ours:
        sides = {**ours, "TFLite (XNNPACK)": tflite}
        runners = {
            (side, count): infer
            for side, by_count in sides.items()
            for count, infer in by_count.items()
        }
        samples = time_side_by_side(
            runners, rounds=COMPARISON_ROUNDS, calls=COMPARISON_CALLS, warmup=5
        )
    medians = {key: float(np.median(values)) * 1e3 for key, values in samples.items()}
    fastest = {
        side: min(medians[side, count] for count in by_count) for side, by_count in sides.items()
    }
    timings = "; ".join(
        f"{side} "
        + ", ".join(f"{medians[side, count]:.3f} ms on {_threads(count)}" for count in by_count)
        for side, by_count in sides.items()
    )
    # the table's medians were timed minutes apart, these in the same rounds
    tuned_over_untuned = fastest["SimpleTVM"] / fastest["SimpleTVM untuned"]
    console.print(
        f"side by side on one input (median per call from Python): {timings}. "
        f"Each on its faster count: {_against_tflite('SimpleTVM', fastest)}; "
        f"{_against_tflite('SimpleTVM untuned', fastest)}; SimpleTVM / SimpleTVM untuned "
        f"{tuned_over_untuned:.2f}x in the same rounds (the table's medians were timed "
        "minutes apart, as the host's speed moved)"
    )


def _against_tflite(side: str, fastest: dict[str, float]) -> str:
    ratio = f"{fastest[side] / fastest['TFLite (XNNPACK)']:.2f}"  # the verdict reads it as printed
    verdict = "as fast" if ratio == "1.00" else "faster" if float(ratio) < 1 else "slower"
    return f"{side} / TFLite {ratio}x, {side} is {verdict}"


def _threads(count: int) -> str:
    return f"{count} thread" + ("" if count == 1 else "s")
